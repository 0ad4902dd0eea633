/*
 * util.c - the small helpers every part of the library uses: the version, the name tables of
 * the enums (one per enum, shared by the printing and the options parser), the wall clock,
 * and printing from rank 0 or in rank order.
 */
#include <flashmask/private/fmimpl.h>
#include <string.h>
#include <time.h>

const char *FMGetVersion(void) { return FM_VERSION_STRING; }

/* Indexed by the enum value, NULL-terminated (FMOptionsGetEnum_Private lists). */
const char *const FMBackendNames[] = {"auto", "cpu", "cuda", NULL};
const char *const FMDTypeNames[] = {"bf16", "fp16", "fp32", NULL};

double FMTime(void)
{
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *FMBackendName(FMBackend b)
{
  return b >= FM_BACKEND_AUTO && b <= FM_BACKEND_CUDA ? FMBackendNames[b] : "unknown";
}

const char *FMDTypeName(FMDType t)
{
  return t >= FM_DTYPE_BF16 && t <= FM_DTYPE_FP32 ? FMDTypeNames[t] : "unknown";
}

size_t FMDTypeSize(FMDType t) { return t == FM_DTYPE_FP32 ? 4 : (t == FM_DTYPE_BF16 || t == FM_DTYPE_FP16) ? 2 : 0; }

FMErrorCode FMPrintf(MPI_Comm comm, FILE *fp, const char *fmt, ...)
{
  int rank = 0;
  va_list ap;
  MPI_Comm_rank(comm, &rank);
  if (rank) return FM_SUCCESS;
  if (!fp) fp = stdout;
  va_start(ap, fmt);
  vfprintf(fp, fmt, ap);
  va_end(ap);
  return FM_SUCCESS;
}

FMErrorCode FMSynchronizedPrintf(MPI_Comm comm, FILE *fp, const char *fmt, ...)
{
  int rank, size, len;
  char buf[4096];
  va_list ap;
  if (!fp) fp = stdout;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  va_start(ap, fmt);
  vsnprintf(buf, sizeof(buf), fmt, ap);
  va_end(ap);
  len = (int)strlen(buf) + 1;
  if (rank == 0) {
    fputs(buf, fp);
    for (int r = 1; r < size; r++) {
      char other[4096];
      FMCallMPI(MPI_Recv(other, (int)sizeof(other), MPI_CHAR, r, 7701, comm, MPI_STATUS_IGNORE));
      fputs(other, fp);
    }
    fflush(fp);
  } else FMCallMPI(MPI_Send(buf, len, MPI_CHAR, 0, 7701, comm));
  return FM_SUCCESS;
}
