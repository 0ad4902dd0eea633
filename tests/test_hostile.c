/*
 * test_hostile - hostile and corrupt files, and sizes that cannot be addressed.
 *
 * 1. The reproducers of loader defects found by fuzzing (tests/data/repro/, each once made a
 *    loader overflow a buffer, dereference NULL, overflow an int or hang) must each fail with
 *    FM_ERR_HDF5 and a message naming what is wrong: FMMaskLoad for the mask-* / maskload-*
 *    files, FMTraceLoad_Private (fmtrace's reader) for the fmtrace-* / trace-* files.
 * 2. Files written here with the HDF5 C API: string attributes as h5py writes them (variable-
 *    length UTF-8, fixed-length NULLPAD UTF-8, fixed-length SPACEPAD ASCII) read back as the
 *    strings they hold (FMMaskSave accepts the file as a flashmask file, FMTraceLoad_Private
 *    reports "created"); a mask group whose mask_heads attribute is absurd next to datasets of
 *    another shape fails on the layout, not on memory; a dataset whose stored bytes are fewer
 *    than its shape needs is refused.
 * 3. FMMaskSetSizes(INT_MAX, INT_MAX, 1), mask_heads * seqlen_k above FM_MASK_MAX_ENTRIES and
 *    a block size of INT_MAX are named errors (FM_ERR_ARG_SIZ / FM_ERR_ARG_OUTOFRANGE), and a
 *    mask of block FM_MASK_MAX_SEQLEN sets up with density and sparsity in [0, 1].
 *
 * Usage: test_hostile DATADIR TMPDIR   (one rank; DATADIR holds the repro/ files)
 */
#include "fmtest.h"
#include <flashmask/private/fmimpl.h>
#include <flashmask/private/fmtracing.h>
#include <limits.h>
#if FM_HAVE_HDF5
#include <hdf5.h>
#endif

#if !FM_HAVE_HDF5
FMT_SKIP_MAIN("built without HDF5")
#else

static char datadir[1024], tmpdir[1024];

/* FMMaskLoad of DATADIR/repro/file, group name, must fail with FM_ERR_HDF5 naming substr. */
static void mask_repro(FMContext ctx, const char *file, const char *name, const char *substr)
{
  char path[1200];
  FMMask m = NULL;
  FMErrorCode e;
  snprintf(path, sizeof(path), "%s/repro/%s", datadir, file);
  e = FMMaskLoad(ctx, path, name, &m);
  FMT_CHECK(e == FM_ERR_HDF5, "FMMaskLoad(%s) returned %s, expected FM_ERR_HDF5 (message: %s)", file, FMErrorString(e), e ? FMGetLastErrorMessage() : "");
  if (e == FM_ERR_HDF5) FMT_CHECK(fmt_msg_has(substr), "FMMaskLoad(%s): message \"%s\" does not mention \"%s\"", file, FMGetLastErrorMessage(), substr);
  FMT_CHECK(m == NULL, "FMMaskLoad(%s) failed but returned a mask", file);
  FMMaskDestroy(&m);
}

/* FMTraceLoad_Private of DATADIR/repro/file must fail with FM_ERR_HDF5 naming substr. */
static void trace_repro(const char *file, const char *substr)
{
  char path[1200];
  FMTraceData td;
  FMErrorCode e;
  snprintf(path, sizeof(path), "%s/repro/%s", datadir, file);
  e = FMTraceLoad_Private(path, NULL, &td);
  FMT_CHECK(e == FM_ERR_HDF5, "FMTraceLoad_Private(%s) returned %s, expected FM_ERR_HDF5 (message: %s)", file, FMErrorString(e),
            e ? FMGetLastErrorMessage() : "");
  if (e == FM_ERR_HDF5)
    FMT_CHECK(fmt_msg_has(substr), "FMTraceLoad_Private(%s): message \"%s\" does not mention \"%s\"", file, FMGetLastErrorMessage(), substr);
  if (!e) FMTraceDataFree_Private(&td);
}

/* A string type as h5py writes them: variable-length (vlen), or fixed of size n with pad. */
static hid_t str_type(int vlen, size_t n, H5T_str_t pad, H5T_cset_t cset)
{
  hid_t t = H5Tcopy(H5T_C_S1);
  H5Tset_size(t, vlen ? H5T_VARIABLE : n);
  if (!vlen) H5Tset_strpad(t, pad);
  H5Tset_cset(t, cset);
  return t;
}

static void attr_str(hid_t obj, const char *name, int vlen, H5T_str_t pad, H5T_cset_t cset, const char *val)
{
  hid_t sp = H5Screate(H5S_SCALAR), t, a;
  size_t n = strlen(val) + 3; /* fixed: padded past the value */
  char buf[256];
  t = str_type(vlen, n, pad, cset);
  a = H5Acreate2(obj, name, t, sp, H5P_DEFAULT, H5P_DEFAULT);
  if (vlen) {
    const char *p = val;
    H5Awrite(a, t, &p);
  } else {
    memset(buf, pad == H5T_STR_SPACEPAD ? ' ' : '\0', sizeof(buf));
    memcpy(buf, val, strlen(val));
    H5Awrite(a, t, buf);
  }
  H5Aclose(a);
  H5Tclose(t);
  H5Sclose(sp);
}

/* int64 scalar attribute (h5py's default integer type). */
static void attr_i64(hid_t obj, const char *name, long long v)
{
  hid_t sp = H5Screate(H5S_SCALAR), a = H5Acreate2(obj, name, H5T_STD_I64LE, sp, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_LLONG, &v);
  H5Aclose(a);
  H5Sclose(sp);
}

/* An int32 [h][w] dataset with every value v; with alloc_late the storage is never written. */
static void dset_i32(hid_t g, const char *name, int h, int w, int v, int alloc_late)
{
  hsize_t d[2] = {(hsize_t)h, (hsize_t)w};
  hid_t sp = H5Screate_simple(2, d, NULL), pl = H5Pcreate(H5P_DATASET_CREATE), ds;
  if (alloc_late) {
    hsize_t c[2] = {1, (hsize_t)w};
    H5Pset_chunk(pl, 2, c);
  }
  ds = H5Dcreate2(g, name, H5T_STD_I32LE, sp, H5P_DEFAULT, pl, H5P_DEFAULT);
  if (!alloc_late) {
    int *buf = malloc(sizeof(int) * (size_t)h * w);
    for (size_t i = 0; i < (size_t)h * w; i++) buf[i] = v;
    H5Dwrite(ds, H5T_NATIVE_INT, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
    free(buf);
  }
  H5Dclose(ds);
  H5Pclose(pl);
  H5Sclose(sp);
}

/* /masks/<name> as h5py would write it: int64 attributes, vlen UTF-8 type string. */
static hid_t h5py_mask(hid_t f, const char *name, int Sq, int Sk, int H)
{
  hid_t masks = H5Lexists(f, "masks", H5P_DEFAULT) > 0 ? H5Gopen2(f, "masks", H5P_DEFAULT) : H5Gcreate2(f, "masks", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  hid_t g = H5Gcreate2(masks, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Gclose(masks);
  attr_str(g, "type", 1, H5T_STR_NULLTERM, H5T_CSET_UTF8, "bounds");
  attr_i64(g, "seqlen_q", Sq);
  attr_i64(g, "seqlen_k", Sk);
  attr_i64(g, "mask_heads", H);
  attr_i64(g, "causal", 0);
  attr_i64(g, "present", 1);
  attr_i64(g, "block", 4);
  return g;
}

static void strings_and_layout(FMContext ctx)
{
  static const struct { int vlen; H5T_str_t pad; H5T_cset_t cset; const char *what; } kinds[] = {
    {1, H5T_STR_NULLTERM, H5T_CSET_UTF8, "variable-length UTF-8"},
    {1, H5T_STR_NULLTERM, H5T_CSET_ASCII, "variable-length ASCII"},
    {0, H5T_STR_NULLPAD, H5T_CSET_UTF8, "fixed-length NULLPAD UTF-8"},
    {0, H5T_STR_SPACEPAD, H5T_CSET_ASCII, "fixed-length SPACEPAD ASCII"},
  };
  char path[1200];
  for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++) {
    hid_t f, g;
    FMMask m = NULL;
    FMErrorCode e;
    snprintf(path, sizeof(path), "%s/h5py_%zu.h5", tmpdir, k);
    f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    attr_str(f, "format", kinds[k].vlen, kinds[k].pad, kinds[k].cset, "flashmask");
    attr_i64(f, "format_version", 1);
    g = h5py_mask(f, "m", 8, 8, 1);
    dset_i32(g, "lts", 1, 8, 8, 0);
    H5Gclose(g);
    H5Fclose(f);
    e = FMMaskLoad(ctx, path, "m", &m);
    FMT_CHECK(e == FM_SUCCESS, "h5py-style file (%s strings): FMMaskLoad returned %s: %s", kinds[k].what, FMErrorString(e), e ? FMGetLastErrorMessage() : "");
    /* FMMaskSave checks the root attribute format: it must read "flashmask", not "(unreadable)". */
    if (!e) {
      e = FMMaskSave(m, path, "again");
      FMT_CHECK(e == FM_SUCCESS, "h5py-style file (%s format attribute): FMMaskSave returned %s: %s", kinds[k].what, FMErrorString(e),
                e ? FMGetLastErrorMessage() : "");
    }
    FMMaskDestroy(&m);
  }
  /* A format attribute that is some other string is still refused, naming what it holds. */
  {
    hid_t f;
    FMMask m = NULL;
    snprintf(path, sizeof(path), "%s/other.h5", tmpdir);
    f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    attr_str(f, "format", 1, H5T_STR_NULLTERM, H5T_CSET_UTF8, "netcdf4");
    H5Fclose(f);
    FMT_CALL(FMMaskCreate(ctx, &m));
    FMT_CALL(FMMaskSetSizes(m, 8, 8, 1));
    FMT_CALL(FMMaskSetUp(m));
    FMT_EXPECT_ERR(FMMaskSave(m, path, "x"), FM_ERR_HDF5, "found \"netcdf4\"");
    FMMaskDestroy(&m);
  }
  /* mask_heads absurd next to datasets of [1][8]: the layout is named, nothing huge allocated. */
  {
    hid_t f, g;
    FMMask m = NULL;
    snprintf(path, sizeof(path), "%s/layout.h5", tmpdir);
    f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    g = h5py_mask(f, "heads", 8, 8, 1 << 25);
    dset_i32(g, "lts", 1, 8, 8, 0);
    H5Gclose(g);
    g = h5py_mask(f, "toolarge", 8, 1 << 20, 1 << 20);
    H5Gclose(g);
    g = h5py_mask(f, "unstored", 8, 1000, 4);
    dset_i32(g, "lts", 4, 1000, 0, 1);
    H5Gclose(g);
    H5Fclose(f);
    FMT_EXPECT_ERR(FMMaskLoad(ctx, path, "heads", &m), FM_ERR_HDF5, "expected [33554432][8] = [mask_heads][seqlen_k]");
    FMT_EXPECT_ERR(FMMaskLoad(ctx, path, "toolarge", &m), FM_ERR_HDF5, "FM_MASK_MAX_ENTRIES");
    FMT_EXPECT_ERR(FMMaskLoad(ctx, path, "unstored", &m), FM_ERR_HDF5, "stores 0 bytes");
  }
  /* A trace whose created attribute is a variable-length UTF-8 string: read as such. */
  {
    hid_t f, g, sp, ft, d;
    hsize_t one = 1;
    FMTraceEvent ev;
    FMTraceData td;
    FMErrorCode e;
    memset(&ev, 0, sizeof(ev));
    ev.t_end = 1;
    ev.peer = ev.chunk = -1;
    snprintf(path, sizeof(path), "%s/trace.h5", tmpdir);
    f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
    attr_str(f, "created", 1, H5T_STR_NULLTERM, H5T_CSET_UTF8, "2026-12-01T10:00:00+0000");
    g = H5Gcreate2(f, "traces", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Gclose(g);
    g = H5Gcreate2(f, "traces/r", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    sp = H5Screate_simple(1, &one, NULL);
    ft = FMTraceEventType_Private(1);
    d = H5Dcreate2(g, "events", ft, sp, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    H5Tclose(ft);
    ft = FMTraceEventType_Private(0);
    H5Dwrite(d, ft, H5S_ALL, H5S_ALL, H5P_DEFAULT, &ev);
    H5Tclose(ft);
    H5Dclose(d);
    H5Sclose(sp);
    H5Gclose(g);
    H5Fclose(f);
    e = FMTraceLoad_Private(path, NULL, &td);
    FMT_CHECK(e == FM_SUCCESS, "trace with a vlen created attribute: FMTraceLoad_Private returned %s: %s", FMErrorString(e), e ? FMGetLastErrorMessage() : "");
    if (!e) {
      FMT_CHECK(!strcmp(td.created, "2026-12-01T10:00:00+0000"), "vlen created attribute read as \"%s\"", td.created);
      FMT_CHECK(td.n == 1 && td.nranks == 1, "trace read with %zu events and %d ranks, expected 1 and 1", td.n, td.nranks);
      FMTraceDataFree_Private(&td);
    }
  }
}

static void sizes(FMContext ctx)
{
  FMMask m;
  double d, s;
  FMT_CALL(FMMaskCreate(ctx, &m));
  FMT_EXPECT_ERR(FMMaskSetSizes(m, INT_MAX, INT_MAX, 1), FM_ERR_ARG_SIZ, "seqlen_q");
  FMT_EXPECT_ERR(FMMaskSetSizes(m, 8, INT_MAX, 1), FM_ERR_ARG_SIZ, "seqlen_k");
  FMT_EXPECT_ERR(FMMaskSetSizes(m, 1 << 20, 1 << 20, 1 << 10), FM_ERR_ARG_SIZ, "FM_MASK_MAX_ENTRIES");
  FMT_EXPECT_ERR(FMMaskSetSizes(m, 8, FM_MASK_MAX_ENTRIES / 2 + 1, 2), FM_ERR_ARG_SIZ, "mask_heads");
  FMT_EXPECT_ERR(FMMaskSetBlockSize(m, INT_MAX), FM_ERR_ARG_OUTOFRANGE, "block");
  /* The largest block is one block over everything: density 1 for "full", sparsity 0. */
  FMT_CALL(FMMaskSetSizes(m, 100, 100, 1));
  FMT_CALL(FMMaskSetBlockSize(m, FM_MASK_MAX_SEQLEN));
  FMT_CALL(FMMaskSetType(m, FMMASKCAUSAL));
  FMT_CALL(FMMaskSetUp(m));
  FMT_CALL(FMMaskGetDensity(m, &d, &s));
  FMT_CHECK(fabs(d - 5050.0 / 10000.0) < 1e-12 && s == 0.0, "causal 100 x 100 with one block: density %g sparsity %g, expected 0.505 and 0", d, s);
  FMMaskDestroy(&m);
}

int main(int argc, char **argv)
{
  FMContext ctx;
  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_hostile DATADIR TMPDIR"));
  if (argc < 3) {
    fprintf(stderr, "usage: test_hostile DATADIR TMPDIR\n");
    FMFinalize();
    return 99;
  }
  snprintf(datadir, sizeof(datadir), "%s", argv[1]);
  snprintf(tmpdir, sizeof(tmpdir), "%s", argv[2]);
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetUp(ctx));
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));

  mask_repro(ctx, "mask-block-intmax.h5", "m", "block");
  mask_repro(ctx, "maskload-summary-overflow-fuzzed.h5", "causal", "(seqlen_q) is 2147483647");
  mask_repro(ctx, "maskload-attr-sized-alloc.h5", "m", "(seqlen_k) is 2147483647");
  trace_repro("fmtrace-ranks-2d.h5", "ranks is not a one-dimensional compound dataset");
  trace_repro("fmtrace-huge-rank.h5", "FM_TRACE_MAX_RANKS");
  trace_repro("fmtrace-rank-intmax.h5", "has rank 2147483647");
  trace_repro("trace-rows-calloc-null-fuzzed.h5", "member 8 of its compound type");
  trace_repro("trace-print-summary-timeout.h5", "FM_TRACE_MAX_RANKS");

  strings_and_layout(ctx);
  sizes(ctx);

  FMT_CALL(FMContextDestroy(&ctx));
  FMT_CALL(FMFinalize());
  if (fmt_failures) fprintf(stderr, "test_hostile: %d failure(s)\n", fmt_failures);
  else printf("test_hostile: all checks passed\n");
  return fmt_failures ? 1 : 0;
}
#endif
