/*
 * trace.c - per-rank event traces (-fm_trace file.h5): recording, the summary metrics and
 * the HDF5 writer. Interface and metric definitions: include/flashmask/private/fmtrace.h;
 * file layout: doc/traces.md.
 *
 * Saving. With parallel HDF5 (FM_HAVE_HDF5_PARALLEL) every rank opens the file through the
 * MPI-IO driver, creates the same objects with the same arguments, writes its row of
 * /traces/<run>/ranks and its events at the MPI_Exscan offset of the event counts. Without
 * it, or with -fm_trace_serial / FM_TRACE_SERIAL=1, the rows and events are gathered to
 * rank 0, which writes them with the serial API through the same writer; its outcome is
 * broadcast so every rank returns the same code.
 *
 * The HDF5 plumbing (quiet error stack, attribute writers, root attributes, format check)
 * is shared with the mask files: include/flashmask/private/fmh5.h, src/sys/h5util.c.
 */
#include <flashmask/private/fmtrace.h>
#include <flashmask/private/fmh5.h>
#include <flashmask/fmconf.h>
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#if FM_HAVE_HDF5
#include <errno.h>
#endif

const char *const FMTraceKindNames[] = {"compute", "send", "recv", "wait", "reduce", "copy", NULL};

struct _p_FMTrace {
  MPI_Comm comm;          /* borrowed */
  int rank, size;
  char run[256];
  double t0;              /* origin (an FMTime() value) */
  FMTraceEvent *ev;
  size_t n, cap;
  FMTraceRankRow row;     /* this rank's placement */
  double bytes_needed, bytes_allgather;
};

/* ================================================================ recording */

static FMErrorCode check_run_name(const char *name)
{
  FMCheck(name[0] != '\0', MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 2 (run_name) is empty; expected a group name such as \"fwd\"");
  FMCheck(!strchr(name, '/'), MPI_COMM_SELF, FM_ERR_ARG_WRONG,
          "Argument 2 (run_name) is \"%s\"; expected a name without '/' (it becomes /traces/<run_name>)", name);
  FMCheck(strcmp(name, ".") && strcmp(name, ".."), MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 2 (run_name) is \"%s\"; expected a group name",
          name);
  FMCheck(strlen(name) < 256, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 2 (run_name) is %zu characters long; expected fewer than 256",
          strlen(name));
  return FM_SUCCESS;
}

/*
 * FMTraceCreate_Private - see fmtrace.h. Collective on comm.
 *   The node split gives the time origin (minimum of FMTime() over the node's ranks after a
 *   barrier) and, without self, the node index and local rank.
 */
FMErrorCode FMTraceCreate_Private(MPI_Comm comm, const char *run_name, const FMRankInfo *self, FMTrace *tr)
{
  FMTrace t = NULL;
  MPI_Comm nodecomm = MPI_COMM_NULL;
  int rank, size, lrank, leader, before = 0, node = 0;
  double now;
  FMErrorCode ierr;

  FMValidPointer(tr, 4);
  *tr = NULL;
  FMCheck(comm != MPI_COMM_NULL, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 1 (comm) is MPI_COMM_NULL; expected a communicator");
  FMValidPointer(run_name, 2);
  ierr = check_run_name(run_name);
  if (!ierr) ierr = FMCalloc(1, &t);
  ierr = FMAgree_Private(comm, ierr, __FILE__, __func__, __LINE__);
  if (ierr) {
    free(t);
    return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
  }
  FMCallMPI(MPI_Comm_rank(comm, &rank));
  FMCallMPI(MPI_Comm_size(comm, &size));
  t->comm = comm;
  t->rank = rank;
  t->size = size;
  snprintf(t->run, sizeof(t->run), "%s", run_name);

  /* Time origin: ranks of a node share CLOCK_MONOTONIC, so their minimum after the barrier is
     exact; different nodes are aligned at the barrier's exit. */
  FMCallMPI(MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &nodecomm));
  FMCallMPI(MPI_Comm_rank(nodecomm, &lrank));
  FMCallMPI(MPI_Barrier(comm));
  now = FMTime();
  FMCallMPI(MPI_Allreduce(&now, &t->t0, 1, MPI_DOUBLE, MPI_MIN, nodecomm));
  /* Node index when the caller gives none: the number of node leaders of lower rank. */
  leader = lrank == 0;
  FMCallMPI(MPI_Exscan(&leader, &before, 1, MPI_INT, MPI_SUM, comm));
  if (rank == 0) before = 0; /* MPI_Exscan leaves rank 0's result undefined */
  node = before;
  FMCallMPI(MPI_Bcast(&node, 1, MPI_INT, 0, nodecomm));
  FMCallMPI(MPI_Comm_free(&nodecomm));

  t->row.rank = rank;
  if (self) {
    t->row.node = self->node;
    t->row.local_rank = self->node_rank;
    t->row.numa = self->numa;
    snprintf(t->row.gpu_busid, sizeof(t->row.gpu_busid), "%s", self->gpu_busid);
    snprintf(t->row.hostname, sizeof(t->row.hostname), "%s", self->hostname);
  } else {
    t->row.node = node;
    t->row.local_rank = lrank;
    t->row.numa = -1;
    t->row.gpu_busid[0] = '\0';
    if (gethostname(t->row.hostname, sizeof(t->row.hostname)) != 0) t->row.hostname[0] = '\0';
    t->row.hostname[sizeof(t->row.hostname) - 1] = '\0';
  }
  *tr = t;
  return FM_SUCCESS;
}

/* FMTraceRecord_Private - see fmtrace.h. Not collective. */
FMErrorCode FMTraceRecord_Private(FMTrace tr, int kind, int stream, double t_begin, double t_end, double bytes,
                                  double flops, int peer, int chunk)
{
  FMTraceEvent *e;
  if (!tr) return FM_SUCCESS;
  FMCheck(kind >= 0 && kind < FM_TRACE_NKINDS, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Argument 2 (kind) is %d; expected an FMTraceKind in [0, %d)", kind, (int)FM_TRACE_NKINDS);
  FMCheck(stream >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument 3 (stream) is %d; expected >= 0", stream);
  FMCheck(t_begin <= t_end, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Arguments 4, 5 (t_begin, t_end) are %.9g, %.9g; expected t_begin <= t_end", t_begin, t_end);
  FMCheck(bytes >= 0 && flops >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Arguments 6, 7 (bytes, flops) are %g, %g; expected values >= 0", bytes, flops);
  FMCheck(peer >= -1 && peer < tr->size, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Argument 8 (peer) is %d; expected -1 or a rank in [0, %d)", peer, tr->size);
  if (tr->n == tr->cap) {
    size_t cap = tr->cap ? 2 * tr->cap : 256;
    FMTraceEvent *p = (FMTraceEvent *)realloc(tr->ev, cap * sizeof(*p));
    FMCheck(p != NULL, MPI_COMM_SELF, FM_ERR_MEM, "Out of memory growing the trace to %zu events", cap);
    tr->ev = p;
    tr->cap = cap;
  }
  e = &tr->ev[tr->n++];
  e->rank = tr->rank;
  e->kind = kind;
  e->stream = stream;
  e->t_begin = t_begin - tr->t0;
  e->t_end = t_end - tr->t0;
  e->bytes = bytes;
  e->flops = flops;
  e->peer = peer;
  e->chunk = chunk;
  return FM_SUCCESS;
}

/* FMTraceSetBytes_Private - see fmtrace.h. Not collective. */
FMErrorCode FMTraceSetBytes_Private(FMTrace tr, double bytes_needed, double bytes_allgather)
{
  if (!tr) return FM_SUCCESS;
  FMCheck(bytes_needed >= 0 && bytes_allgather >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Arguments 2, 3 (bytes_needed, bytes_allgather) are %g, %g; expected values >= 0", bytes_needed, bytes_allgather);
  tr->bytes_needed = bytes_needed;
  tr->bytes_allgather = bytes_allgather;
  return FM_SUCCESS;
}

/* FMTraceGetOrigin_Private - see fmtrace.h. Not collective. */
FMErrorCode FMTraceGetOrigin_Private(FMTrace tr, double *t0)
{
  FMValidPointer(tr, 1);
  FMValidPointer(t0, 2);
  *t0 = tr->t0;
  return FM_SUCCESS;
}

/* FMTraceGetEvents_Private - see fmtrace.h. Not collective. */
FMErrorCode FMTraceGetEvents_Private(FMTrace tr, size_t *n, const FMTraceEvent **ev)
{
  FMValidPointer(tr, 1);
  FMValidPointer(n, 2);
  *n = tr->n;
  if (ev) *ev = tr->ev;
  return FM_SUCCESS;
}

/* FMTraceDestroy_Private - see fmtrace.h. Not collective. */
FMErrorCode FMTraceDestroy_Private(FMTrace *tr)
{
  if (!tr || !*tr) return FM_SUCCESS;
  free((*tr)->ev);
  free(*tr);
  *tr = NULL;
  return FM_SUCCESS;
}

/* ================================================================ metrics */
typedef struct {
  double a, b;
} Interval;

static int interval_cmp(const void *x, const void *y)
{
  const Interval *p = (const Interval *)x, *q = (const Interval *)y;
  if (p->a < q->a) return -1;
  if (p->a > q->a) return 1;
  return (p->b > q->b) - (p->b < q->b);
}

/* Sort iv[0..n) and merge it in place into disjoint intervals; returns the new count. */
static size_t interval_union(Interval *iv, size_t n)
{
  size_t m = 0;
  if (!n) return 0;
  qsort(iv, n, sizeof(*iv), interval_cmp);
  for (size_t i = 1; i < n; i++) {
    if (iv[i].a <= iv[m].b) {
      if (iv[i].b > iv[m].b) iv[m].b = iv[i].b;
    } else {
      iv[++m] = iv[i];
    }
  }
  return m + 1;
}

static double interval_length(const Interval *iv, size_t n)
{
  double s = 0;
  for (size_t i = 0; i < n; i++) s += iv[i].b - iv[i].a;
  return s;
}

/* Length of [a, b] intersected with the disjoint sorted intervals u[0..n). */
static double interval_overlap(const Interval *u, size_t n, double a, double b)
{
  size_t lo = 0, hi = n;
  double s = 0;
  while (lo < hi) { /* first interval ending after a */
    size_t mid = lo + (hi - lo) / 2;
    if (u[mid].b <= a) lo = mid + 1;
    else hi = mid;
  }
  for (size_t i = lo; i < n && u[i].a < b; i++) {
    double x = u[i].a > a ? u[i].a : a, y = u[i].b < b ? u[i].b : b;
    if (y > x) s += y - x;
  }
  return s;
}

static int is_transfer(int kind) { return kind == FM_TRACE_SEND || kind == FM_TRACE_RECV || kind == FM_TRACE_REDUCE; }

/* FMTraceRankStatsCompute_Private - see fmtrace.h. Not collective, no messages. */
FMErrorCode FMTraceRankStatsCompute_Private(const FMTraceEvent *ev, size_t n, int rank, FMTraceRankStats *rs)
{
  Interval *cpu = NULL, *wt = NULL;
  size_t nc = 0, nw = 0;
  int first = 1;
  FMValidPointer(rs, 4);
  memset(rs, 0, sizeof(*rs));
  FMCheck(n == 0 || ev != NULL, MPI_COMM_SELF, FM_ERR_ARG_NULL, "Argument 1 (ev) is NULL with n = %zu events", n);
  FMCall(FMMalloc(n, &cpu));
  if (FMMalloc(n, &wt)) {
    free(cpu);
    FMRaise(MPI_COMM_SELF, FM_ERR_MEM, "Out of memory for the wait intervals of %zu events", n);
  }
  for (size_t i = 0; i < n; i++) {
    const FMTraceEvent *e = &ev[i];
    if (rank >= 0 && e->rank != rank) continue;
    rs->nevents += 1;
    if (first || e->t_begin < rs->t_first) rs->t_first = e->t_begin;
    if (first || e->t_end > rs->t_last) rs->t_last = e->t_end;
    first = 0;
    if (e->kind == FM_TRACE_COMPUTE) {
      cpu[nc].a = e->t_begin;
      cpu[nc++].b = e->t_end;
      rs->flops += e->flops;
    } else if (e->kind == FM_TRACE_WAIT) {
      wt[nw].a = e->t_begin;
      wt[nw++].b = e->t_end;
    } else if (e->kind == FM_TRACE_SEND || e->kind == FM_TRACE_REDUCE) {
      rs->bytes_sent += e->bytes;
    } else if (e->kind == FM_TRACE_RECV) {
      rs->bytes_recv += e->bytes;
    }
  }
  nc = interval_union(cpu, nc);
  nw = interval_union(wt, nw);
  rs->compute = interval_length(cpu, nc);
  rs->wait = interval_length(wt, nw);
  for (size_t i = 0; i < n; i++) {
    const FMTraceEvent *e = &ev[i];
    if ((rank >= 0 && e->rank != rank) || !is_transfer(e->kind)) continue;
    rs->comm += e->t_end - e->t_begin;
    rs->hidden += interval_overlap(cpu, nc, e->t_begin, e->t_end);
  }
  free(cpu);
  free(wt);
  return FM_SUCCESS;
}

/* FMTraceStatsCombine_Private - see fmtrace.h. Not collective, no messages. */
void FMTraceStatsCombine_Private(int nranks, const FMTraceRankStats *all, double bytes_needed, double bytes_allgather,
                                 FMTraceStats *st)
{
  double csum = 0, wsum = 0;
  memset(st, 0, sizeof(*st));
  st->nranks = nranks;
  for (int r = 0; r < nranks; r++) {
    const FMTraceRankStats *s = &all[r];
    st->nevents += s->nevents;
    csum += s->compute;
    if (s->compute > st->compute_max) st->compute_max = s->compute;
    st->comm_total += s->comm;
    st->hidden_total += s->hidden;
    wsum += s->wait;
    if (s->wait > st->exposed_max) st->exposed_max = s->wait;
    st->bytes_moved += s->bytes_sent;
    st->bytes_recv += s->bytes_recv;
    st->flops += s->flops;
    if (s->t_last > st->span) st->span = s->t_last;
  }
  st->compute_mean = nranks > 0 ? csum / nranks : 0;
  st->imbalance = st->compute_mean > 0 ? st->compute_max / st->compute_mean : 1.0;
  st->overlap_efficiency = st->comm_total > 0 ? st->hidden_total / st->comm_total : 1.0;
  st->exposed_mean = nranks > 0 ? wsum / nranks : 0;
  st->bytes_needed = bytes_needed;
  st->bytes_allgather = bytes_allgather;
}

#define FM_TRACE_NSTAT ((int)(sizeof(FMTraceRankStats) / sizeof(double)))

/* FMTraceSummary_Private - see fmtrace.h. Collective (one MPI_Allgather). */
FMErrorCode FMTraceSummary_Private(FMTrace tr, FMTraceStats *st)
{
  FMTraceRankStats self, *all = NULL;
  double *buf = NULL, *mine, need = 0, ag = 0;
  const int m = FM_TRACE_NSTAT + 2;
  FMErrorCode ierr;
  FMValidPointer(tr, 1);
  FMValidPointer(st, 2);
  ierr = FMTraceRankStatsCompute_Private(tr->ev, tr->n, -1, &self);
  if (!ierr) ierr = FMMalloc((size_t)tr->size * m + m, &buf);
  if (!ierr) ierr = FMMalloc(tr->size, &all);
  if (ierr) {
    free(buf);
    buf = NULL;
  }
  ierr = FMAgree_Private(tr->comm, ierr, __FILE__, __func__, __LINE__);
  if (ierr) {
    free(buf);
    free(all);
    return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
  }
  mine = buf + (size_t)tr->size * m;
  memcpy(mine, &self, sizeof(self));
  mine[FM_TRACE_NSTAT] = tr->bytes_needed;
  mine[FM_TRACE_NSTAT + 1] = tr->bytes_allgather;
  if (MPI_Allgather(mine, m, MPI_DOUBLE, buf, m, MPI_DOUBLE, tr->comm) != MPI_SUCCESS) {
    free(buf);
    free(all);
    FMRaise(MPI_COMM_SELF, FM_ERR_MPI, "MPI_Allgather of the per-rank trace figures failed");
  }
  for (int r = 0; r < tr->size; r++) {
    memcpy(&all[r], buf + (size_t)r * m, sizeof(all[r]));
    need += buf[(size_t)r * m + FM_TRACE_NSTAT];
    ag += buf[(size_t)r * m + FM_TRACE_NSTAT + 1];
  }
  FMTraceStatsCombine_Private(tr->size, all, need, ag, st);
  st->self = self;
  free(buf);
  free(all);
  return FM_SUCCESS;
}

/* ================================================================ HDF5 */
#if FM_HAVE_HDF5

/* Memory (native) and file (packed little-endian) compound types of an event. */
static hid_t event_type(int file)
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
  char b[256], names[FM_TRACE_NKINDS][16];
  htri_t ex;

#define FAIL(code, ...)                                                              \
  do {                                                                               \
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, (code), __VA_ARGS__); \
    goto done;                                                                       \
  } while (0)
#define TRY(expr)                                                                    \
  do {                                                                               \
    ierr = (expr);                                                                   \
    if (ierr) { ierr = FMTraceback_Private(__FILE__, __func__, __LINE__, ierr); goto done; } \
  } while (0)

  TRY(FMH5WriteRootAttrs_Private(file, job->mpi_size, job->created));
  ex = H5Lexists(file, "traces", H5P_DEFAULT);
  traces = ex > 0 ? H5Gopen2(file, "traces", H5P_DEFAULT) : ex == 0 ? H5Gcreate2(file, "traces", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
  if (traces < 0) FAIL(FM_ERR_HDF5, "Cannot open or create group /traces in \"%s\"; HDF5 says: %s", job->path, FMH5LastMessage(b));
  ex = H5Lexists(traces, job->run, H5P_DEFAULT);
  if (ex > 0 && H5Ldelete(traces, job->run, H5P_DEFAULT) < 0) ex = -1;
  if (ex >= 0) grp = H5Gcreate2(traces, job->run, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  if (grp < 0) FAIL(FM_ERR_HDF5, "Cannot create group /traces/%s in \"%s\"; HDF5 says: %s", job->run, job->path, FMH5LastMessage(b));

  memset(names, 0, sizeof(names));
  for (int k = 0; k < FM_TRACE_NKINDS; k++) snprintf(names[k], sizeof(names[k]), "%s", FMTraceKindNames[k]);
  TRY(FMH5AttrWriteStr(grp, "time_unit", "s"));
  TRY(FMH5AttrWriteInt(grp, "nranks", job->mpi_size));
  TRY(FMH5AttrWriteDouble(grp, "nevents", (double)job->ev_total));
  TRY(FMH5AttrWriteStrs(grp, "kind_names", FM_TRACE_NKINDS, sizeof(names[0]), names[0]));
  TRY(FMH5AttrWriteStr(grp, "clock", "FMTime (CLOCK_MONOTONIC); origin: FMTraceCreate_Private, per node after a barrier"));
  TRY(FMH5AttrWriteDouble(grp, "bytes_needed", job->bytes_needed));
  TRY(FMH5AttrWriteDouble(grp, "bytes_allgather", job->bytes_allgather));

  /* ranks: one row per rank */
  {
    hsize_t dims = (hsize_t)job->mpi_size;
    sp = H5Screate_simple(1, &dims, NULL);
    ft = row_type(1);
    mt = row_type(0);
    if (sp < 0 || ft < 0 || mt < 0) FAIL(FM_ERR_HDF5, "Cannot create the type of /traces/%s/ranks; HDF5 says: %s", job->run, FMH5LastMessage(b));
    d = H5Dcreate2(grp, "ranks", ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (d < 0) FAIL(FM_ERR_HDF5, "Cannot create dataset /traces/%s/ranks in \"%s\"; HDF5 says: %s", job->run, job->path, FMH5LastMessage(b));
    TRY(write_slice(d, mt, job->nrows, job->row_off, job->rows, job->dxpl, "the ranks table"));
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
    ft = event_type(1);
    mt = event_type(0);
    if (sp < 0 || dcpl < 0 || ft < 0 || mt < 0 || H5Pset_chunk(dcpl, 1, &chunk) < 0)
      FAIL(FM_ERR_HDF5, "Cannot set up dataset /traces/%s/events; HDF5 says: %s", job->run, FMH5LastMessage(b));
    d = H5Dcreate2(grp, "events", ft, sp, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    if (d < 0) FAIL(FM_ERR_HDF5, "Cannot create dataset /traces/%s/events in \"%s\"; HDF5 says: %s", job->run, job->path, FMH5LastMessage(b));
    if (job->ev_total) TRY(write_slice(d, mt, job->nev, job->ev_off, job->ev, job->dxpl, "the events"));
  }
done:
  if (d >= 0) H5Dclose(d);
  if (mt >= 0) H5Tclose(mt);
  if (ft >= 0) H5Tclose(ft);
  if (dcpl >= 0) H5Pclose(dcpl);
  if (sp >= 0) H5Sclose(sp);
  if (grp >= 0) H5Gclose(grp);
  if (traces >= 0) H5Gclose(traces);
  return ierr;
#undef FAIL
#undef TRY
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
  FMErrorCode ierr = open_file(job->path, exists, H5P_DEFAULT, &file);
  if (!ierr) ierr = FMH5CheckFormat_Private(file, job->path, "a trace");
  if (!ierr) ierr = write_run(file, job);
  if (file >= 0 && H5Fclose(file) < 0 && !ierr) {
    char b[256];
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_FILE, "Cannot close (flush) \"%s\"; HDF5 says: %s",
                           job->path, FMH5LastMessage(b));
  }
  if (ierr) return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
  return FM_SUCCESS;
}

/* Gather rows and events to rank 0, which writes; every rank returns rank 0's code. */
static FMErrorCode save_serial(FMTrace tr, WriteJob *job, int exists)
{
  FMTraceRankRow *rows = NULL;
  FMTraceEvent *all = NULL;
  int *counts = NULL, *displs = NULL, code;
  int mybytes = (int)(tr->n * sizeof(FMTraceEvent));
  FMErrorCode ierr = FM_SUCCESS;
  char msg[1024];

  FMCheck(tr->n <= (size_t)INT_MAX / sizeof(FMTraceEvent), MPI_COMM_SELF, FM_ERR_ARG_SIZ,
          "This rank has %zu trace events, too many to gather to rank 0 (at most %zu); use parallel HDF5", tr->n,
          (size_t)INT_MAX / sizeof(FMTraceEvent));
  if (tr->rank == 0) {
    ierr = FMMalloc(tr->size, &rows);
    if (!ierr) ierr = FMMalloc(tr->size, &counts);
    if (!ierr) ierr = FMMalloc(tr->size, &displs);
    if (!ierr) ierr = job->ev_total * sizeof(FMTraceEvent) <= (hsize_t)INT_MAX
                          ? FMMalloc((size_t)job->ev_total, &all)
                          : FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_ARG_SIZ,
                                            "%llu trace events are too many to gather to rank 0; use parallel HDF5",
                                            (unsigned long long)job->ev_total);
  }
  ierr = FMAgree_Private(tr->comm, ierr, __FILE__, __func__, __LINE__);
  if (ierr) goto fail;
  if (MPI_Gather(&tr->row, (int)sizeof(FMTraceRankRow), MPI_BYTE, rows, (int)sizeof(FMTraceRankRow), MPI_BYTE, 0, tr->comm) ||
      MPI_Gather(&mybytes, 1, MPI_INT, counts, 1, MPI_INT, 0, tr->comm)) {
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_MPI, "MPI_Gather of the trace rows failed");
    goto fail;
  }
  if (tr->rank == 0) {
    int off = 0;
    for (int r = 0; r < tr->size; r++) {
      displs[r] = off;
      off += counts[r];
    }
  }
  if (MPI_Gatherv(tr->ev, mybytes, MPI_BYTE, all, counts, displs, MPI_BYTE, 0, tr->comm)) {
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_MPI, "MPI_Gatherv of the trace events failed");
    goto fail;
  }
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
  free(rows);
  free(all);
  free(counts);
  free(displs);
  /* Broadcast rank 0's outcome (code and message). */
  code = (int)ierr;
  FMCallMPI(MPI_Bcast(&code, 1, MPI_INT, 0, tr->comm));
  if (code == FM_SUCCESS) return FM_SUCCESS;
  if (tr->rank == 0) snprintf(msg, sizeof(msg), "%s", FMGetLastErrorMessage());
  FMCallMPI(MPI_Bcast(msg, (int)sizeof(msg), MPI_CHAR, 0, tr->comm));
  msg[sizeof(msg) - 1] = '\0';
  if (tr->rank == 0) return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
  FMRaise(MPI_COMM_SELF, (FMErrorCode)code, "Rank 0 failed to save trace \"%s\" to \"%s\": %s", job->run, job->path, msg);
fail:
  free(rows);
  free(all);
  free(counts);
  free(displs);
  return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
}

#if FM_HAVE_HDF5_PARALLEL
/* Every rank opens the file through MPI-IO and writes its own slices (collective calls). */
static FMErrorCode save_parallel(FMTrace tr, WriteJob *job, int exists)
{
  hid_t fapl = -1, file = -1, dxpl = -1;
  FMErrorCode ierr = FM_SUCCESS;
  char b[256];
  long long n = (long long)tr->n, off = 0;

  FMCallMPI(MPI_Exscan(&n, &off, 1, MPI_LONG_LONG, MPI_SUM, tr->comm));
  if (tr->rank == 0) off = 0;
  job->ev = tr->ev;
  job->nev = (hsize_t)tr->n;
  job->ev_off = (hsize_t)off;
  job->rows = &tr->row;
  job->nrows = 1;
  job->row_off = (hsize_t)tr->rank;

  fapl = H5Pcreate(H5P_FILE_ACCESS);
  dxpl = H5Pcreate(H5P_DATASET_XFER);
  if (fapl < 0 || dxpl < 0 || H5Pset_fapl_mpio(fapl, tr->comm, MPI_INFO_NULL) < 0 || H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE) < 0)
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_HDF5, "Cannot set up the MPI-IO property lists; HDF5 says: %s",
                           FMH5LastMessage(b));
  job->dxpl = dxpl;
  if (!ierr) ierr = open_file(job->path, exists, fapl, &file);
  ierr = FMAgree_Private(tr->comm, ierr, __FILE__, __func__, __LINE__);
  if (!ierr) ierr = FMAgree_Private(tr->comm, FMH5CheckFormat_Private(file, job->path, "a trace"), __FILE__, __func__, __LINE__);
  if (!ierr) ierr = FMAgree_Private(tr->comm, write_run(file, job), __FILE__, __func__, __LINE__);
  if (file >= 0 && H5Fclose(file) < 0 && !ierr)
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_FILE, "Cannot close (flush) \"%s\"; HDF5 says: %s",
                           job->path, FMH5LastMessage(b));
  if (fapl >= 0) H5Pclose(fapl);
  if (dxpl >= 0) H5Pclose(dxpl);
  ierr = FMAgree_Private(tr->comm, ierr, __FILE__, __func__, __LINE__);
  if (ierr) return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
  return FM_SUCCESS;
}
#endif
#endif /* FM_HAVE_HDF5 */

/* FMTraceSave_Private - see fmtrace.h. Collective. */
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
    FMBool serial = FM_FALSE;
    const char *env = getenv("FM_TRACE_SERIAL");
    double in[3], sum[3];
    int hdr[2] = {0, 0}; /* exists, serial (rank 0 decides) */
    long long n = (long long)tr->n, total = 0;
    char created[64];
    FMErrorCode ierr;

    FMCall(FMOptionsGetBool("-fm_trace_serial", "Write -fm_trace files through rank 0 even with parallel HDF5", &serial, NULL));
    if (env && env[0] && strcmp(env, "0")) serial = FM_TRUE;
    if (!FM_HAVE_HDF5_PARALLEL) serial = FM_TRUE;
    memset(&job, 0, sizeof(job));
    FMH5QuietPush(&q);
    ierr = FM_SUCCESS;
    if (tr->rank == 0) {
      FMH5Timestamp(created);
      hdr[1] = serial ? 1 : 0;
      if (access(path, F_OK) == 0) {
        htri_t h = H5Fis_hdf5(path);
        H5Eclear2(H5E_DEFAULT);
        if (h > 0) hdr[0] = 1;
        else
          ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_FILE,
                                 "Argument 2 (path): \"%s\" exists and is not an HDF5 file; refusing to overwrite it", path);
      }
    }
    ierr = FMAgree_Private(tr->comm, ierr, __FILE__, __func__, __LINE__);
    if (ierr) {
      FMH5QuietPop(&q);
      return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
    }
    in[0] = tr->bytes_needed;
    in[1] = tr->bytes_allgather;
    in[2] = 0;
    if (MPI_Bcast(hdr, 2, MPI_INT, 0, tr->comm) || MPI_Bcast(created, sizeof(created), MPI_CHAR, 0, tr->comm) ||
        MPI_Allreduce(in, sum, 3, MPI_DOUBLE, MPI_SUM, tr->comm) || MPI_Allreduce(&n, &total, 1, MPI_LONG_LONG, MPI_SUM, tr->comm)) {
      FMH5QuietPop(&q);
      FMRaise(MPI_COMM_SELF, FM_ERR_MPI, "MPI collective failed while saving trace \"%s\" to \"%s\"", tr->run, path);
    }
    job.path = path;
    job.run = tr->run;
    job.created = created;
    job.mpi_size = tr->size;
    job.ev_total = (hsize_t)total;
    job.bytes_needed = sum[0];
    job.bytes_allgather = sum[1];
#if FM_HAVE_HDF5_PARALLEL
    if (!hdr[1]) ierr = save_parallel(tr, &job, hdr[0]);
    else
#endif
      ierr = save_serial(tr, &job, hdr[0]);
    FMH5QuietPop(&q);
    if (ierr) return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
    return FM_SUCCESS;
  }
#endif
}
