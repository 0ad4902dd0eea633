/*
 * driver.c - a deterministic mutation driver for the fuzz targets (the main that libFuzzer
 * would otherwise provide), run by make check.
 *
 * Usage: fuzz_<target> [-n N] [-seed S] [-only K] [-start K] [-max BYTES] [-v] [-save FILE] SEEDFILE...
 *   Runs every seed file unchanged, then N inputs made from them (default 500) with a
 *   splitmix64 generator seeded by S (default 1): each input is one seed (or two spliced) with
 *   1 to 8 mutations: bit flips, byte sets (random, 0, 0xff, 0x7f, 0x80), truncation, splicing,
 *   inserted and deleted bytes, and integer extremes (0, 1, -1, INT_MAX, INT_MIN, 2^30, 2^31,
 *   INT64_MAX ...) written over a 4- or 8-byte value, preferably where the seed holds a small
 *   little-endian integer (in HDF5 files: attribute values, dimensions, offsets). Input K can
 *   be replayed alone with -only K (the same inputs in the same order: deterministic); -v
 *   prints each input's number before it runs, -save FILE writes each input to FILE first
 *   (after a crash FILE holds the input that crashed), -start K skips the seeds and the inputs
 *   before K (to resume after a fault inside HDF5, below).
 *   A crash is the failure (with -fsanitize=address,undefined a report aborts the run). In
 *   plain builds the driver also fails when the heap in use (mallinfo2) grows by more than
 *   16 MiB between the end of the seeds and the end of the run: a leak per input.
 * Exit: 0 all inputs ran, 99 bad usage or unreadable seeds.
 */
#define _GNU_SOURCE 1 /* dladdr */
#include "fuzz.h"
#include <dlfcn.h>
#include <execinfo.h>
#include <malloc.h>
#include <signal.h>
#include <string.h>

/*
 * HDF5 1.10 itself crashes on some corrupt files (in code no check of ours can reach, such as
 * its local-heap lookup inside H5Dopen2). A fault whose innermost frame outside the C library
 * lies in libhdf5 is reported as "FM_FUZZ_HDF5_CRASH K" (tests/test_fuzz.sh then resumes at
 * input K + 1 and lists it); any other fault goes to the handler installed before ours (the
 * sanitizer's, or the default: a crash). Under a sanitizer the driver prints "FM_FUZZ_INPUT K"
 * when the sanitizer ends the process, and test_fuzz.sh reads the report's innermost frame.
 */
static volatile long cur_input = -1;
static struct sigaction old_act[32];

static void put(const char *s) { (void)!write(2, s, strlen(s)); }

static void on_fault(int sig, siginfo_t *si, void *uc)
{
  void *fr[48];
  int n = backtrace(fr, 48);
  const char *lib = NULL;
  for (int i = 1; i < n && !lib; i++) {
    Dl_info di;
    if (!dladdr(fr[i], &di) || !di.dli_fname) continue;
    if (strstr(di.dli_fname, "libc.so") || strstr(di.dli_fname, "libc-")) continue;
    lib = di.dli_fname;
  }
  if (lib && strstr(lib, "libhdf5") && cur_input >= 0) {
    char num[32];
    int k = 0;
    long v = cur_input;
    do num[k++] = (char)('0' + v % 10); while ((v /= 10) && k < 30);
    put(fm_fuzz_target);
    put(": a fault inside HDF5 itself (");
    put(lib);
    put("), not in flashmask's code\nFM_FUZZ_HDF5_CRASH ");
    while (k) (void)!write(2, &num[--k], 1);
    put("\n");
    signal(sig, SIG_DFL);
    raise(sig);
    return;
  }
  if (old_act[sig].sa_flags & SA_SIGINFO && old_act[sig].sa_sigaction) {
    sigaction(sig, &old_act[sig], NULL);
    old_act[sig].sa_sigaction(sig, si, uc);
    return;
  }
  sigaction(sig, &old_act[sig], NULL);
  raise(sig);
}

/* Under a sanitizer its report ends the process: name the input (test_fuzz.sh reads it). */
void __sanitizer_set_death_callback(void (*cb)(void)) __attribute__((weak));
static void on_sanitizer_death(void)
{
  fprintf(stderr, "FM_FUZZ_INPUT %ld\n", cur_input);
}

static void install_fault_handler(void)
{
  static const int sigs[] = {SIGSEGV, SIGBUS, SIGFPE};
  struct sigaction sa;
  void *fr[4];
  backtrace(fr, 4); /* loads libgcc now, not in the handler */
  if (__sanitizer_set_death_callback) __sanitizer_set_death_callback(on_sanitizer_death);
  memset(&sa, 0, sizeof(sa));
  sa.sa_sigaction = on_fault;
  sa.sa_flags = SA_SIGINFO | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (size_t i = 0; i < sizeof(sigs) / sizeof(sigs[0]); i++) sigaction(sigs[i], &sa, &old_act[sigs[i]]);
}

typedef struct {
  unsigned char *p;
  size_t n;
  size_t *ints; /* offsets of small little-endian int32 values */
  size_t nints;
} Seed;

static uint64_t rng;
static uint64_t next(void)
{
  uint64_t z = (rng += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}
static size_t below(size_t n) { return n ? (size_t)(next() % n) : 0; }

static int read_seed(const char *path, Seed *s)
{
  FILE *fp = fopen(path, "rb");
  long len;
  memset(s, 0, sizeof(*s));
  if (!fp) return -1;
  if (fseek(fp, 0, SEEK_END) || (len = ftell(fp)) < 0 || fseek(fp, 0, SEEK_SET)) {
    fclose(fp);
    return -1;
  }
  s->n = (size_t)len;
  s->p = malloc(s->n ? s->n : 1);
  if (!s->p || fread(s->p, 1, s->n, fp) != s->n) {
    fclose(fp);
    return -1;
  }
  fclose(fp);
  s->ints = malloc(sizeof(size_t) * (s->n / 4 + 1));
  for (size_t o = 0; s->ints && o + 4 <= s->n; o += 4) {
    uint32_t v = (uint32_t)s->p[o] | (uint32_t)s->p[o + 1] << 8 | (uint32_t)s->p[o + 2] << 16 | (uint32_t)s->p[o + 3] << 24;
    if (v >= 1 && v <= (1u << 20)) s->ints[s->nints++] = o;
  }
  return 0;
}

static void put_le(unsigned char *p, uint64_t v, int bytes)
{
  for (int k = 0; k < bytes; k++) p[k] = (unsigned char)(v >> (8 * k));
}

/* One mutation of buf[0..*n) (capacity cap), with s the seed it came from (for the int offsets). */
static void mutate(unsigned char *buf, size_t *n, size_t cap, const Seed *s, const Seed *other)
{
  static const uint64_t ext32[] = {0, 1, 0xffffffffu, 0x7fffffffu, 0x80000000u, 1u << 30, 0x7ffffffeu, 0xffff, 0x10000, 2, 0xfffffffeu};
  static const uint64_t ext64[] = {0, 1, ~0ull, 0x7fffffffffffffffull, 0x8000000000000000ull, 1ull << 32, 1ull << 40, 0x7fffffffull};
  static const unsigned char bytes[] = {0, 0xff, 0x7f, 0x80, 1};
  size_t len = *n;
  switch (below(9)) {
  case 0: /* bit flip */
    if (len) buf[below(len)] ^= (unsigned char)(1u << below(8));
    break;
  case 1: /* byte set */
    if (len) buf[below(len)] = below(2) ? (unsigned char)next() : bytes[below(sizeof(bytes))];
    break;
  case 2: /* truncation */
    if (len) *n = below(len);
    break;
  case 3: /* splice: a run of the other seed over this one, at the same or another offset */
    if (other->n && len) {
      size_t from = below(other->n), run = 1 + below(other->n - from < 256 ? other->n - from : 256);
      size_t to = below(2) ? from : below(len);
      if (to + run > len) run = len > to ? len - to : 0;
      memcpy(buf + to, other->p + from, run);
    }
    break;
  case 4: /* inserted bytes */
    if (len < cap) {
      size_t at = below(len + 1), k = 1 + below(cap - len < 16 ? cap - len : 16);
      memmove(buf + at + k, buf + at, len - at);
      for (size_t i = 0; i < k; i++) buf[at + i] = (unsigned char)next();
      *n = len + k;
    }
    break;
  case 5: /* deleted bytes */
    if (len) {
      size_t at = below(len), k = 1 + below(len - at < 16 ? len - at : 16);
      memmove(buf + at, buf + at + k, len - at - k);
      *n = len - k;
    }
    break;
  case 6: case 7: /* int32 extreme, preferably over a small integer of the seed */
    if (len >= 4) {
      size_t o = s->nints && below(4) ? s->ints[below(s->nints)] : below(len - 3);
      if (o + 4 <= len) put_le(buf + o, ext32[below(sizeof(ext32) / sizeof(ext32[0]))], 4);
    }
    break;
  default: /* int64 extreme */
    if (len >= 8) {
      size_t o = s->nints && below(2) ? s->ints[below(s->nints)] : below(len - 7);
      if (o + 8 <= len) put_le(buf + o, ext64[below(sizeof(ext64) / sizeof(ext64[0]))], 8);
    }
    break;
  }
}

static size_t heap_in_use(void)
{
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 33))
  struct mallinfo2 mi = mallinfo2();
  return mi.uordblks + mi.hblkhd;
#else
  return 0;
#endif
}

int main(int argc, char **argv)
{
  long n = 500, only = -1, start = 0;
  int verbose = 0;
  const char *save = NULL;
  unsigned long long seed = 1;
  size_t maxlen = 1 << 16, base = 0, maxsize = 0;
  Seed *seeds;
  int nseeds = 0;
  unsigned char *buf;

  if (LLVMFuzzerInitialize(&argc, &argv)) return 99;
  seeds = calloc((size_t)argc, sizeof(Seed));
  if (!seeds) return 99;
  for (int i = 1; i < argc; i++) {
    if (!strcmp(argv[i], "-n") && i + 1 < argc) n = atol(argv[++i]);
    else if (!strcmp(argv[i], "-seed") && i + 1 < argc) seed = strtoull(argv[++i], NULL, 0);
    else if (!strcmp(argv[i], "-only") && i + 1 < argc) only = atol(argv[++i]);
    else if (!strcmp(argv[i], "-max") && i + 1 < argc) maxlen = (size_t)atol(argv[++i]);
    else if (!strcmp(argv[i], "-v")) verbose = 1;
    else if (!strcmp(argv[i], "-start") && i + 1 < argc) start = atol(argv[++i]);
    else if (!strcmp(argv[i], "-save") && i + 1 < argc) save = argv[++i];
    else if (read_seed(argv[i], &seeds[nseeds++])) {
      fprintf(stderr, "%s: cannot read seed file \"%s\"\n", fm_fuzz_target, argv[i]);
      return 99;
    }
  }
  if (!nseeds) {
    fprintf(stderr, "usage: fuzz_%s [-n N] [-seed S] [-only K] [-max BYTES] SEEDFILE...\n", fm_fuzz_target);
    return 99;
  }
  for (int i = 0; i < nseeds; i++)
    if (seeds[i].n > maxsize) maxsize = seeds[i].n;
  if (maxlen < maxsize + 64) maxlen = maxsize + 64;
  buf = malloc(maxlen);
  if (!buf) return 99;
  install_fault_handler();
  if (only < 0 && start == 0)
    for (int i = 0; i < nseeds; i++) LLVMFuzzerTestOneInput(seeds[i].p, seeds[i].n);
  FMFuzzQuiesce();
  base = heap_in_use();
  rng = seed;
  for (long k = 0; k < n; k++) {
    const Seed *s = &seeds[below((size_t)nseeds)], *o = &seeds[below((size_t)nseeds)];
    size_t len = s->n;
    int nm = 1 + (int)below(8);
    memcpy(buf, s->p, len);
    for (int m = 0; m < nm; m++) mutate(buf, &len, maxlen, s, o);
    if ((only >= 0 && k != only) || k < start) continue;
    cur_input = k;
    if (verbose) fprintf(stderr, "%s: input %ld (%zu bytes)\n", fm_fuzz_target, k, len);
    if (save && fm_fuzz_write(save, buf, len)) fprintf(stderr, "%s: cannot write \"%s\"\n", fm_fuzz_target, save);
    LLVMFuzzerTestOneInput(buf, len);
  }
  FMFuzzQuiesce();
  cur_input = -1;
  if (only < 0 && base && heap_in_use() > base + ((size_t)16 << 20)) {
    fprintf(stderr, "%s: the heap grew from %zu to %zu bytes over %ld inputs: a leak\n", fm_fuzz_target, base, heap_in_use(), n);
    return 1;
  }
  printf("%s: %d seeds and %ld mutated inputs (seed %llu) ran; heap in use %+lld bytes over them\n", fm_fuzz_target, start ? 0 : nseeds,
         only >= 0 ? 1 : n - start, seed, (long long)heap_in_use() - (long long)base);
  for (int i = 0; i < nseeds; i++) {
    free(seeds[i].p);
    free(seeds[i].ints);
  }
  free(seeds);
  free(buf);
  return 0;
}
