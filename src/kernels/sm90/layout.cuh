/*
 * layout.cuh - the Hopper forward's tile sizes, shared-memory layout, block-list entry bits and
 * small helpers shared by its parts (blocklist.cuh, mainloop.cuh, epilogue.cuh). Device code,
 * included by fwd_sm90.cu only.
 */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "../fmgpu.cuh"
#include "ptx.cuh"

namespace fmsm90 {

constexpr int kBM = FM_GPU_TILE_M;  /* query rows per CTA (fmtile.h: the plan's schedule choice counts keys per such tile) */
constexpr int kBN = FM_GPU_BLOCK_N; /* key columns per block */
constexpr int kThreads = 384;
constexpr int kChunkBytes = 128 * 128; /* 128 rows x 64 x 2-byte elements */

/*
 * Key columns per tile: the mask's 128-key block, except for d = 256, where O (64 x 256 fp32
 * per consumer, 128 registers a thread) leaves room only for 64-key S and P tiles; each listed
 * 128-key block then becomes two 64-key tiles (blocklist.cuh).
 */
template <int D> constexpr int tile_n() { return D == 256 ? 64 : kBN; }

/*
 * NQ = 1: the one-tile-per-CTA kernel. NQ = 2: the persistent kernel (fwd_sm90.cu), with two Q
 * buffers (the next tile's Q loads while this tile's O is staged through its own), its extra
 * barriers and two block lists with a header each (tile, length).
 */
template <int D, int ST, int NQ = 1> struct Layout {
  static constexpr int TN = tile_n<D>();      /* key columns per tile */
  static constexpr int TPB = kBN / TN;        /* tiles per mask block (1 or 2) */
  static constexpr int KCH = TN * 128;        /* one 64-column chunk of a K or V tile */
  static constexpr int QB = kBM * D * 2;
  static constexpr int KB = TN * D * 2;
  static constexpr int BB = TN * 16;
  static constexpr int OFF_Q = 0;
  static constexpr int OFF_K = OFF_Q + NQ * QB;
  static constexpr int OFF_V = OFF_K + ST * KB;
  static constexpr int OFF_B = OFF_V + ST * KB;
  static constexpr int OFF_BAR = OFF_B + ST * BB;
  /* NQ = 1: q_full, then the ring (k_full, k_empty, v_full, v_empty: ST each). NQ = 2: q_full[2],
     the ring, l_full[2], l_empty[2] (PBarriers) */
  static constexpr int NBAR = NQ + 4 * ST + (NQ == 2 ? 4 : 0);
  static constexpr int OFF_CNT = OFF_BAR + NBAR * 8;          /* per-warp counts, 12 ints */
  static constexpr int OFF_HDR = OFF_CNT + 48;                /* NQ = 2: {tile, n, r0, -} per list, nm, ntiles, a broadcast word */
  static constexpr int OFF_LIST = (OFF_HDR + (NQ == 2 ? 48 : 0) + 15) & ~15;
  __host__ __device__ static size_t list_len(int nblk) { return (size_t)nblk * TPB; }
  static size_t bytes(int nblk) { return 1024 + (size_t)OFF_LIST + NQ * list_len(nblk) * 4; }
};

/*
 * The CTA's coordinates, from the built-in registers. Each part below calls cta_coords itself
 * instead of taking them as arguments: nvcc optimizes a part before inlining it, and from the
 * built-ins it knows their ranges (as it did for the kernel as one function), so the kernel
 * compiles to the same code.
 */
struct CtaCoords {
  int hq, b;     /* query head, batch */
  int hkv, mh;   /* its KV head and mask head */
  int m0;        /* first query row of the tile: heaviest (causal) tiles first */
  int tid, warp, lane, wg;
};
__device__ __forceinline__ CtaCoords cta_coords(const FMGpuFwdCore &p)
{
  CtaCoords c;
  const int mblk = gridDim.x - 1 - blockIdx.x;
  c.hq = blockIdx.y;
  c.b = blockIdx.z;
  c.hkv = c.hq / (p.heads_q / p.heads_kv);
  c.mh = FM_GPU_MASK_ROW(p, c.b, c.hq); /* the mask row: (sample,) mask head */
  c.m0 = mblk * kBM;
  c.tid = threadIdx.x;
  c.warp = c.tid >> 5;
  c.lane = c.tid & 31;
  c.wg = __shfl_sync(0xffffffffu, c.tid >> 7, 0); /* warp-uniform to ptxas: descriptors in uniform registers */
  return c;
}

/* Where a part takes its tile from: the built-in registers (one tile per CTA) ... */
struct GridTile {
  __device__ __forceinline__ CtaCoords operator()(const FMGpuFwdCore &p) const { return cta_coords(p); }
};
/* ... or coordinates the persistent kernel decoded from its scheduler's tile index. */
struct GivenTile {
  CtaCoords c;
  __device__ __forceinline__ CtaCoords operator()(const FMGpuFwdCore &) const { return c; }
};

/*
 * The coordinates of tile t of the persistent kernel's order: query blocks fastest, heaviest
 * (last) first as in the grid, then query heads, then samples, so that the tiles running at one
 * time share a few heads' K and V in L2. tid is the thread's index within its role (the list
 * builders count from their first thread); wg its warpgroup (warp-uniform, from the caller: a
 * shuffle here would need the whole warp, and the producer is one thread).
 */
__device__ __forceinline__ CtaCoords tile_coords(const FMGpuFwdCore &p, int t, int nm, int tid, int wg)
{
  CtaCoords c;
  const int r = t / nm;
  c.m0 = (nm - 1 - (t - r * nm)) * kBM;
  c.b = r / p.heads_q;
  c.hq = r - c.b * p.heads_q;
  c.hkv = c.hq / (p.heads_q / p.heads_kv);
  c.mh = FM_GPU_MASK_ROW(p, c.b, c.hq);
  c.tid = tid;
  c.warp = tid >> 5;
  c.lane = tid & 31;
  c.wg = wg;
  return c;
}

/* The mbarriers of the CTA (shared memory): Q loaded; per stage K loaded/consumed, V loaded/consumed. */
struct Barriers {
  uint64_t *q_full, *k_full, *k_empty, *v_full, *v_empty;
};
/* The persistent kernel's own, per list buffer (and the Q buffer of the same parity): list built;
   list read and the tile done by the producer and both consumers (their epilogue too, so the
   tile's Q buffer is free again: no barrier of its own). */
struct PBarriers {
  uint64_t *l_full, *l_empty;
};

/* A named-barrier sync of NT threads (BAR = 0: __syncthreads, every thread of the CTA). */
template <int NT, int BAR> __device__ __forceinline__ void group_sync()
{
  if constexpr (BAR == 0) __syncthreads();
  else named_sync(BAR, NT);
}

/*
 * Block-list entry: key tile index (of TN columns: the 128-key block, or for d = 256 its
 * 64-key half) in bits 0..26, which per-element tests the tile needs in
 * 28..30, and bit 27 when every column's visible rows form one interval (then one test per
 * element on the prepass's [x, y) pairs replaces the interval and causal tests).
 */
constexpr int kLower = 1 << 28, kUpper = 1 << 29, kCausal = 1 << 30, kSimple = 1 << 27, kBlockBits = (1 << 27) - 1;

__device__ __forceinline__ void release(uint64_t *bar, int lane)
{
  __syncwarp();
  if (lane == 0) mbar_arrive(bar);
}

/*
 * The K stage's empty barrier: its bounds were read by every consumer thread (LDS in mask_tile),
 * so under FM_SM90_LANE_RELEASE every thread arrives (256 arrivals), the form compute-sanitizer's
 * racecheck follows; otherwise one arrival per warp after __syncwarp (8), which orders the lanes'
 * reads just as well under the PTX memory model but which racecheck reports as a hazard.
 */
#ifdef FM_SM90_LANE_RELEASE
constexpr int kKEmptyCount = 256;
__device__ __forceinline__ void release_k(uint64_t *bar, int) { mbar_arrive(bar); }
#else
constexpr int kKEmptyCount = 8;
__device__ __forceinline__ void release_k(uint64_t *bar, int lane) { release(bar, lane); }
#endif

} /* namespace fmsm90 */
