/*
 * stage.c - the CUDA backend's backward without a backward kernel: device tensors staged
 * through host memory around a host backward (FMPlanBackwardStaged_Private, planimpl.h).
 * Shared by the local and the context-parallel plan types.
 */
#include <flashmask/private/planimpl.h>
#include <flashmask/private/fmkernels.h>
#include <stdlib.h>
#include <string.h>

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
