/*
 * ring.c - planning side of the ring schedule baseline (-fm_plan_schedule ring): the size of
 * each rank's travelling K/V block and the bytes a ring moves per link level. The ring's
 * execution lives in exec_ring.c next to the gather (exec_gather.c) it is compared with. Pure functions, no MPI.
 */
#include <flashmask/private/fmdist.h>

const char *const FMDistSchedNames[] = {"gather", "ring", NULL};

/*
 * FMDistRankBytes - K/V bytes of every rank's owned key chunks. Not collective.
 *   part    the partition (chunk owners)
 *   cbytes  [nchunks] bytes of each key chunk (FMDistChunkBytes)
 *   rbytes  out: [nranks]
 */
void FMDistRankBytes(const FMDistPartition *part, const double *cbytes, double *rbytes)
{
  for (int r = 0; r < part->nranks; r++) {
    rbytes[r] = 0;
    for (int b = part->rstart[r]; b < part->rstart[r + 1]; b++) rbytes[r] += cbytes[part->rchunks[b]];
  }
}

/*
 * FMDistRingBytes - bytes one ring pass (forward) moves per link level. Not collective.
 *   t       topology (node of each rank)
 *   rbytes  [nranks] each rank's block (FMDistRankBytes)
 *   bytes   out: [2] bytes over links inside a node (0) and across nodes (1)
 * Over P-1 steps the link r-1 -> r carries the blocks of r-1, r-2, ..., r+1: all but r's.
 */
void FMDistRingBytes(const FMDistTopo *t, const double *rbytes, double bytes[2])
{
  int P = t->nranks;
  double total = 0;
  bytes[0] = bytes[1] = 0;
  if (P < 2) return;
  for (int r = 0; r < P; r++) total += rbytes[r];
  for (int r = 0; r < P; r++) {
    int prev = (r + P - 1) % P;
    bytes[t->node[prev] != t->node[r]] += total - rbytes[r];
  }
}
