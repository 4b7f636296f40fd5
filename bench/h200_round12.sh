#!/usr/bin/env bash
# Round 12 on the H200, two calls, each under a hard clock (DEADLINE seconds, default 540). Part
# a, alone on the GPU: the argmax rows with and without search=bits (each with its read probe),
# decode B1 x L8192 at several split counts and CTA shapes, the decode-size elementwise ops back
# to back with and without KJIT_PDL=1, layernorm's one-reduction rows, then ncu with source lines
# (KJIT_JIT_LINEINFO=1) on the decode split kernel and RoPE at 64 tokens. Part b: the GPU tests of
# the changed kernels (argmax; every elementwise kernel and the [pdl] chain) beside
# compute-sanitizer racecheck of the cases no earlier round finished, one process per case, with
# KJIT_TEST_UNDER_SANITIZER=1 (two offsets per draw loop, vocabularies capped at 16384). Builds
# nothing: run from the repo root with build-h200 carried; KJIT_COMMIT names the commit the
# binaries were built from. `all` is one call: part a without the decode and RoPE profiles (ncu
# of top-p B1 only), then part b under what is left of the deadline. `c` (after the defaults
# changed): argmax and decode-size rows under the new defaults, then their GPU tests.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
T=$B/tests/kjit_gpu_tests
NCU=${NCU:-/usr/local/cuda/bin/ncu}
t0=$(date +%s)
left() { echo $(( ${DEADLINE:-540} - ($(date +%s) - t0) )); }
# Two calls: `a` (the timings and ncu, ~4 minutes) and `b` (tests and racecheck, to the deadline),
# or one: `all` runs a without ncu, then b with what is left of DEADLINE (default 560).
part=${1:-a}
if [ "$part" = all ]; then
  NCU_SKIP=1 bash "$0" a
  d=$(( ${DEADLINE:-560} - ($(date +%s) - t0) ))
  DEADLINE=$d bash "$0" b
  exit
fi
{
  header
  if [ "$part" = a ]; then
  stamp "argmax (V 128256): the plan's search, then search=bits"
  for v in "fp32 64" "bf16 64" "bf16 256" "fp32 256" "bf16 8" "fp32 1"; do
    set -- $v
    bench argmax --set vocab=128256 --set dtype=$1 --set batch=$2
    bench argmax --set vocab=128256 --set dtype=$1 --set batch=$2 --set search=bits
  done
  stamp "sampling B1 (V 128256): top-p from probabilities, top-k + top-p from bf16 logits"
  bench top_p_sampling --set vocab=128256 --set batch=1
  bench top_k_top_p_sampling --set dtype=bf16 --set vocab=128256 --set batch=1
  stamp "decode B1 x L8192: split counts and CTA shapes"
  A="decode_attention --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16 --set batch=1 --set kv_len=8192"
  bench $A
  # Round 11: 16 splits (one CTA per SM, 8 stages each) beat 32 and 64; fewer and longer CTAs
  # amortize each CTA's lookups, pipeline fill and partial write. Where does that stop?
  for v in "num_splits=16" "num_splits=12" "num_splits=8" "num_splits=20" \
    "heads_per_cta=2 num_splits=32" "stages=2 num_splits=32"; do
    bench $A $(printf -- '--set %s ' $v)
  done
  stamp "decode-size elementwise back to back (events-batched, hot L2): plain, then KJIT_PDL=1"
  R="rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128"
  for pdl in 0 1; do
    export KJIT_PDL=$pdl
    bench empty --timer events-batched --hot-l2
    for n in 1 64; do
      E="--timer events-batched --hot-l2"
      bench rmsnorm --set dtype=bf16 --set rows=$n --set hidden=4096 $E
      bench fused_add_rmsnorm --set dtype=bf16 --set rows=$n --set hidden=4096 $E
      bench layernorm --set dtype=bf16 --set rows=$n --set hidden=4096 $E
      bench act_and_mul --set act=silu --set dtype=bf16 --set rows=$n --set d=14336 $E
      bench append_paged_kv --set dtype=bf16 --set tokens=$n --set kv_heads=8 --set head_dim=128 \
        --set page_size=16 $E
      bench $R --set tokens=$n $E
    done
  done
  export KJIT_PDL=0
  stamp "layernorm: one-reduction rows (1, 64; cupti, hot L2) and the two-reduction large shape"
  for n in 1 64 65; do
    bench layernorm --set dtype=bf16 --set rows=$n --set hidden=4096 --hot-l2
  done
  bench layernorm --set dtype=bf16 --set rows=16384 --set hidden=8192 --backends kjit,copy
  # NCU_SKIP=1 (the single call, `all`) profiles only top-p B1's cluster kernel: its ~42 us of
  # fixed per-level cost is the open sampling row.
  TOPP="filter_kernel|top_p_sampling --set vocab=128256 --set batch=1 --hot-l2"
  if [ "${NCU_SKIP:-0}" = 1 ]; then set -- "$TOPP"; else
    set -- "decode|$A" "rope|$R --set tokens=64 --hot-l2" "$TOPP"; fi
  stamp "ncu with source lines"
  for c in "$@"; do
    re=${c%%|*}
    echo "==== $re" >> "$OUT/ncu.log"
    KJIT_JIT_LINEINFO=1 KJIT_CACHE_DIR=/tmp/kjit-ncu timeout 60 "$NCU" --clock-control none \
      -k "regex:$re" --launch-skip 2 --launch-count 1 --section WarpStateStats \
      --section SourceCounters --section SpeedOfLight --section LaunchStats \
      "$CLI" bench ${c#*|} --timer events --warmup 2 --iters 3 >> "$OUT/ncu.log" 2>&1
    echo "ncu $re rc $?"
  done
  fi
  if [ "$part" = b ]; then
  stamp "racecheck (background, until the deadline) beside the GPU tests of the changed kernels"
  mkdir -p /tmp/rc
  # The cases no round has finished under racecheck (reliability.md, GPU sanitizers).
  grep -v '^#' "$(dirname "$0")/racecheck_open_cases.txt" > /tmp/rc/cases
  export -f rc_case rc_bench
  export T CS CLI
  n=$(wc -l < /tmp/rc/cases)
  # Beside the cases: one launch of each cluster sampling kernel at V 16384 through the bench,
  # evidence even if a case's loops outlast the deadline.
  setsid bash -c "
    { seq 1 $n | sed 's/^/rc_case /'
      echo 'rc_bench 91 top_p_sampling --set vocab=16384 --set batch=1 --set path=cluster --set cluster=8'
      echo 'rc_bench 92 top_k_top_p_sampling --set dtype=bf16 --set vocab=16384 --set batch=2 --set path=cluster --set cluster=16'
    } | xargs -P $((n + 2)) -I{} bash -c '{}'" &
  rcpid=$!
  # The kernels this round changed: argmax (search=bits) and every elementwise kernel (pdl_enter),
  # in two processes.
  box=$(( $(left) - 30 ))
  KJIT_CACHE_DIR=/tmp/kjit-test-a timeout "$box" "$T" \
    "[gpu][argmax],[gpu][pdl],[gpu][norm],[gpu][rmsnorm]" --durations yes > /tmp/tests_a.log 2>&1 &
  ta=$!
  KJIT_CACHE_DIR=/tmp/kjit-test-b timeout "$box" "$T" \
    "[gpu][activation],[gpu][rope],[gpu][kv_cache]" --durations yes > /tmp/tests_b.log 2>&1
  echo "tests b rc $?"; tail -2 /tmp/tests_b.log
  wait $ta; echo "tests a rc $?"; tail -2 /tmp/tests_a.log
  cat /tmp/tests_a.log /tmp/tests_b.log > "$OUT/gpu_tests.log"
  while kill -0 $rcpid 2>/dev/null && [ "$(left)" -gt 10 ]; do sleep 5; done
  kill -- -$rcpid 2>/dev/null; sleep 2; pkill -f compute-sanitizer
  rc_report
  fi
  if [ "$part" = c ]; then
  # Part c (second session call): the defaults round 12 changed, argmax's bit-compare search and
  # programmatic dependent launches of the elementwise ops on sm_90, timed and then tested.
  stamp "argmax defaults (V 128256; now search=bits)"
  for v in "fp32 64" "bf16 64" "bf16 256" "fp32 256"; do
    set -- $v
    bench argmax --set vocab=128256 --set dtype=$1 --set batch=$2
  done
  stamp "decode-size elementwise back to back, the default launch (pdl), and the plain empty kernel"
  E="--timer events-batched --hot-l2"
  KJIT_PDL=0 bench empty $E
  bench empty $E
  for n in 1 64; do
    bench rmsnorm --set dtype=bf16 --set rows=$n --set hidden=4096 $E
    bench rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set tokens=$n $E
  done
  stamp "cupti rows of an elementwise op time plain launches whatever the default"
  bench rmsnorm --set dtype=bf16 --set rows=1 --set hidden=4096 --hot-l2
  bench rmsnorm --set dtype=bf16 --set rows=16384 --set hidden=8192 --backends kjit,copy
  stamp "GPU tests under the new defaults, four processes"
  box=$(( $(left) - 15 ))
  KJIT_CACHE_DIR=/tmp/kjit-test-a timeout "$box" "$T" \
    "[gpu][argmax],[gpu][pdl],sampling gpu: argmax*" --durations yes > /tmp/tests_a.log 2>&1 &
  ta=$!
  KJIT_CACHE_DIR=/tmp/kjit-test-b timeout "$box" "$T" "[gpu][norm],[gpu][rmsnorm]" \
    --durations yes > /tmp/tests_b.log 2>&1 &
  tb=$!
  KJIT_CACHE_DIR=/tmp/kjit-test-c timeout "$box" "$T" "[gpu][activation]" --durations yes \
    > /tmp/tests_c.log 2>&1 &
  tc=$!
  KJIT_CACHE_DIR=/tmp/kjit-test-d timeout "$box" "$T" "[gpu][rope],[gpu][kv_cache]" \
    --durations yes > /tmp/tests_d.log 2>&1
  echo "tests d rc $?"; tail -2 /tmp/tests_d.log
  for x in "c $tc" "b $tb" "a $ta"; do
    set -- $x
    wait $2; echo "tests $1 rc $?"; tail -2 /tmp/tests_$1.log
  done
  cat /tmp/tests_[abcd].log > "$OUT/gpu_tests_c.log"
  fi
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run_$part.log"
