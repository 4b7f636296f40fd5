#!/usr/bin/env bash
# The whole test suite (what .ci/run runs): dependencies and the format check, then
#   1. ASan + UBSan (tools/sanitize.sh address): the library, kjit-cli and every test built with
#      clang and both sanitizers into build-asan/, and the whole CTest suite run there. Without a
#      GPU the [gpu] tests are reported as skipped.
#   2. Fuzzing (tools/fuzz.sh): each libFuzzer target of tests/fuzz, linked from the same objects,
#      for KJIT_TEST_FUZZ_SECONDS (default 15; 0 skips) on a copy of its committed corpus, two
#      at a time.
#   3. TSan (tools/sanitize.sh thread): the tests where threads share memory, built with gcc into
#      build-tsan/.
# Any failed test, sanitizer report or fuzzer finding fails the run; every stage runs (those after
# a failed build are skipped) and the time of each is printed at the end. Arguments go to the
# CTest run of stage 1 (or of the Release suite), e.g. -R 'reliability:'.
#
# KJIT_TEST_SANITIZERS=0: the quick loop instead: the Release build (tools/build.sh, build/) and
# its CTest suite, no fuzzing unless KJIT_TEST_FUZZ_SECONDS is set. CI runs everything.
set -uo pipefail
cd "$(dirname "$0")/.."

report=()
failed=0
times_file=$(mktemp)
trap 'rm -f "$times_file"' EXIT
# cpu = CPU seconds (user + system) of this shell's finished children: on a shared machine the
# wall time of a stage says little, its CPU time is what it costs. (Not in a $(...) subshell,
# which has no children of its own.)
child_cpu() {
  times >"$times_file"
  cpu=$(tail -1 "$times_file" | tr 'ms' '  ' | awk '{printf "%d", $1 * 60 + $2 + $3 * 60 + $4}')
}
# stage NAME COMMAND...: runs the command, records its wall and CPU time and whether it failed.
stage() {
  local name="$1" t0=$SECONDS c0 rc=0
  child_cpu
  c0=$cpu
  shift
  echo "==== test.sh: $name"
  "$@" || rc=$?
  child_cpu
  local line
  line=$(printf '%-18s %5d s wall %6d s CPU' "$name" $((SECONDS - t0)) $((cpu - c0)))
  ((rc == 0)) || line+="  FAILED (exit $rc)"
  report+=("$line")
  ((rc == 0)) || failed=1
  return "$rc"
}

release_suite() {
  local build="${KJIT_BUILD_DIR:-build}"
  # A private cache so a developer's ~/.cache/kjit never hides a compile the tests should do.
  export KJIT_CACHE_DIR="${KJIT_TEST_CACHE_DIR:-$PWD/$build/test-cache}"
  rm -rf "$KJIT_CACHE_DIR"
  ctest --test-dir "$build" --output-on-failure --no-tests=error -j "$(nproc)" "$@"
}

start=$SECONDS
# Only this run's fuzzer findings are reported at the end (tools/fuzz.sh writes them).
rm -f "${KJIT_ASAN_BUILD_DIR:-build-asan}"/fuzz-logs/*.failure
child_cpu
cpu_start=$cpu
stage "dependencies" bash tools/deps.sh || exit 1
stage "format check" bash tools/check-format.sh
if [ "${KJIT_TEST_SANITIZERS:-1}" = 0 ]; then
  stage "Release build" bash tools/build.sh && stage "Release suite" release_suite "$@"
  if [ "${KJIT_TEST_FUZZ_SECONDS:-0}" != 0 ]; then
    stage "fuzzing" env KJIT_FUZZ_JOBS=2 bash tools/fuzz.sh "$KJIT_TEST_FUZZ_SECONDS"
  fi
else
  if stage "ASan+UBSan build" env KJIT_SANITIZE_BUILD_ONLY=1 bash tools/sanitize.sh address; then
    stage "ASan+UBSan suite" bash tools/sanitize.sh address "$@"
    fuzz_seconds="${KJIT_TEST_FUZZ_SECONDS:-15}"
    if [ "$fuzz_seconds" != 0 ]; then
      stage "fuzzing" env KJIT_FUZZ_JOBS=2 bash tools/fuzz.sh "$fuzz_seconds"
    fi
  fi
  stage "TSan build" env KJIT_SANITIZE_BUILD_ONLY=1 bash tools/sanitize.sh thread &&
    stage "TSan suite" bash tools/sanitize.sh thread
fi

# CI keeps only the tail of this output: a fuzzer's finding (its input and first frames) goes at
# the end, before the stage table.
if ls "${KJIT_ASAN_BUILD_DIR:-build-asan}"/fuzz-logs/*.failure >/dev/null 2>&1; then
  echo "==== test.sh: fuzzer findings"
  cat "${KJIT_ASAN_BUILD_DIR:-build-asan}"/fuzz-logs/*.failure
fi
echo "==== test.sh: stages"
printf '  %s\n' "${report[@]}"
child_cpu
printf '  %-18s %5d s wall %6d s CPU on %d cores\n' "total" $((SECONDS - start)) \
  $((cpu - cpu_start)) "$(nproc)"
exit "$failed"
