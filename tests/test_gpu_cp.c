/*
 * test_gpu_cp - the context-parallel forward (and, at a tiny size, the backward) of a plan over
 * P ranks on the CUDA backend, against a float64 CPU reference and against one GPU running the
 * whole problem (a second context and plan over MPI_COMM_SELF, the mask rebuilt there).
 *
 * Cases: the 12 builder masks at odd lengths (1000, 1536) with chunks that do not divide the
 * length (-fm_plan_chunk, or the default), GQA (4 query / 2 KV heads, one case 4 / 1), per-head
 * user bounds (type bounds, mask_heads = heads_kv) with rows that see nothing, S_q != S_k both
 * ways (640 x 1000, 1000 x 640: the first 360 rows see no key), batch 2, head_dim 64 and 128, bf16
 * (one case fp16), and a plan with two chunks (on 3 ranks one rank holds no rows and no keys).
 * Configurations: default; -fm_plan_prune 0 -fm_plan_overlap 0; -fm_plan_schedule ring;
 * -fm_plan_partition contiguous; -fm_plan_route flat; dual_chunk on 2 virtual nodes, not
 * overlapped. -fm_plan_transport and -fm_gpu_aware_mpi come from the command line (test_gpu_cp.sh
 * runs nccl, mpi staged through host memory, and mpi on device buffers when the MPI is CUDA-aware).
 *
 * Every rank builds the same global Q, K, V on the host (fixed seed; values k/256, 0 < |k| <= 256,
 * exact in bf16 and fp16, never zero), picks its local rows (FMPlanGetLocalRows) and keys
 * (FMPlanGetLocalKeys), copies them to its device, poisons O and LSE (0xFF bytes: NaN), runs
 * FMPlanForward, synchronizes and checks every local row:
 *   against float64:  |O - ref| <= 2e-2 (bf16) / 5e-3 (fp16) per element, ||O - ref|| / ||ref||
 *                     <= 2e-2 / 5e-3 per case (fails on an all-zero or scaled O), |LSE - ref|
 *                     <= 1e-3 (1 + |ref|) (LSE is fp32 whatever the dtype), plus at d = 64 the
 *                     rounding of the probabilities the Hopper kernel sums (fmt_lse_round);
 *   against one GPU:  |O - O_1| <= 2e-2 per element, |LSE - LSE_1| <= 1e-3 (+ twice that
 *                     rounding at d = 64: each run rounds the probabilities of its own chunks);
 *   rows that see no key: O = 0 exactly and LSE = -inf (also on the one GPU).
 * Backward (384 x 384, 2 query / 1 KV heads, d = 64, bf16, every configuration): dQ on the local
 * rows and dK, dV on the local keys equal one single-rank CPU backward (context over
 * MPI_COMM_SELF, CPU backend) within bf16 tolerance (relative 2-norm error <= 2e-2 per tensor,
 * every element within 5e-2 of the largest reference magnitude).
 * Failures name the case, configuration, rank, row, head and values; the exit status is the same
 * on every rank: 0 pass, 1 fail, 77 no CUDA in the build or no GPU on some rank, 99 hard error
 * (also a CUDA error in the device count: a broken driver is not "no GPU").
 *
 * Usage: test_gpu_cp [-quick] [-case N (the number printed before each case)] [-seed S] [-ngpus] [-fm_plan_transport nccl|mpi]
 *                    [-fm_gpu_aware_mpi auto|0|1]
 *   -ngpus  print "ngpus N" (the CUDA devices this process sees) and "cuda_aware_mpi A" (1 when
 *           MPIX_Query_cuda_support() says the MPI takes device pointers, else 0) and exit (77
 *           when N = 0)
 *   Exits 77 (every rank) when the machine cannot run the transport asked for: nccl with fewer
 *   visible GPUs than ranks on a node, or -fm_gpu_aware_mpi 1 on an MPI that is not CUDA-aware.
 */
#include <flashmask.h>
#include <flashmask/private/fmkernels.h>
#include <flashmask/private/fmimpl.h>
#include "fmtest.h"

#if !FM_HAVE_CUDA
FMT_SKIP_MAIN("built without CUDA")
#else
#include <cuda_runtime_api.h>
#include "gpu_cp_ref.h" /* Case, host data, masks, the float64 reference, the row checks */

/* Hard errors abort every rank (99): a rank left behind in a collective would hang the job. */
#define CU(expr) FMT_CU_ABORT(expr, rank, current)
#define CALL(expr) FMT_CALL_ABORT(expr, rank, current)
static const char *current = "-"; /* the case and configuration running, for hard-error messages */
static char current_buf[128];

typedef struct {
  const char *name, *part, *route, *prune, *overlap, *sched;
  int vnodes;
} Config;

static const Config confs[] = {
  {"default", "balanced", "hierarchical", "1", "1", "gather", 0},
  {"allgather", "balanced", "hierarchical", "0", "0", "gather", 0},
  {"ring", "balanced", "hierarchical", "1", "1", "ring", 0},
  {"contiguous", "contiguous", "hierarchical", "1", "1", "gather", 0},
  {"flat", "balanced", "flat", "1", "1", "gather", 0},
  {"dual_chunk_2nodes", "dual_chunk", "hierarchical", "1", "0", "gather", 2},
};
#define NCONF ((int)(sizeof(confs) / sizeof(confs[0])))

/* ------------------------------------------------------------------ plans and devices */
/* set_config - the -fm_plan_* options of configuration f with chunk (read by FMPlanSetFromOptions in world_plan). */
static void set_config(const Config *f, const char *chunk)
{
  char buf[16];
  snprintf(buf, sizeof(buf), "%d", f->vnodes < size ? f->vnodes : size);
  CALL(FMOptionsSetValue("-fm_plan_partition", f->part));
  CALL(FMOptionsSetValue("-fm_plan_route", f->route));
  CALL(FMOptionsSetValue("-fm_plan_prune", f->prune));
  CALL(FMOptionsSetValue("-fm_plan_overlap", f->overlap));
  CALL(FMOptionsSetValue("-fm_plan_schedule", f->sched));
  CALL(FMOptionsSetValue("-fm_plan_chunk", chunk));
  CALL(FMOptionsSetValue("-fm_plan_nodes", buf));
}

/* world_plan - the distributed plan of case c in configuration f, with its local rows and keys. */
static FMPlan world_plan(FMContext world, FMMask mask, const Case *c, const Config *f, int *nl, const int **rows, int *nk,
                         const int **keys)
{
  FMPlan plan;
  set_config(f, c->chunk);
  CALL(FMPlanCreate(world, &plan));
  CALL(FMPlanSetMask(plan, mask));
  CALL(FMPlanSetShape(plan, c->B, c->Hq, c->Hkv, c->D, c->dt));
  CALL(FMPlanSetFromOptions(plan));
  CALL(FMPlanSetUp(plan));
  CALL(FMPlanGetLocalRows(plan, nl, rows));
  CALL(FMPlanGetLocalKeys(plan, nk, keys));
  return plan;
}

/* use_device - make ctx's GPU current (each context's tensors live on its device). */
static void use_device(FMContext ctx)
{
  int dev = -1;
  CALL(FMContextGetDevice(ctx, &dev));
  if (dev >= 0) CU(cudaSetDevice(dev));
}

/* dmalloc / upload / download - device buffers (NULL for 0 bytes), synchronous copies. */
static void *dmalloc(size_t bytes)
{
  void *p = NULL;
  if (bytes) CU(cudaMalloc(&p, bytes));
  return p;
}
static void *upload(const void *h, size_t bytes)
{
  void *p = dmalloc(bytes);
  if (bytes) CU(cudaMemcpy(p, h, bytes, cudaMemcpyHostToDevice));
  return p;
}
static void download(void *h, const void *d, size_t bytes)
{
  if (bytes) CU(cudaMemcpy(h, d, bytes, cudaMemcpyDeviceToHost));
}

/* check_layout - local rows and keys are ascending and, over the ranks, Sq rows and Sk keys. */
static void check_layout(const Case *c, const char *cfg, int nl, const int *rows, int nk, const int *keys)
{
  int loc[2] = {nl, nk}, tot[2], asc = 1;
  for (int i = 1; i < nl; i++) asc &= rows[i] > rows[i - 1];
  for (int i = 1; i < nk; i++) asc &= keys[i] > keys[i - 1];
  for (int i = 0; i < nl; i++) asc &= rows[i] >= 0 && rows[i] < c->Sq;
  for (int i = 0; i < nk; i++) asc &= keys[i] >= 0 && keys[i] < c->Sk;
  MPI_Allreduce(loc, tot, 2, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  FMT_CHECK(asc, "case %s config %s rank %d: local rows or keys not ascending inside the axes", c->name, cfg, rank);
  FMT_CHECK(tot[0] == c->Sq && tot[1] == c->Sk, "case %s config %s: local rows sum to %d (Sq %d), keys to %d (Sk %d)", c->name, cfg, tot[0], c->Sq,
            tot[1], c->Sk);
}

/* ------------------------------------------------------------------ forward */
/*
 * run_forward - one case: reference, one GPU, then every configuration on all ranks.
 *   Collective on MPI_COMM_WORLD.
 */
static void run_forward(FMContext world, FMContext gpu1, const Case *c, uint64_t seed)
{
  const size_t es = FMDTypeSize(c->dt), uq = (size_t)c->Hq * c->D, uk = (size_t)c->Hkv * c->D;
  const size_t nQ = (size_t)c->B * c->Sq * uq, nK = (size_t)c->B * c->Sk * uk, nL = (size_t)c->B * c->Hq * c->Sq;
  float *fq = malloc(4 * nQ), *fk = malloc(4 * nK), *fv = malloc(4 * nK), *one_lse = malloc(4 * nL);
  char *gq = malloc(es * nQ), *gk = malloc(es * nK), *gv = malloc(es * nK), *one = malloc(es * nQ);
  double *ro = malloc(sizeof(double) * nQ), *rlse = malloc(sizeof(double) * nL);
  uint64_t s = seed;
  FMMask mask, mask1;
  FMPlan plan;
  Stats st;

  if (!fq || !fk || !fv || !one_lse || !gq || !gk || !gv || !one || !ro || !rlse) {
    fprintf(stderr, "HARD ERROR: out of memory in case %s\n", c->name);
    MPI_Abort(MPI_COMM_WORLD, 99);
  }
  fill_tensor(gq, fq, nQ, c->dt, &s);
  fill_tensor(gk, fk, nK, c->dt, &s);
  fill_tensor(gv, fv, nK, c->dt, &s);
  CALL(make_mask(world, c, seed, &mask));
  ref_forward(c, mask, fq, fk, fv, ro, rlse);

  /* one GPU, the whole problem: a plan over MPI_COMM_SELF, the mask rebuilt there. It runs on
     this rank's device of the world context (one device per process, as applications run):
     the SELF context's own choice is the node's first GPU for every rank. */
  snprintf(current_buf, sizeof(current_buf), "%s on one GPU", c->name);
  current = current_buf;
  use_device(world);
  {
    void *dq = upload(gq, es * nQ), *dk = upload(gk, es * nK), *dv = upload(gv, es * nK), *doo = dmalloc(es * nQ);
    float *dl = dmalloc(4 * nL);
    CALL(make_mask(gpu1, c, seed, &mask1));
    CALL(FMPlanCreate(gpu1, &plan));
    CALL(FMPlanSetMask(plan, mask1));
    CALL(FMPlanSetShape(plan, c->B, c->Hq, c->Hkv, c->D, c->dt));
    CALL(FMPlanSetUp(plan));
    CU(cudaMemset(doo, 0xff, es * nQ));
    CU(cudaMemset(dl, 0xff, 4 * nL));
    CALL(FMPlanForward(plan, dq, dk, dv, doo, dl));
    CU(cudaDeviceSynchronize());
    download(one, doo, es * nQ);
    download(one_lse, dl, 4 * nL);
    CALL(FMPlanDestroy(&plan));
    CALL(FMMaskDestroy(&mask1));
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(doo); cudaFree(dl);
  }
  {
    int *all = malloc(sizeof(int) * (size_t)c->Sq);
    for (int i = 0; i < c->Sq; i++) all[i] = i;
    memset(&st, 0, sizeof(st));
    check_rows(c, "1-GPU", c->Sq, all, one, one_lse, ro, rlse, NULL, NULL, &st);
    st.o_one = st.lse_one = 0;
    verdict(c, "1-GPU", &st);
    free(all);
  }

  /* the distributed plan, every configuration */
  use_device(world);
  for (int f = 0; f < NCONF; f++) {
    int nl, nk;
    const int *rows, *keys;
    char *lq, *lk, *lv, *lo;
    float *llse;
    void *dq, *dk, *dv, *doo;
    float *dl;
    snprintf(current_buf, sizeof(current_buf), "%s config %s", c->name, confs[f].name);
    current = current_buf;
    plan = world_plan(world, mask, c, &confs[f], &nl, &rows, &nk, &keys);
    check_layout(c, confs[f].name, nl, rows, nk, keys);
    lq = malloc(es * c->B * nl * uq + 1); lo = malloc(es * c->B * nl * uq + 1);
    lk = malloc(es * c->B * nk * uk + 1); lv = malloc(es * c->B * nk * uk + 1);
    llse = malloc(4 * ((size_t)c->B * c->Hq * nl + 1));
    pick(lq, gq, c->B, c->Sq, es * uq, nl, rows);
    pick(lk, gk, c->B, c->Sk, es * uk, nk, keys);
    pick(lv, gv, c->B, c->Sk, es * uk, nk, keys);
    dq = upload(lq, es * c->B * nl * uq);
    dk = upload(lk, es * c->B * nk * uk);
    dv = upload(lv, es * c->B * nk * uk);
    doo = dmalloc(es * c->B * nl * uq);
    dl = dmalloc(4 * (size_t)c->B * c->Hq * nl);
    if (nl) CU(cudaMemset(doo, 0xff, es * c->B * nl * uq));
    if (nl) CU(cudaMemset(dl, 0xff, 4 * (size_t)c->B * c->Hq * nl));
    CU(cudaDeviceSynchronize());
    CALL(FMPlanForward(plan, dq, dk, dv, doo, dl));
    CU(cudaDeviceSynchronize());
    download(lo, doo, es * c->B * nl * uq);
    download(llse, dl, 4 * (size_t)c->B * c->Hq * nl);
    memset(&st, 0, sizeof(st));
    check_rows(c, confs[f].name, nl, rows, lo, llse, ro, rlse, one, one_lse, &st);
    verdict(c, confs[f].name, &st);
    CALL(FMPlanDestroy(&plan));
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(doo); cudaFree(dl);
    free(lq); free(lk); free(lv); free(lo); free(llse);
  }
  CALL(FMMaskDestroy(&mask));
  free(fq); free(fk); free(fv); free(one_lse); free(gq); free(gk); free(gv); free(one); free(ro); free(rlse);
}


/*
 * run_fail - the K/V exchange fails on rank 1 at its first step, through the fault sites of
 *   src/sys/faults.c (armed here as -fm_debug_fail would): over NCCL gpu_exchange_post (the
 *   step is never posted), over MPI gpu_exchange_wait (the step is marked failed after its
 *   messages moved); -fm_plan_transport auto runs this case over mpi, so that the site is known.
 *   Every rank must return an error from FMPlanForward, none may wait for ever (the shell runs
 *   the test under a timeout), and the forwards that follow (the cases run after this one)
 *   must be right again: over NCCL the executor aborted the communicators and bootstraps new
 *   ones. Collective; skipped on one rank.
 */
static void run_fail(FMContext world, const Case *c, uint64_t seed)
{
  const size_t es = FMDTypeSize(c->dt), uq = (size_t)c->Hq * c->D, uk = (size_t)c->Hkv * c->D;
  int nl, nk, failed, everyone;
  const int *rows, *keys;
  uint64_t s = seed;
  FMMask mask;
  FMPlan plan;
  FMErrorCode e;
  void *dq, *dk, *dv, *doo;
  float *dl, *f;
  char *h;
  char tr[32] = "auto";
  if (size < 2) return;
  snprintf(current_buf, sizeof(current_buf), "%s, exchange failing on rank 1", c->name);
  current = current_buf;
  use_device(world);
  CALL(make_mask(world, c, seed, &mask));
  CALL(FMOptionsGetString("-fm_plan_transport", "the transport under test (read by the plan)", tr, sizeof(tr), NULL));
  if (!strcasecmp(tr, "auto")) CALL(FMOptionsSetValue("-fm_plan_transport", "mpi")); /* the library reads it case-insensitively */
  plan = world_plan(world, mask, c, &confs[0], &nl, &rows, &nk, &keys);
  if (!strcasecmp(tr, "auto")) CALL(FMOptionsSetValue("-fm_plan_transport", "auto"));
  h = malloc(es * ((size_t)c->B * (nl > nk ? nl : nk) * (uq > uk ? uq : uk)) + 1);
  f = malloc(4 * ((size_t)c->B * (nl > nk ? nl : nk) * (uq > uk ? uq : uk)) + 4);
  fill_tensor(h, f, (size_t)c->B * nl * uq, c->dt, &s);
  dq = upload(h, es * c->B * nl * uq);
  fill_tensor(h, f, (size_t)c->B * nk * uk, c->dt, &s);
  dk = upload(h, es * c->B * nk * uk);
  fill_tensor(h, f, (size_t)c->B * nk * uk, c->dt, &s);
  dv = upload(h, es * c->B * nk * uk);
  doo = dmalloc(es * c->B * nl * uq);
  dl = dmalloc(4 * (size_t)c->B * c->Hq * nl);
  CU(cudaDeviceSynchronize());
  CALL(FMFaultArm_Private(strcasecmp(tr, "nccl") ? "gpu_exchange_wait:1" : "gpu_exchange_post:1"));
  CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  e = FMPlanForward(plan, dq, dk, dv, doo, dl);
  CALL(FMPopErrorHandler());
  CALL(FMFaultArm_Private(NULL));
  CU(cudaDeviceSynchronize());
  failed = e != FM_SUCCESS;
  MPI_Allreduce(&failed, &everyone, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  FMT_CHECK(failed, "rank %d: FMPlanForward returned success although the exchange failed on rank 1", rank);
  if (rank == 0)
    printf("   exchange failing on rank 1: %s on every rank (rank 0 got %s)\n", everyone ? "an error" : "NOT an error", FMErrorString(e));
  CALL(FMPlanDestroy(&plan));
  CALL(FMMaskDestroy(&mask));
  cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(doo); cudaFree(dl);
  free(h);
  free(f);
}

/* ------------------------------------------------------------------ backward */
/*
 * cmp_grad - relative 2-norm error of n local values a (dtype) against the reference rows
 *   idx[] of a global [B][S][unit] tensor ref (dtype), and the worst element; prints and
 *   records a failure. Returns the relative error. Not collective (verdict via the caller).
 */
static double cmp_grad(const Case *c, const char *cfg, const char *what, const void *a, const void *ref, int n, const int *idx, int S, size_t unit,
                       double *worst)
{
  double num = 0, den = 0, mref = 0, wdiff = -1;
  size_t wat = 0;
  for (int b = 0; b < c->B; b++)
    for (int i = 0; i < n; i++)
      for (size_t u = 0; u < unit; u++) {
        const double r = get(ref, ((size_t)b * S + idx[i]) * unit + u, c->dt);
        if (fabs(r) > mref) mref = fabs(r);
      }
  for (int b = 0; b < c->B; b++)
    for (int i = 0; i < n; i++)
      for (size_t u = 0; u < unit; u++) {
        const size_t la = ((size_t)b * n + i) * unit + u;
        const double x = get(a, la, c->dt), r = get(ref, ((size_t)b * S + idx[i]) * unit + u, c->dt), e = fabs(x - r);
        num += isfinite(x) ? (x - r) * (x - r) : INFINITY;
        den += r * r;
        if (!(e <= wdiff)) { wdiff = isnan(e) ? INFINITY : e; wat = la; }
      }
  *worst = wdiff < 0 ? 0 : wdiff;
  if (wdiff > 5e-2 * (mref > 0 ? mref : 1)) {
    const size_t b = wat / ((size_t)n * unit), i = (wat / unit) % (size_t)n, u = wat % unit;
    fprintf(stderr, "FAIL case %s config %s rank %d: %s of global position %d batch %zu element %zu = %.6g, CPU backward %.6g (largest |ref| %.3g)\n",
            c->name, cfg, rank, what, idx[i], b, u, get(a, wat, c->dt), get(ref, (b * S + idx[i]) * unit + u, c->dt), mref);
    fmt_failures++;
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/*
 * run_backward - forward and backward of a tiny case with device pointers on all ranks, every
 *   configuration, against one single-rank CPU backward (context over MPI_COMM_SELF).
 *   Collective on MPI_COMM_WORLD.
 */
static void run_backward(FMContext world, FMContext cpu1, const Case *c, uint64_t seed)
{
  const size_t es = FMDTypeSize(c->dt), uq = (size_t)c->Hq * c->D, uk = (size_t)c->Hkv * c->D;
  const size_t nQ = (size_t)c->B * c->Sq * uq, nK = (size_t)c->B * c->Sk * uk, nL = (size_t)c->B * c->Hq * c->Sq;
  float *fq = malloc(4 * nQ), *fk = malloc(4 * nK), *fv = malloc(4 * nK), *fdo = malloc(4 * nQ), *glse = malloc(4 * nL);
  char *gq = malloc(es * nQ), *gk = malloc(es * nK), *gv = malloc(es * nK), *gdo = malloc(es * nQ), *go = malloc(es * nQ);
  char *rdq = malloc(es * nQ), *rdk = malloc(es * nK), *rdv = malloc(es * nK);
  uint64_t s = seed;
  FMMask mask, mask1;
  FMPlan plan;

  fill_tensor(gq, fq, nQ, c->dt, &s);
  fill_tensor(gk, fk, nK, c->dt, &s);
  fill_tensor(gv, fv, nK, c->dt, &s);
  fill_tensor(gdo, fdo, nQ, c->dt, &s);
  /* the single-rank CPU backward */
  snprintf(current_buf, sizeof(current_buf), "%s CPU reference", c->name);
  current = current_buf;
  CALL(make_mask(cpu1, c, seed, &mask1));
  CALL(FMPlanCreate(cpu1, &plan));
  CALL(FMPlanSetMask(plan, mask1));
  CALL(FMPlanSetShape(plan, c->B, c->Hq, c->Hkv, c->D, c->dt));
  CALL(FMPlanSetUp(plan));
  CALL(FMPlanForward(plan, gq, gk, gv, go, glse));
  CALL(FMPlanBackward(plan, gq, gk, gv, go, glse, gdo, rdq, rdk, rdv));
  CALL(FMPlanDestroy(&plan));
  CALL(FMMaskDestroy(&mask1));

  CALL(make_mask(world, c, seed, &mask));
  use_device(world);
  for (int f = 0; f < NCONF; f++) {
    int nl, nk;
    const int *rows, *keys;
    char *lq, *lk, *lv, *ldo, *hdq, *hdk, *hdv;
    void *dq, *dk, *dv, *ddo, *doo, *ddq, *ddk, *ddv;
    float *dl;
    double e[3], w[3];
    snprintf(current_buf, sizeof(current_buf), "%s config %s", c->name, confs[f].name);
    current = current_buf;
    plan = world_plan(world, mask, c, &confs[f], &nl, &rows, &nk, &keys);
    {
      const size_t sq = es * c->B * nl * uq, sk = es * c->B * nk * uk;
      lq = malloc(sq + 1); ldo = malloc(sq + 1); hdq = malloc(sq + 1);
      lk = malloc(sk + 1); lv = malloc(sk + 1); hdk = malloc(sk + 1); hdv = malloc(sk + 1);
      pick(lq, gq, c->B, c->Sq, es * uq, nl, rows);
      pick(ldo, gdo, c->B, c->Sq, es * uq, nl, rows);
      pick(lk, gk, c->B, c->Sk, es * uk, nk, keys);
      pick(lv, gv, c->B, c->Sk, es * uk, nk, keys);
      dq = upload(lq, sq); ddo = upload(ldo, sq); dk = upload(lk, sk); dv = upload(lv, sk);
      doo = dmalloc(sq); ddq = dmalloc(sq); ddk = dmalloc(sk); ddv = dmalloc(sk);
      dl = dmalloc(4 * (size_t)c->B * c->Hq * nl);
      if (sq) { CU(cudaMemset(doo, 0xff, sq)); CU(cudaMemset(ddq, 0xff, sq)); CU(cudaMemset(dl, 0xff, 4 * (size_t)c->B * c->Hq * nl)); }
      if (sk) { CU(cudaMemset(ddk, 0xff, sk)); CU(cudaMemset(ddv, 0xff, sk)); }
      CU(cudaDeviceSynchronize());
      CALL(FMPlanForward(plan, dq, dk, dv, doo, dl));
      CALL(FMPlanBackward(plan, dq, dk, dv, doo, dl, ddo, ddq, ddk, ddv));
      CU(cudaDeviceSynchronize());
      download(hdq, ddq, sq); download(hdk, ddk, sk); download(hdv, ddv, sk);
    }
    e[0] = cmp_grad(c, confs[f].name, "dQ", hdq, rdq, nl, rows, c->Sq, uq, &w[0]);
    e[1] = cmp_grad(c, confs[f].name, "dK", hdk, rdk, nk, keys, c->Sk, uk, &w[1]);
    e[2] = cmp_grad(c, confs[f].name, "dV", hdv, rdv, nk, keys, c->Sk, uk, &w[2]);
    {
      double ge[3], gw[3];
      int ok;
      MPI_Allreduce(e, ge, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      MPI_Allreduce(w, gw, 3, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
      ok = ge[0] <= 2e-2 && ge[1] <= 2e-2 && ge[2] <= 2e-2;
      if (!ok) {
        fmt_failures++;
        if (rank == 0) fprintf(stderr, "FAIL case %s config %s: relative errors dQ %.2e dK %.2e dV %.2e (tolerance 2e-2)\n", c->name, confs[f].name, ge[0], ge[1], ge[2]);
      }
      if (rank == 0)
        printf("%-4s %-26s %-18s backward %dx%d H=%d/%d D=%d %s: rel dQ %.1e dK %.1e dV %.1e (max abs %.1e %.1e %.1e)\n", ok ? "ok" : "FAIL", c->name,
               confs[f].name, c->Sq, c->Sk, c->Hq, c->Hkv, c->D, FMDTypeName(c->dt), ge[0], ge[1], ge[2], gw[0], gw[1], gw[2]);
    }
    CALL(FMPlanDestroy(&plan));
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(ddo); cudaFree(doo); cudaFree(ddq); cudaFree(ddk); cudaFree(ddv); cudaFree(dl);
    free(lq); free(lk); free(lv); free(ldo); free(hdq); free(hdk); free(hdv);
  }
  CALL(FMMaskDestroy(&mask));
  free(fq); free(fk); free(fv); free(fdo); free(glse); free(gq); free(gk); free(gv); free(gdo); free(go); free(rdq); free(rdk); free(rdv);
}

/*
 * Whether this machine can run the transport the options ask for, the same answer on every
 * rank (a message from rank 0 when not): -fm_plan_transport nccl needs a GPU per rank (no two
 * ranks of a node share one), -fm_gpu_aware_mpi 1 an MPI that says it is CUDA-aware.
 */
static int transport_fits(int ngpus)
{
  char tr[32] = "auto", aw[32] = "auto";
  int nnode = 1, fits[2], all[2];
  MPI_Comm node;
  CALL(FMOptionsGetString("-fm_plan_transport", "the transport under test (read by the plan)", tr, sizeof(tr), NULL));
  CALL(FMOptionsGetString("-fm_gpu_aware_mpi", "device buffers to MPI (read by the plan)", aw, sizeof(aw), NULL));
  MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &nnode);
  MPI_Comm_free(&node);
  fits[0] = strcmp(tr, "nccl") || ngpus >= nnode;
  fits[1] = strcmp(aw, "1") || FMMPICUDAAware_Private() == 1;
  MPI_Allreduce(fits, all, 2, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0 && !all[0])
    printf("SKIP: -fm_plan_transport nccl needs a GPU per rank: some node runs more ranks than it has visible GPUs (%d ranks, %d GPUs on rank 0's)\n",
           nnode, ngpus);
  if (rank == 0 && all[0] && !all[1]) printf("SKIP: -fm_gpu_aware_mpi 1 needs a CUDA-aware MPI; MPIX_Query_cuda_support() is not 1 on some rank\n");
  return all[0] && all[1];
}

/* ------------------------------------------------------------------ main */
int main(int argc, char **argv)
{
  FMContext world, gpu1, cpu1;
  int only = -1, quick = 0, ngpus = 0, have, all, fails, ncase = 0, probe = 0;
  uint64_t seed = 1234567;
  const char *env = getenv("FMTEST_SEED");
  Case cs[32];
  const char *const *builders = NULL; /* FMMaskTypeList less "bounds" */
  int nb = 0;
  static const char *const chunks[12] = {"0", "100", "176", "0", "0", "200", "0", "0", "144", "0", "0", "96"};

  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_gpu_cp: context-parallel forward/backward on GPUs against float64 and one GPU"));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (env) seed = strtoull(env, NULL, 0);
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "-case") && a + 1 < argc) only = atoi(argv[++a]);
    else if (!strcmp(argv[a], "-seed") && a + 1 < argc) seed = strtoull(argv[++a], NULL, 0);
    else if (!strcmp(argv[a], "-quick")) quick = 1;
    else if (!strcmp(argv[a], "-ngpus")) probe = 1;
  }
  /* no device or no driver: skip; any other CUDA failure (a broken driver) is a hard error on every rank */
  if (FMCudaDeviceCount(&ngpus) != FM_SUCCESS) {
    fprintf(stderr, "HARD ERROR rank %d: FMCudaDeviceCount failed: %s\n", rank, FMGetLastErrorMessage());
    have = -1;
  } else have = ngpus > 0;
  if (probe) {
    if (rank == 0 && have >= 0) printf("ngpus %d\ncuda_aware_mpi %d\n", ngpus, FMMPICUDAAware_Private());
    FMFinalize();
    return have < 0 ? 99 : ngpus > 0 ? 0 : 77;
  }
  MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all < 0) {
    FMFinalize();
    return 99;
  }
  if (!all) {
    if (rank == 0) printf("SKIP: no CUDA device visible on some rank\n");
    FMFinalize();
    return 77;
  }
  if (!transport_fits(ngpus)) {
    FMFinalize();
    return 77;
  }
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  if (rank == 0) printf("test_gpu_cp on %d rank(s), %d GPU(s) visible to rank 0, FMTEST_SEED=%llu\n", size, ngpus, (unsigned long long)seed);

  /* the world plan; one GPU alone (whole problem); the CPU backward reference */
  CALL(FMContextCreate(MPI_COMM_SELF, &gpu1));
  CALL(FMContextSetBackend(gpu1, FM_BACKEND_CUDA));
  CALL(FMContextSetUp(gpu1));
  CALL(FMContextCreate(MPI_COMM_SELF, &cpu1));
  CALL(FMContextSetBackend(cpu1, FM_BACKEND_CPU));
  CALL(FMContextSetUp(cpu1));
  CALL(FMContextCreate(MPI_COMM_WORLD, &world));
  CALL(FMContextSetFromOptions(world));
  CALL(FMContextSetBackend(world, FM_BACKEND_CUDA));
  CALL(FMContextSetUp(world));

  /* every builder: odd lengths, chunks that do not divide them, GQA 2:1, d 64 / 128 */
  CALL(FMMaskTypeList(&nb, &builders));
  if (nb > 0 && !strcmp(builders[nb - 1], FMMASKBOUNDS)) nb--;
  for (int t = 0; t < nb && ncase < 24; t++) {
    Case c = {builders[t], builders[t], 1, t % 2 ? 1536 : 1000, 0, 4, 2, t % 3 == 1 ? 64 : 128, 1, FM_DTYPE_BF16, chunks[t % 12], t % 3 == 0};
    c.Sk = c.Sq;
    if (!strcmp(builders[t], FMMASKRANDOMEVICTION)) c.mh = c.Hkv; /* random eviction differs per head */
    cs[ncase++] = c;
  }
  {
    /* per-head user bounds with rows that see nothing; S_q != S_k; batch 2; fp16 and GQA 4:1; two chunks */
    Case x[] = {
      {"bounds_per_head", FMMASKBOUNDS, 1, 1000, 1000, 4, 2, 128, 2, FM_DTYPE_BF16, "100", 1},
      {"bounds_777x1333", FMMASKBOUNDS, 1, 777, 1333, 4, 2, 64, 2, FM_DTYPE_BF16, "0", 0},
      {"causal_640x1000", FMMASKCAUSAL, 1, 640, 1000, 4, 2, 128, 1, FM_DTYPE_BF16, "0", 1},
      {"causal_1000x640", FMMASKCAUSAL, 1, 1000, 640, 4, 2, 64, 1, FM_DTYPE_BF16, "112", 1},
      {"causal_document_batch2", FMMASKCAUSALDOCUMENT, 2, 640, 1000, 4, 2, 64, 1, FM_DTYPE_BF16, "0", 0},
      {"document_fp16_gqa4", FMMASKDOCUMENT, 1, 1000, 1000, 4, 1, 128, 1, FM_DTYPE_FP16, "0", 0},
      {"causal_two_chunks", FMMASKCAUSAL, 1, 200, 200, 4, 2, 128, 1, FM_DTYPE_BF16, "150", 1},
    };
    for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++) cs[ncase++] = x[i];
  }
  /* first a failing exchange: every case after it also checks that the plan recovers */
  if (only < 0) run_fail(world, &cs[3], seed + 99);
  for (int i = 0; i < ncase; i++) {
    if (only >= 0 && i != only) continue;
    if (quick && !cs[i].quick) continue;
    if (rank == 0) printf("-- case %d: %s\n", i, cs[i].name);
    run_forward(world, gpu1, &cs[i], seed + 101 * (uint64_t)i);
  }
  if (only < 0 || only == ncase) {
    Case b = {"backward_causal_document", FMMASKCAUSALDOCUMENT, 1, 384, 384, 2, 1, 64, 1, FM_DTYPE_BF16, "0", 1};
    if (rank == 0) printf("-- case %d: %s\n", ncase, b.name);
    run_backward(world, cpu1, &b, seed + 7777);
  }
  CALL(FMContextDestroy(&world));
  CALL(FMContextDestroy(&gpu1));
  CALL(FMContextDestroy(&cpu1));
  MPI_Allreduce(&fmt_failures, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (fails && !fmt_failures) fmt_failures = 1; /* every rank returns the same verdict */
  FMT_CALL(FMFinalize());
  return fmt_finish("test_gpu_cp");
}
#endif /* FM_HAVE_CUDA */
