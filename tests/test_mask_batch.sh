#!/bin/sh
# Per-sample masks (FMMaskSetBatch) on the CPU backend: B = 3 different packings against a
# float64 reference, mask_batch 1 bitwise as a shared mask, batch runs bitwise as batch-1 plans
# per sample, the update path bitwise as a fresh plan, named errors, HDF5 round trip and a file
# written before mask_batch (tests/data/mask-v1-nobatch.h5); at 2 ranks a "cp" plan runs
# mask_batch 3 and 1 against the float64 reference (three builders, three partitions), and a mask
# batch that is neither 1 nor the batch is refused on every rank; at 1 rank a one-chunk cp plan
# equals the local plan bitwise.
. "$srcdir/tests/common.sh"
dir=$(mktemp -d "${TMPDIR:-/tmp}/fm_mask_batch.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT
fm_run 1 ./tests/test_mask_batch -dir "$dir" -old "$srcdir/tests/data/mask-v1-nobatch.h5" || exit $?
fm_run 2 ./tests/test_mask_batch -cp
