/*
 * fuzz_bounds.c - fuzz target of user bounds: the input is decoded into a small mask of type
 * "bounds" and its vectors, given by FMMaskSetAllBounds or by FMMaskSetSampleBounds per sample
 * and head, then set up. Each result is checked against brute force over the dense mask, computed
 * from the input alone:
 *   - a call rejects the input exactly when brute force finds a violation: lte without lts, uts
 *     without ute (FM_ERR_ARG_INCOMP), a bound out of [0, seqlen_q] or a start past its end
 *     (FM_ERR_ARG_OUTOFRANGE); the rejection carries a message;
 *   - after a set-up, every (sample, head, i, j) of the set-up bounds (normalized) is masked
 *     exactly where the input's is, FMMaskIsMasked agrees for sample 0;
 *   - the element density and the block sparsity are exact;
 *   - every aligned tile's class is sound: SKIP only if all its entries are masked, FULL only
 *     if none is;
 *   - where flags bit 5 asks, the CPU backend's fp32 forward (O, LSE) and backward (dQ, dK, dV)
 *     of a plan with this mask (batch = the mask's samples, kv heads = its heads, or two heads
 *     sharing its one head where bit 7 asks, twice as many query heads where bit 6 asks (GQA
 *     2:1), head_dim 8, plan type "cp" where the block byte's bit 7 asks or on several ranks
 *     (mpiexec: every rank runs the same inputs; each checks that the plan's rows and keys are a
 *     partition, and its own rows and keys in the plan's order), fresh
 *     random inputs, outputs poisoned with NaN first) match a float64 reference to 1e-4: fully
 *     masked rows give O = 0 and LSE = -inf, and their keys no gradient.
 * The input format, bytes in order (a missing byte reads as 0; see decode()):
 *   seqlen_q = 1 + b % 40, seqlen_k = 1 + b % 40; flags: bit 0 two heads, bit 1 two samples,
 *   bit 2 causal, bit 3 one FMMaskSetSampleBounds call per sample and head (else one
 *   FMMaskSetAllBounds), bit 4 each given pair made ordered (start <= end), bit 5 the
 *   attention check, bit 6 GQA 2:1 in it, bit 7 one mask head for two kv heads in it; the block size
 *   1 + (b & 127) % 20 (bit 7: plan type "cp" in the attention check); which vectors are given
 *   (bits 0-3: lts, lte, uts, ute); the cp plan's settings (bits 0-1: partition, 0 its default,
 *   else contiguous, dual_chunk, balanced; bit 2 the hierarchical route over two virtual nodes;
 *   bit 3 the ring schedule; bit 4 prune off; bit 5 overlap off; bit 6 deterministic, any plan
 *   (a second run must give the same bits); bit 7
 *   chunks of 1 + (seqlen_q + seqlen_k) % 11 rows); then the values of the
 *   given vectors, vector by vector, row by row: 0xff is -1, 0xfe is seqlen_q + 1, 0xf0-0xfd
 *   repeat the previous value (runs, as in real masks), any other byte b is b % (seqlen_q + 1);
 *   past the input's end a vector repeats its last value. See fuzz.h.
 */
#include "fuzz.h"
#include <flashmask.h>
#include <flashmask/private/fmimpl.h>
#include <math.h>
#include <mpi.h>
#include <string.h>

const char *fm_fuzz_target = "bounds";
static FMContext ctx;

static void finish(void)
{
  FMContextDestroy(&ctx);
  FMFinalize();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  if (FMInitialize(NULL, NULL, NULL, NULL) || FMPushErrorHandler(FM_ERROR_HANDLER_SILENT)) return 1;
  if (FMContextCreate(MPI_COMM_WORLD, &ctx) || FMContextSetBackend(ctx, FM_BACKEND_CPU) || FMContextSetUp(ctx)) return 1;
  atexit(finish);
  return 0;
}

void FMFuzzQuiesce(void) {}

enum { MAXS = 40, MAXG = 4 };

typedef struct {
  int Sq, Sk, heads, batch, causal, per_head, ordered, attn, gq, hkv, cp, block, given, popt;
  int32_t v[4][MAXG * MAXS]; /* the given vectors, [sample][head][key] */
} Input;

typedef struct {
  const uint8_t *d;
  size_t n, at;
} Reader;

static int next_byte(Reader *r, int *end) { return r->at < r->n ? r->d[r->at++] : (*end = 1, 0); }

static void decode(const uint8_t *data, size_t size, Input *in)
{
  Reader r = {data, size, 0};
  int end = 0, f;
  in->Sq = 1 + next_byte(&r, &end) % MAXS;
  in->Sk = 1 + next_byte(&r, &end) % MAXS;
  f = next_byte(&r, &end);
  in->heads = 1 + (f & 1);
  in->batch = 1 + (f >> 1 & 1);
  in->causal = f >> 2 & 1;
  in->per_head = f >> 3 & 1;
  in->ordered = f >> 4 & 1;
  in->attn = f >> 5 & 1;
  in->gq = 1 + (f >> 6 & 1);
  in->hkv = in->heads == 1 && (f >> 7 & 1) ? 2 : in->heads; /* kv heads: one mask head may serve two */
  f = next_byte(&r, &end);
  in->block = 1 + (f & 127) % 20;
  in->cp = f >> 7 & 1;
  in->given = next_byte(&r, &end) & 15;
  in->popt = next_byte(&r, &end);
  for (int v = 0; v < 4; v++) {
    int32_t prev = v < 2 ? in->Sq : 0;
    end = 0;
    if (!(in->given >> v & 1)) continue;
    for (int k = 0; k < in->batch * in->heads * in->Sk; k++) {
      const int b = end ? 0xf0 : next_byte(&r, &end);
      const int32_t x = end || (b >= 0xf0 && b <= 0xfd) ? prev : b == 0xff ? -1 : b == 0xfe ? in->Sq + 1 : b % (in->Sq + 1);
      in->v[v][k] = prev = x;
    }
  }
  if (in->ordered)
    for (int v = 0; v < 4; v += 2)
      if ((in->given >> v & 3) == 3)
        for (int k = 0; k < in->batch * in->heads * in->Sk; k++)
          if (in->v[v][k] > in->v[v + 1][k]) {
            const int32_t t = in->v[v][k];
            in->v[v][k] = in->v[v + 1][k];
            in->v[v + 1][k] = t;
          }
}

/* Bound v of entry k, its default where it is not given. */
static int32_t bound(const Input *in, int v, int k) { return in->given >> v & 1 ? in->v[v][k] : v < 2 ? in->Sq : 0; }

/* The error the input must give (0: none). */
static FMErrorCode expected_error(const Input *in)
{
  if ((in->given & 2) && !(in->given & 1)) return FM_ERR_ARG_INCOMP;
  if ((in->given & 4) && !(in->given & 8)) return FM_ERR_ARG_INCOMP;
  for (int k = 0; k < in->batch * in->heads * in->Sk; k++) {
    for (int v = 0; v < 4; v++)
      if (bound(in, v, k) < 0 || bound(in, v, k) > in->Sq) return FM_ERR_ARG_OUTOFRANGE;
    if (bound(in, 0, k) > bound(in, 1, k) || bound(in, 2, k) > bound(in, 3, k)) return FM_ERR_ARG_OUTOFRANGE;
  }
  return FM_SUCCESS;
}

/* Whether row i may not attend key j in mask row g, from bounds b (each [rows][seqlen_k]). */
static int masked(const int32_t *const b[4], int Sq, int Sk, int causal, int g, int i, int j)
{
  const size_t o = (size_t)g * Sk + j;
  return (b[0][o] <= i && i < b[1][o]) || (b[2][o] <= i && i < b[3][o]) || (causal && j > i + (Sk - Sq));
}

static FMErrorCode give(FMMask m, const Input *in)
{
  const int32_t *p[4];
  FMErrorCode e = FM_SUCCESS;
  if (!in->per_head) {
    for (int v = 0; v < 4; v++) p[v] = in->given >> v & 1 ? in->v[v] : NULL;
    return FMMaskSetAllBounds(m, p[0], p[1], p[2], p[3]);
  }
  for (int s = 0; s < in->batch && !e; s++)
    for (int h = 0; h < in->heads && !e; h++) {
      for (int v = 0; v < 4; v++) p[v] = in->given >> v & 1 ? in->v[v] + (size_t)(s * in->heads + h) * in->Sk : NULL;
      e = FMMaskSetSampleBounds(m, s, h, p[0], p[1], p[2], p[3]);
    }
  return e;
}

static void check(FMMask m, const Input *in)
{
  const int Sq = in->Sq, Sk = in->Sk, B = in->block, G = in->batch * in->heads;
  const int nqb = (Sq + B - 1) / B, nkb = (Sk + B - 1) / B;
  int32_t ref[4][MAXG * MAXS];
  const int32_t *rb[4] = {ref[0], ref[1], ref[2], ref[3]};
  long nmasked = 0, nskip = 0;
  double density, sparsity;
  FMMaskDesc d;
  for (int v = 0; v < 4; v++)
    for (int k = 0; k < G * Sk; k++) ref[v][k] = bound(in, v, k);
  if (FMMaskGetDesc_Private(m, &d)) fm_fuzz_fail("FMMaskGetDesc_Private: %s", FMGetLastErrorMessage());
  if (d.block != B || d.nblocks_k != nkb) fm_fuzz_fail("block %d, %d key blocks; expected %d, %d", d.block, d.nblocks_k, B, nkb);
  for (int g = 0; g < G; g++)
    for (int i = 0; i < Sq; i++)
      for (int j = 0; j < Sk; j++) {
        const int x = masked(rb, Sq, Sk, in->causal, g, i, j);
        nmasked += x;
        if (masked(d.bnd, Sq, Sk, d.causal, g, i, j) != x)
          fm_fuzz_fail("row %d, (%d, %d): the set-up bounds say %s, the input %s", g, i, j, x ? "visible" : "masked", x ? "masked" : "visible");
        if (g < in->heads && (i * 7 + j) % 5 == 0) {
          FMBool im;
          if (FMMaskIsMasked(m, g, i, j, &im) || (int)im != x) fm_fuzz_fail("FMMaskIsMasked(%d, %d, %d) is %d, expected %d", g, i, j, (int)im, x);
        }
      }
  for (int g = 0; g < G; g++)
    for (int qb = 0; qb < nqb; qb++)
      for (int kb = 0; kb < nkb; kb++) {
        const int m0 = qb * B, m1 = m0 + B < Sq ? m0 + B : Sq, c0 = kb * B, c1 = c0 + B < Sk ? c0 + B : Sk;
        long n = 0;
        FMTileClass cls;
        for (int i = m0; i < m1; i++)
          for (int j = c0; j < c1; j++) n += masked(rb, Sq, Sk, in->causal, g, i, j);
        nskip += n == (long)(m1 - m0) * (c1 - c0);
        cls = FMMaskClassifyTile_Private(m, g, m0, m1, kb);
        if ((cls == FM_TILE_SKIP && n != (long)(m1 - m0) * (c1 - c0)) || (cls == FM_TILE_FULL && n != 0))
          fm_fuzz_fail("row %d tile (%d, %d): class %d with %ld of %d entries masked", g, qb, kb, (int)cls, n, (m1 - m0) * (c1 - c0));
      }
  if (FMMaskGetDensity(m, &density, &sparsity)) fm_fuzz_fail("FMMaskGetDensity: %s", FMGetLastErrorMessage());
  if (fabs(density - (1.0 - (double)nmasked / ((double)G * Sq * Sk))) > 1e-12)
    fm_fuzz_fail("element density %.15f, brute force %.15f", density, 1.0 - (double)nmasked / ((double)G * Sq * Sk));
  if (fabs(sparsity - (double)nskip / ((double)G * nqb * nkb)) > 1e-12)
    fm_fuzz_fail("block sparsity %.15f, brute force %.15f (%ld of %d tiles)", sparsity, (double)nskip / ((double)G * nqb * nkb), nskip,
                 G * nqb * nkb);
}

enum { HD = 8 };

/* The float64 reference of one (sample, query head hq) slice: O, LSE and the gradients, from the
   input's bounds (kv head hq / gq; mask row: that kv head's, or the sample's one head). Tensors
   are [batch][seq][heads][HD] (heads_q = hkv * gq heads for q, o, dout, dq; hkv for k, v, dk,
   dv); lse [batch][heads_q][Sq]. */
static void reference(const Input *in, const int32_t *const b[4], int smp, int hq, double scale, const float *q, const float *k, const float *v,
                      const float *dout, double *o, double *lse, double *dq, double *dk, double *dv)
{
  const int Sq = in->Sq, Sk = in->Sk, H = in->hkv, Hq = H * in->gq, h = hq / in->gq, g = smp * in->heads + (in->heads > 1 ? h : 0);
  double p[MAXS];
  for (int i = 0; i < Sq; i++) {
    const size_t qi = (((size_t)smp * Sq + i) * Hq + hq) * HD;
    double mx = -INFINITY, l = 0, dd = 0;
    for (int j = 0; j < Sk; j++) {
      const size_t kj = (((size_t)smp * Sk + j) * H + h) * HD;
      double x = 0;
      for (int c = 0; c < HD; c++) x += (double)q[qi + c] * k[kj + c];
      p[j] = masked(b, Sq, Sk, in->causal, g, i, j) ? -INFINITY : scale * x;
      if (p[j] > mx) mx = p[j];
    }
    lse[((size_t)smp * Hq + hq) * Sq + i] = mx;
    for (int c = 0; c < HD; c++) o[qi + c] = 0;
    if (mx == -INFINITY) continue; /* fully masked: O = 0, LSE = -inf, no gradient */
    for (int j = 0; j < Sk; j++) l += p[j] = p[j] == -INFINITY ? 0 : exp(p[j] - mx);
    lse[((size_t)smp * Hq + hq) * Sq + i] = mx + log(l);
    for (int j = 0; j < Sk; j++) {
      const size_t kj = (((size_t)smp * Sk + j) * H + h) * HD;
      p[j] /= l;
      for (int c = 0; c < HD; c++) o[qi + c] += p[j] * v[kj + c];
    }
    for (int c = 0; c < HD; c++) dd += (double)dout[qi + c] * o[qi + c];
    for (int j = 0; j < Sk; j++) {
      const size_t kj = (((size_t)smp * Sk + j) * H + h) * HD;
      double dp = 0, ds;
      if (p[j] == 0) continue;
      for (int c = 0; c < HD; c++) dp += (double)dout[qi + c] * v[kj + c];
      ds = p[j] * (dp - dd);
      for (int c = 0; c < HD; c++) {
        dq[qi + c] += scale * ds * k[kj + c];
        dk[kj + c] += scale * ds * q[qi + c];
        dv[kj + c] += p[j] * dout[qi + c];
      }
    }
  }
}

static void compare(const char *what, const float *got, const double *want, size_t n)
{
  double scale = 0;
  for (size_t i = 0; i < n; i++)
    if (isfinite(want[i]) && fabs(want[i]) > scale) scale = fabs(want[i]);
  for (size_t i = 0; i < n; i++) {
    const int same = isinf(want[i]) ? got[i] == want[i] : fabs(got[i] - want[i]) <= 1e-4 * (scale > 1 ? scale : 1);
    if (!same) fm_fuzz_fail("%s[%zu] is %.9g, the float64 reference %.9g", what, i, (double)got[i], want[i]);
  }
}

/* dst[b][r] = src[b][idx[r]] for rows of w values, over batch entries of n local and ng global
   rows (T: float or double). */
#define FM_GATHER_ROWS(T, dst, src, batch, n, ng, idx, w)                                                \
  for (int b_ = 0; b_ < (batch); b_++)                                                                  \
    for (int r_ = 0; r_ < (n); r_++)                                                                    \
      memcpy((dst) + ((size_t)b_ * (n) + r_) * (w), (src) + ((size_t)b_ * (ng) + (idx)[r_]) * (w), sizeof(T) * (w))

/* A plan's rows or keys over the ranks (this rank's n of them, idx): each of 0..ng-1 exactly once. */
static void check_partition(const char *what, int n, const int *idx, int ng)
{
  int cnt[MAXS];
  memset(cnt, 0, sizeof(cnt));
  for (int i = 0; i < n; i++) {
    if (idx[i] < 0 || idx[i] >= ng) fm_fuzz_fail("the plan's %s list has %d at %d (of %d)", what, idx[i], i, ng);
    cnt[idx[i]]++;
  }
  MPI_Allreduce(MPI_IN_PLACE, cnt, ng, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  for (int i = 0; i < ng; i++)
    if (cnt[i] != 1) fm_fuzz_fail("%s %d is held by %d ranks", what, i, cnt[i]);
}

/*
 * The CPU backend's forward and backward on the mask against reference(), on this rank's rows and
 * keys: a "local" plan holds them all; a "cp" plan (always on several ranks) holds a partition,
 * in its order, and the tensors are gathered into that order first.
 */
static void check_attention(FMMask m, const Input *in, const uint8_t *data, size_t size)
{
  const int B = in->batch, H = in->hkv, Hq = H * in->gq, Sq = in->Sq, Sk = in->Sk;
  const size_t nq = (size_t)B * Sq * Hq * HD, nk = (size_t)B * Sk * H * HD, wq = (size_t)Hq * HD, wk = (size_t)H * HD;
  enum { NQ = 2 * MAXG * MAXS * HD, NL = 2 * MAXG * MAXS }; /* GQA 2:1: twice the query heads */
  static float q[NQ], k[NQ], v[NQ], dout[NQ], lq[NQ], lk[NQ], lv[NQ], ld[NQ], o[NQ], dq[NQ], dk[NQ], dv[NQ], lse[NL];
  static double ro[NQ], rdq[NQ], rdk[NQ], rdv[NQ], rlse[NL], lro[NQ], lrdq[NQ], lrdk[NQ], lrdv[NQ], lrlse[NL];
  int32_t ref[4][MAXG * MAXS];
  const int32_t *rb[4] = {ref[0], ref[1], ref[2], ref[3]};
  const int *rows, *keys;
  int nr, nkk, size_w = 1;
  uint64_t x = 0x9e3779b97f4a7c15ull;
  double scale;
  FMPlan plan = NULL;
  MPI_Comm_size(MPI_COMM_WORLD, &size_w);
  for (size_t i = 0; i < size; i++) x = (x ^ data[i]) * 0x100000001b3ull; /* fresh inputs per input, the same on every rank */
  for (size_t i = 0; i < (nq > nk ? nq : nk); i++)
    for (int t = 0; t < 4; t++) {
      float *dst = t == 0 ? q : t == 1 ? k : t == 2 ? v : dout;
      x ^= x >> 31;
      x *= 0xbf58476d1ce4e5b9ull;
      x ^= x >> 29;
      if (i < (t == 1 || t == 2 ? nk : nq)) dst[i] = (float)((double)(x >> 11) / 9007199254740992.0 * 4.0 - 2.0);
    }
  for (int w = 0; w < 4; w++)
    for (int j = 0; j < B * in->heads * Sk; j++) ref[w][j] = bound(in, w, j);
  if (FMPlanCreate(ctx, &plan) || FMPlanSetType(plan, in->cp || size_w > 1 ? FMPLANCP : FMPLANLOCAL) || FMPlanSetMask(plan, m) ||
      FMPlanSetShape(plan, B, Hq, H, HD, FM_DTYPE_FP32))
    fm_fuzz_fail("a plan: %s", FMGetLastErrorMessage());
  if (in->cp || size_w > 1) { /* the cp plan's settings from the input */
    static const char *const part[3] = {"contiguous", "dual_chunk", "balanced"};
    const int o = in->popt;
    if (((o & 3) && FMPlanSetPartition(plan, part[(o & 3) - 1])) ||
        ((o & 4) && (FMPlanSetRoute(plan, "hierarchical") || FMPlanSetVirtualNodes(plan, size_w > 1 ? 2 : 1))) ||
        ((o & 8) && FMPlanSetSchedule(plan, "ring")) || ((o & 16) && FMPlanSetPrune(plan, FM_FALSE)) ||
        ((o & 32) && FMPlanSetOverlap(plan, FM_FALSE)) || ((o & 128) && FMPlanSetChunk(plan, 1 + (Sq + Sk) % 11)))
      fm_fuzz_fail("the cp settings %#x: %s", o, FMGetLastErrorMessage());
  }
  if ((in->popt & 64) && FMPlanSetDeterministic(plan, FM_TRUE)) fm_fuzz_fail("FMPlanSetDeterministic: %s", FMGetLastErrorMessage());
  if (FMPlanSetUp(plan) || FMPlanGetScale(plan, &scale) || FMPlanGetLocalRows(plan, &nr, &rows) || FMPlanGetLocalKeys(plan, &nkk, &keys))
    fm_fuzz_fail("a plan on valid bounds (cp settings %#x): %s", in->popt, FMGetLastErrorMessage());
  check_partition("row", nr, rows, Sq);
  check_partition("key", nkk, keys, Sk);
  FM_GATHER_ROWS(float, lq, q, B, nr, Sq, rows, wq);
  FM_GATHER_ROWS(float, ld, dout, B, nr, Sq, rows, wq);
  FM_GATHER_ROWS(float, lk, k, B, nkk, Sk, keys, wk);
  FM_GATHER_ROWS(float, lv, v, B, nkk, Sk, keys, wk);
  for (size_t i = 0; i < (size_t)B * nr * wq; i++) o[i] = dq[i] = NAN;
  for (size_t i = 0; i < (size_t)B * nkk * wk; i++) dk[i] = dv[i] = NAN;
  for (size_t i = 0; i < (size_t)B * Hq * nr; i++) lse[i] = NAN;
  if (FMPlanForward(plan, nr ? lq : NULL, nkk ? lk : NULL, nkk ? lv : NULL, nr ? o : NULL, nr ? lse : NULL) ||
      FMPlanBackward(plan, nr ? lq : NULL, nkk ? lk : NULL, nkk ? lv : NULL, nr ? o : NULL, nr ? lse : NULL, nr ? ld : NULL, nr ? dq : NULL,
                     nkk ? dk : NULL, nkk ? dv : NULL))
    fm_fuzz_fail("the CPU forward and backward: %s", FMGetLastErrorMessage());
  if (in->popt & 64) { /* deterministic: a second forward and backward give the same bits */
    static float o2[NQ], dq2[NQ], dk2[NQ], dv2[NQ], lse2[NL];
    const size_t a = (size_t)B * nr * wq, b = (size_t)B * nkk * wk;
    if (FMPlanForward(plan, nr ? lq : NULL, nkk ? lk : NULL, nkk ? lv : NULL, nr ? o2 : NULL, nr ? lse2 : NULL) ||
        FMPlanBackward(plan, nr ? lq : NULL, nkk ? lk : NULL, nkk ? lv : NULL, nr ? o : NULL, nr ? lse : NULL, nr ? ld : NULL, nr ? dq2 : NULL,
                       nkk ? dk2 : NULL, nkk ? dv2 : NULL))
      fm_fuzz_fail("the second deterministic forward and backward: %s", FMGetLastErrorMessage());
    if (memcmp(o, o2, sizeof(float) * a) || memcmp(lse, lse2, sizeof(float) * (size_t)B * Hq * nr) || memcmp(dq, dq2, sizeof(float) * a) ||
        memcmp(dk, dk2, sizeof(float) * b) || memcmp(dv, dv2, sizeof(float) * b))
      fm_fuzz_fail("a deterministic plan gave other bits on its second run");
  }
  memset(rdq, 0, sizeof(double) * nq);
  memset(rdk, 0, sizeof(double) * nk);
  memset(rdv, 0, sizeof(double) * nk);
  for (int smp = 0; smp < B; smp++)
    for (int hq = 0; hq < Hq; hq++) reference(in, rb, smp, hq, scale, q, k, v, dout, ro, rlse, rdq, rdk, rdv);
  /* the reference in this rank's order */
  FM_GATHER_ROWS(double, lro, ro, B, nr, Sq, rows, wq);
  FM_GATHER_ROWS(double, lrdq, rdq, B, nr, Sq, rows, wq);
  FM_GATHER_ROWS(double, lrdk, rdk, B, nkk, Sk, keys, wk);
  FM_GATHER_ROWS(double, lrdv, rdv, B, nkk, Sk, keys, wk);
  FM_GATHER_ROWS(double, lrlse, rlse, B * Hq, nr, Sq, rows, 1); /* [batch][heads_q][rows] */
  compare("o", o, lro, (size_t)B * nr * wq);
  compare("lse", lse, lrlse, (size_t)B * Hq * nr);
  compare("dq", dq, lrdq, (size_t)B * nr * wq);
  compare("dk", dk, lrdk, (size_t)B * nkk * wk);
  compare("dv", dv, lrdv, (size_t)B * nkk * wk);
  FMPlanDestroy(&plan); /* rows and keys are the plan's */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  static Input in;
  FMMask m = NULL;
  FMErrorCode e, want;
  decode(data, size, &in);
  want = expected_error(&in);
  if (FMMaskCreate(ctx, &m) || FMMaskSetSizes(m, in.Sq, in.Sk, in.heads) || (in.batch > 1 && FMMaskSetBatch(m, in.batch)) ||
      FMMaskSetType(m, FMMASKBOUNDS) || FMMaskSetCausal(m, in.causal ? FM_TRUE : FM_FALSE) || FMMaskSetBlockSize(m, in.block))
    fm_fuzz_fail("setting up a %dx%d mask (%d heads, batch %d, block %d): %s", in.Sq, in.Sk, in.heads, in.batch, in.block,
                 FMGetLastErrorMessage());
  e = give(m, &in);
  if (e != want) fm_fuzz_fail("giving the bounds returned %s, expected %s: %s", FMErrorString(e), FMErrorString(want), FMGetLastErrorMessage());
  if (e && !FMGetLastErrorMessage()[0]) fm_fuzz_fail("giving the bounds returned %s without a message", FMErrorString(e));
  if (!e) {
    if (FMMaskSetUp(m)) fm_fuzz_fail("FMMaskSetUp of valid bounds: %s", FMGetLastErrorMessage());
    check(m, &in);
    if (in.attn) check_attention(m, &in, data, size);
  }
  FMMaskDestroy(&m);
  return 0;
}
