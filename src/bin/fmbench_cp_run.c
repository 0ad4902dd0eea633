/*
 * fmbench_cp_run.c - fmbench -cp: one configuration's plan (or the one-GPU plan) of one mask,
 * its local tensors, and the timed and traced runs of every chosen pass (fmbench_cp.h).
 *
 * One plan per configuration: set up once and timed in every pass (forward, backward, forward +
 * backward); then, with a trace directory, the same plan gets FMPlanSetTrace and is set up
 * again for one traced forward (+ backward when a pass has one) into
 * DIR/<mask>_<S>_<config>.h5 (/traces/forward and /traces/backward). On the CPU backend
 * (-fm_backend cpu: checks without a GPU) the tensors live in host memory and nothing touches
 * CUDA.
 */
#include "fmbench_cp.h"
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* src/kernels/cuda.cu: uniform device values in [-amp, amp), never zeros */
FMErrorCode FMCudaFillRandom_Private(void *p, size_t n, FMDType t, unsigned long long seed, float amp, void *stream);

/* FLOPs of one run of pass p from the forward's (FMPlanGetFlops): fmbench's convention. */
static double cp_pass_flops(double fwd, int p) { return fwd * (p == CP_FWD ? 1.0 : p == CP_BWD ? 2.5 : 3.5); }

static int cp_cmpd(const void *x, const void *y)
{
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* FMBenchMedian_Private - see fmbench_cp.h. */
double FMBenchMedian_Private(double *t, int n)
{
  qsort(t, (size_t)n, sizeof(double), cp_cmpd);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* FMBenchCPMakeMask_Private - the builder mask `type` of S x S with mh mask heads and the fixed seed, set up on ctx. Collective on ctx. */
FMErrorCode FMBenchCPMakeMask_Private(FMContext ctx, const char *type, int S, int mh, unsigned long seed, FMMask *mask)
{
  FMCall(FMMaskCreate(ctx, mask));
  FMCall(FMMaskSetSizes(*mask, S, S, mh));
  FMCall(FMMaskSetType(*mask, type));
  FMCall(FMMaskSetSeed(*mask, seed));
  FMCall(FMMaskSetUp(*mask));
  return FM_SUCCESS;
}

/* The tensors of one plan's local layout: q, o, dout, dq [nl][H][D]; k, v, dk, dv [nk][Hkv][D];
   lse [H][nl]; on the device, or in host memory (host = 1). The gradients only with grad. */
typedef struct {
  void *t[8]; /* q, k, v, o, dout, dq, dk, dv */
  float *lse;
  int host;
} CPBuf;
enum { BQ, BK, BV, BO, BDO, BDQ, BDK, BDV };

/* cp_buf_free - free what cp_buf_alloc allocated (NULL members are fine). Not collective. */
static void cp_buf_free(CPBuf *b)
{
  for (int i = 0; i < 8; i++) {
    if (b->host) free(b->t[i]);
    else cudaFree(b->t[i]);
  }
  if (b->host) free(b->lse);
  else cudaFree(b->lse);
  memset(b, 0, sizeof(*b));
}

/* cp_fill_host - n uniform values in [-amp, amp), never zero, of type t (xorshift64* from seed). */
static void cp_fill_host(void *p, size_t n, FMDType t, unsigned long long seed, float amp)
{
  unsigned long long s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (size_t i = 0; i < n; i++) {
    float u;
    s ^= s >> 12; s ^= s << 25; s ^= s >> 27;
    u = (float)((s * 0x2545F4914F6CDD1Dull) >> 40) / 16777216.0f; /* [0, 1) */
    u = amp * (2 * u - 1);
    FMFromFloat(p, i, t, u != 0 ? u : amp / 64);
  }
}

/* cp_alloc_one - n bytes on the device or the host; 0 on failure. */
static int cp_alloc_one(int host, void **p, size_t n)
{
  if (host) return (*p = malloc(n ? n : 1)) != NULL;
  return cudaMalloc(p, n ? n : 1) == cudaSuccess;
}

/*
 * cp_buf_alloc - allocate the tensors of nl rows and nk keys (the gradients too with grad) and
 *   fill q, k, v (and dout) with random values: each rank its own stream, the same for every
 *   configuration. Not collective; on error what was allocated is freed.
 */
static FMErrorCode cp_buf_alloc(const CPArgs *a, int nl, int nk, int grad, unsigned long long seed, CPBuf *b)
{
  const size_t es = FMDTypeSize(a->sh.dt), nq = (size_t)nl * a->sh.H * a->sh.D, nkv = (size_t)nk * a->sh.Hkv * a->sh.D;
  const size_t n[8] = {nq, nkv, nkv, nq, nq, nq, nkv, nkv};
  const float amp[8] = {1.5f, 1.5f, 1.0f, 0, 1.0f, 0, 0, 0};
  int ok = 1;
  FMErrorCode ierr = FM_SUCCESS;
  memset(b, 0, sizeof(*b));
  b->host = a->cpu;
  for (int i = 0; ok && i < (grad ? 8 : 4); i++) ok = cp_alloc_one(b->host, &b->t[i], n[i] * es);
  if (ok) ok = cp_alloc_one(b->host, (void **)&b->lse, (size_t)nl * a->sh.H * sizeof(float));
  if (!ok) {
    cp_buf_free(b);
    if (!a->cpu) (void)cudaGetLastError();
    FMRaise(MPI_COMM_SELF, a->cpu ? FM_ERR_MEM : FM_ERR_CUDA, "Allocating the local tensors (%d rows, %d keys, %.1f MB%s) failed", nl, nk,
            ((grad ? 4.0 : 2.0) * (nq + nkv) * es + (double)nl * a->sh.H * 4) / 1e6, a->cpu ? ", host" : ", device");
  }
  for (int i = 0; !ierr && i < (grad ? 8 : 4); i++) {
    if (amp[i] == 0 || !n[i]) continue;
    if (b->host) cp_fill_host(b->t[i], n[i], a->sh.dt, seed * 8 + i, amp[i]);
    else ierr = FMCudaFillRandom_Private(b->t[i], n[i], a->sh.dt, seed * 8 + i, amp[i], NULL);
  }
  if (!ierr && !b->host && cudaDeviceSynchronize() != cudaSuccess) {
    (void)cudaGetLastError();
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_CUDA, "Filling the local tensors failed");
  }
  if (ierr) {
    cp_buf_free(b);
    return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr);
  }
  return FM_SUCCESS;
}

/* Bytes one run sent on this rank: K/V per link level and dK/dV partials (several ranks only). */
typedef struct {
  double lvl[2], reduce;
} CPBytes;

/* cp_add_bytes - add the last call's bytes (FMDistGetStats) to *by. Not collective. */
static FMErrorCode cp_add_bytes(FMPlan plan, CPBytes *by)
{
  FMDistStats st;
  if (!by) return FM_SUCCESS;
  FMCall(FMDistGetStats(plan, &st));
  by->lvl[0] += st.sent_bytes[0];
  by->lvl[1] += st.sent_bytes[1];
  by->reduce += st.reduce_bytes;
  return FM_SUCCESS;
}

/* cp_run_pass - one run of pass p (the backward alone uses the O and LSE already in b); by (may be NULL) gets its bytes. Collective on the plan. */
static FMErrorCode cp_run_pass(FMPlan plan, int p, const CPBuf *b, CPBytes *by)
{
  void *const *t = b->t;
  if (by) memset(by, 0, sizeof(*by));
  if (p != CP_BWD) {
    FMCall(FMPlanForward(plan, t[BQ], t[BK], t[BV], t[BO], b->lse));
    FMCall(cp_add_bytes(plan, by));
  }
  if (p != CP_FWD) {
    FMCall(FMPlanBackward(plan, t[BQ], t[BK], t[BV], t[BO], b->lse, t[BDO], t[BDQ], t[BDK], t[BDV]));
    FMCall(cp_add_bytes(plan, by));
  }
  return FM_SUCCESS;
}

/*
 * cp_time - warm runs, then reps timed runs of pass p on comm's ranks; each timed run is
 *   bracketed by the device's synchronization (CUDA only) + MPI_Barrier and MPI_Wtime, its time
 *   is the maximum over the ranks, and *ms gets the median (the mean of the middle two for an
 *   even count). by (may be NULL): the bytes of the last run. Collective on comm (the plan's
 *   ranks). A CUDA failure on any rank fails on every rank.
 */
static FMErrorCode cp_time(FMPlan plan, MPI_Comm comm, const CPBuf *b, int p, int warm, int reps, double *ms, CPBytes *by)
{
  double *t = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  FMCall(FMMalloc(reps, &t));
  for (int w = 0; w < warm; w++) FMCallGoto(cp_run_pass(plan, p, b, NULL));
  for (int r = 0; r < reps; r++) {
    double loc[2] = {0, 0}, all[2], t0;
    if (!b->host && cudaDeviceSynchronize() != cudaSuccess) loc[1] = 1;
    MPI_Barrier(comm);
    t0 = MPI_Wtime();
    FMCallGoto(cp_run_pass(plan, p, b, r == reps - 1 ? by : NULL));
    if (!b->host && cudaDeviceSynchronize() != cudaSuccess) loc[1] = 1;
    loc[0] = MPI_Wtime() - t0;
    FMCallMPIGoto(MPI_Allreduce(loc, all, 2, MPI_DOUBLE, MPI_MAX, comm));
    if (all[1] != 0) {
      cudaError_t e = cudaGetLastError();
      FMCheckGoto(0, MPI_COMM_SELF, FM_ERR_CUDA, "cudaDeviceSynchronize after the %s pass failed on some rank (here: %s)", cp_pass_name[p],
                  cudaGetErrorString(e));
    }
    t[r] = all[0] * 1e3;
  }
  *ms = FMBenchMedian_Private(t, reps);
cleanup:
  free(t);
  return ierr;
}

/*
 * cp_plan_settings - the settings of configuration c's plan (c < 0: the one-GPU plan): the shared
 *   -fm_plan_* options, then the configuration's own settings, then the options under its
 *   prefix; the benchmark's shape last (its buffers are sized by it). Collective on the plan.
 */
static FMErrorCode cp_plan_settings(FMPlan plan, const CPArgs *a, int c)
{
  FMCall(FMPlanSetFromOptions(plan));
  if (c >= 0) {
    FMCall(FMPlanSetPrune(plan, cp_conf[c].prune));
    FMCall(FMPlanSetOverlap(plan, cp_conf[c].overlap));
    FMCall(FMPlanSetSchedule(plan, cp_conf[c].schedule));
  }
  FMCall(FMPlanSetTrace(plan, NULL, FM_FALSE));
  FMCall(FMPlanSetOptionsPrefix(plan, c >= 0 ? cp_conf[c].prefix : "one_"));
  FMCall(FMPlanSetFromOptions(plan));
  FMCall(FMPlanSetShape(plan, 1, a->sh.H, a->sh.Hkv, a->sh.D, a->sh.dt));
  return FM_SUCCESS;
}

/* cp_sum_bytes - the bytes of by summed over comm's ranks into row. Collective on comm. */
static FMErrorCode cp_sum_bytes(MPI_Comm comm, const CPBytes *by, double allgather, CPRow *row)
{
  double loc[4] = {by->lvl[0], by->lvl[1], by->reduce, allgather}, tot[4];
  FMCallMPI(MPI_Allreduce(loc, tot, 4, MPI_DOUBLE, MPI_SUM, comm));
  row->lvl[0] = tot[0];
  row->lvl[1] = tot[1];
  row->moved = tot[0] + tot[1];
  row->reduce = tot[2];
  row->allgather = tot[3];
  return FM_SUCCESS;
}

/*
 * cp_traced - the traced run of a set-up plan: FMPlanSetTrace(path), FMPlanSetUp again (the
 *   local layout must not move), one forward and, when a chosen pass has one, one backward; the
 *   library's summaries (FMDistGetStats) go into the rows: the forward's into the fwd row and as
 *   overlap_fwd of every row, the backward's into the bwd and fwdbwd rows. Collective on the plan.
 */
static FMErrorCode cp_traced(FMPlan plan, MPI_Comm comm, const CPArgs *a, const CPBuf *b, const char *path, int nl, int nk, CPRow row[CP_NPASS])
{
  FMDistStats st;
  int nl2 = 0, nk2 = 0;
  FMErrorCode ierr;
  FMCall(FMPlanSetTrace(plan, path, FM_FALSE));
  FMCall(FMPlanSetUp(plan));
  ierr = FMPlanGetLocalRows(plan, &nl2, NULL);
  if (!ierr) ierr = FMPlanGetLocalKeys(plan, &nk2, NULL);
  if (!ierr && (nl2 != nl || nk2 != nk))
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_LIB, "the traced set-up moved this rank's rows or keys (%d, %d; were %d, %d)",
                           nl2, nk2, nl, nk);
  FMAgree(comm, ierr);
  FMCall(cp_run_pass(plan, CP_FWD, b, NULL));
  FMCall(FMDistGetStats(plan, &st));
  for (int p = 0; p < CP_NPASS && st.traced; p++) {
    row[p].traced = 1;
    row[p].overlap = row[p].overlap_fwd = st.overlap_efficiency;
    row[p].exposed_max = st.exposed_max;
    row[p].exposed_mean = st.exposed_mean;
    row[p].imbalance = st.imbalance;
  }
  if (!(a->passes & ~(1 << CP_FWD))) return FM_SUCCESS;
  FMCall(cp_run_pass(plan, CP_BWD, b, NULL));
  FMCall(FMDistGetStats(plan, &st));
  for (int p = CP_BWD; p < CP_NPASS && st.traced; p++) {
    row[p].overlap = st.overlap_efficiency;
    row[p].exposed_max = st.exposed_max;
    row[p].exposed_mean = st.exposed_mean;
    row[p].imbalance = st.imbalance;
  }
  return FM_SUCCESS;
}

/*
 * cp_bench_plan - configuration c (c < 0: the one-GPU plan) of mask on ctx: set up its plan,
 *   allocate and fill its local tensors on this rank's device (a->dev, made current first) or
 *   host, time every chosen pass (cp_time; the backward alone after one forward) into row[p],
 *   with the bytes summed over the ranks on several ranks; then, trace set, the traced run
 *   (cp_traced). Collective on ctx.
 *   fill_seed  base of the random inputs (the rank is mixed in)
 */
static FMErrorCode cp_bench_plan(FMContext ctx, FMMask mask, const CPArgs *a, int c, const char *trace, unsigned long long fill_seed,
                                 CPRow row[CP_NPASS])
{
  MPI_Comm comm;
  FMPlan plan = NULL;
  CPBuf b;
  int nl = 0, nk = 0, size, rank;
  double flops = 0;
  FMErrorCode ierr = FM_SUCCESS;

  memset(&b, 0, sizeof(b));
  FMCall(FMContextGetComm(ctx, &comm));
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  /* one device per process: the world context's (the one-GPU context runs there too) */
  if (a->dev >= 0 && !a->cpu) {
    const cudaError_t ce = cudaSetDevice(a->dev);
    if (ce != cudaSuccess)
      ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_CUDA, "cudaSetDevice(%d): %s", a->dev, cudaGetErrorString(ce));
  }
  FMAgreeGoto(comm); /* no rank enters the plan's collective calls alone */
  FMCallGoto(FMPlanCreate(ctx, &plan));
  ierr = FMPlanSetMask(plan, mask);
  if (!ierr) ierr = cp_plan_settings(plan, a, c);
  FMAgreeGoto(comm);
  FMCallGoto(FMPlanSetUp(plan)); /* collective: the same outcome on every rank */
  ierr = FMPlanGetLocalRows(plan, &nl, NULL);
  if (!ierr) ierr = size > 1 ? FMPlanGetLocalKeys(plan, &nk, NULL) : FMMaskGetSizes(mask, NULL, &nk, NULL);
  if (!ierr) ierr = cp_buf_alloc(a, nl, nk, (a->passes & ~(1 << CP_FWD)) != 0, fill_seed * 1000003ull + (unsigned long long)rank * 7919ull, &b);
  FMAgreeGoto(comm);
  FMCallGoto(FMPlanGetFlops(plan, &flops));
  for (int p = 0; p < CP_NPASS; p++) {
    CPBytes by;
    double ms = 0;
    if (!(a->passes & 1 << p)) continue;
    memset(&by, 0, sizeof(by));
    if (p == CP_BWD) FMCallGoto(cp_run_pass(plan, CP_FWD, &b, NULL)); /* the O and LSE the backward alone runs on */
    FMCallGoto(cp_time(plan, comm, &b, p, a->sh.warm, a->sh.reps, &ms, size > 1 ? &by : NULL));
    row[p].done = 1;
    row[p].ms = ms;
    row[p].tflops = cp_pass_flops(flops, p) / (ms * 1e-3) / 1e12;
    if (size > 1) {
      FMDistStats st;
      FMCallGoto(FMDistGetStats(plan, &st));
      FMCallGoto(cp_sum_bytes(comm, &by, st.allgather_bytes, &row[p]));
    }
  }
  if (trace && size > 1) FMCallGoto(cp_traced(plan, comm, a, &b, trace, nl, nk, row));
cleanup:
  cp_buf_free(&b);
  {
    FMErrorCode e2 = FMPlanDestroy(&plan);
    if (!ierr) ierr = e2;
  }
  return ierr;
}

/*
 * FMBenchCPRunConfig_Private - configuration c of one (mask, S) in every chosen pass: timed,
 *   then (trace_dir set, several ranks) traced into DIR/<mask>_<S>_<config>.h5. Collective on ctx.
 */
FMErrorCode FMBenchCPRunConfig_Private(FMContext ctx, FMMask mask, const CPArgs *a, const char *mname, int S, int c, CPRow row[CP_NPASS])
{
  int size, rank;
  char path[1200];
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  memset(row, 0, sizeof(CPRow) * CP_NPASS);
  if (size > 1 && a->trace_dir[0]) {
    snprintf(path, sizeof(path), "%s/%s_%d_%s.h5", a->trace_dir, mname, S, cp_conf[c].name);
    if (rank == 0) remove(path);
    MPI_Barrier(MPI_COMM_WORLD);
  }
  FMCall(cp_bench_plan(ctx, mask, a, c, size > 1 && a->trace_dir[0] ? path : NULL, a->sh.seed, row));
  return FM_SUCCESS;
}

/*
 * FMBenchCPRunSingle_Private - the whole problem on one GPU (or one CPU rank): a mask and plan
 *   on self (a context over MPI_COMM_SELF on rank 0), timed the same way. Collective on self
 *   only. A failure (e.g. the problem does not fit on one GPU) leaves the rows undone; the
 *   caller reports it and goes on.
 */
FMErrorCode FMBenchCPRunSingle_Private(FMContext self, const CPArgs *a, const char *mname, int S, int mh, CPRow row[CP_NPASS])
{
  FMMask mask = NULL;
  FMErrorCode ierr;
  memset(row, 0, sizeof(CPRow) * CP_NPASS);
  ierr = FMBenchCPMakeMask_Private(self, mname, S, mh, a->sh.seed, &mask);
  if (!ierr) ierr = cp_bench_plan(self, mask, a, -1, NULL, a->sh.seed + 1, row);
  if (mask) {
    FMErrorCode e2 = FMMaskDestroy(&mask);
    if (!ierr) ierr = e2;
  }
  if (ierr) {
    for (int p = 0; p < CP_NPASS; p++) row[p].done = 0;
    return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr);
  }
  return FM_SUCCESS;
}
