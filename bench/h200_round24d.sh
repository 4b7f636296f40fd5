#!/usr/bin/env bash
# Round 24d on the H200 (one short call, DEADLINE default 120 s): the merge block's steps after its
# wait (merge-only stamps: read and fold, combine, store), with and without
# KJIT_DECODE_MERGE_WARM (L2 prefetches of its first partial, lse and out row before the wait),
# and B1 x L8192 timed both ways. Kernels: kernels/ through KJIT_KERNEL_DIR. Builds nothing. The
# experiment was not kept: its kernel code is in 91a4466 only (check that out to rerun this).
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 120
{
  header
  A="--set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16 --set batch=1 --set kv_len=8192"
  warm=$(mktemp -d)
  cp -r kernels "$warm/kernels"
  sed -i '1i #define KJIT_DECODE_MERGE_WARM 1' "$warm/kernels/attention/decode.cuh"
  for i in 1 2; do
    KJIT_KERNEL_DIR=$PWD/kernels bench decode_attention $A
    KJIT_KERNEL_DIR=$warm/kernels KJIT_CACHE_DIR=/tmp/kjit-cache-warm bench decode_attention $A
  done
  stamp "merge-only stamps, then with the warm-up"
  MERGE_ONLY=1 timeout 40 bash bench/experiments/decode_stamps.sh $A 2>&1 | tail -6
  DEFINES=KJIT_DECODE_MERGE_WARM MERGE_ONLY=1 timeout 40 bash bench/experiments/decode_stamps.sh $A 2>&1 | tail -6
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
