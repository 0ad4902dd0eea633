/*
 * util.cu - elementwise kernels of the context-parallel paths: fp32 partial results rounded to
 * the output dtype, and a device fill. Kernel layer: returns cudaError_t (cuda.cu maps it).
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
