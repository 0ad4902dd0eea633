/*
 * cost.c - the one cost model of a context-parallel step (fmdist.h: compute at the model's
 * rate, K/V receives per link level at the model's bandwidths, overlapped), used alike by
 * fmplan-sim's predictions and by the communication-aware balancer; the chunk visibility that
 * gives any partition's needed sets, and the bytes each rank receives on a route.
 * Deterministic and message free.
 */
#include <flashmask/private/fmdist.h>
#include <stdlib.h>
#include <string.h>

void FMDistCostModelInit(FMDistCostModel *cm, int block, int head_dim, int heads_q, int batch, int mask_rows, double tflops, double bw_intra,
                         double bw_inter)
{
  if (mask_rows < 1) mask_rows = 1;
  /* a weight unit is one query row against one key block of one mask row: 4 x block x head_dim
     flops per query head, and the weights sum the mask rows (one sample each, or every head) */
  cm->unit_s = 4.0 * block * (double)head_dim * heads_q * batch / mask_rows / (tflops * 1e12);
  cm->bw[0] = bw_intra * 1e9;
  cm->bw[1] = bw_inter * 1e9;
}

void FMDistPredict(const FMDistCostModel *cm, int P, const int64_t *work, const double *recv, double t[3])
{
  t[0] = t[1] = t[2] = 0;
  for (int r = 0; r < P; r++) {
    double c = (double)work[r] * cm->unit_s, x = recv[r] / cm->bw[0] + recv[P + r] / cm->bw[1];
    if (c > t[0]) t[0] = c;
    if (x > t[1]) t[1] = x;
    if ((c > x ? c : x) > t[2]) t[2] = c > x ? c : x;
  }
}

void FMDistRouteRecv(const FMDistRoute *rt, const double *cbytes, int P, double *recv)
{
  for (int i = 0; i < 2 * P; i++) recv[i] = 0;
  for (int i = 0; i < rt->n; i++) recv[(size_t)P * rt->x[i].level + rt->x[i].dst] += cbytes ? cbytes[rt->x[i].chunk] : 1.0;
}

/* ---------------- chunk visibility ---------------- */
typedef struct { int k, lo, hi; } Span3;

static int cmp_span3(const void *a, const void *b)
{
  const Span3 *x = (const Span3 *)a, *y = (const Span3 *)b;
  if (x->k != y->k) return x->k < y->k ? -1 : 1;
  if (x->lo != y->lo) return x->lo < y->lo ? -1 : 1;
  return (x->hi > y->hi) - (x->hi < y->hi);
}

FMErrorCode FMDistChunkVisCreate(const FMDistTileMap *tm, const FMDistChunks *ch, FMDistChunkVis *v)
{
  size_t nb = (size_t)tm->mask_heads * tm->nkb, ns = 0, cap;
  Span3 *s = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  memset(v, 0, sizeof(*v));
  v->nchunks = ch->nchunks;
  /* every run gives its query chunks to each key chunk its key block overlaps (one or two) */
  cap = 2 * (size_t)tm->roff[nb] + 1;
  FMCallGoto(FMMalloc(cap, &s));
  for (size_t hb = 0; hb < nb; hb++) {
    int kb = (int)(hb % (size_t)tm->nkb), j0 = kb * tm->block, j1 = j0 + tm->block;
    if (j1 > ch->seqlen_k) j1 = ch->seqlen_k;
    for (int r = tm->roff[hb]; r < tm->roff[hb + 1]; r++) {
      int q0 = tm->m0[tm->run[r].lo] / ch->chunk, q1 = (tm->m0[tm->run[r].hi - 1]) / ch->chunk + 1;
      for (int k = j0 / ch->kchunk; k < ch->nchunks && (long)k * ch->kchunk < j1; k++) {
        if (ns == cap) {
          Span3 *t2 = (Span3 *)realloc(s, sizeof(*s) * 2 * cap);
          FMCheckGoto(t2 != NULL, MPI_COMM_SELF, FM_ERR_MEM, "Out of memory for %zu visibility spans", 2 * cap);
          s = t2; cap *= 2;
        }
        s[ns].k = k; s[ns].lo = q0; s[ns].hi = q1; ns++;
      }
    }
  }
  {
    /* by key chunk (a counting sort), then each key chunk's few spans by (lo, hi) */
    Span3 *u;
    int *cnt;
    FMCallGoto(FMMalloc(ns + 1, &u));
    if (FMCalloc((size_t)ch->nchunks + 1, &cnt)) { free(u); FMRaiseGoto(MPI_COMM_SELF, FM_ERR_MEM, "Out of memory sorting %zu spans", ns); }
    for (size_t i = 0; i < ns; i++) cnt[s[i].k + 1]++;
    for (int k = 0; k < ch->nchunks; k++) cnt[k + 1] += cnt[k];
    for (size_t i = 0; i < ns; i++) u[cnt[s[i].k]++] = s[i];
    free(s); s = u;
    for (size_t i = 1; i < ns; i++) { /* insertion sort: already ordered by k, short runs within */
      Span3 x = s[i];
      size_t j = i;
      while (j > 0 && cmp_span3(&s[j - 1], &x) > 0) { s[j] = s[j - 1]; j--; }
      s[j] = x;
    }
    free(cnt);
  }
  /* merge overlapping or touching intervals of each key chunk */
  FMCallGoto(FMMalloc(ns + 1, &v->q));
  FMCallGoto(FMCalloc((size_t)ch->nchunks + 1, &v->kofs));
  {
    int kcur = 0;
    for (size_t i = 0; i < ns; i++) {
      int m = v->nspan, k = s[i].k;
      while (kcur <= k) v->kofs[kcur++] = m; /* k's spans start here */
      if (m > v->kofs[k] && s[i].lo <= v->q[m - 1].hi) {
        if (s[i].hi > v->q[m - 1].hi) v->q[m - 1].hi = s[i].hi;
        continue;
      }
      v->q[m].lo = s[i].lo; v->q[m].hi = s[i].hi;
      v->nspan++;
    }
    while (kcur <= ch->nchunks) v->kofs[kcur++] = v->nspan;
  }
  for (int i = 0; i < v->nspan; i++) v->size += v->q[i].hi - v->q[i].lo;
cleanup:
  free(s);
  if (ierr) FMDistChunkVisDestroy(v);
  return ierr;
}

FMErrorCode FMDistChunkVisDestroy(FMDistChunkVis *v)
{
  if (!v) return FM_SUCCESS;
  FMFree(v->kofs);
  FMFree(v->q);
  return FM_SUCCESS;
}

/* ---------------- the receives by a sweep over the key chunks ---------------- */
/*
 * When every node has the same size G and every chunk a whole number of bytes (then sums are
 * exact in any order, so the result equals the loop's bit for bit), the receives need only
 * the intervals of key chunks during which a rank (or a node) sees some chunk: a sweep over k
 * updates per-rank and per-node counts of the query chunks of the current visibility by the
 * symmetric difference of consecutive key chunks' spans (one span per document, the same for
 * every key chunk of a document, shifted by one under causal masks), and an interval's bytes
 * are prefix-sum differences. O(chunks x G + spans + the spans' changes) instead of
 * O(visibility size).
 */
typedef struct {
  int P, C, G, flat;
  const int *owner, *node, *local, *nranks_of, *rhead, *rnext; /* rhead/rnext: each rank's chunks, ascending */
  const double *b, *B, *BL; /* b [C]; B [C + 1] prefix bytes; BL [G][C + 1] prefix bytes of the chunks owned at local index l */
  const int *nofs, *nch;    /* each node's owned chunks, ascending: nch[nofs[n] .. nofs[n + 1]) */
  const double *nB;         /* nB[nofs[n] + n + i]: bytes of node n's first i chunks */
  int *cnt, *enter, *ncnt, *nenter;
  double *recv;
} Sweep;

static double own_bytes(const Sweep *W, int r, int k1, int k2)
{
  double s = 0;
  for (int c = W->rhead[r]; c >= 0 && c < k2; c = W->rnext[c])
    if (c >= k1) s += W->b[c];
  return s;
}

static int lower(const int *a, int n, int x) /* first i with a[i] >= x */
{
  int lo = 0, hi = n;
  while (lo < hi) { int m = (lo + hi) / 2; if (a[m] < x) lo = m + 1; else hi = m; }
  return lo;
}

/* rank r saw key chunks k1..k2-1: what it receives of them (its own excluded) */
static void rank_span(Sweep *W, int r, int k1, int k2)
{
  int P = W->P, n = W->node[r];
  double own = own_bytes(W, r, k1, k2), tot = W->B[k2] - W->B[k1] - own;
  if (W->flat) { /* from owners on its node inside, the rest across */
    const int *nc = W->nch + W->nofs[n];
    const double *nb = W->nB + W->nofs[n] + n;
    int m = W->nofs[n + 1] - W->nofs[n];
    double on = nb[lower(nc, m, k2)] - nb[lower(nc, m, k1)] - own;
    W->recv[r] += on;
    W->recv[P + r] += tot - on;
  } else { /* everything inside the node but what it relays itself (owned at its local index elsewhere; its own excluded) */
    const double *bl = W->BL + (size_t)W->local[r] * (W->C + 1);
    W->recv[r] += tot - (bl[k2] - bl[k1] - own);
  }
}

/* node n saw key chunks k1..k2-1 (hierarchical): each relay's share crosses the network */
static void node_span(Sweep *W, int n, int k1, int k2)
{
  for (int l = 0; l < W->G; l++) {
    int r = W->nranks_of[n * W->G + l];
    const double *bl = W->BL + (size_t)l * (W->C + 1);
    W->recv[W->P + r] += bl[k2] - bl[k1] - own_bytes(W, r, k1, k2);
  }
}

static void sweep_add(Sweep *W, int q, int d, int k)
{
  int r = W->owner[q], n = W->node[r];
  if (d > 0) {
    if (W->cnt[r]++ == 0) W->enter[r] = k;
    if (!W->flat && W->ncnt[n]++ == 0) W->nenter[n] = k;
  } else {
    if (--W->cnt[r] == 0) rank_span(W, r, W->enter[r], k);
    if (!W->flat && --W->ncnt[n] == 0) node_span(W, n, W->nenter[n], k);
  }
}

/* from the spans of key chunk a (na of them, sorted, disjoint; none for a < 0) to those of b, at chunk k */
static void sweep_step(Sweep *W, const FMDistSpan *sa, int na, const FMDistSpan *sb, int nb, int k)
{
  int i = 0, j = 0;
  /* removals first (a rank leaving and entering at k then makes two abutting intervals: the same sum) */
  for (int pass = 0; pass < 2; pass++) {
    const FMDistSpan *x = pass ? sb : sa, *y = pass ? sa : sb;
    int nx = pass ? nb : na, ny = pass ? na : nb;
    j = 0;
    for (i = 0; i < nx; i++)
      for (int q = x[i].lo; q < x[i].hi;) { /* q in x's span i: in y? */
        while (j < ny && y[j].hi <= q) j++;
        if (j < ny && y[j].lo <= q) { q = y[j].hi; continue; } /* covered by y: skip the overlap */
        {
          int e = j < ny && y[j].lo < x[i].hi ? y[j].lo : x[i].hi;
          for (; q < e; q++) sweep_add(W, q, pass ? 1 : -1, k);
        }
      }
  }
}

static int commrecv_sweep(const FMDistChunkVis *v, const FMDistTopo *t, FMDistRouteType type, const int *owner, const double *cbytes, double *recv)
{
  int P = t->nranks, C = v->nchunks, G = t->nsize[0], N = t->nnodes, ok = 1;
  size_t need;
  char *mem;
  Sweep W;
  double total = 0;
  for (int n = 0; n < N; n++) ok &= t->nsize[n] == G;
  for (int c = 0; c < C && ok; c++) { ok &= cbytes[c] >= 0 && cbytes[c] == (double)(int64_t)cbytes[c]; total += cbytes[c]; }
  if (!ok || total > 9e15 || (double)G * (C + 1) > 8.0 * v->size + 1e5) return 0;
  need = sizeof(double) * ((size_t)C + 1 + (size_t)G * (C + 1) + (size_t)C + N + 1) + sizeof(int) * (3 * (size_t)P + 2 * (size_t)N + 2 * (size_t)C + N + 1);
  mem = (char *)calloc(1, need);
  if (!mem) return 0;
  memset(&W, 0, sizeof(W));
  W.P = P; W.C = C; W.G = G; W.flat = type == FM_DIST_ROUTE_FLAT;
  W.owner = owner; W.node = t->node; W.local = t->local; W.nranks_of = t->nranks_of; W.b = cbytes; W.recv = recv;
  {
    double *B = (double *)mem, *BL = B + C + 1, *nB = BL + (size_t)G * (C + 1);
    int *ip = (int *)(nB + C + N + 1), *rhead = ip, *rnext = rhead + P, *nofs = rnext + C, *nch = nofs + N + 1;
    W.cnt = nch + C; W.enter = W.cnt + P; W.ncnt = W.enter + P; W.nenter = W.ncnt + N;
    B[0] = 0;
    for (int c = 0; c < C; c++) B[c + 1] = B[c] + cbytes[c];
    for (int l = 0; l < G; l++) {
      double *bl = BL + (size_t)l * (C + 1);
      bl[0] = 0;
      for (int c = 0; c < C; c++) bl[c + 1] = bl[c] + (t->local[owner[c]] == l ? cbytes[c] : 0);
    }
    for (int r = 0; r < P; r++) rhead[r] = -1;
    for (int c = C - 1; c >= 0; c--) { rnext[c] = rhead[owner[c]]; rhead[owner[c]] = c; }
    for (int c = 0; c < C; c++) nofs[t->node[owner[c]] + 1]++;
    for (int n = 0; n < N; n++) nofs[n + 1] += nofs[n];
    {
      int *fill = W.cnt; /* zero again below */
      for (int n = 0; n < N; n++) fill[n] = nofs[n];
      for (int c = 0; c < C; c++) nch[fill[t->node[owner[c]]]++] = c;
      for (int n = 0; n < N; n++) fill[n] = 0;
    }
    for (int n = 0; n < N; n++) {
      double *nb = nB + nofs[n] + n;
      nb[0] = 0;
      for (int i = nofs[n]; i < nofs[n + 1]; i++) nb[i - nofs[n] + 1] = nb[i - nofs[n]] + cbytes[nch[i]];
    }
    W.B = B; W.BL = BL; W.nB = nB; W.rhead = rhead; W.rnext = rnext; W.nofs = nofs; W.nch = nch;
  }
  for (int i = 0; i < 2 * P; i++) recv[i] = 0;
  for (int k = 0; k <= C; k++) {
    const FMDistSpan *sa = k > 0 ? v->q + v->kofs[k - 1] : NULL, *sb = k < C ? v->q + v->kofs[k] : NULL;
    int na = k > 0 ? v->kofs[k] - v->kofs[k - 1] : 0, nb = k < C ? v->kofs[k + 1] - v->kofs[k] : 0;
    sweep_step(&W, sa, na, sb, nb, k);
  }
  free(mem);
  return 1;
}

/*
 * The route's receives without building it: for key chunk k, the ranks owning a query chunk
 * that sees it (stamped once each) get it from the owner (flat), or on the hierarchical route
 * the owner's node gets it from the owner and each other node once through its relay (the
 * rank with the owner's local index modulo the node size, FMDistRouteBuild), which forwards it.
 */
void FMDistCommRecv(const FMDistChunkVis *v, const FMDistTopo *t, FMDistRouteType type, const int *owner, const double *cbytes, int *scratch,
                    double *recv)
{
  int P = t->nranks, *rmark = scratch, *nmark = scratch + P;
  if (commrecv_sweep(v, t, type, owner, cbytes, recv)) return;
  for (int i = 0; i < 2 * P; i++) recv[i] = 0;
  for (int r = 0; r < P; r++) rmark[r] = -1;
  for (int n = 0; n < t->nnodes; n++) nmark[n] = -1;
  for (int k = 0; k < v->nchunks; k++) {
    int o = owner[k], on = t->node[o];
    double b = cbytes[k];
    if (b <= 0) continue;
    for (int i = v->kofs[k]; i < v->kofs[k + 1]; i++)
      for (int q = v->q[i].lo; q < v->q[i].hi; q++) {
        int r = owner[q], n = t->node[r];
        if (r == o || rmark[r] == k) continue;
        rmark[r] = k;
        if (type == FM_DIST_ROUTE_FLAT || n == on) { recv[(size_t)P * (n != on) + r] += b; continue; }
        {
          int relay = t->nranks_of[t->nfirst[n] + t->local[o] % t->nsize[n]];
          if (nmark[n] != k) { nmark[n] = k; recv[P + relay] += b; }
          if (r != relay) recv[r] += b;
        }
      }
  }
}
