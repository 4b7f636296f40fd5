#!/usr/bin/env bash
# Round 32 on the H200 (one call, DEADLINE default 300 s), binaries of the commit in KJIT_COMMIT
# (build-h200, kernels embedded), back to back (events-batched, hot L2, PDL default), twice:
# LayerNorm at 1 and 64 rows (bf16 x 4096), the default (one-pass statistics, two vectors a
# thread) beside the two reductions (`--set onepass=0`) at one and two vectors a thread; KV
# append at 1 and 64 tokens from one request and 64 tokens from 64 requests (kv_indptr read by
# the warp up to 127 requests). Then every KV append GPU test in two processes. Logs: run.log,
# bench.jsonl, tests.log.
# (The `onepass` bench hook was removed after this round: LayerNorm has only the two reductions.)
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 300
{
  header
  E="--timer events-batched --hot-l2"
  L="layernorm --set dtype=bf16 --set hidden=4096"
  A="append_paged_kv --set dtype=bf16 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  for pass in 1 2; do
    stamp "pass $pass"
    bench empty $E
    for n in 1 64; do
      bench $L --set rows=$n $E
      bench $L --set rows=$n --set onepass=0 $E
      bench $L --set rows=$n --set onepass=0 --set per_thread=2 $E
      bench rmsnorm --set dtype=bf16 --set hidden=4096 --set rows=$n $E
      bench $A --set tokens=$n $E
    done
    bench $A --set tokens=64 --set batch=64 $E
    bench $A --set tokens=128 --set batch=128 $E
  done
  stamp "GPU tests, two processes ($(left) s left)"
  S=$(( $(left) - 12 ))
  tests t1.log $S "$T" "kv gpu: the index chain*" --durations yes &
  tests t2.log $S "$T" "kv gpu: decode and*,kv gpu: page sizes*,kv gpu: combined*,kv gpu: broken*,kv gpu: a device id*" --durations yes &
  wait
  for i in 1 2; do echo "==== tests process $i"; cat "$OUT/t$i.log"; done > "$OUT/tests.log"
  rm -f "$OUT"/t?.log
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
