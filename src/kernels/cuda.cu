/*
 * cuda.cu - the CUDA backend's host entry points (fmkernels.h): device queries, the mask
 * upload with its GPU prepass (packed column bounds and block summaries at the kernels'
 * key-block size), the forward dispatch, and a plain correct SIMT fallback kernel for
 * non-Hopper GPUs and for shapes the Hopper kernel does not cover.
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include "sm90/fwd_sm90.cuh"


/* The device copy of a mask (the handle behind FMCudaMaskUpload's void *). */
typedef struct {
  int seqlen_q, seqlen_k, mask_heads, causal, nblk;
  int32_t *bnd;   /* [4][mask_heads][seqlen_k]: lts, lte, uts, ute as uploaded */
  int4 *packed;   /* [mask_heads][nblk * FM_GPU_BLOCK_N]: {lts, lte, uts, ute}; padding columns fully masked */
  int32_t *sum;   /* [mask_heads][nblk][FM_SUM_N] */
  int2 *vis;      /* [mask_heads][nblk * FM_GPU_BLOCK_N]: visible rows [x, y) of the column (causal included)
                     when they form one interval (padding: [0, 0)) */
  int *simple;    /* [mask_heads][nblk]: 1 if every column of the block has a one-interval visible set */
} FMCudaMask;

/* ------------------------------------------------------------------ devices */

/*
 * FMCudaDeviceCount - number of CUDA devices visible to this process; 0 (and success) when
 *   there is no driver or no device. Not collective.
 *   ndev  out: the count
 */
FMErrorCode FMCudaDeviceCount(int *ndev)
{
  int n = 0;
  FMValidPointer(ndev, 1);
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();
    n = 0;
  }
  *ndev = n;
  return FM_SUCCESS;
}

/*
 * FMCudaDeviceInfo - name, PCI bus id and compute capability (major * 10 + minor) of device
 *   dev. Not collective. Any output may be NULL.
 */
FMErrorCode FMCudaDeviceInfo(int dev, char *name, size_t namelen, char *busid, size_t buslen, int *sm)
{
  struct cudaDeviceProp prop;
  int n = 0;
  FMCall(FMCudaDeviceCount(&n));
  FMCheck(dev >= 0 && dev < n, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Device %d out of range; expected 0 <= dev < %d", dev, n);
  FMCallCUDA(cudaGetDeviceProperties(&prop, dev));
  if (name && namelen) {
    strncpy(name, prop.name, namelen - 1);
    name[namelen - 1] = 0;
  }
  if (busid && buslen) FMCallCUDA(cudaDeviceGetPCIBusId(busid, (int)buslen, dev));
  if (sm) *sm = prop.major * 10 + prop.minor;
  return FM_SUCCESS;
}

/* FMCudaSetDevice - make dev the calling thread's current device. Not collective. */
FMErrorCode FMCudaSetDevice(int dev)
{
  int n = 0;
  FMCall(FMCudaDeviceCount(&n));
  FMCheck(dev >= 0 && dev < n, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Device %d out of range; expected 0 <= dev < %d", dev, n);
  FMCallCUDA(cudaSetDevice(dev));
  return FM_SUCCESS;
}

/*
 * FMCudaForwardPathName - which forward path runs on a device of compute capability sm
 *   (major * 10 + minor) for the shapes it covers ("sm90 wgmma/tma" on Hopper for head dims
 *   64 and 128; "fallback simt" otherwise).
 */
const char *FMCudaForwardPathName(int sm)
{
  if (sm == 90) return "sm90 wgmma/tma (d = 64, 128; fallback simt for other head dims)";
  return "fallback simt";
}

/* ------------------------------------------------------------------ mask prepass */

/*
 * One CTA per (key block, mask head), FM_GPU_BLOCK_N threads: pack the four bounds of each
 * column (fully masked padding past seqlen_k) and reduce the block's 8 summary numbers over
 * its real columns.
 */
__global__ void __launch_bounds__(FM_GPU_BLOCK_N) fm_mask_prepass(const int32_t *bnd, int Sq, int Sk, int H, int nblk,
                                                                   int causal, int4 *packed, int32_t *sum, int2 *vis,
                                                                   int *simple)
{
  __shared__ int red[FM_GPU_BLOCK_N / 32][FM_SUM_N];
  const int kb = blockIdx.x, h = blockIdx.y, t = threadIdx.x;
  const int j = kb * FM_GPU_BLOCK_N + t;
  int4 v;
  int mn[4], mx[4];
  if (j < Sk) {
    const size_t o = (size_t)h * Sk + j, vs = (size_t)H * Sk;
    v = make_int4(bnd[o], bnd[vs + o], bnd[2 * vs + o], bnd[3 * vs + o]);
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

/*
 * FMCudaMaskUpload - copy the mask's bound vectors to the current device and build there the
 *   kernels' view of them: packed per-column bounds and block summaries at the kernels'
 *   key-block size (FM_GPU_BLOCK_N). Not collective; synchronous (it completes before return).
 *   m    the mask (host pointers; m->summary is not used: the GPU builds its own)
 *   dev  out: opaque handle for FMCudaForward, to free with FMCudaMaskFree
 */
FMErrorCode FMCudaMaskUpload(const FMMaskDesc *m, void **dev)
{
  FMCudaMask *d;
  size_t n;
  FMValidPointer(m, 1);
  FMValidPointer(dev, 2);
  FMCheck(m->seqlen_q > 0 && m->seqlen_k > 0 && m->mask_heads > 0, MPI_COMM_SELF, FM_ERR_ARG_SIZ,
          "Mask sizes seqlen_q = %d, seqlen_k = %d, mask_heads = %d; expected all positive", m->seqlen_q, m->seqlen_k,
          m->mask_heads);
  for (int v = 0; v < 4; v++)
    FMCheck(m->bnd[v] != NULL, MPI_COMM_SELF, FM_ERR_ARG_NULL, "Mask bound vector %d is NULL; expected all four set", v);
  FMCall(FMCalloc(1, &d));
  d->seqlen_q = m->seqlen_q;
  d->seqlen_k = m->seqlen_k;
  d->mask_heads = m->mask_heads;
  d->causal = m->causal;
  d->nblk = (m->seqlen_k + FM_GPU_BLOCK_N - 1) / FM_GPU_BLOCK_N;
  n = (size_t)m->mask_heads * m->seqlen_k;
  if (cudaMalloc((void **)&d->bnd, 4 * n * sizeof(int32_t)) != cudaSuccess ||
      cudaMalloc((void **)&d->packed, (size_t)m->mask_heads * d->nblk * FM_GPU_BLOCK_N * sizeof(int4)) != cudaSuccess ||
      cudaMalloc((void **)&d->sum, (size_t)m->mask_heads * d->nblk * FM_SUM_N * sizeof(int32_t)) != cudaSuccess ||
      cudaMalloc((void **)&d->vis, (size_t)m->mask_heads * d->nblk * FM_GPU_BLOCK_N * sizeof(int2)) != cudaSuccess ||
      cudaMalloc((void **)&d->simple, (size_t)m->mask_heads * d->nblk * sizeof(int)) != cudaSuccess) {
    (void)cudaGetLastError();
    FMCudaMaskFree(d);
    FMRaise(MPI_COMM_SELF, FM_ERR_MEM, "Cannot allocate %zu bytes of device memory for the mask", 24 * n);
  }
  for (int v = 0; v < 4; v++) FMCallCUDA(cudaMemcpy(d->bnd + v * n, m->bnd[v], n * sizeof(int32_t), cudaMemcpyHostToDevice));
  fm_mask_prepass<<<dim3(d->nblk, m->mask_heads), FM_GPU_BLOCK_N>>>(d->bnd, m->seqlen_q, m->seqlen_k, m->mask_heads, d->nblk,
                                                                     m->causal, d->packed, d->sum, d->vis, d->simple);
  FMCallCUDA(cudaGetLastError());
  FMCallCUDA(cudaDeviceSynchronize());
  *dev = d;
  return FM_SUCCESS;
}

/* FMCudaMaskFree - release a handle from FMCudaMaskUpload (NULL is fine). Not collective. */
FMErrorCode FMCudaMaskFree(void *dev)
{
  FMCudaMask *d = (FMCudaMask *)dev;
  if (!d) return FM_SUCCESS;
  cudaFree(d->bnd);
  cudaFree(d->packed);
  cudaFree(d->sum);
  cudaFree(d->vis);
  cudaFree(d->simple);
  free(d);
  return FM_SUCCESS;
}

/* ------------------------------------------------------------------ fallback kernel */

struct FallbackParams {
  const void *q, *k, *v;
  void *o;
  float *o32; /* non-NULL: fp32 output here instead of o */
  int merge;  /* with o32: merge into (o32, lse) through the LSE */
  float *lse;
  const int4 *packed;
  const int32_t *sum;
  int Sq, Sk, Hq, Hkv, D, mask_heads, causal, nblk;
  float c; /* scale * log2(e) */
};

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
template <typename T, int DPL> __global__ void __launch_bounds__(128, 4) fm_fwd_fallback(const FallbackParams p)
{
  __shared__ float qs[4][32 * DPL];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int i = blockIdx.x * 4 + warp, hq = blockIdx.y, b = blockIdx.z;
  if (i >= p.Sq) return;
  const int hkv = hq / (p.Hq / p.Hkv), mh = hq / (p.Hq / p.mask_heads), D = p.D, off = p.Sk - p.Sq;
  const T *q = (const T *)p.q + (((size_t)b * p.Sq + i) * p.Hq + hq) * D;
  const T *kb0 = (const T *)p.k + ((size_t)b * p.Sk * p.Hkv + hkv) * D;
  const T *vb0 = (const T *)p.v + ((size_t)b * p.Sk * p.Hkv + hkv) * D;
  const size_t kstride = (size_t)p.Hkv * D;
  const int32_t *sumh = p.sum + (size_t)mh * p.nblk * FM_SUM_N;
  const int4 *bnd = p.packed + (size_t)mh * p.nblk * FM_GPU_BLOCK_N;
  for (int d = lane; d < 32 * DPL; d += 32) qs[warp][d] = d < D ? to_f(q[d]) * p.c : 0.f;
  __syncwarp();
  float acc[DPL];
#pragma unroll
  for (int t = 0; t < DPL; t++) acc[t] = 0.f;
  float m = -INFINITY, l = 0.f;
  for (int kb = 0; kb < p.nblk; kb++) {
    const int cls = FMClassifyTileInline(sumh, p.causal, p.Sq, p.Sk, FM_GPU_BLOCK_N, i, i + 1, kb);
    if (cls == FM_TILE_SKIP) continue;
    for (int j0 = kb * FM_GPU_BLOCK_N; j0 < (kb + 1) * FM_GPU_BLOCK_N && j0 < p.Sk; j0 += 32) {
      const int j = j0 + lane;
      float s = -INFINITY;
      bool vis = j < p.Sk;
      if (vis && cls == FM_TILE_PARTIAL) {
        const int4 bb = bnd[j];
        vis = !((i >= bb.x && i < bb.y) || (i >= bb.z && i < bb.w) || (p.causal && j > i + off));
      }
      if (vis) {
        const T *kr = kb0 + (size_t)j * kstride;
        float a = 0.f;
        for (int d = 0; d < D; d++) a += qs[warp][d] * to_f(kr[d]);
        s = a;
      }
      float mx = s;
      for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
      const float mnew = fmaxf(m, mx);
      if (mnew == -INFINITY) continue; /* nothing visible yet */
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
        const T *vr = vb0 + (size_t)(j0 + jj) * kstride;
#pragma unroll
        for (int t = 0; t < DPL; t++) {
          const int d = lane + 32 * t;
          if (d < D) acc[t] += pb * to_f(vr[d]);
        }
      }
    }
  }
  const size_t oo = (((size_t)b * p.Sq + i) * p.Hq + hq) * D, lo = ((size_t)b * p.Hq + hq) * p.Sq + i;
  float inv = l > 0.f ? 1.f / l : 0.f, wa = 0.f, lse = l > 0.f ? (m + log2f(l)) * 0.6931471805599453f : -INFINITY;
  if (p.o32 && p.merge) { /* exact merge with the accumulated (O, LSE) through the LSE */
    const float la = p.lse[lo], mm = fmaxf(la, lse);
    __syncwarp();
    if (mm == -INFINITY) inv = 0.f;
    else {
      const float ea = expf(la - mm), eb = expf(lse - mm), s = ea + eb;
      wa = ea / s;
      inv *= eb / s;
      lse = mm + logf(s);
    }
  }
#pragma unroll
  for (int t = 0; t < DPL; t++) {
    const int d = lane + 32 * t;
    if (d < D) {
      if (p.o32) p.o32[oo + d] = acc[t] * inv + (wa != 0.f ? wa * p.o32[oo + d] : 0.f);
      else ((T *)p.o)[oo + d] = from_f<T>(acc[t] * inv);
    }
  }
  if (lane == 0) p.lse[lo] = lse;
}

template <typename T> static cudaError_t launch_fallback(const FallbackParams &fp, int B, cudaStream_t st)
{
  dim3 grid((fp.Sq + 3) / 4, fp.Hq, B);
  if (fp.D <= 64) fm_fwd_fallback<T, 2><<<grid, 128, 0, st>>>(fp);
  else if (fp.D <= 128) fm_fwd_fallback<T, 4><<<grid, 128, 0, st>>>(fp);
  else fm_fwd_fallback<T, 8><<<grid, 128, 0, st>>>(fp);
  return cudaGetLastError();
}

/* ------------------------------------------------------------------ dispatch */

/* Which path the last FMCudaForward call took (for tests and fmbench): 1 sm90, 0 fallback. */
extern "C" { int FMCudaLastPath_Private = -1; }

/* The forward of FMCudaForward / FMCudaForwardF32: o (dtype) or o32 (fp32) receives O. */
static FMErrorCode forward_impl(const FMAttnProblem *p, const void *dmask, const void *q, const void *k, const void *v, void *o,
                                float *o32, int merge, float *lse, void *stream)
{
  const FMCudaMask *dm = (const FMCudaMask *)dmask;
  cudaStream_t st = (cudaStream_t)stream;
  int dev = 0, major = 0, minor = 0;
  const char *force;
  FMCheck(p->qrows == NULL && p->k0 == 0, MPI_COMM_SELF, FM_ERR_SUP,
          "The CUDA forward takes whole (or localized) problems only; got qrows %s and k0 = %d", p->qrows ? "set" : "NULL", p->k0);
  FMCheck(p->nq == dm->seqlen_q && p->nk == dm->seqlen_k, MPI_COMM_SELF, FM_ERR_ARG_SIZ,
          "Problem rows nq = %d, keys nk = %d do not match the uploaded mask (%d x %d)", p->nq, p->nk, dm->seqlen_q,
          dm->seqlen_k);
  FMCheck(p->dtype == FM_DTYPE_BF16 || p->dtype == FM_DTYPE_FP16, MPI_COMM_SELF, FM_ERR_SUP,
          "CUDA forward dtype %d not supported; expected bf16 or fp16", (int)p->dtype);
  FMCheck(p->head_dim >= 1 && p->head_dim <= 256 && p->head_dim % 8 == 0, MPI_COMM_SELF, FM_ERR_SUP,
          "Head dim %d not supported on the GPU; expected a multiple of 8 up to 256", p->head_dim);
  FMCheck(p->batch >= 1 && p->batch <= 65535 && p->heads_q >= 1 && p->heads_q <= 65535 && p->heads_kv >= 1 &&
            p->heads_q % p->heads_kv == 0 && p->heads_q % dm->mask_heads == 0,
          MPI_COMM_SELF, FM_ERR_ARG_SIZ,
          "batch = %d, heads_q = %d, heads_kv = %d, mask heads = %d: expected heads_q a multiple of heads_kv and of the mask heads",
          p->batch, p->heads_q, p->heads_kv, dm->mask_heads);
  FMCheck(p->scale > 0.f, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Softmax scale %g; expected > 0", (double)p->scale);
  FMCallCUDA(cudaGetDevice(&dev));
  FMCallCUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  FMCallCUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  force = getenv("FM_CUDA_FORCE_FALLBACK");
  if (major == 9 && minor == 0 && !(force && force[0] == '1')) {
    FMSm90Args a;
    a.q = q;
    a.k = k;
    a.v = v;
    a.o = o;
    a.o32 = o32;
    a.merge = merge;
    a.lse = lse;
    a.batch = p->batch;
    a.seqlen_q = p->nq;
    a.seqlen_k = p->nk;
    a.heads_q = p->heads_q;
    a.heads_kv = p->heads_kv;
    a.head_dim = p->head_dim;
    a.fp16 = p->dtype == FM_DTYPE_FP16;
    a.scale = p->scale;
    a.packed = dm->packed;
    a.sum = dm->sum;
    a.vis = dm->vis;
    a.simple = dm->simple;
    a.mask_heads = dm->mask_heads;
    a.causal = dm->causal;
    a.nblk = dm->nblk;
    if (FMSm90ForwardSupported(&a)) {
      FMCallCUDA(FMSm90Forward(&a, st));
      FMCudaLastPath_Private = 1;
      return FM_SUCCESS;
    }
  }
  {
    FallbackParams fp;
    fp.q = q;
    fp.k = k;
    fp.v = v;
    fp.o = o;
    fp.o32 = o32;
    fp.merge = merge;
    fp.lse = lse;
    fp.packed = dm->packed;
    fp.sum = dm->sum;
    fp.Sq = p->nq;
    fp.Sk = p->nk;
    fp.Hq = p->heads_q;
    fp.Hkv = p->heads_kv;
    fp.D = p->head_dim;
    fp.mask_heads = dm->mask_heads;
    fp.causal = dm->causal;
    fp.nblk = dm->nblk;
    fp.c = p->scale * 1.4426950408889634f;
    if (p->dtype == FM_DTYPE_FP16) FMCallCUDA(launch_fallback<__half>(fp, p->batch, st));
    else FMCallCUDA(launch_fallback<__nv_bfloat16>(fp, p->batch, st));
    FMCudaLastPath_Private = 0;
  }
  return FM_SUCCESS;
}

/*
 * FMCudaForward - masked attention forward of the whole problem on the current device,
 *   asynchronously on stream (no device-wide synchronization). Not collective.
 *   p      problem: qrows must be NULL, k0 = 0, nq = mask seqlen_q, nk = mask seqlen_k;
 *          dtype bf16 or fp16; heads_q a multiple of heads_kv and of the mask heads
 *   dmask  handle from FMCudaMaskUpload for p->mask
 *   q, k, v, o, lse  device pointers, layouts as in fmkernels.h
 *   stream cudaStream_t (NULL = default stream)
 *   Chooses the Hopper kernel on sm_90 for head dims 64 and 128, else the SIMT fallback.
 *   The environment variable FM_CUDA_FORCE_FALLBACK=1 forces the fallback (for tests).
 */
FMErrorCode FMCudaForward(const FMAttnProblem *p, const void *dmask, const void *q, const void *k, const void *v, void *o,
                          float *lse, void *stream)
{
  FMValidPointer(p, 1);
  FMValidPointer(dmask, 2);
  FMValidPointer(q, 3);
  FMValidPointer(k, 4);
  FMValidPointer(v, 5);
  FMValidPointer(o, 6);
  FMValidPointer(lse, 7);
  FMCall(forward_impl(p, dmask, q, k, v, o, NULL, 0, lse, stream));
  return FM_SUCCESS;
}

/*
 * FMCudaForwardF32 - as FMCudaForward over the uploaded key columns, but O is fp32 in o32
 *   ([batch][nq][heads_q][head_dim], device). merge = 0: (o32, lse) are overwritten; merge = 1:
 *   they hold an accumulated result over other keys, and this part is merged into it exactly
 *   through the LSE in the kernel's epilogue. Asynchronous on stream. Not collective.
 */
FMErrorCode FMCudaForwardF32(const FMAttnProblem *p, const void *dmask, const void *q, const void *k, const void *v, float *o32,
                             int merge, float *lse, void *stream)
{
  FMValidPointer(p, 1);
  FMValidPointer(dmask, 2);
  FMValidPointer(q, 3);
  FMValidPointer(k, 4);
  FMValidPointer(v, 5);
  FMValidPointer(o32, 6);
  FMValidPointer(lse, 7);
  FMCall(forward_impl(p, dmask, q, k, v, NULL, o32, merge != 0, lse, stream));
  return FM_SUCCESS;
}

/* ------------------------------------------------------------------ partial results */

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

/*
 * FMCudaConvertOut - dst[i] = src[i] rounded to t (bf16 or fp16), n elements, device memory,
 *   asynchronously on stream. Not collective.
 */
FMErrorCode FMCudaConvertOut(const float *src, void *dst, FMDType t, size_t n, void *stream)
{
  FMCheck(t == FM_DTYPE_BF16 || t == FM_DTYPE_FP16, MPI_COMM_SELF, FM_ERR_SUP, "dtype %d; expected bf16 or fp16", (int)t);
  if (n == 0) return FM_SUCCESS;
  fm_convert_out<<<1024, 256, 0, (cudaStream_t)stream>>>(src, dst, n, t == FM_DTYPE_FP16);
  FMCallCUDA(cudaGetLastError());
  return FM_SUCCESS;
}

/* FMCudaFillFloat - p[0..n) = x (device memory), asynchronously on stream. Not collective. */
FMErrorCode FMCudaFillFloat(float *p, size_t n, float x, void *stream)
{
  if (n == 0) return FM_SUCCESS;
  fm_fill_f32<<<1024, 256, 0, (cudaStream_t)stream>>>(p, n, x);
  FMCallCUDA(cudaGetLastError());
  return FM_SUCCESS;
}

/* ------------------------------------------------------------------ benchmark helper */

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
 *   in [-amp, amp) from seed, asynchronously on stream. For fmbench (never zeros). Not collective.
 */
extern "C" FMErrorCode FMCudaFillRandom_Private(void *p, size_t n, FMDType t, unsigned long long seed, float amp, void *stream)
{
  FMCheck(t == FM_DTYPE_BF16 || t == FM_DTYPE_FP16, MPI_COMM_SELF, FM_ERR_SUP, "dtype %d; expected bf16 or fp16", (int)t);
  fm_fill_random<<<1024, 256, 0, (cudaStream_t)stream>>>(p, n, t == FM_DTYPE_FP16, seed, amp);
  FMCallCUDA(cudaGetLastError());
  return FM_SUCCESS;
}
