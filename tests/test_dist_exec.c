/*
 * test_dist_exec.c - the context-parallel plan on the CPU backend over MPI: distributed
 * forward and backward equal the single-rank CPU result (to rounding) for the 12 masks,
 * per-head user bounds, GQA, seqlen_q != seqlen_k and lengths that do not divide; every
 * partition, route, pruning and overlap setting; FMPlanScatter/FMPlanGather; the bytes
 * actually received equal what the needed set and route predict and, on document masks,
 * stay strictly below an unpruned all-gather; a rank with a different mask fails with
 * FM_ERR_MISMATCH on every rank; a NULL global on root or a NULL local where the local count is
 * > 0 in FMPlanScatter/FMPlanGather fails on every rank (NULL is fine where the count is 0). The ring schedule baseline (-fm_plan_schedule ring) gives the
 * same results; its bytes are (P-1) x the K/V of all ranks in all, each rank receiving every
 * block but its own, per link level as FMDistRingBytes predicts; on document masks the pruned
 * gather moves strictly fewer bytes than the ring. Every case is a "cp" plan set through the
 * setters (FMPlanSetPartition, ...), on one rank too; on several ranks -fm_plan_type local is
 * refused on every rank. Per-sample masks (mask_batch = batch = 3, a different packing per
 * sample: user bounds with GQA, seqlen_q != seqlen_k, the ring) give the single-rank result of
 * the per-sample mask, and not that of sample 0's mask for every sample. Run on 1, 2, 3 and 4 ranks.
 */
#define _GNU_SOURCE /* strcasestr in fmtest.h */
#include <flashmask/private/fmdist.h>
#include "fmtest.h"
#include "dist_exec_cases.h"

static int rank, size;
static double relayed_total;
static uint64_t seed;
static int ring_even;   /* ring cases where every rank held the same K/V and got exactly (P-1) x its own */

/*
 * Ring byte checks: rank me receives every block but its own (total - its K/V) and forwards
 * every block but that of me+1; per link level the sends match FMDistRingBytes on the
 * virtual topology; all ranks together move (P-1) x the whole K/V.
 */
static void check_ring_bytes(const Case *c, const FMDistStats *st, int nk)
{
  double unit = 2.0 * c->B * c->Hkv * c->D * FMDTypeSize(c->dtype), total = unit * c->Sk, mine = unit * nk, sent[2], tsent[2], lev[2];
  double *rb = malloc(sizeof(double) * size);
  int *nks = malloc(sizeof(int) * size), next = (rank + 1) % size, even = 1;
  FMDistTopo topo;
  MPI_Allgather(&nk, 1, MPI_INT, nks, 1, MPI_INT, MPI_COMM_WORLD);
  for (int r = 0; r < size; r++) { rb[r] = unit * nks[r]; even &= nks[r] == nks[0]; }
  FMT_CHECK(st->recv_bytes == total - mine, "%s ring rank %d: received %.0f bytes, expected all K/V but its own %.0f - %.0f", c->type, rank,
            st->recv_bytes, total, mine);
  FMT_CHECK(st->sent_bytes[0] + st->sent_bytes[1] == total - rb[next], "%s ring rank %d: sent %.0f bytes, expected %.0f", c->type, rank,
            st->sent_bytes[0] + st->sent_bytes[1], total - rb[next]);
  sent[0] = st->sent_bytes[0]; sent[1] = st->sent_bytes[1];
  MPI_Allreduce(sent, tsent, 2, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  FMT_CHECK(tsent[0] + tsent[1] == (size - 1) * total, "%s ring: %d ranks moved %.0f bytes, expected (P-1) x %.0f", c->type, size,
            tsent[0] + tsent[1], total);
  if (!FMDistTopoVirtual(size, c->vnodes > 0 ? c->vnodes : 1, &topo)) {
    FMDistRingBytes(&topo, rb, lev);
    if (c->vnodes > 0) /* (vnodes 0 is the real topology: one node here) */
      FMT_CHECK(tsent[0] == lev[0] && tsent[1] == lev[1], "%s ring on %d virtual nodes: moved %.0f / %.0f bytes inside / across nodes, "
                "FMDistRingBytes predicts %.0f / %.0f", c->type, c->vnodes, tsent[0], tsent[1], lev[0], lev[1]);
    FMDistTopoDestroy(&topo);
  }
  if (even && size > 1) {
    FMT_CHECK(st->recv_bytes == (size - 1) * mine && st->sent_bytes[0] + st->sent_bytes[1] == (size - 1) * mine,
              "%s ring rank %d: moved %.0f in, %.0f out; expected (P-1) x its %.0f bytes of K/V", c->type, rank, st->recv_bytes,
              st->sent_bytes[0] + st->sent_bytes[1], mine);
    ring_even++;
  }
  free(rb); free(nks);
}

/*
 * The forward's bytes (stats st of this rank, nk local keys): what arrived = what the route
 * predicts; flat (or one node): = the needed set; unpruned: needed = all-gather; the ring: its
 * own rules (check_ring_bytes); sent = received over the ranks; pruned document masks move
 * strictly less than the all-gather (counted in *ndoc_strict). *moved (may be NULL) gets the
 * bytes all ranks received. Collective on MPI_COMM_WORLD.
 */
static void check_forward_bytes(const Case *c, const FMDistStats *st, int nk, int ring, int *ndoc_strict, double *moved)
{
  double loc[6] = {st->recv_bytes, st->predicted_recv, st->needed_bytes, st->allgather_bytes, st->sent_bytes[0] + st->sent_bytes[1],
                   st->relayed_bytes}, tot[6];
  FMT_CHECK(st->recv_bytes == st->predicted_recv, "%s rank %d: received %.0f bytes, route predicts %.0f", c->type, rank, st->recv_bytes,
            st->predicted_recv);
  if (ring) check_ring_bytes(c, st, nk);
  else if (!strcmp(c->route, "flat") || c->vnodes <= 1)
    FMT_CHECK(st->recv_bytes == st->needed_bytes, "%s rank %d (%s route): received %.0f bytes, needed set says %.0f", c->type, rank, c->route,
              st->recv_bytes, st->needed_bytes);
  if (!c->prune) FMT_CHECK(st->needed_bytes == st->allgather_bytes, "%s: unpruned needs %.0f of %.0f", c->type, st->needed_bytes, st->allgather_bytes);
  MPI_Allreduce(loc, tot, 6, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD);
  FMT_CHECK(tot[4] == tot[0], "%s: ranks sent %.0f bytes in all but received %.0f", c->type, tot[4], tot[0]);
  relayed_total += tot[5];
  if (moved) *moved = tot[0];
  /* (dual_chunk scatters every rank over every document, so there pruning may save nothing) */
  if (!ring && size > 1 && c->prune && strcmp(c->part, "dual_chunk") && (!strcmp(c->type, FMMASKDOCUMENT) || !strcmp(c->type, FMMASKCAUSALDOCUMENT))) {
    FMT_CHECK(tot[0] < tot[3], "%s: pruned gather moved %.0f bytes, not below the all-gather's %.0f", c->type, tot[0], tot[3]);
    (*ndoc_strict)++;
  }
}

/* Runs one case; *moved (may be NULL) gets the bytes all ranks received in the forward. */
static void run_case_moved(FMContext ctx, const Case *c, int *ndoc_strict, double *moved)
{
  int ring = c->sched && !strcmp(c->sched, "ring");
  FMMask mask;
  FMPlan plan;
  FMMaskDesc md;
  FMAttnProblem p;
  int nl, nk;
  const int *rows, *keys;
  size_t es = FMDTypeSize(c->dtype), uq = (size_t)c->Hq * c->D, uk = (size_t)c->Hkv * c->D;
  size_t nQ = (size_t)c->B * c->Sq * uq, nK = (size_t)c->B * c->Sk * uk, nL = (size_t)c->B * c->Hq * c->Sq;
  float *fq = malloc(4 * nQ), *fk = malloc(4 * nK), *fv = malloc(4 * nK), *fdo = malloc(4 * nQ);
  char *gq = malloc(es * nQ), *gk = malloc(es * nK), *gv = malloc(es * nK), *gdo = malloc(es * nQ);
  char *lq, *lk, *lv, *ldo, *lo, *ldq, *ldk, *ldv, *sq;
  float *llse;
  uint64_t s = seed ^ (uint64_t)(c->Sq * 131 + c->Sk * 7 + c->D);
  FMDistStats st;
  double tol = c->dtype == FM_DTYPE_FP32 ? 2e-5 : 2e-2;

  fill(fq, nQ, &s); fill(fk, nK, &s); fill(fv, nK, &s); fill(fdo, nQ, &s);
  to_t(gq, c->dtype, fq, nQ); to_t(gk, c->dtype, fk, nK); to_t(gv, c->dtype, fv, nK); to_t(gdo, c->dtype, fdo, nQ);
  FMT_CALL(make_mask(ctx, c, 42, &mask));
  FMT_CALL(FMPlanCreate(ctx, &plan));
  set_opts(plan, c);
  FMT_CALL(FMPlanSetMask(plan, mask));
  FMT_CALL(FMPlanSetShape(plan, c->B, c->Hq, c->Hkv, c->D, c->dtype));
  FMT_CALL(FMPlanSetUp(plan));
  FMT_CALL(FMPlanGetLocalRows(plan, &nl, &rows));
  FMT_CALL(FMPlanGetLocalKeys(plan, &nk, &keys));
  {
    int tq = 0, tk = 0;
    MPI_Allreduce(&nl, &tq, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    MPI_Allreduce(&nk, &tk, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    FMT_CHECK(tq == c->Sq && tk == c->Sk, "%s: local rows sum to %d (Sq %d), keys to %d (Sk %d)", c->type, tq, c->Sq, tk, c->Sk);
  }
  lq = malloc(es * c->B * nl * uq + 1); ldo = malloc(es * c->B * nl * uq + 1); lo = malloc(es * c->B * nl * uq + 1);
  ldq = malloc(es * c->B * nl * uq + 1); sq = malloc(es * c->B * nl * uq + 1);
  lk = malloc(es * c->B * nk * uk + 1); lv = malloc(es * c->B * nk * uk + 1);
  ldk = malloc(es * c->B * nk * uk + 1); ldv = malloc(es * c->B * nk * uk + 1);
  llse = malloc(sizeof(float) * (c->B * c->Hq * nl + 1));
  pick(lq, gq, c->B, c->Sq, es * uq, nl, rows);
  pick(ldo, gdo, c->B, c->Sq, es * uq, nl, rows);
  pick(lk, gk, c->B, c->Sk, es * uk, nk, keys);
  pick(lv, gv, c->B, c->Sk, es * uk, nk, keys);
  /* FMPlanScatter from the last rank gives the same local q */
  memset(sq, 0x7f, es * c->B * nl * uq + 1);
  FMT_CALL(FMPlanScatter(plan, FM_PLAN_TENSOR_Q, size - 1, rank == size - 1 ? gq : NULL, sq));
  FMT_CHECK(!memcmp(sq, lq, es * c->B * nl * uq), "%s: FMPlanScatter(Q) differs from the local rows", c->type);
  /* poison the outputs */
  memset(lo, 0xff, es * c->B * nl * uq); memset(ldq, 0xff, es * c->B * nl * uq);
  memset(ldk, 0xff, es * c->B * nk * uk); memset(ldv, 0xff, es * c->B * nk * uk);
  for (int i = 0; i < c->B * c->Hq * nl; i++) llse[i] = NAN;
  FMT_CALL(FMPlanForward(plan, lq, lk, lv, lo, llse));
  FMT_CALL(FMDistGetStats(plan, &st));
  check_forward_bytes(c, &st, nk, ring, ndoc_strict, moved);
  FMT_CALL(FMPlanBackward(plan, lq, lk, lv, lo, llse, ldo, ldq, ldk, ldv));
  FMT_CALL(FMDistGetStats(plan, &st));
  if (!ring) { /* every chunk that came in over a route edge goes back up it as an fp32 dK/dV partial */
    FMT_CHECK(st.reduce_bytes == st.recv_bytes * 4.0 / (double)es, "%s rank %d: sent %.0f bytes of dK/dV partials, expected %.0f (received %.0f K/V bytes)",
              c->type, rank, st.reduce_bytes, st.recv_bytes * 4.0 / (double)es, st.recv_bytes);
  } else { /* each block's running fp32 sum passes every rank once; one rank sends nothing (not even to itself) */
    const double all = 2.0 * c->B * c->Hkv * c->D * c->Sk * 4.0;
    FMT_CHECK(st.reduce_bytes == (size > 1 ? all : 0.0), "%s ring rank %d: sent %.0f bytes of dK/dV sums, expected %.0f", c->type, rank,
              st.reduce_bytes, size > 1 ? all : 0.0);
  }

  /* gather to rank 0 and compare with one single-rank CPU call */
  {
    char *go = rank == 0 ? malloc(es * nQ) : NULL, *gdq = rank == 0 ? malloc(es * nQ) : NULL, *gdk = rank == 0 ? malloc(es * nK) : NULL,
         *gdv = rank == 0 ? malloc(es * nK) : NULL;
    float *glse = rank == 0 ? malloc(sizeof(float) * nL) : NULL;
    int bad = 0;
    FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_Q, 0, lo, go));
    FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_LSE, 0, llse, glse));
    FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_Q, 0, ldq, gdq));
    FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_KV, 0, ldk, gdk));
    FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_KV, 0, ldv, gdv));
    if (rank == 0) {
      char *ro = malloc(es * nQ), *rk = malloc(es * nK), *rv = malloc(es * nK), *rq = malloc(es * nQ);
      float *rlse = malloc(sizeof(float) * nL), *rdq = calloc(nQ, sizeof(float));
      double *a = malloc(sizeof(double) * (nQ > nK ? nQ : nK)), *b = malloc(sizeof(double) * (nQ > nK ? nQ : nK));
      double eo, edq, edk, edv;
      memset(&p, 0, sizeof(p));
      FMT_CALL(FMMaskGetDesc_Private(mask, &md));
      p.batch = c->B; p.heads_q = c->Hq; p.heads_kv = c->Hkv; p.head_dim = c->D; p.dtype = c->dtype;
      p.scale = (float)(1.0 / sqrt((double)c->D)); p.nq = c->Sq; p.qrows = NULL; p.k0 = 0; p.nk = c->Sk; p.mask = md; p.nthreads = 1;
      FMT_CALL(FMCPUForward(&p, gq, gk, gv, ro, c->dtype, rlse));
      FMT_CALL(FMCPUBackward(&p, gq, gk, gv, ro, rlse, gdo, rdq, rk, rv, c->dtype));
      to_t(rq, c->dtype, rdq, nQ);
      to_d(a, go, c->dtype, nQ); to_d(b, ro, c->dtype, nQ); eo = relerr(a, b, nQ);
      to_d(a, gdq, c->dtype, nQ); to_d(b, rq, c->dtype, nQ); edq = relerr(a, b, nQ);
      to_d(a, gdk, c->dtype, nK); to_d(b, rk, c->dtype, nK); edk = relerr(a, b, nK);
      to_d(a, gdv, c->dtype, nK); to_d(b, rv, c->dtype, nK); edv = relerr(a, b, nK);
      bad = !(eo < tol && edq < tol && edk < tol && edv < tol && lse_ok(glse, rlse, nL, tol));
      if (c->mb > 1) {
        /* the samples' packings matter: sample 0's mask for every sample gives another O */
        FMAttnProblem p1 = p;
        char *o1 = malloc(es * nQ);
        float *l1 = malloc(sizeof(float) * nL);
        double e1;
        p1.mask.mask_batch = 1;
        FMT_CALL(FMCPUForward(&p1, gq, gk, gv, o1, c->dtype, l1));
        to_d(a, go, c->dtype, nQ); to_d(b, o1, c->dtype, nQ); e1 = relerr(a, b, nQ);
        FMT_CHECK(e1 > 100 * tol, "%s mask_batch %d: O differs from sample 0's mask for every sample by only %.2e", c->type, c->mb, e1);
        free(o1); free(l1);
      }
      FMT_CHECK(!bad, "%s Sq %d Sk %d B %d H %d/%d D %d %s [%s %s %s chunk %s prune %d overlap %d nodes %d] on %d ranks: rel. errors O %.2e dQ %.2e "
                "dK %.2e dV %.2e LSE %s (tol %.0e)",
                c->type, c->Sq, c->Sk, c->B, c->Hq, c->Hkv, c->D, FMDTypeName(c->dtype), ring ? "ring" : "gather", c->part, c->route, c->chunk, c->prune, c->overlap,
                c->vnodes, size, eo, edq, edk, edv, lse_ok(glse, rlse, nL, tol) ? "ok" : "BAD", tol);
      if (!bad)
        printf("ok %-22s %4dx%-4d %s %-6s %-10s %-12s prune %d overlap %d: O %.1e dQ %.1e dK %.1e dV %.1e; recv %.0f of all-gather %.0f B\n",
               c->type, c->Sq, c->Sk, FMDTypeName(c->dtype), ring ? "ring" : "gather", c->part, c->route, c->prune, c->overlap, eo, edq, edk, edv, st.recv_bytes,
               st.allgather_bytes);
      free(ro); free(rk); free(rv); free(rq); free(rlse); free(rdq); free(a); free(b);
    }
    free(go); free(gdq); free(gdk); free(gdv); free(glse);
  }
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&mask));
  free(fq); free(fk); free(fv); free(fdo); free(gq); free(gk); free(gv); free(gdo);
  free(lq); free(lk); free(lv); free(ldo); free(lo); free(ldq); free(ldk); free(ldv); free(llse); free(sq);
}

static void run_case(FMContext ctx, const Case *c, int *ndoc_strict) { run_case_moved(ctx, c, ndoc_strict, NULL); }

/*
 * The ring schedule: forward and backward equal the single-rank result on 2, 3 and 4 ranks
 * for causal, causal_document, document, share_question, per-head user bounds with GQA and
 * seqlen_q != seqlen_k, overlapped or not, on one or two virtual nodes; and on document masks
 * the pruned gather moves strictly fewer bytes than the ring.
 */
static void test_ring(FMContext ctx, int *ndoc)
{
  Case cs[] = {
    {FMMASKCAUSAL, 384, 384, 1, 2, 2, 16, 1, FM_DTYPE_FP32, "contiguous", "flat", "0", 1, 1, 0, "ring"},
    {FMMASKCAUSALDOCUMENT, 500, 500, 1, 2, 2, 16, 1, FM_DTYPE_FP32, "balanced", "hierarchical", "0", 1, 0, 2, "ring"},
    {FMMASKDOCUMENT, 448, 448, 2, 2, 1, 32, 1, FM_DTYPE_FP32, "dual_chunk", "flat", "0", 1, 1, 2, "ring"},
    {FMMASKSHAREQUESTION, 400, 400, 1, 2, 2, 16, 1, FM_DTYPE_FP32, "balanced", "flat", "48", 0, 1, 0, "ring"},
    {FMMASKBOUNDS, 333, 411, 1, 6, 3, 16, 3, FM_DTYPE_FP32, "balanced", "hierarchical", "37", 1, 1, 0, "ring"},
    {FMMASKCAUSAL, 300, 520, 1, 4, 2, 16, 1, FM_DTYPE_FP32, "balanced", "flat", "0", 1, 0, 0, "ring"},
    {FMMASKCAUSALDOCUMENT, 520, 300, 2, 2, 1, 16, 1, FM_DTYPE_BF16, "dual_chunk", "flat", "48", 1, 1, 0, "ring"},
    /* two chunks only: on 3 and 4 ranks some ranks hold no block (empty messages) */
    {FMMASKCAUSAL, 200, 200, 1, 2, 2, 16, 1, FM_DTYPE_FP32, "contiguous", "flat", "150", 1, 1, 0, "ring"},
  };
  const char *docs[] = {FMMASKDOCUMENT, FMMASKCAUSALDOCUMENT};
  for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) {
    if (cs[i].vnodes > size) cs[i].vnodes = size;
    run_case(ctx, &cs[i], ndoc);
  }
  if (size > 1) FMT_CHECK(ring_even > 0, "no ring case had the same K/V on every rank");
  for (int i = 0; i < 2 && size > 1; i++) {
    Case c = {docs[i], 640, 640, 1, 2, 2, 16, 1, FM_DTYPE_FP32, "contiguous", "flat", "0", 1, 1, 0, "ring"};
    double ring_b = -1, gather_b = -1;
    run_case_moved(ctx, &c, ndoc, &ring_b);
    c.sched = "gather";
    run_case_moved(ctx, &c, ndoc, &gather_b);
    FMT_CHECK(gather_b >= 0 && gather_b < ring_b, "%s on %d ranks: the pruned gather moved %.0f bytes, not below the ring's %.0f", docs[i], size,
              gather_b, ring_b);
    if (rank == 0) printf("ok %s on %d ranks: gather moves %.0f bytes, ring %.0f (%.1f%%)\n", docs[i], size, gather_b, ring_b, 100.0 * gather_b / ring_b);
  }
}

/*
 * One rank sets up a different plan (the mask itself is checked by FMMaskSetUp): a different
 * partition (FMPlanSetPartition), or a different softmax scale. FMPlanSetUp must fail with
 * FM_ERR_MISMATCH on every rank, never hang.
 */
static void test_mismatch(FMContext ctx)
{
  for (int variant = 0; variant < 2; variant++) {
    Case c = {FMMASKCAUSALDOCUMENT, 256, 256, 1, 2, 2, 16, 1, FM_DTYPE_FP32, "balanced", "hierarchical", "0", 1, 1, 0};
    FMMask mask;
    FMPlan plan;
    FMErrorCode e;
    int ok, all;
    if (variant == 0 && rank == size - 1) c.part = "contiguous";
    FMT_CALL(make_mask(ctx, &c, 42, &mask));
    FMT_CALL(FMPlanCreate(ctx, &plan));
    set_opts(plan, &c);
    FMT_CALL(FMPlanSetMask(plan, mask));
    FMT_CALL(FMPlanSetShape(plan, c.B, c.Hq, c.Hkv, c.D, c.dtype));
    if (variant == 1) FMT_CALL(FMPlanSetScale(plan, rank == size - 1 ? 0.5 : 0.25));
    FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
    e = FMPlanSetUp(plan);
    FMPopErrorHandler();
    {
      char want[96] = "Ranks disagree on the plan's hash"; /* variant 0: the cp plan's own agreement on its settings */
      if (variant == 1) snprintf(want, sizeof(want), "FMPlanSetUp(): scale is 0.25 on rank 0 and 0.5 on rank %d", size - 1);
      ok = e == FM_ERR_MISMATCH && fmt_msg_has(want);
    }
    FMT_CHECK(ok, "rank %d, variant %d: a different plan on rank %d gave %s (\"%s\"), expected FM_ERR_MISMATCH", rank, variant, size - 1,
              FMErrorString(e), FMGetLastErrorMessage());
    MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
    FMT_CHECK(all, "variant %d: the mismatch was not reported on every rank", variant);
    FMT_CALL(FMPlanDestroy(&plan));
    FMT_CALL(FMMaskDestroy(&mask));
  }
}

/* every rank got what it expected (the failing rank its own code, the others FM_ERR_COLLECTIVE) */
static void expect_everywhere(FMErrorCode e, int bad, const char *what)
{
  FMErrorCode want = rank == bad ? FM_ERR_ARG_NULL : FM_ERR_COLLECTIVE;
  int ok = e == want, all;
  FMT_CHECK(ok, "rank %d: %s on rank %d gave %s (\"%s\"), expected %s", rank, what, bad, FMErrorString(e), FMGetLastErrorMessage(),
            FMErrorString(want));
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  FMT_CHECK(all, "%s on rank %d was not an error on every rank", what, bad);
}

/*
 * FMPlanScatter / FMPlanGather argument errors on one rank are errors on every rank, never a
 * hang: a NULL global on root, a NULL local where the local count is > 0. A NULL local where
 * the count is 0 is accepted (the two-chunk plan leaves ranks without rows on 3+ ranks), and
 * the scattered / gathered data are right after the failed calls.
 */
static void test_move_errors(FMContext ctx)
{
  Case cs[] = {{FMMASKCAUSALDOCUMENT, 256, 256, 1, 2, 2, 16, 1, FM_DTYPE_FP32, "balanced", "hierarchical", "0", 1, 1, 0, NULL},
               {FMMASKCAUSAL, 200, 200, 1, 2, 2, 16, 1, FM_DTYPE_FP32, "contiguous", "hierarchical", "150", 1, 1, 0, NULL}};
  for (int v = 0; v < 2; v++) {
    const Case *c = &cs[v];
    size_t unit = (size_t)c->Hq * c->D, ng = (size_t)c->B * c->Sq * unit;
    float *gq = malloc(sizeof(float) * ng), *back = malloc(sizeof(float) * ng), *lq, *ref;
    const int *rows;
    int nl, bad, root = v; /* root 0, then 1 */
    uint64_t s = seed + 4242 + v;
    FMMask mask;
    FMPlan plan;
    FMErrorCode e;
    FMT_CALL(make_mask(ctx, c, 7, &mask));
    FMT_CALL(FMPlanCreate(ctx, &plan));
    set_opts(plan, c);
    FMT_CALL(FMPlanSetMask(plan, mask));
    FMT_CALL(FMPlanSetShape(plan, c->B, c->Hq, c->Hkv, c->D, c->dtype));
    FMT_CALL(FMPlanSetUp(plan));
    FMT_CALL(FMPlanGetLocalRows(plan, &nl, &rows));
    fill(gq, ng, &s);
    lq = malloc(sizeof(float) * ((size_t)c->B * nl * unit + 1));
    ref = malloc(sizeof(float) * ((size_t)c->B * nl * unit + 1));
    pick(ref, gq, c->B, c->Sq, unit * sizeof(float), nl, rows);
    /* the highest rank that owns rows */
    bad = nl > 0 ? rank : -1;
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);

    FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
    e = FMPlanScatter(plan, FM_PLAN_TENSOR_Q, root, NULL, lq);
    FMPopErrorHandler();
    expect_everywhere(e, root, "FMPlanScatter with a NULL global on root");

    FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
    e = FMPlanGather(plan, FM_PLAN_TENSOR_Q, root, rank == bad ? NULL : lq, rank == root ? back : NULL);
    FMPopErrorHandler();
    expect_everywhere(e, bad, "FMPlanGather with a NULL local (count > 0)");

    FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
    e = FMPlanScatter(plan, FM_PLAN_TENSOR_Q, root, rank == root ? gq : NULL, rank == bad ? NULL : lq);
    FMPopErrorHandler();
    expect_everywhere(e, bad, "FMPlanScatter with a NULL local (count > 0)");

    /* still usable; NULL local where this rank has no rows */
    for (size_t i = 0; i < (size_t)c->B * nl * unit; i++) lq[i] = NAN;
    FMT_CALL(FMPlanScatter(plan, FM_PLAN_TENSOR_Q, root, rank == root ? gq : NULL, nl > 0 ? lq : NULL));
    FMT_CHECK(!memcmp(lq, ref, sizeof(float) * c->B * nl * unit), "rank %d: FMPlanScatter after the failed calls gave wrong rows", rank);
    for (size_t i = 0; i < ng; i++) back[i] = NAN;
    FMT_CALL(FMPlanGather(plan, FM_PLAN_TENSOR_Q, root, nl > 0 ? lq : NULL, rank == root ? back : NULL));
    if (rank == root) FMT_CHECK(!memcmp(back, gq, sizeof(float) * ng), "FMPlanGather after the failed calls differs from the global Q");
    FMT_CALL(FMPlanDestroy(&plan));
    FMT_CALL(FMMaskDestroy(&mask));
    free(gq); free(back); free(lq); free(ref);
  }
}

/* e is code on rank who (every rank: who < 0), FM_ERR_COLLECTIVE on the others, with msg in who's message; on every rank. */
static void expect_all(FMErrorCode e, FMErrorCode code, int who, const char *msg, const char *what)
{
  int mine = who < 0 || rank == who, ok, all;
  FMErrorCode want = mine ? code : FM_ERR_COLLECTIVE;
  ok = e == want && (!mine || fmt_msg_has(msg));
  FMT_CHECK(ok, "rank %d: %s gave %s (\"%s\"), expected %s (\"%s\")", rank, what, FMErrorString(e), FMGetLastErrorMessage(), FMErrorString(want),
            mine ? msg : "");
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  FMT_CHECK(all, "%s: not the expected error on every rank", what);
}

/*
 * The entry agreement of the plan's collective calls (size > 1): ranks with other scalars, a
 * bad argument on one rank, or ranks in different calls (a mask's and a plan's, a view and a
 * gather, too) end in an error on every rank, naming the field or the calls; then the plan
 * still works. L = the last rank.
 */
static void test_agreement(FMContext ctx)
{
  Case c = {FMMASKCAUSALDOCUMENT, 256, 256, 1, 2, 2, 16, 1, FM_DTYPE_FP32, "balanced", "hierarchical", "0", 1, 1, 0, NULL};
  const int L = size - 1;
  size_t nq, nk, ng = (size_t)c.Sq * c.Hq * c.D;
  float *gl = calloc(ng + 1, sizeof(float)), *q, *k, *v, *o, *lse;
  int nl, nkeys;
  char m[160];
  FMMask mask;
  FMPlan plan;
  FMErrorCode e;
  FMT_CALL(make_mask(ctx, &c, 5, &mask));
  for (int variant = 0; variant < 2; variant++) { /* FMPlanSetUp: batch 2 on L; a failed FMPlanSetShape on L */
    FMT_CALL(FMPlanCreate(ctx, &plan));
    set_opts(plan, &c);
    FMT_CALL(FMPlanSetMask(plan, mask));
    FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
    if (variant == 1 && rank == L) FMT_CHECK(FMPlanSetShape(plan, 1, c.Hq, c.Hkv, 12, c.dtype), "head_dim 12 accepted"); /* fails: unset */
    else FMT_CALL(FMPlanSetShape(plan, variant == 0 && rank == L ? 2 : 1, c.Hq, c.Hkv, c.D, c.dtype));
    e = FMPlanSetUp(plan);
    FMPopErrorHandler();
    snprintf(m, sizeof(m), "FMPlanSetUp(): batch is 1 on rank 0 and 2 on rank %d", L);
    if (variant == 0) expect_all(e, FM_ERR_MISMATCH, -1, m, "FMPlanSetUp with batch 2 on the last rank");
    else expect_all(e, FM_ERR_ORDER, L, "Must call FMPlanSetShape()", "FMPlanSetUp after a failed FMPlanSetShape on the last rank");
    FMT_CALL(FMPlanDestroy(&plan));
  }
  FMT_CALL(FMPlanCreate(ctx, &plan));
  set_opts(plan, &c);
  FMT_CALL(FMPlanSetMask(plan, mask));
  FMT_CALL(FMPlanSetShape(plan, c.B, c.Hq, c.Hkv, c.D, c.dtype));
  FMT_CALL(FMPlanSetUp(plan));
  FMT_CALL(FMPlanGetLocalRows(plan, &nl, NULL));
  FMT_CALL(FMPlanGetLocalKeys(plan, &nkeys, NULL));
  nq = (size_t)nl * c.Hq * c.D; nk = (size_t)nkeys * c.Hkv * c.D;
  q = calloc(nq + nk + 1, sizeof(float)); o = calloc(nq + nk + 1, sizeof(float)); /* room for Q or K/V rows */
  k = calloc(nk + 1, sizeof(float)); v = calloc(nk + 1, sizeof(float)); lse = calloc((size_t)nl * c.Hq + 1, sizeof(float));
  FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
  e = FMPlanScatter(plan, FM_PLAN_TENSOR_Q, rank == L ? size : 0, gl, q);
  expect_all(e, FM_ERR_ARG_OUTOFRANGE, L, "Argument 3 (root) is", "FMPlanScatter with root = size on the last rank");
  e = FMPlanScatter(plan, FM_PLAN_TENSOR_Q, rank == L ? 1 : 0, gl, q);
  snprintf(m, sizeof(m), "FMPlanScatter(): root (argument 3) is 0 on rank 0 and 1 on rank %d", L);
  expect_all(e, FM_ERR_MISMATCH, -1, m, "FMPlanScatter with root 1 on the last rank, 0 elsewhere");
  e = FMPlanGather(plan, rank == 0 ? FM_PLAN_TENSOR_Q : FM_PLAN_TENSOR_KV, 0, q, gl); /* the same size: Hq = Hkv, Sq = Sk */
  expect_all(e, FM_ERR_MISMATCH, -1, "FMPlanGather(): kind (FMPlanTensor, argument 2) is", "FMPlanGather of Q on rank 0, K/V elsewhere");
  e = rank == 0 ? FMPlanScatter(plan, FM_PLAN_TENSOR_Q, 0, gl, q) : FMPlanGather(plan, FM_PLAN_TENSOR_Q, 0, q, gl);
  expect_all(e, FM_ERR_MISMATCH, -1, "FMPlanScatter() on rank 0 and FMPlanGather() on rank 1", "FMPlanScatter on rank 0, Gather elsewhere");
  e = rank == 0 ? FMPlanForward(plan, q, k, v, o, lse) : FMPlanBackward(plan, q, k, v, o, lse, o, q, k, v);
  expect_all(e, FM_ERR_MISMATCH, -1, "FMPlanForward() on rank 0 and FMPlanBackward() on rank 1", "FMPlanForward on rank 0, Backward elsewhere");
  /* a mask's or a view's collective against a plan's: the objects of one context share its
     communicator, and every collective that communicates opens with the same agreement */
  e = rank == 0 ? FMMaskSetUp(mask) : FMPlanForward(plan, q, k, v, o, lse);
  expect_all(e, FM_ERR_MISMATCH, -1, "FMMaskSetUp() on rank 0 and FMPlanForward() on rank 1", "FMMaskSetUp on rank 0, Forward elsewhere");
  {
    FILE *null = fopen("/dev/null", "w");
    e = rank == 0 ? FMPlanView(plan, null) : FMPlanGather(plan, FM_PLAN_TENSOR_Q, 0, q, gl);
    if (null) fclose(null);
  }
  expect_all(e, FM_ERR_MISMATCH, -1, "FMPlanView() on rank 0 and FMPlanGather() on rank 1", "FMPlanView on rank 0, Gather elsewhere");
  if (rank == L) FMT_CALL(FMPlanSetScale(plan, 0.5)); /* the default is 1/sqrt(16) */
  e = FMPlanForward(plan, q, k, v, o, lse);
  snprintf(m, sizeof(m), "FMPlanForward(): scale is 0.25 on rank 0 and 0.5 on rank %d", L);
  expect_all(e, FM_ERR_MISMATCH, -1, m, "FMPlanForward with scale 0.5 on the last rank");
  FMPopErrorHandler();
  if (rank == L) FMT_CALL(FMPlanSetScale(plan, 0.25));
  FMT_CALL(FMPlanForward(plan, q, k, v, o, lse)); /* still usable */
  FMT_CALL(FMPlanScatter(plan, FM_PLAN_TENSOR_Q, L, rank == L ? gl : NULL, nl ? q : NULL));
  FMT_CALL(FMPlanDestroy(&plan));
  FMT_CALL(FMMaskDestroy(&mask));
  free(gl); free(q); free(k); free(v); free(o); free(lse);
}

/*
 * Plan types on several ranks: -fm_plan_type local (under a prefix) is refused with
 * FM_ERR_ARG_INCOMP at FMPlanSetFromOptions on every rank; the default type is cp.
 */
static void test_types(FMContext ctx)
{
  FMPlan plan;
  FMPlanType t = NULL;
  FMErrorCode e;
  int ok, all;
  FMT_CALL(FMOptionsSetValue("-loc_fm_plan_type", "local"));
  FMT_CALL(FMPlanCreate(ctx, &plan));
  FMT_CALL(FMPlanSetOptionsPrefix(plan, "loc_"));
  FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
  e = FMPlanSetFromOptions(plan);
  FMPopErrorHandler();
  ok = e == FM_ERR_ARG_INCOMP && fmt_msg_has("one rank only");
  FMT_CHECK(ok, "rank %d: -loc_fm_plan_type local on %d ranks gave %s (\"%s\"), expected FM_ERR_ARG_INCOMP", rank, size, FMErrorString(e),
            FMGetLastErrorMessage());
  MPI_Allreduce(&ok, &all, 1, MPI_INT, MPI_LAND, MPI_COMM_WORLD);
  FMT_CHECK(all, "-fm_plan_type local on %d ranks was not refused on every rank", size);
  FMT_CALL(FMPlanGetType(plan, &t));
  FMT_CHECK(t == NULL, "the refused option left type %s", t);
  FMT_CALL(FMPlanSetPartition(plan, "contiguous")); /* a setter on a plan without a type: the default */
  FMT_CALL(FMPlanGetType(plan, &t));
  FMT_CHECK(t && !strcmp(t, FMPLANCP), "the default type on %d ranks is %s, expected cp", size, t ? t : "(null)");
  FMT_CALL(FMPlanDestroy(&plan));
}

int main(int argc, char **argv)
{
  FMContext ctx;
  int ndoc = 0, fails;
  const char *const *masks = NULL;
  int nmasks = 0;
  const char *parts[] = {"balanced", "dual_chunk", "contiguous"}, *routes[] = {"hierarchical", "flat"};
  FMT_CALL(FMInitialize(&argc, &argv, NULL, NULL));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  seed = fmt_seed();
  MPI_Bcast(&seed, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  FMT_CALL(FMContextSetNumThreads(ctx, 1));
  FMT_CALL(FMContextSetUp(ctx));
  /* every builder (FMMaskTypeList less "bounds"), rotating partition / route / prune / overlap / virtual nodes */
  FMT_CALL(FMMaskTypeList(&nmasks, &masks));
  if (nmasks > 0 && !strcmp(masks[nmasks - 1], FMMASKBOUNDS)) nmasks--;
  FMT_CHECK(nmasks >= 12, "FMMaskTypeList gives %d builders, expected at least 12", nmasks);
  for (int i = 0; i < nmasks; i++) {
    Case c = {masks[i], 320 + 61 * i, 320 + 61 * i, 1 + i % 2, 2, 2, 16 << (i % 3), !strcmp(masks[i], FMMASKRANDOMEVICTION) ? 2 : 1, FM_DTYPE_FP32,
              parts[i % 3], routes[(i / 3) % 2], i % 4 == 3 ? "100" : "0", i != 5, i % 2 == 0, i % 3 == 1 ? 2 : 0};
    if (c.vnodes > size) c.vnodes = size;
    run_case(ctx, &c, &ndoc);
  }
  {
    /* per-head user bounds with GQA; seqlen_q != seqlen_k both ways (causal, bottom-right); uneven lengths; bf16 */
    Case cs[] = {
      {FMMASKBOUNDS, 500, 500, 1, 4, 2, 32, 2, FM_DTYPE_FP32, "balanced", "hierarchical", "64", 1, 1, 2},
      {FMMASKCAUSAL, 300, 520, 1, 4, 2, 16, 1, FM_DTYPE_FP32, "balanced", "flat", "0", 1, 1, 0},
      {FMMASKCAUSALDOCUMENT, 520, 300, 2, 2, 1, 16, 1, FM_DTYPE_FP32, "dual_chunk", "hierarchical", "48", 1, 0, 2},
      {FMMASKDOCUMENT, 997, 997, 1, 2, 2, 16, 1, FM_DTYPE_FP32, "contiguous", "flat", "100", 1, 1, 0},
      {FMMASKBOUNDS, 333, 411, 1, 6, 3, 16, 3, FM_DTYPE_FP32, "balanced", "hierarchical", "37", 1, 1, 0},
      {FMMASKCAUSALDOCUMENT, 640, 640, 1, 2, 2, 64, 1, FM_DTYPE_BF16, "balanced", "hierarchical", "0", 1, 1, 0},
      {FMMASKDOCUMENT, 700, 700, 1, 2, 1, 16, 1, FM_DTYPE_FP32, "balanced", "flat", "0", 0, 1, 0},
      /* two chunks only: on 3 and 4 ranks some ranks own no rows and no keys */
      {FMMASKCAUSAL, 200, 200, 1, 2, 2, 16, 1, FM_DTYPE_FP32, "contiguous", "hierarchical", "150", 1, 1, 2},
      /* 15 keys for 400 rows: key chunks of 2, the last two empty; early rows see no key (LSE -inf) */
      {FMMASKCAUSAL, 400, 15, 1, 2, 1, 16, 1, FM_DTYPE_FP32, "dual_chunk", "flat", "40", 1, 0, 0},
      /* per-sample masks (mask_batch = B = 3, a packing per sample): user bounds with GQA, a builder with
         seqlen_q != seqlen_k, one mask head per KV head, and the ring schedule */
      {FMMASKBOUNDS, 500, 500, 3, 4, 2, 32, 2, FM_DTYPE_FP32, "balanced", "hierarchical", "64", 1, 1, 2, NULL, 3},
      {FMMASKCAUSALDOCUMENT, 520, 300, 3, 2, 1, 16, 1, FM_DTYPE_FP32, "dual_chunk", "flat", "48", 1, 0, 0, NULL, 3},
      {FMMASKBOUNDS, 333, 411, 3, 6, 3, 16, 3, FM_DTYPE_FP32, "contiguous", "flat", "37", 1, 1, 0, NULL, 3},
      {FMMASKDOCUMENT, 600, 600, 3, 2, 2, 16, 2, FM_DTYPE_FP32, "balanced", "hierarchical", "0", 1, 1, 2, "ring", 3},
      /* the communication-aware balancer over two virtual nodes (test_dist_comm checks its partitions) */
      {FMMASKCAUSALDOCUMENT, 900, 900, 1, 2, 2, 16, 1, FM_DTYPE_FP32, "balanced", "hierarchical", "32", 1, 1, 2, NULL, 0, 1},
      {FMMASKDOCUMENT, 800, 800, 2, 4, 2, 16, 1, FM_DTYPE_FP32, "balanced", "flat", "32", 1, 0, 2, NULL, 0, 1},
      {FMMASKBOUNDS, 500, 500, 3, 4, 2, 32, 2, FM_DTYPE_FP32, "balanced", "hierarchical", "32", 1, 1, 2, NULL, 3, 1},
    };
    for (size_t i = 0; i < sizeof(cs) / sizeof(cs[0]); i++) {
      if (cs[i].vnodes > size) cs[i].vnodes = size;
      run_case(ctx, &cs[i], &ndoc);
    }
  }
  if (size > 1) {
    FMT_CHECK(ndoc > 0, "no pruned document case was compared with the all-gather");
    test_mismatch(ctx);
    test_agreement(ctx);
    test_types(ctx);
    test_move_errors(ctx);
    test_ring(ctx, &ndoc);
    if (size >= 3) FMT_CHECK(relayed_total > 0, "no hierarchical case on %d ranks relayed a chunk inside a virtual node", size);
  }
  FMT_CALL(FMContextDestroy(&ctx));
  MPI_Allreduce(&fmt_failures, &fails, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  if (fails && !fmt_failures) fmt_failures = 1; /* every rank returns the same verdict */
  FMT_CALL(FMFinalize());
  return fmt_finish("test_dist_exec");
}
