/*
 * fmfortran.c - small C helpers behind the Fortran module `flashmask` (flashmask_f.F90):
 * communicator conversion (MPI_Comm_f2c), viewers that print to stdout and flush it (so
 * output interleaves sensibly with Fortran's own unit 6), and copying C strings into
 * blank-padded Fortran character variables. Not part of the C API.
 */
#include <flashmask/private/fmimpl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The command line fm_initialize passed (one block: the pointers, then the strings), freed by
   fm_finalize after FMFinalize. */
static char **fm_fortran_args;

/*
 * FMFortranInitialize_Private - FMInitialize with the Fortran program's command line.
 *   Collective on MPI_COMM_WORLD, as FMInitialize is.
 *   nargs  how many strings buf holds: the program's name, then its arguments
 *   buf    the nargs strings, each NUL-terminated, back to back (copied here)
 */
FMErrorCode FMFortranInitialize_Private(const int *nargs, const char *buf)
{
  size_t bytes = 0;
  const char *r = buf;
  int argc = *nargs;
  char **argv, *w;
  for (int i = 0; i < argc; i++) {
    size_t l = strlen(r) + 1;
    bytes += l;
    r += l;
  }
  if (!fm_fortran_args) {
    fm_fortran_args = malloc(sizeof(char *) * ((size_t)argc + 1) + bytes);
    if (!fm_fortran_args) return FMInitialize(NULL, NULL, NULL, NULL); /* the options from FM_OPTIONS alone */
    w = (char *)(fm_fortran_args + argc + 1);
    memcpy(w, buf, bytes);
    for (int i = 0; i < argc; i++) {
      fm_fortran_args[i] = w;
      w += strlen(w) + 1;
    }
    fm_fortran_args[argc] = NULL;
  }
  argv = fm_fortran_args;
  return FMInitialize(&argc, &argv, NULL, NULL);
}

/* FMFortranFinalize_Private - FMFinalize, then the command line's copy freed. Collective. */
FMErrorCode FMFortranFinalize_Private(void)
{
  FMErrorCode ierr = FMFinalize();
  if (!ierr) {
    free(fm_fortran_args);
    fm_fortran_args = NULL;
  }
  return ierr;
}

/*
 * FMFortranContextCreate_Private - FMContextCreate from a Fortran communicator handle.
 *   Collective on the communicator.
 *   fcomm  the Fortran handle: an integer from `use mpi` / mpif.h, or the MPI_VAL
 *          component of a type(MPI_Comm) from `use mpi_f08`
 *   ctx    out: the new context
 */
FMErrorCode FMFortranContextCreate_Private(const MPI_Fint *fcomm, FMContext *ctx)
{
  return FMContextCreate(MPI_Comm_f2c(*fcomm), ctx);
}

/*
 * FMFortranContextGetComm_Private - the context's communicator as a Fortran handle
 *   (MPI_Comm_c2f: an integer for `use mpi`, the MPI_VAL of a type(MPI_Comm) for mpi_f08).
 *   Not collective.
 */
FMErrorCode FMFortranContextGetComm_Private(FMContext ctx, MPI_Fint *fcomm)
{
  MPI_Comm c = MPI_COMM_NULL;
  FMErrorCode ierr = FMContextGetComm(ctx, &c);
  if (!ierr) *fcomm = MPI_Comm_c2f(c);
  return ierr;
}

/*
 * FMFortranContextView_Private / MaskView / PlanView - the object's View on stdout,
 *   then fflush(stdout). Collective, as the Views are.
 */
FMErrorCode FMFortranContextView_Private(FMContext ctx)
{
  FMErrorCode ierr = FMContextView(ctx, stdout);
  fflush(stdout);
  return ierr;
}

FMErrorCode FMFortranMaskView_Private(FMMask mask)
{
  FMErrorCode ierr = FMMaskView(mask, stdout);
  fflush(stdout);
  return ierr;
}

FMErrorCode FMFortranPlanView_Private(FMPlan plan)
{
  FMErrorCode ierr = FMPlanView(plan, stdout);
  fflush(stdout);
  return ierr;
}

/*
 * FMFortranCopyString_Private - copy the C string src (NULL: empty) into the Fortran
 *   character variable dst of length len: truncated if longer, blank padded, no NUL.
 *   Not collective.
 */
void FMFortranCopyString_Private(const char *src, char *dst, int len)
{
  size_t n = src ? strlen(src) : 0;
  if (len <= 0) return;
  if (n > (size_t)len) n = (size_t)len;
  if (n) memcpy(dst, src, n);
  if ((size_t)len > n) memset(dst + n, ' ', (size_t)len - n);
}

/* FMFortranFlushStdout_Private - fflush(stdout) (Fortran flushes its own unit first). */
void FMFortranFlushStdout_Private(void) { fflush(stdout); }

/* FMFortranLogView_Private - FMLogView on stdout, then fflush(stdout). Collective on
   MPI_COMM_WORLD, as FMLogView is. */
FMErrorCode FMFortranLogView_Private(void)
{
  FMErrorCode ierr = FMLogView(stdout);
  fflush(stdout);
  return ierr;
}

/*
 * FMFortranConvert_Private - n elements between the float array x and the host buffer buf of
 *   type dtype: FMFromFloat for each (to = 1) or FMToFloat (to = 0). Not collective.
 *   dtype  FM_DTYPE_BF16, FP16 or FP32 (else FM_ERR_ARG_OUTOFRANGE, nothing converted)
 *   n      the count (>= 0); buf and x may be NULL only when n is 0
 */
FMErrorCode FMFortranConvert_Private(void *buf, float *x, long n, int dtype, int to)
{
  FMCheck(dtype == FM_DTYPE_BF16 || dtype == FM_DTYPE_FP16 || dtype == FM_DTYPE_FP32, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Argument dtype is %d; expected FM_DTYPE_BF16 (0), FM_DTYPE_FP16 (1) or FM_DTYPE_FP32 (2)", dtype);
  FMCheck(n >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument n is %ld; expected a count >= 0", n);
  if (!n) return FM_SUCCESS;
  FMCheck(buf, MPI_COMM_SELF, FM_ERR_ARG_NULL, "Argument buf is a null pointer (c_null_ptr); expected a host buffer of %ld elements", n);
  FMCheck(x, MPI_COMM_SELF, FM_ERR_ARG_NULL, "Argument x is a null pointer");
  for (long i = 0; i < n; i++) {
    if (to) FMFromFloat(buf, (size_t)i, (FMDType)dtype, x[i]);
    else x[i] = FMToFloat(buf, (size_t)i, (FMDType)dtype);
  }
  return FM_SUCCESS;
}
