/*
 * test_replan - re-planning every training step (issue 13's update path) on the CPU backend.
 * For each plan type ("local" on one rank, "cp" on any), mask type (document, causal_document)
 * and mask batch (1, 3), with GQA 4:2 and S_q != S_k: one long-lived mask and plan get a fresh
 * random packing every step (FMMaskSetSeed, FMMaskSetUp, FMPlanSetUp: the update path, counted by
 * FMPlanGetSetUpCounts_Private), and a fresh mask and plan are built from scratch on the same
 * seed; the forward's O and LSE and the backward's dQ, dK and dV of the two must be bitwise equal
 * (dQ within float32 rounding on several ranks: see compare()),
 * and equal to a float64 reference (batch_cases.h) within float32 rounding. Then a changed shape
 * (other heads, then other sequence lengths) on the same plan takes the full path and still
 * equals a fresh plan, and (several ranks) a plan that differs on one rank is refused on every
 * rank with a message naming what differs, after which the plan sets up and runs again.
 * -cuda: the same on the CUDA backend (bf16, head_dim 64, device tensors; per-sample masks through
 * the cp plan's GPU executor; dQ within bf16 rounding, as the backwards add it in no fixed order);
 * exits 77 without a GPU.
 * Usage: test_replan [-steps N] [-cuda]   (any number of ranks; -cuda: ranks may share a GPU)
 */
#include <flashmask/private/fmdist.h>
#include <flashmask/private/planimpl.h>
#include <flashmask/private/fmkernels.h>
#include "batch_cases.h"

typedef struct {
  int rank, size;
  const char *ptype;   /* FMPLANLOCAL or FMPLANCP */
  const char *mtype;   /* the mask builder */
  int mb, block, vnodes;
  int cuda;            /* -cuda: the CUDA backend (device tensors) */
} Case;

/* A builder mask of the case with sizes s and seed. */
static FMMask make_mask(FMContext ctx, const Case *c, const BCShape *s, unsigned long seed)
{
  FMMask m;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, s->Sq, s->Sk, s->mh));
  FMT_CALL(FMMaskSetBatch(m, c->mb));
  FMT_CALL(FMMaskSetBlockSize(m, c->block));
  FMT_CALL(FMMaskSetType(m, c->mtype));
  FMT_CALL(FMMaskSetSeed(m, seed));
  FMT_CALL(FMMaskSetUp(m));
  return m;
}

/* A plan of the case (type and cp settings) on mask m, shape s, not set up. */
static FMPlan make_plan(FMContext ctx, const Case *c, FMMask m, const BCShape *s)
{
  FMPlan plan;
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetMask(plan, m));
  FMT_CALL(FMPlanSetType(plan, c->ptype));
  if (!strcmp(c->ptype, FMPLANCP)) {
    FMT_CALL(FMPlanSetChunk(plan, 16)); /* many chunks: the balanced partition moves with the mask */
    /* the chunks in chunk order, not in arrival order: two runs of one plan are then bitwise equal */
    FMT_CALL(FMPlanSetOverlap(plan, FM_FALSE));
    if (c->vnodes > 0) FMT_CALL(FMPlanSetVirtualNodes(plan, c->vnodes));
  }
  FMT_CALL(FMPlanSetShape(plan, s->B, s->Hq, s->Hkv, s->D, s->dt));
  return plan;
}

#if FM_HAVE_CUDA
/*
 * The CUDA backend: every rank copies its local rows and keys of the global inputs of d to its
 * device, runs forward and backward there and copies back; the global outputs are assembled on
 * every rank by a sum in which each entry comes from one rank only (x + 0 = x: exact).
 */
static void run_cuda(FMPlan plan, const BCShape *s, BCData *d)
{
  const size_t es = FMDTypeSize(s->dt), uq = (size_t)s->Hq * s->D, uk = (size_t)s->Hkv * s->D;
  int nl, nk;
  const int *rows, *keys;
  size_t n[8];
  void *h[8], *g[8];
  float *lse, *glse = calloc(d->nl, sizeof(float)), *gl;
  void *dl;
  FMT_CALL(FMPlanGetLocalRows(plan, &nl, &rows));
  FMT_CALL(FMPlanGetLocalKeys(plan, &nk, &keys));
  for (int t = 0; t < 8; t++) { /* q k v dout | o dq dk dv */
    const int kv = t == 1 || t == 2 || t == 6 || t == 7;
    const size_t u = kv ? uk : uq;
    n[t] = (size_t)s->B * (kv ? nk : nl) * u;
    h[t] = malloc(n[t] * es + 1);
    memset(h[t], 0xff, n[t] * es + 1); /* NaN poison */
    if (t < 4)
      for (int b = 0; b < s->B; b++)
        for (int i = 0; i < (kv ? nk : nl); i++)
          memcpy((char *)h[t] + ((size_t)b * (kv ? nk : nl) + i) * u * es,
                 (const char *)d->in[t] + ((size_t)b * (kv ? s->Sk : s->Sq) + (kv ? keys[i] : rows[i])) * u * es, u * es);
    FMT_CALL(FMCudaMalloc(n[t] * es + 16, &g[t]));
    FMT_CALL(FMCudaMemcpyH2D(g[t], h[t], n[t] * es, NULL));
  }
  lse = malloc(sizeof(float) * ((size_t)s->B * s->Hq * nl + 1));
  FMT_CALL(FMCudaMalloc(sizeof(float) * ((size_t)s->B * s->Hq * nl + 1), &dl));
  FMT_CALL(FMPlanForward(plan, g[0], g[1], g[2], g[4], (float *)dl));
  FMT_CALL(FMPlanBackward(plan, g[0], g[1], g[2], g[4], (float *)dl, g[3], g[5], g[6], g[7]));
  FMT_CALL(FMCudaMemcpyD2H(lse, dl, sizeof(float) * (size_t)s->B * s->Hq * nl, NULL));
  for (int t = 4; t < 8; t++) {
    const int kv = t >= 6;
    const size_t u = kv ? uk : uq, N = d->no[t - 4];
    float *x = calloc(N, sizeof(float)), *y = malloc(N * sizeof(float));
    FMT_CALL(FMCudaMemcpyD2H(h[t], g[t], n[t] * es, NULL));
    for (int b = 0; b < s->B; b++)
      for (int i = 0; i < (kv ? nk : nl); i++)
        for (size_t e = 0; e < u; e++)
          x[((size_t)b * (kv ? s->Sk : s->Sq) + (kv ? keys[i] : rows[i])) * u + e] = FMToFloat(h[t], ((size_t)b * (kv ? nk : nl) + i) * u + e, s->dt);
    MPI_Allreduce(x, y, (int)N, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    for (size_t e = 0; e < N; e++) FMFromFloat(d->out[t - 4], e, s->dt, y[e]);
    free(x);
    free(y);
  }
  for (int b = 0; b < s->B; b++)
    for (int hq = 0; hq < s->Hq; hq++)
      for (int i = 0; i < nl; i++) glse[((size_t)b * s->Hq + hq) * s->Sq + rows[i]] = lse[((size_t)b * s->Hq + hq) * nl + i];
  gl = d->lse;
  MPI_Allreduce(glse, gl, (int)d->nl, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
  for (int t = 0; t < 8; t++) {
    free(h[t]);
    FMT_CALL(FMCudaFree(g[t]));
  }
  FMT_CALL(FMCudaFree(dl));
  free(lse);
  free(glse);
}
#endif

/* Forward and backward of a set-up plan on the global inputs of d (the same on every rank):
   scattered from rank 0, the outputs gathered there and broadcast, so every rank holds them in d. */
static void run(const Case *c, FMPlan plan, const BCShape *s, BCData *d)
{
#if FM_HAVE_CUDA
  if (c->cuda) {
    run_cuda(plan, s, d);
    return;
  }
#endif
  (void)c;
  bc_run_host(plan, s, d);
}

/* A fresh mask and plan of the case on seed: their outputs into d. */
static void run_fresh(FMContext ctx, const Case *c, const BCShape *s, unsigned long seed, BCData *d)
{
  FMMask m = make_mask(ctx, c, s, seed);
  FMPlan plan = make_plan(ctx, c, m, s);
  int full = -1, upd = -1;
  FMT_CALL(FMPlanSetUp(plan));
  FMT_CALL(FMPlanGetSetUpCounts_Private(plan, &full, &upd));
  FMT_CHECK(full == 1 && upd == 0, "a fresh plan counts %d full and %d update set-ups; expected 1 and 0", full, upd);
  run(c, plan, s, d);
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&m));
}

/* The set-up counts of plan are (full, upd). */
static void check_counts(const char *what, FMPlan plan, int full, int upd)
{
  int f = -1, u = -1;
  FMT_CALL(FMPlanGetSetUpCounts_Private(plan, &f, &u));
  FMT_CHECK(f == full && u == upd, "%s: %d full and %d update set-ups; expected %d and %d", what, f, u, full, upd);
}

/* Entries of the bounds of sample 0, head 0 that differ from prev (then copied into prev). */
static size_t bounds_changed(FMMask m, int Sk, int32_t *prev)
{
  const int32_t *v[4];
  size_t nd = 0;
  FMT_CALL(FMMaskGetSampleBounds(m, 0, 0, &v[0], &v[1], &v[2], &v[3], NULL, NULL));
  for (int t = 0; t < 4; t++)
    for (int j = 0; j < Sk; j++) {
      nd += prev[(size_t)t * Sk + j] != v[t][j];
      prev[(size_t)t * Sk + j] = v[t][j];
    }
  return nd;
}

/* Compare the long-lived plan's run (saved in a) with a fresh plan's (d), and (rank 0) d with the reference. */
static void compare(FMContext ctx, const Case *c, const BCShape *s, FMMask m, unsigned long seed, BCData *d, const char *what)
{
  BCOut a;
  char w[200];
  bc_save(&a, d, s->dt);
  run_fresh(ctx, c, s, seed, d);
  snprintf(w, sizeof(w), "%s: update against a fresh plan", what);
  /* O, LSE, dQ, dK, dV bitwise on the CPU (the plans run with -fm_plan_overlap 0, under which the
     cp backward, like the forward, computes the chunks in chunk order once all arrived). */
  bc_check_same(w, &a, d, s->dt, c->cuda ? s->dq_same : 0);
  if (c->rank == 0) {
    snprintf(w, sizeof(w), "%s: reference", what);
    bc_check_ref(w, m, s, d);
  }
  bc_out_free(&a);
}

/* One case: steps fresh packings on one plan, then the shape changes. */
static void check_case(FMContext ctx, const Case *c, int steps, uint64_t *seed)
{
  /* CUDA: bf16, head_dim 64 (the Hopper kernels); the local type's Hopper backward adds dQ across CTAs in no fixed order */
  BCShape s = c->cuda ? (BCShape){3, 96, 112, 4, 2, 2, 64, FM_DTYPE_BF16, 2e-2, 2e-2, 1e-2} : (BCShape){3, 96, 112, 4, 2, 2, 16, FM_DTYPE_FP32, 1e-5, 2e-5, 0};
  BCData d;
  unsigned long ms = (unsigned long)(fmt_next(seed) % 100000) + 1;
  FMMask m;
  FMPlan plan;
  int32_t *prev = calloc(4 * (size_t)s.Sk, sizeof(int32_t));
  size_t changed = 0;
  char what[160];
  MPI_Bcast(&ms, 1, MPI_UNSIGNED_LONG, 0, MPI_COMM_WORLD);
  bc_data_init(&d, &s, seed);
  m = make_mask(ctx, c, &s, ms);
  plan = make_plan(ctx, c, m, &s);
  FMT_CALL(FMPlanSetUp(plan));
  bounds_changed(m, s.Sk, prev);
  for (int step = 0; step < steps; step++) {
    if (step > 0) { /* a new packing, the same sizes: the update path */
      FMT_CALL(FMMaskSetSeed(m, ms + (unsigned long)step));
      FMT_CALL(FMMaskSetUp(m));
      FMT_CALL(FMPlanSetUp(plan));
      changed += bounds_changed(m, s.Sk, prev) > 0;
    }
    check_counts("the long-lived plan", plan, 1, step);
    run(c, plan, &s, &d);
    snprintf(what, sizeof(what), "%s on %d rank%s, %s, mask_batch %d, step %d", c->ptype, c->size, c->size > 1 ? "s" : "", c->mtype, c->mb, step);
    compare(ctx, c, &s, m, ms + (unsigned long)step, &d, what);
  }
  FMT_CHECK(changed == (size_t)(steps - 1), "%s, mask_batch %d: the bounds changed in %zu of %d steps; expected every step", c->mtype, c->mb,
            changed, steps - 1);
  bc_data_free(&d);
  /* other heads (the same mask): the full path */
  s.Hq = 8; s.Hkv = 2;
  bc_data_init(&d, &s, seed);
  FMT_CALL(FMPlanSetShape(plan, s.B, s.Hq, s.Hkv, s.D, s.dt));
  FMT_CALL(FMPlanSetUp(plan));
  check_counts("after a new shape (heads_q 8)", plan, 2, steps - 1);
  run(c, plan, &s, &d);
  snprintf(what, sizeof(what), "%s on %d ranks, %s, mask_batch %d, heads_q 8", c->ptype, c->size, c->mtype, c->mb);
  compare(ctx, c, &s, m, ms + (unsigned long)(steps - 1), &d, what);
  bc_data_free(&d);
  /* other sequence lengths: a new mask size on the same mask object */
  s.Sq = 80; s.Sk = 80;
  bc_data_init(&d, &s, seed);
  FMT_CALL(FMMaskSetSizes(m, s.Sq, s.Sk, s.mh));
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMPlanSetUp(plan));
  check_counts("after new sequence lengths (80 x 80)", plan, 3, steps - 1);
  run(c, plan, &s, &d);
  snprintf(what, sizeof(what), "%s on %d ranks, %s, mask_batch %d, 80 x 80", c->ptype, c->size, c->mtype, c->mb);
  compare(ctx, c, &s, m, ms + (unsigned long)(steps - 1), &d, what);
  /* and an update again at the new size */
  FMT_CALL(FMMaskSetSeed(m, ms + 1000));
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMPlanSetUp(plan));
  check_counts("an update at the new size", plan, 3, steps);
  run(c, plan, &s, &d);
  snprintf(what, sizeof(what), "%s on %d ranks, %s, mask_batch %d, 80 x 80, updated", c->ptype, c->size, c->mtype, c->mb);
  compare(ctx, c, &s, m, ms + 1000, &d, what);
  bc_data_free(&d);
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&m));
  free(prev);
  if (c->rank == 0)
    printf("  %s, %s, mask_batch %d: %d steps updated bitwise as fresh plans; new heads and sizes took the full path\n", c->ptype, c->mtype,
           c->mb, steps);
}

/*
 * Several ranks: after updates, a plan that differs on the last rank is refused on every rank,
 * naming what differs: a cp setting (its chunk size: caught by the plan's hash, and the failed
 * set-up drops the kept state, so the next one is a full one) and the shape (heads_q: caught by
 * the agreement at the entry of FMPlanSetUp, before anything changed, so the next is an update).
 */
static void check_mismatch(FMContext ctx, const Case *c, uint64_t *seed)
{
  BCShape s = c->cuda ? (BCShape){1, 96, 96, 4, 2, 1, 64, FM_DTYPE_BF16, 2e-2, 2e-2, 1e-2} : (BCShape){1, 96, 96, 4, 2, 1, 16, FM_DTYPE_FP32, 1e-5, 2e-5, 0};
  BCData d;
  FMMask m = make_mask(ctx, c, &s, 7);
  FMPlan plan = make_plan(ctx, c, m, &s);
  const int last = c->rank == c->size - 1;
  bc_data_init(&d, &s, seed);
  FMT_CALL(FMPlanSetUp(plan));
  FMT_CALL(FMMaskSetSeed(m, 8));
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMPlanSetUp(plan));
  check_counts("before the mismatch", plan, 1, 1);
  FMT_CALL(FMPlanSetChunk(plan, last ? 32 : 16));
  FMT_EXPECT_ERR(FMPlanSetUp(plan), FM_ERR_MISMATCH, "Ranks disagree on the plan's hash");
  FMT_CALL(FMPlanSetChunk(plan, 16));
  FMT_CALL(FMPlanSetUp(plan));
  check_counts("after a refused cp setting", plan, 2, 1);
  FMT_CALL(FMPlanSetShape(plan, s.B, last ? 8 : s.Hq, s.Hkv, s.D, s.dt));
  FMT_EXPECT_ERR(FMPlanSetUp(plan), FM_ERR_MISMATCH, "heads_q is 4 on rank 0");
  FMT_CALL(FMPlanSetShape(plan, s.B, s.Hq, s.Hkv, s.D, s.dt));
  FMT_CALL(FMMaskSetSeed(m, 9));
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMPlanSetUp(plan));
  check_counts("after a refused shape", plan, 2, 2);
  run(c, plan, &s, &d);
  compare(ctx, c, &s, m, 9, &d, "after the refused set-ups");
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&m));
  bc_data_free(&d);
  if (c->rank == 0) printf("  a cp setting and a shape that differ on rank %d: FM_ERR_MISMATCH naming them on every rank\n", c->size - 1);
}

/*
 * FMDistLocalizeColumns (the CUDA backend's stage masks) against FMDistLocalize, column by column,
 * on random columns of per-sample causal and non-causal masks for each rank of a 3-rank partition.
 */
static void check_localize_columns(FMContext ctx, uint64_t *seed)
{
  static const char *const types[2] = {FMMASKCAUSALDOCUMENT, FMMASKDOCUMENT};
  const BCShape s = {3, 96, 112, 4, 2, 2, 16, FM_DTYPE_FP32, 0, 0, 0};
  size_t bad = 0, total = 0;
  for (int t = 0; t < 2; t++) {
    Case c = {0, 1, FMPLANCP, types[t], 3, 32, 0, 0};
    FMMask mask = make_mask(ctx, &c, &s, 11 + (unsigned long)t);
    FMMaskDesc m;
    FMDistChunks ch;
    FMDistPartition part;
    int cols[64];
    FMT_CALL(FMMaskGetDesc_Private(mask, &m));
    FMT_CALL(FMDistChunksInit(s.Sq, s.Sk, 16, 3, m.block, &ch));
    FMT_CALL(FMDistPartitionCreate(FM_DIST_DUAL_CHUNK, ch.nchunks, 3, NULL, &part, NULL));
    for (int x = 0; x < 64; x++) cols[x] = (int)(fmt_next(seed) % (uint64_t)s.Sk);
    for (int r = 0; r < 3; r++) {
      FMDistLocalMask a, b;
      const int nown = part.rstart[r + 1] - part.rstart[r], *own = part.rchunks + part.rstart[r];
      FMT_CALL(FMDistLocalize(&m, &ch, nown, own, &a));
      FMT_CALL(FMDistLocalizeColumns(&m, &ch, nown, own, 64, cols, &b));
      bad += a.nlocal != b.nlocal || a.mask_heads != b.mask_heads || !a.cut != !b.cut;
      for (int h = 0; h < a.mask_heads; h++)
        for (int x = 0; x < 64; x++) {
          for (int v = 0; v < 4; v++) bad += FMDistLocalBound(&a, v, (size_t)h * s.Sk + cols[x]) != FMDistLocalBound(&b, v, (size_t)h * 64 + x);
          total += 4;
        }
      for (int x = 0; x < 64 && a.cut && b.cut; x++) bad += a.cut[cols[x]] != b.cut[x];
      FMT_CALL(FMDistLocalMaskDestroy(&a));
      FMT_CALL(FMDistLocalMaskDestroy(&b));
    }
    FMT_CALL(FMDistPartitionDestroy(&part));
    FMT_CALL(FMMaskDestroy(&mask));
  }
  FMT_CHECK(bad == 0 && total > 0, "FMDistLocalizeColumns differs from FMDistLocalize in %zu of %zu entries", bad, total);
  printf("  FMDistLocalizeColumns equals FMDistLocalize on %zu entries\n", total);
}

int main(int argc, char **argv)
{
  static const char *const masks[2] = {FMMASKDOCUMENT, FMMASKCAUSALDOCUMENT};
  int steps = 3;
  uint64_t seed;
  FMContext ctx;
  Case c;
  (void)bc_check_all; /* batch_cases.h: the per-sample checks of test_mask_batch, not run here */
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_replan: re-planning every step (the update path of FMPlanSetUp)"));
  memset(&c, 0, sizeof(c));
  for (int a = 1; a < argc; a++) {
    if (!strcmp(argv[a], "-steps") && a + 1 < argc) steps = atoi(argv[++a]);
    else if (!strcmp(argv[a], "-cuda")) c.cuda = 1;
  }
  if (steps < 2) steps = 2;
  if (c.cuda) {
    int ndev = 0, all = 0;
#if FM_HAVE_CUDA
    FMT_CALL(FMCudaDeviceCount(&ndev));
#endif
    MPI_Allreduce(&ndev, &all, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (all == 0) {
      printf("SKIP: -cuda: no CUDA %s on some rank\n", FM_HAVE_CUDA ? "device" : "in this build");
      FMFinalize();
      return 77;
    }
  }
  MPI_Comm_rank(MPI_COMM_WORLD, &c.rank);
  MPI_Comm_size(MPI_COMM_WORLD, &c.size);
  seed = fmt_seed();
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD); /* the same inputs (and reference) on every rank */
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetBackend(ctx, c.cuda ? FM_BACKEND_CUDA : FM_BACKEND_CPU));
  FMT_CALL(FMContextSetFromOptions(ctx));
  FMT_CALL(FMContextSetUp(ctx));
  if (c.size == 1 && !c.cuda) check_localize_columns(ctx, &seed);
  c.vnodes = c.size >= 4 ? 2 : 0; /* two virtual nodes at 4 ranks: the hierarchical route relays */
  for (int t = 0; t < (c.size == 1 ? 2 : 1); t++) {
    c.ptype = t ? FMPLANLOCAL : FMPLANCP;
    for (int k = 0; k < 2; k++)
      for (int mb = 1; mb <= 3; mb += 2) {
        c.mtype = masks[k];
        c.mb = mb;
        c.block = 32;
        check_case(ctx, &c, steps, &seed);
      }
  }
  if (c.size > 1) {
    c.ptype = FMPLANCP;
    c.mtype = FMMASKCAUSALDOCUMENT;
    c.mb = 1;
    check_mismatch(ctx, &c, &seed);
  }
  FMT_CALL(FMContextDestroy(&ctx));
  FMT_CALL(FMFinalize());
  return fmt_finish("test_replan");
}
