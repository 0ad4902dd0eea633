/*
 * cuda_mask.cu - the device copy of a mask: upload of the four bound vectors and the GPU
 * prepass that builds, at the kernels' key-block size (FM_GPU_BLOCK_N), the packed per-column
 * bounds, the block summaries and the one-interval visible rows. Kernel layer: returns
 * cudaError_t (cuda.cu maps it).
 */
#include <cuda_runtime.h>
#include <limits.h>
#include <stdlib.h>
#include "fmgpu.cuh"

/*
 * One CTA per (key block, mask head), FM_GPU_BLOCK_N threads: pack the four bounds of each
 * column (fully masked padding past seqlen_k) and reduce the block's 8 summary numbers over
 * its real columns. plane: where each bound vector (LTS, LTE, UTS, UTE) lies in bnd, in units of
 * H x Sk entries, or -1 for a vector the mask does not carry, which takes its default (Sq, Sq,
 * 0, 0) without being read or uploaded.
 */
__global__ void __launch_bounds__(FM_GPU_BLOCK_N) fm_mask_prepass(const int32_t *bnd, int4 plane, int Sq, int Sk, int H,
                                                                   int nblk, int causal, int4 *packed, int32_t *sum,
                                                                   int2 *vis, int *simple)
{
  __shared__ int red[FM_GPU_BLOCK_N / 32][FM_SUM_N];
  const int kb = blockIdx.x, h = blockIdx.y, t = threadIdx.x;
  const int j = kb * FM_GPU_BLOCK_N + t;
  int4 v;
  int mn[4], mx[4];
  if (j < Sk) {
    const size_t o = (size_t)h * Sk + j, vs = (size_t)H * Sk;
    v = make_int4(plane.x < 0 ? Sq : bnd[plane.x * vs + o], plane.y < 0 ? Sq : bnd[plane.y * vs + o],
                  plane.z < 0 ? 0 : bnd[plane.z * vs + o], plane.w < 0 ? 0 : bnd[plane.w * vs + o]);
    mn[0] = mx[0] = v.x;
    mn[1] = mx[1] = v.y;
    mn[2] = mx[2] = v.z;
    mn[3] = mx[3] = v.w;
  } else {
    v = make_int4(0, INT_MAX, 0, 0);
    for (int i = 0; i < 4; i++) {
      mn[i] = INT_MAX;
      mx[i] = INT_MIN;
    }
  }
  packed[((size_t)h * nblk + kb) * FM_GPU_BLOCK_N + t] = v;
  {
    /* visible rows = [0, Sq) minus [lts, lte), [uts, ute) and the causal rows [0, j - (Sk - Sq)) */
    int a[3], e[3], cnt = 0, one = 1;
    int2 r = make_int2(0, 0);
    if (j < Sk) {
      if (v.x < v.y) a[cnt] = v.x, e[cnt++] = v.y;
      if (v.z < v.w) a[cnt] = v.z, e[cnt++] = v.w;
      if (causal && j - (Sk - Sq) > 0) a[cnt] = 0, e[cnt++] = min(j - (Sk - Sq), Sq);
      for (int x = 0; x < cnt; x++) /* sort by start */
        for (int y = x + 1; y < cnt; y++)
          if (a[y] < a[x]) {
            int ta = a[x], te = e[x];
            a[x] = a[y], e[x] = e[y], a[y] = ta, e[y] = te;
          }
      int pos = 0, pieces = 0;
      for (int x = 0; x <= cnt; x++) {
        const int s0 = x < cnt ? a[x] : Sq, s1 = x < cnt ? e[x] : Sq;
        if (s0 > pos) { /* visible gap [pos, s0) */
          if (pieces == 0) r = make_int2(pos, min(s0, Sq));
          pieces++;
        }
        if (s1 > pos) pos = s1;
        if (pos >= Sq) break;
      }
      one = pieces <= 1;
    }
    vis[((size_t)h * nblk + kb) * FM_GPU_BLOCK_N + t] = r;
    one = __syncthreads_and(one);
    if (t == 0) simple[(size_t)h * nblk + kb] = one;
  }
  for (int s = 16; s > 0; s >>= 1)
    for (int i = 0; i < 4; i++) {
      mn[i] = min(mn[i], __shfl_xor_sync(0xffffffffu, mn[i], s));
      mx[i] = max(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], s));
    }
  if ((t & 31) == 0)
    for (int i = 0; i < 4; i++) {
      red[t >> 5][2 * i] = mn[i];
      red[t >> 5][2 * i + 1] = mx[i];
    }
  __syncthreads();
  if (t < FM_SUM_N) {
    int r = red[0][t];
    for (int w = 1; w < FM_GPU_BLOCK_N / 32; w++) r = (t & 1) ? max(r, red[w][t]) : min(r, red[w][t]);
    sum[((size_t)h * nblk + kb) * FM_SUM_N + t] = r; /* FM_SUM_{LTS,LTE,UTS,UTE}_{MIN,MAX} order */
  }
}

/* The carried vectors of present (FM_BOUND_* bits) packed in order: plane[v] their place, -1 for
   the others; returns how many. */
static int planes(int present, int pl[4])
{
  int k = 0;
  for (int v = 0; v < 4; v++) pl[v] = (present >> v) & 1 ? k++ : -1;
  return k;
}

/*
 * FMGpuMaskCreate - allocate the device copy, upload the bounds and run the prepass on the
 *   default stream; synchronous (the copy is complete on return). On error nothing stays
 *   allocated and *out is NULL.
 */
cudaError_t FMGpuMaskCreate(int seqlen_q, int seqlen_k, int mask_heads, int mask_batch, int causal, int present,
                            const int32_t *const bnd[4], FMGpuMask **out)
{
  int pl[4];
  planes(present, pl);
  FMGpuMask *d = (FMGpuMask *)calloc(1, sizeof(FMGpuMask));
  const int rows = mask_heads * (mask_batch > 1 ? mask_batch : 1); /* one prepass row per (sample, mask head) */
  const size_t n = (size_t)rows * seqlen_k;
  cudaError_t e = cudaSuccess;
  *out = NULL;
  if (!d) return cudaErrorMemoryAllocation;
  d->seqlen_q = seqlen_q;
  d->seqlen_k = seqlen_k;
  d->mask_heads = mask_heads;
  d->mask_batch = mask_batch > 1 ? mask_batch : 1;
  d->causal = causal;
  d->present = present & 15;
  d->nblk = (seqlen_k + FM_GPU_BLOCK_N - 1) / FM_GPU_BLOCK_N;
  const size_t ncol = (size_t)rows * d->nblk * FM_GPU_BLOCK_N;
  d->cap_bnd = n;
  d->cap_col = ncol;
  d->cap_blk = (size_t)rows * d->nblk;
  if ((e = cudaMalloc((void **)&d->bnd, 4 * n * sizeof(int32_t))) != cudaSuccess ||
      (e = cudaMalloc((void **)&d->packed, ncol * sizeof(int4))) != cudaSuccess ||
      (e = cudaMalloc((void **)&d->sum, (size_t)rows * d->nblk * FM_SUM_N * sizeof(int32_t))) != cudaSuccess ||
      (e = cudaMalloc((void **)&d->vis, ncol * sizeof(int2))) != cudaSuccess ||
      (e = cudaMalloc((void **)&d->simple, (size_t)rows * d->nblk * sizeof(int))) != cudaSuccess)
    goto fail;
  for (int v = 0; v < 4; v++)
    if (pl[v] >= 0 && (e = cudaMemcpy(d->bnd + pl[v] * n, bnd[v], n * sizeof(int32_t), cudaMemcpyHostToDevice)) != cudaSuccess)
      goto fail;
  fm_mask_prepass<<<dim3(d->nblk, rows), FM_GPU_BLOCK_N>>>(d->bnd, make_int4(pl[0], pl[1], pl[2], pl[3]), seqlen_q, seqlen_k,
                                                            rows, d->nblk, causal, d->packed, d->sum, d->vis, d->simple);
  if ((e = cudaGetLastError()) != cudaSuccess || (e = cudaDeviceSynchronize()) != cudaSuccess) goto fail;
  *out = d;
  return cudaSuccess;
fail:
  (void)cudaGetLastError();
  FMGpuMaskDestroy(d);
  return e;
}

/* The staging and its events released (after the copies out of it), as before FMGpuMaskStage. */
static void unstage(FMGpuMask *d)
{
  for (int i = 0; i < 2; i++) {
    if (d->staged[i]) { cudaEventSynchronize(d->staged[i]); cudaEventDestroy(d->staged[i]); }
    if (d->stage[i]) cudaFreeHost(d->stage[i]);
    d->stage[i] = NULL;
    d->staged[i] = NULL;
  }
  d->next_stage = 0;
}

/* FMGpuMaskStage - see fmgpu.cuh. */
void FMGpuMaskStage(FMGpuMask *d)
{
  size_t bytes;
  if (!d || d->stage[0]) return;
  bytes = 4 * d->cap_bnd * sizeof(int32_t);
  if (bytes > FM_GPU_STAGE_MAX) return;
  for (int i = 0; i < 2; i++)
    if (cudaMallocHost((void **)&d->stage[i], bytes) != cudaSuccess ||
        cudaEventCreateWithFlags(&d->staged[i], cudaEventDisableTiming) != cudaSuccess) {
      (void)cudaGetLastError(); /* no pinned memory: the updates copy from pageable memory */
      unstage(d);
      return;
    }
}

/* FMGpuMaskUpdate - see fmgpu.cuh. */
cudaError_t FMGpuMaskUpdate(FMGpuMask *d, int seqlen_q, int seqlen_k, int mask_heads, int mask_batch, int causal, int present,
                            const int32_t *const bnd[4], FMGpuHostCopy copy, int nth, cudaStream_t st, int *done)
{
  int pl[4];
  const int np = planes(present, pl);
  const int mb = mask_batch > 1 ? mask_batch : 1, rows = mask_heads * mb, nblk = (seqlen_k + FM_GPU_BLOCK_N - 1) / FM_GPU_BLOCK_N;
  const size_t n = (size_t)rows * seqlen_k;
  cudaError_t e;
  *done = 0;
  if (!d || seqlen_q < 1 || seqlen_k < 1 || mask_heads < 1) return cudaErrorInvalidValue;
  if (n > d->cap_bnd || (size_t)rows * nblk * FM_GPU_BLOCK_N > d->cap_col || (size_t)rows * nblk > d->cap_blk) return cudaSuccess;
  d->seqlen_q = seqlen_q;
  d->seqlen_k = seqlen_k;
  d->mask_heads = mask_heads;
  d->mask_batch = mb;
  d->causal = causal;
  d->present = present & 15;
  d->nblk = nblk;
  if (d->stage[0]) {
    /* through the staging buffer whose last copy is two updates back (normally long done) */
    const int i = d->next_stage;
    int32_t *s = d->stage[i];
    if ((e = cudaEventSynchronize(d->staged[i])) != cudaSuccess) return e;
    int32_t *dst[4];
    const int32_t *src[4];
    for (int v = 0; v < 4; v++) {
      dst[v] = pl[v] >= 0 ? s + pl[v] * n : NULL;
      src[v] = pl[v] >= 0 ? bnd[v] : NULL;
    }
    copy(dst, src, n, nth);
    if (np && (e = cudaMemcpyAsync(d->bnd, s, np * n * sizeof(int32_t), cudaMemcpyHostToDevice, st)) != cudaSuccess) return e;
    if ((e = cudaEventRecord(d->staged[i], st)) != cudaSuccess) {
      /* the copy may be queued with no event after it: wait for it here, so that no later
         update rewrites the buffer under it */
      (void)cudaStreamSynchronize(st);
      return e;
    }
    d->next_stage = i ^ 1;
  } else {
    /* from pageable host memory the copies return once the host bounds have been read */
    for (int v = 0; v < 4; v++)
      if (pl[v] >= 0 &&
          (e = cudaMemcpyAsync(d->bnd + pl[v] * n, bnd[v], n * sizeof(int32_t), cudaMemcpyHostToDevice, st)) != cudaSuccess)
        return e;
  }
  const int4 plane = make_int4(pl[0], pl[1], pl[2], pl[3]);
  fm_mask_prepass<<<dim3(d->nblk, rows), FM_GPU_BLOCK_N, 0, st>>>(d->bnd, plane, seqlen_q, seqlen_k, rows, d->nblk, causal,
                                                                  d->packed, d->sum, d->vis, d->simple);
  if ((e = cudaGetLastError()) != cudaSuccess) return e;
  *done = 1;
  return cudaSuccess;
}

/* FMGpuMaskDestroy - free a device copy (NULL is fine). */
void FMGpuMaskDestroy(FMGpuMask *d)
{
  if (!d) return;
  unstage(d);
  cudaFree(d->bnd);
  cudaFree(d->packed);
  cudaFree(d->sum);
  cudaFree(d->vis);
  cudaFree(d->simple);
  free(d);
}
