#!/bin/sh
# Context-parallel execution on the CPU backend over MPI: distributed forward/backward equal the
# single-rank CPU result for the 12 masks, user bounds, GQA, seqlen_q != seqlen_k, uneven lengths,
# every partition/route/prune/overlap setting; bytes moved match the needed set; a rank mismatch
# fails on every rank; the ring schedule (-fm_plan_schedule ring) gives the same results and
# moves (P-1) x the K/V, strictly more than the pruned gather on document masks.
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
  # the ring's transfers are traced: a ring forward on a pruned document mask moves what an
  # unpruned all-gather moves, more than the needed set
  echo "$out" | grep "forward trace" | awk '{m=$(NF-5); n=$(NF-3); a=$NF; sub(",","",m); sub(",","",n); if (m+0==a+0 && n+0<a+0) f=1} END {exit !f}' ||
    { echo "FAIL: no traced ring forward moving (P-1) x the K/V"; rm -f "$tr"; exit 1; }
  test -s "$tr" || { echo "FAIL: trace file $tr missing"; exit 1; }
  rm -f "$tr"
fi
# fmplan-sim predicts the ring beside the gather: per partition, the ring row moves what an
# unpruned all-gather moves (intra + inter GB), more than the pruned flat gather route.
out=$(fm_run 1 ./fmplan-sim -nodes 2 -gpus_per_node 4 -mask causal_document -seqlen 16384 -batch 4) || { echo "$out"; exit 1; }
echo "$out" | awk '
  $1 == "contiguous" || $1 == "dual_chunk" || $1 == "balanced" { ag = $6; flat = $9 + $10; part = $1 }
  $1 == "ring" { n++; r = $2 + $3; d = r - ag; if (d < 0) d = -d;
                 if (d > 2e-4 || !(r > flat)) { printf "FAIL: %s ring %.4f GB, all-gather %.4f, flat gather %.4f\n", part, r, ag, flat; bad = 1 } }
  END { if (n != 3) { print "FAIL: fmplan-sim printed " n " ring rows, expected 3"; bad = 1 } exit bad }' || { echo "$out"; exit 1; }
echo "fmplan-sim ring rows ok"
