/*
 * test_mask_batch - per-sample masks (FMMaskSetBatch, issue 11) on the CPU backend:
 *  - batch builders pack every sample differently; forward and backward with B = 3, GQA 4:2,
 *    S_q != S_k against a float64 reference per sample (batch_cases.h), fp32;
 *  - mask_batch 1 gives bitwise the results of a batch mask holding it in every sample, and
 *    each sample of a batch run equals bitwise a batch-1 plan on that sample's bounds;
 *  - the update path: new per-sample bounds, FMMaskSetUp, FMPlanSetUp give bitwise the
 *    results of a fresh mask and plan;
 *  - bad input: sample out of range, a mask batch that is neither 1 nor the plan's batch;
 *  - FMMaskSetAllBounds against FMMaskSetSampleBounds, its errors and their (sample, head);
 *  - FMMaskSetSampleDocuments: a sample's own document lengths against a batch-1 mask on them;
 *  - HDF5: a batch mask saved and loaded keeps every sample; a file written before issue 11
 *    (-old FILE) loads as mask_batch 1 with the builders' bounds;
 *  - a "cp" plan on one rank with one chunk is bitwise the local plan on a per-sample mask.
 * Usage: test_mask_batch [-dir DIR] [-old FILE]     (1 rank)
 *        test_mask_batch -cp                        (2 ranks: a "cp" plan runs mask_batch 3 and 1 against
 *                                                    the float64 reference; a mask batch that is not the
 *                                                    plan's is refused)
 */
#include <flashmask/fmconf.h>
#include "batch_cases.h"

/* Forward then backward on host tensors (CPU backend). */
static void run_cpu(FMPlan plan, FMDType dt, const size_t n[4], size_t nl, void *const in[4], void *const out[4], float *lse)
{
  (void)nl;
  for (int t = 0; t < 4; t++) memset(out[t], 0xff, n[t < 2 ? 0 : 1] * FMDTypeSize(dt)); /* NaN poison */
  FMT_CALL(FMPlanForward(plan, in[0], in[1], in[2], out[0], lse));
  FMT_CALL(FMPlanBackward(plan, in[0], in[1], in[2], out[0], lse, in[3], out[1], out[2], out[3]));
}

/* Sample b of a batch run equals a batch-1 plan on sample b's bounds (every output, bitwise). */
static void check_split(FMContext ctx, const BCShape *s, uint64_t *seed)
{
  BCShape one = *s;
  BCData d, e;
  FMMask m = bc_builder(ctx, FMMASKCAUSALDOCUMENT, s, s->B);
  const size_t es = FMDTypeSize(s->dt);
  one.B = 1;
  bc_data_init(&d, s, seed);
  bc_data_init(&e, &one, seed);
  bc_run(ctx, run_cpu, m, s, &d);
  for (int b = 0; b < s->B; b++) {
    const int src[1] = {b};
    FMMask u = bc_copy_samples(ctx, m, 1, src);
    for (int t = 0; t < 4; t++) memcpy(e.in[t], (char *)d.in[t] + b * e.n[t] * es, e.n[t] * es);
    bc_run(ctx, run_cpu, u, &one, &e);
    for (int t = 0; t < 4; t++)
      FMT_CHECK(!memcmp(e.out[t], (char *)d.out[t] + b * e.no[t] * es, e.no[t] * es),
                "sample %d of the batch run: output %d differs from a batch-1 plan on that sample's bounds", b, t);
    FMT_CHECK(!memcmp(e.lse, d.lse + b * e.nl, e.nl * sizeof(float)), "sample %d: LSE differs from the batch-1 plan", b);
    FMT_CALL(FMMaskDestroy(&u));
  }
  printf("  each sample of a batch run equals a batch-1 plan on its bounds (bitwise)\n");
  bc_data_free(&d);
  bc_data_free(&e);
  FMT_CALL(FMMaskDestroy(&m));
}

/* New per-sample bounds every step (same sizes) through one mask and plan = a fresh mask and plan. */
static void check_update(FMContext ctx, const BCShape *s, uint64_t *seed)
{
  static const int orders[3][3] = {{0, 1, 2}, {2, 0, 1}, {1, 1, 0}};
  FMMask src = bc_builder(ctx, FMMASKDOCUMENT, s, s->B), m;
  FMPlan plan;
  BCData d;
  int mh = s->mh;
  bc_data_init(&d, s, seed);
  m = bc_copy_samples(ctx, src, s->B, orders[0]);
  plan = bc_plan(ctx, m, s, s->B);
  for (int step = 1; step < 3; step++) {
    BCOut a;
    FMMask f;
    for (int b = 0; b < s->B; b++)
      for (int h = 0; h < mh; h++) {
        const int32_t *v[4];
        FMT_CALL(FMMaskGetSampleBounds(src, orders[step][b], h, &v[0], &v[1], &v[2], &v[3], NULL, NULL));
        FMT_CALL(FMMaskSetSampleBounds(m, b, h, v[0], v[1], v[2], v[3]));
      }
    FMT_CALL(FMMaskSetUp(m));
    FMT_CALL(FMPlanSetUp(plan));
    run_cpu(plan, s->dt, d.n, d.nl, d.in, d.out, d.lse);
    bc_save(&a, &d, s->dt);
    f = bc_copy_samples(ctx, src, s->B, orders[step]);
    bc_run(ctx, run_cpu, f, s, &d);
    bc_check_same(step == 1 ? "update step 1 against a fresh plan" : "update step 2 against a fresh plan", &a, &d, s->dt, 0);
    if (step == 2) bc_check_ref("update step 2 against the reference", f, s, &d);
    bc_out_free(&a);
    FMT_CALL(FMMaskDestroy(&f));
  }
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&m));
  FMT_CALL(FMMaskDestroy(&src));
  bc_data_free(&d);
}

/* Named errors for bad input. */
static void check_errors(FMContext ctx, const BCShape *s)
{
  FMMask m;
  FMPlan plan;
  int32_t *lts = calloc((size_t)s->Sk, sizeof(int32_t));
  const int32_t *p;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, s->Sq, s->Sk, s->mh));
  FMT_EXPECT_ERR(FMMaskSetBatch(m, 0), FM_ERR_ARG_OUTOFRANGE, "mask_batch");
  FMT_CALL(FMMaskSetBatch(m, 2));
  FMT_CALL(FMMaskSetType(m, FMMASKBOUNDS));
  FMT_EXPECT_ERR(FMMaskSetSampleBounds(m, 2, 0, lts, NULL, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, "(sample) is 2");
  FMT_EXPECT_ERR(FMMaskSetSampleBounds(m, -1, 0, lts, NULL, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, "(sample) is -1");
  FMT_EXPECT_ERR(FMMaskSetSampleBounds(m, 0, s->mh, lts, NULL, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, "(head)");
  for (int h = 0; h < s->mh; h++) FMT_CALL(FMMaskSetSampleBounds(m, 0, h, lts, NULL, NULL, NULL));
  FMT_EXPECT_ERR(FMMaskSetUp(m), FM_ERR_ORDER, "sample 1, head 0");
  for (int h = 0; h < s->mh; h++) FMT_CALL(FMMaskSetSampleBounds(m, 1, h, lts, NULL, NULL, NULL));
  FMT_CALL(FMMaskSetUp(m));
  FMT_EXPECT_ERR(FMMaskGetSampleBounds(m, 2, 0, &p, NULL, NULL, NULL, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, "(sample) is 2");
  /* mask_batch 2 with a plan of batch 3 */
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetMask(plan, m));
  FMT_CALL(FMPlanSetType(plan, FMPLANLOCAL));
  FMT_CALL(FMPlanSetShape(plan, 3, s->Hq, s->Hkv, s->D, s->dt));
  FMT_EXPECT_ERR(FMPlanSetUp(plan), FM_ERR_ARG_INCOMP, "mask_batch 2");
  FMT_CALL(FMPlanSetShape(plan, 2, s->Hq, s->Hkv, s->D, s->dt));
  FMT_CALL(FMPlanSetUp(plan));
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&m));
  free(lts);
  printf("  bad sample index, mask batch and missing samples refused with named errors\n");
}

/* Bounds of every (sample, head) of a and b equal, and their batches. */
static void check_same_bounds(const char *what, FMMask a, FMMask b)
{
  int ba, bb;
  size_t nd = 0;
  FMT_CALL(FMMaskGetBatch(a, &ba));
  FMT_CALL(FMMaskGetBatch(b, &bb));
  FMT_CHECK(ba == bb, "%s: mask_batch %d, expected %d", what, bb, ba);
  if (ba != bb) return;
  for (int s = 0; s < ba; s++) nd += bc_samples_diff(a, s, b, s);
  FMT_CHECK(nd == 0, "%s: %zu bound entries differ", what, nd);
}

/*
 * FMMaskSetAllBounds (every sample and head from one array per vector) gives the bounds of
 * FMMaskSetSampleBounds per (sample, head), on the small shape and on one large enough for the
 * context's threads (2^17 entries and more); a bad entry is named by sample, head and column
 * (the first bad row in row order, with bad rows before and after it), and leaves the mask's
 * bounds as they were.
 */
static void check_all_bounds(FMContext ctx, const BCShape *s0)
{
  BCShape big = *s0, odd = *s0;
  big.B = 2;
  big.Sq = big.Sk = 8192;
  big.mh = 9; /* 147456 entries */
  odd.B = odd.mh = 1;
  odd.Sq = odd.Sk = (1 << 17) + 1; /* pieces of 1024 entries that do not divide it: the last entry is the 2nd thread's */
  for (int k = 0; k < 3; k++) {
    const BCShape *s = k == 2 ? &odd : k ? &big : s0;
    const size_t G = (size_t)s->B * s->mh, Sk = (size_t)s->Sk;
    FMMask src = bc_builder(ctx, k ? FMMASKRANDOMEVICTION : FMMASKSHAREQUESTION, s, s->B), a, b;
    int32_t *all[4] = {NULL, NULL, NULL, NULL};
    int present = 0;
    FMBool causal;
    FMT_CALL(FMMaskGetSampleBounds(src, 0, 0, NULL, NULL, NULL, NULL, &present, &causal));
    for (int v = 0; v < 4; v++)
      if (present >> v & 1) all[v] = (int32_t *)malloc(sizeof(int32_t) * G * Sk);
    FMT_CALL(FMMaskCreate(ctx, &a));
    FMT_CALL(FMMaskCreate(ctx, &b));
    for (int t = 0; t < 2; t++) {
      FMMask m = t ? b : a;
      FMT_CALL(FMMaskSetSizes(m, s->Sq, s->Sk, s->mh));
      FMT_CALL(FMMaskSetBatch(m, s->B));
      FMT_CALL(FMMaskSetType(m, FMMASKBOUNDS));
      FMT_CALL(FMMaskSetCausal(m, causal));
    }
    for (size_t g = 0; g < G; g++) {
      const int32_t *v[4];
      FMT_CALL(FMMaskGetSampleBounds(src, (int)(g / s->mh), (int)(g % s->mh), &v[0], &v[1], &v[2], &v[3], NULL, NULL));
      for (int x = 0; x < 4; x++) {
        if (all[x]) memcpy(all[x] + g * Sk, v[x], sizeof(int32_t) * Sk);
        else v[x] = NULL;
      }
      FMT_CALL(FMMaskSetSampleBounds(a, (int)(g / s->mh), (int)(g % s->mh), v[0], v[1], v[2], v[3]));
    }
    FMT_CALL(FMMaskSetAllBounds(b, all[0], all[1], all[2], all[3]));
    FMT_CALL(FMMaskSetUp(a));
    FMT_CALL(FMMaskSetUp(b));
    check_same_bounds(k == 2 ? "FMMaskSetAllBounds, random_eviction 1 x 1 x 131073" : k ? "FMMaskSetAllBounds, random_eviction 2 x 9 x 8192"
                                                                                       : "FMMaskSetAllBounds, share_question",
                      a, b);
    check_same_bounds("FMMaskSetAllBounds against the builder's bounds", src, b);
    check_same_bounds("FMMaskSetSampleBounds against the builder's bounds", src, a);
    if (k == 1) { /* bad rows 7 and 12 (sample 0 head 7, sample 1 head 3), then 3 (sample 0, head 3): the first is named */
      char want[96];
      const int32_t keep[3] = {all[0][7 * Sk + 100], all[0][12 * Sk + 5], all[0][3 * Sk + 4000]};
      all[0][7 * Sk + 100] = -1;
      all[0][12 * Sk + 5] = s->Sq + 1;
      snprintf(want, sizeof(want), "sample 0, head 7: lts[100] = -1");
      FMT_EXPECT_ERR(FMMaskSetAllBounds(b, all[0], NULL, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, want);
      all[0][3 * Sk + 4000] = s->Sq + 2;
      snprintf(want, sizeof(want), "sample 0, head 3: lts[4000] = %d", s->Sq + 2);
      FMT_EXPECT_ERR(FMMaskSetAllBounds(b, all[0], NULL, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, want);
      all[0][7 * Sk + 100] = keep[0];
      all[0][3 * Sk + 4000] = keep[2];
      FMT_EXPECT_ERR(FMMaskSetAllBounds(b, all[0], NULL, NULL, NULL), FM_ERR_ARG_OUTOFRANGE, "sample 1, head 3: lts[5]");
      all[0][12 * Sk + 5] = keep[1];
      FMT_EXPECT_ERR(FMMaskSetAllBounds(b, NULL, all[0], NULL, NULL), FM_ERR_ARG_INCOMP, "(lte) is given without");
      FMT_CALL(FMMaskSetUp(b));
      check_same_bounds("after refused FMMaskSetAllBounds calls", a, b);
    } else if (all[2] && all[3]) { /* start > end in an upper interval */
      int32_t *ute = (int32_t *)malloc(sizeof(int32_t) * G * Sk);
      memcpy(ute, all[3], sizeof(int32_t) * G * Sk);
      ute[(G - 1) * Sk + 1] = -1;
      FMT_EXPECT_ERR(FMMaskSetAllBounds(b, all[0], all[1], all[2], ute), FM_ERR_ARG_OUTOFRANGE, "(ute)");
      ute[(G - 1) * Sk + 1] = all[3][(G - 1) * Sk + 1];
      ute[Sk + 2] = all[2][Sk + 2] > 0 ? all[2][Sk + 2] - 1 : 0;
      if (all[2][Sk + 2] > 0)
        FMT_EXPECT_ERR(FMMaskSetAllBounds(b, all[0], all[1], all[2], ute), FM_ERR_ARG_OUTOFRANGE, "is greater than ute");
      free(ute);
    }
    for (int v = 0; v < 4; v++) free(all[v]);
    FMT_CALL(FMMaskDestroy(&a));
    FMT_CALL(FMMaskDestroy(&b));
    FMT_CALL(FMMaskDestroy(&src));
  }
  printf("  FMMaskSetAllBounds equals FMMaskSetSampleBounds per (sample, head); bad entries named, bounds kept\n");
}

/* A mask of type t, batch mb, seed sd, set up; docs (if nd > 0) given with FMMaskSetDocuments. */
static FMMask docs_mask(FMContext ctx, const BCShape *s, FMMaskType t, int mb, unsigned long sd, int nd, const int *docs)
{
  FMMask m;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, s->Sq, s->Sk, s->mh));
  FMT_CALL(FMMaskSetBatch(m, mb));
  FMT_CALL(FMMaskSetType(m, t));
  FMT_CALL(FMMaskSetSeed(m, sd));
  if (nd > 0) FMT_CALL(FMMaskSetDocuments(m, nd, docs));
  return m;
}

/*
 * FMMaskSetSampleDocuments: on every type that reads documents, a sample with its own lengths
 * holds the bounds of a batch-1 mask given those lengths (and the seed plus the sample, for what
 * the type still draws, such as share_question's segments); the other samples keep the mask's
 * documents (FMMaskSetDocuments) or draw theirs; ndocs = 0 gives a sample back the mask's; a new
 * batch discards them; bad input is named (the sample, the sum at SetUp).
 */
static void check_sample_docs(FMContext ctx, const BCShape *s)
{
  const FMMaskType types[] = {FMMASKCAUSALDOCUMENT, FMMASKDOCUMENT, FMMASKCAUSALBLOCKWISE, FMMASKPREFIXLMDOCUMENT, FMMASKSHAREQUESTION};
  const int wide[2] = {40, s->Sk - 40}, own[3] = {20, 30, s->Sk - 50}, own2[1] = {s->Sk}, bad[2] = {20, s->Sk - 21};
  const unsigned long sd = 7;
  for (size_t t = 0; t < sizeof(types) / sizeof(types[0]); t++) {
    for (int withwide = 0; withwide < 2; withwide++) {
      FMMask m = docs_mask(ctx, s, types[t], 3, sd, withwide ? 2 : 0, wide), r[3];
      FMT_CALL(FMMaskSetSampleDocuments(m, 1, 3, own));
      FMT_CALL(FMMaskSetSampleDocuments(m, 2, 1, own2));
      FMT_CALL(FMMaskSetSampleDocuments(m, 2, 0, NULL)); /* back to the mask's documents */
      FMT_CALL(FMMaskSetUp(m));
      for (int b = 0; b < 3; b++) {
        r[b] = b == 1 ? docs_mask(ctx, s, types[t], 1, sd + 1, 3, own) : docs_mask(ctx, s, types[t], 1, sd + (unsigned long)b, withwide ? 2 : 0, wide);
        FMT_CALL(FMMaskSetUp(r[b]));
        const size_t nd = bc_samples_diff(m, b, r[b], 0);
        FMT_CHECK(nd == 0, "%s%s: sample %d differs from its batch-1 mask in %zu entries", types[t], withwide ? " with FMMaskSetDocuments" : "",
                  b, nd);
      }
      FMT_CHECK(bc_sample_diff(m, 1, 0) > 0, "%s: sample 1's own documents left its bounds those of sample 0", types[t]);
      /* a new batch discards the lengths per sample: sample 1 as the others */
      FMT_CALL(FMMaskSetBatch(m, 2));
      FMT_CALL(FMMaskSetUp(m));
      FMMask r1 = docs_mask(ctx, s, types[t], 1, sd + 1, withwide ? 2 : 0, wide);
      FMT_CALL(FMMaskSetUp(r1));
      FMT_CHECK(bc_samples_diff(m, 1, r1, 0) == 0, "%s: after FMMaskSetBatch sample 1 still has its own documents", types[t]);
      FMT_CALL(FMMaskDestroy(&r1));
      for (int b = 0; b < 3; b++) FMT_CALL(FMMaskDestroy(&r[b]));
      FMT_CALL(FMMaskDestroy(&m));
    }
  }
  /* bad input */
  FMMask m = docs_mask(ctx, s, FMMASKDOCUMENT, 3, sd, 0, NULL);
  FMT_EXPECT_ERR(FMMaskSetSampleDocuments(m, 3, 3, own), FM_ERR_ARG_OUTOFRANGE, "(sample) is 3");
  FMT_EXPECT_ERR(FMMaskSetSampleDocuments(m, -1, 3, own), FM_ERR_ARG_OUTOFRANGE, "(sample) is -1");
  FMT_EXPECT_ERR(FMMaskSetSampleDocuments(m, 0, -1, own), FM_ERR_ARG_OUTOFRANGE, "(ndocs) is -1");
  FMT_EXPECT_ERR(FMMaskSetSampleDocuments(m, 0, 2, NULL), FM_ERR_ARG_NULL, "(lengths)");
  {
    const int zero[2] = {s->Sk, 0};
    FMT_EXPECT_ERR(FMMaskSetSampleDocuments(m, 0, 2, zero), FM_ERR_ARG_OUTOFRANGE, "lengths[1] is 0");
  }
  FMT_CALL(FMMaskSetSampleDocuments(m, 2, 2, bad));
  FMT_EXPECT_ERR(FMMaskSetUp(m), FM_ERR_ARG_SIZ, "sample 2 (FMMaskSetSampleDocuments) sum to");
  FMT_CALL(FMMaskSetSampleDocuments(m, 2, 3, own));
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMMaskDestroy(&m));
  m = docs_mask(ctx, s, FMMASKPREFIXLMDOCUMENT, 3, sd, 2, wide);
  {
    const int prefix[2] = {10, 10};
    FMT_CALL(FMMaskSetPrefixLengths(m, 2, prefix));
  }
  FMT_CALL(FMMaskSetSampleDocuments(m, 1, 3, own));
  FMT_EXPECT_ERR(FMMaskSetUp(m), FM_ERR_ARG_INCOMP, "sample 1");
  FMT_CALL(FMMaskDestroy(&m));
  printf("  FMMaskSetSampleDocuments: each sample's bounds those of a batch-1 mask on its documents; reset, new batch, "
         "bad input named\n");
}

static void check_hdf5(FMContext ctx, const BCShape *s, const char *dir, const char *old)
{
#if FM_HAVE_HDF5
  char path[512];
  FMMask m = bc_builder(ctx, FMMASKRANDOMEVICTION, s, s->B), l;
  int rank;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  snprintf(path, sizeof(path), "%s/test_mask_batch.h5", dir);
  if (rank == 0) remove(path);
  FMT_CALL(FMMaskSave(m, path, "evict3"));
  FMT_CALL(FMMaskLoad(ctx, path, "evict3", &l));
  check_same_bounds("random_eviction, mask_batch 3, saved and loaded", m, l);
  FMT_CALL(FMMaskDestroy(&l));
  FMT_CALL(FMMaskDestroy(&m));
  if (old) { /* written by the library before issue 11: 96 x 96, 2 heads, seed 42 */
    static const char *const names[3] = {FMMASKDOCUMENT, FMMASKRANDOMEVICTION, FMMASKCAUSAL};
    const BCShape o = {1, 96, 96, 2, 2, 2, 8, FM_DTYPE_FP32, 0, 0, 0};
    for (int t = 0; t < 3; t++) {
      FMMask b = bc_builder(ctx, names[t], &o, 1);
      FMT_CALL(FMMaskLoad(ctx, old, names[t], &l));
      check_same_bounds(names[t], b, l);
      FMT_CALL(FMMaskDestroy(&l));
      FMT_CALL(FMMaskDestroy(&b));
    }
    printf("  %s (written before mask_batch) loads as mask_batch 1 with the builders' bounds\n", old);
  }
  printf("  HDF5 round trip of a batch mask keeps every sample\n");
#else
  (void)ctx, (void)s, (void)dir, (void)old;
  printf("  (no HDF5 in this build: save/load not checked)\n");
#endif
}

/* A "cp" plan (partition part) on mask m: the global inputs of d scattered from rank 0, forward and backward,
   the outputs gathered on rank 0 and broadcast, so that every rank holds the global outputs in d. */
static void run_cp(FMContext ctx, FMMask m, const BCShape *s, const char *part, int chunk, BCData *d)
{
  FMPlan plan;
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetMask(plan, m));
  FMT_CALL(FMPlanSetType(plan, FMPLANCP));
  FMT_CALL(FMPlanSetPartition(plan, part));
  FMT_CALL(FMPlanSetChunk(plan, chunk));
  FMT_CALL(FMPlanSetShape(plan, s->B, s->Hq, s->Hkv, s->D, s->dt));
  FMT_CALL(FMPlanSetUp(plan));
  bc_run_host(plan, s, d);
  FMT_CALL(FMPlanDestroy(&plan));
}

/*
 * At 2 ranks: a "cp" plan on the CPU backend runs per-sample masks (mask_batch 3, three packings;
 * document, random_eviction, causal_document; GQA 4:2, S_q != S_k) within float32 rounding of the
 * float64 reference of every sample, for each partition, as it runs mask_batch 1; a mask batch
 * that is neither 1 nor the plan's batch is refused on every rank.
 */
static void check_cp(FMContext ctx, const BCShape *s, uint64_t *seed)
{
  static const char *const types[3] = {FMMASKDOCUMENT, FMMASKRANDOMEVICTION, FMMASKCAUSALDOCUMENT};
  static const char *const parts[3] = {"balanced", "dual_chunk", "contiguous"};
  BCData d;
  bc_data_init(&d, s, seed);
  for (int t = 0; t < 3; t++)
    for (int mb = s->B; mb >= 1; mb -= s->B - 1) {
      FMMask m = bc_builder(ctx, types[t], s, mb);
      char what[96];
      if (mb > 1)
        for (int a = 0; a < mb; a++)
          for (int b = a + 1; b < mb; b++)
            FMT_CHECK(bc_sample_diff(m, a, b) > 0, "%s with mask_batch %d: samples %d and %d have the same bounds", types[t], mb, a, b);
      snprintf(what, sizeof(what), "cp %s: %s, mask_batch %d", parts[t], types[t], mb);
      run_cp(ctx, m, s, parts[t], 0, &d);
      bc_check_ref(what, m, s, &d);
      FMT_CALL(FMMaskDestroy(&m));
    }
  bc_data_free(&d);
  { /* a mask batch that is neither 1 nor the plan's batch: a named error on every rank */
    FMMask m = bc_builder(ctx, FMMASKDOCUMENT, s, 2);
    FMPlan plan;
    FMT_CALL(FMPlanCreate(ctx, &plan));
    FMT_CALL(FMPlanSetMask(plan, m));
    FMT_CALL(FMPlanSetShape(plan, s->B, s->Hq, s->Hkv, s->D, s->dt));
    FMT_EXPECT_ERR(FMPlanSetUp(plan), FM_ERR_ARG_INCOMP, "mask_batch 2");
    FMT_CALL(FMPlanDestroy(&plan));
    FMT_CALL(FMMaskDestroy(&m));
  }
  printf("  cp plan: mask_batch 2 for batch 3 refused (FM_ERR_ARG_INCOMP)\n");
}

/*
 * One rank, one chunk: a "cp" plan on a per-sample mask sums in the order of the "local" type, so
 * O, LSE, dQ, dK and dV are bitwise those of a local plan on the same mask (three packings).
 */
static void check_cp_local(FMContext ctx, const BCShape *s, uint64_t *seed)
{
  FMMask m = bc_builder(ctx, FMMASKCAUSALDOCUMENT, s, s->B);
  BCData d;
  BCOut loc;
  bc_data_init(&d, s, seed);
  bc_run(ctx, run_cpu, m, s, &d);
  bc_save(&loc, &d, s->dt);
  run_cp(ctx, m, s, "balanced", s->Sq, &d);
  bc_check_same("cp on one rank, one chunk, against local (mask_batch 3)", &loc, &d, s->dt, 0);
  printf("  cp on one rank with one chunk equals local bitwise (mask_batch %d)\n", s->B);
  bc_out_free(&loc);
  bc_data_free(&d);
  FMT_CALL(FMMaskDestroy(&m));
}

int main(int argc, char **argv)
{
  const BCShape s = {3, 80, 112, 4, 2, 2, 16, FM_DTYPE_FP32, 1e-5, 2e-5, 0};
  const char *dir = ".", *old = NULL;
  int cp = 0;
  uint64_t seed;
  FMContext ctx;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_mask_batch: per-sample masks on the CPU backend"));
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "-dir") && a + 1 < argc) dir = argv[++a];
    else if (!strcmp(argv[a], "-old") && a + 1 < argc) old = argv[++a];
    else if (!strcmp(argv[a], "-cp")) cp = 1;
  }
  seed = fmt_seed();
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  FMT_CALL(FMContextSetUp(ctx));
  if (cp) {
    MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD); /* the same inputs (and reference) on every rank */
    check_cp(ctx, &s, &seed);
  } else {
    bc_check_all(ctx, run_cpu, &s, &seed);
    check_split(ctx, &s, &seed);
    check_update(ctx, &s, &seed);
    check_errors(ctx, &s);
    check_all_bounds(ctx, &s);
    check_sample_docs(ctx, &s);
    check_hdf5(ctx, &s, dir, old);
    check_cp_local(ctx, &s, &seed);
  }
  FMT_CALL(FMContextDestroy(&ctx));
  FMT_CALL(FMFinalize());
  return fmt_finish("test_mask_batch");
}
