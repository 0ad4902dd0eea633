/*
 * flashmask.h - umbrella header of libflashmask.
 *
 * libflashmask computes masked scaled-dot-product attention whose mask is stored
 * per key column as row intervals (LTS/LTE/UTS/UTE, the FlashMask format), on
 * Hopper GPUs and on an exact multithreaded CPU backend, and plans
 * mask-aware context parallelism over an MPI communicator.
 *
 * Objects (opaque, reference counted, PETSc style):
 *   FMContext  communicator, topology, backend and device choice
 *   FMMask     column-bound mask plus its per-block summaries
 *   FMPlan     an attention problem (shape, dtype, scale, mask) ready to run
 *
 * Every function returns an FMErrorCode; FM_SUCCESS is 0.
 */
#ifndef FLASHMASK_H
#define FLASHMASK_H

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
 */
FMErrorCode FMPushErrorHandler(FMErrorHandler h);

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
 *   The environment variable FM_OPTIONS is also read (for codes that do not pass argv).
 *   Options read here: -help, -fm_error_abort, -fm_error_silent, -fm_log_view, -options_left.
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

/* FMInitialized - whether FMInitialize has been called (and FMFinalize not yet). */
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
 *   over ranks) to fp. Collective on MPI_COMM_WORLD; only rank 0 prints.
 */
FMErrorCode FMLogView(FILE *fp);

/* FMGetVersion - the library version string, e.g. "0.1.0". Not collective. */
const char *FMGetVersion(void);

/* ------------------------------------------------------------------------ */
/* Enumerations                                                              */
/* ------------------------------------------------------------------------ */
typedef enum { FM_BACKEND_AUTO = 0, FM_BACKEND_CPU = 1, FM_BACKEND_CUDA = 2 } FMBackend;
typedef enum { FM_DTYPE_BF16 = 0, FM_DTYPE_FP16 = 1, FM_DTYPE_FP32 = 2 } FMDType;

/* FMBackendName / FMDTypeName - names as used by the options ("cpu", "bf16", ...). */
const char *FMBackendName(FMBackend b);
const char *FMDTypeName(FMDType t);
/* FMDTypeSize - bytes per element (2, 2, 4). */
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

/* ------------------------------------------------------------------------ */
/* FMContext                                                                 */
/* ------------------------------------------------------------------------ */
typedef struct _p_FMContext *FMContext;

/*
 * FMContextCreate - create a context over a communicator. Collective on comm.
 *   comm  the user's communicator; it is duplicated, so library traffic never
 *         matches user messages
 *   ctx   out: the new context
 */
FMErrorCode FMContextCreate(MPI_Comm comm, FMContext *ctx);

/*
 * FMContextSetBackend - choose the compute backend. Not collective (call identically).
 *   FM_BACKEND_AUTO picks CUDA when a usable GPU is present, otherwise CPU.
 *   Option: -fm_backend auto|cpu|cuda
 */
FMErrorCode FMContextSetBackend(FMContext ctx, FMBackend backend);

/*
 * FMContextSetNumThreads - CPU backend threads per rank (default: OpenMP's default).
 *   Not collective. Option: -fm_num_threads
 */
FMErrorCode FMContextSetNumThreads(FMContext ctx, int nthreads);

/* FMContextSetFromOptions - read -fm_backend, -fm_num_threads, -fm_context_view. Collective. */
FMErrorCode FMContextSetFromOptions(FMContext ctx);
/*
 * FMContextSetOptionsPrefix - set the prefix that FMContextSetFromOptions puts after the dash of
 *   every option it reads, so that a program holds several objects with their own options:
 *   with prefix "a_", -fm_backend is read as -a_fm_backend. NULL or "" clears it. The prefix may not
 *   start with '-' or contain blanks. Not collective (give every rank the same prefix).
 *   ctx     the object
 *   prefix  the prefix (copied), or NULL
 * FMContextGetOptionsPrefix - the current prefix (borrowed; NULL when none). Not collective.
 */
FMErrorCode FMContextSetOptionsPrefix(FMContext ctx, const char *prefix);
FMErrorCode FMContextGetOptionsPrefix(FMContext ctx, const char **prefix);

/*
 * FMContextSetUp - detect the topology (hwloc: node, package, NUMA of this rank, GPUs
 *   with PCI bus ids), split node-local ranks (MPI_Comm_split_type), choose a GPU near
 *   this rank's cores when CUDA is present, and resolve the backend. Collective; an
 *   error on any rank is returned on every rank.
 */
FMErrorCode FMContextSetUp(FMContext ctx);

/*
 * FMContextView - print the context (every rank's topology and device) to fp.
 *   Collective; rank 0 prints. fp NULL means stdout.
 */
FMErrorCode FMContextView(FMContext ctx, FILE *fp);

/* FMContextGetComm - the context's (duplicated) communicator. Not collective. */
FMErrorCode FMContextGetComm(FMContext ctx, MPI_Comm *comm);
/* FMContextGetBackend - the resolved backend (after SetUp). Not collective. */
FMErrorCode FMContextGetBackend(FMContext ctx, FMBackend *backend);
/* FMContextGetDevice - the CUDA device chosen for this rank, -1 if none. Not collective. */
FMErrorCode FMContextGetDevice(FMContext ctx, int *device);

/* FMContextDestroy - drop a reference; frees at zero and sets *ctx = NULL. Collective. */
FMErrorCode FMContextDestroy(FMContext *ctx);

/* ------------------------------------------------------------------------ */
/* FMMask                                                                    */
/* ------------------------------------------------------------------------ */
typedef struct _p_FMMask *FMMask;
typedef const char *FMMaskType;
#define FMMASKFULL                "full"
#define FMMASKCAUSAL              "causal"
#define FMMASKSLIDINGWINDOW       "sliding_window"
#define FMMASKCAUSALDOCUMENT      "causal_document"
#define FMMASKDOCUMENT            "document"
#define FMMASKSHAREQUESTION       "share_question"
#define FMMASKGLOBALSLIDINGWINDOW "global_sliding_window"
#define FMMASKCAUSALBLOCKWISE     "causal_blockwise"
#define FMMASKPREFIXLMDOCUMENT    "prefix_lm_document"
#define FMMASKPREFIXLMCAUSAL      "prefix_lm_causal"
#define FMMASKQKSPARSE            "qk_sparse"
#define FMMASKRANDOMEVICTION      "random_eviction"
#define FMMASKBOUNDS              "bounds"

/* Which bound vectors a mask carries (bit set). */
#define FM_BOUND_LTS 1
#define FM_BOUND_LTE 2
#define FM_BOUND_UTS 4
#define FM_BOUND_UTE 8

/*
 * FMMaskCreate - create an empty mask on the context's communicator. Collective.
 *   ctx   the context; mask out: the new mask (type "full" until set)
 */
FMErrorCode FMMaskCreate(FMContext ctx, FMMask *mask);

/*
 * Limits of one mask, checked by FMMaskSetSizes, FMMaskSetBlockSize and FMMaskLoad (before
 * anything is allocated): seqlen_q, seqlen_k and the block size at most FM_MASK_MAX_SEQLEN
 * (2^30), and mask_heads * seqlen_k at most FM_MASK_MAX_ENTRIES (2^28 columns: each takes
 * 16 bytes of bounds, and as much again for bounds given with FMMaskSetBounds).
 */
#define FM_MASK_MAX_SEQLEN (1 << 30)
#define FM_MASK_MAX_ENTRIES (1 << 28)

/*
 * FMMaskSetSizes - set the score-matrix size and the number of mask heads. Not collective.
 *   seqlen_q, seqlen_k  > 0 and <= FM_MASK_MAX_SEQLEN
 *   mask_heads          1 (shared by all heads) or the number of KV heads;
 *                       mask_heads * seqlen_k <= FM_MASK_MAX_ENTRIES
 *   Sizes out of these ranges are FM_ERR_ARG_SIZ (nothing is allocated).
 *   Options: -fm_mask_seqlen_q, -fm_mask_seqlen_k, -fm_mask_heads
 */
FMErrorCode FMMaskSetSizes(FMMask mask, int seqlen_q, int seqlen_k, int mask_heads);

/* FMMaskSetType - choose a builder (FMMASK* names). Not collective. Option: -fm_mask_type */
FMErrorCode FMMaskSetType(FMMask mask, FMMaskType type);
/* FMMaskGetType - the type name. Not collective. */
FMErrorCode FMMaskGetType(FMMask mask, FMMaskType *type);

/*
 * FMMaskTypeList - the names FMMaskSetType accepts, in the order of the FMMASK* macros above:
 *   the 12 builders ("full", "causal", ..., "random_eviction") and then "bounds" (user bounds).
 *   Not collective; no FMInitialize needed.
 *   n      out: the number of names (13)
 *   names  out: a borrowed array of n static strings, followed by a NULL entry
 */
FMErrorCode FMMaskTypeList(int *n, const char *const **names);

/*
 * FMMaskSetCausal - for type "bounds": add the causal triangle (bottom-right aligned)
 *   on top of the bounds. Not collective. Option: -fm_mask_causal
 */
FMErrorCode FMMaskSetCausal(FMMask mask, FMBool causal);

/*
 * FMMaskSetDocuments - document lengths (they must sum to seqlen_k). Not collective.
 *   Used by causal_document, document, share_question, causal_blockwise,
 *   prefix_lm_document. Option: -fm_mask_docs 2538,1742,3213
 *   If no documents are set, SetUp draws them as in the FlashMask paper from the seed.
 */
FMErrorCode FMMaskSetDocuments(FMMask mask, int ndocs, const int lengths[]);

/*
 * FMMaskSetWindow - sliding-window sizes in tokens (>= 0). Not collective.
 *   Options: -fm_mask_window_left, -fm_mask_window_right (default seqlen/16)
 */
FMErrorCode FMMaskSetWindow(FMMask mask, int left, int right);

/* FMMaskSetGlobalTokens - number of global tokens (global_sliding_window; default 16).
 *   Option: -fm_mask_global_tokens */
FMErrorCode FMMaskSetGlobalTokens(FMMask mask, int nglobal);

/*
 * FMMaskSetPrefixLengths - prefix length of each document (prefix_lm_document;
 *   default: the first half of each document) or, with ndocs = 1, the prefix of
 *   prefix_lm_causal (default seqlen/2). Not collective. Option: -fm_mask_prefix
 */
FMErrorCode FMMaskSetPrefixLengths(FMMask mask, int ndocs, const int prefix[]);

/*
 * FMMaskSetShareQuestion - for share_question: per document, the number of segments
 *   (1 question + answers) and their lengths, concatenated. nseg[d] >= 2 and the
 *   lengths of document d sum to its length. Not collective.
 *   Option: -fm_mask_segments q0,a0,a1,...  (with -fm_mask_nsegments 3,4,...)
 *   Default: each document is split into a question and 2..6 answers from the seed.
 */
FMErrorCode FMMaskSetShareQuestion(FMMask mask, int ndocs, const int nseg[], const int seglen[]);

/*
 * FMMaskSetQKSparseSpans - masked key spans [start, start+len) for qk_sparse. Not collective.
 *   Option: -fm_mask_spans start0,len0,start1,len1,...  Default: drawn from the seed.
 */
FMErrorCode FMMaskSetQKSparseSpans(FMMask mask, int nspans, const int start[], const int len[]);

/* FMMaskSetSeed - seed for every random default (documents, evictions, spans). Default 42.
 *   Option: -fm_mask_seed */
FMErrorCode FMMaskSetSeed(FMMask mask, unsigned long seed);

/*
 * FMMaskSetBounds - user-supplied bounds for one mask head (type "bounds"). Not collective.
 *   head              0 <= head < mask_heads
 *   lts, lte, uts, ute   int32[seqlen_k] each, or NULL when absent; the arrays are copied.
 *   Query row i may not attend key j when lts[j] <= i < lte[j] or uts[j] <= i < ute[j].
 *   Absent: lte defaults to seqlen_q when lts is given, uts to 0 when ute is given.
 *   The same set of vectors must be given for every head. Checked at SetUp.
 */
FMErrorCode FMMaskSetBounds(FMMask mask, int head, const int32_t *lts, const int32_t *lte,
                            const int32_t *uts, const int32_t *ute);

/* FMMaskSetBlockSize - key/query block size of the summaries (default 128; 1 to
 *   FM_MASK_MAX_SEQLEN, else FM_ERR_ARG_OUTOFRANGE). Not collective. Option: -fm_mask_block_size */
FMErrorCode FMMaskSetBlockSize(FMMask mask, int block);

/* FMMaskSetFromOptions - read every -fm_mask_* option. Collective. */
FMErrorCode FMMaskSetFromOptions(FMMask mask);
/*
 * FMMaskSetOptionsPrefix - set the prefix that FMMaskSetFromOptions puts after the dash of
 *   every option it reads, so that a program holds several objects with their own options:
 *   with prefix "a_", -fm_mask_type is read as -a_fm_mask_type. NULL or "" clears it. The prefix may not
 *   start with '-' or contain blanks. Not collective (give every rank the same prefix).
 *   mask     the object
 *   prefix  the prefix (copied), or NULL
 * FMMaskGetOptionsPrefix - the current prefix (borrowed; NULL when none). Not collective.
 */
FMErrorCode FMMaskSetOptionsPrefix(FMMask mask, const char *prefix);
FMErrorCode FMMaskGetOptionsPrefix(FMMask mask, const char **prefix);

/*
 * FMMaskSetUp - build the bounds (for builder types), validate them (0 <= start <= seqlen_q,
 *   start <= end, sizes, heads, parameters) and compute the per-block summaries.
 *   Collective; an error on any rank is returned on every rank, and ranks whose masks differ
 *   (sizes, type, causal flag, block size or bounds) all get FM_ERR_MISMATCH. Call it on every
 *   rank even when only some ranks changed their mask since the last SetUp: those rebuild, and
 *   every rank checks the result. Nothing is rebuilt when no rank changed its mask.
 */
FMErrorCode FMMaskSetUp(FMMask mask);

/*
 * FMMaskGetSizes - sizes set on the mask. Not collective. Any output may be NULL.
 */
FMErrorCode FMMaskGetSizes(FMMask mask, int *seqlen_q, int *seqlen_k, int *mask_heads);

/*
 * FMMaskGetBounds - borrowed pointers to one head's bound vectors (after SetUp).
 *   Not collective. Every pointer is always valid after SetUp: absent vectors are
 *   returned in their default form (lts = lte = seqlen_q, uts = ute = 0).
 *   present  out (may be NULL): FM_BOUND_* bits of the vectors that are meaningful
 *   causal   out (may be NULL): whether the causal triangle is added
 *   Any of lts, lte, uts, ute may be NULL when that vector is not wanted.
 */
FMErrorCode FMMaskGetBounds(FMMask mask, int head, const int32_t **lts, const int32_t **lte,
                            const int32_t **uts, const int32_t **ute, int *present, FMBool *causal);

/*
 * FMMaskIsMasked - whether query row i may NOT attend key j for a mask head (after SetUp).
 *   Not collective. Exact, O(1); meant for tests and tools.
 */
FMErrorCode FMMaskIsMasked(FMMask mask, int head, int i, int j, FMBool *masked);

/*
 * FMMaskGetDensity - after SetUp. Not collective.
 *   element_density  out (may be NULL): fraction of (i, j, head) entries NOT masked
 *   block_sparsity   out (may be NULL): fraction of block x block tiles fully masked
 */
FMErrorCode FMMaskGetDensity(FMMask mask, double *element_density, double *block_sparsity);

/*
 * FMMaskView - print the type, sizes, parameters, density and a coarse picture. Collective;
 *   rank 0 prints. fp NULL means stdout. Option: -fm_mask_view
 */
FMErrorCode FMMaskView(FMMask mask, FILE *fp);

/*
 * FMMaskSave - write the mask to an HDF5 file as /masks/<name> (created or appended).
 *   Collective; rank 0 writes. When rank 0 fails, it returns its code and the other ranks
 *   FM_ERR_COLLECTIVE with rank 0's message. Needs HDF5 (FM_ERR_SUP otherwise).
 */
FMErrorCode FMMaskSave(FMMask mask, const char *path, const char *name);

/*
 * FMMaskLoad - read /masks/<name> from an HDF5 file into a new, set-up mask of type
 *   "bounds". Collective on the context; every rank reads. A missing dataset, a wrong
 *   shape or type, or bounds out of range is an FM_ERR_HDF5 / FM_ERR_ARG_OUTOFRANGE error.
 *   Sizes beyond the FM_MASK_MAX_* limits, and datasets that disagree with the attributes or
 *   store fewer bytes than their shape needs, are FM_ERR_HDF5 before anything is allocated.
 *   String attributes may be fixed- or variable-length, ASCII or UTF-8 (h5py's). Files are
 *   data from a trusted source: HDF5 itself can crash on some corrupt files.
 */
FMErrorCode FMMaskLoad(FMContext ctx, const char *path, const char *name, FMMask *mask);

/* FMMaskDestroy - drop a reference; frees at zero and sets *mask = NULL. Collective. */
FMErrorCode FMMaskDestroy(FMMask *mask);

/* ------------------------------------------------------------------------ */
/* FMPlan                                                                    */
/* ------------------------------------------------------------------------ */
typedef struct _p_FMPlan *FMPlan;

/* FMPlanCreate - create a plan on the context. Collective. */
FMErrorCode FMPlanCreate(FMContext ctx, FMPlan *plan);

/* FMPlanSetMask - set the mask (the plan takes a reference). Not collective. */
FMErrorCode FMPlanSetMask(FMPlan plan, FMMask mask);

/*
 * FMPlanSetShape - problem shape. Not collective.
 *   batch >= 1; heads_q a multiple of heads_kv; head_dim a multiple of 8 (on the CUDA backend at
 *   most 256: 64 and 128 run the Hopper kernel, other sizes a slower fallback kernel)
 *   dtype  element type of Q, K, V, O, dO, dQ, dK, dV
 *   Options: -fm_plan_batch, -fm_plan_heads, -fm_plan_kv_heads, -fm_plan_head_dim, -fm_plan_dtype
 */
FMErrorCode FMPlanSetShape(FMPlan plan, int batch, int heads_q, int heads_kv, int head_dim, FMDType dtype);

/* FMPlanGetShape - the shape as set (after options). Not collective. Any output may be NULL. */
FMErrorCode FMPlanGetShape(FMPlan plan, int *batch, int *heads_q, int *heads_kv, int *head_dim, FMDType *dtype);

/* FMPlanSetScale - softmax scale (default 1/sqrt(head_dim)). Not collective. Option: -fm_plan_scale */
FMErrorCode FMPlanSetScale(FMPlan plan, double scale);

/* FMPlanSetStream - CUDA stream (cudaStream_t) to run on; NULL = default stream. Not collective. */
FMErrorCode FMPlanSetStream(FMPlan plan, void *cuda_stream);

/* FMPlanSetFromOptions - read every -fm_plan_* option. Collective. */
FMErrorCode FMPlanSetFromOptions(FMPlan plan);
/*
 * FMPlanSetOptionsPrefix - set the prefix that FMPlanSetFromOptions puts after the dash of
 *   every option it reads, so that a program holds several objects with their own options:
 *   with prefix "a_", -fm_plan_batch is read as -a_fm_plan_batch. NULL or "" clears it. The prefix may not
 *   start with '-' or contain blanks. Not collective (give every rank the same prefix).
 *   plan     the object
 *   prefix  the prefix (copied), or NULL
 * FMPlanGetOptionsPrefix - the current prefix (borrowed; NULL when none). Not collective.
 */
FMErrorCode FMPlanSetOptionsPrefix(FMPlan plan, const char *prefix);
FMErrorCode FMPlanGetOptionsPrefix(FMPlan plan, const char **prefix);

/*
 * FMPlanSetUp - check the mask against the shape (mask heads 1 or heads_kv), decide which
 *   query rows this rank owns, and prepare the backend. Collective.
 */
FMErrorCode FMPlanSetUp(FMPlan plan);

/*
 * FMPlanGetLocalRows - the query rows this rank owns. Not collective.
 *   nlocal       out: number of local rows
 *   global_rows  out (may be NULL): borrowed array of nlocal global row indices; the
 *                local tensors hold these rows in this order
 */
FMErrorCode FMPlanGetLocalRows(FMPlan plan, int *nlocal, const int **global_rows);

/*
 * FMPlanForward - O = softmax(scale * Q K^T + mask) V, and LSE. Collective on the plan.
 *   q    [batch][nlocal][heads_q][head_dim]           (dtype; device memory on CUDA)
 *   k, v [batch][nkeys][heads_kv][head_dim]           (dtype): the key positions this rank
 *        holds (FMPlanGetLocalKeys); on one rank nkeys = seqlen_k, all positions in order
 *   o    out: [batch][nlocal][heads_q][head_dim]      (dtype)
 *   lse  out: float [batch][heads_q][nlocal]; natural log; -inf for fully masked rows
 *        (whose O is 0). May be NULL if not needed (then Backward cannot run).
 *   On the CUDA backend every tensor is device memory and the call is asynchronous on the
 *   plan's stream (FMPlanSetStream): synchronize it before reading o and lse. Over several
 *   ranks the K/V gather runs on a second stream (NCCL, or MPI through pinned host memory:
 *   -fm_plan_transport) overlapped with the kernels; with -fm_plan_transport mpi the call
 *   returns after the last message of the gather. -fm_gpu_aware_mpi auto|0|1 (default auto:
 *   MPIX_Query_cuda_support() on every rank) lets the mpi transport send and receive the
 *   device buffers directly, without host staging.
 */
FMErrorCode FMPlanForward(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse);

/*
 * FMPlanBackward - gradients of the forward pass. Collective on the plan.
 *   q, k, v, o, lse   as given to / returned by FMPlanForward
 *   dout              dO, same layout as o
 *   dq, dk, dv        out: same layouts as q, k, v (dtype); on several ranks dk, dv hold the
 *                     complete gradients of this rank's key positions (partials from the
 *                     ranks that gathered them are reduced back here)
 *   On the CUDA backend (device memory) there is no backward kernel yet: the tensors are
 *   staged through host memory and the exact CPU backward runs (distributed over MPI when the
 *   plan spans several ranks); correct but slow, and synchronous.
 */
FMErrorCode FMPlanBackward(FMPlan plan, const void *q, const void *k, const void *v, const void *o,
                           const float *lse, const void *dout, void *dq, void *dk, void *dv);

/*
 * FMPlanGetLocalKeys - the key positions whose K and V this rank holds (context parallelism).
 *   Not collective. On several ranks, FMPlanForward/Backward take k, v (and return dk, dv)
 *   for these positions only, in this order: [batch][nkeys][heads_kv][head_dim]. The key
 *   axis is cut into as many chunks as the query axis (kchunk = ceil(seqlen_k * chunk /
 *   seqlen_q) columns each, equal to the query chunk when seqlen_q = seqlen_k) and key chunk
 *   c lives with query chunk c. On one rank these are all seqlen_k positions.
 *   nkeys        out: number of local key positions
 *   global_keys  out (may be NULL): borrowed array of nkeys global key indices
 */
FMErrorCode FMPlanGetLocalKeys(FMPlan plan, int *nkeys, const int **global_keys);

/* Which tensor layout FMPlanScatter/FMPlanGather move. */
typedef enum {
  FM_PLAN_TENSOR_Q = 0,   /* q, o, dout, dq: [batch][seqlen_q][heads_q][head_dim] (dtype) */
  FM_PLAN_TENSOR_KV = 1,  /* k, v, dk, dv:   [batch][seqlen_k][heads_kv][head_dim] (dtype) */
  FM_PLAN_TENSOR_LSE = 2  /* lse:            float [batch][heads_q][seqlen_q] */
} FMPlanTensor;

/*
 * FMPlanScatter - distribute a tensor held whole on one rank into the plan's local layout
 *   (local rows from FMPlanGetLocalRows, local keys from FMPlanGetLocalKeys).
 *   Collective on the plan, after FMPlanSetUp.
 *   kind    FM_PLAN_TENSOR_Q, _KV or _LSE (the layouts above)
 *   root    the rank holding the global tensor
 *   global  the global tensor (significant on root only; may be NULL elsewhere)
 *   local   out: this rank's part, in the plan's local order (may be NULL where this rank's
 *           local count is 0)
 *   Argument errors on any rank are returned on every rank.
 */
FMErrorCode FMPlanScatter(FMPlan plan, FMPlanTensor kind, int root, const void *global, void *local);

/*
 * FMPlanGather - the inverse of FMPlanScatter: assemble the global tensor on root.
 *   Collective on the plan, after FMPlanSetUp.
 *   kind, root  as in FMPlanScatter
 *   local   this rank's part, in the plan's local order (may be NULL where this rank's local
 *           count is 0)
 *   global  out: the global tensor (significant on root only; may be NULL elsewhere)
 *   Argument errors on any rank are returned on every rank.
 */
FMErrorCode FMPlanGather(FMPlan plan, FMPlanTensor kind, int root, const void *local, void *global);

/* FMPlanGetFlops - forward FLOPs under the FlashMask convention 4*B*H*Sq*Sk*d*(1-rho). */
FMErrorCode FMPlanGetFlops(FMPlan plan, double *fwd_flops);

/* FMPlanView - print the plan. Collective; rank 0 prints. Option: -fm_plan_view */
FMErrorCode FMPlanView(FMPlan plan, FILE *fp);

/* FMPlanDestroy - drop a reference; frees at zero and sets *plan = NULL. Collective. */
FMErrorCode FMPlanDestroy(FMPlan *plan);

#ifdef __cplusplus
}
#endif
#endif
