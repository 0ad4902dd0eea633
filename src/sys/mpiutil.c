/*
 * mpiutil.c - point-to-point messages of any length. MPI counts are ints; a K/V block or its
 * fp32 dK/dV partials at 128K tokens passes 2^31 - 1 elements. Longer messages are described by
 * a derived type (blocks of 2^20 elements plus the remainder), freed as soon as the operation
 * is posted, which MPI allows for pending operations. Also: whether this process's MPI takes
 * device pointers (CUDA-aware MPI).
 */
#include <flashmask/private/fmimpl.h>
#include <limits.h>
#if FM_HAVE_MPIX_CUDA
#include <mpi-ext.h>
#endif

static size_t max_count = INT_MAX;

/*
 * FMMPISetMaxCount_Private - the longest message sent as a plain count (INT_MAX; tests lower
 * it to exercise the derived types on small buffers). Not collective; must match on the ranks
 * that exchange messages. 0 restores INT_MAX.
 */
void FMMPISetMaxCount_Private(size_t n) { max_count = n > 1 && n < (size_t)INT_MAX ? n : (size_t)INT_MAX; }

/* count elements of the basic type t as (*n, *type); *made says *type must be freed */
static int long_type(size_t count, MPI_Datatype t, int *n, MPI_Datatype *type, int *made)
{
  size_t blk = (size_t)1 << 20;
  MPI_Datatype tb;
  MPI_Aint lb, ext;
  int err, q, r;
  *made = 0;
  if (count <= max_count) { *n = (int)count; *type = t; return MPI_SUCCESS; }
  if (blk > max_count / 2) blk = max_count / 2;
  q = (int)(count / blk);
  r = (int)(count % blk);
  if ((err = MPI_Type_contiguous((int)blk, t, &tb))) return err;
  if (r == 0) {
    *type = tb;
    *n = q;
  } else {
    int len[2] = {q, r};
    MPI_Datatype ty[2] = {tb, t};
    MPI_Aint dsp[2];
    if ((err = MPI_Type_get_extent(t, &lb, &ext))) return err;
    dsp[0] = 0;
    dsp[1] = (MPI_Aint)((size_t)q * blk * (size_t)ext);
    err = MPI_Type_create_struct(2, len, dsp, ty, type);
    MPI_Type_free(&tb);
    if (err) return err;
    *n = 1;
  }
  *made = 1;
  return MPI_Type_commit(type);
}

/*
 * FMMPIIsend_Private, FMMPIIrecv_Private, FMMPIRecv_Private - MPI_Isend, MPI_Irecv and MPI_Recv
 * of count elements of the basic type t, where count may pass INT_MAX. Not collective. Return
 * an MPI error code (wrap in FMCallMPI). A receive must be matched by a send of the same count
 * and type made by these functions.
 */
int FMMPIIsend_Private(const void *buf, size_t count, MPI_Datatype t, int dest, int tag, MPI_Comm comm, MPI_Request *req)
{
  MPI_Datatype ty;
  int n, made, err = long_type(count, t, &n, &ty, &made);
  if (err) return err;
  err = MPI_Isend(buf, n, ty, dest, tag, comm, req);
  if (made) MPI_Type_free(&ty);
  return err;
}

int FMMPIIrecv_Private(void *buf, size_t count, MPI_Datatype t, int src, int tag, MPI_Comm comm, MPI_Request *req)
{
  MPI_Datatype ty;
  int n, made, err = long_type(count, t, &n, &ty, &made);
  if (err) return err;
  err = MPI_Irecv(buf, n, ty, src, tag, comm, req);
  if (made) MPI_Type_free(&ty);
  return err;
}

int FMMPIRecv_Private(void *buf, size_t count, MPI_Datatype t, int src, int tag, MPI_Comm comm, MPI_Status *st)
{
  MPI_Datatype ty;
  int n, made, err = long_type(count, t, &n, &ty, &made);
  if (err) return err;
  err = MPI_Recv(buf, n, ty, src, tag, comm, st);
  if (made) MPI_Type_free(&ty);
  return err;
}

/*
 * FMMPIStatusBytes_Private - bytes a completed receive of basic type t delivered, also past
 * INT_MAX (MPI_Get_count would say MPI_UNDEFINED). Not collective.
 */
double FMMPIStatusBytes_Private(const MPI_Status *st, MPI_Datatype t)
{
  MPI_Count n = 0;
  int sz = 1;
  MPI_Get_elements_x(st, t, &n);
  MPI_Type_size(t, &sz);
  return n == MPI_UNDEFINED ? 0.0 : (double)n * sz;
}

/*
 * FMMPICUDAAware_Private - whether this process's MPI accepts CUDA device pointers, as the MPI
 *   says at run time: 1 when the build has Open MPI's extension (<mpi-ext.h>,
 *   FM_HAVE_MPIX_CUDA) and MPIX_Query_cuda_support() returns 1; 0 otherwise (also when the
 *   MPI cannot tell). Not collective: callers that need one answer on every rank reduce it
 *   with MPI_MIN. Call after MPI_Init.
 */
int FMMPICUDAAware_Private(void)
{
#if FM_HAVE_MPIX_CUDA
  return MPIX_Query_cuda_support() == 1;
#else
  return 0;
#endif
}
