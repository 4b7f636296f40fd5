#!/usr/bin/env bash
# bench/run.sh [SUITE...]: runs bench suites (bench/suites/SUITE.jsonl, or a suite file) and their
# PyTorch peers on this machine's GPU, and writes one bench/results/<date>-<gpu>-<suite>/ folder
# per suite, then bench/results/INDEX.md. Without a SUITE: smoke. bench/run.py says what a folder
# holds and which environment variables it reads (CLI, RESULTS, KJIT_COMMIT, DEADLINE, PEERS).
# Under the device tool ($OUT set; docs/gpu-runs.md) the new folders come back packed in
# $OUT/results.tgz, beside $OUT/run.log and $OUT/INDEX.md.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -n "${OUT:-}" ]; then
  python3 bench/run.py "$@" 2>&1 | tee "$OUT/run.log"
  exit "${PIPESTATUS[0]}"
fi
exec python3 bench/run.py "$@"
