/*
 * gpu_masks.h - hand-built bound vectors of the 12 benchmark masks (flashmask-format.md
 * section 3) plus random per-head user bounds, for the GPU test and the standalone benchmark
 * harness, which must not depend on the mask builders. Header-only (static functions).
 * Rows are clipped to [0, Sq], so any Sq, Sk gives valid bounds (start <= end).
 */
#ifndef FM_GPU_MASKS_H
#define FM_GPU_MASKS_H
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

enum {
  GM_FULL = 0, GM_CAUSAL, GM_SLIDING_WINDOW, GM_CAUSAL_DOCUMENT, GM_DOCUMENT, GM_SHARE_QUESTION,
  GM_GLOBAL_SLIDING_WINDOW, GM_CAUSAL_BLOCKWISE, GM_PREFIX_LM_DOCUMENT, GM_PREFIX_LM_CAUSAL, GM_QK_SPARSE,
  GM_RANDOM_EVICTION, GM_USER_RANDOM, GM_NTYPES
};
static const char *const gm_names[GM_NTYPES] = {"full", "causal", "sliding_window", "causal_document", "document",
                                                "share_question", "global_sliding_window", "causal_blockwise",
                                                "prefix_lm_document", "prefix_lm_causal", "qk_sparse",
                                                "random_eviction", "user_random"};

static inline uint64_t gm_next(uint64_t *s)
{
  uint64_t z = (*s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static inline int gm_int(uint64_t *s, int lo, int hi) /* uniform in [lo, hi] */
{
  return lo + (int)(gm_next(s) % (uint64_t)(hi - lo + 1));
}
static inline int32_t gm_clip(long x, int Sq) { return (int32_t)(x < 0 ? 0 : x > Sq ? Sq : x); }

/* Split L into n >= 1 random positive parts (n <= L). */
static inline void gm_split(uint64_t *s, int L, int n, int *parts)
{
  int *cut = (int *)malloc(sizeof(int) * (n + 1)), k = 1;
  cut[0] = 0;
  cut[n] = L;
  while (k < n) {
    int c = gm_int(s, 1, L - 1), dup = 0;
    for (int i = 1; i < k; i++) dup |= cut[i] == c;
    if (!dup) cut[k++] = c;
  }
  for (int i = 1; i < n; i++) /* insertion sort */
    for (int j = i; j > 1 && cut[j] < cut[j - 1]; j--) { int t = cut[j]; cut[j] = cut[j - 1]; cut[j - 1] = t; }
  for (int i = 0; i < n; i++) parts[i] = cut[i + 1] - cut[i];
  free(cut);
}

/*
 * gm_build - fill lts, lte, uts, ute ([mask_heads][Sk] each) for mask type t; returns whether
 *   the causal triangle is added. Heads differ only for GM_RANDOM_EVICTION and GM_USER_RANDOM.
 */
static inline int gm_build(int t, int Sq, int Sk, int mh, uint64_t seed, int32_t *lts, int32_t *lte, int32_t *uts,
                           int32_t *ute)
{
  uint64_t s = seed * 7919u + (uint64_t)t * 104729u + 1;
  const int S = Sk, w = S / 16 > 0 ? S / 16 : 1;
  int causal = 0, nd, lo, hi, *docs, *dstart;
  for (size_t i = 0; i < (size_t)mh * Sk; i++) {
    lts[i] = lte[i] = (int32_t)Sq;
    uts[i] = ute[i] = 0;
  }
  if (S <= 8192) lo = 3, hi = 7;
  else if (S <= 32768) lo = 10, hi = 14;
  else lo = 11, hi = 15;
  nd = gm_int(&s, lo, hi);
  if (nd > S) nd = S;
  docs = (int *)malloc(sizeof(int) * nd);
  dstart = (int *)malloc(sizeof(int) * (nd + 1));
  gm_split(&s, S, nd, docs);
  dstart[0] = 0;
  for (int d = 0; d < nd; d++) dstart[d + 1] = dstart[d] + docs[d];
  for (int h = 0; h < mh; h++) {
    int32_t *a = lts + (size_t)h * Sk, *b = lte + (size_t)h * Sk, *c = uts + (size_t)h * Sk, *e = ute + (size_t)h * Sk;
    switch (t) {
    case GM_FULL: break;
    case GM_CAUSAL: causal = 1; break;
    case GM_SLIDING_WINDOW:
      causal = 1;
      for (int j = 0; j < S; j++) a[j] = gm_clip((long)j + w, Sq);
      break;
    case GM_CAUSAL_DOCUMENT:
    case GM_DOCUMENT:
    case GM_CAUSAL_BLOCKWISE:
    case GM_PREFIX_LM_DOCUMENT:
      causal = t == GM_CAUSAL_DOCUMENT || t == GM_CAUSAL_BLOCKWISE;
      for (int d = 0; d < nd; d++)
        for (int j = dstart[d]; j < dstart[d + 1]; j++) {
          a[j] = gm_clip(dstart[d + 1], Sq);
          if (t == GM_DOCUMENT) e[j] = gm_clip(dstart[d], Sq);
          if (t == GM_CAUSAL_BLOCKWISE) b[j] = a[j] > gm_clip(dstart[nd - 1], Sq) ? a[j] : gm_clip(dstart[nd - 1], Sq);
          if (t == GM_PREFIX_LM_DOCUMENT) e[j] = j < dstart[d] + docs[d] / 2 ? gm_clip(dstart[d], Sq) : gm_clip(j, Sq);
        }
      break;
    case GM_SHARE_QUESTION:
      causal = 1;
      for (int d = 0; d < nd; d++) {
        int na = gm_int(&s, 2, 6), nseg = 1 + na, L = docs[d], *seg;
        if (nseg > L) nseg = L;
        seg = (int *)malloc(sizeof(int) * nseg);
        gm_split(&s, L, nseg, seg);
        for (int g = 0, j0 = dstart[d]; g < nseg; j0 += seg[g], g++)
          for (int j = j0; j < j0 + seg[g]; j++) a[j] = gm_clip(g == 0 ? dstart[d + 1] : j0 + seg[g], Sq);
        free(seg);
      }
      break;
    case GM_GLOBAL_SLIDING_WINDOW:
      for (int j = 16; j < S; j++) {
        a[j] = gm_clip((long)j + w + 1, Sq);
        b[j] = gm_clip(S, Sq);
        c[j] = gm_clip(16, Sq);
        e[j] = gm_clip(j - w > 16 ? j - w : 16, Sq);
        if (a[j] > b[j]) a[j] = b[j];
      }
      break;
    case GM_PREFIX_LM_CAUSAL:
      for (int j = 0; j < S; j++) e[j] = j < S / 2 ? 0 : gm_clip(j, Sq);
      break;
    case GM_QK_SPARSE:
      causal = 1;
      for (int sp = 0; sp < 4; sp++) {
        int L = S / 32 > 1 ? S / 32 : 1, o = gm_int(&s, 0, S - L);
        for (int j = o; j < o + L; j++) {
          a[j] = gm_clip(j, Sq);
          b[j] = gm_clip(o + L, Sq);
        }
      }
      break;
    case GM_RANDOM_EVICTION:
      causal = 1;
      {
        uint64_t hs = s + 977 * (uint64_t)(h + 1);
        int r = S / 2;
        for (int j = 0; j < S; j++) {
          if (gm_next(&hs) % 2 == 0) continue;
          r += gm_int(&hs, 0, 3); /* increasing eviction rows after S/2 */
          a[j] = gm_clip(r > j ? r : j, Sq);
        }
      }
      break;
    case GM_USER_RANDOM:
      /* random intervals per column and head, plus a band of rows masked in every column */
      {
        uint64_t hs = s + 31 * (uint64_t)(h + 1);
        int r0 = Sq / 3 + h, r1 = r0 + 5 + h;
        for (int j = 0; j < S; j++) {
          int x = gm_int(&hs, 0, Sq), y = gm_int(&hs, 0, Sq);
          a[j] = x < y ? x : y;
          b[j] = x < y ? y : x;
          if (gm_next(&hs) % 4 == 0) b[j] = a[j]; /* some columns without a lower interval */
          c[j] = gm_clip(r0, Sq);
          e[j] = gm_clip(r1, Sq);
        }
      }
      break;
    }
  }
  free(docs);
  free(dstart);
  return causal;
}

/* Whether row i may not attend key j of head h (the exact mask definition). */
static inline int gm_masked(const int32_t *lts, const int32_t *lte, const int32_t *uts, const int32_t *ute, int causal,
                            int Sq, int Sk, int h, int i, int j)
{
  const size_t o = (size_t)h * Sk + j;
  return (lts[o] <= i && i < lte[o]) || (uts[o] <= i && i < ute[o]) || (causal && j > i + (Sk - Sq));
}
#endif
