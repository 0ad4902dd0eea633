/*
 * test_dist_comm.c - the communication-aware balancer (-fm_plan_balance_comm) and the step cost
 * model it shares with fmplan-sim (src/plan/cp/cost.c, balance_comm.c), on random hand-built
 * masks and virtual topologies (-fm_plan_nodes style: nodes of consecutive ranks):
 *   - the chunk visibility gives every rank's needed set: a superset of the exact one
 *     (FMDistNeededAllRef), equal to it on the document-like masks when key blocks do not
 *     straddle key chunks (causal document only with S_q = S_k: with other lengths its
 *     documents, mapped to rows in proportion, and the bottom-right diagonal leave tiles that
 *     the summaries call partial but that show no key);
 *   - FMDistCommRecv equals the receives of FMDistRouteBuild on those needed sets, both routes (the sweep on nodes of one size, the loop on uneven ones);
 *   - against the work-only balancer (FMDistBalance), scored independently by the exact needed
 *     sets, the routes and FMDistPredict: the predicted step is never longer, the bytes across
 *     nodes never more; the heaviest load stays within the work-only one or the work that the
 *     work-only step pays for; every chunk has one owner;
 *   - the partition is the same on every MPI rank (run on 1-4 ranks) and on a second run;
 *   - the option's setters and getters, and their errors.
 * Usage: test_dist_comm [-iters N]
 */
#define _GNU_SOURCE /* strcasestr in fmtest.h */
#include <flashmask/private/fmdist.h>
#include <math.h>
#include "fmtest.h"

#include "dist_tmask.h"

/* every rank's needed set from the visibility: rank owner[q] needs k when q sees k */
static void vis_needed(const FMDistChunkVis *v, int P, const int *owner, unsigned char *need)
{
  int C = v->nchunks;
  memset(need, 0, (size_t)P * C);
  for (int k = 0; k < C; k++)
    for (int i = v->kofs[k]; i < v->kofs[k + 1]; i++)
      for (int q = v->q[i].lo; q < v->q[i].hi; q++) need[(size_t)owner[q] * C + k] = 1;
}

/* the model's step and the bytes across nodes of owner[], from needed sets, by the route builder */
static void route_score(const FMDistTopo *t, FMDistRouteType rt, const FMDistCostModel *cm, int C, const int64_t *w, const double *cb,
                        const int *owner, const unsigned char *need, double *step, double *inter, double *recv)
{
  FMDistPartition part;
  FMDistRoute route;
  double tp[3];
  FMT_CALL(FMDistPartitionFromOwner(C, t->nranks, owner, w, &part));
  FMT_CALL(FMDistRouteBuild(rt, t, &part, need, cb, &route));
  FMDistRouteRecv(&route, cb, t->nranks, recv);
  FMDistPredict(cm, t->nranks, part.work, recv, tp);
  *step = tp[2];
  *inter = route.bytes[1];
  FMT_CALL(FMDistRouteDestroy(&route));
  FMT_CALL(FMDistPartitionDestroy(&part));
}

static uint64_t owner_hash(int C, const int *owner) { return FMHash_Private(FM_HASH_INIT, owner, sizeof(int) * (size_t)C); }

static void test_balance_comm(int iters, int *kept_total)
{
  for (int it = 0; it < iters; it++) {
    int kind = 1 + rnd(6), block = rnd(2) ? 16 : 32, Sq = block * (8 + rnd(120)), Sk = rnd(4) ? Sq : block * (8 + rnd(120));
    int P = 2 + rnd(31), N = 1 + rnd(P < 8 ? P : 8), heads = 1 + rnd(2), chunk = rnd(2) ? 0 : block * (1 + rnd(4));
    int exact_kind; /* document-like: PARTIAL tiles always show a key (see the file's comment) */
    TMask tmk;
    FMDistChunks ch;
    FMDistTileMap tm;
    FMDistChunkVis vis;
    FMDistTopo topo;
    FMDistCostModel cm;
    FMDistCommInfo info;
    FMDistPartition part;
    int C, *own_w, *own_c, *own_r, *scratch;
    int64_t *w, mx_w = 0, mx_c = 0, cap;
    double *cb, *recv, *recv2, sw, sc, iw, ic;
    unsigned char *nv, *nx;
    FMDistRouteType rt = rnd(3) ? FM_DIST_ROUTE_HIER : FM_DIST_ROUTE_FLAT;
    if (kind == 6) kind = 0; /* random intervals: the visibility may be a strict superset */
    exact_kind = kind == 2 || (kind == 3 && Sq == Sk) || kind == 5;
    {
      int mb = tmask_rnd_batch(); /* a per-sample mask a third of the time: the needed sets are the union */
      tmask_make(&tmk, kind, Sq, Sk, heads * mb, block);
      tmask_batch(&tmk, mb);
    }
    FMT_CALL(FMDistChunksInit(Sq, Sk, chunk, P, block, &ch));
    C = ch.nchunks;
    exact_kind = exact_kind && ch.kchunk % block == 0; /* a key block inside one key chunk: a PARTIAL tile shows a key of it */
    FMT_CALL(FMDistTileMapCreate(&tmk.d, &ch, &tm));
    w = (int64_t *)malloc(sizeof(int64_t) * (size_t)C);
    cb = (double *)malloc(sizeof(double) * (size_t)C);
    own_w = (int *)malloc(sizeof(int) * (size_t)C); own_c = (int *)malloc(sizeof(int) * (size_t)C); own_r = (int *)malloc(sizeof(int) * (size_t)C);
    recv = (double *)malloc(sizeof(double) * 2 * (size_t)P); recv2 = (double *)malloc(sizeof(double) * 2 * (size_t)P);
    scratch = (int *)malloc(sizeof(int) * (size_t)(2 * P));
    nv = (unsigned char *)malloc((size_t)P * C); nx = (unsigned char *)malloc((size_t)P * C);
    FMT_CALL(FMDistChunkWeightsMap(&tm, 1.0, 0.0, w));
    for (int c = 0; c < C; c++) cb[c] = FMDistChunkBytes(&ch, c, 1, 2, 64, 2);
    FMT_CALL(FMDistChunkVisCreate(&tm, &ch, &vis));
    FMT_CALL(FMDistTopoVirtual(P, N, &topo));
    /* a fast or a slow network, so that some steps are the compute's and some the exchange's */
    FMDistCostModelInit(&cm, block, 64, 4, 1, FMDistMaskRows(&tmk.d), 1e-6 * (1 + rnd(100)), 1 + rnd(50), 0.05 + rnd(10));
    /* the visibility's needed sets against the exact ones, on a random assignment */
    for (int c = 0; c < C; c++) own_r[c] = rnd(P);
    FMT_CALL(FMDistPartitionFromOwner(C, P, own_r, w, &part));
    FMT_CALL(FMDistNeededAllRef(&tmk.d, &ch, &part, 1, nx));
    FMT_CALL(FMDistPartitionDestroy(&part));
    vis_needed(&vis, P, own_r, nv);
    for (size_t i = 0; i < (size_t)P * C; i++) {
      FMT_CHECK(nv[i] >= nx[i], "it %d kind %d: rank %d needs chunk %d but the visibility misses it", it, kind, (int)(i / C), (int)(i % C));
      if (exact_kind) FMT_CHECK(nv[i] == nx[i], "it %d kind %d Sq %d Sk %d block %d chunk %d rows %d: rank %d chunk %d visibility %d exact %d", it, kind, Sq, Sk, block, ch.chunk, FMDistMaskRows(&tmk.d), (int)(i / C), (int)(i % C), nv[i], nx[i]);
    }
    /* FMDistCommRecv = the route builder's receives on the visibility's needed sets */
    for (int r2 = 0; r2 < 2; r2++) {
      FMDistRouteType t2 = (FMDistRouteType)r2;
      FMDistRoute route;
      FMT_CALL(FMDistPartitionFromOwner(C, P, own_r, w, &part));
      FMT_CALL(FMDistRouteBuild(t2, &topo, &part, nv, cb, &route));
      FMDistRouteRecv(&route, cb, P, recv);
      FMDistCommRecv(&vis, &topo, t2, own_r, cb, scratch, recv2);
      for (int i = 0; i < 2 * P; i++)
        FMT_CHECK(recv[i] == recv2[i], "it %d route %d: rank %d level %d receives %g by the route, %g by FMDistCommRecv", it, r2, i % P, i / P,
                  recv[i], recv2[i]);
      FMT_CALL(FMDistRouteDestroy(&route));
      FMT_CALL(FMDistPartitionDestroy(&part));
    }
    /* the comm-aware balancer against the work-only one */
    FMT_CALL(FMDistBalance(C, w, P, own_w, NULL));
    FMT_CALL(FMDistBalanceComm(&vis, C, w, cb, &topo, rt, 1, &cm, own_c, &info));
    FMT_CALL(FMDistBalanceComm(&vis, C, w, cb, &topo, rt, 1, &cm, own_r, NULL));
    FMT_CHECK(!memcmp(own_c, own_r, sizeof(int) * (size_t)C), "it %d: a second run gives another partition", it);
    for (int c = 0; c < C; c++) FMT_CHECK(own_c[c] >= 0 && own_c[c] < P, "it %d: chunk %d owner %d", it, c, own_c[c]);
    if (!info.kept) FMT_CHECK(!memcmp(own_c, own_w, sizeof(int) * (size_t)C), "it %d: not kept, yet not the work-only partition", it);
    *kept_total += info.kept;
    /* scored independently: needed sets by the exact scan (document-like) or the visibility */
    for (int pass = 0; pass < 2; pass++) {
      const int *o = pass ? own_c : own_w;
      FMDistPartition pp;
      FMT_CALL(FMDistPartitionFromOwner(C, P, o, w, &pp));
      if (exact_kind) FMT_CALL(FMDistNeededAllRef(&tmk.d, &ch, &pp, 1, nx));
      else vis_needed(&vis, P, o, nx);
      for (int r = 0; r < P; r++) {
        int64_t *mx = pass ? &mx_c : &mx_w;
        if (pp.work[r] > *mx) *mx = pp.work[r];
      }
      FMT_CALL(FMDistPartitionDestroy(&pp));
      if (pass) route_score(&topo, rt, &cm, C, w, cb, o, nx, &sc, &ic, recv);
      else route_score(&topo, rt, &cm, C, w, cb, o, nx, &sw, &iw, recv);
    }
    FMT_CHECK(sc <= sw * (1 + 1e-12), "it %d kind %d P %d N %d: comm-aware step %.9g > work-only %.9g", it, kind, P, N, sc, sw);
    FMT_CHECK(ic <= iw, "it %d kind %d P %d N %d: comm-aware moves %g bytes across nodes > work-only %g", it, kind, P, N, ic, iw);
    FMT_CHECK(info.step[0] == sw || fabs(info.step[0] - sw) <= 1e-12 * sw, "it %d: the balancer's work-only step %.12g, the routes' %.12g", it,
              info.step[0], sw);
    cap = mx_w;
    if (sw / cm.unit_s > (double)cap) cap = (int64_t)(sw / cm.unit_s);
    FMT_CHECK(mx_c <= cap, "it %d: comm-aware heaviest load %lld > %lld (work-only %lld)", it, (long long)mx_c, (long long)cap, (long long)mx_w);
    {
      /* the same partition on every MPI rank */
      uint64_t h = owner_hash(C, own_c), hmin, hmax;
      MPI_Allreduce(&h, &hmin, 1, MPI_UINT64_T, MPI_MIN, MPI_COMM_WORLD);
      MPI_Allreduce(&h, &hmax, 1, MPI_UINT64_T, MPI_MAX, MPI_COMM_WORLD);
      FMT_CHECK(hmin == hmax, "it %d: the comm-aware partition differs between MPI ranks", it);
    }
    /* FMDistPartitionPlan: the set-up's hook gives the same partition */
    FMT_CALL(FMDistPartitionPlan(FM_DIST_BALANCED, 1, &tm, &ch, w, cb, &topo, rt, 1, &cm, &part, NULL, NULL));
    FMT_CHECK(!memcmp(part.owner, own_c, sizeof(int) * (size_t)C), "it %d: FMDistPartitionPlan differs from FMDistBalanceComm", it);
    FMT_CALL(FMDistPartitionDestroy(&part));
    FMT_CALL(FMDistPartitionPlan(FM_DIST_BALANCED, 0, &tm, &ch, w, cb, &topo, rt, 1, &cm, &part, NULL, NULL));
    FMT_CHECK(!memcmp(part.owner, own_w, sizeof(int) * (size_t)C), "it %d: FMDistPartitionPlan without comm differs from FMDistBalance", it);
    FMT_CALL(FMDistPartitionDestroy(&part));
    free(w); free(cb); free(own_w); free(own_c); free(own_r); free(recv); free(recv2); free(scratch); free(nv); free(nx);
    FMT_CALL(FMDistChunkVisDestroy(&vis));
    FMT_CALL(FMDistTopoDestroy(&topo));
    FMT_CALL(FMDistTileMapDestroy(&tm));
    tmask_free(&tmk);
  }
}

/* the setters, getters and option of the cp plan */
static void test_options(void)
{
  FMContext ctx;
  FMPlan plan;
  FMBool on = FM_TRUE;
  double tf = 0, bi = 0, bx = 0;
  FMT_CALL(FMContextCreate(MPI_COMM_SELF, &ctx));
  FMT_CALL(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  FMT_CALL(FMContextSetUp(ctx));
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetType(plan, FMPLANCP));
  FMT_CALL(FMPlanGetBalanceComm(plan, &on));
  FMT_CHECK(on == FM_FALSE, "balance_comm is on by default");
  FMT_CALL(FMPlanGetCostModel(plan, &tf, &bi, &bx));
  FMT_CHECK(tf == 500 && bi == 450 && bx == 50, "default cost model %g %g %g; expected 500 450 50", tf, bi, bx);
  FMT_CALL(FMPlanSetBalanceComm(plan, FM_TRUE));
  FMT_CALL(FMPlanSetCostModel(plan, 800, 900, 25));
  FMT_CALL(FMPlanGetBalanceComm(plan, &on));
  FMT_CALL(FMPlanGetCostModel(plan, &tf, NULL, &bx));
  FMT_CHECK(on == FM_TRUE && tf == 800 && bx == 25, "set: balance_comm %d tflops %g bw_inter %g", (int)on, tf, bx);
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  FMT_EXPECT_ERR(FMPlanSetCostModel(plan, 800, -1, 25), FM_ERR_ARG_OUTOFRANGE, "bw_intra -1");
  FMT_EXPECT_ERR(FMPlanSetBalanceComm(plan, (FMBool)7), FM_ERR_ARG_OUTOFRANGE, "is 7");
  FMT_CALL(FMPopErrorHandler());
  FMT_CALL(FMPlanGetCostModel(plan, NULL, &bi, NULL));
  FMT_CHECK(bi == 900, "a failed FMPlanSetCostModel changed bw_intra to %g", bi);
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMContextDestroy(&ctx));
}

int main(int argc, char **argv)
{
  int iters = 120, kept = 0, rank;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, NULL));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "-iters")) iters = atoi(argv[i + 1]);
  seed = rank == 0 ? fmt_seed() : 0;
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD); /* every rank draws the same instances */
  test_balance_comm(iters, &kept);
  if (rank == 0) printf("comm-aware partition kept in %d of %d instances\n", kept, iters);
  FMT_CHECK(kept > 0, "the comm-aware candidate never won in %d instances", iters);
  test_options();
  FMT_CALL(FMFinalize());
  return fmt_finish("test_dist_comm");
}
