/*
 * fwd_bench.cu - standalone development harness of the GPU forward (fmgpu.cuh): no MPI, no
 * library build. Builds random inputs and column-bound masks itself (../harness.h), makes their
 * device form with the library's own prepass (FMGpuMaskCreate, cuda_mask.cu), fills
 * FMGpuFwdParams as src/kernels/cuda.cu does and takes the same dispatch (the Hopper kernel on
 * sm_90 when FMSm90ForwardSupported, else the SIMT fallback). Checks O and LSE against a float64
 * CPU reference and times the forward with CUDA events. Build (from the top of the tree, ~15 s):
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --use_fast_math -Iinclude -Xcompiler -fopenmp \
 *     share/bench/fwd/fwd_bench.cu src/kernels/cuda_mask.cu src/kernels/sm90/fwd_sm90.cu \
 *     src/kernels/simt/fwd_fallback.cu -o fwd_bench
 *
 *   ./fwd_bench check [word] correctness cases (one PASS/FAIL line each, then "check: N of M cases failed");
 *                            with word, only the cases whose name or mask contains it (e.g. d256, fp16, merged)
 *   ./fwd_bench small        one small case (for compute-sanitizer)
 *   ./fwd_bench tiles        host only: the wide kernel's counted tiles and element test against the mask
 *   ./fwd_bench bench [reps] bf16, 128K tokens per batch: d = 128 H = 32 every mask at 8K and 32K,
 *                            d = 256 H = 16 and d = 64 H = 64 at 8K (full, causal), GQA 4:1 (kv 8) at 8K
 *   ./fwd_bench ab [reps]    short A/B table: full, causal, sliding window, causal document at 8K; full, causal at 32K
 *   ./fwd_bench ab64 [reps]  d = 64 (H = 64) A/B table: full, causal, sliding window, causal document, share question,
 *                            random eviction at 8K and 32K
 *   ./fwd_bench wsweep [reps] sliding windows of 150 to 3000 keys at 8K (d = 128, H = 32): the three
 *                            schedules side by side, where auto's static-or-dynamic rule is decided
 *   ./fwd_bench prof S kind [d]  one warm-up and one call (ncu -k regex:fwd_kernel -s 1 -c 1); kind: name or index
 *   ./fwd_bench tileprof [reps]  a -DFMFWD_PROF build: the masks with bound vectors at 8K and 32K (d = 128) under a
 *                            persistent schedule (FWD_SCHED, default dynamic here), each with a consumer's cycles per
 *                            tile by phase
 *   ./fwd_bench rho          host only: each mask's rho and element density at 8K and 32K
 *   ./fwd_bench probe        exit 0 when a CUDA device is there, 2 when not
 */
#include <cuda_runtime.h>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <omp.h>
#include "../../../src/kernels/fmgpu.cuh"
#include "../../../src/kernels/sm90/fwd_sm90.cuh"
#include "../../../src/kernels/sm90/blocklist.cuh" /* WideTiles, for the host-only tiles mode */
#include "../../../src/kernels/sm90/mainloop.cuh"  /* mask_limit, likewise */
#include "../harness.h"

static int g_sm90 = 0; /* the current device is sm_90 (the library's condition for the Hopper kernel) */
/* the Hopper forward's schedule for every mode (env FWD_SCHED grid|static|dynamic, FWD_CTAS: as
   -fm_sm90_schedule and -fm_sm90_ctas); the sched mode times all three itself */
static int g_sched = FM_GPU_SCHED_GRID, g_ctas = 0;
static const char *const kSchedName[3] = {"grid", "static", "dynamic"};
#ifdef FMFWD_PROF
static int g_tileprof = 0; /* tileprof: where a persistent tile's time goes (a -DFMFWD_PROF build) */
cudaError_t FMFwdSm90Prof(unsigned long long *sum); /* fwd_sm90.cu, that build only */
#endif

/* The device copy of a host mask, through the library's prepass: all four vectors, or none where
   they hide nothing (full, causal), as the library uploads its full and causal masks. */
static FMGpuMask *upload(const HostMask &m)
{
  const int32_t *bnd[4] = {m.lts.data(), m.lte.data(), m.uts.data(), m.ute.data()};
  FMGpuMask *d = NULL;
  CK(FMGpuMaskCreate(m.Sq, m.Sk, m.heads, m.batch, m.causal, host_dense(m) ? 0 : 15, bnd, &d));
  return d;
}

/* forward()'s path (FM_SM90_FWD_*, 0 the fallback) by name; -2: the persistent kernel's result differed from the grid's,
   -3: a call of a merged case took another kernel than its half of the mask asks for */
static const char *path_name(int path)
{
  return path == -3 ? "mixed" : path == -2 ? "sm90p!=grid" : path == FM_SM90_FWD_WIDE ? "sm90w" : path == FM_SM90_FWD_PERSISTENT ? "sm90p" : path ? "sm90" : "fallback";
}

/* FMGpuFwdParams as cuda.cu's fill_params fills them (dense layouts; keys of a row stride kS). */
static void fill(FMGpuFwdParams *gp, const FMGpuMask *dm, int B, int Hq, int Hkv, int D, int f16, float scale, int kS,
                 const void *q, const void *k, const void *v, void *o, float *o32, int merge, float *lse)
{
  FMGpuFwdParamsDense(gp, dm, B, dm->seqlen_q, dm->seqlen_k, kS > 0 ? kS : dm->seqlen_k, Hq, Hkv, D, f16, scale, 0, q, k, v, o, o32, merge,
                      lse);
  gp->schedule = g_sched;
  gp->ctas = g_ctas;
}

/* cuda.cu's dispatch: the Hopper kernel that ran (FM_SM90_FWD_*: 1 grid, 2 persistent, 3 wide), 0 = the fallback. */
static int forward(const FMGpuFwdParams *gp, int force_fallback)
{
  if (g_sm90 && !force_fallback && FMSm90ForwardSupported(gp)) {
    int path = 0;
    CK(FMSm90Forward(gp, 0, &path));
    return path;
  }
  CK(FMGpuFallbackForward(gp, 0));
  return 0;
}

struct Case {
  const char *name;
  int B, Sq, Sk, Hq, Hkv, D, f16;
  int per_head;  /* one mask head per query head (else one for all) */
  int per_batch; /* one mask per sample (mask_batch = B) */
  int fallback;  /* force the SIMT fallback */
  int out32;     /* 0: O in dtype; 1: fp32 O (o32); 2: fp32 O merged over two key ranges (non-causal kinds) */
  MaskKind kind;
  float scale;
};

/* The kernel forward() must take for a case's mask m (FM_SM90_FWD_*, 0 the fallback): under
   FWD_SCHED persistent for d 64, 128; wide without bound vectors at d = 256, and at d = 128 on the grid. */
static int want_path(const Case &c, const HostMask &m)
{
  const int D = c.D;
  if (!g_sm90 || c.fallback || (D != 64 && D != 128 && D != 256)) return 0;
  if (D == 256) return FM_SM90_WIDE256 && host_dense(m) ? FM_SM90_FWD_WIDE : FM_SM90_FWD_GRID;
  if (g_sched != FM_GPU_SCHED_GRID) return FM_SM90_FWD_PERSISTENT;
  return D == 128 && FM_SM90_WIDE128 && host_dense(m) ? FM_SM90_FWD_WIDE : FM_SM90_FWD_GRID;
}

/* The rows checked: all of them up to 1100, else ~200 spread ones, both ends and the fully masked rows. */
static std::vector<int> check_rows(const HostMask &m)
{
  std::vector<int> r;
  if (m.Sq <= 1100) {
    for (int i = 0; i < m.Sq; i++) r.push_back(i);
    return r;
  }
  const int step = m.Sq / 200, ph = (int)(urand() * step);
  for (int i = 0; i < 8; i++) r.push_back(i), r.push_back(m.Sq - 1 - i);
  for (int i = ph; i < m.Sq; i += step) r.push_back(i);
  for (int h = 0; h < m.rows(); h++)
    for (int i = m.dead0[h]; i < std::min(m.dead1[h], m.dead0[h] + 4); i++) r.push_back(i);
  if (m.causal && m.Sq > m.Sk) /* rows above the diagonal's start see nothing */
    for (int i = m.Sq - m.Sk - 4; i < m.Sq - m.Sk + 4; i++) r.push_back(i);
  std::sort(r.begin(), r.end());
  r.erase(std::unique(r.begin(), r.end()), r.end());
  return r;
}

/* float64 O and LSE of the checked rows: ro [b][hq][row][D], rl [b][hq][row] (-inf: nothing visible, O = 0). */
static void reference(const Case &c, const HostMask &m, const std::vector<int> &rows, const std::vector<uint16_t> &q,
                      const std::vector<float> &kf, const std::vector<float> &vf, std::vector<double> &ro, std::vector<double> &rl)
{
  const int B = c.B, Sq = c.Sq, Sk = c.Sk, Hq = c.Hq, Hkv = c.Hkv, D = c.D, G = Hq / Hkv, MH = m.heads, MB = m.batch;
  const size_t nr = rows.size();
#pragma omp parallel
  {
    std::vector<double> s(Sk), qd(D), ov(D);
#pragma omp for schedule(dynamic, 4)
    for (long t = 0; t < (long)(B * Hq * nr); t++) {
      const int b = (int)(t / (Hq * nr)), hq = (int)(t / nr % Hq), i = rows[t % nr], hkv = hq / G;
      const int mrow = (MB > 1 ? b * MH : 0) + hq / (Hq / MH);
      for (int d = 0; d < D; d++) qd[d] = h2f(q[(((size_t)b * Sq + i) * Hq + hq) * D + d], c.f16);
      double mx = -INFINITY, l = 0;
      for (int j = 0; j < Sk; j++) {
        if (masked(m, mrow, i, j)) { s[j] = -INFINITY; continue; }
        const float *kr = &kf[(((size_t)b * Sk + j) * Hkv + hkv) * D];
        double a = 0;
        for (int d = 0; d < D; d++) a += qd[d] * kr[d];
        s[j] = a * c.scale;
        mx = std::max(mx, s[j]);
      }
      std::fill(ov.begin(), ov.end(), 0.0);
      if (mx != -INFINITY)
        for (int j = 0; j < Sk; j++)
          if (s[j] != -INFINITY) {
            const double p = exp(s[j] - mx);
            const float *vr = &vf[(((size_t)b * Sk + j) * Hkv + hkv) * D];
            l += p;
            for (int d = 0; d < D; d++) ov[d] += p * vr[d];
          }
      for (int d = 0; d < D; d++) ro[(size_t)t * D + d] = l > 0 ? ov[d] / l : 0.0;
      rl[t] = l > 0 ? mx + log(l) : -INFINITY;
    }
  }
}

static int run_case(const Case &c)
{
  const int B = c.B, Sq = c.Sq, Sk = c.Sk, Hq = c.Hq, Hkv = c.Hkv, D = c.D;
  const int MH = c.per_head ? Hq : 1, MB = c.per_batch ? B : 1;
  const double tol = c.f16 ? 5e-3 : 2e-2;
  HostMask m = build_mask(c.kind, Sq, Sk, MH, MB);
  const std::vector<int> rows = check_rows(m);
  const size_t nq = (size_t)B * Sq * Hq * D, nk = (size_t)B * Sk * Hkv * D, nl = (size_t)B * Hq * Sq;
  std::vector<uint16_t> q(nq), k(nk), v(nk);
  for (auto &x : q) x = f2h((float)(2 * urand() - 1), c.f16);
  for (auto &x : k) x = f2h((float)(2 * urand() - 1), c.f16);
  for (auto &x : v) x = f2h((float)(2 * urand() - 1), c.f16);
  std::vector<float> kf(nk), vf(nk);
  for (size_t x = 0; x < nk; x++) kf[x] = h2f(k[x], c.f16), vf[x] = h2f(v[x], c.f16);
  const size_t nr = rows.size();
  std::vector<double> ro((size_t)B * Hq * nr * D), rl((size_t)B * Hq * nr);
  reference(c, m, rows, q, kf, vf, ro, rl);

  /* GPU: outputs poisoned with NaN (0xFF bytes) before the call */
  void *q_, *k_, *v_, *o_;
  float *lse_;
  const size_t osz = c.out32 ? 4 : 2;
  CK(cudaMalloc(&q_, nq * 2));
  CK(cudaMalloc(&k_, nk * 2));
  CK(cudaMalloc(&v_, nk * 2));
  CK(cudaMalloc(&o_, nq * osz));
  CK(cudaMalloc(&lse_, nl * 4));
  CK(cudaMemcpy(q_, q.data(), nq * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(k_, k.data(), nk * 2, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(v_, v.data(), nk * 2, cudaMemcpyHostToDevice));
  CK(cudaMemset(o_, 0xFF, nq * osz));
  CK(cudaMemset(lse_, 0xFF, nl * 4));
  int path;
  FMGpuFwdParams gp;
  if (c.out32 == 2 && m.causal) {
    fprintf(stderr, "%s: the merged cases slice the keys of a non-causal mask; %s is causal\n", c.name, mask_name[c.kind]);
    exit(1);
  }
  if (c.out32 == 2) { /* keys [0, split) overwrite (o32, lse), keys [split, Sk) merge into them */
    const int split = Sk * 2 / 5;
    const HostMask m0 = slice_keys(m, 0, split), m1 = slice_keys(m, split, Sk - split);
    FMGpuMask *d0 = upload(m0), *d1 = upload(m1);
    const size_t ko = (size_t)split * Hkv * D * 2;
    fill(&gp, d0, B, Hq, Hkv, D, c.f16, c.scale, Sk, q_, k_, v_, NULL, (float *)o_, 0, lse_);
    path = forward(&gp, c.fallback);
    fill(&gp, d1, B, Hq, Hkv, D, c.f16, c.scale, Sk, q_, (char *)k_ + ko, (char *)v_ + ko, NULL, (float *)o_, 1, lse_);
    /* each half must take its own mask's kernel; the case reports the whole mask's */
    const int p1 = forward(&gp, c.fallback);
    path = path == want_path(c, m0) && p1 == want_path(c, m1) ? want_path(c, m) : -3;
    CK(cudaDeviceSynchronize());
    FMGpuMaskDestroy(d0), FMGpuMaskDestroy(d1);
  } else {
    FMGpuMask *dm = upload(m);
    fill(&gp, dm, B, Hq, Hkv, D, c.f16, c.scale, Sk, q_, k_, v_, c.out32 ? NULL : o_, c.out32 ? (float *)o_ : NULL, 0, lse_);
    path = forward(&gp, c.fallback);
    CK(cudaDeviceSynchronize());
    if (path == 2) { /* the persistent kernel must give the grid kernel's result bit for bit */
      void *o2;
      float *l2;
      CK(cudaMalloc(&o2, nq * osz));
      CK(cudaMalloc(&l2, nl * 4));
      CK(cudaMemset(o2, 0xFF, nq * osz));
      CK(cudaMemset(l2, 0xFF, nl * 4));
      FMGpuFwdParams g2;
      fill(&g2, dm, B, Hq, Hkv, D, c.f16, c.scale, Sk, q_, k_, v_, c.out32 ? NULL : o2, c.out32 ? (float *)o2 : NULL, 0, l2);
      g2.schedule = FM_GPU_SCHED_GRID;
      const int gpath = forward(&g2, 0); /* the wide kernel (d = 128 full, causal) sums over other tiles: not compared */
      CK(cudaDeviceSynchronize());
      std::vector<unsigned char> a(nq * osz), b2(nq * osz), la(nl * 4), lb(nl * 4);
      CK(cudaMemcpy(a.data(), o_, nq * osz, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(b2.data(), o2, nq * osz, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(la.data(), lse_, nl * 4, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy(lb.data(), l2, nl * 4, cudaMemcpyDeviceToHost));
      if (gpath == FM_SM90_FWD_GRID && (a != b2 || la != lb)) path = -2; /* reported as unexpected */
      cudaFree(o2), cudaFree(l2);
    }
    FMGpuMaskDestroy(dm);
  }
  std::vector<uint16_t> go(c.out32 ? 0 : nq);
  std::vector<float> go32(c.out32 ? nq : 0), gl(nl);
  CK(cudaMemcpy(c.out32 ? (void *)go32.data() : (void *)go.data(), o_, nq * osz, cudaMemcpyDeviceToHost));
  CK(cudaMemcpy(gl.data(), lse_, nl * 4, cudaMemcpyDeviceToHost));
  auto O = [&](size_t x) { return c.out32 ? (double)go32[x] : (double)h2f(go[x], c.f16); };

  /* every output written (no NaN left anywhere), then the checked rows against float64 */
  size_t nan = 0;
  for (size_t x = 0; x < nq; x++) nan += std::isnan(O(x));
  for (size_t x = 0; x < nl; x++) nan += std::isnan(gl[x]);
  double e2 = 0, n2 = 0, el = 0;
  long dead = 0, deadbad = 0;
  for (size_t t = 0; t < (size_t)B * Hq * nr; t++) {
    const int b = (int)(t / (Hq * nr)), hq = (int)(t / nr % Hq), i = rows[t % nr];
    const double lg = gl[((size_t)b * Hq + hq) * Sq + i];
    const size_t oo = (((size_t)b * Sq + i) * Hq + hq) * D;
    if (rl[t] == -INFINITY) { /* nothing visible: O = 0, LSE = -inf exactly */
      bool ok = lg == -INFINITY;
      for (int d = 0; d < D; d++) ok = ok && O(oo + d) == 0.0;
      dead++, deadbad += !ok;
      continue;
    }
    el = std::max(el, std::isfinite(lg) ? fabs(lg - rl[t]) / std::max(1.0, fabs(rl[t])) : INFINITY);
    for (int d = 0; d < D; d++) {
      const double g = O(oo + d), r = ro[t * D + d];
      e2 += std::isfinite(g) ? (g - r) * (g - r) : INFINITY;
      n2 += r * r;
    }
  }
  const double eo = sqrt(e2 / (n2 > 0 ? n2 : 1));
  const int want = want_path(c, m);
  const int ok = eo <= tol && el <= tol && nan == 0 && deadbad == 0 && path == want;
  printf("%-38s %-15s %-8s%s O %.2e LSE %.2e rows %zu/%d masked %ld bad %ld nan %zu  %s\n", c.name, mask_name[c.kind],
         path_name(path), path == want ? "" : "(unexpected)", eo, el, nr,
         Sq, dead, deadbad, nan,
         ok ? "PASS" : "FAIL");
  fflush(stdout);
  cudaFree(q_), cudaFree(k_), cudaFree(v_), cudaFree(o_), cudaFree(lse_);
  return ok;
}

__global__ void fill_rand(uint16_t *p, size_t n, unsigned long long seed)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned long long z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    __nv_bfloat16 h = __float2bfloat16_rn((float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f);
    p[i] = *(uint16_t *)&h;
  }
}

/* The timing buffers, allocated once: q, k, v, o of 128K tokens x H x d = 4M x 128 elements each. */
static const size_t kBenchElems = (size_t)131072 * 4096;
static uint16_t *g_buf[4];
static float *g_lse;
static void bench_alloc()
{
  if (g_buf[0]) return;
  for (int t = 0; t < 4; t++) {
    CK(cudaMalloc(&g_buf[t], kBenchElems * 2));
    if (t < 3) fill_rand<<<4096, 256>>>(g_buf[t], kBenchElems, 1000 + t);
  }
  CK(cudaMalloc(&g_lse, (size_t)131072 * 64 * 4));
  CK(cudaGetLastError());
  CK(cudaDeviceSynchronize());
}

/* One timed case: bf16, B = 128K / S, one mask head; a warm-up, then the median of reps event-timed
   calls, in ms. sched: FM_GPU_SCHED_* (-1: FWD_SCHED's). */
static float bench_case(int S, MaskKind kind, int D, int H, int reps, int Hkv = 0, int sched = -1)
{
  if (Hkv <= 0) Hkv = H;
  const int B = 131072 / S;
  bench_alloc();
  const HostMask m = build_mask(kind, S, S, 1);
  FMGpuMask *dm = upload(m);
  const double rho = block_sparsity(m, 0), flops = std::max(1.0, 4.0 * B * H * (double)S * S * D * (1.0 - rho));
  FMGpuFwdParams gp;
  fill(&gp, dm, B, H, Hkv, D, 0, 1.f / sqrtf((float)D), S, g_buf[0], g_buf[1], g_buf[2], g_buf[3], NULL, 0, g_lse);
  if (sched >= 0) gp.schedule = sched;
  int path = forward(&gp, 0); /* the warm-up */
  CK(cudaDeviceSynchronize());
  std::vector<float> ms;
  const float med = time_median(reps, ms, [&] { path = std::min(path, forward(&gp, 0)); });
  printf("bench S=%-6d B=%-3d H=%-3d kv=%-3d d=%-3d %-16s %9.3f ms %7.1f TFLOP/s (min %.3f max %.3f ms) rho %.4f %s\n", S, B,
         H, Hkv, D, mask_name[kind], med, flops / (med * 1e-3) / 1e12, ms.front(), ms.back(), rho,
         path_name(path));
#ifdef FMFWD_PROF
  if (g_tileprof) { /* one more call with the counters zeroed first: a consumer's cycles per tile by phase */
    using namespace fmsm90;
    unsigned long long c[FPROF_N];
    CK(FMFwdSm90Prof(c)); /* zeroes the counters */
    forward(&gp, 0);
    CK(cudaDeviceSynchronize());
    CK(FMFwdSm90Prof(c));
    const double tiles = c[FPROF_TILES] ? (double)c[FPROF_TILES] : 1.0; /* counted per consumer warpgroup */
    auto per = [&](int k) { return c[k] / tiles / 1e3; };
    const double first = per(FPROF_FIRST);
    double rest = per(FPROF_ALL);
    for (int k : {FPROF_LIST, FPROF_Q, FPROF_KW, FPROF_TURN, FPROF_VW, FPROF_MASK, FPROF_LAST, FPROF_EPI}) rest -= per(k);
    rest -= first;
    printf("tileprof S=%-6d %-16s %s %.2f blocks a tile (%.2f partial); per tile (kcycles, one consumer): all %6.2f = list wait %5.2f + "
           "Q wait %5.2f + first block %5.2f + K waits %5.2f + turn waits %5.2f + V waits %5.2f + element tests %5.2f + last P.V %5.2f + "
           "epilogue %5.2f (staging %4.2f, fence and barrier %4.2f) + the rest (blocks 1..) %6.2f\n",
           S, mask_name[kind], path_name(path), c[FPROF_BLOCKS] / tiles, c[FPROF_PARTIAL] / tiles, per(FPROF_ALL), per(FPROF_LIST),
           per(FPROF_Q), first, per(FPROF_KW), per(FPROF_TURN), per(FPROF_VW), per(FPROF_MASK), per(FPROF_LAST), per(FPROF_EPI), per(FPROF_EPI_STAGE), per(FPROF_EPI_SYNC),
           rest);
  }
#endif
  fflush(stdout);
  FMGpuMaskDestroy(dm);
  return med;
}

static std::vector<Case> check_cases()
{
  const float s128 = 0.08838834764831845f, s64 = 0.125f, s256 = 0.0625f;
  std::vector<Case> cs;
  /*                name                                  B   Sq    Sk   Hq Hkv  D  f16 ph pb fb o32 kind scale */
  for (int kind = 0; kind < M_NKIND; kind++)
    cs.push_back({"bf16 d128 GQA4:1 1000x1000", 1, 1000, 1000, 4, 1, 128, 0, 0, 0, 0, 0, (MaskKind)kind, s128});
  cs.push_back({"fp16 d128 GQA4:1 1000x1000", 1, 1000, 1000, 4, 1, 128, 1, 0, 0, 0, 0, M_CAUSAL, s128});
  cs.push_back({"fp16 d64 1000x4099 per-head", 1, 1000, 4099, 4, 2, 64, 1, 1, 0, 0, 0, M_RANDOM, s64});
  cs.push_back({"bf16 d128 4099x1000 per-head", 1, 4099, 1000, 2, 2, 128, 0, 1, 0, 0, 0, M_RANDOM, 0.3f});
  cs.push_back({"bf16 d128 4099x1000 causal (dead rows)", 1, 4099, 1000, 4, 1, 128, 0, 0, 0, 0, 0, M_CAUSAL, s128});
  cs.push_back({"bf16 d64 4099x4099 B2 per-head", 2, 4099, 4099, 2, 1, 64, 0, 1, 0, 0, 0, M_RANDOM, s64});
  cs.push_back({"bf16 d64 1000x1000 B2 swa", 2, 1000, 1000, 2, 1, 64, 0, 0, 0, 0, 0, M_SWA, s64});
  cs.push_back({"fp16 d64 4099x4099 share question", 1, 4099, 4099, 4, 4, 64, 1, 0, 0, 0, 0, M_SQ, s64});
  cs.push_back({"fp16 d128 1000x4099 doc", 1, 1000, 4099, 2, 1, 128, 1, 0, 0, 0, 0, M_DOC, s128});
  cs.push_back({"bf16 d128 B3 1000x1000 per-sample", 3, 1000, 1000, 4, 2, 128, 0, 1, 1, 0, 0, M_RANDOM, s128});
  cs.push_back({"bf16 d256 4099x4099 causal", 1, 4099, 4099, 2, 1, 256, 0, 0, 0, 0, 0, M_CAUSAL, s256});
  /* the wide kernel at d = 128 (176-key tiles; the causal cases above run it too): a ragged last
     tile, one key past a tile, o32 merged */
  cs.push_back({"bf16 d128 B2 777x1333 full", 2, 777, 1333, 4, 2, 128, 0, 0, 0, 0, 0, M_FULL, s128});
  cs.push_back({"fp16 d128 1x177 full", 2, 1, 177, 2, 1, 128, 1, 0, 0, 0, 0, M_FULL, s128});
  cs.push_back({"bf16 d128 300x1000 o32 merged full", 1, 300, 1000, 2, 1, 128, 0, 0, 0, 0, 2, M_FULL, s128});
  /* the wide kernel (d = 256, no bound vectors): ragged last tiles, S_q != S_k both ways (rows
     with no visible key), GQA, one row, o32 merged over two key ranges */
  cs.push_back({"fp16 d256 GQA2 777x1333 full", 2, 777, 1333, 4, 2, 256, 1, 0, 0, 0, 0, M_FULL, s256});
  cs.push_back({"bf16 d256 700x1500 causal", 1, 700, 1500, 2, 2, 256, 0, 0, 0, 0, 0, M_CAUSAL, s256});
  cs.push_back({"bf16 d256 1500x700 causal (dead rows)", 1, 1500, 700, 4, 1, 256, 0, 0, 0, 0, 0, M_CAUSAL, s256});
  cs.push_back({"fp16 d256 1x81 full", 3, 1, 81, 2, 1, 256, 1, 0, 0, 0, 0, M_FULL, s256});
  cs.push_back({"bf16 d256 300x1000 o32 merged full", 1, 300, 1000, 2, 1, 256, 0, 0, 0, 0, 2, M_FULL, s256});
  cs.push_back({"bf16 d256 GQA2 1000x1000 per-head", 1, 1000, 1000, 4, 2, 256, 0, 1, 0, 0, 0, M_RANDOM, s256});
  cs.push_back({"fp16 d256 1000x4099 doc", 1, 1000, 4099, 2, 2, 256, 1, 0, 0, 0, 0, M_DOC, s256});
  cs.push_back({"bf16 d128 1000x1000 o32", 1, 1000, 1000, 4, 1, 128, 0, 1, 0, 0, 1, M_RANDOM, s128});
  cs.push_back({"bf16 d128 1000x2500 o32 merged", 2, 1000, 2500, 4, 2, 128, 0, 1, 0, 0, 2, M_RANDOM, s128});
  cs.push_back({"fp16 d64 1000x1000 o32 merged", 1, 1000, 1000, 2, 1, 64, 1, 0, 0, 0, 2, M_PREFIX, s64});
  cs.push_back({"fp16 d128 forced fallback 700x600", 1, 700, 600, 4, 2, 128, 1, 1, 0, 1, 0, M_PREFIX, s128});
  cs.push_back({"bf16 d96 fallback 600x700", 1, 600, 700, 2, 1, 96, 0, 1, 0, 0, 0, M_RANDOM, 0.1f});
  cs.push_back({"bf16 d128 forced fallback o32 merged", 1, 600, 900, 2, 1, 128, 0, 0, 0, 1, 2, M_RANDOM, s128});
  return cs;
}

/*
 * tiles (host only): the wide kernel's counted tiles (WideTiles) and its one element test
 * (mask_limit, through the accumulator fragment's layout: s[4k + e] is row row0 (e < 2) or
 * row0 + 8, column 8k + 2 (lane % 4) + (e & 1)) against the mask itself, for TN = 80 (d = 256)
 * and 176 (d = 128), full and causal, over query tiles of many S_q x S_k shapes both ways: every
 * element a query tile's rows can see must lie in a listed tile and be left visible there, every
 * other column of a listed tile (past the diagonal, past seqlen_k) masked. Returns the failures.
 */
template <int D> static long check_wide_tiles(int Sq, int Sk, int causal)
{
  using namespace fmsm90;
  constexpr int TN = wide_tn<D>(), BM = Cfg<D>::BM;
  FMGpuFwdCore p{};
  p.seqlen_q = Sq, p.seqlen_k = Sk, p.causal = causal;
  const int off = causal ? Sk - Sq : (1 << 29), diag = Sk - Sq;
  long bad = 0;
  for (int m0 = 0; m0 < Sq; m0 += BM) {
    const WideTiles<TN> w = wide_tiles<D, TN>(p, m0);
    std::vector<char> listed((Sk + TN - 1) / TN + 1, 0);
    for (int i = 0; i < w.n; i++) {
      const int e = w[i], kb = e & kBlockBits;
      if (kb != w.n - 1 - i || kb * TN >= Sk) { bad++; continue; } /* last tile first, none past seqlen_k */
      listed[kb] = 1;
      /* each warp's fragment rows: row0 = m0 + 16 v + lane / 4 (v: the 64-row consumer and its warp) */
      for (int v = 0; v < BM / 16; v++)
        for (int lane = 0; lane < 32; lane++) {
          float s[TN / 2];
          for (int t = 0; t < TN / 2; t++) s[t] = 1.f;
          const int row0 = m0 + 16 * v + (lane >> 2);
          if (e & kCausal) mask_limit<TN>(s, row0, kb * TN, lane, off, Sk);
          for (int k = 0; k < TN / 8; k++)
            for (int e2 = 0; e2 < 4; e2++) {
              const int r = row0 + (e2 >= 2 ? 8 : 0), j = kb * TN + 8 * k + 2 * (lane & 3) + (e2 & 1);
              if (r >= Sq || r >= m0 + BM) continue;
              const bool vis = j < Sk && (!causal || j <= r + diag), kept = s[4 * k + e2] != -INFINITY;
              bad += vis != kept;
            }
        }
    }
    /* no visible element of these rows outside the listed tiles */
    const int m1 = std::min(Sq, m0 + BM);
    for (int kb = 0; kb * TN < Sk; kb++)
      if (!listed[kb]) {
        const int j = kb * TN; /* the tile's first column is the one the last row sees first */
        bad += !causal || j <= m1 - 1 + diag;
      }
  }
  return bad;
}

static int kind_arg(const char *s)
{
  for (int k = 0; k < M_NKIND; k++)
    if (!strcmp(s, mask_name[k])) return k;
  const int k = atoi(s);
  return k >= 0 && k < M_NKIND ? k : 0;
}

int main(int argc, char **argv)
{
  const std::string mode = argc > 1 ? argv[1] : "check";
  const int reps = argc > 2 ? std::max(1, atoi(argv[2])) : 5;
  if (const char *e = getenv("FWD_SCHED")) {
    g_sched = -1;
    for (int k = 0; k < 3; k++)
      if (!strcmp(e, kSchedName[k])) g_sched = k;
    if (g_sched < 0) {
      fprintf(stderr, "fwd_bench: FWD_SCHED=%s; expected grid, static or dynamic\n", e);
      return 2;
    }
  }
  if (const char *e = getenv("FWD_CTAS")) g_ctas = std::max(0, atoi(e));
  if (mode == "tiles") { /* host only: the wide kernel's tiles and element test against the mask */
    long bad = 0, shapes = 0;
    const int sizes[] = {1, 2, 79, 80, 81, 127, 128, 129, 175, 176, 177, 255, 300, 351, 352, 353, 700, 1000};
    for (int Sq : sizes)
      for (int Sk : sizes)
        for (int causal = 0; causal < 2; causal++) {
          bad += check_wide_tiles<256>(Sq, Sk, causal) + check_wide_tiles<128>(Sq, Sk, causal);
          shapes += 2;
        }
    printf("tiles: %ld wrong elements or tiles over %ld shapes (TN = 80 at d = 256, 176 at d = 128; full and causal)\n", bad, shapes);
    return bad ? 1 : 0;
  }
  if (mode == "rho") { /* host only: rho (FlashMask FLOPs) and element density of the bench masks */
    for (int S : {8192, 32768})
      for (int kind = 0; kind < M_NKIND; kind++) {
        const HostMask m = build_mask((MaskKind)kind, S, S, 1);
        long vis = 0;
#pragma omp parallel for reduction(+ : vis)
        for (int j = 0; j < S; j++)
          for (int i = 0; i < S; i++) vis += !masked(m, 0, i, j);
        const double rho = block_sparsity(m, 0);
        printf("rho S=%-6d %-16s rho %.4f (1 - rho %.4f) density %.4f\n", S, mask_name[kind], rho, 1.0 - rho,
               (double)vis / ((double)S * S));
      }
    return 0;
  }
  if (mode != "probe" && mode != "check" && mode != "small" && mode != "prof" && mode != "ab" && mode != "abmask" && mode != "ab64" && mode != "ab256" && mode != "bench" &&
      mode != "sched" && mode != "schedshort" && mode != "wsweep" && mode != "tileprof") {
    fprintf(stderr,
            "fwd_bench: unknown mode %s (check, small, bench [reps], ab [reps], ab256 [reps], sched [reps], wsweep [reps], prof S kind [d], "
            "tileprof, rho, probe)\n",
            mode.c_str());
    return 2;
  }
  int ndev = 0, dev = 0, major = 0, minor = 0;
  if (cudaGetDeviceCount(&ndev) != cudaSuccess || ndev < 1) {
    if (mode != "probe") fprintf(stderr, "fwd_bench: no CUDA device\n");
    return 2;
  }
  if (mode == "probe") return 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  CK(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev));
  g_sm90 = major == 9 && minor == 0;
  if (mode == "small") {
    const Case c = {"small bf16 d128 GQA2 300x390", 1, 300, 390, 4, 2, 128, 0, 1, 0, 0, 0, M_RANDOM, 0.1f};
    const Case c2 = {"small fp16 d64 causal 200x130", 2, 200, 130, 2, 1, 64, 1, 0, 0, 0, 0, M_CAUSAL, 0.125f};
    const Case c3 = {"small bf16 d256 o32 merged 130x300", 1, 130, 300, 2, 1, 256, 0, 0, 0, 0, 2, M_RANDOM, 0.0625f};
    return run_case(c) & run_case(c2) & run_case(c3) ? 0 : 1;
  }
  if (mode == "prof") { /* one mask at one length: a warm-up and one call */
    const int S = argc > 2 ? atoi(argv[2]) : 8192, D = argc > 4 ? atoi(argv[4]) : 128;
    if (S < 1 || 131072 % S || (D != 64 && D != 128 && D != 256)) {
      fprintf(stderr, "fwd_bench prof: S = %d, d = %d; expected S dividing 131072 and d = 64, 128 or 256\n", S, D);
      return 2;
    }
    bench_case(S, (MaskKind)(argc > 3 ? kind_arg(argv[3]) : 0), D, 4096 / D, 1);
    return 0;
  }
  if (mode == "ab") {
    for (MaskKind k : {M_FULL, M_CAUSAL, M_SWA, M_DOC}) bench_case(8192, k, 128, 32, reps);
    for (MaskKind k : {M_FULL, M_CAUSAL}) bench_case(32768, k, 128, 32, reps);
    return 0;
  }
  if (mode == "tileprof") { /* a -DFMFWD_PROF build: where a persistent tile's time goes, the masks with bound vectors */
#ifndef FMFWD_PROF
    fprintf(stderr, "tileprof: build with -DFMFWD_PROF\n");
    return 2;
#else
    g_tileprof = 1;
    if (g_sched == FM_GPU_SCHED_GRID) g_sched = FM_GPU_SCHED_DYNAMIC; /* the counters are the persistent kernel's */
    for (int S : {8192, 32768})
      for (MaskKind k : {M_SWA, M_DOC, M_SQ, M_PREFIX, M_RANDOM}) bench_case(S, k, 128, 32, reps);
    return 0;
#endif
  }
  if (mode == "abmask") { /* d = 128: the masks with bound vectors, at 8K and 32K */
    for (int S : {8192, 32768})
      for (MaskKind k : {M_SWA, M_DOC, M_PREFIX, M_RANDOM, M_SQ}) bench_case(S, k, 128, 32, reps);
    return 0;
  }
  if (mode == "ab64") { /* d = 64 (H = 64): the A/B table of its tile (Cfg<64>, layout.cuh) */
    for (int S : {8192, 32768})
      for (MaskKind k : {M_FULL, M_CAUSAL, M_SWA, M_DOC, M_SQ, M_RANDOM}) bench_case(S, k, 64, 64, reps);
    return 0;
  }
  if (mode == "ab256") { /* d = 256 (H = 16): the A/B table of its build options */
    for (int S : {8192, 32768})
      for (MaskKind k : {M_FULL, M_CAUSAL, M_SWA, M_DOC}) bench_case(S, k, 256, 16, reps);
    return 0;
  }
  if (mode == "wsweep") { /* window sizes: grid, static, dynamic in turn per window */
    printf("wsweep: S = 8192, d = 128, H = 32, sliding window of w keys; median ms, static / dynamic against grid (> 1: faster)\n");
    for (int w : {150, 300, 500, 700, 1000, 1500, 2000, 3000}) {
      float ms[3];
      g_window = w;
      for (int t = 0; t < 3; t++) ms[t] = bench_case(8192, M_SWA, 128, 32, reps, 0, t);
      printf("wsweep w=%-5d grid %.3f static %.3f dynamic %.3f ms  static/grid %.3f dynamic/grid %.3f\n", w, ms[0], ms[1], ms[2],
             ms[0] / ms[1], ms[0] / ms[2]);
    }
    return 0;
  }
  if (mode == "sched" || mode == "schedshort") { /* the three schedules of the Hopper forward, side by side, in turn per mask */
    struct Row { int S, D, H; MaskKind k; float ms[3]; };
    std::vector<Row> rows;
    if (mode == "schedshort") /* d = 128 full and causal at 1K-4K, where auto takes the persistent kernel (FMSm90AutoKeys) */
      for (int S : {1024, 2048, 4096})
        for (MaskKind k : {M_FULL, M_CAUSAL}) rows.push_back({S, 128, 32, k, {0, 0, 0}});
    else {
      for (int S : {8192, 32768})
        for (MaskKind k : {M_FULL, M_CAUSAL, M_SWA, M_DOC, M_SQ, M_RANDOM}) rows.push_back({S, 128, 32, k, {0, 0, 0}});
      /* 128K: 1024 key blocks per list (the persistent kernel's 96 builders must keep a tile ahead) */
      for (MaskKind k : {M_FULL, M_CAUSAL, M_SWA, M_DOC}) rows.push_back({131072, 128, 32, k, {0, 0, 0}});
      for (MaskKind k : {M_FULL, M_CAUSAL, M_SWA}) rows.push_back({8192, 64, 64, k, {0, 0, 0}});
    }
    for (Row &r : rows)
      for (int t = 0; t < 3; t++) r.ms[t] = bench_case(r.S, r.k, r.D, r.H, reps, 0, t);
    printf("\nsched: median ms, and static / dynamic as speed-ups over grid (> 1: faster)\n");
    printf("%-6s %-4s %-16s %9s %9s %9s %8s %8s\n", "S", "d", "mask", "grid", "static", "dynamic", "st/grid", "dyn/grid");
    for (const Row &r : rows)
      printf("%-6d %-4d %-16s %9.3f %9.3f %9.3f %8.3f %8.3f\n", r.S, r.D, mask_name[r.k], r.ms[0], r.ms[1], r.ms[2],
             r.ms[0] / r.ms[1], r.ms[0] / r.ms[2]);
    return 0;
  }
  if (mode == "bench") {
    for (int S : {8192, 32768})
      for (int k = 0; k < M_NKIND; k++) bench_case(S, (MaskKind)k, 128, 32, reps);
    for (int D : {256, 64})
      for (MaskKind k : {M_FULL, M_CAUSAL}) bench_case(8192, k, D, 4096 / D, reps);
    for (MaskKind k : {M_FULL, M_CAUSAL}) bench_case(8192, k, 128, 32, reps, 8); /* GQA 4:1 */
    return 0;
  }
  std::vector<Case> cs; /* check [word]: only the cases whose name or mask contains word */
  for (const Case &c : check_cases())
    if (argc < 3 || strstr(c.name, argv[2]) || strstr(mask_name[c.kind], argv[2])) cs.push_back(c);
  int fails = 0;
  for (const Case &c : cs) fails += !run_case(c);
  printf("check: %d of %zu cases failed (device sm_%d%d, %s)\n", fails, cs.size(), major, minor,
         g_sm90 ? "Hopper kernel expected for d = 64, 128, 256" : "fallback only");
  return fails ? 1 : 0;
}
