/*
 * tma_host.cuh - host side of the Hopper kernels' TMA: the driver's cuTensorMapEncodeTiled,
 * looked up once through the runtime (so the library links no libcuda at build time); and the
 * diagnostic builds' counter collection. Included by the sm90 launchers (fwd_sm90.cu,
 * bwd_sm90.cu).
 */
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <string.h>

/* fm_tma_encode_fn - cuTensorMapEncodeTiled, or NULL when the driver does not provide it. */
static PFN_cuTensorMapEncodeTiled_v12000 fm_tma_encode_fn(void)
{
  static PFN_cuTensorMapEncodeTiled_v12000 fn = NULL;
  if (!fn) {
    void *ptr = NULL;
    cudaDriverEntryPointQueryResult q;
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q) != cudaSuccess ||
        q != cudaDriverEntryPointSuccess)
      return NULL;
    fn = (PFN_cuTensorMapEncodeTiled_v12000)ptr;
  }
  return fn;
}

/* fm_prof_collect - a diagnostic build's per-CTA counters (a __device__ [1024][N] array,
   FMBWD_PROF / FMFWD_PROF) summed over the CTAs into sum[N], then zeroed on the device. */
template <int N> static cudaError_t fm_prof_collect(unsigned long long (&counters)[1024][N], unsigned long long *sum)
{
  static unsigned long long h[1024][N];
  cudaError_t e = cudaMemcpyFromSymbol(h, counters, sizeof h);
  if (e != cudaSuccess) return e;
  for (int k = 0; k < N; k++) sum[k] = 0;
  for (int c = 0; c < 1024; c++)
    for (int k = 0; k < N; k++) sum[k] += h[c][k];
  memset(h, 0, sizeof h);
  return cudaMemcpyToSymbol(counters, h, sizeof h);
}
