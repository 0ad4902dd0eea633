#!/bin/sh
# test_gpu_batch - per-sample masks (FMMaskSetBatch) on the CUDA backend: forward and backward
# against a float64 reference, mask_batch 1 bitwise as a shared mask. Skips (77) without CUDA in
# the build or without a GPU.
. "$srcdir/tests/common.sh"
fm_skip_unless_cuda
fm_run 1 ./tests/test_gpu_batch "$@"
