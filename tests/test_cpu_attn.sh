#!/bin/sh
# The exact CPU backend against a float64 dense reference: 12 masks, user bounds, GQA,
# S_q != S_k, head dims, dtypes, fully masked rows, key-range pieces + merge, query-row subsets.
. "$srcdir/tests/common.sh"
OMP_NUM_THREADS=2 fm_run 1 ./tests/test_cpu_attn
