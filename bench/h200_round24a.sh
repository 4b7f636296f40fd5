#!/usr/bin/env bash
# Round 24a on the H200 (one call, DEADLINE default 300 s): decode B1 x L8192 with the cluster
# merge across pipeline shapes (round 22 timed it only at the plan's 4 warps / 64-token stages,
# where one CTA an SM streamed slower than two), beside the default. Kernels: the repo's
# kernels/ through KJIT_KERNEL_DIR (build-h200 embeds 195e5ba's). Builds nothing.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 300
export KJIT_KERNEL_DIR=$PWD/kernels
{
  header
  G="decode_attention --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16 --set batch=1 --set kv_len=8192"
  stamp "default (merge kernel, 32 splits)"
  bench $G
  bench $G
  C="$G --set merge=cluster --set num_splits=16"
  for w in 4 8; do
    for ts in 32 64; do
      for st in 2 3 4; do
        [ "$(left)" -lt 60 ] && break
        echo "== cluster16 warps=$w stage_tokens=$ts stages=$st"
        bench $C --set warps=$w --set stage_tokens=$ts --set stages=$st
      done
    done
  done
  for n in 16 24; do
    echo "== merge kernel num_splits=$n warps=8"
    bench $G --set num_splits=$n --set warps=8
  done
  stamp "stamps: cluster16 warps=8 ($(left) s left)"
  timeout 60 bash bench/experiments/decode_stamps.sh ${C#decode_attention } --set warps=8 2>&1 | tail -14
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
