#!/usr/bin/env bash
# Round 26 on the H200 (one call, DEADLINE default 450 s), binaries of branch ew-decode2 (build-h200,
# kernels embedded): issue 3's decode-size rows after the RoPE decode kernel (warp-shared angles,
# set-up pinned before the PDL wait), the norms' one-barrier reduction and the opt-in early index
# reads (KJIT_PDL_EARLY_INDICES), back to back (events-batched, hot L2, the PDL default; the empty
# kernel plain and PDL), twice: each pass the default rows, then RoPE / KV append with the opt-in,
# then RoPE at 64 tokens on the old unit-major kernel (the A/B in the same pass); the large shapes
# whose code changed (RoPE, KV append, the three norms) against the copy; then the GPU tests of the
# changed kernels in four processes until the deadline.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 450
{
  header
  E="--timer events-batched --hot-l2"
  R="rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128"
  A="append_paged_kv --set dtype=bf16 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  for pass in 1 2; do
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
  stamp "GPU tests, four processes ($(left) s left)"
  S=$(( $(left) - 12 ))
  tests gpu_tests_rope.log $S "$T" "[rope]" --durations yes &
  tests gpu_tests_kv.log $S "$T" "[kv_cache]" --durations yes &
  tests gpu_tests_pdl_norm.log $S "$T" "[pdl],[norm],[activation],[replay],[trace]" --durations yes &
  tests gpu_tests_rmsnorm.log $S "$T" "[rmsnorm]" --durations yes &
  wait
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
