/*
 * cuda.cu - the CUDA backend's host entry points (fmkernels.h): device queries, the mask
 * upload, the forward dispatch and the partial-result helpers. The one place where the kernel
 * layer (fmgpu.cuh: cuda_mask.cu, simt/, sm90/, all returning cudaError_t) meets the library:
 * arguments are checked here, FMGpuFwdParams is filled here once, and every cudaError_t is
 * mapped to an FMErrorCode here.
 */
#include <cuda_runtime.h>
#include <stdlib.h>
#include <string.h>
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include "fmgpu.cuh"
#include "sm90/fwd_sm90.cuh"
#include <flashmask/private/fmbwd.h>

/* ------------------------------------------------------------------ devices */

/*
 * FMCudaDeviceCount - number of CUDA devices visible to this process. Not collective.
 *   0 (and success) only when there is none to find: no device (cudaErrorNoDevice, also an
 *   empty CUDA_VISIBLE_DEVICES) or no driver installed at all (cudaErrorInsufficientDriver
 *   with cudaDriverGetVersion giving 0). Any other failure (a driver older than the runtime, a
 *   broken installation, a device in a bad state) is FM_ERR_CUDA with CUDA's error name, so
 *   that a broken machine is an error, not "no GPU".
 *   ndev  out: the count
 */
FMErrorCode FMCudaDeviceCount(int *ndev)
{
  int n = 0, drv = -1;
  cudaError_t e;
  FMValidPointer(ndev, 1);
  *ndev = 0;
  e = cudaGetDeviceCount(&n);
  if (e == cudaSuccess) {
    *ndev = n;
    return FM_SUCCESS;
  }
  (void)cudaGetLastError();
  if (e == cudaErrorNoDevice) return FM_SUCCESS;
  if (e == cudaErrorInsufficientDriver && cudaDriverGetVersion(&drv) == cudaSuccess && drv == 0) return FM_SUCCESS;
  (void)cudaGetLastError();
  FMRaise(MPI_COMM_SELF, FM_ERR_CUDA, "CUDA error in cudaGetDeviceCount: %s (%s)%s", cudaGetErrorName(e), cudaGetErrorString(e),
          e == cudaErrorInsufficientDriver ? "; a CUDA driver is installed but older than this build's runtime" : "");
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
 *   64, 128 and 256, on wider tiles where the mask has no bound vectors; "fallback simt"
 *   otherwise).
 */
const char *FMCudaForwardPathName(int sm)
{
  if (sm == 90) return "sm90 wgmma/tma (d = 64, 128, 256; without bound vectors 80-key tiles at d = 256, 176 at d = 128 on the grid; fallback simt for other head dims)";
  return "fallback simt";
}

/* ------------------------------------------------------------------ mask */

/* Every bound vector m->present names is there (the others are not read). */
static FMErrorCode check_carried(const FMMaskDesc *m)
{
  for (int v = 0; v < 4; v++)
    FMCheck(!((m->present >> v) & 1) || m->bnd[v] != NULL, MPI_COMM_SELF, FM_ERR_ARG_NULL,
            "Mask bound vector %d is NULL but the mask's present bits (%d) name it", v, m->present);
  return FM_SUCCESS;
}

/*
 * FMCudaMaskUpload - copy the bound vectors the mask carries (m->present; the others take their
 *   defaults on the device, unread and uncopied) to the current device and build there the
 *   kernels' view of them (cuda_mask.cu): packed per-column bounds and block summaries at the
 *   kernels' key-block size (FM_GPU_BLOCK_N). Not collective; synchronous (it completes before
 *   return).
 *   m    the mask (host pointers; m->summary is not used: the GPU builds its own)
 *   dev  out: opaque handle for FMCudaForward, to free with FMCudaMaskFree
 */
FMErrorCode FMCudaMaskUpload(const FMMaskDesc *m, void **dev)
{
  FMGpuMask *d = NULL;
  cudaError_t e;
  FMValidPointer(m, 1);
  FMValidPointer(dev, 2);
  FMCheck(m->seqlen_q > 0 && m->seqlen_k > 0 && m->mask_heads > 0, MPI_COMM_SELF, FM_ERR_ARG_SIZ,
          "Mask sizes seqlen_q = %d, seqlen_k = %d, mask_heads = %d; expected all positive", m->seqlen_q, m->seqlen_k,
          m->mask_heads);
  FMCall(check_carried(m));
  e = FMGpuMaskCreate(m->seqlen_q, m->seqlen_k, m->mask_heads, m->mask_batch, m->causal, m->present, m->bnd, &d);
  if (e == cudaErrorMemoryAllocation)
    FMRaise(MPI_COMM_SELF, FM_ERR_MEM, "Cannot allocate %zu bytes of device memory for the mask",
            (size_t)24 * m->mask_heads * (m->mask_batch > 1 ? m->mask_batch : 1) * m->seqlen_k);
  FMCallCUDA(e);
  *dev = d;
  return FM_SUCCESS;
}

/*
 * FMCudaMaskUpdate - a new mask into a handle of FMCudaMaskUpload whose buffers are large
 *   enough, in place, ordered on stream after the work queued there (no allocation, no
 *   device-wide synchronization); the host copy into pinned staging on threads host threads.
 *   Not collective. *done = 0 (nothing changed) when they are
 *   too small: the caller then frees and uploads again.
 */
FMErrorCode FMCudaMaskUpdate(const FMMaskDesc *m, int threads, void *dev, void *stream, int *done)
{
  cudaError_t e;
  FMValidPointer(m, 1);
  FMValidPointer(done, 4);
  *done = 0;
  if (!dev) return FM_SUCCESS;
  FMCall(check_carried(m));
  e = FMGpuMaskUpdate((FMGpuMask *)dev, m->seqlen_q, m->seqlen_k, m->mask_heads, m->mask_batch, m->causal, m->present, m->bnd,
                      FMMaskCopyBounds_Private, threads > 1 ? threads : 1, (cudaStream_t)stream, done);
  FMCallCUDA(e);
  return FM_SUCCESS;
}

/* FMCudaMaskStage - see fmkernels.h. */
FMErrorCode FMCudaMaskStage(void *dev)
{
  FMValidPointer(dev, 1);
  FMGpuMaskStage((FMGpuMask *)dev);
  return FM_SUCCESS;
}

/* FMCudaMaskStaged_Private - see fmkernels.h. */
int FMCudaMaskStaged_Private(const void *dev) { return dev && ((const FMGpuMask *)dev)->stage[0] != NULL; }

/* FMCudaMaskFree - release a handle from FMCudaMaskUpload (NULL is fine). Not collective. */
FMErrorCode FMCudaMaskFree(void *dev)
{
  FMGpuMaskDestroy((FMGpuMask *)dev);
  return FM_SUCCESS;
}

/* ------------------------------------------------------------------ dispatch */

/* Which path the last FMCudaForward call took (for tests and fmbench): 1 sm90 (one CTA per
   tile), 2 sm90 persistent (-fm_sm90_schedule static or dynamic), 3 sm90 wide (a mask without
   bound vectors: d = 256, and d = 128 on the grid), 0 fallback (FM_SM90_FWD_*, fwd_sm90.cuh). */
extern "C" { int FMCudaLastPath_Private = -1; }

/*
 * The kernels' parameters of one forward, filled once: pointers, the element strides of
 * today's layouts (fmkernels.h), sizes, scale and the uploaded mask.
 */
static void fill_params(const FMAttnProblem *p, const FMGpuMask *dm, const void *q, const void *k, const void *v, void *o,
                        float *o32, int merge, float *lse, FMGpuFwdParams *gp)
{
  FMGpuFwdParamsDense(gp, dm, p->batch, p->nq, p->nk, p->nk, p->heads_q, p->heads_kv, p->head_dim, p->dtype == FM_DTYPE_FP16, p->scale,
                      p->opts.sm90_vdesc_swap, q, k, v, o, o32, merge, lse);
  gp->schedule = p->opts.sm90_schedule == FM_GPU_SCHED_AUTO ? FM_GPU_SCHED_GRID : p->opts.sm90_schedule; /* unresolved: the grid */
  gp->ctas = p->opts.sm90_ctas;
}

/* The forward of FMCudaForward / FMCudaForwardF32: o (dtype) or o32 (fp32) receives O. */
static FMErrorCode forward_impl(const FMAttnProblem *p, const void *dmask, const void *q, const void *k, const void *v, void *o,
                                float *o32, int merge, float *lse, void *stream)
{
  const FMGpuMask *dm = (const FMGpuMask *)dmask;
  FMGpuFwdParams gp;
  cudaStream_t st = (cudaStream_t)stream;
  int dev = 0, major = 0, minor = 0;
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
  FMCheck(dm->mask_batch == 1 || dm->mask_batch == p->batch, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
          "The uploaded mask has mask_batch %d; expected 1 or the problem's batch %d", dm->mask_batch, p->batch);
  fill_params(p, dm, q, k, v, o, o32, merge, lse, &gp);
  FMCallCUDA(cudaGetDevice(&dev));
  FMCallCUDA(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  FMCallCUDA(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  if (major == 9 && minor == 0 && !p->opts.cuda_fallback && FMSm90ForwardSupported(&gp)) {
    int path = 0;
    FMCallCUDA(FMSm90Forward(&gp, st, &path));
    FMCudaLastPath_Private = path;
    return FM_SUCCESS;
  }
  FMCallCUDA(FMGpuFallbackForward(&gp, st));
  FMCudaLastPath_Private = 0;
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
 *   Chooses the Hopper kernel on sm_90 for head dims 64, 128 and 256, else the SIMT fallback.
 *   p->opts.cuda_fallback (-fm_cuda_fallback) forces the fallback (for tests).
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

/* ------------------------------------------------------------------ backward */

/* Fill the backward kernels' parameters from a whole problem and its uploaded mask. */
static void fill_bwd(FMGpuBwdParams *a, const FMAttnProblem *p, const FMGpuMask *dm)
{
  const long long D = p->head_dim;
  const FMGpuStrides sq = {(long long)p->nq * p->heads_q * D, (long long)p->heads_q * D, D};
  const FMGpuStrides sk = {(long long)p->nk * p->heads_kv * D, (long long)p->heads_kv * D, D};
  memset(a, 0, sizeof(*a));
  a->sq = a->so = a->sdo = a->sdq = sq;
  a->sk = a->sv = a->sdk = a->sdv = sk;
  a->batch = p->batch; a->seqlen_q = p->nq; a->seqlen_k = p->nk;
  a->heads_q = p->heads_q; a->heads_kv = p->heads_kv; a->head_dim = p->head_dim;
  a->fp16 = p->dtype == FM_DTYPE_FP16; a->scale = p->scale;
  a->packed = dm->packed; a->sum = dm->sum; a->mask_heads = dm->mask_heads; a->causal = dm->causal; a->nblk = dm->nblk;
  a->mask_batch = dm->mask_batch;
  a->mask_dense = dm->present == 0;
  a->force_fallback = p->opts.cuda_fallback != 0;
  a->deterministic = p->opts.deterministic != 0;
  a->step_rows = p->opts.sm90_bwd_rows; /* 0: FMGpuBwdStepRows' choice */
}

/* FMCudaBackward - see fmkernels.h. */
FMErrorCode FMCudaBackward(const FMAttnProblem *p, const void *dmask, const void *q, const void *k, const void *v,
                           const void *o, const float *lse, const void *dout, void *dq, void *dk, void *dv, void *stream)
{
  const FMGpuMask *dm = (const FMGpuMask *)dmask;
  cudaStream_t st = (cudaStream_t)stream;
  FMGpuBwdParams a;
  void *ws = NULL;
  cudaError_t e;
  FMValidPointer(p, 1);
  FMValidPointer(dmask, 2);
  FMCheck(p->qrows == NULL && p->k0 == 0 && p->nq == dm->seqlen_q && p->nk == dm->seqlen_k, MPI_COMM_SELF, FM_ERR_SUP,
          "The CUDA backward takes whole problems only; got qrows %s, k0 = %d, nq = %d, nk = %d (mask %d x %d)",
          p->qrows ? "set" : "NULL", p->k0, p->nq, p->nk, dm->seqlen_q, dm->seqlen_k);
  FMCheck(p->dtype == FM_DTYPE_BF16 || p->dtype == FM_DTYPE_FP16, MPI_COMM_SELF, FM_ERR_SUP,
          "The CUDA backward runs bf16 and fp16; the problem's dtype is %s", FMDTypeName(p->dtype));
  FMCheck(dm->mask_batch == 1 || dm->mask_batch == p->batch, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
          "The uploaded mask has mask_batch %d; expected 1 or the problem's batch %d", dm->mask_batch, p->batch);
  fill_bwd(&a, p, dm);
  a.q = q; a.k = k; a.v = v; a.o = o; a.dout = dout; a.lse = lse; a.dq = dq; a.dk = dk; a.dv = dv;
  FMCheck(FMGpuBackwardPath(&a) >= 0 && dm->nblk == (p->nk + FM_GPU_BLOCK_N - 1) / FM_GPU_BLOCK_N, MPI_COMM_SELF, FM_ERR_SUP,
          "The CUDA backward does not cover head_dim %d, heads %d/%d, mask heads %d, scale %g (head_dim a multiple of 8 up "
          "to 256, heads_q a multiple of heads_kv and of the mask heads, scale > 0)",
          p->head_dim, p->heads_q, p->heads_kv, dm->mask_heads, (double)p->scale);
  FMCallCUDA(cudaMallocAsync(&ws, FMGpuBackwardWorkspace(&a), st));
  a.workspace = ws;
  e = FMGpuBackward(&a, st);
  (void)cudaFreeAsync(ws, st);
  FMCallCUDA(e);
  return FM_SUCCESS;
}

/* The rows of p only (Begin, End, the workspace's size, none of which depends on the keys): one
   key block of one key stands in for the keys. */
static void rows_only(FMGpuBwdParams *a, const FMAttnProblem *p)
{
  FMGpuMask m;
  memset(&m, 0, sizeof(m));
  m.mask_heads = p->mask.mask_heads > 0 ? p->mask.mask_heads : 1; m.seqlen_q = p->nq; m.seqlen_k = 1; m.nblk = 1;
  m.mask_batch = 1;
  fill_bwd(a, p, &m);
  a->seqlen_k = 1;
}

/* The pieces' sizes: the rows of p against p->nk keys under the uploaded stage mask dm (NULL: rows only). */
static FMErrorCode pieces_params(FMGpuBwdParams *a, const FMAttnProblem *p, const FMGpuMask *dm)
{
  FMValidPointer(p, 1);
  FMCheck(p->qrows == NULL && p->k0 == 0, MPI_COMM_SELF, FM_ERR_SUP,
          "The CUDA backward's pieces take the rows 0..nq-1 of an uploaded stage mask; got qrows %s, k0 = %d",
          p->qrows ? "set" : "NULL", p->k0);
  FMCheck(p->dtype == FM_DTYPE_BF16 || p->dtype == FM_DTYPE_FP16, MPI_COMM_SELF, FM_ERR_SUP,
          "The CUDA backward runs bf16 and fp16; the problem's dtype is %s", FMDTypeName(p->dtype));
  if (!dm) rows_only(a, p); /* Begin and End */
  else {
    FMCheck(p->nq == dm->seqlen_q && p->nk == dm->seqlen_k && (dm->mask_batch == 1 || dm->mask_batch == p->batch),
            MPI_COMM_SELF, FM_ERR_ARG_INCOMP, "The piece has nq = %d, nk = %d, batch %d; its stage mask is %d x %d, mask_batch %d",
            p->nq, p->nk, p->batch, dm->seqlen_q, dm->seqlen_k, dm->mask_batch);
    fill_bwd(a, p, dm);
  }
  FMCheck(FMGpuBackwardPath(a) >= 0, MPI_COMM_SELF, FM_ERR_SUP,
          "The CUDA backward does not cover head_dim %d, heads %d/%d, mask heads %d, scale %g (head_dim a multiple of 8 up "
          "to 256, heads_q a multiple of heads_kv and of the mask heads, scale > 0)",
          p->head_dim, p->heads_q, p->heads_kv, a->mask_heads, (double)p->scale);
  return FM_SUCCESS;
}

/* FMCudaBackwardPiecesBytes - see fmkernels.h. */
size_t FMCudaBackwardPiecesBytes(const FMAttnProblem *p)
{
  FMGpuBwdParams a;
  rows_only(&a, p);
  return FMGpuBackwardWorkspace(&a);
}

/* FMCudaBackwardBegin - see fmkernels.h. */
FMErrorCode FMCudaBackwardBegin(const FMAttnProblem *p, void *ws, const void *o, const float *lse, const void *dout, void *stream)
{
  FMGpuBwdParams a;
  FMCall(pieces_params(&a, p, NULL));
  FMValidPointer(ws, 2);
  a.o = o; a.lse = lse; a.dout = dout; a.workspace = ws;
  FMCheck(o && lse && dout && !((uintptr_t)ws & 255), MPI_COMM_SELF, FM_ERR_ARG_NULL,
          "FMCudaBackwardBegin needs o, lse, dout and a 256-byte aligned ws (o %p, lse %p, dout %p, ws %p)", o, (const void *)lse,
          dout, ws);
  FMCallCUDA(FMGpuBackwardBegin(&a, (cudaStream_t)stream));
  return FM_SUCCESS;
}

/* FMCudaBackwardPiece - see fmkernels.h. */
FMErrorCode FMCudaBackwardPiece(const FMAttnProblem *p, const void *dmask, void *ws, const void *q, const void *k, const void *v,
                                const void *dout, float *dk32, float *dv32, void *stream)
{
  FMGpuBwdParams a;
  const long long D = p->head_dim;
  const FMGpuStrides s32 = {(long long)p->nk * p->heads_kv * D, (long long)p->heads_kv * D, D};
  FMValidPointer(dmask, 2);
  FMValidPointer(ws, 3);
  FMCall(pieces_params(&a, p, (const FMGpuMask *)dmask));
  a.q = q; a.k = k; a.v = v; a.dout = dout; a.dk = dk32; a.dv = dv32; a.workspace = ws;
  a.sdk = a.sdv = s32;
  a.dkv_f32 = 1;
  FMCheck(q && k && v && dout && dk32 && dv32, MPI_COMM_SELF, FM_ERR_ARG_NULL,
          "FMCudaBackwardPiece needs q, k, v, dout, dk32, dv32 (q %p, k %p, v %p, dout %p, dk32 %p, dv32 %p)", q, k, v, dout,
          (void *)dk32, (void *)dv32);
  FMCallCUDA(FMGpuBackwardPiece(&a, (cudaStream_t)stream));
  return FM_SUCCESS;
}

/* FMCudaBackwardEnd - see fmkernels.h. */
FMErrorCode FMCudaBackwardEnd(const FMAttnProblem *p, void *ws, void *dq, void *stream)
{
  FMGpuBwdParams a;
  FMCall(pieces_params(&a, p, NULL));
  FMValidPointer(ws, 2);
  FMValidPointer(dq, 3);
  a.workspace = ws; a.dq = dq;
  FMCallCUDA(FMGpuBackwardEnd(&a, (cudaStream_t)stream));
  return FM_SUCCESS;
}

/* FMCudaBackwardPathName - see fmkernels.h. */
const char *FMCudaBackwardPathName(const FMAttnProblem *p)
{
  FMGpuBwdParams a;
  FMGpuMask m;
  memset(&m, 0, sizeof(m));
  m.mask_heads = p->mask.mask_heads; m.causal = p->mask.causal; m.seqlen_q = p->nq; m.seqlen_k = p->nk;
  m.nblk = (p->nk + FM_GPU_BLOCK_N - 1) / FM_GPU_BLOCK_N;
  m.present = p->mask.present; /* as the upload records it: the step rows follow */
  fill_bwd(&a, p, &m);
  switch (FMGpuBackwardPath(&a)) {
  case 1: {
    const int bm = FMGpuBwdStepRows(&a);
    if (bm != 64) return bm == 80 ? "sm90 wgmma/tma, 80-row steps" : "sm90 wgmma/tma, 128-row steps";
    if (a.head_dim == 256) return "sm90 wgmma/tma, 64-row steps, 64-key items";
    return FMGpuBwdFirstStore(&a) ? "sm90 wgmma/tma, 64-row steps, dQ first stores" : "sm90 wgmma/tma, 64-row steps";
  }
  case 0: return "fallback simt";
  default: return "not supported";
  }
}

/* ------------------------------------------------------------------ partial results */

/*
 * FMCudaConvertOut - dst[i] = src[i] rounded to t (bf16 or fp16), n elements, device memory,
 *   asynchronously on stream. Not collective.
 */
FMErrorCode FMCudaConvertOut(const float *src, void *dst, FMDType t, size_t n, void *stream)
{
  FMCheck(t == FM_DTYPE_BF16 || t == FM_DTYPE_FP16, MPI_COMM_SELF, FM_ERR_SUP, "dtype %d; expected bf16 or fp16", (int)t);
  FMCallCUDA(FMGpuConvertOut(src, dst, t == FM_DTYPE_FP16, n, (cudaStream_t)stream));
  return FM_SUCCESS;
}

/* FMCudaFillFloat - p[0..n) = x (device memory), asynchronously on stream. Not collective. */
FMErrorCode FMCudaFillFloat(float *p, size_t n, float x, void *stream)
{
  FMCallCUDA(FMGpuFillFloat(p, n, x, (cudaStream_t)stream));
  return FM_SUCCESS;
}

/*
 * FMCudaFindNonFinite - the index of the first NaN or Inf of x[0..n) (device memory, type t),
 *   or n when there is none, in *first. Runs a scan kernel on stream and waits for it. Not
 *   collective.
 */
FMErrorCode FMCudaFindNonFinite(const void *x, size_t n, FMDType t, void *stream, size_t *first)
{
  cudaStream_t st = (cudaStream_t)stream;
  unsigned long long *d = NULL, h = (unsigned long long)n;
  cudaError_t e;
  FMErrorCode ierr = FM_SUCCESS;
  *first = n;
  if (n == 0) return FM_SUCCESS;
  FMCheck(t == FM_DTYPE_BF16 || t == FM_DTYPE_FP16 || t == FM_DTYPE_FP32, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "dtype %d; expected bf16, fp16 or fp32",
          (int)t);
  FMCallCUDA(cudaMallocAsync((void **)&d, sizeof(*d), st));
  e = cudaMemcpyAsync(d, &h, sizeof(h), cudaMemcpyHostToDevice, st);
  if (e == cudaSuccess) e = FMGpuFindNonFinite(x, n, t == FM_DTYPE_FP32 ? 4 : t == FM_DTYPE_FP16 ? 3 : 2, d, st);
  if (e == cudaSuccess) e = cudaMemcpyAsync(&h, d, sizeof(h), cudaMemcpyDeviceToHost, st);
  (void)cudaFreeAsync(d, st);
  if (e == cudaSuccess) e = cudaStreamSynchronize(st);
  if (e != cudaSuccess)
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_CUDA, "CUDA error scanning for non-finite values: %s (%s)",
                           cudaGetErrorName(e), cudaGetErrorString(e));
  else *first = h < n ? (size_t)h : n;
  return ierr;
}
