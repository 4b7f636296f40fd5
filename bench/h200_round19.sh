#!/usr/bin/env bash
# Round 19 on the H200, one call under DEADLINE seconds (default 400): compute-sanitizer memcheck
# of the whole GPU suite in six groups (round 18's was killed by the racecheck runner's cleanup,
# which now stops only racecheck) and racecheck of the five cluster sampling cases round 18 did
# not rerun, all with KJIT_TEST_UNDER_SANITIZER=1 and in parallel; first three sampling rows
# alone on the GPU. At most 8 files come back from a call, so the logs are gathered into
# memcheck.log and racecheck.log. Builds nothing: run from the repo root with build-h200
# carried; KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 400
{
  header
  stamp "sampling rows"
  KP="top_k_top_p_sampling --set vocab=128256 --set batch=1"
  bench $KP --set dtype=bf16 --set path=cluster --set cluster=16 --set threads=256
  bench $KP --set dtype=fp32
  bench top_p_sampling --set vocab=128256 --set batch=1
  stamp "memcheck of the GPU suite (six groups) beside racecheck (five cases)"
  mkdir -p /tmp/mc
  mc=()
  i=0
  for g in "[gpu][sampling][cluster]" "[gpu][sampling]~[cluster]" \
    "[gpu][attention]~decode gpu: tuning variants*" "decode gpu: tuning variants*" \
    "[gpu][norm],[gpu][rmsnorm],[gpu][activation],[gpu][pdl]" \
    "[gpu]~[sampling]~[attention]~[norm]~[rmsnorm]~[activation]~[pdl]"; do
    i=$((i + 1))
    ( t1=$(date +%s)
      KJIT_TEST_UNDER_SANITIZER=1 KJIT_CACHE_DIR=/tmp/mc/cache$i timeout $(( $(left) - 15 )) \
        "$CS" --tool memcheck --error-exitcode 9 "$T" "$g" > /tmp/mc/log$i 2>&1
      echo "memcheck rc $? | $(($(date +%s) - t1)) s | $g | $(grep -E 'ERROR SUMMARY' /tmp/mc/log$i | tr -d '=') | $(grep -E 'test cases|All tests passed' /tmp/mc/log$i | tail -1)" > /tmp/mc/sum$i ) &
    mc+=($!)
  done
  mkdir -p /tmp/rc
  cat > /tmp/rc/cases <<'CASES'
sampling gpu: cluster path with weights too small for the fixed-point mass
sampling gpu: cluster path reports the same invalid rows
sampling gpu: cluster path draws follow the renormalized distribution
sampling gpu: cluster path is deterministic, per-row seeds ignore the position
sampling gpu: cluster path replays in a captured graph, auto batch 1 matches
CASES
  rc_run_all
  wait "${mc[@]}"
  { cat /tmp/mc/sum*; for f in /tmp/mc/log*; do echo "==== $f"; tail -30 "$f"; done; } > "$OUT/memcheck.log"
  cat /tmp/mc/sum*
  rc_report
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
