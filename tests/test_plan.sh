#!/bin/sh
# FMPlan on one and two ranks: types, errors, call order, settings and prefixes, and numerics
# against float64.
. "$srcdir/tests/common.sh"
fm_run 1 ./tests/test_plan || exit $?
fm_run 2 ./tests/test_plan
