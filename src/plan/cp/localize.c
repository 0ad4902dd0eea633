/*
 * localize.c - communication-free mask localization (flashmask-format.md section 4).
 * A rank owns query chunks c_0 < c_1 < ...; its local rows are their rows in ascending
 * global order. Because every bound is a row index along the query axis, a global bound x
 * becomes the local bound "number of local rows with global index < x", so an interval
 * [s, e) of masked global rows becomes the interval [local(s), local(e)) of masked local rows.
 */
#include <flashmask/private/fmdist.h>
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

/* FMDistLocalizeColumns - see fmdist.h (cols NULL: every column, in order; n = seqlen_k). */
FMErrorCode FMDistLocalizeColumns(const FMMaskDesc *m, const FMDistChunks *ch, int nown, const int *chunks, int n, const int *cols,
                                  FMDistLocalMask *lm)
{
  const int Sq = m->seqlen_q, Sk = m->seqlen_k, off = m->seqlen_k - m->seqlen_q, rows = FMDistMaskRows(m);
  const size_t N = (size_t)rows * n;
  int *cnt = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  memset(lm, 0, sizeof(*lm));
  FMCheck(Sq == ch->seqlen_q && Sk == ch->seqlen_k, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "Mask is %d x %d but the chunks cut %d x %d", Sq, Sk,
          ch->seqlen_q, ch->seqlen_k);
  /* cnt[x] = number of local rows < x, for x = 0..Sq: the localization of every bound in O(1) */
  FMCall(FMCalloc((size_t)Sq + 1, &cnt));
  for (int b = 0; b < nown; b++) {
    int r0, r1;
    FMDistChunkRows(ch, chunks[b], &r0, &r1);
    for (int i = r0; i < r1; i++) cnt[i + 1] = 1;
  }
  for (int x = 0; x < Sq; x++) cnt[x + 1] += cnt[x];
  lm->nlocal = cnt[Sq];
  lm->mask_heads = rows;
  lm->seqlen_k = n;
  for (int v = 0; v < 4 && !ierr; v++) ierr = FMMalloc(N + 1, &lm->bnd[v]);
  if (!ierr && m->causal) ierr = FMMalloc((size_t)n + 1, &lm->cut);
  for (int v = 0; v < 4 && !ierr; v++)
    for (int h = 0; h < rows; h++) {
      const int32_t *src = m->bnd[v] + (size_t)h * Sk;
      int32_t *dst = lm->bnd[v] + (size_t)h * n;
      for (int x = 0; x < n; x++) {
        int b = src[cols ? cols[x] : x];
        dst[x] = cnt[b < 0 ? 0 : b > Sq ? Sq : b];
      }
    }
  if (!ierr && m->causal)
    for (int x = 0; x < n; x++) {
      long g = (long)(cols ? cols[x] : x) - off; /* rows i < j - off are right of the diagonal */
      lm->cut[x] = cnt[g < 0 ? 0 : g > Sq ? Sq : g];
    }
  free(cnt);
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
