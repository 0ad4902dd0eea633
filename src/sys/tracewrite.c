/*
 * tracewrite.c - the writer of the event traces (FMTraceSave_Private): the file layout of
 * doc/traces.md, written with the compound types of traceio.c (which also holds the reader).
 *
 * With parallel HDF5 (FM_HAVE_HDF5_PARALLEL) every rank opens the file through the
 * MPI-IO driver, creates the same objects with the same arguments, writes its row of
 * /traces/<run>/ranks and its events at the MPI_Exscan offset of the event counts. Without
 * it, or when the recorder is serial (-fm_trace_serial, FMTraceSetSerial_Private), the rows
 * and events are gathered to rank 0, which writes them with the serial API through the same
 * writer; its outcome reaches every rank (FMAgreeRootOutcome).
 */
#include "traceimpl.h"
#include <flashmask/private/fmh5.h>
#include <flashmask/fmconf.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if FM_HAVE_HDF5
#include <errno.h>


/* What one writer call writes: its slices of the two datasets and the run's global figures. */
typedef struct {
  const char *path, *run, *created;
  int mpi_size;              /* size of the communicator (root attribute and nranks) */
  const FMTraceEvent *ev;    /* events to write ... */
  hsize_t nev, ev_off, ev_total; /* ... count, offset in the dataset, dataset size */
  const FMTraceRankRow *rows;
  hsize_t nrows, row_off;
  double bytes_needed, bytes_allgather;
  hid_t dxpl;                /* H5P_DEFAULT or a collective transfer list */
} WriteJob;

/* Write `n` elements of buf at offset off of dataset d (n may be 0: an empty selection). */
static FMErrorCode write_slice(hid_t d, hid_t mtype, hsize_t n, hsize_t off, const void *buf, hid_t dxpl, const char *what)
{
  hid_t fs = H5Dget_space(d), ms;
  hsize_t one = n ? n : 1;
  herr_t st;
  static const char dummy[64];
  FMH5Check(fs >= 0, FM_ERR_HDF5, "Cannot get the dataspace of %s", what);
  ms = H5Screate_simple(1, &one, NULL);
  if (n) st = H5Sselect_hyperslab(fs, H5S_SELECT_SET, &off, NULL, &n, NULL);
  else st = (H5Sselect_none(fs) < 0 || H5Sselect_none(ms) < 0) ? -1 : 0;
  if (st >= 0 && ms >= 0) st = H5Dwrite(d, mtype, ms, fs, dxpl, n ? buf : (const void *)dummy);
  else st = -1;
  if (ms >= 0) H5Sclose(ms);
  H5Sclose(fs);
  FMH5Check(st >= 0, FM_ERR_HDF5, "Cannot write %llu elements of %s at offset %llu", (unsigned long long)n, what,
            (unsigned long long)off);
  return FM_SUCCESS;
}

/* Create /traces/<run> with its attributes and datasets in an open file and write the job's slices. */
static FMErrorCode write_run(hid_t file, const WriteJob *job)
{
  hid_t traces = -1, grp = -1, sp = -1, dcpl = -1, ft = -1, mt = -1, d = -1;
  FMErrorCode ierr = FM_SUCCESS;
  char names[FM_TRACE_NKINDS][16];
  htri_t ex;

  FMCallGoto(FMH5WriteRootAttrs_Private(file, job->mpi_size, job->created));
  ex = H5Lexists(file, "traces", H5P_DEFAULT);
  traces = ex > 0 ? H5Gopen2(file, "traces", H5P_DEFAULT) : ex == 0 ? H5Gcreate2(file, "traces", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
  FMH5CheckGoto(traces >= 0, FM_ERR_HDF5, "Cannot open or create group /traces in \"%s\"", job->path);
  ex = H5Lexists(traces, job->run, H5P_DEFAULT);
  if (ex > 0 && H5Ldelete(traces, job->run, H5P_DEFAULT) < 0) ex = -1;
  if (ex >= 0) grp = H5Gcreate2(traces, job->run, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  FMH5CheckGoto(grp >= 0, FM_ERR_HDF5, "Cannot create group /traces/%s in \"%s\"", job->run, job->path);

  memset(names, 0, sizeof(names));
  for (int k = 0; k < FM_TRACE_NKINDS; k++) snprintf(names[k], sizeof(names[k]), "%s", FMTraceKindNames[k]);
  FMCallGoto(FMH5AttrWriteStr(grp, "time_unit", "s"));
  FMCallGoto(FMH5AttrWriteInt(grp, "nranks", job->mpi_size));
  FMCallGoto(FMH5AttrWriteStr(grp, "created", job->created)); /* this run's (the root's is the file's creation) */
  FMCallGoto(FMH5AttrWriteDouble(grp, "nevents", (double)job->ev_total));
  FMCallGoto(FMH5AttrWriteStrs(grp, "kind_names", FM_TRACE_NKINDS, sizeof(names[0]), names[0]));
  FMCallGoto(FMH5AttrWriteStr(grp, "clock", "FMTime (CLOCK_MONOTONIC); origin: FMTraceCreateFromContext_Private, per node after a barrier"));
  FMCallGoto(FMH5AttrWriteDouble(grp, "bytes_needed", job->bytes_needed));
  FMCallGoto(FMH5AttrWriteDouble(grp, "bytes_allgather", job->bytes_allgather));

  /* ranks: one row per rank */
  {
    hsize_t dims = (hsize_t)job->mpi_size;
    sp = H5Screate_simple(1, &dims, NULL);
    ft = FMTraceRowType_Private(1);
    mt = FMTraceRowType_Private(0);
    FMH5CheckGoto(sp >= 0 && ft >= 0 && mt >= 0, FM_ERR_HDF5, "Cannot create the type of /traces/%s/ranks", job->run);
    d = H5Dcreate2(grp, "ranks", ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    FMH5CheckGoto(d >= 0, FM_ERR_HDF5, "Cannot create dataset /traces/%s/ranks in \"%s\"", job->run, job->path);
    FMCallGoto(write_slice(d, mt, job->nrows, job->row_off, job->rows, job->dxpl, "the ranks table"));
    H5Dclose(d); d = -1;
    H5Tclose(ft); ft = -1;
    H5Tclose(mt); mt = -1;
    H5Sclose(sp); sp = -1;
  }
  /* events: chunked and extendable */
  {
    hsize_t dims = job->ev_total, maxd = H5S_UNLIMITED, chunk = job->ev_total < 1 ? 1 : job->ev_total > 4096 ? 4096 : job->ev_total;
    sp = H5Screate_simple(1, &dims, &maxd);
    dcpl = H5Pcreate(H5P_DATASET_CREATE);
    ft = FMTraceEventType_Private(1);
    mt = FMTraceEventType_Private(0);
    FMH5CheckGoto(sp >= 0 && dcpl >= 0 && ft >= 0 && mt >= 0 && H5Pset_chunk(dcpl, 1, &chunk) >= 0, FM_ERR_HDF5,
                  "Cannot set up dataset /traces/%s/events", job->run);
    d = H5Dcreate2(grp, "events", ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    FMH5CheckGoto(d >= 0, FM_ERR_HDF5, "Cannot create dataset /traces/%s/events in \"%s\"", job->run, job->path);
    if (job->ev_total) FMCallGoto(write_slice(d, mt, job->nev, job->ev_off, job->ev, job->dxpl, "the events"));
  }
cleanup:
  if (d >= 0) H5Dclose(d);
  if (mt >= 0) H5Tclose(mt);
  if (ft >= 0) H5Tclose(ft);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (sp >= 0) H5Sclose(sp);
  if (grp >= 0) H5Gclose(grp);
  if (traces >= 0) H5Gclose(traces);
  return ierr;
}

/* Open path for writing with fapl: 1 = exists as an HDF5 file, 0 = missing (created). */
static FMErrorCode open_file(const char *path, int exists, hid_t fapl, hid_t *file)
{
  char b[256];
  if (exists) {
    *file = H5Fopen(path, H5F_ACC_RDWR, fapl);
    FMCheck(*file >= 0, MPI_COMM_SELF, FM_ERR_FILE, "Argument 2 (path): cannot open \"%s\" for writing; HDF5 says: %s", path, FMH5LastMessage(b));
  } else {
    errno = 0;
    *file = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, fapl);
    FMCheck(*file >= 0, MPI_COMM_SELF, FM_ERR_FILE, "Argument 2 (path): cannot create \"%s\" (%s); HDF5 says: %s", path,
            errno ? strerror(errno) : "no system error", FMH5LastMessage(b));
  }
  return FM_SUCCESS;
}

/* The serial writer (rank 0 only): open or create, check, write, close. */
static FMErrorCode save_serial_local(const WriteJob *job, int exists)
{
  hid_t file = -1;
  FMErrorCode ierr = FM_SUCCESS;
  FMCallGoto(open_file(job->path, exists, H5P_DEFAULT, &file));
  FMCallGoto(FMH5CheckFormat_Private(file, job->path, "a trace"));
  FMCallGoto(write_run(file, job));
cleanup:
  return FMH5FileClose_Private(file, job->path, ierr);
}

/* Rank 0's buffers for gathering the rows and events (other ranks allocate nothing). */
static FMErrorCode serial_alloc(FMTrace tr, const WriteJob *job, FMTraceRankRow **rows, int **counts, int **displs, FMTraceEvent **all)
{
  FMCheck(tr->n <= (size_t)INT_MAX / sizeof(FMTraceEvent), MPI_COMM_SELF, FM_ERR_ARG_SIZ,
          "This rank has %zu trace events, too many to gather to rank 0 (at most %zu); use parallel HDF5", tr->n,
          (size_t)INT_MAX / sizeof(FMTraceEvent));
  if (tr->rank != 0) return FM_SUCCESS;
  FMCheck(job->ev_total * sizeof(FMTraceEvent) <= (hsize_t)INT_MAX, MPI_COMM_SELF, FM_ERR_ARG_SIZ,
          "%llu trace events are too many to gather to rank 0; use parallel HDF5", (unsigned long long)job->ev_total);
  FMCall(FMMalloc(tr->size, rows));
  FMCall(FMMalloc(tr->size, counts));
  FMCall(FMMalloc(tr->size, displs));
  FMCall(FMMalloc((size_t)job->ev_total, all));
  return FM_SUCCESS;
}

/* Gather rows and events to rank 0, which writes; its outcome reaches every rank. */
static FMErrorCode save_serial(FMTrace tr, WriteJob *job, int exists)
{
  FMTraceRankRow *rows = NULL;
  FMTraceEvent *all = NULL;
  int *counts = NULL, *displs = NULL;
  int mybytes = (int)(tr->n * sizeof(FMTraceEvent));
  FMErrorCode ierr;

  ierr = serial_alloc(tr, job, &rows, &counts, &displs, &all);
  FMAgreeGoto(tr->comm);
  FMCallMPIGoto(MPI_Gather(&tr->row, (int)sizeof(FMTraceRankRow), MPI_BYTE, rows, (int)sizeof(FMTraceRankRow), MPI_BYTE, 0, tr->comm));
  FMCallMPIGoto(MPI_Gather(&mybytes, 1, MPI_INT, counts, 1, MPI_INT, 0, tr->comm));
  if (tr->rank == 0)
    for (int r = 0, off = 0; r < tr->size; off += counts[r], r++) displs[r] = off;
  FMCallMPIGoto(MPI_Gatherv(tr->ev, mybytes, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, tr->comm));
  if (tr->rank == 0) {
    job->ev = all;
    job->nev = job->ev_total;
    job->ev_off = 0;
    job->rows = rows;
    job->nrows = (hsize_t)tr->size;
    job->row_off = 0;
    job->dxpl = H5P_DEFAULT;
    ierr = save_serial_local(job, exists);
  }
  FMCallGoto(FMAgreeRootOutcome(tr->comm, 0, ierr));
cleanup:
  free(rows);
  free(all);
  free(counts);
  free(displs);
  return ierr;
}

#if FM_HAVE_HDF5_PARALLEL
/* The MPI-IO file access and collective transfer property lists. */
static FMErrorCode mpio_lists(MPI_Comm comm, hid_t *fapl, hid_t *dxpl)
{
  *fapl = H5Pcreate(H5P_FILE_ACCESS);
  *dxpl = H5Pcreate(H5P_DATASET_XFER);
  FMH5Check(*fapl >= 0 && *dxpl >= 0 && H5Pset_fapl_mpio(*fapl, comm, MPI_INFO_NULL) >= 0 && H5Pset_dxpl_mpio(*dxpl, H5FD_MPIO_COLLECTIVE) >= 0,
            FM_ERR_HDF5, "Cannot set up the MPI-IO property lists for %s", "a trace");
  return FM_SUCCESS;
}

/* Every rank opens the file through MPI-IO and writes its own slices (collective calls). */
static FMErrorCode save_parallel(FMTrace tr, WriteJob *job, int exists)
{
  hid_t fapl = -1, file = -1, dxpl = -1;
  FMErrorCode ierr;
  long long n = (long long)tr->n, off = 0;

  FMCallMPI(MPI_Exscan(&n, &off, 1, MPI_LONG_LONG, MPI_SUM, tr->comm));
  if (tr->rank == 0) off = 0;
  job->ev = tr->ev;
  job->nev = (hsize_t)tr->n;
  job->ev_off = (hsize_t)off;
  job->rows = &tr->row;
  job->nrows = 1;
  job->row_off = (hsize_t)tr->rank;
  ierr = mpio_lists(tr->comm, &fapl, &dxpl);
  job->dxpl = dxpl;
  if (!ierr) ierr = open_file(job->path, exists, fapl, &file);
  FMAgreeGoto(tr->comm);
  ierr = FMH5CheckFormat_Private(file, job->path, "a trace");
  FMAgreeGoto(tr->comm);
  ierr = write_run(file, job);
  FMAgreeGoto(tr->comm);
cleanup:
  ierr = FMH5FileClose_Private(file, job->path, ierr);
  if (fapl >= 0) H5Pclose(fapl);
  if (dxpl >= 0) H5Pclose(dxpl);
  return FMAgreeCode(tr->comm, ierr);
}
#endif

/* Rank 0's look at path before writing: hdr[0] = 1 when it is an HDF5 file to append to. */
static FMErrorCode probe_path(const char *path, int hdr[2])
{
  htri_t h;
  if (access(path, F_OK) != 0) return FM_SUCCESS;
  h = H5Fis_hdf5(path);
  H5Eclear2(H5E_DEFAULT);
  FMCheck(h > 0, MPI_COMM_SELF, FM_ERR_FILE, "Argument 2 (path): \"%s\" exists and is not an HDF5 file; refusing to overwrite it", path);
  hdr[0] = 1;
  return FM_SUCCESS;
}
#endif /* FM_HAVE_HDF5 */

/* FMTraceSave_Private - see fmtracing.h. Collective. */
FMErrorCode FMTraceSave_Private(FMTrace tr, const char *path)
{
  FMValidPointer(tr, 1);
  FMValidPointer(path, 2);
  FMCheck(path[0] != '\0', MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 2 (path) is empty; expected a file name");
#if !FM_HAVE_HDF5
  FMRaise(MPI_COMM_SELF, FM_ERR_SUP, "FMTraceSave(\"%s\"): flashmask was built without HDF5, so traces cannot be written; reconfigure with --with-hdf5",
          path);
#else
  {
    WriteJob job;
    FMH5Quiet q;
    double in[2], sum[2];
    int hdr[2] = {0, 0}; /* exists, serial (rank 0 decides) */
    long long n = (long long)tr->n, total = 0;
    char created[64];
    FMErrorCode ierr = FM_SUCCESS;

    memset(&job, 0, sizeof(job));
    FMH5QuietPush(&q);
    if (tr->rank == 0) {
      FMH5Timestamp(created);
      hdr[1] = tr->serial || !FM_HAVE_HDF5_PARALLEL;
      ierr = probe_path(path, hdr);
    }
    FMAgreeGoto(tr->comm);
    in[0] = tr->bytes_needed;
    in[1] = tr->bytes_allgather;
    FMCallMPIGoto(MPI_Bcast(hdr, 2, MPI_INT, 0, tr->comm));
    FMCallMPIGoto(MPI_Bcast(created, sizeof(created), MPI_CHAR, 0, tr->comm));
    FMCallMPIGoto(MPI_Allreduce(in, sum, 2, MPI_DOUBLE, MPI_SUM, tr->comm));
    FMCallMPIGoto(MPI_Allreduce(&n, &total, 1, MPI_LONG_LONG, MPI_SUM, tr->comm));
    job.path = path;
    job.run = tr->run;
    job.created = created;
    job.mpi_size = tr->size;
    job.ev_total = (hsize_t)total;
    job.bytes_needed = sum[0];
    job.bytes_allgather = sum[1];
#if FM_HAVE_HDF5_PARALLEL
    if (!hdr[1]) FMCallGoto(save_parallel(tr, &job, hdr[0]));
    else
#endif
      FMCallGoto(save_serial(tr, &job, hdr[0]));
  cleanup:
    FMH5QuietPop(&q);
    return ierr;
  }
#endif
}
