static const char help[] =
  "ex1: causal-document masked attention, forward and backward, on the best backend present.\n"
  "It checks O, LSE, dQ (on sampled rows) and dK, dV (on sampled key columns) against a float64\n"
  "reference computed here from the mask's bounds, and prints the time taken.\n"
  "  mpiexec -n 1 ./ex1 [-seqlen 4096] [-fm_plan_heads 8] [-fm_plan_kv_heads 2] [-fm_plan_head_dim 128]\n"
  "                     [-fm_plan_dtype bf16] [-fm_mask_docs 1000,2000,1096] [-fm_backend auto|cpu|cuda]\n"
  "                     [-check_rows 16] [-check_keys 8]\n"
  "                     [-fm_context_view] [-fm_mask_view] [-fm_plan_view] [-fm_log_view] [-help]\n";

/*
 * Tutorial 1. The life of the three objects:
 *   FMContext (communicator, topology, backend) -> FMMask (the column-bound mask) ->
 *   FMPlan (shape + mask, ready to run) -> Forward/Backward -> View -> Destroy.
 * Every rank builds the same global tensors from a seed and keeps the query rows the
 * plan gives it (FMPlanGetLocalRows), so the program runs unchanged on any number of ranks.
 * Every call goes through FMCall: on an error it adds a traceback line and returns the code
 * (from main, as the exit status). FMFromFloat/FMToFloat convert the data to and from dtype.
 *
 * The check owes nothing to the library's kernels: the mask is rebuilt from its bound vectors
 * (FMMaskGetBounds) by the definition of the format (row i is hidden from key j when
 * LTS[j] <= i < LTE[j], or UTS[j] <= i < UTE[j], or causal and j > i + S_k - S_q), and
 * attention is computed in float64 on a sample of each rank's rows (O, LSE, dQ) and key
 * columns (dK, dV, summed over every row that sees the column).
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

/* Global row `row` of batch b of tensor `seed` ([batch][seq][heads][dim]): n = heads*dim values in dtype t at buf[off..]. */
static void fill_row(void *buf, size_t off, FMDType t, int b, int row, int n, uint64_t seed)
{
  uint64_t s = seed * 1000003ull + ((uint64_t)b << 40) + (uint64_t)row;
  for (int e = 0; e < n; e++) {
    float x = (float)((double)(mix(&s) >> 11) * 0x1.0p-53 * 2.0 - 1.0);
    FMFromFloat(buf, off + (size_t)e, t, x); /* round to nearest even */
  }
}

/* Fill the local rows of a [batch][seq][heads][dim] tensor with the global random values. */
static void fill(void *buf, FMDType t, int batch, int nrows, const int *rows, int heads, int dim, uint64_t seed)
{
  for (int b = 0; b < batch; b++)
    for (int r = 0; r < nrows; r++) fill_row(buf, ((size_t)b * nrows + r) * heads * dim, t, b, rows[r], heads * dim, seed);
}

/* The same values as float64 (exactly what the library reads: rounded to t first). */
static void row_f64(double *x, FMDType t, int b, int row, int n, uint64_t seed)
{
  float *tmp = malloc(sizeof(float) * (size_t)n); /* n elements of at most 4 bytes */
  fill_row(tmp, 0, t, b, row, n, seed);
  for (int e = 0; e < n; e++) x[e] = FMToFloat(tmp, (size_t)e, t);
  free(tmp);
}

/* ------------------------------------------------------------------ the float64 reference */
typedef struct {
  int B, Sq, Sk, Hq, Hkv, D, mh, mb;
  double scale;
  FMDType t;
  FMBool causal;
  const int32_t *(*bnd)[4];  /* [mb][mh][4]: LTS, LTE, UTS, UTE of each sample's mask heads */
  double *K, *V;             /* global [B][Sk][Hkv][D] */
  double *lse, *delta;       /* [B][Hq][Sq] per row: LSE and D = dO . O (NAN until computed) */
} Ref;

/* Whether row i of sample s sees key j under query head h (doc/format.md): query head h reads
   mask head h / (Hq / mh), and sample s its own bounds when the mask has a batch (mb > 1). */
static int sees(const Ref *R, int s, int h, int i, int j)
{
  const int32_t *const *b = R->bnd[(size_t)(R->mb > 1 ? s : 0) * R->mh + h / (R->Hq / R->mh)];
  if (b[0][j] <= i && i < b[1][j]) return 0;
  if (b[2][j] <= i && i < b[3][j]) return 0;
  if (R->causal && j > i + R->Sk - R->Sq) return 0;
  return 1;
}

static double dot(const double *a, const double *b, int n)
{
  double s = 0;
  for (int e = 0; e < n; e++) s += a[e] * b[e];
  return s;
}

/*
 * Row i of head h, batch b, with q and dO given (D values each): O (out, D values), and
 * LSE, D = dO.O cached in R; dq (out, may be NULL) = scale * sum_j P_j (dO.V_j - D) K_j.
 */
static void ref_row(Ref *R, int b, int h, int i, const double *q, const double *dout, double *o, double *dq)
{
  const int D = R->D, g = h / (R->Hq / R->Hkv);
  const size_t at = ((size_t)b * R->Hq + h) * R->Sq + i;
  double m = -INFINITY, l = 0, dl = 0;
  for (int e = 0; e < D; e++) { o[e] = 0; if (dq) dq[e] = 0; }
  for (int j = 0; j < R->Sk; j++)
    if (sees(R, b, h, i, j)) m = fmax(m, R->scale * dot(q, R->K + (((size_t)b * R->Sk + j) * R->Hkv + g) * D, D));
  if (m == -INFINITY) { R->lse[at] = -INFINITY; R->delta[at] = 0; return; } /* a row that sees nothing: O = 0 */
  for (int j = 0; j < R->Sk; j++) {
    const double *k = R->K + (((size_t)b * R->Sk + j) * R->Hkv + g) * D, *v = R->V + (((size_t)b * R->Sk + j) * R->Hkv + g) * D;
    double p;
    if (!sees(R, b, h, i, j)) continue;
    p = exp(R->scale * dot(q, k, D) - m);
    l += p;
    for (int e = 0; e < D; e++) o[e] += p * v[e];
  }
  for (int e = 0; e < D; e++) { o[e] /= l; dl += dout[e] * o[e]; }
  R->lse[at] = m + log(l);
  R->delta[at] = dl;
  for (int j = 0; dq && j < R->Sk; j++) {
    const double *k = R->K + (((size_t)b * R->Sk + j) * R->Hkv + g) * D, *v = R->V + (((size_t)b * R->Sk + j) * R->Hkv + g) * D;
    double p, ds;
    if (!sees(R, b, h, i, j)) continue;
    p = exp(R->scale * dot(q, k, D) - R->lse[at]);
    ds = p * (dot(dout, v, D) - dl);
    for (int e = 0; e < D; e++) dq[e] += R->scale * ds * k[e];
  }
}

/* Errors of a sample: max |x - ref| and max |ref| per tensor (O, dQ, dK, dV), and max |LSE - ref|. */
typedef struct {
  double d[4], r[4], dlse;
} Err;

static void acc(Err *E, int w, const void *x, size_t off, FMDType t, const double *ref, int n)
{
  for (int e = 0; e < n; e++) {
    double d = fabs(FMToFloat(x, off + (size_t)e, t) - ref[e]);
    if (!(d <= E->d[w])) E->d[w] = d; /* NaN propagates */
    if (fabs(ref[e]) > E->r[w]) E->r[w] = fabs(ref[e]);
  }
}

static void acc_lse(Err *E, float got, double want)
{
  double d = isinf(want) ? (got == want ? 0 : INFINITY) : fabs((double)got - want);
  if (!(d <= E->dlse)) E->dlse = d;
}

/* O, LSE, dQ on nrow sampled local rows (every batch and head). */
static void check_rows(Ref *R, int nrow, int nlocal, const int *rows, const void *o, const float *lse, const void *dq, Err *E)
{
  const int D = R->D, Hq = R->Hq;
  double *qq = malloc(sizeof(double) * Hq * D), *dd = malloc(sizeof(double) * Hq * D);
  double *ro = malloc(sizeof(double) * D), *rdq = malloc(sizeof(double) * D);
  for (int s = 0; s < nrow && s < nlocal; s++) {
    const int li = nrow >= nlocal ? s : (int)((long long)s * nlocal / nrow), i = rows[li];
    for (int b = 0; b < R->B; b++) {
      row_f64(qq, R->t, b, i, Hq * D, 1);
      row_f64(dd, R->t, b, i, Hq * D, 4);
      for (int h = 0; h < Hq; h++) {
        const size_t off = (((size_t)b * nlocal + li) * Hq + h) * D;
        ref_row(R, b, h, i, qq + (size_t)h * D, dd + (size_t)h * D, ro, rdq);
        acc(E, 0, o, off, R->t, ro, D);
        acc(E, 1, dq, off, R->t, rdq, D);
        acc_lse(E, lse[((size_t)b * Hq + h) * nlocal + li], R->lse[((size_t)b * Hq + h) * R->Sq + i]);
      }
    }
  }
  free(qq); free(dd); free(ro); free(rdq);
}

/* dK, dV on nkey sampled local key columns: sums over every query head of the group and every row that sees the key. */
static void check_keys(Ref *R, int nkey, int nkeys, const int *keys, const void *dk, const void *dv, Err *E)
{
  const int D = R->D, Hq = R->Hq, Hkv = R->Hkv, G = Hq / Hkv;
  double *qq = malloc(sizeof(double) * Hq * D), *dd = malloc(sizeof(double) * Hq * D), *ro = malloc(sizeof(double) * D);
  double *rdk = malloc(sizeof(double) * D), *rdv = malloc(sizeof(double) * D);
  for (int s = 0; s < nkey && s < nkeys; s++) {
    const int lj = nkey >= nkeys ? s : (int)((long long)s * nkeys / nkey), j = keys[lj];
    for (int b = 0; b < R->B; b++)
      for (int g = 0; g < Hkv; g++) {
        const double *k = R->K + (((size_t)b * R->Sk + j) * Hkv + g) * D, *v = R->V + (((size_t)b * R->Sk + j) * Hkv + g) * D;
        for (int e = 0; e < D; e++) rdk[e] = rdv[e] = 0;
        for (int i = 0; i < R->Sq; i++) {
          int any = 0;
          for (int h = g * G; h < (g + 1) * G; h++) any |= sees(R, b, h, i, j);
          if (!any) continue;
          row_f64(qq, R->t, b, i, Hq * D, 1);
          row_f64(dd, R->t, b, i, Hq * D, 4);
          for (int h = g * G; h < (g + 1) * G; h++) {
            const size_t at = ((size_t)b * Hq + h) * R->Sq + i;
            const double *q = qq + (size_t)h * D, *dout = dd + (size_t)h * D;
            double p, ds;
            if (!sees(R, b, h, i, j)) continue;
            if (isnan(R->lse[at])) ref_row(R, b, h, i, q, dout, ro, NULL);
            p = exp(R->scale * dot(q, k, D) - R->lse[at]);
            ds = p * (dot(dout, v, D) - R->delta[at]);
            for (int e = 0; e < D; e++) { rdv[e] += p * dout[e]; rdk[e] += R->scale * ds * q[e]; }
          }
        }
        acc(E, 2, dk, (((size_t)b * nkeys + lj) * Hkv + g) * D, R->t, rdk, D);
        acc(E, 3, dv, (((size_t)b * nkeys + lj) * Hkv + g) * D, R->t, rdv, D);
      }
  }
  free(qq); free(dd); free(ro); free(rdk); free(rdv);
}

/* ------------------------------------------------------------------ running the plan */
typedef struct {
  size_t nq, nk, nl, es;  /* local elements of Q-like and K-like tensors, of the LSE; element size */
  void *q, *k, *v, *dout, *o, *dq, *dk, *dv;
  float *lse;
} Data;

/* Forward and backward on the CUDA backend, each warmed up once and then timed over iters runs:
   device copies of the tensors. */
static FMErrorCode run_cuda(FMPlan plan, Data *x, int iters, double *tf, double *tb)
{
#if FM_HAVE_CUDA
  void *d[9], *host[9] = {x->q, x->k, x->v, x->dout, x->o, x->lse, x->dq, x->dk, x->dv};
  size_t bytes[9] = {x->nq * x->es, x->nk * x->es, x->nk * x->es, x->nq * x->es, x->nq * x->es, x->nl * 4,
                     x->nq * x->es, x->nk * x->es, x->nk * x->es};
  int bad = 0;
  for (int i = 0; i < 9; i++)
    if (cudaMalloc(&d[i], bytes[i] ? bytes[i] : 1) != cudaSuccess) { d[i] = NULL; bad = 1; }
  /* every rank learns of a failed allocation, so that none goes on into the collective calls alone */
  MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  if (bad) {
    int r;
    MPI_Comm_rank(MPI_COMM_WORLD, &r);
    if (r == 0) fprintf(stderr, "ex1: cudaMalloc failed on some rank (%zu bytes for Q on rank 0)\n", bytes[0]);
    for (int i = 0; i < 9; i++) cudaFree(d[i]);
    return FM_ERR_MEM;
  }
  for (int i = 0; i < 4; i++) cudaMemcpy(d[i], host[i], bytes[i], cudaMemcpyHostToDevice);
  /* warm-up, then time */
  FMCall(FMPlanForward(plan, d[0], d[1], d[2], d[4], (float *)d[5]));
  cudaDeviceSynchronize();
  double t0 = MPI_Wtime();
  for (int it = 0; it < iters; it++) FMCall(FMPlanForward(plan, d[0], d[1], d[2], d[4], (float *)d[5]));
  cudaDeviceSynchronize();
  *tf = (MPI_Wtime() - t0) / iters;
  FMCall(FMPlanBackward(plan, d[0], d[1], d[2], d[4], (float *)d[5], d[3], d[6], d[7], d[8]));
  cudaDeviceSynchronize();
  t0 = MPI_Wtime();
  for (int it = 0; it < iters; it++) FMCall(FMPlanBackward(plan, d[0], d[1], d[2], d[4], (float *)d[5], d[3], d[6], d[7], d[8]));
  cudaDeviceSynchronize();
  *tb = (MPI_Wtime() - t0) / iters;
  for (int i = 4; i < 9; i++) cudaMemcpy(host[i], d[i], bytes[i], cudaMemcpyDeviceToHost);
  for (int i = 0; i < 9; i++) cudaFree(d[i]);
#else
  (void)plan; (void)x; (void)iters; *tf = *tb = 0;
#endif
  return FM_SUCCESS;
}

static FMErrorCode run_cpu(FMPlan plan, Data *x, int iters, double *tf, double *tb)
{
  double t0 = MPI_Wtime();
  for (int it = 0; it < iters; it++) FMCall(FMPlanForward(plan, x->q, x->k, x->v, x->o, x->lse));
  *tf = (MPI_Wtime() - t0) / iters;
  t0 = MPI_Wtime();
  FMCall(FMPlanBackward(plan, x->q, x->k, x->v, x->o, x->lse, x->dout, x->dq, x->dk, x->dv));
  *tb = MPI_Wtime() - t0;
  return FM_SUCCESS;
}

/*
 * The check: the float64 reference on nrow rows and nkey key columns of every rank; the
 * largest errors over all ranks, against tolerances for the dtype. *ok out, the same on every rank.
 */
static FMErrorCode check(FMPlan plan, FMMask mask, const Data *x, int nrow, int nkey, MPI_Comm comm, int *ok)
{
  Ref R;
  Err E;
  int nlocal, nkeys, rank;
  const int *rows, *keys;
  const char *name[4] = {"O", "dQ", "dK", "dV"};
  double tol, tol_lse;
  memset(&R, 0, sizeof(R));
  memset(&E, 0, sizeof(E));
  MPI_Comm_rank(comm, &rank);
  FMCall(FMPlanGetShape(plan, &R.B, &R.Hq, &R.Hkv, &R.D, &R.t));
  FMCall(FMPlanGetScale(plan, &R.scale));
  FMCall(FMMaskGetSizes(mask, &R.Sq, &R.Sk, &R.mh));
  FMCall(FMPlanGetLocalRows(plan, &nlocal, &rows));
  FMCall(FMPlanGetLocalKeys(plan, &nkeys, &keys));
  FMCall(FMMaskGetBatch(mask, &R.mb));
  R.bnd = malloc(sizeof(*R.bnd) * R.mb * R.mh);
  for (int s = 0; s < R.mb; s++)
    for (int h = 0; h < R.mh; h++) {
      const int32_t *(*v)[4] = &R.bnd[s * R.mh + h];
      FMCall(FMMaskGetSampleBounds(mask, s, h, &(*v)[0], &(*v)[1], &(*v)[2], &(*v)[3], NULL, &R.causal));
    }
  R.K = malloc(sizeof(double) * R.B * R.Sk * R.Hkv * R.D);
  R.V = malloc(sizeof(double) * R.B * R.Sk * R.Hkv * R.D);
  R.lse = malloc(sizeof(double) * R.B * R.Hq * R.Sq);
  R.delta = malloc(sizeof(double) * R.B * R.Hq * R.Sq);
  for (int b = 0; b < R.B; b++)
    for (int j = 0; j < R.Sk; j++) {
      row_f64(R.K + ((size_t)b * R.Sk + j) * R.Hkv * R.D, R.t, b, j, R.Hkv * R.D, 2);
      row_f64(R.V + ((size_t)b * R.Sk + j) * R.Hkv * R.D, R.t, b, j, R.Hkv * R.D, 3);
    }
  for (size_t i = 0; i < (size_t)R.B * R.Hq * R.Sq; i++) R.lse[i] = NAN;
  check_rows(&R, nrow, nlocal, rows, x->o, x->lse, x->dq, &E);
  check_keys(&R, nkey, nkeys, keys, x->dk, x->dv, &E);
  MPI_Allreduce(MPI_IN_PLACE, &E, 9, MPI_DOUBLE, MPI_MAX, comm);
  /* fp32: rounding of the float sums (seen: 1e-6); bf16/fp16: the outputs' rounding (2^-8) and the
     GPU kernels' half-precision P (seen on the CPU backend in bf16: 3e-3); the LSE is fp32 on
     every dtype (seen: 1e-6) */
  tol = R.t == FM_DTYPE_FP32 ? 1e-4 : 2e-2;
  tol_lse = R.t == FM_DTYPE_FP32 ? 1e-4 : 2e-3;
  *ok = 1;
  if (rank == 0) printf("ex1: float64 reference on %d rows (every head) and %d key columns per rank\n", nrow, nkey);
  for (int i = 0; i < 4; i++) {
    double rel = E.r[i] > 0 ? E.d[i] / E.r[i] : E.d[i];
    if (!(rel <= tol)) *ok = 0;
    if (rank == 0)
      printf("  max |%-2s - ref| = %.3e, relative to max |ref|: %.3e (tolerance %.0e)%s\n", name[i], E.d[i], rel, tol,
             rel <= tol ? "" : "  <-- too large");
  }
  if (!(E.dlse <= tol_lse)) *ok = 0;
  if (rank == 0)
    printf("  max |LSE - ref| = %.3e (tolerance %.0e)%s\n", E.dlse, tol_lse, E.dlse <= tol_lse ? "" : "  <-- too large");
  free(R.bnd); free(R.K); free(R.V); free(R.lse); free(R.delta);
  return FM_SUCCESS;
}

int main(int argc, char **argv)
{
  FMContext ctx;
  FMMask mask;
  FMPlan plan;
  FMBackend backend;
  FMMaskType mtype;
  int seqlen = 4096, seqlen_k = 4096, batch = 1, hq = 8, hkv = 2, dim = 128, nlocal, nkrows, rank, size, ok = 1, iters = 1, nrow = 16, nkey = 8;
  FMDType dtype;
  const int *rows, *krows;
  double tf = 0, tb = 0, flops;
  MPI_Comm comm;
  Data x;

  FMCall(FMInitialize(&argc, &argv, NULL, help));
  FMCall(FMOptionsGetInt("-seqlen", "sequence length (queries and keys)", &seqlen, NULL));
  FMCall(FMOptionsGetInt("-iters", "timed repetitions of the forward pass (and, on the CUDA backend, of the backward)", &iters, NULL));
  FMCall(FMOptionsGetInt("-check_rows", "query rows per rank checked against the float64 reference", &nrow, NULL));
  FMCall(FMOptionsGetInt("-check_keys", "key columns per rank whose dK, dV are checked", &nkey, NULL));
  {
    /* The ranks may have been given different options (an MPMD command line): they agree on
       whether to stop, so that none waits alone in a collective call; each bad rank says why. */
    int bad = seqlen < 1 || iters < 1 || nrow < 0 || nkey < 0, anybad = 0, r0;
    MPI_Allreduce(&bad, &anybad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Comm_rank(MPI_COMM_WORLD, &r0);
    if (bad) {
      if (seqlen < 1) fprintf(stderr, "ex1 [rank %d]: -seqlen is %d; expected >= 1\n", r0, seqlen);
      else if (iters < 1) fprintf(stderr, "ex1 [rank %d]: -iters is %d; expected >= 1\n", r0, iters);
      else fprintf(stderr, "ex1 [rank %d]: -check_rows is %d, -check_keys %d; expected >= 0\n", r0, nrow, nkey);
    } else if (anybad && r0 == 0) fprintf(stderr, "ex1: stopping: another rank was given a bad option\n");
    if (anybad) {
      FMCall(FMOptionsSetValue("-options_left", "0")); /* the other options were never read: no warning about them */
      FMCall(FMFinalize());
      return 1;
    }
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
  FMCall(FMMaskGetSizes(mask, &seqlen, &seqlen_k, NULL));
  FMCall(FMMaskGetType(mask, &mtype));

  /* 4. Data: this rank's query rows and its share of the key/value positions (all of them on
        one rank). Each rank fills them from the same global random tensors. */
  FMCall(FMPlanGetLocalKeys(plan, &nkrows, &krows));
  x.es = FMDTypeSize(dtype);
  x.nq = (size_t)batch * nlocal * hq * dim; x.nk = (size_t)batch * nkrows * hkv * dim; x.nl = (size_t)batch * hq * nlocal;
  x.q = malloc(x.nq * x.es + 1); x.k = malloc(x.nk * x.es + 1); x.v = malloc(x.nk * x.es + 1); x.dout = malloc(x.nq * x.es + 1);
  x.o = malloc(x.nq * x.es + 1); x.dq = malloc(x.nq * x.es + 1); x.dk = malloc(x.nk * x.es + 1); x.dv = malloc(x.nk * x.es + 1);
  x.lse = malloc(x.nl * sizeof(float) + 1);
  fill(x.q, dtype, batch, nlocal, rows, hq, dim, 1);
  fill(x.k, dtype, batch, nkrows, krows, hkv, dim, 2);
  fill(x.v, dtype, batch, nkrows, krows, hkv, dim, 3);
  fill(x.dout, dtype, batch, nlocal, rows, hq, dim, 4);

  /* 5. Run on the chosen backend (device buffers on CUDA), timed. */
  FMCall(FMPlanGetFlops(plan, &flops));
  if (backend == FM_BACKEND_CUDA) FMCall(run_cuda(plan, &x, iters, &tf, &tb));
  else FMCall(run_cpu(plan, &x, iters, &tf, &tb));
  MPI_Allreduce(MPI_IN_PLACE, &tf, 1, MPI_DOUBLE, MPI_MAX, comm);
  MPI_Allreduce(MPI_IN_PLACE, &tb, 1, MPI_DOUBLE, MPI_MAX, comm);
  if (rank == 0) {
    char len[48];
    if (seqlen_k == seqlen) snprintf(len, sizeof len, "seqlen %d", seqlen);
    else snprintf(len, sizeof len, "seqlen_q %d, seqlen_k %d", seqlen, seqlen_k);
    printf("ex1: %s mask, %s, batch %d, heads %d/%d, head_dim %d, %s, backend %s, %d rank%s\n", mtype, len, batch, hq, hkv, dim,
           FMDTypeName(dtype), FMBackendName(backend), size, size > 1 ? "s" : "");
    /* TFLOP/s on a GPU, GFLOP/s where that would read 0.00 (the CPU backend, small problems) */
    const int tera = flops / tf > 1e12;
    printf("  forward  %9.3f ms  %8.2f %s\n", tf * 1e3, flops / tf * (tera ? 1e-12 : 1e-9), tera ? "TFLOP/s" : "GFLOP/s");
    printf("  backward %9.3f ms  %8.2f %s\n", tb * 1e3, 2.5 * flops / tb * (tera ? 1e-12 : 1e-9), tera ? "TFLOP/s" : "GFLOP/s");
  }

  /* 6. Check against a float64 reference computed here, from the mask's bounds. */
  FMCall(check(plan, mask, &x, nrow, nkey, comm, &ok));
  if (rank == 0) printf("%s\n", ok ? "ex1: OK" : "ex1: FAILED");

  FMCall(FMPlanDestroy(&plan));
  FMCall(FMMaskDestroy(&mask));
  FMCall(FMContextDestroy(&ctx));
  free(x.q); free(x.k); free(x.v); free(x.dout); free(x.o); free(x.dq); free(x.dk); free(x.dv); free(x.lse);
  FMCall(FMFinalize());
  return ok ? 0 : 1;
}

/*TEST

  # ex1 exits 0 when O, dQ, dK and dV agree with ex1's float64 reference (O, LSE, dQ on sampled rows; dK, dV on sampled key columns) within tolerance, 1 when not.
  test:
    suffix: 1
    nsize: 1
    args: -seqlen 1024 -fm_plan_heads 4 -fm_plan_kv_heads 2 -fm_plan_head_dim 64

  test:
    suffix: cpu_2
    nsize: 2
    args: -seqlen 700 -fm_plan_heads 2 -fm_plan_kv_heads 1 -fm_plan_head_dim 32 -fm_backend cpu

  # bf16 on 3 ranks against the float64 reference; the plan is printed once, and the log counts
  # only the plan under test (one forward, one backward)
  test:
    suffix: cpu_bf16_3
    nsize: 3
    args: -seqlen 640 -fm_plan_heads 4 -fm_plan_kv_heads 2 -fm_plan_head_dim 32 -fm_plan_dtype bf16 -fm_backend cpu -fm_plan_view -fm_log_view
    output: FMPlan: type cp, batch 1, heads 4 (kv 2), head_dim 32, bf16
    output: ex1: float64 reference on 16 rows (every head) and 8 key columns per rank
    output: ex1: OK
    output: FMPlanForward                   1 

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

  # a bad -seqlen is named as such
  test:
    suffix: bad_seqlen
    nsize: 2
    args: -seqlen -100 -fm_backend cpu
    returncode: 1
    output: ex1 [rank 0]: -seqlen is -100; expected >= 1

  # per-sample masks: two samples, each with its own document lengths (drawn from the seed), each
  # checked against its own bounds
  test:
    suffix: cpu_mask_batch
    nsize: 2
    args: -seqlen 600 -fm_plan_heads 2 -fm_plan_kv_heads 1 -fm_plan_head_dim 32 -fm_plan_batch 2 -fm_mask_batch 2 -fm_backend cpu
    output: ex1: OK

  # another mask and S_q != S_k: the header names them, and the reference agrees
  test:
    suffix: cpu_qk_sparse_sq
    nsize: 1
    args: -seqlen 512 -fm_mask_type qk_sparse -fm_mask_seqlen_q 256 -fm_plan_heads 2 -fm_plan_kv_heads 1 -fm_plan_head_dim 32 -fm_backend cpu
    output: ex1: qk_sparse mask, seqlen_q 256, seqlen_k 512, batch 1
    output: ex1: OK

TEST*/
