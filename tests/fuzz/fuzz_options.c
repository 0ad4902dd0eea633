/*
 * fuzz_options.c - fuzz target of the options parser. The input is cut at its first two NUL
 * bytes into an options file (written to a temporary file), the FM_OPTIONS string and the
 * command line (split at blanks); FMInitialize reads the three, then every option name of the
 * input (at most 16) is read back with one of FMOptionsGetInt/Real/Bool/String/IntArray/
 * FMOptionsGetEnum_Private, chosen by the name, and FMFinalize frees the database.
 * Invariants: FMInitialize fails only with FM_ERR_FILE (what is not a text file) or
 * FM_ERR_OPT/FM_ERR_ARG_WRONG/FM_ERR_ARG_OUTOFRANGE, with a message; a read either succeeds or
 * fails with FM_ERR_OPT naming the option; a string read fits its buffer. See fuzz.h.
 */
#define _GNU_SOURCE 1 /* memmem */
#include "fuzz.h"
#include <flashmask.h>
#include <flashmask/private/fmimpl.h>
#include <ctype.h>
#include <mpi.h>
#include <string.h>

const char *fm_fuzz_target = "options";
static char path[512], envbuf[1 << 17];
static int env_set;

static void finish(void)
{
  unlink(path);
  MPI_Finalize();
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  MPI_Init(argc, argv); /* ours: every FMFinalize leaves MPI initialized */
  fm_fuzz_tmpname(path, sizeof(path), ".opts");
  atexit(finish);
  return 0;
}

void FMFuzzQuiesce(void) {}

static void expect(FMErrorCode e, const char *what, const char *name)
{
  if (e && (e != FM_ERR_OPT || !FMGetLastErrorMessage()[0]))
    fm_fuzz_fail("%s(\"%s\") returned %s: %s", what, name, FMErrorString(e), FMGetLastErrorMessage());
}

static void read_back(const char *name)
{
  static const char *const list[] = {"auto", "cpu", "cuda", NULL};
  unsigned h = 0;
  int iv = 0, arr[8], n = 8, ev = 0;
  double rv = 0;
  FMBool bv = FM_FALSE;
  char sv[16];
  for (const char *p = name; *p; p++) h = h * 31u + (unsigned char)*p;
  sv[0] = '\0';
  switch (h % 6) {
  case 0: expect(FMOptionsGetInt(name, "fuzz", &iv, NULL), "FMOptionsGetInt", name); break;
  case 1: expect(FMOptionsGetReal(name, "fuzz", &rv, NULL), "FMOptionsGetReal", name); break;
  case 2: expect(FMOptionsGetBool(name, "fuzz", &bv, NULL), "FMOptionsGetBool", name); break;
  case 3:
    expect(FMOptionsGetString(name, "fuzz", sv, sizeof(sv), NULL), "FMOptionsGetString", name);
    if (strnlen(sv, sizeof(sv)) == sizeof(sv)) fm_fuzz_fail("FMOptionsGetString(\"%s\") overran its buffer", name);
    break;
  case 4:
    expect(FMOptionsGetIntArray(name, "fuzz", arr, &n, NULL), "FMOptionsGetIntArray", name);
    if (n < 0 || n > 8) fm_fuzz_fail("FMOptionsGetIntArray(\"%s\") says %d values in a buffer of 8", name, n);
    break;
  default: expect(FMOptionsGetEnum_Private(name, "fuzz", list, &ev, NULL), "FMOptionsGetEnum_Private", name); break;
  }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  char *buf = malloc(size + 1), *copy = malloc(size + 1), *part[3] = {NULL, NULL, NULL}, *argvbuf[66], **av = argvbuf, *save = NULL, *names[16];
  size_t cut[2] = {size, size};
  int ac = 1, nn = 0, k = 0;
  FMErrorCode e;
  if (!buf || !copy) fm_fuzz_fail("out of memory");
  memcpy(buf, data, size);
  buf[size] = '\0';
  /* An input asking for MPI_Abort on the first error gets it: not what is tested here. */
  for (char *p = buf; (p = memmem(p, size - (size_t)(p - buf), "error_abort", 11)); p++) p[6] = 'x';
  memcpy(copy, buf, size + 1);
  for (size_t i = 0; i < size && k < 2; i++)
    if (!buf[i]) cut[k++] = i;
  if (fm_fuzz_write(path, (const uint8_t *)copy, cut[0])) fm_fuzz_fail("cannot write \"%s\"", path);
  part[1] = cut[0] < size ? buf + cut[0] + 1 : NULL;
  part[2] = cut[1] < size ? buf + cut[1] + 1 : NULL;
  /* FM_OPTIONS through one static buffer: setenv would keep every old value (the driver's leak check) */
  snprintf(envbuf, sizeof(envbuf), "FM_OPTIONS=%s", part[1] ? part[1] : "");
  if (!env_set) putenv(envbuf), env_set = 1;
  argvbuf[0] = (char *)"fuzz_options";
  if (part[2])
    for (char *t = strtok_r(part[2], " \t\r\n", &save); t && ac < 64; t = strtok_r(NULL, " \t\r\n", &save)) argvbuf[ac++] = t;
  argvbuf[ac] = NULL;
  FMPushErrorHandler(FM_ERROR_HANDLER_SILENT);
  e = FMInitialize(&ac, &av, path, NULL);
  if (e) {
    if ((e != FM_ERR_FILE && e != FM_ERR_OPT && e != FM_ERR_ARG_WRONG && e != FM_ERR_ARG_OUTOFRANGE) || !FMGetLastErrorMessage()[0])
      fm_fuzz_fail("FMInitialize returned %s: %s", FMErrorString(e), FMGetLastErrorMessage());
    FMFinalize();
    free(buf);
    free(copy);
    return 0;
  }
  FMPushErrorHandler(FM_ERROR_HANDLER_SILENT); /* -fm_error_abort in the input must not abort */
  /* The option names of the input */
  memcpy(buf, copy, size + 1);
  for (size_t i = 0; i + 1 < size && nn < 16; i++)
    if ((i == 0 || isspace((unsigned char)buf[i - 1]) || !buf[i - 1]) && buf[i] == '-' && isalpha((unsigned char)buf[i + 1])) {
      size_t j = i;
      while (j < size && buf[j] && !isspace((unsigned char)buf[j]) && buf[j] != '#') j++;
      names[nn++] = buf + i;
      if (j < size) buf[j] = '\0', i = j;
    }
  for (int i = 0; i < nn; i++)
    if (strlen(names[i]) < 256) read_back(names[i]);
  FMOptionsSetValue("-options_left", "0");
  FMFinalize();
  free(buf);
  free(copy);
  return 0;
}
