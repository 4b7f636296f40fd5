#!/usr/bin/env bash
# Round 24b on the H200 (one call, DEADLINE default 240 s): decode B1 x L8192 with the cluster
# merge at 8 warps (round 24a's stamps of cluster16 warps=8: last loop done 10.0 us, stored 12.7,
# against 10.5-10.8 / 12.0 + a merge kernel for the default), its stage shapes and split counts,
# and the epilogue's steps in the stamps (states in shared memory, weights, stored). Kernels: the
# repo's kernels/ through KJIT_KERNEL_DIR. Builds nothing.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 240
export KJIT_KERNEL_DIR=$PWD/kernels
{
  header
  A="--set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16 --set batch=1 --set kv_len=8192"
  G="decode_attention $A"
  stamp "default (merge kernel, 32 splits)"
  bench $G
  # warps=8 plans 128-token stages (the bench's stage_tokens knob stops at 64 in these binaries).
  for v in "16 2" "16 3" "16 4" "12 3" "8 3" "8 4"; do
    set -- $v
    [ "$(left)" -lt 70 ] && break
    echo "== cluster splits=$1 warps=8 stages=$2"
    bench $G --set merge=cluster --set num_splits=$1 --set warps=8 --set stages=$2
  done
  echo "== merge kernel splits=16 warps=8 stages=4"
  bench $G --set num_splits=16 --set warps=8 --set stages=4
  bench $G
  stamp "stamps: default ($(left) s left)"
  timeout 50 bash bench/experiments/decode_stamps.sh $A 2>&1 | tail -16
  stamp "stamps: cluster16 warps=8 ($(left) s left)"
  timeout 50 bash bench/experiments/decode_stamps.sh $A --set merge=cluster --set num_splits=16 --set warps=8 2>&1 | tail -16
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
