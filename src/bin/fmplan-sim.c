/*
 * fmplan-sim - run the context-parallel planner for a virtual topology, in one process and
 * without GPUs, and print the predicted per-rank work, the imbalance and the K/V bytes per
 * link level for each partition and route, beside the ring baseline. Lets a user choose settings for a large job on
 * a laptop.
 *
 *   fmplan-sim -nodes 16 -gpus_per_node 8 -mask causal_document -seqlen 1048576
 *              [-seqlen_k N] [-mask_heads 1] [-batch 1] [-mask_batch 1] [-heads_kv 8] [-head_dim 128]
 *              [-dtype bf16|fp16|fp32] [-chunk 0] [-block 128] [-prune 1] [-view_ranks]
 *              [-steps N] [-seed S] [-rank R] [-table 0|1] [-ref 0|1] [-csv FILE] [-balance_comm 0|1]
 *              [-heads_q 32] [-tflops 500] [-bw_intra 450] [-bw_inter 50]
 *              [-fm_mask_* options of the mask builders]
 *
 * Beside the every-rank simulation (the table), it times what ONE rank computes in
 * FMPlanSetUp: chunk weights, partition, rows, its needed set, its route and its exchange
 * steps. -steps N re-plans N times, each with a fresh mask of the same type (seed S + step:
 * new documents, as a data loader gives), and reports the median per step. These phases are
 * what an update of a set-up plan recomputes (FMPlanSetUp with the same shape: doc/distributed.md,
 * "Re-planning every step"); the summary also times what an update keeps (chunks, K/V bytes per
 * chunk, topology) and the host part the CUDA backend adds to an update (localizing the rank's rows).
 * The table also prints the plan's memory on its largest rank (with the needs' sparse transpose,
 * and with the all-gathered needed matrix it replaced).
 *
 * The options are checked before anything runs, with the rules FMPlanSetShape and FMPlanSetUp
 * apply to a real plan: lengths, -batch, -heads_kv and -mask_batch >= 1, -mask_heads 1 or
 * -heads_kv, -mask_batch 1 or -batch, -heads_q a multiple of -heads_kv, -head_dim a positive
 * multiple of 8, -dtype bf16, fp16 or fp32, -chunk >= 0 (0: the default); a bad value is an
 * error naming the option. The -fm_mask_* options apply to the mask after the ones above, and
 * what is printed and simulated is the mask they give (its type, lengths, heads and batch,
 * checked again by the same rules). The first mask's seed is -seed when given, else
 * -fm_mask_seed when given, else 42; step s adds s.
 */
#include <flashmask/private/fmdist.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define NPH 7 /* timed phases of one rank: weights, balance, rows, needed, route, steps, total */
static const char *const phname[NPH] = {"weights", "balance", "rows", "needed", "route", "steps", "total"};

static const char help[] =
  "fmplan-sim: the context-parallel planner for a virtual topology (one process, no GPU).\n"
  "  -nodes N -gpus_per_node G   virtual topology (P = N x G ranks)\n"
  "  -mask TYPE -seqlen S [-seqlen_k SK] [-mask_heads H]   the mask (any -fm_mask_* option too)\n"
  "  -batch B -heads_kv H -head_dim D -dtype bf16|fp16|fp32  the K/V shape that sets the bytes\n"
  "  -mask_batch B  a mask per sample (1: shared; else the batch, which it sets by default): a fresh\n"
  "                 packing per sample; the chunk weights sum the samples, the needed sets are their union\n"
  "  -heads_q H -tflops F -bw_intra G -bw_inter G  the predicted compute, exchange and step times\n"
  "  -chunk L (0: default) -block 128 -prune 1 -view_ranks\n"
  "  -balance_comm 1  the rank's set-up uses the communication-aware balancer (-fm_plan_balance_comm); the table\n"
  "                 always shows it as the comm_aware row, scored on the hierarchical route; with -steps N, the\n"
  "                 distribution over the steps of its bytes across nodes and predicted step against the work-only one\n"
  "  -steps N  re-plan N times with a fresh mask (seed S + step) and report the median per step\n"
  "  -seed S   the first mask's seed (default: -fm_mask_seed if given, else 42)\n"
  "  -rank R (the rank whose set-up work is timed) -table 0|1 (the every-rank table)\n"
  "  -ref 1    also time the reference paths (the planner before the fast paths) -csv FILE (append one row)\n";

typedef struct {
  int nodes, gpn, S, Sk, mh, mb, batch, hq, hkv, d, chunk, block, P, steps, rank;
  double bw[2], tflops;
  unsigned long seed; /* the first mask's: -seed, else the mask's own after -fm_mask_seed (make_mask) */
  FMBool seed_set;    /* -seed was given */
  char mtype[64], csv[512];
  FMDType dt;
  FMBool prune, view, table, ref, comm;
  size_t es;
  double pcost, rcost;
} Sim;

/*
 * check_mask - the rules FMPlanSetUp applies to the mask's heads and batch against the shape
 *   (check_mask_heads in src/plan/plan.c), for the options (sim_options) and again for the mask
 *   the -fm_mask_* options made (run). Not collective.
 */
static FMErrorCode check_mask(const Sim *o)
{
  FMCheck(o->mh == 1 || o->mh == o->hkv, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
          "-mask_heads %d (or -fm_mask_heads) with -heads_kv %d; expected 1 or heads_kv mask heads, as FMPlanSetUp requires", o->mh, o->hkv);
  FMCheck(o->mb == 1 || o->mb == o->batch, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
          "-mask_batch %d (or -fm_mask_batch) with -batch %d; expected 1 or the batch", o->mb, o->batch);
  return FM_SUCCESS;
}

static FMErrorCode sim_options(Sim *o)
{
  FMBool set;
  int dt = FM_DTYPE_BF16, seed = 42;
  memset(o, 0, sizeof(*o));
  o->nodes = 1; o->gpn = 8; o->S = 131072; o->mh = 1; o->mb = 1; o->batch = 1; o->hkv = 8; o->d = 128; o->block = 128;
  o->pcost = 1.0; o->prune = FM_TRUE; o->table = FM_TRUE; o->hq = 32; o->bw[0] = 450; o->bw[1] = 50; o->tflops = 500;
  strcpy(o->mtype, "causal_document");
  FMCall(FMOptionsGetInt("-nodes", "virtual nodes", &o->nodes, NULL));
  FMCall(FMOptionsGetInt("-gpus_per_node", "ranks (GPUs) per node", &o->gpn, NULL));
  FMCall(FMOptionsGetString("-mask", "mask type (full, causal, causal_document, document, ...)", o->mtype, sizeof(o->mtype), NULL));
  FMCall(FMOptionsGetInt("-seqlen", "sequence length (query and key)", &o->S, NULL));
  FMCall(FMOptionsGetInt("-seqlen_k", "key sequence length (default: -seqlen)", &o->Sk, &set));
  FMCall(FMOptionsGetInt("-mask_heads", "mask heads (1 or heads_kv)", &o->mh, NULL));
  FMCall(FMOptionsGetInt("-mask_batch", "mask batch: 1 (shared by every sample) or the batch (a packing per sample)", &o->mb, NULL));
  if (o->mb > 1) o->batch = o->mb; /* the default batch of a per-sample mask */
  FMCall(FMOptionsGetInt("-batch", "batch size", &o->batch, NULL));
  FMCall(FMOptionsGetInt("-heads_kv", "key/value heads", &o->hkv, NULL));
  FMCall(FMOptionsGetInt("-heads_q", "query heads (for the predicted compute time)", &o->hq, NULL));
  FMCall(FMOptionsGetReal("-bw_intra", "GB/s a rank receives over links inside a node (default 450: NVLink 4)", &o->bw[0], NULL));
  FMCall(FMOptionsGetReal("-bw_inter", "GB/s a rank receives across nodes (default 50: 400 Gb/s InfiniBand)", &o->bw[1], NULL));
  FMCall(FMOptionsGetReal("-tflops", "attention TFLOP/s of one GPU (default 500, an H200 forward in bf16)", &o->tflops, NULL));
  FMCall(FMOptionsGetInt("-head_dim", "head dimension", &o->d, NULL));
  FMCall(FMOptionsGetEnum_Private("-dtype", "element type of K and V", FMDTypeNames, &dt, NULL)); /* the library's names */
  FMCall(FMOptionsGetInt("-chunk", "query rows per chunk (0: default, about seqlen/(4P))", &o->chunk, NULL));
  FMCall(FMOptionsGetInt("-block", "block size of the mask summaries", &o->block, NULL));
  FMCall(FMOptionsGetReal("-row_cost", "fixed cost of each query tile, in full tiles (as -fm_plan_row_cost)", &o->rcost, NULL));
  FMCall(FMOptionsGetReal("-partial_cost", "cost of a partially masked tile, in full tiles (as -fm_plan_partial_cost)", &o->pcost, NULL));
  FMCall(FMOptionsGetBool("-balance_comm", "time the communication-aware balancer (as -fm_plan_balance_comm) in the rank's set-up", &o->comm, NULL));
  FMCall(FMOptionsGetBool("-prune", "prune K/V chunks no local query sees", &o->prune, NULL));
  FMCall(FMOptionsGetBool("-view_ranks", "print every rank's work and bytes", &o->view, NULL));
  FMCall(FMOptionsGetInt("-steps", "re-plan this many times with a fresh mask each (0: once)", &o->steps, NULL));
  FMCall(FMOptionsGetInt("-seed", "seed of the first mask (step s uses seed + s; default -fm_mask_seed, else 42)", &seed, &o->seed_set));
  FMCall(FMOptionsGetInt("-rank", "the rank whose set-up work is timed", &o->rank, NULL));
  o->table = o->steps > 0 ? FM_FALSE : FM_TRUE;
  FMCall(FMOptionsGetBool("-table", "print the every-rank simulation table", &o->table, NULL));
  FMCall(FMOptionsGetBool("-ref", "also time the reference (pre-fast-path) planner", &o->ref, NULL));
  FMCall(FMOptionsGetString("-csv", "append one summary row to this CSV file", o->csv, sizeof(o->csv), NULL));
  FMCheck(o->S >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-seqlen %d; expected a length >= 1", o->S);
  FMCheck(!set || o->Sk >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-seqlen_k %d; expected a length >= 1 (default: -seqlen)", o->Sk);
  if (!set) o->Sk = o->S;
  FMCheck(o->batch >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-batch %d; expected >= 1", o->batch);
  FMCheck(o->mb >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-mask_batch %d; expected >= 1 (1: shared by every sample)", o->mb);
  FMCheck(o->hkv >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-heads_kv %d; expected >= 1", o->hkv);
  FMCheck(o->mh >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-mask_heads %d; expected 1 or heads_kv", o->mh);
  FMCheck(o->d >= 8 && o->d % 8 == 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-head_dim %d; expected a positive multiple of 8", o->d);
  FMCheck(o->chunk >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-chunk %d; expected query rows >= 1, or 0 for the default", o->chunk);
  FMCheck(o->pcost > 0 && o->pcost <= 64, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-partial_cost %g; expected a cost in (0, 64] full tiles", o->pcost);
  FMCheck(o->rcost >= 0 && o->rcost <= 1e6, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-row_cost %g; expected a cost in [0, 1e6] full tiles", o->rcost);
  FMCheck(o->nodes >= 1 && o->gpn >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-nodes %d -gpus_per_node %d; expected both >= 1", o->nodes, o->gpn);
  FMCheck(o->bw[0] > 0 && o->bw[1] > 0 && o->tflops > 0 && o->hq >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "-bw_intra %g -bw_inter %g -tflops %g -heads_q %d; expected all > 0", o->bw[0], o->bw[1], o->tflops, o->hq);
  FMCheck(o->hq % o->hkv == 0, MPI_COMM_SELF, FM_ERR_ARG_INCOMP, "-heads_q %d -heads_kv %d; expected heads_q a multiple of heads_kv", o->hq,
          o->hkv);
  FMCall(check_mask(o));
  FMCheck(o->steps >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-steps %d; expected >= 0", o->steps);
  FMCheck(seed >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-seed %d; expected >= 0", seed);
  o->seed = (unsigned long)seed;
  o->dt = (FMDType)dt;
  o->es = FMDTypeSize(o->dt);
  o->P = o->nodes * o->gpn;
  FMCheck(o->rank >= 0 && o->rank < o->P, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-rank %d; expected 0..%d", o->rank, o->P - 1);
  return FM_SUCCESS;
}

/*
 * A set-up mask of the configured type (the -fm_mask_* options apply after the program's own) for
 * step `step`: seed o->seed + step; *t the time of FMMaskSetUp. Without -seed the first mask's
 * seed is the mask's after the options (-fm_mask_seed, else the library's default, 42), kept in
 * o->seed.
 */
static FMErrorCode make_mask(Sim *o, FMContext ctx, int step, FMMask *mask, double *t)
{
  FMCall(FMMaskCreate(ctx, mask));
  FMCall(FMMaskSetSizes(*mask, o->S, o->Sk, o->mh));
  FMCall(FMMaskSetBatch(*mask, o->mb)); /* sample s draws its packing from the seed + s */
  FMCall(FMMaskSetType(*mask, o->mtype));
  FMCall(FMMaskSetBlockSize(*mask, o->block));
  FMCall(FMMaskSetFromOptions(*mask));
  if (step == 0 && !o->seed_set) o->seed = (*mask)->seed; /* -fm_mask_seed, when given */
  FMCall(FMMaskSetSeed(*mask, o->seed + (unsigned long)step));
  *t = FMTime();
  FMCall(FMMaskSetUp(*mask));
  /* on one process the summaries wait for their first reader; the ranks of a real plan compute
     them in SetUp, so the simulated set-up includes them */
  FMCall(FMMaskSummary_Private(*mask, NULL));
  *t = FMTime() - *t;
  return FM_SUCCESS;
}

/* The cost model of the options (the one the communication-aware balancer uses: cost.c). */
static void sim_model(const Sim *o, const FMMaskDesc *m, FMDistCostModel *cm)
{
  FMDistCostModelInit(cm, m->block, o->d, o->hq, o->batch, FMDistMaskRows(m), o->tflops, o->bw[0], o->bw[1]);
}

/*
 * What rank o->rank computes in FMPlanSetUp (the balanced partition, the hierarchical route,
 * the gather's steps), phase by phase into tp[NPH] (seconds). ref: the reference paths
 * (weights tile by tile, localize + scan, the whole route and every rank's steps). The other
 * ranks' needed sets, and what the needs' transpose delivers to the rank (its needers: an
 * MPI_Alltoallv in a real run), are computed untimed; the route phase times the transpose's
 * local part (the send lists) and the route from the needers.
 */
static FMErrorCode rank_work(const Sim *o, const FMMaskDesc *m, const FMDistTopo *topo, int ref, double *tp, double *tu, FMDistCommInfo *ci)
{
  FMDistChunks ch;
  FMDistTileMap tm;
  FMDistPartition part;
  FMDistRoute route;
  FMDistNeeders nd;
  FMDistStepXfer *tx = NULL;
  int64_t *w = NULL;
  int *rows = NULL, *keys = NULL, nr, nk, ntx, nst, me = o->rank;
  double *cb = NULL, t0 = FMTime(), t;
  unsigned char *need = NULL;
  FMCall(FMDistChunksInit(m->seqlen_q, m->seqlen_k, o->chunk, o->P, m->block, &ch));
  FMCall(FMMalloc(ch.nchunks, &w));
  FMCall(FMMalloc(ch.nchunks, &cb));
  FMCall(FMMalloc((size_t)o->P * ch.nchunks, &need));
  if (ref) FMCall(FMDistChunkWeightsRef(m, &ch, o->pcost, o->rcost, w));
  else {
    FMCall(FMDistTileMapCreate(m, &ch, &tm));
    FMCall(FMDistChunkWeightsMap(&tm, o->pcost, o->rcost, w));
  }
  t = FMTime(); tp[0] = t - t0;
  if (!ref) { /* what FMPlanSetUp runs: the work-only balancer, or with -balance_comm the communication-aware one */
    FMDistCostModel cm;
    for (int c = 0; c < ch.nchunks; c++) cb[c] = FMDistChunkBytes(&ch, c, o->batch, o->hkv, o->d, o->es);
    sim_model(o, m, &cm);
    FMCall(FMDistPartitionPlan(FM_DIST_BALANCED, o->comm == FM_TRUE, &tm, &ch, w, cb, topo, FM_DIST_ROUTE_HIER, o->prune == FM_TRUE, &cm, &part,
                               NULL, ci));
  } else FMCall(FMDistPartitionCreate(FM_DIST_BALANCED, ch.nchunks, o->P, w, &part, NULL));
  tp[1] = FMTime() - t; t = FMTime();
  FMCall(FMDistRankRows(&ch, &part, me, &nr, &rows));
  FMCall(FMDistRankKeys(&ch, &part, me, &nk, &keys));
  for (int c = 0; c < ch.nchunks; c++) cb[c] = FMDistChunkBytes(&ch, c, o->batch, o->hkv, o->d, o->es);
  tp[2] = FMTime() - t; t = FMTime();
  if (ref) {
    FMDistLocalMask lm;
    FMCall(FMDistLocalize(m, &ch, part.rstart[me + 1] - part.rstart[me], part.rchunks + part.rstart[me], &lm));
    FMCall(FMDistNeeded(&lm, &ch, o->prune == FM_TRUE, need + (size_t)me * ch.nchunks));
    FMCall(FMDistLocalMaskDestroy(&lm));
  } else FMCall(FMDistNeededRank(m, &ch, &tm, &part, me, o->prune == FM_TRUE, need + (size_t)me * ch.nchunks));
  tp[3] = FMTime() - t;
  {
    /* every rank's needed set, the transpose's input (untimed; this rank's own row must agree) */
    unsigned char *mine;
    FMCall(FMMalloc(ch.nchunks, &mine));
    memcpy(mine, need + (size_t)me * ch.nchunks, (size_t)ch.nchunks);
    FMCall(FMDistNeededAll(m, &ch, &part, o->prune == FM_TRUE, need));
    FMCheck(!memcmp(mine, need + (size_t)me * ch.nchunks, (size_t)ch.nchunks), MPI_COMM_SELF, FM_ERR_LIB,
            "rank %d's needed set differs from FMDistNeededAll's", me);
    free(mine);
  }
  /* what the needs' transpose (MPI_Alltoallv, setup.c) delivers to this rank: untimed here */
  FMCall(FMDistNeedersFromMatrix(FM_DIST_ROUTE_HIER, topo, &part, need, me, &nd));
  t = FMTime();
  if (ref) FMCall(FMDistRouteBuild(FM_DIST_ROUTE_HIER, topo, &part, need, cb, &route));
  else { /* the transpose's send lists (its local part) and the route from the needers */
    int *cnt, *list, tot;
    FMCall(FMMalloc(o->P, &cnt));
    FMCall(FMDistNeedsSend(FM_DIST_ROUTE_HIER, topo, &part, need + (size_t)me * ch.nchunks, me, cnt, &list, &tot));
    FMCall(FMDistRouteBuildRankSparse(FM_DIST_ROUTE_HIER, topo, &part, need + (size_t)me * ch.nchunks, &nd, cb, me, &route));
    free(cnt); free(list);
  }
  tp[4] = FMTime() - t; t = FMTime();
  if (ref) FMCall(FMDistExchangeSteps(FM_DIST_SCHED_GATHER, &ch, &part, topo, &route, 0, &ntx, &tx, &nst));
  else FMCall(FMDistExchangeStepsRank(FM_DIST_SCHED_GATHER, &ch, &part, topo, &route, 0, me, &ntx, &tx, &nst));
  tp[5] = FMTime() - t;
  tp[6] = tp[0] + tp[1] + tp[2] + tp[3] + tp[4] + tp[5];
  if (tu) {
    /* tu[0]: what an update keeps and a full set-up builds (chunks, K/V bytes, topology);
       tu[1]: the CUDA backend's host work of an update beside the above: localize the rank's rows
       on the columns of its stages (FMDistLocalizeColumns, as setup_gpu.c), before folding */
    FMDistChunks c2;
    FMDistTopo t2;
    FMDistLocalMask lm;
    t = FMTime();
    FMCall(FMDistChunksInit(m->seqlen_q, m->seqlen_k, o->chunk, o->P, m->block, &c2));
    for (int c = 0; c < c2.nchunks; c++) cb[c] = FMDistChunkBytes(&c2, c, o->batch, o->hkv, o->d, o->es);
    FMCall(FMDistTopoVirtual(o->P, o->nodes, &t2));
    tu[0] = FMTime() - t;
    FMCall(FMDistTopoDestroy(&t2));
    int *cols, n = 0;
    t = FMTime();
    /* the stage masks' columns: the own keys, then every chunk the rank receives */
    FMCall(FMMalloc((size_t)m->seqlen_k + 1, &cols));
    memcpy(cols, keys, sizeof(int) * (size_t)nk);
    n = nk;
    for (int k = 0; k < route.n; k++)
      if (route.x[k].dst == me) {
        int k0, k1;
        FMDistChunkKeys(&ch, route.x[k].chunk, &k0, &k1);
        for (int j = k0; j < k1; j++) cols[n++] = j;
      }
    FMCall(FMDistLocalizeColumns(m, &ch, part.rstart[me + 1] - part.rstart[me], part.rchunks + part.rstart[me], n, cols, &lm));
    tu[1] = FMTime() - t;
    free(cols);
    FMCall(FMDistLocalMaskDestroy(&lm));
  }
  if (!ref) FMDistTileMapDestroy(&tm);
  FMCall(FMDistRouteDestroy(&route));
  FMCall(FMDistNeedersDestroy(&nd));
  FMCall(FMDistPartitionDestroy(&part));
  free(tx); free(w); free(cb); free(need); free(rows); free(keys);
  return FM_SUCCESS;
}

/*
 * The predicted times of a partition and route (ms), by the planner's cost model
 * (FMDistPredict): compute = the heaviest rank's work at -tflops, exchange = the slowest
 * rank's receive (bytes inside a node at -bw_intra, across at -bw_inter), step = the slowest
 * rank's max(compute, exchange) (the exchange overlapped with the compute of the chunks
 * already there). recv: [2][P] received bytes by link level.
 */
static void predict(const Sim *o, const FMMaskDesc *m, const FMDistPartition *part, const double *recv, double *t)
{
  FMDistCostModel cm;
  sim_model(o, m, &cm);
  FMDistPredict(&cm, o->P, part->work, recv, t);
  for (int i = 0; i < 3; i++) t[i] *= 1e3;
}

/*
 * The plan's memory per rank: the bytes of the arrays FMPlanSetUp keeps in the plan (setup.c's
 * FMDist, the rank's rows and keys, its route twice (the route and its in/out lists) and the
 * GPU executor's steps of the same transfers), for every rank of the hierarchical route, and
 * the largest. before: with the all-gathered needed matrix [P][C] (the planner up to
 * 2026-12-01); after: with the rank's own row and its needers (the sparse transpose), plus what
 * the transpose holds while it runs (counts and displacements 4P ints, the lists it sends and
 * receives). Not counted: the mask (replicated, the user's) and the balancer's scratch.
 */
static FMErrorCode sim_memory(const Sim *o, const FMDistChunks *ch, const FMDistTopo *topo, const FMDistPartition *part, const unsigned char *need,
                              const double *bytes)
{
  int P = o->P, C = ch->nchunks, rmax = 0, *cnt, *list, tot;
  double best[3] = {0, 0, 0}, fixed = 8.0 * C + 4.0 * 2 * C + 4.0 * (P + 1) + 8.0 * P + 4.0 * (3 * P + 2 * topo->nnodes + 1) + 8.0 * 2 * C + 8.0 * P +
                                       4.0 * 2 * C; /* w, owner + rchunks, rstart, work, topology, cbytes + boff, rbytes, kofs + parent */
  FMCall(FMMalloc(P, &cnt));
  for (int r = 0; r < P; r++) {
    FMDistNeeders nd;
    FMDistRoute rt;
    double rows = 0, b[3];
    FMCall(FMDistNeedersFromMatrix(FM_DIST_ROUTE_HIER, topo, part, need, r, &nd));
    FMCall(FMDistRouteBuildRankSparse(FM_DIST_ROUTE_HIER, topo, part, need + (size_t)r * C, &nd, bytes, r, &rt));
    FMCall(FMDistNeedsSend(FM_DIST_ROUTE_HIER, topo, part, need + (size_t)r * C, r, cnt, &list, &tot));
    for (int k = part->rstart[r]; k < part->rstart[r + 1]; k++) {
      int r0, r1, k0, k1;
      FMDistChunkRows(ch, part->rchunks[k], &r0, &r1);
      FMDistChunkKeys(ch, part->rchunks[k], &k0, &k1);
      rows += (r1 - r0) + (k1 - k0); /* plan->rows and d->keys */
    }
    b[0] = fixed + 4.0 * rows + (double)rt.n * (2.0 * sizeof(FMDistXfer) + sizeof(FMDistStepXfer));
    b[1] = b[0] + C + 4.0 * (C + 1) + 4.0 * nd.n;
    b[2] = 16.0 * P + 4.0 * (tot + nd.n); /* the transpose's buffers: counts, displacements, sent and received lists */
    b[0] += (double)P * C;
    if (b[1] > best[1]) { best[1] = b[1]; rmax = r; }
    if (b[0] > best[0]) best[0] = b[0];
    if (b[2] > best[2]) best[2] = b[2];
    free(list);
    FMCall(FMDistRouteDestroy(&rt));
    FMCall(FMDistNeedersDestroy(&nd));
  }
  free(cnt);
  printf("  plan memory per rank (largest, hierarchical route): %.1f KiB with the all-gathered needed matrix (%.1f KiB of it); %.1f KiB with the"
         " sparse transpose (rank %d), which holds at most %.1f KiB more while it runs\n",
         best[0] / 1024.0, (double)P * C / 1024.0, best[1] / 1024.0, rmax, best[2] / 1024.0);
  if (o->csv[0]) {
    FILE *f = fopen(o->csv, "a+");
    FMCheck(f != NULL, MPI_COMM_SELF, FM_ERR_FILE, "Cannot open -csv file %s", o->csv);
    fprintf(f, "# memory,%s,%d,%d,%.0f,%.0f,%.0f\n", o->mtype, P, o->S, best[0], best[1], best[2]);
    fclose(f);
  }
  return FM_SUCCESS;
}

/* The every-rank simulation: each partition's work and each route's bytes (the table). */
static FMErrorCode sim_table(const Sim *o, const FMMaskDesc *m, const FMDistTopo *topo, double *elapsed)
{
  FMDistChunks ch;
  FMDistTileMap tm;
  FMDistChunkVis vis;
  FMDistCostModel cm;
  FMDistCommInfo cinfo;
  int64_t *w;
  double *bytes, t0 = FMTime();
  unsigned char *need;
  int P = o->P, *owner;
  static const char *const starts[] = {"improved contiguous", "improved LPT", "improved dual_chunk"};
  FMCall(FMDistChunksInit(m->seqlen_q, m->seqlen_k, o->chunk, P, m->block, &ch));
  FMCall(FMMalloc(ch.nchunks, &w));
  FMCall(FMMalloc(ch.nchunks, &owner));
  FMCall(FMMalloc(ch.nchunks, &bytes));
  FMCall(FMMalloc((size_t)P * ch.nchunks, &need));
  FMCall(FMDistTileMapCreate(m, &ch, &tm));
  FMCall(FMDistChunkWeightsMap(&tm, o->pcost, o->rcost, w));
  FMCall(FMDistChunkVisCreate(&tm, &ch, &vis));
  FMCall(FMDistTileMapDestroy(&tm));
  sim_model(o, m, &cm);
  for (int c = 0; c < ch.nchunks; c++) bytes[c] = FMDistChunkBytes(&ch, c, o->batch, o->hkv, o->d, o->es);
  printf("\n  %-10s %12s %12s %9s %12s %12s %7s  %-12s %11s %11s %13s\n", "partition", "max tiles", "mean tiles", "max/mean",
         "needed GB", "allgather GB", "needed", "route", "intra GB", "inter GB", "max recv MB");
  for (int type = 0; type < 4; type++) { /* 3: balanced with -fm_plan_balance_comm (the communication-aware balancer) */
    FMDistPartition part;
    FMDistBalanceInfo info;
    int64_t mx;
    double mean, imb, pred[2][3];
    const char *pname = type < 3 ? FMDistPartNames[type] : "comm_aware";
    if (P >= 256) fprintf(stderr, "fmplan-sim: %s partition of %d chunks on %d ranks (%.1f s)\n", pname, ch.nchunks, P, FMTime() - t0);
    if (type < 3) FMCall(FMDistPartitionCreate((FMDistPartType)type, ch.nchunks, P, w, &part, &info));
    else {
      FMCall(FMDistBalanceComm(&vis, ch.nchunks, w, bytes, topo, FM_DIST_ROUTE_HIER, o->prune == FM_TRUE, &cm, owner, &cinfo));
      FMCall(FMDistPartitionFromOwner(ch.nchunks, P, owner, w, &part));
    }
    FMDistPartitionImbalance(&part, &mx, &mean, &imb);
    if (P >= 256) fprintf(stderr, "fmplan-sim: needed sets and routes of %d ranks (%.1f s)\n", P, FMTime() - t0);
    FMCall(FMDistNeededAll(m, &ch, &part, o->prune == FM_TRUE, need));
    for (int rt = 0; rt < 2; rt++) {
      FMDistRoute route;
      double mrecv = 0, *recv;
      FMCall(FMDistRouteBuild((FMDistRouteType)rt, topo, &part, need, bytes, &route));
      FMCall(FMCalloc(3 * (size_t)P, &recv));
      for (int i = 0; i < route.n; i++) {
        recv[route.x[i].dst] += bytes[route.x[i].chunk];
        recv[P * (1 + route.x[i].level) + route.x[i].dst] += bytes[route.x[i].chunk];
      }
      for (int r = 0; r < P; r++) if (recv[r] > mrecv) mrecv = recv[r];
      predict(o, m, &part, recv + P, &pred[rt][0]);
      if (rt == 0)
        printf("  %-10s %12.1f %12.1f %9.4f %12.4f %12.4f %6.1f%%  %-12s %11.4f %11.4f %13.2f\n", pname, (double)mx / m->block,
               mean / m->block, imb, route.needed_bytes / 1e9, route.allgather_bytes / 1e9,
               route.allgather_bytes > 0 ? 100.0 * route.needed_bytes / route.allgather_bytes : 100.0, FMDistRouteNames[rt],
               route.bytes[0] / 1e9, route.bytes[1] / 1e9, mrecv / 1e6);
      else
        printf("  %-10s %12s %12s %9s %12s %12s %7s  %-12s %11.4f %11.4f %13.2f\n", "", "", "", "", "", "", "", FMDistRouteNames[rt],
               route.bytes[0] / 1e9, route.bytes[1] / 1e9, mrecv / 1e6);
      if (o->view && rt == 1) {
        printf("    rank node chunks   work(tiles)  needed  recv MB (hierarchical)\n");
        for (int r = 0; r < P; r++) {
          int nn = 0;
          for (int c = 0; c < ch.nchunks; c++) nn += need[(size_t)r * ch.nchunks + c];
          printf("    %4d %4d %6d %13.1f %7d %8.2f\n", r, topo->node[r], part.rstart[r + 1] - part.rstart[r], (double)part.work[r] / m->block, nn,
                 recv[r] / 1e6);
        }
      }
      free(recv);
      FMCall(FMDistRouteDestroy(&route));
    }
    if (type < 3) { /* (the comm-aware row's ring would only repeat the balanced one's) */
      /* the ring baseline (-fm_plan_schedule ring): every rank's whole block visits every rank, unpruned */
      double *rb, rl[2], total = 0, mrecv = 0;
      FMCall(FMMalloc(P, &rb));
      FMDistRankBytes(&part, bytes, rb);
      FMDistRingBytes(topo, rb, rl);
      for (int r = 0; r < P; r++) total += rb[r];
      for (int r = 0; r < P; r++) if (P > 1 && total - rb[r] > mrecv) mrecv = total - rb[r];
      printf("  %-10s %12s %12s %9s %12s %12s %7s  %-12s %11.4f %11.4f %13.2f\n", "", "", "", "", "", "", "", "ring", rl[0] / 1e9, rl[1] / 1e9,
             mrecv / 1e6);
      free(rb);
    }
    printf("  %-10s predicted (%.0f TFLOP/s, %g / %g GB/s in / across nodes): compute %.3f ms; exchange %.3f ms flat, %.3f ms hierarchical;"
           " step %.3f / %.3f ms\n", "", o->tflops, o->bw[0], o->bw[1], pred[0][0], pred[0][1], pred[1][1], pred[0][2], pred[1][2]);
    if (type == (o->comm ? 3 : FM_DIST_BALANCED)) FMCall(sim_memory(o, &ch, topo, &part, need, bytes)); /* the partition FMPlanSetUp uses */
    if (type == FM_DIST_BALANCED)
      printf("  balancer: LPT max %.1f tiles, dual_chunk max %.1f, kept the %s start; %d pair and %d three-way moves%s\n",
             (double)info.lpt_max / m->block, (double)info.dual_max / m->block, starts[info.start], info.pair_moves,
             info.triple_moves, info.inexact_pairs ? " (some pair pools too large for the exact search)" : "");
    if (type == 3)
      printf("  comm-aware balancer (hierarchical route): work-only step %.3f ms, %.4f GB across nodes, max %.1f tiles; node-local candidate %s;"
             " kept the %s partition\n", 1e3 * cinfo.step[0], cinfo.inter[0] / 1e9, (double)cinfo.max[0] / m->block,
             cinfo.skipped ? "not built" : "built", cinfo.kept ? "node-local" : "work-only");
    if (type == 3 && !cinfo.skipped)
      printf("  %-10s node-local candidate: step %.3f ms, %.4f GB across nodes (%+.1f%%), max %.1f tiles\n", "", 1e3 * cinfo.step[1],
             cinfo.inter[1] / 1e9, cinfo.inter[0] > 0 ? 100.0 * (cinfo.inter[1] - cinfo.inter[0]) / cinfo.inter[0] : 0.0,
             (double)cinfo.max[1] / m->block);
    FMCall(FMDistPartitionDestroy(&part));
  }
  *elapsed = FMTime() - t0;
  printf("  (work counts (query tile, key block) pairs that are not skipped, in %d x %d tiles, summed over mask heads;\n"
         "   bytes are K+V of the needed remote chunks; the flat and hierarchical rows are the pruned gather routes, the ring row the\n"
         "   unpruned ring baseline of -fm_plan_schedule ring, (P-1) x all K/V; the every-rank simulation took %.2f s)\n", m->block, m->block,
         *elapsed);
  free(w); free(bytes); free(need); free(owner);
  FMCall(FMDistChunkVisDestroy(&vis));
  return FM_SUCCESS;
}

static int cmp_dbl(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }

/* median of column k of n rows of NPH + 1 values */
static double median(double *v, int n, int k, double *tmp)
{
  for (int i = 0; i < n; i++) tmp[i] = v[(size_t)i * (NPH + 1) + k];
  qsort(tmp, (size_t)n, sizeof(double), cmp_dbl);
  return n % 2 ? tmp[n / 2] : 0.5 * (tmp[n / 2 - 1] + tmp[n / 2]);
}

/* One summary line (and CSV row) per path: the median phases over the steps. */
static FMErrorCode report(const Sim *o, const FMDistChunks *ch, const char *path, double *v, int n, double simt, const double *tx)
{
  double med[NPH + 1], *tmp;
  FILE *f = NULL;
  FMCall(FMMalloc(n, &tmp));
  for (int k = 0; k <= NPH; k++) med[k] = median(v, n, k, tmp);
  free(tmp);
  printf("  rank %d set-up (%s, median of %d step%s): total %.3f ms = weights %.3f + balance %.3f + rows %.3f + needed %.3f + route %.3f + steps %.3f; mask set-up %.3f ms\n",
         o->rank, path, n, n > 1 ? "s" : "", 1e3 * med[6], 1e3 * med[0], 1e3 * med[1], 1e3 * med[2], 1e3 * med[3], 1e3 * med[4], 1e3 * med[5],
         1e3 * med[7]);
  if (tx) {
    double a[2], *tmp2;
    FMCall(FMMalloc(n, &tmp2));
    for (int k = 0; k < 2; k++) {
      for (int i = 0; i < n; i++) tmp2[i] = tx[2 * i + k];
      qsort(tmp2, (size_t)n, sizeof(double), cmp_dbl);
      a[k] = n % 2 ? tmp2[n / 2] : 0.5 * (tmp2[n / 2 - 1] + tmp2[n / 2]);
    }
    free(tmp2);
    printf("  an update of a set-up plan recomputes the %.3f ms above and keeps %.3f ms of a full set-up's host work (chunks, K/V bytes, topology);\n"
           "  on the CUDA backend it adds %.3f ms to localize the rank's rows for its stage masks (beside their upload)\n",
           1e3 * med[6], 1e3 * a[0], 1e3 * a[1]);
  }
  if (!o->csv[0]) return FM_SUCCESS;
  f = fopen(o->csv, "a+");
  FMCheck(f != NULL, MPI_COMM_SELF, FM_ERR_FILE, "Cannot open -csv file %s", o->csv);
  fseek(f, 0, SEEK_END);
  if (ftell(f) == 0) {
    fprintf(f, "mask,ranks,nodes,gpus_per_node,seqlen,chunks,chunk,rank,path,steps");
    for (int k = 0; k < NPH; k++) fprintf(f, ",%s_ms", phname[k]);
    fprintf(f, ",mask_setup_ms,sim_s\n");
  }
  fprintf(f, "%s,%d,%d,%d,%d,%d,%d,%d,%s,%d", o->mtype, o->P, o->nodes, o->gpn, o->S, ch->nchunks, ch->chunk, o->rank, path, n);
  for (int k = 0; k <= NPH; k++) fprintf(f, ",%.4f", 1e3 * med[k]);
  fprintf(f, ",%.3f\n", simt);
  fclose(f);
  return FM_SUCCESS;
}

/*
 * -balance_comm 1 over the steps: the distribution (min / median / max) of what the
 * communication-aware balancer changed against the work-only partition of the same mask:
 * bytes across nodes and predicted step of the partition it kept (0 when it kept the
 * work-only one), and of its node-local candidate whether kept or not.
 */
static FMErrorCode report_comm(const FMDistCommInfo *ci, int n)
{
  double *v, q[4][3];
  int kept = 0, skipped = 0;
  FMCall(FMMalloc(4 * (size_t)n, &v));
  for (int s = 0; s < n; s++) {
    const FMDistCommInfo *c = ci + s;
    double di = c->inter[0] > 0 && !c->skipped ? 100.0 * (c->inter[1] - c->inter[0]) / c->inter[0] : 0,
           dt = c->step[0] > 0 && !c->skipped ? 100.0 * (c->step[1] - c->step[0]) / c->step[0] : 0;
    kept += c->kept; skipped += c->skipped;
    v[s] = c->kept ? di : 0; v[n + s] = c->kept ? dt : 0; v[2 * n + s] = di; v[3 * n + s] = dt;
  }
  for (int k = 0; k < 4; k++) {
    double *x = v + (size_t)k * n;
    qsort(x, (size_t)n, sizeof(double), cmp_dbl);
    q[k][0] = x[0]; q[k][1] = n % 2 ? x[n / 2] : 0.5 * (x[n / 2 - 1] + x[n / 2]); q[k][2] = x[n - 1];
  }
  printf("  comm-aware balancer over %d step%s (hierarchical route; min / median / max against the work-only partition): kept the node-local"
         " candidate %d time%s%s\n    kept partition: bytes across nodes %+.1f%% / %+.1f%% / %+.1f%%, predicted step %+.2f%% / %+.2f%% / %+.2f%%\n"
         "    node-local candidate: bytes across nodes %+.1f%% / %+.1f%% / %+.1f%%, predicted step %+.2f%% / %+.2f%% / %+.2f%%\n",
         n, n > 1 ? "s" : "", kept, kept == 1 ? "" : "s", skipped ? " (some steps built no candidate)" : "", q[0][0], q[0][1], q[0][2], q[1][0],
         q[1][1], q[1][2], q[2][0], q[2][1], q[2][2], q[3][0], q[3][1], q[3][2]);
  if (n <= 40)
    for (int s = 0; s < n; s++)
      printf("    step %2d: work-only %.3f ms %.4f GB across; candidate %.3f ms %.4f GB across, max %+.2f%% tiles; %s\n", s, 1e3 * ci[s].step[0],
             ci[s].inter[0] / 1e9, 1e3 * ci[s].step[1], ci[s].inter[1] / 1e9,
             ci[s].max[0] > 0 ? 100.0 * ((double)ci[s].max[1] - (double)ci[s].max[0]) / (double)ci[s].max[0] : 0.0, ci[s].kept ? "kept" : "not kept");
  free(v);
  return FM_SUCCESS;
}

/* The whole run (see the file comment); what it made is freed on every return. */
static FMErrorCode run(void)
{
  Sim o;
  FMContext ctx = NULL;
  FMMask mask = NULL;
  FMDistTopo topo;
  FMDistChunks ch;
  double simt = -1, *vn = NULL, *vr = NULL, *vx = NULL;
  FMDistCommInfo *cis = NULL;
  int n;
  FMErrorCode ierr = FM_SUCCESS;
  memset(&topo, 0, sizeof(topo));
  FMCall(sim_options(&o));
  n = o.steps > 0 ? o.steps : 1;
  FMCallGoto(FMContextCreate(MPI_COMM_SELF, &ctx));
  FMCallGoto(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  FMCallGoto(FMContextSetUp(ctx));
  FMCallGoto(FMDistTopoVirtual(o.P, o.nodes, &topo));
  FMCallGoto(FMCalloc((size_t)n * (NPH + 1), &vn));
  FMCallGoto(FMCalloc((size_t)n * (NPH + 1), &vr));
  FMCallGoto(FMCalloc((size_t)n * 2, &vx));
  FMCallGoto(FMCalloc((size_t)n, &cis));
  for (int s = 0; s < n; s++) {
    FMMaskDesc m;
    double tmask = 0;
    FMCallGoto(make_mask(&o, ctx, s, &mask, &tmask));
    FMCallGoto(FMMaskGetDesc_Private(mask, &m));
    if (s == 0) {
      FMMaskType type;
      /* what is simulated, printed and written to the CSV is the mask the -fm_mask_* options gave */
      FMCallGoto(FMMaskGetType(mask, &type));
      FMCheckGoto(strlen(type) < sizeof(o.mtype), MPI_COMM_SELF, FM_ERR_LIB, "Mask type \"%s\" is longer than %zu characters", type,
                  sizeof(o.mtype) - 1);
      strcpy(o.mtype, type);
      o.S = m.seqlen_q; o.Sk = m.seqlen_k; o.mh = m.mask_heads; o.mb = m.mask_batch; o.block = m.block;
      FMCallGoto(check_mask(&o));
    }
    FMCallGoto(FMDistChunksInit(m.seqlen_q, m.seqlen_k, o.chunk, o.P, m.block, &ch));
    if (s == 0) {
      FMCallGoto(FMMaskComputeDensity_Private(mask));
      printf("fmplan-sim: %d ranks = %d node%s x %d; mask %s, %d x %d, %d mask head%s, mask batch %d, block %d, block sparsity %.4f\n", o.P,
             o.nodes, o.nodes > 1 ? "s" : "", o.gpn, o.mtype, m.seqlen_q, m.seqlen_k, m.mask_heads, m.mask_heads > 1 ? "s" : "", o.mb, m.block,
             mask->sparsity);
      printf("  K/V: batch %d, %d KV heads, head_dim %d, %s; %d chunks of %d rows (key chunks of %d); pruning %s\n", o.batch, o.hkv, o.d,
             FMDTypeName(o.dt), ch.nchunks, ch.chunk, ch.kchunk, o.prune ? "on" : "off");
      if (o.table) FMCallGoto(sim_table(&o, &m, &topo, &simt));
    }
    FMCallGoto(rank_work(&o, &m, &topo, 0, vn + (size_t)s * (NPH + 1), vx + 2 * (size_t)s, cis + s));
    vn[(size_t)s * (NPH + 1) + NPH] = tmask;
    if (o.ref) {
      FMCallGoto(rank_work(&o, &m, &topo, 1, vr + (size_t)s * (NPH + 1), NULL, NULL));
      vr[(size_t)s * (NPH + 1) + NPH] = tmask;
    }
    if (o.steps > 0 && (o.P >= 256 || n >= 50))
      fprintf(stderr, "fmplan-sim: step %d/%d (seed %lu): rank %d set-up %.3f ms%s\n", s + 1, n, o.seed + (unsigned long)s, o.rank,
              1e3 * vn[(size_t)s * (NPH + 1) + NPH - 1], o.ref ? " (and the reference)" : "");
    FMCallGoto(FMMaskDestroy(&mask));
  }
  printf("\n");
  FMCallGoto(report(&o, &ch, o.comm ? "comm" : "fast", vn, n, simt, o.steps > 0 ? vx : NULL)); /* comm: -balance_comm 1, the comm-aware balancer */
  if (o.ref) FMCallGoto(report(&o, &ch, "reference", vr, n, simt, NULL));
  if (o.comm) FMCallGoto(report_comm(cis, n));
cleanup:
  free(vn); free(vr); free(vx); free(cis);
  {
    FMErrorCode e2 = FMMaskDestroy(&mask);
    if (!ierr) ierr = e2;
    e2 = FMDistTopoDestroy(&topo);
    if (!ierr) ierr = e2;
    e2 = FMContextDestroy(&ctx);
    if (!ierr) ierr = e2;
  }
  return ierr;
}

int main(int argc, char **argv)
{
  FMErrorCode ierr = FMInitialize(&argc, &argv, NULL, help); /* -help: the usage text, then each option as it is read */
  if (ierr) return 1;
  ierr = run();
  FMFinalize();
  return ierr ? 1 : 0;
}
