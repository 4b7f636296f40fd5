#!/usr/bin/env bash
# Round 4 on the H200: the benchmark harness itself. rmsnorm timed by CUPTI kernel timestamps and
# by events behind a blocking kernel, cold and hot L2, at a large (16384 x 8192) and a decode
# (1 x 4096) size, each with the copy baseline as its own row; a noise-stopped run; then the
# Llama-3-8B workload. Builds nothing: run from the repo root with build-h200 carried. Results in
# $OUT: bench.jsonl, bench.csv (same rows), bench.log.
set -uo pipefail
CLI=${B:-build-h200}/tools/kjit-cli/kjit-cli
export KJIT_CACHE_DIR=/tmp/kjit-cache
J="$OUT/bench.jsonl"
C="$OUT/bench.csv"
bench() { $CLI bench "$@" --json "$J" --csv "$C"; }
{
  date -u +%FT%TZ
  echo "commit ${KJIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.limit --format=csv
  for s in "16384 8192" "1 4096"; do
    set -- $s
    R="rmsnorm --set dtype=bf16 --set rows=$1 --set hidden=$2 --backends kjit,copy"
    for timer in cupti events; do
      for l2 in --cold-l2 --hot-l2; do
        echo "== rmsnorm rows=$1 hidden=$2 --timer $timer $l2"
        bench $R --timer $timer $l2
      done
    done
    echo "== rmsnorm rows=$1 hidden=$2 --timer events-batched --hot-l2 (the old mechanism)"
    bench $R --timer events-batched --hot-l2
    echo "== rmsnorm rows=$1 hidden=$2 noise-stopped (0.5%, 5 s cap)"
    bench $R --max-noise 0.5 --max-time 5
  done
  echo "== the launch floor"
  bench empty --timer cupti --hot-l2
  bench empty --timer events --hot-l2
  echo "== KJIT_TRACE_DUMP: a traced run records its definitions"
  KJIT_TRACE_DUMP=1 KJIT_TRACE_DUMP_DIR="$OUT/traces" $CLI bench rmsnorm --set dtype=bf16 \
    --set rows=64 --set hidden=4096 --iters 5 --no-check
  find "$OUT/traces" -type f | sort
  echo "== Llama-3-8B workload"
  bench --from bench/workloads/llama3-8b.jsonl
} 2>&1 | tee "$OUT/bench.log"
