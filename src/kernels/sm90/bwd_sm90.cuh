/*
 * bwd_sm90.cuh - internal interface of the GPU backward: the workspace layout shared by the
 * preprocess/postprocess (cuda_bwd.cu) and the Hopper main kernel (bwd_sm90.cu), the block
 * summaries' order, the query-block walk both use, and how many rows the deterministic mode
 * interleaves (fmbwd_ilv). Host and device code.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>
#include <flashmask/private/fmbwd.h>

/* Query rows per step of the main kernel's default path (the walk's default block and the
   fallback's); the kernel may take 80 (d = 128) or 128 (d = 64) rows instead (FMGpuBwdStepRows,
   fmbwd.h), per piece. */
#define FMBWD_BM 64

/* Summary numbers per key block, in the order of FM_SUM_* (fmimpl.h) */
enum { FMBWD_LTS_MIN = 0, FMBWD_LTS_MAX, FMBWD_LTE_MIN, FMBWD_LTE_MAX,
       FMBWD_UTS_MIN, FMBWD_UTS_MAX, FMBWD_UTE_MIN, FMBWD_UTE_MAX, FMBWD_SUM_N };

/*
 * Workspace, independent of the kernel's step rows (so that Begin and End need not know them,
 * and pieces of one backward may each take their own): rows are padded to Sqp = the larger of
 * seqlen_q rounded up to 80 and to 128 (a multiple of 16), so that every step's block of 64, 80
 * or 128 rows lies inside. lse2 = lse * log2(e) (+inf for rows with nothing visible and for padding rows, so that
 * exp2(s - lse2) = 0 there), dsum = rowsum(dO o O), both float [B][Hq][Sqp]; xt = the same two as
 * bf16 terms of the extra k-slice of the steps that take it (fmbwd_xf: every step at d = 128 and d = 64's
 * 128-row one) (written from them
 * before each such piece: bwd_sm90.cu, xt_terms and kXF): per 8 rows 32 bf16, four rows of 8 (the rows' -lse2 / c in two
 * terms, then -dsum in two), [B][Hq][Sqp / 8][4][8]; dqacc = dQ's fp32
 * accumulator in planes of 64 columns, [B][Hq][Dp / 64][Sqp][64] with Dp = head_dim rounded up
 * to 64 (a step's block of any row count is one contiguous range of its plane), column c of
 * global row r stored at fmbwd_swz(c, r); then the main kernel's work-item counter (zeroed
 * before each piece) and, for the deterministic mode, per (batch, query head, query block) four
 * words: the turns of the block's two halves (64-column halves, or at 128 rows 64-row halves) and
 * the first key block that visits the query
 * block ([B][Hq][nqb][4] ints with nqb counted in 64-row blocks, the most of any step size; set
 * before each piece). The size does not depend on seqlen_k.
 */
typedef struct {
  float *lse2, *dsum, *dqacc;
  uint16_t *xt;  /* the LSE and D terms of the steps that take kXF (bf16, above) */
  int *counter; /* the main kernel's work-item counter */
  int *turn;    /* deterministic mode: the turn words (bwd_sm90.cu) */
  int sqp;      /* the padded rows */
  int nqb;      /* 64-row query blocks (the turn words' and the first-store flags' rows) */
  int first_store; /* set by the caller: the accumulator is not zeroed, turn holds the blocks' flags
                      (cleared by the preprocess; FMGpuBwdFirstStore, fmbwd.h) */
} FMBwdWork;

static inline size_t fmbwd_align256(size_t x) { return (x + 255) & ~(size_t)255; }

/* The padded rows of the workspace (see above). */
__host__ __device__ static inline int fmbwd_sqp(int Sq)
{
  const int a = (Sq + 127) / 128 * 128, b = (Sq + 79) / 80 * 80;
  return a > b ? a : b;
}

/* The deterministic mode's interleaved rows (decode_item, bwd_sm90_base.cuh) for a grid of sms
   CTAs: as many as the grid holds key blocks of, on masks without the causal flag, at least 1
   and at most rows.
   Measured on the H200 (doc/performance.md, tenth session): full and random masks at 8K 1.26x ->
   1.13x of the default; causal unchanged, and GQA 4:1 causal 1.19x -> 1.30x. There the key
   blocks' walks grow as they decrease, so the longest items of a row come last and several rows
   are in flight at once (ncu: the deterministic order alone takes its L2 hit rate from 95% to
   74%); interleaving rows puts still more in flight. */
__host__ __device__ __forceinline__ int fmbwd_ilv(int sms, int nblk, int rows, int causal)
{
  int ilv = causal ? 1 : sms / nblk;
  if (ilv > rows) ilv = rows;
  return ilv < 1 ? 1 : ilv;
}

/*
 * Where column c (0..63) of global row r sits in its 64-float accumulator row: the 8-column
 * groups permuted by bits 0..3 of the row. Bits 3-4 only, so 8 aligned columns stay contiguous
 * (the postprocess's float4 reads); conflict-free both for staging a row's column pairs (the
 * 64-row path's 64-bit stores) and for staging one column of consecutive rows (the 80-row
 * path's transposed 32-bit stores), where (r & 7) << 3 puts rows 2 t4 and 2 t4 + 4 on one bank.
 * Steps start at multiples of 16, so a step's local row gives the same value as the global row.
 */
__host__ __device__ __forceinline__ int fmbwd_swz_bits(int r) { return ((r ^ (r >> 2)) & 3) << 3; }
__host__ __device__ __forceinline__ int fmbwd_swz(int c, int r) { return c ^ fmbwd_swz_bits(r); }

static inline size_t fmbwd_layout(const FMGpuBwdParams *p, FMBwdWork *w)
{
  const int nqb = (p->seqlen_q + FMBWD_BM - 1) / FMBWD_BM, dp = (p->head_dim + 63) / 64 * 64, sqp = fmbwd_sqp(p->seqlen_q);
  const size_t rows = (size_t)p->batch * p->heads_q * sqp;
  const size_t a = fmbwd_align256(rows * sizeof(float)), acc = fmbwd_align256(rows * dp * sizeof(float));
  const size_t turns = fmbwd_align256((size_t)p->batch * p->heads_q * nqb * 4 * sizeof(int));
  const size_t xt = fmbwd_align256(rows * 4 * sizeof(uint16_t));
  const size_t total = 2 * a + acc + 256 + turns + xt;
  if (w) {
    char *base = (char *)p->workspace;
    w->lse2 = (float *)base;
    w->dsum = (float *)(base + a);
    w->dqacc = (float *)(base + 2 * a);
    w->counter = (int *)(base + 2 * a + acc);
    w->turn = (int *)(base + 2 * a + acc + 256);
    w->xt = (uint16_t *)(base + 2 * a + acc + 256 + turns);
    w->sqp = sqp;
    w->nqb = nqb;
    w->first_store = 0;
  }
  return total;
}

/*
 * The query-block walk of one key block kb (columns [c0, c1)) for one mask head, shared by the
 * Hopper kernel's roles and the fallback: the summaries decide, per BM-row query block (BM = the
 * kernel's step rows, a template argument: a constant divisor; the fallback's blocks are 64), skip /
 * unmasked / partial (the rule of FMClassifyTileInline in fmimpl.h, plus the ragged last key
 * block, whose padding columns need the element test). next() jumps over runs of skipped blocks
 * in O(1) each, so skipped blocks cost nothing.
 */
struct FMBwdWalk {
  const int32_t *s; /* the key block's summaries (read at each step: no registers held) */
  int Sq, off, causal, c0, c1, nqb, ragged;
};

template <int BM = FMBWD_BM>
__host__ __device__ __forceinline__ void fmbwd_walk_init(FMBwdWalk *w, const int32_t *sum_head, int kb, int Sq, int Sk,
                                                         int causal)
{
  w->s = sum_head + (size_t)kb * FMBWD_SUM_N;
  w->Sq = Sq;
  w->off = Sk - Sq;
  w->causal = causal;
  w->c0 = kb * FMBWD_BLOCK_N;
  w->c1 = w->c0 + FMBWD_BLOCK_N < Sk ? w->c0 + FMBWD_BLOCK_N : Sk;
  w->nqb = (Sq + BM - 1) / BM;
  w->ragged = w->c0 + FMBWD_BLOCK_N > Sk;
}

/* Keys per work item of the Hopper kernel: a summaries' block, or at d = 256 half of one. */
__host__ __device__ constexpr int fmbwd_item_keys(int D) { return D == 256 ? 64 : FMBWD_BLOCK_N; }

/* The walk of item k of KN keys: block k, or (KN = 64) the 64-key half k of block k / 2, with the
   half's own columns for the causal and ragged tests and its block's summaries (a valid, looser
   bound for the half) for the rest. */
template <int BM, int KN = FMBWD_BLOCK_N>
__host__ __device__ __forceinline__ void fmbwd_walk_init_item(FMBwdWalk *w, const int32_t *sum_head, int k, int Sq, int Sk, int causal)
{
  static_assert(KN == FMBWD_BLOCK_N || KN == FMBWD_BLOCK_N / 2, "items of a block or half of one");
  fmbwd_walk_init<BM>(w, sum_head, k * KN / FMBWD_BLOCK_N, Sq, Sk, causal);
  if (KN != FMBWD_BLOCK_N) {
    w->c0 = k * KN;
    w->c1 = w->c0 + KN < Sk ? w->c0 + KN : Sk;
    w->ragged = w->c0 + KN > Sk;
  }
}

/* Whether the walk visits query block qb (not skipped): the test of fmbwd_walk_next, for one block. */
template <int BM = FMBWD_BM>
__host__ __device__ __forceinline__ bool fmbwd_walk_visits(const FMBwdWalk *w, int qb)
{
  const int m0 = qb * BM, m1 = m0 + BM < w->Sq ? m0 + BM : w->Sq;
  if (w->causal && w->c0 > m1 - 1 + w->off) return false;
  if (m0 >= w->s[FMBWD_LTS_MAX] && m1 <= w->s[FMBWD_LTE_MIN]) return false;
  return !(m0 >= w->s[FMBWD_UTS_MAX] && m1 <= w->s[FMBWD_UTE_MIN]);
}

/* First query block >= qb that is not skipped (nqb if none); *partial: whether it needs the
   per-element test. */
template <int BM = FMBWD_BM>
__host__ __device__ __forceinline__ int fmbwd_walk_next(const FMBwdWalk *w, int qb, int *partial)
{
  while (qb < w->nqb) {
    const int m0 = qb * BM, m1 = m0 + BM < w->Sq ? m0 + BM : w->Sq;
    int nx = -1;
    if (w->causal && w->c0 > m1 - 1 + w->off) nx = (w->c0 - w->off) / BM;
    else if (m0 >= w->s[FMBWD_LTS_MAX] && m1 <= w->s[FMBWD_LTE_MIN]) nx = w->s[FMBWD_LTE_MIN] / BM;
    else if (m0 >= w->s[FMBWD_UTS_MAX] && m1 <= w->s[FMBWD_UTE_MIN]) nx = w->s[FMBWD_UTE_MIN] / BM;
    if (nx < 0) {
      *partial = w->ragged || (w->causal && w->c1 - 1 > m0 + w->off) ||
                 (m0 < w->s[FMBWD_LTE_MAX] && m1 > w->s[FMBWD_LTS_MIN]) ||
                 (m0 < w->s[FMBWD_UTE_MAX] && m1 > w->s[FMBWD_UTS_MIN]);
      return qb;
    }
    qb = nx > qb + 1 ? nx : qb + 1;
  }
  return w->nqb;
}

/* The items (of KN keys: fmbwd_walk_init_item) of one mask head that visit query block qb (the
   walk's test), of nitem: the first and the last (0x7fffffff and -1 where none does) and, when n
   is not NULL, how many. Where the deterministic mode's turns start and end (turn_init,
   bwd_sm90_dq.cuh); checked against the producer's walk on the host (bwd_bench order). */
template <int BM, int KN = FMBWD_BLOCK_N>
__host__ __device__ inline void fmbwd_visitors(const int32_t *sum_head, int nitem, int qb, int Sq, int Sk, int causal, int *first,
                                               int *last, int *n)
{
  FMBwdWalk w;
  int f = 0x7fffffff, l = -1, c = 0;
  for (int kb = 0; kb < nitem; kb++) {
    fmbwd_walk_init_item<BM, KN>(&w, sum_head, kb, Sq, Sk, causal);
    if (fmbwd_walk_visits<BM>(&w, qb)) { f = kb; break; }
  }
  for (int kb = nitem - 1; kb >= f && f != 0x7fffffff; kb--) {
    fmbwd_walk_init_item<BM, KN>(&w, sum_head, kb, Sq, Sk, causal);
    if (fmbwd_walk_visits<BM>(&w, qb)) { l = kb; break; }
  }
  for (int kb = f; n && kb <= l; kb++) {
    fmbwd_walk_init_item<BM, KN>(&w, sum_head, kb, Sq, Sk, causal);
    c += fmbwd_walk_visits<BM>(&w, qb);
  }
  *first = f;
  *last = l;
  if (n) *n = c;
}

/* Whether key j is masked for row i (device mask column bounds b = {lts, lte, uts, ute}). */
__host__ __device__ __forceinline__ bool fmbwd_masked(int4 b, int i, int j, int causal, int off)
{
  return (i >= b.x && i < b.y) || (i >= b.z && i < b.w) || (causal && j > i + off);
}

/* Hopper main kernel (bwd_sm90.cu): whether it covers p; launch it (after the preprocess). */
int FMBwdSm90Supported(const FMGpuBwdParams *p);
cudaError_t FMBwdSm90Launch(const FMGpuBwdParams *p, const FMBwdWork *w, cudaStream_t s);
