/*
 * epilogue.cuh - epilogue_store: O /= l and LSE = m * scale + ln(l) for one consumer's rows,
 * written as bf16/fp16 through shared memory (16-byte stores) or as fp32 (optionally merged
 * with an accumulated result through the LSE). Device code, included by fwd_sm90.cu only.
 */
#pragma once
#include <math.h>
#include "layout.cuh"

namespace fmsm90 {

/*
 * Weights of an exact merge through the LSE: the accumulated part (LSE la) and a new part
 * (*lse, its O scaled by *wb = 1/l so far) become O = wa O_acc + wb O_new, LSE = log(e^la + e^lse).
 * A part whose LSE is -inf saw nothing and leaves the other as it is, +inf and NaN included
 * (FMCPUMergePartial's rule: e^(la - m) with la = m = +inf would be NaN); the new part first,
 * so that both -inf keeps the accumulated O = 0. Otherwise a NaN on either side gives NaN.
 */
__device__ __forceinline__ void merge_weights(float la, float *lse, float *wa, float *wb)
{
  const float lb = *lse;
  if (lb == -INFINITY) { *wa = 1.f; *wb = 0.f; *lse = la; return; }
  if (la == -INFINITY) { *wa = 0.f; return; }
  const float m = fmaxf(la, lb), ea = __expf(la - m), eb = __expf(lb - m), inv = 1.f / (ea + eb);
  *wa = ea * inv;
  *wb *= eb * inv;
  *lse = m + __logf(ea + eb);
}

/*
 * epilogue_store - for one consumer warpgroup: qtile is the Q tile
 *   in shared memory, whose 64 rows of this consumer are reused as the staging buffer (its last
 *   S GEMM has retired); o, mrow, lrow as consumer_mainloop left them. tmO (TMA_O, the
 *   persistent kernel): O in dtype goes from the staging rows to global by one TMA store per
 *   64-column chunk (rows past seqlen_q clipped by the map), issued by the warpgroup's first
 *   thread, which waits until the store has read the staging before it returns (the caller
 *   then frees the Q buffer); the other threads do not wait for it.
 */
template <int D, bool F16, class Src = GridTile<D>, bool TMA_O = false>
__device__ __forceinline__ void epilogue_store(const FMGpuFwdCore &p, unsigned char *qtile, const float *o, const float *mrow,
                                               const float *lrow, const Src &src = Src(), const CUtensorMap *tmO = nullptr)
{
  const CtaCoords cc = src(p);
  const int hq = cc.hq, b = cc.b, m0 = cc.m0, lane = cc.lane;
  const int cw = cc.wg - 1, wt = cc.tid - 128 * cc.wg, w = wt >> 5;
  const int row0 = m0 + cw * 64 + w * 16 + (lane >> 2), row1 = row0 + 8;
  /* epilogue: O /= l, LSE = m * scale + ln(l); rows with nothing visible (l = 0, m = -inf): O = 0,
     LSE = -inf. Rows with a NaN or +inf score have l = NaN (exp2 of NaN or of inf - inf), so O
     and LSE are NaN: the tests are l != 0, not l > 0. A row that saw keys (m finite) but whose
     every P underflowed (scores so large, |m * scale| beyond ~2^31, that s * c - m * c is only
     rounding) has l = 0 too: it gets NaN, not the fully masked result. */
  float l0 = lrow[0], l1 = lrow[1];
  l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
  l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
  l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
  const float z0 = mrow[0] == -INFINITY ? 0.f : NAN, z1 = mrow[1] == -INFINITY ? 0.f : NAN; /* l = 0: masked, or lost */
  const float inv0 = l0 != 0.f ? 1.f / l0 : z0, inv1 = l1 != 0.f ? 1.f / l1 : z1;
  const int q4 = lane & 3;
  /*
   * O through shared memory: each consumer overwrites its own 64 rows of the Q tile (its last
   * S GEMM has retired) in the 128-byte-swizzled chunk layout (16-byte unit u of row r at
   * u ^ (r & 7): conflict-free), then writes whole 16-byte units, row by row, to global.
   */
  float lse0 = l0 != 0.f ? mrow[0] * p.scale + logf(l0) : z0 == 0.f ? -INFINITY : NAN;
  float lse1 = l1 != 0.f ? mrow[1] * p.scale + logf(l1) : z1 == 0.f ? -INFINITY : NAN;
  if (p.o32) {
    /*
     * fp32 output: each thread stores its own fragments (row r, columns 8k + 2 q4, +1). With
     * merge, the accumulated (O, LSE) already there is combined exactly through the LSE:
     * O = wa O_acc + wb O_new with wa, wb = exp(lse_acc - lse), exp(lse_new - lse).
     */
    const size_t ostride = (size_t)p.heads_q * D;
    float *or0 = p.o32 + ((size_t)b * p.seqlen_q + row0) * ostride + (size_t)hq * D + q4 * 2;
    float *or1 = or0 + 8 * ostride;
    float wa0 = 0.f, wa1 = 0.f, wb0 = inv0, wb1 = inv1;
    if (p.merge) {
      const float *lacc = p.lse + ((size_t)b * p.heads_q + hq) * p.seqlen_q;
      const float la0 = row0 < p.seqlen_q ? lacc[row0] : -INFINITY, la1 = row1 < p.seqlen_q ? lacc[row1] : -INFINITY;
      __syncwarp(); /* every thread of the quad has its accumulated LSE before q4 = 0 rewrites it */
      merge_weights(la0, &lse0, &wa0, &wb0);
      merge_weights(la1, &lse1, &wa1, &wb1);
    }
#pragma unroll
    for (int k = 0; k < D / 8; k++) {
      if (row0 < p.seqlen_q) {
        float2 x = make_float2(o[4 * k] * wb0, o[4 * k + 1] * wb0);
        if (p.merge) { const float2 a = *(const float2 *)(or0 + k * 8); x.x += wa0 * a.x; x.y += wa0 * a.y; }
        *(float2 *)(or0 + k * 8) = x;
      }
      if (row1 < p.seqlen_q) {
        float2 x = make_float2(o[4 * k + 2] * wb1, o[4 * k + 3] * wb1);
        if (p.merge) { const float2 a = *(const float2 *)(or1 + k * 8); x.x += wa1 * a.x; x.y += wa1 * a.y; }
        *(float2 *)(or1 + k * 8) = x;
      }
    }
  } else {
#ifdef FMFWD_PROF
    const bool pon = wt == 0;
#endif
    FMFWD_PROF_T(t0);
    unsigned char *stage = qtile + cw * 64 * 128;
    const int r0 = w * 16 + (lane >> 2), r1 = r0 + 8;
#pragma unroll
    for (int k = 0; k < D / 8; k++) {
      const int ch = k >> 3, u = k & 7;
      *(uint32_t *)(stage + ch * Cfg<D>::QCH + r0 * 128 + ((u ^ (r0 & 7)) << 4) + q4 * 4) =
        pack2<F16>(o[4 * k] * inv0, o[4 * k + 1] * inv0);
      *(uint32_t *)(stage + ch * Cfg<D>::QCH + r1 * 128 + ((u ^ (r1 & 7)) << 4) + q4 * 4) =
        pack2<F16>(o[4 * k + 2] * inv1, o[4 * k + 3] * inv1);
    }
    const int rowbase = m0 + cw * 64;
    FMFWD_PROF_ADD(pon, FPROF_EPI_STAGE, t0);
    if constexpr (TMA_O) {
      FMFWD_PROF_T(t1);
      fence_proxy_async(); /* the staging stores before the TMA reads them */
      named_sync(kBarEpi + cw, 128);
      FMFWD_PROF_ADD(pon, FPROF_EPI_SYNC, t1);
      if (wt == 0) {
#pragma unroll
        for (int c = 0; c < D / 64; c++) tma_store_4d(tmO, stage + c * Cfg<D>::QCH, c * 64, hq, rowbase, b);
        bulk_commit();
      }
    } else {
      named_sync(kBarEpi + cw, 128);
      const size_t ostride = (size_t)p.heads_q * D;
#pragma unroll
      for (int it = 0; it < 64 * (D / 8) / 128; it++) {
        const int idx = it * 128 + wt, r = idx / (D / 8), k = idx % (D / 8);
        const int ch = k >> 3, u = k & 7;
        const uint4 val = *(const uint4 *)(stage + ch * Cfg<D>::QCH + r * 128 + ((u ^ (r & 7)) << 4));
        if (rowbase + r < p.seqlen_q)
          *(uint4 *)((char *)p.o + (((size_t)b * p.seqlen_q + rowbase + r) * ostride + (size_t)hq * D + k * 8) * 2) = val;
      }
    }
  }
  if (q4 == 0) {
    float *lse = p.lse + ((size_t)b * p.heads_q + hq) * p.seqlen_q;
    if (row0 < p.seqlen_q) lse[row0] = lse0;
    if (row1 < p.seqlen_q) lse[row1] = lse1;
  }
  if constexpr (TMA_O)
    if (!p.o32 && wt == 0) bulk_wait_read0(); /* the staging (this tile's Q buffer) read */
}

} /* namespace fmsm90 */
