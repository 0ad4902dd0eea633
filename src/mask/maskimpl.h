/*
 * maskimpl.h - private to src/mask: the mask type table and the resolved builder parameters
 * (user-set values, or the defaults drawn from the seed), shared by mask.c (View),
 * builders.c (the builders) and maskio.c (parameters written as HDF5 attributes).
 * Not installed.
 */
#ifndef FLASHMASK_MASKIMPL_H
#define FLASHMASK_MASKIMPL_H

#include <flashmask/private/fmimpl.h>

/* Builder types, in the order of doc/format.md section 3, then "bounds". */
typedef enum {
  FM_MT_FULL = 0, FM_MT_CAUSAL, FM_MT_SLIDINGWINDOW, FM_MT_CAUSALDOCUMENT, FM_MT_DOCUMENT, FM_MT_SHAREQUESTION,
  FM_MT_GLOBALSLIDINGWINDOW, FM_MT_CAUSALBLOCKWISE, FM_MT_PREFIXLMDOCUMENT, FM_MT_PREFIXLMCAUSAL, FM_MT_QKSPARSE,
  FM_MT_RANDOMEVICTION, FM_MT_BOUNDS, FM_MT_N
} FMMaskTypeId;

/* NULL-terminated names indexed by FMMaskTypeId (builders.c; public as FMMaskTypeList). */
extern const char *const FMMaskTypeNames_Private[FM_MT_N + 1];

/* The size limits of one mask (FM_MASK_MAX_* in flashmask.h), in 64 bits; summary.c. */
FMErrorCode FMMaskCheckSizes_Private(int seqlen_q, int seqlen_k, int mask_heads, int block, const char *what);

/* mask_batch (>= 1) times mask_heads times seqlen_k within FM_MASK_MAX_ENTRIES (bounds.c). */
FMErrorCode FMMaskCheckBatch_Private(int mask_batch, int mask_heads, int seqlen_k, const char *what);
/* Free the bounds given with FMMaskSetBounds / FMMaskSetSampleBounds (mask.c). */
void FMMaskFreeUserBounds_Private(FMMask m);
/* Free the document lengths given with FMMaskSetSampleDocuments (mask.c; before the batch changes). */
void FMMaskFreeSampleDocuments_Private(FMMask m);

/* Index of a type name, or -1 when unknown. */
int FMMaskTypeIndex_Private(const char *name);

/*
 * The effective parameters of the mask's type (positions along the key axis, 0..seqlen_k).
 * Only the fields the type uses are filled; arrays are owned (free with FMMaskParamsFree_Private).
 * The *_default flags say which values are defaults (drawn from the seed or, for prefixes,
 * half of each document) rather than set by the user.
 */
typedef struct {
  unsigned long seed;                                     /* the seed the defaults are drawn from */
  int ndocs; int *docs; int docs_default;                 /* document lengths, sum = seqlen_k */
  int *nseg; int nsegtot; int *seglen; int segs_default;  /* share_question: per document, question then answers */
  int window_left, window_right;                         /* sliding windows */
  int nglobal;                                           /* global_sliding_window */
  int nprefix; int *prefix; int prefix_default;           /* prefix_lm_document (per doc) / prefix_lm_causal (1) */
  int nspans; int *span_start, *span_len; int spans_default;/* qk_sparse */
} FMMaskParams;

/*
 * FMMaskGetParams_Private - resolve and validate the parameters of m's type (sizes must be set).
 *   Not collective. Errors name the parameter (FM_ERR_ARG_SIZ, FM_ERR_ARG_OUTOFRANGE, FM_ERR_ARG_INCOMP).
 */
FMErrorCode FMMaskGetParams_Private(FMMask m, FMMaskParams *p);
/* The same for one sample: its random defaults are drawn from the seed m->seed + sample
 * (sample 0 is FMMaskGetParams_Private); values set by the user are shared by all samples,
 * but for the sample's own document lengths (FMMaskSetSampleDocuments). */
FMErrorCode FMMaskGetSampleParams_Private(FMMask m, int sample, FMMaskParams *p);
void FMMaskParamsFree_Private(FMMaskParams *p);

#endif
