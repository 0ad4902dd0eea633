/*
 * backend.c - what the plan types (local.c, cp/) share about the backends: the problem as the
 * kernels see it (FMPlanGetProblem_Private), the CUDA backend's dtype rule and device-pointer
 * check. Calls nothing in plan.c or the types.
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
  /* the CUDA backend reads no host summaries (its prepass builds its own on the device): on one
     rank, where SetUp leaves them to the first reader, they are then never computed */
  if (plan->backend == FM_BACKEND_CUDA) FMCall(FMMaskGetBoundsDesc_Private(plan->mask, &p->mask));
  else FMCall(FMMaskGetDesc_Private(plan->mask, &p->mask));
  p->nq = p->mask.seqlen_q; p->qrows = NULL;
  p->k0 = 0; p->nk = p->mask.seqlen_k;
  p->nthreads = plan->ctx->threads;
  FMPlanKernelOptions_Private(plan, &p->opts);
  return FM_SUCCESS;
}

/* FMPlanKernelOptions_Private - see planimpl.h. */
void FMPlanKernelOptions_Private(FMPlan plan, FMKernelOptions *o)
{
  *o = plan->ctx->kopts;
  o->deterministic = plan->deterministic; /* the plan's (FMPlanSetDeterministic), not the context's */
  o->sm90_schedule = plan->fwd_sched.schedule; /* auto resolved at FMPlanSetUp */
  o->sm90_bwd_rows = plan->bwd_rows.rows;      /* -fm_sm90_bwd_rows, or auto's choice */
}

/* FMSm90ChooseSchedule_Private - see planimpl.h. */
FMErrorCode FMSm90ChooseSchedule_Private(FMMask mask, FMBackend backend, int head_dim, int gpu_sm, const FMKernelOptions *o,
                                         FMSm90Choice *c)
{
  FMSm90Choice r = {o->sm90_schedule, o->sm90_schedule, -1, 0, FMSm90AutoKeys(o), 0};
  if (o->sm90_schedule == FM_GPU_SCHED_AUTO) {
    r.schedule = FM_GPU_SCHED_GRID;
    if (backend == FM_BACKEND_CUDA && gpu_sm == 90 && (head_dim == 64 || head_dim == 128)) {
      if (head_dim == 128) {
        FMMaskDesc d;
        FMCall(FMMaskGetBoundsDesc_Private(mask, &d));
        r.wide_full = d.present == 0 && !d.causal; /* the grid's wide kernel, at any length */
      }
      if (!r.wide_full) {
        FMCall(FMMaskTileKeys_Private(mask, FM_GPU_TILE_M, &r.tile_keys, &r.tile_cv));
        if (r.tile_keys <= r.auto_keys)
          r.schedule = r.tile_cv <= FM_GPU_SCHED_AUTO_CV && r.tile_keys <= FM_GPU_SCHED_STATIC_KEYS ? FM_GPU_SCHED_STATIC : FM_GPU_SCHED_DYNAMIC;
      }
    }
  }
  *c = r;
  return FM_SUCCESS;
}


/* FMSm90ChooseBwdRows_Private - see planimpl.h. */
FMErrorCode FMSm90ChooseBwdRows_Private(FMMask mask, FMBackend backend, int head_dim, int gpu_sm, const FMKernelOptions *o,
                                        FMBwdRowsChoice *c)
{
  FMBwdRowsChoice r = {o->sm90_bwd_rows, -1};
  if (!r.rows && backend == FM_BACKEND_CUDA && gpu_sm == 90 && (head_dim == 128 || head_dim == 64)) {
    const int big = FMBwdRowsLarger(head_dim);
    FMMaskDesc d;
    FMCall(FMMaskGetBoundsDesc_Private(mask, &d));
    if (d.present) {
      double r64, rbig;
      FMCall(FMMaskVisitedRows_Private(mask, 64, &r64));
      FMCall(FMMaskVisitedRows_Private(mask, big, &rbig));
      r.extra = r64 > 0 ? rbig / r64 - 1 : 0;
      if (r64 > 0 && r.extra <= FMBwdRowsExtra(head_dim)) r.rows = big;
    }
  }
  *c = r;
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

