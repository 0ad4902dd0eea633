/*
 * fmtrace - read an event trace written with -fm_trace file.h5, print its summary, and turn
 * it into a Chrome / Perfetto trace-event JSON file and an SVG timeline.
 *
 *   fmtrace trace.h5 [-run NAME] [-json out.json] [-svg out.svg]
 *
 * The file layout and the metrics are described in doc/traces.md; the file is read and the
 * metrics computed by the library's own functions (FMTraceLoad_Private, next to the writer;
 * FMTraceRankStatsCompute_Private, FMTraceStatsCombine_Private), so fmtrace and
 * FMTraceSummary_Private agree by construction. Serial: no MPI is started.
 * Exit status: 0 on success, 1 on a usage or file error (a message on stderr).
 */
#include <flashmask/private/fmtracing.h>
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
  FMTraceRankRow *rows;  /* [nranks] (FMTraceLoad_Private's) */
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
static int event_cmp(const void *x, const void *y)
{
  const FMTraceEvent *a = (const FMTraceEvent *)x, *b = (const FMTraceEvent *)y;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  if (a->t_begin != b->t_begin) return a->t_begin < b->t_begin ? -1 : 1;
  return (a->stream > b->stream) - (a->stream < b->stream);
}

/* Read the run with the library's reader (FMTraceLoad_Private), sort, compute the metrics. */
static void load(Trace *T, const char *run_opt)
{
  FMTraceData td;
  /* This program reports its own errors (die), with the library's message. */
  FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
  {
    FMErrorCode e = FMTraceLoad_Private(T->path, run_opt, &td);
    if (e) die("%s%s", FMGetLastErrorMessage(), !run_opt && e == FM_ERR_ARG_WRONG ? "; choose one with -run NAME" : "");
  }
  snprintf(T->run, sizeof(T->run), "%s", td.run);
  snprintf(T->created, sizeof(T->created), "%s", td.created);
  snprintf(T->version, sizeof(T->version), "%s", td.version);
  T->nranks = td.nranks;
  T->n = td.n;
  T->ev = td.ev;
  T->rows = td.rows;
  T->bytes_needed = td.bytes_needed;
  T->bytes_allgather = td.bytes_allgather;
  qsort(T->ev, T->n, sizeof(FMTraceEvent), event_cmp);

  /* metrics, with the library's definitions */
  T->rs = (FMTraceRankStats *)calloc((size_t)(T->nranks ? T->nranks : 1), sizeof(FMTraceRankStats));
  if (!T->rs) die("out of memory computing the metrics%s%s", "", "");
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
