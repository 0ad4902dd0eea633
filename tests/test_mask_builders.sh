#!/bin/sh
# The twelve mask builders against dense definitions, defaults, user bounds, options.
. "$srcdir/tests/common.sh"
set -e
fm_run 1 ./tests/test_mask_builders
