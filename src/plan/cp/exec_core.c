/*
 * exec_core.c - the state of one CPU context-parallel call (FMDistExec): set-up and release,
 * trace records, send polling, and the forward on one held chunk with the exact LSE merge.
 * Shared by the gather (exec_gather.c, reduce.c) and ring (exec_ring.c) schedules.
 */
#include "distimpl.h"
#include <flashmask/private/fmtile.h>
#include <flashmask/private/fmtracing.h>
#include <stdlib.h>
#include <string.h>

void FMDistExecRecord_Private(FMDistExec *e, int kind, double t0, double t1, double bytes, double flops, int peer, int chunk)
{
#if FM_DIST_TRACE
  if (e->tr) (void)FMTraceRecord_Private((FMTrace)e->tr, kind, 0, t0, t1 < t0 ? t0 : t1, bytes, flops, peer, chunk);
#else
  (void)e; (void)kind; (void)t0; (void)t1; (void)bytes; (void)flops; (void)peer; (void)chunk;
#endif
}

FMErrorCode FMDistExecTraceBegin_Private(FMDistExec *e, const char *run) { return FMDistTraceBegin_Private(e->plan, e->d, run, &e->tr); }
FMErrorCode FMDistExecTraceEnd_Private(FMDistExec *e, const char *run) { return FMDistTraceEnd_Private(e->plan, e->d, run, &e->tr); }


/* Record the sends that completed since the last poll. */
FMErrorCode FMDistExecPollSends_Private(FMDistExec *e)
{
  int n = 0, *idx;
  double t;
  if (!e->tr || e->d->nout == 0 || e->d->opt.schedule == FM_DIST_SCHED_RING) return FM_SUCCESS;
  FMCall(FMMalloc(e->d->nout, &idx));
  FMCallMPI(MPI_Testsome(e->d->nout, e->sreq, &n, idx, MPI_STATUSES_IGNORE));
  t = FMTime();
  for (int i = 0; n != MPI_UNDEFINED && i < n; i++) {
    const FMDistXfer *x = &e->d->out[idx[i]];
    FMDistExecRecord_Private(e, FM_TRACE_SEND, e->spost[idx[i]], t, e->d->cbytes[x->chunk], 0, x->dst, x->chunk);
  }
  free(idx);
  return FM_SUCCESS;
}

/* Wait for every send (a WAIT event) and record the ones not seen complete before. The wait
   happens whatever failed (the buffers are freed after it): a failure is returned after it. */
FMErrorCode FMDistExecFinishSends_Private(FMDistExec *e)
{
  double t0 = FMTime(), t1;
  int *open = NULL, mpierr;
  FMErrorCode ierr = FM_SUCCESS;
  if (e->d->opt.schedule == FM_DIST_SCHED_RING) return FM_SUCCESS; /* the ring completes its sends step by step */
  if (e->tr) {
    ierr = FMMalloc(e->d->nout + 1, &open); /* without it, no SEND events (the error is returned after the wait) */
    for (int i = 0; open && i < e->d->nout; i++) open[i] = e->sreq[i] != MPI_REQUEST_NULL;
  }
  mpierr = MPI_Waitall(e->d->nout, e->sreq, MPI_STATUSES_IGNORE);
  t1 = FMTime();
  if (open) {
    FMDistExecRecord_Private(e, FM_TRACE_WAIT, t0, t1, 0, 0, -1, -1);
    for (int i = 0; i < e->d->nout; i++)
      if (open[i]) FMDistExecRecord_Private(e, FM_TRACE_SEND, e->spost[i], t1, e->d->cbytes[e->d->out[i].chunk], 0, e->d->out[i].dst, e->d->out[i].chunk);
    free(open);
  }
  FMCall(ierr);
  FMCallMPI(mpierr);
  FMCall(FMFaultAt("cp_finish_sends"));
  return FM_SUCCESS;
}

FMErrorCode FMDistExecInit_Private(FMPlan plan, FMDistExec *e)
{
  memset(e, 0, sizeof(*e));
  e->plan = plan;
  e->d = (FMDist *)plan->data;
  /* host tensors only: FMPlanBackward_CP stages device tensors of the CUDA backend through the host */
  e->p.batch = plan->batch; e->p.heads_q = plan->heads_q; e->p.heads_kv = plan->heads_kv; e->p.head_dim = plan->head_dim;
  e->p.dtype = plan->dtype;
  e->p.scale = (float)plan->scale;
  /* the whole mask: with mask_batch > 1 the CPU kernels take sample b's bounds and summaries for sample b */
  FMCall(FMMaskGetDesc_Private(plan->mask, &e->p.mask));
  e->p.nq = plan->nlocal; e->p.qrows = plan->rows;
  e->p.nthreads = plan->ctx->threads;
  FMPlanKernelOptions_Private(plan, &e->p.opts);
  e->es = FMDTypeSize(plan->dtype);
  e->row_kv = (size_t)plan->heads_kv * plan->head_dim * e->es;
  FMCall(FMCalloc(e->d->ch.nchunks, &e->buf));
  FMCall(FMMalloc(e->d->nin + 1, &e->rreq));
  FMCall(FMMalloc(e->d->nout + 1, &e->sreq));
  for (int i = 0; i <= e->d->nin; i++) e->rreq[i] = MPI_REQUEST_NULL;
  for (int i = 0; i <= e->d->nout; i++) e->sreq[i] = MPI_REQUEST_NULL;
  FMCall(FMCalloc(e->d->nin + 1, &e->rpost));
  FMCall(FMCalloc(e->d->nout + 1, &e->spost));
  FMCall(FMFaultAt("cp_exec_alloc"));
  return FM_SUCCESS;
}

void FMDistExecFree_Private(FMDistExec *e)
{
  if (e->buf)
    for (int c = 0; c < e->d->ch.nchunks; c++) free(e->buf[c]);
  free(e->buf); free(e->rreq); free(e->sreq); free(e->rpost); free(e->spost);
#if FM_DIST_TRACE
  if (e->tr) { FMTrace tr = (FMTrace)e->tr; (void)FMTraceDestroy_Private(&tr); e->tr = NULL; }
#endif
}

int FMDistExecNeeds_Private(const FMDistExec *e, int c)
{
  return e->d->myneed[c] && FMDistChunkLen_Private(e->d, c) > 0 && e->plan->nlocal > 0;
}

/* FlashMask-convention forward flops of p (the trace's compute events): 4 d per (row, key) pair
   of every (sample, head) over the tiles of the summary's block that are not fully masked,
   rows and keys clipped to p's, so the events of one call add up to FMPlanGetFlops. Without a
   summary every pair counts. The backward is 2.5 times this. */
double FMDistExecFlops_Private(const FMAttnProblem *p)
{
  const FMMaskDesc *m = &p->mask;
  const int blk = m->block, mh = m->mask_heads > 0 ? m->mask_heads : 1, mb = m->mask_batch > 1 ? m->mask_batch : 1;
  const int kend = p->k0 + p->nk;
  double area = 0;
  if (!m->summary || blk <= 0 || m->nblocks_k <= 0) return 4.0 * p->batch * p->heads_q * (double)p->nq * p->nk * p->head_dim;
  for (int r = 0, n; r < p->nq; r += n) { /* runs of local rows in one query tile */
    const int t = (p->qrows ? p->qrows[r] : r) / blk, m0 = t * blk, m1 = m0 + blk < m->seqlen_q ? m0 + blk : m->seqlen_q;
    for (n = 1; r + n < p->nq && (p->qrows ? p->qrows[r + n] : r + n) / blk == t; n++) {}
    for (int kb = p->k0 / blk; kb < m->nblocks_k && kb * blk < kend; kb++) {
      const int c0 = kb * blk > p->k0 ? kb * blk : p->k0, c1 = (kb + 1) * blk < kend ? (kb + 1) * blk : kend;
      for (int row = 0; row < mb * mh; row++)
        if (FMClassifyTileInline(m->summary + (size_t)row * m->nblocks_k * FM_SUM_N, m->causal, m->seqlen_q, m->seqlen_k, blk, m0, m1, kb) !=
            FM_TILE_SKIP)
          area += (double)n * (c1 - c0);
    }
  }
  return 4.0 * p->head_dim * (p->heads_q / mh) * (mb > 1 ? 1 : p->batch) * area;
}

/* Forward on one held chunk, merged into (oacc, lacc); nothing after a failure of the call (e->err). */
FMErrorCode FMDistExecForwardChunk_Private(FMDistExec *e, int c, float *oacc, float *lacc, float *opart, float *lpart, int *first)
{
  FMAttnProblem p = e->p;
  size_t len = FMDistChunkLen_Private(e->d, c), B = (size_t)e->plan->batch;
  int k0, k1;
  double t0;
  if (e->err || !FMDistExecNeeds_Private(e, c)) return FM_SUCCESS;
  FMCall(FMFaultAt("cp_forward_chunk"));
  FMDistChunkKeys(&e->d->ch, c, &k0, &k1);
  p.k0 = k0; p.nk = (int)len;
  t0 = FMTime();
  if (*first) {
    FMCall(FMCPUForward(&p, e->qptr, e->buf[c], e->buf[c] + B * len * e->row_kv, oacc, FM_DTYPE_FP32, lacc));
    *first = 0;
  } else {
    FMCall(FMCPUForward(&p, e->qptr, e->buf[c], e->buf[c] + B * len * e->row_kv, opart, FM_DTYPE_FP32, lpart));
    FMCall(FMCPUMergePartial(&p, oacc, lacc, opart, lpart));
  }
  FMDistExecRecord_Private(e, FM_TRACE_COMPUTE, t0, FMTime(), 0, e->tr ? FMDistExecFlops_Private(&p) : 0, -1, c);
  FMCall(FMDistExecPollSends_Private(e));
  return FM_SUCCESS;
}

void FMDistToDType_Private(void *dst, FMDType t, const float *src, size_t n)
{
  if (!n) return; /* a rank without rows may pass dst = NULL (memcpy's arguments must not be) */
  if (t == FM_DTYPE_FP32) { memcpy(dst, src, n * sizeof(float)); return; }
  for (size_t i = 0; i < n; i++) FMFromFloat(dst, i, t, src[i]);
}


