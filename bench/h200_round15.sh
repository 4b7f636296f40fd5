#!/usr/bin/env bash
# Round 15 on the H200, one call under DEADLINE seconds (default 540). First the timings, alone on
# the GPU: top-p B1 / B64 and top-k + top-p from logits with the counting search (the default)
# beside the exact-mass search (`mass=exact`), the exact search at smaller cluster blocks
# (`threads=N`, a knob round 13's binaries lacked), and KV append at 64 tokens from one request
# and from 64 (batch >= 32 turns the warp-wide indptr lookup off). Then, together: the sampling
# GPU tests (the exact-mass case first) in three processes, and compute-sanitizer racecheck of
# the case rounds 9-14 left unfinished and of the exact-mass case, under
# KJIT_TEST_UNDER_SANITIZER=1. Builds nothing: run from the repo root with
# build-h200 carried; KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 540
{
  header
  stamp "top-p B1 and B64 (V 128256, fp32 probs): counting search, then exact masses"
  for b in 1 64; do
    TP="top_p_sampling --set vocab=128256 --set batch=$b"
    bench $TP
    bench $TP --set mass=exact
    bench $TP --set mass=exact --set path=single
  done
  for v in "16 512" "16 256" "8 512"; do
    set -- $v
    bench top_p_sampling --set vocab=128256 --set batch=1 --set mass=exact --set path=cluster \
      --set cluster=$1 --set threads=$2
  done
  stamp "top-k + top-p from bf16 logits (k 50 keeps the counting search; k = vocab, no top-k, takes the exact one)"
  for b in 1 128; do
    bench top_k_top_p_sampling --set dtype=bf16 --set vocab=128256 --set batch=$b
    bench top_k_top_p_sampling --set dtype=bf16 --set vocab=128256 --set batch=$b --set k=128256 \
      --set mass=exact
    bench top_k_top_p_sampling --set dtype=bf16 --set vocab=128256 --set batch=$b --set k=128256
  done
  stamp "KV append at 64 tokens: one request (the bench's decode row) and 64 requests"
  for b in 1 64; do
    bench append_paged_kv --set dtype=bf16 --set tokens=64 --set batch=$b --set kv_heads=8 \
      --set head_dim=128 --set page_size=16 --timer events-batched --hot-l2
  done
  stamp "GPU tests (sampling) beside racecheck"
  tests gpu_tests.log 300 "$T" "sampling gpu: the exact-mass top-p search*" --durations yes &
  t1=$!
  tests gpu_tests_b.log 300 "$T" '[gpu][sampling][cluster] ~"sampling gpu: the exact-mass*"' \
    --durations yes &
  t2=$!
  tests gpu_tests_c.log 300 "$T" "[gpu][sampling]~[cluster]" --durations yes &
  t3=$!
  mkdir -p /tmp/rc
  { grep -v '^#' "$(dirname "$0")/racecheck_open_cases.txt"
    echo "sampling gpu: the exact-mass top-p search draws the counting search's tokens"
  } > /tmp/rc/cases
  rc_run_all
  wait $t1 $t2 $t3
  rc_report
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
