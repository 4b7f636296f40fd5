#!/usr/bin/env bash
# Round 8 on the H200: correctness of round 7's new paths (sampling clusters, argmax, trace), the
# RoPE variants worth promoting (tests + the 65536-token row), argmax under the new heuristic, an
# ncu profile of decode attention (why it sits at ~87% of the read probe), compute-sanitizer over
# the cluster kernels; part b: the decode-attention tests and racecheck. Builds nothing: run from
# the repo root with build-h200 carried; KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
part=${1:-a}
if [ "$part" = a ]; then {
  header
  stamp "GPU tests: sampling (both paths), argmax, trace"
  tests gpu_tests.log 160 "$B/tests/kjit_gpu_tests" "[sampling]"
  tests gpu_tests.log 60 "$B/tests/kjit_gpu_tests" "[argmax],[trace]"

  stamp "rope variant uniform: GPU tests, then timings beside the default"
  echo "-- [rope] tests with rope_uniform"
  KJIT_KERNEL_DIR=bench/variants/rope_uniform tests rope_tests.log 45 "$B/tests/kjit_gpu_tests" "[rope]"
  R="rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128"
  for v in default uniform; do
    [ $v = default ] && unset KJIT_KERNEL_DIR || export KJIT_KERNEL_DIR=bench/variants/rope_$v
    echo "-- rope $v"
    bench $R --set tokens=65536
    for t in cupti events-batched; do
      for n in 1 64; do bench $R --set tokens=$n --timer $t --hot-l2; done
    done
  done
  unset KJIT_KERNEL_DIR
  bench empty --timer events-batched --hot-l2

  stamp "argmax under the new heuristic (V 128256)"
  for b in 1 8 64; do bench argmax --set dtype=fp32 --set batch=$b --set vocab=128256; done
  bench argmax --set dtype=bf16 --set batch=256 --set vocab=128256

  stamp "ncu: decode attention B64 x L4096, default plan"
  timeout 120 /usr/local/cuda/bin/ncu --section SpeedOfLight --section MemoryWorkloadAnalysis \
    --section WarpStateStats --section Occupancy --section SchedulerStats --section LaunchStats \
    -k regex:decode_kernel --launch-skip 1 --launch-count 1 \
    "$CLI" bench decode_attention --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 \
    --set head_dim=128 --set page_size=16 --set batch=64 --set kv_len=4096 --timer events \
    --warmup 1 --iters 2 --no-check > "$OUT/ncu_decode.txt" 2>&1
  echo "ncu rc $?"; grep -E "Duration|DRAM Throughput|Memory Throughput|Stall|Warp Cycles|Achieved Occupancy|Issued Ipc|No Eligible" "$OUT/ncu_decode.txt" | head -30

  stamp "compute-sanitizer memcheck: the cluster kernels (sampling, argmax)"
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout 120 $CS --tool memcheck --error-exitcode 9 \
    "$B/tests/kjit_gpu_tests" "[cluster],[argmax]" > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc $?"; tail -4 "$OUT/memcheck.log"
  stamp "done"
} 2>&1 | tee "$OUT/run.log"; else {
  header
  stamp "GPU tests: decode attention (tuning variants included)"
  tests gpu_tests_attention.log 200 "$B/tests/kjit_gpu_tests" "[attention]"
  stamp "compute-sanitizer racecheck: argmax, one decode case"
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout 70 $CS --tool racecheck --error-exitcode 9 \
    "$B/tests/kjit_gpu_tests" "[argmax],decode gpu: every group size, odd lengths" > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc $?"; tail -4 "$OUT/racecheck.log"
  stamp "done"
} 2>&1 | tee "$OUT/run_b.log"; fi
