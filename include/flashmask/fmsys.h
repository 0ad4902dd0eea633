/*
 * flashmask/fmsys.h - errors, initialization, options, logging and the element types.
 * Part of the public API; include <flashmask.h>, which includes every part in order.
 */
#ifndef FLASHMASK_FMSYS_H
#define FLASHMASK_FMSYS_H

#include <stdio.h>
#include <stdint.h>
#include <mpi.h>
#include <flashmask/fmconf.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */
typedef enum {
  FM_SUCCESS = 0,
  FM_ERR_MEM = 55,        /* out of memory */
  FM_ERR_SUP = 56,        /* not supported in this build or configuration */
  FM_ERR_ORDER = 58,      /* functions called in the wrong order (e.g. Forward before SetUp) */
  FM_ERR_LIB = 60,        /* internal library error */
  FM_ERR_ARG_NULL = 62,   /* a required argument is NULL */
  FM_ERR_ARG_WRONG = 63,  /* an argument has the wrong value or object class */
  FM_ERR_ARG_OUTOFRANGE = 64, /* an argument is out of its range */
  FM_ERR_ARG_SIZ = 65,    /* inconsistent or invalid sizes */
  FM_ERR_ARG_INCOMP = 66, /* arguments are incompatible with each other */
  FM_ERR_FILE = 67,       /* cannot open, read or write a file */
  FM_ERR_MPI = 70,        /* an MPI call failed */
  FM_ERR_CUDA = 71,       /* a CUDA call failed */
  FM_ERR_NCCL = 72,       /* an NCCL call failed */
  FM_ERR_HDF5 = 73,       /* an HDF5 call failed or a file has the wrong layout */
  FM_ERR_HWLOC = 74,      /* hwloc failed */
  FM_ERR_OPT = 75,        /* bad value in the options database */
  FM_ERR_COLLECTIVE = 76, /* another rank failed inside a collective operation */
  FM_ERR_MISMATCH = 77    /* ranks disagree on data that must be identical */
} FMErrorCode;

/*
 * FMErrorString - the name and a one-line description of an error code.
 *   Not collective. Returns a static string, never NULL.
 */
const char *FMErrorString(FMErrorCode code);

typedef enum { FM_ERROR_HANDLER_TRACEBACK = 0, FM_ERROR_HANDLER_ABORT = 1, FM_ERROR_HANDLER_SILENT = 2 } FMErrorHandler;

/*
 * FMPushErrorHandler - choose what happens when an error is raised.
 *   Not collective.
 *   h    TRACEBACK (print message and traceback, return the code; default),
 *        ABORT (print, then MPI_Abort), SILENT (return the code, print nothing;
 *        used by tests that provoke errors on purpose).
 *   Also settable with -fm_error_abort and -fm_error_silent.
 *   Handlers nest (up to 32): FMPopErrorHandler restores the one before.
 * FMPopErrorHandler - restore the handler that was current before the last FMPushErrorHandler.
 *   Not collective. FM_ERR_ORDER without a matching push.
 */
FMErrorCode FMPushErrorHandler(FMErrorHandler h);
FMErrorCode FMPopErrorHandler(void);

/*
 * FMGetLastErrorMessage - the message of the most recent error raised on this rank.
 *   Not collective. Returns "" when none. The string is overwritten by the next error.
 */
const char *FMGetLastErrorMessage(void);

/*
 * FMErrorTraceback - add one line to the traceback of an error passing through the caller:
 *   "#n func() at file:line" on stderr under the TRACEBACK handler, nothing under SILENT.
 *   Not collective. Returns code, so that FMCall can return it.
 *   file, func, line  where the error passed (__FILE__, __func__, __LINE__)
 *   code              the error code passing through (not FM_SUCCESS)
 */
FMErrorCode FMErrorTraceback(const char *file, const char *func, int line, FMErrorCode code);

/*
 * FMCall(expr) - call a flashmask function (or any function returning FMErrorCode) from a
 *   function that returns FMErrorCode, main included: on an error, add a traceback line for
 *   the caller (FMErrorTraceback) and return the code. Applications use it as PETSc programs
 *   use PetscCall:
 *     FMCall(FMMaskSetUp(mask));
 *   In main the code becomes the exit status. The library uses the same macro internally.
 */
#define FMCall(expr)                                                                 \
  do {                                                                               \
    FMErrorCode fm_ierr_ = (expr);                                                   \
    if (fm_ierr_ != FM_SUCCESS) return FMErrorTraceback(__FILE__, __func__, __LINE__, fm_ierr_); \
  } while (0)

/* ------------------------------------------------------------------------ */
/* Initialization, options, logging                                          */
/* ------------------------------------------------------------------------ */
typedef enum { FM_FALSE = 0, FM_TRUE = 1 } FMBool;

/*
 * FMInitialize - initialize the library (and MPI if it is not yet initialized).
 *   Collective on MPI_COMM_WORLD.
 *   argc, argv  the program arguments (may be NULL); options "-fm_..." are read from them
 *   file        an options file (one "-option value" per line, lines of any length, '#'
 *               comments), or NULL; a path that is not a text file (a directory, a file
 *               holding NUL or other control bytes) is FM_ERR_FILE naming it
 *   help        text printed by -help before the option list, or NULL
 *   The environment variable FM_OPTIONS is also read (for codes that do not pass argv). In it
 *   and in options files a value that starts with a single or double quote runs to the
 *   matching quote, blanks and '#' included, and the quotes are removed
 *   (FM_OPTIONS='-fm_trace "run 1.h5"'); a quote inside a value is an ordinary character; an
 *   opening quote without its closing one is FM_ERR_OPT.
 *   Options read here: -help, -fm_error_abort, -fm_error_silent, -fm_log_view, -fm_trace_serial,
 *   -options_left, -options_file FILE (a further options file: the command line and FM_OPTIONS
 *   override it).
 */
FMErrorCode FMInitialize(int *argc, char ***argv, const char *file, const char *help);

/*
 * FMFinalize - print the -fm_log_view summary if asked, warn about options that were set
 *   but never read, free the options database, and finalize MPI if FMInitialize initialized
 *   it. Collective on MPI_COMM_WORLD.
 *   Unused options are printed on rank 0 ("WARNING! option -fm_x 1 was set but never used"):
 *   by default those whose name holds "fm_" (the library's, with or without a prefix; a
 *   program may parse its own arguments); with -options_left every unused option, or "There
 *   are no unused options."; with -options_left 0 nothing.
 */
FMErrorCode FMFinalize(void);

/* FMInitialized - whether FMInitialize has been called (and FMFinalize not yet). Not collective.
 *   flag  out: FM_TRUE or FM_FALSE */
FMErrorCode FMInitialized(FMBool *flag);

/*
 * FMOptionsSetValue - insert or replace "-name value" in the options database.
 *   Not collective (call it identically on every rank). value may be NULL for a flag.
 */
FMErrorCode FMOptionsSetValue(const char *name, const char *value);

/*
 * FMOptionsGetInt / GetReal / GetBool / GetString / GetIntArray - look up an option.
 *   Not collective. These are for application codes (tutorials use them); every
 *   lookup is listed by -help.
 *   name   full option name including the leading '-' (e.g. "-n")
 *   help   a short description printed by -help
 *   value  in: the default, out: the value if set
 *   set    out (may be NULL): whether the option was given
 *   For GetString, len is the size of value; for GetIntArray, *n is in: capacity, out: count.
 */
FMErrorCode FMOptionsGetInt(const char *name, const char *help, int *value, FMBool *set);
FMErrorCode FMOptionsGetReal(const char *name, const char *help, double *value, FMBool *set);
FMErrorCode FMOptionsGetBool(const char *name, const char *help, FMBool *value, FMBool *set);
FMErrorCode FMOptionsGetString(const char *name, const char *help, char *value, size_t len, FMBool *set);
FMErrorCode FMOptionsGetIntArray(const char *name, const char *help, int *value, int *n, FMBool *set);

/*
 * FMOptionsHasName - whether an option (e.g. "-help") is present. Not collective.
 *   name  full option name including the leading '-'
 *   set   out: whether the option was given
 */
FMErrorCode FMOptionsHasName(const char *name, FMBool *set);

/*
 * FMLogEventRegister / FMLogEventBegin / FMLogEventEnd - user-visible timed events
 *   shown in the -fm_log_view summary at FMFinalize. Not collective.
 *   name   event name; id out: the event handle
 *   flops, bytes  work to credit to the event at End
 */
typedef int FMLogEvent;
FMErrorCode FMLogEventRegister(const char *name, FMLogEvent *id);
FMErrorCode FMLogEventBegin(FMLogEvent id);
FMErrorCode FMLogEventEnd(FMLogEvent id, double flops, double bytes);

/*
 * FMLogView - print the per-event summary (time, calls, flops, bytes, min/max/avg
 *   over ranks) to fp. Collective on MPI_COMM_WORLD; only rank 0 prints. FMPlanForward and
 *   FMPlanBackward credit their events with FLOPs only while -fm_log_view is set (FMFinalize
 *   then prints this summary); without it their GFlop/s read 0.
 */
FMErrorCode FMLogView(FILE *fp);

/* FMGetVersion - the library version string, e.g. "0.1.0". Not collective. */
const char *FMGetVersion(void);

/* ------------------------------------------------------------------------ */
/* Enumerations                                                              */
/* ------------------------------------------------------------------------ */
typedef enum { FM_BACKEND_AUTO = 0, FM_BACKEND_CPU = 1, FM_BACKEND_CUDA = 2 } FMBackend;
typedef enum { FM_DTYPE_BF16 = 0, FM_DTYPE_FP16 = 1, FM_DTYPE_FP32 = 2 } FMDType;

/* FMBackendName / FMDTypeName - names as used by the options ("cpu", "bf16", ...) of backend b
 *   and dtype t. Not collective. */
const char *FMBackendName(FMBackend b);
const char *FMDTypeName(FMDType t);
/* FMDTypeSize - bytes per element of dtype t (2, 2, 4). Not collective. */
size_t FMDTypeSize(FMDType t);

/*
 * FMToFloat - element idx of a host array of type t, as a float. Not collective.
 *   base  the array (host memory)
 *   idx   the element index (not a byte offset)
 *   t     FM_DTYPE_BF16, FM_DTYPE_FP16 or FM_DTYPE_FP32
 *   Exact for every dtype (a float holds every bf16 and fp16 value); an unknown t gives NaN.
 * FMFromFloat - store x as element idx of a host array of type t. Not collective.
 *   base, idx, t  as in FMToFloat
 *   x     the value: rounded to nearest even for bf16 and fp16 (subnormals kept), values beyond
 *         the format's range become +-Inf, NaN stays NaN; an unknown t stores nothing.
 *   These are the conversions the CPU backend uses, so data made with them matches it exactly.
 */
float FMToFloat(const void *base, size_t idx, FMDType t);
void FMFromFloat(void *base, size_t idx, FMDType t, float x);

#ifdef __cplusplus
}
#endif
#endif
