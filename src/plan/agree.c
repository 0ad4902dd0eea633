/*
 * agree.c - the agreement at the entry of every collective call of a plan (FMPlanAgree_Private,
 * planimpl.h): the call, the local checks' outcome and the call's scalars in one allreduce, so
 * that a rank with other arguments, or in another call, is an error on every rank naming what
 * differs, before any rank sends its first message.
 */
#include <flashmask/private/planimpl.h>
#include <stdio.h>
#include <string.h>

static const char *call_name(long long c)
{
  static const char *const names[] = {"(none)", "FMPlanSetUp", "FMPlanForward", "FMPlanBackward", "FMPlanScatter", "FMPlanGather"};
  return c >= 1 && c <= 5 ? names[c] : "another call";
}

/* The comparison key of a field: its integer, or the bits of its real. */
static long long field_key(const FMPlanField *f)
{
  long long k = f->i;
  if (f->kind == FM_PLAN_FIELD_REAL) memcpy(&k, &f->r, sizeof(k));
  return k;
}

static void field_text(const FMPlanField *f, long long key, char *s, size_t n)
{
  if (f->kind == FM_PLAN_FIELD_REAL) {
    double r;
    memcpy(&r, &key, sizeof(r));
    snprintf(s, n, "%.17g", r);
  } else if (f->kind == FM_PLAN_FIELD_HASH) snprintf(s, n, "%#llx", (unsigned long long)key);
  else snprintf(s, n, "%lld", key);
}

/* FMPlanAgree_Private - see planimpl.h. Slot 0: the call; 1: the failure (code, lowest rank); then the fields. */
FMErrorCode FMPlanAgree_Private(FMPlan plan, FMPlanCall call, FMErrorCode local_ierr, int n, const FMPlanField *f)
{
  enum { NS = FM_PLAN_MAX_FIELDS + 2 };
  MPI_Comm comm = plan->hdr.comm;
  long long key[2 * NS], mx[2 * NS], mn[NS];
  int size = 1, rank = 0, first = -1, mine[2], who[2];
  char a[64], b[64];
  FMCheck(n >= 0 && n <= FM_PLAN_MAX_FIELDS, MPI_COMM_SELF, FM_ERR_LIB, "%d fields to agree on; at most %d", n, FM_PLAN_MAX_FIELDS);
  FMCallMPI(MPI_Comm_size(comm, &size));
  FMCallMPI(MPI_Comm_rank(comm, &rank));
  if (size == 1) return local_ierr;
  memset(key, 0, sizeof(key));
  key[0] = (long long)call;
  key[1] = local_ierr ? ((long long)local_ierr << 32) | (long long)(size - 1 - rank) : 0;
  for (int i = 0; i < n; i++) key[2 + i] = field_key(&f[i]);
  for (int i = 0; i < NS; i++) key[NS + i] = ~key[i]; /* the maximum of ~x is ~(the minimum of x) */
  FMCallMPI(MPI_Allreduce(key, mx, 2 * NS, MPI_LONG_LONG, MPI_MAX, comm));
  for (int i = 0; i < NS; i++) mn[i] = ~mx[NS + i];
  if (mn[0] == mx[0]) {
    if (mx[1]) {
      int code = (int)(mx[1] >> 32), who_failed = size - 1 - (int)(mx[1] & 0xffffffffLL);
      if (local_ierr) return FMErrorTraceback(__FILE__, __func__, __LINE__, local_ierr);
      FMRaise(comm, FM_ERR_COLLECTIVE, "Rank %d of this communicator failed the checks of %s() with %s; this rank stops too", who_failed,
              call_name(call), FMErrorString((FMErrorCode)code));
    }
    for (int i = 2; i < 2 + n && first < 0; i++)
      if (mn[i] != mx[i]) first = i;
    if (first < 0) return FM_SUCCESS;
  } else first = 0;
  /* the lowest ranks holding the minimum and the maximum of the first field that differs */
  mine[0] = key[first] == mn[first] ? rank : size;
  mine[1] = key[first] == mx[first] ? rank : size;
  FMCallMPI(MPI_Allreduce(mine, who, 2, MPI_INT, MPI_MIN, comm));
  if (who[1] < who[0]) { /* name the lower rank first */
    int t = who[0]; long long tv = mn[first];
    who[0] = who[1]; who[1] = t; mn[first] = mx[first]; mx[first] = tv;
  }
  if (first == 0)
    FMRaise(comm, FM_ERR_MISMATCH, "Ranks are in different calls on one plan: %s() on rank %d and %s() on rank %d; every rank must make the same "
            "collective calls in the same order", call_name(mn[0]), who[0], call_name(mx[0]), who[1]);
  field_text(&f[first - 2], mn[first], a, sizeof(a));
  field_text(&f[first - 2], mx[first], b, sizeof(b));
  FMRaise(comm, FM_ERR_MISMATCH, "%s(): %s is %s on rank %d and %s on rank %d; it must be the same on every rank", call_name(call),
          f[first - 2].name, a, who[0], b, who[1]);
}
