/*
 * test_gpu_batch - per-sample masks (FMMaskSetBatch, issue 11) on the CUDA backend (device
 * pointers): the checks of batch_cases.h, i.e. B = 3 different packings (document,
 * random_eviction, per-sample user bounds), GQA 4:2, S_q != S_k, forward and backward against
 * a float64 reference per sample, and mask_batch 1 bitwise equal to a batch mask that holds the
 * shared mask in every sample (O, LSE, dK, dV; dQ within a tolerance, as the Hopper backward adds
 * dQ across CTAs in no fixed order). Shapes: the Hopper kernels (head_dim 128 bf16, 64 fp16) and the
 * SIMT fallback (head_dim 256; -fm_cuda_fallback forces it for the others too). The "cp" plan on
 * the CUDA backend is checked with per-sample masks by test_replan -cuda.
 * Exit 77 without CUDA or without a GPU.
 * Usage: test_gpu_batch [-quick]
 */
#include <flashmask.h>
#include <flashmask/private/fmkernels.h>
#include "batch_cases.h"

#if !FM_HAVE_CUDA
FMT_SKIP_MAIN("built without CUDA")
#else

/* Upload, run forward then backward on the plan's stream, download (outputs NaN-poisoned first). */
static void run_gpu(FMPlan plan, FMDType dt, const size_t n[4], size_t nl, void *const in[4], void *const out[4], float *lse)
{
  const size_t es = FMDTypeSize(dt);
  void *di[4], *dout[4];
  float *dlse;
  const size_t no[4] = {n[0], n[0], n[1], n[1]}; /* o, dq, dk, dv */
  for (int t = 0; t < 4; t++) {
    FMT_CALL(FMCudaMalloc(n[t] * es, &di[t]));
    FMT_CALL(FMCudaMemcpyH2D(di[t], in[t], n[t] * es, NULL));
    memset(out[t], 0xff, no[t] * es);
    FMT_CALL(FMCudaMalloc(no[t] * es, &dout[t]));
    FMT_CALL(FMCudaMemcpyH2D(dout[t], out[t], no[t] * es, NULL));
  }
  FMT_CALL(FMCudaMalloc(nl * sizeof(float), (void **)&dlse));
  FMT_CALL(FMPlanForward(plan, di[0], di[1], di[2], dout[0], dlse));
  FMT_CALL(FMPlanBackward(plan, di[0], di[1], di[2], dout[0], dlse, di[3], dout[1], dout[2], dout[3]));
  for (int t = 0; t < 4; t++) FMT_CALL(FMCudaMemcpyD2H(out[t], dout[t], no[t] * es, NULL));
  FMT_CALL(FMCudaMemcpyD2H(lse, dlse, nl * sizeof(float), NULL));
  for (int t = 0; t < 4; t++) {
    FMT_CALL(FMCudaFree(di[t]));
    FMT_CALL(FMCudaFree(dout[t]));
  }
  FMT_CALL(FMCudaFree(dlse));
}

int main(int argc, char **argv)
{
  /* dQ of two runs on the same bounds: the Hopper backward reduces dQ across CTAs in no fixed order */
  const BCShape shapes[3] = {{3, 300, 517, 4, 2, 2, 128, FM_DTYPE_BF16, 2e-2, 2e-2, 1e-2},
                             {3, 517, 300, 4, 2, 2, 64, FM_DTYPE_FP16, 5e-3, 5e-3, 2e-3},
                             {3, 130, 200, 4, 2, 2, 256, FM_DTYPE_BF16, 2e-2, 2e-2, 1e-2}};
  int quick = 0;
  uint64_t seed;
  FMContext ctx;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_gpu_batch: per-sample masks on the CUDA backend"));
  for (int a = 1; a < argc; a++)
    if (!strcmp(argv[a], "-quick")) quick = 1;
  seed = fmt_seed();
  FMT_SKIP_WITHOUT_GPU();
  ctx = fmt_cuda_context();
  for (int i = 0; i < (quick ? 1 : 3); i++) {
    const BCShape *s = &shapes[i];
    printf("shape B %d Sq %d Sk %d Hq %d Hkv %d mh %d D %d %s\n", s->B, s->Sq, s->Sk, s->Hq, s->Hkv, s->mh, s->D, FMDTypeName(s->dt));
    bc_check_all(ctx, run_gpu, s, &seed);
  }
  FMT_CALL(FMContextDestroy(&ctx));
  FMFinalize();
  return fmt_finish("test_gpu_batch");
}
#endif /* FM_HAVE_CUDA */
