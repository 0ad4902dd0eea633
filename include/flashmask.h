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
 * Every function that can fail returns an FMErrorCode (FM_SUCCESS is 0); the few that cannot
 * (FMErrorString, FMGetLastErrorMessage, FMToFloat, FMDTypeSize, ...) return their value.
 * Outputs never alias inputs: a tensor passed as an output must not overlap any input.
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
 *   The environment variable FM_OPTIONS is also read (for codes that do not pass argv).
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
 *   ctx      the context
 *   backend  FM_BACKEND_AUTO picks CUDA when a usable GPU is present, otherwise CPU.
 *   Option: -fm_backend auto|cpu|cuda
 */
FMErrorCode FMContextSetBackend(FMContext ctx, FMBackend backend);

/*
 * FMContextSetNumThreads - CPU backend threads per rank. Not collective. Option: -fm_num_threads
 *   ctx       the context
 *   nthreads  >= 0. 0 (the default) is resolved at FMContextSetUp: OpenMP's default when the
 *             environment sets OMP_NUM_THREADS, else the cores of the rank's binding (its hwloc
 *             cpuset) divided among the node's ranks bound to the same cores, at least 1. So
 *             unbound ranks share the machine (3 ranks on 2 cores run 1 thread each, not 2 each),
 *             and a rank bound to one core runs one thread (give the launcher a wider binding,
 *             e.g. `mpiexec --bind-to none` or `--bind-to socket`, for more). FMContextView
 *             prints the count in use. A count > 0 set after FMContextSetUp applies at once.
 */
FMErrorCode FMContextSetNumThreads(FMContext ctx, int nthreads);

/*
 * FMContextSetNCCLTimeout - a time limit for the K/V exchanges over NCCL (context-parallel plans
 *   on the CUDA backend). With seconds > 0, FMPlanForward waits on the host until its exchange
 *   is over, polling NCCL for asynchronous errors (a failed peer or link): on an error, or when
 *   the exchange takes longer than seconds, every rank returns FM_ERR_NCCL and the communicators
 *   are aborted (new ones are made on the next call) instead of leaving the plan's stream waiting
 *   for ever. The compute kernels stay asynchronous. 0 (the default) sets no limit: the call
 *   returns while the exchange runs. Not collective (give every rank the same value).
 *   Option: -fm_nccl_timeout
 *   ctx      the context
 *   seconds  >= 0
 * FMContextGetNCCLTimeout - the limit in seconds (0: none). Not collective.
 */
FMErrorCode FMContextSetNCCLTimeout(FMContext ctx, double seconds);
FMErrorCode FMContextGetNCCLTimeout(FMContext ctx, double *seconds);

/* FMContextSetFromOptions - read -fm_backend, -fm_num_threads, -fm_nccl_timeout, -fm_context_view (and the kernel
 *   options -fm_cuda_fallback, -fm_sm90_vdesc_swap, -fm_sm90_schedule, -fm_sm90_ctas, -fm_sm90_auto_keys,
 *   -fm_cpu_vector_width, -fm_cpu_stage_bytes)
 *   into ctx. Collective; an error on any rank is an error on every rank. */
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
 *   On the CUDA backend the chosen GPU becomes the calling thread's current device
 *   (cudaSetDevice): allocate the tensors you pass to FMPlanForward/Backward after this call,
 *   on that device (FMContextView prints it). The CPU backend's default thread count comes from
 *   the cores this rank is bound to (FMContextSetNumThreads).
 *   ctx  the context
 */
FMErrorCode FMContextSetUp(FMContext ctx);

/*
 * FMContextView - print the context ctx (every rank's topology and device) to fp.
 *   Collective; rank 0 prints. fp NULL means stdout.
 */
FMErrorCode FMContextView(FMContext ctx, FILE *fp);

/* FMContextGetComm - comm out: the context ctx's (duplicated) communicator; the context owns
 *   it (do not free it). Not collective. */
FMErrorCode FMContextGetComm(FMContext ctx, MPI_Comm *comm);
/* FMContextGetBackend - backend out: the resolved backend of ctx (after SetUp). Not collective. */
FMErrorCode FMContextGetBackend(FMContext ctx, FMBackend *backend);
/* FMContextGetDevice - device out: the CUDA device ctx chose for this rank, -1 if none.
 *   Not collective. */
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

/*
 * FMMaskSetBatch - give every sample of the batch its own bounds. Not collective.
 *   mask        the mask
 *   mask_batch  1 (the default): one set of bounds shared by every sample, or the batch of
 *               the plans that use the mask (FMPlanSetShape), checked at FMPlanSetUp
 *               (FM_ERR_ARG_INCOMP on every rank otherwise); >= 1 and mask_batch * mask_heads
 *               * seqlen_k <= FM_MASK_MAX_ENTRIES, else FM_ERR_ARG_OUTOFRANGE / FM_ERR_ARG_SIZ.
 *   Bounds and block summaries are kept per (sample, mask head). The builders draw the random
 *   defaults of sample s (document lengths, segments, spans, evictions) from the seed
 *   (FMMaskSetSeed) plus s, so every sample packs other documents; values given by setters
 *   (FMMaskSetDocuments, ...) and the deterministic types (full, causal, windows) are the same
 *   in every sample. Changing the batch discards bounds given with FMMaskSetBounds.
 *   The plan type "cp" runs them on every backend (one partition for the whole batch).
 *   Option: -fm_mask_batch
 */
FMErrorCode FMMaskSetBatch(FMMask mask, int mask_batch);
/*
 * FMMaskGetBatch - the mask batch of a mask. Not collective.
 *   mask        the mask
 *   mask_batch  out: as given to FMMaskSetBatch (1 by default)
 */
FMErrorCode FMMaskGetBatch(FMMask mask, int *mask_batch);

/* FMMaskSetType - choose the builder of mask: type is one of the FMMASK* names. Not collective.
 *   Option: -fm_mask_type */
FMErrorCode FMMaskSetType(FMMask mask, FMMaskType type);
/* FMMaskGetType - type out: the type name of mask (borrowed). Not collective. */
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
 *   mask    the mask
 *   causal  FM_TRUE to add the triangle
 */
FMErrorCode FMMaskSetCausal(FMMask mask, FMBool causal);

/*
 * FMMaskSetDocuments - document lengths (they must sum to seqlen_k). Not collective.
 *   mask     the mask
 *   ndocs    number of documents (0 restores the default)
 *   lengths  ndocs lengths, each >= 1 (copied)
 *   Used by causal_document, document, share_question, causal_blockwise,
 *   prefix_lm_document. Option: -fm_mask_docs 2538,1742,3213
 *   If no documents are set, SetUp draws them as in the FlashMask paper from the seed.
 */
FMErrorCode FMMaskSetDocuments(FMMask mask, int ndocs, const int lengths[]);

/*
 * FMMaskSetWindow - sliding-window sizes in tokens. Not collective.
 *   mask         the mask
 *   left, right  tokens before and after the diagonal (>= 0)
 *   Options: -fm_mask_window_left, -fm_mask_window_right (default seqlen/16)
 */
FMErrorCode FMMaskSetWindow(FMMask mask, int left, int right);

/* FMMaskSetGlobalTokens - nglobal (>= 0), the number of global tokens of mask
 *   (global_sliding_window; default 16). Not collective. Option: -fm_mask_global_tokens */
FMErrorCode FMMaskSetGlobalTokens(FMMask mask, int nglobal);

/*
 * FMMaskSetPrefixLengths - prefix length of each document (prefix_lm_document;
 *   default: the first half of each document) or, with ndocs = 1, the prefix of
 *   prefix_lm_causal (default seqlen/2). Not collective. Option: -fm_mask_prefix
 *   mask    the mask
 *   ndocs   number of prefix lengths (0 restores the default)
 *   prefix  ndocs lengths, each >= 0 (copied)
 */
FMErrorCode FMMaskSetPrefixLengths(FMMask mask, int ndocs, const int prefix[]);

/*
 * FMMaskSetShareQuestion - for share_question: per document, the number of segments
 *   (1 question + answers) and their lengths, concatenated. nseg[d] >= 2 and the
 *   lengths of document d sum to its length. Not collective.
 *   mask    the mask
 *   ndocs   number of documents (0 restores the default)
 *   nseg    ndocs segment counts; seglen  their segment lengths, concatenated (copied)
 *   Option: -fm_mask_segments q0,a0,a1,...  (with -fm_mask_nsegments 3,4,...)
 *   Default: each document is split into a question and 2..6 answers from the seed.
 */
FMErrorCode FMMaskSetShareQuestion(FMMask mask, int ndocs, const int nseg[], const int seglen[]);

/*
 * FMMaskSetQKSparseSpans - masked key spans [start, start+len) for qk_sparse. Not collective.
 *   mask        the mask
 *   nspans      number of spans (0 restores the default)
 *   start, len  nspans starts (>= 0) and lengths (copied)
 *   Option: -fm_mask_spans start0,len0,start1,len1,...  Default: drawn from the seed.
 */
FMErrorCode FMMaskSetQKSparseSpans(FMMask mask, int nspans, const int start[], const int len[]);

/* FMMaskSetSeed - seed of mask for every random default (documents, evictions, spans).
 *   Default 42. Not collective. Option: -fm_mask_seed */
FMErrorCode FMMaskSetSeed(FMMask mask, unsigned long seed);

/*
 * FMMaskSetBounds - user-supplied bounds for one mask head of every sample (type "bounds").
 *   Not collective. Call FMMaskSetSizes (and FMMaskSetBatch, if any) first.
 *   head              0 <= head < mask_heads
 *   lts, lte, uts, ute   int32[seqlen_k] each, or NULL when absent; the arrays are copied.
 *   Query row i may not attend key j when lts[j] <= i < lte[j] or uts[j] <= i < ute[j].
 *   Absent: lte defaults to seqlen_q when lts is given, uts to 0 when ute is given.
 *   The same set of vectors must be given for every head (and sample). Checked at SetUp.
 *   With mask_batch > 1 the vectors are copied into every sample; FMMaskSetSampleBounds
 *   replaces one sample's.
 */
FMErrorCode FMMaskSetBounds(FMMask mask, int head, const int32_t *lts, const int32_t *lte,
                            const int32_t *uts, const int32_t *ute);

/*
 * FMMaskSetSampleBounds - user-supplied bounds for one mask head of one sample (type
 *   "bounds"). Not collective. As FMMaskSetBounds, for that sample only.
 *   sample  0 <= sample < mask_batch (FMMaskSetBatch), else FM_ERR_ARG_OUTOFRANGE
 *   head    0 <= head < mask_heads
 *   lts, lte, uts, ute   as in FMMaskSetBounds
 *   Every (sample, head) needs bounds before FMMaskSetUp. For new bounds every training step,
 *   call it again for each sample, then FMMaskSetUp and FMPlanSetUp (same sizes).
 */
FMErrorCode FMMaskSetSampleBounds(FMMask mask, int sample, int head, const int32_t *lts,
                                  const int32_t *lte, const int32_t *uts, const int32_t *ute);

/* FMMaskSetBlockSize - block (1 to FM_MASK_MAX_SEQLEN, else FM_ERR_ARG_OUTOFRANGE), the
 *   key/query block size of the summaries of mask (default 128). Not collective.
 *   Option: -fm_mask_block_size */
FMErrorCode FMMaskSetBlockSize(FMMask mask, int block);

/* FMMaskSetFromOptions - read every -fm_mask_* option into mask. Collective; an error on any
 *   rank is an error on every rank. */
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
 *   start <= end, sizes, heads, parameters) and normalize empty intervals; the per-block
 *   summaries are computed here on several ranks, and on one rank when something first needs
 *   them (the one-rank CUDA path never does: the GPU builds its own).
 *   Collective; an error on any rank is returned on every rank, and ranks whose masks differ
 *   (sizes, type, causal flag, block size or bounds) all get FM_ERR_MISMATCH. Call it on every
 *   rank even when only some ranks changed their mask since the last SetUp: those rebuild, and
 *   every rank checks the result. Nothing is rebuilt when no rank changed its mask.
 *   mask  the mask
 */
FMErrorCode FMMaskSetUp(FMMask mask);

/*
 * FMMaskGetSizes - sizes set on the mask. Not collective. Any output may be NULL.
 *   seqlen_q, seqlen_k, mask_heads  out: as given to FMMaskSetSizes
 */
FMErrorCode FMMaskGetSizes(FMMask mask, int *seqlen_q, int *seqlen_k, int *mask_heads);

/*
 * FMMaskGetBounds - borrowed pointers to one head's bound vectors of sample 0 (after SetUp).
 *   Not collective. Every pointer is always valid after SetUp: absent vectors are
 *   returned in their default form (lts = lte = seqlen_q, uts = ute = 0).
 *   mask, head  the mask and the mask head (0 <= head < mask_heads)
 *   present  out (may be NULL): FM_BOUND_* bits of the vectors that are meaningful
 *   causal   out (may be NULL): whether the causal triangle is added
 *   Any of lts, lte, uts, ute may be NULL when that vector is not wanted.
 */
FMErrorCode FMMaskGetBounds(FMMask mask, int head, const int32_t **lts, const int32_t **lte,
                            const int32_t **uts, const int32_t **ute, int *present, FMBool *causal);

/*
 * FMMaskGetSampleBounds - borrowed pointers to the bound vectors of one head of one sample
 *   (after SetUp; valid until the next SetUp or Destroy). Not collective.
 *   mask    a set-up mask
 *   sample  0 <= sample < mask_batch (FMMaskGetBatch), else FM_ERR_ARG_OUTOFRANGE
 *   head    0 <= head < mask_heads
 *   lts, lte, uts, ute  out (each may be NULL): the vectors, int32[seqlen_k], absent ones in
 *           their default form
 *   present out (may be NULL): FM_BOUND_* bits of the vectors that are meaningful
 *   causal  out (may be NULL): whether the causal triangle is added
 *   FMMaskGetBounds is this call for sample 0.
 */
FMErrorCode FMMaskGetSampleBounds(FMMask mask, int sample, int head, const int32_t **lts,
                                  const int32_t **lte, const int32_t **uts, const int32_t **ute,
                                  int *present, FMBool *causal);

/*
 * FMMaskIsMasked - whether query row i may NOT attend key j for a mask head of sample 0
 *   (after SetUp).
 *   Not collective. Exact, O(1); meant for tests and tools.
 *   masked  out: FM_TRUE when the entry is masked
 */
FMErrorCode FMMaskIsMasked(FMMask mask, int head, int i, int j, FMBool *masked);

/*
 * FMMaskGetDensity - the density of mask, after SetUp. Not collective.
 *   element_density  out (may be NULL): fraction of (i, j, head) entries NOT masked
 *   block_sparsity   out (may be NULL): fraction of block x block tiles fully masked
 */
FMErrorCode FMMaskGetDensity(FMMask mask, double *element_density, double *block_sparsity);

/*
 * FMMaskView - print the type, sizes, parameters, density and a coarse picture of mask to fp.
 *   Collective; rank 0 prints. fp NULL means stdout. Option: -fm_mask_view
 */
FMErrorCode FMMaskView(FMMask mask, FILE *fp);

/*
 * FMMaskSave - write the mask to the HDF5 file path as /masks/<name> (created or appended).
 *   Collective; rank 0 writes. When rank 0 fails, it returns its code and the other ranks
 *   FM_ERR_COLLECTIVE with rank 0's message. Needs HDF5 (FM_ERR_SUP otherwise).
 */
FMErrorCode FMMaskSave(FMMask mask, const char *path, const char *name);

/*
 * FMMaskLoad - read /masks/<name> from the HDF5 file path into a new, set-up mask of type
 *   "bounds" on the context ctx. Collective on ctx; every rank reads. A missing dataset, a wrong
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

/* FMPlanCreate - create a plan on the context ctx. Collective. plan out: the new plan. */
FMErrorCode FMPlanCreate(FMContext ctx, FMPlan *plan);

/*
 * Plan types (FMPlanSetType), as PETSc's VECSTANDARD chooses seq or mpi by size:
 *   FMPLANLOCAL  one rank holds every query row and key (CPU or CUDA backend); on several
 *                ranks it is refused with FM_ERR_ARG_INCOMP
 *   FMPLANCP     context parallel: query chunks spread over the ranks, K/V moved by a pruned
 *                gather or a ring (MPI, or NCCL on the CUDA backend); runs on one rank too
 * Default: FMPLANLOCAL on one rank, FMPLANCP on several.
 */
typedef const char *FMPlanType;
#define FMPLANLOCAL "local"
#define FMPLANCP    "cp"

/*
 * FMPlanSetType - choose how the plan runs. Not collective (give every rank the same type;
 *   FMPlanSetUp checks that they agree). Changing the type drops the previous type's settings
 *   (FMPlanSetPartition and the like) and needs a new FMPlanSetUp.
 *   plan  the plan
 *   type  FMPLANLOCAL or FMPLANCP; "local" on a communicator of several ranks is FM_ERR_ARG_INCOMP
 *   Option: -fm_plan_type local|cp
 * FMPlanGetType - the type (borrowed); NULL before a type is set or defaulted (FMPlanSetFromOptions,
 *   FMPlanSetUp). Not collective.
 */
FMErrorCode FMPlanSetType(FMPlan plan, FMPlanType type);
FMErrorCode FMPlanGetType(FMPlan plan, FMPlanType *type);

/* FMPlanSetMask - set the mask (the plan takes a reference). Not collective. */
FMErrorCode FMPlanSetMask(FMPlan plan, FMMask mask);

/*
 * FMPlanSetShape - the problem shape of plan; required before FMPlanSetUp (there is no default
 *   shape). Not collective.
 *   batch >= 1; heads_q a multiple of heads_kv; head_dim a multiple of 8 (on the CUDA backend at
 *   most 256: the forward runs the Hopper kernel for 64, 128 and 256, the backward for 64 and 128;
 *   other sizes a slower fallback kernel)
 *   dtype  element type of Q, K, V, O, dO, dQ, dK, dV
 *   Every tensor (batch x heads x seqlen x head_dim elements, the LSE batch x heads_q x
 *   seqlen_q floats) must fit in 2^47 bytes; the products are checked in 64 bits here (with
 *   the sequence lengths when the plan's mask is set up) and again at FMPlanSetUp
 *   (FM_ERR_ARG_OUTOFRANGE). A failed call leaves the shape unset: FMPlanSetUp then returns
 *   FM_ERR_ORDER until a call succeeds.
 *   Options: -fm_plan_batch, -fm_plan_heads, -fm_plan_kv_heads, -fm_plan_head_dim, -fm_plan_dtype
 *   (FMPlanSetFromOptions sets the shape when one of them is given or the shape was set)
 */
FMErrorCode FMPlanSetShape(FMPlan plan, int batch, int heads_q, int heads_kv, int head_dim, FMDType dtype);

/* FMPlanGetShape - the shape of plan as set (after options). Not collective. Any output may be
 *   NULL: batch, heads_q, heads_kv, head_dim, dtype as in FMPlanSetShape. */
FMErrorCode FMPlanGetShape(FMPlan plan, int *batch, int *heads_q, int *heads_kv, int *head_dim, FMDType *dtype);

/* FMPlanSetScale - the softmax scale of plan, finite and > 0 (default 1/sqrt(head_dim)).
 *   Not collective. Option: -fm_plan_scale */
FMErrorCode FMPlanSetScale(FMPlan plan, double scale);

/*
 * FMPlanGetScale - the softmax scale: as set (FMPlanSetScale, -fm_plan_scale), else the default
 *   1/sqrt(head_dim) of the current shape. Not collective.
 *   plan   the plan
 *   scale  out: the scale
 */
FMErrorCode FMPlanGetScale(FMPlan plan, double *scale);

/*
 * FMPlanSetCheckFinite - whether FMPlanForward and FMPlanBackward first scan their inputs for
 *   NaN and Inf (off by default). Not collective (give every rank the same setting: Forward
 *   and Backward check that they agree). When on, Forward scans this rank's q, k and v, and
 *   Backward also dout, before computing (on the CPU a threaded scan, on the CUDA backend a
 *   small kernel on the plan's stream, which the call then waits for); the first non-finite
 *   element is an error on every rank: FM_ERR_ARG_WRONG on the rank holding it, with a
 *   message such as "Argument 2 (q) of FMPlanForward() holds a non-finite value (nan) at batch
 *   0, head 3, row 17, col 5" (row: the global query row; for k, v the global key position),
 *   and FM_ERR_COLLECTIVE with that message on the others. Nothing is computed then. The scan
 *   reads every input once more and synchronizes the CUDA stream: meant for debugging.
 *   plan   the plan
 *   check  FM_TRUE or FM_FALSE (else FM_ERR_ARG_OUTOFRANGE)
 *   Option: -fm_check_finite
 * FMPlanGetCheckFinite - the current setting in *check. Not collective.
 */
FMErrorCode FMPlanSetCheckFinite(FMPlan plan, FMBool check);
FMErrorCode FMPlanGetCheckFinite(FMPlan plan, FMBool *check);

/*
 * FMPlanSetDeterministic - whether FMPlanBackward gives bitwise identical dQ, dK and dV from run
 *   to run on the same inputs, the same ranks and the same options (off by default). Not
 *   collective (give every rank the same setting: Forward and Backward check that they agree).
 *   May be changed at any time, also after FMPlanSetUp; it takes effect at the next
 *   FMPlanBackward. With it on, the CUDA backward adds dQ's partial sums in a fixed order
 *   instead of as they come (it may be slower), and a "cp" plan with -fm_plan_overlap 1 adds the
 *   key chunks' dQ in a fixed order rather than in the order they arrive: its own chunks, then
 *   the incoming ones in the order of its routes (while the next one is missing, one that
 *   arrived early is computed into a spare fp32 accumulator the size of this rank's dQ and
 *   added at its turn; others wait; the messages still overlap the compute). The CPU kernels,
 *   the ring schedule and the dK/dV reduction sum in a fixed order either way, so on the CPU
 *   backend only the overlapped gather changes (and the CPU result is the same for any thread
 *   count). Results need not agree bitwise across rank counts, -fm_plan_overlap settings,
 *   vector widths or machines, only from run to run. The setting concerns FMPlanBackward only.
 *   plan  the plan
 *   flag  FM_TRUE or FM_FALSE (else FM_ERR_ARG_OUTOFRANGE)
 *   Option: -fm_deterministic
 * FMPlanGetDeterministic - the current setting in *flag. Not collective.
 */
FMErrorCode FMPlanSetDeterministic(FMPlan plan, FMBool flag);
FMErrorCode FMPlanGetDeterministic(FMPlan plan, FMBool *flag);

/* FMPlanSetStream - cuda_stream: the CUDA stream (cudaStream_t) plan runs on; NULL = default
 *   stream. Not collective. */
FMErrorCode FMPlanSetStream(FMPlan plan, void *cuda_stream);

/*
 * FMPlanSetFromOptions - read every -fm_plan_* option: the shape, -fm_plan_type (which sets the
 *   default type if none was set), then the type's own options. Collective; an error on any rank
 *   is returned on every rank. The shape options (-fm_plan_batch, -fm_plan_heads, ...) override
 *   what FMPlanSetShape set: a program that allocates its tensors itself reads the shape back
 *   with FMPlanGetShape after this call (and the local sizes after FMPlanSetUp).
 *   plan  the plan
 */
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
 * Context-parallel settings. Each setter mirrors an option that FMPlanSetFromOptions reads
 * (under the plan's prefix) and overrides; call the setters first. They apply to a "cp" plan
 * (FMPLANCP) and take effect at the next FMPlanSetUp; on a "local" plan they are accepted and
 * have no effect, and the getters return the defaults. A plan without a type gets the default
 * one (FMPlanSetType) at the first setter or getter. Not collective: every rank must give the
 * same settings (FMPlanSetUp checks). Strings are copied; a bad value is FM_ERR_ARG_OUTOFRANGE
 * naming the choices.
 *
 * FMPlanSetPartition - how query chunks are given to ranks: "contiguous", "dual_chunk" or
 *   "balanced" (default: the balancer, on the predicted tile work). Option: -fm_plan_partition
 * FMPlanGetPartition - the partition (a borrowed string).
 * FMPlanSetChunk - query rows per chunk, rows >= 0 (0, the default: about seqlen_q / (4 P),
 *   rounded to the mask block). Option: -fm_plan_chunk.  FMPlanGetChunk - the value set.
 * FMPlanSetPartialCost - the balancer's cost of a partially masked tile, in full tiles, in
 *   (0, 64] (default 1). Option: -fm_plan_partial_cost.  FMPlanGetPartialCost - the value.
 * FMPlanSetRowCost - the balancer's fixed cost of every query tile, in full tiles, in [0, 1e6]
 *   (default 0). Option: -fm_plan_row_cost.  FMPlanGetRowCost - the value.
 * FMPlanSetBalanceComm - on FM_TRUE: with the "balanced" partition, the communication-aware
 *   balancer (doc/distributed.md, "The balancer's cost model"): beside the work-only partition it
 *   builds one that keeps neighbouring chunks on one node and keeps it only when, under the cost
 *   model, its predicted step is no longer and it moves no more K/V bytes across nodes (and one of
 *   the two is smaller). Default FM_FALSE. Option: -fm_plan_balance_comm.  FMPlanGetBalanceComm - the flag.
 * FMPlanSetCostModel - that cost model: tflops the attention TFLOP/s of one GPU (default 500),
 *   bw_intra and bw_inter the GB/s a rank receives inside a node (default 450) and across nodes
 *   (default 50), each in (0, 1e6]. Options: -fm_plan_tflops, -fm_plan_bw_intra, -fm_plan_bw_inter.
 *   FMPlanGetCostModel - the values (any output may be NULL).
 * FMPlanSetRoute - the K/V gather's route: "flat" (owner to rank) or "hierarchical" (default:
 *   once across nodes, then relayed inside). Option: -fm_plan_route.  FMPlanGetRoute - the route.
 * FMPlanSetVirtualNodes - route over nodes >= 0 virtual nodes of consecutive ranks (0, the
 *   default: the real topology; at most the number of ranks, checked at SetUp). Option: -fm_plan_nodes
 * FMPlanSetSchedule - "gather" (default: the pruned, routed gather) or "ring" (every K/V block
 *   visits every rank, nothing pruned). Option: -fm_plan_schedule.  FMPlanGetSchedule - the schedule.
 * FMPlanSetPrune - prune FM_TRUE (default): never move K/V chunks no local query sees. Option: -fm_plan_prune
 * FMPlanSetOverlap - overlap FM_TRUE (default): compute on arrived chunks while others are in flight.
 *   Option: -fm_plan_overlap
 * FMPlanSetTransport - the CUDA backend's K/V transport: "nccl" (a GPU per rank), "mpi" (staged
 *   through pinned host memory, or device buffers: FMPlanSetGPUAwareMPI) or "auto" (default: nccl
 *   when built with NCCL and no two ranks share a GPU). Option: -fm_plan_transport
 * FMPlanSetGPUAwareMPI - with the mpi transport, hand device buffers to MPI: "1" (the MPI is
 *   CUDA-aware), "0" (stage) or "auto" (default: MPIX_Query_cuda_support() on every rank).
 *   Option: -fm_gpu_aware_mpi
 * FMPlanSetStepChunks - the CUDA backend's exchange steps carry at most chunks >= 0 K/V chunks
 *   per peer (0, the default: one step per peer and hop). Option: -fm_plan_step_chunks
 * FMPlanSetTrace - record every rank's events of each forward and backward in the HDF5 file
 *   path (NULL or "": no trace, the default) and, when view is FM_TRUE, print the summary.
 *   Options: -fm_trace path, -fm_trace_view
 */
FMErrorCode FMPlanSetPartition(FMPlan plan, const char *partition);
FMErrorCode FMPlanGetPartition(FMPlan plan, const char **partition);
FMErrorCode FMPlanSetChunk(FMPlan plan, int rows);
FMErrorCode FMPlanGetChunk(FMPlan plan, int *rows);
FMErrorCode FMPlanSetPartialCost(FMPlan plan, double cost);
FMErrorCode FMPlanGetPartialCost(FMPlan plan, double *cost);
FMErrorCode FMPlanSetRowCost(FMPlan plan, double cost);
FMErrorCode FMPlanGetRowCost(FMPlan plan, double *cost);
FMErrorCode FMPlanSetBalanceComm(FMPlan plan, FMBool on);
FMErrorCode FMPlanGetBalanceComm(FMPlan plan, FMBool *on);
FMErrorCode FMPlanSetCostModel(FMPlan plan, double tflops, double bw_intra, double bw_inter);
FMErrorCode FMPlanGetCostModel(FMPlan plan, double *tflops, double *bw_intra, double *bw_inter);
FMErrorCode FMPlanSetRoute(FMPlan plan, const char *route);
FMErrorCode FMPlanGetRoute(FMPlan plan, const char **route);
FMErrorCode FMPlanSetVirtualNodes(FMPlan plan, int nodes);
FMErrorCode FMPlanSetSchedule(FMPlan plan, const char *schedule);
FMErrorCode FMPlanGetSchedule(FMPlan plan, const char **schedule);
FMErrorCode FMPlanSetPrune(FMPlan plan, FMBool prune);
FMErrorCode FMPlanSetOverlap(FMPlan plan, FMBool overlap);
FMErrorCode FMPlanSetTransport(FMPlan plan, const char *transport);
FMErrorCode FMPlanSetGPUAwareMPI(FMPlan plan, const char *aware);
FMErrorCode FMPlanSetStepChunks(FMPlan plan, int chunks);
FMErrorCode FMPlanSetTrace(FMPlan plan, const char *path, FMBool view);

/*
 * FMPlanSetUp - check the mask against the shape (mask heads 1 or heads_kv), set the default
 *   type if none was set (FMPlanSetType), decide which query rows and keys this rank owns, and
 *   prepare the backend. Collective; every rank must give the same type, and what a type does
 *   not support is refused here on every rank count alike (FM_ERR_SUP: fp32 on the CUDA
 *   backend, which computes bf16 and fp16). Errors on any rank are returned on every rank.
 *   FM_ERR_ORDER without a successful FMPlanSetShape (or FMPlanSetMask, FMContextSetUp,
 *   FMMaskSetUp). Before any other message the ranks agree on the shape, the scale, the
 *   mask's sizes and hash and the backend: a difference is FM_ERR_MISMATCH on every rank,
 *   naming the field and its values ("batch is 1 on rank 0 and 2 on rank 3"). Every
 *   collective call of a plan (SetUp, Forward, Backward, Scatter, Gather) starts with such an
 *   agreement, so ranks in different calls also get FM_ERR_MISMATCH instead of a hang.
 *   Calling it again after the mask changed (FMMaskSetBounds, a builder setter or a new seed,
 *   then FMMaskSetUp) is an update when the shape, the mask's sizes, heads, batch and block, the
 *   backend, the type's settings and the communicator are those of the last successful set-up
 *   (decided on every rank alike): what depends only on them is kept (a "cp" plan's chunk
 *   layout and topology; on the CUDA backend its streams, NCCL connections and device buffers
 *   while large enough) and only what depends on the bounds is recomputed (partition, needed
 *   K/V, route, stage masks), with the results of a fresh plan. Anything else, or a set-up
 *   after a failed one, is a full set-up. The local rows and keys may move with the partition:
 *   scatter the inputs again. See doc/distributed.md, "Re-planning every step".
 *   On the CUDA backend an update writes the new mask into the device buffers it already has:
 *   a "local" plan queues that copy on the plan's stream (after the forward and backward queued
 *   there, which still read the old mask; before the next ones) and returns without waiting; a
 *   "cp" plan waits for its streams first and for the copy before it returns. A plan whose
 *   stream was changed (FMPlanSetStream) since waits for the old stream where it must.
 *   The Hopper forward's schedule (-fm_sm90_schedule; auto by default) is fixed here from the
 *   mask, about 10-20 us (doc/design.md, "The GPU forward"): a later change of the option takes
 *   effect at the next set-up; FMPlanView prints the choice and why.
 *   plan  the plan
 */
FMErrorCode FMPlanSetUp(FMPlan plan);

/*
 * FMPlanGetLocalRows - the query rows this rank owns in plan (after SetUp). Not collective.
 *   nlocal       out: number of local rows
 *   global_rows  out (may be NULL): borrowed array of nlocal global row indices; the
 *                local tensors hold these rows in this order
 *   After every FMPlanSetUp (a re-plan for new bounds included) query again: the rows, and
 *   their count, change with the mask; the array stays valid until the next SetUp or Destroy.
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
 *   A rank that holds no rows (nlocal = 0) may pass NULL for q and o (and lse), one that holds
 *   no keys (nkeys = 0) NULL for k and v; it still takes part in the call.
 *   On the CUDA backend every tensor is device memory and the call is asynchronous on the
 *   plan's stream (FMPlanSetStream): synchronize it before reading o and lse. Over several
 *   ranks the K/V gather runs on a second stream (NCCL, or MPI through pinned host memory:
 *   -fm_plan_transport) overlapped with the kernels; with -fm_plan_transport mpi the call
 *   returns after the last message of the gather. -fm_gpu_aware_mpi auto|0|1 (default auto:
 *   MPIX_Query_cuda_support() on every rank) lets the mpi transport send and receive the
 *   device buffers directly, without host staging.
 *   The ranks first agree on the plan's shape, scale and mask (see FMPlanSetUp): a rank that
 *   changed its scale after FMPlanSetUp gives FM_ERR_MISMATCH on every rank.
 *   Non-finite inputs give visibly non-finite outputs: a row whose visible scores include NaN
 *   or +Inf (a NaN or Inf in q or k, or a finite product that overflows fp32) gets NaN in its
 *   O and LSE, never the O = 0, LSE = -inf of a fully masked row; the other rows are not
 *   touched (but a NaN or Inf in v reaches every row of a tile that holds its key, since
 *   0 x Inf is NaN). A score of -Inf counts as weight 0, as a masked key does. With
 *   FMPlanSetCheckFinite (-fm_check_finite) such inputs are an error instead (FM_ERR_ARG_WRONG
 *   naming the tensor and the element, on every rank) and nothing is computed.
 */
FMErrorCode FMPlanForward(FMPlan plan, const void *q, const void *k, const void *v, void *o, float *lse);

/*
 * FMPlanBackward - gradients of the forward pass. Collective on the plan.
 *   q, k, v, o, lse   as given to / returned by FMPlanForward
 *   dout              dO, same layout as o
 *   dq, dk, dv        out: same layouts as q, k, v (dtype); on several ranks dk, dv hold the
 *                     complete gradients of this rank's key positions (partials from the
 *                     ranks that gathered them are reduced back here)
 *   On the CUDA backend (device memory) the backward runs on the GPU (the Hopper kernel for
 *   head_dim 64 and 128 on sm_90, a SIMT kernel otherwise). A "local" plan runs it
 *   asynchronously on the plan's stream, like the forward. A "cp" plan gathers K/V again as its
 *   forward does, runs one piece per stage on the plan's stream and reduces the dK/dV partials
 *   to their owners over MPI through pinned host memory; it returns when they are reduced.
 *   With FMPlanSetDeterministic the results are the same bytes from run to run.
 *   A row whose LSE is NaN (a non-finite forward) gives NaN in its dQ and in the dK, dV of the
 *   keys it sees; fully masked rows (LSE -inf) contribute nothing. Inside the (batch, kv head)
 *   slice of a non-finite element of q, k, v or dout, 0 x NaN can also reach dK, dV or dQ
 *   elements that only share a tile with it (keys the row does not see included), as in every
 *   tiled kernel; every gradient outside that slice stays finite and exact. With
 *   FMPlanSetCheckFinite, q, k, v and dout are scanned first, as in FMPlanForward.
 */
FMErrorCode FMPlanBackward(FMPlan plan, const void *q, const void *k, const void *v, const void *o,
                           const float *lse, const void *dout, void *dq, void *dk, void *dv);

/*
 * FMPlanGetLocalKeys - the key positions of plan whose K and V this rank holds (context parallelism).
 *   Not collective. On several ranks, FMPlanForward/Backward take k, v (and return dk, dv)
 *   for these positions only, in this order: [batch][nkeys][heads_kv][head_dim]. The key
 *   axis is cut into as many chunks as the query axis (kchunk = ceil(seqlen_k * chunk /
 *   seqlen_q) columns each, equal to the query chunk when seqlen_q = seqlen_k) and key chunk
 *   c lives with query chunk c. A "local" plan holds all seqlen_k positions, in order.
 *   nkeys        out: number of local key positions
 *   global_keys  out (may be NULL): borrowed array of nkeys global key indices
 *   As for FMPlanGetLocalRows: query again after every FMPlanSetUp (the keys and their count
 *   change with the partition); valid until the next SetUp or Destroy.
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
 *   Argument errors on any rank are returned on every rank; kind and root must be the same on
 *   every rank (else FM_ERR_MISMATCH naming the argument, on every rank).
 *   global and local are host memory on every backend (the data moves over MPI): on the CUDA
 *   backend copy the local part to the device yourself before FMPlanForward.
 */
FMErrorCode FMPlanScatter(FMPlan plan, FMPlanTensor kind, int root, const void *global, void *local);

/*
 * FMPlanGather - the inverse of FMPlanScatter: assemble the global tensor on root.
 *   Collective on the plan, after FMPlanSetUp.
 *   kind, root  as in FMPlanScatter
 *   local   this rank's part, in the plan's local order (may be NULL where this rank's local
 *           count is 0)
 *   global  out: the global tensor (significant on root only; may be NULL elsewhere)
 *   Argument errors on any rank are returned on every rank; kind and root must match (as in
 *   FMPlanScatter).
 */
FMErrorCode FMPlanGather(FMPlan plan, FMPlanTensor kind, int root, const void *local, void *global);

/* FMPlanGetFlops - fwd_flops out: the forward FLOPs of plan under the FlashMask convention
 *   4*B*H*Sq*Sk*d*(1-rho), rho the mask's block sparsity (FMMaskGetDensity: the fraction of
 *   block x block tiles fully masked), after SetUp. Not collective. */
FMErrorCode FMPlanGetFlops(FMPlan plan, double *fwd_flops);

/* FMPlanView - print the plan (its type first) to fp (NULL means stdout). Collective; rank 0
 *   prints. Option: -fm_plan_view */
FMErrorCode FMPlanView(FMPlan plan, FILE *fp);

/*
 * FMPlanDestroy - drop a reference; frees at zero and sets *plan = NULL. Collective: every
 *   rank of the plan's communicator destroys it at the same point of the program. A rank that
 *   destroys its plan early, or exits, while the others still call FMPlanForward, Backward,
 *   Scatter or Gather, leaves them waiting in MPI (or NCCL) for messages that never come: MPI
 *   has no portable way to detect a peer that left, so this is the one misuse the library
 *   cannot turn into an error. (A rank that is killed makes the MPI launcher end the job.)
 *   plan  the plan (NULL or *plan NULL: nothing happens)
 */
FMErrorCode FMPlanDestroy(FMPlan *plan);

#ifdef __cplusplus
}
#endif
#endif
