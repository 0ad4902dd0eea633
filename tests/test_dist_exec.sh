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
# -fm_trace: every distributed call writes its events, -fm_trace_view prints their summary,
# and the file holds the last forward and backward as runs fmtrace can read.
if [ "${FM_HAVE_HDF5:-0}" = 1 ]; then
  dir=$(mktemp -d "${TMPDIR:-/tmp}/fm_dist_trace.XXXXXX") || exit 99
  trap 'rm -rf "$dir"' EXIT
  FMTRACE="${top_builddir}/fmtrace"
  FM_OPTIONS="-fm_trace $dir/exec.h5 -fm_trace_view" fm_run 3 ./tests/test_dist_exec > "$dir/out" 2>&1 || { cat "$dir/out"; exit 1; }
  grep "trace (" "$dir/out" | head -4
  for run in forward backward; do
    grep -q "^FMPlan $run trace (" "$dir/out" || { echo "FAIL: -fm_trace_view printed no $run trace summary"; exit 1; }
    "$FMTRACE" "$dir/exec.h5" -run $run -json "$dir/$run.json" > /dev/null || { echo "FAIL: fmtrace cannot read the $run run of the trace"; exit 1; }
  done
  # The ring's transfers are traced: a ring forward (ex1: causal_document, 3 ranks, fp32,
  # 1 KV head of 32, S = 768) moves (P-1) x the K/V, 2 x 2 x 768 x 32 x 4 bytes, as an
  # unpruned all-gather would, and more than the pruned gather on the same problem.
  PY="${PYTHON3:-}"
  [ -z "$PY" ] && command -v python3 >/dev/null 2>&1 && PY=python3
  moved() { # moved FILE.json: otherData.bytes_moved of fmtrace's JSON
    if [ -n "$PY" ]; then "$PY" -c 'import json, sys; print(int(json.load(open(sys.argv[1]))["otherData"]["bytes_moved"]))' "$1"
    else sed -n 's/.*"bytes_moved": \([0-9]*\).*/\1/p' "$1" | head -n 1; fi
  }
  for sched in ring gather; do
    fm_run 3 ./tutorials/ex1 -seqlen 768 -fm_plan_heads 2 -fm_plan_kv_heads 1 -fm_plan_head_dim 32 -fm_backend cpu \
      -fm_plan_schedule $sched -fm_trace "$dir/$sched.h5" > "$dir/$sched.out" 2>&1 || { cat "$dir/$sched.out"; echo "FAIL: ex1 -fm_plan_schedule $sched"; exit 1; }
    "$FMTRACE" "$dir/$sched.h5" -run forward -json "$dir/$sched.json" > /dev/null || { echo "FAIL: fmtrace $sched.h5"; exit 1; }
  done
  ring=$(moved "$dir/ring.json") gather=$(moved "$dir/gather.json")
  echo "traced forward bytes: ring $ring, pruned gather $gather"
  [ "$ring" = $((2 * 2 * 768 * 32 * 4)) ] || { echo "FAIL: the traced ring forward moved '$ring' bytes, expected $((2 * 2 * 768 * 32 * 4))"; exit 1; }
  [ -n "$gather" ] && [ "$gather" -lt "$ring" ] || { echo "FAIL: the traced pruned gather moved '$gather' bytes, expected fewer than the ring's $ring"; exit 1; }
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
