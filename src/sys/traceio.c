/*
 * traceio.c - the HDF5 side of the event traces: the compound types of an event and of a rank
 * row, the writer (FMTraceSave_Private) and the reader (FMTraceLoad_Private) that fmtrace and
 * the tests use, so the file layout of doc/traces.md is written down once.
 *
 * Saving. With parallel HDF5 (FM_HAVE_HDF5_PARALLEL) every rank opens the file through the
 * MPI-IO driver, creates the same objects with the same arguments, writes its row of
 * /traces/<run>/ranks and its events at the MPI_Exscan offset of the event counts. Without
 * it, or when the recorder is serial (-fm_trace_serial, FMTraceSetSerial_Private), the rows
 * and events are gathered to rank 0, which writes them with the serial API through the same
 * writer; its outcome reaches every rank (FMAgreeRootOutcome).
 *
 * The HDF5 plumbing (quiet error stack, attribute writers, root attributes, format check)
 * is shared with the mask files: include/flashmask/private/fmh5.h, src/sys/h5util.c.
 */
#include "traceimpl.h"
#include <flashmask/private/fmh5.h>
#include <flashmask/fmconf.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if FM_HAVE_HDF5
#include <errno.h>

/* FMTraceEventType_Private - see fmtracing.h. */
hid_t FMTraceEventType_Private(int file)
{
  hid_t i32 = file ? H5T_STD_I32LE : H5T_NATIVE_INT, f64 = file ? H5T_IEEE_F64LE : H5T_NATIVE_DOUBLE;
  size_t o = 0;
  hid_t t = H5Tcreate(H5T_COMPOUND, file ? 4 * 3 + 8 * 4 + 4 * 2 : sizeof(FMTraceEvent));
  if (t < 0) return t;
#define FIELD(name, mt, sz)                                                          \
  do {                                                                               \
    H5Tinsert(t, #name, file ? o : HOFFSET(FMTraceEvent, name), mt);                 \
    o += sz;                                                                         \
  } while (0)
  FIELD(rank, i32, 4);
  FIELD(kind, i32, 4);
  FIELD(stream, i32, 4);
  FIELD(t_begin, f64, 8);
  FIELD(t_end, f64, 8);
  FIELD(bytes, f64, 8);
  FIELD(flops, f64, 8);
  FIELD(peer, i32, 4);
  FIELD(chunk, i32, 4);
#undef FIELD
  return t;
}

/* Memory and file compound types of a rank row (strings: fixed length, NUL-terminated). */
static hid_t row_type(int file)
{
  hid_t i32 = file ? H5T_STD_I32LE : H5T_NATIVE_INT;
  hid_t s32 = H5Tcopy(H5T_C_S1), s64 = H5Tcopy(H5T_C_S1), t;
  H5Tset_size(s32, 32);
  H5Tset_size(s64, 64);
  H5Tset_strpad(s32, H5T_STR_NULLTERM);
  H5Tset_strpad(s64, H5T_STR_NULLTERM);
  t = H5Tcreate(H5T_COMPOUND, file ? 4 * 4 + 32 + 64 : sizeof(FMTraceRankRow));
  if (t >= 0) {
    H5Tinsert(t, "rank", file ? 0 : HOFFSET(FMTraceRankRow, rank), i32);
    H5Tinsert(t, "node", file ? 4 : HOFFSET(FMTraceRankRow, node), i32);
    H5Tinsert(t, "local_rank", file ? 8 : HOFFSET(FMTraceRankRow, local_rank), i32);
    H5Tinsert(t, "gpu_busid", file ? 12 : HOFFSET(FMTraceRankRow, gpu_busid), s32);
    H5Tinsert(t, "numa", file ? 44 : HOFFSET(FMTraceRankRow, numa), i32);
    H5Tinsert(t, "hostname", file ? 48 : HOFFSET(FMTraceRankRow, hostname), s64);
  }
  H5Tclose(s32);
  H5Tclose(s64);
  return t;
}

/* The memory type of a row for reading: only the members the file type ftype has (HDF5
   converts compounds by member name), so older files with fewer columns still read. */
static hid_t row_read_type(hid_t ftype)
{
  static const char *const opt[] = {"node", "local_rank", "numa", "gpu_busid", "hostname"};
  hid_t full = row_type(0), t = H5Tcreate(H5T_COMPOUND, sizeof(FMTraceRankRow));
  int nm = H5Tget_nmembers(full);
  for (int k = 0; k < nm; k++) {
    char *name = H5Tget_member_name(full, (unsigned)k);
    int want = !strcmp(name, "rank");
    for (size_t o = 0; o < sizeof(opt) / sizeof(opt[0]) && !want; o++) want = !strcmp(name, opt[o]) && H5Tget_member_index(ftype, name) >= 0;
    if (want) {
      hid_t mt = H5Tget_member_type(full, (unsigned)k);
      H5Tinsert(t, name, H5Tget_member_offset(full, (unsigned)k), mt);
      H5Tclose(mt);
    }
    H5free_memory(name);
  }
  H5Tclose(full);
  return t;
}

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
  FMCallGoto(FMH5AttrWriteDouble(grp, "nevents", (double)job->ev_total));
  FMCallGoto(FMH5AttrWriteStrs(grp, "kind_names", FM_TRACE_NKINDS, sizeof(names[0]), names[0]));
  FMCallGoto(FMH5AttrWriteStr(grp, "clock", "FMTime (CLOCK_MONOTONIC); origin: FMTraceCreateFromContext_Private, per node after a barrier"));
  FMCallGoto(FMH5AttrWriteDouble(grp, "bytes_needed", job->bytes_needed));
  FMCallGoto(FMH5AttrWriteDouble(grp, "bytes_allgather", job->bytes_allgather));

  /* ranks: one row per rank */
  {
    hsize_t dims = (hsize_t)job->mpi_size;
    sp = H5Screate_simple(1, &dims, NULL);
    ft = row_type(1);
    mt = row_type(0);
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
/* ================================================================ reading */
/* The names of the runs under /traces: count, the first one, and a comma-separated list. */
typedef struct {
  int n;
  char first[256], list[1024];
} RunList;

static herr_t run_cb(hid_t g, const char *name, const H5L_info_t *info, void *ctx)
{
  RunList *rl = (RunList *)ctx;
  size_t len = strlen(rl->list);
  (void)g;
  (void)info;
  if (rl->n++ == 0) snprintf(rl->first, sizeof(rl->first), "%s", name);
  if (len + strlen(name) + 3 < sizeof(rl->list)) snprintf(rl->list + len, sizeof(rl->list) - len, "%s%s", len ? ", " : "", name);
  return 0;
}

/* Open /traces/<run> (run NULL: the only run) and set td->run. */
static FMErrorCode open_run(hid_t f, const char *path, const char *run, FMTraceData *td, hid_t *g)
{
  hid_t traces;
  RunList rl;
  char gname[300];
  memset(&rl, 0, sizeof(rl));
  *g = -1;
  FMCheck(H5Lexists(f, "traces", H5P_DEFAULT) > 0, MPI_COMM_SELF, FM_ERR_HDF5, "\"%s\" has no /traces group (was it written with -fm_trace?)",
          path);
  traces = H5Gopen2(f, "traces", H5P_DEFAULT);
  FMH5Check(traces >= 0, FM_ERR_HDF5, "Cannot open /traces in \"%s\"", path);
  H5Literate(traces, H5_INDEX_NAME, H5_ITER_INC, NULL, run_cb, &rl);
  H5Gclose(traces);
  if (!run) {
    FMCheck(rl.n > 0, MPI_COMM_SELF, FM_ERR_HDF5, "\"%s\" has no runs under /traces", path);
    FMCheck(rl.n == 1, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "\"%s\" holds several runs; name one (runs: %s)", path, rl.list);
    run = rl.first;
  }
  FMCheck(strlen(run) < sizeof(td->run), MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 2 (run) is %zu characters long; expected fewer than %zu",
          strlen(run), sizeof(td->run));
  snprintf(td->run, sizeof(td->run), "%s", run);
  snprintf(gname, sizeof(gname), "/traces/%s", run);
  FMCheck(!strchr(run, '/') && H5Lexists(f, gname, H5P_DEFAULT) > 0, MPI_COMM_SELF, FM_ERR_HDF5, "\"%s\" has no run \"%s\" (runs: %s)", path,
          run, rl.list[0] ? rl.list : "none");
  *g = H5Gopen2(f, gname, H5P_DEFAULT);
  FMH5Check(*g >= 0, FM_ERR_HDF5, "Cannot open %s in \"%s\"", gname, path);
  return FM_SUCCESS;
}

/*
 * The element count of the open one-dimensional dataset d, refused (FM_ERR_HDF5) above max or,
 * for unfiltered storage, above what the file stores: a corrupt extent must not size a buffer.
 */
static FMErrorCode dataset_count(hid_t d, const char *what, const char *path, hsize_t max, hsize_t *count)
{
  hid_t sp = H5Dget_space(d), ft = H5Dget_type(d), pl = H5Dget_create_plist(d);
  int nd = sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1, nfilt = pl >= 0 ? H5Pget_nfilters(pl) : -1;
  size_t esize = ft >= 0 ? H5Tget_size(ft) : 0;
  hsize_t dims = 0, stored = H5Dget_storage_size(d);
  if (nd == 1 && H5Sget_simple_extent_dims(sp, &dims, NULL) < 0) nd = -1;
  if (sp >= 0) H5Sclose(sp);
  if (ft >= 0) H5Tclose(ft);
  if (pl >= 0) H5Pclose(pl);
  H5Eclear2(H5E_DEFAULT);
  *count = 0;
  FMCheck(nd == 1 && esize > 0, MPI_COMM_SELF, FM_ERR_HDF5, "%s is not a one-dimensional dataset (rank %d; in \"%s\")", what, nd, path);
  FMCheck(dims <= max, MPI_COMM_SELF, FM_ERR_HDF5, "%s holds %llu elements; expected at most %llu (in \"%s\")", what, (unsigned long long)dims,
          (unsigned long long)max, path);
  FMCheck(nfilt != 0 || stored >= dims * esize, MPI_COMM_SELF, FM_ERR_HDF5,
          "%s of %llu elements of %zu bytes stores only %llu bytes (a truncated or corrupt file? in \"%s\")", what, (unsigned long long)dims,
          esize, (unsigned long long)stored, path);
  *count = dims;
  return FM_SUCCESS;
}

/* /traces/<run>/events into td->ev, checked (0 <= rank < FM_TRACE_MAX_RANKS, finite times in order). */
static FMErrorCode read_events(hid_t g, const char *path, FMTraceData *td)
{
  hid_t d = -1, sp = -1, mt = -1;
  hsize_t dims = 0;
  char what[300];
  FMErrorCode ierr = FM_SUCCESS;
  d = H5Dopen2(g, "events", H5P_DEFAULT);
  FMH5CheckGoto(d >= 0, FM_ERR_HDF5, "/traces/%s has no dataset events (in \"%s\")", td->run, path);
  snprintf(what, sizeof(what), "/traces/%s/events", td->run);
  FMCallGoto(dataset_count(d, what, path, FM_TRACE_MAX_EVENTS, &dims));
  {
    hid_t ft = H5Dget_type(d);
    ierr = FMH5CheckCompound_Private(ft, what, path);
    if (ft >= 0) H5Tclose(ft);
    FMCallGoto(ierr);
  }
  td->n = (size_t)dims;
  FMCallGoto(FMCalloc(td->n, &td->ev));
  mt = FMTraceEventType_Private(0);
  if (td->n)
    FMH5CheckGoto(H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, td->ev) >= 0, FM_ERR_HDF5,
                  "Cannot read /traces/%s/events in \"%s\" (is it a flashmask trace?)", td->run, path);
  for (size_t i = 0; i < td->n; i++) {
    const FMTraceEvent *e = &td->ev[i];
    FMCheckGoto(e->rank >= 0 && e->rank < FM_TRACE_MAX_RANKS, MPI_COMM_SELF, FM_ERR_HDF5,
                "/traces/%s/events: event %zu has rank %d; expected 0 <= rank < FM_TRACE_MAX_RANKS = %d (in \"%s\")", td->run, i, e->rank,
                FM_TRACE_MAX_RANKS, path);
    FMCheckGoto(isfinite(e->t_begin) && isfinite(e->t_end) && e->t_end >= e->t_begin, MPI_COMM_SELF, FM_ERR_HDF5,
                "/traces/%s/events: event %zu (rank %d, t %g..%g) is invalid", td->run, i, e->rank, e->t_begin, e->t_end);
    if (e->rank + 1 > td->nranks) td->nranks = e->rank + 1;
  }
cleanup:
  if (mt >= 0) H5Tclose(mt);
  if (sp >= 0) H5Sclose(sp);
  if (d >= 0) H5Dclose(d);
  return ierr;
}

/* /traces/<run>/ranks (optional) into td->rows[0..nranks): rows the file lacks keep -1 and "";
   a ranks dataset that is there but unusable is FM_ERR_HDF5. */
static FMErrorCode read_rows(hid_t g, const char *path, FMTraceData *td)
{
  hid_t d = -1, sp = -1, ft = -1, mt = -1;
  hsize_t dims = 0;
  char what[300];
  FMTraceRankRow *tmp = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  FMCallGoto(FMCalloc(td->nranks, &td->rows));
  for (int r = 0; r < td->nranks; r++) {
    td->rows[r].rank = r;
    td->rows[r].node = td->rows[r].local_rank = td->rows[r].numa = -1;
  }
  if (H5Lexists(g, "ranks", H5P_DEFAULT) <= 0) goto cleanup;
  snprintf(what, sizeof(what), "/traces/%s/ranks", td->run);
  d = H5Dopen2(g, "ranks", H5P_DEFAULT);
  FMH5CheckGoto(d >= 0, FM_ERR_HDF5, "Cannot open %s as a dataset (in \"%s\")", what, path);
  sp = H5Dget_space(d);
  ft = H5Dget_type(d);
  FMCheckGoto(sp >= 0 && ft >= 0 && H5Tget_class(ft) == H5T_COMPOUND && H5Sget_simple_extent_ndims(sp) == 1, MPI_COMM_SELF, FM_ERR_HDF5,
              "%s is not a one-dimensional compound dataset (class %s, rank %d; in \"%s\")", what, FMH5ClassName(ft >= 0 ? H5Tget_class(ft) : H5T_NO_CLASS),
              sp >= 0 ? H5Sget_simple_extent_ndims(sp) : -1, path);
  FMCallGoto(dataset_count(d, what, path, FM_TRACE_MAX_RANKS, &dims));
  FMCallGoto(FMH5CheckCompound_Private(ft, what, path));
  if (dims == 0) goto cleanup;
  FMCallGoto(FMCalloc((size_t)dims, &tmp));
  for (hsize_t i = 0; i < dims; i++) tmp[i] = td->rows[0], tmp[i].rank = -1;
  mt = row_read_type(ft);
  FMH5CheckGoto(mt >= 0 && H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, tmp) >= 0, FM_ERR_HDF5, "Cannot read %s (in \"%s\")", what, path);
  for (hsize_t i = 0; i < dims; i++)
    if (tmp[i].rank >= 0 && tmp[i].rank < td->nranks) {
      FMTraceRankRow *o = &td->rows[tmp[i].rank];
      *o = tmp[i];
      o->gpu_busid[sizeof(o->gpu_busid) - 1] = o->hostname[sizeof(o->hostname) - 1] = '\0';
    }
cleanup:
  H5Eclear2(H5E_DEFAULT);
  free(tmp);
  if (mt >= 0) H5Tclose(mt);
  if (ft >= 0) H5Tclose(ft);
  if (sp >= 0) H5Sclose(sp);
  if (d >= 0) H5Dclose(d);
  return ierr;
}

/* An optional numeric attribute: 0 when missing or not one number. */
static double opt_double(hid_t obj, const char *where, const char *name)
{
  double v = 0;
  if (H5Aexists(obj, name) <= 0 || FMH5AttrReadDouble(obj, where, name, FM_FALSE, &v)) v = 0;
  return v;
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

/* FMTraceLoad_Private - see fmtracing.h. Not collective, no messages. */
FMErrorCode FMTraceLoad_Private(const char *path, const char *run, FMTraceData *td)
{
  FMValidPointer(path, 1);
  FMValidPointer(td, 3);
  memset(td, 0, sizeof(*td));
#if !FM_HAVE_HDF5
  (void)run;
  FMRaise(MPI_COMM_SELF, FM_ERR_SUP, "FMTraceLoad(\"%s\"): flashmask was built without HDF5; reconfigure with --with-hdf5", path);
#else
  {
    hid_t f = -1, g = -1;
    char where[300];
    FMErrorCode ierr = FM_SUCCESS;
    FMH5Quiet q;
    FMH5QuietPush(&q);
    f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    FMH5CheckGoto(f >= 0, FM_ERR_FILE, "Argument 1 (path): cannot open \"%s\" as an HDF5 file", path);
    if (H5Aexists(f, "created") > 0 && FMH5AttrReadStr(f, "/", "created", FM_FALSE, td->created, sizeof(td->created))) td->created[0] = '\0';
    if (H5Aexists(f, "library_version") > 0 && FMH5AttrReadStr(f, "/", "library_version", FM_FALSE, td->version, sizeof(td->version)))
      td->version[0] = '\0';
    FMCallGoto(open_run(f, path, run, td, &g));
    snprintf(where, sizeof(where), "/traces/%s", td->run);
    td->bytes_needed = opt_double(g, where, "bytes_needed");
    td->bytes_allgather = opt_double(g, where, "bytes_allgather");
    {
      double nr = opt_double(g, where, "nranks");
      FMCheckGoto(isfinite(nr) && nr >= 0 && nr <= FM_TRACE_MAX_RANKS, MPI_COMM_SELF, FM_ERR_HDF5,
                  "Attribute nranks of %s is %g; expected 0 <= nranks <= FM_TRACE_MAX_RANKS = %d (in \"%s\")", where, nr, FM_TRACE_MAX_RANKS,
                  path);
      td->nranks = (int)nr;
    }
    FMCallGoto(read_events(g, path, td));
    FMCallGoto(read_rows(g, path, td));
  cleanup:
    if (g >= 0) H5Gclose(g);
    if (f >= 0) H5Fclose(f);
    H5Eclear2(H5E_DEFAULT);
    FMH5QuietPop(&q);
    if (ierr) FMTraceDataFree_Private(td);
    return ierr;
  }
#endif
}

/* FMTraceDataFree_Private - see fmtracing.h. */
void FMTraceDataFree_Private(FMTraceData *td)
{
  if (!td) return;
  FMFree(td->ev);
  FMFree(td->rows);
  td->n = 0;
  td->nranks = 0;
}
