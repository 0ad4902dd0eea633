/*
 * test_gpu_fwd - the CUDA forward (FMCudaForward: Hopper kernel and SIMT fallback) against a
 * float64 reference computed here, on fresh random inputs with O and LSE poisoned (NaN) before
 * each run. Covers the 12 benchmark masks (the library's builders, per-head ones for
 * random_eviction), random per-head user bounds (type "bounds") with fully masked rows, GQA 4:1
 * and 2:1, S_q != S_k (bottom-right causal), odd lengths (1000, 4099), head dims 64/128/256
 * (on sm 90 the Hopper kernel must run them: path checked; d = 64's 192-row tiles also on the 12
 * masks at 577 rows, and on tiles of 1, 40 and 130 rows; full and causal on the wide kernel's
 * 80-key tiles at d = 256 and 176-key tiles at d = 128 under the grid schedule, the other masks,
 * and causal with its empty vectors uploaded ("user_causal"), on the block-list kernels),
 * bf16 and fp16, and the SIMT fallback forced through -fm_cuda_fallback on shapes the Hopper
 * kernel covers. The persistent Hopper forward (-fm_sm90_schedule static / dynamic) runs the
 * masks and shapes again (S = 1, 130, 4099, B*H = 1, rows with no visible key, GQA, fp32 O and
 * the merge), also with 2 or 3 CTAs so that each CTA runs many tiles (path 2 checked on sm 90;
 * d = 256 must stay on the one-CTA-per-tile kernel). The reference masks each element from the bounds FMMaskGetBounds returns, by
 * the format's definition. Rows are sampled for the reference on long sequences; O and LSE are
 * checked for NaN everywhere. Non-finite inputs (a NaN in Q, Inf in K, +-1e30 in a Q row) give
 * the CPU backend's non-finite rows and leave the others as the CPU computes them; the fp32 merge
 * keeps NaN rows NaN (run_nonfinite).
 * Pass: ||O - ref|| / ||ref|| <= 2e-2 (bf16) / 5e-3 (fp16) (fails on an all-zero or scaled O);
 * |LSE - ref| <= 1e-3 (1 + |ref|) for every dtype (the kernels compute LSE in fp32), plus at d = 64
 * the rounding of the probabilities the Hopper kernel sums (fmt_lse_round: 2e-3 bf16, 4.9e-4 fp16);
 * LSE = -inf and O = 0 exactly on rows with no visible key. Exit 77 when no GPU (no device or no
 * driver at all); a CUDA error from the device count (a broken driver) is a hard error (99).
 * Usage: test_gpu_fwd [-quick] [-case N]
 */
#include <flashmask.h>
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fmtest.h"

#if !FM_HAVE_CUDA
FMT_SKIP_MAIN("built without CUDA")
#else
extern int FMCudaLastPath_Private;
static int dev_sm; /* device 0's compute capability: on sm 90 the Hopper kernel must take d = 64, 128, 256 */

/* The 12 benchmark masks (in the order of the FlashMask paper), then user bounds. */
enum {
  M_FULL = 0, M_CAUSAL, M_SLIDING_WINDOW, M_CAUSAL_DOCUMENT, M_DOCUMENT, M_SHARE_QUESTION, M_GLOBAL_SLIDING_WINDOW,
  M_CAUSAL_BLOCKWISE, M_PREFIX_LM_DOCUMENT, M_PREFIX_LM_CAUSAL, M_QK_SPARSE, M_RANDOM_EVICTION, M_USER_RANDOM, M_USER_CAUSAL, M_N
};
static const FMMaskType mtypes[M_USER_RANDOM] = {
  FMMASKFULL, FMMASKCAUSAL, FMMASKSLIDINGWINDOW, FMMASKCAUSALDOCUMENT, FMMASKDOCUMENT, FMMASKSHAREQUESTION,
  FMMASKGLOBALSLIDINGWINDOW, FMMASKCAUSALBLOCKWISE, FMMASKPREFIXLMDOCUMENT, FMMASKPREFIXLMCAUSAL, FMMASKQKSPARSE,
  FMMASKRANDOMEVICTION};
static const char *mname(int t) { return t == M_USER_RANDOM ? "user_random" : t == M_USER_CAUSAL ? "user_causal" : mtypes[t]; }

/* A causal mask of type "bounds" whose four vectors (given, so uploaded) hide nothing: the causal
   mask on the kernels that read bound vectors (the block-list kernels), where the builders' causal
   mask, which carries none, takes the wide kernel at d = 128 and 256. */
static void set_user_causal(FMMask m, int Sk, int heads)
{
  int32_t *a = (int32_t *)calloc(4 * (size_t)Sk, sizeof(int32_t));
  FMT_CALL(FMMaskSetType(m, FMMASKBOUNDS));
  FMT_CALL(FMMaskSetCausal(m, FM_TRUE));
  for (int h = 0; h < heads; h++) FMT_CALL(FMMaskSetBounds(m, h, a, a + Sk, a + 2 * Sk, a + 3 * Sk));
  free(a);
}

typedef struct {
  int mask, B, Sq, Sk, Hq, Hkv, mh, D;
  FMDType dt;
  int force_fallback;
  int sched, ctas; /* -fm_sm90_schedule (FM_GPU_SCHED_*: 0 grid, 1 static, 2 dynamic), -fm_sm90_ctas */
} Case;

static const char *const sched_name[3] = {"grid", "static", "dynamic"};

/* The path FMCudaLastPath_Private must report on sm 90 (1: one CTA per tile, 2: persistent, 3: the
   wide kernel, which full and causal masks take at d = 256, and at d = 128 under the grid
   schedule: the builders give them no bound vectors). */
static int sm90_path(int sched, int D, int mask)
{
  const int dense = mask == M_FULL || mask == M_CAUSAL;
  if (D == 256) return dense ? 3 : 1;
  if (sched) return 2;
  return D == 128 && dense ? 3 : 1;
}
static const char *path_name(int path) { return path == 3 ? "sm90w" : path == 2 ? "sm90p" : path == 1 ? "sm90" : "fallback"; }

static double uni(uint64_t *s) { return ((double)(fmt_next(s) >> 11) / 9007199254740992.0) * 2.0 - 1.0; }
static int uint_in(uint64_t *s, int lo, int hi) { return lo + (int)(fmt_next(s) % (uint64_t)(hi - lo + 1)); } /* [lo, hi] */
static int32_t clip(long x, int Sq) { return (int32_t)(x < 0 ? 0 : x > Sq ? Sq : x); }

/*
 * The mask of a case, set up: a builder type with the case's seed, or type "bounds" with random
 * intervals per column and head plus a band of rows masked in every column (so some rows see
 * no key), and some columns without a lower interval.
 */
static FMMask build_mask(FMContext ctx, const Case *c, uint64_t seed)
{
  FMMask m;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, c->Sq, c->Sk, c->mh));
  if (c->mask == M_USER_RANDOM) {
    const int Sq = c->Sq, Sk = c->Sk;
    int32_t *a = (int32_t *)malloc(sizeof(int32_t) * 4 * (size_t)Sk), *b = a + Sk, *u = b + Sk, *e = u + Sk;
    FMT_CALL(FMMaskSetType(m, FMMASKBOUNDS));
    for (int h = 0; h < c->mh; h++) {
      uint64_t hs = seed * 7919u + 31 * (uint64_t)(h + 1);
      const int r0 = Sq / 3 + h, r1 = r0 + 5 + h;
      for (int j = 0; j < Sk; j++) {
        const int x = uint_in(&hs, 0, Sq), y = uint_in(&hs, 0, Sq);
        a[j] = x < y ? x : y;
        b[j] = x < y ? y : x;
        if (fmt_next(&hs) % 4 == 0) b[j] = a[j]; /* no lower interval in this column */
        u[j] = clip(r0, Sq);
        e[j] = clip(r1, Sq);
      }
      FMT_CALL(FMMaskSetBounds(m, h, a, b, u, e));
    }
    free(a);
  } else if (c->mask == M_USER_CAUSAL) {
    set_user_causal(m, c->Sk, c->mh);
  } else {
    FMT_CALL(FMMaskSetType(m, mtypes[c->mask]));
    FMT_CALL(FMMaskSetSeed(m, (unsigned long)seed));
  }
  FMT_CALL(FMMaskSetUp(m));
  return m;
}

/* Whether row i may not attend key j (the format's definition) from one head's bound vectors. */
static int masked(const int32_t *const bv[4], int causal, int Sq, int Sk, int i, int j)
{
  return (bv[0][j] <= i && i < bv[1][j]) || (bv[2][j] <= i && i < bv[3][j]) || (causal && j > i + (Sk - Sq));
}

static int run_case(FMContext ctx, FMContext fctx, const Case *c, uint64_t seed, int verbose)
{
  const int B = c->B, Sq = c->Sq, Sk = c->Sk, Hq = c->Hq, Hkv = c->Hkv, D = c->D, mh = c->mh;
  const size_t nq = (size_t)B * Sq * Hq * D, nk = (size_t)B * Sk * Hkv * D, nl = (size_t)B * Hq * Sq;
  const size_t es = FMDTypeSize(c->dt);
  const float scale = 1.0f / sqrtf((float)D);
  const int32_t *(*hb)[4] = malloc(sizeof(*hb) * (size_t)mh); /* [mask head][lts, lte, uts, ute] */
  FMMask mask;
  FMBool causal_b = FM_FALSE;
  void *hq_, *hk, *hv, *ho, *dq, *dk, *dv, *dout, *dmask = NULL;
  float *hl, *dl;
  uint64_t s = seed;
  int causal, fails = 0, path;
  FMMaskDesc md;
  FMAttnProblem p;
  double num = 0, den = 0, lse_err = 0;
  int nan_o = 0, nan_l = 0, bad_masked = 0, rows_checked = 0, not_grid = 0, vs_grid = 0;

  mask = build_mask(ctx, c, seed);
  for (int h = 0; h < mh; h++) FMT_CALL(FMMaskGetBounds(mask, h, &hb[h][0], &hb[h][1], &hb[h][2], &hb[h][3], NULL, &causal_b));
  causal = causal_b == FM_TRUE;
  hq_ = malloc(nq * es);
  hk = malloc(nk * es);
  hv = malloc(nk * es);
  ho = malloc(nq * es);
  hl = (float *)malloc(nl * sizeof(float));
  for (size_t i = 0; i < nq; i++) FMFromFloat(hq_, i, c->dt, (float)(1.5 * uni(&s)));
  for (size_t i = 0; i < nk; i++) FMFromFloat(hk, i, c->dt, (float)(1.5 * uni(&s)));
  for (size_t i = 0; i < nk; i++) FMFromFloat(hv, i, c->dt, (float)uni(&s));
  FMT_CALL(FMCudaMalloc(nq * es, &dq));
  FMT_CALL(FMCudaMalloc(nk * es, &dk));
  FMT_CALL(FMCudaMalloc(nk * es, &dv));
  FMT_CALL(FMCudaMalloc(nq * es, &dout));
  FMT_CALL(FMCudaMalloc(nl * sizeof(float), (void **)&dl));
  FMT_CALL(FMCudaMemcpyH2D(dq, hq_, nq * es, NULL));
  FMT_CALL(FMCudaMemcpyH2D(dk, hk, nk * es, NULL));
  FMT_CALL(FMCudaMemcpyH2D(dv, hv, nk * es, NULL));
  /* poison */
  memset(ho, 0xff, nq * es);
  memset(hl, 0xff, nl * sizeof(float));
  FMT_CALL(FMCudaMemcpyH2D(dout, ho, nq * es, NULL));
  FMT_CALL(FMCudaMemcpyH2D(dl, hl, nl * sizeof(float), NULL));

  FMT_CALL(FMMaskGetDesc_Private(mask, &md));
  FMT_CALL(FMCudaMaskUpload(&md, &dmask));
  memset(&p, 0, sizeof(p));
  p.batch = B;
  p.heads_q = Hq;
  p.heads_kv = Hkv;
  p.head_dim = D;
  p.dtype = c->dt;
  p.scale = scale;
  p.nq = Sq;
  p.qrows = NULL;
  p.k0 = 0;
  p.nk = Sk;
  p.mask = md;
  p.opts = (c->force_fallback ? fctx : ctx)->kopts; /* as FMPlanGetProblem_Private; fctx has -fm_cuda_fallback */
  p.opts.sm90_schedule = c->sched;
  p.opts.sm90_ctas = c->ctas;
  FMT_CALL(FMCudaForward(&p, dmask, dq, dk, dv, dout, dl, NULL));
  path = FMCudaLastPath_Private;
  FMT_CALL(FMCudaMemcpyD2H(ho, dout, nq * es, NULL));
  FMT_CALL(FMCudaMemcpyD2H(hl, dl, nl * sizeof(float), NULL));
  if (path == 2) {
    /* the persistent kernel computes every tile as the one-tile kernel does (same block list,
       same order): O and LSE must be identical bit for bit, on every row (poisoned again first) */
    void *go = malloc(nq * es);
    float *gl = (float *)malloc(nl * sizeof(float));
    for (size_t i = 0; i < nq; i++) FMFromFloat(go, i, c->dt, NAN);
    for (size_t i = 0; i < nl; i++) gl[i] = NAN;
    FMT_CALL(FMCudaMemcpyH2D(dout, go, nq * es, NULL));
    FMT_CALL(FMCudaMemcpyH2D(dl, gl, nl * sizeof(float), NULL));
    p.opts.sm90_schedule = 0;
    FMT_CALL(FMCudaForward(&p, dmask, dq, dk, dv, dout, dl, NULL));
    FMT_CALL(FMCudaMemcpyD2H(go, dout, nq * es, NULL));
    FMT_CALL(FMCudaMemcpyD2H(gl, dl, nl * sizeof(float), NULL));
    /* bit for bit against the same tiles; where the grid runs the wide kernel (d = 128 full and
       causal: 176-key tiles, another order of the sums) within the reference's tolerance, still on
       every row: ||O - O_wide|| / ||O_wide|| and each row's LSE */
    vs_grid = FMCudaLastPath_Private == 1;
    if (vs_grid) not_grid = memcmp(go, ho, nq * es) != 0 || memcmp(gl, hl, nl * sizeof(float)) != 0;
    else {
      double dn = 0, dd = 0;
      for (size_t i = 0; i < nq; i++) {
        const double x = FMToFloat(ho, i, c->dt), y = FMToFloat(go, i, c->dt);
        dn += (x - y) * (x - y);
        dd += y * y;
      }
      for (size_t i = 0; i < nl; i++)
        not_grid |= !(hl[i] == gl[i] || fabsf(hl[i] - gl[i]) <= 1e-3f * (1 + fabsf(gl[i])));
      not_grid |= !(sqrt(dn / (dd > 0 ? dd : 1)) <= (c->dt == FM_DTYPE_BF16 ? 2e-2 : 5e-3));
    }
    free(go);
    free(gl);
  }

  /* NaN anywhere fails (the poison also catches unwritten elements) */
  for (size_t i = 0; i < nq; i++) nan_o += !isfinite(FMToFloat(ho, i, c->dt));
  for (size_t i = 0; i < nl; i++) nan_l += isnan(hl[i]) || hl[i] == INFINITY;

  /* float64 reference on sampled rows */
  {
    double *srow = (double *)malloc(sizeof(double) * Sk), *orow = (double *)malloc(sizeof(double) * D);
    int nrows = Sq <= 300 ? Sq : 40;
    uint64_t rs = seed ^ 0xabcdefull;
    for (int b = 0; b < B; b++)
      for (int h = 0; h < Hq; h++) {
        const int hk_ = h / (Hq / Hkv), hm = h / (Hq / mh);
        for (int r = 0; r < nrows; r++) {
          int i;
          if (Sq <= 300) i = r;
          else if (r < 4) i = r;
          else if (r < 8) i = Sq - 1 - (r - 4);
          else if (r < 12) i = ((r - 8) * 128 + 127) < Sq ? (r - 8) * 128 + 127 : Sq / 2;
          else i = uint_in(&rs, 0, Sq - 1);
          double mx = -INFINITY, l = 0;
          for (int j = 0; j < Sk; j++) {
            if (masked(hb[hm], causal, Sq, Sk, i, j)) {
              srow[j] = -INFINITY;
              continue;
            }
            double a = 0;
            for (int d = 0; d < D; d++)
              a += (double)FMToFloat(hq_, (((size_t)b * Sq + i) * Hq + h) * D + d, c->dt) *
                   (double)FMToFloat(hk, (((size_t)b * Sk + j) * Hkv + hk_) * D + d, c->dt);
            srow[j] = a * scale;
            if (srow[j] > mx) mx = srow[j];
          }
          for (int d = 0; d < D; d++) orow[d] = 0;
          if (mx != -INFINITY)
            for (int j = 0; j < Sk; j++) {
              if (srow[j] == -INFINITY) continue;
              double pj = exp(srow[j] - mx);
              l += pj;
              for (int d = 0; d < D; d++) orow[d] += pj * FMToFloat(hv, (((size_t)b * Sk + j) * Hkv + hk_) * D + d, c->dt);
            }
          const float got_l = hl[((size_t)b * Hq + h) * Sq + i];
          if (l == 0) {
            int ok = got_l == -INFINITY;
            for (int d = 0; d < D; d++) ok &= FMToFloat(ho, (((size_t)b * Sq + i) * Hq + h) * D + d, c->dt) == 0.0f;
            bad_masked += !ok;
          } else {
            double ref_l = mx + log(l), e = fabs(got_l - ref_l);
            e = e / (1e-3 * (1 + fabs(ref_l)) + fmt_lse_round(c->dt, D)); /* <= 1 passes: fp32, 1e-3 relative, and the d = 64 sums' rounding */
            if (isnan(e)) e = INFINITY;
            if (e > lse_err) lse_err = e;
            for (int d = 0; d < D; d++) {
              double ref = orow[d] / l, got = FMToFloat(ho, (((size_t)b * Sq + i) * Hq + h) * D + d, c->dt);
              num += (got - ref) * (got - ref);
              den += ref * ref;
            }
          }
          rows_checked++;
        }
      }
    free(srow);
    free(orow);
  }
  {
    const double rel = den > 0 ? sqrt(num / den) : 0, tol = c->dt == FM_DTYPE_BF16 ? 2e-2 : 5e-3;
    /* and a forced fallback must have run the fallback, an unforced case on sm 90 the Hopper kernel */
    const int want_sm90 = dev_sm == 90 && !c->force_fallback && (D == 64 || D == 128 || D == 256);
    const int ok = nan_o == 0 && nan_l == 0 && bad_masked == 0 && rel <= tol && lse_err <= 1.0 && !isnan(rel) &&
                   !(c->force_fallback && path != 0) && !(want_sm90 && path != sm90_path(c->sched, D, c->mask)) && !not_grid;
    if (!ok || verbose)
      printf("%-4s %-22s B=%d Sq=%-5d Sk=%-5d Hq=%d Hkv=%d mh=%d D=%-3d %s %s/%d path=%-8s rel=%.2e lse/tol=%.2f nanO=%d "
             "nanL=%d badmasked=%d rows=%d%s\n",
             ok ? "ok" : "FAIL", mname(c->mask), B, Sq, Sk, Hq, Hkv, mh, D, FMDTypeName(c->dt), sched_name[c->sched], c->ctas,
             path_name(path), rel, lse_err, nan_o, nan_l, bad_masked, rows_checked,
             path != 2 ? "" : !vs_grid ? (not_grid ? " NOT within tolerance of the wide grid kernel's" : " within tolerance of the wide grid kernel's")
                       : not_grid ? " NOT bitwise the grid kernel's" : " bitwise the grid kernel's");
    FMT_CHECK(ok, "case %s D=%d %s schedule %s failed", mname(c->mask), D, FMDTypeName(c->dt), sched_name[c->sched]);
    fails = !ok;
  }
  FMT_CALL(FMCudaMaskFree(dmask));
  FMCudaFree(dq);
  FMCudaFree(dk);
  FMCudaFree(dv);
  FMCudaFree(dout);
  FMCudaFree(dl);
  free(hq_);
  free(hk);
  free(hv);
  free(ho);
  free(hl);
  free(hb);
  FMT_CALL(FMMaskDestroy(&mask));
  return fails;
}

/* A mask of type "bounds" of one head: every row hidden from every key (all = 1), else none. */
static FMMask plain_mask(FMContext ctx, int Sq, int Sk, int all)
{
  FMMask m;
  int32_t *a = (int32_t *)malloc(sizeof(int32_t) * 4 * (size_t)Sk), *b = a + Sk, *u = b + Sk, *e = u + Sk;
  for (int j = 0; j < Sk; j++) { a[j] = 0; b[j] = all ? Sq : 0; u[j] = e[j] = 0; }
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, Sq, Sk, 1));
  FMT_CALL(FMMaskSetType(m, FMMASKBOUNDS));
  FMT_CALL(FMMaskSetBounds(m, 0, a, b, u, e));
  FMT_CALL(FMMaskSetUp(m));
  free(a);
  return m;
}

/*
 * Non-finite inputs (issue 14): bottom-right causal, Sq = 300 > Sk = 200 (rows 0..99 see no key),
 * a NaN in Q (batch 0, row 150, head 0), +Inf in K (key 199: row 299 sees it, with a +-Inf
 * score), +-1e30 over the Q row (0, 250, head 1). The CUDA forward (the Hopper kernel, or the
 * fallback when fb) against the CPU backend on the same inputs, row by row: rows the CPU gives
 * O = 0, LSE = -inf must be exactly that; rows it gives a non-finite LSE must have a non-finite
 * LSE and O; the 1e30 row must not look fully masked (LSE != -inf; finite only if it matches);
 * every other row finite and close. Then the fp32 path: FMCudaForwardF32 (merge 0), then a merge
 * with a part that sees nothing: O and LSE unchanged (NaN rows stay NaN, masked rows -inf).
 */
static int run_nonfinite(FMContext ctx, FMContext fctx, int D, FMDType dt, int fb, int sched, int ctas, int user)
{
  const int B = 1, Sq = 300, Sk = 200, Hq = 2, Hkv = 1, big_row = 250, big_head = 1;
  const size_t nq = (size_t)B * Sq * Hq * D, nk = (size_t)B * Sk * Hkv * D, nl = (size_t)B * Hq * Sq, es = FMDTypeSize(dt);
  FMMask mask, none;
  FMMaskDesc md, md0;
  FMAttnProblem p;
  void *hq_ = malloc(nq * es), *hk = malloc(nk * es), *hv = malloc(nk * es), *ho = malloc(nq * es), *co = malloc(nq * es);
  float *hl = (float *)malloc(nl * 4), *cl = (float *)malloc(nl * 4), *o32 = (float *)malloc(nq * 4), *l32 = (float *)malloc(nl * 4);
  void *dq, *dk, *dv, *dout, *dmask = NULL, *dmask0 = NULL;
  float *dl, *do32;
  uint64_t s = 0x5eedull + (uint64_t)D;
  int bad = 0, bad_merge = 0, path, nonfinite_rows = 0;
  double num = 0, den = 0;

  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, Sq, Sk, 1));
  if (user) set_user_causal(mask, Sk, 1);
  else FMT_CALL(FMMaskSetType(mask, FMMASKCAUSAL));
  FMT_CALL(FMMaskSetUp(mask));
  none = plain_mask(ctx, Sq, Sk, 1);
  for (size_t i = 0; i < nq; i++) FMFromFloat(hq_, i, dt, (float)(1.5 * uni(&s)));
  for (size_t i = 0; i < nk; i++) FMFromFloat(hk, i, dt, (float)(1.5 * uni(&s)));
  for (size_t i = 0; i < nk; i++) FMFromFloat(hv, i, dt, (float)uni(&s));
  FMFromFloat(hq_, ((size_t)150 * Hq + 0) * D + 3, dt, NAN);
  FMFromFloat(hk, ((size_t)199 * Hkv + 0) * D + 5, dt, INFINITY); /* the last key: only row 299 sees it */
  for (int d = 0; d < D; d++) FMFromFloat(hq_, ((size_t)big_row * Hq + big_head) * D + d, dt, d % 3 ? 1e30f : -1e30f);
  FMT_CALL(FMMaskGetDesc_Private(mask, &md));
  FMT_CALL(FMMaskGetDesc_Private(none, &md0));
  memset(&p, 0, sizeof(p));
  p.batch = B; p.heads_q = Hq; p.heads_kv = Hkv; p.head_dim = D; p.dtype = dt; p.scale = 1.0f / sqrtf((float)D);
  p.nq = Sq; p.nk = Sk; p.mask = md;
  p.opts = (fb ? fctx : ctx)->kopts;
  p.opts.sm90_schedule = sched;
  p.opts.sm90_ctas = ctas;
  FMT_CALL(FMCPUForward(&p, hq_, hk, hv, co, dt, cl));
  FMT_CALL(FMCudaMalloc(nq * es, &dq));
  FMT_CALL(FMCudaMalloc(nk * es, &dk));
  FMT_CALL(FMCudaMalloc(nk * es, &dv));
  FMT_CALL(FMCudaMalloc(nq * 4, &dout)); /* O in dtype, then fp32 */
  FMT_CALL(FMCudaMalloc(nl * 4, (void **)&dl));
  FMT_CALL(FMCudaMemcpyH2D(dq, hq_, nq * es, NULL));
  FMT_CALL(FMCudaMemcpyH2D(dk, hk, nk * es, NULL));
  FMT_CALL(FMCudaMemcpyH2D(dv, hv, nk * es, NULL));
  FMT_CALL(FMCudaMaskUpload(&md, &dmask));
  FMT_CALL(FMCudaMaskUpload(&md0, &dmask0));
  FMT_CALL(FMCudaForward(&p, dmask, dq, dk, dv, dout, dl, NULL));
  path = FMCudaLastPath_Private;
  FMT_CALL(FMCudaMemcpyD2H(ho, dout, nq * es, NULL));
  FMT_CALL(FMCudaMemcpyD2H(hl, dl, nl * 4, NULL));
  for (int h = 0; h < Hq; h++)
    for (int i = 0; i < Sq; i++) {
      const float g = hl[(size_t)h * Sq + i], c = cl[(size_t)h * Sq + i];
      int zeros = 0, nonfinite = 0;
      for (int d = 0; d < D; d++) {
        const float x = FMToFloat(ho, ((size_t)i * Hq + h) * D + d, dt);
        zeros += x == 0.0f;
        nonfinite += !isfinite(x);
      }
      if (c == -INFINITY) bad += !(g == -INFINITY && zeros == D);
      else if (!isfinite(c)) { bad += isfinite(g) || nonfinite == 0; nonfinite_rows++; }
      else if (i == big_row && h == big_head) bad += g == -INFINITY || (isfinite(g) && fabsf(g - c) > 1e-3f * (1 + fabsf(c)) + fmt_lse_round(dt, D));
      else {
        bad += !isfinite(g) || nonfinite || fabsf(g - c) > 1e-3f * (1 + fabsf(c)) + fmt_lse_round(dt, D);
        for (int d = 0; d < D; d++) {
          const double x = FMToFloat(ho, ((size_t)i * Hq + h) * D + d, dt), y = FMToFloat(co, ((size_t)i * Hq + h) * D + d, dt);
          num += (x - y) * (x - y);
          den += y * y;
        }
      }
    }
  /* fp32 output, then a merge with a part that sees nothing: unchanged */
  do32 = (float *)dout;
  FMT_CALL(FMCudaForwardF32(&p, dmask, dq, dk, dv, do32, 0, dl, NULL));
  FMT_CALL(FMCudaMemcpyD2H(o32, do32, nq * 4, NULL));
  FMT_CALL(FMCudaMemcpyD2H(l32, dl, nl * 4, NULL));
  p.mask = md0;
  FMT_CALL(FMCudaForwardF32(&p, dmask0, dq, dk, dv, do32, 1, dl, NULL));
  {
    float *m32 = (float *)malloc(nq * 4), *ml = (float *)malloc(nl * 4);
    FMT_CALL(FMCudaMemcpyD2H(m32, do32, nq * 4, NULL));
    FMT_CALL(FMCudaMemcpyD2H(ml, dl, nl * 4, NULL));
    for (size_t r = 0; r < nl; r++) {
      const float a = l32[r], b = ml[r];
      const int e = !(a == b || (isnan(a) && isnan(b)) || fabsf(a - b) <= 1e-6f * (1 + fabsf(a))) /* fast-math exp/log of 0 and 1 */
                    + (!isfinite(cl[r]) && isfinite(b) && cl[r] != -INFINITY); /* a NaN row stays NaN */
      if (e && bad_merge < 3) printf("     merge: head %zu row %zu LSE %g, merged with nothing %g (reference %g)\n", r / Sq, r % Sq, a, b, cl[r]);
      bad_merge += e;
    }
    for (size_t i = 0; i < nq; i++) {
      const int e = !(o32[i] == m32[i] || (isnan(o32[i]) && isnan(m32[i])) || fabsf(o32[i] - m32[i]) <= 1e-6f * (1 + fabsf(o32[i])));
      if (e && bad_merge < 3) printf("     merge: O element %zu (row %zu) %g, merged with nothing %g\n", i, i / ((size_t)Hq * D), o32[i], m32[i]);
      bad_merge += e;
    }
    free(m32);
    free(ml);
  }
  {
    const double rel = den > 0 ? sqrt(num / den) : INFINITY, tol = dt == FM_DTYPE_BF16 ? 2e-2 : 5e-3;
    const int want = dev_sm == 90 && !fb ? sm90_path(sched, D, user ? M_USER_CAUSAL : M_CAUSAL) : -1;
    const int ok = bad == 0 && bad_merge == 0 && rel <= tol && nonfinite_rows > 0 && !(fb && path != 0) && !(want > 0 && path != want);
    printf("%-4s non-finite inputs %s D=%-3d %s %s/%d path=%-8s rows bad %d, non-finite rows %d, merge bad %d, rel=%.2e\n",
           ok ? "ok" : "FAIL", user ? "user_causal" : "causal", D, FMDTypeName(dt), sched_name[sched], ctas, path_name(path), bad, nonfinite_rows, bad_merge, rel);
    FMT_CHECK(ok, "non-finite inputs D=%d %s fallback=%d schedule %s failed", D, FMDTypeName(dt), fb, sched_name[sched]);
  }
  FMT_CALL(FMCudaMaskFree(dmask));
  FMT_CALL(FMCudaMaskFree(dmask0));
  FMCudaFree(dq); FMCudaFree(dk); FMCudaFree(dv); FMCudaFree(dout); FMCudaFree(dl);
  free(hq_); free(hk); free(hv); free(ho); free(co); free(hl); free(cl); free(o32); free(l32);
  FMT_CALL(FMMaskDestroy(&mask));
  FMT_CALL(FMMaskDestroy(&none));
  return bad != 0 || bad_merge != 0;
}

int main(int argc, char **argv)
{
  int ncase = 0, only = -1, quick = 0;
  Case cs[160];
  uint64_t seed = (uint64_t)time(NULL);
  FMContext ctx, fctx;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_gpu_fwd: CUDA forward against a float64 reference"));
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "-case") && a + 1 < argc) only = atoi(argv[++a]);
    else if (!strcmp(argv[a], "-quick")) quick = 1;
    else if (!strcmp(argv[a], "-seed") && a + 1 < argc) seed = strtoull(argv[++a], NULL, 10);
  }
  FMT_SKIP_WITHOUT_GPU();
  {
    char name[256];
    int sm = 0;
    FMT_CALL(FMCudaDeviceInfo(0, name, sizeof name, NULL, 0, &sm));
    dev_sm = sm;
    printf("device 0: %s (sm %d), forward path: %s, seed %llu\n", name, sm, FMCudaForwardPathName(sm),
           (unsigned long long)seed);
  }
  /* ctx: the masks and the default kernel options; fctx: -fm_cuda_fallback read from the database */
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  FMT_CALL(FMContextSetUp(ctx));
  FMT_CALL(FMOptionsSetValue("-fm_cuda_fallback", "1"));
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &fctx));
  FMT_CALL(FMContextSetBackend(fctx, FM_BACKEND_CPU));
  FMT_CALL(FMContextSetFromOptions(fctx));
  FMT_CALL(FMContextSetUp(fctx));
  FMT_CALL(FMOptionsSetValue("-fm_cuda_fallback", "0"));
  FMT_CHECK(fctx->kopts.cuda_fallback == 1 && ctx->kopts.cuda_fallback == 0, "-fm_cuda_fallback read as %d (default %d)",
            fctx->kopts.cuda_fallback, ctx->kopts.cuda_fallback);
  FMT_CHECK(ctx->kopts.sm90_schedule == FM_GPU_SCHED_AUTO && ctx->kopts.sm90_ctas == 0, "default schedule %d, ctas %d; expected auto, 0",
            ctx->kopts.sm90_schedule, ctx->kopts.sm90_ctas);
  {
    /* -fm_sm90_schedule and -fm_sm90_ctas as a context reads them; a bad name is an error naming it */
    FMContext sctx;
    FMErrorCode e;
    FMT_CALL(FMOptionsSetValue("-fm_sm90_schedule", "dynamic"));
    FMT_CALL(FMOptionsSetValue("-fm_sm90_ctas", "3"));
    FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &sctx));
    FMT_CALL(FMContextSetFromOptions(sctx));
    FMT_CHECK(sctx->kopts.sm90_schedule == 2 && sctx->kopts.sm90_ctas == 3,
              "-fm_sm90_schedule dynamic -fm_sm90_ctas 3 read as %d, %d", sctx->kopts.sm90_schedule, sctx->kopts.sm90_ctas);
    FMT_CALL(FMOptionsSetValue("-fm_sm90_schedule", "sideways"));
    FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
    e = FMContextSetFromOptions(sctx);
    FMT_CALL(FMPopErrorHandler());
    FMT_CHECK(e == FM_ERR_OPT, "-fm_sm90_schedule sideways gave %d; expected FM_ERR_OPT", (int)e);
    FMT_CALL(FMOptionsSetValue("-fm_sm90_schedule", "auto"));
    FMT_CALL(FMOptionsSetValue("-fm_sm90_ctas", "0"));
    FMT_CALL(FMContextDestroy(&sctx));
  }
  /* the 12 masks: odd lengths, GQA 2:1 and 4:1, d = 64/128, bf16/fp16 */
  for (int t = 0; t < 12; t++) {
    Case c = {t, 2, 1000, 1000, 4, 2, 1, 128, FM_DTYPE_BF16, 0};
    if (t % 4 == 3) c.B = 1, c.Sq = c.Sk = 4099;
    if (t % 3 == 0) c.D = 64;
    if (t % 2 == 1) c.dt = FM_DTYPE_FP16;
    if (t % 5 == 2) c.Hkv = 1; /* GQA 4:1 */
    if (t == M_RANDOM_EVICTION) c.mh = c.Hkv;
    cs[ncase++] = c;
  }
  /* user bounds, per-head masks, GQA 4:1, fully masked rows */
  { Case c = {M_USER_RANDOM, 2, 1000, 1000, 8, 2, 2, 128, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {M_USER_RANDOM, 1, 777, 1333, 8, 2, 2, 64, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  /* S_q != S_k, bottom-right causal (Sq > Sk leaves leading rows with no visible key) */
  { Case c = {M_CAUSAL, 1, 700, 1500, 4, 4, 1, 128, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {M_CAUSAL, 1, 1500, 700, 4, 1, 1, 128, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  { Case c = {M_CAUSAL_DOCUMENT, 2, 513, 1000, 4, 2, 1, 64, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  /* d = 256 (Hopper kernel with 64-key tiles; causal on the wide kernel's 80-key tiles): odd
     4099 (the last mask block's upper half lies past S_k), 1000 and 3000 (a ragged upper half or
     last tile), GQA 4:1, S_q != S_k both ways, user bounds */
  { Case c = {M_CAUSAL_DOCUMENT, 1, 1000, 1000, 2, 1, 1, 256, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {M_DOCUMENT, 1, 1000, 1000, 2, 2, 1, 256, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  { Case c = {M_CAUSAL, 1, 4099, 4099, 4, 1, 1, 256, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {M_SHARE_QUESTION, 1, 4099, 4099, 2, 2, 1, 256, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  { Case c = {M_SLIDING_WINDOW, 2, 1000, 1000, 4, 1, 1, 256, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  { Case c = {M_CAUSAL, 1, 1000, 3000, 4, 4, 1, 256, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {M_CAUSAL, 1, 3000, 1000, 4, 1, 1, 256, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  { Case c = {M_USER_RANDOM, 1, 777, 1333, 8, 2, 2, 256, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  /* d = 256 full (the wide kernel, 80-key tiles): ragged last tile, GQA 2:1 */
  { Case c = {M_FULL, 2, 777, 1333, 4, 2, 1, 256, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  /* the causal mask with its (empty) vectors uploaded, which stays on the block-list kernels: d =
     256's 64-key tiles and d = 128's 128-key tiles, S_q != S_k both ways (rows with no visible key) */
  { Case c = {M_USER_CAUSAL, 1, 1000, 3000, 4, 4, 1, 256, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {M_USER_CAUSAL, 1, 3000, 1000, 4, 1, 1, 256, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  { Case c = {M_USER_CAUSAL, 2, 700, 1500, 4, 2, 1, 128, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {M_USER_CAUSAL, 1, 1500, 700, 4, 1, 1, 128, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  /* tiny and edge sizes */
  { Case c = {M_CAUSAL, 1, 1, 1, 1, 1, 1, 128, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {M_FULL, 3, 130, 70, 2, 1, 1, 128, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {M_SHARE_QUESTION, 1, 256, 256, 2, 2, 1, 128, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  /* d = 128 full on the wide kernel's 176-key tiles (the causal cases above run them too): a
     ragged last tile (1333 = 7 x 176 + 101), GQA 4:1 */
  { Case c = {M_FULL, 2, 1000, 1333, 4, 1, 1, 128, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  /* d = 64 runs 192-row tiles with three consumers: the 12 masks at 577 rows (three tiles and one
     of a single row), a tile shorter than one consumer's 64 rows, and the d = 128 causal and full
     cases above again at d = 64 (S_q != S_k both ways, 1 row, 130 rows) */
  for (int t = 0; t < 12; t++) {
    Case c = {t, 1, 577, 577, 4, 2, 1, 64, t % 2 ? FM_DTYPE_FP16 : FM_DTYPE_BF16, 0};
    if (t == M_RANDOM_EVICTION) c.mh = c.Hkv;
    cs[ncase++] = c;
  }
  { Case c = {M_SLIDING_WINDOW, 2, 40, 300, 2, 2, 1, 64, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  for (int i = 0, n = ncase; i < n; i++)
    if (cs[i].D == 128 && (cs[i].mask == M_CAUSAL || cs[i].mask == M_FULL) && cs[i].Sq != 4099) {
      Case c = cs[i];
      c.D = 64;
      cs[ncase++] = c;
    }
  /* the fallback on shapes the Hopper kernel also covers */
  { Case c = {M_CAUSAL_DOCUMENT, 1, 1000, 1000, 4, 1, 1, 128, FM_DTYPE_BF16, 1}; cs[ncase++] = c; }
  { Case c = {M_USER_RANDOM, 1, 1000, 1000, 4, 2, 2, 64, FM_DTYPE_FP16, 1}; cs[ncase++] = c; }
  { Case c = {M_CAUSAL, 1, 1500, 700, 2, 1, 1, 128, FM_DTYPE_BF16, 1}; cs[ncase++] = c; }
  { Case c = {M_SHARE_QUESTION, 1, 1000, 1000, 2, 1, 1, 256, FM_DTYPE_BF16, 1}; cs[ncase++] = c; }

  /* the persistent forward: every case above but the forced fallback and d = 256 with the
     dynamic scheduler, one CTA per SM or 3 CTAs, each compared bit for bit with the grid kernel
     too where the grid runs the same tiles (d = 128 full and causal, whose grid runs the wide
     kernel, within the reference's tolerance on every row); then odd shapes, rows with no visible key (S_q > S_k
     causal), many tiles per CTA (2 or 3 CTAs), both schedules, and d = 256, which must stay on
     the one-CTA-per-tile kernel */
  {
    const int nbase = ncase;
    for (int i = 0; i < nbase; i++)
      if (!cs[i].force_fallback && cs[i].D != 256) {
        Case c = cs[i];
        c.sched = 2;
        c.ctas = i % 2 ? 3 : 0; /* half of them with 3 CTAs: many tiles per CTA, both buffers, the ring across tiles */
        cs[ncase++] = c;
      }
  }
  { Case c = {M_CAUSAL, 1, 1, 1, 1, 1, 1, 128, FM_DTYPE_BF16, 0, 1, 3}; cs[ncase++] = c; }
  { Case c = {M_FULL, 3, 130, 70, 2, 1, 1, 128, FM_DTYPE_FP16, 0, 1, 3}; cs[ncase++] = c; }
  { Case c = {M_CAUSAL, 1, 4099, 4099, 1, 1, 1, 128, FM_DTYPE_BF16, 0, 2, 0}; cs[ncase++] = c; } /* B * H = 1 */
  { Case c = {M_CAUSAL, 1, 4099, 4099, 1, 1, 1, 64, FM_DTYPE_FP16, 0, 1, 2}; cs[ncase++] = c; }
  { Case c = {M_CAUSAL, 1, 1500, 700, 4, 1, 1, 128, FM_DTYPE_FP16, 0, 2, 3}; cs[ncase++] = c; }
  { Case c = {M_SHARE_QUESTION, 2, 1000, 1000, 4, 2, 1, 64, FM_DTYPE_BF16, 0, 2, 2}; cs[ncase++] = c; }
  { Case c = {M_USER_RANDOM, 2, 1000, 1000, 8, 2, 2, 128, FM_DTYPE_BF16, 0, 1, 3}; cs[ncase++] = c; }
  { Case c = {M_RANDOM_EVICTION, 2, 1000, 1000, 4, 2, 2, 128, FM_DTYPE_FP16, 0, 2, 3}; cs[ncase++] = c; }
  { Case c = {M_SLIDING_WINDOW, 1, 4099, 4099, 2, 1, 1, 128, FM_DTYPE_BF16, 0, 1, 0}; cs[ncase++] = c; }
  { Case c = {M_CAUSAL, 1, 4099, 4099, 4, 1, 1, 256, FM_DTYPE_BF16, 0, 2, 0}; cs[ncase++] = c; }

  FMT_CHECK(ncase <= (int)(sizeof cs / sizeof cs[0]), "%d cases overran the table", ncase);
  int fails = 0, run = 0;
  for (int i = 0; i < ncase; i++) {
    if (only >= 0 && i != only) continue;
    if (quick && cs[i].Sq > 1100) continue;
    fails += run_case(ctx, fctx, &cs[i], seed + 17 * (uint64_t)i, 1);
    run++;
  }
  /* non-finite inputs: the Hopper kernel (D 64, 128, 256) and the fallback (D 128 forced) */
  if (only < 0) {
    fails += run_nonfinite(ctx, fctx, 64, FM_DTYPE_BF16, 0, 0, 0, 0);
    fails += run_nonfinite(ctx, fctx, 128, FM_DTYPE_FP16, 0, 0, 0, 0);
    fails += run_nonfinite(ctx, fctx, 128, FM_DTYPE_BF16, 1, 0, 0, 0);
    fails += run_nonfinite(ctx, fctx, 256, FM_DTYPE_FP16, 0, 0, 0, 0);
    fails += run_nonfinite(ctx, fctx, 64, FM_DTYPE_FP16, 0, 2, 0, 0);
    fails += run_nonfinite(ctx, fctx, 128, FM_DTYPE_BF16, 0, 1, 2, 0);
    /* the same causal mask with its (empty) vectors uploaded: the block-list kernels at d = 128, 256 */
    fails += run_nonfinite(ctx, fctx, 128, FM_DTYPE_BF16, 0, 0, 0, 1);
    fails += run_nonfinite(ctx, fctx, 256, FM_DTYPE_BF16, 0, 0, 0, 1);
    run += 6;
  }
  printf("test_gpu_fwd: %d of %d cases failed\n", fails, run);
  FMT_CALL(FMContextDestroy(&fctx));
  FMT_CALL(FMContextDestroy(&ctx));
  FMFinalize();
  return fmt_failures ? 1 : 0;
}
#endif /* FM_HAVE_CUDA */
