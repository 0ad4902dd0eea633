/*
 * gpu_cp_ref.h - the host half of test_gpu_cp (its only includer, after fmtest.h): the Case
 * table's type, grid-valued host tensors, the case masks (make_mask), the float64 forward
 * reference (ref_forward) and the row checks with their verdict over the ranks (check_rows,
 * verdict). Header-only (static functions); rank and size are the includer's MPI_COMM_WORLD
 * rank and size, set by its main.
 */
#ifndef GPU_CP_REF_H
#define GPU_CP_REF_H
#include <flashmask.h>
#include <math.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fmtest.h"

static int rank, size;

/* TRY(expr): return the error code of a failing library call (the library printed it). */
#define TRY(expr)                                                                    \
  do {                                                                               \
    FMErrorCode try_e_ = (expr);                                                     \
    if (try_e_ != FM_SUCCESS) return try_e_;                                         \
  } while (0)

typedef struct {
  const char *name;  /* label in messages */
  const char *type;  /* builder type or FMMASKBOUNDS */
  int B, Sq, Sk, Hq, Hkv, D, mh;
  FMDType dt;
  const char *chunk; /* -fm_plan_chunk, "0" = default */
  int quick;         /* in the -quick subset */
} Case;

/* ------------------------------------------------------------------ host data */
/* element access through the library's own conversion (round to nearest even) */
static void put(void *p, size_t i, FMDType t, float x) { FMFromFloat(p, i, t, x); }
static float get(const void *p, size_t i, FMDType t) { return FMToFloat(p, i, t); }

/* A value k/256 with 0 < |k| <= 256: exact in bf16 and fp16, in [-1, 1], never zero. */
static float gridval(uint64_t *s)
{
  uint64_t r = fmt_next(s);
  float k = (float)(1 + (int)(r % 256));
  return (r >> 40) & 1 ? -k / 256.0f : k / 256.0f;
}

/* fill_tensor - n grid values into a dtype tensor t and their float copy f. */
static void fill_tensor(void *t, float *f, size_t n, FMDType dt, uint64_t *s)
{
  for (size_t i = 0; i < n; i++) {
    f[i] = gridval(s);
    put(t, i, dt, f[i]);
  }
}

/* pick - rows idx[0..n) of a global [outer][S][unit-byte] tensor into [outer][n][unit]. */
static void pick(void *dst, const void *src, size_t outer, int S, size_t unit, int n, const int *idx)
{
  for (size_t o = 0; o < outer; o++)
    for (int i = 0; i < n; i++) memcpy((char *)dst + (o * n + i) * unit, (const char *)src + (o * S + idx[i]) * unit, unit);
}

/* ------------------------------------------------------------------ masks */
/*
 * make_mask - the case's mask on ctx: a builder with seed 42, or (type bounds) per-head user
 *   bounds from mseed: rows below e0 = 37 + 11 h see nothing under head h, document-like
 *   segments, an eighth of the columns fully masked and some global columns.
 *   Collective on ctx.
 */
static FMErrorCode make_mask(FMContext ctx, const Case *c, uint64_t mseed, FMMask *mask)
{
  FMErrorCode ierr;
  TRY(FMMaskCreate(ctx, mask));
  TRY(FMMaskSetSizes(*mask, c->Sq, c->Sk, c->mh));
  TRY(FMMaskSetType(*mask, c->type));
  TRY(FMMaskSetSeed(*mask, 42));
  if (!strcmp(c->type, FMMASKBOUNDS)) {
    int32_t *b = (int32_t *)malloc(sizeof(int32_t) * 4 * (size_t)c->Sk);
    uint64_t s = mseed * 7919u + 17u;
    if (!b) return FM_ERR_MEM;
    for (int h = 0; h < c->mh; h++) {
      int32_t *lts = b, *lte = b + c->Sk, *uts = b + 2 * (size_t)c->Sk, *ute = b + 3 * (size_t)c->Sk;
      int e0 = 37 + 11 * h, j = 0;
      if (e0 > c->Sq) e0 = c->Sq;
      while (j < c->Sk) {
        int len = 1 + (int)(fmt_next(&s) % (uint64_t)(c->Sk / 4 + 1)), e = j + len > c->Sk ? c->Sk : j + len;
        int rs = (int)((long)j * c->Sq / c->Sk), re = (int)((long)e * c->Sq / c->Sk);
        for (int x = j; x < e; x++) {
          uint64_t r = fmt_next(&s) % 16;
          lts[x] = re; lte[x] = c->Sq; uts[x] = 0; ute[x] = rs > e0 ? rs : e0;
          if (r < 2) { lts[x] = 0; ute[x] = 0; }              /* fully masked column */
          else if (r < 4) { lts[x] = c->Sq; ute[x] = e0; }    /* global column (rows >= e0) */
        }
        j = e;
      }
      ierr = FMMaskSetBounds(*mask, h, lts, lte, uts, ute);
      if (ierr) { free(b); return ierr; }
    }
    free(b);
  }
  TRY(FMMaskSetUp(*mask));
  return FM_SUCCESS;
}

/* ------------------------------------------------------------------ reference */
/*
 * ref_forward - float64 attention of every row: o [B][Sq][Hq][D], lse [B][Hq][Sq] (-inf and
 *   O = 0 on rows that see no key). Masking through FMMaskIsMasked (exact). Not collective.
 */
static void ref_forward(const Case *c, FMMask mask, const float *q, const float *k, const float *v, double *o, double *lse)
{
  const int g = c->Hq / c->Hkv, gm = c->Hq / c->mh;
  const double scale = 1.0 / sqrt((double)c->D);
#pragma omp parallel
  {
    unsigned char *vis = (unsigned char *)malloc((size_t)c->Sk);
    double *p = (double *)malloc(sizeof(double) * (size_t)c->Sk);
#pragma omp for schedule(dynamic, 4)
    for (int i = 0; i < c->Sq; i++)
      for (int hm = 0; hm < c->mh; hm++) {
        for (int j = 0; j < c->Sk; j++) {
          FMBool m = FM_TRUE;
          if (FMMaskIsMasked(mask, hm, i, j, &m)) m = FM_TRUE;
          vis[j] = m == FM_FALSE;
        }
        for (int b = 0; b < c->B; b++)
          for (int h = hm * gm; h < (hm + 1) * gm; h++) {
            const float *qi = q + (((size_t)b * c->Sq + i) * c->Hq + h) * c->D;
            double *oi = o + (((size_t)b * c->Sq + i) * c->Hq + h) * c->D, mx = -INFINITY, l = 0;
            const int hk = h / g;
            for (int d = 0; d < c->D; d++) oi[d] = 0;
            for (int j = 0; j < c->Sk; j++) {
              const float *kj = k + (((size_t)b * c->Sk + j) * c->Hkv + hk) * c->D;
              double s = 0;
              if (!vis[j]) continue;
              for (int d = 0; d < c->D; d++) s += (double)qi[d] * kj[d];
              p[j] = s * scale;
              if (p[j] > mx) mx = p[j];
            }
            if (mx == -INFINITY) {
              lse[((size_t)b * c->Hq + h) * c->Sq + i] = -INFINITY;
              continue;
            }
            for (int j = 0; j < c->Sk; j++) {
              const float *vj = v + (((size_t)b * c->Sk + j) * c->Hkv + hk) * c->D;
              double e;
              if (!vis[j]) continue;
              e = exp(p[j] - mx);
              l += e;
              for (int d = 0; d < c->D; d++) oi[d] += e * vj[d];
            }
            for (int d = 0; d < c->D; d++) oi[d] /= l;
            lse[((size_t)b * c->Hq + h) * c->Sq + i] = mx + log(l);
          }
      }
    free(vis);
    free(p);
  }
}

/* ------------------------------------------------------------------ checks */
typedef struct {
  double o_ref, lse_ref, o_one, lse_one; /* largest errors */
  double num, den;                        /* ||O - ref||^2 and ||ref||^2 */
  double bad, empty, rows;                /* failed values, rows that see nothing, rows checked */
} Stats;

/*
 * check_rows - compare nl rows of O (dtype, [B][nl][Hq][D]) and LSE ([B][Hq][nl]) whose global
 *   indices are rows[] with the float64 reference and (one != NULL) with the one-GPU result
 *   (global layout). Prints the first failures with case, configuration, rank, row, head and
 *   values; accumulates into st. Not collective.
 */
static void check_rows(const Case *c, const char *cfg, int nl, const int *rows, const void *o, const float *lse, const double *ro,
                       const double *rlse, const void *one, const float *one_lse, Stats *st)
{
  const double tol = c->dt == FM_DTYPE_FP16 ? 5e-3 : 2e-2;
  int printed = 0;
#define REPORT(...)                                                                  \
  do {                                                                               \
    st->bad++;                                                                       \
    if (printed++ < 8) {                                                             \
      fprintf(stderr, "FAIL case %s config %s rank %d: ", c->name, cfg, rank);       \
      fprintf(stderr, __VA_ARGS__);                                                  \
      fprintf(stderr, "\n");                                                         \
    }                                                                                \
  } while (0)
  for (int b = 0; b < c->B; b++)
    for (int li = 0; li < nl; li++) {
      const int i = rows[li];
      for (int h = 0; h < c->Hq; h++) {
        const float got_l = lse[((size_t)b * c->Hq + h) * nl + li];
        const double ref_l = rlse[((size_t)b * c->Hq + h) * c->Sq + i];
        const float one_l = one ? one_lse[((size_t)b * c->Hq + h) * c->Sq + i] : 0.0f;
        st->rows++;
        if (ref_l == -INFINITY) {
          st->empty++;
          if (got_l != -INFINITY) REPORT("row %d (local %d) head %d batch %d sees no key: LSE = %g, expected -inf", i, li, h, b, got_l);
          for (int d = 0; d < c->D; d++) {
            const float x = get(o, (((size_t)b * nl + li) * c->Hq + h) * c->D + d, c->dt);
            if (x != 0.0f) {
              REPORT("row %d (local %d) head %d batch %d sees no key: O[%d] = %g, expected 0", i, li, h, b, d, x);
              break;
            }
          }
          if (one && one_l != -INFINITY) REPORT("row %d head %d batch %d sees no key: the one-GPU LSE is %g, expected -inf", i, h, b, one_l);
          continue;
        }
        {
          double e = fabs((double)got_l - ref_l);
          if (!(e <= 1e-3 * (1 + fabs(ref_l)) + fmt_lse_round(c->dt, c->D))) REPORT("row %d (local %d) head %d batch %d: LSE = %.6g, float64 reference %.6g", i, li, h, b, got_l, ref_l);
          if (!(e <= st->lse_ref)) st->lse_ref = isnan(e) ? INFINITY : e;
          if (one) {
            e = fabs((double)got_l - one_l);
            if (!(e <= 1e-3 + 2 * fmt_lse_round(c->dt, c->D))) REPORT("row %d (local %d) head %d batch %d: LSE = %.7g, one GPU %.7g", i, li, h, b, got_l, one_l);
            if (!(e <= st->lse_one)) st->lse_one = isnan(e) ? INFINITY : e;
          }
        }
        for (int d = 0; d < c->D; d++) {
          const double x = get(o, (((size_t)b * nl + li) * c->Hq + h) * c->D + d, c->dt);
          const double r = ro[(((size_t)b * c->Sq + i) * c->Hq + h) * c->D + d];
          double e = fabs(x - r);
          st->num += isfinite(x) ? (x - r) * (x - r) : INFINITY;
          st->den += r * r;
          if (!(e <= tol)) REPORT("row %d (local %d) head %d batch %d: O[%d] = %.6g, float64 reference %.6g", i, li, h, b, d, x, r);
          if (!(e <= st->o_ref)) st->o_ref = isnan(e) ? INFINITY : e;
          if (one) {
            const double y = get(one, (((size_t)b * c->Sq + i) * c->Hq + h) * c->D + d, c->dt);
            e = fabs(x - y);
            if (!(e <= 2e-2)) REPORT("row %d (local %d) head %d batch %d: O[%d] = %.6g, one GPU %.6g", i, li, h, b, d, x, y);
            if (!(e <= st->o_one)) st->o_one = isnan(e) ? INFINITY : e;
          }
        }
      }
    }
#undef REPORT
}

/*
 * verdict - combine st over the ranks, print one line on rank 0 and record a failure on every
 *   rank when any rank failed (or the case's relative error is over its tolerance).
 *   Collective on MPI_COMM_WORLD.
 */
static void verdict(const Case *c, const char *cfg, const Stats *st)
{
  double mx[4] = {st->o_ref, st->lse_ref, st->o_one, st->lse_one}, sm[5] = {st->num, st->den, st->bad, st->empty, st->rows}, gmx[4], gsm[5];
  double rel, tol = c->dt == FM_DTYPE_FP16 ? 5e-3 : 2e-2;
  int ok;
  MPI_Allreduce(mx, gmx, 4, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  MPI_Allreduce(sm, gsm, 5, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  rel = gsm[1] > 0 ? sqrt(gsm[0] / gsm[1]) : sqrt(gsm[0]);
  ok = gsm[2] == 0 && rel <= tol && !isnan(rel);
  if (!ok) fmt_failures++;
  if (rank == 0)
    printf("%-4s %-26s %-18s B=%d %4dx%-4d H=%d/%d mh=%d D=%-3d %s chunk %-3s: O-ref %.1e (rel %.1e) LSE-ref %.1e O-1gpu %.1e LSE-1gpu %.1e; "
           "%.0f rows, %.0f see nothing, %.0f bad\n",
           ok ? "ok" : "FAIL", c->name, cfg, c->B, c->Sq, c->Sk, c->Hq, c->Hkv, c->mh, c->D, FMDTypeName(c->dt), c->chunk, gmx[0], rel, gmx[1], gmx[2],
           gmx[3], gsm[4], gsm[3], gsm[2]);
  fflush(stdout);
}

#endif /* GPU_CP_REF_H */
