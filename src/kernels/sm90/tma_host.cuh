/*
 * tma_host.cuh - host side of the Hopper kernels' TMA: the driver's cuTensorMapEncodeTiled,
 * looked up once through the runtime (so the library links no libcuda at build time). Included
 * by the sm90 launchers (fwd_sm90.cu, bwd_sm90.cu).
 */
#pragma once
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

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
