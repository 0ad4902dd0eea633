/*
 * faults.c - the library's fault sites, a testing aid: -fm_debug_fail site[:rank[:count]]
 * (read by FMInitialize) makes the named site fail on one rank of MPI_COMM_WORLD, so that the
 * tests can check that a failure there reaches every rank as an error, never a hang.
 * Compiled in always; an unarmed site costs one branch (FMFaultAt, fmimpl.h). The sites and
 * what each one stands for are listed once, in sites[] below (-help prints the names;
 * HACKING.md tells how the tests use them).
 */
#include <flashmask/private/fmimpl.h>
#include <string.h>

int FMFaultArmed_Private;

typedef struct {
  const char *name;
  FMErrorCode code; /* what the injected failure returns: the kind of error it stands for */
  const char *what;
} Site;

static const Site sites[] = {
  {"cp_exec_alloc", FM_ERR_MEM, "an allocation of a CPU cp call's state, before its agreement"},
  {"cp_forward_chunk", FM_ERR_MEM, "the CPU cp forward on one held K/V chunk (gather and ring)"},
  {"cp_backward_chunk", FM_ERR_MEM, "the CPU cp backward on one held K/V chunk (gather and ring)"},
  {"cp_gather_wait", FM_ERR_MPI, "the gather's wait for the next arriving chunk, no request named"},
  {"cp_relay", FM_ERR_MPI, "a relay's send of an arrived chunk (after it was posted)"},
  {"cp_ring_wait", FM_ERR_MPI, "the completion of one ring step's K/V exchange"},
  {"cp_ring_reduce", FM_ERR_MPI, "the completion of one ring step's dK/dV running sum"},
  {"cp_reduce_send", FM_ERR_MPI, "the CPU dK/dV reduction's send of a sum to its parent (after it was posted)"},
  {"cp_reduce_wait", FM_ERR_MPI, "the CPU dK/dV reduction's wait for a child's partial, no request named"},
  {"cp_finish_sends", FM_ERR_MPI, "the completion of the gather's sends"},
  {"gpu_run_start", FM_ERR_CUDA, "the start of a GPU cp forward or backward (its events on the streams)"},
  {"gpu_exchange_post", FM_ERR_NCCL, "a GPU cp K/V exchange step over NCCL, not posted (its peers wait on the device until the abort)"},
  {"gpu_exchange_wait", FM_ERR_MPI, "the completion of a GPU cp K/V exchange step over MPI (after its messages moved)"},
  {"gpu_reduce_download", FM_ERR_CUDA, "the GPU backward's download of its dK/dV partials"},
  {"gpu_reduce_send", FM_ERR_MPI, "the GPU dK/dV reduction's send of a sum to its parent (after it was posted)"},
  {"gpu_reduce_wait", FM_ERR_MPI, "the GPU dK/dV reduction's wait for a child's partial, no request named"},
  {"gpu_reduce_upload", FM_ERR_CUDA, "the GPU backward's upload of the owned chunks' summed partials"},
};
#define NSITES ((int)(sizeof(sites) / sizeof(sites[0])))

static int armed = -1;  /* index into sites[], -1: none */
static int arank, acount, hits;

int FMFaultSiteCount_Private(void) { return NSITES; }
const char *FMFaultSiteName_Private(int i) { return i >= 0 && i < NSITES ? sites[i].name : NULL; }

FMErrorCode FMFaultArm_Private(const char *spec)
{
  char name[64];
  const char *colon;
  size_t n;
  int r = 0, c = 1, k = -1, used = 0;
  FMFaultArmed_Private = 0;
  armed = -1;
  if (!spec || !spec[0]) return FM_SUCCESS;
  colon = strchr(spec, ':');
  n = colon ? (size_t)(colon - spec) : strlen(spec);
  FMCheck(n < sizeof(name), MPI_COMM_SELF, FM_ERR_OPT, "-fm_debug_fail \"%s\": the site name is %zu characters long; expected a fault site name", spec, n);
  memcpy(name, spec, n);
  name[n] = '\0';
  for (int i = 0; i < NSITES; i++)
    if (!strcmp(sites[i].name, name)) k = i;
  if (k < 0) {
    char list[1024] = "";
    for (int i = 0; i < NSITES; i++) {
      strncat(list, i ? ", " : "", sizeof(list) - strlen(list) - 1);
      strncat(list, sites[i].name, sizeof(list) - strlen(list) - 1);
    }
    FMRaise(MPI_COMM_SELF, FM_ERR_OPT, "-fm_debug_fail \"%s\": no fault site \"%s\"; expected site[:rank[:count]] with a site among %s", spec, name,
            list);
  }
  if (colon) {
    int m = sscanf(colon + 1, "%d%n", &r, &used);
    const char *rest = colon + 1 + (m == 1 ? used : 0);
    FMCheck(m == 1 && r >= 0, MPI_COMM_SELF, FM_ERR_OPT, "-fm_debug_fail \"%s\": the rank after the site is \"%s\"; expected an integer >= 0", spec,
            colon + 1);
    if (*rest == ':') {
      m = sscanf(rest + 1, "%d%n", &c, &used);
      FMCheck(m == 1 && c >= 0 && rest[1 + used] == '\0', MPI_COMM_SELF, FM_ERR_OPT,
              "-fm_debug_fail \"%s\": the count is \"%s\"; expected an integer >= 0 (0: every time)", spec, rest + 1);
    } else FMCheck(*rest == '\0', MPI_COMM_SELF, FM_ERR_OPT, "-fm_debug_fail \"%s\": \"%s\" after the rank; expected :count or nothing", spec, rest);
  }
  armed = k;
  arank = r;
  acount = c;
  hits = 0;
  FMFaultArmed_Private = 1;
  return FM_SUCCESS;
}

FMErrorCode FMFaultAt_Private(const char *site, const char *file, const char *func, int line)
{
  int rank = 0, init = 0;
  if (armed < 0 || strcmp(site, sites[armed].name)) return FM_SUCCESS;
  MPI_Initialized(&init);
  if (init) MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  if (rank != arank || (acount > 0 && hits >= acount)) return FM_SUCCESS;
  hits++;
  return FMError_Private(MPI_COMM_SELF, file, func, line, sites[armed].code, "Injected failure at fault site %s (%s) on rank %d (-fm_debug_fail, a testing aid)",
                         site, sites[armed].what, rank);
}
