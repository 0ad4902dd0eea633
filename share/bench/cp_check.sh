#!/bin/sh
# cp_check.sh - one call on a machine with two (or more) GPUs for context parallelism:
# autotools build, `make check` (GPU tests run, test_gpu_cp over NCCL), the quick-start
# tutorial on 2 ranks in every distributed configuration (each compared against the exact CPU
# backend), a traced run turned into an SVG by fmtrace, then `fmbench -cp` (plan vs unpruned
# all-gather vs ring vs one GPU). Run from the source root; logs go to $OUT (default /tmp/fmout).
# Optional staged packages in .devdeps (a folder of .deb files and an install.sh that unpacks them).
# usage: sh share/bench/cp_check.sh [fmbench -cp options]   (CP_SKIP_CHECK=1 skips make check)
# (the full multi-GPU benchmark, forward + backward against every baseline and PyTorch, is
# share/bench/cp_multi.sh; this script is the correctness call, with a forward-only benchmark)
OUT=${OUT:-/tmp/fmout}
NP=${NP:-2}
W=${WORK:-/tmp/cpwork}   # logs and traces; only a few files are copied to $OUT at the end
mkdir -p "$OUT" "$W"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
[ -d .devdeps ] && sh .devdeps/install.sh > "$W/deps.log" 2>&1
nvidia-smi -L
nvidia-smi topo -m 2>/dev/null | head -4
t0=$(date +%s)
if ! (./autogen.sh && ./configure CC=mpicc && make -j"$(nproc)") > "$W/build.log" 2>&1; then
  tail -40 "$W/build.log"; echo "cp_check: build failed"; exit 1
fi
echo "build: $(($(date +%s) - t0)) s"
grep -E "^  (CUDA|NCCL|HDF5|hwloc) " "$W/build.log"
MPI="mpiexec -n $NP --oversubscribe --bind-to none"
if [ -z "$CP_SKIP_CHECK" ]; then
  t0=$(date +%s)
  make -j8 check > "$W/check.log" 2>&1
  echo "make check rc=$? ($(($(date +%s) - t0)) s)"
  grep -E "^(PASS|FAIL|SKIP|ERROR|XPASS):" "$W/check.log" | sort | uniq -c | sort -rn | head -3
  grep -E "^(FAIL|ERROR|XPASS|SKIP):" "$W/check.log"
  # the GPU tests' logs and those of every failed test come back
  for t in tests/test_gpu_cp tests/test_gpu_fwd $(sed -n 's/^\(FAIL\|ERROR\): \(.*\)\.sh$/\2/p' "$W/check.log"); do
    echo "==== $t.log"; cat "$t.log"
  done > "$OUT/gpu_tests.log" 2>&1
  grep -E "FAIL|transport|cases" tests/test_gpu_cp.log 2>/dev/null | head -12
fi
echo "== ex1 on $NP GPUs (each configuration against the CPU backend)"
for cfg in "" "-fm_plan_transport mpi" "-fm_plan_schedule ring" "-fm_plan_prune 0 -fm_plan_overlap 0" \
  "-fm_plan_route flat -fm_plan_partition contiguous" "-seqlen 5000 -fm_plan_chunk 700"; do
  # shellcheck disable=SC2086
  timeout 300 $MPI ./tutorials/ex1 -seqlen 4096 $cfg > "$W/ex1.log" 2>&1
  rc=$?
  printf "ex1 %-52s rc=%d %s\n" "[$cfg]" $rc "$(grep -E 'max \|O ' "$W/ex1.log" | sed 's/.*relative to max |O|: //' | cut -c1-40)"
  [ $rc -ne 0 ] && tail -15 "$W/ex1.log"
done
echo "== traced run -> fmtrace"
rm -f "$W/cp_trace.h5"
timeout 300 $MPI ./tutorials/ex1 -seqlen 16384 -fm_plan_view -fm_trace "$W/cp_trace.h5" -fm_trace_view > "$W/ex1_trace.log" 2>&1
echo "traced ex1 rc=$?"
grep -E "trace|GPU:|imbalance|ex1:" "$W/ex1_trace.log" | cut -c1-200
echo "== fmbench -cp"
mkdir -p "$W/traces"
# shellcheck disable=SC2086
timeout "${BENCH_TIMEOUT:-420}" $MPI ./fmbench -cp -trace_dir "$W/traces" -csv "$OUT/cp.csv" "$@" > "$OUT/cp_bench.log" 2>&1
echo "fmbench -cp rc=$?"
tail -40 "$OUT/cp_bench.log" | cut -c1-200
# the timeline of one traced plan run (the first causal_document one, else the first)
tf=$(ls "$W"/traces/causal_document_*_plan.h5 2>/dev/null | tail -1)
[ -z "$tf" ] && tf=$(ls "$W"/traces/*_plan.h5 2>/dev/null | head -1)
if [ -n "$tf" ] && [ -x ./fmtrace ]; then
  echo "== fmtrace $(basename "$tf")"
  ./fmtrace "$tf" -svg "$OUT/cp_trace.svg" -json "$W/cp_trace.json" 2>&1 | tail -8
  cp "$tf" "$OUT/"
fi
# per-rank compute/communication of every traced configuration, and all traces in one archive
# (the device tool returns a handful of files) for a closer look with fmtrace elsewhere
if [ -x ./fmtrace ]; then
  for f in "$W"/traces/*.h5; do
    [ -f "$f" ] || continue
    echo "-- $(basename "$f")"
    ./fmtrace "$f" 2>&1 | grep -E "^ *(rank|[0-9]+ )|overlap|exposed" | head -6 | cut -c1-160
  done
  tar -C "$W" -czf "$OUT/traces.tgz" traces 2>/dev/null
fi
