#!/usr/bin/env bash
# Round 31 on the H200 (one call, DEADLINE default 300 s), binaries of the commit in KJIT_COMMIT
# (build-h200, kernels embedded): the norms' final decode geometry (RMSNorm / fused add one
# vector a thread at <= 128 rows; LayerNorm two in its one-pass statistics, <= 64 rows, one at
# 65..128), then every issue-3 decode-size row by default (back to back, events-batched, hot L2,
# PDL default), twice; then every LayerNorm GPU test and the norm batch-size sweeps. Logs:
# run.log, bench.jsonl, tests.log.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 300
{
  header
  E="--timer events-batched --hot-l2"
  R="rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128"
  A="append_paged_kv --set dtype=bf16 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  for pass in 1 2; do
    stamp "decode-size rows, pass $pass"
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
    bench layernorm --set dtype=bf16 --set rows=128 --set hidden=4096 $E
  done
  stamp "GPU tests, four processes ($(left) s left)"
  S=$(( $(left) - 12 ))
  tests t1.log $S "$T" "layernorm gpu: every dtype*" --durations yes &
  tests t2.log $S "$T" "layernorm gpu: fp32 gamma*,layernorm gpu: rows with*,layernorm gpu: a constant*,layernorm gpu: batch sizes*,layernorm gpu: strided*" --durations yes &
  tests t3.log $S "$T" "rmsnorm gpu: batch sizes*,fused_add_rmsnorm gpu: batch sizes*,pdl gpu*" --durations yes &
  tests t4.log $S "$T" "norm gpu: a device id*,gemma_fused_add_rmsnorm gpu*" --durations yes &
  wait
  for i in 1 2 3 4; do echo "==== tests process $i"; cat "$OUT/t$i.log"; done > "$OUT/tests.log"
  rm -f "$OUT"/t?.log
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
