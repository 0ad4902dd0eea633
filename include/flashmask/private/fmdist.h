/*
 * fmdist.h - private interface of the context-parallel planner (src/plan/cp).
 * Not installed.
 *
 * Phase 1 is pure planning: every function below except FMDistGetStats is a deterministic
 * computation on replicated data, with no MPI calls, so every rank derives the same plan and
 * fmplan-sim can run it for a virtual topology in one process. See doc/distributed.md for the algorithms and bounds.
 *
 * Axes. The query axis (seqlen_q rows) is cut into nchunks chunks of `chunk` rows (the last
 * one may be short). The key axis is cut into the SAME number of chunks, of
 * kchunk = ceil(seqlen_k * chunk / seqlen_q) columns (so kchunk = chunk when
 * seqlen_q = seqlen_k); trailing key chunks may be short or empty. Key chunk c is owned
 * by the owner of query chunk c: a rank holds the K/V of "its" positions.
 */
#ifndef FLASHMASK_PRIVATE_FMDIST_H
#define FLASHMASK_PRIVATE_FMDIST_H

#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { FM_DIST_CONTIGUOUS = 0, FM_DIST_DUAL_CHUNK = 1, FM_DIST_BALANCED = 2 } FMDistPartType;
typedef enum { FM_DIST_ROUTE_FLAT = 0, FM_DIST_ROUTE_HIER = 1 } FMDistRouteType;
extern const char *const FMDistPartNames[];   /* "contiguous", "dual_chunk", "balanced", NULL */
extern const char *const FMDistRouteNames[];  /* "flat", "hierarchical", NULL */

/* ---------------- chunks (partition.c) ---------------- */
typedef struct {
  int seqlen_q, seqlen_k;
  int chunk;    /* query rows per chunk */
  int kchunk;   /* key columns per chunk */
  int nchunks;
} FMDistChunks;

/*
 * FMDistDefaultChunk - the default chunk size: about seqlen_q / (4 P) rows, rounded up to a
 *   multiple of block when that is at least block, else to a multiple of 16 (at least 16,
 *   at most seqlen_q).
 */
int FMDistDefaultChunk(int seqlen_q, int nranks, int block);

/* FMDistChunksInit - cut both axes; chunk <= 0 means the default. Errors name bad sizes. */
FMErrorCode FMDistChunksInit(int seqlen_q, int seqlen_k, int chunk, int nranks, int block, FMDistChunks *ch);

static inline void FMDistChunkRows(const FMDistChunks *ch, int c, int *r0, int *r1)
{
  long a = (long)c * ch->chunk, b = a + ch->chunk;
  if (a > ch->seqlen_q) a = ch->seqlen_q;
  if (b > ch->seqlen_q) b = ch->seqlen_q;
  *r0 = (int)a; *r1 = (int)b;
}
static inline void FMDistChunkKeys(const FMDistChunks *ch, int c, int *k0, int *k1)
{
  long a = (long)c * ch->kchunk, b = a + ch->kchunk;
  if (a > ch->seqlen_k) a = ch->seqlen_k;
  if (b > ch->seqlen_k) b = ch->seqlen_k;
  *k0 = (int)a; *k1 = (int)b;
}
/* FMDistChunkKeyLen - number of key columns of key chunk c (0 for an empty trailing chunk). */
static inline int FMDistChunkKeyLen(const FMDistChunks *ch, int c)
{
  int k0, k1;
  FMDistChunkKeys(ch, c, &k0, &k1);
  return k1 - k0;
}

/* ---------------- partitions (partition.c, balance.c) ---------------- */
typedef struct {
  int nranks, nchunks;
  int *owner;      /* [nchunks] owning rank of each chunk */
  int *rstart;     /* [nranks + 1] offsets into rchunks */
  int *rchunks;    /* [nchunks] each rank's chunks, ascending */
  int64_t *work;   /* [nranks] predicted work (sum of chunk weights) */
} FMDistPartition;

/* Information returned by the balancer. */
typedef struct {
  int64_t max, total;       /* heaviest rank's work and the sum */
  int64_t lpt_max;          /* after longest-processing-time-first (before improvement) */
  int64_t dual_max;         /* max of the dual-chunk assignment (the balancer never does worse) */
  int start;                /* which start won: 0 contiguous, 1 LPT, 2 dual-chunk (each improved) */
  int pair_moves, triple_moves;
  int inexact_pairs;        /* pair pools too large for the exact search (> 40 chunks) */
  int budget_out;           /* improvements stopped by the work budget (0 unless the instance is huge) */
} FMDistBalanceInfo;

/*
 * FMDistMaskRows - the mask's rows of bounds and summaries, mask_batch x mask_heads (row
 *   b * mask_heads + h is mask head h of sample b; one shared sample when mask_batch <= 1).
 *   The planner works over these rows: a chunk's weight sums the work of every sample (one
 *   partition serves the whole batch) and a rank's needed K/V set is the union over samples.
 */
static inline int FMDistMaskRows(const FMMaskDesc *m) { return (m->mask_batch > 1 ? m->mask_batch : 1) * m->mask_heads; }

/*
 * FMDistChunkWeights - weight of each query chunk: the number of (query tile, key block)
 *   tiles it really computes (not FM_TILE_SKIP), summed over the mask rows (FMDistMaskRows:
 *   every sample of a per-sample mask, every mask head), counted in
 *   rows x key blocks so that short tiles count in proportion (divide by block for tiles).
 *   partial  cost of a partially masked tile relative to a full one (1: count tiles; a partial
 *            tile's rows are multiplied by it and rounded)
 *   rowcost  fixed cost of every query tile (Q load, epilogue, output merge), in full tiles
 *            (0: count tiles only)
 *   w out: [nchunks].
 */
FMErrorCode FMDistChunkWeights(const FMMaskDesc *m, const FMDistChunks *ch, double partial, double rowcost, int64_t *w);

/* FMDistChunkWeightsRef - the same weights counted tile by tile, O(tiles x key blocks): the tests' reference. */
FMErrorCode FMDistChunkWeightsRef(const FMMaskDesc *m, const FMDistChunks *ch, double partial, double rowcost, int64_t *w);

/*
 * The tile map (tilemap.c): for each (mask row, key block), the runs of row tiles (the tiles
 * of FMDistChunkWeights: chunk by chunk, `block` rows from each chunk's first row, numbered
 * t = 0..ntiles-1 in row order) whose class (FMClassifyTileInline) is FULL or PARTIAL; the
 * tiles outside every run are SKIP. Built from the block summaries in O(heads x key blocks);
 * the chunk weights and the needed sets are interval queries on it.
 */
typedef struct { int lo, hi, cls; } FMDistTileRun; /* tiles lo..hi-1, class FM_TILE_FULL or FM_TILE_PARTIAL */
typedef struct {
  int seqlen_q, seqlen_k, chunk, block, nchunks, mask_heads, nkb, ntiles; /* mask_heads: the mask rows, FMDistMaskRows */
  int *tstart;          /* [nchunks + 1] first tile of each chunk */
  int *m0, *m1;         /* [ntiles] rows of each tile */
  int *roff;            /* [mask_heads * nkb + 1] runs of (h, kb) are run[roff[h * nkb + kb] .. roff[... + 1]) */
  FMDistTileRun *run;
} FMDistTileMap;
FMErrorCode FMDistTileMapCreate(const FMMaskDesc *m, const FMDistChunks *ch, FMDistTileMap *tm);
FMErrorCode FMDistTileMapDestroy(FMDistTileMap *tm);
/* FMDistChunkWeightsMap - FMDistChunkWeights from a tile map, O(runs + tiles). */
FMErrorCode FMDistChunkWeightsMap(const FMDistTileMap *tm, double partial, double rowcost, int64_t *w);

/* FMDistAssignContiguous / DualChunk - owner[c] for nchunks chunks on P ranks. */
void FMDistAssignContiguous(int nchunks, int P, int *owner);
void FMDistAssignDualChunk(int nchunks, int P, int *owner);

/*
 * FMDistBalance - the balancer: longest-processing-time-first, then exact pairwise
 *   repartition of the heaviest rank with each partner (splits by merged sorted half sums,
 *   O(2^(n/2)) per pool) and exact three-way repartition of the heaviest with the two lightest
 *   when the pool is small; among optimal splits the one moving the fewest chunks. The
 *   improvement stops once the max load is within LB/1024 of the lower bound LB = max(ceil(total
 *   / P), heaviest chunk) (exact when LB < 1024), or after a fixed work budget (subsets
 *   enumerated; info->budget_out counts the stops). Starts in the order contiguous, LPT,
 *   dual-chunk: the first that reaches the stop and is no worse than dual-chunk wins and the
 *   others are not computed; else the least max wins, ties in that order (locality first).
 *   Bounded time, the same answer on every rank, never worse than its start (so within the LPT
 *   bound and never worse than dual-chunk). Deterministic. owner out: [n]. info may be NULL.
 */
FMErrorCode FMDistBalance(int n, const int64_t *w, int P, int *owner, FMDistBalanceInfo *info);
/* The exact splits' pool limits, shared by the balancer and its reference (the same decisions). */
#define FM_PAIR_EXACT_MAX 40   /* meet in the middle: 2 x 2^20 subset sums at most */
#define FM_TRIPLE_EXACT_MAX 12 /* 3^12 = 531441 assignments */
/* The heaviest of P loads (the lowest rank among equals). */
static inline int FMDistArgmaxLoad(int P, const int64_t *load)
{
  int a = 0;
  for (int r = 1; r < P; r++)
    if (load[r] > load[a]) a = r;
  return a;
}
/* FMDistBalanceRef - the same decisions by the direct loops (O(P x n) per round, no work budget,
   the same stop; balance_ref.c): the tests' reference. */
FMErrorCode FMDistBalanceRef(int n, const int64_t *w, int P, int *owner, FMDistBalanceInfo *info);
/* FMDistBalanceImproveRef_Private - the reference's improvement of owner (loads load[P]) down to
   the stop (balance_ref.c); FMDistBalanceRef and the fast balancer's ref mode use it. */
FMErrorCode FMDistBalanceImproveRef_Private(int n, const int64_t *w, int P, int64_t stop, int *owner, int64_t *load, FMDistBalanceInfo *info);

/*
 * FMDistPartitionCreate - build a partition of the given type. w (chunk weights) is
 *   required for FM_DIST_BALANCED and used for the work figures when given (may be NULL
 *   otherwise). info may be NULL.
 */
FMErrorCode FMDistPartitionCreate(FMDistPartType type, int nchunks, int P, const int64_t *w, FMDistPartition *part,
                                  FMDistBalanceInfo *info);
/* FMDistPartitionFromOwner - the partition given owner[] (copied). */
FMErrorCode FMDistPartitionFromOwner(int nchunks, int P, const int *owner, const int64_t *w, FMDistPartition *part);
FMErrorCode FMDistPartitionDestroy(FMDistPartition *part);
/* Max and mean work over ranks; imbalance = max / mean (1 when there is no work). */
void FMDistPartitionImbalance(const FMDistPartition *part, int64_t *max, double *mean, double *imbalance);

/* Rows (ascending global query indices) and keys of one rank; *rows / *keys allocated. */
FMErrorCode FMDistRankRows(const FMDistChunks *ch, const FMDistPartition *part, int rank, int *nrows, int **rows);
FMErrorCode FMDistRankKeys(const FMDistChunks *ch, const FMDistPartition *part, int rank, int *nkeys, int **keys);

/* ---------------- localization (localize.c) ---------------- */
/*
 * The mask restricted to one rank's rows, in local row coordinates (rows ascending in
 * global order). Local row li may not see key j (global column) of mask row h (FMDistMaskRows:
 * sample h / heads, mask head h % heads of a per-sample mask) when
 *   li < cut[j] (only if cut != NULL: the causal triangle), or
 *   lts[j] <= li < lte[j], or uts[j] <= li < ute[j].
 */
typedef struct {
  int nlocal, mask_heads, seqlen_k; /* mask_heads: the mask rows, FMDistMaskRows */
  int32_t *bnd[4];   /* [mask rows][seqlen_k] each, or NULL where the mask does not carry vector v
                        (every entry its default: lts = lte = nlocal, uts = ute = 0); read them
                        through FMDistLocalBound */
  int32_t *cut;      /* [seqlen_k] or NULL when not causal */
} FMDistLocalMask;

/* Entry o (row * seqlen_k + column) of lm's vector v, its default where the vector is absent. */
static inline int32_t FMDistLocalBound(const FMDistLocalMask *lm, int v, size_t o)
{
  return lm->bnd[v] ? lm->bnd[v][o] : v < 2 ? lm->nlocal : 0;
}

/*
 * FMDistLocalizeBound - the local bound of a global row bound x for a rank owning the
 *   sorted chunks c_0 < c_1 < ... : the number of local rows with global index < x,
 *   = sum_b clip(x - start(c_b), 0, len(c_b)) (the clip/shift/max rule).
 */
int FMDistLocalizeBound(const FMDistChunks *ch, int nown, const int *chunks, int x);

/* FMDistLocalize - localize every vector of every head (and the causal triangle). */
FMErrorCode FMDistLocalize(const FMMaskDesc *m, const FMDistChunks *ch, int nown, const int *chunks, FMDistLocalMask *lm);
FMErrorCode FMDistLocalMaskDestroy(FMDistLocalMask *lm);

/*
 * FMDistLocalizeColumns - FMDistLocalize restricted to the key columns cols[0..n) (global
 *   indices, any order, repeats allowed): lm->seqlen_k = n and column x of lm (bnd[v][h * n + x],
 *   cut[x]) is global column cols[x], with the values FMDistLocalize gives it. A vector the mask
 *   does not carry (m->present) is not allocated: NULL, its entries the defaults. O(rows x n) (each
 *   bound by a search over the rank's chunks, skipped for a run of equal or nearby bounds; plus
 *   O(seqlen_q) for a table above 32 chunks) instead of O(rows x seqlen_k): what the CUDA backend's stage masks need. cols NULL means every
 *   column in order (n = seqlen_k): that is FMDistLocalize (localize.c).
 */
FMErrorCode FMDistLocalizeColumns(const FMMaskDesc *m, const FMDistChunks *ch, int nown, const int *chunks, int n, const int *cols,
                                  FMDistLocalMask *lm);

static inline int FMDistLocalMasked(const FMDistLocalMask *lm, int h, int li, int j)
{
  size_t o = (size_t)h * lm->seqlen_k + j;
  if (lm->cut && li < lm->cut[j]) return 1;
  if (FMDistLocalBound(lm, 0, o) <= li && li < FMDistLocalBound(lm, 1, o)) return 1;
  if (FMDistLocalBound(lm, 2, o) <= li && li < FMDistLocalBound(lm, 3, o)) return 1;
  return 0;
}

/* ---------------- needed K/V (needed.c) ---------------- */
/* FMDistColumnVisible - whether some local row can see key j for mask head h. */
int FMDistColumnVisible(const FMDistLocalMask *lm, int h, int j);

/*
 * FMDistNeeded - needed[c] = 1 when some local row of the rank sees some key of chunk c
 *   under some mask row (some sample and mask head: the union over samples; own chunks included). With prune = 0 every non-empty chunk is
 *   needed when the rank has rows (the unpruned all-gather).
 */
FMErrorCode FMDistNeeded(const FMDistLocalMask *lm, const FMDistChunks *ch, int prune, unsigned char *needed);

/* FMDistNeededAll - needed[r * nchunks + c] for every rank (localizes each rank in turn). */
FMErrorCode FMDistNeededAll(const FMMaskDesc *m, const FMDistChunks *ch, const FMDistPartition *part, int prune,
                            unsigned char *needed);

/*
 * FMDistNeededRank - one rank's needed[c] (as FMDistNeeded on its localized mask), without
 *   localizing: key blocks with a FULL tile on the rank's rows make their chunks needed, key
 *   blocks with only SKIP tiles are not looked at, and only the columns of the remaining
 *   (PARTIAL) blocks are tested one by one. O(heads x key blocks + tiles + chunks + partial
 *   columns). tm may be NULL (built here). needed out: [nchunks].
 */
FMErrorCode FMDistNeededRank(const FMMaskDesc *m, const FMDistChunks *ch, const FMDistTileMap *tm, const FMDistPartition *part, int rank,
                             int prune, unsigned char *needed);
/* FMDistNeededAllRef - FMDistNeededAll by a column scan per rank (O(P x seqlen)): the tests' reference. */
FMErrorCode FMDistNeededAllRef(const FMMaskDesc *m, const FMDistChunks *ch, const FMDistPartition *part, int prune, unsigned char *needed);

/* Bytes of K and V of key chunk c: 2 * batch * len * heads_kv * head_dim * elsize. */
double FMDistChunkBytes(const FMDistChunks *ch, int c, int batch, int heads_kv, int head_dim, size_t elsize);

/* ---------------- topology and routes (route.c) ---------------- */
typedef struct {
  int nranks, nnodes;
  int *node;    /* [nranks] node index, 0..nnodes-1 */
  int *local;   /* [nranks] index inside the node */
  int *nsize;   /* [nnodes] ranks per node */
  int *nfirst;  /* [nnodes + 1] offsets into nranks_of */
  int *nranks_of; /* ranks of each node by local index */
} FMDistTopo;

/* FMDistTopoCreate - from node[] and local[] (copied; local indices 0..size-1 per node). */
FMErrorCode FMDistTopoCreate(int nranks, const int *node, const int *local, FMDistTopo *t);
/* FMDistTopoVirtual - nnodes nodes of consecutive ranks (sizes differ by at most 1). */
FMErrorCode FMDistTopoVirtual(int nranks, int nnodes, FMDistTopo *t);
FMErrorCode FMDistTopoDestroy(FMDistTopo *t);

/* One transfer of a whole K/V chunk. stage 0 is the cross-node hop of a hierarchical route. */
typedef struct {
  int chunk, src, dst;
  int level;   /* 0: inside a node, 1: across nodes */
  int stage;   /* 0: the source owns the chunk; 1: the source is a relay that received it in stage 0 */
} FMDistXfer;

typedef struct {
  int n;
  FMDistXfer *x;      /* by chunk; within a chunk a relay's stage-0 hop precedes its stage-1 hops */
  double bytes[2];    /* bytes per link level (0 intra-node, 1 inter-node) */
  double needed_bytes;    /* sum over ranks of the remote chunks they need */
  double allgather_bytes; /* what an unpruned all-gather moves (every rank gets every remote chunk) */
} FMDistRoute;

/*
 * FMDistRouteBuild - transfers delivering each needed remote chunk to each rank.
 *   flat: owner -> rank directly. hierarchical: for a rank on another node than the owner,
 *   the chunk first crosses to the relay of that node (the rank with the owner's local
 *   index, modulo the node size), once per node, and the relay forwards it inside the node.
 *   needed  [nranks][nchunks]; bytes [nchunks] bytes of each chunk (may be NULL: all 1).
 *   A relay that does not need the chunk still receives it (to forward).
 */
FMErrorCode FMDistRouteBuild(FMDistRouteType type, const FMDistTopo *t, const FMDistPartition *part,
                             const unsigned char *needed, const double *bytes, FMDistRoute *route);
/*
 * FMDistRouteBuildRank - the entries of FMDistRouteBuild with src or dst = rank, in the same
 *   order, in O(chunks x node size + own chunks x P); bytes, needed_bytes and allgather_bytes
 *   count that rank's transfers and remote chunks only.
 */
FMErrorCode FMDistRouteBuildRank(FMDistRouteType type, const FMDistTopo *t, const FMDistPartition *part, const unsigned char *needed,
                                 const double *bytes, int rank, FMDistRoute *route);
FMErrorCode FMDistRouteDestroy(FMDistRoute *route);

/* ---------------- the ring schedule baseline (ring.c) ---------------- */
/*
 * -fm_plan_schedule gather (the pruned, routed gather above) or ring (a Megatron-style ring:
 * each rank's whole local K/V block travels around the ring of ranks 0..P-1 in P-1 steps,
 * rank r sending to r+1 and receiving from r-1; nothing is pruned). See doc/distributed.md.
 */
typedef enum { FM_DIST_SCHED_GATHER = 0, FM_DIST_SCHED_RING = 1 } FMDistSchedType;
extern const char *const FMDistSchedNames[]; /* "gather", "ring", NULL */

/* FMDistRankBytes - K/V bytes each rank holds (the ring's travelling blocks). rbytes out: [P]. */
void FMDistRankBytes(const FMDistPartition *part, const double *cbytes, double *rbytes);

/*
 * FMDistRingBytes - bytes a ring schedule moves per link level (0 inside a node, 1 across),
 *   for one forward: the link r-1 -> r carries every block but rank r's own, so it moves
 *   total - rbytes[r]. rbytes: [P] (FMDistRankBytes). Pure; no MPI.
 */
void FMDistRingBytes(const FMDistTopo *t, const double *rbytes, double bytes[2]);

/* ---------------- exchange steps (steps.c) ---------------- */
typedef struct {
  int step, chunk, src, dst;
  int level;   /* 0: inside a node, 1: across nodes */
} FMDistStepXfer;

/*
 * FMDistExchangeSteps - cut a schedule's transfers into exchange steps that every rank
 *   derives alike (the rules are at the top of steps.c): the gather's route (route) or the
 *   ring's blocks (sched = FM_DIST_SCHED_RING; route unused, may be NULL). Deterministic, no MPI.
 *   group   gather only: at most this many chunks per (hop, src, dst) in one step; <= 0 = all
 *   n, x    out: the transfers sorted by step, then source rank, then chunk (free x)
 *   nsteps  out: the number of steps (steps are 0..nsteps-1, each non-empty)
 */
FMErrorCode FMDistExchangeSteps(FMDistSchedType sched, const FMDistChunks *ch, const FMDistPartition *part, const FMDistTopo *topo,
                                const FMDistRoute *route, int group, int *n, FMDistStepXfer **x, int *nsteps);

/*
 * FMDistExchangeStepsRank - FMDistExchangeSteps restricted to rank's transfers (src or dst),
 *   in the same order, steps renumbered 0..nsteps-1 over the rank's own steps (steps.c).
 *   route: the whole route or FMDistRouteBuildRank's for this rank.
 */
FMErrorCode FMDistExchangeStepsRank(FMDistSchedType sched, const FMDistChunks *ch, const FMDistPartition *part, const FMDistTopo *topo,
                                    const FMDistRoute *route, int group, int rank, int *n, FMDistStepXfer **x, int *nsteps);

/* ---------------- the step cost model and the communication-aware balancer (cost.c, balance_comm.c) ---------------- */
/*
 * The one model of a step's time that fmplan-sim predicts with and the communication-aware
 * balancer minimizes (doc/distributed.md, "The balancer's cost model"). Rank r computes its
 * work (chunk weights) at unit_s seconds per weight unit and receives recv[0][r] bytes inside
 * its node at bw[0] and recv[1][r] across nodes at bw[1] bytes/s; the exchange overlaps the
 * compute (the gather with -fm_plan_overlap), so its time is
 *   t_r = max(compute_r, exchange_r) = compute_r + exposed exchange_r
 * and the step's time is the slowest rank's.
 */
typedef struct {
  double unit_s;  /* seconds per weight unit (one row of a key block of one mask row) */
  double bw[2];   /* bytes/s a rank receives inside a node, across nodes */
} FMDistCostModel;

/*
 * FMDistCostModelInit - the model for blocks of `block`, head_dim x heads_q query heads, batch
 *   samples and mask_rows mask rows (FMDistMaskRows: the weights sum them), at tflops TFLOP/s of
 *   attention (4 flops per query, key and head dimension) and bw_intra / bw_inter GB/s.
 */
void FMDistCostModelInit(FMDistCostModel *cm, int block, int head_dim, int heads_q, int batch, int mask_rows, double tflops, double bw_intra,
                         double bw_inter);
/*
 * FMDistPredict - t[0] the slowest rank's compute, t[1] the slowest rank's exchange, t[2] the
 *   step (max over ranks of max(compute, exchange)), in seconds. work [P]; recv [2][P] (level 0
 *   then level 1, as FMDistRouteRecv gives).
 */
void FMDistPredict(const FMDistCostModel *cm, int P, const int64_t *work, const double *recv, double t[3]);
/* FMDistRouteRecv - recv[2][P]: the bytes each rank receives per link level on a route (the whole route). */
void FMDistRouteRecv(const FMDistRoute *rt, const double *cbytes, int P, double *recv);

/*
 * The chunk visibility the communication-aware balancer plans with: for each key chunk k, the
 * query chunks that see it, as merged intervals [q[i].lo, q[i].hi) at kofs[k] .. kofs[k + 1];
 * query chunk q sees k when some (mask row, key block of k) tile of q is FULL or PARTIAL (the
 * tile map's classes: the exact needed sets, or a superset where a PARTIAL tile hides nothing
 * visible). A rank needs k when it owns a query chunk that sees it, so every partition's
 * needed sets and route bytes follow without localizing. size: the sum of the interval lengths
 * (the cost of one evaluation).
 */
typedef struct { int lo, hi; } FMDistSpan;
typedef struct {
  int nchunks, nspan;
  int *kofs;       /* [nchunks + 1] */
  FMDistSpan *q;   /* [nspan] */
  long size;
} FMDistChunkVis;
FMErrorCode FMDistChunkVisCreate(const FMDistTileMap *tm, const FMDistChunks *ch, FMDistChunkVis *v);
FMErrorCode FMDistChunkVisDestroy(FMDistChunkVis *v);

/*
 * FMDistCommRecv - recv[2][P] of the given owner[] on route `type` (as FMDistRouteBuild +
 *   FMDistRouteRecv on the visibility's needed sets, pruned), O(v->size + P + chunks); when
 *   every node has one size and every chunk whole bytes, by a sweep over the key chunks in
 *   O(chunks x node size + spans + the spans' changes), the same sums bit for bit (cost.c).
 *   scratch: [P + nnodes] ints.
 */
void FMDistCommRecv(const FMDistChunkVis *v, const FMDistTopo *t, FMDistRouteType type, const int *owner, const double *cbytes, int *scratch,
                    double *recv);

/*
 * FMDistBalanceImprove_Private - the balancer's improvement (balance.c) on the assignment owner
 *   with loads load[P]; node NULL: as FMDistBalance; else [P] each rank's node: partners on the
 *   heaviest rank's node are tried first.
 */
FMErrorCode FMDistBalanceImprove_Private(int n, const int64_t *w, int P, const int *node, int *owner, int64_t *load, FMDistBalanceInfo *info);

/* What the communication-aware balancer decided (FMDistBalanceComm). */
typedef struct {
  FMDistBalanceInfo work;   /* the work-only balancer's information (its candidate) */
  int kept;                 /* 0: the work-only partition was kept; 1: the node-local candidate won */
  int skipped;              /* 1: no candidate was built (one node, one rank, no pruning, or the visibility is too large) */
  double step[2], inter[2], intra[2]; /* work-only and node-local candidates: predicted step (s), bytes across / inside nodes */
  int64_t max[2];           /* their heaviest rank's work */
} FMDistCommInfo;

/*
 * FMDistBalanceComm - the communication-aware balancer: the work-only balancer's partition
 *   (FMDistBalance) and a candidate refined from it (balance_comm.c, refine): its start is the
 *   work-only partition or that partition's bins given to the ranks in node order by their
 *   mean or median chunk, whichever moves the fewest bytes across nodes; then swaps of whole
 *   bins between nodes and moves of single chunks under a work cap, within a fixed budget of
 *   visibility entries. Both are scored by the cost model on route `type`; the candidate wins only when
 *   its predicted step is no longer and it moves no more bytes across nodes, and one of the two
 *   is strictly smaller. So its predicted step is never longer than the work-only balancer's,
 *   it never moves more bytes across nodes (both under the model), and it is deterministic (the
 *   same on every rank). w [n], cbytes [n], owner out [n]; info may be NULL.
 */
FMErrorCode FMDistBalanceComm(const FMDistChunkVis *v, int n, const int64_t *w, const double *cbytes, const FMDistTopo *t, FMDistRouteType type,
                              int prune, const FMDistCostModel *cm, int *owner, FMDistCommInfo *info);

/*
 * FMDistPartitionPlan - the partition of a plan's set-up: FMDistPartitionCreate of type, or, for
 *   FM_DIST_BALANCED with balance_comm (-fm_plan_balance_comm), FMDistBalanceComm on the chunk
 *   visibility of the tile map tm, topology t and route. cbytes [nchunks] (FMDistChunkBytes);
 *   info (the work-only balancer's, as FMDistPartitionCreate gives) and cinfo may be NULL.
 */
FMErrorCode FMDistPartitionPlan(FMDistPartType type, int balance_comm, const FMDistTileMap *tm, const FMDistChunks *ch, const int64_t *w,
                                const double *cbytes, const FMDistTopo *t, FMDistRouteType route, int prune, const FMDistCostModel *cm,
                                FMDistPartition *part, FMDistBalanceInfo *info, FMDistCommInfo *cinfo);

/* ---------------- execution statistics (exec.c) ---------------- */
typedef struct {
  double sent_bytes[2];     /* K/V bytes this rank sent in the last gather (forward or backward), per link level */
  double recv_bytes;        /* K/V bytes this rank received in the last gather (MPI_Get_count of each message) */
  double relayed_bytes;     /* of sent_bytes, those forwarded as a relay of the hierarchical route */
  double reduce_bytes;      /* dK/dV partial bytes (fp32) this rank sent back in the last backward (0 after a forward) */
  double predicted_recv;    /* what the route (or, with -fm_plan_schedule ring, the ring) says this rank receives */
  double predicted_sent;    /* what the route (or the ring) says this rank sends */
  double needed_bytes;      /* remote chunks this rank needs */
  double allgather_bytes;   /* remote chunks an unpruned all-gather would bring here */
  int nchunks, nneeded, nremote;
  /* the summary of the last call traced with -fm_trace (FMTraceSummary_Private; the same on
     every rank): traced = 1 once there is one */
  int traced;
  double overlap_efficiency, exposed_max, exposed_mean, imbalance;
  /* FMPlanSetUp calls on this plan so far (kept across set-ups; the same on every rank): full set-ups
     (everything rebuilt) and updates (same shape, options and communicator as the set-up before:
     only the bound-dependent state recomputed; doc/distributed.md, "Re-planning every step") */
  int setups_full, setups_update;
} FMDistStats;

/* FMDistGetStats - this rank's statistics of a "cp" plan (after SetUp; byte counts after a Forward;
   FM_ERR_ARG_WRONG for another type). Not collective. */
FMErrorCode FMDistGetStats(FMPlan plan, FMDistStats *stats);

/* ---------------- the needs' sparse transpose (needed.c; its route: route.c) ---------------- */
/*
 * What a rank must know about the other ranks' needed sets to build its own transfers
 * (FMDistRouteBuildRank's), without the [nranks][nchunks] matrix: for each chunk it owns,
 * every rank that needs it; for each chunk it relays (hierarchical route: owned on another
 * node, by a rank whose local index maps to this rank, modulo its node size), the ranks of its
 * node that need it. CSR by chunk: the needers of c are rank[start[c] .. start[c + 1] - 1],
 * ascending, never the rank itself (its own needs are its needed[]). O(nchunks + entries).
 */
typedef struct {
  int nchunks, n;
  int *start;  /* [nchunks + 1] */
  int *rank;   /* [n] */
} FMDistNeeders;

/*
 * FMDistNeedsSend - what rank tells the others about its needed[] [nchunks]: each needed chunk
 *   it does not own goes to the owner and, hierarchical route, to the chunk's relay on the
 *   rank's node when that relay is another rank. count [nranks] out (chunks per destination);
 *   *list (allocated, free()) the chunk indices by destination, each destination's ascending;
 *   *total its length. The send side of MPI_Alltoall (counts) + MPI_Alltoallv (lists).
 */
FMErrorCode FMDistNeedsSend(FMDistRouteType type, const FMDistTopo *t, const FMDistPartition *part, const unsigned char *needed, int rank,
                            int *count, int **list, int *total);
/*
 * FMDistNeedersFromRecv - the needers from what arrived: rcount [nranks] chunks from each
 *   source rank, rlist their chunk indices by source (sources ascending).
 */
FMErrorCode FMDistNeedersFromRecv(int nchunks, int nranks, const int *rcount, const int *rlist, FMDistNeeders *nd);
/*
 * FMDistNeedersFromMatrix - the needers of rank from every rank's needed [nranks][nchunks]:
 *   what FMDistNeedsSend of every rank followed by FMDistNeedersFromRecv gives (fmplan-sim and
 *   the tests; O(chunks x node size + own chunks x nranks)).
 */
FMErrorCode FMDistNeedersFromMatrix(FMDistRouteType type, const FMDistTopo *t, const FMDistPartition *part, const unsigned char *needed, int rank,
                                    FMDistNeeders *nd);
FMErrorCode FMDistNeedersDestroy(FMDistNeeders *nd);
/*
 * FMDistRouteBuildRankSparse - FMDistRouteBuildRank from rank's own needed [nchunks] and its
 *   needers: the same transfers in the same order, in O(chunks + own chunks x nranks + entries)
 *   time and O(nranks) scratch.
 */
FMErrorCode FMDistRouteBuildRankSparse(FMDistRouteType type, const FMDistTopo *t, const FMDistPartition *part, const unsigned char *needed,
                                       const FMDistNeeders *nd, const double *bytes, int rank, FMDistRoute *route);

#ifdef __cplusplus
}
#endif
#endif
