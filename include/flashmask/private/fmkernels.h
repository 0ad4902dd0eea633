/*
 * fmkernels.h - private interface between FMPlan and the compute backends.
 * Not installed. Plain C structs and raw pointers, so that the CPU reference, the
 * Hopper kernels and the distributed executor share one description of a problem.
 */
#ifndef FLASHMASK_PRIVATE_FMKERNELS_H
#define FLASHMASK_PRIVATE_FMKERNELS_H

#include <flashmask.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * The mask as the kernels see it (global coordinates; borrowed pointers).
 * bnd[v] + h * seqlen_k is head h's vector v (v = 0..3: lts, lte, uts, ute). present: the
 * FM_BOUND_* bits of the vectors the mask carries; a clear bit promises default form
 * (LTS = LTE = seqlen_q, UTS = UTE = 0). The CPU kernels read all four vectors (absent ones in
 * default form, as the library's masks keep them); the GPU upload reads only those present
 * names and may be given NULL for the others. Descriptors built by hand say 15 unless they know
 * better. summary + (h * nblocks_k + kb) * 8 holds the block summary (see FM_SUM_* in
 * fmtile.h).
 */
typedef struct FMMaskDesc_s {
  int seqlen_q, seqlen_k, mask_heads, causal, present;
  int mask_batch;          /* <= 1: one set of bounds for every sample; else the batch (bounds per sample) */
  const int32_t *bnd[4];   /* [mask_batch][mask_heads][seqlen_k]: row (mask_batch > 1 ? b : 0) * mask_heads + head */
  int block, nblocks_k;
  const int32_t *summary;
} FMMaskDesc;

/*
 * FMKernelOptions - the kernels' tuning and diagnostic switches, read once from the options
 * database by FMContextSetFromOptions into the context and passed down in every FMAttnProblem
 * (the kernels read no environment). Zero means the default.
 *   cuda_fallback     -fm_cuda_fallback: 1 runs the SIMT fallback even where the Hopper kernel
 *                     covers the shape (tests)
 *   sm90_vdesc_swap   -fm_sm90_vdesc_swap: 1 swaps the Hopper kernel's V descriptor strides (a
 *                     diagnostic of the descriptor convention; gives wrong results otherwise)
 *   sm90_schedule     -fm_sm90_schedule auto|grid|static|dynamic: how the Hopper forward (d = 64,
 *                     128) assigns its query tiles: one CTA each (grid), or one persistent CTA
 *                     per SM taking tiles in turn (static) or from an atomic counter (dynamic);
 *                     FM_GPU_SCHED_* (fmtile.h). The default, auto (the one non-zero default:
 *                     FMContextCreate sets it), is resolved by the plan from its mask; the
 *                     kernels run the grid for an unresolved auto
 *   sm90_ctas         -fm_sm90_ctas: the persistent forward's CTA count at most (0: one per SM;
 *                     tests run few CTAs so that each runs many tiles)
 *   sm90_auto_keys    -fm_sm90_auto_keys: auto's threshold, the mean keys per query tile at or
 *                     below which it chooses the persistent forward (0: FM_GPU_SCHED_AUTO_KEYS)
 *   sm90_bwd_rows     -fm_sm90_bwd_rows 0|64|80|128: the Hopper backward's query rows per step
 *                     (FMGpuBwdParams.step_rows): 80 at d = 128 and 128 at d = 64 where set
 *                     (other head dims, or a value the head dim does not take, run 64); 0, auto,
 *                     is resolved by the plan from its mask at FMPlanSetUp
 *                     (FMSm90ChooseBwdRows_Private: 80 or 128 where that wastes few rows), else
 *                     left to the kernel (FMGpuBwdStepRows: 80 or 128 on masks without bound
 *                     vectors, else 64)
 *   cpu_vector_width  -fm_cpu_vector_width 4|8|16: the CPU kernels' vector width when this CPU
 *                     runs it (0: the widest it runs)
 *   cpu_stage_bytes   -fm_cpu_stage_bytes: the CPU forward/backward's fp32 staging budget per call
 *                     in bytes (0: 256 MiB)
 *   deterministic     the plan's -fm_deterministic (FMPlanSetDeterministic), copied into each
 *                     problem by the plan: 1 makes the backward bitwise reproducible from run to
 *                     run (the GPU adds dQ's partials in a fixed order; the CPU sums in a fixed
 *                     order whatever the threads' schedule)
 */
typedef struct {
  int cuda_fallback;
  int sm90_vdesc_swap;
  int sm90_schedule;
  int sm90_ctas;
  int sm90_auto_keys;
  int sm90_bwd_rows;
  int cpu_vector_width;
  size_t cpu_stage_bytes;
  int deterministic;
} FMKernelOptions;

/*
 * One attention problem, possibly a piece of a bigger one (for context parallelism):
 * nq local query rows whose global indices are qrows[0..nq) (NULL = rows 0..nq-1), against
 * the key columns [k0, k0 + nk) of the global sequence.
 * Layouts: q, o, do: [batch][nq][heads_q][head_dim]; k, v: [batch][nk][heads_kv][head_dim];
 * lse: float [batch][heads_q][nq].
 */
typedef struct {
  int batch, heads_q, heads_kv, head_dim;
  FMDType dtype;          /* of q, k, v, do */
  float scale;
  int nq; const int *qrows;
  int k0, nk;
  FMMaskDesc mask;
  int nthreads;           /* CPU threads, <= 0 = OpenMP default */
  FMKernelOptions opts;   /* the context's kernel options (zero: defaults) */
} FMAttnProblem;

/*
 * FMPlanGetProblem_Private - the whole problem of a set-up plan as one FMAttnProblem: all
 *   seqlen_q rows (qrows NULL) against all seqlen_k keys, with the plan's shape, dtype, scale,
 *   mask, thread count and its context's kernel options. Not collective. On the CUDA backend
 *   p->mask.summary is NULL (the bounds only: the GPU prepass builds its own summaries).
 */
FMErrorCode FMPlanGetProblem_Private(FMPlan plan, FMAttnProblem *p);

/*
 * FMCPUForward - exact forward over the problem's key columns.
 *   o        out: [batch][nq][heads_q][head_dim] in o_dtype (FM_DTYPE_FP32 for partial
 *            results that will be merged)
 *   lse      out: float [batch][heads_q][nq]; -inf (and O = 0) for rows with no visible key
 */
FMErrorCode FMCPUForward(const FMAttnProblem *p, const void *q, const void *k, const void *v,
                         void *o, FMDType o_dtype, float *lse);

/*
 * FMCPUMergePartial - merge a partial result (o_part, lse_part; fp32) into an accumulated
 *   one (o_acc, lse_acc; fp32) exactly through the LSE. Shapes as in FMCPUForward.
 */
FMErrorCode FMCPUMergePartial(const FMAttnProblem *p, float *o_acc, float *lse_acc,
                              const float *o_part, const float *lse_part);

/*
 * FMCPUBackward - exact backward over the problem's key columns, given the FINAL o and lse
 *   of the whole row set (so pieces over disjoint key ranges add up exactly).
 *   o, dout           dtype, layout of q
 *   dq_acc            in/out float [batch][nq][heads_q][head_dim]: dQ is ADDED to it
 *   dk, dv            out: [batch][nk][heads_kv][head_dim] in g_dtype (FP32 for pieces
 *                     that will be reduced)
 */
FMErrorCode FMCPUBackward(const FMAttnProblem *p, const void *q, const void *k, const void *v,
                          const void *o, const float *lse, const void *dout,
                          float *dq_acc, void *dk, void *dv, FMDType g_dtype);

/*
 * FMCPUFindNonFinite - the index of the first NaN or Inf among x[0..n) (host memory, type t),
 *   or n when every element is finite, in *first. Not collective; multithreaded (nthreads > 0
 *   threads, else the OpenMP default). For -fm_check_finite (plan.c).
 * FMCudaFindNonFinite - the same for device memory: a scan kernel on stream, waited for.
 */
FMErrorCode FMCPUFindNonFinite(const void *x, size_t n, FMDType t, int nthreads, size_t *first);
FMErrorCode FMCudaFindNonFinite(const void *x, size_t n, FMDType t, void *stream, size_t *first);

/* Element conversions: FMToFloat and FMFromFloat, public (flashmask.h, included above). */

/* ---------------- CUDA (src/kernels/sm90, only with FM_HAVE_CUDA) ---------------- */
/* FMCallCUDA(expr): wrap a CUDA runtime call (for files that include cuda_runtime_api.h). */
#define FMCallCUDA(expr)                                                             \
  do {                                                                               \
    cudaError_t fm_cerr_ = (expr);                                                   \
    if (fm_cerr_ != cudaSuccess)                                                     \
      FMRaise(MPI_COMM_SELF, FM_ERR_CUDA, "CUDA error in %s: %s (%s)", #expr, cudaGetErrorName(fm_cerr_), cudaGetErrorString(fm_cerr_)); \
  } while (0)

/* FMCallCUDAGoto(expr): the goto-to-cleanup form (see FMCallGoto in fmimpl.h). */
#define FMCallCUDAGoto(expr)                                                         \
  do {                                                                               \
    cudaError_t fm_cerr_ = (expr);                                                   \
    if (fm_cerr_ != cudaSuccess) {                                                   \
      ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_CUDA, "CUDA error in %s: %s (%s)", #expr, \
                             cudaGetErrorName(fm_cerr_), cudaGetErrorString(fm_cerr_));  \
      goto cleanup;                                                                  \
    }                                                                                \
  } while (0)

/*
 * FMCudaMaskUpload - copy the bound vectors m->present names to the current device and build
 *   the kernels' summaries there (the others take their defaults unread).
 *   *dev receives an opaque handle to free with FMCudaMaskFree.
 */
FMErrorCode FMCudaMaskUpload(const FMMaskDesc *m, void **dev);
FMErrorCode FMCudaMaskFree(void *dev);
/*
 * FMCudaMaskUpdate - a mask into dev (a handle of FMCudaMaskUpload, maybe of other sizes) in
 *   place when its buffers are large enough, ordered on stream after the work already queued
 *   there; no allocation and no device-wide synchronization (the re-planning update path).
 *   *done = 0 and nothing changed when they are too small (then free and upload again).
 *   threads: host threads for the copy of the bounds into pinned staging (<= 1: one).
 */
FMErrorCode FMCudaMaskUpdate(const FMMaskDesc *m, int threads, void *dev, void *stream, int *done);
/*
 * FMCudaMaskStage - let FMCudaMaskUpdate copy a handle's new bounds through pinned host
 *   staging: one asynchronous copy, with no host wait, instead of one copy from pageable memory
 *   per vector carried (up to four). Pins two buffers of the bounds' capacity (16 bytes per mask row and key) when that
 *   is at most FM_GPU_STAGE_MAX (32 MiB); larger masks, or no pinned memory, keep the pageable
 *   copies (not an error). The allocation synchronizes streams implicitly: call it right after
 *   FMCudaMaskUpload, for a handle that will be updated in place every step. Not collective.
 */
FMErrorCode FMCudaMaskStage(void *dev);
/* FMCudaMaskStaged_Private - 1 when the handle's updates copy through pinned staging, else 0
   (tests). Not collective. */
int FMCudaMaskStaged_Private(const void *dev);

/*
 * FMCudaForward - forward on the current device, asynchronously on stream.
 *   p->qrows must be NULL and k0 = 0 (whole problem); q, k, v, o, lse are device pointers;
 *   dmask from FMCudaMaskUpload. Chooses the Hopper kernel on sm_90, else a fallback (always
 *   the fallback with p->opts.cuda_fallback).
 */
FMErrorCode FMCudaForward(const FMAttnProblem *p, const void *dmask, const void *q, const void *k,
                          const void *v, void *o, float *lse, void *stream);
/*
 * FMCudaForwardF32 - as FMCudaForward but O is fp32 in o32. merge = 0 overwrites (o32, lse);
 *   merge = 1 merges this part (the uploaded key columns) into the accumulated (o32, lse) of
 *   other keys, exactly through the LSE, in the kernel's epilogue. Asynchronous on stream.
 */
FMErrorCode FMCudaForwardF32(const FMAttnProblem *p, const void *dmask, const void *q, const void *k,
                             const void *v, float *o32, int merge, float *lse, void *stream);
/*
 * FMCudaBackward - dq, dk, dv of the whole problem on the current device, asynchronously on
 *   stream (no device-wide synchronization, no host staging). Not collective.
 *   p      problem: qrows NULL, k0 = 0, nq/nk the uploaded mask's sizes; bf16 or fp16
 *   dmask  handle from FMCudaMaskUpload for p->mask
 *   q, k, v, o, lse, dout  device inputs (o and lse from the forward); layouts as above
 *   dq, dk, dv             device outputs, overwritten
 *   stream cudaStream_t (NULL = default stream)
 *   The Hopper kernel on sm_90 for head dims 64 and 128, the SIMT fallback otherwise
 *   (p->opts.cuda_fallback forces it). Its scratch comes from the stream-ordered allocator.
 */
FMErrorCode FMCudaBackward(const FMAttnProblem *p, const void *dmask, const void *q, const void *k,
                           const void *v, const void *o, const float *lse, const void *dout,
                           void *dq, void *dk, void *dv, void *stream);
/*
 * The backward in pieces, for context parallelism: the local rows of one backward against the
 * keys of several stages, one piece per stage, all on one stream and in a fixed order (the
 * same order gives bitwise the same dq). Not collective; asynchronous on stream.
 * FMCudaBackwardPiecesBytes - device scratch bytes for the rows of p (batch, heads, nq,
 *   head_dim; the keys do not matter): the rows' D and log2 LSE and dQ's fp32 accumulator.
 * FMCudaBackwardBegin - D = rowsum(dO o O) and the log2 LSE of the rows from the FINAL o and
 *   lse (over every key), and dQ's accumulator zeroed, into ws (FMCudaBackwardPiecesBytes
 *   bytes of device memory, 256-byte aligned, kept until FMCudaBackwardEnd).
 * FMCudaBackwardPiece - one piece: the rows of Begin (q, dout as given to Begin's o/lse)
 *   against the p->nk keys k, v ([batch][nk][heads_kv][head_dim], dtype) under dmask (the
 *   uploaded nq x nk stage mask); dQ is added into ws's accumulator; dk32, dv32 (float,
 *   [batch][nk][heads_kv][head_dim], device) are overwritten with this piece's dK (times the
 *   scale, as FMCudaBackward's) and dV, for the caller to reduce.
 * FMCudaBackwardEnd - dq (dtype, layout of q) = the accumulator times the scale.
 */
size_t FMCudaBackwardPiecesBytes(const FMAttnProblem *p);
FMErrorCode FMCudaBackwardBegin(const FMAttnProblem *p, void *ws, const void *o, const float *lse, const void *dout,
                                void *stream);
FMErrorCode FMCudaBackwardPiece(const FMAttnProblem *p, const void *dmask, void *ws, const void *q, const void *k,
                                const void *v, const void *dout, float *dk32, float *dv32, void *stream);
FMErrorCode FMCudaBackwardEnd(const FMAttnProblem *p, void *ws, void *dq, void *stream);
/* Which backward path runs these sizes on the current device ("sm90 wgmma/tma, 80-row steps",
   "..., 128-row steps" or "..., 64-row steps" (FMGpuBwdStepRows; "..., 64-row steps, dQ first
   stores" where FMGpuBwdFirstStore), "fallback simt"). */
const char *FMCudaBackwardPathName(const FMAttnProblem *p);
/* FMCudaConvertOut - dst = src (n fp32 device elements) rounded to t (bf16/fp16); async on stream. */
FMErrorCode FMCudaConvertOut(const float *src, void *dst, FMDType t, size_t n, void *stream);
/* FMCudaFillFloat - p[0..n) = x on the device, asynchronously on stream. */
FMErrorCode FMCudaFillFloat(float *p, size_t n, float x, void *stream);

/* FMCudaDeviceCount - number of visible devices: 0 when there is no device or no driver at all,
   FM_ERR_CUDA on any other CUDA failure (a broken driver is an error, not "no GPU"). */
FMErrorCode FMCudaDeviceCount(int *ndev);
/* FMCudaDeviceInfo - properties of one device. */
FMErrorCode FMCudaDeviceInfo(int dev, char *name, size_t namelen, char *busid, size_t buslen, int *sm);
FMErrorCode FMCudaSetDevice(int dev);
/*
 * CUDA resource helpers (src/kernels/cudamem.c), on the current device. Streams and events are
 * cudaStream_t / cudaEvent_t passed as void * (NULL = the default stream). Not collective.
 * Every Destroy/Free accepts NULL.
 *   FMCudaMalloc, FMCudaFree         device memory (bytes = 0 allocates a valid 1-byte block);
 *                                    FM_ERR_MEM when the device is full
 *   FMCudaHostAlloc, FMCudaHostFree  pinned (page-locked) host memory, for staged transfers
 *   FMCudaMemcpyD2H, FMCudaMemcpyH2D copy on stream and wait for it (synchronous)
 *   FMCudaStreamCreate               a non-blocking stream; high_priority = 1 gives it the
 *                                    device's highest priority (exchange streams whose kernels
 *                                    must not queue behind the attention kernels), 0 the lowest
 *   FMCudaStreamWaitEvent            later work on stream waits for event (asynchronous)
 *   FMCudaStreamSynchronize          the host waits for the stream
 *   FMCudaEventCreate/Destroy        an event with timing
 *   FMCudaEventRecord                record event on stream
 *   FMCudaEventSynchronize           the host waits for the event
 *   FMCudaEventElapsed               seconds from start to end (both recorded and completed)
 */
FMErrorCode FMCudaMalloc(size_t bytes, void **p);
FMErrorCode FMCudaFree(void *p);
FMErrorCode FMCudaHostAlloc(size_t bytes, void **p);
FMErrorCode FMCudaHostFree(void *p);
FMErrorCode FMCudaMemcpyD2H(void *dst, const void *src, size_t bytes, void *stream);
FMErrorCode FMCudaMemcpyH2D(void *dst, const void *src, size_t bytes, void *stream);
FMErrorCode FMCudaStreamCreate(int high_priority, void **stream);
FMErrorCode FMCudaStreamDestroy(void *stream);
FMErrorCode FMCudaStreamWaitEvent(void *stream, void *event);
FMErrorCode FMCudaStreamSynchronize(void *stream);
FMErrorCode FMCudaEventCreate(void **event);
FMErrorCode FMCudaEventDestroy(void *event);
FMErrorCode FMCudaEventRecord(void *event, void *stream);
FMErrorCode FMCudaEventSynchronize(void *event);
FMErrorCode FMCudaEventElapsed(void *start, void *end, double *seconds);
/* FMCudaIsDevicePointer - whether p is device (or managed) memory; 0 for host memory. */
int FMCudaIsDevicePointer(const void *p);
/* Which forward path runs on this device ("sm90 wgmma/tma", "fallback simt", ...). */
const char *FMCudaForwardPathName(int sm);

#ifdef __cplusplus
}
#endif
#endif
