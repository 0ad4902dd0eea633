/*
 * cpu_attn_cases.h - the helpers of test_cpu_attn (its only includer): the dense float64 view of a
 * mask, random and poisoned tensors, the Case table's type and its masks (builder or random user
 * bounds), the FMAttnProblem of a case, a context with one kernel option set, and the checks of
 * O, LSE and fully masked rows. Header-only (static functions).
 */
#ifndef CPU_ATTN_CASES_H
#define CPU_ATTN_CASES_H
#include "fmtest.h"
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>

/* ------------------------------------------------------------------ dense mask */
typedef struct {
  int Sq, Sk, mh;
  unsigned char *m; /* [mh][Sq][Sk], 1 = masked */
} Dense;

/* The direct per-element rule on the mask's bound vectors (not its summaries). */
static void dense_build(FMMask mask, Dense *dm)
{
  FMBool causal;
  FMT_CALL(FMMaskGetSizes(mask, &dm->Sq, &dm->Sk, &dm->mh));
  dm->m = malloc((size_t)dm->mh * dm->Sq * dm->Sk);
  for (int h = 0; h < dm->mh; h++) {
    const int32_t *lts, *lte, *uts, *ute;
    FMT_CALL(FMMaskGetBounds(mask, h, &lts, &lte, &uts, &ute, NULL, &causal));
    for (int i = 0; i < dm->Sq; i++)
      for (int j = 0; j < dm->Sk; j++)
        dm->m[((size_t)h * dm->Sq + i) * dm->Sk + j] =
          (lts[j] <= i && i < lte[j]) || (uts[j] <= i && i < ute[j]) || (causal && j > i + (dm->Sk - dm->Sq));
  }
}

static int dense_masked(void *ctx, int mh, int i, int j)
{
  Dense *dm = ctx;
  return dm->m[((size_t)mh * dm->Sq + i) * dm->Sk + j];
}

/* ------------------------------------------------------------------ tensors */
/* Fresh random values amp * U[-1, 1) rounded to dt; d receives exactly what the kernel sees. */
static void *make_input(size_t n, FMDType dt, double amp, double **d, uint64_t *seed)
{
  void *t = malloc(n * FMDTypeSize(dt));
  *d = malloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) {
    FMFromFloat(t, i, dt, (float)(amp * fmt_uniform(seed)));
    (*d)[i] = FMToFloat(t, i, dt);
  }
  return t;
}

static void *poisoned(size_t n, FMDType dt)
{
  void *t = malloc(n * FMDTypeSize(dt));
  memset(t, 0xFF, n * FMDTypeSize(dt)); /* NaN in every dtype */
  return t;
}

static double *to_double(const void *t, size_t n, FMDType dt)
{
  double *d = malloc(n * sizeof(double));
  for (size_t i = 0; i < n; i++) d[i] = FMToFloat(t, i, dt);
  return d;
}

static size_t count_nan(const double *a, size_t n)
{
  size_t c = 0;
  for (size_t i = 0; i < n; i++) c += isnan(a[i]) != 0;
  return c;
}

/* ------------------------------------------------------------------ masks */
typedef enum { UB_NONE = 0, UB_RANDOM, UB_DEADROWS, UB_RUNS } UserBounds;

typedef struct {
  const char *name;
  FMMaskType type;
  UserBounds ub;
  int causal; /* for type bounds */
  int Sq, Sk, mh, B, Hq, Hkv, D;
  FMDType dt;
  int block;  /* summary block size, 0 = default */
  double amp; /* input amplitude (larger = peakier softmax) */
} Case;

/* Random bounds per head; UB_DEADROWS also masks rows [Sq/5, Sq/5 + 30) in every column;
   UB_RUNS uses runs of 50 columns with the same bounds (so many tiles are SKIP or FULL). */
static void set_user_bounds(FMMask mask, const Case *cs, uint64_t *seed)
{
  const int Sq = cs->Sq, Sk = cs->Sk;
  int32_t *b[4];
  for (int v = 0; v < 4; v++) b[v] = malloc(sizeof(int32_t) * (size_t)Sk);
  for (int h = 0; h < cs->mh; h++) {
    int32_t r[4] = {0, 0, 0, 0};
    for (int j = 0; j < Sk; j++) {
      if (cs->ub != UB_RUNS || j % 50 == 0) {
        for (int v = 0; v < 4; v += 2) {
          int x = (int)(fmt_next(seed) % (uint64_t)(Sq + 1)), y = (int)(fmt_next(seed) % (uint64_t)(Sq + 1));
          if (fmt_next(seed) % 3 == 0) y = x; /* empty interval */
          r[v] = x < y ? x : y;
          r[v + 1] = x < y ? y : x;
        }
        if (cs->ub == UB_RUNS && fmt_next(seed) % 3 == 0) { r[0] = r[1] = Sq; r[2] = r[3] = 0; } /* unmasked run */
        if (cs->ub == UB_RUNS && fmt_next(seed) % 4 == 0) { r[0] = 0; r[1] = Sq; }              /* masked run */
      }
      for (int v = 0; v < 4; v++) b[v][j] = r[v];
      if (cs->ub == UB_DEADROWS) {
        int d0 = Sq / 5, d1 = Sq / 5 + 30 < Sq ? Sq / 5 + 30 : Sq;
        if (b[0][j] > d0) b[0][j] = d0;
        if (b[1][j] < d1) b[1][j] = d1;
      }
    }
    FMT_CALL(FMMaskSetBounds(mask, h, b[0], b[1], b[2], b[3]));
  }
  for (int v = 0; v < 4; v++) free(b[v]);
}

static FMMask make_mask(FMContext ctx, const Case *cs, uint64_t *seed)
{
  FMMask mask;
  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, cs->Sq, cs->Sk, cs->mh));
  FMT_CALL(FMMaskSetType(mask, cs->type));
  FMT_CALL(FMMaskSetSeed(mask, (unsigned long)(fmt_next(seed) % 100000)));
  if (cs->block) FMT_CALL(FMMaskSetBlockSize(mask, cs->block));
  if (cs->ub != UB_NONE) {
    set_user_bounds(mask, cs, seed);
    FMT_CALL(FMMaskSetCausal(mask, cs->causal ? FM_TRUE : FM_FALSE));
  }
  FMT_CALL(FMMaskSetUp(mask));
  return mask;
}

static void make_problem(FMMask mask, const Case *cs, FMAttnProblem *p)
{
  memset(p, 0, sizeof(*p));
  p->batch = cs->B; p->heads_q = cs->Hq; p->heads_kv = cs->Hkv; p->head_dim = cs->D;
  p->dtype = cs->dt;
  p->scale = (float)(1.0 / sqrt((double)cs->D));
  p->nq = cs->Sq; p->qrows = NULL;
  p->k0 = 0; p->nk = cs->Sk;
  FMT_CALL(FMMaskGetDesc_Private(mask, &p->mask));
  p->nthreads = 0;
  p->opts = mask->ctx->kopts; /* as FMPlanGetProblem_Private does */
}

/* A CPU context whose kernel options come from the options database with name = value set
   (FMContextSetFromOptions); the option is reset to value0 afterwards. */
static FMContext options_context(const char *name, const char *value, const char *value0)
{
  FMContext c;
  FMT_CALL(FMOptionsSetValue(name, value));
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &c));
  FMT_CALL(FMContextSetBackend(c, FM_BACKEND_CPU));
  FMT_CALL(FMContextSetFromOptions(c));
  FMT_CALL(FMContextSetUp(c));
  FMT_CALL(FMOptionsSetValue(name, value0));
  return c;
}

/* ------------------------------------------------------------------ checks */
static void check_rel(const char *cname, const char *what, const double *got, const double *ref, size_t n, double tol)
{
  size_t nn = count_nan(got, n);
  double e = fmt_relerr(got, ref, n);
  FMT_CHECK(nn == 0, "%s: %s has %zu NaN entries", cname, what, nn);
  FMT_CHECK(e <= tol, "%s: %s relative error %.3e > %.1e", cname, what, e, tol);
  if (getenv("FMTEST_VERBOSE")) printf("    %s: %s relative error %.3e (tol %.1e)\n", cname, what, e, tol);
}

/* LSE: -inf exactly where the reference is -inf, else |err| <= tol (1 + |lse|). */
static void check_lse(const char *cname, const float *got, const double *ref, size_t n, double tol)
{
  size_t bad = 0, ninf = 0;
  double worst = 0;
  for (size_t i = 0; i < n; i++) {
    if (ref[i] == -INFINITY) {
      ninf++;
      if (got[i] != -INFINITY) bad++;
      continue;
    }
    double e = fabs(got[i] - ref[i]) / (1 + fabs(ref[i]));
    if (!(e <= tol)) bad++;
    if (e > worst || isnan(e)) worst = e;
  }
  FMT_CHECK(bad == 0, "%s: %zu LSE entries wrong (worst relative error %.3e, tol %.1e; %zu rows fully masked)", cname, bad, worst, tol,
            ninf);
}

/* Rows with reference LSE -inf: O exactly 0 and the dQ added exactly 0. */
static void check_dead_rows(const char *cname, const Case *cs, const double *lse_ref, const double *o, const double *dq_added,
                            size_t *ndead)
{
  const int B = cs->B, Hq = cs->Hq, Sq = cs->Sq, D = cs->D;
  size_t bad = 0;
  *ndead = 0;
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hq; h++)
      for (int i = 0; i < Sq; i++) {
        if (lse_ref[((size_t)b * Hq + h) * Sq + i] != -INFINITY) continue;
        (*ndead)++;
        for (int d = 0; d < D; d++) {
          size_t x = (((size_t)b * Sq + i) * Hq + h) * D + d;
          if (o[x] != 0 || dq_added[x] != 0) bad++;
        }
      }
  FMT_CHECK(bad == 0, "%s: %zu entries of fully masked rows are not exactly 0 in O or dQ", cname, bad);
}

#endif /* CPU_ATTN_CASES_H */
