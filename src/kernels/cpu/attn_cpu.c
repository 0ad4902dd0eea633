/*
 * attn_cpu.c - the exact, multithreaded CPU attention backend: the library's reference and
 * fallback. Forward (O, LSE), the LSE merge of partial results, and backward (dQ, dK, dV).
 *
 * Everything runs in fp32 with fp32 accumulation. The (batch, kv head) slices of K and V (and
 * in backward Q, dO) are staged in fp32 once, in groups whose size is bounded by a memory
 * budget; keys are also staged transposed, so that every product below is a row-major
 * C (+)= A * B with a contiguous inner dimension, done by a small register-blocked kernel.
 * The kernels (attn_cpu_kern.h) are compiled for 4-float vectors (any target), and on x86-64
 * also for 8 (AVX2 + FMA) and 16 (AVX-512); the widest the CPU supports is chosen at run time
 * (the option -fm_cpu_vector_width 4, 8 or 16 can ask for a narrower one).
 *
 * Tiles: BM query rows x BN key columns, key tiles cut at global multiples of BN and clipped to
 * the problem's key range [k0, k0 + nk). Each (query tile, key tile) is classified from the
 * mask's block summaries (FMClassifyTileInline over every summary block the key tile meets,
 * on the hull [min, max] of the tile's global rows): SKIP tiles cost nothing, FULL tiles run
 * with no per-element mask test, PARTIAL tiles test every element with the column-bound rule.
 *
 * Forward: OpenMP over (batch, query head, query tile), online softmax in base 2.
 * Backward: no atomics. Pass 1 runs over (batch, kv head, key tile) and accumulates dK, dV over
 * the query heads of the GQA group; pass 2 runs over (batch, query head, query tile) and
 * accumulates dQ. P is recomputed from the final LSE in both passes.
 */
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include "fmcpu.h"
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#if defined(__GNUC__)
#pragma GCC diagnostic ignored "-Wpsabi"
#endif

#define BM 64                       /* query rows per tile */
#define BN 128                      /* key columns per tile (multiple of 16) */
#define FM_CPU_STAGE_BYTES_DEFAULT ((size_t)256 << 20) /* fp32 staging budget per call; -fm_cpu_stage_bytes overrides */
#define LOG2E 1.4426950408889634f
#define LN2 0.6931471805599453f

#define FM_INLINE static inline __attribute__((always_inline))
/* Fully unroll a loop whose trip count is a (small) constant after inlining: the micro kernel's
   accumulators must live in registers. */
#if defined(__clang__)
#define FM_UNROLL _Pragma("unroll")
#elif defined(__GNUC__)
#define FM_UNROLL _Pragma("GCC unroll 8")
#else
#define FM_UNROLL
#endif

/* x86-64 with GCC or clang: function-level targets and __builtin_cpu_supports for the wider kernels. */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__)) && !defined(FM_CPU_NO_MULTIVERSION)
#define FM_CPU_X86_MV 1
#else
#define FM_CPU_X86_MV 0
#endif

/* ------------------------------------------------------------------ problem helpers */
typedef struct {
  const FMAttnProblem *p;
  int D, Hq, Hkv, g, gm, nq, nk, k0, off;
  int ms;                 /* mask rows per sample: mask_heads when mask_batch > 1, else 0 (one shared set) */
  int VW;                 /* vector width of the kernels in use */
  int Dp;                 /* head_dim rounded up to VW: row stride of staged rows and accumulators */
  int nqt, kt0, nkt;      /* query tiles; first global key tile index, number of key tiles */
  int ldt;                /* row stride of the transposed staged keys/values: nk rounded up to VW, + VW (zeros) */
  int gs, G;              /* slices of the current group: global slice ids [gs, gs + G) */
  float cs;               /* scale * log2(e) */
  /* staged data, per slice of the group */
  float *kt, *vt;         /* [G][D][ldt] */
  float *kr, *vr;         /* [G][nk][Dp] (padding columns 0) */
  float *qr, *dor;        /* [G][g][nq][Dp] (backward) */
  float *delta;           /* [G][g][nq] rowsum(dO * O) (backward) */
  /* inputs and outputs */
  const void *q, *k, *v, *o, *dout;
  void *out;              /* forward o / backward dk */
  void *dv;
  FMDType o_dtype;        /* forward output / backward g_dtype */
  float *lse;
  const float *lse_in;
  float *dq_acc;
} FMCPUCtx;

/* The work functions of one vector width (attn_cpu_kern.h). */
typedef struct {
  int vw;
  void (*fwd_item)(const FMCPUCtx *c, int s, int hh, int qt, float *buf);
  void (*bwd_kv_item)(const FMCPUCtx *c, int s, int t, float *buf);
  void (*bwd_q_item)(const FMCPUCtx *c, int s, int hh, int qt, float *buf);
} FMCPUKernels;

/* Global columns [*c0, *c1) of key tile t (0 <= t < nkt). */
FM_INLINE void key_tile(const FMCPUCtx *c, int t, int *c0, int *c1)
{
  int a = (c->kt0 + t) * BN, e = a + BN;
  *c0 = a > c->k0 ? a : c->k0;
  *c1 = e < c->k0 + c->nk ? e : c->k0 + c->nk;
}

/* Mask row of batch b, query head h: (mask_batch > 1 ? b : 0) * mask_heads + h / (heads_q / mask_heads). */
FM_INLINE int mask_row_index(const FMCPUCtx *c, int b, int h) { return b * c->ms + h / c->gm; }

/* Class of global rows [g0, g1) (a hull) against global columns [c0, c1) for mask row hm. */
FM_INLINE FMTileClass tile_class(const FMMaskDesc *m, int hm, int g0, int g1, int c0, int c1)
{
  const int32_t *sh;
  int seen = 0;
  if (!m->summary || m->block <= 0 || m->nblocks_k <= 0) return FM_TILE_PARTIAL;
  sh = m->summary + (size_t)hm * m->nblocks_k * FM_SUM_N;
  for (int kb = c0 / m->block; kb <= (c1 - 1) / m->block; kb++)
    seen |= 1 << FMClassifyTileInline(sh, m->causal, m->seqlen_q, m->seqlen_k, m->block, g0, g1, kb);
  if (seen == 1 << FM_TILE_SKIP) return FM_TILE_SKIP;
  if (seen == 1 << FM_TILE_FULL) return FM_TILE_FULL;
  return FM_TILE_PARTIAL;
}

/* Global row of local row r. */
FM_INLINE int grow(const FMAttnProblem *p, int r) { return p->qrows ? p->qrows[r] : r; }

/* Hull [*g0, *g1) of the global rows of local rows [r0, r0 + mr). */
FM_INLINE void row_hull(const FMAttnProblem *p, int r0, int mr, int *g0, int *g1)
{
  if (!p->qrows) { *g0 = r0; *g1 = r0 + mr; return; }
  int lo = p->qrows[r0], hi = lo;
  for (int i = 1; i < mr; i++) {
    int x = p->qrows[r0 + i];
    lo = x < lo ? x : lo;
    hi = x > hi ? x : hi;
  }
  *g0 = lo; *g1 = hi + 1;
}

/* Set s[jj] = -inf for the columns c0 + jj (jj < nt) that global row gi may not see. */
FM_INLINE void mask_row(float *restrict s, int gi, int c0, int nt, const FMMaskDesc *m, int hm, int off)
{
  const size_t o = (size_t)hm * m->seqlen_k + c0;
  const int32_t *restrict lts = m->bnd[0] + o, *restrict lte = m->bnd[1] + o, *restrict uts = m->bnd[2] + o,
                          *restrict ute = m->bnd[3] + o;
  const int causal = m->causal != 0, lim = gi + off - c0; /* causal: jj > lim is masked */
#pragma omp simd
  for (int jj = 0; jj < nt; jj++) {
    int msk = (lts[jj] <= gi) & (gi < lte[jj]);
    msk |= (uts[jj] <= gi) & (gi < ute[jj]);
    msk |= causal & (jj > lim);
    s[jj] = msk ? -INFINITY : s[jj];
  }
}

/* Staged fp32 row-major K (which = 0) or V (which = 1) rows of slice s: [nk][Dp]. */
FM_INLINE const float *slice_rows(const FMCPUCtx *c, int s, int which)
{
  return (which ? c->vr : c->kr) + (size_t)s * c->nk * c->Dp;
}

/* Staged fp32 Q (which = 0) or dO (which = 1) rows of slice s, GQA member hh: [nq][Dp]. */
FM_INLINE const float *slice_qrows(const FMCPUCtx *c, int s, int hh, int which)
{
  return (which ? c->dor : c->qr) + ((size_t)s * c->g + hh) * c->nq * c->Dp;
}

/*
 * Stage keys [j0, j1) of slice s: K transposed ([D][ldt]) and V row-major ([nk][Dp]); in backward
 * also K row-major and V transposed. Rows are copied even for fp32 inputs: reading them in place
 * would stride by heads * head_dim, often a multiple of 4 KiB, which thrashes the caches.
 */
static void stage_keys(FMCPUCtx *c, int s, int j0, int j1, int backward)
{
  const FMAttnProblem *p = c->p;
  const int D = c->D, Dp = c->Dp, id = c->gs + s, b = id / c->Hkv, hk = id % c->Hkv;
  float *kt = c->kt + (size_t)s * D * c->ldt, *vt = backward ? c->vt + (size_t)s * D * c->ldt : NULL;
  for (int j0b = j0; j0b < j1; j0b += 16) { /* 16 keys at a time, so the transposed writes fill cache lines */
    int j1b = j0b + 16 < j1 ? j0b + 16 : j1;
    for (int j = j0b; j < j1b; j++) {
      size_t src = (((size_t)b * c->nk + j) * c->Hkv + hk) * D;
      float *kr = c->kr + ((size_t)s * c->nk + j) * Dp, *vr = c->vr + ((size_t)s * c->nk + j) * Dp;
      fm_row_to_float(c->k, src, p->dtype, kr, D);
      fm_row_to_float(c->v, src, p->dtype, vr, D);
      for (int d = D; d < Dp; d++) kr[d] = vr[d] = 0;
    }
    for (int d = 0; d < D; d++)
      for (int j = j0b; j < j1b; j++) {
        kt[(size_t)d * c->ldt + j] = c->kr[((size_t)s * c->nk + j) * Dp + d];
        if (vt) vt[(size_t)d * c->ldt + j] = c->vr[((size_t)s * c->nk + j) * Dp + d];
      }
  }
  if (j1 == c->nk) /* zero padding after the last key */
    for (int d = 0; d < D; d++)
      for (int j = c->nk; j < c->ldt; j++) {
        kt[(size_t)d * c->ldt + j] = 0;
        if (vt) vt[(size_t)d * c->ldt + j] = 0;
      }
}

/* Stage Q and dO rows [r0, r1) of slice s, member hh, and Delta = rowsum(dO * O). tmp: D floats. */
static void stage_rows(FMCPUCtx *c, int s, int hh, int r0, int r1, float *tmp)
{
  const FMAttnProblem *p = c->p;
  const int D = c->D, Dp = c->Dp, id = c->gs + s, b = id / c->Hkv, hk = id % c->Hkv, h = hk * c->g + hh;
  float *delta = c->delta + ((size_t)s * c->g + hh) * c->nq;
  for (int r = r0; r < r1; r++) {
    size_t src = (((size_t)b * c->nq + r) * c->Hq + h) * D;
    float *dor = c->dor + (((size_t)s * c->g + hh) * c->nq + r) * Dp, *qr = c->qr + (((size_t)s * c->g + hh) * c->nq + r) * Dp;
    fm_row_to_float(c->q, src, p->dtype, qr, D);
    fm_row_to_float(c->dout, src, p->dtype, dor, D);
    for (int d = D; d < Dp; d++) qr[d] = dor[d] = 0;
    fm_row_to_float(c->o, src, p->dtype, tmp, D);
    double acc = 0;
    for (int d = 0; d < D; d++) acc += (double)dor[d] * tmp[d];
    delta[r] = (float)acc;
  }
}

/* ------------------------------------------------------------------ kernels, one per vector width */
#define FMK_VW 4
#define FMK(name) name##_w4
#define FMK_TARGET
#include "attn_cpu_kern.h"
#if FM_CPU_X86_MV
#define FMK_VW 8
#define FMK(name) name##_w8
#define FMK_TARGET __attribute__((target("avx2,fma")))
#include "attn_cpu_kern.h"
#define FMK_VW 16
#define FMK(name) name##_w16
#define FMK_TARGET __attribute__((target("avx512f,avx512vl,avx2,fma")))
#include "attn_cpu_kern.h"
#endif

/*
 * The kernels to use: the widest the CPU runs, or want (4, 8, 16: -fm_cpu_vector_width, in the
 * problem's options) when that one is available (tests use it to exercise every width).
 */
static const FMCPUKernels *select_kernels(int want)
{
#if FM_CPU_X86_MV
  int has8, has16;
  __builtin_cpu_init();
  has8 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  has16 = has8 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
  if (want == 4) return &kernels_w4;
  if (want == 8 && has8) return &kernels_w8;
  if (has16 && want != 8) return &kernels_w16;
  if (has8) return &kernels_w8;
#endif
  (void)want;
  return &kernels_w4;
}

/* ------------------------------------------------------------------ drivers */
/* Check a problem description (sizes, dtype, key range, rows, mask). */
static FMErrorCode check_problem(const FMAttnProblem *p)
{
  const FMMaskDesc *m;
  FMValidPointer(p, 1);
  m = &p->mask;
  FMCheck(p->batch >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Problem batch = %d; expected >= 1", p->batch);
  FMCheck(p->heads_kv >= 1 && p->heads_q >= 1 && p->heads_q % p->heads_kv == 0, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
          "Problem heads_q = %d, heads_kv = %d; expected heads_q a positive multiple of heads_kv", p->heads_q, p->heads_kv);
  FMCheck(p->head_dim >= 8 && p->head_dim % 8 == 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Problem head_dim = %d; expected a positive multiple of 8", p->head_dim);
  FMCheck(p->scale > 0 && isfinite(p->scale), MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Problem scale = %g; expected a finite value > 0",
          (double)p->scale);
  FMCheck(p->dtype == FM_DTYPE_BF16 || p->dtype == FM_DTYPE_FP16 || p->dtype == FM_DTYPE_FP32, MPI_COMM_SELF, FM_ERR_ARG_WRONG,
          "Problem dtype = %d; expected FM_DTYPE_BF16, FM_DTYPE_FP16 or FM_DTYPE_FP32", (int)p->dtype);
  FMCheck(m->seqlen_q >= 1 && m->seqlen_k >= 1, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "Mask seqlen_q = %d, seqlen_k = %d; expected >= 1",
          m->seqlen_q, m->seqlen_k);
  FMCheck(m->mask_heads == 1 || m->mask_heads == p->heads_kv, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
          "Mask has %d heads; expected 1 or heads_kv = %d", m->mask_heads, p->heads_kv);
  FMCheck(m->mask_batch <= 1 || m->mask_batch == p->batch, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
          "Mask has mask_batch %d; expected 1 or the problem's batch %d", m->mask_batch, p->batch);
  for (int v = 0; v < 4; v++)
    FMCheck(m->bnd[v], MPI_COMM_SELF, FM_ERR_ARG_NULL, "Mask bound vector %d is NULL; expected all four vectors", v);
  FMCheck(p->k0 >= 0 && p->nk >= 0 && (long)p->k0 + p->nk <= m->seqlen_k, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Problem key range [k0, k0 + nk) = [%d, %ld); expected inside [0, seqlen_k = %d)", p->k0, (long)p->k0 + p->nk, m->seqlen_k);
  FMCheck(p->nq >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Problem nq = %d; expected >= 0", p->nq);
  if (!p->qrows) {
    FMCheck(p->nq <= m->seqlen_q, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
            "Problem nq = %d with qrows = NULL (rows 0..nq-1); expected nq <= seqlen_q = %d", p->nq, m->seqlen_q);
  } else {
    for (int r = 0; r < p->nq; r++)
      FMCheck(p->qrows[r] >= 0 && p->qrows[r] < m->seqlen_q, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
              "Problem qrows[%d] = %d; expected 0 <= row < seqlen_q = %d", r, p->qrows[r], m->seqlen_q);
  }
  if (m->summary)
    FMCheck(m->block > 0 && m->nblocks_k == (m->seqlen_k + m->block - 1) / m->block, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
            "Mask summaries have block = %d, nblocks_k = %d; expected ceil(seqlen_k = %d / block) blocks", m->block, m->nblocks_k,
            m->seqlen_k);
  return FM_SUCCESS;
}

static void ctx_init(FMCPUCtx *c, const FMAttnProblem *p, int vw)
{
  memset(c, 0, sizeof(*c));
  c->p = p;
  c->VW = vw;
  c->Dp = (p->head_dim + vw - 1) / vw * vw;
  c->D = p->head_dim; c->Hq = p->heads_q; c->Hkv = p->heads_kv;
  c->g = p->heads_q / p->heads_kv; c->gm = p->heads_q / p->mask.mask_heads;
  c->ms = p->mask.mask_batch > 1 ? p->mask.mask_heads : 0;
  c->nq = p->nq; c->nk = p->nk; c->k0 = p->k0;
  c->off = p->mask.seqlen_k - p->mask.seqlen_q;
  c->nqt = (p->nq + BM - 1) / BM;
  c->kt0 = p->k0 / BN;
  c->nkt = p->nk > 0 ? (p->k0 + p->nk - 1) / BN - c->kt0 + 1 : 0;
  c->ldt = (p->nk + vw - 1) / vw * vw + vw;
  c->cs = p->scale * LOG2E;
}

static int num_threads(const FMAttnProblem *p)
{
#ifdef _OPENMP
  return p->nthreads > 0 ? p->nthreads : omp_get_max_threads();
#else
  (void)p;
  return 1;
#endif
}

/*
 * Slices per staging group under the budget, given the bytes one slice needs. The budget is
 * FM_CPU_STAGE_BYTES_DEFAULT unless the problem's options give one (-fm_cpu_stage_bytes; tests use a
 * tiny one to run one slice per group).
 */
static int group_size(const FMCPUCtx *c, size_t per_slice)
{
  const size_t budget = c->p->opts.cpu_stage_bytes > 0 ? c->p->opts.cpu_stage_bytes : FM_CPU_STAGE_BYTES_DEFAULT;
  size_t nslices = (size_t)c->p->batch * c->Hkv, G = per_slice ? budget / per_slice : nslices;
  if (G < 1) G = 1;
  if (G > nslices) G = nslices;
  return (int)G;
}

/*
 * FMCPUForward - exact forward attention over the problem's key columns. Not collective;
 *   multithreaded with OpenMP (p->nthreads threads when > 0).
 *   p        the problem (shape, dtype, scale, local rows, key range, mask)
 *   q        [batch][nq][heads_q][head_dim] in p->dtype
 *   k, v     [batch][nk][heads_kv][head_dim] in p->dtype: the key columns [k0, k0 + nk)
 *   o        out: [batch][nq][heads_q][head_dim] in o_dtype (FM_DTYPE_FP32 for partial
 *            results to merge with FMCPUMergePartial)
 *   o_dtype  element type of o
 *   lse      out: float [batch][heads_q][nq], natural log of the softmax denominator;
 *            -inf (and O = 0) for rows that see no key of the range
 */
FMErrorCode FMCPUForward(const FMAttnProblem *p, const void *q, const void *k, const void *v, void *o, FMDType o_dtype, float *lse)
{
  FMCPUCtx c;
  const FMCPUKernels *kern;
  size_t per_slice, scratch;
  int nth, fail = 0;
  FMCall(check_problem(p));
  FMCheck(o_dtype == FM_DTYPE_BF16 || o_dtype == FM_DTYPE_FP16 || o_dtype == FM_DTYPE_FP32, MPI_COMM_SELF, FM_ERR_ARG_WRONG,
          "Argument o_dtype = %d; expected FM_DTYPE_BF16, FM_DTYPE_FP16 or FM_DTYPE_FP32", (int)o_dtype);
  if (p->nq == 0) return FM_SUCCESS;
  FMValidPointer(q, 2);
  FMValidPointer(o, 5);
  FMValidPointer(lse, 7);
  if (p->nk > 0) {
    FMValidPointer(k, 3);
    FMValidPointer(v, 4);
  }
  kern = select_kernels(p->opts.cpu_vector_width);
  ctx_init(&c, p, kern->vw);
  c.q = q; c.k = k; c.v = v; c.out = o; c.o_dtype = o_dtype; c.lse = lse;
  nth = num_threads(p);
  per_slice = sizeof(float) * ((size_t)c.D * c.ldt + 2 * (size_t)c.nk * c.Dp);
  c.G = group_size(&c, per_slice);
  {
    FMErrorCode ierr = FMMalloc((size_t)c.G * c.D * c.ldt, &c.kt);
    if (!ierr) ierr = FMMalloc((size_t)c.G * c.nk * c.Dp + 1, &c.kr);
    if (!ierr) ierr = FMMalloc((size_t)c.G * c.nk * c.Dp + 1, &c.vr);
    if (ierr) { free(c.kt); free(c.kr); free(c.vr); FMCall(ierr); }
  }
  scratch = (size_t)2 * BM * c.Dp + (size_t)BM * BN + 2 * BM;
  const int nslices = p->batch * c.Hkv, chunk = 64, nkc = (c.nk + chunk - 1) / chunk;
#pragma omp parallel num_threads(nth)
  {
    float *buf = (float *)malloc(sizeof(float) * scratch);
    if (!buf) {
#pragma omp atomic write
      fail = 1;
    }
    for (int gs = 0; gs < nslices; gs += c.G) {
      const int G = nslices - gs < c.G ? nslices - gs : c.G;
#pragma omp single
      c.gs = gs;
      /* implicit barriers after the single and after each loop: every thread sees c.gs, and the
         staged slices before computing on them */
#pragma omp for schedule(dynamic, 1)
      for (int it = 0; it < G * nkc; it++) {
        int s = it / nkc, j0 = (it % nkc) * chunk, j1 = j0 + chunk < c.nk ? j0 + chunk : c.nk;
        stage_keys(&c, s, j0, j1, 0);
      }
      /* slice by slice (its K, V stay in cache), within a slice the heaviest query tiles first
         (with causal masks the last tiles see the most keys), the GQA heads of a tile together */
      const int per_slice_items = c.nqt * c.g;
#pragma omp for schedule(dynamic, 1)
      for (int it = 0; it < G * per_slice_items; it++) {
        int s = it / per_slice_items, rest = it % per_slice_items;
        if (buf) kern->fwd_item(&c, s, rest % c.g, c.nqt - 1 - rest / c.g, buf);
      }
    }
    free(buf);
  }
  free(c.kt);
  free(c.kr);
  free(c.vr);
  FMCheck(!fail, MPI_COMM_SELF, FM_ERR_MEM, "Out of memory allocating %zu bytes of thread scratch", sizeof(float) * scratch);
  return FM_SUCCESS;
}

/*
 * FMCPUMergePartial - merge a partial forward result into an accumulated one through the LSE.
 *   Not collective; multithreaded.
 *   p        the problem (batch, heads_q, head_dim, nq are used)
 *   o_acc    in/out: fp32 [batch][nq][heads_q][head_dim]
 *   lse_acc  in/out: float [batch][heads_q][nq]
 *   o_part   fp32 [batch][nq][heads_q][head_dim], from FMCPUForward over other key columns
 *   lse_part float [batch][heads_q][nq]
 *   With L = log(exp(lse_acc) + exp(lse_part)): o_acc = o_acc exp(lse_acc - L) + o_part
 *   exp(lse_part - L), lse_acc = L. Rows that are -inf on both sides stay O = 0, LSE = -inf.
 */
FMErrorCode FMCPUMergePartial(const FMAttnProblem *p, float *o_acc, float *lse_acc, const float *o_part, const float *lse_part)
{
  int nth;
  FMValidPointer(p, 1);
  FMCheck(p->batch >= 1 && p->heads_q >= 1 && p->head_dim >= 1 && p->nq >= 0, MPI_COMM_SELF, FM_ERR_ARG_SIZ,
          "Problem batch = %d, heads_q = %d, head_dim = %d, nq = %d; expected positive sizes", p->batch, p->heads_q, p->head_dim, p->nq);
  if (p->nq == 0) return FM_SUCCESS;
  FMValidPointer(o_acc, 2);
  FMValidPointer(lse_acc, 3);
  FMValidPointer(o_part, 4);
  FMValidPointer(lse_part, 5);
  nth = num_threads(p);
  const int D = p->head_dim, Hq = p->heads_q, nq = p->nq;
  const long nrows = (long)p->batch * Hq * nq;
#pragma omp parallel for num_threads(nth) schedule(static)
  for (long x = 0; x < nrows; x++) {
    long b = x / ((long)Hq * nq), h = (x / nq) % Hq, r = x % nq;
    float la = lse_acc[x], lp = lse_part[x];
    float *restrict oa = o_acc + (((size_t)b * nq + r) * Hq + h) * D;
    const float *restrict op = o_part + (((size_t)b * nq + r) * Hq + h) * D;
    if (lp == -INFINITY) continue;
    if (la == -INFINITY) {
      memcpy(oa, op, sizeof(float) * (size_t)D);
      lse_acc[x] = lp;
      continue;
    }
    float mxl = la > lp ? la : lp;
    float ea = expf(la - mxl), ep = expf(lp - mxl), sum = ea + ep;
    float wa = ea / sum, wp = ep / sum;
    for (int d = 0; d < D; d++) oa[d] = wa * oa[d] + wp * op[d];
    lse_acc[x] = mxl + logf(sum);
  }
  return FM_SUCCESS;
}

/*
 * FMCPUBackward - exact backward over the problem's key columns. Not collective; multithreaded
 *   without atomics.
 *   p        the problem
 *   q        [batch][nq][heads_q][head_dim] in p->dtype
 *   k, v     [batch][nk][heads_kv][head_dim] in p->dtype (key columns [k0, k0 + nk))
 *   o        the FINAL forward output of these rows over all keys, layout and dtype of q
 *   lse      the FINAL float [batch][heads_q][nq] log-sum-exp (-inf: row fully masked)
 *   dout     dO, layout and dtype of q
 *   dq_acc   in/out float [batch][nq][heads_q][head_dim]: this range's dQ is ADDED to it
 *   dk, dv   out: [batch][nk][heads_kv][head_dim] in g_dtype (every element written)
 *   g_dtype  element type of dk and dv (FM_DTYPE_FP32 for pieces that will be reduced)
 *   Because o and lse are final, pieces over disjoint key ranges add up to the whole dQ and
 *   their dK, dV are the whole one's rows.
 *   Bitwise reproducible whatever the threads' schedule and whatever their number (so
 *   p->opts.deterministic needs nothing here): the work items (a key tile's dK, dV; a query
 *   tile's dQ, added once into dq_acc) are fixed by BM, BN and the shape, each output element
 *   is written by one item, and each item sums over its tiles in a fixed order. Another vector
 *   width (-fm_cpu_vector_width, or another CPU) may round differently.
 */
FMErrorCode FMCPUBackward(const FMAttnProblem *p, const void *q, const void *k, const void *v, const void *o, const float *lse,
                          const void *dout, float *dq_acc, void *dk, void *dv, FMDType g_dtype)
{
  FMCPUCtx c;
  const FMCPUKernels *kern;
  size_t per_slice, scratch;
  int nth, fail = 0;
  FMErrorCode ierr = FM_SUCCESS;
  FMCall(check_problem(p));
  FMCheck(g_dtype == FM_DTYPE_BF16 || g_dtype == FM_DTYPE_FP16 || g_dtype == FM_DTYPE_FP32, MPI_COMM_SELF, FM_ERR_ARG_WRONG,
          "Argument g_dtype = %d; expected FM_DTYPE_BF16, FM_DTYPE_FP16 or FM_DTYPE_FP32", (int)g_dtype);
  if (p->nk > 0) {
    FMValidPointer(k, 3);
    FMValidPointer(v, 4);
    FMValidPointer(dk, 9);
    FMValidPointer(dv, 10);
  }
  if (p->nq > 0) {
    FMValidPointer(q, 2);
    FMValidPointer(o, 5);
    FMValidPointer(lse, 6);
    FMValidPointer(dout, 7);
    FMValidPointer(dq_acc, 8);
  }
  if (p->nk == 0) return FM_SUCCESS;
  kern = select_kernels(p->opts.cpu_vector_width);
  ctx_init(&c, p, kern->vw);
  c.q = q; c.k = k; c.v = v; c.o = o; c.dout = dout; c.lse_in = lse; c.dq_acc = dq_acc;
  c.out = dk; c.dv = dv; c.o_dtype = g_dtype;
  nth = num_threads(p);
  per_slice = sizeof(float) * ((size_t)2 * c.D * c.ldt + (size_t)c.g * c.nq + (size_t)2 * c.Dp * (c.nk + (size_t)c.g * c.nq));
  c.G = group_size(&c, per_slice);
  ierr = FMMalloc((size_t)c.G * c.D * c.ldt, &c.kt);
  if (!ierr) ierr = FMMalloc((size_t)c.G * c.D * c.ldt, &c.vt);
  if (!ierr) ierr = FMMalloc((size_t)c.G * c.g * c.nq + 1, &c.delta);
  if (!ierr) ierr = FMMalloc((size_t)c.G * c.nk * c.Dp, &c.kr);
  if (!ierr) ierr = FMMalloc((size_t)c.G * c.nk * c.Dp, &c.vr);
  if (!ierr) ierr = FMMalloc((size_t)c.G * c.g * c.nq * c.Dp + 1, &c.qr);
  if (!ierr) ierr = FMMalloc((size_t)c.G * c.g * c.nq * c.Dp + 1, &c.dor);
  if (ierr) {
    free(c.kt); free(c.vt); free(c.delta); free(c.kr); free(c.vr); free(c.qr); free(c.dor);
    FMCall(ierr);
  }
  scratch = (size_t)2 * BM * BN + (size_t)2 * BN * c.Dp + (size_t)BM * c.Dp + 2 * (size_t)c.D;
  const int nslices = p->batch * c.Hkv, chunk = 64, nkc = (c.nk + chunk - 1) / chunk, nqc = (c.nq + chunk - 1) / chunk;
#pragma omp parallel num_threads(nth)
  {
    float *buf = (float *)malloc(sizeof(float) * scratch);
    if (!buf) {
#pragma omp atomic write
      fail = 1;
    }
    for (int gs = 0; gs < nslices; gs += c.G) {
      const int G = nslices - gs < c.G ? nslices - gs : c.G;
#pragma omp single
      c.gs = gs;
#pragma omp for schedule(dynamic, 1) nowait
      for (int it = 0; it < G * nkc; it++) {
        int s = it / nkc, j0 = (it % nkc) * chunk, j1 = j0 + chunk < c.nk ? j0 + chunk : c.nk;
        stage_keys(&c, s, j0, j1, 1);
      }
#pragma omp for schedule(dynamic, 1)
      for (int it = 0; it < G * c.g * nqc; it++) {
        int s = it / (c.g * nqc), hh = (it / nqc) % c.g, r0 = (it % nqc) * chunk, r1 = r0 + chunk < c.nq ? r0 + chunk : c.nq;
        if (buf) stage_rows(&c, s, hh, r0, r1, buf);
      }
      /* pass 1: dK, dV; slice by slice, key tiles from the left (with causal masks they see the most rows) */
#pragma omp for schedule(dynamic, 1) nowait
      for (int it = 0; it < G * c.nkt; it++)
        if (buf) kern->bwd_kv_item(&c, it / c.nkt, it % c.nkt, buf);
      /* pass 2: dQ (independent of pass 1, so no barrier in between); slice by slice, heaviest first */
      const int per_slice_items = c.nqt * c.g;
#pragma omp for schedule(dynamic, 1)
      for (int it = 0; it < G * per_slice_items; it++) {
        int s = it / per_slice_items, rest = it % per_slice_items;
        if (buf) kern->bwd_q_item(&c, s, rest % c.g, c.nqt - 1 - rest / c.g, buf);
      }
    }
    free(buf);
  }
  free(c.kt); free(c.vt); free(c.delta); free(c.kr); free(c.vr); free(c.qr); free(c.dor);
  FMCheck(!fail, MPI_COMM_SELF, FM_ERR_MEM, "Out of memory allocating %zu bytes of thread scratch", sizeof(float) * scratch);
  return FM_SUCCESS;
}
