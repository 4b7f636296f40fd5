#!/usr/bin/env bash
# Round 7 on the H200: the tuning round. Decode attention variants, the sampling cluster path,
# argmax split across CTAs and RoPE decode variants, each timed beside the round-6 kernel in the
# same call with the reference check on; the decode floor of every elementwise op under the new
# harness; peers again; then (part b) compute-sanitizer and the remaining GPU tests. Each section
# is time-boxed and writes to $OUT as it goes. Builds nothing: run from the repo root with
# build-h200 carried; KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
B=${B:-build-h200}
CLI=$B/tools/kjit-cli/kjit-cli
export KJIT_CACHE_DIR=/tmp/kjit-cache
J="$OUT/bench.jsonl"
P="$OUT/peers.jsonl"
stamp() { echo "[$(date -u +%T)] $*"; }
tests() {  # tests LOG SECONDS BINARY SPEC...
  local log=$1 secs=$2
  shift 2
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout "$secs" "$@" 2>&1 | tee -a "$OUT/$log" | tail -4
}
bench() { timeout 90 "$CLI" bench "$@" --json "$J" 2>&1 | grep -v '^  repro' | tail -6; }
part=${1:-a}
if [ "$part" = a ]; then {
  date -u +%FT%TZ
  echo "commit ${KJIT_COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  stamp "GPU tests: attention, sampling, trace, rope"
  tests gpu_tests.log 200 "$B/tests/kjit_gpu_tests" "[attention],[sampling],[trace],[rope]"

  stamp "decode attention sweep (GQA 32/8, head_dim 128, page 16, bf16; cupti, cold L2)"
  A="decode_attention --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  #ATTENTION_SWEEP#
  timeout 100 python3 bench/peers/torch_decode_attention.py --json "$P" 2>&1 | grep -v Warning | grep -v "return F" | tail -12

  stamp "sampling: cluster vs single-CTA paths, argmax (V 128256)"
  #SAMPLING_SWEEP#
  for op in top_p_sampling top_k_top_p_sampling; do
    timeout 90 python3 bench/peers/torch_sampling.py --op $op --json "$P" 2>&1 | tail -8
  done

  stamp "the decode floor: back to back (events-batched) and kernel time (cupti), hot L2"
  for t in events-batched cupti; do
    bench empty --timer $t --hot-l2
    for n in 1 64; do
      bench rmsnorm --set dtype=bf16 --set rows=$n --set hidden=4096 --timer $t --hot-l2
      bench fused_add_rmsnorm --set dtype=bf16 --set rows=$n --set hidden=4096 --timer $t --hot-l2
      bench layernorm --set dtype=bf16 --set rows=$n --set hidden=4096 --timer $t --hot-l2
      bench act_and_mul --set act=silu --set dtype=bf16 --set rows=$n --set d=14336 --timer $t --hot-l2
      bench append_paged_kv --set dtype=bf16 --set tokens=$n --set kv_heads=8 --set head_dim=128 \
        --set page_size=16 --timer $t --hot-l2
    done
  done
  stamp "rope variants"
  #ROPE_SWEEP#
  stamp "done"
} 2>&1 | tee "$OUT/run.log"; else {
  date -u +%FT%TZ
  CS=/usr/local/cuda/bin/compute-sanitizer
  stamp "compute-sanitizer memcheck: attention, sampling, rope, trace"
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout 200 $CS --tool memcheck --error-exitcode 9 \
    "$B/tests/kjit_gpu_tests" "[attention],[sampling],[rope],[trace]" > "$OUT/memcheck.log" 2>&1
  echo "memcheck rc $?"; tail -3 "$OUT/memcheck.log"
  stamp "compute-sanitizer racecheck: attention, sampling"
  KJIT_CACHE_DIR=/tmp/kjit-test-cache timeout 160 $CS --tool racecheck --error-exitcode 9 \
    "$B/tests/kjit_gpu_tests" "[attention],[sampling]" > "$OUT/racecheck.log" 2>&1
  echo "racecheck rc $?"; tail -3 "$OUT/racecheck.log"
  stamp "CLI bench tests with a GPU, AOT"
  tests unit_gpu.log 60 "$B/tests/kjit_unit_tests" "cli bench*,[gpu-aot]"
  stamp "GPU tests: the other families"
  tests gpu_tests_rest.log 150 "$B/tests/kjit_gpu_tests" "~[attention]~[sampling]~[replay]~[trace]~[rope]"
  stamp "done"
} 2>&1 | tee "$OUT/run_b.log"; fi
