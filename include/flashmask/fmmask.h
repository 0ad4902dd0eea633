/*
 * flashmask/fmmask.h - FMMask: the column-bound mask, its builders, its files.
 * Part of the public API; include <flashmask.h>, which includes every part in order.
 */
#ifndef FLASHMASK_FMMASK_H
#define FLASHMASK_FMMASK_H

#include <flashmask/fmcontext.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ------------------------------------------------------------------------ */
/* FMMask                                                                    */
/* ------------------------------------------------------------------------ */
typedef struct _p_FMMask *FMMask;
typedef const char *FMMaskType;
#define FMMASKFULL                "full"
#define FMMASKCAUSAL              "causal"
#define FMMASKSLIDINGWINDOW       "sliding_window"
#define FMMASKCAUSALDOCUMENT      "causal_document"
#define FMMASKDOCUMENT            "document"
#define FMMASKSHAREQUESTION       "share_question"
#define FMMASKGLOBALSLIDINGWINDOW "global_sliding_window"
#define FMMASKCAUSALBLOCKWISE     "causal_blockwise"
#define FMMASKPREFIXLMDOCUMENT    "prefix_lm_document"
#define FMMASKPREFIXLMCAUSAL      "prefix_lm_causal"
#define FMMASKQKSPARSE            "qk_sparse"
#define FMMASKRANDOMEVICTION      "random_eviction"
#define FMMASKBOUNDS              "bounds"

/* Which bound vectors a mask carries (bit set). */
#define FM_BOUND_LTS 1
#define FM_BOUND_LTE 2
#define FM_BOUND_UTS 4
#define FM_BOUND_UTE 8

/*
 * FMMaskCreate - create an empty mask on the context's communicator. Collective: every rank
 *   creates its mask (it sends no message, so a rank alone does not wait).
 *   ctx   the context; mask out: the new mask (type "full" until set)
 */
FMErrorCode FMMaskCreate(FMContext ctx, FMMask *mask);

/*
 * Limits of one mask, checked by FMMaskSetSizes, FMMaskSetBlockSize and FMMaskLoad (before
 * anything is allocated): seqlen_q, seqlen_k and the block size at most FM_MASK_MAX_SEQLEN
 * (2^30), and mask_batch * mask_heads * seqlen_k at most FM_MASK_MAX_ENTRIES (2^28 columns:
 * each takes 16 bytes of bounds, and as much again for bounds given with FMMaskSetBounds).
 */
#define FM_MASK_MAX_SEQLEN (1 << 30)
#define FM_MASK_MAX_ENTRIES (1 << 28)

/*
 * FMMaskSetSizes - set the score-matrix size and the number of mask heads. Not collective.
 *   seqlen_q, seqlen_k  > 0 and <= FM_MASK_MAX_SEQLEN
 *   mask_heads          1 (shared by all heads) or the number of KV heads;
 *                       mask_batch * mask_heads * seqlen_k <= FM_MASK_MAX_ENTRIES
 *                       (FMMaskSetBatch; mask_batch is 1 by default)
 *   Sizes out of these ranges are FM_ERR_ARG_SIZ (nothing is allocated).
 *   Options: -fm_mask_seqlen_q, -fm_mask_seqlen_k, -fm_mask_heads
 */
FMErrorCode FMMaskSetSizes(FMMask mask, int seqlen_q, int seqlen_k, int mask_heads);

/*
 * FMMaskSetBatch - give every sample of the batch its own bounds. Not collective.
 *   mask        the mask
 *   mask_batch  1 (the default): one set of bounds shared by every sample, or the batch of
 *               the plans that use the mask (FMPlanSetShape), checked at FMPlanSetUp
 *               (FM_ERR_ARG_INCOMP on every rank otherwise); >= 1 and mask_batch * mask_heads
 *               * seqlen_k <= FM_MASK_MAX_ENTRIES, else FM_ERR_ARG_OUTOFRANGE / FM_ERR_ARG_SIZ.
 *   Bounds and block summaries are kept per (sample, mask head). The builders draw the random
 *   defaults of sample s (document lengths, segments, spans, evictions) from the seed
 *   (FMMaskSetSeed) plus s, so every sample packs other documents; values given by setters
 *   (FMMaskSetDocuments, ...) and the deterministic types (full, causal, windows) are the same
 *   in every sample. Changing the batch discards bounds given with FMMaskSetBounds.
 *   The plan type "cp" runs them on every backend (one partition for the whole batch).
 *   Option: -fm_mask_batch
 */
FMErrorCode FMMaskSetBatch(FMMask mask, int mask_batch);
/*
 * FMMaskGetBatch - the mask batch of a mask. Not collective.
 *   mask        the mask
 *   mask_batch  out: as given to FMMaskSetBatch (1 by default)
 */
FMErrorCode FMMaskGetBatch(FMMask mask, int *mask_batch);

/* FMMaskSetType - choose the builder of mask: type is one of the FMMASK* names. Not collective.
 *   Option: -fm_mask_type */
FMErrorCode FMMaskSetType(FMMask mask, FMMaskType type);
/* FMMaskGetType - type out: the type name of mask (borrowed). Not collective. */
FMErrorCode FMMaskGetType(FMMask mask, FMMaskType *type);

/*
 * FMMaskTypeList - the names FMMaskSetType accepts (the FMMASK* macros of flashmask/fmmask.h),
 *   in this order: the 12 builders "full", "causal", "sliding_window", "causal_document",
 *   "document", "share_question", "global_sliding_window", "causal_blockwise",
 *   "prefix_lm_document", "prefix_lm_causal", "qk_sparse", "random_eviction", then "bounds"
 *   (user bounds).
 *   Not collective; no FMInitialize needed.
 *   n      out: the number of names (13)
 *   names  out: a borrowed array of n static strings, followed by a NULL entry
 */
FMErrorCode FMMaskTypeList(int *n, const char *const **names);

/*
 * FMMaskSetCausal - for type "bounds": add the causal triangle (bottom-right aligned)
 *   on top of the bounds. Not collective. Option: -fm_mask_causal
 *   mask    the mask
 *   causal  FM_TRUE to add the triangle
 */
FMErrorCode FMMaskSetCausal(FMMask mask, FMBool causal);

/*
 * FMMaskSetDocuments - document lengths (they must sum to seqlen_k). Not collective.
 *   mask     the mask
 *   ndocs    number of documents (0 restores the default)
 *   lengths  ndocs lengths, each >= 1 (copied)
 *   Used by causal_document, document, share_question, causal_blockwise,
 *   prefix_lm_document. Option: -fm_mask_docs 2538,1742,3213
 *   If no documents are set, SetUp draws them as in the FlashMask paper from the seed.
 */
FMErrorCode FMMaskSetDocuments(FMMask mask, int ndocs, const int lengths[]);

/*
 * FMMaskSetSampleDocuments - document lengths of one sample of a mask batch (FMMaskSetBatch), so
 *   that every sample packs its own documents: a new packing per sample every training step
 *   without computing bounds. Not collective.
 *   mask     the mask (a type that reads documents: see FMMaskSetDocuments)
 *   sample   0 <= sample < mask_batch, else FM_ERR_ARG_OUTOFRANGE
 *   ndocs    number of documents of this sample; 0 gives the sample back the mask's documents
 *            (FMMaskSetDocuments, or drawn from the seed plus the sample)
 *   lengths  ndocs lengths, each >= 1 (copied); they must sum to seqlen_k (checked at SetUp,
 *            where an error names the sample)
 *   Takes precedence over FMMaskSetDocuments for that sample. Changing the batch discards the
 *   lengths given per sample. Parameters that count documents (FMMaskSetPrefixLengths,
 *   FMMaskSetShareQuestion) must then match every sample's count, or be left at their defaults.
 */
FMErrorCode FMMaskSetSampleDocuments(FMMask mask, int sample, int ndocs, const int lengths[]);

/*
 * FMMaskSetWindow - sliding-window sizes in tokens. Not collective.
 *   mask         the mask
 *   left, right  window sizes (>= 0); what they mean depends on the type:
 *                global_sliding_window: a query sees the left keys before it, its own key and
 *                the right keys after it;
 *                sliding_window (causal): a query sees left keys counting its own (its key and
 *                the left - 1 before it; left = 0 masks everything); right is not used.
 *   Options: -fm_mask_window (both), -fm_mask_window_left, -fm_mask_window_right (default
 *   seqlen_k/16)
 */
FMErrorCode FMMaskSetWindow(FMMask mask, int left, int right);

/* FMMaskSetGlobalTokens - nglobal (>= 0), the number of global tokens of mask
 *   (global_sliding_window; default 16). Not collective. Option: -fm_mask_global_tokens */
FMErrorCode FMMaskSetGlobalTokens(FMMask mask, int nglobal);

/*
 * FMMaskSetPrefixLengths - prefix length of each document (prefix_lm_document;
 *   default: the first half of each document) or, with ndocs = 1, the prefix of
 *   prefix_lm_causal (default seqlen/2). Not collective. Option: -fm_mask_prefix
 *   mask    the mask
 *   ndocs   number of prefix lengths (0 restores the default)
 *   prefix  ndocs lengths, each >= 0 (copied)
 */
FMErrorCode FMMaskSetPrefixLengths(FMMask mask, int ndocs, const int prefix[]);

/*
 * FMMaskSetShareQuestion - for share_question: per document, the number of segments
 *   (1 question + answers) and their lengths, concatenated. nseg[d] >= 2 and the
 *   lengths of document d sum to its length. Not collective.
 *   mask    the mask
 *   ndocs   number of documents (0 restores the default)
 *   nseg    ndocs segment counts; seglen  their segment lengths, concatenated (copied)
 *   Option: -fm_mask_segments q0,a0,a1,...  (with -fm_mask_nsegments 3,4,...)
 *   Default: each document is split into a question and 2..6 answers from the seed.
 */
FMErrorCode FMMaskSetShareQuestion(FMMask mask, int ndocs, const int nseg[], const int seglen[]);

/*
 * FMMaskSetQKSparseSpans - masked key spans [start, start+len) for qk_sparse. Not collective.
 *   mask        the mask
 *   nspans      number of spans (0 restores the default)
 *   start, len  nspans starts (>= 0) and lengths (copied)
 *   Option: -fm_mask_spans start0,len0,start1,len1,...  Default: drawn from the seed.
 */
FMErrorCode FMMaskSetQKSparseSpans(FMMask mask, int nspans, const int start[], const int len[]);

/* FMMaskSetSeed - seed of mask for every random default (documents, evictions, spans).
 *   Default 42. Not collective. Option: -fm_mask_seed */
FMErrorCode FMMaskSetSeed(FMMask mask, unsigned long seed);

/*
 * FMMaskSetBounds - user-supplied bounds for one mask head of every sample (type "bounds").
 *   Not collective. Call FMMaskSetSizes (and FMMaskSetBatch, if any) first.
 *   head              0 <= head < mask_heads
 *   lts, lte, uts, ute   int32[seqlen_k] each, or NULL when absent; the arrays are copied.
 *   Query row i may not attend key j when lts[j] <= i < lte[j] or uts[j] <= i < ute[j].
 *   Absent: lte defaults to seqlen_q when lts is given, uts to 0 when ute is given.
 *   The same set of vectors must be given for every head (and sample). Checked at SetUp.
 *   With mask_batch > 1 the vectors are copied into every sample; FMMaskSetSampleBounds
 *   replaces one sample's.
 */
FMErrorCode FMMaskSetBounds(FMMask mask, int head, const int32_t *lts, const int32_t *lte,
                            const int32_t *uts, const int32_t *ute);

/*
 * FMMaskSetSampleBounds - user-supplied bounds for one mask head of one sample (type
 *   "bounds"). Not collective. As FMMaskSetBounds, for that sample only.
 *   sample  0 <= sample < mask_batch (FMMaskSetBatch), else FM_ERR_ARG_OUTOFRANGE
 *   head    0 <= head < mask_heads
 *   lts, lte, uts, ute   as in FMMaskSetBounds
 *   Every (sample, head) needs bounds before FMMaskSetUp. For new bounds every training step,
 *   call it again for each sample, then FMMaskSetUp and FMPlanSetUp (same sizes).
 */
FMErrorCode FMMaskSetSampleBounds(FMMask mask, int sample, int head, const int32_t *lts,
                                  const int32_t *lte, const int32_t *uts, const int32_t *ute);

/*
 * FMMaskSetAllBounds - user-supplied bounds for every sample and mask head in one call (type
 *   "bounds"). Not collective. As FMMaskSetSampleBounds for each (sample, head), with the
 *   checks and copies on the context's CPU threads: the fast way to give new bounds every
 *   training step when they are one array, such as a data loader's int32 tensor of shape
 *   (mask_batch, mask_heads, seqlen_k).
 *   lts, lte, uts, ute   int32[mask_batch][mask_heads][seqlen_k] each (sample slowest, key
 *                        fastest), or NULL when absent; the arrays are copied. Rules and
 *                        defaults as in FMMaskSetBounds. An error names the sample, head and
 *                        column, and leaves the mask's bounds as they were.
 */
FMErrorCode FMMaskSetAllBounds(FMMask mask, const int32_t *lts, const int32_t *lte,
                               const int32_t *uts, const int32_t *ute);

/* FMMaskSetBlockSize - block (1 to FM_MASK_MAX_SEQLEN, else FM_ERR_ARG_OUTOFRANGE), the
 *   key/query block size of the summaries of mask (default 128). Not collective.
 *   Option: -fm_mask_block_size */
FMErrorCode FMMaskSetBlockSize(FMMask mask, int block);

/* FMMaskSetFromOptions - read every -fm_mask_* option into mask. Collective; an error on any
 *   rank is an error on every rank. */
FMErrorCode FMMaskSetFromOptions(FMMask mask);
/*
 * FMMaskSetOptionsPrefix - set the prefix that FMMaskSetFromOptions puts after the dash of
 *   every option it reads, so that a program holds several objects with their own options:
 *   with prefix "a_", -fm_mask_type is read as -a_fm_mask_type. NULL or "" clears it. The prefix may not
 *   start with '-' or contain blanks. Not collective (give every rank the same prefix).
 *   mask     the object
 *   prefix  the prefix (copied), or NULL
 * FMMaskGetOptionsPrefix - the current prefix (borrowed; NULL when none). Not collective.
 */
FMErrorCode FMMaskSetOptionsPrefix(FMMask mask, const char *prefix);
FMErrorCode FMMaskGetOptionsPrefix(FMMask mask, const char **prefix);

/*
 * FMMaskSetUp - build the bounds (for builder types), validate them (0 <= start <= seqlen_q,
 *   start <= end, sizes, heads, parameters) and normalize empty intervals; the per-block
 *   summaries are computed here on several ranks, and on one rank when something first needs
 *   them (the one-rank CUDA path never does: the GPU builds its own).
 *   Collective; an error on any rank is returned on every rank, and ranks whose masks differ
 *   (sizes, type, causal flag, block size or bounds) all get FM_ERR_MISMATCH. Call it on every
 *   rank even when only some ranks changed their mask since the last SetUp: those rebuild, and
 *   every rank checks the result. Nothing is rebuilt when no rank changed its mask.
 *   mask  the mask
 */
FMErrorCode FMMaskSetUp(FMMask mask);

/*
 * FMMaskGetSizes - sizes set on the mask. Not collective. Any output may be NULL.
 *   seqlen_q, seqlen_k, mask_heads  out: as given to FMMaskSetSizes
 */
FMErrorCode FMMaskGetSizes(FMMask mask, int *seqlen_q, int *seqlen_k, int *mask_heads);

/*
 * FMMaskGetBounds - borrowed pointers to one head's bound vectors of sample 0 (after SetUp).
 *   Not collective. Every pointer is always valid after SetUp: absent vectors are
 *   returned in their default form (lts = lte = seqlen_q, uts = ute = 0).
 *   mask, head  the mask and the mask head (0 <= head < mask_heads)
 *   present  out (may be NULL): FM_BOUND_* bits of the vectors that are meaningful
 *   causal   out (may be NULL): whether the causal triangle is added
 *   Any of lts, lte, uts, ute may be NULL when that vector is not wanted.
 */
FMErrorCode FMMaskGetBounds(FMMask mask, int head, const int32_t **lts, const int32_t **lte,
                            const int32_t **uts, const int32_t **ute, int *present, FMBool *causal);

/*
 * FMMaskGetSampleBounds - borrowed pointers to the bound vectors of one head of one sample
 *   (after SetUp; valid until the next SetUp or Destroy). Not collective.
 *   mask    a set-up mask
 *   sample  0 <= sample < mask_batch (FMMaskGetBatch), else FM_ERR_ARG_OUTOFRANGE
 *   head    0 <= head < mask_heads
 *   lts, lte, uts, ute  out (each may be NULL): the vectors, int32[seqlen_k], absent ones in
 *           their default form
 *   present out (may be NULL): FM_BOUND_* bits of the vectors that are meaningful
 *   causal  out (may be NULL): whether the causal triangle is added
 *   FMMaskGetBounds is this call for sample 0.
 */
FMErrorCode FMMaskGetSampleBounds(FMMask mask, int sample, int head, const int32_t **lts,
                                  const int32_t **lte, const int32_t **uts, const int32_t **ute,
                                  int *present, FMBool *causal);

/*
 * FMMaskIsMasked - whether query row i may NOT attend key j for a mask head of sample 0
 *   (after SetUp).
 *   Not collective. Exact, O(1); meant for tests and tools.
 *   masked  out: FM_TRUE when the entry is masked
 */
FMErrorCode FMMaskIsMasked(FMMask mask, int head, int i, int j, FMBool *masked);

/*
 * FMMaskGetDensity - the density of mask, after SetUp. Not collective. Both numbers are exact;
 *   they are computed by the first call after a SetUp (with the mask's block summaries, if no
 *   plan has computed them yet), which writes the mask: do not call it on one mask from several
 *   threads at once.
 *   element_density  out (may be NULL): fraction of (i, j, head) entries NOT masked
 *   block_sparsity   out (may be NULL): fraction of block x block tiles fully masked
 */
FMErrorCode FMMaskGetDensity(FMMask mask, double *element_density, double *block_sparsity);

/*
 * FMMaskView - print the type, sizes, parameters, density and a coarse picture of mask to fp.
 *   Collective: every rank calls it (it sends no message; rank 0 prints what it holds, which
 *   after FMMaskSetUp is the same on every rank). fp NULL means stdout. Option: -fm_mask_view
 */
FMErrorCode FMMaskView(FMMask mask, FILE *fp);

/*
 * FMMaskSave - write the mask to the HDF5 file path as /masks/<name> (created or appended).
 *   Collective; rank 0 writes. When rank 0 fails, it returns its code and the other ranks
 *   FM_ERR_COLLECTIVE with rank 0's message. path and name must be the same on every rank
 *   (else FM_ERR_MISMATCH on every rank). Needs HDF5 (FM_ERR_SUP otherwise).
 */
FMErrorCode FMMaskSave(FMMask mask, const char *path, const char *name);

/*
 * FMMaskLoad - read /masks/<name> from the HDF5 file path into a new, set-up mask of type
 *   "bounds" on the context ctx. Collective on ctx; every rank reads (name must be the same on
 *   every rank; path may differ, e.g. node-local copies, and the masks read must then agree,
 *   as FMMaskSetUp checks). A missing dataset, a wrong
 *   shape or type, or bounds out of range is an FM_ERR_HDF5 / FM_ERR_ARG_OUTOFRANGE error.
 *   Sizes beyond the FM_MASK_MAX_* limits, and datasets that disagree with the attributes or
 *   store fewer bytes than their shape needs, are FM_ERR_HDF5 before anything is allocated.
 *   String attributes may be fixed- or variable-length, ASCII or UTF-8 (h5py's). Files are
 *   data from a trusted source: HDF5 itself can crash on some corrupt files.
 */
FMErrorCode FMMaskLoad(FMContext ctx, const char *path, const char *name, FMMask *mask);

/* FMMaskDestroy - drop a reference; frees at zero and sets *mask = NULL. Collective. */
FMErrorCode FMMaskDestroy(FMMask *mask);

#ifdef __cplusplus
}
#endif
#endif
