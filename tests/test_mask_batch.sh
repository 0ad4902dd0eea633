#!/bin/sh
# Per-sample masks (FMMaskSetBatch) on the CPU backend: B = 3 different packings against a
# float64 reference, mask_batch 1 bitwise as a shared mask, batch runs bitwise as batch-1 plans
# per sample, the update path bitwise as a fresh plan, named errors, HDF5 round trip and a file
# written before mask_batch (tests/data/mask-v1-nobatch.h5); at 2 ranks a "cp" plan refuses
# mask_batch > 1 (FM_ERR_SUP on every rank).
. "$srcdir/tests/common.sh"
dir=$(mktemp -d "${TMPDIR:-/tmp}/fm_mask_batch.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT
fm_run 1 ./tests/test_mask_batch -dir "$dir" -old "$srcdir/tests/data/mask-v1-nobatch.h5" || exit $?
fm_run 2 ./tests/test_mask_batch -cp
