/*
 * maskio.c - FMMaskSave / FMMaskLoad: masks in HDF5 files.
 *
 * Layout (conventions.md, "HDF5 files"):
 *   /                attrs: format = "flashmask", format_version = 1, library_version,
 *                    created (ISO 8601 local time), mpi_size
 *   /masks/<name>/   attrs: type, causal, seqlen_q, seqlen_k, mask_heads, block, present
 *                    (FM_BOUND_* bits), seed, and the builder parameters the type uses
 *                    (docs, segments_per_doc, segment_lengths, window_left, window_right,
 *                    global_tokens, prefix, span_start, span_len)
 *                    datasets lts, lte, uts, ute: int32 [mask_heads][seqlen_k], only those
 *                    whose bit is set in present
 *
 * Saving is done by rank 0 with the serial HDF5 API (a mask is replicated on every rank);
 * the outcome is broadcast so every rank returns the same code. Loading is done by every
 * rank; the ranks agree on the outcome before the collective FMMaskSetUp.
 * HDF5's own error-stack printing is switched off around our calls; failures are reported
 * through FMError with the innermost HDF5 message appended.
 */
#include "maskimpl.h"
#include <flashmask/fmconf.h>
#include <stdlib.h>
#include <string.h>

#if FM_HAVE_HDF5
#include <hdf5.h>
#include <errno.h>
#include <time.h>
#include <unistd.h>

#define FM_MASKIO_FORMAT_VERSION 1

static const char *const vec_names[4] = {"lts", "lte", "uts", "ute"};

/* ---------------------------------------------------------------- HDF5 error stack */
/* Silence HDF5's automatic error printing; restore the previous handler afterwards. */
typedef struct {
  H5E_auto2_t func;
  void *data;
} FMH5Quiet;

static void h5_quiet_push(FMH5Quiet *q)
{
  q->func = NULL;
  q->data = NULL;
  H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void h5_quiet_pop(const FMH5Quiet *q) { H5Eset_auto2(H5E_DEFAULT, q->func, q->data); }

/* The innermost (most specific) message of the current HDF5 error stack. */
static herr_t h5_walk_cb(unsigned n, const H5E_error2_t *e, void *ctx)
{
  char *buf = (char *)ctx;
  if (n == 0 && e && e->desc) {
    snprintf(buf, 256, "%s (in %s)", e->desc, e->func_name ? e->func_name : "?");
  }
  return 0;
}

static const char *h5_last_message(char buf[256])
{
  buf[0] = '\0';
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, h5_walk_cb, buf);
  H5Eclear2(H5E_DEFAULT);
  if (!buf[0]) snprintf(buf, 256, "no HDF5 message");
  return buf;
}

/* FMH5Raise(code, fmt, ...): raise with the innermost HDF5 message appended. */
#define FMH5Raise(code, fmt, ...)                                                    \
  do {                                                                               \
    char fm_h5buf_[256];                                                             \
    FMRaise(MPI_COMM_SELF, (code), fmt "; HDF5 says: %s", __VA_ARGS__, h5_last_message(fm_h5buf_)); \
  } while (0)

/* ---------------------------------------------------------------- writing helpers */
/* Remove attribute name of obj if it exists (so it can be rewritten with a new shape). */
static FMErrorCode attr_remove(hid_t obj, const char *name)
{
  htri_t ex = H5Aexists(obj, name);
  if (ex < 0) FMH5Raise(FM_ERR_HDF5, "Cannot query attribute \"%s\"", name);
  if (ex > 0 && H5Adelete(obj, name) < 0) FMH5Raise(FM_ERR_HDF5, "Cannot replace attribute \"%s\"", name);
  return FM_SUCCESS;
}

/* Write an attribute of n values of memory type mtype (file type ftype): scalar when n == 1 and !array. */
static FMErrorCode attr_write(hid_t obj, const char *name, hid_t ftype, hid_t mtype, int n, int array, const void *val)
{
  hid_t space, attr;
  herr_t st;
  FMCall(attr_remove(obj, name));
  if (n == 1 && !array) {
    space = H5Screate(H5S_SCALAR);
  } else {
    hsize_t d = (hsize_t)n;
    space = H5Screate_simple(1, &d, NULL);
  }
  if (space < 0) FMH5Raise(FM_ERR_HDF5, "Cannot create the dataspace of attribute \"%s\"", name);
  attr = H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Sclose(space);
  if (attr < 0) FMH5Raise(FM_ERR_HDF5, "Cannot create attribute \"%s\"", name);
  st = H5Awrite(attr, mtype, val);
  H5Aclose(attr);
  if (st < 0) FMH5Raise(FM_ERR_HDF5, "Cannot write attribute \"%s\"", name);
  return FM_SUCCESS;
}

static FMErrorCode attr_write_int(hid_t obj, const char *name, int v)
{
  FMCall(attr_write(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT, 1, 0, &v));
  return FM_SUCCESS;
}

static FMErrorCode attr_write_ints(hid_t obj, const char *name, int n, const int *v)
{
  if (n <= 0 || !v) return FM_SUCCESS;
  FMCall(attr_write(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT, n, 1, v));
  return FM_SUCCESS;
}

/* A fixed-length, NUL-terminated string attribute (h5dump prints it as a plain string). */
static FMErrorCode attr_write_str(hid_t obj, const char *name, const char *s)
{
  FMErrorCode ierr;
  hid_t t = H5Tcopy(H5T_C_S1);
  if (t < 0) FMH5Raise(FM_ERR_HDF5, "Cannot create the string type of attribute \"%s\"", name);
  if (H5Tset_size(t, strlen(s) + 1) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0) {
    H5Tclose(t);
    FMH5Raise(FM_ERR_HDF5, "Cannot size the string type of attribute \"%s\"", name);
  }
  ierr = attr_write(obj, name, t, t, 1, 0, s);
  H5Tclose(t);
  FMCall(ierr);
  return FM_SUCCESS;
}

/* Root attributes: written (or refreshed) at every save. */
static FMErrorCode write_root_attrs(hid_t file, int mpi_size)
{
  char when[64];
  time_t now = time(NULL);
  struct tm tmv;
  localtime_r(&now, &tmv);
  if (!strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%S%z", &tmv)) snprintf(when, sizeof(when), "unknown");
  FMCall(attr_write_str(file, "format", "flashmask"));
  FMCall(attr_write_int(file, "format_version", FM_MASKIO_FORMAT_VERSION));
  FMCall(attr_write_str(file, "library_version", FMGetVersion()));
  FMCall(attr_write_str(file, "created", when));
  FMCall(attr_write_int(file, "mpi_size", mpi_size));
  return FM_SUCCESS;
}

/* Attributes of /masks/<name>: sizes, flags and the parameters the type uses. */
static FMErrorCode write_mask_attrs(hid_t grp, FMMask m)
{
  unsigned long long seed = (unsigned long long)m->seed;
  int t = FMMaskTypeIndex_Private(m->hdr.type_name);
  FMCall(attr_write_str(grp, "type", m->hdr.type_name ? m->hdr.type_name : FMMASKFULL));
  FMCall(attr_write_int(grp, "causal", m->causal ? 1 : 0));
  FMCall(attr_write_int(grp, "seqlen_q", m->seqlen_q));
  FMCall(attr_write_int(grp, "seqlen_k", m->seqlen_k));
  FMCall(attr_write_int(grp, "mask_heads", m->mask_heads));
  FMCall(attr_write_int(grp, "block", m->block));
  FMCall(attr_write_int(grp, "present", m->present));
  FMCall(attr_write(grp, "seed", H5T_STD_U64LE, H5T_NATIVE_ULLONG, 1, 0, &seed));
  if (t >= 0 && t != FM_MT_BOUNDS) {
    FMMaskParams p;
    FMErrorCode ierr = FM_SUCCESS;
    FMCall(FMMaskGetParams_Private(m, &p));
    if (p.docs) ierr = attr_write_ints(grp, "docs", p.ndocs, p.docs);
    if (!ierr && p.nseg) ierr = attr_write_ints(grp, "segments_per_doc", p.ndocs, p.nseg);
    if (!ierr && p.seglen) ierr = attr_write_ints(grp, "segment_lengths", p.nsegtot, p.seglen);
    if (!ierr && p.window_left >= 0) ierr = attr_write_int(grp, "window_left", p.window_left);
    if (!ierr && p.window_right >= 0) ierr = attr_write_int(grp, "window_right", p.window_right);
    if (!ierr && p.nglobal >= 0) ierr = attr_write_int(grp, "global_tokens", p.nglobal);
    if (!ierr && p.prefix) ierr = attr_write_ints(grp, "prefix", p.nprefix, p.prefix);
    if (!ierr && p.span_start) ierr = attr_write_ints(grp, "span_start", p.nspans, p.span_start);
    if (!ierr && p.span_len) ierr = attr_write_ints(grp, "span_len", p.nspans, p.span_len);
    FMMaskParamsFree_Private(&p);
    FMCall(ierr);
  }
  return FM_SUCCESS;
}

/* One bound vector as an int32 [mask_heads][seqlen_k] dataset. */
static FMErrorCode write_vector(hid_t grp, FMMask m, int v)
{
  hsize_t dims[2] = {(hsize_t)m->mask_heads, (hsize_t)m->seqlen_k};
  hid_t space, dset;
  herr_t st;
  space = H5Screate_simple(2, dims, NULL);
  if (space < 0) FMH5Raise(FM_ERR_HDF5, "Cannot create the dataspace of dataset \"%s\"", vec_names[v]);
  dset = H5Dcreate2(grp, vec_names[v], H5T_STD_I32LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Sclose(space);
  if (dset < 0) FMH5Raise(FM_ERR_HDF5, "Cannot create dataset \"%s\"", vec_names[v]);
  st = H5Dwrite(dset, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, m->bnd[v]);
  H5Dclose(dset);
  if (st < 0) FMH5Raise(FM_ERR_HDF5, "Cannot write dataset \"%s\"", vec_names[v]);
  return FM_SUCCESS;
}

/* Open path read-write if it exists, create it otherwise. */
static FMErrorCode open_for_write(const char *path, hid_t *file)
{
  *file = -1;
  if (access(path, F_OK) == 0) {
#if H5_VERSION_GE(1, 12, 0)
    htri_t is = H5Fis_accessible(path, H5P_DEFAULT);
#else
    htri_t is = H5Fis_hdf5(path);
#endif
    if (is <= 0) {
      H5Eclear2(H5E_DEFAULT);
      FMRaise(MPI_COMM_SELF, FM_ERR_FILE, "Argument 2 (path): \"%s\" exists but is not an HDF5 file; expected an HDF5 file or a new path", path);
    }
    *file = H5Fopen(path, H5F_ACC_RDWR, H5P_DEFAULT);
    if (*file < 0) FMH5Raise(FM_ERR_FILE, "Argument 2 (path): cannot open \"%s\" for writing", path);
  } else {
    *file = H5Fcreate(path, H5F_ACC_EXCL, H5P_DEFAULT, H5P_DEFAULT);
    if (*file < 0) FMH5Raise(FM_ERR_FILE, "Argument 2 (path): cannot create \"%s\" (%s)", path, strerror(errno));
  }
  return FM_SUCCESS;
}

/* Refuse to overwrite a file written by something else under our attribute names. */
static FMErrorCode check_format(hid_t file, const char *path)
{
  htri_t ex = H5Aexists(file, "format");
  if (ex <= 0) return FM_SUCCESS;
  {
    hid_t a = H5Aopen(file, "format", H5P_DEFAULT), t = a >= 0 ? H5Aget_type(a) : -1, mt = -1;
    char buf[64] = "";
    int ok = 0;
    if (t >= 0 && H5Tget_class(t) == H5T_STRING && !H5Tis_variable_str(t) && H5Tget_size(t) < sizeof(buf)) {
      mt = H5Tcopy(H5T_C_S1);
      H5Tset_size(mt, H5Tget_size(t) + 1);
      ok = H5Aread(a, mt, buf) >= 0;
      H5Tclose(mt);
    }
    if (t >= 0) H5Tclose(t);
    if (a >= 0) H5Aclose(a);
    H5Eclear2(H5E_DEFAULT);
    FMCheck(ok && !strcmp(buf, "flashmask"), MPI_COMM_SELF, FM_ERR_HDF5,
            "File \"%s\" has a root attribute format that is not \"flashmask\" (found \"%s\"); refusing to write into it", path,
            ok ? buf : "(unreadable)");
  }
  return FM_SUCCESS;
}

/* Rank 0's part of FMMaskSave. */
static FMErrorCode save_local(FMMask m, const char *path, const char *name, int mpi_size)
{
  hid_t file = -1, masks = -1, grp = -1;
  FMErrorCode ierr;
  FMH5Quiet q;
  h5_quiet_push(&q);
  ierr = open_for_write(path, &file);
  if (!ierr) ierr = check_format(file, path);
  if (!ierr) ierr = write_root_attrs(file, mpi_size);
  if (!ierr) {
    htri_t ex = H5Lexists(file, "masks", H5P_DEFAULT);
    masks = ex > 0 ? H5Gopen2(file, "masks", H5P_DEFAULT) : ex == 0 ? H5Gcreate2(file, "masks", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
    if (masks < 0) {
      char b[256];
      ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_HDF5, "Cannot open or create group /masks in \"%s\"; HDF5 says: %s",
                             path, h5_last_message(b));
    }
  }
  if (!ierr) {
    htri_t ex = H5Lexists(masks, name, H5P_DEFAULT);
    if (ex > 0 && H5Ldelete(masks, name, H5P_DEFAULT) < 0) ex = -1;
    if (ex >= 0) grp = H5Gcreate2(masks, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
    if (grp < 0) {
      char b[256];
      ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_HDF5, "Cannot create group /masks/%s in \"%s\"; HDF5 says: %s",
                             name, path, h5_last_message(b));
    }
  }
  if (!ierr) ierr = write_mask_attrs(grp, m);
  for (int v = 0; v < 4 && !ierr; v++)
    if (m->present & (1 << v)) ierr = write_vector(grp, m, v);
  if (grp >= 0) H5Gclose(grp);
  if (masks >= 0) H5Gclose(masks);
  if (file >= 0 && H5Fclose(file) < 0 && !ierr) {
    char b[256];
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_FILE, "Cannot close (flush) \"%s\"; HDF5 says: %s", path,
                           h5_last_message(b));
  }
  h5_quiet_pop(&q);
  if (ierr) return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
  return FM_SUCCESS;
}

/* ---------------------------------------------------------------- reading helpers */
/* Read an integer attribute (scalar or one element) of the mask group; FM_ERR_HDF5 if absent or wrong. */
static FMErrorCode attr_read_int(hid_t grp, const char *gname, const char *name, int required, int *val)
{
  hid_t a, t, s;
  H5T_class_t cls;
  hssize_t npts;
  herr_t st;
  htri_t ex = H5Aexists(grp, name);
  if (ex <= 0) {
    H5Eclear2(H5E_DEFAULT);
    if (!required) return FM_SUCCESS;
    FMRaise(MPI_COMM_SELF, FM_ERR_HDF5, "Attribute \"%s\" of group %s is missing; expected an integer", name, gname);
  }
  a = H5Aopen(grp, name, H5P_DEFAULT);
  if (a < 0) FMH5Raise(FM_ERR_HDF5, "Cannot open attribute \"%s\" of group %s", name, gname);
  t = H5Aget_type(a);
  s = H5Aget_space(a);
  cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
  npts = s >= 0 ? H5Sget_simple_extent_npoints(s) : -1;
  if (t >= 0) H5Tclose(t);
  if (s >= 0) H5Sclose(s);
  if (cls != H5T_INTEGER || npts != 1) {
    H5Aclose(a);
    H5Eclear2(H5E_DEFAULT);
    FMRaise(MPI_COMM_SELF, FM_ERR_HDF5, "Attribute \"%s\" of group %s is %s with %lld element(s); expected one integer", name, gname,
            cls == H5T_INTEGER ? "an integer" : cls == H5T_FLOAT ? "a float" : cls == H5T_STRING ? "a string" : "not an integer",
            (long long)npts);
  }
  st = H5Aread(a, H5T_NATIVE_INT, val);
  H5Aclose(a);
  if (st < 0) FMH5Raise(FM_ERR_HDF5, "Cannot read attribute \"%s\" of group %s", name, gname);
  return FM_SUCCESS;
}

static const char *class_name(H5T_class_t c)
{
  switch (c) {
  case H5T_INTEGER: return "integer";
  case H5T_FLOAT: return "float";
  case H5T_STRING: return "string";
  case H5T_COMPOUND: return "compound";
  case H5T_ENUM: return "enum";
  case H5T_ARRAY: return "array";
  case H5T_BITFIELD: return "bitfield";
  case H5T_OPAQUE: return "opaque";
  case H5T_REFERENCE: return "reference";
  case H5T_VLEN: return "variable-length";
  default: return "unknown";
  }
}

/* Read dataset gname/vname into buf[H * Sk] after checking its type class and shape. */
static FMErrorCode read_vector(hid_t grp, const char *gname, const char *vname, int H, int Sk, int32_t *buf)
{
  hid_t d, t, s;
  H5T_class_t cls;
  int nd;
  hsize_t dims[8] = {0};
  herr_t st;
  htri_t ex = H5Lexists(grp, vname, H5P_DEFAULT);
  if (ex <= 0) {
    H5Eclear2(H5E_DEFAULT);
    FMRaise(MPI_COMM_SELF, FM_ERR_HDF5, "Dataset %s/%s is missing; the attribute present says it is stored (expected int32 [%d][%d])",
            gname, vname, H, Sk);
  }
  d = H5Dopen2(grp, vname, H5P_DEFAULT);
  if (d < 0) FMH5Raise(FM_ERR_HDF5, "Cannot open %s/%s as a dataset", gname, vname);
  t = H5Dget_type(d);
  s = H5Dget_space(d);
  cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
  nd = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
  if (nd > 0 && nd <= 8) H5Sget_simple_extent_dims(s, dims, NULL);
  if (t >= 0) H5Tclose(t);
  if (s >= 0) H5Sclose(s);
  if (cls != H5T_INTEGER) {
    H5Dclose(d);
    H5Eclear2(H5E_DEFAULT);
    FMRaise(MPI_COMM_SELF, FM_ERR_HDF5, "Dataset %s/%s has element type %s; expected an integer (int32) type", gname, vname, class_name(cls));
  }
  if (nd != 2 || dims[0] != (hsize_t)H || dims[1] != (hsize_t)Sk) {
    char shape[160] = "";
    size_t len = 0;
    if (nd < 0) snprintf(shape, sizeof(shape), "(unreadable)");
    else if (nd == 0) snprintf(shape, sizeof(shape), "scalar");
    for (int k = 0; k < nd && k < 8 && len < sizeof(shape) - 24; k++) len += (size_t)snprintf(shape + len, sizeof(shape) - len, "[%llu]", (unsigned long long)dims[k]);
    H5Dclose(d);
    H5Eclear2(H5E_DEFAULT);
    FMRaise(MPI_COMM_SELF, FM_ERR_HDF5, "Dataset %s/%s has shape %s (rank %d); expected [%d][%d] = [mask_heads][seqlen_k]", gname, vname, shape, nd,
            H, Sk);
  }
  st = H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
  H5Dclose(d);
  if (st < 0) FMH5Raise(FM_ERR_HDF5, "Cannot read dataset %s/%s", gname, vname);
  return FM_SUCCESS;
}

/* Names of the links under /masks, comma separated, for the "not found" message. */
static void list_masks(hid_t file, char *buf, size_t cap)
{
  H5G_info_t gi;
  hid_t mg;
  size_t len = 0;
  buf[0] = '\0';
  if (H5Lexists(file, "masks", H5P_DEFAULT) <= 0 || (mg = H5Gopen2(file, "masks", H5P_DEFAULT)) < 0) return;
  if (H5Gget_info(mg, &gi) >= 0)
    for (hsize_t k = 0; k < gi.nlinks && len + 8 < cap; k++) {
      char nm[128];
      if (H5Lget_name_by_idx(mg, ".", H5_INDEX_NAME, H5_ITER_INC, k, nm, sizeof(nm), H5P_DEFAULT) < 0) break;
      len += (size_t)snprintf(buf + len, cap - len, "%s%s", len ? ", " : "", nm);
      if (len >= cap) { buf[cap - 1] = '\0'; break; }
    }
  H5Gclose(mg);
}

/* Every rank's part of FMMaskLoad: read the file and fill the (created) mask m. */
static FMErrorCode load_local(FMMask m, const char *path, const char *name)
{
  hid_t file = -1, grp = -1;
  char gname[300];
  int Sq = 0, Sk = 0, H = 0, causal = 0, present = 0, block = 128, version = FM_MASKIO_FORMAT_VERSION;
  int32_t *vec[4] = {NULL, NULL, NULL, NULL};
  FMErrorCode ierr = FM_SUCCESS;
  FMH5Quiet q;

  snprintf(gname, sizeof(gname), "/masks/%s", name);
  FMCheck(access(path, R_OK) == 0, MPI_COMM_SELF, FM_ERR_FILE, "Argument 2 (path): cannot read \"%s\" (%s)", path, strerror(errno));
  h5_quiet_push(&q);
  file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  if (file < 0) {
    char b[256];
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_FILE,
                           "Argument 2 (path): cannot open \"%s\" as an HDF5 file; HDF5 says: %s", path, h5_last_message(b));
    goto done;
  }
  if (H5Aexists(file, "format_version") > 0) {
    ierr = attr_read_int(file, "/", "format_version", 1, &version);
    if (!ierr && version > FM_MASKIO_FORMAT_VERSION)
      ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_HDF5,
                             "File \"%s\" has format_version %d; this library reads format_version <= %d", path, version,
                             FM_MASKIO_FORMAT_VERSION);
    if (ierr) goto done;
  }
  H5Eclear2(H5E_DEFAULT);
  {
    htri_t ex = H5Lexists(file, "masks", H5P_DEFAULT);
    if (ex > 0) ex = H5Lexists(file, gname, H5P_DEFAULT);
    if (ex > 0) {
      grp = H5Oopen(file, gname, H5P_DEFAULT);
      if (grp >= 0 && H5Iget_type(grp) != H5I_GROUP) {
        H5Oclose(grp);
        grp = -1;
      }
    }
    if (grp < 0) {
      char list[512];
      H5Eclear2(H5E_DEFAULT);
      list_masks(file, list, sizeof(list));
      H5Eclear2(H5E_DEFAULT);
      ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_HDF5,
                             "Argument 3 (name): group %s not found in \"%s\"; masks in this file: %s", gname, path,
                             list[0] ? list : "(none)");
      goto done;
    }
  }
  ierr = attr_read_int(grp, gname, "seqlen_q", 1, &Sq);
  if (!ierr) ierr = attr_read_int(grp, gname, "seqlen_k", 1, &Sk);
  if (!ierr) ierr = attr_read_int(grp, gname, "mask_heads", 1, &H);
  if (!ierr) ierr = attr_read_int(grp, gname, "causal", 1, &causal);
  if (!ierr) ierr = attr_read_int(grp, gname, "present", 1, &present);
  if (!ierr) ierr = attr_read_int(grp, gname, "block", 0, &block);
  if (ierr) goto done;
  if (Sq <= 0 || Sk <= 0 || H <= 0) {
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_HDF5,
                           "Group %s has seqlen_q %d, seqlen_k %d, mask_heads %d; expected all > 0", gname, Sq, Sk, H);
    goto done;
  }
  if (present < 0 || present > 15 || (causal != 0 && causal != 1) || block < 1) {
    ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, FM_ERR_HDF5,
                           "Group %s has present %d, causal %d, block %d; expected present in 0..15 (FM_BOUND_* bits), causal 0 or 1, block >= 1",
                           gname, present, causal, block);
    goto done;
  }
  for (int v = 0; v < 4 && !ierr; v++) {
    if (!(present & (1 << v))) continue;
    ierr = FMMalloc((size_t)H * Sk, &vec[v]);
    if (!ierr) ierr = read_vector(grp, gname, vec_names[v], H, Sk, vec[v]);
  }
  if (ierr) goto done;
  /* Hand the vectors to the mask; its own checks report out-of-range bounds. */
  H5Eclear2(H5E_DEFAULT);
  ierr = FMMaskSetSizes(m, Sq, Sk, H);
  if (!ierr) ierr = FMMaskSetType(m, FMMASKBOUNDS);
  if (!ierr) ierr = FMMaskSetCausal(m, causal ? FM_TRUE : FM_FALSE);
  if (!ierr) ierr = FMMaskSetBlockSize(m, block);
  for (int h = 0; h < H && !ierr; h++) {
    const int32_t *p[4];
    for (int v = 0; v < 4; v++) p[v] = vec[v] ? vec[v] + (size_t)h * Sk : NULL;
    ierr = FMMaskSetBounds(m, h, p[0], p[1], p[2], p[3]);
    if (ierr) {
      /* Restate the error with the file context (copy: the message buffer is reused). */
      char msg[1024];
      snprintf(msg, sizeof(msg), "%s", FMGetLastErrorMessage());
      ierr = FMError_Private(MPI_COMM_SELF, __FILE__, __func__, __LINE__, ierr, "Mask head %d of %s in \"%s\": %s", h, gname, path, msg);
    }
  }
done:
  for (int v = 0; v < 4; v++) free(vec[v]);
  if (grp >= 0) H5Oclose(grp);
  if (file >= 0) H5Fclose(file);
  H5Eclear2(H5E_DEFAULT);
  h5_quiet_pop(&q);
  if (ierr) return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
  return FM_SUCCESS;
}
/* A group name must be one non-empty link name: no '/', not "." or "..". */
static FMErrorCode check_name(const char *name)
{
  FMCheck(name[0] != '\0', MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 3 (name) is empty; expected a group name such as \"causal_doc\"");
  FMCheck(!strchr(name, '/'), MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 3 (name) is \"%s\"; expected a name without '/' (it becomes /masks/<name>)",
          name);
  FMCheck(strcmp(name, ".") && strcmp(name, ".."), MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 3 (name) is \"%s\"; expected a group name", name);
  FMCheck(strlen(name) < 256, MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 3 (name) is %zu characters long; expected fewer than 256", strlen(name));
  return FM_SUCCESS;
}

#endif /* FM_HAVE_HDF5 */

/*
 * FMMaskSave - write a set-up mask to an HDF5 file as the group /masks/<name>.
 *   Collective on the mask's communicator: rank 0 writes (serial HDF5), the other ranks wait
 *   for the outcome, and every rank returns the same error code (the other ranks' message
 *   repeats rank 0's).
 *   mask  a set-up mask (FMMaskSetUp)
 *   path  the file; created if missing, otherwise opened read-write (the root attributes are
 *         refreshed and other groups kept)
 *   name  the group name under /masks (no '/'); an existing group of that name is replaced
 *   Without HDF5 in the build, returns FM_ERR_SUP.
 */
FMErrorCode FMMaskSave(FMMask mask, const char *path, const char *name)
{
  FMValidHeader(mask, FM_CLASSID_MASK, 1);
  FMValidPointer(path, 2);
  FMValidPointer(name, 3);
#if !FM_HAVE_HDF5
  FMRaise(MPI_COMM_SELF, FM_ERR_SUP, "FMMaskSave(\"%s\", \"%s\"): flashmask was built without HDF5; reconfigure with --with-hdf5", path, name);
#else
  {
    MPI_Comm comm = mask->hdr.comm;
    int rank = 0, size = 1, code;
    FMErrorCode ierr = FM_SUCCESS;
    char msg[1024];
    FMCheckSetUp(mask, "FMMask");
    FMCall(check_name(name));
    FMCheck(path[0] != '\0', MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 2 (path) is empty; expected a file name");
    FMCallMPI(MPI_Comm_rank(comm, &rank));
    FMCallMPI(MPI_Comm_size(comm, &size));
    if (rank == 0) ierr = save_local(mask, path, name, size);
    if (size == 1) {
      if (ierr) return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
      return FM_SUCCESS;
    }
    /* Broadcast rank 0's outcome (code and message) so every rank returns the same code. */
    code = (int)ierr;
    FMCallMPI(MPI_Bcast(&code, 1, MPI_INT, 0, comm));
    if (code == FM_SUCCESS) return FM_SUCCESS;
    if (rank == 0) snprintf(msg, sizeof(msg), "%s", FMGetLastErrorMessage());
    FMCallMPI(MPI_Bcast(msg, (int)sizeof(msg), MPI_CHAR, 0, comm));
    msg[sizeof(msg) - 1] = '\0';
    if (rank == 0) return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
    FMRaise(MPI_COMM_SELF, (FMErrorCode)code, "Rank 0 failed to save mask \"%s\" to \"%s\": %s", name, path, msg);
  }
#endif
}

/*
 * FMMaskLoad - read /masks/<name> of an HDF5 file into a new, set-up mask of type "bounds".
 *   Collective on the context: every rank reads the file (serial HDF5, read-only) and the
 *   ranks agree on the outcome before the collective FMMaskSetUp.
 *   ctx   the context of the new mask
 *   path  the file (missing or unreadable: FM_ERR_FILE)
 *   name  the group under /masks (missing: FM_ERR_HDF5, the message lists the masks present)
 *   mask  out: the new mask with the stored sizes, causal flag, block size and bound vectors
 *         (the stored builder parameters are informational and not read back)
 *   A missing attribute or dataset, a dataset of the wrong rank, shape or a non-integer type
 *   is FM_ERR_HDF5 with a message naming it, the shape found and the shape expected; bounds
 *   out of range are FM_ERR_ARG_OUTOFRANGE. Without HDF5 in the build, returns FM_ERR_SUP.
 */
FMErrorCode FMMaskLoad(FMContext ctx, const char *path, const char *name, FMMask *mask)
{
  FMValidHeader(ctx, FM_CLASSID_CONTEXT, 1);
  FMValidPointer(path, 2);
  FMValidPointer(name, 3);
  FMValidPointer(mask, 4);
  *mask = NULL;
#if !FM_HAVE_HDF5
  FMRaise(MPI_COMM_SELF, FM_ERR_SUP, "FMMaskLoad(\"%s\", \"%s\"): flashmask was built without HDF5; reconfigure with --with-hdf5", path, name);
#else
  {
    FMMask m = NULL;
    FMErrorCode ierr;
    FMCall(check_name(name));
    FMCall(FMMaskCreate(ctx, &m));
    ierr = load_local(m, path, name);
    ierr = FMAgree_Private(m->hdr.comm, ierr, __FILE__, __func__, __LINE__);
    if (!ierr) ierr = FMMaskSetUp(m);
    if (ierr) {
      FMMaskDestroy(&m);
      return FMTraceback_Private(__FILE__, __func__, __LINE__, ierr);
    }
    *mask = m;
    return FM_SUCCESS;
  }
#endif
}
