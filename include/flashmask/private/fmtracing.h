/*
 * fmtracing.h - private interface of the per-rank event trace (src/sys/trace.c, the HDF5 side in
 * src/sys/traceio.c and tracewrite.c), used by the distributed planner for -fm_trace file.h5, by the fmtrace
 * program and by the tests. Not installed.
 *
 * Usage (the planner, once per traced run):
 *
 *   FMTrace tr = NULL;
 *   FMTraceCreateFromContext_Private(ctx, "fwd", &tr);            collective
 *   double t = FMTime();
 *   ... compute chunk c ...
 *   FMTraceRecord_Private(tr, FM_TRACE_COMPUTE, 0, t, FMTime(), 0, flops, -1, c);   local, cheap
 *   FMTraceSetBytes_Private(tr, my_needed_bytes, my_allgather_bytes);               local
 *   FMTraceSummary_Private(tr, &st);                              collective
 *   FMTraceSave_Private(tr, "trace.h5");                          collective
 *   FMTraceDestroy_Private(&tr);                                  not collective
 *
 * Every function accepts a NULL recorder where noted, so the caller can leave tracing off by
 * keeping tr == NULL and still call FMTraceRecord_Private unconditionally.
 *
 * Time axis. Times passed to FMTraceRecord_Private are absolute FMTime() values; they are
 * stored in seconds relative to an origin t0 fixed at Create: after a barrier, t0 is the
 * MPI_Allreduce(MIN) of FMTime() over the ranks of one node (they share the monotonic clock),
 * so on one node the ranks share one time axis exactly and across nodes they are aligned at
 * the barrier's exit (monotonic clocks of different nodes are not comparable).
 *
 * Metrics (doc/traces.md gives the same definitions). For one rank:
 *   compute     length of the union of its COMPUTE intervals (seconds the rank was computing;
 *               concurrent compute on several streams is not double counted)
 *   comm        sum over its transfer events (SEND, RECV, REDUCE) of t_end - t_begin
 *   hidden      sum over its transfer events of the length of [t_begin, t_end] intersected
 *               with the union of the same rank's COMPUTE intervals
 *   wait        length of the union of its WAIT intervals (= exposed communication)
 *   bytes_sent  sum of bytes of its SEND and REDUCE events; bytes_recv: of its RECV events
 * Over ranks:
 *   overlap_efficiency  sum(hidden) / sum(comm); 1 when there is no communication
 *   exposed_max/mean    max and mean over ranks of wait
 *   imbalance           max over ranks of compute / mean over ranks of compute (1 if all 0)
 *   bytes_moved         sum of bytes_sent (each transfer counted once, at its sender)
 *   bytes_needed, bytes_allgather  sums of what each rank set with FMTraceSetBytes_Private
 */
#ifndef FLASHMASK_PRIVATE_FMTRACE_H
#define FLASHMASK_PRIVATE_FMTRACE_H

#include <flashmask/private/fmimpl.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Event kinds (stored as int32 in the file; /traces/<run> attribute kind_names lists them). */
typedef enum {
  FM_TRACE_COMPUTE = 0, /* a kernel on a chunk (flops, chunk = query chunk or key chunk id)  */
  FM_TRACE_SEND = 1,    /* a transfer leaving this rank: bytes, peer = destination rank      */
  FM_TRACE_RECV = 2,    /* a transfer arriving at this rank: bytes, peer = source rank       */
  FM_TRACE_WAIT = 3,    /* time blocked waiting for communication (exposed communication)    */
  FM_TRACE_REDUCE = 4,  /* backward: partial dK/dV sent towards their owner (peer), bytes   */
  FM_TRACE_COPY = 5,    /* local staging copy (host/device, packing); neither compute nor comm */
  FM_TRACE_NKINDS = 6
} FMTraceKind;

/* Names of the kinds ("compute", "send", "recv", "wait", "reduce", "copy"), NULL-terminated. */
extern const char *const FMTraceKindNames[];

/* One event as held in memory and in the file (compound /traces/<run>/events). Times in s. */
typedef struct {
  int rank, kind, stream;
  double t_begin, t_end, bytes, flops;
  int peer;   /* the other rank of a transfer, -1 if none */
  int chunk;  /* chunk id, -1 if none */
} FMTraceEvent;

/* One row of /traces/<run>/ranks. */
typedef struct {
  int rank, node, local_rank;
  char gpu_busid[32];
  int numa;
  char hostname[64];
} FMTraceRankRow;

/* Per-rank figures (see the definitions above). Doubles only: Summary sends it as MPI_DOUBLE. */
typedef struct {
  double compute, comm, hidden, wait;
  double bytes_sent, bytes_recv, flops;
  double t_first, t_last; /* earliest t_begin, latest t_end of any event (0, 0 if none) */
  double nevents;
} FMTraceRankStats;

/* Summary over the ranks (identical on every rank) plus this rank's own figures. */
typedef struct {
  int nranks;
  double nevents;                   /* events over all ranks */
  double compute_max, compute_mean, imbalance;
  double comm_total, hidden_total, overlap_efficiency;
  double exposed_max, exposed_mean; /* over ranks of the per-rank wait time */
  double bytes_moved, bytes_recv, bytes_needed, bytes_allgather;
  double flops;
  double span;                      /* latest t_end over ranks (the origin is 0) */
  FMTraceRankStats self;            /* this rank (Summary) / unused (StatsCombine) */
} FMTraceStats;

typedef struct _p_FMTrace *FMTrace;

/*
 * FMTraceCreateFromContext_Private - a new, empty event recorder on the context's communicator.
 *   Collective on the context (a barrier and an allreduce over its node communicator).
 *   ctx       a set-up context: it gives the communicator (borrowed: the context must outlive
 *             the recorder), the node communicator of the time origin and this rank's row
 *             (node, node_rank, numa, gpu_busid, hostname: the context's numbering)
 *   run_name  the run's name: the group /traces/<run_name> of the saved file (no '/',
 *             not empty, fewer than 256 characters)
 *   tr        out: the recorder; it writes through rank 0 when -fm_trace_serial was given at
 *             FMInitialize (FMTraceSetSerial_Private changes that)
 */
FMErrorCode FMTraceCreateFromContext_Private(FMContext ctx, const char *run_name, FMTrace *tr);

/*
 * FMTraceSetSerial_Private - whether FMTraceSave_Private gathers to rank 0 and writes with the
 *   serial API (FM_TRUE) or writes with parallel HDF5 where the build has it (FM_FALSE). Not
 *   collective (give every rank the same value; rank 0's decides). Default: -fm_trace_serial.
 */
FMErrorCode FMTraceSetSerial_Private(FMTrace tr, FMBool serial);

/*
 * FMTraceRecord_Private - append one event. Not collective; O(1) amortized, no messages.
 *   tr        the recorder, or NULL (then nothing is recorded and FM_SUCCESS returned)
 *   kind      an FMTraceKind
 *   stream    the stream / lane of this rank the event ran on (>= 0; a CUDA stream index,
 *             or 0 for the host thread)
 *   t_begin, t_end  absolute FMTime() values, t_begin <= t_end
 *   bytes     bytes moved (transfers) or touched (compute), >= 0
 *   flops     floating-point operations (compute), >= 0
 *   peer      the other rank of a transfer, or -1
 *   chunk     the chunk id, or -1
 *   A bad kind, stream, order of times or negative amount is FM_ERR_ARG_OUTOFRANGE.
 */
FMErrorCode FMTraceRecord_Private(FMTrace tr, int kind, int stream, double t_begin, double t_end, double bytes,
                                  double flops, int peer, int chunk);

/*
 * FMTraceSetBytes_Private - this rank's share of the reference byte counts, summed over the
 *   ranks by Summary and Save: bytes_needed (what the needed-set analysis says this rank
 *   must receive) and bytes_allgather (what an unpruned all-gather would deliver to it).
 *   Not collective. tr may be NULL. Negative values are FM_ERR_ARG_OUTOFRANGE.
 */
FMErrorCode FMTraceSetBytes_Private(FMTrace tr, double bytes_needed, double bytes_allgather);

/* FMTraceGetOrigin_Private - the origin t0 (an FMTime() value) of this rank's time axis. Not collective. */
FMErrorCode FMTraceGetOrigin_Private(FMTrace tr, double *t0);

/*
 * FMTraceGetEvents_Private - this rank's events so far (times relative to t0), borrowed
 *   until the next Record or Destroy. Not collective. ev may be NULL.
 */
FMErrorCode FMTraceGetEvents_Private(FMTrace tr, size_t *n, const FMTraceEvent **ev);

/*
 * FMTraceSummary_Private - the metrics over all ranks (definitions at the top of this file).
 *   Collective on the recorder's communicator (one MPI_Allgather); every rank gets the same
 *   global figures, and st->self holds its own.
 */
FMErrorCode FMTraceSummary_Private(FMTrace tr, FMTraceStats *st);

/*
 * FMTraceSave_Private - write every rank's events to path as /traces/<run>/ (layout in
 *   doc/traces.md). The file is created if missing, otherwise opened read-write and an
 *   existing /traces/<run> is replaced (other groups, e.g. /masks, are kept); a file whose
 *   root attribute format is not "flashmask" is refused (FM_ERR_HDF5).
 *   Collective on the recorder's communicator; every rank returns the same code.
 *   With parallel HDF5 every rank writes its events at an MPI_Exscan offset; otherwise, or
 *   when the recorder is serial (FMTraceSetSerial_Private; default -fm_trace_serial), the
 *   events are gathered to rank 0 which writes alone; rank 0's failure is then FM_ERR_COLLECTIVE
 *   elsewhere. Without HDF5 in the build: FM_ERR_SUP.
 */
FMErrorCode FMTraceSave_Private(FMTrace tr, const char *path);

/* FMTraceDestroy_Private - free the recorder and set *tr = NULL. Not collective; NULL is fine. */
FMErrorCode FMTraceDestroy_Private(FMTrace *tr);

/* ---------------- reading a saved trace (no communication) ---------------- */
/* Limits of what FMTraceLoad_Private accepts (a corrupt file must not size a buffer). */
#define FM_TRACE_MAX_RANKS (1 << 20)
#define FM_TRACE_MAX_EVENTS ((1ull << 31) - 1)

/* One run of a trace file, as FMTraceLoad_Private reads it. */
typedef struct {
  char run[256];           /* the run read */
  char created[64];        /* root attribute created ("" when absent) */
  char version[64];        /* root attribute library_version ("" when absent) */
  int nranks;              /* the run's nranks attribute, or 1 + the highest rank of an event if more */
  size_t n;                /* events */
  FMTraceEvent *ev;        /* [n], in file order: grouped by rank, in rank order */
  FMTraceRankRow *rows;    /* [nranks]: rows[r] describes rank r (node, local_rank, numa -1 and
                              strings "" where the file has no row or column for it) */
  double bytes_needed, bytes_allgather; /* the run's attributes (0 when absent) */
} FMTraceData;

/*
 * FMTraceLoad_Private - read /traces/<run> of a trace file. Not collective, sends no messages
 *   (usable before MPI_Init).
 *   path  the file (not an HDF5 file: FM_ERR_FILE)
 *   run   the run's name, or NULL for the only run (a file with several: FM_ERR_ARG_WRONG, the
 *         message lists them; a missing run: FM_ERR_HDF5, the message lists those present)
 *   td    out: the run; free with FMTraceDataFree_Private (nothing to free after an error)
 *   An events dataset that is missing, not one-dimensional, of another layout, larger than
 *   FM_TRACE_MAX_EVENTS or than what the file stores, or holding an event with a rank outside
 *   [0, FM_TRACE_MAX_RANKS) or times that are not finite and in order, is FM_ERR_HDF5; so is
 *   an nranks attribute outside [0, FM_TRACE_MAX_RANKS], and a ranks dataset that is there but
 *   not a one-dimensional compound, larger than FM_TRACE_MAX_RANKS or unreadable.
 *   Without HDF5 in the build: FM_ERR_SUP.
 */
FMErrorCode FMTraceLoad_Private(const char *path, const char *run, FMTraceData *td);
void FMTraceDataFree_Private(FMTraceData *td);

#if FM_HAVE_HDF5
#include <hdf5.h>
/*
 * FMTraceEventType_Private - the HDF5 compound type of an FMTraceEvent: file = 1 the packed
 *   little-endian type stored in /traces/<run>/events, file = 0 the native memory type of the
 *   struct (members matched by name). The caller closes it (H5Tclose); < 0 on failure.
 */
hid_t FMTraceEventType_Private(int file);
#endif

/* ---------------- helpers shared with the fmtrace program (no communication) ---------------- */
/*
 * FMTraceRankStatsCompute_Private - the per-rank figures of the events ev[0..n) whose rank
 *   field equals rank (rank < 0: all of them). Not collective, sends no messages (usable
 *   before MPI_Init). FM_ERR_MEM if the scratch space cannot be allocated.
 */
FMErrorCode FMTraceRankStatsCompute_Private(const FMTraceEvent *ev, size_t n, int rank, FMTraceRankStats *rs);

/*
 * FMTraceStatsCombine_Private - the summary over nranks per-rank figures all[0..nranks)
 *   plus the summed reference byte counts. st->self is zeroed. Not collective, no messages.
 */
void FMTraceStatsCombine_Private(int nranks, const FMTraceRankStats *all, double bytes_needed, double bytes_allgather,
                                 FMTraceStats *st);

#ifdef __cplusplus
}
#endif
#endif
