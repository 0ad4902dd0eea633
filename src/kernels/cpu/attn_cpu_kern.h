/*
 * attn_cpu_kern.h - the compute kernels of the CPU backend, written once over a vector width.
 * Private to attn_cpu.c, which includes it once per width with, defined beforehand:
 *   FMK_VW        floats per vector (4, 8 or 16)
 *   FMK(name)     the name with a width suffix (name##_w8, ...)
 *   FMK_TARGET    the function attribute selecting the instruction set (may be empty)
 * and the shared helpers (FMCPUCtx, key_tile, tile_class, row_hull, grow, mask_row, slice_rows,
 * slice_qrows, BM, BN, LOG2E, LN2). The vectors are GCC/clang vector extensions, so each width
 * compiles to the native registers of its target (SSE/NEON, AVX2, AVX-512). Every "n" dimension
 * of a product is a multiple of FMK_VW: staged rows are padded to ctx->Dp, key tiles to a
 * multiple of FMK_VW columns (the padding holds zeros or is masked out).
 */
#define VW FMK_VW
/* helpers carry the target too: clang checks the vector ABI of a call before inlining it */
#define FMK_INLINE FM_INLINE FMK_TARGET
typedef float FMK(vf) __attribute__((vector_size(4 * FMK_VW)));
typedef int32_t FMK(vi) __attribute__((vector_size(4 * FMK_VW)));
#define VF FMK(vf)
#define VI FMK(vi)
/* Vectors are passed by address or through macros: GCC notes an ABI change for by-value vector arguments. */
#define VST(p, x) do { VF vst_x_ = (x); __builtin_memcpy((p), &vst_x_, sizeof(vst_x_)); } while (0)

FMK_INLINE VF FMK(vld)(const float *p)
{
  VF r;
  __builtin_memcpy(&r, p, sizeof(r));
  return r;
}
FMK_INLINE VF FMK(vset1)(float a) { return (VF){0} + a; }
FMK_INLINE VF FMK(vmax)(const VF *a, const VF *b)
{
  VI gt = *a > *b;
  return (VF)(((VI)*a & gt) | ((VI)*b & ~gt));
}

/* 2^x lane-wise: exact 0 for x <= -127 (so -inf gives 0), within ~2 ulp for x in [-126, 0]. */
FMK_INLINE VF FMK(vexp2)(const VF *px)
{
  const VF lo = FMK(vset1)(-127.0f), hi = FMK(vset1)(127.0f);
  VF xc = FMK(vmax)(&lo, px); /* lo wins over -inf; NaN stays NaN */
  VI above = xc > hi;
  xc = (VF)(((VI)xc & ~above) | ((VI)hi & above));
  VF fn = (xc + 12582912.0f) - 12582912.0f; /* round to nearest integer (1.5 * 2^23 trick) */
  VF f = xc - fn;                           /* in [-0.5, 0.5] */
  VF pl = FMK(vset1)(1.525273380405984e-05f); /* Taylor series of 2^f = e^(f ln 2), degree 7 */
  pl = pl * f + 1.5403530393381608e-04f;
  pl = pl * f + 1.3333558146428443e-03f;
  pl = pl * f + 9.618129107628477e-03f;
  pl = pl * f + 5.550410866482158e-02f;
  pl = pl * f + 2.402265069591007e-01f;
  pl = pl * f + 6.931471805599453e-01f;
  pl = pl * f + 1.0f;
  VI n = __builtin_convertvector(fn, VI);
  VF sc = (VF)((n + 127) << 23); /* 2^n; 0 for n = -127 */
  return pl * sc;
}

FMK_INLINE float FMK(vhsum)(const VF *px)
{
  float s = 0;
  for (int i = 0; i < VW; i++) s += (*px)[i];
  return s;
}
FMK_INLINE float FMK(vhmax)(const VF *px)
{
  float m = (*px)[0];
  for (int i = 1; i < VW; i++) m = (*px)[i] > m ? (*px)[i] : m;
  return m;
}

/* ------------------------------------------------------------------ small GEMM */
/*
 * C[m][n] (= or +=) sum_k A(r, k) B[k][n], where A(r, k) = a[r * ars + k * acs], B has row stride
 * ldb, C row stride ldc; n a multiple of VW. Micro tiles of MR x (VW * NV) with MR <= 6, NV <= 2:
 * 6 x 2 vectors keep 12 accumulators, 2 B vectors and a broadcast in 16 registers and hide the
 * FMA latency.
 */
FMK_INLINE void FMK(mk)(const int MR, const int NV, int kk, const float *restrict a, ptrdiff_t ars, ptrdiff_t acs,
                       const float *restrict b, ptrdiff_t ldb, float *restrict c, ptrdiff_t ldc, int accum)
{
  VF s[6][2];
FM_UNROLL
  for (int r = 0; r < MR; r++)
FM_UNROLL
    for (int v = 0; v < NV; v++) s[r][v] = accum ? FMK(vld)(c + r * ldc + VW * v) : FMK(vset1)(0.0f);
  for (int k = 0; k < kk; k++) {
    const float *bk = b + k * ldb;
    VF b0 = FMK(vld)(bk), b1 = NV > 1 ? FMK(vld)(bk + VW) : b0;
FM_UNROLL
    for (int r = 0; r < MR; r++) {
      float ar = a[r * ars + k * acs];
      s[r][0] += ar * b0;
      if (NV > 1) s[r][1] += ar * b1;
    }
  }
FM_UNROLL
  for (int r = 0; r < MR; r++)
FM_UNROLL
    for (int v = 0; v < NV; v++) VST(c + r * ldc + VW * v, s[r][v]);
}

FMK_INLINE void FMK(gemm_cols)(const int MR, int n, int kk, const float *a, ptrdiff_t ars, ptrdiff_t acs, const float *b,
                              ptrdiff_t ldb, float *c, ptrdiff_t ldc, int accum)
{
  int j = 0;
  for (; j + 2 * VW <= n; j += 2 * VW) FMK(mk)(MR, 2, kk, a, ars, acs, b + j, ldb, c + j, ldc, accum);
  if (j < n) FMK(mk)(MR, 1, kk, a, ars, acs, b + j, ldb, c + j, ldc, accum);
}

FMK_INLINE void FMK(gemm)(int m, int n, int kk, const float *a, ptrdiff_t ars, ptrdiff_t acs, const float *b, ptrdiff_t ldb, float *c,
                         ptrdiff_t ldc, int accum)
{
  /* column chunks outer, so the B panel stays in L1 while the rows stream */
  const int chunk = 4 * VW < 32 ? 32 : 4 * VW;
  for (int j = 0; j < n; j += chunk) {
    int nj = n - j < chunk ? n - j : chunk, i = 0;
    for (; i + 6 <= m; i += 6) FMK(gemm_cols)(6, nj, kk, a + i * ars, ars, acs, b + j, ldb, c + i * ldc + j, ldc, accum);
    switch (m - i) {
    case 5: FMK(gemm_cols)(5, nj, kk, a + i * ars, ars, acs, b + j, ldb, c + i * ldc + j, ldc, accum); break;
    case 4: FMK(gemm_cols)(4, nj, kk, a + i * ars, ars, acs, b + j, ldb, c + i * ldc + j, ldc, accum); break;
    case 3: FMK(gemm_cols)(3, nj, kk, a + i * ars, ars, acs, b + j, ldb, c + i * ldc + j, ldc, accum); break;
    case 2: FMK(gemm_cols)(2, nj, kk, a + i * ars, ars, acs, b + j, ldb, c + i * ldc + j, ldc, accum); break;
    case 1: FMK(gemm_cols)(1, nj, kk, a + i * ars, ars, acs, b + j, ldb, c + i * ldc + j, ldc, accum); break;
    default: break;
    }
  }
}

/* ------------------------------------------------------------------ forward */
/* One (slice s, GQA member hh, query tile qt) of the forward pass. buf: thread scratch. */
FMK_TARGET static void FMK(fwd_item)(const FMCPUCtx *c, int s, int hh, int qt, float *buf)
{
  const FMAttnProblem *p = c->p;
  const FMMaskDesc *m = &p->mask;
  const int D = c->D, Dp = c->Dp, id = c->gs + s, b = id / c->Hkv, hk = id % c->Hkv, h = hk * c->g + hh, hm = mask_row_index(c, b, h);
  const int r0 = qt * BM, mr = c->nq - r0 < BM ? c->nq - r0 : BM;
  float *restrict Q = buf, *restrict O = Q + BM * Dp, *restrict S = O + BM * Dp, *restrict mx = S + BM * BN, *restrict l = mx + BM;
  const float *kt = c->kt + (size_t)s * D * c->ldt, *vrows = slice_rows(c, s, 1);
  const VF vcs = FMK(vset1)(c->cs);
  int g0, g1;

  for (int i = 0; i < mr; i++) fm_row_to_float(c->q, (((size_t)b * c->nq + r0 + i) * c->Hq + h) * D, p->dtype, Q + (size_t)i * Dp, D);
  memset(O, 0, sizeof(float) * (size_t)mr * Dp);
  for (int i = 0; i < mr; i++) { mx[i] = -INFINITY; l[i] = 0; }
  row_hull(p, r0, mr, &g0, &g1);

  for (int t = 0; t < c->nkt; t++) {
    int c0, c1;
    key_tile(c, t, &c0, &c1);
    FMTileClass cls = tile_class(m, hm, g0, g1, c0, c1);
    if (cls == FM_TILE_SKIP) continue;
    const int nt = c1 - c0, ntp = (nt + VW - 1) / VW * VW, jl = c0 - c->k0;
    FMK(gemm)(mr, ntp, D, Q, Dp, 1, kt + jl, c->ldt, S, BN, 0); /* S = Q K^T */
    for (int i = 0; i < mr; i++) {
      float *restrict si = S + (size_t)i * BN;
      VF vm = FMK(vset1)(-INFINITY);
      if (cls == FM_TILE_PARTIAL) mask_row(si, grow(p, r0 + i), c0, nt, m, hm, c->off);
      for (int j = nt; j < ntp; j++) si[j] = -INFINITY;
      for (int j = 0; j < ntp; j += VW) { /* max of the raw scores (scale > 0) */
        VF x = FMK(vld)(si + j);
        vm = FMK(vmax)(&x, &vm);
      }
      /* mx: the running max of the raw scores; P below subtracts it before scaling, so the max
         element gets exactly 2^0 however large the scores (s * cs - m * cs loses all precision
         past |s * cs| ~ 2^31: every P underflowed and the row looked fully masked) */
      float rmax = FMK(vhmax)(&vm), mold = mx[i], mnew = rmax > mold ? rmax : mold;
      if (mnew == -INFINITY) { /* nothing visible so far: P = 0 */
        /* vmax drops NaN: a NaN score here is not a masked one, and makes the row NaN (l) */
        for (int j = 0; j < nt; j++)
          if (si[j] != -INFINITY) l[i] = NAN;
        memset(si, 0, sizeof(float) * (size_t)ntp);
        continue;
      }
      VF vs = FMK(vset1)(0.0f), vmn = FMK(vset1)(mnew);
      for (int j = 0; j < ntp; j += VW) { /* P = 2^((s - m) * scale * log2(e)), and its row sum */
        VF x = (FMK(vld)(si + j) - vmn) * vcs, e = FMK(vexp2)(&x);
        VST(si + j, e);
        vs += e;
      }
      if (mold != mnew) {
        float alpha = exp2f((mold - mnew) * c->cs); /* 0 when mold = -inf */
        VF va = FMK(vset1)(alpha);
        float *restrict oi = O + (size_t)i * Dp;
        for (int d = 0; d < Dp; d += VW) VST(oi + d, FMK(vld)(oi + d) * va);
        l[i] *= alpha;
      }
      l[i] += FMK(vhsum)(&vs);
      mx[i] = mnew;
    }
    FMK(gemm)(mr, Dp, nt, S, BN, 1, vrows + (size_t)jl * Dp, Dp, O, Dp, 1); /* O += P V */
  }

  for (int i = 0; i < mr; i++) {
    float *restrict oi = O + (size_t)i * Dp;
    float *lse = c->lse + ((size_t)b * c->Hq + h) * c->nq + r0 + i;
    if (l[i] != 0) { /* l is NaN when a visible score was NaN or +inf: so are O and LSE */
      VF inv = FMK(vset1)(1.0f / l[i]);
      for (int d = 0; d < Dp; d += VW) VST(oi + d, FMK(vld)(oi + d) * inv);
      *lse = mx[i] * p->scale + log2f(l[i]) * LN2;
    } else { /* no visible key: O = 0, LSE = -inf */
      memset(oi, 0, sizeof(float) * (size_t)Dp);
      *lse = -INFINITY;
    }
    fm_row_from_float(c->out, (((size_t)b * c->nq + r0 + i) * c->Hq + h) * D, c->o_dtype, oi, D);
  }
}

/* ------------------------------------------------------------------ backward */
/*
 * P and dS of one (query tile, key tile): S holds Q K^T on entry and P on exit; dP holds dO V^T
 * on entry and dS = scale * P * (dP - Delta) on exit. Rows with LSE = -inf get P = dS = 0; rows
 * with LSE = NaN (a non-finite forward) get P = dS = NaN on their visible keys and 0 on the
 * others, so the NaN reaches the gradients of exactly the keys the row sees.
 */
FMK_INLINE void FMK(bwd_probs)(const FMCPUCtx *c, float *restrict S, float *restrict dP, int mr, int nt, int ntp, FMTileClass cls,
                              int r0, int b, int h, int hm, int c0, const float *restrict delta)
{
  const FMAttnProblem *p = c->p;
  const float *lse = c->lse_in + ((size_t)b * c->Hq + h) * c->nq + r0;
  const VF vsc = FMK(vset1)(p->scale), vcs = FMK(vset1)(c->cs);
  for (int i = 0; i < mr; i++) {
    float *restrict si = S + (size_t)i * BN, *restrict dpi = dP + (size_t)i * BN;
    if (lse[i] == -INFINITY) {
      memset(si, 0, sizeof(float) * (size_t)ntp);
      memset(dpi, 0, sizeof(float) * (size_t)ntp);
      continue;
    }
    if (cls == FM_TILE_PARTIAL) mask_row(si, grow(p, r0 + i), c0, nt, &p->mask, hm, c->off);
    for (int j = nt; j < ntp; j++) si[j] = -INFINITY;
    if (lse[i] != lse[i]) {
      for (int j = 0; j < ntp; j++) si[j] = dpi[j] = si[j] == -INFINITY ? 0.0f : NAN;
      continue;
    }
    const VF vd = FMK(vset1)(delta[r0 + i]), vl2 = FMK(vset1)(lse[i] * LOG2E);
    for (int j = 0; j < ntp; j += VW) { /* P = 2^(s * scale * log2(e) - lse * log2(e)) */
      VF x = FMK(vld)(si + j) * vcs - vl2, e = FMK(vexp2)(&x);
      VST(si + j, e);
      VST(dpi + j, vsc * e * (FMK(vld)(dpi + j) - vd));
    }
  }
}

/* Pass 1: one (slice s, key tile t): dK, dV over every query head of the GQA group. */
FMK_TARGET static void FMK(bwd_kv_item)(const FMCPUCtx *c, int s, int t, float *buf)
{
  const FMAttnProblem *p = c->p;
  const int D = c->D, Dp = c->Dp, id = c->gs + s, b = id / c->Hkv, hk = id % c->Hkv;
  float *restrict S = buf, *restrict dP = S + BM * BN, *restrict dK = dP + BM * BN, *restrict dV = dK + BN * Dp;
  const float *kt = c->kt + (size_t)s * D * c->ldt, *vt = c->vt + (size_t)s * D * c->ldt;
  int c0, c1;
  key_tile(c, t, &c0, &c1);
  const int nt = c1 - c0, ntp = (nt + VW - 1) / VW * VW, jl = c0 - c->k0;
  memset(dK, 0, sizeof(float) * (size_t)nt * Dp);
  memset(dV, 0, sizeof(float) * (size_t)nt * Dp);
  for (int hh = 0; hh < c->g; hh++) {
    const int h = hk * c->g + hh, hm = mask_row_index(c, b, h);
    const float *Qs = slice_qrows(c, s, hh, 0), *dOs = slice_qrows(c, s, hh, 1);
    const float *delta = c->delta + ((size_t)s * c->g + hh) * c->nq;
    for (int qt = 0; qt < c->nqt; qt++) {
      const int r0 = qt * BM, mr = c->nq - r0 < BM ? c->nq - r0 : BM;
      int g0, g1;
      row_hull(p, r0, mr, &g0, &g1);
      FMTileClass cls = tile_class(&p->mask, hm, g0, g1, c0, c1);
      if (cls == FM_TILE_SKIP) continue;
      const float *Qt = Qs + (size_t)r0 * Dp, *dOt = dOs + (size_t)r0 * Dp;
      FMK(gemm)(mr, ntp, D, Qt, Dp, 1, kt + jl, c->ldt, S, BN, 0);  /* S = Q K^T */
      FMK(gemm)(mr, ntp, D, dOt, Dp, 1, vt + jl, c->ldt, dP, BN, 0); /* dP = dO V^T */
      FMK(bwd_probs)(c, S, dP, mr, nt, ntp, cls, r0, b, h, hm, c0, delta);
      FMK(gemm)(nt, Dp, mr, S, 1, BN, dOt, Dp, dV, Dp, 1); /* dV += P^T dO */
      FMK(gemm)(nt, Dp, mr, dP, 1, BN, Qt, Dp, dK, Dp, 1); /* dK += dS^T Q */
    }
  }
  for (int j = 0; j < nt; j++) {
    size_t dst = (((size_t)b * c->nk + jl + j) * c->Hkv + hk) * D;
    fm_row_from_float(c->out, dst, c->o_dtype, dK + (size_t)j * Dp, D);
    fm_row_from_float(c->dv, dst, c->o_dtype, dV + (size_t)j * Dp, D);
  }
}

/* Pass 2: one (slice s, GQA member hh, query tile qt): dQ added into dq_acc. */
FMK_TARGET static void FMK(bwd_q_item)(const FMCPUCtx *c, int s, int hh, int qt, float *buf)
{
  const FMAttnProblem *p = c->p;
  const int D = c->D, Dp = c->Dp, id = c->gs + s, b = id / c->Hkv, hk = id % c->Hkv, h = hk * c->g + hh, hm = mask_row_index(c, b, h);
  const int r0 = qt * BM, mr = c->nq - r0 < BM ? c->nq - r0 : BM;
  float *restrict S = buf, *restrict dP = S + BM * BN, *restrict dQ = dP + BM * BN;
  const float *kt = c->kt + (size_t)s * D * c->ldt, *vt = c->vt + (size_t)s * D * c->ldt;
  const float *Qt = slice_qrows(c, s, hh, 0) + (size_t)r0 * Dp, *dOt = slice_qrows(c, s, hh, 1) + (size_t)r0 * Dp;
  const float *krows = slice_rows(c, s, 0);
  const float *delta = c->delta + ((size_t)s * c->g + hh) * c->nq;
  const float *lse = c->lse_in + ((size_t)b * c->Hq + h) * c->nq + r0;
  int g0, g1, any = 0;
  for (int i = 0; i < mr; i++) any |= lse[i] != -INFINITY;
  if (!any) return; /* every row fully masked: dQ += 0 */
  row_hull(p, r0, mr, &g0, &g1);
  memset(dQ, 0, sizeof(float) * (size_t)mr * Dp);
  for (int t = 0; t < c->nkt; t++) {
    int c0, c1;
    key_tile(c, t, &c0, &c1);
    FMTileClass cls = tile_class(&p->mask, hm, g0, g1, c0, c1);
    if (cls == FM_TILE_SKIP) continue;
    const int nt = c1 - c0, ntp = (nt + VW - 1) / VW * VW, jl = c0 - c->k0;
    FMK(gemm)(mr, ntp, D, Qt, Dp, 1, kt + jl, c->ldt, S, BN, 0);
    FMK(gemm)(mr, ntp, D, dOt, Dp, 1, vt + jl, c->ldt, dP, BN, 0);
    FMK(bwd_probs)(c, S, dP, mr, nt, ntp, cls, r0, b, h, hm, c0, delta);
    FMK(gemm)(mr, Dp, nt, dP, BN, 1, krows + (size_t)jl * Dp, Dp, dQ, Dp, 1); /* dQ += dS K */
  }
  for (int i = 0; i < mr; i++) {
    float *restrict dst = c->dq_acc + (((size_t)b * c->nq + r0 + i) * c->Hq + h) * D;
    const float *restrict src = dQ + (size_t)i * Dp;
#pragma omp simd
    for (int d = 0; d < D; d++) dst[d] += src[d];
  }
}

static const FMCPUKernels FMK(kernels) = {FMK_VW, FMK(fwd_item), FMK(bwd_kv_item), FMK(bwd_q_item)};

#undef VW
#undef FMK_INLINE
#undef VF
#undef VI
#undef VST
#undef FMK_VW
#undef FMK
#undef FMK_TARGET
