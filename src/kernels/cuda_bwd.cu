/*
 * cuda_bwd.cu - the GPU backward's entry point (fmbwd.h): argument checks, the workspace, the
 * preprocess (D = rowsum(dO o O), log2 LSE) and postprocess (dQ's fp32 accumulator to dtype)
 * kernels around the Hopper main kernel (sm90/bwd_sm90.cu), and a plain correct SIMT fallback
 * (two passes: dK/dV per key, dQ per query row) for other head dims and GPUs.
 * MPI-free: plain CUDA runtime calls; every launch is asynchronous on the caller's stream.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include <stdint.h>
#include <type_traits>
#include "sm90/bwd_sm90.cuh"

namespace {

template <typename T> __device__ __forceinline__ float ld(const T *p);
template <> __device__ __forceinline__ float ld<__nv_bfloat16>(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
template <> __device__ __forceinline__ float ld<__half>(const __half *p) { return __half2float(*p); }
template <typename T> __device__ __forceinline__ T cvt(float x);
template <> __device__ __forceinline__ __nv_bfloat16 cvt<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half cvt<__half>(float x) { return __float2half_rn(x); }

__device__ __forceinline__ size_t at(const FMGpuStrides &s, int b, int i, int h)
{
  return (size_t)b * s.sb + (size_t)i * s.ss + (size_t)h * s.sh;
}

__device__ __forceinline__ float warp_sum(float x)
{
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffffu, x, o);
  return x;
}

/* One warp per (padded) query row: dsum = rowsum(dO o O), lse2 = lse log2(e), +inf where the row
   has nothing visible (lse = -inf) or is padding, and the row of dQ's accumulator zeroed (one
   pass over the rows instead of a separate memset of the accumulator), or, with first stores
   (flags given), the first row of each 64-row block clears the block's flags instead. A NaN lse (a non-finite
   forward) stays NaN, so P = dS = NaN on the row's visible keys; its dsum is 0 there, so that the
   keys the mask hides from the row (P = 0) get dS = 0, not 0 x NaN. E > 0: each lane reads E
   consecutive elements of O and dO with one vector load (D = 32 E, rows 2E-byte aligned); E = 0:
   element by element. */
template <typename T, int E>
__global__ void __launch_bounds__(256) bwd_pre(const T *o, FMGpuStrides so, const T *dout, FMGpuStrides sdo, const float *lse,
                                               float *lse2, float *dsum, float *dqacc, int *flags, int nqb, int Sq, int Hq, int D, int Sqp)
{
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int i = blockIdx.x * 8 + warp, h = blockIdx.y, b = blockIdx.z;
  if (i >= Sqp) return;
  float acc = 0.f;
  if (i < Sq) {
    const T *orow = o + at(so, b, i, h), *drow = dout + at(sdo, b, i, h);
    if constexpr (E > 0) {
      using V = typename std::conditional<E == 8, uint4, typename std::conditional<E == 4, uint2, uint32_t>::type>::type;
      union {
        V v;
        T t[E];
      } a, c;
      a.v = *(const V *)(orow + E * lane);
      c.v = *(const V *)(drow + E * lane);
#pragma unroll
      for (int e = 0; e < E; e++) acc += ld(&a.t[e]) * ld(&c.t[e]);
    } else
      for (int d = lane; d < D; d += 32) acc += ld(orow + d) * ld(drow + d);
  }
  acc = warp_sum(acc);
  const int dp64 = (D + 63) / 64;
  if (flags) {
    if ((i & 63) == 0 && lane < 4 && (i >> 6) < nqb) flags[(((size_t)b * Hq + h) * nqb + (i >> 6)) * 4 + lane] = 0;
  } else
    for (int ch = 0; ch < dp64; ch++)
      *(float2 *)(dqacc + ((((size_t)b * Hq + h) * dp64 + ch) * Sqp + i) * 64 + 2 * lane) = make_float2(0.f, 0.f);
  if (lane == 0) {
    const size_t r = ((size_t)b * Hq + h) * Sqp + i;
    const float l = i < Sq ? lse[((size_t)b * Hq + h) * Sq + i] : -INFINITY;
    dsum[r] = l != l ? 0.f : acc;
    lse2[r] = l == -INFINITY ? INFINITY : l * 1.4426950408889634f;
  }
}

/* The preprocess for dtype T: E = D / 32 elements per lane by one load where D and the rows of o
   and dout allow it (D = 64, 128, 256), else element by element. */
template <typename T> static void launch_pre(const FMGpuBwdParams *p, const FMBwdWork &w, cudaStream_t st)
{
  const dim3 grid((w.sqp + 7) / 8, p->heads_q, p->batch);
  const T *o = (const T *)p->o, *dout = (const T *)p->dout;
  const int E = p->head_dim / 32;
  auto rows_ok = [&](const void *ptr, const FMGpuStrides &s) {
    return !((uintptr_t)ptr % (2 * E)) && s.sb % E == 0 && s.ss % E == 0 && s.sh % E == 0;
  };
  const int vec = p->head_dim % 32 == 0 && (E == 2 || E == 4 || E == 8) && rows_ok(o, p->so) && rows_ok(dout, p->sdo) ? E : 0;
  int *flags = w.first_store ? w.turn : NULL;
#define FMBWD_PRE(e) \
  bwd_pre<T, e><<<grid, 256, 0, st>>>(o, p->so, dout, p->sdo, p->lse, w.lse2, w.dsum, w.dqacc, flags, w.nqb, p->seqlen_q, p->heads_q, \
                                      p->head_dim, w.sqp)
  if (vec == 2) FMBWD_PRE(2);
  else if (vec == 4) FMBWD_PRE(4);
  else if (vec == 8) FMBWD_PRE(8);
  else FMBWD_PRE(0);
#undef FMBWD_PRE
}

/* dq = dqacc * scale, 8 columns per thread, from the plane-ordered swizzled accumulator (bwd_sm90.cuh);
   with first stores (flags given), 0 where no key block visited the row's 64-row block. */
template <typename T>
__global__ void __launch_bounds__(256) bwd_post(const float *dqacc, const int *flags, int nqb, T *dq, FMGpuStrides sdq, int B,
                                                int Sq, int Hq, int D, int Sqp, float scale, int vec)
{
  const size_t n = (size_t)B * Sq * Hq * (D / 8), dp64 = (D + 63) / 64;
  for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
    const int d8 = (int)(idx % (D / 8));
    size_t rest = idx / (D / 8);
    const int h = (int)(rest % Hq);
    rest /= Hq;
    const int i = (int)(rest % Sq), b = (int)(rest / Sq);
    const int c = d8 * 8, ch = c / 64, cc = c % 64;
    const float *src = dqacc + ((((size_t)b * Hq + h) * dp64 + ch) * Sqp + i) * 64 + fmbwd_swz(cc, i);
    float4 x = make_float4(0.f, 0.f, 0.f, 0.f), y = x;
    if (!flags || flags[(((size_t)b * Hq + h) * nqb + i / 64) * 4 + ch]) {
      x = *(const float4 *)src;
      y = *(const float4 *)(src + 4);
    }
    T out[8] = {cvt<T>(x.x * scale), cvt<T>(x.y * scale), cvt<T>(x.z * scale), cvt<T>(x.w * scale),
                cvt<T>(y.x * scale), cvt<T>(y.y * scale), cvt<T>(y.z * scale), cvt<T>(y.w * scale)};
    T *dst = dq + at(sdq, b, i, h) + c;
    if (vec) *(uint4 *)dst = *(const uint4 *)out;
    else
      for (int t = 0; t < 8; t++) dst[t] = out[t];
  }
}

struct FbArgs {
  const void *q, *k, *v, *dout;
  float *dqacc; /* the plane-ordered accumulator (bwd_sm90.cuh): pass 2 adds into it */
  void *dk, *dv;
  FMGpuStrides sq, sk, sv, sdo, sdq, sdk, sdv;
  const float *lse2, *dsum;
  const int4 *packed;
  const int32_t *sum;
  int Sq, Sk, Hq, Hkv, D, mask_heads, causal, nblk, Sqp;
  int mstride; /* mask rows per sample: mask_heads when mask_batch > 1, else 0 */
  int dkv_f32;
  float scale, c;
};

/* Fallback pass 1: one warp per (key j, kv head, batch); dK, dV summed over the group's heads. */
template <typename T, int DPL> __global__ void __launch_bounds__(128, 4) bwd_fb_dkdv(const FbArgs a)
{
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int j = blockIdx.x * 4 + warp, hkv = blockIdx.y, b = blockIdx.z;
  if (j >= a.Sk) return;
  const int G = a.Hq / a.Hkv, hpm = a.Hq / a.mask_heads, kb = j / FMBWD_BLOCK_N, off = a.Sk - a.Sq;
  const T *kr = (const T *)a.k + at(a.sk, b, j, hkv), *vr = (const T *)a.v + at(a.sv, b, j, hkv);
  float kf[DPL], vf[DPL], dk[DPL], dv[DPL];
#pragma unroll
  for (int t = 0; t < DPL; t++) {
    const int d = lane + 32 * t;
    kf[t] = d < a.D ? ld(kr + d) : 0.f;
    vf[t] = d < a.D ? ld(vr + d) : 0.f;
    dk[t] = dv[t] = 0.f;
  }
  for (int g = 0; g < G; g++) {
    const int hq = hkv * G + g, mh = b * a.mstride + hq / hpm;
    FMBwdWalk w;
    fmbwd_walk_init(&w, a.sum + (size_t)mh * a.nblk * FMBWD_SUM_N, kb, a.Sq, a.Sk, a.causal);
    const int4 bj = a.packed[(size_t)mh * a.nblk * FMBWD_BLOCK_N + j];
    const size_t lrow = ((size_t)b * a.Hq + hq) * a.Sqp;
    int part;
    for (int qb = fmbwd_walk_next(&w, 0, &part); qb < w.nqb; qb = fmbwd_walk_next(&w, qb + 1, &part)) {
      const int i1 = (qb + 1) * FMBWD_BM < a.Sq ? (qb + 1) * FMBWD_BM : a.Sq;
      for (int i = qb * FMBWD_BM; i < i1; i++) {
        if (part && fmbwd_masked(bj, i, j, a.causal, off)) continue;
        const float l2 = a.lse2[lrow + i];
        if (l2 == INFINITY) continue;
        const T *qr = (const T *)a.q + at(a.sq, b, i, hq), *dr = (const T *)a.dout + at(a.sdo, b, i, hq);
        float qf[DPL], df[DPL], s = 0.f, dp = 0.f;
#pragma unroll
        for (int t = 0; t < DPL; t++) {
          const int d = lane + 32 * t;
          qf[t] = d < a.D ? ld(qr + d) : 0.f;
          df[t] = d < a.D ? ld(dr + d) : 0.f;
          s += qf[t] * kf[t];
          dp += df[t] * vf[t];
        }
        s = warp_sum(s);
        dp = warp_sum(dp);
        const float pij = exp2f(fmaf(s, a.c, -l2)), ds = pij * (dp - a.dsum[lrow + i]);
#pragma unroll
        for (int t = 0; t < DPL; t++) {
          dv[t] += pij * df[t];
          dk[t] += ds * qf[t];
        }
      }
    }
  }
  if (a.dkv_f32) {
    float *dkr = (float *)a.dk + at(a.sdk, b, j, hkv), *dvr = (float *)a.dv + at(a.sdv, b, j, hkv);
#pragma unroll
    for (int t = 0; t < DPL; t++) {
      const int d = lane + 32 * t;
      if (d < a.D) {
        dkr[d] = dk[t] * a.scale;
        dvr[d] = dv[t];
      }
    }
    return;
  }
  T *dkr = (T *)a.dk + at(a.sdk, b, j, hkv), *dvr = (T *)a.dv + at(a.sdv, b, j, hkv);
#pragma unroll
  for (int t = 0; t < DPL; t++) {
    const int d = lane + 32 * t;
    if (d < a.D) {
      dkr[d] = cvt<T>(dk[t] * a.scale);
      dvr[d] = cvt<T>(dv[t]);
    }
  }
}

/* Fallback pass 2: one warp per (query row, query head, batch); dQ over the visible keys, added
   (unscaled, the postprocess scales) into the row's place in the plane-ordered accumulator. */
template <typename T, int DPL> __global__ void __launch_bounds__(128, 4) bwd_fb_dq(const FbArgs a)
{
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int i = blockIdx.x * 4 + warp, hq = blockIdx.y, b = blockIdx.z;
  if (i >= a.Sq) return;
  const int hkv = hq / (a.Hq / a.Hkv), mh = b * a.mstride + hq / (a.Hq / a.mask_heads), off = a.Sk - a.Sq, qb = i / FMBWD_BM;
  const size_t lrow = ((size_t)b * a.Hq + hq) * a.Sqp;
  const float l2 = a.lse2[lrow + i], di = a.dsum[lrow + i];
  const T *qr = (const T *)a.q + at(a.sq, b, i, hq), *dr = (const T *)a.dout + at(a.sdo, b, i, hq);
  float qf[DPL], df[DPL], dq[DPL];
#pragma unroll
  for (int t = 0; t < DPL; t++) {
    const int d = lane + 32 * t;
    qf[t] = d < a.D ? ld(qr + d) : 0.f;
    df[t] = d < a.D ? ld(dr + d) : 0.f;
    dq[t] = 0.f;
  }
  if (l2 != INFINITY) {
    for (int kb = 0; kb < a.nblk; kb++) {
      FMBwdWalk w;
      int part;
      fmbwd_walk_init(&w, a.sum + (size_t)mh * a.nblk * FMBWD_SUM_N, kb, a.Sq, a.Sk, a.causal);
      if (fmbwd_walk_next(&w, qb, &part) != qb) continue;
      const int j1 = w.c1;
      for (int j = w.c0; j < j1; j++) {
        if (part && fmbwd_masked(a.packed[(size_t)mh * a.nblk * FMBWD_BLOCK_N + j], i, j, a.causal, off)) continue;
        const T *kr = (const T *)a.k + at(a.sk, b, j, hkv), *vr = (const T *)a.v + at(a.sv, b, j, hkv);
        float kf[DPL], s = 0.f, dp = 0.f;
#pragma unroll
        for (int t = 0; t < DPL; t++) {
          const int d = lane + 32 * t;
          kf[t] = d < a.D ? ld(kr + d) : 0.f;
          s += qf[t] * kf[t];
          dp += df[t] * (d < a.D ? ld(vr + d) : 0.f);
        }
        s = warp_sum(s);
        dp = warp_sum(dp);
        const float ds = exp2f(fmaf(s, a.c, -l2)) * (dp - di);
#pragma unroll
        for (int t = 0; t < DPL; t++) dq[t] += ds * kf[t];
      }
    }
  }
  const int dp64 = (a.D + 63) / 64;
  float *acc = a.dqacc + (((size_t)b * a.Hq + hq) * dp64 * a.Sqp + i) * 64;
#pragma unroll
  for (int t = 0; t < DPL; t++) {
    const int d = lane + 32 * t;
    if (d < a.D) acc[(size_t)(d / 64) * a.Sqp * 64 + fmbwd_swz(d % 64, i)] += dq[t];
  }
}

template <typename T, int DPL> cudaError_t launch_fb(const FbArgs &a, int B, cudaStream_t st)
{
  bwd_fb_dkdv<T, DPL><<<dim3((a.Sk + 3) / 4, a.Hkv, B), 128, 0, st>>>(a);
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return e;
  bwd_fb_dq<T, DPL><<<dim3((a.Sq + 3) / 4, a.Hq, B), 128, 0, st>>>(a);
  return cudaGetLastError();
}

template <typename T> cudaError_t fallback(const FMGpuBwdParams *p, const FMBwdWork *w, cudaStream_t st)
{
  FbArgs a;
  a.q = p->q;
  a.k = p->k;
  a.v = p->v;
  a.dout = p->dout;
  a.dqacc = w->dqacc;
  a.dk = p->dk;
  a.dv = p->dv;
  a.sq = p->sq;
  a.sk = p->sk;
  a.sv = p->sv;
  a.sdo = p->sdo;
  a.sdq = p->sdq;
  a.sdk = p->sdk;
  a.sdv = p->sdv;
  a.lse2 = w->lse2;
  a.dsum = w->dsum;
  a.packed = p->packed;
  a.sum = p->sum;
  a.Sq = p->seqlen_q;
  a.Sk = p->seqlen_k;
  a.Hq = p->heads_q;
  a.Hkv = p->heads_kv;
  a.D = p->head_dim;
  a.mask_heads = p->mask_heads;
  a.mstride = p->mask_batch > 1 ? p->mask_heads : 0;
  a.causal = p->causal;
  a.nblk = p->nblk;
  a.Sqp = w->sqp;
  a.dkv_f32 = p->dkv_f32;
  a.scale = p->scale;
  a.c = p->scale * 1.4426950408889634f;
  if (a.D <= 64) return launch_fb<T, 2>(a, p->batch, st);
  if (a.D <= 128) return launch_fb<T, 4>(a, p->batch, st);
  return launch_fb<T, 8>(a, p->batch, st);
}

/* The sizes and scale (what FMGpuBackwardPath judges; no pointer needed). */
int shape_ok(const FMGpuBwdParams *p)
{
  if (!p) return 0;
  if (p->head_dim < 8 || p->head_dim > 256 || p->head_dim % 8) return 0;
  if (p->batch < 1 || p->seqlen_q < 1 || p->seqlen_k < 1 || p->heads_q < 1 || p->heads_kv < 1 || p->mask_heads < 1) return 0;
  if (p->heads_q % p->heads_kv || p->heads_q % p->mask_heads || p->batch > 65535 || p->heads_q > 65535) return 0;
  if (p->nblk != (p->seqlen_k + FMBWD_BLOCK_N - 1) / FMBWD_BLOCK_N || !(p->scale > 0.f)) return 0;
  return 1;
}

/* What a piece reads and writes, the mask and an aligned workspace are given. */
int piece_pointers_ok(const FMGpuBwdParams *p)
{
  if (!p->q || !p->k || !p->v || !p->dout || !p->dk || !p->dv) return 0;
  return p->packed && p->sum && p->workspace && !((uintptr_t)p->workspace & 255);
}

} /* namespace */

extern "C" size_t FMGpuBackwardWorkspace(const FMGpuBwdParams *p) { return fmbwd_layout(p, NULL); }

extern "C" int FMGpuBackwardPath(const FMGpuBwdParams *p)
{
  if (!shape_ok(p)) return -1;
  return !p->force_fallback && FMBwdSm90Supported(p) ? 1 : 0;
}

/* The three passes on a laid-out workspace (w.first_store as FMGpuBackward decided). */
static cudaError_t run_begin(const FMGpuBwdParams *p, const FMBwdWork &w, cudaStream_t st)
{
  if (p->fp16) launch_pre<__half>(p, w, st);
  else launch_pre<__nv_bfloat16>(p, w, st);
  return cudaGetLastError();
}

static cudaError_t run_piece(const FMGpuBwdParams *p, const FMBwdWork &w, int path, cudaStream_t st)
{
  cudaError_t e;
  if (path == 0) return p->fp16 ? fallback<__half>(p, &w, st) : fallback<__nv_bfloat16>(p, &w, st);
  if ((e = cudaMemsetAsync(w.counter, 0, sizeof(int), st)) != cudaSuccess) return e;
  return FMBwdSm90Launch(p, &w, st);
}

static cudaError_t run_end(const FMGpuBwdParams *p, const FMBwdWork &w, cudaStream_t st)
{
  const int vec = !((uintptr_t)p->dq & 15) && p->sdq.sb % 8 == 0 && p->sdq.ss % 8 == 0 && p->sdq.sh % 8 == 0;
  const int *flags = w.first_store ? w.turn : NULL, nqb = w.nqb;
  if (p->fp16)
    bwd_post<__half><<<2048, 256, 0, st>>>(w.dqacc, flags, nqb, (__half *)p->dq, p->sdq, p->batch, p->seqlen_q, p->heads_q,
                                           p->head_dim, w.sqp, p->scale, vec);
  else
    bwd_post<__nv_bfloat16><<<2048, 256, 0, st>>>(w.dqacc, flags, nqb, (__nv_bfloat16 *)p->dq, p->sdq, p->batch, p->seqlen_q,
                                                  p->heads_q, p->head_dim, w.sqp, p->scale, vec);
  return cudaGetLastError();
}

static int workspace_ok(const FMGpuBwdParams *p) { return p->workspace && !((uintptr_t)p->workspace & 255); }

/* Begin: the rows' log2 LSE and D (reads o, dout, lse), dQ's accumulator zeroed (one kernel). */
extern "C" cudaError_t FMGpuBackwardBegin(const FMGpuBwdParams *p, cudaStream_t st)
{
  FMBwdWork w;
  if (FMGpuBackwardPath(p) < 0 || !p->o || !p->dout || !p->lse || !workspace_ok(p)) return cudaErrorInvalidValue;
  fmbwd_layout(p, &w);
  return run_begin(p, w, st);
}

/* Piece: the main kernel over p's keys (the Hopper kernel, or the SIMT fallback's two passes). */
extern "C" cudaError_t FMGpuBackwardPiece(const FMGpuBwdParams *p, cudaStream_t st)
{
  FMBwdWork w;
  const int path = FMGpuBackwardPath(p);
  if (path < 0 || !piece_pointers_ok(p)) return cudaErrorInvalidValue;
  fmbwd_layout(p, &w);
  return run_piece(p, w, path, st);
}

/* End: dq = the accumulator times the scale, in dtype. */
extern "C" cudaError_t FMGpuBackwardEnd(const FMGpuBwdParams *p, cudaStream_t st)
{
  FMBwdWork w;
  if (FMGpuBackwardPath(p) < 0 || !p->dq || !workspace_ok(p)) return cudaErrorInvalidValue;
  fmbwd_layout(p, &w);
  return run_end(p, w, st);
}

/* One piece: with first stores where FMGpuBwdFirstStore allows (the pieces of FMGpuBackwardPiece may
   differ in step rows and mode, so they keep the zeroed accumulator). */
extern "C" cudaError_t FMGpuBackward(const FMGpuBwdParams *p, cudaStream_t st)
{
  FMBwdWork w;
  cudaError_t e;
  const int path = FMGpuBackwardPath(p);
  if (path < 0 || !piece_pointers_ok(p) || !p->o || !p->dout || !p->lse || !p->dq) return cudaErrorInvalidValue;
  fmbwd_layout(p, &w);
  w.first_store = path == 1 && FMGpuBwdFirstStore(p);
  if ((e = run_begin(p, w, st)) != cudaSuccess) return e;
  if ((e = run_piece(p, w, path, st)) != cudaSuccess) return e;
  return run_end(p, w, st);
}
