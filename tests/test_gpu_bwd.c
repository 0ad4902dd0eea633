/*
 * test_gpu_bwd - FMPlanBackward on the CUDA backend (device pointers) against a float64 reference
 * (fmt_ref_attention) computed here from the same rounded inputs. Fresh random inputs per case;
 * dq, dk, dv poisoned with NaN before each call. Covers the 12 builder masks (FMMaskSetType),
 * random per-head user bounds (type "bounds", mask_heads = heads_kv) with fully masked rows and
 * columns, GQA 4:1, S_q != S_k both ways (bottom-right causal), odd lengths (1000, 4099), head
 * dims 64/128/256 (d = 64 on dense masks on 128-row steps, also with S_q != S_k, a single row and
 * a last step of 2 rows), bf16 and fp16, several softmax scales.
 * Pass: ||g - ref|| / ||ref|| <= 2e-2 (bf16) / 5e-3 (fp16) for g = dq, dk, dv; no NaN anywhere.
 * Non-finite inputs (a NaN in Q) give the CPU backend's non-finite elements and leave the others
 * as the CPU computes them; -fm_check_finite's scan kernel names the element (run_nonfinite).
 * The deterministic leg (FMPlanSetDeterministic after FMPlanSetUp): full, causal and
 * causal_document at 4099 x 4099, GQA 2:1, d = 128 bf16 and d = 64 fp16, and causal_document at
 * 2051 x 2051, GQA 2:1, d = 256 bf16 (64-key items), the backward run twice
 * on the same inputs (outputs poisoned with NaN before each): dq, dk, dv the same bytes both
 * times, and within the reference's tolerance. -deterministic runs this leg alone.
 * Exit 77 without CUDA or without a GPU (no device or no driver at all); a CUDA error from the
 * device count (a broken driver) is a hard error (99).
 * Usage: test_gpu_bwd [-quick] [-case N] [-seed S] [-deterministic]
 */
#include <flashmask.h>
#include <flashmask/private/fmkernels.h>
#include <flashmask/private/planimpl.h> /* the plan's resolved step rows */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#include "fmtest.h"

#if !FM_HAVE_CUDA
FMT_SKIP_MAIN("built without CUDA")
#else

typedef struct {
  const char *type; /* an FMMASK* name */
  int B, Sq, Sk, Hq, Hkv, mh, D;
  FMDType dt;
  double scale; /* 0: 1/sqrt(D) */
  int det;      /* 1: FMPlanSetDeterministic, the backward twice, compared bitwise */
  int rows;     /* 80 (d = 128) or 128 (d = 64): run on a context with -fm_sm90_bwd_rows rows (0: the plan's
                   choice) */
} Case;

typedef struct {
  int Sq, Sk;
  const unsigned char *m; /* [mh][Sq][Sk] 1 = masked */
} Dense;

static int dense_masked(void *ctx, int mh, int i, int j)
{
  const Dense *d = (const Dense *)ctx;
  return d->m[((size_t)mh * d->Sq + i) * d->Sk + j];
}

/* Random per-head bounds: each column masks one random interval [lts, lte); every head also masks a
   band of rows [r0, r1) in every column (fully masked rows) and a few whole columns. */
static void user_bounds(FMMask m, int Sq, int Sk, int mh, uint64_t *s)
{
  int32_t *lts = malloc(sizeof(int32_t) * Sk), *lte = malloc(sizeof(int32_t) * Sk);
  int32_t *uts = malloc(sizeof(int32_t) * Sk), *ute = malloc(sizeof(int32_t) * Sk);
  for (int h = 0; h < mh; h++) {
    const int r0 = (int)((fmt_uniform(s) * 0.5 + 0.5) * Sq * 0.8), r1 = r0 + 1 + (int)((fmt_uniform(s) * 0.5 + 0.5) * 40);
    for (int j = 0; j < Sk; j++) {
      int a = (int)((fmt_uniform(s) * 0.5 + 0.5) * Sq), b = (int)((fmt_uniform(s) * 0.5 + 0.5) * Sq);
      if (a > b) { const int t = a; a = b; b = t; }
      if (fmt_uniform(s) > 0.94) a = 0, b = Sq; /* fully masked column */
      lts[j] = a;
      lte[j] = b;
      uts[j] = r0;
      ute[j] = r1 < Sq ? r1 : Sq;
    }
    FMT_CALL(FMMaskSetBounds(m, h, lts, lte, uts, ute));
  }
  free(lts);
  free(lte);
  free(uts);
  free(ute);
}

/* device buffer of n elements of es bytes from host data h */
static void *upload(const void *h, size_t bytes)
{
  void *d;
  FMT_CALL(FMCudaMalloc(bytes, &d));
  FMT_CALL(FMCudaMemcpyH2D(d, h, bytes, NULL));
  return d;
}

/* Rows [r0, r0 + n) of a Dense mask, as fmt_ref_attention sees a slice of them (its row 0 is r0). */
typedef struct {
  const Dense *d;
  int r0;
} DenseRows;

static int rows_masked(void *ctx, int mh, int i, int j)
{
  const DenseRows *r = (const DenseRows *)ctx;
  return dense_masked((void *)r->d, mh, r->r0 + i, j);
}

/*
 * fmt_ref_attention over slices of the query rows in parallel (B = 1: a slice of rows of q,
 * dout, o, dq is contiguous), each slice's dK, dV summed afterwards in slice order; the LSE of
 * slice s goes to its rows. B > 1: fmt_ref_attention as it is.
 */
static void ref_attention(int B, int Hq, int Hkv, int D, int Sq, int Sk, int mh, double scale, const Dense *dm, const double *q,
                          const double *k, const double *v, double *o, double *lse, const double *dout, double *dq, double *dk, double *dv)
{
  int nsl = 1;
  size_t nk = (size_t)Sk * Hkv * D, rq = (size_t)Hq * D;
#ifdef _OPENMP
  nsl = 2 * omp_get_max_threads();
#endif
  if (nsl > 32) nsl = 32;
  if (nsl > Sq) nsl = Sq;
  if (B != 1 || nsl <= 1) {
    fmt_ref_attention(B, Hq, Hkv, D, Sq, Sk, mh, scale, dense_masked, (void *)dm, q, k, v, o, lse, dout, dq, dk, dv);
    return;
  }
  const int R = (Sq + nsl - 1) / nsl;
  double *pk = malloc(sizeof(double) * nk * nsl), *pv = malloc(sizeof(double) * nk * nsl);
  double *pl = malloc(sizeof(double) * (size_t)Hq * R * nsl);
#pragma omp parallel for schedule(dynamic, 1)
  for (int sl = 0; sl < nsl; sl++) {
    const int r0 = sl * R, n = Sq - r0 < R ? Sq - r0 : R;
    DenseRows dr = {dm, r0};
    if (n > 0)
      fmt_ref_attention(1, Hq, Hkv, D, n, Sk, mh, scale, rows_masked, &dr, q + r0 * rq, k, v, o + r0 * rq, pl + (size_t)sl * Hq * R,
                        dout + r0 * rq, dq + r0 * rq, pk + sl * nk, pv + sl * nk);
  }
  memset(dk, 0, sizeof(double) * nk);
  memset(dv, 0, sizeof(double) * nk);
  for (int sl = 0; sl < nsl; sl++) {
    const int r0 = sl * R, n = Sq - r0 < R ? Sq - r0 : R;
    if (n <= 0) continue;
    for (size_t i = 0; i < nk; i++) dk[i] += pk[sl * nk + i], dv[i] += pv[sl * nk + i];
    for (int h = 0; h < Hq; h++)
      for (int i = 0; i < n; i++) lse[(size_t)h * Sq + r0 + i] = pl[(size_t)sl * Hq * R + (size_t)h * n + i]; /* the slice's [h][n] */
  }
  free(pk); free(pv); free(pl);
}

/* The backward into NaN-poisoned device dq, dk, dv (poison: host buffers of 0xff bytes), read back into g[0..2]. */
static void backward_poisoned(FMPlan plan, void *const dd[4], void *dev_o, float *dlse, void *dq, void *dk, void *dv, void *const g[3],
                              size_t nqb, size_t nkb)
{
  memset(g[0], 0xff, nqb);
  memset(g[1], 0xff, nkb);
  memset(g[2], 0xff, nkb);
  FMT_CALL(FMCudaMemcpyH2D(dq, g[0], nqb, NULL));
  FMT_CALL(FMCudaMemcpyH2D(dk, g[1], nkb, NULL));
  FMT_CALL(FMCudaMemcpyH2D(dv, g[2], nkb, NULL));
  FMT_CALL(FMPlanBackward(plan, dd[0], dd[1], dd[2], dev_o, dlse, dd[3], dq, dk, dv));
  FMT_CALL(FMCudaMemcpyD2H(g[0], dq, nqb, NULL));
  FMT_CALL(FMCudaMemcpyD2H(g[1], dk, nkb, NULL));
  FMT_CALL(FMCudaMemcpyD2H(g[2], dv, nkb, NULL));
}

/* The first byte where a and b differ, or n. */
static size_t first_diff(const void *a, const void *b, size_t n)
{
  const unsigned char *x = (const unsigned char *)a, *y = (const unsigned char *)b;
  for (size_t i = 0; i < n; i++)
    if (x[i] != y[i]) return i;
  return n;
}

static int run_case(FMContext ctx, int idx, const Case *c, uint64_t seed)
{
  const int B = c->B, Sq = c->Sq, Sk = c->Sk, Hq = c->Hq, Hkv = c->Hkv, D = c->D, mh = c->mh;
  const size_t nq = (size_t)B * Sq * Hq * D, nk = (size_t)B * Sk * Hkv * D, nl = (size_t)B * Hq * Sq;
  const size_t es = FMDTypeSize(c->dt);
  const double scale = c->scale > 0 ? c->scale : 1.0 / sqrt((double)D);
  const double tol = c->dt == FM_DTYPE_FP16 ? 5e-3 : 2e-2;
  uint64_t s = seed;
  FMMask mask;
  FMPlan plan;
  Dense dm;
  unsigned char *mm;
  void *h[4], *g[3], *dq, *dk, *dv, *dd[4], *dev_o;
  float *dlse;
  double *x[4], *o, *lse, *rq, *rk, *rv, *gq, *gk, *gv, err[3];
  const size_t n4[4] = {nq, nk, nk, nq}; /* q, k, v, dout */
  int fail, differ = 0;

  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, Sq, Sk, mh));
  FMT_CALL(FMMaskSetType(mask, c->type));
  FMT_CALL(FMMaskSetSeed(mask, (unsigned long)(seed & 0xffffffffu)));
  if (!strcmp(c->type, FMMASKBOUNDS)) {
    user_bounds(mask, Sq, Sk, mh, &s);
    FMT_CALL(FMMaskSetCausal(mask, (FMBool)(idx & 1)));
  }
  FMT_CALL(FMMaskSetUp(mask));
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetMask(plan, mask));
  FMT_CALL(FMPlanSetShape(plan, B, Hq, Hkv, D, c->dt));
  FMT_CALL(FMPlanSetScale(plan, scale));
  FMT_CALL(FMPlanSetUp(plan));
  {
    /* the Hopper backward's step: -fm_sm90_bwd_rows (c->rows), or the plan's choice at set-up
       (FMSm90ChooseBwdRows_Private, in opts.sm90_bwd_rows), else on a mask with no bound vectors
       80 rows for d = 128 and 128 for d = 64, else 64 (the larger steps only at their own d) */
    FMAttnProblem pr;
    const char *bp;
    char want[32];
    int rows;
    FMT_CALL(FMPlanGetProblem_Private(plan, &pr));
    bp = FMCudaBackwardPathName(&pr);
    rows = pr.opts.sm90_bwd_rows ? pr.opts.sm90_bwd_rows : !pr.mask.present && D == 128 ? 80 : !pr.mask.present && D == 64 ? 128 : 64;
    if ((rows == 80 && D != 128) || (rows == 128 && D != 64)) rows = 64;
    snprintf(want, sizeof want, "%d-row", rows);
    if (!strncmp(bp, "sm90", 4))
      FMT_CHECK((!c->rows || pr.opts.sm90_bwd_rows == c->rows) && strstr(bp, want) != NULL,
                "case %d (%s, d = %d, rows %d): backward path \"%s\", expected %s steps", idx, c->type, D, c->rows, bp, want);
  }

  /* inputs: rounded to dtype; the reference reads the rounded values */
  for (int t = 0; t < 4; t++) {
    h[t] = malloc(n4[t] * es);
    x[t] = malloc(n4[t] * sizeof(double));
    for (size_t i = 0; i < n4[t]; i++) {
      FMFromFloat(h[t], i, c->dt, (float)(t == 0 || t == 1 ? 1.5 * fmt_uniform(&s) : fmt_uniform(&s)));
      x[t][i] = FMToFloat(h[t], i, c->dt);
    }
    dd[t] = upload(h[t], n4[t] * es);
  }
  FMT_CALL(FMCudaMalloc(nq * es, &dev_o));
  FMT_CALL(FMCudaMalloc(nl * sizeof(float), (void **)&dlse));
  FMT_CALL(FMPlanForward(plan, dd[0], dd[1], dd[2], dev_o, dlse));
  /* NaN-poisoned gradients */
  g[0] = malloc(nq * es);
  g[1] = malloc(nk * es);
  g[2] = malloc(nk * es);
  FMT_CALL(FMCudaMalloc(nq * es, &dq));
  FMT_CALL(FMCudaMalloc(nk * es, &dk));
  FMT_CALL(FMCudaMalloc(nk * es, &dv));
  if (c->det) FMT_CALL(FMPlanSetDeterministic(plan, FM_TRUE)); /* after FMPlanSetUp: the next backward takes it */
  backward_poisoned(plan, dd, dev_o, dlse, dq, dk, dv, g, nq * es, nk * es);
  if (c->det) { /* the same inputs again: the same bytes */
    void *g2[3] = {malloc(nq * es), malloc(nk * es), malloc(nk * es)};
    const size_t nb[3] = {nq * es, nk * es, nk * es};
    const char *name[3] = {"dq", "dk", "dv"};
    backward_poisoned(plan, dd, dev_o, dlse, dq, dk, dv, g2, nq * es, nk * es);
    for (int t = 0; t < 3; t++) {
      const size_t at = first_diff(g[t], g2[t], nb[t]);
      FMT_CHECK(at == nb[t], "case %d (%s, deterministic): the second backward's %s differs from the first's from byte %zu of %zu", idx,
                c->type, name[t], at, nb[t]);
      differ |= at != nb[t];
      free(g2[t]);
    }
  }

  /* float64 reference over the mask's own element test */
  mm = malloc((size_t)mh * Sq * Sk);
  for (int hh = 0; hh < mh; hh++)
    for (int i = 0; i < Sq; i++)
      for (int j = 0; j < Sk; j++) {
        FMBool b;
        FMT_CALL(FMMaskIsMasked(mask, hh, i, j, &b));
        mm[((size_t)hh * Sq + i) * Sk + j] = (unsigned char)b;
      }
  dm.Sq = Sq;
  dm.Sk = Sk;
  dm.m = mm;
  o = malloc(nq * sizeof(double));
  lse = malloc(nl * sizeof(double));
  rq = malloc(nq * sizeof(double));
  rk = malloc(nk * sizeof(double));
  rv = malloc(nk * sizeof(double));
  ref_attention(B, Hq, Hkv, D, Sq, Sk, mh, scale, &dm, x[0], x[1], x[2], o, lse, x[3], rq, rk, rv);
  gq = malloc(nq * sizeof(double));
  gk = malloc(nk * sizeof(double));
  gv = malloc(nk * sizeof(double));
  for (size_t i = 0; i < nq; i++) gq[i] = FMToFloat(g[0], i, c->dt);
  for (size_t i = 0; i < nk; i++) gk[i] = FMToFloat(g[1], i, c->dt), gv[i] = FMToFloat(g[2], i, c->dt);
  err[0] = fmt_relerr(gq, rq, nq);
  err[1] = fmt_relerr(gk, rk, nk);
  err[2] = fmt_relerr(gv, rv, nk);
  fail = !(err[0] <= tol && err[1] <= tol && err[2] <= tol);
  printf("case %2d %-22s B %d Sq %4d Sk %4d Hq %d Hkv %d mh %d D %3d %s scale %.3f%s: dq %.2e dk %.2e dv %.2e %s\n", idx,
         c->type, B, Sq, Sk, Hq, Hkv, mh, D, c->dt == FM_DTYPE_FP16 ? "fp16" : "bf16", scale, c->det ? " deterministic" : "", err[0],
         err[1], err[2], fail ? "FAIL" : differ ? "FAIL (the two runs differ)" : "ok");
  FMT_CHECK(!fail, "case %d (%s): relative errors dq %.3e dk %.3e dv %.3e; expected <= %.0e", idx, c->type, err[0], err[1],
            err[2], tol);

  for (int t = 0; t < 4; t++) {
    free(h[t]);
    free(x[t]);
    FMT_CALL(FMCudaFree(dd[t]));
  }
  for (int t = 0; t < 3; t++) free(g[t]);
  FMT_CALL(FMCudaFree(dq));
  FMT_CALL(FMCudaFree(dk));
  FMT_CALL(FMCudaFree(dv));
  FMT_CALL(FMCudaFree(dev_o));
  FMT_CALL(FMCudaFree(dlse));
  free(mm), free(o), free(lse), free(rq), free(rk), free(rv), free(gq), free(gk), free(gv);
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&mask));
  return fail || differ;
}

/* A local causal plan of the nonfinite leg on context c. */
static FMPlan nf_plan(FMContext c, FMMask mask, int D, FMDType dt)
{
  FMPlan plan;
  FMT_CALL(FMPlanCreate(c, &plan));
  FMT_CALL(FMPlanSetMask(plan, mask));
  FMT_CALL(FMPlanSetShape(plan, 1, 2, 2, D, dt));
  FMT_CALL(FMPlanSetUp(plan));
  return plan;
}

/* Relative 2-norm error of the finite pairs of a and b; counts into *bad the elements where
   a (GPU) and b (CPU) disagree on finiteness, except where either may be non-finite (may[i]:
   0 x NaN through a tile, whose extent differs between the backends). */
static double nf_cmp(const void *a, const void *b, FMDType dt, size_t n, const unsigned char *may, int *bad)
{
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    const double x = FMToFloat(a, i, dt), y = FMToFloat(b, i, dt);
    if (isfinite(x) && isfinite(y)) { num += (x - y) * (x - y); den += y * y; }
    else if (!(may && may[i])) *bad += isfinite(x) != isfinite(y);
  }
  return den > 0 ? sqrt(num / den) : 0;
}

/*
 * Non-finite inputs (issue 14) through FMPlanForward/FMPlanBackward on the CUDA backend against
 * the CPU backend on the same inputs: causal 256 x 256, heads 2 (kv heads 2), a NaN in Q (row
 * 100, head 0, col 3). O and LSE: row 100 of head 0 NaN, every other row finite and close.
 * Gradients: the CPU's non-finite elements are non-finite; head 1 and dQ of head 0 rows != 100
 * finite and close; dV of head 0 exact in pattern too (P = 0 on the keys row 100 does not see);
 * dK of head 0 may also be NaN on keys after 100 (0 x NaN through a tile). Then -fm_check_finite
 * on the CUDA backend (the scan kernel): the NaN in q and an Inf in dout are FM_ERR_ARG_WRONG
 * naming the element; finite inputs run.
 */
static int run_nonfinite(FMContext ctx, int D, FMDType dt)
{
  const int S = 256, H = 2, bad_row = 100;
  const size_t n = (size_t)S * H * D, nl = (size_t)H * S, es = FMDTypeSize(dt);
  FMContext cpu;
  FMMask mask;
  FMPlan gp, cp;
  void *h[4], *d[4], *ho, *co, *hg[3], *cg[3], *dg[3], *dev_o;
  float *dl, *hl = malloc(nl * 4), *cl = malloc(nl * 4);
  unsigned char *may = calloc(n, 1);
  uint64_t s = 0xf1f1ull + (uint64_t)D;
  int bad = 0, fails;
  double err[5];
  FMErrorCode e;
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &cpu));
  FMT_CALL(FMContextSetBackend(cpu, FM_BACKEND_CPU));
  FMT_CALL(FMContextSetUp(cpu));
  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, S, S, 1));
  FMT_CALL(FMMaskSetType(mask, FMMASKCAUSAL));
  FMT_CALL(FMMaskSetUp(mask));
  gp = nf_plan(ctx, mask, D, dt);
  cp = nf_plan(cpu, mask, D, dt);
  for (int t = 0; t < 4; t++) { /* q, k, v, dout */
    h[t] = malloc(n * es);
    for (size_t i = 0; i < n; i++) FMFromFloat(h[t], i, dt, (float)(t < 2 ? 1.5 * fmt_uniform(&s) : fmt_uniform(&s)));
  }
  FMFromFloat(h[0], ((size_t)bad_row * H + 0) * D + 3, dt, NAN);
  for (int t = 0; t < 4; t++) d[t] = upload(h[t], n * es);
  ho = malloc(n * es); co = malloc(n * es);
  for (int t = 0; t < 3; t++) { hg[t] = malloc(n * es); cg[t] = malloc(n * es); FMT_CALL(FMCudaMalloc(n * es, &dg[t])); }
  FMT_CALL(FMCudaMalloc(n * es, &dev_o));
  FMT_CALL(FMCudaMalloc(nl * 4, (void **)&dl));
  FMT_CALL(FMPlanForward(gp, d[0], d[1], d[2], dev_o, dl));
  FMT_CALL(FMPlanBackward(gp, d[0], d[1], d[2], dev_o, dl, d[3], dg[0], dg[1], dg[2]));
  FMT_CALL(FMCudaMemcpyD2H(ho, dev_o, n * es, NULL));
  FMT_CALL(FMCudaMemcpyD2H(hl, dl, nl * 4, NULL));
  for (int t = 0; t < 3; t++) FMT_CALL(FMCudaMemcpyD2H(hg[t], dg[t], n * es, NULL));
  FMT_CALL(FMPlanForward(cp, h[0], h[1], h[2], co, cl));
  FMT_CALL(FMPlanBackward(cp, h[0], h[1], h[2], co, cl, h[3], cg[0], cg[1], cg[2]));
  bad += !isnan(cl[bad_row]) || !isnan(hl[bad_row]); /* LSE [head][row]: head 0, row 100 */
  err[0] = nf_cmp(ho, co, dt, n, NULL, &bad);
  err[1] = nf_cmp(hl, cl, FM_DTYPE_FP32, nl, NULL, &bad);
  err[2] = nf_cmp(hg[0], cg[0], dt, n, NULL, &bad);
  err[3] = nf_cmp(hg[2], cg[2], dt, n, NULL, &bad);
  for (int j = bad_row + 1; j < S; j++)
    for (int x = 0; x < D; x++) may[((size_t)j * H + 0) * D + x] = 1; /* dK, kv head 0, keys after the NaN row */
  err[4] = nf_cmp(hg[1], cg[1], dt, n, may, &bad);
  {
    const double tol = dt == FM_DTYPE_FP16 ? 5e-3 : 2e-2;
    fails = bad != 0;
    for (int t = 0; t < 5; t++) fails |= !(err[t] <= tol);
  }
  printf("non-finite inputs D %3d %s: mismatched finiteness %d, rel O %.2e LSE %.2e dq %.2e dv %.2e dk %.2e %s\n", D, FMDTypeName(dt), bad,
         err[0], err[1], err[2], err[3], err[4], fails ? "FAIL" : "ok");
  FMT_CHECK(!fails, "non-finite inputs D %d %s", D, FMDTypeName(dt));
  /* -fm_check_finite on the CUDA backend */
  FMT_CALL(FMPlanSetCheckFinite(gp, FM_TRUE));
  FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
  e = FMPlanForward(gp, d[0], d[1], d[2], dev_o, dl);
  FMT_CHECK(e == FM_ERR_ARG_WRONG && fmt_msg_has("Argument 2 (q) of FMPlanForward() holds a non-finite value (nan) at batch 0, head 0, row 100, col 3"),
            "check_finite on CUDA: FMPlanForward returned %s: %s", FMErrorString(e), FMGetLastErrorMessage());
  FMFromFloat(h[0], ((size_t)bad_row * H + 0) * D + 3, dt, 0.25f);
  FMFromFloat(h[3], ((size_t)7 * H + 1) * D + 9, dt, -INFINITY);
  FMT_CALL(FMCudaMemcpyH2D(d[0], h[0], n * es, NULL));
  FMT_CALL(FMCudaMemcpyH2D(d[3], h[3], n * es, NULL));
  FMPopErrorHandler();
  FMT_CALL(FMPlanForward(gp, d[0], d[1], d[2], dev_o, dl));
  FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
  e = FMPlanBackward(gp, d[0], d[1], d[2], dev_o, dl, d[3], dg[0], dg[1], dg[2]);
  FMT_CHECK(e == FM_ERR_ARG_WRONG && fmt_msg_has("Argument 7 (dout) of FMPlanBackward() holds a non-finite value (-inf) at batch 0, head 1, row 7, col 9"),
            "check_finite on CUDA: FMPlanBackward returned %s: %s", FMErrorString(e), FMGetLastErrorMessage());
  FMPopErrorHandler();
  for (int t = 0; t < 4; t++) { free(h[t]); FMT_CALL(FMCudaFree(d[t])); }
  for (int t = 0; t < 3; t++) { free(hg[t]); free(cg[t]); FMT_CALL(FMCudaFree(dg[t])); }
  FMT_CALL(FMCudaFree(dev_o));
  FMT_CALL(FMCudaFree(dl));
  free(ho); free(co); free(hl); free(cl); free(may);
  FMT_CALL(FMPlanDestroy(&gp));
  FMT_CALL(FMPlanDestroy(&cp));
  FMT_CALL(FMMaskDestroy(&mask));
  FMT_CALL(FMContextDestroy(&cpu));
  return fails;
}

/* Bounds of a band of w rows from the diagonal down (rows [j, j + w) of column j visible). */
static void band_bounds(FMMask m, int S, int w)
{
  int32_t *b = malloc(sizeof(int32_t) * 4 * (size_t)S);
  for (int j = 0; j < S; j++) {
    b[j] = j + w < S ? j + w : S; /* lts */
    b[S + j] = S;                 /* lte */
    b[2 * S + j] = 0;             /* uts */
    b[3 * S + j] = j;             /* ute */
  }
  FMT_CALL(FMMaskSetBounds(m, 0, b, b + S, b + 2 * S, b + 3 * S));
  free(b);
}

/* The plan's step rows (FMSm90ChooseBwdRows_Private) are estimated at the first set-up of a mask
   kind and shape and kept by re-SetUps with new bounds of the same kind, though an estimate of
   the new bounds differs (bands of 300 and 1000 rows); a new head dim (d = 64, 128-row steps)
   resolves them again. On
   sm_90 only (else no estimate). */
static int check_rows_kept(FMContext ctx)
{
  FMMask m;
  FMPlan plan;
  FMBwdRowsChoice c, c0;
  double first;
  const int f0 = fmt_failures;
  if (ctx->gpu_sm != 90) return 0;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, 2048, 2048, 1));
  FMT_CALL(FMMaskSetType(m, FMMASKBOUNDS));
  band_bounds(m, 2048, 300);
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMSm90ChooseBwdRows_Private(m, FM_BACKEND_CUDA, 128, 90, &ctx->kopts, &c0));
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetMask(plan, m));
  FMT_CALL(FMPlanSetShape(plan, 1, 2, 1, 128, FM_DTYPE_BF16));
  FMT_CALL(FMPlanSetUp(plan));
  first = plan->bwd_rows.extra;
  FMT_CHECK(first == c0.extra && first != -1, "band of 300 at d = 128: the plan's estimate %g, the mask's %g", first, c0.extra);
  band_bounds(m, 2048, 1000);
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMPlanSetUp(plan));
  FMT_CALL(FMSm90ChooseBwdRows_Private(m, FM_BACKEND_CUDA, 128, 90, &ctx->kopts, &c));
  FMT_CHECK(plan->bwd_rows.extra == first && c.extra != first,
                     "new bounds of the same kind: the plan's estimate %.6f (first %.6f), the new bounds' own %.6f", plan->bwd_rows.extra,
                     first, c.extra);
  FMT_CALL(FMPlanSetShape(plan, 1, 2, 1, 64, FM_DTYPE_BF16));
  FMT_CALL(FMPlanSetUp(plan));
  FMT_CALL(FMSm90ChooseBwdRows_Private(m, FM_BACKEND_CUDA, 64, 90, &ctx->kopts, &c));
  FMT_CHECK(plan->bwd_rows.extra == c.extra && plan->bwd_rows.rows == c.rows && c.extra >= 0,
            "d = 64: step rows %d, estimate %g; expected %d, %g (resolved again)", plan->bwd_rows.rows, plan->bwd_rows.extra,
            c.rows, c.extra);
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&m));
  return fmt_failures != f0;
}

/* A CUDA context; with rows, one that reads the options with -fm_sm90_bwd_rows rows (the option is
   left at "0", the plan's choice, after it). */
static FMContext cuda_context(const char *rows)
{
  FMContext c;
  if (rows) FMT_CALL(FMOptionsSetValue("-fm_sm90_bwd_rows", rows));
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &c));
  FMT_CALL(FMContextSetBackend(c, FM_BACKEND_CUDA));
  if (rows) FMT_CALL(FMContextSetFromOptions(c));
  FMT_CALL(FMContextSetUp(c));
  if (rows) FMT_CALL(FMOptionsSetValue("-fm_sm90_bwd_rows", "0"));
  return c;
}

int main(int argc, char **argv)
{
  static const char *types[12] = {FMMASKFULL, FMMASKCAUSAL, FMMASKSLIDINGWINDOW, FMMASKCAUSALDOCUMENT,
                                  FMMASKDOCUMENT, FMMASKSHAREQUESTION, FMMASKGLOBALSLIDINGWINDOW, FMMASKCAUSALBLOCKWISE,
                                  FMMASKPREFIXLMDOCUMENT, FMMASKPREFIXLMCAUSAL, FMMASKQKSPARSE, FMMASKRANDOMEVICTION};
  int ncase = 0, only = -1, quick = 0, fails = 0, run = 0, detonly = 0;
  Case cs[48];
  uint64_t seed;
  FMContext ctx, ctx80, ctx128;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_gpu_bwd: CUDA backward against a float64 reference"));
  seed = fmt_seed();
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "-case") && a + 1 < argc) only = atoi(argv[++a]);
    else if (!strcmp(argv[a], "-quick")) quick = 1;
    else if (!strcmp(argv[a], "-seed") && a + 1 < argc) seed = strtoull(argv[++a], NULL, 10);
    else if (!strcmp(argv[a], "-deterministic")) detonly = 1;
  }
  FMT_SKIP_WITHOUT_GPU();
  /* the 12 masks at 1000 x 1000: GQA 4:1 and 2:1, d = 64/128, bf16/fp16 */
  for (int t = 0; t < 12; t++) {
    Case c = {types[t], 1, 1000, 1000, 4, 2, 1, 128, FM_DTYPE_BF16, 0};
    if (t % 3 == 0) c.D = 64;
    if (t % 2 == 1) c.dt = FM_DTYPE_FP16;
    if (t % 4 == 2) c.Hkv = 1; /* GQA 4:1 */
    if (t == 11) c.mh = c.Hkv; /* per-head random eviction */
    cs[ncase++] = c;
  }
  /* random per-head user bounds with fully masked rows and columns, GQA 4:1, S_q != S_k */
  { Case c = {FMMASKBOUNDS, 2, 1000, 1000, 8, 2, 2, 128, FM_DTYPE_BF16, 0.3}; cs[ncase++] = c; }
  { Case c = {FMMASKBOUNDS, 1, 1000, 4099, 4, 1, 1, 64, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  /* S_q != S_k both ways, odd lengths (bottom-right causal: Sq > Sk leaves rows with no key) */
  { Case c = {FMMASKCAUSAL, 1, 4099, 1000, 2, 1, 1, 128, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {FMMASKCAUSAL, 1, 1000, 4099, 4, 1, 1, 128, FM_DTYPE_FP16, 0.05}; cs[ncase++] = c; }
  { Case c = {FMMASKSLIDINGWINDOW, 1, 4099, 4099, 1, 1, 1, 64, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  /* d = 256 (the Hopper kernel's 64-key items), tiny and edge sizes */
  { Case c = {FMMASKCAUSALDOCUMENT, 1, 600, 600, 2, 1, 1, 256, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {FMMASKCAUSAL, 1, 1, 1, 1, 1, 1, 128, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {FMMASKFULL, 3, 130, 70, 2, 1, 1, 128, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  /* d = 64 on dense masks takes 128-row steps (FMGpuBwdStepRows): the d = 128 causal and full
     cases above again at d = 64 (S_q != S_k both ways, a single row, a last step of 2 rows) */
  for (int i = 0, n = ncase; i < n; i++)
    if (cs[i].D == 128 && (!strcmp(cs[i].type, FMMASKCAUSAL) || !strcmp(cs[i].type, FMMASKFULL)) &&
        !(cs[i].Sq == 1000 && cs[i].Sk == 1000)) {
      Case c = cs[i];
      c.D = 64;
      cs[ncase++] = c;
    }
  /* the deterministic leg: 4099 x 4099 (odd), GQA 2:1, d = 128 bf16 and d = 64 fp16 */
  for (int t = 0; t < 6; t++) {
    static const char *const dtypes[3] = {FMMASKFULL, FMMASKCAUSAL, FMMASKCAUSALDOCUMENT};
    Case c = {dtypes[t % 3], 1, 4099, 4099, 2, 1, 1, t < 3 ? 128 : 64, t < 3 ? FM_DTYPE_BF16 : FM_DTYPE_FP16, 0, 1};
    cs[ncase++] = c;
  }
  { /* and d = 256 (64-key items: the turns go by halves of the summaries' blocks), GQA 2:1, odd length */
    Case c = {FMMASKCAUSALDOCUMENT, 1, 2051, 2051, 4, 2, 1, 256, FM_DTYPE_BF16, 0, 1};
    cs[ncase++] = c;
  }

  /* 80-row steps on masks with bound vectors (-fm_sm90_bwd_rows 80): prefix LM causal, user
     bounds with GQA 4:1 and S_q != S_k, and the deterministic mode on causal document */
  { Case c = {FMMASKPREFIXLMCAUSAL, 1, 1000, 1000, 4, 2, 1, 128, FM_DTYPE_BF16, 0, 0, 80}; cs[ncase++] = c; }
  { Case c = {FMMASKBOUNDS, 2, 1000, 1333, 8, 2, 2, 128, FM_DTYPE_FP16, 0, 0, 80}; cs[ncase++] = c; }
  { Case c = {FMMASKCAUSALDOCUMENT, 1, 4099, 4099, 2, 1, 1, 128, FM_DTYPE_BF16, 0, 1, 80}; cs[ncase++] = c; }
  /* and 128-row steps at d = 64 (-fm_sm90_bwd_rows 128) on the same three */
  { Case c = {FMMASKPREFIXLMCAUSAL, 1, 1000, 1000, 4, 2, 1, 64, FM_DTYPE_FP16, 0, 0, 128}; cs[ncase++] = c; }
  { Case c = {FMMASKBOUNDS, 2, 1000, 1333, 8, 2, 2, 64, FM_DTYPE_BF16, 0, 0, 128}; cs[ncase++] = c; }
  { Case c = {FMMASKCAUSALDOCUMENT, 1, 4099, 4099, 2, 1, 1, 64, FM_DTYPE_FP16, 0, 1, 128}; cs[ncase++] = c; }

  ctx = cuda_context(NULL);
  ctx80 = cuda_context("80");
  ctx128 = cuda_context("128");
  for (int i = 0; i < ncase; i++) {
    if (only >= 0 && i != only) continue;
    if (quick && (cs[i].Sq > 1100 || cs[i].Sk > 1100)) continue;
    if (detonly && !cs[i].det) continue;
    fails += run_case(cs[i].rows == 80 ? ctx80 : cs[i].rows == 128 ? ctx128 : ctx, i, &cs[i], seed + 7919 * (uint64_t)i);
    run++;
  }
  if (only < 0 && !detonly) { /* the step rows kept over re-SetUps */
    fails += check_rows_kept(ctx);
    run++;
  }
  if (only < 0 && !detonly) { /* non-finite inputs: the Hopper backward at D 64, 128 and 256 */
    fails += run_nonfinite(ctx, 64, FM_DTYPE_BF16);
    fails += run_nonfinite(ctx, 128, FM_DTYPE_FP16);
    fails += run_nonfinite(ctx, 256, FM_DTYPE_BF16);
    run += 3;
  }
  FMT_CALL(FMContextDestroy(&ctx80));
  FMT_CALL(FMContextDestroy(&ctx128));
  FMT_CALL(FMContextDestroy(&ctx));
  printf("test_gpu_bwd: %d of %d cases failed\n", fails, run);
  FMFinalize();
  return fmt_finish("test_gpu_bwd");
}
#endif /* FM_HAVE_CUDA */
