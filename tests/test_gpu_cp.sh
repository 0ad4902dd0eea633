#!/bin/sh
# test_gpu_cp - the context-parallel forward (and a tiny backward) on GPUs against float64 and one GPU.
# Skips (77) without CUDA in the build or without a visible GPU (no device, or no driver at all);
# a CUDA error in the device probe (a broken driver) fails the test. Five legs: 2 ranks over
# -fm_plan_transport mpi staged through host memory (ranks may share a GPU), over mpi on device
# buffers (-fm_gpu_aware_mpi 1), over nccl; 3 ranks (-quick) sharing one GPU over staged mpi, and
# over nccl. A leg the machine cannot run (nccl with fewer GPUs than ranks, a CUDA-unaware MPI)
# exits 77 by itself and is reported as skipped; any other failure fails the test.
. "$srcdir/tests/common.sh"
fm_skip_unless_cuda
fm_run 1 ./tests/test_gpu_cp -ngpus; rc=$?
case $rc in
  0) ;;
  77) echo "SKIP: no CUDA device visible (no device or no driver installed)"; exit 77 ;;
  *) echo "FAIL: the device probe exited $rc (a CUDA error is a failure, not a skip)"; exit 1 ;;
esac
ran=0
leg() {
  np=$1; shift
  echo "=== $np ranks: $*"
  fm_run "$np" ./tests/test_gpu_cp "$@"; rc=$?
  case $rc in
    0) ran=$((ran + 1)) ;;
    77) echo "=== leg skipped: this machine cannot run it (see the SKIP line above)" ;;
    *) exit $rc ;;
  esac
}
leg 2 -fm_plan_transport mpi -fm_gpu_aware_mpi 0 "$@"
leg 2 -fm_plan_transport mpi -fm_gpu_aware_mpi 1 "$@"
leg 2 -fm_plan_transport nccl "$@"
# three ranks on one GPU (the first visible one) over MPI
first=${CUDA_VISIBLE_DEVICES%%,*}
: "${first:=0}"
saved=${CUDA_VISIBLE_DEVICES-unset}
export CUDA_VISIBLE_DEVICES=$first
leg 3 -quick -fm_plan_transport mpi -fm_gpu_aware_mpi 0 "$@"
if [ "$saved" = unset ]; then unset CUDA_VISIBLE_DEVICES; else CUDA_VISIBLE_DEVICES=$saved; fi
leg 3 -quick -fm_plan_transport nccl "$@"
echo "test_gpu_cp: $ran of 5 legs ran"
[ "$ran" -gt 0 ] || exit 77
exit 0
