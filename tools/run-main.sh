#!/usr/bin/env bash
# The main job: build, show the environment, compile the rmsnorm specializations into the cache,
# list the cache, and where a GPU is present run rmsnorm with a reference check and print times.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
build="${KJIT_BUILD_DIR:-build}"
cli="$build/tools/kjit-cli/kjit-cli"
echo "== kjit-cli info"
"$cli" info
echo "== kjit-cli compile --all --ops rmsnorm"
if "$cli" info --json | grep -q '"devices": \[\]'; then
  # No GPU: compile for the families kjit ships (works without a driver).
  "$cli" compile --all --ops rmsnorm --arch "sm_80 sm_90 sm_90a" -j "$(nproc)"
else
  "$cli" compile --all --ops rmsnorm -j "$(nproc)"
fi
echo "== kjit-cli cache inspect"
"$cli" cache inspect
if "$cli" info --json | grep -q '"devices": \[\]'; then
  echo "== no GPU here: skipping the rmsnorm run (running on a GPU machine: docs/gpu-runs.md)"
  exit 0
fi
echo "== kjit-cli bench rmsnorm (reference-checked)"
for shape in "1 4096" "64 4096" "4096 4096" "16384 8192"; do
  set -- $shape
  "$cli" bench rmsnorm --set dtype=bf16 --set hidden="$2" --set rows="$1"
done
