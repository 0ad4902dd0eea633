/*
 * traceio.c - the HDF5 side of the event traces: the compound types of an event and of a rank
 * row, and the reader (FMTraceLoad_Private) that fmtrace and the tests use; the writer
 * (FMTraceSave_Private) is tracewrite.c, with the same types, so the file layout of
 * doc/traces.md is written down once.
 *
 * The HDF5 plumbing (quiet error stack, attribute writers, root attributes, format check)
 * is shared with the mask files: include/flashmask/private/fmh5.h, src/sys/h5util.c.
 */
#include "traceimpl.h"
#include <flashmask/private/fmh5.h>
#include <flashmask/fmconf.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#if FM_HAVE_HDF5

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

/* FMTraceRowType_Private - see traceimpl.h. */
hid_t FMTraceRowType_Private(int file)
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
  hid_t full = FMTraceRowType_Private(0), t = H5Tcreate(H5T_COMPOUND, sizeof(FMTraceRankRow));
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
    /* the run's own time where it has one (files before 2026-12-05 have only the file's) */
    if (H5Aexists(g, "created") > 0) {
      char c[sizeof(td->created)];
      if (!FMH5AttrReadStr(g, where, "created", FM_FALSE, c, sizeof(c))) memcpy(td->created, c, sizeof(c)); /* unreadable: the root's stays */
    }
    H5Eclear2(H5E_DEFAULT);
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
