#!/bin/sh
# Context-parallel planner, pure algorithms: chunks, balancer (brute-force optimum, never worse
# than dual_chunk on causal masks), localization and needed set against dense scans, routes.
# Then fmplan-sim on a virtual 2-node topology must run and print every partition and route.
. "$srcdir/tests/common.sh"
fm_run 1 ./tests/test_dist_plan -iters 150 || exit $?
out=$(fm_run 1 ./fmplan-sim -nodes 2 -gpus_per_node 4 -mask causal_document -seqlen 16384 -view_ranks) || { echo "$out"; exit 1; }
echo "$out"
for w in contiguous dual_chunk balanced flat hierarchical "max/mean"; do
  echo "$out" | grep -q -- "$w" || { echo "FAIL: fmplan-sim output lacks '$w'"; exit 1; }
done
