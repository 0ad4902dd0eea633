/*
 * flashmask.h - umbrella header of libflashmask.
 *
 * libflashmask computes masked scaled-dot-product attention whose mask is stored
 * per key column as row intervals (LTS/LTE/UTS/UTE, the FlashMask format), on
 * Hopper GPUs and on an exact multithreaded CPU backend, and plans
 * mask-aware context parallelism over an MPI communicator.
 *
 * Objects (opaque, reference counted, PETSc style):
 *   FMContext  communicator, topology, backend and device choice
 *   FMMask     column-bound mask plus its per-block summaries
 *   FMPlan     an attention problem (shape, dtype, scale, mask) ready to run
 *
 * Every function that can fail returns an FMErrorCode (FM_SUCCESS is 0); the few that cannot
 * (FMErrorString, FMGetLastErrorMessage, FMToFloat, FMDTypeSize, ...) return their value.
 * Outputs never alias inputs: a tensor passed as an output must not overlap any input.
 */
#ifndef FLASHMASK_H
#define FLASHMASK_H

/* The API in four parts (include/flashmask/), each including the one before. */
#include <flashmask/fmsys.h>
#include <flashmask/fmcontext.h>
#include <flashmask/fmmask.h>
#include <flashmask/fmplan.h>

#endif
