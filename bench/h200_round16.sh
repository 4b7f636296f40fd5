#!/usr/bin/env bash
# Round 16 on the H200, one call under DEADLINE seconds (default 300). The exact-mass top-p search
# with its significand sums as two u32 half sums (round 15's u64 shared-memory atomics compiled
# to compare-and-swap loops): top-p B1 / B64 and top-k + top-p from logits B1 / B128, counting
# search beside exact, and both at cluster blocks of 1024, 512 and 384 threads at B1. Then the
# exact-mass GPU test (round 15's failed on a test bug: logits with top_k 0) beside the sampling
# suite, and racecheck of the exact-mass case. Builds nothing: run from the repo root with
# build-h200 carried; KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 300
{
  header
  stamp "top-p (V 128256, fp32 probs): bounds (counting) search, then exact masses"
  for b in 1 64; do
    for m in bounds exact; do
      bench top_p_sampling --set vocab=128256 --set batch=$b --set mass=$m
    done
  done
  for th in 1024 512 384; do
    for m in bounds exact; do
      bench top_p_sampling --set vocab=128256 --set batch=1 --set mass=$m --set path=cluster \
        --set cluster=16 --set threads=$th
    done
  done
  stamp "top-k + top-p from bf16 logits, no top-k (k = vocab): counting, then exact"
  for b in 1 128; do
    for m in bounds exact; do
      bench top_k_top_p_sampling --set dtype=bf16 --set vocab=128256 --set batch=$b \
        --set k=128256 --set mass=$m
    done
  done
  for th in 1024 512; do
    bench top_k_top_p_sampling --set dtype=bf16 --set vocab=128256 --set batch=1 --set k=50 \
      --set path=cluster --set cluster=16 --set threads=$th
  done
  stamp "GPU tests (sampling) beside racecheck"
  tests gpu_tests.log 200 "$T" "sampling gpu: the exact-mass top-p search*" --durations yes &
  t1=$!
  tests gpu_tests_b.log 200 "$T" '[gpu][sampling] ~"sampling gpu: the exact-mass*"' \
    --durations yes &
  t2=$!
  mkdir -p /tmp/rc
  echo "sampling gpu: the exact-mass top-p search draws the counting search's tokens" > /tmp/rc/cases
  rc_run_all
  wait $t1 $t2
  rc_report
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
