/*
 * batch_cases.h - the per-sample mask checks (issue 11) shared by test_mask_batch (CPU backend)
 * and test_gpu_batch (CUDA backend): a float64 reference per sample from the mask's own
 * per-sample bounds (FMMaskGetSampleBounds), and the checks that run a plan through a runner
 * (host tensors in, host tensors out) given by the test. Header-only; include after fmtest.h.
 */
#ifndef BATCH_CASES_H
#define BATCH_CASES_H
#include "fmtest.h"

/* Runs forward then backward of a set-up plan on host tensors in[4] = q, k, v, dout (dtype);
   out[4] = o, dq, dk, dv (dtype), lse[nl] (float). n: element counts of q, k, v, dout (o and dq
   have n[0] elements, dk and dv n[1]). */
typedef void (*bc_run_fn)(FMPlan plan, FMDType dt, const size_t n[4], size_t nl, void *const in[4], void *const out[4], float *lse);

typedef struct {
  int B, Sq, Sk, Hq, Hkv, mh, D;
  FMDType dt;
  double tol_o, tol_g; /* relative 2-norm tolerances against the float64 reference */
  double dq_same;      /* 0: two runs on the same bounds give bitwise the same dQ; else the relative 2-norm
                          difference allowed (the Hopper backward adds dQ across CTAs in no fixed order) */
} BCShape;

typedef struct {
  FMMask m;
  int sample, Sq, Sk;
} BCRef;

/* Whether row i may not see key j in mask head mh of the reference's sample (read from the bounds). */
static int bc_masked(void *ctx, int mh, int i, int j)
{
  const BCRef *r = (const BCRef *)ctx;
  const int32_t *lts, *lte, *uts, *ute;
  FMBool causal;
  FMT_CALL(FMMaskGetSampleBounds(r->m, r->sample, mh, &lts, &lte, &uts, &ute, NULL, &causal));
  return (lts[j] <= i && i < lte[j]) || (uts[j] <= i && i < ute[j]) || (causal && j > i + r->Sk - r->Sq);
}

/* float64 reference: sample b of the batch against sample (mask_batch > 1 ? b : 0) of the mask. */
static void bc_reference(FMMask m, const BCShape *s, double *const x[4], double *o, double *lse, double *dq, double *dk, double *dv)
{
  const size_t sq = (size_t)s->Sq * s->Hq * s->D, sk = (size_t)s->Sk * s->Hkv * s->D, sl = (size_t)s->Hq * s->Sq;
  int mb;
  FMT_CALL(FMMaskGetBatch(m, &mb));
  for (int b = 0; b < s->B; b++) {
    BCRef r = {m, mb > 1 ? b : 0, s->Sq, s->Sk};
    fmt_ref_attention(1, s->Hq, s->Hkv, s->D, s->Sq, s->Sk, s->mh, 1.0 / sqrt((double)s->D), bc_masked, &r, x[0] + b * sq, x[1] + b * sk,
                      x[2] + b * sk, o + b * sq, lse + b * sl, x[3] + b * sq, dq + b * sq, dk + b * sk, dv + b * sk);
  }
}

/* Inputs and outputs of one shape: host tensors in dtype, their float64 values, outputs. */
typedef struct {
  size_t n[4], no[4], nl; /* element counts of q, k, v, dout; of o, dq, dk, dv; of lse */
  void *in[4], *out[4];
  double *x[4];
  float *lse;
} BCData;

static void bc_data_init(BCData *d, const BCShape *s, uint64_t *seed)
{
  const size_t es = FMDTypeSize(s->dt);
  d->n[0] = d->n[3] = (size_t)s->B * s->Sq * s->Hq * s->D;
  d->n[1] = d->n[2] = (size_t)s->B * s->Sk * s->Hkv * s->D;
  d->nl = (size_t)s->B * s->Hq * s->Sq;
  d->no[0] = d->no[1] = d->n[0];
  d->no[2] = d->no[3] = d->n[1];
  for (int t = 0; t < 4; t++) {
    d->in[t] = malloc(d->n[t] * es);
    d->out[t] = malloc(d->no[t] * es);
    d->x[t] = malloc(d->n[t] * sizeof(double));
    for (size_t i = 0; i < d->n[t]; i++) {
      FMFromFloat(d->in[t], i, s->dt, (float)fmt_uniform(seed));
      d->x[t][i] = FMToFloat(d->in[t], i, s->dt);
    }
  }
  d->lse = malloc(d->nl * sizeof(float));
}

static void bc_data_free(BCData *d)
{
  for (int t = 0; t < 4; t++) free(d->in[t]), free(d->out[t]), free(d->x[t]);
  free(d->lse);
}

/* Forward and backward of a set-up plan on host tensors, the global inputs of d the same on every
   rank: scattered from rank 0 into NaN-poisoned local tensors, the outputs gathered there and
   broadcast, so every rank holds them in d. */
static inline void bc_run_host(FMPlan plan, const BCShape *s, BCData *d)
{
  const size_t es = FMDTypeSize(s->dt), uq = (size_t)s->Hq * s->D * es, uk = (size_t)s->Hkv * s->D * es;
  int nl, nk;
  const int *rows, *keys;
  char *l[8];
  float *lse;
  FMT_CALL(FMPlanGetLocalRows(plan, &nl, &rows));
  FMT_CALL(FMPlanGetLocalKeys(plan, &nk, &keys));
  for (int t = 0; t < 8; t++) {
    size_t n = (size_t)s->B * (t == 1 || t == 2 || t == 6 || t == 7 ? nk * uk : nl * uq);
    l[t] = malloc(n + 1);
    memset(l[t], 0xff, n + 1); /* NaN poison */
  }
  lse = malloc(sizeof(float) * ((size_t)s->B * s->Hq * nl + 1));
  /* l: q k v dout | o dq dk dv */
  FMT_CALL(FMPlanScatter(plan, FM_PLAN_TENSOR_Q, 0, d->in[0], l[0]));
  FMT_CALL(FMPlanScatter(plan, FM_PLAN_TENSOR_KV, 0, d->in[1], l[1]));
  FMT_CALL(FMPlanScatter(plan, FM_PLAN_TENSOR_KV, 0, d->in[2], l[2]));
  FMT_CALL(FMPlanScatter(plan, FM_PLAN_TENSOR_Q, 0, d->in[3], l[3]));
  FMT_CALL(FMPlanForward(plan, l[0], l[1], l[2], l[4], lse));
  FMT_CALL(FMPlanBackward(plan, l[0], l[1], l[2], l[4], lse, l[3], l[5], l[6], l[7]));
  for (int t = 0; t < 4; t++) {
    FMT_CALL(FMPlanGather(plan, t < 2 ? FM_PLAN_TENSOR_Q : FM_PLAN_TENSOR_KV, 0, l[4 + t], d->out[t]));
    MPI_Bcast(d->out[t], (int)(d->no[t] * es), MPI_BYTE, 0, MPI_COMM_WORLD);
  }
  FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_LSE, 0, lse, d->lse));
  MPI_Bcast(d->lse, (int)d->nl, MPI_FLOAT, 0, MPI_COMM_WORLD);
  for (int t = 0; t < 8; t++) free(l[t]);
  free(lse);
}

/* A plan of shape s on mask m, set up. */
static FMPlan bc_plan(FMContext ctx, FMMask m, const BCShape *s, int batch)
{
  FMPlan plan;
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetMask(plan, m));
  FMT_CALL(FMPlanSetType(plan, FMPLANLOCAL));
  FMT_CALL(FMPlanSetShape(plan, batch, s->Hq, s->Hkv, s->D, s->dt));
  FMT_CALL(FMPlanSetUp(plan));
  return plan;
}

/* A builder mask of type with mask_batch mb and the default seed. */
static FMMask bc_builder(FMContext ctx, const char *type, const BCShape *s, int mb)
{
  FMMask m;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, s->Sq, s->Sk, s->mh));
  FMT_CALL(FMMaskSetBatch(m, mb));
  FMT_CALL(FMMaskSetType(m, type));
  FMT_CALL(FMMaskSetUp(m));
  return m;
}

/* Number of (head, column, vector) entries in which sample sa of mask a and sample sb of mask b
   (same sizes) differ. */
static size_t bc_samples_diff(FMMask a, int sa, FMMask b, int sb)
{
  int Sq, Sk, mh;
  size_t nd = 0;
  FMT_CALL(FMMaskGetSizes(a, &Sq, &Sk, &mh));
  for (int h = 0; h < mh; h++) {
    const int32_t *va[4], *vb[4];
    FMT_CALL(FMMaskGetSampleBounds(a, sa, h, &va[0], &va[1], &va[2], &va[3], NULL, NULL));
    FMT_CALL(FMMaskGetSampleBounds(b, sb, h, &vb[0], &vb[1], &vb[2], &vb[3], NULL, NULL));
    for (int j = 0; j < Sk; j++)
      for (int v = 0; v < 4; v++) nd += va[v][j] != vb[v][j];
  }
  return nd;
}

/* Number of entries in which samples a and b of m differ. */
static size_t bc_sample_diff(FMMask m, int a, int b) { return bc_samples_diff(m, a, m, b); }

/* A "bounds" mask of mask_batch mb whose sample s holds sample src[s] of m (user bounds, every vector). */
static FMMask bc_copy_samples(FMContext ctx, FMMask m, int mb, const int *src)
{
  FMMask u;
  int Sq, Sk, mh;
  FMBool causal;
  FMT_CALL(FMMaskGetSizes(m, &Sq, &Sk, &mh));
  FMT_CALL(FMMaskGetBounds(m, 0, NULL, NULL, NULL, NULL, NULL, &causal));
  FMT_CALL(FMMaskCreate(ctx, &u));
  FMT_CALL(FMMaskSetSizes(u, Sq, Sk, mh));
  FMT_CALL(FMMaskSetBatch(u, mb));
  FMT_CALL(FMMaskSetType(u, FMMASKBOUNDS));
  FMT_CALL(FMMaskSetCausal(u, causal));
  for (int s = 0; s < mb; s++)
    for (int h = 0; h < mh; h++) {
      const int32_t *v[4];
      FMT_CALL(FMMaskGetSampleBounds(m, src[s], h, &v[0], &v[1], &v[2], &v[3], NULL, NULL));
      FMT_CALL(FMMaskSetSampleBounds(u, s, h, v[0], v[1], v[2], v[3]));
    }
  FMT_CALL(FMMaskSetUp(u));
  return u;
}

/* Outputs of plan against the float64 reference of mask m. */
static void bc_check_ref(const char *what, FMMask m, const BCShape *s, const BCData *d)
{
  const size_t nq = d->n[0], nk = d->n[1];
  double *r[4], *rl = malloc(d->nl * sizeof(double)), *got = malloc((nq > nk ? nq : nk) * sizeof(double));
  const char *names[4] = {"O", "dQ", "dK", "dV"};
  size_t bad_lse = 0;
  for (int t = 0; t < 4; t++) r[t] = malloc(d->no[t] * sizeof(double));
  bc_reference(m, s, d->x, r[0], rl, r[1], r[2], r[3]);
  for (int t = 0; t < 4; t++) {
    double err;
    for (size_t i = 0; i < d->no[t]; i++) got[i] = FMToFloat(d->out[t], i, s->dt);
    err = fmt_relerr(got, r[t], d->no[t]);
    FMT_CHECK(err <= (t ? s->tol_g : s->tol_o), "%s: relative error of %s = %.3e > %.1e", what, names[t], err, t ? s->tol_g : s->tol_o);
    printf("  %-44s %s rel. error %.2e\n", what, names[t], err);
  }
  for (size_t i = 0; i < d->nl; i++)
    if (rl[i] == -INFINITY ? d->lse[i] != -INFINITY : !(fabs(d->lse[i] - rl[i]) <= 1e-3 * (1 + fabs(rl[i])))) bad_lse++;
  FMT_CHECK(bad_lse == 0, "%s: %zu of %zu LSE entries differ from the reference", what, bad_lse, d->nl);
  for (int t = 0; t < 4; t++) free(r[t]);
  free(rl);
  free(got);
}

/* Copies of the outputs (to compare two runs). */
typedef struct {
  void *t[4];
  float *lse;
} BCOut;

static void bc_save(BCOut *o, const BCData *d, FMDType dt)
{
  for (int t = 0; t < 4; t++) {
    o->t[t] = malloc(d->no[t] * FMDTypeSize(dt));
    memcpy(o->t[t], d->out[t], d->no[t] * FMDTypeSize(dt));
  }
  o->lse = malloc(d->nl * sizeof(float));
  memcpy(o->lse, d->lse, d->nl * sizeof(float));
}

static void bc_out_free(BCOut *o)
{
  for (int t = 0; t < 4; t++) free(o->t[t]);
  free(o->lse);
}

/* Outputs of d bitwise equal to a saved run (dQ within dq_same when it is not 0). */
static void bc_check_same(const char *what, const BCOut *a, const BCData *d, FMDType dt, double dq_same)
{
  const char *names[4] = {"O", "dQ", "dK", "dV"};
  for (int t = 0; t < 4; t++) {
    if (t == 1 && dq_same > 0) {
      double *x = malloc(d->no[1] * sizeof(double)), *y = malloc(d->no[1] * sizeof(double)), err;
      for (size_t i = 0; i < d->no[1]; i++) x[i] = FMToFloat(d->out[1], i, dt), y[i] = FMToFloat(a->t[1], i, dt);
      err = fmt_relerr(x, y, d->no[1]);
      FMT_CHECK(err <= dq_same, "%s: dQ differs by %.3e (relative); expected <= %.0e", what, err, dq_same);
      free(x);
      free(y);
      continue;
    }
    FMT_CHECK(!memcmp(a->t[t], d->out[t], d->no[t] * FMDTypeSize(dt)), "%s: %s differs (expected bitwise equal)", what, names[t]);
  }
  FMT_CHECK(!memcmp(a->lse, d->lse, d->nl * sizeof(float)), "%s: LSE differs (expected bitwise equal)", what);
}

/* Run m through a fresh plan of shape s on d. */
static void bc_run(FMContext ctx, bc_run_fn run, FMMask m, const BCShape *s, BCData *d)
{
  FMPlan plan = bc_plan(ctx, m, s, s->B);
  run(plan, s->dt, d->n, d->nl, d->in, d->out, d->lse);
  FMT_CALL(FMPlanDestroy(&plan));
}

/*
 * The checks both backends run on shape s (s->B = 3):
 *  1. builders with mask_batch B pack every sample differently; forward and backward of
 *     document, random_eviction and per-sample user bounds (FMMaskSetSampleBounds, samples in
 *     another order) against the float64 reference of each sample;
 *  2. mask_batch 1 (one shared mask, as before issue 11) gives bitwise the results of a
 *     mask_batch B mask that holds that mask in every sample, and sample 0 of a batch builder
 *     is the batch-1 builder (seed + 0).
 */
static void bc_check_all(FMContext ctx, bc_run_fn run, const BCShape *s, uint64_t *seed)
{
  static const char *const types[3] = {FMMASKDOCUMENT, FMMASKRANDOMEVICTION, FMMASKCAUSALDOCUMENT};
  const int order[3] = {2, 0, 1};
  BCData d;
  BCOut one;
  bc_data_init(&d, s, seed);
  for (int t = 0; t < 3; t++) {
    FMMask m = bc_builder(ctx, types[t], s, s->B), u = NULL;
    char what[96];
    for (int a = 0; a < s->B; a++)
      for (int b = a + 1; b < s->B; b++)
        FMT_CHECK(bc_sample_diff(m, a, b) > 0, "%s with mask_batch %d: samples %d and %d have the same bounds; expected other packings",
                  types[t], s->B, a, b);
    if (t == 2) { /* per-sample user bounds, in another order than the builder's */
      u = bc_copy_samples(ctx, m, s->B, order);
      FMT_CALL(FMMaskDestroy(&m));
      m = u;
    }
    snprintf(what, sizeof(what), "%s%s, mask_batch %d", t == 2 ? "bounds from " : "", types[t], s->B);
    bc_run(ctx, run, m, s, &d);
    bc_check_ref(what, m, s, &d);
    FMT_CALL(FMMaskDestroy(&m));
  }
  /* 2. mask_batch 1 against the same mask in every sample of a mask_batch B mask */
  {
    FMMask m1 = bc_builder(ctx, FMMASKDOCUMENT, s, 1), mb = bc_builder(ctx, FMMASKDOCUMENT, s, s->B), u;
    const int zero[3] = {0, 0, 0};
    int batch = 0;
    FMT_CALL(FMMaskGetBatch(m1, &batch));
    FMT_CHECK(batch == 1, "default mask_batch %d, expected 1", batch);
    /* sample 0 of the batch builder is the batch-1 builder: copy sample 0 of mb into u, compare with m1 */
    u = bc_copy_samples(ctx, mb, 1, zero);
    {
      int Sq, Sk, mh;
      size_t nd = 0;
      FMT_CALL(FMMaskGetSizes(m1, &Sq, &Sk, &mh));
      for (int h = 0; h < mh; h++) {
        const int32_t *a[4], *b[4];
        FMT_CALL(FMMaskGetBounds(m1, h, &a[0], &a[1], &a[2], &a[3], NULL, NULL));
        FMT_CALL(FMMaskGetBounds(u, h, &b[0], &b[1], &b[2], &b[3], NULL, NULL));
        for (int v = 0; v < 4; v++)
          for (int j = 0; j < Sk; j++) nd += a[v][j] != b[v][j];
      }
      FMT_CHECK(nd == 0, "sample 0 of document with mask_batch %d differs from document with mask_batch 1 in %zu entries", s->B, nd);
    }
    FMT_CALL(FMMaskDestroy(&u));
    bc_run(ctx, run, m1, s, &d);
    bc_check_ref("document, mask_batch 1 (shared)", m1, s, &d);
    bc_save(&one, &d, s->dt);
    u = bc_copy_samples(ctx, m1, s->B, zero); /* the shared mask in every sample */
    bc_run(ctx, run, u, s, &d);
    bc_check_same("mask_batch 1 against the same bounds in every sample", &one, &d, s->dt, s->dq_same);
    printf("  mask_batch 1 equals the same bounds in every sample of a batch mask (bitwise%s)\n", s->dq_same > 0 ? "; dQ within tolerance" : "");
    bc_out_free(&one);
    FMT_CALL(FMMaskDestroy(&u));
    FMT_CALL(FMMaskDestroy(&m1));
    FMT_CALL(FMMaskDestroy(&mb));
  }
  bc_data_free(&d);
}

#endif
