/*
 * layout.c - where the tensors of a plan live: FMPlanGetLocalRows / FMPlanGetLocalKeys, and
 * FMPlanScatter / FMPlanGather between a global tensor on one rank and the plan's local layout.
 * Type-generic: the rows and keys of each rank come from the type (plan->ops->getlayout).
 */
#include <flashmask/private/planimpl.h>
#include <stdlib.h>
#include <string.h>

FMErrorCode FMPlanGetLocalRows(FMPlan plan, int *nlocal, const int **global_rows)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(nlocal, 2);
  FMCall(FMPlanCheckCurrent_Private(plan, "FMPlanGetLocalRows"));
  *nlocal = plan->nlocal;
  if (global_rows) *global_rows = plan->rows;
  return FM_SUCCESS;
}

FMErrorCode FMPlanGetLocalKeys(FMPlan plan, int *nkeys, const int **global_keys)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMValidPointer(nkeys, 2);
  FMCall(FMPlanCheckCurrent_Private(plan, "FMPlanGetLocalKeys"));
  FMCall((*plan->ops->getlocalkeys)(plan, nkeys, global_keys));
  return FM_SUCCESS;
}

/* Layout of a tensor kind on rank r: outer x S x unit bytes globally, outer x n x unit locally. */
static FMErrorCode kind_layout(FMPlan plan, FMPlanTensor kind, int r, int *n, int **idx, size_t *outer, size_t *unit, int *S)
{
  size_t es = FMDTypeSize(plan->dtype);
  switch (kind) {
  case FM_PLAN_TENSOR_Q:
    *outer = (size_t)plan->batch; *unit = (size_t)plan->heads_q * plan->head_dim * es; *S = plan->mask->seqlen_q;
    break;
  case FM_PLAN_TENSOR_KV:
    *outer = (size_t)plan->batch; *unit = (size_t)plan->heads_kv * plan->head_dim * es; *S = plan->mask->seqlen_k;
    break;
  case FM_PLAN_TENSOR_LSE:
    *outer = (size_t)plan->batch * plan->heads_q; *unit = sizeof(float); *S = plan->mask->seqlen_q;
    break;
  default: FMRaise(MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE, "Argument 2 (kind) is %d; expected FM_PLAN_TENSOR_Q, _KV or _LSE", (int)kind);
  }
  FMCall((*plan->ops->getlayout)(plan, kind == FM_PLAN_TENSOR_KV, r, n, idx));
  return FM_SUCCESS;
}

/* Local checks of a scatter or gather (agreed by the caller); *n, *outer, *unit, *total out. */
static FMErrorCode check_move(FMPlan plan, FMPlanTensor kind, int root, int scatter, const void *global, const void *local, int *n,
                              size_t *outer, size_t *unit, size_t *total)
{
  int me = plan->ctx->rank, S = 0, *idx = NULL;
  FMCall(kind_layout(plan, kind, me, n, &idx, outer, unit, &S));
  free(idx);
  *total = *outer * (size_t)S * *unit; /* the same on every rank */
  FMCheck(*total <= 2147483647.0, MPI_COMM_SELF, FM_ERR_SUP, "The global tensor has %zu bytes, more than one MPI call moves", *total);
  FMCheck(*n == 0 || local, MPI_COMM_SELF, FM_ERR_ARG_NULL,
          "Null pointer: argument %d (local) on rank %d, whose local count is %d; expected a buffer of %zu bytes", scatter ? 5 : 4, me, *n,
          *outer * (size_t)*n * *unit);
  FMCheck(me != root || global, MPI_COMM_SELF, FM_ERR_ARG_NULL, "Null pointer: argument %d (global) on the root rank %d", scatter ? 4 : 5,
          root);
  return FM_SUCCESS;
}

/* Root packs (scatter) or unpacks (gather) the global tensor rank by rank into or out of pk (pk
   NULL: only count); cnt, dsp out when given. */
static FMErrorCode pack(FMPlan plan, FMPlanTensor kind, int scatter, const void *gin, void *gout, char *pk, int *cnt, int *dsp)
{
  size_t pos = 0, outer, unit;
  for (int r = 0; r < plan->ctx->size; r++) {
    int nr, *ir = NULL, S;
    FMCall(kind_layout(plan, kind, r, &nr, &ir, &outer, &unit, &S));
    if (cnt) { cnt[r] = (int)(outer * nr * unit); dsp[r] = (int)pos; }
    if (!pk) pos += outer * nr * unit;
    for (size_t o = 0; pk && o < outer; o++)
      for (int i = 0; i < nr; i++, pos += unit) {
        if (scatter) memcpy(pk + pos, (const char *)gin + (o * S + (size_t)ir[i]) * unit, unit);
        else memcpy((char *)gout + (o * S + (size_t)ir[i]) * unit, pk + pos, unit);
      }
    free(ir);
  }
  return FM_SUCCESS;
}

/*
 * Scatter (global_in on root -> local_out) or gather (local_in -> global_out on root). The
 * argument checks and the call's scalars (kind, root, the shape) are agreed first
 * (FMPlanAgree_Private: a bad root on one rank, different roots or kinds, or a rank in another
 * call, is an error on every rank naming the field), then root's allocations, before any data
 * moves: never a hang.
 */
static FMErrorCode move(FMPlan plan, FMPlanTensor kind, int root, int scatter, const void *global_in, void *global_out,
                        const void *local_in, void *local_out)
{
  MPI_Comm comm = plan->hdr.comm;
  int P = plan->ctx->size, me = plan->ctx->rank, *cnt = NULL, *dsp = NULL, n = 0;
  size_t outer = 0, unit = 0, total = 0;
  char *pk = NULL;
  FMErrorCode ierr = FM_SUCCESS;
  {
    /* the local checks and the scalars of the call in one agreement, the first message */
    const int ok = plan->hdr.setupcalled && plan->mask;
    const FMAgreeField f[] = {{"kind (FMPlanTensor, argument 2)", FM_AGREE_FIELD_INT, (long long)kind, 0},
                              {"root (argument 3)", FM_AGREE_FIELD_INT, root, 0},
                              {"batch", FM_AGREE_FIELD_INT, plan->batch, 0},
                              {"heads_q", FM_AGREE_FIELD_INT, plan->heads_q, 0},
                              {"heads_kv", FM_AGREE_FIELD_INT, plan->heads_kv, 0},
                              {"head_dim", FM_AGREE_FIELD_INT, plan->head_dim, 0},
                              {"dtype (FMDType)", FM_AGREE_FIELD_INT, (long long)plan->dtype, 0},
                              {"seqlen_q (of the mask)", FM_AGREE_FIELD_INT, ok ? plan->mask->seqlen_q : -1, 0},
                              {"seqlen_k (of the mask)", FM_AGREE_FIELD_INT, ok ? plan->mask->seqlen_k : -1, 0}};
    ierr = FMPlanCheckCurrent_Private(plan, scatter ? "FMPlanScatter" : "FMPlanGather");
    if (!ierr && !(root >= 0 && root < P))
      ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_ARG_OUTOFRANGE, "Argument 3 (root) is %d; expected 0..%d", root,
                             P - 1);
    if (!ierr && !(kind == FM_PLAN_TENSOR_Q || kind == FM_PLAN_TENSOR_KV || kind == FM_PLAN_TENSOR_LSE))
      ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_ARG_OUTOFRANGE,
                             "Argument 2 (kind) is %d; expected FM_PLAN_TENSOR_Q, _KV or _LSE", (int)kind);
    if (!ierr)
      ierr = check_move(plan, kind, root, scatter, scatter ? global_in : (const void *)global_out, scatter ? (const void *)local_out : local_in,
                        &n, &outer, &unit, &total);
    FMCall(FMPlanAgree_Private(plan, scatter ? FM_CALL_PLAN_SCATTER : FM_CALL_PLAN_GATHER, ierr, (int)(sizeof(f) / sizeof(f[0])), f));
  }
  if (!ierr && me == root) ierr = FMMalloc(P, &cnt);
  if (!ierr && me == root) ierr = FMMalloc(P, &dsp);
  if (!ierr && me == root) ierr = FMMalloc(total + 1, &pk);
  if (!ierr && me == root) ierr = pack(plan, kind, scatter, global_in, NULL, scatter ? pk : NULL, cnt, dsp);
  FMAgreeGoto(comm);
  if (scatter) FMCallMPIGoto(MPI_Scatterv(pk, cnt, dsp, MPI_BYTE, local_out, (int)(outer * n * unit), MPI_BYTE, root, comm));
  else FMCallMPIGoto(MPI_Gatherv(local_in, (int)(outer * n * unit), MPI_BYTE, pk, cnt, dsp, MPI_BYTE, root, comm));
  if (!scatter && me == root) FMCallGoto(pack(plan, kind, 0, NULL, global_out, pk, NULL, NULL));
cleanup:
  free(pk); free(cnt); free(dsp);
  return ierr;
}

/*
 * FMPlanScatter / FMPlanGather: collective; argument errors on any rank are errors on every
 * rank (see move()). local may be NULL where this rank's local count is 0; global is read
 * only on root.
 */
FMErrorCode FMPlanScatter(FMPlan plan, FMPlanTensor kind, int root, const void *global, void *local)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCall(move(plan, kind, root, 1, global, NULL, NULL, local));
  return FM_SUCCESS;
}

FMErrorCode FMPlanGather(FMPlan plan, FMPlanTensor kind, int root, const void *local, void *global)
{
  FMValidHeader(plan, FM_CLASSID_PLAN, 1);
  FMCall(move(plan, kind, root, 0, NULL, global, local, NULL));
  return FM_SUCCESS;
}
