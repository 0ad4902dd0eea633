/*
 * test_gpu_sched - the Hopper forward's schedule as a plan chooses it (-fm_sm90_schedule auto,
 * the default): on sm 90 a sliding window of 256 over 4096 keys (a query tile sees about 384,
 * as many in every tile) must run the persistent kernel under the static round robin (path 2)
 * and a full mask the one-CTA-per-tile grid, which at d = 128 is the wide kernel (path 3), at
 * 1024 keys too;
 * FMPlanView names the choice and its reason; and each plan's O and LSE on fresh random inputs
 * (outputs poisoned with NaN first) must equal bit for bit the grid kernel's on the same inputs
 * (FMCudaForward with the schedule forced to the grid), which test_gpu_fwd checks against a
 * float64 reference. -fm_sm90_schedule grid, or -fm_sm90_auto_keys 100, makes the window plan
 * take the grid. On another GPU
 * the paths are not checked, the bitwise comparison is. Exit 77 without CUDA or without a GPU.
 * Usage: test_gpu_sched
 */
#include <flashmask.h>
#include <flashmask/private/planimpl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fmtest.h"

#if !FM_HAVE_CUDA
FMT_SKIP_MAIN("built without CUDA")
#else
extern int FMCudaLastPath_Private;

/* uniform in [-1, 1) */
static double uni(uint64_t *s) { return ((double)(fmt_next(s) >> 11) / 9007199254740992.0) * 2.0 - 1.0; }

/* One plan over an S-key mask of type t (a 256-key window for the sliding window): its
   forward must take path want_path on sm 90 (sm: the context's), equal the grid kernel's O and
   LSE bit for bit, and its FMPlanView text must hold want_view. */
static void run(FMContext ctx, FMMaskType t, int S, int want_path, int sm, uint64_t *s, const char *want_view)
{
  const int B = 2, H = 4, D = 128;
  const size_t n = (size_t)B * S * H * D, nl = (size_t)B * H * S, es = 2;
  void *h[3], *d[3], *dout, *go = malloc(n * es), *po = malloc(n * es);
  float *dl, *gl = malloc(nl * sizeof(float)), *pl = malloc(nl * sizeof(float));
  FMMask m;
  FMPlan plan;
  FMAttnProblem p;
  int path = -1;
  char buf[4096] = "";
  FILE *fp = fmemopen(buf, sizeof buf - 1, "w");
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_CALL(FMMaskSetSizes(m, S, S, 1));
  FMT_CALL(FMMaskSetType(m, t));
  if (!strcmp(t, FMMASKSLIDINGWINDOW)) FMT_CALL(FMMaskSetWindow(m, 256, 0));
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetMask(plan, m));
  FMT_CALL(FMPlanSetShape(plan, B, H, H, D, FM_DTYPE_BF16));
  FMT_CALL(FMPlanSetFromOptions(plan));
  FMT_CALL(FMPlanSetUp(plan));
  FMT_CALL(FMPlanView(plan, fp));
  fclose(fp);
  FMT_CHECK(strstr(buf, want_view) != NULL, "%s: FMPlanView does not say \"%s\":\n%s", t, want_view, buf);
  for (int k = 0; k < 3; k++) {
    h[k] = malloc(n * es);
    for (size_t i = 0; i < n; i++) FMFromFloat(h[k], i, FM_DTYPE_BF16, (float)((k < 2 ? 1.5 : 1.0) * uni(s)));
    FMT_CALL(FMCudaMalloc(n * es, &d[k]));
    FMT_CALL(FMCudaMemcpyH2D(d[k], h[k], n * es, NULL));
  }
  FMT_CALL(FMCudaMalloc(n * es, &dout));
  FMT_CALL(FMCudaMalloc(nl * sizeof(float), (void **)&dl));
  for (int pass = 0; pass < 2; pass++) { /* 0: the plan; 1: the grid kernel on the same inputs */
    void *ho = pass ? go : po;
    float *hl = pass ? gl : pl;
    for (size_t i = 0; i < n; i++) FMFromFloat(ho, i, FM_DTYPE_BF16, NAN);
    for (size_t i = 0; i < nl; i++) hl[i] = NAN;
    FMT_CALL(FMCudaMemcpyH2D(dout, ho, n * es, NULL));
    FMT_CALL(FMCudaMemcpyH2D(dl, hl, nl * sizeof(float), NULL));
    FMCudaLastPath_Private = -1;
    if (!pass) {
      FMT_CALL(FMPlanForward(plan, d[0], d[1], d[2], dout, dl));
      FMT_CALL(FMCudaStreamSynchronize(NULL));
      path = FMCudaLastPath_Private;
    } else {
      void *dmask;
      FMT_CALL(FMPlanGetProblem_Private(plan, &p));
      p.opts.sm90_schedule = FM_GPU_SCHED_GRID;
      FMT_CALL(FMCudaMaskUpload(&p.mask, &dmask));
      FMT_CALL(FMCudaForward(&p, dmask, d[0], d[1], d[2], dout, dl, NULL));
      FMT_CALL(FMCudaStreamSynchronize(NULL));
      FMT_CALL(FMCudaMaskFree(dmask));
    }
    FMT_CALL(FMCudaMemcpyD2H(ho, dout, n * es, NULL));
    FMT_CALL(FMCudaMemcpyD2H(hl, dl, nl * sizeof(float), NULL));
  }
  if (sm == 90) FMT_CHECK(path == want_path, "%s: the plan's forward took path %d; expected %d", t, path, want_path);
  FMT_CHECK(!memcmp(po, go, n * es) && !memcmp(pl, gl, nl * sizeof(float)), "%s: the plan's O or LSE (path %d) differs from the grid kernel's",
            t, path);
  {
    size_t bad = 0;
    for (size_t i = 0; i < nl; i++) bad += !isfinite(pl[i]);
    FMT_CHECK(bad == 0, "%s: %zu non-finite LSE values (every row sees a key)", t, bad);
  }
  printf("%s: path %d, %s the grid kernel's bits\n", t, path, memcmp(po, go, n * es) ? "NOT" : "equal to");
  for (int k = 0; k < 3; k++) { FMCudaFree(d[k]); free(h[k]); }
  FMCudaFree(dout);
  FMCudaFree(dl);
  free(go); free(po); free(gl); free(pl);
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&m));
}

int main(int argc, char **argv)
{
  int sm = 0;
  uint64_t seed;
  FMContext ctx;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_gpu_sched: the plan's forward schedule"));
  seed = fmt_seed();
  FMT_SKIP_WITHOUT_GPU();
  ctx = fmt_cuda_context();
  sm = ctx->gpu_sm;
  run(ctx, FMMASKSLIDINGWINDOW, 4096, 2, sm, &seed, "persistent, static round robin");
  /* the full mask under the grid takes the wide kernel (path 3: one CTA per tile, 176-key tiles at d = 128) */
  run(ctx, FMMASKFULL, 4096, 3, sm, &seed, "one CTA per query tile (grid; auto: a full mask at d = 128 takes the wide kernel's 176-key tiles at any length)");
  /* also where a query tile sees few keys (1024: the persistent kernel's range on other masks) */
  run(ctx, FMMASKFULL, 1024, 3, sm, &seed, "one CTA per query tile (grid; auto: a full mask at d = 128");
  FMT_CALL(FMContextDestroy(&ctx));
  /* the option overrides auto */
  FMT_CALL(FMOptionsSetValue("-fm_sm90_schedule", "grid"));
  ctx = fmt_cuda_context();
  run(ctx, FMMASKSLIDINGWINDOW, 4096, 1, sm, &seed, "one CTA per query tile (grid)\n");
  FMT_CALL(FMContextDestroy(&ctx));
  /* auto's threshold as an option: 100 keys puts the window on the grid */
  FMT_CALL(FMOptionsSetValue("-fm_sm90_schedule", "auto"));
  FMT_CALL(FMOptionsSetValue("-fm_sm90_auto_keys", "100"));
  ctx = fmt_cuda_context();
  run(ctx, FMMASKSLIDINGWINDOW, 4096, 1, sm, &seed, "(grid; auto: a query tile sees ");
  FMT_CALL(FMContextDestroy(&ctx));
  FMFinalize();
  return fmt_finish("test_gpu_sched");
}
#endif /* FM_HAVE_CUDA */
