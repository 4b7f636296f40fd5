# Shared by the bench/h200_round*.sh scripts from round 8 on (source it): the carried build,
# a private kernel cache, and the time-boxed test and bench runners that log under $OUT.
B=${B:-build-h200}
CLI=$B/tools/kjit-cli/kjit-cli
CS=${CS:-/usr/local/cuda/bin/compute-sanitizer}
export KJIT_CACHE_DIR=/tmp/kjit-cache
J="$OUT/bench.jsonl"
P="$OUT/peers.jsonl"
T=$B/tests/kjit_gpu_tests
# start_clock SECONDS: the script's deadline is DEADLINE (or SECONDS) from now; `left` prints the
# seconds that remain of it.
start_clock() {
  t0=$(date +%s)
  DEADLINE=${DEADLINE:-$1}
}
left() { echo $((DEADLINE - ($(date +%s) - t0))); }
# peers ARGS...: bench/peers/torch_peers.py (PyTorch eager and torch.compile), rows into $P.
peers() { PYTHONUNBUFFERED=1 timeout 120 python3 bench/peers/torch_peers.py --json "$P" "$@"; }
stamp() { echo "[$(date -u +%T)] $*"; }
# tests LOG SECONDS BINARY SPEC...: a test binary under a time box, its log appended to $OUT/LOG.
tests() {
  local log=$1 secs=$2
  shift 2
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout "$secs" "$@" 2>&1 | tee -a "$OUT/$log" | tail -3
}
# bench OP ARGS...: one kjit-cli bench run, its rows appended to $J.
bench() { timeout 60 "$CLI" bench "$@" --json "$J" 2>&1 | grep -v '^  repro' | tail -4; }
# header: what ran where, first lines of every round's console log.
header() {
  date -u +%FT%TZ
  echo "commit ${KJIT_COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
}
# rc_case I [SECONDS]: compute-sanitizer racecheck of test case I (a line number of /tmp/rc/cases)
# in its own process and kernel cache, with KJIT_TEST_UNDER_SANITIZER=1 (sampling tests: two
# offsets per draw loop, vocabularies capped at 16384), under an optional time box (0: none).
# Appends "rc RC | SECS s | NAME | SUMMARY" to /tmp/rc/summary. Needs T and CS exported, and
# `export -f rc_case` to run under xargs.
rc_case() {
  local i=$1 secs=${2:-0} name spec t1
  name=$(sed -n "${i}p" /tmp/rc/cases)
  # A case name is a Catch2 spec once backslashes, commas and brackets are escaped.
  spec=$(printf '%s' "$name" | sed -e 's/\\/\\\\/g' -e 's/,/\\,/g' -e 's/\[/\\[/g')
  t1=$(date +%s)
  KJIT_TEST_UNDER_SANITIZER=1 KJIT_CACHE_DIR=/tmp/rc/cache$i timeout "$secs" "$CS" \
    --tool racecheck --error-exitcode 9 --print-limit 20 "$T" "$spec" > /tmp/rc/log$i 2>&1
  echo "rc $? | $(($(date +%s) - t1)) s | $name | $(grep -E 'RACECHECK SUMMARY' /tmp/rc/log$i | tr -d '=')" >> /tmp/rc/summary
}
# rc_bench I ARGS...: racecheck of one `kjit-cli bench ARGS` run (its first call and two samples,
# no check), log /tmp/rc/logI, the same summary line. Needs CLI and CS exported.
rc_bench() {
  local i=$1 t1
  shift
  t1=$(date +%s)
  KJIT_CACHE_DIR=/tmp/rc/cache$i "$CS" --tool racecheck --error-exitcode 9 --print-limit 20 \
    "$CLI" bench "$@" --no-check --warmup 0 --iters 2 --timer events > /tmp/rc/log$i 2>&1
  echo "rc $? | $(($(date +%s) - t1)) s | bench $* | $(grep -E 'RACECHECK SUMMARY' /tmp/rc/log$i | tr -d '=')" >> /tmp/rc/summary
}
# rc_report: /tmp/rc/summary sorted by case name into $OUT/racecheck.log, then the tail of every
# log that did not end clean (unfinished, or hazards); prints the summary lines.
rc_report() {
  sort -t'|' -k3 /tmp/rc/summary > "$OUT/racecheck.log" 2>/dev/null
  for f in /tmp/rc/log*; do
    if ! grep -q '0 hazards displayed (0 errors, 0 warnings)' "$f"; then
      { echo "==== $f (unfinished or hazards)"; tail -25 "$f"; } >> "$OUT/racecheck.log"
    fi
  done
  grep '^rc ' "$OUT/racecheck.log"
}
# rc_run_all: rc_case over every line of /tmp/rc/cases, all at once, stopped when the caller's
# `left` falls to 12 s. Needs T and CS.
rc_run_all() {
  export -f rc_case
  export T CS
  local n pid
  n=$(wc -l < /tmp/rc/cases)
  setsid bash -c "seq 1 $n | xargs -P $n -I{} bash -c 'rc_case {}'" &
  pid=$!
  while kill -0 $pid 2>/dev/null && [ "$(left)" -gt 12 ]; do sleep 4; done
  kill -- -$pid 2>/dev/null
  sleep 2
  pkill -f "compute-sanitizer --tool racecheck"
}
