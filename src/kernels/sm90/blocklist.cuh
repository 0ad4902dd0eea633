/*
 * blocklist.cuh - build_block_list: the key blocks one CTA visits, with the element tests
 * each needs. Device code, included by fwd_sm90.cu only.
 */
#pragma once
#include "layout.cuh"

namespace fmsm90 {

/*
 * The two 64-key halves of this thread's block entry (entry < 0: none), upper half first,
 * appended after the n entries so far in the threads' order (so the list stays last tile
 * first). Entry bits 0..26 become the tile index 2 kb + h. Returns the new length; the
 * caller's group_sync follows.
 */
template <int TN, int BM, int NT, int BAR>
__device__ __forceinline__ int list_halves(const FMGpuFwdCore &p, int entry, int m0, int *wcnt, int *list, int n, int warp,
                                           int lane)
{
  const int m1 = m0 + BM < p.seqlen_q ? m0 + BM : p.seqlen_q, off = p.seqlen_k - p.seqlen_q;
  const int kb = entry >= 0 ? entry & kBlockBits : 0, c0 = (2 * kb + 1) * TN; /* the upper half's first column */
  /* the upper half: not past seqlen_k, not wholly above the diagonal of rows [m0, m1) */
  const bool hi = entry >= 0 && c0 < p.seqlen_k && !(p.causal && c0 > m1 - 1 + off);
  const unsigned bhi = __ballot_sync(0xffffffffu, hi), blo = __ballot_sync(0xffffffffu, entry >= 0);
  if (lane == 0) wcnt[warp] = __popc(bhi) + __popc(blo);
  group_sync<NT, BAR>();
  int before = n;
  for (int w = 0; w < NT / 32; w++) {
    if (w < warp) before += wcnt[w];
    n += wcnt[w];
  }
  const unsigned lt = lanemask_lt();
  before += __popc(bhi & lt) + __popc(blo & lt);
  if (entry >= 0) {
    const int fl = entry & ~kBlockBits;
    /* the lower half needs the causal test only if its last column passes row m0's diagonal */
    const int lo_causal = p.causal && c0 - 1 > m0 + off ? kCausal : 0;
    if (hi) list[before++] = fl | (2 * kb + 1);
    list[before] = (fl & ~kCausal) | lo_causal | (2 * kb);
  }
  return n;
}

/*
 * The CTA's key-block list, last block first, built by all its threads (one block each per
 * round). The class is FMClassifyTileInline's; partial entries also record which element
 * tests they need (lower / upper interval, causal); the block that runs past seqlen_k needs
 * the lower test (its padding columns carry [0, INT_MAX)).
 * With 64-key tiles (L::TPB = 2, d = 256) a listed block gives two entries, its upper half
 * first, both with the block's flags (a half inherits its block's class: conservative, as the
 * element tests are exact); a half wholly at or past seqlen_k, or wholly above the causal
 * diagonal of the CTA's rows, is left out.
 * Returns the list length n; list[0..n) is in shared memory (L::OFF_LIST), read by the
 * producer and every consumer, so their iteration counts always agree.
 * The persistent kernel builds its lists with its NT = 96 builder threads (src gives the tile,
 * with thread indices counted from the first builder) and named barrier BAR; NT = Cfg<D>::THREADS,
 * BAR = 0 is every thread of the one-tile kernel with __syncthreads.
 */
template <int D, int ST, int NQ = 1, int NT = Cfg<D>::THREADS, int BAR = 0, class Src = GridTile<D>>
__device__ __forceinline__ int build_block_list(const FMGpuFwdCore &p, unsigned char *smem, int *list, const Src &src = Src())
{
  using L = Layout<D, ST, NQ>;
  const CtaCoords cc = src(p);
  const int mh = cc.mh, m0 = cc.m0, tid = cc.tid, warp = cc.warp, lane = cc.lane;
  int n = 0;
  {
    const int32_t *sumh = p.sum + (size_t)mh * p.nblk * FM_SUM_N;
    constexpr int BM = Cfg<D>::BM;
    const int m1 = m0 + BM < p.seqlen_q ? m0 + BM : p.seqlen_q, off = p.seqlen_k - p.seqlen_q;
    const bool ragged = (p.seqlen_k % kBN) != 0;
    int *wcnt = (int *)(smem + L::OFF_CNT);
    for (int base = p.nblk - 1; base >= 0; base -= NT) {
      const int kb = base - tid;
      int entry = -1;
      if (kb >= 0) {
        const int cls = FMClassifyTileInline(sumh, p.causal, p.seqlen_q, p.seqlen_k, kBN, m0, m0 + BM, kb);
        if (cls != FM_TILE_SKIP) {
          const int32_t *sm = sumh + (size_t)kb * FM_SUM_N;
          const int c1 = (kb + 1) * kBN < p.seqlen_k ? (kb + 1) * kBN : p.seqlen_k;
          entry = kb;
          if (m0 < sm[FM_SUM_LTE_MAX] && m1 > sm[FM_SUM_LTS_MIN]) entry |= kLower;
          if (m0 < sm[FM_SUM_UTE_MAX] && m1 > sm[FM_SUM_UTS_MIN]) entry |= kUpper;
          if (p.causal && c1 - 1 > m0 + off) entry |= kCausal;
          if (ragged && kb == p.nblk - 1) entry |= kLower;
          if ((entry & (kLower | kUpper)) && p.simple[(size_t)mh * p.nblk + kb]) entry |= kSimple;
        }
      }
      if constexpr (L::TPB == 1) {
        const unsigned ball = __ballot_sync(0xffffffffu, entry >= 0);
        if (lane == 0) wcnt[warp] = __popc(ball);
        group_sync<NT, BAR>();
        int before = n;
        for (int w = 0; w < NT / 32; w++) {
          if (w < warp) before += wcnt[w];
          n += wcnt[w];
        }
        if (entry >= 0) list[before + __popc(ball & lanemask_lt())] = entry;
      } else {
        n = list_halves<L::TN, Cfg<D>::BM, NT, BAR>(p, entry, m0, wcnt, list, n, warp, lane);
      }
      group_sync<NT, BAR>();
    }
  }

  return n;
}

/*
 * WideTiles - the wide kernel's tiles (fwd_kernel_wide: wide_tn<D>()-key tiles, masks without
 * bound vectors), counted instead of listed: a query tile of rows [m0, m1) visits key
 * tiles 0 .. n - 1, all of them without the causal flag, else those up to its last row's
 * diagonal (m1 - 1 + seqlen_k - seqlen_q). Indexed like a block list, last tile first:
 * entry i is tile n - 1 - i, with kCausal where one of the tile's columns is masked for some row
 * of the query tile (past the diagonal of row m0, or past seqlen_k: mask_limit tests both).
 * Host and device: fwd_bench tiles checks it against the mask.
 */
template <int TN> struct WideTiles {
  int n, m0, off, sk, causal;
  __host__ __device__ __forceinline__ int operator[](int i) const
  {
    const int kb = n - 1 - i, c1 = (kb + 1) * TN;
    return kb | (c1 > sk || (causal && (c1 < sk ? c1 : sk) - 1 > m0 + off) ? kCausal : 0);
  }
};
template <int D, int TN> __host__ __device__ __forceinline__ WideTiles<TN> wide_tiles(const FMGpuFwdCore &p, int m0)
{
  WideTiles<TN> w;
  const int m1 = m0 + Cfg<D>::BM < p.seqlen_q ? m0 + Cfg<D>::BM : p.seqlen_q, last = m1 - 1 + p.seqlen_k - p.seqlen_q;
  const int all = (p.seqlen_k + TN - 1) / TN;
  w.n = !p.causal ? all : last < 0 ? 0 : (last / TN + 1 < all ? last / TN + 1 : all);
  w.m0 = m0;
  w.off = p.seqlen_k - p.seqlen_q;
  w.sk = p.seqlen_k;
  w.causal = p.causal;
  return w;
}

} /* namespace fmsm90 */
