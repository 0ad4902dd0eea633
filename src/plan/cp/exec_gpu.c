/*
 * exec_gpu.c - the context-parallel forward on the CUDA backend (built with CUDA only;
 * collective). On the plan's stream: the local stage first (the rank's own K/V, in place), then
 * each stage as soon as its step's event fired, while the communication stream moves the
 * following steps (transport_gpu.c); every stage writes an fp32 partial (O, LSE) merged exactly
 * into the accumulator through the LSE (in the kernel's epilogue), and at the end O is
 * converted to the plan's dtype. With -fm_plan_overlap 0 every stage waits for the whole
 * exchange. With NCCL nothing blocks the host; with the MPI transport each step's messages are
 * completed by the host (the stages already queued keep the GPU busy meanwhile).
 *
 * CUDA-aware MPI: the host waits for the plan's stream to reach the forward (event ev_in)
 * before the first step: the caller's K/V are then ready and the previous call's stages no
 * longer read the stage buffers; a relayed chunk is ready once the host completed the step
 * that received it.
 *
 * The pipeline (FMDistGPURun*, gpuimpl.h) is shared with the backward (exec_gpu_bwd.c): only
 * what a stage computes and what follows the exchange differ.
 */
#include "gpuimpl.h"
#include <cuda_runtime_api.h>
#include <flashmask/private/fmtracing.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* The forward's stage s (-1: the local one) on the plan's stream once its data is there. */
static FMErrorCode forward_stage(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R, int s)
{
  void *us = plan->stream;
  void *dm = s < 0 ? g->dmask0 : g->st[s].dmask;
  const void *k = R->k, *v = R->v;
  FMAttnProblem p;
  if (!dm) return FM_SUCCESS;
  memset(&p, 0, sizeof(p));
  p.batch = plan->batch; p.heads_q = plan->heads_q; p.heads_kv = plan->heads_kv; p.head_dim = plan->head_dim;
  p.dtype = plan->dtype;
  p.scale = (float)plan->scale;
  p.nq = plan->nlocal;
  p.nk = s < 0 ? d->nkeys : g->st[s].nk;
  p.nthreads = plan->ctx->threads;
  FMPlanKernelOptions_Private(plan, &p.opts);
  FMCall(FMCudaEventRecord(g->ev_w0[s + 1], us));
  if (s >= 0) FMCall(FMCudaStreamWaitEvent(us, g->ev_c1[s]));
  FMCall(FMCudaEventRecord(g->ev_k0[s + 1], us));
  if (s >= 0) { k = g->st[s].kbuf; v = g->st[s].vbuf; }
  FMCall(FMCudaForwardF32(&p, dm, R->q, k, v, g->oacc, !R->first, g->lacc, us));
  R->first = 0;
  FMCall(FMCudaEventRecord(g->ev_k1[s + 1], us));
  R->ran[s + 1] = 1;
  return FM_SUCCESS;
}

/* Seconds from ev_in to ev (both completed); 0 when CUDA cannot tell (deliberately ignored: an
   event of a stage that did not run, and only the trace's times depend on it, so the runtime is
   called here instead of FMCudaEventElapsed, which would raise). */
static double since(const FMDistGPU *g, void *ev)
{
  float ms = 0;
  if (cudaEventElapsedTime(&ms, (cudaEvent_t)g->ev_in, (cudaEvent_t)ev) != cudaSuccess) { (void)cudaGetLastError(); ms = 0; }
  return 1e-3 * ms;
}

/* FlashMask-convention flops of a stage: the local rows against the keys of chunks x[0..n) (x NULL:
   the rank's own chunks), FMDistExecFlops_Private per chunk. */
static double stage_flops(FMPlan plan, FMDist *d, const FMAttnProblem *base, int n, const GXfer *x)
{
  const int me = plan->ctx->rank, a = x ? 0 : d->part.rstart[me];
  double fl = 0;
  if (!x) n = d->part.rstart[me + 1] - a;
  for (int i = 0; i < n; i++) {
    FMAttnProblem p = *base;
    int k0, k1;
    FMDistChunkKeys(&d->ch, x ? x[i].chunk : d->part.rchunks[a + i], &k0, &k1);
    p.k0 = k0; p.nk = k1 - k0;
    if (p.nk > 0) fl += FMDistExecFlops_Private(&p);
  }
  return fl;
}

/* FMDistGPUTrace_Private - see gpuimpl.h. */
FMErrorCode FMDistGPUTrace_Private(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R)
{
  FMTrace T = (FMTrace)R->tr;
  const double t0 = R->t0;
  FMAttnProblem base;
  memset(&base, 0, sizeof base);
  base.batch = plan->batch; base.heads_q = plan->heads_q; base.heads_kv = plan->heads_kv; base.head_dim = plan->head_dim;
  base.nq = plan->nlocal; base.qrows = plan->rows;
  FMCall(FMMaskGetDesc_Private(plan->mask, &base.mask));
  for (int s = 0; s < g->nsteps; s++) {
    const GStep *S = &g->st[s];
    double a, b;
    if (g->transport == FM_DIST_TRANSPORT_MPI) { a = R->hostt[s][0]; b = R->hostt[s][1]; }
    else { a = t0 + since(g, g->ev_c0[s]); b = t0 + since(g, g->ev_c1[s]); }
    if (b < a) b = a;
    for (int i = 0; i < S->nsend; i++)
      FMCall(FMTraceRecord_Private(T, FM_TRACE_SEND, 1, a, b, d->cbytes[S->send[i].chunk], 0, S->send[i].peer, S->send[i].chunk));
    for (int i = 0; i < S->nrecv; i++)
      FMCall(FMTraceRecord_Private(T, FM_TRACE_RECV, 1, a, b, d->cbytes[S->recv[i].chunk], 0, S->recv[i].peer, S->recv[i].chunk));
  }
  for (int s = -1; s < g->nsteps; s++) {
    double w0, k0, k1;
    if (!R->ran[s + 1]) continue;
    w0 = t0 + since(g, g->ev_w0[s + 1]);
    k0 = t0 + since(g, g->ev_k0[s + 1]);
    k1 = t0 + since(g, g->ev_k1[s + 1]);
    if (k0 - w0 > 2e-6) FMCall(FMTraceRecord_Private(T, FM_TRACE_WAIT, 0, w0, k0, 0, 0, -1, -1));
    FMCall(FMTraceRecord_Private(T, FM_TRACE_COMPUTE, 0, k0, k1 < k0 ? k0 : k1, 0,
                                 R->flops_factor * (s < 0 ? stage_flops(plan, d, &base, 0, NULL)
                                                          : stage_flops(plan, d, &base, g->st[s].nrecv, g->st[s].recv)), -1,
                                 s < 0 ? -1 : (g->st[s].nrecv ? g->st[s].recv[0].chunk : -1)));
  }
  return FM_SUCCESS;
}

/* Stage s (-1: local) unless a compute error came first. */
static void stage(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R, int s)
{
  if (!R->cerr) {
    R->cerr = R->compute(plan, d, g, R, s);
    if (R->cerr) R->cerr = FMErrorTraceback(__FILE__, __func__, __LINE__, R->cerr);
  }
}

/*
 * Every exchange step, each followed by its stage under overlap. NCCL: a rank whose step failed
 * posts no later step (the pairing would shift); its peers' operations then wait on the device
 * until the communicator is aborted (recover()). MPI: every step's messages are posted whatever
 * failed, so the host never waits for a lost peer.
 */
static void exchange_all(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R)
{
  int me = plan->ctx->rank;
  for (int s = 0; s < g->nsteps; s++) {
    const GStep *S = &g->st[s];
    FMErrorCode xe = FM_SUCCESS;
#if FM_HAVE_NCCL
    if (g->transport == FM_DIST_TRANSPORT_NCCL) {
      xe = FMFaultAt("gpu_exchange_post");
      if (!xe) xe = FMDistExchangeNCCL_Private(plan, d, g, s, R->k, R->v, 0);
      if (!xe) R->nposted++;
    } else
#endif
    {
      xe = FMDistExchangeMPI_Private(plan, d, g, s, R->k, R->v, R->hostt[s]);
      if (!xe) xe = FMFaultAt("gpu_exchange_wait");
      R->nposted++;
    }
    if (xe && !R->xerr) R->xerr = FMErrorTraceback(__FILE__, __func__, __LINE__, xe);
    for (int i = 0; i < S->nsend; i++) {
      d->stats.sent_bytes[S->send[i].level] += d->cbytes[S->send[i].chunk];
      if (d->part.owner[S->send[i].chunk] != me) d->stats.relayed_bytes += d->cbytes[S->send[i].chunk];
    }
    for (int i = 0; i < S->nrecv; i++) d->stats.recv_bytes += d->cbytes[S->recv[i].chunk];
    if (xe && g->transport == FM_DIST_TRANSPORT_NCCL) break;
    if (d->opt.overlap) stage(plan, d, g, R, s);
  }
}

/*
 * After the run, NCCL only: a rank that did not post every step leaves its peers' NCCL
 * operations waiting on the device for good: every rank then aborts the context's
 * communicators (which ends them), and the next forward bootstraps new ones. Collective.
 */
static FMErrorCode recover(FMPlan plan, FMDistGPU *g, int nposted)
{
  int mine = nposted < g->nsteps, any = 0;
  FMErrorCode ae;
  FMPushErrorHandler(FM_ERROR_HANDLER_SILENT); /* on an error path already: no second traceback */
  if (FMAgreeAny(plan->hdr.comm, mine, &any) != FM_SUCCESS) any = 1; /* no answer: abort as if one had failed */
  FMPopErrorHandler();
  if (!any) return FM_SUCCESS;
  ae = FMContextAbortNCCL_Private(plan->ctx);
  g->nccl = NULL;
  g->gen = 0;
  /* deliberately ignored: after the abort the streams may report the aborted operations */
  (void)cudaStreamSynchronize((cudaStream_t)g->cs);
  (void)cudaStreamSynchronize((cudaStream_t)plan->stream);
  FMCall(ae);
  FMRaise(MPI_COMM_SELF, FM_ERR_NCCL, "The K/V exchange failed on another rank; the NCCL communicators were aborted (a new one is made on the next call)");
}

/* The context's NCCL communicator, new after an aborted exchange (of any plan): reconnect. Collective, agreed. */
static FMErrorCode nccl_current(FMPlan plan, FMDist *d, FMDistGPU *g)
{
#if FM_HAVE_NCCL
  void *w = NULL;
  if (g->transport != FM_DIST_TRANSPORT_NCCL) return FM_SUCCESS;
  FMCall(FMContextGetNCCL_Private(plan->ctx, &w, NULL, NULL));
  if (FMContextNCCLGeneration_Private(plan->ctx) != g->gen) {
    g->nccl = w;
    g->gen = FMContextNCCLGeneration_Private(plan->ctx);
    FMCall(FMDistNCCLConnect_Private(plan, d, g));
    FMDistGPUMarkLinked_Private(plan, g, 1);
  }
#else
  (void)plan; (void)d; (void)g;
#endif
  return FM_SUCCESS;
}

/* FMDistGPURunInit_Private - see gpuimpl.h. */
FMErrorCode FMDistGPURunInit_Private(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R, FMErrorCode local)
{
  FMErrorCode ierr = local;
  R->first = 1;
  /* local state first, agreed: nothing below returns early on one rank only before the exchange */
  if (!ierr) ierr = FMCalloc(g->nsteps + 1, &R->ran);
  if (!ierr) ierr = FMCalloc(g->nsteps + 1, &R->hostt);
  ierr = FMAgreeCode(plan->hdr.comm, ierr);
  if (!ierr) ierr = nccl_current(plan, d, g);
  if (ierr) {
    free(R->ran); free(R->hostt);
    R->ran = NULL; R->hostt = NULL;
    return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr);
  }
  return FM_SUCCESS;
}

/* FMDistGPURunStart_Private - see gpuimpl.h. */
FMErrorCode FMDistGPURunStart_Private(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R, const char *run)
{
  FMErrorCode e;
  d->stats.sent_bytes[0] = d->stats.sent_bytes[1] = d->stats.recv_bytes = d->stats.relayed_bytes = d->stats.reduce_bytes = 0;
  FMCall(FMDistTraceBegin_Private(plan, d, run, &R->tr)); /* collective and agreed: every rank returns alike */
  g->last_stream = plan->stream; /* an update waits for it before it reuses the stage masks */
  /* from here a failure is this rank's compute error: it still takes its part of the exchange
     (computing nothing; what it sends is not trusted) and Settle agrees on it, so no peer waits
     for a rank that left */
  e = FMFaultAt("gpu_run_start");
  if (!e) e = FMCudaEventRecord(g->ev_in, plan->stream);
  if (!e) e = FMCudaStreamWaitEvent(g->cs, g->ev_in);
  if (!e && R->tr) {
    e = FMCudaEventSynchronize(g->ev_in);
    R->t0 = FMTime();
  }
  if (e) {
    /* the comm stream may not be behind the plan's: wait on the host for the plan's stream, so
       that this call's exchange cannot overwrite stage buffers a previous call still reads
       (deliberately unchecked: this rank's error is already the news) */
    (void)cudaStreamSynchronize((cudaStream_t)plan->stream);
    (void)cudaGetLastError();
    if (!R->cerr) R->cerr = FMErrorTraceback(__FILE__, __func__, __LINE__, e);
  }
  return FM_SUCCESS;
}

/* FMDistGPUPipeline_Private - see gpuimpl.h. */
void FMDistGPUPipeline_Private(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R)
{
  if (d->opt.overlap) stage(plan, d, g, R, -1);
  /* CUDA-aware MPI reads the caller's K/V and writes the stage buffers outside any stream:
     wait until the plan's stream reached this call (the local stage, queued after ev_in, runs on) */
  if (g->direct && g->nsteps > 0) {
    FMErrorCode we = FMCudaEventSynchronize(g->ev_in); /* kept as the exchange's error: the steps are posted anyway */
    if (we && !R->xerr) R->xerr = FMErrorTraceback(__FILE__, __func__, __LINE__, we);
  }
  exchange_all(plan, d, g, R);
  if (!d->opt.overlap) {
    /* the unoverlapped baseline: nothing computes before the whole exchange is over */
    if (g->nsteps > 0 && !R->cerr) {
      R->cerr = FMCudaStreamWaitEvent(plan->stream, g->ev_c1[g->nsteps - 1]);
      if (R->cerr) R->cerr = FMErrorTraceback(__FILE__, __func__, __LINE__, R->cerr);
    }
    stage(plan, d, g, R, -1);
    for (int s = 0; s < g->nsteps; s++) stage(plan, d, g, R, s);
  }
  if (R->xerr && !R->cerr) R->cerr = R->xerr; /* what arrived cannot be trusted: no output, no trace */
}

/* FMDistGPUSettle_Private - see gpuimpl.h. */
FMErrorCode FMDistGPUSettle_Private(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R, const char *what)
{
  FMErrorCode e;
  R->settled = 1;
  /* the caller's K/V and our buffers are free again only after the last send left */
  e = FMCudaEventRecord(g->ev_done, g->cs);
  if (!e) e = FMCudaStreamWaitEvent(plan->stream, g->ev_done);
  if (e && !R->cerr) R->cerr = FMErrorTraceback(__FILE__, __func__, __LINE__, e);
#if FM_HAVE_NCCL
  /* -fm_nccl_timeout: wait here for the exchange, polling NCCL's asynchronous errors; a failure
     or time-out is this rank's exchange error, and every rank then aborts the communicators
     (recover), which ends the operations still waiting on the device */
  if (!e && g->transport == FM_DIST_TRANSPORT_NCCL && plan->ctx->nccl_timeout > 0 && g->nsteps > 0 && R->nposted == g->nsteps) {
    FMErrorCode we = FMContextNCCLWait_Private(plan->ctx, g->ev_done, what);
    if (we) {
      if (!R->cerr) R->cerr = FMErrorTraceback(__FILE__, __func__, __LINE__, we);
      R->nposted = -1; /* counts as not posted: recover() aborts on every rank */
    }
  }
#else
  (void)what;
#endif
  if (g->transport == FM_DIST_TRANSPORT_NCCL) {
    FMErrorCode re = recover(plan, g, R->nposted);
    if (re && !R->cerr) R->cerr = re;
  }
  return FMAgreeCode(plan->hdr.comm, R->cerr);
}

/* FMDistGPURunFinish_Private - see gpuimpl.h. */
FMErrorCode FMDistGPURunFinish_Private(FMPlan plan, FMDist *d, FMDistGPU *g, FMDistGPURun *R, const char *run, FMErrorCode ierr)
{
  /* a rank that left before Settle (an error after the pipeline) still makes its collective
     calls, so that every rank makes the same ones: the others are in Settle */
  if (!R->settled) {
    if (ierr && !R->cerr) R->cerr = ierr;
    (void)FMDistGPUSettle_Private(plan, d, g, R, "the K/V exchange");
  }
  free(R->ran);
  free(R->hostt);
  R->ran = NULL; R->hostt = NULL;
  if (!ierr) ierr = R->cerr;
  /* the trace is saved collectively; an error on one rank must not leave the others waiting */
  ierr = FMAgreeCode(plan->hdr.comm, ierr);
  if (!ierr) ierr = FMDistTraceEnd_Private(plan, d, run, &R->tr);
  else if (R->tr) { FMTrace T = (FMTrace)R->tr; (void)FMTraceDestroy_Private(&T); }
  R->tr = NULL;
  if (ierr) return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr);
  return FM_SUCCESS;
}

FMErrorCode FMDistForwardGPU_Private(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse)
{
  FMDist *d = (FMDist *)plan->data;
  FMDistGPU *g = d ? (FMDistGPU *)d->gpu : NULL;
  void *us = plan->stream;
  size_t no = (size_t)plan->batch * plan->nlocal * plan->heads_q * plan->head_dim;
  size_t nl = (size_t)plan->batch * plan->heads_q * plan->nlocal;
  FMErrorCode ierr = FM_SUCCESS;
  FMDistGPURun R;

  FMCheck(g, MPI_COMM_SELF, FM_ERR_ORDER, "The plan has no GPU executor (call FMPlanSetUp on the CUDA backend first)");
  memset(&R, 0, sizeof(R));
  R.q = q; R.k = k; R.v = v; R.compute = forward_stage; R.flops_factor = 1;
  FMCall(FMDistGPURunInit_Private(plan, d, g, &R, FM_SUCCESS));
  FMCallGoto(FMDistGPURunStart_Private(plan, d, g, &R, "forward"));
  FMDistGPUPipeline_Private(plan, d, g, &R);
  if (plan->nlocal > 0 && !R.cerr) {
    if (R.first) { /* no local row sees any key */
      FMCallGoto(FMCudaFillFloat(g->oacc, no, 0.f, us));
      FMCallGoto(FMCudaFillFloat(g->lacc, nl, -INFINITY, us));
    }
    FMCallGoto(FMCudaConvertOut(g->oacc, o, plan->dtype, no, us));
    if (lse) FMCallCUDAGoto(cudaMemcpyAsync(lse, g->lacc, nl * sizeof(float), cudaMemcpyDeviceToDevice, (cudaStream_t)us));
  }
  FMCallGoto(FMDistGPUSettle_Private(plan, d, g, &R, "the K/V exchange of the forward"));
  if (R.tr) {
    FMCallGoto(FMCudaStreamSynchronize(us));
    FMCallGoto(FMDistGPUTrace_Private(plan, d, g, &R));
  }
cleanup:
  FMCall(FMDistGPURunFinish_Private(plan, d, g, &R, "forward", ierr));
  return FM_SUCCESS;
}
