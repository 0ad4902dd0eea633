#!/bin/sh
# FMContext on 1, 2, 3 and 4 ranks (oversubscribed on small machines).
. "$srcdir/tests/common.sh"
set -e
for np in 1 2 3 4; do
  echo "== $np rank(s)"
  fm_run $np ./tests/test_context
done
