/*
 * dist_exec_cases.h - the helpers of test_dist_exec (its only includer): the Case table's type,
 * random tensors and their dtype conversions, row picking, the LSE comparison, the case's mask
 * (a builder, or per-head / per-sample user bounds) and its cp settings through the setters.
 * Header-only (static functions).
 */
#ifndef DIST_EXEC_CASES_H
#define DIST_EXEC_CASES_H
#include <flashmask/private/fmdist.h>
#include "fmtest.h"

typedef struct {
  const char *type;
  int Sq, Sk, B, Hq, Hkv, D, mask_heads;
  FMDType dtype;
  const char *part, *route, *chunk;
  int prune, overlap, vnodes;
  const char *sched; /* NULL = gather */
  int mb;            /* mask batch (FMMaskSetBatch; 0 or 1: shared by every sample, else B) */
  int comm;          /* the communication-aware balancer (FMPlanSetBalanceComm) */
} Case;

/* a random float tensor (identical on every rank: same seed) */
static void fill(float *x, size_t n, uint64_t *s)
{
  for (size_t i = 0; i < n; i++) x[i] = (float)fmt_uniform(s);
}

static void to_t(void *dst, FMDType t, const float *x, size_t n)
{
  for (size_t i = 0; i < n; i++) FMFromFloat(dst, i, t, x[i]);
}

static void to_d(double *dst, const void *src, FMDType t, size_t n)
{
  for (size_t i = 0; i < n; i++) dst[i] = FMToFloat(src, i, t);
}

/* rows of a global [outer][S][unit] tensor picked into [outer][n][unit] */
static void pick(void *dst, const void *src, size_t outer, int S, size_t unit, int n, const int *idx)
{
  for (size_t o = 0; o < outer; o++)
    for (int i = 0; i < n; i++) memcpy((char *)dst + (o * n + i) * unit, (const char *)src + (o * S + idx[i]) * unit, unit);
}

static double relerr(const double *a, const double *b, size_t n) { return fmt_relerr(a, b, n); }

static int lse_ok(const float *a, const float *b, size_t n, double tol)
{
  for (size_t i = 0; i < n; i++) {
    if (isinf(b[i]) || isinf(a[i])) { if (a[i] != b[i]) return 0; continue; }
    if (fabs((double)a[i] - b[i]) > tol * (1 + fabs((double)b[i]))) return 0;
  }
  return 1;
}

static FMErrorCode make_mask(FMContext ctx, const Case *c, unsigned long mseed, FMMask *mask)
{
  FMCall(FMMaskCreate(ctx, mask));
  FMCall(FMMaskSetSizes(*mask, c->Sq, c->Sk, c->mask_heads));
  FMCall(FMMaskSetBatch(*mask, c->mb > 1 ? c->mb : 1)); /* builders draw sample s from the seed + s */
  FMCall(FMMaskSetType(*mask, c->type));
  FMCall(FMMaskSetSeed(*mask, mseed));
  FMCall(FMMaskSetBlockSize(*mask, 64));
  if (!strcmp(c->type, FMMASKBOUNDS)) {
    /* per-head user bounds: documents of random lengths, different per head (and sample), plus random spans */
    uint64_t s = mseed * 7919 + 1;
    int32_t *lts = malloc(sizeof(int32_t) * c->Sk), *lte = malloc(sizeof(int32_t) * c->Sk), *uts = malloc(sizeof(int32_t) * c->Sk),
            *ute = malloc(sizeof(int32_t) * c->Sk);
    for (int sh = 0; sh < (c->mb > 1 ? c->mb : 1) * c->mask_heads; sh++) {
      int j = 0, h = sh % c->mask_heads, b = sh / c->mask_heads;
      while (j < c->Sk) {
        int len = 1 + (int)(fmt_next(&s) % (uint64_t)(c->Sk / 3 + 1)), e = j + len > c->Sk ? c->Sk : j + len;
        int rs = (int)((long)j * c->Sq / c->Sk), re = (int)((long)e * c->Sq / c->Sk);
        for (int x = j; x < e; x++) {
          lts[x] = re; lte[x] = c->Sq; uts[x] = 0; ute[x] = rs;
          if (fmt_next(&s) % 8 == 0) { lts[x] = c->Sq; ute[x] = 0; } /* a few global columns */
        }
        j = e;
      }
      if (c->mb > 1) FMCall(FMMaskSetSampleBounds(*mask, b, h, lts, lte, uts, ute)); /* a packing per sample */
      else FMCall(FMMaskSetBounds(*mask, h, lts, lte, uts, ute));
    }
    free(lts); free(lte); free(uts); free(ute);
  }
  FMCall(FMMaskSetUp(*mask));
  return FM_SUCCESS;
}

/* The case's context-parallel settings through the setters, then the options (-fm_trace from FM_OPTIONS). */
static void set_opts(FMPlan plan, const Case *c)
{
  FMT_CALL(FMPlanSetType(plan, FMPLANCP)); /* the context-parallel executor on every rank count, 1 included */
  FMT_CALL(FMPlanSetPartition(plan, c->part));
  FMT_CALL(FMPlanSetRoute(plan, c->route));
  FMT_CALL(FMPlanSetChunk(plan, atoi(c->chunk)));
  FMT_CALL(FMPlanSetPrune(plan, c->prune ? FM_TRUE : FM_FALSE));
  FMT_CALL(FMPlanSetOverlap(plan, c->overlap ? FM_TRUE : FM_FALSE));
  FMT_CALL(FMPlanSetVirtualNodes(plan, c->vnodes));
  FMT_CALL(FMPlanSetSchedule(plan, c->sched ? c->sched : "gather"));
  FMT_CALL(FMPlanSetBalanceComm(plan, c->comm ? FM_TRUE : FM_FALSE));
  FMT_CALL(FMPlanSetFromOptions(plan));
}

#endif /* DIST_EXEC_CASES_H */
