/*
 * exec.c - the "cp" plan type (context parallel) and its CPU executor over MPI: set-up
 * (partition, consistency check, needed set, route), the overlapped pruned forward with exact
 * LSE merging, the backward with dK/dV reduced to the owners over the reverse route, the ring
 * schedule baseline (-fm_plan_schedule ring), and the type's layout queries. Runs on any
 * number of ranks, one included.
 */
#include "distimpl.h"
#include <flashmask/private/fmtrace.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/*
 * FM_DIST_TRACE: -fm_trace support through the event recorder of src/sys/trace.c (1), or
 * none (0: -fm_trace is FM_ERR_SUP), for builds that do not compile the recorder.
 */
#ifndef FM_DIST_TRACE
#define FM_DIST_TRACE 1
#endif


const char *const FMDistTransportNames[] = {"auto", "nccl", "mpi", NULL};
const char *const FMDistGPUAwareNames[] = {"0", "1", "auto", NULL};

/* ---------------- helpers ---------------- */
/* The plan's scalars, cp settings and mask bounds: every rank must set up the same plan. */
static FMErrorCode plan_hash(FMPlan plan, const FMMaskDesc *m, const FMDist *d, uint64_t *hash)
{
  uint64_t h = FM_HASH_INIT;
  int v[21];
  double sc = plan->scale;
  v[0] = m->seqlen_q; v[1] = m->seqlen_k; v[2] = m->mask_heads; v[3] = m->causal; v[4] = m->present; v[5] = m->block;
  v[6] = plan->batch; v[7] = plan->heads_q; v[8] = plan->heads_kv; v[9] = plan->head_dim; v[10] = (int)plan->dtype;
  v[11] = d->part_type; v[12] = d->route_type; v[13] = d->prune * 2 + d->overlap; v[14] = d->chunk_opt; v[15] = d->vnodes;
  v[16] = d->trace_on; v[17] = d->schedule; v[18] = d->transport; v[19] = d->step_chunks;
  v[20] = d->gpu_aware;
  h = FMHash_Private(h, v, sizeof(v));
  h = FMHash_Private(h, &sc, sizeof(sc));
  h = FMHash_Private(h, &d->partial_cost, sizeof(d->partial_cost));
  h = FMHash_Private(h, &d->row_cost, sizeof(d->row_cost));
  /* TODO(merge): use mask->hash */
  for (int b = 0; b < 4; b++) h = FMHash_Private(h, m->bnd[b], sizeof(int32_t) * (size_t)m->mask_heads * m->seqlen_k);
  *hash = h;
  return FM_SUCCESS;
}

/* Free the set-up state of d (not d itself) and zero it. */
static FMErrorCode dist_reset(FMDist *d)
{
  if (!d) return FM_SUCCESS;
  FMCall(FMDistPartitionDestroy(&d->part));
  FMCall(FMDistTopoDestroy(&d->topo));
  FMCall(FMDistRouteDestroy(&d->route));
  free(d->w); free(d->needed); free(d->cbytes); free(d->keys); free(d->kofs); free(d->in); free(d->out); free(d->parent);
  free(d->rbytes); free(d->boff);
#if FM_HAVE_CUDA
  FMCall(FMDistDestroyGPU_Private(d));
#endif
  memset(d, 0, sizeof(*d));
  return FM_SUCCESS;
}

static size_t elsize(FMPlan plan) { return FMDTypeSize(plan->dtype); }

/* The planning steps that are purely local; the result is identical on every rank. */
static FMErrorCode setup_local(FMPlan plan, FMDist *d, const FMMaskDesc *m, unsigned char *myneed)
{
  int P = plan->ctx->size, me = plan->ctx->rank;
  FMDistLocalMask lm;
  FMErrorCode ierr;
  FMCall(FMDistChunksInit(m->seqlen_q, m->seqlen_k, d->chunk_opt, P, m->block, &d->ch));
  FMCheck(2L * d->ch.nchunks + 2 <= (long)d->tag_ub, MPI_COMM_SELF, FM_ERR_SUP,
          "%d chunks need MPI tags up to %d but MPI_TAG_UB is %d; use a larger -fm_plan_chunk", d->ch.nchunks, 2 * d->ch.nchunks + 1,
          d->tag_ub);
  FMCall(FMMalloc(d->ch.nchunks, &d->w));
  FMCall(FMDistChunkWeights(m, &d->ch, d->partial_cost, d->row_cost, d->w));
  FMCall(FMDistPartitionCreate((FMDistPartType)d->part_type, d->ch.nchunks, P, d->w, &d->part, &d->binfo));
  FMFree(plan->rows);
  plan->nlocal = 0;
  FMCall(FMDistRankRows(&d->ch, &d->part, me, &plan->nlocal, &plan->rows));
  FMCall(FMDistRankKeys(&d->ch, &d->part, me, &d->nkeys, &d->keys));
  FMCall(FMMalloc(d->ch.nchunks, &d->kofs));
  for (int c = 0, o = 0; c < d->ch.nchunks; c++) {
    int k0, k1;
    FMDistChunkKeys(&d->ch, c, &k0, &k1);
    d->kofs[c] = d->part.owner[c] == me ? o : -1;
    if (d->part.owner[c] == me) o += k1 - k0;
  }
  FMCall(FMMalloc(d->ch.nchunks, &d->cbytes));
  for (int c = 0; c < d->ch.nchunks; c++)
    d->cbytes[c] = FMDistChunkBytes(&d->ch, c, plan->batch, plan->heads_kv, plan->head_dim, elsize(plan));
  /* this rank's needed chunks, from its localized bounds */
  FMCall(FMDistLocalize(m, &d->ch, d->part.rstart[me + 1] - d->part.rstart[me], d->part.rchunks + d->part.rstart[me], &lm));
  ierr = FMDistNeeded(&lm, &d->ch, d->prune, myneed);
  FMCall(FMDistLocalMaskDestroy(&lm));
  FMCall(ierr);
  /* topology: the context's nodes, or -fm_plan_nodes virtual nodes of consecutive ranks */
  if (d->vnodes > 0) {
    FMCheck(d->vnodes <= P, MPI_COMM_SELF, FM_ERR_OPT, "-fm_plan_nodes is %d; expected 0 (real topology) or 1..%d", d->vnodes, P);
    FMCall(FMDistTopoVirtual(P, d->vnodes, &d->topo));
  } else {
    int *node, *local;
    FMCall(FMMalloc(P, &node));
    FMCall(FMMalloc(P, &local));
    for (int r = 0; r < P; r++) { node[r] = plan->ctx->all ? plan->ctx->all[r].node : 0; local[r] = plan->ctx->all ? plan->ctx->all[r].node_rank : r; }
    ierr = FMDistTopoCreate(P, node, local, &d->topo);
    free(node); free(local);
    if (ierr) { /* a topology we cannot read: treat every rank as its own node */
      int *n2, *l2;
      FMCall(FMMalloc(P, &n2)); FMCall(FMMalloc(P, &l2));
      for (int r = 0; r < P; r++) { n2[r] = r; l2[r] = 0; }
      ierr = FMDistTopoCreate(P, n2, l2, &d->topo);
      free(n2); free(l2);
      FMCall(ierr);
    }
  }
  return FM_SUCCESS;
}

static FMErrorCode setup_route(FMPlan plan, FMDist *d)
{
  int me = plan->ctx->rank, C = d->ch.nchunks;
  FMCall(FMDistRouteBuild((FMDistRouteType)d->route_type, &d->topo, &d->part, d->needed, d->cbytes, &d->route));
  d->nin = d->nout = 0;
  for (int k = 0; k < d->route.n; k++) {
    d->nin += d->route.x[k].dst == me;
    d->nout += d->route.x[k].src == me;
  }
  FMCall(FMMalloc(d->nin > 0 ? d->nin : 1, &d->in));
  FMCall(FMMalloc(d->nout > 0 ? d->nout : 1, &d->out));
  FMCall(FMMalloc(C, &d->parent));
  for (int c = 0; c < C; c++) d->parent[c] = -1;
  d->nin = d->nout = 0;
  memset(&d->stats, 0, sizeof(d->stats));
  for (int k = 0; k < d->route.n; k++) {
    const FMDistXfer *x = &d->route.x[k];
    if (x->dst == me) { d->in[d->nin++] = *x; d->parent[x->chunk] = x->src; d->stats.predicted_recv += d->cbytes[x->chunk]; }
    if (x->src == me) { d->out[d->nout++] = *x; d->stats.predicted_sent += d->cbytes[x->chunk]; }
  }
  d->stats.nchunks = C;
  /* the ring's blocks: each rank's owned chunks back to back, in ascending chunk order */
  FMCall(FMMalloc(plan->ctx->size, &d->rbytes));
  FMCall(FMMalloc(C, &d->boff));
  FMDistRankBytes(&d->part, d->cbytes, d->rbytes);
  for (int r = 0; r < plan->ctx->size; r++) {
    double o = 0;
    for (int b = d->part.rstart[r]; b < d->part.rstart[r + 1]; b++) { d->boff[d->part.rchunks[b]] = o; o += d->cbytes[d->part.rchunks[b]]; }
  }
  if (d->schedule == FM_DIST_SCHED_RING && plan->ctx->size > 1) {
    /* P-1 steps: everything but our own block arrives; we forward all but the block of me+1 */
    int P = plan->ctx->size;
    double total = 0;
    for (int r = 0; r < P; r++) total += d->rbytes[r];
    d->stats.predicted_recv = total - d->rbytes[me];
    d->stats.predicted_sent = total - d->rbytes[(me + 1) % P];
  }
  for (int c = 0; c < C; c++) {
    if (d->needed[(size_t)me * C + c]) d->stats.nneeded++;
    if (d->part.owner[c] != me && d->cbytes[c] > 0) {
      d->stats.allgather_bytes += d->cbytes[c];
      if (d->needed[(size_t)me * C + c]) { d->stats.needed_bytes += d->cbytes[c]; d->stats.nremote++; }
    }
  }
  return FM_SUCCESS;
}

static FMErrorCode read_options(FMDist *d)
{
  FMBool prune = FM_TRUE, overlap = FM_TRUE;
  FMCall(FMOptionsGetEnum_Private("-fm_plan_partition", "query-chunk partition over ranks", FMDistPartNames, &d->part_type, NULL));
  FMCall(FMOptionsGetInt("-fm_plan_chunk", "query rows per chunk, 0 = about seqlen/(4P) rounded to the block", &d->chunk_opt, NULL));
  d->partial_cost = 1.0;
  FMCall(FMOptionsGetReal("-fm_plan_partial_cost", "balancer: cost of a partially masked tile, in full tiles", &d->partial_cost, NULL));
  d->row_cost = 0.0;
  FMCall(FMOptionsGetReal("-fm_plan_row_cost", "balancer: fixed cost of each query tile (load, epilogue), in full tiles", &d->row_cost, NULL));
  FMCall(FMOptionsGetEnum_Private("-fm_plan_route", "K/V gather route", FMDistRouteNames, &d->route_type, NULL));
  FMCall(FMOptionsGetBool("-fm_plan_prune", "never transfer K/V chunks no local query can see", &prune, NULL));
  FMCall(FMOptionsGetBool("-fm_plan_overlap", "compute on arrived chunks while others are in flight", &overlap, NULL));
  FMCall(FMOptionsGetEnum_Private("-fm_plan_schedule", "K/V schedule: the pruned gather, or a ring baseline (every block visits every rank)",
                                   FMDistSchedNames, &d->schedule, NULL));
  FMCall(FMOptionsGetEnum_Private("-fm_plan_transport",
                                   "device K/V transport on the CUDA backend: nccl (a GPU per rank), mpi (through host memory, or device buffers: -fm_gpu_aware_mpi), "
                                   "auto = nccl when built with NCCL and no two ranks share a GPU",
                                   FMDistTransportNames, &d->transport, NULL));
  FMCall(FMOptionsGetInt("-fm_plan_step_chunks",
                         "CUDA backend: at most this many K/V chunks per peer in one exchange step (0 = all: one step per peer and hop)",
                         &d->step_chunks, NULL));
  FMCall(FMOptionsGetEnum_Private("-fm_gpu_aware_mpi",
                                   "CUDA backend, -fm_plan_transport mpi: pass device buffers to MPI instead of staging them through "
                                   "pinned host memory; 1 = the MPI is CUDA-aware, auto = when MPIX_Query_cuda_support() says so on every rank",
                                   FMDistGPUAwareNames, &d->gpu_aware, NULL));
  FMCall(FMOptionsGetInt("-fm_debug_fail_exchange",
                         "testing: the CUDA executor's exchange fails on this rank at its first step (-1: never), to check that "
                         "every rank returns the error and none waits",
                         &d->debug_fail, NULL));
  FMCall(FMOptionsGetInt("-fm_plan_nodes", "route over this many virtual nodes of consecutive ranks (0 = real topology)", &d->vnodes, NULL));
  {
    FMBool set = FM_FALSE, view = FM_FALSE;
    FMCall(FMOptionsGetString("-fm_trace", "write every rank's events of each distributed forward/backward to this HDF5 file",
                              d->trace_path, sizeof(d->trace_path), &set));
    FMCall(FMOptionsGetBool("-fm_trace_view", "print the trace summary (overlap efficiency, exposed communication, bytes)", &view, NULL));
    d->trace_on = set && d->trace_path[0];
    d->trace_view = view == FM_TRUE;
#if !FM_DIST_TRACE
    FMCheck(!d->trace_on, MPI_COMM_SELF, FM_ERR_SUP, "-fm_trace %s: this build has no trace recorder", d->trace_path);
#endif
  }
  FMCheck(d->chunk_opt >= 0, MPI_COMM_SELF, FM_ERR_OPT, "-fm_plan_chunk is %d; expected >= 0 (0 = default)", d->chunk_opt);
  FMCheck(d->partial_cost > 0 && d->partial_cost <= 64, MPI_COMM_SELF, FM_ERR_OPT,
          "-fm_plan_partial_cost is %g; expected a cost in (0, 64] full tiles", d->partial_cost);
  FMCheck(d->row_cost >= 0 && d->row_cost <= 1e6, MPI_COMM_SELF, FM_ERR_OPT, "-fm_plan_row_cost is %g; expected a cost in [0, 1e6] full tiles",
          d->row_cost);
  FMCheck(d->vnodes >= 0, MPI_COMM_SELF, FM_ERR_OPT, "-fm_plan_nodes is %d; expected >= 0", d->vnodes);
  FMCheck(d->step_chunks >= 0, MPI_COMM_SELF, FM_ERR_OPT, "-fm_plan_step_chunks is %d; expected >= 0 (0 = all)", d->step_chunks);
  d->prune = prune == FM_TRUE; d->overlap = overlap == FM_TRUE;
  return FM_SUCCESS;
}

/* The cp type's supported plans: the same refusals on one rank and on several (agreed by the caller). */
static FMErrorCode check_supported(FMPlan plan)
{
  FMCall(FMPlanCheckCUDADType_Private(plan));
#if !FM_HAVE_CUDA
  FMCheck(plan->backend != FM_BACKEND_CUDA, MPI_COMM_SELF, FM_ERR_SUP, "This build has no CUDA support");
#endif
  return FM_SUCCESS;
}

FMErrorCode FMPlanSetUp_CP(FMPlan plan)
{
  MPI_Comm comm = plan->hdr.comm;
  int P = plan->ctx->size, me = plan->ctx->rank, flag = 0, *tagub = NULL;
  FMMaskDesc m;
  FMDist *d = (FMDist *)plan->data;
  uint64_t hash, *all;
  unsigned char *myneed = NULL;
  FMErrorCode ierr;

  FMAgree(comm, check_supported(plan));
  FMCall(dist_reset(d));
  d->part_type = FM_DIST_BALANCED;
  d->route_type = FM_DIST_ROUTE_HIER;
  d->schedule = FM_DIST_SCHED_GATHER;
  d->gpu_aware = FM_DIST_GPU_AWARE_AUTO;
  d->debug_fail = -1;
  FMAgree(comm, read_options(d));
  FMCallMPI(MPI_Comm_get_attr(comm, MPI_TAG_UB, &tagub, &flag));
  d->tag_ub = flag && tagub ? *tagub : 32767;
  FMCall(FMMaskGetDesc_Private(plan->mask, &m));

  /* consistency: mask, shape and options must be the same everywhere (hash, gathered) */
  FMCall(plan_hash(plan, &m, d, &hash));
  FMAgree(comm, FMMalloc(P, &all)); /* on failure all is NULL here: nothing to free */
  ierr = (FMErrorCode)MPI_Allgather(&hash, 1, MPI_UINT64_T, all, 1, MPI_UINT64_T, comm);
  if (ierr) { free(all); FMCallMPI((int)ierr); }
  for (int r = 1; r < P; r++)
    if (all[r] != all[0]) {
      unsigned long long hr = (unsigned long long)all[r], h0 = (unsigned long long)all[0];
      free(all);
      FMRaise(MPI_COMM_SELF, FM_ERR_MISMATCH,
              "Rank %d's plan (mask bounds, sizes, shape, scale or -fm_plan_* options) differs from rank 0's (hash %016llx vs %016llx); "
              "every rank must set up the same mask and plan",
              r, hr, h0);
    }
  free(all);

  {
    FMErrorCode loc = FMDistChunksInit(m.seqlen_q, m.seqlen_k, d->chunk_opt, P, m.block, &d->ch);
    if (!loc) loc = FMMalloc(d->ch.nchunks, &myneed);
    if (!loc) loc = setup_local(plan, d, &m, myneed);
    if (!loc) loc = FMMalloc((size_t)P * d->ch.nchunks, &d->needed);
    loc = FMAgree_Private(comm, loc, __FILE__, __func__, __LINE__);
    if (loc) { free(myneed); return FMTraceback_Private(__FILE__, __func__, __LINE__, loc); }
  }
  ierr = (FMErrorCode)MPI_Allgather(myneed, d->ch.nchunks, MPI_UNSIGNED_CHAR, d->needed, d->ch.nchunks, MPI_UNSIGNED_CHAR, comm);
  free(myneed);
  FMCallMPI((int)ierr);
  FMAgree(comm, setup_route(plan, d));
#if FM_HAVE_CUDA
  if (plan->backend == FM_BACKEND_CUDA) FMCall(FMDistSetUpGPU_Private(plan, d)); /* collective; agrees internally */
#endif
  (void)me;
  return FM_SUCCESS;
}

FMErrorCode FMDistGetStats(FMPlan plan, FMDistStats *stats)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(stats, 2);
  FMCheck(plan->ops && plan->hdr.type_name && !strcmp(plan->hdr.type_name, FMPLANCP), MPI_COMM_SELF, FM_ERR_ARG_WRONG,
          "Argument 1 (plan) is of type %s; FMDistGetStats needs a \"%s\" plan (FMPlanSetType)",
          plan->hdr.type_name ? plan->hdr.type_name : "(none)", FMPLANCP);
  FMCheckSetUp(plan, "FMPlan");
  *stats = ((FMDist *)plan->data)->stats;
  return FM_SUCCESS;
}

FMErrorCode FMPlanDestroy_CP(FMPlan plan)
{
  FMCall(dist_reset((FMDist *)plan->data));
  FMFree(plan->data);
  return FM_SUCCESS;
}

/* ---------------- execution ---------------- */
typedef struct {
  FMPlan plan;
  FMDist *d;
  FMAttnProblem p;
  size_t es, row_kv;    /* element size; bytes of one key position (heads_kv * head_dim * es) */
  char **buf;           /* [C] K then V of each held chunk: [B][len][Hkv][D] twice */
  MPI_Request *rreq, *sreq;
  const void *qptr;
  void *tr;             /* FMTrace or NULL */
  double *rpost, *spost; /* post times of receives / sends (for the trace) */
} Exec;

/* ---------------- tracing (no-ops unless -fm_trace) ---------------- */
static void tr_rec(Exec *e, int kind, double t0, double t1, double bytes, double flops, int peer, int chunk)
{
#if FM_DIST_TRACE
  if (e->tr) (void)FMTraceRecord_Private((FMTrace)e->tr, kind, 0, t0, t1 < t0 ? t0 : t1, bytes, flops, peer, chunk);
#else
  (void)e; (void)kind; (void)t0; (void)t1; (void)bytes; (void)flops; (void)peer; (void)chunk;
#endif
}

/* Collective: start a recorder for this call when -fm_trace was given (see distimpl.h). */
FMErrorCode FMDistTraceBegin_Private(FMPlan plan, FMDist *d, const char *run, void **tr)
{
  *tr = NULL;
#if FM_DIST_TRACE
  if (d->trace_on) {
    FMTrace t = NULL;
    FMCall(FMTraceCreate_Private(plan->hdr.comm, run, &plan->ctx->self, &t));
    *tr = t;
  }
#else
  (void)plan; (void)d; (void)run;
#endif
  return FM_SUCCESS;
}

/* Collective: save the trace (replacing the run's group) and print the summary if asked. */
FMErrorCode FMDistTraceEnd_Private(FMPlan plan, FMDist *d, const char *run, void **trp)
{
#if FM_DIST_TRACE
  FMTrace tr = (FMTrace)*trp;
  if (!d->trace_on || !tr) return FM_SUCCESS;
  FMCall(FMTraceSetBytes_Private(tr, d->stats.needed_bytes, d->stats.allgather_bytes));
  FMCall(FMTraceSave_Private(tr, d->trace_path));
  {
    FMTraceStats st;
    FMCall(FMTraceSummary_Private(tr, &st));
    d->stats.traced = 1;
    d->stats.overlap_efficiency = st.overlap_efficiency;
    d->stats.exposed_max = st.exposed_max;
    d->stats.exposed_mean = st.exposed_mean;
    d->stats.imbalance = st.imbalance;
    if (d->trace_view)
      FMCall(FMPrintf(plan->hdr.comm, stdout,
                    "FMPlan %s trace (%s): %d ranks, overlap efficiency %.3f, exposed communication max %.3g s mean %.3g s, "
                    "compute imbalance %.4f; bytes moved %.0f, needed %.0f, unpruned all-gather %.0f\n",
                    run, d->trace_path, st.nranks, st.overlap_efficiency, st.exposed_max, st.exposed_mean, st.imbalance,
                    st.bytes_moved, st.bytes_needed, st.bytes_allgather));
  }
  FMCall(FMTraceDestroy_Private(&tr));
  *trp = NULL;
#else
  (void)plan; (void)d; (void)run; (void)trp;
#endif
  return FM_SUCCESS;
}

static FMErrorCode tr_begin(Exec *e, const char *run) { return FMDistTraceBegin_Private(e->plan, e->d, run, &e->tr); }
static FMErrorCode tr_end(Exec *e, const char *run) { return FMDistTraceEnd_Private(e->plan, e->d, run, &e->tr); }

/* Record the sends that completed since the last poll. */
static FMErrorCode poll_sends(Exec *e)
{
  int n = 0, *idx;
  double t;
  if (!e->tr || e->d->nout == 0 || e->d->schedule == FM_DIST_SCHED_RING) return FM_SUCCESS;
  FMCall(FMMalloc(e->d->nout, &idx));
  FMCallMPI(MPI_Testsome(e->d->nout, e->sreq, &n, idx, MPI_STATUSES_IGNORE));
  t = FMTime();
  for (int i = 0; n != MPI_UNDEFINED && i < n; i++) {
    const FMDistXfer *x = &e->d->out[idx[i]];
    tr_rec(e, FM_TRACE_SEND, e->spost[idx[i]], t, e->d->cbytes[x->chunk], 0, x->dst, x->chunk);
  }
  free(idx);
  return FM_SUCCESS;
}

/* Wait for every send (a WAIT event) and record the ones not seen complete before. */
static FMErrorCode finish_sends(Exec *e)
{
  double t0 = FMTime(), t1;
  int *open = NULL;
  if (e->d->schedule == FM_DIST_SCHED_RING) return FM_SUCCESS; /* the ring completes its sends step by step */
  if (e->tr) {
    FMCall(FMMalloc(e->d->nout + 1, &open));
    for (int i = 0; i < e->d->nout; i++) open[i] = e->sreq[i] != MPI_REQUEST_NULL;
  }
  FMCallMPI(MPI_Waitall(e->d->nout, e->sreq, MPI_STATUSES_IGNORE));
  t1 = FMTime();
  if (e->tr) {
    tr_rec(e, FM_TRACE_WAIT, t0, t1, 0, 0, -1, -1);
    for (int i = 0; i < e->d->nout; i++)
      if (open[i]) tr_rec(e, FM_TRACE_SEND, e->spost[i], t1, e->d->cbytes[e->d->out[i].chunk], 0, e->d->out[i].dst, e->d->out[i].chunk);
    free(open);
  }
  return FM_SUCCESS;
}

static size_t chunk_len(const FMDist *d, int c) { return (size_t)FMDistChunkKeyLen(&d->ch, c); }

static FMErrorCode exec_init(FMPlan plan, Exec *e)
{
  memset(e, 0, sizeof(*e));
  e->plan = plan;
  e->d = (FMDist *)plan->data;
  /* host tensors only: FMPlanBackward_CP stages device tensors of the CUDA backend through the host */
  e->p.batch = plan->batch; e->p.heads_q = plan->heads_q; e->p.heads_kv = plan->heads_kv; e->p.head_dim = plan->head_dim;
  e->p.dtype = plan->dtype;
  e->p.scale = (float)plan->scale;
  FMCall(FMMaskGetDesc_Private(plan->mask, &e->p.mask));
  e->p.nq = plan->nlocal; e->p.qrows = plan->rows;
  e->p.nthreads = plan->ctx->nthreads;
  e->es = elsize(plan);
  e->row_kv = (size_t)plan->heads_kv * plan->head_dim * e->es;
  FMCall(FMCalloc(e->d->ch.nchunks, &e->buf));
  FMCall(FMMalloc(e->d->nin + 1, &e->rreq));
  FMCall(FMMalloc(e->d->nout + 1, &e->sreq));
  for (int i = 0; i <= e->d->nin; i++) e->rreq[i] = MPI_REQUEST_NULL;
  for (int i = 0; i <= e->d->nout; i++) e->sreq[i] = MPI_REQUEST_NULL;
  FMCall(FMCalloc(e->d->nin + 1, &e->rpost));
  FMCall(FMCalloc(e->d->nout + 1, &e->spost));
  return FM_SUCCESS;
}

static void exec_free(Exec *e)
{
  if (e->buf)
    for (int c = 0; c < e->d->ch.nchunks; c++) free(e->buf[c]);
  free(e->buf); free(e->rreq); free(e->sreq); free(e->rpost); free(e->spost);
#if FM_DIST_TRACE
  if (e->tr) { FMTrace tr = (FMTrace)e->tr; (void)FMTraceDestroy_Private(&tr); e->tr = NULL; }
#endif
}

/* Pack an owned chunk out of the local k, v ([B][nkeys][Hkv][D]) into buf[c]. */
static FMErrorCode pack_own(Exec *e, int c, const void *k, const void *v)
{
  size_t len = chunk_len(e->d, c), B = (size_t)e->plan->batch, nk = (size_t)e->d->nkeys, sz = len * e->row_kv;
  char *b;
  FMCall(FMMalloc(2 * B * sz + 1, &e->buf[c]));
  b = e->buf[c];
  for (size_t bb = 0; bb < B; bb++) {
    memcpy(b + bb * sz, (const char *)k + (bb * nk + (size_t)e->d->kofs[c]) * e->row_kv, sz);
    memcpy(b + (B + bb) * sz, (const char *)v + (bb * nk + (size_t)e->d->kofs[c]) * e->row_kv, sz);
  }
  return FM_SUCCESS;
}

/*
 * TRY(expr): on error add a traceback line and jump to the function's cleanup label (which
 * frees everything and returns ierr). Used where an early return would leak.
 */
#define TRY(expr)                                                                    \
  do {                                                                               \
    ierr = (expr);                                                                   \
    if (ierr != FM_SUCCESS) { ierr = FMTraceback_Private(__FILE__, __func__, __LINE__, ierr); goto cleanup; } \
  } while (0)
#define TRY_MPI(expr)                                                                \
  do {                                                                               \
    int fm_mpierr_ = (expr);                                                         \
    if (fm_mpierr_ != MPI_SUCCESS) {                                                 \
      char fm_mpimsg_[MPI_MAX_ERROR_STRING]; int fm_mpilen_ = 0;                     \
      MPI_Error_string(fm_mpierr_, fm_mpimsg_, &fm_mpilen_);                         \
      ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_MPI, "MPI error in %s: %s", #expr, fm_mpimsg_); \
      goto cleanup;                                                                  \
    }                                                                                \
  } while (0)

/* The K/V gather's local part: pack the owned chunks, allocate every incoming one. Not collective. */
static FMErrorCode gather_alloc(Exec *e, const void *k, const void *v)
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
 * of owned chunks (any length: FMMPIIsend_Private).
 */
static FMErrorCode gather_post(Exec *e)
{
  FMDist *d = e->d;
  MPI_Comm comm = e->plan->hdr.comm;
  for (int i = 0; i < d->nin; i++) {
    int c = d->in[i].chunk;
    FMCallMPI(FMMPIIrecv_Private(e->buf[c], (size_t)d->cbytes[c], MPI_BYTE, d->in[i].src, c, comm, &e->rreq[i]));
    e->rpost[i] = FMTime();
  }
  for (int i = 0; i < d->nout; i++)
    if (d->out[i].stage == 0) {
      int c = d->out[i].chunk;
      FMCallMPI(FMMPIIsend_Private(e->buf[c], (size_t)d->cbytes[c], MPI_BYTE, d->out[i].dst, c, comm, &e->sreq[i]));
      e->spost[i] = FMTime();
      d->stats.sent_bytes[d->out[i].level] += d->cbytes[c];
    }
  return FM_SUCCESS;
}

/* After chunk c arrived here: forward it to the ranks this rank relays it to. */
static FMErrorCode relay(Exec *e, int c)
{
  FMDist *d = e->d;
  for (int i = 0; i < d->nout; i++)
    if (d->out[i].stage == 1 && d->out[i].chunk == c) {
      FMCallMPI(FMMPIIsend_Private(e->buf[c], (size_t)d->cbytes[c], MPI_BYTE, d->out[i].dst, c, e->plan->hdr.comm, &e->sreq[i]));
      e->spost[i] = FMTime();
      d->stats.sent_bytes[d->out[i].level] += d->cbytes[c];
      d->stats.relayed_bytes += d->cbytes[c];
    }
  return FM_SUCCESS;
}

/* Wait for the next arrived chunk (relaying it); *c = -1 when all arrived. */
static FMErrorCode gather_next(Exec *e, int *c)
{
  int idx;
  MPI_Status st;
  double t0, t1;
  *c = -1;
  if (e->d->nin == 0) return FM_SUCCESS;
  t0 = FMTime();
  FMCallMPI(MPI_Waitany(e->d->nin, e->rreq, &idx, &st));
  t1 = FMTime();
  if (idx == MPI_UNDEFINED) return FM_SUCCESS;
  tr_rec(e, FM_TRACE_WAIT, t0, t1, 0, 0, -1, -1);
  {
    double cnt = FMMPIStatusBytes_Private(&st, MPI_BYTE);
    e->d->stats.recv_bytes += cnt;
    tr_rec(e, FM_TRACE_RECV, e->rpost[idx], t1, cnt, 0, e->d->in[idx].src, e->d->in[idx].chunk);
  }
  *c = e->d->in[idx].chunk;
  FMCall(relay(e, *c));
  return FM_SUCCESS;
}

static int needs(const Exec *e, int c)
{
  return e->d->needed[(size_t)e->plan->ctx->rank * e->d->ch.nchunks + c] && chunk_len(e->d, c) > 0 && e->plan->nlocal > 0;
}

/* Forward on one held chunk, merged into (oacc, lacc). */
static FMErrorCode fwd_chunk(Exec *e, int c, float *oacc, float *lacc, float *opart, float *lpart, int *first)
{
  FMAttnProblem p = e->p;
  size_t len = chunk_len(e->d, c), B = (size_t)e->plan->batch;
  int k0, k1;
  double t0;
  if (!needs(e, c)) return FM_SUCCESS;
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
  tr_rec(e, FM_TRACE_COMPUTE, t0, FMTime(), 0, 4.0 * B * p.heads_q * p.nq * (double)len * p.head_dim, -1, c);
  FMCall(poll_sends(e));
  return FM_SUCCESS;
}

static void to_dtype(void *dst, FMDType t, const float *src, size_t n)
{
  if (t == FM_DTYPE_FP32) { memcpy(dst, src, n * sizeof(float)); return; }
  for (size_t i = 0; i < n; i++) FMFromFloat(dst, i, t, src[i]);
}


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

static void ring_init(Exec *e, Ring *R)
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
static void ring_pack(Exec *e, char *blk, const void *k, const void *v)
{
  FMDist *d = e->d;
  int me = e->plan->ctx->rank;
  size_t B = (size_t)e->plan->batch, nk = (size_t)d->nkeys;
  for (int b = d->part.rstart[me]; b < d->part.rstart[me + 1]; b++) {
    int c = d->part.rchunks[b];
    size_t sz = chunk_len(d, c) * e->row_kv;
    char *o = blk + (size_t)d->boff[c];
    for (size_t bb = 0; bb < B; bb++) {
      memcpy(o + bb * sz, (const char *)k + (bb * nk + (size_t)d->kofs[c]) * e->row_kv, sz);
      memcpy(o + (B + bb) * sz, (const char *)v + (bb * nk + (size_t)d->kofs[c]) * e->row_kv, sz);
    }
  }
}

/* Post step s's exchange: send the held block of rank r on, receive rank rn's from prev. */
static FMErrorCode ring_post(Exec *e, const Ring *R, int r, int rn, char *cur, char *nxt, MPI_Request rq[2], double post[2])
{
  FMDist *d = e->d;
  MPI_Comm comm = e->plan->hdr.comm;
  FMCallMPI(FMMPIIrecv_Private(nxt, (size_t)d->rbytes[rn], MPI_BYTE, R->prev, R->tag_kv, comm, &rq[0]));
  post[0] = FMTime();
  FMCallMPI(FMMPIIsend_Private(cur, (size_t)d->rbytes[r], MPI_BYTE, R->next, R->tag_kv, comm, &rq[1]));
  post[1] = FMTime();
  d->stats.sent_bytes[R->level] += d->rbytes[r];
  if (r != R->me) d->stats.relayed_bytes += d->rbytes[r];
  return FM_SUCCESS;
}

/* Complete step s's exchange (a WAIT event, then the RECV and SEND events). */
static FMErrorCode ring_wait(Exec *e, const Ring *R, int r, int rn, MPI_Request rq[2], const double post[2])
{
  MPI_Status st;
  double t0 = FMTime(), t1, t2;
  double cnt;
  FMCallMPI(MPI_Wait(&rq[0], &st));
  t1 = FMTime();
  FMCallMPI(MPI_Wait(&rq[1], MPI_STATUS_IGNORE));
  t2 = FMTime();
  cnt = FMMPIStatusBytes_Private(&st, MPI_BYTE);
  e->d->stats.recv_bytes += cnt;
  tr_rec(e, FM_TRACE_WAIT, t0, t2, 0, 0, -1, -1);
  tr_rec(e, FM_TRACE_RECV, post[0], t1, cnt, 0, R->prev, ring_first_chunk(e->d, rn));
  tr_rec(e, FM_TRACE_SEND, post[1], t2, e->d->rbytes[r], 0, R->next, ring_first_chunk(e->d, r));
  return FM_SUCCESS;
}

/* Forward on every chunk of rank r's block that this rank's rows can see. */
static FMErrorCode ring_fwd_block(Exec *e, int r, char *blk, float *oacc, float *lacc, float *opart, float *lpart, int *first)
{
  FMDist *d = e->d;
  for (int b = d->part.rstart[r]; b < d->part.rstart[r + 1]; b++) {
    int c = d->part.rchunks[b];
    FMErrorCode ierr;
    e->buf[c] = blk + (size_t)d->boff[c];
    ierr = fwd_chunk(e, c, oacc, lacc, opart, lpart, first);
    e->buf[c] = NULL;
    FMCall(ierr);
  }
  return FM_SUCCESS;
}

static FMErrorCode ring_forward(Exec *e, const void *k, const void *v, float *oacc, float *lacc, float *opart, float *lpart, int *first)
{
  Ring R;
  char *cur = NULL, *nxt = NULL, *t;
  FMErrorCode ierr = FM_SUCCESS;
  ring_init(e, &R);
  ierr = FMMalloc((size_t)R.maxb + 1, &cur);
  if (!ierr) ierr = FMMalloc((size_t)R.maxb + 1, &nxt);
  TRY(FMAgree_Private(e->plan->hdr.comm, ierr, __FILE__, __func__, __LINE__));
  ring_pack(e, cur, k, v);
  for (int s = 0; s < R.P; s++) {
    int r = (R.me - s + 2 * R.P) % R.P, rn = (R.me - s - 1 + 2 * R.P) % R.P, comm = s < R.P - 1;
    MPI_Request rq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    double post[2];
    if (comm) TRY(ring_post(e, &R, r, rn, cur, nxt, rq, post));
    if (e->d->overlap || !comm) TRY(ring_fwd_block(e, r, cur, oacc, lacc, opart, lpart, first));
    if (comm) TRY(ring_wait(e, &R, r, rn, rq, post));
    if (!e->d->overlap && comm) TRY(ring_fwd_block(e, r, cur, oacc, lacc, opart, lpart, first));
    t = cur; cur = nxt; nxt = t;
  }
cleanup:
  free(cur); free(nxt);
  return ierr;
}

/*
 * Backward: the dK/dV of a block travel with it. At step s rank me computes the dK/dV
 * partial of the block it holds (and adds dQ), adds the running sum that arrived from me-1
 * (the block's previous holders), and sends the sum on to me+1 (fp32, tag 2C+1). The
 * block's P-th holder (step P-1) is r-1, whose send goes to the owner r: after the loop each
 * rank receives its own final dK/dV from me-1. Sums run in ring order: deterministic.
 */
static FMErrorCode ring_backward(Exec *e, const void *k, const void *v, const void *q, const void *o, const float *lse, const void *dout,
                                 float *dqacc, void *dk, void *dv)
{
  FMDist *d = e->d;
  FMPlan plan = e->plan;
  MPI_Comm comm = plan->hdr.comm;
  Ring R;
  size_t B = (size_t)plan->batch, row = (size_t)plan->heads_kv * plan->head_dim, ng;
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
  TRY(FMAgree_Private(comm, ierr, __FILE__, __func__, __LINE__));
  ring_pack(e, cur, k, v);
  for (int s = 0; s < R.P; s++) {
    int r = (R.me - s + 2 * R.P) % R.P, rn = (R.me - s - 1 + 2 * R.P) % R.P, comm_kv = s < R.P - 1;
    size_t nr = (size_t)(d->rbytes[r] / e->es);
    MPI_Request rq[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    double post[2];
    if (comm_kv) TRY(ring_post(e, &R, r, rn, cur, nxt, rq, post));
    if (s > 0) { /* the running dK/dV sum of block r from its previous holders */
      TRY_MPI(FMMPIIrecv_Private(gin, (size_t)nr, MPI_FLOAT, R.prev, R.tag_g, comm, &grq));
      grpost = FMTime();
    }
    if (!d->overlap && comm_kv) TRY(ring_wait(e, &R, r, rn, rq, post));
    memset(gpart, 0, nr * sizeof(float));
    for (int b = d->part.rstart[r]; b < d->part.rstart[r + 1]; b++) {
      int c = d->part.rchunks[b], k0, k1;
      size_t len = chunk_len(d, c), n = B * len * row;
      float *gc = gpart + (size_t)(d->boff[c] / e->es);
      const char *kc = cur + (size_t)d->boff[c];
      FMAttnProblem p = e->p;
      if (!needs(e, c)) continue;
      FMDistChunkKeys(&d->ch, c, &k0, &k1);
      p.k0 = k0; p.nk = (int)len;
      t0 = FMTime();
      TRY(FMCPUBackward(&p, q, kc, kc + B * len * e->row_kv, o, lse, dout, dqacc, gc, gc + n, FM_DTYPE_FP32));
      tr_rec(e, FM_TRACE_COMPUTE, t0, FMTime(), 0, 10.0 * B * p.heads_q * p.nq * (double)len * p.head_dim, -1, c);
    }
    if (d->overlap && comm_kv) TRY(ring_wait(e, &R, r, rn, rq, post));
    if (s > 0) {
      t0 = FMTime();
      TRY_MPI(MPI_Wait(&grq, MPI_STATUS_IGNORE));
      tr_rec(e, FM_TRACE_WAIT, t0, FMTime(), 0, 0, -1, -1);
      tr_rec(e, FM_TRACE_RECV, grpost, FMTime(), 4.0 * nr, 0, R.prev, ring_first_chunk(d, r));
      for (size_t i = 0; i < nr; i++) gpart[i] = gin[i] + gpart[i];
    }
    /* the previous sum must have left before its buffer takes this one */
    t0 = FMTime();
    TRY_MPI(MPI_Wait(&gsq, MPI_STATUS_IGNORE));
    if (gsr >= 0) {
      double t1 = FMTime();
      tr_rec(e, FM_TRACE_WAIT, t0, t1, 0, 0, -1, -1);
      tr_rec(e, FM_TRACE_REDUCE, gpost, t1, d->rbytes[gsr] / e->es * 4.0, 0, R.next, ring_first_chunk(d, gsr));
    }
    ft = gsend; gsend = gpart; gpart = ft;
    TRY_MPI(FMMPIIsend_Private(gsend, (size_t)nr, MPI_FLOAT, R.next, R.tag_g, comm, &gsq));
    gpost = FMTime(); gsr = r;
    t = cur; cur = nxt; nxt = t;
  }
  /* our own block's final sum, from its last holder me-1 */
  {
    size_t nme = (size_t)(d->rbytes[R.me] / e->es);
    MPI_Status st;
    double t1;
    t0 = FMTime();
    TRY_MPI(FMMPIRecv_Private(gin, (size_t)nme, MPI_FLOAT, R.prev, R.tag_g, comm, &st));
    TRY_MPI(MPI_Wait(&gsq, MPI_STATUS_IGNORE));
    t1 = FMTime();
    tr_rec(e, FM_TRACE_WAIT, t0, t1, 0, 0, -1, -1);
    tr_rec(e, FM_TRACE_RECV, t0, t1, 4.0 * nme, 0, R.prev, ring_first_chunk(d, R.me));
    if (gsr >= 0) tr_rec(e, FM_TRACE_REDUCE, gpost, t1, d->rbytes[gsr] / e->es * 4.0, 0, R.next, ring_first_chunk(d, gsr));
    for (int b = d->part.rstart[R.me]; b < d->part.rstart[R.me + 1]; b++) {
      int c = d->part.rchunks[b];
      size_t len = chunk_len(d, c), n = B * len * row, nk = (size_t)d->nkeys;
      const float *gc = gin + (size_t)(d->boff[c] / e->es);
      for (size_t bb = 0; bb < B; bb++)
        for (size_t x = 0; x < len * row; x++) {
          size_t dst = (bb * nk + (size_t)d->kofs[c]) * row + x;
          FMFromFloat(dk, dst, plan->dtype, gc[bb * len * row + x]);
          FMFromFloat(dv, dst, plan->dtype, gc[n + bb * len * row + x]);
        }
    }
  }
cleanup:
  free(cur); free(nxt); free(gpart); free(gsend); free(gin);
  return ierr;
}

FMErrorCode FMPlanForward_CP(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse)
{
  Exec e;
  FMDist *d;
  size_t no = 0, nl = 0;
  float *oacc = NULL, *lacc = NULL, *opart = NULL, *lpart = NULL;
  int first = 1, me = plan->ctx->rank, c;
  FMErrorCode ierr;

  if (plan->backend == FM_BACKEND_CUDA) {
#if FM_HAVE_CUDA
    FMCall(FMDistForwardGPU_Private(plan, q, k, v, o, lse));
    return FM_SUCCESS;
#else
    FMRaise(plan->hdr.comm, FM_ERR_SUP, "This build has no CUDA support");
#endif
  }
  /* every local allocation (Exec state, accumulators, the gather's chunk buffers) is agreed
     before the first message, so one rank's failure is an error everywhere, not a hang */
  ierr = exec_init(plan, &e);
  d = e.d;
  if (!ierr) {
    e.qptr = q;
    no = (size_t)plan->batch * plan->nlocal * plan->heads_q * plan->head_dim;
    nl = (size_t)plan->batch * plan->heads_q * plan->nlocal;
    ierr = FMMalloc(no + 1, &oacc);
    if (!ierr) ierr = FMMalloc(no + 1, &opart);
    if (!ierr) ierr = FMMalloc(nl + 1, &lacc);
    if (!ierr) ierr = FMMalloc(nl + 1, &lpart);
    if (!ierr && d->schedule != FM_DIST_SCHED_RING) ierr = gather_alloc(&e, k, v);
  }
  TRY(FMAgree_Private(plan->hdr.comm, ierr, __FILE__, __func__, __LINE__));
  d->stats.sent_bytes[0] = d->stats.sent_bytes[1] = d->stats.recv_bytes = d->stats.relayed_bytes = 0;
  TRY(tr_begin(&e, "forward"));
  if (d->schedule == FM_DIST_SCHED_RING) {
    TRY(ring_forward(&e, k, v, oacc, lacc, opart, lpart, &first));
  } else {
    TRY(gather_post(&e));
    if (d->overlap) {
      /* local K/V first, then each chunk as it arrives while the rest are in flight */
      for (int b = d->part.rstart[me]; b < d->part.rstart[me + 1]; b++)
        TRY(fwd_chunk(&e, d->part.rchunks[b], oacc, lacc, opart, lpart, &first));
      for (;;) {
        TRY(gather_next(&e, &c));
        if (c < 0) break;
        TRY(fwd_chunk(&e, c, oacc, lacc, opart, lpart, &first));
      }
    } else {
      /* everything first (relays still forward as chunks come), then compute in chunk order */
      do TRY(gather_next(&e, &c));
      while (c >= 0);
      for (c = 0; c < d->ch.nchunks; c++)
        if (e.buf[c]) TRY(fwd_chunk(&e, c, oacc, lacc, opart, lpart, &first));
    }
  }
  if (first) { /* no visible key at all on this rank */
    for (size_t i = 0; i < no; i++) oacc[i] = 0;
    for (size_t i = 0; i < nl; i++) lacc[i] = -INFINITY;
  }
  to_dtype(o, plan->dtype, oacc, no);
  if (lse) memcpy(lse, lacc, nl * sizeof(float));
  TRY(finish_sends(&e));
  TRY(tr_end(&e, "forward"));
cleanup:
  free(oacc); free(opart); free(lacc); free(lpart);
  exec_free(&e);
  return ierr;
}

/* The backward on host tensors over MPI (the CUDA backend stages its tensors around it). */
static FMErrorCode backward_host(FMPlan plan, const void *q, const void *k, const void *v, const void *o, const float *lse,
                                const void *dout, void *dq, void *dk, void *dv)
{
  Exec e;
  FMDist *d;
  MPI_Comm comm = plan->hdr.comm;
  int me = plan->ctx->rank, C, c, B = plan->batch;
  size_t nqe = 0;
  float *dqacc = NULL, **g = NULL, **cb = NULL;
  int *pending = NULL;
  MPI_Request *crq = NULL, *psq = NULL;
  double t0, *cpost = NULL, *ppost = NULL;
  FMErrorCode ierr;

  /* every local allocation (Exec state, dQ accumulator, chunk buffers, dK/dV partials) is
     agreed before the first message, so one rank's failure is an error everywhere */
  ierr = exec_init(plan, &e);
  d = e.d;
  C = d ? d->ch.nchunks : 0;
  if (!ierr) {
    e.qptr = q;
    nqe = (size_t)B * plan->nlocal * plan->heads_q * plan->head_dim;
    ierr = FMCalloc(nqe + 1, &dqacc);
  }
  if (!ierr && d->schedule == FM_DIST_SCHED_RING) {
    TRY(FMAgree_Private(comm, ierr, __FILE__, __func__, __LINE__));
    d->stats.sent_bytes[0] = d->stats.sent_bytes[1] = d->stats.recv_bytes = d->stats.relayed_bytes = 0;
    TRY(tr_begin(&e, "backward"));
    TRY(ring_backward(&e, k, v, q, o, lse, dout, dqacc, dk, dv));
    to_dtype(dq, plan->dtype, dqacc, nqe);
    TRY(tr_end(&e, "backward"));
    goto cleanup;
  }
  if (!ierr) ierr = FMCalloc(C, &g);
  if (!ierr) ierr = FMCalloc(d->nout + 1, &cb);
  if (!ierr) ierr = FMCalloc(C, &pending);
  if (!ierr) ierr = FMMalloc(d->nout + 1, &crq);
  if (!ierr) ierr = FMMalloc(d->nin + 1, &psq);
  if (!ierr) ierr = FMCalloc(d->nout + 1, &cpost);
  if (!ierr) ierr = FMCalloc(d->nin + 1, &ppost);
  for (int i = 0; !ierr && i < d->nout; i++)
    ierr = FMMalloc(2 * (size_t)B * chunk_len(d, d->out[i].chunk) * plan->heads_kv * plan->head_dim + 1, &cb[i]);
  /* the dK/dV partial of every chunk held here: the owned ones and the incoming ones */
  for (c = 0; !ierr && c < C; c++) {
    int held = d->part.owner[c] == me;
    for (int i = 0; !held && i < d->nin; i++) held = d->in[i].chunk == c;
    if (held) ierr = FMCalloc(2 * (size_t)B * chunk_len(d, c) * plan->heads_kv * plan->head_dim + 1, &g[c]);
  }
  if (!ierr) ierr = gather_alloc(&e, k, v);
  TRY(FMAgree_Private(comm, ierr, __FILE__, __func__, __LINE__));
  for (int i = 0; i <= d->nout; i++) crq[i] = MPI_REQUEST_NULL;
  for (int i = 0; i <= d->nin; i++) psq[i] = MPI_REQUEST_NULL;
  d->stats.sent_bytes[0] = d->stats.sent_bytes[1] = d->stats.recv_bytes = d->stats.relayed_bytes = 0;
  TRY(tr_begin(&e, "backward"));

  /* dK/dV partials come back from every rank this one sent a chunk to (the reverse route) */
  for (int i = 0; i < d->nout; i++) {
    size_t n = 2 * (size_t)B * chunk_len(d, d->out[i].chunk) * plan->heads_kv * plan->head_dim;
    TRY_MPI(FMMPIIrecv_Private(cb[i], (size_t)n, MPI_FLOAT, d->out[i].dst, C + d->out[i].chunk, comm, &crq[i]));
    cpost[i] = FMTime();
    pending[d->out[i].chunk]++;
  }
  TRY(gather_post(&e));
  {
    /* recompute on each held chunk with the final O and LSE; dQ accumulates over chunks */
    int order_own = 1, b = d->part.rstart[me];
    for (;;) {
      FMAttnProblem p = e.p;
      size_t len, n;
      int k0, k1;
      if (order_own && b < d->part.rstart[me + 1]) c = d->part.rchunks[b++];
      else { order_own = 0; TRY(gather_next(&e, &c)); if (c < 0) break; }
      len = chunk_len(d, c);
      n = (size_t)B * len * plan->heads_kv * plan->head_dim;
      /* g[c] was allocated (zeroed) before the agreement */
      if (!needs(&e, c)) continue;
      FMDistChunkKeys(&d->ch, c, &k0, &k1);
      p.k0 = k0; p.nk = (int)len;
      t0 = FMTime();
      TRY(FMCPUBackward(&p, q, e.buf[c], e.buf[c] + (size_t)B * len * e.row_kv, o, lse, dout, dqacc, g[c], g[c] + n, FM_DTYPE_FP32));
      tr_rec(&e, FM_TRACE_COMPUTE, t0, FMTime(), 0, 10.0 * B * p.heads_q * p.nq * (double)len * p.head_dim, -1, c);
      TRY(poll_sends(&e));
    }
  }
  /* reduce: a chunk is final here when every child's partial arrived; then up to the parent or into dK/dV */
  {
    int left = 0;
    for (c = 0; c < C; c++) left += g[c] != NULL;
    for (;;) {
      int idx = MPI_UNDEFINED;
      for (c = 0; c < C; c++) {
        size_t len, n;
        if (!g[c] || pending[c] != 0) continue;
        len = chunk_len(d, c);
        n = 2 * (size_t)B * len * plan->heads_kv * plan->head_dim;
        for (int i = 0; i < d->nout; i++) /* children in route order: deterministic sums */
          if (d->out[i].chunk == c)
            for (size_t t = 0; t < n; t++) g[c][t] += cb[i][t];
        if (d->parent[c] >= 0) {
          int ii = 0;
          while (ii < d->nin && d->in[ii].chunk != c) ii++;
          TRY_MPI(FMMPIIsend_Private(g[c], (size_t)n, MPI_FLOAT, d->parent[c], C + c, comm, &psq[ii]));
          ppost[ii] = FMTime();
        } else if (d->part.owner[c] == me) {
          size_t row = (size_t)plan->heads_kv * plan->head_dim, nk = (size_t)d->nkeys;
          for (size_t bb = 0; bb < (size_t)B; bb++)
            for (size_t t = 0; t < len * row; t++) {
              size_t dst = (bb * nk + (size_t)d->kofs[c]) * row + t;
              FMFromFloat(dk, dst, plan->dtype, g[c][bb * len * row + t]);
              FMFromFloat(dv, dst, plan->dtype, g[c][n / 2 + bb * len * row + t]);
            }
        }
        pending[c] = -1; /* done */
        left--;
      }
      if (left == 0) break;
      t0 = FMTime();
      TRY_MPI(MPI_Waitany(d->nout, crq, &idx, MPI_STATUS_IGNORE));
      if (idx == MPI_UNDEFINED) {
        ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_LIB,
                               "dK/dV reduction: %d chunks wait for partials that were never posted", left);
        goto cleanup;
      }
      {
        double t1 = FMTime(), nb = 8.0 * B * chunk_len(d, d->out[idx].chunk) * plan->heads_kv * plan->head_dim;
        tr_rec(&e, FM_TRACE_WAIT, t0, t1, 0, 0, -1, -1);
        tr_rec(&e, FM_TRACE_RECV, cpost[idx], t1, nb, 0, d->out[idx].dst, d->out[idx].chunk);
      }
      pending[d->out[idx].chunk]--;
    }
  }
  to_dtype(dq, plan->dtype, dqacc, nqe);
  t0 = FMTime();
  TRY_MPI(MPI_Waitall(d->nin, psq, MPI_STATUSES_IGNORE));
  {
    double t1 = FMTime();
    tr_rec(&e, FM_TRACE_WAIT, t0, t1, 0, 0, -1, -1);
    for (int i = 0; i < d->nin; i++) {
      int cc = d->in[i].chunk;
      if (ppost[i] > 0) tr_rec(&e, FM_TRACE_REDUCE, ppost[i], t1, 8.0 * B * chunk_len(d, cc) * plan->heads_kv * plan->head_dim, 0, d->in[i].src, cc);
    }
  }
  TRY(finish_sends(&e));
  TRY(tr_end(&e, "backward"));
cleanup:
  if (g)
    for (c = 0; c < C; c++) free(g[c]);
  if (cb)
    for (int i = 0; i < d->nout; i++) free(cb[i]);
  free(g); free(cb); free(pending); free(crq); free(psq); free(dqacc); free(cpost); free(ppost);
  exec_free(&e);
  return ierr;
}

FMErrorCode FMPlanView_CP(FMPlan plan, FILE *fp)
{
  FMDist *d = (FMDist *)plan->data;
  MPI_Comm comm = plan->hdr.comm;
  int P = plan->ctx->size, C, block = plan->mask->block > 0 ? plan->mask->block : 128;
  int64_t mx;
  double mean, imb, *recv;
  if (!d) return FM_SUCCESS;
  if (!fp) fp = stdout;
  C = d->ch.nchunks;
  FMDistPartitionImbalance(&d->part, &mx, &mean, &imb);
  FMCall(FMPrintf(comm, fp, "  context parallel over %d ranks on %d node%s%s: partition %s, %d chunks of %d rows (key chunks of %d), schedule %s, route %s, prune %s, overlap %s\n",
                  P, d->topo.nnodes, d->topo.nnodes > 1 ? "s" : "", d->vnodes > 0 ? " (virtual)" : "", FMDistPartNames[d->part_type], C,
                  d->ch.chunk, d->ch.kchunk, FMDistSchedNames[d->schedule], FMDistRouteNames[d->route_type], d->prune ? "on" : "off",
                  d->overlap ? "on" : "off"));
  FMCall(FMPrintf(comm, fp, "  work (tiles): max %.1f, mean %.1f, max/mean imbalance %.4f", (double)mx / block, mean / block, imb));
  if (d->part_type == FM_DIST_BALANCED)
    FMCall(FMPrintf(comm, fp, " (LPT %.1f, dual_chunk %.1f; %d pair and %d three-way moves)", (double)d->binfo.lpt_max / block,
                    (double)d->binfo.dual_max / block, d->binfo.pair_moves, d->binfo.triple_moves));
  FMCall(FMPrintf(comm, fp, "\n"));
  FMCall(FMMalloc(P, &recv));
  for (int r = 0; r < P; r++) recv[r] = 0;
  for (int i = 0; i < d->route.n; i++) recv[d->route.x[i].dst] += d->cbytes[d->route.x[i].chunk];
  FMCall(FMPrintf(comm, fp, "  rank node  rows chunks  work(tiles) needed  recv(MB)\n"));
  for (int r = 0; r < P; r++) {
    int nrows = 0, nn = 0;
    for (int b = d->part.rstart[r]; b < d->part.rstart[r + 1]; b++) {
      int r0, r1;
      FMDistChunkRows(&d->ch, d->part.rchunks[b], &r0, &r1);
      nrows += r1 - r0;
    }
    for (int c = 0; c < C; c++) nn += d->needed[(size_t)r * C + c];
    FMCall(FMPrintf(comm, fp, "  %4d %4d %5d %6d %12.1f %3d/%-3d %9.3f\n", r, d->topo.node[r], nrows, d->part.rstart[r + 1] - d->part.rstart[r],
                    (double)d->part.work[r] / block, nn, C, recv[r] / 1048576.0));
  }
  free(recv);
  FMCall(FMPrintf(comm, fp, "  K/V bytes: needed %.3f MB vs unpruned all-gather %.3f MB (%.1f%%); route moves %.3f MB inside nodes, %.3f MB across nodes\n",
                  d->route.needed_bytes / 1048576.0, d->route.allgather_bytes / 1048576.0,
                  d->route.allgather_bytes > 0 ? 100.0 * d->route.needed_bytes / d->route.allgather_bytes : 100.0, d->route.bytes[0] / 1048576.0,
                  d->route.bytes[1] / 1048576.0));
  {
    double rb[2];
    FMDistRingBytes(&d->topo, d->rbytes, rb);
    FMCall(FMPrintf(comm, fp, "  ring schedule would move %.3f MB inside nodes, %.3f MB across nodes%s\n", rb[0] / 1048576.0, rb[1] / 1048576.0,
                    d->schedule == FM_DIST_SCHED_RING ? " (the schedule in use)" : ""));
  }
#if FM_HAVE_CUDA
  if (d->gpu) FMCall(FMDistViewGPU_Private(plan, d, fp));
#endif
  return FM_SUCCESS;
}

FMErrorCode FMPlanBackward_CP(FMPlan plan, const void *q, const void *k, const void *v, const void *o, const float *lse,
                              const void *dout, void *dq, void *dk, void *dv)
{
  if (plan->backend == FM_BACKEND_CUDA)
    FMCall(FMPlanBackwardStaged_Private(plan, ((FMDist *)plan->data)->nkeys, backward_host, q, k, v, o, lse, dout, dq, dk, dv));
  else FMCall(backward_host(plan, q, k, v, o, lse, dout, dq, dk, dv));
  return FM_SUCCESS;
}

/* ---------------- layout queries ---------------- */
static FMErrorCode getlocalkeys(FMPlan plan, int *nkeys, const int **global_keys)
{
  FMDist *d = (FMDist *)plan->data;
  *nkeys = d->nkeys;
  if (global_keys) *global_keys = d->keys;
  return FM_SUCCESS;
}

static FMErrorCode getlayout(FMPlan plan, int keys, int r, int *n, int **idx)
{
  FMDist *d = (FMDist *)plan->data;
  if (keys) FMCall(FMDistRankKeys(&d->ch, &d->part, r, n, idx));
  else FMCall(FMDistRankRows(&d->ch, &d->part, r, n, idx));
  return FM_SUCCESS;
}

static const FMPlanOps cp_ops = {NULL, FMPlanSetUp_CP, FMPlanForward_CP, FMPlanBackward_CP, FMPlanView_CP, FMPlanDestroy_CP, getlocalkeys,
                                 getlayout};

/* FMPlanCreate_CP - see planimpl.h. */
FMErrorCode FMPlanCreate_CP(FMPlan plan)
{
  FMDist *d;
  FMCall(FMCalloc(1, &d));
  plan->data = d;
  plan->ops = &cp_ops;
  return FM_SUCCESS;
}
