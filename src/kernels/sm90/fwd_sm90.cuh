/*
 * fwd_sm90.cuh - interface between cuda.cu (dispatch) and the Hopper forward kernel in
 * fwd_sm90.cu. Host-side declarations only.
 */
#pragma once
#include "../fmgpu.cuh"

/*
 * FMSm90ForwardSupported - whether the Hopper kernel covers these parameters (head dim, sizes,
 *   strides, alignment, shared-memory need); FMSm90Forward - launch it on stream; *path (NULL
 *   allowed) says which kernel ran: FM_SM90_FWD_GRID (one CTA per query tile), _PERSISTENT
 *   (p->schedule asks for it, d = 64 or 128, and its shared memory fits) or _WIDE (d = 256 on a
 *   mask without bound vectors: 80-key tiles, no block list). Returns a cudaError_t
 *   (cudaErrorNotSupported when not covered; nothing is launched then, *path is 0).
 */
/* -DFM_SM90_WIDE256=0: d = 256 takes the 64-key kernel on every mask (A/B; the harness reads it too) */
#ifndef FM_SM90_WIDE256
#define FM_SM90_WIDE256 1
#endif
enum { FM_SM90_FWD_GRID = 1, FM_SM90_FWD_PERSISTENT = 2, FM_SM90_FWD_WIDE = 3 };
int FMSm90ForwardSupported(const FMGpuFwdParams *p);
cudaError_t FMSm90Forward(const FMGpuFwdParams *p, cudaStream_t stream, int *path);
