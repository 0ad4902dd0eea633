/*
 * fmbench_fill.cu - random inputs on the device for fmbench (its forward and -cp runs): n
 * bf16/fp16 elements, uniform in [-amp, amp) from a seed (splitmix64 per element, never all
 * zeros). Compiled into fmbench only, not into the library.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>

__global__ void fm_fill_random(void *p, size_t n, int fp16, unsigned long long seed, float amp)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned long long z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float x = amp * ((float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
    if (fp16) ((__half *)p)[i] = __float2half_rn(x);
    else ((__nv_bfloat16 *)p)[i] = __float2bfloat16_rn(x);
  }
}

/*
 * FMCudaFillRandom_Private - fill n bf16/fp16 elements of device memory with uniform values
 *   in [-amp, amp) from seed, asynchronously on stream. Not collective.
 */
extern "C" FMErrorCode FMCudaFillRandom_Private(void *p, size_t n, FMDType t, unsigned long long seed, float amp, void *stream)
{
  FMCheck(t == FM_DTYPE_BF16 || t == FM_DTYPE_FP16, MPI_COMM_SELF, FM_ERR_SUP, "dtype %d; expected bf16 or fp16", (int)t);
  if (n == 0) return FM_SUCCESS;
  fm_fill_random<<<1024, 256, 0, (cudaStream_t)stream>>>(p, n, t == FM_DTYPE_FP16, seed, amp);
  FMCallCUDA(cudaGetLastError());
  return FM_SUCCESS;
}
