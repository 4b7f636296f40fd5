#!/usr/bin/env bash
# Round 29 on the H200 (one call, DEADLINE default 400 s), binaries of the commit in KJIT_COMMIT
# (build-h200, kernels embedded): the norms' decode geometry (calls of at most 128 rows: one
# vector a thread, 512 threads for bf16 x 4096) against the old ~4 vectors a thread
# (`--set per_thread=4`, the bench hook), rmsnorm / fused add / layernorm at 1, 64, 128 and 256
# rows, back to back (events-batched, hot L2, PDL default), twice; then every norm GPU test (the
# decode geometry is the default there) in six processes until the deadline. Logs: run.log,
# bench.jsonl and one tests.log (the device tool returns at most eight files).
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 400
{
  header
  E="--timer events-batched --hot-l2"
  for pass in 1 2; do
    stamp "pass $pass"
    bench empty $E
    for n in 1 64 128 256; do
      for op in rmsnorm fused_add_rmsnorm layernorm; do
        bench $op --set dtype=bf16 --set rows=$n --set hidden=4096 $E
        bench $op --set dtype=bf16 --set rows=$n --set hidden=4096 --set per_thread=4 $E
      done
    done
    bench rmsnorm --set dtype=bf16 --set rows=64 --set hidden=8192 $E
    bench rmsnorm --set dtype=bf16 --set rows=64 --set hidden=8192 --set per_thread=4 $E
  done
  stamp "GPU tests, six processes ($(left) s left)"
  S=$(( $(left) - 12 ))
  for i in 1 2 3 4 5 6; do rm -f "$OUT/t$i.log"; done
  tests t1.log $S "$T" "fused_add_rmsnorm gpu: every dtype*" --durations yes &
  tests t2.log $S "$T" "layernorm gpu: every dtype*" --durations yes &
  tests t3.log $S "$T" "gemma_rmsnorm gpu: weight*,rmsnorm gpu: batch sizes*,rmsnorm gpu: strided*,rmsnorm gpu: runs on*,rmsnorm gpu: a device id*,pdl gpu*" --durations yes &
  tests t4.log $S "$T" "rmsnorm gpu: every dtype*,gemma_rmsnorm gpu: strided*,norm gpu: a device id*" --durations yes &
  tests t5.log $S "$T" "layernorm gpu: fp32 gamma*,layernorm gpu: rows with*,layernorm gpu: a constant*,layernorm gpu: batch sizes*,layernorm gpu: strided*" --durations yes &
  tests t6.log $S "$T" "gemma_fused_add_rmsnorm gpu*,fused_add_rmsnorm gpu: batch sizes*,fused_add_rmsnorm gpu: strided*,fused_add_rmsnorm gpu: the norm reads*,fused_add_rmsnorm gpu: eps*,fused_add_rmsnorm gpu: runs on*" --durations yes &
  wait
  for i in 1 2 3 4 5 6; do echo "==== tests process $i"; cat "$OUT/t$i.log"; done > "$OUT/tests.log"
  rm -f "$OUT"/t?.log
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
