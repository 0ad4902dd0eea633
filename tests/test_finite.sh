#!/bin/sh
# Non-finite inputs give non-finite outputs (never the fully masked O = 0, LSE = -inf), and
# -fm_check_finite makes them a named error on every rank: local and cp plans, 1 and 2 ranks.
. "$srcdir/tests/common.sh"
fm_run 1 ./tests/test_finite || exit $?
fm_run 1 ./tests/test_finite bf16 || exit $?
fm_run 2 ./tests/test_finite || exit $?
fm_run 2 ./tests/test_finite bf16
