/*
 * s32_wavefronts.cu - how many shared-memory wavefronts one warp's load takes, by access width and
 * by how many distinct addresses its lanes read (thirty-second session; NOTES.md). Five kernels,
 * 132 x 256 threads, 65536 loads a thread each:
 *   k<0> 64-bit, 4 distinct 8-byte values (the backward's lse2 and D loads)
 *   k<1> 128-bit, 4 distinct 16-byte values
 *   k<2> ldmatrix x4, each matrix's 8 row addresses equal
 *   k<3> 32-bit, 4 distinct
 *   k<4> 32-bit, 32 distinct
 * Build and count (H100, 2026-12-07: 2, 4, 4, 1, 1 wavefronts a warp instruction):
 *   nvcc -O3 -arch=sm_90a s32_wavefronts.cu -o wf
 *   ncu --metrics l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum,smsp__inst_executed_op_shared_ld.sum,smsp__inst_executed_op_ldsm.sum ./wf
 */
#include <cstdio>
#include <cstdint>
__device__ __forceinline__ uint32_t su(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }
template <int MODE> __global__ void k(float *out, int n)
{
  __shared__ __align__(128) float s[1024];
  for (int i = threadIdx.x; i < 1024; i += blockDim.x) s[i] = i * 0.5f;
  __syncthreads();
  const int lane = threadIdx.x & 31, t4 = lane & 3;
  float acc = 0.f;
  uint32_t base = su(s);
  for (int it = 0; it < n; it++) {
    const uint32_t off = (it & 7) * 64;
    if (MODE == 0) { /* LDS.64 broadcast: 4 distinct 8-byte values (ours) */
      float a, b;
      asm volatile("ld.shared.v2.f32 {%0,%1}, [%2];" : "=f"(a), "=f"(b) : "r"(base + off + 8 * t4));
      acc += a + b;
    } else if (MODE == 1) { /* LDS.128 broadcast: 4 distinct 16-byte values */
      float a, b, c, d;
      asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(a), "=f"(b), "=f"(c), "=f"(d) : "r"(base + off + 16 * t4));
      acc += a + b + c + d;
    } else if (MODE == 2) { /* LDSM x4, every row address of matrix m the same 16 bytes (m = lane / 8) */
      uint32_t a, b, c, d;
      asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];" : "=r"(a), "=r"(b), "=r"(c), "=r"(d) : "r"(base + off + 16 * (lane >> 3)));
      acc += __uint_as_float(a) + __uint_as_float(b) + __uint_as_float(c) + __uint_as_float(d);
    } else if (MODE == 3) { /* LDS.32 broadcast, 4 distinct */
      float a;
      asm volatile("ld.shared.f32 %0, [%1];" : "=f"(a) : "r"(base + off + 4 * t4));
      acc += a;
    } else { /* LDS.32, 32 distinct */
      float a;
      asm volatile("ld.shared.f32 %0, [%1];" : "=f"(a) : "r"(base + off + 4 * lane));
      acc += a;
    }
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = acc;
}
int main()
{
  float *o;
  cudaMalloc(&o, 132 * 256 * 4);
  const int n = 1 << 16;
  k<0><<<132, 256>>>(o, n);
  k<1><<<132, 256>>>(o, n);
  k<2><<<132, 256>>>(o, n);
  k<3><<<132, 256>>>(o, n);
  k<4><<<132, 256>>>(o, n);
  cudaDeviceSynchronize();
  printf("per warp-instruction: n = %d, warps = %d -> instructions %d\n", n, 132 * 8, n * 132 * 8);
  return 0;
}
