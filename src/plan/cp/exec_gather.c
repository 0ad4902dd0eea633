/*
 * exec_gather.c - the CPU executor's pruned, routed K/V gather (-fm_plan_schedule gather):
 * FMPlanForward_CP (overlapped with the compute on arrived chunks, exact LSE merging) and
 * FMPlanBackward_CP (dK/dV reduced to the owners over the reverse route: reduce.c); the ring
 * schedule runs through the same entry points (exec_ring.c), the GPU forward through exec_gpu.c.
 */
#include "distimpl.h"
#include <flashmask/private/fmtracing.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Pack an owned chunk out of the local k, v ([B][nkeys][Hkv][D]) into buf[c]. */
static FMErrorCode pack_own(FMDistExec *e, int c, const void *k, const void *v)
{
  size_t len = FMDistChunkLen_Private(e->d, c), B = (size_t)e->plan->batch, nk = (size_t)e->d->nkeys, sz = len * e->row_kv;
  char *b;
  FMCall(FMMalloc(2 * B * sz + 1, &e->buf[c]));
  b = e->buf[c];
  for (size_t bb = 0; sz && bb < B; bb++) { /* an empty chunk: k, v may be NULL (no keys here) */
    memcpy(b + bb * sz, (const char *)k + (bb * nk + (size_t)e->d->kofs[c]) * e->row_kv, sz);
    memcpy(b + (B + bb) * sz, (const char *)v + (bb * nk + (size_t)e->d->kofs[c]) * e->row_kv, sz);
  }
  return FM_SUCCESS;
}

/* The K/V gather's local part: pack the owned chunks, allocate every incoming one. Not collective. */
static FMErrorCode gather_alloc(FMDistExec *e, const void *k, const void *v)
{
  FMDist *d = e->d;
  int me = e->plan->ctx->rank;
  for (int c = 0; c < d->ch.nchunks; c++)
    if (d->part.owner[c] == me) FMCall(pack_own(e, c, k, v));
  for (int i = 0; i < d->nin; i++) FMCall(FMMalloc((size_t)d->cbytes[d->in[i].chunk] + 1, &e->buf[d->in[i].chunk]));
  return FM_SUCCESS;
}

/*
 * Post the K/V gather (after gather_alloc, agreed): receives for every incoming chunk, sends
 * of owned chunks (any length: FMMPIIsend_Private). Every message is posted even after one
 * failed (the peers wait for the others); the first failure is returned.
 */
static FMErrorCode gather_post(FMDistExec *e)
{
  FMDist *d = e->d;
  MPI_Comm comm = e->plan->hdr.comm;
  FMErrorCode first = FM_SUCCESS;
  for (int i = 0; i < d->nin; i++) {
    int c = d->in[i].chunk, me;
    me = FMMPIIrecv_Private(e->buf[c], (size_t)d->cbytes[c], MPI_BYTE, d->in[i].src, c, comm, &e->rreq[i]);
    if (me != MPI_SUCCESS) {
      e->rreq[i] = MPI_REQUEST_NULL;
      if (!first) first = FMMPIError_Private(me, "MPI_Irecv (a K/V chunk of the gather)", __FILE__, __func__, __LINE__);
    }
    e->rpost[i] = FMTime();
  }
  for (int i = 0; i < d->nout; i++)
    if (d->out[i].stage == 0) {
      int c = d->out[i].chunk, me;
      me = FMMPIIsend_Private(e->buf[c], (size_t)d->cbytes[c], MPI_BYTE, d->out[i].dst, c, comm, &e->sreq[i]);
      if (me != MPI_SUCCESS) {
        e->sreq[i] = MPI_REQUEST_NULL;
        if (!first) first = FMMPIError_Private(me, "MPI_Isend (a K/V chunk of the gather)", __FILE__, __func__, __LINE__);
      }
      e->spost[i] = FMTime();
      d->stats.sent_bytes[d->out[i].level] += d->cbytes[c];
    }
  return first;
}

/* After chunk c arrived here: forward it to the ranks this rank relays it to (once: a relay
   already posted, spost set, is not posted again). Every relay is posted; the first failure is returned. */
static FMErrorCode relay(FMDistExec *e, int c)
{
  FMDist *d = e->d;
  FMErrorCode first = FM_SUCCESS;
  for (int i = 0; i < d->nout; i++)
    if (d->out[i].stage == 1 && d->out[i].chunk == c && e->spost[i] == 0) {
      int me = FMMPIIsend_Private(e->buf[c], (size_t)d->cbytes[c], MPI_BYTE, d->out[i].dst, c, e->plan->hdr.comm, &e->sreq[i]);
      if (me != MPI_SUCCESS) {
        e->sreq[i] = MPI_REQUEST_NULL;
        if (!first) first = FMMPIError_Private(me, "MPI_Isend (a relayed K/V chunk)", __FILE__, __func__, __LINE__);
      } else if (!first) first = FMFaultAt("cp_relay");
      e->spost[i] = FMTime(); /* nonzero: posted */
      d->stats.sent_bytes[d->out[i].level] += d->cbytes[c];
      d->stats.relayed_bytes += d->cbytes[c];
    }
  return first;
}

/* A wait of the gather failed without naming its request: every receive still open is waited
   for at once and every arrived chunk relayed, so that this rank still keeps its part. */
static FMErrorCode gather_drain(FMDistExec *e, FMErrorCode why)
{
  int me = MPI_Waitall(e->d->nin, e->rreq, MPI_STATUSES_IGNORE);
  for (int i = 0; i < e->d->nin; i++) {
    e->rreq[i] = MPI_REQUEST_NULL; /* completed (or failed: not waited for again) */
    (void)FMDistExecKeep_Private(e, relay(e, e->d->in[i].chunk));
  }
  if (me != MPI_SUCCESS) (void)FMDistExecKeep_Private(e, FMMPIError_Private(me, "MPI_Waitall (the gather's receives, after a failed wait)", __FILE__, __func__, __LINE__));
  return why;
}

/* Wait for the next arrived chunk (relaying it); *c = -1 when all arrived. A failed wait still
   completes the gather's part of this rank (the chunk it names counts as arrived, untrusted;
   without one, gather_drain) and returns the failure. */
static FMErrorCode gather_next(FMDistExec *e, int *c)
{
  int idx = MPI_UNDEFINED, me;
  MPI_Status st;
  double t0, t1;
  FMErrorCode ierr = FM_SUCCESS;
  *c = -1;
  if (e->d->nin == 0) return FM_SUCCESS;
  t0 = FMTime();
  me = MPI_Waitany(e->d->nin, e->rreq, &idx, &st);
  t1 = FMTime();
  if (me != MPI_SUCCESS) ierr = FMMPIError_Private(me, "MPI_Waitany (the gather's next chunk)", __FILE__, __func__, __LINE__);
  else if (idx != MPI_UNDEFINED) ierr = FMFaultAt("cp_gather_wait");
  if (ierr && (idx == MPI_UNDEFINED || me == MPI_SUCCESS)) return gather_drain(e, ierr);
  if (idx == MPI_UNDEFINED) return FM_SUCCESS;
  e->rreq[idx] = MPI_REQUEST_NULL;
  if (!ierr) {
    double cnt = FMMPIStatusBytes_Private(&st, MPI_BYTE);
    FMDistExecRecord_Private(e, FM_TRACE_WAIT, t0, t1, 0, 0, -1, -1);
    e->d->stats.recv_bytes += cnt;
    FMDistExecRecord_Private(e, FM_TRACE_RECV, e->rpost[idx], t1, cnt, 0, e->d->in[idx].src, e->d->in[idx].chunk);
  }
  *c = e->d->in[idx].chunk;
  (void)FMDistExecKeep_Private(e, relay(e, *c));
  return ierr ? ierr : e->err;
}

static int chunk_here(const FMDistExec *e, int c);
static int order_at(const FMDistExec *e, int own_first, int pos);

/* One more arrival (taken, and relayed) while chunk c is missing in the fixed order of pass
   ("forward" or "backward"): 0 when every receive has completed, and then, unless an earlier
   failure drained them, an error: c never came. */
static int await_more(FMDistExec *e, int c, const char *pass)
{
  int got;
  (void)FMDistExecKeep_Private(e, gather_next(e, &got));
  if (got >= 0) return 1;
  if (!e->err)
    (void)FMDistExecKeep_Private(e, FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_LIB,
                                                    "The %s's gather: every receive completed but chunk %d never arrived", pass, c));
  return 0;
}

/* The gather forward's message phase (after the agreement): never leaves early; returns e->err. */
static FMErrorCode gather_forward(FMDistExec *e, float *oacc, float *lacc, float *opart, float *lpart, int *first)
{
  FMDist *d = e->d;
  int me = e->plan->ctx->rank, c;
  (void)FMDistExecKeep_Private(e, gather_post(e));
  if (d->opt.overlap && e->p.opts.deterministic) {
    /* -fm_deterministic: the chunks merged in one order, so that O and LSE are the same bits
       from run to run: own chunks first, then the incoming ones in route order, each as soon as
       it is here (waiting for a missing one takes, and relays, every other arrival meanwhile) */
    for (int pos = 0; (c = order_at(e, 1, pos)) != -1;)
      if (chunk_here(e, c)) {
        (void)FMDistExecKeep_Private(e, FMDistExecForwardChunk_Private(e, c, oacc, lacc, opart, lpart, first));
        pos++;
      } else if (!await_more(e, c, "forward"))
        break;
  } else if (d->opt.overlap) {
    /* local K/V first, then each chunk as it arrives while the rest are in flight */
    for (int b = d->part.rstart[me]; b < d->part.rstart[me + 1]; b++)
      (void)FMDistExecKeep_Private(e, FMDistExecForwardChunk_Private(e, d->part.rchunks[b], oacc, lacc, opart, lpart, first));
    for (;;) {
      (void)FMDistExecKeep_Private(e, gather_next(e, &c));
      if (c < 0) break;
      (void)FMDistExecKeep_Private(e, FMDistExecForwardChunk_Private(e, c, oacc, lacc, opart, lpart, first));
    }
  } else {
    /* everything first (relays still forward as chunks come), then compute in chunk order */
    do (void)FMDistExecKeep_Private(e, gather_next(e, &c));
    while (c >= 0);
    for (c = 0; c < d->ch.nchunks; c++)
      if (e->buf[c]) (void)FMDistExecKeep_Private(e, FMDistExecForwardChunk_Private(e, c, oacc, lacc, opart, lpart, first));
  }
  return e->err;
}

FMErrorCode FMPlanForward_CP(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse)
{
  FMDistExec e;
  FMDist *d;
  size_t no = 0, nl = 0;
  float *oacc = NULL, *lacc = NULL, *opart = NULL, *lpart = NULL;
  int first = 1;
  FMErrorCode ierr;

  if (plan->backend == FM_BACKEND_CUDA) {
#if FM_HAVE_CUDA
    FMCall(FMDistForwardGPU_Private(plan, q, k, v, o, lse));
    return FM_SUCCESS;
#else
    FMRaise(plan->hdr.comm, FM_ERR_SUP, "This build has no CUDA support");
#endif
  }
  /* every local allocation (FMDistExec state, accumulators, the gather's chunk buffers) is agreed
     before the first message, so one rank's failure is an error everywhere, not a hang */
  ierr = FMDistExecInit_Private(plan, &e);
  d = e.d;
  if (!ierr) {
    e.qptr = q;
    no = (size_t)plan->batch * plan->nlocal * plan->heads_q * plan->head_dim;
    nl = (size_t)plan->batch * plan->heads_q * plan->nlocal;
    ierr = FMMalloc(no + 1, &oacc);
    if (!ierr) ierr = FMMalloc(no + 1, &opart);
    if (!ierr) ierr = FMMalloc(nl + 1, &lacc);
    if (!ierr) ierr = FMMalloc(nl + 1, &lpart);
    if (!ierr && d->opt.schedule != FM_DIST_SCHED_RING) ierr = gather_alloc(&e, k, v);
  }
  FMAgreeGoto(plan->hdr.comm);
  d->stats.sent_bytes[0] = d->stats.sent_bytes[1] = d->stats.recv_bytes = d->stats.relayed_bytes = d->stats.reduce_bytes = 0;
  FMCallGoto(FMDistExecTraceBegin_Private(&e, "forward")); /* collective and agreed */
  /* from here on a rank keeps its part of the messages whatever fails (e.err), then all agree */
  if (d->opt.schedule == FM_DIST_SCHED_RING) (void)FMDistExecKeep_Private(&e, FMDistRingForward_Private(&e, k, v, oacc, lacc, opart, lpart, &first));
  else (void)gather_forward(&e, oacc, lacc, opart, lpart, &first);
  (void)FMDistExecKeep_Private(&e, FMDistExecFinishSends_Private(&e));
  FMCallGoto(FMDistExecAgree_Private(plan->hdr.comm, &e));
  if (first) { /* no visible key at all on this rank */
    for (size_t i = 0; i < no; i++) oacc[i] = 0;
    for (size_t i = 0; i < nl; i++) lacc[i] = -INFINITY;
  }
  FMDistToDType_Private(o, plan->dtype, oacc, no);
  if (lse) memcpy(lse, lacc, nl * sizeof(float));
  FMCallGoto(FMDistExecTraceEnd_Private(&e, "forward"));
cleanup:
  free(oacc); free(opart); free(lacc); free(lpart);
  FMDistExecFree_Private(&e);
  return ierr;
}


/* Chunk c is here: owned by this rank, or its receive completed (gather_next nulls the request). */
static int chunk_here(const FMDistExec *e, int c)
{
  const FMDist *d = e->d;
  if (d->part.owner[c] == e->plan->ctx->rank) return 1;
  for (int i = 0; i < d->nin; i++)
    if (d->in[i].chunk == c) return e->rreq[i] == MPI_REQUEST_NULL;
  return 0;
}

/* The backward on held chunk c with the final O and LSE: its dQ added into acc, its dK/dV partial into R->g[c]. */
static FMErrorCode chunk_backward(FMDistExec *e, FMDistReduce *R, int c, const void *q, const void *o, const float *lse, const void *dout,
                                  float *acc)
{
  FMPlan plan = e->plan;
  FMAttnProblem p = e->p;
  const size_t B = (size_t)plan->batch, len = FMDistChunkLen_Private(e->d, c), n = B * len * plan->heads_kv * plan->head_dim;
  int k0, k1;
  double t0;
  /* R->g[c] was allocated (zeroed) before the agreement; nothing computes after a failure (e->err) */
  if (e->err || !FMDistExecNeeds_Private(e, c)) return FM_SUCCESS;
  FMCall(FMFaultAt("cp_backward_chunk"));
  FMDistChunkKeys(&e->d->ch, c, &k0, &k1);
  p.k0 = k0; p.nk = (int)len;
  t0 = FMTime();
  FMCall(FMCPUBackward(&p, q, e->buf[c], e->buf[c] + B * len * e->row_kv, o, lse, dout, acc, R->g[c], R->g[c] + n, FM_DTYPE_FP32));
  FMDistExecRecord_Private(e, FM_TRACE_COMPUTE, t0, FMTime(), 0, e->tr ? 2.5 * FMDistExecFlops_Private(&p) : 0, -1, c);
  FMCall(FMDistExecPollSends_Private(e));
  return FM_SUCCESS;
}

/*
 * Entry pos of a fixed order of the held chunks: chunk order (own_first 0; -2 for a chunk not
 * held here), or this rank's own chunks, then the incoming ones in the plan's route order
 * (own_first 1); -1 past the end.
 */
static int order_at(const FMDistExec *e, int own_first, int pos)
{
  const FMDist *d = e->d;
  const int me = e->plan->ctx->rank, nown = d->part.rstart[me + 1] - d->part.rstart[me];
  if (!own_first) return pos < d->ch.nchunks ? (e->buf[pos] ? pos : -2) : -1;
  if (pos < nown) return d->part.rchunks[d->part.rstart[me] + pos];
  return pos - nown < d->nin ? d->in[pos - nown].chunk : -1;
}

/*
 * The held chunks in a fixed order, so that dQ's sum has one order (bitwise reproducible):
 * without overlap, after everything arrived, in chunk order; with overlap (-fm_deterministic),
 * own chunks first (computed while the others are in flight), then the incoming ones in route
 * order, each as soon as it is here; the wait for a missing one takes every other arrival
 * meanwhile (and relays it). While the next chunk is missing, one later chunk that is here is
 * computed into a spare accumulator (zeroed) and added to dqacc at its turn: FMCPUBackward adds
 * each of its tile sums once into the accumulator, so 0 + x, then acc + x, gives acc + x bit for
 * bit (the accumulator is never -0; only a NaN's payload may differ). No spare (its allocation
 * failed, or no overlap): just wait.
 */
static FMErrorCode backward_ordered(FMDistExec *e, FMDistReduce *R, const void *q, const void *o, const float *lse, const void *dout,
                                    float *dqacc)
{
  FMDist *d = e->d;
  FMPlan plan = e->plan;
  const size_t nqe = (size_t)plan->batch * plan->nlocal * plan->heads_q * plan->head_dim;
  const int own_first = d->opt.overlap;
  float *spare = d->opt.overlap && nqe ? (float *)malloc(sizeof(float) * nqe) : NULL;
  int pos = 0, spare_c = -1, c;
  while ((c = order_at(e, own_first, pos)) != -1) {
    if (c == -2) pos++;
    else if (spare_c == c) {
      for (size_t i = 0; i < nqe; i++) dqacc[i] += spare[i];
      spare_c = -1;
      pos++;
    } else if (chunk_here(e, c)) {
      (void)FMDistExecKeep_Private(e, chunk_backward(e, R, c, q, o, lse, dout, dqacc));
      pos++;
    } else {
      int later = -1, c2;
      for (int p2 = pos + 1; spare && spare_c < 0 && later < 0 && (c2 = order_at(e, own_first, p2)) != -1; p2++)
        if (c2 >= 0 && chunk_here(e, c2)) later = c2;
      if (later >= 0) {
        memset(spare, 0, sizeof(float) * nqe);
        (void)FMDistExecKeep_Private(e, chunk_backward(e, R, later, q, o, lse, dout, spare));
        spare_c = later;
      } else if (!await_more(e, c, "backward"))
        break;
    }
  }
  free(spare);
  return e->err;
}

/* Recompute on each held chunk with the final O and LSE: dQ accumulates over chunks, each
   chunk's dK/dV partial goes to R->g[c]. Without overlap, or with -fm_deterministic, in a fixed
   order (backward_ordered); with overlap alone, own chunks first, then each as it arrives (dQ
   then sums in arrival order). */
static FMErrorCode backward_chunks(FMDistExec *e, FMDistReduce *R, const void *q, const void *o, const float *lse, const void *dout,
                                   float *dqacc)
{
  FMDist *d = e->d;
  int me = e->plan->ctx->rank, c;
  if (!d->opt.overlap) { /* as the forward: everything arrives first (relays still forward as chunks come) */
    do (void)FMDistExecKeep_Private(e, gather_next(e, &c));
    while (c >= 0);
  }
  if (!d->opt.overlap || e->p.opts.deterministic) return backward_ordered(e, R, q, o, lse, dout, dqacc);
  for (int b = d->part.rstart[me]; b < d->part.rstart[me + 1]; b++)
    (void)FMDistExecKeep_Private(e, chunk_backward(e, R, d->part.rchunks[b], q, o, lse, dout, dqacc));
  for (;;) {
    (void)FMDistExecKeep_Private(e, gather_next(e, &c));
    if (c < 0) break;
    (void)FMDistExecKeep_Private(e, chunk_backward(e, R, c, q, o, lse, dout, dqacc));
  }
  return e->err;
}

/* The backward on host tensors over MPI (the CUDA backend stages its tensors around it). */
static FMErrorCode backward_host(FMPlan plan, const void *q, const void *k, const void *v, const void *o, const float *lse,
                                 const void *dout, void *dq, void *dk, void *dv)
{
  FMDistExec e;
  FMDistReduce R;
  FMDist *d = (FMDist *)plan->data;
  int ring = d->opt.schedule == FM_DIST_SCHED_RING;
  size_t nqe = (size_t)plan->batch * plan->nlocal * plan->heads_q * plan->head_dim;
  float *dqacc = NULL;
  FMErrorCode ierr;

  memset(&R, 0, sizeof(R));
  /* every local allocation (state, dQ accumulator, chunk buffers, dK/dV partials) is agreed
     before the first message, so one rank's failure is an error everywhere */
  ierr = FMDistExecInit_Private(plan, &e);
  if (!ierr) ierr = FMCalloc(nqe + 1, &dqacc);
  if (!ierr && !ring) ierr = FMDistReduceCreate_Private(&e, &R);
  if (!ierr && !ring) ierr = gather_alloc(&e, k, v);
  FMAgreeGoto(plan->hdr.comm);
  e.qptr = q;
  d->stats.sent_bytes[0] = d->stats.sent_bytes[1] = d->stats.recv_bytes = d->stats.relayed_bytes = d->stats.reduce_bytes = 0;
  FMCallGoto(FMDistExecTraceBegin_Private(&e, "backward")); /* collective and agreed */
  /* from here on a rank keeps its part of the messages whatever fails (e.err), then all agree */
  if (ring) (void)FMDistExecKeep_Private(&e, FMDistRingBackward_Private(&e, k, v, q, o, lse, dout, dqacc, dk, dv));
  else {
    /* dK/dV partials come back from every rank this one sent a chunk to (the reverse route) */
    (void)FMDistExecKeep_Private(&e, FMDistReducePost_Private(&e, &R));
    (void)FMDistExecKeep_Private(&e, gather_post(&e));
    (void)backward_chunks(&e, &R, q, o, lse, dout, dqacc);
    (void)FMDistExecKeep_Private(&e, FMDistReduceFinish_Private(&e, &R, dk, dv));
  }
  (void)FMDistExecKeep_Private(&e, FMDistExecFinishSends_Private(&e));
  FMCallGoto(FMDistExecAgree_Private(plan->hdr.comm, &e));
  FMDistToDType_Private(dq, plan->dtype, dqacc, nqe);
  FMCallGoto(FMDistExecTraceEnd_Private(&e, "backward"));
cleanup:
  FMDistReduceDestroy_Private(&e, &R);
  free(dqacc);
  FMDistExecFree_Private(&e);
  return ierr;
}

FMErrorCode FMPlanBackward_CP(FMPlan plan, const void *q, const void *k, const void *v, const void *o, const float *lse,
                              const void *dout, void *dq, void *dk, void *dv)
{
  if (plan->backend == FM_BACKEND_CUDA) {
#if FM_HAVE_CUDA
    /* the GPU backward (exec_gpu_bwd.c) runs every schedule the GPU forward runs: the gather's
       and the ring's steps (the ring's partials go back along its chains) */
    FMCall(FMDistBackwardGPU_Private(plan, q, k, v, o, lse, dout, dq, dk, dv));
#else
    FMRaise(plan->hdr.comm, FM_ERR_SUP, "This build has no CUDA support");
#endif
  } else FMCall(backward_host(plan, q, k, v, o, lse, dout, dq, dk, dv));
  return FM_SUCCESS;
}
