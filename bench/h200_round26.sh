#!/usr/bin/env bash
# Round 26 on the H200 (one call, DEADLINE default 450 s), binaries of branch ew-decode2 (build-h200,
# kernels embedded): issue 3's decode-size rows after the RoPE decode kernel (warp-shared angles,
# set-up pinned before the PDL wait), the norms' one-barrier reduction and the opt-in early index
# reads (KJIT_PDL_EARLY_INDICES), back to back (events-batched, hot L2, the PDL default; the empty
# kernel plain and PDL), twice: each pass the default rows, then RoPE / KV append with the opt-in,
# then RoPE at 64 tokens on the old unit-major kernel (the A/B in the same pass); the large shapes
# whose code changed (RoPE, KV append, the three norms) against the copy; then the GPU tests of the
# changed kernels in ten processes until the deadline. PASSES=1 runs the decode-size rows once.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 450
PASSES=${PASSES:-2}
{
  header
  E="--timer events-batched --hot-l2"
  R="rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128"
  A="append_paged_kv --set dtype=bf16 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  for pass in $(seq 1 "$PASSES"); do
    stamp "decode-size elementwise, pass $pass"
    KJIT_PDL=0 bench empty $E
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
    stamp "pass $pass with KJIT_PDL_EARLY_INDICES=1"
    for n in 1 64; do
      KJIT_PDL_EARLY_INDICES=1 bench $A --set tokens=$n $E
      KJIT_PDL_EARLY_INDICES=1 bench $R --set tokens=$n $E
    done
    KJIT_PDL_EARLY_INDICES=1 bench $A --set tokens=64 --set batch=64 $E
    stamp "pass $pass: RoPE 64 tokens on the round-25b unit-major kernel (A/B)"
    bench $R --set tokens=64 --set layout=unit $E
  done
  stamp "large shapes whose code changed (cupti, cold L2, against the copy)"
  bench $R --set tokens=65536 --backends kjit,copy
  bench $A --set tokens=65536 --set batch=128 --backends kjit,copy
  bench rmsnorm --set dtype=bf16 --set rows=16384 --set hidden=8192 --backends kjit,copy
  bench fused_add_rmsnorm --set dtype=bf16 --set rows=16384 --set hidden=8192 --backends kjit,copy
  bench layernorm --set dtype=bf16 --set rows=16384 --set hidden=8192 --backends kjit,copy
  stamp "GPU tests, ten processes ($(left) s left)"
  S=$(( $(left) - 12 ))
  # The long cases alone, the rest by family, so that the slowest process is one case.
  tests gpu_tests_1.log $S "$T" "fused_add_rmsnorm gpu: every dtype*" --durations yes &
  tests gpu_tests_2.log $S "$T" "layernorm gpu: every dtype*" --durations yes &
  tests gpu_tests_3.log $S "$T" "kv gpu: page sizes*" --durations yes &
  tests gpu_tests_4.log $S "$T" "kv gpu: decode and prefill*,kv gpu: combined*,kv gpu: broken*,kv gpu: the index chain*,kv gpu: a device id*,[pdl],[replay],[trace]" --durations yes &
  tests gpu_tests_5.log $S "$T" "rope gpu: head sizes*" --durations yes &
  tests gpu_tests_6.log $S "$T" "rope gpu: positions*,rope gpu: in place*,rope gpu: decode and prefill*,rope gpu: Llama*,rope gpu: cos_sin_cache*,rope gpu: a device id*" --durations yes &
  tests gpu_tests_7.log $S "$T" "gemma_rmsnorm gpu: weight*,rmsnorm gpu: batch sizes*,rmsnorm gpu: strided*,rmsnorm gpu: runs on*,rmsnorm gpu: a device id*" --durations yes &
  tests gpu_tests_8.log $S "$T" "rmsnorm gpu: every dtype*,gemma_rmsnorm gpu: strided*,norm gpu: a device id*" --durations yes &
  tests gpu_tests_9.log $S "$T" "layernorm gpu: fp32 gamma*,layernorm gpu: rows with*,layernorm gpu: a constant*,layernorm gpu: batch sizes*,layernorm gpu: strided*" --durations yes &
  tests gpu_tests_10.log $S "$T" "gemma_fused_add_rmsnorm gpu*,fused_add_rmsnorm gpu: batch sizes*,fused_add_rmsnorm gpu: strided*,fused_add_rmsnorm gpu: the norm reads*,fused_add_rmsnorm gpu: eps*,fused_add_rmsnorm gpu: runs on*" --durations yes &
  wait
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
