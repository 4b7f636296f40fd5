#!/usr/bin/env bash
# Round 6 on the H200: the first timing of decode attention and sampling (round 5's bench runs
# failed on the driver-table bug fixed in d1ecec7), the sampling tests fixed after round 5, the
# harness's timers on rmsnorm, the decode floor with CUPTI (RoPE at 1 token), and
# compute-sanitizer over the new families. Each section is time-boxed and writes to $OUT as it
# goes. Builds nothing: run from the repo root with build-h200 carried; KJIT_COMMIT names the
# commit the binaries were built from.
set -uo pipefail
B=${B:-build-h200}
CLI=$B/tools/kjit-cli/kjit-cli
export KJIT_CACHE_DIR=/tmp/kjit-cache
J="$OUT/bench.jsonl"
P="$OUT/peers.jsonl"
tests() {  # tests LOG SECONDS BINARY SPEC...
  local log=$1 secs=$2
  shift 2
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout "$secs" "$@" 2>&1 | tee -a "$OUT/$log" | tail -4
}
bench() { timeout 90 "$CLI" bench "$@" --json "$J" 2>&1 | grep -v '^  repro' | tail -6; }
part=${1:-a}  # a: tests and timings; b: sanitizers and the CLI tests (each fits one 600 s call)
if [ "$part" = a ]; then {
  date -u +%FT%TZ
  echo "commit ${KJIT_COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  ldd "$B/libkjit.so" | grep "not found" || echo "libkjit.so: every dependency found"
  echo "== GPU tests: sampling, attention"
  tests gpu_tests.log 180 "$B/tests/kjit_gpu_tests" "[sampling],[attention]"

  echo "== decode attention (GQA 32/8, head_dim 128, page 16, bf16; cupti, cold L2)"
  for s in "64 4096" "256 2048" "1 8192" "16 32768"; do
    set -- $s
    bench decode_attention --set dtype=bf16 --set batch=$1 --set kv_len=$2 --set qo_heads=32 \
      --set kv_heads=8 --set head_dim=128 --set page_size=16
  done
  timeout 120 python3 bench/peers/torch_decode_attention.py --json "$P" 2>&1 | tail -12

  echo "== sampling (V 128256)"
  bench top_p_sampling --set batch=64 --set vocab=128256
  bench top_p_sampling --set batch=1 --set vocab=128256
  bench top_k_top_p_sampling --set dtype=bf16 --set batch=128 --set vocab=128256
  bench top_k_top_p_sampling --set dtype=fp32 --set batch=1 --set vocab=128256
  bench argmax --set dtype=fp32 --set batch=64 --set vocab=128256
  bench argmax --set dtype=bf16 --set batch=256 --set vocab=128256
  for op in top_p_sampling top_k_top_p_sampling; do
    timeout 90 python3 bench/peers/torch_sampling.py --op $op --json "$P" 2>&1 | tail -8
  done

  echo "== harness: rmsnorm bf16 16384x8192 by each timer"
  R="rmsnorm --set dtype=bf16 --set rows=16384 --set hidden=8192 --backends kjit,copy"
  bench $R --timer cupti --cold-l2
  bench $R --timer events --cold-l2
  bench $R --timer cupti --hot-l2
  bench $R --timer events-batched --hot-l2

  echo "== the decode floor: back to back (events-batched) and kernel time (cupti), hot L2"
  for t in events-batched cupti; do
    bench empty --timer $t --hot-l2
    for n in 1 64; do
      bench rope --set dtype=bf16 --set tokens=$n --set qo_heads=32 --set kv_heads=8 \
        --set head_dim=128 --timer $t --hot-l2
    done
    bench rmsnorm --set dtype=bf16 --set rows=1 --set hidden=4096 --timer $t --hot-l2
  done

} 2>&1 | tee "$OUT/run.log"; else {
  date -u +%FT%TZ
  echo "== compute-sanitizer over the new families"
  CS=/usr/local/cuda/bin/compute-sanitizer
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout 240 $CS --tool memcheck --error-exitcode 9 \
    "$B/tests/kjit_gpu_tests" "[attention],[sampling]" > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc $?"; tail -3 "$OUT/memcheck.log"
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout 200 $CS --tool racecheck --error-exitcode 9 \
    "$B/tests/kjit_gpu_tests" "[attention]" > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc $?"; tail -3 "$OUT/racecheck.log"

  echo "== CLI bench tests with a GPU"
  tests unit_gpu.log 90 "$B/tests/kjit_unit_tests" "cli bench*"
} 2>&1 | tee "$OUT/run_b.log"; fi
