/*
 * distimpl.h - the context-parallel plan's state (FMDist, behind plan->data of a "cp" plan) shared by the
 * CPU executor (exec.c) and the GPU executor (exec_gpu.c). Private to src/plan/dist.
 */
#ifndef FLASHMASK_DIST_DISTIMPL_H
#define FLASHMASK_DIST_DISTIMPL_H
#include <flashmask/private/fmdist.h>
#include <flashmask/private/planimpl.h>

/* -fm_plan_transport: how device K/V chunks move on the CUDA backend. */
typedef enum { FM_DIST_TRANSPORT_AUTO = 0, FM_DIST_TRANSPORT_NCCL = 1, FM_DIST_TRANSPORT_MPI = 2 } FMDistTransport;
extern const char *const FMDistTransportNames[]; /* "auto", "nccl", "mpi", NULL */

/* -fm_gpu_aware_mpi: whether the mpi transport hands device pointers to MPI (CUDA-aware MPI). */
typedef enum { FM_DIST_GPU_AWARE_NO = 0, FM_DIST_GPU_AWARE_YES = 1, FM_DIST_GPU_AWARE_AUTO = 2 } FMDistGPUAware;
extern const char *const FMDistGPUAwareNames[]; /* "0", "1", "auto", NULL */

typedef struct {
  int part_type, route_type, prune, overlap, chunk_opt, vnodes, schedule;
  int transport;          /* FMDistTransport; resolved (never AUTO) after set-up on the CUDA backend */
  int step_chunks;        /* -fm_plan_step_chunks: chunks per pair in one GPU exchange step, 0 = all */
  int debug_fail;         /* -fm_debug_fail_exchange: testing, this rank's GPU exchange fails at step 0 (-1: none) */
  int gpu_aware;          /* -fm_gpu_aware_mpi as given (FMDistGPUAware); the executor resolves AUTO */
  FMDistChunks ch;
  FMDistPartition part;
  FMDistBalanceInfo binfo;
  int64_t *w;
  double partial_cost;    /* -fm_plan_partial_cost: a partial tile's weight in the balancer (full tile = 1) */
  double row_cost;        /* -fm_plan_row_cost: fixed cost of a query tile in the balancer, in full tiles */
  FMDistTopo topo;
  unsigned char *needed;  /* [P][C] */
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
  int trace_on, trace_view;
  char trace_path[1024];
  void *gpu;              /* the GPU executor's state (exec_gpu.c) on the CUDA backend, else NULL */
} FMDist;

/*
 * The "cp" type's ops (exec.c; the table is filled by FMPlanCreate_CP): SetUp_CP is
 * collective and fills plan->nlocal/rows and the FMDist; Forward_CP runs the CPU executor
 * or, on the CUDA backend, the GPU one; Backward_CP the CPU one (device tensors staged
 * through host memory); View_CP prints the partition; Destroy_CP frees the FMDist.
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
 * The GPU executor (exec_gpu.c, built with CUDA):
 *   FMDistSetUpGPU_Private  collective: choose the transport, bootstrap NCCL if used, build the
 *                           exchange steps, upload one localized mask per compute stage and
 *                           allocate the device buffers. Called at the end of FMPlanSetUp_Dist.
 *   FMDistForwardGPU_Private collective: the distributed forward on device tensors (plan layout),
 *                           asynchronous on the plan's stream with the NCCL transport.
 *   FMDistDestroyGPU_Private not collective: free d->gpu.
 *   FMDistViewGPU_Private    not collective: one line about the transport and the steps.
 */
FMErrorCode FMDistSetUpGPU_Private(FMPlan plan, FMDist *d);
FMErrorCode FMDistForwardGPU_Private(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse);
FMErrorCode FMDistDestroyGPU_Private(FMDist *d);
FMErrorCode FMDistViewGPU_Private(FMPlan plan, FMDist *d, FILE *fp);
#endif
