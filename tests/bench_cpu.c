/*
 * bench_cpu - times the CPU backend (FMCPUForward, FMCPUBackward) on a few masks and dtypes and a
 * naive dense single-threaded forward loop for comparison. Built with make check but not run as a
 * test. Times are the median of -reps runs after a warm-up (the best run is printed too, since a
 * shared machine adds noise). Throughput uses the FlashMask convention: forward FLOPs = 4 B H Sq Sk d (1 - rho), rho the
 * fraction of fully masked 128 x 128 tiles; backward = 2.5 x forward.
 *
 * Usage: bench_cpu [-S 4096] [-H 8] [-D 128] [-B 1] [-reps 3] [-naive_S 1024] [-masks full,causal,causal_document]
 *                  [-dtypes fp32,bf16] [-fm_num_threads n]
 */
#include <flashmask.h>
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#define CALL(expr)                                                                   \
  do {                                                                               \
    FMErrorCode e_ = (expr);                                                         \
    if (e_) { fprintf(stderr, "%s failed: %s\n", #expr, FMErrorString(e_)); exit(99); } \
  } while (0)

static double median(double *t, int n)
{
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && t[j - 1] > t[j]; j--) { double x = t[j]; t[j] = t[j - 1]; t[j - 1] = x; }
  return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

static void fill(void *t, size_t n, FMDType dt, unsigned *s)
{
  for (size_t i = 0; i < n; i++) {
    *s = *s * 1664525u + 1013904223u;
    FMFromFloat(t, i, dt, (float)((*s >> 8) * (1.0 / 16777216.0) * 2 - 1));
  }
}

/*
 * Naive dense forward, single thread, fp32: for each (b, h, i) the full row of scores with the
 * per-element mask test, max, exp, sum, then O = P V / l. Every score is computed (no skipping).
 */
static void naive_forward(const FMAttnProblem *p, const float *q, const float *k, const float *v, float *o, float *lse)
{
  const int B = p->batch, Hq = p->heads_q, Hkv = p->heads_kv, D = p->head_dim, Sq = p->nq, Sk = p->nk;
  const FMMaskDesc *m = &p->mask;
  float *s = malloc(sizeof(float) * (size_t)Sk);
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hq; h++) {
      int hk = h / (Hq / Hkv), hm = h / (Hq / m->mask_heads);
      const int32_t *lts = m->bnd[0] + (size_t)hm * Sk, *lte = m->bnd[1] + (size_t)hm * Sk;
      const int32_t *uts = m->bnd[2] + (size_t)hm * Sk, *ute = m->bnd[3] + (size_t)hm * Sk;
      for (int i = 0; i < Sq; i++) {
        const float *qi = q + (((size_t)b * Sq + i) * Hq + h) * D;
        float mx = -INFINITY, l = 0;
        for (int j = 0; j < Sk; j++) {
          const float *kj = k + (((size_t)b * Sk + j) * Hkv + hk) * D;
          float acc = 0;
          for (int d = 0; d < D; d++) acc += qi[d] * kj[d];
          int masked = (lts[j] <= i && i < lte[j]) || (uts[j] <= i && i < ute[j]) || (m->causal && j > i + Sk - Sq);
          s[j] = masked ? -INFINITY : acc * p->scale;
          if (s[j] > mx) mx = s[j];
        }
        float *oi = o + (((size_t)b * Sq + i) * Hq + h) * D;
        for (int d = 0; d < D; d++) oi[d] = 0;
        if (mx == -INFINITY) { lse[((size_t)b * Hq + h) * Sq + i] = -INFINITY; continue; }
        for (int j = 0; j < Sk; j++) {
          s[j] = expf(s[j] - mx);
          l += s[j];
        }
        for (int j = 0; j < Sk; j++) {
          const float *vj = v + (((size_t)b * Sk + j) * Hkv + hk) * D;
          for (int d = 0; d < D; d++) oi[d] += s[j] * vj[d];
        }
        for (int d = 0; d < D; d++) oi[d] /= l;
        lse[((size_t)b * Hq + h) * Sq + i] = mx + logf(l);
      }
    }
  free(s);
}

static FMMask make_mask(FMContext ctx, const char *type, int S)
{
  FMMask mask;
  CALL(FMMaskCreate(ctx, &mask));
  CALL(FMMaskSetSizes(mask, S, S, 1));
  CALL(FMMaskSetType(mask, type));
  CALL(FMMaskSetUp(mask));
  return mask;
}

int main(int argc, char **argv)
{
  int S = 4096, H = 8, D = 128, B = 1, reps = 3, naive_S = 1024, nthreads = 0;
  char masks[256] = "full,causal,causal_document", dtypes[64] = "fp32,bf16";
  FMContext ctx;
  CALL(FMInitialize(&argc, &argv, NULL, "bench_cpu: CPU backend timings"));
  CALL(FMOptionsGetInt("-S", "sequence length", &S, NULL));
  CALL(FMOptionsGetInt("-H", "heads (query = kv)", &H, NULL));
  CALL(FMOptionsGetInt("-D", "head dim", &D, NULL));
  CALL(FMOptionsGetInt("-B", "batch", &B, NULL));
  CALL(FMOptionsGetInt("-reps", "timed repetitions (median)", &reps, NULL));
  CALL(FMOptionsGetInt("-naive_S", "sequence length of the naive loop (0: skip)", &naive_S, NULL));
  CALL(FMOptionsGetInt("-fm_num_threads", "threads", &nthreads, NULL));
  CALL(FMOptionsGetString("-masks", "comma-separated mask types", masks, sizeof(masks), NULL));
  CALL(FMOptionsGetString("-dtypes", "comma-separated dtypes", dtypes, sizeof(dtypes), NULL));
  CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  CALL(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  CALL(FMContextSetUp(ctx));
#ifdef _OPENMP
  int th = nthreads > 0 ? nthreads : omp_get_max_threads();
#else
  int th = 1;
#endif
  printf("bench_cpu: S=%d H=%d D=%d B=%d threads=%d reps=%d (median)\n", S, H, D, B, th, reps);
  printf("%-16s %-5s %8s %8s %10s %10s %10s %10s %10s %10s\n", "mask", "dtype", "density", "rho", "fwd ms", "fwd GF/s", "best GF/s",
         "bwd ms", "bwd GF/s", "best GF/s");

  size_t nq = (size_t)B * S * H * D;
  char *mlist = strdup(masks);
  for (char *mt = strtok(mlist, ","); mt; mt = strtok(NULL, ",")) {
    FMMask mask = make_mask(ctx, mt, S);
    double density, rho;
    CALL(FMMaskGetDensity(mask, &density, &rho));
    char dl[64];
    strcpy(dl, dtypes);
    for (char *save = NULL, *dn = strtok_r(dl, ",", &save); dn; dn = strtok_r(NULL, ",", &save)) {
      FMDType dt = !strcmp(dn, "bf16") ? FM_DTYPE_BF16 : !strcmp(dn, "fp16") ? FM_DTYPE_FP16 : FM_DTYPE_FP32;
      size_t es = FMDTypeSize(dt);
      FMAttnProblem p;
      memset(&p, 0, sizeof(p));
      p.batch = B; p.heads_q = H; p.heads_kv = H; p.head_dim = D; p.dtype = dt;
      p.scale = (float)(1.0 / sqrt((double)D));
      p.nq = S; p.k0 = 0; p.nk = S; p.nthreads = nthreads;
      CALL(FMMaskGetDesc_Private(mask, &p.mask));
      void *q = malloc(nq * es), *k = malloc(nq * es), *v = malloc(nq * es), *o = malloc(nq * es), *dout = malloc(nq * es);
      void *dk = malloc(nq * es), *dv = malloc(nq * es);
      float *lse = malloc(sizeof(float) * (size_t)B * H * S), *dq = calloc(nq, sizeof(float));
      unsigned seed = 12345;
      fill(q, nq, dt, &seed); fill(k, nq, dt, &seed); fill(v, nq, dt, &seed); fill(dout, nq, dt, &seed);
      double tf[64], tb[64], flops = 4.0 * B * H * (double)S * S * D * (1 - rho);
      if (reps > 64) reps = 64;
      if (reps < 1) reps = 1;
      CALL(FMCPUForward(&p, q, k, v, o, dt, lse)); /* warm-up */
      for (int r = 0; r < reps; r++) {
        double t0 = FMTime();
        CALL(FMCPUForward(&p, q, k, v, o, dt, lse));
        tf[r] = FMTime() - t0;
      }
      for (int r = 0; r < reps; r++) {
        double t0 = FMTime();
        CALL(FMCPUBackward(&p, q, k, v, o, lse, dout, dq, dk, dv, dt));
        tb[r] = FMTime() - t0;
      }
      double mf = median(tf, reps), mb = median(tb, reps); /* sorts: t[0] is the best */
      printf("%-16s %-5s %8.3f %8.3f %10.1f %10.2f %10.2f %10.1f %10.2f %10.2f\n", mt, FMDTypeName(dt), density, rho, 1e3 * mf,
             flops / mf * 1e-9, flops / tf[0] * 1e-9, 1e3 * mb, 2.5 * flops / mb * 1e-9, 2.5 * flops / tb[0] * 1e-9);
      fflush(stdout);
      free(q); free(k); free(v); free(o); free(dout); free(dk); free(dv); free(lse); free(dq);
    }
    CALL(FMMaskDestroy(&mask));

    /* the naive dense single-threaded loop at naive_S, fp32, scaled to S by (S / naive_S)^2 */
    if (naive_S > 0) {
      FMMask nmask = make_mask(ctx, mt, naive_S);
      FMAttnProblem p;
      size_t n = (size_t)B * naive_S * H * D;
      memset(&p, 0, sizeof(p));
      p.batch = B; p.heads_q = H; p.heads_kv = H; p.head_dim = D; p.dtype = FM_DTYPE_FP32;
      p.scale = (float)(1.0 / sqrt((double)D));
      p.nq = naive_S; p.k0 = 0; p.nk = naive_S; p.nthreads = 1;
      CALL(FMMaskGetDesc_Private(nmask, &p.mask));
      float *q = malloc(n * 4), *k = malloc(n * 4), *v = malloc(n * 4), *o = malloc(n * 4), *lse = malloc(sizeof(float) * (size_t)B * H * naive_S);
      unsigned seed = 777;
      fill(q, n, FM_DTYPE_FP32, &seed); fill(k, n, FM_DTYPE_FP32, &seed); fill(v, n, FM_DTYPE_FP32, &seed);
      double t0 = FMTime();
      naive_forward(&p, q, k, v, o, lse);
      double tn = FMTime() - t0, t1;
      t0 = FMTime();
      CALL(FMCPUForward(&p, q, k, v, o, FM_DTYPE_FP32, lse)); /* ours, 1 thread, same size */
      t1 = FMTime() - t0;
      double scale = ((double)S / naive_S) * ((double)S / naive_S), dense = 4.0 * B * H * (double)naive_S * naive_S * D;
      printf("%-16s naive dense 1 thread at S=%d: %.1f ms (%.2f GF/s dense), ours 1 thread: %.1f ms; naive scaled to S=%d: %.0f ms\n", mt,
             naive_S, 1e3 * tn, dense / tn * 1e-9, 1e3 * t1, S, 1e3 * tn * scale);
      fflush(stdout);
      free(q); free(k); free(v); free(o); free(lse);
      CALL(FMMaskDestroy(&nmask));
    }
  }
  free(mlist);
  CALL(FMContextDestroy(&ctx));
  CALL(FMFinalize());
  return 0;
}
