/*
 * mask.c - FMMask: life cycle, setters and getters, options, set-up (build, validate,
 * summarize, agree across ranks) and queries. Viewing: maskview.c.
 */
#include "maskimpl.h"
#include <flashmask/private/fmkernels.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif


/* Any change of sizes, type or parameters invalidates the set-up, and the summaries with it (the
   block size may have changed: FMMaskClassifyTile_Private must not read them with the new one). */
static void changed(FMMask m) { m->hdr.setupcalled = 0; m->summary_valid = 0; }

/* Replace an owned int array by a copy of src[0..n). */
static FMErrorCode copy_ints(int n, const int *src, int **dst)
{
  int *p = NULL;
  if (n > 0) {
    FMCall(FMMalloc(n, &p));
    memcpy(p, src, sizeof(int) * (size_t)n);
  }
  free(*dst);
  *dst = p;
  return FM_SUCCESS;
}

/*
 * check_int_list - an int-list argument of a setter: n >= 0 values (n counted by argument
 *   nargnum, named nname), src argument argnum named arg, each value >= min.
 * set_int_list - the same check, then *dst becomes a copy of src[0..n) and *ndst = n (ndst may be
 *   NULL); the mask is no longer set up. Nothing changes when the check fails.
 */
static FMErrorCode check_int_list(int n, const int *src, int nargnum, const char *nname, int argnum, const char *arg, int min)
{
  FMCheck(n >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument %d (%s) is %d; expected >= 0 (0 = default)", nargnum, nname, n);
  if (n == 0) return FM_SUCCESS;
  FMCheck(src != NULL, MPI_COMM_SELF, FM_ERR_ARG_NULL, "Null pointer: argument %d (%s) with %s = %d", argnum, arg, nname, n);
  for (int k = 0; k < n; k++)
    FMCheck(src[k] >= min, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument %d (%s): %s[%d] is %d; expected >= %d", argnum, arg, arg, k, src[k],
            min);
  return FM_SUCCESS;
}

static FMErrorCode set_int_list(FMMask mask, int n, const int *src, int nargnum, const char *nname, int argnum, const char *arg, int min,
                                int **dst, int *ndst)
{
  FMCall(check_int_list(n, src, nargnum, nname, argnum, arg, min));
  FMCall(copy_ints(n, src, dst));
  if (ndst) *ndst = n;
  changed(mask);
  return FM_SUCCESS;
}

void FMMaskFreeSampleDocuments_Private(FMMask m)
{
  for (int s = 0; m->sdocs && s < m->mask_batch; s++) FMFree(m->sdocs[s]);
  FMFree(m->sdocs);
  FMFree(m->sdocs_n);
}

void FMMaskFreeUserBounds_Private(FMMask m)
{
  for (int v = 0; v < 4; v++) FMFree(m->user[v]);
  FMFree(m->user_head_set);
  m->user_present = -1;
}

/*
 * FMMaskCreate - create an empty mask (type "full", no sizes) on the context's communicator.
 *   Collective on the context. The mask holds a reference on the context.
 *   ctx   the context
 *   mask  out: the new mask
 */
FMErrorCode FMMaskCreate(FMContext ctx, FMMask *mask)
{
  FMMask m = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  FMCheckInitialized();
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMValidPointer(mask, 2);
  *mask = NULL;
  FMCall(FMCalloc(1, &m));
  FMHeaderCreate(m, FM_CLASSID_MASK, "FMMask", ctx->comm);
  FMCallGoto(FMStrdup(FMMASKFULL, &m->hdr.type_name));
  ctx->hdr.refct++;
  m->ctx = ctx;
  m->mask_heads = 1;
  m->mask_batch = 1;
  m->window_left = m->window_right = -1;
  m->nglobal = -1;
  m->seed = 42;
  m->block = 128;
  m->user_present = -1;
  *mask = m;
  m = NULL;
cleanup:
  free(m);
  return ierr;
}

/*
 * FMMaskSetSizes - set seqlen_q, seqlen_k (> 0) and mask_heads (>= 1). Not collective.
 *   Bounds given with FMMaskSetBounds are discarded if seqlen_k or mask_heads change.
 */
FMErrorCode FMMaskSetSizes(FMMask mask, int seqlen_q, int seqlen_k, int mask_heads)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCall(FMMaskCheckSizes_Private(seqlen_q, seqlen_k, mask_heads, mask->block, "Argument"));
  FMCall(FMMaskCheckBatch_Private(mask->mask_batch, mask_heads, seqlen_k, "The mask batch"));
  if (mask->user_head_set && (seqlen_k != mask->seqlen_k || mask_heads != mask->mask_heads)) FMMaskFreeUserBounds_Private(mask);
  mask->seqlen_q = seqlen_q;
  mask->seqlen_k = seqlen_k;
  mask->mask_heads = mask_heads;
  changed(mask);
  return FM_SUCCESS;
}

/*
 * FMMaskSetType - choose a builder by name (FMMASK*). Not collective.
 *   Setting the current type again keeps the mask set up. Builder parameters are kept.
 */
FMErrorCode FMMaskSetType(FMMask mask, FMMaskType type)
{
  char *s;
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMValidPointer(type, 2);
  if (FMMaskTypeIndex_Private(type) < 0) {
    char all[512] = "";
    for (int t = 0; t < FM_MT_N; t++) {
      if (t) strcat(all, ", ");
      strcat(all, FMMaskTypeNames_Private[t]);
    }
    FMRaise(MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 2 (type) is \"%s\"; expected one of %s", type, all);
  }
  if (mask->hdr.type_name && !strcmp(mask->hdr.type_name, type)) return FM_SUCCESS;
  FMCall(FMStrdup(type, &s));
  free(mask->hdr.type_name);
  mask->hdr.type_name = s;
  changed(mask);
  return FM_SUCCESS;
}

/* FMMaskGetType - the type name (borrowed). Not collective. */
FMErrorCode FMMaskGetType(FMMask mask, FMMaskType *type)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMValidPointer(type, 2);
  *type = mask->hdr.type_name;
  return FM_SUCCESS;
}

/* FMMaskSetCausal - for type "bounds": add the bottom-right aligned causal triangle. Not collective. */
FMErrorCode FMMaskSetCausal(FMMask mask, FMBool causal)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCheck(causal == FM_FALSE || causal == FM_TRUE, MPI_COMM_SELF, FM_ERR_ARG_WRONG,
          "Argument 2 (causal) is %d; expected FM_TRUE or FM_FALSE", (int)causal);
  mask->user_causal = causal == FM_TRUE;
  changed(mask);
  return FM_SUCCESS;
}

/*
 * FMMaskSetDocuments - document lengths (each >= 1; they must sum to seqlen_k, checked at
 *   SetUp). Not collective. ndocs = 0 restores the default (drawn from the seed).
 */
FMErrorCode FMMaskSetDocuments(FMMask mask, int ndocs, const int lengths[])
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCall(set_int_list(mask, ndocs, lengths, 2, "ndocs", 3, "lengths", 1, &mask->docs, &mask->ndocs));
  return FM_SUCCESS;
}

/*
 * FMMaskSetSampleDocuments - one sample's document lengths (see flashmask.h). Not collective.
 *   The per-sample arrays are made at the first call, for the current batch.
 */
FMErrorCode FMMaskSetSampleDocuments(FMMask mask, int sample, int ndocs, const int lengths[])
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCheck(sample >= 0 && sample < mask->mask_batch, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Argument 2 (sample) is %d; expected 0 <= sample < mask_batch = %d (FMMaskSetBatch)", sample, mask->mask_batch);
  FMCall(check_int_list(ndocs, lengths, 3, "ndocs", 4, "lengths", 1));
  if (!mask->sdocs) {
    FMErrorCode ierr = FMCalloc(mask->mask_batch, &mask->sdocs_n);
    if (!ierr) ierr = FMCalloc(mask->mask_batch, &mask->sdocs);
    if (ierr) {
      FMMaskFreeSampleDocuments_Private(mask);
      FMCall(ierr);
    }
  }
  FMCall(copy_ints(ndocs, lengths, &mask->sdocs[sample]));
  mask->sdocs_n[sample] = ndocs;
  changed(mask);
  return FM_SUCCESS;
}

/* FMMaskSetWindow - sliding-window sizes in tokens (>= 0). Not collective. */
FMErrorCode FMMaskSetWindow(FMMask mask, int left, int right)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCheck(left >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument 2 (left) is %d; expected >= 0", left);
  FMCheck(right >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument 3 (right) is %d; expected >= 0", right);
  mask->window_left = left;
  mask->window_right = right;
  changed(mask);
  return FM_SUCCESS;
}

/* FMMaskSetGlobalTokens - number of global tokens, 0 <= nglobal <= seqlen_k (checked at SetUp). */
FMErrorCode FMMaskSetGlobalTokens(FMMask mask, int nglobal)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCheck(nglobal >= 0, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument 2 (nglobal) is %d; expected >= 0", nglobal);
  mask->nglobal = nglobal;
  changed(mask);
  return FM_SUCCESS;
}

/*
 * FMMaskSetPrefixLengths - per-document prefix lengths (prefix_lm_document) or, with ndocs = 1,
 *   the prefix of prefix_lm_causal. Each >= 0 (<= its document, checked at SetUp).
 *   Not collective. ndocs = 0 restores the default.
 */
FMErrorCode FMMaskSetPrefixLengths(FMMask mask, int ndocs, const int prefix[])
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCall(set_int_list(mask, ndocs, prefix, 2, "ndocs", 3, "prefix", 0, &mask->prefix, &mask->nprefix));
  return FM_SUCCESS;
}

/*
 * FMMaskSetShareQuestion - per document nseg[d] >= 2 segments (question, then answers) with
 *   lengths seglen (concatenated, each >= 1). Not collective. ndocs = 0 restores the default.
 *   If no documents were set, the documents are the sums of the segments.
 */
FMErrorCode FMMaskSetShareQuestion(FMMask mask, int ndocs, const int nseg[], const int seglen[])
{
  int tot = 0;
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCall(check_int_list(ndocs, nseg, 2, "ndocs", 3, "nseg", 2)); /* a question and at least one answer */
  for (int d = 0; d < ndocs; d++) {
    FMCheck(tot <= 0x3FFFFFFF - nseg[d], MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument 3 (nseg): total number of segments overflows");
    tot += nseg[d];
  }
  FMCall(check_int_list(tot, seglen, 3, "the sum of nseg", 4, "seglen", 1));
  FMCall(set_int_list(mask, ndocs, nseg, 2, "ndocs", 3, "nseg", 2, &mask->sq_nseg, &mask->nsq));
  FMCall(set_int_list(mask, tot, seglen, 3, "the sum of nseg", 4, "seglen", 1, &mask->sq_seglen, &mask->nsqseg));
  return FM_SUCCESS;
}

/*
 * FMMaskSetQKSparseSpans - masked key spans [start, start + len), start >= 0, len >= 0 (the end
 *   <= seqlen_k is checked at SetUp). Spans may overlap. Not collective. nspans = 0 restores
 *   the default.
 */
FMErrorCode FMMaskSetQKSparseSpans(FMMask mask, int nspans, const int start[], const int len[])
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCall(check_int_list(nspans, len, 2, "nspans", 4, "len", 0));
  FMCall(set_int_list(mask, nspans, start, 2, "nspans", 3, "start", 0, &mask->span_start, &mask->nspans));
  FMCall(set_int_list(mask, nspans, len, 2, "nspans", 4, "len", 0, &mask->span_len, NULL));
  return FM_SUCCESS;
}

/* FMMaskSetSeed - seed of every random default. Not collective. */
FMErrorCode FMMaskSetSeed(FMMask mask, unsigned long seed)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  mask->seed = seed;
  changed(mask);
  return FM_SUCCESS;
}

/* FMMaskSetBlockSize - block size of the summaries (>= 1, default 128). Not collective. */
FMErrorCode FMMaskSetBlockSize(FMMask mask, int block)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCheck(block >= 1 && block <= FM_MASK_MAX_SEQLEN, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Argument 2 (block) is %d; expected 1 <= block <= FM_MASK_MAX_SEQLEN = %d", block, FM_MASK_MAX_SEQLEN);
  mask->block = block;
  changed(mask);
  return FM_SUCCESS;
}

/* Room for the array options (-fm_mask_docs, -fm_mask_segments, ...). */
#define FM_MASK_OPT_CAP 65536

/* The list options of FMMaskSetFromOptions (-fm_mask_docs, -fm_mask_prefix, -fm_mask_spans,
   -fm_mask_nsegments with -fm_mask_segments). */
static FMErrorCode setfromoptions_lists(FMMask mask)
{
  int n, nd, *buf = NULL, *buf2 = NULL;
  FMBool set, set2;
  FMErrorCode ierr = FM_SUCCESS;

  FMCallGoto(FMMalloc(FM_MASK_OPT_CAP, &buf));
  FMCallGoto(FMMalloc(FM_MASK_OPT_CAP, &buf2));
  n = FM_MASK_OPT_CAP;
  FMCallGoto(FMOptionsGetIntArray("-fm_mask_docs", "document lengths, comma separated (FMMaskSetDocuments)", buf, &n, &set));
  if (set) FMCallGoto(FMMaskSetDocuments(mask, n, buf));
  n = FM_MASK_OPT_CAP;
  FMCallGoto(FMOptionsGetIntArray("-fm_mask_prefix", "prefix length per document, or one for prefix_lm_causal (FMMaskSetPrefixLengths)", buf, &n, &set));
  if (set) FMCallGoto(FMMaskSetPrefixLengths(mask, n, buf));
  n = FM_MASK_OPT_CAP;
  FMCallGoto(FMOptionsGetIntArray("-fm_mask_spans", "qk_sparse spans start0,len0,start1,len1,... (FMMaskSetQKSparseSpans)", buf, &n, &set));
  if (set) {
    FMCheckGoto(n % 2 == 0, MPI_COMM_SELF, FM_ERR_OPT, "Option -fm_mask_spans has %d values; expected start,length pairs", n);
    for (int k = 0; k < n / 2; k++) { buf2[k] = buf[2 * k + 1]; buf[k] = buf[2 * k]; }
    FMCallGoto(FMMaskSetQKSparseSpans(mask, n / 2, buf, buf2));
  }
  nd = n = FM_MASK_OPT_CAP;
  FMCallGoto(FMOptionsGetIntArray("-fm_mask_nsegments", "share_question: segments per document (FMMaskSetShareQuestion)", buf2, &nd, &set));
  FMCallGoto(FMOptionsGetIntArray("-fm_mask_segments", "share_question: segment lengths q0,a0,a1,... (FMMaskSetShareQuestion)", buf, &n, &set2));
  if (set || set2) {
    int tot = 0;
    FMCheckGoto(set && set2, MPI_COMM_SELF, FM_ERR_OPT, "Options -fm_mask_nsegments and -fm_mask_segments must be given together");
    for (int d = 0; d < nd; d++) tot += buf2[d] > 0 ? buf2[d] : 0;
    FMCheckGoto(tot == n, MPI_COMM_SELF, FM_ERR_OPT, "Option -fm_mask_segments has %d values but -fm_mask_nsegments adds up to %d", n, tot);
    FMCallGoto(FMMaskSetShareQuestion(mask, nd, buf2, buf));
  }
cleanup:
  free(buf);
  free(buf2);
  return ierr;
}

/*
 * FMMaskSetFromOptions - read the -fm_mask_* options. Collective (call it on every rank).
 *   -fm_mask_type, -fm_mask_seqlen (both), -fm_mask_seqlen_q, -fm_mask_seqlen_k, -fm_mask_heads, -fm_mask_batch,
 *   -fm_mask_causal, -fm_mask_docs, -fm_mask_window (both), -fm_mask_window_left,
 *   -fm_mask_window_right, -fm_mask_global_tokens, -fm_mask_prefix, -fm_mask_nsegments with
 *   -fm_mask_segments, -fm_mask_spans (start,len pairs), -fm_mask_seed, -fm_mask_block_size;
 *   -fm_mask_view is read by FMMaskSetUp.
 */
static FMErrorCode setfromoptions(void *obj)
{
  FMMask mask = (FMMask)obj;
  int t, sq, sk, s, h, w, wl, wr, v;
  FMBool set, set1, set2, set3, b;
  char seedstr[32];
  FMValidHeader(mask, FM_CLASSID_MASK, 1);

  t = FMMaskTypeIndex_Private(mask->hdr.type_name);
  FMCall(FMOptionsGetEnum_Private("-fm_mask_type", "mask builder (FMMaskSetType)", FMMaskTypeNames_Private, &t, &set));
  if (set) FMCall(FMMaskSetType(mask, FMMaskTypeNames_Private[t]));

  s = mask->seqlen_k;
  FMCall(FMOptionsGetInt("-fm_mask_seqlen", "sequence length, sets seqlen_q and seqlen_k (FMMaskSetSizes)", &s, &set));
  FMCheck(!set || s > 0, MPI_COMM_SELF, FM_ERR_OPT, "Option -fm_mask_seqlen is %d; expected > 0", s);
  sq = set ? s : mask->seqlen_q;
  sk = set ? s : mask->seqlen_k;
  h = mask->mask_heads;
  FMCall(FMOptionsGetInt("-fm_mask_seqlen_q", "query length (FMMaskSetSizes)", &sq, &set1));
  FMCall(FMOptionsGetInt("-fm_mask_seqlen_k", "key length (FMMaskSetSizes)", &sk, &set2));
  FMCall(FMOptionsGetInt("-fm_mask_heads", "mask heads: 1 or the number of KV heads (FMMaskSetSizes)", &h, &set3));
  if (set || set1 || set2 || set3) {
    FMCheck(sq > 0 && sk > 0, MPI_COMM_SELF, FM_ERR_OPT,
            "Options -fm_mask_seqlen_q = %d, -fm_mask_seqlen_k = %d: both lengths must be given (or -fm_mask_seqlen) and > 0", sq, sk);
    FMCall(FMMaskSetSizes(mask, sq, sk, h));
  }
  {
    int mb = mask->mask_batch;
    FMCall(FMOptionsGetInt("-fm_mask_batch", "samples with their own bounds: 1 (shared by all) or the plan's batch (FMMaskSetBatch)", &mb, &set));
    if (set) FMCall(FMMaskSetBatch(mask, mb));
  }

  b = mask->user_causal ? FM_TRUE : FM_FALSE;
  FMCall(FMOptionsGetBool("-fm_mask_causal", "add the causal triangle to type bounds (FMMaskSetCausal)", &b, &set));
  if (set) FMCall(FMMaskSetCausal(mask, b));

  w = -1;
  FMCall(FMOptionsGetInt("-fm_mask_window", "window, left and right, -1 = seqlen_k/16 (FMMaskSetWindow)", &w, &set));
  wl = set ? w : mask->window_left;
  wr = set ? w : mask->window_right;
  FMCall(FMOptionsGetInt("-fm_mask_window_left", "left window (sliding_window: keys seen counting the diagonal), -1 = seqlen_k/16 (FMMaskSetWindow)", &wl, &set1));
  FMCall(FMOptionsGetInt("-fm_mask_window_right", "right window (global_sliding_window only), -1 = seqlen_k/16 (FMMaskSetWindow)", &wr, &set2));
  if (set || set1 || set2) {
    FMCheck(wl >= -1 && wr >= -1, MPI_COMM_SELF, FM_ERR_OPT, "Options -fm_mask_window_left = %d, -fm_mask_window_right = %d; expected >= 0 (-1 = default)", wl, wr);
    mask->window_left = wl;
    mask->window_right = wr;
    changed(mask);
  }

  v = mask->nglobal;
  FMCall(FMOptionsGetInt("-fm_mask_global_tokens", "global tokens, -1 = 16 (FMMaskSetGlobalTokens)", &v, &set));
  if (set) FMCall(FMMaskSetGlobalTokens(mask, v));

  v = (int)(mask->block);
  FMCall(FMOptionsGetInt("-fm_mask_block_size", "block size of the summaries (FMMaskSetBlockSize)", &v, &set));
  if (set) FMCall(FMMaskSetBlockSize(mask, v));

  snprintf(seedstr, sizeof(seedstr), "%lu", mask->seed);
  FMCall(FMOptionsGetString("-fm_mask_seed", "seed of the random defaults (FMMaskSetSeed)", seedstr, sizeof(seedstr), &set));
  if (set) {
    char *end;
    unsigned long long x = strtoull(seedstr, &end, 0);
    FMCheck(*seedstr && !*end && seedstr[0] != '-', MPI_COMM_SELF, FM_ERR_OPT, "Option -fm_mask_seed has value \"%s\"; expected a non-negative integer",
            seedstr);
    FMCall(FMMaskSetSeed(mask, (unsigned long)x));
  }

  FMCall(setfromoptions_lists(mask));
  return FM_SUCCESS;
}

/* mask->hash (see the struct in fmimpl.h): sizes, flags, type name, then the bound vectors. */
static void compute_hash(FMMask m)
{
  const int v[7] = {m->seqlen_q, m->seqlen_k, m->mask_heads, m->causal, m->present, m->block, m->bnd_default};
  const char *type = m->hdr.type_name ? m->hdr.type_name : FMMASKFULL;
  uint64_t h = FMHash_Private(FM_HASH_INIT, v, sizeof(v));
  h = FMHash_Private(h, type, strlen(type) + 1);
  if (m->mask_batch > 1) h = FMHash_Private(h, &m->mask_batch, sizeof(int));
  for (int b = 0; b < 4; b++) /* a vector at its defaults is given by the sizes (and the bits hashed with them) */
    if (!((m->bnd_default >> b) & 1)) h = FMHash_Private(h, m->bnd[b], sizeof(int32_t) * FM_MASK_NG(m) * m->seqlen_k);
  m->hash = h;
  m->hash_valid = 1;
}

/* FMMaskHash_Private - see fmimpl.h. */
uint64_t FMMaskHash_Private(FMMask m)
{
  if (!m->hash_valid) compute_hash(m);
  return m->hash;
}

int FMMaskThreads_Private(FMMask m, size_t n, int units)
{
  int t = 1;
#ifdef _OPENMP
  if (n >= ((size_t)1 << 17) && (units <= 0 || units >= 2)) t = m->ctx && m->ctx->threads > 0 ? m->ctx->threads : omp_get_max_threads();
#else
  (void)m;
  (void)n;
  (void)units;
#endif
  return t;
}

void FMMaskCopyBounds_Private(int32_t *const dst[4], const int32_t *const src[4], size_t n, int nth)
{
#pragma omp parallel for num_threads(nth) schedule(static) if (nth > 1)
  for (int t = 0; t < nth; t++) {
    const size_t per = ((n + (size_t)nth - 1) / (size_t)nth + 1023) & ~(size_t)1023, i0 = per * (size_t)t < n ? per * (size_t)t : n,
                 i1 = i0 + per < n ? i0 + per : n;
    for (int v = 0; v < 4; v++)
      if (src[v] && i1 > i0) memcpy(dst[v] + i0, src[v] + i0, sizeof(int32_t) * (i1 - i0));
  }
}

/* The bounds rebuilt, checked and normalized; eager: their summaries too (several ranks: see the
   struct in fmimpl.h), else left to the first reader (FMMaskSummary_Private). */
static FMErrorCode setup_local(FMMask m, int eager)
{
  FMCheck(m->seqlen_q > 0 && m->seqlen_k > 0, MPI_COMM_SELF, FM_ERR_ORDER,
          "Must call FMMaskSetSizes() (or give -fm_mask_seqlen) before FMMaskSetUp()");
  m->summary_valid = 0; /* from here on the bounds change */
  m->hash_valid = 0;    /* computed at SetUp where ranks agree on it, else when asked for */
  FMCall(FMMaskBuild_Private(m));
  FMCall(FMMaskValidate_Private(m));
  FMCall(FMMaskNormalize_Private(m));
  if (eager) FMCall(FMMaskComputeSummaries_Private(m));
  return FM_SUCCESS;
}

/*
 * FMMaskSetUp - build, validate and normalize the mask (its block summaries too on several
 *   ranks; on one rank the first reader computes them). Collective: a failure on any rank is
 *   returned on every rank, and ranks that built different masks get FM_ERR_MISMATCH.
 *   Every rank takes part in the same agreements: when any rank's mask changed since its last
 *   SetUp, the changed ranks rebuild, every rank checks mask->hash against the others and the
 *   state of the mask advances on every rank (so the plans of all ranks see the change).
 */
static FMErrorCode setup_mask(void *obj);

FMErrorCode FMMaskSetUp(FMMask mask)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCall(FMLogTimed_Private("FMMaskSetUp", setup_mask, mask)); /* -fm_log_view: the mask's set-up per call */
  return FM_SUCCESS;
}

static FMErrorCode setup_mask(void *obj)
{
  FMMask mask = (FMMask)obj;
  FMErrorCode ierr = FM_SUCCESS;
  FMBool view = FM_FALSE;
  int redo = 0, size = 1;
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCall(FMAgreeCall_Private(mask->hdr.comm, FM_CALL_MASK_SETUP, FM_SUCCESS, 0, NULL)); /* ranks in another call: an error, not a hang */
  FMCall(FMAgreeAny(mask->hdr.comm, !mask->hdr.setupcalled, &redo));
  if (!redo) return FM_SUCCESS;
  MPI_Comm_size(mask->hdr.comm, &size);
  if (!mask->hdr.setupcalled) ierr = setup_local(mask, size > 1);
  FMAgreeGoto(mask->hdr.comm);
  if (size > 1) /* one rank: nothing to agree on, the hash waits until asked for */
    FMCallGoto(FMAgreeSame(mask->hdr.comm, FMMaskHash_Private(mask), "the mask (its sizes, type, causal flag, block size and bounds)"));
  mask->hdr.setupcalled = 1;
  mask->state++;
  FMCallGoto(FMOptionsPushPrefix_Private(mask->hdr.prefix)); /* -a_fm_mask_view for prefix a_ */
  ierr = FMOptionsGetView_Private("-fm_mask_view", "print the mask at set-up (FMMaskView)", &view);
  FMCallGoto(FMOptionsPopPrefix_Private());
  FMCallGoto(ierr);
  if (view) FMCallGoto(FMMaskView(mask, stdout));
cleanup:
  return ierr;
}

/* FMMaskGetSizes - sizes as set. Not collective. Any output may be NULL. */
FMErrorCode FMMaskGetSizes(FMMask mask, int *seqlen_q, int *seqlen_k, int *mask_heads)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  if (seqlen_q) *seqlen_q = mask->seqlen_q;
  if (seqlen_k) *seqlen_k = mask->seqlen_k;
  if (mask_heads) *mask_heads = mask->mask_heads;
  return FM_SUCCESS;
}

/* FMMaskIsMasked - whether row i may not attend key j for mask head of sample 0 (after SetUp). Not collective. */
FMErrorCode FMMaskIsMasked(FMMask mask, int head, int i, int j, FMBool *masked)
{
  size_t o;
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCheckSetUp(mask, "FMMask");
  FMValidPointer(masked, 5);
  FMCheck(head >= 0 && head < mask->mask_heads, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Argument 2 (head) is %d; expected 0 <= head < mask_heads = %d", head, mask->mask_heads);
  FMCheck(i >= 0 && i < mask->seqlen_q, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument 3 (i) is %d; expected 0 <= i < seqlen_q = %d", i,
          mask->seqlen_q);
  FMCheck(j >= 0 && j < mask->seqlen_k, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument 4 (j) is %d; expected 0 <= j < seqlen_k = %d", j,
          mask->seqlen_k);
  o = (size_t)head * mask->seqlen_k + j;
  *masked = ((mask->bnd[0][o] <= i && i < mask->bnd[1][o]) || (mask->bnd[2][o] <= i && i < mask->bnd[3][o]) ||
             (mask->causal && (int64_t)j > (int64_t)i + mask->seqlen_k - mask->seqlen_q))
              ? FM_TRUE
              : FM_FALSE;
  return FM_SUCCESS;
}

/* FMMaskGetDensity - exact element density and block sparsity (after SetUp). Not collective. */
FMErrorCode FMMaskGetDensity(FMMask mask, double *element_density, double *block_sparsity)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMCheckSetUp(mask, "FMMask");
  FMCall(FMMaskComputeDensity_Private(mask));
  if (element_density) *element_density = mask->density;
  if (block_sparsity) *block_sparsity = mask->sparsity;
  return FM_SUCCESS;
}

/* FMMaskGetBoundsDesc_Private - the kernels' view of a set-up mask (borrowed pointers) without the
   summaries. Not collective. */
FMErrorCode FMMaskGetBoundsDesc_Private(FMMask m, struct FMMaskDesc_s *desc)
{
  FMValidHeader(m, FM_CLASSID_MASK, 1);
  FMValidPointer(desc, 2);
  FMCheckSetUp(m, "FMMask");
  desc->seqlen_q = m->seqlen_q;
  desc->seqlen_k = m->seqlen_k;
  desc->mask_heads = m->mask_heads;
  desc->mask_batch = m->mask_batch;
  desc->causal = m->causal;
  desc->present = m->present;
  for (int v = 0; v < 4; v++) desc->bnd[v] = m->bnd[v];
  desc->block = m->block;
  desc->nblocks_k = m->nblocks_k;
  desc->summary = NULL;
  return FM_SUCCESS;
}

/* FMMaskGetDesc_Private - the kernels' view of a set-up mask (borrowed pointers), the summaries
   computed if they are not yet. Not collective. */
FMErrorCode FMMaskGetDesc_Private(FMMask m, struct FMMaskDesc_s *desc)
{
  FMCall(FMMaskGetBoundsDesc_Private(m, desc));
  FMCall(FMMaskSummary_Private(m, &desc->summary));
  return FM_SUCCESS;
}

/* FMMaskDestroy - drop a reference; frees at zero (and drops the context) and sets *mask = NULL. */
FMErrorCode FMMaskDestroy(FMMask *mask)
{
  FMMask m;
  FMHeaderRelease(mask, FM_CLASSID_MASK, m);
  for (int v = 0; v < 4; v++) free(m->bnd[v]);
  FMMaskFreeUserBounds_Private(m);
  FMMaskFreeSampleDocuments_Private(m);
  free(m->docs);
  free(m->prefix);
  free(m->sq_nseg);
  free(m->sq_seglen);
  free(m->span_start);
  free(m->span_len);
  free(m->summary);
  FMHeaderDestroy(m);
  FMCall(FMContextDestroy(&m->ctx));
  free(m);
  return FM_SUCCESS;
}

/* FMMaskSetFromOptions - see flashmask.h: the lookups above, under the object's options prefix. */
FMErrorCode FMMaskSetFromOptions(FMMask mask)
{
  FMCall(FMHeaderSetFromOptions(mask, FM_CLASSID_MASK, setfromoptions));
  return FM_SUCCESS;
}

/* FMMaskSetOptionsPrefix - see flashmask.h. */
FMErrorCode FMMaskSetOptionsPrefix(FMMask mask, const char *prefix)
{
  FMCall(FMHeaderSetOptionsPrefix(mask, FM_CLASSID_MASK, prefix));
  return FM_SUCCESS;
}

/* FMMaskGetOptionsPrefix - see flashmask.h. */
FMErrorCode FMMaskGetOptionsPrefix(FMMask mask, const char **prefix)
{
  FMCall(FMHeaderGetOptionsPrefix(mask, FM_CLASSID_MASK, prefix));
  return FM_SUCCESS;
}
