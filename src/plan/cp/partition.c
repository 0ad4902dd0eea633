/*
 * partition.c - query chunks and the contiguous / dual-chunk / balanced partitions of the
 * context-parallel planner. Pure computations (no MPI): every rank gets the same answer.
 */
#include <flashmask/private/fmdist.h>
#include <stdlib.h>
#include <string.h>

const char *const FMDistPartNames[] = {"contiguous", "dual_chunk", "balanced", NULL};
const char *const FMDistRouteNames[] = {"flat", "hierarchical", NULL};

int FMDistDefaultChunk(int seqlen_q, int nranks, int block)
{
  long target, c;
  if (seqlen_q <= 0) return 1;
  if (nranks < 1) nranks = 1;
  if (block < 1) block = 128;
  target = ((long)seqlen_q + 4L * nranks - 1) / (4L * nranks);
  if (target >= block) c = (target + block - 1) / block * block;
  else c = (target + 15) / 16 * 16;
  if (c < 16) c = 16;
  if (c > seqlen_q) c = seqlen_q;
  return (int)c;
}

FMErrorCode FMDistChunksInit(int seqlen_q, int seqlen_k, int chunk, int nranks, int block, FMDistChunks *ch)
{
  FMCheck(seqlen_q > 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "seqlen_q is %d; expected > 0", seqlen_q);
  FMCheck(seqlen_k > 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "seqlen_k is %d; expected > 0", seqlen_k);
  FMCheck(nranks >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "nranks is %d; expected >= 1", nranks);
  if (chunk <= 0) chunk = FMDistDefaultChunk(seqlen_q, nranks, block);
  FMCheck(chunk >= 1, MPI_COMM_SELF, FM_ERR_OPT, "-fm_plan_chunk is %d; expected >= 1 (or 0 for the default)", chunk);
  if (chunk > seqlen_q) chunk = seqlen_q;
  ch->seqlen_q = seqlen_q;
  ch->seqlen_k = seqlen_k;
  ch->chunk = chunk;
  ch->nchunks = (int)(((long)seqlen_q + chunk - 1) / chunk);
  ch->kchunk = (int)(((long)seqlen_k * chunk + seqlen_q - 1) / seqlen_q);
  if (ch->kchunk < 1) ch->kchunk = 1;
  return FM_SUCCESS;
}

void FMDistAssignContiguous(int nchunks, int P, int *owner)
{
  for (int r = 0; r < P; r++) {
    long c0 = (long)r * nchunks / P, c1 = (long)(r + 1) * nchunks / P;
    for (long c = c0; c < c1; c++) owner[c] = r;
  }
}

/* Zigzag over rounds of P chunks: rank r owns r, 2P-1-r, 2P+r, 4P-1-r, ... */
void FMDistAssignDualChunk(int nchunks, int P, int *owner)
{
  for (int c = 0; c < nchunks; c++) {
    int round = c / P, pos = c % P;
    owner[c] = (round % 2 == 0) ? pos : P - 1 - pos;
  }
}

FMErrorCode FMDistPartitionFromOwner(int nchunks, int P, const int *owner, const int64_t *w, FMDistPartition *part)
{
  int *fill;
  memset(part, 0, sizeof(*part));
  part->nranks = P;
  part->nchunks = nchunks;
  FMCall(FMMalloc(nchunks > 0 ? nchunks : 1, &part->owner));
  FMCall(FMCalloc(P + 1, &part->rstart));
  FMCall(FMMalloc(nchunks > 0 ? nchunks : 1, &part->rchunks));
  FMCall(FMCalloc(P, &part->work));
  for (int c = 0; c < nchunks; c++) {
    FMCheck(owner[c] >= 0 && owner[c] < P, MPI_COMM_SELF, FM_ERR_LIB, "owner[%d] = %d; expected 0..%d", c, owner[c], P - 1);
    part->owner[c] = owner[c];
    part->rstart[owner[c] + 1]++;
    if (w) part->work[owner[c]] += w[c];
  }
  for (int r = 0; r < P; r++) part->rstart[r + 1] += part->rstart[r];
  FMCall(FMMalloc(P, &fill));
  for (int r = 0; r < P; r++) fill[r] = part->rstart[r];
  for (int c = 0; c < nchunks; c++) part->rchunks[fill[owner[c]]++] = c; /* ascending by construction */
  free(fill);
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

FMErrorCode FMDistPartitionDestroy(FMDistPartition *part)
{
  if (!part) return FM_SUCCESS;
  FMFree(part->owner);
  FMFree(part->rstart);
  FMFree(part->rchunks);
  FMFree(part->work);
  return FM_SUCCESS;
}

void FMDistPartitionImbalance(const FMDistPartition *part, int64_t *max, double *mean, double *imbalance)
{
  int64_t mx = 0, tot = 0;
  double mn;
  for (int r = 0; r < part->nranks; r++) {
    if (part->work[r] > mx) mx = part->work[r];
    tot += part->work[r];
  }
  mn = (double)tot / part->nranks;
  if (max) *max = mx;
  if (mean) *mean = mn;
  if (imbalance) *imbalance = tot > 0 ? (double)mx / mn : 1.0;
}

/* The global indices of one rank's rows (keys = 0) or key positions (keys = 1), ascending. */
static FMErrorCode rank_range(const FMDistChunks *ch, const FMDistPartition *part, int rank, int keys, int *n, int **idx)
{
  int cnt = 0, k = 0;
  FMCheck(rank >= 0 && rank < part->nranks, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "rank %d; expected 0..%d", rank, part->nranks - 1);
  for (int b = part->rstart[rank]; b < part->rstart[rank + 1]; b++) {
    int a0, a1;
    if (keys) FMDistChunkKeys(ch, part->rchunks[b], &a0, &a1);
    else FMDistChunkRows(ch, part->rchunks[b], &a0, &a1);
    cnt += a1 - a0;
  }
  *n = cnt;
  FMCall(FMMalloc(cnt > 0 ? cnt : 1, idx));
  for (int b = part->rstart[rank]; b < part->rstart[rank + 1]; b++) {
    int a0, a1;
    if (keys) FMDistChunkKeys(ch, part->rchunks[b], &a0, &a1);
    else FMDistChunkRows(ch, part->rchunks[b], &a0, &a1);
    for (int i = a0; i < a1; i++) (*idx)[k++] = i;
  }
  return FM_SUCCESS;
}

FMErrorCode FMDistRankRows(const FMDistChunks *ch, const FMDistPartition *part, int rank, int *nrows, int **rows)
{
  FMCall(rank_range(ch, part, rank, 0, nrows, rows));
  return FM_SUCCESS;
}

FMErrorCode FMDistRankKeys(const FMDistChunks *ch, const FMDistPartition *part, int rank, int *nkeys, int **keys)
{
  FMCall(rank_range(ch, part, rank, 1, nkeys, keys));
  return FM_SUCCESS;
}
