#!/bin/sh
# test_gpu_cp - the context-parallel forward (and a tiny backward) on GPUs against float64 and one GPU.
# Skips (77) without CUDA in the build or without a visible GPU (no device, or no driver at all);
# a CUDA error in the device probe (a broken driver) fails the test. Five forward legs: 2 ranks over
# -fm_plan_transport mpi staged through host memory (ranks may share a GPU), over mpi on device
# buffers (-fm_gpu_aware_mpi 1), over nccl; 3 ranks (-quick) sharing one GPU over staged mpi, and
# over nccl. A leg the machine cannot run (nccl with fewer GPUs than ranks, a CUDA-unaware MPI)
# exits 77 by itself and is reported as skipped; any other failure fails the test.
# Then the backward legs (test_gpu_cp_bwd): the cp backward on the GPU against float64 and the
# CPU backend, on 1, 2 and 3 ranks sharing the first GPU over staged mpi (the 3-rank leg also
# checks its trace when HDF5 is built in, and every leg a backward run twice bitwise equal).
# FM_GPU_CP_LEGS=bwd runs the backward legs only, =fwd the forward legs only (default: both);
# FM_TEST_DQ_BITWISE=0 reports dQ's bitwise equality without failing on it.
. "$srcdir/tests/common.sh"
fm_skip_unless_cuda
fm_run 1 ./tests/test_gpu_cp -ngpus; rc=$?
case $rc in
  0) ;;
  77) echo "SKIP: no CUDA device visible (no device or no driver installed)"; exit 77 ;;
  *) echo "FAIL: the device probe exited $rc (a CUDA error is a failure, not a skip)"; exit 1 ;;
esac
ran=0
nlegs=0
legs=${FM_GPU_CP_LEGS:-all}
leg() {
  np=$1; shift
  echo "=== $np ranks: $*"
  nlegs=$((nlegs + 1))
  fm_run "$np" "$prog" "$@"; rc=$?
  case $rc in
    0) ran=$((ran + 1)) ;;
    77) echo "=== leg skipped: this machine cannot run it (see the SKIP line above)" ;;
    *) exit $rc ;;
  esac
}
first=${CUDA_VISIBLE_DEVICES%%,*}
: "${first:=0}"
saved=${CUDA_VISIBLE_DEVICES-unset}
restore() { if [ "$saved" = unset ]; then unset CUDA_VISIBLE_DEVICES; else CUDA_VISIBLE_DEVICES=$saved; fi; }
if [ "$legs" != bwd ]; then
  prog=./tests/test_gpu_cp
  leg 2 -fm_plan_transport mpi -fm_gpu_aware_mpi 0 "$@"
  leg 2 -fm_plan_transport mpi -fm_gpu_aware_mpi 1 "$@"
  leg 2 -fm_plan_transport nccl "$@"
  # three ranks on one GPU (the first visible one) over MPI
  export CUDA_VISIBLE_DEVICES=$first
  leg 3 -quick -fm_plan_transport mpi -fm_gpu_aware_mpi 0 "$@"
  restore
  leg 3 -quick -fm_plan_transport nccl "$@"
fi
if [ "$legs" != fwd ]; then
  prog=./tests/test_gpu_cp_bwd
  extra=
  [ "${FM_TEST_DQ_BITWISE:-1}" = 0 ] && extra=-no_dq_bitwise
  dir=$(mktemp -d "${TMPDIR:-/tmp}/fm_gpu_cp_bwd.XXXXXX") || exit 99
  trap 'rm -rf "$dir"' EXIT
  export CUDA_VISIBLE_DEVICES=$first
  leg 1 -fm_plan_transport mpi -fm_gpu_aware_mpi 0 $extra "$@"
  leg 2 -fm_plan_transport mpi -fm_gpu_aware_mpi 0 $extra "$@"
  if [ "${FM_HAVE_HDF5:-0}" = 1 ]; then leg 3 -fm_plan_transport mpi -fm_gpu_aware_mpi 0 -trace "$dir/bwd.h5" $extra "$@"
  else leg 3 -fm_plan_transport mpi -fm_gpu_aware_mpi 0 $extra "$@"; fi
  restore
fi
echo "test_gpu_cp: $ran of $nlegs legs ran"
[ "$ran" -gt 0 ] || exit 77
exit 0
