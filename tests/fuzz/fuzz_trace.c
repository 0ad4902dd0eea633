/*
 * fuzz_trace.c - fuzz target of the trace loader on fmtrace's path: the input is written to a
 * temporary file, read with FMTraceLoad_Private (the only run, then the run "run"), and on
 * success the events are sorted and the per-rank and combined metrics computed as fmtrace
 * does. Invariants: a failure is a named error with a message and nothing to free; a loaded
 * run has 0 <= nranks <= FM_TRACE_MAX_RANKS, every event's rank below nranks, finite times in
 * order; no HDF5 object is left open. See fuzz.h.
 */
#include "fuzz.h"
#include <flashmask.h>
#include <flashmask/private/fmtracing.h>
#include <hdf5.h>
#include <math.h>
#include <string.h>

const char *fm_fuzz_target = "trace";
static char path[512];

static void finish(void)
{
  FMFinalize();
  unlink(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  if (FMInitialize(NULL, NULL, NULL, NULL) || FMPushErrorHandler(FM_ERROR_HANDLER_SILENT)) return 1;
  fm_fuzz_tmpname(path, sizeof(path), ".h5");
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  atexit(finish);
  return 0;
}

void FMFuzzQuiesce(void) { H5garbage_collect(); }

static int event_cmp(const void *pa, const void *pb)
{
  const FMTraceEvent *a = pa, *b = pb;
  if (a->rank != b->rank) return a->rank < b->rank ? -1 : 1;
  if (a->t_begin != b->t_begin) return a->t_begin < b->t_begin ? -1 : 1;
  return (a->stream > b->stream) - (a->stream < b->stream);
}

static void check(FMTraceData *td)
{
  FMTraceRankStats *rs;
  FMTraceStats st;
  size_t i = 0;
  if (td->nranks < 0 || td->nranks > FM_TRACE_MAX_RANKS) fm_fuzz_fail("a loaded run has %d ranks", td->nranks);
  for (size_t k = 0; k < td->n; k++) {
    const FMTraceEvent *e = &td->ev[k];
    if (e->rank < 0 || e->rank >= td->nranks || !isfinite(e->t_begin) || !isfinite(e->t_end) || e->t_end < e->t_begin)
      fm_fuzz_fail("event %zu of a loaded run: rank %d of %d, t %g..%g", k, e->rank, td->nranks, e->t_begin, e->t_end);
  }
  qsort(td->ev, td->n, sizeof(FMTraceEvent), event_cmp);
  rs = calloc((size_t)(td->nranks ? td->nranks : 1), sizeof(*rs));
  if (!rs) fm_fuzz_fail("out of memory for %d ranks", td->nranks);
  for (int r = 0; r < td->nranks; r++) {
    size_t j = i;
    while (j < td->n && td->ev[j].rank == r) j++;
    if (FMTraceRankStatsCompute_Private(td->ev + i, j - i, r, &rs[r])) fm_fuzz_fail("the metrics of rank %d failed: %s", r, FMGetLastErrorMessage());
    i = j;
  }
  FMTraceStatsCombine_Private(td->nranks, rs, td->bytes_needed, td->bytes_allgather, &st);
  free(rs);
  for (int r = 0; r < td->nranks; r++) /* the rows fmtrace prints */
    if (strnlen(td->rows[r].hostname, sizeof(td->rows[r].hostname)) == sizeof(td->rows[r].hostname) ||
        strnlen(td->rows[r].gpu_busid, sizeof(td->rows[r].gpu_busid)) == sizeof(td->rows[r].gpu_busid))
      fm_fuzz_fail("row %d has a string without its terminating NUL", r);
}

static void load(const char *run)
{
  FMTraceData td;
  FMErrorCode e = FMTraceLoad_Private(path, run, &td);
  if (e) {
    if (e == FM_ERR_MEM || e == FM_ERR_LIB || !FMGetLastErrorMessage()[0])
      fm_fuzz_fail("FMTraceLoad_Private returned %s: %s", FMErrorString(e), FMGetLastErrorMessage());
    if (td.ev || td.rows) fm_fuzz_fail("FMTraceLoad_Private failed but left data");
    return;
  }
  check(&td);
  FMTraceDataFree_Private(&td);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  if (fm_fuzz_write(path, data, size)) fm_fuzz_fail("cannot write \"%s\"", path);
  load(NULL);
  load("run");
  load("synthetic");
  if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) > 0)
    fm_fuzz_fail("%lld HDF5 objects left open after an input", (long long)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL));
  return 0;
}
