/*
 * test_finite.c - non-finite inputs give visibly non-finite outputs, and -fm_check_finite
 * turns them into a named error on every rank. On the CPU backend, "local" (one rank) and
 * "cp" plans (one rank and several), fp32 and bf16:
 *   - a NaN in Q, an Inf in K, an Inf in V: the rows whose visible scores hold a NaN or +Inf
 *     (and only those) have NaN O and LSE; a score of -Inf is weight 0; every other row
 *     equals a NaN-propagating float64 reference; the fully masked row keeps O = 0, LSE = -inf;
 *   - the backward: every gradient the reference makes non-finite is non-finite; outside the
 *     (batch, kv head) slice of the bad element every gradient is finite and equals the
 *     reference (inside it 0 x Inf may spread through a tile; finite values there still match);
 *     with a NaN in Q, dV is exact everywhere (the NaN row's P is 0 on the keys it does not see);
 *   - +-1e30 in a Q row (finite scores): the exact finite result, not the fully masked one;
 *     1e30 in a Q row and a K row it sees (a score that overflows fp32): that row is NaN;
 *   - with FMPlanSetCheckFinite (and -fm_check_finite through FMPlanSetFromOptions): Forward
 *     with a NaN in q or an Inf in k, and Backward with a NaN in dout, fail on every rank (the
 *     rank holding the element with FM_ERR_ARG_WRONG, the others with FM_ERR_COLLECTIVE, all
 *     naming the tensor, the value and its position), and finite inputs still run; ranks with
 *     different settings get FM_ERR_MISMATCH naming it.
 * Argument: bf16 (default fp32).
 */
#include "fmtest.h"
#include <float.h>

enum { B = 2, HQ = 4, HKV = 2, D = 32, S = 160, R0 = 70 /* the fully masked row */ };
#define G (HQ / HKV)
#define NQ ((size_t)B * S * HQ * D)
#define NK ((size_t)B * S * HKV * D)
#define NL ((size_t)B * HQ * S)

static int rank, size;
static FMDType dt = FM_DTYPE_FP32;
static double scale;

static size_t qi(int b, int i, int h, int d) { return (((size_t)b * S + i) * HQ + h) * D + d; }
static size_t ki(int b, int j, int h, int d) { return (((size_t)b * S + j) * HKV + h) * D + d; }

/* causal, and row R0 sees nothing (bounds: column j hides rows [lts, lte) and [uts, ute)) */
static int masked(int i, int j) { return j > i || i == R0; }

static FMErrorCode make_mask(FMContext ctx, FMMask *mask)
{
  int32_t lts[S], lte[S], uts[S], ute[S];
  for (int j = 0; j < S; j++) {
    lts[j] = j <= R0 ? R0 : S; lte[j] = j <= R0 ? R0 + 1 : S;
    uts[j] = 0; ute[j] = j;
  }
  FMCall(FMMaskCreate(ctx, mask));
  FMCall(FMMaskSetSizes(*mask, S, S, 1));
  FMCall(FMMaskSetType(*mask, FMMASKBOUNDS));
  FMCall(FMMaskSetBounds(*mask, 0, lts, lte, uts, ute));
  FMCall(FMMaskSetUp(*mask));
  return FM_SUCCESS;
}

/* NaN-propagating float64 attention: a NaN score makes the row max NaN; exp(-inf - m) = 0. */
static void reference(const double *q, const double *k, const double *v, const double *dout, double *o, double *lse, double *dq, double *dk,
                      double *dv)
{
  static double s[S], p[S];
  memset(dq, 0, sizeof(double) * NQ); memset(dk, 0, sizeof(double) * NK); memset(dv, 0, sizeof(double) * NK);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < HQ; h++)
      for (int i = 0; i < S; i++) {
        const int hk = h / G;
        double m = -INFINITY, l = 0, di = 0;
        int any = 0, nan = 0;
        for (int d = 0; d < D; d++) o[qi(b, i, h, d)] = 0;
        for (int j = 0; j <= i; j++) {
          if (masked(i, j)) continue;
          double x = 0;
          for (int d = 0; d < D; d++) x += q[qi(b, i, h, d)] * k[ki(b, j, hk, d)];
          s[j] = x * scale; any = 1;
          if (isnan(s[j])) nan = 1;
          else if (s[j] > m) m = s[j];
        }
        if (!any) { lse[((size_t)b * HQ + h) * S + i] = -INFINITY; continue; }
        if (nan) m = NAN;
        for (int j = 0; j <= i; j++)
          if (!masked(i, j)) { p[j] = exp(s[j] - m); l += p[j]; }
        for (int j = 0; j <= i; j++)
          if (!masked(i, j))
            for (int d = 0; d < D; d++) o[qi(b, i, h, d)] += p[j] / l * v[ki(b, j, hk, d)];
        lse[((size_t)b * HQ + h) * S + i] = m + log(l);
        for (int d = 0; d < D; d++) di += dout[qi(b, i, h, d)] * o[qi(b, i, h, d)];
        for (int j = 0; j <= i; j++) {
          if (masked(i, j)) continue;
          double pj = p[j] / l, dp = 0;
          for (int d = 0; d < D; d++) dp += dout[qi(b, i, h, d)] * v[ki(b, j, hk, d)];
          const double ds = pj * (dp - di);
          for (int d = 0; d < D; d++) {
            dv[ki(b, j, hk, d)] += pj * dout[qi(b, i, h, d)];
            dk[ki(b, j, hk, d)] += scale * ds * q[qi(b, i, h, d)];
            dq[qi(b, i, h, d)] += scale * ds * k[ki(b, j, hk, d)];
          }
        }
      }
}

/* One run of a plan on global tensors (root 0 holds them; Scatter/Gather around the call). */
typedef struct {
  FMPlan plan;
  int nl, nk;
  void *lq, *lk, *lv, *lo, *ldo, *ldq, *ldk, *ldv;
  float *llse;
} Run;

static void run_setup(Run *r, FMContext ctx, FMMask mask, const char *type)
{
  size_t es = FMDTypeSize(dt);
  memset(r, 0, sizeof(*r));
  FMT_CALL(FMPlanCreate(ctx, &r->plan));
  FMT_CALL(FMPlanSetMask(r->plan, mask));
  FMT_CALL(FMPlanSetShape(r->plan, B, HQ, HKV, D, dt));
  FMT_CALL(FMPlanSetType(r->plan, type));
  if (!strcmp(type, FMPLANCP)) FMT_CALL(FMPlanSetChunk(r->plan, 32));
  FMT_CALL(FMPlanSetUp(r->plan));
  FMT_CALL(FMPlanGetLocalRows(r->plan, &r->nl, NULL));
  FMT_CALL(FMPlanGetLocalKeys(r->plan, &r->nk, NULL));
  size_t nq = (size_t)B * r->nl * HQ * D * es + 1, nk = (size_t)B * r->nk * HKV * D * es + 1;
  r->lq = malloc(nq); r->lo = malloc(nq); r->ldo = malloc(nq); r->ldq = malloc(nq);
  r->lk = malloc(nk); r->lv = malloc(nk); r->ldk = malloc(nk); r->ldv = malloc(nk);
  r->llse = malloc(sizeof(float) * ((size_t)B * HQ * r->nl + 1));
}

static void run_free(Run *r)
{
  free(r->lq); free(r->lo); free(r->ldo); free(r->ldq); free(r->lk); free(r->lv); free(r->ldk); free(r->ldv); free(r->llse);
  FMT_CALL(FMPlanDestroy(&r->plan));
}

static FMErrorCode run_forward(Run *r, const void *q, const void *k, const void *v, void *o, float *lse)
{
  FMT_CALL(FMPlanScatter(r->plan, FM_PLAN_TENSOR_Q, 0, q, r->lq));
  FMT_CALL(FMPlanScatter(r->plan, FM_PLAN_TENSOR_KV, 0, k, r->lk));
  FMT_CALL(FMPlanScatter(r->plan, FM_PLAN_TENSOR_KV, 0, v, r->lv));
  FMCall(FMPlanForward(r->plan, r->lq, r->lk, r->lv, r->lo, r->llse));
  FMT_CALL(FMPlanGather(r->plan, FM_PLAN_TENSOR_Q, 0, r->lo, o));
  FMT_CALL(FMPlanGather(r->plan, FM_PLAN_TENSOR_LSE, 0, r->llse, lse));
  return FM_SUCCESS;
}

static FMErrorCode run_backward(Run *r, const void *dout, void *dq, void *dk, void *dv)
{
  FMT_CALL(FMPlanScatter(r->plan, FM_PLAN_TENSOR_Q, 0, dout, r->ldo));
  FMCall(FMPlanBackward(r->plan, r->lq, r->lk, r->lv, r->lo, r->llse, r->ldo, r->ldq, r->ldk, r->ldv));
  FMT_CALL(FMPlanGather(r->plan, FM_PLAN_TENSOR_Q, 0, r->ldq, dq));
  FMT_CALL(FMPlanGather(r->plan, FM_PLAN_TENSOR_KV, 0, r->ldk, dk));
  FMT_CALL(FMPlanGather(r->plan, FM_PLAN_TENSOR_KV, 0, r->ldv, dv));
  return FM_SUCCESS;
}

/*
 * got against ref over n elements: non-finite in ref => non-finite in got; non-finite in got
 * where ref is finite only where spread(idx) allows; the finite pairs within tol (relative 2-norm).
 */
static void compare(const char *what, const char *tensor, const double *ref, const void *got, size_t n, int (*spread)(size_t, const int *),
                    const int *slice, double tol)
{
  double num = 0, den = 0;
  size_t missing = 0, extra = 0, first_missing = n, first_extra = n;
  for (size_t i = 0; i < n; i++) {
    double g = FMToFloat(got, i, dt);
    if (!isfinite(ref[i])) {
      if (isfinite(g)) { missing++; if (first_missing == n) first_missing = i; }
    } else if (!isfinite(g)) {
      if (!spread || !spread(i, slice)) { extra++; if (first_extra == n) first_extra = i; }
    } else { num += (g - ref[i]) * (g - ref[i]); den += ref[i] * ref[i]; }
  }
  FMT_CHECK(!missing, "%s: %s has %zu finite elements where the reference is not (first at %zu)", what, tensor, missing, first_missing);
  FMT_CHECK(!extra, "%s: %s has %zu non-finite elements where the reference is finite (first at %zu)", what, tensor, extra, first_extra);
  FMT_CHECK(sqrt(num / (den > 0 ? den : 1)) <= tol, "%s: %s relative error %.3g over the finite elements > %.3g", what, tensor,
            sqrt(num / (den > 0 ? den : 1)), tol);
}

/* inside the slice (batch slice[0], kv head slice[1]) of a Q-like or K-like index */
static int in_q_slice(size_t i, const int *sl) { return (int)(i / ((size_t)S * HQ * D)) == sl[0] && (int)(i / D % HQ) / G == sl[1]; }
static int in_k_slice(size_t i, const int *sl) { return (int)(i / ((size_t)S * HKV * D)) == sl[0] && (int)(i / D % HKV) == sl[1]; }

typedef struct {
  const char *name;
  int tensor;   /* 0: q, 1: k, 2: v */
  int b, row, head, col;
  double value; /* NAN, INFINITY; or +-1e30 over the whole row (big = 1) */
  int big;      /* 1: row = +-1e30 (random signs); 2: row = 1e30 and key row big_key = 1e30 (overflow) */
  int big_key;
  int backward; /* compare gradients */
} Case;

static void fill(double *x, size_t n, uint64_t *s)
{
  for (size_t i = 0; i < n; i++) x[i] = fmt_uniform(s);
}

/* x rounded to dt in t, and x set to what t holds */
static void to_t(void *t, double *x, size_t n)
{
  for (size_t i = 0; i < n; i++) { FMFromFloat(t, i, dt, (float)x[i]); x[i] = FMToFloat(t, i, dt); }
}

static void inject(const Case *c, double *q, double *k, double *v, uint64_t *s)
{
  double *x = c->tensor == 0 ? q : c->tensor == 1 ? k : v;
  size_t (*at)(int, int, int, int) = c->tensor == 0 ? qi : ki;
  if (!c->big) { x[at(c->b, c->row, c->head, c->col)] = c->value; return; }
  for (int d = 0; d < D; d++) q[qi(c->b, c->row, c->head, d)] = c->big == 2 || fmt_next(s) % 2 ? 1e30 : -1e30;
  if (c->big == 2)
    for (int d = 0; d < D; d++) k[ki(c->b, c->big_key, c->head / G, d)] = 1e30;
}

static void run_case(FMContext ctx, FMMask mask, const char *type, const Case *c, uint64_t *seed)
{
  const double tol = dt == FM_DTYPE_FP32 ? 2e-5 : 1e-2;
  const size_t es = FMDTypeSize(dt);
  double *q = malloc(sizeof(double) * NQ), *k = malloc(sizeof(double) * NK), *v = malloc(sizeof(double) * NK), *dout = malloc(sizeof(double) * NQ);
  double *ro = malloc(sizeof(double) * NQ), *rl = malloc(sizeof(double) * NL), *rdq = malloc(sizeof(double) * NQ);
  double *rdk = malloc(sizeof(double) * NK), *rdv = malloc(sizeof(double) * NK);
  void *tq = malloc(NQ * es), *tk = malloc(NK * es), *tv = malloc(NK * es), *tdo = malloc(NQ * es), *to = malloc(NQ * es);
  void *tdq = malloc(NQ * es), *tdk = malloc(NK * es), *tdv = malloc(NK * es);
  float *lse = malloc(sizeof(float) * NL);
  const int slice[2] = {c->b, c->tensor == 0 ? c->head / G : c->head};
  char what[160];
  Run r;
  fill(q, NQ, seed); fill(k, NK, seed); fill(v, NK, seed); fill(dout, NQ, seed);
  inject(c, q, k, v, seed);
  to_t(tq, q, NQ); to_t(tk, k, NK); to_t(tv, v, NK); to_t(tdo, dout, NQ);
  reference(q, k, v, dout, ro, rl, rdq, rdk, rdv);
  if (c->big == 2) { /* fp32 overflows the score of (row, big_key): the row is NaN there, finite in float64 */
    for (int d = 0; d < D; d++) ro[qi(c->b, c->row, c->head, d)] = NAN;
    rl[((size_t)c->b * HQ + c->head) * S + c->row] = NAN;
  }
  snprintf(what, sizeof(what), "%s, %s plan on %d rank(s), %s", c->name, type, size, FMDTypeName(dt));
  run_setup(&r, ctx, mask, type);
  FMT_CALL(run_forward(&r, tq, tk, tv, to, lse));
  if (!rank) {
    double *lsed = malloc(sizeof(double) * NL);
    size_t bad_o = 0;
    int bad_l = 0;
    for (size_t i = 0; i < NL; i++) lsed[i] = lse[i];
    /* an Inf in V reaches, as 0 x Inf, the rows of its tiles that do not see it (O only; LSE is exact) */
    compare(what, "O", ro, to, NQ, c->tensor == 2 ? in_q_slice : NULL, slice, tol);
    { FMDType keep = dt; dt = FM_DTYPE_FP32; compare(what, "LSE", rl, lse, NL, NULL, NULL, tol); dt = keep; }
    for (int b = 0; b < B; b++)
      for (int h = 0; h < HQ; h++) {
        bad_l += lse[((size_t)b * HQ + h) * S + R0] != -INFINITY;
        for (int d = 0; d < D; d++) bad_o += FMToFloat(to, qi(b, R0, h, d), dt) != 0;
      }
    FMT_CHECK(!bad_o && !bad_l, "%s: the fully masked row %d has %zu O elements != 0 and %d LSE != -inf", what, R0, bad_o, bad_l);
    if (c->value != 0 || c->big == 2) { /* the row of the bad element (a NaN, or a score overflowing) is NaN: not O = 0, LSE = -inf */
      if (c->tensor == 0)
        FMT_CHECK(isnan(lse[((size_t)c->b * HQ + c->head) * S + c->row]), "%s: LSE of the bad row %d is %g; expected NaN", what, c->row,
                  (double)lse[((size_t)c->b * HQ + c->head) * S + c->row]);
    }
    free(lsed);
  }
  if (c->backward) {
    FMT_CALL(run_backward(&r, tdo, tdq, tdk, tdv));
    if (!rank) {
      compare(what, "dQ", rdq, tdq, NQ, in_q_slice, slice, tol);
      compare(what, "dK", rdk, tdk, NK, in_k_slice, slice, tol);
      /* a NaN row's P is 0 on the keys it does not see, so with a NaN in Q even dV is exact */
      compare(what, "dV", rdv, tdv, NK, c->tensor == 0 ? NULL : in_k_slice, slice, tol);
    }
  }
  run_free(&r);
  free(q); free(k); free(v); free(dout); free(ro); free(rl); free(rdq); free(rdk); free(rdv);
  free(tq); free(tk); free(tv); free(tdo); free(to); free(tdq); free(tdk); free(tdv); free(lse);
}

/* Whether this rank holds global query row i (keys = 0) or key position i (keys = 1). */
static int holds(FMPlan plan, int keys, int i)
{
  int n;
  const int *idx;
  if (keys) FMT_CALL(FMPlanGetLocalKeys(plan, &n, &idx));
  else FMT_CALL(FMPlanGetLocalRows(plan, &n, &idx));
  for (int x = 0; x < n; x++)
    if (idx[x] == i) return 1;
  return 0;
}

/* The call failed on every rank: FM_ERR_ARG_WRONG where the element is, FM_ERR_COLLECTIVE elsewhere, with the message text. */
static void expect_named(const char *what, FMErrorCode e, int mine, const char *text)
{
  FMErrorCode want = mine ? FM_ERR_ARG_WRONG : FM_ERR_COLLECTIVE;
  FMT_CHECK(e == want, "%s (rank %d): returned %s, expected %s", what, rank, FMErrorString(e), FMErrorString(want));
  FMT_CHECK(fmt_msg_has(text), "%s (rank %d): message \"%s\" does not say \"%s\"", what, rank, FMGetLastErrorMessage(), text);
}

static void test_check(FMContext ctx, FMMask mask, const char *type, uint64_t *seed)
{
  const size_t es = FMDTypeSize(dt);
  double *x = malloc(sizeof(double) * NQ);
  void *tq = malloc(NQ * es), *tk = malloc(NK * es), *tv = malloc(NK * es), *to = malloc(NQ * es), *tdo = malloc(NQ * es);
  void *tdq = malloc(NQ * es), *tdk = malloc(NK * es), *tdv = malloc(NK * es);
  float *lse = malloc(sizeof(float) * NL);
  FMBool on = FM_FALSE;
  char what[128];
  Run r;
  fill(x, NQ, seed); to_t(tq, x, NQ); to_t(tdo, x, NQ);
  fill(x, NK, seed); to_t(tk, x, NK);
  fill(x, NK, seed); to_t(tv, x, NK);
  run_setup(&r, ctx, mask, type);
  /* the option, through FMPlanSetFromOptions */
  FMT_CALL(FMOptionsSetValue("-fm_check_finite", NULL));
  FMT_CALL(FMPlanSetFromOptions(r.plan));
  FMT_CALL(FMPlanGetCheckFinite(r.plan, &on));
  FMT_CHECK(on == FM_TRUE, "-fm_check_finite: FMPlanGetCheckFinite gives %d after FMPlanSetFromOptions", (int)on);
  FMT_CALL(FMOptionsSetValue("-fm_check_finite", "0"));
  FMT_CALL(FMPlanSetFromOptions(r.plan));
  FMT_CALL(FMPlanGetCheckFinite(r.plan, &on));
  FMT_CHECK(on == FM_FALSE, "-fm_check_finite 0: FMPlanGetCheckFinite gives %d", (int)on);
  FMT_EXPECT_ERR(FMPlanSetCheckFinite(r.plan, (FMBool)7), FM_ERR_ARG_OUTOFRANGE, "check");
  FMT_CALL(FMPlanSetCheckFinite(r.plan, FM_TRUE));
  FMT_CALL(FMPlanSetUp(r.plan)); /* FMPlanSetFromOptions set the shape again */
  snprintf(what, sizeof(what), "check_finite, %s plan on %d rank(s), %s", type, size, FMDTypeName(dt));

  /* finite inputs run, and the backward too */
  FMT_CALL(run_forward(&r, tq, tk, tv, to, lse));
  FMT_CALL(run_backward(&r, tdo, tdq, tdk, tdv));
  FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
  /* a NaN in q at batch 0, head 1, row 100, col 3 */
  FMFromFloat(tq, qi(0, 100, 1, 3), dt, NAN);
  expect_named(what, run_forward(&r, tq, tk, tv, to, lse), holds(r.plan, 0, 100),
               "Argument 2 (q) of FMPlanForward() holds a non-finite value (nan) at batch 0, head 1, row 100, col 3");
  FMFromFloat(tq, qi(0, 100, 1, 3), dt, 0.5f);
  /* -Inf in k at batch 1, kv head 0, key 20, col 5 */
  FMFromFloat(tk, ki(1, 20, 0, 5), dt, -INFINITY);
  expect_named(what, run_forward(&r, tq, tk, tv, to, lse), holds(r.plan, 1, 20),
               "Argument 3 (k) of FMPlanForward() holds a non-finite value (-inf) at batch 1, head 0, key 20, col 5");
  FMFromFloat(tk, ki(1, 20, 0, 5), dt, 0.5f);
  FMPopErrorHandler();
  FMT_CALL(run_forward(&r, tq, tk, tv, to, lse)); /* the plan still runs */
  FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
  /* Inf in dout at batch 1, head 2, row 40, col 7: the backward refuses it */
  FMFromFloat(tdo, qi(1, 40, 2, 7), dt, INFINITY);
  expect_named(what, run_backward(&r, tdo, tdq, tdk, tdv), holds(r.plan, 0, 40),
               "Argument 7 (dout) of FMPlanBackward() holds a non-finite value (inf) at batch 1, head 2, row 40, col 7");
  if (size > 1) { /* ranks with different settings: FM_ERR_MISMATCH on every rank, not a hang */
    FMErrorCode e;
    FMFromFloat(tdo, qi(1, 40, 2, 7), dt, 0.5f);
    FMT_CALL(FMPlanSetCheckFinite(r.plan, rank == 0 ? FM_TRUE : FM_FALSE));
    e = run_forward(&r, tq, tk, tv, to, lse);
    FMT_CHECK(e == FM_ERR_MISMATCH && fmt_msg_has("check_finite"), "%s (rank %d): check_finite on rank 0 only: %s: %s", what, rank,
              FMErrorString(e), FMGetLastErrorMessage());
  }
  FMPopErrorHandler();
  run_free(&r);
  free(x); free(tq); free(tk); free(tv); free(to); free(tdo); free(tdq); free(tdk); free(tdv); free(lse);
}

int main(int argc, char **argv)
{
  FMContext ctx;
  FMMask mask;
  uint64_t seed;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_finite: non-finite inputs and -fm_check_finite"));
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "bf16")) dt = FM_DTYPE_BF16;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  seed = fmt_seed();
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  scale = 1.0 / sqrt((double)D);
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  FMT_CALL(FMContextSetUp(ctx));
  FMT_CALL(make_mask(ctx, &mask));
  /* name, tensor, b, row, head, col, value, big, big_key, backward */
  const Case cases[] = {
    {"NaN in Q", 0, 0, 100, 1, 3, NAN, 0, 0, 1},
    {"Inf in K", 1, 1, 20, 0, 5, INFINITY, 0, 0, 1},
    {"-Inf in K", 1, 0, 130, 1, 2, -INFINITY, 0, 0, 1},
    {"Inf in V", 2, 1, 64, 1, 0, INFINITY, 0, 0, 1},
    {"+-1e30 in a Q row (finite scores)", 0, 0, 130, 2, 0, 0, 1, 0, 0},
    {"1e30 in a Q row and a K row (a score overflows)", 0, 1, 150, 3, 0, 0, 2, 140, 0},
  };
  const char *types[2] = {FMPLANLOCAL, FMPLANCP};
  for (int t = size > 1; t < 2; t++) {
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) run_case(ctx, mask, types[t], &cases[c], &seed);
    test_check(ctx, mask, types[t], &seed);
  }
  FMT_CALL(FMMaskDestroy(&mask));
  FMT_CALL(FMContextDestroy(&ctx));
  {
    int f = fmt_failures, all = 0;
    MPI_Allreduce(&f, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    fmt_failures = all;
  }
  int rc = fmt_finish("test_finite");
  FMT_CALL(FMFinalize());
  return rc;
}
