#!/usr/bin/env bash
# Configures and builds kjit into ${KJIT_BUILD_DIR:-build} (Release).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/deps.sh
build="${KJIT_BUILD_DIR:-build}"
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release \
  -DCUDAToolkit_ROOT="$cuda_home" >/dev/null
cmake --build "$build" -j "$(nproc)"
