#!/usr/bin/env bash
# Round 21 on the H200, one call under DEADLINE seconds (default 420): decode B1 x L8192 with
# the prologue's reads issued together (the plan's guess of kv_indptr[b] starts the page-id
# reads beside the page table's) and the one-round-trip merge kernel; the same rows with the
# guess off (spec=0) and with the kernels of BASE_KERNELS (the round-20 commit's, when present);
# phase stamps of both; the large decode rows as a regression check; sampling phase stamps of
# top-k + top-p B1 from bf16 and from fp32 logits; the decode GPU tests. Builds nothing: run from
# the repo root with build-h200 carried; KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 420
BASE_KERNELS=${BASE_KERNELS:-.h200-base/kernels}
{
  header
  G="decode_attention --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  A="$G --set batch=1 --set kv_len=8192"
  stamp "decode B1 x L8192 (cupti, cold L2): new, guess off, 16 splits, base kernels"
  bench $A
  bench $A --set spec=0
  bench $A --set num_splits=16
  if [ -d "$BASE_KERNELS" ]; then
    KJIT_KERNEL_DIR=$BASE_KERNELS KJIT_CACHE_DIR=/tmp/kjit-cache-base bench $A
  fi
  bench $A
  stamp "decode B1 phase stamps: new, then guess off"
  bash bench/experiments/decode_stamps.sh $(echo $A | cut -d' ' -f2-)
  bash bench/experiments/decode_stamps.sh $(echo $A | cut -d' ' -f2-) --set spec=0
  stamp "decode large rows (regression check)"
  for s in "64 4096" "256 2048" "16 32768"; do
    set -- $s
    bench $G --set batch=$1 --set kv_len=$2
  done
  stamp "sampling phase stamps, top-k 50 + top-p B1 V 128256: bf16, fp32 logits"
  for d in bf16 fp32; do
    bash bench/experiments/sampling_stamps.sh top_k_top_p_sampling --set dtype=$d \
      --set vocab=128256 --set batch=1
  done
  stamp "decode GPU tests ($(left) s left)"
  tests gpu_tests.log $(( $(left) - 15 )) "$T" "[gpu][attention]" --durations yes
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
