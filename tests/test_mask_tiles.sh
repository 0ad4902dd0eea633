#!/bin/sh
# Block summaries, tile classes, density and sparsity against brute force (the summaries after
# re-set-ups on one rank and on two); -fm_mask_view.
. "$srcdir/tests/common.sh"
set -e
fm_run 1 ./tests/test_mask_tiles
# the summaries' re-set-ups where SetUp computes them (several ranks)
fm_run 2 ./tests/test_mask_tiles -test_resetup_only
out=$(fm_run 1 ./tests/test_mask_tiles -test_view_only -fm_mask_view)
echo "$out"
echo "$out" | grep -q 'FMMask "causal": seqlen_q 256, seqlen_k 256' || { echo "FAIL: -fm_mask_view did not print the mask"; exit 1; }
echo "$out" | grep -q '^ *#+\.\.$' || { echo "FAIL: -fm_mask_view picture of a causal 4x4-tile mask lacks the row '#+..'"; exit 1; }
echo "-fm_mask_view: ok"
