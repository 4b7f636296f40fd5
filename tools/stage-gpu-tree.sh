#!/usr/bin/env bash
# tools/stage-gpu-tree.sh BUILD DEST [--bench]: copies what a GPU machine runs out of a Release
# build tree into DEST, stripped, small enough to travel with the checkout (docs/gpu-runs.md):
#   default  libkjit, kjit_gpu_tests, kjit_comm_worker, kjit-cli, kjit-comm-bench and the CTest
#            files (CTestTestfile.cmake and the Catch2 discovery files they include: without those
#            `ctest` finds no test), about 28 MB;
#   --bench  kjit-cli alone (it links kjit statically), about 7 MB: room for FlashInfer's .whl/
#            beside it in one device call.
# The CTest files name BUILD's absolute paths, so on the GPU machine the staged tree must answer to
# BUILD's path: stage into BUILD's own name there, or `ln -sfn DEST BUILD` before `ctest`.
set -euo pipefail
usage() {
  echo "usage: tools/stage-gpu-tree.sh BUILD DEST [--bench]" >&2
  exit 2
}
[ $# -ge 2 ] && [ $# -le 3 ] || usage
build=$(realpath "$1")
dest=$(realpath -m "$2")
mode=${3:-}
[ -z "$mode" ] || [ "$mode" = "--bench" ] || usage
[ -f "$build/CMakeCache.txt" ] || { echo "$build is not a CMake build tree" >&2; exit 2; }
[ "$dest" != "$build" ] || { echo "DEST must differ from BUILD" >&2; exit 2; }

files=(tools/kjit-cli/kjit-cli)
if [ "$mode" != "--bench" ]; then
  files+=(tests/kjit_gpu_tests tests/kjit_comm_worker tools/kjit-comm-bench/kjit-comm-bench)
  mapfile -t -O "${#files[@]}" files < <(cd "$build" && ls libkjit.so* &&
    find . -name CTestTestfile.cmake -o -name '*_include-*.cmake' -o -name '*_tests-*.cmake' |
    sed 's|^\./||')
fi
rm -rf "$dest"
mkdir -p "$dest"
for f in "${files[@]}"; do
  if [ ! -e "$build/$f" ] && [ ! -L "$build/$f" ]; then
    echo "missing in $build: $f (build it first)" >&2
    exit 1
  fi
  (cd "$build" && cp -a --parents "$f" "$dest/")
done
# Symbols are not needed there; strip what is an ELF file and not a link.
find "$dest" -type f -exec sh -c 'head -c 4 "$1" | grep -q ELF && strip --strip-unneeded "$1"' \
  _ {} \;
echo "staged $(find "$dest" -type f | wc -l) files, $(du -sh "$dest" | cut -f1), in $dest"
if [ "$mode" != "--bench" ] && [ "$(basename "$dest")" != "$(basename "$build")" ]; then
  echo "on the GPU machine: ln -sfn $(basename "$dest") $(basename "$build")  (the CTest files name $build)"
fi
