/*
 * builders.c - the twelve benchmark masks of doc/format.md section 3 (plus user bounds),
 * written as column bounds, and the defaults of their parameters drawn from the mask's seed.
 *
 * Conventions (doc/masks.md is the precise reference):
 *  - Parameters (documents, windows, spans, evictions) live on the key axis, positions
 *    0..seqlen_k. Query row i sits at position i + off, off = seqlen_k - seqlen_q (bottom-right
 *    alignment, like the causal diagonal); a position bound x becomes the row bound
 *    clip(x - off, 0, seqlen_q).
 *  - Random defaults come from a splitmix64 stream per purpose, seeded by m->seed + sample only, so every
 *    rank builds the same mask without messages.
 */
#include "maskimpl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/* ---------------------------------------------------------------- the type names */
const char *const FMMaskTypeNames_Private[FM_MT_N + 1] = {
  FMMASKFULL, FMMASKCAUSAL, FMMASKSLIDINGWINDOW, FMMASKCAUSALDOCUMENT, FMMASKDOCUMENT, FMMASKSHAREQUESTION,
  FMMASKGLOBALSLIDINGWINDOW, FMMASKCAUSALBLOCKWISE, FMMASKPREFIXLMDOCUMENT, FMMASKPREFIXLMCAUSAL, FMMASKQKSPARSE,
  FMMASKRANDOMEVICTION, FMMASKBOUNDS, NULL};

int FMMaskTypeIndex_Private(const char *name)
{
  if (!name) return -1;
  for (int t = 0; t < FM_MT_N; t++)
    if (!strcmp(name, FMMaskTypeNames_Private[t])) return t;
  return -1;
}

/* FMMaskTypeList - see flashmask.h. */
FMErrorCode FMMaskTypeList(int *n, const char *const **names)
{
  FMValidPointer(n, 1);
  FMValidPointer(names, 2);
  *n = FM_MT_N;
  *names = FMMaskTypeNames_Private;
  return FM_SUCCESS;
}

/* ---------------------------------------------------------------- random numbers */
typedef struct { uint64_t s; } FMRng;

/* Streams: documents, share-question segments, qk-sparse spans, evictions (+ head). */
enum { RNG_DOCS = 1, RNG_SEGS = 2, RNG_SPANS = 3, RNG_EVICT = 0x1000 };

static void rng_init(FMRng *r, unsigned long seed, uint64_t stream)
{
  r->s = (uint64_t)seed ^ (0x9E3779B97F4A7C15ull * (stream + 1));
}

static uint64_t rng_next(FMRng *r)
{
  uint64_t z = (r->s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

/* Uniform integer in [lo, hi] (hi >= lo). */
static int rng_int(FMRng *r, int lo, int hi)
{
  return lo + (int)(rng_next(r) % (uint64_t)((int64_t)hi - lo + 1));
}

/*
 * Split a length L into n >= 1 positive parts: n - 1 distinct cut points drawn uniformly
 * from [1, L - 1] (in draw order, duplicates redrawn), sorted. Requires 1 <= n <= L.
 */
static void random_split(FMRng *r, int L, int n, int *parts)
{
  int *cut = parts; /* the cuts are built in place: parts[0..n-2], then turned into lengths */
  for (int k = 0; k < n - 1; k++) {
    int c, dup;
    do {
      c = rng_int(r, 1, L - 1);
      dup = 0;
      for (int q = 0; q < k; q++)
        if (cut[q] == c) { dup = 1; break; }
    } while (dup);
    /* insert sorted */
    int q = k;
    while (q > 0 && cut[q - 1] > c) { cut[q] = cut[q - 1]; q--; }
    cut[q] = c;
  }
  /* cuts c_0 < ... < c_{n-2} -> lengths, from the back so the cuts are read before being overwritten */
  for (int k = n - 1; k >= 0; k--) {
    int hi = k == n - 1 ? L : cut[k];
    int lo = k == 0 ? 0 : cut[k - 1];
    parts[k] = hi - lo;
  }
}

/* ---------------------------------------------------------------- defaults */
/* Number of documents for a sequence of S tokens: [3,7] below 16K, [10,14] below 64K, else [11,15]. */
static void doc_count_range(int S, int *lo, int *hi)
{
  if (S < 16384) { *lo = 3; *hi = 7; }
  else if (S < 65536) { *lo = 10; *hi = 14; }
  else { *lo = 11; *hi = 15; }
}

static FMErrorCode draw_docs(unsigned long seed, int S, int *ndocs, int **docs)
{
  FMRng r;
  int lo, hi, n;
  rng_init(&r, seed, RNG_DOCS);
  doc_count_range(S, &lo, &hi);
  n = rng_int(&r, lo, hi);
  if (n > S) n = S;
  FMCall(FMMalloc(n, docs));
  random_split(&r, S, n, *docs);
  *ndocs = n;
  return FM_SUCCESS;
}

static FMErrorCode draw_segments(unsigned long seed, int ndocs, const int *docs, int **nseg, int *nsegtot, int **seglen)
{
  FMRng r;
  int tot = 0, *ns, *sl;
  FMCall(FMMalloc(ndocs, &ns));
  rng_init(&r, seed, RNG_SEGS);
  for (int d = 0; d < ndocs; d++) {
    int k = 1 + rng_int(&r, 2, 6); /* a question and 2..6 answers */
    ns[d] = k > docs[d] ? docs[d] : k;
    tot += ns[d];
  }
  {
    FMErrorCode ierr = FMMalloc(tot, &sl);
    if (ierr) { free(ns); FMCall(ierr); }
  }
  rng_init(&r, seed, RNG_SEGS + 0x100);
  for (int d = 0, o = 0; d < ndocs; o += ns[d], d++) random_split(&r, docs[d], ns[d], sl + o);
  *nseg = ns; *seglen = sl; *nsegtot = tot;
  return FM_SUCCESS;
}

/* Four spans, one in each quarter of the sequence, each 1/4..1/2 of its quarter long. */
static FMErrorCode draw_spans(unsigned long seed, int S, int *nspans, int **start, int **len)
{
  FMRng r;
  const int n = 4;
  FMCall(FMMalloc(n, start));
  FMCall(FMMalloc(n, len));
  rng_init(&r, seed, RNG_SPANS);
  for (int k = 0; k < n; k++) {
    int r0 = (int)((int64_t)k * S / n), r1 = (int)((int64_t)(k + 1) * S / n), R = r1 - r0, L;
    if (R == 0) { (*start)[k] = r0; (*len)[k] = 0; continue; }
    L = R / 4 + rng_int(&r, 0, R / 4);
    if (L < 1) L = 1;
    (*start)[k] = r0 + rng_int(&r, 0, R - L);
    (*len)[k] = L;
  }
  *nspans = n;
  return FM_SUCCESS;
}

/* ---------------------------------------------------------------- parameters */
static int type_uses_docs(int t)
{
  return t == FM_MT_CAUSALDOCUMENT || t == FM_MT_DOCUMENT || t == FM_MT_SHAREQUESTION || t == FM_MT_CAUSALBLOCKWISE ||
         t == FM_MT_PREFIXLMDOCUMENT;
}

static FMErrorCode resolve_docs(FMMask m, int t, int sample, FMMaskParams *p)
{
  int S = m->seqlen_k;
  const int own = m->sdocs_n && m->sdocs_n[sample] > 0; /* the sample's own (FMMaskSetSampleDocuments) */
  const int n = own ? m->sdocs_n[sample] : m->ndocs;
  if (n > 0) { /* given lengths: the sample's own, else the mask's */
    const int *docs = own ? m->sdocs[sample] : m->docs;
    char what[96];
    int64_t sum = 0;
    for (int d = 0; d < n; d++) sum += docs[d];
    if (own) snprintf(what, sizeof what, "Document lengths of sample %d (FMMaskSetSampleDocuments)", sample);
    else snprintf(what, sizeof what, "Document lengths (FMMaskSetDocuments / -fm_mask_docs)");
    FMCheck(sum == S, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "%s sum to %lld, expected seqlen_k = %d", what, (long long)sum, S);
    FMCall(FMMalloc(n, &p->docs));
    memcpy(p->docs, docs, sizeof(int) * (size_t)n);
    p->ndocs = n;
  } else if (t == FM_MT_SHAREQUESTION && m->nsq > 0) {
    /* documents follow from the question/answer segments */
    int64_t sum = 0;
    FMCall(FMMalloc(m->nsq, &p->docs));
    p->ndocs = m->nsq;
    for (int d = 0, o = 0; d < m->nsq; o += m->sq_nseg[d], d++) {
      int64_t L = 0;
      for (int s = 0; s < m->sq_nseg[d]; s++) L += m->sq_seglen[o + s];
      FMCheck(L <= S, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "Segments of document %d (FMMaskSetShareQuestion) sum to %lld > seqlen_k = %d", d,
              (long long)L, S);
      p->docs[d] = (int)L;
      sum += L;
    }
    FMCheck(sum == S, MPI_COMM_SELF, FM_ERR_ARG_SIZ,
            "Share-question segment lengths (FMMaskSetShareQuestion / -fm_mask_segments) sum to %lld, expected seqlen_k = %d",
            (long long)sum, S);
  } else {
    FMCall(draw_docs(p->seed, S, &p->ndocs, &p->docs));
    p->docs_default = 1;
  }
  return FM_SUCCESS;
}

static FMErrorCode resolve_segments(FMMask m, int sample, FMMaskParams *p)
{
  if (m->nsq > 0) {
    FMCheck(m->nsq == p->ndocs, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
            "FMMaskSetShareQuestion gives %d documents but sample %d of the mask has %d (FMMaskSetDocuments, FMMaskSetSampleDocuments)",
            m->nsq, sample, p->ndocs);
    FMCall(FMMalloc(m->nsq, &p->nseg));
    FMCall(FMMalloc(m->nsqseg, &p->seglen));
    memcpy(p->nseg, m->sq_nseg, sizeof(int) * (size_t)m->nsq);
    memcpy(p->seglen, m->sq_seglen, sizeof(int) * (size_t)m->nsqseg);
    p->nsegtot = m->nsqseg;
    for (int d = 0, o = 0; d < m->nsq; o += m->sq_nseg[d], d++) {
      int64_t L = 0;
      for (int s = 0; s < m->sq_nseg[d]; s++) L += m->sq_seglen[o + s];
      FMCheck(L == p->docs[d], MPI_COMM_SELF, FM_ERR_ARG_SIZ,
              "Share-question segments of document %d sum to %lld, expected its length %d (FMMaskSetShareQuestion)", d, (long long)L,
              p->docs[d]);
    }
  } else {
    FMCall(draw_segments(p->seed, p->ndocs, p->docs, &p->nseg, &p->nsegtot, &p->seglen));
    p->segs_default = 1;
  }
  return FM_SUCCESS;
}

static FMErrorCode resolve_all(FMMask m, int t, int sample, FMMaskParams *p)
{
  int S = m->seqlen_k;
  FMCheck(S > 0 && m->seqlen_q > 0, MPI_COMM_SELF, FM_ERR_ORDER, "Must call FMMaskSetSizes() before FMMaskSetUp()");
  if (type_uses_docs(t)) FMCall(resolve_docs(m, t, sample, p));
  if (t == FM_MT_SHAREQUESTION) FMCall(resolve_segments(m, sample, p));
  if (t == FM_MT_SLIDINGWINDOW || t == FM_MT_GLOBALSLIDINGWINDOW) {
    int w = S / 16 > 1 ? S / 16 : 1;
    p->window_left = m->window_left >= 0 ? m->window_left : w;
    p->window_right = m->window_right >= 0 ? m->window_right : w;
  }
  if (t == FM_MT_GLOBALSLIDINGWINDOW) {
    p->nglobal = m->nglobal >= 0 ? m->nglobal : (S < 16 ? S : 16);
    FMCheck(p->nglobal <= S, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
            "Number of global tokens (FMMaskSetGlobalTokens / -fm_mask_global_tokens) is %d; expected 0 <= nglobal <= seqlen_k = %d",
            p->nglobal, S);
  }
  if (t == FM_MT_PREFIXLMDOCUMENT) {
    FMCall(FMMalloc(p->ndocs, &p->prefix));
    p->nprefix = p->ndocs;
    if (m->nprefix > 0) {
      FMCheck(m->nprefix == p->ndocs, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
              "FMMaskSetPrefixLengths (-fm_mask_prefix) gives %d prefix lengths but sample %d of the mask has %d documents", m->nprefix,
              sample, p->ndocs);
      for (int d = 0; d < p->ndocs; d++) {
        FMCheck(m->prefix[d] <= p->docs[d], MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
                "Prefix length %d of document %d (FMMaskSetPrefixLengths) exceeds the document length %d", m->prefix[d], d, p->docs[d]);
        p->prefix[d] = m->prefix[d];
      }
    } else {
      for (int d = 0; d < p->ndocs; d++) p->prefix[d] = p->docs[d] / 2;
      p->prefix_default = 1;
    }
  }
  if (t == FM_MT_PREFIXLMCAUSAL) {
    FMCall(FMMalloc(1, &p->prefix));
    p->nprefix = 1;
    if (m->nprefix > 0) {
      FMCheck(m->nprefix == 1, MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
              "prefix_lm_causal takes one prefix length (FMMaskSetPrefixLengths with ndocs = 1); got %d", m->nprefix);
      FMCheck(m->prefix[0] <= S, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
              "Prefix length (FMMaskSetPrefixLengths / -fm_mask_prefix) is %d; expected 0 <= prefix <= seqlen_k = %d", m->prefix[0], S);
      p->prefix[0] = m->prefix[0];
    } else {
      p->prefix[0] = S / 2;
      p->prefix_default = 1;
    }
  }
  if (t == FM_MT_QKSPARSE) {
    if (m->nspans > 0) {
      for (int s = 0; s < m->nspans; s++)
        FMCheck((int64_t)m->span_start[s] + m->span_len[s] <= S, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
                "QK-sparse span %d (FMMaskSetQKSparseSpans / -fm_mask_spans) = [%d, %lld) ends past seqlen_k = %d", s, m->span_start[s],
                (long long)m->span_start[s] + m->span_len[s], S);
      FMCall(FMMalloc(m->nspans, &p->span_start));
      FMCall(FMMalloc(m->nspans, &p->span_len));
      memcpy(p->span_start, m->span_start, sizeof(int) * (size_t)m->nspans);
      memcpy(p->span_len, m->span_len, sizeof(int) * (size_t)m->nspans);
      p->nspans = m->nspans;
    } else {
      FMCall(draw_spans(p->seed, S, &p->nspans, &p->span_start, &p->span_len));
      p->spans_default = 1;
    }
  }
  return FM_SUCCESS;
}

void FMMaskParamsFree_Private(FMMaskParams *p)
{
  if (!p) return;
  FMFree(p->docs);
  FMFree(p->nseg);
  FMFree(p->seglen);
  FMFree(p->prefix);
  FMFree(p->span_start);
  FMFree(p->span_len);
  memset(p, 0, sizeof(*p));
}

FMErrorCode FMMaskGetParams_Private(FMMask m, FMMaskParams *p)
{
  FMCall(FMMaskGetSampleParams_Private(m, 0, p));
  return FM_SUCCESS;
}

FMErrorCode FMMaskGetSampleParams_Private(FMMask m, int sample, FMMaskParams *p)
{
  FMErrorCode ierr;
  int t;
  FMValidHeader(m, FM_CLASSID_MASK, 1);
  FMValidPointer(p, 3);
  memset(p, 0, sizeof(*p));
  p->seed = m->seed + (unsigned long)sample;
  p->window_left = p->window_right = p->nglobal = -1;
  t = FMMaskTypeIndex_Private(m->hdr.type_name);
  FMCheck(t >= 0, MPI_COMM_SELF, FM_ERR_LIB, "Mask has unknown type \"%s\"", m->hdr.type_name ? m->hdr.type_name : "(null)");
  ierr = resolve_all(m, t, sample, p);
  if (ierr) {
    FMMaskParamsFree_Private(p);
    FMCall(ierr);
  }
  return FM_SUCCESS;
}

/* ---------------------------------------------------------------- builders */
/* Position bound x (along the key axis) -> row bound clip(x - off, 0, Sq). */
static inline int32_t rowb(int64_t x, int64_t off, int Sq)
{
  x -= off;
  return (int32_t)(x < 0 ? 0 : x > Sq ? Sq : x);
}

/* An offset b to add to a column j in [0, Sk) before clamping to [0, Sq], limited to [-Sk, Sq]:
   j + b then fits in int (at most Sk - 1 + Sq < 2 FM_MASK_MAX_SEQLEN) and clamps to the same row
   as j + b in 64 bits (b <= -Sk gives a negative sum for every j, b >= Sq one of at least Sq). */
static inline int32_t clampoff(int64_t b, int Sq, int Sk)
{
  return (int32_t)(b < -(int64_t)Sk ? -(int64_t)Sk : b > (int64_t)Sq ? (int64_t)Sq : b);
}

/* x[j] = clamp(j + b, lo, Sq) for j in [j0, j1), j1 <= Sk, b from clampoff, 0 <= lo <= Sq: 32-bit
   arithmetic, so that the loop vectorizes (the same rows as rowb(j + b) in 64 bits, which GCC kept
   scalar). */
static inline int32_t clamp32(int32_t a, int32_t lo, int32_t hi) { return a < lo ? lo : a > hi ? hi : a; }
static inline void rows_from(int32_t *x, int j0, int j1, int32_t b, int32_t lo, int32_t Sq)
{
#pragma omp simd
  for (int j = j0; j < j1; j++) x[j] = clamp32(j + b, lo, Sq);
}

/* b[0..n) = x (n <= 0: nothing); simd: GCC's -O2 (its very cheap cost model) leaves a loop of
   unknown trip count scalar otherwise */
static inline void fill32(int32_t *b, int n, int32_t x)
{
#pragma omp simd
  for (int i = 0; i < n; i++) b[i] = x;
}

/*
 * A parametrized type's causal flag, its vectors (FM_BOUND_* bits) and, of those, the ones its
 * builder writes in every column of every row (*whole), which alloc_default_bounds need not fill
 * with defaults first: the sliding window, the document types (documents cover the keys), the
 * global sliding window, causal blockwise and QK-sparse write theirs whole (the last three write
 * the defaults themselves where they mask nothing: a fill of every vector first, then the build
 * over most of it, took a fifth of the global sliding window's set-up); prefix LM causal leaves
 * its columns before the prefix at their defaults.
 */
static void type_bits(int t, int *causal, int *present, int *whole)
{
  int c = 0, v = 0, w = 0;
  switch (t) {
  case FM_MT_CAUSAL: c = 1; break;
  case FM_MT_SLIDINGWINDOW:
  case FM_MT_CAUSALDOCUMENT:
  case FM_MT_SHAREQUESTION: c = 1, v = w = FM_BOUND_LTS; break;
  case FM_MT_DOCUMENT:
  case FM_MT_PREFIXLMDOCUMENT: v = w = FM_BOUND_LTS | FM_BOUND_UTE; break;
  case FM_MT_CAUSALBLOCKWISE:
  case FM_MT_QKSPARSE: c = 1, v = w = FM_BOUND_LTS | FM_BOUND_LTE; break;
  case FM_MT_GLOBALSLIDINGWINDOW: v = w = FM_BOUND_LTS | FM_BOUND_LTE | FM_BOUND_UTS | FM_BOUND_UTE; break;
  case FM_MT_PREFIXLMCAUSAL: v = FM_BOUND_LTS | FM_BOUND_UTE; break;
  default: break; /* full */
  }
  if (causal) *causal = c;
  if (present) *present = v;
  if (whole) *whole = w;
}

/* The bounds of row g (head 0 of a sample) for every parametrized type (bnd already in default form;
   the type's causal flag and vectors: type_bits). Called for several samples at once: writes row g only. */
static FMErrorCode build_head0(FMMask m, int t, const FMMaskParams *p, size_t g)
{
  const int Sq = m->seqlen_q, Sk = m->seqlen_k;
  const int64_t off = (int64_t)Sk - Sq;
  const size_t o = g * (size_t)Sk;
  int32_t *lts = m->bnd[0] + o, *lte = m->bnd[1] + o, *uts = m->bnd[2] + o, *ute = m->bnd[3] + o;

  switch (t) {
  case FM_MT_FULL:
  case FM_MT_CAUSAL:
    break;
  case FM_MT_SLIDINGWINDOW: /* key j visible to position p iff j <= p < j + w */
    rows_from(lts, 0, Sk, clampoff((int64_t)p->window_left - off, Sq, Sk), 0, Sq);
    break;
  case FM_MT_CAUSALDOCUMENT:
  case FM_MT_DOCUMENT:
  case FM_MT_CAUSALBLOCKWISE: {
    int last = Sk - p->docs[p->ndocs - 1];
    /* constant per document: plain fills (vectorized), the type tested once per document */
    for (int d = 0, s = 0; d < p->ndocs; s += p->docs[d], d++) {
      const int e = s + p->docs[d];
      const int32_t be = rowb(e, off, Sq), bs = rowb(s, off, Sq), bl = rowb(last, off, Sq);
      if (t == FM_MT_CAUSALBLOCKWISE) {
        const int lastdoc = d == p->ndocs - 1; /* the last document: nothing beyond causal (the defaults) */
        fill32(lts + s, e - s, lastdoc ? Sq : be);
        fill32(lte + s, e - s, lastdoc ? Sq : bl);
      } else {
        fill32(lts + s, e - s, be);
        if (t == FM_MT_DOCUMENT) fill32(ute + s, e - s, bs);
      }
    }
    break;
  }
  case FM_MT_SHAREQUESTION:
    for (int d = 0, s = 0, o = 0; d < p->ndocs; s += p->docs[d], o += p->nseg[d], d++) {
      int e = s + p->docs[d], a = s;
      for (int g = 0; g < p->nseg[d]; g++) {
        int b = a + p->seglen[o + g];
        fill32(lts + a, b - a, rowb(g == 0 ? e : b, off, Sq)); /* question: to the end of the document; answer: its own end */
        a = b;
      }
    }
    break;
  case FM_MT_GLOBALSLIDINGWINDOW: {
    int G = p->nglobal < Sk ? p->nglobal : Sk;
    fill32(lts, G, Sq); /* the global keys: seen by every row (the defaults) */
    fill32(lte, G, Sq);
    fill32(uts, G, 0);
    fill32(ute, G, 0);
    /* lts = rowb(j + wl + 1); ute = rowb(max(j - wr, G)) = min(max(j - wr - off, ug), Sq) */
    const int32_t ug = rowb(G, off, Sq), bl = clampoff((int64_t)p->window_left + 1 - off, Sq, Sk),
                  br = clampoff(-(int64_t)p->window_right - off, Sq, Sk);
#pragma omp simd
    for (int j = G; j < Sk; j++) { /* one pass over the four vectors (four rows_from and fills: 20% slower) */
      lts[j] = clamp32(j + bl, 0, Sq);
      lte[j] = Sq;
      uts[j] = ug;
      ute[j] = clamp32(j + br, ug, Sq);
    }
    break;
  }
  case FM_MT_PREFIXLMDOCUMENT:
    for (int d = 0, s = 0; d < p->ndocs; s += p->docs[d], d++) {
      const int e = s + p->docs[d], pe = s + p->prefix[d];
      fill32(lts + s, e - s, rowb(e, off, Sq));
      fill32(ute + s, pe - s, rowb(s, off, Sq));
      rows_from(ute, pe, e, clampoff(-off, Sq, Sk), 0, Sq);
    }
    break;
  case FM_MT_PREFIXLMCAUSAL:
    rows_from(ute, p->prefix[0], Sk, clampoff(-off, Sq, Sk), 0, Sq);
    break;
  case FM_MT_QKSPARSE: {
    int *end;
    const int32_t b0 = (int32_t)(Sq - Sk); /* rowb(x) = clamp32(x + b0, 0, Sq); x <= Sk keeps x + b0 <= Sq in int */
    FMCall(FMMalloc(Sk, &end));
    fill32(end, Sk, -1);
    for (int s = 0; s < p->nspans; s++) {
      const int e = p->span_start[s] + p->span_len[s];
#pragma omp simd
      for (int j = p->span_start[s]; j < e; j++) end[j] = e > end[j] ? e : end[j];
    }
#pragma omp simd
    for (int j = 0; j < Sk; j++) {
      const int span = end[j] > j; /* else the defaults */
      lts[j] = span ? clamp32(j + b0, 0, Sq) : Sq;
      lte[j] = span ? clamp32(end[j] + b0, 0, Sq) : Sq;
    }
    free(end);
    break;
  }
  default:
    FMRaise(MPI_COMM_SELF, FM_ERR_LIB, "build_head0() called for type %d", t);
  }
  return FM_SUCCESS;
}

/*
 * Random eviction, per sample s and head h (stream RNG_EVICT + h of the seed m->seed + s): for each row position r = S/2 .. S-1 in increasing order, one
 * key column chosen uniformly among the columns j < r not yet evicted is evicted at r
 * (LTS[j] = r: positions >= r no longer see j). Columns never chosen keep LTS = S.
 */
static FMErrorCode build_random_eviction(FMMask m)
{
  const int Sq = m->seqlen_q, Sk = m->seqlen_k, half = Sk / 2;
  const int64_t off = (int64_t)Sk - Sq;
  const int ng = (int)FM_MASK_NG(m);
  int *pools, nth = 1;
  m->causal = 1; m->present = FM_BOUND_LTS;
  /* the (sample, head) rows are independent streams: one thread each, its own pool (32 heads
     at 32K keys took 2.3 ms on one thread), where there is enough work to pay the threads */
  nth = FMMaskThreads_Private(m, (size_t)ng * Sk, ng);
  FMCall(FMMalloc((size_t)nth * (half + 1), &pools));
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
  for (int g = 0; g < ng; g++) {
    FMRng r;
    int npool = 0, h = g % m->mask_heads, smp = g / m->mask_heads;
    int32_t *lts = m->bnd[0] + (size_t)g * Sk;
#ifdef _OPENMP
    int *pool = pools + (size_t)omp_get_thread_num() * (half + 1);
#else
    int *pool = pools;
#endif
    rng_init(&r, m->seed + (unsigned long)smp, (uint64_t)RNG_EVICT + (uint64_t)h);
    for (int j = 0; j < half; j++) pool[npool++] = j;
    for (int row = half; row < Sk; row++) {
      int k, j;
      if (row > half) pool[npool++] = row - 1;
      if (npool == 0) continue;
      k = rng_int(&r, 0, npool - 1);
      j = pool[k];
      pool[k] = pool[--npool];
      lts[j] = rowb(row, off, Sq);
    }
  }
  free(pools);
  return FM_SUCCESS;
}

/* Type "bounds": copy the user's vectors (the same set on every row, every (sample, head) set). */
static FMErrorCode build_user_bounds(FMMask m)
{
  const int H = m->mask_heads, Sk = m->seqlen_k;
  const size_t G = FM_MASK_NG(m);
  int bits = -1;
  static const char *const vname[4] = {"lts", "lte", "uts", "ute"};
  FMCheck(m->user_head_set, MPI_COMM_SELF, FM_ERR_ORDER,
          "Mask type \"bounds\" needs FMMaskSetBounds() for every head 0..%d before FMMaskSetUp(); none was set", H - 1);
  for (size_t g = 0; g < G; g++) {
    int hb = m->user_head_set[g], h = (int)(g % (size_t)H), smp = (int)(g / (size_t)H);
    FMCheck(hb, MPI_COMM_SELF, FM_ERR_ORDER,
            "Mask type \"bounds\": no bounds were set for sample %d, head %d; call FMMaskSetBounds() for every head 0..%d "
            "(or FMMaskSetSampleBounds() for every sample 0..%d and head, or FMMaskSetAllBounds())", smp, h, H - 1, m->mask_batch - 1);
    hb &= 0xF;
    if (bits < 0) bits = hb;
    if (hb != bits) {
      char a[32] = "", b[32] = "";
      for (int v = 0; v < 4; v++) {
        if (hb & (1 << v)) { strcat(a, a[0] ? "," : ""); strcat(a, vname[v]); }
        if (bits & (1 << v)) { strcat(b, b[0] ? "," : ""); strcat(b, vname[v]); }
      }
      FMRaise(MPI_COMM_SELF, FM_ERR_ARG_INCOMP,
              "FMMaskSetBounds gave sample %d, head %d the vectors {%s} but sample 0, head 0 the vectors {%s}; every head needs the same set",
              smp, h, a, b);
    }
  }
  m->present = bits;
  m->causal = m->user_causal;
  {
    const int32_t *src[4];
    for (int v = 0; v < 4; v++) src[v] = (bits & (1 << v)) ? m->user[v] : NULL;
    FMMaskCopyBounds_Private(m->bnd, src, G * Sk, FMMaskThreads_Private(m, G * Sk, 0));
  }
  return FM_SUCCESS;
}

/* The four vectors in default form; a re-SetUp whose bounds fit keeps its arrays (fresh ones of
   a large mask cost a page fault per 4 KiB every step), and a vector the last build left at its
   defaults for these sizes (m->bnd_default) is not written again (random eviction at 32K with
   32 heads: three of four 4 MB vectors), nor is one the build overwrites in every row (the bits
   of full: type "bounds" copies the user's vectors whole). m->bnd_default is 0 on return, until
   the build ends. */
static FMErrorCode alloc_default_bounds(FMMask m, int full)
{
  const size_t n = FM_MASK_NG(m) * m->seqlen_k;
  const int32_t Sq = m->seqlen_q;
  int keep = m->bnd_default_n >= n ? m->bnd_default : 0;
  if (m->bnd_default_sq != Sq) keep &= FM_BOUND_UTS | FM_BOUND_UTE; /* the lower defaults are seqlen_q */
  m->bnd_default = 0;
  if (n > m->bnd_cap) {
    m->bnd_cap = 0;
    keep = 0;
    for (int v = 0; v < 4; v++) {
      FMFree(m->bnd[v]);
      FMCall(FMMalloc(n, &m->bnd[v]));
    }
    m->bnd_cap = n;
  }
  const int nth = FMMaskThreads_Private(m, n, 0);
  (void)nth; /* without OpenMP */
  for (int v = 0; v < 4; v++) {
    int32_t *b = m->bnd[v];
    const int32_t x = v < 2 ? Sq : 0;
    if (((keep | full) >> v) & 1) continue;
#pragma omp parallel for simd num_threads(nth) schedule(static) if (parallel : nth > 1)
    for (size_t i = 0; i < n; i++) b[i] = x;
  }
  return FM_SUCCESS;
}

FMErrorCode FMMaskBuild_Private(FMMask m)
{
  int t, whole;
  FMValidHeader(m, FM_CLASSID_MASK, 1);
  FMCheck(m->seqlen_q > 0 && m->seqlen_k > 0 && m->mask_heads > 0, MPI_COMM_SELF, FM_ERR_ORDER,
          "Must call FMMaskSetSizes() (or give -fm_mask_seqlen) before FMMaskSetUp()");
  t = FMMaskTypeIndex_Private(m->hdr.type_name);
  FMCheck(t >= 0, MPI_COMM_SELF, FM_ERR_LIB, "Mask has unknown type \"%s\"", m->hdr.type_name ? m->hdr.type_name : "(null)");
  type_bits(t, NULL, NULL, &whole);
  FMCall(alloc_default_bounds(m, t == FM_MT_BOUNDS && m->user_present > 0 ? m->user_present & 15 : whole));
  if (t == FM_MT_BOUNDS) {
    FMCall(build_user_bounds(m));
  } else if (t == FM_MT_RANDOMEVICTION) {
    FMCall(build_random_eviction(m));
  } else {
    /* head 0 of each sample from that sample's parameters (its own seed), copied to the other
       heads: the parameters resolved (and checked) in sample order, the samples then built on
       the context's threads (a mask batch of 16 at 8K: 2^17 entries) */
    const int mb = m->mask_batch, nth = FMMaskThreads_Private(m, FM_MASK_NG(m) * (size_t)m->seqlen_k, mb);
    FMMaskParams *ps = NULL;
    FMErrorCode ierr = FM_SUCCESS, berr = FM_SUCCESS;
    type_bits(t, &m->causal, &m->present, NULL);
    FMCall(FMCalloc(mb, &ps));
    for (int smp = 0; smp < mb && !ierr; smp++) ierr = FMMaskGetSampleParams_Private(m, smp, &ps[smp]);
    if (!ierr) {
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
      for (int smp = 0; smp < mb; smp++) {
        const size_t g0 = (size_t)smp * m->mask_heads;
        const FMErrorCode e = build_head0(m, t, &ps[smp], g0);
        if (e) {
#pragma omp critical(fm_mask_build)
          berr = berr ? berr : e;
          continue;
        }
        for (int h = 1; h < m->mask_heads; h++)
          for (int v = 0; v < 4; v++)
            if ((m->present >> v) & 1) /* the others are at their defaults everywhere */
              memcpy(m->bnd[v] + (g0 + h) * m->seqlen_k, m->bnd[v] + g0 * m->seqlen_k, sizeof(int32_t) * (size_t)m->seqlen_k);
      }
    }
    for (int smp = 0; smp < mb; smp++) FMMaskParamsFree_Private(&ps[smp]);
    free(ps);
    FMCall(ierr);
    FMCheck(!berr, MPI_COMM_SELF, berr, "Building the mask's bounds failed (error %d)", (int)berr);
  }
  /* what the builders did not write keeps its defaults (Normalize keeps them too) */
  m->bnd_default = ~m->present & 15;
  m->bnd_default_sq = m->seqlen_q;
  m->bnd_default_n = FM_MASK_NG(m) * m->seqlen_k;
  return FM_SUCCESS;
}
