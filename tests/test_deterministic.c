/*
 * test_deterministic.c - FMPlanSetDeterministic (-fm_deterministic) on the CPU backend: the
 * forward gives bitwise identical O and LSE, and the backward dQ, dK, dV, from run to run. Random inputs (fp32 and bf16),
 * GQA 2:1, an odd sequence length, a causal_document mask of uneven documents, small chunks:
 *   - "cp" plans (every rank count; two virtual nodes at 4 ranks, so chunks are relayed and
 *     their dK/dV partials reduced over two levels), the gather and the ring schedule, overlap
 *     on: one backward without the setting, then the setting turned on after FMPlanSetUp and
 *     five forwards and backwards, each rank first sleeping a random time (so the chunks arrive
 *     in another order each time) and the outputs poisoned with NaN: each rank's o, lse, dq,
 *     dk, dv equal the first run's byte for byte; the gathered result is within the float64 reference's
 *     tolerance and within the same tolerance of the run without the setting;
 *   - on one rank, the "local" plan: the same five runs, and also 1, 2 and 3 threads give the
 *     same bytes (the CPU kernels' partition and sums do not depend on the thread count);
 *   - the setter refuses 7 by name, the getter and -fm_deterministic through
 *     FMPlanSetFromOptions, FMPlanView's line; at several ranks a backward with the setting on
 *     rank 0 only fails on every rank with FM_ERR_MISMATCH naming it.
 */
#include "fmtest.h"
#include <mpi.h>
#include <unistd.h>

enum { B = 2, HQ = 4, HKV = 2, D = 32, S = 333, CHUNK = 32, REPS = 5 };
#define NQ ((size_t)B * S * HQ * D)
#define NK ((size_t)B * S * HKV * D)
#define NL ((size_t)B * HQ * S)

static int rank, size;
static const int docs[] = {57, 120, 9, 100, 47}; /* sums to S */

static int masked_cb(void *ctx, int mh, int i, int j)
{
  FMBool m = FM_FALSE;
  FMT_CALL(FMMaskIsMasked((FMMask)ctx, mh, i, j, &m));
  return m == FM_TRUE;
}

/* Global inputs (every rank makes the same), rounded to dt, and the float64 reference. */
typedef struct {
  FMDType dt;
  void *q, *k, *v, *dout;
  double *rdq, *rdk, *rdv; /* rank 0 only */
} Inputs;

static void to_t(void *t, FMDType dt, double *x, size_t n)
{
  for (size_t i = 0; i < n; i++) { FMFromFloat(t, i, dt, (float)x[i]); x[i] = FMToFloat(t, i, dt); }
}

static void inputs_make(Inputs *in, FMDType dt, FMMask mask, uint64_t seed)
{
  size_t es = FMDTypeSize(dt);
  double *x[4];
  size_t n[4] = {NQ, NK, NK, NQ};
  void **t[4] = {&in->q, &in->k, &in->v, &in->dout};
  memset(in, 0, sizeof(*in));
  in->dt = dt;
  for (int a = 0; a < 4; a++) {
    x[a] = malloc(sizeof(double) * n[a]);
    *t[a] = malloc(n[a] * es);
    for (size_t i = 0; i < n[a]; i++) x[a][i] = fmt_uniform(&seed);
    to_t(*t[a], dt, x[a], n[a]);
  }
  if (!rank) {
    double *o = malloc(sizeof(double) * NQ), *lse = malloc(sizeof(double) * NL);
    in->rdq = malloc(sizeof(double) * NQ); in->rdk = malloc(sizeof(double) * NK); in->rdv = malloc(sizeof(double) * NK);
    fmt_ref_attention(B, HQ, HKV, D, S, S, 1, 1.0 / sqrt((double)D), masked_cb, mask, x[0], x[1], x[2], o, lse, x[3], in->rdq, in->rdk,
                      in->rdv);
    free(o); free(lse);
  }
  for (int a = 0; a < 4; a++) free(x[a]);
}

static void inputs_free(Inputs *in)
{
  free(in->q); free(in->k); free(in->v); free(in->dout); free(in->rdq); free(in->rdk); free(in->rdv);
}

/* A plan's local tensors after its forward. */
typedef struct {
  FMPlan plan;
  int nl, nk;
  size_t bq, bk; /* bytes of the local Q-like and K-like tensors */
  void *q, *k, *v, *o, *dout, *dq, *dk, *dv;
  float *lse;
} Run;

static void run_create(Run *r, FMContext ctx, FMMask mask, const Inputs *in, const char *type, const char *schedule)
{
  size_t es = FMDTypeSize(in->dt);
  memset(r, 0, sizeof(*r));
  FMT_CALL(FMPlanCreate(ctx, &r->plan));
  FMT_CALL(FMPlanSetMask(r->plan, mask));
  FMT_CALL(FMPlanSetShape(r->plan, B, HQ, HKV, D, in->dt));
  FMT_CALL(FMPlanSetType(r->plan, type));
  if (!strcmp(type, FMPLANCP)) {
    FMT_CALL(FMPlanSetChunk(r->plan, CHUNK));
    FMT_CALL(FMPlanSetSchedule(r->plan, schedule));
    FMT_CALL(FMPlanSetOverlap(r->plan, FM_TRUE));
    if (size == 4) FMT_CALL(FMPlanSetVirtualNodes(r->plan, 2));
  }
  FMT_CALL(FMPlanSetUp(r->plan));
  FMT_CALL(FMPlanGetLocalRows(r->plan, &r->nl, NULL));
  FMT_CALL(FMPlanGetLocalKeys(r->plan, &r->nk, NULL));
  r->bq = (size_t)B * r->nl * HQ * D * es; r->bk = (size_t)B * r->nk * HKV * D * es;
  r->q = malloc(r->bq + 1); r->o = malloc(r->bq + 1); r->dout = malloc(r->bq + 1); r->dq = malloc(r->bq + 1);
  r->k = malloc(r->bk + 1); r->v = malloc(r->bk + 1); r->dk = malloc(r->bk + 1); r->dv = malloc(r->bk + 1);
  r->lse = malloc(sizeof(float) * ((size_t)B * HQ * r->nl + 1));
  FMT_CALL(FMPlanScatter(r->plan, FM_PLAN_TENSOR_Q, 0, in->q, r->q));
  FMT_CALL(FMPlanScatter(r->plan, FM_PLAN_TENSOR_KV, 0, in->k, r->k));
  FMT_CALL(FMPlanScatter(r->plan, FM_PLAN_TENSOR_KV, 0, in->v, r->v));
  FMT_CALL(FMPlanScatter(r->plan, FM_PLAN_TENSOR_Q, 0, in->dout, r->dout));
  FMT_CALL(FMPlanForward(r->plan, r->q, r->k, r->v, r->o, r->lse));
}

static void run_free(Run *r)
{
  free(r->q); free(r->o); free(r->dout); free(r->dq); free(r->k); free(r->v); free(r->dk); free(r->dv); free(r->lse);
  FMT_CALL(FMPlanDestroy(&r->plan));
}

/* A backward into poisoned (all-ones bytes: NaN in fp32 and bf16) outputs. */
static FMErrorCode run_backward(Run *r)
{
  memset(r->dq, 0xff, r->bq); memset(r->dk, 0xff, r->bk); memset(r->dv, 0xff, r->bk);
  return FMPlanBackward(r->plan, r->q, r->k, r->v, r->o, r->lse, r->dout, r->dq, r->dk, r->dv);
}

/* The gathered gradients (rank 0: into g[0..2], NQ/NK elements of dt). */
static void run_gather(Run *r, void *g[3])
{
  FMT_CALL(FMPlanGather(r->plan, FM_PLAN_TENSOR_Q, 0, r->dq, g[0]));
  FMT_CALL(FMPlanGather(r->plan, FM_PLAN_TENSOR_KV, 0, r->dk, g[1]));
  FMT_CALL(FMPlanGather(r->plan, FM_PLAN_TENSOR_KV, 0, r->dv, g[2]));
}

static double relerr_t(const void *got, FMDType dt, const double *ref, size_t n)
{
  double *x = malloc(sizeof(double) * n), e;
  for (size_t i = 0; i < n; i++) x[i] = FMToFloat(got, i, dt);
  e = fmt_relerr(x, ref, n);
  free(x);
  return e;
}

/* This rank's dq, dk, dv against the saved bytes (which[i] names the first that differs). */
static void check_same(const char *what, int rep, const Run *r, void *const saved[3])
{
  const void *now[3] = {r->dq, r->dk, r->dv};
  const size_t nb[3] = {r->bq, r->bk, r->bk};
  const char *name[3] = {"dq", "dk", "dv"};
  for (int t = 0; t < 3; t++) {
    size_t first = nb[t];
    for (size_t i = 0; i < nb[t] && first == nb[t]; i++)
      if (((const unsigned char *)now[t])[i] != ((const unsigned char *)saved[t])[i]) first = i;
    FMT_CHECK(first == nb[t], "%s, run %d (rank %d): %s differs from the first run's from byte %zu of %zu", what, rep + 1, rank, name[t],
              first, nb[t]);
  }
}

/* One plan: a backward without the setting, REPS with it; bitwise equal runs, both near the reference. */
static void test_plan(FMContext ctx, FMMask mask, const Inputs *in, const char *type, const char *schedule, uint64_t *seed)
{
  const double tol = in->dt == FM_DTYPE_FP32 ? 2e-5 : 2e-2;
  const size_t es = FMDTypeSize(in->dt), nn[3] = {NQ, NK, NK};
  const double *ref[3] = {in->rdq, in->rdk, in->rdv};
  const char *name[3] = {"dQ", "dK", "dV"};
  void *nd[3], *det[3], *saved[3], *saved_o, *saved_l;
  char what[160];
  FMBool on = FM_FALSE;
  Run r;
  snprintf(what, sizeof(what), "%s plan%s%s on %d rank(s), %s", type, schedule ? ", schedule " : "", schedule ? schedule : "", size,
           FMDTypeName(in->dt));
  for (int t = 0; t < 3; t++) { nd[t] = malloc(nn[t] * es); det[t] = malloc(nn[t] * es); }
  run_create(&r, ctx, mask, in, type, schedule);
  saved[0] = malloc(r.bq + 1); saved[1] = malloc(r.bk + 1); saved[2] = malloc(r.bk + 1);
  saved_o = malloc(r.bq + 1); saved_l = malloc(sizeof(float) * ((size_t)B * HQ * r.nl + 1));
  FMT_CALL(FMPlanGetDeterministic(r.plan, &on));
  FMT_CHECK(on == FM_FALSE, "%s: FMPlanGetDeterministic gives %d on a fresh plan; expected FM_FALSE", what, (int)on);
  FMT_CALL(run_backward(&r));
  run_gather(&r, nd);
  FMT_CALL(FMPlanSetDeterministic(r.plan, FM_TRUE)); /* after FMPlanSetUp: the next backward takes it */
  FMT_CALL(FMPlanGetDeterministic(r.plan, &on));
  FMT_CHECK(on == FM_TRUE, "%s: FMPlanGetDeterministic gives %d after FMPlanSetDeterministic(FM_TRUE)", what, (int)on);
  for (int rep = 0; rep < REPS; rep++) {
    const size_t bl = sizeof(float) * B * HQ * r.nl;
    usleep((useconds_t)(fmt_next(seed) % 4 * 8000)); /* 0, 8, 16 or 24 ms, another per rank and run */
    /* the forward too, into poisoned outputs: a training step's backward takes this step's O */
    memset(r.o, 0xff, r.bq);
    memset(r.lse, 0xff, bl);
    FMT_CALL(FMPlanForward(r.plan, r.q, r.k, r.v, r.o, r.lse));
    usleep((useconds_t)(fmt_next(seed) % 4 * 8000));
    FMT_CALL(run_backward(&r));
    if (rep == 0) {
      memcpy(saved[0], r.dq, r.bq); memcpy(saved[1], r.dk, r.bk); memcpy(saved[2], r.dv, r.bk);
      memcpy(saved_o, r.o, r.bq); memcpy(saved_l, r.lse, bl);
    } else {
      FMT_CHECK(!memcmp(saved_o, r.o, r.bq) && !memcmp(saved_l, r.lse, bl), "%s, run %d (rank %d): the forward's O or LSE differs from the first run's",
                what, rep + 1, rank);
      check_same(what, rep, &r, saved);
    }
  }
  run_gather(&r, det);
  if (!rank)
    for (int t = 0; t < 3; t++) {
      double e = relerr_t(det[t], in->dt, ref[t], nn[t]), *x = malloc(sizeof(double) * nn[t]), end;
      FMT_CHECK(e <= tol, "%s: deterministic %s relative error %.3g against the float64 reference > %.3g", what, name[t], e, tol);
      for (size_t i = 0; i < nn[t]; i++) x[i] = FMToFloat(nd[t], i, in->dt);
      end = relerr_t(det[t], in->dt, x, nn[t]);
      FMT_CHECK(end <= tol, "%s: deterministic %s differs from the default one by %.3g (relative) > %.3g", what, name[t], end, tol);
      free(x);
    }
  if (!strcmp(type, FMPLANLOCAL)) { /* the CPU kernels: the same bytes for any thread count */
    for (int th = 1; th <= 3; th++) {
      char w2[200];
      snprintf(w2, sizeof(w2), "%s, %d thread(s)", what, th);
      FMT_CALL(FMContextSetNumThreads(ctx, th));
      FMT_CALL(run_backward(&r));
      check_same(w2, th, &r, saved);
    }
    FMT_CALL(FMContextSetNumThreads(ctx, 2));
  }
  run_free(&r);
  for (int t = 0; t < 3; t++) { free(nd[t]); free(det[t]); free(saved[t]); }
  free(saved_o);
  free(saved_l);
}

/* The setter's checks, the option, the view, and ranks that disagree. */
static void test_api(FMContext ctx, FMMask mask, const Inputs *in)
{
  Run r;
  FMBool on = FM_TRUE;
  FMErrorCode e;
  run_create(&r, ctx, mask, in, size > 1 ? FMPLANCP : FMPLANLOCAL, "gather");
  FMT_EXPECT_ERR(FMPlanSetDeterministic(r.plan, (FMBool)7), FM_ERR_ARG_OUTOFRANGE, "flag");
  FMT_EXPECT_ERR(FMPlanGetDeterministic(r.plan, NULL), FM_ERR_ARG_NULL, NULL);
  FMT_CALL(FMOptionsSetValue("-fm_deterministic", NULL));
  FMT_CALL(FMPlanSetFromOptions(r.plan));
  FMT_CALL(FMPlanGetDeterministic(r.plan, &on));
  FMT_CHECK(on == FM_TRUE, "-fm_deterministic: FMPlanGetDeterministic gives %d after FMPlanSetFromOptions", (int)on);
  {
    char *buf = NULL;
    size_t len = 0;
    FILE *mem = open_memstream(&buf, &len);
    FMT_CALL(FMPlanSetUp(r.plan)); /* the type's options may have changed the set-up state */
    FMT_CALL(FMPlanView(r.plan, mem));
    fclose(mem);
    if (!rank) FMT_CHECK(buf && strstr(buf, "deterministic forward and backward: on"), "FMPlanView does not say \"deterministic forward and backward: on\":\n%s", buf);
    free(buf);
  }
  FMT_CALL(FMOptionsSetValue("-fm_deterministic", "0"));
  FMT_CALL(FMPlanSetFromOptions(r.plan));
  FMT_CALL(FMPlanGetDeterministic(r.plan, &on));
  FMT_CHECK(on == FM_FALSE, "-fm_deterministic 0: FMPlanGetDeterministic gives %d", (int)on);
  if (size > 1) {
    FMT_CALL(FMPlanSetUp(r.plan));
    FMT_CALL(FMPlanForward(r.plan, r.q, r.k, r.v, r.o, r.lse));
    FMT_CALL(FMPlanSetDeterministic(r.plan, rank == 0 ? FM_TRUE : FM_FALSE));
    e = run_backward(&r);
    FMT_CHECK(e == FM_ERR_MISMATCH && fmt_msg_has("deterministic"), "rank %d: the setting on rank 0 only: %s: %s", rank, FMErrorString(e),
              FMGetLastErrorMessage());
    FMT_CALL(FMPlanSetDeterministic(r.plan, FM_TRUE));
    FMT_CALL(run_backward(&r));
  }
  run_free(&r);
}

int main(int argc, char **argv)
{
  FMContext ctx;
  FMMask mask;
  uint64_t seed, sleeps;
  const FMDType dts[2] = {FM_DTYPE_FP32, FM_DTYPE_BF16};
  const char *sched[2] = {"gather", "ring"};
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_deterministic: FMPlanSetDeterministic, bitwise identical backwards"));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  seed = fmt_seed();
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  sleeps = seed ^ (0x51ed270b27ull * (uint64_t)(rank + 1));
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  FMT_CALL(FMContextSetUp(ctx));
  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, S, S, 1));
  FMT_CALL(FMMaskSetType(mask, FMMASKCAUSALDOCUMENT));
  FMT_CALL(FMMaskSetDocuments(mask, (int)(sizeof(docs) / sizeof(docs[0])), docs));
  FMT_CALL(FMMaskSetUp(mask));
  for (int d = 0; d < 2; d++) {
    Inputs in;
    inputs_make(&in, dts[d], mask, seed + (uint64_t)d);
    if (size == 1) test_plan(ctx, mask, &in, FMPLANLOCAL, NULL, &sleeps);
    for (int s = 0; s < 2; s++) test_plan(ctx, mask, &in, FMPLANCP, sched[s], &sleeps);
    if (d == 0) test_api(ctx, mask, &in);
    inputs_free(&in);
  }
  FMT_CALL(FMMaskDestroy(&mask));
  FMT_CALL(FMContextDestroy(&ctx));
  {
    int f = fmt_failures, all = 0;
    MPI_Allreduce(&f, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    fmt_failures = all;
  }
  int rc = fmt_finish("test_deterministic");
  FMT_CALL(FMFinalize());
  return rc;
}
