#!/usr/bin/env bash
# One H200 round (run through the device tool from the repo root with build-h200 carried):
# environment, the whole test suite with the [gpu] tests, rmsnorm benchmarks with the PyTorch
# peers in the same call, and a compute-sanitizer pass. Everything lands in $OUT.
set -uo pipefail
B=${B:-build-h200}
CLI=$B/tools/kjit-cli/kjit-cli
export KJIT_CACHE_DIR=/tmp/kjit-cache
{
  date -u +%FT%TZ
  echo "commit ${KJIT_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}"
  nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,memory.total --format=csv
  $CLI info
} 2>&1 | tee "$OUT/env.txt"
ctest --test-dir "$B" --output-on-failure -j 4 2>&1 | tee "$OUT/ctest.log"
echo "== cold first call (empty cache: NVRTC compile + load + run)" | tee "$OUT/bench.log"
KJIT_CACHE_DIR=/tmp/kjit-cold $CLI bench rmsnorm --set dtype=bf16 --set rows=64 --set hidden=5120 \
  --json "$OUT/bench.jsonl" 2>&1 | tee -a "$OUT/bench.log"
$CLI compile --all --ops rmsnorm -j 16 2>&1 | tail -1 | tee -a "$OUT/bench.log"
bench() { $CLI bench "$@" --json "$OUT/bench.jsonl"; }
{
  for s in "1 4096" "64 4096" "4096 128" "4096 2048" "4096 4096" "16384 4096" "16384 8192"; do
    set -- $s
    bench rmsnorm --set dtype=bf16 --set rows=$1 --set hidden=$2
  done
  for dt in fp16 fp32; do bench rmsnorm --set dtype=$dt --set rows=16384 --set hidden=8192; done
  for s in "64 4096" "16384 4096" "16384 8192"; do
    set -- $s
    bench fused_add_rmsnorm --set dtype=bf16 --set rows=$1 --set hidden=$2
    bench layernorm --set dtype=bf16 --set rows=$1 --set hidden=$2
  done
  for s in "1 14336" "64 14336" "16384 14336"; do
    set -- $s
    bench act_and_mul --set act=silu --set dtype=bf16 --set rows=$1 --set d=$2
  done
  bench act_and_mul --set act=gelu --set dtype=bf16 --set rows=16384 --set d=14336
  bench act_and_mul --set act=gelutanh --set dtype=fp16 --set rows=16384 --set d=14336
} 2>&1 | tee -a "$OUT/bench.log"
peers() { PYTHONUNBUFFERED=1 python3 bench/peers/torch_peers.py --json "$OUT/peers.jsonl" "$@"; }
{
  peers --op rmsnorm --shapes 1x4096,64x4096,4096x128,4096x2048,4096x4096,16384x4096,16384x8192
  peers --op fused_add_rmsnorm --shapes 64x4096,16384x4096,16384x8192
  peers --op layernorm --shapes 64x4096,16384x4096,16384x8192
  peers --op silu_and_mul --shapes 1x14336,64x14336,16384x14336
} 2>&1 | tee "$OUT/peers.log"
timeout 300 compute-sanitizer --tool memcheck "$B/tests/kjit_gpu_tests" \
  "*strided*" 2>&1 | tail -4 | tee "$OUT/sanitizer.log"
