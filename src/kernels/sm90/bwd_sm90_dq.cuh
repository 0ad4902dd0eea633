/*
 * bwd_sm90_dq.cuh - the Hopper backward's dQ path after the product (bwd_sm90.cu): a consumer's
 * staging of its dQ block, the dQ writer warps' bulk adds, and the deterministic mode's turn
 * words (their set-up kernel and the hand-over to the next visiting key block). Device code,
 * included by bwd_sm90.cu only, after bwd_sm90_base.cuh.
 */
#pragma once
#include "bwd_sm90_base.cuh"

namespace fmbwd {
using namespace fmsm90;

/* dq (fp32) into this consumer's staging buffer (column c of row r at fmbwd_swz(c, r), the
   accumulator's layout), then handed to the writer with the block's place (slot) and an arrival
   per warp. The caller waited (step_grads) until the writer had read the previous one. */
template <int D, int ST, int BM>
__device__ __forceinline__ void stage_dq(const float *dq, float *stg, const DqStep &d, const Me &me, const Sync<D, ST, BM> &sy)
{
  if constexpr (BM == 80) {
    /* dQ^T's fragments (gemm_dqt): adjacent registers are adjacent rows, so one 32-bit store
       each, row q = 8k + 2 t4 + e, column c = 16 w + lane / 4 + 8 h. For k's parity kp, h and e
       the swizzled address is one of four XORs of the thread's base (dqt_off) plus a constant
       (256 e + 2048 kp + 4096 (k / 2), the stores' immediates). The warp's 32 stores of one
       instruction cover 4 rows x 8 columns on 32 distinct banks. */
    uint32_t a = dqt_off<80>(me);
    reg_fence(a);
    a += smem_u32(stg);
    const uint32_t base[4] = {a, a ^ 32u, a ^ 64u, a ^ 96u};
#pragma unroll
    for (int k = 0; k < 10; k++)
#pragma unroll
      for (int h = 0; h < 2; h++)
#pragma unroll
        for (int e = 0; e < 2; e++)
          st_u32(base[(h ^ e) + 2 * (k & 1)] + 256 * e + 2048 * (k & 1) + (k >> 1) * 4096, __float_as_uint(dq[4 * k + 2 * h + e]));
  } else {
    /* fmbwd_swz flips only bits 3..4 of the column (fmbwd_swz_bits), so column 8k + 2 t4 of row r
       sits at byte 256 r + 8 t4 + 4 fmbwd_swz_bits(r) ^ 32 k; the staging buffer is 1024-byte
       aligned, so that is a(r) ^ (k << 5) with a(r) the buffer plus the rest: one LOP3 per store.
       d = 256: two planes of 64 columns (16 KB each), columns 64..127 of the consumer's half in the
       second. */
    uint32_t a0 = dqt_off<BM>(me);
    reg_fence(a0);
    a0 += smem_u32(stg);
    const uint32_t a1 = (a0 ^ 64u) + 2048u; /* row r0 + 8 (see dqt_off) */
#pragma unroll
    for (int k = 0; k < 8 * Layout<D, ST, BM>::DQP; k++) {
      st_f2((a0 ^ (uint32_t)((k & 7) << 5)) + (k >> 3) * 16384, dq[4 * k], dq[4 * k + 1]);
      st_f2((a1 ^ (uint32_t)((k & 7) << 5)) + (k >> 3) * 16384, dq[4 * k + 2], dq[4 * k + 3]);
    }
  }
  fence_proxy_async();
  if (me.wt == 0) { /* the slot through its shared-memory address (a generic volatile store was a slow ST.E.STRONG.SYS) */
    const uint32_t sl = smem_u32((const void *)(sy.dqs + 8 * me.cw));
    st_u32(sl, (uint32_t)d.tix);
    st_u32(sl + 4, (uint32_t)d.turn);
    st_u32(sl + 8, (uint32_t)d.arow);
    st_u32(sl + 28, 0u);
  }
  __syncwarp();
  if (me.lane == 0) mbar_arrive(&sy.dq_full[me.cw]);
}

/* The consumer's last hand-over: no more dQ blocks. */
template <int D, int ST, int BM> __device__ __forceinline__ void stop_writer(int i, const Me &me, const Sync<D, ST, BM> &sy)
{
  mbar_wait(&sy.dq_empty[me.cw], (i & 1) ^ 1);
  if (me.wt == 0) st_u32(smem_u32((const void *)(sy.dqs + 8 * me.cw)) + 28, 1u);
  __syncwarp();
  if (me.lane == 0) mbar_arrive(&sy.dq_full[me.cw]);
}

__device__ __forceinline__ int ld_acquire(const int *p)
{
  int v;
  asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ void st_release(int *p, int v) { asm volatile("st.release.gpu.global.s32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory"); }
__device__ __forceinline__ void fence_proxy_async_global() { asm volatile("fence.proxy.async.global;\n" ::: "memory"); }
/* Until the word at p (last read as seen) holds want, then the async proxy's later bulk operations
   ordered after the acquiring read that saw it. */
__device__ __forceinline__ void wait_word(const int *p, int want, int seen)
{
#ifdef FM_SM90_HANG_CHECK
  for (long long spins = 0; seen != want; spins++, seen = ld_acquire(p))
    if (spins > (1ll << 26)) __trap();
#else
  for (; seen != want; seen = ld_acquire(p)) __nanosleep(32);
#endif
  fence_proxy_async_global();
}
__device__ __forceinline__ int atom_cas_acquire(int *p, int cmp, int v)
{
  int old;
  asm volatile("atom.acquire.gpu.global.cas.b32 %0, [%1], %2, %3;\n" : "=r"(old) : "l"(p), "r"(cmp), "r"(v) : "memory");
  return old;
}

/* Deterministic mode: once this thread's bulk adds but the newest Newer are complete in global
   memory, the turn word at w handed to key block to. */
template <int Newer = 0> __device__ __forceinline__ void hand_on(int *w, int to)
{
  if (Newer == 0) bulk_wait0();
  else bulk_wait1();
  fence_proxy_async_global();
  st_release(w, to);
}
/* The writer's pending hand-over (slot words [4], [5] at sl: dq_writer), if any, done now. */
__device__ __forceinline__ void hand_on_pending(const Params &p, uint32_t sl)
{
  const int pend = ld_s32(sl + 16);
  if (pend >= 0) {
    hand_on(p.turn + pend, ld_s32(sl + 20));
    st_u32(sl + 16, 0xffffffffu);
  }
}

/* The first item (of KN keys: fmbwd_walk_init_item) below kb that visits query block qb (mask row
   mh), down to the first visitor *lo (turn_init); INT_MAX if none. One warp, 32 items per round;
   the test is fmbwd_walk_visits', written out for the writer's 24 registers. The first round's
   summary loads do not wait for *lo (a lane past the bottom reads item 0's and is then ignored),
   so the common case, a visitor among the next 32 items, costs one round trip to L2. */
template <int BM, int KN> __device__ __forceinline__ int next_visitor(const Params &p, int mh, int kb, int qb, const int *lo_p, int lane)
{
  const int32_t *sumh = p.sum + (size_t)mh * p.nblk * FMBWD_SUM_N;
  const int m0 = qb * BM, m1 = m0 + BM < p.Sq ? m0 + BM : p.Sq, lim = m1 - 1 + p.Sk - p.Sq;
  const int lo = *lo_p;
  for (int base = kb - 1; base >= 0; base -= 32) {
    const int k = base - lane;
    const int32_t *sm = sumh + (size_t)((k < 0 ? 0 : k) * KN / kBN) * FMBWD_SUM_N;
    const int lts = __ldg(sm + FMBWD_LTS_MAX), lte = __ldg(sm + FMBWD_LTE_MIN), uts = __ldg(sm + FMBWD_UTS_MAX),
              ute = __ldg(sm + FMBWD_UTE_MIN);
    const bool v = k >= lo && !(p.causal && k * KN > lim) && !(m0 >= lts && m1 <= lte) && !(m0 >= uts && m1 <= ute);
    const unsigned ball = __ballot_sync(0xffffffffu, v);
    if (ball) return base - (__ffs(ball) - 1);
    if (base - 31 <= lo) break;
  }
  return 0x7fffffff;
}

/*
 * dQ writer (warp 1 + cw of the producer warpgroup, for consumer cw): per step, once the
 * consumer handed over its staged block, one bulk reduce-add of it into the accumulator, and
 * the staging buffer back to the consumer as soon as it has been read. With first stores
 * (p.first_store: the accumulator was not zeroed) the block's flag decides: the writer that
 * takes it from 0 stores the block instead (a plain bulk copy), waits for the copy to complete
 * and sets the flag to 2; every other writer adds once it reads 2. In the deterministic
 * mode the add first waits for its turn: the turn word of (row block, half: 64 columns, or 64 rows
 * at BM = 128) holds the key block whose add comes next (key blocks in decreasing order; for
 * d = 64 on 64-row steps both consumers of a key block, 2 kb + cw, consumer 0 first); once the
 * add has completed, the writer passes the turn to the next lower key block that visits the row
 * block (normally after it issued its next block's add: the writer state below). Until
 * 2026-12-06 the writer waited for each add to complete before it took the next block, and was
 * then busy about 95% of the time in this mode (`bwd_bench detprof`). Items are then handed out in decreasing
 * key-block order within each row (decode_item, bwd_sm90_base.cuh; checked on the host by
 * `bwd_bench order`), so a turn is only ever awaited from a key block taken earlier: no deadlock.
 * Decreasing, because a key block walks its query blocks upwards from the first it sees, and
 * with causal-like masks a higher key block sees a row block earlier in its walk than a lower
 * one: the adds then come in the order the walks reach them (increasing order made every causal
 * key block wait for all those below it: 6x slower at 8K). Increasing order with downward walks
 * (every key block of a row then reaches a row block at the same step as the one below it, and
 * waits for that one's add to complete) measured 1.45x the default on causal 8K against this
 * order's 1.27x, 2.31x against 1.05x at d = 64 (H100, 2026-12-06; branch wip/bwd-det-increasing).
 */
/* Deterministic mode: summary number lane (0..3) of item kb - 1 of mask row mh, one of the four
   that the writer's next-visitor test reads (LTS max, LTE min, UTS max, UTE min). */
template <int KN> __device__ __forceinline__ int item_below_sum(const Params &p, int mh, int kb, int lane)
{
  return __ldg(p.sum + ((size_t)mh * p.nblk + (size_t)(kb - 1) * KN / kBN) * FMBWD_SUM_N + 1 + (lane & 1) + 4 * (lane >> 1));
}

template <int D, int ST, int BM> __device__ __forceinline__ void dq_writer(unsigned char *smem, const Params &p, int cw)
{
  using L = Layout<D, ST, BM>;
  Sync<D, ST, BM> sy(smem);
  const int lane = threadIdx.x & 31;
  const uint32_t sl = smem_u32((const void *)(sy.dqs + 8 * cw));
  const float *stg = (const float *)(smem + L::OFF_DQ + cw * L::DQB);
  /* The deterministic mode's writer state, in the slot's own words (24 registers):
     - [4] the turn word whose add was issued but not yet handed on (-1: none), [5] the key block
       it goes to. The hand-over waits for the add to complete; it is put off until the next
       block's add has been issued (the wait then overlaps that add's read), or done at once when
       there is nothing else to do: before waiting for the next block or for a turn, so that a
       writer never waits while holding a turn. Consumer 0's hand-overs to consumer 1 of the same
       key block (d = 64 on 64-row steps) are not put off.
     - [3], [6] the item kb and its mask row whose next item down (kb - 1) is cached, at
       Layout::OFF_WX (8 ints per writer): [0..3] the four summary numbers that
       fmbwd_walk_visits tests, [4] its causal limit. The next visitor
       is most often kb - 1; the scan of global memory (next_visitor) runs only when it is not. */
  constexpr uint32_t wx = L::OFF_WX - L::OFF_ITEM - 64; /* from sl: this writer's 8 ints at OFF_WX */
  if (lane == 0) {
    st_u32(sl + 12, 0xffffffffu);
    st_u32(sl + 16, 0xffffffffu);
    st_u32(sl + 24, 0xffffffffu);
  }
  for (int i = 0;; i++) {
    FMBWD_PROF_T(t0);
    /* not try_wait: it may suspend before failing */
    if (lane == 0 && p.deterministic && ld_s32(sl + 16) >= 0 && !mbar_test_wait(&sy.dq_full[cw], i & 1)) hand_on_pending(p, sl);
    mbar_wait(&sy.dq_full[cw], i & 1);
    if (lane == 0) FMBWD_PROF_ADD(PROF_W_IDLE, t0);
    if (ld_s32(sl + 28)) break;
    const int tix = ld_s32(sl), mine = ld_s32(sl + 4), arow = ld_s32(sl + 8);
    __syncwarp(); /* every lane has read the slot: lane 0 may hand it back */
    const int blk = tix >> 2; /* (batch, query head, query block); tix < 2^31 (FMBwdSm90Supported) */
    const size_t off = (size_t)arow * 64;
    int stored = 0;
    const bool scan = p.deterministic && (!DqSplit<D, BM>::own || cw == 1); /* this writer finds the next visitor */
    if (lane == 0) {
      /* first stores: the block's flag (the turn word, cleared by the preprocess) is taken by the
         first writer of the piece, which stores its partial where the others add theirs. Read
         first: once the block is stored (every visit but the first) one load, not a CAS and a
         load, stands between the handed-over block and its add. Deterministic: the block's turn. */
      int *word = p.turn + tix;
      if (p.first_store) {
        const int f = ld_acquire(word);
        if (f != 2 && atom_cas_acquire(word, 0, 1) == 0) {
#pragma unroll
          for (int pl = 0; pl < L::DQP; pl++) bulk_store(p.dqacc + off + (size_t)pl * p.Sqp * 64, stg + pl * 4096, L::DQB / L::DQP);
          bulk_commit();
          bulk_wait_read0();
          mbar_arrive(&sy.dq_empty[cw]);
          bulk_wait0(); /* the store is complete in global memory */
          fence_proxy_async_global();
          st_release(word, 2);
          stored = 1;
        } else wait_word(word, 2, f);
      } else if (p.deterministic) {
        FMBWD_PROF_T(t1);
#ifndef FMBWD_DET_NOWAIT /* diagnostic build: the deterministic mode's every cost but its waits (not deterministic) */
        const int seen = ld_acquire(word);
        if (seen != mine) hand_on_pending(p, sl);
        wait_word(word, mine, seen);
#endif
        FMBWD_PROF_ADD(PROF_W_TURN, t1);
      }
      if (!stored) {
#pragma unroll
        for (int pl = 0; pl < L::DQP; pl++) /* d = 256: the consumer's two planes, Sqp rows apart */
          bulk_reduce_add(p.dqacc + off + (size_t)pl * p.Sqp * 64, stg + pl * 4096, L::DQB / L::DQP);
        bulk_commit();
      }
    }
    FMBWD_PROF_T(t2);
    int next = mine + 1; /* deterministic: the key block whose add comes next (scanned while the add reads) */
    if (scan) {
      const int qb = blk % p.nqb, bh = blk / p.nqb, hq = bh % p.Hq, b = bh / p.Hq;
      const int mh = b * p.mstride + hq / p.hpm, kb = DqSplit<D, BM>::own ? mine >> 1 : mine; /* the block's mask row and item */
      FMBWD_PROF_T(t4);
      if (__any_sync(0xffffffffu, mh != ld_s32(sl + 12) || kb != ld_s32(sl + 24))) { /* a new item: item kb - 1's numbers */
        if (lane == 0) {
          st_u32(sl + 12, (uint32_t)mh);
          st_u32(sl + 24, (uint32_t)kb);
        }
        if (kb >= 1 && lane < 4)
          st_u32(sl + wx + 4 * lane, (uint32_t)item_below_sum<L::KN>(p, mh, kb, lane));
        if (lane == 4) /* causal: the item's first key lies right of the row block's last row's diagonal when m1 is below this */
          st_u32(sl + wx + 16, (uint32_t)(p.causal ? (kb - 1) * L::KN + 1 + p.Sq - p.Sk : INT_MIN));
        __syncwarp();
      }
      /* lanes 0..3: the row block lies inside the interval's start (0, 2) or end (1, 3); lane 4: the causal skip */
      const int m0 = qb * BM, m1 = m0 + BM < p.Sq ? m0 + BM : p.Sq, c_v = lane < 5 ? ld_s32(sl + wx + 4 * lane) : 0;
      const unsigned in = __ballot_sync(0xffffffffu, lane < 5 && (lane == 4 ? m1 < c_v : lane & 1 ? m1 <= c_v : m0 >= c_v));
      if (kb >= 1 && (in & 3) != 3 && (in & 12) != 12 && !(in & 16)) next = kb - 1;
      else next = next_visitor<BM, L::KN>(p, mh, kb, qb, p.turn + (tix & ~3) + 2, lane);
      if (lane == 0) FMBWD_PROF_ADD(PROF_W_SCAN, t4);
      if (DqSplit<D, BM>::own && next != 0x7fffffff) next *= 2;
    }
    if (lane == 0) {
      /* The buffer goes back here, after the scan, which so runs while the add reads it. Handed
         back right after the add's commit (and a new item's summary loads issued before the turn
         wait), the scan ran after the read instead, on the turn chain: the deterministic mode
         13-25% slower (bwd_bench det, H100, 2026-12-08), though the consumers got their buffer
         sooner. */
      if (!stored) {
        bulk_wait_read0();
        mbar_arrive(&sy.dq_empty[cw]); /* the slot was read above, before the arrival */
      }
      FMBWD_PROF_ADD(PROF_W_READ, t2);
      FMBWD_PROF_ONE(PROF_BLOCKS);
      FMBWD_PROF_T(t3);
      if (p.deterministic) {
        const int pend = ld_s32(sl + 16);
        if (pend >= 0) hand_on<1>(p.turn + pend, ld_s32(sl + 20)); /* the previous block's add, issued before this one's */
        if (!(DqSplit<D, BM>::own && cw == 0)) {
          st_u32(sl + 16, (uint32_t)tix);
          st_u32(sl + 20, (uint32_t)next);
        } else {
          hand_on(p.turn + tix, next);
          st_u32(sl + 16, 0xffffffffu);
        }
      }
      FMBWD_PROF_ADD(PROF_W_PASS, t3);
    }
    __syncwarp();
  }
  if (lane == 0) {
    hand_on_pending(p, sl); /* none but in the deterministic mode */
    bulk_wait0();
  }
}

/* Deterministic mode: per (query block, query head, batch) the last and first key blocks that
   visit it; the turns of both halves start at the last (2 x last for d = 64 on 64-row steps: its
   consumer 0), and the writers' scans stop at the first. */
template <int D, int BM>
__global__ void __launch_bounds__(256) turn_init(const Params p)
{
  const int qb = blockIdx.x * 256 + threadIdx.x, hq = blockIdx.y, b = blockIdx.z;
  if (qb >= p.nqb) return;
  const int32_t *sumh = p.sum + (size_t)(b * p.mstride + hq / p.hpm) * p.nblk * FMBWD_SUM_N;
  int first, last;
  fmbwd_visitors<BM, fmbwd_item_keys(D)>(sumh, p.nkb, qb, p.Sq, p.Sk, p.causal, &first, &last, NULL);
  int *t = p.turn + (((size_t)b * p.Hq + hq) * p.nqb + qb) * 4;
  if (last < 0) last = 0x7fffffff; /* nobody visits */
  t[0] = DqSplit<D, BM>::own && last != 0x7fffffff ? 2 * last : last;
  t[1] = last;
  t[2] = first;
  t[3] = 0;
}

} /* namespace fmbwd */
