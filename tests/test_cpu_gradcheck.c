/*
 * test_cpu_gradcheck - FMCPUBackward against central finite differences of FMCPUForward.
 * For L = sum(O * W) with random W (so dL/dO = W), every entry x of Q, K and V is perturbed by
 * +-h and (L(x + h) - L(x - h)) / 2h (L summed in float64, the actual fp32 step used) is compared
 * with dQ, dK, dV. Tiny fp32 problems (S ~ 8-16, d = 8, GQA 2:1, two mask heads) on a full, a
 * causal, a causal-document, a user-bounds and an S_q > S_k causal mask (rows with no key).
 */
#include "fmtest.h"
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>

typedef struct {
  const char *name;
  FMMaskType type;
  int Sq, Sk, mh;
  int ndocs, docs[4];
  int user; /* type bounds: per-head random bounds */
} GCase;

static FMMask make_mask(FMContext ctx, const GCase *gc, uint64_t *seed)
{
  FMMask mask;
  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, gc->Sq, gc->Sk, gc->mh));
  FMT_CALL(FMMaskSetType(mask, gc->type));
  FMT_CALL(FMMaskSetBlockSize(mask, 4)); /* several summary blocks even at this size */
  if (gc->ndocs) FMT_CALL(FMMaskSetDocuments(mask, gc->ndocs, gc->docs));
  if (gc->user) {
    int32_t lts[64], lte[64], uts[64], ute[64];
    for (int h = 0; h < gc->mh; h++) {
      for (int j = 0; j < gc->Sk; j++) {
        int a = (int)(fmt_next(seed) % (uint64_t)(gc->Sq + 1)), b = (int)(fmt_next(seed) % (uint64_t)(gc->Sq + 1));
        lts[j] = a > b ? a : b; lte[j] = gc->Sq;
        uts[j] = 0; ute[j] = (int)(fmt_next(seed) % 3); /* mask the first rows of some columns */
        if (ute[j] > lts[j]) ute[j] = lts[j];
      }
      FMT_CALL(FMMaskSetBounds(mask, h, lts, lte, uts, ute));
    }
  }
  FMT_CALL(FMMaskSetUp(mask));
  return mask;
}

/* L = sum(O * W) in float64 of one forward. */
static double loss(const FMAttnProblem *p, const float *q, const float *k, const float *v, const double *w, float *o, float *lse,
                   size_t nq)
{
  double L = 0;
  FMT_CALL(FMCPUForward(p, q, k, v, o, FM_DTYPE_FP32, lse));
  for (size_t i = 0; i < nq; i++) L += (double)o[i] * w[i];
  return L;
}

/* Central differences for every entry of x (n entries) against the analytic gradient g. */
static void fd_check(const char *cname, const char *what, const FMAttnProblem *p, float *q, float *k, float *v, float *x, size_t n,
                     const float *g, const double *w, float *o, float *lse, size_t nq)
{
  const float h = 2e-3f;
  double num = 0, den = 0, worst = 0;
  for (size_t i = 0; i < n; i++) {
    float x0 = x[i];
    x[i] = x0 + h;
    double step = (double)x[i];
    double Lp = loss(p, q, k, v, w, o, lse, nq);
    x[i] = x0 - h;
    step -= (double)x[i];
    double Lm = loss(p, q, k, v, w, o, lse, nq);
    x[i] = x0;
    double fd = (Lp - Lm) / step, e = fabs(fd - g[i]);
    num += e * e;
    den += fd * fd;
    if (e > worst) worst = e;
  }
  double rel = sqrt(num / (den > 0 ? den : 1));
  FMT_CHECK(isfinite(rel) && rel <= 2e-3, "%s: %s differs from finite differences: relative error %.3e, worst entry %.3e", cname, what,
            rel, worst);
  printf("    %-8s vs finite differences: relative error %.2e (worst entry %.2e, |fd| %.2e)\n", what, rel, worst, sqrt(den));
}

static void run(FMContext ctx, const GCase *gc, uint64_t *seed)
{
  const int B = 1, Hq = 4, Hkv = 2, D = 8, Sq = gc->Sq, Sk = gc->Sk;
  const size_t nq = (size_t)B * Sq * Hq * D, nk = (size_t)B * Sk * Hkv * D, nl = (size_t)B * Hq * Sq;
  FMMask mask = make_mask(ctx, gc, seed);
  FMAttnProblem p;
  float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *o = malloc(nq * 4), *lse = malloc(nl * 4);
  float *dq = malloc(nq * 4), *dk = malloc(nk * 4), *dv = malloc(nk * 4), *wf = malloc(nq * 4);
  double *w = malloc(nq * 8);
  size_t dead = 0, nanq = 0;

  memset(&p, 0, sizeof(p));
  p.batch = B; p.heads_q = Hq; p.heads_kv = Hkv; p.head_dim = D; p.dtype = FM_DTYPE_FP32;
  p.scale = 0.5f; p.nq = Sq; p.k0 = 0; p.nk = Sk; p.nthreads = 2;
  FMT_CALL(FMMaskGetDesc_Private(mask, &p.mask));
  for (size_t i = 0; i < nq; i++) q[i] = (float)(2 * fmt_uniform(seed));
  for (size_t i = 0; i < nk; i++) k[i] = (float)(2 * fmt_uniform(seed));
  for (size_t i = 0; i < nk; i++) v[i] = (float)fmt_uniform(seed);
  for (size_t i = 0; i < nq; i++) wf[i] = (float)(w[i] = fmt_uniform(seed));
  for (size_t i = 0; i < nq; i++) dq[i] = 0;
  memset(dk, 0xFF, nk * 4);
  memset(dv, 0xFF, nk * 4);
  memset(o, 0xFF, nq * 4);

  printf("  %s: Sq=%d Sk=%d Hq=%d Hkv=%d mask heads=%d D=%d\n", gc->name, Sq, Sk, Hq, Hkv, gc->mh, D);
  (void)loss(&p, q, k, v, w, o, lse, nq);
  for (size_t i = 0; i < nl; i++) dead += lse[i] == -INFINITY;
  FMT_CALL(FMCPUBackward(&p, q, k, v, o, lse, wf, dq, dk, dv, FM_DTYPE_FP32));
  for (size_t i = 0; i < nq; i++) nanq += isnan(dq[i]) != 0;
  FMT_CHECK(nanq == 0, "%s: %zu NaN entries in dQ", gc->name, nanq);
  fd_check(gc->name, "dQ", &p, q, k, v, q, nq, dq, w, o, lse, nq);
  fd_check(gc->name, "dK", &p, q, k, v, k, nk, dk, w, o, lse, nq);
  fd_check(gc->name, "dV", &p, q, k, v, v, nk, dv, w, o, lse, nq);
  if (dead) {
    /* rows with no visible key: LSE -inf, O = 0, dQ = 0 */
    size_t bad = 0;
    for (int h = 0; h < Hq; h++)
      for (int i = 0; i < Sq; i++)
        if (lse[(size_t)h * Sq + i] == -INFINITY)
          for (int d = 0; d < D; d++) bad += o[((size_t)i * Hq + h) * D + d] != 0 || dq[((size_t)i * Hq + h) * D + d] != 0;
    FMT_CHECK(bad == 0, "%s: %zu entries of fully masked rows are not 0 in O or dQ", gc->name, bad);
    printf("    %zu fully masked (head, row) pairs: O = 0, dQ = 0\n", dead);
  }
  free(q); free(k); free(v); free(o); free(lse); free(dq); free(dk); free(dv); free(wf); free(w);
  FMT_CALL(FMMaskDestroy(&mask));
}

int main(int argc, char **argv)
{
  FMContext ctx;
  uint64_t seed;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_cpu_gradcheck: CPU backward against finite differences"));
  seed = fmt_seed();
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  FMT_CALL(FMContextSetUp(ctx));
  const GCase cases[] = {
    {"full", FMMASKFULL, 12, 12, 1, 0, {0}, 0},
    {"causal", FMMASKCAUSAL, 16, 16, 1, 0, {0}, 0},
    {"causal_document", FMMASKCAUSALDOCUMENT, 12, 12, 1, 3, {5, 4, 3}, 0},
    {"document", FMMASKDOCUMENT, 12, 12, 1, 3, {3, 6, 3}, 0},
    {"bounds per-head", FMMASKBOUNDS, 10, 12, 2, 0, {0}, 1},
    {"causal Sq>Sk", FMMASKCAUSAL, 14, 9, 1, 0, {0}, 0},
  };
  for (int c = 0; c < (int)(sizeof(cases) / sizeof(cases[0])); c++) run(ctx, &cases[c], &seed);
  FMT_CALL(FMContextDestroy(&ctx));
  int rc = fmt_finish("test_cpu_gradcheck");
  FMT_CALL(FMFinalize());
  return rc;
}
