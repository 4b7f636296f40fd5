# Shared by the bench/h200_round*.sh scripts from round 8 on (source it): the carried build,
# a private kernel cache, and the time-boxed test and bench runners that log under $OUT.
B=${B:-build-h200}
CLI=$B/tools/kjit-cli/kjit-cli
CS=${CS:-/usr/local/cuda/bin/compute-sanitizer}
export KJIT_CACHE_DIR=/tmp/kjit-cache
J="$OUT/bench.jsonl"
P="$OUT/peers.jsonl"
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
