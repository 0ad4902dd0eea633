/*
 * exec_gpu.c - the context-parallel forward on the CUDA backend (built with CUDA only).
 *
 * Set-up (collective, at the end of FMPlanSetUp_CP). The schedule's transfers are cut into
 * exchange steps (FMDistExchangeSteps, steps.c). Each step is one NCCL group (or one set of
 * MPI messages, through pinned host memory or, with CUDA-aware MPI, on the device buffers
 * themselves) holding all of its sends and receives on every rank, so a step can always
 * complete once every rank has posted it. What a rank receives in one step lands in that step's device buffer ([B][keys][Hkv][D]);
 * the step is also a compute stage over those keys. For each stage the rank's localized mask
 * (localize.c: local rows x global key columns) is restricted to the stage's key columns and
 * uploaded as an ordinary non-causal mask: the causal triangle of the global mask becomes the
 * local interval [0, cut) of each column and is folded into the lower or upper interval.
 * Steps are whole (hop, pair) exchanges by default; -fm_plan_step_chunks n cuts them into
 * steps of at most n chunks per pair (finer pipelining, one more merge per step).
 *
 * Forward (collective). On the plan's stream: the local stage first (the rank's own K/V, in
 * place), then each stage as soon as its step's event fired, while the communication stream
 * moves the following steps; every stage writes an fp32 partial (O, LSE) merged exactly into
 * the accumulator through the LSE (in the kernel's epilogue), and at the end O is converted
 * to the plan's dtype. With
 * -fm_plan_overlap 0 every stage waits for the whole exchange. With NCCL nothing blocks the
 * host; with the MPI transport each step's messages are completed by the host (the stages
 * already queued keep the GPU busy meanwhile).
 *
 * CUDA-aware MPI (-fm_gpu_aware_mpi auto|0|1, resolved at set-up to one answer on every rank):
 * the mpi transport then posts each step's messages on device addresses, one message per
 * (chunk, K or V, batch) piece from where the chunk is held and into the stage buffer (the
 * NCCL path's addresses), with no host staging. The host waits for the plan's stream to reach
 * the forward (event ev_in) before the first step: the caller's K/V are then ready and the
 * previous call's stages no longer read the stage buffers; a relayed chunk is ready once the
 * host completed the step that received it.
 */
#include "distimpl.h"
#include <flashmask/private/fmtrace.h>
#include <cuda_runtime_api.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if FM_HAVE_NCCL
#include <nccl.h>
#endif

typedef struct {
  int chunk, peer, level;
} GXfer;

typedef struct {
  int nsend, nrecv;
  GXfer *send, *recv;    /* this rank's transfers of the step, in the global order */
  int nk;                /* keys received in the step (length of the stage buffer) */
  void *kbuf, *vbuf;     /* device [B][nk][Hkv][D], or NULL when nothing arrives here */
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
  cudaStream_t cs;       /* communication stream */
  cudaEvent_t ev_in, ev_done;
  cudaEvent_t *ev_c0, *ev_c1;        /* [nsteps] around each exchange on cs */
  cudaEvent_t *ev_w0, *ev_k0, *ev_k1; /* [nsteps + 1] stage wait start, compute start, end (0 = local) */
  int nev;               /* events created in the arrays */
  char *hsend, *hrecv;   /* pinned host staging (mpi transport, unless direct) */
  MPI_Request *rq;       /* direct: room for the largest step's messages (allocated at set-up) */
} FMDistGPU;

/* ------------------------------------------------------------------ set-up */
#if FM_HAVE_NCCL
static FMErrorCode nccl_connect(FMPlan plan, FMDist *d, FMDistGPU *g);
#endif
#define DBG(...) do { if (d->debug_fail >= 0) { fprintf(stderr, "[%d] fail-exchange test: ", plan->ctx->rank); fprintf(stderr, __VA_ARGS__); fflush(stderr); } } while (0)

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

/* Upload the localized mask restricted to the key columns cols[0..n) (global indices). */
static FMErrorCode upload_stage(const FMDistLocalMask *lm, int n, const int *cols, void **dmask)
{
  int32_t *b[4] = {NULL, NULL, NULL, NULL};
  size_t N = (size_t)lm->mask_heads * n;
  FMMaskDesc md;
  FMErrorCode ierr = FM_SUCCESS;
  *dmask = NULL;
  for (int v = 0; v < 4 && !ierr; v++) ierr = FMMalloc(N + 1, &b[v]);
  for (int h = 0; h < lm->mask_heads && !ierr; h++)
    for (int x = 0; x < n && !ierr; x++) {
      size_t o = (size_t)h * lm->seqlen_k + cols[x], t = (size_t)h * n + x;
      int32_t w[4] = {lm->bnd[0][o], lm->bnd[1][o], lm->bnd[2][o], lm->bnd[3][o]};
      if (!fold_column(lm->cut ? lm->cut[cols[x]] : 0, w))
        ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_SUP,
                               "Key %d of mask head %d: the causal triangle plus two masked intervals below the diagonal "
                               "cannot be localized into the GPU kernels' two intervals; use -fm_backend cpu for this mask",
                               cols[x], h);
      for (int v = 0; v < 4; v++) b[v][t] = w[v];
    }
  if (!ierr) {
    memset(&md, 0, sizeof(md));
    md.seqlen_q = lm->nlocal;
    md.seqlen_k = n;
    md.mask_heads = lm->mask_heads;
    md.causal = 0;
    md.present = 15;
    for (int v = 0; v < 4; v++) md.bnd[v] = b[v];
    ierr = FMCudaMaskUpload(&md, dmask);
  }
  for (int v = 0; v < 4; v++) free(b[v]);
  FMCall(ierr);
  return FM_SUCCESS;
}

/* Whether a local row can see some key of chunk c. */
static int sees(FMPlan plan, const FMDist *d, int c)
{
  return plan->nlocal > 0 && FMDistChunkKeyLen(&d->ch, c) > 0 && d->needed[(size_t)plan->ctx->rank * d->ch.nchunks + c];
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
  FMCheck(!(d->transport == FM_DIST_TRANSPORT_NCCL && shared >= 0), MPI_COMM_SELF, FM_ERR_SUP,
          "-fm_plan_transport nccl: rank %d shares its GPU (%s) with another rank of its node, and NCCL needs one GPU per rank; "
          "use -fm_plan_transport mpi or one rank per GPU",
          shared, shared >= 0 ? ctx->all[shared].gpu_busid : "");
  if (d->transport == FM_DIST_TRANSPORT_AUTO) d->transport = shared >= 0 ? FM_DIST_TRANSPORT_MPI : FM_DIST_TRANSPORT_NCCL;
#else
  FMCheck(d->transport != FM_DIST_TRANSPORT_NCCL, MPI_COMM_SELF, FM_ERR_SUP,
          "-fm_plan_transport nccl: this build has no NCCL (configure --with-nccl); use -fm_plan_transport mpi");
  d->transport = FM_DIST_TRANSPORT_MPI;
#endif
  return FM_SUCCESS;
}

/* Tag of batch b of chunk c's K (kv = 0) or V (kv = 1) on device buffers: unique per piece. */
static int piece_tag(int c, int kv, size_t b, size_t B) { return (int)(((size_t)c * 2 + (size_t)kv) * B + b); }

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
  if (d->gpu_aware == FM_DIST_GPU_AWARE_NO) { *why = "-fm_gpu_aware_mpi 0"; return FM_SUCCESS; }
  if (d->gpu_aware == FM_DIST_GPU_AWARE_YES) {
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

FMErrorCode FMDistDestroyGPU_Private(FMDist *d)
{
  FMDistGPU *g = d ? (FMDistGPU *)d->gpu : NULL;
  if (!g) return FM_SUCCESS;
  if (g->cs) cudaStreamSynchronize(g->cs);
  for (int s = 0; s < g->nsteps; s++) {
    cudaFree(g->st[s].kbuf);
    cudaFree(g->st[s].vbuf);
    FMCudaMaskFree(g->st[s].dmask);
    free(g->st[s].send);
    free(g->st[s].recv);
  }
  FMCudaMaskFree(g->dmask0);
  cudaFree(g->oacc); cudaFree(g->lacc);
  if (g->ev_in) cudaEventDestroy(g->ev_in);
  if (g->ev_done) cudaEventDestroy(g->ev_done);
  for (int s = 0; s < g->nev; s++) {
    if (s < g->nsteps) { cudaEventDestroy(g->ev_c0[s]); cudaEventDestroy(g->ev_c1[s]); }
    cudaEventDestroy(g->ev_w0[s]); cudaEventDestroy(g->ev_k0[s]); cudaEventDestroy(g->ev_k1[s]);
  }
  free(g->ev_c0); free(g->ev_c1); free(g->ev_w0); free(g->ev_k0); free(g->ev_k1);
  if (g->hsend) cudaFreeHost(g->hsend);
  if (g->hrecv) cudaFreeHost(g->hrecv);
  if (g->ping) cudaFree(g->ping);
  free(g->rq);
  if (g->cs) cudaStreamDestroy(g->cs);
  free(g->st); free(g->where); free(g->woff);
  free(g);
  d->gpu = NULL;
  (void)cudaGetLastError();
  return FM_SUCCESS;
}

static FMErrorCode dev_alloc(size_t bytes, void **p)
{
  *p = NULL;
  if (bytes == 0) return FM_SUCCESS;
  if (cudaMalloc(p, bytes) != cudaSuccess) {
    (void)cudaGetLastError();
    *p = NULL;
    FMRaise(MPI_COMM_SELF, FM_ERR_MEM, "Cannot allocate %zu bytes of device memory for the context-parallel plan", bytes);
  }
  return FM_SUCCESS;
}

/* The purely local part of the GPU set-up (agreed by the caller). */
static FMErrorCode setup_gpu_local(FMPlan plan, FMDist *d, FMDistGPU *g)
{
  int me = plan->ctx->rank, C = d->ch.nchunks, ntx = 0, *cols = NULL;
  FMDistStepXfer *tx = NULL;
  FMMaskDesc m;
  FMDistLocalMask lm;
  size_t row = (size_t)plan->heads_kv * plan->head_dim * FMDTypeSize(plan->dtype), B = (size_t)plan->batch;
  size_t no = B * plan->nlocal * plan->heads_q * plan->head_dim, nl = B * plan->heads_q * plan->nlocal;
  FMErrorCode ierr = FM_SUCCESS;

  {
    /* The exchange stream gets the highest priority: NCCL moves data with kernels, and behind
       an attention kernel that fills every SM with queued CTAs a normal-priority NCCL kernel
       starts only when the attention kernel ends (measured: a 1.9 ms exchange took 5.3-16 ms
       next to the local stage, all of it exposed). With priority its CTAs take the next SM
       that frees up. */
    int lo = 0, hi = 0;
    FMCallCUDA(cudaDeviceGetStreamPriorityRange(&lo, &hi));
    FMCallCUDA(cudaStreamCreateWithPriority(&g->cs, cudaStreamNonBlocking, hi));
  }
  FMCallCUDA(cudaEventCreate(&g->ev_in));
  FMCallCUDA(cudaEventCreate(&g->ev_done));
  FMCall(FMDistExchangeSteps((FMDistSchedType)d->schedule, &d->ch, &d->part, &d->topo, &d->route, d->step_chunks, &ntx, &tx, &g->nsteps));
  FMCall(FMCalloc(g->nsteps + 1, &g->st));
  FMCall(FMMalloc(C, &g->where));
  FMCall(FMMalloc(C, &g->woff));
  for (int c = 0; c < C; c++) { g->where[c] = d->part.owner[c] == me ? -1 : -2; g->woff[c] = d->kofs[c]; }
  for (int k = 0; k < ntx; k++) {
    g->st[tx[k].step].nsend += tx[k].src == me;
    g->st[tx[k].step].nrecv += tx[k].dst == me;
  }
  for (int s = 0; s < g->nsteps; s++) {
    FMCall(FMMalloc(g->st[s].nsend + 1, &g->st[s].send));
    FMCall(FMMalloc(g->st[s].nrecv + 1, &g->st[s].recv));
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
  free(tx);
  /* sends must leave from where the chunk is held at that step */
  for (int s = 0; s < g->nsteps; s++)
    for (int i = 0; i < g->st[s].nsend; i++) {
      int c = g->st[s].send[i].chunk;
      FMCheck(g->where[c] == -1 || (g->where[c] >= 0 && g->where[c] < s), MPI_COMM_SELF, FM_ERR_LIB,
              "Step %d sends chunk %d that rank %d does not hold yet (internal error in the step order)", s, c, me);
    }
  /* stage buffers, host staging sizes, events */
  for (int s = 0; s < g->nsteps; s++) {
    GStep *S = &g->st[s];
    FMCall(dev_alloc(B * S->nk * row, &S->kbuf));
    FMCall(dev_alloc(B * S->nk * row, &S->vbuf));
    for (int i = 0; i < S->nsend; i++) S->hsend += (size_t)d->cbytes[S->send[i].chunk];
    for (int i = 0; i < S->nrecv; i++) S->hrecv += (size_t)d->cbytes[S->recv[i].chunk];
  }
  FMCall(FMMalloc(g->nsteps + 1, &g->ev_c0));
  FMCall(FMMalloc(g->nsteps + 1, &g->ev_c1));
  FMCall(FMMalloc(g->nsteps + 1, &g->ev_w0));
  FMCall(FMMalloc(g->nsteps + 1, &g->ev_k0));
  FMCall(FMMalloc(g->nsteps + 1, &g->ev_k1));
  for (int s = 0; s <= g->nsteps; s++) {
    if (s < g->nsteps) { FMCallCUDA(cudaEventCreate(&g->ev_c0[s])); FMCallCUDA(cudaEventCreate(&g->ev_c1[s])); }
    FMCallCUDA(cudaEventCreate(&g->ev_w0[s]));
    FMCallCUDA(cudaEventCreate(&g->ev_k0[s]));
    FMCallCUDA(cudaEventCreate(&g->ev_k1[s]));
    g->nev = s + 1;
  }
  if (g->transport == FM_DIST_TRANSPORT_MPI && !g->direct) {
    size_t hs = 0, hr = 0;
    for (int s = 0; s < g->nsteps; s++) {
      hs = g->st[s].hsend > hs ? g->st[s].hsend : hs;
      hr = g->st[s].hrecv > hr ? g->st[s].hrecv : hr;
    }
    FMCallCUDA(cudaMallocHost((void **)&g->hsend, hs + 1));
    FMCallCUDA(cudaMallocHost((void **)&g->hrecv, hr + 1));
  }
  if (g->transport == FM_DIST_TRANSPORT_MPI && g->direct) {
    /* one request per piece: (sends + receives) x 2 x batch, the largest step */
    size_t nr = 0;
    for (int s = 0; s < g->nsteps; s++) {
      size_t n = (size_t)(g->st[s].nsend + g->st[s].nrecv) * 2 * B;
      nr = n > nr ? n : nr;
    }
    FMCheck(nr <= (size_t)INT_MAX, MPI_COMM_SELF, FM_ERR_SUP,
            "-fm_gpu_aware_mpi: an exchange step of %zu messages is more than MPI_Waitall takes; use -fm_plan_step_chunks or -fm_gpu_aware_mpi 0", nr);
    FMCall(FMMalloc(nr + 1, &g->rq));
  }
  /* accumulators and the stage masks (local rows only) */
  if (plan->nlocal > 0) {
    int any;
    FMCall(dev_alloc(no * sizeof(float), (void **)&g->oacc));
    FMCall(dev_alloc(nl * sizeof(float), (void **)&g->lacc));
    FMCall(FMMaskGetDesc_Private(plan->mask, &m));
    FMCall(FMDistLocalize(&m, &d->ch, d->part.rstart[me + 1] - d->part.rstart[me], d->part.rchunks + d->part.rstart[me], &lm));
    any = 0;
    for (int b = d->part.rstart[me]; b < d->part.rstart[me + 1]; b++) any |= sees(plan, d, d->part.rchunks[b]);
    if (any && d->nkeys > 0) ierr = upload_stage(&lm, d->nkeys, d->keys, &g->dmask0);
    if (!ierr) ierr = FMMalloc(d->ch.seqlen_k + 1, &cols);
    for (int s = 0; s < g->nsteps && !ierr; s++) {
      GStep *S = &g->st[s];
      int n = 0;
      any = 0;
      for (int i = 0; i < S->nrecv; i++) {
        int c = S->recv[i].chunk, k0, k1;
        any |= sees(plan, d, c);
        FMDistChunkKeys(&d->ch, c, &k0, &k1);
        for (int j = k0; j < k1; j++) cols[n++] = j;
      }
      if (any && n > 0) ierr = upload_stage(&lm, n, cols, &S->dmask);
    }
    free(cols);
    FMCall(FMDistLocalMaskDestroy(&lm));
    FMCall(ierr);
  }
  return FM_SUCCESS;
}

FMErrorCode FMDistSetUpGPU_Private(FMPlan plan, FMDist *d)
{
  FMDistGPU *g;
  FMErrorCode ierr;
  int direct = 0, all = 0;
  const char *why = "staged";
  FMCall(FMDistDestroyGPU_Private(d));
  FMAgree(plan->hdr.comm, resolve_transport(plan, d));
  FMAgree(plan->hdr.comm, resolve_gpu_aware(plan, d, &direct, &why));
  FMCallMPI(MPI_Allreduce(&direct, &all, 1, MPI_INT, MPI_MIN, plan->hdr.comm));
  if (direct && !all) why = "auto: MPIX_Query_cuda_support() = 0 on some rank";
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
  g->direct = all;
  g->direct_why = why;
  d->gpu = g;
  ierr = setup_gpu_local(plan, d, g);
  ierr = FMAgree_Private(plan->hdr.comm, ierr, __FILE__, __func__, __LINE__);
#if FM_HAVE_NCCL
  if (!ierr && g->transport == FM_DIST_TRANSPORT_NCCL) ierr = nccl_connect(plan, d, g);
#endif
  if (ierr) {
    (void)FMDistDestroyGPU_Private(d);
    return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
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
  FMCall(FMPrintf(plan->hdr.comm, fp, "  GPU: transport %s%s, %d exchange steps; on rank 0: local stage %s, %d arriving stages computed\n",
                  FMDistTransportNames[g->transport], how, g->nsteps, g->dmask0 ? "computed" : "empty", stages));
  return FM_SUCCESS;
}

/* ------------------------------------------------------------------ forward */

/* Device address of batch b of chunk c's K (kv = 0) or V (kv = 1) as held here. */
static const char *held(const FMDist *d, const FMDistGPU *g, const void *k, const void *v, int kv, size_t b, size_t row, int c)
{
  if (g->where[c] == -1) return (const char *)(kv ? v : k) + (b * (size_t)d->nkeys + (size_t)g->woff[c]) * row;
  {
    const GStep *S = &g->st[g->where[c]];
    return (const char *)(kv ? S->vbuf : S->kbuf) + (b * (size_t)S->nk + (size_t)g->woff[c]) * row;
  }
}

static char *recv_addr(const FMDistGPU *g, int s, int kv, size_t b, size_t row, int c)
{
  const GStep *S = &g->st[s];
  return (char *)(kv ? S->vbuf : S->kbuf) + (b * (size_t)S->nk + (size_t)g->woff[c]) * row;
}

#if FM_HAVE_NCCL
/* One step over NCCL: one group with all of the step's sends and receives, on the comm stream.
   k and v may be NULL on a rank that owns no keys (it then only relays). */
static FMErrorCode exchange_nccl(FMPlan plan, FMDist *d, FMDistGPU *g, int s, const void *k, const void *v, int dry)
{
  const GStep *S = &g->st[s]; /* dry (nccl_connect): every send reads g->ping, k and v are unused */
  size_t row = (size_t)plan->heads_kv * plan->head_dim * FMDTypeSize(plan->dtype), B = (size_t)plan->batch;
  ncclComm_t comm = (ncclComm_t)g->nccl;
  ncclResult_t r = ncclSuccess, r2;
  FMCallCUDA(cudaEventRecord(g->ev_c0[s], g->cs));
  if (ncclGroupStart() != ncclSuccess) FMRaise(MPI_COMM_SELF, FM_ERR_NCCL, "ncclGroupStart() failed");
  for (int i = 0; i < S->nsend && r == ncclSuccess; i++) {
    const GXfer *x = &S->send[i];
    size_t len = (size_t)FMDistChunkKeyLen(&d->ch, x->chunk) * row;
    for (size_t b = 0; b < B && r == ncclSuccess; b++)
      for (int kv = 0; kv < 2 && r == ncclSuccess; kv++)
        r = ncclSend(dry ? g->ping : held(d, g, k, v, kv, b, row, x->chunk), len, ncclInt8, x->peer, comm, g->cs);
  }
  for (int i = 0; i < S->nrecv && r == ncclSuccess; i++) {
    const GXfer *x = &S->recv[i];
    size_t len = (size_t)FMDistChunkKeyLen(&d->ch, x->chunk) * row;
    for (size_t b = 0; b < B && r == ncclSuccess; b++)
      for (int kv = 0; kv < 2 && r == ncclSuccess; kv++) r = ncclRecv(recv_addr(g, s, kv, b, row, x->chunk), len, ncclInt8, x->peer, comm, g->cs);
  }
  r2 = ncclGroupEnd();
  FMCheck(r == ncclSuccess && r2 == ncclSuccess, MPI_COMM_SELF, FM_ERR_NCCL, "NCCL send/recv of exchange step %d failed: %s", s,
          ncclGetErrorString(r != ncclSuccess ? r : r2));
  FMCallCUDA(cudaEventRecord(g->ev_c1[s], g->cs));
  return FM_SUCCESS;
}

/*
 * nccl_connect - a dry run of every exchange step (the same operations and sizes; the sends
 * read a scratch buffer, the receives fill the stage buffers). NCCL sets up a pair's
 * point-to-point connections (channels, protocols) at the first operations that need them, and
 * that set-up blocks the host until the peer takes part: a rank whose step failed would then
 * stall its peers on the host before they learn of the failure. After this run, done while
 * every rank is in the same collective call (set-up, or the first forward on new
 * communicators), a lost peer leaves only device-side waits, which the abort ends. Collective.
 */
static FMErrorCode nccl_connect(FMPlan plan, FMDist *d, FMDistGPU *g)
{
  size_t row = (size_t)plan->heads_kv * plan->head_dim * FMDTypeSize(plan->dtype), mx = 1;
  FMErrorCode ierr = FM_SUCCESS;
  for (int s = 0; s < g->nsteps; s++)
    for (int i = 0; i < g->st[s].nsend; i++) {
      size_t len = (size_t)FMDistChunkKeyLen(&d->ch, g->st[s].send[i].chunk) * row;
      mx = len > mx ? len : mx;
    }
  if (cudaMalloc((void **)&g->ping, mx) != cudaSuccess)
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_CUDA, "cudaMalloc of %zu bytes (a send buffer for connecting NCCL) failed", mx);
  /* the receives fill the stage buffers: after the plan's stream is done with them (a forward
     of this plan may still be computing when another plan's abort brings new communicators) */
  if (!ierr && cudaStreamSynchronize((cudaStream_t)plan->stream) != cudaSuccess)
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_CUDA, "Waiting for the plan's stream before connecting NCCL failed");
  FMAgree(plan->hdr.comm, ierr);
  for (int s = 0; s < g->nsteps && !ierr; s++) ierr = exchange_nccl(plan, d, g, s, NULL, NULL, 1);
  if (!ierr && cudaStreamSynchronize(g->cs) != cudaSuccess)
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_CUDA, "The NCCL connection run failed on the device");
  cudaFree(g->ping);
  g->ping = NULL;
  FMAgree(plan->hdr.comm, ierr);
  return FM_SUCCESS;
}
#endif

/*
 * One step over MPI through pinned host memory: copy the outgoing chunks down, exchange every
 * message of the step (tag = chunk), copy the arrivals up. Blocks the host until the step's
 * messages completed; the uploads finish on the comm stream (event ev_c1[s]). A failure does
 * not stop the step: its messages are posted and completed anyway, so the peers never wait,
 * and the first error is returned (the arrivals are then not uploaded). t out: the host times
 * around the exchange (for the trace).
 */
static FMErrorCode exchange_mpi(FMPlan plan, FMDist *d, FMDistGPU *g, int s, const void *k, const void *v, double t[2])
{
  const GStep *S = &g->st[s];
  size_t row = (size_t)plan->heads_kv * plan->head_dim * FMDTypeSize(plan->dtype), B = (size_t)plan->batch, o;
  MPI_Request *rq;
  int nr = S->nsend + S->nrecv, err;
  FMErrorCode ierr = FM_SUCCESS; /* the first failure; the step's messages are posted regardless */
#define XCUDA(expr) do { cudaError_t ce_ = (expr); if (ce_ != cudaSuccess && !ierr) \
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_CUDA, "CUDA error in %s: %s", #expr, cudaGetErrorString(ce_)); } while (0)
#define XMPI(expr) do { int me_ = (expr); if (me_ != MPI_SUCCESS && !ierr) \
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_MPI, "MPI error %d in %s", me_, #expr); } while (0)
  XCUDA(cudaEventRecord(g->ev_c0[s], g->cs));
  t[0] = FMTime();
  o = 0;
  for (int i = 0; i < S->nsend; i++) {
    const GXfer *x = &S->send[i];
    size_t len = (size_t)FMDistChunkKeyLen(&d->ch, x->chunk) * row;
    for (int kv = 0; kv < 2; kv++)
      for (size_t b = 0; b < B; b++, o += len)
        XCUDA(cudaMemcpyAsync(g->hsend + o, held(d, g, k, v, kv, b, row, x->chunk), len, cudaMemcpyDeviceToHost, g->cs));
  }
  XCUDA(cudaStreamSynchronize(g->cs));
  /* the peers wait for these messages: they are posted even after a failure above (the data
     is then not trusted: the error is returned and agreed at the end of the forward) */
  rq = (MPI_Request *)malloc(sizeof(MPI_Request) * (size_t)(nr + 1));
  if (!rq) FMRaise(MPI_COMM_SELF, FM_ERR_MEM, "Out of memory for %d MPI requests (the peers' messages of step %d cannot be matched)", nr, s);
  for (int i = 0; i < nr; i++) rq[i] = MPI_REQUEST_NULL;
  o = 0;
  for (int i = 0; i < S->nrecv; i++) {
    const GXfer *x = &S->recv[i];
    XMPI(FMMPIIrecv_Private(g->hrecv + o, (size_t)d->cbytes[x->chunk], MPI_BYTE, x->peer, x->chunk, plan->hdr.comm, &rq[i]));
    o += (size_t)d->cbytes[x->chunk];
  }
  o = 0;
  for (int i = 0; i < S->nsend; i++) {
    const GXfer *x = &S->send[i];
    XMPI(FMMPIIsend_Private(g->hsend + o, (size_t)d->cbytes[x->chunk], MPI_BYTE, x->peer, x->chunk, plan->hdr.comm, &rq[S->nrecv + i]));
    o += (size_t)d->cbytes[x->chunk];
  }
  err = MPI_Waitall(nr, rq, MPI_STATUSES_IGNORE);
  free(rq);
  XMPI(err);
  t[1] = FMTime();
  o = 0;
  for (int i = 0; i < S->nrecv && !ierr; i++) {
    const GXfer *x = &S->recv[i];
    size_t len = (size_t)FMDistChunkKeyLen(&d->ch, x->chunk) * row;
    for (int kv = 0; kv < 2; kv++)
      for (size_t b = 0; b < B; b++, o += len)
        XCUDA(cudaMemcpyAsync(recv_addr(g, s, kv, b, row, x->chunk), g->hrecv + o, len, cudaMemcpyHostToDevice, g->cs));
  }
  XCUDA(cudaEventRecord(g->ev_c1[s], g->cs));
#undef XCUDA
#undef XMPI
  return ierr;
}

/*
 * One step over CUDA-aware MPI on device buffers: every piece (chunk, K or V, batch) is one
 * message, tag piece_tag(), sent from where the chunk is held and received into the stage
 * buffer; receives are posted first, then sends, in the step's order on both sides. The data
 * sent is ready (the caller waited for ev_in; relayed chunks arrived in an earlier step that
 * the host completed). Blocks the host until the step's messages completed; ev_c1[s] then marks
 * the arrivals on the comm stream. A failure does not stop the step: every message that can be
 * posted is posted (the peers still get theirs) and every posted request is completed before
 * returning, so no message is left writing into a buffer; the first error is returned. t out:
 * the host times around the exchange (for the trace).
 */
static FMErrorCode exchange_mpi_device(FMPlan plan, FMDist *d, FMDistGPU *g, int s, const void *k, const void *v, double t[2])
{
  const GStep *S = &g->st[s];
  size_t row = (size_t)plan->heads_kv * plan->head_dim * FMDTypeSize(plan->dtype), B = (size_t)plan->batch;
  MPI_Comm comm = plan->hdr.comm;
  MPI_Request *rq = g->rq;
  cudaError_t ce;
  int n = 0, err = MPI_SUCCESS, e;
  const char *what = NULL;
  ce = cudaEventRecord(g->ev_c0[s], g->cs);
  t[0] = FMTime();
  for (int i = 0; i < S->nrecv; i++) {
    const GXfer *x = &S->recv[i];
    size_t len = (size_t)FMDistChunkKeyLen(&d->ch, x->chunk) * row;
    for (int kv = 0; kv < 2; kv++)
      for (size_t b = 0; b < B; b++, n++) {
        e = FMMPIIrecv_Private(recv_addr(g, s, kv, b, row, x->chunk), len, MPI_BYTE, x->peer, piece_tag(x->chunk, kv, b, B), comm, &rq[n]);
        if (e) { rq[n] = MPI_REQUEST_NULL; if (!err) { err = e; what = "MPI_Irecv"; } }
      }
  }
  for (int i = 0; i < S->nsend; i++) {
    const GXfer *x = &S->send[i];
    size_t len = (size_t)FMDistChunkKeyLen(&d->ch, x->chunk) * row;
    for (int kv = 0; kv < 2; kv++)
      for (size_t b = 0; b < B; b++, n++) {
        e = FMMPIIsend_Private(held(d, g, k, v, kv, b, row, x->chunk), len, MPI_BYTE, x->peer, piece_tag(x->chunk, kv, b, B), comm, &rq[n]);
        if (e) { rq[n] = MPI_REQUEST_NULL; if (!err) { err = e; what = "MPI_Isend"; } }
      }
  }
  e = MPI_Waitall(n, rq, MPI_STATUSES_IGNORE);
  if (e && !err) { err = e; what = "MPI_Waitall"; }
  t[1] = FMTime();
  if (ce == cudaSuccess) ce = cudaEventRecord(g->ev_c1[s], g->cs);
  if (err) {
    char msg[MPI_MAX_ERROR_STRING];
    int len = 0;
    MPI_Error_string(err, msg, &len);
    FMRaise(MPI_COMM_SELF, FM_ERR_MPI, "MPI error in %s on device buffers (CUDA-aware MPI), exchange step %d: %s; "
            "-fm_gpu_aware_mpi 0 stages through host memory", what, s, msg);
  }
  FMCheck(ce == cudaSuccess, MPI_COMM_SELF, FM_ERR_CUDA, "CUDA error recording the events of exchange step %d: %s", s, cudaGetErrorString(ce));
  return FM_SUCCESS;
}

/* Compute stage s (-1: the local one) on the plan's stream once its data is there. */
static FMErrorCode compute_stage(FMPlan plan, FMDist *d, FMDistGPU *g, int s, const void *q, const void *k, const void *v, int *first,
                                 int *ran)
{
  cudaStream_t us = (cudaStream_t)plan->stream;
  void *dm = s < 0 ? g->dmask0 : g->st[s].dmask;
  FMAttnProblem p;
  if (!dm) return FM_SUCCESS;
  memset(&p, 0, sizeof(p));
  p.batch = plan->batch; p.heads_q = plan->heads_q; p.heads_kv = plan->heads_kv; p.head_dim = plan->head_dim;
  p.dtype = plan->dtype;
  p.scale = (float)plan->scale;
  p.nq = plan->nlocal;
  p.nk = s < 0 ? d->nkeys : g->st[s].nk;
  p.nthreads = plan->ctx->nthreads;
  FMCallCUDA(cudaEventRecord(g->ev_w0[s + 1], us));
  if (s >= 0) FMCallCUDA(cudaStreamWaitEvent(us, g->ev_c1[s], 0));
  FMCallCUDA(cudaEventRecord(g->ev_k0[s + 1], us));
  if (s >= 0) { k = g->st[s].kbuf; v = g->st[s].vbuf; }
  FMCall(FMCudaForwardF32(&p, dm, q, k, v, g->oacc, !*first, g->lacc, us));
  *first = 0;
  FMCallCUDA(cudaEventRecord(g->ev_k1[s + 1], us));
  ran[s + 1] = 1;
  return FM_SUCCESS;
}

/* Seconds from ev_in to ev (both completed). */
static double since(const FMDistGPU *g, cudaEvent_t ev)
{
  float ms = 0;
  if (cudaEventElapsedTime(&ms, g->ev_in, ev) != cudaSuccess) { (void)cudaGetLastError(); ms = 0; }
  return 1e-3 * ms;
}

/* After the run (streams synchronized): the events of this rank into the recorder. */
static FMErrorCode trace_events(FMPlan plan, FMDist *d, FMDistGPU *g, void *tr, double t0, const int *ran, const double (*hostt)[2])
{
  FMTrace T = (FMTrace)tr;
  double fl = 4.0 * plan->batch * plan->heads_q * (double)plan->nlocal * plan->head_dim;
  for (int s = 0; s < g->nsteps; s++) {
    const GStep *S = &g->st[s];
    double a, b;
    if (g->transport == FM_DIST_TRANSPORT_MPI) { a = hostt[s][0]; b = hostt[s][1]; }
    else { a = t0 + since(g, g->ev_c0[s]); b = t0 + since(g, g->ev_c1[s]); }
    if (b < a) b = a;
    for (int i = 0; i < S->nsend; i++)
      FMCall(FMTraceRecord_Private(T, FM_TRACE_SEND, 1, a, b, d->cbytes[S->send[i].chunk], 0, S->send[i].peer, S->send[i].chunk));
    for (int i = 0; i < S->nrecv; i++)
      FMCall(FMTraceRecord_Private(T, FM_TRACE_RECV, 1, a, b, d->cbytes[S->recv[i].chunk], 0, S->recv[i].peer, S->recv[i].chunk));
  }
  for (int s = -1; s < g->nsteps; s++) {
    double w0, k0, k1;
    if (!ran[s + 1]) continue;
    w0 = t0 + since(g, g->ev_w0[s + 1]);
    k0 = t0 + since(g, g->ev_k0[s + 1]);
    k1 = t0 + since(g, g->ev_k1[s + 1]);
    if (k0 - w0 > 2e-6) FMCall(FMTraceRecord_Private(T, FM_TRACE_WAIT, 0, w0, k0, 0, 0, -1, -1));
    FMCall(FMTraceRecord_Private(T, FM_TRACE_COMPUTE, 0, k0, k1 < k0 ? k0 : k1, 0,
                                 fl * (s < 0 ? d->nkeys : g->st[s].nk), -1,
                                 s < 0 ? -1 : (g->st[s].nrecv ? g->st[s].recv[0].chunk : -1)));
  }
  return FM_SUCCESS;
}

FMErrorCode FMDistForwardGPU_Private(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse)
{
  FMDist *d = (FMDist *)plan->data;
  FMDistGPU *g = d ? (FMDistGPU *)d->gpu : NULL;
  cudaStream_t us = (cudaStream_t)plan->stream;
  int me = plan->ctx->rank, first = 1, *ran = NULL;
  double (*hostt)[2] = NULL, t0 = 0;
  void *tr = NULL;
  size_t no = (size_t)plan->batch * plan->nlocal * plan->heads_q * plan->head_dim;
  size_t nl = (size_t)plan->batch * plan->heads_q * plan->nlocal;
  FMErrorCode ierr = FM_SUCCESS;
  FMErrorCode cerr = FM_SUCCESS; /* the first compute error: recorded, and the exchange still runs so that no peer waits */
  FMErrorCode xerr = FM_SUCCESS; /* the first exchange error: recorded; MPI steps still run, NCCL ones stop (xstop) */
  int xstop = 0, nposted = 0;    /* NCCL steps this rank posted, all of them unless one failed */

  FMCheck(g, MPI_COMM_SELF, FM_ERR_ORDER, "The plan has no GPU executor (call FMPlanSetUp on the CUDA backend first)");
  /* local state first, agreed: nothing below returns early on one rank only before the exchange */
  ierr = FMCalloc(g->nsteps + 1, &ran);
  if (!ierr) ierr = FMCalloc(g->nsteps + 1, &hostt);
  ierr = FMAgree_Private(plan->hdr.comm, ierr, __FILE__, __func__, __LINE__);
  if (ierr) { free(ran); free(hostt); return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr); }
  d->stats.sent_bytes[0] = d->stats.sent_bytes[1] = d->stats.recv_bytes = d->stats.relayed_bytes = 0;
#if FM_HAVE_NCCL
  if (g->transport == FM_DIST_TRANSPORT_NCCL) {
    /* the context's communicator, new after an aborted exchange (of any plan): collective, agreed */
    void *w = NULL;
    ierr = FMContextGetNCCL_Private(plan->ctx, &w, NULL, NULL);
    if (!ierr && FMContextNCCLGeneration_Private(plan->ctx) != g->gen) {
      g->nccl = w;
      g->gen = FMContextNCCLGeneration_Private(plan->ctx);
      ierr = nccl_connect(plan, d, g);
    }
    if (ierr) { free(ran); free(hostt); return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr); }
  }
#endif
  ierr = FMDistTraceBegin_Private(plan, d, "forward", &tr);
  if (ierr) goto done;
#define GTRY(expr) do { ierr = (expr); if (ierr) { ierr = FMTraceback_Private(__FILE__, __func__, __LINE__, ierr); goto done; } } while (0)
#define GCUDA(expr) do { cudaError_t ce_ = (expr); if (ce_ != cudaSuccess) { \
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_CUDA, "CUDA error in %s: %s", #expr, cudaGetErrorString(ce_)); goto done; } } while (0)
#define CSTAGE(s) do { if (!cerr) { cerr = compute_stage(plan, d, g, (s), q, k, v, &first, ran); \
    if (cerr) cerr = FMTraceback_Private(__FILE__, __func__, __LINE__, cerr); } } while (0)
  GCUDA(cudaEventRecord(g->ev_in, us));
  GCUDA(cudaStreamWaitEvent(g->cs, g->ev_in, 0));
  if (tr) { GCUDA(cudaEventSynchronize(g->ev_in)); t0 = FMTime(); }
  if (d->overlap) CSTAGE(-1);
  /* CUDA-aware MPI reads the caller's K/V and writes the stage buffers outside any stream:
     wait until the plan's stream reached this call (the local stage, queued after ev_in, runs on) */
  if (g->direct && g->nsteps > 0) {
    cudaError_t ce = cudaEventSynchronize(g->ev_in);
    if (ce != cudaSuccess)
      xerr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_CUDA, "CUDA error waiting for the plan's stream: %s",
                             cudaGetErrorString(ce));
  }
  for (int s = 0; s < g->nsteps; s++) {
    const GStep *S = &g->st[s];
    FMErrorCode xe = FM_SUCCESS;
    int fail = s == 0 && d->debug_fail == me; /* -fm_debug_fail_exchange */
    /* NCCL: a rank whose step failed posts no later step (the pairing would shift); its peers'
       operations then wait on the device until the communicator is aborted below. MPI: every
       step's messages are posted whatever failed, so the host never waits for a lost peer. */
    if (xstop) break;
#if FM_HAVE_NCCL
    if (g->transport == FM_DIST_TRANSPORT_NCCL) {
      xe = fail ? FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_NCCL,
                                  "Exchange step 0 not posted on rank %d (-fm_debug_fail_exchange)", me)
                : exchange_nccl(plan, d, g, s, k, v, 0);
      if (xe) xstop = 1;
      else nposted++;
    } else
#endif
    {
      xe = g->direct ? exchange_mpi_device(plan, d, g, s, k, v, hostt[s]) : exchange_mpi(plan, d, g, s, k, v, hostt[s]);
      if (fail && !xe)
        xe = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_MPI,
                             "Exchange step 0 marked failed on rank %d after its messages moved (-fm_debug_fail_exchange)", me);
      nposted++;
    }
    DBG("step %d of %d %s\n", s, g->nsteps, xe ? "failed" : "posted");
    if (xe && !xerr) xerr = FMTraceback_Private(__FILE__, __func__, __LINE__, xe);
    for (int i = 0; i < S->nsend; i++) {
      d->stats.sent_bytes[S->send[i].level] += d->cbytes[S->send[i].chunk];
      if (d->part.owner[S->send[i].chunk] != me) d->stats.relayed_bytes += d->cbytes[S->send[i].chunk];
    }
    for (int i = 0; i < S->nrecv; i++) d->stats.recv_bytes += d->cbytes[S->recv[i].chunk];
    if (d->overlap) CSTAGE(s);
  }
  if (!d->overlap) {
    /* the unoverlapped baseline: nothing computes before the whole exchange is over */
    if (g->nsteps > 0) GCUDA(cudaStreamWaitEvent(us, g->ev_c1[g->nsteps - 1], 0));
    CSTAGE(-1);
    for (int s = 0; s < g->nsteps; s++) CSTAGE(s);
  }
  if (xerr && !cerr) cerr = xerr; /* what arrived cannot be trusted: no output, no trace */
  if (plan->nlocal > 0 && !cerr) {
    if (first) { /* no local row sees any key */
      GTRY(FMCudaFillFloat(g->oacc, no, 0.f, us));
      GTRY(FMCudaFillFloat(g->lacc, nl, -INFINITY, us));
    }
    GTRY(FMCudaConvertOut(g->oacc, o, plan->dtype, no, us));
    if (lse) GCUDA(cudaMemcpyAsync(lse, g->lacc, nl * sizeof(float), cudaMemcpyDeviceToDevice, us));
  }
  /* the caller's K/V and our buffers are free again only after the last send left */
  GCUDA(cudaEventRecord(g->ev_done, g->cs));
  GCUDA(cudaStreamWaitEvent(us, g->ev_done, 0));
  if (tr && !cerr) {
    GCUDA(cudaStreamSynchronize(us));
    GTRY(trace_events(plan, d, g, tr, t0, ran, (const double(*)[2])hostt));
  }
done:
  free(ran);
  free(hostt);
  if (!ierr) ierr = cerr;
  if (g->transport == FM_DIST_TRANSPORT_NCCL) {
    /* a rank that did not post every step leaves its peers' NCCL operations waiting on the
       device for good: every rank then aborts the context's communicators (which ends them),
       and the next forward bootstraps new ones */
    int mine = nposted < g->nsteps, any = 0;
    DBG("posted %d of %d steps; agreeing\n", nposted, g->nsteps);
    if (MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, plan->hdr.comm) != MPI_SUCCESS) any = 1;
    if (any) {
      FMErrorCode ae;
      DBG("aborting the NCCL communicators\n");
      ae = FMContextAbortNCCL_Private(plan->ctx);
      g->nccl = NULL;
      g->gen = 0;
      DBG("aborted; waiting for the streams\n");
      (void)cudaStreamSynchronize(g->cs);
      (void)cudaStreamSynchronize(us);
      DBG("streams done\n");
      if (!ierr) ierr = ae ? ae : FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_NCCL,
                                                 "The K/V exchange failed on another rank; the NCCL communicators were aborted (a new one is made on the next call)");
    }
  }
  /* the trace is saved collectively; an error on one rank must not leave the others waiting */
  ierr = FMAgree_Private(plan->hdr.comm, ierr, __FILE__, __func__, __LINE__);
  if (!ierr) ierr = FMDistTraceEnd_Private(plan, d, "forward", &tr);
  else if (tr) { FMTrace T = (FMTrace)tr; (void)FMTraceDestroy_Private(&T); }
  if (ierr) return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
  return FM_SUCCESS;
#undef CSTAGE
#undef GTRY
#undef GCUDA
}
