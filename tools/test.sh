#!/usr/bin/env bash
# The whole test suite: dependencies, build, format check, then CTest. Without a GPU the [gpu]
# tests are reported as skipped.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
bash tools/check-format.sh
build="${KJIT_BUILD_DIR:-build}"
# A private cache so a developer's ~/.cache/kjit never hides a compile the tests should do.
export KJIT_CACHE_DIR="${KJIT_TEST_CACHE_DIR:-$PWD/$build/test-cache}"
rm -rf "$KJIT_CACHE_DIR"
ctest --test-dir "$build" --output-on-failure -j "$(nproc)" "$@"
# Opt-in, since the clang build costs minutes: KJIT_TEST_FUZZ_SECONDS=N also builds the libFuzzer
# targets and runs each for N seconds (the plain build above only replays their seed corpora).
if [ -n "${KJIT_TEST_FUZZ_SECONDS:-}" ]; then
  bash tools/fuzz.sh "$KJIT_TEST_FUZZ_SECONDS"
fi
