/*
 * trace.c - per-rank event traces (-fm_trace file.h5): recording and the summary metrics.
 * Interface and metric definitions: include/flashmask/private/fmtracing.h; the HDF5 writer
 * is tracewrite.c, the reader traceio.c; file layout: doc/traces.md.
 */
#include "traceimpl.h"
#include <limits.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

const char *const FMTraceKindNames[] = {"compute", "send", "recv", "wait", "reduce", "copy", NULL};

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
 * Common part of the two constructors: the time origin over nodecomm (ranks of one node share
 *   CLOCK_MONOTONIC, so their minimum after the barrier is exact; different nodes are aligned
 *   at the barrier's exit) and this rank's row from self. Collective on comm.
 */
static FMErrorCode trace_create(MPI_Comm comm, MPI_Comm nodecomm, const char *run_name, const FMRankInfo *self, FMTrace *tr)
{
  FMTrace t = NULL;
  double now;
  FMErrorCode ierr;

  ierr = check_run_name(run_name);
  if (!ierr) ierr = FMCalloc(1, &t);
  FMAgreeGoto(comm);
  FMCallMPIGoto(MPI_Comm_rank(comm, &t->rank));
  FMCallMPIGoto(MPI_Comm_size(comm, &t->size));
  t->comm = comm;
  t->serial = FMGetInitSettings_Private()->trace_serial;
  snprintf(t->run, sizeof(t->run), "%s", run_name);
  FMCallMPIGoto(MPI_Barrier(comm));
  now = FMTime();
  FMCallMPIGoto(MPI_Allreduce(&now, &t->t0, 1, MPI_DOUBLE, MPI_MIN, nodecomm));
  t->row.rank = t->rank;
  t->row.node = self->node;
  t->row.local_rank = self->node_rank;
  t->row.numa = self->numa;
  snprintf(t->row.gpu_busid, sizeof(t->row.gpu_busid), "%s", self->gpu_busid);
  snprintf(t->row.hostname, sizeof(t->row.hostname), "%s", self->hostname);
  *tr = t;
  t = NULL;
cleanup:
  free(t);
  return ierr;
}

/* FMTraceCreateFromContext_Private - see fmtracing.h. Collective on the context. */
FMErrorCode FMTraceCreateFromContext_Private(FMContext ctx, const char *run_name, FMTrace *tr)
{
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMValidPointer(run_name, 2);
  FMValidPointer(tr, 3);
  *tr = NULL;
  FMCheckSetUp(ctx, "FMContext");
  FMCall(trace_create(ctx->comm, ctx->nodecomm, run_name, &ctx->self, tr));
  return FM_SUCCESS;
}

/* FMTraceSetSerial_Private - see fmtracing.h. Not collective. */
FMErrorCode FMTraceSetSerial_Private(FMTrace tr, FMBool serial)
{
  FMValidPointer(tr, 1);
  tr->serial = serial ? 1 : 0;
  return FM_SUCCESS;
}

/* FMTraceRecord_Private - see fmtracing.h. Not collective. */
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

/* FMTraceSetBytes_Private - see fmtracing.h. Not collective. */
FMErrorCode FMTraceSetBytes_Private(FMTrace tr, double bytes_needed, double bytes_allgather)
{
  if (!tr) return FM_SUCCESS;
  FMCheck(bytes_needed >= 0 && bytes_allgather >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Arguments 2, 3 (bytes_needed, bytes_allgather) are %g, %g; expected values >= 0", bytes_needed, bytes_allgather);
  tr->bytes_needed = bytes_needed;
  tr->bytes_allgather = bytes_allgather;
  return FM_SUCCESS;
}

/* FMTraceGetOrigin_Private - see fmtracing.h. Not collective. */
FMErrorCode FMTraceGetOrigin_Private(FMTrace tr, double *t0)
{
  FMValidPointer(tr, 1);
  FMValidPointer(t0, 2);
  *t0 = tr->t0;
  return FM_SUCCESS;
}

/* FMTraceGetEvents_Private - see fmtracing.h. Not collective. */
FMErrorCode FMTraceGetEvents_Private(FMTrace tr, size_t *n, const FMTraceEvent **ev)
{
  FMValidPointer(tr, 1);
  FMValidPointer(n, 2);
  *n = tr->n;
  if (ev) *ev = tr->ev;
  return FM_SUCCESS;
}

/* FMTraceDestroy_Private - see fmtracing.h. Not collective. */
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

/* FMTraceRankStatsCompute_Private - see fmtracing.h. Not collective, no messages. */
FMErrorCode FMTraceRankStatsCompute_Private(const FMTraceEvent *ev, size_t n, int rank, FMTraceRankStats *rs)
{
  Interval *cpu = NULL, *wt = NULL;
  size_t nc = 0, nw = 0;
  int first = 1;
  FMErrorCode ierr = FM_SUCCESS;
  FMValidPointer(rs, 4);
  memset(rs, 0, sizeof(*rs));
  FMCheck(n == 0 || ev != NULL, MPI_COMM_SELF, FM_ERR_ARG_NULL, "Argument 1 (ev) is NULL with n = %zu events", n);
  FMCallGoto(FMMalloc(n, &cpu));
  FMCallGoto(FMMalloc(n, &wt));
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
cleanup:
  free(cpu);
  free(wt);
  return ierr;
}

/* FMTraceStatsCombine_Private - see fmtracing.h. Not collective, no messages. */
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

/* FMTraceSummary_Private - see fmtracing.h. Collective (one MPI_Allgather). */
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
  FMAgreeGoto(tr->comm);
  mine = buf + (size_t)tr->size * m;
  memcpy(mine, &self, sizeof(self));
  mine[FM_TRACE_NSTAT] = tr->bytes_needed;
  mine[FM_TRACE_NSTAT + 1] = tr->bytes_allgather;
  FMCallMPIGoto(MPI_Allgather(mine, m, MPI_DOUBLE, buf, m, MPI_DOUBLE, tr->comm));
  for (int r = 0; r < tr->size; r++) {
    memcpy(&all[r], buf + (size_t)r * m, sizeof(all[r]));
    need += buf[(size_t)r * m + FM_TRACE_NSTAT];
    ag += buf[(size_t)r * m + FM_TRACE_NSTAT + 1];
  }
  FMTraceStatsCombine_Private(tr->size, all, need, ag, st);
  st->self = self;
cleanup:
  free(buf);
  free(all);
  return ierr;
}
