#!/bin/sh
# CPU backward (dQ, dK, dV) against central finite differences of the forward.
. "$srcdir/tests/common.sh"
OMP_NUM_THREADS=2 fm_run 1 ./tests/test_cpu_gradcheck
