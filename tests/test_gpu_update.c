/*
 * test_gpu_update - a new mask every step while the GPU is still busy (the CUDA update path of
 * FMPlanSetUp: the bounds go through two pinned staging buffers used in turn). A long forward
 * (full mask, 16K keys) is queued first on the plan's stream; then, with no host wait in
 * between, each of 6 steps sets up a new causal-document packing on one long-lived mask and
 * plan (FMMaskSetSeed, FMMaskSetUp, FMPlanSetUp: counted as updates) and queues a forward into
 * its own output buffers. After one wait, every step's O and LSE must be bitwise those of a
 * fresh mask and plan built from scratch on the same seed, which proves that no step read
 * another step's bounds (each step's packing differs: checked); a mask of this size must get
 * the staging (FMCudaMaskStaged_Private). Inputs are fresh random values,
 * outputs poisoned with NaN first. Exit 77 without CUDA or without a GPU.
 * Usage: test_gpu_update
 */
#include <flashmask.h>
#include <flashmask/private/planimpl.h> /* FMPlanGetSetUpCounts_Private, FMMaskHash_Private */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fmtest.h"

#if !FM_HAVE_CUDA
FMT_SKIP_MAIN("built without CUDA")
#else
enum { NSTEP = 6, B = 2, S = 2048, H = 4, D = 64 };

/* uniform in [-1, 1) */
static double uni(uint64_t *s) { return ((double)(fmt_next(s) >> 11) / 9007199254740992.0) * 2.0 - 1.0; }

/* A set-up s x s mask of one head, of the type and seed given. */
static FMMask new_mask(FMContext ctx, const char *type, int s, unsigned long seed)
{
  FMMask m;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, s, s, 1));
  FMT_CALL(FMMaskSetType(m, type));
  FMT_CALL(FMMaskSetSeed(m, seed));
  FMT_CALL(FMMaskSetUp(m));
  return m;
}

/* A set-up plan over m on the context's backend: batch b, h query and kv heads, head dim d, bf16. */
static FMPlan new_plan(FMContext ctx, FMMask m, int b, int h, int d)
{
  FMPlan p;
  FMT_CALL(FMPlanCreate(ctx, &p));
  FMT_CALL(FMPlanSetMask(p, m));
  FMT_CALL(FMPlanSetShape(p, b, h, h, d, FM_DTYPE_BF16));
  FMT_CALL(FMPlanSetFromOptions(p));
  FMT_CALL(FMPlanSetUp(p));
  return p;
}

/* n bf16 values uniform in [-amp, amp) on the device. */
static void *dev_random(size_t n, uint64_t *s, double amp)
{
  void *h = malloc(n * 2), *d;
  for (size_t i = 0; i < n; i++) FMFromFloat(h, i, FM_DTYPE_BF16, (float)(amp * uni(s)));
  FMT_CALL(FMCudaMalloc(n * 2, &d));
  FMT_CALL(FMCudaMemcpyH2D(d, h, n * 2, NULL));
  free(h);
  return d;
}

/* n device elements of es bytes (4: float, 2: bf16), every one NaN. */
static void *dev_poisoned(size_t n, size_t es)
{
  void *h = malloc(n * es), *d;
  for (size_t i = 0; i < n; i++) {
    if (es == 4) ((float *)h)[i] = NAN;
    else FMFromFloat(h, i, FM_DTYPE_BF16, NAN);
  }
  FMT_CALL(FMCudaMalloc(n * es, &d));
  FMT_CALL(FMCudaMemcpyH2D(d, h, n * es, NULL));
  free(h);
  return d;
}

int main(int argc, char **argv)
{
  const size_t n = (size_t)B * S * H * D, nl = (size_t)B * H * S;
  const size_t nbig = (size_t)1 * 16384 * 16 * 128, nlbig = (size_t)16 * 16384;
  int full = 0, update = 0;
  uint64_t rs;
  unsigned long seed0;
  FMContext ctx;
  FMMask m, big;
  FMPlan plan, bigplan;
  void *q, *k, *v, *o[NSTEP], *bq, *bk, *bv, *bo;
  float *l[NSTEP], *bl;
  void *ho = malloc(n * 2), *fo = malloc(n * 2);
  float *hl = malloc(nl * sizeof(float)), *fl = malloc(nl * sizeof(float));
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_gpu_update: new masks while the GPU is busy"));
  rs = fmt_seed();
  seed0 = (unsigned long)(fmt_next(&rs) & 0xFFFFF);
  FMT_SKIP_WITHOUT_GPU();
  ctx = fmt_cuda_context();
  q = dev_random(n, &rs, 1.5); k = dev_random(n, &rs, 1.5); v = dev_random(n, &rs, 1.0);
  bq = dev_random(nbig, &rs, 1.0); bk = dev_random(nbig, &rs, 1.0); bv = dev_random(nbig, &rs, 1.0);
  bo = dev_poisoned(nbig, 2); bl = (float *)dev_poisoned(nlbig, 4);
  for (int i = 0; i < NSTEP; i++) { o[i] = dev_poisoned(n, 2); l[i] = (float *)dev_poisoned(nl, 4); }
  /* the long forward first, then the steps behind it with no wait */
  big = new_mask(ctx, FMMASKFULL, 16384, 1);
  bigplan = new_plan(ctx, big, 1, 16, 128);
  m = new_mask(ctx, FMMASKCAUSALDOCUMENT, S, seed0);
  plan = new_plan(ctx, m, B, H, D);
  {
    /* the staging is there to be tested: a handle of this mask's size must have it */
    FMMaskDesc md;
    void *h;
    FMT_CALL(FMMaskGetBoundsDesc_Private(m, &md));
    FMT_CALL(FMCudaMaskUpload(&md, &h));
    FMT_CHECK(FMCudaMaskStaged_Private(h) == 0, "a handle has pinned staging before FMCudaMaskStage");
    FMT_CALL(FMCudaMaskStage(h));
    FMT_CHECK(FMCudaMaskStaged_Private(h) == 1, "a %d-key mask has no pinned staging: the updates below would not test it", S);
    FMT_CALL(FMCudaMaskFree(h));
  }
  FMT_CALL(FMPlanForward(bigplan, bq, bk, bv, bo, bl));
  for (int i = 0; i < NSTEP; i++) {
    if (i > 0) {
      FMT_CALL(FMMaskSetSeed(m, seed0 + (unsigned long)i));
      FMT_CALL(FMMaskSetUp(m));
      FMT_CALL(FMPlanSetUp(plan));
    }
    FMT_CALL(FMPlanForward(plan, q, k, v, o[i], l[i]));
  }
  FMT_CALL(FMPlanGetSetUpCounts_Private(plan, &full, &update));
  FMT_CHECK(full == 1 && update == NSTEP - 1, "set-ups: %d full, %d updates; expected 1 and %d", full, update, NSTEP - 1);
  for (int i = 0; i < NSTEP; i++) {
    FMMask fm = new_mask(ctx, FMMASKCAUSALDOCUMENT, S, seed0 + (unsigned long)i);
    FMPlan fp = new_plan(ctx, fm, B, H, D);
    void *fo_d = dev_poisoned(n, 2);
    float *fl_d = (float *)dev_poisoned(nl, 4);
    size_t nonfinite = 0;
    FMT_CALL(FMPlanForward(fp, q, k, v, fo_d, fl_d));
    FMT_CALL(FMCudaMemcpyD2H(fo, fo_d, n * 2, NULL));
    FMT_CALL(FMCudaMemcpyD2H(fl, fl_d, nl * sizeof(float), NULL));
    FMT_CALL(FMCudaMemcpyD2H(ho, o[i], n * 2, NULL));
    FMT_CALL(FMCudaMemcpyD2H(hl, l[i], nl * sizeof(float), NULL));
    for (size_t r = 0; r < nl; r++) nonfinite += !isfinite(hl[r]);
    FMT_CHECK(nonfinite == 0, "step %d: %zu LSE values not finite (every causal-document row sees itself)", i, nonfinite);
    FMT_CHECK(!memcmp(ho, fo, n * 2) && !memcmp(hl, fl, nl * sizeof(float)),
              "step %d (seed %lu): O or LSE of the updated plan differ from a fresh plan's", i, seed0 + (unsigned long)i);
    if (i > 0) { /* the packings differ, so a step reading another's bounds could not pass */
      FMMask pm = new_mask(ctx, FMMASKCAUSALDOCUMENT, S, seed0 + (unsigned long)i - 1);
      FMT_CHECK(FMMaskHash_Private(pm) != FMMaskHash_Private(fm), "seeds %lu and %lu gave the same packing", seed0 + (unsigned long)i - 1,
                seed0 + (unsigned long)i);
      FMT_CALL(FMMaskDestroy(&pm));
    }
    FMCudaFree(fo_d);
    FMCudaFree(fl_d);
    FMT_CALL(FMPlanDestroy(&fp));
    FMT_CALL(FMMaskDestroy(&fm));
  }
  printf("test_gpu_update: %d steps behind a long forward, each equal to a fresh plan\n", NSTEP);
  for (int i = 0; i < NSTEP; i++) { FMCudaFree(o[i]); FMCudaFree(l[i]); }
  FMCudaFree(q); FMCudaFree(k); FMCudaFree(v); FMCudaFree(bq); FMCudaFree(bk); FMCudaFree(bv); FMCudaFree(bo); FMCudaFree(bl);
  free(ho); free(fo); free(hl); free(fl);
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMPlanDestroy(&bigplan));
  FMT_CALL(FMMaskDestroy(&m));
  FMT_CALL(FMMaskDestroy(&big));
  FMT_CALL(FMContextDestroy(&ctx));
  FMFinalize();
  return fmt_finish("test_gpu_update");
}
#endif /* FM_HAVE_CUDA */
