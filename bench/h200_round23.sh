#!/usr/bin/env bash
# Round 23 on the H200, one call under DEADLINE seconds (default 380): the evidence for issue 9
# (every sampler row of its targets at B1 / B64 / B128 and argmax, with PyTorch's sort-based
# samplers in the same call) and issue 8 (the decode rows with cuDNN / flash SDPA in the same
# call); the fused split merge read in one pass (the kernels of NEW_KERNELS, when present, through
# KJIT_KERNEL_DIR: B1 with the merge kernel and with merge=fused, and the fused-merge tests).
# Builds nothing: run from the repo root with build-h200 carried; KJIT_COMMIT names the commit
# the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 380
NEW_KERNELS=${NEW_KERNELS:-.h200-new/kernels}
{
  header
  stamp "samplers, V 128256 (cupti, cold L2)"
  TP="top_p_sampling --set vocab=128256"
  KP="top_k_top_p_sampling --set vocab=128256"
  for i in 1 2; do bench $TP --set batch=1; done
  for i in 1 2 3; do bench $KP --set dtype=bf16 --set batch=1; done
  for i in 1 2; do bench $KP --set dtype=fp32 --set batch=1; done
  bench $KP --set dtype=bf16 --set batch=1 --set k=128256
  bench $TP --set batch=64
  for d in bf16 fp32; do bench $KP --set dtype=$d --set batch=128; done
  for d in fp32 bf16; do
    for b in 64 256; do bench argmax --set vocab=128256 --set dtype=$d --set batch=$b; done
  done
  stamp "PyTorch sort-based samplers (same shapes)"
  for op in top_p_sampling top_k_top_p_sampling; do
    timeout 90 python3 bench/peers/torch_sampling.py --op $op --json "$P" 2>&1 | tail -4
  done
  stamp "decode (GQA 32/8, head_dim 128, page 16, bf16; cupti, cold L2)"
  G="decode_attention --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  for s in "1 8192" "1 8192" "64 4096" "256 2048" "16 32768"; do
    set -- $s
    bench $G --set batch=$1 --set kv_len=$2
  done
  if [ -d "$NEW_KERNELS" ]; then
    A="$G --set batch=1 --set kv_len=8192"
    KJIT_KERNEL_DIR=$NEW_KERNELS KJIT_CACHE_DIR=/tmp/kjit-cache-new bench $A
    KJIT_KERNEL_DIR=$NEW_KERNELS KJIT_CACHE_DIR=/tmp/kjit-cache-new bench $A --set merge=fused
    bench $A --set merge=fused
  fi
  timeout 100 python3 bench/peers/torch_decode_attention.py --json "$P" 2>&1 | grep -v Warning | grep -v "return F" | tail -8
  if [ -d "$NEW_KERNELS" ]; then
    stamp "fused-merge decode tests on NEW_KERNELS ($(left) s left)"
    KJIT_KERNEL_DIR=$NEW_KERNELS tests gpu_tests.log $(( $(left) - 10 )) "$T" \
      "decode gpu: fused merge under graph replay*,decode gpu: tuning variants*" --durations yes
  fi
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
