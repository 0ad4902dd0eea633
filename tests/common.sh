# common.sh - sourced by every tests/*.sh. Provides fm_run NP PROG ARGS...
# Exit codes: 0 pass, 77 skip, 99 hard error, anything else fail.
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# Small machines: let Open MPI place more ranks than cores, over shared memory only.
export OMPI_MCA_rmaps_base_oversubscribe=1 OMPI_MCA_btl=self,vader OMPI_MCA_btl_vader_single_copy_mechanism=none
export OMPI_MCA_pml=ob1 OMPI_MCA_osc=^ucx OMPI_MCA_mpi_yield_when_idle=1 PRTE_MCA_rmaps_default_mapping_policy=:oversubscribe
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-2}
export NCCL_NVLS_ENABLE=0
: "${MPIEXEC:=mpiexec}"
: "${top_builddir:=.}"

# fm_run NP PROG ARGS...: run PROG on NP ranks (a timeout guards against hangs).
fm_run() {
  np=$1; shift
  timeout ${FM_TEST_TIMEOUT:-600} $MPIEXEC -n "$np" --oversubscribe "$@"
}

# fm_skip_unless_cuda: exit 77 when the build has no CUDA.
fm_skip_unless_cuda() {
  if [ "${FM_HAVE_CUDA:-0}" != 1 ]; then echo "SKIP: built without CUDA"; exit 77; fi
}
