#!/usr/bin/env bash
# Phase timestamps of a sampler launch (H200; see KJIT_STAMP in kernels/sampling/sampling.cuh).
# Copies kernels/ with KJIT_SAMPLING_STAMPS defined, points kjit-cli at the copy through
# KJIT_KERNEL_DIR (a fresh cache), runs one `kjit-cli bench` of the given op and arguments, and
# prints the median cycles of each phase over the launches (thread 0 of row 0's drawing block
# prints one line per launch; the first launch, cold, is dropped).
#   bash bench/experiments/sampling_stamps.sh top_k_top_p_sampling --set dtype=bf16 \
#     --set vocab=128256 --set batch=1
# Needs a GPU; CLI defaults to build-h200's kjit-cli.
set -euo pipefail
cd "$(dirname "$0")/../.."
CLI=${CLI:-build-h200/tools/kjit-cli/kjit-cli}
dir=$(mktemp -d)
cp -r kernels "$dir/kernels"
sed -i '1i #define KJIT_SAMPLING_STAMPS 1' "$dir/kernels/sampling/sampling.cuh"
KJIT_KERNEL_DIR="$dir/kernels" KJIT_CACHE_DIR="$dir/cache" "$CLI" bench "$@" --no-check \
  > "$dir/out.log" 2>&1 || { tail -5 "$dir/out.log"; exit 1; }
grep '^kjit-stamps' "$dir/out.log" | tail -n +2 | python3 -c '
import sys, statistics
rows = [l.split()[1:] for l in sys.stdin]
if not rows:
    sys.exit("no kjit-stamps lines: did the launch take the sampling kernel?")
names = rows[0][0::2]
for i, n in enumerate(names):
    v = [int(r[2 * i + 1]) for r in rows]
    print(f"{n:14s} {statistics.median(v):9.0f} cycles (median of {len(v)})")
'
grep -v '^kjit-stamps' "$dir/out.log" | tail -2
rm -rf "$dir"
