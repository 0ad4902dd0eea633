/*
 * setup_gpu.c - set-up of the context-parallel forward on the CUDA backend (built with CUDA
 * only; collective, at the end of FMPlanSetUp_CP). The schedule's transfers are cut into
 * exchange steps (FMDistExchangeSteps, steps.c). Each step is one NCCL group (or one set of
 * MPI messages, through pinned host memory or, with CUDA-aware MPI, on the device buffers
 * themselves) holding all of its sends and receives on every rank, so a step can always
 * complete once every rank has posted it. What a rank receives in one step lands in that
 * step's device buffer ([B][keys][Hkv][D]); the step is also a compute stage over those keys.
 * For each stage the rank's localized mask (localize.c: local rows x global key columns) is
 * restricted to the stage's key columns and uploaded as an ordinary non-causal mask: the
 * causal triangle of the global mask becomes the local interval [0, cut) of each column and is
 * folded into the lower or upper interval. Steps are whole (hop, pair) exchanges by default;
 * -fm_plan_step_chunks n cuts them into steps of at most n chunks per pair (finer pipelining,
 * one more merge per step). -fm_gpu_aware_mpi auto|0|1 is resolved here to one answer on
 * every rank. An update (FMPlanSetUp_CP's update path) keeps the transport, the stream, the
 * events, the NCCL connections (a new connection run only for pairs not connected yet) and the
 * pools of the stage buffers, accumulators and staging (the backward's too, exec_gpu_bwd.c)
 * while large enough, and rebuilds the steps and stage masks.
 */
#include "gpuimpl.h"
#include <cuda_runtime_api.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/*
 * One column of the localized mask as two intervals: the causal cut [0, cut) is merged into
 * an empty interval, or into one that starts inside it. Returns 0 when that is impossible
 * (both intervals non-empty and starting past the cut).
 */
static int fold_column(int cut, int32_t b[4])
{
  if (cut <= 0) return 1;
  if (b[1] <= b[0]) { b[0] = 0; b[1] = cut; return 1; }
  if (b[3] <= b[2]) { b[2] = 0; b[3] = cut; return 1; }
  if (b[0] <= cut) { b[0] = 0; b[1] = b[1] > cut ? b[1] : cut; return 1; }
  if (b[2] <= cut) { b[2] = 0; b[3] = b[3] > cut ? b[3] : cut; return 1; }
  return 0;
}

/* The next stage mask of the pool (g->mpool, in the last steps' order), or NULL. */
static void *pool_next(FMDistGPU *g)
{
  void *h = NULL;
  while (!h && g->mpnext < g->npool) {
    h = g->mpool[g->mpnext];
    g->mpool[g->mpnext++] = NULL;
  }
  return h;
}

/* The pool's handles that no stage took (errors ignored: freeing). */
static void pool_drain(FMDistGPU *g)
{
  for (int i = 0; i < g->npool; i++) {
    FMCudaMaskFree(g->mpool[i]);
    g->mpool[i] = NULL;
  }
  g->npool = g->mpnext = 0;
}

/* Upload columns x0..x0+n-1 of the localized mask lm (FMDistLocalizeColumns; cols: their global
   indices, for messages); its rows are mask_batch (<= 1: one) samples of lm->mask_heads / mask_batch
   mask heads. Into a pooled device mask of an update when it is large enough (in place, on stream:
   the update synchronized the streams before), else a new one. */
static FMErrorCode upload_stage(const FMDistLocalMask *lm, int mask_batch, int x0, int n, const int *cols, FMDistGPU *g,
                                void *stream, void **dmask)
{
  int32_t *b[4] = {NULL, NULL, NULL, NULL};
  size_t N = (size_t)lm->mask_heads * n;
  FMMaskDesc md;
  FMErrorCode ierr = FM_SUCCESS;
  const int32_t nl = lm->nlocal;
  int present = 0; /* the vectors some column leaves off its default (lts = lte = nlocal, uts = ute = 0) */
  *dmask = NULL;
  for (int v = 0; v < 4 && !ierr; v++) ierr = FMMalloc(N + 1, &b[v]);
  for (int h = 0; h < lm->mask_heads && !ierr; h++)
    for (int x = 0; x < n && !ierr; x++) {
      size_t o = (size_t)h * lm->seqlen_k + x0 + x, t = (size_t)h * n + x;
      int32_t w[4] = {FMDistLocalBound(lm, 0, o), FMDistLocalBound(lm, 1, o), FMDistLocalBound(lm, 2, o), FMDistLocalBound(lm, 3, o)};
      if (!fold_column(lm->cut ? lm->cut[x0 + x] : 0, w))
        ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_SUP,
                               "Key %d of mask head %d: the causal triangle plus two masked intervals below the diagonal "
                               "cannot be localized into the GPU kernels' two intervals; use -fm_backend cpu for this mask",
                               cols[x0 + x], h);
      for (int v = 0; v < 4; v++) b[v][t] = w[v];
      present |= (w[0] != nl) | (w[1] != nl) << 1 | (w[2] != 0) << 2 | (w[3] != 0) << 3;
    }
  if (!ierr) {
    memset(&md, 0, sizeof(md));
    md.seqlen_q = lm->nlocal;
    md.seqlen_k = n;
    md.mask_batch = mask_batch > 1 ? mask_batch : 1;
    md.mask_heads = lm->mask_heads / md.mask_batch;
    md.causal = 0;
    md.present = present; /* exact: the upload skips the others and a stage with none takes the dense backward */
    for (int v = 0; v < 4; v++) md.bnd[v] = b[v];
    {
      void *h = pool_next(g);
      int done = 0;
      if (h) ierr = FMCudaMaskUpdate(&md, 1, h, stream, &done); /* one thread: the bounds above are built on one */
      if (done && !ierr) *dmask = h;
      else {
        FMCudaMaskFree(h);
        if (!ierr) ierr = FMCudaMaskUpload(&md, dmask);
      }
    }
  }
  for (int v = 0; v < 4; v++) free(b[v]);
  FMCall(ierr);
  return FM_SUCCESS;
}

/* Whether a local row can see some key of chunk c. */
static int sees(FMPlan plan, const FMDist *d, int c)
{
  return plan->nlocal > 0 && FMDistChunkKeyLen(&d->ch, c) > 0 && d->myneed[c];
}

static FMErrorCode resolve_transport(FMPlan plan, FMDist *d)
{
  FMContext ctx = plan->ctx;
  int P = ctx->size, shared = -1;
  for (int r = 0; r < P && shared < 0 && ctx->all; r++)
    for (int s = r + 1; s < P; s++)
      if (ctx->all[r].node == ctx->all[s].node && ctx->all[r].gpu_busid[0] && !strcmp(ctx->all[r].gpu_busid, ctx->all[s].gpu_busid)) {
        shared = r;
        break;
      }
#if FM_HAVE_NCCL
  d->transport = d->opt.transport;
  FMCheck(!(d->transport == FM_DIST_TRANSPORT_NCCL && shared >= 0), MPI_COMM_SELF, FM_ERR_SUP,
          "-fm_plan_transport nccl: rank %d shares its GPU (%s) with another rank of its node, and NCCL needs one GPU per rank; "
          "use -fm_plan_transport mpi or one rank per GPU",
          shared, shared >= 0 ? ctx->all[shared].gpu_busid : "");
  if (d->transport == FM_DIST_TRANSPORT_AUTO) d->transport = shared >= 0 ? FM_DIST_TRANSPORT_MPI : FM_DIST_TRANSPORT_NCCL;
#else
  d->transport = d->opt.transport;
  FMCheck(d->transport != FM_DIST_TRANSPORT_NCCL, MPI_COMM_SELF, FM_ERR_SUP,
          "-fm_plan_transport nccl: this build has no NCCL (configure --with-nccl); use -fm_plan_transport mpi");
  d->transport = FM_DIST_TRANSPORT_MPI;
#endif
  return FM_SUCCESS;
}

/*
 * This rank's answer to -fm_gpu_aware_mpi (not collective; the caller takes the minimum over
 * the ranks, so one rank without CUDA-aware MPI makes every rank stage). 1 forces it, 0 stages,
 * auto asks the MPI (FMMPICUDAAware_Private). The device path needs a tag per piece below
 * MPI_TAG_UB: forced, too many pieces is an error; auto stages.
 */
static FMErrorCode resolve_gpu_aware(FMPlan plan, FMDist *d, int *direct, const char **why)
{
  long long ntags = 2LL * plan->batch * d->ch.nchunks;
  int fits = ntags - 1 <= (long long)d->tag_ub;
  *direct = 0;
  *why = "staged";
  if (d->transport != FM_DIST_TRANSPORT_MPI) return FM_SUCCESS;
  if (d->opt.gpu_aware == FM_DIST_GPU_AWARE_NO) { *why = "-fm_gpu_aware_mpi 0"; return FM_SUCCESS; }
  if (d->opt.gpu_aware == FM_DIST_GPU_AWARE_YES) {
    FMCheck(fits, MPI_COMM_SELF, FM_ERR_SUP,
            "-fm_gpu_aware_mpi 1: %d chunks x 2 (K, V) x batch %d need MPI tags up to %lld but MPI_TAG_UB is %d; "
            "use a larger -fm_plan_chunk or -fm_gpu_aware_mpi 0",
            d->ch.nchunks, plan->batch, ntags - 1, d->tag_ub);
    *direct = 1;
    *why = "-fm_gpu_aware_mpi 1 (forced)";
    return FM_SUCCESS;
  }
#if FM_HAVE_MPIX_CUDA
  *direct = FMMPICUDAAware_Private();
  *why = *direct ? "auto: MPIX_Query_cuda_support() = 1 on every rank" : "auto: MPIX_Query_cuda_support() = 0 on some rank";
#else
  *why = "auto: this MPI has no MPIX_Query_cuda_support()";
#endif
  if (*direct && !fits) { *direct = 0; *why = "auto: CUDA-aware, but the pieces need tags past MPI_TAG_UB"; }
  return FM_SUCCESS;
}

/* An event made by FMCudaEventCreate, or NULL (see FMDistDestroyGPU_Private: errors ignored). */
static void event_free(void *ev)
{
  if (ev) (void)cudaEventDestroy((cudaEvent_t)ev);
}

/* The bound-dependent part of g: the steps and their stage masks (the pools stay). keep: the
   stage masks go to g->mpool (local stage first, then the steps) for the next upload, else they
   are freed; when the pool cannot grow they are freed all the same. Errors ignored. */
static void free_steps(FMDistGPU *g, int keep)
{
  pool_drain(g);
  if (keep && g->mpcap < g->nsteps + 1) {
    void **p = (void **)realloc(g->mpool, sizeof(void *) * (size_t)(g->nsteps + 1));
    if (p) { g->mpool = p; g->mpcap = g->nsteps + 1; }
  }
  keep = keep && g->mpcap >= g->nsteps + 1;
  if (keep && g->dmask0) g->mpool[g->npool++] = g->dmask0;
  else FMCudaMaskFree(g->dmask0);
  g->dmask0 = NULL;
  for (int s = 0; s < g->nsteps && g->st; s++) {
    if (keep && g->st[s].dmask) g->mpool[g->npool++] = g->st[s].dmask;
    else FMCudaMaskFree(g->st[s].dmask);
    free(g->st[s].send);
    free(g->st[s].recv);
  }
  free(g->st);
  g->st = NULL;
  g->nsteps = 0;
}

FMErrorCode FMDistDestroyGPU_Private(FMDist *d)
{
  FMDistGPU *g = d ? (FMDistGPU *)d->gpu : NULL;
  if (!g) return FM_SUCCESS;
  /* Teardown calls the CUDA runtime itself and ignores its errors: after an aborted exchange or a
     sticky device error every call here fails, and the kernel layer's helpers would raise (print,
     or abort under FM_ERROR_HANDLER_ABORT) once per buffer while nothing can be done about it. */
  if (g->cs) (void)cudaStreamSynchronize((cudaStream_t)g->cs);
  free_steps(g, 0);
  free(g->mpool);
  if (g->kpool) (void)cudaFree(g->kpool);
  if (g->vpool) (void)cudaFree(g->vpool);
  (void)cudaFree(g->oacc); (void)cudaFree(g->lacc);
  if (g->rs) (void)cudaStreamSynchronize((cudaStream_t)g->rs);
  (void)cudaFree(g->bws); (void)cudaFree(g->dacc); (void)cudaFree(g->ppool);
  if (g->hpart) (void)cudaFreeHost(g->hpart);
  if (g->hred) (void)cudaFreeHost(g->hred);
  if (g->rs) (void)cudaStreamDestroy((cudaStream_t)g->rs);
  event_free(g->ev_in);
  event_free(g->ev_done);
  for (int s = 0; s < g->nev; s++) {
    event_free(g->ev_c0[s]); event_free(g->ev_c1[s]);
    event_free(g->ev_w0[s]); event_free(g->ev_k0[s]); event_free(g->ev_k1[s]);
  }
  free(g->ev_c0); free(g->ev_c1); free(g->ev_w0); free(g->ev_k0); free(g->ev_k1);
  if (g->hsend) (void)cudaFreeHost(g->hsend);
  if (g->hrecv) (void)cudaFreeHost(g->hrecv);
  if (g->ping) (void)cudaFree(g->ping);
  free(g->rq);
  if (g->cs) (void)cudaStreamDestroy((cudaStream_t)g->cs);
  free(g->where); free(g->woff); free(g->linked);
  free(g);
  d->gpu = NULL;
  (void)cudaGetLastError();
  return FM_SUCCESS;
}

/* FMDistGPUDevGrow_Private - see gpuimpl.h. */
FMErrorCode FMDistGPUDevGrow_Private(size_t need, size_t want, void **p, size_t *cap)
{
  if (need <= *cap && (*p || need == 0)) return FM_SUCCESS;
  if (*p) FMCall(FMCudaFree(*p));
  *p = NULL;
  *cap = 0;
  FMCall(FMCudaMalloc(want, p));
  *cap = want;
  return FM_SUCCESS;
}

/* FMDistGPUHostGrow_Private - see gpuimpl.h. */
FMErrorCode FMDistGPUHostGrow_Private(size_t need, char **p, size_t *cap)
{
  if (need < 1) need = 1;
  if (need <= *cap && *p) return FM_SUCCESS;
  if (*p) FMCall(FMCudaHostFree(*p));
  *p = NULL;
  *cap = 0;
  FMCall(FMCudaHostAlloc(need, (void **)p));
  *cap = need;
  return FM_SUCCESS;
}

/* The event arrays: at least n events in each (created ones kept). */
static FMErrorCode events_grow(FMDistGPU *g, int n)
{
  void ***a[5] = {&g->ev_c0, &g->ev_c1, &g->ev_w0, &g->ev_k0, &g->ev_k1};
  if (n <= g->nev) return FM_SUCCESS;
  for (int i = 0; i < 5; i++) {
    void **x = (void **)realloc(*a[i], sizeof(void *) * (size_t)n);
    FMCheck(x, MPI_COMM_SELF, FM_ERR_MEM, "Cannot allocate %d event handles", n);
    *a[i] = x;
  }
  while (g->nev < n) {
    const int e = g->nev++; /* counted first: the destroy frees what was created (NULL is skipped) */
    for (int i = 0; i < 5; i++) (*a[i])[e] = NULL;
    for (int i = 0; i < 5; i++) FMCall(FMCudaEventCreate(&(*a[i])[e]));
  }
  return FM_SUCCESS;
}

/*
 * The accumulators and the stage masks (a rank with local rows only): the columns of every stage
 * (the own keys first, then each step's) are localized at once (FMDistLocalizeColumns: only these
 * columns, not the whole key axis), then each stage that a local row sees is folded and uploaded.
 */
static FMErrorCode upload_stages(FMPlan plan, FMDist *d, FMDistGPU *g, size_t no, size_t nl)
{
  int me = plan->ctx->rank, *cols = NULL, *x0 = NULL, n = 0;
  FMMaskDesc m;
  FMDistLocalMask lm;
  FMErrorCode ierr = FM_SUCCESS;
  int any = 0;
  /* a quarter more room: the next partition's local rows mostly fit */
  FMCall(FMDistGPUDevGrow_Private(no * sizeof(float), no * sizeof(float) / 4 * 5 + 16, (void **)&g->oacc, &g->ocap));
  FMCall(FMDistGPUDevGrow_Private(nl * sizeof(float), nl * sizeof(float) / 4 * 5 + 16, (void **)&g->lacc, &g->lcap));
  FMCall(FMMaskGetDesc_Private(plan->mask, &m));
  memset(&lm, 0, sizeof(lm));
  for (int s = 0; s < g->nsteps; s++) n += g->st[s].nk;
  ierr = FMMalloc((size_t)n + d->nkeys + 1, &cols);
  if (!ierr) ierr = FMMalloc(g->nsteps + 2, &x0);
  if (!ierr) {
    memcpy(cols, d->keys, sizeof(int) * (size_t)d->nkeys);
    n = d->nkeys;
    for (int s = 0; s < g->nsteps; s++) {
      x0[s] = n;
      for (int i = 0; i < g->st[s].nrecv; i++) {
        int k0, k1;
        FMDistChunkKeys(&d->ch, g->st[s].recv[i].chunk, &k0, &k1);
        for (int j = k0; j < k1; j++) cols[n++] = j;
      }
    }
    x0[g->nsteps] = n;
    ierr = FMDistLocalizeColumns(&m, &d->ch, d->part.rstart[me + 1] - d->part.rstart[me], d->part.rchunks + d->part.rstart[me], n, cols, &lm);
  }
  for (int b = d->part.rstart[me]; !ierr && b < d->part.rstart[me + 1]; b++) any |= sees(plan, d, d->part.rchunks[b]);
  if (!ierr && any && d->nkeys > 0) ierr = upload_stage(&lm, m.mask_batch, 0, d->nkeys, cols, g, plan->stream, &g->dmask0);
  for (int s = 0; s < g->nsteps && !ierr; s++) {
    GStep *S = &g->st[s];
    any = 0;
    for (int i = 0; i < S->nrecv; i++) any |= sees(plan, d, S->recv[i].chunk);
    if (any && x0[s + 1] > x0[s]) ierr = upload_stage(&lm, m.mask_batch, x0[s], x0[s + 1] - x0[s], cols, g, plan->stream, &S->dmask);
  }
  pool_drain(g);
  free(cols);
  free(x0);
  (void)FMDistLocalMaskDestroy(&lm);
  FMCall(ierr);
  return FM_SUCCESS;
}

/* The steps of this rank (FMDistExchangeStepsRank), where each chunk is held, and the checks. */
static FMErrorCode build_steps(FMPlan plan, FMDist *d, FMDistGPU *g)
{
  int me = plan->ctx->rank, C = d->ch.nchunks, ntx = 0;
  FMDistStepXfer *tx = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  /* this rank's steps only, numbered 0..nsteps-1 in the global order (tags are per chunk, and no step
     is collective, so ranks need not share step numbers) */
  FMCall(FMDistExchangeStepsRank((FMDistSchedType)d->opt.schedule, &d->ch, &d->part, &d->topo, &d->route, d->opt.step_chunks, me, &ntx,
                                 &tx, &g->nsteps));
  if (!g->where) FMCallGoto(FMMalloc(C, &g->where));
  if (!g->woff) FMCallGoto(FMMalloc(C, &g->woff));
  for (int c = 0; c < C; c++) { g->where[c] = d->part.owner[c] == me ? -1 : -2; g->woff[c] = d->kofs[c]; }
  FMCallGoto(FMCalloc(g->nsteps + 1, &g->st));
  for (int k = 0; k < ntx; k++) {
    g->st[tx[k].step].nsend += tx[k].src == me;
    g->st[tx[k].step].nrecv += tx[k].dst == me;
  }
  for (int s = 0; s < g->nsteps; s++) {
    FMCallGoto(FMMalloc(g->st[s].nsend + 1, &g->st[s].send));
    FMCallGoto(FMMalloc(g->st[s].nrecv + 1, &g->st[s].recv));
    g->st[s].nsend = g->st[s].nrecv = 0;
  }
  for (int k = 0; k < ntx; k++) {
    GStep *S = &g->st[tx[k].step];
    if (tx[k].src == me) S->send[S->nsend++] = (GXfer){tx[k].chunk, tx[k].dst, tx[k].level};
    if (tx[k].dst == me) {
      S->recv[S->nrecv++] = (GXfer){tx[k].chunk, tx[k].src, tx[k].level};
      g->where[tx[k].chunk] = tx[k].step;
      g->woff[tx[k].chunk] = S->nk;
      S->nk += FMDistChunkKeyLen(&d->ch, tx[k].chunk);
    }
  }
cleanup:
  free(tx);
  FMCall(ierr);
  /* sends must leave from where the chunk is held at that step */
  for (int s = 0; s < g->nsteps; s++)
    for (int i = 0; i < g->st[s].nsend; i++) {
      int c = g->st[s].send[i].chunk;
      FMCheck(g->where[c] == -1 || (g->where[c] >= 0 && g->where[c] < s), MPI_COMM_SELF, FM_ERR_LIB,
              "Step %d sends chunk %d that rank %d does not hold yet (internal error in the step order)", s, c, me);
    }
  return FM_SUCCESS;
}

#define FM_GPU_POOL_ALIGN 256 /* byte alignment of each stage buffer inside the pools */

/*
 * The stage buffers as pieces of the pools (grown, with a quarter more room so that the next
 * masks' steps mostly fit, never past the worst case of the shape: every key of the batch), the
 * host staging sizes, events and requests (grown only).
 */
static FMErrorCode carve_buffers(FMPlan plan, FMDist *d, FMDistGPU *g)
{
  size_t row = (size_t)plan->heads_kv * plan->head_dim * FMDTypeSize(plan->dtype), B = (size_t)plan->batch, total = 0, o = 0, want;
  const size_t worst = B * (size_t)d->ch.seqlen_k * row + (size_t)(g->nsteps + 1) * FM_GPU_POOL_ALIGN;
  for (int s = 0; s < g->nsteps; s++) total += (B * g->st[s].nk * row + FM_GPU_POOL_ALIGN - 1) / FM_GPU_POOL_ALIGN * FM_GPU_POOL_ALIGN;
  want = total + total / 4;
  if (want > worst) want = worst > total ? worst : total;
  if (total > 0) {
    size_t kc = g->poolcap, vc = g->poolcap;
    FMCall(FMDistGPUDevGrow_Private(total, want, &g->kpool, &kc));
    FMCall(FMDistGPUDevGrow_Private(total, want, &g->vpool, &vc));
    g->poolcap = kc < vc ? kc : vc;
  }
  for (int s = 0; s < g->nsteps; s++) {
    GStep *S = &g->st[s];
    size_t len = B * S->nk * row;
    S->kbuf = len ? (char *)g->kpool + o : NULL;
    S->vbuf = len ? (char *)g->vpool + o : NULL;
    o += (len + FM_GPU_POOL_ALIGN - 1) / FM_GPU_POOL_ALIGN * FM_GPU_POOL_ALIGN;
    for (int i = 0; i < S->nsend; i++) S->hsend += (size_t)d->cbytes[S->send[i].chunk];
    for (int i = 0; i < S->nrecv; i++) S->hrecv += (size_t)d->cbytes[S->recv[i].chunk];
  }
  FMCall(events_grow(g, g->nsteps + 1));
  if (g->transport == FM_DIST_TRANSPORT_MPI && !g->direct) {
    size_t hs = 0, hr = 0;
    for (int s = 0; s < g->nsteps; s++) {
      hs = g->st[s].hsend > hs ? g->st[s].hsend : hs;
      hr = g->st[s].hrecv > hr ? g->st[s].hrecv : hr;
    }
    FMCall(FMDistGPUHostGrow_Private(hs + 1, &g->hsend, &g->hscap));
    FMCall(FMDistGPUHostGrow_Private(hr + 1, &g->hrecv, &g->hrcap));
  }
  if (g->transport == FM_DIST_TRANSPORT_MPI) {
    /* the largest step's requests, here so that no step allocates (a step that could not would
       leave its peers waiting): direct, one per piece, (sends + receives) x 2 x batch; staged,
       one per chunk */
    size_t nr = 0;
    for (int s = 0; s < g->nsteps; s++) {
      size_t n = (size_t)(g->st[s].nsend + g->st[s].nrecv) * (g->direct ? 2 * B : 1);
      nr = n > nr ? n : nr;
    }
    FMCheck(nr <= (size_t)INT_MAX, MPI_COMM_SELF, FM_ERR_SUP,
            "-fm_gpu_aware_mpi: an exchange step of %zu messages is more than MPI_Waitall takes; use -fm_plan_step_chunks or -fm_gpu_aware_mpi 0", nr);
    if (nr + 1 > g->rqcap) {
      free(g->rq);
      g->rq = NULL;
      g->rqcap = 0;
      FMCall(FMMalloc(nr + 1, &g->rq));
      g->rqcap = nr + 1;
    }
  }
  return FM_SUCCESS;
}

/*
 * The purely local part of the GPU set-up (agreed by the caller). A full one (update = 0) first
 * makes the stream and the two call events; an update waits for the streams (a forward of the
 * last plan may still read the stage masks) and frees the old steps only.
 */
static FMErrorCode setup_gpu_local(FMPlan plan, FMDist *d, FMDistGPU *g, int update)
{
  size_t B = (size_t)plan->batch;
  size_t no = B * plan->nlocal * plan->heads_q * plan->head_dim, nl = B * plan->heads_q * plan->nlocal;
  if (!update) {
    /* The exchange stream gets the highest priority: NCCL moves data with kernels, and behind
       an attention kernel that fills every SM with queued CTAs a normal-priority NCCL kernel
       starts only when the attention kernel ends (measured: a 1.9 ms exchange took 5.3-16 ms
       next to the local stage, all of it exposed). With priority its CTAs take the next SM
       that frees up. */
    FMCall(FMCudaStreamCreate(1, &g->cs));
    FMCall(FMCudaEventCreate(&g->ev_in));
    FMCall(FMCudaEventCreate(&g->ev_done));
  } else {
    FMCall(FMCudaStreamSynchronize(g->cs));
    FMCall(FMCudaStreamSynchronize(plan->stream));
    /* the last run's stage kernels may be on another stream (FMPlanSetStream since): they read
       the stage masks this update reuses in place */
    if (g->last_stream != plan->stream) FMCall(FMCudaStreamSynchronize(g->last_stream));
    free_steps(g, 1);
  }
  FMCall(build_steps(plan, d, g));
  FMCall(carve_buffers(plan, d, g));
  if (plan->nlocal > 0) FMCall(upload_stages(plan, d, g, no, nl));
  pool_drain(g); /* a rank without rows uploads nothing: its old stage masks go now */
  /* the in-place uploads ran on the plan's stream: done before a run on any stream reads them */
  if (update) FMCall(FMCudaStreamSynchronize(plan->stream));
  return FM_SUCCESS;
}

/* FMDistGPUMarkLinked_Private - see gpuimpl.h. */
void FMDistGPUMarkLinked_Private(FMPlan plan, FMDistGPU *g, int fresh)
{
  if (!g->linked) return;
  if (fresh) memset(g->linked, 0, (size_t)plan->ctx->size);
  for (int s = 0; s < g->nsteps; s++) {
    for (int i = 0; i < g->st[s].nsend; i++) g->linked[g->st[s].send[i].peer] |= 1;
    for (int i = 0; i < g->st[s].nrecv; i++) g->linked[g->st[s].recv[i].peer] |= 2;
  }
  g->linked_gen = g->gen;
}

#if FM_HAVE_NCCL
/*
 * After an update on the NCCL transport: the context's communicators (new ones after an
 * aborted exchange of any plan) and the connection run, only when some rank has a step with a
 * peer it is not connected to yet (one allreduce decides). Collective, agreed.
 */
static FMErrorCode nccl_update(FMPlan plan, FMDist *d, FMDistGPU *g)
{
  void *w = NULL;
  int miss = 0, any = 0;
  FMCall(FMContextGetNCCL_Private(plan->ctx, &w, NULL, NULL)); /* collective, agreed inside */
  if (FMContextNCCLGeneration_Private(plan->ctx) != g->gen || !g->nccl) {
    g->nccl = w;
    g->gen = FMContextNCCLGeneration_Private(plan->ctx);
  }
  miss = g->linked_gen != g->gen || !g->linked;
  for (int s = 0; s < g->nsteps && !miss; s++) {
    for (int i = 0; i < g->st[s].nsend && !miss; i++) miss = !(g->linked[g->st[s].send[i].peer] & 1);
    for (int i = 0; i < g->st[s].nrecv && !miss; i++) miss = !(g->linked[g->st[s].recv[i].peer] & 2);
  }
  FMCall(FMAgreeAny(plan->hdr.comm, miss, &any));
  if (!any) return FM_SUCCESS;
  FMCall(FMDistNCCLConnect_Private(plan, d, g)); /* collective, agreed inside */
  FMDistGPUMarkLinked_Private(plan, g, g->linked_gen != g->gen);
  return FM_SUCCESS;
}
#endif

/* An update of a set-up GPU executor (FMDistSetUpGPU_Private with update = 1). */
static FMErrorCode update_gpu(FMPlan plan, FMDist *d, FMDistGPU *g)
{
  FMErrorCode ierr = setup_gpu_local(plan, d, g, 1);
  ierr = FMAgreeCode(plan->hdr.comm, ierr);
#if FM_HAVE_NCCL
  if (!ierr && g->transport == FM_DIST_TRANSPORT_NCCL) ierr = nccl_update(plan, d, g);
#endif
  FMCall(ierr);
  return FM_SUCCESS;
}

FMErrorCode FMDistSetUpGPU_Private(FMPlan plan, FMDist *d, int update)
{
  FMDistGPU *g;
  FMErrorCode ierr;
  int direct = 0, nodirect = 0;
  const char *why = "staged";
  if (update && d->gpu) { /* update is the same on every rank, and so is d->gpu after the last set-up */
    ierr = update_gpu(plan, d, (FMDistGPU *)d->gpu);
    if (ierr) {
      (void)FMDistDestroyGPU_Private(d);
      return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr);
    }
    return FM_SUCCESS;
  }
  FMCall(FMDistDestroyGPU_Private(d));
  FMAgree(plan->hdr.comm, resolve_transport(plan, d));
  FMAgree(plan->hdr.comm, resolve_gpu_aware(plan, d, &direct, &why));
  FMCall(FMAgreeAny(plan->hdr.comm, !direct, &nodirect)); /* some rank cannot pass device pointers to MPI */
  if (direct && nodirect) why = "auto: MPIX_Query_cuda_support() = 0 on some rank";
  if (d->transport == FM_DIST_TRANSPORT_NCCL) {
    void *world = NULL;
    FMCall(FMContextGetNCCL_Private(plan->ctx, &world, NULL, NULL)); /* collective, agreed inside */
    FMAgree(plan->hdr.comm, FMCalloc(1, &g));
    g->nccl = world;
    g->gen = FMContextNCCLGeneration_Private(plan->ctx);
  } else {
    FMAgree(plan->hdr.comm, FMCalloc(1, &g));
  }
  g->transport = d->transport;
  g->direct = !nodirect;
  g->direct_why = why;
  d->gpu = g;
  ierr = FMCalloc(plan->ctx->size, &g->linked);
  if (!ierr) ierr = setup_gpu_local(plan, d, g, 0);
  ierr = FMAgreeCode(plan->hdr.comm, ierr);
#if FM_HAVE_NCCL
  if (!ierr && g->transport == FM_DIST_TRANSPORT_NCCL) {
    ierr = FMDistNCCLConnect_Private(plan, d, g);
    if (!ierr) FMDistGPUMarkLinked_Private(plan, g, 1);
  }
#endif
  if (ierr) {
    (void)FMDistDestroyGPU_Private(d);
    return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr);
  }
  return FM_SUCCESS;
}

FMErrorCode FMDistViewGPU_Private(FMPlan plan, FMDist *d, FILE *fp)
{
  FMDistGPU *g = (FMDistGPU *)d->gpu;
  int stages = 0;
  char how[160] = "";
  for (int s = 0; s < g->nsteps; s++) stages += g->st[s].dmask != NULL;
  if (g->transport == FM_DIST_TRANSPORT_MPI)
    snprintf(how, sizeof(how), " (%s; %s)", g->direct ? "CUDA-aware MPI on device buffers" : "staged through pinned host memory",
             g->direct_why);
  FMAttnProblem p;
  FMCall(FMPlanGetProblem_Private(plan, &p));
  p.nq = plan->nlocal > 0 ? plan->nlocal : 1;
  FMCall(FMPrintf(plan->hdr.comm, fp, "  GPU: transport %s%s, %d exchange steps; on rank 0: local stage %s, %d arriving stages computed\n",
                  FMDistTransportNames[g->transport], how, g->nsteps, g->dmask0 ? "computed" : "empty", stages));
  FMCall(FMPrintf(plan->hdr.comm, fp, "  GPU backward: one piece per stage (%s), dK/dV partials summed to their owners over MPI through pinned memory\n",
                  FMCudaBackwardPathName(&p)));
  return FM_SUCCESS;
}

