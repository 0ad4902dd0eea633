/*
 * test_context - FMContext on 1..4 ranks: communicator duplication, node split, view of
 * every rank, backend choice, bad input, and a collective error (a bad mask on one rank)
 * that must reach every rank instead of hanging; the agreement helpers of src/sys/agree.c on
 * the context's communicator (FMAgreeSame, FMAgreeRootOutcome, FMAgreeAny, FMAgreeCode).
 */
#include "fmtest.h"
#include <flashmask/private/fmimpl.h>
#if FM_HAVE_NCCL
#include <nccl.h>
#endif

/* The agreement helpers on the context's communicator: every rank gets the outcome. */
static void agreement(FMContext ctx, int rank, int size)
{
  MPI_Comm comm = ctx->comm;
  FMErrorCode e;
  int any = -1;
  char what[64];

  FMT_CALL(FMAgreeSame(comm, 0x1234abcdULL, "a shared value"));
  /* one rank differs (the last, and on 3+ ranks one in the middle too): every rank fails,
     naming the field and the two values */
  for (int odd = size - 1; odd >= 1; odd = odd == size - 1 && size > 2 ? size / 2 : 0) {
    snprintf(what, sizeof(what), "the test field %d", odd);
    e = FMAgreeSame(comm, rank == odd ? 0x99ULL : 0x42ULL, what);
    FMT_CHECK(size == 1 ? e == FM_SUCCESS : e == FM_ERR_MISMATCH, "[rank %d] FMAgreeSame, rank %d differs: %s", rank, odd, FMErrorString(e));
    if (e == FM_ERR_MISMATCH) {
      char r0[32], rodd[32];
      snprintf(r0, sizeof(r0), "rank %d has 0x99", odd);
      snprintf(rodd, sizeof(rodd), "rank 0 has 0x42");
      FMT_CHECK(fmt_msg_has(what) && fmt_msg_has(r0) && fmt_msg_has(rodd), "[rank %d] FMAgreeSame message: %s", rank, FMGetLastErrorMessage());
    }
  }
  /* root's outcome: success, then a failure of root only (root 0, then the last rank) */
  FMT_CALL(FMAgreeRootOutcome(comm, 0, FM_SUCCESS));
  for (int root = 0; root < size; root += size > 1 ? size - 1 : 1) {
    FMErrorCode mine = FM_SUCCESS;
    if (rank == root) mine = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_FILE, "the root's own failure %d", root);
    e = FMAgreeRootOutcome(comm, root, mine);
    FMT_CHECK(rank == root ? e == FM_ERR_FILE : e == FM_ERR_COLLECTIVE, "[rank %d] FMAgreeRootOutcome(root %d): %s", rank, root, FMErrorString(e));
    snprintf(what, sizeof(what), "the root's own failure %d", root);
    FMT_CHECK(fmt_msg_has(what), "[rank %d] FMAgreeRootOutcome(root %d) message: %s", rank, root, FMGetLastErrorMessage());
    if (rank != root) {
      snprintf(what, sizeof(what), "Rank %d (the root)", root);
      FMT_CHECK(fmt_msg_has(what) && fmt_msg_has("FM_ERR_FILE"), "[rank %d] message: %s", rank, FMGetLastErrorMessage());
    }
  }
  /* a failure on root must not be hidden by the other ranks' success: they learn it even when
     they did nothing (the error above was raised on root alone) */
  FMT_CALL(FMAgreeAny(comm, 0, &any));
  FMT_CHECK(any == 0, "[rank %d] FMAgreeAny of zeros gave %d", rank, any);
  FMT_CALL(FMAgreeAny(comm, rank == size - 1, &any));
  FMT_CHECK(any == 1, "[rank %d] FMAgreeAny with the last rank set gave %d", rank, any);
  /* the code of one failing rank reaches every rank */
  e = FMAgreeCode(comm, rank == size - 1 ? FM_ERR_ARG_SIZ : FM_SUCCESS);
  FMT_CHECK(rank == size - 1 ? e == FM_ERR_ARG_SIZ : e == FM_ERR_COLLECTIVE, "[rank %d] FMAgreeCode: %s", rank, FMErrorString(e));
  if (rank != size - 1) FMT_CHECK(fmt_msg_has("FM_ERR_ARG_SIZ"), "[rank %d] FMAgreeCode message: %s", rank, FMGetLastErrorMessage());
  /* the lowest failing rank's message reaches every rank (FMAgreeFirstError); none failing: success */
  FMT_CALL(FMAgreeFirstError(comm, FM_SUCCESS));
  {
    int first = size > 1 ? 1 : 0;
    char want[64];
    if (rank >= first) e = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_ARG_WRONG, "planted on rank %d", rank);
    else e = FM_SUCCESS;
    e = FMAgreeFirstError(comm, e);
    FMT_CHECK(rank == first ? e == FM_ERR_ARG_WRONG : e == FM_ERR_COLLECTIVE, "[rank %d] FMAgreeFirstError: %s", rank, FMErrorString(e));
    snprintf(want, sizeof(want), "planted on rank %d", first);
    FMT_CHECK(fmt_msg_has(want), "[rank %d] FMAgreeFirstError message: %s", rank, FMGetLastErrorMessage());
    if (rank != first) {
      snprintf(want, sizeof(want), "Rank %d failed with FM_ERR_ARG_WRONG", first);
      FMT_CHECK(fmt_msg_has(want), "[rank %d] FMAgreeFirstError names the rank: %s", rank, FMGetLastErrorMessage());
    }
  }
}

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
  { /* the NCCL time limit: refused when negative or NaN, read back, and set by its option */
    double t = -1;
    FMT_EXPECT_ERR(FMContextSetNCCLTimeout(ctx, -1.0), FM_ERR_ARG_OUTOFRANGE, "seconds");
    FMT_EXPECT_ERR(FMContextSetNCCLTimeout(ctx, NAN), FM_ERR_ARG_OUTOFRANGE, "seconds");
    FMT_CALL(FMContextGetNCCLTimeout(ctx, &t));
    FMT_CHECK(t == 0, "the default NCCL time limit is %g, expected 0 (none)", t);
    FMT_CALL(FMContextSetNCCLTimeout(ctx, 2.5));
    FMT_CALL(FMContextGetNCCLTimeout(ctx, &t));
    FMT_CHECK(t == 2.5, "FMContextGetNCCLTimeout gave %g after setting 2.5", t);
    FMT_CALL(FMOptionsSetValue("-fm_nccl_timeout", "-3"));
    FMT_EXPECT_ERR(FMContextSetFromOptions(ctx), FM_ERR_ARG_OUTOFRANGE, "-fm_nccl_timeout");
    FMT_CALL(FMOptionsSetValue("-fm_nccl_timeout", "7"));
    FMT_CALL(FMContextSetFromOptions(ctx));
    FMT_CALL(FMContextGetNCCLTimeout(ctx, &t));
    FMT_CHECK(t == 7, "-fm_nccl_timeout 7 gave %g", t);
    FMT_CALL(FMOptionsSetValue("-fm_nccl_timeout", "0"));
    /* the Hopper backward's step rows: one of 0, 64, 80, 128, read into the kernel options */
    FMT_CALL(FMOptionsSetValue("-fm_sm90_bwd_rows", "72"));
    FMT_EXPECT_ERR(FMContextSetFromOptions(ctx), FM_ERR_ARG_OUTOFRANGE, "-fm_sm90_bwd_rows");
    FMT_CALL(FMOptionsSetValue("-fm_sm90_bwd_rows", "80"));
    FMT_CALL(FMContextSetFromOptions(ctx));
    FMT_CHECK(ctx->kopts.sm90_bwd_rows == 80, "-fm_sm90_bwd_rows 80 read as %d", ctx->kopts.sm90_bwd_rows);
    FMT_CALL(FMOptionsSetValue("-fm_sm90_bwd_rows", "0"));
  }
  FMT_CALL(FMContextSetFromOptions(ctx));
  FMT_CALL(FMContextSetUp(ctx));
  FMT_CALL(FMContextGetComm(ctx, &comm));
  MPI_Comm_compare(comm, MPI_COMM_WORLD, &result);
  FMT_CHECK(result == MPI_CONGRUENT, "the context's communicator must be a duplicate (congruent), got %d", result);
  FMT_CALL(FMContextGetBackend(ctx, &be));
  FMT_CALL(FMContextGetDevice(ctx, &dev));
  FMT_CHECK((be == FM_BACKEND_CUDA) == (dev >= 0), "backend %s but device %d", FMBackendName(be), dev);

  /* The default CPU threads: without OMP_NUM_THREADS, the ranks bound to the same cores share
     them (at least one thread each), so they never oversubscribe the cores they share. */
  {
    int mine[2] = {ctx->threads, ctx->self.ncores}, *all = malloc(sizeof(int) * 2 * (size_t)size);
    uint64_t *hs = malloc(sizeof(uint64_t) * (size_t)size);
    MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD);
    MPI_Allgather(&ctx->cpuset_hash, 1, MPI_UINT64_T, hs, 1, MPI_UINT64_T, MPI_COMM_WORLD);
    FMT_CHECK(ctx->threads >= 1, "rank %d: %d CPU threads", rank, ctx->threads);
#ifndef _OPENMP
    if (rank == 0) printf("built without OpenMP: 1 CPU thread per rank\n");
#else
    if (getenv("OMP_NUM_THREADS") && ctx->nthreads == 0 && atoi(getenv("OMP_NUM_THREADS")) > 0) {
      /* OMP_NUM_THREADS up to the binding's hardware threads shared by the ranks bound to them
         (8 asked of a rank bound to one core run 1), and threads_env (the view's line) says so */
      const int want = atoi(getenv("OMP_NUM_THREADS"));
      int same = 0, share;
      for (int r = 0; r < size; r++) same += hs[r] == ctx->cpuset_hash;
      share = ctx->self.npus / same > 1 ? ctx->self.npus / same : 1;
      FMT_CHECK(ctx->threads == (want < share ? want : share),
                "rank %d: OMP_NUM_THREADS=%d, %d ranks bound to %d hardware threads: %d threads in use, expected %d", rank, want, same,
                ctx->self.npus, ctx->threads, want < share ? want : share);
      FMT_CHECK(ctx->threads_env == (want > share ? want : 0), "rank %d: threads_env %d, OMP_NUM_THREADS %d, share %d", rank,
                ctx->threads_env, want, share);
      if (rank == 0) printf("OMP_NUM_THREADS=%d: %d CPU threads per rank (%d ranks share %d hardware threads)\n", want, ctx->threads, same,
                            ctx->self.npus);
    }
#endif
    if (!getenv("OMP_NUM_THREADS")) {
      int sum = 0, same = 0;
      for (int r = 0; r < size; r++)
        if (hs[r] == ctx->cpuset_hash) { sum += all[2 * r]; same++; }
      FMT_CHECK(sum <= (ctx->self.ncores > same ? ctx->self.ncores : same),
                "rank %d: the %d ranks bound to its %d cores run %d threads in all (oversubscribed)", rank, same, ctx->self.ncores, sum);
      if (rank == 0) printf("default CPU threads: %d per rank (%d ranks share %d cores)\n", ctx->threads, same, ctx->self.ncores);
    }
    free(all);
    free(hs);
    {
      const int n0 = ctx->nthreads, env = ctx->threads_env;
      FMT_CALL(FMContextSetNumThreads(ctx, 3));
      FMT_CHECK(ctx->threads == 3, "FMContextSetNumThreads(3) after set-up: %d threads in use", ctx->threads);
      FMT_CHECK(ctx->threads_env == 0, "FMContextSetNumThreads(3) after set-up left the cap of OMP_NUM_THREADS=%d for the view",
                ctx->threads_env);
      ctx->nthreads = n0; /* the set-up's resolution back, for the view below */
      ctx->threads = mine[0];
      ctx->threads_env = env;
    }
  }

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
      FMT_CHECK(!ctx->threads_env == !strstr(buf, "OMP_NUM_THREADS asks for"), "view and threads_env %d disagree:\n%s", ctx->threads_env, buf);
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
    /* the CPU backend chooses no GPU, and every rank's view says so (even where a GPU exists) */
    for (int r = 0; r < size; r++)
      FMT_CHECK(cctx->all[r].gpu == -1, "CPU backend: rank %d's view has GPU %d, expected none (-1)", r, cctx->all[r].gpu);
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

  agreement(ctx, rank, size);

  FMT_CALL(FMContextDestroy(&ctx));
  FMT_CHECK(ctx == NULL, "Destroy must NULL the handle");
  int fails = fmt_failures, all;
  MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  fmt_failures = rank == 0 ? all : fails;
  int rc = fmt_finish("test_context");
  FMT_CALL(FMFinalize());
  return rc;
}
