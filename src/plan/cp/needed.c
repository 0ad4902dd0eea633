/*
 * needed.c - the K/V chunks a rank's queries can see, from its localized bounds. A chunk
 * none of whose columns is visible to any local row (under any mask head) is never
 * transferred. Also the needs' sparse transpose: what a rank tells the owners and relays
 * of the chunks it needs, and the needers a rank builds its transfers from (FMDistNeeders).
 */
#include <flashmask/private/fmdist.h>
#include <stdlib.h>
#include <string.h>

int FMDistColumnVisible(const FMDistLocalMask *lm, int h, int j)
{
  size_t o = (size_t)h * lm->seqlen_k + j;
  int s[3], e[3], pos = 0, changed = 1;
  s[0] = 0; e[0] = lm->cut ? lm->cut[j] : 0;
  s[1] = FMDistLocalBound(lm, 0, o); e[1] = FMDistLocalBound(lm, 1, o);
  s[2] = FMDistLocalBound(lm, 2, o); e[2] = FMDistLocalBound(lm, 3, o);
  /* advance the covered prefix [0, pos) through the three masked intervals */
  while (changed && pos < lm->nlocal) {
    changed = 0;
    for (int t = 0; t < 3; t++)
      if (s[t] <= pos && e[t] > pos) { pos = e[t]; changed = 1; }
  }
  return pos < lm->nlocal;
}

FMErrorCode FMDistNeeded(const FMDistLocalMask *lm, const FMDistChunks *ch, int prune, unsigned char *needed)
{
  for (int c = 0; c < ch->nchunks; c++) {
    int k0, k1, need = 0;
    FMDistChunkKeys(ch, c, &k0, &k1);
    if (lm->nlocal > 0 && k1 > k0) {
      if (!prune) need = 1;
      for (int h = 0; h < lm->mask_heads && !need; h++)
        for (int j = k0; j < k1 && !need; j++) need = FMDistColumnVisible(lm, h, j);
    }
    needed[c] = (unsigned char)need;
  }
  return FM_SUCCESS;
}

/*
 * The same test as FMDistLocalize + FMDistNeeded without materializing the localized
 * vectors: cnt[x] (number of local rows < x) localizes each bound on the fly.
 */
static void needed_direct(const FMMaskDesc *m, const FMDistChunks *ch, const int *cnt, int prune, unsigned char *needed)
{
  int Sq = m->seqlen_q, Sk = m->seqlen_k, off = Sk - Sq, n = cnt[Sq];
  for (int c = 0; c < ch->nchunks; c++) {
    int k0, k1, need = 0;
    FMDistChunkKeys(ch, c, &k0, &k1);
    if (n > 0 && k1 > k0) {
      if (!prune) need = 1;
      for (int h = 0; h < FMDistMaskRows(m) && !need; h++) /* every sample's mask heads: the union */
        for (int j = k0; j < k1 && !need; j++) {
          size_t o = (size_t)h * Sk + j;
          int s[3], e[3], pos = 0, changed = 1;
          long g = (long)j - off;
          for (int v = 0; v < 4; v++) {
            int x = m->bnd[v][o];
            x = x < 0 ? 0 : x > Sq ? Sq : x;
            if (v < 2) { if (v == 0) s[1] = cnt[x]; else e[1] = cnt[x]; }
            else { if (v == 2) s[2] = cnt[x]; else e[2] = cnt[x]; }
          }
          g = g < 0 ? 0 : g > Sq ? Sq : g;
          s[0] = 0; e[0] = m->causal ? cnt[g] : 0;
          while (changed && pos < n) {
            changed = 0;
            for (int t = 0; t < 3; t++)
              if (s[t] <= pos && e[t] > pos) { pos = e[t]; changed = 1; }
          }
          need = pos < n;
        }
    }
    needed[c] = (unsigned char)need;
  }
}

FMErrorCode FMDistNeededAllRef(const FMMaskDesc *m, const FMDistChunks *ch, const FMDistPartition *part, int prune,
                               unsigned char *needed)
{
  int Sq = m->seqlen_q, *cnt;
  FMCheck(Sq == ch->seqlen_q && m->seqlen_k == ch->seqlen_k, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "Mask is %d x %d but the chunks cut %d x %d",
          Sq, m->seqlen_k, ch->seqlen_q, ch->seqlen_k);
  FMCall(FMMalloc((size_t)Sq + 1, &cnt));
  for (int r = 0; r < part->nranks; r++) {
    memset(cnt, 0, sizeof(int) * ((size_t)Sq + 1));
    for (int b = part->rstart[r]; b < part->rstart[r + 1]; b++) {
      int r0, r1;
      FMDistChunkRows(ch, part->rchunks[b], &r0, &r1);
      for (int i = r0; i < r1; i++) cnt[i + 1] = 1;
    }
    for (int x = 0; x < Sq; x++) cnt[x + 1] += cnt[x];
    needed_direct(m, ch, cnt, prune, needed + (size_t)r * ch->nchunks);
  }
  free(cnt);
  return FM_SUCCESS;
}

/* ---------------- the interval query on the tile map ---------------- */
typedef struct {
  const FMMaskDesc *m;
  const FMDistChunks *ch;
  const FMDistPartition *part;
  int rank, nlocal;
  const int *rb; /* [nchunks + 1] rows of the rank in chunks before c */
} RankRows;

/* number of the rank's rows with global index < x */
static int loc_rows(const RankRows *q, long x)
{
  int c;
  if (x <= 0) return 0;
  if (x >= q->ch->seqlen_q) return q->nlocal;
  c = (int)(x / q->ch->chunk);
  return q->rb[c] + (q->part->owner[c] == q->rank ? (int)(x - (long)c * q->ch->chunk) : 0);
}

/* whether some row of the rank sees key j of mask row h (sample and mask head) (FMDistColumnVisible on localized bounds) */
static int col_visible(const RankRows *q, int h, int j)
{
  const FMMaskDesc *m = q->m;
  size_t o = (size_t)h * m->seqlen_k + j;
  int s[3], e[3], pos = 0, changed = 1;
  s[0] = 0; e[0] = m->causal ? loc_rows(q, (long)j - (m->seqlen_k - m->seqlen_q)) : 0;
  s[1] = loc_rows(q, m->bnd[0][o]); e[1] = loc_rows(q, m->bnd[1][o]);
  s[2] = loc_rows(q, m->bnd[2][o]); e[2] = loc_rows(q, m->bnd[3][o]);
  while (changed && pos < q->nlocal) {
    changed = 0;
    for (int t = 0; t < 3; t++)
      if (s[t] <= pos && e[t] > pos) { pos = e[t]; changed = 1; }
  }
  return pos < q->nlocal;
}

/* needed[] of one rank from the map; lt [ntiles + 1], rb [nchunks + 1] and st [heads x nkb] are scratch */
static void needed_map(const FMMaskDesc *m, const FMDistChunks *ch, const FMDistTileMap *tm, const FMDistPartition *part, int rank,
                       int prune, int *lt, int *rb, unsigned char *st, unsigned char *needed)
{
  RankRows q;
  int C = ch->nchunks, K = tm->nkb, B = tm->block;
  size_t nb = (size_t)tm->mask_heads * K;
  memset(needed, 0, (size_t)C);
  rb[0] = 0;
  for (int c = 0; c < C; c++) {
    int r0, r1;
    FMDistChunkRows(ch, c, &r0, &r1);
    rb[c + 1] = rb[c] + (part->owner[c] == rank ? r1 - r0 : 0);
  }
  q.m = m; q.ch = ch; q.part = part; q.rank = rank; q.nlocal = rb[C]; q.rb = rb;
  if (q.nlocal == 0) return;
  if (!prune) {
    for (int c = 0; c < C; c++) needed[c] = FMDistChunkKeyLen(ch, c) > 0;
    return;
  }
  lt[0] = 0;
  for (int c = 0; c < C; c++)
    for (int t = tm->tstart[c]; t < tm->tstart[c + 1]; t++) lt[t + 1] = lt[t] + (part->owner[c] == rank);
  /* st: 2 when a FULL tile of the block lies on the rank's rows, else 1 for a PARTIAL one, else 0 */
  for (size_t hb = 0; hb < nb; hb++) {
    unsigned char v = 0;
    for (int k = tm->roff[hb]; k < tm->roff[hb + 1] && v < 2; k++)
      if (lt[tm->run[k].hi] > lt[tm->run[k].lo]) v = tm->run[k].cls == FM_TILE_FULL ? 2 : 1;
    st[hb] = v;
  }
  for (int pass = 2; pass >= 1; pass--)
    for (size_t hb = 0; hb < nb; hb++) {
      int h = (int)(hb / (size_t)K), kb = (int)(hb % (size_t)K), j0 = kb * B, j1 = j0 + B;
      if (st[hb] != pass) continue;
      if (j1 > m->seqlen_k) j1 = m->seqlen_k;
      for (int c = j0 / ch->kchunk; c < C && (long)c * ch->kchunk < j1; c++) {
        int k0, k1;
        if (needed[c]) continue;
        if (pass == 2) { needed[c] = 1; continue; }
        FMDistChunkKeys(ch, c, &k0, &k1);
        if (k0 < j0) k0 = j0;
        if (k1 > j1) k1 = j1;
        for (int j = k0; j < k1 && !needed[c]; j++) needed[c] = (unsigned char)col_visible(&q, h, j);
      }
    }
}

static FMErrorCode needed_scratch(const FMDistTileMap *tm, int **lt, int **rb, unsigned char **st)
{
  FMCall(FMMalloc(tm->ntiles + 1, lt));
  FMCall(FMMalloc(tm->nchunks + 1, rb));
  FMCall(FMMalloc((size_t)tm->mask_heads * tm->nkb + 1, st));
  return FM_SUCCESS;
}

FMErrorCode FMDistNeededRank(const FMMaskDesc *m, const FMDistChunks *ch, const FMDistTileMap *tm, const FMDistPartition *part, int rank,
                             int prune, unsigned char *needed)
{
  FMDistTileMap own;
  int *lt = NULL, *rb = NULL;
  unsigned char *st = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  memset(&own, 0, sizeof(own));
  FMCheck(rank >= 0 && rank < part->nranks, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "rank %d; expected 0..%d", rank, part->nranks - 1);
  if (!tm) { FMCall(FMDistTileMapCreate(m, ch, &own)); tm = &own; }
  FMCallGoto(needed_scratch(tm, &lt, &rb, &st));
  needed_map(m, ch, tm, part, rank, prune, lt, rb, st, needed);
cleanup:
  free(lt); free(rb); free(st);
  FMDistTileMapDestroy(&own);
  return ierr;
}

FMErrorCode FMDistNeededAll(const FMMaskDesc *m, const FMDistChunks *ch, const FMDistPartition *part, int prune, unsigned char *needed)
{
  FMDistTileMap tm;
  int *lt = NULL, *rb = NULL;
  unsigned char *st = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  FMCall(FMDistTileMapCreate(m, ch, &tm));
  FMCallGoto(needed_scratch(&tm, &lt, &rb, &st));
  for (int r = 0; r < part->nranks; r++) needed_map(m, ch, &tm, part, r, prune, lt, rb, st, needed + (size_t)r * ch->nchunks);
cleanup:
  free(lt); free(rb); free(st);
  FMDistTileMapDestroy(&tm);
  return ierr;
}

double FMDistChunkBytes(const FMDistChunks *ch, int c, int batch, int heads_kv, int head_dim, size_t elsize)
{
  int k0, k1;
  FMDistChunkKeys(ch, c, &k0, &k1);
  return 2.0 * batch * (double)(k1 - k0) * heads_kv * head_dim * (double)elsize;
}

/* ---------------- the needs' sparse transpose ---------------- */
/* The relay on node n of a chunk owned by o (hierarchical route; n is not o's node). */
static inline int relay_of(const FMDistTopo *t, int o, int n) { return t->nranks_of[t->nfirst[n] + t->local[o] % t->nsize[n]]; }

/* The (at most two) ranks rank tells that it needs chunk c (owned by another rank). */
static int need_dests(FMDistRouteType type, const FMDistTopo *t, int o, int rank, int *dst)
{
  int nd = 0, mn = t->node[rank];
  dst[nd++] = o;
  if (type == FM_DIST_ROUTE_HIER && t->node[o] != mn) {
    int relay = relay_of(t, o, mn);
    if (relay != rank) dst[nd++] = relay;
  }
  return nd;
}

FMErrorCode FMDistNeedsSend(FMDistRouteType type, const FMDistTopo *t, const FMDistPartition *part, const unsigned char *needed, int rank,
                            int *count, int **list, int *total)
{
  int C = part->nchunks, P = part->nranks, *pos, n = 0, dst[2];
  *list = NULL; *total = 0;
  FMCheck(t->nranks == P, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "Topology has %d ranks, partition %d", t->nranks, P);
  for (int r = 0; r < P; r++) count[r] = 0;
  for (int c = 0; c < C; c++)
    if (needed[c] && part->owner[c] != rank) {
      int k = need_dests(type, t, part->owner[c], rank, dst);
      for (int i = 0; i < k; i++) count[dst[i]]++;
      n += k;
    }
  FMCall(FMMalloc(n + 1, list));
  if (FMMalloc(P + 1, &pos)) { FMFree(*list); FMRaise(MPI_COMM_SELF, FM_ERR_MEM, "Out of memory for the needs of %d ranks", P); }
  pos[0] = 0;
  for (int r = 0; r < P; r++) pos[r + 1] = pos[r] + count[r];
  for (int c = 0; c < C; c++)
    if (needed[c] && part->owner[c] != rank) {
      int k = need_dests(type, t, part->owner[c], rank, dst);
      for (int i = 0; i < k; i++) (*list)[pos[dst[i]]++] = c;
    }
  free(pos);
  *total = n;
  return FM_SUCCESS;
}

FMErrorCode FMDistNeedersFromRecv(int nchunks, int nranks, const int *rcount, const int *rlist, FMDistNeeders *nd)
{
  int n = 0, *fill;
  memset(nd, 0, sizeof(*nd));
  for (int s = 0; s < nranks; s++) n += rcount[s];
  for (int k = 0; k < n; k++)
    FMCheck(rlist[k] >= 0 && rlist[k] < nchunks, MPI_COMM_SELF, FM_ERR_LIB, "A needed chunk %d arrived; expected 0..%d", rlist[k], nchunks - 1);
  nd->nchunks = nchunks;
  nd->n = n;
  FMCall(FMCalloc((size_t)nchunks + 1, &nd->start));
  FMCall(FMMalloc(n + 1, &nd->rank));
  for (int k = 0; k < n; k++) nd->start[rlist[k] + 1]++;
  for (int c = 0; c < nchunks; c++) nd->start[c + 1] += nd->start[c];
  FMCall(FMMalloc((size_t)nchunks + 1, &fill));
  memcpy(fill, nd->start, sizeof(int) * ((size_t)nchunks + 1));
  for (int s = 0, k = 0; s < nranks; s++) /* sources ascending: each chunk's needers come out sorted */
    for (int i = 0; i < rcount[s]; i++, k++) nd->rank[fill[rlist[k]]++] = s;
  free(fill);
  return FM_SUCCESS;
}

FMErrorCode FMDistNeedersFromMatrix(FMDistRouteType type, const FMDistTopo *t, const FMDistPartition *part, const unsigned char *needed, int rank,
                                    FMDistNeeders *nd)
{
  int C = part->nchunks, P = part->nranks, mn = t->node[rank], dst[2];
  const int *mk = t->nranks_of + t->nfirst[mn];
  memset(nd, 0, sizeof(*nd));
  FMCheck(t->nranks == P, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "Topology has %d ranks, partition %d", t->nranks, P);
  FMCheck(rank >= 0 && rank < P, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "rank %d; expected 0..%d", rank, P - 1);
  nd->nchunks = C;
  FMCall(FMCalloc((size_t)C + 1, &nd->start));
  for (int pass = 0; pass < 2; pass++) { /* count, then fill */
    int n = 0;
    for (int c = 0; c < C; c++) {
      int o = part->owner[c], lo = 0, hi = 0;
      const int *cand = NULL;
      if (o == rank) { lo = 0; hi = P; }
      else if (type == FM_DIST_ROUTE_HIER && t->node[o] != mn && relay_of(t, o, mn) == rank) { cand = mk; hi = t->nsize[mn]; }
      for (int i = lo; i < hi; i++) {
        int r = cand ? cand[i] : i, k, hit = 0;
        if (r == rank || r == o || !needed[(size_t)r * C + c]) continue;
        k = need_dests(type, t, o, r, dst);
        for (int j = 0; j < k; j++) hit |= dst[j] == rank;
        if (!hit) continue;
        if (pass) nd->rank[n] = r;
        n++;
      }
      if (!pass) nd->start[c + 1] = n;
    }
    if (!pass) { nd->n = n; FMCall(FMMalloc(n + 1, &nd->rank)); }
  }
  /* node ranks are by local index, not by rank: sort each chunk's few needers */
  for (int c = 0; c < C; c++)
    for (int a = nd->start[c] + 1; a < nd->start[c + 1]; a++)
      for (int b = a; b > nd->start[c] && nd->rank[b - 1] > nd->rank[b]; b--) { int x = nd->rank[b]; nd->rank[b] = nd->rank[b - 1]; nd->rank[b - 1] = x; }
  return FM_SUCCESS;
}

FMErrorCode FMDistNeedersDestroy(FMDistNeeders *nd)
{
  if (!nd) return FM_SUCCESS;
  FMFree(nd->start); FMFree(nd->rank);
  nd->n = nd->nchunks = 0;
  return FM_SUCCESS;
}
