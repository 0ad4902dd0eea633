#!/bin/sh
# Bad input to every FMMask function; on 2 ranks also masks that differ between ranks.
. "$srcdir/tests/common.sh"
set -e
fm_run 1 ./tests/test_mask_errors
fm_run 2 ./tests/test_mask_errors
