/*
 * tracing.c - -fm_trace for the context-parallel executors: a recorder per traced call,
 * saved to the trace file with its summary kept in the plan's statistics (FMDistGetStats).
 */
#include "distimpl.h"
#include <flashmask/private/fmtracing.h>

/* Collective: start a recorder for this call when -fm_trace was given (see distimpl.h). */
FMErrorCode FMDistTraceBegin_Private(FMPlan plan, FMDist *d, const char *run, void **tr)
{
  *tr = NULL;
#if FM_DIST_TRACE
  if (d->opt.trace_on) {
    FMTrace t = NULL;
    FMCall(FMTraceCreateFromContext_Private(plan->ctx, run, &t));
    *tr = t;
  }
#else
  (void)plan; (void)d; (void)run;
#endif
  return FM_SUCCESS;
}

/* Collective: save the trace (replacing the run's group) and print the summary if asked. */
FMErrorCode FMDistTraceEnd_Private(FMPlan plan, FMDist *d, const char *run, void **trp)
{
#if FM_DIST_TRACE
  FMTrace tr = (FMTrace)*trp;
  if (!d->opt.trace_on || !tr) return FM_SUCCESS;
  FMCall(FMTraceSetBytes_Private(tr, d->stats.needed_bytes, d->stats.allgather_bytes));
  FMCall(FMTraceSave_Private(tr, d->opt.trace_path));
  {
    FMTraceStats st;
    FMCall(FMTraceSummary_Private(tr, &st));
    d->stats.traced = 1;
    d->stats.overlap_efficiency = st.overlap_efficiency;
    d->stats.exposed_max = st.exposed_max;
    d->stats.exposed_mean = st.exposed_mean;
    d->stats.imbalance = st.imbalance;
    if (d->opt.trace_view)
      FMCall(FMPrintf(plan->hdr.comm, stdout,
                    "FMPlan %s trace (%s): %d ranks, overlap efficiency %.3f, exposed communication max %.3g s mean %.3g s, "
                    "compute imbalance %.4f; bytes moved %.0f, needed %.0f, unpruned all-gather %.0f\n",
                    run, d->opt.trace_path, st.nranks, st.overlap_efficiency, st.exposed_max, st.exposed_mean, st.imbalance,
                    st.bytes_moved, st.bytes_needed, st.bytes_allgather));
  }
  FMCall(FMTraceDestroy_Private(&tr));
  *trp = NULL;
#else
  (void)plan; (void)d; (void)run; (void)trp;
#endif
  return FM_SUCCESS;
}

