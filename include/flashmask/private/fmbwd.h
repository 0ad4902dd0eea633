/*
 * fmbwd.h - the GPU backward of masked attention as a plain-C entry point (no MPI, no library
 * objects): the Hopper kernel (src/kernels/sm90/bwd_sm90.cu) with its preprocess, postprocess,
 * SIMT fallback and dispatch (src/kernels/cuda_bwd.cu). Not installed.
 *
 * Math (per batch b, query head h with kv head h / (Hq / Hkv), row i, key j):
 *   P_ij = exp(scale * q_i.k_j - lse_i) on visible (i, j), 0 elsewhere;
 *   dP_ij = do_i.v_j;  D_i = do_i.o_i;  dS_ij = P_ij (dP_ij - D_i);
 *   dv_j = sum_i P_ij do_i;  dk_j = scale sum_i dS_ij q_i;  dq_i = scale sum_j dS_ij k_j.
 *   dK and dV sum over the query heads of each kv head (GQA). Rows with lse = -inf (nothing
 *   visible) contribute nothing; their dq is 0.
 * The mask is the device form built by the CUDA backend's prepass (cuda.cu, FMCudaMaskUpload):
 *   key j visible to row i iff i is outside [lts_j, lte_j) and [uts_j, ute_j) and, when causal,
 *   j <= i + seqlen_k - seqlen_q (bottom-right aligned diagonal).
 */
#ifndef FLASHMASK_PRIVATE_FMBWD_H
#define FLASHMASK_PRIVATE_FMBWD_H

#include <stddef.h>
#include <stdint.h>
#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Key-block size of the device mask summaries (the CUDA prepass's FM_GPU_BLOCK_N). */
#define FMBWD_BLOCK_N 128

/* A [batch][seq][heads][head_dim] tensor: element (b, s, h, d) at base + b*sb + s*ss + h*sh + d. */
typedef struct {
  long long sb, ss, sh; /* element strides; head_dim is contiguous */
} FMGpuStrides;

typedef struct {
  /* inputs (device, dtype): q, o, dout [B][Sq][Hq][D]; k, v [B][Sk][Hkv][D]; lse float [B][Hq][Sq]
     (natural log, -inf for rows with nothing visible) */
  const void *q, *k, *v, *o, *dout;
  const float *lse;
  /* outputs (device, dtype): dq like q, dk and dv like k. Overwritten (never accumulated). */
  void *dq, *dk, *dv;
  FMGpuStrides sq, sk, sv, so, sdo, sdq, sdk, sdv;
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  int fp16;    /* 0 = bf16, 1 = fp16 */
  float scale; /* softmax scale (> 0) */
  /* device mask (as FMSm90Args in fwd_sm90.cuh): packed[mh][nblk*128] = {lts, lte, uts, ute} per key
     column, padding columns fully masked; sum[mh][nblk][8] summaries in FM_SUM_* order */
  const int4 *packed;
  const int32_t *sum;
  int mask_heads, causal, nblk;
  int mask_batch; /* > 1: packed and sum hold mask_batch * mask_heads rows, row b * mask_heads + mask head; else
                     mask_heads rows shared by every sample (0 reads as 1) */
  /* scratch of FMGpuBackwardWorkspace bytes, 256-byte aligned, device; contents need not be kept */
  void *workspace;
  int force_fallback; /* 1: the SIMT kernels even where the Hopper kernel applies (tests) */
  int dkv_f32;        /* 1: dk, dv are float (pieces the caller reduces), with strides sdk, sdv in floats */
  int deterministic;  /* 1: dQ's partials are added in a fixed order (bitwise reproducible) */
  int no_first_store; /* 1: FMGpuBackward zeroes dQ's accumulator before the Hopper kernel instead of
                         letting each block's first writer store (A/B; FMGpuBwdFirstStore) */
  int mask_dense;     /* 1: the mask carries no bound vectors (full, or causal by its flag); 0: it may */
  int step_rows;      /* the Hopper kernel's query rows per step: 0 = its choice (FMGpuBwdStepRows),
                         64, 80 (d = 128 only) or 128 (d = 64 only; elsewhere 64); each piece may
                         take its own (tests, A/B) */
} FMGpuBwdParams;

/*
 * FMGpuBwdStepRows - the query rows per step the Hopper backward takes for a launch: step_rows
 *   when given (80 for d = 128 only, 128 for d = 64 only), else 80 for d = 128 and 128 for d = 64
 *   on a dense mask, else 64. On the H200 at 8K and 32K (2026-12-02) 80 rows at d = 128 ran
 *   1.5-3.1% faster than 64 on full and causal, 8.5% slower on a sliding window and 4.7% on
 *   causal documents, where coarser blocks leave more masked rows inside the visited ones and
 *   more steps are partial. Causal on 64 rows with first stores (FlashAttention-3's and -4's
 *   choice; H100, 2026-12-05, two calls): +2..3% at 8K but -2..-7% at 32K, where a row's 256 key
 *   blocks reach each query block together and wait for its first store, and the deterministic
 *   mode's causal went from 1.29x to 1.38x of the default: not kept. At d = 64 a 64-row step is
 *   short against its fixed work (barriers, row statistics, the dQ hand-over); 128-row steps
 *   split dQ between the consumers by rows.
 *   The one rule for the kernel and its harness.
 */
static inline int FMGpuBwdStepRows(const FMGpuBwdParams *a)
{
  if (a->head_dim == 64) return a->step_rows == 128 || (a->step_rows == 0 && a->mask_dense) ? 128 : 64;
  if (a->head_dim != 128 || a->step_rows == 64) return 64;
  return a->step_rows == 80 || (a->step_rows == 0 && a->mask_dense) ? 80 : 64;
}

/*
 * FMGpuBwdFirstStore - whether FMGpuBackward (one piece) on the Hopper path lets the first writer
 *   of each dQ accumulator block store its partial instead of zeroing the accumulator first: d = 128
 *   on 64-row steps in the default (not deterministic) mode, unless no_first_store. The flags are
 *   the workspace's turn words ((batch, query head, 64-row block) x 4 + column half), which only
 *   the deterministic mode uses otherwise. Measured on an H100 (2026-12-05, bwd_bench ab with and
 *   without BWD_NO_FIRST_STORE): d = 128 sliding window, causal document and share question
 *   +3..+13% at 8K and 32K, full and causal within 1%; d = 64 (H = 64) sliding window +6%, causal
 *   document +2..3%, but full and causal -6..-10%: there every key block of a row reaches a query
 *   block at the same step, and the short d = 64 steps wait for the winner's store to complete.
 *   So d = 64 keeps the zeroing (measured on 64-row steps, before full and causal at d = 64 moved
 *   to 128-row steps; not tried there). The one rule for the kernel, the library's path name and
 *   the harness.
 */
static inline int FMGpuBwdFirstStore(const FMGpuBwdParams *a)
{
  return !a->no_first_store && !a->deterministic && a->head_dim == 128 && FMGpuBwdStepRows(a) == 64;
}

/* FMGpuBackwardWorkspace - device scratch bytes FMGpuBackward needs for these sizes. */
size_t FMGpuBackwardWorkspace(const FMGpuBwdParams *p);

/*
 * FMGpuBackward - dq, dk, dv of the problem, asynchronously on stream s (no synchronization):
 *   a preprocess (D = rowsum(dO o O), the log2 LSE, dQ's fp32 accumulator zeroed), the main
 *   kernel, a postprocess (dQ to dtype). Where FMGpuBwdFirstStore says so, the accumulator is not
 *   zeroed: the first writer of each dQ block stores its partial, the others add theirs once it
 *   is in place, and the postprocess writes 0 for blocks no key block visited (the zeroing pass
 *   wrote 4 x B x Hq x Sq x D bytes). The Hopper kernel runs on sm_90 for head_dim 64, 128
 *   and 256; other head dims (multiples of 8 up to 256) and other GPUs take the SIMT fallback.
 *   Returns cudaErrorInvalidValue for sizes it cannot take (head_dim, heads not multiples,
 *   strides or pointers misaligned), else the first CUDA error of the launches.
 */
cudaError_t FMGpuBackward(const FMGpuBwdParams *p, cudaStream_t s);

/*
 * The same in pieces (FMGpuBackward is Begin, one Piece, End), for the keys of several stages
 * against the same rows, on one stream and one workspace:
 *   FMGpuBackwardBegin  the preprocess of the rows (reads o, dout, lse) and dQ's accumulator zeroed;
 *   FMGpuBackwardPiece  the main kernel over p's keys (reads q, k, v, dout, the mask); dQ added into
 *                       the accumulator, dk and dv overwritten (float with dkv_f32);
 *   FMGpuBackwardEnd    dq from the accumulator.
 * The workspace size does not depend on seqlen_k: one workspace serves pieces of any key count.
 */
cudaError_t FMGpuBackwardBegin(const FMGpuBwdParams *p, cudaStream_t s);
cudaError_t FMGpuBackwardPiece(const FMGpuBwdParams *p, cudaStream_t s);
cudaError_t FMGpuBackwardEnd(const FMGpuBwdParams *p, cudaStream_t s);

/* FMGpuBackwardPath - which path FMGpuBackward takes for p on the current device:
   1 = sm90 wgmma/tma, 0 = SIMT fallback, -1 = not supported. */
int FMGpuBackwardPath(const FMGpuBwdParams *p);

#ifdef __cplusplus
}
#endif
#endif
