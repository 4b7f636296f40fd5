#!/usr/bin/env bash
# Round 20 on the H200, one short call under DEADLINE seconds (default 150): the top-k list's
# rank finish (at most 512 keys: the k-th largest by ranking, top-p over the top-k set sorted by
# weight key). The B1 / B64 sampler rows alone on the GPU, then the cluster sampling tests in
# three processes beside racecheck of the logits per-row case. Builds nothing: run from the repo
# root with build-h200 carried; KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 150
{
  header
  stamp "sampler rows (V 128256)"
  KP="top_k_top_p_sampling --set vocab=128256"
  for d in bf16 fp32; do bench $KP --set dtype=$d --set batch=1; done
  bench $KP --set dtype=bf16 --set batch=64
  bench top_p_sampling --set vocab=128256 --set batch=1
  stamp "cluster sampling tests beside racecheck"
  tests gpu_tests.log 100 "$T" "sampling gpu: the exact-mass top-p search*" --durations yes &
  t1=$!
  tests gpu_tests_b.log 100 "$T" "sampling gpu: the cluster path draws the one-block*" \
    --durations yes &
  t2=$!
  tests gpu_tests_c.log 100 "$T" '[gpu][sampling][cluster]~"sampling gpu: the exact-mass*"~"sampling gpu: the cluster path draws the one-block*"' --durations yes &
  t3=$!
  mkdir -p /tmp/rc
  echo "sampling gpu: cluster path from logits (fp32, bf16, fp16), per-row parameters" > /tmp/rc/cases
  rc_run_all
  wait $t1 $t2 $t3
  rc_report
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
