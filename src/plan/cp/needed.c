/*
 * needed.c - the K/V chunks a rank's queries can see, from its localized bounds. A chunk
 * none of whose columns is visible to any local row (under any mask head) is never
 * transferred.
 */
#include <flashmask/private/fmdist.h>
#include <stdlib.h>
#include <string.h>

int FMDistColumnVisible(const FMDistLocalMask *lm, int h, int j)
{
  size_t o = (size_t)h * lm->seqlen_k + j;
  int s[3], e[3], pos = 0, changed = 1;
  s[0] = 0; e[0] = lm->cut ? lm->cut[j] : 0;
  s[1] = lm->bnd[0][o]; e[1] = lm->bnd[1][o];
  s[2] = lm->bnd[2][o]; e[2] = lm->bnd[3][o];
  /* advance the covered prefix [0, pos) through the three masked intervals */
  while (changed && pos < lm->nlocal) {
    changed = 0;
    for (int t = 0; t < 3; t++)
      if (s[t] <= pos && e[t] > pos) { pos = e[t]; changed = 1; }
  }
  return pos < lm->nlocal;
}

FMErrorCode FMDistNeeded(const FMDistLocalMask *lm, const FMDistChunks *ch, int prune, unsigned char *needed)
{
  for (int c = 0; c < ch->nchunks; c++) {
    int k0, k1, need = 0;
    FMDistChunkKeys(ch, c, &k0, &k1);
    if (lm->nlocal > 0 && k1 > k0) {
      if (!prune) need = 1;
      for (int h = 0; h < lm->mask_heads && !need; h++)
        for (int j = k0; j < k1 && !need; j++) need = FMDistColumnVisible(lm, h, j);
    }
    needed[c] = (unsigned char)need;
  }
  return FM_SUCCESS;
}

/*
 * The same test as FMDistLocalize + FMDistNeeded without materializing the localized
 * vectors: cnt[x] (number of local rows < x) localizes each bound on the fly.
 */
static void needed_direct(const FMMaskDesc *m, const FMDistChunks *ch, const int *cnt, int prune, unsigned char *needed)
{
  int Sq = m->seqlen_q, Sk = m->seqlen_k, off = Sk - Sq, n = cnt[Sq];
  for (int c = 0; c < ch->nchunks; c++) {
    int k0, k1, need = 0;
    FMDistChunkKeys(ch, c, &k0, &k1);
    if (n > 0 && k1 > k0) {
      if (!prune) need = 1;
      for (int h = 0; h < m->mask_heads && !need; h++)
        for (int j = k0; j < k1 && !need; j++) {
          size_t o = (size_t)h * Sk + j;
          int s[3], e[3], pos = 0, changed = 1;
          long g = (long)j - off;
          for (int v = 0; v < 4; v++) {
            int x = m->bnd[v][o];
            x = x < 0 ? 0 : x > Sq ? Sq : x;
            if (v < 2) { if (v == 0) s[1] = cnt[x]; else e[1] = cnt[x]; }
            else { if (v == 2) s[2] = cnt[x]; else e[2] = cnt[x]; }
          }
          g = g < 0 ? 0 : g > Sq ? Sq : g;
          s[0] = 0; e[0] = m->causal ? cnt[g] : 0;
          while (changed && pos < n) {
            changed = 0;
            for (int t = 0; t < 3; t++)
              if (s[t] <= pos && e[t] > pos) { pos = e[t]; changed = 1; }
          }
          need = pos < n;
        }
    }
    needed[c] = (unsigned char)need;
  }
}

FMErrorCode FMDistNeededAll(const FMMaskDesc *m, const FMDistChunks *ch, const FMDistPartition *part, int prune,
                            unsigned char *needed)
{
  int Sq = m->seqlen_q, *cnt;
  FMCheck(Sq == ch->seqlen_q && m->seqlen_k == ch->seqlen_k, MPI_COMM_SELF, FM_ERR_ARG_SIZ, "Mask is %d x %d but the chunks cut %d x %d",
          Sq, m->seqlen_k, ch->seqlen_q, ch->seqlen_k);
  FMCall(FMMalloc((size_t)Sq + 1, &cnt));
  for (int r = 0; r < part->nranks; r++) {
    memset(cnt, 0, sizeof(int) * ((size_t)Sq + 1));
    for (int b = part->rstart[r]; b < part->rstart[r + 1]; b++) {
      int r0, r1;
      FMDistChunkRows(ch, part->rchunks[b], &r0, &r1);
      for (int i = r0; i < r1; i++) cnt[i + 1] = 1;
    }
    for (int x = 0; x < Sq; x++) cnt[x + 1] += cnt[x];
    needed_direct(m, ch, cnt, prune, needed + (size_t)r * ch->nchunks);
  }
  free(cnt);
  return FM_SUCCESS;
}

double FMDistChunkBytes(const FMDistChunks *ch, int c, int batch, int heads_kv, int head_dim, size_t elsize)
{
  int k0, k1;
  FMDistChunkKeys(ch, c, &k0, &k1);
  return 2.0 * batch * (double)(k1 - k0) * heads_kv * head_dim * (double)elsize;
}
