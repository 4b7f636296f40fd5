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
  one() {
    local i=$1 name spec t0
    name=$(sed -n "${i}p" /tmp/rc/cases)
    spec=$(printf '%s' "$name" | sed -e 's/\\/\\\\/g' -e 's/,/\\,/g' -e 's/\[/\\[/g')
    t0=$(date +%s)
    KJIT_TEST_UNDER_SANITIZER=1 KJIT_CACHE_DIR=/tmp/rc/cache$i timeout "${CASE_SECS:-420}" $CS \
      --tool racecheck --error-exitcode 9 --print-limit 20 "$T" "$spec" > /tmp/rc/log$i 2>&1
    echo "rc $? | $(( $(date +%s) - t0 )) s | $name | $(grep -E 'RACECHECK SUMMARY' /tmp/rc/log$i | tr -d '=')" >> /tmp/rc/summary
  }
  export -f one
  export T CS CASE_SECS
  seq 1 "$(wc -l < /tmp/rc/cases)" | xargs -P "${RC_JOBS:-8}" -I{} bash -c 'one {}' &
  rcpid=$!
  stamp "GPU tests: the whole suite"
  tests gpu_tests.log "${SUITE_SECS:-400}" "$T" "[gpu]"
  stamp "waiting for racecheck"
  ( sleep "${RC_WAIT:-40}"; pkill -f compute-sanitizer ) &
  wait $rcpid
  sort -t'|' -k3 /tmp/rc/summary > "$OUT/racecheck.log"
  for f in /tmp/rc/log*; do
    if ! grep -q '0 hazards displayed (0 errors, 0 warnings)' "$f"; then
      echo "==== $f" >> "$OUT/racecheck.log"; tail -40 "$f" >> "$OUT/racecheck.log"
    fi
  done
  echo "racecheck: $(grep -c '^rc 0 ' "$OUT/racecheck.log") of $(wc -l < /tmp/rc/cases) cases rc 0"
  grep '^rc ' "$OUT/racecheck.log" | grep -v '^rc 0 ' | head -30
  stamp "done"
} 2>&1 | tee "$OUT/run.log"; else {
  header
  stamp "part b: see the round's notes"
} 2>&1 | tee "$OUT/run_b.log"; fi
