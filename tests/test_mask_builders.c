/*
 * test_mask_builders - each of the twelve builders against an independent dense definition
 * (straight from doc/format.md section 3, written per (query position, key) with
 * document ids rather than bounds), on sizes that are not multiples of 128 and with
 * seqlen_q != seqlen_k; the defaults drawn from the seed (document counts, segments, spans,
 * evictions); user bounds per head; and -fm_mask_* options against the setters.
 */
#include "fmtest.h"
#include <flashmask/private/fmimpl.h>
#include "mask_builders_ref.h"

/* Create a mask of type t; with R, set every explicit parameter of R. */
static FMMask make_mask(FMContext ctx, int t, int Sq, int Sk, int heads, const Ref *R, unsigned long seed)
{
  FMMask m;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, Sq, Sk, heads));
  FMT_CALL(FMMaskSetType(m, tname[t]));
  FMT_CALL(FMMaskSetSeed(m, seed));
  if (R) {
    FMT_CALL(FMMaskSetDocuments(m, R->ndocs, R->docs));
    FMT_CALL(FMMaskSetShareQuestion(m, R->ndocs, R->nseg, R->seglen));
    FMT_CALL(FMMaskSetWindow(m, R->wl, R->wr));
    FMT_CALL(FMMaskSetGlobalTokens(m, R->G));
    if (t == T_PLC) FMT_CALL(FMMaskSetPrefixLengths(m, 1, &R->P));
    else FMT_CALL(FMMaskSetPrefixLengths(m, R->ndocs, R->prefix));
    FMT_CALL(FMMaskSetQKSparseSpans(m, R->nspans, R->sstart, R->slen));
  }
  FMT_CALL(FMMaskSetUp(m));
  return m;
}

/* Vectors/causal as documented; absent vectors and empty intervals in default form. */
static void check_form(FMMask m, int t, const char *label)
{
  int Sq, Sk, H, present;
  FMBool causal;
  const int32_t *b[4];
  FMT_CALL(FMMaskGetSizes(m, &Sq, &Sk, &H));
  for (int h = 0; h < H; h++) {
    int bad = 0;
    FMT_CALL(FMMaskGetBounds(m, h, &b[0], &b[1], &b[2], &b[3], &present, &causal));
    if (t >= 0) {
      FMT_CHECK(present == tpresent[t], "%s: present = %d, expected %d", label, present, tpresent[t]);
      FMT_CHECK((int)causal == tcausal[t], "%s: causal = %d, expected %d", label, (int)causal, tcausal[t]);
    }
    for (int j = 0; j < Sk && bad < 3; j++) {
      for (int v = 0; v < 4; v++)
        if (!(present & (1 << v)) && b[v][j] != (v < 2 ? Sq : 0)) {
          FMT_CHECK(0, "%s: absent vector %d head %d column %d = %d is not in default form", label, v, h, j, (int)b[v][j]);
          bad++;
        }
      if ((b[0][j] == b[1][j] && b[0][j] != Sq) || (b[2][j] == b[3][j] && b[2][j] != 0)) {
        FMT_CHECK(0, "%s: head %d column %d has an empty interval not in default form (%d %d %d %d)", label, h, j, (int)b[0][j],
                  (int)b[1][j], (int)b[2][j], (int)b[3][j]);
        bad++;
      }
    }
  }
}

/* Compare every entry of head h with the reference (and IsMasked on a sample). */
static void compare_dense(FMMask m, int t, const Ref *R, int h, const char *label)
{
  int Sq, Sk, off, bad = 0;
  FMBool causal;
  const int32_t *b[4];
  FMT_CALL(FMMaskGetSizes(m, &Sq, &Sk, NULL));
  off = Sk - Sq;
  FMT_CALL(FMMaskGetBounds(m, h, &b[0], &b[1], &b[2], &b[3], NULL, &causal));
  for (int i = 0; i < Sq; i++)
    for (int j = 0; j < Sk; j++) {
      int lib = lib_masked(b, causal, off, i, j), ref = !ref_visible(t, R, i + off, j);
      if (lib != ref) {
        if (bad < 5)
          FMT_CHECK(0, "%s head %d: entry (%d, %d) masked %d, reference %d (bounds %d %d %d %d)", label, h, i, j, lib, ref, (int)b[0][j],
                    (int)b[1][j], (int)b[2][j], (int)b[3][j]);
        bad++;
      }
      if (((i * 7 + j * 13) & 63) == 0) {
        FMBool im;
        FMT_CALL(FMMaskIsMasked(m, h, i, j, &im));
        FMT_CHECK((int)im == lib, "%s: FMMaskIsMasked(%d, %d, %d) = %d, bounds say %d", label, h, i, j, (int)im, lib);
      }
    }
  if (bad) fprintf(stderr, "%s: %d entries differ\n", label, bad);
}

/* Entry-wise equality of two masks' dense forms (same key axis), rows aligned by position. */
static void compare_positional(FMMask rect, FMMask sq, const char *label)
{
  int Sq, Sk, H, bad = 0;
  FMBool c1, c2;
  const int32_t *a[4], *b[4];
  FMT_CALL(FMMaskGetSizes(rect, &Sq, &Sk, &H));
  for (int h = 0; h < H; h++) {
    FMT_CALL(FMMaskGetBounds(rect, h, &a[0], &a[1], &a[2], &a[3], NULL, &c1));
    FMT_CALL(FMMaskGetBounds(sq, h, &b[0], &b[1], &b[2], &b[3], NULL, &c2));
    for (int i = 0; i < Sq; i++) {
      int p = i + Sk - Sq;
      for (int j = 0; j < Sk; j++) {
        int x = lib_masked(a, c1, Sk - Sq, i, j), y = p >= 0 ? lib_masked(b, c2, 0, p, j) : -1;
        if (y >= 0 && x != y && bad++ < 5) FMT_CHECK(0, "%s head %d: row %d (position %d) key %d: %d vs square %d", label, h, i, p, j, x, y);
      }
    }
  }
}

static int same_bounds(FMMask a, FMMask b)
{
  int Sq, Sk, H, pa, pb;
  FMBool ca, cb;
  const int32_t *x[4], *y[4];
  FMT_CALL(FMMaskGetSizes(a, &Sq, &Sk, &H));
  for (int h = 0; h < H; h++) {
    FMT_CALL(FMMaskGetBounds(a, h, &x[0], &x[1], &x[2], &x[3], &pa, &ca));
    FMT_CALL(FMMaskGetBounds(b, h, &y[0], &y[1], &y[2], &y[3], &pb, &cb));
    if (pa != pb || ca != cb) return 0;
    for (int v = 0; v < 4; v++)
      if (memcmp(x[v], y[v], sizeof(int32_t) * Sk)) return 0;
  }
  return 1;
}

/* Recover the documents of a square causal_document mask (LTS = document end per column). */
static int recover_docs(FMMask m, int S, int *docs)
{
  const int32_t *lts;
  int n = 0, s = 0;
  FMT_CALL(FMMaskGetBounds(m, 0, &lts, NULL, NULL, NULL, NULL, NULL));
  while (s < S) {
    int e = lts[s];
    FMT_CHECK(e > s && e <= S, "causal_document column %d has LTS %d", s, e);
    if (e <= s || e > S) return -1;
    for (int j = s; j < e; j++) FMT_CHECK(lts[j] == e, "column %d of document [%d,%d) has LTS %d", j, s, e, (int)lts[j]);
    if (n < MAXD) docs[n] = e - s;
    n++;
    s = e;
  }
  return n;
}

static void explicit_builders(FMContext ctx, uint64_t *rs, int Sq, int Sk)
{
  Ref R = {0};
  char label[128];
  rand_params(rs, &R, Sq, Sk);
  for (int t = 0; t < T_N; t++) {
    if (t == T_RE) continue;
    FMMask m = make_mask(ctx, t, Sq, Sk, 1, &R, 42);
    snprintf(label, sizeof(label), "%s %dx%d explicit", tname[t], Sq, Sk);
    check_form(m, t, label);
    compare_dense(m, t, &R, 0, label);
    FMT_CALL(FMMaskDestroy(&m));
  }
  free(R.docid); free(R.segid); free(R.isq); free(R.dstart);
}

/* The window builders at the edges of their parameters (no key to the left, windows longer than
   the keys or the largest int; no global tokens or some), S_q != S_k both ways, against the dense
   definition: the builders clamp these in 32 bits (builders.c, clampoff). */
static void window_edges(FMContext ctx, uint64_t *rs)
{
  static const int shapes[3][2] = {{300, 300}, {257, 300}, {300, 257}};
  const int wls[4] = {0, 1, -3, INT_MAX}, wrs[3] = {0, -3, INT_MAX}; /* -3: the keys + 3 */
  for (int s = 0; s < 3; s++) {
    const int Sq = shapes[s][0], Sk = shapes[s][1];
    Ref R = {0};
    rand_params(rs, &R, Sq, Sk);
    for (int a = 0; a < 4; a++)
      for (int b = 0; b < 3; b++)
        for (int g = 0; g < 2; g++) {
          char label[128];
          R.wl = wls[a] == -3 ? Sk + 3 : wls[a];
          R.wr = wrs[b] == -3 ? Sk + 3 : wrs[b];
          R.G = g ? 5 : 0;
          for (int t = 0; t < T_N; t++) {
            FMMask m;
            if (t != T_SW && t != T_GSW) continue;
            m = make_mask(ctx, t, Sq, Sk, 1, &R, 42);
            snprintf(label, sizeof(label), "%s %dx%d window %d, %d, %d global", tname[t], Sq, Sk, R.wl, R.wr, R.G);
            check_form(m, t, label);
            compare_dense(m, t, &R, 0, label);
            FMT_CALL(FMMaskDestroy(&m));
          }
        }
    free(R.docid); free(R.segid); free(R.isq); free(R.dstart);
  }
}

/* Defaults: documents drawn per the count rule, windows S/16, 16 global tokens, prefixes half
   of each document, S/2 for prefix_lm_causal, spans one per quarter, segments 3..7 per document. */
static void default_builders(FMContext ctx, int S, int dense, unsigned long seed)
{
  Ref R = {0};
  FMMask cd, m, e;
  char label[128];
  int lo = S < 16384 ? 3 : S < 65536 ? 10 : 11, hi = lo + 4;
  R.Sq = R.Sk = S;
  cd = make_mask(ctx, T_CDOC, S, S, 1, NULL, seed);
  R.ndocs = recover_docs(cd, S, R.docs);
  FMT_CHECK(R.ndocs >= (lo < S ? lo : S) && R.ndocs <= hi, "S = %d: %d default documents, expected %d..%d", S, R.ndocs, lo, hi);
  if (R.ndocs < 1 || R.ndocs > MAXD) { FMT_CALL(FMMaskDestroy(&cd)); return; }
  /* one segment per document for the tables; share_question is checked below */
  for (int d = 0; d < R.ndocs; d++) { R.nseg[d] = 1; R.seglen[d] = R.docs[d]; R.prefix[d] = R.docs[d] / 2; }
  R.nseg[R.ndocs] = 1;
  R.wl = R.wr = S / 16 > 1 ? S / 16 : 1;
  R.G = S < 16 ? S : 16;
  R.P = S / 2;
  ref_tables(&R);
  /* the same documents for every document type, and equal to setting them explicitly */
  for (int t = T_CDOC; t <= T_PLD; t++) {
    if (t == T_SQ || t == T_GSW) continue;
    m = make_mask(ctx, t, S, S, 1, NULL, seed);
    FMT_CALL(FMMaskCreate(ctx, &e));
    FMT_CALL(FMMaskSetSizes(e, S, S, 1));
    FMT_CALL(FMMaskSetType(e, tname[t]));
    FMT_CALL(FMMaskSetDocuments(e, R.ndocs, R.docs));
    FMT_CALL(FMMaskSetUp(e));
    FMT_CHECK(same_bounds(m, e), "S = %d %s: default documents differ from the ones of causal_document", S, tname[t]);
    snprintf(label, sizeof(label), "%s S=%d defaults", tname[t], S);
    check_form(m, t, label);
    if (dense) compare_dense(m, t, &R, 0, label);
    FMT_CALL(FMMaskDestroy(&m));
    FMT_CALL(FMMaskDestroy(&e));
  }
  if (dense) {
    int tt[] = {T_FULL, T_CAUSAL, T_SW, T_GSW, T_PLC};
    for (int k = 0; k < 5; k++) {
      m = make_mask(ctx, tt[k], S, S, 1, NULL, seed);
      snprintf(label, sizeof(label), "%s S=%d defaults", tname[tt[k]], S);
      check_form(m, tt[k], label);
      compare_dense(m, tt[k], &R, 0, label);
      FMT_CALL(FMMaskDestroy(&m));
    }
  }
  /* share_question: per document a question run (LTS = document end) then answer runs whose
     LTS is their own end; 2..6 answers for documents long enough */
  {
    const int32_t *lts;
    int o = 0;
    m = make_mask(ctx, T_SQ, S, S, 1, NULL, seed);
    FMT_CALL(FMMaskGetBounds(m, 0, &lts, NULL, NULL, NULL, NULL, NULL));
    for (int d = 0, s = 0; d < R.ndocs; s += R.docs[d], d++) {
      int e = s + R.docs[d], runs = 0, x = s;
      while (x < e) {
        int y = x;
        while (y < e && lts[y] == lts[x]) y++;
        if (runs == 0) FMT_CHECK(lts[x] == e, "share_question S=%d doc %d: question LTS %d, expected %d", S, d, (int)lts[x], e);
        else FMT_CHECK(lts[x] == y, "share_question S=%d doc %d: answer [%d,%d) has LTS %d", S, d, x, y, (int)lts[x]);
        if (o < MAXSEG) R.seglen[o++] = y - x;
        runs++;
        x = y;
      }
      R.nseg[d] = runs;
      if (R.docs[d] >= 7) FMT_CHECK(runs >= 3 && runs <= 7, "share_question S=%d doc %d: %d segments, expected 3..7", S, d, runs);
    }
    if (dense && o < MAXSEG) {
      ref_tables(&R);
      snprintf(label, sizeof(label), "share_question S=%d defaults", S);
      check_form(m, T_SQ, label);
      compare_dense(m, T_SQ, &R, 0, label);
    }
    FMT_CALL(FMMaskDestroy(&m));
  }
  /* qk_sparse: four spans, span k inside quarter k, 1/4..1/2 of it long */
  {
    const int32_t *lts, *lte;
    int n = 0, x = 0;
    m = make_mask(ctx, T_QK, S, S, 1, NULL, seed);
    FMT_CALL(FMMaskGetBounds(m, 0, &lts, &lte, NULL, NULL, NULL, NULL));
    while (x < S) {
      if (lts[x] == lte[x]) { x++; continue; }
      int y = x;
      while (y < S && lts[y] < lte[y] && lte[y] == lte[x]) {
        FMT_CHECK(lts[y] == y, "qk_sparse S=%d column %d: LTS %d", S, y, (int)lts[y]);
        y++;
      }
      FMT_CHECK(lte[x] == y, "qk_sparse S=%d span [%d,%d) has LTE %d", S, x, y, (int)lte[x]);
      if (n < 4) {
        int r0 = (int)((long)n * S / 4), r1 = (int)((long)(n + 1) * S / 4), Rl = r1 - r0;
        FMT_CHECK(x >= r0 && y <= r1 && y - x >= Rl / 4 && y - x <= Rl / 2 + 1, "qk_sparse S=%d span %d [%d,%d) not in quarter [%d,%d) or bad length",
                  S, n, x, y, r0, r1);
        R.sstart[n] = x; R.slen[n] = y - x;
      }
      n++;
      x = y;
    }
    FMT_CHECK(n == 4, "qk_sparse S=%d: %d default spans, expected 4", S, n);
    R.nspans = n < MAXS ? n : MAXS;
    if (dense) {
      snprintf(label, sizeof(label), "qk_sparse S=%d defaults", S);
      compare_dense(m, T_QK, &R, 0, label);
    }
    FMT_CALL(FMMaskDestroy(&m));
  }
  FMT_CALL(FMMaskDestroy(&cd));
  free(R.docid); free(R.segid); free(R.isq); free(R.dstart);
}

/* Random eviction: per head one new column evicted at each row position S/2..S-1. */
static void random_eviction(FMContext ctx, int S, int H, unsigned long seed)
{
  FMMask m = make_mask(ctx, T_RE, S, S, H, NULL, seed), m2, m3;
  int *count = calloc(S + 1, sizeof(int)), *ev = malloc(sizeof(int) * S), differ = 0;
  const int32_t *lts, *lts0;
  Ref R = {0};
  char label[96];
  check_form(m, T_RE, "random_eviction");
  FMT_CALL(FMMaskGetBounds(m, 0, &lts0, NULL, NULL, NULL, NULL, NULL));
  for (int h = 0; h < H; h++) {
    FMT_CALL(FMMaskGetBounds(m, h, &lts, NULL, NULL, NULL, NULL, NULL));
    memset(count, 0, sizeof(int) * (S + 1));
    for (int j = 0; j < S; j++) {
      ev[j] = lts[j];
      count[lts[j]]++;
      if (lts[j] < S) FMT_CHECK(lts[j] > j && lts[j] >= S / 2, "head %d column %d evicted at row %d", h, j, (int)lts[j]);
      if (h > 0 && lts[j] != lts0[j]) differ = 1;
    }
    for (int r = S / 2; r < S; r++) FMT_CHECK(count[r] == 1, "random_eviction S=%d head %d: %d columns evicted at row %d, expected 1", S, h, count[r], r);
    for (int r = 0; r < S / 2; r++) FMT_CHECK(count[r] == 0, "random_eviction S=%d head %d: eviction at row %d < S/2", S, h, r);
    /* dense: j visible to p iff j <= p < eviction row of j; QK reference with one span per column would not fit,
       so check directly */
    {
      const int32_t *b[4];
      FMBool c;
      int bad = 0;
      FMT_CALL(FMMaskGetBounds(m, h, &b[0], &b[1], &b[2], &b[3], NULL, &c));
      for (int i = 0; i < S; i++)
        for (int j = 0; j < S; j++) {
          int vis = j <= i && i < ev[j];
          if (lib_masked(b, c, 0, i, j) == vis && bad++ < 3) FMT_CHECK(0, "random_eviction head %d entry (%d,%d)", h, i, j);
        }
    }
  }
  if (H > 1 && S >= 64) FMT_CHECK(differ, "random_eviction: every head has the same evictions");
  /* deterministic in the seed, different for another seed */
  m2 = make_mask(ctx, T_RE, S, S, H, NULL, seed);
  FMT_CHECK(same_bounds(m, m2), "random_eviction: same seed, different masks");
  m3 = make_mask(ctx, T_RE, S, S, H, NULL, seed + 1);
  if (S >= 64) FMT_CHECK(!same_bounds(m, m3), "random_eviction: seed %lu and %lu give the same mask", seed, seed + 1);
  FMT_CALL(FMMaskDestroy(&m2));
  FMT_CALL(FMMaskDestroy(&m3));
  /* seqlen_q != seqlen_k: the same evictions, rows aligned bottom-right */
  for (int k = 0; k < 2; k++) {
    int Sq = k == 0 ? S - S / 3 : S + S / 4;
    m2 = make_mask(ctx, T_RE, Sq, S, H, NULL, seed);
    snprintf(label, sizeof(label), "random_eviction %dx%d vs square", Sq, S);
    compare_positional(m2, m, label);
    FMT_CALL(FMMaskDestroy(&m2));
  }
  (void)R;
  free(count); free(ev);
  FMT_CALL(FMMaskDestroy(&m));
}

/* Every type with seqlen_q < seqlen_k equals the bottom rows of the square mask. */
static void positional_all(FMContext ctx, uint64_t *rs, int Sq, int Sk)
{
  Ref R = {0};
  char label[128];
  rand_params(rs, &R, Sq, Sk);
  for (int t = 0; t < T_N; t++) {
    FMMask a = make_mask(ctx, t, Sq, Sk, 2, t == T_RE ? NULL : &R, 5), b = make_mask(ctx, t, Sk, Sk, 2, t == T_RE ? NULL : &R, 5);
    snprintf(label, sizeof(label), "%s %dx%d vs square", tname[t], Sq, Sk);
    compare_positional(a, b, label);
    FMT_CALL(FMMaskDestroy(&a));
    FMT_CALL(FMMaskDestroy(&b));
  }
  free(R.docid); free(R.segid); free(R.isq); free(R.dstart);
}

/* User bounds per head, with every allowed set of vectors. */
static void user_bounds(FMContext ctx, uint64_t *rs, int Sq, int Sk, int H)
{
  static const int sets[] = {0, FM_BOUND_LTS, FM_BOUND_LTS | FM_BOUND_LTE, FM_BOUND_UTE, FM_BOUND_LTS | FM_BOUND_UTE, 15};
  for (int k = 0; k < 6; k++)
    for (int causal = 0; causal < 2; causal++) {
      int bits = sets[k], off = Sk - Sq, present, bad = 0;
      int32_t *u[4];
      FMMask m;
      FMBool c;
      for (int v = 0; v < 4; v++) u[v] = malloc(sizeof(int32_t) * (size_t)H * Sk);
      for (size_t x = 0; x < (size_t)H * Sk; x++) {
        int a = (int)(fmt_next(rs) % (uint64_t)(Sq + 1)), b = (int)(fmt_next(rs) % (uint64_t)(Sq + 1));
        if (fmt_next(rs) % 5 == 0) b = a; /* some empty intervals */
        u[0][x] = a < b ? a : b; u[1][x] = a < b ? b : a;
        a = (int)(fmt_next(rs) % (uint64_t)(Sq + 1)); b = (int)(fmt_next(rs) % (uint64_t)(Sq + 1));
        u[2][x] = a < b ? a : b; u[3][x] = a < b ? b : a;
        if (!(bits & FM_BOUND_LTE)) u[1][x] = Sq;
        if (!(bits & FM_BOUND_UTS)) u[2][x] = 0;
      }
      FMT_CALL(FMMaskCreate(ctx, &m));
      FMT_CALL(FMMaskSetSizes(m, Sq, Sk, H));
      FMT_CALL(FMMaskSetType(m, FMMASKBOUNDS));
      FMT_CALL(FMMaskSetCausal(m, causal ? FM_TRUE : FM_FALSE));
      for (int h = H - 1; h >= 0; h--) {
        const int32_t *p[4];
        for (int v = 0; v < 4; v++) p[v] = (bits & (1 << v)) ? u[v] + (size_t)h * Sk : NULL;
        FMT_CALL(FMMaskSetBounds(m, h, p[0], p[1], p[2], p[3]));
      }
      FMT_CALL(FMMaskSetUp(m));
      check_form(m, -1, "bounds");
      for (int h = 0; h < H; h++) {
        const int32_t *b[4], *r[4];
        FMT_CALL(FMMaskGetBounds(m, h, &b[0], &b[1], &b[2], &b[3], &present, &c));
        FMT_CHECK(present == bits && (int)c == causal, "bounds: present %d causal %d, expected %d %d", present, (int)c, bits, causal);
        for (int v = 0; v < 4; v++) r[v] = u[v] + (size_t)h * Sk;
        for (int j = 0; j < Sk; j++) {
          int lo_set = (bits & FM_BOUND_LTS) != 0, up_set = (bits & FM_BOUND_UTE) != 0;
          for (int i = 0; i < Sq; i++) {
            int ref = (lo_set && r[0][j] <= i && i < r[1][j]) || (up_set && r[2][j] <= i && i < r[3][j]) || (causal && j - off > i);
            if (lib_masked(b, c, off, i, j) != ref && bad++ < 3) FMT_CHECK(0, "bounds head %d entry (%d,%d) differs", h, i, j);
          }
          if (lo_set && r[0][j] < r[1][j]) FMT_CHECK(b[0][j] == r[0][j] && b[1][j] == r[1][j], "bounds head %d column %d: lower interval changed", h, j);
          if (up_set && r[2][j] < r[3][j]) FMT_CHECK(b[2][j] == r[2][j] && b[3][j] == r[3][j], "bounds head %d column %d: upper interval changed", h, j);
        }
      }
      FMT_CALL(FMMaskDestroy(&m));
      for (int v = 0; v < 4; v++) free(u[v]);
    }
}

/* -fm_mask_* options give the same masks as the setters. */
static void options(FMContext ctx)
{
  FMMask a, b;
  FMMaskType type;
  int Sq, Sk, H, d3[3] = {100, 200, 300}, ns[2] = {2, 3}, sl[5] = {50, 50, 100, 100, 300}, st[2] = {10, 100}, ln[2] = {20, 5}, pf = 7;
  struct { const char *type; int opt; } cases[] = {{FMMASKDOCUMENT, 0}, {FMMASKGLOBALSLIDINGWINDOW, 1}, {FMMASKQKSPARSE, 2},
                                                     {FMMASKSHAREQUESTION, 3}, {FMMASKPREFIXLMCAUSAL, 4}, {FMMASKSLIDINGWINDOW, 5}};
  FMT_CALL(FMOptionsSetValue("-fm_mask_seqlen", "600"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_seqlen_q", "500"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_heads", "2"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_docs", "100,200,300"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_window", "50"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_window_right", "20"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_global_tokens", "4"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_spans", "10,20,100,5"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_nsegments", "2,3"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_segments", "50,50,100,100,300"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_prefix", "7"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_seed", "7"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_block_size", "64"));
  for (int k = 0; k < 6; k++) {
    FMT_CALL(FMOptionsSetValue("-fm_mask_type", cases[k].type));
    FMT_CALL(FMMaskCreate(ctx, &a));
    FMT_CALL(FMMaskSetFromOptions(a));
    if (cases[k].opt == 3) {
      /* the options give 3 documents (100,200,300) and segments of 2 documents: SetUp must refuse */
      FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
      FMT_EXPECT_ERR(FMMaskSetUp(a), FM_ERR_ARG_INCOMP, "documents");
      FMT_CALL(FMPopErrorHandler());
      FMT_CALL(FMMaskSetDocuments(a, 0, NULL)); /* back to the default: documents from the segments */
    }
    FMT_CALL(FMMaskSetUp(a));
    FMT_CALL(FMMaskGetType(a, &type));
    FMT_CALL(FMMaskGetSizes(a, &Sq, &Sk, &H));
    FMT_CHECK(!strcmp(type, cases[k].type) && Sq == 500 && Sk == 600 && H == 2, "options: type %s sizes %d %d %d", type, Sq, Sk, H);
    FMT_CHECK(a->block == 64 && a->seed == 7, "options: block %d seed %lu", a->block, a->seed);
    FMT_CALL(FMMaskCreate(ctx, &b));
    FMT_CALL(FMMaskSetSizes(b, 500, 600, 2));
    FMT_CALL(FMMaskSetType(b, cases[k].type));
    FMT_CALL(FMMaskSetSeed(b, 7));
    FMT_CALL(FMMaskSetBlockSize(b, 64));
    if (cases[k].opt == 3) FMT_CALL(FMMaskSetShareQuestion(b, 2, ns, sl));
    else FMT_CALL(FMMaskSetDocuments(b, 3, d3));
    FMT_CALL(FMMaskSetWindow(b, 50, 20));
    FMT_CALL(FMMaskSetGlobalTokens(b, 4));
    FMT_CALL(FMMaskSetQKSparseSpans(b, 2, st, ln));
    FMT_CALL(FMMaskSetPrefixLengths(b, 1, &pf));
    FMT_CALL(FMMaskSetUp(b));
    FMT_CHECK(same_bounds(a, b), "options: %s differs from the setters", cases[k].type);
    FMT_CALL(FMMaskDestroy(&a));
    FMT_CALL(FMMaskDestroy(&b));
  }
}

/* Random eviction built by several threads (64 heads of 2048 keys: over the builder's threshold
   for threads) equals the one-thread build, and each head equals the same head of a mask built
   alone on the one-thread path (its stream depends on the seed and the head only). */
static void random_eviction_threads(FMContext ctx)
{
  FMMask a, b, one;
  const int32_t *x, *y;
  /* the builder runs on the context's threads (not OpenMP's default): 1, then 3 (more than
     this machine may have, and odd) */
  const int nt = ctx->threads, n0 = ctx->nthreads, env = ctx->threads_env;
  FMT_CALL(FMContextSetNumThreads(ctx, 1));
  a = make_mask(ctx, T_RE, 2048, 2048, 64, NULL, 7);
  FMT_CALL(FMContextSetNumThreads(ctx, 3));
  b = make_mask(ctx, T_RE, 2048, 2048, 64, NULL, 7);
  ctx->nthreads = n0; /* back to the context's own state (n0 = 0: the default, not a set count) */
  ctx->threads = nt;
  ctx->threads_env = env;
  FMT_CHECK(same_bounds(a, b), "random_eviction 64 x 2048: the threaded build differs from the one-thread build");
  one = make_mask(ctx, T_RE, 2048, 2048, 1, NULL, 7);
  FMT_CALL(FMMaskGetBounds(b, 0, &x, NULL, NULL, NULL, NULL, NULL));
  FMT_CALL(FMMaskGetBounds(one, 0, &y, NULL, NULL, NULL, NULL, NULL));
  FMT_CHECK(!memcmp(x, y, sizeof(int32_t) * 2048), "random_eviction: head 0 of 64 differs from the same head built alone");
  FMT_CALL(FMMaskDestroy(&a));
  FMT_CALL(FMMaskDestroy(&b));
  FMT_CALL(FMMaskDestroy(&one));
}

/*
 * One mask set up again and again with other types and sizes (the training loop's re-plan):
 * the vectors a build leaves at their defaults are not written again by the next build when
 * they are still at them (builders.c, m->bnd_default), so each set-up must equal a fresh mask of
 * the same settings, bounds and block summaries, with absent vectors in default form; the order
 * runs from the types that carry all four vectors to those that carry none and back, and changes
 * seqlen_q (the lower defaults) and the number of entries.
 */
static void resetup_reuse(FMContext ctx, uint64_t *rs)
{
  static const int shapes[][3] = {{1000, 1000, 2}, {777, 1000, 2}, {1000, 777, 1}, {1200, 1200, 3}, {300, 450, 2}};
  FMMask m;
  FMT_CALL(FMMaskCreate(ctx, &m));
  for (int k = 0; k < 40; k++) {
    const int t = k < T_N ? (k * 5) % T_N : (int)(fmt_next(rs) % T_N), *sh = shapes[fmt_next(rs) % 5];
    const unsigned long seed = (unsigned long)(fmt_next(rs) & 0xFFFF);
    FMMask f = make_mask(ctx, t, sh[0], sh[1], sh[2], NULL, seed);
    const int32_t *sm, *sf;
    char label[96];
    snprintf(label, sizeof label, "re-set-up %d: %s %dx%d, %d heads", k, tname[t], sh[0], sh[1], sh[2]);
    FMT_CALL(FMMaskSetSizes(m, sh[0], sh[1], sh[2]));
    FMT_CALL(FMMaskSetType(m, tname[t]));
    FMT_CALL(FMMaskSetSeed(m, seed));
    FMT_CALL(FMMaskSetUp(m));
    check_form(m, t, label);
    FMT_CHECK(same_bounds(m, f), "%s: bounds differ from a fresh mask's", label);
    FMT_CALL(FMMaskSummary_Private(m, &sm));
    FMT_CALL(FMMaskSummary_Private(f, &sf));
    FMT_CHECK(m->nblocks_k == f->nblocks_k && !memcmp(sm, sf, sizeof(int32_t) * FM_SUM_N * m->nblocks_k * sh[2]),
              "%s: block summaries differ from a fresh mask's", label);
    FMT_CALL(FMMaskDestroy(&f));
  }
  FMT_CALL(FMMaskDestroy(&m));
}

int main(int argc, char **argv)
{
  FMContext ctx;
  uint64_t rs;
  const char *const *names;
  int ntypes = 0;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_mask_builders"));
  /* the enum T_* follows the builder order of FMMaskTypeList (test_sys checks it against FMMASK*) */
  FMT_CALL(FMMaskTypeList(&ntypes, &names));
  if (ntypes < T_N) {
    fprintf(stderr, "FMMaskTypeList gives %d types, expected at least %d builders\n", ntypes, T_N);
    return 99;
  }
  for (int t = 0; t < T_N; t++) tname[t] = names[t];
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetUp(ctx));
  rs = fmt_seed();

  /* explicit random parameters, several shapes (not multiples of 128, Sq != Sk) */
  {
    int shapes[][2] = {{1000, 1000}, {777, 1000}, {1000, 777}, {300, 4099}, {4099, 4099}, {97, 130}};
    for (int k = 0; k < 6; k++) explicit_builders(ctx, &rs, shapes[k][0], shapes[k][1]);
    window_edges(ctx, &rs);
  }
  /* defaults from the seed: dense at small sizes, structure at the benchmark rule's sizes */
  default_builders(ctx, 1000, 1, (unsigned long)(rs & 0xFFFF));
  default_builders(ctx, 777, 1, 42);
  default_builders(ctx, 8192, 0, 42);
  default_builders(ctx, 20000, 0, 42);
  default_builders(ctx, 70000, 0, (unsigned long)(rs & 0xFFFF));
  random_eviction(ctx, 1000, 3, (unsigned long)(rs & 0xFFFF));
  random_eviction(ctx, 257, 2, 42);
  random_eviction_threads(ctx);
  positional_all(ctx, &rs, 611, 1000);
  user_bounds(ctx, &rs, 300, 450, 3);
  user_bounds(ctx, &rs, 450, 300, 2);
  options(ctx);
  resetup_reuse(ctx, &rs);

  FMT_CALL(FMContextDestroy(&ctx));
  {
    int rc = fmt_finish("test_mask_builders");
    FMT_CALL(FMFinalize());
    return rc;
  }
}
