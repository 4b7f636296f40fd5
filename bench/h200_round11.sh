#!/usr/bin/env bash
# Round 11 on the H200. Part a: Nsight Compute on the rows still short of their targets (argmax
# B64 fp32 beside its read probe, decode B1 x L8192's split and merge kernels, RoPE and layernorm
# at 64 tokens), then the whole GPU suite and, beside it, compute-sanitizer racecheck over every
# GPU test case, one process per case, with KJIT_TEST_UNDER_SANITIZER=1 (two offsets per sampling
# draw loop: round 10's box ended ten sampling cases at full draw counts). Part b: timings (set by
# the round's changes). Builds nothing: run from the repo root with build-h200 carried;
# KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
T=$B/tests/kjit_gpu_tests
NCU=${NCU:-/usr/local/cuda/bin/ncu}
part=${1:-a}
# prof LABEL KERNEL_REGEX ARGS...: one bench run under ncu (events timer: CUPTI is ncu's), its
# details appended to $OUT/ncu.log.
prof() {
  local label=$1 re=$2
  shift 2
  echo "==== $label" >> "$OUT/ncu.log"
  timeout 60 "$NCU" --clock-control none -k "regex:$re" --launch-skip 2 --launch-count 3 \
    --section SpeedOfLight --section LaunchStats --section Occupancy --section WarpStateStats \
    --section MemoryWorkloadAnalysis --section SchedulerStats \
    "$CLI" bench "$@" --timer events --warmup 2 --iters 3 >> "$OUT/ncu.log" 2>&1
  echo "ncu $label rc $?"
}
if [ "$part" = a ]; then {
  header
  stamp "ncu"
  prof "argmax fp32 B64" 'argmax|probe' argmax --set dtype=fp32 --set batch=64 --set vocab=128256
  prof "argmax bf16 B256" 'argmax|probe' argmax --set dtype=bf16 --set batch=256 --set vocab=128256
  prof "decode B1 L8192" 'decode|probe' decode_attention --set dtype=bf16 --set qo_heads=32 \
    --set kv_heads=8 --set head_dim=128 --set page_size=16 --set batch=1 --set kv_len=8192
  prof "rope 64 tokens" 'rope' rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 \
    --set head_dim=128 --set tokens=64 --hot-l2
  prof "layernorm 64 rows" 'layernorm' layernorm --set dtype=bf16 --set rows=64 --set hidden=4096 \
    --hot-l2
  grep -E '^==== |^  [a-z_]+.*\(|Duration|DRAM Throughput|Memory Throughput|Achieved Occupancy|Registers Per|Block Size|Grid Size|Warp Cycles Per Issued|No Eligible|Stall' "$OUT/ncu.log" | head -150
  stamp "racecheck, one case per process, every GPU case, in the background"
  mkdir -p /tmp/rc
  "$T" --list-test-names-only "[gpu]" | grep -v '^$' | grep -v 'matching test case' |
    sort -u > /tmp/rc/cases
  echo "$(wc -l < /tmp/rc/cases) cases"
  export -f rc_case
  export T CS
  seq 1 "$(wc -l < /tmp/rc/cases)" | xargs -P "${RC_JOBS:-8}" -I{} bash -c "rc_case {} ${CASE_SECS:-420}" &
  rcpid=$!
  stamp "GPU tests: the whole suite"
  tests gpu_tests.log "${SUITE_SECS:-400}" "$T" "[gpu]"
  stamp "waiting for racecheck"
  ( sleep "${RC_WAIT:-40}"; pkill -f compute-sanitizer ) &
  wait $rcpid
  rc_report | grep -v '^rc 0 ' | head -30
  echo "racecheck: $(grep -c '^rc 0 ' "$OUT/racecheck.log") of $(wc -l < /tmp/rc/cases) cases rc 0"
  stamp "done"
} 2>&1 | tee "$OUT/run.log"; else {
  # Part b, one call under a hard clock: the sweeps alone on the GPU first, then the whole suite
  # as three processes beside racecheck of round 10's ten unfinished sampling cases and of one
  # bench launch of each cluster sampling kernel; everything left at DEADLINE seconds is killed
  # and reported as unfinished.
  t0=$(date +%s)
  header
  A="decode_attention --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  B1="--set batch=1 --set kv_len=8192"
  stamp "decode B1 x L8192 (cupti, cold L2): the default (now pdl) and pipeline shapes"
  bench $A $B1
  bench $A $B1 --set pdl=0
  for v in "num_splits=16" "num_splits=64" "stage_tokens=32 stages=4" \
    "stage_tokens=32 stages=4 num_splits=64" "stage_tokens=32 stages=3 ctas_per_sm=4 num_splits=64" \
    "stages=4 num_splits=16" "warps=2 stage_tokens=32 stages=4 num_splits=64" \
    "warps=8 stage_tokens=128 stages=2 num_splits=16" "stage_tokens=16 stages=8 num_splits=64"; do
    bench $A $B1 $(printf -- '--set %s ' $v)
  done
  stamp "decode large shapes with the pdl default"
  for s in "64 4096" "256 2048" "16 32768"; do
    set -- $s
    bench $A --set batch=$1 --set kv_len=$2
  done
  stamp "argmax shapes (V 128256, each with its read probe)"
  M="argmax --set vocab=128256"
  for v in "dtype=fp32 batch=64" "dtype=fp32 batch=64 threads=256" \
    "dtype=fp32 batch=64 path=cluster cluster=4 threads=1024 unroll=2" \
    "dtype=fp32 batch=64 threads=256 unroll=8" "dtype=bf16 batch=64" \
    "dtype=bf16 batch=64 threads=256" "dtype=bf16 batch=64 path=cluster cluster=4" \
    "dtype=bf16 batch=256" "dtype=bf16 batch=256 path=cluster cluster=4" \
    "dtype=bf16 batch=256 threads=256" "dtype=bf16 batch=256 unroll=8 threads=512" \
    "dtype=fp32 batch=256"; do
    bench $M $(printf -- '--set %s ' $v)
  done
  stamp "sweeps done after $(( $(date +%s) - t0 )) s"

  mkdir -p /tmp/rc
  cat > /tmp/rc/cases <<'CASES'
sampling gpu: cluster path draws follow the renormalized distribution
sampling gpu: cluster path from logits (fp32, bf16, fp16), per-row parameters
sampling gpu: cluster path is deterministic, per-row seeds ignore the position
sampling gpu: cluster path replays in a captured graph, auto batch 1 matches
sampling gpu: cluster path reports the same invalid rows
sampling gpu: cluster path with weights too small for the fixed-point mass
sampling gpu: draws follow the renormalized distribution (>= 1e5 draws)
sampling gpu: every draw is in the reference set, odd vocabularies included
sampling gpu: logits (fp32, bf16, fp16) with temperature, top-k and top-p
sampling gpu: the cluster path draws the one-block path's tokens, all in the set
CASES
  export -f rc_case rc_bench
  export T CS CLI
  stamp "racecheck: 10 test cases and 3 bench launches, 8 at a time (setsid: killed at the deadline)"
  setsid bash -c '
    { seq 1 10 | sed "s/^/rc_case /"
      echo "rc_bench 11 top_p_sampling --set vocab=128256 --set batch=1 --set path=cluster --set cluster=8"
      echo "rc_bench 12 top_k_top_p_sampling --set dtype=bf16 --set vocab=128256 --set batch=1 --set path=cluster --set cluster=16"
      echo "rc_bench 13 top_p_sampling --set vocab=128256 --set batch=4 --set path=cluster --set cluster=4"
    } | xargs -P 8 -I{} bash -c "{}"' &
  rcpid=$!
  stamp "GPU suite: three processes ([attention], [sampling], the rest)"
  sl=$(( ${DEADLINE:-540} - ($(date +%s) - t0) - 20 ))
  for g in attention sampling rest; do
    case $g in attention) spec="[gpu][attention]" ;; sampling) spec="[gpu][sampling]" ;;
      rest) spec="[gpu]~[attention]~[sampling]" ;; esac
    KJIT_CACHE_DIR=/tmp/kjit-test-$g timeout "$sl" "$T" "$spec" --durations yes \
      > /tmp/suite_$g.log 2>&1 &
    eval "pid_$g=\$!"
  done
  for g in attention sampling rest; do
    eval "wait \$pid_$g"; echo "suite $g rc $?"; tail -3 /tmp/suite_$g.log
  done
  for g in attention sampling rest; do echo "==== $g"; cat /tmp/suite_$g.log; done > "$OUT/gpu_tests.log"
  stamp "suite done after $(( $(date +%s) - t0 )) s; racecheck until the deadline"
  while kill -0 $rcpid 2>/dev/null && [ $(( $(date +%s) - t0 )) -lt "${DEADLINE:-540}" ]; do sleep 5; done
  kill -- -$rcpid 2>/dev/null; sleep 2; pkill -f compute-sanitizer
  rc_report
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run_b.log"; fi
