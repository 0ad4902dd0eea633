/*
 * exec_gpu_bwd.c - the context-parallel backward on the CUDA backend (built with CUDA only;
 * collective), on the forward's pipeline (exec_gpu.c): the K/V of every stage are gathered
 * again exactly as the forward gathers them (the same steps, transports and stage buffers: the
 * caller passes k, v again), and each stage is one backward piece (FMCudaBackwardPiece, under
 * the stage's uploaded mask) on the plan's stream, in the fixed stage order (the local stage,
 * then the steps in order; with -fm_plan_overlap 0 after the whole exchange): dQ accumulates
 * in the pieces' workspace, in that order. The local stage writes the own keys' dK/dV straight
 * into the rank's fp32 accumulator (dacc); each step's stage writes the float partials of the
 * keys that arrived in it (ppool), which a low-priority stream downloads to pinned memory
 * behind the stage while later stages compute.
 *
 * The partials then go back over the reverse route, as the CPU executor's (reduce.c): every
 * chunk a rank received is summed here with the partials that come back from the ranks it
 * forwarded the chunk to (in step order), and the sum goes to the rank it came from; at the
 * owner the children's sums are added to the own partial in the same order, uploaded, and dk,
 * dv converted on the device. Messages are MPI on the host (tag nchunks + chunk) whatever the
 * K/V transport; the gather's routes and the ring's chains are both trees of the steps'
 * transfers. Every rank agrees on its local state before the first message, and on the
 * exchange's and the downloads' outcome before the first partial moves.
 */
#include "gpuimpl.h"
#include <cuda_runtime_api.h>
#include <flashmask/private/fmtracing.h>
#include <stdlib.h>
#include <string.h>

/* One transfer of this rank as the reduction sees it: a chunk's partial to or from peer. */
typedef struct {
  int step, chunk, peer;
  size_t off;            /* float offset in g->hred: the child's partial (a send), the sum sent up (a receive) */
  double post;           /* when its message was posted (trace) */
} BXfer;

/* The backward's layout in the pools and its transfers. */
typedef struct {
  FMAttnProblem p;       /* the pieces' rows (nk set per stage) */
  const void *dout;
  size_t rowf;           /* floats of one key position (heads_kv x head_dim) */
  size_t *poff;          /* [nsteps] float offset of step s's partials in ppool (dK, then dV) */
  size_t ptotal, nown;   /* floats used in ppool; floats of dacc */
  int own_host;          /* some owned chunk was sent: its children's sums come back, the own partial goes through the host */
  int ns, nr;            /* sends (children) and receives (parents) of this rank, every step */
  BXfer *sx, *rx;
  MPI_Request *crq, *prq; /* [ns] children's partials, [nr] sums sent up */
  int *pending;          /* [C] children's partials still to arrive here; -1 once done (or not summed here) */
  int *rxof;             /* [C] the receive that brought chunk c here, -1 if none */
  FMErrorCode err;       /* the reduction's first failure (host_reduce: it still completes its part) */
  char errmsg[FM_ERRMSG_MAX]; /* its message, put back when host_reduce returns it */
} Bwd;

#define FM_BWD_ALIGN 64 /* floats: 256-byte alignment of each step's partials inside ppool */

/* Floats of chunk c's partial: dK then dV, [B][len][Hkv][D] each. */
static size_t part_len(FMPlan plan, const FMDist *d, const Bwd *W, int c)
{
  return 2 * (size_t)plan->batch * FMDistChunkLen_Private(d, c) * W->rowf;
}

/* The rows' problem, the partials' layout and this rank's transfers (not collective). */
static FMErrorCode bwd_layout(FMPlan plan, FMDist *d, FMDistGPU *g, Bwd *W, size_t *hred)
{
  const size_t B = (size_t)plan->batch;
  const int me = plan->ctx->rank;
  FMMaskDesc m;
  size_t off = 0, h = 0;
  FMCall(FMMaskGetDesc_Private(plan->mask, &m));
  memset(&W->p, 0, sizeof(W->p));
  W->p.batch = plan->batch; W->p.heads_q = plan->heads_q; W->p.heads_kv = plan->heads_kv; W->p.head_dim = plan->head_dim;
  W->p.dtype = plan->dtype;
  W->p.scale = (float)plan->scale;
  W->p.nq = plan->nlocal;
  W->p.mask.mask_heads = m.mask_heads; /* what the stage masks were uploaded with */
  W->p.nthreads = plan->ctx->threads;
  FMPlanKernelOptions_Private(plan, &W->p.opts);
  W->rowf = (size_t)plan->heads_kv * plan->head_dim;
  FMCall(FMMalloc(g->nsteps + 1, &W->poff));
  for (int s = 0; s < g->nsteps; s++) {
    W->poff[s] = off;
    off += (2 * B * (size_t)g->st[s].nk * W->rowf + FM_BWD_ALIGN - 1) / FM_BWD_ALIGN * FM_BWD_ALIGN;
    W->ns += g->st[s].nsend;
    W->nr += g->st[s].nrecv;
  }
  W->ptotal = off;
  W->nown = 2 * B * (size_t)d->nkeys * W->rowf;
  FMCall(FMMalloc(W->ns + 1, &W->sx));
  FMCall(FMMalloc(W->nr + 1, &W->rx));
  FMCall(FMMalloc(W->ns + 1, &W->crq));
  FMCall(FMMalloc(W->nr + 1, &W->prq));
  FMCall(FMCalloc(d->ch.nchunks, &W->pending));
  FMCall(FMMalloc(d->ch.nchunks, &W->rxof));
  for (int c = 0; c < d->ch.nchunks; c++) W->rxof[c] = -1;
  W->ns = W->nr = 0;
  for (int s = 0; s < g->nsteps; s++) {
    for (int i = 0; i < g->st[s].nsend; i++) {
      const GXfer *x = &g->st[s].send[i];
      W->sx[W->ns++] = (BXfer){s, x->chunk, x->peer, h, 0};
      h += part_len(plan, d, W, x->chunk);
      W->own_host |= d->part.owner[x->chunk] == me;
    }
    for (int i = 0; i < g->st[s].nrecv; i++) {
      const GXfer *x = &g->st[s].recv[i];
      W->rxof[x->chunk] = W->nr;
      W->rx[W->nr++] = (BXfer){s, x->chunk, x->peer, h, 0};
      h += part_len(plan, d, W, x->chunk);
    }
  }
  for (int i = 0; i <= W->ns; i++) W->crq[i] = MPI_REQUEST_NULL;
  for (int i = 0; i <= W->nr; i++) W->prq[i] = MPI_REQUEST_NULL;
  *hred = h;
  return FM_SUCCESS;
}

/* The local part of the backward's set-up: layout, pools (grown, kept in g), the download stream. */
static FMErrorCode bwd_prepare(FMPlan plan, FMDist *d, FMDistGPU *g, Bwd *W)
{
  size_t hred = 0, ws = 0;
  FMCall(bwd_layout(plan, d, g, W, &hred));
  if (plan->nlocal > 0) ws = FMCudaBackwardPiecesBytes(&W->p);
  FMCall(FMDistGPUDevGrow_Private(ws, ws, &g->bws, &g->bwscap));
  FMCall(FMDistGPUDevGrow_Private(W->nown * sizeof(float), W->nown * sizeof(float), (void **)&g->dacc, &g->dacap));
  /* a quarter more room, as the stage buffers: the next partition's steps mostly fit */
  FMCall(FMDistGPUDevGrow_Private(W->ptotal * sizeof(float), W->ptotal * sizeof(float) / 4 * 5 + 256, (void **)&g->ppool, &g->ppcap));
  FMCall(FMDistGPUHostGrow_Private((W->ptotal + W->nown) * sizeof(float), &g->hpart, &g->hpcap));
  FMCall(FMDistGPUHostGrow_Private(hred * sizeof(float), &g->hred, &g->hredcap));
  if (!g->rs) FMCall(FMCudaStreamCreate(0, &g->rs));
  return FM_SUCCESS;
}

static void bwd_free(Bwd *W)
{
  free(W->poff); free(W->sx); free(W->rx); free(W->crq); free(W->prq); free(W->pending); free(W->rxof);
  memset(W, 0, sizeof(*W));
}

/*
 * The backward's stage s (-1: the local one) on the plan's stream once its K/V are there: one
 * piece, or zeros when no local row sees its keys; then, on the download stream behind it, the
 * partials into pinned memory (a step's always, the own ones when the host adds children's).
 */
static FMErrorCode backward_stage(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R, int s)
{
  Bwd *W = (Bwd *)R->ctx;
  void *us = plan->stream;
  void *dm = s < 0 ? g->dmask0 : g->st[s].dmask;
  const int nk = s < 0 ? d->nkeys : g->st[s].nk;
  const size_t n = (size_t)plan->batch * nk * W->rowf; /* floats of the stage's dK (its dV follows) */
  float *dk32 = s < 0 ? g->dacc : g->ppool + W->poff[s];
  const void *k = s < 0 ? R->k : g->st[s].kbuf, *v = s < 0 ? R->v : g->st[s].vbuf;
  FMAttnProblem p = W->p;
  if (nk == 0) return FM_SUCCESS;
  FMCall(FMCudaEventRecord(g->ev_w0[s + 1], us));
  if (s >= 0) FMCall(FMCudaStreamWaitEvent(us, g->ev_c1[s]));
  FMCall(FMCudaEventRecord(g->ev_k0[s + 1], us));
  if (dm && plan->nlocal > 0) {
    p.nk = nk;
    FMCall(FMCudaBackwardPiece(&p, dm, g->bws, R->q, k, v, W->dout, dk32, dk32 + n, us));
    R->ran[s + 1] = 1;
  } else FMCall(FMCudaFillFloat(dk32, 2 * n, 0.f, us));
  FMCall(FMCudaEventRecord(g->ev_k1[s + 1], us));
  if (s >= 0 || W->own_host) {
    float *h = (float *)g->hpart + (s < 0 ? W->ptotal : W->poff[s]);
    FMCall(FMCudaStreamWaitEvent(g->rs, g->ev_k1[s + 1]));
    FMCallCUDA(cudaMemcpyAsync(h, dk32, 2 * n * sizeof(float), cudaMemcpyDeviceToHost, (cudaStream_t)g->rs));
  }
  return FM_SUCCESS;
}

/* dst[0..n) += src[0..n). */
static void add_into(float *dst, const float *src, size_t n)
{
  for (size_t t = 0; t < n; t++) dst[t] += src[t];
}

/* Record a trace event of the reduction (no-op untraced); a failure is kept in *terr and the
   reduction goes on (its peers wait for its messages). */
static void bwd_record(FMDistGPURun *R, FMErrorCode *terr, int kind, double t0, double t1, double bytes, int peer, int chunk)
{
  FMErrorCode e;
  if (!R->tr || *terr) return;
  e = FMTraceRecord_Private((FMTrace)R->tr, kind, 1, t0, t1 < t0 ? t0 : t1, bytes, 0, peer, chunk);
  if (e) *terr = FMErrorTraceback(__FILE__, __func__, __LINE__, e);
}

/*
 * Chunk c is final here (every child's partial arrived). Received here (rx >= 0, its receive):
 * its stage partial plus the children's, in step order, sent to the rank it came from. Owned:
 * the children's added into the own partial (downloaded to hpart after ppool's floats).
 */
static FMErrorCode finish_chunk(FMPlan plan, FMDist *d, FMDistGPU *g, Bwd *W, int c, int rx)
{
  const size_t B = (size_t)plan->batch, len = FMDistChunkLen_Private(d, c), sl = len * W->rowf, n = part_len(plan, d, W, c);
  const float *hp = (const float *)g->hpart;
  float *dst;
  int me;
  if (rx >= 0) {
    const BXfer *x = &W->rx[rx];
    const GStep *S = &g->st[x->step];
    const float *src = hp + W->poff[x->step];
    dst = (float *)g->hred + x->off;
    for (size_t b = 0; b < B; b++) {
      memcpy(dst + b * sl, src + (b * (size_t)S->nk + (size_t)g->woff[c]) * W->rowf, sl * sizeof(float));
      memcpy(dst + (B + b) * sl, src + ((B + b) * (size_t)S->nk + (size_t)g->woff[c]) * W->rowf, sl * sizeof(float));
    }
    for (int i = 0; !W->err && i < W->ns; i++) /* children in step order: deterministic sums */
      if (W->sx[i].chunk == c) add_into(dst, (const float *)g->hred + W->sx[i].off, n);
    /* sent even after a failure (the parent waits for it; the data is then not trusted) */
    if ((me = FMMPIIsend_Private(dst, n, MPI_FLOAT, x->peer, d->ch.nchunks + c, plan->hdr.comm, &W->prq[rx])) != MPI_SUCCESS) {
      W->prq[rx] = MPI_REQUEST_NULL;
      return FMMPIError_Private(me, "MPI_Isend (a dK/dV sum to its parent)", __FILE__, __func__, __LINE__);
    }
    W->rx[rx].post = FMTime();
    d->stats.reduce_bytes += (double)n * sizeof(float);
    FMCall(FMFaultAt("gpu_reduce_send"));
  } else if (!W->err) {
    float *own = (float *)g->hpart + W->ptotal;
    const size_t nk = (size_t)d->nkeys;
    for (int i = 0; i < W->ns; i++)
      if (W->sx[i].chunk == c) {
        const float *ch = (const float *)g->hred + W->sx[i].off;
        for (size_t b = 0; b < B; b++) {
          add_into(own + (b * nk + (size_t)d->kofs[c]) * W->rowf, ch + b * sl, sl);
          add_into(own + ((B + b) * nk + (size_t)d->kofs[c]) * W->rowf, ch + (B + b) * sl, sl);
        }
      }
  }
  W->pending[c] = -1;
  return FM_SUCCESS;
}

/* Keep the reduction's first failure in W->err (the reduction goes on: its peers wait for its messages). */
static void bwd_keep(Bwd *W, FMErrorCode e)
{
  if (e && !W->err) {
    W->err = e;
    snprintf(W->errmsg, sizeof(W->errmsg), "%s", FMGetLastErrorMessage());
  }
}

/* Post the receives of every child's partial (all of them, whatever failed: a child whose
   receive could not be posted is not waited for). */
static void reduce_post(FMPlan plan, FMDist *d, FMDistGPU *g, Bwd *W)
{
  for (int i = 0; i < W->ns; i++) {
    const BXfer *x = &W->sx[i];
    int me = FMMPIIrecv_Private((float *)g->hred + x->off, part_len(plan, d, W, x->chunk), MPI_FLOAT, x->peer, d->ch.nchunks + x->chunk,
                                plan->hdr.comm, &W->crq[i]);
    W->sx[i].post = FMTime();
    if (me == MPI_SUCCESS) W->pending[x->chunk]++;
    else {
      W->crq[i] = MPI_REQUEST_NULL;
      bwd_keep(W, FMMPIError_Private(me, "MPI_Irecv (a child's dK/dV partial)", __FILE__, __func__, __LINE__));
    }
  }
}

/* Wait for the next child's partial; a failure is kept in W->err, and the wait completes this
   rank's part anyway (FMDistWaitChild_Private). */
static void reduce_next(FMPlan plan, FMDist *d, Bwd *W, FMDistGPURun *R, FMErrorCode *terr, int left)
{
  int idx;
  double t0, t1;
  bwd_keep(W, FMDistWaitChild_Private(W->ns, W->crq, d->ch.nchunks, W->pending, left, "gpu_reduce_wait", &idx, &t0, &t1));
  if (idx == MPI_UNDEFINED) return;
  bwd_record(R, terr, FM_TRACE_WAIT, t0, t1, 0, -1, -1);
  bwd_record(R, terr, FM_TRACE_RECV, W->sx[idx].post, t1, 4.0 * part_len(plan, d, W, W->sx[idx].chunk), W->sx[idx].peer, W->sx[idx].chunk);
  if (W->pending[W->sx[idx].chunk] > 0) W->pending[W->sx[idx].chunk]--;
}

/*
 * The reduction (collective; after FMDistGPUSettle_Private agreed on the exchange): the
 * downloads completed and agreed, every child's partial received, each chunk finished as soon
 * as its children are in (sums sent up at once), the sums sent up completed, the own partial
 * uploaded again when children were added to it. After the downloads' agreement nothing
 * returns before every message of this rank moved and every request completed: a failure is
 * kept in W->err, returned at the end, and agreed by FMDistGPURunFinish_Private (the ranks
 * make no other collective call in between).
 */
static FMErrorCode host_reduce(FMPlan plan, FMDist *d, FMDistGPU *g, Bwd *W, FMDistGPURun *R)
{
  const int C = d->ch.nchunks;
  const int me = plan->ctx->rank;
  int left = 0, mpierr;
  double t0, t1;
  FMErrorCode terr = FM_SUCCESS, e;
  e = FMCudaStreamSynchronize(g->rs);
  if (!e) e = FMFaultAt("gpu_reduce_download");
  FMCall(FMAgreeCode(plan->hdr.comm, e));
  reduce_post(plan, d, g, W);
  /* summed here: the chunks received here and the owned ones with children */
  for (int c = 0; c < C; c++)
    if (W->rxof[c] >= 0 || (W->pending[c] > 0 && d->part.owner[c] == me)) left++;
    else W->pending[c] = -1;
  for (;;) {
    for (int c = 0; c < C; c++)
      if (W->pending[c] == 0) {
        int rx = W->rxof[c];
        W->pending[c] = -1;
        bwd_keep(W, finish_chunk(plan, d, g, W, c, rx));
        left--;
      }
    if (left == 0) break;
    reduce_next(plan, d, W, R, &terr, left);
  }
  t0 = FMTime();
  mpierr = MPI_Waitall(W->nr, W->prq, MPI_STATUSES_IGNORE);
  t1 = FMTime();
  if (mpierr != MPI_SUCCESS) bwd_keep(W, FMMPIError_Private(mpierr, "MPI_Waitall (the dK/dV sums sent up)", __FILE__, __func__, __LINE__));
  if (W->err) FMErrorMessageSet_Private(W->errmsg); /* the first failure's message, not a later one's */
  FMCall(W->err);
  bwd_record(R, &terr, FM_TRACE_WAIT, t0, t1, 0, -1, -1);
  for (int i = 0; i < W->nr; i++)
    bwd_record(R, &terr, FM_TRACE_REDUCE, W->rx[i].post, t1, 4.0 * part_len(plan, d, W, W->rx[i].chunk), W->rx[i].peer, W->rx[i].chunk);
  FMCall(FMFaultAt("gpu_reduce_upload"));
  if (W->own_host && W->nown > 0)
    FMCallCUDA(cudaMemcpyAsync(g->dacc, (float *)g->hpart + W->ptotal, W->nown * sizeof(float), cudaMemcpyHostToDevice,
                               (cudaStream_t)plan->stream));
  FMCall(terr);
  return FM_SUCCESS;
}

FMErrorCode FMDistBackwardGPU_Private(FMPlan plan, const void *q, const void *k, const void *v, const void *o, const float *lse,
                                      const void *dout, void *dq, void *dk, void *dv)
{
  FMDist *d = (FMDist *)plan->data;
  FMDistGPU *g = d ? (FMDistGPU *)d->gpu : NULL;
  void *us = plan->stream;
  FMErrorCode ierr = FM_SUCCESS;
  FMDistGPURun R;
  Bwd W;

  FMCheck(g, MPI_COMM_SELF, FM_ERR_ORDER, "The plan has no GPU executor (call FMPlanSetUp on the CUDA backend first)");
  memset(&R, 0, sizeof(R));
  memset(&W, 0, sizeof(W));
  R.q = q; R.k = k; R.v = v; R.compute = backward_stage; R.ctx = &W; R.flops_factor = 2.5;
  W.dout = dout;
  /* every local allocation (layout, pools, stream) is agreed before the first message */
  ierr = FMDistGPURunInit_Private(plan, d, g, &R, bwd_prepare(plan, d, g, &W));
  if (ierr) {
    bwd_free(&W);
    return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr);
  }
  FMCallGoto(FMDistGPURunStart_Private(plan, d, g, &R, "backward"));
  if (plan->nlocal > 0) {
    /* the rows' preprocess from the final O and LSE, queued before the first piece */
    if (!R.cerr) R.cerr = FMCudaBackwardBegin(&W.p, g->bws, o, lse, dout, us); /* (a failed run start comes first) */
    if (R.cerr) R.cerr = FMErrorTraceback(__FILE__, __func__, __LINE__, R.cerr);
  }
  FMDistGPUPipeline_Private(plan, d, g, &R);
  FMCallGoto(FMDistGPUSettle_Private(plan, d, g, &R, "the K/V exchange of the backward"));
  FMCallGoto(host_reduce(plan, d, g, &W, &R));
  if (W.nown > 0) {
    FMCallGoto(FMCudaConvertOut(g->dacc, dk, plan->dtype, W.nown / 2, us));
    FMCallGoto(FMCudaConvertOut(g->dacc + W.nown / 2, dv, plan->dtype, W.nown / 2, us));
  }
  if (plan->nlocal > 0) FMCallGoto(FMCudaBackwardEnd(&W.p, g->bws, dq, us));
  if (R.tr) {
    FMCallGoto(FMCudaStreamSynchronize(us));
    FMCallGoto(FMDistGPUTrace_Private(plan, d, g, &R));
  }
cleanup:
  /* the downloads read ppool and write hpart: done before the next call reuses them (errors
     ignored here: after a failure the call's own error is the news) */
  if (ierr && g->rs) { (void)cudaStreamSynchronize((cudaStream_t)g->rs); (void)cudaGetLastError(); }
  bwd_free(&W);
  FMCall(FMDistGPURunFinish_Private(plan, d, g, &R, "backward", ierr));
  return FM_SUCCESS;
}
