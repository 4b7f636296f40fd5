#!/usr/bin/env bash
# Round 10 on the H200. Part a: the whole GPU suite on the round-10 kernels (decode row offsets,
# joint tiles and the dependent merge launch; sampling's DSMEM merges; argmax; layernorm, KV
# append, RoPE layouts), with compute-sanitizer racecheck finishing the groups round 9's time box
# ended ([sampling] and the small group), one process per test case, in parallel. Part b: the
# timings, each new row beside the round-8 binary (h200-base/kjit-cli, carried) in the same call,
# the read probe on every decode and argmax row, and the PyTorch peers. Builds nothing: run from
# the repo root with build-h200 carried; KJIT_COMMIT names the commit the binaries were built from.
set -uo pipefail
source "$(dirname "$0")/h200_lib.sh"
T=$B/tests/kjit_gpu_tests
BASE=h200-base/kjit-cli
# Few files come back from a device call: part a writes gpu_tests.log, racecheck.log and run.log.
part=${1:-a}
if [ "$part" = a ]; then {
  header
  stamp "racecheck, one case per process, in the background: [sampling] and the small group"
  small="[norm],[rmsnorm],[activation],[rope],[kv_cache],[replay],[trace]"
  mkdir -p /tmp/rc
  { "$T" --list-test-names-only "[sampling]"; "$T" --list-test-names-only "$small"; } |
    grep -v '^$' | grep -v 'matching test case' | sort -u > /tmp/rc/cases
  echo "$(wc -l < /tmp/rc/cases) cases"
  # Each case (by its line number in the list): its own cache and log; a case name is a Catch2
  # spec once backslashes, commas and brackets are escaped.
  one() {
    local i=$1 name spec
    name=$(sed -n "${i}p" /tmp/rc/cases)
    spec=$(printf '%s' "$name" | sed -e 's/\\/\\\\/g' -e 's/,/\\,/g' -e 's/\[/\\[/g')
    KJIT_CACHE_DIR=/tmp/rc/cache$i timeout "${CASE_SECS:-420}" $CS --tool racecheck \
      --error-exitcode 9 --print-limit 20 "$T" "$spec" > /tmp/rc/log$i 2>&1
    echo "rc $? | $name | $(grep -E 'RACECHECK SUMMARY' /tmp/rc/log$i | tr -d '=')" >> /tmp/rc/summary
  }
  export -f one
  export T CS CASE_SECS
  seq 1 "$(wc -l < /tmp/rc/cases)" | xargs -P "${RC_JOBS:-10}" -I{} bash -c 'one {}' &
  rcpid=$!
  stamp "GPU tests: the whole suite"
  tests gpu_tests.log 300 "$T" "[gpu]"
  stamp "waiting for racecheck"
  wait $rcpid
  sort -t'|' -k2 /tmp/rc/summary > "$OUT/racecheck.log"
  # Any case with hazards or an error keeps its whole log.
  for f in /tmp/rc/log*; do
    if ! grep -q '0 hazards displayed (0 errors, 0 warnings)' "$f"; then
      echo "==== $f" >> "$OUT/racecheck.log"; tail -40 "$f" >> "$OUT/racecheck.log"
    fi
  done
  echo "racecheck: $(grep -c '^rc 0 ' "$OUT/racecheck.log") of $(wc -l < /tmp/rc/cases) cases rc 0"
  grep -v '^rc 0 ' "$OUT/racecheck.log" | head -30
  stamp "done"
} 2>&1 | tee "$OUT/run.log"; else {
  header
  # both LABEL ARGS...: the new binary's row, then the round-8 binary's.
  both() { echo "-- new"; bench "$@"; echo "-- base"; timeout 60 "$BASE" bench "$@" --json "$OUT/base.jsonl" 2>&1 | grep -v '^  repro' | tail -4; }
  stamp "decode attention (GQA 32/8, head_dim 128, page 16, bf16; cupti, cold L2)"
  A="decode_attention --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128 --set page_size=16"
  for s in "64 4096" "256 2048" "16 32768" "1 8192"; do
    set -- $s
    S="--set batch=$1 --set kv_len=$2"
    both $A $S
    bench $A $S --set addr=legacy
    bench $A $S --set stages=2
    bench $A $S --set joint_tiles=2 --set warps=2 --set stage_tokens=64
    case $1 in 16|1) bench $A $S --set pdl=1; bench $A $S --set pdl=1 --set merge=fused ;; esac
  done
  timeout 100 python3 bench/peers/torch_decode_attention.py --json "$P" 2>&1 | grep -v Warning | grep -v "return F" | tail -8

  stamp "sampling (V 128256)"
  TP="top_p_sampling --set vocab=128256"
  KP="top_k_top_p_sampling --set vocab=128256"
  both $TP --set batch=1
  for c in 16 8 4; do bench $TP --set batch=1 --set path=cluster --set cluster=$c; done
  bench $TP --set batch=1 --set path=single
  both $TP --set batch=64
  for d in bf16 fp32; do both $KP --set dtype=$d --set batch=1; done
  both $KP --set dtype=bf16 --set batch=128
  for op in top_p_sampling top_k_top_p_sampling; do
    timeout 90 python3 bench/peers/torch_sampling.py --op $op --json "$P" 2>&1 | tail -4
  done

  stamp "argmax (V 128256; each row with a read probe)"
  M="argmax --set vocab=128256"
  for d in fp32 bf16; do for b in 1 8 64 256; do both $M --set dtype=$d --set batch=$b; done; done

  stamp "decode-size elementwise: back to back (events-batched) and kernel time (cupti), hot L2"
  R="rope --set dtype=bf16 --set qo_heads=32 --set kv_heads=8 --set head_dim=128"
  for t in events-batched cupti; do
    bench empty --timer $t --hot-l2
    for n in 1 64; do
      both layernorm --set dtype=bf16 --set rows=$n --set hidden=4096 --timer $t --hot-l2
      both append_paged_kv --set dtype=bf16 --set tokens=$n --set kv_heads=8 --set head_dim=128 \
        --set page_size=16 --timer $t --hot-l2
      both $R --set tokens=$n --timer $t --hot-l2
      bench $R --set tokens=$n --set layout=slot --timer $t --hot-l2
      bench rmsnorm --set dtype=bf16 --set rows=$n --set hidden=4096 --timer $t --hot-l2
    done
  done
  stamp "large shapes (cold L2, copy row beside)"
  both layernorm --set dtype=bf16 --set rows=16384 --set hidden=8192 --backends kjit,copy
  bench layernorm --set dtype=bf16 --set rows=16384 --set hidden=8192 --set wdtype=fp32
  both append_paged_kv --set dtype=bf16 --set tokens=65536 --set batch=128 --set kv_heads=8 \
    --set head_dim=128 --set page_size=16 --backends kjit,copy
  both $R --set tokens=65536 --backends kjit,copy
  bench $R --set tokens=65536 --set layout=unit
  stamp "done"
} 2>&1 | tee "$OUT/run_b.log"; fi
