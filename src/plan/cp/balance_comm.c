/*
 * balance_comm.c - the communication-aware balancer (-fm_plan_balance_comm): beside the
 * work-only balancer's partition, a node-local candidate that keeps neighbouring chunks (which
 * see the same keys under document-like masks) on one node, both scored by the one cost model
 * of cost.c; the candidate is kept only when it is no worse in predicted step and in bytes
 * across nodes. Deterministic and message free (doc/distributed.md).
 */
#include <flashmask/private/fmdist.h>
#include <stdlib.h>
#include <string.h>
#include <stdint.h>

#ifndef FM_COMM_BUDGET
#define FM_COMM_BUDGET (1L << 21) /* visibility entries the refinement may touch (about 2 ms on one core) */
#endif
#ifndef FM_COMM_VIS_MAX
#define FM_COMM_VIS_MAX (1L << 22) /* visibility size above which the candidate is not scored (a few ms per score) */
#endif

/*
 * The work-only partition's rank loads, given to other ranks: each rank's chunks (its bin) keep
 * together, the bins are sorted by the work-weighted mean of their chunk indices, or (median)
 * by the chunk where their weight passes half (ties: the old rank), and the i-th bin goes to the
 * i-th rank in node order (nodes in turn, each by local index). Every rank's work is one of the old loads, so the compute is the same; bins of
 * neighbouring chunks land on one node.
 */
typedef struct { double key; int r; } BinKey;

static int cmp_bin(const void *a, const void *b)
{
  const BinKey *x = (const BinKey *)a, *y = (const BinKey *)b;
  if (x->key != y->key) return x->key < y->key ? -1 : 1;
  return (x->r > y->r) - (x->r < y->r);
}

static FMErrorCode bin_permute(int n, const int64_t *w, const FMDistTopo *t, int median, const int *base, int *owner)
{
  int P = t->nranks, *to = NULL;
  double *sw = NULL, *sc = NULL;
  BinKey *bk = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  FMCallGoto(FMMalloc(P, &bk));
  FMCallGoto(FMCalloc(P, &sw));
  FMCallGoto(FMCalloc(P, &sc));
  FMCallGoto(FMMalloc(P, &to));
  for (int c = 0; c < n; c++) { sw[base[c]] += (double)w[c] + 1.0; sc[base[c]] += ((double)w[c] + 1.0) * c; } /* +1: empty chunks count */
  for (int r = 0; r < P; r++) { bk[r].key = sw[r] > 0 ? sc[r] / sw[r] : (double)n; bk[r].r = r; }
  if (median) /* the key is the chunk where the bin's weight passes its half instead */
    for (int r = 0; r < P; r++) { sc[r] = 0; bk[r].key = n; }
  for (int c = 0; c < n && median; c++) {
    int r = base[c];
    double before = sc[r];
    sc[r] += (double)w[c] + 1.0;
    if (before < 0.5 * sw[r] && sc[r] >= 0.5 * sw[r]) bk[r].key = c;
  }
  qsort(bk, (size_t)P, sizeof(*bk), cmp_bin);
  for (int i = 0; i < P; i++) to[bk[i].r] = t->nranks_of[i]; /* nranks_of lists the ranks node by node */
  for (int c = 0; c < n; c++) owner[c] = to[base[c]];
cleanup:
  free(bk); free(sw); free(sc); free(to);
  return ierr;
}

/*
 * Bin swaps that lower the bytes across nodes: two ranks on different nodes exchange their
 * whole chunk sets (so the multiset of loads, and the compute, stays), when that lowers
 * sum_k bytes(k) x (nodes other than k's owner's that see k), the hierarchical route's
 * cross-node bytes, kept exact under the moves by cnt[node][k] (the node's query chunks that
 * see key chunk k). Partners are the next `window` ranks in node order; a few sweeps.
 */
typedef struct {
  int C, N, *knode, *cnt, *vto;    /* vto[q + 1] - vto[q]: the number of key chunks query chunk q sees */
  int *vs, *vl; FMDistSpan *vk;     /* they are the runs vk[vs[q] .. vs[q] + vl[q]) (rows may share runs) */
  const double *b;
  double inter;
  long budget;   /* work units left (visibility entries touched): the same bounded work on every rank */
} Swap;

static void move_chunk(Swap *S, int q, int A, int B)
{
  int *ca = S->cnt + (size_t)A * S->C, *cb = S->cnt + (size_t)B * S->C;
  S->inter += S->b[q] * ((ca[q] > 0) - (cb[q] > 0)); /* q's K/V now leaves from B */
  S->knode[q] = B;
  S->budget -= 1 + S->vto[q + 1] - S->vto[q];
  for (int i = S->vs[q]; i < S->vs[q] + S->vl[q]; i++)
    for (int k = S->vk[i].lo; k < S->vk[i].hi; k++) {
      if (--ca[k] == 0 && S->knode[k] != A) S->inter -= S->b[k];
      if (cb[k]++ == 0 && S->knode[k] != B) S->inter += S->b[k];
    }
}

/* the change of the bytes across nodes if rank x's chunks (on node A) moved to node B; S unchanged */
static double bin_gain(Swap *S, const int *head, const int *next, int x, int A, int B)
{
  double before = S->inter, g;
  for (int c = head[x]; c >= 0; c = next[c]) move_chunk(S, c, A, B);
  g = S->inter - before;
  for (int c = head[x]; c >= 0; c = next[c]) move_chunk(S, c, B, A);
  S->inter = before;
  return g;
}

#define FM_GAIN_SPAN 3 /* node offsets -3..3 whose bin moves are cached */

/*
 * The sweeps of bin swaps; head/next: each rank's chunks. The swap of x (node A) with y
 * (node B), a partner among the next `window` ranks in node order, is tried only when moving x
 * to B and y to A one at a time would lower the bytes across nodes together (each single move's
 * change, cached per rank and node offset, refreshed each sweep and for the ranks that swapped);
 * then it is applied for real and kept when the bytes drop.
 */
static FMErrorCode swap_sweeps(Swap *S, const FMDistTopo *t, int *head, int *next, int *owner)
{
  int P = t->nranks, window = 2 * (P / t->nnodes) + 2, span = 2 * FM_GAIN_SPAN + 1;
  double *gain;
  unsigned char *have = NULL;
  FMCall(FMMalloc((size_t)P * span, &gain));
  if (FMMalloc((size_t)P * span, &have)) { free(gain); FMRaise(MPI_COMM_SELF, FM_ERR_MEM, "Out of memory for the bin swaps of %d ranks", P); }
  for (int sweep = 0, better = 1; sweep < 4 && better && S->budget > 0; sweep++) {
    better = 0;
    memset(have, 0, (size_t)P * span);
    for (int i = 0; i < P && S->budget > 0; i++)
      for (int j = i + 1; j < P && j <= i + window && S->budget > 0; j++) {
        int x = t->nranks_of[i], y = t->nranks_of[j], A = t->node[x], B = t->node[y], h, d = B - A;
        double before = S->inter;
        if (A == B) continue;
        if (d >= -FM_GAIN_SPAN && d <= FM_GAIN_SPAN) {
          size_t ix = (size_t)x * span + (size_t)(d + FM_GAIN_SPAN), iy = (size_t)y * span + (size_t)(FM_GAIN_SPAN - d);
          if (!have[ix]) { gain[ix] = bin_gain(S, head, next, x, A, B); have[ix] = 1; }
          if (!have[iy]) { gain[iy] = bin_gain(S, head, next, y, B, A); have[iy] = 1; }
          if (gain[ix] + gain[iy] > -0.5) continue; /* together no gain: not tried */
        }
        for (int c = head[x]; c >= 0; c = next[c]) move_chunk(S, c, A, B);
        for (int c = head[y]; c >= 0; c = next[c]) move_chunk(S, c, B, A);
        if (S->inter < before - 0.5) { /* bytes are whole numbers: a real gain */
          for (int c = head[x]; c >= 0; c = next[c]) owner[c] = y;
          for (int c = head[y]; c >= 0; c = next[c]) owner[c] = x;
          h = head[x]; head[x] = head[y]; head[y] = h;
          memset(have + (size_t)x * span, 0, (size_t)span);
          memset(have + (size_t)y * span, 0, (size_t)span);
          better = 1;
        } else {
          for (int c = head[x]; c >= 0; c = next[c]) move_chunk(S, c, B, A);
          for (int c = head[y]; c >= 0; c = next[c]) move_chunk(S, c, A, B);
          S->inter = before;
        }
      }
  }
  free(gain); free(have);
  return FM_SUCCESS;
}

/*
 * Single chunks to the node that needs their K/V (cnt[node][q] > 0): moved onto its least
 * loaded rank when that rank stays at or below cap (the work-only partition's heaviest load,
 * or the work its step pays for, so the compute of the step cannot grow), else swapped with a
 * chunk p of that node that q's node needs, when both ranks stay at or below cap; applied when
 * the bytes across nodes drop. Chunks in ascending order, nodes ascending, a few sweeps;
 * nl/noff [n], [N + 1] scratch (each node's chunks at the sweep's start).
 */
static void chunk_moves(Swap *S, const int64_t *w, const FMDistTopo *t, int64_t cap, int64_t *load, int *owner, int *nl, int *noff)
{
  int n = S->C;
  for (int sweep = 0, better = 1; sweep < 3 && better && S->budget > 0; sweep++) {
    better = 0;
    for (int nd = 0; nd <= S->N; nd++) noff[nd] = 0;
    for (int c = 0; c < n; c++) noff[S->knode[c] + 1]++;
    for (int nd = 0; nd < S->N; nd++) noff[nd + 1] += noff[nd];
    for (int c = 0, *f = nl; c < n; c++) f[noff[S->knode[c]]++] = c; /* noff[nd] is now node nd's end */
    for (int nd = S->N; nd > 0; nd--) noff[nd] = noff[nd - 1];
    noff[0] = 0;
    for (int q = 0; q < n && S->budget > 0; q++)
      for (int nd = 0; nd < S->N; nd++) {
        int x = owner[q], A = t->node[x], y = -1, done = 0;
        const int *rk = t->nranks_of + t->nfirst[nd];
        double before = S->inter;
        if (nd == A || S->cnt[(size_t)nd * n + q] == 0) continue;
        for (int l = 0; l < t->nsize[nd]; l++)
          if (y < 0 || load[rk[l]] < load[y]) y = rk[l];
        if (load[y] + w[q] <= cap) {
          move_chunk(S, q, A, nd);
          if (S->inter < before - 0.5) { owner[q] = y; load[x] -= w[q]; load[y] += w[q]; better = done = 1; }
          else { move_chunk(S, q, nd, A); S->inter = before; }
        }
        for (int i = noff[nd]; i < noff[nd + 1] && !done && S->budget > 0; i++) {
          int p = nl[i], yp = owner[p];
          if (S->knode[p] != nd || S->cnt[(size_t)A * n + p] == 0) continue; /* moved since, or not needed on A */
          if (load[x] - w[q] + w[p] > cap || load[yp] - w[p] + w[q] > cap) continue;
          move_chunk(S, q, A, nd);
          move_chunk(S, p, nd, A);
          if (S->inter < before - 0.5) {
            owner[q] = yp; owner[p] = x;
            load[x] += w[p] - w[q]; load[yp] += w[q] - w[p];
            better = done = 1;
          } else {
            move_chunk(S, p, A, nd);
            move_chunk(S, q, nd, A);
            S->inter = before;
          }
        }
      }
  }
}

/* S's counts, owner nodes and bytes across nodes for the assignment owner (vt built) */
static void swap_load(Swap *S, const FMDistTopo *t, const FMDistChunkVis *v, const int *owner, int *pre)
{
  int n = S->C;
  for (int c = 0; c < n; c++) S->knode[c] = t->node[owner[c]];
  S->inter = 0;
  if ((double)S->N * (n + v->nspan) < (double)v->size) { /* by node: cnt from prefix counts of the node's query chunks, O(nodes x spans) */
    for (int nd = 0; nd < S->N; nd++) {
      int *cn = S->cnt + (size_t)nd * n;
      pre[0] = 0;
      for (int q = 0; q < n; q++) pre[q + 1] = pre[q] + (S->knode[q] == nd);
      for (int k = 0; k < n; k++) {
        int c = 0;
        for (int i = v->kofs[k]; i < v->kofs[k + 1]; i++) c += pre[v->q[i].hi] - pre[v->q[i].lo];
        cn[k] = c;
        if (c > 0 && S->knode[k] != nd) S->inter += S->b[k]; /* whole byte numbers: the sum is exact in any order */
      }
    }
    return;
  }
  memset(S->cnt, 0, sizeof(int) * (size_t)S->N * n);
  for (int c = 0; c < n; c++) {
    int *cn = S->cnt + (size_t)S->knode[c] * n;
    for (int i = S->vs[c]; i < S->vs[c] + S->vl[c]; i++)
      for (int k = S->vk[i].lo; k < S->vk[i].hi; k++)
        if (cn[k]++ == 0 && S->knode[k] != S->knode[c]) S->inter += S->b[k];
  }
}

/*
 * The rows of the visibility's transpose, as runs of consecutive key chunks: row q (the key
 * chunks whose spans hold query chunk q) is vk[vs[q] .. vs[q] + vl[q]), ascending. A sweep
 * over q keeps the key chunks of the spans covering q in a bitmap (a key chunk's spans are
 * disjoint, so one bit each), set at a span's start and cleared at its end; a row whose bitmap
 * did not change since the last row shares that row's runs. So the transpose costs the bitmap
 * scans of the rows that change (under document masks, one per document, or one per query chunk
 * under causal ones, each n / 64 words) and its runs, not the visibility's size. Its users
 * only count and add whole byte numbers, so the order of a row does not matter.
 */
static FMErrorCode transpose_runs(const FMDistChunkVis *v, int n, Swap *S)
{
  int ns = v->nspan, nw = (n + 63) / 64, *buf, *soff, *eoff, *sl, *el, *spk, nr = 0, cap = 2 * n + 16;
  uint64_t *bits = NULL;
  FMDistSpan *runs = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  FMCall(FMCalloc(2 * ((size_t)n + 2) + 3 * (size_t)ns + 1, &buf));
  soff = buf; eoff = soff + n + 2; sl = eoff + n + 2; el = sl + ns; spk = el + ns;
  FMCallGoto(FMCalloc((size_t)nw + 1, &bits));
  FMCallGoto(FMMalloc(cap, &runs));
  FMCallGoto(FMMalloc(n + 1, &S->vs));
  FMCallGoto(FMMalloc(n + 1, &S->vl));
  for (int i = 0; i < ns; i++) { soff[v->q[i].lo + 1]++; eoff[v->q[i].hi + 1]++; }
  for (int q = 0; q <= n; q++) { soff[q + 1] += soff[q]; eoff[q + 1] += eoff[q]; }
  for (int k = 0; k < n; k++)
    for (int i = v->kofs[k]; i < v->kofs[k + 1]; i++) { sl[soff[v->q[i].lo]++] = i; el[eoff[v->q[i].hi]++] = i; spk[i] = k; }
  for (int q = n; q > 0; q--) { soff[q] = soff[q - 1]; eoff[q] = eoff[q - 1]; } /* back to the bucket starts */
  soff[0] = eoff[0] = 0;
  for (int q = 0; q < n; q++) {
    int changed = q == 0;
    for (int e = eoff[q]; e < eoff[q + 1]; e++) { /* spans ending at q out */
      int i = el[e];
      if (v->q[i].lo >= v->q[i].hi) continue;
      bits[spk[i] >> 6] &= ~((uint64_t)1 << (spk[i] & 63)); changed = 1;
    }
    for (int e = soff[q]; e < soff[q + 1]; e++) { /* spans starting at q in */
      int i = sl[e];
      if (v->q[i].lo >= v->q[i].hi) continue;
      bits[spk[i] >> 6] |= (uint64_t)1 << (spk[i] & 63); changed = 1;
    }
    if (!changed) { S->vs[q] = S->vs[q - 1]; S->vl[q] = S->vl[q - 1]; continue; }
    S->vs[q] = nr;
    for (int wi = 0, in = 0, lo = 0; wi <= nw; wi++) { /* runs of ones; wi == nw closes the last one */
      uint64_t x = wi < nw ? bits[wi] : 0;
      for (int pos = 0; pos < 64;) {
        uint64_t m = (in ? ~x : x) & (pos ? ~(((uint64_t)1 << pos) - 1) : ~(uint64_t)0); /* the next change at or after pos */
        int b;
        if (!m) break;
        b = __builtin_ctzll(m);
        if (!in) { lo = wi * 64 + b; in = 1; }
        else {
          if (nr == cap) {
            FMDistSpan *t2 = (FMDistSpan *)realloc(runs, sizeof(*runs) * 2 * (size_t)cap);
            FMCheckGoto(t2 != NULL, MPI_COMM_SELF, FM_ERR_MEM, "Out of memory for %d visibility runs", 2 * cap);
            runs = t2; cap *= 2;
          }
          runs[nr].lo = lo; runs[nr].hi = wi * 64 + b; nr++;
          in = 0;
        }
        pos = b + 1;
      }
    }
    S->vl[q] = nr - S->vs[q];
  }
  S->vk = runs; runs = NULL;
cleanup:
  free(buf); free(bits); free(runs);
  return ierr;
}

/* the bytes across nodes of owner on the hierarchical route; recv [2P], scratch [P + nnodes] */
static double start_inter(const FMDistChunkVis *v, const FMDistTopo *t, const double *cbytes, const int *owner, double *recv, int *scratch)
{
  double x = 0;
  FMDistCommRecv(v, t, FM_DIST_ROUTE_HIER, owner, cbytes, scratch, recv);
  for (int r = 0; r < t->nranks; r++) x += recv[t->nranks + r];
  return x;
}

/*
 * The refinement: from the work-only partition base, or its bins in node order (bin_permute,
 * by mean or median chunk) when that moves fewer bytes across nodes, bin swaps (half the work
 * budget), then single-chunk moves and swaps under cap (the rest). owner out [n]; load [P] scratch.
 */
static FMErrorCode refine(const FMDistChunkVis *v, int n, const int64_t *w, const double *cbytes, const FMDistTopo *t, int64_t cap,
                          int64_t *load, const int *base, int *owner)
{
  Swap S;
  int P = t->nranks, *head = NULL, *next = NULL, *head2 = NULL, *trial = NULL, *pre = NULL, *scratch = NULL;
  double ib, *recv = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  memset(&S, 0, sizeof(S));
  S.C = n; S.N = t->nnodes; S.b = cbytes; S.budget = FM_COMM_BUDGET / 2;
  FMCallGoto(FMMalloc(n, &S.knode));
  FMCallGoto(FMMalloc((size_t)S.N * n, &S.cnt));
  FMCallGoto(FMCalloc((size_t)n + 2, &S.vto));
  FMCallGoto(FMMalloc(P, &head));
  FMCallGoto(FMMalloc(n, &next));
  FMCallGoto(FMMalloc((size_t)t->nnodes + 1, &head2));
  FMCallGoto(FMMalloc(n, &trial));
  FMCallGoto(FMMalloc((size_t)n + 1, &pre));
  FMCallGoto(FMMalloc(2 * (size_t)P, &recv));
  FMCallGoto(FMMalloc((size_t)P + t->nnodes, &scratch));
  /* the transpose of the visibility, by query chunk */
  for (int i = 0; i < v->nspan; i++) { S.vto[v->q[i].lo + 1]++; S.vto[v->q[i].hi + 1]--; } /* counts by differences */
  for (int q = 0; q < n; q++) S.vto[q + 1] += S.vto[q];
  for (int q = 0; q < n; q++) S.vto[q + 1] += S.vto[q];
  FMCallGoto(transpose_runs(v, n, &S));
  /* the start: base, or its bins ordered by their mean or their median chunk, whichever moves
     least across nodes (the hierarchical route's receives across nodes, FMDistCommRecv: the
     same whole-byte sum as swap_load's, without the node counts), then loaded into S */
  ib = start_inter(v, t, cbytes, base, recv, scratch);
  memcpy(owner, base, sizeof(int) * (size_t)n);
  for (int med = 0; med < 2; med++) {
    double x;
    FMCallGoto(bin_permute(n, w, t, med, base, trial));
    x = start_inter(v, t, cbytes, trial, recv, scratch);
    if (x < ib) { ib = x; memcpy(owner, trial, sizeof(int) * (size_t)n); }
  }
  swap_load(&S, t, v, owner, pre);
  for (int r = 0; r < P; r++) head[r] = -1;
  for (int c = n - 1; c >= 0; c--) { next[c] = head[owner[c]]; head[owner[c]] = c; }
  FMCallGoto(swap_sweeps(&S, t, head, next, owner));
  S.budget += FM_COMM_BUDGET / 2;
  for (int r = 0; r < P; r++) load[r] = 0;
  for (int c = 0; c < n; c++) load[owner[c]] += w[c];
  chunk_moves(&S, w, t, cap, load, owner, next, head2);
cleanup:
  free(S.knode); free(S.cnt); free(S.vto); free(S.vs); free(S.vl); free(S.vk); free(head); free(next); free(head2); free(trial); free(pre); free(recv); free(scratch);
  return ierr;
}

/* Score of an assignment under the model: predicted step, bytes across and inside nodes, max work. */
static void score(const FMDistChunkVis *v, int n, const int64_t *w, const double *cbytes, const FMDistTopo *t, FMDistRouteType type,
                  const FMDistCostModel *cm, const int *owner, int64_t *work, double *recv, int *scratch, double *step, double *inter,
                  double *intra, int64_t *max)
{
  int P = t->nranks;
  double tp[3];
  for (int r = 0; r < P; r++) work[r] = 0;
  for (int c = 0; c < n; c++) work[owner[c]] += w[c];
  FMDistCommRecv(v, t, type, owner, cbytes, scratch, recv);
  FMDistPredict(cm, P, work, recv, tp);
  *step = tp[2];
  *inter = *intra = 0;
  *max = 0;
  for (int r = 0; r < P; r++) {
    *intra += recv[r];
    *inter += recv[P + r];
    if (work[r] > *max) *max = work[r];
  }
}

FMErrorCode FMDistBalanceComm(const FMDistChunkVis *v, int n, const int64_t *w, const double *cbytes, const FMDistTopo *t, FMDistRouteType type,
                              int prune, const FMDistCostModel *cm, int *owner, FMDistCommInfo *info)
{
  int P = t->nranks, *own2 = NULL, *scratch = NULL;
  int64_t *work = NULL;
  double *recv = NULL;
  FMDistCommInfo loc;
  FMErrorCode ierr = FM_SUCCESS;
  memset(&loc, 0, sizeof(loc));
  FMCheck(v && v->nchunks == n, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "The chunk visibility has %d chunks; expected %d", v ? v->nchunks : -1, n);
  FMCall(FMDistBalance(n, w, P, owner, &loc.work));
  FMCallGoto(FMMalloc(n, &own2));
  FMCallGoto(FMMalloc(P, &work));
  FMCallGoto(FMMalloc(2 * (size_t)P, &recv));
  FMCallGoto(FMMalloc((size_t)P + t->nnodes, &scratch));
  score(v, n, w, cbytes, t, type, cm, owner, work, recv, scratch, &loc.step[0], &loc.inter[0], &loc.intra[0], &loc.max[0]);
  if (P < 2 || t->nnodes < 2 || !prune || v->size > FM_COMM_VIS_MAX) { loc.skipped = 1; goto cleanup; }
  {
    /* the work cap of the moves: the work-only partition's heaviest load, or more when its step
       is the exchange's (compute up to that step costs nothing) */
    int64_t cap = loc.max[0];
    if (cm->unit_s > 0 && loc.step[0] / cm->unit_s > (double)cap) cap = (int64_t)(loc.step[0] / cm->unit_s);
    FMCallGoto(refine(v, n, w, cbytes, t, cap, work, owner, own2));
    score(v, n, w, cbytes, t, type, cm, own2, work, recv, scratch, &loc.step[1], &loc.inter[1], &loc.intra[1], &loc.max[1]);
  }
  if (loc.step[1] <= loc.step[0] && loc.inter[1] <= loc.inter[0] && (loc.step[1] < loc.step[0] || loc.inter[1] < loc.inter[0])) {
    loc.kept = 1;
    memcpy(owner, own2, sizeof(int) * (size_t)n);
  }
cleanup:
  free(own2); free(work); free(recv); free(scratch);
  if (info) *info = loc;
  return ierr;
}

/* FMDistPartitionPlan - see fmdist.h. */
FMErrorCode FMDistPartitionPlan(FMDistPartType type, int balance_comm, const FMDistTileMap *tm, const FMDistChunks *ch, const int64_t *w,
                                const double *cbytes, const FMDistTopo *t, FMDistRouteType route, int prune, const FMDistCostModel *cm,
                                FMDistPartition *part, FMDistBalanceInfo *info, FMDistCommInfo *cinfo)
{
  FMDistChunkVis v;
  FMDistCommInfo ci;
  int *owner = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  memset(&ci, 0, sizeof(ci));
  ci.skipped = 1;
  if (cinfo) *cinfo = ci;
  if (type != FM_DIST_BALANCED || !balance_comm || !prune || t->nnodes < 2) { /* nothing to trade: the work-only answer, no visibility */
    FMCall(FMDistPartitionCreate(type, ch->nchunks, t->nranks, w, part, info));
    return FM_SUCCESS;
  }
  memset(&v, 0, sizeof(v));
  FMCallGoto(FMMalloc(ch->nchunks, &owner));
  FMCallGoto(FMDistChunkVisCreate(tm, ch, &v));
  FMCallGoto(FMDistBalanceComm(&v, ch->nchunks, w, cbytes, t, route, prune, cm, owner, &ci));
  FMCallGoto(FMDistPartitionFromOwner(ch->nchunks, t->nranks, owner, w, part));
  if (info) *info = ci.work;
  if (cinfo) *cinfo = ci;
cleanup:
  free(owner);
  FMDistChunkVisDestroy(&v);
  return ierr;
}
