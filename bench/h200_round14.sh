#!/usr/bin/env bash
# Round 14 on the H200, one call under DEADLINE seconds (default 520). First the timings, alone
# on the GPU: silu and gelu-tanh and mul at 16384 x 14336 with plain loads (round 13's probe:
# last-use loads cost 5.5%) beside a copy, the torch.compile peer of silu (0.98x in round 13),
# and the decode-size silu_and_mul rows. Then, together: the GPU tests of every activation and
# the [pdl] chain, and compute-sanitizer racecheck of the eight sampling cases no round has
# finished, all at once, with KJIT_TEST_UNDER_SANITIZER=1 (forced clusters of 2 blocks, at most
# 4 rows, vocabularies <= 16384). Builds nothing: run from the repo root with build-h200 carried; KJIT_COMMIT names
# the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
start_clock 520
{
  header
  stamp "act_and_mul 16384 x 14336 (events-batched, hot L2) beside a copy and torch.compile"
  E="--timer events-batched --hot-l2 --backends kjit,copy"
  for act in silu gelutanh; do
    bench act_and_mul --set act=$act --set dtype=bf16 --set rows=16384 --set d=14336 $E
  done
  peers --op silu_and_mul --shapes 16384x14336
  stamp "decode-size silu_and_mul (d 14336), back to back, and the empty kernel"
  for r in 1 64; do
    bench act_and_mul --set act=silu --set dtype=bf16 --set rows=$r --set d=14336 \
      --timer events-batched --hot-l2
  done
  bench empty --timer events-batched --hot-l2
  KJIT_PDL=0 bench empty --timer events-batched --hot-l2
  stamp "GPU tests (activation, pdl) beside racecheck of the open sampling cases"
  tests gpu_tests.log 150 "$T" "[gpu][activation],[gpu][pdl]" --durations yes &
  tpid=$!
  mkdir -p /tmp/rc
  grep -v '^#' "$(dirname "$0")/racecheck_open_cases.txt" > /tmp/rc/cases
  rc_run_all
  wait $tpid
  rc_report
  stamp "done after $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$OUT/run.log"
