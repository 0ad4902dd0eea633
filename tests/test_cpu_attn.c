/*
 * test_cpu_attn - the exact CPU backend (FMCPUForward, FMCPUMergePartial, FMCPUBackward,
 * FMToFloat/FMFromFloat) against a float64 dense reference on fresh random inputs:
 * all 12 mask types, user bounds with per-head masks, GQA, S_q != S_k both ways, head dims
 * 64/72/128/256, lengths that are not multiples of the block, several summary block sizes,
 * fully masked rows, three dtypes, every kernel vector width (-fm_cpu_vector_width); key ranges
 * split into pieces and merged; query-row subsets.
 * Usage: test_cpu_attn [-quick]
 */
#include "fmtest.h"
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include "cpu_attn_cases.h"

/* ------------------------------------------------------------------ one full problem */
static void run_case(FMContext ctx, const Case *cs, uint64_t *seed)
{
  const int B = cs->B, Hq = cs->Hq, Hkv = cs->Hkv, D = cs->D, Sq = cs->Sq, Sk = cs->Sk;
  const size_t nq = (size_t)B * Sq * Hq * D, nk = (size_t)B * Sk * Hkv * D, nl = (size_t)B * Hq * Sq;
  const FMDType dt = cs->dt;
  const double tol_o = dt == FM_DTYPE_FP32 ? 1e-5 : 1e-2, tol_g = dt == FM_DTYPE_FP32 ? 2e-5 : 1.5e-2;
  FMMask mask = make_mask(ctx, cs, seed);
  FMAttnProblem p;
  Dense dm;
  double *q, *k, *v, *dout, *dq0;
  void *tq = make_input(nq, dt, cs->amp, &q, seed), *tk = make_input(nk, dt, cs->amp, &k, seed);
  void *tv = make_input(nk, dt, 1.0, &v, seed), *tdo = make_input(nq, dt, 1.0, &dout, seed);
  void *to = poisoned(nq, dt), *tdk = poisoned(nk, dt), *tdv = poisoned(nk, dt);
  float *lse = poisoned(nl, FM_DTYPE_FP32), *dq = malloc(nq * sizeof(float));
  double *o_ref = malloc(nq * 8), *lse_ref = malloc(nl * 8), *dq_ref = malloc(nq * 8), *dk_ref = malloc(nk * 8), *dv_ref = malloc(nk * 8);
  double density = 0, sparsity = 0, t0, t1, t2;
  size_t ndead;

  make_problem(mask, cs, &p);
  dense_build(mask, &dm);
  FMT_CALL(FMMaskGetDensity(mask, &density, &sparsity));
  /* dq_acc starts from random values: FMCPUBackward must ADD to it */
  dq0 = malloc(nq * sizeof(double));
  for (size_t i = 0; i < nq; i++) dq[i] = (float)(dq0[i] = fmt_uniform(seed));

  t0 = FMTime();
  FMT_CALL(FMCPUForward(&p, tq, tk, tv, to, dt, lse));
  t1 = FMTime();
  FMT_CALL(FMCPUBackward(&p, tq, tk, tv, to, lse, tdo, dq, tdk, tdv, dt));
  t2 = FMTime();
  fmt_ref_attention(B, Hq, Hkv, D, Sq, Sk, cs->mh, (double)p.scale, dense_masked, &dm, q, k, v, o_ref, lse_ref, dout, dq_ref, dk_ref,
                    dv_ref);

  double *o = to_double(to, nq, dt), *dk = to_double(tdk, nk, dt), *dv = to_double(tdv, nk, dt), *dqa = malloc(nq * 8);
  for (size_t i = 0; i < nq; i++) dqa[i] = (double)dq[i] - (double)(float)dq0[i];
  check_rel(cs->name, "O", o, o_ref, nq, tol_o);
  check_lse(cs->name, lse, lse_ref, nl, dt == FM_DTYPE_FP32 ? 2e-6 : 1e-5);
  check_rel(cs->name, "dQ", dqa, dq_ref, nq, tol_g);
  check_rel(cs->name, "dK", dk, dk_ref, nk, tol_g);
  check_rel(cs->name, "dV", dv, dv_ref, nk, tol_g);
  check_dead_rows(cs->name, cs, lse_ref, o, dqa, &ndead);
  printf("  %-28s %-5s Sq=%d Sk=%d B=%d Hq=%d Hkv=%d mh=%d D=%d block=%d density=%.3f sparsity=%.3f dead rows=%zu  "
         "fwd %.1f ms bwd %.1f ms\n",
         cs->name, FMDTypeName(dt), Sq, Sk, B, Hq, Hkv, cs->mh, D, p.mask.block, density, sparsity, ndead, 1e3 * (t1 - t0),
         1e3 * (t2 - t1));

  free(o); free(dk); free(dv); free(dqa); free(dq0);
  free(q); free(k); free(v); free(dout); free(tq); free(tk); free(tv); free(tdo); free(to); free(tdk); free(tdv); free(lse); free(dq);
  free(o_ref); free(lse_ref); free(dq_ref); free(dk_ref); free(dv_ref); free(dm.m);
  FMT_CALL(FMMaskDestroy(&mask));
}

/* ------------------------------------------------------------------ pieces over key ranges */
/* Columns [a, a + n) of a [B][Sk][H][D] tensor. */
static void *slice_cols(const void *t, FMDType dt, int B, int Sk, int H, int D, int a, int n)
{
  size_t es = FMDTypeSize(dt), row = (size_t)H * D * es;
  char *s = malloc((size_t)B * n * row + 1);
  for (int b = 0; b < B; b++) memcpy(s + (size_t)b * n * row, (const char *)t + ((size_t)b * Sk + a) * row, (size_t)n * row);
  return s;
}

static void run_pieces(FMContext ctx, const Case *cs, const int *cuts, int ncuts, uint64_t *seed)
{
  const int B = cs->B, Hq = cs->Hq, Hkv = cs->Hkv, D = cs->D, Sq = cs->Sq, Sk = cs->Sk;
  const size_t nq = (size_t)B * Sq * Hq * D, nk = (size_t)B * Sk * Hkv * D, nl = (size_t)B * Hq * Sq;
  const FMDType dt = cs->dt, f32 = FM_DTYPE_FP32;
  FMMask mask = make_mask(ctx, cs, seed);
  FMAttnProblem p, pp;
  double *q, *k, *v, *dout;
  void *tq = make_input(nq, dt, cs->amp, &q, seed), *tk = make_input(nk, dt, cs->amp, &k, seed);
  void *tv = make_input(nk, dt, 1.0, &v, seed), *tdo = make_input(nq, dt, 1.0, &dout, seed);
  void *to = poisoned(nq, dt);
  float *o32 = poisoned(nq, f32), *lse = poisoned(nl, f32), *lse2 = poisoned(nl, f32), *dq = calloc(nq, 4);
  float *dk = poisoned(nk, f32), *dv = poisoned(nk, f32);
  float *oacc = poisoned(nq, f32), *lacc = poisoned(nl, f32), *opart = poisoned(nq, f32), *lpart = poisoned(nl, f32);
  float *dqp = calloc(nq, 4), *dkp = poisoned(nk, f32), *dvp = poisoned(nk, f32);
  char name[96];

  snprintf(name, sizeof(name), "%s pieces(%d)", cs->name, ncuts + 1);
  make_problem(mask, cs, &p);
  FMT_CALL(FMCPUForward(&p, tq, tk, tv, o32, f32, lse));
  FMT_CALL(FMCPUForward(&p, tq, tk, tv, to, dt, lse2)); /* the final o in dtype, for backward */
  FMT_CALL(FMCPUBackward(&p, tq, tk, tv, to, lse, tdo, dq, dk, dv, f32));
  for (int c = 0; c <= ncuts; c++) {
    int a = c ? cuts[c - 1] : 0, e = c < ncuts ? cuts[c] : Sk, n = e - a;
    void *kp = slice_cols(tk, dt, B, Sk, Hkv, D, a, n), *vp = slice_cols(tv, dt, B, Sk, Hkv, D, a, n);
    float *dkc = poisoned((size_t)B * n * Hkv * D + 1, f32), *dvc = poisoned((size_t)B * n * Hkv * D + 1, f32);
    pp = p;
    pp.k0 = a; pp.nk = n;
    pp.nthreads = 3; /* more threads than cores, and an odd count */
    if (c == 0) FMT_CALL(FMCPUForward(&pp, tq, kp, vp, oacc, f32, lacc));
    else {
      FMT_CALL(FMCPUForward(&pp, tq, kp, vp, opart, f32, lpart));
      FMT_CALL(FMCPUMergePartial(&pp, oacc, lacc, opart, lpart));
    }
    FMT_CALL(FMCPUBackward(&pp, tq, kp, vp, to, lse, tdo, dqp, dkc, dvc, f32));
    size_t row = (size_t)Hkv * D;
    for (int b = 0; b < B; b++) {
      memcpy(dkp + ((size_t)b * Sk + a) * row, dkc + (size_t)b * n * row, sizeof(float) * n * row);
      memcpy(dvp + ((size_t)b * Sk + a) * row, dvc + (size_t)b * n * row, sizeof(float) * n * row);
    }
    free(kp); free(vp); free(dkc); free(dvc);
  }
  double *a1 = to_double(oacc, nq, f32), *a2 = to_double(o32, nq, f32), *l1 = to_double(lse, nl, f32);
  check_rel(name, "merged O vs whole", a1, a2, nq, 2e-6);
  check_lse(name, lacc, l1, nl, 1e-6);
  free(a1); free(a2);
  a1 = to_double(dqp, nq, f32); a2 = to_double(dq, nq, f32);
  check_rel(name, "summed dQ vs whole", a1, a2, nq, 2e-6);
  free(a1); free(a2);
  a1 = to_double(dkp, nk, f32); a2 = to_double(dk, nk, f32);
  check_rel(name, "concatenated dK vs whole", a1, a2, nk, 2e-6);
  free(a1); free(a2);
  a1 = to_double(dvp, nk, f32); a2 = to_double(dv, nk, f32);
  check_rel(name, "concatenated dV vs whole", a1, a2, nk, 2e-6);
  free(a1); free(a2); free(l1);
  printf("  %-28s %-5s cuts at", name, FMDTypeName(dt));
  for (int c = 0; c < ncuts; c++) printf(" %d", cuts[c]);
  printf("\n");

  free(q); free(k); free(v); free(dout); free(tq); free(tk); free(tv); free(tdo); free(to);
  free(o32); free(lse); free(lse2); free(dq); free(dk); free(dv); free(oacc); free(lacc); free(opart); free(lpart);
  free(dqp); free(dkp); free(dvp);
  FMT_CALL(FMMaskDestroy(&mask));
}

/* ------------------------------------------------------------------ query-row subsets */
static void run_rows(FMContext ctx, const Case *cs, const int *rows, int nr, const char *label, uint64_t *seed)
{
  const int B = cs->B, Hq = cs->Hq, Hkv = cs->Hkv, D = cs->D, Sq = cs->Sq, Sk = cs->Sk;
  const size_t nq = (size_t)B * Sq * Hq * D, nk = (size_t)B * Sk * Hkv * D, nl = (size_t)B * Hq * Sq;
  const size_t ns = (size_t)B * nr * Hq * D, nls = (size_t)B * Hq * nr, row = (size_t)Hq * D;
  const FMDType dt = cs->dt, f32 = FM_DTYPE_FP32;
  const double tol_g = dt == FM_DTYPE_FP32 ? 2e-5 : 1.5e-2;
  FMMask mask = make_mask(ctx, cs, seed);
  FMAttnProblem p, ps;
  Dense dm;
  double *q, *k, *v, *dout;
  void *tq = make_input(nq, dt, cs->amp, &q, seed), *tk = make_input(nk, dt, cs->amp, &k, seed);
  void *tv = make_input(nk, dt, 1.0, &v, seed), *tdo = make_input(nq, dt, 1.0, &dout, seed);
  void *to = poisoned(nq, dt), *tos = poisoned(ns, dt), *tdk = poisoned(nk, dt), *tdv = poisoned(nk, dt);
  float *lse = poisoned(nl, f32), *lses = poisoned(nls, f32), *dq = calloc(nq, 4), *dqs = calloc(ns, 4);
  size_t es = FMDTypeSize(dt);
  char *qs = malloc(ns * es), *dos = malloc(ns * es);
  char name[96];

  snprintf(name, sizeof(name), "%s rows(%s)", cs->name, label);
  make_problem(mask, cs, &p);
  dense_build(mask, &dm);
  for (int b = 0; b < B; b++)
    for (int r = 0; r < nr; r++) {
      memcpy(qs + ((size_t)b * nr + r) * row * es, (char *)tq + ((size_t)b * Sq + rows[r]) * row * es, row * es);
      memcpy(dos + ((size_t)b * nr + r) * row * es, (char *)tdo + ((size_t)b * Sq + rows[r]) * row * es, row * es);
    }
  FMT_CALL(FMCPUForward(&p, tq, tk, tv, to, dt, lse));
  FMT_CALL(FMCPUBackward(&p, tq, tk, tv, to, lse, tdo, dq, tdk, tdv, dt));
  ps = p;
  ps.nq = nr; ps.qrows = rows;
  FMT_CALL(FMCPUForward(&ps, qs, tk, tv, tos, dt, lses));
  /* backward of the subset, with the subset's own o (same values as the whole's rows) */
  FMT_CALL(FMCPUBackward(&ps, qs, tk, tv, tos, lses, dos, dqs, tdk, tdv, dt));

  /* forward and dQ: the corresponding rows of the whole */
  double *a = calloc(ns, 8), *r1 = calloc(ns, 8), *g = calloc(ns, 8), *r2 = calloc(ns, 8);
  size_t lbad = 0;
  for (int b = 0; b < B; b++)
    for (int r = 0; r < nr; r++)
      for (size_t x = 0; x < row; x++) {
        size_t is = ((size_t)b * nr + r) * row + x, iw = ((size_t)b * Sq + rows[r]) * row + x;
        a[is] = FMToFloat(tos, is, dt); r1[is] = FMToFloat(to, iw, dt);
        g[is] = dqs[is]; r2[is] = dq[iw];
      }
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hq; h++)
      for (int r = 0; r < nr; r++) {
        float x = lses[((size_t)b * Hq + h) * nr + r], y = lse[((size_t)b * Hq + h) * Sq + rows[r]];
        if (!(x == y || fabsf(x - y) <= 1e-6f * (1 + fabsf(y)))) lbad++;
      }
  check_rel(name, "O vs whole rows", a, r1, ns, 1e-6);
  FMT_CHECK(lbad == 0, "%s: %zu LSE entries differ from the whole's rows", name, lbad);
  check_rel(name, "dQ vs whole rows", g, r2, ns, 1e-5);

  /* dK, dV of the subset: the reference with dO zero outside the subset rows (they then add nothing) */
  double *o_ref = malloc(nq * 8), *lse_ref = malloc(nl * 8), *dq_ref = malloc(nq * 8), *dk_ref = malloc(nk * 8), *dv_ref = malloc(nk * 8);
  unsigned char *in = calloc((size_t)Sq, 1);
  for (int r = 0; r < nr; r++) in[rows[r]] = 1;
  for (int b = 0; b < B; b++)
    for (int i = 0; i < Sq; i++)
      if (!in[i])
        for (size_t x = 0; x < row; x++) dout[((size_t)b * Sq + i) * row + x] = 0;
  fmt_ref_attention(B, Hq, Hkv, D, Sq, Sk, cs->mh, (double)p.scale, dense_masked, &dm, q, k, v, o_ref, lse_ref, dout, dq_ref, dk_ref,
                    dv_ref);
  double *dk = to_double(tdk, nk, dt), *dv = to_double(tdv, nk, dt);
  check_rel(name, "dK vs reference", dk, dk_ref, nk, tol_g);
  check_rel(name, "dV vs reference", dv, dv_ref, nk, tol_g);
  printf("  %-28s %-5s %d of %d rows\n", name, FMDTypeName(dt), nr, Sq);

  free(a); free(r1); free(g); free(r2); free(o_ref); free(lse_ref); free(dq_ref); free(dk_ref); free(dv_ref); free(in); free(dk); free(dv);
  free(q); free(k); free(v); free(dout); free(tq); free(tk); free(tv); free(tdo); free(to); free(tos); free(tdk); free(tdv);
  free(lse); free(lses); free(dq); free(dqs); free(qs); free(dos); free(dm.m);
  FMT_CALL(FMMaskDestroy(&mask));
}

/* ------------------------------------------------------------------ conversions */
/* Independent reference: x rounded to 11 significant bits (quantum 2^-24 below 2^-14), ties to even. */
static double ref_half(double x)
{
  int e;
  double q, r;
  if (isnan(x) || isinf(x)) return x;
  if (fabs(x) < 0x1p-14) q = 0x1p-24;
  else { frexp(x, &e); q = ldexp(1.0, e - 11); }
  r = nearbyint(x / q) * q;
  if (fabs(r) > 65504) r = x > 0 ? INFINITY : -INFINITY;
  return r;
}

static double ref_bf16(double x)
{
  int e;
  double q, r;
  if (isnan(x) || isinf(x)) return x;
  if (fabs(x) < 0x1p-126) q = 0x1p-133;
  else { frexp(x, &e); q = ldexp(1.0, e - 8); }
  r = nearbyint(x / q) * q;
  if (fabs(r) >= 0x1p128) r = x > 0 ? INFINITY : -INFINITY;
  return r;
}

static void test_conversions(uint64_t *seed)
{
  size_t bad = 0;
  uint16_t buf[1];
  float specials[] = {0.0f, -0.0f, 1.0f, -2.5f, 65504.0f, 65519.99f, 65520.0f, -65520.0f, 1e30f, 3.3895314e38f, 0x1p-24f, 0x1p-25f,
                      0x1.8p-25f, 0x1p-14f, 0x1.ffcp-15f, 0x1p-130f, INFINITY, -INFINITY, 1.00048828125f, 1.00146484375f};
  int nsp = (int)(sizeof(specials) / sizeof(specials[0]));
  for (int i = 0; i < 200000 + nsp; i++) {
    float x;
    if (i < nsp) x = specials[i];
    else {
      uint32_t u = (uint32_t)fmt_next(seed);
      memcpy(&x, &u, 4);
      if (isnan(x)) continue;
    }
    FMFromFloat(buf, 0, FM_DTYPE_FP16, x);
    double h = FMToFloat(buf, 0, FM_DTYPE_FP16), rh = ref_half(x);
    FMFromFloat(buf, 0, FM_DTYPE_BF16, x);
    double bb = FMToFloat(buf, 0, FM_DTYPE_BF16), rb = ref_bf16(x);
    if (!(h == rh && signbit(h) == signbit(rh))) {
      if (bad < 5) fprintf(stderr, "fp16(%a) = %a, expected %a\n", x, h, rh);
      bad++;
    }
    if (!(bb == rb && signbit(bb) == signbit(rb))) {
      if (bad < 5) fprintf(stderr, "bf16(%a) = %a, expected %a\n", x, bb, rb);
      bad++;
    }
    float f32[1];
    FMFromFloat(f32, 0, FM_DTYPE_FP32, x);
    if (FMToFloat(f32, 0, FM_DTYPE_FP32) != x) bad++;
  }
  FMT_CHECK(bad == 0, "%zu conversions differ from round-to-nearest-even", bad);
  FMFromFloat(buf, 0, FM_DTYPE_FP16, NAN);
  FMT_CHECK(isnan(FMToFloat(buf, 0, FM_DTYPE_FP16)), "fp16 NaN does not round-trip");
  FMFromFloat(buf, 0, FM_DTYPE_BF16, -NAN);
  FMT_CHECK(isnan(FMToFloat(buf, 0, FM_DTYPE_BF16)), "bf16 NaN does not round-trip");
  /* every fp16 and bf16 value survives a round trip through float */
  size_t rt = 0;
  for (uint32_t u = 0; u < 65536; u++) {
    for (int t = 0; t < 2; t++) {
      FMDType dt = t ? FM_DTYPE_BF16 : FM_DTYPE_FP16;
      uint16_t a = (uint16_t)u, b2[1];
      float x = FMToFloat(&a, 0, dt);
      FMFromFloat(b2, 0, dt, x);
      if (isnan(x) ? !isnan(FMToFloat(b2, 0, dt)) : b2[0] != a) rt++;
    }
  }
  FMT_CHECK(rt == 0, "%zu bf16/fp16 values do not round-trip through float", rt);
  printf("  conversions: fp16/bf16 rounding and round trips checked\n");
}

/* ------------------------------------------------------------------ argument errors */
static void test_errors(FMContext ctx, uint64_t *seed)
{
  Case cs = {"errors", FMMASKCAUSAL, UB_NONE, 0, 64, 64, 1, 1, 2, 1, 8, FM_DTYPE_FP32, 0, 1.0};
  FMMask mask = make_mask(ctx, &cs, seed);
  FMAttnProblem p, bad;
  float x[64 * 2 * 8], l[128];
  int rows[2] = {3, 64};
  make_problem(mask, &cs, &p);
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  bad = p; bad.head_dim = 12;
  FMT_EXPECT_ERR(FMCPUForward(&bad, x, x, x, x, FM_DTYPE_FP32, l), FM_ERR_ARG_OUTOFRANGE, "head_dim = 12");
  bad = p; bad.heads_q = 3; bad.heads_kv = 2;
  FMT_EXPECT_ERR(FMCPUForward(&bad, x, x, x, x, FM_DTYPE_FP32, l), FM_ERR_ARG_INCOMP, "heads_q = 3");
  bad = p; bad.k0 = 10;
  FMT_EXPECT_ERR(FMCPUBackward(&bad, x, x, x, x, l, x, x, x, x, FM_DTYPE_FP32), FM_ERR_ARG_OUTOFRANGE, "[10, 74)");
  bad = p; bad.nq = 2; bad.qrows = rows;
  FMT_EXPECT_ERR(FMCPUForward(&bad, x, x, x, x, FM_DTYPE_FP32, l), FM_ERR_ARG_OUTOFRANGE, "qrows[1] = 64");
  FMT_EXPECT_ERR(FMCPUForward(&p, NULL, x, x, x, FM_DTYPE_FP32, l), FM_ERR_ARG_NULL, "q");
  FMT_EXPECT_ERR(FMCPUForward(&p, x, x, x, x, (FMDType)7, l), FM_ERR_ARG_WRONG, "o_dtype = 7");
  FMT_CALL(FMPopErrorHandler());

  /* an empty key range: O = 0, LSE = -inf; backward adds nothing */
  for (int i = 0; i < 64 * 2 * 8; i++) x[i] = 0.25f * (float)((i % 7) + 1);
  float o[64 * 2 * 8], dqa[64 * 2 * 8];
  memset(o, 0xFF, sizeof(o));
  memset(l, 0xFF, sizeof(l));
  bad = p; bad.k0 = 20; bad.nk = 0;
  FMT_CALL(FMCPUForward(&bad, x, NULL, NULL, o, FM_DTYPE_FP32, l));
  size_t nz = 0;
  for (int i = 0; i < 64 * 2 * 8; i++) nz += o[i] != 0;
  for (int i = 0; i < 2 * 64; i++) nz += l[i] != -INFINITY;
  FMT_CHECK(nz == 0, "empty key range: %zu entries of O / LSE are not 0 / -inf", nz);
  memcpy(dqa, x, sizeof(dqa));
  FMT_CALL(FMCPUBackward(&bad, x, NULL, NULL, o, l, x, dqa, NULL, NULL, FM_DTYPE_FP32));
  FMT_CHECK(!memcmp(dqa, x, sizeof(dqa)), "empty key range: backward changed dq_acc");
  /* no query rows: nothing to do, but dK, dV are still written (zeros) */
  float dk[64 * 8], dv[64 * 8];
  memset(dk, 0xFF, sizeof(dk));
  memset(dv, 0xFF, sizeof(dv));
  bad = p; bad.nq = 0;
  FMT_CALL(FMCPUForward(&bad, NULL, x, x, NULL, FM_DTYPE_FP32, NULL));
  FMT_CALL(FMCPUBackward(&bad, NULL, x, x, NULL, NULL, NULL, NULL, dk, dv, FM_DTYPE_FP32));
  nz = 0;
  for (int i = 0; i < 64 * 8; i++) nz += dk[i] != 0 || dv[i] != 0;
  FMT_CHECK(nz == 0, "no query rows: %zu entries of dK / dV are not 0", nz);
  FMT_CALL(FMMaskDestroy(&mask));
  printf("  argument errors and empty ranges: checked\n");
}

int main(int argc, char **argv)
{
  FMContext ctx;
  uint64_t seed;
  int quick = 0;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_cpu_attn: the exact CPU backend against float64"));
  for (int i = 1; i < argc; i++) quick |= !strcmp(argv[i], "-quick");
  seed = fmt_seed();
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  FMT_CALL(FMContextSetUp(ctx));

  test_conversions(&seed);
  test_errors(ctx, &seed);

  const FMDType F32 = FM_DTYPE_FP32, BF = FM_DTYPE_BF16, F16 = FM_DTYPE_FP16;
  /* name, type, user bounds, causal, Sq, Sk, mh, B, Hq, Hkv, D, dtype, block, amp */
  const Case cases[] = {
    {"full", FMMASKFULL, UB_NONE, 0, 200, 200, 1, 2, 2, 1, 64, F32, 0, 2.0},
    {"causal", FMMASKCAUSAL, UB_NONE, 0, 333, 333, 1, 1, 2, 2, 64, BF, 0, 2.0},
    {"sliding_window", FMMASKSLIDINGWINDOW, UB_NONE, 0, 333, 333, 1, 1, 2, 1, 64, F16, 64, 2.0},
    {"causal_document", FMMASKCAUSALDOCUMENT, UB_NONE, 0, 333, 333, 1, 2, 2, 1, 64, F32, 0, 3.0},
    {"document", FMMASKDOCUMENT, UB_NONE, 0, 333, 333, 1, 1, 2, 1, 64, BF, 32, 2.0},
    {"share_question", FMMASKSHAREQUESTION, UB_NONE, 0, 333, 333, 1, 1, 2, 1, 64, F32, 0, 2.0},
    {"global_sliding_window", FMMASKGLOBALSLIDINGWINDOW, UB_NONE, 0, 333, 333, 1, 1, 2, 1, 64, F16, 0, 2.0},
    {"causal_blockwise", FMMASKCAUSALBLOCKWISE, UB_NONE, 0, 333, 333, 1, 1, 2, 1, 64, F32, 64, 2.0},
    {"prefix_lm_document", FMMASKPREFIXLMDOCUMENT, UB_NONE, 0, 333, 333, 1, 1, 2, 1, 64, BF, 0, 2.0},
    {"prefix_lm_causal", FMMASKPREFIXLMCAUSAL, UB_NONE, 0, 333, 333, 1, 1, 2, 1, 64, F32, 256, 2.0},
    {"qk_sparse", FMMASKQKSPARSE, UB_NONE, 0, 333, 333, 1, 1, 2, 1, 64, F16, 0, 2.0},
    {"random_eviction", FMMASKRANDOMEVICTION, UB_NONE, 0, 333, 333, 2, 1, 4, 2, 64, F32, 0, 2.0},
    /* user bounds, per-head masks */
    {"bounds per-head", FMMASKBOUNDS, UB_RANDOM, 0, 200, 200, 2, 1, 4, 2, 64, F32, 0, 2.0},
    {"bounds runs causal", FMMASKBOUNDS, UB_RUNS, 1, 333, 333, 2, 2, 4, 2, 64, BF, 32, 2.0},
    {"bounds runs", FMMASKBOUNDS, UB_RUNS, 0, 333, 333, 2, 1, 2, 2, 64, F32, 0, 3.0},
    {"bounds dead rows", FMMASKBOUNDS, UB_DEADROWS, 0, 200, 200, 2, 1, 4, 2, 64, F16, 0, 2.0},
    /* GQA 4:1 */
    {"causal_document GQA 4:1", FMMASKCAUSALDOCUMENT, UB_NONE, 0, 256, 256, 1, 1, 8, 2, 64, BF, 0, 2.0},
    /* S_q != S_k */
    {"causal Sq<Sk", FMMASKCAUSAL, UB_NONE, 0, 100, 333, 1, 1, 2, 1, 64, F32, 0, 2.0},
    {"causal Sq>Sk (dead rows)", FMMASKCAUSAL, UB_NONE, 0, 333, 150, 1, 1, 2, 1, 64, F32, 0, 2.0},
    {"bounds causal Sq>Sk", FMMASKBOUNDS, UB_RUNS, 1, 250, 140, 1, 1, 2, 1, 64, BF, 0, 2.0},
    {"sliding_window Sq<Sk", FMMASKSLIDINGWINDOW, UB_NONE, 0, 130, 300, 1, 1, 2, 1, 64, F16, 0, 2.0},
    /* head dims */
    {"causal_document D=128", FMMASKCAUSALDOCUMENT, UB_NONE, 0, 200, 200, 1, 1, 2, 1, 128, F32, 0, 2.0},
    {"causal D=256", FMMASKCAUSAL, UB_NONE, 0, 200, 200, 1, 1, 2, 1, 256, BF, 0, 1.0},
    {"document D=72", FMMASKDOCUMENT, UB_NONE, 0, 200, 200, 1, 1, 2, 1, 72, F32, 0, 2.0},
    {"full D=8 tiny", FMMASKFULL, UB_NONE, 0, 5, 3, 1, 1, 1, 1, 8, F32, 0, 2.0},
  };
  const int ncases = (int)(sizeof(cases) / sizeof(cases[0]));
  for (int c = 0; c < ncases; c++)
    if (!quick || c % 4 == 0) run_case(ctx, &cases[c], &seed);

  /* the narrower kernels (4-float vectors: any CPU; 8: AVX2) on a few cases; the default run
     above used the widest this CPU has */
  {
    const Case wc[] = {
      {"document D=72", FMMASKDOCUMENT, UB_NONE, 0, 200, 200, 1, 1, 2, 1, 72, F32, 0, 2.0},
      {"bounds runs causal Sq>Sk", FMMASKBOUNDS, UB_RUNS, 1, 250, 140, 2, 1, 4, 2, 64, BF, 64, 2.0},
      {"causal_document GQA 4:1", FMMASKCAUSALDOCUMENT, UB_NONE, 0, 256, 256, 1, 1, 8, 2, 64, F16, 0, 2.0},
    };
    const char *widths[] = {"4", "8"};
    for (int w = 0; w < 2; w++) {
      char name[3][80];
      Case cw[3];
      FMContext wctx = options_context("-fm_cpu_vector_width", widths[w], "0");
      FMT_CHECK(wctx->kopts.cpu_vector_width == atoi(widths[w]), "-fm_cpu_vector_width %s read as %d", widths[w],
                wctx->kopts.cpu_vector_width);
      for (int c = 0; c < 3; c++) {
        cw[c] = wc[c];
        snprintf(name[c], sizeof(name[c]), "%s, width %s", wc[c].name, widths[w]);
        cw[c].name = name[c];
        run_case(wctx, &cw[c], &seed);
      }
      FMT_CALL(FMContextDestroy(&wctx));
    }
  }

  /* one (batch, kv head) slice per staging group (-fm_cpu_stage_bytes tiny): B = 2, heads_kv = 2 */
  {
    const Case sc[] = {
      {"bounds runs causal, 1 slice/group", FMMASKBOUNDS, UB_RUNS, 1, 200, 333, 2, 2, 4, 2, 64, F16, 64, 2.0},
      {"causal_document, 1 slice/group", FMMASKCAUSALDOCUMENT, UB_NONE, 0, 256, 256, 1, 2, 6, 3, 72, F32, 0, 2.0},
    };
    FMContext sctx = options_context("-fm_cpu_stage_bytes", "1", "0");
    FMT_CHECK(sctx->kopts.cpu_stage_bytes == 1, "-fm_cpu_stage_bytes 1 read as %zu", sctx->kopts.cpu_stage_bytes);
    run_case(sctx, &sc[0], &seed);
    run_case(sctx, &sc[1], &seed);
    FMT_CALL(FMContextDestroy(&sctx));
  }

  /* key ranges split into pieces (cuts not aligned to the 128-column tiles or the blocks) */
  {
    const Case pc[] = {
      {"causal_document", FMMASKCAUSALDOCUMENT, UB_NONE, 0, 333, 333, 1, 2, 4, 2, 64, F32, 0, 2.0},
      {"bounds runs causal", FMMASKBOUNDS, UB_RUNS, 1, 300, 333, 2, 1, 4, 2, 64, BF, 64, 2.0},
      {"causal Sq>Sk", FMMASKCAUSAL, UB_NONE, 0, 333, 200, 1, 1, 2, 1, 72, F16, 0, 2.0},
    };
    const int cuts0[] = {100, 250}, cuts1[] = {128}, cuts2[] = {7, 150};
    run_pieces(ctx, &pc[0], cuts0, 2, &seed);
    run_pieces(ctx, &pc[1], cuts1, 1, &seed);
    run_pieces(ctx, &pc[2], cuts2, 2, &seed);
  }

  /* query-row subsets: every other chunk of 64 rows, and every third row (not contiguous) */
  {
    const Case rc[] = {
      {"causal", FMMASKCAUSAL, UB_NONE, 0, 333, 333, 1, 1, 4, 2, 64, F32, 0, 2.0},
      {"bounds runs", FMMASKBOUNDS, UB_RUNS, 1, 333, 333, 2, 1, 4, 2, 64, BF, 0, 2.0},
    };
    int rows[333], n = 0, m = 0, rows3[333];
    for (int i = 0; i < 333; i++) {
      if ((i / 64) % 2 == 0) rows[n++] = i;
      if (i % 3 == 1) rows3[m++] = 332 - i; /* also out of order */
    }
    run_rows(ctx, &rc[0], rows, n, "chunks of 64", &seed);
    run_rows(ctx, &rc[0], rows3, m, "every 3rd", &seed);
    run_rows(ctx, &rc[1], rows, n, "chunks of 64", &seed);
  }

  FMT_CALL(FMContextDestroy(&ctx));
  int rc = fmt_finish("test_cpu_attn");
  FMT_CALL(FMFinalize());
  return rc;
}
