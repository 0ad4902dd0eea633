/*
 * maskview.c - FMMaskView: the type, sizes, parameters, density and a picture of the tiles.
 */
#include "maskimpl.h"
#include <string.h>

static const char *const bound_names[4] = {"lts", "lte", "uts", "ute"};

/* Print up to max values of an int list on one line, "a b c ... (n in all)". */
static FMErrorCode print_list(MPI_Comm comm, FILE *fp, const char *label, int n, const int *x, const int *y)
{
  char line[640];
  size_t len = (size_t)snprintf(line, sizeof(line), "  %s:", label);
  const int max = 16;
  for (int k = 0; k < n && k < max && len < sizeof(line) - 40; k++) {
    if (y) len += (size_t)snprintf(line + len, sizeof(line) - len, " [%d,%d)", x[k], x[k] + y[k]);
    else len += (size_t)snprintf(line + len, sizeof(line) - len, " %d", x[k]);
  }
  if (n > max) snprintf(line + len, sizeof(line) - len, " ... (%d in all)", n);
  FMCall(FMPrintf(comm, fp, "%s\n", line));
  return FM_SUCCESS;
}

/* The builder parameters of FMMaskView (resolved: user values or the defaults). */
static FMErrorCode view_params(FMMask mask, MPI_Comm comm, FILE *fp)
{
  FMMaskParams p;
  char lab[64];
  FMErrorCode ierr = FM_SUCCESS;
  FMCall(FMMaskGetParams_Private(mask, &p));
  if (p.docs) {
    snprintf(lab, sizeof(lab), "%d documents%s", p.ndocs, p.docs_default ? " (drawn from the seed)" : "");
    FMCallGoto(print_list(comm, fp, lab, p.ndocs, p.docs, NULL));
  }
  if (p.nseg) {
    snprintf(lab, sizeof(lab), "segments per document%s", p.segs_default ? " (drawn from the seed)" : "");
    FMCallGoto(print_list(comm, fp, lab, p.ndocs, p.nseg, NULL));
    FMCallGoto(print_list(comm, fp, "segment lengths (question, answers...)", p.nsegtot, p.seglen, NULL));
  }
  if (p.window_left >= 0) FMCallGoto(FMPrintf(comm, fp, "  window: left %d, right %d\n", p.window_left, p.window_right));
  if (p.nglobal >= 0) FMCallGoto(FMPrintf(comm, fp, "  global tokens: %d\n", p.nglobal));
  if (p.prefix)
    FMCallGoto(print_list(comm, fp, p.prefix_default ? "prefix lengths (default: half of each document)" : "prefix lengths", p.nprefix, p.prefix,
                          NULL));
  if (p.span_start)
    FMCallGoto(print_list(comm, fp, p.spans_default ? "masked key spans (drawn from the seed)" : "masked key spans", p.nspans, p.span_start,
                          p.span_len));
cleanup:
  FMMaskParamsFree_Private(&p);
  return ierr;
}

/* The tile classes of head 0 for FMMaskView, grouped to at most 32 x 32 characters. */
static FMErrorCode view_tiles(FMMask mask, MPI_Comm comm, FILE *fp)
{
  int nqb = (mask->seqlen_q + mask->block - 1) / mask->block, nkb = mask->nblocks_k, gq = (nqb + 31) / 32, gk = (nkb + 31) / 32;
  int counts[3] = {0, 0, 0};
  char line[40];
  FMCall(FMMaskSummary_Private(mask, NULL)); /* FMMaskClassifyTile_Private reads them, and cannot compute them */
  FMCall(FMPrintf(comm, fp, "  tile classes of head 0 (%d x %d tiles, %d x %d per character; '.' skip, '#' full, '+' partial or mixed):\n", nqb,
                  nkb, gq, gk));
  for (int qg = 0; qg < nqb; qg += gq) {
    int c = 0;
    for (int kg = 0; kg < nkb; kg += gk) {
      int seen = 0;
      for (int qb = qg; qb < qg + gq && qb < nqb; qb++)
        for (int kb = kg; kb < kg + gk && kb < nkb; kb++) {
          FMTileClass cls = FMMaskClassifyTile_Private(mask, 0, qb * mask->block, (qb + 1) * mask->block, kb);
          seen |= 1 << cls;
          counts[cls]++;
        }
      line[c++] = seen == (1 << FM_TILE_SKIP) ? '.' : seen == (1 << FM_TILE_FULL) ? '#' : '+';
    }
    line[c] = 0;
    FMCall(FMPrintf(comm, fp, "    %s\n", line));
  }
  FMCall(FMPrintf(comm, fp, "  head 0 by the summaries: %d skip, %d partial, %d full tiles\n", counts[FM_TILE_SKIP], counts[FM_TILE_PARTIAL],
                  counts[FM_TILE_FULL]));
  return FM_SUCCESS;
}

/*
 * FMMaskView - print type, sizes, causal, vectors, parameters, density, sparsity and a picture
 *   of the tile classes of head 0 (at most 32 x 32 characters: '.' skip, '#' full, '+' partial
 *   or mixed). Collective; rank 0 prints. fp NULL means stdout.
 */
FMErrorCode FMMaskView(FMMask mask, FILE *fp)
{
  MPI_Comm comm;
  int t;
  char vec[32] = "";
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCheckSetUp(mask, "FMMask");
  FMCall(FMMaskComputeDensity_Private(mask));
  if (!fp) fp = stdout;
  comm = mask->hdr.comm;
  t = FMMaskTypeIndex_Private(mask->hdr.type_name);
  for (int v = 0; v < 4; v++)
    if (mask->present & (1 << v)) {
      if (vec[0]) strcat(vec, ",");
      strcat(vec, bound_names[v]);
    }
  FMCall(FMPrintf(comm, fp, "FMMask \"%s\": seqlen_q %d, seqlen_k %d, %d mask head%s, causal %s, vectors {%s}\n", mask->hdr.type_name,
                  mask->seqlen_q, mask->seqlen_k, mask->mask_heads, mask->mask_heads > 1 ? "s" : "", mask->causal ? "yes" : "no", vec));
  if (mask->mask_batch > 1)
    FMCall(FMPrintf(comm, fp, "  mask batch %d: bounds per sample (sample s draws its random defaults from seed + s; parameters below: "
                              "sample 0)\n", mask->mask_batch));
  if (mask->sdocs_n) { /* FMMaskSetSampleDocuments */
    int n = 0, first = -1;
    for (int b = 0; b < mask->mask_batch; b++)
      if (mask->sdocs_n[b] > 0) n++, first = first < 0 ? b : first;
    if (n) FMCall(FMPrintf(comm, fp, "  documents of their own (FMMaskSetSampleDocuments): %d sample%s, the first sample %d\n", n, n > 1 ? "s" : "", first));
  }
  if (t != FM_MT_BOUNDS && t != FM_MT_FULL && t != FM_MT_CAUSAL) FMCall(view_params(mask, comm, fp));
  if (t == FM_MT_RANDOMEVICTION)
    FMCall(FMPrintf(comm, fp, "  evictions: per head, one column at each row position %d..%d\n", mask->seqlen_k / 2, mask->seqlen_k - 1));
  FMCall(FMPrintf(comm, fp, "  seed %lu; element density %.6f, block sparsity %.6f (block %d)\n", mask->seed, mask->density, mask->sparsity,
                  mask->block));
  FMCall(view_tiles(mask, comm, fp));
  return FM_SUCCESS;
}
