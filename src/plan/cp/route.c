/*
 * route.c - node / local-rank topology and the gather routes of the needed K/V chunks.
 * flat: every remote chunk goes from its owner straight to each rank that needs it.
 * hierarchical: a chunk needed on another node crosses the network once per node, between
 * ranks with the same local index (the owner and the node's relay), and the relay then
 * forwards it inside the node; ranks on the owner's node get it from the owner.
 */
#include <flashmask/private/fmdist.h>
#include <stdlib.h>
#include <string.h>

FMErrorCode FMDistTopoCreate(int nranks, const int *node, const int *local, FMDistTopo *t)
{
  int *fill;
  memset(t, 0, sizeof(*t));
  FMCheck(nranks >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "nranks is %d; expected >= 1", nranks);
  t->nranks = nranks;
  for (int r = 0; r < nranks; r++) {
    FMCheck(node[r] >= 0 && node[r] < nranks, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "node[%d] = %d; expected 0..%d", r, node[r],
            nranks - 1);
    if (node[r] + 1 > t->nnodes) t->nnodes = node[r] + 1;
  }
  FMCall(FMMalloc(nranks, &t->node));
  FMCall(FMMalloc(nranks, &t->local));
  FMCall(FMCalloc(t->nnodes, &t->nsize));
  FMCall(FMCalloc(t->nnodes + 1, &t->nfirst));
  FMCall(FMMalloc(nranks, &t->nranks_of));
  memcpy(t->node, node, sizeof(int) * (size_t)nranks);
  memcpy(t->local, local, sizeof(int) * (size_t)nranks);
  for (int r = 0; r < nranks; r++) t->nsize[node[r]]++;
  for (int n = 0; n < t->nnodes; n++) t->nfirst[n + 1] = t->nfirst[n] + t->nsize[n];
  FMCall(FMMalloc(t->nnodes, &fill));
  for (int n = 0; n < t->nnodes; n++) fill[n] = 0;
  for (int r = 0; r < nranks; r++) {
    int n = node[r];
    FMCheck(local[r] >= 0 && local[r] < t->nsize[n], MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
            "local[%d] = %d; expected 0..%d (node %d has %d ranks)", r, local[r], t->nsize[n] - 1, n, t->nsize[n]);
    t->nranks_of[t->nfirst[n] + local[r]] = r;
    fill[n]++;
  }
  free(fill);
  return FM_SUCCESS;
}

FMErrorCode FMDistTopoVirtual(int nranks, int nnodes, FMDistTopo *t)
{
  int *node, *local;
  FMErrorCode ierr;
  FMCheck(nnodes >= 1 && nnodes <= nranks, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "nnodes is %d; expected 1..%d", nnodes, nranks);
  FMCall(FMMalloc(nranks, &node));
  FMCall(FMMalloc(nranks, &local));
  for (int n = 0; n < nnodes; n++) {
    int r0 = (int)((long)n * nranks / nnodes), r1 = (int)((long)(n + 1) * nranks / nnodes);
    for (int r = r0; r < r1; r++) { node[r] = n; local[r] = r - r0; }
  }
  ierr = FMDistTopoCreate(nranks, node, local, t);
  free(node); free(local);
  FMCall(ierr);
  return FM_SUCCESS;
}

FMErrorCode FMDistTopoDestroy(FMDistTopo *t)
{
  if (!t) return FM_SUCCESS;
  FMFree(t->node); FMFree(t->local); FMFree(t->nsize); FMFree(t->nfirst); FMFree(t->nranks_of);
  return FM_SUCCESS;
}

static FMErrorCode push(FMDistRoute *rt, int *cap, int c, int src, int dst, int level, int stage, double b)
{
  if (rt->n == *cap) {
    FMDistXfer *nx;
    *cap = *cap ? 2 * *cap : 64;
    nx = (FMDistXfer *)realloc(rt->x, sizeof(*nx) * (size_t)*cap);
    FMCheck(nx != NULL, MPI_COMM_SELF, FM_ERR_MEM, "Out of memory for %d route entries", *cap);
    rt->x = nx;
  }
  rt->x[rt->n].chunk = c; rt->x[rt->n].src = src; rt->x[rt->n].dst = dst;
  rt->x[rt->n].level = level; rt->x[rt->n].stage = stage;
  rt->n++;
  rt->bytes[level] += b;
  return FM_SUCCESS;
}

FMErrorCode FMDistRouteBuild(FMDistRouteType type, const FMDistTopo *t, const FMDistPartition *part, const unsigned char *needed,
                             const double *bytes, FMDistRoute *rt)
{
  int C = part->nchunks, P = part->nranks, cap = 0;
  memset(rt, 0, sizeof(*rt));
  FMCheck(t->nranks == P, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "Topology has %d ranks, partition %d", t->nranks, P);
  for (int c = 0; c < C; c++) {
    int o = part->owner[c], on = t->node[o];
    double b = bytes ? bytes[c] : 1.0;
    if (b <= 0) continue; /* an empty key chunk: nothing to move */
    for (int r = 0; r < P; r++)
      if (r != o) {
        rt->allgather_bytes += b;
        if (needed[(size_t)r * C + c]) rt->needed_bytes += b;
      }
    if (type == FM_DIST_ROUTE_FLAT) {
      for (int r = 0; r < P; r++)
        if (r != o && needed[(size_t)r * C + c]) FMCall(push(rt, &cap, c, o, r, t->node[r] != on, 0, b));
      continue;
    }
    /* hierarchical: owner's node first (direct), then each other node through its relay */
    for (int n = 0; n < t->nnodes; n++) {
      const int *rk = t->nranks_of + t->nfirst[n];
      int any = 0, relay;
      if (n == on) {
        for (int l = 0; l < t->nsize[n]; l++)
          if (rk[l] != o && needed[(size_t)rk[l] * C + c]) FMCall(push(rt, &cap, c, o, rk[l], 0, 0, b));
        continue;
      }
      for (int l = 0; l < t->nsize[n]; l++) any |= needed[(size_t)rk[l] * C + c];
      if (!any) continue;
      relay = rk[t->local[o] % t->nsize[n]];
      FMCall(push(rt, &cap, c, o, relay, 1, 0, b));
      for (int l = 0; l < t->nsize[n]; l++)
        if (rk[l] != relay && needed[(size_t)rk[l] * C + c]) FMCall(push(rt, &cap, c, relay, rk[l], 0, 1, b));
    }
  }
  return FM_SUCCESS;
}

FMErrorCode FMDistRouteDestroy(FMDistRoute *rt)
{
  if (!rt) return FM_SUCCESS;
  FMFree(rt->x);
  rt->n = 0;
  return FM_SUCCESS;
}

/*
 * FMDistRouteBuildRank - the transfers of FMDistRouteBuild whose source or destination is
 * `rank`, in the same order, without building the others: the needers of rank (those of its
 * own chunks and of the chunks it relays, FMDistNeedersFromMatrix) and its own row, through
 * FMDistRouteBuildRankSparse. bytes[], needed_bytes and allgather_bytes count the rank's own
 * transfers and needs only (the received and remote chunks).
 */
FMErrorCode FMDistRouteBuildRank(FMDistRouteType type, const FMDistTopo *t, const FMDistPartition *part, const unsigned char *needed,
                                 const double *bytes, int rank, FMDistRoute *rt)
{
  FMDistNeeders nd;
  FMErrorCode ierr;
  memset(rt, 0, sizeof(*rt));
  FMCall(FMDistNeedersFromMatrix(type, t, part, needed, rank, &nd));
  ierr = FMDistRouteBuildRankSparse(type, t, part, needed + (size_t)rank * part->nchunks, &nd, bytes, rank, rt);
  FMDistNeedersDestroy(&nd);
  FMCall(ierr);
  return FM_SUCCESS;
}

/*
 * FMDistRouteBuildRankSparse - FMDistRouteBuild's logic for one rank, with NEED(r) read from a
 * scratch mark[P] that holds, while chunk c is handled, the needers the rank knows of
 * (all of them for an owned chunk, its node's for a relayed one) and its own need. The other
 * ranks' needs are never asked for: a rank that neither owns nor relays c acts only on its own.
 */
FMErrorCode FMDistRouteBuildRankSparse(FMDistRouteType type, const FMDistTopo *t, const FMDistPartition *part, const unsigned char *needed,
                                       const FMDistNeeders *nd, const double *bytes, int rank, FMDistRoute *rt)
{
  int C = part->nchunks, P = part->nranks, cap = 0, mn;
  unsigned char *mark;
  FMErrorCode ierr = FM_SUCCESS;
  memset(rt, 0, sizeof(*rt));
  FMCheck(t->nranks == P, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "Topology has %d ranks, partition %d", t->nranks, P);
  FMCheck(rank >= 0 && rank < P, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "rank %d; expected 0..%d", rank, P - 1);
  FMCheck(nd->nchunks == C, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "Needers of %d chunks, partition of %d", nd->nchunks, C);
  mn = t->node[rank];
  FMCall(FMCalloc(P, &mark));
#define NEED(r) mark[r]
  for (int c = 0; c < C && !ierr; c++) {
    int o = part->owner[c], on = t->node[o];
    double b = bytes ? bytes[c] : 1.0;
    if (b <= 0) continue;
    if (o != rank) {
      rt->allgather_bytes += b;
      if (needed[c]) rt->needed_bytes += b;
    }
    for (int k = nd->start[c]; k < nd->start[c + 1]; k++) mark[nd->rank[k]] = 1;
    mark[rank] = needed[c];
    if (type == FM_DIST_ROUTE_FLAT) {
      if (o == rank) {
        for (int r = 0; r < P && !ierr; r++)
          if (r != o && NEED(r)) ierr = push(rt, &cap, c, o, r, t->node[r] != on, 0, b);
      } else if (NEED(rank)) ierr = push(rt, &cap, c, o, rank, mn != on, 0, b);
    } else
      for (int n = o == rank ? 0 : mn; n < (o == rank ? t->nnodes : mn + 1) && !ierr; n++) { /* only the owner acts on other nodes */
        const int *rk = t->nranks_of + t->nfirst[n];
        int any = 0, relay;
        if (n == on) {
          for (int l = 0; l < t->nsize[n] && !ierr; l++)
            if (rk[l] != o && NEED(rk[l]) && (o == rank || rk[l] == rank)) ierr = push(rt, &cap, c, o, rk[l], 0, 0, b);
          continue;
        }
        for (int l = 0; l < t->nsize[n] && !any; l++) any |= NEED(rk[l]);
        if (!any) continue;
        relay = rk[t->local[o] % t->nsize[n]];
        if (o == rank || relay == rank) ierr = push(rt, &cap, c, o, relay, 1, 0, b);
        for (int l = 0; l < t->nsize[n] && !ierr; l++)
          if (rk[l] != relay && NEED(rk[l]) && (relay == rank || rk[l] == rank)) ierr = push(rt, &cap, c, relay, rk[l], 0, 1, b);
      }
    for (int k = nd->start[c]; k < nd->start[c + 1]; k++) mark[nd->rank[k]] = 0;
    mark[rank] = 0;
  }
#undef NEED
  free(mark);
  FMCall(ierr);
  return FM_SUCCESS;
}
