/*
 * test_gpu_fwd - the CUDA forward (FMCudaForward: Hopper kernel and SIMT fallback) against a
 * float64 reference computed here, on fresh random inputs with O and LSE poisoned (NaN) before
 * each run. Covers the 12 benchmark masks, random per-head user bounds with fully masked rows,
 * GQA 4:1 and 2:1, S_q != S_k (bottom-right causal), odd lengths (1000, 4099), head dims
 * 64/128/256, bf16 and fp16. Rows are sampled for the reference on long sequences; O and LSE
 * are checked for NaN everywhere.
 * Pass: ||O - ref|| / ||ref|| <= 2e-2 (bf16) / 5e-3 (fp16); |LSE - ref| <= 1e-2 + 1e-3 |ref|;
 * LSE = -inf and O = 0 exactly on rows with no visible key. Exit 77 when no GPU.
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
#include "gpu_masks.h"

#if !FM_HAVE_CUDA
FMT_SKIP_MAIN("built without CUDA")
#else
extern int FMCudaLastPath_Private;

typedef struct {
  int mask, B, Sq, Sk, Hq, Hkv, mh, D;
  FMDType dt;
  int force_fallback;
} Case;

static double uni(uint64_t *s) { return ((double)(fmt_next(s) >> 11) / 9007199254740992.0) * 2.0 - 1.0; }

static int run_case(const Case *c, uint64_t seed, int verbose)
{
  const int B = c->B, Sq = c->Sq, Sk = c->Sk, Hq = c->Hq, Hkv = c->Hkv, D = c->D, mh = c->mh;
  const size_t nq = (size_t)B * Sq * Hq * D, nk = (size_t)B * Sk * Hkv * D, nl = (size_t)B * Hq * Sq;
  const size_t es = FMDTypeSize(c->dt);
  const float scale = 1.0f / sqrtf((float)D);
  int32_t *bnd[4];
  void *hq_, *hk, *hv, *ho, *dq, *dk, *dv, *dout, *dmask = NULL;
  float *hl, *dl;
  uint64_t s = seed;
  int causal, fails = 0, path;
  FMMaskDesc md;
  FMAttnProblem p;
  double num = 0, den = 0, lse_err = 0;
  int nan_o = 0, nan_l = 0, bad_masked = 0, rows_checked = 0;

  for (int v = 0; v < 4; v++) bnd[v] = (int32_t *)malloc(sizeof(int32_t) * (size_t)mh * Sk);
  causal = gm_build(c->mask, Sq, Sk, mh, seed, bnd[0], bnd[1], bnd[2], bnd[3]);
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

  memset(&md, 0, sizeof(md));
  md.seqlen_q = Sq;
  md.seqlen_k = Sk;
  md.mask_heads = mh;
  md.causal = causal;
  md.present = 15;
  for (int v = 0; v < 4; v++) md.bnd[v] = bnd[v];
  md.block = 128;
  md.nblocks_k = (Sk + 127) / 128;
  md.summary = NULL;
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
  p.opts.cuda_fallback = c->force_fallback;
  FMT_CALL(FMCudaForward(&p, dmask, dq, dk, dv, dout, dl, NULL));
  path = FMCudaLastPath_Private;
  FMT_CALL(FMCudaMemcpyD2H(ho, dout, nq * es, NULL));
  FMT_CALL(FMCudaMemcpyD2H(hl, dl, nl * sizeof(float), NULL));

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
          else i = gm_int(&rs, 0, Sq - 1);
          double mx = -INFINITY, l = 0;
          for (int j = 0; j < Sk; j++) {
            if (gm_masked(bnd[0], bnd[1], bnd[2], bnd[3], causal, Sq, Sk, hm, i, j)) {
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
            e = e / (1e-2 + 1e-3 * fabs(ref_l)); /* <= 1 passes */
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
    const int ok = nan_o == 0 && nan_l == 0 && bad_masked == 0 && rel <= tol && lse_err <= 1.0 && !isnan(rel);
    if (!ok || verbose)
      printf("%-4s %-22s B=%d Sq=%-5d Sk=%-5d Hq=%d Hkv=%d mh=%d D=%-3d %s path=%-8s rel=%.2e lse/tol=%.2f nanO=%d nanL=%d "
             "badmasked=%d rows=%d\n",
             ok ? "ok" : "FAIL", gm_names[c->mask], B, Sq, Sk, Hq, Hkv, mh, D, FMDTypeName(c->dt),
             path == 1 ? "sm90" : "fallback", rel, lse_err, nan_o, nan_l, bad_masked, rows_checked);
    FMT_CHECK(ok, "case %s D=%d %s failed", gm_names[c->mask], D, FMDTypeName(c->dt));
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
  for (int v = 0; v < 4; v++) free(bnd[v]);
  return fails;
}

int main(int argc, char **argv)
{
  int ndev = 0, ncase = 0, only = -1, quick = 0;
  Case cs[64];
  uint64_t seed = (uint64_t)time(NULL);
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_gpu_fwd: CUDA forward against a float64 reference"));
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "-case") && a + 1 < argc) only = atoi(argv[++a]);
    else if (!strcmp(argv[a], "-quick")) quick = 1;
    else if (!strcmp(argv[a], "-seed") && a + 1 < argc) seed = strtoull(argv[++a], NULL, 10);
  }
  FMT_CALL(FMCudaDeviceCount(&ndev));
  if (ndev == 0) {
    printf("SKIP: no CUDA device\n");
    FMFinalize();
    return 77;
  }
  {
    char name[256];
    int sm = 0;
    FMT_CALL(FMCudaDeviceInfo(0, name, sizeof name, NULL, 0, &sm));
    printf("device 0: %s (sm %d), forward path: %s, seed %llu\n", name, sm, FMCudaForwardPathName(sm),
           (unsigned long long)seed);
  }
  /* the 12 masks: odd lengths, GQA 2:1 and 4:1, d = 64/128, bf16/fp16 */
  for (int t = 0; t < 12; t++) {
    Case c = {t, 2, 1000, 1000, 4, 2, 1, 128, FM_DTYPE_BF16, 0};
    if (t % 4 == 3) c.B = 1, c.Sq = c.Sk = 4099;
    if (t % 3 == 0) c.D = 64;
    if (t % 2 == 1) c.dt = FM_DTYPE_FP16;
    if (t % 5 == 2) c.Hkv = 1; /* GQA 4:1 */
    if (t == GM_RANDOM_EVICTION) c.mh = c.Hkv;
    cs[ncase++] = c;
  }
  /* user bounds, per-head masks, GQA 4:1, fully masked rows */
  { Case c = {GM_USER_RANDOM, 2, 1000, 1000, 8, 2, 2, 128, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {GM_USER_RANDOM, 1, 777, 1333, 8, 2, 2, 64, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  /* S_q != S_k, bottom-right causal (Sq > Sk leaves leading rows with no visible key) */
  { Case c = {GM_CAUSAL, 1, 700, 1500, 4, 4, 1, 128, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {GM_CAUSAL, 1, 1500, 700, 4, 1, 1, 128, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  { Case c = {GM_CAUSAL_DOCUMENT, 2, 513, 1000, 4, 2, 1, 64, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  /* d = 256 (fallback path) */
  { Case c = {GM_CAUSAL_DOCUMENT, 1, 1000, 1000, 2, 1, 1, 256, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {GM_DOCUMENT, 1, 1000, 1000, 2, 2, 1, 256, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  /* tiny and edge sizes */
  { Case c = {GM_CAUSAL, 1, 1, 1, 1, 1, 1, 128, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {GM_FULL, 3, 130, 70, 2, 1, 1, 128, FM_DTYPE_BF16, 0}; cs[ncase++] = c; }
  { Case c = {GM_SHARE_QUESTION, 1, 256, 256, 2, 2, 1, 128, FM_DTYPE_FP16, 0}; cs[ncase++] = c; }
  /* the fallback on shapes the Hopper kernel also covers */
  { Case c = {GM_CAUSAL_DOCUMENT, 1, 1000, 1000, 4, 1, 1, 128, FM_DTYPE_BF16, 1}; cs[ncase++] = c; }
  { Case c = {GM_USER_RANDOM, 1, 1000, 1000, 4, 2, 2, 64, FM_DTYPE_FP16, 1}; cs[ncase++] = c; }
  { Case c = {GM_CAUSAL, 1, 1500, 700, 2, 1, 1, 128, FM_DTYPE_BF16, 1}; cs[ncase++] = c; }

  int fails = 0, run = 0;
  for (int i = 0; i < ncase; i++) {
    if (only >= 0 && i != only) continue;
    if (quick && cs[i].Sq > 1100) continue;
    fails += run_case(&cs[i], seed + 17 * (uint64_t)i, 1);
    run++;
  }
  printf("test_gpu_fwd: %d of %d cases failed\n", fails, run);
  FMFinalize();
  return fmt_failures ? 1 : 0;
}
#endif /* FM_HAVE_CUDA */
