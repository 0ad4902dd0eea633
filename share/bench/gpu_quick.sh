#!/bin/sh
# gpu_quick.sh - the shortest useful GPU call: build the library (no Fortran), run the GPU tests
# and the re-planning test (its -cuda legs), then a functional run of fmbench's
# forward/backward passes and of the cp update path (no peers: not a performance claim; that is
# compare.sh's job). Every step has its own time limit and prints one line, so a call cut short
# still says what ran. Run from the source root on the GPU machine; logs go to $OUT.
# Optional: .devdeps (staged MPI/HDF5 packages) and pre-generated autotools files (configure,
# Makefile.in, aclocal.m4, config/, config.h.in carried along: then autogen.sh is not run).
# usage: sh share/bench/gpu_quick.sh
OUT=${OUT:-/tmp/fmout}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T0=$(date +%s)
el() { echo "[$(($(date +%s) - T0)) s] $*"; }
[ -d .devdeps ] && sh .devdeps/install.sh > "$OUT/deps.log" 2>&1
nvidia-smi -L | head -1
if [ -f configure ] && [ -f Makefile.in ]; then
  touch aclocal.m4; sleep 1; touch configure Makefile.in config.h.in   # no automake re-run
else
  ./autogen.sh > "$OUT/autogen.log" 2>&1 || { el "autogen failed"; tail -20 "$OUT/autogen.log"; exit 1; }
fi
./configure CC=mpicc --disable-fortran > "$OUT/configure.log" 2>&1 || { el "configure failed"; tail -30 "$OUT/configure.log"; exit 1; }
make -j"$(nproc)" > "$OUT/build.log" 2>&1 || { el "build failed"; grep -E "error|Error" "$OUT/build.log" | head -20; exit 1; }
el "built: $(grep -E '^  (CUDA|NCCL|HDF5) ' "$OUT/configure.log" | tr -s ' ' | tr '\n' ';')"
run_tests() { # limit, tests...
  lim=$1; shift
  timeout "$lim" make -j4 check TESTS="$*" > "$OUT/check-$(echo "$1" | sed 's|.*/||; s|\.sh||').log" 2>&1
  for t in "$@"; do
    n=${t%.sh}
    r=$(sed -n 's/^:test-result: //p' "$n.trs" 2>/dev/null | head -1)
    el "${r:-NOT RUN (time limit)} $t"
    cp "$n.log" "$OUT/" 2>/dev/null
  done
}
make -j"$(nproc)" check TESTS= > "$OUT/build-tests.log" 2>&1 # every test program, in parallel, nothing run
el "test programs built"
run_tests ${LIM1:-60} tests/test_gpu_fwd.sh tests/test_gpu_bwd.sh tests/test_replan.sh tests/test_gpu_sched.sh tests/test_gpu_update.sh
grep -h -i "non-finite" tests/test_gpu_fwd.log tests/test_gpu_bwd.log 2>/dev/null | head -4
grep -h -E "^(FAIL|HARD)" tests/test_gpu_*.log tests/test_replan.log 2>/dev/null | head -10
run_tests ${LIM2:-40} tests/test_gpu_batch.sh tests/test_gpu_cp.sh
grep -h "^===\|FAIL" tests/test_gpu_cp.log 2>/dev/null | head -8
grep -h -E "^(FAIL|HARD)" tests/test_gpu_batch.log 2>/dev/null | head -5
el "fmbench -pass fwd,bwd (ours only)"
timeout 15 mpiexec -n 1 ./fmbench -pass fwd,bwd -masks full,causal,causal_document -seqlen 8192 -heads 32 -head_dim 128 \
  -tokens 65536 -reps 3 -warmup 1 > "$OUT/fmbench.log" 2>&1
el "fmbench rc=$?"; grep -E "TFLOP|tflop|^ *(full|causal)" "$OUT/fmbench.log" | head -8
el "fmbench -pass fwd -fm_sm90_schedule dynamic (the persistent forward through the library)"
timeout 15 mpiexec -n 1 ./fmbench -pass fwd -masks full,causal,causal_document -seqlen 8192 -heads 32 -head_dim 128 \
  -tokens 65536 -reps 3 -warmup 1 -fm_sm90_schedule dynamic 2>&1 | grep -E "TFLOP|tflop|^ *(full|causal)|rror" | head -6
el "fmbench -cp -steps 5 (2 ranks on one GPU, mpi transport)"
timeout 15 mpiexec -n 2 ./fmbench -cp -steps 5 -masks causal_document -seqlen 65536 -single 0 -trace_dir none \
  -fm_plan_transport mpi > "$OUT/fmbench_steps.log" 2>&1
el "fmbench -cp -steps rc=$?"; tail -6 "$OUT/fmbench_steps.log"
el "done"
