/*
 * fwd_sm90.cu - FlashMask forward for Hopper (sm_90a): TMA + wgmma + warp specialization with
 * column-bound tile skipping.
 *
 * One CTA = one 128-row query tile of one (batch, query head); 384 threads:
 *   warpgroup 0: producer. setmaxnreg.dec 24; one thread issues every TMA: Q once (before the
 *     block list is built), then per visited key block K (and, for partial blocks, the block's
 *     per-column mask data in the same transaction), then V of the previous block, into a
 *     ST-stage ring of mbarriers.
 *   warpgroups 1, 2: consumers, 64 query rows each (the M of wgmma). setmaxnreg.inc 240.
 *     Step j: S_j = Q K_j^T (SS wgmma) and O += P_{j-1} V_{j-1} (RS wgmma, P from registers)
 *     are issued back to back (O is rescaled to the new row max between the two issues); the
 *     softmax of S_j runs while the P.V product is in flight.
 *     The two consumers alternate their wgmma issue through named barriers 1 and 2
 *     (ping-pong), so one warpgroup's softmax overlaps the other one's GEMMs.
 * The list of key blocks to visit (skip / unmasked / partial, flashmask-format.md section 2,
 * FMClassifyTileInline) is built once per CTA by all 384 threads before the roles split and is
 * read by the producer and both consumers, so their iteration counts always agree. Unmasked
 * blocks take the dense path; partial blocks (this includes the causal diagonal and the key
 * block that runs past seqlen_k) apply only the element tests their flags ask for: the causal
 * diagonal alone, one [x, y) visible interval per column (from the GPU prepass), or both
 * column-bound intervals plus the diagonal.
 * Epilogue: O goes through the consumer's own rows of the Q buffer, then 16-byte stores.
 * Shared memory: [Q: D/64 chunks][K: ST x D/64 chunks][V: ST x D/64 chunks][mask data: ST x 2 KB]
 * [barriers][block list]; each chunk is 128 rows x 64 elements with the TMA 128-byte swizzle.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include <flashmask/private/fmtile.h>
#include "fwd_sm90.cuh"
#include "ptx.cuh"
#include "wgmma_gen.cuh"

namespace fmsm90 {

constexpr int kBM = 128;            /* query rows per CTA */
constexpr int kBN = FM_GPU_BLOCK_N; /* key columns per block */
constexpr int kThreads = 384;
constexpr int kChunkBytes = 128 * 128; /* 128 rows x 64 x 2-byte elements */

template <int D, int ST> struct Layout {
  static constexpr int QB = kBM * D * 2;
  static constexpr int KB = kBN * D * 2;
  static constexpr int BB = kBN * 16;
  static constexpr int OFF_Q = 0;
  static constexpr int OFF_K = OFF_Q + QB;
  static constexpr int OFF_V = OFF_K + ST * KB;
  static constexpr int OFF_B = OFF_V + ST * KB;
  static constexpr int OFF_BAR = OFF_B + ST * BB;
  static constexpr int NBAR = 1 + 4 * ST;
  static constexpr int OFF_CNT = OFF_BAR + NBAR * 8;          /* per-warp counts, 12 ints */
  static constexpr int OFF_LIST = (OFF_CNT + 48 + 15) & ~15;
  static size_t bytes(int nblk) { return 1024 + (size_t)OFF_LIST + (size_t)nblk * 4; }
};

template <bool F16> __device__ __forceinline__ uint32_t pack2(float lo, float hi)
{
  if constexpr (F16) {
    __half2 h = __floats2half2_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
  } else {
    __nv_bfloat162 h = __floats2bfloat162_rn(lo, hi);
    return *reinterpret_cast<uint32_t *>(&h);
  }
}

template <bool F16> __device__ __forceinline__ void gemm_qk(float *s, uint32_t qaddr, uint32_t kaddr, int D)
{
#pragma unroll
  for (int kk = 0; kk < 16; kk++) {
    if (kk < D / 16) {
      const uint32_t off = (kk / 4) * kChunkBytes + (kk % 4) * 32;
      const uint64_t da = make_desc(qaddr + off, 16, 1024);
      const uint64_t db = make_desc(kaddr + off, 16, 1024);
      if constexpr (F16) wgmma_ss_m64n128k16_f16(s, da, db, kk > 0);
      else wgmma_ss_m64n128k16_bf16(s, da, db, kk > 0);
    }
  }
}

/* vhi: the LBO/SBO/layout bits of the V descriptor (FMGpuFwdCore::vdesc_hi, see launch()). */
template <int D, bool F16> __device__ __forceinline__ void gemm_pv(float *o, const uint32_t *p, uint32_t vaddr, uint64_t vhi)
{
#pragma unroll
  for (int u = 0; u < kBN / 16; u++) {
    const uint64_t db = vhi | (uint64_t)(((vaddr + u * 2048) & 0x3FFFF) >> 4);
    if constexpr (D == 128) {
      if constexpr (F16) wgmma_rs_m64n128k16_f16(o, p + 4 * u, db);
      else wgmma_rs_m64n128k16_bf16(o, p + 4 * u, db);
    } else {
      if constexpr (F16) wgmma_rs_m64n64k16_f16(o, p + 4 * u, db);
      else wgmma_rs_m64n64k16_bf16(o, p + 4 * u, db);
    }
  }
}

/*
 * Block-list entry: key block index in bits 0..26, which per-element tests the tile needs in
 * 28..30, and bit 27 when every column's visible rows form one interval (then one test per
 * element on the prepass's [x, y) pairs replaces the interval and causal tests).
 */
constexpr int kLower = 1 << 28, kUpper = 1 << 29, kCausal = 1 << 30, kSimple = 1 << 27, kBlockBits = (1 << 27) - 1;

/*
 * Per-element mask of a partial tile, only the tests the tile needs: s[4k+e] is row r0 (e < 2)
 * or r0 + 8, column 8k + 2*(lane%4) + (e&1). An interval [a, b) (a <= b) holds row i iff
 * (unsigned)(i - a) < (unsigned)(b - a). Padding columns past seqlen_k carry [0, INT_MAX).
 */
template <bool LO, bool UP, bool CA>
__device__ __forceinline__ void mask_tile(float *s, const int4 *bnd, int row0, int colbase, int lane, int off)
{
  const int row1 = row0 + 8;
  const int t0 = row0 + off - colbase, t1 = t0 + 8; /* causal: column c masked iff c > t */
#pragma unroll
  for (int k = 0; k < kBN / 8; k++) {
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
__device__ __forceinline__ void mask_simple(float *s, const int2 *vis, int row0, int lane)
{
  const int row1 = row0 + 8;
#pragma unroll
  for (int k = 0; k < kBN / 8; k++) {
#pragma unroll
    for (int e = 0; e < 2; e++) {
      const int2 v = vis[8 * k + 2 * (lane & 3) + e];
      const unsigned w = (unsigned)(v.y - v.x);
      if (!((unsigned)(row0 - v.x) < w)) s[4 * k + e] = -INFINITY;
      if (!((unsigned)(row1 - v.x) < w)) s[4 * k + 2 + e] = -INFINITY;
    }
  }
}

/* Extra tests are harmless (each is exact), so three variants cover the eight flag sets (more
   variants made ptxas spill). */
__device__ __forceinline__ void apply_mask(float *s, int e, const int4 *bnd, int row0, int colbase, int lane, int off)
{
  const int f = (e >> 28) & 7;
  if (f == 0) return;
  if (e & kSimple) mask_simple(s, (const int2 *)bnd, row0, lane);
  else if (f == 4) mask_tile<false, false, true>(s, bnd, row0, colbase, lane, off);
  else mask_tile<true, true, true>(s, bnd, row0, colbase, lane, off);
}

/* Online softmax of one S tile held in registers; returns the correction factors for O. */
__device__ __forceinline__ void softmax_step(float *s, float *mrow, float *lrow, float c, float *corr)
{
  float mx0 = mrow[0], mx1 = mrow[1];
#pragma unroll
  for (int k = 0; k < kBN / 8; k++) {
    mx0 = fmaxf(mx0, fmaxf(s[4 * k], s[4 * k + 1]));
    mx1 = fmaxf(mx1, fmaxf(s[4 * k + 2], s[4 * k + 3]));
  }
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 1));
  mx0 = fmaxf(mx0, __shfl_xor_sync(0xffffffffu, mx0, 2));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 1));
  mx1 = fmaxf(mx1, __shfl_xor_sync(0xffffffffu, mx1, 2));
  /* a row with nothing visible yet keeps max -inf: subtract 0 so exp2(-inf) = 0, never NaN */
  const float ms0 = mx0 == -INFINITY ? 0.f : mx0 * c;
  const float ms1 = mx1 == -INFINITY ? 0.f : mx1 * c;
  corr[0] = exp2f(mrow[0] * c - ms0);
  corr[1] = exp2f(mrow[1] * c - ms1);
  mrow[0] = mx0;
  mrow[1] = mx1;
  float l0 = 0.f, l1 = 0.f;
#pragma unroll
  for (int k = 0; k < kBN / 8; k++) {
    s[4 * k] = exp2f(fmaf(s[4 * k], c, -ms0));
    s[4 * k + 1] = exp2f(fmaf(s[4 * k + 1], c, -ms0));
    s[4 * k + 2] = exp2f(fmaf(s[4 * k + 2], c, -ms1));
    s[4 * k + 3] = exp2f(fmaf(s[4 * k + 3], c, -ms1));
    l0 += s[4 * k] + s[4 * k + 1];
    l1 += s[4 * k + 2] + s[4 * k + 3];
  }
  lrow[0] = lrow[0] * corr[0] + l0;
  lrow[1] = lrow[1] * corr[1] + l1;
}

template <int D> __device__ __forceinline__ void rescale_o(float *o, const float *corr)
{
#pragma unroll
  for (int k = 0; k < D / 8; k++) {
    o[4 * k] *= corr[0];
    o[4 * k + 1] *= corr[0];
    o[4 * k + 2] *= corr[1];
    o[4 * k + 3] *= corr[1];
  }
}

__device__ __forceinline__ void release(uint64_t *bar, int lane)
{
  __syncwarp();
  if (lane == 0) mbar_arrive(bar);
}

/*
 * Weights of an exact merge through the LSE: the accumulated part (LSE la) and a new part
 * (*lse, its O scaled by *wb = 1/l so far) become O = wa O_acc + wb O_new, LSE = log(e^la + e^lse).
 * Both -inf: nothing is visible yet (wa = wb = 0, LSE -inf).
 */
__device__ __forceinline__ void merge_weights(float la, float *lse, float *wa, float *wb)
{
  const float lb = *lse, m = fmaxf(la, lb);
  if (m == -INFINITY) { *wa = 0.f; *wb = 0.f; return; }
  const float ea = __expf(la - m), eb = __expf(lb - m), inv = 1.f / (ea + eb);
  *wa = ea * inv;
  *wb *= eb * inv;
  *lse = m + __logf(ea + eb);
}

template <int D, int ST, bool F16>
__global__ void __launch_bounds__(kThreads, 1)
  fwd_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
             const __grid_constant__ CUtensorMap tmV, const FMGpuFwdCore p)
{
  using L = Layout<D, ST>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  const int mblk = gridDim.x - 1 - blockIdx.x; /* heaviest (causal) tiles first */
  const int hq = blockIdx.y, b = blockIdx.z;
  const int hkv = hq / (p.heads_q / p.heads_kv);
  const int mh = hq / (p.heads_q / p.mask_heads);
  const int m0 = mblk * kBM;
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, wg = tid >> 7;

  uint64_t *bars = (uint64_t *)(smem + L::OFF_BAR);
  uint64_t *q_full = bars, *k_full = bars + 1, *k_empty = bars + 1 + ST, *v_full = bars + 1 + 2 * ST,
           *v_empty = bars + 1 + 3 * ST;
  int *list = (int *)(smem + L::OFF_LIST);

  if (tid == 0) {
    mbar_init(q_full, 1);
    for (int s = 0; s < ST; s++) {
      mbar_init(&k_full[s], 1);
      mbar_init(&v_full[s], 1);
      mbar_init(&k_empty[s], 8); /* one arrival per consumer warp */
      mbar_init(&v_empty[s], 8);
    }
    fence_barrier_init();
    /* Q first: its load overlaps the block-list build (the consumers always wait for it) */
    mbar_expect_tx(q_full, L::QB);
#pragma unroll
    for (int c = 0; c < D / 64; c++) tma_load_4d(smem + L::OFF_Q + c * kChunkBytes, &tmQ, q_full, c * 64, hq, m0, b);
  }
  /*
   * The CTA's key-block list, last block first, built by all 384 threads (one block each per
   * round). The class is FMClassifyTileInline's; partial entries also record which element
   * tests they need (lower / upper interval, causal); the block that runs past seqlen_k needs
   * the lower test (its padding columns carry [0, INT_MAX)).
   */
  int n = 0;
  {
    const int32_t *sumh = p.sum + (size_t)mh * p.nblk * FM_SUM_N;
    const int m1 = m0 + kBM < p.seqlen_q ? m0 + kBM : p.seqlen_q, off = p.seqlen_k - p.seqlen_q;
    const bool ragged = (p.seqlen_k % kBN) != 0;
    int *wcnt = (int *)(smem + L::OFF_CNT);
    for (int base = p.nblk - 1; base >= 0; base -= kThreads) {
      const int kb = base - tid;
      int entry = -1;
      if (kb >= 0) {
        const int cls = FMClassifyTileInline(sumh, p.causal, p.seqlen_q, p.seqlen_k, kBN, m0, m0 + kBM, kb);
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
      const unsigned ball = __ballot_sync(0xffffffffu, entry >= 0);
      if (lane == 0) wcnt[warp] = __popc(ball);
      __syncthreads();
      int before = n;
      for (int w = 0; w < kThreads / 32; w++) {
        if (w < warp) before += wcnt[w];
        n += wcnt[w];
      }
      if (entry >= 0) list[before + __popc(ball & ((1u << lane) - 1))] = entry;
      __syncthreads();
    }
  }

  if (wg == 0) {
    /* ------------------------------ producer ------------------------------ */
    setmaxnreg_dec<24>();
    if (tid == 0 && n > 0) {
      const int4 *bsrc = p.packed + (size_t)mh * p.nblk * kBN;
      const int2 *vsrc = p.vis + (size_t)mh * p.nblk * kBN;
      for (int i = 0; i <= n; i++) {
        if (i < n) {
          const int e = list[i], kb = e & kBlockBits;
          const bool bnd = (e & (kLower | kUpper)) != 0, simple = (e & kSimple) != 0;
          const int st = i % ST;
          const uint32_t ph = (i / ST) & 1;
          mbar_wait(&k_empty[st], ph ^ 1);
          mbar_expect_tx(&k_full[st], L::KB + (simple ? L::BB / 2 : bnd ? L::BB : 0));
#pragma unroll
          for (int c = 0; c < D / 64; c++)
            tma_load_4d(smem + L::OFF_K + st * L::KB + c * kChunkBytes, &tmK, &k_full[st], c * 64, hkv, kb * kBN, b);
          if (simple) bulk_load(smem + L::OFF_B + st * L::BB, vsrc + (size_t)kb * kBN, L::BB / 2, &k_full[st]);
          else if (bnd) bulk_load(smem + L::OFF_B + st * L::BB, bsrc + (size_t)kb * kBN, L::BB, &k_full[st]);
        }
        if (i > 0) {
          const int j = i - 1, kb = list[j] & kBlockBits;
          const int st = j % ST;
          const uint32_t ph = (j / ST) & 1;
          mbar_wait(&v_empty[st], ph ^ 1);
          mbar_expect_tx(&v_full[st], L::KB);
#pragma unroll
          for (int c = 0; c < D / 64; c++)
            tma_load_4d(smem + L::OFF_V + st * L::KB + c * kChunkBytes, &tmV, &v_full[st], c * 64, hkv, kb * kBN, b);
        }
      }
    }
  } else {
    /* ------------------------------ consumers ------------------------------ */
    setmaxnreg_inc<240>();
    const int cw = wg - 1, wt = tid - 128 * wg, w = wt >> 5;
    const int row0 = m0 + cw * 64 + w * 16 + (lane >> 2), row1 = row0 + 8;
    const float c = p.scale_log2;
    /* causal offset for the element test; a non-causal mask gets one no column exceeds */
    const int off = p.causal ? p.seqlen_k - p.seqlen_q : (1 << 29);
    float o[D / 2];
    float s[kBN / 2];
    uint32_t pr[kBN / 4];
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f}, corr[2];
#pragma unroll
    for (int i = 0; i < D / 2; i++) o[i] = 0.f;
    mbar_wait(q_full, 0);

    if (n > 0) {
      const int mine = 1 + cw, other = 2 - cw;
      const uint32_t qaddr = smem_u32(smem + L::OFF_Q) + cw * 64 * 128;
      const uint32_t kbase = smem_u32(smem + L::OFF_K), vbase = smem_u32(smem + L::OFF_V);
      const int4 *bbase = (const int4 *)(smem + L::OFF_B);
      if (cw == 1) named_arrive(1, 256); /* consumer 0 issues first */

      /* block 0: S only */
      {
        const int e = list[0], kb = e & kBlockBits;
        mbar_wait(&k_full[0], 0);
        named_sync(mine, 256);
        wgmma_fence();
        gemm_qk<F16>(s, qaddr, kbase, D);
        wgmma_commit();
        named_arrive(other, 256);
        wgmma_wait<0>();
#pragma unroll
        for (int i = 0; i < kBN / 2; i++) reg_fence(s[i]);
        apply_mask(s, e, bbase, row0, kb * kBN, lane, off);
        release(&k_empty[0], lane);
        softmax_step(s, mrow, lrow, c, corr);
#pragma unroll
        for (int i = 0; i < kBN / 4; i++) pr[i] = pack2<F16>(s[2 * i], s[2 * i + 1]);
      }
      for (int i = 1; i < n; i++) {
        const int e = list[i], kb = e & kBlockBits;
        const int st = i % ST, pst = (i - 1) % ST;
        const uint32_t ph = (i / ST) & 1, pph = ((i - 1) / ST) & 1;
        mbar_wait(&k_full[st], ph);
        named_sync(mine, 256);
        wgmma_fence();
        gemm_qk<F16>(s, qaddr, kbase + st * L::KB, D);
        wgmma_commit();
        /* O (basis m_{i-2}) to basis m_{i-1} while S_i is computed: off the critical path */
        rescale_o<D>(o, corr);
        mbar_wait(&v_full[pst], pph);
        wgmma_fence();
        gemm_pv<D, F16>(o, pr, vbase + pst * L::KB, p.vdesc_hi);
        wgmma_commit();
        named_arrive(other, 256);
        wgmma_wait<1>();
#pragma unroll
        for (int t = 0; t < kBN / 2; t++) reg_fence(s[t]);
        apply_mask(s, e, bbase + st * kBN, row0, kb * kBN, lane, off);
        release(&k_empty[st], lane);
        softmax_step(s, mrow, lrow, c, corr);
        wgmma_wait<0>();
#pragma unroll
        for (int t = 0; t < D / 2; t++) reg_fence(o[t]);
#pragma unroll
        for (int t = 0; t < kBN / 4; t++) reg_fence(pr[t]);
        release(&v_empty[pst], lane);
#pragma unroll
        for (int t = 0; t < kBN / 4; t++) pr[t] = pack2<F16>(s[2 * t], s[2 * t + 1]);
      }
      /* last P.V */
      {
        const int j = n - 1, st = j % ST;
        const uint32_t ph = (j / ST) & 1;
        rescale_o<D>(o, corr);
        mbar_wait(&v_full[st], ph);
        named_sync(mine, 256);
        wgmma_fence();
        gemm_pv<D, F16>(o, pr, vbase + st * L::KB, p.vdesc_hi);
        wgmma_commit();
        if (cw == 0) named_arrive(other, 256); /* consumer 1 has no later sync to match */
        wgmma_wait<0>();
#pragma unroll
        for (int t = 0; t < D / 2; t++) reg_fence(o[t]);
        release(&v_empty[st], lane);
      }
    }

    /* epilogue: O /= l, LSE = m * scale + ln(l); rows with nothing visible: O = 0, LSE = -inf */
    float l0 = lrow[0], l1 = lrow[1];
    l0 += __shfl_xor_sync(0xffffffffu, l0, 1);
    l0 += __shfl_xor_sync(0xffffffffu, l0, 2);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 1);
    l1 += __shfl_xor_sync(0xffffffffu, l1, 2);
    const float inv0 = l0 > 0.f ? 1.f / l0 : 0.f, inv1 = l1 > 0.f ? 1.f / l1 : 0.f;
    const int q4 = lane & 3;
    /*
     * O through shared memory: each consumer overwrites its own 64 rows of the Q tile (its last
     * S GEMM has retired) in the 128-byte-swizzled chunk layout (16-byte unit u of row r at
     * u ^ (r & 7): conflict-free), then writes whole 16-byte units, row by row, to global.
     */
    float lse0 = l0 > 0.f ? mrow[0] * p.scale + logf(l0) : -INFINITY;
    float lse1 = l1 > 0.f ? mrow[1] * p.scale + logf(l1) : -INFINITY;
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
      unsigned char *stage = smem + L::OFF_Q + cw * 64 * 128;
      const int r0 = w * 16 + (lane >> 2), r1 = r0 + 8;
#pragma unroll
      for (int k = 0; k < D / 8; k++) {
        const int ch = k >> 3, u = k & 7;
        *(uint32_t *)(stage + ch * kChunkBytes + r0 * 128 + ((u ^ (r0 & 7)) << 4) + q4 * 4) =
          pack2<F16>(o[4 * k] * inv0, o[4 * k + 1] * inv0);
        *(uint32_t *)(stage + ch * kChunkBytes + r1 * 128 + ((u ^ (r1 & 7)) << 4) + q4 * 4) =
          pack2<F16>(o[4 * k + 2] * inv1, o[4 * k + 3] * inv1);
      }
      named_sync(3 + cw, 128);
      const int rowbase = m0 + cw * 64;
      const size_t ostride = (size_t)p.heads_q * D;
#pragma unroll
      for (int it = 0; it < 64 * (D / 8) / 128; it++) {
        const int idx = it * 128 + wt, r = idx / (D / 8), k = idx % (D / 8);
        const int ch = k >> 3, u = k & 7;
        const uint4 val = *(const uint4 *)(stage + ch * kChunkBytes + r * 128 + ((u ^ (r & 7)) << 4));
        if (rowbase + r < p.seqlen_q)
          *(uint4 *)((char *)p.o + (((size_t)b * p.seqlen_q + rowbase + r) * ostride + (size_t)hq * D + k * 8) * 2) = val;
      }
    }
    if (q4 == 0) {
      float *lse = p.lse + ((size_t)b * p.heads_q + hq) * p.seqlen_q;
      if (row0 < p.seqlen_q) lse[row0] = lse0;
      if (row1 < p.seqlen_q) lse[row1] = lse1;
    }
  }
}

/* ------------------------------ host side ------------------------------ */
static PFN_cuTensorMapEncodeTiled_v12000 get_encode(void)
{
  static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
  if (!fn) {
    void *ptr = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return NULL;
    fn = (PFN_cuTensorMapEncodeTiled_v12000)ptr;
  }
  return fn;
}

/*
 * 4-D map over a [B][S][H][D] tensor with element strides bs, ss, hs (D contiguous): dims
 * {D, H, S, B}; box {64, 1, 128, 1}; 128-byte swizzle.
 */
static cudaError_t make_map(CUtensorMap *map, const void *base, int B, int S, int H, int D, int f16, int64_t bs, int64_t ss,
                            int64_t hs)
{
  PFN_cuTensorMapEncodeTiled_v12000 enc = get_encode();
  if (!enc) return cudaErrorNotSupported;
  cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)H, (cuuint64_t)S, (cuuint64_t)B};
  cuuint64_t strides[3] = {(cuuint64_t)hs * 2, (cuuint64_t)ss * 2, (cuuint64_t)bs * 2};
  cuuint32_t box[4] = {64, 1, 128, 1};
  cuuint32_t estr[4] = {1, 1, 1, 1};
  CUresult r = enc(map, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void *)base, dims,
                   strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

template <int D, int ST, bool F16> static cudaError_t launch(const FMGpuFwdParams *a, cudaStream_t stream)
{
  using L = Layout<D, ST>;
  CUtensorMap tq, tk, tv;
  cudaError_t e;
  if ((e = make_map(&tq, a->q, a->batch, a->c.seqlen_q, a->c.heads_q, D, F16, a->q_batch_stride, a->q_row_stride,
                    a->q_head_stride)) != cudaSuccess)
    return e;
  if ((e = make_map(&tk, a->k, a->batch, a->c.seqlen_k, a->c.heads_kv, D, F16, a->k_batch_stride, a->k_row_stride,
                    a->k_head_stride)) != cudaSuccess)
    return e;
  if ((e = make_map(&tv, a->v, a->batch, a->c.seqlen_k, a->c.heads_kv, D, F16, a->v_batch_stride, a->v_row_stride,
                    a->v_head_stride)) != cudaSuccess)
    return e;
  /* V (MN-major, 128B swizzle) descriptor bits without the address: LBO = 64-column chunk
     stride (128 rows x 128 B), SBO = 8-row group stride (1024 B); vdesc_swap swaps the two (a
     diagnostic for the descriptor convention) */
  FMGpuFwdCore p = a->c;
  {
    const uint64_t lbo = a->vdesc_swap ? 1024 : kChunkBytes, sbo = a->vdesc_swap ? kChunkBytes : 1024;
    p.vdesc_hi = ((lbo >> 4) << 16) | ((sbo >> 4) << 32) | ((uint64_t)1 << 62);
  }
  const size_t smem = L::bytes(a->c.nblk);
  /* the opt-in shared-memory size is a per-device attribute: remember it per device (a process
     may launch on several devices, e.g. a one-GPU reference next to a context-parallel plan) */
  static size_t attr_set[64];
  int dev = 0;
  if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
  if (dev < 0 || dev >= 64 || smem > attr_set[dev]) {
    if ((e = cudaFuncSetAttribute(fwd_kernel<D, ST, F16>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) !=
        cudaSuccess)
      return e;
    if (dev >= 0 && dev < 64) attr_set[dev] = smem;
  }
  dim3 grid((a->c.seqlen_q + kBM - 1) / kBM, a->c.heads_q, a->batch);
  fwd_kernel<D, ST, F16><<<grid, kThreads, smem, stream>>>(tq, tk, tv, p);
  return cudaGetLastError();
}

} /* namespace fmsm90 */

/* Stages per head dim (shared memory: Q + ST x (K + V) + bounds must fit in 227 KB). */
#define FM_SM90_ST128 2
#define FM_SM90_ST64 4

int FMSm90ForwardSupported(const FMGpuFwdParams *a)
{
  size_t need;
  int dev, maxsm = 0;
  if (a->head_dim == 128) need = fmsm90::Layout<128, FM_SM90_ST128>::bytes(a->c.nblk);
  else if (a->head_dim == 64) need = fmsm90::Layout<64, FM_SM90_ST64>::bytes(a->c.nblk);
  else return 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&maxsm, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess) return 0;
  if (need > (size_t)maxsm) return 0;
  if (a->c.seqlen_q < 1 || a->c.seqlen_k < 1 || a->batch > 65535 || a->c.heads_q > 65535) return 0;
  /* TMA: global addresses and strides 16-byte aligned (8 elements) */
  if (((uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v) & 15) return 0;
  if ((a->q_batch_stride | a->q_row_stride | a->q_head_stride | a->k_batch_stride | a->k_row_stride | a->k_head_stride |
       a->v_batch_stride | a->v_row_stride | a->v_head_stride) & 7)
    return 0;
  /* the epilogue writes O and LSE in today's dense layouts (16-byte stores of O, 8-byte ones of o32) */
  if (a->o_head_stride != a->head_dim || a->o_row_stride != (int64_t)a->c.heads_q * a->head_dim ||
      a->o_batch_stride != (int64_t)a->c.seqlen_q * a->o_row_stride || a->lse_head_stride != a->c.seqlen_q ||
      a->lse_batch_stride != (int64_t)a->c.heads_q * a->c.seqlen_q)
    return 0;
  if (a->c.o32 ? ((uintptr_t)a->c.o32 & 7) != 0 : ((uintptr_t)a->c.o & 15) != 0) return 0;
  return 1;
}

cudaError_t FMSm90Forward(const FMGpuFwdParams *a, cudaStream_t stream)
{
  if (!FMSm90ForwardSupported(a)) return cudaErrorNotSupported;
  if (a->head_dim == 128)
    return a->fp16 ? fmsm90::launch<128, FM_SM90_ST128, true>(a, stream) : fmsm90::launch<128, FM_SM90_ST128, false>(a, stream);
  return a->fp16 ? fmsm90::launch<64, FM_SM90_ST64, true>(a, stream) : fmsm90::launch<64, FM_SM90_ST64, false>(a, stream);
}
