#!/usr/bin/env bash
# Round 25b on the H200 (one call, DEADLINE default 450 s), binaries of 5ce1660 (build-h200,
# kernels embedded): issue 3's decode-size rows after the early-parameter norms and the fastdiv
# RoPE / KV append (back to back, events-batched, hot L2, the PDL default; the empty kernel plain and
# PDL), twice; the large shapes whose code changed (RoPE, KV append) against the copy; issue 8's
# four decode rows (one-barrier epilogue) with cuDNN / flash SDPA in the same call; then the GPU
# tests of the changed kernels in four processes until the deadline.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 450
{
  header
  E="--timer events-batched --hot-l2"
  for pass in 1 2; do
    stamp "decode-size elementwise, pass $pass"
    KJIT_PDL=0 bench empty $E
    bench empty $E
    for n in 1 64; do
      bench rmsnorm --set dtype=bf16 --set rows=$n --set hidden=4096 $E
      bench fused_add_rmsnorm --set dtype=bf16 --set rows=$n --set hidden=4096 $E
      bench layernorm --set dtype=bf16 --set rows=$n --set hidden=4096 $E
      bench act_and_mul --set act=silu --set dtype=bf16 --set rows=$n --set d=14336 $E
      bench append_paged_kv --set dtype=bf16 --set tokens=$n --set kv_heads=8 --set head_dim=128 --set page_size=16 $E
      bench rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set tokens=$n $E
    done
    bench append_paged_kv --set dtype=bf16 --set tokens=64 --set batch=64 --set kv_heads=8 --set head_dim=128 --set page_size=16 $E
  done
  stamp "large shapes whose code changed (cupti, cold L2, against the copy)"
  bench rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set tokens=65536 --backends kjit,copy
  bench append_paged_kv --set dtype=bf16 --set tokens=65536 --set batch=128 --set kv_heads=8 --set head_dim=128 --set page_size=16 --backends kjit,copy
  bench rmsnorm --set dtype=bf16 --set rows=16384 --set hidden=8192 --backends kjit,copy
  stamp "decode (GQA 32/8, head_dim 128, page 16, bf16; cupti, cold L2)"
  G="decode_attention --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  for s in "1 8192" "1 8192" "64 4096" "256 2048" "16 32768"; do
    set -- $s
    bench $G --set batch=$1 --set kv_len=$2
  done
  timeout 100 python3 bench/peers/torch_decode_attention.py --json "$P" 2>&1 | grep -v Warning | grep -v "return F" | tail -8
  stamp "GPU tests, four processes ($(left) s left)"
  S=$(( $(left) - 12 ))
  tests gpu_tests_norm.log $S "$T" "[norm],[rmsnorm],[activation],[pdl]" --durations yes &
  tests gpu_tests_rope_kv.log $S "$T" "[rope],[kv_cache],[replay],[trace]" --durations yes &
  tests gpu_tests_decode_a.log $S "$T" "decode gpu: lookup forms*,decode gpu: dependent merge*,decode gpu: invalid tuning*,merge gpu*,decode gpu: every group size*,decode gpu: CUDA graph*" --durations yes &
  tests gpu_tests_decode_b.log $S "$T" "decode gpu: split-KV*,decode gpu: head dims*,decode gpu: fp8*,decode gpu: strided*,decode gpu: empty requests*,decode gpu: logits soft cap*,decode gpu: page sizes*" --durations yes &
  wait
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
