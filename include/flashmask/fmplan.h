/*
 * flashmask/fmplan.h - FMPlan: an attention problem on a mask, its runs and its context parallelism.
 * Part of the public API; include <flashmask.h>, which includes every part in order.
 */
#ifndef FLASHMASK_FMPLAN_H
#define FLASHMASK_FMPLAN_H

#include <flashmask/fmmask.h>

#ifdef __cplusplus
extern "C" {
#endif

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
 * FMPlanSetDeterministic - whether FMPlanForward gives bitwise identical O and LSE, and
 *   FMPlanBackward bitwise identical dQ, dK and dV, from run to run on the same inputs, the same
 *   ranks and the same options (off by default). Not collective (give every rank the same
 *   setting: Forward and Backward check that they agree). May be changed at any time, also
 *   after FMPlanSetUp; it takes effect at the next call. With it on, the forward of a "cp" plan
 *   on the CPU backend with -fm_plan_overlap 1 merges the key chunks' partial O and LSE in a
 *   fixed order (its own chunks, then the incoming ones in route order, each as soon as it is
 *   there) rather than as they arrive; every other forward merges in a fixed order already (the
 *   CUDA stages run in step order on the plan's stream). The CUDA backward adds dQ's partial
 *   sums in a fixed order instead of as they come (on an H200, d = 128: 1.10-1.14x the default
 *   time on full, causal and random masks, 1.16-1.19x on prefix-LM and GQA causal ones), and a
 *   "cp" plan with -fm_plan_overlap 1 adds the key chunks' dQ in a fixed order rather than in
 *   the order they arrive: its own chunks, then
 *   the incoming ones in the order of its routes (while the next one is missing, one that
 *   arrived early is computed into a spare fp32 accumulator the size of this rank's dQ and
 *   added at its turn; others wait; the messages still overlap the compute). The CPU kernels,
 *   the ring schedule and the dK/dV reduction sum in a fixed order either way, so on the CPU
 *   backend only the overlapped gather changes (and the CPU result is the same for any thread
 *   count). Results need not agree bitwise across rank counts, -fm_plan_overlap settings,
 *   vector widths or machines, only from run to run.
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
 *   collective call of a plan (SetUp, Forward, Backward, Scatter, Gather, View) starts with such
 *   an agreement, and so do the mask's and the context's that communicate (FMMaskSetUp,
 *   FMMaskSave, FMMaskLoad, the SetFromOptions, FMContextSetUp), so ranks in different calls on
 *   the objects of one context also get FM_ERR_MISMATCH instead of a hang.
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
 *   Precision: O is the average of V weighted by the probabilities rounded to dtype (as in
 *   every flash-attention kernel), accumulated in fp32. LSE is fp32; on the Hopper kernel at
 *   head_dim 64 the row sums behind it are those of the rounded probabilities (the tensor core
 *   adds them beside P V, the same weights O is normalized by), so LSE lies within 2.0e-3
 *   (bf16) or 4.9e-4 (fp16) of the exact value there; elsewhere within fp32 rounding. A build
 *   configured with NVCCFLAGS="-O3 -std=c++17 --use_fast_math -DFM_SM90_ONES_SUM=0" sums in
 *   fp32 at head_dim 64 too, and its forward there is 2-8% slower.
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
 *   Under -fm_log_view the call credits its event with the plan's FLOPs (FMPlanGetFlops: on a
 *   new mask a pass over its block summaries); without it, with none, and pays nothing for them.
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
 *   Precision: P and dS are rounded to dtype for the products, as in every flash-attention
 *   kernel. On the Hopper kernel's steps at head_dim 128 (64 and 80 rows) and its 128-row step
 *   at head_dim 64 (on the masks that take it: -fm_plan_view names the step) each row's log2 LSE and
 *   D = rowsum(dO o O) enter the products as two bf16 terms, so a row's P is scaled by at most
 *   1 + 2^-16 |log2 LSE| ln 2 and D errs by 2^-16 |D|: below P's rounding to dtype while
 *   |log2 LSE| stays under about 180 (bf16) or 40 (fp16). A build configured with
 *   NVCCFLAGS="-O3 -std=c++17 --use_fast_math -DFMBWD_XF=0" keeps them in fp32, and its
 *   backward on those masks is 1-6% slower.
 *   A row whose LSE is NaN (a non-finite forward) gives NaN in its dQ and in the dK, dV of the
 *   keys it sees (on those steps Inf or NaN); fully masked rows (LSE -inf) contribute
 *   nothing. Inside the (batch, kv head) slice of a non-finite element of q, k, v or dout,
 *   0 x NaN can also reach dK, dV or dQ elements that only share a tile with it (keys the row
 *   does not see included), as in every tiled kernel; every gradient outside that slice stays
 *   finite and exact. With
 *   FMPlanSetCheckFinite, q, k, v and dout are scanned first, as in FMPlanForward. Its event's
 *   FLOPs (2.5 x the forward's) are counted under -fm_log_view only, as FMPlanForward's.
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
 *   kind    the layout (FMPlanTensor): FM_PLAN_TENSOR_Q for q, o, dout, dq
 *           ([batch][seqlen_q][heads_q][head_dim], the plan's dtype); FM_PLAN_TENSOR_KV for k,
 *           v, dk, dv ([batch][seqlen_k][heads_kv][head_dim]); FM_PLAN_TENSOR_LSE for lse
 *           (float [batch][heads_q][seqlen_q])
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

/* FMPlanView - print the plan (its type first) to fp (NULL means stdout). Collective (it
 *   gathers each rank's rows and keys; entry agreement as FMPlanSetUp's); rank 0 prints.
 *   Option: -fm_plan_view */
FMErrorCode FMPlanView(FMPlan plan, FILE *fp);

/*
 * FMPlanDestroy - drop a reference; frees at zero and sets *plan = NULL. Collective: every
 *   rank of the plan's communicator destroys it at the same point of the program. A rank that
 *   destroys its plan early, or exits, while the others still call FMPlanForward, Backward,
 *   Scatter or Gather, leaves them waiting in MPI (or NCCL) for messages that never come: MPI
 *   has no portable way to detect a peer that left, so this misuse (and, alike, a collective
 *   call on some ranks while the others call no collective call at all) the library cannot turn
 *   into an error. (A rank that is killed makes the MPI launcher end the job.)
 *   plan  the plan (NULL or *plan NULL: nothing happens)
 */
FMErrorCode FMPlanDestroy(FMPlan *plan);

#ifdef __cplusplus
}
#endif
#endif
