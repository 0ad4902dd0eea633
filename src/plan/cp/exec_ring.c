/*
 * exec_ring.c - the ring schedule baseline of the CPU executor (-fm_plan_schedule ring).
 */
#include "distimpl.h"
#include <flashmask/private/fmtracing.h>
#include <stdlib.h>
#include <string.h>

/* ---------------- the ring schedule baseline (-fm_plan_schedule ring) ---------------- */
/*
 * Every rank's block (its owned key chunks back to back, each laid out as K [B][len][Hkv][D]
 * then V, exactly like a gathered chunk) travels around the ring: at step s = 0..P-1 rank me
 * holds the block of rank (me - s) mod P, sends it on to me+1 and receives the next one from
 * me-1 (steps 0..P-2), non-blocking, while computing on the block it holds (-fm_plan_overlap
 * 1) or after the exchange (0). Nothing is pruned: a block whose chunks this rank never sees
 * is forwarded without computing on it. Tags 2C (K/V) and 2C+1 (dK/dV) are below the
 * MPI_TAG_UB bound checked at set-up; MPI's non-overtaking order keeps the steps apart.
 */
typedef struct {
  int P, me, next, prev, level, tag_kv, tag_g;
  double maxb;
} Ring;

static void ring_init(FMDistExec *e, Ring *R)
{
  FMDist *d = e->d;
  R->P = e->plan->ctx->size; R->me = e->plan->ctx->rank;
  R->next = (R->me + 1) % R->P; R->prev = (R->me + R->P - 1) % R->P;
  R->level = d->topo.node[R->me] != d->topo.node[R->next];
  R->tag_kv = 2 * d->ch.nchunks; R->tag_g = 2 * d->ch.nchunks + 1;
  R->maxb = 0;
  for (int r = 0; r < R->P; r++) R->maxb = d->rbytes[r] > R->maxb ? d->rbytes[r] : R->maxb;
}

static int ring_first_chunk(const FMDist *d, int r) { return d->part.rstart[r] < d->part.rstart[r + 1] ? d->part.rchunks[d->part.rstart[r]] : -1; }

/* Pack this rank's block out of the local k, v ([B][nkeys][Hkv][D]). */
static void ring_pack(FMDistExec *e, char *blk, const void *k, const void *v)
{
  FMDist *d = e->d;
  int me = e->plan->ctx->rank;
  size_t B = (size_t)e->plan->batch, nk = (size_t)d->nkeys;
  for (int b = d->part.rstart[me]; b < d->part.rstart[me + 1]; b++) {
    int c = d->part.rchunks[b];
    size_t sz = FMDistChunkLen_Private(d, c) * e->row_kv;
    char *o = blk + (size_t)d->boff[c];
    for (size_t bb = 0; sz && bb < B; bb++) { /* an empty chunk: k, v may be NULL (no keys here) */
      memcpy(o + bb * sz, (const char *)k + (bb * nk + (size_t)d->kofs[c]) * e->row_kv, sz);
      memcpy(o + (B + bb) * sz, (const char *)v + (bb * nk + (size_t)d->kofs[c]) * e->row_kv, sz);
    }
  }
}

/* Post step s's exchange: send the held block of rank r on, receive rank rn's from prev. Both
   are posted whatever failed; a failure is kept in e->err. */
static void ring_post(FMDistExec *e, const Ring *R, int r, int rn, char *cur, char *nxt, MPI_Request rq[2], double post[2])
{
  FMDist *d = e->d;
  MPI_Comm comm = e->plan->hdr.comm;
  FMDistExecKeepMPI(e, FMMPIIrecv_Private(nxt, (size_t)d->rbytes[rn], MPI_BYTE, R->prev, R->tag_kv, comm, &rq[0]), &rq[0]);
  post[0] = FMTime();
  FMDistExecKeepMPI(e, FMMPIIsend_Private(cur, (size_t)d->rbytes[r], MPI_BYTE, R->next, R->tag_kv, comm, &rq[1]), &rq[1]);
  post[1] = FMTime();
  d->stats.sent_bytes[R->level] += d->rbytes[r];
  if (r != R->me) d->stats.relayed_bytes += d->rbytes[r];
}

/* Complete step s's exchange (a WAIT event, then the RECV and SEND events); both waits happen
   whatever failed, a failure is kept in e->err. */
static void ring_wait(FMDistExec *e, const Ring *R, int r, int rn, MPI_Request rq[2], const double post[2])
{
  MPI_Status st;
  double t0 = FMTime(), t1, t2;
  double cnt;
  int bad = e->err != FM_SUCCESS;
  FMDistExecKeepMPI(e, MPI_Wait(&rq[0], &st), NULL);
  t1 = FMTime();
  FMDistExecKeepMPI(e, MPI_Wait(&rq[1], MPI_STATUS_IGNORE), NULL);
  t2 = FMTime();
  (void)FMDistExecKeep_Private(e, FMFaultAt("cp_ring_wait"));
  if (bad || e->err) return; /* no status to trust */
  cnt = FMMPIStatusBytes_Private(&st, MPI_BYTE);
  e->d->stats.recv_bytes += cnt;
  FMDistExecRecord_Private(e, FM_TRACE_WAIT, t0, t2, 0, 0, -1, -1);
  FMDistExecRecord_Private(e, FM_TRACE_RECV, post[0], t1, cnt, 0, R->prev, ring_first_chunk(e->d, rn));
  FMDistExecRecord_Private(e, FM_TRACE_SEND, post[1], t2, e->d->rbytes[r], 0, R->next, ring_first_chunk(e->d, r));
}

/* Forward on every chunk of rank r's block that this rank's rows can see. */
static FMErrorCode ring_fwd_block(FMDistExec *e, int r, char *blk, float *oacc, float *lacc, float *opart, float *lpart, int *first)
{
  FMDist *d = e->d;
  for (int b = d->part.rstart[r]; b < d->part.rstart[r + 1]; b++) {
    int c = d->part.rchunks[b];
    FMErrorCode ierr;
    e->buf[c] = blk + (size_t)d->boff[c];
    ierr = FMDistExecForwardChunk_Private(e, c, oacc, lacc, opart, lpart, first);
    e->buf[c] = NULL;
    FMCall(ierr);
  }
  return FM_SUCCESS;
}

FMErrorCode FMDistRingForward_Private(FMDistExec *e, const void *k, const void *v, float *oacc, float *lacc, float *opart, float *lpart, int *first)
{
  Ring R;
  char *cur = NULL, *nxt = NULL, *t;
  FMErrorCode ierr = FM_SUCCESS;
  ring_init(e, &R);
  ierr = FMMalloc((size_t)R.maxb + 1, &cur);
  if (!ierr) ierr = FMMalloc((size_t)R.maxb + 1, &nxt);
  FMAgreeGoto(e->plan->hdr.comm);
  ring_pack(e, cur, k, v);
  for (int s = 0; s < R.P; s++) {
    int r = (R.me - s + 2 * R.P) % R.P, rn = (R.me - s - 1 + 2 * R.P) % R.P, comm = s < R.P - 1;
    MPI_Request rq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    double post[2];
    /* every step's messages move whatever failed (e->err; nothing computes after it) */
    if (comm) ring_post(e, &R, r, rn, cur, nxt, rq, post);
    if (e->d->opt.overlap || !comm) (void)FMDistExecKeep_Private(e, ring_fwd_block(e, r, cur, oacc, lacc, opart, lpart, first));
    if (comm) ring_wait(e, &R, r, rn, rq, post);
    if (!e->d->opt.overlap && comm) (void)FMDistExecKeep_Private(e, ring_fwd_block(e, r, cur, oacc, lacc, opart, lpart, first));
    t = cur; cur = nxt; nxt = t;
  }
  ierr = e->err;
cleanup:
  free(cur); free(nxt);
  return ierr;
}

/* The dK/dV partial of rank r's block (held in cur) into gpart, dQ added into dqacc; nothing
   after a failure of the call (e->err: the zeroed partial still travels on). */
static FMErrorCode ring_bwd_block(FMDistExec *e, int r, const char *cur, float *gpart, const void *q, const void *o, const float *lse,
                                  const void *dout, float *dqacc)
{
  FMDist *d = e->d;
  size_t B = (size_t)e->plan->batch, row = (size_t)e->plan->heads_kv * e->plan->head_dim;
  for (int b = d->part.rstart[r]; b < d->part.rstart[r + 1] && !e->err; b++) {
    int c = d->part.rchunks[b], k0, k1;
    size_t len = FMDistChunkLen_Private(d, c), n = B * len * row;
    float *gc = gpart + (size_t)(d->boff[c] / e->es);
    const char *kc = cur + (size_t)d->boff[c];
    FMAttnProblem p = e->p;
    double t0;
    if (!FMDistExecNeeds_Private(e, c)) continue;
    FMDistChunkKeys(&d->ch, c, &k0, &k1);
    p.k0 = k0; p.nk = (int)len;
    t0 = FMTime();
    FMCall(FMFaultAt("cp_backward_chunk"));
    FMCall(FMCPUBackward(&p, q, kc, kc + B * len * e->row_kv, o, lse, dout, dqacc, gc, gc + n, FM_DTYPE_FP32));
    FMDistExecRecord_Private(e, FM_TRACE_COMPUTE, t0, FMTime(), 0, e->tr ? 2.5 * FMDistExecFlops_Private(&p) : 0, -1, c);
  }
  return FM_SUCCESS;
}

/* This rank's own block's final dK/dV sum (gin, from its last holder) into dk, dv. */
static void ring_bwd_own(FMDistExec *e, const float *gin, void *dk, void *dv)
{
  FMDist *d = e->d;
  FMPlan plan = e->plan;
  size_t B = (size_t)plan->batch, row = (size_t)plan->heads_kv * plan->head_dim, nk = (size_t)d->nkeys;
  for (int b = d->part.rstart[plan->ctx->rank]; b < d->part.rstart[plan->ctx->rank + 1]; b++) {
    int c = d->part.rchunks[b];
    size_t len = FMDistChunkLen_Private(d, c), n = B * len * row;
    const float *gc = gin + (size_t)(d->boff[c] / e->es);
    for (size_t bb = 0; bb < B; bb++)
      for (size_t x = 0; x < len * row; x++) {
        size_t dst = (bb * nk + (size_t)d->kofs[c]) * row + x;
        FMFromFloat(dk, dst, plan->dtype, gc[bb * len * row + x]);
        FMFromFloat(dv, dst, plan->dtype, gc[n + bb * len * row + x]);
      }
  }
}

/*
 * Backward: the dK/dV of a block travel with it. At step s rank me computes the dK/dV
 * partial of the block it holds (and adds dQ), adds the running sum that arrived from me-1
 * (the block's previous holders), and sends the sum on to me+1 (fp32, tag 2C+1). The
 * block's P-th holder (step P-1) is r-1, whose send goes to the owner r: after the loop each
 * rank receives its own final dK/dV from me-1. Sums run in ring order: deterministic. After
 * the buffers' agreement every message of every step moves whatever failed (e->err).
 */
FMErrorCode FMDistRingBackward_Private(FMDistExec *e, const void *k, const void *v, const void *q, const void *o, const float *lse, const void *dout,
                                 float *dqacc, void *dk, void *dv)
{
  FMDist *d = e->d;
  MPI_Comm comm = e->plan->hdr.comm;
  Ring R;
  size_t ng;
  char *cur = NULL, *nxt = NULL, *t;
  float *gpart = NULL, *gsend = NULL, *gin = NULL, *ft;
  FMErrorCode ierr = FM_SUCCESS;
  MPI_Request gsq = MPI_REQUEST_NULL, grq = MPI_REQUEST_NULL;
  double gpost = 0, grpost = 0, t0;
  int gsr = -1;

  ring_init(e, &R);
  ng = (size_t)(R.maxb / e->es); /* floats of the largest dK/dV block */
  ierr = FMMalloc((size_t)R.maxb + 1, &cur);
  if (!ierr) ierr = FMMalloc((size_t)R.maxb + 1, &nxt);
  if (!ierr) ierr = FMMalloc(ng + 1, &gpart);
  if (!ierr) ierr = FMMalloc(ng + 1, &gsend);
  if (!ierr) ierr = FMMalloc(ng + 1, &gin);
  FMAgreeGoto(comm);
  ring_pack(e, cur, k, v);
  for (int s = 0; s < R.P; s++) {
    int r = (R.me - s + 2 * R.P) % R.P, rn = (R.me - s - 1 + 2 * R.P) % R.P, comm_kv = s < R.P - 1;
    size_t nr = (size_t)(d->rbytes[r] / e->es);
    MPI_Request rq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    double post[2];
    if (comm_kv) ring_post(e, &R, r, rn, cur, nxt, rq, post);
    if (s > 0) { /* the running dK/dV sum of block r from its previous holders */
      FMDistExecKeepMPI(e, FMMPIIrecv_Private(gin, (size_t)nr, MPI_FLOAT, R.prev, R.tag_g, comm, &grq), &grq);
      grpost = FMTime();
    }
    if (!d->opt.overlap && comm_kv) ring_wait(e, &R, r, rn, rq, post);
    memset(gpart, 0, nr * sizeof(float));
    (void)FMDistExecKeep_Private(e, ring_bwd_block(e, r, cur, gpart, q, o, lse, dout, dqacc));
    if (d->opt.overlap && comm_kv) ring_wait(e, &R, r, rn, rq, post);
    if (s > 0) {
      t0 = FMTime();
      FMDistExecKeepMPI(e, MPI_Wait(&grq, MPI_STATUS_IGNORE), NULL);
      (void)FMDistExecKeep_Private(e, FMFaultAt("cp_ring_reduce"));
      FMDistExecRecord_Private(e, FM_TRACE_WAIT, t0, FMTime(), 0, 0, -1, -1);
      FMDistExecRecord_Private(e, FM_TRACE_RECV, grpost, FMTime(), 4.0 * nr, 0, R.prev, ring_first_chunk(d, r));
      for (size_t i = 0; i < nr; i++) gpart[i] = gin[i] + gpart[i];
    }
    /* the previous sum must have left before its buffer takes this one */
    t0 = FMTime();
    FMDistExecKeepMPI(e, MPI_Wait(&gsq, MPI_STATUS_IGNORE), NULL);
    if (gsr >= 0) {
      double t1 = FMTime();
      FMDistExecRecord_Private(e, FM_TRACE_WAIT, t0, t1, 0, 0, -1, -1);
      FMDistExecRecord_Private(e, FM_TRACE_REDUCE, gpost, t1, d->rbytes[gsr] / e->es * 4.0, 0, R.next, ring_first_chunk(d, gsr));
    }
    ft = gsend; gsend = gpart; gpart = ft;
    if (R.P > 1) { /* one rank holds its own block throughout: its sum is final here */
      FMDistExecKeepMPI(e, FMMPIIsend_Private(gsend, (size_t)nr, MPI_FLOAT, R.next, R.tag_g, comm, &gsq), &gsq);
      d->stats.reduce_bytes += (double)nr * sizeof(float);
      gpost = FMTime(); gsr = r;
    }
    t = cur; cur = nxt; nxt = t;
  }
  if (R.P == 1) {
    if (!e->err) ring_bwd_own(e, gsend, dk, dv);
  } else { /* our own block's final sum, from its last holder me-1 */
    size_t nme = (size_t)(d->rbytes[R.me] / e->es);
    MPI_Status st;
    double t1;
    t0 = FMTime();
    FMDistExecKeepMPI(e, FMMPIRecv_Private(gin, (size_t)nme, MPI_FLOAT, R.prev, R.tag_g, comm, &st), NULL);
    FMDistExecKeepMPI(e, MPI_Wait(&gsq, MPI_STATUS_IGNORE), NULL);
    t1 = FMTime();
    FMDistExecRecord_Private(e, FM_TRACE_WAIT, t0, t1, 0, 0, -1, -1);
    FMDistExecRecord_Private(e, FM_TRACE_RECV, t0, t1, 4.0 * nme, 0, R.prev, ring_first_chunk(d, R.me));
    if (gsr >= 0) FMDistExecRecord_Private(e, FM_TRACE_REDUCE, gpost, t1, d->rbytes[gsr] / e->es * 4.0, 0, R.next, ring_first_chunk(d, gsr));
    if (!e->err) ring_bwd_own(e, gin, dk, dv);
  }
  ierr = e->err;
cleanup:
  free(cur); free(nxt); free(gpart); free(gsend); free(gin);
  return ierr;
}
