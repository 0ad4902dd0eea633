/*
 * test_mask_tiles - block summaries, tile classes, density and sparsity against brute force
 * over the dense mask: every aligned tile and many random (unaligned) row ranges are
 * classified soundly (SKIP => all masked, FULL => none masked); for full, causal, document,
 * causal_document and sliding_window (window >= 1) the classes are exact on every shape tested,
 * aligned or not (PARTIAL tiles are mixed);
 * summaries are the min/max of each vector per key block; FMMaskView draws the classes; the
 * mask hash (computed when first asked for on one rank) follows every re-SetUp; so do the block
 * summaries (computed by SetUp on several ranks, when first asked for on one), which equal the
 * ones computed eagerly, for shared and per-sample bounds, a new block size and a new batch.
 * The keys per query tile that resolve -fm_sm90_schedule auto (their mean and spread) equal
 * brute force's when the mask has at most FM_MASK_KEY_SAMPLES columns (per-sample bounds too)
 * and are close when sampled; the schedule follows them, FM_GPU_SCHED_AUTO_KEYS and _CV, except
 * that a full mask at d = 128 takes the grid (the wide kernel) with no estimate made.
 * -test_resetup_only: only that last part (the .sh runs it on two ranks too).
 */
#include "fmtest.h"
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include <flashmask/private/planimpl.h> /* FMSm90ChooseSchedule_Private */
#include <math.h>
#include <unistd.h>

static const char *const *types; /* every type, from FMMaskTypeList (NULL-terminated) */

static int is_exact_type(const char *t)
{
  return !strcmp(t, FMMASKCAUSAL) || !strcmp(t, FMMASKDOCUMENT) || !strcmp(t, FMMASKCAUSALDOCUMENT) || !strcmp(t, FMMASKSLIDINGWINDOW) ||
         !strcmp(t, FMMASKFULL);
}

/* Masked entries of rows [i0, i1) x columns [j0, j1) from the 2D prefix sums P ((Sq+1) x (Sk+1)). */
static long rect(const int *P, int Sk, int i0, int i1, int j0, int j1)
{
  size_t w = (size_t)Sk + 1;
  return (long)P[i1 * w + j1] - P[i0 * w + j1] - P[i1 * w + j0] + P[i0 * w + j0];
}

static void check_mask(FMMask m, const char *label, uint64_t *rs, int check_exact)
{
  FMMaskDesc d;
  int Sq, Sk, H, B, nkb, nqb, off;
  long masked_total = 0, skip_total = 0, inexact = 0;
  double density, sparsity;
  int *P;
  FMT_CALL(FMMaskGetDesc_Private(m, &d));
  Sq = d.seqlen_q; Sk = d.seqlen_k; H = d.mask_heads; B = d.block; nkb = d.nblocks_k; off = Sk - Sq;
  nqb = (Sq + B - 1) / B;
  FMT_CHECK(nkb == (Sk + B - 1) / B, "%s: nblocks_k %d, expected %d", label, nkb, (Sk + B - 1) / B);
  P = malloc(sizeof(int) * (size_t)(Sq + 1) * (Sk + 1));
  for (int h = 0; h < H; h++) {
    const int32_t *b[4], *sum = d.summary + (size_t)h * nkb * FM_SUM_N;
    for (int v = 0; v < 4; v++) b[v] = d.bnd[v] + (size_t)h * Sk;
    /* summaries */
    for (int kb = 0; kb < nkb; kb++) {
      int c0 = kb * B, c1 = c0 + B < Sk ? c0 + B : Sk;
      for (int v = 0; v < 4; v++) {
        int lo = INT32_MAX, hi = INT32_MIN;
        for (int j = c0; j < c1; j++) { if (b[v][j] < lo) lo = b[v][j]; if (b[v][j] > hi) hi = b[v][j]; }
        FMT_CHECK(sum[kb * FM_SUM_N + 2 * v] == lo && sum[kb * FM_SUM_N + 2 * v + 1] == hi,
                  "%s head %d block %d vector %d: summary %d..%d, brute force %d..%d", label, h, kb, v, sum[kb * FM_SUM_N + 2 * v],
                  sum[kb * FM_SUM_N + 2 * v + 1], lo, hi);
      }
    }
    /* dense mask and its prefix sums */
    memset(P, 0, sizeof(int) * (size_t)(Sk + 1));
    for (int i = 0; i < Sq; i++) {
      int *row = P + (size_t)(i + 1) * (Sk + 1), *prev = P + (size_t)i * (Sk + 1), acc = 0;
      row[0] = 0;
      for (int j = 0; j < Sk; j++) {
        int x = (b[0][j] <= i && i < b[1][j]) || (b[2][j] <= i && i < b[3][j]) || (d.causal && j > i + off);
        if (((i * 31 + j * 17) % 97) == 0) {
          FMBool im;
          FMT_CALL(FMMaskIsMasked(m, h, i, j, &im));
          FMT_CHECK((int)im == x, "%s: IsMasked(%d,%d,%d) = %d, bounds %d", label, h, i, j, (int)im, x);
        }
        acc += x;
        masked_total += x;
        row[j + 1] = prev[j + 1] + acc;
      }
    }
    /* aligned tiles */
    for (int qb = 0; qb < nqb; qb++)
      for (int kb = 0; kb < nkb; kb++) {
        int m0 = qb * B, m1 = m0 + B < Sq ? m0 + B : Sq, c0 = kb * B, c1 = c0 + B < Sk ? c0 + B : Sk;
        long n = rect(P, Sk, m0, m1, c0, c1), all = (long)(m1 - m0) * (c1 - c0);
        FMTileClass cls = FMMaskClassifyTile_Private(m, h, m0, m0 + B, kb); /* m1 past Sq is clipped */
        FMTileClass cls2 = FMClassifyTile(sum, d.causal, Sq, Sk, B, m0, m1, kb);
        FMT_CHECK(cls == cls2, "%s: FMMaskClassifyTile_Private and FMClassifyTile disagree", label);
        if (n == all) skip_total++;
        FMT_CHECK(cls != FM_TILE_SKIP || n == all, "%s head %d tile (%d,%d): SKIP but %ld of %ld masked", label, h, qb, kb, n, all);
        FMT_CHECK(cls != FM_TILE_FULL || n == 0, "%s head %d tile (%d,%d): FULL but %ld of %ld masked", label, h, qb, kb, n, all);
        if (cls == FM_TILE_PARTIAL && (n == 0 || n == all)) {
          inexact++;
          if (check_exact)
            FMT_CHECK(0, "%s head %d tile (%d,%d): PARTIAL but %s", label, h, qb, kb, n == 0 ? "nothing masked" : "everything masked");
        }
      }
    /* random row ranges, random key blocks (including ranges past the ends) */
    for (int r = 0; r < 3000; r++) {
      int m0 = (int)(fmt_next(rs) % (uint64_t)(Sq + 1)), m1 = (int)(fmt_next(rs) % (uint64_t)(Sq + 1)), kb = (int)(fmt_next(rs) % (uint64_t)nkb);
      if (m0 > m1) { int t = m0; m0 = m1; m1 = t; }
      if (m0 == m1) continue;
      int c0 = kb * B, c1 = c0 + B < Sk ? c0 + B : Sk;
      long n = rect(P, Sk, m0, m1, c0, c1), all = (long)(m1 - m0) * (c1 - c0);
      FMTileClass cls = FMClassifyTile(sum, d.causal, Sq, Sk, B, m0, m1, kb);
      FMT_CHECK(cls != FM_TILE_SKIP || n == all, "%s head %d rows [%d,%d) block %d: SKIP but %ld of %ld masked", label, h, m0, m1, kb, n, all);
      FMT_CHECK(cls != FM_TILE_FULL || n == 0, "%s head %d rows [%d,%d) block %d: FULL but %ld masked", label, h, m0, m1, kb, n);
    }
    FMT_CHECK(FMClassifyTile(sum, d.causal, Sq, Sk, B, 5, 5, 0) == FM_TILE_SKIP, "%s: an empty tile must be SKIP", label);
    FMT_CHECK(FMClassifyTile(sum, d.causal, Sq, Sk, B, 0, Sq, nkb) == FM_TILE_SKIP, "%s: a block past seqlen_k must be SKIP", label);
  }
  FMT_CALL(FMMaskGetDensity(m, &density, &sparsity));
  {
    double dref = 1.0 - (double)masked_total / ((double)H * Sq * Sk), sref = (double)skip_total / ((double)H * nqb * nkb);
    FMT_CHECK(fabs(density - dref) < 1e-12, "%s: element density %.15f, brute force %.15f", label, density, dref);
    FMT_CHECK(fabs(sparsity - sref) < 1e-12, "%s: block sparsity %.15f, brute force %.15f", label, sparsity, sref);
  }
  if (inexact && !check_exact) printf("  %s: %ld PARTIAL tiles are uniform (allowed: conservative)\n", label, inexact);
  free(P);
}

static FMMask build(FMContext ctx, const char *type, int Sq, int Sk, int H, int B, unsigned long seed, uint64_t *rs)
{
  FMMask m;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, Sq, Sk, H));
  FMT_CALL(FMMaskSetType(m, type));
  FMT_CALL(FMMaskSetBlockSize(m, B));
  FMT_CALL(FMMaskSetSeed(m, seed));
  if (!strcmp(type, FMMASKBOUNDS)) {
    int32_t *u[4];
    for (int v = 0; v < 4; v++) u[v] = malloc(sizeof(int32_t) * Sk);
    FMT_CALL(FMMaskSetCausal(m, (fmt_next(rs) & 1) ? FM_TRUE : FM_FALSE));
    for (int h = 0; h < H; h++) {
      /* smooth random bounds (runs of equal values, like real masks) and some empty intervals */
      int a = 0, c = Sq, e = 0, f = 0;
      for (int j = 0; j < Sk; j++) {
        if (fmt_next(rs) % 50 == 0) {
          a = (int)(fmt_next(rs) % (uint64_t)(Sq + 1)); c = a + (int)(fmt_next(rs) % (uint64_t)(Sq - a + 1));
          e = (int)(fmt_next(rs) % (uint64_t)(Sq + 1)); f = e + (int)(fmt_next(rs) % (uint64_t)(Sq - e + 1));
        }
        u[0][j] = a; u[1][j] = c; u[2][j] = e; u[3][j] = f;
      }
      FMT_CALL(FMMaskSetBounds(m, h, u[0], u[1], u[2], u[3]));
    }
    for (int v = 0; v < 4; v++) free(u[v]);
  }
  FMT_CALL(FMMaskSetUp(m));
  return m;
}

/* Brute force: the mean and coefficient of variation, over every (mask row, R-row query tile), of
   the keys a tile sees (some row of it visible), by the format's definition. */
static void brute_tile_keys(FMMask m, int R, double *mean, double *cv)
{
  const int Sq = m->seqlen_q, Sk = m->seqlen_k, NG = (int)FM_MASK_NG(m), nqt = (Sq + R - 1) / R;
  double s1 = 0, s2 = 0;
  for (int g = 0; g < NG; g++)
    for (int t = 0; t < nqt; t++) {
      long k = 0;
      for (int j = 0; j < Sk; j++) {
        const size_t o = (size_t)g * Sk + j;
        for (int i = t * R; i < Sq && i < (t + 1) * R; i++)
          if (!((m->bnd[0][o] <= i && i < m->bnd[1][o]) || (m->bnd[2][o] <= i && i < m->bnd[3][o]) || (m->causal && j > i + Sk - Sq))) {
            k++;
            break;
          }
      }
      s1 += (double)k;
      s2 += (double)k * k;
    }
  *mean = s1 / ((double)NG * nqt);
  {
    const double var = s2 / ((double)NG * nqt) - *mean * *mean;
    *cv = *mean > 0 && var > 0 ? sqrt(var) / *mean : 0;
  }
}

/*
 * FMVisitedTilesInline (O(1) per key block) against FMClassifyTile on every BM-row tile, every
 * type, S_q != S_k both ways, odd sizes, block 128 and 64, BM 1, 7, 64, 80 and 128; and
 * FMMaskVisitedRows_Private as their sum. Then FMSm90ChooseBwdRows_Private: 80 rows on a 32K
 * document and prefix-LM-causal mask (at most 0.5% more rows), 64 (0: the kernel's) on a 32K
 * sliding window of 1024 and a share-question mask; at d = 64 128 rows on those four (at most 5%
 * more rows), 64 on a sliding window of 300 (14% more); no estimate on a full or causal mask (no bound
 * vectors), d = 256, the CPU backend or sm 80, and -fm_sm90_bwd_rows taken as given.
 */
static void check_visited_rows(FMContext ctx, uint64_t *rs)
{
  struct { int Sq, Sk, B; } sh[] = {{1000, 1000, 128}, {777, 1301, 128}, {1301, 777, 64}, {130, 70, 128}};
  const int bms[] = {1, 7, 64, 80, 128};
  for (int s = 0; s < 4; s++)
    for (int t = 0; types[t]; t++) {
      FMMask m = build(ctx, types[t], sh[s].Sq, sh[s].Sk, 2, sh[s].B, (unsigned long)(fmt_next(rs) & 0xFFFF), rs);
      const int32_t *sum;
      const int nkb = (sh[s].Sk + sh[s].B - 1) / sh[s].B;
      int bad = 0;
      FMT_CALL(FMMaskSummary_Private(m, &sum));
      for (int x = 0; x < 5; x++) {
        const int BM = bms[x], nqb = (sh[s].Sq + BM - 1) / BM;
        double total = 0, rows = -1;
        for (int g = 0; g < 2; g++)
          for (int kb = 0; kb < nkb; kb++) {
            const int32_t *sh_g = sum + (size_t)g * nkb * FM_SUM_N;
            int n = 0;
            for (int q = 0; q < nqb; q++)
              n += FMClassifyTile(sh_g, m->causal, sh[s].Sq, sh[s].Sk, sh[s].B, q * BM, (q + 1) * BM, kb) != FM_TILE_SKIP;
            const int fast = FMVisitedTilesInline(sh_g, m->causal, sh[s].Sq, sh[s].Sk, sh[s].B, kb, BM);
            if (fast != n && bad++ < 3)
              FMT_CHECK(0, "%s %dx%d block %d, head %d, key block %d, %d-row tiles: %d visited, FMClassifyTile says %d", types[t],
                        sh[s].Sq, sh[s].Sk, sh[s].B, g, kb, BM, fast, n);
            total += n;
          }
        FMT_CALL(FMMaskVisitedRows_Private(m, BM, &rows));
        FMT_CHECK(rows == total * BM, "%s %dx%d: FMMaskVisitedRows_Private(%d) = %.0f; the tiles give %.0f", types[t], sh[s].Sq, sh[s].Sk, BM,
                  rows, total * BM);
      }
      FMT_CALL(FMMaskDestroy(&m));
    }
  {
    /* rows64: d = 64's choice (a window of 300 visits 14% more rows at 128-row steps) */
    struct { const char *type; int window, rows, rows64; } want[] = {{FMMASKDOCUMENT, 0, 80, 128}, {FMMASKPREFIXLMCAUSAL, 0, 80, 128},
                                                                     {FMMASKSLIDINGWINDOW, 1024, 0, 128}, {FMMASKSHAREQUESTION, 0, 0, 128},
                                                                     {FMMASKSLIDINGWINDOW, 300, 0, 0}, {FMMASKFULL, 0, 0, 0},
                                                                     {FMMASKCAUSAL, 0, 0, 0}};
    FMKernelOptions o = {0}, o64 = {0};
    FMBwdRowsChoice c;
    FMMask m;
    o64.sm90_bwd_rows = 64;
    for (int i = 0; i < 7; i++) {
      const int dense = !strcmp(want[i].type, FMMASKFULL) || !strcmp(want[i].type, FMMASKCAUSAL);
      FMT_CALL(FMMaskCreate(ctx, &m));
      FMT_CALL(FMMaskSetSizes(m, 32768, 32768, 1));
      FMT_CALL(FMMaskSetType(m, want[i].type));
      if (want[i].window) FMT_CALL(FMMaskSetWindow(m, want[i].window, 0));
      FMT_CALL(FMMaskSetUp(m));
      FMT_CALL(FMSm90ChooseBwdRows_Private(m, FM_BACKEND_CUDA, 128, 90, &o, &c));
      FMT_CHECK(c.rows == want[i].rows && (dense ? c.extra == -1 : c.extra >= 0 && (c.extra <= FM_GPU_BWD_ROWS80_EXTRA) == (c.rows == 80)),
                "%s 32K, d = 128: auto chose %d rows (%.4f more rows at 80); expected %d", want[i].type, c.rows, c.extra, want[i].rows);
      FMT_CALL(FMSm90ChooseBwdRows_Private(m, FM_BACKEND_CUDA, 64, 90, &o, &c));
      FMT_CHECK(c.rows == want[i].rows64 &&
                  (dense ? c.extra == -1 : c.extra >= 0 && (c.extra <= FM_GPU_BWD_ROWS128_EXTRA) == (c.rows == 128)),
                "%s 32K, d = 64: auto chose %d rows (%.4f more rows at 128); expected %d", want[i].type, c.rows, c.extra, want[i].rows64);
      FMT_CALL(FMSm90ChooseBwdRows_Private(m, FM_BACKEND_CUDA, 256, 90, &o, &c));
      FMT_CHECK(c.rows == 0 && c.extra == -1, "%s, d = 256: auto chose %d rows (estimate %.4f)", want[i].type, c.rows, c.extra);
      FMT_CALL(FMSm90ChooseBwdRows_Private(m, FM_BACKEND_CPU, 128, 90, &o, &c));
      FMT_CHECK(c.rows == 0 && c.extra == -1, "%s, CPU backend: auto chose %d rows", want[i].type, c.rows);
      FMT_CALL(FMSm90ChooseBwdRows_Private(m, FM_BACKEND_CUDA, 128, 80, &o, &c));
      FMT_CHECK(c.rows == 0 && c.extra == -1, "%s, sm 80: auto chose %d rows", want[i].type, c.rows);
      FMT_CALL(FMSm90ChooseBwdRows_Private(m, FM_BACKEND_CUDA, 128, 90, &o64, &c));
      FMT_CHECK(c.rows == 64 && c.extra == -1, "%s, -fm_sm90_bwd_rows 64: %d rows", want[i].type, c.rows);
      FMT_CALL(FMMaskDestroy(&m));
    }
  }
}

/*
 * FMMaskTileKeys_Private against brute force, every type: shapes counted whole (at most
 * FM_MASK_KEY_SAMPLES columns, exactly that many, and per-sample bounds) must agree to rounding,
 * a sampled one within 3% of seqlen_k (mean) and 0.15 (spread: the sampling-noise correction
 * assumes independent samples, so a window's small spread, about 0.12, reads as 0 from 256
 * samples; auto compares it with 0.5); then FMSm90ChooseSchedule_Private's
 * choice from the estimate, the requested schedules, the backends, head dims and GPUs it leaves
 * on the grid, and -fm_sm90_auto_keys.
 */
static void check_tile_keys(FMContext ctx, uint64_t *rs)
{
  FMKernelOptions oauto = {0}, ostatic = {0}, o300 = {0};
  /* with FM_MASK_KEY_SAMPLES = 256: the last two are counted whole (256 columns, and 3 x 80) */
  struct { int Sq, Sk, H, mb; } sh[] = {{1000, 1000, 1, 1}, {500, 512, 2, 1}, {300, 200, 1, 3}, {3000, 4096, 1, 1}, {200, 256, 1, 1}, {100, 80, 1, 3}};
  oauto.sm90_schedule = o300.sm90_schedule = FM_GPU_SCHED_AUTO;
  ostatic.sm90_schedule = FM_GPU_SCHED_STATIC;
  o300.sm90_auto_keys = 300;
  int whole = 0;
  for (int s = 0; s < 6; s++)
    for (int t = 0; types[t]; t++) {
      const unsigned long seed = (unsigned long)(fmt_next(rs) & 0xFFFF);
      const int sampled = (long)sh[s].H * sh[s].mb * sh[s].Sk > FM_MASK_KEY_SAMPLES;
      FMMask m;
      FMSm90Choice c;
      double est, cv, ex, excv;
      if (sh[s].mb > 1) {
        if (!strcmp(types[t], FMMASKBOUNDS)) continue; /* build() sets per-head bounds only */
        FMT_CALL(FMMaskCreate(ctx, &m));
        FMT_CALL(FMMaskSetSizes(m, sh[s].Sq, sh[s].Sk, sh[s].H));
        FMT_CALL(FMMaskSetBatch(m, sh[s].mb));
        FMT_CALL(FMMaskSetType(m, types[t]));
        FMT_CALL(FMMaskSetSeed(m, seed));
        FMT_CALL(FMMaskSetUp(m));
      } else m = build(ctx, types[t], sh[s].Sq, sh[s].Sk, sh[s].H, 128, seed, rs);
      FMT_CALL(FMMaskTileKeys_Private(m, 128, &est, &cv));
      brute_tile_keys(m, 128, &ex, &excv);
      whole += !sampled;
      FMT_CHECK(sampled ? fabs(est - ex) <= 0.03 * sh[s].Sk && fabs(cv - excv) <= 0.15 : fabs(est - ex) <= 1e-9 * sh[s].Sk && fabs(cv - excv) <= 1e-9,
                "%s %dx%d (%d heads, batch %d): tile keys %.2f spread %.3f; brute force %.2f spread %.3f (%s)", types[t], sh[s].Sq,
                sh[s].Sk, sh[s].H, sh[s].mb, est, cv, ex, excv, sampled ? "sampled" : "every column");
      /* d = 64 always, and d = 128 except on a full mask: the estimate decides */
      for (int d = 64; d <= 128; d += 64) {
        const int full = d == 128 && !strcmp(types[t], FMMASKFULL); /* the grid's wide kernel, no estimate */
        FMT_CALL(FMSm90ChooseSchedule_Private(m, FM_BACKEND_CUDA, d, 90, &oauto, &c));
        if (full)
          FMT_CHECK(c.schedule == FM_GPU_SCHED_GRID && c.wide_full == 1 && c.tile_keys == -1,
                    "%s %dx%d, d = 128: auto chose schedule %d (wide_full %d, %.1f keys); expected the grid's wide kernel", types[t],
                    sh[s].Sq, sh[s].Sk, c.schedule, c.wide_full, c.tile_keys);
        else
          FMT_CHECK(c.tile_keys == est && c.tile_cv == cv && c.auto_keys == FM_GPU_SCHED_AUTO_KEYS && c.wide_full == 0 &&
                      c.schedule == (est > FM_GPU_SCHED_AUTO_KEYS                                   ? FM_GPU_SCHED_GRID
                                     : cv <= FM_GPU_SCHED_AUTO_CV && est <= FM_GPU_SCHED_STATIC_KEYS ? FM_GPU_SCHED_STATIC
                                                                                                     : FM_GPU_SCHED_DYNAMIC),
                    "%s %dx%d, d = %d: auto chose schedule %d from %.1f keys, spread %.2f", types[t], sh[s].Sq, sh[s].Sk, d, c.schedule,
                    c.tile_keys, c.tile_cv);
      }
      FMT_CALL(FMSm90ChooseSchedule_Private(m, FM_BACKEND_CPU, 128, 90, &oauto, &c));
      FMT_CHECK(c.schedule == FM_GPU_SCHED_GRID && c.tile_keys == -1, "%s: auto on the CPU backend gave %d", types[t], c.schedule);
      FMT_CALL(FMSm90ChooseSchedule_Private(m, FM_BACKEND_CUDA, 256, 90, &oauto, &c));
      FMT_CHECK(c.schedule == FM_GPU_SCHED_GRID && c.tile_keys == -1, "%s: auto for d = 256 gave %d", types[t], c.schedule);
      FMT_CALL(FMSm90ChooseSchedule_Private(m, FM_BACKEND_CUDA, 64, 80, &oauto, &c));
      FMT_CHECK(c.schedule == FM_GPU_SCHED_GRID && c.tile_keys == -1, "%s: auto on sm 80 gave %d", types[t], c.schedule);
      FMT_CALL(FMSm90ChooseSchedule_Private(m, FM_BACKEND_CUDA, 128, 90, &ostatic, &c));
      FMT_CHECK(c.schedule == FM_GPU_SCHED_STATIC && c.tile_keys == -1, "%s: a requested static schedule became %d", types[t], c.schedule);
      FMT_CALL(FMMaskDestroy(&m));
    }
  {
    /* sliding windows of 256 (even, few keys: static) and 1024 (even, more keys than the round
       robin takes: dynamic), causal at 2048 (uneven: dynamic), full (grid: from the estimate at
       d = 64, with none at d = 128), causal at 8192 (grid, from the estimate) */
    FMMask m;
    FMSm90Choice c;
    FMT_CALL(FMMaskCreate(ctx, &m));
    FMT_CALL(FMMaskSetSizes(m, 8192, 8192, 1));
    FMT_CALL(FMMaskSetType(m, FMMASKSLIDINGWINDOW));
    FMT_CALL(FMMaskSetWindow(m, 256, 0));
    FMT_CALL(FMMaskSetUp(m));
    FMT_CALL(FMSm90ChooseSchedule_Private(m, FM_BACKEND_CUDA, 128, 90, &oauto, &c));
    FMT_CHECK(c.schedule == FM_GPU_SCHED_STATIC && c.tile_keys > 300 && c.tile_keys < 450 && c.tile_cv < 0.3,
              "sliding window 256 of 8192: schedule %d from %.1f keys, spread %.2f", c.schedule, c.tile_keys, c.tile_cv);
    FMT_CALL(FMMaskSetWindow(m, 1024, 0));
    FMT_CALL(FMMaskSetUp(m));
    FMT_CALL(FMSm90ChooseSchedule_Private(m, FM_BACKEND_CUDA, 128, 90, &oauto, &c));
    FMT_CHECK(c.schedule == FM_GPU_SCHED_DYNAMIC && c.tile_keys > 1000 && c.tile_keys < 1200 && c.tile_cv < 0.3,
              "sliding window 1024 of 8192: schedule %d from %.1f keys, spread %.2f", c.schedule, c.tile_keys, c.tile_cv);
    FMT_CALL(FMSm90ChooseSchedule_Private(m, FM_BACKEND_CUDA, 128, 90, &o300, &c)); /* -fm_sm90_auto_keys 300 */
    FMT_CHECK(c.schedule == FM_GPU_SCHED_GRID && c.auto_keys == 300, "sliding window 1024, threshold 300 keys: schedule %d", c.schedule);
    FMT_CALL(FMMaskSetSizes(m, 2048, 2048, 1));
    FMT_CALL(FMMaskSetType(m, FMMASKCAUSAL));
    FMT_CALL(FMMaskSetUp(m));
    FMT_CALL(FMSm90ChooseSchedule_Private(m, FM_BACKEND_CUDA, 64, 90, &oauto, &c));
    FMT_CHECK(c.schedule == FM_GPU_SCHED_DYNAMIC && c.tile_cv > 0.5 && c.tile_cv < 0.6, "causal 2048: schedule %d from %.1f keys, spread %.2f",
              c.schedule, c.tile_keys, c.tile_cv);
    FMT_CALL(FMMaskSetSizes(m, 8192, 8192, 1));
    FMT_CALL(FMMaskSetType(m, FMMASKFULL));
    FMT_CALL(FMMaskSetUp(m));
    FMT_CALL(FMSm90ChooseSchedule_Private(m, FM_BACKEND_CUDA, 64, 90, &oauto, &c));
    FMT_CHECK(c.schedule == FM_GPU_SCHED_GRID && c.tile_keys == 8192 && c.tile_cv == 0, "full 8192, d = 64: schedule %d from %.1f keys",
              c.schedule, c.tile_keys);
    FMT_CALL(FMSm90ChooseSchedule_Private(m, FM_BACKEND_CUDA, 128, 90, &oauto, &c));
    FMT_CHECK(c.schedule == FM_GPU_SCHED_GRID && c.wide_full == 1, "full 8192, d = 128: schedule %d, wide_full %d", c.schedule, c.wide_full);
    FMT_CALL(FMMaskSetType(m, FMMASKCAUSAL)); /* causal at d = 128 keeps the estimate (4096 keys a tile: the grid) */
    FMT_CALL(FMMaskSetUp(m));
    FMT_CALL(FMSm90ChooseSchedule_Private(m, FM_BACKEND_CUDA, 128, 90, &oauto, &c));
    FMT_CHECK(c.schedule == FM_GPU_SCHED_GRID && c.wide_full == 0 && c.tile_keys > 4000, "causal 8192, d = 128: schedule %d, wide_full %d, %.1f keys",
              c.schedule, c.wide_full, c.tile_keys);
    FMT_CALL(FMMaskDestroy(&m));
  }
  FMT_CHECK(whole >= 20, "only %d of the shapes were counted whole (the exact branch of the estimate)", whole);
  {
    /* 64 mask rows (4096 samples, enough for threads): the estimate on 1 thread, on 3 (more than
       this machine may have, and odd: the split falls inside mask rows) and on 2 must be the same
       bits (every rank must choose the same schedule, whatever its thread count), and near the
       brute force */
    const int nt = ctx->threads, n0 = ctx->nthreads, env = ctx->threads_env;
    double e[3], v[3], ex, excv;
    FMMask m;
    FMT_CALL(FMMaskCreate(ctx, &m));
    FMT_CALL(FMMaskSetSizes(m, 1500, 1024, 64));
    FMT_CALL(FMMaskSetType(m, FMMASKRANDOMEVICTION));
    FMT_CALL(FMMaskSetSeed(m, 11));
    FMT_CALL(FMMaskSetUp(m));
    for (int k = 0; k < 3; k++) {
      FMT_CALL(FMContextSetNumThreads(ctx, k == 0 ? 1 : k == 1 ? 3 : 2));
      FMT_CALL(FMMaskTileKeys_Private(m, 128, &e[k], &v[k]));
    }
    ctx->nthreads = n0; /* back to the context's own state (n0 = 0: the default, not a set count) */
    ctx->threads = nt;
    ctx->threads_env = env;
    brute_tile_keys(m, 128, &ex, &excv);
    FMT_CHECK(e[0] == e[1] && e[0] == e[2] && v[0] == v[1] && v[0] == v[2],
              "random_eviction 64 x 1500 x 1024: tile keys %.17g / %.17g / %.17g, spread %.17g / %.17g / %.17g on 1 / 3 / 2 threads",
              e[0], e[1], e[2], v[0], v[1], v[2]);
    FMT_CHECK(fabs(e[0] - ex) <= 0.03 * 1024 && fabs(v[0] - excv) <= 0.15, "random_eviction 64 x 1500 x 1024: tile keys %.2f spread %.3f; brute force %.2f spread %.3f",
              e[0], v[0], ex, excv);
    /* the split itself (equal bits alone would not show two threads sharing a mask row's counts):
       for T threads the ranges cover the samples in order, and each starts a mask row */
    for (int T = 1; T <= 9; T++) {
      int64_t n = 0, prev = 0, i0, i1;
      for (int t = 0; t < T; t++) {
        FMMaskTileKeysSplit_Private(m, t, T, &n, &i0, &i1);
        FMT_CHECK(i0 == prev && i1 >= i0 && i1 <= n, "tile keys on %d threads: thread %d takes [%lld, %lld) after %lld of %lld", T, t,
                  (long long)i0, (long long)i1, (long long)prev, (long long)n);
        FMT_CHECK(i0 == 0 || i0 == n || FMMaskTileKeysColumn_Private(m, i0 - 1) / 1024 < FMMaskTileKeysColumn_Private(m, i0) / 1024,
                  "tile keys on %d threads: thread %d starts at sample %lld inside mask row %lld", T, t, (long long)i0,
                  (long long)(FMMaskTileKeysColumn_Private(m, i0) / 1024));
        prev = i1;
      }
      FMT_CHECK(prev == n, "tile keys on %d threads: the ranges end at %lld of %lld samples", T, (long long)prev, (long long)n);
    }
    FMT_CALL(FMMaskDestroy(&m));
  }
}

/* Brute-force block summaries of m's bounds as they are now (row g, block kb), in a new array. */
static int32_t *brute_summary(FMMask m)
{
  const int Sk = m->seqlen_k, B = m->block, nkb = (Sk + B - 1) / B;
  const size_t G = FM_MASK_NG(m);
  int32_t *s = malloc(sizeof(int32_t) * G * nkb * FM_SUM_N);
  for (size_t g = 0; g < G; g++)
    for (int kb = 0; kb < nkb; kb++)
      for (int v = 0; v < 4; v++) {
        int32_t lo = INT32_MAX, hi = INT32_MIN;
        for (int j = kb * B; j < Sk && j < (kb + 1) * B; j++) {
          const int32_t x = FM_BND(m, v, g, j);
          lo = x < lo ? x : lo;
          hi = x > hi ? x : hi;
        }
        s[(g * nkb + kb) * FM_SUM_N + 2 * v] = lo;
        s[(g * nkb + kb) * FM_SUM_N + 2 * v + 1] = hi;
      }
  return s;
}

/*
 * One set-up of m (after its changes): SetUp computes the summaries on several ranks only; the
 * bounds-only view computes nothing; before they are computed FMMaskClassifyTile_Private says
 * PARTIAL; the summaries through FMMaskGetDesc_Private equal the brute force of the new bounds
 * and the eager FMMaskComputeSummaries_Private. *differs counts blocks unlike *prev (the last set-up's,
 * replaced by these).
 */
static void check_resetup(FMMask m, const char *label, int32_t **prev, size_t *nprev, long *differs)
{
  FMMaskDesc d, db;
  int size;
  int32_t *ref, *lazy;
  size_t n;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  FMT_CALL(FMMaskSetUp(m));
  FMT_CHECK(m->summary_valid == (size > 1), "%s: on %d rank%s SetUp left summary_valid %d; expected %d", label, size, size > 1 ? "s" : "",
            m->summary_valid, size > 1);
  FMT_CALL(FMMaskGetBoundsDesc_Private(m, &db));
  FMT_CHECK(db.summary == NULL && m->summary_valid == (size > 1), "%s: the bounds-only view computed or gave summaries", label);
  if (size == 1) {
    FMTileClass c = FMMaskClassifyTile_Private(m, 0, 0, m->block, 0);
    FMT_CHECK(c == FM_TILE_PARTIAL, "%s: FMMaskClassifyTile_Private before the summaries gave class %d; expected PARTIAL", label, (int)c);
  }
  FMT_CALL(FMMaskGetDesc_Private(m, &d));
  FMT_CHECK(m->summary_valid && d.summary == m->summary, "%s: FMMaskGetDesc_Private did not give valid summaries", label);
  FMT_CHECK(d.nblocks_k == db.nblocks_k && d.nblocks_k == (m->seqlen_k + m->block - 1) / m->block, "%s: nblocks_k %d, %d; expected %d", label,
            d.nblocks_k, db.nblocks_k, (m->seqlen_k + m->block - 1) / m->block);
  n = FM_MASK_NG(m) * (size_t)d.nblocks_k * FM_SUM_N;
  ref = brute_summary(m);
  lazy = malloc(sizeof(int32_t) * n);
  memcpy(lazy, d.summary, sizeof(int32_t) * n);
  for (size_t i = 0; i < n; i++)
    if (lazy[i] != ref[i]) {
      FMT_CHECK(0, "%s: summary entry %zu (row %zu, block %zu, number %zu) is %d; the bounds give %d", label, i, i / FM_SUM_N / d.nblocks_k,
                i / FM_SUM_N % d.nblocks_k, i % FM_SUM_N, lazy[i], ref[i]);
      break;
    }
  FMT_CALL(FMMaskComputeSummaries_Private(m)); /* eager, as SetUp on several ranks */
  FMT_CHECK(!memcmp(lazy, m->summary, sizeof(int32_t) * n), "%s: the summaries on demand differ from the eager ones", label);
  if (*prev && *nprev == n)
    for (size_t i = 0; i < n; i++) *differs += (*prev)[i] != lazy[i];
  free(*prev);
  *prev = lazy;
  *nprev = n;
  free(ref);
}

/* Re-SetUps of one mask object with new bounds (new seeds, new user bounds, a new block size,
   per-sample bounds of a batch of 16 then 3): the summaries always follow the bounds. */
static void check_resetups(FMContext ctx, uint64_t *rs)
{
  static const char *const ty[] = {FMMASKCAUSALDOCUMENT, FMMASKSLIDINGWINDOW, FMMASKSHAREQUESTION, FMMASKBOUNDS};
  char label[160];
  for (int t = 0; t < 4; t++) {
    int32_t *prev = NULL;
    size_t nprev = 0;
    long differs = 0, steps = 0;
    FMMask m = build(ctx, ty[t], 700, 700, 2, 64, 11, rs);
    for (int st = 0; st < 8; st++) {
      if (st == 5) FMT_CALL(FMMaskSetBlockSize(m, 32));
      if (st == 6) FMT_CALL(FMMaskSetBatch(m, 16));
      if (st == 7) FMT_CALL(FMMaskSetBatch(m, 3));
      if (!strcmp(ty[t], FMMASKBOUNDS)) { /* new random bounds for every (sample, head) */
        int32_t *u[4];
        for (int v = 0; v < 4; v++) u[v] = malloc(sizeof(int32_t) * 700);
        for (int smp = 0; smp < m->mask_batch; smp++)
          for (int h = 0; h < 2; h++) {
            int a = 0, c = 700;
            for (int j = 0; j < 700; j++) {
              if (fmt_next(rs) % 40 == 0) { a = (int)(fmt_next(rs) % 701); c = a + (int)(fmt_next(rs) % (uint64_t)(701 - a)); }
              u[0][j] = a; u[1][j] = c; u[2][j] = u[3][j] = (int)(fmt_next(rs) % 3); /* some empty upper intervals */
            }
            if (m->mask_batch > 1) FMT_CALL(FMMaskSetSampleBounds(m, smp, h, u[0], u[1], u[2], u[3]));
            else FMT_CALL(FMMaskSetBounds(m, h, u[0], u[1], u[2], u[3]));
          }
        for (int v = 0; v < 4; v++) free(u[v]);
      } else if (!strcmp(ty[t], FMMASKSLIDINGWINDOW)) FMT_CALL(FMMaskSetWindow(m, 1 + (int)(fmt_next(rs) % 400), 0));
      else FMT_CALL(FMMaskSetSeed(m, 12 + (unsigned long)st));
      snprintf(label, sizeof(label), "%s 700x700, re-set-up %d (block %d, mask batch %d)", ty[t], st, m->block, m->mask_batch);
      check_resetup(m, label, &prev, &nprev, &differs);
      steps += st > 0 && st < 5;
    }
    /* the test can fail: the new bounds of steps 1..4 give other summaries than the last ones */
    FMT_CHECK(differs > steps, "%s: only %ld summary numbers changed over %ld re-set-ups with new bounds", ty[t], differs, steps);
    free(prev);
    FMT_CALL(FMMaskDestroy(&m));
  }
}

/* FMMaskView of a causal mask: lower triangle '#', diagonal '+', upper '.'. */
static void check_view(FMContext ctx, uint64_t *rs)
{
  char path[] = "/tmp/fm_test_mask_view_XXXXXX", line[256];
  int fd = mkstemp(path), rank, row = 0, in_pic = 0;
  FILE *fp;
  FMMask m;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (fd < 0) { FMT_CHECK(0, "mkstemp failed"); return; }
  fp = fdopen(fd, "w+");
  m = build(ctx, FMMASKCAUSAL, 1024, 1024, 1, 128, 42, rs);
  FMT_CALL(FMMaskView(m, fp));
  FMT_CALL(FMMaskDestroy(&m));
  m = build(ctx, FMMASKCAUSALDOCUMENT, 8192, 8192, 1, 128, 42, rs); /* 64 x 64 tiles, drawn 2 x 2 per character */
  FMT_CALL(FMMaskView(m, fp));
  FMT_CALL(FMMaskDestroy(&m));
  fflush(fp);
  rewind(fp);
  if (rank == 0) {
    int seen_type = 0, seen_docs = 0, rows2 = 0, pic = 0;
    while (fgets(line, sizeof(line), fp)) {
      char *s = line;
      if (strstr(line, "FMMask \"causal\"") && strstr(line, "seqlen_q 1024")) seen_type = 1;
      if (strstr(line, "documents (drawn from the seed)")) seen_docs = 1;
      if (strstr(line, "tile classes")) { in_pic = 1; pic++; row = 0; continue; }
      if (in_pic) {
        while (*s == ' ') s++;
        if (!(*s == '.' || *s == '#' || *s == '+')) { in_pic = 0; continue; }
        s[strcspn(s, "\n")] = 0;
        if (pic == 1) {
          FMT_CHECK(strlen(s) == 8, "view: picture row %d has %zu characters, expected 8", row, strlen(s));
          for (int k = 0; k < 8 && s[k]; k++) {
            char want = k < row ? '#' : k == row ? '+' : '.';
            FMT_CHECK(s[k] == want, "view: causal picture (%d,%d) is '%c', expected '%c'", row, k, s[k], want);
          }
        } else {
          FMT_CHECK(strlen(s) == 32, "view: 64x64 tiles must be drawn on 32 characters, got %zu", strlen(s));
          rows2++;
        }
        row++;
      }
    }
    FMT_CHECK(seen_type, "view: no header line for the causal mask");
    FMT_CHECK(seen_docs, "view: documents not listed");
    FMT_CHECK(rows2 == 32, "view: 64x64 tiles drawn on %d rows, expected 32", rows2);
  }
  fclose(fp);
  unlink(path);
}

int main(int argc, char **argv)
{
  FMContext ctx;
  uint64_t rs;
  char label[128];
  struct { int Sq, Sk, B; } shapes[] = {{1024, 1024, 128}, {1024, 1024, 64}, {1000, 1000, 128}, {777, 1000, 64},
                                       {1000, 777, 100}, {600, 600, 16}, {130, 1300, 128}, {1, 1, 128}, {3, 5, 2},
                                       {17, 2, 4}, {2, 17, 3}};
  int ntypes = 0;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_mask_tiles"));
  FMT_CALL(FMMaskTypeList(&ntypes, &types));
  FMT_CHECK(ntypes == 13 && types[ntypes] == NULL, "FMMaskTypeList: %d types", ntypes);
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetUp(ctx));
  rs = fmt_seed();
  {
    /* -test_view_only: one mask, for the .sh to check that -fm_mask_view makes SetUp print it */
    FMBool only = FM_FALSE;
    FMT_CALL(FMOptionsHasName("-test_view_only", &only));
    if (only) {
      FMMask m = build(ctx, FMMASKCAUSAL, 256, 256, 1, 64, 42, &rs);
      FMT_CALL(FMMaskDestroy(&m));
      FMT_CALL(FMContextDestroy(&ctx));
      FMT_CALL(FMFinalize());
      return 0;
    }
    FMT_CALL(FMOptionsHasName("-test_resetup_only", &only));
    if (only) {
      int rc;
      MPI_Bcast(&rs, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD); /* the same random bounds on every rank */
      check_resetups(ctx, &rs);
      FMT_CALL(FMContextDestroy(&ctx));
      rc = fmt_finish("test_mask_tiles -test_resetup_only");
      FMT_CALL(FMFinalize());
      return rc;
    }
  }
  for (int s = 0; s < (int)(sizeof(shapes) / sizeof(shapes[0])); s++)
    for (int t = 0; types[t]; t++) {
      int H = !strcmp(types[t], FMMASKRANDOMEVICTION) || !strcmp(types[t], FMMASKBOUNDS) ? 2 : 1;
      unsigned long seed = (unsigned long)(fmt_next(&rs) & 0xFFFFF);
      FMMask m = build(ctx, types[t], shapes[s].Sq, shapes[s].Sk, H, shapes[s].B, seed, &rs);
      snprintf(label, sizeof(label), "%s %dx%d block %d seed %lu", types[t], shapes[s].Sq, shapes[s].Sk, shapes[s].B, seed);
      check_mask(m, label, &rs, is_exact_type(types[t]));
      FMT_CALL(FMMaskDestroy(&m));
    }
  /* masks large enough for the set-up's threads (2^17 bound entries and more: the checks, the
     summaries, the density and sparsity run on the context's threads) */
  {
    static const char *const big[2] = {FMMASKBOUNDS, FMMASKRANDOMEVICTION};
    for (int t = 0; t < 2; t++) {
      const int Sq = t ? 2048 : 130, Sk = t ? 2048 : 16384, H = t ? 64 : 9;
      unsigned long seed = (unsigned long)(fmt_next(&rs) & 0xFFFFF);
      FMMask m = build(ctx, big[t], Sq, Sk, H, 128, seed, &rs);
      snprintf(label, sizeof(label), "%s %dx%d x %d heads, seed %lu (threaded set-up)", big[t], Sq, Sk, H, seed);
      check_mask(m, label, &rs, is_exact_type(big[t]));
      FMT_CALL(FMMaskDestroy(&m));
    }
  }
  /* re-SetUp with new bounds: the density and sparsity are computed on demand after each set-up,
     never left over from the last one (check_mask compares them with brute force) */
  {
    FMMask m = build(ctx, FMMASKDOCUMENT, 1000, 1000, 1, 64, 7, &rs);
    check_mask(m, "document 1000 seed 7 (first set-up)", &rs, 0);
    for (unsigned long sd = 8; sd < 11; sd++) {
      FMT_CALL(FMMaskSetSeed(m, sd));
      FMT_CALL(FMMaskSetUp(m));
      snprintf(label, sizeof(label), "document 1000, re-set up with seed %lu", sd);
      check_mask(m, label, &rs, 0);
    }
    FMT_CALL(FMMaskDestroy(&m));
  }
  /* the mask hash, computed when first asked for on one rank: a re-SetUp with new bounds gives
     the new hash (never the last one's), the same bounds give the same hash on another object */
  {
    FMMask m = build(ctx, FMMASKDOCUMENT, 1000, 1000, 1, 64, 7, &rs), m2;
    const uint64_t h7 = FMMaskHash_Private(m);
    uint64_t h8, h7b;
    FMT_CALL(FMMaskSetSeed(m, 8));
    FMT_CALL(FMMaskSetUp(m));
    h8 = FMMaskHash_Private(m);
    FMT_CHECK(h8 != h7, "the mask hash after a re-SetUp with new bounds is the old one (%#llx)", (unsigned long long)h7);
    FMT_CALL(FMMaskSetSeed(m, 7));
    FMT_CALL(FMMaskSetUp(m));
    h7b = FMMaskHash_Private(m);
    FMT_CHECK(h7b == h7, "the mask hash of the same bounds changed: %#llx, then %#llx", (unsigned long long)h7, (unsigned long long)h7b);
    m2 = build(ctx, FMMASKDOCUMENT, 1000, 1000, 1, 64, 8, &rs);
    FMT_CHECK(FMMaskHash_Private(m2) == h8, "two masks of the same bounds hash differently: %#llx and %#llx",
              (unsigned long long)FMMaskHash_Private(m2), (unsigned long long)h8);
    FMT_CALL(FMMaskDestroy(&m2));
    FMT_CALL(FMMaskDestroy(&m));
  }
  /* explicit sliding windows of any width >= 1, including windows not a multiple of the block */
  for (int k = 0; k < 6; k++) {
    FMMask m;
    int w = 1 + (int)(fmt_next(&rs) % 700);
    FMT_CALL(FMMaskCreate(ctx, &m));
    FMT_CALL(FMMaskSetSizes(m, 1024, 1024, 1));
    FMT_CALL(FMMaskSetType(m, FMMASKSLIDINGWINDOW));
    FMT_CALL(FMMaskSetWindow(m, w, 0));
    FMT_CALL(FMMaskSetBlockSize(m, 64));
    FMT_CALL(FMMaskSetUp(m));
    snprintf(label, sizeof(label), "sliding_window w=%d", w);
    check_mask(m, label, &rs, 1);
    FMT_CALL(FMMaskDestroy(&m));
  }
  check_resetups(ctx, &rs);
  check_view(ctx, &rs);
  check_tile_keys(ctx, &rs);
  check_visited_rows(ctx, &rs);
  FMT_CALL(FMContextDestroy(&ctx));
  {
    int rc = fmt_finish("test_mask_tiles");
    FMT_CALL(FMFinalize());
    return rc;
  }
}
