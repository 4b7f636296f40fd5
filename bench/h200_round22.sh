#!/usr/bin/env bash
# Round 22 on the H200, one call under DEADLINE seconds (default 330): decode B1 x L8192 with the
# cluster merge (the splits of a (request, kv head) merge in distributed shared memory: no
# merge kernel) at 16, 12 and 8 splits against the merge kernel, and its phase stamps; the
# samplers with four elements a vector for bf16 logits (256-token segments, as fp32's) at B1,
# B64 and B128; then, in four processes, the decode tests this round touches and every sampling
# GPU test. Builds nothing: run from the repo root with build-h200 carried; KJIT_COMMIT names the
# commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 330
{
  header
  G="decode_attention --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  A="$G --set batch=1 --set kv_len=8192"
  stamp "decode B1 x L8192 (cupti, cold L2): merge kernel (32, 16 splits), cluster merge (16, 12, 8)"
  bench $A
  bench $A --set num_splits=16
  for n in 16 12 8; do bench $A --set merge=cluster --set num_splits=$n; done
  bench $A --set merge=cluster --set num_splits=16
  stamp "decode B1 phase stamps, cluster merge of 16"
  bash bench/experiments/decode_stamps.sh $(echo $A | cut -d' ' -f2-) --set merge=cluster \
    --set num_splits=16
  stamp "samplers, V 128256 (cupti, cold L2)"
  KP="top_k_top_p_sampling --set vocab=128256"
  for d in bf16 bf16 fp32; do bench $KP --set dtype=$d --set batch=1; done
  bench top_p_sampling --set vocab=128256 --set batch=1
  bench $KP --set dtype=bf16 --set batch=64
  bench $KP --set dtype=bf16 --set batch=128
  bench $KP --set dtype=fp32 --set batch=128
  bash bench/experiments/sampling_stamps.sh top_k_top_p_sampling --set dtype=bf16 \
    --set vocab=128256 --set batch=1
  stamp "GPU tests in four processes ($(left) s left)"
  S=$(( $(left) - 12 ))
  tests gpu_tests_decode.log $S "$T" "decode gpu: the cluster merge,decode gpu: a device kv_indptr*,decode gpu: lookup forms*,decode gpu: dependent merge launch under graph replay,decode gpu: invalid tuning overrides are refused,decode gpu: split-KV*" --durations yes &
  t1=$!
  tests gpu_tests_sampling_a.log $S "$T" '[gpu][sampling]~[cluster]' --durations yes &
  t2=$!
  tests gpu_tests_sampling_b.log $S "$T" "sampling gpu: the exact-mass top-p search*,sampling gpu: the cluster path draws the one-block*" --durations yes &
  t3=$!
  tests gpu_tests_sampling_c.log $S "$T" '[gpu][sampling][cluster]~"sampling gpu: the exact-mass*"~"sampling gpu: the cluster path draws the one-block*"' --durations yes &
  t4=$!
  wait $t1 $t2 $t3 $t4
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
