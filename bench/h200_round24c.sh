#!/usr/bin/env bash
# Round 24c on the H200 (one call, DEADLINE default 330 s): the one-barrier decode epilogue
# (kernels/ of this commit through KJIT_KERNEL_DIR; build-h200 embeds 195e5ba's two-barrier one):
# the four issue-8 rows, B1 also with the embedded kernels, the stamps (whole launch, then the merge
# block alone), and every decode GPU test on the new kernels in three processes. Builds nothing.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 330
NEWK=$PWD/kernels
{
  header
  A="--set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  G="decode_attention $A"
  stamp "B1 x L8192: embedded (195e5ba) kernels, then the new epilogue twice"
  bench $G --set batch=1 --set kv_len=8192
  export KJIT_KERNEL_DIR=$NEWK
  bench $G --set batch=1 --set kv_len=8192
  bench $G --set batch=1 --set kv_len=8192
  stamp "B64 x L4096, B256 x L2048, B16 x L32768 (new epilogue)"
  for s in "64 4096" "256 2048" "16 32768"; do
    set -- $s
    bench $G --set batch=$1 --set kv_len=$2
  done
  stamp "stamps ($(left) s left)"
  timeout 40 bash bench/experiments/decode_stamps.sh $A --set batch=1 --set kv_len=8192 2>&1 | tail -16
  MERGE_ONLY=1 timeout 40 bash bench/experiments/decode_stamps.sh $A --set batch=1 --set kv_len=8192 2>&1 | tail -4
  stamp "decode GPU tests, three processes ($(left) s left)"
  S=$(( $(left) - 15 ))
  tests gpu_tests_a.log $S "$T" "decode gpu: every group size*,decode gpu: head dims*,decode gpu: page sizes*,decode gpu: fp8*,decode gpu: 16-bit caches*,decode gpu: logits soft cap*" --durations yes &
  tests gpu_tests_b.log $S "$T" "decode gpu: split-KV*,decode gpu: empty requests*,decode gpu: strided*,decode gpu: one plan*,decode gpu: a device kv_indptr*,decode gpu: CUDA graph*,decode gpu: runs are deterministic,decode gpu: batch 0*" --durations yes &
  tests gpu_tests_c.log $S "$T" "decode gpu: tuning variants*,decode gpu: the cluster merge,decode gpu: fused merge*,decode gpu: lookup forms*,decode gpu: dependent merge*,decode gpu: invalid tuning*,merge*" --durations yes &
  wait
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
