#!/bin/sh
# device_run.sh - one device call of the forward harness: (re)build if the carried binary does not
# start, the small cases, the correctness cases, compute-sanitizer memcheck on the small cases, the
# timing table. Run from the top of the tree (the sources are needed for a rebuild).
# Logs go to $OUT. Usage: sh share/bench/fwd/device_run.sh [check|bench|ab|sched|all] [reps]
# A carried ./fwd_bench that starts is used as it is: set FWD_REBUILD=1 to build from this tree anyway.
#   check: small + check + memcheck (~40 s with the build); bench: small + bench; ab: small + ab; all (default).
#   sched: the persistent forward: check under FWD_SCHED=dynamic (3 CTAs, then one per SM) and
#   static (5 CTAs), memcheck, racecheck and synccheck of small under it, then the sched table
#   (grid / static / dynamic side by side).
mode=${1:-all}
rc=0
reps=${2:-5}
OUT=${OUT:-.}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-16}
nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,temperature.gpu,power.draw --format=csv,noheader > $OUT/gpu.txt 2>&1
# the harness from this tree's kernel files: build OUTPUT [nvcc flags]
build() {
  o=$1; shift
  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --use_fast_math "$@" -Iinclude -Xcompiler -fopenmp \
    share/bench/fwd/fwd_bench.cu src/kernels/cuda_mask.cu src/kernels/sm90/fwd_sm90.cu src/kernels/simt/fwd_fallback.cu -o "$o"
}
# sched needs a build that knows FWD_SCHED (an older binary would time the grid kernel only)
if [ -n "$FWD_REBUILD" ] || [ "$mode" = sched ] || ! ./fwd_bench probe >/dev/null 2>&1; then
  echo "building fwd_bench (no carried binary that starts, or FWD_REBUILD set)"
  build fwd_bench || exit 1
fi
timeout 60 ./fwd_bench small > $OUT/small.log 2>&1 || rc=1
cat $OUT/small.log
case $mode in
check | all)
  timeout 200 ./fwd_bench check > $OUT/check.log 2>&1 || rc=1
  cat $OUT/check.log
  timeout 120 compute-sanitizer --tool memcheck --leak-check no ./fwd_bench small > $OUT/memcheck.log 2>&1
  echo "memcheck rc $?: $(grep -c 'ERROR SUMMARY: 0 errors' $OUT/memcheck.log) clean summaries"; tail -3 $OUT/memcheck.log ;;
esac
case $mode in
sched)
  # the checks run a build with FM_SM90_HANG_CHECK (a wait longer than about 2 s traps: a
  # deadlock fails in seconds); they stop at the first configuration that fails
  build /tmp/fwd_bench_hc -DFM_SM90_HANG_CHECK || exit 1
  for cfg in "dynamic 3" "static 5" "dynamic 0"; do
    set -- $cfg
    echo "=== check FWD_SCHED=$1 FWD_CTAS=$2 (hang-check build)"
    FWD_SCHED=$1 FWD_CTAS=$2 timeout 60 /tmp/fwd_bench_hc check > $OUT/check_$1_$2.log 2>&1 || { rc=1; grep -E "FAIL|unexpected|^check:" $OUT/check_$1_$2.log; tail -3 $OUT/check_$1_$2.log; break; }
    grep -E "FAIL|unexpected|^check:" $OUT/check_$1_$2.log
  done
  for tool in memcheck racecheck synccheck; do
    # one log for the three tools (a device call returns few files); racecheck has reported the
    # mbarrier-ordered bulk copies as hazards before (a tool limit): read what it names
    FWD_SCHED=dynamic FWD_CTAS=2 timeout 100 compute-sanitizer --tool $tool ./fwd_bench small > /tmp/fwd_$tool.log 2>&1
    echo "$tool (persistent, 2 CTAs) rc $?: $(grep -c 'ERROR SUMMARY: 0 errors\|RACECHECK SUMMARY: 0 hazards' /tmp/fwd_$tool.log) clean summaries"
    grep -m3 -E "ERROR SUMMARY|RACECHECK SUMMARY|Error|Race" /tmp/fwd_$tool.log
    { echo "=== $tool"; cat /tmp/fwd_$tool.log; } >> $OUT/sanitize.log
  done
  timeout 200 ./fwd_bench sched $reps 2>&1 | tee $OUT/bench.log ;;
esac
case $mode in
bench | all) timeout 200 ./fwd_bench bench $reps 2>&1 | tee $OUT/bench.log ;;
ab) timeout 100 ./fwd_bench ab $reps 2>&1 | tee $OUT/bench.log ;;
esac
echo "=== summary"; cat $OUT/gpu.txt; grep -hE "PASS|FAIL" $OUT/small.log $OUT/check*.log 2>/dev/null | awk '{print $NF}' | sort | uniq -c
grep -h "^check:" $OUT/check*.log 2>/dev/null
grep -h "bench S" $OUT/bench.log 2>/dev/null
exit $rc
