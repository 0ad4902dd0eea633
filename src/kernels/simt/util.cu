/*
 * util.cu - elementwise kernels of the context-parallel paths: fp32 partial results rounded to
 * the output dtype, and a device fill; the scan for non-finite elements (-fm_check_finite).
 * Kernel layer: returns cudaError_t (cuda.cu maps it).
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include "../fmgpu.cuh"

__global__ void fm_convert_out(const float *src, void *dst, size_t n, int fp16)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    if (fp16) ((__half *)dst)[i] = __float2half_rn(src[i]);
    else ((__nv_bfloat16 *)dst)[i] = __float2bfloat16_rn(src[i]);
  }
}

__global__ void fm_fill_f32(float *p, size_t n, float x)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = x;
}

/* FMGpuConvertOut - dst[i] = src[i] rounded to fp16 (fp16 = 1) or bf16, n device elements. */
cudaError_t FMGpuConvertOut(const float *src, void *dst, int fp16, size_t n, cudaStream_t stream)
{
  if (n == 0) return cudaSuccess;
  fm_convert_out<<<1024, 256, 0, stream>>>(src, dst, n, fp16);
  return cudaGetLastError();
}

/* FMGpuFillFloat - p[0..n) = x (device memory). */
cudaError_t FMGpuFillFloat(float *p, size_t n, float x, cudaStream_t stream)
{
  if (n == 0) return cudaSuccess;
  fm_fill_f32<<<1024, 256, 0, stream>>>(p, n, x);
  return cudaGetLastError();
}

/* Exponent bits all ones: Inf or NaN (es = element bytes: 2 bf16, 3 fp16 (tag), 4 fp32). */
__global__ void fm_find_nonfinite(const void *x, size_t n, int kind, unsigned long long *first)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    bool bad;
    if (kind == 4) bad = (((const uint32_t *)x)[i] & 0x7f800000u) == 0x7f800000u;
    else if (kind == 3) bad = (((const uint16_t *)x)[i] & 0x7c00u) == 0x7c00u;
    else bad = (((const uint16_t *)x)[i] & 0x7f80u) == 0x7f80u;
    if (bad) {
      atomicMin(first, (unsigned long long)i);
      return; /* this thread's later elements have larger indices */
    }
  }
}

/* FMGpuFindNonFinite - *first (device, preset to n or more) = min(*first, the lowest index of a
   non-finite element of x[0..n)): kind 2 bf16, 3 fp16, 4 fp32. Asynchronous on stream. */
cudaError_t FMGpuFindNonFinite(const void *x, size_t n, int kind, unsigned long long *first, cudaStream_t stream)
{
  if (n == 0) return cudaSuccess;
  fm_find_nonfinite<<<1024, 256, 0, stream>>>(x, n, kind, first);
  return cudaGetLastError();
}
