/*
 * gpuimpl.h - the GPU executor's state (FMDistGPU, behind FMDist.gpu) shared by setup_gpu.c
 * (stage masks, buffers, events), transport_gpu.c (one exchange step over NCCL, staged MPI or
 * CUDA-aware MPI), exec_gpu.c (the pipeline of stages and exchange steps, and the forward) and
 * exec_gpu_bwd.c (the backward on the same pipeline). Built with CUDA only; not installed.
 */
#ifndef FLASHMASK_CP_GPUIMPL_H
#define FLASHMASK_CP_GPUIMPL_H
#include "distimpl.h"

typedef struct {
  int chunk, peer, level;
} GXfer;  /* one transfer of a step as seen by this rank */

typedef struct {
  int nsend, nrecv;
  GXfer *send, *recv;    /* this rank's transfers of the step, in the global order */
  int nk;                /* keys received in the step (length of the stage buffer) */
  void *kbuf, *vbuf;     /* device [B][nk][Hkv][D] inside kpool / vpool, or NULL when nothing arrives here */
  void *dmask;           /* the stage's localized mask, NULL when no local row sees its keys */
  size_t hsend, hrecv;   /* bytes of the step's host staging (mpi transport, staged) */
} GStep;

typedef struct {
  int transport;         /* FM_DIST_TRANSPORT_NCCL or _MPI */
  int direct;            /* mpi transport on device buffers (CUDA-aware MPI), the same on every rank */
  const char *direct_why; /* how -fm_gpu_aware_mpi was resolved (for FMPlanView) */
  void *nccl;            /* ncclComm_t of the context (world) */
  char *ping;            /* nccl_connect's send buffer (freed after it) */
  long gen;              /* FMContextNCCLGeneration_Private of nccl */
  int nsteps;
  GStep *st;
  void *dmask0;          /* the local stage (own keys), NULL if no local row sees them */
  int *where, *woff;     /* [C] where chunk c is held: -1 the user's k/v, s >= 0 step s's buffer, -2 nowhere; key offset */
  float *oacc, *lacc;    /* fp32 accumulator of O and the LSE, merged into stage by stage */
  /* Kept by an update of the plan (FMDistSetUpGPU_Private with update = 1) while large enough:
     every step's stage buffer is a piece of one pool for K and one for V */
  void *kpool, *vpool;   /* device, poolcap bytes each */
  size_t poolcap;
  size_t ocap, lcap;     /* bytes allocated in oacc / lacc */
  size_t hscap, hrcap;   /* bytes allocated in hsend / hrecv */
  size_t rqcap;          /* requests allocated in rq */
  unsigned char *linked; /* [P] NCCL pairs connected on communicator generation linked_gen: bit 1 sent to, bit 2 received from */
  long linked_gen;
  /* streams and events (cudaStream_t, cudaEvent_t) come from the kernel layer's FMCudaStreamCreate
     and FMCudaEventCreate (fmkernels.h) */
  void *cs;              /* communication stream (high priority) */
  void *ev_in, *ev_done;
  void **ev_c0, **ev_c1;        /* [nsteps] around each exchange on cs */
  void **ev_w0, **ev_k0, **ev_k1; /* [nsteps + 1] stage wait start, compute start, end (0 = local) */
  int nev;               /* events created in each of the five arrays (>= nsteps + 1 once set up; kept by updates) */
  char *hsend, *hrecv;   /* pinned host staging (mpi transport, unless direct) */
  MPI_Request *rq;       /* mpi transport: room for the largest step's messages (allocated at set-up) */
  /* The backward's pools (exec_gpu_bwd.c: grown at its first call, kept by updates while large
     enough, freed with the rest); the partials are fp32 [B][keys][Hkv][D], dK then dV */
  void *bws;             /* FMCudaBackwardBegin's workspace (bwscap bytes) */
  float *dacc;           /* the own keys' dK, dV (2 x B x nkeys x Hkv x D floats) */
  float *ppool;          /* every step's dK, dV partials, step after step */
  char *hpart;           /* pinned: the partials downloaded for the host reduction (ppool's layout, then dacc's) */
  char *hred;            /* pinned: the children's partials received, then the sums sent up */
  size_t bwscap, dacap, ppcap, hpcap, hredcap; /* bytes allocated in each */
  void *rs;              /* the partials' download stream (low priority) */
  /* An update's stage masks (FMDistSetUpGPU_Private with update = 1): the last steps' device
     masks, local stage first, each reused in place by the next upload while large enough */
  void **mpool;
  int npool, mpcap, mpnext;
  void *last_stream;     /* the plan's stream of the last forward or backward (FMDistGPURunStart_Private) */
} FMDistGPU;

/*
 * transport_gpu.c. The pieces of a step's transfers: each (chunk, K or V, batch) slice is one
 * contiguous run of len bytes, visited in one order on every rank (the order NCCL pairs
 * operations in and the host staging is packed in):
 *   FMDistPieces it; FMDistPiece pc;
 *   for (FMDistPiecesBegin_Private(&it, d, x, n, B, row); FMDistPiecesNext_Private(&it, &pc);) ...
 */
typedef struct {
  int chunk, peer, kv;   /* the transfer's chunk and peer; 0 = K, 1 = V */
  size_t b, len;         /* batch index; bytes of the piece */
} FMDistPiece;
typedef struct {
  const FMDist *d;
  const GXfer *x;
  int n, i, kv;
  size_t b, B, row;
} FMDistPieces;
void FMDistPiecesBegin_Private(FMDistPieces *it, const FMDist *d, const GXfer *x, int n, size_t B, size_t row);
int FMDistPiecesNext_Private(FMDistPieces *it, FMDistPiece *pc);

/*
 * One exchange step s (transport_gpu.c), on this rank's part of it:
 *   FMDistExchangeNCCL_Private  one NCCL group on the comm stream (dry: the connection run of
 *                               FMDistNCCLConnect_Private, sends read g->ping); asynchronous
 *   FMDistExchangeMPI_Private   the step's MPI messages, staged through pinned host memory or
 *                               on device buffers (g->direct); blocks the host until they
 *                               completed, posts every message even after a failure (the peers
 *                               never wait) and returns the first error; t out: host times
 *   FMDistNCCLConnect_Private   collective: a dry run of every step, so that NCCL connects
 *                               every pair while all ranks are in the same call
 */
#if FM_HAVE_NCCL
FMErrorCode FMDistExchangeNCCL_Private(FMPlan plan, FMDist *d, FMDistGPU *g, int s, const void *k, const void *v, int dry);
FMErrorCode FMDistNCCLConnect_Private(FMPlan plan, FMDist *d, FMDistGPU *g);
#endif
FMErrorCode FMDistExchangeMPI_Private(FMPlan plan, FMDist *d, FMDistGPU *g, int s, const void *k, const void *v, double t[2]);

/*
 * One call's run of the pipeline (exec_gpu.c), shared by the forward and the backward:
 *   FMDistGPURunInit_Private   collective, agreed with the caller's local error: the run's
 *                              arrays, the context's NCCL communicator current
 *   FMDistGPURunStart_Private  collective: statistics reset, the trace begun (run "forward" or
 *                              "backward"; agreed, so an error here is returned on every rank),
 *                              ev_in recorded on the plan's stream, the comm stream behind it; a
 *                              failure of those is kept in R->cerr (the rank still takes part in
 *                              the exchange, computing nothing) and agreed by Settle
 *   FMDistGPUPipeline_Private  the local stage, every exchange step with its stage under
 *                              overlap (or every stage after the whole exchange); errors kept
 *                              in R->cerr / R->xerr
 *   FMDistGPUSettle_Private    collective: ev_done after the last send, the plan's stream
 *                              behind it, the NCCL wait (-fm_nccl_timeout) and, when a rank did
 *                              not post every step, the communicators aborted; then every rank
 *                              agrees on R->cerr (returned). Once per run
 *   FMDistGPUTrace_Private     after the streams synchronized: the run's events into tr
 *                              (stage flops times R->flops_factor)
 *   FMDistGPURunFinish_Private collective: Settle if not yet done (with the caller's error:
 *                              every rank makes the same collective calls whichever way it
 *                              came), the agreed error, the trace saved (or dropped after an
 *                              error), the arrays freed
 * compute(s) queues stage s (-1: the local one) on the plan's stream; it records ev_w0, ev_k0,
 * ev_k1 [s + 1] and sets ran[s + 1] when it computed.
 */
typedef struct FMDistGPURun_ FMDistGPURun;
struct FMDistGPURun_ {
  const void *q, *k, *v;
  FMErrorCode (*compute)(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R, int s);
  void *ctx;             /* the compute's own state (the backward's), NULL in the forward */
  double flops_factor;   /* trace: 1 (forward), 2.5 (backward, as the CPU executor counts it) */
  int first;             /* no stage computed yet */
  int *ran;              /* [nsteps + 1] stages computed (0 = local) */
  double (*hostt)[2];    /* [nsteps] host times of the MPI steps */
  FMErrorCode cerr;      /* the first compute error: recorded, and the exchange still runs so that no peer waits */
  FMErrorCode xerr;      /* the first exchange error: recorded; MPI steps still run, NCCL ones stop */
  int nposted;           /* steps this rank posted, all of them unless an NCCL one failed */
  int settled;           /* FMDistGPUSettle_Private ran */
  double t0;             /* host time of ev_in (traced runs) */
  void *tr;              /* the run's trace recorder, or NULL */
};
FMErrorCode FMDistGPURunInit_Private(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R, FMErrorCode local);
FMErrorCode FMDistGPURunStart_Private(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R, const char *run);
void FMDistGPUPipeline_Private(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R);
FMErrorCode FMDistGPUSettle_Private(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R, const char *what);
FMErrorCode FMDistGPUTrace_Private(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R);
FMErrorCode FMDistGPURunFinish_Private(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R, const char *run, FMErrorCode ierr);

/*
 * FMDistGPUMarkLinked_Private (setup_gpu.c) - after FMDistNCCLConnect_Private: record the pairs of
 *   this rank's steps as connected on g->gen (forgetting the others first when fresh = 1, as
 *   after new communicators). Not collective.
 */
void FMDistGPUMarkLinked_Private(FMPlan plan, FMDistGPU *g, int fresh);

/*
 * setup_gpu.c, not collective: FMDistGPUDevGrow_Private - device memory *p holds at least need
 * bytes (*cap of them), reallocated with want >= need bytes when short (the old contents are
 * lost); FMDistGPUHostGrow_Private - pinned host memory, likewise (at least 1 byte).
 */
FMErrorCode FMDistGPUDevGrow_Private(size_t need, size_t want, void **p, size_t *cap);
FMErrorCode FMDistGPUHostGrow_Private(size_t need, char **p, size_t *cap);

#endif
