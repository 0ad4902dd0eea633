/*
 * fmbench_cp.c - fmbench -cp: time the context-parallel forward and backward of the distributed
 * plan against its baselines, in one run: the command line and the loop over masks and lengths.
 *
 * For each mask and sequence length (batch 1, one sequence of S tokens, the library's builders
 * with a fixed seed, identical on every rank) up to three configurations of the same plan are
 * timed (-configs), each in every chosen pass (-pass fwd,bwd,fwdbwd; fmbench's passes):
 *   plan       the defaults: pruned, overlapped gather (FMPlanSetPrune/SetOverlap FM_TRUE)
 *   allgather  prune and overlap off: the unpruned, non-overlapped all-gather
 *   ring       FMPlanSetSchedule "ring": the Megatron-style ring
 * Each is its own plan: the unprefixed -fm_plan_* options (partition, route, chunk, transport,
 * nodes; defaults otherwise) are shared by the three, the configuration's settings come next, and
 * then the options under its prefix (-plan_fm_plan_*, -allgather_fm_plan_*, -ring_fm_plan_*; the
 * one-GPU plan reads -one_fm_plan_*), so nothing rewrites the options database. Plus one GPU:
 * rank 0 alone runs the whole problem on a context over MPI_COMM_SELF. Each configuration then
 * runs once more traced (FMPlanSetTrace) into DIR/<mask>_<S>_<config>.h5: a forward, and a
 * backward when a chosen pass has one; the summaries are the library's own
 * (FMTraceSummary_Private, kept in FMDistGetStats), the ones fmtrace prints for the saved file.
 * With -fm_backend cpu everything runs on the CPU backend in host memory (no GPU needed: the
 * checks of make check; the times mean nothing for the GPU).
 * Files: fmbench_cp_run.c (buffers, timing, one configuration), fmbench_cp_report.c (output).
 * Options: -masks -seqlen -heads -heads_kv -head_dim -dtype -warmup -reps -seed -csv as in
 * fmbench; -pass fwd,bwd,fwdbwd (and -bwd, -fwdbwd); -configs plan,allgather,ring (default all
 * three); -trace_dir DIR|none; -single 0 (no one-GPU run); -label TEXT (the CSV's last column);
 * -steps N; -fm_backend cpu. The command line is documented in the header comment of fmbench.c
 * and share/bench/cp_multi.sh runs the whole multi-GPU benchmark; doc/distributed.md
 * ("Benchmarking context parallelism: fmbench -cp") explains the columns.
 */
#include "fmbench_cp.h"
#include <flashmask/private/fmkernels.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

FMErrorCode FMBenchCPSteps_Private(FMContext ctx, const char *type, int S, int mh, int H, int Hkv, int D, FMDType dt, unsigned long seed,
                                   int steps, int dev); /* fmbench_steps.c */

const char *const cp_pass_name[CP_NPASS] = {"fwd", "bwd", "fwdbwd"};
const CPConfig cp_conf[CP_NCONF] = {{"plan", "plan_", FM_TRUE, FM_TRUE, "gather"},
                                    {"allgather", "allgather_", FM_FALSE, FM_FALSE, "gather"},
                                    {"ring", "ring_", FM_TRUE, FM_TRUE, "ring"}};

/* The mask builders: FMMaskTypeList less its last name, "bounds" (set by cp_parse). */
static const char *const *cp_masks;
static int cp_nmasks;

/*
 * cp_list - the comma-separated names of list, each one of the n names[] (bit i of *bits set
 *   for names[i]). what: the option, for the message. Not collective.
 */
static FMErrorCode cp_list(const char *what, const char *list, const char *const *names, int n, int *bits)
{
  char buf[256], *tok, *save = NULL;
  snprintf(buf, sizeof(buf), "%s", list);
  for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
    int found = 0;
    for (int i = 0; i < n; i++)
      if (!strcmp(tok, names[i])) *bits |= 1 << i, found = 1;
    FMCheck(found, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "%s: unknown name \"%s\"; expected %s%s%s%s%s", what, tok, names[0], n > 1 ? ", " : "",
            n > 1 ? names[1] : "", n > 2 ? " or " : "", n > 2 ? names[2] : "");
  }
  return FM_SUCCESS;
}

/*
 * cp_parse - read the -cp options from the options database (the command line, FM_OPTIONS and
 *   -options_file): those fmbench shares (FMBenchReadShape_Private) and -masks, -pass, -bwd,
 *   -fwdbwd, -csv, plus -trace_dir, -single, -steps, -configs, -label and -fm_backend cpu. Not
 *   collective; every rank reads the same options. Unknown mask, pass or configuration names are
 *   FM_ERR_ARG_WRONG; bad numbers are named.
 */
static FMErrorCode cp_parse(CPArgs *a)
{
  const FMBenchShape defaults = {{65536, 131072}, 2, 32, -1, 128, 2, 5, FM_DTYPE_BF16, 42};
  char masks[1024] = "causal,causal_document,document,share_question", pass[64] = "", backend[16] = "";
  char confs[64] = "plan,allgather,ring";
  const char *cnames[CP_NCONF] = {cp_conf[0].name, cp_conf[1].name, cp_conf[2].name};
  int cbits = 0;
  FMBool set;
  char *tok, *save = NULL;
  memset(a, 0, sizeof(*a));
  a->sh = defaults;
  FMCall(FMMaskTypeList(&cp_nmasks, &cp_masks));
  if (cp_nmasks > 0 && !strcmp(cp_masks[cp_nmasks - 1], FMMASKBOUNDS)) cp_nmasks--;
  FMCheck(cp_nmasks <= (int)(sizeof(a->use) / sizeof(a->use[0])), MPI_COMM_SELF, FM_ERR_LIB, "%d mask builders; fmbench -cp knows room for %d",
          cp_nmasks, (int)(sizeof(a->use) / sizeof(a->use[0])));
  a->dev = -1;
  a->single = 1;
  snprintf(a->trace_dir, sizeof(a->trace_dir), "fmbench_cp_traces");
  FMCall(FMOptionsHasName("-bwd", &set));
  if (set) a->passes |= 1 << CP_BWD;
  FMCall(FMOptionsHasName("-fwdbwd", &set));
  if (set) a->passes |= 1 << CP_FWDBWD;
  FMCall(FMBenchReadShape_Private(&a->sh));
  FMCall(FMOptionsGetString("-masks", "masks to time", masks, sizeof(masks), NULL));
  FMCall(FMOptionsGetString("-csv", "CSV file of the results", a->csv, sizeof(a->csv), NULL));
  FMCall(FMOptionsGetString("-trace_dir", "directory of the traces (none: no traces)", a->trace_dir, sizeof(a->trace_dir), NULL));
  FMCall(FMOptionsGetInt("-single", "also time rank 0 alone on the whole problem (0: no)", &a->single, NULL));
  FMCall(FMOptionsGetInt("-steps", "time re-planning with a fresh mask every step, N steps", &a->steps, NULL));
  FMCall(FMOptionsGetString("-pass", "passes to time", pass, sizeof(pass), NULL));
  FMCall(FMOptionsGetString("-configs", "configurations to time", confs, sizeof(confs), NULL));
  FMCall(FMOptionsGetString("-label", "a label for the CSV rows", a->label, sizeof(a->label), NULL));
  FMCall(FMOptionsGetString("-fm_backend", "the context's backend (cpu: host buffers, checks without a GPU)", backend, sizeof(backend), NULL));
  a->cpu = !strcmp(backend, "cpu");
  if (pass[0]) FMCall(cp_list("-pass", pass, cp_pass_name, CP_NPASS, &a->passes));
  if (!a->passes) a->passes = 1 << CP_FWD;
  FMCall(cp_list("-configs", confs, cnames, CP_NCONF, &cbits));
  for (int c = 0; c < CP_NCONF; c++) a->conf_use[c] = cbits >> c & 1;
  FMCheck(!strchr(a->label, ','), MPI_COMM_SELF, FM_ERR_ARG_WRONG, "-label \"%s\": a CSV field, expected no comma", a->label);
  FMCheck(a->steps >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-steps %d; expected >= 0", a->steps);
  FMCheck(!a->cpu || a->steps <= 0, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "-steps %d with -fm_backend cpu: the re-planning benchmark runs on the GPU only", a->steps);
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
  return FM_SUCCESS;
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
 * cp_contexts - the world context (CUDA backend whatever -fm_backend says, unless it says cpu)
 *   and, on rank 0 with -single and several ranks, the one-GPU context over MPI_COMM_SELF (NULL
 *   when it cannot be made: the 1-GPU column then stays empty). Collective on MPI_COMM_WORLD.
 */
static FMErrorCode cp_contexts(CPArgs *a, FMContext *ctx, FMContext *self)
{
  const FMBackend be = a->cpu ? FM_BACKEND_CPU : FM_BACKEND_CUDA; /* host or device pointers */
  int rank, size, dev = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  FMCall(FMContextCreate(MPI_COMM_WORLD, ctx));
  FMCall(FMContextSetFromOptions(*ctx));
  FMCall(FMContextSetBackend(*ctx, be));
  FMCall(FMContextSetUp(*ctx));
  if (!a->cpu) FMCall(FMContextGetDevice(*ctx, &dev));
  a->dev = dev;
  if (rank == 0 && a->single && size > 1) {
    /* the one-GPU baseline (cp_bench_plan makes each context's device current before use) */
    FMErrorCode ierr = FMContextCreate(MPI_COMM_SELF, self);
    if (!ierr) ierr = FMContextSetBackend(*self, be);
    if (!ierr) ierr = FMContextSetUp(*self);
    if (ierr) {
      fprintf(stderr, "fmbench -cp: no one-GPU context on rank 0; the 1-GPU column stays empty\n");
      if (*self) FMContextDestroy(self);
      *self = NULL;
    }
  }
  return FM_SUCCESS;
}

/* cp_banner - where each rank runs and what is timed (rank 0 prints). Collective on MPI_COMM_WORLD. */
static FMErrorCode cp_banner(const CPArgs *a, const char *gpu)
{
  int rank, size, *devs = NULL;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (rank == 0) FMCall(FMMalloc(size, &devs));
  FMCallMPI(MPI_Gather(&a->dev, 1, MPI_INT, devs, 1, MPI_INT, 0, MPI_COMM_WORLD));
  if (rank == 0) {
    printf("fmbench -cp: %d rank(s) on %s; devices by rank:", size, a->cpu ? "the CPU backend" : gpu);
    for (int r = 0; r < size; r++) printf(" %d", devs[r]);
    printf("; %s, batch 1, H = %d (kv %d), d = %d; %d warm-up + %d timed runs, median of the max over ranks\n", FMDTypeName(a->sh.dt), a->sh.H,
           a->sh.Hkv, a->sh.D, a->sh.warm, a->sh.reps);
    printf("passes:");
    for (int p = 0; p < CP_NPASS; p++)
      if (a->passes & 1 << p) printf(" %s", cp_pass_name[p]);
    printf("; configs:");
    for (int c = 0; c < CP_NCONF; c++)
      if (a->conf_use[c]) printf(" %s", cp_conf[c].name);
    printf(" (plan = pruned overlapped gather, allgather = -fm_plan_prune 0 -fm_plan_overlap 0, ring = -fm_plan_schedule ring; "
           "partition/route/chunk/transport/nodes from the options, defaults otherwise); traces in %s\n",
           a->trace_dir[0] ? a->trace_dir : "(none)");
    if (size == 1) printf("note: one rank: the three configurations are the single-GPU kernel; run on 2 or more ranks\n");
    FMBenchCPHeader_Private();
  }
  free(devs);
  return FM_SUCCESS;
}

/*
 * cp_group - one (mask, S): every chosen configuration on ctx, then the one-GPU run on self
 *   (rank 0), the lines, speedups and CSV rows (rank 0). route: the plans' route (CSV).
 *   Collective on MPI_COMM_WORLD.
 */
static FMErrorCode cp_group(FMContext ctx, FMContext self, const CPArgs *a, int t, int S, CPGroup *g, FILE *fcsv, const char *route)
{
  const int mh = !strcmp(cp_masks[t], FMMASKRANDOMEVICTION) ? a->sh.Hkv : 1; /* random eviction differs per head */
  int rank, size;
  FMMask mask = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  g->mask = cp_masks[t];
  g->S = S;
  FMCall(FMBenchCPMakeMask_Private(ctx, cp_masks[t], S, mh, a->sh.seed, &mask));
  for (int c = 0; c < CP_NCONF; c++) {
    if (!a->conf_use[c]) continue;
    FMCallGoto(FMBenchCPRunConfig_Private(ctx, mask, a, cp_masks[t], S, c, g->row[c]));
    for (int p = 0; rank == 0 && p < CP_NPASS; p++) FMBenchCPPrintRow_Private(g, c, p, size);
  }
  if (size == 1 && a->single) {
    memcpy(g->row[CP_NCONF], g->row[0], sizeof(g->row[0])); /* one rank: the plan is the one-GPU run */
  } else if (rank == 0 && self) {
    if (FMBenchCPRunSingle_Private(self, a, cp_masks[t], S, mh, g->row[CP_NCONF]))
      fprintf(stderr, "fmbench -cp: the one-GPU run of %s at %d failed (see above); its column stays empty\n", cp_masks[t], S);
  }
  FMCallMPIGoto(MPI_Barrier(MPI_COMM_WORLD));
  if (rank == 0) {
    for (int p = 0; a->single && p < CP_NPASS; p++) FMBenchCPPrintRow_Private(g, CP_NCONF, p, size);
    for (int p = 0; p < CP_NPASS; p++) FMBenchCPPrintSpeedups_Private(g, p);
    FMBenchCPCSVGroup_Private(fcsv, g, a, size, route);
  }
cleanup:
  {
    FMErrorCode e2 = FMMaskDestroy(&mask);
    if (!ierr) ierr = e2;
  }
  return ierr;
}

/* cp_route - the route a default plan of ctx reads from the options (for the CSV). Collective on ctx. */
static FMErrorCode cp_route(FMContext ctx, char *route, size_t n)
{
  FMPlan plan = NULL;
  const char *r = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  snprintf(route, n, "?");
  FMCall(FMPlanCreate(ctx, &plan));
  FMCallGoto(FMPlanSetType(plan, "cp"));
  FMCallGoto(FMPlanSetFromOptions(plan));
  FMCallGoto(FMPlanGetRoute(plan, &r));
  snprintf(route, n, "%s", r ? r : "?");
cleanup:
  {
    FMErrorCode e2 = FMPlanDestroy(&plan);
    if (!ierr) ierr = e2;
  }
  return ierr;
}

/*
 * cp_main - the benchmark proper (see the file comment). Collective on MPI_COMM_WORLD.
 *   *rc out: the program's exit status (77 when some rank has no GPU).
 */
static FMErrorCode cp_main(int *rc)
{
  CPArgs a;
  FMContext ctx = NULL, self = NULL;
  CPGroup *groups = NULL;
  FILE *fcsv = NULL;
  int rank, ok = 1, ngroups = 0;
  char gpu[256] = "", route[32] = "";
  FMErrorCode ierr = FM_SUCCESS;

  *rc = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  FMAgree(MPI_COMM_WORLD, cp_parse(&a));
  if (!a.cpu) FMCall(cp_devices(&ok, gpu, sizeof(gpu)));
  if (!ok) {
    *rc = 77;
    return FM_SUCCESS;
  }
  FMCall(cp_trace_dir(&a));
  FMCallGoto(cp_contexts(&a, &ctx, &self));
  FMCallGoto(cp_banner(&a, gpu));
  FMCallGoto(cp_route(ctx, route, sizeof(route)));
  if (rank == 0 && a.csv[0] && a.steps <= 0) {
    fcsv = fopen(a.csv, "w");
    if (!fcsv) fprintf(stderr, "fmbench -cp: cannot write %s; no CSV\n", a.csv);
    FMBenchCPCSVHeader_Private(fcsv);
  }
  FMCallGoto(FMCalloc((size_t)a.sh.nseq * cp_nmasks + 1, &groups));
  for (int si = 0; si < a.sh.nseq; si++)
    for (int t = 0; t < cp_nmasks; t++) {
      const int S = a.sh.seqs[si], mh = !strcmp(cp_masks[t], FMMASKRANDOMEVICTION) ? a.sh.Hkv : 1;
      if (!a.use[t]) continue;
      if (a.steps > 0) /* -steps: the update path's cost instead of the configurations */
        FMCallGoto(FMBenchCPSteps_Private(ctx, cp_masks[t], S, mh, a.sh.H, a.sh.Hkv, a.sh.D, a.sh.dt, a.sh.seed, a.steps, a.dev));
      else FMCallGoto(cp_group(ctx, self, &a, t, S, &groups[ngroups++], fcsv, route));
    }
  if (rank == 0 && a.steps <= 0) FMBenchCPSummary_Private(groups, ngroups, a.passes);
cleanup:
  if (fcsv) fclose(fcsv);
  free(groups);
  if (self) {
    FMErrorCode e2 = FMContextDestroy(&self);
    if (!ierr) ierr = e2;
  }
  if (ctx) {
    FMErrorCode e2 = FMContextDestroy(&ctx);
    if (!ierr) ierr = e2;
  }
  if (!ierr) *rc = 0;
  return ierr;
}

/*
 * FMBenchCP - entry point of fmbench -cp, called by fmbench's main after FMInitialize.
 *   Collective on MPI_COMM_WORLD. Returns the exit status: 0 on success, 77 when some rank has
 *   no GPU (with a message; not with -fm_backend cpu), 1 on an error (the library printed it).
 */
int FMBenchCP(void)
{
  int rc = 1;
  if (cp_main(&rc) != FM_SUCCESS) rc = 1;
  return rc;
}
