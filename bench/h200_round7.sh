#!/usr/bin/env bash
# Round 7 on the H200: the tuning round. Decode attention variants, the sampling cluster path,
# argmax split across CTAs and RoPE decode variants, each timed beside the round-6 kernel in the
# same call with the reference check on; the decode floor of every elementwise op under the new
# harness; peers again; then (part b) compute-sanitizer and the remaining GPU tests. Each section
# is time-boxed and writes to $OUT as it goes. Builds nothing: run from the repo root with
# build-h200 carried; KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
B=${B:-build-h200}
CLI=$B/tools/kjit-cli/kjit-cli
export KJIT_CACHE_DIR=/tmp/kjit-cache
J="$OUT/bench.jsonl"
P="$OUT/peers.jsonl"
stamp() { echo "[$(date -u +%T)] $*"; }
tests() {  # tests LOG SECONDS BINARY SPEC...
  local log=$1 secs=$2
  shift 2
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout "$secs" "$@" 2>&1 | tee -a "$OUT/$log" | tail -4
}
bench() { timeout 90 "$CLI" bench "$@" --json "$J" 2>&1 | grep -v '^  repro' | tail -6; }
part=${1:-a}
if [ "$part" = a ]; then {
  date -u +%FT%TZ
  echo "commit ${KJIT_COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  stamp "GPU tests: attention, sampling, trace, rope"
  tests gpu_tests.log 150 "$B/tests/kjit_gpu_tests" "[attention],[sampling],[argmax],[trace]"

  stamp "decode attention sweep (GQA 32/8, head_dim 128, page 16, bf16; cupti, cold L2)"
  A="decode_attention --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  FINE="--set warps=2 --set stage_tokens=32 --set stages=6"
  HP2F="--set heads_per_cta=2 --set warps=2 --set stage_tokens=16 --set stages=6"
  HP8="--set heads_per_cta=8 --set warps=8 --set stage_tokens=16 --set stages=3"
  for s in "64 4096" "256 2048" "16 32768" "1 8192"; do
    set -- $s
    S="--set batch=$1 --set kv_len=$2"
    bench $A $S
    case $1 in
      64) for v in "$FINE" "--set heads_per_cta=2" "$HP2F" "--set heads_per_cta=4" "$HP8" \
            "--set layout=hnd"; do bench $A $S $v; done ;;
      256) for v in "$HP2F" "--set heads_per_cta=4"; do bench $A $S $v; done ;;
      16) for v in "$HP2F --set merge=fused" "--set heads_per_cta=4 --set merge=fused"; do
            bench $A $S $v; done ;;
      1) for v in "--set merge=fused" "$FINE --set merge=fused" "$HP8"; do bench $A $S $v; done ;;
    esac
  done
  timeout 100 python3 bench/peers/torch_decode_attention.py --json "$P" 2>&1 | grep -v Warning | grep -v "return F" | tail -12

  stamp "sampling: cluster vs single-CTA paths, argmax (V 128256)"
  T="top_p_sampling --set vocab=128256"
  KP="top_k_top_p_sampling --set vocab=128256"
  bench $T --set batch=1 --set path=single
  bench $T --set batch=1
  bench $T --set batch=1 --set path=cluster --set cluster=8
  bench $T --set batch=1 --set path=cluster --set cluster=4
  bench $KP --set dtype=fp32 --set batch=1 --set path=single
  bench $KP --set dtype=fp32 --set batch=1
  bench $T --set batch=64 --set path=single
  bench $T --set batch=64
  bench $KP --set dtype=bf16 --set batch=128
  bench $KP --set dtype=bf16 --set batch=128 --set path=cluster --set cluster=2
  M="argmax --set vocab=128256"
  for p in block auto "cluster --set cluster=4"; do bench $M --set dtype=fp32 --set batch=64 --set path=$p; done
  for p in block auto; do bench $M --set dtype=bf16 --set batch=256 --set path=$p; done
  for p in block auto; do bench $M --set dtype=fp32 --set batch=1 --set path=$p; done
  for op in top_p_sampling top_k_top_p_sampling; do
    timeout 90 python3 bench/peers/torch_sampling.py --op $op --json "$P" 2>&1 | tail -8
  done

  stamp "the decode floor: back to back (events-batched) and kernel time (cupti), hot L2"
  floor() {  # floor TIMER
    local t=$1 n
    bench empty --timer $t --hot-l2
    for n in 1 64; do
      bench rmsnorm --set dtype=bf16 --set rows=$n --set hidden=4096 --timer $t --hot-l2
      bench fused_add_rmsnorm --set dtype=bf16 --set rows=$n --set hidden=4096 --timer $t --hot-l2
      bench layernorm --set dtype=bf16 --set rows=$n --set hidden=4096 --timer $t --hot-l2
      bench act_and_mul --set act=silu --set dtype=bf16 --set rows=$n --set d=14336 --timer $t --hot-l2
      bench append_paged_kv --set dtype=bf16 --set tokens=$n --set kv_heads=8 --set head_dim=128 \
        --set page_size=16 --timer $t --hot-l2
    done
  }
  floor events-batched
  stamp "rope variants"
  R="rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128"
  for v in default base early smem angles uniform; do
    [ $v = default ] && unset KJIT_KERNEL_DIR || export KJIT_KERNEL_DIR=bench/variants/rope_$v
    echo "-- rope variant $v"
    for n in 1 64; do bench $R --set tokens=$n --timer cupti --hot-l2; done
    case $v in default|smem|angles)
      for n in 1 64; do bench $R --set tokens=$n --timer events-batched --hot-l2; done
      bench $R --set tokens=65536 ;;
    esac
    [ $v = early ] && bench $R --set tokens=65536
  done
  unset KJIT_KERNEL_DIR
  bench empty --timer events-batched --hot-l2
  bench empty --timer cupti --hot-l2
  stamp "the decode floor, CUPTI"
  floor cupti
  stamp "done"
} 2>&1 | tee "$OUT/run.log"; else {
  date -u +%FT%TZ
  CS=/usr/local/cuda/bin/compute-sanitizer
  stamp "compute-sanitizer memcheck: attention, sampling, rope, trace"
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout 200 $CS --tool memcheck --error-exitcode 9 \
    "$B/tests/kjit_gpu_tests" "[attention],[sampling],[argmax],[trace]" > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc $?"; tail -3 "$OUT/memcheck.log"
  stamp "compute-sanitizer racecheck: attention, sampling"
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout 160 $CS --tool racecheck --error-exitcode 9 \
    "$B/tests/kjit_gpu_tests" "[attention],[sampling],[argmax]" > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc $?"; tail -3 "$OUT/racecheck.log"
  stamp "CLI bench tests with a GPU, AOT"
  tests unit_gpu.log 60 "$B/tests/kjit_unit_tests" "cli bench*,[gpu-aot]"
  stamp "GPU tests: the other families"
  tests gpu_tests_rest.log 150 "$B/tests/kjit_gpu_tests" "~[attention]~[sampling]~[replay]~[trace]~[rope]"
  stamp "done"
} 2>&1 | tee "$OUT/run_b.log"; fi
