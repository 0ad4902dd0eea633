#!/bin/sh
# Re-planning every step (the update path of FMPlanSetUp) on the CPU backend, at 1 to 4 ranks:
# fresh document and causal_document packings (mask_batch 1 and 3, GQA, S_q != S_k) through one
# long-lived plan equal fresh plans bitwise and the float64 reference; changed heads and sizes
# take the full path; at several ranks a plan that differs on one rank is refused by name on
# every rank. The "local" type runs at 1 rank, "cp" at every count (two virtual nodes at 4).
# Then the same on the CUDA backend (-cuda: device tensors, per-sample masks through the cp
# plan's GPU executor) at 1 and 2 ranks (sharing a GPU: the mpi transport), where a GPU is
# visible; without one that part is skipped and the CPU result stands.
. "$srcdir/tests/common.sh"
for np in 1 2 3 4; do
  fm_run $np ./tests/test_replan || exit $?
done
for np in 1 2; do
  fm_run $np ./tests/test_replan -cuda
  rc=$?
  [ $rc = 77 ] && { echo "test_replan -cuda: no GPU, skipped"; break; }
  [ $rc = 0 ] || exit $rc
done
exit 0
