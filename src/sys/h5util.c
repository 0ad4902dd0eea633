/*
 * h5util.c - the HDF5 plumbing shared by flashmask's HDF5 files (masks: src/mask/maskio.c,
 * traces: src/sys/trace.c, the fmtrace reader: src/bin/fmtrace.c): quiet HDF5 error stack,
 * attribute writers and readers, the root attributes and the format check.
 * Interface: include/flashmask/private/fmh5.h. Compiled to nothing without HDF5.
 */
#include <flashmask/private/fmh5.h>

#if FM_HAVE_HDF5
#include <string.h>
#include <time.h>

/* ================================================================ HDF5 error stack */
/* FMH5QuietPush - see fmh5.h. Not collective. */
void FMH5QuietPush(FMH5Quiet *q)
{
  q->func = NULL;
  q->data = NULL;
  H5Eget_auto2(H5E_DEFAULT, &q->func, &q->data);
  H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

/* FMH5QuietPop - see fmh5.h. Not collective. */
void FMH5QuietPop(const FMH5Quiet *q) { H5Eset_auto2(H5E_DEFAULT, q->func, q->data); }

/* H5Ewalk2 callback: keep the innermost entry (n == 0 walking upward). */
static herr_t walk_cb(unsigned n, const H5E_error2_t *e, void *ctx)
{
  if (n == 0 && e && e->desc) snprintf((char *)ctx, 256, "%s (in %s)", e->desc, e->func_name ? e->func_name : "?");
  return 0;
}

/* FMH5LastMessage - see fmh5.h. Not collective. */
const char *FMH5LastMessage(char buf[256])
{
  buf[0] = '\0';
  H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, walk_cb, buf);
  H5Eclear2(H5E_DEFAULT);
  if (!buf[0]) snprintf(buf, 256, "no HDF5 message");
  return buf;
}

/* FMH5ClassName - see fmh5.h. Not collective. */
const char *FMH5ClassName(H5T_class_t c)
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

/* FMH5CheckCompound_Private - see fmh5.h. Not collective. */
FMErrorCode FMH5CheckCompound_Private(hid_t t, const char *what, const char *path)
{
  size_t size = t >= 0 ? H5Tget_size(t) : 0;
  int nm = t >= 0 ? H5Tget_nmembers(t) : -1;
  H5T_class_t cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
  H5Eclear2(H5E_DEFAULT);
  FMCheck(cls == H5T_COMPOUND && size > 0 && size <= 65536 && nm >= 1 && nm <= 64, MPI_COMM_SELF, FM_ERR_HDF5,
          "%s has element type %s of %zu bytes and %d members; expected a compound of at most 65536 bytes and 1 to 64 members (in \"%s\")", what,
          FMH5ClassName(cls), size, nm, path);
  for (int k = 0; k < nm; k++) {
    hid_t mt = H5Tget_member_type(t, (unsigned)k);
    H5T_class_t mc = mt >= 0 ? H5Tget_class(mt) : H5T_NO_CLASS;
    size_t off = H5Tget_member_offset(t, (unsigned)k), ms = mt >= 0 ? H5Tget_size(mt) : 0;
    int ok = (mc == H5T_INTEGER || mc == H5T_FLOAT) ? ms >= 1 && ms <= 16 : mc == H5T_STRING ? H5Tis_variable_str(mt) == 0 && ms >= 1 : 0;
    if (mt >= 0) H5Tclose(mt);
    H5Eclear2(H5E_DEFAULT);
    FMCheck(ok && off <= size && ms <= size - off, MPI_COMM_SELF, FM_ERR_HDF5,
            "%s: member %d of its compound type is %s of %zu bytes at offset %zu in an element of %zu bytes; expected an integer, float or "
            "fixed-length string inside the element (in \"%s\")", what, k, FMH5ClassName(mc), ms, off, size, path);
  }
  return FM_SUCCESS;
}

/* ================================================================ attribute writers */
/* FMH5AttrWrite - see fmh5.h. Not collective (serial HDF5). */
FMErrorCode FMH5AttrWrite(hid_t obj, const char *name, hid_t ftype, hid_t mtype, int n, const void *val)
{
  hid_t space, attr;
  herr_t st;
  htri_t ex = H5Aexists(obj, name);
  FMH5Check(ex >= 0, FM_ERR_HDF5, "Cannot query attribute \"%s\"", name);
  if (ex > 0) FMH5Check(H5Adelete(obj, name) >= 0, FM_ERR_HDF5, "Cannot replace attribute \"%s\"", name);
  if (n == 0) {
    space = H5Screate(H5S_SCALAR);
  } else {
    hsize_t d = (hsize_t)n;
    space = H5Screate_simple(1, &d, NULL);
  }
  FMH5Check(space >= 0, FM_ERR_HDF5, "Cannot create the dataspace of attribute \"%s\"", name);
  attr = H5Acreate2(obj, name, ftype, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Sclose(space);
  FMH5Check(attr >= 0, FM_ERR_HDF5, "Cannot create attribute \"%s\"", name);
  st = H5Awrite(attr, mtype, val);
  H5Aclose(attr);
  FMH5Check(st >= 0, FM_ERR_HDF5, "Cannot write attribute \"%s\"", name);
  return FM_SUCCESS;
}

/* FMH5AttrWriteInt - see fmh5.h. Not collective (serial HDF5). */
FMErrorCode FMH5AttrWriteInt(hid_t obj, const char *name, int v)
{
  FMCall(FMH5AttrWrite(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT, 0, &v));
  return FM_SUCCESS;
}

/* FMH5AttrWriteInts - see fmh5.h. Not collective (serial HDF5). */
FMErrorCode FMH5AttrWriteInts(hid_t obj, const char *name, int n, const int *v)
{
  if (n <= 0 || !v) return FM_SUCCESS;
  FMCall(FMH5AttrWrite(obj, name, H5T_STD_I32LE, H5T_NATIVE_INT, n, v));
  return FM_SUCCESS;
}

/* FMH5AttrWriteDouble - see fmh5.h. Not collective (serial HDF5). */
FMErrorCode FMH5AttrWriteDouble(hid_t obj, const char *name, double v)
{
  FMCall(FMH5AttrWrite(obj, name, H5T_IEEE_F64LE, H5T_NATIVE_DOUBLE, 0, &v));
  return FM_SUCCESS;
}

/* n fixed-length, NUL-terminated strings of w bytes (n == 0: one string of strlen(s) + 1). */
static FMErrorCode attr_write_strings(hid_t obj, const char *name, int n, size_t w, const char *s)
{
  FMErrorCode ierr;
  hid_t t = H5Tcopy(H5T_C_S1);
  FMH5Check(t >= 0, FM_ERR_HDF5, "Cannot create the string type of attribute \"%s\"", name);
  if (H5Tset_size(t, n ? w : strlen(s) + 1) < 0 || H5Tset_strpad(t, H5T_STR_NULLTERM) < 0) {
    H5Tclose(t);
    FMH5Raise(FM_ERR_HDF5, "Cannot size the string type of attribute \"%s\"", name);
  }
  ierr = FMH5AttrWrite(obj, name, t, t, n, s);
  H5Tclose(t);
  FMCall(ierr);
  return FM_SUCCESS;
}

/* FMH5AttrWriteStr - see fmh5.h. Not collective (serial HDF5). */
FMErrorCode FMH5AttrWriteStr(hid_t obj, const char *name, const char *s)
{
  FMCall(attr_write_strings(obj, name, 0, 0, s));
  return FM_SUCCESS;
}

/* FMH5AttrWriteStrs - see fmh5.h. Not collective (serial HDF5). */
FMErrorCode FMH5AttrWriteStrs(hid_t obj, const char *name, int n, size_t w, const char *s)
{
  FMCheck(n >= 1 && w >= 1, MPI_COMM_SELF, FM_ERR_ARG_OUTOFRANGE,
          "Arguments 3, 4 (n, w) of attribute \"%s\" are %d, %zu; expected at least one string of at least one byte", name, n, w);
  FMCall(attr_write_strings(obj, name, n, w, s));
  return FM_SUCCESS;
}

/* ================================================================ attribute readers */
/* Class and element count of the open attribute a (H5T_NO_CLASS, -1 when unreadable). */
static void attr_describe(hid_t a, H5T_class_t *cls, hssize_t *npts)
{
  hid_t t = H5Aget_type(a), s = H5Aget_space(a);
  *cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
  *npts = s >= 0 ? H5Sget_simple_extent_npoints(s) : -1;
  if (t >= 0) H5Tclose(t);
  if (s >= 0) H5Sclose(s);
}

/* Open attribute name of obj and describe it. A missing optional attribute gives *a = -1. */
static FMErrorCode attr_open(hid_t obj, const char *where, const char *name, FMBool required, const char *expected, hid_t *a,
                             H5T_class_t *cls, hssize_t *npts)
{
  htri_t ex = H5Aexists(obj, name);
  *a = -1;
  if (ex <= 0) {
    H5Eclear2(H5E_DEFAULT);
    if (!required) return FM_SUCCESS;
    FMRaise(MPI_COMM_SELF, FM_ERR_HDF5, "Attribute \"%s\" of group %s is missing; expected %s", name, where, expected);
  }
  *a = H5Aopen(obj, name, H5P_DEFAULT);
  if (*a < 0) FMH5Raise(FM_ERR_HDF5, "Cannot open attribute \"%s\" of group %s", name, where);
  attr_describe(*a, cls, npts);
  return FM_SUCCESS;
}

/* Read one integer element (or also a float one when allow_float) as mtype. */
static FMErrorCode attr_read_number(hid_t obj, const char *where, const char *name, FMBool required, int allow_float, hid_t mtype,
                                    void *val)
{
  const char *expected = allow_float ? "a number" : "an integer";
  hid_t a;
  H5T_class_t cls;
  hssize_t npts;
  herr_t st;
  FMCall(attr_open(obj, where, name, required, expected, &a, &cls, &npts));
  if (a < 0) return FM_SUCCESS;
  if (!(cls == H5T_INTEGER || (allow_float && cls == H5T_FLOAT)) || npts != 1) {
    H5Aclose(a);
    H5Eclear2(H5E_DEFAULT);
    FMRaise(MPI_COMM_SELF, FM_ERR_HDF5, "Attribute \"%s\" of group %s has class %s and %lld element(s); expected one %s", name, where,
            FMH5ClassName(cls), (long long)npts, allow_float ? "number (integer or float)" : "integer");
  }
  st = H5Aread(a, mtype, val);
  H5Aclose(a);
  if (st < 0) FMH5Raise(FM_ERR_HDF5, "Cannot read attribute \"%s\" of group %s", name, where);
  return FM_SUCCESS;
}

/* FMH5AttrReadInt - see fmh5.h. Not collective. */
FMErrorCode FMH5AttrReadInt(hid_t obj, const char *where, const char *name, FMBool required, int *val)
{
  FMCall(attr_read_number(obj, where, name, required, 0, H5T_NATIVE_INT, val));
  return FM_SUCCESS;
}

/* FMH5AttrReadDouble - see fmh5.h. Not collective. */
FMErrorCode FMH5AttrReadDouble(hid_t obj, const char *where, const char *name, FMBool required, double *val)
{
  FMCall(attr_read_number(obj, where, name, required, 1, H5T_NATIVE_DOUBLE, val));
  return FM_SUCCESS;
}

/*
 * Read the open attribute a, of class cls with npts elements, into buf[len] when it is one
 * string (fixed-length of any padding, or variable-length, as h5py writes them; ASCII or
 * UTF-8) shorter than len; returns 1 then, otherwise 0 with why saying what it is. The
 * memory type takes the file type's character set (HDF5 does not convert between them).
 */
static int read_str(hid_t a, H5T_class_t cls, hssize_t npts, char *buf, size_t len, char *why, size_t wlen)
{
  hid_t t = H5Aget_type(a), mt = -1;
  int ok = 0;
  char b[256];
  buf[0] = '\0';
  if (cls != H5T_STRING || npts != 1 || t < 0) {
    snprintf(why, wlen, "has class %s and %lld element(s)", FMH5ClassName(cls), (long long)npts);
  } else if (H5Tis_variable_str(t) > 0) {
    char *p = NULL;
    mt = H5Tcopy(H5T_C_S1);
    ok = mt >= 0 && H5Tset_size(mt, H5T_VARIABLE) >= 0 && H5Tset_cset(mt, H5Tget_cset(t)) >= 0 && H5Aread(a, mt, &p) >= 0;
    if (!ok) snprintf(why, wlen, "cannot be read as a variable-length string (HDF5 says: %s)", FMH5LastMessage(b));
    else if (!p) buf[0] = '\0';
    else if (strlen(p) >= len) {
      snprintf(why, wlen, "is a variable-length string of %zu bytes", strlen(p));
      ok = 0;
    } else memcpy(buf, p, strlen(p) + 1);
    if (p) H5free_memory(p);
  } else if (H5Tget_size(t) >= len) {
    snprintf(why, wlen, "is a string of %zu bytes", H5Tget_size(t));
  } else {
    mt = H5Tcopy(H5T_C_S1);
    ok = mt >= 0 && H5Tset_size(mt, H5Tget_size(t) + 1) >= 0 && H5Tset_strpad(mt, H5T_STR_NULLTERM) >= 0 &&
         H5Tset_cset(mt, H5Tget_cset(t)) >= 0 && H5Aread(a, mt, buf) >= 0;
    if (!ok) {
      buf[0] = '\0';
      snprintf(why, wlen, "cannot be read (HDF5 says: %s)", FMH5LastMessage(b));
    } else {
      size_t n = H5Tget_size(t); /* space padding (Fortran style) is not part of the value */
      buf[n] = '\0';
      if (H5Tget_strpad(t) == H5T_STR_SPACEPAD)
        while (n > 0 && buf[n - 1] == ' ') buf[--n] = '\0';
    }
  }
  if (mt >= 0) H5Tclose(mt);
  if (t >= 0) H5Tclose(t);
  return ok;
}

/* FMH5AttrReadStr - see fmh5.h. Not collective. */
FMErrorCode FMH5AttrReadStr(hid_t obj, const char *where, const char *name, FMBool required, char *buf, size_t len)
{
  hid_t a;
  H5T_class_t cls;
  hssize_t npts;
  char why[320];
  int ok;
  buf[0] = '\0';
  FMCall(attr_open(obj, where, name, required, "a string", &a, &cls, &npts));
  if (a < 0) return FM_SUCCESS;
  ok = read_str(a, cls, npts, buf, len, why, sizeof(why));
  H5Aclose(a);
  FMCheck(ok, MPI_COMM_SELF, FM_ERR_HDF5, "Attribute \"%s\" of group %s %s; expected one string of fewer than %zu bytes", name,
          where, why, len);
  return FM_SUCCESS;
}

/* ================================================================ flashmask files */
/* FMH5Timestamp - see fmh5.h. Not collective. */
void FMH5Timestamp(char buf[64])
{
  time_t now = time(NULL);
  struct tm tmv;
  localtime_r(&now, &tmv);
  if (!strftime(buf, 64, "%Y-%m-%dT%H:%M:%S%z", &tmv)) snprintf(buf, 64, "unknown");
}

/* FMH5WriteRootAttrs_Private - see fmh5.h. */
FMErrorCode FMH5WriteRootAttrs_Private(hid_t file, int mpi_size, const char *created)
{
  char when[64];
  htri_t had = H5Aexists(file, "created");
  H5Eclear2(H5E_DEFAULT);
  FMCall(FMH5AttrWriteStr(file, "format", "flashmask"));
  FMCall(FMH5AttrWriteInt(file, "format_version", FMH5_FORMAT_VERSION));
  if (had > 0) return FM_SUCCESS; /* the file's creation is described already: a later save keeps it */
  if (!created) {
    FMH5Timestamp(when);
    created = when;
  }
  FMCall(FMH5AttrWriteStr(file, "library_version", FMGetVersion()));
  FMCall(FMH5AttrWriteStr(file, "created", created));
  FMCall(FMH5AttrWriteInt(file, "mpi_size", mpi_size));
  return FM_SUCCESS;
}

/* FMH5CheckFormat_Private - see fmh5.h. Not collective. */
FMErrorCode FMH5CheckFormat_Private(hid_t file, const char *path, const char *what)
{
  htri_t ex = H5Aexists(file, "format");
  hid_t a;
  H5T_class_t cls;
  hssize_t npts;
  char buf[64] = "", why[320];
  int ok = 0;
  if (ex == 0) return FM_SUCCESS;
  FMH5Check(ex > 0, FM_ERR_HDF5, "Cannot read the root attributes of \"%s\"", path);
  /* Unreadable or not a short string: refused below as "(unreadable)". */
  a = H5Aopen(file, "format", H5P_DEFAULT);
  if (a >= 0) {
    attr_describe(a, &cls, &npts);
    ok = read_str(a, cls, npts, buf, sizeof(buf), why, sizeof(why));
    H5Aclose(a);
  }
  H5Eclear2(H5E_DEFAULT);
  FMCheck(ok && !strcmp(buf, "flashmask"), MPI_COMM_SELF, FM_ERR_HDF5,
          "File \"%s\" has a root attribute format that is not \"flashmask\" (found \"%s\"); refusing to write %s into it", path,
          ok ? buf : "(unreadable)", what);
  return FM_SUCCESS;
}

FMErrorCode FMH5FileClose_Private(hid_t file, const char *path, FMErrorCode ierr)
{
  char b[256];
  if (file < 0) return ierr;
  if (H5Fclose(file) >= 0 || ierr != FM_SUCCESS) return ierr;
  FMRaise(MPI_COMM_SELF, FM_ERR_FILE, "Cannot close (flush) \"%s\"; HDF5 says: %s", path, FMH5LastMessage(b));
}

#endif /* FM_HAVE_HDF5 */
