/*
 * nccl.c - NCCL communicators of a context, bootstrapped over its MPI communicator:
 * rank 0 makes the unique id (zeroed on failure), MPI_Bcast, every rank checks for an
 * all-zero id, binds its chosen GPU, and joins; node-local and cross-node (same local
 * index) sub-communicators come from ncclCommSplit. Teardown: finalize then destroy,
 * abort after an error. Built only with NCCL.
 */
#include <flashmask/private/fmimpl.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if FM_HAVE_NCCL
#include <cuda_runtime_api.h>
#include <nccl.h>

#define FMCallNCCL(expr)                                                             \
  do {                                                                               \
    ncclResult_t fm_nr_ = (expr);                                                    \
    if (fm_nr_ != ncclSuccess)                                                       \
      FMRaise(MPI_COMM_SELF, FM_ERR_NCCL, "NCCL error in %s: %s", #expr, ncclGetErrorString(fm_nr_)); \
  } while (0)

typedef struct {
  ncclComm_t world, node, cross;
  int failed;
  long gen; /* which bootstrap of this process made them (never reused, unlike an address) */
} FMNCCL;

static long fm_nccl_gen = 0;

static FMErrorCode join(FMContext ctx, FMNCCL *n, const ncclUniqueId *id)
{
  ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
  cfg.blocking = 1;
  FMCheck(ctx->device >= 0, MPI_COMM_SELF, FM_ERR_SUP, "NCCL needs a GPU on every rank; rank %d has none", ctx->rank);
  if (cudaSetDevice(ctx->device) != cudaSuccess) FMRaise(MPI_COMM_SELF, FM_ERR_CUDA, "cudaSetDevice(%d) failed", ctx->device);
  FMCallNCCL(ncclCommInitRankConfig(&n->world, ctx->size, *id, ctx->rank, &cfg));
  FMCallNCCL(ncclCommSplit(n->world, ctx->node, ctx->node_rank, &n->node, NULL));
  FMCallNCCL(ncclCommSplit(n->world, ctx->node_rank, ctx->node, &n->cross, NULL));
  return FM_SUCCESS;
}

FMErrorCode FMContextGetNCCL_Private(FMContext ctx, void **world, void **node, void **cross)
{
  FMNCCL *n = (FMNCCL *)ctx->nccl;
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMCheckSetUp(ctx, "FMContext");
  if (!n) {
    ncclUniqueId id;
    static const ncclUniqueId zero;
    FMErrorCode ierr = FM_SUCCESS;
    memset(&id, 0, sizeof(id));
    if (ctx->rank == 0 && ncclGetUniqueId(&id) != ncclSuccess) memset(&id, 0, sizeof(id));
    FMCallMPI(MPI_Bcast(&id, (int)sizeof(id), MPI_BYTE, 0, ctx->comm));
    FMCheck(memcmp(&id, &zero, sizeof(id)) != 0, ctx->comm, FM_ERR_NCCL, "ncclGetUniqueId() failed on rank 0 (the broadcast id is all zero)");
    FMCall(FMCalloc(1, &n));
    n->gen = ++fm_nccl_gen;
    ierr = join(ctx, n, &id);
    if (ierr) n->failed = 1;
    ctx->nccl = n;
    FMAgree(ctx->comm, ierr);
  }
  if (world) *world = n->world;
  if (node) *node = n->node;
  if (cross) *cross = n->cross;
  return FM_SUCCESS;
}

/*
 * FMContextNCCLGeneration_Private - an id of the context's current NCCL communicators, new
 * after every bootstrap (0 when there are none). Not collective; equal ids on one rank mean
 * the same communicators, so every rank of the context draws the same conclusion from it.
 */
long FMContextNCCLGeneration_Private(FMContext ctx)
{
  const FMNCCL *n = ctx ? (const FMNCCL *)ctx->nccl : NULL;
  return n ? n->gen : 0;
}

/*
 * FMContextAbortNCCL_Private - abort the context's NCCL communicators after a failed exchange:
 * ncclCommAbort ends the operations still waiting on the device (for a peer that never posted
 * its part), and the next FMContextGetNCCL_Private bootstraps new ones. Not collective by
 * itself; the executor calls it on every rank once they agreed that an exchange failed.
 */
FMErrorCode FMContextAbortNCCL_Private(FMContext ctx)
{
  FMNCCL *n = (FMNCCL *)ctx->nccl;
  if (n) n->failed = 1;
  return FMContextDestroyNCCL_Private(ctx);
}

/* FMContextNCCLWait_Private - see fmimpl.h. */
FMErrorCode FMContextNCCLWait_Private(FMContext ctx, void *ev, const char *what)
{
  FMNCCL *n = (FMNCCL *)ctx->nccl;
  const double t0 = FMTime(), limit = ctx->nccl_timeout;
  for (long polls = 0;; polls++) {
    cudaError_t ce = cudaEventQuery((cudaEvent_t)ev);
    if (ce == cudaSuccess) return FM_SUCCESS;
    if (ce != cudaErrorNotReady)
      FMRaise(MPI_COMM_SELF, FM_ERR_CUDA, "Waiting for %s on rank %d: %s", what, ctx->rank, cudaGetErrorString(ce));
    if (n) {
      ncclComm_t c[3] = {n->world, n->node, n->cross};
      for (int i = 0; i < 3; i++) {
        ncclResult_t st = ncclSuccess;
        if (c[i] && ncclCommGetAsyncError(c[i], &st) == ncclSuccess && st != ncclSuccess && st != ncclInProgress) {
          n->failed = 1;
          FMRaise(MPI_COMM_SELF, FM_ERR_NCCL, "NCCL reported an asynchronous error during %s on rank %d: %s (%s)", what, ctx->rank,
                  ncclGetErrorString(st), ncclGetLastError(c[i]));
        }
      }
    }
    if (limit > 0 && FMTime() - t0 > limit) {
      if (n) n->failed = 1;
      FMRaise(MPI_COMM_SELF, FM_ERR_NCCL,
              "%s did not finish within %g s on rank %d (-fm_nccl_timeout; a peer may have stopped or failed)", what, limit, ctx->rank);
    }
    if (polls > 100) { /* a few microseconds of spinning first, then short sleeps */
      struct timespec ts = {0, 50000};
      nanosleep(&ts, NULL);
    }
  }
}

FMErrorCode FMContextDestroyNCCL_Private(FMContext ctx)
{
  FMNCCL *n = (FMNCCL *)ctx->nccl;
  ncclComm_t c[3];
  if (!n) return FM_SUCCESS;
  /* after a failure the world communicator, which holds the operations left waiting on the
     device, is aborted first: aborting the others frees memory, and a free waits for the device */
  if (n->failed) { c[0] = n->world; c[1] = n->node; c[2] = n->cross; }
  else { c[0] = n->cross; c[1] = n->node; c[2] = n->world; }
  for (int i = 0; i < 3; i++) {
    if (!c[i]) continue;
    if (n->failed || ncclCommFinalize(c[i]) != ncclSuccess) ncclCommAbort(c[i]);
    else ncclCommDestroy(c[i]);
  }
  free(n);
  ctx->nccl = NULL;
  return FM_SUCCESS;
}
#else
FMErrorCode FMContextGetNCCL_Private(FMContext ctx, void **world, void **node, void **cross)
{
  (void)world; (void)node; (void)cross;
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMRaise(ctx->comm, FM_ERR_SUP, "This build has no NCCL (configure --with-nccl)");
}
FMErrorCode FMContextDestroyNCCL_Private(FMContext ctx)
{
  (void)ctx;
  return FM_SUCCESS;
}
FMErrorCode FMContextAbortNCCL_Private(FMContext ctx)
{
  (void)ctx;
  return FM_SUCCESS;
}
long FMContextNCCLGeneration_Private(FMContext ctx)
{
  (void)ctx;
  return 0;
}
FMErrorCode FMContextNCCLWait_Private(FMContext ctx, void *ev, const char *what)
{
  (void)ev;
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMRaise(MPI_COMM_SELF, FM_ERR_SUP, "This build has no NCCL: nothing to wait for (%s)", what);
}
#endif
