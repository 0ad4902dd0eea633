/*
 * bwd_bench.cu - standalone development harness of the GPU backward (fmbwd.h): no MPI, no
 * library. Builds random inputs and the harnesses' column-bound masks (../harness.h, with the device form the
 * CUDA prepass produces: packed bounds and block summaries), checks dq, dk, dv against a float64
 * CPU reference (forward and backward), and times the backward with CUDA events.
 *
 *   nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --use_fast_math -Iinclude \
 *     -Xcompiler -fopenmp share/bench/bwd/bwd_bench.cu src/kernels/cuda_bwd.cu src/kernels/sm90/bwd_sm90.cu -o bwd_bench
 *   ./bwd_bench check     the correctness cases (table: case, path, step rows, rel. errors, PASS/FAIL),
 *                         the two pieces of one backward at 64 and 80 rows (d = 128), and at d = 256
 *   ./bwd_bench small     one small case (for compute-sanitizer)
 *   ./bwd_bench order     host only: the kernel's work-item order checked over a sweep of shapes, and
 *                         each query block's visiting key blocks (the turns) against the walks
 *   ./bwd_bench det [r]   the deterministic mode beside the default on the masks where it costs most,
 *                         and at d = 64 on full and causal (128-row steps); each case's deterministic
 *                         time also as a "bench ... det" line of its own (ab_table.py across builds)
 *   ./bwd_bench detprof   a -DFMBWD_PROF build (add -DFMBWD_DET_NOWAIT for the deterministic mode
 *                         without its waits): per mask of det, both modes once more with the cycles the
 *                         consumers and the dQ writers spend in each wait (bwd_sm90_base.cuh, FmbwdProf)
 *   ./bwd_bench itemprof  a -DFMBWD_PROF build: per mask (full, causal, sliding window, causal document,
 *                         share question; 8K, 32K; default mode, BWD_BM as for bench) a consumer's cycles per
 *                         item split into its waits (the item, K/V, the first stage, the other stages, dQ's
 *                         staging buffer), the dK/dV epilogue and the rest (the steps)
 *   ./bwd_bench detsim    host only: a timing model of the schedule (share/bench/bwd/detsim.h) on det's
 *                         shapes, default, deterministic and the rejected increasing order; env
 *                         DETSIM="T tp R L P O E" (microseconds)
 *   ./bwd_bench ab256 [r] d = 256, H = 16: full, causal, sliding window, causal document at 8K; full,
 *                         causal at 32K, each also in the deterministic mode
 *   ./bwd_bench fb256     d = 256, H = 16, one causal sequence of 4096: the Hopper kernel, then the SIMT
 *                         fallback
 *   ./bwd_bench ab64 [r]  d = 64, H = 64: full, causal, sliding window, causal document at 8K; full,
 *                         causal at 32K (BWD_BM=64 or 128 for the step rows' A/B)
 *   ./bwd_bench bench     8K and 32K, bf16, d = 128, H = 32, 128K tokens per batch
 *   ./bwd_bench rho       host only: each harness mask's rho (FlashMask FLOPs) and element density
 *   ./bwd_bench prof S k  mask k at length S, the default backward only (BWD_DET=1: the deterministic
 *                         one too; BWD_D: the head dimension): for ncu, or with FM_BENCH_WARM_S for a steady-state time
 * ab with env BWD_AB_SPARSE=1 adds share question at 8K and sliding window, causal document and
 * share question at 32K.
 * Env BWD_BM=64|80|128: the Hopper kernel's query rows per step (FMGpuBwdParams.step_rows; 80 applies
 * to d = 128 only, 128 to d = 64 only), default its own choice. BWD_NO_FIRST_STORE=1: dQ's accumulator zeroed before the
 * kernel instead of first stores (FMGpuBwdParams.no_first_store; check then skips its first-store
 * comparison). BWD_NODET=1: bench times the default only (no deterministic run beside it).
 * BWD_KINDS=bits: bench runs only the mask kinds whose bits are set (harness.h's MaskKind: 16 prefix LM,
 * 32 random intervals).
 */
#include <cuda_runtime.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>
#include <omp.h>
#include <flashmask/private/fmbwd.h>
#include "../../../src/kernels/sm90/bwd_sm90.cuh" /* the walk, to count steps on the host */
#include "../../../src/kernels/sm90/bwd_sm90_base.cuh" /* the kernel's item order (decode_item), checked on the host */

#include "../harness.h" /* CK, the masks, rho, the conversions, the event timing */
#include "detsim.h"      /* detsim: the schedule's timing model */

/* The device form: packed {lts, lte, uts, ute} per column (padding fully masked), summaries. */
struct DevMask {
  int4 *packed;
  int32_t *sum;
  int nblk;
};
/* The device form on the host: packed bounds pk and summaries sm of every mask row. */
static int host_form(const HostMask &m, std::vector<int4> &pk, std::vector<int32_t> &sm)
{
  const int nblk = (m.Sk + FMBWD_BLOCK_N - 1) / FMBWD_BLOCK_N;
  pk.assign((size_t)m.rows() * nblk * FMBWD_BLOCK_N, int4{});
  sm.assign((size_t)m.rows() * nblk * 8, 0);
  for (int h = 0; h < m.rows(); h++)
    for (int kb = 0; kb < nblk; kb++) {
      int mn[4] = {INT_MAX, INT_MAX, INT_MAX, INT_MAX}, mx[4] = {INT_MIN, INT_MIN, INT_MIN, INT_MIN};
      for (int t = 0; t < FMBWD_BLOCK_N; t++) {
        const int j = kb * FMBWD_BLOCK_N + t;
        int4 v = make_int4(0, INT_MAX, 0, 0);
        if (j < m.Sk) {
          const size_t o = (size_t)h * m.Sk + j;
          v = make_int4(m.lts[o], m.lte[o], m.uts[o], m.ute[o]);
          const int a[4] = {v.x, v.y, v.z, v.w};
          for (int c = 0; c < 4; c++) mn[c] = std::min(mn[c], a[c]), mx[c] = std::max(mx[c], a[c]);
        }
        pk[((size_t)h * nblk + kb) * FMBWD_BLOCK_N + t] = v;
      }
      for (int c = 0; c < 4; c++) {
        sm[((size_t)h * nblk + kb) * 8 + 2 * c] = mn[c];
        sm[((size_t)h * nblk + kb) * 8 + 2 * c + 1] = mx[c];
      }
    }
  return nblk;
}
static DevMask upload_mask(const HostMask &m)
{
  DevMask d;
  std::vector<int4> pk;
  std::vector<int32_t> sm;
  d.nblk = host_form(m, pk, sm);
  CK(cudaMalloc(&d.packed, pk.size() * sizeof(int4)));
  CK(cudaMalloc(&d.sum, sm.size() * sizeof(int32_t)));
  CK(cudaMemcpy(d.packed, pk.data(), pk.size() * sizeof(int4), cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.sum, sm.data(), sm.size() * sizeof(int32_t), cudaMemcpyHostToDevice));
  return d;
}

static int g_bm = 0; /* env BWD_BM: FMGpuBwdParams.step_rows of every run (0: the kernel's choice) */
static int g_nofs = 0; /* env BWD_NO_FIRST_STORE=1: FMGpuBwdParams.no_first_store of every run (A/B) */

/* The device copies of one case's inputs (bf16/fp16 bits; lse float) and room for its gradients. */
struct DevIO {
  uint16_t *q, *k, *v, *o, *dout, *dq, *dk, *dv;
  float *lse;
};
static DevIO dev_io(const std::vector<uint16_t> &q, const std::vector<uint16_t> &k, const std::vector<uint16_t> &v,
                    const std::vector<uint16_t> &o, const std::vector<uint16_t> &dout, const std::vector<float> &lse)
{
  DevIO d;
  const size_t nq = q.size() * 2, nk = k.size() * 2;
  CK(cudaMalloc(&d.q, nq));
  CK(cudaMalloc(&d.o, nq));
  CK(cudaMalloc(&d.dout, nq));
  CK(cudaMalloc(&d.dq, nq));
  CK(cudaMalloc(&d.k, nk));
  CK(cudaMalloc(&d.v, nk));
  CK(cudaMalloc(&d.dk, nk));
  CK(cudaMalloc(&d.dv, nk));
  CK(cudaMalloc(&d.lse, lse.size() * 4));
  CK(cudaMemcpy(d.q, q.data(), nq, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.o, o.data(), nq, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.dout, dout.data(), nq, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.k, k.data(), nk, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.v, v.data(), nk, cudaMemcpyHostToDevice));
  CK(cudaMemcpy(d.lse, lse.data(), lse.size() * 4, cudaMemcpyHostToDevice));
  return d;
}
/* FMGpuBwdParams for dense [batch][rows][heads][D] tensors (cuda.cu's layout): zeroed, then the
   strides, sizes and scale; with io, its pointers. */
static FMGpuBwdParams dense_params(int B, int Sq, int Sk, int Hq, int Hkv, int D, int fp16, float scale, const DevIO *io)
{
  FMGpuBwdParams p;
  memset(&p, 0, sizeof(p));
  const FMGpuStrides sq = {(long long)Sq * Hq * D, (long long)Hq * D, D}, sk = {(long long)Sk * Hkv * D, (long long)Hkv * D, D};
  p.sq = p.so = p.sdo = p.sdq = sq;
  p.sk = p.sv = p.sdk = p.sdv = sk;
  p.batch = B, p.seqlen_q = Sq, p.seqlen_k = Sk, p.heads_q = Hq, p.heads_kv = Hkv, p.head_dim = D, p.fp16 = fp16;
  p.scale = scale;
  if (io) p.q = io->q, p.k = io->k, p.v = io->v, p.o = io->o, p.dout = io->dout, p.lse = io->lse, p.dq = io->dq, p.dk = io->dk, p.dv = io->dv;
  return p;
}
static void free_dev_io(const DevIO &d)
{
  cudaFree(d.q), cudaFree(d.o), cudaFree(d.dout), cudaFree(d.dq), cudaFree(d.k), cudaFree(d.v), cudaFree(d.dk), cudaFree(d.dv);
  cudaFree(d.lse);
}

struct Case {
  const char *name;
  int B, Sq, Sk, Hq, Hkv, D, f16, per_head, fallback;
  MaskKind kind;
  float scale;
};

/* float64 forward (O rounded to dtype, LSE) and backward of one case; returns the max rel error. */
static int run_case(const Case &c, double tol)
{
  const int B = c.B, Sq = c.Sq, Sk = c.Sk, Hq = c.Hq, Hkv = c.Hkv, D = c.D, G = Hq / Hkv;
  const int MH = c.per_head ? Hkv : 1;
  HostMask m = build_mask(c.kind, Sq, Sk, MH);
  const size_t nq = (size_t)B * Sq * Hq * D, nk = (size_t)B * Sk * Hkv * D;
  std::vector<uint16_t> q(nq), k(nk), v(nk), dout(nq), o(nq);
  for (auto &x : q) x = f2h((float)(2 * urand() - 1), c.f16);
  for (auto &x : k) x = f2h((float)(2 * urand() - 1), c.f16);
  for (auto &x : v) x = f2h((float)(2 * urand() - 1), c.f16);
  for (auto &x : dout) x = f2h((float)(2 * urand() - 1), c.f16);
  std::vector<float> lse((size_t)B * Hq * Sq);
  std::vector<double> dqr(nq, 0.0), dkr(nk, 0.0), dvr(nk, 0.0);
  std::vector<float> qf(nq), kf(nk), vf(nk), dof(nq);
  for (size_t x = 0; x < nq; x++) qf[x] = h2f(q[x], c.f16), dof[x] = h2f(dout[x], c.f16);
  for (size_t x = 0; x < nk; x++) kf[x] = h2f(k[x], c.f16), vf[x] = h2f(v[x], c.f16);
  auto Q = [&](int b, int i, int h, int d) { return (double)qf[(((size_t)b * Sq + i) * Hq + h) * D + d]; };
  auto K = [&](int b, int j, int h, int d) { return (double)kf[(((size_t)b * Sk + j) * Hkv + h) * D + d]; };
  auto V = [&](int b, int j, int h, int d) { return (double)vf[(((size_t)b * Sk + j) * Hkv + h) * D + d]; };
  auto DO = [&](int b, int i, int h, int d) { return (double)dof[(((size_t)b * Sq + i) * Hq + h) * D + d]; };
  const int nth = omp_get_max_threads();
  std::vector<double> part((size_t)nth * 2 * Sk * D);
  for (int b = 0; b < B; b++)
    for (int hkv = 0; hkv < Hkv; hkv++) {
      std::fill(part.begin(), part.end(), 0.0);
#pragma omp parallel
      {
        double *pk = part.data() + (size_t)omp_get_thread_num() * 2 * Sk * D, *pv = pk + (size_t)Sk * D;
        std::vector<double> s(Sk), ov(D);
#pragma omp for schedule(dynamic, 4)
        for (int r = 0; r < G * Sq; r++) {
          const int hq = hkv * G + r / Sq, i = r % Sq, mh = hq / (Hq / MH);
          double mx = -INFINITY;
          for (int j = 0; j < Sk; j++) {
            if (masked(m, mh, i, j)) { s[j] = -INFINITY; continue; }
            double a = 0;
            for (int d = 0; d < D; d++) a += Q(b, i, hq, d) * K(b, j, hkv, d);
            s[j] = a * c.scale;
            mx = std::max(mx, s[j]);
          }
          double l = 0;
          std::fill(ov.begin(), ov.end(), 0.0);
          if (mx != -INFINITY)
            for (int j = 0; j < Sk; j++)
              if (s[j] != -INFINITY) {
                const double p = exp(s[j] - mx);
                l += p;
                for (int d = 0; d < D; d++) ov[d] += p * V(b, j, hkv, d);
              }
          const double L = l > 0 ? mx + log(l) : -INFINITY;
          lse[((size_t)b * Hq + hq) * Sq + i] = (float)L;
          double Di = 0;
          for (int d = 0; d < D; d++) {
            const uint16_t ob = f2h(l > 0 ? (float)(ov[d] / l) : 0.f, c.f16);
            o[(((size_t)b * Sq + i) * Hq + hq) * D + d] = ob;
            Di += (double)h2f(ob, c.f16) * DO(b, i, hq, d);
          }
          if (l <= 0) continue;
          double *dq = dqr.data() + (((size_t)b * Sq + i) * Hq + hq) * D;
          for (int j = 0; j < Sk; j++) {
            if (s[j] == -INFINITY) continue;
            const double p = exp(s[j] - L);
            double dp = 0;
            for (int d = 0; d < D; d++) dp += DO(b, i, hq, d) * V(b, j, hkv, d);
            const double ds = p * (dp - Di);
            for (int d = 0; d < D; d++) {
              dq[d] += c.scale * ds * K(b, j, hkv, d);
              pk[(size_t)j * D + d] += c.scale * ds * Q(b, i, hq, d);
              pv[(size_t)j * D + d] += p * DO(b, i, hq, d);
            }
          }
        }
      }
      for (int t = 0; t < nth; t++)
        for (int j = 0; j < Sk; j++)
          for (int d = 0; d < D; d++) {
            const size_t o2 = (((size_t)b * Sk + j) * Hkv + hkv) * D + d;
            dkr[o2] += part[(size_t)t * 2 * Sk * D + (size_t)j * D + d];
            dvr[o2] += part[(size_t)t * 2 * Sk * D + (size_t)Sk * D + (size_t)j * D + d];
          }
    }

  /* GPU */
  DevMask dm = upload_mask(m);
  const DevIO io = dev_io(q, k, v, o, dout, lse);
  uint16_t *dq_ = io.dq, *dk_ = io.dk, *dv_ = io.dv;
  void *ws;
  FMGpuBwdParams p = dense_params(B, Sq, Sk, Hq, Hkv, D, c.f16, c.scale, &io);
  p.packed = dm.packed, p.sum = dm.sum, p.mask_heads = MH, p.causal = m.causal, p.nblk = dm.nblk;
  p.mask_dense = host_dense(m);
  p.force_fallback = c.fallback;
  p.step_rows = g_bm;
  const size_t wsb = FMGpuBackwardWorkspace(&p);
  CK(cudaMalloc(&ws, wsb));
  p.workspace = ws;
  const int path = FMGpuBackwardPath(&p);
  /* one call with the outputs and the workspace poisoned (NaN; the turn words -1), so that an
     accumulator block nobody zeroed or stored shows */
  auto run_once = [&](std::vector<uint16_t> &aq, std::vector<uint16_t> &ak, std::vector<uint16_t> &av) {
    CK(cudaMemset(dq_, 0xFF, nq * 2));
    CK(cudaMemset(dk_, 0xFF, nk * 2));
    CK(cudaMemset(dv_, 0xFF, nk * 2));
    CK(cudaMemset(ws, 0xFF, wsb));
    CK(FMGpuBackward(&p, 0));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(aq.data(), dq_, nq * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ak.data(), dk_, nk * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(av.data(), dv_, nk * 2, cudaMemcpyDeviceToHost));
  };
  std::vector<uint16_t> gq(nq), gk(nk), gv(nk);
  p.no_first_store = g_nofs;
  run_once(gq, gk, gv);
  auto rel = [&](const std::vector<uint16_t> &g, const std::vector<double> &r) {
    double e = 0, n = 0;
    for (size_t x = 0; x < r.size(); x++) {
      const double gv2 = h2f(g[x], c.f16);
      if (!std::isfinite(gv2)) return INFINITY * 1.0;
      e += (gv2 - r[x]) * (gv2 - r[x]);
      n += r[x] * r[x];
    }
    return sqrt(e / (n > 0 ? n : 1));
  };
  double eq = rel(gq, dqr), ek = rel(gk, dkr), ev = rel(gv, dvr);
  /* First stores (FMGpuBackward where FMGpuBwdFirstStore says so): against a call with the
     accumulator zeroed, per 64-row block of dq (a lost partial or an unwritten block changes one
     block by far more than the order of the fp32 adds can), over four calls. fsb: the worst
     block's difference relative to the block, or -1 where first stores do not apply. */
  double fsb = -1;
  if (path == 1 && !g_nofs && FMGpuBwdFirstStore(&p)) {
    std::vector<uint16_t> zq(nq), zk(nk), zv(nk);
    p.no_first_store = 1;
    run_once(zq, zk, zv);
    p.no_first_store = 0;
    auto blocks = [&](const std::vector<uint16_t> &a) {
      double worst = 0;
      for (int b = 0; b < B; b++)
        for (int h = 0; h < Hq; h++)
          for (int i0 = 0; i0 < Sq; i0 += 64) {
            double e = 0, n = 0;
            for (int i = i0; i < std::min(Sq, i0 + 64); i++)
              for (int d = 0; d < D; d++) {
                const size_t x = (((size_t)b * Sq + i) * Hq + h) * D + d;
                const double u = h2f(a[x], c.f16), z = h2f(zq[x], c.f16);
                if (!std::isfinite(u) || !std::isfinite(z)) return INFINITY * 1.0;
                e += (u - z) * (u - z);
                n += z * z;
              }
            worst = std::max(worst, n > 0 ? sqrt(e / n) : e > 0 ? INFINITY : 0.0);
          }
      return worst;
    };
    fsb = blocks(gq);
    for (int r = 0; r < 3; r++) {
      run_once(gq, gk, gv);
      eq = std::max(eq, rel(gq, dqr)), ek = std::max(ek, rel(gk, dkr)), ev = std::max(ev, rel(gv, dvr));
      fsb = std::max(fsb, blocks(gq));
    }
  }
  int ok = eq <= tol && ek <= tol && ev <= tol && fsb <= 1e-2;
  /* the deterministic mode: twice, poisoned in between; bitwise equal, and as close to float64 */
  int same = 1;
  double deq = 0;
  {
    std::vector<uint16_t> aq(nq), ak(nk), av(nk);
    p.deterministic = 1;
    for (int r = 0; r < 2; r++) {
      CK(cudaMemset(dq_, 0xFF, nq * 2));
      CK(cudaMemset(dk_, 0xFF, nk * 2));
      CK(cudaMemset(dv_, 0xFF, nk * 2));
      CK(FMGpuBackward(&p, 0));
      CK(cudaDeviceSynchronize());
      CK(cudaMemcpy((r ? gq : aq).data(), dq_, nq * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy((r ? gk : ak).data(), dk_, nk * 2, cudaMemcpyDeviceToHost));
      CK(cudaMemcpy((r ? gv : av).data(), dv_, nk * 2, cudaMemcpyDeviceToHost));
    }
    same = aq == gq && ak == gk && av == gv;
    deq = std::max(rel(gq, dqr), std::max(rel(gk, dkr), rel(gv, dvr)));
    ok = ok && same && deq <= tol;
  }
  char fss[32] = "   -    ";
  if (fsb >= 0) snprintf(fss, sizeof fss, "%.2e", fsb);
  printf("%-34s %-16s path %d bm %d  dq %.2e dk %.2e dv %.2e  det %s %.2e  first-store blocks %s  %s\n", c.name,
         mask_name[c.kind], path, path == 1 ? FMGpuBwdStepRows(&p) : 0, eq, ek, ev, same ? "same" : "DIFFER", deq, fss,
         ok ? "PASS" : "FAIL");
  fflush(stdout);
  free_dev_io(io);
  cudaFree(ws), cudaFree(dm.packed), cudaFree(dm.sum);
  return ok;
}

/*
 * Two pieces of one backward with different step rows on one workspace (Begin, Piece, Piece, End):
 * keys [0, Sk1) under a causal mask at 64 rows, keys [Sk1, Sk1 + Sk2) under a random (non-causal)
 * mask forced to 80 rows, both adding into one dQ accumulator; against float64 over the union of
 * the keys (the only test that the workspace layout is the same for both step sizes).
 */
static int run_mixed(double tol, int D = 128)
{
  const int Sq = 1000, Sk1 = 512, Sk2 = 600, Sk = Sk1 + Sk2, Hq = 4, Hkv = 2, G = Hq / Hkv;
  const double scale = 1.0 / sqrt((double)D);
  HostMask ma = build_mask(M_CAUSAL, Sq, Sk1, 1), mb = build_mask(M_RANDOM, Sq, Sk2, 1);
  auto vis = [&](int i, int j) { return j < Sk1 ? !masked(ma, 0, i, j) : !masked(mb, 0, i, j - Sk1); };
  const size_t nq = (size_t)Sq * Hq * D, nk = (size_t)Sk * Hkv * D;
  std::vector<uint16_t> q(nq), k(nk), v(nk), dout(nq), o(nq);
  for (auto &x : q) x = f2h((float)(2 * urand() - 1), 0);
  for (auto &x : k) x = f2h((float)(2 * urand() - 1), 0);
  for (auto &x : v) x = f2h((float)(2 * urand() - 1), 0);
  for (auto &x : dout) x = f2h((float)(2 * urand() - 1), 0);
  auto Q = [&](int i, int h, int d) { return (double)h2f(q[((size_t)i * Hq + h) * D + d], 0); };
  auto K = [&](int j, int h, int d) { return (double)h2f(k[((size_t)j * Hkv + h) * D + d], 0); };
  auto V = [&](int j, int h, int d) { return (double)h2f(v[((size_t)j * Hkv + h) * D + d], 0); };
  auto DO = [&](int i, int h, int d) { return (double)h2f(dout[((size_t)i * Hq + h) * D + d], 0); };
  std::vector<float> lse((size_t)Hq * Sq);
  std::vector<double> P((size_t)Hq * Sq * Sk, 0.0), dS((size_t)Hq * Sq * Sk, 0.0), dqr(nq, 0.0), dkr(nk, 0.0), dvr(nk, 0.0);
#pragma omp parallel for schedule(dynamic, 4)
  for (int r = 0; r < Hq * Sq; r++) {
    const int hq = r / Sq, i = r % Sq, hkv = hq / G;
    std::vector<double> sc(Sk), ov(D, 0.0);
    double mx = -INFINITY, l = 0;
    for (int j = 0; j < Sk; j++) {
      sc[j] = -INFINITY;
      if (!vis(i, j)) continue;
      double a = 0;
      for (int d = 0; d < D; d++) a += Q(i, hq, d) * K(j, hkv, d);
      sc[j] = a * scale;
      mx = std::max(mx, sc[j]);
    }
    for (int j = 0; j < Sk; j++)
      if (sc[j] != -INFINITY) {
        const double e = exp(sc[j] - mx);
        l += e;
        for (int d = 0; d < D; d++) ov[d] += e * V(j, hkv, d);
      }
    const double L = l > 0 ? mx + log(l) : -INFINITY;
    lse[(size_t)hq * Sq + i] = (float)L;
    double Di = 0;
    for (int d = 0; d < D; d++) {
      const uint16_t ob = f2h(l > 0 ? (float)(ov[d] / l) : 0.f, 0);
      o[((size_t)i * Hq + hq) * D + d] = ob;
      Di += (double)h2f(ob, 0) * DO(i, hq, d);
    }
    if (l <= 0) continue;
    for (int j = 0; j < Sk; j++) {
      if (sc[j] == -INFINITY) continue;
      const double p = exp(sc[j] - L);
      double dp = 0;
      for (int d = 0; d < D; d++) dp += DO(i, hq, d) * V(j, hkv, d);
      const size_t x = ((size_t)hq * Sq + i) * Sk + j;
      P[x] = p;
      dS[x] = p * (dp - Di);
      for (int d = 0; d < D; d++) dqr[((size_t)i * Hq + hq) * D + d] += scale * dS[x] * K(j, hkv, d);
    }
  }
#pragma omp parallel for schedule(dynamic, 4)
  for (int r = 0; r < Hkv * Sk; r++) {
    const int hkv = r / Sk, j = r % Sk;
    for (int g = 0; g < G; g++)
      for (int i = 0; i < Sq; i++) {
        const int hq = hkv * G + g;
        const size_t x = ((size_t)hq * Sq + i) * Sk + j;
        if (P[x] == 0.0 && dS[x] == 0.0) continue;
        for (int d = 0; d < D; d++) {
          dkr[((size_t)j * Hkv + hkv) * D + d] += scale * dS[x] * Q(i, hq, d);
          dvr[((size_t)j * Hkv + hkv) * D + d] += P[x] * DO(i, hq, d);
        }
      }
  }
  DevMask da = upload_mask(ma), db = upload_mask(mb);
  const DevIO io = dev_io(q, k, v, o, dout, lse);
  uint16_t *k_ = io.k, *v_ = io.v, *dq_ = io.dq, *dk_ = io.dk, *dv_ = io.dv;
  void *ws;
  /* piece a: keys 0..Sk1-1 of a tensor of Sk keys (the strides of the whole, the sizes of the piece) */
  FMGpuBwdParams pa = dense_params(1, Sq, Sk, Hq, Hkv, D, 0, (float)scale, &io);
  pa.seqlen_k = Sk1;
  pa.packed = da.packed, pa.sum = da.sum, pa.mask_heads = 1, pa.causal = 1, pa.nblk = da.nblk;
  pa.step_rows = 64;
  FMGpuBwdParams pb = pa;
  const size_t ko = (size_t)Sk1 * Hkv * D; /* piece b's first key */
  pb.k = k_ + ko, pb.v = v_ + ko, pb.dk = dk_ + ko, pb.dv = dv_ + ko;
  pb.seqlen_k = Sk2, pb.packed = db.packed, pb.sum = db.sum, pb.causal = 0, pb.nblk = db.nblk;
  pb.step_rows = 80;
  CK(cudaMalloc(&ws, std::max(FMGpuBackwardWorkspace(&pa), FMGpuBackwardWorkspace(&pb))));
  pa.workspace = pb.workspace = ws;
  std::vector<uint16_t> gq(nq), gk(nk), gv(nk), aq(nq), ak(nk), av(nk);
  auto rel = [&](const std::vector<uint16_t> &g, const std::vector<double> &r) {
    double e = 0, n = 0;
    for (size_t x = 0; x < r.size(); x++) {
      const double gv2 = h2f(g[x], 0);
      if (!std::isfinite(gv2)) return INFINITY * 1.0;
      e += (gv2 - r[x]) * (gv2 - r[x]);
      n += r[x] * r[x];
    }
    return sqrt(e / (n > 0 ? n : 1));
  };
  auto run = [&](int det, std::vector<uint16_t> &oq, std::vector<uint16_t> &ok_, std::vector<uint16_t> &ov) {
    pa.deterministic = pb.deterministic = det;
    CK(cudaMemset(dq_, 0xFF, nq * 2));
    CK(cudaMemset(dk_, 0xFF, nk * 2));
    CK(cudaMemset(dv_, 0xFF, nk * 2));
    CK(FMGpuBackwardBegin(&pa, 0));
    CK(FMGpuBackwardPiece(&pa, 0));
    CK(FMGpuBackwardPiece(&pb, 0));
    CK(FMGpuBackwardEnd(&pa, 0));
    CK(cudaDeviceSynchronize());
    CK(cudaMemcpy(oq.data(), dq_, nq * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ok_.data(), dk_, nk * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(ov.data(), dv_, nk * 2, cudaMemcpyDeviceToHost));
  };
  run(0, gq, gk, gv);
  const double eq = rel(gq, dqr), ek = rel(gk, dkr), ev = rel(gv, dvr);
  run(1, aq, ak, av);
  run(1, gq, gk, gv);
  const int same = aq == gq && ak == gk && av == gv;
  const double deq = std::max(rel(gq, dqr), std::max(rel(gk, dkr), rel(gv, dvr)));
  const int ok = eq <= tol && ek <= tol && ev <= tol && same && deq <= tol;
  printf("%-34s %-16s path %d bm 64+%-2d dq %.2e dk %.2e dv %.2e  det %s %.2e  %s\n",
         D == 256 ? "bf16 d256 GQA2 pieces 1000x(512+600)" : "bf16 d128 GQA2 pieces 1000x(512+600)", "causal+random",
         FMGpuBackwardPath(&pb), FMGpuBwdStepRows(&pb), eq, ek, ev, same ? "same" : "DIFFER", deq, ok ? "PASS" : "FAIL");
  fflush(stdout);
  free_dev_io(io);
  cudaFree(ws), cudaFree(da.packed), cudaFree(da.sum), cudaFree(db.packed), cudaFree(db.sum);
  return ok;
}

__global__ void fill_rand(uint16_t *p, size_t n, unsigned long long seed, int f16)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
    unsigned long long z = seed + (i + 1) * 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    z ^= z >> 31;
    const float x = (float)(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
    if (f16) { __half h = __float2half_rn(x); p[i] = *(uint16_t *)&h; }
    else { __nv_bfloat16 h = __float2bfloat16_rn(x); p[i] = *(uint16_t *)&h; }
  }
}
__global__ void fill_f(float *p, size_t n, float x)
{
  for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) p[i] = x;
}

/* steps (visited BM-row query blocks) per key block, from the device summaries' walk */
template <int BM> static double steps_per_block(const HostMask &m)
{
  DevMask d;
  const int nblk = (m.Sk + FMBWD_BLOCK_N - 1) / FMBWD_BLOCK_N;
  std::vector<int32_t> sm((size_t)nblk * 8);
  for (int kb = 0; kb < nblk; kb++) {
    int mn[4] = {INT_MAX, INT_MAX, INT_MAX, INT_MAX}, mx[4] = {INT_MIN, INT_MIN, INT_MIN, INT_MIN};
    for (int j = kb * FMBWD_BLOCK_N; j < std::min(m.Sk, (kb + 1) * FMBWD_BLOCK_N); j++) {
      const int a[4] = {m.lts[j], m.lte[j], m.uts[j], m.ute[j]};
      for (int c = 0; c < 4; c++) mn[c] = std::min(mn[c], a[c]), mx[c] = std::max(mx[c], a[c]);
    }
    for (int c = 0; c < 4; c++) sm[kb * 8 + 2 * c] = mn[c], sm[kb * 8 + 2 * c + 1] = mx[c];
  }
  (void)d;
  long n = 0;
  for (int kb = 0; kb < nblk; kb++) {
    FMBwdWalk w;
    int part;
    fmbwd_walk_init<BM>(&w, sm.data(), kb, m.Sq, m.Sk, m.causal);
    for (int qb = fmbwd_walk_next<BM>(&w, 0, &part); qb < w.nqb; qb = fmbwd_walk_next<BM>(&w, qb + 1, &part)) n++;
  }
  return (double)n / nblk;
}

static int g_prof_kind = -1; /* prof mode: the one mask kind to run */
static unsigned g_kinds = ~0u; /* ab mode: the mask kinds to run (bits) */
static int g_nodet = 0;       /* no deterministic run (ab modes, env BWD_NODET) */
static int g_d = 128; /* head dim of bench and ab (ab64: 64, with H = 64; ab256: 256, with H = 16) */
static int g_tokens = 131072; /* tokens per batch (B = g_tokens / S, at least 1) */
static int g_fb = 0;          /* the SIMT fallback (fb256) */
#ifdef FMBWD_PROF
static int g_detprof = 0;     /* detprof: the waits of both modes */
static int g_itemprof = 0;    /* itemprof: where an item's time goes, the default mode */
cudaError_t FMBwdSm90Prof(unsigned long long *sum); /* bwd_sm90.cu, that build only */
#endif
static void bench(int S, int reps, int only_swa = 0, int Hkv = 0)
{
  const int B = g_tokens / S > 1 ? g_tokens / S : 1, H = 4096 / g_d, D = g_d;
  if (Hkv <= 0) Hkv = H;
  const size_t n = (size_t)B * S * H * D, nkv = (size_t)B * S * Hkv * D;
  uint16_t *buf[8];
  for (int t = 0; t < 8; t++) CK(cudaMalloc(&buf[t], n * 2));
  for (int t = 0; t < 5; t++) fill_rand<<<2048, 256>>>(buf[t], t == 1 || t == 2 ? nkv : n, 1000 + t, 0);
  float *lse;
  CK(cudaMalloc(&lse, (size_t)B * H * S * 4));
  fill_f<<<2048, 256>>>(lse, (size_t)B * H * S, logf((float)S) * 0.5f);
  CK(cudaGetLastError());
  for (int kind = 0; kind < M_NKIND; kind++) {
    if (only_swa && kind != M_SWA) continue;
    if (g_prof_kind >= 0 && kind != g_prof_kind) continue;
    if (!(g_kinds >> kind & 1)) continue;
    if (Hkv != H && kind != M_FULL && kind != M_CAUSAL) continue;
    HostMask m = build_mask((MaskKind)kind, S, S, 1);
    DevMask dm = upload_mask(m);
    /* the FlashMask convention, as fmbench and share/bench/peers.py count: 2.5 x 4 B H Sq Sk d (1 - rho) */
    const double rho = block_sparsity(m, 0), flops = std::max(1.0, 2.5 * 4.0 * B * H * (double)S * S * D * (1.0 - rho));
    FMGpuBwdParams p = dense_params(B, S, S, H, Hkv, D, 0, 1.f / sqrtf((float)D), NULL);
    p.q = buf[0], p.k = buf[1], p.v = buf[2], p.o = buf[3], p.dout = buf[4], p.lse = lse;
    p.dq = buf[5], p.dk = buf[6], p.dv = buf[7];
    p.packed = dm.packed, p.sum = dm.sum, p.mask_heads = 1, p.causal = m.causal, p.nblk = dm.nblk;
    p.mask_dense = host_dense(m);
    p.step_rows = g_bm;
    p.no_first_store = g_nofs;
    p.force_fallback = g_fb;
    void *ws;
    CK(cudaMalloc(&ws, FMGpuBackwardWorkspace(&p)));
    p.workspace = ws;
    /* a warm-up, then the median of reps event-timed calls, sorted into ms */
    auto time_calls = [&](std::vector<float> &ms) {
      CK(FMGpuBackward(&p, 0));
      CK(cudaDeviceSynchronize());
      return time_median(reps, ms, [&] { CK(FMGpuBackward(&p, 0)); });
    };
    std::vector<float> ms, dms;
    const float med = time_calls(ms);
    float dmed = 0; /* the deterministic mode's median */
    if (!only_swa && !g_nodet) {
      p.deterministic = 1;
      dmed = time_calls(dms);
      p.deterministic = 0;
    }
    const int bmr = FMGpuBwdStepRows(&p);
  const double steps = (bmr == 80 ? steps_per_block<80>(m) : bmr == 128 ? steps_per_block<128>(m) : steps_per_block<64>(m)) * dm.nblk * H * B;
#ifdef FMBWD_PROF
    if (g_detprof) { /* detprof (a -DFMBWD_PROF build): where the consumers and the dQ writers wait, one call each mode */
      for (int det = 0; det < 2; det++) {
        unsigned long long c[fmbwd::PROF_N];
        p.deterministic = det;
        CK(FMGpuBackward(&p, 0));
        CK(cudaDeviceSynchronize());
        CK(FMBwdSm90Prof(c)); /* zeroes the counters */
        cudaEvent_t e0, e1;
        CK(cudaEventCreate(&e0));
        CK(cudaEventCreate(&e1));
        CK(cudaEventRecord(e0));
        CK(FMGpuBackward(&p, 0));
        CK(cudaEventRecord(e1));
        CK(cudaEventSynchronize(e1));
        float t;
        CK(cudaEventElapsedTime(&t, e0, e1));
        CK(FMBwdSm90Prof(c));
        const double all = c[fmbwd::PROF_C_ALL] > 0 ? (double)c[fmbwd::PROF_C_ALL] : 1.0;
        printf("detprof S=%-6d %-16s%s %s %8.3f ms  consumer: dq-empty wait %5.1f%%  stage wait %5.1f%%  |  writer: idle %5.1f%%  "
               "turn %5.1f%%  read %5.1f%%  pass %5.1f%% (scan %4.1f%%)  (of the consumers' cycles; %llu blocks, %.2f kcycles of turn wait per block)\n",
               S, mask_name[kind], Hkv != H ? " GQA4" : "", det ? "det" : "def", t, 100.0 * c[fmbwd::PROF_C_DQE] / all,
               100.0 * c[fmbwd::PROF_C_FULL] / all, 100.0 * c[fmbwd::PROF_W_IDLE] / all, 100.0 * c[fmbwd::PROF_W_TURN] / all,
               100.0 * c[fmbwd::PROF_W_READ] / all, 100.0 * c[fmbwd::PROF_W_PASS] / all, 100.0 * c[fmbwd::PROF_W_SCAN] / all, c[fmbwd::PROF_BLOCKS],
               c[fmbwd::PROF_BLOCKS] ? c[fmbwd::PROF_W_TURN] / 1e3 / c[fmbwd::PROF_BLOCKS] : 0.0);
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
      }
      p.deterministic = 0;
    }
    if (g_itemprof) { /* itemprof (a -DFMBWD_PROF build): the consumers' time per item, the default mode, one call */
      unsigned long long c[fmbwd::PROF_N];
      CK(FMGpuBackward(&p, 0));
      CK(cudaDeviceSynchronize());
      CK(FMBwdSm90Prof(c)); /* zeroes the counters */
      CK(FMGpuBackward(&p, 0));
      CK(cudaDeviceSynchronize());
      CK(FMBwdSm90Prof(c));
      const double items = c[fmbwd::PROF_ITEMS] ? (double)c[fmbwd::PROF_ITEMS] : 1.0; /* counted per consumer warpgroup */
      auto per = [&](int k) { return c[k] / items / 1e3; };
      printf("itemprof S=%-6d %-16s rows %3d  %.2f steps per item; per item (kcycles, one consumer): all %6.2f = item wait %5.2f + K/V wait %5.2f "
             "+ first stage wait %5.2f + other stage waits %5.2f + dQ buffer waits %5.2f + epilogue %5.2f + the rest (steps) %6.2f\n",
             S, mask_name[kind], FMGpuBwdStepRows(&p), steps / ((double)dm.nblk * Hkv * B), per(fmbwd::PROF_C_ALL), per(fmbwd::PROF_C_ITEM),
             per(fmbwd::PROF_C_KV), per(fmbwd::PROF_C_FULL1), per(fmbwd::PROF_C_FULL) - per(fmbwd::PROF_C_FULL1), per(fmbwd::PROF_C_DQE),
             per(fmbwd::PROF_C_EPI),
             per(fmbwd::PROF_C_ALL) - per(fmbwd::PROF_C_ITEM) - per(fmbwd::PROF_C_KV) - per(fmbwd::PROF_C_FULL) - per(fmbwd::PROF_C_DQE) -
               per(fmbwd::PROF_C_EPI));
    }
#endif
    if (g_prof_kind >= 0) { /* prof: one more call, its three phases timed apart */
      cudaEvent_t ev[4];
      for (auto &e : ev) CK(cudaEventCreate(&e));
      CK(cudaEventRecord(ev[0]));
      CK(FMGpuBackwardBegin(&p, 0));
      CK(cudaEventRecord(ev[1]));
      CK(FMGpuBackwardPiece(&p, 0));
      CK(cudaEventRecord(ev[2]));
      CK(FMGpuBackwardEnd(&p, 0));
      CK(cudaEventRecord(ev[3]));
      CK(cudaEventSynchronize(ev[3]));
      float t[3];
      for (int i = 0; i < 3; i++) CK(cudaEventElapsedTime(&t[i], ev[i], ev[i + 1]));
      printf("phases S=%d %s: begin (D, lse2, zeroing) %.3f ms, kernel %.3f ms, end (dQ) %.3f ms; %.2f steps per item, "
             "%.3f us per step per SM in the kernel\n",
             S, mask_name[kind], t[0], t[1], t[2], steps / ((double)dm.nblk * Hkv * B), steps > 0 ? t[1] * 1e3 * 132 / steps : 0.0);
      for (auto &e : ev) cudaEventDestroy(e);
    }
    if (only_swa)
      printf("sweep S=%d window %5d: %8.3f ms %7.1f TFLOP/s, %.2f steps per item, %.3f us per step per SM\n", S, g_window,
             med, flops / (med * 1e-3) / 1e12, steps / ((double)dm.nblk * H * B), steps > 0 ? med * 1e3 * 132 / steps : 0.0);
    else
      printf("bench S=%-6d B=%-3d %-16s%s %9.3f ms  %7.1f TFLOP/s (min %.3f max %.3f ms) rho %.4f  det %7.1f TFLOP/s (%.2fx)  bm %d\n",
             S, B, mask_name[kind], Hkv != H ? " GQA4" : "", med, flops / (med * 1e-3) / 1e12, ms.front(), ms.back(), rho,
             flops / (dmed * 1e-3) / 1e12, dmed / med, FMGpuBwdStepRows(&p));
    if (!only_swa && !g_nodet) /* the deterministic mode's own case, for ab_table.py across builds */
      printf("bench S=%-6d B=%-3d %-16s%s det %9.3f ms  %7.1f TFLOP/s\n", S, B, mask_name[kind], Hkv != H ? " GQA4" : "", dmed,
             flops / (dmed * 1e-3) / 1e12);
    fflush(stdout);
    cudaFree(ws), cudaFree(dm.packed), cudaFree(dm.sum);
  }
  for (int t = 0; t < 8; t++) cudaFree(buf[t]);
  cudaFree(lse);
}

/* detsim: one mask head's walks (of KN-key items at BM rows) for the timing model */
template <int BM, int KN> static DetSimMask detsim_mask(const HostMask &m)
{
  std::vector<int4> pk;
  std::vector<int32_t> sm;
  host_form(m, pk, sm);
  DetSimMask d;
  d.nkb = (m.Sk + KN - 1) / KN;
  d.nqb = (m.Sq + BM - 1) / BM;
  d.qbs.resize(d.nkb), d.part.resize(d.nkb);
  for (int kb = 0; kb < d.nkb; kb++) {
    FMBwdWalk w;
    fmbwd_walk_init_item<BM, KN>(&w, sm.data(), kb, m.Sq, m.Sk, m.causal);
    int pt;
    for (int qb = fmbwd_walk_next<BM>(&w, 0, &pt); qb < d.nqb; qb = fmbwd_walk_next<BM>(&w, qb + 1, &pt)) {
      d.qbs[kb].push_back(qb);
      d.part[kb].push_back(pt);
    }
  }
  return d;
}

/* detsim (host only): the timing model's default, deterministic and rejected-order makespans on
   det's shapes; parameters (microseconds) from env DETSIM="T tp R L P O E" */
static void detsim_table()
{
  DetSimCfg c;
  if (getenv("DETSIM")) sscanf(getenv("DETSIM"), "%lf %lf %lf %lf %lf %lf %lf", &c.T, &c.tp, &c.R, &c.L, &c.P, &c.O, &c.E);
  printf("detsim: T %.2f tp %.2f R %.2f L %.2f P %.2f O %.2f E %.2f us, %d SMs\n", c.T, c.tp, c.R, c.L, c.P, c.O, c.E, c.sms);
  struct Row { const char *name; MaskKind kind; int S, d, Hkv, G; };
  const Row rows[] = {{"full", M_FULL, 8192, 128, 32, 1},         {"causal", M_CAUSAL, 8192, 128, 32, 1},
                      {"prefix_lm", M_PREFIX, 8192, 128, 32, 1},   {"random_heads", M_RANDOM, 8192, 128, 32, 1},
                      {"full 32K", M_FULL, 32768, 128, 32, 1},     {"causal 32K", M_CAUSAL, 32768, 128, 32, 1},
                      {"full GQA4", M_FULL, 8192, 128, 8, 4},      {"causal GQA4", M_CAUSAL, 8192, 128, 8, 4},
                      {"d64 full", M_FULL, 8192, 64, 64, 1},       {"d64 causal", M_CAUSAL, 8192, 64, 64, 1}};
  for (const Row &r : rows) {
    const HostMask m = build_mask(r.kind, r.S, r.S, 1);
    FMGpuBwdParams a{}; /* the step rows the kernel takes for these */
    a.head_dim = r.d;
    a.mask_dense = host_dense(m);
    const int bm = FMGpuBwdStepRows(&a);
    const DetSimMask dm = bm == 128 ? detsim_mask<128, 128>(m) : bm == 80 ? detsim_mask<80, 128>(m) : detsim_mask<64, 128>(m);
    const int B = 131072 / r.S, nrows = B * r.Hkv;
    const int ilv = fmbwd_ilv(c.sms, dm.nkb, nrows, m.causal);
    double t[3];
    for (int det = 0; det < 3; det++) {
      DetSimCfg cc = c;
      cc.det = det;
      cc.T = c.T * bm * r.d / (80.0 * 128.0); /* T is the 80-row, d = 128 step's; others scale with the step's FLOPs */
      t[det] = detsim_run(dm, nrows, r.G, ilv, cc);
    }
    printf("detsim %-14s bm %3d: default %8.1f us, det %8.1f (%.2fx), increasing-down %8.1f (%.2fx)\n", r.name, bm, t[0],
           t[1], t[1] / t[0], t[2], t[2] / t[0]);
  }
}

int main(int argc, char **argv)
{
  const std::string mode = argc > 1 ? argv[1] : "check";
  if (getenv("BWD_BM")) g_bm = atoi(getenv("BWD_BM"));
  if (getenv("BWD_NO_FIRST_STORE")) g_nofs = atoi(getenv("BWD_NO_FIRST_STORE"));
  if (getenv("BWD_NODET")) g_nodet = atoi(getenv("BWD_NODET"));
  if (getenv("BWD_KINDS")) g_kinds = (unsigned)strtoul(getenv("BWD_KINDS"), NULL, 0); /* bench; the ab modes set their own */
  if (mode == "probe") {
    int n = 0;
    return cudaGetDeviceCount(&n) == cudaSuccess && n > 0 ? 0 : 2;
  }
  if (mode == "detsim") { /* host only */
    detsim_table();
    return 0;
  }
  if (mode == "order") { /* host only: the kernel's item order (decode_item, fmbwd_ilv) over a sweep of shapes */
    int bad = 0, shapes = 0;
    for (int nblk : {1, 2, 3, 7, 16, 64, 65, 131, 132, 133, 256})
      for (int rows : {1, 2, 3, 5, 8, 33, 512})
        for (int sms : {1, 60, 132})
          for (int causal = 0; causal < 2; causal++)
            for (int det = 0; det < 2; det++) {
              const int nitems = nblk * rows, ilv = fmbwd_ilv(sms, nblk, rows, causal);
              int wrong = ilv != (causal ? 1 : std::max(1, std::min(rows, sms / nblk)));
              std::vector<int> seen((size_t)nitems, -1); /* the item that took (row, kb) */
              fmbwd::Params p{}; /* what decode_item reads; rows = B Hkv with Hkv = 1 */
              p.nblk = nblk, p.nkb = nblk, p.nitems = nitems, p.ilv = ilv, p.deterministic = det, p.Hkv = 1;
              for (int t = 0; t < nitems && !wrong; t++) {
                int kb, hkv, r;
                fmbwd::decode_item(p, t, &kb, &hkv, &r); /* Hkv = 1: hkv = 0, the batch index is the row */
                if (kb < 0 || kb >= nblk || r < 0 || r >= rows || seen[(size_t)r * nblk + kb] >= 0) wrong = 1;
                else seen[(size_t)r * nblk + kb] = t;
                if (!det && (kb != t % nblk || r != t / nblk)) wrong = 1; /* the default order: key block fastest */
              }
              /* the deterministic mode's turns: within a row key block kb + 1 is taken before kb */
              for (int r = 0; det && !wrong && r < rows; r++)
                for (int kb = 0; kb + 1 < nblk; kb++)
                  if (seen[(size_t)r * nblk + kb + 1] > seen[(size_t)r * nblk + kb]) wrong = 1;
              if (wrong && bad < 5)
                printf("order: wrong for nblk %d, rows %d, %d SMs, causal %d, deterministic %d (ilv %d)\n", nblk, rows, sms, causal,
                       det, ilv);
              bad += wrong;
              shapes++;
            }
    printf("order: %d of %d shapes wrong (each item once; default: key block fastest; deterministic: a row's key blocks "
           "decreasing, rows interleaved as fmbwd_ilv says)\n", bad, shapes);
    /* the visitors of each query block (fmbwd_visitors: the deterministic mode's first and last
       turns, and their count) against the producer's walks (fmbwd_walk_next from every key block) */
    int vbad = 0, vn = 0;
    for (int kind = 0; kind < M_NKIND; kind++)
      for (int sz = 0; sz < 4; sz++)
        for (int bk : {64, 80, 128, 64 + 1}) { /* step rows; 64 + 1: 64 rows on 64-key items (d = 256) */
          const int bm = bk & ~1, kn = bk & 1 ? 64 : 128;
          static const int shape[4][2] = {{1000, 1000}, {4099, 4099}, {700, 1300}, {1300, 700}};
          const HostMask m = build_mask((MaskKind)kind, shape[sz][0], shape[sz][1], 2);
          std::vector<int4> pk;
          std::vector<int32_t> sm;
          const int nblk = host_form(m, pk, sm), nqb = (m.Sq + bm - 1) / bm, nitem = (m.Sk + kn - 1) / kn;
          for (int h = 0; h < m.rows(); h++) {
            const int32_t *sh = sm.data() + (size_t)h * nblk * 8;
            std::vector<int> cnt(nqb, 0), lo(nqb, INT_MAX), hi(nqb, -1);
            for (int kb = 0; kb < nitem; kb++) {
              FMBwdWalk w;
              int part;
              auto nx = [&](int q) {
                return bm == 64 ? fmbwd_walk_next<64>(&w, q, &part)
                                : bm == 80 ? fmbwd_walk_next<80>(&w, q, &part) : fmbwd_walk_next<128>(&w, q, &part);
              };
              if (kn == 64) fmbwd_walk_init_item<64, 64>(&w, sh, kb, m.Sq, m.Sk, m.causal);
              else if (bm == 64) fmbwd_walk_init<64>(&w, sh, kb, m.Sq, m.Sk, m.causal);
              else if (bm == 80) fmbwd_walk_init<80>(&w, sh, kb, m.Sq, m.Sk, m.causal);
              else fmbwd_walk_init<128>(&w, sh, kb, m.Sq, m.Sk, m.causal);
              for (int qb = nx(0); qb < nqb; qb = nx(qb + 1)) cnt[qb]++, lo[qb] = std::min(lo[qb], kb), hi[qb] = std::max(hi[qb], kb);
            }
            for (int qb = 0; qb < nqb; qb++) {
              int f, l, n;
              if (kn == 64) fmbwd_visitors<64, 64>(sh, nitem, qb, m.Sq, m.Sk, m.causal, &f, &l, &n);
              else if (bm == 64) fmbwd_visitors<64>(sh, nblk, qb, m.Sq, m.Sk, m.causal, &f, &l, &n);
              else if (bm == 80) fmbwd_visitors<80>(sh, nblk, qb, m.Sq, m.Sk, m.causal, &f, &l, &n);
              else fmbwd_visitors<128>(sh, nblk, qb, m.Sq, m.Sk, m.causal, &f, &l, &n);
              const int wrong = n != cnt[qb] || f != lo[qb] || l != hi[qb];
              if (wrong && vbad < 5)
                printf("visitors: %s %dx%d, %d rows, %d-key items, head %d, query block %d: %d (%d..%d), the walks give %d (%d..%d)\n",
                       mask_name[kind], m.Sq, m.Sk, bm, kn, h, qb, n, f, l, cnt[qb], lo[qb], hi[qb]);
              vbad += wrong;
              vn++;
            }
          }
        }
    printf("visitors: %d of %d query blocks wrong (count, first and last item against the producer's walks; items of 128 keys "
           "and, at 64 rows, of 64)\n", vbad, vn);
    return bad || vbad ? 1 : 0;
  }
  if (mode == "small") {
    Case c = {"small bf16 d128 GQA2 300x390", 1, 300, 390, 4, 2, 128, 0, 1, 0, M_RANDOM, 0.1f};
    Case c2 = {"small fp16 d64 causal 200x130", 2, 200, 130, 2, 1, 64, 1, 0, 0, M_CAUSAL, 0.125f};
    Case c3 = {"small bf16 d256 GQA2 swa 200x330", 1, 200, 330, 4, 2, 256, 0, 0, 0, M_SWA, 0.0625f};
    const int ok = run_case(c, 2e-2) & run_case(c2, 5e-3) & run_case(c3, 2e-2);
    return ok ? 0 : 1;
  }
  if (mode == "rho") { /* host only: the harness masks' rho and element density (the FLOP conventions) */
    for (int S : {8192, 32768})
      for (int kind = 0; kind < M_NKIND; kind++) {
        HostMask m = build_mask((MaskKind)kind, S, S, 1);
        long vis = 0;
#pragma omp parallel for reduction(+ : vis)
        for (int j = 0; j < S; j++)
          for (int i = 0; i < S; i++) vis += !masked(m, 0, i, j);
        printf("rho S=%-6d %-16s rho %.4f (1 - rho %.4f) density %.4f\n", S, mask_name[kind], block_sparsity(m, 0),
               1.0 - block_sparsity(m, 0), (double)vis / ((double)S * S));
      }
    return 0;
  }
  if (mode == "sweep") { /* per-item overhead: sliding windows of several sizes at 8K */
    const int ws[] = {0, 64, 300, 1000, 3000, 8192};
    for (int w : ws) {
      g_window = w;
      bench(8192, 3, 1);
    }
    return 0;
  }
  if (mode == "prof") { /* one mask at one length, a warm-up and one call: for ncu (-k regex:bwd_kernel -s 1 -c 1) */
    const int S = argc > 2 ? atoi(argv[2]) : 8192;
    g_prof_kind = argc > 3 ? atoi(argv[3]) : 0;
    /* the default backward only (a clock sampled over the call then sees one kernel); BWD_DET=1
       times the deterministic one after it, as before */
    g_nodet = !(getenv("BWD_DET") && atoi(getenv("BWD_DET")));
    if (getenv("BWD_D")) g_d = atoi(getenv("BWD_D")); /* the head dimension (H = 4096 / d) */
    bench(S, 1, 0, getenv("BWD_HKV") ? atoi(getenv("BWD_HKV")) : 0); /* BWD_HKV: kv heads (GQA; full and causal only) */
    return 0;
  }
  /* the A/B tables at head dim d: full, causal, sliding window, causal document at 8K; full, causal at 32K */
  auto ab_table = [&](int d, int nodet) {
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    g_d = d;
    g_nodet = nodet;
    g_kinds = 1u << M_FULL | 1u << M_CAUSAL | 1u << M_SWA | 1u << M_DOC;
    bench(8192, reps);
    g_kinds = 1u << M_FULL | 1u << M_CAUSAL;
    bench(32768, reps);
    return reps;
  };
  if (mode == "ab") {
    const int reps = ab_table(128, 1);
    if (getenv("BWD_AB_SPARSE") && atoi(getenv("BWD_AB_SPARSE"))) { /* and share question at 8K, the three sparse masks at 32K */
      g_kinds = 1u << M_SQ;
      bench(8192, reps);
      g_kinds = 1u << M_SWA | 1u << M_DOC | 1u << M_SQ;
      bench(32768, reps);
    }
    return 0;
  }
  if (mode == "ab256") { /* d = 256, H = 16, with the deterministic mode */
    ab_table(256, 0);
    return 0;
  }
  if (mode == "fb256") { /* d = 256, H = 16, one sequence of 4096, causal: the Hopper kernel, then the SIMT fallback */
    g_nodet = 1;
    g_d = 256;
    g_tokens = 4096;
    g_kinds = 1u << M_CAUSAL;
    bench(4096, 3);
    g_fb = 1;
    bench(4096, 1);
    return 0;
  }
  if (mode == "ab64") { /* d = 64, H = 64 */
    ab_table(64, 1);
    return 0;
  }
  if (mode == "detprof") { /* det's masks, each mode once more with the wait counters (a -DFMBWD_PROF build) */
#ifndef FMBWD_PROF
    fprintf(stderr, "detprof: build with -DFMBWD_PROF\n");
    return 2;
#else
    g_detprof = 1;
    g_nodet = 1;
    g_kinds = 1u << M_FULL | 1u << M_CAUSAL | 1u << M_PREFIX | 1u << M_RANDOM;
    bench(8192, 1);
    g_kinds = 1u << M_CAUSAL;
    bench(32768, 1);
    g_kinds = 1u << M_FULL | 1u << M_CAUSAL;
    bench(8192, 1, 0, 8); /* GQA 4:1 */
    g_d = 64;
    g_kinds = 1u << M_CAUSAL;
    bench(8192, 1);
    return 0;
#endif
  }
  if (mode == "itemprof") { /* where an item's time goes (a -DFMBWD_PROF build): dense and short-item masks, 8K and 32K */
#ifndef FMBWD_PROF
    fprintf(stderr, "itemprof: build with -DFMBWD_PROF\n");
    return 2;
#else
    g_itemprof = 1;
    g_nodet = 1;
    g_kinds = 1u << M_FULL | 1u << M_CAUSAL | 1u << M_SWA | 1u << M_DOC | 1u << M_SQ;
    bench(8192, 1);
    bench(32768, 1);
    return 0;
#endif
  }
  if (mode == "det") { /* the deterministic mode beside the default: the masks where it costs most */
    const int reps = argc > 2 ? atoi(argv[2]) : 3;
    g_kinds = 1u << M_FULL | 1u << M_CAUSAL | 1u << M_PREFIX | 1u << M_RANDOM;
    bench(8192, reps);
    g_kinds = 1u << M_FULL | 1u << M_PREFIX;
    bench(32768, reps);
    g_kinds = 1u << M_FULL | 1u << M_CAUSAL;
    bench(8192, reps, 0, 8); /* GQA 4:1 */
    g_d = 64; /* d = 64 (H = 64): 128-row steps on these dense masks */
    bench(8192, reps);
    return 0;
  }
  if (mode == "bench") {
    const int reps = argc > 2 ? atoi(argv[2]) : 5;
    bench(8192, reps);
    bench(32768, reps);
    bench(8192, reps, 0, 8); /* GQA 4:1 */
    return 0;
  }
  const float s128 = 0.08838834764831845f, s64 = 0.125f;
  std::vector<Case> cs;
  for (int kind = 0; kind < M_NKIND; kind++)
    cs.push_back({"bf16 d128 GQA4:1 1000x1000", 1, 1000, 1000, 4, 1, 128, 0, 0, 0, (MaskKind)kind, s128});
  cs.push_back({"fp16 d128 GQA4:1 1000x1000", 1, 1000, 1000, 4, 1, 128, 1, 0, 0, M_CAUSAL, s128});
  cs.push_back({"fp16 d64 1000x4099 per-head", 1, 1000, 4099, 4, 2, 64, 1, 1, 0, M_RANDOM, s64});
  cs.push_back({"bf16 d128 4099x1000 per-head", 1, 4099, 1000, 2, 2, 128, 0, 1, 0, M_RANDOM, 0.3f});
  cs.push_back({"bf16 d64 4099x4099 causal", 1, 4099, 4099, 1, 1, 64, 0, 0, 0, M_CAUSAL, s64});
  /* rows 0..1299 see no key (bottom-right diagonal): whole query blocks nobody visits (their dq
     must be 0, and their turns never handed over) */
  cs.push_back({"bf16 d64 2000x700 causal", 1, 2000, 700, 2, 1, 64, 0, 0, 0, M_CAUSAL, s64});
  cs.push_back({"bf16 d64 1000x1000 B2 swa", 2, 1000, 1000, 2, 1, 64, 0, 0, 0, M_SWA, s64});
  /* d = 64 on 128-row steps (dense masks): GQA, S_q != S_k, a last step of 2 rows */
  cs.push_back({"fp16 d64 GQA2 777x1333 causal", 1, 777, 1333, 4, 2, 64, 1, 0, 0, M_CAUSAL, s64});
  cs.push_back({"bf16 d64 B2 130x300 full", 2, 130, 300, 2, 1, 64, 0, 0, 0, M_FULL, s64});
  cs.push_back({"fp16 d128 1000x4099 doc", 1, 1000, 4099, 2, 1, 128, 1, 0, 0, M_DOC, s128});
  /* first stores: blocks nobody visits in the middle of visited ones (the window), two samples */
  cs.push_back({"bf16 d128 2000x700 B2 swa", 2, 2000, 700, 2, 1, 128, 0, 0, 0, M_SWA, s128});
  /* first stores: about 128 writers per block racing for its flag (prefix LM: not a dense mask,
     so 64-row steps) */
  cs.push_back({"bf16 d128 128x16384 prefix", 1, 128, 16384, 2, 1, 128, 0, 0, 0, M_PREFIX, s128});
  /* d = 256: 64-key items, the head dimension split between the consumers; partial tiles, GQA,
     S_q != S_k both ways, a ragged last half-block, one and two samples */
  cs.push_back({"bf16 d256 600x700 per-head", 1, 600, 700, 2, 1, 256, 0, 1, 0, M_RANDOM, 0.0625f});
  cs.push_back({"fp16 d256 GQA2 1000x1000 causal", 1, 1000, 1000, 4, 2, 256, 1, 0, 0, M_CAUSAL, 0.0625f});
  cs.push_back({"bf16 d256 1300x700 swa", 1, 1300, 700, 2, 2, 256, 0, 0, 0, M_SWA, 0.0625f});
  cs.push_back({"bf16 d256 B2 130x300 full", 2, 130, 300, 2, 1, 256, 0, 0, 0, M_FULL, 0.0625f});
  cs.push_back({"fp16 d256 700x2100 doc", 1, 700, 2100, 2, 1, 256, 1, 0, 0, M_DOC, 0.0625f});
  cs.push_back({"bf16 d256 1000x1000 prefix", 1, 1000, 1000, 2, 1, 256, 0, 0, 0, M_PREFIX, 0.0625f});
  cs.push_back({"bf16 d256 forced fallback 300x500", 1, 300, 500, 2, 1, 256, 0, 0, 1, M_SQ, 0.0625f});
  cs.push_back({"fp16 d128 forced fallback 700x600", 1, 700, 600, 4, 2, 128, 1, 1, 1, M_PREFIX, s128});
  int fails = 0;
  for (auto &c : cs) fails += !run_case(c, c.f16 ? 5e-3 : 2e-2);
  fails += !run_mixed(2e-2);
  fails += !run_mixed(2e-2, 256); /* the ragged first piece (512 + 600: item halves past its keys) at d = 256 */
  printf("check: %d of %zu cases failed\n", fails, cs.size() + 2);
  return fails ? 1 : 0;
}
