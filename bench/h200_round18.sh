#!/usr/bin/env bash
# Round 18 on the H200, one call under DEADLINE seconds (default 330). The cluster sampling
# kernels bounded at 512 threads (no local memory), top-k rows on the counting kernel, the
# cluster draw over a fixed 1024-thread layout: the issue's rows, B64 on clusters of 2 (now 512
# threads) beside one block a row, then the sampling GPU tests beside racecheck of three cluster
# cases and memcheck of the whole GPU suite in five groups (KJIT_TEST_UNDER_SANITIZER=1).
# Builds nothing: run from the repo root with build-h200 carried; KJIT_COMMIT names the commit
# the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 330
{
  header
  stamp "top-p (V 128256, fp32 probs)"
  TP="top_p_sampling --set vocab=128256"
  for b in 1 64 128; do bench $TP --set batch=$b; done
  bench $TP --set batch=64 --set path=single
  bench $TP --set batch=1 --set path=cluster --set cluster=16 --set threads=384
  bench $TP --set batch=1 --set path=cluster --set cluster=8
  stamp "top-k + top-p from bf16 logits: k 50 (counting) and no top-k (exact)"
  KP="top_k_top_p_sampling --set dtype=bf16 --set vocab=128256"
  for b in 1 64 128; do bench $KP --set batch=$b; done
  bench $KP --set batch=64 --set path=single
  for b in 1 128; do bench $KP --set batch=$b --set k=128256; done
  bench $KP --set batch=1 --set path=cluster --set cluster=16 --set threads=384
  stamp "GPU tests (sampling) beside racecheck and memcheck of the whole GPU suite by groups"
  tests gpu_tests.log 200 "$T" "[gpu][sampling][cluster]" --durations yes &
  t1=$!
  tests gpu_tests_b.log 200 "$T" "[gpu][sampling]~[cluster]" --durations yes &
  t2=$!
  mc=()
  i=0
  for g in "[gpu][sampling][cluster]" "[gpu][sampling]~[cluster]" \
    "[gpu][attention]~decode gpu: tuning variants*" "decode gpu: tuning variants*" \
    "[gpu]~[sampling]~[attention]"; do
    i=$((i + 1))
    ( KJIT_TEST_UNDER_SANITIZER=1 KJIT_CACHE_DIR=/tmp/mc-cache$i timeout 240 "$CS" --tool memcheck \
        --error-exitcode 9 "$T" "$g" > "$OUT/memcheck_$i.log" 2>&1
      echo "memcheck rc $? | $g | $(grep -E 'ERROR SUMMARY' "$OUT/memcheck_$i.log") | $(grep -E 'passed|failed' "$OUT/memcheck_$i.log" | tail -1)" > /tmp/mc$i.sum ) &
    mc+=($!)
  done
  mkdir -p /tmp/rc
  cat > /tmp/rc/cases <<'CASES'
sampling gpu: the exact-mass top-p search draws the counting search's tokens
sampling gpu: the cluster path draws the one-block path's tokens, all in the set
sampling gpu: cluster path from logits (fp32, bf16, fp16), per-row parameters
CASES
  rc_run_all
  wait $t1 $t2
  wait "${mc[@]}"
  cat /tmp/mc*.sum | tee "$OUT/memcheck.log"
  rc_report
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
