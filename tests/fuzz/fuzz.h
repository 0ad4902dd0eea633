/*
 * fuzz.h - what the fuzz targets (fuzz_mask.c, fuzz_trace.c, fuzz_options.c, fuzz_bounds.c) share with the
 * deterministic mutation driver (driver.c) and with libFuzzer.
 *
 * Each target defines the two libFuzzer entry points:
 *   int LLVMFuzzerInitialize(int *argc, char ***argv)   once: FMInitialize and what the target
 *                                                       needs; registers its clean-up with atexit
 *   int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)   one input; returns 0. A
 *                                                       broken invariant calls fm_fuzz_fail (abort)
 * and FMFuzzQuiesce (driver only: free caches before the driver's leak check).
 * Built with clang -fsanitize=fuzzer,address (make fuzz-libfuzzer) libFuzzer provides main;
 * otherwise driver.c does.
 */
#ifndef FM_FUZZ_H
#define FM_FUZZ_H
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
void FMFuzzQuiesce(void);

/* The target's name in messages, and a broken invariant: print and abort (a crash). */
extern const char *fm_fuzz_target;
#define fm_fuzz_fail(...)                                                            \
  do {                                                                               \
    fprintf(stderr, "%s: invariant broken at %s:%d: ", fm_fuzz_target, __FILE__, __LINE__); \
    fprintf(stderr, __VA_ARGS__);                                                    \
    fprintf(stderr, "\n");                                                           \
    abort();                                                                         \
  } while (0)

/* Write data[0..size) to path (the HDF5 targets load files); 0 on success. */
static inline int fm_fuzz_write(const char *path, const uint8_t *data, size_t size)
{
  FILE *fp = fopen(path, "wb");
  int ok;
  if (!fp) return -1;
  ok = fwrite(data, 1, size, fp) == size;
  return fclose(fp) == 0 && ok ? 0 : -1;
}

/* A temporary file name for this process ($TMPDIR or /tmp), made once per suffix. */
static inline void fm_fuzz_tmpname(char *buf, size_t len, const char *suffix)
{
  const char *d = getenv("TMPDIR");
  snprintf(buf, len, "%s/fmfuzz-%s-%ld%s", d && d[0] ? d : "/tmp", fm_fuzz_target, (long)getpid(), suffix);
}
#endif
