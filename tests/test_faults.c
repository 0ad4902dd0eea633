/*
 * test_faults - collective misuse ends with an error on every rank, never a hang or an abort.
 * Run on 2, 3 and 4 ranks by tests/test_faults.sh, one scenario per run (under `timeout`:
 * a hang fails the test there). Each scenario sets up a context (CPU backend), a causal mask and
 * a plan on MPI_COMM_WORLD, then makes the ranks disagree in one way; the call where they
 * disagree must return an error on every rank (the rank at fault its own code, the others
 * FM_ERR_COLLECTIVE or FM_ERR_MISMATCH), after which every rank destroys its objects and
 * finalizes normally.
 *   bad_root      FMPlanScatter with root = size (out of range) on the last rank only
 *   diff_root     FMPlanScatter, root 1 on rank 1 and 0 elsewhere (both valid)
 *   diff_kind     FMPlanScatter of FM_PLAN_TENSOR_KV on rank 1, _Q elsewhere (equal sizes)
 *   diff_call     FMPlanGather on rank 1, FMPlanScatter elsewhere (same arguments)
 *   fwd_vs_gather FMPlanForward on rank 0, FMPlanGather elsewhere
 *   mask_changed  rank 1 changes its mask's type after set-up; then FMMaskSetUp on every rank
 *   mask_stale    rank 1 changes its mask after set-up; then FMPlanForward on every rank
 *   mask_vs_plan  rank 0 changes its mask and calls FMMaskSetUp, the others FMPlanSetUp (the
 *                 mask and the plan share the context's communicator)
 *   view_vs_fwd   FMPlanView on rank 0, FMPlanForward elsewhere
 *   sfo_context   -fm_backend bogus on rank 1 only: FMContextSetFromOptions
 *   sfo_mask      -fm_mask_type bogus on rank 1 only: FMMaskSetFromOptions
 *   sfo_plan      -fm_plan_partition bogus on rank 1 only: FMPlanSetFromOptions
 *   errhandler    (no fault) the context's communicator returns MPI errors (MPI_ERRORS_RETURN)
 *                 instead of aborting, so that the library can report them
 * Usage: test_faults -scenario NAME (mpiexec -n 2, 3 or 4). Exit 0 when every rank saw the
 * expected outcome, 1 otherwise (the same on every rank), 99 when the set-up itself failed.
 */
#include "fmtest.h"
#include <mpi.h>

static int rank, size;
enum { SQ = 64, HEADS = 2, DIM = 16 };

/* the objects, set up up to (not including) the step a scenario breaks */
typedef struct {
  FMContext ctx;
  FMMask mask;
  FMPlan plan;
  float *global, *local, *o, *lse;
} Objs;

/* make - create and set up everything; sfo names the SetFromOptions that sees rank 1's bad
   option (its outcome is returned in *bad, and the set-up stops there). */
static void make(Objs *x, const char *sfo, FMErrorCode *bad)
{
  const size_t n = (size_t)SQ * HEADS * DIM;
  FMErrorCode e;
  *bad = FM_SUCCESS;
  memset(x, 0, sizeof(*x));
  x->global = calloc(n, sizeof(float));
  x->local = calloc(n, sizeof(float));
  x->o = calloc(n, sizeof(float));
  x->lse = calloc((size_t)SQ * HEADS, sizeof(float));
  if (!x->global || !x->local || !x->o || !x->lse) exit(99);
  for (size_t i = 0; i < n; i++) x->global[i] = (float)((i % 7) + 1) / 8.0f;
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &x->ctx));
  FMT_CALL(FMContextSetBackend(x->ctx, FM_BACKEND_CPU));
  if (!strcmp(sfo, "context")) {
    if (rank == 1) FMT_CALL(FMOptionsSetValue("-fm_backend", "bogus"));
    *bad = FMContextSetFromOptions(x->ctx);
    return;
  }
  FMT_CALL(FMContextSetUp(x->ctx));
  FMT_CALL(FMMaskCreate(x->ctx, &x->mask));
  FMT_CALL(FMMaskSetSizes(x->mask, SQ, SQ, 1));
  FMT_CALL(FMMaskSetType(x->mask, FMMASKCAUSAL));
  if (!strcmp(sfo, "mask")) {
    if (rank == 1) FMT_CALL(FMOptionsSetValue("-fm_mask_type", "bogus"));
    *bad = FMMaskSetFromOptions(x->mask);
    return;
  }
  FMT_CALL(FMMaskSetUp(x->mask));
  FMT_CALL(FMPlanCreate(x->ctx, &x->plan));
  FMT_CALL(FMPlanSetMask(x->plan, x->mask));
  FMT_CALL(FMPlanSetShape(x->plan, 1, HEADS, HEADS, DIM, FM_DTYPE_FP32));
  if (!strcmp(sfo, "plan")) {
    if (rank == 1) FMT_CALL(FMOptionsSetValue("-fm_plan_partition", "bogus"));
    *bad = FMPlanSetFromOptions(x->plan);
    return;
  }
  e = FMPlanSetUp(x->plan);
  if (e) {
    fprintf(stderr, "HARD ERROR rank %d: the set-up failed: %s\n", rank, FMGetLastErrorMessage());
    exit(99);
  }
}

static void unmake(Objs *x)
{
  FMT_CALL(FMPlanDestroy(&x->plan));
  FMT_CALL(FMMaskDestroy(&x->mask));
  FMT_CALL(FMContextDestroy(&x->ctx));
  free(x->global), free(x->local), free(x->o), free(x->lse);
}

/* run - the scenario's disagreeing call on this rank; its outcome. *known: the name was known. */
static FMErrorCode run(const char *s, Objs *x, int *known)
{
  FMErrorCode e = FM_SUCCESS;
  *known = 1;
  if (!strcmp(s, "bad_root")) e = FMPlanScatter(x->plan, FM_PLAN_TENSOR_Q, rank == size - 1 ? size : 0, x->global, x->local);
  else if (!strcmp(s, "diff_root")) e = FMPlanScatter(x->plan, FM_PLAN_TENSOR_Q, rank == 1 ? 1 : 0, x->global, x->local);
  else if (!strcmp(s, "diff_kind"))
    e = FMPlanScatter(x->plan, rank == 1 ? FM_PLAN_TENSOR_KV : FM_PLAN_TENSOR_Q, 0, x->global, x->local);
  else if (!strcmp(s, "diff_call"))
    e = rank == 1 ? FMPlanGather(x->plan, FM_PLAN_TENSOR_Q, 0, x->local, x->global)
                  : FMPlanScatter(x->plan, FM_PLAN_TENSOR_Q, 0, x->global, x->local);
  else if (!strcmp(s, "fwd_vs_gather"))
    e = rank == 0 ? FMPlanForward(x->plan, x->local, x->local, x->local, x->o, x->lse)
                  : FMPlanGather(x->plan, FM_PLAN_TENSOR_Q, 0, x->local, x->global);
  else if (!strcmp(s, "mask_changed") || !strcmp(s, "mask_stale")) {
    if (rank == 1) FMT_CALL(FMMaskSetType(x->mask, FMMASKFULL));
    if (!strcmp(s, "mask_changed")) e = FMMaskSetUp(x->mask);
    else e = FMPlanForward(x->plan, x->local, x->local, x->local, x->o, x->lse);
  } else if (!strcmp(s, "mask_vs_plan")) {
    if (rank == 0) FMT_CALL(FMMaskSetType(x->mask, FMMASKFULL));
    e = rank == 0 ? FMMaskSetUp(x->mask) : FMPlanSetUp(x->plan);
  } else if (!strcmp(s, "view_vs_fwd")) {
    FILE *null = fopen("/dev/null", "w");
    e = rank == 0 ? FMPlanView(x->plan, null) : FMPlanForward(x->plan, x->local, x->local, x->local, x->o, x->lse);
    if (null) fclose(null);
  } else *known = 0;
  return e;
}

int main(int argc, char **argv)
{
  const char *s = NULL;
  FMErrorCode e = FM_SUCCESS;
  Objs x;
  int known = 1, ok, all;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_faults: collective misuse is an error on every rank"));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int a = 1; a + 1 < argc; a++)
    if (!strcmp(argv[a], "-scenario")) s = argv[a + 1];
  if (!s || size < 2) {
    if (rank == 0) fprintf(stderr, "usage: mpiexec -n 2|3|4 test_faults -scenario NAME (got %d ranks)\n", size);
    FMFinalize();
    return 99;
  }
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  if (!strncmp(s, "sfo_", 4)) make(&x, s + 4, &e);
  else {
    FMErrorCode dummy;
    make(&x, "", &dummy);
    if (!strcmp(s, "errhandler")) {
      MPI_Comm c;
      MPI_Errhandler h;
      FMT_CALL(FMContextGetComm(x.ctx, &c));
      MPI_Comm_get_errhandler(c, &h);
      /* no fault: "the outcome" is whether the handler returns errors */
      e = h == MPI_ERRORS_RETURN ? FM_ERR_MPI : FM_SUCCESS;
      if (!e) fprintf(stderr, "FAIL rank %d: the context's communicator does not use MPI_ERRORS_RETURN\n", rank);
      MPI_Errhandler_free(&h);
    } else e = run(s, &x, &known);
  }
  FMT_CALL(FMPopErrorHandler());
  ok = known && e != FM_SUCCESS;
  if (!known && rank == 0) fprintf(stderr, "test_faults: no scenario named %s\n", s);
  else if (e == FM_SUCCESS) fprintf(stderr, "FAIL rank %d: scenario %s: the call succeeded; expected an error on every rank\n", rank, s);
  else printf("rank %d: scenario %s: %s: %s\n", rank, s, FMErrorString(e), strcmp(s, "errhandler") ? FMGetLastErrorMessage() : "MPI_ERRORS_RETURN");
  fflush(stdout);
  unmake(&x);
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0) printf("test_faults %s on %d ranks: %s\n", s, size, all ? "every rank returned an error" : "FAILED");
  FMFinalize();
  return all ? 0 : 1;
}
