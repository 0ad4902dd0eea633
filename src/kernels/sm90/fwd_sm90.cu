/*
 * fwd_sm90.cu - FlashMask forward for Hopper (sm_90a): TMA + wgmma + warp specialization with
 * column-bound tile skipping.
 *
 * One CTA = one query tile of one (batch, query head): 128 rows and 384 threads at d = 128 and
 * 256, 192 rows and 512 threads at d = 64 (Cfg, layout.cuh):
 *   warpgroup 0: producer. setmaxnreg.dec 24; one thread issues every TMA: Q once (before the
 *     block list is built), then per visited key tile K (and, for partial blocks, the block's
 *     per-column mask data in the same transaction), then V of the previous block, into a
 *     ST-stage ring of mbarriers.
 *   warpgroups 1.. NC: consumers, 64 query rows each (the M of wgmma). setmaxnreg.inc 240
 *     (160 with three consumers).
 *     Step j: S_j = Q K_j^T (SS wgmma) and O += P_{j-1} V_{j-1} (RS wgmma, P from registers)
 *     are issued back to back (O is rescaled to the new row max between the two issues); the
 *     softmax of S_j runs while the P.V product is in flight.
 *     The consumers take turns at wgmma issue through named barriers (round robin; ping-pong
 *     with two), so one warpgroup's softmax overlaps the others' GEMMs.
 * The list of key blocks to visit (skip / unmasked / partial, doc/format.md section 2,
 * FMClassifyTileInline; the wide kernel below counts its tiles instead) is built once per CTA by
 * all its threads before the roles split and is
 * read by the producer and every consumer, so their iteration counts always agree. Unmasked
 * blocks take the dense path; partial blocks (this includes the causal diagonal and the key
 * block that runs past seqlen_k) apply only the element tests their flags ask for: the causal
 * diagonal alone, one [x, y) visible interval per column (from the GPU prepass), or both
 * column-bound intervals plus the diagonal.
 * Epilogue: O goes through the consumer's own rows of the Q buffer, then 16-byte stores.
 * Key tiles are TN = 128 columns (the mask's block) for d = 64 and 128 and TN = 64 for d = 256
 * (O takes 128 registers a thread there): each listed 128-key block is then two 64-key tiles,
 * S_j = Q K_j^T is m64n64k16 (16 k-steps) and O += P V m64n256k16 (4 k-steps). Masks without
 * bound vectors take fwd_kernel_wide instead, on tiles counted rather than listed, without mask
 * data (full, or causal by its flag): at d = 256 80-key tiles (m64n80k16 and 5 k-steps of P V),
 * at d = 128 under the grid schedule 176-key tiles (m64n176k16, 11 k-steps).
 * Shared memory: [Q: D/64 chunks][K: ST x D/64 chunks][V: ST x D/64 chunks][mask data: ST x TN x
 * 16 B][barriers][block list] (the wide kernel: no mask data, no list); each chunk is 64 elements wide (Cfg<D>::BM rows for Q, TN for K and V)
 * with the TMA 128-byte swizzle.
 * The kernel is its parts in order: build_block_list (blocklist.cuh), then producer_load or
 * consumer_mainloop (mainloop.cuh) by warpgroup, then epilogue_store (epilogue.cuh); sizes and
 * layout in layout.cuh.
 */
#define FMFWD_PROF_HERE /* fmfwd_prof (a -DFMFWD_PROF build) is defined here */
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

/*
 * tile_start - the one-tile kernels' start: the CTA's mbarriers (at L::OFF_BAR) initialized by
 * thread 0, which then issues the tile's Q load (the consumers always wait for it). Returns the
 * barriers for every thread; the caller syncs the CTA before anyone waits on them.
 */
template <int D, int ST, class L>
__device__ __forceinline__ Barriers tile_start(unsigned char *smem, const CUtensorMap *tmQ, const CtaCoords &cc)
{
  uint64_t *bars = (uint64_t *)(smem + L::OFF_BAR);
  const Barriers bar = {bars, bars + 1, bars + 1 + ST, bars + 1 + 2 * ST, bars + 1 + 3 * ST};
  if (cc.tid == 0) {
    mbar_init(bar.q_full, 1);
    for (int s = 0; s < ST; s++) {
      mbar_init(&bar.k_full[s], 1);
      mbar_init(&bar.v_full[s], 1);
      mbar_init(&bar.k_empty[s], kKEmptyCount<D>); /* release_k */
      mbar_init(&bar.v_empty[s], 4 * Cfg<D>::NC);
    }
    fence_barrier_init();
    mbar_expect_tx(bar.q_full, L::QB);
#pragma unroll
    for (int c = 0; c < D / 64; c++) tma_load_4d(smem + L::OFF_Q + c * Cfg<D>::QCH, tmQ, bar.q_full, c * 64, cc.hq, cc.m0, cc.b);
  }
  return bar;
}

/* The one-tile-per-CTA kernel on the mask's blocks. 176-key tiles listed with
   their mask data for d = 128 masks with bounds (each taking the element tests of the up to three
   blocks it overlaps) measured +0.3..+4% on prefix LM and random and -21..-25% on sliding
   window, causal document and share question (H100, 2026-12-05, fwd_bench abmask): removed.
   Written again and timed through the library on the benchmark's 12 masks, where auto gives it
   only the long-tile masks (grid schedule): -7..+5%, geometric mean 0.991 (prefix LM causal 32K
   +3%, random eviction 32K +5%; prefix LM document and causal blockwise 8K, sliding window 32K
   -6..-7%; H100, 2026-12-07): not kept. */
template <int D, int ST, bool F16>
__global__ void __launch_bounds__(Cfg<D>::THREADS, 1)
  fwd_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
             const __grid_constant__ CUtensorMap tmV, const FMGpuFwdCore p)
{
  using L = Layout<D, ST>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u); /* keeps the pointer shared for nvcc */
  const CtaCoords cc = cta_coords<D>(p);
  const Barriers bar = tile_start<D, ST, L>(smem, &tmQ, cc); /* Q's load overlaps the block-list build */
  fill_ones<F16, L, Cfg<D>::THREADS>(smem, cc.tid);           /* (the list build's barriers order it) */
  int *list = (int *)(smem + L::OFF_LIST);
  const int n = build_block_list<D, ST>(p, smem, list);

  if (cc.wg == 0) {
    setmaxnreg_dec<Cfg<D>::REG_P>();
    producer_load<D, ST, 1, GridTile<D>, L>(&tmK, &tmV, p, smem, list, n, bar);
  } else {
    setmaxnreg_inc<Cfg<D>::REG_C>();
    float o[D / 2];
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    consumer_mainloop<D, ST, F16, 1, GridTile<D>, L>(p, smem, list, n, bar, o, mrow, lrow, smem + L::OFF_Q);
    epilogue_store<D, F16>(p, smem + L::OFF_Q, o, mrow, lrow);
  }
}

/*
 * The wide forward (masks without bound vectors: full, or causal by its flag): as fwd_kernel, on
 * wide_tn<D>()-key tiles: at d = 256 80 keys (FlashAttention-3's and -4's there) instead of 64, a
 * fifth fewer softmax passes, barriers and waits per key; at d = 128 176 instead of 128
 * (FlashAttention-3's non-causal tile; it measured faster on causal too). Such a mask needs no block list and no per-column
 * data (which would not fit beside 224 KB of Q, K and V at d = 256): the tiles are counted
 * (WideTiles), and the one element test is the causal diagonal with seqlen_k (mask_limit).
 */
template <int D, int ST, bool F16>
__global__ void __launch_bounds__(Cfg<D>::THREADS, 1)
  fwd_kernel_wide(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                  const __grid_constant__ CUtensorMap tmV, const FMGpuFwdCore p)
{
  using L = Layout<D, ST, 1, kTilesCounted>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u); /* keeps the pointer shared for nvcc */
  const CtaCoords cc = cta_coords<D>(p);
  const Barriers bar = tile_start<D, ST, L>(smem, &tmQ, cc);
  __syncthreads(); /* the barriers initialized before anyone waits on them */
  const WideTiles<L::TN> tiles = wide_tiles<D, L::TN>(p, cc.m0);

  if (cc.wg == 0) {
    setmaxnreg_dec<Cfg<D>::REG_P>();
    producer_load<D, ST, 1, GridTile<D>, L>(&tmK, &tmV, p, smem, tiles, tiles.n, bar);
  } else {
    setmaxnreg_inc<Cfg<D>::REG_C>();
    float o[D / 2];
    float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
    consumer_mainloop<D, ST, F16, 1, GridTile<D>, L>(p, smem, tiles, tiles.n, bar, o, mrow, lrow, smem + L::OFF_Q);
    epilogue_store<D, F16>(p, smem + L::OFF_Q, o, mrow, lrow);
  }
}

/*
 * The persistent forward (d = 64 and 128; FM_GPU_SCHED_STATIC / _DYNAMIC): one CTA per SM runs
 * tile after tile, so that a tile's start (its block list, Q's load, the first K/V) and its
 * epilogue overlap the neighbouring tiles' work instead of standing alone. Same threads,
 * the roles split once:
 *   warp 0 (lane 0): the producer: per tile, waits for its block list, loads its Q into the
 *     tile's Q buffer (two, alternating), then K/V over the one ring that runs on across tiles.
 *   warps 1-3: the scheduler and list builders: take the next tile (an atomic counter, or
 *     blockIdx.x + t * gridDim.x), build its block list with 96 threads into the list buffer of
 *     its parity and publish {tile, n, r0} in that list's header (r0: the ring position of
 *     the tile's first block, the sum of the CTA's earlier n); tile index -1 ends the CTA.
 *   warpgroups 1.. NC: the consumers, as in fwd_kernel, per tile, with their turns of wgmma
 *     issue running on across tiles (the first consumer starts the next tile while the others
 *     finish this one); after the epilogue (which stages O through the tile's own Q buffer)
 *     they free the list and the Q buffer. What a
 *     consumer needs of its tile it reads from the header (twice: before the mainloop and
 *     before the epilogue), so that no tile state stays live across the mainloop's registers.
 * Tile t's order (tile_coords): query blocks fastest, heaviest first, then heads, then samples.
 */
template <int D, int ST, bool F16>
__global__ void __launch_bounds__(Cfg<D>::THREADS, 1)
  fwd_kernel_persistent(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                        const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmO, const FMGpuFwdCore p)
{
  using L = Layout<D, ST, 2>;
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u); /* keeps the pointer shared for nvcc */
  const int tid = threadIdx.x, lane = tid & 31, wg = __shfl_sync(0xffffffffu, tid >> 7, 0);
  uint64_t *bars = (uint64_t *)(smem + L::OFF_BAR);
  uint64_t *q_full = bars, *ring = bars + 2;
  const PBarriers pb = {ring + 4 * ST, ring + 4 * ST + 2};
  /* shared words: {tile, n, r0, -} per list buffer at hdr + 16 buf; nm, ntiles at hdr + 32, 36;
     the builders' broadcast of the tile they took at hdr + 40; the next tile's r0 at hdr + 44 */
  const uint32_t hdr = smem_u32(smem + L::OFF_HDR);
  int *lists = (int *)(smem + L::OFF_LIST);
  const int llen = (int)L::list_len(p.nblk);
  /* the query blocks per head and the tile count, kept in shared memory (hdr + 32, + 36) and read
     where needed: held in registers across the roles' loops, ptxas spilled them */
  const auto nm_of = [hdr]() { return ld_s32(hdr + 32); };
  const auto ntiles_of = [hdr]() { return ld_s32(hdr + 36); };

  if (tid == 0) {
    const int nm = (p.seqlen_q + Cfg<D>::BM - 1) / Cfg<D>::BM;
    st_u32(hdr + 32, nm);
    st_u32(hdr + 36, nm * p.heads_q * p.batch);
    for (int b = 0; b < 2; b++) {
      mbar_init(&q_full[b], 1);
      mbar_init(&pb.l_full[b], 1);  /* the first builder thread */
      mbar_init(&pb.l_empty[b], 4 * Cfg<D>::NC + 1); /* each consumer warp after its epilogue, and the producer */
    }
    for (int s = 0; s < ST; s++) {
      mbar_init(&ring[s], 1);
      mbar_init(&ring[ST + s], kKEmptyCount<D>);
      mbar_init(&ring[2 * ST + s], 1);
      mbar_init(&ring[3 * ST + s], 4 * Cfg<D>::NC);
    }
    fence_barrier_init();
  }
  fill_ones<F16, L, Cfg<D>::THREADS>(smem, tid);
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<Cfg<D>::REG_PP>(); /* the list builders need more than 24 (ptxas spills them at 24) */
    if (tid < 32) {
      /* the producer */
      if (tid == 0) {
        const Barriers bar = {nullptr, ring, ring + ST, ring + 2 * ST, ring + 3 * ST};
        for (int t = 0;; t++) {
          const int buf = t & 1;
          const uint32_t ph = (t >> 1) & 1;
          mbar_wait(&pb.l_full[buf], ph);
          const int tile = ld_s32(hdr + 16 * buf), n = ld_s32(hdr + 16 * buf + 4), r0 = ld_s32(hdr + 16 * buf + 8);
          if (tile < 0) break;
          const GivenTile src = {tile_coords<D>(p, tile, nm_of(), 0, 0)};
          /* Q buffer buf is free: l_full of this tile came after l_empty of tile t - 2, which every
             consumer warp arrives on only after that tile's epilogue (its TMA store read) */
          mbar_expect_tx(&q_full[buf], L::QB);
#pragma unroll
          for (int c = 0; c < D / 64; c++)
            tma_load_4d(smem + L::OFF_Q + buf * L::QB + c * Cfg<D>::QCH, &tmQ, &q_full[buf], c * 64, src.c.hq, src.c.m0, src.c.b);
          producer_load<D, ST, 2>(&tmK, &tmV, p, smem, lists + buf * llen, n, bar, r0, src);
          mbar_arrive(&pb.l_empty[buf]);
        }
      }
    } else {
      /* the scheduler and list builders (96 threads, named barrier kBarBuild) */
      const int btid = tid - 32;
      for (int t = 0;; t++) {
        const int buf = t & 1;
        const uint32_t ph = (t >> 1) & 1;
        mbar_wait(&pb.l_empty[buf], ph ^ 1);
        if (btid == 0) st_u32(hdr + 40, p.sched ? atomicAdd(p.sched, 1) : blockIdx.x + t * nctaid_x());
        named_sync(kBarBuild, 96);
        /* every builder reads the word before the list build's first barrier, and the next
           write comes after it; the end mark goes to the header, which builders never read */
        const int tile = ld_s32(hdr + 40);
        if (tile >= ntiles_of()) {
          if (btid == 0) {
            st_u32(hdr + 16 * buf, (uint32_t)-1);
            mbar_arrive(&pb.l_full[buf]);
          }
          break;
        }
        const GivenTile src = {tile_coords<D>(p, tile, nm_of(), btid, 0)};
        const int n = build_block_list<D, ST, 2, 96, kBarBuild>(p, smem, lists + buf * llen, src);
        if (btid == 0) {
          st_u32(hdr + 16 * buf, tile);
          st_u32(hdr + 16 * buf + 4, n);
          /* r0, the ring position of the tile's first block, runs on in hdr + 44 (first builder
             only; in a register it was spilled with 32 registers a thread at d = 64) */
          const int r0 = t ? ld_s32(hdr + 44) : 0;
          st_u32(hdr + 16 * buf + 8, r0);
          st_u32(hdr + 44, r0 + n);
          mbar_arrive(&pb.l_full[buf]);
        }
      }
    }
  } else {
    setmaxnreg_inc<Cfg<D>::REG_CP>();
#ifdef FMFWD_PROF
    const bool pon = (tid & 127) == 0;
#endif
    /* the consumers' turns run on across tiles (consumer_mainloop): the last consumer lets the
       first one go once, here, and the first takes the last one's final arrival after its last
       tile (a CTA without tiles too) */
    if (wg == Cfg<D>::NC) named_arrive(kBarPing, 256);
    for (int t = 0;; t++) {
      const int buf = t & 1;
      const uint32_t ph = (t >> 1) & 1;
      FMFWD_PROF_T(ta);
      mbar_wait(&pb.l_full[buf], ph);
      FMFWD_PROF_ADD(pon, FPROF_LIST, ta);
      if (ld_s32(hdr + 16 * buf) < 0) break;
      unsigned char *qtile = smem + L::OFF_Q + buf * L::QB;
      float o[D / 2];
      float mrow[2] = {-INFINITY, -INFINITY}, lrow[2] = {0.f, 0.f};
      {
        const Barriers bar = {&q_full[buf], ring, ring + ST, ring + 2 * ST, ring + 3 * ST};
        const GivenTile src = {tile_coords<D>(p, ld_s32(hdr + 16 * buf), nm_of(), tid, wg)};
        consumer_mainloop<D, ST, F16, 2>(p, smem, lists + buf * llen, ld_s32(hdr + 16 * buf + 4), bar, o, mrow, lrow, qtile,
                                         ph, ld_s32(hdr + 16 * buf + 8), src);
      }
      FMFWD_PROF_T(te);
      epilogue_store<D, F16, GivenTile, true>(p, qtile, o, mrow, lrow, GivenTile{tile_coords<D>(p, ld_s32(hdr + 16 * buf), nm_of(), tid, wg)},
                                              &tmO);
      FMFWD_PROF_ADD(pon, FPROF_EPI, te);
      /* the staging's stores were fenced for the TMA store, which has read them (the o32 path
         writes no shared memory): the list, and with it the Q buffer, may be used again */
      release(&pb.l_empty[buf], lane);
      FMFWD_PROF_N(pon, FPROF_TILES, 1);
      FMFWD_PROF_ADD(pon, FPROF_ALL, ta);
    }
    if (wg == 1) named_sync(kBarPing, 256);
  }
}

/* ------------------------------ host side ------------------------------ */

/*
 * 4-D map over a [B][S][H][D] tensor with element strides bs, ss, hs (D contiguous): dims
 * {D, H, S, B}; box {64, 1, rows, 1} (rows: Cfg<D>::BM for Q, the key tile TN for K and V); 128-byte
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

static int dev_of()
{
  int dev = 0;
  return cudaGetDevice(&dev) == cudaSuccess ? dev : 0;
}

/*
 * The opt-in shared-memory size is a per-device attribute of each kernel: attr_set (one per
 * kernel) remembers what was set per device (a process may launch on several devices, e.g. a
 * one-GPU reference next to a context-parallel plan).
 */
static cudaError_t set_smem(const void *kernel, size_t smem, size_t *attr_set)
{
  int dev = 0;
  cudaError_t e;
  if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
  if (dev < 0 || dev >= 64 || smem > attr_set[dev]) {
    if ((e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem)) != cudaSuccess) return e;
    if (dev >= 0 && dev < 64) attr_set[dev] = smem;
  }
  return cudaSuccess;
}

/* Whether the persistent kernel (two Q buffers, two block lists) fits this device's shared
   memory for nblk key blocks; never for d = 256 (its one Q buffer is 64 KB). */
template <int D, int ST> static bool persistent_fits(int nblk)
{
  int maxsm = 0;
  if (D == 256) return false;
  if (cudaDeviceGetAttribute(&maxsm, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev_of()) != cudaSuccess) return false;
  return Layout<D, ST, 2>::bytes(nblk) <= (size_t)maxsm;
}

template <int D, int ST, bool F16, int WIDE = kTilesBlock> static cudaError_t launch(const FMGpuFwdParams *a, cudaStream_t stream, int *path)
{
  using L = Layout<D, ST, 1, WIDE>;
  CUtensorMap tq, tk, tv;
  cudaError_t e;
  if ((e = make_map(&tq, a->q, a->batch, a->c.seqlen_q, a->c.heads_q, D, F16, a->q_batch_stride, a->q_row_stride,
                    a->q_head_stride, Cfg<D>::BM)) != cudaSuccess)
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
  if constexpr (D != 256 && WIDE == kTilesBlock) {
    if (a->schedule != FM_GPU_SCHED_GRID && persistent_fits<D, ST>(a->c.nblk)) {
      *path = FM_SM90_FWD_PERSISTENT;
      using LP = Layout<D, ST, 2>;
      static size_t attr_p[64];
      const size_t smem = LP::bytes(a->c.nblk);
      int nsm = 0;
      if ((e = set_smem((const void *)fwd_kernel_persistent<D, ST, F16>, smem, attr_p)) != cudaSuccess) return e;
      if ((e = cudaDeviceGetAttribute(&nsm, cudaDevAttrMultiProcessorCount, dev_of())) != cudaSuccess) return e;
      const long long ntiles = (long long)((a->c.seqlen_q + Cfg<D>::BM - 1) / Cfg<D>::BM) * a->c.heads_q * a->batch;
      const int cap = a->ctas > 0 && a->ctas < nsm ? a->ctas : nsm;
      const int grid = (int)(ntiles < cap ? ntiles : cap);
      /* O in dtype by TMA stores from the staging (64 rows per consumer); unused with o32 */
      CUtensorMap to = tq;
      if (!a->c.o32 && (e = make_map(&to, a->c.o, a->batch, a->c.seqlen_q, a->c.heads_q, D, F16, a->o_batch_stride,
                                     a->o_row_stride, a->o_head_stride, 64)) != cudaSuccess)
        return e;
      p.batch = a->batch;
      p.sched = nullptr;
      if (a->schedule == FM_GPU_SCHED_DYNAMIC) {
        /* the counter: stream-ordered, one per launch (no two launches share one) */
        if ((e = cudaMallocAsync((void **)&p.sched, sizeof(int), stream)) != cudaSuccess) return e;
        if ((e = cudaMemsetAsync(p.sched, 0, sizeof(int), stream)) != cudaSuccess) {
          cudaFreeAsync(p.sched, stream);
          return e;
        }
      }
      fwd_kernel_persistent<D, ST, F16><<<grid, Cfg<D>::THREADS, smem, stream>>>(tq, tk, tv, to, p);
      e = cudaGetLastError();
      if (p.sched) {
        const cudaError_t f = cudaFreeAsync(p.sched, stream);
        if (e == cudaSuccess) e = f;
      }
      return e;
    }
  }
  /* one CTA per query tile: the wide kernel (counted tiles), or fwd_kernel on its block list */
  const auto kern = [] {
    if constexpr (WIDE == kTilesCounted) return fwd_kernel_wide<D, ST, F16>;
    else return fwd_kernel<D, ST, F16>;
  }();
  static size_t attr_set[64];
  const size_t smem = L::bytes(a->c.nblk);
  *path = WIDE ? FM_SM90_FWD_WIDE : FM_SM90_FWD_GRID;
  if ((e = set_smem((const void *)kern, smem, attr_set)) != cudaSuccess) return e;
  dim3 grid((a->c.seqlen_q + Cfg<D>::BM - 1) / Cfg<D>::BM, a->c.heads_q, a->batch);
  kern<<<grid, Cfg<D>::THREADS, smem, stream>>>(tq, tk, tv, p);
  return cudaGetLastError();
}

} /* namespace fmsm90 */

#ifdef FMFWD_PROF
/* The -DFMFWD_PROF build's counters (fmfwd_prof) summed over the CTAs into sum[FPROF_N], then zeroed
   (fwd_bench tileprof). */
cudaError_t FMFwdSm90Prof(unsigned long long *sum) { return fm_prof_collect(fmsm90::fmfwd_prof, sum); }
#endif

/* Stages per head dim (shared memory: Q + ST x (K + V) + bounds must fit in 227 KB). d = 256
   uses 64-key tiles: Q 64 KB + 2 x (32 + 32) KB + 2 x 1 KB mask data, about 193 KB before the
   block list (2 entries per mask block); its wide kernel (masks without bound vectors) 80-key
   tiles: Q 64 KB + 2 x (40 + 40) KB, 225 KB with the barriers and the alignment slack; at d =
   128 176-key tiles: Q 32 KB + 2 x (44 + 44) KB, 209 KB. */
#define FM_SM90_ST256 2
#define FM_SM90_ST128 2
#define FM_SM90_ST64 4

/* Whether the wide kernel runs these parameters: a mask without bound vectors at d = 256, and at
   d = 128 under the grid schedule (a persistent schedule asked for keeps its kernel). */
static int wide(const FMGpuFwdParams *a)
{
  if (!a->mask_dense) return 0;
  if (a->head_dim == 256) return FM_SM90_WIDE256;
  return FM_SM90_WIDE128 && a->head_dim == 128 && a->schedule == FM_GPU_SCHED_GRID;
}

namespace {
/* A kernel family: head dim, stages, tile kind (the template arguments of Layout and launch). */
template <int D_, int ST_, int WIDE_ = fmsm90::kTilesBlock> struct Family {
  static constexpr int D = D_, ST = ST_, WIDE = WIDE_;
  using L = fmsm90::Layout<D, ST, 1, WIDE>;
};

/* The one dispatch of FMSm90ForwardSupported and FMSm90Forward: f(Family<...>{}) for the family
   that runs these parameters, or none for a head dim the Hopper kernels do not take. */
template <class F, class R> static R with_family(const FMGpuFwdParams *a, F &&f, R none)
{
  if (wide(a)) {
    if (a->head_dim == 256) return f(Family<256, FM_SM90_ST256, fmsm90::kTilesCounted>{});
    return f(Family<128, FM_SM90_ST128, fmsm90::kTilesCounted>{});
  }
  if (a->head_dim == 256) return f(Family<256, FM_SM90_ST256>{});
  if (a->head_dim == 128) return f(Family<128, FM_SM90_ST128>{});
  if (a->head_dim == 64) return f(Family<64, FM_SM90_ST64>{});
  return none;
}
} /* namespace */

int FMSm90ForwardSupported(const FMGpuFwdParams *a)
{
  int dev, maxsm = 0;
  const size_t need = with_family(a, [&](auto f) { return decltype(f)::L::bytes(a->c.nblk); }, (size_t)0);
  if (need == 0) return 0;
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

cudaError_t FMSm90Forward(const FMGpuFwdParams *a, cudaStream_t stream, int *path)
{
  int pth = 0, *pp = path ? path : &pth;
  *pp = 0;
  if (!FMSm90ForwardSupported(a)) return cudaErrorNotSupported;
  return with_family(
    a,
    [&](auto f) {
      using F = decltype(f);
      return a->fp16 ? fmsm90::launch<F::D, F::ST, true, F::WIDE>(a, stream, pp) : fmsm90::launch<F::D, F::ST, false, F::WIDE>(a, stream, pp);
    },
    cudaErrorNotSupported);
}
