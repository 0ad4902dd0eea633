#!/bin/sh
# Context-parallel execution on the CPU backend over MPI: distributed forward/backward equal the
# single-rank CPU result for the 12 masks, user bounds, GQA, seqlen_q != seqlen_k, uneven lengths,
# every partition/route/prune/overlap setting; bytes moved match the needed set; a rank mismatch
# fails on every rank.
. "$srcdir/tests/common.sh"
for np in 1 2 3 4; do
  echo "=== $np rank(s)"
  fm_run $np ./tests/test_dist_exec || exit $?
done
# -fm_trace: every distributed call writes its events; the summary must be printed.
if [ "${FM_HAVE_HDF5:-0}" = 1 ]; then
  tr=${TMPDIR:-/tmp}/fm_dist_trace_$$.h5
  out=$(FM_OPTIONS="-fm_trace $tr -fm_trace_view" fm_run 3 ./tests/test_dist_exec 2>&1) || { echo "$out"; rm -f "$tr"; exit 1; }
  echo "$out" | grep "trace (" | head -4
  echo "$out" | grep -q "forward trace .*overlap efficiency" || { echo "FAIL: no forward trace summary"; rm -f "$tr"; exit 1; }
  echo "$out" | grep -q "backward trace .*overlap efficiency" || { echo "FAIL: no backward trace summary"; rm -f "$tr"; exit 1; }
  test -s "$tr" || { echo "FAIL: trace file $tr missing"; exit 1; }
  rm -f "$tr"
fi
