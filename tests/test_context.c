/*
 * test_context - FMContext on 1..4 ranks: communicator duplication, node split, view of
 * every rank, backend choice, bad input, and a collective error (a bad mask on one rank)
 * that must reach every rank instead of hanging.
 */
#include "fmtest.h"
#include <flashmask/private/fmimpl.h>
#if FM_HAVE_NCCL
#include <nccl.h>
#endif

int main(int argc, char **argv)
{
  FMContext ctx;
  MPI_Comm comm;
  int rank, size, result, dev;
  FMBackend be;

  FMT_CALL(FMInitialize(&argc, &argv, NULL, NULL));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));

  FMT_EXPECT_ERR(FMContextCreate(MPI_COMM_NULL, &ctx), FM_ERR_ARG_WRONG, "argument 1");
  FMT_EXPECT_ERR(FMContextCreate(MPI_COMM_WORLD, NULL), FM_ERR_ARG_NULL, "argument 2");

  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_EXPECT_ERR(FMContextSetBackend(ctx, (FMBackend)7), FM_ERR_ARG_OUTOFRANGE, "backend");
  FMT_EXPECT_ERR(FMContextSetNumThreads(ctx, -1), FM_ERR_ARG_OUTOFRANGE, "nthreads");
  FMT_EXPECT_ERR(FMContextView(ctx, NULL), FM_ERR_ORDER, "SetUp");
  FMT_EXPECT_ERR(FMContextGetBackend(ctx, &be), FM_ERR_ORDER, "SetUp");
  FMT_EXPECT_ERR(FMMaskSetUp((FMMask)ctx), FM_ERR_ARG_WRONG, "argument 1");
  FMT_CALL(FMContextSetFromOptions(ctx));
  FMT_CALL(FMContextSetUp(ctx));
  FMT_CALL(FMContextGetComm(ctx, &comm));
  MPI_Comm_compare(comm, MPI_COMM_WORLD, &result);
  FMT_CHECK(result == MPI_CONGRUENT, "the context's communicator must be a duplicate (congruent), got %d", result);
  FMT_CALL(FMContextGetBackend(ctx, &be));
  FMT_CALL(FMContextGetDevice(ctx, &dev));
  FMT_CHECK((be == FM_BACKEND_CUDA) == (dev >= 0), "backend %s but device %d", FMBackendName(be), dev);

  /* The view lists every rank (rank 0 prints). */
  {
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    FMT_CALL(FMContextView(ctx, mem));
    fclose(mem);
    if (rank == 0) {
      char key[64];
      FMT_CHECK(strstr(buf, "FMContext:") != NULL, "view header missing:\n%s", buf);
      for (int r = 0; r < size; r++) {
        snprintf(key, sizeof(key), "\n  %4d ", r);
        FMT_CHECK(strstr(buf, key) != NULL, "view does not list rank %d:\n%s", r, buf);
      }
      fputs(buf, stdout);
    }
    free(buf);
  }

  /* NCCL bootstrap over MPI when every rank has a GPU: the communicators span the right ranks. */
#if FM_HAVE_NCCL
  {
    /* one GPU per rank: NCCL refuses two ranks on one device */
    int ngpu = dev >= 0 && ctx->node_size <= ctx->ngpus, all;
    MPI_Allreduce(&ngpu, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all) {
      void *w = NULL, *nd = NULL, *cr = NULL;
      int cnt = -1;
      FMT_CALL(FMContextGetNCCL_Private(ctx, &w, &nd, &cr));
      FMT_CHECK(w && nd && cr, "NCCL communicators missing");
      if (w) { ncclCommCount((ncclComm_t)w, &cnt); FMT_CHECK(cnt == size, "NCCL world has %d ranks, expected %d", cnt, size); }
    } else if (rank == 0) printf("NCCL bootstrap not tested: not every rank has a GPU of its own\n");
  }
#endif

  /* Requesting CUDA where there is no GPU fails on every rank with FM_ERR_SUP. */
  if (dev < 0) {
    FMContext c2;
    FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &c2));
    FMT_CALL(FMContextSetBackend(c2, FM_BACKEND_CUDA));
    FMT_EXPECT_ERR(FMContextSetUp(c2), FM_ERR_SUP, "cuda");
    FMT_CALL(FMContextDestroy(&c2));
  }

  /* A collective error: rank size-1 gives document lengths that do not sum to seqlen_k.
     Every rank must return an error (its own or FM_ERR_COLLECTIVE) and nobody hangs. */
  {
    FMMask m;
    int good[3] = {100, 200, 212}, bad[3] = {100, 200, 211};
    FMErrorCode e;
    FMT_CALL(FMMaskCreate(ctx, &m));
    FMT_CALL(FMMaskSetSizes(m, 512, 512, 1));
    FMT_CALL(FMMaskSetType(m, FMMASKCAUSALDOCUMENT));
    FMT_CALL(FMMaskSetDocuments(m, 3, rank == size - 1 ? bad : good));
    e = FMMaskSetUp(m);
    if (size == 1) FMT_CHECK(e != FM_SUCCESS, "bad documents must fail SetUp");
    else if (rank == size - 1) FMT_CHECK(e != FM_SUCCESS && e != FM_ERR_COLLECTIVE, "failing rank got %s", FMErrorString(e));
    else {
      FMT_CHECK(e == FM_ERR_COLLECTIVE, "rank %d got %s, expected FM_ERR_COLLECTIVE", rank, FMErrorString(e));
      if (e == FM_ERR_COLLECTIVE) {
        char key[32];
        snprintf(key, sizeof(key), "Rank %d", size - 1);
        FMT_CHECK(strstr(FMGetLastErrorMessage(), key) != NULL, "message \"%s\" does not name rank %d", FMGetLastErrorMessage(), size - 1);
      }
    }
    FMT_CALL(FMMaskDestroy(&m));
    FMT_CHECK(m == NULL, "Destroy must NULL the handle");
  }

  /* A bad pointer on one rank in a collective run-time call fails on every rank, no hang. */
  {
    FMContext cctx;
    FMMask m;
    FMPlan plan;
    int nl, nk;
    const int *rows, *keys;
    FMErrorCode e;
    FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &cctx));
    FMT_CALL(FMContextSetBackend(cctx, FM_BACKEND_CPU));
    FMT_CALL(FMContextSetUp(cctx));
    FMT_CALL(FMMaskCreate(cctx, &m));
    FMT_CALL(FMMaskSetSizes(m, 64 * size, 64 * size, 1));
    FMT_CALL(FMMaskSetType(m, FMMASKCAUSAL));
    FMT_CALL(FMMaskSetUp(m));
    FMT_CALL(FMPlanCreate(cctx, &plan));
    FMT_CALL(FMPlanSetMask(plan, m));
    FMT_CALL(FMPlanSetShape(plan, 1, 1, 1, 8, FM_DTYPE_FP32));
    FMT_CALL(FMPlanSetUp(plan));
    FMT_CALL(FMPlanGetLocalRows(plan, &nl, &rows));
    FMT_CALL(FMPlanGetLocalKeys(plan, &nk, &keys));
    float *qb = calloc((size_t)(nl + 1) * 8, sizeof(float)), *kb = calloc((size_t)(nk + 1) * 8, sizeof(float));
    float *lb = calloc((size_t)nl + 1, sizeof(float));
    e = FMPlanForward(plan, qb, kb, kb, rank == size - 1 ? NULL : qb, lb);
    if (rank == size - 1 && nl > 0) FMT_CHECK(e == FM_ERR_ARG_NULL, "rank with o = NULL got %s", FMErrorString(e));
    else if (size > 1) FMT_CHECK(e == FM_ERR_COLLECTIVE || (rank == size - 1 && nl == 0 && e == FM_SUCCESS),
                                 "rank %d got %s, expected FM_ERR_COLLECTIVE", rank, FMErrorString(e));
    free(qb); free(kb); free(lb);
    FMT_CALL(FMPlanDestroy(&plan));
    FMT_CALL(FMMaskDestroy(&m));
    FMT_CALL(FMContextDestroy(&cctx));
  }

  /* A plan refuses a mask whose communicator has other ranks (needs 2+ ranks). */
  if (size > 1) {
    FMContext selfctx;
    FMMask selfmask;
    FMPlan plan;
    FMT_CALL(FMContextCreate(MPI_COMM_SELF, &selfctx));
    FMT_CALL(FMMaskCreate(selfctx, &selfmask));
    FMT_CALL(FMPlanCreate(ctx, &plan));
    FMT_EXPECT_ERR(FMPlanSetMask(plan, selfmask), FM_ERR_ARG_INCOMP, "communicator");
    FMT_CALL(FMPlanDestroy(&plan));
    FMT_CALL(FMMaskDestroy(&selfmask));
    FMT_CALL(FMContextDestroy(&selfctx));
  }

  FMT_CALL(FMContextDestroy(&ctx));
  FMT_CHECK(ctx == NULL, "Destroy must NULL the handle");
  int fails = fmt_failures, all;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  fmt_failures = rank == 0 ? all : fails;
  int rc = fmt_finish("test_context");
  FMT_CALL(FMFinalize());
  return rc;
}
