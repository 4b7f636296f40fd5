#!/usr/bin/env bash
# Round 33 on the H200 (one call, DEADLINE default 360 s), binaries of the commit in KJIT_COMMIT
# (build-h200, kernels embedded): LayerNorm with only the two reductions (the one-pass
# statistics removed after round 32). Every issue-3 decode-size row by default (back to back,
# events-batched, hot L2, PDL default), twice; then every norm GPU test (the changed LayerNorm
# cases: rows 16 / 300 and 4 / 300) and the KV append batch sizes in five processes. Logs:
# run.log, bench.jsonl, tests.log.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 360
{
  header
  E="--timer events-batched --hot-l2"
  R="rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128"
  A="append_paged_kv --set dtype=bf16 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  for pass in 1 2; do
    stamp "decode-size rows, pass $pass"
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
  stamp "GPU tests, five processes ($(left) s left)"
  S=$(( $(left) - 12 ))
  tests t1.log $S "$T" "layernorm gpu: every dtype*" --durations yes &
  tests t2.log $S "$T" "layernorm gpu: fp32 gamma*,layernorm gpu: rows with*,layernorm gpu: a constant*,layernorm gpu: batch sizes*,layernorm gpu: strided*" --durations yes &
  tests t3.log $S "$T" "rmsnorm gpu: batch sizes*,fused_add_rmsnorm gpu: batch sizes*,pdl gpu*" --durations yes &
  tests t4.log $S "$T" "norm gpu: a device id*,gemma_fused_add_rmsnorm gpu*" --durations yes &
  tests t5.log $S "$T" "kv gpu: page sizes*,kv gpu: the index chain*" --durations yes &
  wait
  for i in 1 2 3 4 5; do echo "==== tests process $i"; cat "$OUT/t$i.log"; done > "$OUT/tests.log"
  rm -f "$OUT"/t?.log
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
