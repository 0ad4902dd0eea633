/*
 * backend.c - what the plan types (local.c, cp/) share about the backends: the problem as the
 * kernels see it (FMPlanGetProblem_Private), the CUDA backend's dtype rule and device-pointer
 * check, and its backward without a backward kernel (device tensors staged through host
 * memory around a host backward). Calls nothing in plan.c or the types.
 */
#include <flashmask/private/planimpl.h>
#include <flashmask/private/fmkernels.h>
#include <stdlib.h>
#include <string.h>

/* FMPlanGetProblem_Private - see fmkernels.h. */
FMErrorCode FMPlanGetProblem_Private(FMPlan plan, FMAttnProblem *p)
{
  memset(p, 0, sizeof(*p));
  p->batch = plan->batch; p->heads_q = plan->heads_q; p->heads_kv = plan->heads_kv; p->head_dim = plan->head_dim;
  p->dtype = plan->dtype;
  p->scale = (float)plan->scale;
  FMCall(FMMaskGetDesc_Private(plan->mask, &p->mask));
  p->nq = p->mask.seqlen_q; p->qrows = NULL;
  p->k0 = 0; p->nk = p->mask.seqlen_k;
  p->nthreads = plan->ctx->threads;
  p->opts = plan->ctx->kopts;
  p->opts.deterministic = plan->deterministic; /* the plan's (FMPlanSetDeterministic), not the context's */
  return FM_SUCCESS;
}


/* FMPlanCheckCUDADType_Private - see planimpl.h. */
FMErrorCode FMPlanCheckCUDADType_Private(FMPlan plan)
{
  FMCheck(plan->backend != FM_BACKEND_CUDA || plan->dtype == FM_DTYPE_BF16 || plan->dtype == FM_DTYPE_FP16, MPI_COMM_SELF, FM_ERR_SUP,
          "The CUDA backend computes bf16 or fp16; the plan's dtype is %s (FMPlanSetShape, -fm_plan_dtype; or -fm_backend cpu)",
          FMDTypeName(plan->dtype));
  return FM_SUCCESS;
}

/* FMPlanCheckDeviceArgs_Private - see planimpl.h. */
FMErrorCode FMPlanCheckDeviceArgs_Private(FMPlan plan, int n, const void *const *ptr, const char *const *name)
{
  if (plan->backend != FM_BACKEND_CUDA) return FM_SUCCESS;
#if FM_HAVE_CUDA
  for (int i = 0; i < n; i++)
    FMCheck(!ptr[i] || FMCudaIsDevicePointer(ptr[i]), MPI_COMM_SELF, FM_ERR_ARG_WRONG,
            "Argument %d (%s) is host memory, but the plan runs on the CUDA backend; pass device memory "
            "(cudaMalloc) or choose the CPU backend (-fm_backend cpu)", i + 2, name[i]);
  return FM_SUCCESS;
#else
  (void)n; (void)ptr; (void)name;
  FMRaise(MPI_COMM_SELF, FM_ERR_SUP, "This build has no CUDA support");
#endif
}

#if FM_HAVE_CUDA
/* A host copy of n bytes of device memory d (NULL d: an uninitialized output buffer). */
static FMErrorCode stage_in(void **h, const void *d, size_t bytes, void *stream)
{
  *h = NULL;
  FMCall(FMMalloc(bytes + 1, (char **)h));
  if (d && bytes) FMCall(FMCudaMemcpyD2H(*h, d, bytes, stream));
  return FM_SUCCESS;
}
#endif

/* FMPlanBackwardStaged_Private - see planimpl.h. */
FMErrorCode FMPlanBackwardStaged_Private(FMPlan plan, int nkeys, FMPlanHostBackward host, const void *q, const void *k, const void *v,
                                         const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv)
{
#if FM_HAVE_CUDA
  size_t es = FMDTypeSize(plan->dtype);
  size_t nqe = (size_t)plan->batch * plan->nlocal * plan->heads_q * plan->head_dim * es;
  size_t nke = (size_t)plan->batch * nkeys * plan->heads_kv * plan->head_dim * es;
  size_t nl = (size_t)plan->batch * plan->heads_q * plan->nlocal * sizeof(float);
  const void *src[9] = {q, k, v, o, lse, dout, NULL, NULL, NULL};
  size_t bytes[9] = {nqe, nke, nke, nqe, nl, nqe, nqe, nke, nke};
  void *h[9] = {NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL};
  FMErrorCode ierr = FM_SUCCESS;
  for (int i = 0; i < 9 && !ierr; i++) ierr = stage_in(&h[i], src[i], bytes[i], plan->stream);
  FMAgreeGoto(plan->hdr.comm);
  FMCallGoto((*host)(plan, h[0], h[1], h[2], h[3], (const float *)h[4], h[5], h[6], h[7], h[8]));
  if (nqe) FMCallGoto(FMCudaMemcpyH2D(dq, h[6], nqe, plan->stream));
  if (nke) FMCallGoto(FMCudaMemcpyH2D(dk, h[7], nke, plan->stream));
  if (nke) FMCallGoto(FMCudaMemcpyH2D(dv, h[8], nke, plan->stream));
cleanup:
  for (int i = 0; i < 9; i++) free(h[i]);
  return ierr;
#else
  (void)nkeys; (void)host; (void)q; (void)k; (void)v; (void)o; (void)lse; (void)dout; (void)dq; (void)dk; (void)dv;
  FMRaise(plan->hdr.comm, FM_ERR_SUP, "This build has no CUDA support");
#endif
}
