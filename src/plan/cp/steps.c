/*
 * steps.c - the exchange steps of a schedule (used by the GPU executor: setup_gpu.c).
 *
 * Every transfer gets a step key that its sender and its receiver compute alike:
 *   gather: (hop, (dst - src) mod P, position of the chunk among the transfers of that hop
 *           from src to dst, in chunk order, divided by group; 0 when group <= 0)
 *   ring:   (t) - at step t = 1..P-1 rank r receives from r-1 every chunk owned by r-t.
 * The distinct keys, sorted, are the steps 0..nsteps-1. A step is meant to be posted as one
 * unit (an NCCL group) on every rank: then it completes as soon as every rank has posted it,
 * whatever the other steps do, so executing the steps in order cannot deadlock. Within a step
 * the transfers are ordered by (src, chunk), so the transfers between one pair of ranks are
 * posted in the same order on both sides. A relay's second hop has a larger hop number than
 * its first, and the ring forwards at step t what arrived at step t-1, so a rank only ever
 * sends chunks it owns or received in an earlier step (test_dist_plan checks all of this).
 * Pure: no MPI.
 */
#include <flashmask/private/fmdist.h>
#include <stdlib.h>

typedef struct {
  int a, b, c;
  FMDistStepXfer x;
} Keyed;

static int cmp_pair(const void *u, const void *v)
{
  const Keyed *p = (const Keyed *)u, *q = (const Keyed *)v;
  if (p->a != q->a) return p->a < q->a ? -1 : 1;
  if (p->x.src != q->x.src) return p->x.src < q->x.src ? -1 : 1;
  if (p->x.dst != q->x.dst) return p->x.dst < q->x.dst ? -1 : 1;
  return (p->x.chunk > q->x.chunk) - (p->x.chunk < q->x.chunk);
}

static int cmp_key(const Keyed *p, const Keyed *q)
{
  if (p->a != q->a) return p->a < q->a ? -1 : 1;
  if (p->b != q->b) return p->b < q->b ? -1 : 1;
  return (p->c > q->c) - (p->c < q->c);
}

static int cmp_step(const void *u, const void *v)
{
  const Keyed *p = (const Keyed *)u, *q = (const Keyed *)v;
  int k = cmp_key(p, q);
  if (k) return k;
  if (p->x.src != q->x.src) return p->x.src < q->x.src ? -1 : 1;
  return (p->x.chunk > q->x.chunk) - (p->x.chunk < q->x.chunk);
}

/* whether a transfer src -> dst is kept: all of them (rank < 0) or those of rank */
static int keep(int rank, int src, int dst) { return rank < 0 || src == rank || dst == rank; }

/* The steps of every transfer (rank < 0) or of rank's transfers, numbered over those kept. */
static FMErrorCode steps_build(FMDistSchedType sched, const FMDistChunks *ch, const FMDistPartition *part, const FMDistTopo *topo,
                               const FMDistRoute *route, int group, int rank, int *n, FMDistStepXfer **x, int *nsteps)
{
  int P = part->nranks, m = 0, cnt = 0;
  Keyed *t;
  FMValidPointer(n, 7);
  FMValidPointer(x, 8);
  FMValidPointer(nsteps, 9);
  *n = 0; *x = NULL; *nsteps = 0;
  if (sched == FM_DIST_SCHED_RING) {
    for (int s = 1; s < P; s++)
      for (int r = 0; r < P; r++) {
        if (!keep(rank, (r - 1 + P) % P, r)) continue;
        int own = ((r - s) % P + P) % P;
        for (int b = part->rstart[own]; b < part->rstart[own + 1]; b++) cnt += FMDistChunkKeyLen(ch, part->rchunks[b]) > 0;
      }
  } else {
    FMValidPointer(route, 5);
    cnt = route->n;
  }
  FMCall(FMMalloc(cnt + 1, &t));
  if (sched == FM_DIST_SCHED_RING) {
    for (int s = 1; s < P; s++)
      for (int r = 0; r < P; r++) {
        int own = ((r - s) % P + P) % P, src = (r - 1 + P) % P;
        if (!keep(rank, src, r)) continue;
        for (int b = part->rstart[own]; b < part->rstart[own + 1]; b++) {
          int c = part->rchunks[b];
          if (FMDistChunkKeyLen(ch, c) <= 0) continue;
          t[m].a = s; t[m].b = 0; t[m].c = 0;
          t[m].x.chunk = c; t[m].x.src = src; t[m].x.dst = r;
          t[m].x.level = topo->node[src] != topo->node[r];
          m++;
        }
      }
  } else {
    for (int k = 0; k < route->n; k++) {
      const FMDistXfer *y = &route->x[k];
      if (!keep(rank, y->src, y->dst)) continue;
      t[m].a = y->stage; t[m].b = ((y->dst - y->src) % P + P) % P; t[m].c = 0;
      t[m].x.chunk = y->chunk; t[m].x.src = y->src; t[m].x.dst = y->dst; t[m].x.level = y->level;
      m++;
    }
    qsort(t, (size_t)m, sizeof(Keyed), cmp_pair);
    for (int k = 1; k < m; k++)
      if (t[k].a == t[k - 1].a && t[k].x.src == t[k - 1].x.src && t[k].x.dst == t[k - 1].x.dst) t[k].c = t[k - 1].c + 1;
    for (int k = 0; k < m; k++) t[k].c = group > 0 ? t[k].c / group : 0;
  }
  qsort(t, (size_t)m, sizeof(Keyed), cmp_step);
  {
    FMDistStepXfer *out;
    int s = -1;
    FMErrorCode ierr = FMMalloc(m + 1, &out);
    if (ierr) { free(t); FMCall(ierr); }
    for (int k = 0; k < m; k++) {
      if (k == 0 || cmp_key(&t[k], &t[k - 1])) s++;
      out[k] = t[k].x;
      out[k].step = s;
    }
    *n = m; *x = out; *nsteps = s + 1;
  }
  free(t);
  return FM_SUCCESS;
}

FMErrorCode FMDistExchangeSteps(FMDistSchedType sched, const FMDistChunks *ch, const FMDistPartition *part, const FMDistTopo *topo,
                                const FMDistRoute *route, int group, int *n, FMDistStepXfer **x, int *nsteps)
{
  FMCall(steps_build(sched, ch, part, topo, route, group, -1, n, x, nsteps));
  return FM_SUCCESS;
}

/*
 * FMDistExchangeStepsRank - the steps of rank's own transfers only (route may be the whole
 *   route or FMDistRouteBuildRank's), numbered 0..nsteps-1 over the keys of those transfers:
 *   the same transfers in the same order as FMDistExchangeSteps filtered to rank, with each
 *   step number replaced by its rank among the rank's steps. Every rank executes its steps in
 *   the global key order, so skipping the steps it has no part in cannot deadlock.
 */
FMErrorCode FMDistExchangeStepsRank(FMDistSchedType sched, const FMDistChunks *ch, const FMDistPartition *part, const FMDistTopo *topo,
                                    const FMDistRoute *route, int group, int rank, int *n, FMDistStepXfer **x, int *nsteps)
{
  FMCheck(rank >= 0 && rank < part->nranks, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "rank %d; expected 0..%d", rank, part->nranks - 1);
  FMCall(steps_build(sched, ch, part, topo, route, group, rank, n, x, nsteps));
  return FM_SUCCESS;
}
