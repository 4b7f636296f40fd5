#!/usr/bin/env bash
# Round 9 on the H200: the sampling tests again after 6c58fc7 (the cluster launch's shared-memory
# opt-in), then compute-sanitizer memcheck and racecheck over every GPU test case. The sanitizer
# runs go in parallel, one process per group of tags, each under its own time box: the GPU is
# shared, and most of a sanitizer's cost is on the host. Builds nothing: run from the repo root
# with build-h200 carried; KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
T=$B/tests/kjit_gpu_tests
# san TOOL NAME SPEC: one sanitizer run in the background, its log in $OUT/TOOL_NAME.log.
san() {
  local tool=$1 name=$2 spec=$3 cache
  cache=$(mktemp -d /tmp/kjit-san-XXXX)
  (KJIT_CACHE_DIR=$cache timeout ${SAN_SECS:-440} $CS --tool "$tool" --error-exitcode 9 \
    --print-limit 50 "$T" "$spec" > "$OUT/${tool}_$name.log" 2>&1
   echo "rc $?" >> "$OUT/${tool}_$name.log") &
}
{
  header
  stamp "GPU tests: sampling (both paths)"
  tests gpu_tests.log 100 "$T" "[sampling]"
  stamp "compute-sanitizer memcheck and racecheck over the GPU suite, in parallel"
  small="[norm],[rmsnorm],[activation],[rope],[kv_cache],[replay],[trace]"
  san memcheck small "$small"
  san memcheck sampling "[sampling]"
  san memcheck argmax "[argmax]"
  san memcheck attention "[attention]~decode gpu: tuning variants*"
  san memcheck attention_variants "decode gpu: tuning variants*"
  san racecheck small "$small"
  san racecheck sampling "[sampling]"
  san racecheck argmax "[argmax]"
  san racecheck attention "[attention]~decode gpu: tuning variants*"
  san racecheck attention_variants "decode gpu: tuning variants*"
  wait
  for f in "$OUT"/memcheck_*.log "$OUT"/racecheck_*.log; do
    echo "== $(basename "$f"): $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|test cases|All tests passed|^rc ' "$f" | tr '\n' ' ')"
  done
  stamp "done"
} 2>&1 | tee "$OUT/run.log"
