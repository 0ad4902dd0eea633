/*
 * error.c - error raising, tracebacks, handlers, collective agreement, memory helpers.
 */
#include <flashmask/private/fmimpl.h>
#include <stdlib.h>
#include <string.h>

static FMErrorHandler fm_handler = FM_ERROR_HANDLER_TRACEBACK;
static char fm_lastmsg[1024];
static int fm_depth; /* traceback lines printed for the current error */

const char *FMErrorString(FMErrorCode code)
{
  switch (code) {
  case FM_SUCCESS: return "FM_SUCCESS: no error";
  case FM_ERR_MEM: return "FM_ERR_MEM: out of memory";
  case FM_ERR_SUP: return "FM_ERR_SUP: not supported in this build or configuration";
  case FM_ERR_ORDER: return "FM_ERR_ORDER: functions called in the wrong order";
  case FM_ERR_LIB: return "FM_ERR_LIB: internal library error";
  case FM_ERR_ARG_NULL: return "FM_ERR_ARG_NULL: null argument";
  case FM_ERR_ARG_WRONG: return "FM_ERR_ARG_WRONG: wrong argument";
  case FM_ERR_ARG_OUTOFRANGE: return "FM_ERR_ARG_OUTOFRANGE: argument out of range";
  case FM_ERR_ARG_SIZ: return "FM_ERR_ARG_SIZ: invalid or inconsistent sizes";
  case FM_ERR_ARG_INCOMP: return "FM_ERR_ARG_INCOMP: incompatible arguments";
  case FM_ERR_FILE: return "FM_ERR_FILE: file error";
  case FM_ERR_MPI: return "FM_ERR_MPI: MPI error";
  case FM_ERR_CUDA: return "FM_ERR_CUDA: CUDA error";
  case FM_ERR_NCCL: return "FM_ERR_NCCL: NCCL error";
  case FM_ERR_HDF5: return "FM_ERR_HDF5: HDF5 error or bad file layout";
  case FM_ERR_HWLOC: return "FM_ERR_HWLOC: hwloc error";
  case FM_ERR_OPT: return "FM_ERR_OPT: bad option value";
  case FM_ERR_COLLECTIVE: return "FM_ERR_COLLECTIVE: another rank failed in a collective operation";
  case FM_ERR_MISMATCH: return "FM_ERR_MISMATCH: ranks disagree on data that must be identical";
  }
  return "unknown error code";
}

#define FM_HANDLER_DEPTH 32
static FMErrorHandler fm_handler_stack[FM_HANDLER_DEPTH]; /* the handlers under the current one */
static int fm_handler_depth = 0;

FMErrorCode FMPushErrorHandler(FMErrorHandler h)
{
  FMCheck(h == FM_ERROR_HANDLER_TRACEBACK || h == FM_ERROR_HANDLER_ABORT || h == FM_ERROR_HANDLER_SILENT, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Argument 1 (handler) is %d; expected FM_ERROR_HANDLER_TRACEBACK, _ABORT or _SILENT", (int)h);
  FMCheck(fm_handler_depth < FM_HANDLER_DEPTH, MPI_COMM_SELF, FM_ERR_ORDER,
          "FMPushErrorHandler() nested %d deep; pop with FMPopErrorHandler() (at most %d pushed at once)", fm_handler_depth + 1,
          FM_HANDLER_DEPTH);
  fm_handler_stack[fm_handler_depth++] = fm_handler;
  fm_handler = h;
  return FM_SUCCESS;
}

FMErrorCode FMPopErrorHandler(void)
{
  FMCheck(fm_handler_depth > 0, MPI_COMM_SELF, FM_ERR_ORDER, "FMPopErrorHandler() without a matching FMPushErrorHandler()");
  fm_handler = fm_handler_stack[--fm_handler_depth];
  return FM_SUCCESS;
}

const char *FMGetLastErrorMessage(void) { return fm_lastmsg; }

/* FMErrorMessageSet_Private - see fmimpl.h. */
void FMErrorMessageSet_Private(const char *msg) { snprintf(fm_lastmsg, sizeof(fm_lastmsg), "%s", msg ? msg : ""); }

static int world_rank(void)
{
  int init = 0, fin = 0, r = 0;
  MPI_Initialized(&init);
  MPI_Finalized(&fin);
  if (init && !fin) MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}

static const char *basename_of(const char *file)
{
  const char *s = strstr(file, "src/");
  return s ? s : file;
}

FMErrorCode FMError_Private(MPI_Comm comm, const char *file, const char *func, int line, FMErrorCode code,
                            const char *fmt, ...)
{
  va_list ap;
  (void)comm;
  va_start(ap, fmt);
  vsnprintf(fm_lastmsg, sizeof(fm_lastmsg), fmt, ap);
  va_end(ap);
  fm_depth = 0;
  if (fm_handler != FM_ERROR_HANDLER_SILENT) {
    int r = world_rank();
    fprintf(stderr, "[%d]FM ERROR: ------------------------------------------------------------\n", r);
    fprintf(stderr, "[%d]FM ERROR: %s\n", r, FMErrorString(code));
    fprintf(stderr, "[%d]FM ERROR: %s\n", r, fm_lastmsg);
    fprintf(stderr, "[%d]FM ERROR: flashmask %s\n", r, FMGetVersion());
    fprintf(stderr, "[%d]FM ERROR: #%d %s() at %s:%d\n", r, fm_depth, func, basename_of(file), line);
    fflush(stderr);
  }
  if (fm_handler == FM_ERROR_HANDLER_ABORT) {
    int init = 0;
    MPI_Initialized(&init);
    if (init) MPI_Abort(MPI_COMM_WORLD, (int)code);
    abort();
  }
  return code;
}

FMErrorCode FMErrorTraceback(const char *file, const char *func, int line, FMErrorCode code)
{
  fm_depth++;
  if (fm_handler != FM_ERROR_HANDLER_SILENT) {
    fprintf(stderr, "[%d]FM ERROR: #%d %s() at %s:%d\n", world_rank(), fm_depth, func, basename_of(file), line);
    fflush(stderr);
  }
  return code;
}

FMErrorCode FMAgree_Private(MPI_Comm comm, FMErrorCode local, const char *file, const char *func, int line)
{
  int size = 1, rank = 0;
  int in[2], out[2];
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  if (size == 1) return local;
  /* MAXLOC over (code, rank): the highest failing code and its rank reach everyone; a rank that
     failed on its own outranks one told of another's failure (FM_ERR_COLLECTIVE counts as 1) */
  in[0] = local == FM_ERR_COLLECTIVE ? 1 : (int)local; in[1] = rank;
  if (MPI_Allreduce(in, out, 1, MPI_2INT, MPI_MAXLOC, comm) != MPI_SUCCESS)
    return FMError_Private(comm, file, func, line, FM_ERR_MPI, "MPI_Allreduce failed while agreeing on an error");
  if (out[0] == 1) out[0] = FM_ERR_COLLECTIVE;
  if (out[0] == FM_SUCCESS) return FM_SUCCESS;
  {
    /* every rank is here: the failing rank's message goes to the others, so that each can say why */
    char msg[1024];
    if (rank == out[1]) snprintf(msg, sizeof(msg), "%s", fm_lastmsg);
    if (MPI_Bcast(msg, (int)sizeof(msg), MPI_CHAR, out[1], comm) != MPI_SUCCESS)
      return FMError_Private(comm, file, func, line, FM_ERR_MPI, "MPI_Bcast failed while spreading rank %d's error", out[1]);
    msg[sizeof(msg) - 1] = '\0';
    if (local != FM_SUCCESS) return local;
    return FMError_Private(comm, file, func, line, FM_ERR_COLLECTIVE, "Rank %d of this communicator failed with %s; this rank stops too: %s", out[1],
                           FMErrorString((FMErrorCode)out[0]), msg);
  }
}

FMErrorCode FMMalloc_Private(size_t bytes, int zero, void **p, const char *file, const char *func, int line)
{
  if (!p) return FMError_Private(MPI_COMM_SELF, file, func, line, FM_ERR_ARG_NULL, "Null pointer for allocation result");
  *p = NULL;
  if (bytes == 0) bytes = 1;
  *p = zero ? calloc(1, bytes) : malloc(bytes);
  if (!*p) return FMError_Private(MPI_COMM_SELF, file, func, line, FM_ERR_MEM, "Out of memory allocating %zu bytes", bytes);
  return FM_SUCCESS;
}

FMErrorCode FMStrdup(const char *s, char **out)
{
  size_t n;
  FMValidPointer(out, 2);
  *out = NULL;
  if (!s) return FM_SUCCESS;
  n = strlen(s) + 1;
  FMCall(FMMalloc(n, out));
  memcpy(*out, s, n);
  return FM_SUCCESS;
}
