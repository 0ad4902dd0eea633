#!/bin/sh
# FMContext on 1, 2, 3 and 4 ranks (oversubscribed on small machines).
. "$srcdir/tests/common.sh"
set -e
for np in 1 2 3 4; do
  echo "== $np rank(s)"
  fm_run $np ./tests/test_context
done
# the default CPU threads from the ranks' bindings (tests/common.sh sets OMP_NUM_THREADS, which wins
# up to the binding's hardware threads)
for np in 1 3; do
  echo "== $np rank(s), OMP_NUM_THREADS unset"
  (unset OMP_NUM_THREADS; fm_run $np ./tests/test_context)
done
# OMP_NUM_THREADS=8 on a rank bound to one hardware thread (the first this shell may use): 1
# thread, and the view says why (skipped where taskset cannot bind, or without OpenMP)
cpu=$(taskset -cp $$ 2>/dev/null | sed 's/.*: *//; s/[-,].*//')
if [ -n "$cpu" ] && taskset -c "$cpu" true 2>/dev/null; then
  echo "== 1 rank on CPU $cpu, OMP_NUM_THREADS=8"
  rc=0
  OMP_NUM_THREADS=8 fm_run 1 taskset -c "$cpu" ./tests/test_context > test_context.cap.out 2>&1 || rc=$?
  cat test_context.cap.out
  [ $rc = 0 ] || exit 1
  if grep -q "built without OpenMP" test_context.cap.out; then
    echo "(no OpenMP: nothing to cap)"
  else
    grep -q "OMP_NUM_THREADS=8: 1 CPU threads per rank" test_context.cap.out || { echo "FAIL: OMP_NUM_THREADS=8 on one CPU did not run 1 thread"; exit 1; }
    grep -q "OMP_NUM_THREADS asks for 8 threads per rank" test_context.cap.out || { echo "FAIL: the view does not say why"; exit 1; }
  fi
  rm -f test_context.cap.out
else
  echo "(taskset cannot bind here: the one-CPU case is not run)"
fi
