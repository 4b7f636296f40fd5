#!/usr/bin/env bash
# Round 3b: rope kernel variants side by side through KJIT_KERNEL_DIR. ab/<v> was a copy of
# kernels/ with one variant of rope/rope.cuh (old: commit 59a99df; b256: loads before angles,
# launch bound 256; c128: same with __launch_bounds__(128, 6)); binaries of commit cb968e8.
set -uo pipefail
CLI=build-h200/tools/kjit-cli/kjit-cli
export KJIT_CACHE_DIR=/tmp/kjit-cache
J=$OUT/bench.jsonl
{
date -u +%FT%TZ; echo "commit cb968e8 (+ rope kernel variants via KJIT_KERNEL_DIR=ab/<v>)"
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
KJIT_CACHE_DIR=/tmp/kc-t build-h200/tests/kjit_gpu_tests "[rope]" 2>&1 | tail -3
$CLI bench empty --json $J
for t in 1 64; do $CLI bench rope --set dtype=bf16 --set tokens=$t --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --json $J; done
for v in embedded old b256 c128 old b256 c128; do
  echo "== variant $v"
  if [ $v = embedded ]; then unset KJIT_KERNEL_DIR; else export KJIT_KERNEL_DIR=$PWD/ab/$v; fi
  $CLI bench rope --set dtype=bf16 --set tokens=65536 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --json $J
  $CLI bench rope --set dtype=bf16 --set tokens=16384 --set qo_heads=64 --set kv_heads=8 --set head_dim=128 --json $J
done
unset KJIT_KERNEL_DIR
for v in old b256 c128; do KJIT_KERNEL_DIR=$PWD/ab/$v KJIT_CACHE_DIR=/tmp/kc-$v build-h200/tests/kjit_gpu_tests "[rope]" 2>&1 | tail -1; done
$CLI bench empty --json $J
} 2>&1 | tee $OUT/bench.log
