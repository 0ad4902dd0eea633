/*
 * fwd_sm90.cuh - interface between cuda.cu (dispatch, mask prepass) and the Hopper forward
 * kernel in fwd_sm90.cu. Host-side declarations only.
 */
#pragma once
#include <stdint.h>
#include <cuda_runtime_api.h>

/* Key-block size of every GPU kernel: the prepass builds its summaries at this size. */
#define FM_GPU_BLOCK_N 128

typedef struct {
  const void *q, *k, *v;  /* [B][S][H][D], dtype */
  void *o;                /* [B][Sq][Hq][D], dtype */
  float *o32;             /* NULL, or [B][Sq][Hq][D] fp32: O goes here instead of o (partials to merge) */
  int merge;              /* with o32: merge into (o32, lse), exactly through the LSE, instead of overwriting */
  float *lse;             /* [B][Hq][Sq] */
  int batch, seqlen_q, seqlen_k, heads_q, heads_kv, head_dim;
  int fp16;               /* 0 = bf16, 1 = fp16 */
  float scale;
  /* mask (device): packed[h][nblk * FM_GPU_BLOCK_N] = {lts, lte, uts, ute} per key column, padding
     columns past seqlen_k fully masked; sum[h][nblk][8] block summaries (FM_SUM_* order). */
  const int4 *packed;
  const int32_t *sum;
  const int2 *vis;        /* [h][nblk * FM_GPU_BLOCK_N] one-interval visible rows per column (see cuda.cu) */
  const int *simple;      /* [h][nblk] whether every column of the block has one visible interval */
  int mask_heads, causal, nblk;
} FMSm90Args;

/*
 * FMSm90ForwardSupported - whether the Hopper kernel covers these arguments (head dim, sizes,
 *   shared-memory need); FMSm90Forward - launch it on stream. Returns a cudaError_t
 *   (cudaErrorNotSupported when not covered; nothing is launched then).
 */
int FMSm90ForwardSupported(const FMSm90Args *a);
cudaError_t FMSm90Forward(const FMSm90Args *a, cudaStream_t stream);
