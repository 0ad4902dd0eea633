static const char help[] =
  "ex1: causal-document masked attention, forward and backward, on the best backend present.\n"
  "It checks the result against a re-run on the exact CPU backend and prints the time taken.\n"
  "  mpiexec -n 1 ./ex1 [-seqlen 4096] [-fm_plan_heads 8] [-fm_plan_kv_heads 2] [-fm_plan_head_dim 128]\n"
  "                     [-fm_plan_dtype bf16] [-fm_mask_docs 1000,2000,1096] [-fm_backend auto|cpu|cuda]\n"
  "                     [-fm_context_view] [-fm_mask_view] [-fm_plan_view] [-fm_log_view] [-help]\n";

/*
 * Tutorial 1. The life of the three objects:
 *   FMContext (communicator, topology, backend) -> FMMask (the column-bound mask) ->
 *   FMPlan (shape + mask, ready to run) -> Forward/Backward -> View -> Destroy.
 * Every rank builds the same global tensors from a seed and keeps the query rows the
 * plan gives it (FMPlanGetLocalRows), so the program runs unchanged on any number of ranks.
 * Every call goes through FMCall: on an error it adds a traceback line and returns the code
 * (from main, as the exit status). FMFromFloat/FMToFloat convert the data to and from dtype.
 */
#include <flashmask.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#if FM_HAVE_CUDA
#include <cuda_runtime_api.h>
#endif

/* splitmix64: a small deterministic generator, so every rank makes the same global data. */
static uint64_t mix(uint64_t *s)
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Fill the local rows of a [batch][seq][heads][dim] tensor with the global random values. */
static void fill(void *buf, FMDType t, int batch, int nrows, const int *rows, int heads, int dim, uint64_t seed)
{
  for (int b = 0; b < batch; b++)
    for (int r = 0; r < nrows; r++) {
      uint64_t s = seed * 1000003ull + ((uint64_t)b << 40) + (uint64_t)rows[r];
      for (int e = 0; e < heads * dim; e++) {
        float x = (float)((double)(mix(&s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
        FMFromFloat(buf, ((size_t)b * nrows + r) * heads * dim + e, t, x); /* round to nearest even */
      }
    }
}

/* Max |a-b| and max |b| over n elements. */
static void compare(const void *a, const void *b, size_t n, FMDType t, double *maxdiff, double *maxref)
{
  *maxdiff = 0; *maxref = 0;
  for (size_t i = 0; i < n; i++) {
    double x = FMToFloat(a, i, t), y = FMToFloat(b, i, t);
    double d = fabs(x - y);
    if (!(d <= *maxdiff)) *maxdiff = d; /* NaN propagates */
    if (fabs(y) > *maxref) *maxref = fabs(y);
  }
}

int main(int argc, char **argv)
{
  FMContext ctx, cpuctx;
  FMMask mask;
  FMPlan plan, cpuplan;
  FMBackend backend;
  int seqlen = 4096, batch = 1, hq = 8, hkv = 2, dim = 128, nlocal, rank, size, ok = 1, iters = 1;
  FMDType dtype;
  const int *rows;
  double tf, tb, flops, tol;
  MPI_Comm comm;

  FMCall(FMInitialize(&argc, &argv, NULL, help));
  FMCall(FMOptionsGetInt("-seqlen", "sequence length (queries and keys)", &seqlen, NULL));
  FMCall(FMOptionsGetInt("-iters", "timed repetitions of the forward pass", &iters, NULL));
  if (iters < 1) {
    fprintf(stderr, "ex1: -iters is %d; expected >= 1\n", iters);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }

  /* 1. Context: communicator, topology, backend (GPU if present). */
  FMCall(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMCall(FMContextSetFromOptions(ctx));
  FMCall(FMContextSetUp(ctx));
  FMCall(FMContextGetBackend(ctx, &backend));
  FMCall(FMContextGetComm(ctx, &comm));
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);

  /* 2. Mask: causal documents; lengths drawn from the seed unless -fm_mask_docs is given. */
  FMCall(FMMaskCreate(ctx, &mask));
  FMCall(FMMaskSetSizes(mask, seqlen, seqlen, 1));
  FMCall(FMMaskSetType(mask, FMMASKCAUSALDOCUMENT));
  FMCall(FMMaskSetFromOptions(mask));
  FMCall(FMMaskSetUp(mask));

  /* 3. Plan: the shape; bf16 by default on the GPU, fp32 on the CPU. */
  FMCall(FMPlanCreate(ctx, &plan));
  FMCall(FMPlanSetMask(plan, mask));
  FMCall(FMPlanSetShape(plan, batch, hq, hkv, dim, backend == FM_BACKEND_CUDA ? FM_DTYPE_BF16 : FM_DTYPE_FP32));
  FMCall(FMPlanSetFromOptions(plan));
  FMCall(FMPlanSetUp(plan));
  FMCall(FMPlanGetLocalRows(plan, &nlocal, &rows));
  /* The options may have changed the shape: read it back. */
  FMCall(FMPlanGetShape(plan, &batch, &hq, &hkv, &dim, &dtype));
  FMCall(FMMaskGetSizes(mask, &seqlen, NULL, NULL));

  /* 4. Data: this rank's query rows and its share of the key/value positions (all of them on
        one rank). Each rank fills them from the same global random tensors. */
  const int *krows;
  int nkrows;
  FMCall(FMPlanGetLocalKeys(plan, &nkrows, &krows));
  size_t es = FMDTypeSize(dtype);
  size_t nq = (size_t)batch * nlocal * hq * dim, nk = (size_t)batch * nkrows * hkv * dim, nl = (size_t)batch * hq * nlocal;
  void *q = malloc(nq * es), *k = malloc(nk * es), *v = malloc(nk * es), *dout = malloc(nq * es);
  void *o = malloc(nq * es), *dq = malloc(nq * es), *dk = malloc(nk * es), *dv = malloc(nk * es);
  void *o2 = malloc(nq * es), *dq2 = malloc(nq * es), *dk2 = malloc(nk * es), *dv2 = malloc(nk * es);
  float *lse = (float *)malloc(nl * sizeof(float)), *lse2 = (float *)malloc(nl * sizeof(float));
  fill(q, dtype, batch, nlocal, rows, hq, dim, 1);
  fill(k, dtype, batch, nkrows, krows, hkv, dim, 2);
  fill(v, dtype, batch, nkrows, krows, hkv, dim, 3);
  fill(dout, dtype, batch, nlocal, rows, hq, dim, 4);

  /* 5. Run on the chosen backend (device buffers on CUDA), timed. */
  FMCall(FMPlanGetFlops(plan, &flops));
  if (backend == FM_BACKEND_CUDA) {
#if FM_HAVE_CUDA
    void *dq_[12]; void *hsrc[4] = {q, k, v, dout};
    size_t bytes[12] = {nq * es, nk * es, nk * es, nq * es, nq * es, nl * 4, nq * es, nk * es, nk * es};
    for (int i = 0; i < 9; i++) if (cudaMalloc(&dq_[i], bytes[i]) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); MPI_Abort(comm, 1); }
    for (int i = 0; i < 4; i++) cudaMemcpy(dq_[i], hsrc[i], bytes[i], cudaMemcpyHostToDevice);
    /* warm-up, then time */
    FMCall(FMPlanForward(plan, dq_[0], dq_[1], dq_[2], dq_[4], (float *)dq_[5]));
    cudaDeviceSynchronize();
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; it++) FMCall(FMPlanForward(plan, dq_[0], dq_[1], dq_[2], dq_[4], (float *)dq_[5]));
    cudaDeviceSynchronize();
    tf = (MPI_Wtime() - t0) / iters;
    t0 = MPI_Wtime();
    FMCall(FMPlanBackward(plan, dq_[0], dq_[1], dq_[2], dq_[4], (float *)dq_[5], dq_[3], dq_[6], dq_[7], dq_[8]));
    cudaDeviceSynchronize();
    tb = MPI_Wtime() - t0;
    cudaMemcpy(o, dq_[4], bytes[4], cudaMemcpyDeviceToHost);
    cudaMemcpy(lse, dq_[5], bytes[5], cudaMemcpyDeviceToHost);
    cudaMemcpy(dq, dq_[6], bytes[6], cudaMemcpyDeviceToHost);
    cudaMemcpy(dk, dq_[7], bytes[7], cudaMemcpyDeviceToHost);
    cudaMemcpy(dv, dq_[8], bytes[8], cudaMemcpyDeviceToHost);
    for (int i = 0; i < 9; i++) cudaFree(dq_[i]);
#endif
  } else {
    double t0 = MPI_Wtime();
    for (int it = 0; it < iters; it++) FMCall(FMPlanForward(plan, q, k, v, o, lse));
    tf = (MPI_Wtime() - t0) / iters;
    t0 = MPI_Wtime();
    FMCall(FMPlanBackward(plan, q, k, v, o, lse, dout, dq, dk, dv));
    tb = MPI_Wtime() - t0;
  }
  MPI_Allreduce(MPI_IN_PLACE, &tf, 1, MPI_DOUBLE, MPI_MAX, comm);
  MPI_Allreduce(MPI_IN_PLACE, &tb, 1, MPI_DOUBLE, MPI_MAX, comm);

  /* 6. Re-run on the exact CPU backend and compare. The check plan reads its own options
        (prefix check_: -check_fm_plan_*), so -fm_trace traces the plan under test only; it takes
        the plan's layout settings, so that both own the same rows and keys. */
  FMCall(FMContextCreate(MPI_COMM_WORLD, &cpuctx));
  FMCall(FMContextSetBackend(cpuctx, FM_BACKEND_CPU));
  FMCall(FMContextSetUp(cpuctx));
  FMCall(FMPlanCreate(cpuctx, &cpuplan));
  FMCall(FMPlanSetMask(cpuplan, mask));
  FMCall(FMPlanSetShape(cpuplan, batch, hq, hkv, dim, dtype));
  {
    FMPlanType type;
    const char *part;
    int chunk;
    double pcost, rcost;
    FMCall(FMPlanGetType(plan, &type));
    FMCall(FMPlanGetPartition(plan, &part));
    FMCall(FMPlanGetChunk(plan, &chunk));
    FMCall(FMPlanGetPartialCost(plan, &pcost));
    FMCall(FMPlanGetRowCost(plan, &rcost));
    FMCall(FMPlanSetType(cpuplan, type));
    FMCall(FMPlanSetPartition(cpuplan, part));
    FMCall(FMPlanSetChunk(cpuplan, chunk));
    FMCall(FMPlanSetPartialCost(cpuplan, pcost));
    FMCall(FMPlanSetRowCost(cpuplan, rcost));
  }
  FMCall(FMPlanSetOptionsPrefix(cpuplan, "check_"));
  FMCall(FMPlanSetFromOptions(cpuplan));
  FMCall(FMPlanSetUp(cpuplan));
  FMCall(FMPlanForward(cpuplan, q, k, v, o2, lse2));
  FMCall(FMPlanBackward(cpuplan, q, k, v, o2, lse2, dout, dq2, dk2, dv2));
  {
    double d[4], r[4];
    const char *name[4] = {"O", "dQ", "dK", "dV"};
    compare(o, o2, nq, dtype, &d[0], &r[0]);
    compare(dq, dq2, nq, dtype, &d[1], &r[1]);
    compare(dk, dk2, nk, dtype, &d[2], &r[2]);
    compare(dv, dv2, nk, dtype, &d[3], &r[3]);
    MPI_Allreduce(MPI_IN_PLACE, d, 4, MPI_DOUBLE, MPI_MAX, comm);
    MPI_Allreduce(MPI_IN_PLACE, r, 4, MPI_DOUBLE, MPI_MAX, comm);
    /* Same backend: rounding only. GPU vs CPU in bf16/fp16: a few output ulps of the largest entry. */
    tol = dtype == FM_DTYPE_FP32 ? 1e-4 : 3e-2;
    if (rank == 0) {
      printf("ex1: causal_document mask, seqlen %d, batch %d, heads %d/%d, head_dim %d, %s, backend %s, %d rank%s\n", seqlen,
             batch, hq, hkv, dim, FMDTypeName(dtype), FMBackendName(backend), size, size > 1 ? "s" : "");
      for (int i = 0; i < 4; i++) {
        double rel = r[i] > 0 ? d[i] / r[i] : d[i];
        printf("  max |%-2s - %-2s(cpu)| = %.3e, relative to max |%s|: %.3e (tolerance %.0e)%s\n", name[i], name[i], d[i],
               name[i], rel, tol, (rel <= tol) ? "" : "  <-- too large");
        if (!(rel <= tol)) ok = 0;
      }
      printf("  forward  %9.3f ms  %8.2f TFLOP/s\n", tf * 1e3, flops / tf * 1e-12);
      printf("  backward %9.3f ms  %8.2f TFLOP/s\n", tb * 1e3, 2.5 * flops / tb * 1e-12);
      printf("%s\n", ok ? "ex1: OK" : "ex1: FAILED");
    }
    MPI_Bcast(&ok, 1, MPI_INT, 0, comm);
  }

  FMCall(FMPlanDestroy(&cpuplan));
  FMCall(FMContextDestroy(&cpuctx));
  FMCall(FMPlanDestroy(&plan));
  FMCall(FMMaskDestroy(&mask));
  FMCall(FMContextDestroy(&ctx));
  free(q); free(k); free(v); free(dout); free(o); free(dq); free(dk); free(dv);
  free(o2); free(dq2); free(dk2); free(dv2); free(lse); free(lse2);
  FMCall(FMFinalize());
  return ok ? 0 : 1;
}

/*TEST

  # ex1 exits 0 when O, dQ, dK and dV agree with the CPU backend within tolerance, 1 when not.
  test:
    suffix: 1
    nsize: 1
    args: -seqlen 1024 -fm_plan_heads 4 -fm_plan_kv_heads 2 -fm_plan_head_dim 64

  test:
    suffix: cpu_2
    nsize: 2
    args: -seqlen 700 -fm_plan_heads 2 -fm_plan_kv_heads 1 -fm_plan_head_dim 32 -fm_backend cpu

  # -help lists the distributed plan's options, the CUDA backend's included
  test:
    suffix: help
    nsize: 2
    args: -seqlen 700 -fm_plan_heads 2 -fm_plan_kv_heads 1 -fm_plan_head_dim 32 -fm_backend cpu -help
    output: -fm_plan_transport <
    output: -fm_plan_step_chunks <
    output: -fm_gpu_aware_mpi <

  # a bad argument ends every rank with status 1
  test:
    suffix: bad_iters
    nsize: 2
    args: -iters 0 -fm_backend cpu
    returncode: 1
    output: -iters is 0; expected >= 1

TEST*/
