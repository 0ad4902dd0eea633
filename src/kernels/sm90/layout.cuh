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

constexpr int kBN = FM_GPU_BLOCK_N; /* key columns per block */

/*
 * Consumer warpgroups per CTA (64 query rows each): three at d = 64, two otherwise. At d = 64 a
 * step's two GEMMs are half as long as at d = 128 while its softmax is as long, so two consumers'
 * GEMMs no longer hide each other's softmax; a third consumer (192-row tiles) gives the tensor
 * cores two other warpgroups' GEMMs to run meanwhile (FlashAttention-3 and -4 take 192-row tiles at
 * d = 64 too). -DFM_SM90_NC64=2 keeps 128-row tiles at d = 64 (A/B).
 */
#ifndef FM_SM90_NC64
#define FM_SM90_NC64 3
#endif
/* Named barriers: the consumers' wgmma turns (kBarPing + cw), each consumer's epilogue (kBarEpi +
   cw), the persistent kernel's list builders (kBarBuild); 0 is __syncthreads. */
constexpr int kBarPing = 1, kBarEpi = 4, kBarBuild = 7;

template <int D> struct Cfg {
  static constexpr int NC = D == 64 ? FM_SM90_NC64 : 2; /* consumer warpgroups */
  static constexpr int BM = 64 * NC;                     /* query rows per CTA */
  static constexpr int THREADS = 128 * (NC + 1);         /* the producer warpgroup and the consumers */
  static constexpr int QCH = BM * 128;                   /* one 64-column chunk of the Q tile (BM rows x 128 bytes) */
  /* registers per thread after setmaxnreg: producer warpgroup, consumers (one tile per CTA; the
     persistent kernel's list builders need more than 24). 65536 in all. */
  static constexpr int REG_P = 24, REG_C = NC == 3 ? 160 : 240;
  static constexpr int REG_PP = NC == 3 ? 32 : 40, REG_CP = NC == 3 ? 160 : 232;
  static_assert(NC == 2 || NC == 3, "two or three consumer warpgroups");
  static_assert(NC == 3 || BM == FM_GPU_TILE_M, "fmtile.h's tile rows (the schedule's estimate) are the two-consumer tile's");
  static_assert(128 * (REG_P + NC * REG_C) <= 65536 && 128 * (REG_PP + NC * REG_CP) <= 65536, "register file");
};

/*
 * Key columns per tile: the mask's 128-key block, except for d = 256, where O (64 x 256 fp32
 * per consumer, 128 registers a thread) leaves room only for 64-key S and P tiles; each listed
 * 128-key block then becomes two 64-key tiles (blocklist.cuh).
 */
template <int D> constexpr int tile_n() { return D == 256 ? 64 : kBN; }

/*
 * Key columns per tile of the wide kernel (fwd_sm90.cu, fwd_kernel_wide), which runs masks
 * without bound vectors (full, or causal by its flag; no block list, no per-column mask data): 80
 * at d = 256, FlashAttention-3's and -4's tile there: S and P take 40 and 20 registers a thread
 * beside O's 128, and Q (64 KB) + 2 stages of K and V (4 x 40 KB) fill 224 KB; 176 at d = 128
 * (FlashAttention-3's non-causal tile; on an H100 it ran 3-7% faster than 128 on full, 4-5% on
 * causal): S 88, P 44, O 64 registers, Q (32 KB) + 2 stages of K and V (4 x 44 KB) 208 KB.
 */
template <int D> constexpr int wide_tn() { return D == 256 ? 80 : 176; }

/*
 * The row sums of P by the tensor core (kOnesSum<D>, d = 64): P V runs as m64n72k16, the last 8
 * columns of its B a 2 KB shared-memory block of ones (OFF_ONES, after the V stages; each k-step's
 * descriptor reaches it through its own LBO), so the accumulator's columns 64..71 hold each row's
 * sum of P (as rounded for the product) and are rescaled with O; the softmax step adds no row
 * sums (64 FADD of a thread's 455-instruction step). It costs 1/8 more tensor work on P V.
 * At d = 64 a step's exponentials, products and issue are close to one another, and these adds
 * were issue slots: +2.6-2.8% on full, causal 8K and random, +8% on causal 32K (grid schedule),
 * -1.5..+3.6% on the short-tile masks (dynamic schedule; H100, fwd_bench ab64, 2026-12-07, with
 * kDescAt). The LSE then carries the rounding of P (FMPlanForward in fmplan.h states the bound). At d = 128 the tensor pipe is the bound
 * (84% busy on full 8K) and O's accumulators leave no room at d = 256: off there.
 * -DFM_SM90_ONES_SUM=0 turns it off (A/B).
 */
#ifndef FM_SM90_ONES_SUM
#define FM_SM90_ONES_SUM 64
#endif
template <int D> constexpr bool kOnesSum = FM_SM90_ONES_SUM == 64 && D == 64;

/*
 * NQ = 1: the one-tile-per-CTA kernel. NQ = 2: the persistent kernel (fwd_sm90.cu), with two Q
 * buffers (the next tile's Q loads while this tile's O is staged through its own), its extra
 * barriers and two block lists with a header each (tile, length). WIDE: kTilesBlock (the mask's
 * blocks, or their halves at d = 256), kTilesCounted (the wide kernel: TN = wide_tn<D>(), no mask
 * data, no block list: its tiles are counted, not listed).
 */
enum { kTilesBlock = 0, kTilesCounted = 1 };
template <int D, int ST, int NQ = 1, int WIDE = kTilesBlock> struct Layout {
  static constexpr bool kCounted = WIDE == kTilesCounted;  /* counted tiles: no list, no mask data */
  static constexpr int TN = WIDE ? wide_tn<D>() : tile_n<D>(); /* key columns per tile */
  static constexpr int TPB = WIDE ? 1 : kBN / TN;          /* tiles per mask block (1 or 2; wide tiles do not follow the blocks) */
  static constexpr int KCH = TN * 128;                     /* one 64-column chunk of a K or V tile */
  static constexpr int QB = Cfg<D>::BM * D * 2;
  static constexpr int KB = TN * D * 2;
  static constexpr int BB = kCounted ? 0 : TN * 16;
  static constexpr int OFF_Q = 0;
  static constexpr int OFF_K = OFF_Q + NQ * QB;
  static constexpr int OFF_V = OFF_K + ST * KB;
  static constexpr int ONES = kOnesSum<D> && !WIDE ? 2048 : 0; /* the block of ones (kOnesSum) */
  static constexpr int OFF_ONES = OFF_V + ST * KB;
  static constexpr int OFF_B = OFF_ONES + ONES;
  static constexpr int OFF_BAR = OFF_B + ST * BB;
  /* NQ = 1: q_full, then the ring (k_full, k_empty, v_full, v_empty: ST each). NQ = 2: q_full[2],
     the ring, l_full[2], l_empty[2] (PBarriers) */
  static constexpr int NBAR = NQ + 4 * ST + (NQ == 2 ? 4 : 0);
  static constexpr int OFF_CNT = OFF_BAR + NBAR * 8;          /* per-warp counts, one int per warp */
  static constexpr int OFF_HDR = OFF_CNT + Cfg<D>::THREADS / 8; /* NQ = 2: {tile, n, r0, -} per list, nm, ntiles, a broadcast word */
  static constexpr int OFF_LIST = (OFF_HDR + (NQ == 2 ? 48 : 0) + 15) & ~15;
  /* list entries for nblk mask blocks: one per tile */
  __host__ __device__ static size_t list_len(int nblk) { return kCounted ? 0 : (size_t)nblk * TPB; }
  static_assert(!WIDE || (NQ == 1 && KCH % 1024 == 0), "the wide kernels: one tile per CTA, 1024-byte aligned chunks (TMA swizzle)");
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
template <int D> __device__ __forceinline__ CtaCoords cta_coords(const FMGpuFwdCore &p)
{
  CtaCoords c;
  const int mblk = gridDim.x - 1 - blockIdx.x;
  c.hq = blockIdx.y;
  c.b = blockIdx.z;
  c.hkv = c.hq / (p.heads_q / p.heads_kv);
  c.mh = FM_GPU_MASK_ROW(p, c.b, c.hq); /* the mask row: (sample,) mask head */
  c.m0 = mblk * Cfg<D>::BM;
  c.tid = threadIdx.x;
  c.warp = c.tid >> 5;
  c.lane = c.tid & 31;
  c.wg = __shfl_sync(0xffffffffu, c.tid >> 7, 0); /* warp-uniform to ptxas: descriptors in uniform registers */
  return c;
}

/* Where a part takes its tile from: the built-in registers (one tile per CTA) ... */
template <int D> struct GridTile {
  __device__ __forceinline__ CtaCoords operator()(const FMGpuFwdCore &p) const { return cta_coords<D>(p); }
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
template <int D> __device__ __forceinline__ CtaCoords tile_coords(const FMGpuFwdCore &p, int t, int nm, int tid, int wg)
{
  CtaCoords c;
  const int r = t / nm;
  c.m0 = (nm - 1 - (t - r * nm)) * Cfg<D>::BM;
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
   list read and the tile done by the producer and every consumer (their epilogue too, so the
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
 * so under FM_SM90_LANE_RELEASE every thread arrives (128 per consumer), the form compute-sanitizer's
 * racecheck follows; otherwise one arrival per warp after __syncwarp (4 per consumer), which orders the lanes'
 * reads just as well under the PTX memory model but which racecheck reports as a hazard.
 */
#ifdef FM_SM90_LANE_RELEASE
template <int D> constexpr int kKEmptyCount = 128 * Cfg<D>::NC;
__device__ __forceinline__ void release_k(uint64_t *bar, int) { mbar_arrive(bar); }
#else
template <int D> constexpr int kKEmptyCount = 4 * Cfg<D>::NC;
__device__ __forceinline__ void release_k(uint64_t *bar, int lane) { release(bar, lane); }
#endif

/*
 * Diagnostic build only (-DFMFWD_PROF; fwd_bench tileprof): the persistent kernel's consumers
 * (the first thread of each consumer warpgroup) add the cycles (clock64) of the phases named by
 * FmfwdProf into fmfwd_prof[CTA][slot] with fire-and-forget reductions. The default build has
 * none of it (the macros expand to nothing).
 */
enum FmfwdProf {
  FPROF_ALL = 0, /* a tile, from the wait for its block list to the release of its buffers */
  FPROF_LIST,    /* waiting for the tile's block list (the builders) */
  FPROF_Q,       /* waiting for the tile's Q */
  FPROF_FIRST,   /* block 0: its K wait, turn, S GEMM, mask and softmax */
  FPROF_KW,      /* blocks 1..: waiting for K */
  FPROF_TURN,    /* blocks 1..: waiting for the turn of wgmma issue */
  FPROF_VW,      /* blocks 1..: waiting for V */
  FPROF_MASK,    /* blocks 1..: the element tests */
  FPROF_LAST,    /* the last P.V: its V wait, turn and GEMM */
  FPROF_EPI,     /* the epilogue (O staged, its stores issued, the LSE, the stores' read of the staging) */
  FPROF_TILES,   /* tiles (one count per consumer warpgroup) */
  FPROF_EPI_STAGE, /* of the epilogue: l reduced, O scaled and written to the staging */
  FPROF_EPI_SYNC,  /* of the epilogue: the proxy fence and the warpgroup's barrier before the store */
  FPROF_BLOCKS,  /* key blocks visited */
  FPROF_PARTIAL, /* of them, blocks with element tests */
  FPROF_N
};
#ifdef FMFWD_PROF
#ifdef FMFWD_PROF_HERE /* fwd_sm90.cu, the one user (without relocatable device code an extern is a copy) */
__device__ unsigned long long fmfwd_prof[1024][FPROF_N];
#else /* for the templates of other includers (fwd_bench), which never instantiate them: a copy no kernel writes */
static __device__ unsigned long long fmfwd_prof[1024][FPROF_N];
#endif
#define FMFWD_PROF_T(v) const long long v = clock64()
#define FMFWD_PROF_ADD(on, slot, v)                                                                                         \
  do {                                                                                                                      \
    if (on) red_add_u64(&fmfwd_prof[blockIdx.x & 1023][slot], (unsigned long long)(clock64() - (v)));                      \
  } while (0)
#define FMFWD_PROF_N(on, slot, n)                                                                                           \
  do {                                                                                                                      \
    if (on) red_add_u64(&fmfwd_prof[blockIdx.x & 1023][slot], (unsigned long long)(n));                                    \
  } while (0)
#else
#define FMFWD_PROF_T(v)
#define FMFWD_PROF_ADD(on, slot, v)
#define FMFWD_PROF_N(on, slot, n)
#endif

} /* namespace fmsm90 */
