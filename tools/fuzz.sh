#!/usr/bin/env bash
# Runs the libFuzzer targets of tests/fuzz, each for SECONDS (default 20) on a working copy of its
# committed seed corpus (tests/fuzz/corpus/<target>/). They are built by tools/sanitize.sh address
# into ${KJIT_ASAN_BUILD_DIR:-build-asan} (clang; every object with ASan, UBSan and coverage
# feedback, the same objects that run the test suite there). docs/reliability.md has the results.
#
#   tools/fuzz.sh [SECONDS] [TARGET...]    e.g. tools/fuzz.sh 600 fuzz_metadata
#   KJIT_FUZZ_JOBS=N                       targets run N at a time (default 1)
#   KJIT_FUZZ_BUILD_ONLY=1                 build, run nothing
#
# New inputs go to $build/fuzz-corpus/<target>/ (kept between runs); a failing input is written to
# $build/fuzz-findings/<target>/ (replay it: $build/tests/fuzz/<target> <file>); the log of each
# run is $build/fuzz-logs/<target>.log, and what a failure printed is also kept in
# $build/fuzz-logs/<target>.failure. Exits 1 when any target failed.
set -euo pipefail
cd "$(dirname "$0")/.."
secs="${1:-20}"
shift || true
build="${KJIT_ASAN_BUILD_DIR:-build-asan}"
# libFuzzer takes -max_total_time=0 as "forever".
if ! [[ "$secs" =~ ^[1-9][0-9]*$ ]]; then
  echo "fuzz: SECONDS must be a positive number of seconds, not '$secs'" >&2
  exit 2
fi

targets=("$@")
if ((${#targets[@]} == 0)); then
  for f in tests/fuzz/fuzz_*.cpp; do targets+=("$(basename "$f" .cpp)"); done
fi

KJIT_SANITIZE_BUILD_ONLY=1 KJIT_SANITIZE_TARGETS="${targets[*]}" bash tools/sanitize.sh address
if [ "${KJIT_FUZZ_BUILD_ONLY:-0}" = 1 ]; then exit 0; fi

run_one() {
  local t="$1" corpus="$build/fuzz-corpus/$1" findings="$build/fuzz-findings/$1/"
  local log="$build/fuzz-logs/$1.log"
  mkdir -p "$corpus" "$findings" "$(dirname "$log")"
  # New inputs go to the working corpus; the committed seeds are only read.
  local rc=0 stamp="$build/fuzz-logs/$1.start"
  touch "$stamp"
  "$build/tests/fuzz/$t" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 \
    -print_final_stats=1 -artifact_prefix="$findings" "$corpus" "tests/fuzz/corpus/$t" \
    >"$log" 2>&1 || rc=$?
  local execs cov corp
  # (A crash while the corpus loads leaves no "cov:" line: the greps may find nothing.)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  cov=$(grep -ao 'cov: [0-9]*' "$log" | tail -1 | cut -d' ' -f2 || true)
  corp=$(find "$corpus" -type f | wc -l)
  if ((rc == 0)); then
    echo "fuzz: $t: ok, ${execs:-?} executions in ${secs}s, coverage ${cov:-?}, corpus $corp"
  else
    # What CI shows of a run is its tail: tools/test.sh repeats these lines at its end, with enough
    # to replay the finding (its bytes in hex) and to place it (the first frames).
    {
      echo "fuzz: $t: FAILED (exit $rc) after ${execs:-?} executions; input in $findings, log $log"
      grep -a -m 5 -E 'ERROR|runtime error|invariant failed|uncaught|deadly signal' "$log" || true
      grep -a -m 12 -E '^ +#[0-9]+ ' "$log" || true
      # This run's inputs only: the folder keeps earlier runs' findings.
      find "$findings" -type f -newer "$stamp" | while read -r f; do
        echo "input $(basename "$f") ($(stat -c %s "$f") bytes), hex:"
        head -c 2048 "$f" | od -An -tx1 -v | tr -d ' \n' | fold -w 96
        echo
      done
    } | sed '2,$s/^/  /' | tee "$build/fuzz-logs/$t.failure"
  fi
  return "$rc"
}

mkdir -p "$build/fuzz-logs"
rm -f "$build"/fuzz-logs/*.failure
jobs="${KJIT_FUZZ_JOBS:-1}"
failed=0
pids=()
for t in "${targets[@]}"; do
  run_one "$t" &
  pids+=("$!")
  if ((${#pids[@]} >= jobs)); then
    wait "${pids[0]}" || failed=1
    pids=("${pids[@]:1}")
  fi
done
for p in "${pids[@]}"; do wait "$p" || failed=1; done
exit "$failed"
