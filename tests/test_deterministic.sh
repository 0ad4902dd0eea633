#!/bin/sh
# FMPlanSetDeterministic on the CPU backend: the backward's dq, dk, dv are the same bytes from
# run to run (ranks sleeping a random time first, so chunks arrive in other orders; outputs
# poisoned between runs), near the float64 reference and the default backward: local plan
# (1, 2 and 3 threads alike) and cp plans (gather and ring schedules, overlap on) at 1 to 4
# ranks (two virtual nodes at 4), fp32 and bf16.
. "$srcdir/tests/common.sh"
for np in 1 2 3 4; do
  fm_run $np ./tests/test_deterministic || exit $?
done
exit 0
