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

# Open MPI 4 keeps every job's session directory under one root per user and host
# (/tmp/ompi.HOST.UID). With tests running in parallel (make -j2 check) one job's clean-up can
# remove that root while another mpiexec is creating its directory in it ("A call to mkdir was
# unable to create the desired directory", open-mpi/ompi issue 8510: seen once in this suite).
# So every test gets a root of its own: a fresh name, created by Open MPI at the first launch
# (it makes missing parents), removed by fm_run and at the exit once it is empty.
if [ -z "${OMPI_MCA_orte_tmpdir_base:-}" ]; then
  fm_ompi_tmp=$(mktemp -u "${TMPDIR:-/tmp}/fm_ompi.XXXXXXXX") || exit 99
  export OMPI_MCA_orte_tmpdir_base="$fm_ompi_tmp"
  trap 'rmdir "$fm_ompi_tmp" 2>/dev/null || :' EXIT
fi

# Ranks bound to a whole socket (Open MPI binds one or two ranks to a core each): every rank sees
# the socket's hardware threads, so on a machine with two or more, OMP_NUM_THREADS=2 above runs 2
# threads on one rank, as the library caps OMP_NUM_THREADS at the threads of a rank's binding.
# (Unbound ranks once made LeakSanitizer's tracer crash at exit in the sanitizer run: its scan of
# the threads' thread-local storage, which share/ci/sanitize.sh now turns off.) FM_TEST_BIND=""
# keeps mpiexec's own binding.
fm_bind=${FM_TEST_BIND---bind-to socket:overload-allowed}
# fm_run NP PROG ARGS...: run PROG on NP ranks (a timeout guards against hangs).
fm_run() {
  np=$1; shift
  timeout ${FM_TEST_TIMEOUT:-600} $MPIEXEC -n "$np" --oversubscribe $fm_bind "$@"
  fm_rc=$?
  if [ -n "${fm_ompi_tmp:-}" ]; then rmdir "$fm_ompi_tmp" 2>/dev/null || :; fi
  return $fm_rc
}

# fm_skip_unless_cuda: exit 77 when the build has no CUDA.
fm_skip_unless_cuda() {
  if [ "${FM_HAVE_CUDA:-0}" != 1 ]; then echo "SKIP: built without CUDA"; exit 77; fi
}
