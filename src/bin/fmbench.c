/*
 * fmbench - time the CUDA forward on the 12 FlashMask benchmark masks.
 *
 *   mpiexec -n 1 fmbench -masks all -seqlen 8192,32768 -head_dim 128 -heads 32 -tokens 131072
 *
 * Per mask and sequence length: batch = tokens / seqlen; random bf16 (or fp16) Q, K, V on the
 * device; a warm-up, then -reps timed runs with CUDA events; the median is reported as ms and as
 * TFLOP/s under the FlashMask convention 4 B H S^2 d (1 - rho), rho = fraction of 128 x 128 tiles
 * fully masked, beside the exact element density. The exact bounds used are written to -o
 * (HDF5, /masks/<mask>_<seqlen> with datasets lts, lte, uts, ute int32[mask_heads][seqlen_k]
 * and attributes seqlen_q, seqlen_k, causal, type) for share/bench/peers.py, and the results
 * to -csv. Options:
 *   -masks all|name,name,...   -seqlen S,S,...   -head_dim d   -heads H   -heads_kv Hkv
 *   -tokens N   -dtype bf16|fp16   -warmup n   -reps n   -seed s   -o file   -csv file
 *   -dryrun   build, measure and save the masks only (no GPU needed; for checking a build)
 * Built standalone (share/bench/build_sa.sh, -DFMBENCH_STANDALONE) it uses the hand-built masks
 * of tests/gpu_masks.h and writes .npy files into the directory -o instead of HDF5.
 *
 * Context parallelism (-cp; src/bin/fmbench_cp.c, not in the standalone build):
 *
 *   mpiexec -n 2 fmbench -cp -masks causal,causal_document,document,share_question \
 *           -seqlen 65536,131072 -heads 32 -heads_kv 32 -head_dim 128 -reps 5 -warmup 2 \
 *           -csv cp.csv -trace_dir DIR
 *
 * For each mask and sequence length (batch 1, one sequence of S tokens, the library's builders
 * with -seed, identical on every rank) it times, on the CUDA backend over all ranks, the
 * distributed plan in three configurations: plan (the defaults: pruned, overlapped gather),
 * allgather (-fm_plan_prune 0 -fm_plan_overlap 0) and ring (-fm_plan_schedule ring); partition,
 * route, chunk and transport come from the -fm_plan_* options (defaults otherwise) and are shared
 * by the three. Each rank fills its local Q, K, V with random values; -warmup runs, then -reps
 * runs, each between MPI_Barrier + cudaDeviceSynchronize and MPI_Wtime, the time of a run being
 * the maximum over the ranks; the median is reported, as ms and TFLOP/s of the global forward
 * (FMPlanGetFlops, the FlashMask convention). One extra run per configuration with -fm_trace
 * DIR/<mask>_<S>_<config>.h5 gives the overlap efficiency and the exposed communication (the
 * fmtrace summary); bytes moved are the sum over ranks of the bytes sent (FMDistGetStats), beside
 * the unpruned all-gather's. A 1-GPU row times the whole problem on rank 0 alone (a context on
 * MPI_COMM_SELF). Then the speedups of plan over allgather, ring and one GPU, and at the end a
 * summary table. Options: -masks -seqlen -heads -heads_kv -head_dim -dtype -warmup -reps -seed
 * -csv as above, -trace_dir DIR (default fmbench_cp_traces; none: no traces), -single 0 (skip the
 * one-GPU baseline). Exit status 77, with a message, when some rank sees no GPU.
 */
#include <flashmask.h>
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmkernels.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#ifdef FMBENCH_STANDALONE
#include "gpu_masks.h"
#endif

extern int FMCudaLastPath_Private;
#ifndef FMBENCH_STANDALONE
int FMBenchCP(int argc, char **argv); /* fmbench_cp.c */
#endif
FMErrorCode FMCudaFillRandom_Private(void *p, size_t n, FMDType t, unsigned long long seed, float amp, void *stream);

static const char *const names[12] = {"full", "causal", "sliding_window", "causal_document", "document",
                                      "share_question", "global_sliding_window", "causal_blockwise",
                                      "prefix_lm_document", "prefix_lm_causal", "qk_sparse", "random_eviction"};

#define CK(expr)                                                                                   \
  do {                                                                                             \
    cudaError_t e_ = (expr);                                                                       \
    if (e_ != cudaSuccess) {                                                                       \
      fprintf(stderr, "fmbench: %s failed: %s\n", #expr, cudaGetErrorString(e_));                  \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)
#define FC(expr)                                                                                   \
  do {                                                                                             \
    if ((expr) != FM_SUCCESS) {                                                                    \
      fprintf(stderr, "fmbench: %s failed\n", #expr);                                              \
      exit(1);                                                                                     \
    }                                                                                              \
  } while (0)

static int cmpf(const void *a, const void *b)
{
  float x = *(const float *)a, y = *(const float *)b;
  return (x > y) - (x < y);
}

#ifdef FMBENCH_STANDALONE
/* whether [m0, m1) is inside the union of three half-open intervals */
static int covers(const int *s, const int *e, int m0, int m1)
{
  int pos = m0, moved = 1;
  while (moved && pos < m1) {
    moved = 0;
    for (int k = 0; k < 3; k++)
      if (s[k] <= pos && pos < e[k]) pos = e[k], moved = 1;
  }
  return pos >= m1;
}
/* exact element density and 128 x 128 block sparsity */
static void density(const int32_t *const b[4], int causal, int Sq, int Sk, int mh, double *dens, double *rho)
{
  const int nq = (Sq + 127) / 128, nk = (Sk + 127) / 128;
  double vis = 0, skip = 0;
  for (int h = 0; h < mh; h++) {
    for (int j = 0; j < Sk; j++) {
      const size_t o = (size_t)h * Sk + j;
      int s[3] = {b[0][o], b[2][o], 0}, e[3] = {b[1][o], b[3][o], causal ? j - (Sk - Sq) : 0};
      if (e[2] < 0) e[2] = 0;
      if (e[2] > Sq) e[2] = Sq;
      /* masked rows of the column = measure of the union, by a sweep over the sorted starts */
      int idx[3] = {0, 1, 2};
      for (int x = 0; x < 3; x++)
        for (int y = x + 1; y < 3; y++)
          if (s[idx[y]] < s[idx[x]]) { int t = idx[x]; idx[x] = idx[y]; idx[y] = t; }
      long m = 0, cur = -1;
      for (int x = 0; x < 3; x++) {
        long a = s[idx[x]], z = e[idx[x]];
        if (z <= a) continue;
        if (a < cur) a = cur;
        if (z > a) m += z - a;
        if (z > cur) cur = z;
      }
      vis += Sq - m;
    }
    for (int qb = 0; qb < nq; qb++) {
      const int m0 = qb * 128, m1 = m0 + 128 < Sq ? m0 + 128 : Sq;
      for (int kb = 0; kb < nk; kb++) {
        int all = 1;
        for (int j = kb * 128; j < (kb + 1) * 128 && j < Sk && all; j++) {
          const size_t o = (size_t)h * Sk + j;
          int s[3] = {b[0][o], b[2][o], 0}, e[3] = {b[1][o], b[3][o], causal ? j - (Sk - Sq) : 0};
          all = covers(s, e, m0, m1);
        }
        skip += all;
      }
    }
  }
  *dens = vis / ((double)mh * Sq * Sk);
  *rho = skip / ((double)mh * nq * nk);
}
static void write_npy(const char *path, const int32_t *x, int rows, int cols)
{
  char hdr[128];
  FILE *f = fopen(path, "wb");
  int n = snprintf(hdr, sizeof hdr, "{'descr': '<i4', 'fortran_order': False, 'shape': (%d, %d), }", rows, cols);
  int total = 10 + n + 1, pad = (64 - total % 64) % 64;
  unsigned short hl = (unsigned short)(n + pad + 1);
  if (!f) {
    fprintf(stderr, "fmbench: cannot write %s\n", path);
    exit(1);
  }
  fwrite("\x93NUMPY\x01\x00", 1, 8, f);
  fwrite(&hl, 2, 1, f);
  fwrite(hdr, 1, n, f);
  for (int i = 0; i < pad; i++) fputc(' ', f);
  fputc('\n', f);
  fwrite(x, sizeof(int32_t), (size_t)rows * cols, f);
  fclose(f);
}
#endif

/* Upload one mask, run the forward once (path check), then warm-up and timed runs; print a row. */
static void time_mask(const char *name, const FMMaskDesc *md, double rho, double dens, int S, int B, int H, int Hkv,
                      int D, FMDType dt, void *q, void *k, void *v, void *o, float *lse, cudaEvent_t e0,
                      cudaEvent_t e1, int warm, int reps, FILE *fcsv)
{
  FMAttnProblem p;
  void *dmask = NULL;
  float *ms = (float *)malloc(sizeof(float) * reps), med;
  FC(FMCudaMaskUpload(md, &dmask));
  memset(&p, 0, sizeof p);
  p.batch = B;
  p.heads_q = H;
  p.heads_kv = Hkv;
  p.head_dim = D;
  p.dtype = dt;
  p.scale = 1.0f / sqrtf((float)D);
  p.nq = S;
  p.nk = S;
  p.mask = *md;
  FC(FMCudaForward(&p, dmask, q, k, v, o, lse, NULL));
  CK(cudaDeviceSynchronize());
  if (FMCudaLastPath_Private != 1) {
    printf("%-22s %6d %3d %9s %9s %7.4f %8.4f fallback (not timed)\n", name, S, B, "-", "-", rho, dens);
  } else {
    for (int w = 0; w < warm; w++) FC(FMCudaForward(&p, dmask, q, k, v, o, lse, NULL));
    for (int r = 0; r < reps; r++) {
      CK(cudaEventRecord(e0, NULL));
      FC(FMCudaForward(&p, dmask, q, k, v, o, lse, NULL));
      CK(cudaEventRecord(e1, NULL));
      CK(cudaEventSynchronize(e1));
      CK(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    qsort(ms, reps, sizeof(float), cmpf);
    med = ms[reps / 2];
    const double fl = 4.0 * B * H * (double)S * S * D * (1.0 - rho);
    const double tf = fl / (med * 1e-3) / 1e12;
    printf("%-22s %6d %3d %9.3f %9.1f %7.4f %8.4f sm90\n", name, S, B, med, tf, rho, dens);
    if (fcsv) fprintf(fcsv, "%s,%d,%d,%d,%d,%.4f,%.2f,%.5f,%.5f,sm90\n", name, S, B, H, D, med, tf, rho, dens);
  }
  fflush(stdout);
  free(ms);
  FC(FMCudaMaskFree(dmask));
}

int main(int argc, char **argv)
{
  char masks_opt[1024] = "all", seq_opt[256] = "8192,32768", out[512] = "", csv[512] = "", dts[16] = "bf16";
  int D = 128, H = 32, Hkv = -1, warm = 3, reps = 10, use[12] = {0}, seqs[16], nseq = 0, dry = 0;
  long tokens = 131072;
  unsigned long seed = 42;
  FMDType dt;
  FILE *fcsv = NULL;
  int dev = 0, sm = 0;
  char devname[256];

  FC(FMInitialize(&argc, &argv, NULL, "fmbench: time the CUDA forward on the benchmark masks (-cp: the context-parallel forward)"));
  for (int a = 1; a < argc; a++)
    if (!strcmp(argv[a], "-cp")) {
#ifdef FMBENCH_STANDALONE
      fprintf(stderr, "fmbench: -cp needs MPI and the library; it is not in the standalone build\n");
      FMFinalize();
      return 1;
#else
      int rc = FMBenchCP(argc, argv);
      FMFinalize();
      return rc;
#endif
    }
  for (int a = 1; a < argc; a++)
    if (!strcmp(argv[a], "-dryrun")) dry = 1;
  for (int a = 1; a + 1 < argc; a++) {
    const char *k = argv[a], *v = argv[a + 1];
    if (!strcmp(k, "-masks")) snprintf(masks_opt, sizeof masks_opt, "%s", v);
    else if (!strcmp(k, "-seqlen")) snprintf(seq_opt, sizeof seq_opt, "%s", v);
    else if (!strcmp(k, "-head_dim")) D = atoi(v);
    else if (!strcmp(k, "-heads")) H = atoi(v);
    else if (!strcmp(k, "-heads_kv")) Hkv = atoi(v);
    else if (!strcmp(k, "-tokens")) tokens = atol(v);
    else if (!strcmp(k, "-dtype")) snprintf(dts, sizeof dts, "%s", v);
    else if (!strcmp(k, "-warmup")) warm = atoi(v);
    else if (!strcmp(k, "-reps")) reps = atoi(v);
    else if (!strcmp(k, "-seed")) seed = strtoul(v, NULL, 10);
    else if (!strcmp(k, "-o")) snprintf(out, sizeof out, "%s", v);
    else if (!strcmp(k, "-csv")) snprintf(csv, sizeof csv, "%s", v);
    else continue;
    a++;
  }
  if (Hkv <= 0) Hkv = H;
  dt = !strcmp(dts, "fp16") ? FM_DTYPE_FP16 : FM_DTYPE_BF16;
  if (reps < 1) reps = 1;
  if (!strcmp(masks_opt, "all")) {
    for (int i = 0; i < 12; i++) use[i] = 1;
  } else {
    char *tok, *save = NULL;
    for (tok = strtok_r(masks_opt, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
      int found = 0;
      for (int i = 0; i < 12; i++)
        if (!strcmp(tok, names[i])) use[i] = found = 1;
      if (!found) {
        fprintf(stderr, "fmbench: unknown mask '%s'\n", tok);
        return 1;
      }
    }
  }
  {
    char *tok, *save = NULL;
    for (tok = strtok_r(seq_opt, ",", &save); tok && nseq < 16; tok = strtok_r(NULL, ",", &save)) seqs[nseq++] = atoi(tok);
  }
  snprintf(devname, sizeof devname, "none (dry run)");
  if (!dry) {
    int ndev = 0;
    FC(FMCudaDeviceCount(&ndev));
    if (!ndev) {
      fprintf(stderr, "fmbench: no CUDA device\n");
      FMFinalize();
      return 77;
    }
    CK(cudaGetDevice(&dev));
    FC(FMCudaDeviceInfo(dev, devname, sizeof devname, NULL, 0, &sm));
  }
#ifdef FMBENCH_STANDALONE
  if (!out[0]) snprintf(out, sizeof out, "fmbench_masks");
  mkdir(out, 0755);
  {
    char idx[600];
    snprintf(idx, sizeof idx, "%s/index.txt", out);
    FILE *f = fopen(idx, "w");
    if (f) fclose(f);
  }
#else
  if (!out[0]) snprintf(out, sizeof out, "fmbench_masks.h5");
  FMContext ctx;
  FC(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FC(FMContextSetFromOptions(ctx));
  FC(FMContextSetUp(ctx));
  remove(out);
#endif
  if (csv[0]) {
    fcsv = fopen(csv, "w");
    if (fcsv) fprintf(fcsv, "mask,seqlen,batch,heads,head_dim,ms,tflops,block_sparsity,density,path\n");
  }
  printf("fmbench: %s (sm %d), path %s; %s, d = %d, H = %d (kv %d), %ld tokens per batch\n", devname, sm,
         FMCudaForwardPathName(sm), dts, D, H, Hkv, tokens);
  printf("%-22s %6s %3s %9s %9s %7s %8s %s\n", "mask", "seqlen", "B", "ms", "TFLOP/s", "rho", "density", "path");

  for (int si = 0; si < nseq; si++) {
    const int S = seqs[si];
    const int B = tokens / S > 0 ? (int)(tokens / S) : 1;
    const size_t nq = (size_t)B * S * H * D, nk = (size_t)B * S * Hkv * D;
    void *q = NULL, *k = NULL, *v = NULL, *o = NULL;
    float *lse = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    if (!dry) {
      CK(cudaMalloc(&q, nq * 2));
      CK(cudaMalloc(&k, nk * 2));
      CK(cudaMalloc(&v, nk * 2));
      CK(cudaMalloc(&o, nq * 2));
      CK(cudaMalloc((void **)&lse, (size_t)B * H * S * sizeof(float)));
      FC(FMCudaFillRandom_Private(q, nq, dt, seed * 3 + 1, 1.5f, NULL));
      FC(FMCudaFillRandom_Private(k, nk, dt, seed * 3 + 2, 1.5f, NULL));
      FC(FMCudaFillRandom_Private(v, nk, dt, seed * 3 + 3, 1.0f, NULL));
      CK(cudaEventCreate(&e0));
      CK(cudaEventCreate(&e1));
    }
    for (int t = 0; t < 12; t++) {
      if (!use[t]) continue;
      const int mh = t == 11 ? Hkv : 1; /* random eviction differs per head */
      FMMaskDesc md;
      double dens = 0, rho = 0;
      char mname[128];
      snprintf(mname, sizeof mname, "%s_%d", names[t], S);
      memset(&md, 0, sizeof md);
#ifdef FMBENCH_STANDALONE
      int32_t *bb[4];
      for (int x = 0; x < 4; x++) bb[x] = (int32_t *)malloc(sizeof(int32_t) * (size_t)mh * S);
      md.causal = gm_build(t, S, S, mh, seed, bb[0], bb[1], bb[2], bb[3]);
      md.seqlen_q = md.seqlen_k = S;
      md.mask_heads = mh;
      md.present = 15;
      for (int x = 0; x < 4; x++) md.bnd[x] = bb[x];
      density((const int32_t *const *)bb, md.causal, S, S, mh, &dens, &rho);
      {
        char path[700];
        static const char *vn[4] = {"lts", "lte", "uts", "ute"};
        for (int x = 0; x < 4; x++) {
          snprintf(path, sizeof path, "%s/%s.%s.npy", out, mname, vn[x]);
          write_npy(path, bb[x], mh, S);
        }
        snprintf(path, sizeof path, "%s/index.txt", out);
        FILE *f = fopen(path, "a");
        if (f) {
          fprintf(f, "%s %s %d %d %d %d\n", mname, names[t], S, S, mh, md.causal);
          fclose(f);
        }
      }
#else
      FMMask m;
      FC(FMMaskCreate(ctx, &m));
      FC(FMMaskSetSizes(m, S, S, mh));
      FC(FMMaskSetType(m, names[t]));
      FC(FMMaskSetSeed(m, seed));
      FC(FMMaskSetUp(m));
      FC(FMMaskGetDesc_Private(m, &md));
      FC(FMMaskGetDensity(m, &dens, &rho));
#if FM_HAVE_HDF5
      FC(FMMaskSave(m, out, mname));
#endif
#endif
      if (dry)
        printf("%-22s %6d %3d %9s %9s %7.4f %8.4f dry run (mask saved)\n", names[t], S, B, "-", "-", rho, dens);
      else
        time_mask(names[t], &md, rho, dens, S, B, H, Hkv, D, dt, q, k, v, o, lse, e0, e1, warm, reps, fcsv);
#ifdef FMBENCH_STANDALONE
      for (int x = 0; x < 4; x++) free(bb[x]);
#else
      FC(FMMaskDestroy(&m));
#endif
    }
    if (!dry) {
      CK(cudaEventDestroy(e0));
      CK(cudaEventDestroy(e1));
    }
    cudaFree(q);
    cudaFree(k);
    cudaFree(v);
    cudaFree(o);
    cudaFree(lse);
  }
  if (fcsv) fclose(fcsv);
#ifndef FMBENCH_STANDALONE
  FC(FMContextDestroy(&ctx));
#endif
  FMFinalize();
  return 0;
}
