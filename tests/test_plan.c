/*
 * test_plan - FMPlan: call order, bad arguments, shape/mask compatibility, the flop count,
 * and forward/backward through the plan on one rank against a float64 dense reference; plan
 * types (local, cp: the default by size, the same refusals at FMPlanSetUp). On several ranks
 * only the checks that need them run (local is refused on every rank).
 */
#include "fmtest.h"
#include <flashmask/private/fmkernels.h>
#include <flashmask/private/fmdist.h>
#include <limits.h>
#include <math.h>

static int masked_cb(void *ctx, int mh, int i, int j)
{
  FMBool m = FM_TRUE;
  FMMaskIsMasked((FMMask)ctx, mh, i, j, &m);
  return m == FM_TRUE;
}

/* Run one problem through the plan on the CPU backend in dtype and compare with float64. */
static void check_problem(FMContext ctx, const char *type, int Sq, int Sk, int mh, int B, int Hq, int Hkv, int D, FMDType dt,
                          const char *ptype, uint64_t *seed)
{
  FMMask mask;
  FMPlan plan;
  size_t nq = (size_t)B * Sq * Hq * D, nk = (size_t)B * Sk * Hkv * D, nl = (size_t)B * Hq * Sq, es = FMDTypeSize(dt);
  double *q = malloc(nq * 8), *k = malloc(nk * 8), *v = malloc(nk * 8), *dout = malloc(nq * 8);
  double *o = malloc(nq * 8), *lse = malloc(nl * 8), *dq = malloc(nq * 8), *dk = malloc(nk * 8), *dv = malloc(nk * 8);
  double *got = malloc((nq > nk ? nq : nk) * 8);
  void *tq = malloc(nq * es), *tk = malloc(nk * es), *tv = malloc(nk * es), *tdo = malloc(nq * es);
  void *to = malloc(nq * es), *tdq = malloc(nq * es), *tdk = malloc(nk * es), *tdv = malloc(nk * es);
  float *tl = malloc(nl * 4);
  double tol = dt == FM_DTYPE_FP32 ? 1e-4 : 2e-2;
  int nlocal;

  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, Sq, Sk, mh));
  FMT_CALL(FMMaskSetType(mask, type));
  FMT_CALL(FMMaskSetUp(mask));
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetMask(plan, mask));
  FMT_CALL(FMPlanSetShape(plan, B, Hq, Hkv, D, dt));
  if (ptype) FMT_CALL(FMPlanSetType(plan, ptype));
  FMT_CALL(FMPlanSetUp(plan));
  FMT_CALL(FMPlanGetLocalRows(plan, &nlocal, NULL));
  FMT_CHECK(nlocal == Sq, "one rank owns all %d rows, got %d", Sq, nlocal);
  {
    int nk = 0;
    const int *keys = NULL;
    FMPlanType t = NULL;
    FMT_CALL(FMPlanGetLocalKeys(plan, &nk, &keys));
    FMT_CHECK(nk == Sk && keys && keys[0] == 0 && keys[Sk - 1] == Sk - 1, "%s plan on one rank holds %d keys, expected all %d in order",
              ptype ? ptype : "default", nk, Sk);
    FMT_CALL(FMPlanGetType(plan, &t));
    FMT_CHECK(t && !strcmp(t, ptype ? ptype : FMPLANLOCAL), "plan type %s, expected %s", t ? t : "(null)", ptype ? ptype : FMPLANLOCAL);
  }

  /* Inputs rounded to dtype with the library's conversion (the same one test_cpu_attn uses), so
     the float64 reference sees exactly what the plan sees. */
  struct { double *d; void *t; size_t n; } in[4] = {{q, tq, nq}, {k, tk, nk}, {v, tv, nk}, {dout, tdo, nq}};
  for (int a = 0; a < 4; a++)
    for (size_t i = 0; i < in[a].n; i++) {
      FMFromFloat(in[a].t, i, dt, (float)fmt_uniform(seed));
      in[a].d[i] = FMToFloat(in[a].t, i, dt); /* the reference sees the rounded value */
    }
  for (size_t i = 0; i < nq * es; i++) ((unsigned char *)to)[i] = 0xFF; /* poison: NaN in every type */
  for (size_t i = 0; i < nq * es; i++) ((unsigned char *)tdq)[i] = 0xFF;
  for (size_t i = 0; i < nk * es; i++) ((unsigned char *)tdk)[i] = ((unsigned char *)tdv)[i] = 0xFF;
  FMT_CALL(FMPlanForward(plan, tq, tk, tv, to, tl));
  FMT_CALL(FMPlanBackward(plan, tq, tk, tv, to, tl, tdo, tdq, tdk, tdv));
  fmt_ref_attention(B, Hq, Hkv, D, Sq, Sk, mh, 1.0 / sqrt((double)D), masked_cb, mask, q, k, v, o, lse, dout, dq, dk, dv);

  struct { const char *name; void *t; double *ref; size_t n; } out[4] = {{"O", to, o, nq}, {"dQ", tdq, dq, nq}, {"dK", tdk, dk, nk}, {"dV", tdv, dv, nk}};
  for (int a = 0; a < 4; a++) {
    for (size_t i = 0; i < out[a].n; i++) got[i] = FMToFloat(out[a].t, i, dt);
    double err = fmt_relerr(got, out[a].ref, out[a].n);
    FMT_CHECK(err <= tol, "%s %s Sq=%d Sk=%d heads %d/%d mh=%d d=%d: rel. error of %s = %.3e > %.1e", type, FMDTypeName(dt), Sq,
              Sk, Hq, Hkv, mh, D, out[a].name, err, tol);
  }
  for (size_t i = 0; i < nl; i++) {
    int ok = (isinf(lse[i]) && isinf(tl[i]) && tl[i] < 0) || fabs(tl[i] - lse[i]) <= 1e-3 * (1 + fabs(lse[i]));
    if (!ok) { FMT_CHECK(ok, "%s: lse[%zu] = %g, expected %g", type, i, tl[i], lse[i]); break; }
  }
  /* Flops under the FlashMask convention. */
  {
    double f, dens, sp;
    FMT_CALL(FMPlanGetFlops(plan, &f));
    FMT_CALL(FMMaskGetDensity(mask, &dens, &sp));
    double expect = 4.0 * B * Hq * (double)Sq * Sk * D * (1 - sp);
    FMT_CHECK(fabs(f - expect) <= 1e-9 * expect, "flops %g, expected %g", f, expect);
  }
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&mask));
  free(q); free(k); free(v); free(dout); free(o); free(lse); free(dq); free(dk); free(dv); free(got);
  free(tq); free(tk); free(tv); free(tdo); free(to); free(tdq); free(tdk); free(tdv); free(tl);
}

/* FMPlanView's text (collective; rank 0's copy is meaningful). Free it. */
static char *view_text(FMPlan plan)
{
  char *out = NULL;
  size_t len = 0;
  FILE *mem = open_memstream(&out, &len);
  FMT_CALL(FMPlanView(plan, mem));
  fclose(mem);
  return out;
}

/* A plan of shape (1, 2, hkv, 8, fp32) on mask, not set up. */
static FMPlan new_plan(FMContext ctx, FMMask mask, int hkv)
{
  FMPlan plan;
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetMask(plan, mask));
  FMT_CALL(FMPlanSetShape(plan, 1, 2, hkv, 8, FM_DTYPE_FP32));
  return plan;
}

/* Plan types on one rank: names, the default, the same refusals at FMPlanSetUp, View, stats, layout. */
static void check_types(FMContext ctx)
{
  FMMask mask;
  FMPlan plan;
  FMPlanType t = "unset";
  FMDistStats st;
  float buf[64], lse[8];
  char *out;
  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, 16, 16, 2));
  FMT_CALL(FMMaskSetType(mask, FMMASKCAUSAL));
  FMT_CALL(FMMaskSetUp(mask));
  /* the mask has 2 heads, heads_kv 1: both types refuse it at FMPlanSetUp, with the same error */
  for (int i = 0; i < 3; i++) {
    plan = new_plan(ctx, mask, 1);
    if (i < 2) FMT_CALL(FMPlanSetType(plan, i ? FMPLANCP : FMPLANLOCAL));
    FMT_EXPECT_ERR(FMPlanSetUp(plan), FM_ERR_ARG_INCOMP, "mask has 2 heads");
    FMT_CALL(FMPlanDestroy(&plan));
  }
  plan = new_plan(ctx, mask, 2);
  FMT_CALL(FMPlanGetType(plan, &t));
  FMT_CHECK(t == NULL, "a new plan has type %s, expected none", t);
  FMT_EXPECT_ERR(FMPlanSetType(plan, "hier"), FM_ERR_ARG_OUTOFRANGE, "\"hier\"");
  FMT_EXPECT_ERR(FMPlanSetType(plan, NULL), FM_ERR_ARG_NULL, "argument 2");
  FMT_CALL(FMPlanSetUp(plan)); /* the default on one rank */
  FMT_CALL(FMPlanGetType(plan, &t));
  FMT_CHECK(t && !strcmp(t, FMPLANLOCAL), "default type on one rank is %s, expected local", t ? t : "(null)");
  out = view_text(plan);
  FMT_CHECK(strstr(out, "type local") && strstr(out, "one rank"), "local plan view:\n%s", out);
  free(out);
  FMT_EXPECT_ERR(FMDistGetStats(plan, &st), FM_ERR_ARG_WRONG, "local");
  /* Scatter/Gather of a local plan are copies */
  {
    float g[2 * 16 * 8], l[2 * 16 * 8], back[2 * 16 * 8];
    for (int i = 0; i < 2 * 16 * 8; i++) { g[i] = (float)i; l[i] = back[i] = -1; }
    FMT_CALL(FMPlanScatter(plan, FM_PLAN_TENSOR_Q, 0, g, l));
    FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_Q, 0, l, back));
    FMT_CHECK(!memcmp(g, l, sizeof(g)) && !memcmp(g, back, sizeof(g)), "local Scatter/Gather are not copies");
    FMT_EXPECT_ERR(FMPlanScatter(plan, FM_PLAN_TENSOR_Q, 1, g, l), FM_ERR_ARG_OUTOFRANGE, "root");
  }
  /* a new type drops the set-up; cp runs on one rank, with the same rules as on several */
  FMT_CALL(FMPlanSetType(plan, FMPLANCP));
  FMT_EXPECT_ERR(FMPlanForward(plan, buf, buf, buf, buf, lse), FM_ERR_ORDER, "FMPlanSetUp");
  FMT_CALL(FMPlanSetVirtualNodes(plan, 2));
  FMT_EXPECT_ERR(FMPlanSetUp(plan), FM_ERR_OPT, "-fm_plan_nodes");
  FMT_CALL(FMPlanSetVirtualNodes(plan, 0));
  FMT_CALL(FMPlanSetUp(plan));
  FMT_CALL(FMPlanGetType(plan, &t));
  FMT_CHECK(t && !strcmp(t, FMPLANCP), "type %s after FMPlanSetType(cp)", t ? t : "(null)");
  out = view_text(plan);
  FMT_CHECK(strstr(out, "type cp") && strstr(out, "context parallel over 1 rank on"), "cp plan view:\n%s", out);
  free(out);
  FMT_CALL(FMDistGetStats(plan, &st));
  FMT_CHECK(st.nchunks >= 1 && st.recv_bytes == 0, "cp on one rank: %d chunks, %.0f bytes received", st.nchunks, st.recv_bytes);
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&mask));
}

/* A set-up cp plan's chunk count (FMDistGetStats). */
static int nchunks_of(FMPlan plan)
{
  FMDistStats st;
  memset(&st, 0, sizeof(st));
  FMT_CALL(FMDistGetStats(plan, &st));
  return st.nchunks;
}

/*
 * Options belong to objects: two plans with their own prefixes read their own options; a
 * setter and its option give the same plan; an option overrides an earlier setter; bad values
 * name the argument or the option; a local plan takes the settings without effect.
 */
static void check_settings(FMContext ctx)
{
  FMMask mask;
  FMPlan a, b, c, l;
  FMPlanType t = NULL;
  const char *str = NULL;
  int chunk = -1;
  double cost = 0;
  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, 256, 256, 1));
  FMT_CALL(FMMaskSetType(mask, FMMASKCAUSALDOCUMENT));
  FMT_CALL(FMMaskSetBlockSize(mask, 32));
  FMT_CALL(FMMaskSetUp(mask));
  FMT_CALL(FMOptionsSetValue("-pa_fm_plan_type", "cp"));
  FMT_CALL(FMOptionsSetValue("-pa_fm_plan_partition", "contiguous"));
  FMT_CALL(FMOptionsSetValue("-pa_fm_plan_chunk", "32"));
  FMT_CALL(FMOptionsSetValue("-pa_fm_plan_partial_cost", "2.5"));
  FMT_CALL(FMOptionsSetValue("-pb_fm_plan_type", "cp"));
  FMT_CALL(FMOptionsSetValue("-pb_fm_plan_partition", "dual_chunk"));
  FMT_CALL(FMOptionsSetValue("-pb_fm_plan_chunk", "64"));
  FMT_CALL(FMOptionsSetValue("-pb_fm_plan_schedule", "ring"));
  a = new_plan(ctx, mask, 1);
  b = new_plan(ctx, mask, 1);
  FMT_CALL(FMPlanSetOptionsPrefix(a, "pa_"));
  FMT_CALL(FMPlanSetOptionsPrefix(b, "pb_"));
  FMT_CALL(FMPlanSetChunk(b, 16)); /* the option given later wins, as in PETSc */
  FMT_CALL(FMPlanSetFromOptions(a));
  FMT_CALL(FMPlanSetFromOptions(b));
  FMT_CALL(FMPlanGetType(a, &t));
  FMT_CHECK(t && !strcmp(t, FMPLANCP), "-pa_fm_plan_type cp gave type %s", t ? t : "(null)");
  FMT_CALL(FMPlanGetPartition(a, &str));
  FMT_CHECK(!strcmp(str, "contiguous"), "plan a (prefix pa_) has partition %s, expected contiguous", str);
  FMT_CALL(FMPlanGetPartition(b, &str));
  FMT_CHECK(!strcmp(str, "dual_chunk"), "plan b (prefix pb_) has partition %s, expected dual_chunk", str);
  FMT_CALL(FMPlanGetChunk(a, &chunk));
  FMT_CHECK(chunk == 32, "plan a has chunk %d, expected 32", chunk);
  FMT_CALL(FMPlanGetChunk(b, &chunk));
  FMT_CHECK(chunk == 64, "plan b has chunk %d, expected 64 (-pb_fm_plan_chunk over FMPlanSetChunk 16)", chunk);
  FMT_CALL(FMPlanGetSchedule(a, &str));
  FMT_CHECK(!strcmp(str, "gather"), "plan a has schedule %s, expected the default gather", str);
  FMT_CALL(FMPlanGetSchedule(b, &str));
  FMT_CHECK(!strcmp(str, "ring"), "plan b has schedule %s, expected ring", str);
  FMT_CALL(FMPlanGetPartialCost(a, &cost));
  FMT_CHECK(cost == 2.5, "plan a has partial cost %g, expected 2.5", cost);
  FMT_CALL(FMPlanGetPartialCost(b, &cost));
  FMT_CHECK(cost == 1.0, "plan b has partial cost %g, expected the default 1", cost);
  FMT_CALL(FMPlanSetUp(a));
  FMT_CALL(FMPlanSetUp(b));
  FMT_CHECK(nchunks_of(a) == 8 && nchunks_of(b) == 4, "chunks of 32 and 64 rows over 256: %d and %d, expected 8 and 4", nchunks_of(a),
            nchunks_of(b));
  /* the setters give what the options gave */
  c = new_plan(ctx, mask, 1);
  FMT_CALL(FMPlanSetType(c, FMPLANCP));
  FMT_CALL(FMPlanSetPartition(c, "contiguous"));
  FMT_CALL(FMPlanSetChunk(c, 32));
  FMT_CALL(FMPlanSetPartialCost(c, 2.5));
  FMT_CALL(FMPlanSetFromOptions(c)); /* no prefix: no -fm_plan_* option given, the settings stay */
  FMT_CALL(FMPlanGetPartition(c, &str));
  FMT_CHECK(!strcmp(str, "contiguous"), "FMPlanSetPartition(contiguous) then FMPlanSetFromOptions gave %s", str);
  FMT_CALL(FMPlanSetUp(c));
  FMT_CHECK(nchunks_of(c) == nchunks_of(a), "FMPlanSetChunk(32) gives %d chunks, -pa_fm_plan_chunk 32 gives %d", nchunks_of(c), nchunks_of(a));
  /* bad values name the argument and the choices, or the option */
  FMT_EXPECT_ERR(FMPlanSetPartition(c, "zigzag"), FM_ERR_ARG_OUTOFRANGE, "\"contiguous\", \"dual_chunk\" or \"balanced\"");
  FMT_EXPECT_ERR(FMPlanSetRoute(c, NULL), FM_ERR_ARG_NULL, "argument 2");
  FMT_EXPECT_ERR(FMPlanSetChunk(c, -1), FM_ERR_ARG_OUTOFRANGE, "rows");
  FMT_EXPECT_ERR(FMPlanSetPartialCost(c, 0), FM_ERR_ARG_OUTOFRANGE, "(0, 64]");
  FMT_EXPECT_ERR(FMPlanSetTransport(c, "tcp"), FM_ERR_ARG_OUTOFRANGE, "\"nccl\"");
  FMT_EXPECT_ERR(FMPlanSetGPUAwareMPI(c, "yes"), FM_ERR_ARG_OUTOFRANGE, "\"auto\"");
  FMT_CALL(FMOptionsSetValue("-pc_fm_plan_chunk", "-3"));
  FMT_CALL(FMPlanSetOptionsPrefix(c, "pc_"));
  FMT_EXPECT_ERR(FMPlanSetFromOptions(c), FM_ERR_OPT, "-fm_plan_chunk is -3");
  FMT_CALL(FMPlanGetChunk(c, &chunk));
  FMT_CHECK(chunk == 32, "a refused option changed the chunk to %d", chunk);
  /* a local plan takes every setter without effect; its getters give the defaults */
  l = new_plan(ctx, mask, 1);
  FMT_CALL(FMPlanSetPartition(l, "contiguous"));
  FMT_CALL(FMPlanSetTrace(l, "never_written.h5", FM_TRUE));
  FMT_CALL(FMPlanGetType(l, &t));
  FMT_CHECK(t && !strcmp(t, FMPLANLOCAL), "a setter on a new one-rank plan set type %s, expected local", t ? t : "(null)");
  FMT_CALL(FMPlanGetPartition(l, &str));
  FMT_CHECK(!strcmp(str, "balanced"), "a local plan reports partition %s, expected the default balanced", str);
  FMT_CALL(FMPlanSetUp(l));
  FMT_CALL(FMPlanDestroy(&a));
  FMT_CALL(FMPlanDestroy(&b));
  FMT_CALL(FMPlanDestroy(&c));
  FMT_CALL(FMPlanDestroy(&l));
  FMT_CALL(FMMaskDestroy(&mask));
}

/* Plan types on several ranks: local is refused on every rank; the default is cp. */
static void check_types_many(FMContext ctx, int size)
{
  FMMask mask;
  FMPlan plan;
  FMPlanType t = NULL;
  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, 64, 64, 1));
  FMT_CALL(FMMaskSetType(mask, FMMASKCAUSAL));
  FMT_CALL(FMMaskSetUp(mask));
  plan = new_plan(ctx, mask, 1);
  FMT_EXPECT_ERR(FMPlanSetType(plan, FMPLANLOCAL), FM_ERR_ARG_INCOMP, "one rank only");
  /* -fm_plan_type local through the options: refused on every rank, at FMPlanSetFromOptions */
  FMT_CALL(FMOptionsSetValue("-many_fm_plan_type", "local"));
  FMT_CALL(FMPlanSetOptionsPrefix(plan, "many_"));
  FMT_EXPECT_ERR(FMPlanSetFromOptions(plan), FM_ERR_ARG_INCOMP, "one rank only");
  FMT_CALL(FMPlanSetOptionsPrefix(plan, NULL));
  /* the cp type's rules at FMPlanSetUp, as on one rank: more virtual nodes than ranks */
  FMT_CALL(FMPlanSetVirtualNodes(plan, size + 1));
  FMT_EXPECT_ERR(FMPlanSetUp(plan), FM_ERR_OPT, "-fm_plan_nodes");
  FMT_CALL(FMPlanSetVirtualNodes(plan, 0));
  FMT_CALL(FMPlanSetUp(plan));
  FMT_CALL(FMPlanGetType(plan, &t));
  FMT_CHECK(t && !strcmp(t, FMPLANCP), "default type on several ranks is %s, expected cp", t ? t : "(null)");
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&mask));
}

/*
 * The plans count their FLOPs for the log only under -fm_log_view: without it a forward and a
 * backward on a new mask leave its block sparsity uncomputed (a pass over the bounds that a
 * training step need not pay) and FMPlanGetFlops still counts on demand; with it the forward
 * computes the count. One rank, CPU backend.
 */
static void check_log_flops(FMContext ctx)
{
  const int S = 300, D = 16;
  const size_t n = (size_t)S * D;
  float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(n * 4), *lse = malloc(S * 4);
  float *dq = malloc(n * 4), *dk = malloc(n * 4), *dv = malloc(n * 4);
  FMMask mask;
  FMPlan plan;
  double fl = 0;
  for (size_t i = 0; i < n; i++) q[i] = k[i] = v[i] = (float)((i * 37 % 101) / 101.0 - 0.5);
  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, S, S, 1));
  FMT_CALL(FMMaskSetType(mask, FMMASKGLOBALSLIDINGWINDOW));
  FMT_CALL(FMMaskSetUp(mask));
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetMask(plan, mask));
  FMT_CALL(FMPlanSetShape(plan, 1, 1, 1, D, FM_DTYPE_FP32));
  FMT_CALL(FMPlanSetUp(plan));
  for (int logged = 0; logged < 2; logged++) {
    FMT_CALL(FMOptionsSetValue("-fm_log_view", logged ? "1" : "0"));
    FMT_CALL(FMMaskSetSeed(mask, 11 + (unsigned long)logged));
    FMT_CALL(FMMaskSetUp(mask));
    FMT_CALL(FMPlanSetUp(plan));
    FMT_CHECK(!(mask->stats_valid & FM_STATS_SPARSITY), "-fm_log_view %d: the new mask's sparsity is computed before the forward",
              logged);
    FMT_CALL(FMPlanForward(plan, q, k, v, o, lse));
    FMT_CALL(FMPlanBackward(plan, q, k, v, o, lse, q, dq, dk, dv));
    FMT_CHECK(!(mask->stats_valid & FM_STATS_SPARSITY) == !logged, "-fm_log_view %d: after the forward and backward the sparsity is %s",
              logged, (mask->stats_valid & FM_STATS_SPARSITY) ? "computed" : "not computed");
  }
  FMT_CALL(FMOptionsSetValue("-fm_log_view", "0")); /* no summary at this test's FMFinalize */
  FMT_CALL(FMPlanGetFlops(plan, &fl));
  FMT_CHECK(fl > 0 && fl <= 4.0 * S * S * D, "FMPlanGetFlops on demand: %g", fl);
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&mask));
  free(q); free(k); free(v); free(o); free(lse); free(dq); free(dk); free(dv);
}

int main(int argc, char **argv)
{
  FMContext ctx;
  FMMask mask;
  FMPlan plan;
  float buf[64], lse[8];
  uint64_t seed;
  int size = 1;

  FMT_CALL(FMInitialize(&argc, &argv, NULL, NULL));
  seed = fmt_seed();
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size > 1) { /* the checks that need several ranks, on every rank */
    FMT_CALL(FMContextSetUp(ctx));
    check_types_many(ctx, size);
    FMT_CALL(FMContextDestroy(&ctx));
    {
      int fails = fmt_failures, all = 0;
      MPI_Allreduce(&fails, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
      fmt_failures = all;
    }
    int rc = fmt_finish("test_plan");
    FMT_CALL(FMFinalize());
    return rc;
  }
  FMT_EXPECT_ERR(FMPlanCreate(ctx, &plan), FM_SUCCESS, NULL);
  FMT_EXPECT_ERR(FMPlanSetUp(plan), FM_ERR_ORDER, "FMPlanSetMask");

  /* Call order and arguments. */
  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, 8, 8, 2));
  FMT_CALL(FMMaskSetType(mask, FMMASKCAUSAL));
  FMT_CALL(FMPlanSetMask(plan, mask));
  FMT_EXPECT_ERR(FMPlanSetUp(plan), FM_ERR_ORDER, "FMContextSetUp");
  FMT_CALL(FMContextSetUp(ctx));
  FMT_EXPECT_ERR(FMPlanSetUp(plan), FM_ERR_ORDER, "FMMaskSetUp");
  FMT_CALL(FMMaskSetUp(mask));
  /* no default shape: FMPlanSetUp wants FMPlanSetShape first */
  FMT_EXPECT_ERR(FMPlanSetUp(plan), FM_ERR_ORDER, "Must call FMPlanSetShape()");
  FMT_EXPECT_ERR(FMPlanForward(plan, buf, buf, buf, buf, lse), FM_ERR_ORDER, "FMPlanSetUp");
  FMT_EXPECT_ERR(FMPlanBackward(plan, buf, buf, buf, buf, lse, buf, buf, buf, buf), FM_ERR_ORDER, "FMPlanSetUp");
  FMT_EXPECT_ERR(FMPlanSetShape(plan, 0, 1, 1, 8, FM_DTYPE_FP32), FM_ERR_ARG_OUTOFRANGE, "batch");
  FMT_EXPECT_ERR(FMPlanSetShape(plan, 1, 3, 2, 8, FM_DTYPE_FP32), FM_ERR_ARG_INCOMP, "heads_q");
  FMT_EXPECT_ERR(FMPlanSetShape(plan, 1, 2, 2, 12, FM_DTYPE_FP32), FM_ERR_ARG_OUTOFRANGE, "head_dim");
  FMT_EXPECT_ERR(FMPlanSetShape(plan, 1, 2, 2, 8, (FMDType)9), FM_ERR_ARG_OUTOFRANGE, "dtype");
  /* products in 64 bits: batch x heads x head_dim, then x seqlen (the mask is set up: 8) */
  FMT_EXPECT_ERR(FMPlanSetShape(plan, INT_MAX, INT_MAX, 1, 8, FM_DTYPE_FP32), FM_ERR_ARG_OUTOFRANGE, "too large: Q, O");
  FMT_EXPECT_ERR(FMPlanSetShape(plan, 1 << 30, 1024, 1024, 8, FM_DTYPE_FP32), FM_ERR_ARG_OUTOFRANGE, "too large");
  FMT_CALL(FMPlanSetShape(plan, 1 << 20, 1024, 1024, 8, FM_DTYPE_FP32)); /* 2^38 bytes per tensor: fits */
  FMT_EXPECT_ERR(FMPlanSetShape(plan, 1, 2, 2, 8, (FMDType)9), FM_ERR_ARG_OUTOFRANGE, "dtype");
  FMT_EXPECT_ERR(FMPlanSetUp(plan), FM_ERR_ORDER, "the last call failed"); /* a failed FMPlanSetShape unsets the shape */
  FMT_EXPECT_ERR(FMPlanSetScale(plan, -1.0), FM_ERR_ARG_OUTOFRANGE, "scale");
  FMT_EXPECT_ERR(FMPlanSetMask(plan, (FMMask)ctx), FM_ERR_ARG_WRONG, "argument 2");
  /* mask has 2 heads; heads_kv 1 is incompatible */
  FMT_CALL(FMPlanSetShape(plan, 1, 4, 1, 8, FM_DTYPE_FP32));
  FMT_EXPECT_ERR(FMPlanSetUp(plan), FM_ERR_ARG_INCOMP, "mask has 2 heads");
  FMT_CALL(FMPlanSetShape(plan, 1, 4, 2, 8, FM_DTYPE_FP32));
  {
    double sc = 0;
    FMT_CALL(FMPlanGetScale(plan, &sc));
    FMT_CHECK(sc == 1.0 / sqrt(8.0), "FMPlanGetScale with no scale set gave %g, expected 1/sqrt(8)", sc);
  }
  FMT_CALL(FMPlanSetUp(plan));
  FMT_EXPECT_ERR(FMPlanForward(plan, NULL, buf, buf, buf, lse), FM_ERR_ARG_NULL, "argument 2");
  FMT_EXPECT_ERR(FMPlanBackward(plan, buf, buf, buf, buf, NULL, buf, buf, buf, buf), FM_ERR_ARG_NULL, "argument 6");
  FMT_EXPECT_ERR(FMPlanGetLocalRows(plan, NULL, NULL), FM_ERR_ARG_NULL, "argument 2");
  {
    int b, hq, hkv, d; FMDType dt;
    FMT_EXPECT_ERR(FMPlanGetShape(NULL, &b, NULL, NULL, NULL, NULL), FM_ERR_ARG_NULL, "argument 1");
    FMT_EXPECT_ERR(FMPlanGetLocalKeys(plan, NULL, NULL), FM_ERR_ARG_NULL, "argument 2");
    FMT_CALL(FMPlanGetShape(plan, &b, &hq, &hkv, &d, &dt));
    FMT_CHECK(b == 1 && hq == 4 && hkv == 2 && d == 8 && dt == FM_DTYPE_FP32, "GetShape");
  }
  {
    char *out = NULL; size_t len = 0; FILE *mem = open_memstream(&out, &len);
    FMT_CALL(FMPlanView(plan, mem));
    fclose(mem);
    FMT_CHECK(strstr(out, "FMPlan:") && strstr(out, "causal"), "plan view:\n%s", out);
    free(out);
  }
  /* A mask set up again after FMPlanSetUp (new sizes) makes the plan stale until its own SetUp. */
  {
    int nl = 0;
    FMT_CALL(FMMaskSetSizes(mask, 16, 16, 2));
    FMT_CALL(FMMaskSetUp(mask));
    FMT_EXPECT_ERR(FMPlanForward(plan, buf, buf, buf, buf, lse), FM_ERR_ORDER, "mask changed");
    FMT_EXPECT_ERR(FMPlanGetLocalRows(plan, &nl, NULL), FM_ERR_ORDER, "mask changed");
    FMT_CALL(FMPlanSetUp(plan));
    FMT_CALL(FMPlanGetLocalRows(plan, &nl, NULL));
    FMT_CHECK(nl == 16, "after a new SetUp the plan owns %d rows, expected 16", nl);
    int nk = 0;
    FMT_CALL(FMPlanGetLocalKeys(plan, &nk, NULL));
    FMT_CHECK(nk == 16, "after a new SetUp the plan holds %d keys, expected 16", nk);
  }
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&mask));
  FMT_CHECK(plan == NULL && mask == NULL, "Destroy must NULL handles");

  /* On the CUDA backend (GPU present), host tensors are refused with a named argument. */
  {
    FMContext gctx;
    FMBackend be;
    FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &gctx));
    FMT_CALL(FMContextSetUp(gctx));
    FMT_CALL(FMContextGetBackend(gctx, &be));
    if (be == FM_BACKEND_CUDA) {
      FMT_CALL(FMMaskCreate(gctx, &mask));
      FMT_CALL(FMMaskSetSizes(mask, 8, 8, 1));
      FMT_CALL(FMMaskSetUp(mask));
      FMT_CALL(FMPlanCreate(gctx, &plan));
      FMT_CALL(FMPlanSetMask(plan, mask));
      FMT_CALL(FMPlanSetShape(plan, 1, 1, 1, 64, FM_DTYPE_BF16));
      FMT_CALL(FMPlanSetUp(plan));
      FMT_EXPECT_ERR(FMPlanForward(plan, buf, buf, buf, buf, lse), FM_ERR_ARG_WRONG, "argument 2 (q) is host memory");
      FMT_CALL(FMPlanDestroy(&plan));
      FMT_CALL(FMMaskDestroy(&mask));
    } else printf("CUDA host-pointer check not run: no GPU\n");
    FMT_CALL(FMContextDestroy(&gctx));
  }

  check_types(ctx);
  check_settings(ctx);
  check_log_flops(ctx);
  /* Numerics through the plan (CPU backend). */
  check_problem(ctx, FMMASKCAUSALDOCUMENT, 300, 300, 1, 2, 4, 2, 32, FM_DTYPE_FP32, NULL, &seed);
  check_problem(ctx, FMMASKCAUSAL, 200, 333, 2, 1, 4, 2, 64, FM_DTYPE_FP32, NULL, &seed);
  check_problem(ctx, FMMASKDOCUMENT, 257, 257, 1, 1, 2, 1, 64, FM_DTYPE_BF16, NULL, &seed);
  check_problem(ctx, FMMASKSLIDINGWINDOW, 190, 190, 1, 1, 2, 2, 16, FM_DTYPE_FP16, NULL, &seed);
  /* the context-parallel type asked for on one rank: the same results through its executor */
  check_problem(ctx, FMMASKCAUSALDOCUMENT, 300, 300, 1, 2, 4, 2, 32, FM_DTYPE_FP32, FMPLANCP, &seed);
  check_problem(ctx, FMMASKCAUSAL, 200, 333, 2, 1, 4, 2, 64, FM_DTYPE_FP32, FMPLANCP, &seed);
  FMT_CALL(FMContextDestroy(&ctx));
  int rc = fmt_finish("test_plan");
  FMT_CALL(FMFinalize());
  return rc;
}
