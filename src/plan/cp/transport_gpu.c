/*
 * transport_gpu.c - one exchange step of the GPU executor (built with CUDA only): the step's
 * K/V pieces over NCCL (one group on the comm stream), over MPI through pinned host memory, or
 * over CUDA-aware MPI on the device buffers themselves (-fm_gpu_aware_mpi). Every transport
 * walks the same pieces, (chunk, K or V, batch), with one iterator.
 */
#include "gpuimpl.h"
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if FM_HAVE_NCCL
#include <nccl.h>
#endif

/* FMDistPiecesBegin_Private - see gpuimpl.h. */
void FMDistPiecesBegin_Private(FMDistPieces *it, const FMDist *d, const GXfer *x, int n, size_t B, size_t row)
{
  it->d = d; it->x = x; it->n = n; it->i = 0; it->kv = 0; it->b = 0; it->B = B; it->row = row;
}

/* FMDistPiecesNext_Private - the next piece in (transfer, K then V, batch) order; 0 after the last. */
int FMDistPiecesNext_Private(FMDistPieces *it, FMDistPiece *pc)
{
  if (it->i >= it->n || it->B == 0) return 0;
  pc->chunk = it->x[it->i].chunk;
  pc->peer = it->x[it->i].peer;
  pc->kv = it->kv;
  pc->b = it->b;
  pc->len = FMDistChunkLen_Private(it->d, pc->chunk) * it->row;
  if (++it->b == it->B) {
    it->b = 0;
    if (++it->kv == 2) { it->kv = 0; it->i++; }
  }
  return 1;
}

/* Device address of a piece as held here (the user's k/v, or the stage buffer it arrived in). */
static const char *held(const FMDist *d, const FMDistGPU *g, const void *k, const void *v, const FMDistPiece *pc, size_t row)
{
  int c = pc->chunk;
  if (g->where[c] == -1) return (const char *)(pc->kv ? v : k) + (pc->b * (size_t)d->nkeys + (size_t)g->woff[c]) * row;
  {
    const GStep *S = &g->st[g->where[c]];
    return (const char *)(pc->kv ? S->vbuf : S->kbuf) + (pc->b * (size_t)S->nk + (size_t)g->woff[c]) * row;
  }
}

/* Device address a piece arrives at in step s's stage buffer. */
static char *recv_addr(const FMDistGPU *g, int s, const FMDistPiece *pc, size_t row)
{
  const GStep *S = &g->st[s];
  return (char *)(pc->kv ? S->vbuf : S->kbuf) + (pc->b * (size_t)S->nk + (size_t)g->woff[pc->chunk]) * row;
}

/* Tag of batch b of chunk c's K (kv = 0) or V (kv = 1) on device buffers: unique per piece. */
static int piece_tag(const FMDistPiece *pc, size_t B) { return (int)(((size_t)pc->chunk * 2 + (size_t)pc->kv) * B + pc->b); }

static size_t row_bytes(FMPlan plan) { return (size_t)plan->heads_kv * plan->head_dim * FMDTypeSize(plan->dtype); }


/* FM_ERR_CUDA naming what failed (and the exchange step s, when s >= 0). */
static FMErrorCode cuda_code(cudaError_t ce, const char *what, int s)
{
  char step[32] = "";
  if (ce == cudaSuccess) return FM_SUCCESS;
  (void)cudaGetLastError();
  if (s >= 0) snprintf(step, sizeof(step), ", exchange step %d", s);
  FMRaise(MPI_COMM_SELF, FM_ERR_CUDA, "CUDA error in %s%s: %s (%s)", what, step, cudaGetErrorName(ce), cudaGetErrorString(ce));
}

/* FM_ERR_MPI naming what failed in exchange step s, with MPI's text. */
static FMErrorCode mpi_code(int e, const char *what, int s)
{
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (e == MPI_SUCCESS) return FM_SUCCESS;
  MPI_Error_string(e, msg, &len);
  FMRaise(MPI_COMM_SELF, FM_ERR_MPI, "MPI error in %s, exchange step %d: %s", what, s, msg);
}

/* A step keeps its first failure (raised here, once) and goes on: its messages must be posted anyway. */
static void keep_cuda(FMErrorCode *first, cudaError_t ce, const char *what, int s)
{
  if (ce == cudaSuccess) return;
  if (!*first) *first = cuda_code(ce, what, s);
  else (void)cudaGetLastError();
}
/* The same for a kernel-layer helper (it raised its error itself): the first one is kept. */
static void keep_fm(FMErrorCode *first, FMErrorCode e)
{
  if (e && !*first) *first = e;
}
static void keep_mpi(FMErrorCode *first, int e, const char *what, int s)
{
  if (e != MPI_SUCCESS && !*first) *first = mpi_code(e, what, s);
}

#if FM_HAVE_NCCL
/* FMDistExchangeNCCL_Private - see gpuimpl.h. k and v may be NULL on a rank that owns no keys (it then only relays). */
FMErrorCode FMDistExchangeNCCL_Private(FMPlan plan, FMDist *d, FMDistGPU *g, int s, const void *k, const void *v, int dry)
{
  const GStep *S = &g->st[s]; /* dry (FMDistNCCLConnect_Private): every send reads g->ping, k and v are unused */
  size_t row = row_bytes(plan), B = (size_t)plan->batch;
  ncclComm_t comm = (ncclComm_t)g->nccl;
  ncclResult_t r = ncclSuccess, r2;
  FMDistPieces it;
  FMDistPiece pc;
  FMCall(FMCudaEventRecord(g->ev_c0[s], g->cs));
  if (ncclGroupStart() != ncclSuccess) FMRaise(MPI_COMM_SELF, FM_ERR_NCCL, "ncclGroupStart() failed");
  for (FMDistPiecesBegin_Private(&it, d, S->send, S->nsend, B, row); r == ncclSuccess && FMDistPiecesNext_Private(&it, &pc);)
    r = ncclSend(dry ? g->ping : held(d, g, k, v, &pc, row), pc.len, ncclInt8, pc.peer, comm, (cudaStream_t)g->cs);
  for (FMDistPiecesBegin_Private(&it, d, S->recv, S->nrecv, B, row); r == ncclSuccess && FMDistPiecesNext_Private(&it, &pc);)
    r = ncclRecv(recv_addr(g, s, &pc, row), pc.len, ncclInt8, pc.peer, comm, (cudaStream_t)g->cs);
  r2 = ncclGroupEnd();
  FMCheck(r == ncclSuccess && r2 == ncclSuccess, MPI_COMM_SELF, FM_ERR_NCCL, "NCCL send/recv of exchange step %d failed: %s", s,
          ncclGetErrorString(r != ncclSuccess ? r : r2));
  FMCall(FMCudaEventRecord(g->ev_c1[s], g->cs));
  return FM_SUCCESS;
}

/*
 * FMDistNCCLConnect_Private - a dry run of every exchange step (the same operations and sizes;
 * the sends read a scratch buffer, the receives fill the stage buffers). NCCL sets up a pair's
 * point-to-point connections (channels, protocols) at the first operations that need them, and
 * that set-up blocks the host until the peer takes part: a rank whose step failed would then
 * stall its peers on the host before they learn of the failure. After this run, done while
 * every rank is in the same collective call (set-up, or the first forward on new
 * communicators), a lost peer leaves only device-side waits, which the abort ends. Collective.
 */
FMErrorCode FMDistNCCLConnect_Private(FMPlan plan, FMDist *d, FMDistGPU *g)
{
  size_t row = row_bytes(plan), mx = 1;
  FMErrorCode ierr;
  for (int s = 0; s < g->nsteps; s++)
    for (int i = 0; i < g->st[s].nsend; i++) {
      size_t len = FMDistChunkLen_Private(d, g->st[s].send[i].chunk) * row;
      mx = len > mx ? len : mx;
    }
  ierr = FMCudaMalloc(mx, (void **)&g->ping); /* a send buffer for connecting NCCL */
  /* the receives fill the stage buffers: after the plan's stream is done with them (a forward
     of this plan may still be computing when another plan's abort brings new communicators) */
  if (!ierr) ierr = cuda_code(cudaStreamSynchronize((cudaStream_t)plan->stream), "waiting for the plan's stream before connecting NCCL", -1);
  ierr = FMAgreeCode(plan->hdr.comm, ierr);
  for (int s = 0; s < g->nsteps && !ierr; s++) ierr = FMDistExchangeNCCL_Private(plan, d, g, s, NULL, NULL, 1);
  /* every rank posted everything before any waits (a rank that failed to post goes to the
     abort below with the others, instead of leaving them in the wait); the wait is not
     cudaStreamSynchronize: it polls NCCL's asynchronous errors and honours -fm_nccl_timeout */
  ierr = FMAgreeCode(plan->hdr.comm, ierr);
  if (!ierr) ierr = FMCudaEventRecord(g->ev_done, g->cs);
  if (!ierr) ierr = FMContextNCCLWait_Private(plan->ctx, g->ev_done, "the NCCL connection run");
  ierr = FMAgreeCode(plan->hdr.comm, ierr);
  if (ierr) { /* every rank: abort, which ends the operations left waiting, before any free */
    (void)FMContextAbortNCCL_Private(plan->ctx);
    g->nccl = NULL;
    g->gen = 0;
    (void)cudaStreamSynchronize((cudaStream_t)g->cs);
  }
  if (g->ping && !ierr) ierr = FMCudaFree(g->ping);
  else if (g->ping) (void)cudaFree(g->ping); /* after the connection's first error, ignored (it is not news) */
  g->ping = NULL;
  FMCall(FMAgreeCode(plan->hdr.comm, ierr));
  return FM_SUCCESS;
}
#endif

/*
 * Staged: copy the outgoing chunks down, exchange every message of the step (one per chunk,
 * tag = chunk), copy the arrivals up; the uploads finish on the comm stream (event ev_c1[s]).
 */
static FMErrorCode exchange_staged(FMPlan plan, FMDist *d, FMDistGPU *g, int s, const void *k, const void *v, double t[2])
{
  const GStep *S = &g->st[s];
  size_t row = row_bytes(plan), B = (size_t)plan->batch, o = 0;
  MPI_Request *rq;
  int nr = S->nsend + S->nrecv;
  FMErrorCode ierr = FM_SUCCESS; /* the first failure; the step's messages are posted regardless */
  FMDistPieces it;
  FMDistPiece pc;
  keep_fm(&ierr, FMCudaEventRecord(g->ev_c0[s], g->cs));
  t[0] = FMTime();
  /* the copies stay on the runtime (asynchronous, with the step's error discipline: keep_cuda) */
  for (FMDistPiecesBegin_Private(&it, d, S->send, S->nsend, B, row); FMDistPiecesNext_Private(&it, &pc); o += pc.len)
    keep_cuda(&ierr, cudaMemcpyAsync(g->hsend + o, held(d, g, k, v, &pc, row), pc.len, cudaMemcpyDeviceToHost, (cudaStream_t)g->cs),
              "cudaMemcpyAsync (device to host)", s);
  keep_cuda(&ierr, cudaStreamSynchronize((cudaStream_t)g->cs), "cudaStreamSynchronize", s);
  /* the peers wait for these messages: they are posted even after a failure above (the data
     is then not trusted: the error is returned and agreed at the end of the forward); the
     requests were allocated at set-up (g->rq, room for the largest step) */
  rq = g->rq;
  for (int i = 0; i < nr; i++) rq[i] = MPI_REQUEST_NULL;
  o = 0;
  for (int i = 0; i < S->nrecv; i++) {
    const GXfer *x = &S->recv[i];
    keep_mpi(&ierr, FMMPIIrecv_Private(g->hrecv + o, (size_t)d->cbytes[x->chunk], MPI_BYTE, x->peer, x->chunk, plan->hdr.comm, &rq[i]),
             "MPI_Irecv", s);
    o += (size_t)d->cbytes[x->chunk];
  }
  o = 0;
  for (int i = 0; i < S->nsend; i++) {
    const GXfer *x = &S->send[i];
    keep_mpi(&ierr, FMMPIIsend_Private(g->hsend + o, (size_t)d->cbytes[x->chunk], MPI_BYTE, x->peer, x->chunk, plan->hdr.comm,
                                        &rq[S->nrecv + i]),
             "MPI_Isend", s);
    o += (size_t)d->cbytes[x->chunk];
  }
  keep_mpi(&ierr, MPI_Waitall(nr, rq, MPI_STATUSES_IGNORE), "MPI_Waitall", s);
  t[1] = FMTime();
  o = 0;
  for (FMDistPiecesBegin_Private(&it, d, S->recv, S->nrecv, B, row); !ierr && FMDistPiecesNext_Private(&it, &pc); o += pc.len)
    keep_cuda(&ierr, cudaMemcpyAsync(recv_addr(g, s, &pc, row), g->hrecv + o, pc.len, cudaMemcpyHostToDevice, (cudaStream_t)g->cs),
              "cudaMemcpyAsync (host to device)", s);
  if (!ierr) ierr = FMCudaEventRecord(g->ev_c1[s], g->cs); /* after a failure ev_c1 stays unrecorded: the data is not used */
  return ierr;
}

/*
 * CUDA-aware MPI on device buffers: every piece is one message, tag piece_tag(), sent from where
 * the chunk is held and received into the stage buffer; receives are posted first, then sends,
 * in the step's order on both sides. The data sent is ready (the caller waited for ev_in;
 * relayed chunks arrived in an earlier step that the host completed); ev_c1[s] then marks the
 * arrivals on the comm stream.
 */
static FMErrorCode exchange_device(FMPlan plan, FMDist *d, FMDistGPU *g, int s, const void *k, const void *v, double t[2])
{
  const GStep *S = &g->st[s];
  size_t row = row_bytes(plan), B = (size_t)plan->batch;
  MPI_Comm comm = plan->hdr.comm;
  MPI_Request *rq = g->rq;
  int n = 0;
  FMErrorCode ierr = FM_SUCCESS, cerr;
  FMDistPieces it;
  FMDistPiece pc;
  cerr = FMCudaEventRecord(g->ev_c0[s], g->cs);
  t[0] = FMTime();
  for (FMDistPiecesBegin_Private(&it, d, S->recv, S->nrecv, B, row); FMDistPiecesNext_Private(&it, &pc); n++) {
    int e = FMMPIIrecv_Private(recv_addr(g, s, &pc, row), pc.len, MPI_BYTE, pc.peer, piece_tag(&pc, B), comm, &rq[n]);
    if (e) rq[n] = MPI_REQUEST_NULL;
    keep_mpi(&ierr, e, "MPI_Irecv on device buffers (CUDA-aware MPI; -fm_gpu_aware_mpi 0 stages through host memory)", s);
  }
  for (FMDistPiecesBegin_Private(&it, d, S->send, S->nsend, B, row); FMDistPiecesNext_Private(&it, &pc); n++) {
    int e = FMMPIIsend_Private(held(d, g, k, v, &pc, row), pc.len, MPI_BYTE, pc.peer, piece_tag(&pc, B), comm, &rq[n]);
    if (e) rq[n] = MPI_REQUEST_NULL;
    keep_mpi(&ierr, e, "MPI_Isend on device buffers (CUDA-aware MPI; -fm_gpu_aware_mpi 0 stages through host memory)", s);
  }
  keep_mpi(&ierr, MPI_Waitall(n, rq, MPI_STATUSES_IGNORE), "MPI_Waitall on device buffers (CUDA-aware MPI)", s);
  t[1] = FMTime();
  if (!cerr) cerr = FMCudaEventRecord(g->ev_c1[s], g->cs);
  if (!ierr) ierr = cerr;
  return ierr;
}

/* FMDistExchangeMPI_Private - see gpuimpl.h. */
FMErrorCode FMDistExchangeMPI_Private(FMPlan plan, FMDist *d, FMDistGPU *g, int s, const void *k, const void *v, double t[2])
{
  FMCall(g->direct ? exchange_device(plan, d, g, s, k, v, t) : exchange_staged(plan, d, g, s, k, v, t));
  return FM_SUCCESS;
}
