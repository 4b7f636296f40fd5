#!/bin/bash
# Device run: decode GEMM (gemm-decode branch). Cold compiles, [gemm] GPU tests, decode bench rows + cuBLAS peer.
set -o pipefail
C=$PWD/carry-gemm-decode
export KJIT_KERNEL_DIR=$C/kernels KJIT_CACHE_DIR=/tmp/kc
date -u > $OUT/gpu.txt
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv >> $OUT/gpu.txt 2>&1
for t in 16 32 64 128; do
  KJIT_CACHE_DIR=/tmp/kc-cold-$t $C/bin/kjit-cli compile gemm --set path=decode --set dtype=bf16 \
    --set out_dtype=bf16 --set tokens=$t --arch sm_90a 2>&1 | head -1
done | tee $OUT/compile.log
timeout 100 $C/bin/kjit_gpu_tests "[gemm]" --durations yes > $OUT/tests.log 2>&1
echo "kjit_gpu_tests [gemm] exit $?" | tee -a $OUT/tests.log
tail -5 $OUT/tests.log
KJIT_COMMIT=${KJIT_COMMIT:-unknown} CLI=$C/bin/kjit-cli DEADLINE=125 bash bench/run.sh $C/gemm-decode.jsonl > /dev/null 2>&1
echo "bench exit $?"
grep -h "gemm" $OUT/run.log | grep -v "^\s*$" | tail -60
