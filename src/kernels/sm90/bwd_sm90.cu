/*
 * bwd_sm90.cu - FlashMask backward for Hopper (sm_90a): TMA + wgmma + warp specialization. The
 * roles and the host side are here; bwd_sm90_base.cuh holds the layout, parameters and helpers,
 * bwd_sm90_dq.cuh the dQ staging, the writer warps and the deterministic turns. A
 * work item is one (128-key block, kv head, batch): K and V are loaded once, and only the query
 * blocks its column bounds leave visible are walked (skipped blocks cost nothing).
 *
 * Persistent: a grid of one CTA per multiprocessor takes the work items (key block, kv head,
 * batch; key block fastest) in order from an atomic counter, so that the items in flight are
 * always about 132 consecutive ones (their Q, dO and dQ accumulator rows stay in L2: a static
 * round robin let CTAs with light items run ahead, and causal 8K read 160 GB from DRAM), and
 * one item's K/V loads and first Q/dO stages overlap the previous item's dK/dV epilogue.
 * 384 threads:
 *   warpgroup 0 (setmaxnreg.dec 24): the producer, one thread, loads K and V of an item once,
 *     then streams, per visited (query head of the group, BM-row query block), Q, dO (TMA) and
 *     the block's log2 LSE and D rows (1-D bulk copies) into a ST-stage mbarrier ring; warps 1
 *     and 2 are the dQ writers of consumers 1 and 2 (dq_writer): each takes its consumer's
 *     staged fp32 dQ block, adds it into the accumulator with one bulk reduce-add (or, with first
 *     stores, the block's first writer stores it), and gives the staging buffer back once it has
 *     been read. In the deterministic mode the writer first
 *     waits for the block's turn (key blocks in decreasing order) and passes it on after the add.
 *   warpgroups 1, 2: consumers (setmaxnreg.inc 240), 64 keys each. Per step:
 *     S^T = K Q^T and dP^T = V dO^T (SS wgmma, both issued; ptxas places a few of S's
 *     exponentials before dP's wait; at 80 rows and d = 64's 128 each starts with one k-slice
 *     more, the rows' LSE and D terms: kXF, bwd_sm90_base.cuh); P^T = exp2(S^T c - lse2), and
 *     on partial tiles only the element test (one 64-bit row mask per key column from its
 *     bounds, staged in shared memory per head);
 *     dS^T = P^T (dP^T - D); dV += P^T dO issued (RS wgmma, P from registers); dS^T to shared
 *     memory (swizzled); dQ = dS K (SS wgmma, both operands MN-major) issued, then
 *     dK += dS^T Q (RS) behind it: for d = 128 each consumer computes 64 of the 128 dQ columns
 *     over all 128 keys (a named barrier over both consumers publishes dS), for d = 64 on 64-row
 *     steps each computes all columns over its own keys (on 128-row steps its 64 query rows over
 *     all 128 keys, with the barrier). Once dV and dQ retire, dQ (fp32) is staged in
 *     shared memory and handed to the consumer's writer warp while dK still runs.
 *   dK, dV stay in registers over every query head of the group (GQA) and are written once.
 * The block walk (bwd_sm90.cuh, fmbwd_walk_next) runs in the producer only: it writes each
 * step's query block, head and partial flag into the stage's step slot before the loads,
 * and an end stage after an item's last step, so the consumers never read the summaries.
 * Shared memory (BM = 64; the 80-row layout is in Layout): [K: D/64 chunks of 128 rows][V]
 * [Q: ST x D/64 chunks of 64 rows][dO: same][dS: 2 x 128 rows x 64][dQ staging: 2 x 64 x 64
 * fp32][lse2: ST x 64][D: ST x 64][column bounds: 128 x int4][item slots][step slots: ST x 8
 * bytes][barriers]; every bf16 chunk has 128-byte rows with the TMA 128-byte swizzle.
 * d = 128: ST = 2, 196 KB; d = 64: ST = 3, 149 KB. d = 256 has its own consumer (consumer_w: 64-key
 * items, the head dimension split between the consumers, P^T and dS^T through shared memory; one
 * stage, Q's barriers apart from dO's; 210 KB).
 * Register budget: 24 (producer) + 2 x 240; the consumers hold dK, dV (d/2 each), S, dP (BM/2
 * each) and pack P, dS; ptxas spills nothing (the reg_fence copies keep it from hoisting
 * loop-invariant shared-memory addresses, which it would otherwise spill).
 * Query rows per step BM (a template argument): 64, 80 for d = 128 or 128 for d = 64 (FMGpuBwdStepRows, fmbwd.h). At 80,
 * S^T and dP^T are m64n80 (40 accumulators each), dV and dK take 5 k16 slices, the partial tiles'
 * masks are applied to the packed P and dS (96-bit row masks, bounds read from global memory:
 * they do not fit in shared memory beside 80-row stages), dS is stored as [query][key] by
 * transposing stmatrix, and each consumer computes dQ^T = K^T dS^T for its 64 columns (m64n80,
 * A MN-major, B K-major), staged with 32-bit stores into the same accumulator layout, so that the
 * workspace does not depend on BM. The rows' LSE and D are not loaded: S^T and dP^T start from
 * them by an extra k-slice (kXF), whose terms take the place of the lse2 and D rows in shared
 * memory (1664 bytes for 1280). 227 KB of shared memory.
 * Query rows per step 128 for d = 64 (FlashAttention-3 and -4 take 128 there too): S^T and dP^T
 * are m64n128 (64 accumulators each), dV and dK take 8 k16 slices, the partial tiles' masks are
 * applied to the packed P and dS (four 32-bit row words per key column, bounds staged in shared
 * memory), dS^T is two chunks of 64 query columns, and each consumer computes dQ for
 * its 64 query rows over all 128 keys (a barrier over both consumers publishes dS, as at d = 128).
 * The rows' LSE and D come by the extra k-slice here too (kXF). 196 KB of shared memory (ST = 2).
 */
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <string.h>
#define FMBWD_PROF_HERE /* fmbwd_prof (a -DFMBWD_PROF build) is defined here */
#include "bwd_sm90.cuh"
#include "tma_host.cuh"
#include "bwd_sm90_base.cuh"
#include "bwd_sm90_dq.cuh"

namespace fmbwd {
using namespace fmsm90;

/*
 * Producer (one thread, 24 registers: its counters and the current item live in shared memory,
 * nothing is held across a step). Per item: take the next one from the counter, write its slot
 * and load its first step (head 0's first visited query block), then publish it once the
 * consumers are done with K/V of the last one, load K and V, then per visited (head, query block)
 * Q, dO, lse2 and D into the stage ring.
 * The slot and the first step come before the wait for the last item's K/V: the consumers read
 * slot n & 1 of item n - 2 before they released that item's K and V, and the first step's Q and
 * dO then land while the last item's final step retires and K and V load, instead of after them
 * (the summaries' reads of the walk are off that path too). Measured against loading them after
 * K and V, two calls of three alternated rounds: sliding window +1-3% and causal document
 * +1-4% at 8K and 32K, share question +1.4-1.7% in one call and -1.3 to +0.8% in the other,
 * full and causal -0.8 to +0.3%; the first stage's wait fell from 1.2-2.3 to 0.2 kcycles an
 * item (H100, 2026-12-06, twenty-seventh and twenty-eighth sessions).
 */
template <int D, int ST, int BM, bool F16>
__device__ __forceinline__ void producer(unsigned char *smem, const CUtensorMap *tmQ, const CUtensorMap *tmK,
                                         const CUtensorMap *tmV, const CUtensorMap *tmDO, const Params &p)
{
  using L = Layout<D, ST, BM>;
  Sync<D, ST, BM> sy(smem);
  /* [8] the stage ring's position, [9] the item count, [10] BM = 128: the next step is its head's
     first (kStepHead), [11] where head 0's walk resumes after the first step, [12] the next step's
     flags (held here across the walk and the waits: in a register the producer spilled) */
  volatile int *pi = sy.item + 8, *pn = sy.item + 9, *pfirst = sy.item + 10, *pfl = sy.item + 12;
  *pi = 0;
  /* one step's loads into the next stage: query block qb of head g of the item (hkv_, b_), the
     slot's flags in *pfl (bit 0 partial, kStepHead) */
  auto issue = [&](int qb, int g, int hkv_, int b_) {
    const int i = *pi, st = i % ST;
    *pi = i + 1;
    const int hq = hkv_ * p.G + g;
    const size_t lrow = ((size_t)b_ * p.Hq + hq) * p.Sqp + (size_t)qb * BM;
    *pfl |= g << 1;
    mbar_wait(&sy.empty[st], ((i / ST) & 1) ^ 1);
    st_u32(smem_u32(smem + L::OFF_STEP + 8 * st), (uint32_t)qb);
    st_u32(smem_u32(smem + L::OFF_STEP + 8 * st + 4), (uint32_t)*pfl);
    if constexpr (L::W) { /* dO and D first (the step's first product reads them), then Q and lse2 behind their own barriers */
      mbar_expect_tx(&sy.full[st], L::QB + BM * 4);
#pragma unroll
      for (int c = 0; c < D / 64; c++) tma_load_4d(smem + L::OFF_DO + c * L::QC, tmDO, &sy.full[st], c * 64, hq, qb * BM, b_);
      bulk_load(smem + L::OFF_DD, p.dsum + lrow, BM * 4, &sy.full[st]);
      mbar_wait(sy.emptyq, (i & 1) ^ 1);
      mbar_expect_tx(sy.fullq, L::QB + BM * 4);
#pragma unroll
      for (int c = 0; c < D / 64; c++) tma_load_4d(smem + L::OFF_Q + c * L::QC, tmQ, sy.fullq, c * 64, hq, qb * BM, b_);
      bulk_load(smem + L::OFF_L, p.lse2 + lrow, BM * 4, sy.fullq);
      return;
    }
    mbar_expect_tx(&sy.full[st], 2 * L::QB + 2 * BM * 4);
#pragma unroll
    for (int c = 0; c < D / 64; c++) {
      tma_load_4d(smem + L::OFF_Q + st * L::QB + c * L::QC, tmQ, &sy.full[st], c * 64, hq, qb * BM, b_);
      tma_load_4d(smem + L::OFF_DO + st * L::QB + c * L::QC, tmDO, &sy.full[st], c * 64, hq, qb * BM, b_);
    }
    if constexpr (L::XF) bulk_load(smem + L::OFF_XT + st * L::XB, p.xt + lrow * 4, BM * 8, &sy.full[st]); /* the terms (kXF) */
    else {
      bulk_load(smem + L::OFF_L + st * BM * 4, p.lse2 + lrow, BM * 4, &sy.full[st]);
      bulk_load(smem + L::OFF_DD + st * BM * 4, p.dsum + lrow, BM * 4, &sy.full[st]);
    }
  };
  auto cur = [&](int *kb_, int *hkv_, int *b_) {
    const int sl = 4 * (*pn & 1);
    *kb_ = sy.item[sl + 1];
    *hkv_ = sy.item[sl + 2];
    *b_ = sy.item[sl + 3];
  };
  auto next = [&](int g, int q, int *pt) {
    int kb_, hkv_, b_;
    cur(&kb_, &hkv_, &b_);
    FMBwdWalk w;
    fmbwd_walk_init_item<BM, L::KN>(&w, p.sum + (size_t)(b_ * p.mstride + (hkv_ * p.G + g) / p.hpm) * p.nblk * FMBWD_SUM_N,
                                    kb_, p.Sq, p.Sk, p.causal);
    return fmbwd_walk_next<BM>(&w, q, pt);
  };
  for (*pn = 0;; *pn = *pn + 1) {
    const int n = *pn, t = atomicAdd(p.counter, 1);
    int kb, hkv, b;
    decode_item(p, t, &kb, &hkv, &b);
    sy.item[4 * (n & 1)] = t;
    sy.item[4 * (n & 1) + 1] = kb;
    sy.item[4 * (n & 1) + 2] = hkv;
    sy.item[4 * (n & 1) + 3] = b;
    sy.item[11] = 0;
    if (sy.item[4 * (n & 1)] < p.nitems) { /* (t from the slot: kept in a register, it was spilled) */
      int part = 0; /* set by the walk only when q0 < nqb */
      const int q0 = next(0, 0, &part);
      *pfl = (part != 0) | (BM == 128 ? kStepHead : 0);
      if (q0 < p.nqb) {
        sy.item[11] = q0 + 1;
        cur(&kb, &hkv, &b);
        issue(q0, 0, hkv, b);
      }
    }
    mbar_wait(sy.kv_empty, (*pn & 1) ^ 1);
    mbar_arrive(sy.item_full);
    if (sy.item[4 * (*pn & 1)] >= p.nitems) break;
    cur(&kb, &hkv, &b);
    mbar_expect_tx(sy.kv_full, 2 * L::KB);
#pragma unroll
    for (int c = 0; c < D / 64; c++) {
      tma_load_4d(smem + L::OFF_K + c * L::KC, tmK, sy.kv_full, c * 64, hkv, kb * L::KN, b);
      tma_load_4d(smem + L::OFF_V + c * L::KC, tmV, sy.kv_full, c * 64, hkv, kb * L::KN, b);
    }
    /* Every key block walks its query blocks upwards from the first it sees, so on dense masks the
       key blocks of a row reach a query block at the same step: their Q and dO come from L2 once
       read. Walks started at a block that depends on the key block (wrapping round) measured
       level on full and causal and 1-4% slower on the sparse masks and at d = 64 (H100,
       2026-12-05, seventeenth session): not kept. */
    for (int g = 0; g < p.G; g++) {
      int part, qb = g == 0 ? sy.item[11] : 0; /* head 0: past the first step */
      if constexpr (BM == 128) *pfirst = qb == 0 ? kStepHead : 0;
      for (qb = next(g, qb, &part); qb < p.nqb; qb = next(g, qb + 1, &part)) {
        *pfl = (part != 0) | (BM == 128 ? *pfirst : 0);
        cur(&kb, &hkv, &b);
        issue(qb, g, hkv, b);
        if constexpr (BM == 128) *pfirst = 0;
      }
    }
    { /* the item's end: a stage with no loads */
      const int i = *pi, st = i % ST;
      *pi = i + 1;
      mbar_wait(&sy.empty[st], ((i / ST) & 1) ^ 1);
      st_u32(smem_u32(smem + L::OFF_STEP + 8 * st + 4), (uint32_t)kStepEnd);
      mbar_arrive(&sy.full[st]);
      if constexpr (L::W) { /* Q's barriers pass the end stage too, so that their phases stay the stage's */
        mbar_wait(sy.emptyq, (i & 1) ^ 1);
        mbar_arrive(sy.fullq);
      }
    }
  }
}

/*
 * The 80- and 128-row steps' partial tiles, masked after the packing: beside S and dP in flight
 * (208 registers with dK and dV at 80 rows, 192 at 128 with d = 64) masking S spilled (92 bytes
 * at 80, 8 at 128); P and dS packed take BM / 2. A masked element's P and dS halves are zeroed:
 * the values masking P before dS gives, except that such a dS is +0 where 0 x (dP - D) may be -0
 * (the same sums). Per key column h (kr0, kr0 + 8) and per 32-bit word of its row mask from row
 * m0 + 2 t4 (bit 8k + e of word k / 4 is query column 8k + 2 t4 + e). The bounds: at 80 rows from global memory (L1
 * after a head's first step: they do not fit in shared memory beside 80-row stages), at 128 the
 * ones staged in shared memory.
 */
template <int BM>
__device__ __forceinline__ void mask_packed(uint32_t *pp, uint32_t *ps, const int4 *bnd, int m0, int j0, const Me &me, const Params &p)
{
  const int off = p.Sk - p.Sq, m = m0 + 2 * me.t4;
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int4 bb = BM == 80 ? __ldg(bnd + me.kr0 + 8 * h) : bnd[me.kr0 + 8 * h];
#pragma unroll
    for (int wi = 0; wi < (BM + 31) / 32; wi++) {
      const uint32_t wd = tile_rows_masked<uint32_t>(bb, m + 32 * wi, j0 + 8 * h, p.causal, off);
#pragma unroll
      for (int k = 4 * wi; k < 4 * wi + 4 && k < BM / 8; k++) {
        const uint32_t keep = ((wd >> (8 * (k & 3))) & 1u ? 0u : 0xffffu) | ((wd >> (8 * (k & 3) + 1)) & 1u ? 0u : 0xffff0000u);
        pp[2 * k + h] &= keep;
        ps[2 * k + h] &= keep;
      }
    }
  }
}

/*
 * S^T and dP^T of one step (SS wgmma), then P^T = exp2(S^T c - lse2) (zero where the partial
 * tile's row masks say so) and dS^T = P^T (dP^T - D), packed for the RS products. At 80 rows
 * and d = 64's 128 (kXF) the products start from -lse2 / c and -D, so P^T = exp2(S^T c) and
 * dS^T = P^T dP^T.
 * s[4k + e] (k < BM / 8) is key row kr0 (e < 2) or kr0 + 8, query column 8k + 2 t4 + (e & 1).
 * bnd: the column bounds, staged in shared memory (BM = 64, 128) or the head's in global (BM = 80).
 * The rows' LSE and D are read after the waits. (Read while the products run instead, the same
 * instructions in another order: 1.1-2.3% slower on every mask, H200 2026-12-01, seventh
 * session.) ptxas computes most exponentials after the dP wait; forcing all of them before it
 * at 80 rows (a never-taken branch that reads them all: 0 spills) measured 2.0-2.6% slower on
 * full and causal at 8K and 32K (2026-12-04, ninth session). Neither kept.
 */
template <int D, int BM, bool F16, int XA_LBO = 0>
__device__ __forceinline__ void step_scores(float *s, float *dp, uint32_t *pp, uint32_t *ps, uint32_t ka, uint32_t va,
                                            uint32_t qa, uint32_t da, uint32_t ls, uint32_t dd, int part, const int4 *bnd,
                                            int m0, int j0, const Me &me, const Params &p)
{
  constexpr bool XF = fmbwd_xf(D, BM); /* kXF (bwd_sm90_base.cuh): ls is the stage's terms, dd A's ones */
  if constexpr (!XF)
#pragma unroll
    for (int t = 0; t < BM / 2; t++) s[t] = dp[t] = 0.f;
  wgmma_fence();
  /* kXF: the terms start the accumulators. A at dd (SBO 0: one core matrix for all 64 rows; LBO
     XA_LBO: its zero half, stage 0's zeros), B at ls for S and 32 bytes on for dP (SBO 64) */
  if constexpr (XF) wgmma_ss_t01<BM, false>(s, desc_join(desc_lo(dd, XA_LBO), desc_hi_noswz(0)), desc_join(desc_lo(ls, 0), desc_hi_noswz(64)), 0);
  gemm_nt<D, BM, F16, XF>(s, ka + me.cw * 8192, qa);
  wgmma_commit();
  if constexpr (XF)
    wgmma_ss_t01<BM, false>(dp, desc_join(desc_lo(dd, XA_LBO), desc_hi_noswz(0)), desc_join(desc_lo(ls + 32, 0), desc_hi_noswz(64)), 0);
  gemm_nt<D, BM, F16, XF>(dp, va + me.cw * 8192, da);
  wgmma_commit();
  wgmma_wait<1>(); /* S^T retired */
#pragma unroll
  for (int t = 0; t < BM / 2; t++) reg_fence(s[t]);
  if constexpr (XF) {
#pragma unroll
    for (int t = 0; t < BM / 2; t++) s[t] = exp2f(s[t] * p.c);
  } else {
#pragma unroll
    for (int k = 0; k < BM / 8; k++) {
      const float2 l2 = ld_f2(ls + 32 * k);
      s[4 * k] = exp2f(fmaf(s[4 * k], p.c, -l2.x));
      s[4 * k + 1] = exp2f(fmaf(s[4 * k + 1], p.c, -l2.y));
      s[4 * k + 2] = exp2f(fmaf(s[4 * k + 2], p.c, -l2.x));
      s[4 * k + 3] = exp2f(fmaf(s[4 * k + 3], p.c, -l2.y));
    }
  }
  wgmma_wait<0>(); /* dP^T retired */
#pragma unroll
  for (int t = 0; t < BM / 2; t++) reg_fence(dp[t]);
  if (BM == 64 && part) {
    /* row bit masks of the two key columns, shifted so that bit 8k + e is query column 8k + 2 t4 + e */
    const int off = p.Sk - p.Sq;
    const uint64_t mk0 = tile_rows_masked<uint64_t>(bnd[me.kr0], m0, j0, p.causal, off) >> (2 * me.t4);
    const uint64_t mk1 = tile_rows_masked<uint64_t>(bnd[me.kr0 + 8], m0, j0 + 8, p.causal, off) >> (2 * me.t4);
    const uint32_t w0[2] = {(uint32_t)mk0, (uint32_t)(mk0 >> 32)}, w1[2] = {(uint32_t)mk1, (uint32_t)(mk1 >> 32)};
#pragma unroll
    for (int k = 0; k < 8; k++)
#pragma unroll
      for (int e = 0; e < 2; e++) {
        if ((w0[k >> 2] >> (8 * (k & 3) + e)) & 1u) s[4 * k + e] = 0.f;
        if ((w1[k >> 2] >> (8 * (k & 3) + e)) & 1u) s[4 * k + 2 + e] = 0.f;
      }
  }
#pragma unroll
  for (int t = 0; t < BM / 4; t++) pp[t] = pack2<F16>(s[2 * t], s[2 * t + 1]);
  if constexpr (XF) {
#pragma unroll
    for (int t = 0; t < BM / 2; t++) dp[t] *= s[t];
  } else {
#pragma unroll
    for (int k = 0; k < BM / 8; k++) {
      const float2 d2 = ld_f2(dd + 32 * k);
      dp[4 * k] = s[4 * k] * (dp[4 * k] - d2.x);
      dp[4 * k + 1] = s[4 * k + 1] * (dp[4 * k + 1] - d2.y);
      dp[4 * k + 2] = s[4 * k + 2] * (dp[4 * k + 2] - d2.x);
      dp[4 * k + 3] = s[4 * k + 3] * (dp[4 * k + 3] - d2.y);
    }
  }
#pragma unroll
  for (int t = 0; t < BM / 4; t++) ps[t] = pack2<F16>(dp[2 * t], dp[2 * t + 1]);
  if (BM != 64 && part) mask_packed<BM>(pp, ps, bnd, m0, j0, me, p);
}

/* dS^T (packed, this thread's rows kr0 and kr0 + 8) to shared memory: row = key, 16-byte unit
   k ^ (row & 7); BM = 128: query columns 64 c.. in chunk c of 128 keys x 128 bytes (16 KB). */
template <int BM> __device__ __forceinline__ void store_ds(const uint32_t *ps, uint32_t dsaddr, const Me &me)
{
  /* dsaddr is 1024-byte aligned and row kr0 + 8 has kr0's swizzle, so unit k of row kr0 is
     a ^ (k << 4) with a = dsaddr + dst_off (bits 4..6 of the rest are zero), and row kr0 + 8 lies
     1024 bytes further: one LOP3 per pair of stores. */
  uint32_t a = dst_off<BM>(me);
  reg_fence(a);
  a += dsaddr;
#pragma unroll
  for (int k = 0; k < BM / 8; k++) {
    const uint32_t ak = (a ^ (uint32_t)((k & 7) << 4)) + (k >> 3) * 16384;
    st_u32(ak, ps[2 * k]);
    st_u32(ak + 1024, ps[2 * k + 1]);
  }
}

/*
 * The 80-row step's dS (packed, this thread's keys kr0 and kr0 + 8) to shared memory as dS, not
 * dS^T: row = query, this consumer's 64 keys a 128-byte row (its chunk of 80 x 128 bytes), 16-byte
 * unit u ^ (row & 7), the K-major B of gemm_dqt. ps[2k + h] is the accumulator fragment of the
 * 8 x 8 block (keys 16 w + 8 h.., queries 8k..), so one transposing stmatrix of four registers
 * stores the blocks (h = 0, 1) x (query groups 2u, 2u + 1); lane l addresses query row
 * 16u + 8 (l >> 4) + (l & 7), unit 2w + ((l >> 3) & 1) (8 rows in 8 distinct units: one wavefront
 * per matrix). Five instructions where dS^T takes 16 32-bit stores.
 */
__device__ __forceinline__ void store_ds_t(const uint32_t *ps, uint32_t dsaddr, const Me &me)
{
  uint32_t a = dsaddr + dst_off<80>(me);
  reg_fence(a);
#pragma unroll
  for (int u = 0; u < 5; u++) stmatrix_x4_trans(a + u * 2048, ps[4 * u], ps[4 * u + 1], ps[4 * u + 2], ps[4 * u + 3]);
}

/* dq = dS K (SS, both MN-major) over the keys this consumer multiplies (see the file's comment);
   BM = 80: dq = dQ^T = K^T dS^T over all 128 keys (d = 128 only); d = 64 on 128-row steps: the
   consumer's 64 query rows (dS^T chunk cw) over all 128 keys. */
template <int D, int BM, bool F16> __device__ __forceinline__ void issue_dq(float *dq, uint32_t ka, uint32_t dsaddr, const Me &me)
{
#pragma unroll
  for (int t = 0; t < Layout<D, 2, BM>::DQN; t++) dq[t] = 0.f;
  wgmma_fence();
  reg_fence(dsaddr);
  if constexpr (BM == 80) gemm_dqt<8, F16>(dq, dsaddr, ka + me.cw * 16384);
  else if constexpr (DqSplit<D, BM>::rows) gemm_dq<8, F16>(dq, dsaddr + me.cw * 16384, ka);
  else if constexpr (!DqSplit<D, BM>::own) gemm_dq<8, F16>(dq, dsaddr, ka + me.cw * 16384);
  else gemm_dq<4, F16>(dq, dsaddr + me.cw * 8192, ka + me.cw * 8192);
  wgmma_commit();
}

/*
 * The gradient products of one step, in the order that keeps a product queued behind the other
 * work: dV += P^T dO issued; dS to shared memory (before dK reads ps, inside the PTX rule that no
 * register of an in-flight product is touched) and published to both consumers by a barrier;
 * dq = dS K (SS) issued, then dK += dS^T Q (RS) behind it; once dV and dQ have retired, dQ's
 * block is staged for the writer warp while dK runs; once dK retires, the stage's Q, dO, lse2 and
 * D are released. This is FlashAttention-4's order. Measured against the previous one (dV and dK
 * issued, dS stored while they ran, both waited for, then dQ issued and waited for, its staging
 * with the tensor cores idle): +5% on full and causal at 8K and 32K (80 rows), +3% on the
 * sliding window and 0..+3% on causal document (64 rows) (H200, 2026-12-04, ninth session; the
 * same order at 64 rows, then with dense masks, had measured 0.1-1.1% slower on 2026-12-01).
 * Issuing dV before the dP wait (P is all it needs) measured the same at 64 rows and spilled at
 * 80: not kept. Every opaque copy (reg_fence) keeps ptxas from hoisting loop-invariant addresses
 * into registers it would then spill; the ones after a wait tell it which registers the retired
 * products read and wrote.
 */
template <int D, int ST, int BM, bool F16>
__device__ __forceinline__ void step_grads(float *dk, float *dv, float *dq, uint32_t *pp, uint32_t *ps, uint32_t ka, uint32_t qa,
                                           uint32_t da, uint32_t dsaddr, float *stg, const DqStep &d, uint64_t *empty,
                                           const Me &me, const Sync<D, ST, BM> &sy)
{
  wgmma_fence();
  gemm_rs<D, BM, F16>(dv, pp, da);
  wgmma_commit();
  if constexpr (BM == 80) store_ds_t(ps, dsaddr, me);
  else store_ds<BM>(ps, dsaddr, me);
  fence_proxy_async();
  if constexpr (!DqSplit<D, BM>::own) named_sync(1, 256);
  else named_sync(2 + me.cw, 128);
  issue_dq<D, BM, F16>(dq, ka, dsaddr, me); /* its wgmma fence also orders ps for dK */
  gemm_rs<D, BM, F16>(dk, ps, qa);
  wgmma_commit();
  wgmma_wait<1>(); /* dV and dQ retired; dK runs */
#pragma unroll
  for (int t = 0; t < Layout<D, ST, BM>::DQN; t++) reg_fence(dq[t]);
#pragma unroll
  for (int t = 0; t < D / 2; t++) reg_fence(dv[t]);
#pragma unroll
  for (int t = 0; t < BM / 4; t++) reg_fence(pp[t]);
  /* the writer has read the last step's dQ block (the barrier's address from K's: OFF_K = 0);
     waited for as late as possible, just before its buffer is written */
  FMBWD_PROF_T(t0);
  mbar_wait_s(ka + Layout<D, ST, BM>::OFF_BAR + (5 + 2 * ST + me.cw) * 8, d.ph);
  if (me.wt == 0) FMBWD_PROF_ADD(PROF_C_DQE, t0);
  stage_dq<D, ST, BM>(dq, stg, d, me, sy);
  wgmma_wait<0>(); /* dK retired */
#pragma unroll
  for (int t = 0; t < D / 2; t++) reg_fence(dk[t]);
#pragma unroll
  for (int t = 0; t < BM / 4; t++) reg_fence(ps[t]);
  __syncwarp();
  if (me.lane == 0) mbar_arrive(empty); /* Q, dO, lse2, D of this stage are no longer read */
}

/* dK (times scale) and dV rows of this thread, straight to global (in dtype: 16-byte stores where
   dk and dv allow them, p.dkv_vec; or float): key rows j0 and j0 + 8, NC columns from col0 (D from
   0, or at d = 256 the consumer's 128). */
template <int NC, bool F16>
__device__ __forceinline__ void store_dkdv(const float *dk, const float *dv, int j0, int col0, int hkv, int b, const Me &me,
                                           const Params &p)
{
  constexpr int D = NC; /* the columns this thread's fragments cover */
  if (p.dkv_f32) {
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int j = j0 + 8 * h;
      if (j < p.Sk) {
        float *gk = (float *)p.dk + (size_t)b * p.sdk.sb + (size_t)j * p.sdk.ss + (size_t)hkv * p.sdk.sh + col0;
        float *gv = (float *)p.dv + (size_t)b * p.sdv.sb + (size_t)j * p.sdv.ss + (size_t)hkv * p.sdv.sh + col0;
#pragma unroll
        for (int k = 0; k < D / 8; k++) {
          *(float2 *)(gk + 8 * k + 2 * me.t4) = make_float2(dk[4 * k + 2 * h] * p.scale, dk[4 * k + 2 * h + 1] * p.scale);
          *(float2 *)(gv + 8 * k + 2 * me.t4) = make_float2(dv[4 * k + 2 * h], dv[4 * k + 2 * h + 1]);
        }
      }
    }
    return;
  }
  if (p.dkv_vec) {
    /* 16-byte stores: the quad's four lanes hold the four 32-bit words of each 8-column unit of a
       row (lane t4: columns 8k + 2 t4, + 1); a 4 x 4 transpose over the quad (two shuffle stages,
       on bit 1 and bit 0 of the lane and of the word) gives lane t4 the whole unit 4a + t4. The
       4-byte stores they replace (64 per thread) filled the store queue: about 10% of the
       consumers' stall samples on items of a few steps (ncu, share question, 2026-12-04).
       The 80-row kernel took them later: its 4-byte stores took about 9 thousand of an item's
       cycles (`bwd_bench itemprof`; 3.6 for these), 1.8% of a full item at 8K and 3.4% of a
       causal one; with them causal 8K ran 1.4-1.8% faster, the rest level (bwd_bench ab, H100,
       2026-12-08). The tenth session had measured this path 2.2-2.5% slower at 32K on an
       80-row step that has changed since. */
#pragma unroll
    for (int h = 0; h < 2; h++) {
      const int j = j0 + 8 * h;
#pragma unroll
      for (int x = 0; x < 2; x++) {
        const float *src = x ? dv : dk;
        const float sc = x ? 1.f : p.scale;
        uint32_t w[D / 8];
#pragma unroll
        for (int k = 0; k < D / 8; k++) w[k] = pack2<F16>(src[4 * k + 2 * h] * sc, src[4 * k + 2 * h + 1] * sc);
#pragma unroll
        for (int a = 0; a < D / 32; a++) {
          uint32_t *y = w + 4 * a;
#pragma unroll
          for (int bit = 2; bit >= 1; bit >>= 1) {
            const bool hi = (me.t4 & bit) != 0;
#pragma unroll
            for (int c0 = 0; c0 < 4; c0++) {
              if (c0 & bit) continue;
              /* words c0 and c0 | bit: this lane sends the one whose bit differs from its own */
              const uint32_t send = hi ? y[c0] : y[c0 | bit];
              const uint32_t got = __shfl_xor_sync(0xffffffffu, send, bit);
              if (hi) y[c0] = got;
              else y[c0 | bit] = got;
            }
          }
        }
        if (j < p.Sk) {
          const FMGpuStrides &sd = x ? p.sdv : p.sdk;
          char *g = (char *)(x ? p.dv : p.dk) + ((size_t)b * sd.sb + (size_t)j * sd.ss + (size_t)hkv * sd.sh + col0) * 2;
#pragma unroll
          for (int a = 0; a < D / 32; a++)
            *(uint4 *)(g + (8 * (4 * a + me.t4)) * 2) = make_uint4(w[4 * a], w[4 * a + 1], w[4 * a + 2], w[4 * a + 3]);
        }
      }
    }
    return;
  }
#pragma unroll
  for (int h = 0; h < 2; h++) {
    const int j = j0 + 8 * h;
    if (j < p.Sk) {
      char *gk = (char *)p.dk + ((size_t)b * p.sdk.sb + (size_t)j * p.sdk.ss + (size_t)hkv * p.sdk.sh + col0) * 2;
      char *gv = (char *)p.dv + ((size_t)b * p.sdv.sb + (size_t)j * p.sdv.ss + (size_t)hkv * p.sdv.sh + col0) * 2;
#pragma unroll
      for (int k = 0; k < D / 8; k++) {
        *(uint32_t *)(gk + (8 * k + 2 * me.t4) * 2) = pack2<F16>(dk[4 * k + 2 * h] * p.scale, dk[4 * k + 2 * h + 1] * p.scale);
        *(uint32_t *)(gv + (8 * k + 2 * me.t4) * 2) = pack2<F16>(dv[4 * k + 2 * h], dv[4 * k + 2 * h + 1]);
      }
    }
  }
}

/*
 * Consumer warpgroup (64 keys of each item): per item, dK and dV in registers over every query
 * head of the group and every visited query block; K/V released, then written once.
 */
template <int D, int ST, int BM, bool F16> __device__ __forceinline__ void consumer(unsigned char *smem, const Params &p)
{
  using L = Layout<D, ST, BM>;
  Sync<D, ST, BM> sy(smem);
  const int tid = threadIdx.x, lane = tid & 31;
  Me me;
  me.cw = __shfl_sync(0xffffffffu, (tid >> 7) - 1, 0); /* warp-uniform to ptxas: the descriptors stay in uniform registers */
  me.wt = tid & 127;
  me.w = me.wt >> 5;
  me.lane = lane;
  me.t4 = lane & 3;
  me.kr0 = me.cw * 64 + me.w * 16 + (lane >> 2);
  const uint32_t kaddr = smem_u32(smem + L::OFF_K), vaddr = smem_u32(smem + L::OFF_V);
  int4 *bnd_s = (int4 *)(smem + L::OFF_BND); /* BM = 64, 128 */
  const int4 *bnd = bnd_s;                   /* the head's bounds: bnd_s, or in global (BM = 80) */
  float dk[D / 2], dv[D / 2], s[BM / 2], dp[BM / 2], dq[L::DQN];
  uint32_t pp[BM / 4], ps[BM / 4];
  int i = 0, j = 0; /* i: the stage ring's position (end stages too); j: the steps (dQ blocks handed over) */
  FMBWD_PROF_T(tall);
  for (int n = 0;; n++) {
    FMBWD_PROF_T(tit);
    mbar_wait(sy.item_full, n & 1);
    if (me.wt == 0) FMBWD_PROF_ADD(PROF_C_ITEM, tit);
    if (sy.item[4 * (n & 1)] >= p.nitems) break;
    /* read once here: the producer may write this slot again (item n + 2) once K and V are
       released below, while the epilogue still stores this item's dK and dV */
    const int kb = sy.item[4 * (n & 1) + 1], hkv = sy.item[4 * (n & 1) + 2], b = sy.item[4 * (n & 1) + 3];
    /* the first head's bounds of the thread's two key columns, loaded before the wait for K and V
       (BM = 64, 128: staged at the item's first step of head 0) */
    int4 pre0 = make_int4(0, 0, 0, 0), pre1 = pre0;
    if constexpr (L::BND_SMEM) {
      if (me.t4 == 0) {
        const int4 *pk = p.packed + ((size_t)(b * p.mstride + hkv * p.G / p.hpm) * p.nblk + kb) * kBN;
        pre0 = pk[me.kr0];
        pre1 = pk[me.kr0 + 8];
      }
    }
#pragma unroll
    for (int t = 0; t < D / 2; t++) dk[t] = dv[t] = 0.f;
    FMBWD_PROF_T(tkv);
    mbar_wait(sy.kv_full, n & 1);
    if (me.wt == 0) {
      FMBWD_PROF_ADD(PROF_C_KV, tkv);
      FMBWD_PROF_ONE(PROF_ITEMS);
    }
#ifdef FMBWD_PROF
    int first = 1; /* the item's first stage not yet waited for */
#endif
    int gcur = -1, bh = 0; /* the head, and its (batch, query head) */
    for (;;) {
      i = __shfl_sync(0xffffffffu, i, 0); /* warp-uniform to ptxas (the exit below depends on a load) */
      const int st = i % ST;
      FMBWD_PROF_T(t0);
      mbar_wait(&sy.full[st], (i / ST) & 1);
      if (me.wt == 0) FMBWD_PROF_ADD(PROF_C_FULL, t0);
#ifdef FMBWD_PROF
      if (me.wt == 0 && first) FMBWD_PROF_ADD(PROF_C_FULL1, t0);
      first = 0;
#endif
      const int2 sd = ld_s2(smem_u32(smem + L::OFF_STEP + 8 * st));
      const int qb = sd.x, fl = sd.y;
      i++;
      if (fl == kStepEnd) { /* the item's end: give the stage back */
        __syncwarp();
        if (lane == 0) mbar_arrive(&sy.empty[st]);
        break;
      }
      const int part = fl & 1, g = BM == 128 ? (fl & ~kStepHead) >> 1 : fl >> 1;
      /* a new head: at 128 rows marked by the producer (gcur held across the step was spilled);
         the 64- and 80-row kernels keep the comparison their timings were measured with */
      if (BM == 128 ? (fl & kStepHead) != 0 : g != gcur) {
        /* this head's bounds of the thread's two key columns, staged per warp */
        const int hq = hkv * p.G + g, mh = b * p.mstride + hq / p.hpm;
        const int4 *pk = p.packed + ((size_t)mh * p.nblk + kb) * kBN;
        if constexpr (L::BND_SMEM) {
          __syncwarp(); /* the warp's reads of the previous head's bounds are done */
          if (me.t4 == 0) {
            bnd_s[me.kr0] = g == 0 ? pre0 : pk[me.kr0];
            bnd_s[me.kr0 + 8] = g == 0 ? pre1 : pk[me.kr0 + 8];
          }
          __syncwarp();
        } else bnd = pk;
        bh = b * p.Hq + hq;
        gcur = g;
      }
      uint32_t ls = L::XF ? smem_u32(smem + L::OFF_XT + st * L::XB) : smem_u32(smem + L::OFF_L + st * BM * 4) + 8 * me.t4;
      reg_fence(ls);
      uint32_t ka = kaddr, va = vaddr, qa = smem_u32(smem + L::OFF_Q + st * L::QB), da = smem_u32(smem + L::OFF_DO + st * L::QB);
      reg_fence(ka);
      reg_fence(va);
      reg_fence(qa);
      reg_fence(da);
      const uint32_t dd = L::XF ? smem_u32(smem + L::OFF_L) : ls + (L::OFF_DD - L::OFF_L); /* D rows, or kXF's A */
      step_scores<D, BM, F16, L::XA_LBO>(s, dp, pp, ps, ka, va, qa, da, ls, dd, part, bnd, qb * BM, kb * kBN + me.kr0, me, p);
      {
        DqStep d;
        d.tix = (bh * p.nqb + qb) * 4 + (DqSplit<D, BM>::own ? 0 : me.cw);
        d.arow = DqSplit<D, BM>::rows ? bh * p.Sqp + qb * BM + me.cw * 64
                                      : (bh * (D / 64) + (DqSplit<D, BM>::own ? 0 : me.cw)) * p.Sqp + qb * BM;
        d.turn = DqSplit<D, BM>::own ? 2 * kb + me.cw : kb;
        d.ph = (j & 1) ^ 1;
        step_grads<D, ST, BM, F16>(dk, dv, dq, pp, ps, ka, qa, da, smem_u32(smem + L::OFF_DS + (L::NDS > 1 ? (j & 1) : 0) * L::DSB),
                                   (float *)(smem + L::OFF_DQ + me.cw * L::DQB), d, &sy.empty[st], me, sy);
      }
      j++;
    }
    /* every product reading K and V has retired (each step ends with wait_group 0) */
    __syncwarp();
    if (lane == 0) mbar_arrive(sy.kv_empty);
    FMBWD_PROF_T(tep);
    store_dkdv<D, F16>(dk, dv, kb * kBN + me.kr0, 0, hkv, b, me, p);
    if (me.wt == 0) FMBWD_PROF_ADD(PROF_C_EPI, tep);
  }
  if (me.wt == 0) FMBWD_PROF_ADD(PROF_C_ALL, tall);
  stop_writer<D, ST, BM>(j, me, sy);
}

/*
 * d = 256 (Layout::W). A consumer warp group cannot hold dK and dV of its own 64 keys over 256
 * columns (128 + 128 registers a thread), so the two consumers split the head dimension instead of
 * the keys, as FlashAttention-3 does there: an item is 64 keys (half of a summaries' block, whose
 * summaries bound it), both consumers see all of them, and consumer cw holds dK and dV for columns
 * 128 cw.. (64 + 64 registers). Per 64-row step:
 *   dP^T = V dO^T and S^T = K Q^T over the consumer's 32 queries (m64n32, all 256 columns), dP
 *   first: it needs only dO, which the producer loads before Q (one stage: Q, dO, K and V of 256
 *   columns, the staging of two 128-column dQ blocks and P and dS take 210 KB);
 *   P^T and dS^T as at 64 rows, then stored (bf16) to shared memory, each consumer its 32 query
 *   columns; a barrier over both consumers publishes them (another, before the stores, waits
 *   until both have retired the last step's products that read them);
 *   dV += P^T dO and dK += dS^T Q over the consumer's 128 columns (SS, A K-major, B MN-major), then
 *   dQ = dS K over its 128 columns (SS, both MN-major); dO is released once dV retires, Q once dK
 *   does, and dQ (two 64-column planes) goes to the writer warp as at d = 128.
 * First stores are not offered here (FMGpuBwdFirstStore); the deterministic mode's turns go by
 * 64-key items (fmbwd_visitors, next_visitor), a consumer's two planes in one turn.
 */
/* acc[16] = A B^T over 256 columns: A = a 64-row K or V tile, B = 32 rows of a Q or dO tile (b:
   their first row), both K-major in chunks of 64 columns (64 x 128 bytes, 8 KB apart). */
template <bool F16> __device__ __forceinline__ void gemm_w_nt(float *acc, uint32_t a, uint32_t b)
{
  const uint64_t a0 = desc_join(desc_lo(a, 16), desc_hi(1024)), b0 = desc_join(desc_lo(b, 16), desc_hi(1024));
#pragma unroll
  for (int kk = 0; kk < 16; kk++)
    wgmma_ss<32, F16>(acc, desc_at(a0, (kk / 4) * 8192 + (kk % 4) * 32), desc_at(b0, (kk / 4) * 8192 + (kk % 4) * 32), kk > 0);
}
/* acc[64] += A B over 64 queries: A = P^T or dS^T (64 keys x 64 queries, K-major, a 128-byte
   row per key), B = 128 columns of a Q or dO tile (b: their first chunk; MN-major, the second
   chunk 8 KB further, LBO). */
template <bool F16> __device__ __forceinline__ void gemm_w_kv(float *acc, uint32_t a, uint32_t b)
{
  const uint64_t a0 = desc_join(desc_lo(a, 16), desc_hi(1024)), b0 = desc_join(desc_lo(b, 8192), desc_hi(1024));
#pragma unroll
  for (int u = 0; u < 4; u++) wgmma_ss_t01<128, F16>(acc, desc_at(a0, u * 32), desc_at(b0, u * 2048), 1);
}
/* acc[64] = dS K over 64 keys: A = dS read from the dS^T buffer (MN-major), B = 128 columns of the K
   tile (k: their first chunk; MN-major, the second 8 KB further). */
template <bool F16> __device__ __forceinline__ void gemm_w_dq(float *acc, uint32_t ds, uint32_t k)
{
  const uint64_t a0 = desc_join(desc_lo(ds, 8192), desc_hi(1024)), b0 = desc_join(desc_lo(k, 8192), desc_hi(1024));
#pragma unroll
  for (int t = 0; t < 4; t++) wgmma_ss_t11<128, F16>(acc, desc_at(a0, t * 2048), desc_at(b0, t * 2048), t > 0);
}

/* P^T or dS^T (packed: this thread's key rows kr0, kr0 + 8, its 32 query columns 32 cw + 8k + 2 t4)
   to the 64 x 64 buffer at buf: row = key, 16-byte unit u ^ (row & 7). */
__device__ __forceinline__ void store_w(const uint32_t *pk, uint32_t buf, const Me &me)
{
  uint32_t a = me.kr0 * 128 + me.t4 * 4;
  reg_fence(a);
  a += buf;
#pragma unroll
  for (int k = 0; k < 4; k++) {
    const uint32_t ak = a + ((((uint32_t)(4 * me.cw + k)) ^ (uint32_t)(me.kr0 & 7)) << 4);
    st_u32(ak, pk[2 * k]);
    st_u32(ak + 1024, pk[2 * k + 1]);
  }
}

template <bool F16> __device__ __forceinline__ void consumer_w(unsigned char *smem, const Params &p)
{
  constexpr int D = 256, ST = 1, BM = 64;
  using L = Layout<D, ST, BM>;
  Sync<D, ST, BM> sy(smem);
  const int tid = threadIdx.x, lane = tid & 31;
  Me me;
  me.cw = __shfl_sync(0xffffffffu, (tid >> 7) - 1, 0);
  me.wt = tid & 127;
  me.w = me.wt >> 5;
  me.lane = lane;
  me.t4 = lane & 3;
  me.kr0 = me.w * 16 + (lane >> 2); /* both consumers: all 64 keys */
  const uint32_t kaddr = smem_u32(smem + L::OFF_K), vaddr = smem_u32(smem + L::OFF_V);
  const uint32_t qaddr = smem_u32(smem + L::OFF_Q), daddr = smem_u32(smem + L::OFF_DO);
  const uint32_t paddr = smem_u32(smem + L::OFF_DS), dsaddr = paddr + L::DSB;
  float dk[64], dv[64], s[16], dp[16], dq[64];
  uint32_t pp[8], ps[8];
  int i = 0, j = 0;
  for (int n = 0;; n++) {
    mbar_wait(sy.item_full, n & 1);
    if (sy.item[4 * (n & 1)] >= p.nitems) break;
    const int kb = sy.item[4 * (n & 1) + 1], hkv = sy.item[4 * (n & 1) + 2], b = sy.item[4 * (n & 1) + 3]; /* once: see consumer */
#pragma unroll
    for (int t = 0; t < 64; t++) dk[t] = dv[t] = 0.f;
    mbar_wait(sy.kv_full, n & 1);
    int gcur = -1, bh = 0;
    const int4 *bnd = p.packed;
    for (;;) {
      i = __shfl_sync(0xffffffffu, i, 0);
      mbar_wait(&sy.full[0], i & 1);
      const int2 sd = ld_s2(smem_u32(smem + L::OFF_STEP));
      const int qb = sd.x, fl = sd.y, ph = i & 1;
      i++;
      if (fl == kStepEnd) {
        mbar_wait(sy.fullq, ph);
        __syncwarp();
        if (lane == 0) {
          mbar_arrive(&sy.empty[0]);
          mbar_arrive(sy.emptyq);
        }
        break;
      }
      const int part = fl & 1, g = fl >> 1;
      if (g != gcur) {
        const int hq = hkv * p.G + g, mh = b * p.mstride + hq / p.hpm;
        bnd = p.packed + ((size_t)mh * p.nblk + (kb >> 1)) * kBN + (kb & 1) * 64;
        bh = b * p.Hq + hq;
        gcur = g;
      }
      uint32_t ka = kaddr, va = vaddr, qa = qaddr, da = daddr;
      reg_fence(ka);
      reg_fence(va);
      reg_fence(qa);
      reg_fence(da);
#pragma unroll
      for (int t = 0; t < 16; t++) {
        s[t] = dp[t] = 0.f;
        reg_fence(s[t]); /* written before the fence: S is issued after the wait for Q, below it */
        reg_fence(dp[t]);
      }
      wgmma_fence();
      gemm_w_nt<F16>(dp, va, da + me.cw * 4096);
      wgmma_commit();
      mbar_wait(sy.fullq, ph);
      wgmma_fence(); /* after the wait's loop (else ptxas inserts its own arrive, C7519) */
      gemm_w_nt<F16>(s, ka, qa + me.cw * 4096);
      wgmma_commit();
      wgmma_wait<0>();
#pragma unroll
      for (int t = 0; t < 16; t++) {
        reg_fence(s[t]);
        reg_fence(dp[t]);
      }
      uint32_t ls = smem_u32(smem + L::OFF_L) + 128 * me.cw + 8 * me.t4;
      reg_fence(ls);
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const float2 l2 = ld_f2(ls + 32 * k);
        s[4 * k] = exp2f(fmaf(s[4 * k], p.c, -l2.x));
        s[4 * k + 1] = exp2f(fmaf(s[4 * k + 1], p.c, -l2.y));
        s[4 * k + 2] = exp2f(fmaf(s[4 * k + 2], p.c, -l2.x));
        s[4 * k + 3] = exp2f(fmaf(s[4 * k + 3], p.c, -l2.y));
      }
      if (part) { /* row bit masks of the thread's two key columns over the consumer's 32 queries */
        const int off = p.Sk - p.Sq, m0 = qb * BM + 32 * me.cw, j0 = kb * 64 + me.kr0;
        const uint32_t w0 = tile_rows_masked<uint32_t>(__ldg(bnd + me.kr0), m0, j0, p.causal, off) >> (2 * me.t4);
        const uint32_t w1 = tile_rows_masked<uint32_t>(__ldg(bnd + me.kr0 + 8), m0, j0 + 8, p.causal, off) >> (2 * me.t4);
#pragma unroll
        for (int k = 0; k < 4; k++)
#pragma unroll
          for (int e = 0; e < 2; e++) {
            if ((w0 >> (8 * k + e)) & 1u) s[4 * k + e] = 0.f;
            if ((w1 >> (8 * k + e)) & 1u) s[4 * k + 2 + e] = 0.f;
          }
      }
#pragma unroll
      for (int t = 0; t < 8; t++) pp[t] = pack2<F16>(s[2 * t], s[2 * t + 1]);
#pragma unroll
      for (int k = 0; k < 4; k++) {
        const float2 d2 = ld_f2(ls + (L::OFF_DD - L::OFF_L) + 32 * k);
        dp[4 * k] = s[4 * k] * (dp[4 * k] - d2.x);
        dp[4 * k + 1] = s[4 * k + 1] * (dp[4 * k + 1] - d2.y);
        dp[4 * k + 2] = s[4 * k + 2] * (dp[4 * k + 2] - d2.x);
        dp[4 * k + 3] = s[4 * k + 3] * (dp[4 * k + 3] - d2.y);
      }
#pragma unroll
      for (int t = 0; t < 8; t++) ps[t] = pack2<F16>(dp[2 * t], dp[2 * t + 1]);
      named_sync(1, 256); /* both consumers retired the last step's products, which read P^T and dS^T */
      store_w(pp, paddr, me);
      store_w(ps, dsaddr, me);
      fence_proxy_async();
      named_sync(2, 256); /* both halves of P^T and dS^T stored */
      uint32_t pa = paddr, sa = dsaddr;
      reg_fence(pa);
      reg_fence(sa);
      wgmma_fence();
      gemm_w_kv<F16>(dv, pa, da + me.cw * 16384);
      wgmma_commit();
      gemm_w_kv<F16>(dk, sa, qa + me.cw * 16384);
      wgmma_commit();
      gemm_w_dq<F16>(dq, sa, ka + me.cw * 16384);
      wgmma_commit();
      wgmma_wait<2>(); /* dV retired: dO and D are no longer read */
#pragma unroll
      for (int t = 0; t < 64; t++) reg_fence(dv[t]);
      __syncwarp();
      if (lane == 0) mbar_arrive(&sy.empty[0]);
      wgmma_wait<1>(); /* dK retired: Q and lse2 are no longer read */
#pragma unroll
      for (int t = 0; t < 64; t++) reg_fence(dk[t]);
      __syncwarp();
      if (lane == 0) mbar_arrive(sy.emptyq);
      wgmma_wait<0>();
#pragma unroll
      for (int t = 0; t < 64; t++) reg_fence(dq[t]);
      {
        DqStep d;
        d.tix = (bh * p.nqb + qb) * 4 + me.cw;
        d.arow = (bh * 4 + 2 * me.cw) * p.Sqp + qb * BM;
        d.turn = kb;
        d.ph = (j & 1) ^ 1;
        mbar_wait(&sy.dq_empty[me.cw], d.ph); /* the writer has read the last block from this buffer */
        stage_dq<D, ST, BM>(dq, (float *)(smem + L::OFF_DQ + me.cw * L::DQB), d, me, sy);
      }
      j++;
    }
    __syncwarp();
    if (lane == 0) mbar_arrive(sy.kv_empty);
    store_dkdv<128, F16>(dk, dv, kb * 64 + me.kr0, 128 * me.cw, hkv, b, me, p); /* the consumer's 128 columns */
  }
  stop_writer<D, ST, BM>(j, me, sy);
}

template <int D, int ST, int BM, bool F16>
__global__ void __launch_bounds__(kThreads, 1)
  bwd_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
             const __grid_constant__ CUtensorMap tmV, const __grid_constant__ CUtensorMap tmDO, const Params p)
{
  extern __shared__ unsigned char smem_raw[];
  unsigned char *smem = smem_raw + ((1024u - (smem_u32(smem_raw) & 1023u)) & 1023u); /* keeps the pointer shared for nvcc */
  if (threadIdx.x == 0) {
    Sync<D, ST, BM> sy(smem);
    mbar_init(sy.kv_full, 1);
    mbar_init(sy.kv_empty, 8); /* one arrival per consumer warp */
    mbar_init(sy.item_full, 1);
    for (int s = 0; s < ST; s++) {
      mbar_init(&sy.full[s], 1);
      mbar_init(&sy.empty[s], 8);
    }
    if constexpr (Layout<D, ST, BM>::W) {
      mbar_init(sy.fullq, 1);
      mbar_init(sy.emptyq, 8);
    }
    for (int c = 0; c < 2; c++) {
      mbar_init(&sy.dq_full[c], 4); /* one arrival per warp of the consumer */
      mbar_init(&sy.dq_empty[c], 1);
    }
    if constexpr (Layout<D, ST, BM>::XF) { /* kXF: A's core matrix (8 rows of [1, 1, 0, ...]) and the zeros after each stage's terms */
      using L = Layout<D, ST, BM>;
      for (int u = 0; u < 128; u += 4) st_u32(smem_u32(smem + L::OFF_L + u), u % 16 ? 0u : 0x3F803F80u);
      for (int s = 0; s < ST; s++)
        for (int u = 8 * BM; u < L::XB; u += 4) st_u32(smem_u32(smem + L::OFF_XT + s * L::XB + u), 0u);
      fence_proxy_async();
    }
    fence_barrier_init();
  }
  __syncthreads();
  if (threadIdx.x < 128) {
    setmaxnreg_dec<24>();
    if (threadIdx.x == 0) producer<D, ST, BM, F16>(smem, &tmQ, &tmK, &tmV, &tmDO, p);
    else if (threadIdx.x >= 32 && threadIdx.x < 96) dq_writer<D, ST, BM>(smem, p, (threadIdx.x >> 5) - 1);
  } else {
    setmaxnreg_inc<240>();
    if constexpr (Layout<D, ST, BM>::W) consumer_w<F16>(smem, p);
    else consumer<D, ST, BM, F16>(smem, p);
  }
}

/* kXF: the terms (bwd_sm90.cuh, xt) from the preprocess's lse2 and dsum rows, one thread per 8
   rows (64 bytes read, 64 written), launched before each piece whose step takes them (80 rows, d =
   64's 128) so that the other steps pay nothing. -lse2 / c and -dsum as two bf16 terms each (hi, then the
   rest), always finite so that the products that read them as zero-weighted neighbours add 0: a
   row with nothing visible (lse2 = +Inf) takes -3e38 (P = 0), a NaN lse2 +3e38 (P = +Inf, so its
   gradients are non-finite), a non-finite dsum 0 if NaN (then dO's row is NaN and so is dP's)
   or +-3e38. */
__global__ void __launch_bounds__(256) xt_terms(const float *lse2, const float *dsum, uint16_t *xt, size_t groups, float c)
{
  const size_t g = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
  if (g >= groups) return;
  const float4 *l4 = (const float4 *)(lse2 + 8 * g), *d4 = (const float4 *)(dsum + 8 * g);
  const float4 la = l4[0], lb = l4[1], da = d4[0], db = d4[1];
  const float l[8] = {la.x, la.y, la.z, la.w, lb.x, lb.y, lb.z, lb.w}, d[8] = {da.x, da.y, da.z, da.w, db.x, db.y, db.z, db.w};
  uint32_t w[4][4]; /* k-row (lse2 hi, lo, D hi, lo) x the row pairs */
#pragma unroll
  for (int r = 0; r < 8; r += 2) {
    uint32_t h[2][2], lo[2][2];
#pragma unroll
    for (int e = 0; e < 2; e++) {
      float t[2] = {l[r + e] != l[r + e] ? 3.0e38f : -l[r + e] / c, -d[r + e]};
#pragma unroll
      for (int k = 0; k < 2; k++) {
        if (!isfinite(t[k])) t[k] = t[k] != t[k] ? 0.f : copysignf(3.0e38f, t[k]);
        const __nv_bfloat16 hb = __float2bfloat16_rn(t[k]);
        h[k][e] = __bfloat16_as_ushort(hb);
        lo[k][e] = __bfloat16_as_ushort(__float2bfloat16_rn(t[k] - __bfloat162float(hb)));
      }
    }
#pragma unroll
    for (int k = 0; k < 2; k++) {
      w[2 * k][r / 2] = h[k][0] | h[k][1] << 16;
      w[2 * k + 1][r / 2] = lo[k][0] | lo[k][1] << 16;
    }
  }
  uint4 *o = (uint4 *)(xt + 32 * g);
#pragma unroll
  for (int k = 0; k < 4; k++) o[k] = make_uint4(w[k][0], w[k][1], w[k][2], w[k][3]);
}

/* ------------------------------ host side ------------------------------ */

/* 4-D map over a [B][S][H][D] tensor with element strides st: dims {D, H, S, B}, box {64, 1, rows, 1}. */
static cudaError_t make_map(CUtensorMap *map, const void *base, const FMGpuStrides *st, int B, int S, int H, int D, int rows,
                            int f16)
{
  PFN_cuTensorMapEncodeTiled_v12000 enc = fm_tma_encode_fn();
  if (!enc) return cudaErrorNotSupported;
  cuuint64_t dims[4] = {(cuuint64_t)D, (cuuint64_t)H, (cuuint64_t)S, (cuuint64_t)B};
  cuuint64_t strides[3] = {(cuuint64_t)st->sh * 2, (cuuint64_t)st->ss * 2, (cuuint64_t)st->sb * 2};
  cuuint32_t box[4] = {64, 1, (cuuint32_t)rows, 1};
  cuuint32_t estr[4] = {1, 1, 1, 1};
  CUresult r = enc(map, f16 ? CU_TENSOR_MAP_DATA_TYPE_FLOAT16 : CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, (void *)base, dims,
                   strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                   CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorInvalidValue;
}

/* Strides in elements that keep every row 16-byte aligned (for 2-byte elements: multiples of 8). */
static int strides_ok(const FMGpuStrides *s) { return s->sb % 8 == 0 && s->ss % 8 == 0 && s->sh % 8 == 0; }

template <int D, int ST, int BM, bool F16>
static cudaError_t launch(const FMGpuBwdParams *a, const FMBwdWork *w, cudaStream_t stream)
{
  using L = Layout<D, ST, BM>;
  CUtensorMap tq, tk, tv, tdo;
  cudaError_t e;
  if ((e = make_map(&tq, a->q, &a->sq, a->batch, a->seqlen_q, a->heads_q, D, BM, F16)) != cudaSuccess) return e;
  if ((e = make_map(&tdo, a->dout, &a->sdo, a->batch, a->seqlen_q, a->heads_q, D, BM, F16)) != cudaSuccess) return e;
  if ((e = make_map(&tk, a->k, &a->sk, a->batch, a->seqlen_k, a->heads_kv, D, L::KN, F16)) != cudaSuccess) return e;
  if ((e = make_map(&tv, a->v, &a->sv, a->batch, a->seqlen_k, a->heads_kv, D, L::KN, F16)) != cudaSuccess) return e;
  Params p;
  p.dk = a->dk;
  p.dv = a->dv;
  p.sdk = a->sdk;
  p.sdv = a->sdv;
  p.lse2 = w->lse2;
  p.dsum = w->dsum;
  p.xt = w->xt;
  p.dqacc = w->dqacc;
  p.packed = a->packed;
  p.sum = a->sum;
  p.Sq = a->seqlen_q;
  p.Sk = a->seqlen_k;
  p.Hq = a->heads_q;
  p.Hkv = a->heads_kv;
  p.mask_heads = a->mask_heads;
  p.causal = a->causal;
  p.nblk = a->nblk;
  p.nqb = (a->seqlen_q + BM - 1) / BM;
  p.Sqp = w->sqp;
  p.B = a->batch;
  p.nkb = L::W ? (a->seqlen_k + L::KN - 1) / L::KN : a->nblk;
  p.nitems = p.nkb * a->heads_kv * a->batch;
  p.counter = w->counter;
  p.dkv_f32 = a->dkv_f32;
  p.dkv_vec = !a->dkv_f32 && !(((uintptr_t)a->dk | (uintptr_t)a->dv) & 15) && strides_ok(&a->sdk) && strides_ok(&a->sdv);
  p.deterministic = a->deterministic != 0;
  p.first_store = w->first_store;
  if (p.first_store && (BM != 64 || p.deterministic || L::W)) return cudaErrorInvalidValue; /* FMGpuBwdFirstStore */
  p.turn = w->turn;
  p.G = a->heads_q / a->heads_kv;
  p.hpm = a->heads_q / a->mask_heads;
  p.mstride = a->mask_batch > 1 ? a->mask_heads : 0;
  p.scale = a->scale;
  p.c = a->scale * 1.4426950408889634f;
  static int attr_done[64], nsm[64];
  int dev = 0, sms = 0;
  if ((e = cudaGetDevice(&dev)) != cudaSuccess) return e;
  if (dev < 0 || dev >= 64 || !attr_done[dev]) {
    if ((e = cudaFuncSetAttribute(bwd_kernel<D, ST, BM, F16>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::BYTES)) != cudaSuccess)
      return e;
    if ((e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev)) != cudaSuccess) return e;
    if (dev >= 0 && dev < 64) attr_done[dev] = 1, nsm[dev] = sms;
  } else sms = nsm[dev];
  p.ilv = fmbwd_ilv(sms, p.nkb, p.nitems / p.nkb, p.causal); /* deterministic mode: decode_item */
  if (p.deterministic) {
    turn_init<D, BM><<<dim3((p.nqb + 255) / 256, p.Hq, p.B), 256, 0, stream>>>(p);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
  }
  if constexpr (L::XF) {
    const size_t groups = (size_t)p.B * p.Hq * p.Sqp / 8;
    xt_terms<<<(unsigned)((groups + 255) / 256), 256, 0, stream>>>(w->lse2, w->dsum, w->xt, groups, p.c);
    if ((e = cudaGetLastError()) != cudaSuccess) return e;
  }
  dim3 grid(p.nitems < sms ? p.nitems : sms);
  bwd_kernel<D, ST, BM, F16><<<grid, kThreads, L::BYTES, stream>>>(tq, tk, tv, tdo, p);
  return cudaGetLastError();
}

} /* namespace fmbwd */

#define FMBWD_ST128 2
#define FMBWD_ST64 3
#define FMBWD_ST64_128 2 /* d = 64 on 128-row steps */
#define FMBWD_ST256 1    /* d = 256: one stage (Layout::W) */


#ifdef FMBWD_PROF
/* Diagnostic build: the counters summed over the CTAs into sum[PROF_N], then zeroed. */
cudaError_t FMBwdSm90Prof(unsigned long long *sum) { return fm_prof_collect(fmbwd::fmbwd_prof, sum); }
#endif

int FMBwdSm90Supported(const FMGpuBwdParams *a)
{
  int dev, maxsm = 0, major = 0, minor = 0;
  size_t need;
  if (a->head_dim == 128)
    need = FMGpuBwdStepRows(a) == 80 ? fmbwd::Layout<128, FMBWD_ST128, 80>::BYTES : fmbwd::Layout<128, FMBWD_ST128, 64>::BYTES;
  else if (a->head_dim == 64)
    need = FMGpuBwdStepRows(a) == 128 ? fmbwd::Layout<64, FMBWD_ST64_128, 128>::BYTES : fmbwd::Layout<64, FMBWD_ST64, 64>::BYTES;
  else if (a->head_dim == 256) need = fmbwd::Layout<256, FMBWD_ST256, 64>::BYTES;
  else return 0;
  if (cudaGetDevice(&dev) != cudaSuccess) return 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess ||
      cudaDeviceGetAttribute(&maxsm, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev) != cudaSuccess)
    return 0;
  if (major != 9 || minor != 0 || need > (size_t)maxsm) return 0;
  if (a->nblk != (a->seqlen_k + FMBWD_BLOCK_N - 1) / FMBWD_BLOCK_N || 2ll * a->nblk * a->heads_kv * a->batch > (1ll << 30))
    return 0;
  /* the dQ writers' turn words and accumulator rows are indexed in 32 bits (the summaries are
     read through size_t offsets); 64-row blocks are the most of any step size */
  if (4ll * a->batch * a->heads_q * ((a->seqlen_q + FMBWD_BM - 1) / FMBWD_BM) >= (1ll << 31)) return 0;
  if ((long long)a->batch * a->heads_q * ((a->head_dim + 63) / 64) * fmbwd_sqp(a->seqlen_q) >= (1ll << 31)) return 0;
  /* TMA: 16-byte aligned bases and strides */
  if (((uintptr_t)a->q | (uintptr_t)a->k | (uintptr_t)a->v | (uintptr_t)a->dout) & 15) return 0;
  if (!fmbwd::strides_ok(&a->sq) || !fmbwd::strides_ok(&a->sk) || !fmbwd::strides_ok(&a->sv) || !fmbwd::strides_ok(&a->sdo)) return 0;
  if (((uintptr_t)a->dk | (uintptr_t)a->dv) & (a->dkv_f32 ? 7 : 3) || a->sdk.sh % 2 || a->sdk.ss % 2 || a->sdk.sb % 2 || a->sdv.sh % 2 ||
      a->sdv.ss % 2 || a->sdv.sb % 2)
    return 0;
  return 1;
}

cudaError_t FMBwdSm90Launch(const FMGpuBwdParams *a, const FMBwdWork *w, cudaStream_t s)
{
  if (a->head_dim == 256)
    return a->fp16 ? fmbwd::launch<256, FMBWD_ST256, 64, true>(a, w, s) : fmbwd::launch<256, FMBWD_ST256, 64, false>(a, w, s);
  if (a->head_dim == 128 && FMGpuBwdStepRows(a) == 80)
    return a->fp16 ? fmbwd::launch<128, FMBWD_ST128, 80, true>(a, w, s) : fmbwd::launch<128, FMBWD_ST128, 80, false>(a, w, s);
  if (a->head_dim == 128)
    return a->fp16 ? fmbwd::launch<128, FMBWD_ST128, 64, true>(a, w, s) : fmbwd::launch<128, FMBWD_ST128, 64, false>(a, w, s);
  if (FMGpuBwdStepRows(a) == 128)
    return a->fp16 ? fmbwd::launch<64, FMBWD_ST64_128, 128, true>(a, w, s) : fmbwd::launch<64, FMBWD_ST64_128, 128, false>(a, w, s);
  return a->fp16 ? fmbwd::launch<64, FMBWD_ST64, 64, true>(a, w, s) : fmbwd::launch<64, FMBWD_ST64, 64, false>(a, w, s);
}
