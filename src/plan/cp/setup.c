/*
 * setup.c - the "cp" plan type: its constructor and ops table, FMPlanSetUp_CP (consistency
 * hash, chunks, partition, needed set, route, statistics; a full set-up or, with the shape,
 * options and communicator of the last one on every rank, an update of the bound-dependent
 * part only), FMPlanView_CP, the layout queries, FMDistGetStats and FMDistLocalizeColumns.
 * The executors are exec_gather.c / exec_ring.c (CPU) and exec_gpu.c.
 */
#include "distimpl.h"
#include <stdlib.h>
#include <string.h>

/* ---------------- helpers ---------------- */
/*
 * What the kept state (FMDist.kept) depends on: the ranks, the mask's sizes and block, the
 * plan's shape and backend, and every cp setting. Not the bounds, the causal flag or the scale.
 */
static uint64_t shape_hash(FMPlan plan, const FMMaskDesc *m, const FMDist *d)
{
  uint64_t h = FM_HASH_INIT;
  int v[22];
  v[0] = m->seqlen_q; v[1] = m->seqlen_k; v[2] = m->mask_heads; v[3] = m->mask_batch > 1 ? m->mask_batch : 1; v[4] = plan->ctx->size;
  v[5] = m->block; v[6] = plan->batch; v[7] = plan->heads_q; v[8] = plan->heads_kv; v[9] = plan->head_dim; v[10] = (int)plan->dtype;
  v[11] = d->opt.part_type; v[12] = d->opt.route_type; v[13] = d->opt.prune * 2 + d->opt.overlap; v[14] = d->opt.chunk_opt; v[15] = d->opt.vnodes;
  v[16] = d->opt.trace_on; v[17] = d->opt.schedule; v[18] = d->opt.transport; v[19] = d->opt.step_chunks;
  v[20] = d->opt.gpu_aware; v[21] = (int)plan->backend;
  h = FMHash_Private(h, v, sizeof(v));
  h = FMHash_Private(h, &d->opt.partial_cost, sizeof(d->opt.partial_cost));
  h = FMHash_Private(h, &d->opt.row_cost, sizeof(d->opt.row_cost));
  h = FMHash_Private(h, &d->opt.balance_comm, sizeof(d->opt.balance_comm));
  h = FMHash_Private(h, &d->opt.tflops, sizeof(d->opt.tflops));
  h = FMHash_Private(h, &d->opt.bw_intra, sizeof(d->opt.bw_intra));
  h = FMHash_Private(h, &d->opt.bw_inter, sizeof(d->opt.bw_inter));
  return h;
}

/* The plan's scalars, cp settings and mask bounds: every rank must set up the same plan. */
static uint64_t plan_hash(FMPlan plan, const FMMaskDesc *m, uint64_t shape)
{
  uint64_t h = shape;
  int v[2] = {m->causal, m->present};
  double sc = plan->scale;
  h = FMHash_Private(h, v, sizeof(v));
  h = FMHash_Private(h, &sc, sizeof(sc));
  /* the mask's own hash (sizes, type, causal, bounds), agreed at FMMaskSetUp on several ranks */
  {
    const uint64_t mh = FMMaskHash_Private(plan->mask);
    h = FMHash_Private(h, &mh, sizeof(mh));
  }
  return h;
}

/* Free the bound-dependent state of d (partition, needed sets, route, ...) and zero it. */
static FMErrorCode dist_clear_bounds(FMDist *d)
{
  FMCall(FMDistPartitionDestroy(&d->part));
  FMCall(FMDistRouteDestroy(&d->route));
  FMCall(FMDistNeedersDestroy(&d->nd));
  FMFree(d->w); FMFree(d->myneed); FMFree(d->keys); FMFree(d->kofs); FMFree(d->in); FMFree(d->out); FMFree(d->parent);
  FMFree(d->rbytes); FMFree(d->boff);
  memset(&d->binfo, 0, sizeof(d->binfo));
  d->nkeys = d->nin = d->nout = 0;
  return FM_SUCCESS;
}

/* Free the set-up state of d (not d itself) and zero it; the settings d->opt and the set-up counts stay. */
static FMErrorCode dist_reset(FMDist *d)
{
  FMDistOptions opt;
  int full, update;
  if (!d) return FM_SUCCESS;
  opt = d->opt;
  full = d->stats.setups_full;
  update = d->stats.setups_update;
  FMCall(dist_clear_bounds(d));
  FMCall(FMDistTopoDestroy(&d->topo));
  free(d->cbytes);
#if FM_HAVE_CUDA
  FMCall(FMDistDestroyGPU_Private(d));
#endif
  memset(d, 0, sizeof(*d));
  d->opt = opt;
  d->stats.setups_full = full;
  d->stats.setups_update = update;
  return FM_SUCCESS;
}

/* The state that depends on the shape, options and communicator only: chunks, K/V bytes per
   chunk and the topology (purely local; agreed by the caller). */
static FMErrorCode setup_shape(FMPlan plan, FMDist *d, const FMMaskDesc *m)
{
  int P = plan->ctx->size;
  FMErrorCode ierr;
  FMCall(FMDistChunksInit(m->seqlen_q, m->seqlen_k, d->opt.chunk_opt, P, m->block, &d->ch));
  FMCheck(2L * d->ch.nchunks + 2 <= (long)d->tag_ub, MPI_COMM_SELF, FM_ERR_SUP,
          "%d chunks need MPI tags up to %d but MPI_TAG_UB is %d; use a larger -fm_plan_chunk", d->ch.nchunks, 2 * d->ch.nchunks + 1,
          d->tag_ub);
  FMCall(FMMalloc(d->ch.nchunks, &d->cbytes));
  for (int c = 0; c < d->ch.nchunks; c++)
    d->cbytes[c] = FMDistChunkBytes(&d->ch, c, plan->batch, plan->heads_kv, plan->head_dim, FMDTypeSize(plan->dtype));
  /* topology: the context's nodes, or -fm_plan_nodes virtual nodes of consecutive ranks */
  if (d->opt.vnodes > 0) {
    FMCheck(d->opt.vnodes <= P, MPI_COMM_SELF, FM_ERR_OPT, "-fm_plan_nodes is %d; expected 0 (real topology) or 1..%d", d->opt.vnodes, P);
    FMCall(FMDistTopoVirtual(P, d->opt.vnodes, &d->topo));
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

/* The bound-dependent planning steps that are purely local (weights, partition, this rank's
   needed set, rows and keys); the result is identical on every rank. */
static FMErrorCode setup_bounds(FMPlan plan, FMDist *d, const FMMaskDesc *m, unsigned char *myneed)
{
  int me = plan->ctx->rank;
  FMDistTileMap tm;
  FMErrorCode ierr;
  FMCall(FMMalloc(d->ch.nchunks, &d->w));
  /* one tile map from the block summaries serves the chunk weights and this rank's needed set */
  FMCall(FMDistTileMapCreate(m, &d->ch, &tm));
  ierr = FMDistChunkWeightsMap(&tm, d->opt.partial_cost, d->opt.row_cost, d->w);
  if (!ierr) {
    FMDistCostModel cm; /* -fm_plan_balance_comm's model (doc/distributed.md) */
    FMDistCostModelInit(&cm, m->block, plan->head_dim, plan->heads_q, plan->batch, FMDistMaskRows(m), d->opt.tflops, d->opt.bw_intra,
                        d->opt.bw_inter);
    ierr = FMDistPartitionPlan((FMDistPartType)d->opt.part_type, d->opt.balance_comm, &tm, &d->ch, d->w, d->cbytes, &d->topo,
                               (FMDistRouteType)d->opt.route_type, d->opt.prune, &cm, &d->part, &d->binfo, NULL);
  }
  /* this rank's needed chunks: an interval query on the tile map (no localization) */
  if (!ierr) ierr = FMDistNeededRank(m, &d->ch, &tm, &d->part, me, d->opt.prune, myneed);
  FMCall(FMDistTileMapDestroy(&tm));
  FMCall(ierr);
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
  return FM_SUCCESS;
}

/*
 * The needs' sparse transpose (doc/distributed.md, "Plan memory"): each rank tells the owner
 * of every chunk it needs and, on the hierarchical route, that chunk's relay on its node
 * (FMDistNeedsSend): counts by MPI_Alltoall, chunk lists by MPI_Alltoallv. What arrives are
 * the needers this rank routes for (d->nd). O(P + chunks + entries) memory per rank, where
 * the all-gather of every rank's needed set it replaces held P x chunks. Collective; agreed.
 */
static FMErrorCode exchange_needs(FMPlan plan, FMDist *d)
{
  MPI_Comm comm = plan->hdr.comm;
  int P = plan->ctx->size, me = plan->ctx->rank, *cnt = NULL, *slist = NULL, *rlist = NULL, ns = 0, nr = 0;
  int *sc = NULL, *rc = NULL, *sd = NULL, *rd = NULL;
  FMErrorCode ierr = FMMalloc(4 * (size_t)P, &cnt);
  if (!ierr) {
    sc = cnt; rc = cnt + P; sd = cnt + 2 * P; rd = cnt + 3 * P;
    ierr = FMDistNeedsSend((FMDistRouteType)d->opt.route_type, &d->topo, &d->part, d->myneed, me, sc, &slist, &ns);
  }
  FMAgreeGoto(comm);
  FMCallMPIGoto(MPI_Alltoall(sc, 1, MPI_INT, rc, 1, MPI_INT, comm));
  sd[0] = rd[0] = 0;
  for (int r = 1; r < P; r++) { sd[r] = sd[r - 1] + sc[r - 1]; rd[r] = rd[r - 1] + rc[r - 1]; }
  nr = rd[P - 1] + rc[P - 1];
  ierr = FMMalloc(nr + 1, &rlist);
  FMAgreeGoto(comm);
  FMCallMPIGoto(MPI_Alltoallv(slist, sc, sd, MPI_INT, rlist, rc, rd, MPI_INT, comm));
  ierr = FMDistNeedersFromRecv(d->ch.nchunks, P, rc, rlist, &d->nd);
  FMAgreeGoto(comm);
cleanup:
  free(cnt); free(slist); free(rlist);
  return ierr;
}

static FMErrorCode setup_route(FMPlan plan, FMDist *d)
{
  int me = plan->ctx->rank, C = d->ch.nchunks;
  /* this rank's own transfers only (src or dst = me): what the executors use */
  FMCall(FMDistRouteBuildRankSparse((FMDistRouteType)d->opt.route_type, &d->topo, &d->part, d->myneed, &d->nd, d->cbytes, me, &d->route));
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
  {
    const int full = d->stats.setups_full, update = d->stats.setups_update;
    memset(&d->stats, 0, sizeof(d->stats));
    d->stats.setups_full = full;
    d->stats.setups_update = update;
  }
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
  if (d->opt.schedule == FM_DIST_SCHED_RING && plan->ctx->size > 1) {
    /* P-1 steps: everything but our own block arrives; we forward all but the block of me+1 */
    int P = plan->ctx->size;
    double total = 0;
    for (int r = 0; r < P; r++) total += d->rbytes[r];
    d->stats.predicted_recv = total - d->rbytes[me];
    d->stats.predicted_sent = total - d->rbytes[(me + 1) % P];
  }
  for (int c = 0; c < C; c++) {
    if (d->myneed[c]) d->stats.nneeded++;
    if (d->part.owner[c] != me && d->cbytes[c] > 0) {
      d->stats.allgather_bytes += d->cbytes[c];
      if (d->myneed[c]) { d->stats.needed_bytes += d->cbytes[c]; d->stats.nremote++; }
    }
  }
  return FM_SUCCESS;
}

/* The cp type's supported plans: the same refusals on one rank and on several (agreed by the caller). */
static FMErrorCode check_supported(FMPlan plan)
{
  FMCall(FMPlanCheckCUDADType_Private(plan));
#if !FM_HAVE_CUDA
  FMCheck(plan->backend != FM_BACKEND_CUDA, MPI_COMM_SELF, FM_ERR_SUP, "This build has no CUDA support");
#endif
  /* per-sample masks (mask_batch > 1) on the CUDA backend: each stage mask is uploaded with its samples (setup_gpu.c) */
  return FM_SUCCESS;
}

/*
 * The set-up proper. The plan hash must be equal everywhere (FMAgreeSame names two ranks that
 * differ), and the update path is taken when every rank's kept state matches the new shape
 * hash; otherwise everything is rebuilt. Errors agreed.
 */
static FMErrorCode setup_cp(FMPlan plan, FMDist *d, int kept, int *update)
{
  MPI_Comm comm = plan->hdr.comm;
  int flag = 0, *tagub = NULL;
  FMMaskDesc m;
  uint64_t sh, ph;
  int stale = 0;

  *update = 0;
  FMAgree(comm, check_supported(plan));
  FMCall(FMMaskGetDesc_Private(plan->mask, &m));
  sh = shape_hash(plan, &m, d);
  ph = plan_hash(plan, &m, sh);

  /* consistency: mask, shape and options must be the same everywhere */
  FMCall(FMAgreeSame(comm, ph, "the plan's hash (its mask bounds, sizes, shape, scale and -fm_plan_* options; every rank must set up the same mask and plan)"));
  FMCall(FMAgreeAny(comm, !(kept && d->shape_hash == sh), &stale));
  *update = !stale;

  if (*update) FMCall(dist_clear_bounds(d)); /* keep ch, topo, cbytes, tag_ub and the GPU's kept state */
  else {
    FMCall(dist_reset(d));
    FMCallMPI(MPI_Comm_get_attr(comm, MPI_TAG_UB, &tagub, &flag));
    d->tag_ub = flag && tagub ? *tagub : 32767;
    FMAgree(comm, setup_shape(plan, d, &m));
  }
  FMAgree(comm, FMMalloc(d->ch.nchunks, &d->myneed));
  FMAgree(comm, setup_bounds(plan, d, &m, d->myneed));
  FMCall(exchange_needs(plan, d)); /* collective; agrees internally */
  FMAgree(comm, setup_route(plan, d));
#if FM_HAVE_CUDA
  if (plan->backend == FM_BACKEND_CUDA) FMCall(FMDistSetUpGPU_Private(plan, d, *update)); /* collective; agrees internally */
#endif
  d->shape_hash = sh;
  return FM_SUCCESS;
}

/*
 * FMPlanSetUp_CP - a full set-up, or the update path when the shape, the options and the
 * communicator are those of the last successful set-up on every rank (see setup_cp). After any
 * error (agreed) everything is freed, so the next set-up is a full one on every rank.
 */
FMErrorCode FMPlanSetUp_CP(FMPlan plan)
{
  FMDist *d = (FMDist *)plan->data;
  int update = 0, kept = d->kept;
  FMErrorCode ierr;
  d->kept = 0; /* until this set-up succeeds */
  ierr = setup_cp(plan, d, kept, &update);
  if (ierr) {
    (void)dist_reset(d);
    return FMErrorTraceback(__FILE__, __func__, __LINE__, ierr);
  }
  d->kept = 1;
  if (update) d->stats.setups_update++;
  else d->stats.setups_full++;
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

FMErrorCode FMPlanView_CP(FMPlan plan, FILE *fp)
{
  FMDist *d = (FMDist *)plan->data;
  MPI_Comm comm = plan->hdr.comm;
  int P = plan->ctx->size, C, block = plan->mask->block > 0 ? plan->mask->block : 128;
  int64_t mx;
  double mean, imb, *recv = NULL;
  unsigned char *need = NULL;
  FMDistRoute full; /* the plan keeps only this rank's transfers; the view shows every rank's */
  FMErrorCode ierr = FM_SUCCESS;
  if (!d) return FM_SUCCESS;
  if (!fp) fp = stdout;
  C = d->ch.nchunks;
  FMDistPartitionImbalance(&d->part, &mx, &mean, &imb);
  FMCall(FMPrintf(comm, fp, "  context parallel over %d rank%s on %d node%s%s: partition %s, %d chunks of %d rows (key chunks of %d), schedule %s, route %s, prune %s, overlap %s\n",
                  P, P > 1 ? "s" : "", d->topo.nnodes, d->topo.nnodes > 1 ? "s" : "", d->opt.vnodes > 0 ? " (virtual)" : "", FMDistPartNames[d->opt.part_type], C,
                  d->ch.chunk, d->ch.kchunk, FMDistSchedNames[d->opt.schedule], FMDistRouteNames[d->opt.route_type], d->opt.prune ? "on" : "off",
                  d->opt.overlap ? "on" : "off"));
  FMCall(FMPrintf(comm, fp, "  work (tiles): max %.1f, mean %.1f, max/mean imbalance %.4f", (double)mx / block, mean / block, imb));
  if (d->opt.part_type == FM_DIST_BALANCED)
    FMCall(FMPrintf(comm, fp, " (LPT %.1f, dual_chunk %.1f; %d pair and %d three-way moves)", (double)d->binfo.lpt_max / block,
                    (double)d->binfo.dual_max / block, d->binfo.pair_moves, d->binfo.triple_moves));
  FMCall(FMPrintf(comm, fp, "\n"));
  memset(&full, 0, sizeof(full));
  /* every rank's needed set, for the view only (P x chunks bytes while it prints; the plan keeps its own row) */
  FMAgree(comm, FMMalloc((size_t)P * C, &need));
  FMCallMPIGoto(MPI_Allgather(d->myneed, C, MPI_UNSIGNED_CHAR, need, C, MPI_UNSIGNED_CHAR, comm));
  FMCallGoto(FMDistRouteBuild((FMDistRouteType)d->opt.route_type, &d->topo, &d->part, need, d->cbytes, &full));
  FMCallGoto(FMMalloc(P, &recv));
  for (int r = 0; r < P; r++) recv[r] = 0;
  for (int i = 0; i < full.n; i++) recv[full.x[i].dst] += d->cbytes[full.x[i].chunk];
  FMCallGoto(FMPrintf(comm, fp, "  rank node  rows chunks  work(tiles) needed  recv(MB)\n"));
  for (int r = 0; r < P; r++) {
    int nrows = 0, nn = 0;
    for (int b = d->part.rstart[r]; b < d->part.rstart[r + 1]; b++) {
      int r0, r1;
      FMDistChunkRows(&d->ch, d->part.rchunks[b], &r0, &r1);
      nrows += r1 - r0;
    }
    for (int c = 0; c < C; c++) nn += need[(size_t)r * C + c];
    FMCallGoto(FMPrintf(comm, fp, "  %4d %4d %5d %6d %12.1f %3d/%-3d %9.3f\n", r, d->topo.node[r], nrows, d->part.rstart[r + 1] - d->part.rstart[r],
                        (double)d->part.work[r] / block, nn, C, recv[r] / 1e6));
  }
  FMCallGoto(FMPrintf(comm, fp, "  K/V bytes: needed %.3f MB vs unpruned all-gather %.3f MB (%.1f%%); route moves %.3f MB inside nodes, %.3f MB across nodes\n",
                      full.needed_bytes / 1e6, full.allgather_bytes / 1e6,
                      full.allgather_bytes > 0 ? 100.0 * full.needed_bytes / full.allgather_bytes : 100.0, full.bytes[0] / 1e6,
                      full.bytes[1] / 1e6));
  {
    double rb[2];
    FMDistRingBytes(&d->topo, d->rbytes, rb);
    FMCallGoto(FMPrintf(comm, fp, "  ring schedule would move %.3f MB inside nodes, %.3f MB across nodes%s\n", rb[0] / 1e6, rb[1] / 1e6,
                        d->opt.schedule == FM_DIST_SCHED_RING ? " (the schedule in use)" : ""));
  }
#if FM_HAVE_CUDA
  if (d->gpu) FMCallGoto(FMDistViewGPU_Private(plan, d, fp));
#endif
cleanup:
  free(recv);
  free(need);
  FMDistRouteDestroy(&full);
  return ierr;
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

/* The bytes this rank sent in the last forward or backward: K/V (FMDistGetStats' sent_bytes, both
   link levels) and, after a backward, the dK/dV partials sent back (reduce_bytes): what
   -fm_log_view reports as moved for a "cp" plan. */
static FMErrorCode getbytes(FMPlan plan, double *bytes)
{
  const FMDist *d = (const FMDist *)plan->data;
  *bytes = d ? d->stats.sent_bytes[0] + d->stats.sent_bytes[1] + d->stats.reduce_bytes : 0;
  return FM_SUCCESS;
}

static const FMPlanOps cp_ops = {FMPlanSetFromOptions_CP, FMPlanSetUp_CP, FMPlanForward_CP, FMPlanBackward_CP, FMPlanView_CP, FMPlanDestroy_CP, getlocalkeys,
                                 getlayout, getbytes};

/* FMPlanCreate_CP - see planimpl.h. */
FMErrorCode FMPlanCreate_CP(FMPlan plan)
{
  FMDist *d;
  FMCall(FMCalloc(1, &d));
  FMDistOptionsDefault_Private(&d->opt);
  plan->data = d;
  plan->ops = &cp_ops;
  return FM_SUCCESS;
}
