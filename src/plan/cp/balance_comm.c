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

#ifndef FM_COMM_VIS_MAX
#define FM_COMM_VIS_MAX (1L << 22) /* visibility size above which the candidate is not scored (a few ms per score) */
#endif

/* SortItem: chunks by weight descending, then index */
typedef struct { int64_t w; int c; } SortItem;

static int cmp_item(const void *a, const void *b)
{
  const SortItem *x = (const SortItem *)a, *y = (const SortItem *)b;
  if (x->w != y->w) return x->w > y->w ? -1 : 1;
  return (x->c > y->c) - (x->c < y->c);
}

/*
 * The node-local start: chunks cut into contiguous node ranges whose work is proportional to
 * the node's ranks (each cut at the chunk boundary nearest its target), then LPT of each
 * range over its node's ranks (heaviest first onto the least loaded, ties to the lower rank).
 */
static FMErrorCode node_start(int n, const int64_t *w, const FMDistTopo *t, int *owner, int64_t *load)
{
  int P = t->nranks, c0 = 0;
  int64_t total = 0, pre = 0;
  SortItem *it;
  FMCall(FMMalloc(n, &it));
  for (int c = 0; c < n; c++) total += w[c];
  for (int r = 0; r < P; r++) load[r] = 0;
  for (int nd = 0; nd < t->nnodes; nd++) {
    const int *rk = t->nranks_of + t->nfirst[nd];
    int c1 = c0, m = 0;
    double target = (double)total * t->nfirst[nd + 1] / P;
    if (nd == t->nnodes - 1) c1 = n;
    else {
      while (c1 < n && (double)(pre + w[c1]) <= target) pre += w[c1++];
      if (c1 < n && (double)(pre + w[c1]) - target < target - (double)pre) pre += w[c1++]; /* the nearer boundary */
    }
    for (int c = c0; c < c1; c++) { it[m].w = w[c]; it[m].c = c; m++; }
    qsort(it, (size_t)m, sizeof(*it), cmp_item);
    for (int i = 0; i < m; i++) {
      int best = rk[0];
      for (int l = 1; l < t->nsize[nd]; l++)
        if (load[rk[l]] < load[best] || (load[rk[l]] == load[best] && rk[l] < best)) best = rk[l];
      owner[it[i].c] = best;
      load[best] += it[i].w;
    }
    c0 = c1;
  }
  free(it);
  return FM_SUCCESS;
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
  FMDistBalanceInfo ci;
  FMErrorCode ierr = FM_SUCCESS;
  memset(&loc, 0, sizeof(loc));
  memset(&ci, 0, sizeof(ci));
  FMCheck(v && v->nchunks == n, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "The chunk visibility has %d chunks; expected %d", v ? v->nchunks : -1, n);
  FMCall(FMDistBalance(n, w, P, owner, &loc.work));
  FMCallGoto(FMMalloc(n, &own2));
  FMCallGoto(FMMalloc(P, &work));
  FMCallGoto(FMMalloc(2 * (size_t)P, &recv));
  FMCallGoto(FMMalloc((size_t)P + t->nnodes, &scratch));
  score(v, n, w, cbytes, t, type, cm, owner, work, recv, scratch, &loc.step[0], &loc.inter[0], &loc.intra[0], &loc.max[0]);
  if (P < 2 || t->nnodes < 2 || !prune || v->size > FM_COMM_VIS_MAX) { loc.skipped = 1; goto cleanup; }
  FMCallGoto(node_start(n, w, t, own2, work));
  FMCallGoto(FMDistBalanceImprove_Private(n, w, P, t->node, own2, work, &ci));
  score(v, n, w, cbytes, t, type, cm, own2, work, recv, scratch, &loc.step[1], &loc.inter[1], &loc.intra[1], &loc.max[1]);
  if (loc.step[1] <= loc.step[0] && loc.inter[1] <= loc.inter[0] && (loc.step[1] < loc.step[0] || loc.inter[1] < loc.inter[0])) {
    loc.kept = 1;
    memcpy(owner, own2, sizeof(int) * (size_t)n);
  }
cleanup:
  free(own2); free(work); free(recv); free(scratch);
  if (info) *info = loc;
  return ierr;
}
