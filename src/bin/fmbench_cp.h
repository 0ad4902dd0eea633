/*
 * fmbench_cp.h - the pieces of fmbench -cp shared by its files: fmbench_cp.c (the command line
 * and the loop over masks and lengths), fmbench_cp_run.c (buffers, timing, one configuration's
 * plan) and fmbench_cp_report.c (the printed rows, the CSV and the summary); and what every file
 * of fmbench shares (FMBenchCP, FMBenchMedian_Private).
 */
#ifndef FMBENCH_CP_H
#define FMBENCH_CP_H
#include <flashmask/private/fmdist.h>

/* The options fmbench and fmbench -cp share: -seqlen, -heads, -heads_kv, -head_dim, -dtype,
   -warmup, -reps, -seed. FMBenchReadShape_Private (fmbench.c) reads and checks them; s holds
   the defaults on entry (Hkv <= 0: the -heads value). */
typedef struct {
  int seqs[16], nseq;
  int H, Hkv, D, warm, reps;
  FMDType dt;
  unsigned long seed;
} FMBenchShape;
FMErrorCode FMBenchReadShape_Private(FMBenchShape *s);

/* The passes (-pass), as bits of CPArgs.passes and indices of cp_pass_name: the names and the
   FLOP convention of fmbench's single-GPU passes (forward 1, backward 2.5, both 3.5 forwards). */
enum { CP_FWD = 0, CP_BWD = 1, CP_FWDBWD = 2, CP_NPASS = 3 };
extern const char *const cp_pass_name[CP_NPASS];

/* The timed configurations: the settings of each one's plan, and its options prefix. */
#define CP_NCONF 3
typedef struct {
  const char *name, *prefix;
  FMBool prune, overlap;
  const char *schedule;
} CPConfig;
extern const CPConfig cp_conf[CP_NCONF];

typedef struct {
  FMBenchShape sh;     /* the options fmbench shares: lengths, heads, head_dim, dtype, runs, seed */
  int use[32];         /* [cp_nmasks] */
  int single;
  int steps;           /* -steps N: time re-planning with a fresh mask every step instead (fmbench_steps.c) */
  int passes;          /* bits 1 << CP_*: -pass, -bwd, -fwdbwd (none given: the forward) */
  int conf_use[CP_NCONF]; /* -configs: the configurations timed */
  int cpu;             /* -fm_backend cpu: host buffers on the CPU backend (checks without a GPU) */
  char csv[512], trace_dir[512], label[64];
  int dev; /* this rank's device (of the world context), used by every plan; -1 on the CPU */
} CPArgs;

/* One row of the report: a configuration (or the one-GPU run) of one (mask, S) in one pass. */
typedef struct {
  int done; /* timed */
  double ms, tflops;
  double moved, lvl[2], reduce; /* bytes sent over all ranks in one run: K/V (inside / across nodes), dK/dV partials */
  double allgather;             /* K/V bytes an unpruned all-gather moves (one gather) */
  int traced;                   /* the trace figures below are valid */
  double overlap, exposed_max, exposed_mean, imbalance; /* the pass's last call (the backward for bwd, fwdbwd) */
  double overlap_fwd;                                   /* the forward call of the same traced run */
} CPRow;

/* One (mask, S): the configurations, then the one-GPU run, per pass. */
typedef struct {
  const char *mask;
  int S;
  CPRow row[CP_NCONF + 1][CP_NPASS];
} CPGroup;


/* FMBenchCP - fmbench -cp (fmbench_cp.c): the whole program's run when -cp is given. */
int FMBenchCP(void);
/* FMBenchMedian_Private - the median of t[0..n) (n >= 1; the mean of the middle two for even n);
   sorts t in place. fmbench_cp_run.c. */
double FMBenchMedian_Private(double *t, int n);

/* fmbench_cp_run.c */
FMErrorCode FMBenchCPMakeMask_Private(FMContext ctx, const char *type, int S, int mh, unsigned long seed, FMMask *mask);
FMErrorCode FMBenchCPRunConfig_Private(FMContext ctx, FMMask mask, const CPArgs *a, const char *mname, int S, int c, CPRow row[CP_NPASS]);
FMErrorCode FMBenchCPRunSingle_Private(FMContext self, const CPArgs *a, const char *mname, int S, int mh, CPRow row[CP_NPASS]);

/* fmbench_cp_report.c (rank 0) */
double FMBenchCPRatio_Private(const CPRow *base, const CPRow *x);
void FMBenchCPHeader_Private(void);
void FMBenchCPPrintRow_Private(const CPGroup *g, int c, int p, int P);
void FMBenchCPPrintSpeedups_Private(const CPGroup *g, int p);
void FMBenchCPCSVHeader_Private(FILE *fp);
void FMBenchCPCSVGroup_Private(FILE *fp, const CPGroup *g, const CPArgs *a, int P, const char *route);
void FMBenchCPSummary_Private(const CPGroup *g, int n, int passes);
#endif
