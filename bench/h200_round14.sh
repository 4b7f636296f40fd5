#!/usr/bin/env bash
# Round 14 on the H200, one call under DEADLINE seconds (default 520). First the timings, alone
# on the GPU: act_and_mul at 16384 x 14336 with plain loads (round 13's probe: last-use loads
# cost 5.5%) beside a copy and the torch.compile peers of silu and gelu-tanh (the two at or
# under 1.0x in round 13), the decode-size silu_and_mul rows, and top-p B1 at smaller cluster
# blocks (`threads=N`: round 13's binaries predated the knob, so its sweep ran 1024 threads
# every time). Then, together: the GPU tests of every activation and the [pdl] chain, and
# compute-sanitizer racecheck of the eight sampling cases no round has finished, all at once,
# with KJIT_TEST_UNDER_SANITIZER=1 (forced clusters of 2 blocks, at most 4 rows, vocabularies
# <= 16384). Builds nothing: run from the repo root with build-h200 carried; KJIT_COMMIT names
# the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
T=$B/tests/kjit_gpu_tests
t0=$(date +%s)
left() { echo $(( ${DEADLINE:-520} - ($(date +%s) - t0) )); }
peers() { PYTHONUNBUFFERED=1 timeout 120 python3 bench/peers/torch_peers.py --json "$P" "$@"; }
{
  header
  stamp "act_and_mul 16384 x 14336 (events-batched, hot L2) beside a copy and torch.compile"
  E="--timer events-batched --hot-l2 --backends kjit,copy"
  for act in silu gelutanh gelu; do
    bench act_and_mul --set act=$act --set dtype=bf16 --set rows=16384 --set d=14336 $E
  done
  for op in silu_and_mul gelu_tanh_and_mul; do peers --op $op --shapes 16384x14336; done
  stamp "decode-size silu_and_mul (d 14336), back to back, and the empty kernel"
  for r in 1 64; do
    bench act_and_mul --set act=silu --set dtype=bf16 --set rows=$r --set d=14336 \
      --timer events-batched --hot-l2
  done
  bench empty --timer events-batched --hot-l2
  KJIT_PDL=0 bench empty --timer events-batched --hot-l2
  stamp "top-p B1 (V 128256): the cluster's block size (the plan's is 1024 threads)"
  TP="top_p_sampling --set vocab=128256 --set batch=1"
  bench $TP
  for v in "16 512" "16 256" "16 128" "8 256"; do
    set -- $v
    bench $TP --set path=cluster --set cluster=$1 --set threads=$2
  done
  stamp "GPU tests (activation, pdl) beside racecheck of the open sampling cases"
  tests gpu_tests.log 150 "$T" "[gpu][activation],[gpu][pdl]" --durations yes &
  tpid=$!
  mkdir -p /tmp/rc
  grep -v '^#' "$(dirname "$0")/racecheck_open_cases.txt" > /tmp/rc/cases
  export -f rc_case
  export T CS
  n=$(wc -l < /tmp/rc/cases)
  setsid bash -c "seq 1 $n | xargs -P $n -I{} bash -c 'rc_case {}'" &
  rcpid=$!
  while kill -0 $rcpid 2>/dev/null && [ "$(left)" -gt 12 ]; do sleep 4; done
  kill -- -$rcpid 2>/dev/null; sleep 2; pkill -f compute-sanitizer
  wait $tpid
  rc_report
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
