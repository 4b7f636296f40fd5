#!/usr/bin/env bash
# Round 13 on the H200, three calls (c: the whole GPU suite, at the end of this header). Part a: compute-sanitizer racecheck of the sampling cases no
# round has finished (bench/racecheck_open_cases.txt), one process per case, four at a time
# (round 12 ran thirteen at once and finished none of them), under KJIT_TEST_UNDER_SANITIZER=1,
# which since round 12 also caps forced clusters at 3 blocks, the cluster distribution test at
# 4 rows and runs the logits test on the one-block path. First, two racechecked bench launches
# of the cluster top-p kernel at V 4096 (clusters of 2 and 16) say what one launch costs under
# the tool. Part b (~3 minutes): issue 3's remaining peers, gelu / gelu-tanh and mul and RoPE
# at large shapes beside PyTorch eager and torch.compile, timed the same way (events around back-to-back
# batches, hot L2); top-p B1 at smaller cluster blocks (`threads=N`); decode B1 with eight warps
# per CTA; and an ncu source page (per SASS instruction) of the top-p B1 cluster kernel. Builds
# nothing: run from the repo root with build-h200 carried, under DEADLINE seconds (default 560);
# KJIT_COMMIT names the commit the binaries were built from. Part c (~4 minutes): the whole
# [gpu] suite in eight processes under the round-12 defaults.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 560
part=${1:-a}
{
  header
  if [ "$part" = b ]; then
  stamp "issue 3 peers at large shapes: kjit (events-batched, hot L2) beside PyTorch"
  E="--timer events-batched --hot-l2 --backends kjit,copy"
  bench act_and_mul --set act=gelu --set dtype=bf16 --set rows=16384 --set d=14336 $E
  bench act_and_mul --set act=gelutanh --set dtype=bf16 --set rows=16384 --set d=14336 $E
  bench act_and_mul --set act=silu --set dtype=bf16 --set rows=16384 --set d=14336 $E
  bench rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 \
    --set tokens=65536 $E
  for op in gelu_and_mul gelu_tanh_and_mul silu_and_mul; do peers --op $op --shapes 16384x14336; done
  peers --op rope --shapes 65536x128
  stamp "top-p B1 (V 128256): the cluster's block size (the plan's is 1024 threads)"
  TP="top_p_sampling --set vocab=128256 --set batch=1"
  bench $TP
  for v in "16 512" "16 256" "8 256" "16 128"; do
    set -- $v
    bench $TP --set path=cluster --set cluster=$1 --set threads=$2
  done
  stamp "decode B1 x L8192: eight warps per CTA (two-stage chains, or two heads per CTA)"
  A="decode_attention --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16 --set batch=1 --set kv_len=8192"
  bench $A
  for v in "warps=8 stage_tokens=128 stages=2" "warps=8 stage_tokens=128 stages=2 num_splits=16" \
    "warps=8 heads_per_cta=2 stage_tokens=64" "warps=8 heads_per_cta=2 stage_tokens=64 num_splits=16"; do
    bench $A $(printf -- '--set %s ' $v)
  done
  # Where top-p B1's ~42 us go, per SASS instruction (round 12's summary showed only that the
  # row's bytes are not the cost): warp stall samples and executed instructions by line.
  stamp "ncu source page of the top-p B1 cluster kernel"
  KJIT_JIT_LINEINFO=1 KJIT_CACHE_DIR=/tmp/kjit-ncu timeout 120 "${NCU:-/usr/local/cuda/bin/ncu}" \
    --clock-control none -k regex:filter_kernel --launch-skip 2 --launch-count 1 \
    --section SourceCounters --section WarpStateStats --page source --csv --print-source sass \
    "$CLI" bench top_p_sampling --set vocab=128256 --set batch=1 --hot-l2 --timer events \
    --warmup 2 --iters 3 > "$OUT/ncu_topp_source.csv" 2>&1
  echo "ncu rc $? ($(wc -l < "$OUT/ncu_topp_source.csv") lines)"
  fi
  if [ "$part" = c ]; then
  # Part c: the whole [gpu] suite once under the defaults round 12 changed (elementwise ops as
  # programmatic dependents, argmax's bit-compare search), in eight processes split so that none
  # holds more than ~3 minutes of round 11's per-case durations.
  stamp "GPU suite: eight processes"
  box=$(( $(left) - 20 ))
  specs=('"decode gpu: lookup forms*"' '"decode gpu: tuning variants*"'
    '[gpu][attention] ~"decode gpu: lookup forms*" ~"decode gpu: tuning variants*"'
    '"sampling gpu: the cluster path draws the one-block*"'
    '[gpu][sampling][cluster] ~"sampling gpu: the cluster path draws the one-block*"'
    '[gpu][sampling]~[cluster]' '[gpu][argmax],[gpu][activation]'
    '[gpu]~[attention]~[sampling]~[argmax]~[activation]')
  pids=()
  for i in "${!specs[@]}"; do
    KJIT_CACHE_DIR=/tmp/kjit-suite-$i timeout "$box" "$T" "${specs[$i]}" --durations yes \
      > /tmp/suite_$i.log 2>&1 &
    pids+=($!)
  done
  for i in "${!specs[@]}"; do
    wait "${pids[$i]}"; echo "suite $i rc $? (${specs[$i]}): $(tail -2 /tmp/suite_$i.log | tr '\n' ' ')"
  done
  for i in "${!specs[@]}"; do echo "==== ${specs[$i]}"; cat /tmp/suite_$i.log; done \
    > "$OUT/gpu_suite.log"
  fi
  if [ "$part" = a ]; then
  mkdir -p /tmp/rc
  grep -v '^#' "$(dirname "$0")/racecheck_open_cases.txt" > /tmp/rc/cases
  export -f rc_case rc_bench
  export T CS CLI
  n=$(wc -l < /tmp/rc/cases)
  stamp "racecheck: two bench launches, then $n open cases, four processes at a time"
  setsid bash -c "
    { echo 'rc_bench 93 top_p_sampling --set vocab=4096 --set batch=1 --set path=cluster --set cluster=2'
      echo 'rc_bench 94 top_p_sampling --set vocab=4096 --set batch=1 --set path=cluster --set cluster=16'
      seq 1 $n | sed 's/^/rc_case /'
    } | xargs -P 4 -I{} bash -c '{}'" &
  rcpid=$!
  while kill -0 $rcpid 2>/dev/null && [ "$(left)" -gt 10 ]; do sleep 5; done
  kill -- -$rcpid 2>/dev/null; sleep 2; pkill -f compute-sanitizer
  rc_report
  for i in $(seq 1 "$n"); do
    [ -e "/tmp/rc/log$i" ] || echo "not started: $(sed -n "${i}p" /tmp/rc/cases)"
  done
  fi
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run_$part.log"
