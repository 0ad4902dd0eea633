/*
 * fmimpl.h - private definitions shared by the library's sources: the object header,
 * error macros, the options/log internals, and the private structs of the objects.
 * Not installed.
 */
#ifndef FLASHMASK_PRIVATE_FMIMPL_H
#define FLASHMASK_PRIVATE_FMIMPL_H

#include <flashmask.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <flashmask/private/fmtile.h>
#include <flashmask/private/fmkernels.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---------------- errors ---------------- */
/* Raise an error: records and (per the handler) prints the message, returns code. */
FMErrorCode FMError_Private(MPI_Comm comm, const char *file, const char *func, int line, FMErrorCode code,
                            const char *fmt, ...) __attribute__((format(printf, 6, 7)));
/* Raise FM_ERR_MPI for an MPI error code, with MPI's text and the failing expression. */
FMErrorCode FMMPIError_Private(int mpierr, const char *expr, const char *file, const char *func, int line);
/* The rank's last error message (FMGetLastErrorMessage) set back to msg: a phase that goes on
   after its first failure keeps that failure's message (FM_ERRMSG_MAX bytes) and puts it back
   before the ranks agree, so a later error on the way does not replace what the others are told. */
#define FM_ERRMSG_MAX 1024
void FMErrorMessageSet_Private(const char *msg);

/* FMCall(expr) and its traceback, FMErrorTraceback, are public (flashmask.h): one definition for
   the library and for applications. */

/* FMCheck(cond, comm, code, fmt, ...): user-input check, always compiled in. */
#define FMCheck(cond, comm, code, ...)                                               \
  do {                                                                               \
    if (!(cond)) return FMError_Private((comm), __FILE__, __func__, __LINE__, (code), __VA_ARGS__); \
  } while (0)

/* FMRaise(comm, code, fmt, ...): unconditional error. */
#define FMRaise(comm, code, ...) return FMError_Private((comm), __FILE__, __func__, __LINE__, (code), __VA_ARGS__)

/* Point-to-point of any length (src/sys/mpiutil.c); MPI error codes, wrap in FMCallMPI. */
int FMMPIIsend_Private(const void *buf, size_t count, MPI_Datatype t, int dest, int tag, MPI_Comm comm, MPI_Request *req);
int FMMPIIrecv_Private(void *buf, size_t count, MPI_Datatype t, int src, int tag, MPI_Comm comm, MPI_Request *req);
int FMMPIRecv_Private(void *buf, size_t count, MPI_Datatype t, int src, int tag, MPI_Comm comm, MPI_Status *st);
double FMMPIStatusBytes_Private(const MPI_Status *st, MPI_Datatype t);
void FMMPISetMaxCount_Private(size_t n);
/* 1 when MPI says at run time that it takes CUDA device pointers (MPIX_Query_cuda_support), else 0; local. */
int FMMPICUDAAware_Private(void);

/* FMCallMPI(expr): wrap an MPI call. */
#define FMCallMPI(expr)                                                              \
  do {                                                                               \
    int fm_mpierr_ = (expr);                                                         \
    if (fm_mpierr_ != MPI_SUCCESS) return FMMPIError_Private(fm_mpierr_, #expr, __FILE__, __func__, __LINE__); \
  } while (0)

/* FMMalloc(n, &p) / FMCalloc(n, &p): allocate n elements of *p's type; FM_ERR_MEM on failure. */
FMErrorCode FMMalloc_Private(size_t bytes, int zero, void **p, const char *file, const char *func, int line);
#define FMMalloc(n, pp) FMMalloc_Private((size_t)(n) * sizeof(**(pp)), 0, (void **)(pp), __FILE__, __func__, __LINE__)
#define FMCalloc(n, pp) FMMalloc_Private((size_t)(n) * sizeof(**(pp)), 1, (void **)(pp), __FILE__, __func__, __LINE__)
/* FMFree(p): free and NULL. */
#define FMFree(p) do { free(p); (p) = NULL; } while (0)
FMErrorCode FMStrdup(const char *s, char **out);

/*
 * FMAgree_Private - collective agreement on success: every rank passes its local error
 *   code; if any rank failed, every rank that did not fail raises FM_ERR_COLLECTIVE naming
 *   the failing rank (the one with the highest code, FM_ERR_COLLECTIVE counting lowest), its
 *   code and its message, and ranks that
 *   failed return their own code.
 *   Use after each local step of a collective set-up, so one rank's failure never hangs
 *   the others.
 */
FMErrorCode FMAgree_Private(MPI_Comm comm, FMErrorCode local, const char *file, const char *func, int line);
#define FMAgree(comm, expr)                                                          \
  do {                                                                               \
    FMErrorCode fm_loc_ = (expr);                                                    \
    FMErrorCode fm_all_ = FMAgree_Private((comm), fm_loc_, __FILE__, __func__, __LINE__); \
    if (fm_all_ != FM_SUCCESS) return FMErrorTraceback(__FILE__, __func__, __LINE__, fm_all_); \
  } while (0)

/*
 * The goto-to-cleanup idiom (HDF5's HGOTO_ERROR ... done: shape). A function that owns
 * resources declares `FMErrorCode ierr = FM_SUCCESS;`, ends with
 *     cleanup:
 *       ... free what was taken (every pointer starts NULL) ...
 *       return ierr;
 * and uses these macros in its body: on error each sets ierr (adding a traceback line or
 * raising the message) and jumps to cleanup.
 *   FMCallGoto(expr)                    expr returns FMErrorCode
 *   FMCheckGoto(cond, comm, code, ...)  user-input or state check, message as FMCheck's
 *   FMCallMPIGoto(expr)                 expr returns an MPI error code
 *   FMAgreeGoto(comm)                   collective: every rank agrees on its ierr (see
 *                                       FMAgree_Private); any rank's failure sends all to cleanup
 * FMCallCUDAGoto is in fmkernels.h, next to FMCallCUDA.
 */
#define FMCallGoto(expr)                                                             \
  do {                                                                               \
    ierr = (expr);                                                                   \
    if (ierr != FM_SUCCESS) { ierr = FMErrorTraceback(__FILE__, __func__, __LINE__, ierr); goto cleanup; } \
  } while (0)
#define FMCheckGoto(cond, comm, code, ...)                                           \
  do {                                                                               \
    if (!(cond)) { ierr = FMError_Private((comm), __FILE__, __func__, __LINE__, (code), __VA_ARGS__); goto cleanup; } \
  } while (0)
#define FMRaiseGoto(comm, code, ...)                                                 \
  do { ierr = FMError_Private((comm), __FILE__, __func__, __LINE__, (code), __VA_ARGS__); goto cleanup; } while (0)
#define FMCallMPIGoto(expr)                                                          \
  do {                                                                               \
    int fm_mpierr_ = (expr);                                                         \
    if (fm_mpierr_ != MPI_SUCCESS) { ierr = FMMPIError_Private(fm_mpierr_, #expr, __FILE__, __func__, __LINE__); goto cleanup; } \
  } while (0)
#define FMAgreeGoto(comm)                                                            \
  do {                                                                               \
    ierr = FMAgree_Private((comm), ierr, __FILE__, __func__, __LINE__);              \
    if (ierr != FM_SUCCESS) goto cleanup;                                            \
  } while (0)
/* FMAgreeCode(comm, local): the agreed code of a local code (FMAgree_Private at this line). */
#define FMAgreeCode(comm, local) FMAgree_Private((comm), (local), __FILE__, __func__, __LINE__)

/*
 * Agreement helpers (src/sys/agree.c); collective on comm, never hang on bad input.
 * FMAgreeSame_Private - every rank passes a value that must be equal on all ranks (a hash of
 *   the scalars of a collective call, say); if any rank's differs, every rank raises
 *   FM_ERR_MISMATCH naming `what` and the values on the lowest and highest ranks that differ.
 * FMAgreeRootOutcome_Private - root's code reaches every rank: root returns its own code, the
 *   others FM_ERR_COLLECTIVE when root failed, with root's code and message in theirs (for steps
 *   only root does, like writing a file).
 * FMAgreeFirstError_Private - the lowest rank whose ierr is an error of its own (not
 *   FM_ERR_COLLECTIVE; if there is none, the lowest failing rank) returns it; every other rank
 *   returns FM_ERR_COLLECTIVE with that rank's code and message (FM_SUCCESS everywhere when no
 *   rank failed): for checks that any rank may fail, whose message must reach the others.
 * FMAgreeAny_Private - *any = 1 on every rank when flag is nonzero on at least one rank, else 0
 *   (a logical OR; for "does any rank need to redo this collective step?").
 */
FMErrorCode FMAgreeSame_Private(MPI_Comm comm, uint64_t value, const char *what, const char *file, const char *func, int line);
#define FMAgreeSame(comm, value, what) FMAgreeSame_Private((comm), (value), (what), __FILE__, __func__, __LINE__)
FMErrorCode FMAgreeRootOutcome_Private(MPI_Comm comm, int root, FMErrorCode ierr, const char *file, const char *func, int line);
#define FMAgreeRootOutcome(comm, root, ierr) FMAgreeRootOutcome_Private((comm), (root), (ierr), __FILE__, __func__, __LINE__)
FMErrorCode FMAgreeFirstError_Private(MPI_Comm comm, FMErrorCode ierr, const char *file, const char *func, int line);
#define FMAgreeFirstError(comm, ierr) FMAgreeFirstError_Private((comm), (ierr), __FILE__, __func__, __LINE__)
FMErrorCode FMAgreeAny_Private(MPI_Comm comm, int flag, int *any, const char *file, const char *func, int line);
#define FMAgreeAny(comm, flag, any) FMAgreeAny_Private((comm), (flag), (any), __FILE__, __func__, __LINE__)
/*
 * The entry agreement of a collective call (agree.c), its first message on the object's
 * communicator:
 *   FMAgreeField f[] = {{"seqlen_q", FM_AGREE_FIELD_INT, plan->mask->seqlen_q, 0}, ...};
 *   FMCall(FMAgreeCall_Private(comm, FM_CALL_PLAN_SETUP, local_ierr, n, f));
 * One allreduce of a fixed size whatever the call, so ranks in different calls on objects of one
 * communicator (a mask and a plan of one context share it) meet in it too, instead of pairing
 * unlike messages and failing in MPI or hanging. Every rank returns, in this order of
 * precedence: FM_ERR_MISMATCH when the ranks are in different calls ("FMMaskSetUp() on rank 0
 * and FMPlanSetUp() on rank 1"); local_ierr where it is an error (raised by the caller),
 * FM_ERR_COLLECTIVE on the others, naming the failing rank with the highest error code (the
 * lowest such rank) and that code; FM_ERR_MISMATCH naming the
 * first field that differs, with its values on the lowest ranks holding its minimum and maximum
 * ("FMPlanSetUp(): seqlen_q is 4096 on rank 0 and 2048 on rank 1"). At most
 * FM_AGREE_MAX_FIELDS fields. One rank: returns local_ierr, no message.
 * Every collective call that communicates opens with it (FMCallName_Private lists them); one
 * that does not (FMMaskView, FMMaskCreate) does not, so that it never waits for the others.
 */
typedef enum {
  FM_CALL_PLAN_SETUP = 1, FM_CALL_PLAN_FORWARD, FM_CALL_PLAN_BACKWARD, FM_CALL_PLAN_SCATTER, FM_CALL_PLAN_GATHER, FM_CALL_PLAN_VIEW,
  FM_CALL_PLAN_SETFROMOPTIONS, FM_CALL_MASK_SETUP, FM_CALL_MASK_SAVE, FM_CALL_MASK_LOAD, FM_CALL_MASK_SETFROMOPTIONS,
  FM_CALL_CONTEXT_SETUP, FM_CALL_CONTEXT_SETFROMOPTIONS, FM_CALL_COUNT
} FMCallId;
typedef enum { FM_AGREE_FIELD_INT = 0, FM_AGREE_FIELD_REAL, FM_AGREE_FIELD_HASH } FMAgreeFieldKind;
typedef struct {
  const char *name;
  FMAgreeFieldKind kind;
  long long i; /* INT and HASH (a uint64_t cast) */
  double r;    /* REAL: compared bit for bit */
} FMAgreeField;
#define FM_AGREE_MAX_FIELDS 16
FMErrorCode FMAgreeCall_Private(MPI_Comm comm, FMCallId call, FMErrorCode local_ierr, int n, const FMAgreeField *f);
/* FMCallName_Private - "FMPlanSetUp" and so on for an FMCallId; "another call" otherwise. */
const char *FMCallName_Private(long long call);
/*
 * Fault sites (src/sys/faults.c), a testing aid: -fm_debug_fail site[:rank[:count]] (read by
 * FMInitialize) arms one site for one rank of MPI_COMM_WORLD (default 0), failing its first
 * count hits (default 1; 0: every hit). FMFaultAt(site) is FM_SUCCESS, at the cost of one
 * branch, unless that site is armed for this rank; then it raises the site's error (its code
 * and a message naming the site) and returns it. Sites are named in faults.c's table (an
 * unknown name is FM_ERR_OPT at FMFaultArm_Private). Not collective.
 *   FMFaultArm_Private(spec)  arm spec (NULL or "": disarm)
 *   FMFaultSiteCount_Private / FMFaultSiteName_Private(i)  the table, for -help and the tests
 */
extern int FMFaultArmed_Private;
FMErrorCode FMFaultArm_Private(const char *spec);
FMErrorCode FMFaultAt_Private(const char *site, const char *file, const char *func, int line);
int FMFaultSiteCount_Private(void);
const char *FMFaultSiteName_Private(int i);
#define FMFaultAt(site) (FMFaultArmed_Private ? FMFaultAt_Private((site), __FILE__, __func__, __LINE__) : FM_SUCCESS)
/* FMLogTimed_Private - run body(obj) as the -fm_log_view event named event (registered on first
   use); its error is returned after the event ends. Not collective by itself. */
FMErrorCode FMLogTimed_Private(const char *event, FMErrorCode (*body)(void *), void *obj);

/* FMHash_Private - a 64-bit hash of n bytes continuing from h (start with FM_HASH_INIT): FNV-1a
   byte by byte for short inputs; inputs of 32 bytes or more go 8-byte words at a time in four
   lanes (about 1 ms per 16 MB), folded into h. The same bytes give the same value on every rank. */
#define FM_HASH_INIT 0xcbf29ce484222325ULL
uint64_t FMHash_Private(uint64_t h, const void *p, size_t n);

/* ---------------- object header ---------------- */
typedef enum { FM_CLASSID_CONTEXT = 0x46D001, FM_CLASSID_MASK = 0x46D002, FM_CLASSID_PLAN = 0x46D003 } FMClassId;

typedef struct {
  FMClassId   classid;
  const char *class_name;   /* "FMContext", ... */
  MPI_Comm    comm;         /* borrowed from the context (the context owns its dup) */
  int         refct;
  char       *type_name;    /* owned; may be NULL */
  char       *prefix;       /* owned options prefix (FM<Class>SetOptionsPrefix); may be NULL */
  int         setupcalled;
} FMObjectHeader;

/*
 * FMHeaderCreate - the common start of every Create: fill obj's header (class id, name,
 *   borrowed communicator, one reference). obj points at a zeroed object whose first member
 *   is the header. FMHeaderDestroy frees what the header owns (type name, prefix).
 */
void FMHeaderCreate(void *obj, FMClassId classid, const char *class_name, MPI_Comm comm);
void FMHeaderDestroy(void *obj);
/*
 * The options-prefix functions every class shares (its public FM<Class>SetOptionsPrefix,
 * GetOptionsPrefix and SetFromOptions call these with its class id, checked as argument 1):
 * FMHeaderSetOptionsPrefix sets (copies) or clears (NULL) the prefix; FMHeaderGetOptionsPrefix
 * returns it (borrowed); FMHeaderSetFromOptions runs the class's lookups, body(obj), with the
 * prefix pushed (FMOptionsPushPrefix_Private), and agrees on body's code over the object's
 * communicator (collective: a failure on one rank is FM_ERR_COLLECTIVE on the others).
 */
FMErrorCode FMHeaderSetOptionsPrefix(void *obj, FMClassId cid, const char *prefix);
FMErrorCode FMHeaderGetOptionsPrefix(void *obj, FMClassId cid, const char **prefix);
FMErrorCode FMHeaderSetFromOptions(void *obj, FMClassId cid, FMErrorCode (*body)(void *obj));

/* FMValidHeader(obj, CLASSID, argnum): NULL and class check for a public handle argument. */
#define FMValidHeader(obj, cid, argnum)                                              \
  do {                                                                               \
    FMCheck((obj) != NULL, MPI_COMM_SELF, FM_ERR_ARG_NULL, "Null object: argument %d", (argnum)); \
    FMCheck(((FMObjectHeader *)(obj))->classid == (cid), MPI_COMM_SELF, FM_ERR_ARG_WRONG, \
            "Wrong type of object: argument %d is not a valid %s", (argnum), #cid);  \
  } while (0)
#define FMValidPointer(p, argnum)                                                    \
  FMCheck((p) != NULL, MPI_COMM_SELF, FM_ERR_ARG_NULL, "Null pointer: argument %d (%s)", (argnum), #p)
/*
 * FMHeaderRelease(pobj, cid, obj): the common start of every Destroy. Accepts a NULL handle,
 *   checks the class, NULLs the caller's handle, drops a reference, and returns FM_SUCCESS from
 *   the calling function unless that was the last reference; then obj holds the object to free.
 */
#define FMHeaderRelease(pobj, cid, obj)                                              \
  do {                                                                               \
    FMValidPointer(pobj, 1);                                                         \
    (obj) = *(pobj);                                                                 \
    if (!(obj)) return FM_SUCCESS;                                                   \
    FMValidHeader((obj), cid, 1);                                                    \
    *(pobj) = NULL;                                                                  \
    if (--(obj)->hdr.refct > 0) return FM_SUCCESS;                                   \
  } while (0)
#define FMCheckSetUp(obj, what)                                                      \
  FMCheck(((FMObjectHeader *)(obj))->setupcalled, ((FMObjectHeader *)(obj))->comm, FM_ERR_ORDER, \
          "Must call %sSetUp() first", (what))

/* ---------------- options and logging internals ---------------- */
/*
 * FMOptionsPushPrefix_Private / FMOptionsPopPrefix_Private - while a prefix is pushed, every
 *   lookup of "-name" (public or private getter) reads "-<prefix>name" instead, and -help lists
 *   that name: an object's SetFromOptions pushes its header's prefix (NULL pushes none) around
 *   its lookups, as PETSc's PetscOptionsBegin does. Nesting depth at most 8. Not collective.
 */
#define FM_OPTIONS_PREFIX_MAX 63 /* longest options prefix, in characters */
FMErrorCode FMOptionsPushPrefix_Private(const char *prefix);
FMErrorCode FMOptionsPopPrefix_Private(void);
/* Object option lookups: same as the public ones; -help lists them with the object name. */
FMErrorCode FMOptionsGetEnum_Private(const char *name, const char *help, const char *const *list, int *value, FMBool *set);
/* FMOptionsGetView_Private - whether -name (e.g. -fm_mask_view) was given. */
FMErrorCode FMOptionsGetView_Private(const char *name, const char *help, FMBool *set);
/* Initialize/free the options and log internals (called by FMInitialize/FMFinalize). */
FMErrorCode FMOptionsInitialize_Private(int argc, char **argv, const char *file);
/* -options_file's help text: read by FMOptionsInitialize_Private, listed by FMInitialize */
#define FM_OPTIONS_FILE_HELP "read options from this file (the command line and FM_OPTIONS override it)"
FMErrorCode FMOptionsFinalize_Private(void);
FMErrorCode FMLogInitialize_Private(void);
/* FMLogViewRequested_Private - *on: whether -fm_log_view asks for the performance summary at
   FMFinalize (read now, as FMFinalize will read it). The plans' FLOP counts, a pass over a new
   mask's bounds, are made only then. Not collective. */
FMErrorCode FMLogViewRequested_Private(FMBool *on);
FMErrorCode FMLogFinalize_Private(void);
/*
 * FMInitSettings - the library-wide settings read once from the options database at
 *   FMInitialize (instead of environment variables read deep in the code), passed down from
 *   here as parameters. Zeroed before FMInitialize.
 *   trace_serial  -fm_trace_serial: write -fm_trace files through rank 0 even with parallel
 *                 HDF5 (the default of each recorder; FMTraceSetSerial_Private overrides it)
 */
typedef struct {
  FMBool trace_serial;
} FMInitSettings;
const FMInitSettings *FMGetInitSettings_Private(void);

/* Whether FMInitialize was called; objects refuse to be created otherwise. */
int FMIsInitialized_Private(void);
#define FMCheckInitialized()                                                         \
  FMCheck(FMIsInitialized_Private(), MPI_COMM_SELF, FM_ERR_ORDER, "Must call FMInitialize() first")

/* Wall clock in seconds (src/sys/util.c). */
double FMTime(void);

/*
 * FMBackendNames / FMDTypeNames - the one name table of each enum (util.c), indexed by the enum
 *   value and NULL-terminated: FMBackendName/FMDTypeName print from them and the options
 *   parser (FMOptionsGetEnum_Private) reads -fm_backend (and -fm_plan_dtype) with them.
 */
extern const char *const FMBackendNames[];
extern const char *const FMDTypeNames[];

/* Printing from rank 0 of comm, and ordered per-rank printing (collective). */
FMErrorCode FMPrintf(MPI_Comm comm, FILE *fp, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
FMErrorCode FMSynchronizedPrintf(MPI_Comm comm, FILE *fp, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* ---------------- context ---------------- */
typedef struct {
  int rank, node, node_rank, node_size, package, numa, ncores;
  int npus;               /* hardware threads (hwloc PUs) of the binding, >= 1 */
  int gpu;                /* CUDA device ordinal, -1 if none */
  char gpu_busid[32];     /* "0000:19:00.0" or "" */
  char gpu_name[64];
  char hostname[64];
} FMRankInfo;

struct _p_FMContext {
  FMObjectHeader hdr;
  MPI_Comm comm;          /* owned duplicate */
  int rank, size;
  MPI_Comm nodecomm;      /* ranks sharing memory */
  int node_rank, node_size, nnodes, node;
  MPI_Comm crosscomm;     /* ranks with the same node_rank across nodes */
  FMBackend backend_req, backend;
  int nthreads;           /* as set (FMContextSetNumThreads, -fm_num_threads); 0: the default */
  int threads;            /* CPU threads per rank in use, resolved at SetUp (see FMContextSetNumThreads) */
  int threads_env;        /* OMP_NUM_THREADS's count when SetUp capped it at the binding's share, else 0 */
  int binding_ranks;      /* the node's ranks bound to this rank's hardware threads (itself included) */
  uint64_t cpuset_hash;   /* FMHash_Private of this rank's binding (hwloc cpuset), 0 without hwloc */
  int device;             /* chosen CUDA device, -1 if none */
  int ngpus;              /* visible GPUs on this node */
  int gpu_sm;             /* compute capability * 10 of the chosen device, 0 if none */
  FMRankInfo self;
  FMRankInfo *all;        /* [size], filled at SetUp */
  void *topology;         /* hwloc_topology_t, or NULL */
  void *nccl;             /* NCCL communicators (src/context/nccl.c), created on first use */
  double nccl_timeout;    /* -fm_nccl_timeout: seconds an NCCL exchange may take before it is aborted (0: no limit, no wait) */
  FMKernelOptions kopts;  /* -fm_cuda_fallback, -fm_sm90_vdesc_swap, -fm_cpu_* (FMContextSetFromOptions) */
};

/*
 * FMContextGetNCCL_Private - the context's NCCL communicators (ncclComm_t, as void *): all
 *   ranks, node-local ranks, and ranks with the same node-local index. Collective on the
 *   first call (bootstrap over ctx->comm); FM_ERR_SUP without NCCL or without a GPU.
 *   Any output may be NULL.
 */
FMErrorCode FMContextGetNCCL_Private(FMContext ctx, void **world, void **node, void **cross);
FMErrorCode FMContextDestroyNCCL_Private(FMContext ctx);
FMErrorCode FMContextAbortNCCL_Private(FMContext ctx); /* after a failed exchange: abort, re-bootstrap on next use */
long FMContextNCCLGeneration_Private(FMContext ctx);    /* id of the current communicators, new per bootstrap */
/*
 * FMContextNCCLWait_Private - wait on the host until the CUDA event ev (recorded after NCCL
 *   operations of the context's communicators) completes, polling ncclCommGetAsyncError meanwhile
 *   and stopping after ctx->nccl_timeout seconds (> 0; 0: no limit). Not collective. Returns
 *   FM_ERR_NCCL naming what (a phrase: "the K/V exchange of the forward") when NCCL reports an
 *   asynchronous error or the time runs out; the caller must then agree with the other ranks and
 *   abort the communicators (FMContextAbortNCCL_Private), which ends the operations left waiting.
 */
FMErrorCode FMContextNCCLWait_Private(FMContext ctx, void *ev, const char *what);

/* ---------------- mask ---------------- */
struct _p_FMMask {
  FMObjectHeader hdr;
  FMContext ctx;
  int seqlen_q, seqlen_k, mask_heads;
  int mask_batch;         /* samples with their own bounds: 1 (shared by every sample) or the plan's batch */
  int causal;             /* add the bottom-right aligned causal triangle */
  int present;            /* FM_BOUND_* bits */
  int32_t *bnd[4];        /* lts, lte, uts, ute: [mask_batch][mask_heads][seqlen_k] each, always allocated after SetUp;
                           * row g = sample * mask_heads + head (FM_MASK_NG rows in all) */
  size_t bnd_cap;         /* int32 entries allocated in each bnd[v] (a re-SetUp that fits keeps them) */
  int bnd_default;        /* FM_BOUND_* bits of the vectors known to hold their defaults (lts = lte = bnd_default_sq,
                           * uts = ute = 0) over their first bnd_default_n entries: the vectors a build left out of
                           * present, which the next build need not fill again */
  int bnd_default_sq;
  size_t bnd_default_n;
  /* builder parameters */
  int ndocs; int *docs;
  int *sdocs_n; int **sdocs; /* FMMaskSetSampleDocuments: per sample (mask_batch entries, NULL before the first call);
                              * sdocs_n[s] = 0: sample s takes ndocs/docs (or draws its own) */
  int window_left, window_right;  /* -1: default */
  int nglobal;
  int nprefix; int *prefix;
  int nsq; int *sq_nseg; int nsqseg; int *sq_seglen;
  int nspans; int *span_start, *span_len;
  unsigned long seed;
  /* user bounds before SetUp (type "bounds") */
  int32_t *user[4];       /* [mask_batch][mask_heads][seqlen_k] or NULL */
  int user_present;       /* bits; -1 until the first SetBounds */
  unsigned char *user_head_set;
  int user_causal;        /* FMMaskSetCausal (type "bounds"); builders set causal themselves */
  int state;              /* incremented by every successful FMMaskSetUp (plans compare it) */
  /*
   * hash: FMHash_Private (from FM_HASH_INIT) of what a set-up mask is, computed once by
   * FMMaskSetUp and agreed on (FMAgreeSame), so it is the same on every rank of the mask's
   * communicator: the ints {seqlen_q, seqlen_k, mask_heads, causal, present, block} in that
   * order, the type name with its NUL, the int mask_batch only when it is > 1, then the four
   * bound vectors bnd[0..3] (int32 [mask_batch][mask_heads][seqlen_k] each, absent ones in
   * their default form). Two set-up masks with
   * the same hash have (up to a 64-bit collision) the same tiles, so a plan may hash this value
   * instead of re-hashing the bounds. Read it through FMMaskHash_Private: on a one-rank
   * communicator there is nothing to agree on, so SetUp leaves it to be computed when first
   * asked for (hash_valid 0), which a training loop's new mask every step never pays for.
   */
  uint64_t hash;
  int hash_valid;
  /*
   * summaries: [mask_batch][mask_heads][nblocks_k][FM_SUM_N] of the normalized bounds, valid when
   * summary_valid. Read them through FMMaskSummary_Private (or FMMaskGetDesc_Private, which calls
   * it): every SetUp that rebuilds the bounds resets summary_valid; on several ranks SetUp computes
   * them (errors agreed there, so a reader in collective code never fails alone), on one rank the
   * first reader does, and the one-rank CUDA path, whose prepass builds its own on the GPU, never.
   */
  int block;              /* block size (both axes), default 128 */
  int nblocks_k;          /* ceil(seqlen_k / block), set by SetUp (FMMaskNormalize_Private) */
  int32_t *summary;
  size_t summary_cap;     /* int32 entries allocated in summary */
  int summary_valid;
  double density, sparsity; /* valid by the FM_STATS_* bits of stats_valid (FMMaskComputeDensity_Private, on demand) */
  int stats_valid;
};

/* Rows of the bound vectors and summaries: one per (sample, mask head). */
#define FM_MASK_NG(m) ((size_t)(m)->mask_batch * (size_t)(m)->mask_heads)

/* Index of row h (= sample * mask_heads + head), column j in a bound vector. */
#define FM_BND(m, v, h, j) ((m)->bnd[(v)][(size_t)(h) * (m)->seqlen_k + (j)])

/*
 * FMMaskClassifyTile_Private - class of the tile of query rows [m0, m1) (global indices)
 *   against key block kb of mask row h (sample * mask_heads + head), from the summaries and the causal diagonal.
 *   Conservative: FM_TILE_SKIP only if every entry is masked, FM_TILE_FULL only if none is.
 *   m is const, so it cannot compute the summaries: call FMMaskSummary_Private first; without
 *   valid summaries every tile is FM_TILE_PARTIAL.
 */
FMTileClass FMMaskClassifyTile_Private(const struct _p_FMMask *m, int h, int m0, int m1, int kb);

/* Build the bounds of a builder type into m->bnd (called by SetUp). */
FMErrorCode FMMaskBuild_Private(FMMask m);
/* FMMaskNormalize_Private - empty intervals of m->bnd in default form, m->nblocks_k, and the
   summaries and statistics marked out of date. Called by SetUp after FMMaskValidate_Private,
   before anything hashes or uploads the bounds. Not collective. */
FMErrorCode FMMaskNormalize_Private(FMMask m);
/* FMMaskComputeSummaries_Private - compute m->summary from the normalized bounds now (SetUp on
   several ranks; FMMaskSummary_Private). Not collective. */
FMErrorCode FMMaskComputeSummaries_Private(FMMask m);
/* FMMaskSummary_Private - the block summaries of a set-up mask, computed here the first time they
   are asked for after a SetUp; *summary (may be NULL) is valid until the next SetUp. Not
   collective. Never call it inside a multithreaded region: it may write m. */
FMErrorCode FMMaskSummary_Private(FMMask m, const int32_t **summary);
/*
 * Threads for a set-up pass over n bound entries of m, split into units pieces of work (rows,
 * samples; units <= 0: as many as there are entries): 1 below 2^17 entries, where starting the
 * threads would cost more than they save, or for one unit; else the context's CPU threads per
 * rank (FMContextSetNumThreads: the rank's share of its cores), even where there are fewer units
 * than threads (the others wait at the pass's end). A pass over the bounds is bound by memory
 * bandwidth, which one core of a server does not saturate (32 heads at 32K keys: 4 MiB per
 * vector).
 * Never a team of another size: GCC's OpenMP ends the threads a smaller team leaves out and
 * starts them again for the next larger one. On a 16-core virtual machine that cost a 4-sample
 * mask at 32K keys about 0.5 ms per set-up step, when passes took 4 threads (one per sample)
 * between passes of 16. src/mask/mask.c.
 */
int FMMaskThreads_Private(FMMask m, size_t n, int units);

/* dst[v][0..n) = src[v][0..n) for each v whose src is not NULL, on nth threads (contiguous
   pieces split on 4 KiB pages). src/mask/mask.c; also FMCudaMaskUpdate's copy into pinned
   staging. */
void FMMaskCopyBounds_Private(int32_t *const dst[4], const int32_t *const src[4], size_t n, int nth);

/* FMMaskComputeDensity_Private - m->density and m->sparsity of a set-up mask, computed the first
   time they are asked for after a set-up (a re-planning step that never asks pays nothing), the
   block summaries too if they are not yet (the sparsity starts from them). Exact. Not
   collective; never call it inside a multithreaded region (it writes m).
   FMMaskComputeSparsity_Private - m->sparsity alone, the same way (what the FLOP count needs: a
   new mask's first forward does not pay for the element density's pass over every column). */
#define FM_STATS_SPARSITY 1 /* bits of FMMask.stats_valid */
#define FM_STATS_DENSITY 2
FMErrorCode FMMaskComputeDensity_Private(FMMask m);
FMErrorCode FMMaskComputeSparsity_Private(FMMask m);
/* FMMaskVisitedRows_Private - the query rows the backward's walks visit at BM-row steps, summed
   over every key block of every mask row of a set-up mask: BM times the tiles that are not
   skipped (FMVisitedTilesInline, fmtile.h), from the block summaries (computed here if they are
   not yet: one pass over the bounds; then O(mask rows x key blocks)). Not collective. */
FMErrorCode FMMaskVisitedRows_Private(FMMask m, int BM, double *rows);
/* FMMaskTileKeys_Private - how many keys a query tile (tile_rows rows) sees, estimated over every
   tile of every mask row of a set-up mask: *mean, and *cv, their coefficient of variation
   (standard deviation / mean, the sampling noise taken out; 0.58 for causal, near 0 for a sliding
   window). A key counts for a tile when some row of the tile sees it (so partial tiles count as
   the kernels pay them). From max(FM_MASK_KEY_SAMPLES, 64 per mask row) key columns, at most 16
   times that: one in each of that many equal strata of all rows' columns, at golden-ratio
   offsets (deterministic: every rank gets the same values); exact when the mask has no more
   columns. About 3 us for one mask row of 8K keys; from 2048 samples (32 mask rows) on the
   context's threads, each taking whole mask rows, with the same bits on any number of threads
   (32 rows of 8K keys: 42 us on one thread, 22 on two). Reads no summary, writes nothing. Not
   collective. FM_MASK_KEY_SAMPLES was 1024 until 2026-12-05: over the 11 builder masks at 2K-32K
   keys, one mask row, 4 seeds each (240 masks), 256 samples gave the same schedule as 1024 on
   every one (mean within 5.3% and spread within 0.14 of the exact values, against 1.8% and 0.06
   at 1024), for a quarter of the time (10 -> 2.6 us at 8K), which a new mask pays per step. */
#ifndef FM_MASK_KEY_SAMPLES /* (a build may set another, to measure the estimate) */
#define FM_MASK_KEY_SAMPLES 256
#endif
FMErrorCode FMMaskTileKeys_Private(FMMask m, int tile_rows, double *mean, double *cv);
/* What FMMaskTileKeys_Private samples, for tests. Not collective.
   FMMaskTileKeysSplit_Private - *n samples in all; thread t of T takes samples [*i0, *i1) (whole
   mask rows: the last sample before *i0 lies in an earlier mask row than sample *i0).
   FMMaskTileKeysColumn_Private - the key column of sample i (0 <= i < n) over all mask rows, row
   g's columns at g x seqlen_k. */
void FMMaskTileKeysSplit_Private(const FMMask m, int t, int T, int64_t *n, int64_t *i0, int64_t *i1);
int64_t FMMaskTileKeysColumn_Private(const FMMask m, int64_t i);
/* Validate m->bnd (0 <= start <= Sq, start <= end). */
FMErrorCode FMMaskValidate_Private(FMMask m);
/* Fill the kernels' view of a set-up mask (borrowed pointers into m), its summaries computed if
   they are not yet (FMMaskSummary_Private). */
struct FMMaskDesc_s;
FMErrorCode FMMaskGetDesc_Private(FMMask m, struct FMMaskDesc_s *desc);
/* The same view without the host summaries (desc->summary NULL, nothing computed): for the CUDA
   backend's one-rank path, whose mask prepass builds its own summaries on the GPU. */
FMErrorCode FMMaskGetBoundsDesc_Private(FMMask m, struct FMMaskDesc_s *desc);
/* FMMaskHash_Private - mask->hash of a set-up mask, computed here when SetUp left it (one rank). Not collective. */
uint64_t FMMaskHash_Private(FMMask m);

/* ---------------- HDF5 files: the shared helpers (FMH5*) are in fmh5.h ---------------- */

/* ---------------- plan: the struct and its ops table are in planimpl.h ---------------- */

#ifdef __cplusplus
}
#endif
#endif
