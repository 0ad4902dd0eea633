/*
 * summary.c - the size limits of a mask, validation and normalization of the bound vectors,
 * per-block summaries (min/max of each vector over a block of key columns, computed when first
 * asked for: FMMaskSummary_Private), tile classes, and the exact element density and block
 * sparsity of a mask.
 */
#include "maskimpl.h"
#include <stdlib.h>
#include <limits.h>
#include <math.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/*
 * FMMaskCheckSizes_Private - the limits of one mask (flashmask.h, FM_MASK_MAX_*), every product
 *   in 64 bits. Not collective. what starts the messages: "Argument" (FMMaskSetSizes: names the
 *   argument numbers) or a phrase such as "Group /masks/x of \"f.h5\": attribute" (FMMaskLoad).
 *   block is not checked when it is 0.
 */
FMErrorCode FMMaskCheckSizes_Private(int seqlen_q, int seqlen_k, int mask_heads, int block, const char *what)
{
  const int arg = !strcmp(what, "Argument");
  FMCheck(seqlen_q > 0 && seqlen_q <= FM_MASK_MAX_SEQLEN, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "%s %s(seqlen_q) is %d; expected 1 <= seqlen_q <= %d",
          what, arg ? "2 " : "", seqlen_q, FM_MASK_MAX_SEQLEN);
  FMCheck(seqlen_k > 0 && seqlen_k <= FM_MASK_MAX_SEQLEN, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "%s %s(seqlen_k) is %d; expected 1 <= seqlen_k <= %d",
          what, arg ? "3 " : "", seqlen_k, FM_MASK_MAX_SEQLEN);
  FMCheck(mask_heads > 0, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "%s %s(mask_heads) is %d; expected >= 1", what, arg ? "4 " : "", mask_heads);
  FMCheck((int64_t)mask_heads * seqlen_k <= FM_MASK_MAX_ENTRIES, MPI_COMM_SELF, FM_ERR_ARG_SIZ,
          "%s %s(mask_heads) %d times seqlen_k %d is %lld bound columns; expected at most FM_MASK_MAX_ENTRIES = %d per mask", what,
          arg ? "4 " : "", mask_heads, seqlen_k, (long long)mask_heads * seqlen_k, FM_MASK_MAX_ENTRIES);
  FMCheck(block == 0 || (block >= 1 && block <= FM_MASK_MAX_SEQLEN), MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "%s (block) is %d; expected 1 <= block <= %d", what, block, FM_MASK_MAX_SEQLEN);
  return FM_SUCCESS;
}

/*
 * FMClassifyTile - class of the query tile [m0, m1) against key block kb, from one head's
 *   block summaries. Not collective; pure function (no checks, it runs in kernel loops).
 *   summary_head  the summaries of one mask head: [nblocks_k][FM_SUM_N]
 *   causal        whether the bottom-right aligned causal triangle is added
 *   seqlen_q, seqlen_k, block   the mask's sizes and its summary block size
 *   m0, m1        global query rows (clipped to [0, seqlen_q))
 *   kb            key block (columns [kb * block, min((kb + 1) * block, seqlen_k)))
 *   Returns FM_TILE_SKIP only if every entry is masked, FM_TILE_FULL only if none is, else
 *   FM_TILE_PARTIAL. The logic is FMClassifyTileInline in fmimpl.h.
 */
FMTileClass FMClassifyTile(const int32_t *summary_head, int causal, int seqlen_q, int seqlen_k, int block, int m0, int m1, int kb)
{
  return FMClassifyTileInline(summary_head, causal, seqlen_q, seqlen_k, block, m0, m1, kb);
}

/*
 * FMMaskClassifyTile_Private - FMClassifyTile on a set-up mask's summaries for mask head h.
 *   Not collective; no argument checks (hot path). It cannot compute them (m is const): before
 *   FMMaskSummary_Private has made them valid it answers FM_TILE_PARTIAL, which is never wrong,
 *   and never reads the summaries of older bounds.
 */
FMTileClass FMMaskClassifyTile_Private(const struct _p_FMMask *m, int h, int m0, int m1, int kb)
{
  if (!m->summary_valid) return FM_TILE_PARTIAL;
  return FMClassifyTileInline(m->summary + (size_t)h * m->nblocks_k * FM_SUM_N, m->causal, m->seqlen_q, m->seqlen_k, m->block, m0, m1,
                              kb);
}

/* The first violation in row g (sample, head) of the bounds, as FM_ERR_ARG_OUTOFRANGE naming
   vector, row, column and value; FM_SUCCESS when there is none. */
static FMErrorCode report_row(FMMask m, size_t g)
{
  static const char *const vname[4] = {"lts", "lte", "uts", "ute"};
  const int Sq = m->seqlen_q, Sk = m->seqlen_k;
  char loc[48];
  const int h = (int)(g % (size_t)m->mask_heads), smp = (int)(g / (size_t)m->mask_heads);
  if (m->mask_batch > 1) snprintf(loc, sizeof(loc), "sample %d][head %d", smp, h);
  else snprintf(loc, sizeof(loc), "head %d", h);
  for (int v = 0; v < 4; v++) {
    const int32_t *x = m->bnd[v] + g * Sk;
    for (int j = 0; j < Sk; j++)
      FMCheck(x[j] >= 0 && x[j] <= Sq, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
              "Bound %s[%s][column %d] = %d is out of range; expected 0 <= %s <= seqlen_q = %d", vname[v], loc, j, (int)x[j], vname[v], Sq);
  }
  for (int v = 0; v < 4; v += 2) {
    const int32_t *s = m->bnd[v] + g * Sk, *e = m->bnd[v + 1] + g * Sk;
    for (int j = 0; j < Sk; j++)
      FMCheck(s[j] <= e[j], MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
              "Bound %s[%s][column %d] = %d is greater than %s = %d; expected start <= end", vname[v], loc, j, (int)s[j], vname[v + 1],
              (int)e[j]);
  }
  return FM_SUCCESS;
}

/* Whether the mask carries vector v (FM_BOUND_* bit order); the others are at their defaults
   (m->bnd_default: lts = lte = seqlen_q, uts = ute = 0) in every row. */
static inline int carried(const struct _p_FMMask *m, int v) { return !((m->bnd_default >> v) & 1); }

/*
 * One row of interval pr (0: lts, lte; 1: uts, ute) checked in one branch-free pass, reading
 * only the vectors the mask carries (a vector at its default is the constant d; a negative
 * bound is a large unsigned one): nonzero when a bound is out of [0, usq] or start > end.
 */
static int pair_bad(const struct _p_FMMask *m, int pr, size_t g, uint32_t usq)
{
  const int Sk = m->seqlen_k, cs = carried(m, 2 * pr), ce = carried(m, 2 * pr + 1);
  const int32_t d = pr == 0 ? (int32_t)usq : 0;
  const int32_t *s = m->bnd[2 * pr] + g * Sk, *e = m->bnd[2 * pr + 1] + g * Sk;
  int bad = 0;
  if (cs && ce) {
#pragma omp simd reduction(| : bad)
    for (int j = 0; j < Sk; j++) bad |= ((uint32_t)s[j] > usq) | ((uint32_t)e[j] > usq) | (s[j] > e[j]);
  } else if (cs) {
#pragma omp simd reduction(| : bad)
    for (int j = 0; j < Sk; j++) bad |= ((uint32_t)s[j] > usq) | (s[j] > d);
  } else if (ce) {
#pragma omp simd reduction(| : bad)
    for (int j = 0; j < Sk; j++) bad |= ((uint32_t)e[j] > usq) | (d > e[j]);
  }
  return bad;
}

/*
 * FMMaskValidate_Private - check every bound of m->bnd: 0 <= value <= seqlen_q and
 *   start <= end for (lts, lte) and (uts, ute). Not collective. The first violation is
 *   reported as FM_ERR_ARG_OUTOFRANGE naming vector, head, column and value. A vector at its
 *   defaults (m->bnd_default) is not read.
 */
FMErrorCode FMMaskValidate_Private(FMMask m)
{
  static const char *const vname[4] = {"lts", "lte", "uts", "ute"};
  const uint32_t usq = (uint32_t)m->seqlen_q;
  FMValidHeader(m, FM_CLASSID_MASK, 1);
  for (int v = 0; v < 4; v++)
    FMCheck(m->bnd[v], MPI_COMM_SELF, FM_ERR_LIB, "Bound vector %s is not allocated", vname[v]);
  /* one branch-free pass per row and interval (the rows on the context's threads, for a large
     mask); only the first row with a violation is scanned again, in the order of the message */
  {
    const long ng = (long)FM_MASK_NG(m);
    const int nth = FMMaskThreads_Private(m, (size_t)ng * m->seqlen_k, (int)ng); /* the rows: the units of work */
    (void)nth; /* without OpenMP */
    long first = ng;
#pragma omp parallel for num_threads(nth) schedule(static) reduction(min : first) if (nth > 1)
    for (long g = 0; g < ng; g++)
      if (g < first && (pair_bad(m, 0, (size_t)g, usq) | pair_bad(m, 1, (size_t)g, usq))) first = g;
    if (first < ng) FMCall(report_row(m, (size_t)first));
  }
  return FM_SUCCESS;
}

/* Order entries x < y of the interval list by start, without a branch. */
static inline void cswap(int sa[3], int sb[3], int x, int y)
{
  const int sw = sa[x] > sa[y], ax = sa[x], ay = sa[y], bx = sb[x], by = sb[y];
  sa[x] = sw ? ay : ax; sa[y] = sw ? ax : ay;
  sb[x] = sw ? by : bx; sb[y] = sw ? bx : by;
}

/*
 * Masked rows of one column as at most 3 disjoint sorted intervals (the lower and upper
 * intervals and the causal rows [0, j - off)); returns the count.
 */
static inline int column_masked(const FMMask m, int h, int j, int a[3], int b[3])
{
  int sa[3], sb[3], n = 0, k = 0;
  const size_t o = (size_t)h * m->seqlen_k + j;
  const int64_t off = (int64_t)m->seqlen_k - m->seqlen_q;
  if (m->bnd[0][o] < m->bnd[1][o]) { sa[n] = m->bnd[0][o]; sb[n++] = m->bnd[1][o]; }
  if (m->bnd[2][o] < m->bnd[3][o]) { sa[n] = m->bnd[2][o]; sb[n++] = m->bnd[3][o]; }
  if (m->causal) {
    int64_t c = (int64_t)j - off;
    if (c > m->seqlen_q) c = m->seqlen_q;
    if (c > 0) { sa[n] = 0; sb[n++] = (int)c; }
  }
  /* sort by start: the unused entries are padded to sort last, then a three-comparator network
     of conditional swaps (no data-dependent branch: this runs once per key column) */
  for (int x = n; x < 3; x++) sa[x] = sb[x] = INT_MAX;
  cswap(sa, sb, 0, 1);
  cswap(sa, sb, 1, 2);
  cswap(sa, sb, 0, 1);
  for (int x = 0; x < n; x++) {
    if (k > 0 && sa[x] <= b[k - 1]) {
      if (sb[x] > b[k - 1]) b[k - 1] = sb[x];
    } else {
      a[k] = sa[x]; b[k] = sb[x]; k++;
    }
  }
  return k;
}

typedef struct {
  int B, Sq, nqb, sh; /* block, rows, row tiles; sh: log2(B) when B is a power of two, else -1 */
  int *run, *next;    /* two lists of [lo, hi] tile pairs, each of room ints */
} Scan;

/*
 * The skipped tiles of key block [c0, c1) of row h, from every column's bounds (the fallback of
 * skipped_tiles). Per column, the masked rows are <= 3 disjoint intervals, and the query tiles wholly inside one of them are <= 3
 * intervals of tiles. A tile is skipped iff every column of the block covers it: intersect the
 * columns' tile intervals one column after the other (a short running list in practice; a column
 * with the same tile intervals as the previous one changes nothing), so the work grows with
 * seqlen_k, not with the number of tiles.
 */
static int64_t scan_block(const FMMask m, Scan *sc, int h, int c0, int c1)
{
  const int B = sc->B, Sq = sc->Sq, nqb = sc->nqb, sh = sc->sh;
  int *run = sc->run, *next = sc->next, nrun = -1; /* -1: before the block's first column */
  int ptl[3] = {0, 0, 0}, pth[3] = {0, 0, 0}, pnt = -1; /* the previous column's tile intervals */
  for (int j = c0; j < c1; j++) {
    int a[3], b[3], n = column_masked(m, h, j, a, b), tl[3] = {0, 0, 0}, th[3] = {0, 0, 0}, nt = 0, no = 0, x = 0, y = 0;
    for (int k = 0; k < n; k++) {
      /* the tiles wholly inside [a, b): a shift where the block is a power of two */
      int lo = sh >= 0 ? (int)(((int64_t)a[k] + B - 1) >> sh) : (int)(((int64_t)a[k] + B - 1) / B);
      int hi = b[k] >= Sq ? nqb - 1 : (sh >= 0 ? b[k] >> sh : b[k] / B) - 1;
      if (lo <= hi) { tl[nt] = lo; th[nt++] = hi; }
    }
    if (nrun == 0) break; /* no tile left to skip */
    if (nt == pnt && !memcmp(tl, ptl, sizeof(tl)) && !memcmp(th, pth, sizeof(th))) continue;
    pnt = nt;
    memcpy(ptl, tl, sizeof(tl));
    memcpy(pth, th, sizeof(th));
    if (nrun < 0) {
      for (int k = 0; k < nt; k++) { run[2 * k] = tl[k]; run[2 * k + 1] = th[k]; }
      nrun = nt;
      continue;
    }
    while (x < nrun && y < nt) { /* both lists sorted and disjoint */
      const int lo = run[2 * x] > tl[y] ? run[2 * x] : tl[y], hi = run[2 * x + 1] < th[y] ? run[2 * x + 1] : th[y];
      if (lo <= hi) { next[2 * no] = lo; next[2 * no + 1] = hi; no++; }
      if (run[2 * x + 1] < th[y]) x++;
      else y++;
    }
    { int *t = run; run = next; next = t; }
    nrun = no;
  }
  int64_t skipped = 0;
  for (int k = 0; k < nrun; k++) skipped += run[2 * k + 1] - run[2 * k] + 1;
  return skipped;
}

/*
 * FMMaskNormalize_Private - see fmimpl.h: empty intervals in default form (lts = lte = seqlen_q,
 *   uts = ute = 0), so that the summaries stay tight and the hash and the device copy see one form
 *   of each mask; m->nblocks_k; the summaries, density and sparsity of older bounds out of date.
 */
FMErrorCode FMMaskNormalize_Private(FMMask m)
{
  const int Sq = m->seqlen_q, Sk = m->seqlen_k, B = m->block;
  size_t n;
  FMValidHeader(m, FM_CLASSID_MASK, 1);
  FMCall(FMMaskCheckBatch_Private(m->mask_batch, m->mask_heads, Sk, "Mask"));
  /* The limits keep every index of the summaries in int (c0 + B <= 2 * FM_MASK_MAX_SEQLEN - 1 <=
     INT_MAX); the block counts are computed in 64 bits all the same. */
  FMCall(FMMaskCheckSizes_Private(Sq, Sk, (int)FM_MASK_NG(m), B > 0 ? B : -1, "Mask"));
  m->summary_valid = 0;
  m->stats_valid = 0;
  m->nblocks_k = (int)(((int64_t)Sk + B - 1) / B);
  n = FM_MASK_NG(m) * (size_t)Sk;
  const int nth = FMMaskThreads_Private(m, n, 0);
  (void)nth; /* without OpenMP */
  /* per interval whose two vectors are both carried: with one at its default d, start == end
     means both equal d, which is the default form already (validation has run: lts <= lte <= Sq,
     0 <= uts <= ute) */
  for (int pr = 0; pr < 2; pr++) {
    int32_t *s = m->bnd[2 * pr], *e = m->bnd[2 * pr + 1];
    const int32_t d = pr == 0 ? Sq : 0;
    if (!carried(m, 2 * pr) || !carried(m, 2 * pr + 1)) continue;
    /* branch-free (simd: GCC's -O2 vectorizes a loop of unknown trip count only so) */
#pragma omp parallel for simd num_threads(nth) schedule(static) if (parallel : nth > 1)
    for (size_t i = 0; i < n; i++) {
      const int32_t x0 = s[i], x1 = e[i];
      const int em = x0 == x1;
      s[i] = em ? d : x0;
      e[i] = em ? d : x1;
    }
  }
  return FM_SUCCESS;
}

/*
 * FMMaskComputeSummaries_Private - see fmimpl.h: m->summary ([mask_batch * mask_heads][nblocks_k]
 *   [FM_SUM_N], blocks of m->block key columns, the last one short) from the normalized bounds.
 */
FMErrorCode FMMaskComputeSummaries_Private(FMMask m)
{
  const int Sk = m->seqlen_k, B = m->block, nkb = m->nblocks_k, H = (int)FM_MASK_NG(m);
  const int nth = FMMaskThreads_Private(m, (size_t)H * Sk, 0); /* (head, key block) pairs on the context's threads */
  FMValidHeader(m, FM_CLASSID_MASK, 1);
  (void)nth; /* without OpenMP */
  FMCheck(m->bnd[0] && nkb == (int)(((int64_t)Sk + B - 1) / B), MPI_COMM_SELF, FM_ERR_ORDER,
          "The mask's block summaries are asked for before its bounds are normalized (FMMaskSetUp)");
  if ((size_t)H * nkb * FM_SUM_N > m->summary_cap) { /* a re-SetUp of the same sizes keeps its array */
    FMFree(m->summary);
    m->summary_cap = 0;
    FMCall(FMMalloc((size_t)H * nkb * FM_SUM_N, &m->summary));
    m->summary_cap = (size_t)H * nkb * FM_SUM_N;
  }
#pragma omp parallel for collapse(2) num_threads(nth) schedule(static) if (nth > 1)
  for (int h = 0; h < H; h++)
    for (int kb = 0; kb < nkb; kb++) {
      int32_t *s = m->summary + ((size_t)h * nkb + kb) * FM_SUM_N;
      const int c0 = (int)((int64_t)kb * B), c1 = (int)((int64_t)c0 + B < Sk ? (int64_t)c0 + B : Sk);
      for (int v = 0; v < 4; v++) {
        const int32_t *x = m->bnd[v] + (size_t)h * Sk;
        int32_t lo = INT32_MAX, hi = INT32_MIN; /* c1 > c0: every block has a column */
        if ((m->bnd_default >> v) & 1) { /* at its default everywhere */
          s[2 * v] = s[2 * v + 1] = v < 2 ? m->seqlen_q : 0;
          continue;
        }
#pragma omp simd reduction(min : lo) reduction(max : hi)
        for (int j = c0; j < c1; j++) {
          lo = x[j] < lo ? x[j] : lo;
          hi = x[j] > hi ? x[j] : hi;
        }
        s[2 * v] = lo;
        s[2 * v + 1] = hi;
      }
    }
  m->summary_valid = 1;
  return FM_SUCCESS;
}

/* FMMaskSummary_Private - see fmimpl.h. */
FMErrorCode FMMaskSummary_Private(FMMask m, const int32_t **summary)
{
  FMValidHeader(m, FM_CLASSID_MASK, 1);
  FMCheck(m->hdr.setupcalled, MPI_COMM_SELF, FM_ERR_ORDER, "The mask's block summaries are asked for before FMMaskSetUp");
  if (!m->summary_valid) FMCall(FMMaskComputeSummaries_Private(m));
  if (summary) *summary = m->summary;
  return FM_SUCCESS;
}

/* The key column of TileKeys' sample i (of n over cols columns): every column when n == cols,
   else one in each of n equal strata, at the offset frac(i phi) within it (no fixed stride for a
   periodic mask, documents of one length, to alias with). frac(i phi) in 64-bit fixed point,
   i x FM_PHI64 modulo 2^64, which a thread may start anywhere and step by adding FM_PHI64 with
   the same bits: any split of the samples over threads (and every rank) reads the same columns.
   Increasing in i. */
#define FM_PHI64 0x9E3779B97F4A7C15ull /* frac(golden ratio) x 2^64 */
static inline int64_t key_sample(int64_t i, uint64_t x, int64_t n, int64_t cols, double step)
{
  return n == cols ? i : (int64_t)(((double)i + (double)(int64_t)(x >> 11) * 0x1p-53) * step); /* the top 53 bits: a signed conversion */
}

/* The first sample at or after i0 whose column lies in a later mask row than sample i0 - 1's
   (i0 itself when i0 is 0 or n), by bisection over the increasing columns. */
static int64_t key_sample_row_start(int64_t i0, int64_t n, int64_t cols, double step, int Sk)
{
  int64_t lo = i0, hi = n, h;
  if (i0 <= 0 || i0 >= n) return i0;
  h = key_sample(i0 - 1, (uint64_t)(i0 - 1) * FM_PHI64, n, cols, step) / Sk;
  while (lo < hi) {
    const int64_t mid = lo + (hi - lo) / 2;
    if (key_sample(mid, (uint64_t)mid * FM_PHI64, n, cols, step) / Sk > h) hi = mid;
    else lo = mid + 1;
  }
  return lo;
}

/* How many key columns TileKeys samples (n) out of all mask rows' (cols), and the stratum width. */
static void key_samples(const FMMask m, int64_t *n, int64_t *cols, double *step)
{
  int64_t want = (int64_t)64 * (int64_t)FM_MASK_NG(m);
  *cols = (int64_t)FM_MASK_NG(m) * m->seqlen_k;
  if (want < FM_MASK_KEY_SAMPLES) want = FM_MASK_KEY_SAMPLES;
  if (want > 16 * FM_MASK_KEY_SAMPLES) want = 16 * FM_MASK_KEY_SAMPLES;
  *n = *cols < want ? *cols : want;
  *step = (double)*cols / (double)*n;
}

/* The samples [*i0, *i1) thread t of T takes: whole mask rows. */
static void key_sample_split(int t, int T, int64_t n, int64_t cols, double step, int Sk, int64_t *i0, int64_t *i1)
{
  *i0 = key_sample_row_start(n * t / T, n, cols, step, Sk);
  *i1 = key_sample_row_start(n * (t + 1) / T, n, cols, step, Sk);
}

/* FMMaskTileKeysSplit_Private - see fmimpl.h. */
void FMMaskTileKeysSplit_Private(const FMMask m, int t, int T, int64_t *n, int64_t *i0, int64_t *i1)
{
  int64_t cols;
  double step;
  key_samples(m, n, &cols, &step);
  key_sample_split(t, T, *n, cols, step, m->seqlen_k, i0, i1);
}

/* FMMaskTileKeysColumn_Private - see fmimpl.h. */
int64_t FMMaskTileKeysColumn_Private(const FMMask m, int64_t i)
{
  int64_t n, cols;
  double step;
  key_samples(m, &n, &cols, &step);
  return key_sample(i, (uint64_t)i * FM_PHI64, n, cols, step);
}

/* FMMaskVisitedRows_Private - see fmimpl.h. */
FMErrorCode FMMaskVisitedRows_Private(FMMask m, int BM, double *rows)
{
  const int32_t *sum;
  const int nkb = m->nblocks_k, NG = (int)FM_MASK_NG(m);
  double t = 0;
  FMValidHeader(m, FM_CLASSID_MASK, 1);
  FMValidPointer(rows, 3);
  FMCheck(BM >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument 2 (BM) is %d; expected >= 1", BM);
  FMCall(FMMaskSummary_Private(m, &sum));
  for (int g = 0; g < NG; g++) {
    const int32_t *sh = sum + (size_t)g * nkb * FM_SUM_N;
    long long n = 0;
    for (int kb = 0; kb < nkb; kb++) n += FMVisitedTilesInline(sh, m->causal, m->seqlen_q, m->seqlen_k, m->block, kb, BM);
    t += (double)n;
  }
  *rows = t * BM;
  return FM_SUCCESS;
}

/* FMMaskTileKeys_Private - see fmimpl.h. */
FMErrorCode FMMaskTileKeys_Private(FMMask m, int tile_rows, double *mean, double *cv)
{
  const int Sq = m->seqlen_q, Sk = m->seqlen_k, NG = (int)FM_MASK_NG(m);
  const int nqt = (int)(((int64_t)Sq + tile_rows - 1) / tile_rows);
  int64_t cols, n;
  double step, sk = 0, sk2 = 0, snoise = 0;
  int *diff, *ns, nth;
  FMValidHeader(m, FM_CLASSID_MASK, 1);
  FMValidPointer(mean, 3);
  FMValidPointer(cv, 4);
  FMCheck(m->hdr.setupcalled, MPI_COMM_SELF, FM_ERR_ORDER, "The mask's tile keys are asked for before FMMaskSetUp");
  FMCheck(tile_rows >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument 2 (tile_rows) is %d; expected >= 1", tile_rows);
  key_samples(m, &n, &cols, &step);
  FMCall(FMCalloc((size_t)NG * (nqt + 1) + NG, &diff));
  ns = diff + (size_t)NG * (nqt + 1);
  /* a sample costs some 10-20 ns: threads from about 2048 of them (32 mask rows), each taking
     whole mask rows (it alone writes their counts), so the counts, integers, are the same on any
     number of threads */
  nth = FMMaskThreads_Private(m, (size_t)n * 64, NG);
#pragma omp parallel num_threads(nth) if (nth > 1)
  {
    int64_t i0 = 0, i1 = n, row0;
    int h;
#ifdef _OPENMP
    key_sample_split(omp_get_thread_num(), omp_get_num_threads(), n, cols, step, Sk, &i0, &i1);
#endif
    uint64_t x = (uint64_t)i0 * FM_PHI64; /* frac(i phi) x 2^64 of sample i, stepped below */
    h = i0 < i1 ? (int)(key_sample(i0, x, n, cols, step) / Sk) : 0;
    row0 = (int64_t)h * Sk; /* the first column of mask row h */
    for (int64_t i = i0; i < i1; i++, x += FM_PHI64) {
      const int64_t c = key_sample(i, x, n, cols, step);
      int a[3], b[3], k, pos = 0, last = -1, *d; /* last: the last tile counted for this column */
      while (c >= row0 + Sk) { row0 += Sk; h++; } /* c increases: no 64-bit division per column */
      k = column_masked(m, h, (int)(c - row0), a, b);
      d = diff + (size_t)h * (nqt + 1);
      ns[h]++;
      /* the tiles that see this column: those holding a row of one of its visible gaps (sorted;
         a tile holding two gaps counts once) */
      for (int t = 0; t <= k; t++) {
        const int lo = pos, hi = t < k ? a[t] : Sq;
        if (hi > lo) {
          const int t0 = lo / tile_rows > last ? lo / tile_rows : last + 1, t1 = (hi - 1) / tile_rows;
          if (t0 <= t1) { d[t0]++; d[t1 + 1]--; last = t1; }
        }
        if (t < k && b[t] > pos) pos = b[t];
      }
    }
  }
  for (int g = 0; g < NG; g++) {
    const int *d = diff + (size_t)g * (nqt + 1);
    const double scale = (double)Sk / (ns[g] > 0 ? ns[g] : 1), fpc = 1.0 - (double)ns[g] / Sk; /* sampling without replacement */
    int run = 0;
    for (int t = 0; t < nqt; t++) {
      double kt;
      run += d[t];
      kt = run * scale;
      sk += kt;
      sk2 += kt * kt;
      if (ns[g] > 0) snoise += scale * scale * run * (1.0 - (double)run / ns[g]) * fpc; /* the binomial part of kt's spread */
    }
  }
  FMFree(diff);
  {
    const double T = (double)NG * nqt, mu = sk / T, var = sk2 / T - mu * mu - snoise / T;
    *mean = mu;
    *cv = mu > 0 && var > 0 ? sqrt(var) / mu : 0;
  }
  return FM_SUCCESS;
}

/* The causal rows [0, c) of column j: c = j + dq (dq = seqlen_q - seqlen_k) clipped to
   [0, seqlen_q], or 0 without the causal triangle (causal 0 or 1). In int: |dq| < 2^30. */
static inline int causal_end(int causal, int j, int dq, int Sq)
{
  const int c = j + dq;
  return (c < 0 ? 0 : c > Sq ? Sq : c) & -causal;
}

/* The size of the union of a column's causal rows [0, c), lower interval [a, b) and upper
   interval [x, y), by inclusion and exclusion, branch-free (in a vector loop), modulo 2^32. */
static inline uint32_t column_count(int c, int a, int b, int x, int y)
{
  const int lc = b < c ? b : c, uc = y < c ? y : c, lu0 = a > x ? a : x, lu1 = b < y ? b : y, t1 = lu1 < c ? lu1 : c;
  const int ab = b - a, xy = y - x, ovl_c = lc - a, ovu_c = uc - x, ovlu = lu1 - lu0, ovall = t1 - lu0;
  return (uint32_t)c + (uint32_t)(ab > 0 ? ab : 0) + (uint32_t)(xy > 0 ? xy : 0) - (uint32_t)(ovl_c > 0 ? ovl_c : 0) -
         (uint32_t)(ovu_c > 0 ? ovu_c : 0) - (uint32_t)(ovlu > 0 ? ovlu : 0) + (uint32_t)(ovall > 0 ? ovall : 0);
}

/* One vector loop of masked_count for the set k of carried vectors (FM_BOUND_* bits, a constant):
   a vector at its defaults is the constant, never read. */
#define FM_COUNT_CASE(k)                                                                                                     \
  case k:                                                                                                                    \
    _Pragma("omp simd reduction(+ : acc)") for (int j = p0; j < p1; j++) acc +=                                            \
      column_count(causal_end(causal, j, dq, Sq), (k) & 1 ? ls[j] : Sq, (k) & 2 ? le[j] : Sq, (k) & 4 ? us[j] : 0, (k) & 8 ? ue[j] : 0); \
    break;

/*
 * Masked entries of columns [j0, j1) of row h (column_count per column), reading only the
 * vectors the mask carries (random eviction: lts alone). The terms are summed in unsigned
 * 32-bit arithmetic (modulo 2^32, so a partial sum may wrap; each column's total is at most
 * seqlen_q), over pieces short enough that a piece's total fits, so the loop vectorizes.
 */
static int64_t masked_count(const FMMask m, int h, int j0, int j1)
{
  const size_t o = (size_t)h * m->seqlen_k;
  const int32_t *ls = m->bnd[0] + o, *le = m->bnd[1] + o, *us = m->bnd[2] + o, *ue = m->bnd[3] + o;
  const int dq = m->seqlen_q - m->seqlen_k, causal = m->causal != 0, Sq = m->seqlen_q, bits = ~m->bnd_default & 15;
  const int piece = (int)(UINT32_MAX / (uint32_t)Sq < 4096 ? UINT32_MAX / (uint32_t)Sq : 4096);
  int64_t n = 0;
  for (int p0 = j0; p0 < j1; p0 += piece) {
    const int p1 = j1 - p0 > piece ? p0 + piece : j1;
    uint32_t acc = 0;
    switch (bits) {
      FM_COUNT_CASE(0) FM_COUNT_CASE(1) FM_COUNT_CASE(2) FM_COUNT_CASE(3) FM_COUNT_CASE(4) FM_COUNT_CASE(5) FM_COUNT_CASE(6)
      FM_COUNT_CASE(7) FM_COUNT_CASE(8) FM_COUNT_CASE(9) FM_COUNT_CASE(10) FM_COUNT_CASE(11) FM_COUNT_CASE(12) FM_COUNT_CASE(13)
      FM_COUNT_CASE(14) FM_COUNT_CASE(15)
    }
    n += acc;
  }
  return n;
}
#undef FM_COUNT_CASE

/* The end of the masked run of rows from r0 in a column with causal end c, lower interval [a, b)
   and upper interval [x, y) (r0 itself if r0 is visible); see rows_masked. */
static inline int run_end(int c, int r0, int a, int b, int x, int y)
{
  int p = c > r0 ? c : r0;
  p = a <= p && b > p ? b : p;
  p = x <= p && y > p ? y : p;
  return a <= p && b > p ? b : p;
}

/*
 * Whether rows [r0, r1) are masked in every column of [c0, c1) of row h. Per column, from r0 the
 * masked run is followed through its intervals taken in order of their starts (the causal one
 * starts at 0, so it comes first; the lower and upper ones in either order, hence C, L, U, L):
 * the run reaches r1 iff the rows are masked. The first column alone, then branch-free in
 * chunks of 32 columns, returning at the first chunk with a visible entry.
 */
static int rows_masked(const FMMask m, int h, int c0, int c1, int r0, int r1)
{
  const size_t o = (size_t)h * m->seqlen_k;
  const int32_t *ls = m->bnd[0] + o, *le = m->bnd[1] + o, *us = m->bnd[2] + o, *ue = m->bnd[3] + o;
  const int dq = m->seqlen_q - m->seqlen_k, causal = m->causal != 0, Sq = m->seqlen_q;
  /* the first column alone first: a tile on the causal diagonal usually has a visible entry there */
  if (run_end(causal_end(causal, c0, dq, Sq), r0, ls[c0], le[c0], us[c0], ue[c0]) < r1) return 0;
  for (int j0 = c0; j0 < c1; j0 += 32) {
    const int j1 = c1 - j0 > 32 ? j0 + 32 : c1;
    int ok = 1;
#pragma omp simd reduction(& : ok)
    for (int j = j0; j < j1; j++) ok &= run_end(causal_end(causal, j, dq, Sq), r0, ls[j], le[j], us[j], ue[j]) >= r1;
    if (!ok) return 0;
  }
  return 1;
}

/* Undecided row tiles of one key block beyond which skipped_tiles scans the block's columns
   instead (scan_block): each costs at most one pass over the block's columns. */
#define FM_DENSITY_MAX_UNDECIDED 8

/*
 * The skipped tiles of key block [c0, c1) of row h, exactly, from its summaries s and, where they
 * leave rows undecided, the bounds. With cmin and cmax the causal ends of the block's first and
 * last columns, D = [0, cmin) U [max lts, min lte) U [max uts, min ute) is masked in every column.
 * Rows below cmin are in D; the rows at or above cmax see no causal interval, and there a row
 * masked in every column but not in D must lie in both intervals' ranges across the block, Z =
 * [max(min lts, min uts), min(max lte, max ute)) (a row below every lts, for one, is masked only
 * through the upper interval, in every column, so in D). So only tiles meeting the band
 * [cmin, cmax) or Z above cmax, and not inside D, are tested column by column (rows_masked); a
 * block with more of them than FM_DENSITY_MAX_UNDECIDED (random user bounds) is scanned whole.
 */
static int64_t skipped_tiles(const FMMask m, Scan *sc, const int32_t *s, int h, int c0, int c1)
{
  const int B = sc->B, Sq = sc->Sq, nqb = sc->nqb;
  const int dq = Sq - m->seqlen_k, causal = m->causal != 0;
  const int cmin = causal_end(causal, c0, dq, Sq), cmax = causal_end(causal, c1 - 1, dq, Sq);
  int da[3] = {0, s[FM_SUM_LTS_MAX], s[FM_SUM_UTS_MAX]}, db[3] = {cmin, s[FM_SUM_LTE_MIN], s[FM_SUM_UTE_MIN]};
  int tl[3], th[3], nt = 0, ua[2], ub[2], nu = 0, tt[FM_DENSITY_MAX_UNDECIDED], ntest = 0, last = -1;
  int64_t n = 0;
  const int z0 = s[FM_SUM_LTS_MIN] > s[FM_SUM_UTS_MIN] ? s[FM_SUM_LTS_MIN] : s[FM_SUM_UTS_MIN],
            z1 = s[FM_SUM_LTE_MAX] < s[FM_SUM_UTE_MAX] ? s[FM_SUM_LTE_MAX] : s[FM_SUM_UTE_MAX];
  /* D as sorted disjoint intervals, then the row tiles wholly inside each */
  for (int x = 0; x < 3; x++)
    if (db[x] <= da[x]) da[x] = db[x] = INT_MAX;
  cswap(da, db, 0, 1);
  cswap(da, db, 1, 2);
  cswap(da, db, 0, 1);
  for (int x = 0, k = -1; x < 3 && da[x] != INT_MAX; x++)
    if (k >= 0 && da[x] <= db[k]) {
      if (db[x] > db[k]) db[k] = db[x];
    } else {
      k++;
      da[k] = da[x];
      db[k] = db[x];
      nt = k + 1;
    }
  for (int k = 0; k < nt; k++) {
    const int lo = (int)(((int64_t)da[k] + B - 1) / B), hi = db[k] >= Sq ? nqb - 1 : db[k] / B - 1;
    tl[k] = lo;
    th[k] = hi;
    if (lo <= hi) n += hi - lo + 1;
  }
  /* the undecided rows: the causal band, and Z above it */
  if (cmax > cmin) { ua[nu] = cmin; ub[nu++] = cmax; }
  if (z1 > (z0 > cmax ? z0 : cmax)) { ua[nu] = z0 > cmax ? z0 : cmax; ub[nu++] = z1; }
  /* the tiles to test: those meeting the undecided rows and not inside D (each once) */
  for (int u = 0; u < nu; u++) {
    const int t1 = (ub[u] - 1) / B;
    for (int t = ua[u] / B > last ? ua[u] / B : last + 1; t <= t1; t++) {
      int inside = -1; /* the end of the D tile range holding t: jump past it */
      for (int k = 0; k < nt; k++) inside = t >= tl[k] && t <= th[k] ? th[k] : inside;
      if (inside >= 0) t = inside;
      else if (ntest == FM_DENSITY_MAX_UNDECIDED) return scan_block(m, sc, h, c0, c1); /* many: one scan of the columns */
      else tt[ntest++] = t;
    }
    last = t1 > last ? t1 : last;
  }
  for (int i = 0; i < ntest; i++)
    n += rows_masked(m, h, c0, c1, tt[i] * B, (int)((int64_t)tt[i] * B + B < Sq ? (int64_t)tt[i] * B + B : Sq));
  return n;
}

/*
 * The mask's statistics, the parts in want (FM_STATS_* bits of m->stats_valid) not yet valid: the
 * exact element density (fraction of (sample, head, i, j) entries not masked), one vector pass
 * over the normalized bounds, and block sparsity (fraction of block x block tiles, the last
 * row/column of tiles short, whose entries are all masked), from the block summaries and, for the
 * few tiles they leave undecided, the bounds.
 */
static FMErrorCode compute_stats(FMMask m, int want)
{
  const int Sq = m->seqlen_q, Sk = m->seqlen_k, B = m->block;
  const int CH = 4096; /* columns per piece of the element count */
  const int32_t *sum;
  int H, nkb, nqb, ncw, nth, *cnt;
  int64_t masked = 0, skipped = 0; /* integers: the same sums on any number of threads */
  Scan sc;
  size_t room;
  int need;
  FMValidHeader(m, FM_CLASSID_MASK, 1);
  need = want & ~m->stats_valid;
  if (!need) return FM_SUCCESS;
  FMCheck(m->hdr.setupcalled, MPI_COMM_SELF, FM_ERR_ORDER, "The mask's density is asked for before FMMaskSetUp");
  FMCall(FMMaskSummary_Private(m, &sum));
  H = (int)FM_MASK_NG(m);
  nkb = m->nblocks_k;
  nqb = (int)(((int64_t)Sq + B - 1) / B);
  ncw = (int)(((int64_t)Sk + CH - 1) / CH);
  /* room for a tile list of scan_block: each intersection adds at most 2 intervals, and disjoint
     intervals of nqb tiles are at most nqb */
  room = 2 * (2 * (size_t)B + 3 < (size_t)nqb + 1 ? 2 * (size_t)B + 3 : (size_t)nqb + 1);
  /* on the context's threads (32 heads of random eviction at 32K keys: about 1 ms on one core,
     the summaries included; 19.5 ms when every column was scanned) */
  nth = FMMaskThreads_Private(m, (size_t)H * Sk, 0);
  FMCall(FMMalloc(2 * room * (size_t)nth, &cnt));
  sc.B = B; sc.Sq = Sq; sc.nqb = nqb; sc.sh = -1;
  if ((B & (B - 1)) == 0)
    for (sc.sh = 0; (1 << sc.sh) < B; sc.sh++) {}
#pragma omp parallel num_threads(nth) firstprivate(sc) reduction(+ : skipped, masked) if (nth > 1)
  {
    int t = 0;
#ifdef _OPENMP
    t = omp_get_thread_num();
#endif
    sc.run = cnt + 2 * room * (size_t)t;
    sc.next = sc.run + room;
    if (need & FM_STATS_DENSITY) {
#pragma omp for collapse(2) schedule(static) nowait
      for (int h = 0; h < H; h++)
        for (int w = 0; w < ncw; w++) {
          const int j0 = w * CH, j1 = Sk - j0 > CH ? j0 + CH : Sk;
          masked += masked_count(m, h, j0, j1);
        }
    }
    if (need & FM_STATS_SPARSITY) {
#pragma omp for collapse(2) schedule(dynamic, 64)
      for (int h = 0; h < H; h++)
        for (int kb = 0; kb < nkb; kb++) {
          const int c0 = (int)((int64_t)kb * B), c1 = (int)((int64_t)c0 + B < Sk ? (int64_t)c0 + B : Sk);
          skipped += skipped_tiles(m, &sc, sum + ((size_t)h * nkb + kb) * FM_SUM_N, h, c0, c1);
        }
    }
  }
  free(cnt);
  if (need & FM_STATS_DENSITY) m->density = 1.0 - (double)masked / ((double)H * Sq * Sk);
  if (need & FM_STATS_SPARSITY) m->sparsity = (double)skipped / ((double)H * nqb * nkb);
  m->stats_valid |= need;
  return FM_SUCCESS;
}

/* FMMaskComputeDensity_Private - see fmimpl.h. */
FMErrorCode FMMaskComputeDensity_Private(FMMask m) { return compute_stats(m, FM_STATS_DENSITY | FM_STATS_SPARSITY); }

/* FMMaskComputeSparsity_Private - see fmimpl.h. */
FMErrorCode FMMaskComputeSparsity_Private(FMMask m) { return compute_stats(m, FM_STATS_SPARSITY); }
