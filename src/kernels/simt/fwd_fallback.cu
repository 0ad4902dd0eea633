/*
 * fwd_fallback.cu - a plain correct SIMT forward for non-Hopper GPUs and for shapes the Hopper
 * kernel does not cover (head dims other than 64, 128 and 256). Kernel layer: reads
 * FMGpuFwdParams, returns cudaError_t.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>
#include "../fmgpu.cuh"

template <typename T> __device__ __forceinline__ float to_f(T x);
template <> __device__ __forceinline__ float to_f<__nv_bfloat16>(__nv_bfloat16 x) { return __bfloat162float(x); }
template <> __device__ __forceinline__ float to_f<__half>(__half x) { return __half2float(x); }
template <typename T> __device__ __forceinline__ T from_f(float x);
template <> __device__ __forceinline__ __nv_bfloat16 from_f<__nv_bfloat16>(float x) { return __float2bfloat16_rn(x); }
template <> __device__ __forceinline__ __half from_f<__half>(float x) { return __float2half_rn(x); }

/*
 * One warp per query row, 4 rows per CTA. Keys in chunks of 32 (one per lane: a full dot
 * product), online softmax in the log2 domain, then each lane accumulates its DPL output
 * dims. Key blocks are classified per row (skip / full / partial) from the summaries.
 */
template <typename T, int DPL> __global__ void __launch_bounds__(128, 4) fm_fwd_fallback(const FMGpuFwdParams p)
{
  __shared__ float qs[4][32 * DPL];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int i = blockIdx.x * 4 + warp, hq = blockIdx.y, b = blockIdx.z;
  if (i >= p.c.seqlen_q) return;
  const int Sq = p.c.seqlen_q, Sk = p.c.seqlen_k, D = p.head_dim, off = Sk - Sq;
  const int hkv = hq / (p.c.heads_q / p.c.heads_kv), mh = FM_GPU_MASK_ROW(p.c, b, hq);
  const T *q = (const T *)p.q + b * p.q_batch_stride + i * p.q_row_stride + hq * p.q_head_stride;
  const T *kb0 = (const T *)p.k + b * p.k_batch_stride + hkv * p.k_head_stride;
  const T *vb0 = (const T *)p.v + b * p.v_batch_stride + hkv * p.v_head_stride;
  const int32_t *sumh = p.c.sum + (size_t)mh * p.c.nblk * FM_SUM_N;
  const int4 *bnd = p.c.packed + (size_t)mh * p.c.nblk * FM_GPU_BLOCK_N;
  for (int d = lane; d < 32 * DPL; d += 32) qs[warp][d] = d < D ? to_f(q[d]) * p.c.scale_log2 : 0.f;
  __syncwarp();
  float acc[DPL];
#pragma unroll
  for (int t = 0; t < DPL; t++) acc[t] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int kb = 0; kb < p.c.nblk; kb++) {
    const int cls = FMClassifyTileInline(sumh, p.c.causal, Sq, Sk, FM_GPU_BLOCK_N, i, i + 1, kb);
    if (cls == FM_TILE_SKIP) continue;
    for (int j0 = kb * FM_GPU_BLOCK_N; j0 < (kb + 1) * FM_GPU_BLOCK_N && j0 < Sk; j0 += 32) {
      const int j = j0 + lane;
      float s = -INFINITY;
      bool vis = j < Sk;
      if (vis && cls == FM_TILE_PARTIAL) {
        const int4 bb = bnd[j];
        vis = !((i >= bb.x && i < bb.y) || (i >= bb.z && i < bb.w) || (p.c.causal && j > i + off));
      }
      if (vis) {
        const T *kr = kb0 + j * p.k_row_stride;
        float a = 0.f;
        for (int d = 0; d < D; d++) a += qs[warp][d] * to_f(kr[d]);
        s = a;
      }
      float mx = s;
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float mnew = fmaxf(m, mx);
      if (mnew == -INFINITY) { /* nothing visible yet, or only NaN (fmaxf drops it): then the row is NaN */
        if (__any_sync(0xffffffffu, s != -INFINITY)) l = NAN;
        continue;
      }
      const float corr = exp2f(m - mnew);
      const float pj = exp2f(s - mnew);
      float ps = pj;
      for (int o = 16; o > 0; o >>= 1) ps += __shfl_xor_sync(0xffffffffu, ps, o);
      l = l * corr + ps;
      m = mnew;
#pragma unroll
      for (int t = 0; t < DPL; t++) acc[t] *= corr;
      for (int jj = 0; jj < 32; jj++) {
        const float pb = __shfl_sync(0xffffffffu, pj, jj);
        if (pb == 0.f) continue;
        const T *vr = vb0 + (j0 + jj) * p.v_row_stride;
#pragma unroll
        for (int t = 0; t < DPL; t++) {
          const int d = lane + 32 * t;
          if (d < D) acc[t] += pb * to_f(vr[d]);
        }
      }
    }
  }
  const int64_t oo = b * p.o_batch_stride + i * p.o_row_stride + hq * p.o_head_stride;
  const int64_t lo = b * p.lse_batch_stride + hq * p.lse_head_stride + i;
  /* l = 0: nothing visible (O = 0, LSE = -inf); l = NaN (a NaN or +inf score): O, LSE NaN */
  float inv = l != 0.f ? 1.f / l : 0.f, wa = 0.f, lse = l != 0.f ? (m + log2f(l)) * 0.6931471805599453f : -INFINITY;
  if (p.c.o32 && p.c.merge) { /* exact merge with the accumulated (O, LSE) through the LSE */
    const float la = p.c.lse[lo];
    __syncwarp();
    /* a part whose LSE is -inf saw nothing and leaves the other as it is, +inf and NaN included
       (FMCPUMergePartial's rule); the new part first, so that both -inf keeps O = 0 */
    if (lse == -INFINITY) {
      inv = 0.f;
      wa = 1.f;
      lse = la;
    } else if (la != -INFINITY) { /* a NaN on either side gives NaN */
      const float mm = fmaxf(la, lse), ea = expf(la - mm), eb = expf(lse - mm), s = ea + eb;
      wa = ea / s;
      inv *= eb / s;
      lse = mm + logf(s);
    }
  }
#pragma unroll
  for (int t = 0; t < DPL; t++) {
    const int d = lane + 32 * t;
    if (d < D) {
      if (p.c.o32) p.c.o32[oo + d] = acc[t] * inv + (wa != 0.f ? wa * p.c.o32[oo + d] : 0.f);
      else ((T *)p.c.o)[oo + d] = from_f<T>(acc[t] * inv);
    }
  }
  if (lane == 0) p.c.lse[lo] = lse;
}

template <typename T> static cudaError_t launch_fallback(const FMGpuFwdParams &p, cudaStream_t st)
{
  dim3 grid((p.c.seqlen_q + 3) / 4, p.c.heads_q, p.batch);
  if (p.head_dim <= 64) fm_fwd_fallback<T, 2><<<grid, 128, 0, st>>>(p);
  else if (p.head_dim <= 128) fm_fwd_fallback<T, 4><<<grid, 128, 0, st>>>(p);
  else fm_fwd_fallback<T, 8><<<grid, 128, 0, st>>>(p);
  return cudaGetLastError();
}

/* FMGpuFallbackForward - launch the SIMT forward on stream (head_dim <= 256). */
cudaError_t FMGpuFallbackForward(const FMGpuFwdParams *p, cudaStream_t stream)
{
  if (p->head_dim < 1 || p->head_dim > 256) return cudaErrorNotSupported;
  return p->fp16 ? launch_fallback<__half>(*p, stream) : launch_fallback<__nv_bfloat16>(*p, stream);
}
