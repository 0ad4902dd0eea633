#!/bin/sh
# FMPlan on one rank: errors, call order, and numerics against float64.
. "$srcdir/tests/common.sh"
fm_run 1 ./tests/test_plan
