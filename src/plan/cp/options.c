/*
 * options.c - the "cp" plan type's settings: their defaults, the name tables, the setters and
 * getters of include/flashmask.h (FMPlanSetPartition, ...) and FMPlanSetFromOptions_CP, which
 * reads the same settings from the -fm_plan_* options under the plan's prefix.
 */
#include "distimpl.h"
#include <stdio.h>
#include <string.h>

const char *const FMDistTransportNames[] = {"auto", "nccl", "mpi", NULL};
const char *const FMDistGPUAwareNames[] = {"0", "1", "auto", NULL};

/* FMDistOptionsDefault_Private - see distimpl.h. */
void FMDistOptionsDefault_Private(FMDistOptions *o)
{
  memset(o, 0, sizeof(*o));
  o->part_type = FM_DIST_BALANCED;
  o->route_type = FM_DIST_ROUTE_HIER;
  o->schedule = FM_DIST_SCHED_GATHER;
  o->transport = FM_DIST_TRANSPORT_AUTO;
  o->gpu_aware = FM_DIST_GPU_AWARE_AUTO;
  o->prune = o->overlap = 1;
  o->partial_cost = 1.0;
  o->row_cost = 0.0;
  o->balance_comm = 0;
  o->tflops = 500; o->bw_intra = 450; o->bw_inter = 50;
}

/* The checks a setting passes, from a setter (code FM_ERR_ARG_OUTOFRANGE) or an option (FM_ERR_OPT);
   name says which in the message. */
static FMErrorCode check_int(FMErrorCode code, const char *name, int v, int lo)
{
  FMCheck(v >= lo, MPI_COMM_SELF, code, "%s is %d; expected >= %d", name, v, lo);
  return FM_SUCCESS;
}
static FMErrorCode check_partial_cost(FMErrorCode code, const char *name, double v)
{
  FMCheck(v > 0 && v <= 64, MPI_COMM_SELF, code, "%s is %g; expected a cost in (0, 64] full tiles", name, v);
  return FM_SUCCESS;
}
static FMErrorCode check_row_cost(FMErrorCode code, const char *name, double v)
{
  FMCheck(v >= 0 && v <= 1e6, MPI_COMM_SELF, code, "%s is %g; expected a cost in [0, 1e6] full tiles", name, v);
  return FM_SUCCESS;
}

static FMErrorCode check_model(FMErrorCode code, const char *name, double tflops, double bw_intra, double bw_inter)
{
  FMCheck(tflops > 0 && tflops <= 1e6 && bw_intra > 0 && bw_intra <= 1e6 && bw_inter > 0 && bw_inter <= 1e6, MPI_COMM_SELF, code,
          "%s: tflops %g, bw_intra %g, bw_inter %g; expected each in (0, 1e6] (TFLOP/s, GB/s)", name, tflops, bw_intra, bw_inter);
  return FM_SUCCESS;
}

/* FMPlanSetFromOptions_CP - see distimpl.h. The options start from the current settings. */
FMErrorCode FMPlanSetFromOptions_CP(FMPlan plan)
{
  FMDist *d = (FMDist *)plan->data;
  FMDistOptions o = d->opt;
  FMBool prune = o.prune ? FM_TRUE : FM_FALSE, overlap = o.overlap ? FM_TRUE : FM_FALSE, set = FM_FALSE, view = o.trace_view ? FM_TRUE : FM_FALSE;
  FMCall(FMOptionsGetEnum_Private("-fm_plan_partition", "query-chunk partition over ranks (FMPlanSetPartition)", FMDistPartNames, &o.part_type, NULL));
  FMCall(FMOptionsGetInt("-fm_plan_chunk", "query rows per chunk, 0 = about seqlen/(4P) rounded to the block (FMPlanSetChunk)", &o.chunk_opt, NULL));
  FMCall(FMOptionsGetReal("-fm_plan_partial_cost", "balancer: cost of a partially masked tile, in full tiles (FMPlanSetPartialCost)",
                          &o.partial_cost, NULL));
  FMCall(FMOptionsGetReal("-fm_plan_row_cost", "balancer: fixed cost of each query tile (load, epilogue), in full tiles (FMPlanSetRowCost)",
                          &o.row_cost, NULL));
  {
    FMBool bc = o.balance_comm ? FM_TRUE : FM_FALSE;
    FMCall(FMOptionsGetBool("-fm_plan_balance_comm",
                            "balancer: also count the K/V bytes each rank receives, by link, and keep a partition with fewer bytes across "
                            "nodes when its predicted step is no longer (FMPlanSetBalanceComm)", &bc, NULL));
    o.balance_comm = bc == FM_TRUE;
  }
  FMCall(FMOptionsGetReal("-fm_plan_tflops", "-fm_plan_balance_comm's model: attention TFLOP/s of one GPU (FMPlanSetCostModel)", &o.tflops, NULL));
  FMCall(FMOptionsGetReal("-fm_plan_bw_intra", "-fm_plan_balance_comm's model: GB/s a rank receives inside a node (FMPlanSetCostModel)",
                          &o.bw_intra, NULL));
  FMCall(FMOptionsGetReal("-fm_plan_bw_inter", "-fm_plan_balance_comm's model: GB/s a rank receives across nodes (FMPlanSetCostModel)",
                          &o.bw_inter, NULL));
  FMCall(check_model(FM_ERR_OPT, "-fm_plan_tflops, -fm_plan_bw_intra, -fm_plan_bw_inter", o.tflops, o.bw_intra, o.bw_inter));
  FMCall(FMOptionsGetEnum_Private("-fm_plan_route", "K/V gather route (FMPlanSetRoute)", FMDistRouteNames, &o.route_type, NULL));
  FMCall(FMOptionsGetBool("-fm_plan_prune", "never transfer K/V chunks no local query can see (FMPlanSetPrune)", &prune, NULL));
  FMCall(FMOptionsGetBool("-fm_plan_overlap", "compute on arrived chunks while others are in flight (FMPlanSetOverlap)", &overlap, NULL));
  FMCall(FMOptionsGetEnum_Private("-fm_plan_schedule",
                                  "K/V schedule: the pruned gather, or a ring baseline (every block visits every rank) (FMPlanSetSchedule)",
                                  FMDistSchedNames, &o.schedule, NULL));
  FMCall(FMOptionsGetEnum_Private("-fm_plan_transport",
                                  "device K/V transport on the CUDA backend: nccl (a GPU per rank), mpi (through host memory, or device buffers: "
                                  "-fm_gpu_aware_mpi), auto = nccl when built with NCCL and no two ranks share a GPU (FMPlanSetTransport)",
                                  FMDistTransportNames, &o.transport, NULL));
  FMCall(FMOptionsGetInt("-fm_plan_step_chunks",
                         "CUDA backend: at most this many K/V chunks per peer in one exchange step (0 = all: one step per peer and hop) "
                         "(FMPlanSetStepChunks)",
                         &o.step_chunks, NULL));
  FMCall(FMOptionsGetEnum_Private("-fm_gpu_aware_mpi",
                                  "CUDA backend, -fm_plan_transport mpi: pass device buffers to MPI instead of staging them through "
                                  "pinned host memory; 1 = the MPI is CUDA-aware, auto = when MPIX_Query_cuda_support() says so on every rank "
                                  "(FMPlanSetGPUAwareMPI)",
                                  FMDistGPUAwareNames, &o.gpu_aware, NULL));
  FMCall(FMOptionsGetInt("-fm_plan_nodes", "route over this many virtual nodes of consecutive ranks, 0 = real topology (FMPlanSetVirtualNodes)",
                         &o.vnodes, NULL));
  FMCall(FMOptionsGetString("-fm_trace", "write every rank's events of each distributed forward/backward to this HDF5 file (FMPlanSetTrace)",
                            o.trace_path, sizeof(o.trace_path), &set));
  FMCall(FMOptionsGetBool("-fm_trace_view", "print the trace summary (overlap efficiency, exposed communication, bytes) (FMPlanSetTrace)",
                          &view, NULL));
  if (set) o.trace_on = o.trace_path[0] != '\0';
  o.trace_view = view == FM_TRUE;
#if !FM_DIST_TRACE
  FMCheck(!o.trace_on, MPI_COMM_SELF, FM_ERR_SUP, "-fm_trace %s: this build has no trace recorder", o.trace_path);
#endif
  FMCall(check_int(FM_ERR_OPT, "-fm_plan_chunk", o.chunk_opt, 0));
  FMCall(check_partial_cost(FM_ERR_OPT, "-fm_plan_partial_cost", o.partial_cost));
  FMCall(check_row_cost(FM_ERR_OPT, "-fm_plan_row_cost", o.row_cost));
  FMCall(check_int(FM_ERR_OPT, "-fm_plan_nodes", o.vnodes, 0));
  FMCall(check_int(FM_ERR_OPT, "-fm_plan_step_chunks", o.step_chunks, 0));
  o.prune = prune == FM_TRUE;
  o.overlap = overlap == FM_TRUE;
  if (memcmp(&o, &d->opt, sizeof(o))) plan->hdr.setupcalled = 0;
  d->opt = o;
  return FM_SUCCESS;
}

/* ---------------- setters and getters (include/flashmask.h) ---------------- */
/*
 * The settings a setter changes: the plan's own when it is a cp plan (set up again after the
 * change), none (*o = NULL: the setter has no effect) for a local one. A plan without a type
 * gets the default one first.
 */
static FMErrorCode settings(FMPlan plan, FMDistOptions **o)
{
  *o = NULL;
  FMCall(FMPlanSetDefaultType_Private(plan));
  if (!strcmp(plan->hdr.type_name, FMPLANCP)) {
    *o = &((FMDist *)plan->data)->opt;
    plan->hdr.setupcalled = 0;
  }
  return FM_SUCCESS;
}

/* The settings a getter reads: the cp plan's, or the defaults for a local plan. */
static FMErrorCode get_settings(FMPlan plan, FMDistOptions *o)
{
  FMCall(FMPlanSetDefaultType_Private(plan));
  if (!strcmp(plan->hdr.type_name, FMPLANCP)) *o = ((FMDist *)plan->data)->opt;
  else FMDistOptionsDefault_Private(o);
  return FM_SUCCESS;
}

/* Index of value in a NULL-terminated name table; FM_ERR_ARG_OUTOFRANGE naming the choices. */
static FMErrorCode name_index(FMPlan plan, const char *fn, const char *value, const char *const *names, int *idx)
{
  char list[160] = "";
  size_t len = 0;
  FMCheck(value, plan->hdr.comm, FM_ERR_ARG_NULL, "Null pointer: argument 2 of %s()", fn);
  for (int i = 0; names[i]; i++)
    if (!strcmp(value, names[i])) { *idx = i; return FM_SUCCESS; }
  for (int i = 0; names[i] && len < sizeof(list); i++)
    len += (size_t)snprintf(list + len, sizeof(list) - len, "%s\"%s\"", i ? (names[i + 1] ? ", " : " or ") : "", names[i]);
  FMRaise(plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE, "Argument 2 of %s() is \"%s\"; expected %s", fn, value, list);
}

/* The string settings: field is the FMDistOptions member, names its table. */
static FMErrorCode set_name(FMPlan plan, const char *fn, const char *value, const char *const *names, size_t field)
{
  FMDistOptions *o;
  int i = 0;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCall(name_index(plan, fn, value, names, &i));
  FMCall(settings(plan, &o));
  if (o) *(int *)((char *)o + field) = i;
  return FM_SUCCESS;
}
static FMErrorCode get_name(FMPlan plan, const char **value, const char *const *names, size_t field)
{
  FMDistOptions o;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(value, 2);
  FMCall(get_settings(plan, &o));
  *value = names[*(const int *)((const char *)&o + field)];
  return FM_SUCCESS;
}

FMErrorCode FMPlanSetPartition(FMPlan plan, const char *partition)
{
  FMCall(set_name(plan, "FMPlanSetPartition", partition, FMDistPartNames, offsetof(FMDistOptions, part_type)));
  return FM_SUCCESS;
}
FMErrorCode FMPlanGetPartition(FMPlan plan, const char **partition)
{
  FMCall(get_name(plan, partition, FMDistPartNames, offsetof(FMDistOptions, part_type)));
  return FM_SUCCESS;
}
FMErrorCode FMPlanSetRoute(FMPlan plan, const char *route)
{
  FMCall(set_name(plan, "FMPlanSetRoute", route, FMDistRouteNames, offsetof(FMDistOptions, route_type)));
  return FM_SUCCESS;
}
FMErrorCode FMPlanGetRoute(FMPlan plan, const char **route)
{
  FMCall(get_name(plan, route, FMDistRouteNames, offsetof(FMDistOptions, route_type)));
  return FM_SUCCESS;
}
FMErrorCode FMPlanSetSchedule(FMPlan plan, const char *schedule)
{
  FMCall(set_name(plan, "FMPlanSetSchedule", schedule, FMDistSchedNames, offsetof(FMDistOptions, schedule)));
  return FM_SUCCESS;
}
FMErrorCode FMPlanGetSchedule(FMPlan plan, const char **schedule)
{
  FMCall(get_name(plan, schedule, FMDistSchedNames, offsetof(FMDistOptions, schedule)));
  return FM_SUCCESS;
}
FMErrorCode FMPlanSetTransport(FMPlan plan, const char *transport)
{
  FMCall(set_name(plan, "FMPlanSetTransport", transport, FMDistTransportNames, offsetof(FMDistOptions, transport)));
  return FM_SUCCESS;
}
FMErrorCode FMPlanSetGPUAwareMPI(FMPlan plan, const char *aware)
{
  FMCall(set_name(plan, "FMPlanSetGPUAwareMPI", aware, FMDistGPUAwareNames, offsetof(FMDistOptions, gpu_aware)));
  return FM_SUCCESS;
}

/* The on/off settings (an int field holding 0 or 1). */
static FMErrorCode set_bool(FMPlan plan, const char *fn, FMBool v, size_t field)
{
  FMDistOptions *o;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCheck(v == FM_TRUE || v == FM_FALSE, plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE, "Argument 2 of %s() is %d; expected FM_TRUE or FM_FALSE", fn,
          (int)v);
  FMCall(settings(plan, &o));
  if (o) *(int *)((char *)o + field) = v == FM_TRUE;
  return FM_SUCCESS;
}
static FMErrorCode get_bool(FMPlan plan, FMBool *v, size_t field)
{
  FMDistOptions o;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(v, 2);
  FMCall(get_settings(plan, &o));
  *v = *(const int *)((const char *)&o + field) ? FM_TRUE : FM_FALSE;
  return FM_SUCCESS;
}
FMErrorCode FMPlanSetPrune(FMPlan plan, FMBool prune)
{
  FMCall(set_bool(plan, "FMPlanSetPrune", prune, offsetof(FMDistOptions, prune)));
  return FM_SUCCESS;
}
FMErrorCode FMPlanSetOverlap(FMPlan plan, FMBool overlap)
{
  FMCall(set_bool(plan, "FMPlanSetOverlap", overlap, offsetof(FMDistOptions, overlap)));
  return FM_SUCCESS;
}

/* The integer settings (at least lo). */
static FMErrorCode set_int(FMPlan plan, const char *arg, int v, int lo, size_t field)
{
  FMDistOptions *o;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCall(check_int(FM_ERR_ARG_OUTOFRANGE, arg, v, lo));
  FMCall(settings(plan, &o));
  if (o) *(int *)((char *)o + field) = v;
  return FM_SUCCESS;
}
FMErrorCode FMPlanSetChunk(FMPlan plan, int rows)
{
  FMCall(set_int(plan, "Argument 2 (rows) of FMPlanSetChunk()", rows, 0, offsetof(FMDistOptions, chunk_opt)));
  return FM_SUCCESS;
}
FMErrorCode FMPlanGetChunk(FMPlan plan, int *rows)
{
  FMDistOptions o;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(rows, 2);
  FMCall(get_settings(plan, &o));
  *rows = o.chunk_opt;
  return FM_SUCCESS;
}
FMErrorCode FMPlanSetStepChunks(FMPlan plan, int chunks)
{
  FMCall(set_int(plan, "Argument 2 (chunks) of FMPlanSetStepChunks()", chunks, 0, offsetof(FMDistOptions, step_chunks)));
  return FM_SUCCESS;
}
FMErrorCode FMPlanSetVirtualNodes(FMPlan plan, int nodes)
{
  FMCall(set_int(plan, "Argument 2 (nodes) of FMPlanSetVirtualNodes()", nodes, 0, offsetof(FMDistOptions, vnodes)));
  return FM_SUCCESS;
}

FMErrorCode FMPlanSetPartialCost(FMPlan plan, double cost)
{
  FMDistOptions *o;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCall(check_partial_cost(FM_ERR_ARG_OUTOFRANGE, "Argument 2 (cost) of FMPlanSetPartialCost()", cost));
  FMCall(settings(plan, &o));
  if (o) o->partial_cost = cost;
  return FM_SUCCESS;
}
FMErrorCode FMPlanGetPartialCost(FMPlan plan, double *cost)
{
  FMDistOptions o;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(cost, 2);
  FMCall(get_settings(plan, &o));
  *cost = o.partial_cost;
  return FM_SUCCESS;
}
FMErrorCode FMPlanSetBalanceComm(FMPlan plan, FMBool on)
{
  FMCall(set_bool(plan, "FMPlanSetBalanceComm", on, offsetof(FMDistOptions, balance_comm)));
  return FM_SUCCESS;
}
FMErrorCode FMPlanGetBalanceComm(FMPlan plan, FMBool *on)
{
  FMCall(get_bool(plan, on, offsetof(FMDistOptions, balance_comm)));
  return FM_SUCCESS;
}
FMErrorCode FMPlanSetCostModel(FMPlan plan, double tflops, double bw_intra, double bw_inter)
{
  FMDistOptions *o;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCall(check_model(FM_ERR_ARG_OUTOFRANGE, "Arguments 2-4 of FMPlanSetCostModel()", tflops, bw_intra, bw_inter));
  FMCall(settings(plan, &o));
  if (o) { o->tflops = tflops; o->bw_intra = bw_intra; o->bw_inter = bw_inter; }
  return FM_SUCCESS;
}
FMErrorCode FMPlanGetCostModel(FMPlan plan, double *tflops, double *bw_intra, double *bw_inter)
{
  FMDistOptions o;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCall(get_settings(plan, &o));
  if (tflops) *tflops = o.tflops;
  if (bw_intra) *bw_intra = o.bw_intra;
  if (bw_inter) *bw_inter = o.bw_inter;
  return FM_SUCCESS;
}
FMErrorCode FMPlanSetRowCost(FMPlan plan, double cost)
{
  FMDistOptions *o;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCall(check_row_cost(FM_ERR_ARG_OUTOFRANGE, "Argument 2 (cost) of FMPlanSetRowCost()", cost));
  FMCall(settings(plan, &o));
  if (o) o->row_cost = cost;
  return FM_SUCCESS;
}
FMErrorCode FMPlanGetRowCost(FMPlan plan, double *cost)
{
  FMDistOptions o;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(cost, 2);
  FMCall(get_settings(plan, &o));
  *cost = o.row_cost;
  return FM_SUCCESS;
}

FMErrorCode FMPlanSetTrace(FMPlan plan, const char *path, FMBool view)
{
  FMDistOptions *o;
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCheck(!path || strlen(path) < sizeof(o->trace_path), plan->hdr.comm, FM_ERR_ARG_OUTOFRANGE,
          "Argument 2 (path) of FMPlanSetTrace() has %zu characters; expected fewer than %zu", path ? strlen(path) : 0, sizeof(o->trace_path));
#if !FM_DIST_TRACE
  FMCheck(!path || !path[0], plan->hdr.comm, FM_ERR_SUP, "FMPlanSetTrace(%s): this build has no trace recorder", path);
#endif
  FMCall(settings(plan, &o));
  if (!o) return FM_SUCCESS;
  o->trace_on = path && path[0];
  snprintf(o->trace_path, sizeof(o->trace_path), "%s", path ? path : "");
  o->trace_view = view == FM_TRUE;
  return FM_SUCCESS;
}
