/*
 * test_trace - the event recorder (src/sys/trace.c) on any number of ranks.
 *
 * Every rank records a synthetic set of events whose metrics are known exactly (times are
 * dyadic offsets from the recorder's origin, so they survive the subtraction exactly), in a
 * random order, and checks FMTraceSummary_Private against the closed forms below. It then
 * saves the run with parallel HDF5 and again serially (FMTraceSetSerial_Private: gather to
 * rank 0), checks both files with the HDF5 API (root and run attributes, the dataset layout)
 * and reads them back with FMTraceLoad_Private (the ranks table, the event count and each
 * rank's events at its offset), saves a second run in which only the last rank has events and
 * whose ranks table is the context's numbering, and checks the error paths.
 *
 * Per rank r of P (stream in parentheses):
 *   COMPUTE (0) [0,1] 100 flops, (0) [2, 3 + r/2] 200 flops, (2) [1/4, 3/4] 50 flops
 *   RECV    (1) [1/2, 5/2] 1024 (r+1) bytes  -> hidden 1 of 2
 *   SEND    (1) [1, 3/2]    512 (r+1) bytes  -> hidden 0
 *   REDUCE  (1) [6, 13/2]   100 bytes        -> hidden 0
 *   WAIT    (0) [3/2, 2], (1) [7/4, 2], (0) [5, 5 + r/4] (empty on rank 0)
 *   COPY    (3) r events [7 + i/8, 7 + i/8 + 1/16]
 * so compute = 2 + r/2, comm = 3, hidden = 1, wait = 1/2 + r/4, 9 + r events.
 *
 * Usage: test_trace -o file.h5   (also writes file.h5 with ".serial.h5" appended)
 */
#define _GNU_SOURCE /* strcasestr in fmtest.h */
#include <flashmask/private/fmtracing.h>
#include "fmtest.h"
#include <hdf5.h>
#include <math.h>
#include <unistd.h>

static int rank, size;

#define CLOSE_TO(a, b) (fabs((a) - (b)) <= 1e-12 * (1 + fabs(b)))

static FMContext ctx; /* the recorders' context: its numbering goes into the ranks table */

/* Read a string attribute (fixed or variable length) into buf; returns 0 if absent. */
static int read_str_attr(hid_t obj, const char *name, char *buf, size_t len)
{
  hid_t a, t, mt;
  int ok;
  buf[0] = '\0';
  if (H5Aexists(obj, name) <= 0) return 0;
  a = H5Aopen(obj, name, H5P_DEFAULT);
  t = H5Aget_type(a);
  if (H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) || H5Tget_size(t) >= len) {
    H5Tclose(t);
    H5Aclose(a);
    return 0;
  }
  mt = H5Tcopy(H5T_C_S1);
  H5Tset_size(mt, H5Tget_size(t) + 1);
  ok = H5Aread(a, mt, buf) >= 0;
  H5Tclose(mt);
  H5Tclose(t);
  H5Aclose(a);
  return ok;
}

static int read_num_attr(hid_t obj, const char *name, double *v)
{
  hid_t a;
  int ok;
  if (H5Aexists(obj, name) <= 0) return 0;
  a = H5Aopen(obj, name, H5P_DEFAULT);
  ok = H5Aread(a, H5T_NATIVE_DOUBLE, v) >= 0;
  H5Aclose(a);
  return ok;
}

/* Expected events of rank r (relative times), in a fixed order. Returns the count. */
static int expected_events(int r, int P, FMTraceEvent *e)
{
  int n = 0;
#define EV(k, s, a, b, by, fl, pe, ch)                                               \
  do {                                                                               \
    e[n].rank = r; e[n].kind = (k); e[n].stream = (s); e[n].t_begin = (a); e[n].t_end = (b); \
    e[n].bytes = (by); e[n].flops = (fl); e[n].peer = (pe); e[n].chunk = (ch); n++;  \
  } while (0)
  EV(FM_TRACE_COMPUTE, 0, 0.0, 1.0, 4096, 100, -1, 2 * r);
  EV(FM_TRACE_COMPUTE, 0, 2.0, 3.0 + 0.5 * r, 4096, 200, -1, 2 * r + 1);
  EV(FM_TRACE_COMPUTE, 2, 0.25, 0.75, 0, 50, -1, 7);
  EV(FM_TRACE_RECV, 1, 0.5, 2.5, 1024.0 * (r + 1), 0, (r + P - 1) % P, 2 * ((r + P - 1) % P));
  EV(FM_TRACE_SEND, 1, 1.0, 1.5, 512.0 * (r + 1), 0, (r + 1) % P, 2 * r);
  EV(FM_TRACE_REDUCE, 1, 6.0, 6.5, 100, 0, (r + 1) % P, -1);
  EV(FM_TRACE_WAIT, 0, 1.5, 2.0, 0, 0, (r + P - 1) % P, -1);
  EV(FM_TRACE_WAIT, 1, 1.75, 2.0, 0, 0, -1, -1);
  EV(FM_TRACE_WAIT, 0, 5.0, 5.0 + 0.25 * r, 0, 0, -1, -1);
  for (int i = 0; i < r; i++) EV(FM_TRACE_COPY, 3, 7.0 + 0.125 * i, 7.0 + 0.125 * i + 0.0625, 64, 0, -1, i);
#undef EV
  return n;
}

/* Times are recorded absolute (origin + t) and stored relative to the origin, so they come
   back within rounding of the origin's magnitude (a machine up for days has MPI_Wtime ~ 1e5 s):
   a nanosecond is far below any event here and far above that rounding. */
static int same_time(double a, double b) { return fabs(a - b) <= 1e-9; }

static int same_event(const FMTraceEvent *a, const FMTraceEvent *b)
{
  return a->rank == b->rank && a->kind == b->kind && a->stream == b->stream && same_time(a->t_begin, b->t_begin) && same_time(a->t_end, b->t_end) &&
         a->bytes == b->bytes && a->flops == b->flops && a->peer == b->peer && a->chunk == b->chunk;
}

/*
 * Read /traces/<run> of path and check it: own events (n, mine) at their Exscan offset, total
 * count, the attributes and, when rows_custom, the custom placement of every rank.
 */
static void verify_file(const char *path, const char *run, size_t n, const FMTraceEvent *mine, int rows_custom, double need,
                        double ag)
{
  hid_t f, g, d, sp, dcpl;
  hsize_t dims = 0, maxd = 0;
  char buf[256], gname[300];
  double v;
  long long my = (long long)n, off = 0, total = 0;

  MPI_Exscan(&my, &off, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);
  if (rank == 0) off = 0;
  MPI_Allreduce(&my, &total, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD);

  f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  FMT_CHECK(f >= 0, "%s: cannot open", path);
  if (f < 0) return;
  FMT_CHECK(read_str_attr(f, "format", buf, sizeof(buf)) && !strcmp(buf, "flashmask"), "%s: root format is \"%s\"", path, buf);
  FMT_CHECK(read_num_attr(f, "format_version", &v) && v == 1, "%s: format_version missing or %g", path, v);
  FMT_CHECK(read_str_attr(f, "library_version", buf, sizeof(buf)) && !strcmp(buf, FMGetVersion()), "%s: library_version \"%s\"", path, buf);
  FMT_CHECK(read_str_attr(f, "created", buf, sizeof(buf)) && strlen(buf) >= 19, "%s: created \"%s\"", path, buf);
  FMT_CHECK(read_num_attr(f, "mpi_size", &v) && v == size, "%s: mpi_size %g, expected %d", path, v, size);

  snprintf(gname, sizeof(gname), "/traces/%s", run);
  g = H5Gopen2(f, gname, H5P_DEFAULT);
  FMT_CHECK(g >= 0, "%s: no group %s", path, gname);
  if (g < 0) {
    H5Fclose(f);
    return;
  }
  FMT_CHECK(read_str_attr(g, "time_unit", buf, sizeof(buf)) && !strcmp(buf, "s"), "%s: time_unit \"%s\"", gname, buf);
  FMT_CHECK(read_num_attr(g, "nranks", &v) && v == size, "%s: nranks %g, expected %d", gname, v, size);
  FMT_CHECK(read_num_attr(g, "nevents", &v) && v == (double)total, "%s: nevents %g, expected %lld", gname, v, total);
  FMT_CHECK(read_num_attr(g, "bytes_needed", &v) && v == need, "%s: bytes_needed %g, expected %g", gname, v, need);
  FMT_CHECK(read_num_attr(g, "bytes_allgather", &v) && v == ag, "%s: bytes_allgather %g, expected %g", gname, v, ag);
  {
    hid_t a = H5Aopen(g, "kind_names", H5P_DEFAULT), at = H5Aget_type(a), as = H5Aget_space(a);
    hssize_t np = H5Sget_simple_extent_npoints(as);
    char names[FM_TRACE_NKINDS][16];
    FMT_CHECK(np == FM_TRACE_NKINDS && H5Tget_size(at) == 16, "%s: kind_names has %lld entries of size %zu", gname, (long long)np,
              H5Tget_size(at));
    if (np == FM_TRACE_NKINDS && H5Tget_size(at) == 16 && H5Aread(a, at, names) >= 0)
      for (int k = 0; k < FM_TRACE_NKINDS; k++)
        FMT_CHECK(!strcmp(names[k], FMTraceKindNames[k]), "kind_names[%d] = \"%s\", expected \"%s\"", k, names[k], FMTraceKindNames[k]);
    H5Sclose(as);
    H5Tclose(at);
    H5Aclose(a);
  }

  /* the layout of the events dataset */
  d = H5Dopen2(g, "events", H5P_DEFAULT);
  FMT_CHECK(d >= 0, "%s: no dataset events", gname);
  if (d >= 0) {
    sp = H5Dget_space(d);
    H5Sget_simple_extent_dims(sp, &dims, &maxd);
    FMT_CHECK(dims == (hsize_t)total, "%s/events has %llu events, expected %lld (sum over ranks)", gname, (unsigned long long)dims, total);
    FMT_CHECK(maxd == H5S_UNLIMITED, "%s/events is not extendable (maxdims %llu)", gname, (unsigned long long)maxd);
    dcpl = H5Dget_create_plist(d);
    FMT_CHECK(H5Pget_layout(dcpl) == H5D_CHUNKED, "%s/events is not chunked", gname);
    H5Pclose(dcpl);
    H5Sclose(sp);
    H5Dclose(d);
  }
  H5Gclose(g);
  H5Fclose(f);

  /* rows and events through the library's reader, the one fmtrace uses */
  {
    FMTraceData td;
    FMErrorCode e = FMTraceLoad_Private(path, run, &td);
    FMT_CHECK(e == FM_SUCCESS, "FMTraceLoad_Private(%s, %s): %s", path, run, FMGetLastErrorMessage());
    if (e) return;
    FMT_CHECK(!strcmp(td.run, run) && td.nranks == size && td.n == (size_t)total && td.bytes_needed == need && td.bytes_allgather == ag,
              "%s: loaded run \"%s\", %d ranks, %zu events, bytes %g/%g; expected %s, %d, %lld, %g/%g", gname, td.run, td.nranks, td.n,
              td.bytes_needed, td.bytes_allgather, run, size, total, need, ag);
    FMT_CHECK(!strcmp(td.version, FMGetVersion()) && strlen(td.created) >= 19, "%s: loaded version \"%s\", created \"%s\"", path, td.version,
              td.created);
    for (int q = 0; q < size && q < td.nranks; q++) {
      const FMTraceRankRow *w = &td.rows[q];
      FMT_CHECK(w->rank == q, "%s/ranks[%d].rank = %d", gname, q, w->rank);
      if (rows_custom) {
        char bus[32], host[64];
        snprintf(bus, sizeof(bus), "0000:%02x:00.0", 0x19 + q);
        snprintf(host, sizeof(host), "testhost%d", q / 2);
        FMT_CHECK(w->node == 10 + q / 2 && w->local_rank == q % 2 && w->numa == 3 * q + 1 && !strcmp(w->gpu_busid, bus) && !strcmp(w->hostname, host),
                  "%s/ranks[%d] = {node %d, local %d, numa %d, bus \"%s\", host \"%s\"}", gname, q, w->node, w->local_rank, w->numa,
                  w->gpu_busid, w->hostname);
      } else {
        /* the context's numbering of rank q */
        const FMRankInfo *ri = &ctx->all[q];
        FMT_CHECK(w->node == ri->node && w->local_rank == ri->node_rank && w->numa == ri->numa && !strcmp(w->gpu_busid, ri->gpu_busid) &&
                      !strcmp(w->hostname, ri->hostname),
                  "%s/ranks[%d] = {node %d, local %d, numa %d, bus \"%s\"}; the context says {%d, %d, %d, \"%s\"}", gname, q, w->node,
                  w->local_rank, w->numa, w->gpu_busid, ri->node, ri->node_rank, ri->numa, ri->gpu_busid);
      }
    }
    if (td.n == (size_t)total) {
      int bad = 0;
      for (size_t i = 0; i < n; i++)
        if (!same_event(&td.ev[off + (long long)i], &mine[i])) bad++;
      FMT_CHECK(!bad, "%s/events: %d of this rank's %zu events at offset %lld differ from those recorded", gname, bad, n, off);
      /* events are grouped by rank, in rank order */
      for (size_t i = 1; i < td.n; i++)
        if (td.ev[i].rank < td.ev[i - 1].rank) bad++;
      FMT_CHECK(!bad, "%s/events are not in rank order", gname);
    }
    FMTraceDataFree_Private(&td);
  }
}

int main(int argc, char **argv)
{
  char path[512] = "test_trace.h5", spath[600];
  FMTrace tr = NULL, tr2 = NULL;
  FMTraceEvent *exp, *shuf;
  const FMTraceEvent *got;
  FMTraceStats st;
  FMRankInfo info;
  FMErrorCode e;
  size_t n;
  int nexp, P;
  double t0;
  uint64_t seed;

  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_trace: the event trace recorder, its summary and its HDF5 file"));
  FMT_CALL(FMOptionsGetString("-o", "output trace file", path, sizeof(path), NULL));
  snprintf(spath, sizeof(spath), "%s.serial.h5", path);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  P = size;
  seed = fmt_seed() + (uint64_t)rank * 7919;

  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetUp(ctx));

  /* ---- argument errors */
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  FMT_EXPECT_ERR(FMTraceCreateFromContext_Private(ctx, "a/b", &tr), FM_ERR_ARG_WRONG, "without '/'");
  FMT_CHECK(tr == NULL, "failed Create left a recorder");
  FMT_EXPECT_ERR(FMTraceCreateFromContext_Private(ctx, "", &tr), FM_ERR_ARG_WRONG, "empty");
  FMT_EXPECT_ERR(FMTraceCreateFromContext_Private(NULL, "x", &tr), FM_ERR_ARG_NULL, "argument 1");
  {
    FMTraceData td;
    FMT_EXPECT_ERR(FMTraceLoad_Private("/nonexistent-dir-fmtrace/x.h5", NULL, &td), FM_ERR_FILE, "cannot open");
  }
  FMT_CHECK(FMTraceRecord_Private(NULL, 99, 0, 0, 1, 0, 0, -1, -1) == FM_SUCCESS, "Record on a NULL recorder must be a no-op");
  FMT_CALL(FMPopErrorHandler());

  /* ---- record the synthetic events in a random order */
  memset(&info, 0, sizeof(info));
  info.rank = rank;
  info.node = 10 + rank / 2;
  info.node_rank = rank % 2;
  info.numa = 3 * rank + 1;
  info.gpu = rank;
  snprintf(info.gpu_busid, sizeof(info.gpu_busid), "0000:%02x:00.0", 0x19 + rank);
  snprintf(info.hostname, sizeof(info.hostname), "testhost%d", rank / 2);
  {
    /* a made-up placement, through the context the recorder takes its numbering from */
    FMRankInfo real = ctx->self;
    ctx->self = info;
    FMT_CALL(FMTraceCreateFromContext_Private(ctx, "synthetic", &tr));
    ctx->self = real;
  }
  FMT_CALL(FMTraceGetOrigin_Private(tr, &t0));
  exp = calloc(64, sizeof(*exp));
  shuf = calloc(64, sizeof(*shuf));
  nexp = expected_events(rank, P, exp);
  memcpy(shuf, exp, sizeof(*exp) * (size_t)nexp);
  for (int i = nexp - 1; i > 0; i--) {
    int j = (int)(fmt_next(&seed) % (uint64_t)(i + 1));
    FMTraceEvent x = shuf[i];
    shuf[i] = shuf[j];
    shuf[j] = x;
  }
  for (int i = 0; i < nexp; i++)
    FMT_CALL(FMTraceRecord_Private(tr, shuf[i].kind, shuf[i].stream, t0 + shuf[i].t_begin, t0 + shuf[i].t_end, shuf[i].bytes, shuf[i].flops,
                                   shuf[i].peer, shuf[i].chunk));
  FMT_CALL(FMTraceSetBytes_Private(tr, 1000.0 * (rank + 1), 5000.0 * (rank + 1)));
  /* bad records are refused and not stored */
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  FMT_EXPECT_ERR(FMTraceRecord_Private(tr, FM_TRACE_NKINDS, 0, t0, t0 + 1, 0, 0, -1, -1), FM_ERR_ARG_OUTOFRANGE, "kind");
  FMT_EXPECT_ERR(FMTraceRecord_Private(tr, FM_TRACE_SEND, 0, t0 + 1, t0, 0, 0, -1, -1), FM_ERR_ARG_OUTOFRANGE, "t_begin <= t_end");
  FMT_EXPECT_ERR(FMTraceRecord_Private(tr, FM_TRACE_SEND, 0, t0, t0 + 1, -5, 0, -1, -1), FM_ERR_ARG_OUTOFRANGE, "bytes");
  FMT_EXPECT_ERR(FMTraceRecord_Private(tr, FM_TRACE_SEND, 0, t0, t0 + 1, 5, 0, size, -1), FM_ERR_ARG_OUTOFRANGE, "peer");
  FMT_EXPECT_ERR(FMTraceSetBytes_Private(tr, -1, 0), FM_ERR_ARG_OUTOFRANGE, "bytes_needed");
  FMT_CALL(FMPopErrorHandler());
  FMT_CALL(FMTraceGetEvents_Private(tr, &n, &got));
  FMT_CHECK(n == (size_t)nexp, "recorded %zu events, expected %d", n, nexp);
  for (size_t i = 0; i < n && i < (size_t)nexp; i++)
    FMT_CHECK(same_event(&got[i], &shuf[i]), "event %zu: stored times %.17g..%.17g, expected %.17g..%.17g", i, got[i].t_begin, got[i].t_end,
              shuf[i].t_begin, shuf[i].t_end);

  /* ---- the summary against the closed forms */
  FMT_CALL(FMTraceSummary_Private(tr, &st));
  {
    double cmax = 2 + 0.5 * (P - 1), cmean = 2 + 0.25 * (P - 1);
    double span = P == 1 ? 6.5 : 7 + 0.125 * (P - 2) + 0.0625;
    FMT_CHECK(st.nranks == P, "nranks %d", st.nranks);
    FMT_CHECK(st.nevents == 9.0 * P + P * (P - 1) / 2.0, "nevents %g", st.nevents);
    FMT_CHECK(CLOSE_TO(st.self.compute, 2 + 0.5 * rank), "self.compute %.17g, expected %g", st.self.compute, 2 + 0.5 * rank);
    FMT_CHECK(CLOSE_TO(st.self.comm, 3.0), "self.comm %.17g, expected 3", st.self.comm);
    FMT_CHECK(CLOSE_TO(st.self.hidden, 1.0), "self.hidden %.17g, expected 1", st.self.hidden);
    FMT_CHECK(CLOSE_TO(st.self.wait, 0.5 + 0.25 * rank), "self.wait %.17g, expected %g", st.self.wait, 0.5 + 0.25 * rank);
    FMT_CHECK(st.self.bytes_sent == 512.0 * (rank + 1) + 100 && st.self.bytes_recv == 1024.0 * (rank + 1), "self bytes %g sent, %g received",
              st.self.bytes_sent, st.self.bytes_recv);
    FMT_CHECK(st.self.flops == 350 && st.self.nevents == nexp, "self flops %g, events %g", st.self.flops, st.self.nevents);
    FMT_CHECK(CLOSE_TO(st.overlap_efficiency, 1.0 / 3.0), "overlap efficiency %.17g, expected 1/3", st.overlap_efficiency);
    FMT_CHECK(CLOSE_TO(st.comm_total, 3.0 * P) && CLOSE_TO(st.hidden_total, 1.0 * P), "comm %g hidden %g", st.comm_total, st.hidden_total);
    FMT_CHECK(CLOSE_TO(st.compute_max, cmax) && CLOSE_TO(st.compute_mean, cmean), "compute max %.17g mean %.17g, expected %g %g",
              st.compute_max, st.compute_mean, cmax, cmean);
    FMT_CHECK(CLOSE_TO(st.imbalance, cmax / cmean), "imbalance %.17g, expected %.17g", st.imbalance, cmax / cmean);
    FMT_CHECK(CLOSE_TO(st.exposed_max, 0.5 + 0.25 * (P - 1)) && CLOSE_TO(st.exposed_mean, 0.5 + 0.125 * (P - 1)),
              "exposed max %.17g mean %.17g", st.exposed_max, st.exposed_mean);
    FMT_CHECK(st.bytes_moved == 256.0 * P * (P + 1) + 100.0 * P, "bytes moved %g, expected %g", st.bytes_moved, 256.0 * P * (P + 1) + 100.0 * P);
    FMT_CHECK(st.bytes_recv == 512.0 * P * (P + 1), "bytes received %g", st.bytes_recv);
    FMT_CHECK(st.bytes_needed == 500.0 * P * (P + 1) && st.bytes_allgather == 2500.0 * P * (P + 1), "bytes needed %g, all-gather %g",
              st.bytes_needed, st.bytes_allgather);
    FMT_CHECK(st.flops == 350.0 * P, "flops %g", st.flops);
    FMT_CHECK(CLOSE_TO(st.span, span), "span %.17g, expected %g", st.span, span);
  }

  /* ---- save: parallel HDF5 (when the build has it), then forced through rank 0 */
  if (rank == 0) {
    unlink(path);
    unlink(spath);
  }
  MPI_Barrier(MPI_COMM_WORLD);
  FMT_CALL(FMTraceSave_Private(tr, path));
  verify_file(path, "synthetic", n, got, 1, 500.0 * P * (P + 1), 2500.0 * P * (P + 1));
  {
    /* the default of every recorder: -fm_trace_serial as read once at FMInitialize */
    FMBool opt = FM_FALSE;
    FMT_CALL(FMOptionsGetBool("-fm_trace_serial", "write traces through rank 0", &opt, NULL));
    FMT_CHECK(FMGetInitSettings_Private()->trace_serial == opt, "FMInitSettings.trace_serial %d, the option says %d",
              (int)FMGetInitSettings_Private()->trace_serial, (int)opt);
  }
  FMT_CALL(FMTraceSetSerial_Private(tr, FM_TRUE));
  FMT_CALL(FMTraceSave_Private(tr, spath));
  verify_file(spath, "synthetic", n, got, 1, 500.0 * P * (P + 1), 2500.0 * P * (P + 1));
  /* saving again replaces the run */
  FMT_CALL(FMTraceSave_Private(tr, spath));
  verify_file(spath, "synthetic", n, got, 1, 500.0 * P * (P + 1), 2500.0 * P * (P + 1));
  FMT_CALL(FMTraceSetSerial_Private(tr, FM_FALSE));

  /* ---- a second run in the same files: the context's own placement, only the last rank has events */
  FMT_CALL(FMTraceCreateFromContext_Private(ctx, "sparse", &tr2));
  {
    double o;
    FMT_CALL(FMTraceGetOrigin_Private(tr2, &o));
    if (rank == size - 1)
      for (int i = 0; i < 3; i++) FMT_CALL(FMTraceRecord_Private(tr2, FM_TRACE_COMPUTE, 0, o + i, o + i + 0.5, 0, 1e6, -1, i));
    FMT_CALL(FMTraceGetEvents_Private(tr2, &n, &got));
    FMT_CALL(FMTraceSave_Private(tr2, path));
    verify_file(path, "sparse", n, got, 0, 0, 0);
    FMT_CALL(FMTraceSetSerial_Private(tr2, FM_TRUE));
    FMT_CALL(FMTraceSave_Private(tr2, spath));
    verify_file(spath, "sparse", n, got, 0, 0, 0);
    /* the first run is still there and intact */
    FMT_CALL(FMTraceGetEvents_Private(tr, &n, &got));
    verify_file(path, "synthetic", n, got, 1, 500.0 * P * (P + 1), 2500.0 * P * (P + 1));
    /* an empty summary: only the last rank computes */
    FMT_CALL(FMTraceSummary_Private(tr2, &st));
    FMT_CHECK(st.overlap_efficiency == 1.0 && st.comm_total == 0, "no communication: efficiency %g, expected 1", st.overlap_efficiency);
    FMT_CHECK(CLOSE_TO(st.imbalance, (double)size) && CLOSE_TO(st.compute_max, 1.5), "one busy rank of %d: imbalance %g, compute max %g", size,
              st.imbalance, st.compute_max);
  }

  /* ---- file errors reach every rank, in both paths */
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  for (int serial = 0; serial < 2; serial++) {
    char bad[600];
    FMT_CALL(FMTraceSetSerial_Private(tr, serial ? FM_TRUE : FM_FALSE));
    e = FMTraceSave_Private(tr, "/nonexistent-dir-fmtrace/x.h5");
    FMT_CHECK(e == FM_ERR_FILE || (rank != 0 && e == FM_ERR_COLLECTIVE), "missing directory (serial %d): %s", serial, FMErrorString(e));
    FMT_CHECK(e != FM_SUCCESS, "missing directory (serial %d) must fail on every rank", serial);
    snprintf(bad, sizeof(bad), "%s.notes.txt", path);
    if (rank == 0) {
      FILE *fp = fopen(bad, "w");
      fprintf(fp, "not an HDF5 file\n");
      fclose(fp);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    e = FMTraceSave_Private(tr, bad);
    FMT_CHECK(e != FM_SUCCESS, "a text file (serial %d) must be refused on every rank", serial);
    FMT_CHECK(rank != 0 || fmt_msg_has("not an HDF5 file"), "message: %s", FMGetLastErrorMessage());
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) unlink(bad);
    /* an HDF5 file that is not ours */
    snprintf(bad, sizeof(bad), "%s.foreign.h5", path);
    if (rank == 0) {
      hid_t f = H5Fcreate(bad, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT), s = H5Screate(H5S_SCALAR), t = H5Tcopy(H5T_C_S1);
      hid_t a;
      H5Tset_size(t, 6);
      a = H5Acreate2(f, "format", t, s, H5P_DEFAULT, H5P_DEFAULT);
      H5Awrite(a, t, "other");
      H5Aclose(a);
      H5Tclose(t);
      H5Sclose(s);
      H5Fclose(f);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    e = FMTraceSave_Private(tr, bad);
    FMT_CHECK(e == FM_ERR_HDF5 || (rank != 0 && e == FM_ERR_COLLECTIVE), "foreign HDF5 file (serial %d): %s", serial, FMErrorString(e));
    FMT_CHECK(e != FM_SUCCESS, "foreign HDF5 file (serial %d) must be refused", serial);
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) unlink(bad);
  }
  FMT_CALL(FMPopErrorHandler());

  FMT_CALL(FMTraceDestroy_Private(&tr));
  FMT_CALL(FMTraceDestroy_Private(&tr2));
  FMT_CHECK(tr == NULL && tr2 == NULL, "Destroy must NULL the handle");
  FMT_CALL(FMTraceDestroy_Private(&tr));
  FMT_CALL(FMContextDestroy(&ctx));
  free(exp);
  free(shuf);
  {
    int f = fmt_failures, all = 0;
    MPI_Allreduce(&f, &all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    fmt_failures = all;
  }
  e = (FMErrorCode)fmt_finish("test_trace");
  FMT_CALL(FMFinalize());
  return (int)e;
}
