/*
 * agree.c - agreement across the ranks of a communicator, owned by src/sys so that the
 * objects above make no MPI call of their own to agree: one code from all (FMAgree_Private,
 * in error.c), one value on all (FMAgreeSame_Private), root's outcome to all
 * (FMAgreeRootOutcome_Private), the entry agreement of every collective call that
 * communicates (FMAgreeCall_Private: the call, the local checks and the call's scalars); the one hash used for the values (FNV-1a, over words in four lanes for long inputs); the MPI error text.
 */
#include <flashmask/private/fmimpl.h>
#include <stdio.h>
#include <string.h>

#define FM_FNV_PRIME 0x100000001b3ULL

/* One 8-byte word into a lane: FNV-1a's xor and multiply, then a shift so that the word's high
   bits reach the lane's low bits too (a multiply alone only carries bits upwards). */
static inline uint64_t lane_mix(uint64_t l, uint64_t w)
{
  l = (l ^ w) * FM_FNV_PRIME;
  return l ^ (l >> 32);
}

uint64_t FMHash_Private(uint64_t h, const void *p, size_t n)
{
  const unsigned char *c = (const unsigned char *)p;
  size_t i = 0;
  if (n >= 32) { /* bulk data (mask bounds): four independent lanes of 8-byte words */
    uint64_t l[4] = {h, h ^ 0x9e3779b97f4a7c15ULL, h ^ 0xbf58476d1ce4e5b9ULL, h ^ 0x94d049bb133111ebULL};
    for (; i + 32 <= n; i += 32)
      for (int k = 0; k < 4; k++) {
        uint64_t w;
        memcpy(&w, c + i + 8 * k, 8);
        l[k] = lane_mix(l[k], w);
      }
    for (int k = 0; k < 4; k++) h = lane_mix(h, l[k]);
    h = lane_mix(h, (uint64_t)n);
  }
  for (; i < n; i++) { h ^= c[i]; h *= FM_FNV_PRIME; } /* the tail, and short inputs, byte by byte */
  return h;
}

FMErrorCode FMMPIError_Private(int mpierr, const char *expr, const char *file, const char *func, int line)
{
  char msg[MPI_MAX_ERROR_STRING];
  int len = 0;
  msg[0] = 0;
  if (MPI_Error_string(mpierr, msg, &len) != MPI_SUCCESS) snprintf(msg, sizeof(msg), "MPI error code %d", mpierr);
  return FMError_Private(MPI_COMM_SELF, file, func, line, FM_ERR_MPI, "MPI error in %s: %s", expr, msg);
}

FMErrorCode FMAgreeSame_Private(MPI_Comm comm, uint64_t value, const char *what, const char *file, const char *func, int line)
{
  int size = 1, rank = 0, err;
  unsigned long long in[2], lo[1], hi[1]; /* in: the value and this rank */
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  if (size == 1) return FM_SUCCESS;
  in[0] = (unsigned long long)value; in[1] = (unsigned long long)rank;
  err = MPI_Allreduce(&in[0], &lo[0], 1, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm);
  if (err == MPI_SUCCESS) err = MPI_Allreduce(&in[0], &hi[0], 1, MPI_UNSIGNED_LONG_LONG, MPI_MAX, comm);
  if (err != MPI_SUCCESS) return FMMPIError_Private(err, "MPI_Allreduce (agreeing on a value)", file, func, line);
  if (lo[0] == hi[0]) return FM_SUCCESS;
  {
    /* the lowest rank holding the minimum and the lowest holding the maximum, for the message */
    unsigned long long mine[2], who[2];
    mine[0] = (in[0] == lo[0]) ? in[1] : (unsigned long long)size;
    mine[1] = (in[0] == hi[0]) ? in[1] : (unsigned long long)size;
    err = MPI_Allreduce(mine, who, 2, MPI_UNSIGNED_LONG_LONG, MPI_MIN, comm);
    if (err != MPI_SUCCESS) return FMMPIError_Private(err, "MPI_Allreduce (agreeing on a value)", file, func, line);
    return FMError_Private(comm, file, func, line, FM_ERR_MISMATCH,
                           "Ranks disagree on %s: rank %llu has %#llx, rank %llu has %#llx; it must be the same on every rank",
                           what ? what : "a value", who[0], lo[0], who[1], hi[0]);
  }
}

/* Rank src failed with code: its message goes to every rank, so each can say what went wrong;
   src returns its own ierr, the others FM_ERR_COLLECTIVE naming src (who: " (the root)" or ""). */
static FMErrorCode spread_failure(MPI_Comm comm, int src, int code, FMErrorCode ierr, const char *who, const char *file, const char *func, int line)
{
  int rank = 0, err;
  char msg[1024];
  MPI_Comm_rank(comm, &rank);
  if (rank == src) snprintf(msg, sizeof(msg), "%s", FMGetLastErrorMessage());
  err = MPI_Bcast(msg, (int)sizeof(msg), MPI_CHAR, src, comm);
  if (err != MPI_SUCCESS) return FMMPIError_Private(err, "MPI_Bcast (a rank's error message)", file, func, line);
  if (rank == src) return ierr;
  msg[sizeof(msg) - 1] = '\0';
  return FMError_Private(comm, file, func, line, FM_ERR_COLLECTIVE, "Rank %d%s failed with %s: %s", src, who, FMErrorString((FMErrorCode)code),
                         msg);
}

FMErrorCode FMAgreeRootOutcome_Private(MPI_Comm comm, int root, FMErrorCode ierr, const char *file, const char *func, int line)
{
  int size = 1, rank = 0, code = (int)ierr, err;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  if (size == 1) return ierr;
  err = MPI_Bcast(&code, 1, MPI_INT, root, comm);
  if (err != MPI_SUCCESS) return FMMPIError_Private(err, "MPI_Bcast (root's outcome)", file, func, line);
  if (code == FM_SUCCESS) return rank == root ? ierr : FM_SUCCESS;
  return spread_failure(comm, root, code, ierr, " (the root)", file, func, line);
}

FMErrorCode FMAgreeFirstError_Private(MPI_Comm comm, FMErrorCode ierr, const char *file, const char *func, int line)
{
  int size = 1, rank = 0, mine, first, code = (int)ierr, err;
  MPI_Comm_size(comm, &size);
  MPI_Comm_rank(comm, &rank);
  if (size == 1) return ierr;
  /* the lowest rank that failed on its own; else (every failure is FM_ERR_COLLECTIVE, a rank
     told of another's) the lowest failing rank: the message spread is the one that says why */
  mine = !ierr ? 2 * size : ierr == FM_ERR_COLLECTIVE ? size + rank : rank;
  err = MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (err != MPI_SUCCESS) return FMMPIError_Private(err, "MPI_Allreduce (the first failing rank)", file, func, line);
  if (first == 2 * size) return FM_SUCCESS;
  if (first >= size) first -= size;
  err = MPI_Bcast(&code, 1, MPI_INT, first, comm);
  if (err != MPI_SUCCESS) return FMMPIError_Private(err, "MPI_Bcast (the first failing rank's code)", file, func, line);
  return spread_failure(comm, first, code, ierr, "", file, func, line);
}

FMErrorCode FMAgreeAny_Private(MPI_Comm comm, int flag, int *any, const char *file, const char *func, int line)
{
  int size = 1, in = flag ? 1 : 0, err;
  *any = in;
  MPI_Comm_size(comm, &size);
  if (size == 1) return FM_SUCCESS;
  err = MPI_Allreduce(&in, any, 1, MPI_INT, MPI_MAX, comm);
  if (err != MPI_SUCCESS) return FMMPIError_Private(err, "MPI_Allreduce (whether any rank has a flag)", file, func, line);
  return FM_SUCCESS;
}

/* FMCallName_Private - see fmimpl.h. */
const char *FMCallName_Private(long long c)
{
  static const char *const names[FM_CALL_COUNT] = {"(none)", "FMPlanSetUp", "FMPlanForward", "FMPlanBackward", "FMPlanScatter", "FMPlanGather",
                                                   "FMPlanView", "FMPlanSetFromOptions", "FMMaskSetUp", "FMMaskSave", "FMMaskLoad",
                                                   "FMMaskSetFromOptions", "FMContextSetUp", "FMContextSetFromOptions"};
  return c >= 1 && c < FM_CALL_COUNT ? names[c] : "another call";
}

/* The comparison key of a field: its integer, or the bits of its real. */
static long long field_key(const FMAgreeField *f)
{
  long long k = f->i;
  if (f->kind == FM_AGREE_FIELD_REAL) memcpy(&k, &f->r, sizeof(k));
  return k;
}

static void field_text(const FMAgreeField *f, long long key, char *s, size_t n)
{
  if (f->kind == FM_AGREE_FIELD_REAL) {
    double r;
    memcpy(&r, &key, sizeof(r));
    snprintf(s, n, "%.17g", r);
  } else if (f->kind == FM_AGREE_FIELD_HASH) snprintf(s, n, "%#llx", (unsigned long long)key);
  else snprintf(s, n, "%lld", key);
}

/* FMAgreeCall_Private - see fmimpl.h. Slot 0: the call; 1: the failure (code, lowest rank); then the fields. */
FMErrorCode FMAgreeCall_Private(MPI_Comm comm, FMCallId call, FMErrorCode local_ierr, int n, const FMAgreeField *f)
{
  enum { NS = FM_AGREE_MAX_FIELDS + 2 };
  long long key[2 * NS], mx[2 * NS], mn[NS];
  int size = 1, rank = 0, first = -1, mine[2], who[2];
  char a[64], b[64];
  FMCheck(n >= 0 && n <= FM_AGREE_MAX_FIELDS, MPI_COMM_SELF, FM_ERR_LIB, "%d fields to agree on; at most %d", n, FM_AGREE_MAX_FIELDS);
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
              FMCallName_Private(call), FMErrorString((FMErrorCode)code));
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
    FMRaise(comm, FM_ERR_MISMATCH, "Ranks are in different calls on one communicator: %s() on rank %d and %s() on rank %d; every rank must make the "
            "same collective calls, on its objects of one context, in the same order", FMCallName_Private(mn[0]), who[0], FMCallName_Private(mx[0]), who[1]);
  field_text(&f[first - 2], mn[first], a, sizeof(a));
  field_text(&f[first - 2], mx[first], b, sizeof(b));
  FMRaise(comm, FM_ERR_MISMATCH, "%s(): %s is %s on rank %d and %s on rank %d; it must be the same on every rank", FMCallName_Private(call),
          f[first - 2].name, a, who[0], b, who[1]);
}

void FMHeaderCreate(void *obj, FMClassId classid, const char *class_name, MPI_Comm comm)
{
  FMObjectHeader *h = (FMObjectHeader *)obj;
  h->classid = classid;
  h->class_name = class_name;
  h->comm = comm;
  h->refct = 1;
  h->type_name = NULL;
  h->prefix = NULL;
  h->setupcalled = 0;
}

void FMHeaderDestroy(void *obj)
{
  FMObjectHeader *h = (FMObjectHeader *)obj;
  FMFree(h->type_name);
  FMFree(h->prefix);
  h->classid = 0;
}

FMErrorCode FMHeaderSetOptionsPrefix(void *obj, FMClassId cid, const char *prefix)
{
  FMObjectHeader *h = (FMObjectHeader *)obj;
  char *p = NULL;
  FMValidHeader(obj, cid, 1);
  if (prefix && prefix[0]) {
    FMCheck(prefix[0] != '-', h->comm, FM_ERR_ARG_WRONG,
            "Argument 2 (prefix) is \"%s\"; a prefix must not start with '-' (it goes after the option's dash)", prefix);
    FMCheck(strlen(prefix) <= FM_OPTIONS_PREFIX_MAX, h->comm, FM_ERR_ARG_WRONG, "Argument 2 (prefix) is %zu characters long; expected at most %d",
            strlen(prefix), FM_OPTIONS_PREFIX_MAX);
    for (const char *c = prefix; *c; c++)
      FMCheck(*c > ' ', h->comm, FM_ERR_ARG_WRONG, "Argument 2 (prefix) is \"%s\"; a prefix may not contain blanks", prefix);
    FMCall(FMStrdup(prefix, &p));
  }
  FMFree(h->prefix);
  h->prefix = p;
  return FM_SUCCESS;
}

FMErrorCode FMHeaderGetOptionsPrefix(void *obj, FMClassId cid, const char **prefix)
{
  FMValidHeader(obj, cid, 1);
  FMValidPointer(prefix, 2);
  *prefix = ((FMObjectHeader *)obj)->prefix;
  return FM_SUCCESS;
}

FMErrorCode FMHeaderSetFromOptions(void *obj, FMClassId cid, FMErrorCode (*body)(void *obj))
{
  FMErrorCode ierr;
  FMValidHeader(obj, cid, 1);
  FMCall(FMAgreeCall_Private(((FMObjectHeader *)obj)->comm,
                             cid == FM_CLASSID_PLAN   ? FM_CALL_PLAN_SETFROMOPTIONS
                             : cid == FM_CLASSID_MASK ? FM_CALL_MASK_SETFROMOPTIONS
                                                      : FM_CALL_CONTEXT_SETFROMOPTIONS,
                             FM_SUCCESS, 0, NULL));
  FMCall(FMOptionsPushPrefix_Private(((FMObjectHeader *)obj)->prefix));
  ierr = (*body)(obj);
  FMCall(FMOptionsPopPrefix_Private());
  /* collective: an option refused on one rank is an error on every rank (the others would go on
     into the next collective call and hang there) */
  FMCall(FMAgreeCode(((FMObjectHeader *)obj)->comm, ierr));
  return FM_SUCCESS;
}
