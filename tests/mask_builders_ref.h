/*
 * mask_builders_ref.h - the independent side of test_mask_builders (its only includer): the
 * twelve builder types with the bound vectors and causal flag each should give (doc/masks.md),
 * a mask's parameters in the reference's own terms (documents, segments, windows, prefixes,
 * spans) with their per-position tables, the per-element definition of each type
 * (ref_visible, doc/format.md section 3), the library's bound rule (lib_masked) and random
 * parameters. Header-only (static functions).
 */
#ifndef MASK_BUILDERS_REF_H
#define MASK_BUILDERS_REF_H
#include "fmtest.h"
#include <flashmask/private/fmimpl.h>
#include <limits.h>

enum { T_FULL, T_CAUSAL, T_SW, T_CDOC, T_DOC, T_SQ, T_GSW, T_CBW, T_PLD, T_PLC, T_QK, T_RE, T_N };
static const char *tname[T_N]; /* the builders' names, the first T_N of FMMaskTypeList (main) */
/* expected vectors and causal flag per type (doc/masks.md) */
static const int tpresent[T_N] = {0, 0, FM_BOUND_LTS, FM_BOUND_LTS, FM_BOUND_LTS | FM_BOUND_UTE, FM_BOUND_LTS, 15,
                                  FM_BOUND_LTS | FM_BOUND_LTE, FM_BOUND_LTS | FM_BOUND_UTE, FM_BOUND_LTS | FM_BOUND_UTE,
                                  FM_BOUND_LTS | FM_BOUND_LTE, FM_BOUND_LTS};
static const int tcausal[T_N] = {0, 1, 1, 1, 0, 1, 0, 1, 0, 0, 1, 1};

#define MAXD 64
#define MAXSEG 512
#define MAXS 16

/* Parameters of a mask in the reference's own terms, plus per-position tables. */
typedef struct {
  int Sq, Sk;
  int ndocs, docs[MAXD];
  int nseg[MAXD], seglen[MAXSEG];
  int wl, wr, G, P;
  int prefix[MAXD];
  int nspans, sstart[MAXS], slen[MAXS];
  int *docid, *segid, *isq, *dstart; /* per key position */
} Ref;

static void ref_tables(Ref *R)
{
  int S = R->Sk;
  R->docid = realloc(R->docid, sizeof(int) * S);
  R->segid = realloc(R->segid, sizeof(int) * S);
  R->isq = realloc(R->isq, sizeof(int) * S);
  R->dstart = realloc(R->dstart, sizeof(int) * S);
  /* walk the positions: document d owns docs[d] consecutive positions */
  int d = 0, left = R->docs[0], start = 0, seg = 0, segleft = R->seglen[0], firstseg = 0;
  for (int x = 0; x < S; x++) {
    while (left == 0) { start = x; left = R->docs[++d]; }
    R->docid[x] = d;
    R->dstart[x] = start;
    left--;
  }
  /* segments: a global running index; the first segment of each document is its question */
  for (int x = 0, dd = 0, k = 0; x < S; x++) {
    while (segleft == 0) {
      seg++; k++;
      if (k == R->nseg[dd]) { dd++; k = 0; firstseg = seg; }
      segleft = R->seglen[seg];
    }
    R->segid[x] = seg;
    R->isq[x] = seg == firstseg;
    segleft--;
  }
}

/* Whether query position p (may be negative) may attend key j, from the definitions. */
static int ref_visible(int t, const Ref *R, int p, int j)
{
  switch (t) {
  case T_FULL: return 1;
  case T_CAUSAL: return j <= p;
  case T_SW: return j <= p && p - j < R->wl;
  case T_CDOC: return j <= p && R->docid[p] == R->docid[j];
  case T_DOC: return p >= 0 && R->docid[p] == R->docid[j];
  case T_SQ: return j <= p && R->docid[p] == R->docid[j] && (R->isq[j] || R->segid[p] == R->segid[j]);
  case T_GSW: return j < R->G || p < R->G || (p - j <= R->wl && j - p <= R->wr);
  case T_CBW: return j <= p && (R->docid[p] == R->docid[j] || R->docid[p] == R->ndocs - 1);
  case T_PLD: return p >= 0 && R->docid[p] == R->docid[j] && (j - R->dstart[j] < R->prefix[R->docid[j]] || j <= p);
  case T_PLC: return j < R->P || j <= p;
  case T_QK:
    if (j > p) return 0;
    for (int s = 0; s < R->nspans; s++)
      if (R->sstart[s] <= j && j < R->sstart[s] + R->slen[s] && p < R->sstart[s] + R->slen[s]) return 0;
    return 1;
  }
  return -1;
}

static int lib_masked(const int32_t *b[4], int causal, int off, int i, int j)
{
  return (b[0][j] <= i && i < b[1][j]) || (b[2][j] <= i && i < b[3][j]) || (causal && j > i + off);
}

/* Random document lengths summing to S, each >= minlen: weights then rounding. */
static void rand_docs(uint64_t *rs, int S, int maxd, int minlen, int *nd, int *docs)
{
  int n = 1 + (int)(fmt_next(rs) % (uint64_t)maxd), rem, used = 0;
  double w[MAXD], sw = 0;
  if (n * minlen > S) n = S / minlen > 0 ? S / minlen : 1;
  rem = S - n * minlen;
  for (int d = 0; d < n; d++) { w[d] = 0.05 + fabs(fmt_uniform(rs)); sw += w[d]; }
  for (int d = 0; d < n; d++) {
    int extra = (int)(w[d] / sw * rem);
    docs[d] = minlen + extra;
    used += docs[d];
  }
  docs[n - 1] += S - used;
  *nd = n;
}

/* Random explicit parameters for sizes Sq x Sk. */
static void rand_params(uint64_t *rs, Ref *R, int Sq, int Sk)
{
  int o = 0;
  R->Sq = Sq; R->Sk = Sk;
  rand_docs(rs, Sk, 8, 8, &R->ndocs, R->docs);
  for (int d = 0; d < R->ndocs; d++) {
    int ns = 2 + (int)(fmt_next(rs) % 4), L = R->docs[d], used = 0;
    R->nseg[d] = ns;
    for (int s = 0; s < ns; s++) {
      int len = s == ns - 1 ? L - used : 1 + (int)(fmt_next(rs) % (uint64_t)((L - used) - (ns - 1 - s)));
      /* keep room for the remaining segments: each needs >= 1 */
      if (s < ns - 1 && len > L - used - (ns - 1 - s)) len = L - used - (ns - 1 - s);
      R->seglen[o++] = len;
      used += len;
    }
    R->prefix[d] = (int)(fmt_next(rs) % (uint64_t)(L + 1));
  }
  R->wl = 1 + (int)(fmt_next(rs) % (uint64_t)(Sk / 4 + 1));
  R->wr = (int)(fmt_next(rs) % (uint64_t)(Sk / 4 + 1));
  { /* now and then windows at the edges: none to the left (0), longer than the keys, the largest int */
    static const int edge[4] = {0, 1, -3, INT_MAX};
    const uint64_t x = fmt_next(rs);
    if (x % 4 == 0) R->wl = edge[(x >> 2) % 4] == -3 ? Sk + 3 : edge[(x >> 2) % 4];
    if (x % 8 == 1) R->wr = edge[(x >> 4) % 4] == -3 ? Sk + 3 : edge[(x >> 4) % 4];
  }
  R->G = fmt_next(rs) % 4 == 0 ? 0 : (int)(fmt_next(rs) % 41); /* no global tokens a quarter of the time */
  if (R->G > Sk) R->G = Sk;
  R->P = (int)(fmt_next(rs) % (uint64_t)(Sk + 1));
  R->nspans = 1 + (int)(fmt_next(rs) % 5);
  for (int s = 0; s < R->nspans; s++) {
    R->sstart[s] = (int)(fmt_next(rs) % (uint64_t)Sk);
    int maxl = Sk - R->sstart[s] < Sk / 5 ? Sk - R->sstart[s] : Sk / 5;
    R->slen[s] = (int)(fmt_next(rs) % (uint64_t)(maxl + 1));
  }
  ref_tables(R);
}

#endif /* MASK_BUILDERS_REF_H */
