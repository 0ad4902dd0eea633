/*
 * fwd_sm90.cu - FlashMask forward for Hopper (sm_90a): TMA + wgmma + warp specialization with
 * column-bound tile skipping.
 *
 * One CTA = one 128-row query tile of one (batch, query head); 384 threads:
 *   warpgroup 0: producer. setmaxnreg.dec 24; one thread issues every TMA: Q once (before the
 *     block list is built), then per visited key tile K (and, for partial blocks, the block's
 *     per-column mask data in the same transaction), then V of the previous block, into a
 *     ST-stage ring of mbarriers.
 *   warpgroups 1, 2: consumers, 64 query rows each (the M of wgmma). setmaxnreg.inc 240.
 *     Step j: S_j = Q K_j^T (SS wgmma) and O += P_{j-1} V_{j-1} (RS wgmma, P from registers)
 *     are issued back to back (O is rescaled to the new row max between the two issues); the
 *     softmax of S_j runs while the P.V product is in flight.
 *     The two consumers alternate their wgmma issue through named barriers 1 and 2
 *     (ping-pong), so one warpgroup's softmax overlaps the other one's GEMMs.
 * The list of key blocks to visit (skip / unmasked / partial, doc/format.md section 2,
 * FMClassifyTileInline) is built once per CTA by all 384 threads before the roles split and is
 * read by the producer and both consumers, so their iteration counts always agree. Unmasked
 * blocks take the dense path; partial blocks (this includes the causal diagonal and the key
 * block that runs past seqlen_k) apply only the element tests their flags ask for: the causal
 * diagonal alone, one [x, y) visible interval per column (from the GPU prepass), or both
 * column-bound intervals plus the diagonal.
 * Epilogue: O goes through the consumer's own rows of the Q buffer, then 16-byte stores.
 * Key tiles are TN = 128 columns (the mask's block) for d = 64 and 128 and TN = 64 for d = 256
 * (O takes 128 registers a thread there): each listed 128-key block is then two 64-key tiles,
 * S_j = Q K_j^T is m64n64k16 (16 k-steps) and O += P V m64n256k16 (4 k-steps).
 * Shared memory: [Q: D/64 chunks][K: ST x D/64 chunks][V: ST x D/64 chunks][mask data: ST x TN x
 * 16 B][barriers][block list]; each chunk is 64 elements wide (128 rows for Q, TN for K and V)
 * with the TMA 128-byte swizzle.
 * The kernel is its parts in order: build_block_list (blocklist.cuh), then producer_load or
 * consumer_mainloop (mainloop.cuh) by warpgroup, then epilogue_store (epilogue.cuh); sizes and
 * layout in layout.cuh.
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <math.h>
#include "fwd_sm90.cuh"
#include "tma_host.cuh"
#include "layout.cuh"
#include "blocklist.cuh"
#include "mainloop.cuh"
#include "epilogue.cuh"

namespace fmsm90 {

template <int D, int ST, bool F16>
__global__ void __launch_bounds__(kThreads, 1)
  fwd_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
             const __grid_constant__ CUtensorMap tmV, const FMGpuFwdCore p)
{
  using L = Layout<D, ST>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = (unsigned char *)(((uintptr_t)smem_raw + 1023) & ~(uintptr_t)1023);
  const CtaCoords cc = cta_coords(p);
  const int hq = cc.hq, b = cc.b, m0 = cc.m0, tid = cc.tid;

  uint64_t *bars = (uint64_t *)(smem + L::OFF_BAR);
  const Barriers bar = {bars, bars + 1, bars + 1 + ST, bars + 1 + 2 * ST, bars + 1 + 3 * ST};
  int *list = (int *)(smem + L::OFF_LIST);

  if (tid == 0) {
    mbar_init(bar.q_full, 1);
    for (int s = 0; s < ST; s++) {
      mbar_init(&bar.k_full[s], 1);
      mbar_init(&bar.v_full[s], 1);
      mbar_init(&bar.k_empty[s], 8); /* one arrival per consumer warp */
      mbar_init(&bar.v_empty[s], 8);
    }
    fence_barrier_init();
    /* Q first: its load overlaps the block-list build (the consumers always wait for it) */
    mbar_expect_tx(bar.q_full, L::QB);
#pragma unroll
    for (int c = 0; c < D / 64; c++) tma_load_4d(smem + L::OFF_Q + c * kChunkBytes, &tmQ, bar.q_full, c * 64, hq, m0, b);
  }
  const int n = build_block_list<D, ST>(p, smem, list);

  if (cc.wg == 0) {
    setmaxnreg_dec<24>();
    producer_load<D, ST>(&tmK, &tmV, p, smem, list, n, bar);
  } else {
    setmaxnreg_inc<240>();
    float o[D / 2];
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    consumer_mainloop<D, ST, F16>(p, smem, list, n, bar, o, mrow, lrow);
    epilogue_store<D, F16>(p, smem + L::OFF_Q, o, mrow, lrow);
  }
}

/* ------------------------------ host side ------------------------------ */

/*
 * 4-D map over a [B][S][H][D] tensor with element strides bs, ss, hs (D contiguous): dims
 * {D, H, S, B}; box {64, 1, rows, 1} (rows: 128 for Q, the key tile TN for K and V); 128-byte
 * swizzle.
 */
static cudaError_t make_map(CUtensorMap *map, const void *base, int B, int S, int H, int D, int f16, int64_t bs, int64_t ss,
                            int64_t hs, int rows)
{
  PFN_cuTensorMapEncodeTiled_v12000 enc = fm_tma_encode_fn();
  if (!enc) return cudaErrorNotSupported;
  cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)H, (cuuint64_t)S, (cuuint64_t)B};
  cuuint64_t strides[3] = {(cuuint64_t)hs * 2, (cuuint64_t)ss * 2, (cuuint64_t)bs * 2};
  cuuint32_t box[4] = {64, 1, (cuuint32_t)rows, 1};
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
                    a->q_head_stride, kBM)) != cudaSuccess)
    return e;
  if ((e = make_map(&tk, a->k, a->batch, a->c.seqlen_k, a->c.heads_kv, D, F16, a->k_batch_stride, a->k_row_stride,
                    a->k_head_stride, L::TN)) != cudaSuccess)
    return e;
  if ((e = make_map(&tv, a->v, a->batch, a->c.seqlen_k, a->c.heads_kv, D, F16, a->v_batch_stride, a->v_row_stride,
                    a->v_head_stride, L::TN)) != cudaSuccess)
    return e;
  /* V (MN-major, 128B swizzle) descriptor bits without the address: LBO = 64-column chunk
     stride (TN rows x 128 B), SBO = 8-row group stride (1024 B); vdesc_swap swaps the two (a
     diagnostic for the descriptor convention) */
  FMGpuFwdCore p = a->c;
  {
    const uint64_t lbo = a->vdesc_swap ? 1024 : L::KCH, sbo = a->vdesc_swap ? L::KCH : 1024;
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

/* Stages per head dim (shared memory: Q + ST x (K + V) + bounds must fit in 227 KB). d = 256
   uses 64-key tiles: Q 64 KB + 2 x (32 + 32) KB + 2 x 1 KB mask data, about 193 KB before the
   block list (2 entries per mask block). */
#define FM_SM90_ST256 2
#define FM_SM90_ST128 2
#define FM_SM90_ST64 4

int FMSm90ForwardSupported(const FMGpuFwdParams *a)
{
  size_t need;
  int dev, maxsm = 0;
  if (a->head_dim == 256) need = fmsm90::Layout<256, FM_SM90_ST256>::bytes(a->c.nblk);
  else if (a->head_dim == 128) need = fmsm90::Layout<128, FM_SM90_ST128>::bytes(a->c.nblk);
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
  if (a->head_dim == 256)
    return a->fp16 ? fmsm90::launch<256, FM_SM90_ST256, true>(a, stream) : fmsm90::launch<256, FM_SM90_ST256, false>(a, stream);
  if (a->head_dim == 128)
    return a->fp16 ? fmsm90::launch<128, FM_SM90_ST128, true>(a, stream) : fmsm90::launch<128, FM_SM90_ST128, false>(a, stream);
  return a->fp16 ? fmsm90::launch<64, FM_SM90_ST64, true>(a, stream) : fmsm90::launch<64, FM_SM90_ST64, false>(a, stream);
}
