/*
 * test_dist_fail - a failure inside the CPU context-parallel executors (gather, relays, ring,
 * dK/dV reduction) on one rank is an error on every rank, never a hang, and the plan stays
 * usable. Run by tests/test_dist_fail.sh on 2, 3 and 4 ranks, one fault site per run under
 * `timeout`, with -fm_debug_fail SITE:RANK[:COUNT] (src/sys/faults.c arms the site) and the
 * schedule's options (-fm_plan_schedule, -fm_plan_overlap, -fm_deterministic, ...).
 *
 * One plan (cp type, CPU backend, causal mask, random fp32 Q/K/V/dO, chunks of 16 keys, two
 * virtual nodes so that chunks are relayed) runs FMPlanForward then FMPlanBackward. The call
 * where the armed site fires must fail on every rank: the armed rank with the site's own code,
 * every other rank with FM_ERR_COLLECTIVE, and every rank's message names the site and that
 * code. The same call is then made again: with COUNT 1 (the default) it must succeed, with
 * COUNT 0 (every hit fails) it must fail again the same way on every rank. The site must have
 * fired (a site that is never reached is a failure of the test). When the calls end in
 * success, O, the LSE, dQ, dK and dV gathered to rank 0 equal a single-rank CPU call on the
 * whole problem. Every object is destroyed at the end (the sanitizer tree checks for leaks).
 * Exit 0 when every check passed on every rank, 1 otherwise (the same on every rank).
 */
#include <flashmask/private/fmimpl.h>
#include "fmtest.h"
#include <mpi.h>

static int rank, size;
enum { B = 1, HQ = 2, HKV = 1, D = 16, S = 256 };

/* rows of [B][S][h*D] into [B][n][h*D] at the local positions */
static void pick(float *dst, const float *src, int n, const int *pos, size_t row)
{
  for (int b = 0; b < B; b++)
    for (int i = 0; i < n; i++) memcpy(dst + ((size_t)b * n + i) * row, src + ((size_t)b * S + pos[i]) * row, row * sizeof(float));
}

/* Every rank's outcome of one call; 1 when it ended as a failure at site on every rank (the
   armed rank with its own code, the others FM_ERR_COLLECTIVE, every message naming the site
   and the code), 0 when it succeeded on every rank; a mixed outcome is a failed check (-1). */
static int outcome(const char *what, FMErrorCode e, const char *site, int frank)
{
  int mine[2] = {(int)e, 0}, *all = malloc(sizeof(int) * 2 * size), nfail = 0, ok = 1;
  char want[128];
  snprintf(want, sizeof(want), "fault site %s", site);
  mine[1] = e ? fmt_msg_has(want) : 1;
  MPI_Allgather(mine, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < size; r++) nfail += all[2 * r] != FM_SUCCESS;
  if (nfail == 0) { free(all); return 0; }
  for (int r = 0; r < size; r++) {
    FMErrorCode c = (FMErrorCode)all[2 * r];
    if (r == frank) ok &= c != FM_SUCCESS && c != FM_ERR_COLLECTIVE;
    else ok &= c == FM_ERR_COLLECTIVE;
    ok &= all[2 * r + 1];
  }
  if (e && rank != frank) {
    const char *code = FMErrorString((FMErrorCode)all[2 * frank]);
    char cname[32];
    size_t n = strcspn(code, ":");
    snprintf(cname, sizeof(cname), "%.*s", (int)(n < sizeof(cname) ? n : sizeof(cname) - 1), code);
    FMT_CHECK(fmt_msg_has(cname), "[rank %d] %s: the message does not name rank %d's code %s: %s", rank, what, frank, cname, FMGetLastErrorMessage());
  }
  if (!ok && rank == 0)
    for (int r = 0; r < size; r++)
      fprintf(stderr, "  %s on rank %d: %s, message %s the site\n", what, r, FMErrorString((FMErrorCode)all[2 * r]), all[2 * r + 1] ? "names" : "does not name");
  FMT_CHECK(ok, "[rank %d] %s: %d of %d ranks failed; expected rank %d with the site's code, every other with FM_ERR_COLLECTIVE, all naming %s", rank,
            what, nfail, size, frank, site);
  free(all);
  return ok ? 1 : -1;
}

/* Max relative error of a (gathered) against the float64 reference b. */
static double err_of(const float *a, const float *b, size_t n)
{
  double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n), r;
  for (size_t i = 0; i < n; i++) { x[i] = a[i]; y[i] = b[i]; }
  r = fmt_relerr(x, y, n);
  free(x); free(y);
  return r;
}

/* One call made until it succeeds (or, with count 0, twice); *fired: the site fired. 1 when it succeeded. */
static int call_twice(const char *what, FMPlan plan, int bwd, float *const *t, const char *site, int frank, int count, int *fired)
{
  for (int attempt = 0; attempt < 2; attempt++) {
    FMErrorCode e = bwd ? FMPlanBackward(plan, t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7], t[8]) : FMPlanForward(plan, t[0], t[1], t[2], t[3], t[4]);
    int o = outcome(what, e, site, frank);
    if (o == 0) {
      FMT_CHECK(!(attempt == 1 && count == 0), "%s: the second call succeeded although %s fails at every hit (count 0)", what, site);
      return 1;
    }
    if (o < 0) return 0;
    *fired = 1;
    if (attempt == 1) FMT_CHECK(count == 0, "%s: the second call failed at %s again although its count was %d", what, site, count);
  }
  return 0;
}

int main(int argc, char **argv)
{
  char spec[128] = "", site[64] = "";
  int frank = 0, count = 1, fired = 0, nl, nk, ok = 1, all;
  const int *rows, *keys;
  const size_t uq = (size_t)HQ * D, uk = (size_t)HKV * D, nQ = (size_t)B * S * uq, nK = (size_t)B * S * uk, nL = (size_t)B * HQ * S;
  uint64_t seed = 0x5eedf00dull;
  FMContext ctx;
  FMMask mask;
  FMPlan plan;
  float *gq, *gk, *gv, *gdo, *lq, *lk, *lv, *ldo, *lo, *llse, *ldq, *ldk, *ldv;

  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_dist_fail: a failure inside the cp executors is an error on every rank"));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  FMT_CALL(FMOptionsGetString("-fm_debug_fail", "the armed fault site (see src/sys/faults.c)", spec, sizeof(spec), NULL));
  if (!spec[0] || size < 2) {
    if (rank == 0) fprintf(stderr, "usage: mpiexec -n 2|3|4 test_dist_fail -fm_debug_fail SITE:RANK[:COUNT] (got %d ranks)\n", size);
    FMFinalize();
    return 99;
  }
  {
    size_t n = strcspn(spec, ":");
    snprintf(site, sizeof(site), "%.*s", (int)(n < sizeof(site) ? n : sizeof(site) - 1), spec);
    if (spec[n] == ':') sscanf(spec + n + 1, "%d:%d", &frank, &count);
  }
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  gq = malloc(4 * nQ); gk = malloc(4 * nK); gv = malloc(4 * nK); gdo = malloc(4 * nQ);
  for (size_t i = 0; i < nQ; i++) { gq[i] = (float)(2 * fmt_uniform(&seed) - 1); gdo[i] = (float)(2 * fmt_uniform(&seed) - 1); }
  for (size_t i = 0; i < nK; i++) { gk[i] = (float)(2 * fmt_uniform(&seed) - 1); gv[i] = (float)(2 * fmt_uniform(&seed) - 1); }

  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  FMT_CALL(FMContextSetUp(ctx));
  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, S, S, 1));
  FMT_CALL(FMMaskSetType(mask, FMMASKCAUSAL));
  FMT_CALL(FMMaskSetUp(mask));
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetType(plan, FMPLANCP));
  FMT_CALL(FMPlanSetMask(plan, mask));
  FMT_CALL(FMPlanSetShape(plan, B, HQ, HKV, D, FM_DTYPE_FP32));
  FMT_CALL(FMPlanSetChunk(plan, 16));
  FMT_CALL(FMPlanSetVirtualNodes(plan, 2));
  FMT_CALL(FMPlanSetFromOptions(plan)); /* -fm_plan_schedule, -fm_plan_overlap, ... from the .sh */
  FMT_CALL(FMPlanSetUp(plan));
  FMT_CALL(FMPlanGetLocalRows(plan, &nl, &rows));
  FMT_CALL(FMPlanGetLocalKeys(plan, &nk, &keys));
  lq = malloc(4 * (B * nl * uq + 1)); ldo = malloc(4 * (B * nl * uq + 1)); lo = malloc(4 * (B * nl * uq + 1)); ldq = malloc(4 * (B * nl * uq + 1));
  lk = malloc(4 * (B * nk * uk + 1)); lv = malloc(4 * (B * nk * uk + 1)); ldk = malloc(4 * (B * nk * uk + 1)); ldv = malloc(4 * (B * nk * uk + 1));
  llse = malloc(4 * (B * HQ * nl + 1));
  pick(lq, gq, nl, rows, uq); pick(ldo, gdo, nl, rows, uq); pick(lk, gk, nk, keys, uk); pick(lv, gv, nk, keys, uk);
  {
    float *t[9] = {lq, lk, lv, lo, llse, ldo, ldq, ldk, ldv};
    ok = call_twice("FMPlanForward", plan, 0, t, site, frank, count, &fired);
    if (ok) ok = call_twice("FMPlanBackward", plan, 1, t, site, frank, count, &fired);
  }
  MPI_Allreduce(&fired, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  FMT_CHECK(all, "the fault site %s was never reached on rank %d (nothing failed): the case does not test it", site, frank);
  if (ok) { /* both calls ended in success: the results are right */
    float *go = rank == 0 ? malloc(4 * nQ) : NULL, *gdq = rank == 0 ? malloc(4 * nQ) : NULL, *gdk = rank == 0 ? malloc(4 * nK) : NULL,
          *gdv = rank == 0 ? malloc(4 * nK) : NULL, *glse = rank == 0 ? malloc(4 * nL) : NULL;
    FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_Q, 0, lo, go));
    FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_LSE, 0, llse, glse));
    FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_Q, 0, ldq, gdq));
    FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_KV, 0, ldk, gdk));
    FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_KV, 0, ldv, gdv));
    if (rank == 0) {
      FMAttnProblem p;
      float *ro = malloc(4 * nQ), *rl = malloc(4 * nL), *rdq = calloc(nQ, 4), *rdk = malloc(4 * nK), *rdv = malloc(4 * nK);
      double eo, el, edq, edk, edv;
      memset(&p, 0, sizeof(p));
      FMT_CALL(FMMaskGetDesc_Private(mask, &p.mask));
      p.batch = B; p.heads_q = HQ; p.heads_kv = HKV; p.head_dim = D; p.dtype = FM_DTYPE_FP32;
      p.scale = (float)(1.0 / sqrt((double)D)); p.nq = S; p.k0 = 0; p.nk = S; p.nthreads = 1;
      FMT_CALL(FMCPUForward(&p, gq, gk, gv, ro, FM_DTYPE_FP32, rl));
      FMT_CALL(FMCPUBackward(&p, gq, gk, gv, ro, rl, gdo, rdq, rdk, rdv, FM_DTYPE_FP32));
      eo = err_of(go, ro, nQ); el = err_of(glse, rl, nL); edq = err_of(gdq, rdq, nQ); edk = err_of(gdk, rdk, nK); edv = err_of(gdv, rdv, nK);
      FMT_CHECK(eo < 1e-5 && el < 1e-5 && edq < 1e-5 && edk < 1e-5 && edv < 1e-5,
                "after the failure at %s the calls' results differ from one CPU call: rel. errors O %.2e LSE %.2e dQ %.2e dK %.2e dV %.2e", site, eo, el,
                edq, edk, edv);
      if (!fmt_failures) printf("%s on rank %d of %d: every rank failed alike, then O, LSE, dQ, dK, dV correct (max rel. error %.1e)\n", site, frank,
                                size, fmax(fmax(eo, el), fmax(edq, fmax(edk, edv))));
      free(ro); free(rl); free(rdq); free(rdk); free(rdv);
    }
    free(go); free(gdq); free(gdk); free(gdv); free(glse);
  } else if (rank == 0 && !fmt_failures) printf("%s on rank %d of %d: every call failed alike on every rank (count 0)\n", site, frank, size);
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&mask));
  FMT_CALL(FMContextDestroy(&ctx));
  free(gq); free(gk); free(gv); free(gdo); free(lq); free(lk); free(lv); free(ldo); free(lo); free(llse); free(ldq); free(ldk); free(ldv);
  MPI_Allreduce(&fmt_failures, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  fmt_failures = all;
  FMT_CALL(FMFinalize());
  return fmt_finish("test_dist_fail");
}
