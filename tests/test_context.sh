#!/bin/sh
# FMContext on 1, 2, 3 and 4 ranks (oversubscribed on small machines).
. "$srcdir/tests/common.sh"
set -e
for np in 1 2 3 4; do
  echo "== $np rank(s)"
  fm_run $np ./tests/test_context
done
# the default CPU threads from the ranks' bindings (tests/common.sh sets OMP_NUM_THREADS, which wins)
for np in 1 3; do
  echo "== $np rank(s), OMP_NUM_THREADS unset"
  (unset OMP_NUM_THREADS; fm_run $np ./tests/test_context)
done
