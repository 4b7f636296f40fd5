#!/usr/bin/env bash
# Round 30 on the H200 (one call, DEADLINE default 120 s), binaries of b038fa9 (build-h200): the
# norms at 1 and 64 rows (bf16 x 4096) with 1, 2 and 4 vectors a thread (`--set per_thread`),
# back to back (events-batched, hot L2, PDL default), twice: round 29 showed one vector a thread
# faster for RMSNorm and the fused add but slower for LayerNorm's one-pass statistics (16 warps'
# partials); two vectors (8 warps) is the candidate there.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 120
{
  header
  E="--timer events-batched --hot-l2"
  for pass in 1 2; do
    stamp "pass $pass"
    bench empty $E
    for n in 1 64; do
      for op in rmsnorm fused_add_rmsnorm layernorm; do
        for pt in 1 2 4; do
          bench $op --set dtype=bf16 --set rows=$n --set hidden=4096 --set per_thread=$pt $E
        done
      done
    done
  done
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
