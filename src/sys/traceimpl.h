/*
 * traceimpl.h - private to src/sys: the event recorder's struct, shared by trace.c (recording,
 * metrics), tracewrite.c (the HDF5 writer) and traceio.c (the HDF5 types and reader). Not installed.
 */
#ifndef FLASHMASK_TRACEIMPL_H
#define FLASHMASK_TRACEIMPL_H

#include <flashmask/private/fmtracing.h>

struct _p_FMTrace {
  MPI_Comm comm;          /* borrowed (the context's) */
  int rank, size;
  char run[256];
  double t0;              /* origin (an FMTime() value) */
  FMTraceEvent *ev;
  size_t n, cap;
  FMTraceRankRow row;     /* this rank's placement */
  double bytes_needed, bytes_allgather;
  int serial;             /* write through rank 0 (FMTraceSetSerial_Private; default -fm_trace_serial) */
};

#if FM_HAVE_HDF5
/* FMTraceRowType_Private - traceio.c: the HDF5 compound type of an FMTraceRankRow, file = 1 the
   packed little-endian type of /traces/<run>/ranks, file = 0 the native memory type (strings:
   fixed length, NUL-terminated). The caller closes it (H5Tclose); < 0 on failure. */
hid_t FMTraceRowType_Private(int file);
#endif

#endif
