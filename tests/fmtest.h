/*
 * fmtest.h - helpers shared by the C tests: a deterministic RNG, a check macro that counts
 * failures, and a naive float64 dense attention (forward and backward) used as the reference.
 * Header-only (static functions); include it from a test's .c file.
 */
#ifndef FMTEST_H
#define FMTEST_H
#include <flashmask.h>
#include <ctype.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int fmt_failures;

/* FMT_CHECK(cond, fmt, ...): record a failure with a message; never aborts. */
/* FMT_SKIP_MAIN(why): the whole main() of a test this build cannot run: prints SKIP, exits 77. */
#define FMT_SKIP_MAIN(why)                                                           \
  int main(int argc, char **argv)                                                    \
  {                                                                                  \
    (void)argc;                                                                      \
    (void)argv;                                                                      \
    printf("SKIP: %s\n", why);                                                       \
    return 77;                                                                       \
  }

#define FMT_CHECK(cond, ...)                                                         \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fmt_failures++;                                                                \
      fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                           \
      fprintf(stderr, __VA_ARGS__);                                                  \
      fprintf(stderr, "\n");                                                         \
    }                                                                                \
  } while (0)

/* FMT_CALL(expr): a library call that must succeed; exits 99 (hard error) otherwise. */
#define FMT_CALL(expr)                                                               \
  do {                                                                               \
    FMErrorCode fmt_e_ = (expr);                                                     \
    if (fmt_e_ != FM_SUCCESS) {                                                      \
      fprintf(stderr, "HARD ERROR %s:%d: %s returned %s\n", __FILE__, __LINE__, #expr, FMErrorString(fmt_e_)); \
      exit(99);                                                                      \
    }                                                                                \
  } while (0)

/* FMT_CU_ABORT(expr, rank, what): a CUDA runtime call in an MPI test (include cuda_runtime_api.h
   first); a failure aborts every rank with 99, since a rank left behind in a collective would hang
   the job. what: a string naming the case (or ""). */
#define FMT_CU_ABORT(expr, rank, what)                                               \
  do {                                                                               \
    cudaError_t fmt_cu_ = (expr);                                                    \
    if (fmt_cu_ != cudaSuccess) {                                                    \
      fprintf(stderr, "HARD ERROR %s:%d rank %d%s%s: %s: %s\n", __FILE__, __LINE__, (rank), *(what) ? ", case " : "", (what), \
              #expr, cudaGetErrorString(fmt_cu_));                                   \
      MPI_Abort(MPI_COMM_WORLD, 99);                                                 \
    }                                                                                \
  } while (0)
/* FMT_CALL_ABORT(expr, rank, what): the same for a library call. */
#define FMT_CALL_ABORT(expr, rank, what)                                             \
  do {                                                                               \
    FMErrorCode fmt_e_ = (expr);                                                     \
    if (fmt_e_ != FM_SUCCESS) {                                                      \
      fprintf(stderr, "HARD ERROR %s:%d rank %d%s%s: %s returned %s\n", __FILE__, __LINE__, (rank), *(what) ? ", case " : "", \
              (what), #expr, FMErrorString(fmt_e_));                                 \
      MPI_Abort(MPI_COMM_WORLD, 99);                                                 \
    }                                                                                \
  } while (0)

/* Whether the last error message contains s (NULL: anything). */
static inline int fmt_msg_has(const char *s)
{
  const char *m = FMGetLastErrorMessage();
  size_t n = s ? strlen(s) : 0;
  if (!s) return 1;
  for (; *m; m++) {
    size_t i = 0;
    while (i < n && m[i] && tolower((unsigned char)m[i]) == tolower((unsigned char)s[i])) i++;
    if (i == n) return 1;
  }
  return n == 0;
}

/* FMT_EXPECT_ERR(expr, code, substr): the call must fail with code and a message containing substr. */
#define FMT_EXPECT_ERR(expr, code, substr)                                           \
  do {                                                                               \
    FMErrorCode fmt_e_ = (expr);                                                     \
    FMT_CHECK(fmt_e_ == (code), "%s returned %s, expected %s", #expr, FMErrorString(fmt_e_), FMErrorString(code)); \
    if (fmt_e_ == (code) && !fmt_msg_has(substr))                                    \
      FMT_CHECK(0, "%s: message \"%s\" does not mention \"%s\"", #expr, FMGetLastErrorMessage(), (const char *)(substr)); \
  } while (0)

/* splitmix64 */
static inline uint64_t fmt_next(uint64_t *s)
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
/* uniform in [-1, 1), never exactly 0 */
static inline double fmt_uniform(uint64_t *s)
{
  double x = (double)(fmt_next(s) >> 11) * 0x1.0p-53 * 2.0 - 1.0;
  return x == 0.0 ? 0.5 : x;
}
/* A fresh seed per run (time-based) unless FMTEST_SEED is set; printed so failures can be replayed. */
static inline uint64_t fmt_seed(void)
{
  const char *e = getenv("FMTEST_SEED");
  uint64_t s = e ? strtoull(e, NULL, 0) : (uint64_t)time(NULL) ^ ((uint64_t)clock() << 20);
  printf("FMTEST_SEED=%llu\n", (unsigned long long)s);
  return s;
}

/* Callback: whether query row i (global) may not see key j for mask head mh. */
typedef int (*fmt_masked_fn)(void *ctx, int mh, int i, int j);

/*
 * fmt_ref_attention - naive float64 dense attention over full tensors.
 *   q [B][Sq][Hq][D], k, v [B][Sk][Hkv][D] (double); mask heads mh = 1 or Hkv.
 *   o [B][Sq][Hq][D], lse [B][Hq][Sq]; if dout != NULL also dq, dk, dv (same layouts as q, k, v).
 *   Fully masked rows: o = 0, lse = -inf, no gradient.
 */
static inline void fmt_ref_attention(int B, int Hq, int Hkv, int D, int Sq, int Sk, int mh, double scale, fmt_masked_fn masked,
                              void *mctx, const double *q, const double *k, const double *v, double *o, double *lse,
                              const double *dout, double *dq, double *dk, double *dv)
{
  double *p = (double *)malloc(sizeof(double) * (size_t)Sk);
  double *dp = (double *)malloc(sizeof(double) * (size_t)Sk);
  int g = Hq / Hkv, gm = Hq / mh;
  if (dout) {
    memset(dq, 0, sizeof(double) * (size_t)B * Sq * Hq * D);
    memset(dk, 0, sizeof(double) * (size_t)B * Sk * Hkv * D);
    memset(dv, 0, sizeof(double) * (size_t)B * Sk * Hkv * D);
  }
  for (int b = 0; b < B; b++)
    for (int h = 0; h < Hq; h++) {
      int hk = h / g, hm = h / gm;
      for (int i = 0; i < Sq; i++) {
        const double *qi = q + (((size_t)b * Sq + i) * Hq + h) * D;
        double m = -INFINITY, l = 0;
        for (int j = 0; j < Sk; j++) {
          if (masked(mctx, hm, i, j)) { p[j] = -INFINITY; continue; }
          const double *kj = k + (((size_t)b * Sk + j) * Hkv + hk) * D;
          double s = 0;
          for (int d = 0; d < D; d++) s += qi[d] * kj[d];
          p[j] = s * scale;
          if (p[j] > m) m = p[j];
        }
        double *oi = o + (((size_t)b * Sq + i) * Hq + h) * D;
        for (int d = 0; d < D; d++) oi[d] = 0;
        if (m == -INFINITY) { lse[((size_t)b * Hq + h) * Sq + i] = -INFINITY; continue; }
        for (int j = 0; j < Sk; j++) { p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - m); l += p[j]; }
        for (int j = 0; j < Sk; j++) {
          if (p[j] == 0) continue;
          const double *vj = v + (((size_t)b * Sk + j) * Hkv + hk) * D;
          for (int d = 0; d < D; d++) oi[d] += p[j] / l * vj[d];
        }
        lse[((size_t)b * Hq + h) * Sq + i] = m + log(l);
        if (!dout) continue;
        const double *doi = dout + (((size_t)b * Sq + i) * Hq + h) * D;
        double Di = 0;
        for (int d = 0; d < D; d++) Di += doi[d] * oi[d];
        for (int j = 0; j < Sk; j++) {
          double pj = p[j] / l;
          if (pj == 0) continue;
          const double *vj = v + (((size_t)b * Sk + j) * Hkv + hk) * D;
          double s = 0;
          for (int d = 0; d < D; d++) s += doi[d] * vj[d];
          dp[j] = pj * (s - Di); /* dS */
          double *dvj = dv + (((size_t)b * Sk + j) * Hkv + hk) * D;
          double *dkj = dk + (((size_t)b * Sk + j) * Hkv + hk) * D;
          const double *kj = k + (((size_t)b * Sk + j) * Hkv + hk) * D;
          double *dqi = dq + (((size_t)b * Sq + i) * Hq + h) * D;
          for (int d = 0; d < D; d++) {
            dvj[d] += pj * doi[d];
            dkj[d] += scale * dp[j] * qi[d];
            dqi[d] += scale * dp[j] * kj[d];
          }
        }
      }
    }
  free(p);
  free(dp);
}

/* fmt_lse_round - how far the Hopper forward's LSE may lie from the exact one through the rounding
   of the probabilities it sums: at head_dim 64 the tensor core adds them as rounded to the input
   type, within 2^-9 of the sum for bf16 and 2^-11 for fp16 (|ln| at most 2.0e-3 and 4.9e-4;
   FMPlanForward, fmplan.h); elsewhere 0 (fp32 sums). */
static inline double fmt_lse_round(FMDType dt, int head_dim)
{
  if (head_dim != 64) return 0;
  return dt == FM_DTYPE_BF16 ? 2.0e-3 : dt == FM_DTYPE_FP16 ? 4.9e-4 : 0;
}

/* Relative error ||a - b|| / ||b|| (2-norm); NaN in a gives +inf. */
static inline double fmt_relerr(const double *a, const double *b, size_t n)
{
  double num = 0, den = 0;
  for (size_t i = 0; i < n; i++) {
    if (isnan(a[i])) return INFINITY;
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* FMT_SKIP_WITHOUT_GPU(): in main after FMInitialize, for the GPU tests: print SKIP, finalize and
   return 77 when there is no CUDA device (a CUDA error from the count is a hard error, 99). */
#define FMT_SKIP_WITHOUT_GPU()                                                        \
  do {                                                                               \
    int nd_ = 0;                                                                     \
    FMT_CALL(FMCudaDeviceCount(&nd_));                                               \
    if (nd_ == 0) {                                                                  \
      printf("SKIP: no CUDA device\n");                                              \
      FMFinalize();                                                                  \
      return 77;                                                                     \
    }                                                                                \
  } while (0)

/* fmt_cuda_context: a context on the CUDA backend, the options database read, set up. */
static inline FMContext fmt_cuda_context(void)
{
  FMContext ctx;
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetBackend(ctx, FM_BACKEND_CUDA));
  FMT_CALL(FMContextSetFromOptions(ctx));
  FMT_CALL(FMContextSetUp(ctx));
  return ctx;
}

/* fmt_finish: print the verdict; returns the exit code (0 pass, 1 fail). */
static inline int fmt_finish(const char *name)
{
  if (fmt_failures) fprintf(stderr, "%s: %d check(s) FAILED\n", name, fmt_failures);
  else printf("%s: all checks passed\n", name);
  return fmt_failures ? 1 : 0;
}
#endif
