#!/usr/bin/env bash
# Round 17 on the H200, one call under DEADLINE seconds (default 420). The sampler defaults of
# round 16 (exact-mass top-p, about 16 elements a cluster thread) and four B1 cuts (one pass-0
# reduction, the first merge on the exchange's barrier, the leader's early seed / offset, logits'
# first merge to 2.0's bin): the issue's rows beside PyTorch's sort-based samplers in the same
# call, then the sampling GPU tests in three processes beside racecheck of four cluster cases and
# memcheck of the cluster group (KJIT_TEST_UNDER_SANITIZER=1). Builds nothing: run from the repo
# root with build-h200 carried; KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 420
{
  header
  stamp "top-p (V 128256, fp32 probs): defaults, the block sizes, and the counting search"
  TP="top_p_sampling --set vocab=128256"
  for b in 1 64; do bench $TP --set batch=$b; done
  for th in 512 1024; do
    bench $TP --set batch=1 --set path=cluster --set cluster=16 --set threads=$th
  done
  bench $TP --set batch=1 --set cluster=8 --set path=cluster
  bench $TP --set batch=64 --set mass=bounds
  stamp "top-k + top-p from bf16 logits: k 50 (counting) and no top-k (exact)"
  KP="top_k_top_p_sampling --set dtype=bf16 --set vocab=128256"
  for b in 1 128; do
    bench $KP --set batch=$b
    bench $KP --set batch=$b --set k=128256
  done
  bench $KP --set batch=1 --set path=cluster --set cluster=16 --set threads=1024
  stamp "PyTorch sort-based peers (same shapes)"
  for op in top_p_sampling top_k_top_p_sampling; do
    timeout 90 python3 bench/peers/torch_sampling.py --op $op --json "$P" 2>&1 | tail -4
  done
  stamp "GPU tests (sampling) beside racecheck and memcheck"
  tests gpu_tests.log 240 "$T" "[gpu][sampling][cluster]" --durations yes &
  t1=$!
  tests gpu_tests_b.log 240 "$T" "[gpu][sampling]~[cluster]" --durations yes &
  t2=$!
  KJIT_TEST_UNDER_SANITIZER=1 KJIT_CACHE_DIR=/tmp/mc-cache timeout 240 "$CS" --tool memcheck \
    --error-exitcode 9 "$T" "[gpu][sampling][cluster]" > "$OUT/memcheck.log" 2>&1 &
  t3=$!
  mkdir -p /tmp/rc
  cat > /tmp/rc/cases <<'CASES'
sampling gpu: the exact-mass top-p search draws the counting search's tokens
sampling gpu: cluster path from logits (fp32, bf16, fp16), per-row parameters
sampling gpu: cluster path reports the same invalid rows
sampling gpu: cluster path replays in a captured graph, auto batch 1 matches
CASES
  rc_run_all
  wait $t1 $t2
  wait $t3
  echo "memcheck rc $? | $(grep -E 'ERROR SUMMARY' "$OUT/memcheck.log")"
  tail -4 "$OUT/memcheck.log"
  rc_report
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
