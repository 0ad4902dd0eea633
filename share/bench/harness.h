/*
 * harness.h - what the kernels' two development harnesses (share/bench/bwd/bwd_bench.cu,
 * share/bench/fwd/fwd_bench.cu) share on the host: the CUDA check macro, the random numbers,
 * the column-bound masks they build (full, causal, sliding window, causal document, prefix LM,
 * random intervals, share question), the element test, rho of the FlashMask FLOP convention
 * (fraction of fully masked 128 x 128 tiles), the bf16/fp16 conversions and the event timing.
 * Host only, included once per harness.
 */
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CK(x)                                                                                     \
  do {                                                                                            \
    cudaError_t e_ = (x);                                                                         \
    if (e_ != cudaSuccess) {                                                                      \
      fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_));         \
      exit(1);                                                                                    \
    }                                                                                             \
  } while (0)

enum MaskKind { M_FULL, M_CAUSAL, M_SWA, M_DOC, M_PREFIX, M_RANDOM, M_SQ, M_NKIND };
static const char *mask_name[] = {"full",      "causal",       "sliding_window", "causal_document",
                                  "prefix_lm", "random_heads", "share_question"};

/* rows = mask_batch x mask_heads sets of column bounds: rows [lts, lte) and [uts, ute) of
   column j are masked, and when causal the rows above the bottom-right diagonal. */
struct HostMask {
  int Sq, Sk, heads, batch, causal;
  std::vector<int> lts, lte, uts, ute; /* [batch][heads][Sk] */
  std::vector<int> dead0, dead1;       /* per row set: rows [dead0, dead1) fully masked (random kind) */
  int rows() const { return heads * batch; }
};

/* 1 if the mask's bound vectors hide nothing (both intervals of every column empty: full, or
   causal by its flag): a device mask without bound vectors (FMGpuMask.present 0), the kernels'
   mask_dense. The harness's empty intervals are [Sq, Sq). */
static int host_dense(const HostMask &m)
{
  for (size_t i = 0; i < m.lts.size(); i++)
    if (m.lts[i] < m.lte[i] || m.uts[i] < m.ute[i]) return 0;
  return 1;
}

static unsigned long long rng_state = 0x1234567ull;
static int g_window = 300; /* sliding window size of M_SWA (diagonal included); 0: every key masked (the backward's sweep) */
static double urand()
{
  rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
  return (double)(rng_state >> 11) * (1.0 / 9007199254740992.0);
}

static inline int clip(int x, int lo, int hi) { return std::max(lo, std::min(hi, x)); }

/* Column bounds of a mask kind. Positions live on the key axis; row i sits at i + (Sk - Sq). */
static HostMask build_mask(MaskKind kind, int Sq, int Sk, int heads, int batch = 1)
{
  HostMask m;
  m.Sq = Sq, m.Sk = Sk, m.heads = heads, m.batch = batch;
  m.causal = kind == M_CAUSAL || kind == M_SWA || kind == M_DOC || kind == M_SQ;
  const size_t n = (size_t)m.rows() * Sk;
  m.lts.assign(n, Sq), m.lte.assign(n, Sq), m.uts.assign(n, Sq), m.ute.assign(n, Sq);
  m.dead0.assign(m.rows(), 0), m.dead1.assign(m.rows(), 0);
  const int off = Sk - Sq;
  for (int h = 0; h < m.rows(); h++) {
    const int r0 = (int)(urand() * Sq * 0.8), r1 = std::min(Sq, r0 + 1 + (int)(urand() * 40)); /* fully masked rows */
    if (kind == M_RANDOM) m.dead0[h] = r0, m.dead1[h] = r1;
    for (int j = 0; j < Sk; j++) {
      const size_t o = (size_t)h * Sk + j;
      switch (kind) {
      case M_SWA: m.lts[o] = g_window ? clip(j - off + g_window, 0, Sq) : 0; break; /* window of g_window keys, diagonal included */
      case M_DOC: m.lts[o] = clip(std::min(Sk, (j / 700 + 1) * 700) - off, 0, Sq); break; /* documents of 700 keys */
      case M_PREFIX: /* keys below 500 visible to all, the rest causal */
        if (j >= 500) m.uts[o] = 0, m.ute[o] = clip(j - off, 0, Sq);
        break;
      case M_SQ: { /* documents of 1400 keys: a question of 300 seen by the whole document, answers of 275 by themselves */
        const int ds = j / 1400 * 1400, de = std::min(Sk, ds + 1400), t = j - ds;
        const int end = t < 300 ? de : std::min(de, ds + 300 + ((t - 300) / 275 + 1) * 275);
        m.lts[o] = clip(end - off, 0, Sq);
        break;
      }
      case M_RANDOM: {
        int a = (int)(urand() * Sq), b = (int)(urand() * Sq);
        if (a > b) std::swap(a, b);
        m.lts[o] = a, m.lte[o] = b;
        if (urand() < 0.03) m.lts[o] = 0, m.lte[o] = Sq; /* fully masked column */
        m.uts[o] = r0, m.ute[o] = r1;
        break;
      }
      default: break;
      }
    }
  }
  return m;
}

static inline bool masked(const HostMask &m, int h, int i, int j)
{
  const size_t o = (size_t)h * m.Sk + j;
  return (i >= m.lts[o] && i < m.lte[o]) || (i >= m.uts[o] && i < m.ute[o]) || (m.causal && j > i + m.Sk - m.Sq);
}

/* The columns [j0, j0 + n) of a non-causal mask as a mask of their own (for the merge cases). */
static HostMask slice_keys(const HostMask &m, int j0, int n)
{
  HostMask s = m;
  s.Sk = n;
  for (auto *v : {&s.lts, &s.lte, &s.uts, &s.ute}) v->assign((size_t)m.rows() * n, 0);
  for (int h = 0; h < m.rows(); h++)
    for (int j = 0; j < n; j++) {
      const size_t a = (size_t)h * n + j, b = (size_t)h * m.Sk + j0 + j;
      s.lts[a] = m.lts[b], s.lte[a] = m.lte[b], s.uts[a] = m.uts[b], s.ute[a] = m.ute[b];
    }
  return s;
}

/* Whether every row of [m0, m1) is masked in column j of row set h. */
static bool rows_masked(const HostMask &m, int h, int j, int m0, int m1)
{
  const size_t o = (size_t)h * m.Sk + j;
  const int a[3] = {m.lts[o], m.uts[o], 0}, b[3] = {m.lte[o], m.ute[o], m.causal ? j - (m.Sk - m.Sq) : 0};
  int cur = m0;
  for (bool moved = true; cur < m1 && moved;) {
    moved = false;
    for (int t = 0; t < 3; t++)
      if (a[t] <= cur && cur < b[t]) cur = b[t], moved = true;
  }
  return cur >= m1;
}

/* rho of the FlashMask convention (doc/performance.md): the fraction of 128 x 128 tiles of row
   set h, the last ones short, with every element masked. */
static double block_sparsity(const HostMask &m, int h)
{
  const int bs = 128, nqb = (m.Sq + bs - 1) / bs, nkb = (m.Sk + bs - 1) / bs;
  long skipped = 0;
#pragma omp parallel for reduction(+ : skipped) schedule(dynamic, 4)
  for (int qb = 0; qb < nqb; qb++)
    for (int kb = 0; kb < nkb; kb++) {
      bool all = true;
      for (int j = kb * bs; j < std::min(m.Sk, (kb + 1) * bs) && all; j++)
        all = rows_masked(m, h, j, qb * bs, std::min(m.Sq, (qb + 1) * bs));
      skipped += all;
    }
  return (double)skipped / ((double)nqb * nkb);
}

static float h2f(uint16_t x, int f16)
{
  if (f16) {
    __half_raw r;
    r.x = x;
    return __half2float(__half(r));
  }
  uint32_t u = (uint32_t)x << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}
static uint16_t f2h(float x, int f16)
{
  if (f16) return ((__half_raw)__float2half_rn(x)).x;
  return ((__nv_bfloat16_raw)__float2bfloat16_rn(x)).x;
}

/* The median of reps event-timed runs of call() on the default stream (ms, sorted: front and back
   are the fastest and slowest); warm up before. With FM_BENCH_WARM_S=T in the environment, first
   call() back to back for T seconds untimed, then time at least 10 runs: the steady state a long
   training run sees (power and clocks settled), not a short burst's. */
template <class F> static float time_median(int reps, std::vector<float> &ms, F call)
{
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0));
  CK(cudaEventCreate(&e1));
  ms.clear();
  if (const char *w = getenv("FM_BENCH_WARM_S")) {
    const double secs = atof(w);
    float el = 0.f;
    CK(cudaEventRecord(e0));
    while (el < 1e3 * secs) {
      for (int i = 0; i < 4; i++) call();
      CK(cudaEventRecord(e1));
      CK(cudaEventSynchronize(e1));
      CK(cudaEventElapsedTime(&el, e0, e1));
    }
    reps = std::max(reps, 10);
  }
  for (int r = 0; r < reps; r++) {
    CK(cudaEventRecord(e0));
    call();
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float t;
    CK(cudaEventElapsedTime(&t, e0, e1));
    ms.push_back(t);
  }
  cudaEventDestroy(e0), cudaEventDestroy(e1);
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2];
}
