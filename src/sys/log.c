/*
 * log.c - timed events for -fm_log_view: per event time, calls, flops and bytes, with
 * min/max/avg over the ranks of MPI_COMM_WORLD, printed at FMFinalize.
 */
#include <flashmask/private/fmimpl.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
  char name[48];
  double t_start, time, flops, bytes;
  long calls;
  int depth;
} FMEvent;

static FMEvent *fm_events;
static int fm_nevents, fm_capevents;

FMErrorCode FMLogInitialize_Private(void) { return FM_SUCCESS; }

/* FMLogViewRequested_Private - see fmimpl.h. */
FMErrorCode FMLogViewRequested_Private(FMBool *on)
{
  *on = FM_FALSE;
  FMCall(FMOptionsGetBool("-fm_log_view", "print a performance summary at FMFinalize", on, NULL));
  return FM_SUCCESS;
}

FMErrorCode FMLogFinalize_Private(void)
{
  free(fm_events);
  fm_events = NULL;
  fm_nevents = fm_capevents = 0;
  return FM_SUCCESS;
}

FMErrorCode FMLogEventRegister(const char *name, FMLogEvent *id)
{
  FMValidPointer(name, 1);
  FMValidPointer(id, 2);
  for (int i = 0; i < fm_nevents; i++)
    if (!strcmp(fm_events[i].name, name)) { *id = i; return FM_SUCCESS; }
  if (fm_nevents == fm_capevents) {
    int cap = fm_capevents ? 2 * fm_capevents : 16;
    FMEvent *n = (FMEvent *)realloc(fm_events, (size_t)cap * sizeof(*n));
    FMCheck(n, MPI_COMM_SELF, FM_ERR_MEM, "Out of memory registering event \"%s\"", name);
    fm_events = n; fm_capevents = cap;
  }
  memset(&fm_events[fm_nevents], 0, sizeof(FMEvent));
  snprintf(fm_events[fm_nevents].name, sizeof(fm_events[0].name), "%s", name);
  *id = fm_nevents++;
  return FM_SUCCESS;
}

/* FMLogTimed_Private - see fmimpl.h. */
FMErrorCode FMLogTimed_Private(const char *event, FMErrorCode (*body)(void *), void *obj)
{
  FMLogEvent ev;
  FMErrorCode ierr;
  FMCall(FMLogEventRegister(event, &ev));
  FMCall(FMLogEventBegin(ev));
  ierr = (*body)(obj);
  FMCall(FMLogEventEnd(ev, 0, 0));
  FMCall(ierr);
  return FM_SUCCESS;
}

FMErrorCode FMLogEventBegin(FMLogEvent id)
{
  FMCheck(id >= 0 && id < fm_nevents, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument 1 (event) is %d; expected 0..%d", id, fm_nevents - 1);
  if (fm_events[id].depth++ == 0) fm_events[id].t_start = FMTime();
  return FM_SUCCESS;
}

FMErrorCode FMLogEventEnd(FMLogEvent id, double flops, double bytes)
{
  FMCheck(id >= 0 && id < fm_nevents, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument 1 (event) is %d; expected 0..%d", id, fm_nevents - 1);
  FMCheck(fm_events[id].depth > 0, MPI_COMM_SELF, FM_ERR_ORDER, "FMLogEventEnd() for event \"%s\" without FMLogEventBegin()", fm_events[id].name);
  if (--fm_events[id].depth == 0) {
    fm_events[id].time += FMTime() - fm_events[id].t_start;
    fm_events[id].calls++;
  }
  fm_events[id].flops += flops;
  fm_events[id].bytes += bytes;
  return FM_SUCCESS;
}

FMErrorCode FMLogView(FILE *fp)
{
  int rank, size, n = fm_nevents, nmax;
  if (!fp) fp = stdout;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  /* Events are registered in the same order on every rank in normal use; agree on the count. */
  FMCallMPI(MPI_Allreduce(&n, &nmax, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD));
  if (rank == 0) {
    fprintf(fp, "------------------------------------------------------------------------------------------------\n");
    fprintf(fp, "flashmask %s performance summary: %d rank%s\n", FMGetVersion(), size, size > 1 ? "s" : "");
    fprintf(fp, "%-24s %8s %11s %11s %11s %9s %11s %11s\n", "Event", "Calls", "Time min", "Time max", "Time avg",
            "Ratio", "GFlop/s", "GB moved");
  }
  for (int i = 0; i < nmax; i++) {
    double t = fm_events[i].time, tmin, tmax, tsum, f, fsum, b, bsum;
    long c = fm_events[i].calls, cmax;
    f = fm_events[i].flops; b = fm_events[i].bytes;
    FMCallMPI(MPI_Reduce(&t, &tmin, 1, MPI_DOUBLE, MPI_MIN, 0, MPI_COMM_WORLD));
    FMCallMPI(MPI_Reduce(&t, &tmax, 1, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD));
    FMCallMPI(MPI_Reduce(&t, &tsum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
    FMCallMPI(MPI_Reduce(&f, &fsum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
    FMCallMPI(MPI_Reduce(&b, &bsum, 1, MPI_DOUBLE, MPI_SUM, 0, MPI_COMM_WORLD));
    FMCallMPI(MPI_Reduce(&c, &cmax, 1, MPI_LONG, MPI_MAX, 0, MPI_COMM_WORLD));
    if (rank == 0)
      fprintf(fp, "%-24s %8ld %10.4es %10.4es %10.4es %9.2f %11.2f %11.4g\n", fm_events[i].name, cmax, tmin, tmax,
              tsum / size, tmin > 0 ? tmax / tmin : 1.0, tmax > 0 ? fsum / tmax * 1e-9 : 0.0, bsum * 1e-9);
  }
  if (rank == 0) {
    fprintf(fp, "Ratio = max/min time over ranks; GFlop/s = total flops / max time (FlashMask convention for attention).\n");
    fprintf(fp, "GB moved = sum over ranks: FMPlanForward/Backward of a \"cp\" plan, the K/V bytes sent (and by the backward the\n"
                "           dK/dV partials sent back); of a \"local\" plan,\n"
                "           the bytes of the tensors read and written.\n");
    fprintf(fp, "------------------------------------------------------------------------------------------------\n");
  }
  return FM_SUCCESS;
}
