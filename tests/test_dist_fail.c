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
 * With -fail_backend cuda (a CUDA build and a GPU: test_dist_fail.sh with FM_FAIL_BACKEND=cuda) the same on the
 * GPU executor: bf16, head_dim 64, chunks of 64 keys, tensors on the device, the GPU sites.
 * Exit 0 when every check passed on every rank, 1 otherwise, 77 without a GPU for -fail_backend
 * cuda (the same on every rank).
 */
#include <flashmask/private/fmimpl.h>
#include "fmtest.h"
#include <mpi.h>
#if FM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

static int rank, size, D = 16, cuda = 0;
static FMDType DT = FM_DTYPE_FP32;
static size_t es = 4;
enum { B = 1, HQ = 2, HKV = 1, S = 256 };

/* rows of [B][S][row] (row bytes) into [B][n][row] at the local positions */
static void pick(char *dst, const char *src, int n, const int *pos, size_t row)
{
  for (int b = 0; b < B; b++)
    for (int i = 0; i < n; i++) memcpy(dst + ((size_t)b * n + i) * row, src + ((size_t)b * S + pos[i]) * row, row);
}

/* Device copies (-fail_backend cuda) of host tensors, and back; a CUDA failure is a hard error (99). */
static void *dev_of(void *h, size_t bytes)
{
#if FM_HAVE_CUDA
  void *p = NULL;
  if (!cuda) return h;
  if (cudaMalloc(&p, bytes + 16) != cudaSuccess || cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice) != cudaSuccess) {
    fprintf(stderr, "HARD ERROR rank %d: cudaMalloc/cudaMemcpy of %zu bytes\n", rank, bytes);
    exit(99);
  }
  return p;
#else
  (void)bytes;
  return h;
#endif
}
static void host_of(void *h, void *dv, size_t bytes, int release)
{
#if FM_HAVE_CUDA
  if (!cuda) return;
  if (h && (cudaDeviceSynchronize() != cudaSuccess || cudaMemcpy(h, dv, bytes, cudaMemcpyDeviceToHost) != cudaSuccess)) {
    fprintf(stderr, "HARD ERROR rank %d: cudaMemcpy of %zu bytes back\n", rank, bytes);
    exit(99);
  }
  if (release) (void)cudaFree(dv);
#else
  (void)h; (void)dv; (void)bytes; (void)release;
#endif
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

/* Relative error of a (gathered, type ta) against the reference b (type tb). */
static double err_of(const void *a, FMDType ta, const void *b, FMDType tb, size_t n)
{
  double *x = malloc(sizeof(double) * n), *y = malloc(sizeof(double) * n), r;
  for (size_t i = 0; i < n; i++) { x[i] = FMToFloat(a, i, ta); y[i] = FMToFloat(b, i, tb); }
  r = fmt_relerr(x, y, n);
  free(x); free(y);
  return r;
}

/* One call made until it succeeds (or, with count 0, twice); *fired: the site fired. 1 when it succeeded. */
static int call_twice(const char *what, FMPlan plan, int bwd, void *const *t, const char *site, int frank, int count, int *fired)
{
  for (int attempt = 0; attempt < 2; attempt++) {
    FMErrorCode e = bwd ? FMPlanBackward(plan, t[0], t[1], t[2], t[3], (const float *)t[4], t[5], t[6], t[7], t[8])
                        : FMPlanForward(plan, t[0], t[1], t[2], t[3], (float *)t[4]);
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

/* After both calls succeeded: O, LSE, dQ, dK, dV gathered to rank 0 equal one CPU call on the
   whole problem (g*: the global inputs; l*: this rank's outputs, on the host). Collective. */
static void check_results(FMPlan plan, FMMask mask, const char *site, int frank, const char *backend, double tol, const char *gq, const char *gk,
                          const char *gv, const char *gdo, const char *lo, const float *llse, const char *ldq, const char *ldk, const char *ldv)
{
  const size_t nQ = (size_t)B * S * HQ * D, nK = (size_t)B * S * HKV * D, nL = (size_t)B * HQ * S;
    char *go = rank == 0 ? malloc(es * nQ) : NULL, *gdq = rank == 0 ? malloc(es * nQ) : NULL, *gdk = rank == 0 ? malloc(es * nK) : NULL,
       *gdv = rank == 0 ? malloc(es * nK) : NULL;
  float *glse = rank == 0 ? malloc(4 * nL) : NULL;
  FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_Q, 0, lo, go));
  FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_LSE, 0, llse, glse));
  FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_Q, 0, ldq, gdq));
  FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_KV, 0, ldk, gdk));
  FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_KV, 0, ldv, gdv));
  if (rank == 0) {
    FMAttnProblem p;
    char *ro = malloc(es * nQ), *rdk = malloc(es * nK), *rdv = malloc(es * nK);
    float *rl = malloc(4 * nL), *rdq = calloc(nQ, 4);
    double eo, el, edq, edk, edv;
    memset(&p, 0, sizeof(p));
    FMT_CALL(FMMaskGetDesc_Private(mask, &p.mask));
    p.batch = B; p.heads_q = HQ; p.heads_kv = HKV; p.head_dim = D; p.dtype = DT;
    p.scale = (float)(1.0 / sqrt((double)D)); p.nq = S; p.k0 = 0; p.nk = S; p.nthreads = 1;
    FMT_CALL(FMCPUForward(&p, gq, gk, gv, ro, DT, rl));
    FMT_CALL(FMCPUBackward(&p, gq, gk, gv, ro, rl, gdo, rdq, rdk, rdv, DT));
    eo = err_of(go, DT, ro, DT, nQ); el = err_of(glse, FM_DTYPE_FP32, rl, FM_DTYPE_FP32, nL); edq = err_of(gdq, DT, rdq, FM_DTYPE_FP32, nQ);
    edk = err_of(gdk, DT, rdk, DT, nK); edv = err_of(gdv, DT, rdv, DT, nK);
    FMT_CHECK(eo < tol && el < tol && edq < tol && edk < tol && edv < tol,
              "after the failure at %s the calls' results differ from one CPU call: rel. errors O %.2e LSE %.2e dQ %.2e dK %.2e dV %.2e (tol %.0e)", site,
              eo, el, edq, edk, edv, tol);
    if (!fmt_failures) printf("%s on rank %d of %d (%s): every rank failed alike, then O, LSE, dQ, dK, dV correct (max rel. error %.1e)\n", site,
                              frank, size, backend, fmax(fmax(eo, el), fmax(edq, fmax(edk, edv))));
    free(ro); free(rl); free(rdq); free(rdk); free(rdv);
  }
  free(go); free(gdq); free(gdk); free(gdv); free(glse);
}

int main(int argc, char **argv)
{
  char spec[128] = "", site[64] = "", backend[16] = "cpu";
  int frank = 0, count = 1, fired = 0, nl, nk, ok = 1, all;
  const int *rows, *keys;
  size_t uq, uk, nQ, nK, lQ, lK, lL;
  uint64_t seed = 0x5eedf00dull;
  FMContext ctx;
  FMMask mask;
  FMPlan plan;
  char *gq, *gk, *gv, *gdo, *lq, *lk, *lv, *ldo, *lo, *ldq, *ldk, *ldv;
  float *llse;
  double tol;

  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_dist_fail: a failure inside the cp executors is an error on every rank"));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  FMT_CALL(FMOptionsGetString("-fm_debug_fail", "the armed fault site (see src/sys/faults.c)", spec, sizeof(spec), NULL));
  FMT_CALL(FMOptionsGetString("-fail_backend", "cpu or cuda: the executor under test", backend, sizeof(backend), NULL));
  if (!spec[0] || size < 2 || (strcmp(backend, "cpu") && strcmp(backend, "cuda"))) {
    if (rank == 0) fprintf(stderr, "usage: mpiexec -n 2|3|4 test_dist_fail -fm_debug_fail SITE:RANK[:COUNT] [-fail_backend cpu|cuda] (got %d ranks)\n", size);
    FMFinalize();
    return 99;
  }
  cuda = !strcmp(backend, "cuda");
#if !FM_HAVE_CUDA
  if (cuda) {
    if (rank == 0) printf("SKIP: -fail_backend cuda in a build without CUDA\n");
    FMFinalize();
    return 77;
  }
#endif
  if (cuda) { D = 64; DT = FM_DTYPE_BF16; es = 2; }
  tol = cuda ? 3e-2 : 1e-5;
  uq = (size_t)HQ * D; uk = (size_t)HKV * D; nQ = (size_t)B * S * uq; nK = (size_t)B * S * uk;
  {
    size_t n = strcspn(spec, ":");
    snprintf(site, sizeof(site), "%.*s", (int)(n < sizeof(site) ? n : sizeof(site) - 1), spec);
    if (spec[n] == ':') sscanf(spec + n + 1, "%d:%d", &frank, &count);
  }
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  gq = malloc(es * nQ); gk = malloc(es * nK); gv = malloc(es * nK); gdo = malloc(es * nQ);
  for (size_t i = 0; i < nQ; i++) { FMFromFloat(gq, i, DT, (float)(2 * fmt_uniform(&seed) - 1)); FMFromFloat(gdo, i, DT, (float)(2 * fmt_uniform(&seed) - 1)); }
  for (size_t i = 0; i < nK; i++) { FMFromFloat(gk, i, DT, (float)(2 * fmt_uniform(&seed) - 1)); FMFromFloat(gv, i, DT, (float)(2 * fmt_uniform(&seed) - 1)); }

  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetBackend(ctx, cuda ? FM_BACKEND_CUDA : FM_BACKEND_CPU));
  if (FMContextSetUp(ctx)) { /* no GPU here: a skip, the same on every rank (the set-up agrees) */
    if (rank == 0) printf("SKIP: the context cannot be set up on the %s backend: %s\n", backend, FMGetLastErrorMessage());
    FMContextDestroy(&ctx);
    FMFinalize();
    return 77;
  }
#if FM_HAVE_CUDA
  if (cuda) {
    int dev = -1;
    FMT_CALL(FMContextGetDevice(ctx, &dev));
    if (dev >= 0) (void)cudaSetDevice(dev);
  }
#endif
  FMT_CALL(FMMaskCreate(ctx, &mask));
  FMT_CALL(FMMaskSetSizes(mask, S, S, 1));
  FMT_CALL(FMMaskSetType(mask, FMMASKCAUSAL));
  FMT_CALL(FMMaskSetUp(mask));
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetType(plan, FMPLANCP));
  FMT_CALL(FMPlanSetMask(plan, mask));
  FMT_CALL(FMPlanSetShape(plan, B, HQ, HKV, D, DT));
  FMT_CALL(FMPlanSetChunk(plan, cuda ? 64 : 16));
  FMT_CALL(FMPlanSetVirtualNodes(plan, 2));
  FMT_CALL(FMPlanSetFromOptions(plan)); /* -fm_plan_schedule, -fm_plan_overlap, -fm_plan_transport, ... from the .sh */
  FMT_CALL(FMPlanSetUp(plan));
  FMT_CALL(FMPlanGetLocalRows(plan, &nl, &rows));
  FMT_CALL(FMPlanGetLocalKeys(plan, &nk, &keys));
  lQ = es * (B * nl * uq) + 1; lK = es * (B * nk * uk) + 1; lL = 4 * (B * HQ * nl) + 1;
  lq = malloc(lQ); ldo = malloc(lQ); lo = malloc(lQ); ldq = malloc(lQ);
  lk = malloc(lK); lv = malloc(lK); ldk = malloc(lK); ldv = malloc(lK);
  llse = malloc(lL);
  pick(lq, gq, nl, rows, es * uq); pick(ldo, gdo, nl, rows, es * uq); pick(lk, gk, nk, keys, es * uk); pick(lv, gv, nk, keys, es * uk);
  {
    void *t[9] = {dev_of(lq, lQ), dev_of(lk, lK), dev_of(lv, lK), dev_of(lo, lQ), dev_of(llse, lL), dev_of(ldo, lQ), dev_of(ldq, lQ), dev_of(ldk, lK),
                  dev_of(ldv, lK)};
    ok = call_twice("FMPlanForward", plan, 0, t, site, frank, count, &fired);
    if (ok) ok = call_twice("FMPlanBackward", plan, 1, t, site, frank, count, &fired);
    host_of(NULL, t[0], lQ, 1); host_of(NULL, t[1], lK, 1); host_of(NULL, t[2], lK, 1); host_of(NULL, t[5], lQ, 1);
    host_of(ok ? lo : NULL, t[3], lQ, 1); host_of(ok ? llse : NULL, t[4], lL, 1); host_of(ok ? ldq : NULL, t[6], lQ, 1);
    host_of(ok ? ldk : NULL, t[7], lK, 1); host_of(ok ? ldv : NULL, t[8], lK, 1);
  }
  MPI_Allreduce(&fired, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  FMT_CHECK(all, "the fault site %s was never reached on rank %d (nothing failed): the case does not test it", site, frank);
  if (ok) check_results(plan, mask, site, frank, backend, tol, gq, gk, gv, gdo, lo, llse, ldq, ldk, ldv); /* both calls succeeded */
  else if (rank == 0 && !fmt_failures) printf("%s on rank %d of %d (%s): every call failed alike on every rank (count 0)\n", site, frank, size, backend);
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&mask));
  FMT_CALL(FMContextDestroy(&ctx));
  free(gq); free(gk); free(gv); free(gdo); free(lq); free(lk); free(lv); free(ldo); free(lo); free(llse); free(ldq); free(ldk); free(ldv);
  MPI_Allreduce(&fmt_failures, &all, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  fmt_failures = all;
  FMT_CALL(FMFinalize());
  return fmt_finish("test_dist_fail");
}
