/*
 * plan.c - FMPlan: an attention problem (shape, dtype, scale, mask) bound to a context,
 * ready to run on the chosen backend. On one rank it calls the backend directly; on
 * several ranks it hands over to the context-parallel planner (src/plan/dist).
 */
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const dtype_names[] = {"bf16", "fp16", "fp32", NULL};

FMErrorCode FMPlanCreate(FMContext ctx, FMPlan *plan)
{
  FMPlan p;
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMValidPointer(plan, 2);
  *plan = NULL;
  FMLogEvent ev_fwd, ev_bwd;
  FMCall(FMLogEventRegister("FMPlanForward", &ev_fwd));
  FMCall(FMLogEventRegister("FMPlanBackward", &ev_bwd));
  FMCall(FMCalloc(1, &p));
  p->ev_fwd = ev_fwd;
  p->ev_bwd = ev_bwd;
  FMHeaderCreate(p, FM_CLASSID_PLAN, "FMPlan", ctx->comm);
  p->ctx = ctx;
  ctx->hdr.refct++;
  p->batch = 1; p->heads_q = 1; p->heads_kv = 1; p->head_dim = 64;
  p->dtype = FM_DTYPE_FP32;
  *plan = p;
  return FM_SUCCESS;
}

FMErrorCode FMPlanSetMask(FMPlan plan, FMMask mask)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidHeader(mask, FM_CLASSID_MASK, 2);
  {
    int cmp;
    FMCallMPI(MPI_Comm_compare(plan->hdr.comm, mask->hdr.comm, &cmp));
    FMCheck(cmp == MPI_IDENT || cmp == MPI_CONGRUENT, plan->hdr.comm, FM_ERR_ARG_INCOMP,
            "Argument 2 (mask) lives on a communicator with other ranks than the plan's; create both on the same one");
  }
  mask->hdr.refct++;
  FMCall(FMMaskDestroy(&plan->mask));
  plan->mask = mask;
  plan->hdr.setupcalled = 0;
  return FM_SUCCESS;
}

FMErrorCode FMPlanSetShape(FMPlan plan, int batch, int heads_q, int heads_kv, int head_dim, FMDType dtype)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCheck(batch >= 1, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE, "Argument 2 (batch) is %d; expected >= 1", batch);
  FMCheck(heads_q >= 1, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE, "Argument 3 (heads_q) is %d; expected >= 1", heads_q);
  FMCheck(heads_kv >= 1, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE, "Argument 4 (heads_kv) is %d; expected >= 1", heads_kv);
  FMCheck(heads_q % heads_kv == 0, plan->hdr.comm, FM_ERR_ARG_INCOMP,
          "Argument 3 (heads_q = %d) is not a multiple of argument 4 (heads_kv = %d), as GQA requires", heads_q, heads_kv);
  FMCheck(head_dim >= 8 && head_dim % 8 == 0, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE,
          "Argument 5 (head_dim) is %d; expected a positive multiple of 8", head_dim);
  FMCheck(dtype == FM_DTYPE_BF16 || dtype == FM_DTYPE_FP16 || dtype == FM_DTYPE_FP32, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE,
          "Argument 6 (dtype) is %d; expected FM_DTYPE_BF16, FM_DTYPE_FP16 or FM_DTYPE_FP32", (int)dtype);
  plan->batch = batch; plan->heads_q = heads_q; plan->heads_kv = heads_kv; plan->head_dim = head_dim; plan->dtype = dtype;
  plan->hdr.setupcalled = 0;
  return FM_SUCCESS;
}

FMErrorCode FMPlanGetShape(FMPlan plan, int *batch, int *heads_q, int *heads_kv, int *head_dim, FMDType *dtype)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  if (batch) *batch = plan->batch;
  if (heads_q) *heads_q = plan->heads_q;
  if (heads_kv) *heads_kv = plan->heads_kv;
  if (head_dim) *head_dim = plan->head_dim;
  if (dtype) *dtype = plan->dtype;
  return FM_SUCCESS;
}

FMErrorCode FMPlanSetScale(FMPlan plan, double scale)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCheck(isfinite(scale) && scale > 0, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE, "Argument 2 (scale) is %g; expected a finite value > 0", scale);
  plan->scale = scale;
  plan->scale_set = 1;
  return FM_SUCCESS;
}

FMErrorCode FMPlanSetStream(FMPlan plan, void *cuda_stream)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  plan->stream = cuda_stream;
  return FM_SUCCESS;
}

static FMErrorCode setfromoptions(FMPlan plan)
{
  int b, hq, hkv, d, dt;
  double scale;
  FMBool set = FM_FALSE;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  b = plan->batch; hq = plan->heads_q; hkv = plan->heads_kv; d = plan->head_dim; dt = (int)plan->dtype;
  FMCall(FMOptionsGetInt("-fm_plan_batch", "batch size (FMPlanSetShape)", &b, NULL));
  FMCall(FMOptionsGetInt("-fm_plan_heads", "query heads (FMPlanSetShape)", &hq, NULL));
  FMCall(FMOptionsGetInt("-fm_plan_kv_heads", "key/value heads, divides the query heads (FMPlanSetShape)", &hkv, NULL));
  FMCall(FMOptionsGetInt("-fm_plan_head_dim", "head dimension (FMPlanSetShape)", &d, NULL));
  FMCall(FMOptionsGetEnum_Private("-fm_plan_dtype", "element type (FMPlanSetShape)", dtype_names, &dt, NULL));
  FMCall(FMPlanSetShape(plan, b, hq, hkv, d, (FMDType)dt));
  scale = plan->scale_set ? plan->scale : 1.0 / sqrt((double)plan->head_dim);
  FMCall(FMOptionsGetReal("-fm_plan_scale", "softmax scale, default 1/sqrt(head_dim) (FMPlanSetScale)", &scale, &set));
  if (set) FMCall(FMPlanSetScale(plan, scale));
  return FM_SUCCESS;
}

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
  p->nthreads = plan->ctx->nthreads;
  p->opts = plan->ctx->kopts;
  return FM_SUCCESS;
}

static FMErrorCode setup_local(FMPlan plan)
{
  FMMask m = plan->mask;
  FMCheck(m->mask_heads == 1 || m->mask_heads == plan->heads_kv, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
          "The mask has %d heads; expected 1 or heads_kv = %d", m->mask_heads, plan->heads_kv);
  if (plan->backend == FM_BACKEND_CUDA) {
#if FM_HAVE_CUDA
    FMAttnProblem p;
    if (plan->gpu) { FMCall(FMCudaMaskFree(plan->gpu)); plan->gpu = NULL; }
    if (plan->ctx->size == 1) { /* over several ranks the distributed plan uploads localized masks */
      FMCall(FMPlanGetProblem_Private(plan, &p));
      FMCall(FMCudaMaskUpload(&p.mask, &plan->gpu));
    }
#endif
  }
  return FM_SUCCESS;
}

FMErrorCode FMPlanSetUp(FMPlan plan)
{
  FMBool view = FM_FALSE;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCheck(plan->mask, plan->hdr.comm, FM_ERR_ORDER, "Must call FMPlanSetMask() before FMPlanSetUp()");
  FMCheck(plan->ctx->hdr.setupcalled, plan->hdr.comm, FM_ERR_ORDER, "Must call FMContextSetUp() before FMPlanSetUp()");
  FMCheck(plan->mask->hdr.setupcalled, plan->hdr.comm, FM_ERR_ORDER, "Must call FMMaskSetUp() before FMPlanSetUp()");
  if (!plan->scale_set) plan->scale = 1.0 / sqrt((double)plan->head_dim);
  plan->backend = plan->ctx->backend;
  FMAgree(plan->hdr.comm, setup_local(plan));
  if (plan->ctx->size > 1) {
    FMCall(FMPlanSetUp_Dist(plan));
  } else {
    if (plan->dist) FMCall(FMPlanDestroy_Dist(plan)); /* a layout built for an earlier set-up */
    free(plan->rows);
    plan->nlocal = plan->mask->seqlen_q;
    FMCall(FMMalloc(plan->nlocal, &plan->rows));
    for (int i = 0; i < plan->nlocal; i++) plan->rows[i] = i;
  }
  plan->mask_state = plan->mask->state;
  plan->hdr.setupcalled = 1;
  FMCall(FMOptionsGetView_Private("-fm_plan_view", "print the plan at set-up (FMPlanView)", &view));
  if (view) FMCall(FMPlanView(plan, stdout));
  return FM_SUCCESS;
}

FMErrorCode FMPlanGetLocalRows(FMPlan plan, int *nlocal, const int **global_rows)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(nlocal, 2);
  FMCheckSetUp(plan, "FMPlan");
  FMCheck(plan->mask->hdr.setupcalled && plan->mask_state == plan->mask->state, plan->hdr.comm, FM_ERR_ORDER,
          "The mask changed after FMPlanSetUp(); call FMMaskSetUp() and FMPlanSetUp() again");
  *nlocal = plan->nlocal;
  if (global_rows) *global_rows = plan->rows;
  return FM_SUCCESS;
}

FMErrorCode FMPlanGetFlops(FMPlan plan, double *fwd_flops)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(fwd_flops, 2);
  FMCheckSetUp(plan, "FMPlan");
  *fwd_flops = 4.0 * plan->batch * plan->heads_q * (double)plan->mask->seqlen_q * (double)plan->mask->seqlen_k * plan->head_dim *
               (1.0 - plan->mask->sparsity);
  return FM_SUCCESS;
}

#if FM_HAVE_CUDA
/* On the CUDA backend every tensor must be device memory: name the first one that is not. */
static FMErrorCode check_device_args(FMPlan plan, int n, const void *const *ptr, const char *const *name)
{
  for (int i = 0; i < n; i++)
    FMCheck(!ptr[i] || FMCudaIsDevicePointer(ptr[i]), MPI_COMM_SELF, FM_ERR_ARG_WRONG,
            "Argument %d (%s) is host memory, but the plan runs on the CUDA backend; pass device memory "
            "(cudaMalloc) or choose the CPU backend (-fm_backend cpu)", i + 2, name[i]);
  return FM_SUCCESS;
}

/* CPU fallback for a CUDA-backend call: stage device tensors through host memory. */
typedef struct { void *h; const void *d; size_t bytes; } FMStage;

static FMErrorCode stage_in(FMStage *s, const void *d, size_t bytes, void *stream)
{
  s->d = d; s->bytes = bytes; s->h = NULL;
  FMCall(FMMalloc(bytes + 1, (char **)&s->h));
  if (d) FMCall(FMCudaMemcpyD2H(s->h, d, bytes, stream));
  return FM_SUCCESS;
}
#endif

/*
 * Run-time checks of Forward/Backward, on every rank and agreed (FMAgree by the caller), so a
 * bad pointer on one rank never leaves the others waiting in a collective. NULL is accepted for
 * a tensor of which this rank holds no rows (or keys).
 */
static FMErrorCode check_run(FMPlan plan, const char *fn, int n, const void *const *ptr, const char *const *name,
                             const int *iskey)
{
  int nkeys;
  FMCheck(plan->hdr.setupcalled, MPI_COMM_SELF, FM_ERR_ORDER, "Must call FMPlanSetUp() before %s()", fn);
  FMCheck(plan->mask->hdr.setupcalled && plan->mask_state == plan->mask->state, MPI_COMM_SELF, FM_ERR_ORDER,
          "The mask changed after FMPlanSetUp(); call FMMaskSetUp() and FMPlanSetUp() again before %s()", fn);
  if (plan->ctx->size > 1) FMCall(FMPlanGetLocalKeys(plan, &nkeys, NULL));
  else nkeys = plan->mask->seqlen_k;
  for (int i = 0; i < n; i++)
    FMCheck(ptr[i] || (iskey[i] ? nkeys == 0 : plan->nlocal == 0), MPI_COMM_SELF, FM_ERR_ARG_NULL,
            "Null pointer: argument %d (%s) of %s()", i + 2, name[i], fn);
  return FM_SUCCESS;
}

/* Single-rank forward on the plan's backend. */
static FMErrorCode forward_local(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse)
{
  FMAttnProblem p;
  float *lse_tmp = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  FMCall(FMPlanGetProblem_Private(plan, &p));
  if (plan->backend == FM_BACKEND_CUDA) {
#if FM_HAVE_CUDA
    size_t nl = (size_t)p.batch * p.heads_q * p.nq;
    FMCall(check_device_args(plan, 5, (const void *[]){q, k, v, o, lse}, (const char *[]){"q", "k", "v", "o", "lse"}));
    if (!lse) FMCall(FMCudaMalloc(nl * sizeof(float), (void **)&lse_tmp));
    ierr = FMCudaForward(&p, plan->gpu, q, k, v, o, lse ? lse : lse_tmp, plan->stream);
    if (lse_tmp) FMCall(FMCudaFree(lse_tmp));
#else
    FMRaise(plan->hdr.comm, FM_ERR_SUP, "This build has no CUDA support");
#endif
  } else {
    if (!lse) FMCall(FMMalloc((size_t)p.batch * p.heads_q * p.nq, &lse_tmp));
    ierr = FMCPUForward(&p, q, k, v, o, plan->dtype, lse ? lse : lse_tmp);
    free(lse_tmp);
  }
  FMCall(ierr);
  return FM_SUCCESS;
}

FMErrorCode FMPlanForward(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse)
{
  double flops = 0;
  FMErrorCode ierr;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMAgree(plan->hdr.comm, check_run(plan, "FMPlanForward", 4, (const void *[]){q, k, v, o}, (const char *[]){"q", "k", "v", "o"},
                                    (const int[]){0, 1, 1, 0}));
#if FM_HAVE_CUDA
  if (plan->backend == FM_BACKEND_CUDA && plan->ctx->size > 1)
    FMAgree(plan->hdr.comm, check_device_args(plan, 5, (const void *[]){q, k, v, o, lse}, (const char *[]){"q", "k", "v", "o", "lse"}));
#endif
  FMCall(FMLogEventBegin(plan->ev_fwd));
  if (plan->ctx->size > 1) ierr = FMPlanForward_Dist(plan, q, k, v, o, lse);
  else ierr = forward_local(plan, q, k, v, o, lse);
  FMCall(FMPlanGetFlops(plan, &flops));
  FMCall(FMLogEventEnd(plan->ev_fwd, ierr ? 0 : flops / plan->ctx->size, 0));
  FMCall(ierr);
  return FM_SUCCESS;
}

/* Single-rank CPU backward: accumulate dQ in fp32, then convert. */
static FMErrorCode backward_cpu(FMPlan plan, const FMAttnProblem *p, const void *q, const void *k, const void *v, const void *o,
                                const float *lse, const void *dout, void *dq, void *dk, void *dv)
{
  size_t nq = (size_t)p->batch * p->nq * p->heads_q * p->head_dim;
  float *dq_acc;
  FMErrorCode ierr;
  FMCall(FMCalloc(nq, &dq_acc));
  ierr = FMCPUBackward(p, q, k, v, o, lse, dout, dq_acc, dk, dv, plan->dtype);
  if (!ierr)
    for (size_t i = 0; i < nq; i++) FMFromFloat(dq, i, plan->dtype, dq_acc[i]);
  free(dq_acc);
  FMCall(ierr);
  return FM_SUCCESS;
}

/*
 * Backward on the plan's backend. The CUDA backend has no backward kernel yet: its device
 * tensors are staged through host memory and the exact CPU backward runs on them (the
 * single-rank one, or the distributed one over every rank; collective then).
 */
static FMErrorCode backward_local(FMPlan plan, const void *q, const void *k, const void *v, const void *o, const float *lse,
                                  const void *dout, void *dq, void *dk, void *dv)
{
  FMAttnProblem p;
  FMCall(FMPlanGetProblem_Private(plan, &p));
  if (plan->backend == FM_BACKEND_CUDA) {
#if FM_HAVE_CUDA
    size_t es = FMDTypeSize(plan->dtype);
    int nkeys = p.nk;
    size_t nqe, nke, nl;
    const void *src[9] = {q, k, v, o, lse, dout, NULL, NULL, NULL};
    size_t bytes[9];
    FMStage s[9];
    FMErrorCode ierr = FM_SUCCESS;
    if (plan->ctx->size > 1) FMCall(FMPlanGetLocalKeys(plan, &nkeys, NULL));
    nqe = (size_t)p.batch * plan->nlocal * p.heads_q * p.head_dim * es;
    nke = (size_t)p.batch * nkeys * p.heads_kv * p.head_dim * es;
    nl = (size_t)p.batch * p.heads_q * plan->nlocal * sizeof(float);
    bytes[0] = nqe; bytes[1] = nke; bytes[2] = nke; bytes[3] = nqe; bytes[4] = nl; bytes[5] = nqe;
    bytes[6] = nqe; bytes[7] = nke; bytes[8] = nke;
    memset(s, 0, sizeof(s));
    ierr = check_device_args(plan, 9, (const void *[]){q, k, v, o, lse, dout, dq, dk, dv},
                             (const char *[]){"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"});
    for (int i = 0; i < 9 && !ierr; i++) ierr = stage_in(&s[i], src[i], bytes[i], plan->stream);
    if (plan->ctx->size > 1) {
      ierr = FMAgree_Private(plan->hdr.comm, ierr, __FILE__, __func__, __LINE__);
      if (!ierr)
        ierr = FMPlanBackward_Dist(plan, s[0].h, s[1].h, s[2].h, s[3].h, (const float *)s[4].h, s[5].h, s[6].h, s[7].h, s[8].h);
    } else if (!ierr) {
      ierr = backward_cpu(plan, &p, s[0].h, s[1].h, s[2].h, s[3].h, (const float *)s[4].h, s[5].h, s[6].h, s[7].h, s[8].h);
    }
    if (!ierr && nqe) ierr = FMCudaMemcpyH2D(dq, s[6].h, nqe, plan->stream);
    if (!ierr && nke) ierr = FMCudaMemcpyH2D(dk, s[7].h, nke, plan->stream);
    if (!ierr && nke) ierr = FMCudaMemcpyH2D(dv, s[8].h, nke, plan->stream);
    for (int i = 0; i < 9; i++) free(s[i].h);
    FMCall(ierr);
#else
    FMRaise(plan->hdr.comm, FM_ERR_SUP, "This build has no CUDA support");
#endif
  } else if (plan->ctx->size > 1) {
    FMCall(FMPlanBackward_Dist(plan, q, k, v, o, lse, dout, dq, dk, dv));
  } else {
    FMCall(backward_cpu(plan, &p, q, k, v, o, lse, dout, dq, dk, dv));
  }
  return FM_SUCCESS;
}

FMErrorCode FMPlanBackward(FMPlan plan, const void *q, const void *k, const void *v, const void *o, const float *lse,
                           const void *dout, void *dq, void *dk, void *dv)
{
  double flops = 0;
  FMErrorCode ierr;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMAgree(plan->hdr.comm,
          check_run(plan, "FMPlanBackward", 9, (const void *[]){q, k, v, o, lse, dout, dq, dk, dv},
                    (const char *[]){"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"}, (const int[]){0, 1, 1, 0, 0, 0, 0, 1, 1}));
  FMCall(FMLogEventBegin(plan->ev_bwd));
  ierr = backward_local(plan, q, k, v, o, lse, dout, dq, dk, dv);
  FMCall(FMPlanGetFlops(plan, &flops));
  FMCall(FMLogEventEnd(plan->ev_bwd, ierr ? 0 : 2.5 * flops / plan->ctx->size, 0));
  FMCall(ierr);
  return FM_SUCCESS;
}

FMErrorCode FMPlanView(FMPlan plan, FILE *fp)
{
  double flops;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCheckSetUp(plan, "FMPlan");
  if (!fp) fp = stdout;
  FMCall(FMPlanGetFlops(plan, &flops));
  FMCall(FMPrintf(plan->hdr.comm, fp, "FMPlan: batch %d, heads %d (kv %d), head_dim %d, %s, scale %g, backend %s\n", plan->batch,
                  plan->heads_q, plan->heads_kv, plan->head_dim, FMDTypeName(plan->dtype), plan->scale, FMBackendName(plan->backend)));
  FMCall(FMPrintf(plan->hdr.comm, fp, "  mask %s: seqlen_q %d, seqlen_k %d, mask heads %d, block sparsity %.4f, element density %.4f\n",
                  plan->mask->hdr.type_name ? plan->mask->hdr.type_name : "?", plan->mask->seqlen_q, plan->mask->seqlen_k,
                  plan->mask->mask_heads, plan->mask->sparsity, plan->mask->density));
  FMCall(FMPrintf(plan->hdr.comm, fp, "  forward %.4g GFLOP (FlashMask convention), backward %.4g GFLOP\n", flops * 1e-9, 2.5 * flops * 1e-9));
  if (plan->backend == FM_BACKEND_CUDA) {
#if FM_HAVE_CUDA
    FMCall(FMPrintf(plan->hdr.comm, fp, "  forward path: %s; backward path: exact CPU backward, staged through host memory\n",
                    FMCudaForwardPathName(plan->ctx->gpu_sm)));
#endif
  } else FMCall(FMPrintf(plan->hdr.comm, fp, "  forward/backward path: exact CPU (OpenMP, tile skipping)\n"));
  if (plan->ctx->size > 1) FMCall(FMPlanView_Dist(plan, fp));
  else FMCall(FMPrintf(plan->hdr.comm, fp, "  one rank: all %d query rows local\n", plan->nlocal));
  return FM_SUCCESS;
}

FMErrorCode FMPlanDestroy(FMPlan *plan)
{
  FMPlan p;
  FMHeaderRelease(plan, FM_CLASSID_PLAN, p);
  if (p->dist) FMCall(FMPlanDestroy_Dist(p));
#if FM_HAVE_CUDA
  if (p->gpu) FMCall(FMCudaMaskFree(p->gpu));
#endif
  FMCall(FMMaskDestroy(&p->mask));
  FMCall(FMContextDestroy(&p->ctx));
  free(p->rows);
  FMHeaderDestroy(p);
  free(p);
  return FM_SUCCESS;
}

/* FMPlanSetFromOptions - see flashmask.h: the lookups above, under the object's options prefix. */
FMErrorCode FMPlanSetFromOptions(FMPlan plan)
{
  FMErrorCode ierr;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCall(FMOptionsPushPrefix_Private(plan->hdr.prefix));
  ierr = setfromoptions(plan);
  FMCall(FMOptionsPopPrefix_Private());
  FMCall(ierr);
  return FM_SUCCESS;
}

/* FMPlanSetOptionsPrefix - see flashmask.h. */
FMErrorCode FMPlanSetOptionsPrefix(FMPlan plan, const char *prefix)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCall(FMHeaderSetOptionsPrefix(plan, prefix));
  return FM_SUCCESS;
}

/* FMPlanGetOptionsPrefix - see flashmask.h. */
FMErrorCode FMPlanGetOptionsPrefix(FMPlan plan, const char **prefix)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(prefix, 2);
  *prefix = plan->hdr.prefix;
  return FM_SUCCESS;
}
