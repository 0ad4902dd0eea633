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
