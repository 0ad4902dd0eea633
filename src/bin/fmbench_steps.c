/*
 * fmbench_steps.c - fmbench -cp -steps N: what re-planning every training step costs on the
 * CUDA backend (issue 13). One "cp" plan (the unprefixed -fm_plan_* options and then those under
 * -plan_, as fmbench -cp's "plan" configuration) is set up once on a builder mask (the full
 * set-up, timed); then N times the mask gets a fresh packing (FMMaskSetSeed(seed + step),
 * FMMaskSetUp) and the plan is set up again (the update path of FMPlanSetUp: the planner, the
 * localized stage masks and their upload; NCCL connections and buffers kept), and one forward
 * runs on it. Printed per (mask, seqlen): the full set-up, the medians over the steps of the
 * mask's set-up, the update and the forward (each the max over the ranks), and the plan's count
 * of full and update set-ups (every step must be an update). Collective on MPI_COMM_WORLD.
 */
#include <flashmask/private/fmdist.h>
#include <flashmask/private/planimpl.h>
#include <flashmask/private/fmkernels.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fmbench_cp.h"

FMErrorCode FMCudaFillRandom_Private(void *p, size_t n, FMDType t, unsigned long long seed, float amp, void *stream);
FMErrorCode FMBenchCPSteps_Private(FMContext ctx, const char *type, int S, int mh, int H, int Hkv, int D, FMDType dt, unsigned long seed,
                                   int steps, int dev);

/* Device tensors of the plan's current local layout, grown as the partition moves. */
typedef struct {
  void *q, *k, *v, *o;
  float *lse;
  size_t nq, nk; /* elements allocated in q/o and k/v */
} SBuf;

static void sbuf_free(SBuf *b)
{
  cudaFree(b->q); cudaFree(b->k); cudaFree(b->v); cudaFree(b->o); cudaFree(b->lse);
  memset(b, 0, sizeof(*b));
}

/* Room for nl local rows and nk local keys; new random inputs when it grows. Not collective. */
static FMErrorCode sbuf_fit(SBuf *b, int nl, int nk, int H, int Hkv, int D, FMDType dt, unsigned long long seed)
{
  const size_t es = FMDTypeSize(dt), nq = (size_t)nl * H * D, nkv = (size_t)nk * Hkv * D;
  if (nq <= b->nq && nkv <= b->nk && b->q) return FM_SUCCESS;
  sbuf_free(b);
  FMCall(FMCudaMalloc(nq * es + 16, &b->q));
  FMCall(FMCudaMalloc(nq * es + 16, &b->o));
  FMCall(FMCudaMalloc(nkv * es + 16, &b->k));
  FMCall(FMCudaMalloc(nkv * es + 16, &b->v));
  FMCall(FMCudaMalloc((size_t)nl * H * sizeof(float) + 16, (void **)&b->lse));
  if (nq) FMCall(FMCudaFillRandom_Private(b->q, nq, dt, seed, 1.0f, NULL));
  if (nkv) FMCall(FMCudaFillRandom_Private(b->k, nkv, dt, seed + 1, 1.0f, NULL));
  if (nkv) FMCall(FMCudaFillRandom_Private(b->v, nkv, dt, seed + 2, 1.0f, NULL));
  FMCallCUDA(cudaDeviceSynchronize());
  b->nq = nq;
  b->nk = nkv;
  return FM_SUCCESS;
}


/* Seconds of f on the slowest rank: barrier, time on every rank, max. t out. */
#define TIMED(comm, t, f)                                                                 \
  do {                                                                                    \
    double t0_, loc_;                                                                     \
    FMCallMPIGoto(MPI_Barrier(comm));                                                     \
    t0_ = FMTime();                                                                       \
    FMCallGoto(f);                                                                        \
    loc_ = FMTime() - t0_;                                                                \
    FMCallMPIGoto(MPI_Allreduce(&loc_, &(t), 1, MPI_DOUBLE, MPI_MAX, comm));              \
  } while (0)

/* One forward on the plan's current layout (device synchronized after it). */
static FMErrorCode forward(FMPlan plan, SBuf *b, int H, int Hkv, int D, FMDType dt, unsigned long long seed)
{
  int nl = 0, nk = 0;
  FMErrorCode ierr;
  FMCall(FMPlanGetLocalRows(plan, &nl, NULL));
  FMCall(FMPlanGetLocalKeys(plan, &nk, NULL));
  ierr = sbuf_fit(b, nl, nk, H, Hkv, D, dt, seed);
  FMCall(FMAgreeCode(MPI_COMM_WORLD, ierr));
  FMCall(FMPlanForward(plan, b->q, b->k, b->v, b->o, b->lse));
  FMCallCUDA(cudaDeviceSynchronize());
  return FM_SUCCESS;
}

/* FMBenchCPSteps_Private - see the file comment. Collective on ctx (MPI_COMM_WORLD). */
FMErrorCode FMBenchCPSteps_Private(FMContext ctx, const char *type, int S, int mh, int H, int Hkv, int D, FMDType dt, unsigned long seed,
                                   int steps, int dev)
{
  MPI_Comm comm = MPI_COMM_WORLD;
  FMMask mask = NULL;
  FMPlan plan = NULL;
  SBuf b;
  double tfull = 0, tfwd0 = 0, *tm = NULL, *tu = NULL, *tf = NULL;
  int rank, full = 0, upd = 0;
  FMErrorCode ierr = FM_SUCCESS;
  memset(&b, 0, sizeof(b));
  MPI_Comm_rank(comm, &rank);
  if (dev >= 0) FMCallCUDA(cudaSetDevice(dev));
  FMCall(FMMaskCreate(ctx, &mask));
  FMCallGoto(FMMaskSetSizes(mask, S, S, mh));
  FMCallGoto(FMMaskSetType(mask, type));
  FMCallGoto(FMMaskSetSeed(mask, seed));
  FMCallGoto(FMMaskSetUp(mask));
  FMCallGoto(FMPlanCreate(ctx, &plan));
  FMCallGoto(FMPlanSetMask(plan, mask));
  FMCallGoto(FMPlanSetType(plan, FMPLANCP));
  FMCallGoto(FMPlanSetFromOptions(plan)); /* the unprefixed -fm_plan_* options */
  FMCallGoto(FMPlanSetOptionsPrefix(plan, "plan_"));
  FMCallGoto(FMPlanSetFromOptions(plan));
  FMCallGoto(FMPlanSetShape(plan, 1, H, Hkv, D, dt));
  TIMED(comm, tfull, FMPlanSetUp(plan));
  TIMED(comm, tfwd0, forward(plan, &b, H, Hkv, D, dt, seed * 7919ull + (unsigned long long)rank));
  FMCallGoto(FMMalloc(steps, &tm));
  FMCallGoto(FMMalloc(steps, &tu));
  FMCallGoto(FMMalloc(steps, &tf));
  for (int s = 0; s < steps; s++) {
    FMCallGoto(FMMaskSetSeed(mask, seed + 1 + (unsigned long)s));
    TIMED(comm, tm[s], FMMaskSetUp(mask));
    TIMED(comm, tu[s], FMPlanSetUp(plan));
    TIMED(comm, tf[s], forward(plan, &b, H, Hkv, D, dt, seed * 7919ull + (unsigned long long)rank));
  }
  FMCallGoto(FMPlanGetSetUpCounts_Private(plan, &full, &upd));
  if (rank == 0) {
    printf("%-22s %7d  full set-up %9.3f ms (forward %8.3f ms); per step, median of %d: mask set-up %8.3f ms, update %8.3f ms, forward %8.3f ms; "
           "%d full + %d update set-ups%s\n",
           type, S, 1e3 * tfull, 1e3 * tfwd0, steps, 1e3 * FMBenchMedian_Private(tm, steps), 1e3 * FMBenchMedian_Private(tu, steps), 1e3 * FMBenchMedian_Private(tf, steps), full, upd,
           upd == steps && full == 1 ? "" : " (expected every step to be an update)");
    fflush(stdout);
  }
  FMCheckGoto(full == 1 && upd == steps, MPI_COMM_SELF, FM_ERR_LIB, "fmbench -cp -steps: %d full and %d update set-ups; expected 1 and %d", full,
              upd, steps);
cleanup:
  free(tm); free(tu); free(tf);
  sbuf_free(&b);
  if (plan) (void)FMPlanDestroy(&plan);
  if (mask) (void)FMMaskDestroy(&mask);
  return ierr;
}
