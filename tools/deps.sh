#!/usr/bin/env bash
# Installs the Debian packages kjit builds with, when missing. CUDA 13 is expected at
# /usr/local/cuda (or CUDA_HOME); it is not a Debian package here.
set -euo pipefail
# clang, libclang-rt-dev (its sanitizer runtimes and libFuzzer) and llvm (llvm-symbolizer, for the
# sanitizers' stack traces): the instrumented builds of tools/sanitize.sh and tools/fuzz.sh.
pkgs=(cmake ninja-build g++ clang-format pkg-config libfmt-dev nlohmann-json3-dev catch2 libxxhash-dev
      libcli11-dev libdlpack-dev libssl-dev libcurl4-openssl-dev clang libclang-rt-dev llvm)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "deps: installing ${missing[*]}"
  sudo_cmd=()
  [ "$(id -u)" -ne 0 ] && sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi
cuda_home="${CUDA_HOME:-/usr/local/cuda}"
if [ ! -x "$cuda_home/bin/nvcc" ] && [ ! -f "$cuda_home/include/nvrtc.h" ]; then
  echo "deps: CUDA toolkit not found at $cuda_home (set CUDA_HOME)" >&2
  exit 1
fi
