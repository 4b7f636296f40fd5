#!/usr/bin/env bash
# Round 9 on the H200: the sampling tests again after 6c58fc7 (the cluster launch's shared-memory
# opt-in), then memcheck over the cluster cases. Builds nothing: run from the repo root with
# build-h200 carried; KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
{
  header
  stamp "GPU tests: sampling (both paths)"
  tests gpu_tests.log 100 "$B/tests/kjit_gpu_tests" "[sampling]"
  stamp "compute-sanitizer memcheck: the sampling cluster cases"
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout 70 $CS --tool memcheck --error-exitcode 9 \
    "$B/tests/kjit_gpu_tests" "[cluster]" > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc $?"; tail -4 "$OUT/memcheck.log"
  stamp "done"
} 2>&1 | tee "$OUT/run.log"
