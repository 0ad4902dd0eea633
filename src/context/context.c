/*
 * context.c - FMContext: a duplicated communicator, the node split, the hwloc topology
 * of each rank, the choice of a nearby GPU and of the compute backend.
 */
#if defined(__linux__) && !defined(_GNU_SOURCE)
#define _GNU_SOURCE /* sched_getaffinity, CPU_COUNT: the binding when the build has no hwloc */
#endif
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#if FM_HAVE_HWLOC
#include <hwloc.h>
#elif defined(__linux__)
#include <sched.h>
#endif

FMErrorCode FMContextCreate(MPI_Comm comm, FMContext *ctx)
{
  FMContext c = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  FMCheckInitialized();
  FMValidPointer(ctx, 2);
  *ctx = NULL;
  FMCheck(comm != MPI_COMM_NULL, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 1 (comm) is MPI_COMM_NULL; expected a valid communicator");
  FMCall(FMCalloc(1, &c));
  FMCallMPIGoto(MPI_Comm_dup(comm, &c->comm));
  /* MPI errors on the library's communicators (and those split from it) return to FMCallMPI, which
     names them and lets the ranks agree, instead of aborting the job (the user's communicator keeps
     its own handler) */
  FMCallMPIGoto(MPI_Comm_set_errhandler(c->comm, MPI_ERRORS_RETURN));
  FMHeaderCreate(c, FM_CLASSID_CONTEXT, "FMContext", c->comm);
  MPI_Comm_rank(c->comm, &c->rank);
  MPI_Comm_size(c->comm, &c->size);
  c->nodecomm = c->crosscomm = MPI_COMM_NULL;
  c->backend_req = FM_BACKEND_AUTO;
  c->backend = FM_BACKEND_AUTO;
  c->kopts.sm90_schedule = FM_GPU_SCHED_AUTO; /* the plan resolves it from its mask */
  c->device = -1;
  c->self.gpu = -1;
  *ctx = c;
  c = NULL;
cleanup:
  free(c);
  return ierr;
}

FMErrorCode FMContextSetBackend(FMContext ctx, FMBackend backend)
{
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMCheck(backend == FM_BACKEND_AUTO || backend == FM_BACKEND_CPU || backend == FM_BACKEND_CUDA, ctx->comm,
          FM_ERR_ARG_OUTOFRANGE, "Argument 2 (backend) is %d; expected FM_BACKEND_AUTO, FM_BACKEND_CPU or FM_BACKEND_CUDA", (int)backend);
  ctx->backend_req = backend;
  ctx->hdr.setupcalled = 0;
  return FM_SUCCESS;
}

FMErrorCode FMContextSetNumThreads(FMContext ctx, int nthreads)
{
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMCheck(nthreads >= 0, ctx->comm, FM_ERR_ARG_OUTOFRANGE, "Argument 2 (nthreads) is %d; expected >= 0 (0 = the default)", nthreads);
  ctx->nthreads = nthreads;
  if (nthreads > 0) { /* after SetUp too; 0 takes effect at the next SetUp */
    ctx->threads = nthreads;
    ctx->threads_env = 0; /* no OpenMP count capped any more */
  }
  return FM_SUCCESS;
}

FMErrorCode FMContextSetNCCLTimeout(FMContext ctx, double seconds)
{
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMCheck(seconds >= 0 && seconds <= 1e9, ctx->comm, FM_ERR_ARG_OUTOFRANGE,
          "Argument 2 (seconds) is %g; expected a finite number of seconds >= 0 (0 = no limit)", seconds);
  ctx->nccl_timeout = seconds;
  return FM_SUCCESS;
}

FMErrorCode FMContextGetNCCLTimeout(FMContext ctx, double *seconds)
{
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMValidPointer(seconds, 2);
  *seconds = ctx->nccl_timeout;
  return FM_SUCCESS;
}

/* The kernels' switches (FMKernelOptions in fmkernels.h), read once here and passed down in every problem. */
static FMErrorCode kernel_options(FMContext ctx)
{
  FMKernelOptions *k = &ctx->kopts;
  FMBool b = k->cuda_fallback ? FM_TRUE : FM_FALSE;
  int w = k->cpu_vector_width, sb = (int)k->cpu_stage_bytes;
  FMCall(FMOptionsGetBool("-fm_cuda_fallback", "CUDA forward: always the SIMT fallback, never the Hopper kernel (tests)", &b, NULL));
  k->cuda_fallback = b == FM_TRUE;
  b = k->sm90_vdesc_swap ? FM_TRUE : FM_FALSE;
  FMCall(FMOptionsGetBool("-fm_sm90_vdesc_swap", "Hopper kernel: swap the V descriptor strides (diagnostic; wrong results)", &b, NULL));
  k->sm90_vdesc_swap = b == FM_TRUE;
  {
    static const char *const sched[] = {"grid", "static", "dynamic", "auto", NULL}; /* FM_GPU_SCHED_* */
    int c = k->sm90_ctas;
    FMCall(FMOptionsGetEnum_Private("-fm_sm90_schedule", "Hopper forward (d = 64, 128): one CTA per query tile (grid), one persistent CTA per SM taking tiles in turn (static) or from a counter (dynamic), or auto: persistent where a query tile sees few keys on average, else grid (always grid for a full mask at d = 128)", sched, &k->sm90_schedule, NULL));
    FMCall(FMOptionsGetInt("-fm_sm90_ctas", "Hopper forward, persistent schedules: at most this many CTAs (0 = one per SM; tests)", &c, NULL));
    FMCheck(c >= 0, ctx->comm, FM_ERR_ARG_OUTOFRANGE, "-fm_sm90_ctas is %d; expected >= 0 (0 = one per SM)", c);
    k->sm90_ctas = c;
    c = k->sm90_auto_keys;
    {
      char help[160];
      snprintf(help, sizeof help, "Hopper forward, -fm_sm90_schedule auto: the persistent kernel where a query tile sees at most this many keys on average (0 = %d)",
               FM_GPU_SCHED_AUTO_KEYS);
      FMCall(FMOptionsGetInt("-fm_sm90_auto_keys", help, &c, NULL));
    }
    FMCheck(c >= 0, ctx->comm, FM_ERR_ARG_OUTOFRANGE, "-fm_sm90_auto_keys is %d; expected >= 0 (0 = the default, %d)", c, FM_GPU_SCHED_AUTO_KEYS);
    k->sm90_auto_keys = c;
    c = k->sm90_bwd_rows;
    FMCall(FMOptionsGetInt("-fm_sm90_bwd_rows",
                           "Hopper backward: query rows per step, 64, 80 (d = 128) or 128 (d = 64); 0 = auto: 80 or 128 on masks without bound vectors, and on the others where the walks then visit at most 0.5% (d = 128) or 5% (d = 64) more rows, else 64",
                           &c, NULL));
    FMCheck(c == 0 || c == 64 || c == 80 || c == 128, ctx->comm, FM_ERR_ARG_OUTOFRANGE,
            "-fm_sm90_bwd_rows is %d; expected 0 (auto), 64, 80 or 128", c);
    k->sm90_bwd_rows = c;
  }
  FMCall(FMOptionsGetInt("-fm_cpu_vector_width", "CPU kernels' vector width 4, 8 or 16 when the CPU runs it; 0 = the widest", &w, NULL));
  FMCheck(w == 0 || w == 4 || w == 8 || w == 16, ctx->comm, FM_ERR_ARG_OUTOFRANGE,
          "-fm_cpu_vector_width is %d; expected 0 (the widest), 4, 8 or 16", w);
  k->cpu_vector_width = w;
  FMCall(FMOptionsGetInt("-fm_cpu_stage_bytes", "CPU kernels' fp32 staging budget per call in bytes; 0 = 256 MiB", &sb, NULL));
  FMCheck(sb >= 0, ctx->comm, FM_ERR_ARG_OUTOFRANGE, "-fm_cpu_stage_bytes is %d; expected >= 0 (0 = the default)", sb);
  k->cpu_stage_bytes = (size_t)sb;
  return FM_SUCCESS;
}

static FMErrorCode setfromoptions(void *obj)
{
  FMContext ctx = (FMContext)obj;
  int b;
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  b = (int)ctx->backend_req;
  FMCall(FMOptionsGetEnum_Private("-fm_backend", "compute backend (FMContextSetBackend)", FMBackendNames, &b, NULL));
  FMCall(FMContextSetBackend(ctx, (FMBackend)b));
  FMCall(FMOptionsGetInt("-fm_num_threads", "CPU threads per rank, 0 = the default: the cores of the rank's binding shared by the ranks bound to them, or OMP_NUM_THREADS up to the binding's hardware threads (FMContextSetNumThreads)", &ctx->nthreads, NULL));
  FMCall(FMContextSetNumThreads(ctx, ctx->nthreads));
  {
    double t = ctx->nccl_timeout;
    FMCall(FMOptionsGetReal("-fm_nccl_timeout", "seconds an NCCL K/V exchange may take; the forward then waits for it and aborts on error or time-out (0 = no limit; FMContextSetNCCLTimeout)", &t, NULL));
    FMCheck(t >= 0 && t <= 1e9, ctx->comm, FM_ERR_ARG_OUTOFRANGE, "-fm_nccl_timeout is %g; expected seconds >= 0 (0 = no limit)", t);
    FMCall(FMContextSetNCCLTimeout(ctx, t));
  }
  FMCall(kernel_options(ctx));
  return FM_SUCCESS;
}

/* Locate this rank in the machine with hwloc: package, NUMA node, cores of its binding. */
static FMErrorCode detect_topology(FMContext ctx)
{
#if FM_HAVE_HWLOC
  hwloc_topology_t topo;
  hwloc_bitmap_t set;
  if (!ctx->topology) {
    FMCheck(hwloc_topology_init(&topo) == 0, MPI_COMM_SELF, FM_ERR_HWLOC, "hwloc_topology_init() failed");
    hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_IMPORTANT);
    if (hwloc_topology_load(topo) != 0) {
      hwloc_topology_destroy(topo);
      FMRaise(MPI_COMM_SELF, FM_ERR_HWLOC, "hwloc_topology_load() failed");
    }
    ctx->topology = topo;
  }
  topo = (hwloc_topology_t)ctx->topology;
  set = hwloc_bitmap_alloc();
  FMCheck(set, MPI_COMM_SELF, FM_ERR_MEM, "hwloc_bitmap_alloc() failed");
  if (hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) != 0 || hwloc_bitmap_iszero(set))
    hwloc_bitmap_copy(set, hwloc_topology_get_topology_cpuset(topo));
  ctx->self.ncores = hwloc_get_nbobjs_inside_cpuset_by_type(topo, set, HWLOC_OBJ_CORE);
  ctx->self.npus = hwloc_bitmap_weight(set) > 0 ? hwloc_bitmap_weight(set) : 1;
  if (ctx->self.ncores < 1) ctx->self.ncores = ctx->self.npus;
  {
    char *str = NULL;
    int len = hwloc_bitmap_asprintf(&str, set);
    ctx->cpuset_hash = len > 0 && str ? FMHash_Private(FM_HASH_INIT, str, (size_t)len) : 0;
    free(str);
  }
  {
    int first = hwloc_bitmap_first(set);
    hwloc_obj_t pu = first >= 0 ? hwloc_get_pu_obj_by_os_index(topo, (unsigned)first) : NULL;
    hwloc_obj_t pkg = pu ? hwloc_get_ancestor_obj_by_type(topo, HWLOC_OBJ_PACKAGE, pu) : NULL;
    hwloc_obj_t numa = NULL;
    ctx->self.package = pkg ? (int)pkg->logical_index : 0;
    if (pu) {
      hwloc_obj_t anc = pu;
      while (anc && !anc->memory_arity) anc = anc->parent;
      if (anc) numa = anc->memory_first_child;
    }
    ctx->self.numa = numa ? (int)numa->logical_index : 0;
  }
  hwloc_bitmap_free(set);
#else
  ctx->self.package = 0;
  ctx->self.numa = 0;
  ctx->self.ncores = (int)sysconf(_SC_NPROCESSORS_ONLN);
#if defined(__linux__) && defined(CPU_COUNT)
  { /* the binding's CPUs (hardware threads, counted as cores here) */
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0) ctx->self.ncores = CPU_COUNT(&set);
  }
#endif
  if (ctx->self.ncores < 1) ctx->self.ncores = 1;
  ctx->self.npus = ctx->self.ncores;
#endif
  return FM_SUCCESS;
}

#if FM_HAVE_CUDA
/* Whether GPU busid ("dddd:bb:dd.f") is attached near this rank's cores (hwloc). */
static int gpu_is_near(FMContext ctx, const char *busid)
{
#if FM_HAVE_HWLOC
  unsigned dom, bus, dev, fn;
  hwloc_topology_t topo = (hwloc_topology_t)ctx->topology;
  hwloc_obj_t pci, anc;
  hwloc_bitmap_t set;
  int near = 0;
  if (!topo || sscanf(busid, "%x:%x:%x.%x", &dom, &bus, &dev, &fn) != 4) return 0;
  pci = hwloc_get_pcidev_by_busid(topo, dom, bus, dev, fn);
  if (!pci) return 0;
  anc = hwloc_get_non_io_ancestor_obj(topo, pci);
  set = hwloc_bitmap_alloc();
  if (anc && set && hwloc_get_cpubind(topo, set, HWLOC_CPUBIND_PROCESS) == 0) near = hwloc_bitmap_intersects(set, anc->cpuset);
  if (set) hwloc_bitmap_free(set);
  return near;
#else
  (void)ctx; (void)busid;
  return 0;
#endif
}
#endif

/* Choose a GPU for this rank: one near its cores, spread over node-local ranks. */
static FMErrorCode choose_device(FMContext ctx)
{
  ctx->device = -1;
  ctx->ngpus = 0;
  ctx->gpu_sm = 0;
  ctx->self.gpu = -1; /* none, until one is chosen (the CPU backend returns before) */
#if FM_HAVE_CUDA
  if (ctx->backend_req == FM_BACKEND_CPU) return FM_SUCCESS;
  FMCall(FMCudaDeviceCount(&ctx->ngpus));
  if (ctx->ngpus > 0) {
    int *cand, ncand = 0;
    FMCall(FMMalloc(ctx->ngpus, &cand));
    for (int d = 0; d < ctx->ngpus; d++) {
      char name[64], bus[32]; int sm;
      if (FMCudaDeviceInfo(d, name, sizeof(name), bus, sizeof(bus), &sm) == FM_SUCCESS && gpu_is_near(ctx, bus)) cand[ncand++] = d;
    }
    if (ncand == 0)
      for (int d = 0; d < ctx->ngpus; d++) cand[ncand++] = d;
    ctx->device = cand[ctx->node_rank % ncand];
    free(cand);
    FMCall(FMCudaDeviceInfo(ctx->device, ctx->self.gpu_name, sizeof(ctx->self.gpu_name), ctx->self.gpu_busid,
                            sizeof(ctx->self.gpu_busid), &ctx->gpu_sm));
    FMCall(FMCudaSetDevice(ctx->device));
  }
#endif
  ctx->self.gpu = ctx->device;
  return FM_SUCCESS;
}

static FMErrorCode setup_local(FMContext ctx)
{
  FMCall(detect_topology(ctx));
  FMCall(choose_device(ctx));
  if (ctx->backend_req == FM_BACKEND_CUDA)
    FMCheck(ctx->device >= 0, MPI_COMM_SELF, FM_ERR_SUP,
            "Backend \"cuda\" was requested but %s; use -fm_backend cpu or auto",
            FM_HAVE_CUDA ? "no CUDA GPU is visible to this rank" : "this build has no CUDA support (configure --with-cuda)");
  ctx->backend = ctx->backend_req == FM_BACKEND_AUTO ? (ctx->device >= 0 ? FM_BACKEND_CUDA : FM_BACKEND_CPU) : ctx->backend_req;
  return FM_SUCCESS;
}

/*
 * The CPU backend's threads per rank: the set count, else the cores of the rank's binding shared
 * evenly by the node's ranks bound to the same cores (unbound ranks all have the whole machine:
 * 3 ranks on 2 cores get 1 thread each, not 2, which oversubscribed the cores 3-fold). When
 * OMP_NUM_THREADS is set, its count, but at most the binding's hardware threads shared the same
 * way: more can only take turns on them (16 threads of a rank that mpiexec bound to one core made
 * a new mask's set-up 2-4 times slower than one thread). Collective on the node's ranks.
 */
static FMErrorCode resolve_threads(FMContext ctx)
{
  uint64_t *h = NULL;
  int same = 0;
  FMErrorCode ierr = FM_SUCCESS;
  ctx->threads = 1;
#ifdef _OPENMP
  ctx->threads = omp_get_max_threads();
#endif
  ierr = FMAgreeCode(ctx->nodecomm, FMMalloc(ctx->node_size, &h)); /* no rank skips the gather alone */
  if (ierr) goto cleanup;
  FMCallMPIGoto(MPI_Allgather(&ctx->cpuset_hash, 1, MPI_UINT64_T, h, 1, MPI_UINT64_T, ctx->nodecomm));
  for (int r = 0; r < ctx->node_size; r++) same += h[r] == ctx->cpuset_hash;
  if (same < 1) same = 1;
  ctx->binding_ranks = same;
#ifdef _OPENMP
  ctx->threads_env = 0;
  if (ctx->nthreads > 0) ctx->threads = ctx->nthreads;
  else if (!getenv("OMP_NUM_THREADS")) ctx->threads = ctx->self.ncores / same > 1 ? ctx->self.ncores / same : 1;
  else {
    const int share = ctx->self.npus / same > 1 ? ctx->self.npus / same : 1;
    if (ctx->threads > share) {
      ctx->threads_env = ctx->threads;
      ctx->threads = share;
    }
  }
#endif
cleanup:
  free(h);
  return ierr;
}

FMErrorCode FMContextSetUp(FMContext ctx)
{
  MPI_Comm leaders;
  int node = 0;
  FMBool view = FM_FALSE;
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  if (ctx->hdr.setupcalled) return FM_SUCCESS;
  FMCall(FMAgreeCall_Private(ctx->comm, FM_CALL_CONTEXT_SETUP, FM_SUCCESS, 0, NULL));
  if (ctx->nodecomm == MPI_COMM_NULL) {
    FMCallMPI(MPI_Comm_split_type(ctx->comm, MPI_COMM_TYPE_SHARED, ctx->rank, MPI_INFO_NULL, &ctx->nodecomm));
    MPI_Comm_rank(ctx->nodecomm, &ctx->node_rank);
    MPI_Comm_size(ctx->nodecomm, &ctx->node_size);
    /* Number the nodes by their leaders (node-local rank 0), in rank order. */
    FMCallMPI(MPI_Comm_split(ctx->comm, ctx->node_rank == 0 ? 0 : MPI_UNDEFINED, ctx->rank, &leaders));
    if (leaders != MPI_COMM_NULL) {
      MPI_Comm_rank(leaders, &node);
      MPI_Comm_free(&leaders);
    }
    FMCallMPI(MPI_Bcast(&node, 1, MPI_INT, 0, ctx->nodecomm));
    ctx->node = node;
    FMCallMPI(MPI_Allreduce(&node, &ctx->nnodes, 1, MPI_INT, MPI_MAX, ctx->comm));
    ctx->nnodes++;
    /* Ranks with the same node-local index across nodes: the first level of a hierarchical route. */
    FMCallMPI(MPI_Comm_split(ctx->comm, ctx->node_rank, ctx->rank, &ctx->crosscomm));
  }
  memset(&ctx->self, 0, sizeof(ctx->self));
  ctx->self.rank = ctx->rank;
  ctx->self.node = ctx->node;
  ctx->self.node_rank = ctx->node_rank;
  ctx->self.node_size = ctx->node_size;
  gethostname(ctx->self.hostname, sizeof(ctx->self.hostname) - 1);
  FMAgree(ctx->comm, setup_local(ctx));
  FMAgree(ctx->comm, resolve_threads(ctx));
  if (!ctx->all) FMCall(FMMalloc(ctx->size, &ctx->all));
  FMCallMPI(MPI_Allgather(&ctx->self, (int)sizeof(FMRankInfo), MPI_BYTE, ctx->all, (int)sizeof(FMRankInfo), MPI_BYTE, ctx->comm));
  ctx->hdr.setupcalled = 1;
  FMCall(FMOptionsGetView_Private("-fm_context_view", "print the context at set-up (FMContextView)", &view));
  if (view) FMCall(FMContextView(ctx, stdout));
  return FM_SUCCESS;
}

FMErrorCode FMContextView(FMContext ctx, FILE *fp)
{
  int nthreads;
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMCheckSetUp(ctx, "FMContext");
  if (!fp) fp = stdout;
  nthreads = ctx->threads;
  FMCall(FMPrintf(ctx->comm, fp, "FMContext: %d rank%s on %d node%s, backend %s (requested %s), %d CPU thread%s per rank\n",
                  ctx->size, ctx->size > 1 ? "s" : "", ctx->nnodes, ctx->nnodes > 1 ? "s" : "", FMBackendName(ctx->backend),
                  FMBackendName(ctx->backend_req), nthreads, nthreads > 1 ? "s" : ""));
  if (ctx->threads_env)
    FMCall(FMPrintf(ctx->comm, fp,
                    "  OMP_NUM_THREADS asks for %d threads per rank, but rank 0's binding has %d hardware thread%s for %d rank%s: %d used "
                    "(-fm_num_threads sets the count)\n",
                    ctx->threads_env, ctx->self.npus, ctx->self.npus > 1 ? "s" : "", ctx->binding_ranks, ctx->binding_ranks > 1 ? "s" : "",
                    nthreads));
  FMCall(FMPrintf(ctx->comm, fp, "  build: cuda %d, nccl %d, hwloc %d, hdf5 %d (parallel %d)\n", FM_HAVE_CUDA, FM_HAVE_NCCL,
                  FM_HAVE_HWLOC, FM_HAVE_HDF5, FM_HAVE_HDF5_PARALLEL));
  if (FM_HAVE_NCCL && ctx->nccl_timeout > 0)
    FMCall(FMPrintf(ctx->comm, fp, "  NCCL exchanges waited for, at most %g s each (-fm_nccl_timeout)\n", ctx->nccl_timeout));
  FMCall(FMPrintf(ctx->comm, fp, "  %4s %-16s %4s %5s %4s %4s %5s  %s\n", "rank", "host", "node", "local", "pkg", "numa", "cores", "GPU"));
  for (int r = 0; r < ctx->size; r++) {
    const FMRankInfo *ri = &ctx->all[r];
    char gpu[160];
    if (ri->gpu >= 0) snprintf(gpu, sizeof(gpu), "%d %s [%s]", ri->gpu, ri->gpu_name, ri->gpu_busid);
    else snprintf(gpu, sizeof(gpu), "none");
    FMCall(FMPrintf(ctx->comm, fp, "  %4d %-16.16s %4d %2d/%-2d %4d %4d %5d  %s\n", ri->rank, ri->hostname, ri->node, ri->node_rank,
                    ri->node_size, ri->package, ri->numa, ri->ncores, gpu));
  }
#if FM_HAVE_CUDA
  if (ctx->backend == FM_BACKEND_CUDA)
    FMCall(FMPrintf(ctx->comm, fp, "  forward path on rank 0's GPU (sm_%d): %s\n", ctx->all[0].gpu >= 0 ? ctx->gpu_sm : 0,
                    FMCudaForwardPathName(ctx->gpu_sm)));
#endif
  return FM_SUCCESS;
}

FMErrorCode FMContextGetComm(FMContext ctx, MPI_Comm *comm)
{
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMValidPointer(comm, 2);
  *comm = ctx->comm;
  return FM_SUCCESS;
}

FMErrorCode FMContextGetBackend(FMContext ctx, FMBackend *backend)
{
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMValidPointer(backend, 2);
  FMCheckSetUp(ctx, "FMContext");
  *backend = ctx->backend;
  return FM_SUCCESS;
}

FMErrorCode FMContextGetDevice(FMContext ctx, int *device)
{
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMValidPointer(device, 2);
  *device = ctx->device;
  return FM_SUCCESS;
}

FMErrorCode FMContextDestroy(FMContext *ctx)
{
  FMContext c;
  FMHeaderRelease(ctx, FM_CLASSID_CONTEXT, c);
  FMCall(FMContextDestroyNCCL_Private(c));
#if FM_HAVE_HWLOC
  if (c->topology) hwloc_topology_destroy((hwloc_topology_t)c->topology);
#endif
  if (c->crosscomm != MPI_COMM_NULL) MPI_Comm_free(&c->crosscomm);
  if (c->nodecomm != MPI_COMM_NULL) MPI_Comm_free(&c->nodecomm);
  MPI_Comm_free(&c->comm);
  free(c->all);
  FMHeaderDestroy(c);
  free(c);
  return FM_SUCCESS;
}

/* FMContextSetFromOptions - see flashmask.h: the lookups above, under the object's options prefix. */
FMErrorCode FMContextSetFromOptions(FMContext ctx)
{
  FMCall(FMHeaderSetFromOptions(ctx, FM_CLASSID_CONTEXT, setfromoptions));
  return FM_SUCCESS;
}

/* FMContextSetOptionsPrefix - see flashmask.h. */
FMErrorCode FMContextSetOptionsPrefix(FMContext ctx, const char *prefix)
{
  FMCall(FMHeaderSetOptionsPrefix(ctx, FM_CLASSID_CONTEXT, prefix));
  return FM_SUCCESS;
}

/* FMContextGetOptionsPrefix - see flashmask.h. */
FMErrorCode FMContextGetOptionsPrefix(FMContext ctx, const char **prefix)
{
  FMCall(FMHeaderGetOptionsPrefix(ctx, FM_CLASSID_CONTEXT, prefix));
  return FM_SUCCESS;
}
