/*
 * sa_stubs.c - minimal stand-ins for the library's sys layer (errors, allocation, init) so the
 * CUDA backend, tests/test_gpu_fwd.c and src/bin/fmbench.c can be built standalone (no MPI
 * run-time, no autotools) on the GPU machine: see share/bench/build_sa.sh. Not part of the
 * library.
 */
#include <flashmask.h>
#include <flashmask/private/fmimpl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

static char sa_msg[1024];

FMErrorCode FMError_Private(MPI_Comm comm, const char *file, const char *func, int line, FMErrorCode code, const char *fmt, ...)
{
  va_list ap;
  (void)comm;
  va_start(ap, fmt);
  vsnprintf(sa_msg, sizeof sa_msg, fmt, ap);
  va_end(ap);
  fprintf(stderr, "[flashmask] error %d: %s\n    at %s() %s:%d\n", (int)code, sa_msg, func, file, line);
  return code;
}
FMErrorCode FMTraceback_Private(const char *file, const char *func, int line, FMErrorCode code)
{
  fprintf(stderr, "    at %s() %s:%d\n", func, file, line);
  return code;
}
FMErrorCode FMMalloc_Private(size_t bytes, int zero, void **p, const char *file, const char *func, int line)
{
  *p = zero ? calloc(1, bytes ? bytes : 1) : malloc(bytes ? bytes : 1);
  if (!*p) return FMError_Private(0, file, func, line, FM_ERR_MEM, "cannot allocate %zu bytes", bytes);
  return FM_SUCCESS;
}
const char *FMErrorString(FMErrorCode code) { return code == FM_SUCCESS ? "FM_SUCCESS" : "error"; }
const char *FMGetLastErrorMessage(void) { return sa_msg; }
FMErrorCode FMInitialize(int *argc, char ***argv, const char *file, const char *help)
{
  (void)argc; (void)argv; (void)file; (void)help;
  return FM_SUCCESS;
}
FMErrorCode FMFinalize(void) { return FM_SUCCESS; }
size_t FMDTypeSize(FMDType t) { return t == FM_DTYPE_FP32 ? 4 : 2; }
const char *FMDTypeName(FMDType t) { return t == FM_DTYPE_BF16 ? "bf16" : t == FM_DTYPE_FP16 ? "fp16" : "fp32"; }
