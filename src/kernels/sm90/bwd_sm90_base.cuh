/*
 * bwd_sm90_base.cuh - the Hopper backward's shared definitions (bwd_sm90.cu): tile sizes, the
 * dQ split between the consumers, the shared-memory layout, the kernel parameters, the item
 * order, the partial tiles' row masks, the shared-memory, bulk-copy and wgmma helpers, the
 * barriers and slots, and what a consumer thread is. Device code, included by bwd_sm90.cu only.
 */
#pragma once
#include <cuda.h>
#include <cuda_runtime.h>
#include "bwd_sm90.cuh"
#include "ptx.cuh"
#include "wgmma_gen.cuh"

namespace fmbwd {
using namespace fmsm90;

constexpr int kBN = FMBWD_BLOCK_N; /* keys per CTA */
/* The query rows per step, BM, are a template argument of the layout and of every role and
   helper (64, 80 for d = 128, or 128 for d = 64: FMBwdSm90Launch picks). */
constexpr int kThreads = 384;

/*
 * kXF (every step at d = 128, and d = 64's 128-row one: fmbwd_xf below): the rows' log2 LSE and D come
 * from the tensor core instead of shared memory loads. S^T and dP^T each start with one k16
 * slice more (SS, m64n80k16 at 80 rows): A = 64 rows of [1, 1, 0, ...] (one 128-byte core matrix
 * of that row, SBO 0, its second k-half zeros), B = the step's rows of the workspace's xt terms
 * (bwd_sm90.cuh), so that the accumulators hold S^T - lse2 / c and dP^T - D, and P^T = exp2(c x),
 * dS^T = P^T x need no loads and no subtractions. At 80 rows: 20 LDS.64 (330 of the step's 3227
 * shared-memory wavefronts an SM) and 40 FADD fewer a thread-step, for 1/20 more tensor work.
 * B is MN-major without swizzle: per 8 rows a 64-byte group of four 16-byte k-rows (lse2's two
 * terms, then D's), the groups 64 bytes apart (SBO), so that each 128-byte core matrix's k-rows
 * 2, 3 are its own D terms and 4..7 the next group's terms, and the second k-half (LBO 0)
 * repeats the first; S reads from the stage's first byte and dP from its 32nd. A weights all but
 * the first two k-rows 0, and every term is finite (xt_terms clamps), so they add exactly 0. A
 * stage's terms take 8 bytes a row and 128 zero bytes after them (read by the last core
 * matrices, and A's zero half): at 80 rows, with A's core matrix, 1664 bytes in all against the
 * 1280 of the lse2 and D rows. Measured at 80 rows +3-6% on full and +1-5% on causal (H100,
 * 2026-12-07, doc/performance.md).
 */
#ifndef FMBWD_XF
#define FMBWD_XF 3
#endif
/* The steps that take kXF: 80 rows (d = 128); d = 64's 128-row step (m64n128k16 slices, 1/4 of
   S's k-steps there, so 1/10 more tensor work; bwd_bench ab64, H100, 2026-12-07: full +1.3% /
   +0.2% at 8K / 32K, causal +2.9% / +2.3%); d = 128's 64-row step, which the short-item masks
   take (m64n64k16 slices, 1/20 more tensor work, 16 LDS.64 and 32 FADD fewer a thread-step;
   bwd_bench ab, H100, 2026-12-08, eight rounds: causal document and share question at 32K
   +1.7-2.7%, dense level, geometric mean +0.8%). -DFMBWD_XF=2: not d = 128's 64-row step; 1: 80
   rows only; 0: none (the loads). d = 64's 64-row step does not take it: measured level
   (geometric mean 1.000 over ab64's six cases, 2026-12-08). */
__host__ __device__ constexpr bool fmbwd_xf(int D, int BM) { return (FMBWD_XF >= 1 && BM == 80) || (FMBWD_XF >= 2 && BM == 128 && D == 64) || (FMBWD_XF >= 3 && BM == 64 && D == 128); }

/*
 * How dQ = dS K is split between the two consumers. d = 64 on 64-row steps ("own"): each
 * multiplies its own 64 keys' dS by its own K rows and its writer adds the whole 64 x 64 block;
 * no barrier between the consumers. d = 128: each computes 64 of the columns over all 128 keys
 * (both halves of dS, published by a barrier over both consumers every step) and adds that half.
 * (Own for d = 128, m64n128 products and 32 KB blocks, measured 2-8% slower on the H200,
 * 2026-12-01: the doubled bulk adds into L2 cost more than the barrier; see doc/performance.md.)
 * d = 64 on 128-row steps ("rows"): each computes 64 of the rows (query half cw) over all 128 keys,
 * as FlashAttention-3 and -4 do there. Either way a consumer stages 64 dQ columns of 64 rows (80
 * at BM = 80), and the two halves (columns, or rows) are the turn words' two halves.
 */
template <int D, int BM> struct DqSplit {
  static constexpr bool own = D == 64 && BM == 64;
  static constexpr bool rows = D == 64 && BM == 128;
};

/*
 * BM = 64, 80 (d = 128 only) or 128 (d = 64 only); d = 256 (W): 64 rows, one stage, 64-key items
 * (bwd_sm90.cu's comment at consumer_w says why). At 80 the per-item column bounds (2 KB) do not
 * fit: with them the layout would exceed the 227 KB a CTA may have, and without them 472 bytes were
 * left (88 since the LSE and D terms, kXF, took 384 more). So the consumers read their two
 * columns' bounds from global memory (L1) on partial steps instead of staging them. At 128 dS^T is two chunks of 64 query columns (each 128 keys x 128 B).
 */
template <int D, int ST, int BM> struct Layout {
  static_assert(BM == 64 || (BM == 80 && D == 128) || (BM == 128 && D == 64), "step rows: 64, 80 for d = 128, 128 for d = 64");
  static_assert(D != 256 || (ST == 1 && BM == 64), "d = 256: one stage of 64 rows");
  static constexpr bool W = D == 256;           /* the head dimension split between the consumers (consumer_w) */
  static constexpr int KN = fmbwd_item_keys(D); /* keys per item */
  static constexpr bool BND_SMEM = BM != 80 && !W; /* the column bounds staged in shared memory */
  static constexpr int KC = KN * 128;           /* one 64-column chunk of K or V (16 KB; 8 KB at W) */
  static constexpr int KB = KN * D * 2;         /* K or V tile: D / 64 chunks */
  static constexpr int QB = BM * D * 2;   /* Q or dO tile; chunks of BM x 64 (BM x 128 B, 8 KB for 64) */
  static constexpr int QC = BM * 128;     /* one such chunk */
  static constexpr int DSB = KN * BM * 2;
  /* dS buffers: shared halves need two (the other consumer may still read); W: P^T and dS^T */
  static constexpr int NDS = DqSplit<D, BM>::own ? 1 : 2;
  static constexpr int DQR = BM == 80 ? 80 : 64; /* rows of a consumer's dQ block */
  static constexpr int DQP = W ? 2 : 1;          /* its 64-column accumulator planes */
  static constexpr int DQN = DQP * DQR / 2;      /* its accumulator registers a thread */
  static constexpr int DQB = DQP * DQR * 64 * 4;
  static constexpr int OFF_K = 0;
  static constexpr int OFF_V = OFF_K + KB;
  static constexpr int OFF_Q = OFF_V + KB;
  static constexpr int OFF_DO = OFF_Q + ST * QB;
  static constexpr int OFF_DS = OFF_DO + ST * QB;
  static constexpr int END_DS = OFF_DS + NDS * DSB;
  static constexpr bool XF = fmbwd_xf(D, BM);     /* kXF above */
  static constexpr int XB = BM * 8 + 128;          /* XF: a stage's terms (8 bytes a row) and 128 zero bytes */
  /* The dQ staging (2 x DQB, 1024-byte aligned) follows the dS buffers, then the small parts below.
     XF: the small parts come first and the staging last, so that each of kXF's operands has 40 KB
     of the allocation after it (compute-sanitizer's memcheck flagged their wgmma "out of bounds"
     1.7 KB from the end, as if an operand were its M or N x K x 2 contiguous bytes; HACKING.md). */
  static constexpr int OFF_L = XF ? END_DS : END_DS + 2 * DQB; /* lse2 rows, or XF: A's core matrix of ones (128 bytes), then the stages' terms */
  static constexpr int OFF_DD = OFF_L + ST * BM * 4; /* D rows (not XF) */
  static constexpr int OFF_XT = OFF_L + 128;         /* XF: the stages' terms, XB bytes each */
  static constexpr int XA_LBO = OFF_XT + 8 * BM - OFF_L; /* XF: from A's core matrix to its zero half, stage 0's zeros */
  static constexpr int OFF_BND = XF ? OFF_XT + ST * XB : OFF_DD + ST * BM * 4; /* the item's column bounds, 128 x int4 (BND_SMEM) */
  /* 2 item slots {t, kb, hkv, b}, the producer's step and item counts; at +64 the dQ writers' slots */
  static constexpr int OFF_ITEM = OFF_BND + (BND_SMEM ? kBN * 16 : 0);
  static constexpr int OFF_STEP = OFF_ITEM + 128; /* per stage the step slot: {query block, flags} (kStepEnd below) */
  static constexpr int OFF_BAR = OFF_STEP + ST * 8;
  static constexpr int NBAR = 7 + 2 * ST + (W ? 2 : 0); /* W: Q's full and empty apart from dO's */
  static constexpr int OFF_WX = OFF_BAR + NBAR * 8; /* per dQ writer 8 ints: its cached item (dq_writer) */
  static constexpr int OFF_DQ = XF ? (OFF_WX + 64 + 1023) / 1024 * 1024 : END_DS;
  static constexpr int BYTES = (XF ? OFF_DQ + 2 * DQB : OFF_WX + 64) + 1024; /* + alignment slack */
  static_assert(OFF_K == 0, "the consumers address barriers from K's address");
  static_assert(BYTES <= 232448, "more shared memory than an sm_90 block may have (227 KB)");
};

struct Params {
  void *dk, *dv;
  FMGpuStrides sdk, sdv;
  const float *lse2, *dsum;
  const uint16_t *xt; /* the LSE and D terms of the steps that take kXF */
  float *dqacc;
  const int4 *packed;
  const int32_t *sum;
  int Sq, Sk, Hq, Hkv, mask_heads, causal, nblk, nqb, B; /* nqb: query blocks of the kernel's step rows */
  int Sqp;      /* the workspace's padded rows (fmbwd_sqp) */
  int G, hpm;   /* query heads per kv head, per mask head (host-divided: no registers held) */
  int mstride;  /* mask rows per sample: mask_heads when the mask has a batch (mask_batch > 1), else 0 */
  int nkb;      /* items per (batch, kv head): nblk, or at d = 256 the 64-key halves of the blocks */
  int nitems;   /* nkb * Hkv * B work items, key block fastest */
  int *counter; /* items handed out so far (zero at launch) */
  int dkv_f32;  /* dk, dv are float (pieces the caller reduces) */
  int dkv_vec;  /* dk, dv in dtype, 16-byte aligned rows: 16-byte stores (store_dkdv) */
  int deterministic; /* dQ's partials added in decreasing key-block order (turn words below) */
  int ilv;      /* deterministic mode: (batch, kv head) rows whose items are interleaved (decode_item, fmbwd_ilv) */
  int *turn;    /* [B][Hq][nqb][4]: the turns of the two halves (64 columns, or 64 rows at BM = 128), the first visiting key block;
                   with first_store the flags of the blocks' halves (words 0, 1) */
  int first_store; /* dQ's accumulator was not zeroed: each block's first writer stores (dq_writer) */
  float scale, c; /* c = scale * log2(e) */
};

/*
 * Item t: key block t % nkb (at d = 256 a 64-key half), then kv head, then batch. The CTAs running at one time share a few
 * (batch, head) pairs, so the dQ accumulator rows they add into stay in L2 (key block slowest,
 * heaviest first, put 132 heads' accumulators in flight and ran 18% slower).
 * Deterministic mode: key blocks in decreasing order (the order of the adds into each dQ block,
 * bwd_sm90_dq.cuh), and the (batch, kv head) rows taken ilv at a time, their items interleaved:
 * key block nblk-1 of each of the ilv rows, then nblk-2 of each, and so on. Each row's adds form
 * one chain (a key block adds after the one above it), so a key block can start one link after
 * the one above; with ilv rows in flight the CTAs freed one after another take the next key block
 * of each row in turn, as fast as the chains can use them. Taken one row at a time, ilv freed
 * CTAs took ilv consecutive key blocks of one row, and each waited for the one before. Either
 * way a row's key block kb + 1 comes before kb, so a turn is only awaited from an item taken
 * earlier (host code checks the order: bwd_bench order). ilv: fmbwd_ilv (bwd_sm90.cuh).
 */
__host__ __device__ __forceinline__ void decode_item(const Params &p, int t, int *kb, int *hkv, int *b)
{
  int r, k;
  if (p.deterministic) {
    const int per = p.ilv * p.nkb, g = t / per, w = t - g * per, rows = p.nitems / p.nkb;
    int c = rows - g * p.ilv;
    c = c < 1 ? 1 : c > p.ilv ? p.ilv : c; /* the last group may hold fewer rows (and t >= nitems none) */
    k = w / c;
    r = g * p.ilv + (w - k * c);
    k = p.nkb - 1 - k;
  } else {
    r = t / p.nkb;
    k = t - r * p.nkb;
  }
  *kb = k;
  *hkv = r % p.Hkv;
  *b = r / p.Hkv;
}

/* Rows [0, n) of a tile of as many rows as W has bits, as bits (n clamped to [0, bits]). */
template <class W> __device__ __forceinline__ W upto(int n)
{
  constexpr int bits = 8 * sizeof(W);
  n = n < 0 ? 0 : n > bits ? bits : n;
  return n >= bits ? ~(W)0 : (((W)1 << n) - (W)1);
}
/* Masked rows of the tile starting at row m0 for key column j with bounds b (bit r = row m0 + r),
   64 rows (W = uint64_t: the 64-row step) or 32 (uint32_t: the words of the 80- and 128-row
   steps, mask_packed). */
template <class W> __device__ __forceinline__ W tile_rows_masked(int4 b, int m0, int j, int causal, int off)
{
  W m = (upto<W>(b.y - m0) & ~upto<W>(b.x - m0)) | (upto<W>(b.w - m0) & ~upto<W>(b.z - m0));
  if (causal) m |= upto<W>(j - off - m0); /* j > i + off  <=>  i < j - off */
  return m;
}

__device__ __forceinline__ void bulk_reduce_add(float *gdst, const void *ssrc, uint32_t bytes)
{
  asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n" ::"l"((uint64_t)gdst),
               "r"(smem_u32(ssrc)), "r"(bytes)
               : "memory");
}
/* 1-D bulk copy shared -> global (plain store), in the thread's bulk group. */
__device__ __forceinline__ void bulk_store(float *gdst, const void *ssrc, uint32_t bytes)
{
  asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n" ::"l"((uint64_t)gdst), "r"(smem_u32(ssrc)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void bulk_wait0() { asm volatile("cp.async.bulk.wait_group 0;\n" ::: "memory"); }
/* Every bulk group but the newest complete. */
__device__ __forceinline__ void bulk_wait1() { asm volatile("cp.async.bulk.wait_group 1;\n" ::: "memory"); }

/* acc[BM/2] = A B^T over D: A = 64 rows of a 128-row K/V tile (K-major), B = a BM-row Q/dO tile
   (K-major: BM / 8 groups of 8 rows at 1024 bytes, the chunks of 64 columns BM x 128 bytes apart). */
template <int D, int BM, bool F16, bool ACC = false> __device__ __forceinline__ void gemm_nt(float *acc, uint32_t a, uint32_t b)
{
  const uint64_t a0 = desc_join(desc_lo(a, 16), desc_hi(1024)), b0 = desc_join(desc_lo(b, 16), desc_hi(1024));
#pragma unroll
  for (int kk = 0; kk < D / 16; kk++)
    wgmma_ss<BM, F16>(acc, desc_at(a0, (kk / 4) * 16384 + (kk % 4) * 32), desc_at(b0, (kk / 4) * (BM * 128) + (kk % 4) * 32), ACC || kk > 0);
}

/* acc[D/2] += A B: A (64 keys x BM queries) from registers (the accumulator pairs of the scores
   are the A fragments of the k16 slices), B = a BM-row Q/dO tile (MN-major). */
template <int D, int BM, bool F16> __device__ __forceinline__ void gemm_rs(float *acc, const uint32_t *a, uint32_t b)
{
  const uint64_t b0 = desc_join(desc_lo(b, BM * 128), desc_hi(1024)); /* LBO: the stride between 64-column chunks */
#pragma unroll
  for (int u = 0; u < BM / 16; u++) wgmma_rs<D, F16>(acc, a + 4 * u, desc_at(b0, u * 2048));
}

/* dq[32] = dS K over NT k16 slices: A = dS^T rows (keys) from ds (MN-major), B = K rows from k. */
template <int NT, bool F16> __device__ __forceinline__ void gemm_dq(float *dq, uint32_t ds, uint32_t k)
{
  const uint64_t a0 = desc_join(desc_lo(ds, 8192), desc_hi(1024)), b0 = desc_join(desc_lo(k, 16384), desc_hi(1024));
#pragma unroll
  for (int t = 0; t < NT; t++) wgmma_ss_t11<64, F16>(dq, desc_at(a0, t * 2048), desc_at(b0, t * 2048), t > 0);
}

/*
 * The 80-row step's dQ, transposed: dq[40] = dQ^T = K^T dS^T over NT k16 slices of keys. A = K^T
 * from k (this consumer's 64 columns of K, MN-major: one 128-byte atom wide, 8-key groups at 1024
 * bytes, a slice 2048 bytes), B = dS from ds, stored [80 queries][keys] K-major in 64-key chunks of
 * 80 x 128 bytes (a query block of 80 rows does not fit one MN-major atom of 64; as K-major rows
 * of 64 keys it does). dq[4k + 2h + e] is column 16 w + lane / 4 + 8 h, query row 8k + 2 t4 + e.
 */
template <int NT, bool F16> __device__ __forceinline__ void gemm_dqt(float *dq, uint32_t ds, uint32_t k)
{
  const uint64_t a0 = desc_join(desc_lo(k, 16384), desc_hi(1024)), b0 = desc_join(desc_lo(ds, 16), desc_hi(1024));
#pragma unroll
  for (int t = 0; t < NT; t++) wgmma_ss_t10<80, F16>(dq, desc_at(a0, t * 2048), desc_at(b0, (t / 4) * 10240 + (t % 4) * 32), t > 0);
}

/*
 * Diagnostic build only (-DFMBWD_PROF; bwd_bench detprof): per CTA, cycles (clock64) spent in the
 * waits named by FmbwdProf, added with fire-and-forget reductions into fmbwd_prof[CTA][slot].
 * The default build has none of it (the macros expand to nothing).
 */
enum FmbwdProf {
  PROF_W_IDLE = 0, /* dQ writer: waiting for its consumer's next block */
  PROF_W_TURN,     /* writer: waiting for the block's turn (deterministic mode) */
  PROF_W_READ,     /* writer: the bulk add issued until its source was read (then the buffer goes back), the next visitor's test included */
  PROF_W_PASS,     /* writer: the previous add's completion and its turn's hand-over (deterministic mode) */
  PROF_C_DQE,      /* consumer (one thread per warpgroup): waiting for the writer to free its staging buffer */
  PROF_C_FULL,     /* consumer: waiting for a stage's Q, dO, lse2 and D */
  PROF_C_ALL,      /* consumer: the whole of its loop */
  PROF_BLOCKS,     /* dQ blocks written */
  PROF_W_SCAN,     /* writer: the next visitor's test and scan (a part of PROF_W_READ) */
  PROF_C_ITEM,     /* consumer: waiting for the next item's announcement (the producer waits for K/V's release first) */
  PROF_C_KV,       /* consumer: waiting for the item's K and V */
  PROF_C_FULL1,    /* consumer: waiting for an item's first stage (a part of PROF_C_FULL) */
  PROF_C_EPI,      /* consumer: the item's dK/dV epilogue */
  PROF_ITEMS,      /* items taken (one count per consumer warpgroup) */
  PROF_N
};
#ifdef FMBWD_PROF
#ifdef FMBWD_PROF_HERE /* bwd_sm90.cu, the one user (without relocatable device code an extern is a copy) */
__device__ unsigned long long fmbwd_prof[1024][PROF_N];
#endif
#define FMBWD_PROF_T(v) const long long v = clock64()
#define FMBWD_PROF_ADD(slot, v) red_add_u64(&fmbwd_prof[blockIdx.x & 1023][slot], (unsigned long long)(clock64() - (v)))
#define FMBWD_PROF_ONE(slot) red_add_u64(&fmbwd_prof[blockIdx.x & 1023][slot], 1)
#else
#define FMBWD_PROF_T(v)
#define FMBWD_PROF_ADD(slot, v)
#define FMBWD_PROF_ONE(slot)
#endif

/* Barriers and the item slots in shared memory. */
template <int D, int ST, int BM> struct Sync {
  uint64_t *kv_full, *kv_empty, *item_full, *full, *empty, *dq_full, *dq_empty;
  uint64_t *fullq, *emptyq; /* Layout::W: Q and lse2 (full, empty: dO and D) */
  volatile int *item; /* 2 slots {t, kb, hkv, b}; [8] .. [12]: the producer's own (producer, bwd_sm90.cu) */
  volatile int *dqs;  /* per consumer 8 ints: [0] turn word, [1] turn, [2] accumulator row, [7] stop; the writer's own:
                         [4] [5] its pending hand-over, [3] [6] its cached item (dq_writer) */
  __device__ __forceinline__ explicit Sync(unsigned char *smem)
  {
    uint64_t *bars = (uint64_t *)(smem + Layout<D, ST, BM>::OFF_BAR);
    kv_full = bars;
    kv_empty = bars + 1;
    item_full = bars + 2;
    full = bars + 3;
    empty = bars + 3 + ST;
    dq_full = bars + 3 + 2 * ST;
    dq_empty = bars + 5 + 2 * ST;
    fullq = bars + 7 + 2 * ST;
    emptyq = bars + 8 + 2 * ST;
    item = (volatile int *)(smem + Layout<D, ST, BM>::OFF_ITEM);
    dqs = item + 16;
  }
};

/*
 * A stage's step slot, written by the producer before the stage's loads (the full barrier's arrival
 * publishes it): the query block and, in flags, bit 0 the per-element test (partial), bits
 * 1..29 the query head of the group, bit 30 (BM = 128 only) the first step of that head in the
 * item, bit 31 the end of the item (a stage with no loads). The consumers read their steps from
 * here and do not walk the summaries themselves.
 */
constexpr int kStepEnd = (int)0x80000000, kStepHead = 1 << 30;

/* What a consumer thread is: its warpgroup, lane and key rows. */
struct Me {
  int cw, wt, w, lane, t4, kr0; /* key rows kr0, kr0 + 8 of the block */
};

/* The thread's part of its dS store address (the caller adds the buffer's, and the reg_fence that
   keeps ptxas from holding it across the loop: held in registers, the two offsets measured level,
   0.996 geometric mean, H100, 2026-12-07). 80 rows (store_ds_t): query row
   q = 8 (lane >> 4) + (lane & 7) of the consumer's 80 x 128-byte chunk, 16-byte unit
   ku ^ (q & 7), ku = 2 w + ((lane >> 3) & 1). Otherwise (store_ds): key row kr0 (128 bytes),
   unit 0 swizzled by the row, the thread's word t4. */
template <int BM> __device__ __forceinline__ uint32_t dst_off(const Me &me)
{
  if constexpr (BM == 80) {
    const int q = 8 * (me.lane >> 4) + (me.lane & 7), ku = 2 * me.w + ((me.lane >> 3) & 1);
    return me.cw * (80 * 128) + q * 128 + ((ku ^ (q & 7)) << 4);
  } else return me.kr0 * 128 + me.t4 * 4 + ((me.kr0 & 7) << 4);
}

/* The thread's part of its dQ staging address (stage_dq). 80 rows: row q = 8 kp + 2 t4 + e,
   column c = 16 w + lane / 4 + 8 h of 64 floats, at 4 (64 q + fmbwd_swz(c, q)); fmbwd_swz flips
   bit 3 of c by e ^ (t4 >> 1) and bit 4 by (t4 & 1) ^ kp, that is bits 5 and 6 of the byte offset,
   which 256 q (bits 8 and up) does not carry into: the address of (kp, h, e) is
   (stage + dqt_off) ^ (32 (h ^ e) + 64 kp), plus 256 e + 2048 kp. Otherwise: row r0 = 16 w + lane / 4
   (256 bytes), column 2 t4 swizzled by the row; row r0 + 8 is 2048 bytes further with bit 6 flipped. */
template <int BM> __device__ __forceinline__ uint32_t dqt_off(const Me &me)
{
  if constexpr (BM == 80) {
    const int q = 2 * me.t4; /* (kp, h, e) = 0 */
    return 4 * (64 * q + fmbwd_swz(16 * me.w + (me.lane >> 2), q));
  } else {
    const int r0 = me.w * 16 + (me.lane >> 2);
    return 256 * r0 + 8 * me.t4 + 4 * fmbwd_swz_bits(r0);
  }
}

/* The dQ block of a step, as its writer warp needs it (see dq_writer): the block's turn word
   ((batch, query head, query block) x 4 + column or row half), this block's turn (the key block
   kb, or 2 kb + consumer for d = 64 on 64-row steps) and its first accumulator row in units of 64
   floats, ((batch, query head) x D / 64 + column half) x Sqp + the block's first row (a multiply here,
   after the consumer's register peak, so that the 24-register writer does no division). */
struct DqStep {
  int tix, turn, arow;
  uint32_t ph; /* the parity of the writer's read of the last block from this staging buffer */
};

} /* namespace fmbwd */
