/*
 * fmplan-sim - run the context-parallel planner for a virtual topology, in one process and
 * without GPUs, and print the predicted per-rank work, the imbalance and the K/V bytes per
 * link level for each partition and route, beside the ring baseline. Lets a user choose settings for a large job on
 * a laptop.
 *
 *   fmplan-sim -nodes 16 -gpus_per_node 8 -mask causal_document -seqlen 1048576
 *              [-seqlen_k N] [-mask_heads 1] [-batch 1] [-heads_kv 8] [-head_dim 128]
 *              [-dtype bf16|fp16|fp32] [-chunk 0] [-block 128] [-prune 1] [-view_ranks]
 *              [-fm_mask_* options of the mask builders]
 */
#include <flashmask/private/fmdist.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char help[] =
  "fmplan-sim: the context-parallel planner for a virtual topology (one process, no GPU).\n"
  "  -nodes N -gpus_per_node G   virtual topology (P = N x G ranks)\n"
  "  -mask TYPE -seqlen S [-seqlen_k SK] [-mask_heads H]   the mask (any -fm_mask_* option too)\n"
  "  -batch B -heads_kv H -head_dim D -dtype bf16|fp16|fp32  the K/V shape that sets the bytes\n"
  "  -chunk L (0: default) -block 128 -prune 1 -view_ranks\n";

static FMErrorCode run(void)
{
  int nodes = 1, gpn = 8, S = 131072, Sk = 0, mh = 1, batch = 1, hkv = 8, d = 128, chunk = 0, block = 128, P;
  char mtype[64] = "causal_document", dts[16] = "bf16";
  FMBool prune = FM_TRUE, view = FM_FALSE, set;
  size_t es;
  FMContext ctx;
  FMMask mask;
  FMMaskDesc m;
  FMDistChunks ch;
  FMDistTopo topo;
  int64_t *w;
  double *bytes, t0, pcost = 1.0, rcost = 0.0;
  unsigned char *need;
  static const char *const starts[] = {"improved contiguous", "improved LPT", "improved dual_chunk"};

  FMCall(FMOptionsGetInt("-nodes", "virtual nodes", &nodes, NULL));
  FMCall(FMOptionsGetInt("-gpus_per_node", "ranks (GPUs) per node", &gpn, NULL));
  FMCall(FMOptionsGetString("-mask", "mask type (full, causal, causal_document, document, ...)", mtype, sizeof(mtype), NULL));
  FMCall(FMOptionsGetInt("-seqlen", "sequence length (query and key)", &S, NULL));
  FMCall(FMOptionsGetInt("-seqlen_k", "key sequence length (default: -seqlen)", &Sk, &set));
  FMCall(FMOptionsGetInt("-mask_heads", "mask heads (1 or heads_kv)", &mh, NULL));
  FMCall(FMOptionsGetInt("-batch", "batch size", &batch, NULL));
  FMCall(FMOptionsGetInt("-heads_kv", "key/value heads", &hkv, NULL));
  FMCall(FMOptionsGetInt("-head_dim", "head dimension", &d, NULL));
  FMCall(FMOptionsGetString("-dtype", "element type of K and V", dts, sizeof(dts), NULL));
  FMCall(FMOptionsGetInt("-chunk", "query rows per chunk (0: default, about seqlen/(4P))", &chunk, NULL));
  FMCall(FMOptionsGetInt("-block", "block size of the mask summaries", &block, NULL));
  FMCall(FMOptionsGetReal("-row_cost", "fixed cost of each query tile, in full tiles (as -fm_plan_row_cost)", &rcost, NULL));
  FMCall(FMOptionsGetReal("-partial_cost", "cost of a partially masked tile, in full tiles (as -fm_plan_partial_cost)", &pcost, NULL));
  FMCall(FMOptionsGetBool("-prune", "prune K/V chunks no local query sees", &prune, NULL));
  FMCall(FMOptionsGetBool("-view_ranks", "print every rank's work and bytes", &view, NULL));
  if (!set || Sk <= 0) Sk = S;
  FMCheck(pcost > 0 && pcost <= 64, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-partial_cost %g; expected a cost in (0, 64] full tiles", pcost);
  FMCheck(rcost >= 0 && rcost <= 1e6, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-row_cost %g; expected a cost in [0, 1e6] full tiles", rcost);
  FMCheck(nodes >= 1 && gpn >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "-nodes %d -gpus_per_node %d; expected both >= 1", nodes, gpn);
  es = !strcmp(dts, "fp32") ? 4 : 2;
  P = nodes * gpn;

  FMCall(FMContextCreate(MPI_COMM_SELF, &ctx));
  FMCall(FMContextSetBackend(ctx, FM_BACKEND_CPU));
  FMCall(FMContextSetUp(ctx));
  FMCall(FMMaskCreate(ctx, &mask));
  FMCall(FMMaskSetSizes(mask, S, Sk, mh));
  FMCall(FMMaskSetType(mask, mtype));
  FMCall(FMMaskSetBlockSize(mask, block));
  FMCall(FMMaskSetFromOptions(mask));
  t0 = FMTime();
  FMCall(FMMaskSetUp(mask));
  FMCall(FMMaskGetDesc_Private(mask, &m));
  FMCall(FMDistChunksInit(m.seqlen_q, m.seqlen_k, chunk, P, m.block, &ch));
  printf("fmplan-sim: %d ranks = %d node%s x %d; mask %s, %d x %d, %d mask head%s, block %d, block sparsity %.4f\n", P, nodes,
         nodes > 1 ? "s" : "", gpn, mtype, m.seqlen_q, m.seqlen_k, m.mask_heads, m.mask_heads > 1 ? "s" : "", m.block, mask->sparsity);
  printf("  K/V: batch %d, %d KV heads, head_dim %d, %s; %d chunks of %d rows (key chunks of %d); pruning %s\n", batch, hkv, d, dts,
         ch.nchunks, ch.chunk, ch.kchunk, prune ? "on" : "off");
  FMCall(FMMalloc(ch.nchunks, &w));
  FMCall(FMMalloc(ch.nchunks, &bytes));
  FMCall(FMMalloc((size_t)P * ch.nchunks, &need));
  FMCall(FMDistChunkWeights(&m, &ch, pcost, rcost, w));
  for (int c = 0; c < ch.nchunks; c++) bytes[c] = FMDistChunkBytes(&ch, c, batch, hkv, d, es);
  FMCall(FMDistTopoVirtual(P, nodes, &topo));
  printf("\n  %-10s %12s %12s %9s %12s %12s %7s  %-12s %11s %11s %13s\n", "partition", "max tiles", "mean tiles", "max/mean",
         "needed GB", "allgather GB", "needed", "route", "intra GB", "inter GB", "max recv MB");
  for (int type = 0; type < 3; type++) {
    FMDistPartition part;
    FMDistBalanceInfo info;
    int64_t mx;
    double mean, imb;
    FMCall(FMDistPartitionCreate((FMDistPartType)type, ch.nchunks, P, w, &part, &info));
    FMDistPartitionImbalance(&part, &mx, &mean, &imb);
    FMCall(FMDistNeededAll(&m, &ch, &part, prune == FM_TRUE, need));
    for (int rt = 0; rt < 2; rt++) {
      FMDistRoute route;
      double mrecv = 0, *recv;
      FMCall(FMDistRouteBuild((FMDistRouteType)rt, &topo, &part, need, bytes, &route));
      FMCall(FMCalloc(P, &recv));
      for (int i = 0; i < route.n; i++) recv[route.x[i].dst] += bytes[route.x[i].chunk];
      for (int r = 0; r < P; r++) if (recv[r] > mrecv) mrecv = recv[r];
      if (rt == 0)
        printf("  %-10s %12.1f %12.1f %9.4f %12.4f %12.4f %6.1f%%  %-12s %11.4f %11.4f %13.2f\n", FMDistPartNames[type], (double)mx / m.block,
               mean / m.block, imb, route.needed_bytes / 1e9, route.allgather_bytes / 1e9,
               route.allgather_bytes > 0 ? 100.0 * route.needed_bytes / route.allgather_bytes : 100.0, FMDistRouteNames[rt],
               route.bytes[0] / 1e9, route.bytes[1] / 1e9, mrecv / 1048576.0);
      else
        printf("  %-10s %12s %12s %9s %12s %12s %7s  %-12s %11.4f %11.4f %13.2f\n", "", "", "", "", "", "", "", FMDistRouteNames[rt],
               route.bytes[0] / 1e9, route.bytes[1] / 1e9, mrecv / 1048576.0);
      if (view && rt == 1) {
        printf("    rank node chunks   work(tiles)  needed  recv MB (hierarchical)\n");
        for (int r = 0; r < P; r++) {
          int nn = 0;
          for (int c = 0; c < ch.nchunks; c++) nn += need[(size_t)r * ch.nchunks + c];
          printf("    %4d %4d %6d %13.1f %7d %8.2f\n", r, topo.node[r], part.rstart[r + 1] - part.rstart[r], (double)part.work[r] / m.block, nn,
                 recv[r] / 1048576.0);
        }
      }
      free(recv);
      FMCall(FMDistRouteDestroy(&route));
    }
    {
      /* the ring baseline (-fm_plan_schedule ring): every rank's whole block visits every rank, unpruned */
      double *rb, rl[2], total = 0, mrecv = 0;
      FMCall(FMMalloc(P, &rb));
      FMDistRankBytes(&part, bytes, rb);
      FMDistRingBytes(&topo, rb, rl);
      for (int r = 0; r < P; r++) total += rb[r];
      for (int r = 0; r < P; r++) if (P > 1 && total - rb[r] > mrecv) mrecv = total - rb[r];
      printf("  %-10s %12s %12s %9s %12s %12s %7s  %-12s %11.4f %11.4f %13.2f\n", "", "", "", "", "", "", "", "ring", rl[0] / 1e9, rl[1] / 1e9,
             mrecv / 1048576.0);
      free(rb);
    }
    if (type == FM_DIST_BALANCED)
      printf("  balancer: LPT max %.1f tiles, dual_chunk max %.1f, kept the %s start; %d pair and %d three-way moves%s\n",
             (double)info.lpt_max / m.block, (double)info.dual_max / m.block, starts[info.start], info.pair_moves,
             info.triple_moves, info.inexact_pairs ? " (some pair pools too large for the exact search)" : "");
    FMCall(FMDistPartitionDestroy(&part));
  }
  printf("  (work counts (query tile, key block) pairs that are not skipped, in %d x %d tiles, summed over mask heads;\n"
         "   bytes are K+V of the needed remote chunks; the flat and hierarchical rows are the pruned gather routes, the ring row the\n"
         "   unpruned ring baseline of -fm_plan_schedule ring, (P-1) x all K/V; planning took %.2f s)\n", m.block, m.block, FMTime() - t0);
  free(w); free(bytes); free(need);
  FMCall(FMDistTopoDestroy(&topo));
  FMCall(FMMaskDestroy(&mask));
  FMCall(FMContextDestroy(&ctx));
  return FM_SUCCESS;
}

int main(int argc, char **argv)
{
  FMErrorCode ierr = FMInitialize(&argc, &argv, NULL, help);
  FMBool h = FM_FALSE;
  if (ierr) return 1;
  FMOptionsHasName("-help", &h);
  ierr = run();
  if (h) printf("%s", help);
  FMFinalize();
  return ierr ? 1 : 0;
}
