/*
 * fuzz_mask.c - fuzz target of the mask loader: the input is written to a temporary file and
 * every group under /masks (at most 4) is loaded with FMMaskLoad. Invariants: a failed load
 * returns a named error (FM_ERR_HDF5, FM_ERR_FILE, FM_ERR_ARG_OUTOFRANGE or FM_ERR_ARG_WRONG,
 * never FM_ERR_MEM or FM_ERR_LIB) with a message and no mask; a loaded mask has sizes within
 * the FM_MASK_MAX_* limits and a density and block sparsity in [0, 1]; no HDF5 object is
 * left open. See fuzz.h.
 */
#include "fuzz.h"
#include <flashmask.h>
#include <hdf5.h>
#include <math.h>
#include <string.h>

const char *fm_fuzz_target = "mask";
static FMContext ctx;
static char path[512];

static void finish(void)
{
  FMContextDestroy(&ctx);
  FMFinalize();
  unlink(path);
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
  (void)argc;
  (void)argv;
  if (FMInitialize(NULL, NULL, NULL, NULL) || FMPushErrorHandler(FM_ERROR_HANDLER_SILENT)) return 1;
  if (FMContextCreate(MPI_COMM_WORLD, &ctx) || FMContextSetBackend(ctx, FM_BACKEND_CPU) || FMContextSetUp(ctx)) return 1;
  fm_fuzz_tmpname(path, sizeof(path), ".h5");
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  atexit(finish);
  return 0;
}

void FMFuzzQuiesce(void) { H5garbage_collect(); }

typedef struct {
  int n;
  char names[4][64];
} Names;

static herr_t name_cb(hid_t g, const char *name, const H5L_info_t *info, void *data)
{
  Names *nm = (Names *)data;
  (void)g;
  (void)info;
  if (strlen(name) < sizeof(nm->names[0])) snprintf(nm->names[nm->n++], sizeof(nm->names[0]), "%s", name);
  return nm->n >= 4;
}

static void load(const char *name)
{
  FMMask m = NULL;
  FMErrorCode e = FMMaskLoad(ctx, path, name, &m);
  if (e) {
    if (e != FM_ERR_HDF5 && e != FM_ERR_FILE && e != FM_ERR_ARG_OUTOFRANGE && e != FM_ERR_ARG_WRONG)
      fm_fuzz_fail("FMMaskLoad(\"%s\") returned %s: %s", name, FMErrorString(e), FMGetLastErrorMessage());
    if (!FMGetLastErrorMessage()[0]) fm_fuzz_fail("FMMaskLoad(\"%s\") returned %s without a message", name, FMErrorString(e));
    if (m) fm_fuzz_fail("FMMaskLoad(\"%s\") failed but returned a mask", name);
    return;
  }
  {
    int sq, sk, h;
    double d, s;
    if (FMMaskGetSizes(m, &sq, &sk, &h) || FMMaskGetDensity(m, &d, &s)) fm_fuzz_fail("a loaded mask cannot be queried: %s", FMGetLastErrorMessage());
    if (sq < 1 || sk < 1 || h < 1 || sq > FM_MASK_MAX_SEQLEN || sk > FM_MASK_MAX_SEQLEN || (long long)h * sk > FM_MASK_MAX_ENTRIES)
      fm_fuzz_fail("a loaded mask has sizes %d, %d, %d", sq, sk, h);
    if (!(d >= 0 && d <= 1 && s >= 0 && s <= 1)) fm_fuzz_fail("a loaded mask has density %g and sparsity %g; expected both in [0, 1]", d, s);
  }
  FMMaskDestroy(&m);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
  Names nm;
  hid_t f, g;
  memset(&nm, 0, sizeof(nm));
  if (fm_fuzz_write(path, data, size)) fm_fuzz_fail("cannot write \"%s\"", path);
  /* The group names, read here with HDF5 (the loader lists them itself only when one is missing). */
  f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (f >= 0) {
    g = H5Lexists(f, "masks", H5P_DEFAULT) > 0 ? H5Gopen2(f, "masks", H5P_DEFAULT) : -1;
    if (g >= 0) {
      H5Literate(g, H5_INDEX_NAME, H5_ITER_INC, NULL, name_cb, &nm);
      H5Gclose(g);
    }
    H5Fclose(f);
  }
  H5Eclear2(H5E_DEFAULT);
  if (!nm.n) snprintf(nm.names[nm.n++], sizeof(nm.names[0]), "m");
  for (int k = 0; k < nm.n; k++)
    if (nm.names[k][0] && !strchr(nm.names[k], '/') && strcmp(nm.names[k], ".") && strcmp(nm.names[k], "..")) load(nm.names[k]);
  if (H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL) > 0)
    fm_fuzz_fail("%lld HDF5 objects left open after an input", (long long)H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL));
  return 0;
}
