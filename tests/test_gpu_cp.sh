#!/bin/sh
# test_gpu_cp - the context-parallel forward (and a tiny backward) on GPUs against float64 and one GPU.
# Skips (77) without CUDA in the build or without a visible GPU. Runs 2 ranks over -fm_plan_transport
# mpi staged through host memory (ranks may share a GPU), over mpi on device buffers
# (-fm_gpu_aware_mpi 1) when MPIX_Query_cuda_support() says the MPI is CUDA-aware and, with at least
# 2 GPUs, over nccl; then 3 ranks (-quick): all sharing one GPU over staged mpi, and over nccl when
# there are at least 3 GPUs.
. "$srcdir/tests/common.sh"
fm_skip_unless_cuda
out=$(fm_run 1 ./tests/test_gpu_cp -ngpus 2>&1); rc=$?
if [ $rc -eq 77 ]; then echo "SKIP: no CUDA device visible"; exit 77; fi
[ $rc -eq 0 ] || { echo "$out"; exit $rc; }
ngpus=$(echo "$out" | sed -n 's/^ngpus \([0-9][0-9]*\)$/\1/p' | head -1)
: "${ngpus:=0}"
aware=$(echo "$out" | sed -n 's/^cuda_aware_mpi \([01]\)$/\1/p' | head -1)
: "${aware:=0}"
echo "visible GPUs: $ngpus, CUDA-aware MPI: $aware"
echo "=== 2 ranks, -fm_plan_transport mpi -fm_gpu_aware_mpi 0"
fm_run 2 ./tests/test_gpu_cp -fm_plan_transport mpi -fm_gpu_aware_mpi 0 "$@" || exit $?
if [ "$aware" = 1 ]; then
  echo "=== 2 ranks, -fm_plan_transport mpi -fm_gpu_aware_mpi 1"
  fm_run 2 ./tests/test_gpu_cp -fm_plan_transport mpi -fm_gpu_aware_mpi 1 "$@" || exit $?
else
  echo "=== 2 ranks, -fm_plan_transport mpi -fm_gpu_aware_mpi 1: skipped (MPIX_Query_cuda_support() is not 1: this MPI is not CUDA-aware or cannot tell)"
fi
if [ "$ngpus" -ge 2 ]; then
  echo "=== 2 ranks, -fm_plan_transport nccl"
  fm_run 2 ./tests/test_gpu_cp -fm_plan_transport nccl "$@" || exit $?
fi
# three ranks on one GPU (the first visible one) over MPI
first=${CUDA_VISIBLE_DEVICES%%,*}
: "${first:=0}"
echo "=== 3 ranks sharing GPU $first, -fm_plan_transport mpi -fm_gpu_aware_mpi 0, -quick"
CUDA_VISIBLE_DEVICES=$first fm_run 3 ./tests/test_gpu_cp -quick -fm_plan_transport mpi -fm_gpu_aware_mpi 0 "$@" || exit $?
if [ "$ngpus" -ge 3 ]; then
  echo "=== 3 ranks, -fm_plan_transport nccl, -quick"
  fm_run 3 ./tests/test_gpu_cp -quick -fm_plan_transport nccl "$@" || exit $?
fi
exit 0
