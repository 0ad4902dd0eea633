/*
 * gpuimpl.h - the GPU executor's state (FMDistGPU, behind FMDist.gpu) shared by setup_gpu.c
 * (stage masks, buffers, events), transport_gpu.c (one exchange step over NCCL, staged MPI or
 * CUDA-aware MPI) and exec_gpu.c (the forward pipeline). Built with CUDA only; not installed.
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
  MPI_Request *rq;       /* direct: room for the largest step's messages (allocated at set-up) */
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
 * FMDistGPUMarkLinked_Private (setup_gpu.c) - after FMDistNCCLConnect_Private: record the pairs of
 *   this rank's steps as connected on g->gen (forgetting the others first when fresh = 1, as
 *   after new communicators). Not collective.
 */
void FMDistGPUMarkLinked_Private(FMPlan plan, FMDistGPU *g, int fresh);

/* FMDistGPUDebug_Private - a progress line on stderr under -fm_debug_fail_exchange (else nothing). */
void FMDistGPUDebug_Private(FMPlan plan, const FMDist *d, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
#endif
