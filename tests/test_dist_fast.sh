#!/bin/sh
# Context-parallel planner: the fast paths (tile map, chunk weights, needed sets) against their
# references, per-sample masks among the random ones; per-sample weights are the sums over the
# samples and needed sets their union. Then fmplan-sim -mask_batch plans a packing per sample
# and refuses a mask batch that is neither 1 nor the batch.
. "$srcdir/tests/common.sh"
fm_run 1 ./tests/test_dist_fast -iters 150 || exit $?
out=$(fm_run 1 ./fmplan-sim -nodes 2 -gpus_per_node 2 -mask causal_document -seqlen 8192 -mask_batch 3) || { echo "$out"; exit 1; }
echo "$out" | head -2
echo "$out" | grep -q "mask batch 3" && echo "$out" | grep -q "K/V: batch 3," || { echo "FAIL: fmplan-sim -mask_batch 3 did not plan a batch of 3"; exit 1; }
if fm_run 1 ./fmplan-sim -nodes 1 -gpus_per_node 2 -seqlen 4096 -mask_batch 2 -batch 3 > /dev/null 2>&1; then
  echo "FAIL: fmplan-sim -mask_batch 2 -batch 3 was accepted"; exit 1
fi
echo "fmplan-sim -mask_batch ok"
