#!/usr/bin/env bash
# Round 27 on the H200 (one call, DEADLINE default 420 s), binaries of b660901 (build-h200) with
# the working tree's kernels (KJIT_KERNEL_DIR: RoPE's early position now only issues its load
# before the PDL wait; the decode merges fold through one helper): RoPE at decode sizes, default
# and with KJIT_PDL_EARLY_INDICES=1, twice; every issue-3 decode-size row launched plainly
# (KJIT_PDL=0) beside the plain empty kernel (the like-for-like plain reading); decode B1 x L8192
# (merge kernel and fused merge) and B64 x L4096 against round 25b; then the GPU tests of RoPE and
# of decode / merge in eight processes until the deadline.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 420
export KJIT_KERNEL_DIR=$PWD/kernels
{
  header
  echo "kernels from KJIT_KERNEL_DIR=$KJIT_KERNEL_DIR"
  E="--timer events-batched --hot-l2"
  R="rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128"
  A="append_paged_kv --set dtype=bf16 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  for pass in 1 2; do
    stamp "RoPE at decode sizes, pass $pass (PDL)"
    bench empty $E
    for n in 1 64; do
      bench $R --set tokens=$n $E
      KJIT_PDL_EARLY_INDICES=1 bench $R --set tokens=$n $E
    done
  done
  stamp "every decode-size row launched plainly (KJIT_PDL=0)"
  export KJIT_PDL=0
  bench empty $E
  for n in 1 64; do
    bench rmsnorm --set dtype=bf16 --set rows=$n --set hidden=4096 $E
    bench fused_add_rmsnorm --set dtype=bf16 --set rows=$n --set hidden=4096 $E
    bench layernorm --set dtype=bf16 --set rows=$n --set hidden=4096 $E
    bench act_and_mul --set act=silu --set dtype=bf16 --set rows=$n --set d=14336 $E
    bench $A --set tokens=$n $E
    bench $R --set tokens=$n $E
  done
  bench $A --set tokens=64 --set batch=64 $E
  bench empty $E
  unset KJIT_PDL
  stamp "decode (GQA 32/8, head_dim 128, page 16, bf16; cupti, cold L2)"
  G="decode_attention --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  bench $G --set batch=1 --set kv_len=8192
  bench $G --set batch=1 --set kv_len=8192 --set merge=fused
  bench $G --set batch=1 --set kv_len=8192
  bench $G --set batch=64 --set kv_len=4096
  stamp "GPU tests, eight processes ($(left) s left)"
  S=$(( $(left) - 12 ))
  tests gpu_tests_1.log $S "$T" "rope gpu: head sizes*" --durations yes &
  tests gpu_tests_2.log $S "$T" "rope gpu: positions*,rope gpu: in place*,rope gpu: decode and prefill*,rope gpu: Llama*,rope gpu: cos_sin_cache*,rope gpu: a device id*,pdl gpu*" --durations yes &
  tests gpu_tests_3.log $S "$T" "decode gpu: tuning variants*" --durations yes &
  tests gpu_tests_4.log $S "$T" "decode gpu: the cluster merge,decode gpu: fused merge*,decode gpu: lookup forms*,decode gpu: dependent merge*,decode gpu: invalid tuning*" --durations yes &
  tests gpu_tests_5.log $S "$T" "decode gpu: split-KV*,decode gpu: runs are deterministic,decode gpu: batch 0*" --durations yes &
  tests gpu_tests_6.log $S "$T" "decode gpu: fp8*,decode gpu: head dims*,decode gpu: 16-bit caches*" --durations yes &
  tests gpu_tests_7.log $S "$T" "decode gpu: every group size*,decode gpu: page sizes*,decode gpu: logits soft cap*,decode gpu: empty requests*,decode gpu: strided*" --durations yes &
  tests gpu_tests_8.log $S "$T" "decode gpu: one plan*,decode gpu: a device kv_indptr*,decode gpu: CUDA graph*,merge gpu*" --durations yes &
  wait
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
