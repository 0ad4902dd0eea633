/*
 * test_gpu_cp_bwd - the context-parallel backward of a "cp" plan on the CUDA backend (the
 * backward legs of test_gpu_cp.sh), on P ranks (1, 2, 3: the ranks may share one GPU over the
 * mpi transport), against a float64 reference and against the same plan on the CPU backend.
 *
 * Cases (bf16, GQA 2:1: 4 query / 2 KV heads, odd chunks): at head_dim 64 causal_document
 * (S = 768) and a random per-head mask (user bounds, mask_heads = heads_kv, S = 640; some rows
 * see no key); at head_dim 256 causal (S = 520; not yet run on a GPU when it was added). Configurations: the pruned gather overlapped, the gather with -fm_plan_overlap 0,
 * the ring schedule. Each rank builds the same global Q, K, V, dO (grid values k/256, exact in
 * bf16), takes its local rows and keys, poisons O, LSE, dQ, dK, dV with NaN (0xFF bytes) before
 * each call, runs FMPlanForward and FMPlanBackward on device tensors, and checks over the ranks:
 *   dQ, dK, dV against float64 (from the float64 O): relative 2-norm error <= 2e-2 per tensor,
 *     every value finite;
 *   dQ, dK, dV against the CPU backend's plan of the same configuration: relative <= 2e-2.
 * Then the first case's default plan runs the backward twice (every plan runs under
 * -fm_deterministic 1, set before the contexts): dQ,
 * dK, dV must be bitwise equal (-no_dq_bitwise: dQ's equality only reported, for kernels whose
 * deterministic mode is not there yet). With -trace FILE (and HDF5 in the build) that plan also
 * writes its backward's trace; rank 0 reads it back: every rank with rows has a compute event of
 * its local GPU stage (chunk -1: the CPU executor records chunk ids only), and each rank's
 * "reduce" bytes equal its FMDistGetStats reduce_bytes (> 0 somewhere on several ranks). The
 * plan is then set up again with another mask of the same shape (an update, keeping the
 * executor's pools) and checked against float64 once more.
 * Exit: 0 pass, 1 fail, 77 no CUDA / no GPU, 99 hard error; the same on every rank.
 */
#include <flashmask.h>
#include <flashmask/private/fmkernels.h>
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmdist.h>
#include <flashmask/private/fmtracing.h>
#include "fmtest.h"

#if !FM_HAVE_CUDA
FMT_SKIP_MAIN("built without CUDA")
#else
#include <cuda_runtime_api.h>

static int rank, size;

#define CU(expr) FMT_CU_ABORT(expr, rank, "")
#define CALL(expr) FMT_CALL_ABORT(expr, rank, "")

typedef struct {
  const char *name, *type;
  int S, Hq, Hkv, D, mh, chunk;
} Case;
typedef struct {
  const char *name, *sched;
  int overlap;
} Config;
static const Config confs[] = {{"gather", "gather", 1}, {"gather_no_overlap", "gather", 0}, {"ring", "ring", 1}};
#define NCONF ((int)(sizeof(confs) / sizeof(confs[0])))
#define DT FM_DTYPE_BF16

/* A value k/256, 0 < |k| <= 256, into a bf16 tensor and its float copy. */
static void fill(void *t, float *f, size_t n, uint64_t *s)
{
  for (size_t i = 0; i < n; i++) {
    uint64_t r = fmt_next(s);
    float k = (float)(1 + (int)(r % 256));
    f[i] = (r >> 40) & 1 ? -k / 256.0f : k / 256.0f;
    FMFromFloat(t, i, DT, f[i]);
  }
}

/* The case's mask on ctx: the builder, or random per-head bounds (rows ute <= i < lts see key x). */
static FMErrorCode make_mask(FMContext ctx, const Case *c, int seed, FMMask *mask)
{
  FMErrorCode e;
  CALL(FMMaskCreate(ctx, mask));
  CALL(FMMaskSetSizes(*mask, c->S, c->S, c->mh));
  CALL(FMMaskSetType(*mask, c->type));
  CALL(FMMaskSetSeed(*mask, seed));
  if (!strcmp(c->type, FMMASKBOUNDS)) {
    int32_t *b = malloc(sizeof(int32_t) * 4 * (size_t)c->S);
    uint64_t s = 99991u + (uint64_t)seed;
    for (int h = 0; h < c->mh; h++) {
      int32_t *lts = b, *lte = b + c->S, *uts = b + 2 * (size_t)c->S, *ute = b + 3 * (size_t)c->S;
      for (int x = 0; x < c->S; x++) {
        int lo = x + 1 + (int)(fmt_next(&s) % (uint64_t)(c->S / 3));
        lts[x] = lo > c->S ? c->S : lo; lte[x] = c->S;
        uts[x] = 0; ute[x] = (int)(fmt_next(&s) % (uint64_t)(x + 1));
        if (fmt_next(&s) % 16 == 0) { lts[x] = 0; ute[x] = 0; } /* a fully masked column */
      }
      e = FMMaskSetBounds(*mask, h, lts, lte, uts, ute);
      if (e) { free(b); return e; }
    }
    free(b);
  }
  CALL(FMMaskSetUp(*mask));
  return FM_SUCCESS;
}

/*
 * Float64 forward and backward of the whole problem (batch 1): dq [S][Hq][D], dk, dv [S][Hkv][D]
 * (GQA: summed over each KV head's query heads). Masking by FMMaskIsMasked. Not collective.
 */
static void reference(const Case *c, FMMask mask, const float *q, const float *k, const float *v, const float *dO, double *dq, double *dk,
                      double *dv)
{
  const int S = c->S, D = c->D, g = c->Hq / c->Hkv, gm = c->Hq / c->mh;
  const double sc = 1.0 / sqrt((double)D);
  double *p = malloc(sizeof(double) * S), *dp = malloc(sizeof(double) * S);
  unsigned char *vis = malloc((size_t)S);
  memset(dq, 0, sizeof(double) * S * c->Hq * D);
  memset(dk, 0, sizeof(double) * S * c->Hkv * D);
  memset(dv, 0, sizeof(double) * S * c->Hkv * D);
  for (int h = 0; h < c->Hq; h++) {
    const int hk = h / g;
    for (int i = 0; i < S; i++) {
      const float *qi = q + ((size_t)i * c->Hq + h) * D, *di = dO + ((size_t)i * c->Hq + h) * D;
      double mx = -INFINITY, l = 0, Di = 0, o[256];
      for (int j = 0; j < S; j++) {
        FMBool m = FM_TRUE;
        if (FMMaskIsMasked(mask, h / gm, i, j, &m)) m = FM_TRUE;
        vis[j] = m == FM_FALSE;
        p[j] = 0;
        if (!vis[j]) continue;
        for (int d = 0; d < D; d++) p[j] += (double)qi[d] * k[((size_t)j * c->Hkv + hk) * D + d];
        p[j] *= sc;
        if (p[j] > mx) mx = p[j];
      }
      if (mx == -INFINITY) continue; /* a row that sees nothing has no gradient */
      for (int j = 0; j < S; j++) l += vis[j] ? exp(p[j] - mx) : 0;
      for (int d = 0; d < D; d++) o[d] = 0;
      for (int j = 0; j < S; j++) {
        p[j] = vis[j] ? exp(p[j] - mx) / l : 0;
        for (int d = 0; d < D && vis[j]; d++) o[d] += p[j] * v[((size_t)j * c->Hkv + hk) * D + d];
      }
      for (int d = 0; d < D; d++) Di += o[d] * di[d];
      for (int j = 0; j < S; j++) {
        if (!vis[j]) continue;
        dp[j] = 0;
        for (int d = 0; d < D; d++) {
          dp[j] += (double)di[d] * v[((size_t)j * c->Hkv + hk) * D + d];
          dv[((size_t)j * c->Hkv + hk) * D + d] += p[j] * di[d];
        }
        dp[j] = p[j] * (dp[j] - Di) * sc; /* dS times the scale */
        for (int d = 0; d < D; d++) {
          dq[((size_t)i * c->Hq + h) * D + d] += dp[j] * k[((size_t)j * c->Hkv + hk) * D + d];
          dk[((size_t)j * c->Hkv + hk) * D + d] += dp[j] * qi[d];
        }
      }
    }
  }
  free(p); free(dp); free(vis);
}

/* Rows idx[0..n) of a global [S][unit] tensor (es-byte elements) into [n][unit]. */
static void pick(void *dst, const void *src, size_t unit, int n, const int *idx)
{
  for (int i = 0; i < n; i++) memcpy((char *)dst + (size_t)i * unit, (const char *)src + (size_t)idx[i] * unit, unit);
}

/* Error sums of n local rows (bf16, [n][unit]) against rows idx of a global float64 or bf16 ref. */
static void errsum(const void *a, const double *rd, const void *rb, int n, const int *idx, size_t unit, double acc[3])
{
  for (int i = 0; i < n; i++)
    for (size_t u = 0; u < unit; u++) {
      const double x = FMToFloat(a, (size_t)i * unit + u, DT);
      const double r = rd ? rd[(size_t)idx[i] * unit + u] : FMToFloat(rb, (size_t)idx[i] * unit + u, DT);
      acc[0] += isfinite(x) ? (x - r) * (x - r) : INFINITY;
      acc[1] += r * r;
      acc[2] += !isfinite(x);
    }
}

/* One plan of the case in configuration f on ctx (type cp on every rank count). */
static FMPlan make_plan(FMContext ctx, FMMask mask, const Case *c, const Config *f, const char *trace)
{
  FMPlan plan;
  CALL(FMPlanCreate(ctx, &plan));
  CALL(FMPlanSetType(plan, FMPLANCP));
  CALL(FMPlanSetMask(plan, mask));
  CALL(FMPlanSetShape(plan, 1, c->Hq, c->Hkv, c->D, DT));
  CALL(FMPlanSetChunk(plan, c->chunk));
  CALL(FMPlanSetSchedule(plan, f->sched));
  CALL(FMPlanSetOverlap(plan, f->overlap ? FM_TRUE : FM_FALSE));
  if (trace) CALL(FMPlanSetTrace(plan, trace, FM_FALSE));
  CALL(FMPlanSetFromOptions(plan)); /* -fm_plan_transport, -fm_gpu_aware_mpi from the command line */
  CALL(FMPlanSetUp(plan));
  return plan;
}

/* Global data of a case: float copies for the reference, bf16 tensors for the plans. */
typedef struct {
  float *fq, *fk, *fv, *fdo;
  char *q, *k, *v, *dO;
  double *rq, *rk, *rv;
} Data;

/* Local tensors of one plan, on the host (h*) and, for the CUDA plan, on the device (d*). */
typedef struct {
  int nl, nk;
  const int *rows, *keys;
  size_t sq, sk, sl; /* bytes of the q-like, k-like tensors and of the LSE */
  char *q, *k, *v, *dO, *o, *dq, *dk, *dv;
  float *lse;
  void *Dq, *Dk, *Dv, *DdO, *Do, *Ddq, *Ddk, *Ddv, *Dlse;
} Local;

static void local_make(FMPlan plan, const Case *c, const Data *G, int dev, Local *L)
{
  const size_t es = FMDTypeSize(DT);
  memset(L, 0, sizeof(*L));
  CALL(FMPlanGetLocalRows(plan, &L->nl, &L->rows));
  CALL(FMPlanGetLocalKeys(plan, &L->nk, &L->keys));
  L->sq = es * L->nl * c->Hq * c->D; L->sk = es * L->nk * c->Hkv * c->D; L->sl = 4 * (size_t)c->Hq * L->nl;
  L->q = malloc(L->sq + 1); L->dO = malloc(L->sq + 1); L->o = malloc(L->sq + 1); L->dq = malloc(L->sq + 1);
  L->k = malloc(L->sk + 1); L->v = malloc(L->sk + 1); L->dk = malloc(L->sk + 1); L->dv = malloc(L->sk + 1);
  L->lse = malloc(L->sl + 4);
  pick(L->q, G->q, es * c->Hq * c->D, L->nl, L->rows);
  pick(L->dO, G->dO, es * c->Hq * c->D, L->nl, L->rows);
  pick(L->k, G->k, es * c->Hkv * c->D, L->nk, L->keys);
  pick(L->v, G->v, es * c->Hkv * c->D, L->nk, L->keys);
  if (!dev) return;
  CU(cudaMalloc(&L->Dq, L->sq + 1)); CU(cudaMalloc(&L->DdO, L->sq + 1)); CU(cudaMalloc(&L->Do, L->sq + 1)); CU(cudaMalloc(&L->Ddq, L->sq + 1));
  CU(cudaMalloc(&L->Dk, L->sk + 1)); CU(cudaMalloc(&L->Dv, L->sk + 1)); CU(cudaMalloc(&L->Ddk, L->sk + 1)); CU(cudaMalloc(&L->Ddv, L->sk + 1));
  CU(cudaMalloc(&L->Dlse, L->sl + 4));
  CU(cudaMemcpy(L->Dq, L->q, L->sq, cudaMemcpyHostToDevice)); CU(cudaMemcpy(L->DdO, L->dO, L->sq, cudaMemcpyHostToDevice));
  CU(cudaMemcpy(L->Dk, L->k, L->sk, cudaMemcpyHostToDevice)); CU(cudaMemcpy(L->Dv, L->v, L->sk, cudaMemcpyHostToDevice));
}

static void local_free(Local *L)
{
  free(L->q); free(L->dO); free(L->o); free(L->dq); free(L->k); free(L->v); free(L->dk); free(L->dv); free(L->lse);
  cudaFree(L->Dq); cudaFree(L->DdO); cudaFree(L->Do); cudaFree(L->Ddq); cudaFree(L->Dk); cudaFree(L->Dv); cudaFree(L->Ddk); cudaFree(L->Ddv);
  cudaFree(L->Dlse);
}

/* The gradients poisoned with NaN (0xFF bytes), on the device or the host. */
static void poison_grads(Local *L, int dev)
{
  if (dev) {
    CU(cudaMemset(L->Ddq, 0xff, L->sq + 1)); CU(cudaMemset(L->Ddk, 0xff, L->sk + 1)); CU(cudaMemset(L->Ddv, 0xff, L->sk + 1));
    CU(cudaDeviceSynchronize());
  } else {
    memset(L->dq, 0xff, L->sq + 1); memset(L->dk, 0xff, L->sk + 1); memset(L->dv, 0xff, L->sk + 1);
  }
}

/* Forward, then backward of the CUDA plan; gradients downloaded into L->dq, dk, dv. */
static void run_gpu(FMPlan plan, Local *L, int forward)
{
  if (forward) {
    CU(cudaMemset(L->Do, 0xff, L->sq + 1)); CU(cudaMemset(L->Dlse, 0xff, L->sl + 4));
    CU(cudaDeviceSynchronize());
    CALL(FMPlanForward(plan, L->Dq, L->Dk, L->Dv, L->Do, L->Dlse));
  }
  poison_grads(L, 1);
  CALL(FMPlanBackward(plan, L->Dq, L->Dk, L->Dv, L->Do, L->Dlse, L->DdO, L->Ddq, L->Ddk, L->Ddv));
  CU(cudaDeviceSynchronize());
  CU(cudaMemcpy(L->dq, L->Ddq, L->sq, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(L->dk, L->Ddk, L->sk, cudaMemcpyDeviceToHost));
  CU(cudaMemcpy(L->dv, L->Ddv, L->sk, cudaMemcpyDeviceToHost));
}

/* Relative errors over the ranks of dq, dk, dv (L) against float64 (G) or another plan's (ref, global bf16 gathered). */
static void rel3(const Case *c, const Local *L, const Data *G, const char *const *glob, double rel[3], double *nonfinite)
{
  const size_t uq = (size_t)c->Hq * c->D, uk = (size_t)c->Hkv * c->D;
  double a[9] = {0}, t[9];
  errsum(L->dq, glob ? NULL : G->rq, glob ? glob[0] : NULL, L->nl, L->rows, uq, a);
  errsum(L->dk, glob ? NULL : G->rk, glob ? glob[1] : NULL, L->nk, L->keys, uk, a + 3);
  errsum(L->dv, glob ? NULL : G->rv, glob ? glob[2] : NULL, L->nk, L->keys, uk, a + 6);
  MPI_Allreduce(a, t, 9, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < 3; i++) rel[i] = t[3 * i + 1] > 0 ? sqrt(t[3 * i] / t[3 * i + 1]) : sqrt(t[3 * i]);
  *nonfinite = t[2] + t[5] + t[8];
}

/* Scatter local rows of a plan's results into a global bf16 tensor, summed over the ranks (each row has one owner). */
static char *gather_global(const void *loc, int n, const int *idx, int S, size_t unit)
{
  float *f = calloc((size_t)S * unit + 1, sizeof(float)), *g = malloc(sizeof(float) * ((size_t)S * unit + 1));
  char *out = malloc(FMDTypeSize(DT) * (size_t)S * unit + 1);
  for (int i = 0; i < n; i++)
    for (size_t u = 0; u < unit; u++) f[(size_t)idx[i] * unit + u] = FMToFloat(loc, (size_t)i * unit + u, DT);
  MPI_Allreduce(f, g, (int)((size_t)S * unit), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (size_t i = 0; i < (size_t)S * unit; i++) FMFromFloat(out, i, DT, g[i]);
  free(f); free(g);
  return out;
}

/* One case in configuration f: the CUDA plan against float64 and against the CPU backend's plan. */
static void run_config(FMContext gw, FMContext cw, FMMask mask, FMMask maskc, const Case *c, const Data *G, int f)
{
  FMPlan pg = make_plan(gw, mask, c, &confs[f], NULL), pc = make_plan(cw, maskc, c, &confs[f], NULL);
  Local Lg, Lc;
  char *glob[3];
  double rg[3], rc[3], rx[3], nf, nf2, dummy;
  int ok;
  local_make(pg, c, G, 1, &Lg);
  local_make(pc, c, G, 0, &Lc);
  run_gpu(pg, &Lg, 1);
  memset(Lc.o, 0xff, Lc.sq + 1); memset(Lc.lse, 0xff, Lc.sl + 4);
  CALL(FMPlanForward(pc, Lc.q, Lc.k, Lc.v, Lc.o, Lc.lse));
  poison_grads(&Lc, 0);
  CALL(FMPlanBackward(pc, Lc.q, Lc.k, Lc.v, Lc.o, Lc.lse, Lc.dO, Lc.dq, Lc.dk, Lc.dv));
  rel3(c, &Lg, G, NULL, rg, &nf);
  rel3(c, &Lc, G, NULL, rc, &nf2);
  glob[0] = gather_global(Lc.dq, Lc.nl, Lc.rows, c->S, (size_t)c->Hq * c->D);
  glob[1] = gather_global(Lc.dk, Lc.nk, Lc.keys, c->S, (size_t)c->Hkv * c->D);
  glob[2] = gather_global(Lc.dv, Lc.nk, Lc.keys, c->S, (size_t)c->Hkv * c->D);
  rel3(c, &Lg, G, (const char *const *)glob, rx, &dummy);
  ok = nf == 0 && nf2 == 0;
  for (int i = 0; i < 3; i++) ok &= rg[i] <= 2e-2 && rc[i] <= 2e-2 && rx[i] <= 2e-2;
  if (!ok) fmt_failures++;
  if (rank == 0)
    printf("%-4s %-16s %-18s P=%d: GPU-f64 dQ %.1e dK %.1e dV %.1e | CPU-f64 %.1e %.1e %.1e | GPU-CPU %.1e %.1e %.1e | %.0f non-finite\n",
           ok ? "ok" : "FAIL", c->name, confs[f].name, size, rg[0], rg[1], rg[2], rc[0], rc[1], rc[2], rx[0], rx[1], rx[2], nf + nf2);
  fflush(stdout);
  for (int i = 0; i < 3; i++) free(glob[i]);
  local_free(&Lg);
  local_free(&Lc);
  CALL(FMPlanDestroy(&pg));
  CALL(FMPlanDestroy(&pc));
}

/*
 * The trace of the backward just run (rank 0 reads it; the verdict reaches every rank): a
 * compute event of each rank's local GPU stage (chunk -1) where the rank has rows, and each
 * rank's reduce bytes equal to its statistics' reduce_bytes.
 */
static void check_trace(FMPlan plan, const char *path, int nl)
{
#if FM_HAVE_HDF5
  FMDistStats st;
  double mine[2], *all = malloc(sizeof(double) * 2 * size);
  int bad = 0;
  CALL(FMDistGetStats(plan, &st));
  mine[0] = st.reduce_bytes; mine[1] = nl;
  MPI_Gather(mine, 2, MPI_DOUBLE, all, 2, MPI_DOUBLE, 0, MPI_COMM_WORLD);
  if (rank == 0) {
    FMTraceData td;
    double total = 0;
    CALL(FMTraceLoad_Private(path, "backward", &td));
    for (int r = 0; r < size; r++) {
      double red = 0;
      int local = 0, stages = 0;
      for (size_t i = 0; i < td.n; i++) {
        const FMTraceEvent *e = &td.ev[i];
        if (e->rank != r) continue;
        if (e->kind == FM_TRACE_COMPUTE) { stages++; local += e->chunk == -1 && e->flops > 0; }
        if (e->kind == FM_TRACE_REDUCE) red += e->bytes;
      }
      total += red;
      printf("   trace rank %d: %d GPU stages computed (local stage %s), reduce %.0f bytes traced, %.0f in the statistics\n", r, stages,
             local ? "traced" : "MISSING", red, all[2 * r]);
      if ((all[2 * r + 1] > 0 && local != 1) || red != all[2 * r]) bad++;
    }
    if (size > 1 && !(total > 0)) bad++;
    FMTraceDataFree_Private(&td);
  }
  MPI_Bcast(&bad, 1, MPI_INT, 0, MPI_COMM_WORLD);
  FMT_CHECK(!bad, "the backward's trace in %s lacks GPU stages or its reduce bytes differ from the statistics", path);
  free(all);
#else
  (void)plan; (void)path; (void)nl;
  if (rank == 0) printf("   trace not checked: no HDF5 in this build\n");
#endif
}

/*
 * Re-planning: the same plan set up again with another mask of the same shape (an update: the
 * GPU executor keeps its pools, the backward's included, and rebuilds the steps), then forward
 * and backward against float64 of that mask.
 */
static void run_replan(FMPlan plan, FMContext gw, const Case *c, const Data *G)
{
  const size_t nq = (size_t)c->S * c->Hq * c->D, nk = (size_t)c->S * c->Hkv * c->D;
  FMMask m2;
  FMDistStats st;
  Local L;
  Data R = *G;
  double rel[3], nf;
  int ok;
  R.rq = malloc(8 * nq); R.rk = malloc(8 * nk); R.rv = malloc(8 * nk);
  CALL(make_mask(gw, c, 7, &m2));
  reference(c, m2, G->fq, G->fk, G->fv, G->fdo, R.rq, R.rk, R.rv);
  CALL(FMPlanSetMask(plan, m2));
  CALL(FMPlanSetUp(plan));
  CALL(FMDistGetStats(plan, &st));
  local_make(plan, c, G, 1, &L);
  run_gpu(plan, &L, 1);
  rel3(c, &L, &R, NULL, rel, &nf);
  ok = nf == 0 && rel[0] <= 2e-2 && rel[1] <= 2e-2 && rel[2] <= 2e-2 && st.setups_update == 1;
  if (!ok) fmt_failures++;
  if (rank == 0)
    printf("%-4s %-16s re-planned (another mask, %d update): GPU-f64 dQ %.1e dK %.1e dV %.1e | %.0f non-finite\n", ok ? "ok" : "FAIL", c->name,
           st.setups_update, rel[0], rel[1], rel[2], nf);
  local_free(&L);
  CALL(FMMaskDestroy(&m2));
  free(R.rq); free(R.rk); free(R.rv);
}

/* The default plan's backward twice (-fm_deterministic 1, set in main): bitwise equal gradients; its trace. */
static void run_repeat(FMContext gw, FMMask mask, const Case *c, const Data *G, const char *trace, int dq_bitwise)
{
  FMPlan plan;
  Local L;
  char *first[3];
  int same[3], all[3];
  plan = make_plan(gw, mask, c, &confs[0], trace);
  local_make(plan, c, G, 1, &L);
  run_gpu(plan, &L, 1);
  first[0] = malloc(L.sq + 1); first[1] = malloc(L.sk + 1); first[2] = malloc(L.sk + 1);
  memcpy(first[0], L.dq, L.sq); memcpy(first[1], L.dk, L.sk); memcpy(first[2], L.dv, L.sk);
  run_gpu(plan, &L, 0);
  same[0] = !memcmp(first[0], L.dq, L.sq); same[1] = !memcmp(first[1], L.dk, L.sk); same[2] = !memcmp(first[2], L.dv, L.sk);
  MPI_Allreduce(same, all, 3, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (rank == 0)
    printf("%-4s %-16s backward twice: dQ %s, dK %s, dV %s\n", all[1] && all[2] && (all[0] || !dq_bitwise) ? "ok" : "FAIL", c->name,
           all[0] ? "bitwise equal" : dq_bitwise ? "DIFFERS" : "differs (not checked: -no_dq_bitwise)", all[1] ? "bitwise equal" : "DIFFERS",
           all[2] ? "bitwise equal" : "DIFFERS");
  if (!all[1] || !all[2] || (!all[0] && dq_bitwise)) fmt_failures++;
  if (trace) check_trace(plan, trace, L.nl);
  for (int i = 0; i < 3; i++) free(first[i]);
  local_free(&L);
  run_replan(plan, gw, c, G);
  CALL(FMPlanDestroy(&plan));
}

/* One case: global data, float64 reference, every configuration, then (first case) the repeat. */
static void run_case(FMContext gw, FMContext cw, const Case *c, uint64_t seed, int repeat, const char *trace, int dq_bitwise)
{
  const size_t nq = (size_t)c->S * c->Hq * c->D, nk = (size_t)c->S * c->Hkv * c->D, es = FMDTypeSize(DT);
  Data G;
  FMMask mask, mask1;
  uint64_t s = seed;
  G.fq = malloc(4 * nq); G.fdo = malloc(4 * nq); G.fk = malloc(4 * nk); G.fv = malloc(4 * nk);
  G.q = malloc(es * nq); G.dO = malloc(es * nq); G.k = malloc(es * nk); G.v = malloc(es * nk);
  G.rq = malloc(8 * nq); G.rk = malloc(8 * nk); G.rv = malloc(8 * nk);
  fill(G.q, G.fq, nq, &s); fill(G.k, G.fk, nk, &s); fill(G.v, G.fv, nk, &s); fill(G.dO, G.fdo, nq, &s);
  CALL(make_mask(gw, c, 42, &mask));
  CALL(make_mask(cw, c, 42, &mask1));
  reference(c, mask, G.fq, G.fk, G.fv, G.fdo, G.rq, G.rk, G.rv);
  for (int f = 0; f < NCONF; f++) run_config(gw, cw, mask, mask1, c, &G, f);
  if (repeat) run_repeat(gw, mask, c, &G, trace, dq_bitwise);
  CALL(FMMaskDestroy(&mask));
  CALL(FMMaskDestroy(&mask1));
  free(G.fq); free(G.fdo); free(G.fk); free(G.fv); free(G.q); free(G.dO); free(G.k); free(G.v); free(G.rq); free(G.rk); free(G.rv);
}

int main(int argc, char **argv)
{
  FMContext gw, cw;
  int ngpus = 0, have, all, fails, dq_bitwise = 1;
  const char *trace = NULL;
  static const Case cases[] = {
    {"causal_document", FMMASKCAUSALDOCUMENT, 768, 4, 2, 64, 1, 112},
    {"random_per_head", FMMASKBOUNDS, 640, 4, 2, 64, 2, 88},
    /* d = 256: the Hopper kernel's 64-key items and the fp32 dK/dV partials of its two column halves */
    {"causal_d256", FMMASKCAUSAL, 520, 4, 2, 256, 1, 72},
  };
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_gpu_cp_bwd: the context-parallel backward on GPUs against float64 and the CPU backend"));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "-trace") && a + 1 < argc) trace = argv[++a];
    else if (!strcmp(argv[a], "-no_dq_bitwise")) dq_bitwise = 0;
  }
  if (FMCudaDeviceCount(&ngpus) != FM_SUCCESS) {
    fprintf(stderr, "HARD ERROR rank %d: FMCudaDeviceCount failed: %s\n", rank, FMGetLastErrorMessage());
    have = -1;
  } else have = ngpus > 0;
  MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
  if (all <= 0) {
    if (rank == 0 && !all) printf("SKIP: no CUDA device visible on some rank\n");
    FMFinalize();
    return all < 0 ? 99 : 77;
  }
  if (rank == 0) printf("test_gpu_cp_bwd on %d rank(s), %d GPU(s) visible to rank 0\n", size, ngpus);
  /* before the contexts and plans, whichever of them reads it: the kernels' fixed dQ order */
  CALL(FMOptionsSetValue("-fm_deterministic", "1"));
  CALL(FMContextCreate(MPI_COMM_WORLD, &gw));
  CALL(FMContextSetFromOptions(gw));
  CALL(FMContextSetBackend(gw, FM_BACKEND_CUDA));
  CALL(FMContextSetUp(gw));
  CALL(FMContextCreate(MPI_COMM_WORLD, &cw));
  CALL(FMContextSetBackend(cw, FM_BACKEND_CPU));
  CALL(FMContextSetUp(cw));
  {
    int dev = -1;
    CALL(FMContextGetDevice(gw, &dev));
    if (dev >= 0) CU(cudaSetDevice(dev));
  }
  for (int i = 0; i < (int)(sizeof(cases) / sizeof(cases[0])); i++) {
    if (rank == 0) printf("-- %s: S = %d, H = %d/%d, D = %d, mask heads %d, chunk %d, bf16\n", cases[i].name, cases[i].S, cases[i].Hq,
                          cases[i].Hkv, cases[i].D, cases[i].mh, cases[i].chunk);
    run_case(gw, cw, &cases[i], 4242 + 17 * (uint64_t)i, i == 0, trace, dq_bitwise);
  }
  CALL(FMContextDestroy(&gw));
  CALL(FMContextDestroy(&cw));
  MPI_Allreduce(&fmt_failures, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (fails && !fmt_failures) fmt_failures = 1;
  FMT_CALL(FMFinalize());
  return fmt_finish("test_gpu_cp_bwd");
}
#endif /* FM_HAVE_CUDA */
