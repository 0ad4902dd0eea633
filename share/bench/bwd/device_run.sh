#!/bin/sh
# device_run.sh - one device call of the backward harness: (re)build if the carried binary does not
# run, the small case, the correctness cases, compute-sanitizer memcheck on the small case, the
# timing table. Run from the folder that holds bwd_bench (and the sources, for a rebuild).
# Logs go to $OUT. Usage: sh device_run.sh [check|bench|all]
mode=${1:-all}
OUT=${OUT:-.}
export LD_LIBRARY_PATH=$PWD/lib:$LD_LIBRARY_PATH
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-16}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader > $OUT/gpu.txt 2>&1
if ! ./bwd_bench probe >/dev/null 2>&1; then
  echo "carried binary does not start: rebuilding"
  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --use_fast_math -Iinclude \
    -Xcompiler -fopenmp share/bench/bwd/bwd_bench.cu src/kernels/cuda_bwd.cu src/kernels/sm90/bwd_sm90.cu -o bwd_bench || exit 1
fi
rc=0
timeout 60 ./bwd_bench small > $OUT/small.log 2>&1 || rc=1
cat $OUT/small.log
if [ "$mode" != bench ]; then
  timeout 200 ./bwd_bench check > $OUT/check.log 2>&1 || rc=1 # not through tee: sh has no pipefail
  cat $OUT/check.log
  timeout 120 compute-sanitizer --tool memcheck --leak-check no ./bwd_bench small > $OUT/memcheck.log 2>&1
  echo "memcheck rc $?: $(grep -c 'ERROR SUMMARY: 0 errors' $OUT/memcheck.log) clean summaries"; tail -3 $OUT/memcheck.log
fi
if [ "$mode" != check ]; then
  timeout 150 ./bwd_bench bench 5 2>&1 | tee $OUT/bench.log
fi
echo "=== summary"; cat $OUT/gpu.txt; grep -hE "PASS|FAIL|check:" $OUT/check.log 2>/dev/null | awk '{print $NF}' | sort | uniq -c
grep -h "bench S" $OUT/bench.log 2>/dev/null
exit $rc
