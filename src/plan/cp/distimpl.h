/*
 * distimpl.h - the package-private header of src/plan/cp, the "cp" plan type (context
 * parallel): its state (FMDist, behind plan->data), shared by
 *   options.c      the type's options and their name tables
 *   setup.c        constructor and ops table, FMPlanSetUp_CP, FMPlanView_CP, layout queries
 *   tracing.c      -fm_trace recorders of a call
 *   exec_core.c    one CPU call's state (FMDistExec), send polling, the forward on one chunk
 *   exec_gather.c  the CPU forward and backward over the pruned gather; reduce.c the dK/dV tree
 *   exec_ring.c    the ring schedule baseline
 *   setup_gpu.c, transport_gpu.c, exec_gpu.c   the GPU executor (gpuimpl.h)
 * Not installed.
 */
#ifndef FLASHMASK_CP_DISTIMPL_H
#define FLASHMASK_CP_DISTIMPL_H
#include <flashmask/private/fmdist.h>
#include <flashmask/private/planimpl.h>

/*
 * FM_DIST_TRACE: -fm_trace support through the event recorder of src/sys/trace.c (1), or
 * none (0: -fm_trace is FM_ERR_SUP), for builds that do not compile the recorder.
 */
#ifndef FM_DIST_TRACE
#define FM_DIST_TRACE 1
#endif

/* -fm_plan_transport: how device K/V chunks move on the CUDA backend. */
typedef enum { FM_DIST_TRANSPORT_AUTO = 0, FM_DIST_TRANSPORT_NCCL = 1, FM_DIST_TRANSPORT_MPI = 2 } FMDistTransport;
extern const char *const FMDistTransportNames[]; /* "auto", "nccl", "mpi", NULL */

/* -fm_gpu_aware_mpi: whether the mpi transport hands device pointers to MPI (CUDA-aware MPI). */
typedef enum { FM_DIST_GPU_AWARE_NO = 0, FM_DIST_GPU_AWARE_YES = 1, FM_DIST_GPU_AWARE_AUTO = 2 } FMDistGPUAware;
extern const char *const FMDistGPUAwareNames[]; /* "0", "1", "auto", NULL */

/* The cp type's settings: the setters (FMPlanSetPartition, ...) and FMPlanSetFromOptions fill
   them; they survive FMPlanSetUp, which reads them. */
typedef struct {
  int part_type;          /* FMDistPartType (-fm_plan_partition, FMPlanSetPartition) */
  int route_type;         /* FMDistRouteType (-fm_plan_route) */
  int prune, overlap;     /* -fm_plan_prune, -fm_plan_overlap: 0 or 1 */
  int chunk_opt;          /* -fm_plan_chunk: query rows per chunk, 0 = the default */
  int vnodes;             /* -fm_plan_nodes: virtual nodes, 0 = the real topology */
  int schedule;           /* FMDistSchedType (-fm_plan_schedule) */
  int transport;          /* FMDistTransport as asked (-fm_plan_transport; AUTO allowed) */
  int step_chunks;        /* -fm_plan_step_chunks: chunks per pair in one GPU exchange step, 0 = all */
  int gpu_aware;          /* -fm_gpu_aware_mpi as given (FMDistGPUAware); the executor resolves AUTO */
  double partial_cost;    /* -fm_plan_partial_cost: a partial tile's weight in the balancer (full tile = 1) */
  double row_cost;        /* -fm_plan_row_cost: fixed cost of a query tile in the balancer, in full tiles */
  int balance_comm;       /* -fm_plan_balance_comm: 0 or 1, the communication-aware balancer (FMDistBalanceComm) */
  double tflops, bw_intra, bw_inter; /* -fm_plan_tflops, -fm_plan_bw_intra, -fm_plan_bw_inter: its cost model (FMPlanSetCostModel) */
  int trace_on, trace_view; /* -fm_trace file (trace_path), -fm_trace_view */
  char trace_path[1024];
} FMDistOptions;

/* FMDistOptionsDefault_Private - the defaults (balanced, hierarchical, pruned, overlapped gather, ...). */
void FMDistOptionsDefault_Private(FMDistOptions *o);

typedef struct {
  FMDistOptions opt;      /* the settings (kept across set-ups) */
  int transport;          /* opt.transport resolved (never AUTO) after set-up on the CUDA backend */
  FMDistChunks ch;
  FMDistPartition part;
  FMDistBalanceInfo binfo;
  int64_t *w;
  FMDistTopo topo;
  unsigned char *myneed;  /* [C] the chunks this rank's queries need (FMDistNeededRank) */
  FMDistNeeders nd;       /* who needs the chunks this rank owns or relays (the needs' sparse transpose, setup.c) */
  double *cbytes;         /* [C] */
  FMDistRoute route;
  int nkeys, *keys;       /* local key positions */
  int *kofs;              /* [C] offset of an owned chunk in the local key arrays, -1 otherwise */
  int nin, nout;
  FMDistXfer *in, *out;   /* transfers into / out of this rank */
  int *parent;            /* [C] rank this rank receives chunk c from, -1 if none */
  double *rbytes;         /* [P] K/V bytes of each rank's block (the ring's messages) */
  double *boff;           /* [C] byte offset of chunk c inside its owner's ring block */
  FMDistStats stats;
  int tag_ub;
  /* The update path of FMPlanSetUp_CP (setup.c): ch, topo, cbytes, tag_ub and, on the CUDA
     backend, the GPU executor's streams, events, NCCL connections and buffers depend only on
     the shape, the options and the communicator (shape_hash); they are kept while kept = 1, and
     a set-up with the same shape_hash on every rank recomputes the bound-dependent rest only. */
  uint64_t shape_hash;
  int kept;
  void *gpu;              /* the GPU executor's state (FMDistGPU, gpuimpl.h) on the CUDA backend, else NULL */
} FMDist;

/* FMPlanSetFromOptions_CP - the cp type's ops->setfromoptions (options.c): its -fm_plan_*
   options, under the plan's prefix (pushed by the caller). Not collective (agreed by the caller). */
FMErrorCode FMPlanSetFromOptions_CP(FMPlan plan);

/* Number of key columns of chunk c, as a size. */
static inline size_t FMDistChunkLen_Private(const FMDist *d, int c) { return (size_t)FMDistChunkKeyLen(&d->ch, c); }

/*
 * The "cp" type's ops (the table is filled by FMPlanCreate_CP, setup.c): SetUp_CP is
 * collective and fills plan->nlocal/rows and the FMDist; Forward_CP runs the CPU executor
 * or, on the CUDA backend, the GPU one; Backward_CP likewise (the GPU one in exec_gpu_bwd.c;
 * staged through host memory only in a build without CUDA kernels); View_CP prints the
 * partition; Destroy_CP frees the FMDist.
 */
FMErrorCode FMPlanSetUp_CP(FMPlan plan);
FMErrorCode FMPlanForward_CP(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse);
FMErrorCode FMPlanBackward_CP(FMPlan plan, const void *q, const void *k, const void *v, const void *o, const float *lse,
                              const void *dout, void *dq, void *dk, void *dv);
FMErrorCode FMPlanView_CP(FMPlan plan, FILE *fp);
FMErrorCode FMPlanDestroy_CP(FMPlan plan);

/*
 * FMDistTraceBegin_Private / FMDistTraceEnd_Private - start a recorder for one traced call
 *   (*tr stays NULL unless -fm_trace was given) / save it to -fm_trace's file, print the
 *   summary under -fm_trace_view, and free it. Both collective on the plan's communicator.
 */
FMErrorCode FMDistTraceBegin_Private(FMPlan plan, FMDist *d, const char *run, void **tr);
FMErrorCode FMDistTraceEnd_Private(FMPlan plan, FMDist *d, const char *run, void **tr);

/*
 * The GPU executor (setup_gpu.c, transport_gpu.c, exec_gpu.c; built with CUDA):
 *   FMDistSetUpGPU_Private  collective: choose the transport, bootstrap NCCL if used, build the
 *                           exchange steps, upload one localized mask per compute stage and
 *                           allocate the device buffers. Called at the end of FMPlanSetUp_CP.
 *                           update = 1 (the same on every rank: FMPlanSetUp_CP's update path):
 *                           keep the transport, streams, events, NCCL connections and the
 *                           device and pinned buffers that are still large enough; rebuild the
 *                           steps and re-upload the stage masks only.
 *   FMDistForwardGPU_Private collective: the distributed forward on device tensors (plan layout),
 *                           asynchronous on the plan's stream with the NCCL transport.
 *   FMDistBackwardGPU_Private collective (exec_gpu_bwd.c): the backward on device tensors (plan
 *                           layout): the K/V gathered again as the forward gathers them, one
 *                           backward piece per stage in the fixed stage order, the dK/dV partials
 *                           reduced to their owners over the reverse route through pinned host
 *                           memory and MPI.
 *   FMDistDestroyGPU_Private not collective: free d->gpu.
 *   FMDistViewGPU_Private    not collective: one line about the transport and the steps.
 */
FMErrorCode FMDistSetUpGPU_Private(FMPlan plan, FMDist *d, int update);
FMErrorCode FMDistForwardGPU_Private(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse);
FMErrorCode FMDistBackwardGPU_Private(FMPlan plan, const void *q, const void *k, const void *v, const void *o, const float *lse,
                                      const void *dout, void *dq, void *dk, void *dv);
FMErrorCode FMDistDestroyGPU_Private(FMDist *d);
FMErrorCode FMDistViewGPU_Private(FMPlan plan, FMDist *d, FILE *fp);

/* ---------------- the CPU executor (exec_core.c, exec_gather.c, exec_ring.c, reduce.c) ---------------- */
/* The state of one CPU forward or backward. */
typedef struct {
  FMPlan plan;
  FMDist *d;
  FMAttnProblem p;
  size_t es, row_kv;    /* element size; bytes of one key position (heads_kv * head_dim * es) */
  char **buf;           /* [C] K then V of each held chunk: [B][len][Hkv][D] twice */
  MPI_Request *rreq, *sreq;
  const void *qptr;
  void *tr;             /* FMTrace or NULL */
  double *rpost, *spost; /* post times of receives / sends (for the trace) */
  FMErrorCode err;      /* the call's first local failure after the ranks agreed on its state (see below) */
  char errmsg[FM_ERRMSG_MAX]; /* its message, put back before the agreement (FMDistExecAgree_Private) */
} FMDistExec;

/*
 * Failures after the agreement. Once every rank agreed on its local state, a rank never leaves
 * the message pattern early: a failure (a compute error, an allocation, an MPI call that returns
 * an error) is kept in e->err by FMDistExecKeep_Private, the rank computes nothing more, and it
 * goes on posting what it owes (the data then untrusted) and receiving what it is owed, until
 * every request completed; then the ranks agree on the outcome (FMAgreeFirstError: every rank
 * returns an error carrying the failing rank's message). An MPI wait that fails without naming
 * its request leaves the rest of that wait to FMDistExecDrain-style completion (every remaining
 * request waited for at once). A message that MPI itself could not post never arrives: its
 * receiver waits in MPI (see doc/distributed.md, Failures).
 */
static inline FMErrorCode FMDistExecKeep_Private(FMDistExec *e, FMErrorCode ierr)
{
  if (ierr && !e->err) {
    e->err = ierr;
    snprintf(e->errmsg, sizeof(e->errmsg), "%s", FMGetLastErrorMessage());
  }
  return ierr;
}
/* FMDistExecAgree_Private - the ranks agree on the call's outcome (FMAgreeFirstError) with the
   first failure's message put back. Collective. */
static inline FMErrorCode FMDistExecAgree_Private(MPI_Comm comm, FMDistExec *e)
{
  if (e->err) FMErrorMessageSet_Private(e->errmsg);
  return FMAgreeFirstError(comm, e->err);
}
/* FMDistExecKeepMPI(e, expr, req): an MPI call that posts *req (req NULL: none); a failure is
   kept in e->err (naming expr) and *req left MPI_REQUEST_NULL, never waited for. */
#define FMDistExecKeepMPI(e, expr, req)                                                \
  do {                                                                                 \
    int fm_me_ = (expr);                                                               \
    if (fm_me_ != MPI_SUCCESS) {                                                       \
      MPI_Request *fm_rq_ = (req);                                                     \
      if (fm_rq_) *fm_rq_ = MPI_REQUEST_NULL;                                          \
      (void)FMDistExecKeep_Private((e), FMMPIError_Private(fm_me_, #expr, __FILE__, __func__, __LINE__)); \
    }                                                                                  \
  } while (0)

/*
 * exec_core.c, none collective:
 *   FMDistExecInit_Private / Free_Private  the state of one call (host tensors only); Free after
 *                                  any Init, failed or not
 *   FMDistExecRecord_Private       one trace event (no-op unless -fm_trace)
 *   FMDistExecFlops_Private        FlashMask-convention forward flops of one problem (its tiles not fully masked)
 *   FMDistExecTraceBegin_Private / End_Private  FMDistTraceBegin/End_Private for the call (collective)
 *   FMDistExecPollSends_Private    record the gather's sends that completed since the last poll
 *   FMDistExecFinishSends_Private  wait for every send of the gather (a WAIT event; waits even after a failure)
 *   FMDistExecNeeds_Private        whether the local rows see some key of chunk c
 *   FMDistExecForwardChunk_Private the forward on held chunk c (e->buf[c]) merged into (oacc, lacc)
 *                                  through the LSE; *first = 1 before the first chunk; nothing
 *                                  once the call failed (e->err)
 *   FMDistToDType_Private          dst = src (n floats) converted to t
 */
FMErrorCode FMDistExecInit_Private(FMPlan plan, FMDistExec *e);
void FMDistExecFree_Private(FMDistExec *e);
void FMDistExecRecord_Private(FMDistExec *e, int kind, double t0, double t1, double bytes, double flops, int peer, int chunk);
double FMDistExecFlops_Private(const FMAttnProblem *p);
FMErrorCode FMDistExecTraceBegin_Private(FMDistExec *e, const char *run);
FMErrorCode FMDistExecTraceEnd_Private(FMDistExec *e, const char *run);
FMErrorCode FMDistExecPollSends_Private(FMDistExec *e);
FMErrorCode FMDistExecFinishSends_Private(FMDistExec *e);
int FMDistExecNeeds_Private(const FMDistExec *e, int c);
FMErrorCode FMDistExecForwardChunk_Private(FMDistExec *e, int c, float *oacc, float *lacc, float *opart, float *lpart, int *first);
void FMDistToDType_Private(void *dst, FMDType t, const float *src, size_t n);

/*
 * exec_ring.c, collective: the ring schedule's forward (merged into oacc, lacc as
 * FMDistExecForwardChunk_Private does) and backward (dQ into dqacc, the final dK/dV of this
 * rank's keys into dk, dv). Their buffers are agreed inside; after that every step's messages
 * move whatever failed (e->err), and the local outcome is returned (the caller agrees).
 */
FMErrorCode FMDistRingForward_Private(FMDistExec *e, const void *k, const void *v, float *oacc, float *lacc, float *opart, float *lpart,
                                      int *first);
FMErrorCode FMDistRingBackward_Private(FMDistExec *e, const void *k, const void *v, const void *q, const void *o, const float *lse,
                                       const void *dout, float *dqacc, void *dk, void *dv);

/*
 * reduce.c - the dK/dV reduction of the gather backward over the reverse route.
 *   FMDistReduceCreate_Private   the buffers and requests (not collective; agree; Destroy after
 *                                any Create, failed or not; a zeroed R may be destroyed)
 *   FMDistReducePost_Private     post the receives of the children's partials (before the gather)
 *   FMDistReduceFinish_Private   after the chunks' backward filled g[]: sum, send up, write dk, dv;
 *                                after a failure (e->err, kept) still every receive and every
 *                                sum sent up, nothing summed or written; returns e->err
 */
typedef struct {
  float **g;          /* [C] dK/dV partial (fp32, K then V) of every chunk held here, else NULL */
  float **cb;         /* [nout] the partials coming back from the ranks this one sent chunks to */
  int *pending;       /* [C] children's partials still to arrive; -1 once the chunk is done */
  MPI_Request *crq;   /* [nout] their receives */
  MPI_Request *psq;   /* [nin] the sums sent up to the parents */
  double *cpost, *ppost;
} FMDistReduce;
FMErrorCode FMDistReduceCreate_Private(FMDistExec *e, FMDistReduce *R);
FMErrorCode FMDistReducePost_Private(FMDistExec *e, FMDistReduce *R);
FMErrorCode FMDistReduceFinish_Private(FMDistExec *e, FMDistReduce *R, void *dk, void *dv);

/*
 * FMDistWaitChild_Private - one wait of a dK/dV reduction (the CPU and the GPU executors'):
 *   MPI_Waitany over the n receives rq of the children's partials. *idx: the one that completed
 *   (its request set to MPI_REQUEST_NULL), or MPI_UNDEFINED; *t0, *t1 the wait's start and end.
 *   Returns the error to keep: MPI's, "never posted" when no receive was open while left chunks
 *   still wait, or the fault site's. A request MPI named, even in error, counts as completed
 *   (*idx set, its partial untrusted). When the wait failed without naming a request, found none
 *   open, or the fault site fired, every receive still open is waited for at once (the children
 *   keep their part), every pending[c] > 0 of the C chunks becomes 0 (the sums still go up,
 *   untrusted) and *idx is MPI_UNDEFINED. Not collective.
 */
FMErrorCode FMDistWaitChild_Private(int n, MPI_Request *rq, int C, int *pending, int left, const char *site, int *idx,
                                    double *t0, double *t1);
void FMDistReduceDestroy_Private(FMDistExec *e, FMDistReduce *R);
#endif
