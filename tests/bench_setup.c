/*
 * bench_setup - the host cost of a new mask every training step, one rank: FMMaskSetUp of a
 * mask with a new seed each call (the builder's new packing included), and a new-mask step of
 * a CPU plan (FMMaskSetUp + FMPlanSetUp's update + the problem the CPU kernels read,
 * FMPlanGetProblem_Private, summaries included + FMPlanGetFlops, the exact block sparsity that
 * the first FMPlanForward on a new mask computes for the log under -fm_log_view) for the local
 * plan and, where it is given
 * (-cp 1), the cp plan (its tile map reads the summaries at FMPlanSetUp): on one rank, or on
 * every rank of mpiexec -n P (then the local plan is skipped, and each call's time is the
 * slowest rank's, the ranks starting together). Built with make check but not run as a test.
 * With -bounds 1 each of these is timed a second time on the user's path, a mask of type
 * "bounds" given new vectors each call (FMMaskSetSampleBounds for every sample and head, the
 * vectors the builder's mask carries, from three seeds made beforehand, then FMMaskSetUp): what
 * a training step pays for bounds of its own, without our builders' generation; with -bounds 2
 * the same by one FMMaskSetAllBounds call (the arrays [batch][heads][S]). -heads H gives
 * the mask H heads (random_eviction differs per head; the other builders copy head 0).
 * Prints the median and the best of -reps calls (after a few warm-ups), in microseconds.
 *
 * Usage: bench_setup [-S 8192,32768,131072] [-masks causal_document,sliding_window] [-batch 1]
 *                    [-heads 1] [-bounds 0] [-reps 0 (auto: more at small S)] [-plan 1] [-cp 1]
 */
#include <flashmask.h>
#include <flashmask/private/fmkernels.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CALL(expr)                                                                      \
  do {                                                                                  \
    FMErrorCode e_ = (expr);                                                            \
    if (e_) { fprintf(stderr, "%s failed: %s\n", #expr, FMErrorString(e_)); exit(99); } \
  } while (0)

static int cmp_double(const void *a, const void *b)
{
  const double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median(double *t, int n)
{
  qsort(t, (size_t)n, sizeof(double), cmp_double);
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

enum { K_SETS = 3 }; /* bound sets made beforehand for the user's path */

/* The user's new bounds: set k % K_SETS given to every sample and head (nothing without sets),
   by one FMMaskSetSampleBounds call per (sample, head) (mode 1) or one FMMaskSetAllBounds (2). */
static void new_mask(FMMask m, int32_t **sets, int S, int H, int batch, int k, int mode)
{
  int32_t **v = sets ? sets + (size_t)(k % K_SETS) * 4 : NULL;
  if (!v) return;
  if (mode == 2) {
    CALL(FMMaskSetAllBounds(m, v[0], v[1], v[2], v[3]));
    return;
  }
  for (int smp = 0; smp < batch; smp++)
    for (int h = 0; h < H; h++) {
      const size_t o = ((size_t)smp * H + h) * (size_t)S;
      int32_t *b[4];
      for (int x = 0; x < 4; x++) b[x] = v[x] ? v[x] + o : NULL;
      CALL(FMMaskSetSampleBounds(m, smp, h, b[0], b[1], b[2], b[3]));
    }
}

/* K sets of the vectors of builder type's mask (sizes S, H heads, batch samples; seeds 1000 +
   k), each set 4 arrays [batch][H][S], NULL where the mask does not carry the vector; *causal
   its flag. */
static int32_t **make_sets(FMContext ctx, const char *type, int S, int H, int batch, FMBool *causal)
{
  FMMask g;
  const size_t ng = (size_t)batch * H;
  int32_t **v = calloc(K_SETS * 4, sizeof(int32_t *));
  CALL(FMMaskCreate(ctx, &g));
  CALL(FMMaskSetSizes(g, S, S, H));
  if (batch > 1) CALL(FMMaskSetBatch(g, batch));
  CALL(FMMaskSetType(g, type));
  for (int k = 0; k < K_SETS; k++) {
    CALL(FMMaskSetSeed(g, 1000 + (unsigned long)k));
    CALL(FMMaskSetUp(g));
    for (int smp = 0; smp < batch; smp++)
      for (int h = 0; h < H; h++) {
        const int32_t *b[4];
        int present;
        CALL(FMMaskGetSampleBounds(g, smp, h, &b[0], &b[1], &b[2], &b[3], &present, causal));
        for (int x = 0; x < 4; x++) {
          int32_t **dst = v + k * 4 + x;
          if (!((present >> x) & 1)) continue;
          if (!*dst) *dst = malloc(sizeof(int32_t) * ng * (size_t)S);
          memcpy(*dst + ((size_t)smp * H + h) * (size_t)S, b[x], sizeof(int32_t) * (size_t)S);
        }
      }
  }
  CALL(FMMaskDestroy(&g));
  return v;
}

/*
 * what: 0 FMMaskSetUp alone; 1 + local plan; 2 + cp plan. bounds: the user's path (type
 * "bounds", new vectors each call; new_mask's mode 1 or 2) instead of the builder's new seed.
 * Times in *med, *best (us).
 */
static void run(FMContext ctx, const char *type, int S, int H, int batch, int what, int bounds, int reps, double *med, double *best)
{
  FMMask m;
  FMPlan plan = NULL;
  double *t = malloc(sizeof(double) * (size_t)reps);
  const int warm = 3;
  FMBool causal = FM_FALSE;
  int32_t **sets = bounds ? make_sets(ctx, type, S, H, batch, &causal) : NULL;
  CALL(FMMaskCreate(ctx, &m));
  CALL(FMMaskSetSizes(m, S, S, H));
  if (batch > 1) CALL(FMMaskSetBatch(m, batch));
  CALL(FMMaskSetType(m, bounds ? FMMASKBOUNDS : type));
  if (bounds) CALL(FMMaskSetCausal(m, causal));
  CALL(FMMaskSetSeed(m, 1));
  new_mask(m, sets, S, H, batch, 0, bounds);
  CALL(FMMaskSetUp(m));
  if (what) {
    CALL(FMPlanCreate(ctx, &plan));
    CALL(FMPlanSetType(plan, what == 2 ? FMPLANCP : FMPLANLOCAL));
    CALL(FMPlanSetMask(plan, m));
    CALL(FMPlanSetShape(plan, batch, H > 1 ? H : 8, H > 1 ? H : 8, 128, FM_DTYPE_BF16)); /* mask heads = kv heads */
    CALL(FMPlanSetUp(plan));
  }
  for (int r = -warm; r < reps; r++) {
    double t0;
    double dt;
    if (!sets) CALL(FMMaskSetSeed(m, 2 + (unsigned long)(r + warm))); /* a new packing: a full rebuild */
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    if (sets) new_mask(m, sets, S, H, batch, 1 + r + warm, bounds);
    CALL(FMMaskSetUp(m));
    if (plan) {
      FMAttnProblem p;
      double flops;
      CALL(FMPlanSetUp(plan));
      CALL(FMPlanGetProblem_Private(plan, &p)); /* what the CPU forward reads first */
      if (!p.mask.summary) { fprintf(stderr, "bench_setup: the CPU problem has no summaries\n"); exit(1); }
      CALL(FMPlanGetFlops(plan, &flops)); /* what FMPlanForward computes after the kernel, for -fm_log_view's log */
      if (!(flops > 0)) { fprintf(stderr, "bench_setup: FMPlanGetFlops gave %g\n", flops); exit(1); }
    }
    dt = (MPI_Wtime() - t0) * 1e6;
    MPI_Allreduce(MPI_IN_PLACE, &dt, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD); /* the slowest rank */
    if (r >= 0) t[r] = dt;
  }
  *med = median(t, reps);
  *best = t[0];
  free(t);
  if (plan) CALL(FMPlanDestroy(&plan));
  CALL(FMMaskDestroy(&m));
  if (sets) {
    for (int i = 0; i < K_SETS * 4; i++) free(sets[i]);
    free(sets);
  }
}

static int parse_ints(const char *s, int *v, int max)
{
  int n = 0;
  while (*s && n < max) {
    v[n++] = (int)strtol(s, (char **)&s, 10);
    if (*s == ',') s++;
  }
  return n;
}

int main(int argc, char **argv)
{
  FMContext ctx;
  char masks[256] = "causal_document,sliding_window", *tok, *save = NULL;
  char sl[256] = "8192,32768,131072";
  int S[16], nS, batch = 1, heads = 1, bounds = 0, reps0 = 0, plan = 1, cp = 1, size = 1, rank = 0;
  char cpname[64];
  CALL(FMInitialize(&argc, &argv, NULL, "bench_setup: the host cost of a new mask every step"));
  CALL(FMOptionsGetString("-S", "sequence lengths", sl, sizeof(sl), NULL));
  CALL(FMOptionsGetString("-masks", "mask types", masks, sizeof(masks), NULL));
  CALL(FMOptionsGetInt("-batch", "mask batch (per-sample bounds when > 1)", &batch, NULL));
  CALL(FMOptionsGetInt("-heads", "mask heads (random_eviction differs per head)", &heads, NULL));
  CALL(FMOptionsGetInt("-bounds", "also time the user's path: new vectors for a mask of type bounds (1: a call per sample and head, 2: one FMMaskSetAllBounds)", &bounds, NULL));
  CALL(FMOptionsGetInt("-reps", "timed calls (0: 3000000 / S, 20..300)", &reps0, NULL));
  CALL(FMOptionsGetInt("-plan", "also a new-mask step of a local CPU plan", &plan, NULL));
  CALL(FMOptionsGetInt("-cp", "also a new-mask step of a cp CPU plan on one rank", &cp, NULL));
  nS = parse_ints(sl, S, 16);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (size > 1) plan = 0; /* the local plan runs on one rank only */
  snprintf(cpname, sizeof cpname, "+ cp plan, %d rank%s (CPU)", size, size > 1 ? "s" : "");
  CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  CALL(FMContextSetBackend(ctx, FM_BACKEND_CPU)); /* the plans' path that reads the host summaries */
  CALL(FMContextSetUp(ctx));
  if (!rank) printf("%-18s %7s %5s %5s %-34s %10s %10s\n", "mask", "S", "heads", "batch", "what", "median us", "best us");
  for (tok = strtok_r(masks, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
    for (int i = 0; i < nS; i++) {
      const char *const name[3] = {"FMMaskSetUp", "+ local plan (CPU)", cpname};
      int reps = reps0 > 0 ? reps0 : 3000000 / (S[i] * batch * heads);
      if (reps0 <= 0) reps = reps < 20 ? 20 : reps > 300 ? 300 : reps;
      for (int u = 0; u <= (bounds != 0); u++)
        for (int w = 0; w < 3; w++) {
          double med, best;
          char what[96];
          if ((w == 1 && !plan) || (w == 2 && !cp)) continue;
          run(ctx, tok, S[i], heads, batch, w, u ? bounds : 0, reps, &med, &best);
          snprintf(what, sizeof what, "%s%s", u ? (bounds == 2 ? "bounds, one call: " : "bounds: ") : "", name[w]);
          if (!rank) printf("%-18s %7d %5d %5d %-34s %10.1f %10.1f\n", tok, S[i], heads, batch, what, med, best);
          fflush(stdout);
        }
    }
  CALL(FMContextDestroy(&ctx));
  CALL(FMFinalize());
  return 0;
}
