/*
 * test_hdf5 - FMMaskSave / FMMaskLoad.
 *
 * Saves several masks (a causal_document with explicit documents, a global_sliding_window,
 * a per-head "bounds" mask with all four vectors drawn at random, a "bounds" mask with
 * seqlen_q != seqlen_k and the causal triangle, a plain "causal" one with seqlen_q != seqlen_k
 * and no vectors at all, and a group that is saved twice to check replacement) to one file,
 * loads them back and compares sizes, flags, block size, every bound vector of every head,
 * every (head, i, j) entry and the density. The file's root and group attributes are read
 * back with the HDF5 C API. Then files corrupted on purpose (missing dataset, wrong shape,
 * wrong rank, float dataset, missing attribute, out-of-range bounds, start > end, missing
 * group, missing file, not an HDF5 file) must fail with the right code and a message naming
 * the problem on every rank; and FMMaskSave errors (name with '/', mask not set up, a path
 * that cannot be created) must reach every rank with the same code.
 *
 * Usage: test_hdf5 FILE   (FILE is created; FILE.bad.h5 and FILE.txt are written too)
 * Rank 0 prints "H5DUMP <dataset> v0 v1 ..." lines that tests/test_hdf5.sh compares with h5dump.
 */
#include "fmtest.h"
#include <flashmask/private/fmimpl.h>
#include <unistd.h>
#if FM_HAVE_HDF5
#include <hdf5.h>
#endif

static int rank, size;

#if FM_HAVE_HDF5
/* Every (head, i, j) entry, the bound vectors, flags and density of a and b must agree. */
static void compare_masks(const char *what, FMMask a, FMMask b)
{
  int sqa, ska, ha, sqb, skb, hb;
  double da, db, sa, sb;
  FMMaskType tb;
  FMT_CALL(FMMaskGetSizes(a, &sqa, &ska, &ha));
  FMT_CALL(FMMaskGetSizes(b, &sqb, &skb, &hb));
  FMT_CHECK(sqa == sqb && ska == skb && ha == hb, "%s: sizes (%d, %d, %d) loaded as (%d, %d, %d)", what, sqa, ska, ha, sqb, skb, hb);
  if (sqa != sqb || ska != skb || ha != hb) return;
  FMT_CALL(FMMaskGetType(b, &tb));
  FMT_CHECK(!strcmp(tb, FMMASKBOUNDS), "%s: loaded mask has type \"%s\", expected \"bounds\"", what, tb);
  FMT_CHECK(a->block == b->block, "%s: block %d loaded as %d", what, a->block, b->block);
  for (int h = 0; h < ha; h++) {
    const int32_t *va[4], *vb[4];
    int pa, pb;
    FMBool ca, cb;
    FMT_CALL(FMMaskGetBounds(a, h, &va[0], &va[1], &va[2], &va[3], &pa, &ca));
    FMT_CALL(FMMaskGetBounds(b, h, &vb[0], &vb[1], &vb[2], &vb[3], &pb, &cb));
    FMT_CHECK(pa == pb, "%s: present %d loaded as %d", what, pa, pb);
    FMT_CHECK(ca == cb, "%s: causal %d loaded as %d", what, (int)ca, (int)cb);
    for (int v = 0; v < 4; v++) {
      int bad = 0;
      for (int j = 0; j < ska; j++)
        if (va[v][j] != vb[v][j]) {
          if (bad++ < 3) FMT_CHECK(0, "%s: head %d vector %d column %d: %d loaded as %d", what, h, v, j, (int)va[v][j], (int)vb[v][j]);
        }
    }
    for (int i = 0; i < sqa; i++) {
      int bad = 0;
      for (int j = 0; j < ska; j++) {
        FMBool ma, mb;
        FMT_CALL(FMMaskIsMasked(a, h, i, j, &ma));
        FMT_CALL(FMMaskIsMasked(b, h, i, j, &mb));
        if (ma != mb && bad++ < 3) FMT_CHECK(0, "%s: head %d entry (%d, %d): masked %d loaded as %d", what, h, i, j, (int)ma, (int)mb);
      }
    }
  }
  FMT_CALL(FMMaskGetDensity(a, &da, &sa));
  FMT_CALL(FMMaskGetDensity(b, &db, &sb));
  FMT_CHECK(da == db && sa == sb, "%s: density/sparsity %.9f/%.9f loaded as %.9f/%.9f", what, da, sa, db, sb);
  FMT_CHECK(da > 0 && da < 1, "%s: density %.6f; expected a mask that masks something but not everything", what, da);
}

/* Rank 0 prints one vector of a mask head-major, for the h5dump comparison in the .sh. */
static void print_for_h5dump(const char *dset, FMMask m, int v)
{
  int Sk, H;
  FMT_CALL(FMMaskGetSizes(m, NULL, &Sk, &H));
  if (rank) return;
  printf("H5DUMP %s", dset);
  for (int h = 0; h < H; h++) {
    const int32_t *b[4];
    FMT_CALL(FMMaskGetBounds(m, h, &b[0], &b[1], &b[2], &b[3], NULL, NULL));
    for (int j = 0; j < Sk; j++) printf(" %d", (int)b[v][j]);
  }
  printf("\n");
  fflush(stdout);
}

/* Random valid bounds for every head: lts <= lte, uts <= ute in [0, Sq]; vectors in bits. */
static void random_bounds(FMMask m, uint64_t *rs, int Sq, int Sk, int H, int bits)
{
  int32_t *v[4];
  for (int k = 0; k < 4; k++) v[k] = malloc(sizeof(int32_t) * (size_t)Sk);
  for (int h = 0; h < H; h++) {
    for (int j = 0; j < Sk; j++) {
      int a = (int)(fmt_next(rs) % (uint64_t)(Sq + 1)), b = (int)(fmt_next(rs) % (uint64_t)(Sq + 1));
      int c = (int)(fmt_next(rs) % (uint64_t)(Sq + 1)), d = (int)(fmt_next(rs) % (uint64_t)(Sq + 1));
      v[0][j] = a < b ? a : b;
      v[1][j] = a < b ? b : a;
      v[2][j] = c < d ? c : d;
      v[3][j] = c < d ? d : c;
      if (!(bits & FM_BOUND_LTE)) v[1][j] = Sq;
      if (!(bits & FM_BOUND_UTS)) v[2][j] = 0;
    }
    FMT_CALL(FMMaskSetBounds(m, h, (bits & 1) ? v[0] : NULL, (bits & 2) ? v[1] : NULL, (bits & 4) ? v[2] : NULL, (bits & 8) ? v[3] : NULL));
  }
  for (int k = 0; k < 4; k++) free(v[k]);
}

/* ---------------------------------------------------------------- direct HDF5 checks */
static int read_int_attr(hid_t obj, const char *name, int *n, int *vals, int cap)
{
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), s;
  hssize_t np;
  if (a < 0) return -1;
  s = H5Aget_space(a);
  np = H5Sget_simple_extent_npoints(s);
  H5Sclose(s);
  if (np > cap || H5Aread(a, H5T_NATIVE_INT, vals) < 0) { H5Aclose(a); return -1; }
  H5Aclose(a);
  *n = (int)np;
  return 0;
}

static int read_str_attr(hid_t obj, const char *name, char *buf, size_t cap)
{
  hid_t a = H5Aopen(obj, name, H5P_DEFAULT), t, mt;
  int ok;
  if (a < 0) return -1;
  t = H5Aget_type(a);
  if (H5Tget_class(t) != H5T_STRING || H5Tis_variable_str(t) || H5Tget_size(t) >= cap) { H5Tclose(t); H5Aclose(a); return -1; }
  mt = H5Tcopy(H5T_C_S1);
  H5Tset_size(mt, H5Tget_size(t) + 1);
  memset(buf, 0, cap);
  ok = H5Aread(a, mt, buf) >= 0;
  H5Tclose(mt);
  H5Tclose(t);
  H5Aclose(a);
  return ok ? 0 : -1;
}

/* The attributes FMMaskSave wrote, read back independently. */
static void check_file_attrs(const char *path, const int *docs, int ndocs)
{
  hid_t f, g;
  char s[128];
  int n = 0, v[64];
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  FMT_CHECK(f >= 0, "cannot open %s with HDF5", path);
  if (f < 0) return;
  FMT_CHECK(!read_str_attr(f, "format", s, sizeof(s)) && !strcmp(s, "flashmask"), "root attribute format is \"%s\"", s);
  FMT_CHECK(!read_int_attr(f, "format_version", &n, v, 64) && n == 1 && v[0] == 1, "root attribute format_version is %d", v[0]);
  FMT_CHECK(!read_int_attr(f, "mpi_size", &n, v, 64) && n == 1 && v[0] == size, "root attribute mpi_size is %d, expected %d", v[0], size);
  FMT_CHECK(!read_str_attr(f, "library_version", s, sizeof(s)) && !strcmp(s, FMGetVersion()), "root attribute library_version is \"%s\"", s);
  FMT_CHECK(!read_str_attr(f, "created", s, sizeof(s)) && strlen(s) >= 19 && s[4] == '-' && s[10] == 'T', "root attribute created is \"%s\"", s);
  g = H5Gopen2(f, "/masks/cdoc", H5P_DEFAULT);
  FMT_CHECK(g >= 0, "group /masks/cdoc missing");
  if (g >= 0) {
    FMT_CHECK(!read_str_attr(g, "type", s, sizeof(s)) && !strcmp(s, FMMASKCAUSALDOCUMENT), "cdoc attribute type is \"%s\"", s);
    FMT_CHECK(!read_int_attr(g, "docs", &n, v, 64) && n == ndocs && !memcmp(v, docs, sizeof(int) * (size_t)ndocs),
              "cdoc attribute docs has %d values, expected %d", n, ndocs);
    FMT_CHECK(!read_int_attr(g, "causal", &n, v, 64) && v[0] == 1, "cdoc attribute causal is %d", v[0]);
    FMT_CHECK(!read_int_attr(g, "present", &n, v, 64) && v[0] == FM_BOUND_LTS, "cdoc attribute present is %d", v[0]);
    FMT_CHECK(!read_int_attr(g, "block", &n, v, 64) && v[0] == 64, "cdoc attribute block is %d", v[0]);
    FMT_CHECK(H5Lexists(g, "lts", H5P_DEFAULT) > 0, "cdoc has no lts dataset");
    FMT_CHECK(H5Lexists(g, "lte", H5P_DEFAULT) == 0 && H5Lexists(g, "uts", H5P_DEFAULT) == 0 && H5Lexists(g, "ute", H5P_DEFAULT) == 0,
              "cdoc stores vectors that are not present");
    H5Gclose(g);
  }
  g = H5Gopen2(f, "/masks/gsw", H5P_DEFAULT);
  FMT_CHECK(g >= 0, "group /masks/gsw missing");
  if (g >= 0) {
    FMT_CHECK(!read_int_attr(g, "window_left", &n, v, 64) && v[0] == 9, "gsw attribute window_left is %d", v[0]);
    FMT_CHECK(!read_int_attr(g, "window_right", &n, v, 64) && v[0] == 5, "gsw attribute window_right is %d", v[0]);
    FMT_CHECK(!read_int_attr(g, "global_tokens", &n, v, 64) && v[0] == 3, "gsw attribute global_tokens is %d", v[0]);
    H5Gclose(g);
  }
  H5Fclose(f);
}

/* A mask group written by hand; ds_kind per vector: 0 absent, 1 int32 [H][Sk], 2 wrong shape, 3 rank 1, 4 float. */
static void write_group(hid_t f, const char *name, int Sq, int Sk, int H, int causal, int present, const int kind[4], int bad_value,
                        const char *skip_attr)
{
  static const char *vn[4] = {"lts", "lte", "uts", "ute"};
  hid_t g = H5Gcreate2(f, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  const char *an[5] = {"seqlen_q", "seqlen_k", "mask_heads", "causal", "present"};
  int av[5] = {Sq, Sk, H, causal, present};
  for (int k = 0; k < 5; k++) {
    hid_t s, a;
    if (skip_attr && !strcmp(skip_attr, an[k])) continue;
    s = H5Screate(H5S_SCALAR);
    a = H5Acreate2(g, an[k], H5T_STD_I32LE, s, H5P_DEFAULT, H5P_DEFAULT);
    H5Awrite(a, H5T_NATIVE_INT, &av[k]);
    H5Aclose(a);
    H5Sclose(s);
  }
  for (int v = 0; v < 4; v++) {
    hsize_t dims[2] = {(hsize_t)H, (hsize_t)Sk};
    int nd = 2;
    hid_t s, d, ft = H5T_STD_I32LE;
    size_t n;
    int32_t *iv;
    float *fv;
    if (!kind[v]) continue;
    if (kind[v] == 2) dims[1] = (hsize_t)Sk + 1;
    if (kind[v] == 3) { nd = 1; dims[0] = (hsize_t)Sk; }
    if (kind[v] == 4) ft = H5T_IEEE_F32LE;
    n = (size_t)dims[0] * (nd == 2 ? dims[1] : 1);
    iv = malloc(sizeof(int32_t) * n);
    fv = malloc(sizeof(float) * n);
    for (size_t i = 0; i < n; i++) {
      /* starts at Sq/2, ends at Sq: valid unless bad_value */
      iv[i] = (v == 0 || v == 2) ? Sq / 2 : Sq;
      fv[i] = (float)iv[i];
    }
    if (bad_value && v == 0) iv[n / 2] = bad_value;
    s = H5Screate_simple(nd, dims, NULL);
    d = H5Dcreate2(g, vn[v], ft, s, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (kind[v] == 4) H5Dwrite(d, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, fv);
    else H5Dwrite(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, iv);
    H5Dclose(d);
    H5Sclose(s);
    free(iv);
    free(fv);
  }
  H5Gclose(g);
}

static void write_corrupt_file(const char *path)
{
  const int lts_ute[4] = {1, 0, 0, 1}, only_lts[4] = {1, 0, 0, 0}, shape[4] = {2, 0, 0, 0}, rank1[4] = {3, 0, 0, 0}, flt[4] = {4, 0, 0, 0},
            all4[4] = {1, 1, 1, 1};
  hid_t f, g;
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
  f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  g = H5Gcreate2(f, "masks", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Gclose(g);
  write_group(f, "/masks/good", 40, 64, 2, 1, FM_BOUND_LTS | FM_BOUND_UTE, lts_ute, 0, NULL);
  write_group(f, "/masks/missing_ds", 40, 64, 1, 0, FM_BOUND_LTS | FM_BOUND_UTE, only_lts, 0, NULL);
  write_group(f, "/masks/bad_shape", 40, 64, 1, 0, FM_BOUND_LTS, shape, 0, NULL);
  write_group(f, "/masks/bad_rank", 40, 64, 1, 0, FM_BOUND_LTS, rank1, 0, NULL);
  write_group(f, "/masks/float_ds", 40, 64, 1, 0, FM_BOUND_LTS, flt, 0, NULL);
  write_group(f, "/masks/no_seqlen_k", 40, 64, 1, 0, FM_BOUND_LTS, only_lts, 0, "seqlen_k");
  write_group(f, "/masks/out_of_range", 40, 64, 1, 0, FM_BOUND_LTS, only_lts, 45, NULL);
  write_group(f, "/masks/negative", 40, 64, 1, 0, FM_BOUND_LTS, only_lts, -3, NULL);
  write_group(f, "/masks/start_gt_end", 40, 64, 1, 0, 15, all4, 39, NULL); /* lts = 39 > lte = ... set below */
  /* start_gt_end: make one lte smaller than its lts */
  {
    hid_t d = H5Dopen2(f, "/masks/start_gt_end/lte", H5P_DEFAULT), s = H5Dget_space(d), ms;
    hsize_t off[2] = {0, 32}, cnt[2] = {1, 1};
    int32_t val = 10;
    H5Sselect_hyperslab(s, H5S_SELECT_SET, off, NULL, cnt, NULL);
    ms = H5Screate_simple(2, cnt, NULL);
    H5Dwrite(d, H5T_NATIVE_INT32, ms, s, H5P_DEFAULT, &val);
    H5Sclose(ms);
    H5Sclose(s);
    H5Dclose(d);
  }
  H5Fclose(f);
}

/* Loading name from path must fail with code and a message containing each of s1, s2 (NULL = any). */
static void expect_load_error(FMContext ctx, const char *path, const char *name, FMErrorCode code, const char *s1, const char *s2)
{
  FMMask m = (FMMask)0x1;
  FMErrorCode e;
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  e = FMMaskLoad(ctx, path, name, &m);
  FMT_CALL(FMPopErrorHandler());
  FMT_CHECK(e == code, "[rank %d] load %s:%s returned %s, expected %s (message: %s)", rank, path, name, FMErrorString(e), FMErrorString(code),
            FMGetLastErrorMessage());
  FMT_CHECK(m == NULL, "[rank %d] load %s:%s failed but left a mask handle", rank, path, name);
  if (e == code) {
    FMT_CHECK(fmt_msg_has(s1), "[rank %d] load %s: message \"%s\" does not mention \"%s\"", rank, name, FMGetLastErrorMessage(), s1);
    FMT_CHECK(fmt_msg_has(s2), "[rank %d] load %s: message \"%s\" does not mention \"%s\"", rank, name, FMGetLastErrorMessage(), s2);
  }
  if (rank == 0 && getenv("FMTEST_VERBOSE")) printf("expected error for %s: %s\n", name, FMGetLastErrorMessage());
}

static void expect_save_error(FMMask m, const char *path, const char *name, FMErrorCode code, const char *s1)
{
  FMErrorCode e;
  FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
  e = FMMaskSave(m, path, name);
  FMT_CALL(FMPopErrorHandler());
  /* rank 0 writes: a file error is its code there and FM_ERR_COLLECTIVE, carrying its message, elsewhere */
  FMT_CHECK(e == code || (rank != 0 && e == FM_ERR_COLLECTIVE && (code == FM_ERR_FILE || code == FM_ERR_HDF5)),
            "[rank %d] save %s:%s returned %s, expected %s (message: %s)", rank, path, name, FMErrorString(e), FMErrorString(code),
            FMGetLastErrorMessage());
  if (e != FM_SUCCESS) FMT_CHECK(fmt_msg_has(s1), "[rank %d] save %s: message \"%s\" does not mention \"%s\"", rank, name, FMGetLastErrorMessage(), s1);
}

/* Everything with HDF5: round trips, attributes, save errors, corrupted files. */
static void run_all(FMContext ctx, const char *path, uint64_t rs)
{
  FMMask cdoc, gsw, perhead, rect, causal, tmp, ld;
  char bad[1024], txt[1024], nodir[1024];
  const int docs[3] = {100, 60, 96};

  snprintf(bad, sizeof(bad), "%s.bad.h5", path);
  snprintf(txt, sizeof(txt), "%s.txt", path);
  snprintf(nodir, sizeof(nodir), "%s.nodir/sub/x.h5", path);
  if (!rank) {
    unlink(path);
    unlink(bad);
    FILE *fp = fopen(txt, "w");
    if (fp) { fputs("not an HDF5 file\n", fp); fclose(fp); }
  }
  MPI_Barrier(MPI_COMM_WORLD);

  /* 1. causal_document with explicit documents, block 64; saved after a decoy under the same name */
  FMT_CALL(FMMaskCreate(ctx, &tmp));
  FMT_CALL(FMMaskSetSizes(tmp, 32, 32, 1));
  FMT_CALL(FMMaskSetType(tmp, FMMASKSLIDINGWINDOW));
  FMT_CALL(FMMaskSetUp(tmp));
  FMT_CALL(FMMaskSave(tmp, path, "cdoc"));
  FMT_CALL(FMMaskCreate(ctx, &cdoc));
  FMT_CALL(FMMaskSetSizes(cdoc, 256, 256, 1));
  FMT_CALL(FMMaskSetType(cdoc, FMMASKCAUSALDOCUMENT));
  FMT_CALL(FMMaskSetDocuments(cdoc, 3, docs));
  FMT_CALL(FMMaskSetBlockSize(cdoc, 64));
  FMT_CALL(FMMaskSetUp(cdoc));
  FMT_CALL(FMMaskSave(cdoc, path, "cdoc"));

  /* 2. global_sliding_window: parameters as attributes */
  FMT_CALL(FMMaskCreate(ctx, &gsw));
  FMT_CALL(FMMaskSetSizes(gsw, 77, 77, 1));
  FMT_CALL(FMMaskSetType(gsw, FMMASKGLOBALSLIDINGWINDOW));
  FMT_CALL(FMMaskSetWindow(gsw, 9, 5));
  FMT_CALL(FMMaskSetGlobalTokens(gsw, 3));
  FMT_CALL(FMMaskSetUp(gsw));
  FMT_CALL(FMMaskSave(gsw, path, "gsw"));

  /* 3. per-head bounds, 2 heads, all four vectors, random */
  FMT_CALL(FMMaskCreate(ctx, &perhead));
  FMT_CALL(FMMaskSetSizes(perhead, 50, 50, 2));
  FMT_CALL(FMMaskSetType(perhead, FMMASKBOUNDS));
  random_bounds(perhead, &rs, 50, 50, 2, 15);
  FMT_CALL(FMMaskSetBlockSize(perhead, 16));
  FMT_CALL(FMMaskSetUp(perhead));
  FMT_CALL(FMMaskSave(perhead, path, "perhead"));

  /* 4. seqlen_q != seqlen_k, causal, lts + lte, 3 heads */
  FMT_CALL(FMMaskCreate(ctx, &rect));
  FMT_CALL(FMMaskSetSizes(rect, 37, 90, 3));
  FMT_CALL(FMMaskSetType(rect, FMMASKBOUNDS));
  FMT_CALL(FMMaskSetCausal(rect, FM_TRUE));
  random_bounds(rect, &rs, 37, 90, 3, FM_BOUND_LTS | FM_BOUND_LTE);
  FMT_CALL(FMMaskSetUp(rect));
  FMT_CALL(FMMaskSave(rect, path, "rect"));

  /* 5. causal with seqlen_q != seqlen_k: no vectors at all */
  FMT_CALL(FMMaskCreate(ctx, &causal));
  FMT_CALL(FMMaskSetSizes(causal, 20, 45, 1));
  FMT_CALL(FMMaskSetType(causal, FMMASKCAUSAL));
  FMT_CALL(FMMaskSetUp(causal));
  FMT_CALL(FMMaskSave(causal, path, "causal_rect"));

  print_for_h5dump("/masks/cdoc/lts", cdoc, 0);
  print_for_h5dump("/masks/perhead/lts", perhead, 0);
  print_for_h5dump("/masks/perhead/ute", perhead, 3);
  print_for_h5dump("/masks/rect/lte", rect, 1);

  {
    struct { const char *name; FMMask m; } all[5] = {{"cdoc", cdoc}, {"gsw", gsw}, {"perhead", perhead}, {"rect", rect}, {"causal_rect", causal}};
    for (int k = 0; k < 5; k++) {
      FMT_CALL(FMMaskLoad(ctx, path, all[k].name, &ld));
      compare_masks(all[k].name, all[k].m, ld);
      FMT_CALL(FMMaskDestroy(&ld));
    }
  }
  if (!rank) check_file_attrs(path, docs, 3);
  /* the root attributes describe the file's creation: a later save keeps them (it replaced
     created and mpi_size, so a trace's file claimed the last mask save's time and size) */
  if (!rank) {
    hid_t f = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT), t = H5Tcopy(H5T_C_S1), sp = H5Screate(H5S_SCALAR), a;
    const char *old = "2000-01-01T00:00:00+0000";
    int big = 999;
    H5Tset_size(t, strlen(old) + 1);
    H5Adelete(f, "created");
    H5Adelete(f, "mpi_size");
    a = H5Acreate2(f, "created", t, sp, H5P_DEFAULT, H5P_DEFAULT); H5Awrite(a, t, old); H5Aclose(a);
    a = H5Acreate2(f, "mpi_size", H5T_NATIVE_INT, sp, H5P_DEFAULT, H5P_DEFAULT); H5Awrite(a, H5T_NATIVE_INT, &big); H5Aclose(a);
    H5Sclose(sp); H5Tclose(t); H5Fclose(f);
  }
  FMT_CALL(FMMaskSave(causal, path, "causal_again"));
  if (!rank) {
    hid_t f = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
    char s[64] = "";
    int n = 0, v[4] = {0};
    FMT_CHECK(!read_str_attr(f, "created", s, sizeof(s)) && !strcmp(s, "2000-01-01T00:00:00+0000"), "a second save rewrote created: \"%s\"", s);
    FMT_CHECK(!read_int_attr(f, "mpi_size", &n, v, 4) && v[0] == 999, "a second save rewrote mpi_size: %d", v[0]);
    H5Fclose(f);
  }

  /* save errors: every rank gets the same code */
  expect_save_error(cdoc, path, "a/b", FM_ERR_ARG_WRONG, "'/'");
  expect_save_error(cdoc, path, "", FM_ERR_ARG_WRONG, "empty");
  expect_save_error(cdoc, nodir, "cdoc", FM_ERR_FILE, "cannot create");
  expect_save_error(cdoc, txt, "cdoc", FM_ERR_FILE, "not an HDF5 file");
  FMT_CALL(FMMaskSetSizes(tmp, 16, 16, 1)); /* no longer set up */
  expect_save_error(tmp, path, "tmp", FM_ERR_ORDER, "SetUp");
  FMT_CALL(FMMaskDestroy(&tmp));
  /* the file is still intact after the failed saves */
  FMT_CALL(FMMaskLoad(ctx, path, "perhead", &ld));
  compare_masks("perhead (after failed saves)", perhead, ld);
  FMT_CALL(FMMaskDestroy(&ld));

  /* corrupted files: rank 0 writes, every rank loads */
  if (!rank) write_corrupt_file(bad);
  MPI_Barrier(MPI_COMM_WORLD);
  FMT_CALL(FMMaskLoad(ctx, bad, "good", &ld)); /* the hand-written layout itself is readable */
  {
    FMBool mk;
    FMT_CALL(FMMaskIsMasked(ld, 1, 25, 10, &mk)); /* lts = 20 <= 25 */
    FMT_CHECK(mk, "hand-written mask: (25, 10) should be masked");
    FMT_CALL(FMMaskIsMasked(ld, 0, 19, 10, &mk)); /* ute = 40 > 19 >= uts = 0: masked above */
    FMT_CHECK(mk, "hand-written mask: (19, 10) should be masked");
    FMT_CALL(FMMaskDestroy(&ld));
  }
  expect_load_error(ctx, bad, "missing_ds", FM_ERR_HDF5, "/masks/missing_ds/ute", "missing");
  expect_load_error(ctx, bad, "bad_shape", FM_ERR_HDF5, "[1][65]", "expected [1][64]");
  expect_load_error(ctx, bad, "bad_rank", FM_ERR_HDF5, "rank 1", "expected [1][64]");
  expect_load_error(ctx, bad, "float_ds", FM_ERR_HDF5, "/masks/float_ds/lts", "float");
  expect_load_error(ctx, bad, "no_seqlen_k", FM_ERR_HDF5, "seqlen_k", "missing");
  expect_load_error(ctx, bad, "out_of_range", FM_ERR_ARG_OUTOFRANGE, "lts", "45");
  expect_load_error(ctx, bad, "negative", FM_ERR_ARG_OUTOFRANGE, "lts", "-3");
  expect_load_error(ctx, bad, "start_gt_end", FM_ERR_ARG_OUTOFRANGE, "lte", "32");
  expect_load_error(ctx, bad, "nosuch", FM_ERR_HDF5, "/masks/nosuch", "good");
  expect_load_error(ctx, path, "nosuch", FM_ERR_HDF5, "not found", "perhead");
  expect_load_error(ctx, nodir, "cdoc", FM_ERR_FILE, "cannot read", NULL);
  expect_load_error(ctx, txt, "cdoc", FM_ERR_FILE, "HDF5", NULL);
  expect_load_error(ctx, path, "x/y", FM_ERR_ARG_WRONG, "'/'", NULL);

  FMT_CALL(FMMaskDestroy(&cdoc));
  FMT_CALL(FMMaskDestroy(&gsw));
  FMT_CALL(FMMaskDestroy(&perhead));
  FMT_CALL(FMMaskDestroy(&rect));
  FMT_CALL(FMMaskDestroy(&causal));
}
#endif

int main(int argc, char **argv)
{
  FMContext ctx;
  uint64_t rs;
  const char *path;
  int rc;

  FMT_CALL(FMInitialize(&argc, &argv, NULL, "test_hdf5 FILE"));
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  if (argc < 2) {
    if (!rank) fprintf(stderr, "usage: test_hdf5 FILE\n");
    FMFinalize();
    return 99;
  }
  path = argv[1];
  FMT_CALL(FMContextCreate(MPI_COMM_WORLD, &ctx));
  FMT_CALL(FMContextSetUp(ctx));
  rs = 0;
  if (!rank) rs = fmt_seed();
  MPI_Bcast(&rs, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);

#if !FM_HAVE_HDF5
  {
    FMMask m, ld;
    FMT_CALL(FMMaskCreate(ctx, &m));
    FMT_CALL(FMMaskSetSizes(m, 8, 8, 1));
    FMT_CALL(FMMaskSetUp(m));
    FMT_CALL(FMPushErrorHandler(FM_ERROR_HANDLER_SILENT));
    FMT_EXPECT_ERR(FMMaskSave(m, path, "x"), FM_ERR_SUP, "HDF5");
    FMT_EXPECT_ERR(FMMaskLoad(ctx, path, "x", &ld), FM_ERR_SUP, "HDF5");
    FMT_CALL(FMMaskDestroy(&m));
    FMT_CALL(FMContextDestroy(&ctx));
    rc = fmt_finish("test_hdf5");
    FMFinalize();
    if (!rc && !rank) printf("SKIP: built without HDF5 (FM_ERR_SUP checked)\n");
    return rc ? rc : 77;
  }
#else
  run_all(ctx, path, rs);
  FMT_CALL(FMContextDestroy(&ctx));
  {
    int mine = fmt_failures, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    if (any && !mine) fprintf(stderr, "[rank %d] another rank failed\n", rank);
    rc = fmt_finish("test_hdf5");
    if (any && !rc) rc = 1;
  }
  FMT_CALL(FMFinalize());
  return rc;
#endif
}
