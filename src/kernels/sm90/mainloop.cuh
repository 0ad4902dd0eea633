/*
 * mainloop.cuh - the Hopper forward's two roles over the block list: producer_load (one thread
 * issues every TMA into the ST-stage ring) and consumer_mainloop (S = Q K^T and O += P V with
 * wgmma, masking and the online softmax), with their GEMM, mask and softmax helpers. All
 * __forceinline__: wgmma must stay inlined in the kernel. Device code, included by
 * fwd_sm90.cu only.
 */
#pragma once
#include <math.h>
#include "layout.cuh"
#include "wgmma_gen.cuh"

namespace fmsm90 {

/* S = Q K^T over d = 16 k-steps of 16; Q chunks hold BM rows (qch bytes), K chunks TN rows (kch bytes). */
/* kDescAt<D>: the products' k-step descriptors by desc_at (one uniform 64-bit add each) instead of
   desc_join (an add and a move of each half): 16 fewer instructions a step at d = 64, where
   it is on (with kOnesSum: ab64 +1.3 / +1.7% geometric mean under the grid / dynamic schedule,
   H100, 2026-12-07). -DFM_SM90_FWD_DESC_AT=0 turns it off, =1 on at every d (A/B; at d = 128 and
   256 it measured 1.5-2.4% slower on full in 2026-12-04: ptx.cuh; with d = 128's 176-key tiles
   level on 2026-12-08, fwd_bench ab and abmask on an H100: geometric mean 1.001, full +1.3-1.5%,
   prefix LM 32K -2.6%). */
#ifndef FM_SM90_FWD_DESC_AT
#define FM_SM90_FWD_DESC_AT 64
#endif
template <int D> constexpr bool kDescAt = FM_SM90_FWD_DESC_AT == 1 || FM_SM90_FWD_DESC_AT == D;

template <int TN, int QCH, bool F16, bool AT = false> __device__ __forceinline__ void gemm_qk(float *s, uint32_t qaddr, uint32_t kaddr, int D)
{
  constexpr uint32_t kch = TN * 128;
  const uint32_t la = desc_lo(qaddr, 16), lb = desc_lo(kaddr, 16);
  const uint64_t a0 = desc_join(la, desc_hi(1024)), b0 = desc_join(lb, desc_hi(1024));
#pragma unroll
  for (int kk = 0; kk < 16; kk++) {
    if (kk < D / 16) {
      const uint32_t oa = (kk / 4) * QCH + (kk % 4) * 32, ob = (kk / 4) * kch + (kk % 4) * 32; /* bytes into Q and K */
      if constexpr (AT) wgmma_ss<TN, F16>(s, desc_at(a0, oa), desc_at(b0, ob), kk > 0);
      else wgmma_ss<TN, F16>(s, desc_join(la + oa / 16, desc_hi(1024)), desc_join(lb + ob / 16, desc_hi(1024)), kk > 0);
    }
  }
}

/* vhi: the LBO/SBO/layout bits of the V descriptor (FMGpuFwdCore::vdesc_hi, see launch());
   k-step u takes the tile's key rows 16u .. 16u + 15 (2048 bytes into each chunk). */
template <int D, int TN, bool F16>
__device__ __forceinline__ void gemm_pv(float *o, const uint32_t *p, uint32_t vaddr, uint64_t vhi)
{
  const uint32_t lo = ((vaddr & 0x3FFFF) >> 4) | (uint32_t)vhi, hi = (uint32_t)(vhi >> 32);
  const uint64_t b0 = desc_join(lo, hi);
#pragma unroll
  for (int u = 0; u < TN / 16; u++) wgmma_rs<D, F16>(o, p + 4 * u, kDescAt<D> ? desc_at(b0, u * 2048) : desc_join(lo + u * 2048 / 16, hi));
}

/* gemm_pv with P's row sums (kOnesSum, layout.cuh): B's columns 64..71 are the block of ones at
   ones: k-step u's descriptor has the address of V's rows 16u.. and the LBO (the stride to B's
   second 64-column group) that reaches the ones from there; ls: the accumulator's columns
   64..71 (ls[0], ls[2]: rows r0 and r0 + 8). */
template <int D, int TN, bool F16>
__device__ __forceinline__ void gemm_pv_sum(float *o, float *ls, const uint32_t *p, uint32_t vaddr, uint32_t ones, uint64_t vhi)
{
  static_assert(D == 64, "one 8-column group past d = 64");
  const uint32_t a = (vaddr & 0x3FFFF) >> 4, z = (ones & 0x3FFFF) >> 4, hi = (uint32_t)(vhi >> 32);
  const uint32_t lo = a | ((z - a) << 16); /* step u: address a + 128 u, LBO z - a - 128 u (neither field wraps) */
#pragma unroll
  for (int u = 0; u < TN / 16; u++) {
    const uint32_t du = u * (128u - (128u << 16));
    wgmma_rs_sum<F16>(o, ls, p + 4 * u, kDescAt<D> ? desc_join(lo, hi) + (uint64_t)(int64_t)(int32_t)du : desc_join(lo + du, hi));
  }
}

/* The block of ones (kOnesSum) in the element type, by the threads tid = 0 .. NT - 1 of the CTA;
   fenced for the products, before the barrier that every consumer passes first. */
template <bool F16, class L, int NT> __device__ __forceinline__ void fill_ones(unsigned char *smem, int tid)
{
  if constexpr (L::ONES > 0) {
    const uint32_t one = F16 ? 0x3C003C00u : 0x3F803F80u;
    for (int i = tid; i < L::ONES / 16; i += NT) st_u32x4(smem_u32(smem + L::OFF_ONES) + 16 * i, one, one, one, one);
    fence_proxy_async();
  }
}

/*
 * Per-element mask of a partial tile of TN columns (colbase: its first column), only the tests
 * the tile needs: s[4k+e] is row r0 (e < 2) or r0 + 8, column 8k + 2*(lane%4) + (e&1). An
 * interval [a, b) (a <= b) holds row i iff (unsigned)(i - a) < (unsigned)(b - a). Padding
 * columns past seqlen_k carry [0, INT_MAX).
 */
template <int TN, bool LO, bool UP, bool CA>
__device__ __forceinline__ void mask_tile(float *s, const int4 *bnd, int row0, int colbase, int lane, int off)
{
  const int row1 = row0 + 8;
  const int t0 = row0 + off - colbase, t1 = t0 + 8; /* causal: column c masked iff c > t */
#pragma unroll
  for (int k = 0; k < TN / 8; k++) {
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int c = 8 * k + 2 * (lane & 3) + e;
      bool m0 = false, m1 = false;
      if constexpr (LO || UP) {
        const int4 b = bnd[c];
        if constexpr (LO) {
          const unsigned w = (unsigned)(b.y - b.x);
          m0 |= (unsigned)(row0 - b.x) < w;
          m1 |= (unsigned)(row1 - b.x) < w;
        }
        if constexpr (UP) {
          const unsigned w = (unsigned)(b.w - b.z);
          m0 |= (unsigned)(row0 - b.z) < w;
          m1 |= (unsigned)(row1 - b.z) < w;
        }
      }
      if constexpr (CA) {
        m0 |= c > t0;
        m1 |= c > t1;
      }
      if (m0) s[4 * k + e] = -INFINITY;
      if (m1) s[4 * k + 2 + e] = -INFINITY;
    }
  }
}

/* One-interval tile: element (i, j) visible iff x_j <= i < y_j. */
template <int TN> __device__ __forceinline__ void mask_simple(float *s, const int2 *vis, int row0, int lane)
{
  const int row1 = row0 + 8;
#pragma unroll
  for (int k = 0; k < TN / 8; k++) {
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int2 v = vis[8 * k + 2 * (lane & 3) + e];
      const unsigned w = (unsigned)(v.y - v.x);
      if (!((unsigned)(row0 - v.x) < w)) s[4 * k + e] = -INFINITY;
      if (!((unsigned)(row1 - v.x) < w)) s[4 * k + 2 + e] = -INFINITY;
    }
  }
}

/*
 * The wide kernel's one test (fwd_kernel_wide: full, or causal by its flag): column c of the tile
 * is visible to row i iff c <= i + off - colbase (causal; off = 2^29 without) and c < sk -
 * colbase (TMA fills the columns past seqlen_k with zeros).
 */
template <int TN> __host__ __device__ __forceinline__ void mask_limit(float *s, int row0, int colbase, int lane, int off, int sk)
{
  /* (host too: fwd_bench tiles checks it against the mask) */
  const int t0 = (row0 + off < sk - 1 ? row0 + off : sk - 1) - colbase, t1 = (row0 + 8 + off < sk - 1 ? row0 + 8 + off : sk - 1) - colbase;
#pragma unroll
  for (int k = 0; k < TN / 8; k++) {
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int c = 8 * k + 2 * (lane & 3) + e;
      if (c > t0) s[4 * k + e] = -INFINITY;
      if (c > t1) s[4 * k + 2 + e] = -INFINITY;
    }
  }
}

/* Extra tests are harmless (each is exact), so three variants cover the eight flag sets (more
   variants made ptxas spill). */
template <int TN>
__device__ __forceinline__ void apply_mask(float *s, int e, const int4 *bnd, int row0, int colbase, int lane, int off)
{
  const int f = (e >> 28) & 7;
  if (f == 0) return;
  if (e & kSimple) mask_simple<TN>(s, (const int2 *)bnd, row0, lane);
  else if (f == 4) mask_tile<TN, false, false, true>(s, bnd, row0, colbase, lane, off);
  else mask_tile<TN, true, true, true>(s, bnd, row0, colbase, lane, off);
}

/* The tile's tests by layout: the entry's flags (apply_mask), or in the wide kernel the limit
   test where its entry carries kCausal (WideTiles, blocklist.cuh). */
template <class L>
__device__ __forceinline__ void mask_entry(float *s, int e, const int4 *bnd, int row0, int colbase, int lane, int off, int sk)
{
#ifdef FMFWD_EXP_NOMASK /* timing only (wrong results): what the element tests cost */
  return;
#endif
  if constexpr (L::kCounted) {
    if (e & kCausal) mask_limit<L::TN>(s, row0, colbase, lane, off, sk);
  } else {
    apply_mask<L::TN>(s, e, bnd, row0, colbase, lane, off);
  }
}

/*
 * The rescale skip: while no row of the warp's max grows by more than kRescaleSkip in base-2
 * units, the warp keeps its running max. P is then relative to the kept max (at most
 * 2^kRescaleSkip), O and l need no rescale (corr is set to 1) and the caller skips it; O / l and
 * the LSE (taken from the same max) are unchanged in exact arithmetic. FlashAttention-4 does this
 * on Blackwell. kRescaleSkipOn<D> says where it is on: at d = 256, where O's rescale is 128
 * multiplies a step, it ran 2.7-6.9% faster (full and causal 8K, 2026-12-02); at d = 64 and 128
 * it was within -1.4..+2% (not kept there), and on the d = 64 step with the row sums by the
 * tensor core (kOnesSum) level again (ab64 geometric mean 1.001 grid, 0.996 dynamic, H100,
 * 2026-12-07). -DFM_SM90_RESCALE_SKIP turns it on for every d (A/B).
 */
constexpr float kRescaleSkip = 8.f;
#ifdef FM_SM90_RESCALE_SKIP
template <int D> constexpr bool kRescaleSkipOn = true;
#else
template <int D> constexpr bool kRescaleSkipOn = D == 256;
#endif

/* Online softmax of one S tile (TN columns) held in registers; sets the correction factors for
   O and returns whether they are 1 for the whole warp (the max kept: SKIP only, see kRescaleSkipOn).
   At d = 64 a step's exponentials need as many MUFU cycles as its products need tensor cycles
   (ncu, full 8K: XU pipe 61%, tensor 58%). Part of them on the FMA pipe instead (2^f by a degree-4
   polynomial, 10 instructions each; 4, 8 or 16 of a thread's 64) ran level, 3% and 8% slower
   (H100, fwd_bench ab64, 2026-12-07): the issue slots they take cost more than MUFU frees. On
   the step with the row sums by the tensor core (64 fewer FADD, kOnesSum), 4 and 8 of 64 ran
   1-1.4% and 2.2-2.3% slower (geometric means, grid and dynamic; the same day). */
template <int TN, bool SKIP, bool SUM = true> __device__ __forceinline__ bool softmax_step(float *s, float *mrow, float *lrow, float c, float *corr)
{
  float mx0 = mrow[0], mx1 = mrow[1];
#pragma unroll
  for (int k = 0; k < TN / 8; k++) {
    mx0 = fmaxf(mx0, fmaxf(s[4 * k], s[4 * k + 1]));
    mx1 = fmaxf(mx1, fmaxf(s[4 * k + 2], s[4 * k + 3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  bool keep = false;
  if constexpr (SKIP) {
    /* a row's max unchanged (a row with nothing visible yet too: -inf == -inf), or grown by at most
       kRescaleSkip; a row whose max is new (from -inf) compares +inf: not kept */
    const bool k0 = mx0 == mrow[0] || mx0 * c - mrow[0] * c <= kRescaleSkip;
    const bool k1 = mx1 == mrow[1] || mx1 * c - mrow[1] * c <= kRescaleSkip;
    keep = __all_sync(0xffffffffu, k0 && k1);
    if (keep) { /* P relative to the kept max */
      mx0 = mrow[0];
      mx1 = mrow[1];
    }
  }
  /* a row with nothing visible yet keeps max -inf: subtract 0 so exp2(-inf) = 0, never NaN */
  const float ms0 = mx0 == -INFINITY ? 0.f : mx0 * c;
  const float ms1 = mx1 == -INFINITY ? 0.f : mx1 * c;
  if (keep) { /* set, not computed: O is not rescaled, so l must not be either */
    corr[0] = corr[1] = 1.f;
  } else {
    corr[0] = exp2f(mrow[0] * c - ms0);
    corr[1] = exp2f(mrow[1] * c - ms1);
  }
  mrow[0] = mx0;
  mrow[1] = mx1;
  float l0 = 0.f, l1 = 0.f;
#pragma unroll
  for (int k = 0; k < TN / 8; k++) {
    s[4 * k] = exp2f(fmaf(s[4 * k], c, -ms0));
    s[4 * k + 1] = exp2f(fmaf(s[4 * k + 1], c, -ms0));
    s[4 * k + 2] = exp2f(fmaf(s[4 * k + 2], c, -ms1));
    s[4 * k + 3] = exp2f(fmaf(s[4 * k + 3], c, -ms1));
    if constexpr (SUM) {
      l0 += s[4 * k] + s[4 * k + 1];
      l1 += s[4 * k + 2] + s[4 * k + 3];
    }
  }
  if constexpr (SUM) { /* (without: the row sums come from P V, kOnesSum) */
    lrow[0] = lrow[0] * corr[0] + l0;
    lrow[1] = lrow[1] * corr[1] + l1;
  }
  return keep;
}

template <int D> __device__ __forceinline__ void rescale_o(float *o, const float *corr, float *ls)
{
#pragma unroll
  for (int k = 0; k < D / 8; k++) {
    o[4 * k] *= corr[0];
    o[4 * k + 1] *= corr[0];
    o[4 * k + 2] *= corr[1];
    o[4 * k + 3] *= corr[1];
  }
  if constexpr (kOnesSum<D>) { /* the row sums' columns (ls[1], ls[3] are never read) */
    ls[0] *= corr[0];
    ls[2] *= corr[1];
  }
}

/*
 * producer_load - warpgroup 0 after setmaxnreg.dec: thread 0 loads, per visited key block, K
 *   (and, for partial blocks, the block's per-column mask data in the same transaction), then
 *   V of the previous block, waiting on each stage's empty barrier. r0: the ring position of
 *   list[0] (the persistent kernel's ring runs on across its tiles; 0 for one tile per CTA).
 *   L: the layout; List: the block list in shared memory (const int *), or the wide kernel's
 *   counted tiles (WideTiles), indexed alike.
 */
template <int D, int ST, int NQ = 1, class Src = GridTile<D>, class L = Layout<D, ST, NQ>, class List = const int *>
__device__ __forceinline__ void producer_load(const CUtensorMap *tmK, const CUtensorMap *tmV, const FMGpuFwdCore &p,
                                              unsigned char *smem, const List list, int n, const Barriers &bar, int r0 = 0,
                                              const Src &src = Src())
{
  const CtaCoords cc = src(p);
  const int mh = cc.mh, hkv = cc.hkv, b = cc.b, tid = cc.tid;
  __builtin_assume(r0 >= 0);
  uint64_t *k_full = bar.k_full, *k_empty = bar.k_empty, *v_full = bar.v_full, *v_empty = bar.v_empty;
  if (tid == 0 && n > 0) {
    constexpr int TN = L::TN;
    const int4 *bsrc = p.packed + (size_t)mh * p.nblk * kBN;
    const int2 *vsrc = p.vis + (size_t)mh * p.nblk * kBN;
    for (int i = 0; i <= n; i++) {
      if (i < n) {
        const int e = list[i], kb = e & kBlockBits;
        const bool bnd = !L::kCounted && (e & (kLower | kUpper)) != 0, simple = !L::kCounted && (e & kSimple) != 0;
        const int g = r0 + i;
        const int st = g % ST;
        const uint32_t ph = (g / ST) & 1;
        mbar_wait(&k_empty[st], ph ^ 1);
        mbar_expect_tx(&k_full[st], L::KB + (simple ? TN * 8 : bnd ? TN * 16 : 0));
#pragma unroll
        for (int c = 0; c < D / 64; c++)
          tma_load_4d(smem + L::OFF_K + st * L::KB + c * L::KCH, tmK, &k_full[st], c * 64, hkv, kb * TN, b);
        if (simple) bulk_load(smem + L::OFF_B + st * L::BB, vsrc + (size_t)kb * TN, TN * 8, &k_full[st]);
        else if (bnd) bulk_load(smem + L::OFF_B + st * L::BB, bsrc + (size_t)kb * TN, TN * 16, &k_full[st]);
      }
      if (i > 0) {
        const int j = i - 1, kb = list[j] & kBlockBits;
        const int g = r0 + j;
        const int st = g % ST;
        const uint32_t ph = (g / ST) & 1;
        mbar_wait(&v_empty[st], ph ^ 1);
        mbar_expect_tx(&v_full[st], L::KB);
#pragma unroll
        for (int c = 0; c < D / 64; c++)
          tma_load_4d(smem + L::OFF_V + st * L::KB + c * L::KCH, tmV, &v_full[st], c * 64, hkv, kb * TN, b);
      }
    }
  }
}

/*
 * consumer_mainloop - one consumer warpgroup (cw = 0 .. NC - 1: 64 query rows each) after
 *   setmaxnreg.inc: zeroes o, waits for Q, then runs the block list: step j issues S_j = Q K_j^T
 *   and O += P_{j-1} V_{j-1} back to back, masks and softmaxes S_j while P.V is in flight, and
 *   takes its turn of wgmma issue with the other consumers through named barriers 1.. NC (round
 *   robin: consumer cw waits on barrier kBarPing + cw, then lets the next one go). On
 *   return o holds the unnormalized O of the thread's fragments, mrow/lrow their row max and
 *   partial row sums (per thread; the epilogue reduces l over the quad).
 *   qtile: the Q buffer, complete when bar.q_full's phase of parity qph is; r0: the ring
 *   position of list[0]; L, List: as producer_load's.
 */
template <int D, int ST, bool F16, int NQ = 1, class Src = GridTile<D>, class L = Layout<D, ST, NQ>, class List = const int *>
__device__ __forceinline__ void consumer_mainloop(const FMGpuFwdCore &p, unsigned char *smem, const List list, int n,
                                                  const Barriers &bar, float *o, float *mrow, float *lrow,
                                                  const unsigned char *qtile, uint32_t qph = 0, int r0 = 0, const Src &src = Src())
{
  constexpr int TN = L::TN;
  const CtaCoords cc = src(p);
  __builtin_assume(r0 >= 0); /* the stage and phase of ring position g: g % ST and g / ST without sign fix-ups */
  const int lane = cc.lane, cw = cc.wg - 1, w = (cc.tid - 128 * cc.wg) >> 5;
  const int row0 = cc.m0 + cw * 64 + w * 16 + (lane >> 2);
  uint64_t *q_full = bar.q_full, *k_full = bar.k_full, *k_empty = bar.k_empty, *v_full = bar.v_full, *v_empty = bar.v_empty;
  const float c = p.scale_log2;
  /* causal offset for the element test; a non-causal mask gets one no column exceeds */
  const int off = p.causal ? p.seqlen_k - p.seqlen_q : (1 << 29);
  float s[TN / 2];
  uint32_t pr[TN / 4];
  float corr[2];
  float ls[4] = {0.f, 0.f, 0.f, 0.f}; /* kOnesSum: P V's columns 64..71, the row sums */
  constexpr bool SUM = !kOnesSum<D>;
  bool keep = false; /* the last softmax step kept the warp's max: O needs no rescale (corr = 1) */
#ifdef FMFWD_PROF
  const bool pon = (cc.tid & 127) == 0; /* the warpgroup's first thread counts */
  FMFWD_PROF_N(pon, FPROF_BLOCKS, n);
#endif
#pragma unroll
  for (int i = 0; i < D / 2; i++) o[i] = 0.f;
  {
    FMFWD_PROF_T(tq);
    mbar_wait(q_full, qph);
    FMFWD_PROF_ADD(pon, FPROF_Q, tq);
  }

  if (n > 0) {
    constexpr int NC = Cfg<D>::NC;
    const int mine = kBarPing + cw, other = kBarPing + (cw + 1 == NC ? 0 : cw + 1);
    const uint32_t qaddr = smem_u32(qtile) + cw * 64 * 128;
    const uint32_t kbase = smem_u32(smem + L::OFF_K), vbase = smem_u32(smem + L::OFF_V), ones = smem_u32(smem + L::OFF_ONES);
    const int4 *bbase = (const int4 *)(smem + L::OFF_B);
    /* The consumers' turns (ping-pong with two) at every d. FlashAttention-3 and -4
       drop theirs above d = 128; without ours at d = 256 the forward ran 1-2% slower on full and
       causal, 8K and 32K (H200, 2026-12-05, fwd_bench ab256): kept. */
    /* In the persistent kernel (NQ = 2) the turns run on from tile to tile: the last consumer lets
       the first one go after its last P.V of a tile, so that the first consumer starts the next
       tile while the others finish this one (the kernel makes the first and takes the last
       arrival). The one-tile kernels start afresh: consumer 0 issues first. (Turns begun afresh
       per tile in the persistent kernel too: sliding window, causal document and share question
       1.5-5% slower at d = 128, 3-8% at d = 64, H100, 2026-12-07.) */
    constexpr bool chain = NQ == 2;
    if (!chain && cw == NC - 1) named_arrive(kBarPing, 256);

    /* block 0: S only */
    {
      FMFWD_PROF_T(t1);
      const int e = list[0], kb = e & kBlockBits;
      const int st = r0 % ST;
      mbar_wait(&k_full[st], (r0 / ST) & 1);
      named_sync(mine, 256);
      wgmma_fence();
      gemm_qk<TN, Cfg<D>::QCH, F16, kDescAt<D>>(s, qaddr, kbase + st * L::KB, D);
      wgmma_commit();
      named_arrive(other, 256);
      wgmma_wait<0>();
#pragma unroll
      for (int i = 0; i < TN / 2; i++) reg_fence(s[i]);
      mask_entry<L>(s, e, bbase + st * TN, row0, kb * TN, lane, off, p.seqlen_k);
      release_k(&k_empty[st], lane);
      keep = softmax_step<TN, kRescaleSkipOn<D>, SUM>(s, mrow, lrow, c, corr);
#pragma unroll
      for (int i = 0; i < TN / 4; i++) pr[i] = pack2<F16>(s[2 * i], s[2 * i + 1]);
      FMFWD_PROF_N(pon, FPROF_PARTIAL, (e & (kLower | kUpper | kCausal)) ? 1 : 0);
      FMFWD_PROF_ADD(pon, FPROF_FIRST, t1);
    }
    for (int i = 1; i < n; i++) {
      const int e = list[i], kb = e & kBlockBits;
      const int g = r0 + i;
      const int st = g % ST, pst = (g - 1) % ST;
      const uint32_t ph = (g / ST) & 1, pph = ((g - 1) / ST) & 1;
      {
        FMFWD_PROF_T(tk);
        mbar_wait(&k_full[st], ph);
        FMFWD_PROF_ADD(pon, FPROF_KW, tk);
      }
      {
        FMFWD_PROF_T(tt);
        named_sync(mine, 256);
        FMFWD_PROF_ADD(pon, FPROF_TURN, tt);
      }
      wgmma_fence();
      gemm_qk<TN, Cfg<D>::QCH, F16, kDescAt<D>>(s, qaddr, kbase + st * L::KB, D);
      wgmma_commit();
      /* O (basis m_{i-2}) to basis m_{i-1} while S_i is computed: off the critical path. (After
         P.V's wait instead, as FlashAttention-3/4 place it at d <= 128: +1.3% full 8K, -2.3%
         full 32K, causal document 8K +2..6%, H200 2026-12-01 (seventh session): not kept.) */
      if constexpr (!kOnesSum<D>)
        if (!keep) rescale_o<D>(o, corr, ls);
      {
        FMFWD_PROF_T(tv);
        mbar_wait(&v_full[pst], pph);
        FMFWD_PROF_ADD(pon, FPROF_VW, tv);
      }
      wgmma_fence();
      if constexpr (kOnesSum<D>) gemm_pv_sum<D, TN, F16>(o, ls, pr, vbase + pst * L::KB, ones, p.vdesc_hi);
      else gemm_pv<D, TN, F16>(o, pr, vbase + pst * L::KB, p.vdesc_hi);
      wgmma_commit();
      /* The turn is passed on here, after P.V's issue. Passed right after S's issue instead, so
         that the next consumer's S may go before this P.V (d = 64, three consumers): 0.990 of
         this on both schedules' geometric means (ab64, 2 rounds, H100, 2026-12-07, thirty-seventh
         session), short-tile masks -9% to +5%: not kept. */
      named_arrive(other, 256);
      wgmma_wait<1>();
#pragma unroll
      for (int t = 0; t < TN / 2; t++) reg_fence(s[t]);
      {
        FMFWD_PROF_T(tm);
        mask_entry<L>(s, e, bbase + st * TN, row0, kb * TN, lane, off, p.seqlen_k);
        FMFWD_PROF_N(pon, FPROF_PARTIAL, (e & (kLower | kUpper | kCausal)) ? 1 : 0);
        FMFWD_PROF_ADD(pon, FPROF_MASK, tm);
      }
      release_k(&k_empty[st], lane);
      keep = softmax_step<TN, kRescaleSkipOn<D>, SUM>(s, mrow, lrow, c, corr);
      /* In the PTX the exponentials come before this wait, but ptxas schedules the wait (it reads
         no register) above them, so they do not overlap P.V. Forced below them (a never-taken
         branch on the row sums ends the block first): full -1.2% at 8K and -3.9% at 32K, causal
         level, sliding window and causal document +2..3% (H100, fwd ab 10, 2026-12-05,
         seventeenth session): not kept. */
      wgmma_wait<0>();
#pragma unroll
      for (int t = 0; t < D / 2; t++) reg_fence(o[t]);
      if constexpr (kOnesSum<D>)
#pragma unroll
        for (int t = 0; t < 4; t++) reg_fence(ls[t]);
#pragma unroll
      for (int t = 0; t < TN / 4; t++) reg_fence(pr[t]);
      release(&v_empty[pst], lane);
      if constexpr (kOnesSum<D>) /* O to basis m_i once P.V retired (corr not held across the products: registers) */
        if (!keep) rescale_o<D>(o, corr, ls);
#pragma unroll
      for (int t = 0; t < TN / 4; t++) pr[t] = pack2<F16>(s[2 * t], s[2 * t + 1]);
    }
    /* last P.V */
    {
      FMFWD_PROF_T(tl);
      const int g = r0 + n - 1;
      const int st = g % ST;
      const uint32_t ph = (g / ST) & 1;
      if constexpr (!kOnesSum<D>)
        if (!keep) rescale_o<D>(o, corr, ls);
      mbar_wait(&v_full[st], ph);
      named_sync(mine, 256);
      wgmma_fence();
      if constexpr (kOnesSum<D>) gemm_pv_sum<D, TN, F16>(o, ls, pr, vbase + st * L::KB, ones, p.vdesc_hi);
      else gemm_pv<D, TN, F16>(o, pr, vbase + st * L::KB, p.vdesc_hi);
      wgmma_commit();
      if (chain || cw != NC - 1) named_arrive(other, 256); /* one-tile kernels: consumer 0's syncs are matched without the last one's */
      wgmma_wait<0>();
#pragma unroll
      for (int t = 0; t < D / 2; t++) reg_fence(o[t]);
      if constexpr (kOnesSum<D>)
#pragma unroll
        for (int t = 0; t < 4; t++) reg_fence(ls[t]);
      release(&v_empty[st], lane);
      FMFWD_PROF_ADD(pon, FPROF_LAST, tl);
    }
    if constexpr (kOnesSum<D>) { /* every thread of a quad has the rows' sums; the epilogue adds the quad's lrow */
      lrow[0] = (lane & 3) == 0 ? ls[0] : 0.f;
      lrow[1] = (lane & 3) == 0 ? ls[2] : 0.f;
    }
  }
}

} /* namespace fmsm90 */
