/*
 * balance_ref.c - the balancer's reference improvement (FMDistBalanceRef, the tests' reference):
 * the direct loops, every chunk scanned for every pool, the ranks sorted each round, pair
 * splits by a sorting meet in the middle and three-way splits by full enumeration. balance.c
 * makes the same decisions in less time; tests/test_dist_plan.c and test_dist_fast.c compare them.
 */
#include <flashmask/private/fmdist.h>
#include <stdlib.h>
#include <string.h>

typedef struct { int64_t s; int cost; uint32_t mask; } SumCost;

static int cmp_sumcost(const void *a, const void *b)
{
  const SumCost *x = (const SumCost *)a, *y = (const SumCost *)b;
  if (x->s != y->s) return x->s < y->s ? -1 : 1;
  if (x->cost != y->cost) return x->cost - y->cost;
  return x->mask < y->mask ? -1 : (x->mask > y->mask);
}

static int popc(uint32_t v) { int c = 0; while (v) { v &= v - 1; c++; } return c; }

/*
 * Exact two-way split of items x[0..n) (n <= 40) between ranks a and b minimizing the larger
 * side, by meet in the middle with sorted sums; among the optimal splits (either orientation)
 * one that moves the fewest items: cur[i] = 1 when item i is now on b; out side[i] = 1 when it
 * goes to b.
 */
static FMErrorCode split2_exact(int n, const int64_t *x, const unsigned char *cur, unsigned char *side)
{
  int n1 = n / 2, n2 = n - n1, bestcost = -1;
  size_t N1 = (size_t)1 << n1, N2 = (size_t)1 << n2;
  int64_t T = 0, H, best = -1, tgt[2];
  uint32_t c1 = 0, c2 = 0, bm1 = 0, bm2 = 0;
  SumCost *s2;
  for (int i = 0; i < n; i++) T += x[i];
  for (int i = 0; i < n1; i++) c1 |= (uint32_t)(cur[i] != 0) << i;
  for (int i = 0; i < n2; i++) c2 |= (uint32_t)(cur[n1 + i] != 0) << i;
  H = T / 2;
  FMCall(FMMalloc(N2, &s2));
  for (size_t m = 0; m < N2; m++) {
    int64_t sm = 0;
    for (int i = 0; i < n2; i++)
      if (m >> i & 1) sm += x[n1 + i];
    s2[m].s = sm; s2[m].mask = (uint32_t)m; s2[m].cost = popc((uint32_t)m ^ c2);
  }
  qsort(s2, N2, sizeof(*s2), cmp_sumcost);
  /* pass 1: the best smaller-side sum (<= T/2) */
  for (size_t m = 0; m < N1 && best < H; m++) {
    int64_t sm = 0, lim;
    size_t lo = 0, hi = N2;
    for (int i = 0; i < n1; i++)
      if (m >> i & 1) sm += x[i];
    lim = H - sm;
    if (lim < 0) continue;
    while (lo < hi) { /* first index with s2 > lim */
      size_t mid = (lo + hi) / 2;
      if (s2[mid].s <= lim) lo = mid + 1; else hi = mid;
    }
    if (lo > 0 && sm + s2[lo - 1].s > best) best = sm + s2[lo - 1].s;
  }
  if (best < 0) best = 0;
  /* pass 2: the subset for b with sum best or T - best that moves the fewest items */
  tgt[0] = best; tgt[1] = T - best;
  for (int t = 0; t < (tgt[1] == tgt[0] ? 1 : 2); t++)
    for (size_t m = 0; m < N1; m++) {
      int64_t sm = 0, need;
      size_t lo = 0, hi = N2;
      for (int i = 0; i < n1; i++)
        if (m >> i & 1) sm += x[i];
      need = tgt[t] - sm;
      while (lo < hi) { /* first index with s2 >= need: the least cost of that sum */
        size_t mid = (lo + hi) / 2;
        if (s2[mid].s < need) lo = mid + 1; else hi = mid;
      }
      if (lo < N2 && s2[lo].s == need) {
        int cost = popc((uint32_t)m ^ c1) + s2[lo].cost;
        if (bestcost < 0 || cost < bestcost) { bestcost = cost; bm1 = (uint32_t)m; bm2 = s2[lo].mask; }
      }
    }
  free(s2);
  for (int i = 0; i < n1; i++) side[i] = (unsigned char)(bm1 >> i & 1);
  for (int i = 0; i < n2; i++) side[n1 + i] = (unsigned char)(bm2 >> i & 1);
  return FM_SUCCESS;
}

/*
 * Exact three-way assignment of x[0..n) (n <= 12) minimizing the largest bin; among the
 * optimal ones the one that moves the fewest items from their current bins cur[].
 */
static void split3_exact(int n, const int64_t *x, const unsigned char *cur, unsigned char *bin, int64_t *best_max)
{
  int64_t best = -1;
  int bestmv = 0;
  long total = 1;
  unsigned char tmp[FM_TRIPLE_EXACT_MAX];
  for (int i = 0; i < n; i++) total *= 3;
  for (long code = 0; code < total; code++) {
    int64_t l[3] = {0, 0, 0}, mx;
    long c = code;
    int mv = 0;
    for (int i = 0; i < n; i++) { tmp[i] = (unsigned char)(c % 3); c /= 3; l[tmp[i]] += x[i]; mv += tmp[i] != cur[i]; }
    mx = l[0] > l[1] ? l[0] : l[1];
    if (l[2] > mx) mx = l[2];
    if (best < 0 || mx < best || (mx == best && mv < bestmv)) { best = mx; bestmv = mv; memcpy(bin, tmp, (size_t)n); }
  }
  *best_max = best;
}

/* The reference improvement (scans every chunk for every pool, sorts the ranks each round); stops at load <= stop as balance.c. */
FMErrorCode FMDistBalanceImproveRef_Private(int n, const int64_t *w, int P, int64_t stop, int *owner, int64_t *load, FMDistBalanceInfo *info)
{
  int *pool, *order;
  int64_t *x;
  unsigned char *side, *cur;
  long iter, maxiter = 1000L + 50L * P + 10L * n;
  FMCall(FMMalloc(n, &pool));
  FMCall(FMMalloc(n, &x));
  FMCall(FMMalloc(n, &side));
  FMCall(FMMalloc(n, &cur));
  FMCall(FMMalloc(P, &order));
  for (iter = 0; iter < maxiter && P > 1; iter++) {
    int a = FMDistArgmaxLoad(P, load), improved = 0;
    if (load[a] <= stop) break; /* within the tolerance of the lower bound */
    /* partners by load ascending, ties by index */
    for (int r = 0; r < P; r++) order[r] = r;
    for (int i = 1; i < P; i++) {
      int v = order[i], j = i - 1;
      while (j >= 0 && (load[order[j]] > load[v] || (load[order[j]] == load[v] && order[j] > v))) { order[j + 1] = order[j]; j--; }
      order[j + 1] = v;
    }
    for (int k = 0; k < P && !improved; k++) {
      int b = order[k], np = 0;
      int64_t small = 0, T = load[a] + load[b];
      if (b == a) continue;
      for (int c = 0; c < n; c++)
        if (owner[c] == a || owner[c] == b) { pool[np] = c; cur[np] = owner[c] == b; x[np++] = w[c]; }
      if (np > FM_PAIR_EXACT_MAX) { if (info) info->inexact_pairs++; continue; }
      FMCall(split2_exact(np, x, cur, side)); /* the reference: always the meet in the middle */
      small = 0;
      for (int i = 0; i < np; i++) small += side[i] ? x[i] : 0; /* b's new load */
      if (small < load[a] && T - small < load[a]) {
        for (int i = 0; i < np; i++) owner[pool[i]] = side[i] ? b : a;
        load[b] = small; load[a] = T - small;
        if (info) info->pair_moves++;
        improved = 1;
      }
    }
    if (!improved && P >= 3) {
      int b = -1, c2 = -1, np = 0;
      int64_t bmax;
      for (int k = 0; k < P; k++) {
        int r = order[k];
        if (r == a) continue;
        if (b < 0) b = r; else if (c2 < 0) c2 = r;
      }
      for (int c = 0; c < n; c++)
        if (owner[c] == a || owner[c] == b || owner[c] == c2) {
          pool[np] = c; cur[np] = owner[c] == a ? 0 : owner[c] == b ? 1 : 2; x[np++] = w[c];
        }
      if (np <= FM_TRIPLE_EXACT_MAX) {
        int who[3] = {a, b, c2};
        split3_exact(np, x, cur, side, &bmax);
        if (bmax < load[a]) {
          load[a] = load[b] = load[c2] = 0;
          for (int i = 0; i < np; i++) { owner[pool[i]] = who[side[i]]; load[who[side[i]]] += x[i]; }
          if (info) info->triple_moves++;
          improved = 1;
        }
      }
    }
    if (!improved) break;
  }
  free(pool); free(x); free(side); free(cur); free(order);
  return FM_SUCCESS;
}
