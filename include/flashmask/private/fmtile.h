/*
 * fmtile.h - the tile classes of a FlashMask block summary and the Hopper forward's tile
 * schedules, shared by the mask code, the planner, the CPU kernels and the CUDA kernels (host
 * and device). Plain C, no MPI: the kernels include it instead of fmimpl.h. Not installed.
 */
#ifndef FLASHMASK_PRIVATE_FMTILE_H
#define FLASHMASK_PRIVATE_FMTILE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Block summary layout: for each mask head and key block, 8 int32 numbers. */
enum { FM_SUM_LTS_MIN = 0, FM_SUM_LTS_MAX, FM_SUM_LTE_MIN, FM_SUM_LTE_MAX,
       FM_SUM_UTS_MIN, FM_SUM_UTS_MAX, FM_SUM_UTE_MIN, FM_SUM_UTE_MAX, FM_SUM_N };

/*
 * How the Hopper forward (d = 64, 128) assigns its query tiles: one CTA per tile (the grid), or a
 * persistent CTA per SM taking tiles in order (static round robin) or from an atomic counter
 * (dynamic). AUTO is the options' default: a plan resolves it from its mask at FMPlanSetUp
 * (FMSm90ChooseSchedule_Private: persistent when a query tile sees at most
 * FM_GPU_SCHED_AUTO_KEYS keys on average, where a tile's fixed cost weighs most, static when
 * the tiles' key counts are even and small (at most FM_GPU_SCHED_STATIC_KEYS), dynamic when not;
 * else the grid); a kernel handed AUTO unresolved runs the grid.
 */
#define FM_GPU_SCHED_GRID 0
#define FM_GPU_SCHED_STATIC 1
#define FM_GPU_SCHED_DYNAMIC 2
#define FM_GPU_SCHED_AUTO 3
#define FM_GPU_SCHED_AUTO_KEYS 2048 /* auto: persistent at most this many keys per query tile on average */
#define FM_GPU_SCHED_AUTO_CV 0.5    /* auto: static at most this spread of the tiles' keys, else dynamic */
#define FM_GPU_SCHED_STATIC_KEYS 512 /* auto: static at most this many keys per query tile, else dynamic */
#define FM_GPU_TILE_M 128           /* the Hopper forward's query tile (rows) at d = 128 and 256; d = 64 runs
                                       192-row tiles (Cfg, src/kernels/sm90/layout.cuh), for which the
                                       schedule's estimate keeps 128 rows */

/* Tile classes. */
typedef enum { FM_TILE_SKIP = 0, FM_TILE_FULL = 1, FM_TILE_PARTIAL = 2 } FMTileClass;

/*
 * FMClassifyTile - class of the tile of query rows [m0, m1) against key block kb, from one
 *   mask head's block summaries (summary_head: [nblocks_k][FM_SUM_N]) and the causal diagonal.
 *   Defined in src/mask/summary.c; the kernels inline FMClassifyTileInline instead.
 */
FMTileClass FMClassifyTile(const int32_t *summary_head, int causal, int seqlen_q, int seqlen_k, int block,
                           int m0, int m1, int kb);

/*
 * FMClassifyTileInline - the one definition of the tile-class logic (FMClassifyTile calls it;
 *   kernels may inline it in their tile loops). doc/format.md section 2 plus the
 *   bottom-right aligned causal diagonal (key j visible to row i iff j <= i + seqlen_k - seqlen_q).
 *   Rows are clipped to [0, seqlen_q); an empty tile or a block past seqlen_k is FM_TILE_SKIP.
 */
#if defined(__CUDACC__)
#define FM_HOSTDEV __host__ __device__
#else
#define FM_HOSTDEV
#endif
static inline FM_HOSTDEV FMTileClass FMClassifyTileInline(const int32_t *summary_head, int causal, int seqlen_q, int seqlen_k,
                                                          int block, int m0, int m1, int kb)
{
  const int32_t *s;
  int c0 = kb * block, c1 = c0 + block, off = seqlen_k - seqlen_q, part;
  if (c1 > seqlen_k) c1 = seqlen_k;
  if (m0 < 0) m0 = 0;
  if (m1 > seqlen_q) m1 = seqlen_q;
  if (m0 >= m1 || c0 >= c1 || kb < 0) return FM_TILE_SKIP;
  s = summary_head + (size_t)kb * FM_SUM_N;
  if (causal && c0 > m1 - 1 + off) return FM_TILE_SKIP; /* whole block right of the diagonal */
  if (m0 >= s[FM_SUM_LTS_MAX] && m1 <= s[FM_SUM_LTE_MIN]) return FM_TILE_SKIP;
  if (m0 >= s[FM_SUM_UTS_MAX] && m1 <= s[FM_SUM_UTE_MIN]) return FM_TILE_SKIP;
  part = (causal && c1 - 1 > m0 + off) || (m0 < s[FM_SUM_LTE_MAX] && m1 > s[FM_SUM_LTS_MIN]) ||
         (m0 < s[FM_SUM_UTE_MAX] && m1 > s[FM_SUM_UTS_MIN]);
  return part ? FM_TILE_PARTIAL : FM_TILE_FULL;
}

/* The q in [0, nqb) whose BM-row tile [q BM, min((q + 1) BM, seqlen_q)) ends at or before row x
   (a prefix of them: the ends increase). */
static inline FM_HOSTDEV int FMTileEndsBy_Private(int x, int BM, int nqb, int seqlen_q)
{
  if (x >= seqlen_q) return nqb;
  if (x < BM) return 0;
  return x / BM < nqb - 1 ? x / BM : nqb - 1;
}

/*
 * FMVisitedTilesInline - how many of key block kb's BM-row tiles (rows [q BM, min((q + 1) BM,
 *   seqlen_q)), q = 0 .. ceil(seqlen_q / BM) - 1) are not FM_TILE_SKIP for FMClassifyTileInline:
 *   the query blocks the backward's walk visits at BM-row steps. Each of the three skip rules
 *   (right of the causal diagonal, inside the rows every column masks in the lower or the upper
 *   interval) skips a run of consecutive tiles, so the count is the tiles less the union of three
 *   runs: O(1), not O(tiles).
 */
static inline FM_HOSTDEV int FMVisitedTilesInline(const int32_t *summary_head, int causal, int seqlen_q, int seqlen_k, int block,
                                                  int kb, int BM)
{
  const int nqb = (seqlen_q + BM - 1) / BM, c0 = kb * block, off = seqlen_k - seqlen_q;
  const int32_t *s = summary_head + (size_t)kb * FM_SUM_N;
  int a[3], b[3], n = 0, skipped = 0, end = 0;
  if (seqlen_q < 1 || kb < 0 || c0 >= seqlen_k) return 0;
  /* runs [a, b): the causal one from tile 0; a lower or upper one from the first tile starting at
     or after the rows' start to the last ending at or before their end */
  if (causal) { a[n] = 0; b[n] = FMTileEndsBy_Private(c0 - off, BM, nqb, seqlen_q); n++; }
  for (int v = 0; v < 2; v++) {
    const int p = s[v ? FM_SUM_UTS_MAX : FM_SUM_LTS_MAX], e = s[v ? FM_SUM_UTE_MIN : FM_SUM_LTE_MIN];
    const int first = p <= 0 ? 0 : (p + BM - 1) / BM;
    a[n] = first < nqb ? first : nqb;
    b[n] = FMTileEndsBy_Private(e, BM, nqb, seqlen_q);
    n++;
  }
  /* the union's size: the runs by start (at most three, a small sort), merged */
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && a[j] < a[j - 1]; j--) {
      const int ta = a[j], tb = b[j];
      a[j] = a[j - 1]; b[j] = b[j - 1];
      a[j - 1] = ta; b[j - 1] = tb;
    }
  for (int i = 0; i < n; i++) {
    const int lo = a[i] > end ? a[i] : end;
    if (b[i] > lo) { skipped += b[i] - lo; end = b[i]; }
  }
  return nqb - skipped;
}

#ifdef __cplusplus
}
#endif
#endif
