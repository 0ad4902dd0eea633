#!/bin/sh
# test_gpu_bwd - FMPlanBackward on the CUDA backend (device pointers) against a float64 reference.
# Skips (77) without CUDA in the build or without a GPU.
. "$srcdir/tests/common.sh"
fm_skip_unless_cuda
fm_run 1 ./tests/test_gpu_bwd "$@"
