/*
 * fmbench - time the CUDA forward and backward on the 12 FlashMask benchmark masks.
 *
 *   mpiexec -n 1 fmbench -masks all -seqlen 8192,32768 -head_dim 128 -heads 32 -tokens 131072 -pass fwd,bwd
 *
 * Per mask and sequence length: batch = tokens / seqlen; random bf16 (or fp16) Q, K, V (and dO)
 * on the device; one plan (FMPlanCreate ... FMPlanSetUp, the -fm_plan_* options apply) per
 * mask; one forward (its O and LSE feed the backward, and it tells the path), then per pass a
 * warm-up and -reps timed runs with CUDA events on the plan's stream. The passes (-pass):
 *   fwd      FMPlanForward alone (the default)
 *   bwd      FMPlanBackward alone (-bwd), on the O and LSE of that one forward
 *   fwdbwd   FMPlanForward then FMPlanBackward in every run (-fwdbwd)
 * Each timed line ends with the kernel that ran: "sm90 (wide)", "(grid)" or "(persistent)" for
 * the forward (the Hopper kernel the forward took), the step rows and dQ's writes for the
 * backward ("sm90 (80-row steps)"), both for fwdbwd.
 * The median is reported as ms and as TFLOP/s under the FlashMask convention, one definition
 * for every pass and every peer (share/bench/peers.py): forward FLOPs = 4 B H S^2 d (1 - rho)
 * (FMPlanGetFlops), rho = fraction of 128 x 128 tiles fully masked; backward = 2.5 x forward;
 * forward + backward = 3.5 x forward; beside it the exact element density. The exact bounds
 * used are written to -o (HDF5, /masks/<mask>_<seqlen> with datasets lts, lte, uts, ute
 * int32[mask_heads][seqlen_k], [mask_batch][mask_heads][seqlen_k] with -mask_batch, and
 * attributes seqlen_q, seqlen_k, causal, type, mask_heads, mask_batch) for share/bench/peers.py,
 * and the results to -csv (columns mask,seqlen,batch,heads,head_dim,ms,tflops,block_sparsity,
 * density,path,mask_batch,pass,setup_ms,setup_bounds_ms: one row per mask, length and pass;
 * setup_ms is what a new mask of the same type costs on the same plan, FMMaskSetUp with a new
 * seed (our builder's generation included) + FMPlanSetUp's update path + the upload + the FLOP
 * count the first forward on a new mask computes (exact block sparsity), median over
 * max(reps, 10); setup_bounds_ms the same for bounds of the user's own: a mask of type "bounds"
 * given new vectors for every sample and head in one FMMaskSetAllBounds call (made beforehand by
 * the builder), then FMMaskSetUp + FMPlanSetUp; both are also printed beside the forward's time).
 * Options:
 *   -masks all|name,name,...   -seqlen S,S,...   -head_dim d   -heads H   -heads_kv Hkv
 *   -tokens N   -dtype bf16|fp16   -warmup n   -warmup_s T   -reps n   -seed s   -o file   -csv file
 *   -pass fwd,bwd,fwdbwd   the passes to time (default fwd); -bwd and -fwdbwd add one
 *   -mask_batch B   per-sample masks: batch B (instead of tokens / seqlen) and every mask with
 *             mask_batch B (FMMaskSetBatch), so the random builders (document, ...) pack
 *             every sample differently (sample b from seed + b)
 *   -dryrun   build, measure and save the masks only (no GPU needed; for checking a build)
 *   -visits   beside each mask a line "visits": the query rows per step the Hopper backward takes
 *             for it on an sm_90 GPU at -head_dim (the plan's rule, -fm_sm90_bwd_rows as given),
 *             then for 64-, 80- and 128-row steps the backward's work items (key blocks x kv
 *             heads x batch) that visit anything, and its visited unmasked and partial steps over
 *             the whole batch (the tile classes of the mask's summaries; no GPU needed). The
 *             input of share/bench/bwd/step_fit.py, which fits a mask's backward time to them
 *   -help     these options and the library's, exit 0 (no GPU needed)
 * They are read from the options database, as the library's (so FM_OPTIONS and -options_file
 * give them too, and numbers are read whole: 12abc is refused, 128k is 131072), and checked
 * against what a CUDA plan takes before anything runs: positive lengths, -tokens, -heads and
 * -mask_batch, -heads a multiple of -heads_kv, -head_dim a multiple of 8 from 8 to 256, -dtype
 * bf16 or fp16, -warmup >= 0, -reps >= 1; a bad value is an error naming the option, on every
 * rank, and exit status 1.
 * The masks are the library's builders (FMMaskSetType, -seed); the kernel options of the
 * context apply (-fm_cuda_fallback times nothing: passes on a fallback path are reported, not
 * timed).
 *
 * Context parallelism (-cp; src/bin/fmbench_cp.c):
 *
 *   mpiexec -n 2 fmbench -cp -masks causal,causal_document,document,share_question \
 *           -seqlen 65536,131072 -heads 32 -heads_kv 32 -head_dim 128 -reps 5 -warmup 2 \
 *           -pass fwd,fwdbwd -configs plan,allgather,ring -csv cp.csv -trace_dir DIR
 *     (-label TEXT tags the CSV rows; -fm_backend cpu runs it on host memory, for tests)
 *
 *   mpiexec -n 2 fmbench -cp -steps 10 -masks causal_document -seqlen 131072 -single 0
 *     re-plans one cp plan 10 times, each step with a new packing (the update path of
 *     FMPlanSetUp; src/bin/fmbench_steps.c): full set-up against the medians of the mask set-up,
 *     the update and the forward, max over ranks.
 *
 * For each mask and sequence length (batch 1, one sequence of S tokens, the library's builders
 * with -seed, identical on every rank) it times, on the CUDA backend over all ranks, the
 * distributed plan in three configurations: plan (the defaults: pruned, overlapped gather),
 * allgather (-fm_plan_prune 0 -fm_plan_overlap 0) and ring (-fm_plan_schedule ring); partition,
 * route, chunk and transport come from the -fm_plan_* options (defaults otherwise) and are shared
 * by the three. Each rank fills its local Q, K, V with random values; -warmup runs, then -reps
 * runs, each between MPI_Barrier + cudaDeviceSynchronize and MPI_Wtime, the time of a run being
 * the maximum over the ranks; the median is reported, as ms and TFLOP/s of the global forward
 * (FMPlanGetFlops, the FlashMask convention). One extra run per configuration with -fm_trace
 * DIR/<mask>_<S>_<config>.h5 gives the overlap efficiency and the exposed communication (the
 * fmtrace summary); bytes moved are the sum over ranks of the bytes sent (FMDistGetStats), beside
 * the unpruned all-gather's. A 1-GPU row times the whole problem on rank 0 alone (a context on
 * MPI_COMM_SELF). Then the speedups of plan over allgather, ring and one GPU, and at the end a
 * summary table. Options: -masks -seqlen -heads -heads_kv -head_dim -dtype -warmup -reps -seed
 * -csv as above, -trace_dir DIR (default fmbench_cp_traces; none: no traces), -single 0 (skip the
 * one-GPU baseline). Exit status 77, with a message, when some rank sees no GPU.
 */
#include <flashmask.h>
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include <flashmask/private/planimpl.h> /* FMSm90ChooseBwdRows_Private (-visits) */
#include <flashmask/private/fmbwd.h>    /* FMGpuBwdStepRows (-visits) */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fmbench_cp.h"

extern int FMCudaLastPath_Private;
/* fmbench_fill.cu */
FMErrorCode FMCudaFillRandom_Private(void *p, size_t n, FMDType t, unsigned long long seed, float amp, void *stream);

#define CK(expr)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (expr);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "fmbench: %s failed: %s\n", #expr, cudaGetErrorString(e_));                  \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
#define FC(expr)                                                                                   \
  do {                                                                                             \
    if ((expr) != FM_SUCCESS) {                                                                    \
      fprintf(stderr, "fmbench: %s failed\n", #expr);                                              \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)



/* The passes fmbench times (-pass), as bits of Args.passes and indices of pass_name. */
enum { PASS_FWD = 0, PASS_BWD = 1, PASS_FWDBWD = 2, NPASS = 3 };
static const char *const pass_name[NPASS] = {"fwd", "bwd", "fwdbwd"};

/* FLOPs of one run of a pass under the FlashMask convention, from the forward's (FMPlanGetFlops):
   the backward counts 2.5 forwards, forward + backward 3.5. The one definition: compare.sh gives
   every peer these FLOPs (share/bench/compare_table.py: our TFLOP/s x our ms over the peer's ms),
   and share/bench/bwd/bwd_bench.cu counts the same. */
static double pass_flops(double fwd_flops, int pass)
{
  return fwd_flops * (pass == PASS_FWD ? 1.0 : pass == PASS_BWD ? 2.5 : 3.5);
}

/* The device tensors of one sequence length (dout, dq, dk, dv only when a backward is timed). */
typedef struct {
  void *q, *k, *v, *o, *dout, *dq, *dk, *dv, *e0, *e1;
  float *lse;
} Bufs;

static void run_pass(FMPlan plan, int pass, const Bufs *b)
{
  if (pass != PASS_BWD) FC(FMPlanForward(plan, b->q, b->k, b->v, b->o, b->lse));
  if (pass != PASS_FWD) FC(FMPlanBackward(plan, b->q, b->k, b->v, b->o, b->lse, b->dout, b->dq, b->dk, b->dv));
}

/* Warm-up (warm runs, then runs back to back for at least warm_s seconds: the power-capped
   steady state a training run sees, not a short burst at boost clocks), then reps event-timed
   runs of the pass on the default stream; the median in ms. */
static float time_pass(FMPlan plan, int pass, const Bufs *b, int warm, double warm_s, int reps)
{
  double *ms = (double *)malloc(sizeof(double) * reps), med;
  for (int w = 0; w < warm; w++) run_pass(plan, pass, b);
  if (warm_s > 0) {
    const double t0 = FMTime();
    do {
      for (int w = 0; w < 4; w++) run_pass(plan, pass, b);
      FC(FMCudaStreamSynchronize(NULL));
    } while (FMTime() - t0 < warm_s);
  }
  for (int r = 0; r < reps; r++) {
    double sec = 0;
    FC(FMCudaEventRecord(b->e0, NULL));
    run_pass(plan, pass, b);
    FC(FMCudaEventRecord(b->e1, NULL));
    FC(FMCudaEventSynchronize(b->e1));
    FC(FMCudaEventElapsed(b->e0, b->e1, &sec));
    ms[r] = 1e3 * sec;
  }
  med = FMBenchMedian_Private(ms, reps);
  free(ms);
  return (float)med;
}

/*
 * What a training step pays for a new mask on the same plan (the update path, as a data loader's
 * new packing): FMMaskSetUp of the mask with a new seed, then FMPlanSetUp (the bounds localized,
 * summaries and lists rebuilt and uploaded), the device synchronized, and under -fm_log_view the
 * FLOP count that the first forward then makes for the log; the median over reps, in ms.
 * part[0..3]: the medians of its four pieces, the host in FMMaskSetUp, the host in FMPlanSetUp
 * (up to its return: the update is then queued on the stream), the host in FMPlanGetFlops (the
 * exact block sparsity, from the host's block summaries; timed always, in the whole only under
 * -fm_log_view) and the wait for the device after FMPlanSetUp (the upload and prepass not yet
 * done by then).
 */
/* One timed new-mask step from t0 (the caller changed m since): FMMaskSetUp, FMPlanSetUp, the
   device's wait, then the FLOP count, into t[r], t[reps + r], ... (the whole and its four pieces;
   r < 0: untimed). */
static void setup_step(FMMask m, FMPlan plan, double t0, double *t, int reps, int r)
{
  double t1, t2, t3, t4, fl;
  FMBool logged;
  FC(FMMaskSetUp(m));
  t1 = FMTime();
  FC(FMPlanSetUp(plan));
  t2 = FMTime();
  FC(FMCudaStreamSynchronize(NULL));
  t3 = FMTime();
  FC(FMPlanGetFlops(plan, &fl));
  t4 = FMTime();
  FC(FMLogViewRequested_Private(&logged));
  if (r < 0) return;
  t[r] = 1e3 * ((logged ? t4 : t3) - t0);
  t[reps + r] = 1e3 * (t1 - t0);
  t[2 * reps + r] = 1e3 * (t2 - t1);
  t[3 * reps + r] = 1e3 * (t4 - t3);
  t[4 * reps + r] = 1e3 * (t3 - t2);
}

/* The median of setup_step's wholes, its pieces' medians into part; frees t. */
static double setup_medians(double *t, int reps, double part[4])
{
  const double med = FMBenchMedian_Private(t, reps);
  for (int k = 0; k < 4; k++) part[k] = FMBenchMedian_Private(t + (k + 1) * reps, reps);
  free(t);
  return med;
}

static double time_setup(FMPlan plan, FMMask m, unsigned long seed, int reps, double part[4])
{
  double *t = (double *)malloc(sizeof(double) * reps * 5);
  /* r = -1: one untimed set-up first (the first after the timed passes finds cold caches) */
  for (int r = -1; r < reps; r++) {
    FC(FMMaskSetSeed(m, seed + 1000 + (unsigned long)r));
    setup_step(m, plan, FMTime(), t, reps, r);
  }
  return setup_medians(t, reps, part);
}

/*
 * The same for bounds of the user's own (a training step whose data loader computes them): a
 * mask of type "bounds" with m's sizes and causal flag on a second plan, given each call the
 * vectors m carries for every sample and head in one FMMaskSetAllBounds call (three sets of
 * [mask_batch][mask_heads][seqlen_k] arrays made beforehand by m's builder with other seeds; m
 * is changed), then FMMaskSetUp and FMPlanSetUp, the device synchronized. part[0..3] as in
 * time_setup, part[0] with the FMMaskSetAllBounds call. Returns the median in ms.
 */
static double time_setup_bounds(FMContext ctx, FMMask m, int B, int H, int Hkv, int D, FMDType dt, unsigned long seed, int reps,
                                double part[4])
{
  enum { K = 3 };
  int Sq, Sk, mh, mb;
  FMBool causal = FM_FALSE;
  FMMask u;
  FMPlan plan;
  int32_t *v[K][4] = {{NULL}};
  size_t ng;
  double *t = (double *)malloc(sizeof(double) * reps * 5), med;
  FC(FMMaskGetSizes(m, &Sq, &Sk, &mh));
  FC(FMMaskGetBatch(m, &mb));
  ng = (size_t)mb * mh;
  for (int k = 0; k < K; k++) {
    FC(FMMaskSetSeed(m, seed + 2000 + (unsigned long)k));
    FC(FMMaskSetUp(m));
    for (size_t g = 0; g < ng; g++) {
      const int32_t *b[4];
      int present;
      FC(FMMaskGetSampleBounds(m, (int)(g / (size_t)mh), (int)(g % (size_t)mh), &b[0], &b[1], &b[2], &b[3], &present, &causal));
      for (int x = 0; x < 4; x++) {
        if (!((present >> x) & 1)) continue;
        if (!v[k][x]) v[k][x] = (int32_t *)malloc(sizeof(int32_t) * ng * (size_t)Sk);
        memcpy(v[k][x] + g * (size_t)Sk, b[x], sizeof(int32_t) * (size_t)Sk);
      }
    }
  }
  FC(FMMaskCreate(ctx, &u));
  FC(FMMaskSetSizes(u, Sq, Sk, mh));
  if (mb > 1) FC(FMMaskSetBatch(u, mb));
  FC(FMMaskSetType(u, FMMASKBOUNDS));
  FC(FMMaskSetCausal(u, causal));
  FC(FMPlanCreate(ctx, &plan));
  FC(FMPlanSetMask(plan, u));
  FC(FMPlanSetShape(plan, B, H, Hkv, D, dt));
  FC(FMPlanSetFromOptions(plan));
  for (int r = -1; r < reps; r++) { /* r = -1: the first set-up, untimed */
    int32_t *const *w = v[(r + K) % K];
    const double t0 = FMTime();
    FC(FMMaskSetAllBounds(u, w[0], w[1], w[2], w[3]));
    setup_step(u, plan, t0, t, reps, r);
  }
  med = setup_medians(t, reps, part);
  FC(FMPlanDestroy(&plan));
  FC(FMMaskDestroy(&u));
  for (int k = 0; k < K; k++)
    for (int x = 0; x < 4; x++) free(v[k][x]);
  return med;
}

/* The set-up line: what a new mask costs, and its share of the forward where that was timed. */
static void print_setup(const char *name, int S, int B, const char *what, double ms, double fwd_ms, const double part[4])
{
  FMBool logged;
  FC(FMLogViewRequested_Private(&logged));
  printf("%-22s %6d %3d %s %.3f ms", name, S, B, what, ms);
  if (fwd_ms > 0) printf(" = %.1f%% of the forward", 100.0 * ms / fwd_ms);
  printf(" (medians: mask host %.3f, plan host %.3f, FLOP count host %.3f%s, device wait %.3f ms)\n", part[0], part[1], part[2],
         logged ? "" : " (not paid: no -fm_log_view)", part[3]);
}

/* One plan on the mask: a forward (the path; O and LSE for the backward), then each chosen pass
   timed (or reported as not timed on a fallback path); a row per pass on stdout and in the CSV. */
static void time_mask(FMContext ctx, const char *name, FMMask m, double rho, double dens, int S, int B, int H, int Hkv, int D,
                      FMDType dt, int passes, const Bufs *b, int warm, double warm_s, int reps, unsigned long seed, FILE *fcsv)
{
  FMPlan plan;
  FMAttnProblem p;
  double fl = 0, setup_ms = -1, bounds_ms = -1, fwd_ms = -1, part[4], bpart[4];
  float med[NPASS] = {0};
  int hopper[NPASS];
  char kname[NPASS][96]; /* the kernel each pass ran, for its line */
  const char *bpath;
  FC(FMPlanCreate(ctx, &plan));
  FC(FMPlanSetMask(plan, m));
  FC(FMPlanSetShape(plan, B, H, Hkv, D, dt));
  FC(FMPlanSetFromOptions(plan));
  FC(FMPlanSetUp(plan));
  FC(FMPlanGetFlops(plan, &fl));
  FC(FMPlanGetProblem_Private(plan, &p));
  FC(FMPlanForward(plan, b->q, b->k, b->v, b->o, b->lse));
  FC(FMCudaStreamSynchronize(NULL));
  bpath = FMCudaBackwardPathName(&p);
  hopper[PASS_FWD] = FMCudaLastPath_Private >= 1; /* 1: one CTA per tile, 2: persistent, 3: wide (no bound vectors) */
  {
    static const char *fname[4] = {"?", "grid", "persistent", "wide"};
    const char *bk = !strncmp(bpath, "sm90 wgmma/tma, ", 16) ? bpath + 16 : bpath;
    const int fp = FMCudaLastPath_Private >= 1 && FMCudaLastPath_Private <= 3 ? FMCudaLastPath_Private : 0;
    snprintf(kname[PASS_FWD], sizeof kname[PASS_FWD], "%s", fname[fp]);
    snprintf(kname[PASS_BWD], sizeof kname[PASS_BWD], "%s", bk);
    snprintf(kname[PASS_FWDBWD], sizeof kname[PASS_FWDBWD], "fwd %s, bwd %s", fname[fp], bk);
  }
  hopper[PASS_BWD] = !strncmp(bpath, "sm90", 4);
  hopper[PASS_FWDBWD] = hopper[PASS_FWD] && hopper[PASS_BWD];
  for (int t = 0; t < NPASS; t++) {
    if (!(passes & 1 << t) || !hopper[t]) continue;
    med[t] = time_pass(plan, t, b, warm, warm_s, reps);
    if (t == PASS_FWD) fwd_ms = med[t];
  }
  /* then the set-up of new masks (it changes the mask: after the passes) */
  setup_ms = time_setup(plan, m, seed, reps > 10 ? reps : 10, part); /* at least 10: the host parts are tens of us */
  bounds_ms = time_setup_bounds(ctx, m, B, H, Hkv, D, dt, seed, reps > 10 ? reps : 10, bpart);
  for (int t = 0; t < NPASS; t++) {
    if (!(passes & 1 << t)) continue;
    if (!hopper[t]) {
      printf("%-22s %6d %3d %-6s %9s %9s %7.4f %8.4f fallback (not timed)\n", name, S, B, pass_name[t], "-", "-", rho, dens);
    } else {
      const double tf = pass_flops(fl, t) / (med[t] * 1e-3) / 1e12;
      printf("%-22s %6d %3d %-6s %9.3f %9.1f %7.4f %8.4f sm90 (%s)\n", name, S, B, pass_name[t], med[t], tf, rho, dens, kname[t]);
      if (fcsv)
        fprintf(fcsv, "%s,%d,%d,%d,%d,%.4f,%.2f,%.5f,%.5f,sm90,%d,%s,%.3f,%.3f\n", name, S, B, H, D, med[t], tf, rho, dens,
                p.mask.mask_batch, pass_name[t], setup_ms, bounds_ms);
    }
    fflush(stdout);
  }
  print_setup(name, S, B, "new mask set-up (FMMaskSetUp + FMPlanSetUp update)", setup_ms, fwd_ms, part);
  print_setup(name, S, B, "new user bounds set-up (FMMaskSetAllBounds + FMMaskSetUp + FMPlanSetUp update)", bounds_ms, fwd_ms, bpart);
  FC(FMPlanDestroy(&plan));
}

/* The command line (fmbench's own options; the library reads the -fm_* ones). */
typedef struct {
  FMBenchShape sh;          /* the options fmbench -cp shares: lengths, heads, head_dim, dtype, runs, seed */
  char masks[1024], out[512], csv[512], pass[64];
  int dry;
  int visits;               /* -visits: the backward's visited steps beside each mask */
  double warm_s;            /* -warmup_s: seconds of back-to-back runs before the timed ones */
  int mask_batch;           /* -mask_batch: 0 = one mask shared by the batch */
  int passes;               /* bits 1 << PASS_*: -pass, -bwd, -fwdbwd (none given: the forward) */
  long tokens;
  int nnames;               /* the builders: FMMaskTypeList less "bounds" */
  const char *const *names;
  int use[32];              /* [nnames] masks to time */
} Args;

/*
 * FMBenchReadShape_Private - the options fmbench and fmbench -cp share (see fmbench_cp.h), from
 *   the options database (the command line, FM_OPTIONS and -options_file), so that every number
 *   is read by the library's own parser, whole ("12abc" is refused), as the -fm_* options are;
 *   then each value checked against what a CUDA plan takes (FMPlanSetShape, the CUDA kernels):
 *   positive lengths and heads, heads a multiple of heads_kv, head_dim a multiple of 8 up to
 *   256, dtype bf16 or fp16, -warmup >= 0, -reps >= 1. Not collective. An error names the option
 *   and its value.
 *   s   in: the defaults (Hkv <= 0: -heads); out: the values
 */
FMErrorCode FMBenchReadShape_Private(FMBenchShape *s)
{
  char dts[16], seed[32] = "";
  int nseq = (int)(sizeof(s->seqs) / sizeof(s->seqs[0]));
  FMBool set, hkv_set;
  snprintf(dts, sizeof dts, "%s", s->dt == FM_DTYPE_FP16 ? "fp16" : "bf16");
  FMCall(FMOptionsGetIntArray("-seqlen", "sequence lengths", s->seqs, &nseq, &set));
  if (set) s->nseq = nseq;
  FMCall(FMOptionsGetInt("-head_dim", "head dimension", &s->D, NULL));
  FMCall(FMOptionsGetInt("-heads", "query heads", &s->H, NULL));
  FMCall(FMOptionsGetInt("-heads_kv", "key/value heads (default: -heads)", &s->Hkv, &hkv_set));
  FMCall(FMOptionsGetString("-dtype", "element type, bf16 or fp16", dts, sizeof dts, NULL));
  FMCall(FMOptionsGetInt("-warmup", "warm-up runs", &s->warm, NULL));
  FMCall(FMOptionsGetInt("-reps", "timed runs", &s->reps, NULL));
  FMCall(FMOptionsGetString("-seed", "seed of the masks and tensors", seed, sizeof seed, &set));
  if (set) {
    char *end = NULL;
    s->seed = strtoul(seed, &end, 10);
    FMCheck(end != seed && !*end && seed[0] != '-', MPI_COMM_SELF, FM_ERR_ARG_WRONG, "-seed is \"%s\"; expected a non-negative integer", seed);
  }
  FMCheck(s->nseq >= 1, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "-seqlen is empty; expected lengths S,S,...");
  for (int i = 0; i < s->nseq; i++)
    FMCheck(s->seqs[i] > 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-seqlen: \"%d\" is not a positive length", s->seqs[i]);
  FMCheck(s->H >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-heads %d; expected >= 1", s->H);
  FMCheck(!hkv_set || s->Hkv >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-heads_kv %d; expected >= 1", s->Hkv);
  if (!hkv_set && s->Hkv <= 0) s->Hkv = s->H;
  FMCheck(s->H % s->Hkv == 0, MPI_COMM_SELF, FM_ERR_ARG_INCOMP, "-heads %d -heads_kv %d; expected heads a multiple of heads_kv", s->H, s->Hkv);
  FMCheck(s->D >= 8 && s->D <= 256 && s->D % 8 == 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "-head_dim %d; expected a multiple of 8 from 8 to 256 (the CUDA kernels' head dimensions)", s->D);
  FMCheck(!strcmp(dts, "bf16") || !strcmp(dts, "fp16"), MPI_COMM_SELF, FM_ERR_ARG_WRONG, "-dtype is \"%s\"; expected bf16 or fp16", dts);
  s->dt = !strcmp(dts, "fp16") ? FM_DTYPE_FP16 : FM_DTYPE_BF16;
  FMCheck(s->warm >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-warmup %d; expected >= 0 runs", s->warm);
  FMCheck(s->reps >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-reps %d; expected >= 1 timed run", s->reps);
  return FM_SUCCESS;
}

/*
 * parse_args - fill a: the shared options (FMBenchReadShape_Private), then fmbench's own, from
 *   the options database, each checked: -tokens and -mask_batch >= 1, -warmup_s seconds from 0
 *   to 600, known -masks and -pass names. Not collective: every rank reads the same options
 *   (main agrees on the outcome). An error names the option and its value.
 */
static FMErrorCode parse_args(Args *a)
{
  char warm_s[64] = "0";
  int n = 0, tokens = 131072, mask_batch = 0;
  FMBool set, mb_set;
  const FMBenchShape defaults = {{8192, 32768}, 2, 32, -1, 128, 3, 10, FM_DTYPE_BF16, 42};
  memset(a, 0, sizeof(*a));
  a->sh = defaults;
  snprintf(a->masks, sizeof a->masks, "all");
  FMCall(FMMaskTypeList(&n, &a->names));
  for (int i = 0; i < n && a->nnames < (int)(sizeof(a->use) / sizeof(a->use[0])); i++)
    if (strcmp(a->names[i], FMMASKBOUNDS)) a->nnames = i + 1; /* "bounds" comes last: not a builder */
  FMCall(FMOptionsHasName("-dryrun", &set));
  a->dry = set == FM_TRUE;
  FMCall(FMOptionsHasName("-visits", &set));
  a->visits = set == FM_TRUE;
  FMCall(FMOptionsHasName("-bwd", &set));
  if (set) a->passes |= 1 << PASS_BWD;
  FMCall(FMOptionsHasName("-fwdbwd", &set));
  if (set) a->passes |= 1 << PASS_FWDBWD;
  FMCall(FMOptionsGetString("-masks", "masks to time", a->masks, sizeof a->masks, NULL));
  FMCall(FMBenchReadShape_Private(&a->sh));
  FMCall(FMOptionsGetInt("-tokens", "tokens per batch", &tokens, NULL));
  FMCall(FMOptionsGetString("-warmup_s", "seconds of back-to-back runs before the timed ones", warm_s, sizeof warm_s, &set));
  if (set) {
    char *end = NULL;
    a->warm_s = strtod(warm_s, &end);
    FMCheck(end != warm_s && !*end && a->warm_s >= 0 && a->warm_s <= 600, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
            "-warmup_s is '%s'; expected seconds from 0 to 600", warm_s);
  }
  FMCall(FMOptionsGetString("-o", "HDF5 file of the bounds", a->out, sizeof a->out, NULL));
  FMCall(FMOptionsGetString("-csv", "CSV file of the results", a->csv, sizeof a->csv, NULL));
  FMCall(FMOptionsGetInt("-mask_batch", "per-sample masks: batch B", &mask_batch, &mb_set));
  FMCall(FMOptionsGetString("-pass", "passes to time", a->pass, sizeof a->pass, NULL));
  FMCheck(tokens >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-tokens %d; expected >= 1", tokens);
  a->tokens = tokens;
  /* -mask_batch B is the batch too, so that the plan's rule (mask_batch 1 or the batch) holds */
  FMCheck(!mb_set || mask_batch >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-mask_batch %d; expected >= 1 (the batch, each sample its own mask)",
          mask_batch);
  a->mask_batch = mb_set ? mask_batch : 0;
  if (!a->out[0]) snprintf(a->out, sizeof a->out, "fmbench_masks.h5");
  if (!strcmp(a->masks, "all")) {
    for (int i = 0; i < a->nnames; i++) a->use[i] = 1;
  } else {
    char *tok, *save = NULL;
    for (tok = strtok_r(a->masks, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      int found = 0;
      for (int i = 0; i < a->nnames; i++)
        if (!strcmp(tok, a->names[i])) a->use[i] = found = 1;
      FMCheck(found, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "-masks: unknown mask '%s'; expected all or names among %s, %s, ...", tok,
              a->names[0], a->names[1]);
    }
  }
  {
    char *tok, *save = NULL;
    for (tok = strtok_r(a->pass, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      int t = 0;
      while (t < NPASS && strcmp(tok, pass_name[t])) t++;
      FMCheck(t < NPASS, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "-pass: unknown pass '%s'; expected fwd, bwd or fwdbwd", tok);
      a->passes |= 1 << t;
    }
  }
  if (!a->passes) a->passes = 1 << PASS_FWD;
  return FM_SUCCESS;
}

/* The device tensors of batch B at length S: Q, K, V (and dO) random, the rest outputs. */
static void alloc_bufs(const Args *a, int S, int B, Bufs *b)
{
  const size_t nq = (size_t)B * S * a->sh.H * a->sh.D, nk = (size_t)B * S * a->sh.Hkv * a->sh.D;
  const int bwd = (a->passes & ~(1 << PASS_FWD)) != 0;
  memset(b, 0, sizeof(*b));
  FC(FMCudaMalloc(nq * 2, &b->q));
  FC(FMCudaMalloc(nk * 2, &b->k));
  FC(FMCudaMalloc(nk * 2, &b->v));
  FC(FMCudaMalloc(nq * 2, &b->o));
  FC(FMCudaMalloc((size_t)B * a->sh.H * S * sizeof(float), (void **)&b->lse));
  FC(FMCudaFillRandom_Private(b->q, nq, a->sh.dt, a->sh.seed * 3 + 1, 1.5f, NULL));
  FC(FMCudaFillRandom_Private(b->k, nk, a->sh.dt, a->sh.seed * 3 + 2, 1.5f, NULL));
  FC(FMCudaFillRandom_Private(b->v, nk, a->sh.dt, a->sh.seed * 3 + 3, 1.0f, NULL));
  if (bwd) {
    FC(FMCudaMalloc(nq * 2, &b->dout));
    FC(FMCudaMalloc(nq * 2, &b->dq));
    FC(FMCudaMalloc(nk * 2, &b->dk));
    FC(FMCudaMalloc(nk * 2, &b->dv));
    FC(FMCudaFillRandom_Private(b->dout, nq, a->sh.dt, a->sh.seed * 3 + 4, 1.0f, NULL));
  }
  FC(FMCudaEventCreate(&b->e0));
  FC(FMCudaEventCreate(&b->e1));
}

static void free_bufs(Bufs *b)
{
  void *p[] = {b->q, b->k, b->v, b->o, b->dout, b->dq, b->dk, b->dv, b->lse};
  FC(FMCudaEventDestroy(b->e0));
  FC(FMCudaEventDestroy(b->e1));
  for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) FC(FMCudaFree(p[i]));
  memset(b, 0, sizeof(*b));
}

/*
 * The "visits" line of -visits for mask m (set up) at length S, batch B, H query and Hkv kv heads,
 * head dim D: the step rows a launch takes on sm_90 (FMGpuBwdStepRows of the plan's resolved
 * choice, FMSm90ChooseBwdRows_Private with the context's options), then for 64-, 80- and
 * 128-row steps the work items (128-key block, kv head, sample) that visit at least one query
 * block and the visited steps of the whole batch, unmasked and partial (FMClassifyTile on the
 * mask's summaries; a step is one query block of one query head of the item's group). Per mask
 * row the counts are made once (rows are shared by heads and samples); not collective.
 */
static void print_visits(FMContext ctx, const char *name, FMMask m, int S, int B, int H, int Hkv, int D)
{
  const int32_t *sum;
  const int nkb = m->nblocks_k, mh = m->mask_heads, mb = m->mask_batch > 1 ? m->mask_batch : 1, rows = mb * mh, G = H / Hkv;
  const int bms[3] = {64, 80, 128};
  FMBwdRowsChoice c;
  FMGpuBwdParams a;
  int *cnt; /* [rows][nkb][2]: unmasked, partial, at the current step size */
  FC(FMMaskSummary_Private(m, &sum));
  FC(FMSm90ChooseBwdRows_Private(m, FM_BACKEND_CUDA, D, 90, &ctx->kopts, &c));
  memset(&a, 0, sizeof a);
  a.head_dim = D;
  a.step_rows = c.rows;
  a.mask_dense = !m->present;
  printf("visits %-22s %6d %3d bwd rows %d", name, S, B, FMGpuBwdStepRows(&a));
  FC(FMCalloc((size_t)rows * nkb * 2, &cnt));
  for (int x = 0; x < 3; x++) {
    const int BM = bms[x], nqb = (S + BM - 1) / BM;
    double items = 0, full = 0, part = 0;
    memset(cnt, 0, sizeof(*cnt) * (size_t)rows * nkb * 2);
#pragma omp parallel for schedule(dynamic, 1)
    for (int rk = 0; rk < rows * nkb; rk++) {
      const int r = rk / nkb, kb = rk % nkb;
      int *o = cnt + ((size_t)r * nkb + kb) * 2;
      for (int q = 0; q < nqb; q++) {
        const FMTileClass t = FMClassifyTile(sum + (size_t)r * nkb * FM_SUM_N, m->causal, S, S, m->block, q * BM, (q + 1) * BM, kb);
        o[0] += t == FM_TILE_FULL;
        o[1] += t == FM_TILE_PARTIAL;
      }
    }
    for (int b = 0; b < B; b++)
      for (int hkv = 0; hkv < Hkv; hkv++)
        for (int kb = 0; kb < nkb; kb++) {
          int any = 0;
          for (int g = 0; g < G; g++) {
            const int hq = hkv * G + g, r = (mb > 1 ? b * mh : 0) + hq / (H / mh);
            const int *o = cnt + ((size_t)r * nkb + kb) * 2;
            full += o[0];
            part += o[1];
            any |= o[0] + o[1] > 0;
          }
          items += any;
        }
    printf("; %d: items %.0f unmasked %.0f partial %.0f", BM, items, full, part);
  }
  printf("\n");
  FMFree(cnt);
}

/* Every chosen mask at sequence length S: build (and save) it, then time it unless a dry run. */
static void bench_seqlen(FMContext ctx, const Args *a, int S, FILE *fcsv)
{
  const int B = a->mask_batch > 0 ? a->mask_batch : a->tokens / S > 0 ? (int)(a->tokens / S) : 1;
  Bufs b;
  memset(&b, 0, sizeof b);
  if (!a->dry) alloc_bufs(a, S, B, &b);
  for (int t = 0; t < a->nnames; t++) {
    const char *name = a->names[t];
    const int mh = !strcmp(name, FMMASKRANDOMEVICTION) ? a->sh.Hkv : 1; /* random eviction differs per head */
    FMMask m;
    double dens = 0, rho = 0;
    char mname[128];
    if (!a->use[t]) continue;
    snprintf(mname, sizeof mname, "%s_%d", name, S);
    FC(FMMaskCreate(ctx, &m));
    FC(FMMaskSetSizes(m, S, S, mh));
    if (a->mask_batch > 0) FC(FMMaskSetBatch(m, a->mask_batch));
    FC(FMMaskSetType(m, name));
    FC(FMMaskSetSeed(m, a->sh.seed));
    FC(FMMaskSetUp(m));
    FC(FMMaskGetDensity(m, &dens, &rho));
    if (a->visits) print_visits(ctx, name, m, S, B, a->sh.H, a->sh.Hkv, a->sh.D);
#if FM_HAVE_HDF5
    FC(FMMaskSave(m, a->out, mname));
#endif
    if (a->dry)
      printf("%-22s %6d %3d %-6s %9s %9s %7.4f %8.4f dry run (mask saved)\n", name, S, B, "-", "-", "-", rho, dens);
    else
      time_mask(ctx, name, m, rho, dens, S, B, a->sh.H, a->sh.Hkv, a->sh.D, a->sh.dt, a->passes, &b, a->sh.warm, a->warm_s, a->sh.reps, a->sh.seed, fcsv);
    FC(FMMaskDestroy(&m));
  }
  if (!a->dry) free_bufs(&b);
}

/* -help: fmbench's own options, then the library's (a context lists them as it reads them); no
   device is needed. Returns the exit status 0 after FMFinalize. */
static int print_help(void)
{
  FMContext ctx = NULL;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank == 0)
    printf("fmbench options:\n"
           "  -masks all|name,name,...  masks to time (the library's builders; default all)\n"
           "  -seqlen S,S,...           sequence lengths\n"
           "  -head_dim d  -heads H  -heads_kv Hkv   head dimension (a multiple of 8 up to 256), query and key/value\n"
           "                            heads (heads a multiple of heads_kv; default heads_kv = heads)\n"
           "  -tokens N                 tokens per batch (batch = N / S)\n"
           "  -dtype bf16|fp16          element type\n"
           "  -warmup n  -reps n        warm-up (>= 0) and timed runs (>= 1; the median is reported)\n"
           "  -warmup_s T               then T seconds of back-to-back runs before the timed ones (default 0):\n"
           "                            the GPU's steady state under its power cap, as in a training run (not with -cp)\n"
           "  -seed s                   seed of the random masks and tensors\n"
           "  -o file                   HDF5 file of the exact bounds used\n"
           "  -csv file                 results as CSV\n"
           "  -dryrun                   build, measure and save the masks only (no GPU needed)\n"
           "  -visits                   beside each mask, the backward's step rows on sm_90 and its work items and\n"
           "                            visited unmasked and partial steps at 64, 80 and 128 rows (share/bench/bwd/step_fit.py)\n"
           "  -mask_batch B             per-sample masks: batch B, every sample its own bounds\n"
           "  -pass fwd,bwd,fwdbwd      passes to time (default fwd): fwd FMPlanForward, bwd FMPlanBackward\n"
           "                            alone (after one forward), fwdbwd both in every run\n"
           "  -bwd  -fwdbwd             add the backward pass, the forward + backward pass\n"
           "  TFLOP/s: FlashMask convention, forward 4 B H S^2 d (1 - rho), backward 2.5x, fwdbwd 3.5x\n"
           "  -cp                       time context parallelism: plan / all-gather / ring / one GPU\n"
           "                            (-pass fwd,bwd,fwdbwd, -configs plan,allgather,ring, -trace_dir DIR|none,\n"
           "                            -single 0, -label TEXT, -fm_backend cpu; -steps N: re-plan N times\n"
           "                            with a new packing, timing the update)\n"
           "the context's library options:\n");
  fflush(stdout);
  if (FMContextCreate(MPI_COMM_WORLD, &ctx) == FM_SUCCESS) {
    (void)FMContextSetFromOptions(ctx);
    (void)FMContextDestroy(&ctx);
  }
  FMFinalize();
  return 0;
}

/*
 * finish - FMFinalize and the exit status rc. A run that stopped early (rc != 0: a bad argument,
 *   no GPU, an error) left options unread that are no mistake of the user's (-fm_backend cpu
 *   after a bad -heads), so its FMFinalize lists no unused options unless -options_left asks.
 *   Collective on MPI_COMM_WORLD.
 */
static int finish(int rc)
{
  FMBool set = FM_TRUE;
  if (rc && FMOptionsHasName("-options_left", &set) == FM_SUCCESS && !set) (void)FMOptionsSetValue("-options_left", "0");
  FMFinalize();
  return rc;
}

int main(int argc, char **argv)
{
  Args a;
  FILE *fcsv = NULL;
  FMContext ctx;
  int dev = 0, sm = 0;
  char devname[256];

  FC(FMInitialize(&argc, &argv, NULL, "fmbench: time the CUDA forward and backward on the benchmark masks (-cp: context parallelism, forward and backward)"));
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-help")) return print_help();
  for (int i = 1; i < argc; i++)
    if (!strcmp(argv[i], "-cp")) return finish(FMBenchCP());
  /* every rank reads the same options; the agreement makes any rank's error every rank's */
  if (FMAgreeCode(MPI_COMM_WORLD, parse_args(&a)) != FM_SUCCESS) return finish(1);
  snprintf(devname, sizeof devname, "none (dry run)");
  if (!a.dry) {
    int ndev = 0;
    FC(FMCudaDeviceCount(&ndev));
    if (!ndev) {
      fprintf(stderr, "fmbench: no CUDA device (-dryrun builds and saves the masks without one; -help lists the options)\n");
      return finish(77);
    }
    CK(cudaGetDevice(&dev));
    FC(FMCudaDeviceInfo(dev, devname, sizeof devname, NULL, 0, &sm));
  }
  FC(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FC(FMContextSetFromOptions(ctx));
  FC(FMContextSetUp(ctx));
  remove(a.out);
  if (a.csv[0]) {
    fcsv = fopen(a.csv, "w");
    if (fcsv) fprintf(fcsv, "mask,seqlen,batch,heads,head_dim,ms,tflops,block_sparsity,density,path,mask_batch,pass,setup_ms,setup_bounds_ms\n");
  }
  printf("fmbench: %s (sm %d), path %s; %s, d = %d, H = %d (kv %d), %ld tokens per batch\n", devname, sm,
         FMCudaForwardPathName(sm), FMDTypeName(a.sh.dt), a.sh.D, a.sh.H, a.sh.Hkv, a.tokens);
  printf("fmbench: passes");
  for (int t = 0; t < NPASS; t++)
    if (a.passes & 1 << t) printf(" %s", pass_name[t]);
  printf(" (TFLOP/s: FlashMask convention, backward = 2.5 x forward, fwdbwd = 3.5 x forward); %d warm-up run%s%s, median of %d\n",
         a.sh.warm, a.sh.warm == 1 ? "" : "s", a.warm_s > 0 ? " and the steady state (-warmup_s)" : "", a.sh.reps);
  if (a.mask_batch > 0)
    printf("fmbench: -mask_batch %d: batch %d, every sample with its own bounds (sample b drawn from seed + b)\n", a.mask_batch,
           a.mask_batch);
  printf("%-22s %6s %3s %-6s %9s %9s %7s %8s %s\n", "mask", "seqlen", "B", "pass", "ms", "TFLOP/s", "rho", "density", "path");
  for (int si = 0; si < a.sh.nseq; si++) bench_seqlen(ctx, &a, a.sh.seqs[si], fcsv);
  if (fcsv) fclose(fcsv);
  FC(FMContextDestroy(&ctx));
  FMFinalize();
  return 0;
}
