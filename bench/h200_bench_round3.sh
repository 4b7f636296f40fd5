#!/usr/bin/env bash
# Round 3 on the H200: RoPE and paged KV append benchmarks and the empty-kernel launch floor,
# with rmsnorm decode sizes again for comparison with the floor. Results in $OUT.
set -uo pipefail
CLI=${B:-build-h200}/tools/kjit-cli/kjit-cli
export KJIT_CACHE_DIR=/tmp/kjit-cache
J="$OUT/bench.jsonl"
{
  date -u +%FT%TZ
  echo "commit ${KJIT_COMMIT:-unknown}"
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader
  $CLI bench empty --json "$J"
  for t in 1 64 65536; do
    $CLI bench rope --set dtype=bf16 --set tokens=$t --set qo_heads=32 --set kv_heads=8 \
      --set head_dim=128 --json "$J"
  done
  $CLI bench append_paged_kv --set dtype=bf16 --set tokens=64 --set batch=64 --set kv_heads=8 \
    --set head_dim=128 --set page_size=16 --json "$J"
  for l in nhd hnd; do
    $CLI bench append_paged_kv --set dtype=bf16 --set tokens=65536 --set kv_heads=8 \
      --set head_dim=128 --set page_size=16 --set layout=$l --json "$J"
  done
  for r in 1 64; do
    $CLI bench rmsnorm --set dtype=bf16 --set rows=$r --set hidden=4096 --json "$J"
    $CLI bench act_and_mul --set act=silu --set dtype=bf16 --set rows=$r --set d=14336 --json "$J"
    $CLI bench fused_add_rmsnorm --set dtype=bf16 --set rows=$r --set hidden=4096 --json "$J"
    $CLI bench layernorm --set dtype=bf16 --set rows=$r --set hidden=4096 --json "$J"
  done
  $CLI bench empty --json "$J"  # again: the floor drifts; bracket the decode figures
} 2>&1 | tee "$OUT/bench.log"
