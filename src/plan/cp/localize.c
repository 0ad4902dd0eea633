/*
 * localize.c - communication-free mask localization (doc/format.md section 5).
 * A rank owns query chunks c_0 < c_1 < ...; its local rows are their rows in ascending
 * global order. Because every bound is a row index along the query axis, a global bound x
 * becomes the local bound "number of local rows with global index < x", so an interval
 * [s, e) of masked global rows becomes the interval [local(s), local(e)) of masked local rows.
 */
#include <flashmask/private/fmdist.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

int FMDistLocalizeBound(const FMDistChunks *ch, int nown, const int *chunks, int x)
{
  int l = 0;
  for (int b = 0; b < nown; b++) {
    int r0, r1, t;
    FMDistChunkRows(ch, chunks[b], &r0, &r1);
    t = x - r0;                 /* shift */
    if (t < 0) t = 0;           /* clip below */
    if (t > r1 - r0) t = r1 - r0; /* clip above */
    l += t;
  }
  return l;
}

/*
 * local(x) for the rank's chunks: a table cnt[x] (O(seqlen_q) to build) when the rank owns many
 * chunks, else a branch-free search over its chunks' first rows (three steps for the usual four
 * chunks per rank, none within the chunk found last, and no table to build or to miss in the
 * cache).
 */
#define FM_LOCALIZE_SEARCH_MAX 32
typedef struct {
  int Sq, nown, *cnt, step; /* step: the search's first step, half the power of two above nown */
  int r0[2 * FM_LOCALIZE_SEARCH_MAX], len[FM_LOCALIZE_SEARCH_MAX], pre[FM_LOCALIZE_SEARCH_MAX];
} Local;

static int cmp_int(const void *a, const void *b) { int x = *(const int *)a, y = *(const int *)b; return (x > y) - (x < y); }

/* local(x); *seg carries the number of chunks starting at or before the last x between calls
   (0 at first), so that a run of nearby x (consecutive columns, sorted bounds) skips the search */
static inline int local_of(const Local *L, long x, int *seg)
{
  int lo = *seg;
  if (x < 0) x = 0;
  if (x > L->Sq) x = L->Sq;
  if (L->cnt) return L->cnt[x];
  if (!((lo == 0 || L->r0[lo - 1] <= x) && x < L->r0[lo])) {
    /* lo = the number of chunks starting at or before x: log2 of a power of two above nown
       steps (the slots past nown start at INT_MAX), with no branch on the data */
    lo = 0;
    for (int step = L->step; step > 0; step /= 2) lo += L->r0[lo + step - 1] <= x ? step : 0;
    *seg = lo;
  }
  if (lo == 0) return 0;
  lo--;
  return L->pre[lo] + (x - L->r0[lo] < L->len[lo] ? (int)(x - L->r0[lo]) : L->len[lo]);
}

static FMErrorCode local_init(const FMDistChunks *ch, int nown, const int *chunks, Local *L, int *nlocal)
{
  int c[FM_LOCALIZE_SEARCH_MAX], r1;
  L->Sq = ch->seqlen_q; L->nown = nown; L->cnt = NULL;
  if (nown > FM_LOCALIZE_SEARCH_MAX) { /* cnt[x] = number of local rows < x, for x = 0..Sq */
    FMCall(FMCalloc((size_t)L->Sq + 1, &L->cnt));
    for (int b = 0; b < nown; b++) {
      int r0;
      FMDistChunkRows(ch, chunks[b], &r0, &r1);
      for (int i = r0; i < r1; i++) L->cnt[i + 1] = 1;
    }
    for (int x = 0; x < L->Sq; x++) L->cnt[x + 1] += L->cnt[x];
    *nlocal = L->cnt[L->Sq];
    return FM_SUCCESS;
  }
  memcpy(c, chunks, sizeof(int) * (size_t)nown);
  qsort(c, (size_t)nown, sizeof(int), cmp_int); /* chunk order is row order */
  for (int b = nown; b < 2 * FM_LOCALIZE_SEARCH_MAX; b++) L->r0[b] = INT_MAX; /* past every x: local_of's search never stops there */
  for (L->step = 1; 2 * L->step <= nown; L->step *= 2) {} /* the search reaches lo <= 2 step - 1 >= nown */
  *nlocal = 0;
  for (int b = 0; b < nown; b++) {
    FMDistChunkRows(ch, c[b], &L->r0[b], &r1);
    L->len[b] = r1 - L->r0[b];
    L->pre[b] = *nlocal;
    *nlocal += L->len[b];
  }
  return FM_SUCCESS;
}

/* FMDistLocalizeColumns - see fmdist.h (cols NULL: every column, in order; n = seqlen_k). */
FMErrorCode FMDistLocalizeColumns(const FMMaskDesc *m, const FMDistChunks *ch, int nown, const int *chunks, int n, const int *cols,
                                  FMDistLocalMask *lm)
{
  const int Sq = m->seqlen_q, Sk = m->seqlen_k, off = m->seqlen_k - m->seqlen_q, rows = FMDistMaskRows(m);
  const size_t N = (size_t)rows * n;
  Local L;
  FMErrorCode ierr = FM_SUCCESS;
  memset(lm, 0, sizeof(*lm));
  FMCheck(Sq == ch->seqlen_q && Sk == ch->seqlen_k, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "Mask is %d x %d but the chunks cut %d x %d", Sq, Sk,
          ch->seqlen_q, ch->seqlen_k);
  FMCall(local_init(ch, nown, chunks, &L, &lm->nlocal));
  lm->mask_heads = rows;
  lm->seqlen_k = n;
  /* a vector the mask does not carry stays NULL: its localized entries are the defaults
     (FMDistLocalBound), with no array to fill (at 1M keys, 12 MB of fresh pages a step) */
  for (int v = 0; v < 4 && !ierr; v++)
    if ((m->present >> v) & 1) ierr = FMMalloc(N + 1, &lm->bnd[v]);
  if (!ierr && m->causal) ierr = FMMalloc((size_t)n + 1, &lm->cut);
  for (int v = 0; v < 4 && !ierr; v++)
    for (int h = 0; h < rows && lm->bnd[v]; h++) {
      const int32_t *src = m->bnd[v] + (size_t)h * Sk;
      int32_t *dst = lm->bnd[v] + (size_t)h * n;
      int32_t px = -1, pv = 0; /* runs of equal bounds (a document's columns) are localized once */
      int seg = 0;
      for (int x = 0; x < n; x++) {
        const int32_t b = src[cols ? cols[x] : x];
        if (b != px) { pv = local_of(&L, b, &seg); px = b; }
        dst[x] = pv;
      }
    }
  if (!ierr && m->causal) {
    int seg = 0; /* runs of consecutive columns: the search only where a chunk boundary is crossed */
    for (int x = 0; x < n; x++) lm->cut[x] = local_of(&L, (long)(cols ? cols[x] : x) - off, &seg); /* rows i < j - off are right of the diagonal */
  }
  free(L.cnt);
  if (ierr) (void)FMDistLocalMaskDestroy(lm);
  FMCall(ierr);
  return FM_SUCCESS;
}

FMErrorCode FMDistLocalize(const FMMaskDesc *m, const FMDistChunks *ch, int nown, const int *chunks, FMDistLocalMask *lm)
{
  FMCall(FMDistLocalizeColumns(m, ch, nown, chunks, m->seqlen_k, NULL, lm));
  return FM_SUCCESS;
}

FMErrorCode FMDistLocalMaskDestroy(FMDistLocalMask *lm)
{
  if (!lm) return FM_SUCCESS;
  for (int v = 0; v < 4; v++) FMFree(lm->bnd[v]);
  FMFree(lm->cut);
  return FM_SUCCESS;
}
