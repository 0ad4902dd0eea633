/*
 * test_mask_errors - bad input to every FMMask function: NULL and wrong-class handles, wrong
 * sizes, bounds out of range, heads out of range, parameters that do not fit the sizes, bad
 * options and wrong call order. Each must return the documented error code with a message
 * naming the argument, and leave the mask usable. On 2+ ranks, masks that differ between
 * ranks give FM_ERR_MISMATCH everywhere.
 */
#include "fmtest.h"
#include <flashmask/private/fmimpl.h>

#define E FMT_EXPECT_ERR

static void null_and_class(FMContext ctx)
{
  FMMask m = NULL, bad = (FMMask)ctx;
  FMMaskType type;
  const int32_t *p;
  int x, one = 1;
  FMBool b;
  double d;
  E(FMMaskCreate(NULL, &m), FM_ERR_ARG_NULL, "argument 1");
  E(FMMaskCreate(ctx, NULL), FM_ERR_ARG_NULL, "argument 2");
  E(FMMaskCreate((FMContext)&one, &m), FM_ERR_ARG_WRONG, "argument 1");
  /* a NULL mask and a context passed as a mask, to every function */
  for (int k = 0; k < 2; k++) {
    FMMask o = k ? bad : NULL;
    FMErrorCode c = k ? FM_ERR_ARG_WRONG : FM_ERR_ARG_NULL;
    E(FMMaskSetSizes(o, 10, 10, 1), c, "argument 1");
    E(FMMaskSetType(o, FMMASKCAUSAL), c, "argument 1");
    E(FMMaskGetType(o, &type), c, "argument 1");
    E(FMMaskSetCausal(o, FM_TRUE), c, "argument 1");
    E(FMMaskSetDocuments(o, 1, &one), c, "argument 1");
    E(FMMaskSetWindow(o, 1, 1), c, "argument 1");
    E(FMMaskSetGlobalTokens(o, 1), c, "argument 1");
    E(FMMaskSetPrefixLengths(o, 1, &one), c, "argument 1");
    E(FMMaskSetShareQuestion(o, 0, NULL, NULL), c, "argument 1");
    E(FMMaskSetQKSparseSpans(o, 0, NULL, NULL), c, "argument 1");
    E(FMMaskSetSeed(o, 1), c, "argument 1");
    E(FMMaskSetBounds(o, 0, NULL, NULL, NULL, NULL), c, "argument 1");
    E(FMMaskSetBlockSize(o, 64), c, "argument 1");
    E(FMMaskSetFromOptions(o), c, "argument 1");
    E(FMMaskSetUp(o), c, "argument 1");
    E(FMMaskGetSizes(o, &x, &x, &x), c, "argument 1");
    E(FMMaskGetBounds(o, 0, &p, &p, &p, &p, &x, &b), c, "argument 1");
    E(FMMaskIsMasked(o, 0, 0, 0, &b), c, "argument 1");
    E(FMMaskGetDensity(o, &d, &d), c, "argument 1");
    E(FMMaskView(o, NULL), c, "argument 1");
  }
  E(FMMaskDestroy(NULL), FM_ERR_ARG_NULL, "argument 1");
  E(FMMaskDestroy(&bad), FM_ERR_ARG_WRONG, "argument 1");
  FMT_CHECK(bad == (FMMask)ctx, "a failed Destroy must not touch the handle");
  m = NULL;
  FMT_CALL(FMMaskDestroy(&m)); /* NULL handle: nothing to do */
  FMT_CALL(FMMaskCreate(ctx, &m));
  E(FMMaskSetType(m, NULL), FM_ERR_ARG_NULL, "argument 2");
  E(FMMaskSetType(m, "triangular"), FM_ERR_ARG_WRONG, "triangular");
  E(FMMaskGetType(m, NULL), FM_ERR_ARG_NULL, "argument 2");
  FMT_CALL(FMMaskGetType(m, &type));
  FMT_CHECK(!strcmp(type, FMMASKFULL), "a failed SetType must keep the type (got %s)", type);
  E(FMMaskSetCausal(m, (FMBool)5), FM_ERR_ARG_WRONG, "causal");
  FMT_CALL(FMMaskDestroy(&m));
  FMT_CHECK(m == NULL, "Destroy must NULL the handle");
}

static void sizes_and_order(FMContext ctx)
{
  FMMask m;
  const int32_t *p;
  FMBool b;
  double d;
  int refct = ctx->hdr.refct;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CHECK(ctx->hdr.refct == refct + 1, "FMMaskCreate must take a reference on the context");
  E(FMMaskSetSizes(m, 0, 10, 1), FM_ERR_ARG_SIZ, "seqlen_q");
  E(FMMaskSetSizes(m, 10, -3, 1), FM_ERR_ARG_SIZ, "seqlen_k");
  E(FMMaskSetSizes(m, 10, 10, 0), FM_ERR_ARG_SIZ, "mask_heads");
  E(FMMaskSetUp(m), FM_ERR_ORDER, "FMMaskSetSizes");
  E(FMMaskSetBounds(m, 0, NULL, NULL, NULL, NULL), FM_ERR_ORDER, "FMMaskSetSizes");
  E(FMMaskGetBounds(m, 0, &p, NULL, NULL, NULL, NULL, NULL), FM_ERR_ORDER, "SetUp");
  E(FMMaskIsMasked(m, 0, 0, 0, &b), FM_ERR_ORDER, "SetUp");
  E(FMMaskGetDensity(m, &d, NULL), FM_ERR_ORDER, "SetUp");
  E(FMMaskView(m, NULL), FM_ERR_ORDER, "SetUp");
  E(FMMaskGetDesc_Private(m, NULL), FM_ERR_ARG_NULL, "argument 2");
  FMT_CALL(FMMaskSetSizes(m, 100, 120, 2));
  FMT_CALL(FMMaskSetType(m, FMMASKCAUSAL));
  FMT_CALL(FMMaskSetUp(m));
  E(FMMaskGetBounds(m, 2, &p, NULL, NULL, NULL, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, "head");
  E(FMMaskGetBounds(m, -1, &p, NULL, NULL, NULL, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, "head");
  E(FMMaskIsMasked(m, 2, 0, 0, &b), FM_ERR_ARG_OUTOFRANGE, "head");
  E(FMMaskIsMasked(m, 0, 100, 0, &b), FM_ERR_ARG_OUTOFRANGE, "(i)");
  E(FMMaskIsMasked(m, 0, 0, 120, &b), FM_ERR_ARG_OUTOFRANGE, "(j)");
  E(FMMaskIsMasked(m, 0, -1, 0, &b), FM_ERR_ARG_OUTOFRANGE, "(i)");
  E(FMMaskIsMasked(m, 0, 0, 0, NULL), FM_ERR_ARG_NULL, "argument 5");
  FMT_CALL(FMMaskIsMasked(m, 1, 0, 21, &b));
  FMT_CHECK(b == FM_TRUE, "causal 100x120: row 0 may not see key 21 (bottom-right diagonal)");
  FMT_CALL(FMMaskIsMasked(m, 1, 0, 20, &b));
  FMT_CHECK(b == FM_FALSE, "causal 100x120: row 0 sees key 20");
  /* a change of sizes, type or parameter un-sets the mask */
  FMT_CALL(FMMaskSetSeed(m, 3));
  E(FMMaskGetBounds(m, 0, &p, NULL, NULL, NULL, NULL, NULL), FM_ERR_ORDER, "SetUp");
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMMaskSetType(m, FMMASKCAUSAL)); /* the same type keeps it set up */
  FMT_CALL(FMMaskGetBounds(m, 0, &p, NULL, NULL, NULL, NULL, NULL));
  FMT_CALL(FMMaskSetSizes(m, 100, 100, 2));
  E(FMMaskIsMasked(m, 0, 0, 0, &b), FM_ERR_ORDER, "SetUp");
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMMaskSetBlockSize(m, 32));
  E(FMMaskGetDensity(m, &d, NULL), FM_ERR_ORDER, "SetUp");
  E(FMMaskSetBlockSize(m, 0), FM_ERR_ARG_OUTOFRANGE, "block");
  /* the reference count: the mask keeps the context alive */
  FMT_CALL(FMMaskDestroy(&m));
  FMT_CHECK(ctx->hdr.refct == refct, "FMMaskDestroy must drop the context reference (refct %d, expected %d)", ctx->hdr.refct, refct);
  FMT_CALL(FMMaskCreate(ctx, &m));
  m->hdr.refct++; /* as FMPlanSetMask does */
  {
    FMMask alias = m;
    FMT_CALL(FMMaskDestroy(&alias));
    FMT_CHECK(alias == NULL && m->hdr.classid == FM_CLASSID_MASK, "dropping one of two references must keep the mask");
  }
  FMT_CALL(FMMaskDestroy(&m));
}

/*
 * Masks that carry one vector of an interval (lts alone, ute alone): the validator reads only
 * that vector and checks it against the other's default (lte = seqlen_q, uts = 0); a start
 * equal to its default end stays as it is; SetUp again after new bounds builds the new ones.
 */
static void bounds_one_carried(FMContext ctx)
{
  FMMask m;
  int32_t a[50], z[50];
  const int32_t *l[4];
  for (int j = 0; j < 50; j++) { a[j] = j < 25 ? 40 : 5 + j % 7; z[j] = j % 3; }
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, 40, 50, 2));
  FMT_CALL(FMMaskSetType(m, FMMASKBOUNDS));
  for (int h = 0; h < 2; h++) FMT_CALL(FMMaskSetBounds(m, h, a, NULL, NULL, NULL));
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMMaskGetBounds(m, 1, &l[0], &l[1], &l[2], &l[3], NULL, NULL));
  for (int j = 0; j < 50; j++)
    FMT_CHECK(l[0][j] == a[j] && l[1][j] == 40 && l[2][j] == 0 && l[3][j] == 0, "lts alone, column %d: (%d, %d, %d, %d), expected (%d, 40, 0, 0)",
              j, (int)l[0][j], (int)l[1][j], (int)l[2][j], (int)l[3][j], (int)a[j]);
  m->bnd[0][50 + 30] = 41;
  E(FMMaskValidate_Private(m), FM_ERR_ARG_OUTOFRANGE, "lts[head 1][column 30] = 41");
  m->bnd[0][50 + 30] = -3;
  E(FMMaskValidate_Private(m), FM_ERR_ARG_OUTOFRANGE, "lts[head 1][column 30] = -3");
  m->bnd[0][50 + 30] = a[30];
  FMT_CALL(FMMaskValidate_Private(m));
  /* new bounds on the same mask: ute alone now (the fast checks refuse a bad one first) */
  z[4] = -1;
  E(FMMaskSetBounds(m, 0, NULL, NULL, NULL, z), FM_ERR_ARG_OUTOFRANGE, "ute[4] = -1");
  z[4] = 41;
  E(FMMaskSetBounds(m, 0, NULL, NULL, NULL, z), FM_ERR_ARG_OUTOFRANGE, "ute[4] = 41");
  z[4] = 1;
  FMT_CALL(FMMaskSetSizes(m, 40, 50, 1)); /* fewer heads: the old bounds are discarded */
  FMT_CALL(FMMaskSetBounds(m, 0, NULL, NULL, NULL, z));
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMMaskGetBounds(m, 0, &l[0], &l[1], &l[2], &l[3], NULL, NULL));
  for (int j = 0; j < 50; j++)
    FMT_CHECK(l[0][j] == 40 && l[1][j] == 40 && l[2][j] == 0 && l[3][j] == z[j], "ute alone, column %d: (%d, %d, %d, %d), expected (40, 40, 0, %d)",
              j, (int)l[0][j], (int)l[1][j], (int)l[2][j], (int)l[3][j], (int)z[j]);
  m->bnd[3][17] = -2;
  E(FMMaskValidate_Private(m), FM_ERR_ARG_OUTOFRANGE, "ute[head 0][column 17] = -2");
  m->bnd[3][17] = 41;
  E(FMMaskValidate_Private(m), FM_ERR_ARG_OUTOFRANGE, "ute[head 0][column 17] = 41");
  m->bnd[3][17] = z[17];
  FMT_CALL(FMMaskValidate_Private(m));
  FMT_CALL(FMMaskDestroy(&m));
}

static void bounds(FMContext ctx)
{
  FMMask m;
  int32_t a[50], c[50], z[50];
  for (int j = 0; j < 50; j++) { a[j] = 10; c[j] = 20; z[j] = 0; }
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, 40, 50, 2));
  FMT_CALL(FMMaskSetType(m, FMMASKBOUNDS));
  E(FMMaskSetUp(m), FM_ERR_ORDER, "FMMaskSetBounds");
  E(FMMaskSetBounds(m, 2, a, NULL, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, "head");
  E(FMMaskSetBounds(m, -1, a, NULL, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, "head");
  a[7] = 41;
  E(FMMaskSetBounds(m, 0, a, NULL, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, "lts[7] = 41");
  a[7] = -1;
  E(FMMaskSetBounds(m, 0, a, NULL, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, "lts[7] = -1");
  a[7] = 10;
  c[3] = 5;
  E(FMMaskSetBounds(m, 0, a, c, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, "lts[3]");
  E(FMMaskSetBounds(m, 0, NULL, NULL, a, c), FM_ERR_ARG_OUTOFRANGE, "uts[3]");
  c[3] = 20;
  z[9] = 41;
  E(FMMaskSetBounds(m, 0, NULL, NULL, NULL, z), FM_ERR_ARG_OUTOFRANGE, "ute[9]");
  z[9] = 0;
  E(FMMaskSetBounds(m, 0, NULL, c, NULL, NULL), FM_ERR_ARG_INCOMP, "lte");
  E(FMMaskSetBounds(m, 0, NULL, NULL, a, NULL), FM_ERR_ARG_INCOMP, "uts");
  FMT_CALL(FMMaskSetBounds(m, 0, a, c, NULL, NULL));
  E(FMMaskSetUp(m), FM_ERR_ORDER, "head 1");
  FMT_CALL(FMMaskSetBounds(m, 1, a, NULL, NULL, NULL));
  E(FMMaskSetUp(m), FM_ERR_ARG_INCOMP, "head 1");
  FMT_CALL(FMMaskSetBounds(m, 1, a, c, NULL, NULL)); /* setting a head again replaces it */
  FMT_CALL(FMMaskSetUp(m));
  /* a bound corrupted after set-up is caught by the validator (the vectors the mask carries: lts
     and lte here; uts and ute are at their defaults by construction and not read) */
  m->bnd[1][60] = 41;
  E(FMMaskValidate_Private(m), FM_ERR_ARG_OUTOFRANGE, "lte[head 1][column 10] = 41");
  m->bnd[1][60] = 20;
  m->bnd[0][5] = 30; /* lts 30 > lte 20 */
  E(FMMaskValidate_Private(m), FM_ERR_ARG_OUTOFRANGE, "lts[head 0][column 5] = 30");
  m->bnd[0][5] = 10;
  FMT_CALL(FMMaskValidate_Private(m));
  /* changing seqlen_k discards the user bounds */
  FMT_CALL(FMMaskSetSizes(m, 40, 60, 2));
  E(FMMaskSetUp(m), FM_ERR_ORDER, "FMMaskSetBounds");
  FMT_CALL(FMMaskDestroy(&m));
  bounds_one_carried(ctx);
}

static FMMask typed(FMContext ctx, const char *type, int S)
{
  FMMask m;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, S, S, 1));
  FMT_CALL(FMMaskSetType(m, type));
  return m;
}

static void parameters(FMContext ctx)
{
  FMMask m;
  int docs[3] = {4000, 2000, 2000}, zero[2] = {5, 0}, neg = -1, big = 9000;
  int nseg[2] = {2, 3}, nseg1 = 1, sl[5] = {10, 20, 30, 40, 50}, sl0[5] = {10, 0, 30, 40, 50};
  int st[2] = {10, 100}, ln[2] = {5, 20};

  m = typed(ctx, FMMASKCAUSALDOCUMENT, 8192);
  E(FMMaskSetDocuments(m, -1, docs), FM_ERR_ARG_OUTOFRANGE, "ndocs");
  E(FMMaskSetDocuments(m, 2, NULL), FM_ERR_ARG_NULL, "lengths");
  E(FMMaskSetDocuments(m, 2, zero), FM_ERR_ARG_OUTOFRANGE, "lengths[1]");
  FMT_CALL(FMMaskSetDocuments(m, 3, docs));
  E(FMMaskSetUp(m), FM_ERR_ARG_SIZ, "sum to 8000, expected seqlen_k = 8192");
  docs[2] = 2192;
  FMT_CALL(FMMaskSetDocuments(m, 3, docs));
  FMT_CALL(FMMaskSetUp(m)); /* the mask is usable after an error */
  FMT_CALL(FMMaskDestroy(&m));

  m = typed(ctx, FMMASKGLOBALSLIDINGWINDOW, 100);
  E(FMMaskSetWindow(m, -1, 0), FM_ERR_ARG_OUTOFRANGE, "left");
  E(FMMaskSetWindow(m, 0, -2), FM_ERR_ARG_OUTOFRANGE, "right");
  E(FMMaskSetGlobalTokens(m, -1), FM_ERR_ARG_OUTOFRANGE, "nglobal");
  FMT_CALL(FMMaskSetGlobalTokens(m, 101));
  E(FMMaskSetUp(m), FM_ERR_ARG_OUTOFRANGE, "global tokens");
  FMT_CALL(FMMaskSetGlobalTokens(m, 100));
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMMaskDestroy(&m));

  m = typed(ctx, FMMASKPREFIXLMDOCUMENT, 100);
  FMT_CALL(FMMaskSetDocuments(m, 2, (int[]){40, 60}));
  E(FMMaskSetPrefixLengths(m, 1, NULL), FM_ERR_ARG_NULL, "prefix");
  E(FMMaskSetPrefixLengths(m, 1, &neg), FM_ERR_ARG_OUTOFRANGE, "prefix[0]");
  E(FMMaskSetPrefixLengths(m, -2, &neg), FM_ERR_ARG_OUTOFRANGE, "ndocs");
  FMT_CALL(FMMaskSetPrefixLengths(m, 3, (int[]){1, 2, 3}));
  E(FMMaskSetUp(m), FM_ERR_ARG_INCOMP, "3 prefix lengths");
  FMT_CALL(FMMaskSetPrefixLengths(m, 2, (int[]){41, 2}));
  E(FMMaskSetUp(m), FM_ERR_ARG_OUTOFRANGE, "document 0");
  FMT_CALL(FMMaskSetPrefixLengths(m, 2, (int[]){40, 60}));
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMMaskSetType(m, FMMASKPREFIXLMCAUSAL));
  E(FMMaskSetUp(m), FM_ERR_ARG_INCOMP, "one prefix");
  FMT_CALL(FMMaskSetPrefixLengths(m, 1, &big));
  E(FMMaskSetUp(m), FM_ERR_ARG_OUTOFRANGE, "9000");
  FMT_CALL(FMMaskSetPrefixLengths(m, 0, NULL)); /* back to the default seqlen_k / 2 */
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMMaskDestroy(&m));

  m = typed(ctx, FMMASKSHAREQUESTION, 150);
  E(FMMaskSetShareQuestion(m, 1, &nseg1, sl), FM_ERR_ARG_OUTOFRANGE, "nseg[0]");
  E(FMMaskSetShareQuestion(m, 2, nseg, sl0), FM_ERR_ARG_OUTOFRANGE, "seglen[1]");
  E(FMMaskSetShareQuestion(m, 2, NULL, sl), FM_ERR_ARG_NULL, "nseg");
  E(FMMaskSetShareQuestion(m, 2, nseg, NULL), FM_ERR_ARG_NULL, "seglen");
  FMT_CALL(FMMaskSetShareQuestion(m, 2, nseg, sl)); /* documents 30 and 120 */
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMMaskSetDocuments(m, 2, (int[]){40, 110}));
  E(FMMaskSetUp(m), FM_ERR_ARG_SIZ, "document 0");
  FMT_CALL(FMMaskSetDocuments(m, 3, (int[]){30, 60, 60}));
  E(FMMaskSetUp(m), FM_ERR_ARG_INCOMP, "documents");
  FMT_CALL(FMMaskSetDocuments(m, 0, NULL));
  FMT_CALL(FMMaskSetSizes(m, 150, 160, 1));
  E(FMMaskSetUp(m), FM_ERR_ARG_SIZ, "seqlen_k = 160");
  FMT_CALL(FMMaskDestroy(&m));

  m = typed(ctx, FMMASKQKSPARSE, 100);
  E(FMMaskSetQKSparseSpans(m, -1, st, ln), FM_ERR_ARG_OUTOFRANGE, "nspans");
  E(FMMaskSetQKSparseSpans(m, 1, &neg, ln), FM_ERR_ARG_OUTOFRANGE, "start[0]");
  E(FMMaskSetQKSparseSpans(m, 1, st, &neg), FM_ERR_ARG_OUTOFRANGE, "len[0]");
  E(FMMaskSetQKSparseSpans(m, 1, NULL, ln), FM_ERR_ARG_NULL, "start");
  FMT_CALL(FMMaskSetQKSparseSpans(m, 2, st, ln)); /* [100, 120) is past seqlen_k = 100 */
  E(FMMaskSetUp(m), FM_ERR_ARG_OUTOFRANGE, "span 1");
  FMT_CALL(FMMaskSetSizes(m, 120, 120, 1));
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMMaskDestroy(&m));
}

static void options(FMContext ctx)
{
  FMMask m;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMOptionsSetValue("-fm_mask_type", "triangular"));
  E(FMMaskSetFromOptions(m), FM_ERR_OPT, "-fm_mask_type");
  FMT_CALL(FMOptionsSetValue("-fm_mask_type", "causal"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_seqlen_q", "64"));
  E(FMMaskSetFromOptions(m), FM_ERR_OPT, "-fm_mask_seqlen_k");
  FMT_CALL(FMOptionsSetValue("-fm_mask_seqlen_k", "-64"));
  E(FMMaskSetFromOptions(m), FM_ERR_OPT, "-fm_mask_seqlen_k");
  FMT_CALL(FMOptionsSetValue("-fm_mask_seqlen_k", "64"));
  /* -fm_mask_seqlen is named itself, not as the two lengths it sets */
  FMT_CALL(FMOptionsSetValue("-fm_mask_seqlen", "-5"));
  E(FMMaskSetFromOptions(m), FM_ERR_OPT, "Option -fm_mask_seqlen is -5");
  FMT_CALL(FMOptionsSetValue("-fm_mask_seqlen", "64")); /* the lengths already set */
  FMT_CALL(FMOptionsSetValue("-fm_mask_window_left", "-5"));
  E(FMMaskSetFromOptions(m), FM_ERR_OPT, "-fm_mask_window_left");
  FMT_CALL(FMOptionsSetValue("-fm_mask_window_left", "5"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_seed", "x12"));
  E(FMMaskSetFromOptions(m), FM_ERR_OPT, "-fm_mask_seed");
  FMT_CALL(FMOptionsSetValue("-fm_mask_seed", "12"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_docs", "10,0"));
  E(FMMaskSetFromOptions(m), FM_ERR_ARG_OUTOFRANGE, "lengths[1]");
  FMT_CALL(FMOptionsSetValue("-fm_mask_docs", "10,54"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_spans", "1,2,3"));
  E(FMMaskSetFromOptions(m), FM_ERR_OPT, "-fm_mask_spans");
  FMT_CALL(FMOptionsSetValue("-fm_mask_spans", "1,2"));
  FMT_CALL(FMOptionsSetValue("-fm_mask_segments", "5,5"));
  E(FMMaskSetFromOptions(m), FM_ERR_OPT, "-fm_mask_nsegments");
  FMT_CALL(FMOptionsSetValue("-fm_mask_nsegments", "3"));
  E(FMMaskSetFromOptions(m), FM_ERR_OPT, "-fm_mask_segments");
  FMT_CALL(FMOptionsSetValue("-fm_mask_nsegments", "2"));
  FMT_CALL(FMMaskSetFromOptions(m));
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMMaskDestroy(&m));
}

/* Ranks that build different masks: FM_ERR_MISMATCH on every rank, nobody hangs. */
static void mismatch(FMContext ctx)
{
  int rank, size;
  FMMask m;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (size < 2) return;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, 256, 256, 1));
  FMT_CALL(FMMaskSetType(m, FMMASKRANDOMEVICTION));
  FMT_CALL(FMMaskSetSeed(m, rank == size - 1 ? 7 : 8));
  E(FMMaskSetUp(m), FM_ERR_MISMATCH, "Ranks disagree on the mask");
  FMT_CALL(FMMaskSetSeed(m, 8));
  FMT_CALL(FMMaskSetUp(m));
  {
    /* Changed after set-up on one rank only: every rank still enters the same agreement (no
       hang), the change is a mismatch on every rank, and the mask state advances everywhere. */
    const int state = m->state;
    uint64_t hash = m->hash;
    FMT_CHECK(hash != 0, "a set-up mask has a hash");
    if (rank == 0) FMT_CALL(FMMaskSetSeed(m, 9));
    E(FMMaskSetUp(m), FM_ERR_MISMATCH, "Ranks disagree on the mask");
    FMT_CHECK(rank == 0 ? !m->hdr.setupcalled : m->hdr.setupcalled && m->hash == hash,
              "after the mismatch: rank 0 must be not set up, the others unchanged (set up %d)", m->hdr.setupcalled);
    if (rank == 0) FMT_CALL(FMMaskSetSeed(m, 8));
    FMT_CALL(FMMaskSetUp(m));
    FMT_CHECK(m->hash == hash && m->state == state + 1, "the rebuilt mask: hash %#llx (expected %#llx), state %d (expected %d)",
              (unsigned long long)m->hash, (unsigned long long)hash, m->state, state + 1);
    FMT_CALL(FMMaskSetUp(m)); /* nothing changed anywhere: no new state */
    FMT_CHECK(m->state == state + 1, "SetUp of an unchanged mask advanced the state to %d", m->state);
  }
  FMT_CALL(FMMaskDestroy(&m));
}

int main(int argc, char **argv)
{
  FMContext ctx;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_mask_errors"));
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetUp(ctx));
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  null_and_class(ctx);
  sizes_and_order(ctx);
  bounds(ctx);
  parameters(ctx);
  mismatch(ctx);
  options(ctx); /* last: the options stay in the database */
  FMT_CALL(FMContextDestroy(&ctx));
  {
    int rc = fmt_finish("test_mask_errors");
    FMT_CALL(FMFinalize());
    return rc;
  }
}
