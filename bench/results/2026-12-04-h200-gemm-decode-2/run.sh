#!/bin/bash
# Device run 2: decode GEMM after the residency-bounded split. [gemm] GPU tests, split sweep, decode suite (no peer: run 1 has it).
set -o pipefail
C=$PWD/carry-gemm-decode
export KJIT_KERNEL_DIR=$C/kernels KJIT_CACHE_DIR=/tmp/kc
T0=$(date +%s)
date -u > $OUT/gpu.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $OUT/gpu.txt 2>&1
timeout 60 $C/bin/kjit_gpu_tests "[gemm]" --durations yes > $OUT/tests.log 2>&1
echo "kjit_gpu_tests [gemm] exit $?" | tee -a $OUT/tests.log
tail -3 $OUT/tests.log
timeout 75 $C/bin/kjit-cli bench --from $C/sweep.jsonl --timer cupti --flush read --iters 30 --json $OUT/sweep.jsonl > $OUT/sweep.log 2>&1
echo "sweep exit $?"
grep -o "m=.*(decode[^)]*).*us median" $OUT/sweep.log | sed 's/ \[kjit, cupti\]//'
LEFT=$((225 - $(date +%s) + T0))
echo "suite deadline $LEFT s"
KJIT_COMMIT=544da97 PEERS=0 CLI=$C/bin/kjit-cli DEADLINE=$LEFT bash bench/run.sh $C/gemm-decode.jsonl > /dev/null 2>&1
echo "bench exit $?"
grep -h "gemm bf16" $OUT/run.log | sed -E 's/ \(p10.*GB\/s = / /; s/check pass.*//'
