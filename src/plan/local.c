/*
 * local.c - the "local" plan type (FMPLANLOCAL): one rank holds every query row and every
 * key, and the backend runs the whole problem in one call (the CPU kernels, or the CUDA
 * forward and backward kernels on device tensors). Its layout is the identity, so
 * FMPlanGetLocalKeys answers all seqlen_k keys and FMPlanScatter/FMPlanGather are copies.
 */
#include <flashmask/private/planimpl.h>
#include <flashmask/private/fmkernels.h>
#include <flashmask/private/fmdist.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  void *gpu;    /* the mask on the device (FMCudaMaskUpload), CUDA backend only */
  void *gpu_stream; /* the plan's stream when gpu was uploaded: updates in place go through it */
  int gpu_mixed;    /* a kernel read gpu on another stream since: the next set-up uploads afresh */
  int nkeys;
  int *keys;    /* 0..seqlen_k-1 */
  /* the update path: the layout (rows, keys) depends on the sizes only and is kept while kept = 1
     and the sizes and backend are those of the last set-up (shape[]); the device mask is re-uploaded */
  int kept, shape[10];
  int setups_full, setups_update; /* FMPlanGetSetUpCounts_Private */
} FMPlanLocal;

static FMErrorCode identity(int n, int **idx)
{
  FMCall(FMMalloc(n + 1, idx));
  for (int i = 0; i < n; i++) (*idx)[i] = i;
  return FM_SUCCESS;
}

static FMErrorCode destroy_local(FMPlan plan)
{
  FMPlanLocal *L = (FMPlanLocal *)plan->data;
  if (!L) return FM_SUCCESS;
#if FM_HAVE_CUDA
  if (L->gpu) FMCall(FMCudaMaskFree(L->gpu));
#endif
  free(L->keys);
  FMFree(plan->data);
  return FM_SUCCESS;
}

/* The purely local part of the set-up (agreed by the caller): the layout is rebuilt only when
   the mask's sizes, the plan's shape or the backend changed (*update = 0), the device mask always. */
static FMErrorCode setup_local(FMPlan plan, FMPlanLocal *L, int *update)
{
  const FMMask m = plan->mask;
  const int shape[10] = {m->seqlen_q, m->seqlen_k, m->mask_heads, m->mask_batch, plan->batch, plan->heads_q, plan->heads_kv,
                         plan->head_dim, (int)plan->dtype, (int)plan->backend};
  *update = L->kept && !memcmp(shape, L->shape, sizeof(shape));
  L->kept = 0;
  FMCheck(plan->ctx->size == 1, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
          "The plan type is \"%s\", but the plan's communicator has %d ranks; \"%s\" runs on one rank only (use \"%s\")", FMPLANLOCAL,
          plan->ctx->size, FMPLANLOCAL, FMPLANCP);
  FMCall(FMPlanCheckCUDADType_Private(plan));
#if FM_HAVE_CUDA
  if (plan->backend == FM_BACKEND_CUDA) {
    FMAttnProblem p;
    int done = 0;
    FMCall(FMPlanGetProblem_Private(plan, &p));
    /* the same sizes: new bounds into the same device buffers, in order on the plan's stream (the
       kernels already queued there read the old ones first); else a fresh copy */
    if (L->gpu && !L->gpu_mixed && plan->stream == L->gpu_stream) {
      const int nth = FMMaskThreads_Private(plan->mask, FM_MASK_NG(plan->mask) * (size_t)p.mask.seqlen_k, 0); /* the staging copy's */
      FMCall(FMCudaMaskUpdate(&p.mask, nth, L->gpu, plan->stream, &done));
    }
    if (!done) {
      if (L->gpu) { FMCall(FMCudaMaskFree(L->gpu)); L->gpu = NULL; }
      FMCall(FMCudaMaskUpload(&p.mask, &L->gpu));
      FMCall(FMCudaMaskStage(L->gpu)); /* its updates queue their copy and return: pinned staging */
      L->gpu_stream = plan->stream;
      L->gpu_mixed = 0;
    }
  } else if (L->gpu) { FMCall(FMCudaMaskFree(L->gpu)); L->gpu = NULL; }
#else
  FMCheck(plan->backend != FM_BACKEND_CUDA, MPI_COMM_SELF, FM_ERR_SUP, "This build has no CUDA support");
#endif
  /* the CPU kernels read the host summaries: computed here (a failure is SetUp's, and a set-up
     mask stays read-only while plans run, even from several application threads) */
  if (plan->backend != FM_BACKEND_CUDA) FMCall(FMMaskSummary_Private(plan->mask, NULL));
  if (!*update || !plan->rows || !L->keys) {
    *update = 0;
    FMFree(plan->rows);
    FMFree(L->keys);
    plan->nlocal = 0;
    L->nkeys = 0;
    FMCall(identity(plan->mask->seqlen_q, &plan->rows));
    FMCall(identity(plan->mask->seqlen_k, &L->keys));
  }
  plan->nlocal = plan->mask->seqlen_q;
  L->nkeys = plan->mask->seqlen_k;
  memcpy(L->shape, shape, sizeof(shape));
  L->kept = 1;
  return FM_SUCCESS;
}

static FMErrorCode setup(FMPlan plan)
{
  FMPlanLocal *L = (FMPlanLocal *)plan->data;
  int update = 0;
  FMAgree(plan->hdr.comm, setup_local(plan, L, &update));
  if (update) L->setups_update++;
  else L->setups_full++;
  return FM_SUCCESS;
}

/* FMPlanGetSetUpCounts_Private - see fmdist.h. */
FMErrorCode FMPlanGetSetUpCounts_Private(FMPlan plan, int *full, int *update)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCheckSetUp(plan, "FMPlan");
  if (!strcmp(plan->hdr.type_name, FMPLANLOCAL)) {
    const FMPlanLocal *L = (const FMPlanLocal *)plan->data;
    if (full) *full = L->setups_full;
    if (update) *update = L->setups_update;
  } else {
    FMDistStats st;
    FMCall(FMDistGetStats(plan, &st));
    if (full) *full = st.setups_full;
    if (update) *update = st.setups_update;
  }
  return FM_SUCCESS;
}

static FMErrorCode forward(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse)
{
  FMAttnProblem p;
  float *lse_tmp = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  FMCall(FMPlanGetProblem_Private(plan, &p));
  if (plan->backend == FM_BACKEND_CUDA) {
#if FM_HAVE_CUDA
    if (!lse) FMCall(FMCudaMalloc((size_t)p.batch * p.heads_q * p.nq * sizeof(float), (void **)&lse_tmp));
    FMPlanLocal *L = (FMPlanLocal *)plan->data;
    if (plan->stream != L->gpu_stream && !L->gpu_mixed) {
      /* another stream than the mask's: an update queued on the old one must have finished */
      FMCall(FMCudaStreamSynchronize(L->gpu_stream));
      L->gpu_mixed = 1;
    }
    ierr = FMCudaForward(&p, L->gpu, q, k, v, o, lse ? lse : lse_tmp, plan->stream);
    if (lse_tmp) FMCall(FMCudaFree(lse_tmp));
#else
    FMRaise(plan->hdr.comm, FM_ERR_SUP, "This build has no CUDA support");
#endif
  } else {
    if (!lse) FMCall(FMMalloc((size_t)p.batch * p.heads_q * p.nq + 1, &lse_tmp));
    ierr = FMCPUForward(&p, q, k, v, o, plan->dtype, lse ? lse : lse_tmp);
    free(lse_tmp);
  }
  FMCall(ierr);
  return FM_SUCCESS;
}

/* The CPU backward on host tensors: dQ accumulates in fp32, then converts. */
static FMErrorCode backward_cpu(FMPlan plan, const void *q, const void *k, const void *v, const void *o, const float *lse, const void *dout,
                                void *dq, void *dk, void *dv)
{
  FMAttnProblem p;
  size_t nq;
  float *dq_acc = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  FMCall(FMPlanGetProblem_Private(plan, &p));
  nq = (size_t)p.batch * p.nq * p.heads_q * p.head_dim;
  FMCall(FMCalloc(nq + 1, &dq_acc));
  FMCallGoto(FMCPUBackward(&p, q, k, v, o, lse, dout, dq_acc, dk, dv, plan->dtype));
  for (size_t i = 0; i < nq; i++) FMFromFloat(dq, i, plan->dtype, dq_acc[i]);
cleanup:
  free(dq_acc);
  return ierr;
}

static FMErrorCode backward(FMPlan plan, const void *q, const void *k, const void *v, const void *o, const float *lse, const void *dout,
                            void *dq, void *dk, void *dv)
{
  if (plan->backend == FM_BACKEND_CUDA) {
#if FM_HAVE_CUDA
    FMAttnProblem p;
    FMCall(FMPlanGetProblem_Private(plan, &p));
    FMPlanLocal *L = (FMPlanLocal *)plan->data;
    if (plan->stream != L->gpu_stream && !L->gpu_mixed) {
      FMCall(FMCudaStreamSynchronize(L->gpu_stream)); /* as in forward() */
      L->gpu_mixed = 1;
    }
    FMCall(FMCudaBackward(&p, L->gpu, q, k, v, o, lse, dout, dq, dk, dv, plan->stream));
#else
    FMRaise(plan->hdr.comm, FM_ERR_SUP, "This build has no CUDA support");
#endif
  } else FMCall(backward_cpu(plan, q, k, v, o, lse, dout, dq, dk, dv));
  return FM_SUCCESS;
}

static FMErrorCode view(FMPlan plan, FILE *fp)
{
  FMCall(FMPrintf(plan->hdr.comm, fp, "  one rank: all %d query rows and %d keys local\n", plan->nlocal, ((FMPlanLocal *)plan->data)->nkeys));
  return FM_SUCCESS;
}

static FMErrorCode getlocalkeys(FMPlan plan, int *nkeys, const int **keys)
{
  FMPlanLocal *L = (FMPlanLocal *)plan->data;
  *nkeys = L->nkeys;
  if (keys) *keys = L->keys;
  return FM_SUCCESS;
}

static FMErrorCode getlayout(FMPlan plan, int keys, int rank, int *n, int **idx)
{
  FMCheck(rank == 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Rank %d of a one-rank plan", rank);
  *n = keys ? plan->mask->seqlen_k : plan->mask->seqlen_q;
  FMCall(identity(*n, idx));
  return FM_SUCCESS;
}

static const FMPlanOps local_ops = {NULL, setup, forward, backward, view, destroy_local, getlocalkeys, getlayout};

/* FMPlanCreate_Local - see planimpl.h. */
FMErrorCode FMPlanCreate_Local(FMPlan plan)
{
  FMPlanLocal *L;
  FMCall(FMCalloc(1, &L));
  plan->data = L;
  plan->ops = &local_ops;
  return FM_SUCCESS;
}
