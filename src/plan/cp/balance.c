/*
 * balance.c - the balancer: longest-processing-time-first, then exact pairwise repartition
 * of the heaviest rank with each partner and exact three-way repartition with the two
 * lightest ranks where the pool is small, until the max is within 0.1% of a lower bound of
 * the optimum or nothing helps. Deterministic and message free (doc/distributed.md gives the
 * bounds). The reference of the same decisions is in balance_ref.c.
 */
#include <flashmask/private/fmdist.h>
#include <stdlib.h>
#include <string.h>

/* balance_ref.c: the reference improvement (the direct loops), stopping at a load <= stop as improve() */

/* ---------------- helpers ---------------- */
typedef struct { int64_t s; uint32_t mask; } SumMask;

static int cmp_summask(const void *a, const void *b)
{
  const SumMask *x = (const SumMask *)a, *y = (const SumMask *)b;
  if (x->s != y->s) return x->s < y->s ? -1 : 1;
  return x->mask < y->mask ? -1 : (x->mask > y->mask);
}

/* A subset of one half of a pool: its sum, its mask and its moves (items not on their current side). */
typedef struct { int64_t s; uint32_t m; int c; } Half;

/*
 * The 2^k subset sums of x[0..k) (x >= 0) in ascending order, by merging the sorted sums
 * without item i with those with it, item by item (O(2^k)); out and tmp [2^k]; returns the
 * array holding the result (out or tmp). Moves against the current sides cur (a mask).
 */
static Half *half_sums(int k, const int64_t *x, uint32_t cur, Half *out, Half *tmp)
{
  size_t len = 1;
  out[0].s = 0; out[0].m = 0;
  for (int i = 0; i < k; i++, len *= 2) {
    size_t p = 0, q = 0, o = 0;
    Half *t;
    while (q < len) {
      if (p < len && out[p].s <= out[q].s + x[i]) tmp[o++] = out[p++];
      else { tmp[o].s = out[q].s + x[i]; tmp[o++].m = out[q++].m | 1u << i; }
    }
    while (p < len) tmp[o++] = out[p++];
    t = out; out = tmp; tmp = t;
  }
  for (size_t m = 0; m < len; m++) out[m].c = __builtin_popcount(out[m].m ^ cur);
  return out;
}

/*
 * Exact two-way split of items x[0..n) (n <= 40) between ranks a and b minimizing the
 * larger side, by meet in the middle over the sorted subset sums of the two halves, in
 * O(2^(n/2)): the largest smaller side best <= T/2, then, among the subsets for b of sum best
 * (t = 0) or T - best (t = 1), the least (moves, t, first half's mask, second half's mask),
 * the choice of the reference (balance_ref.c). cur[i] = 1 when item i is now on b; out side[i] = 1 when it goes
 * to b. Returns 0 without choosing when the larger side T - best stays at bound or above.
 */
static FMErrorCode split2(int n, const int64_t *x, const unsigned char *cur, unsigned char *side, int64_t bound, int *ok)
{
  int n1 = n / 2, n2 = n - n1, bc = -1, bt = 0, nb = 0;
  size_t N1 = (size_t)1 << n1, N2 = (size_t)1 << n2;
  int64_t T = 0, H, best = 0, tgt[2];
  uint32_t c1 = 0, c2 = 0, bm1 = 0, bm2 = 0;
  Half stk[4 << 8], *buf = stk, *A, *B;
  *ok = 0;
  for (int i = 0; i < n; i++) T += x[i];
  for (int i = 0; i < n1; i++) c1 |= (uint32_t)(cur[i] != 0) << i;
  for (int i = 0; i < n2; i++) c2 |= (uint32_t)(cur[n1 + i] != 0) << i;
  H = T / 2;
  if (n2 > 8) FMCall(FMMalloc(2 * (N1 + N2), &buf));
  A = half_sums(n1, x, c1, buf, buf + N1);
  B = half_sums(n2, x + n1, c2, buf + 2 * N1, buf + 2 * N1 + N2);
  for (size_t m = 0; m < N2; m++) /* B: one entry per distinct sum, the least (moves, mask) */
    if (nb == 0 || B[m].s != B[nb - 1].s) B[nb++] = B[m];
    else if (B[m].c < B[nb - 1].c || (B[m].c == B[nb - 1].c && B[m].m < B[nb - 1].m)) B[nb - 1] = B[m];
  for (size_t m = 0, j = (size_t)nb; m < N1; m++) { /* A ascending, B from the top */
    while (j > 0 && B[j - 1].s > H - A[m].s) j--;
    if (j == 0) break;
    if (A[m].s + B[j - 1].s > best) best = A[m].s + B[j - 1].s;
  }
  if (T - best < bound) {
    tgt[0] = best; tgt[1] = T - best;
    for (int t = 0; t < (tgt[1] == tgt[0] ? 1 : 2); t++)
      for (size_t m = 0, j = (size_t)nb; m < N1; m++) {
        int cost;
        while (j > 0 && B[j - 1].s > tgt[t] - A[m].s) j--;
        if (j == 0) break;
        if (B[j - 1].s != tgt[t] - A[m].s) continue;
        cost = A[m].c + B[j - 1].c;
        if (bc < 0 || cost < bc || (cost == bc && t == bt && A[m].m < bm1)) { bc = cost; bt = t; bm1 = A[m].m; bm2 = B[j - 1].m; }
      }
    for (int i = 0; i < n1; i++) side[i] = (unsigned char)(bm1 >> i & 1);
    for (int i = 0; i < n2; i++) side[n1 + i] = (unsigned char)(bm2 >> i & 1);
    *ok = 1;
  }
  if (buf != stk) free(buf);
  return FM_SUCCESS;
}

/*
 * split3_exact by branch and bound, with the same answer: the items are placed from the last
 * to the first, bins 0, 1, 2 in turn, so the leaves come in the enumeration's code order, and a
 * branch is cut when it cannot beat the best (max, moves) so far: its max so far, or a third of
 * the total, is above the best max, or equal to it with as many moves. Starts from cur (no
 * move). Returns the number of nodes visited (the work budget's units).
 */
typedef struct {
  int n, bestmv;
  const int64_t *x;
  const unsigned char *cur;
  unsigned char tmp[FM_TRIPLE_EXACT_MAX], *bin;
  int64_t best, third;
  long nodes;
} Split3;

static void split3_dfs(Split3 *S, int i, int64_t l0, int64_t l1, int64_t l2, int mv)
{
  int64_t pm = l0 > l1 ? l0 : l1, lb;
  S->nodes++;
  if (l2 > pm) pm = l2;
  lb = pm > S->third ? pm : S->third;
  if (lb > S->best || (lb == S->best && mv >= S->bestmv)) return;
  if (i < 0) { S->best = pm; S->bestmv = mv; memcpy(S->bin, S->tmp, (size_t)S->n); return; }
  for (int b = 0; b < 3; b++) {
    S->tmp[i] = (unsigned char)b;
    split3_dfs(S, i - 1, l0 + (b == 0 ? S->x[i] : 0), l1 + (b == 1 ? S->x[i] : 0), l2 + (b == 2 ? S->x[i] : 0), mv + (b != S->cur[i]));
  }
}

static long split3_bb(int n, const int64_t *x, const unsigned char *cur, unsigned char *bin, int64_t *best_max)
{
  Split3 S;
  int64_t l[3] = {0, 0, 0}, T = 0;
  S.n = n; S.x = x; S.cur = cur; S.bin = bin; S.nodes = 0; S.bestmv = 0;
  for (int i = 0; i < n; i++) { l[cur[i]] += x[i]; T += x[i]; bin[i] = cur[i]; }
  S.best = l[0] > l[1] ? l[0] : l[1];
  if (l[2] > S.best) S.best = l[2];
  S.third = (T + 2) / 3;
  split3_dfs(&S, n - 1, 0, 0, 0, 0);
  *best_max = S.best;
  return S.nodes;
}

/*
 * The same improvement as the reference (FMDistBalanceImproveRef_Private), decision for
 * decision, in O(pool + 2^(pool/2)) per partner tried: every rank's chunks in an ascending list (head/next) merged into the pools, and the ranks
 * kept sorted by (load, index) (order), two of them moved per round. The rounds are
 * bounded by a deterministic work budget (units: pool items and the subsets a full
 * enumeration would visit, an over-count of split2's work), the same on every rank: when it is spent the improvement stops (info->budget_out), so the balancer's
 * time is bounded whatever the weights.
 */
typedef struct {
  int P, *head, *next, *order;
  int64_t *load;
} Ranks;

static int rank_less(const Ranks *R, int x, int y) { return R->load[x] < R->load[y] || (R->load[x] == R->load[y] && x < y); }

/* first index in order[0..m) whose key (load, index) is not below (l, r) */
static int rank_lower(const Ranks *R, int m, int64_t l, int r)
{
  int lo = 0, hi = m;
  while (lo < hi) {
    int mid = (lo + hi) / 2, q = R->order[mid];
    if (R->load[q] < l || (R->load[q] == l && q < r)) lo = mid + 1; else hi = mid;
  }
  return lo;
}

/* who[0..k) had the loads old[] (the keys they are sorted by) and now have load[]: move them */
static void rank_resort(Ranks *R, int k, const int *who, const int64_t *old)
{
  int m = R->P;
  int64_t *load = (int64_t *)R->load, now[3];
  for (int t = 0; t < k; t++) { now[t] = load[who[t]]; load[who[t]] = old[t]; }
  for (int t = 0; t < k; t++) { /* out, found by the keys the order was sorted by */
    int i = rank_lower(R, m, old[t], who[t]);
    memmove(R->order + i, R->order + i + 1, sizeof(int) * (size_t)(m - i - 1));
    m--;
  }
  for (int t = 0; t < k; t++) load[who[t]] = now[t];
  for (int t = 0; t < k; t++) { /* back in, by their new keys */
    int i = rank_lower(R, m, load[who[t]], who[t]);
    memmove(R->order + i + 1, R->order + i, sizeof(int) * (size_t)(m - i));
    R->order[i] = who[t];
    m++;
  }
}

/* pool = the chunks of ranks who[0..k) in ascending order; cur[i] = index in who of the owner */
static int rank_pool(const Ranks *R, int k, const int *who, const int64_t *w, int *pool, unsigned char *cur, int64_t *x)
{
  int p[3], np = 0;
  for (int i = 0; i < k; i++) p[i] = R->head[who[i]];
  for (;;) {
    int best = -1;
    for (int i = 0; i < k; i++)
      if (p[i] >= 0 && (best < 0 || p[i] < p[best])) best = i;
    if (best < 0) break;
    pool[np] = p[best]; cur[np] = (unsigned char)best; x[np++] = w[p[best]];
    p[best] = R->next[p[best]];
  }
  return np;
}

/* after a move: the lists of who[0..k) from the pool (ascending) and the new bins side[] */
static void rank_relist(Ranks *R, int k, const int *who, int np, const int *pool, const unsigned char *side, int *owner)
{
  for (int i = 0; i < k; i++) R->head[who[i]] = -1;
  for (int i = np - 1; i >= 0; i--) {
    int r = who[side[i]];
    owner[pool[i]] = r;
    R->next[pool[i]] = R->head[r];
    R->head[r] = pool[i];
  }
}

/*
 * The partners a round has seen fail, by their weights: whether a pair splits below load[a]
 * depends only on the multiset of weights in the pool, so a partner with the same load and
 * the same sorted chunk weights as one that failed in this round (same a) fails too and is
 * skipped (the choice among optimal splits, which depends on chunk order, is only made on
 * success). Partners come in ascending load, so the list keeps the current load only.
 */
#define FM_FAILED_MAX 8
#define FM_FAILED_LEN 16
typedef struct {
  int n, len[FM_FAILED_MAX];
  int64_t load, wt[FM_FAILED_MAX][FM_FAILED_LEN];
} Failed;

/* b's chunk weights, sorted; -1 when it has more than FM_FAILED_LEN chunks */
static int sorted_weights(const Ranks *R, const int64_t *w, int b, int64_t *v)
{
  int m = 0;
  for (int c = R->head[b]; c >= 0; c = R->next[c]) {
    int i = m++;
    if (m > FM_FAILED_LEN) return -1;
    while (i > 0 && v[i - 1] > w[c]) { v[i] = v[i - 1]; i--; }
    v[i] = w[c];
  }
  return m;
}

static int same_as_failed(const Failed *F, const Ranks *R, const int64_t *w, int b)
{
  int64_t v[FM_FAILED_LEN];
  int m;
  if (F->n == 0 || R->load[b] != F->load) return 0;
  if ((m = sorted_weights(R, w, b, v)) < 0) return 0;
  for (int i = 0; i < F->n; i++)
    if (F->len[i] == m && !memcmp(F->wt[i], v, sizeof(int64_t) * (size_t)m)) return 1;
  return 0;
}

static void record_failed(Failed *F, const Ranks *R, const int64_t *w, int b)
{
  int m;
  if (F->n > 0 && R->load[b] != F->load) F->n = 0;
  if (F->n == FM_FAILED_MAX || (m = sorted_weights(R, w, b, F->wt[F->n])) < 0) return;
  F->load = R->load[b];
  F->len[F->n++] = m;
}

#ifndef FM_BALANCE_TOL
#define FM_BALANCE_TOL 1024 /* the improvement stops within LB / FM_BALANCE_TOL of the lower bound LB (0.1%) */
#endif
#ifndef FM_BALANCE_BUDGET
#define FM_BALANCE_BUDGET (1L << 22) /* work units (subsets enumerated, pool items) per improvement: a few ms at most */
#endif

/*
 * node: NULL for the work-only balancer; else each rank's node (the communication-aware
 * balancer, balance_comm.c): the heaviest rank's partners are tried on its own node first,
 * in ascending load, and only then on the other nodes, so that work moves across nodes only
 * when no partner inside the node can take it.
 */
static FMErrorCode improve(int n, const int64_t *w, int P, int64_t stop, int *owner, int64_t *load, const int *node, FMDistBalanceInfo *info)
{
  Ranks R;
  Failed F;
  int *pool = NULL, who[3];
  int64_t *x = NULL;
  unsigned char *side = NULL, *cur = NULL;
  long iter, maxiter = 1000L + 50L * P + 10L * n, budget = FM_BALANCE_BUDGET;
  FMErrorCode ierr = FM_SUCCESS;
  memset(&R, 0, sizeof(R));
  R.P = P; R.load = load;
  FMCallGoto(FMMalloc(n, &pool)); FMCallGoto(FMMalloc(n, &x)); FMCallGoto(FMMalloc(n, &side)); FMCallGoto(FMMalloc(n, &cur));
  FMCallGoto(FMMalloc(P, &R.head)); FMCallGoto(FMMalloc(n, &R.next)); FMCallGoto(FMMalloc(P, &R.order));
  for (int r = 0; r < P; r++) { R.head[r] = -1; R.order[r] = r; }
  for (int c = n - 1; c >= 0; c--) { R.next[c] = R.head[owner[c]]; R.head[owner[c]] = c; }
  for (int i = 1; i < P; i++) { /* insertion sort once; then two ranks move per round */
    int v = R.order[i], j = i - 1;
    while (j >= 0 && rank_less(&R, v, R.order[j])) { R.order[j + 1] = R.order[j]; j--; }
    R.order[j + 1] = v;
  }
  for (iter = 0; iter < maxiter && P > 1; iter++) {
    int a, improved = 0, top = P - 1;
    while (top > 0 && load[R.order[top - 1]] == load[R.order[P - 1]]) top--;
    a = R.order[top]; /* the heaviest, lowest index among ties */
    if (load[a] <= stop) break; /* within the tolerance of the lower bound */
    for (int pass = 0; pass < (node ? 2 : 1) && !improved; pass++) {
    F.n = 0;
    for (int k = 0; k < P && !improved && budget > 0; k++) {
      int b = R.order[k], np, ok;
      int64_t small = 0, T = load[a] + load[b];
      if (b == a || (node && (node[b] == node[a]) != (pass == 0))) continue;
      who[0] = a; who[1] = b;
      np = rank_pool(&R, 2, who, w, pool, cur, x);
      budget -= np + 1;
      if (np > FM_PAIR_EXACT_MAX) { if (info) info->inexact_pairs++; continue; }
      if (T - T / 2 >= load[a]) continue; /* a side keeps at least half: no split is below load[a] */
      if (same_as_failed(&F, &R, w, b)) continue; /* the same pool of weights failed this round */
      budget -= np <= 10 ? 1L << np : (2L << (np - np / 2)) * (np - np / 2); /* the subsets enumerated */
      FMCallGoto(split2(np, x, cur, side, load[a], &ok));
      if (!ok) { record_failed(&F, &R, w, b); continue; } /* a failed pair stops after the first pass */
      for (int i = 0; i < np; i++) small += side[i] ? x[i] : 0;
      if (small < load[a] && T - small < load[a]) {
        int64_t old[2] = {load[a], load[b]};
        rank_relist(&R, 2, who, np, pool, side, owner);
        load[b] = small; load[a] = T - small;
        rank_resort(&R, 2, who, old);
        if (info) info->pair_moves++;
        improved = 1;
      }
    }
    }
    if (!improved && P >= 3 && budget > 0) {
      int np;
      int64_t bmax;
      who[0] = a; who[1] = R.order[0] == a ? R.order[1] : R.order[0];
      who[2] = R.order[0] == a || R.order[1] == a ? R.order[2] : R.order[1];
      np = rank_pool(&R, 3, who, w, pool, cur, x);
      budget -= np + 1;
      if (np <= FM_TRIPLE_EXACT_MAX) {
        budget -= split3_bb(np, x, cur, side, &bmax);
        if (bmax < load[a]) {
          int64_t old[3] = {load[who[0]], load[who[1]], load[who[2]]};
          rank_relist(&R, 3, who, np, pool, side, owner);
          load[who[0]] = load[who[1]] = load[who[2]] = 0;
          for (int i = 0; i < np; i++) load[who[side[i]]] += x[i];
          rank_resort(&R, 3, who, old);
          if (info) info->triple_moves++;
          improved = 1;
        }
      }
    }
    if (budget <= 0 && info) info->budget_out++;
    if (!improved) break;
  }
cleanup:
  free(pool); free(x); free(side); free(cur); free(R.head); free(R.next); free(R.order);
  return ierr;
}

static void loads_of(int n, const int64_t *w, int P, const int *owner, int64_t *load)
{
  for (int r = 0; r < P; r++) load[r] = 0;
  for (int c = 0; c < n; c++) load[owner[c]] += w[c];
}

static int64_t max_of(int P, const int64_t *load)
{
  return load[FMDistArgmaxLoad(P, load)];
}

/* LPT's least loaded rank (ties: lower rank) from a binary heap of (load, rank) */
static void heap_down(int P, int *hp, const int64_t *load, int i)
{
  for (;;) {
    int l = 2 * i + 1, m = i;
    if (l < P && (load[hp[l]] < load[hp[m]] || (load[hp[l]] == load[hp[m]] && hp[l] < hp[m]))) m = l;
    if (l + 1 < P && (load[hp[l + 1]] < load[hp[m]] || (load[hp[l + 1]] == load[hp[m]] && hp[l + 1] < hp[m]))) m = l + 1;
    if (m == i) return;
    { int t = hp[i]; hp[i] = hp[m]; hp[m] = t; }
    i = m;
  }
}

/* LPT: chunks by weight descending (ties: lower index) onto the least loaded rank (ties: lower rank); loads into load */
static FMErrorCode assign_lpt(int n, const int64_t *w, int P, int ref, int *owner, int64_t *load)
{
  int *idx, *hp;
  SumMask *o;
  FMCall(FMMalloc(n, &o));
  FMCall(FMMalloc(n, &idx));
  for (int c = 0; c < n; c++) { o[c].s = -w[c]; o[c].mask = (uint32_t)c; } /* ascending (-w, c) */
  qsort(o, (size_t)n, sizeof(*o), cmp_summask);
  for (int c = 0; c < n; c++) idx[c] = (int)o[c].mask;
  free(o);
  for (int r = 0; r < P; r++) load[r] = 0;
  if (ref)
    for (int i = 0; i < n; i++) {
      int c = idx[i], best = 0;
      for (int r = 1; r < P; r++)
        if (load[r] < load[best]) best = r;
      owner[c] = best;
      load[best] += w[c];
    }
  else {
    FMCall(FMMalloc(P, &hp));
    for (int r = 0; r < P; r++) hp[r] = r; /* all loads 0: already a heap */
    for (int i = 0; i < n; i++) {
      owner[idx[i]] = hp[0];
      load[hp[0]] += w[idx[i]];
      heap_down(P, hp, load, 0);
    }
    free(hp);
  }
  free(idx);
  return FM_SUCCESS;
}

/*
 * Where the improvement stops: LB + LB / FM_BALANCE_TOL, LB = max(ceil(total / P), the
 * heaviest chunk), a lower bound of the optimum, so a max at or below it is within 0.1% of
 * the optimum (and is the optimum when LB < FM_BALANCE_TOL).
 */
static int64_t balance_stop(int n, const int64_t *w, int P)
{
  int64_t lb = 0;
  for (int c = 0; c < n; c++) lb += w[c];
  lb = lb / P + (lb % P != 0);
  for (int c = 0; c < n; c++)
    if (w[c] > lb) lb = w[c];
  return lb + lb / FM_BALANCE_TOL;
}

/*
 * The improvement from three starts, in the order contiguous, LPT, dual-chunk (locality
 * first: fewest K/V chunks to move), each improved until its max is at or below stop
 * (balance_stop) or no move helps. The first start whose max is at or below both stop
 * and the dual-chunk max wins (the later ones are not computed); else the least max wins,
 * ties going to the earlier start. Improvement never raises the max, so the result is never
 * worse than dual-chunk and is within the LPT bound (4/3 of the optimum): the stop is below both.
 */
static FMErrorCode balance(int n, const int64_t *w, int P, int *owner, FMDistBalanceInfo *info, int ref)
{
  int *own2;
  int64_t *load, stop, bmax = -1;
  FMDistBalanceInfo loc;
  FMCheck(n >= 1 && P >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "n = %d, P = %d; expected both >= 1", n, P);
  memset(&loc, 0, sizeof(loc));
  for (int c = 0; c < n; c++) {
    FMCheck(w[c] >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "w[%d] = %lld; expected >= 0", c, (long long)w[c]);
    loc.total += w[c];
  }
  FMCall(FMMalloc(n, &own2));
  FMCall(FMCalloc(P, &load));
  FMDistAssignDualChunk(n, P, own2);
  loads_of(n, w, P, own2, load);
  loc.dual_max = max_of(P, load);
  FMCall(assign_lpt(n, w, P, ref, own2, load));
  loc.lpt_max = max_of(P, load);
  stop = balance_stop(n, w, P);
  for (int cand = 0; cand < 3; cand++) {
    int64_t cm;
    if (cand == 0) FMDistAssignContiguous(n, P, own2);
    else if (cand == 1) FMCall(assign_lpt(n, w, P, ref, own2, load));
    else FMDistAssignDualChunk(n, P, own2);
    loads_of(n, w, P, own2, load);
    FMCall(ref ? FMDistBalanceImproveRef_Private(n, w, P, stop, own2, load, &loc) : improve(n, w, P, stop, own2, load, NULL, &loc));
    cm = max_of(P, load);
    if (bmax < 0 || cm < bmax) {
      bmax = cm;
      loc.start = cand;
      memcpy(owner, own2, sizeof(int) * (size_t)n);
    }
    if (cm <= stop && cm <= loc.dual_max) break;
  }
  loc.max = bmax;
  free(own2); free(load);
  if (info) *info = loc;
  return FM_SUCCESS;
}

/* FMDistBalanceImprove_Private - see fmdist.h: improve() on a given assignment. */
FMErrorCode FMDistBalanceImprove_Private(int n, const int64_t *w, int P, const int *node, int *owner, int64_t *load, FMDistBalanceInfo *info)
{
  FMCall(improve(n, w, P, 0, owner, load, node, info));
  return FM_SUCCESS;
}

FMErrorCode FMDistBalance(int n, const int64_t *w, int P, int *owner, FMDistBalanceInfo *info)
{
  FMCall(balance(n, w, P, owner, info, 0));
  return FM_SUCCESS;
}

FMErrorCode FMDistBalanceRef(int n, const int64_t *w, int P, int *owner, FMDistBalanceInfo *info)
{
  FMCall(balance(n, w, P, owner, info, 1));
  return FM_SUCCESS;
}
