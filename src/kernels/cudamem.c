/*
 * cudamem.c - small device-memory helpers used by the plan (staging for the CPU fallback)
 * and by tests. Plain C over the CUDA runtime API.
 */
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include <cuda_runtime_api.h>


FMErrorCode FMCudaMalloc(size_t bytes, void **p)
{
  FMValidPointer(p, 2);
  FMCallCUDA(cudaMalloc(p, bytes ? bytes : 1));
  return FM_SUCCESS;
}

FMErrorCode FMCudaFree(void *p)
{
  if (p) FMCallCUDA(cudaFree(p));
  return FM_SUCCESS;
}

FMErrorCode FMCudaMemcpyD2H(void *dst, const void *src, size_t bytes, void *stream)
{
  FMCallCUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, (cudaStream_t)stream));
  FMCallCUDA(cudaStreamSynchronize((cudaStream_t)stream));
  return FM_SUCCESS;
}

FMErrorCode FMCudaMemcpyH2D(void *dst, const void *src, size_t bytes, void *stream)
{
  FMCallCUDA(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, (cudaStream_t)stream));
  FMCallCUDA(cudaStreamSynchronize((cudaStream_t)stream));
  return FM_SUCCESS;
}

int FMCudaIsDevicePointer(const void *p)
{
  struct cudaPointerAttributes a;
  if (!p || cudaPointerGetAttributes(&a, p) != cudaSuccess) { (void)cudaGetLastError(); return 0; }
  return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}
