/*
 * fmtrace - read an event trace written with -fm_trace file.h5, print its summary, and turn
 * it into a Chrome / Perfetto trace-event JSON file and an SVG timeline.
 *
 *   fmtrace trace.h5 [-run NAME] [-json out.json] [-svg out.svg]
 *
 * The file layout and the metrics are described in doc/traces.md; the metrics are computed
 * by the library's own functions (FMTraceRankStatsCompute_Private, FMTraceStatsCombine_Private)
 * so fmtrace and FMTraceSummary_Private agree by construction. Serial: no MPI is started.
 * Exit status: 0 on success, 1 on a usage or file error (a message on stderr).
 */
#include <flashmask/private/fmtrace.h>
#include <flashmask/private/fmh5.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *usage =
  "usage: fmtrace trace.h5 [-run NAME] [-json out.json] [-svg out.svg]\n"
  "  Prints the per-rank and overall summary of /traces/<NAME> (the only run when -run is\n"
  "  not given), and optionally writes a Chrome/Perfetto trace-event JSON file (open it in\n"
  "  https://ui.perfetto.dev or chrome://tracing) and an SVG timeline with one lane per rank.\n";

typedef struct {
  char path[4096], run[256];
  int nranks;
  size_t n;
  FMTraceEvent *ev;      /* sorted by (rank, t_begin) */
  FMTraceRankRow *rows;  /* [nranks] */
  double bytes_needed, bytes_allgather;
  char created[64], version[64];
  FMTraceRankStats *rs;  /* [nranks] */
  FMTraceStats st;
  double tlo;            /* min(0, earliest t_begin) */
} Trace;

static void die(const char *fmt, const char *a, const char *b)
{
  fprintf(stderr, "fmtrace: ");
  fprintf(stderr, fmt, a, b);
  fprintf(stderr, "\n");
  exit(1);
}

/* ---------------------------------------------------------------- reading */
static herr_t list_cb(hid_t g, const char *name, const H5L_info_t *info, void *ctx)
{
  char *list = (char *)ctx;
  (void)g;
  (void)info;
  if (strlen(list) + strlen(name) + 3 < 4096) {
    if (list[0]) strcat(list, ", ");
    strcat(list, name);
  }
  return 0;
}

static int count_cb_n;
static char count_cb_first[256];
static herr_t count_cb(hid_t g, const char *name, const H5L_info_t *info, void *ctx)
{
  (void)g;
  (void)info;
  (void)ctx;
  if (count_cb_n++ == 0) snprintf(count_cb_first, sizeof(count_cb_first), "%s", name);
  return 0;
}

/* Optional numeric attribute of group where: 0 when missing or not one number. */
static double opt_double(hid_t obj, const char *where, const char *name)
{
  double v = 0;
  if (FMH5AttrReadDouble(obj, where, name, FM_FALSE, &v)) v = 0;
  return v;
}

static hid_t mem_event_type(void)
{
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(FMTraceEvent));
  H5Tinsert(t, "rank", HOFFSET(FMTraceEvent, rank), H5T_NATIVE_INT);
  H5Tinsert(t, "kind", HOFFSET(FMTraceEvent, kind), H5T_NATIVE_INT);
  H5Tinsert(t, "stream", HOFFSET(FMTraceEvent, stream), H5T_NATIVE_INT);
  H5Tinsert(t, "t_begin", HOFFSET(FMTraceEvent, t_begin), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "t_end", HOFFSET(FMTraceEvent, t_end), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "bytes", HOFFSET(FMTraceEvent, bytes), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "flops", HOFFSET(FMTraceEvent, flops), H5T_NATIVE_DOUBLE);
  H5Tinsert(t, "peer", HOFFSET(FMTraceEvent, peer), H5T_NATIVE_INT);
  H5Tinsert(t, "chunk", HOFFSET(FMTraceEvent, chunk), H5T_NATIVE_INT);
  return t;
}

/* Only the members the file has are read (HDF5 converts compounds by member name). */
static hid_t mem_row_type(hid_t ftype)
{
  hid_t t = H5Tcreate(H5T_COMPOUND, sizeof(FMTraceRankRow)), s32 = H5Tcopy(H5T_C_S1), s64 = H5Tcopy(H5T_C_S1);
  H5Tset_size(s32, 32);
  H5Tset_size(s64, 64);
  H5Tinsert(t, "rank", HOFFSET(FMTraceRankRow, rank), H5T_NATIVE_INT);
  if (H5Tget_member_index(ftype, "node") >= 0) H5Tinsert(t, "node", HOFFSET(FMTraceRankRow, node), H5T_NATIVE_INT);
  if (H5Tget_member_index(ftype, "local_rank") >= 0) H5Tinsert(t, "local_rank", HOFFSET(FMTraceRankRow, local_rank), H5T_NATIVE_INT);
  if (H5Tget_member_index(ftype, "numa") >= 0) H5Tinsert(t, "numa", HOFFSET(FMTraceRankRow, numa), H5T_NATIVE_INT);
  if (H5Tget_member_index(ftype, "gpu_busid") >= 0) H5Tinsert(t, "gpu_busid", HOFFSET(FMTraceRankRow, gpu_busid), s32);
  if (H5Tget_member_index(ftype, "hostname") >= 0) H5Tinsert(t, "hostname", HOFFSET(FMTraceRankRow, hostname), s64);
  H5Tclose(s32);
  H5Tclose(s64);
  return t;
}

static int event_cmp(const void *x, const void *y)
{
  const FMTraceEvent *a = (const FMTraceEvent *)x, *b = (const FMTraceEvent *)y;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  if (a->t_begin != b->t_begin) return a->t_begin < b->t_begin ? -1 : 1;
  return (a->stream > b->stream) - (a->stream < b->stream);
}

static void load(Trace *T, const char *run_opt)
{
  hid_t f, traces, g, d, sp, ft, mt;
  hsize_t dims = 0;
  char gname[300];
  FMH5Quiet q;

  /* This program reports its own errors (die); the optional attributes below are skipped
     quietly when missing or malformed (the readers then leave an empty string). */
  FMH5QuietPush(&q);
  FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
  f = H5Fopen(T->path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f < 0) die("cannot open \"%s\" as an HDF5 file%s", T->path, "");
  FMH5AttrReadStr(f, "/", "created", FM_FALSE, T->created, sizeof(T->created));
  FMH5AttrReadStr(f, "/", "library_version", FM_FALSE, T->version, sizeof(T->version));
  if (H5Lexists(f, "traces", H5P_DEFAULT) <= 0) die("\"%s\" has no /traces group (was it written with -fm_trace?)%s", T->path, "");
  traces = H5Gopen2(f, "traces", H5P_DEFAULT);
  if (run_opt) {
    snprintf(T->run, sizeof(T->run), "%s", run_opt);
  } else {
    count_cb_n = 0;
    H5Literate(traces, H5_INDEX_NAME, H5_ITER_INC, NULL, count_cb, NULL);
    if (count_cb_n == 0) die("\"%s\" has no runs under /traces%s", T->path, "");
    if (count_cb_n > 1) {
      static char list[4096];
      list[0] = '\0';
      H5Literate(traces, H5_INDEX_NAME, H5_ITER_INC, NULL, list_cb, list);
      die("\"%s\" holds several runs; choose one with -run NAME (runs: %s)", T->path, list);
    }
    snprintf(T->run, sizeof(T->run), "%s", count_cb_first);
  }
  if (H5Lexists(traces, T->run, H5P_DEFAULT) <= 0) {
    static char list[4096];
    list[0] = '\0';
    H5Literate(traces, H5_INDEX_NAME, H5_ITER_INC, NULL, list_cb, list);
    fprintf(stderr, "fmtrace: \"%s\" has no run \"%s\" (runs: %s)\n", T->path, T->run, list);
    exit(1);
  }
  snprintf(gname, sizeof(gname), "/traces/%s", T->run);
  g = H5Gopen2(f, gname, H5P_DEFAULT);
  if (g < 0) die("cannot open %s in \"%s\"", gname, T->path);
  T->bytes_needed = opt_double(g, gname, "bytes_needed");
  T->bytes_allgather = opt_double(g, gname, "bytes_allgather");
  T->nranks = (int)opt_double(g, gname, "nranks");

  /* events */
  d = H5Dopen2(g, "events", H5P_DEFAULT);
  if (d < 0) die("%s has no dataset events (in \"%s\")", gname, T->path);
  sp = H5Dget_space(d);
  if (H5Sget_simple_extent_ndims(sp) != 1) die("%s/events is not one-dimensional (in \"%s\")", gname, T->path);
  H5Sget_simple_extent_dims(sp, &dims, NULL);
  T->n = (size_t)dims;
  T->ev = (FMTraceEvent *)calloc(T->n ? T->n : 1, sizeof(FMTraceEvent));
  if (!T->ev) die("out of memory reading %s/events%s", gname, "");
  mt = mem_event_type();
  if (T->n && H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, T->ev) < 0)
    die("cannot read %s/events in \"%s\" (is it a flashmask trace?)", gname, T->path);
  H5Tclose(mt);
  H5Sclose(sp);
  H5Dclose(d);
  for (size_t i = 0; i < T->n; i++) {
    FMTraceEvent *e = &T->ev[i];
    if (e->rank < 0 || !isfinite(e->t_begin) || !isfinite(e->t_end) || e->t_end < e->t_begin) {
      char b[128];
      snprintf(b, sizeof(b), "%zu (rank %d, t %g..%g)", i, e->rank, e->t_begin, e->t_end);
      die("%s/events: event %s is invalid", gname, b);
    }
    if (e->rank + 1 > T->nranks) T->nranks = e->rank + 1;
  }
  qsort(T->ev, T->n, sizeof(FMTraceEvent), event_cmp);

  /* ranks (optional: lanes are labelled by rank alone without it) */
  T->rows = (FMTraceRankRow *)calloc((size_t)(T->nranks ? T->nranks : 1), sizeof(FMTraceRankRow));
  for (int r = 0; r < T->nranks; r++) {
    T->rows[r].rank = r;
    T->rows[r].node = T->rows[r].local_rank = T->rows[r].numa = -1;
  }
  if (H5Lexists(g, "ranks", H5P_DEFAULT) > 0) {
    d = H5Dopen2(g, "ranks", H5P_DEFAULT);
    sp = H5Dget_space(d);
    H5Sget_simple_extent_dims(sp, &dims, NULL);
    ft = H5Dget_type(d);
    if (H5Tget_class(ft) == H5T_COMPOUND && dims > 0) {
      FMTraceRankRow *tmp = (FMTraceRankRow *)calloc((size_t)dims, sizeof(FMTraceRankRow));
      mt = mem_row_type(ft);
      if (tmp && H5Dread(d, mt, H5S_ALL, H5S_ALL, H5P_DEFAULT, tmp) >= 0)
        for (hsize_t i = 0; i < dims; i++)
          if (tmp[i].rank >= 0 && tmp[i].rank < T->nranks) {
            int r = tmp[i].rank;
            FMTraceRankRow *o = &T->rows[r];
            if (H5Tget_member_index(ft, "node") >= 0) o->node = tmp[i].node;
            if (H5Tget_member_index(ft, "local_rank") >= 0) o->local_rank = tmp[i].local_rank;
            if (H5Tget_member_index(ft, "numa") >= 0) o->numa = tmp[i].numa;
            memcpy(o->gpu_busid, tmp[i].gpu_busid, sizeof(o->gpu_busid));
            memcpy(o->hostname, tmp[i].hostname, sizeof(o->hostname));
            o->gpu_busid[sizeof(o->gpu_busid) - 1] = o->hostname[sizeof(o->hostname) - 1] = '\0';
          }
      H5Tclose(mt);
      free(tmp);
    }
    H5Tclose(ft);
    H5Sclose(sp);
    H5Dclose(d);
  }
  H5Gclose(g);
  H5Gclose(traces);
  H5Fclose(f);
  FMH5QuietPop(&q);

  /* metrics, with the library's definitions */
  T->rs = (FMTraceRankStats *)calloc((size_t)(T->nranks ? T->nranks : 1), sizeof(FMTraceRankStats));
  {
    size_t i = 0;
    for (int r = 0; r < T->nranks; r++) {
      size_t j = i;
      while (j < T->n && T->ev[j].rank == r) j++;
      if (FMTraceRankStatsCompute_Private(T->ev + i, j - i, r, &T->rs[r])) die("out of memory computing the metrics%s%s", "", "");
      i = j;
    }
  }
  FMTraceStatsCombine_Private(T->nranks, T->rs, T->bytes_needed, T->bytes_allgather, &T->st);
  T->tlo = 0;
  for (size_t i = 0; i < T->n; i++)
    if (T->ev[i].t_begin < T->tlo) T->tlo = T->ev[i].t_begin;
}

/* ---------------------------------------------------------------- summary */
static void print_summary(const Trace *T)
{
  const FMTraceStats *s = &T->st;
  printf("fmtrace: run \"%s\" of \"%s\"", T->run, T->path);
  if (T->version[0]) printf(" (flashmask %s", T->version);
  if (T->created[0]) printf(", created %s", T->created);
  printf("%s\n", T->version[0] ? ")" : "");
  printf("  %d ranks, %.0f events, span %.6g s", T->nranks, s->nevents, s->span);
  if (T->tlo < 0) printf(" (the earliest event starts at %.6g s, before the recorder's origin)", T->tlo);
  printf("\n\n");
  printf("%5s %5s %5s %-16s %12s %12s %12s %12s %14s %14s %8s\n", "rank", "node", "local", "host", "compute(s)", "comm(s)", "hidden(s)",
         "wait(s)", "sent(B)", "recv(B)", "events");
  for (int r = 0; r < T->nranks; r++) {
    const FMTraceRankStats *x = &T->rs[r];
    const FMTraceRankRow *w = &T->rows[r];
    printf("%5d %5d %5d %-16.16s %12.6g %12.6g %12.6g %12.6g %14.0f %14.0f %8.0f\n", r, w->node, w->local_rank,
           w->hostname[0] ? w->hostname : "-", x->compute, x->comm, x->hidden, x->wait, x->bytes_sent, x->bytes_recv, x->nevents);
  }
  printf("\nsummary:\n");
  printf("  overlap efficiency:    %.6f  (communication hidden behind compute: %.6g s of %.6g s)\n", s->overlap_efficiency,
         s->hidden_total, s->comm_total);
  printf("  exposed communication: max %.6g s  mean %.6g s  (time in waits, per rank)\n", s->exposed_max, s->exposed_mean);
  printf("  compute imbalance:     %.6f  (max %.6g s / mean %.6g s)\n", s->imbalance, s->compute_max, s->compute_mean);
  printf("  bytes moved:           %.0f\n", s->bytes_moved);
  printf("  bytes received:        %.0f\n", s->bytes_recv);
  printf("  bytes needed:          %.0f\n", s->bytes_needed);
  printf("  bytes all-gather:      %.0f\n", s->bytes_allgather);
  if (s->bytes_allgather > 0) printf("  moved / all-gather:    %.6f\n", s->bytes_moved / s->bytes_allgather);
  if (s->bytes_needed > 0) printf("  moved / needed:        %.6f\n", s->bytes_moved / s->bytes_needed);
  printf("  flops:                 %.6g\n", s->flops);
}

/* ---------------------------------------------------------------- JSON */
static void json_str(FILE *fp, const char *s)
{
  fputc('"', fp);
  for (; *s; s++) {
    unsigned char c = (unsigned char)*s;
    if (c == '"' || c == '\\') fprintf(fp, "\\%c", c);
    else if (c < 0x20) fprintf(fp, "\\u%04x", c);
    else fputc(c, fp);
  }
  fputc('"', fp);
}

static const char *kind_name(int k) { return k >= 0 && k < FM_TRACE_NKINDS ? FMTraceKindNames[k] : "other"; }

static void lane_label(const Trace *T, int r, char *buf, size_t len)
{
  const FMTraceRankRow *w = &T->rows[r];
  int n = snprintf(buf, len, "rank %d", r);
  if (w->hostname[0] && n < (int)len) n += snprintf(buf + n, len - n, " %s", w->hostname);
  if (w->gpu_busid[0] && n > 0 && n < (int)len) snprintf(buf + n, len - n, " gpu %s", w->gpu_busid);
}

static void event_name(const FMTraceEvent *e, char *buf, size_t len)
{
  int n = snprintf(buf, len, "%s", kind_name(e->kind));
  if (e->chunk >= 0 && n < (int)len) n += snprintf(buf + n, len - n, " chunk %d", e->chunk);
  if (e->peer >= 0 && n < (int)len)
    snprintf(buf + n, len - n, " %s %d", e->kind == FM_TRACE_RECV ? "from" : e->kind == FM_TRACE_WAIT ? "on" : "to", e->peer);
}

static void write_json(const Trace *T, const char *out)
{
  FILE *fp = fopen(out, "w");
  char name[128];
  int first = 1;
  if (!fp) die("cannot write \"%s\"%s", out, "");
  fprintf(fp, "{\"displayTimeUnit\": \"ms\",\n \"otherData\": {\"run\": ");
  json_str(fp, T->run);
  fprintf(fp, ", \"time_shift_us\": %.3f", -T->tlo * 1e6);
  fprintf(fp, ", \"nranks\": %d, \"overlap_efficiency\": %.9g, \"exposed_max_s\": %.9g, \"imbalance\": %.9g, \"bytes_moved\": %.0f},\n",
          T->nranks, T->st.overlap_efficiency, T->st.exposed_max, T->st.imbalance, T->st.bytes_moved);
  fprintf(fp, " \"traceEvents\": [\n");
#define SEP() do { fprintf(fp, first ? "  " : ",\n  "); first = 0; } while (0)
  for (int r = 0; r < T->nranks; r++) {
    lane_label(T, r, name, sizeof(name));
    SEP();
    fprintf(fp, "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"name\": ", r);
    json_str(fp, name);
    fprintf(fp, "}}");
    SEP();
    fprintf(fp, "{\"name\": \"process_sort_index\", \"ph\": \"M\", \"pid\": %d, \"tid\": 0, \"args\": {\"sort_index\": %d}}", r, r);
  }
  /* one thread per (rank, stream) that has events; events are sorted by rank */
  {
    int *seen = (int *)malloc(sizeof(int) * (T->n ? T->n : 1)), nseen = 0, cur = -1;
    if (!seen) die("out of memory writing \"%s\"%s", out, "");
    for (size_t i = 0; i < T->n; i++) {
      int k = 0;
      if (T->ev[i].rank != cur) cur = T->ev[i].rank, nseen = 0;
      while (k < nseen && seen[k] != T->ev[i].stream) k++;
      if (k < nseen) continue;
      seen[nseen++] = T->ev[i].stream;
      SEP();
      fprintf(fp, "{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": %d, \"tid\": %d, \"args\": {\"name\": \"stream %d\"}}", T->ev[i].rank,
              T->ev[i].stream, T->ev[i].stream);
    }
    free(seen);
  }
  for (size_t i = 0; i < T->n; i++) {
    const FMTraceEvent *e = &T->ev[i];
    event_name(e, name, sizeof(name));
    SEP();
    fprintf(fp, "{\"name\": ");
    json_str(fp, name);
    fprintf(fp,
            ", \"cat\": \"%s\", \"ph\": \"X\", \"pid\": %d, \"tid\": %d, \"ts\": %.3f, \"dur\": %.3f, "
            "\"args\": {\"bytes\": %.0f, \"flops\": %.0f, \"peer\": %d, \"chunk\": %d}}",
            kind_name(e->kind), e->rank, e->stream, (e->t_begin - T->tlo) * 1e6, (e->t_end - e->t_begin) * 1e6, e->bytes, e->flops, e->peer, e->chunk);
  }
#undef SEP
  fprintf(fp, "\n ]\n}\n");
  if (fclose(fp)) die("cannot write \"%s\"%s", out, "");
}

/* ---------------------------------------------------------------- SVG */
static const char *kind_color(int k)
{
  switch (k) {
  case FM_TRACE_COMPUTE: return "#4c78a8"; /* blue */
  case FM_TRACE_SEND: return "#f58518";    /* orange */
  case FM_TRACE_RECV: return "#54a24b";    /* green */
  case FM_TRACE_REDUCE: return "#b279a2";  /* purple */
  case FM_TRACE_WAIT: return "#e45756";    /* red */
  case FM_TRACE_COPY: return "#9d9d9d";    /* grey */
  }
  return "#000000";
}

/*
 * Place of a kind inside a lane of three rows of height h: row 0 compute; row 1
 * communication, outgoing (send, reduce) in its upper half and incoming (recv) in its lower
 * half so concurrent transfers stay visible; row 2 waits and copies. y: offset, hh: height.
 */
static void kind_place(int k, double h, double *y, double *hh)
{
  if (k == FM_TRACE_COMPUTE) *y = 1, *hh = h - 2;
  else if (k == FM_TRACE_SEND || k == FM_TRACE_REDUCE) *y = h + 1, *hh = h / 2 - 1;
  else if (k == FM_TRACE_RECV) *y = 1.5 * h, *hh = h / 2 - 1;
  else *y = 2 * h + 1, *hh = h - 2;
}

static void svg_text_escaped(FILE *fp, const char *s)
{
  for (; *s; s++) {
    if (*s == '<') fputs("&lt;", fp);
    else if (*s == '>') fputs("&gt;", fp);
    else if (*s == '&') fputs("&amp;", fp);
    else if (*s == '"') fputs("&quot;", fp);
    else fputc(*s, fp);
  }
}

static void write_svg(const Trace *T, const char *out)
{
  const double W = 1200, left = 190, right = 30, top = 70, row_h = 14, lane_h = 3 * row_h + 14;
  /* the plot runs from tlo = min(0, earliest t_begin) (events may start before the origin,
     e.g. receives posted before the recorder was created) to the latest t_end */
  double tlo = T->tlo, span = T->st.span - tlo > 0 ? T->st.span - tlo : 1, plot_w = W - left - right, H, step, unit = 1;
  const char *uname = "s";
  char label[128];
  FILE *fp = fopen(out, "w");
  if (!fp) die("cannot write \"%s\"%s", out, "");
  H = top + T->nranks * lane_h + 50;
  /* a 1-2-5 tick step giving at most 10 ticks */
  {
    double raw = span / 10, p = pow(10, floor(log10(raw)));
    step = raw <= p ? p : raw <= 2 * p ? 2 * p : raw <= 5 * p ? 5 * p : 10 * p;
  }
  if (span < 1e-3) unit = 1e6, uname = "us";
  else if (span < 1) unit = 1e3, uname = "ms";

  fprintf(fp, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
  fprintf(fp, "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\" font-size=\"11\">\n",
          W, H, W, H);
  fprintf(fp, "<rect x=\"0\" y=\"0\" width=\"%.0f\" height=\"%.0f\" fill=\"white\"/>\n", W, H);
  fprintf(fp, "<text x=\"10\" y=\"18\" font-size=\"14\" font-weight=\"bold\">");
  svg_text_escaped(fp, T->run);
  fprintf(fp, ": %d ranks, overlap efficiency %.1f%%, exposed communication max %.3g s, compute imbalance %.3f</text>\n", T->nranks,
          100 * T->st.overlap_efficiency, T->st.exposed_max, T->st.imbalance);
  /* legend */
  fprintf(fp, "<g class=\"legend\">\n");
  for (int k = 0; k < FM_TRACE_NKINDS; k++) {
    double x = 10 + k * 110;
    fprintf(fp, " <rect x=\"%.0f\" y=\"30\" width=\"14\" height=\"10\" fill=\"%s\"/><text x=\"%.0f\" y=\"39\">%s</text>\n", x, kind_color(k),
            x + 18, FMTraceKindNames[k]);
  }
  fprintf(fp, " <text x=\"%.0f\" y=\"39\" fill=\"#555\">rows per lane: compute / send+reduce over recv / waits and copies</text>\n",
          10 + FM_TRACE_NKINDS * 110.0);
  fprintf(fp, "</g>\n");
  /* time axis: grid lines and labels */
  fprintf(fp, "<g class=\"axis\" stroke=\"#dddddd\">\n");
  for (double t = ceil(tlo / step - 1e-9) * step; t <= T->st.span + span * 1e-9; t += step) {
    double x = left + plot_w * (t - tlo) / span;
    fprintf(fp, " <line x1=\"%.2f\" y1=\"%.0f\" x2=\"%.2f\" y2=\"%.0f\"/>\n", x, top - 8, x, top + T->nranks * lane_h);
    fprintf(fp, " <text x=\"%.2f\" y=\"%.0f\" stroke=\"none\" fill=\"black\" text-anchor=\"middle\">%g</text>\n", x,
            top + T->nranks * lane_h + 15, fabs(t) < step * 1e-6 ? 0.0 : t * unit); /* no "-0" */
  }
  fprintf(fp, " <text x=\"%.0f\" y=\"%.0f\" stroke=\"none\" fill=\"black\" text-anchor=\"middle\">time (%s)</text>\n", left + plot_w / 2,
          top + T->nranks * lane_h + 34, uname);
  fprintf(fp, "</g>\n");
  /* lanes */
  {
    size_t i = 0;
    for (int r = 0; r < T->nranks; r++) {
      double y0 = top + r * lane_h;
      lane_label(T, r, label, sizeof(label));
      fprintf(fp, "<g class=\"lane\" id=\"rank%d\">\n", r);
      fprintf(fp, " <rect x=\"%.0f\" y=\"%.0f\" width=\"%.0f\" height=\"%.0f\" fill=\"%s\"/>\n", left, y0, plot_w, 3 * row_h,
              r % 2 ? "#eeeeee" : "#f7f7f7");
      fprintf(fp, " <text x=\"8\" y=\"%.0f\">", y0 + 1.5 * row_h + 4);
      svg_text_escaped(fp, label);
      fprintf(fp, "</text>\n");
      for (; i < T->n && T->ev[i].rank == r; i++) {
        const FMTraceEvent *e = &T->ev[i];
        double x = left + plot_w * (e->t_begin - tlo) / span, w = plot_w * (e->t_end - e->t_begin) / span, dy, hh;
        char name[128];
        if (w < 0.5) w = 0.5;
        kind_place(e->kind, row_h, &dy, &hh);
        event_name(e, name, sizeof(name));
        fprintf(fp, " <rect x=\"%.2f\" y=\"%.1f\" width=\"%.2f\" height=\"%.1f\" fill=\"%s\"><title>", x, y0 + dy, w, hh,
                kind_color(e->kind));
        svg_text_escaped(fp, name);
        fprintf(fp, ", stream %d, %.6f..%.6f s", e->stream, e->t_begin, e->t_end);
        if (e->bytes > 0) fprintf(fp, ", %.0f bytes", e->bytes);
        if (e->flops > 0) fprintf(fp, ", %.3g flops", e->flops);
        fprintf(fp, "</title></rect>\n");
      }
      fprintf(fp, "</g>\n");
    }
  }
  fprintf(fp, "</svg>\n");
  if (fclose(fp)) die("cannot write \"%s\"%s", out, "");
}

int main(int argc, char **argv)
{
  Trace T;
  const char *file = NULL, *run = NULL, *json = NULL, *svg = NULL;
  memset(&T, 0, sizeof(T));
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "-help") || !strcmp(argv[i], "--help")) {
      fputs(usage, stdout);
      return 0;
    } else if (!strcmp(argv[i], "-run") && i + 1 < argc) {
      run = argv[++i];
    } else if (!strcmp(argv[i], "-json") && i + 1 < argc) {
      json = argv[++i];
    } else if (!strcmp(argv[i], "-svg") && i + 1 < argc) {
      svg = argv[++i];
    } else if (argv[i][0] == '-' || file) {
      fprintf(stderr, "fmtrace: unexpected argument \"%s\"\n%s", argv[i], usage);
      return 1;
    } else {
      file = argv[i];
    }
  }
  if (!file) {
    fprintf(stderr, "fmtrace: no trace file given\n%s", usage);
    return 1;
  }
  snprintf(T.path, sizeof(T.path), "%s", file);
  load(&T, run);
  print_summary(&T);
  if (json) {
    write_json(&T, json);
    printf("wrote %s (Chrome/Perfetto trace events)\n", json);
  }
  if (svg) {
    write_svg(&T, svg);
    printf("wrote %s (timeline, one lane per rank)\n", svg);
  }
  free(T.ev);
  free(T.rows);
  free(T.rs);
  return 0;
}
