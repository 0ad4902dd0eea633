/*
 * fmbench_cp.c - fmbench -cp: time the context-parallel forward of the distributed plan on the
 * CUDA backend against its baselines, in one run.
 *
 * For each mask and sequence length (batch 1, one sequence of S tokens, the library's builders
 * with a fixed seed, identical on every rank) three configurations of the same plan are timed:
 *   plan       the defaults: pruned, overlapped gather (FMPlanSetPrune/SetOverlap FM_TRUE)
 *   allgather  prune and overlap off: the unpruned, non-overlapped all-gather
 *   ring       FMPlanSetSchedule "ring": the Megatron-style ring
 * Each is its own plan: the unprefixed -fm_plan_* options (partition, route, chunk, transport;
 * defaults otherwise) are shared by the three, the configuration's settings come next, and then
 * the options under its prefix (-plan_fm_plan_*, -allgather_fm_plan_*, -ring_fm_plan_*; the
 * one-GPU plan reads -one_fm_plan_*), so nothing rewrites the options database. Plus one GPU:
 * rank 0 alone runs the whole problem on a context over MPI_COMM_SELF. Each configuration also
 * runs once more traced (FMPlanSetTrace) into DIR/<mask>_<S>_<config>.h5;
 * its summary is the library's own (FMTraceSummary_Private, kept in FMDistGetStats), the one
 * fmtrace prints for the saved file.
 * The command line is documented in the header comment of fmbench.c; doc/distributed.md
 * ("Benchmarking context parallelism: fmbench -cp") explains the columns.
 */
#include <flashmask/private/fmdist.h>
#include <flashmask/private/fmkernels.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* src/kernels/cuda.cu: uniform device values in [-amp, amp), never zeros */
FMErrorCode FMCudaFillRandom_Private(void *p, size_t n, FMDType t, unsigned long long seed, float amp, void *stream);
int FMBenchCP(int argc, char **argv);
FMErrorCode FMBenchCPSteps_Private(FMContext ctx, const char *type, int S, int mh, int H, int Hkv, int D, FMDType dt, unsigned long seed,
                                   int steps, int dev); /* fmbench_steps.c */

/* The mask builders: FMMaskTypeList less its last name, "bounds" (set by cp_parse). */
static const char *const *cp_masks;
static int cp_nmasks;

/* The three timed configurations: the settings of each one's plan, and its options prefix. */
#define CP_NCONF 3
typedef struct {
  const char *name, *prefix;
  FMBool prune, overlap;
  const char *schedule;
} CPConfig;
static const CPConfig cp_conf[CP_NCONF] = {{"plan", "plan_", FM_TRUE, FM_TRUE, "gather"},
                                           {"allgather", "allgather_", FM_FALSE, FM_FALSE, "gather"},
                                           {"ring", "ring_", FM_TRUE, FM_TRUE, "ring"}};

typedef struct {
  int use[32], seqlen[16], nseq; /* use: [cp_nmasks] */
  int H, Hkv, D, warm, reps, single;
  int steps; /* -steps N: time re-planning with a fresh mask every step instead (fmbench_steps.c) */
  FMDType dt;
  unsigned long seed;
  char csv[512], trace_dir[512];
  int dev; /* this rank's device (of the world context), used by every plan */
} CPArgs;

/* One row of the report: a configuration (or the one-GPU run) of one (mask, S). */
typedef struct {
  int done;                                      /* timed */
  double ms, tflops;
  double moved, allgather;                       /* bytes over all ranks (FMDistGetStats) */
  int traced;                                    /* the trace figures below are valid */
  double overlap, exposed_max, exposed_mean, imbalance;
} CPRow;

/* One (mask, S): the configurations, then the one-GPU run. */
typedef struct {
  const char *mask;
  int S;
  CPRow row[CP_NCONF + 1];
} CPGroup;

/*
 * cp_parse - read the -cp command line (the fmbench options that apply, plus -trace_dir and
 *   -single). Not collective; every rank parses the same argv. Unknown mask names are
 *   FM_ERR_ARG_WRONG.
 */
static FMErrorCode cp_parse(int argc, char **argv, CPArgs *a)
{
  char masks[1024] = "causal,causal_document,document,share_question", seqs[256] = "65536,131072", dts[16] = "bf16";
  char *tok, *save = NULL;
  memset(a, 0, sizeof(*a));
  FMCall(FMMaskTypeList(&cp_nmasks, &cp_masks));
  if (cp_nmasks > 0 && !strcmp(cp_masks[cp_nmasks - 1], FMMASKBOUNDS)) cp_nmasks--;
  FMCheck(cp_nmasks <= (int)(sizeof(a->use) / sizeof(a->use[0])), MPI_COMM_SELF, FM_ERR_LIB, "%d mask builders; fmbench -cp knows room for %d",
          cp_nmasks, (int)(sizeof(a->use) / sizeof(a->use[0])));
  a->dev = -1;
  a->H = 32;
  a->Hkv = -1;
  a->D = 128;
  a->warm = 2;
  a->reps = 5;
  a->single = 1;
  a->seed = 42;
  snprintf(a->trace_dir, sizeof(a->trace_dir), "fmbench_cp_traces");
  for (int i = 1; i + 1 < argc; i++) {
    const char *k = argv[i], *v = argv[i + 1];
    if (!strcmp(k, "-masks")) snprintf(masks, sizeof(masks), "%s", v);
    else if (!strcmp(k, "-seqlen")) snprintf(seqs, sizeof(seqs), "%s", v);
    else if (!strcmp(k, "-head_dim")) a->D = atoi(v);
    else if (!strcmp(k, "-heads")) a->H = atoi(v);
    else if (!strcmp(k, "-heads_kv")) a->Hkv = atoi(v);
    else if (!strcmp(k, "-dtype")) snprintf(dts, sizeof(dts), "%s", v);
    else if (!strcmp(k, "-warmup")) a->warm = atoi(v);
    else if (!strcmp(k, "-reps")) a->reps = atoi(v);
    else if (!strcmp(k, "-seed")) a->seed = strtoul(v, NULL, 10);
    else if (!strcmp(k, "-csv")) snprintf(a->csv, sizeof(a->csv), "%s", v);
    else if (!strcmp(k, "-trace_dir")) snprintf(a->trace_dir, sizeof(a->trace_dir), "%s", v);
    else if (!strcmp(k, "-single")) a->single = atoi(v);
    else if (!strcmp(k, "-steps")) a->steps = atoi(v);
    else continue;
    i++;
  }
  if (a->Hkv <= 0) a->Hkv = a->H;
  if (a->reps < 1) a->reps = 1;
  if (a->warm < 0) a->warm = 0;
  FMCheck(!strcmp(dts, "bf16") || !strcmp(dts, "fp16"), MPI_COMM_SELF, FM_ERR_ARG_WRONG, "-dtype is \"%s\"; expected bf16 or fp16", dts);
  a->dt = !strcmp(dts, "fp16") ? FM_DTYPE_FP16 : FM_DTYPE_BF16;
  FMCheck(a->H > 0 && a->H % a->Hkv == 0, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "-heads %d -heads_kv %d; expected heads a multiple of heads_kv",
          a->H, a->Hkv);
  if (!strcmp(masks, "all")) {
    for (int t = 0; t < cp_nmasks; t++) a->use[t] = 1;
  } else {
    for (tok = strtok_r(masks, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      int found = 0;
      for (int t = 0; t < cp_nmasks; t++)
        if (!strcmp(tok, cp_masks[t])) a->use[t] = found = 1;
      FMCheck(found, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "-masks: unknown mask \"%s\"; expected all or names among full, causal, ...", tok);
    }
  }
  save = NULL;
  for (tok = strtok_r(seqs, ",", &save); tok && a->nseq < 16; tok = strtok_r(NULL, ",", &save)) {
    a->seqlen[a->nseq] = atoi(tok);
    FMCheck(a->seqlen[a->nseq] > 0, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "-seqlen: \"%s\" is not a positive length", tok);
    a->nseq++;
  }
  return FM_SUCCESS;
}

/*
 * cp_plan_settings - the settings of configuration c's plan (c < 0: the one-GPU plan): the shared
 *   -fm_plan_* options, then the configuration's own settings and trace file (NULL: none), then
 *   the options under its prefix; the benchmark's shape last (its buffers are sized by it).
 *   Collective on the plan.
 */
static FMErrorCode cp_plan_settings(FMPlan plan, const CPArgs *a, int c, const char *trace)
{
  FMCall(FMPlanSetFromOptions(plan));
  if (c >= 0) {
    FMCall(FMPlanSetPrune(plan, cp_conf[c].prune));
    FMCall(FMPlanSetOverlap(plan, cp_conf[c].overlap));
    FMCall(FMPlanSetSchedule(plan, cp_conf[c].schedule));
  }
  FMCall(FMPlanSetTrace(plan, trace, FM_FALSE));
  FMCall(FMPlanSetOptionsPrefix(plan, c >= 0 ? cp_conf[c].prefix : "one_"));
  FMCall(FMPlanSetFromOptions(plan));
  FMCall(FMPlanSetShape(plan, 1, a->H, a->Hkv, a->D, a->dt));
  return FM_SUCCESS;
}

/*
 * cp_make_mask - the builder mask `type` of S x S with mh mask heads and the fixed seed, set up on
 *   ctx. Collective on ctx.
 */
static FMErrorCode cp_make_mask(FMContext ctx, const char *type, int S, int mh, unsigned long seed, FMMask *mask)
{
  FMCall(FMMaskCreate(ctx, mask));
  FMCall(FMMaskSetSizes(*mask, S, S, mh));
  FMCall(FMMaskSetType(*mask, type));
  FMCall(FMMaskSetSeed(*mask, seed));
  FMCall(FMMaskSetUp(*mask));
  return FM_SUCCESS;
}

static int cp_cmpd(const void *x, const void *y)
{
  double a = *(const double *)x, b = *(const double *)y;
  return (a > b) - (a < b);
}

/* Device tensors of one plan's local layout. */
typedef struct {
  void *q, *k, *v, *o;
  float *lse;
} CPBuf;

/* cp_buf_free - free what cp_buf_alloc allocated (NULL members are fine). Not collective. */
static void cp_buf_free(CPBuf *b)
{
  cudaFree(b->q);
  cudaFree(b->k);
  cudaFree(b->v);
  cudaFree(b->o);
  cudaFree(b->lse);
  memset(b, 0, sizeof(*b));
}

/*
 * cp_buf_alloc - allocate q, o [nl][H][D], k, v [nk][Hkv][D] and lse [H][nl] on the current
 *   device and fill q, k, v with random values (each rank its own stream of values, the same for
 *   every configuration). Not collective; on error what was allocated is freed.
 */
static FMErrorCode cp_buf_alloc(const CPArgs *a, int nl, int nk, unsigned long long seed, CPBuf *b)
{
  const size_t es = FMDTypeSize(a->dt), nq = (size_t)nl * a->H * a->D, nkv = (size_t)nk * a->Hkv * a->D;
  cudaError_t e = cudaSuccess;
  FMErrorCode ierr = FM_SUCCESS;
  memset(b, 0, sizeof(*b));
  if (nq) {
    if (e == cudaSuccess) e = cudaMalloc(&b->q, nq * es);
    if (e == cudaSuccess) e = cudaMalloc(&b->o, nq * es);
    if (e == cudaSuccess) e = cudaMalloc((void **)&b->lse, (size_t)nl * a->H * sizeof(float));
  }
  if (nkv) {
    if (e == cudaSuccess) e = cudaMalloc(&b->k, nkv * es);
    if (e == cudaSuccess) e = cudaMalloc(&b->v, nkv * es);
  }
  if (e != cudaSuccess) {
    cp_buf_free(b);
    (void)cudaGetLastError();
    FMRaise(MPI_COMM_SELF, FM_ERR_CUDA, "cudaMalloc of the local tensors (%d rows, %d keys, %.1f MB) failed: %s", nl, nk,
            (2.0 * (nq + nkv) * es + (double)nl * a->H * 4) / 1e6, cudaGetErrorString(e));
  }
  if (nq) ierr = FMCudaFillRandom_Private(b->q, nq, a->dt, seed * 3 + 1, 1.5f, NULL);
  if (!ierr && nkv) ierr = FMCudaFillRandom_Private(b->k, nkv, a->dt, seed * 3 + 2, 1.5f, NULL);
  if (!ierr && nkv) ierr = FMCudaFillRandom_Private(b->v, nkv, a->dt, seed * 3 + 3, 1.0f, NULL);
  if (!ierr && cudaDeviceSynchronize() != cudaSuccess) {
    (void)cudaGetLastError();
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_CUDA, "Filling the local tensors failed");
  }
  if (ierr) {
    cp_buf_free(b);
    return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr);
  }
  return FM_SUCCESS;
}

/*
 * cp_time - warm runs, then reps timed runs of FMPlanForward on comm's ranks; each timed run is
 *   bracketed by cudaDeviceSynchronize + MPI_Barrier and MPI_Wtime, its time is the maximum over
 *   the ranks, and *ms gets the median (the mean of the middle two for an even count).
 *   Collective on comm (the plan's ranks). A CUDA failure on any rank fails on every rank.
 */
static FMErrorCode cp_time(FMPlan plan, MPI_Comm comm, const CPBuf *b, int warm, int reps, double *ms)
{
  double *t;
  FMCall(FMMalloc(reps, &t));
  for (int w = 0; w < warm; w++) {
    FMErrorCode ierr = FMPlanForward(plan, b->q, b->k, b->v, b->o, b->lse);
    if (ierr) { free(t); return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr); }
  }
  for (int r = 0; r < reps; r++) {
    double loc[2] = {0, 0}, all[2], t0;
    FMErrorCode ierr;
    if (cudaDeviceSynchronize() != cudaSuccess) loc[1] = 1;
    MPI_Barrier(comm);
    t0 = MPI_Wtime();
    ierr = FMPlanForward(plan, b->q, b->k, b->v, b->o, b->lse);
    if (ierr) { free(t); return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr); }
    if (cudaDeviceSynchronize() != cudaSuccess) loc[1] = 1;
    loc[0] = MPI_Wtime() - t0;
    if (MPI_Allreduce(loc, all, 2, MPI_DOUBLE, MPI_MAX, comm) != MPI_SUCCESS) { free(t); FMRaise(MPI_COMM_SELF, FM_ERR_MPI, "MPI_Allreduce of the run times failed"); }
    if (all[1] != 0) {
      cudaError_t e = cudaGetLastError();
      free(t);
      FMRaise(MPI_COMM_SELF, FM_ERR_CUDA, "cudaDeviceSynchronize after FMPlanForward failed on some rank (here: %s)", cudaGetErrorString(e));
    }
    t[r] = all[0] * 1e3;
  }
  qsort(t, reps, sizeof(double), cp_cmpd);
  *ms = reps % 2 ? t[reps / 2] : 0.5 * (t[reps / 2 - 1] + t[reps / 2]);
  free(t);
  return FM_SUCCESS;
}

/*
 * cp_bench_plan - set up the plan of configuration c (c < 0: the one-GPU plan; trace: its trace
 *   file or NULL, cp_plan_settings) of mask on ctx, allocate
 *   and fill its local tensors on this rank's device (a->dev, made current first), time it (cp_time) and, on several ranks,
 *   sum FMDistGetStats over the ranks. Collective on ctx. moved / allgather may be NULL.
 *   stats      out (may be NULL; several ranks only): this rank's FMDistGetStats after the runs,
 *              with the trace summary of the last run when -fm_trace was set
 *   fill_seed  base of the random inputs (the rank is mixed in)
 */
static FMErrorCode cp_bench_plan(FMContext ctx, FMMask mask, const CPArgs *a, int c, const char *trace, int warm, int reps,
                                 unsigned long long fill_seed, double *ms, double *flops, double *moved, double *allgather, FMDistStats *stats)
{
  MPI_Comm comm;
  FMPlan plan = NULL;
  CPBuf b;
  int nl = 0, nk = 0, size, rank;
  FMErrorCode ierr;

  memset(&b, 0, sizeof(b));
  FMCall(FMContextGetComm(ctx, &comm));
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  /* one device per process: the world context's (the one-GPU context runs there too) */
  if (a->dev >= 0) FMCallCUDA(cudaSetDevice(a->dev));
  FMCall(FMPlanCreate(ctx, &plan));
  ierr = FMPlanSetMask(plan, mask);
  if (!ierr) ierr = cp_plan_settings(plan, a, c, trace);
  if (!ierr) ierr = FMPlanSetUp(plan);
  if (!ierr) ierr = FMPlanGetLocalRows(plan, &nl, NULL);
  if (!ierr) ierr = size > 1 ? FMPlanGetLocalKeys(plan, &nk, NULL) : FMMaskGetSizes(mask, NULL, &nk, NULL);
  if (!ierr) ierr = cp_buf_alloc(a, nl, nk, fill_seed * 1000003ull + (unsigned long long)rank * 7919ull, &b);
  ierr = FMAgreeCode(comm, ierr);
  if (!ierr) ierr = cp_time(plan, comm, &b, warm, reps, ms);
  if (!ierr) ierr = FMPlanGetFlops(plan, flops);
  if (!ierr && size > 1 && stats) ierr = FMDistGetStats(plan, stats);
  if (!ierr && size > 1 && (moved || allgather)) {
    FMDistStats st;
    double loc[2] = {0, 0}, tot[2];
    ierr = FMDistGetStats(plan, &st);
    if (!ierr) {
      loc[0] = st.sent_bytes[0] + st.sent_bytes[1];
      loc[1] = st.allgather_bytes;
    }
    ierr = FMAgreeCode(comm, ierr);
    if (!ierr && MPI_Allreduce(loc, tot, 2, MPI_DOUBLE, MPI_SUM, comm) != MPI_SUCCESS)
      ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_MPI, "MPI_Allreduce of the byte counts failed");
    if (!ierr && moved) *moved = tot[0];
    if (!ierr && allgather) *allgather = tot[1];
  }
  cp_buf_free(&b);
  {
    FMErrorCode e2 = FMPlanDestroy(&plan);
    if (!ierr) ierr = e2;
  }
  if (ierr) return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr);
  return FM_SUCCESS;
}

/*
 * cp_run_config - configuration c of one (mask, S): time it, then (trace_dir set, several ranks)
 *   run it once more traced into DIR/<mask>_<S>_<config>.h5 and keep the library's summary.
 *   Collective on ctx.
 */
static FMErrorCode cp_run_config(FMContext ctx, FMMask mask, const CPArgs *a, const char *mname, int S, int c, CPRow *row)
{
  int size, rank;
  double flops = 0, ms = 0, dummy;
  FMErrorCode ierr;
  char path[1200];

  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  memset(row, 0, sizeof(*row));
  ierr = cp_bench_plan(ctx, mask, a, c, NULL, a->warm, a->reps, a->seed, &ms, &flops, &row->moved, &row->allgather, NULL);
  if (!ierr) {
    row->done = 1;
    row->ms = ms;
    row->tflops = flops / (ms * 1e-3) / 1e12;
  }
  if (!ierr && size > 1 && a->trace_dir[0]) {
    snprintf(path, sizeof(path), "%s/%s_%d_%s.h5", a->trace_dir, mname, S, cp_conf[c].name);
    if (rank == 0) remove(path);
    MPI_Barrier(MPI_COMM_WORLD);
    FMDistStats st;
    ierr = cp_bench_plan(ctx, mask, a, c, path, 1, 1, a->seed, &dummy, &dummy, NULL, NULL, &st);
    if (!ierr && st.traced) { /* the library's summary of the traced run (the file holds its events) */
      row->traced = 1;
      row->overlap = st.overlap_efficiency;
      row->exposed_max = st.exposed_max;
      row->exposed_mean = st.exposed_mean;
      row->imbalance = st.imbalance;
    }
  }
  if (ierr) return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr);
  return FM_SUCCESS;
}

/*
 * cp_run_single - the whole problem on one GPU: a mask and plan on self (a context over
 *   MPI_COMM_SELF on rank 0), timed the same way. Collective on self only. A failure (e.g. the
 *   problem does not fit on one GPU) leaves row->done = 0; the caller reports it and goes on.
 */
static FMErrorCode cp_run_single(FMContext self, const CPArgs *a, const char *mname, int S, int mh, CPRow *row)
{
  FMMask mask = NULL;
  double ms = 0, flops = 0;
  FMErrorCode ierr;
  memset(row, 0, sizeof(*row));
  ierr = cp_make_mask(self, mname, S, mh, a->seed, &mask);
  if (!ierr) ierr = cp_bench_plan(self, mask, a, -1, NULL, a->warm, a->reps, a->seed + 1, &ms, &flops, NULL, NULL, NULL);
  if (!ierr) {
    row->done = 1;
    row->ms = ms;
    row->tflops = flops / (ms * 1e-3) / 1e12;
  }
  if (mask) {
    FMErrorCode e2 = FMMaskDestroy(&mask);
    if (!ierr) ierr = e2;
  }
  if (ierr) return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr);
  return FM_SUCCESS;
}

/* cp_ratio - base / x, or 0 when either is missing. */
static double cp_ratio(const CPRow *base, const CPRow *x) { return base->done && x->done && x->ms > 0 ? base->ms / x->ms : 0; }

/* cp_print_row - one line of the per-configuration table (rank 0). */
static void cp_print_row(const CPGroup *g, int c, int P)
{
  const CPRow *r = &g->row[c];
  const char *name = c < CP_NCONF ? cp_conf[c].name : "1-GPU";
  char ms[32] = "-", tf[32] = "-", ov[32] = "-", ex[32] = "-", mv[32] = "-", ag[32] = "-", pc[32] = "-";
  if (r->done) {
    snprintf(ms, sizeof(ms), "%.3f", r->ms);
    snprintf(tf, sizeof(tf), "%.1f", r->tflops);
  }
  if (r->traced) {
    snprintf(ov, sizeof(ov), "%.3f", r->overlap);
    snprintf(ex, sizeof(ex), "%.3f", r->exposed_max * 1e3);
  }
  if (r->done && c < CP_NCONF && P > 1) {
    snprintf(mv, sizeof(mv), "%.1f", r->moved / 1e6);
    snprintf(ag, sizeof(ag), "%.1f", r->allgather / 1e6);
    if (r->allgather > 0) snprintf(pc, sizeof(pc), "%.1f%%", 100.0 * r->moved / r->allgather);
  }
  printf("%-22s %7d %-9s %10s %8s %7s %10s %11s %11s %7s\n", g->mask, g->S, name, ms, tf, ov, ex, mv, ag, pc);
  fflush(stdout);
}

/* cp_csv_group - the rows of one (mask, S) in the CSV file (rank 0). */
static void cp_csv_group(FILE *fp, const CPGroup *g, const CPArgs *a, int P)
{
  const double s_ag = cp_ratio(&g->row[1], &g->row[0]), s_ring = cp_ratio(&g->row[2], &g->row[0]), s_one = cp_ratio(&g->row[3], &g->row[0]);
  if (!fp) return;
  for (int c = 0; c <= CP_NCONF; c++) {
    const CPRow *r = &g->row[c];
    if (!r->done) continue;
    fprintf(fp, "%s,%d,%s,%d,1,%d,%d,%d,%s,%.4f,%.2f,", g->mask, g->S, c < CP_NCONF ? cp_conf[c].name : "1gpu", c < CP_NCONF ? P : 1,
            a->H, a->Hkv, a->D, FMDTypeName(a->dt), r->ms, r->tflops);
    if (r->traced) fprintf(fp, "%.4f,%.4f,%.4f,%.4f,", r->overlap, r->exposed_max * 1e3, r->exposed_mean * 1e3, r->imbalance);
    else fprintf(fp, ",,,,");
    if (c < CP_NCONF && P > 1) fprintf(fp, "%.0f,%.0f,", r->moved, r->allgather);
    else fprintf(fp, ",,");
    if (c == 0) {
      if (s_ag > 0) fprintf(fp, "%.3f", s_ag);
      fprintf(fp, ",");
      if (s_ring > 0) fprintf(fp, "%.3f", s_ring);
      fprintf(fp, ",");
      if (s_one > 0) fprintf(fp, "%.3f", s_one);
      fprintf(fp, "\n");
    } else {
      fprintf(fp, ",,\n");
    }
  }
  fflush(fp);
}

/* cp_fmt_ms / cp_fmt_x - a time or a speedup, "-" when missing. */
static const char *cp_fmt_ms(char *buf, size_t n, const CPRow *r)
{
  if (r->done) snprintf(buf, n, "%.3f", r->ms);
  else snprintf(buf, n, "-");
  return buf;
}
static const char *cp_fmt_x(char *buf, size_t n, double x)
{
  if (x > 0) snprintf(buf, n, "%.2fx", x);
  else snprintf(buf, n, "-");
  return buf;
}

/* cp_print_summary - the compact table at the end (rank 0). */
static void cp_print_summary(const CPGroup *g, int n)
{
  printf("\nsummary (ms; speedup = baseline ms / plan ms; overlap = overlap efficiency of plan)\n");
  printf("%-22s %7s %10s %10s %10s %10s %9s %9s %9s %7s\n", "mask", "seqlen", "plan", "allgather", "ring", "1-GPU", "vs_allg", "vs_ring",
         "vs_1GPU", "overlap");
  for (int i = 0; i < n; i++) {
    char b[8][32];
    const CPRow *r = g[i].row;
    if (r[0].traced) snprintf(b[7], sizeof(b[7]), "%.3f", r[0].overlap);
    else snprintf(b[7], sizeof(b[7]), "-");
    printf("%-22s %7d %10s %10s %10s %10s %9s %9s %9s %7s\n", g[i].mask, g[i].S, cp_fmt_ms(b[0], 32, &r[0]), cp_fmt_ms(b[1], 32, &r[1]),
           cp_fmt_ms(b[2], 32, &r[2]), cp_fmt_ms(b[3], 32, &r[3]), cp_fmt_x(b[4], 32, cp_ratio(&r[1], &r[0])),
           cp_fmt_x(b[5], 32, cp_ratio(&r[2], &r[0])), cp_fmt_x(b[6], 32, cp_ratio(&r[3], &r[0])), b[7]);
  }
  fflush(stdout);
}

/*
 * cp_devices - check that every rank sees a GPU and print where each rank runs (rank 0).
 *   Collective on MPI_COMM_WORLD. *ok = 0 on every rank when some rank has no device.
 */
static FMErrorCode cp_devices(int *ok, char *name, size_t len)
{
  int ndev = 0, have, all, rank, size, cur = 0;
  FMCall(FMCudaDeviceCount(&ndev));
  have = ndev > 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  FMCallMPI(MPI_Allreduce(&have, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  *ok = all;
  if (!all) {
    int nmiss = 0;
    FMCallMPI(MPI_Reduce(&have, &nmiss, 1, MPI_INT, MPI_SUM, 0, MPI_COMM_WORLD));
    if (rank == 0)
      fprintf(stderr,
              "fmbench -cp: no CUDA device is visible on %d of %d rank(s); the context-parallel benchmark runs the CUDA backend on "
              "every rank (one GPU per rank, or ranks sharing GPUs with -fm_plan_transport mpi)\n",
              size - nmiss, size);
    return FM_SUCCESS;
  }
  snprintf(name, len, "?");
  if (cudaGetDevice(&cur) == cudaSuccess) FMCall(FMCudaDeviceInfo(cur, name, len, NULL, 0, NULL));
  return FM_SUCCESS;
}

/*
 * cp_trace_dir - create the trace directory on rank 0 (one level) and agree that it is a
 *   directory. Collective on MPI_COMM_WORLD. An empty dir (or "none") turns tracing off.
 */
static FMErrorCode cp_trace_dir(CPArgs *a)
{
  int rank, ok = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (!strcmp(a->trace_dir, "none")) a->trace_dir[0] = '\0';
#if !FM_HAVE_HDF5
  if (a->trace_dir[0] && rank == 0) fprintf(stderr, "fmbench -cp: this build has no HDF5, so no traces (overlap columns stay empty)\n");
  a->trace_dir[0] = '\0';
#endif
  if (!a->trace_dir[0]) return FM_SUCCESS;
  if (rank == 0) {
    struct stat sb;
    if (mkdir(a->trace_dir, 0755) != 0 && errno != EEXIST) ok = 0;
    if (ok && (stat(a->trace_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))) ok = 0;
  }
  FMCallMPI(MPI_Bcast(&ok, 1, MPI_INT, 0, MPI_COMM_WORLD));
  FMCheck(ok, MPI_COMM_SELF, FM_ERR_FILE, "-trace_dir %s: cannot create the directory (or it is not one)", a->trace_dir);
  return FM_SUCCESS;
}

/*
 * cp_main - the benchmark proper (see the file comment). Collective on MPI_COMM_WORLD.
 *   *rc out: the program's exit status (77 when some rank has no GPU).
 */
static FMErrorCode cp_main(int argc, char **argv, int *rc)
{
  CPArgs a;
  FMContext ctx = NULL, self = NULL;
  CPGroup *groups = NULL;
  FILE *fcsv = NULL;
  int rank, size, ok = 0, ngroups = 0, dev = -1;
  char gpu[256] = "";
  FMErrorCode ierr = FM_SUCCESS;

  *rc = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  FMAgree(MPI_COMM_WORLD, cp_parse(argc, argv, &a));
  FMCall(cp_devices(&ok, gpu, sizeof(gpu)));
  if (!ok) {
    *rc = 77;
    return FM_SUCCESS;
  }
  FMCall(cp_trace_dir(&a));
  FMCall(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMCall(FMContextSetFromOptions(ctx));
  FMCall(FMContextSetBackend(ctx, FM_BACKEND_CUDA)); /* device pointers: the CUDA backend whatever -fm_backend says */
  FMCall(FMContextSetUp(ctx));
  FMCall(FMContextGetDevice(ctx, &dev));
  a.dev = dev;
  if (rank == 0 && a.single && size > 1) {
    /* the one-GPU baseline (cp_bench_plan makes each context's device current before use) */
    ierr = FMContextCreate(MPI_COMM_SELF, &self);
    if (!ierr) ierr = FMContextSetBackend(self, FM_BACKEND_CUDA);
    if (!ierr) ierr = FMContextSetUp(self);
    if (ierr) {
      fprintf(stderr, "fmbench -cp: no one-GPU context on rank 0; the 1-GPU column stays empty\n");
      if (self) FMContextDestroy(&self);
      self = NULL;
      ierr = FM_SUCCESS;
    }
  }
  {
    int *devs = NULL;
    if (rank == 0) devs = (int *)malloc(sizeof(int) * size);
    MPI_Gather(&dev, 1, MPI_INT, devs, 1, MPI_INT, 0, MPI_COMM_WORLD);
    if (rank == 0) {
      printf("fmbench -cp: %d rank(s) on %s; devices by rank:", size, gpu);
      for (int r = 0; r < size && devs; r++) printf(" %d", devs[r]);
      printf("; %s, batch 1, H = %d (kv %d), d = %d; %d warm-up + %d timed runs, median of the max over ranks\n", FMDTypeName(a.dt), a.H,
             a.Hkv, a.D, a.warm, a.reps);
      printf("configs: plan = pruned overlapped gather, allgather = -fm_plan_prune 0 -fm_plan_overlap 0, ring = -fm_plan_schedule ring; "
             "partition/route/chunk/transport from the options (defaults otherwise); traces in %s\n",
             a.trace_dir[0] ? a.trace_dir : "(none)");
      if (size == 1) printf("note: one rank: the three configurations are the single-GPU kernel; run on 2 or more ranks\n");
      printf("%-22s %7s %-9s %10s %8s %7s %10s %11s %11s %7s\n", "mask", "seqlen", "config", "ms", "TFLOP/s", "overlap", "exposed_ms",
             "moved_MB", "allgath_MB", "moved%");
      fflush(stdout);
    }
    free(devs);
  }
  if (rank == 0 && a.csv[0]) {
    fcsv = fopen(a.csv, "w");
    if (!fcsv) fprintf(stderr, "fmbench -cp: cannot write %s; no CSV\n", a.csv);
    else
      fprintf(fcsv, "mask,seqlen,config,ranks,batch,heads,heads_kv,head_dim,dtype,ms,tflops,overlap_efficiency,exposed_max_ms,exposed_mean_ms,"
                    "compute_imbalance,bytes_moved,bytes_allgather,speedup_vs_allgather,speedup_vs_ring,speedup_vs_1gpu\n");
  }
  ierr = FMCalloc((size_t)a.nseq * cp_nmasks + 1, &groups);
  for (int si = 0; !ierr && si < a.nseq; si++)
    for (int t = 0; !ierr && t < cp_nmasks; t++) {
      const int S = a.seqlen[si], mh = !strcmp(cp_masks[t], FMMASKRANDOMEVICTION) ? a.Hkv : 1; /* random eviction differs per head */
      CPGroup *g;
      FMMask mask = NULL;
      if (!a.use[t]) continue;
      if (a.steps > 0) { /* -steps: the update path's cost instead of the configurations */
        ierr = FMBenchCPSteps_Private(ctx, cp_masks[t], S, mh, a.H, a.Hkv, a.D, a.dt, a.seed, a.steps, a.dev);
        continue;
      }
      g = &groups[ngroups++];
      g->mask = cp_masks[t];
      g->S = S;
      ierr = cp_make_mask(ctx, cp_masks[t], S, mh, a.seed, &mask);
      for (int c = 0; !ierr && c < CP_NCONF; c++) {
        ierr = cp_run_config(ctx, mask, &a, cp_masks[t], S, c, &g->row[c]);
        if (!ierr && rank == 0) cp_print_row(g, c, size);
      }
      if (mask) {
        FMErrorCode e2 = FMMaskDestroy(&mask);
        if (!ierr) ierr = e2;
      }
      if (ierr) break;
      if (size == 1 && a.single) {
        g->row[CP_NCONF] = g->row[0]; /* one rank: the plan is the one-GPU run */
      } else if (rank == 0 && self) {
        if (cp_run_single(self, &a, cp_masks[t], S, mh, &g->row[CP_NCONF]))
          fprintf(stderr, "fmbench -cp: the one-GPU run of %s at %d failed (see above); its column stays empty\n", cp_masks[t], S);
      }
      MPI_Barrier(MPI_COMM_WORLD);
      if (rank == 0) {
        char x[3][32];
        if (a.single) cp_print_row(g, CP_NCONF, size);
        printf("  speedup of plan: vs allgather %s, vs ring %s, vs 1 GPU %s\n", cp_fmt_x(x[0], 32, cp_ratio(&g->row[1], &g->row[0])),
               cp_fmt_x(x[1], 32, cp_ratio(&g->row[2], &g->row[0])), cp_fmt_x(x[2], 32, cp_ratio(&g->row[3], &g->row[0])));
        fflush(stdout);
        cp_csv_group(fcsv, g, &a, size);
      }
    }
  if (!ierr && rank == 0 && a.steps <= 0) cp_print_summary(groups, ngroups);
  if (fcsv) fclose(fcsv);
  free(groups);
  if (self) {
    FMErrorCode e2 = FMContextDestroy(&self);
    if (!ierr) ierr = e2;
  }
  {
    FMErrorCode e2 = FMContextDestroy(&ctx);
    if (!ierr) ierr = e2;
  }
  if (ierr) return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr);
  *rc = 0;
  return FM_SUCCESS;
}

/*
 * FMBenchCP - entry point of fmbench -cp, called by fmbench's main after FMInitialize.
 *   Collective on MPI_COMM_WORLD. Returns the exit status: 0 on success, 77 when some rank has
 *   no GPU (with a message), 1 on an error (the library printed it).
 */
int FMBenchCP(int argc, char **argv)
{
  int rc = 1;
  if (cp_main(argc, argv, &rc) != FM_SUCCESS) rc = 1;
  return rc;
}
