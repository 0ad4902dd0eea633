/*
 * planimpl.h - the FMPlan object: its struct, the ops table a plan type fills, and the
 * constructors of the two types (PETSc's vecimpl.h pattern). Private to src/plan; not installed.
 *
 * A type ("local" or "cp", FMPlanSetType) owns plan->data and answers every ops entry:
 *   setfromoptions  read the type's options (the plan's prefix is pushed), starting from the
 *                   current settings; may be NULL
 *   setup           collective: check what the type supports (the same refusals on every rank
 *                   count), build plan->nlocal/rows and the type's data; errors agreed
 *   forward         collective: FMPlanForward after plan.c's checks and logging
 *   backward        collective: FMPlanBackward, likewise
 *   view            collective: the type's lines of FMPlanView (rank 0 prints)
 *   destroy         not collective: free plan->data (and set it NULL); also on a type change
 *   getlocalkeys    not collective: this rank's key positions (borrowed)
 *   getlayout       not collective: the query rows (keys = 0) or key positions (keys = 1) of
 *                   rank r, allocated (the caller frees), for FMPlanScatter/FMPlanGather
 *   getbytes        not collective: the bytes this rank moved in its last forward or backward,
 *                   for -fm_log_view's "GB moved"; may be NULL: plan.c then counts the bytes of
 *                   the tensors the call read and wrote on this rank
 */
#ifndef FLASHMASK_PRIVATE_PLANIMPL_H
#define FLASHMASK_PRIVATE_PLANIMPL_H

#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h> /* FMKernelOptions */
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct _FMPlanOps {
  FMErrorCode (*setfromoptions)(FMPlan plan);
  FMErrorCode (*setup)(FMPlan plan);
  FMErrorCode (*forward)(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse);
  FMErrorCode (*backward)(FMPlan plan, const void *q, const void *k, const void *v, const void *o, const float *lse,
                          const void *dout, void *dq, void *dk, void *dv);
  FMErrorCode (*view)(FMPlan plan, FILE *fp);
  FMErrorCode (*destroy)(FMPlan plan);
  FMErrorCode (*getlocalkeys)(FMPlan plan, int *nkeys, const int **global_keys);
  FMErrorCode (*getlayout)(FMPlan plan, int keys, int rank, int *n, int **idx);
  FMErrorCode (*getbytes)(FMPlan plan, double *bytes);
} FMPlanOps;

/* The Hopper forward's schedule as a plan resolved it (FMSm90ChooseSchedule_Private). */
typedef struct {
  int requested;            /* -fm_sm90_schedule: FM_GPU_SCHED_* (AUTO included) */
  int schedule;             /* FM_GPU_SCHED_GRID, _STATIC or _DYNAMIC */
  double tile_keys, tile_cv; /* auto's estimate (FMMaskTileKeys_Private); tile_keys -1: none made */
  int auto_keys;            /* the threshold it was compared with */
  int wide_full;            /* auto: a full mask at d = 128, which the grid runs on the wide kernel (no estimate made) */
} FMSm90Choice;

/* The Hopper backward's step rows as a plan resolved them (FMSm90ChooseBwdRows_Private). */
typedef struct {
  int rows;     /* the kernels' step rows: -fm_sm90_bwd_rows, or auto's larger step (FMBwdRowsLarger), or 0
                   (the kernel's choice) */
  double extra; /* auto's estimate: the rows the walks visit at the larger step over those at 64, less 1
                   (-1: none made) */
} FMBwdRowsChoice;

struct _p_FMPlan {
  FMObjectHeader hdr;     /* hdr.type_name: the plan type, NULL until set */
  const FMPlanOps *ops;   /* the type's table, NULL until a type is set */
  void *data;             /* the type's state (FMPlanLocal in local.c, FMDist in cp/) */
  FMContext ctx;
  FMMask mask;
  int batch, heads_q, heads_kv, head_dim;
  FMDType dtype;
  double scale; int scale_set;
  int shape_set;          /* the last FMPlanSetShape succeeded (FMPlanSetUp refuses the plan otherwise) */
  int check_finite;       /* Forward/Backward first scan their inputs for NaN/Inf (FMPlanSetCheckFinite) */
  int deterministic;      /* the backward bitwise reproducible from run to run (FMPlanSetDeterministic, -fm_deterministic); kernels see it as FMKernelOptions.deterministic */
  void *stream;
  int nlocal; int *rows;  /* global query rows owned here (set by the type's setup) */
  FMBackend backend;      /* the context's, taken at FMPlanSetUp */
  int mask_state;         /* mask->state at FMPlanSetUp */
  FMSm90Choice fwd_sched; /* the forward's schedule, auto resolved at FMPlanSetUp (FMSm90ChooseSchedule_Private) */
  FMBwdRowsChoice bwd_rows; /* the backward's step rows, resolved at FMPlanSetUp (FMSm90ChooseBwdRows_Private) */
  uint64_t bwd_rows_key;    /* what bwd_rows was resolved for (bwd_rows_key in plan.c; 0: nothing yet) */
  FMLogEvent ev_fwd, ev_bwd;
};

/* The agreement at the entry of every collective call of a plan: FMAgreeCall_Private (fmimpl.h)
   on the plan's communicator. */
#define FMPlanAgree_Private(plan, call, local_ierr, n, f) FMAgreeCall_Private((plan)->hdr.comm, (call), (local_ierr), (n), (f))
/* FMPlanCheckCurrent_Private - FM_ERR_ORDER (on this rank only: the caller agrees on it) unless
   plan is set up and its mask unchanged since; fn names the caller in the message (plan.c). */
FMErrorCode FMPlanCheckCurrent_Private(FMPlan plan, const char *fn);

/* The type constructors: set plan->ops and allocate plan->data with the type's defaults. */
FMErrorCode FMPlanCreate_Local(FMPlan plan);   /* src/plan/local.c */
FMErrorCode FMPlanCreate_CP(FMPlan plan);      /* src/plan/cp/setup.c (context parallel) */

/* FMPlanSetDefaultType_Private - the default type when none was set: local on one rank, cp on
   several (as VECSTANDARD); nothing when the plan has a type (plan.c). Not collective. */
FMErrorCode FMPlanSetDefaultType_Private(FMPlan plan);

/*
 * FMPlanCheckCUDADType_Private - the CUDA backend computes bf16 or fp16: FM_ERR_SUP naming the
 *   plan's dtype otherwise (nothing on the CPU backend). Every type's setup calls it, so one
 *   rank and several refuse the same plan at FMPlanSetUp. Not collective.
 */
FMErrorCode FMPlanCheckCUDADType_Private(FMPlan plan);

/*
 * FMPlanKernelOptions_Private - the kernel options of a set-up plan's problems: the context's,
 *   with the plan's deterministic switch and its resolved forward schedule. Not collective.
 */
void FMPlanKernelOptions_Private(FMPlan plan, FMKernelOptions *o);

/*
 * FMSm90ChooseSchedule_Private - the Hopper forward's tile schedule for a plan's mask:
 *   o->sm90_schedule (an FM_GPU_SCHED_* of -fm_sm90_schedule) unless it is FM_GPU_SCHED_AUTO.
 *   Auto takes the persistent kernel where a query tile sees at most FMSm90AutoKeys(o) keys on
 *   average (FMMaskTileKeys_Private over FM_GPU_TILE_M-row tiles): there it hides each tile's
 *   fixed cost (list build, first loads, epilogue) behind the previous tile. When the tiles
 *   also see about as many keys each (spread at most FM_GPU_SCHED_AUTO_CV) and few of them (at
 *   most FM_GPU_SCHED_STATIC_KEYS) it takes the static round robin (no atomic per tile; measured
 *   1.21-1.35x the grid on such masks of 420-490 keys, against the counter's 1.04-1.25x), else
 *   the dynamic counter (the round robin measured 0.78-0.87x the grid on causal, the counter
 *   0.95-1.00x; on even sliding windows of 830-3100 keys the round robin 0.92-1.01x, the counter
 *   1.02-1.08x). A full mask (no bound vectors, not causal) at d = 128 always gets the grid, whose
 *   wide kernel (176-key tiles) measured 1-3.6% faster than the persistent kernel at 1K and 2K
 *   keys too (H100, 2026-12-05; on causal masks the counter stays 6-28% ahead at 1K-2K and level
 *   at 4K). Heavier tiles, another head dim than 64 or 128,
 *   another GPU than sm_90 and the CPU backend get the grid (the dense masks at 32K keys and
 *   more ran 3-5% faster there than under either persistent schedule; doc/performance.md).
 *   head_dim, gpu_sm: the plan's and its context's (compute capability x 10). *c: the choice
 *   and what made it (tile_keys -1 when no estimate was made). Not collective; the same on
 *   every rank for the same mask. The choice holds until the next FMPlanSetUp: a later
 *   FMContextSetFromOptions changes it only then (the other kernel options take effect at once).
 */
FMErrorCode FMSm90ChooseSchedule_Private(FMMask mask, FMBackend backend, int head_dim, int gpu_sm, const FMKernelOptions *o,
                                         FMSm90Choice *c);
/*
 * FMSm90ChooseBwdRows_Private - the Hopper backward's query rows per step for a plan's mask:
 *   o->sm90_bwd_rows (-fm_sm90_bwd_rows) when set. Else, at d = 128 or 64 on sm_90 with the
 *   CUDA backend, on a mask with bound vectors (the kernel takes the larger step on the others
 *   already), the larger step FMBwdRowsLarger (80 rows at d = 128, 128 at d = 64) when the
 *   walks visit at most FMBwdRowsExtra more query rows at that step than at 64
 *   (FMMaskVisitedRows_Private): the larger step then wastes almost nothing on masked rows and
 *   runs faster; else 0, the kernel's 64. d = 128, H100, 2026-12-06 (fmbench at 32K, two rounds
 *   each): 80 rows ran document 1.10x, per-sample document 1.13x, random eviction 1.06x, prefix
 *   LM causal 1.04x and QK-sparse 1.015x (0.03-0.4% more rows), and prefix LM document 0.99x,
 *   global sliding window and causal blockwise 0.98x, causal document 0.95x, sliding window
 *   0.93x and share question 0.92x (0.8-3% more); at 8K every such mask visits 1.1% more rows
 *   or over, where 80 rows ran 0.83-1.02x. d = 64 (H = 64), H200, 2026-12-06 (fmbench, 128
 *   against 64 rows, two rounds at 32K, one at 8K): 128 rows ran faster on every one of the 10
 *   masks with bound vectors, 1.05-1.16x at 32K and 1.04-1.17x at 8K, with up to 4.6% more rows
 *   (global sliding window at 8K, 1.04x); hence the wider limit there. *c: the choice and the
 *   estimate (extra -1 when none was made). Not collective; the same on every rank for the same
 *   mask.
 */
FMErrorCode FMSm90ChooseBwdRows_Private(FMMask mask, FMBackend backend, int head_dim, int gpu_sm, const FMKernelOptions *o,
                                        FMBwdRowsChoice *c);
#define FM_GPU_BWD_ROWS80_EXTRA 0.005  /* auto, d = 128: 80-row steps at most this share more visited rows than 64 */
#define FM_GPU_BWD_ROWS128_EXTRA 0.05  /* auto, d = 64: 128-row steps at most this share more visited rows than 64 */
/* The larger step auto may choose at a head dim (80 rows at d = 128, 128 at d = 64), and its limit. */
static inline int FMBwdRowsLarger(int head_dim) { return head_dim == 64 ? 128 : 80; }
static inline double FMBwdRowsExtra(int head_dim) { return head_dim == 64 ? FM_GPU_BWD_ROWS128_EXTRA : FM_GPU_BWD_ROWS80_EXTRA; }

/* FMSm90AutoKeys - auto's threshold in keys: -fm_sm90_auto_keys, or FM_GPU_SCHED_AUTO_KEYS. */
static inline int FMSm90AutoKeys(const FMKernelOptions *o) { return o->sm90_auto_keys > 0 ? o->sm90_auto_keys : FM_GPU_SCHED_AUTO_KEYS; }

/*
 * FMPlanCheckDeviceArgs_Private - on the CUDA backend every tensor is device memory: name the
 *   first of ptr[0..n) (argument i + 2, name[i]) that is host memory. Not collective (agree).
 */
FMErrorCode FMPlanCheckDeviceArgs_Private(FMPlan plan, int n, const void *const *ptr, const char *const *name);

/*
 * FMPlanGetSetUpCounts_Private - how many FMPlanSetUp calls of a set-up plan of either type
 *   ("local": local.c, "cp": FMDistStats) were full set-ups and how many were updates (the same
 *   shape, options and communicator as the set-up before; see FMPlanSetUp). For FMPlanView,
 *   tests and benchmarks. Not collective.
 */
FMErrorCode FMPlanGetSetUpCounts_Private(FMPlan plan, int *full, int *update);

#ifdef __cplusplus
}
#endif
#endif
