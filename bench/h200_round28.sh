#!/usr/bin/env bash
# Round 28 on the H200 (one call, DEADLINE default 240 s), binaries of the commit in KJIT_COMMIT
# (build-h200, kernels embedded): issue 3's 64-row decode-size rows beside the launch-and-move
# floor (`bench empty --set read=R --set write=W`: a PDL kernel that waits like the ops, then
# reads R and writes W bytes in 16-byte vectors), each floor with the bytes its op moves, back to
# back (events-batched, hot L2, the PDL default), twice. The 1-row rows have their floor in the
# empty kernel and an 8 KB move.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 240
{
  header
  E="--timer events-batched --hot-l2"
  R="rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128"
  A="append_paged_kv --set dtype=bf16 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  for pass in 1 2; do
    stamp "pass $pass"
    bench empty $E
    bench empty --set read=8192 --set write=8192 $E
    bench rmsnorm --set dtype=bf16 --set rows=64 --set hidden=4096 $E
    bench empty --set read=532480 --set write=524288 $E
    bench fused_add_rmsnorm --set dtype=bf16 --set rows=64 --set hidden=4096 $E
    bench empty --set read=1056768 --set write=1048576 $E
    bench layernorm --set dtype=bf16 --set rows=64 --set hidden=4096 $E
    bench empty --set read=540672 --set write=524288 $E
    bench act_and_mul --set act=silu --set dtype=bf16 --set rows=64 --set d=14336 $E
    bench empty --set read=3670016 --set write=1835008 $E
    bench $A --set tokens=64 $E
    bench $A --set tokens=64 --set batch=64 $E
    bench empty --set read=262144 --set write=262144 $E
    bench $R --set tokens=64 $E
    bench empty --set read=655360 --set write=655360 $E
  done
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
