#!/usr/bin/env bash
# Fails when any C++ or CUDA file of the project differs from what clang-format makes of it.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files --cached --others --exclude-standard -- '*.cpp' '*.hpp' '*.h' '*.cuh' '*.cu' 2>/dev/null ||
                     find include src kernels tools tests bench -name '*.[ch]pp' -o -name '*.cuh')
((${#files[@]})) || exit 0
clang-format --dry-run --Werror "${files[@]}"
echo "format: ${#files[@]} files clean"
