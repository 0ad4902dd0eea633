/*
 * fmgpu.cuh - the CUDA kernel layer's own interface: the device copy of a mask, the one
 * parameter block of every forward kernel (FMGpuFwdParams), and the launchers behind the
 * dispatch in cuda.cu. Plain CUDA C, no MPI and no flashmask error codes: every entry point
 * returns a cudaError_t and cuda.cu alone maps it to an FMErrorCode. Not installed.
 */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include <cuda_runtime_api.h>
#include <flashmask/private/fmtile.h>

/* The largest bounds (4 x rows x seqlen_k int32) a mask stages through pinned memory for its
   updates (FMGpuMaskStage: two buffers of this size at most are pinned per staged mask). */
#define FM_GPU_STAGE_MAX ((size_t)32 << 20)

/* Key-block size of every GPU kernel: the prepass builds its summaries at this size. */
#define FM_GPU_BLOCK_N 128

/*
 * The device copy of a mask (the handle behind FMCudaMaskUpload's void *): the uploaded bounds
 * and what the prepass (cuda_mask.cu) builds from them at the kernels' key-block size.
 */
typedef struct {
  int seqlen_q, seqlen_k, mask_heads, causal, nblk;
  int mask_batch; /* 1: one set of bounds for every sample; else one per sample (rows = mask_batch * mask_heads) */
  int present;    /* FM_BOUND_* bits of the vectors uploaded; the others hold their defaults */
  /* Below, "rows" = mask_batch * mask_heads: row (mask_batch > 1 ? b : 0) * mask_heads + mask head. */
  int32_t *bnd;   /* [4][rows][seqlen_k]: the present vectors, packed in lts, lte, uts, ute order */
  int4 *packed;   /* [rows][nblk * FM_GPU_BLOCK_N]: {lts, lte, uts, ute}; padding columns fully masked */
  int32_t *sum;   /* [rows][nblk][FM_SUM_N] */
  int2 *vis;      /* [rows][nblk * FM_GPU_BLOCK_N]: visible rows [x, y) of the column (causal included)
                     when they form one interval (padding: [0, 0)) */
  int *simple;    /* [rows][nblk]: 1 if every column of the block has a one-interval visible set */
  size_t cap_bnd, cap_col, cap_blk; /* elements allocated: rows * seqlen_k, rows * nblk * FM_GPU_BLOCK_N, rows * nblk */
  /* FMGpuMaskUpdate's pinned staging (FMGpuMaskStage; NULL without it, where cudaMallocHost
     failed or the bounds exceed FM_GPU_STAGE_MAX bytes: then one pageable copy per vector carried): two buffers
     of 4 * cap_bnd, used in turn, and the events recorded after the copy out of each, so that
     one is rewritten only after its last copy has read it */
  int32_t *stage[2];
  cudaEvent_t staged[2];
  int next_stage;
} FMGpuMask;

/*
 * FMGpuFwdCore - what every forward kernel reads on the device besides the input tensors: the
 *   outputs, the uploaded mask, sizes and scale. The Hopper kernel takes exactly this block by
 *   value; keep it at most 128 bytes (a larger by-value kernel argument makes nvcc address it
 *   through a base register, which reschedules the whole Hopper kernel) and keep this order.
 */
typedef struct {
  void *o;                /* dtype; unused when o32 is set */
  float *o32;             /* NULL, or fp32 O with o's strides (partial results to merge) */
  int merge;              /* with o32: merge into (o32, lse), exactly through the LSE, instead of overwriting */
  float *lse;
  /* mask (device, from FMGpuMask): packed per-column bounds, padding columns past seqlen_k fully
     masked; block summaries (FM_SUM_* order); one-interval visible rows and their block flags */
  const int4 *packed;
  const int32_t *sum;
  const int2 *vis;
  const int *simple;
  int seqlen_q, seqlen_k, heads_q, heads_kv, mask_heads, causal, nblk;
  float scale;            /* softmax scale */
  float scale_log2;       /* scale * log2(e) */
  int mask_batch;         /* > 1: mask row (b, mh) is b * mask_heads + mh; else mh for every sample. It sits in
                             what was the padding before vdesc_hi, so no other field moved (112 bytes, as before) */
  uint64_t vdesc_hi;      /* sm90 only: set by its launcher from FMGpuFwdParams.vdesc_swap */
  /* sm90 persistent kernel only (set by its launcher): the dynamic scheduler's tile counter
     (device, zero at launch; NULL: static round robin) and the batch (the grid no longer gives it) */
  int *sched;
  int batch;
} FMGpuFwdCore;

#ifdef __cplusplus
static_assert(sizeof(FMGpuFwdCore) <= 128, "FMGpuFwdCore is passed by value to the Hopper kernel: keep it within 128 bytes");
#endif

/* The mask row of batch b and query head hq (FMGpuFwdCore or any struct with the same fields). */
#define FM_GPU_MASK_ROW(c, b, hq) (((c).mask_batch > 1 ? (b) * (c).mask_heads : 0) + (hq) / ((c).heads_q / (c).mask_heads))

/*
 * FMGpuFwdParams - one forward's parameters, filled once by cuda.cu and read by the Hopper
 *   launcher (q, k, v strides go into its TMA maps) and by the SIMT fallback (which takes it
 *   whole). Strides are in elements; the head dimension is contiguous. Today's layouts: q, o,
 *   o32 [batch][seqlen_q][heads_q][head_dim], k, v [batch][seqlen_k][heads_kv][head_dim], lse
 *   [batch][heads_q][seqlen_q].
 */
typedef struct {
  FMGpuFwdCore c;
  const void *q, *k, *v;  /* dtype (bf16 or fp16) */
  int64_t q_batch_stride, q_row_stride, q_head_stride;
  int64_t k_batch_stride, k_row_stride, k_head_stride;
  int64_t v_batch_stride, v_row_stride, v_head_stride;
  int64_t o_batch_stride, o_row_stride, o_head_stride; /* o and o32 */
  int64_t lse_batch_stride, lse_head_stride;           /* rows contiguous */
  int batch, head_dim;
  int fp16;               /* 0 = bf16, 1 = fp16 */
  int vdesc_swap;         /* sm90 diagnostic: swap the V descriptor's LBO and SBO (-fm_sm90_vdesc_swap) */
  int schedule;           /* sm90, d = 64 and 128: FM_GPU_SCHED_GRID, _STATIC or _DYNAMIC (-fm_sm90_schedule) */
  int ctas;               /* persistent schedules: at most this many CTAs (0: one per SM; -fm_sm90_ctas) */
  int mask_dense;         /* the mask carries no bound vector (full, or causal by its flag): sm90's wide kernel */
} FMGpuFwdParams;

/* The tile schedules FM_GPU_SCHED_* are in fmtile.h (the plan resolves AUTO). */

/*
 * FMGpuFwdParamsDense - fill gp for today's dense layouts (above) over the device mask dm: the
 *   score matrix is seqlen_q x seqlen_k, one sample of K and V holds k_rows rows (its batch stride;
 *   k_rows > seqlen_k when k, v point into a longer sequence), o or o32 receives O (merge: o32
 *   holds an accumulated result to merge with through lse). The one place the library (cuda.cu)
 *   and the forward harness (share/bench/fwd) fill the parameters.
 */
static inline void FMGpuFwdParamsDense(FMGpuFwdParams *gp, const FMGpuMask *dm, int batch, int seqlen_q, int seqlen_k, int k_rows,
                                       int heads_q, int heads_kv, int head_dim, int fp16, float scale, int vdesc_swap, const void *q,
                                       const void *k, const void *v, void *o, float *o32, int merge, float *lse)
{
  const int64_t D = head_dim;
  memset(gp, 0, sizeof(*gp));
  gp->c.o = o;
  gp->c.o32 = o32;
  gp->c.merge = merge;
  gp->c.lse = lse;
  gp->c.packed = dm->packed;
  gp->c.sum = dm->sum;
  gp->c.vis = dm->vis;
  gp->c.simple = dm->simple;
  gp->c.seqlen_q = seqlen_q;
  gp->c.seqlen_k = seqlen_k;
  gp->c.heads_q = heads_q;
  gp->c.heads_kv = heads_kv;
  gp->c.mask_heads = dm->mask_heads;
  gp->c.mask_batch = dm->mask_batch;
  gp->c.causal = dm->causal;
  gp->c.nblk = dm->nblk;
  gp->mask_dense = dm->present == 0;
  gp->c.scale = scale;
  gp->c.scale_log2 = scale * 1.4426950408889634f;
  gp->q = q;
  gp->k = k;
  gp->v = v;
  gp->q_head_stride = gp->o_head_stride = D;
  gp->q_row_stride = gp->o_row_stride = (int64_t)heads_q * D;
  gp->q_batch_stride = gp->o_batch_stride = (int64_t)seqlen_q * heads_q * D;
  gp->k_head_stride = gp->v_head_stride = D;
  gp->k_row_stride = gp->v_row_stride = (int64_t)heads_kv * D;
  gp->k_batch_stride = gp->v_batch_stride = (int64_t)k_rows * heads_kv * D;
  gp->lse_head_stride = seqlen_q;
  gp->lse_batch_stride = (int64_t)heads_q * seqlen_q;
  gp->batch = batch;
  gp->head_dim = head_dim;
  gp->fp16 = fp16;
  gp->vdesc_swap = vdesc_swap;
}

/* cuda_mask.cu: copy the bound vectors (host, [mask_batch][mask_heads][seqlen_k] each; mask_batch
   <= 1 means 1) that present (FM_BOUND_* bits) names to the current device and run the prepass,
   which gives the others their defaults (LTS = LTE = seqlen_q, UTS = UTE = 0) unread: bnd[v] may
   be NULL for those; synchronous. *out is NULL on error. FMGpuMaskDestroy accepts NULL. */
cudaError_t FMGpuMaskCreate(int seqlen_q, int seqlen_k, int mask_heads, int mask_batch, int causal, int present,
                            const int32_t *const bnd[4], FMGpuMask **out);
void FMGpuMaskDestroy(FMGpuMask *d);
/* A host copy of the carried bound vectors into FMGpuMaskUpdate's staging, on nth threads (the
   library passes FMMaskCopyBounds_Private; this file is not built with OpenMP). */
typedef void (*FMGpuHostCopy)(int32_t *const dst[4], const int32_t *const src[4], size_t n, int nth);
/* FMGpuMaskStage - pin the staging that FMGpuMaskUpdate then copies through (two host buffers
   of the bounds' capacity, when that is at most FM_GPU_STAGE_MAX; nothing when they are already
   there; on failure nothing, and the updates copy from pageable memory). For a handle that will
   be updated with no host wait after the copy (a "local" plan's); the allocation is an implicit
   synchronization point, so call it where the caller synchronizes anyway (after the upload). */
void FMGpuMaskStage(FMGpuMask *d);
/* FMGpuMaskUpdate - a new mask into an existing copy whose buffers are large enough for its sizes
   (else *done = 0 and nothing changed; *done = 1 when it was updated): the sizes set, the bounds that present names copied
   (the others take their defaults, as in FMGpuMaskCreate) and the prepass
   run on stream st, after the work already queued there (which may still read the old mask); no
   allocation, no device-wide synchronization. The host bounds may be reused on return: they are
   copied into a pinned staging buffer, and one copy of it goes to the device (the buffers
   alternate; the host waits only when the copy two updates back has not yet run, i.e. when it is
   more than one update ahead of the stream). copy(dst, src, n, nth) fills the staging buffer
   (dst[v][0..n) = src[v][0..n) where src[v] is not NULL) on nth host threads. */
cudaError_t FMGpuMaskUpdate(FMGpuMask *d, int seqlen_q, int seqlen_k, int mask_heads, int mask_batch, int causal, int present,
                            const int32_t *const bnd[4], FMGpuHostCopy copy, int nth, cudaStream_t st, int *done);

/* simt/fwd_fallback.cu: the plain SIMT forward (any head dim up to 256, any GPU). */
cudaError_t FMGpuFallbackForward(const FMGpuFwdParams *p, cudaStream_t stream);

/* simt/util.cu: elementwise helpers, asynchronous on stream. */
cudaError_t FMGpuConvertOut(const float *src, void *dst, int fp16, size_t n, cudaStream_t stream);
cudaError_t FMGpuFillFloat(float *p, size_t n, float x, cudaStream_t stream);
cudaError_t FMGpuFindNonFinite(const void *x, size_t n, int kind, unsigned long long *first, cudaStream_t stream);
