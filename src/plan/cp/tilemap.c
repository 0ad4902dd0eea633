/*
 * tilemap.c - the chunk weights of the balancer from the block summaries: the tile map (each
 * key block's runs of FULL and PARTIAL row tiles) and the weights as interval sums over it,
 * O(heads x key blocks + tiles), with the direct tile-by-tile count kept as the tests'
 * reference. Deterministic and message free.
 */
#include <flashmask/private/fmdist.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

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

