#!/usr/bin/env bash
# Round 32 on the H200 (one call, DEADLINE default 90 s), binaries of the commit in KJIT_COMMIT
# (build-h200): LayerNorm at 1 and 64 rows (bf16 x 4096), back to back (events-batched, hot L2,
# PDL default), twice: the default (one-pass statistics, two vectors a thread) beside the two
# reductions (`--set onepass=0`) at one and two vectors a thread.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 90
{
  header
  E="--timer events-batched --hot-l2"
  L="layernorm --set dtype=bf16 --set hidden=4096"
  for pass in 1 2; do
    stamp "pass $pass"
    bench empty $E
    for n in 1 64; do
      bench $L --set rows=$n $E
      bench $L --set rows=$n --set onepass=0 $E
      bench $L --set rows=$n --set onepass=0 --set per_thread=2 $E
      bench rmsnorm --set dtype=bf16 --set hidden=4096 --set rows=$n $E
    done
  done
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
