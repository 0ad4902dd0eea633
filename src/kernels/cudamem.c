/*
 * cudamem.c - the kernel layer's small CUDA resource helpers: device and pinned host memory,
 * copies, streams and events, for the plan, the context-parallel executor and the tests (so
 * that they need not call the CUDA runtime themselves). Plain C over the CUDA runtime API;
 * streams and events travel as void *. Declared in fmkernels.h.
 */
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include <cuda_runtime_api.h>


FMErrorCode FMCudaMalloc(size_t bytes, void **p)
{
  FMValidPointer(p, 2);
  *p = NULL;
  if (cudaMalloc(p, bytes ? bytes : 1) != cudaSuccess) {
    (void)cudaGetLastError();
    *p = NULL;
    FMRaise(MPI_COMM_SELF, FM_ERR_MEM, "Cannot allocate %zu bytes of device memory", bytes);
  }
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

/* ------------------------------------------------------------------ pinned host memory */

FMErrorCode FMCudaHostAlloc(size_t bytes, void **p)
{
  FMValidPointer(p, 2);
  *p = NULL;
  if (cudaMallocHost(p, bytes ? bytes : 1) != cudaSuccess) {
    (void)cudaGetLastError();
    *p = NULL;
    FMRaise(MPI_COMM_SELF, FM_ERR_MEM, "Cannot allocate %zu bytes of pinned host memory", bytes);
  }
  return FM_SUCCESS;
}

FMErrorCode FMCudaHostFree(void *p)
{
  if (p) FMCallCUDA(cudaFreeHost(p));
  return FM_SUCCESS;
}

/* ------------------------------------------------------------------ streams */

FMErrorCode FMCudaStreamCreate(int high_priority, void **stream)
{
  cudaStream_t s = NULL;
  int lo = 0, hi = 0;
  FMValidPointer(stream, 2);
  *stream = NULL;
  if (high_priority) FMCallCUDA(cudaDeviceGetStreamPriorityRange(&lo, &hi));
  FMCallCUDA(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, high_priority ? hi : lo));
  *stream = s;
  return FM_SUCCESS;
}

FMErrorCode FMCudaStreamDestroy(void *stream)
{
  if (stream) FMCallCUDA(cudaStreamDestroy((cudaStream_t)stream));
  return FM_SUCCESS;
}

FMErrorCode FMCudaStreamWaitEvent(void *stream, void *event)
{
  FMCallCUDA(cudaStreamWaitEvent((cudaStream_t)stream, (cudaEvent_t)event, 0));
  return FM_SUCCESS;
}

FMErrorCode FMCudaStreamSynchronize(void *stream)
{
  FMCallCUDA(cudaStreamSynchronize((cudaStream_t)stream));
  return FM_SUCCESS;
}

/* ------------------------------------------------------------------ events */

FMErrorCode FMCudaEventCreate(void **event)
{
  cudaEvent_t e = NULL;
  FMValidPointer(event, 1);
  *event = NULL;
  FMCallCUDA(cudaEventCreate(&e));
  *event = e;
  return FM_SUCCESS;
}

FMErrorCode FMCudaEventDestroy(void *event)
{
  if (event) FMCallCUDA(cudaEventDestroy((cudaEvent_t)event));
  return FM_SUCCESS;
}

FMErrorCode FMCudaEventRecord(void *event, void *stream)
{
  FMCallCUDA(cudaEventRecord((cudaEvent_t)event, (cudaStream_t)stream));
  return FM_SUCCESS;
}

FMErrorCode FMCudaEventSynchronize(void *event)
{
  FMCallCUDA(cudaEventSynchronize((cudaEvent_t)event));
  return FM_SUCCESS;
}

FMErrorCode FMCudaEventElapsed(void *start, void *end, double *seconds)
{
  float ms = 0.f;
  FMValidPointer(seconds, 3);
  *seconds = 0;
  FMCallCUDA(cudaEventElapsedTime(&ms, (cudaEvent_t)start, (cudaEvent_t)end));
  *seconds = 1e-3 * ms;
  return FM_SUCCESS;
}
