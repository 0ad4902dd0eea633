#!/bin/sh
# test_gpu_sched - the plan's Hopper forward schedule (-fm_sm90_schedule auto): the persistent
# kernel for a narrow window, the grid for a full mask, both bitwise as the grid kernel. Skips
# (77) without CUDA in the build or without a GPU.
. "$srcdir/tests/common.sh"
fm_skip_unless_cuda
fm_run 1 ./tests/test_gpu_sched "$@"
