/*
 * test_dist_fast.c - the context-parallel planner's fast paths against their references (the
 * tile map against FMClassifyTileInline, chunk weights against the tile-by-tile count, needed
 * sets from the map against the column scan), with per-sample masks among the random masks;
 * and per-sample masks (issue 11): the chunk weights of a mask of B samples are the sums of its
 * samples' weights and a rank's needed set is the union of the samples' needed sets; the
 * balancer's pair splits on big pools against the reference's; the needs' sparse transpose
 * (what reaches each rank, and its route from it) against the global route.
 * Runs on one rank; no MPI traffic. Usage: test_dist_fast [-iters N]
 */
#define _GNU_SOURCE /* strcasestr in fmtest.h */
#include <limits.h>
#include <flashmask/private/fmdist.h>
#include "fmtest.h"

#include "dist_tmask.h"

/* ---------------- the fast paths against their references ---------------- */
static void test_fast_paths(int iters)
{
  static const double pc[3] = {1.0, 3.0, 0.5}, rc[3] = {0.0, 2.5, 1.0};
  for (int it = 0; it < iters; it++) {
    int Sq = 1 + rnd(400), Sk = rnd(2) ? Sq : 1 + rnd(400), mb = tmask_rnd_batch(), heads = (1 + rnd(3)) * mb, P = 1 + rnd(6), kind = rnd(7),
        block = 16 << rnd(3);
    TMask t;
    FMDistChunks ch;
    FMDistTileMap tm;
    FMDistPartition part;
    int *owner;
    int64_t *w, *wref;
    unsigned char *na, *nr, *n1;
    tmask_make(&t, kind, Sq, Sk, heads, block);
    tmask_batch(&t, mb); /* heads: every (sample, mask head) row */
    FMT_CALL(FMDistChunksInit(Sq, Sk, rnd(2) ? 0 : 1 + rnd(3 * block), P, block, &ch));
    FMT_CALL(FMDistTileMapCreate(&t.d, &ch, &tm));
    /* every tile's class from the runs equals FMClassifyTileInline */
    for (int h = 0; h < heads; h++)
      for (int kb = 0; kb < t.d.nblocks_k; kb++) {
        const int32_t *sh = t.d.summary + (size_t)h * t.d.nblocks_k * FM_SUM_N;
        size_t hb = (size_t)h * t.d.nblocks_k + kb;
        for (int tt = 0; tt < tm.ntiles; tt++) {
          int cls = FM_TILE_SKIP;
          for (int k = tm.roff[hb]; k < tm.roff[hb + 1]; k++)
            if (tm.run[k].lo <= tt && tt < tm.run[k].hi) cls = tm.run[k].cls;
          if (cls != (int)FMClassifyTileInline(sh, t.d.causal, Sq, Sk, block, tm.m0[tt], tm.m1[tt], kb)) {
            FMT_CHECK(0, "kind %d head %d tile %d (rows %d..%d) key block %d: map class %d, FMClassifyTileInline %d", kind, h, tt, tm.m0[tt],
                      tm.m1[tt], kb, cls, (int)FMClassifyTileInline(sh, t.d.causal, Sq, Sk, block, tm.m0[tt], tm.m1[tt], kb));
            tt = tm.ntiles; kb = t.d.nblocks_k; h = heads;
          }
        }
      }
    w = (int64_t *)malloc(sizeof(int64_t) * (size_t)ch.nchunks);
    wref = (int64_t *)malloc(sizeof(int64_t) * (size_t)ch.nchunks);
    for (int k = 0; k < 3; k++) {
      FMT_CALL(FMDistChunkWeights(&t.d, &ch, pc[k], rc[k], w));
      FMT_CALL(FMDistChunkWeightsRef(&t.d, &ch, pc[k], rc[k], wref));
      for (int c = 0; c < ch.nchunks; c++)
        FMT_CHECK(w[c] == wref[c], "kind %d chunk %d (partial %g, row cost %g): weight %lld, reference %lld", kind, c, pc[k], rc[k],
                  (long long)w[c], (long long)wref[c]);
    }
    owner = (int *)malloc(sizeof(int) * (size_t)ch.nchunks);
    for (int c = 0; c < ch.nchunks; c++) owner[c] = rnd(P);
    FMT_CALL(FMDistPartitionFromOwner(ch.nchunks, P, owner, NULL, &part));
    na = (unsigned char *)malloc((size_t)ch.nchunks * P);
    nr = (unsigned char *)malloc((size_t)ch.nchunks * P);
    n1 = (unsigned char *)malloc((size_t)ch.nchunks);
    for (int prune = 0; prune < 2; prune++) {
      FMT_CALL(FMDistNeededAll(&t.d, &ch, &part, prune, na));
      FMT_CALL(FMDistNeededAllRef(&t.d, &ch, &part, prune, nr));
      for (int r = 0; r < P; r++) {
        FMT_CALL(FMDistNeededRank(&t.d, &ch, rnd(2) ? &tm : NULL, &part, r, prune, n1));
        for (int c = 0; c < ch.nchunks; c++) {
          size_t o = (size_t)r * ch.nchunks + c;
          FMT_CHECK(na[o] == nr[o] && n1[c] == nr[o], "kind %d prune %d rank %d chunk %d: NeededAll %d, NeededRank %d, reference %d", kind,
                    prune, r, c, na[o], n1[c], nr[o]);
        }
      }
    }
    FMDistPartitionDestroy(&part);
    FMDistTileMapDestroy(&tm);
    free(owner); free(w); free(wref); free(na); free(nr); free(n1);
    tmask_free(&t);
  }
}

/*
 * Per-sample masks: the chunk weights of a mask of B samples are the sums of the weights of its
 * samples taken one at a time (mask_batch 1 on that sample's rows), and a rank's needed set is the
 * union of the samples' needed sets: one partition and one exchange serve every sample.
 */
static void test_batch_union(int iters)
{
  int differ = 0;
  for (int it = 0; it < iters; it++) {
    int Sq = 1 + rnd(300), Sk = rnd(2) ? Sq : 1 + rnd(300), mb = 2 + rnd(3), mh = 1 + rnd(2), P = 1 + rnd(5), block = 16 << rnd(3);
    TMask t;
    FMDistChunks ch;
    FMDistPartition part;
    int *owner;
    int64_t *w, *ws, *sum;
    unsigned char *na, *ns, *un;
    tmask_make(&t, rnd(7), Sq, Sk, mb * mh, block);
    tmask_batch(&t, mb);
    FMT_CALL(FMDistChunksInit(Sq, Sk, rnd(2) ? 0 : 1 + rnd(2 * block), P, block, &ch));
    w = (int64_t *)malloc(sizeof(int64_t) * (size_t)ch.nchunks);
    ws = (int64_t *)malloc(sizeof(int64_t) * (size_t)ch.nchunks);
    sum = (int64_t *)calloc((size_t)ch.nchunks, sizeof(int64_t));
    owner = (int *)malloc(sizeof(int) * (size_t)ch.nchunks);
    for (int c = 0; c < ch.nchunks; c++) owner[c] = rnd(P);
    FMT_CALL(FMDistPartitionFromOwner(ch.nchunks, P, owner, NULL, &part));
    na = (unsigned char *)malloc((size_t)ch.nchunks * P);
    ns = (unsigned char *)malloc((size_t)ch.nchunks * P);
    un = (unsigned char *)calloc((size_t)ch.nchunks * P, 1);
    FMT_CALL(FMDistChunkWeights(&t.d, &ch, 1.0, 1.0, w));
    FMT_CALL(FMDistNeededAll(&t.d, &ch, &part, 1, na));
    for (int b = 0; b < mb; b++) {
      FMMaskDesc one = t.d; /* sample b alone: its rows of bounds and summaries, mask_batch 1 */
      one.mask_batch = 1;
      for (int v = 0; v < 4; v++) one.bnd[v] = t.d.bnd[v] + (size_t)b * mh * Sk;
      one.summary = t.d.summary + (size_t)b * mh * t.d.nblocks_k * FM_SUM_N;
      FMT_CALL(FMDistChunkWeights(&one, &ch, 1.0, 1.0, ws));
      for (int c = 0; c < ch.nchunks; c++) { differ += b > 0 && ws[c] != sum[c] / b; sum[c] += ws[c]; }
      FMT_CALL(FMDistNeededAll(&one, &ch, &part, 1, ns));
      for (size_t i = 0; i < (size_t)ch.nchunks * P; i++) un[i] |= ns[i];
    }
    for (int c = 0; c < ch.nchunks; c++)
      FMT_CHECK(w[c] == sum[c], "mask_batch %d chunk %d: weight %lld, sum over the samples %lld", mb, c, (long long)w[c], (long long)sum[c]);
    for (size_t i = 0; i < (size_t)ch.nchunks * P; i++)
      FMT_CHECK(na[i] == un[i], "mask_batch %d rank %zu chunk %zu: needed %d, union over the samples %d", mb, i / ch.nchunks, i % ch.nchunks,
                na[i], un[i]);
    FMDistPartitionDestroy(&part);
    free(w); free(ws); free(sum); free(owner); free(na); free(ns); free(un);
    tmask_free(&t);
  }
  FMT_CHECK(differ > 0, "no per-sample instance had samples of different weights: the union test is vacuous");
}

/*
 * The balancer's pair splits on big pools (few ranks, many chunks: pools of 11 to 26 chunks,
 * where the fast balancer merges sorted half sums and the reference sorts them) with repeated
 * weights (many optimal splits: the choice among them must agree), under the same stopping
 * rule: the same decisions as the reference.
 */
static void test_balancer_pools(int iters)
{
  int big = 0;
  for (int it = 0; it < iters; it++) {
    int P = 2 + rnd(3), n = P * (6 + rnd(7)), o1[64], o2[64], style = rnd(3);
    int64_t w[64];
    FMDistBalanceInfo i1, i2;
    for (int c = 0; c < n; c++) w[c] = style == 0 ? 1 + rnd(6) : style == 1 ? (int64_t)(1 + rnd(4)) * 1000003 : rnd(1 << 30);
    FMT_CALL(FMDistBalance(n, w, P, o1, &i1));
    FMT_CALL(FMDistBalanceRef(n, w, P, o2, &i2));
    FMT_CHECK(!i1.budget_out, "n %d P %d: the budget ran out", n, P);
    FMT_CHECK(!memcmp(o1, o2, sizeof(int) * (size_t)n) && i1.max == i2.max && i1.pair_moves == i2.pair_moves && i1.start == i2.start,
              "n %d P %d style %d: balancer (max %lld, %d pair moves, start %d) and reference (max %lld, %d, %d) differ", n, P, style,
              (long long)i1.max, i1.pair_moves, i1.start, (long long)i2.max, i2.pair_moves, i2.start);
    big += n / P * 2 > 10;
  }
  FMT_CHECK(big > 0, "no pool above 10 chunks: the big-pool test is vacuous");
}

/* ---------------- the needs' sparse transpose ---------------- */
/* Every rank's FMDistNeedsSend, delivered as MPI_Alltoallv would (sources ascending), gives each
   rank exactly the needers of its own and relayed chunks (an independent definition below),
   FMDistNeedersFromMatrix gives the same, and the rank's sparse route is the global route
   filtered to the rank, entry for entry. Random topologies with shuffled local indices. */
static void test_needs_transpose(int iters)
{
  for (int it = 0; it < iters; it++) {
    int P = 1 + rnd(14), C = 1 + rnd(40), nn = 1 + rnd(P), *node = (int *)malloc(sizeof(int) * (size_t)P);
    int *local = (int *)malloc(sizeof(int) * (size_t)P), *cnt = (int *)calloc((size_t)P, sizeof(int)), *owner = (int *)malloc(sizeof(int) * (size_t)C);
    int **lists = (int **)malloc(sizeof(int *) * (size_t)P), *counts = (int *)malloc(sizeof(int) * (size_t)P * P), dense = rnd(4);
    unsigned char *need = (unsigned char *)malloc((size_t)P * C);
    double *bytes = (double *)malloc(sizeof(double) * (size_t)C);
    FMDistTopo topo;
    FMDistPartition part;
    for (int r = 0; r < P; r++) node[r] = r < nn ? r : rnd(nn);
    for (int r = 0; r < P; r++) local[r] = cnt[node[r]]++;
    for (int r = 0; r < P; r++) { /* shuffle the local indices inside each node */
      int q = rnd(P);
      if (node[q] == node[r]) { int x = local[q]; local[q] = local[r]; local[r] = x; }
    }
    FMT_CALL(FMDistTopoCreate(P, node, local, &topo));
    for (int c = 0; c < C; c++) { owner[c] = rnd(P); bytes[c] = rnd(6) ? 64 + rnd(500) : 0; }
    for (int i = 0; i < P * C; i++) need[i] = dense ? rnd(3) != 0 : rnd(5) == 0;
    FMT_CALL(FMDistPartitionFromOwner(C, P, owner, NULL, &part));
    for (int type = 0; type < 2; type++) {
      FMDistRoute all;
      FMT_CALL(FMDistRouteBuild((FMDistRouteType)type, &topo, &part, need, bytes, &all));
      for (int s = 0; s < P; s++) {
        int tot;
        FMT_CALL(FMDistNeedsSend((FMDistRouteType)type, &topo, &part, need + (size_t)s * C, s, counts + (size_t)s * P, &lists[s], &tot));
      }
      for (int r = 0; r < P; r++) {
        int *rc = (int *)malloc(sizeof(int) * (size_t)P), *rl = (int *)malloc(sizeof(int) * (size_t)(P * C * 2 + 1)), n = 0, k = 0;
        FMDistNeeders nd, nm;
        FMDistRoute mine;
        for (int s = 0; s < P; s++) {
          int off = 0;
          for (int d = 0; d < r; d++) off += counts[(size_t)s * P + d];
          rc[s] = counts[(size_t)s * P + r];
          for (int i = 0; i < rc[s]; i++) rl[n++] = lists[s][off + i];
        }
        FMT_CALL(FMDistNeedersFromRecv(C, P, rc, rl, &nd));
        FMT_CALL(FMDistNeedersFromMatrix((FMDistRouteType)type, &topo, &part, need, r, &nm));
        for (int c = 0; c < C; c++) {
          int o = owner[c], relay = topo.nranks_of[topo.nfirst[node[r]] + local[o] % topo.nsize[node[r]]], j = nd.start[c];
          for (int s = 0; s < P; s++) {
            int want = s != r && s != o && need[(size_t)s * C + c] &&
                       (o == r || (type == FM_DIST_ROUTE_HIER && node[s] == node[r] && node[o] != node[r] && relay == r));
            if (!want) continue;
            FMT_CHECK(j < nd.start[c + 1] && nd.rank[j] == s, "P %d, %s route: rank %d does not learn that rank %d needs chunk %d (owner %d)", P,
                      FMDistRouteNames[type], r, s, c, o);
            j++;
          }
          FMT_CHECK(j == nd.start[c + 1], "P %d: rank %d learns %d needers of chunk %d, expected %d", P, r, nd.start[c + 1] - nd.start[c], c,
                    j - nd.start[c]);
          FMT_CHECK(nm.start[c + 1] - nm.start[c] == nd.start[c + 1] - nd.start[c] &&
                        !memcmp(nm.rank + nm.start[c], nd.rank + nd.start[c], sizeof(int) * (size_t)(nd.start[c + 1] - nd.start[c])),
                    "P %d: rank %d, chunk %d: FMDistNeedersFromMatrix differs from the transpose", P, r, c);
        }
        FMT_CALL(FMDistRouteBuildRankSparse((FMDistRouteType)type, &topo, &part, need + (size_t)r * C, &nd, bytes, r, &mine));
        for (int i = 0; i < all.n; i++) {
          if (all.x[i].src != r && all.x[i].dst != r) continue;
          FMT_CHECK(k < mine.n && !memcmp(&all.x[i], &mine.x[k], sizeof(all.x[i])), "P %d, %s route: rank %d's sparse route entry %d differs", P,
                    FMDistRouteNames[type], r, k);
          k++;
        }
        FMT_CHECK(k == mine.n, "P %d: rank %d's sparse route has %d entries, the global one %d for it", P, r, mine.n, k);
        FMDistRouteDestroy(&mine);
        FMDistNeedersDestroy(&nd);
        FMDistNeedersDestroy(&nm);
        free(rc); free(rl);
      }
      for (int s = 0; s < P; s++) free(lists[s]);
      FMDistRouteDestroy(&all);
    }
    FMDistTopoDestroy(&topo);
    FMDistPartitionDestroy(&part);
    free(node); free(local); free(cnt); free(owner); free(lists); free(counts); free(need); free(bytes);
  }
}

int main(int argc, char **argv)
{
  int iters = 200;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, NULL));
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "-iters")) iters = atoi(argv[i + 1]);
  seed = fmt_seed();
  test_fast_paths(iters);
  test_batch_union(iters / 2);
  test_balancer_pools(iters);
  test_needs_transpose(iters / 2);
  FMT_CALL(FMFinalize());
  return fmt_finish("test_dist_fast");
}
