/*
 * fwd_sm90.cuh - interface between cuda.cu (dispatch) and the Hopper forward kernel in
 * fwd_sm90.cu. Host-side declarations only.
 */
#pragma once
#include "../fmgpu.cuh"

/*
 * FMSm90ForwardSupported - whether the Hopper kernel covers these parameters (head dim, sizes,
 *   strides, alignment, shared-memory need); FMSm90Forward - launch it on stream; *persistent
 *   (NULL allowed) says whether the persistent kernel ran (p->schedule asks for it, d = 64 or
 *   128, and its shared memory fits), else one CTA per tile. Returns a cudaError_t
 *   (cudaErrorNotSupported when not covered; nothing is launched then).
 */
int FMSm90ForwardSupported(const FMGpuFwdParams *p);
cudaError_t FMSm90Forward(const FMGpuFwdParams *p, cudaStream_t stream, int *persistent);
