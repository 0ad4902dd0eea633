/*
 * ptx.cuh - inline-PTX helpers for the sm_90a kernels: mbarriers, TMA (bulk tensor and 1-D bulk
 * copies), wgmma fences/groups and descriptors, setmaxnreg, named barriers.
 * Device code only; include from .cu files built for sm_90a.
 */
#pragma once
#include <stdint.h>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace fmsm90 {

__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

/* A fire-and-forget 64-bit add to global memory (the diagnostic builds' counters, FMBWD_PROF and
   FMFWD_PROF). */
__device__ __forceinline__ void red_add_u64(unsigned long long *a, unsigned long long v)
{
  asm volatile("red.global.add.u64 [%0], %1;\n" ::"l"(a), "l"(v) : "memory");
}

/* ---------------- mbarriers ---------------- */
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count)
{
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count));
}
__device__ __forceinline__ void fence_barrier_init() { asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory"); }

/* Arrive once and add bytes to the transaction count of the current phase. */
__device__ __forceinline__ void mbar_expect_tx(uint64_t *bar, uint32_t bytes)
{
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
__device__ __forceinline__ uint32_t mbar_try_wait(uint64_t *bar, uint32_t parity)
{
  uint32_t ok;
  asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(ok)
               : "r"(smem_u32(bar)), "r"(parity)
               : "memory");
  return ok;
}
/* Whether the phase with the given parity has completed, without suspending the thread (try_wait
   may suspend it for a while before it fails). */
__device__ __forceinline__ uint32_t mbar_test_wait(uint64_t *bar, uint32_t parity)
{
  uint32_t ok;
  asm volatile("{\n.reg .pred p;\nmbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
               : "=r"(ok)
               : "r"(smem_u32(bar)), "r"(parity)
               : "memory");
  return ok;
}
/*
 * Wait until the phase with the given parity has completed. With FM_SM90_HANG_CHECK the wait is
 * bounded in time (about 2 s on the global timer, read every 1024 tries) and traps, so a
 * deadlock fails fast instead of eating a device call.
 */
#ifdef FM_SM90_HANG_CHECK
__device__ __forceinline__ unsigned long long global_ns()
{
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
#endif
__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity)
{
#ifdef FM_SM90_HANG_CHECK
  unsigned long long t0 = 0;
  for (unsigned spins = 1; !mbar_try_wait(bar, parity); spins++) {
    if (spins % 1024 == 0) { /* no printf here: a call would serialize wgmma */
      const unsigned long long t = global_ns();
      if (!t0) t0 = t;
      else if (t - t0 > 2000000000ull) __trap();
    }
  }
#else
  while (!mbar_try_wait(bar, parity)) {
  }
#endif
}
/* mbar_wait on a barrier given by its 32-bit shared-memory address (for loops where a hoisted
   64-bit pointer would cost a register). */
__device__ __forceinline__ void mbar_wait_s(uint32_t addr, uint32_t parity)
{
  uint32_t ok;
  do {
    asm volatile("{\n.reg .pred p;\nmbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\nselp.u32 %0, 1, 0, p;\n}\n"
                 : "=r"(ok)
                 : "r"(addr), "r"(parity)
                 : "memory");
  } while (!ok);
}

/* Order this thread's generic-proxy shared-memory accesses before later async-proxy ones (TMA,
   bulk copies, wgmma operands) that the barriers after it release. */
__device__ __forceinline__ void fence_proxy_async() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

/* Shared-memory accesses through 32-bit addresses (the compiler would otherwise hoist and spill
   64-bit generic addresses of these loop-invariant patterns). */
__device__ __forceinline__ void st_u32(uint32_t a, uint32_t v) { asm volatile("st.shared.u32 [%0], %1;\n" ::"r"(a), "r"(v) : "memory"); }
__device__ __forceinline__ void st_u32x4(uint32_t a, uint32_t x, uint32_t y, uint32_t z, uint32_t w)
{
  asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(x), "r"(y), "r"(z), "r"(w) : "memory");
}
__device__ __forceinline__ void st_f2(uint32_t a, float x, float y)
{
  asm volatile("st.shared.v2.f32 [%0], {%1, %2};\n" ::"r"(a), "f"(x), "f"(y) : "memory");
}
/* Four 8 x 8 b16 matrices stored transposed: register i of every thread holds its fragment of
   matrix i (row lane / 4, columns 2 (lane % 4), +1, as an mma accumulator pair packs it), and
   lane 8 i + r gives the address of row r of matrix i as stored, i.e. of column r of the
   fragment's matrix (16 contiguous bytes). */
__device__ __forceinline__ void stmatrix_x4_trans(uint32_t a, uint32_t r0, uint32_t r1, uint32_t r2, uint32_t r3)
{
  asm volatile("stmatrix.sync.aligned.m8n8.x4.trans.shared.b16 [%0], {%1, %2, %3, %4};\n" ::"r"(a), "r"(r0), "r"(r1), "r"(r2), "r"(r3)
               : "memory");
}
__device__ __forceinline__ float2 ld_f2(uint32_t a)
{
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];\n" : "=f"(v.x), "=f"(v.y) : "r"(a) : "memory");
  return v;
}

/* gridDim.x and the mask of the lanes below this one, read where used (volatile: not hoisted into
   a register held across a loop, which ptxas would spill under a tight setmaxnreg budget) */
__device__ __forceinline__ int nctaid_x()
{
  int v;
  asm volatile("mov.u32 %0, %%nctaid.x;\n" : "=r"(v));
  return v;
}
__device__ __forceinline__ unsigned lanemask_lt()
{
  unsigned v;
  asm volatile("mov.u32 %0, %%lanemask_lt;\n" : "=r"(v));
  return v;
}

__device__ __forceinline__ int ld_s32(uint32_t a)
{
  int v;
  asm volatile("ld.shared.s32 %0, [%1];\n" : "=r"(v) : "r"(a) : "memory");
  return v;
}
__device__ __forceinline__ int2 ld_s2(uint32_t a)
{
  int2 v;
  asm volatile("ld.shared.v2.s32 {%0, %1}, [%2];\n" : "=r"(v.x), "=r"(v.y) : "r"(a) : "memory");
  return v;
}

/* ---------------- TMA ---------------- */
__device__ __forceinline__ void tma_load_5d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1, int c2,
                                            int c3, int c4)
{
  asm volatile("cp.async.bulk.tensor.5d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5, %6}], [%7];\n" ::"r"(smem_u32(dst)),
               "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(c4), "r"(smem_u32(bar))
               : "memory");
}
__device__ __forceinline__ void tma_load_4d(void *dst, const CUtensorMap *map, uint64_t *bar, int c0, int c1, int c2,
                                            int c3)
{
  asm volatile("cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
               " [%0], [%1, {%2, %3, %4, %5}], [%6];\n" ::"r"(smem_u32(dst)),
               "l"((uint64_t)map), "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(bar))
               : "memory");
}
/* TMA store of a box from shared memory (the map's swizzle), in the thread's bulk group; then
   bulk_commit, and bulk_wait_read0 before the shared source is written again. */
__device__ __forceinline__ void tma_store_4d(const CUtensorMap *map, const void *src, int c0, int c1, int c2, int c3)
{
  asm volatile("cp.async.bulk.tensor.4d.global.shared::cta.tile.bulk_group [%0, {%1, %2, %3, %4}], [%5];\n" ::"l"((uint64_t)map),
               "r"(c0), "r"(c1), "r"(c2), "r"(c3), "r"(smem_u32(src))
               : "memory");
}
__device__ __forceinline__ void bulk_commit() { asm volatile("cp.async.bulk.commit_group;\n" ::: "memory"); }
__device__ __forceinline__ void bulk_wait_read0() { asm volatile("cp.async.bulk.wait_group.read 0;\n" ::: "memory"); }
/* 1-D bulk copy global -> shared (16-byte aligned, size a multiple of 16), counted on bar. */
__device__ __forceinline__ void bulk_load(void *dst, const void *src, uint32_t bytes, uint64_t *bar)
{
  asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];\n" ::"r"(
                   smem_u32(dst)),
               "l"((uint64_t)src), "r"(bytes), "r"(smem_u32(bar))
               : "memory");
}
__device__ __forceinline__ void prefetch_tmap(const CUtensorMap *map)
{
  asm volatile("prefetch.tensormap [%0];\n" ::"l"((uint64_t)map) : "memory");
}

/* ---------------- wgmma ---------------- */
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void wgmma_wait()
{
  asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Keep the compiler from moving accumulator reads/writes across wgmma issue/wait points. */
__device__ __forceinline__ void reg_fence(float &r) { asm volatile("" : "+f"(r)::"memory"); }
__device__ __forceinline__ void reg_fence(uint32_t &r) { asm volatile("" : "+r"(r)::"memory"); }

/*
 * Shared-memory matrix descriptor, 128-byte swizzle. addr: byte address in shared memory;
 * lbo/sbo in bytes. Tiles are 1024-byte aligned so the base-offset field stays 0.
 */
__device__ __forceinline__ uint64_t make_desc(uint32_t addr, uint32_t lbo, uint32_t sbo)
{
  uint64_t d = 0;
  d |= (uint64_t)((addr & 0x3FFFF) >> 4);
  d |= (uint64_t)((lbo >> 4) & 0x3FFF) << 16;
  d |= (uint64_t)((sbo >> 4) & 0x3FFF) << 32;
  d |= (uint64_t)1 << 62;
  return d;
}

/*
 * The same descriptor in two 32-bit words, for tiles walked by k-steps: desc_lo(addr, lbo) holds
 * the address and LBO fields, desc_hi(sbo) the SBO field and the swizzle mode. An offset of
 * off bytes within the tile (a multiple of 16) is desc_lo + off / 16: the address field (14
 * bits, shared memory < 256 KB) never carries into LBO, so a k-step costs one 32-bit add where
 * make_desc's masks, shifts and 64-bit ors cost about ten instructions.
 */
__device__ __forceinline__ uint32_t desc_lo(uint32_t addr, uint32_t lbo) { return ((addr & 0x3FFFF) >> 4) | (((lbo >> 4) & 0x3FFF) << 16); }
__host__ __device__ constexpr uint32_t desc_hi(uint32_t sbo) { return ((sbo >> 4) & 0x3FFF) | (1u << 30); }
/* desc_hi without swizzle (layout field 0, "interleave"): core matrices of 8 rows x 16 bytes,
   each 128 contiguous bytes; for an MN-major operand SBO is the stride between core matrices
   along M or N and LBO the stride between groups of 8 along K. */
__host__ __device__ constexpr uint32_t desc_hi_noswz(uint32_t sbo) { return (sbo >> 4) & 0x3FFF; }
__device__ __forceinline__ uint64_t desc_join(uint32_t lo, uint32_t hi)
{
  uint64_t d;
  asm("mov.b64 %0, {%1, %2};" : "=l"(d) : "r"(lo), "r"(hi));
  return d;
}

/* A descriptor off bytes (a multiple of 16, the address field not overflowing) past the one d
   describes: a 64-bit add of a constant, which ptxas issues as one uniform 64-bit add per k-step
   where rebuilding the pair from desc_lo + off and desc_hi costs an add and a move of each half.
   The backward uses it (neutral, -0.5..+0.6%); in the forward's S and O products it measured
   1.5-2.4% slower on the full mask (H200, 2026-12-04), so at d = 128 and 256 those keep
   desc_join per k-step; at d = 64 they take desc_at (kDescAt, mainloop.cuh). */
__device__ __forceinline__ uint64_t desc_at(uint64_t d, uint32_t off) { return d + (uint64_t)(off >> 4); }

/* ---------------- registers, named barriers ---------------- */
template <int N> __device__ __forceinline__ void setmaxnreg_inc() { asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;\n" ::"n"(N)); }
template <int N> __device__ __forceinline__ void setmaxnreg_dec() { asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;\n" ::"n"(N)); }
__device__ __forceinline__ void named_sync(int id, int n) { asm volatile("bar.sync %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }
__device__ __forceinline__ void named_arrive(int id, int n) { asm volatile("bar.arrive %0, %1;\n" ::"r"(id), "r"(n) : "memory"); }

} /* namespace fmsm90 */

/* pack2<F16>(lo, hi) - two floats rounded to one 32-bit pair of fp16 (F16) or bf16, lo in the low half. */
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
