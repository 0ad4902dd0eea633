/*
 * bench_setup - the host cost of a new mask every training step, one rank: FMMaskSetUp of a
 * mask with a new seed each call (the builder's new packing included), and a new-mask step of
 * a CPU plan (FMMaskSetUp + FMPlanSetUp's update + the problem the CPU kernels read,
 * FMPlanGetProblem_Private, summaries included) for the local plan and, where it is given
 * (-cp 1), the cp plan (its tile map reads the summaries at FMPlanSetUp): on one rank, or on
 * every rank of mpiexec -n P (then the local plan is skipped, and each call's time is the
 * slowest rank's, the ranks starting together). Built with make check but not run as a test.
 * Prints the median and the best of -reps calls (after a few warm-ups), in microseconds.
 *
 * Usage: bench_setup [-S 8192,32768,131072] [-masks causal_document,sliding_window] [-batch 1]
 *                    [-reps 0 (auto: more at small S)] [-plan 1] [-cp 1]
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

/* what: 0 FMMaskSetUp alone; 1 + local plan; 2 + cp plan. Times in *med, *best (us). */
static void run(FMContext ctx, const char *type, int S, int batch, int what, int reps, double *med, double *best)
{
  FMMask m;
  FMPlan plan = NULL;
  double *t = malloc(sizeof(double) * (size_t)reps);
  const int warm = 3;
  CALL(FMMaskCreate(ctx, &m));
  CALL(FMMaskSetSizes(m, S, S, 1));
  if (batch > 1) CALL(FMMaskSetBatch(m, batch));
  CALL(FMMaskSetType(m, type));
  CALL(FMMaskSetSeed(m, 1));
  CALL(FMMaskSetUp(m));
  if (what) {
    CALL(FMPlanCreate(ctx, &plan));
    CALL(FMPlanSetType(plan, what == 2 ? FMPLANCP : FMPLANLOCAL));
    CALL(FMPlanSetMask(plan, m));
    CALL(FMPlanSetShape(plan, batch, 8, 8, 128, FM_DTYPE_BF16));
    CALL(FMPlanSetUp(plan));
  }
  for (int r = -warm; r < reps; r++) {
    double t0;
    double dt;
    CALL(FMMaskSetSeed(m, 2 + (unsigned long)(r + warm))); /* a new packing: a full rebuild */
    MPI_Barrier(MPI_COMM_WORLD);
    t0 = MPI_Wtime();
    CALL(FMMaskSetUp(m));
    if (plan) {
      FMAttnProblem p;
      CALL(FMPlanSetUp(plan));
      CALL(FMPlanGetProblem_Private(plan, &p)); /* what the CPU forward reads first */
      if (!p.mask.summary) { fprintf(stderr, "bench_setup: the CPU problem has no summaries\n"); exit(1); }
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
  int S[16], nS, batch = 1, reps0 = 0, plan = 1, cp = 1, size = 1, rank = 0;
  char cpname[64];
  CALL(FMInitialize(&argc, &argv, NULL, "bench_setup: the host cost of a new mask every step"));
  CALL(FMOptionsGetString("-S", "sequence lengths", sl, sizeof(sl), NULL));
  CALL(FMOptionsGetString("-masks", "mask types", masks, sizeof(masks), NULL));
  CALL(FMOptionsGetInt("-batch", "mask batch (per-sample bounds when > 1)", &batch, NULL));
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
  if (!rank) printf("%-18s %7s %5s %-26s %10s %10s\n", "mask", "S", "batch", "what", "median us", "best us");
  for (tok = strtok_r(masks, ",", &save); tok; tok = strtok_r(NULL, ",", &save))
    for (int i = 0; i < nS; i++) {
      const char *const name[3] = {"FMMaskSetUp", "+ local plan (CPU)", cpname};
      int reps = reps0 > 0 ? reps0 : 3000000 / (S[i] * batch);
      if (reps0 <= 0) reps = reps < 20 ? 20 : reps > 300 ? 300 : reps;
      for (int w = 0; w < 3; w++) {
        double med, best;
        if ((w == 1 && !plan) || (w == 2 && !cp)) continue;
        run(ctx, tok, S[i], batch, w, reps, &med, &best);
        if (!rank) printf("%-18s %7d %5d %-26s %10.1f %10.1f\n", tok, S[i], batch, name[w], med, best);
        fflush(stdout);
      }
    }
  CALL(FMContextDestroy(&ctx));
  CALL(FMFinalize());
  return 0;
}
