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
 *   (p->schedule asks for it, d = 64 or 128, and its shared memory fits) or _WIDE (a mask without
 *   bound vectors: d = 256 on 80-key tiles, d = 128 on 176-key tiles under the grid schedule;
 *   no block list). Returns a cudaError_t
 *   (cudaErrorNotSupported when not covered; nothing is launched then, *path is 0).
 */
/* -DFM_SM90_WIDE256=0: d = 256 takes the 64-key kernel on every mask; -DFM_SM90_WIDE128=0: d = 128
   takes the 128-key kernel on every mask, not the wide kernel's 176-key tiles where the mask has
   no bound vectors (A/B; the harness reads both too) */
#ifndef FM_SM90_WIDE256
#define FM_SM90_WIDE256 1
#endif
#ifndef FM_SM90_WIDE128
#define FM_SM90_WIDE128 1
#endif
enum { FM_SM90_FWD_GRID = 1, FM_SM90_FWD_PERSISTENT = 2, FM_SM90_FWD_WIDE = 3 };
int FMSm90ForwardSupported(const FMGpuFwdParams *p);
cudaError_t FMSm90Forward(const FMGpuFwdParams *p, cudaStream_t stream, int *path);
