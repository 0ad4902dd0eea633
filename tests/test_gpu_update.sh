#!/bin/sh
# test_gpu_update - new masks every step while the GPU is busy (the CUDA update path's pinned
# staging): each step's forward bitwise equal to a fresh plan's. Skips (77) without CUDA in the
# build or without a GPU.
. "$srcdir/tests/common.sh"
fm_skip_unless_cuda
fm_run 1 ./tests/test_gpu_update "$@"
