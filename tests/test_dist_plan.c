/*
 * test_dist_plan.c - unit and property tests of the context-parallel planner's pure
 * algorithms (src/plan/cp): chunking, the balancer against a brute-force optimum and
 * against dual-chunk, localization against the dense mask, the needed set against a dense
 * scan, and the routes (each needed chunk delivered exactly once; on multi-node virtual
 * topologies a remote chunk crosses into a node once). The fast paths against their references
 * and per-sample masks are in test_dist_fast.c.
 * Runs on one rank; no MPI traffic. Usage: test_dist_plan [-iters N]
 */
#define _GNU_SOURCE /* strcasestr in fmtest.h */
#include <limits.h>
#include <flashmask/private/fmdist.h>
#include "fmtest.h"

#include "dist_tmask.h"

/* ---------------- chunks ---------------- */
static void test_chunks(int iters)
{
  for (int it = 0; it < iters; it++) {
    int Sq = 1 + rnd(700), Sk = rnd(3) ? Sq : 1 + rnd(700), P = 1 + rnd(9), chunk = rnd(2) ? 0 : 1 + rnd(200);
    FMDistChunks ch;
    FMDistPartition part;
    int *seenq = (int *)calloc((size_t)Sq, sizeof(int)), *seenk = (int *)calloc((size_t)Sk, sizeof(int));
    FMT_CALL(FMDistChunksInit(Sq, Sk, chunk, P, 128, &ch));
    FMT_CHECK(ch.nchunks >= 1 && (long)(ch.nchunks - 1) * ch.chunk < Sq && (long)ch.nchunks * ch.chunk >= Sq,
              "chunks: Sq %d chunk %d nchunks %d", Sq, ch.chunk, ch.nchunks);
    if (Sq == Sk) FMT_CHECK(ch.kchunk == ch.chunk, "kchunk %d != chunk %d with Sq == Sk", ch.kchunk, ch.chunk);
    for (int type = 0; type < 3; type++) {
      int64_t *w = (int64_t *)malloc(sizeof(int64_t) * (size_t)ch.nchunks);
      for (int c = 0; c < ch.nchunks; c++) w[c] = rnd(1000);
      FMT_CALL(FMDistPartitionCreate((FMDistPartType)type, ch.nchunks, P, w, &part, NULL));
      memset(seenq, 0, sizeof(int) * (size_t)Sq);
      memset(seenk, 0, sizeof(int) * (size_t)Sk);
      for (int r = 0; r < P; r++) {
        int n, *rows, nk, *keys;
        FMT_CALL(FMDistRankRows(&ch, &part, r, &n, &rows));
        FMT_CALL(FMDistRankKeys(&ch, &part, r, &nk, &keys));
        for (int i = 0; i < n; i++) {
          seenq[rows[i]]++;
          if (i) FMT_CHECK(rows[i] > rows[i - 1], "rank %d rows not ascending at %d", r, i);
        }
        for (int i = 0; i < nk; i++) seenk[keys[i]]++;
        free(rows); free(keys);
      }
      for (int i = 0; i < Sq; i++) FMT_CHECK(seenq[i] == 1, "type %d: row %d owned %d times (Sq %d P %d chunk %d)", type, i, seenq[i], Sq, P, ch.chunk);
      for (int j = 0; j < Sk; j++) FMT_CHECK(seenk[j] == 1, "type %d: key %d owned %d times (Sk %d)", type, j, seenk[j], Sk);
      if (type == FM_DIST_DUAL_CHUNK && ch.nchunks == 2 * P)
        for (int r = 0; r < P; r++)
          FMT_CHECK(part.owner[r] == r && part.owner[2 * P - 1 - r] == r, "dual_chunk: rank %d does not own %d and %d", r, r, 2 * P - 1 - r);
      FMT_CALL(FMDistPartitionDestroy(&part));
      free(w);
    }
    free(seenq); free(seenk);
  }
}

/* ---------------- balancer ---------------- */
/*
 * The balancer's stopping rule (balance.c): the improvement stops once the heaviest load is at
 * or below LB + LB / 1024, LB = max(ceil(total / P), heaviest chunk), a lower bound of the
 * optimum. Below that point it promises no pairwise optimality, only a max within 1/1024 of
 * the optimum (and the optimum itself when LB < 1024, as for small integer weights).
 */
static int64_t bal_stop(int n, const int64_t *w, int P)
{
  int64_t lb = 0;
  for (int i = 0; i < n; i++) lb += w[i];
  lb = (lb + P - 1) / P;
  for (int i = 0; i < n; i++) if (w[i] > lb) lb = w[i];
  return lb + lb / 1024;
}

static int64_t brute_opt(int n, const int64_t *w, int P)
{
  int64_t best = -1, load[8];
  long total = 1;
  for (int i = 1; i < n; i++) total *= P; /* item 0 on rank 0 by symmetry */
  for (long code = 0; code < total; code++) {
    long c = code;
    int64_t mx = 0;
    for (int r = 0; r < P; r++) load[r] = 0;
    load[0] = w[0];
    for (int i = 1; i < n; i++) { load[c % P] += w[i]; c /= P; }
    for (int r = 0; r < P; r++) if (load[r] > mx) mx = load[r];
    if (best < 0 || mx < best) best = mx;
  }
  return best;
}

static void test_balancer(int iters)
{
  int nopt = 0, ntot = 0, nstop = 0;
  double worst = 1.0;
  for (int it = 0; it < iters; it++) {
    int P = 1 + rnd(4), n = 1 + rnd(P == 4 ? 9 : 11), owner[16], owner2[16];
    int64_t w[16], load[8] = {0}, opt, mx = 0, tot = 0, stop;
    FMDistBalanceInfo info;
    int style = rnd(3);
    for (int i = 0; i < n; i++) w[i] = style == 0 ? rnd(100) : style == 1 ? 1 + rnd(10) : (int64_t)rnd(1000000) * 1000;
    FMT_CALL(FMDistBalance(n, w, P, owner, &info));
    FMT_CALL(FMDistBalance(n, w, P, owner2, NULL));
    FMT_CHECK(!memcmp(owner, owner2, sizeof(int) * (size_t)n), "balancer is not deterministic (n %d P %d)", n, P);
    FMT_CALL(FMDistBalanceRef(n, w, P, owner2, NULL));
    FMT_CHECK(!memcmp(owner, owner2, sizeof(int) * (size_t)n), "balancer and its reference differ (n %d P %d)", n, P);
    for (int i = 0; i < n; i++) {
      FMT_CHECK(owner[i] >= 0 && owner[i] < P, "owner[%d] = %d", i, owner[i]);
      load[owner[i]] += w[i];
      tot += w[i];
    }
    for (int r = 0; r < P; r++) if (load[r] > mx) mx = load[r];
    FMT_CHECK(mx == info.max && tot == info.total, "info: max %lld vs %lld, total %lld vs %lld", (long long)info.max, (long long)mx,
              (long long)info.total, (long long)tot);
    FMT_CHECK(mx <= info.dual_max, "balanced max %lld worse than dual_chunk %lld", (long long)mx, (long long)info.dual_max);
    opt = brute_opt(n, w, P);
    ntot++;
    if (mx == opt) nopt++;
    if (opt > 0 && (double)mx / opt > worst) worst = (double)mx / opt;
    /* at or below the stop: within 1/1024 of the optimum, nothing more is promised (nstop counts these) */
    stop = bal_stop(n, w, P);
    if (mx <= stop && mx != opt) nstop++;
    FMT_CHECK(mx <= stop || mx == opt || P > 3, "P = %d, n = %d: balancer max %lld, optimum %lld, stop %lld (exact for P <= 3 above the stop)", P, n,
              (long long)mx, (long long)opt, (long long)stop);
    FMT_CHECK(1024 * (mx - opt) <= opt || mx > stop, "P = %d, n = %d: balancer stopped at max %lld, more than 1/1024 above the optimum %lld", P,
              n, (long long)mx, (long long)opt);
    if (P > 3)
      FMT_CHECK(3.0 * P * mx <= (4.0 * P - 1.0) * opt, "P = %d, n = %d: balancer max %lld above the LPT bound of optimum %lld", P, n,
                (long long)mx, (long long)opt);
    /* above the stop, pairwise optimality of the heaviest rank: no exact two-way split improves it */
    if (P >= 2 && mx > stop) {
      int a = 0;
      for (int r = 1; r < P; r++) if (load[r] > load[a]) a = r;
      for (int b = 0; b < P; b++) {
        int64_t x[16], bp;
        int np = 0;
        if (b == a) continue;
        for (int i = 0; i < n; i++) if (owner[i] == a || owner[i] == b) x[np++] = w[i];
        bp = np ? brute_opt(np, x, 2) : 0;
        FMT_CHECK(bp >= load[a], "pair (%d, %d) could be improved from %lld to %lld", a, b, (long long)load[a], (long long)bp);
      }
    }
  }
  printf("balancer: optimal on %d of %d random instances (%d stopped within 1/1024 above it); worst ratio to optimum %.4f\n", nopt, ntot,
         nstop, worst);
}

/* never worse than dual_chunk on causal masks, and weights against a dense tile count */
static void test_weights_causal(void)
{
  int Ss[] = {256, 300, 1000, 1024, 2048, 4096, 3001};
  for (size_t si = 0; si < sizeof(Ss) / sizeof(Ss[0]); si++)
    for (int P = 1; P <= 8; P++)
      for (int chunk = 0; chunk <= 128; chunk += 64) {
        TMask t;
        FMDistChunks ch;
        FMDistPartition bal, dual;
        int64_t *w, mb, md;
        int S = Ss[si];
        tmask_make(&t, 1, S, S, 1, 64);
        FMT_CALL(FMDistChunksInit(S, S, chunk, P, 64, &ch));
        w = (int64_t *)malloc(sizeof(int64_t) * (size_t)ch.nchunks);
        FMT_CALL(FMDistChunkWeights(&t.d, &ch, 1.0, 0.0, w));
        if (S % 64 == 0 && ch.chunk % 64 == 0)
          for (int c = 0; c < ch.nchunks; c++) {
            int64_t e = 0;
            for (int t0 = c * ch.chunk; t0 < (c + 1) * ch.chunk && t0 < S; t0 += 64) e += (int64_t)(t0 / 64 + 1) * 64;
            FMT_CHECK(w[c] == e, "causal S %d chunk %d: weight of chunk %d is %lld, expected %lld", S, ch.chunk, c, (long long)w[c],
                      (long long)e);
          }
        FMT_CALL(FMDistPartitionCreate(FM_DIST_BALANCED, ch.nchunks, P, w, &bal, NULL));
        FMT_CALL(FMDistPartitionCreate(FM_DIST_DUAL_CHUNK, ch.nchunks, P, w, &dual, NULL));
        FMDistPartitionImbalance(&bal, &mb, NULL, NULL);
        FMDistPartitionImbalance(&dual, &md, NULL, NULL);
        FMT_CHECK(mb <= md, "causal S %d P %d chunk %d: balanced max %lld > dual_chunk %lld", S, P, ch.chunk, (long long)mb, (long long)md);
        FMDistPartitionDestroy(&bal);
        FMDistPartitionDestroy(&dual);
        free(w);
        tmask_free(&t);
      }
}

/* weights: never below the dense count of tiles with a visible entry, never above all tiles */
static void test_weights_dense(int iters)
{
  for (int it = 0; it < iters; it++) {
    int Sq = 20 + rnd(300), Sk = rnd(2) ? Sq : 20 + rnd(300), mb = tmask_rnd_batch(), heads = (1 + rnd(2)) * mb, block = 16 << rnd(3), P = 1 + rnd(4);
    TMask t;
    FMDistChunks ch;
    int64_t *w;
    tmask_make(&t, rnd(7), Sq, Sk, heads, block);
    tmask_batch(&t, mb); /* heads: every (sample, mask head) row */
    FMT_CALL(FMDistChunksInit(Sq, Sk, 0, P, block, &ch));
    w = (int64_t *)malloc(sizeof(int64_t) * (size_t)ch.nchunks);
    FMT_CALL(FMDistChunkWeights(&t.d, &ch, 1.0, 0.0, w));
    for (int c = 0; c < ch.nchunks; c++) {
      int r0, r1;
      int64_t lo = 0, hi = 0;
      FMDistChunkRows(&ch, c, &r0, &r1);
      for (int h = 0; h < heads; h++)
        for (int t0 = r0; t0 < r1; t0 += block) {
          int t1 = t0 + block < r1 ? t0 + block : r1;
          for (int kb = 0; kb < t.d.nblocks_k; kb++) {
            int vis = 0;
            for (int i = t0; i < t1 && !vis; i++)
              for (int j = kb * block; j < (kb + 1) * block && j < Sk && !vis; j++) vis = !tmasked(&t.d, h, i, j);
            if (vis) lo += t1 - t0;
            hi += t1 - t0;
          }
        }
      FMT_CHECK(w[c] >= lo && w[c] <= hi, "weight of chunk %d is %lld; expected in [%lld, %lld]", c, (long long)w[c], (long long)lo,
                (long long)hi);
    }
    {
      /* the cost terms: a partial tile weighs 3 (so w3 - w1 = 2 x partial tile rows and w1 - partial
         rows = full tile rows, both >= 0), and a query tile's fixed cost of 5 adds 5 x rows x heads */
      int64_t *w3 = (int64_t *)malloc(sizeof(int64_t) * (size_t)ch.nchunks), *wr = (int64_t *)malloc(sizeof(int64_t) * (size_t)ch.nchunks);
      FMT_CALL(FMDistChunkWeights(&t.d, &ch, 3.0, 0.0, w3));
      FMT_CALL(FMDistChunkWeights(&t.d, &ch, 1.0, 5.0, wr));
      for (int c = 0; c < ch.nchunks; c++) {
        int r0, r1;
        int64_t part = w3[c] - w[c];
        FMDistChunkRows(&ch, c, &r0, &r1);
        FMT_CHECK(part >= 0 && part % 2 == 0 && part / 2 <= w[c], "partial cost 3: chunk %d weighs %lld, %lld at cost 1", c, (long long)w3[c],
                  (long long)w[c]);
        FMT_CHECK(wr[c] - w[c] == 5 * (int64_t)(r1 - r0) * heads, "row cost 5: chunk %d of %d rows x %d heads weighs %lld, %lld without", c,
                  r1 - r0, heads, (long long)wr[c], (long long)w[c]);
      }
      free(w3);
      free(wr);
    }
    free(w);
    tmask_free(&t);
  }
}

/* ---------------- localization and needed set ---------------- */
static void test_localize_needed(int iters)
{
  int pruned_some = 0;
  for (int it = 0; it < iters; it++) {
    int Sq = 1 + rnd(260), Sk = rnd(2) ? Sq : 1 + rnd(260), mb = tmask_rnd_batch(), heads = (1 + rnd(3)) * mb, P = 1 + rnd(5), kind = rnd(7);
    TMask t;
    FMDistChunks ch;
    FMDistPartition part;
    int *owner;
    unsigned char *need, *needall;
    tmask_make(&t, kind, Sq, Sk, heads, 16 << rnd(3));
    tmask_batch(&t, mb); /* heads: every (sample, mask head) row; the needed set is their union */
    FMT_CALL(FMDistChunksInit(Sq, Sk, rnd(2) ? 0 : 1 + rnd(60), P, t.d.block, &ch));
    owner = (int *)malloc(sizeof(int) * (size_t)ch.nchunks);
    {
      /* the balancer's fast rounds make the reference's decisions (bigger instances than test_balancer's) */
      int Pb = 1 + rnd(24), nb = 1 + rnd(3 * Pb + 3), *o1 = (int *)malloc(sizeof(int) * (size_t)nb), *o2 = (int *)malloc(sizeof(int) * (size_t)nb);
      int64_t *wb = (int64_t *)malloc(sizeof(int64_t) * (size_t)nb);
      FMDistBalanceInfo i1, i2;
      for (int c = 0; c < nb; c++) wb[c] = rnd(4) ? rnd(1000) : 0;
      FMT_CALL(FMDistBalance(nb, wb, Pb, o1, &i1));
      FMT_CALL(FMDistBalanceRef(nb, wb, Pb, o2, &i2));
      /* Within its work budget the fast balancer makes exactly the reference's decisions. When the
         budget runs out (rare at these sizes; it stops improving there, on every rank alike), the
         decisions may differ: then only the quality is required, within 4/3 of the reference. */
      if (!i1.budget_out)
        FMT_CHECK(!memcmp(o1, o2, sizeof(int) * (size_t)nb) && i1.max == i2.max && i1.pair_moves == i2.pair_moves &&
                      i1.triple_moves == i2.triple_moves && i1.inexact_pairs == i2.inexact_pairs,
                  "n %d P %d: balancer (max %lld, %d pair moves) and reference (max %lld, %d) differ", nb, Pb, (long long)i1.max, i1.pair_moves,
                  (long long)i2.max, i2.pair_moves);
      else
        FMT_CHECK(3 * i1.max <= 4 * i2.max, "n %d P %d: the balancer ran out of budget at max %lld, more than 4/3 of the reference's %lld", nb,
                  Pb, (long long)i1.max, (long long)i2.max);
      free(o1); free(o2); free(wb);
    }
    for (int c = 0; c < ch.nchunks; c++) owner[c] = rnd(P); /* any assignment */
    FMT_CALL(FMDistPartitionFromOwner(ch.nchunks, P, owner, NULL, &part));
    need = (unsigned char *)malloc((size_t)ch.nchunks);
    needall = (unsigned char *)malloc((size_t)ch.nchunks * P);
    FMT_CALL(FMDistNeededAll(&t.d, &ch, &part, 1, needall));
    for (int r = 0; r < P; r++) {
      FMDistLocalMask lm;
      int n, *rows, nown = part.rstart[r + 1] - part.rstart[r];
      const int *own = part.rchunks + part.rstart[r];
      FMT_CALL(FMDistRankRows(&ch, &part, r, &n, &rows));
      FMT_CALL(FMDistLocalize(&t.d, &ch, nown, own, &lm));
      FMT_CHECK(lm.nlocal == n, "nlocal %d vs %d rows", lm.nlocal, n);
      /* the clip/shift rule against the table */
      for (int q = 0; q < 20; q++) {
        int x = rnd(Sq + 1), cnt = 0;
        for (int i = 0; i < n; i++) cnt += rows[i] < x;
        FMT_CHECK(FMDistLocalizeBound(&ch, nown, own, x) == cnt, "localize(%d) = %d, expected %d", x,
                  FMDistLocalizeBound(&ch, nown, own, x), cnt);
      }
      /* dense property: local mask == global mask on the local rows */
      for (int h = 0; h < heads; h++)
        for (int li = 0; li < n; li++)
          for (int j = 0; j < Sk; j++)
            if (FMDistLocalMasked(&lm, h, li, j) != tmasked(&t.d, h, rows[li], j)) {
              FMT_CHECK(0, "kind %d rank %d head %d: local row %d (global %d), key %d: localized %d, dense %d", kind, r, h, li, rows[li], j,
                        FMDistLocalMasked(&lm, h, li, j), tmasked(&t.d, h, rows[li], j));
              li = n; j = Sk; h = heads;
            }
      /* needed set against a dense scan */
      FMT_CALL(FMDistNeeded(&lm, &ch, 1, need));
      for (int c = 0; c < ch.nchunks; c++) {
        int k0, k1, vis = 0;
        FMDistChunkKeys(&ch, c, &k0, &k1);
        for (int h = 0; h < heads && !vis; h++)
          for (int li = 0; li < n && !vis; li++)
            for (int j = k0; j < k1 && !vis; j++) vis = !tmasked(&t.d, h, rows[li], j);
        FMT_CHECK(need[c] == vis, "kind %d rank %d chunk %d: needed %d, dense scan %d", kind, r, c, need[c], vis);
        FMT_CHECK(needall[(size_t)r * ch.nchunks + c] == need[c], "NeededAll differs at rank %d chunk %d", r, c);
        if (!vis && n > 0 && k1 > k0) pruned_some = 1;
      }
      FMT_CALL(FMDistNeeded(&lm, &ch, 0, need));
      for (int c = 0; c < ch.nchunks; c++) {
        int k0, k1;
        FMDistChunkKeys(&ch, c, &k0, &k1);
        FMT_CHECK(need[c] == (n > 0 && k1 > k0), "unpruned needed[%d] = %d", c, need[c]);
      }
      FMDistLocalMaskDestroy(&lm);
      free(rows);
    }
    FMDistPartitionDestroy(&part);
    free(owner); free(need); free(needall);
    tmask_free(&t);
  }
  FMT_CHECK(pruned_some, "no random instance pruned any chunk: the needed-set test is vacuous");
}

/* ---------------- routes ---------------- */
static void check_route(FMDistRouteType type, const FMDistTopo *topo, const FMDistPartition *part, const unsigned char *need,
                        const double *bytes)
{
  FMDistRoute rt;
  int P = part->nranks, C = part->nchunks;
  int *got = (int *)calloc((size_t)P * C, sizeof(int)), *into = (int *)calloc((size_t)topo->nnodes * C, sizeof(int));
  double b[2] = {0, 0}, nb = 0;
  FMT_CALL(FMDistRouteBuild(type, topo, part, need, bytes, &rt));
  for (int k = 0; k < rt.n; k++) {
    const FMDistXfer *x = &rt.x[k];
    int c = x->chunk;
    FMT_CHECK(x->src != x->dst, "transfer to itself");
    FMT_CHECK(x->level == (topo->node[x->src] != topo->node[x->dst]), "transfer %d: level %d wrong", k, x->level);
    if (x->stage == 0) FMT_CHECK(x->src == part->owner[c], "stage-0 transfer of chunk %d from non-owner %d", c, x->src);
    else {
      /* the source received the chunk earlier in the list (stage 0) */
      int held = 0;
      for (int q = 0; q < k; q++) held |= rt.x[q].chunk == c && rt.x[q].dst == x->src && rt.x[q].stage == 0;
      FMT_CHECK(type == FM_DIST_ROUTE_HIER && held, "stage-1 transfer of chunk %d from %d which does not hold it", c, x->src);
    }
    got[(size_t)x->dst * C + c]++;
    if (x->level) into[(size_t)topo->node[x->dst] * C + c]++;
    b[x->level] += bytes[c];
  }
  for (int r = 0; r < P; r++)
    for (int c = 0; c < C; c++) {
      int want = need[(size_t)r * C + c] && part->owner[c] != r && bytes[c] > 0, g = got[(size_t)r * C + c];
      if (want) { FMT_CHECK(g == 1, "%s: rank %d gets needed chunk %d %d times", FMDistRouteNames[type], r, c, g); nb += bytes[c]; }
      else FMT_CHECK(g <= 1 && (g == 0 || type == FM_DIST_ROUTE_HIER), "%s: rank %d gets unneeded chunk %d %d times", FMDistRouteNames[type], r, c, g);
    }
  for (int n = 0; n < topo->nnodes; n++)
    for (int c = 0; c < C; c++) {
      int need_here = 0, o = part->owner[c];
      for (int r = 0; r < P; r++) need_here += topo->node[r] == n && need[(size_t)r * C + c] && bytes[c] > 0;
      if (type == FM_DIST_ROUTE_HIER && n != topo->node[o])
        FMT_CHECK(into[(size_t)n * C + c] == (need_here > 0), "hierarchical: chunk %d enters node %d %d times (%d ranks need it)", c, n,
                  into[(size_t)n * C + c], need_here);
      if (type == FM_DIST_ROUTE_FLAT && n != topo->node[o])
        FMT_CHECK(into[(size_t)n * C + c] == need_here, "flat: chunk %d enters node %d %d times, %d ranks need it", c, n,
                  into[(size_t)n * C + c], need_here);
    }
  FMT_CHECK(fabs(b[0] - rt.bytes[0]) < 1e-6 && fabs(b[1] - rt.bytes[1]) < 1e-6, "route bytes per level disagree");
  FMT_CHECK(fabs(nb - rt.needed_bytes) < 1e-6, "needed bytes %g vs %g", rt.needed_bytes, nb);
  if (type == FM_DIST_ROUTE_FLAT) FMT_CHECK(fabs(rt.bytes[0] + rt.bytes[1] - rt.needed_bytes) < 1e-6, "flat route moves more than needed");
  free(got); free(into);
  FMDistRouteDestroy(&rt);
}

/*
 * Exchange steps (steps.c): the steps are 0..nsteps-1 in order, each transfer of the schedule
 * appears once, within a step the order is (src, chunk), and a rank only sends a chunk it owns
 * or received in an EARLIER step. For the ring every rank receives every non-empty chunk it
 * does not own exactly once.
 */
static void check_steps(FMDistSchedType sched, const FMDistChunks *ch, const FMDistTopo *topo, const FMDistPartition *part,
                        const FMDistRoute *rt, int group)
{
  int n = 0, ns = 0, P = part->nranks, C = part->nchunks;
  FMDistStepXfer *x = NULL;
  int *when = (int *)malloc(sizeof(int) * (size_t)P * C);
  const char *what = sched == FM_DIST_SCHED_RING ? "ring" : "gather";
  FMT_CALL(FMDistExchangeSteps(sched, ch, part, topo, rt, group, &n, &x, &ns));
  for (int r = 0; r < P; r++)
    for (int c = 0; c < C; c++) when[(size_t)r * C + c] = part->owner[c] == r ? -1 : INT_MAX;
  if (sched != FM_DIST_SCHED_RING) FMT_CHECK(n == rt->n, "%s steps hold %d transfers, the route %d", what, n, rt->n);
  for (int k = 0; k < n; k++) {
    const FMDistStepXfer *t = &x[k];
    FMT_CHECK(t->step >= 0 && t->step < ns, "%s: step %d out of 0..%d", what, t->step, ns - 1);
    if (k > 0) {
      FMT_CHECK(t->step == x[k - 1].step || t->step == x[k - 1].step + 1, "%s: steps not consecutive at %d", what, k);
      if (t->step == x[k - 1].step)
        FMT_CHECK(t->src > x[k - 1].src || (t->src == x[k - 1].src && t->chunk > x[k - 1].chunk), "%s: step %d not in (src, chunk) order",
                  what, t->step);
    } else FMT_CHECK(t->step == 0, "%s: first step %d", what, t->step);
    FMT_CHECK(t->src != t->dst && t->level == (topo->node[t->src] != topo->node[t->dst]), "%s: transfer %d bad ends/level", what, k);
    FMT_CHECK(when[(size_t)t->src * C + t->chunk] < t->step, "%s: rank %d sends chunk %d at step %d but holds it from step %d", what,
              t->src, t->chunk, t->step, when[(size_t)t->src * C + t->chunk]);
    FMT_CHECK(when[(size_t)t->dst * C + t->chunk] == INT_MAX, "%s: rank %d receives chunk %d twice", what, t->dst, t->chunk);
    when[(size_t)t->dst * C + t->chunk] = t->step;
  }
  if (sched == FM_DIST_SCHED_RING)
    for (int r = 0; r < P; r++)
      for (int c = 0; c < C; c++) {
        int k0, k1;
        FMDistChunkKeys(ch, c, &k0, &k1);
        if (k1 > k0) FMT_CHECK(when[(size_t)r * C + c] != INT_MAX, "ring: rank %d never receives chunk %d", r, c);
      }
  free(x);
  free(when);
}

/* The rank-local route and steps equal the global ones filtered to the rank (steps renumbered). */
static void check_rank_views(FMDistRouteType type, FMDistSchedType sched, const FMDistChunks *ch, const FMDistTopo *topo,
                             const FMDistPartition *part, const unsigned char *need, const double *bytes, int group)
{
  FMDistRoute all, mine;
  FMDistStepXfer *gx, *lx;
  int gn, gs, ln, ls, P = part->nranks;
  FMT_CALL(FMDistRouteBuild(type, topo, part, need, bytes, &all));
  FMT_CALL(FMDistExchangeSteps(sched, ch, part, topo, &all, group, &gn, &gx, &gs));
  for (int r = 0; r < P; r++) {
    int k = 0, *map = (int *)malloc(sizeof(int) * (size_t)(gs + 1)), nm = 0;
    FMT_CALL(FMDistRouteBuildRank(type, topo, part, need, bytes, r, &mine));
    for (int i = 0; i < all.n; i++) {
      const FMDistXfer *a = &all.x[i];
      if (a->src != r && a->dst != r) continue;
      FMT_CHECK(k < mine.n && !memcmp(a, &mine.x[k], sizeof(*a)), "rank %d: route entry %d (chunk %d %d->%d) differs from the rank's route", r,
                i, a->chunk, a->src, a->dst);
      k++;
    }
    FMT_CHECK(k == mine.n, "rank %d: its route has %d entries, the global route %d for it", r, mine.n, k);
    FMT_CALL(FMDistExchangeStepsRank(sched, ch, part, topo, rnd(2) ? &mine : &all, group, r, &ln, &lx, &ls));
    for (int i = 0; i <= gs; i++) map[i] = -1;
    k = 0;
    for (int i = 0; i < gn; i++) {
      if (gx[i].src != r && gx[i].dst != r) continue;
      if (map[gx[i].step] < 0) map[gx[i].step] = nm++;
      FMT_CHECK(k < ln && lx[k].chunk == gx[i].chunk && lx[k].src == gx[i].src && lx[k].dst == gx[i].dst && lx[k].level == gx[i].level &&
                    lx[k].step == map[gx[i].step],
                "rank %d: step transfer %d (step %d, chunk %d %d->%d) differs from the rank's steps", r, i, gx[i].step, gx[i].chunk, gx[i].src,
                gx[i].dst);
      k++;
    }
    FMT_CHECK(k == ln && nm == ls, "rank %d: %d transfers in %d steps, the global steps have %d in %d for it", r, ln, ls, k, nm);
    free(lx); free(map);
    FMDistRouteDestroy(&mine);
  }
  free(gx);
  FMDistRouteDestroy(&all);
}

static void test_routes(int iters)
{
  for (int it = 0; it < iters; it++) {
    int P = 1 + rnd(12), C = 1 + rnd(30), nn = 1 + rnd(P);
    FMDistTopo topo;
    FMDistPartition part;
    int *owner = (int *)malloc(sizeof(int) * (size_t)C);
    unsigned char *need = (unsigned char *)malloc((size_t)P * C);
    double *bytes = (double *)malloc(sizeof(double) * (size_t)C);
    FMDistRoute flat, hier;
    if (it % 3 == 0) {
      /* random node assignment with random local order */
      int *node = (int *)malloc(sizeof(int) * (size_t)P), *local = (int *)malloc(sizeof(int) * (size_t)P), *cnt = (int *)calloc((size_t)nn, sizeof(int));
      for (int r = 0; r < P; r++) node[r] = r < nn ? r : rnd(nn);
      for (int r = 0; r < P; r++) local[r] = cnt[node[r]]++;
      FMT_CALL(FMDistTopoCreate(P, node, local, &topo));
      free(node); free(local); free(cnt);
    } else FMT_CALL(FMDistTopoVirtual(P, it % 3 == 1 ? (P >= 2 ? 2 : 1) : nn, &topo));
    for (int c = 0; c < C; c++) { owner[c] = rnd(P); bytes[c] = rnd(5) ? 100 + rnd(1000) : 0; }
    for (int i = 0; i < P * C; i++) need[i] = rnd(3) != 0;
    FMT_CALL(FMDistPartitionFromOwner(C, P, owner, NULL, &part));
    check_route(FM_DIST_ROUTE_FLAT, &topo, &part, need, bytes);
    check_route(FM_DIST_ROUTE_HIER, &topo, &part, need, bytes);
    FMT_CALL(FMDistRouteBuild(FM_DIST_ROUTE_FLAT, &topo, &part, need, bytes, &flat));
    FMT_CALL(FMDistRouteBuild(FM_DIST_ROUTE_HIER, &topo, &part, need, bytes, &hier));
    {
      FMDistChunks ch; /* 4 keys per chunk, the last one or two short or empty */
      FMT_CALL(FMDistChunksInit(4 * C - rnd(3), C > 1 ? 4 * C - rnd(6) : 4, 4, P, 4, &ch));
      if (ch.nchunks == C) {
        check_steps(FM_DIST_SCHED_GATHER, &ch, &topo, &part, &flat, 0);
        check_steps(FM_DIST_SCHED_GATHER, &ch, &topo, &part, &flat, 1 + rnd(3));
        check_steps(FM_DIST_SCHED_GATHER, &ch, &topo, &part, &hier, rnd(3));
        check_steps(FM_DIST_SCHED_RING, &ch, &topo, &part, NULL, 0);
        check_rank_views(FM_DIST_ROUTE_FLAT, FM_DIST_SCHED_GATHER, &ch, &topo, &part, need, bytes, rnd(3));
        check_rank_views(FM_DIST_ROUTE_HIER, FM_DIST_SCHED_GATHER, &ch, &topo, &part, need, bytes, rnd(3));
        check_rank_views(FM_DIST_ROUTE_HIER, FM_DIST_SCHED_RING, &ch, &topo, &part, need, bytes, 0);
      }
    }
    FMT_CHECK(hier.bytes[1] <= flat.bytes[1], "hierarchical inter-node bytes %g above flat %g", hier.bytes[1], flat.bytes[1]);
    if (topo.nnodes == 1) FMT_CHECK(hier.n == flat.n && hier.bytes[0] == flat.bytes[0], "on one node the routes differ");
    FMDistRouteDestroy(&flat);
    FMDistRouteDestroy(&hier);
    FMDistTopoDestroy(&topo);
    FMDistPartitionDestroy(&part);
    free(owner); free(need); free(bytes);
  }
}

/* end to end on a document mask: pruning moves strictly less than the all-gather */
static void test_document_pruning(void)
{
  TMask t;
  FMDistChunks ch;
  FMDistPartition part;
  FMDistTopo topo;
  FMDistRoute rt;
  int S = 1024, P = 4;
  int64_t w[64];
  unsigned char need[4 * 64];
  double bytes[64];
  tmask_make(&t, 2, S, S, 1, 64);
  FMT_CALL(FMDistChunksInit(S, S, 64, P, 64, &ch));
  FMT_CALL(FMDistChunkWeights(&t.d, &ch, 1.0, 0.0, w));
  FMT_CALL(FMDistPartitionCreate(FM_DIST_CONTIGUOUS, ch.nchunks, P, w, &part, NULL));
  FMT_CALL(FMDistNeededAll(&t.d, &ch, &part, 1, need));
  for (int c = 0; c < ch.nchunks; c++) bytes[c] = FMDistChunkBytes(&ch, c, 1, 1, 16, 4);
  FMT_CALL(FMDistTopoVirtual(P, 2, &topo));
  FMT_CALL(FMDistRouteBuild(FM_DIST_ROUTE_FLAT, &topo, &part, need, bytes, &rt));
  FMT_CHECK(rt.needed_bytes < rt.allgather_bytes, "document mask, contiguous: needed %g not below all-gather %g", rt.needed_bytes,
            rt.allgather_bytes);
  FMDistRouteDestroy(&rt);
  FMDistTopoDestroy(&topo);
  FMDistPartitionDestroy(&part);
  tmask_free(&t);
}

/*
 * Messages longer than the plain-count limit go as derived types (src/sys/mpiutil.c). With the
 * limit lowered to a few thousand elements, self-messages of random lengths (with and without
 * a remainder block) must arrive whole and report their byte count.
 */
static void test_long_messages(void)
{
  for (int k = 0; k < 6; k++) {
    size_t n = k == 0 ? 4000 : k == 1 ? 4096 : (size_t)(1000 + rnd(20000));
    MPI_Datatype t = k % 2 ? MPI_FLOAT : MPI_BYTE;
    size_t es = k % 2 ? sizeof(float) : 1;
    unsigned char *a = malloc(n * es), *b = malloc(n * es + 1);
    MPI_Request rq[2];
    MPI_Status st[2];
    for (size_t i = 0; i < n * es; i++) { a[i] = (unsigned char)(1 + fmt_next(&seed) % 251); b[i] = 0; }
    b[n * es] = 0x5a;
    FMMPISetMaxCount_Private(1000 + (size_t)rnd(1000));
    FMT_CHECK(FMMPIIrecv_Private(b, n, t, 0, 7, MPI_COMM_SELF, &rq[0]) == MPI_SUCCESS, "long Irecv of %zu", n);
    FMT_CHECK(FMMPIIsend_Private(a, n, t, 0, 7, MPI_COMM_SELF, &rq[1]) == MPI_SUCCESS, "long Isend of %zu", n);
    MPI_Waitall(2, rq, st);
    FMT_CHECK(!memcmp(a, b, n * es) && b[n * es] == 0x5a, "long message of %zu elements arrived damaged", n);
    FMT_CHECK(FMMPIStatusBytes_Private(&st[0], t) == (double)(n * es), "long message: %g bytes reported, %zu sent",
              FMMPIStatusBytes_Private(&st[0], t), n * es);
    FMMPISetMaxCount_Private(0);
    free(a);
    free(b);
  }
}

int main(int argc, char **argv)
{
  int iters = 200;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, NULL));
  for (int i = 1; i + 1 < argc; i++)
    if (!strcmp(argv[i], "-iters")) iters = atoi(argv[i + 1]);
  seed = fmt_seed();
  test_chunks(iters);
  test_balancer(5 * iters);
  test_weights_causal();
  test_weights_dense(iters / 4);
  test_localize_needed(iters);
  test_routes(iters);
  test_document_pruning();
  test_long_messages();
  FMT_CALL(FMFinalize());
  return fmt_finish("test_dist_plan");
}
