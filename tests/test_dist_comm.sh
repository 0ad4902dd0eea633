#!/bin/sh
# The communication-aware balancer (-fm_plan_balance_comm) and the step cost model it shares with
# fmplan-sim: against the work-only balancer on random masks and virtual topologies, never a
# longer predicted step nor more bytes across nodes; the visibility's needed sets and receives
# against the exact scan and the route builder; the same partition on 1-4 MPI ranks; its setters.
# Then fmplan-sim shows the comm_aware row and times it with -balance_comm 1.
. "$srcdir/tests/common.sh"
for np in 1 2 3 4; do
  echo "=== $np rank(s)"
  fm_run $np ./tests/test_dist_comm -iters 60 || exit $?
done
out=$(fm_run 1 ./fmplan-sim -nodes 4 -gpus_per_node 4 -mask document -seqlen 65536 -balance_comm 1) || { echo "$out"; exit 1; }
echo "$out"
for w in comm_aware "comm-aware balancer" "node-local candidate" "step"; do
  echo "$out" | grep -q -- "$w" || { echo "FAIL: fmplan-sim output lacks '$w'"; exit 1; }
done
