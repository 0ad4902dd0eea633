/*
 * bounds.c - the batch dimension of a mask (FMMaskSetBatch) and the user's bounds of type
 * "bounds" per (sample, head): FMMaskSetBounds (every sample), FMMaskSetSampleBounds (one),
 * and the getters FMMaskGetBounds / FMMaskGetSampleBounds. Rows of the bound vectors are
 * g = sample * mask_heads + head (FM_MASK_NG rows in all).
 */
#include "maskimpl.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *const bound_names[4] = {"lts", "lte", "uts", "ute"};

FMErrorCode FMMaskCheckBatch_Private(int mask_batch, int mask_heads, int seqlen_k, const char *what)
{
  const int64_t n = (int64_t)mask_batch * mask_heads * (seqlen_k > 0 ? seqlen_k : 0);
  FMCheck(mask_batch >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "%s (mask_batch) is %d; expected >= 1 (1: shared by every sample)", what,
          mask_batch);
  FMCheck(n <= FM_MASK_MAX_ENTRIES, MPI_COMM_SELF, FM_ERR_ARG_SIZ,
          "%s: mask_batch %d times mask_heads %d times seqlen_k %d is %lld bound columns; expected at most FM_MASK_MAX_ENTRIES = %d", what,
          mask_batch, mask_heads, seqlen_k, (long long)n, FM_MASK_MAX_ENTRIES);
  return FM_SUCCESS;
}

/* FMMaskSetBatch - see flashmask.h. Bounds given before are discarded when the batch changes. */
FMErrorCode FMMaskSetBatch(FMMask mask, int mask_batch)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCall(FMMaskCheckBatch_Private(mask_batch, mask->mask_heads, mask->seqlen_k, "Argument 2"));
  if (mask_batch != mask->mask_batch) {
    if (mask->user_head_set) FMMaskFreeUserBounds_Private(mask);
    FMMaskFreeSampleDocuments_Private(mask);               /* its arrays have the old batch's length */
    mask->hdr.setupcalled = mask->summary_valid = 0; /* the summaries have the old rows */
  }
  mask->mask_batch = mask_batch;
  return FM_SUCCESS;
}

/* FMMaskGetBatch - see flashmask.h. */
FMErrorCode FMMaskGetBatch(FMMask mask, int *mask_batch)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMValidPointer(mask_batch, 2);
  *mask_batch = mask->mask_batch;
  return FM_SUCCESS;
}

/*
 * Whether one head's vectors break a rule (0 <= x <= Sq, start <= end, a missing vector taking
 * its default: lte = Sq, uts = 0), in branch-free passes over the given vectors only (a negative
 * bound is a large unsigned one). check_vectors scans again only when one does.
 */
static int vectors_bad(const int32_t *const in[4], int Sq, int Sk)
{
  const uint32_t usq = (uint32_t)Sq;
  int bad = 0;
  for (int v = 0; v < 4; v++) {
    const int32_t *x = in[v];
    if (!x) continue;
#pragma omp simd reduction(| : bad)
    for (int j = 0; j < Sk; j++) bad |= (uint32_t)x[j] > usq;
  }
  if (in[0] && in[1]) {
    const int32_t *s = in[0], *e = in[1];
#pragma omp simd reduction(| : bad)
    for (int j = 0; j < Sk; j++) bad |= s[j] > e[j];
  }
  if (in[2] && in[3]) {
    const int32_t *s = in[2], *e = in[3];
#pragma omp simd reduction(| : bad)
    for (int j = 0; j < Sk; j++) bad |= s[j] > e[j];
  }
  return bad;
}

/* The vectors given to one call, as bits (FM_BOUND_* order); lte without lts, or uts without
   ute, is refused (no default start). a is the argument number of lts. */
static FMErrorCode given_vectors(const int32_t *const in[4], int a, int *bits)
{
  FMCheck(!(in[1] && !in[0]), MPI_COMM_SELF, FM_ERR_ARG_INCOMP, "Argument %d (lte) is given without argument %d (lts); give lts too", a + 1,
          a);
  FMCheck(!(in[2] && !in[3]), MPI_COMM_SELF, FM_ERR_ARG_INCOMP, "Argument %d (uts) is given without argument %d (ute); give ute too", a + 2,
          a + 3);
  *bits = 0;
  for (int v = 0; v < 4; v++) *bits |= in[v] ? 1 << v : 0;
  return FM_SUCCESS;
}

/* Check one head's given vectors (given_vectors passed); a is the argument number of lts; where:
   "" or the (sample, head) the message names (FMMaskSetAllBounds). */
static FMErrorCode check_vectors(FMMask mask, const int32_t *const in[4], int a, const char *where)
{
  const int Sq = mask->seqlen_q, Sk = mask->seqlen_k;
  if (!vectors_bad(in, Sq, Sk)) return FM_SUCCESS;
  /* a violation: find the first, in the order of the messages */
  for (int v = 0; v < 4; v++) {
    if (!in[v]) continue;
    for (int j = 0; j < Sk; j++)
      FMCheck(in[v][j] >= 0 && in[v][j] <= Sq, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
              "Argument %d (%s): %s%s[%d] = %d is out of range; expected 0 <= %s <= seqlen_q = %d", v + a, bound_names[v], where, bound_names[v], j,
              (int)in[v][j], bound_names[v], Sq);
  }
  for (int j = 0; j < Sk; j++) {
    int32_t s = in[0] ? in[0][j] : Sq, e = in[1] ? in[1][j] : Sq;
    FMCheck(s <= e, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
            "Argument %d (lts): %slts[%d] = %d is greater than lte[%d] = %d; expected start <= end", a, where, j, (int)s, j, (int)e);
    s = in[2] ? in[2][j] : 0;
    e = in[3] ? in[3][j] : 0;
    FMCheck(s <= e, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
            "Argument %d (uts): %suts[%d] = %d is greater than ute[%d] = %d; expected start <= end", a + 2, where, j, (int)s, j, (int)e);
  }
  return FM_SUCCESS;
}

/* Copy head's vectors into samples [s0, s1); a is the argument number of lts. */
static FMErrorCode set_bounds(FMMask mask, int s0, int s1, int head, const int32_t *const in[4], int a)
{
  const size_t G = FM_MASK_NG(mask), Sk = (size_t)mask->seqlen_k;
  int bits = 0;
  FMCheck(mask->seqlen_k > 0, MPI_COMM_SELF, FM_ERR_ORDER, "Must call FMMaskSetSizes() before FMMaskSetBounds()");
  FMCheck(head >= 0 && head < mask->mask_heads, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Argument %d (head) is %d; expected 0 <= head < mask_heads = %d", a - 1, head, mask->mask_heads);
  FMCall(given_vectors(in, a, &bits));
  FMCall(check_vectors(mask, in, a, ""));
  if (!mask->user_head_set) FMCall(FMCalloc(G, &mask->user_head_set));
  for (int v = 0; v < 4; v++) {
    if (!in[v]) continue;
    if (!mask->user[v]) FMCall(FMMalloc(G * Sk, &mask->user[v]));
    for (int s = s0; s < s1; s++) memcpy(mask->user[v] + ((size_t)s * mask->mask_heads + head) * Sk, in[v], sizeof(int32_t) * Sk);
  }
  for (int s = s0; s < s1; s++) mask->user_head_set[(size_t)s * mask->mask_heads + head] = (unsigned char)(0x10 | bits);
  mask->user_present = 0;
  for (size_t g = 0; g < G; g++) mask->user_present |= mask->user_head_set[g] & 0xF;
  mask->hdr.setupcalled = mask->summary_valid = 0;
  return FM_SUCCESS;
}

/*
 * FMMaskSetBounds - copy one head's user bounds into every sample (type "bounds"). Not
 *   collective. Needs FMMaskSetSizes (and FMMaskSetBatch, if any) first. Values are checked
 *   here (0 <= x <= seqlen_q, start <= end) and again at SetUp. lte without lts, or uts
 *   without ute, is refused (no default start). Setting a head again replaces it.
 */
FMErrorCode FMMaskSetBounds(FMMask mask, int head, const int32_t *lts, const int32_t *lte, const int32_t *uts, const int32_t *ute)
{
  const int32_t *const in[4] = {lts, lte, uts, ute};
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCall(set_bounds(mask, 0, mask->mask_batch, head, in, 3));
  return FM_SUCCESS;
}

/* FMMaskSetSampleBounds - the same for one sample (see flashmask.h). Not collective. */
FMErrorCode FMMaskSetSampleBounds(FMMask mask, int sample, int head, const int32_t *lts, const int32_t *lte, const int32_t *uts,
                                  const int32_t *ute)
{
  const int32_t *const in[4] = {lts, lte, uts, ute};
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCheck(sample >= 0 && sample < mask->mask_batch, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Argument 2 (sample) is %d; expected 0 <= sample < mask_batch = %d (FMMaskSetBatch)", sample, mask->mask_batch);
  FMCall(set_bounds(mask, sample, sample + 1, head, in, 4));
  return FM_SUCCESS;
}

/*
 * FMMaskSetAllBounds - every sample's and head's vectors from one array each (see fmmask.h).
 *   Not collective. The (sample, head) rows are checked on the context's threads; the first
 *   bad one in row order is checked again for its message, before anything is copied.
 */
FMErrorCode FMMaskSetAllBounds(FMMask mask, const int32_t *lts, const int32_t *lte, const int32_t *uts, const int32_t *ute)
{
  const int32_t *const in[4] = {lts, lte, uts, ute};
  int bits = 0, nth;
  long first, G;
  size_t Sk, n;
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCheck(mask->seqlen_k > 0, MPI_COMM_SELF, FM_ERR_ORDER, "Must call FMMaskSetSizes() before FMMaskSetAllBounds()");
  FMCall(given_vectors(in, 2, &bits));
  G = (long)FM_MASK_NG(mask);
  Sk = (size_t)mask->seqlen_k;
  n = (size_t)G * Sk;
  nth = FMMaskThreads_Private(mask, n, 0);
  first = G;
#pragma omp parallel for num_threads(nth) schedule(static) reduction(min : first) if (nth > 1)
  for (long g = 0; g < G; g++) {
    const int32_t *row[4];
    for (int v = 0; v < 4; v++) row[v] = in[v] ? in[v] + (size_t)g * Sk : NULL;
    if (g < first && vectors_bad(row, mask->seqlen_q, mask->seqlen_k)) first = g;
  }
  if (first < G) {
    const int32_t *row[4];
    char where[64];
    for (int v = 0; v < 4; v++) row[v] = in[v] ? in[v] + (size_t)first * Sk : NULL;
    snprintf(where, sizeof(where), "sample %ld, head %ld: ", first / mask->mask_heads, first % mask->mask_heads);
    FMCall(check_vectors(mask, row, 2, where));
  }
  if (!mask->user_head_set) FMCall(FMCalloc((size_t)G, &mask->user_head_set));
  for (int v = 0; v < 4; v++)
    if (in[v] && !mask->user[v]) FMCall(FMMalloc(n, &mask->user[v]));
  FMMaskCopyBounds_Private(mask->user, in, n, nth);
  memset(mask->user_head_set, 0x10 | bits, (size_t)G);
  mask->user_present = bits;
  mask->hdr.setupcalled = mask->summary_valid = 0;
  return FM_SUCCESS;
}

/*
 * FMMaskGetSampleBounds - borrowed pointers to the vectors of (sample, head) (after SetUp;
 *   valid until the next SetUp or Destroy). Not collective. Any output may be NULL.
 */
FMErrorCode FMMaskGetSampleBounds(FMMask mask, int sample, int head, const int32_t **lts, const int32_t **lte, const int32_t **uts,
                                  const int32_t **ute, int *present, FMBool *causal)
{
  const int32_t **out[4] = {lts, lte, uts, ute};
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCheckSetUp(mask, "FMMask");
  FMCheck(sample >= 0 && sample < mask->mask_batch, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Argument 2 (sample) is %d; expected 0 <= sample < mask_batch = %d", sample, mask->mask_batch);
  FMCheck(head >= 0 && head < mask->mask_heads, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Argument 3 (head) is %d; expected 0 <= head < mask_heads = %d", head, mask->mask_heads);
  for (int v = 0; v < 4; v++)
    if (out[v]) *out[v] = mask->bnd[v] + ((size_t)sample * mask->mask_heads + head) * mask->seqlen_k;
  if (present) *present = mask->present;
  if (causal) *causal = mask->causal ? FM_TRUE : FM_FALSE;
  return FM_SUCCESS;
}

/* FMMaskGetBounds - FMMaskGetSampleBounds of sample 0. Not collective. */
FMErrorCode FMMaskGetBounds(FMMask mask, int head, const int32_t **lts, const int32_t **lte, const int32_t **uts, const int32_t **ute,
                            int *present, FMBool *causal)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCheckSetUp(mask, "FMMask");
  FMCheck(head >= 0 && head < mask->mask_heads, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Argument 2 (head) is %d; expected 0 <= head < mask_heads = %d", head, mask->mask_heads);
  FMCall(FMMaskGetSampleBounds(mask, 0, head, lts, lte, uts, ute, present, causal));
  return FM_SUCCESS;
}
