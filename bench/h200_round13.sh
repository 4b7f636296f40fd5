#!/usr/bin/env bash
# Round 13 on the H200: compute-sanitizer racecheck of the sampling cases no round has finished
# (bench/racecheck_open_cases.txt), one process per case, four at a time (round 12 ran thirteen
# at once and finished none of them), under KJIT_TEST_UNDER_SANITIZER=1, which since round 12
# also caps forced clusters at 3 blocks, the cluster distribution test at 4 rows and runs the
# logits test on the one-block path. First, two racechecked bench launches of the cluster top-p
# kernel at V 4096 (clusters of 2 and 16) say what one launch costs under the tool. Builds
# nothing: run from the repo root with build-h200 carried, under DEADLINE seconds (default 560);
# KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
T=$B/tests/kjit_gpu_tests
t0=$(date +%s)
left() { echo $(( ${DEADLINE:-560} - ($(date +%s) - t0) )); }
{
  header
  mkdir -p /tmp/rc
  grep -v '^#' "$(dirname "$0")/racecheck_open_cases.txt" > /tmp/rc/cases
  export -f rc_case rc_bench
  export T CS CLI
  n=$(wc -l < /tmp/rc/cases)
  stamp "racecheck: two bench launches, then $n open cases, four processes at a time"
  setsid bash -c "
    { echo 'rc_bench 93 top_p_sampling --set vocab=4096 --set batch=1 --set path=cluster --set cluster=2'
      echo 'rc_bench 94 top_p_sampling --set vocab=4096 --set batch=1 --set path=cluster --set cluster=16'
      seq 1 $n | sed 's/^/rc_case /'
    } | xargs -P 4 -I{} bash -c '{}'" &
  rcpid=$!
  while kill -0 $rcpid 2>/dev/null && [ "$(left)" -gt 10 ]; do sleep 5; done
  kill -- -$rcpid 2>/dev/null; sleep 2; pkill -f compute-sanitizer
  rc_report
  for i in $(seq 1 "$n"); do
    [ -e "/tmp/rc/log$i" ] || echo "not started: $(sed -n "${i}p" /tmp/rc/cases)"
  done
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
