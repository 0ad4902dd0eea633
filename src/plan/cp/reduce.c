/*
 * reduce.c - the dK/dV tree reduction of the gather backward: a chunk's partials flow back up
 * the route that brought its K/V (the reverse route), are summed in route order at each
 * relay (deterministic), and end in the owner's dk, dv.
 */
#include "distimpl.h"
#include <flashmask/private/fmtracing.h>
#include <stdlib.h>
#include <string.h>

/* Floats of chunk c's dK/dV partial: K then V, [B][len][Hkv][D] each. */
static size_t partial_len(const FMDistExec *e, int c)
{
  return 2 * (size_t)e->plan->batch * FMDistChunkLen_Private(e->d, c) * e->plan->heads_kv * e->plan->head_dim;
}

/* FMDistReduceCreate_Private - see distimpl.h. */
FMErrorCode FMDistReduceCreate_Private(FMDistExec *e, FMDistReduce *R)
{
  FMDist *d = e->d;
  int me = e->plan->ctx->rank, C = d->ch.nchunks;
  memset(R, 0, sizeof(*R));
  FMCall(FMCalloc(C, &R->g));
  FMCall(FMCalloc(d->nout + 1, &R->cb));
  FMCall(FMCalloc(C, &R->pending));
  FMCall(FMMalloc(d->nout + 1, &R->crq));
  FMCall(FMMalloc(d->nin + 1, &R->psq));
  FMCall(FMCalloc(d->nout + 1, &R->cpost));
  FMCall(FMCalloc(d->nin + 1, &R->ppost));
  for (int i = 0; i <= d->nout; i++) R->crq[i] = MPI_REQUEST_NULL;
  for (int i = 0; i <= d->nin; i++) R->psq[i] = MPI_REQUEST_NULL;
  for (int i = 0; i < d->nout; i++) FMCall(FMMalloc(partial_len(e, d->out[i].chunk) + 1, &R->cb[i]));
  /* the dK/dV partial of every chunk held here: the owned ones and the incoming ones */
  for (int c = 0; c < C; c++) {
    int held = d->part.owner[c] == me;
    for (int i = 0; !held && i < d->nin; i++) held = d->in[i].chunk == c;
    if (held) FMCall(FMCalloc(partial_len(e, c) + 1, &R->g[c]));
  }
  return FM_SUCCESS;
}

/* FMDistReduceDestroy_Private - see distimpl.h. */
void FMDistReduceDestroy_Private(FMDistExec *e, FMDistReduce *R)
{
  if (R->g)
    for (int c = 0; c < e->d->ch.nchunks; c++) free(R->g[c]);
  if (R->cb)
    for (int i = 0; i < e->d->nout; i++) free(R->cb[i]);
  free(R->g); free(R->cb); free(R->pending); free(R->crq); free(R->psq); free(R->cpost); free(R->ppost);
  memset(R, 0, sizeof(*R));
}

/* FMDistReducePost_Private - see distimpl.h. Every receive is posted even after one failed
   (that child's partial is then not waited for); the first failure is returned. */
FMErrorCode FMDistReducePost_Private(FMDistExec *e, FMDistReduce *R)
{
  FMDist *d = e->d;
  FMErrorCode first = FM_SUCCESS;
  for (int i = 0; i < d->nout; i++) {
    int c = d->out[i].chunk;
    int me = FMMPIIrecv_Private(R->cb[i], partial_len(e, c), MPI_FLOAT, d->out[i].dst, d->ch.nchunks + c, e->plan->hdr.comm, &R->crq[i]);
    R->cpost[i] = FMTime();
    if (me == MPI_SUCCESS) R->pending[c]++;
    else {
      R->crq[i] = MPI_REQUEST_NULL;
      if (!first) first = FMMPIError_Private(me, "MPI_Irecv (a child's dK/dV partial)", __FILE__, __func__, __LINE__);
    }
  }
  return first;
}

/* Chunk c is final here (every child's partial arrived): sum them in, then up to the parent or
   into dk, dv. The sum goes up even after a failure of the call (its parent waits for it; the
   data is then not trusted and the call fails on every rank). */
static FMErrorCode finish_chunk(FMDistExec *e, FMDistReduce *R, int c, void *dk, void *dv)
{
  FMDist *d = e->d;
  FMPlan plan = e->plan;
  size_t n = partial_len(e, c), len = FMDistChunkLen_Private(d, c), row = (size_t)plan->heads_kv * plan->head_dim;
  float *g = R->g[c];
  FMErrorCode ierr = FM_SUCCESS;
  R->pending[c] = -1; /* done */
  for (int i = 0; !e->err && i < d->nout; i++) /* children in route order: deterministic sums */
    if (d->out[i].chunk == c)
      for (size_t t = 0; t < n; t++) g[t] += R->cb[i][t];
  if (d->parent[c] >= 0) {
    int ii = 0, me;
    while (ii < d->nin && d->in[ii].chunk != c) ii++;
    me = FMMPIIsend_Private(g, n, MPI_FLOAT, d->parent[c], d->ch.nchunks + c, plan->hdr.comm, &R->psq[ii]);
    R->ppost[ii] = FMTime();
    if (me != MPI_SUCCESS) {
      R->psq[ii] = MPI_REQUEST_NULL;
      R->ppost[ii] = 0;
      return FMMPIError_Private(me, "MPI_Isend (a dK/dV sum to its parent)", __FILE__, __func__, __LINE__);
    }
    d->stats.reduce_bytes += (double)n * sizeof(float);
    FMCall(FMFaultAt("cp_reduce_send"));
  } else if (d->part.owner[c] == plan->ctx->rank && !e->err) {
    size_t nk = (size_t)d->nkeys;
    for (size_t bb = 0; bb < (size_t)plan->batch; bb++)
      for (size_t t = 0; t < len * row; t++) {
        size_t dst = (bb * nk + (size_t)d->kofs[c]) * row + t;
        FMFromFloat(dk, dst, plan->dtype, g[bb * len * row + t]);
        FMFromFloat(dv, dst, plan->dtype, g[n / 2 + bb * len * row + t]);
      }
  }
  return ierr;
}

/* FMDistWaitChild_Private - see distimpl.h. */
FMErrorCode FMDistWaitChild_Private(int n, MPI_Request *rq, int C, int *pending, int left, const char *site, int *idx,
                                    double *t0, double *t1)
{
  FMErrorCode err = FM_SUCCESS;
  int me;
  *idx = MPI_UNDEFINED;
  *t0 = FMTime();
  me = MPI_Waitany(n, rq, idx, MPI_STATUS_IGNORE);
  *t1 = FMTime();
  if (me != MPI_SUCCESS) err = FMMPIError_Private(me, "MPI_Waitany (a child's dK/dV partial)", __FILE__, __func__, __LINE__);
  else if (*idx == MPI_UNDEFINED)
    err = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_LIB, "dK/dV reduction: %d chunks wait for partials that were never posted",
                          left);
  else err = FMFaultAt(site);
  if (*idx == MPI_UNDEFINED || (err && me == MPI_SUCCESS)) {
    /* no request named (or nothing left to wait for): drain every receive still open */
    if ((me = MPI_Waitall(n, rq, MPI_STATUSES_IGNORE)) != MPI_SUCCESS && !err)
      err = FMMPIError_Private(me, "MPI_Waitall (the children's partials, after a failed wait)", __FILE__, __func__, __LINE__);
    for (int i = 0; i < n; i++) rq[i] = MPI_REQUEST_NULL;
    for (int c = 0; c < C; c++)
      if (pending[c] > 0) pending[c] = 0;
    *idx = MPI_UNDEFINED;
    return err;
  }
  rq[*idx] = MPI_REQUEST_NULL;
  return err;
}

/* Wait for the next child's partial; a failure is kept in e->err, and the wait completes this
   rank's part anyway (FMDistWaitChild_Private). */
static void reduce_next(FMDistExec *e, FMDistReduce *R, int left)
{
  FMDist *d = e->d;
  int idx;
  double t0, t1;
  const FMErrorCode err = FMDistWaitChild_Private(d->nout, R->crq, d->ch.nchunks, R->pending, left, "cp_reduce_wait", &idx, &t0, &t1);
  (void)FMDistExecKeep_Private(e, err);
  if (idx == MPI_UNDEFINED) return;
  if (!err) {
    FMDistExecRecord_Private(e, FM_TRACE_WAIT, t0, t1, 0, 0, -1, -1);
    FMDistExecRecord_Private(e, FM_TRACE_RECV, R->cpost[idx], t1, 4.0 * partial_len(e, d->out[idx].chunk), 0, d->out[idx].dst, d->out[idx].chunk);
  }
  if (R->pending[d->out[idx].chunk] > 0) R->pending[d->out[idx].chunk]--;
}

/* FMDistReduceFinish_Private - see distimpl.h. Never leaves the reduction early: a failure is
   kept in e->err (and returned) after every sum went up and every request completed. */
FMErrorCode FMDistReduceFinish_Private(FMDistExec *e, FMDistReduce *R, void *dk, void *dv)
{
  FMDist *d = e->d;
  int C = d->ch.nchunks, left = 0, me;
  double t0, t1;
  for (int c = 0; c < C; c++) left += R->g[c] != NULL;
  for (;;) {
    for (int c = 0; c < C; c++)
      if (R->g[c] && R->pending[c] == 0) {
        (void)FMDistExecKeep_Private(e, finish_chunk(e, R, c, dk, dv));
        left--;
      }
    if (left == 0) break;
    reduce_next(e, R, left);
  }
  /* the sums sent up to the parents */
  t0 = FMTime();
  me = MPI_Waitall(d->nin, R->psq, MPI_STATUSES_IGNORE);
  t1 = FMTime();
  if (me != MPI_SUCCESS)
    return FMDistExecKeep_Private(e, FMMPIError_Private(me, "MPI_Waitall (the dK/dV sums sent up)", __FILE__, __func__, __LINE__));
  FMDistExecRecord_Private(e, FM_TRACE_WAIT, t0, t1, 0, 0, -1, -1);
  for (int i = 0; i < d->nin; i++)
    if (R->ppost[i] > 0)
      FMDistExecRecord_Private(e, FM_TRACE_REDUCE, R->ppost[i], t1, 4.0 * partial_len(e, d->in[i].chunk), 0, d->in[i].src, d->in[i].chunk);
  return e->err;
}
