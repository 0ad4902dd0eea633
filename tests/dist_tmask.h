/*
 * dist_tmask.h - hand-built masks (bounds and block summaries, no FMMask) for the planner's
 * tests (test_dist_plan.c), and the dense mask test they are checked against.
 */
#ifndef FLASHMASK_TESTS_DIST_TMASK_H
#define FLASHMASK_TESTS_DIST_TMASK_H
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <flashmask/private/fmdist.h>
#include "fmtest.h"

static uint64_t seed;

static int rnd(int n) { return n <= 1 ? 0 : (int)(fmt_next(&seed) % (uint64_t)n); }

/* ---------------- hand-built masks ---------------- */
typedef struct {
  FMMaskDesc d;
  int32_t *b[4];
  int32_t *sum;
} TMask;

static void tmask_summaries(TMask *t)
{
  FMMaskDesc *d = &t->d;
  d->nblocks_k = (d->seqlen_k + d->block - 1) / d->block;
  t->sum = (int32_t *)malloc(sizeof(int32_t) * (size_t)d->mask_heads * d->nblocks_k * FM_SUM_N);
  for (int h = 0; h < d->mask_heads; h++)
    for (int kb = 0; kb < d->nblocks_k; kb++) {
      int32_t *s = t->sum + ((size_t)h * d->nblocks_k + kb) * FM_SUM_N;
      for (int v = 0; v < 4; v++) { s[2 * v] = INT32_MAX; s[2 * v + 1] = INT32_MIN; }
      for (int j = kb * d->block; j < (kb + 1) * d->block && j < d->seqlen_k; j++)
        for (int v = 0; v < 4; v++) {
          int32_t x = t->b[v][(size_t)h * d->seqlen_k + j];
          if (x < s[2 * v]) s[2 * v] = x;
          if (x > s[2 * v + 1]) s[2 * v + 1] = x;
        }
    }
  d->summary = t->sum;
  for (int v = 0; v < 4; v++) d->bnd[v] = t->b[v];
  /* exact present bits, as the library's masks have them (a vector left at its defaults in every
     row is not carried), so that the localized masks' absent vectors are exercised too */
  d->present = 0;
  for (int v = 0; v < 4; v++)
    for (size_t i = 0; i < (size_t)d->mask_heads * (d->mask_batch > 1 ? d->mask_batch : 1) * d->seqlen_k; i++)
      if (t->b[v][i] != (v < 2 ? d->seqlen_q : 0)) { d->present |= 1 << v; break; }
}

static void tmask_alloc(TMask *t, int Sq, int Sk, int heads, int causal, int block)
{
  memset(t, 0, sizeof(*t));
  t->d.seqlen_q = Sq; t->d.seqlen_k = Sk; t->d.mask_heads = heads; t->d.causal = causal; t->d.block = block;
  t->d.present = FM_BOUND_LTS | FM_BOUND_LTE | FM_BOUND_UTS | FM_BOUND_UTE;
  for (int v = 0; v < 4; v++) t->b[v] = (int32_t *)malloc(sizeof(int32_t) * (size_t)heads * Sk);
  for (size_t i = 0; i < (size_t)heads * Sk; i++) { t->b[0][i] = t->b[1][i] = Sq; t->b[2][i] = t->b[3][i] = 0; }
}

static void tmask_free(TMask *t)
{
  for (int v = 0; v < 4; v++) free(t->b[v]);
  free(t->sum);
}

/* A per-sample mask from one of `rows` = mb x mask heads rows (each row drawn on its own, so every
   sample packs differently): row b * mask_heads + h is mask head h of sample b, the planner's mask
   rows (FMDistMaskRows); loops over the rows of t cover every (sample, mask head). */
static void tmask_batch(TMask *t, int mb)
{
  if (mb <= 1) return;
  t->d.mask_batch = mb;
  t->d.mask_heads /= mb;
}

/* 1 (shared) two times in three, else a batch of 2 or 3 */
static int tmask_rnd_batch(void) { return rnd(3) ? 1 : 2 + rnd(2); }

/* kind: 0 random intervals, 1 causal, 2 document, 3 causal document, 4 sliding window, 5 full, 6 random sparse spans */
static void tmask_make(TMask *t, int kind, int Sq, int Sk, int heads, int block)
{
  int causal = kind == 1 || kind == 3 || kind == 4 || (kind == 0 && rnd(2)) || kind == 6;
  tmask_alloc(t, Sq, Sk, heads, causal, block);
  for (int h = 0; h < heads; h++) {
    int32_t *lts = t->b[0] + (size_t)h * Sk, *lte = t->b[1] + (size_t)h * Sk, *uts = t->b[2] + (size_t)h * Sk,
            *ute = t->b[3] + (size_t)h * Sk;
    if (kind == 0) {
      for (int j = 0; j < Sk; j++) {
        int a = rnd(Sq + 1), b = rnd(Sq + 1), c = rnd(Sq + 1), e = rnd(Sq + 1);
        if (rnd(4)) { lts[j] = a < b ? a : b; lte[j] = a < b ? b : a; }
        if (rnd(3)) { uts[j] = c < e ? c : e; ute[j] = c < e ? e : c; }
      }
    } else if (kind == 2 || kind == 3) {
      /* documents on the key axis, mapped to rows proportionally (Sq == Sk in the common case) */
      int j = 0;
      while (j < Sk) {
        int len = 1 + rnd(Sk / 3 + 1), e = j + len > Sk ? Sk : j + len;
        int rs = (int)((long)j * Sq / Sk), re = (int)((long)e * Sq / Sk);
        for (int x = j; x < e; x++) {
          lts[x] = re; lte[x] = Sq;
          if (kind == 2) { uts[x] = 0; ute[x] = rs; }
        }
        j = e;
      }
    } else if (kind == 4) {
      int w = 1 + rnd(Sq / 4 + 1);
      for (int j = 0; j < Sk; j++) { long x = (long)j + w; lts[j] = (int32_t)(x > Sq ? Sq : x); lte[j] = Sq; }
    } else if (kind == 6) {
      int ns = 1 + rnd(3);
      for (int s = 0; s < ns; s++) {
        int o = rnd(Sk), L = 1 + rnd(Sk / 4 + 1);
        for (int j = o; j < o + L && j < Sk; j++) { lts[j] = j < Sq ? j : Sq; lte[j] = (o + L) < Sq ? o + L : Sq; if (lte[j] < lts[j]) lte[j] = lts[j]; }
      }
    }
  }
  tmask_summaries(t);
}

static inline int tmasked(const FMMaskDesc *d, int h, int i, int j)
{
  size_t o = (size_t)h * d->seqlen_k + j;
  if (d->causal && j > i + (d->seqlen_k - d->seqlen_q)) return 1;
  if (d->bnd[0][o] <= i && i < d->bnd[1][o]) return 1;
  if (d->bnd[2][o] <= i && i < d->bnd[3][o]) return 1;
  return 0;
}

#endif
