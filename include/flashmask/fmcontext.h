/*
 * flashmask/fmcontext.h - FMContext: the communicator, the topology, the backend and the device.
 * Part of the public API; include <flashmask.h>, which includes every part in order.
 */
#ifndef FLASHMASK_FMCONTEXT_H
#define FLASHMASK_FMCONTEXT_H

#include <flashmask/fmsys.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* FMContext                                                                 */
/* ------------------------------------------------------------------------ */
typedef struct _p_FMContext *FMContext;

/*
 * FMContextCreate - create a context over a communicator. Collective on comm.
 *   comm  the user's communicator; it is duplicated, so library traffic never
 *         matches user messages
 *   ctx   out: the new context
 */
FMErrorCode FMContextCreate(MPI_Comm comm, FMContext *ctx);

/*
 * FMContextSetBackend - choose the compute backend. Not collective (call identically).
 *   ctx      the context
 *   backend  FM_BACKEND_AUTO picks CUDA when a usable GPU is present, otherwise CPU.
 *   Option: -fm_backend auto|cpu|cuda
 */
FMErrorCode FMContextSetBackend(FMContext ctx, FMBackend backend);

/*
 * FMContextSetNumThreads - CPU backend threads per rank. Not collective. Option: -fm_num_threads
 *   ctx       the context
 *   nthreads  >= 0. 0 (the default) is resolved at FMContextSetUp: the cores of the rank's
 *             binding (its hwloc cpuset) divided among the node's ranks bound to the same cores,
 *             at least 1. So unbound ranks share the machine (3 ranks on 2 cores run 1 thread
 *             each, not 2 each), and a rank bound to one core runs one thread (give the launcher
 *             a wider binding, e.g. `mpiexec --bind-to none` or `--bind-to socket`, for more).
 *             When the environment sets OMP_NUM_THREADS, its count, but at most the binding's
 *             hardware threads divided the same way: more threads could only take turns on them
 *             (FMContextView then says what was asked and what is used). A count > 0 given here
 *             is used as given, and one set after FMContextSetUp applies at once.
 */
FMErrorCode FMContextSetNumThreads(FMContext ctx, int nthreads);

/*
 * FMContextSetNCCLTimeout - a time limit for the K/V exchanges over NCCL (context-parallel plans
 *   on the CUDA backend). With seconds > 0, FMPlanForward waits on the host until its exchange
 *   is over, polling NCCL for asynchronous errors (a failed peer or link): on an error, or when
 *   the exchange takes longer than seconds, every rank returns FM_ERR_NCCL and the communicators
 *   are aborted (new ones are made on the next call) instead of leaving the plan's stream waiting
 *   for ever. The compute kernels stay asynchronous. 0 (the default) sets no limit: the call
 *   returns while the exchange runs. Not collective (give every rank the same value).
 *   Option: -fm_nccl_timeout
 *   ctx      the context
 *   seconds  >= 0
 * FMContextGetNCCLTimeout - the limit in seconds (0: none). Not collective.
 */
FMErrorCode FMContextSetNCCLTimeout(FMContext ctx, double seconds);
FMErrorCode FMContextGetNCCLTimeout(FMContext ctx, double *seconds);

/* FMContextSetFromOptions - read -fm_backend, -fm_num_threads, -fm_nccl_timeout, -fm_context_view (and the kernel
 *   options -fm_cuda_fallback, -fm_sm90_vdesc_swap, -fm_sm90_schedule, -fm_sm90_ctas, -fm_sm90_auto_keys,
 *   -fm_sm90_bwd_rows, -fm_cpu_vector_width, -fm_cpu_stage_bytes)
 *   into ctx. Collective; an error on any rank is an error on every rank. */
FMErrorCode FMContextSetFromOptions(FMContext ctx);
/*
 * FMContextSetOptionsPrefix - set the prefix that FMContextSetFromOptions puts after the dash of
 *   every option it reads, so that a program holds several objects with their own options:
 *   with prefix "a_", -fm_backend is read as -a_fm_backend. NULL or "" clears it. The prefix may not
 *   start with '-' or contain blanks. Not collective (give every rank the same prefix).
 *   ctx     the object
 *   prefix  the prefix (copied), or NULL
 * FMContextGetOptionsPrefix - the current prefix (borrowed; NULL when none). Not collective.
 */
FMErrorCode FMContextSetOptionsPrefix(FMContext ctx, const char *prefix);
FMErrorCode FMContextGetOptionsPrefix(FMContext ctx, const char **prefix);

/*
 * FMContextSetUp - detect the topology (hwloc: node, package, NUMA of this rank, GPUs
 *   with PCI bus ids), split node-local ranks (MPI_Comm_split_type), choose a GPU near
 *   this rank's cores when CUDA is present, and resolve the backend. Collective; an
 *   error on any rank is returned on every rank.
 *   On the CUDA backend the chosen GPU becomes the calling thread's current device
 *   (cudaSetDevice): allocate the tensors you pass to FMPlanForward/Backward after this call,
 *   on that device (FMContextView prints it). The CPU backend's default thread count comes from
 *   the cores this rank is bound to (FMContextSetNumThreads).
 *   ctx  the context
 */
FMErrorCode FMContextSetUp(FMContext ctx);

/*
 * FMContextView - print the context ctx (every rank's topology and device) to fp.
 *   Collective; rank 0 prints. fp NULL means stdout.
 */
FMErrorCode FMContextView(FMContext ctx, FILE *fp);

/* FMContextGetComm - comm out: the context ctx's (duplicated) communicator; the context owns
 *   it (do not free it). Not collective. */
FMErrorCode FMContextGetComm(FMContext ctx, MPI_Comm *comm);
/* FMContextGetBackend - backend out: the resolved backend of ctx (after SetUp). Not collective. */
FMErrorCode FMContextGetBackend(FMContext ctx, FMBackend *backend);
/* FMContextGetDevice - device out: the CUDA device ctx chose for this rank, -1 if none.
 *   Not collective. */
FMErrorCode FMContextGetDevice(FMContext ctx, int *device);

/* FMContextDestroy - drop a reference; frees at zero and sets *ctx = NULL. Collective. */
FMErrorCode FMContextDestroy(FMContext *ctx);

#ifdef __cplusplus
}
#endif
#endif
