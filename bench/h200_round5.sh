#!/usr/bin/env bash
# Round 5 on the H200: one device call for everything new this session, most important first
# (each section is time-boxed and writes to $OUT as it goes, so a cut-off run still returns what
# it finished): GPU tests of the new families, decode attention and sampling benchmarks beside
# their PyTorch peers, the harness's CUPTI and event timers, the AOT zero-compile test, the
# decode floor, then the older families' GPU tests. Builds nothing: run from the repo root with
# build-h200 carried. KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
B=${B:-build-h200}
CLI=$B/tools/kjit-cli/kjit-cli
export KJIT_CACHE_DIR=/tmp/kjit-cache
J="$OUT/bench.jsonl"
P="$OUT/peers.jsonl"
tests() {  # tests LOG SECONDS BINARY SPEC...
  local log=$1 secs=$2
  shift 2
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout "$secs" "$@" 2>&1 | tee -a "$OUT/$log" | tail -4
}
bench() { timeout 90 "$CLI" bench "$@" --json "$J"; }
{
  date -u +%FT%TZ
  echo "commit ${KJIT_COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  ldd "$B/libkjit.so" | grep "not found" || echo "libkjit.so: every dependency found"
  echo "== GPU tests: attention, sampling, replay, trace, rope"
  tests gpu_tests_new.log 200 "$B/tests/kjit_gpu_tests" "[attention],[sampling],[replay],[trace],[rope]"

  echo "== decode attention (GQA 32/8, head_dim 128, page 16, bf16; cupti, cold L2)"
  for s in "64 4096" "256 2048" "1 8192" "16 32768"; do
    set -- $s
    bench decode_attention --set dtype=bf16 --set batch=$1 --set kv_len=$2 --set qo_heads=32 \
      --set kv_heads=8 --set head_dim=128 --set page_size=16
  done
  timeout 120 python3 bench/peers/torch_decode_attention.py --json "$P"

  echo "== sampling (V 128256)"
  bench top_p_sampling --set batch=64 --set vocab=128256
  bench top_p_sampling --set batch=1 --set vocab=128256
  bench top_k_top_p_sampling --set dtype=bf16 --set batch=128 --set vocab=128256
  bench top_k_top_p_sampling --set dtype=fp32 --set batch=1 --set vocab=128256
  bench argmax --set dtype=fp32 --set batch=64 --set vocab=128256
  bench argmax --set dtype=bf16 --set batch=256 --set vocab=128256
  for op in top_p_sampling top_k_top_p_sampling; do
    timeout 90 python3 bench/peers/torch_sampling.py --op $op --json "$P"
  done

  echo "== harness: rmsnorm bf16 16384x8192 by each timer"
  R="rmsnorm --set dtype=bf16 --set rows=16384 --set hidden=8192 --backends kjit,copy"
  bench $R --timer cupti --cold-l2
  bench $R --timer events --cold-l2
  bench $R --timer cupti --hot-l2
  bench $R --timer events-batched --hot-l2
  echo "== the decode floor (events-batched, hot L2, as rounds 2-3)"
  for i in 1 2; do
    bench empty --timer events-batched --hot-l2
    bench rope --set dtype=bf16 --set tokens=1 --set qo_heads=32 --set kv_heads=8 \
      --set head_dim=128 --timer events-batched --hot-l2
    bench rmsnorm --set dtype=bf16 --set rows=1 --set hidden=4096 --timer events-batched --hot-l2
  done
  bench empty --timer cupti --hot-l2

  echo "== AOT package with KJIT_DISABLE_JIT, CLI bench tests"
  tests unit_gpu.log 90 "$B/tests/kjit_unit_tests" "[gpu-aot]"
  tests unit_gpu.log 90 "$B/tests/kjit_unit_tests" "cli bench*"

  echo "== GPU tests: the other families"
  tests gpu_tests_rest.log 200 "$B/tests/kjit_gpu_tests" "~[attention]~[sampling]~[replay]~[trace]~[rope]"
} 2>&1 | tee "$OUT/run.log"
