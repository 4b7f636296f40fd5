#!/usr/bin/env bash
# Round 25a on the H200 (one short call, DEADLINE default 150 s): decode B1 x L8192 with an L2
# prefetch into the K and V caches at CTA entry (KJIT_DECODE_KV_WARM 1: the pool's first page; 2:
# one page a CTA spread over the pool), against the same kernels without it; times and stamps
# (the first K / V arrive 2.3 us after the page ids without it). Kernels: kernels/ through
# KJIT_KERNEL_DIR (copies with the macro). Builds nothing. The experiment was not kept: its
# kernel code is in 333163c only (check that out to rerun this).
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 150
{
  header
  A="--set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16 --set batch=1 --set kv_len=8192"
  for m in 1 2; do
    d=/tmp/kvwarm$m
    rm -rf $d && mkdir -p $d && cp -r kernels $d/
    sed -i "1i #define KJIT_DECODE_KV_WARM $m" $d/kernels/attention/decode.cuh
  done
  for i in 1 2; do
    KJIT_KERNEL_DIR=$PWD/kernels bench decode_attention $A
    for m in 1 2; do
      echo "== KJIT_DECODE_KV_WARM $m"
      KJIT_KERNEL_DIR=/tmp/kvwarm$m/kernels KJIT_CACHE_DIR=/tmp/kjit-cache-kv$m bench decode_attention $A
    done
  done
  stamp "stamps: none, 1, 2"
  timeout 30 bash bench/experiments/decode_stamps.sh $A 2>&1 | head -7
  for m in 1 2; do
    DEFINES="KJIT_DECODE_KV_WARM=$m" timeout 30 bash bench/experiments/decode_stamps.sh $A 2>&1 | head -7
  done
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
