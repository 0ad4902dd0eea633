/*
 * options.c - the "cp" plan type's options: the name tables and the -fm_plan_* lookups.
 */
#include "distimpl.h"

const char *const FMDistTransportNames[] = {"auto", "nccl", "mpi", NULL};
const char *const FMDistGPUAwareNames[] = {"0", "1", "auto", NULL};

/* FMDistReadOptions_Private - see distimpl.h. */
FMErrorCode FMDistReadOptions_Private(FMDist *d)
{
  FMBool prune = FM_TRUE, overlap = FM_TRUE;
  FMCall(FMOptionsGetEnum_Private("-fm_plan_partition", "query-chunk partition over ranks", FMDistPartNames, &d->part_type, NULL));
  FMCall(FMOptionsGetInt("-fm_plan_chunk", "query rows per chunk, 0 = about seqlen/(4P) rounded to the block", &d->chunk_opt, NULL));
  d->partial_cost = 1.0;
  FMCall(FMOptionsGetReal("-fm_plan_partial_cost", "balancer: cost of a partially masked tile, in full tiles", &d->partial_cost, NULL));
  d->row_cost = 0.0;
  FMCall(FMOptionsGetReal("-fm_plan_row_cost", "balancer: fixed cost of each query tile (load, epilogue), in full tiles", &d->row_cost, NULL));
  FMCall(FMOptionsGetEnum_Private("-fm_plan_route", "K/V gather route", FMDistRouteNames, &d->route_type, NULL));
  FMCall(FMOptionsGetBool("-fm_plan_prune", "never transfer K/V chunks no local query can see", &prune, NULL));
  FMCall(FMOptionsGetBool("-fm_plan_overlap", "compute on arrived chunks while others are in flight", &overlap, NULL));
  FMCall(FMOptionsGetEnum_Private("-fm_plan_schedule", "K/V schedule: the pruned gather, or a ring baseline (every block visits every rank)",
                                   FMDistSchedNames, &d->schedule, NULL));
  FMCall(FMOptionsGetEnum_Private("-fm_plan_transport",
                                   "device K/V transport on the CUDA backend: nccl (a GPU per rank), mpi (through host memory, or device buffers: -fm_gpu_aware_mpi), "
                                   "auto = nccl when built with NCCL and no two ranks share a GPU",
                                   FMDistTransportNames, &d->transport, NULL));
  FMCall(FMOptionsGetInt("-fm_plan_step_chunks",
                         "CUDA backend: at most this many K/V chunks per peer in one exchange step (0 = all: one step per peer and hop)",
                         &d->step_chunks, NULL));
  FMCall(FMOptionsGetEnum_Private("-fm_gpu_aware_mpi",
                                   "CUDA backend, -fm_plan_transport mpi: pass device buffers to MPI instead of staging them through "
                                   "pinned host memory; 1 = the MPI is CUDA-aware, auto = when MPIX_Query_cuda_support() says so on every rank",
                                   FMDistGPUAwareNames, &d->gpu_aware, NULL));
  FMCall(FMOptionsGetInt("-fm_debug_fail_exchange",
                         "testing: the CUDA executor's exchange fails on this rank at its first step (-1: never), to check that "
                         "every rank returns the error and none waits",
                         &d->debug_fail, NULL));
  FMCall(FMOptionsGetInt("-fm_plan_nodes", "route over this many virtual nodes of consecutive ranks (0 = real topology)", &d->vnodes, NULL));
  {
    FMBool set = FM_FALSE, view = FM_FALSE;
    FMCall(FMOptionsGetString("-fm_trace", "write every rank's events of each distributed forward/backward to this HDF5 file",
                              d->trace_path, sizeof(d->trace_path), &set));
    FMCall(FMOptionsGetBool("-fm_trace_view", "print the trace summary (overlap efficiency, exposed communication, bytes)", &view, NULL));
    d->trace_on = set && d->trace_path[0];
    d->trace_view = view == FM_TRUE;
#if !FM_DIST_TRACE
    FMCheck(!d->trace_on, MPI_COMM_SELF, FM_ERR_SUP, "-fm_trace %s: this build has no trace recorder", d->trace_path);
#endif
  }
  FMCheck(d->chunk_opt >= 0, MPI_COMM_SELF, FM_ERR_OPT, "-fm_plan_chunk is %d; expected >= 0 (0 = default)", d->chunk_opt);
  FMCheck(d->partial_cost > 0 && d->partial_cost <= 64, MPI_COMM_SELF, FM_ERR_OPT,
          "-fm_plan_partial_cost is %g; expected a cost in (0, 64] full tiles", d->partial_cost);
  FMCheck(d->row_cost >= 0 && d->row_cost <= 1e6, MPI_COMM_SELF, FM_ERR_OPT, "-fm_plan_row_cost is %g; expected a cost in [0, 1e6] full tiles",
          d->row_cost);
  FMCheck(d->vnodes >= 0, MPI_COMM_SELF, FM_ERR_OPT, "-fm_plan_nodes is %d; expected >= 0", d->vnodes);
  FMCheck(d->step_chunks >= 0, MPI_COMM_SELF, FM_ERR_OPT, "-fm_plan_step_chunks is %d; expected >= 0 (0 = all)", d->step_chunks);
  d->prune = prune == FM_TRUE; d->overlap = overlap == FM_TRUE;
  return FM_SUCCESS;
}

