/*
 * balance.c - chunk weights from the block summaries, and the balancer: longest-processing-
 * time-first, then exact pairwise repartition of the heaviest rank with each partner and
 * exact three-way repartition with the two lightest ranks where the pool is small.
 * Deterministic and message free (doc/distributed.md gives the bounds).
 */
#include <flashmask/private/fmdist.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#define FM_PAIR_EXACT_MAX 40   /* meet in the middle: 2 x 2^20 subset sums at most */
#define FM_TRIPLE_EXACT_MAX 12 /* 3^12 = 531441 assignments */

FMErrorCode FMDistChunkWeights(const FMMaskDesc *m, const FMDistChunks *ch, double partial, double rowcost, int64_t *w)
{
  FMDistTileMap tm;
  FMErrorCode ierr = FM_SUCCESS;
  FMCall(FMDistTileMapCreate(m, ch, &tm));
  FMCallGoto(FMDistChunkWeightsMap(&tm, partial, rowcost, w));
cleanup:
  FMDistTileMapDestroy(&tm);
  return ierr;
}

/* FMDistChunkWeightsRef - the direct count, tile by tile (O(tiles x key blocks)): the tests' reference. */
FMErrorCode FMDistChunkWeightsRef(const FMMaskDesc *m, const FMDistChunks *ch, double partial, double rowcost, int64_t *w)
{
  int block = m->block > 0 ? m->block : 128;
  FMCheck(m->summary != NULL, MPI_COMM_SELF, FM_ERR_ARG_NULL, "The mask descriptor has no block summaries");
  FMCheck(m->seqlen_q == ch->seqlen_q && m->seqlen_k == ch->seqlen_k, MPI_COMM_SELF, FM_ERR_ARG_SIZ,
          "Mask is %d x %d but the chunks cut %d x %d", m->seqlen_q, m->seqlen_k, ch->seqlen_q, ch->seqlen_k);
  for (int c = 0; c < ch->nchunks; c++) {
    int r0, r1;
    int64_t s = 0;
    FMDistChunkRows(ch, c, &r0, &r1);
    for (int h = 0; h < m->mask_heads; h++) {
      const int32_t *sh = m->summary + (size_t)h * m->nblocks_k * FM_SUM_N;
      for (int t0 = r0; t0 < r1; t0 += block) {
        int t1 = t0 + block < r1 ? t0 + block : r1;
        int64_t wp = partial == 1.0 ? t1 - t0 : (int64_t)llround(partial * (t1 - t0));
        s += (int64_t)llround(rowcost * (t1 - t0));
        for (int kb = 0; kb < m->nblocks_k; kb++) {
          FMTileClass tc = FMClassifyTileInline(sh, m->causal, m->seqlen_q, m->seqlen_k, block, t0, t1, kb);
          s += tc == FM_TILE_FULL ? t1 - t0 : tc == FM_TILE_PARTIAL ? wp : 0;
        }
      }
    }
    w[c] = s;
  }
  return FM_SUCCESS;
}

/* ---------------- the tile map: each key block's row tiles by class ---------------- */
/*
 * The row tiles are those of FMDistChunkWeights: chunk by chunk, tiles of `block` rows from
 * the chunk's first row (the last one of a chunk may be short), so their rows m0 < m1 grow
 * with the tile index t. For one key block every test of FMClassifyTileInline is "t in an
 * interval" (a bound compared with m0 or m1), so the class is constant between at most
 * 12 interval ends: the map stores, per (head, key block), the FULL and PARTIAL runs of t.
 * Building it costs O(heads x key blocks) (each interval end is an O(1) index lookup).
 */
static int tile_of(const FMDistTileMap *tm, long x) /* the tile holding row x, 0 <= x < seqlen_q */
{
  int c = (int)(x / tm->chunk);
  return tm->tstart[c] + (int)((x - (long)c * tm->chunk) / tm->block);
}
static int first_m0_ge(const FMDistTileMap *tm, long x) /* first t with m0[t] >= x */
{
  int t;
  if (x <= 0) return 0;
  if (x >= tm->seqlen_q) return tm->ntiles;
  t = tile_of(tm, x);
  return tm->m0[t] == x ? t : t + 1;
}
static int first_m1_gt(const FMDistTileMap *tm, long x) /* first t with m1[t] > x */
{
  if (x < 0) return 0;
  if (x >= tm->seqlen_q) return tm->ntiles;
  return tile_of(tm, x);
}

static int cmp_int(const void *a, const void *b) { int x = *(const int *)a, y = *(const int *)b; return (x > y) - (x < y); }

/* The non-SKIP runs of one key block; returns how many were written to seg (at most 13). */
static int block_runs(const FMDistTileMap *tm, const int32_t *s, int causal, int off, int kb, FMDistTileRun *seg)
{
  int T = tm->ntiles, lo[6], hi[6], cut[14], nc = 0, ns = 0;
  long c0 = (long)kb * tm->block, c1 = c0 + tm->block;
  if (c1 > tm->seqlen_k) c1 = tm->seqlen_k;
  if (c0 >= c1) return 0;
  /* 0-2: SKIP (right of the diagonal, inside the lower interval, inside the upper interval) */
  lo[0] = 0; hi[0] = causal ? first_m1_gt(tm, c0 - off) : 0;
  lo[1] = first_m0_ge(tm, s[FM_SUM_LTS_MAX]); hi[1] = first_m1_gt(tm, s[FM_SUM_LTE_MIN]);
  lo[2] = first_m0_ge(tm, s[FM_SUM_UTS_MAX]); hi[2] = first_m1_gt(tm, s[FM_SUM_UTE_MIN]);
  /* 3-5: PARTIAL (crossing the diagonal, meeting the lower interval, meeting the upper one) */
  lo[3] = 0; hi[3] = causal ? first_m0_ge(tm, c1 - 1 - off) : 0;
  lo[4] = first_m1_gt(tm, s[FM_SUM_LTS_MIN]); hi[4] = first_m0_ge(tm, s[FM_SUM_LTE_MAX]);
  lo[5] = first_m1_gt(tm, s[FM_SUM_UTS_MIN]); hi[5] = first_m0_ge(tm, s[FM_SUM_UTE_MAX]);
  cut[nc++] = 0; cut[nc++] = T;
  for (int i = 0; i < 6; i++)
    if (lo[i] < hi[i]) { cut[nc++] = lo[i]; cut[nc++] = hi[i]; }
  qsort(cut, (size_t)nc, sizeof(int), cmp_int);
  for (int i = 0; i + 1 < nc; i++) {
    int t = cut[i], cls = FM_TILE_FULL;
    if (cut[i + 1] == t) continue;
    for (int k = 0; k < 3; k++)
      if (lo[k] <= t && t < hi[k]) cls = FM_TILE_SKIP;
    for (int k = 3; k < 6 && cls == FM_TILE_FULL; k++)
      if (lo[k] <= t && t < hi[k]) cls = FM_TILE_PARTIAL;
    if (cls == FM_TILE_SKIP) continue;
    if (ns > 0 && seg[ns - 1].hi == t && seg[ns - 1].cls == cls) seg[ns - 1].hi = cut[i + 1];
    else { seg[ns].lo = t; seg[ns].hi = cut[i + 1]; seg[ns].cls = cls; ns++; }
  }
  return ns;
}

FMErrorCode FMDistTileMapCreate(const FMMaskDesc *m, const FMDistChunks *ch, FMDistTileMap *tm)
{
  int block = m->block > 0 ? m->block : 128, off = m->seqlen_k - m->seqlen_q, n = 0;
  size_t nb = (size_t)m->mask_heads * m->nblocks_k;
  FMDistTileRun tmp[14];
  memset(tm, 0, sizeof(*tm));
  FMCheck(m->summary != NULL, MPI_COMM_SELF, FM_ERR_ARG_NULL, "The mask descriptor has no block summaries");
  FMCheck(m->seqlen_q == ch->seqlen_q && m->seqlen_k == ch->seqlen_k, MPI_COMM_SELF, FM_ERR_ARG_SIZ,
          "Mask is %d x %d but the chunks cut %d x %d", m->seqlen_q, m->seqlen_k, ch->seqlen_q, ch->seqlen_k);
  tm->seqlen_q = m->seqlen_q; tm->seqlen_k = m->seqlen_k; tm->chunk = ch->chunk; tm->block = block;
  tm->nchunks = ch->nchunks; tm->mask_heads = m->mask_heads; tm->nkb = m->nblocks_k;
  FMCall(FMMalloc(ch->nchunks + 1, &tm->tstart));
  for (int c = 0; c < ch->nchunks; c++) {
    int r0, r1;
    FMDistChunkRows(ch, c, &r0, &r1);
    tm->tstart[c] = n;
    n += (r1 - r0 + block - 1) / block;
  }
  tm->tstart[ch->nchunks] = tm->ntiles = n;
  FMCall(FMMalloc(n + 1, &tm->m0));
  FMCall(FMMalloc(n + 1, &tm->m1));
  for (int c = 0, t = 0; c < ch->nchunks; c++) {
    int r0, r1;
    FMDistChunkRows(ch, c, &r0, &r1);
    for (int t0 = r0; t0 < r1; t0 += block, t++) { tm->m0[t] = t0; tm->m1[t] = t0 + block < r1 ? t0 + block : r1; }
  }
  FMCall(FMMalloc(nb + 1, &tm->roff));
  FMCall(FMMalloc(4 * nb + 1, &tm->run)); /* grown below when a block has more runs */
  {
    size_t cap = 4 * nb + 1, k = 0;
    for (size_t hb = 0; hb < nb; hb++) {
      int h = (int)(hb / (size_t)m->nblocks_k), kb = (int)(hb % (size_t)m->nblocks_k);
      int ns = block_runs(tm, m->summary + hb * FM_SUM_N, m->causal, off, kb, tmp);
      (void)h;
      if (k + (size_t)ns > cap) {
        FMDistTileRun *nr;
        cap = 2 * cap + (size_t)ns;
        nr = (FMDistTileRun *)realloc(tm->run, sizeof(*nr) * cap);
        FMCheck(nr != NULL, MPI_COMM_SELF, FM_ERR_MEM, "Out of memory for %zu tile runs", cap);
        tm->run = nr;
      }
      tm->roff[hb] = (int)k;
      memcpy(tm->run + k, tmp, sizeof(*tmp) * (size_t)ns);
      k += (size_t)ns;
    }
    tm->roff[nb] = (int)k;
  }
  return FM_SUCCESS;
}

FMErrorCode FMDistTileMapDestroy(FMDistTileMap *tm)
{
  if (!tm) return FM_SUCCESS;
  FMFree(tm->tstart); FMFree(tm->m0); FMFree(tm->m1); FMFree(tm->roff); FMFree(tm->run);
  return FM_SUCCESS;
}

/* Weights from the map: run starts and ends in difference arrays over the tiles, then one pass. */
FMErrorCode FMDistChunkWeightsMap(const FMDistTileMap *tm, double partial, double rowcost, int64_t *w)
{
  int T = tm->ntiles;
  size_t nb = (size_t)tm->mask_heads * tm->nkb;
  int64_t *df, *dp, nf = 0, np = 0;
  FMCall(FMCalloc(T + 1, &df));
  FMCall(FMCalloc(T + 1, &dp));
  for (size_t hb = 0; hb < nb; hb++)
    for (int k = tm->roff[hb]; k < tm->roff[hb + 1]; k++) {
      int64_t *d = tm->run[k].cls == FM_TILE_FULL ? df : dp;
      d[tm->run[k].lo]++;
      d[tm->run[k].hi]--;
    }
  for (int c = 0; c < tm->nchunks; c++) {
    int64_t s = 0;
    for (int t = tm->tstart[c]; t < tm->tstart[c + 1]; t++) {
      int64_t len = tm->m1[t] - tm->m0[t], wp = partial == 1.0 ? len : (int64_t)llround(partial * (double)len);
      nf += df[t]; np += dp[t];
      s += nf * len + np * wp + (int64_t)tm->mask_heads * (int64_t)llround(rowcost * (double)len);
    }
    w[c] = s;
  }
  free(df); free(dp);
  return FM_SUCCESS;
}

/* ---------------- helpers ---------------- */
typedef struct { int64_t s; uint32_t mask; } SumMask;

static int cmp_summask(const void *a, const void *b)
{
  const SumMask *x = (const SumMask *)a, *y = (const SumMask *)b;
  if (x->s != y->s) return x->s < y->s ? -1 : 1;
  return x->mask < y->mask ? -1 : (x->mask > y->mask);
}

static int argmax_load(int P, const int64_t *load)
{
  int a = 0;
  for (int r = 1; r < P; r++)
    if (load[r] > load[a]) a = r;
  return a;
}

typedef struct { int64_t s; int cost; uint32_t mask; } SumCost;

static int cmp_sumcost(const void *a, const void *b)
{
  const SumCost *x = (const SumCost *)a, *y = (const SumCost *)b;
  if (x->s != y->s) return x->s < y->s ? -1 : 1;
  if (x->cost != y->cost) return x->cost - y->cost;
  return x->mask < y->mask ? -1 : (x->mask > y->mask);
}

static int popc(uint32_t v) { int c = 0; while (v) { v &= v - 1; c++; } return c; }

/*
 * Exact two-way split of items x[0..n) (n <= 40) between ranks a and b minimizing the
 * larger side, by meet in the middle. Among the optimal splits (either orientation) it
 * returns one that moves the fewest items: cur[i] = 1 when item i is now on b; out side[i]
 * = 1 when it goes to b.
 */
static FMErrorCode split2_exact(int n, const int64_t *x, const unsigned char *cur, unsigned char *side)
{
  int n1 = n / 2, n2 = n - n1, bestcost = -1;
  size_t N1 = (size_t)1 << n1, N2 = (size_t)1 << n2;
  int64_t T = 0, H, best = -1, tgt[2];
  uint32_t c1 = 0, c2 = 0, bm1 = 0, bm2 = 0;
  SumCost *s2;
  for (int i = 0; i < n; i++) T += x[i];
  for (int i = 0; i < n1; i++) c1 |= (uint32_t)(cur[i] != 0) << i;
  for (int i = 0; i < n2; i++) c2 |= (uint32_t)(cur[n1 + i] != 0) << i;
  H = T / 2;
  FMCall(FMMalloc(N2, &s2));
  for (size_t m = 0; m < N2; m++) {
    int64_t sm = 0;
    for (int i = 0; i < n2; i++)
      if (m >> i & 1) sm += x[n1 + i];
    s2[m].s = sm; s2[m].mask = (uint32_t)m; s2[m].cost = popc((uint32_t)m ^ c2);
  }
  qsort(s2, N2, sizeof(*s2), cmp_sumcost);
  /* pass 1: the best smaller-side sum (<= T/2) */
  for (size_t m = 0; m < N1 && best < H; m++) {
    int64_t sm = 0, lim;
    size_t lo = 0, hi = N2;
    for (int i = 0; i < n1; i++)
      if (m >> i & 1) sm += x[i];
    lim = H - sm;
    if (lim < 0) continue;
    while (lo < hi) { /* first index with s2 > lim */
      size_t mid = (lo + hi) / 2;
      if (s2[mid].s <= lim) lo = mid + 1; else hi = mid;
    }
    if (lo > 0 && sm + s2[lo - 1].s > best) best = sm + s2[lo - 1].s;
  }
  if (best < 0) best = 0;
  /* pass 2: the subset for b with sum best or T - best that moves the fewest items */
  tgt[0] = best; tgt[1] = T - best;
  for (int t = 0; t < (tgt[1] == tgt[0] ? 1 : 2); t++)
    for (size_t m = 0; m < N1; m++) {
      int64_t sm = 0, need;
      size_t lo = 0, hi = N2;
      for (int i = 0; i < n1; i++)
        if (m >> i & 1) sm += x[i];
      need = tgt[t] - sm;
      while (lo < hi) { /* first index with s2 >= need: the least cost of that sum */
        size_t mid = (lo + hi) / 2;
        if (s2[mid].s < need) lo = mid + 1; else hi = mid;
      }
      if (lo < N2 && s2[lo].s == need) {
        int cost = popc((uint32_t)m ^ c1) + s2[lo].cost;
        if (bestcost < 0 || cost < bestcost) { bestcost = cost; bm1 = (uint32_t)m; bm2 = s2[lo].mask; }
      }
    }
  free(s2);
  for (int i = 0; i < n1; i++) side[i] = (unsigned char)(bm1 >> i & 1);
  for (int i = 0; i < n2; i++) side[n1 + i] = (unsigned char)(bm2 >> i & 1);
  return FM_SUCCESS;
}

/*
 * Exact three-way assignment of x[0..n) (n <= 12) minimizing the largest bin; among the
 * optimal ones the one that moves the fewest items from their current bins cur[].
 */
static void split3_exact(int n, const int64_t *x, const unsigned char *cur, unsigned char *bin, int64_t *best_max)
{
  int64_t best = -1;
  int bestmv = 0;
  long total = 1;
  unsigned char tmp[FM_TRIPLE_EXACT_MAX];
  for (int i = 0; i < n; i++) total *= 3;
  for (long code = 0; code < total; code++) {
    int64_t l[3] = {0, 0, 0}, mx;
    long c = code;
    int mv = 0;
    for (int i = 0; i < n; i++) { tmp[i] = (unsigned char)(c % 3); c /= 3; l[tmp[i]] += x[i]; mv += tmp[i] != cur[i]; }
    mx = l[0] > l[1] ? l[0] : l[1];
    if (l[2] > mx) mx = l[2];
    if (best < 0 || mx < best || (mx == best && mv < bestmv)) { best = mx; bestmv = mv; memcpy(bin, tmp, (size_t)n); }
  }
  *best_max = best;
}

/* Improve owner[] in place; loads kept consistent. */
static FMErrorCode improve(int n, const int64_t *w, int P, int *owner, int64_t *load, FMDistBalanceInfo *info)
{
  int *pool, *order;
  int64_t *x;
  unsigned char *side, *cur;
  long iter, maxiter = 1000L + 50L * P + 10L * n;
  FMCall(FMMalloc(n, &pool));
  FMCall(FMMalloc(n, &x));
  FMCall(FMMalloc(n, &side));
  FMCall(FMMalloc(n, &cur));
  FMCall(FMMalloc(P, &order));
  for (iter = 0; iter < maxiter && P > 1; iter++) {
    int a = argmax_load(P, load), improved = 0;
    /* partners by load ascending, ties by index */
    for (int r = 0; r < P; r++) order[r] = r;
    for (int i = 1; i < P; i++) {
      int v = order[i], j = i - 1;
      while (j >= 0 && (load[order[j]] > load[v] || (load[order[j]] == load[v] && order[j] > v))) { order[j + 1] = order[j]; j--; }
      order[j + 1] = v;
    }
    for (int k = 0; k < P && !improved; k++) {
      int b = order[k], np = 0;
      int64_t small = 0, T = load[a] + load[b];
      if (b == a) continue;
      for (int c = 0; c < n; c++)
        if (owner[c] == a || owner[c] == b) { pool[np] = c; cur[np] = owner[c] == b; x[np++] = w[c]; }
      if (np > FM_PAIR_EXACT_MAX) { if (info) info->inexact_pairs++; continue; }
      FMCall(split2_exact(np, x, cur, side));
      small = 0;
      for (int i = 0; i < np; i++) small += side[i] ? x[i] : 0; /* b's new load */
      if (small < load[a] && T - small < load[a]) {
        for (int i = 0; i < np; i++) owner[pool[i]] = side[i] ? b : a;
        load[b] = small; load[a] = T - small;
        if (info) info->pair_moves++;
        improved = 1;
      }
    }
    if (!improved && P >= 3) {
      int b = -1, c2 = -1, np = 0;
      int64_t bmax;
      for (int k = 0; k < P; k++) {
        int r = order[k];
        if (r == a) continue;
        if (b < 0) b = r; else if (c2 < 0) c2 = r;
      }
      for (int c = 0; c < n; c++)
        if (owner[c] == a || owner[c] == b || owner[c] == c2) {
          pool[np] = c; cur[np] = owner[c] == a ? 0 : owner[c] == b ? 1 : 2; x[np++] = w[c];
        }
      if (np <= FM_TRIPLE_EXACT_MAX) {
        int who[3] = {a, b, c2};
        split3_exact(np, x, cur, side, &bmax);
        if (bmax < load[a]) {
          load[a] = load[b] = load[c2] = 0;
          for (int i = 0; i < np; i++) { owner[pool[i]] = who[side[i]]; load[who[side[i]]] += x[i]; }
          if (info) info->triple_moves++;
          improved = 1;
        }
      }
    }
    if (!improved) break;
  }
  free(pool); free(x); free(side); free(cur); free(order);
  return FM_SUCCESS;
}

static void loads_of(int n, const int64_t *w, int P, const int *owner, int64_t *load)
{
  for (int r = 0; r < P; r++) load[r] = 0;
  for (int c = 0; c < n; c++) load[owner[c]] += w[c];
}

static int64_t max_of(int P, const int64_t *load)
{
  return load[argmax_load(P, load)];
}

FMErrorCode FMDistBalance(int n, const int64_t *w, int P, int *owner, FMDistBalanceInfo *info)
{
  int *idx, *own2;
  int64_t *load, *load2, m1;
  FMDistBalanceInfo loc;
  FMCheck(n >= 1 && P >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "n = %d, P = %d; expected both >= 1", n, P);
  memset(&loc, 0, sizeof(loc));
  FMCall(FMMalloc(n, &idx));
  FMCall(FMMalloc(n, &own2));
  FMCall(FMCalloc(P, &load));
  FMCall(FMCalloc(P, &load2));
  for (int c = 0; c < n; c++) {
    FMCheck(w[c] >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "w[%d] = %lld; expected >= 0", c, (long long)w[c]);
    loc.total += w[c];
  }
  /* LPT: heaviest first (ties: lower index), onto the least loaded rank (ties: lower rank) */
  {
    SumMask *o;
    FMCall(FMMalloc(n, &o));
    for (int c = 0; c < n; c++) { o[c].s = -w[c]; o[c].mask = (uint32_t)c; } /* ascending (-w, c) */
    qsort(o, (size_t)n, sizeof(*o), cmp_summask);
    for (int c = 0; c < n; c++) idx[c] = (int)o[c].mask;
    free(o);
  }
  for (int i = 0; i < n; i++) {
    int c = idx[i], best = 0;
    for (int r = 1; r < P; r++)
      if (load[r] < load[best]) best = r;
    owner[c] = best;
    load[best] += w[c];
  }
  loc.lpt_max = max_of(P, load);
  FMCall(improve(n, w, P, owner, load, &loc));
  m1 = max_of(P, load);
  /*
   * The same improvement from the contiguous and the dual-chunk assignments; the least max
   * wins, ties going to improved contiguous (most locality: fewest K/V chunks to move), then
   * improved LPT, then improved dual-chunk. Improvement never raises the max, so the result
   * is never worse than contiguous nor dual-chunk, and every candidate is pairwise optimal.
   */
  {
    int best = 1;
    int64_t bmax = m1, cm;
    for (int cand = 0; cand < 3; cand++) {
      if (cand == 1) continue;
      if (cand == 0) FMDistAssignContiguous(n, P, own2);
      else FMDistAssignDualChunk(n, P, own2);
      loads_of(n, w, P, own2, load2);
      if (cand == 2) loc.dual_max = max_of(P, load2);
      FMCall(improve(n, w, P, own2, load2, &loc));
      cm = max_of(P, load2);
      if (cm < bmax || (cm == bmax && cand < best)) {
        bmax = cm;
        best = cand;
        memcpy(owner, own2, sizeof(int) * (size_t)n);
      }
    }
    loc.start = best;
    loc.max = bmax;
  }
  free(idx); free(own2); free(load); free(load2);
  if (info) *info = loc;
  return FM_SUCCESS;
}

/* FMDistPartitionCreate - see fmdist.h: the contiguous, dual-chunk or balanced partition. */
FMErrorCode FMDistPartitionCreate(FMDistPartType type, int nchunks, int P, const int64_t *w, FMDistPartition *part,
                                  FMDistBalanceInfo *info)
{
  int *owner = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  FMCheck(nchunks >= 1 && P >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "nchunks = %d, P = %d; expected both >= 1", nchunks, P);
  FMCall(FMMalloc(nchunks, &owner));
  switch (type) {
  case FM_DIST_CONTIGUOUS: FMDistAssignContiguous(nchunks, P, owner); break;
  case FM_DIST_DUAL_CHUNK: FMDistAssignDualChunk(nchunks, P, owner); break;
  case FM_DIST_BALANCED:
    FMCheckGoto(w, MPI_COMM_SELF, FM_ERR_ARG_NULL, "The balanced partition needs chunk weights (w is NULL)");
    FMCallGoto(FMDistBalance(nchunks, w, P, owner, info));
    break;
  default: FMRaiseGoto(MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Partition type %d; expected 0..2", (int)type);
  }
  FMCallGoto(FMDistPartitionFromOwner(nchunks, P, owner, w, part));
cleanup:
  free(owner);
  return ierr;
}
