/*
 * plan.c - FMPlan: an attention problem (shape, dtype, scale, mask) bound to a context.
 * This file keeps what every plan type shares: the setters, argument and call-order checks,
 * logging, and the dispatch through plan->ops to the type ("local": local.c; "cp", context
 * parallel: src/plan/cp), chosen by FMPlanSetType or by size as PETSc's VECSTANDARD.
 */
#include <flashmask/private/planimpl.h>
#include <flashmask/private/fmkernels.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>


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

/*
 * The element counts of the plan's tensors in 64 bits, against what a backend addresses:
 * batch x heads x seqlen x head_dim elements of the dtype (and the fp32 LSE, batch x heads_q x
 * seqlen_q) in at most FM_PLAN_MAX_BYTES bytes each. seqlen_q/seqlen_k < 0: not known yet (only
 * the per-row products are checked). Not collective.
 */
#define FM_PLAN_MAX_BYTES ((long long)1 << 47) /* 128 TiB: below size_t, ptrdiff_t and the TMA descriptor's 2^40 x 2^7 */
static FMErrorCode check_sizes(int batch, int heads_q, int heads_kv, int head_dim, FMDType dtype, int seqlen_q, int seqlen_k)
{
  const long long es = (long long)FMDTypeSize(dtype), lim = FM_PLAN_MAX_BYTES;
  const struct { const char *what; int heads, S, d; long long es; } t[] = {
    {"Q, O, dO and dQ (batch x heads_q x seqlen_q x head_dim)", heads_q, seqlen_q, head_dim, es},
    {"K, V, dK and dV (batch x heads_kv x seqlen_k x head_dim)", heads_kv, seqlen_k, head_dim, es},
    {"the LSE (batch x heads_q x seqlen_q, fp32)", heads_q, seqlen_q, 1, 4}};
  for (int i = 0; i < 3; i++) {
    long long b1 = (long long)batch * t[i].heads, row; /* < 2^62: no overflow; the rest is checked by division first */
    FMCheck(b1 <= lim / t[i].d / t[i].es, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
            "The shape is too large: %s needs %lld x %d x %lld bytes per position, more than the %lld bytes a tensor may have", t[i].what,
            b1, t[i].d, t[i].es, lim);
    row = b1 * t[i].d * t[i].es;
    if (t[i].S >= 0)
      FMCheck(t[i].S == 0 || row <= lim / t[i].S, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
              "The shape is too large: %s has %lld x %d bytes, more than the %lld bytes a tensor may have", t[i].what, row, t[i].S, lim);
  }
  return FM_SUCCESS;
}

FMErrorCode FMPlanSetShape(FMPlan plan, int batch, int heads_q, int heads_kv, int head_dim, FMDType dtype)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  plan->shape_set = 0; /* until this call succeeds: FMPlanSetUp refuses the plan */
  plan->hdr.setupcalled = 0;
  FMCheck(batch >= 1, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE, "Argument 2 (batch) is %d; expected >= 1", batch);
  FMCheck(heads_q >= 1, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE, "Argument 3 (heads_q) is %d; expected >= 1", heads_q);
  FMCheck(heads_kv >= 1, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE, "Argument 4 (heads_kv) is %d; expected >= 1", heads_kv);
  FMCheck(heads_q % heads_kv == 0, plan->hdr.comm, FM_ERR_ARG_INCOMP,
          "Argument 3 (heads_q = %d) is not a multiple of argument 4 (heads_kv = %d), as GQA requires", heads_q, heads_kv);
  FMCheck(head_dim >= 8 && head_dim % 8 == 0, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE,
          "Argument 5 (head_dim) is %d; expected a positive multiple of 8", head_dim);
  FMCheck(dtype == FM_DTYPE_BF16 || dtype == FM_DTYPE_FP16 || dtype == FM_DTYPE_FP32, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE,
          "Argument 6 (dtype) is %d; expected FM_DTYPE_BF16, FM_DTYPE_FP16 or FM_DTYPE_FP32", (int)dtype);
  {
    const int known = plan->mask && plan->mask->hdr.setupcalled;
    FMCall(check_sizes(batch, heads_q, heads_kv, head_dim, dtype, known ? plan->mask->seqlen_q : -1, known ? plan->mask->seqlen_k : -1));
  }
  plan->batch = batch; plan->heads_q = heads_q; plan->heads_kv = heads_kv; plan->head_dim = head_dim; plan->dtype = dtype;
  plan->shape_set = 1;
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

FMErrorCode FMPlanGetScale(FMPlan plan, double *scale)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(scale, 2);
  *scale = plan->scale_set ? plan->scale : 1.0 / sqrt((double)plan->head_dim);
  return FM_SUCCESS;
}

/* The plan's on/off switches: set (argument 2, named name, FM_FALSE or FM_TRUE) and get. */
static FMErrorCode set_switch(FMPlan plan, FMBool v, const char *name, size_t field)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCheck(v == FM_FALSE || v == FM_TRUE, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE, "Argument 2 (%s) is %d; expected FM_FALSE or FM_TRUE",
          name, (int)v);
  *(int *)((char *)plan + field) = v == FM_TRUE;
  return FM_SUCCESS;
}
static FMErrorCode get_switch(FMPlan plan, FMBool *v, size_t field)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(v, 2);
  *v = *(const int *)((const char *)plan + field) ? FM_TRUE : FM_FALSE;
  return FM_SUCCESS;
}

/* FMPlanSetCheckFinite - see flashmask.h. */
FMErrorCode FMPlanSetCheckFinite(FMPlan plan, FMBool check)
{
  FMCall(set_switch(plan, check, "check", offsetof(struct _p_FMPlan, check_finite)));
  return FM_SUCCESS;
}

/* FMPlanGetCheckFinite - see flashmask.h. */
FMErrorCode FMPlanGetCheckFinite(FMPlan plan, FMBool *check)
{
  FMCall(get_switch(plan, check, offsetof(struct _p_FMPlan, check_finite)));
  return FM_SUCCESS;
}

/* FMPlanSetDeterministic - see flashmask.h. */
FMErrorCode FMPlanSetDeterministic(FMPlan plan, FMBool flag)
{
  FMCall(set_switch(plan, flag, "flag", offsetof(struct _p_FMPlan, deterministic)));
  return FM_SUCCESS;
}

/* FMPlanGetDeterministic - see flashmask.h. */
FMErrorCode FMPlanGetDeterministic(FMPlan plan, FMBool *flag)
{
  FMCall(get_switch(plan, flag, offsetof(struct _p_FMPlan, deterministic)));
  return FM_SUCCESS;
}

FMErrorCode FMPlanSetStream(FMPlan plan, void *cuda_stream)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  plan->stream = cuda_stream;
  return FM_SUCCESS;
}

/* ---------------- types ---------------- */
static const struct {
  const char *name;
  FMErrorCode (*create)(FMPlan);
} plan_types[] = {{FMPLANLOCAL, FMPlanCreate_Local}, {FMPLANCP, FMPlanCreate_CP}};
#define NTYPES ((int)(sizeof(plan_types) / sizeof(plan_types[0])))
static const char *const type_names[] = {FMPLANLOCAL, FMPLANCP, NULL};

/* FMPlanSetType - see flashmask.h. */
FMErrorCode FMPlanSetType(FMPlan plan, FMPlanType type)
{
  int t = 0;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(type, 2);
  while (t < NTYPES && strcmp(type, plan_types[t].name)) t++;
  FMCheck(t < NTYPES, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE, "Argument 2 (type) is \"%s\"; expected \"%s\" or \"%s\"", type, FMPLANLOCAL,
          FMPLANCP);
  FMCheck(strcmp(type, FMPLANLOCAL) || plan->ctx->size == 1, plan->hdr.comm, FM_ERR_ARG_INCOMP,
          "Argument 2 (type) is \"%s\", but the plan's communicator has %d ranks; \"%s\" runs on one rank only (use \"%s\")", type,
          plan->ctx->size, FMPLANLOCAL, FMPLANCP);
  if (plan->hdr.type_name && !strcmp(plan->hdr.type_name, type)) return FM_SUCCESS;
  if (plan->ops && plan->ops->destroy) FMCall((*plan->ops->destroy)(plan));
  plan->ops = NULL;
  free(plan->hdr.type_name);
  plan->hdr.type_name = NULL;
  plan->hdr.setupcalled = 0;
  FMCall(FMStrdup(type, &plan->hdr.type_name));
  FMCall((*plan_types[t].create)(plan));
  return FM_SUCCESS;
}

/* FMPlanGetType - see flashmask.h. */
FMErrorCode FMPlanGetType(FMPlan plan, FMPlanType *type)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(type, 2);
  *type = plan->hdr.type_name;
  return FM_SUCCESS;
}

/* FMPlanSetDefaultType_Private - see planimpl.h. */
FMErrorCode FMPlanSetDefaultType_Private(FMPlan plan)
{
  if (!plan->ops) FMCall(FMPlanSetType(plan, plan->ctx->size > 1 ? FMPLANCP : FMPLANLOCAL));
  return FM_SUCCESS;
}

static FMErrorCode setfromoptions(void *obj)
{
  FMPlan plan = (FMPlan)obj;
  int b, hq, hkv, d, dt, t;
  double scale;
  FMBool set = FM_FALSE;
  b = plan->batch; hq = plan->heads_q; hkv = plan->heads_kv; d = plan->head_dim; dt = (int)plan->dtype;
  FMBool sb = FM_FALSE, shq = FM_FALSE, shkv = FM_FALSE, sd = FM_FALSE, sdt = FM_FALSE;
  FMCall(FMOptionsGetInt("-fm_plan_batch", "batch size (FMPlanSetShape)", &b, &sb));
  FMCall(FMOptionsGetInt("-fm_plan_heads", "query heads (FMPlanSetShape)", &hq, &shq));
  FMCall(FMOptionsGetInt("-fm_plan_kv_heads", "key/value heads, divides the query heads (FMPlanSetShape)", &hkv, &shkv));
  FMCall(FMOptionsGetInt("-fm_plan_head_dim", "head dimension (FMPlanSetShape)", &d, &sd));
  FMCall(FMOptionsGetEnum_Private("-fm_plan_dtype", "element type (FMPlanSetShape)", FMDTypeNames, &dt, &sdt));
  /* the shape is set when it was (the options change it) or when an option gives part of it;
     otherwise it stays unset and FMPlanSetUp asks for it (no silent default shape) */
  if (plan->shape_set || sb || shq || shkv || sd || sdt) FMCall(FMPlanSetShape(plan, b, hq, hkv, d, (FMDType)dt));
  scale = plan->scale_set ? plan->scale : 1.0 / sqrt((double)plan->head_dim);
  FMCall(FMOptionsGetReal("-fm_plan_scale", "softmax scale, default 1/sqrt(head_dim) (FMPlanSetScale)", &scale, &set));
  if (set) FMCall(FMPlanSetScale(plan, scale));
  t = plan->hdr.type_name && !strcmp(plan->hdr.type_name, FMPLANCP) ? 1 : (plan->hdr.type_name ? 0 : (plan->ctx->size > 1));
  {
    FMBool check = plan->check_finite ? FM_TRUE : FM_FALSE;
    FMCall(FMOptionsGetBool("-fm_check_finite", "Forward/Backward first check their inputs for NaN and Inf, a named error on every rank "
                            "(FMPlanSetCheckFinite)", &check, NULL));
    FMCall(FMPlanSetCheckFinite(plan, check));
  }
  {
    FMBool det = plan->deterministic ? FM_TRUE : FM_FALSE;
    FMCall(FMOptionsGetBool("-fm_deterministic", "the forward gives bitwise identical O, LSE and the backward dQ, dK, dV from run to run, "
                            "whatever the thread or message timing (FMPlanSetDeterministic)", &det, NULL));
    FMCall(FMPlanSetDeterministic(plan, det));
  }
  FMCall(FMOptionsGetEnum_Private("-fm_plan_type", "plan type: local (one rank) or cp (context parallel); default local on one rank, "
                                  "cp on several (FMPlanSetType)", type_names, &t, NULL));
  FMCall(FMPlanSetType(plan, type_names[t]));
  if (plan->ops->setfromoptions) FMCall((*plan->ops->setfromoptions)(plan));
  return FM_SUCCESS;
}

static FMErrorCode check_mask_heads(FMPlan plan)
{
  FMMask m = plan->mask;
  FMCheck(m->mask_heads == 1 || m->mask_heads == plan->heads_kv, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
          "The mask has %d heads; expected 1 or heads_kv = %d", m->mask_heads, plan->heads_kv);
  FMCheck(m->mask_batch == 1 || m->mask_batch == plan->batch, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
          "The mask has mask_batch %d (FMMaskSetBatch); expected 1 (shared by every sample) or the plan's batch %d", m->mask_batch,
          plan->batch);
  return FM_SUCCESS;
}

/* The calls FMPlanSetUp needs first, and the mask's heads (local; agreed by the caller). */
static FMErrorCode check_setup(FMPlan plan)
{
  FMCheck(plan->mask, MPI_COMM_SELF, FM_ERR_ORDER, "Must call FMPlanSetMask() before FMPlanSetUp()");
  FMCheck(plan->ctx->hdr.setupcalled, MPI_COMM_SELF, FM_ERR_ORDER, "Must call FMContextSetUp() before FMPlanSetUp()");
  FMCheck(plan->mask->hdr.setupcalled, MPI_COMM_SELF, FM_ERR_ORDER, "Must call FMMaskSetUp() before FMPlanSetUp()");
  FMCheck(plan->shape_set, MPI_COMM_SELF, FM_ERR_ORDER,
          "Must call FMPlanSetShape() (or FMPlanSetFromOptions() with -fm_plan_* shape options) before FMPlanSetUp(); the last call failed "
          "or none was made");
  FMCall(check_sizes(plan->batch, plan->heads_q, plan->heads_kv, plan->head_dim, plan->dtype, plan->mask->seqlen_q, plan->mask->seqlen_k));
  FMCall(check_mask_heads(plan));
  return FM_SUCCESS;
}

/* The scalars every rank must share in FMPlanSetUp, Forward and Backward; *n fields out (f: room for 14). */
static void shape_fields(FMPlan plan, double scale, FMAgreeField *f, int *n)
{
  const FMMask m = plan->mask;
  const int ok = m && m->hdr.setupcalled;
  int size = 1;
  MPI_Comm_size(plan->hdr.comm, &size); /* one rank: the fields are compared with nobody (FMPlanAgree_Private) */
  const FMAgreeField x[] = {{"batch", FM_AGREE_FIELD_INT, plan->batch, 0},
                            {"heads_q", FM_AGREE_FIELD_INT, plan->heads_q, 0},
                            {"heads_kv", FM_AGREE_FIELD_INT, plan->heads_kv, 0},
                            {"head_dim", FM_AGREE_FIELD_INT, plan->head_dim, 0},
                            {"dtype (FMDType)", FM_AGREE_FIELD_INT, (long long)plan->dtype, 0},
                            {"scale", FM_AGREE_FIELD_REAL, 0, scale},
                            {"seqlen_q (of the mask)", FM_AGREE_FIELD_INT, ok ? m->seqlen_q : -1, 0},
                            {"seqlen_k (of the mask)", FM_AGREE_FIELD_INT, ok ? m->seqlen_k : -1, 0},
                            {"mask_heads (of the mask)", FM_AGREE_FIELD_INT, ok ? m->mask_heads : -1, 0},
                            {"mask_batch (of the mask)", FM_AGREE_FIELD_INT, ok ? m->mask_batch : -1, 0},
                            {"the mask's hash (its bounds)", FM_AGREE_FIELD_HASH, ok && size > 1 ? (long long)FMMaskHash_Private(m) : 0, 0},
                            {"the backend (FMBackend)", FM_AGREE_FIELD_INT, (long long)plan->ctx->backend, 0},
                            {"check_finite (FMPlanSetCheckFinite, -fm_check_finite)", FM_AGREE_FIELD_INT, plan->check_finite, 0},
                            {"deterministic (FMPlanSetDeterministic, -fm_deterministic)", FM_AGREE_FIELD_INT, plan->deterministic, 0}};
  *n = (int)(sizeof(x) / sizeof(x[0]));
  memcpy(f, x, sizeof(x));
}

static FMErrorCode setup_plan(void *obj);

FMErrorCode FMPlanSetUp(FMPlan plan)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCall(FMLogTimed_Private("FMPlanSetUp", setup_plan, plan)); /* -fm_log_view: the planning's cost per call */
  return FM_SUCCESS;
}

/* What the backward's step rows were resolved for: the mask's type, sizes, causal flag and
   carried vectors, the plan's head dim, the backend and device, and -fm_sm90_bwd_rows. A re-SetUp
   with the same key (a training step's new mask of the same kind) keeps the choice: its estimate
   reads the block summaries, a pass over the bounds that the CUDA backend's set-up otherwise
   skips (random eviction at 32K, 32 mask heads: 0.7 ms, 1.2% of its forward, on an H100's host). */
static uint64_t bwd_rows_key(FMPlan plan)
{
  const FMMask m = plan->mask;
  const int k[10] = {m->seqlen_q, m->seqlen_k, m->mask_heads, m->mask_batch, m->causal, m->present, plan->head_dim,
                     (int)plan->ctx->backend, plan->ctx->gpu_sm, plan->ctx->kopts.sm90_bwd_rows};
  const char *t = m->hdr.type_name ? m->hdr.type_name : "";
  const uint64_t h = FMHash_Private(FMHash_Private(FM_HASH_INIT, k, sizeof(k)), t, strlen(t));
  return h ? h : 1;
}

static FMErrorCode setup_plan(void *obj)
{
  FMPlan plan = (FMPlan)obj;
  FMBool view = FM_FALSE;
  FMAgreeField f[FM_AGREE_MAX_FIELDS];
  FMSm90Choice sched;
  FMBwdRowsChoice bwd_rows = {0, -1};
  FMErrorCode ierr;
  int n = 0;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  ierr = check_setup(plan);
  /* the forward's schedule: deterministic on inputs the first agreement checks, and its error (an
     allocation) rides on that agreement, so a rank that fails here never leaves the others in
     the type's collective set-up */
  if (!ierr)
    ierr = FMSm90ChooseSchedule_Private(plan->mask, plan->ctx->backend, plan->head_dim, plan->ctx->gpu_sm, &plan->ctx->kopts, &sched);
  if (!ierr) { /* the backward's step rows, the same way; kept by a re-SetUp of the same kind */
    const uint64_t key = bwd_rows_key(plan);
    if (key == plan->bwd_rows_key) bwd_rows = plan->bwd_rows;
    else {
      ierr = FMSm90ChooseBwdRows_Private(plan->mask, plan->ctx->backend, plan->head_dim, plan->ctx->gpu_sm, &plan->ctx->kopts, &bwd_rows);
      plan->bwd_rows_key = ierr ? 0 : key;
    }
  }
  shape_fields(plan, plan->scale_set ? plan->scale : 1.0 / sqrt((double)plan->head_dim), f, &n);
  FMCall(FMPlanAgree_Private(plan, FM_CALL_PLAN_SETUP, ierr, n, f)); /* the first message: names what differs */
  FMAgree(plan->hdr.comm, FMPlanSetDefaultType_Private(plan));
  FMCall(FMAgreeSame(plan->hdr.comm, FMHash_Private(FM_HASH_INIT, plan->hdr.type_name, strlen(plan->hdr.type_name)), "the plan type"));
  if (!plan->scale_set) plan->scale = 1.0 / sqrt((double)plan->head_dim);
  plan->backend = plan->ctx->backend;
  plan->hdr.setupcalled = 0;
  plan->fwd_sched = sched;
  plan->bwd_rows = bwd_rows;
  FMCall((*plan->ops->setup)(plan)); /* collective; agrees internally */
  plan->mask_state = plan->mask->state;
  plan->hdr.setupcalled = 1;
  FMCall(FMOptionsPushPrefix_Private(plan->hdr.prefix));
  {
    FMErrorCode ierr = FMOptionsGetView_Private("-fm_plan_view", "print the plan at set-up (FMPlanView)", &view);
    FMCall(FMOptionsPopPrefix_Private());
    FMCall(ierr);
  }
  if (view) FMCall(FMPlanView(plan, stdout));
  return FM_SUCCESS;
}

/* The plan is set up and its mask has not changed since. */
/* FMPlanCheckCurrent_Private - see planimpl.h. */
FMErrorCode FMPlanCheckCurrent_Private(FMPlan plan, const char *fn)
{
  FMCheck(plan->hdr.setupcalled, MPI_COMM_SELF, FM_ERR_ORDER, "Must call FMPlanSetUp() before %s()", fn);
  FMCheck(plan->mask->hdr.setupcalled && plan->mask_state == plan->mask->state, MPI_COMM_SELF, FM_ERR_ORDER,
          "The mask changed after FMPlanSetUp(); call FMMaskSetUp() and FMPlanSetUp() again before %s()", fn);
  return FM_SUCCESS;
}

FMErrorCode FMPlanGetFlops(FMPlan plan, double *fwd_flops)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(fwd_flops, 2);
  FMCheckSetUp(plan, "FMPlan");
  FMCall(FMMaskComputeSparsity_Private(plan->mask));
  *fwd_flops = 4.0 * plan->batch * plan->heads_q * (double)plan->mask->seqlen_q * (double)plan->mask->seqlen_k * plan->head_dim *
               (1.0 - plan->mask->sparsity);
  return FM_SUCCESS;
}

/* The forward FLOPs a call credits to its -fm_log_view event: FMPlanGetFlops when the summary
   will be printed, else 0. The exact count reads the block summaries, a pass over a new mask's
   bounds that a training step need not pay (a 32K global sliding window on an H100 machine's host:
   0.10 of its 0.41 ms of new-mask set-up, 2026-12-06). */
static FMErrorCode plan_flops(FMPlan plan, double *flops)
{
  FMBool on;
  *flops = 0;
  FMCall(FMLogViewRequested_Private(&on));
  if (on) FMCall(FMPlanGetFlops(plan, flops));
  return FM_SUCCESS;
}

/*
 * Run-time checks of Forward/Backward, on every rank and agreed (FMAgree by the caller), so a
 * bad pointer on one rank never leaves the others waiting in a collective. NULL is accepted for
 * a tensor of which this rank holds no rows (or keys), and always where iskey[i] < 0 (lse of the
 * forward); on the CUDA backend every tensor must be device memory.
 */
static FMErrorCode check_run(FMPlan plan, const char *fn, int n, const void *const *ptr, const char *const *name,
                             const int *iskey)
{
  int nkeys;
  FMCall(FMPlanCheckCurrent_Private(plan, fn));
  FMCall((*plan->ops->getlocalkeys)(plan, &nkeys, NULL));
  for (int i = 0; i < n; i++)
    FMCheck(ptr[i] || iskey[i] < 0 || (iskey[i] ? nkeys == 0 : plan->nlocal == 0), MPI_COMM_SELF, FM_ERR_ARG_NULL,
            "Null pointer: argument %d (%s) of %s()", i + 2, name[i], fn);
  FMCall(FMPlanCheckDeviceArgs_Private(plan, n, ptr, name));
  return FM_SUCCESS;
}

/* Bytes this rank moved in its last forward (backward = 0) or backward (1), for the log: the
   type's count (a "cp" plan: K/V bytes sent), else the local tensors read and written (forward:
   Q, K, V, O and LSE; backward: those and dO, dQ, dK, dV). */
static FMErrorCode run_bytes(FMPlan plan, int backward, double *bytes)
{
  int nkeys = 0;
  double es = (double)FMDTypeSize(plan->dtype), qb, kb, lb;
  if (plan->ops->getbytes) return (*plan->ops->getbytes)(plan, bytes);
  FMCall((*plan->ops->getlocalkeys)(plan, &nkeys, NULL));
  qb = es * plan->batch * (double)plan->nlocal * plan->heads_q * plan->head_dim;
  kb = es * plan->batch * (double)nkeys * plan->heads_kv * plan->head_dim;
  lb = 4.0 * plan->batch * (double)plan->heads_q * plan->nlocal;
  *bytes = backward ? 4 * qb + 4 * kb + lb : 2 * qb + 2 * kb + lb;
  return FM_SUCCESS;
}

/*
 * With -fm_check_finite: scan the n local input tensors ptr[i] (iskey[i]: K-like, rows are this
 * rank's keys, else Q-like, this rank's query rows) for NaN and Inf before computing. Not
 * collective; the caller folds the outcome into the plan call's agreement. The first bad element
 * is named as "batch b, head h, row r, col c" with r the global row (query) or key position.
 */
static FMErrorCode check_finite(FMPlan plan, const char *fn, int n, const void *const *ptr, const char *const *name, const int *argno,
                                const int *iskey)
{
  int nkeys;
  const int *keys;
  FMCall((*plan->ops->getlocalkeys)(plan, &nkeys, &keys));
  for (int i = 0; i < n; i++) {
    const int rows = iskey[i] ? nkeys : plan->nlocal, H = iskey[i] ? plan->heads_kv : plan->heads_q, D = plan->head_dim;
    const size_t cnt = (size_t)plan->batch * rows * H * D;
    size_t at = cnt;
    if (!ptr[i] || cnt == 0) continue;
    if (plan->backend == FM_BACKEND_CUDA) {
#if FM_HAVE_CUDA
      FMCall(FMCudaFindNonFinite(ptr[i], cnt, plan->dtype, plan->stream, &at));
#endif
    } else FMCall(FMCPUFindNonFinite(ptr[i], cnt, plan->dtype, plan->ctx->threads, &at));
    if (at < cnt) {
      float x = 0;
      const int c = (int)(at % D), h = (int)(at / D % H), r = (int)(at / ((size_t)D * H) % rows), b = (int)(at / ((size_t)D * H * rows));
      const int g = iskey[i] ? (keys ? keys[r] : r) : (plan->rows ? plan->rows[r] : r);
      if (plan->backend == FM_BACKEND_CUDA) {
#if FM_HAVE_CUDA
        char e[4];
        FMCall(FMCudaMemcpyD2H(e, (const char *)ptr[i] + at * FMDTypeSize(plan->dtype), FMDTypeSize(plan->dtype), plan->stream));
        x = FMToFloat(e, 0, plan->dtype);
#endif
      } else x = FMToFloat(ptr[i], at, plan->dtype);
      FMRaise(MPI_COMM_SELF, FM_ERR_ARG_WRONG,
              "Argument %d (%s) of %s() holds a non-finite value (%s) at batch %d, head %d, %s %d, col %d (-fm_check_finite); expected finite "
              "inputs", argno[i], name[i], fn, isnan(x) ? "nan" : x > 0 ? "inf" : "-inf", b, h, iskey[i] ? "key" : "row", g, c);
    }
  }
  return FM_SUCCESS;
}


FMErrorCode FMPlanForward(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse)
{
  double flops = 0, bytes = 0;
  FMErrorCode ierr;
  FMAgreeField f[FM_AGREE_MAX_FIELDS];
  int n = 0;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  ierr = check_run(plan, "FMPlanForward", 5, (const void *[]){q, k, v, o, lse}, (const char *[]){"q", "k", "v", "o", "lse"},
                   (const int[]){0, 1, 1, 0, -1});
  shape_fields(plan, plan->scale, f, &n);
  FMCall(FMPlanAgree_Private(plan, FM_CALL_PLAN_FORWARD, ierr, n, f));
  if (plan->check_finite) /* agreed above */
    FMCall(FMAgreeFirstError(plan->hdr.comm, check_finite(plan, "FMPlanForward", 3, (const void *[]){q, k, v}, (const char *[]){"q", "k", "v"},
                                           (const int[]){2, 3, 4}, (const int[]){0, 1, 1})));
  FMCall(FMLogEventBegin(plan->ev_fwd));
  ierr = (*plan->ops->forward)(plan, q, k, v, o, lse);
  FMCall(plan_flops(plan, &flops));
  if (!ierr) FMCall(run_bytes(plan, 0, &bytes));
  FMCall(FMLogEventEnd(plan->ev_fwd, ierr ? 0 : flops / plan->ctx->size, bytes));
  FMCall(ierr);
  return FM_SUCCESS;
}

FMErrorCode FMPlanBackward(FMPlan plan, const void *q, const void *k, const void *v, const void *o, const float *lse,
                           const void *dout, void *dq, void *dk, void *dv)
{
  double flops = 0, bytes = 0;
  FMErrorCode ierr;
  FMAgreeField f[FM_AGREE_MAX_FIELDS];
  int n = 0;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  ierr = check_run(plan, "FMPlanBackward", 9, (const void *[]){q, k, v, o, lse, dout, dq, dk, dv},
                   (const char *[]){"q", "k", "v", "o", "lse", "dout", "dq", "dk", "dv"}, (const int[]){0, 1, 1, 0, 0, 0, 0, 1, 1});
  shape_fields(plan, plan->scale, f, &n);
  FMCall(FMPlanAgree_Private(plan, FM_CALL_PLAN_BACKWARD, ierr, n, f));
  if (plan->check_finite)
    FMCall(FMAgreeFirstError(plan->hdr.comm, check_finite(plan, "FMPlanBackward", 4, (const void *[]){q, k, v, dout},
                                           (const char *[]){"q", "k", "v", "dout"}, (const int[]){2, 3, 4, 7}, (const int[]){0, 1, 1, 0})));
  FMCall(FMLogEventBegin(plan->ev_bwd));
  ierr = (*plan->ops->backward)(plan, q, k, v, o, lse, dout, dq, dk, dv);
  FMCall(plan_flops(plan, &flops));
  if (!ierr) FMCall(run_bytes(plan, 1, &bytes));
  FMCall(FMLogEventEnd(plan->ev_bwd, ierr ? 0 : 2.5 * flops / plan->ctx->size, bytes));
  FMCall(ierr);
  return FM_SUCCESS;
}

#if FM_HAVE_CUDA
/* FMPlanView's word on the spread behind auto's persistent choice ("" when it took the grid). */
static const char *auto_spread_note(const FMSm90Choice *c)
{
  if (c->tile_keys > c->auto_keys) return "";
  if (c->tile_cv > FM_GPU_SCHED_AUTO_CV) return " (uneven)";
  if (c->tile_keys > FM_GPU_SCHED_STATIC_KEYS) return " (even, but more keys than the round robin takes)";
  return " (even)";
}
#endif

FMErrorCode FMPlanView(FMPlan plan, FILE *fp)
{
  double flops;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  /* the local checks as Forward's (a rank whose mask changed since FMPlanSetUp would fail alone
     further on), agreed; ranks in another call: an error, not a hang */
  FMCall(FMPlanAgree_Private(plan, FM_CALL_PLAN_VIEW, FMPlanCheckCurrent_Private(plan, "FMPlanView"), 0, NULL));
  if (!fp) fp = stdout;
  FMCall(FMPlanGetFlops(plan, &flops));
  FMCall(FMMaskComputeDensity_Private(plan->mask)); /* the element density printed below */
  FMCall(FMPrintf(plan->hdr.comm, fp, "FMPlan: type %s, batch %d, heads %d (kv %d), head_dim %d, %s, scale %g, backend %s\n",
                  plan->hdr.type_name, plan->batch, plan->heads_q, plan->heads_kv, plan->head_dim, FMDTypeName(plan->dtype), plan->scale,
                  FMBackendName(plan->backend)));
  FMCall(FMPrintf(plan->hdr.comm, fp, "  mask %s: seqlen_q %d, seqlen_k %d, mask heads %d, block sparsity %.4f, element density %.4f\n",
                  plan->mask->hdr.type_name ? plan->mask->hdr.type_name : "?", plan->mask->seqlen_q, plan->mask->seqlen_k,
                  plan->mask->mask_heads, plan->mask->sparsity, plan->mask->density));
  FMCall(FMPrintf(plan->hdr.comm, fp, "  forward %.4g GFLOP (FlashMask convention), backward %.4g GFLOP\n", flops * 1e-9, 2.5 * flops * 1e-9));
  {
    int full = 0, update = 0;
    FMCall(FMPlanGetSetUpCounts_Private(plan, &full, &update));
    FMCall(FMPrintf(plan->hdr.comm, fp, "  set-ups: %d full, %d update%s (a re-SetUp with the same shape and options updates); check finite inputs: %s\n",
                    full, update, update == 1 ? "" : "s", plan->check_finite ? "on" : "off"));
    FMCall(FMPrintf(plan->hdr.comm, fp, "  deterministic forward and backward: %s\n", plan->deterministic ? "on" : "off"));
  }
  if (plan->backend == FM_BACKEND_CUDA) {
#if FM_HAVE_CUDA
    FMAttnProblem p;
    FMCall(FMPlanGetProblem_Private(plan, &p));
    FMCall(FMPrintf(plan->hdr.comm, fp, "  forward path: %s; backward path: %s%s\n", FMCudaForwardPathName(plan->ctx->gpu_sm),
                    FMCudaBackwardPathName(&p), strcmp(plan->hdr.type_name, FMPLANLOCAL) ? ", one piece per stage (context parallel)" : ""));
    {
      const FMSm90Choice *c = &plan->fwd_sched;
      char why[160] = "";
      if (c->tile_keys >= 0) /* auto: say why */
        snprintf(why, sizeof why, "; auto: a query tile sees %.0f keys on average, %s %d, spread %.2f%s", c->tile_keys,
                 c->tile_keys <= c->auto_keys ? "at most" : "more than", c->auto_keys, c->tile_cv, auto_spread_note(c));
      else if (c->requested == FM_GPU_SCHED_AUTO && c->wide_full)
        snprintf(why, sizeof why, "; auto: a full mask at d = 128 takes the wide kernel's 176-key tiles at any length");
      else if (c->requested == FM_GPU_SCHED_AUTO)
        snprintf(why, sizeof why, "; auto: the persistent kernel runs d = 64 and 128 on sm_90 only");
      if (p.opts.sm90_schedule == FM_GPU_SCHED_GRID)
        FMCall(FMPrintf(plan->hdr.comm, fp, "  forward schedule: one CTA per query tile (grid%s)\n", why));
      else
        FMCall(FMPrintf(plan->hdr.comm, fp, "  forward schedule: persistent, %s (d = 64 and 128 on sm_90; %s%s)\n",
                        p.opts.sm90_schedule == FM_GPU_SCHED_STATIC ? "static round robin" : "dynamic counter",
                        p.opts.sm90_ctas > 0 ? "at most -fm_sm90_ctas CTAs" : "one CTA per SM", why));
    }
    {
      const FMBwdRowsChoice *c = &plan->bwd_rows; /* as resolved at set-up (the context's option may have changed since) */
      if (c->extra < 0 && c->rows)
        FMCall(FMPrintf(plan->hdr.comm, fp, "  backward steps: -fm_sm90_bwd_rows %d\n", c->rows));
      else if (c->extra >= 0)
        FMCall(FMPrintf(plan->hdr.comm, fp,
                        "  backward steps: %d rows: the walks visit %.2f%% more query rows at %d-row steps than at 64 (auto takes %d where at "
                        "most %.1f%%; estimated at the first set-up of this mask kind and shape)\n",
                        c->rows ? c->rows : 64, 100 * c->extra, FMBwdRowsLarger(plan->head_dim), FMBwdRowsLarger(plan->head_dim),
                        100 * FMBwdRowsExtra(plan->head_dim)));
    }
#endif
  } else FMCall(FMPrintf(plan->hdr.comm, fp, "  forward/backward path: exact CPU (OpenMP, tile skipping)\n"));
  FMCall((*plan->ops->view)(plan, fp));
  return FM_SUCCESS;
}

FMErrorCode FMPlanDestroy(FMPlan *plan)
{
  FMPlan p;
  FMHeaderRelease(plan, FM_CLASSID_PLAN, p);
  if (p->ops && p->ops->destroy) FMCall((*p->ops->destroy)(p));
  FMCall(FMMaskDestroy(&p->mask));
  FMCall(FMContextDestroy(&p->ctx));
  free(p->rows);
  FMHeaderDestroy(p);
  free(p);
  return FM_SUCCESS;
}

/* FMPlanSetFromOptions - see flashmask.h: the lookups above, under the object's options prefix
   (FMHeaderSetFromOptions agrees on the outcome, so a refused option, such as -fm_plan_type
   local on several ranks, fails on every rank). */
FMErrorCode FMPlanSetFromOptions(FMPlan plan)
{
  FMCall(FMHeaderSetFromOptions(plan, FM_CLASSID_PLAN, setfromoptions));
  return FM_SUCCESS;
}

/* FMPlanSetOptionsPrefix - see flashmask.h. */
FMErrorCode FMPlanSetOptionsPrefix(FMPlan plan, const char *prefix)
{
  FMCall(FMHeaderSetOptionsPrefix(plan, FM_CLASSID_PLAN, prefix));
  return FM_SUCCESS;
}

/* FMPlanGetOptionsPrefix - see flashmask.h. */
FMErrorCode FMPlanGetOptionsPrefix(FMPlan plan, const char **prefix)
{
  FMCall(FMHeaderGetOptionsPrefix(plan, FM_CLASSID_PLAN, prefix));
  return FM_SUCCESS;
}
