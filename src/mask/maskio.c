/*
 * maskio.c - FMMaskSave / FMMaskLoad: masks in HDF5 files.
 *
 * Layout (conventions.md, "HDF5 files"):
 *   /                attrs: format = "flashmask", format_version = 1, library_version,
 *                    created (ISO 8601 local time), mpi_size
 *   /masks/<name>/   attrs: type, causal, seqlen_q, seqlen_k, mask_heads, mask_batch, block,
 *                    present (FM_BOUND_* bits), seed, and the builder parameters the type
 *                    uses, those of sample 0 (docs, segments_per_doc, segment_lengths,
 *                    window_left, window_right, global_tokens, prefix, span_start, span_len)
 *                    datasets lts, lte, uts, ute: int32 [mask_heads][seqlen_k] when mask_batch
 *                    is 1, [mask_batch][mask_heads][seqlen_k] otherwise, only those whose bit
 *                    is set in present. A group without mask_batch (files written before it)
 *                    loads as mask_batch 1.
 *
 * Saving is done by rank 0 with the serial HDF5 API (a mask is replicated on every rank);
 * its outcome reaches every rank (FMAgreeRootOutcome). Loading is done by every
 * rank; the ranks agree on the outcome before the collective FMMaskSetUp.
 * HDF5's own error-stack printing is switched off around our calls; failures are reported
 * through FMError with the innermost HDF5 message appended. The HDF5 plumbing (quiet error
 * stack, attributes, root attributes, format check) is shared: fmh5.h, src/sys/h5util.c.
 */
#include "maskimpl.h"
#include <flashmask/fmconf.h>
#include <flashmask/private/fmh5.h>
#include <stdlib.h>
#include <string.h>

#if FM_HAVE_HDF5
#include <errno.h>
#include <unistd.h>

static const char *const vec_names[4] = {"lts", "lte", "uts", "ute"};

/* ---------------------------------------------------------------- writing helpers */
/* Attributes of /masks/<name>: sizes, flags and the parameters the type uses. */
static FMErrorCode write_mask_attrs(hid_t grp, FMMask m)
{
  unsigned long long seed = (unsigned long long)m->seed;
  int t = FMMaskTypeIndex_Private(m->hdr.type_name);
  FMCall(FMH5AttrWriteStr(grp, "type", m->hdr.type_name ? m->hdr.type_name : FMMASKFULL));
  FMCall(FMH5AttrWriteInt(grp, "causal", m->causal ? 1 : 0));
  FMCall(FMH5AttrWriteInt(grp, "seqlen_q", m->seqlen_q));
  FMCall(FMH5AttrWriteInt(grp, "seqlen_k", m->seqlen_k));
  FMCall(FMH5AttrWriteInt(grp, "mask_heads", m->mask_heads));
  FMCall(FMH5AttrWriteInt(grp, "mask_batch", m->mask_batch));
  FMCall(FMH5AttrWriteInt(grp, "block", m->block));
  FMCall(FMH5AttrWriteInt(grp, "present", m->present));
  FMCall(FMH5AttrWrite(grp, "seed", H5T_STD_U64LE, H5T_NATIVE_ULLONG, 0, &seed));
  if (t >= 0 && t != FM_MT_BOUNDS) {
    FMMaskParams p;
    FMErrorCode ierr = FM_SUCCESS;
    FMCall(FMMaskGetParams_Private(m, &p));
    if (p.docs) ierr = FMH5AttrWriteInts(grp, "docs", p.ndocs, p.docs);
    if (!ierr && p.nseg) ierr = FMH5AttrWriteInts(grp, "segments_per_doc", p.ndocs, p.nseg);
    if (!ierr && p.seglen) ierr = FMH5AttrWriteInts(grp, "segment_lengths", p.nsegtot, p.seglen);
    if (!ierr && p.window_left >= 0) ierr = FMH5AttrWriteInt(grp, "window_left", p.window_left);
    if (!ierr && p.window_right >= 0) ierr = FMH5AttrWriteInt(grp, "window_right", p.window_right);
    if (!ierr && p.nglobal >= 0) ierr = FMH5AttrWriteInt(grp, "global_tokens", p.nglobal);
    if (!ierr && p.prefix) ierr = FMH5AttrWriteInts(grp, "prefix", p.nprefix, p.prefix);
    if (!ierr && p.span_start) ierr = FMH5AttrWriteInts(grp, "span_start", p.nspans, p.span_start);
    if (!ierr && p.span_len) ierr = FMH5AttrWriteInts(grp, "span_len", p.nspans, p.span_len);
    FMMaskParamsFree_Private(&p);
    FMCall(ierr);
  }
  return FM_SUCCESS;
}

/* One bound vector as an int32 [mask_heads][seqlen_k] dataset ([mask_batch][mask_heads][seqlen_k] when mask_batch > 1). */
static FMErrorCode write_vector(hid_t grp, FMMask m, int v)
{
  const int nd = m->mask_batch > 1 ? 3 : 2;
  hsize_t dims[3] = {(hsize_t)m->mask_batch, (hsize_t)m->mask_heads, (hsize_t)m->seqlen_k};
  hid_t space, dset;
  herr_t st;
  space = H5Screate_simple(nd, dims + (3 - nd), NULL);
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

/* Rank 0's part of FMMaskSave. */
static FMErrorCode save_local(FMMask m, const char *path, const char *name, int mpi_size)
{
  hid_t file = -1, masks = -1, grp = -1;
  htri_t ex;
  FMErrorCode ierr = FM_SUCCESS;
  FMH5Quiet q;
  FMH5QuietPush(&q);
  FMCallGoto(open_for_write(path, &file));
  FMCallGoto(FMH5CheckFormat_Private(file, path, "a mask"));
  FMCallGoto(FMH5WriteRootAttrs_Private(file, mpi_size, NULL));
  ex = H5Lexists(file, "masks", H5P_DEFAULT);
  masks = ex > 0 ? H5Gopen2(file, "masks", H5P_DEFAULT) : ex == 0 ? H5Gcreate2(file, "masks", H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT) : -1;
  FMH5CheckGoto(masks >= 0, FM_ERR_HDF5, "Cannot open or create group /masks in \"%s\"", path);
  ex = H5Lexists(masks, name, H5P_DEFAULT);
  if (ex > 0 && H5Ldelete(masks, name, H5P_DEFAULT) < 0) ex = -1;
  if (ex >= 0) grp = H5Gcreate2(masks, name, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  FMH5CheckGoto(grp >= 0, FM_ERR_HDF5, "Cannot create group /masks/%s in \"%s\"", name, path);
  FMCallGoto(write_mask_attrs(grp, m));
  for (int v = 0; v < 4; v++)
    if (m->present & (1 << v)) FMCallGoto(write_vector(grp, m, v));
cleanup:
  if (grp >= 0) H5Gclose(grp);
  if (masks >= 0) H5Gclose(masks);
  ierr = FMH5FileClose_Private(file, path, ierr);
  FMH5QuietPop(&q);
  return ierr;
}

/* ---------------------------------------------------------------- reading helpers */
/*
 * Open dataset gname/vname and check it before anything is allocated for it: an integer type
 * of at most 8 bytes, the shape [H][Sk] (B = 1; [1][H][Sk] is accepted too) or [B][H][Sk], and (unfiltered storage) as many bytes stored as the
 * shape needs, so that a corrupt file cannot make us read fill values into a huge buffer.
 * On success *dset is open (the caller closes it).
 */
static FMErrorCode open_vector(hid_t grp, const char *gname, const char *vname, int B, int H, int Sk, hid_t *dset)
{
  const hsize_t nent = (hsize_t)B * (hsize_t)H * (hsize_t)Sk;
  hid_t d, t, s, pl;
  H5T_class_t cls;
  int nd, nfilt;
  size_t esize;
  hsize_t dims[8] = {0}, stored;
  htri_t ex = H5Lexists(grp, vname, H5P_DEFAULT);
  *dset = -1;
  if (ex <= 0) {
    H5Eclear2(H5E_DEFAULT);
    FMRaise(MPI_COMM_SELF, FM_ERR_HDF5, "Dataset %s/%s is missing; the attribute present says it is stored (expected int32 [%d][%d])",
            gname, vname, H, Sk);
  }
  d = H5Dopen2(grp, vname, H5P_DEFAULT);
  if (d < 0) FMH5Raise(FM_ERR_HDF5, "Cannot open %s/%s as a dataset", gname, vname);
  t = H5Dget_type(d);
  s = H5Dget_space(d);
  pl = H5Dget_create_plist(d);
  cls = t >= 0 ? H5Tget_class(t) : H5T_NO_CLASS;
  esize = t >= 0 ? H5Tget_size(t) : 0;
  nd = s >= 0 ? H5Sget_simple_extent_ndims(s) : -1;
  if (nd > 0 && nd <= 8 && H5Sget_simple_extent_dims(s, dims, NULL) < 0) nd = -1;
  nfilt = pl >= 0 ? H5Pget_nfilters(pl) : -1;
  stored = H5Dget_storage_size(d);
  if (t >= 0) H5Tclose(t);
  if (s >= 0) H5Sclose(s);
  if (pl >= 0) H5Pclose(pl);
  H5Eclear2(H5E_DEFAULT);
  if (cls != H5T_INTEGER || esize < 1 || esize > 8) {
    H5Dclose(d);
    FMRaise(MPI_COMM_SELF, FM_ERR_HDF5, "Dataset %s/%s has element type %s of %zu bytes; expected an integer (int32) type", gname, vname,
            FMH5ClassName(cls), esize);
  }
  if (!((nd == 2 && B == 1 && dims[0] == (hsize_t)H && dims[1] == (hsize_t)Sk) ||
        (nd == 3 && dims[0] == (hsize_t)B && dims[1] == (hsize_t)H && dims[2] == (hsize_t)Sk))) {
    char shape[160] = "";
    size_t len = 0;
    if (nd < 0) snprintf(shape, sizeof(shape), "(unreadable)");
    else if (nd == 0) snprintf(shape, sizeof(shape), "scalar");
    for (int k = 0; k < nd && k < 8 && len < sizeof(shape) - 24; k++) len += (size_t)snprintf(shape + len, sizeof(shape) - len, "[%llu]", (unsigned long long)dims[k]);
    H5Dclose(d);
    if (B == 1)
      FMRaise(MPI_COMM_SELF, FM_ERR_HDF5, "Dataset %s/%s has shape %s (rank %d); expected [%d][%d] = [mask_heads][seqlen_k]", gname, vname, shape,
              nd, H, Sk);
    FMRaise(MPI_COMM_SELF, FM_ERR_HDF5, "Dataset %s/%s has shape %s (rank %d); expected [%d][%d][%d] = [mask_batch][mask_heads][seqlen_k]",
            gname, vname, shape, nd, B, H, Sk);
  }
  if (nfilt == 0 && stored < nent * esize) {
    H5Dclose(d);
    FMRaise(MPI_COMM_SELF, FM_ERR_HDF5, "Dataset %s/%s of %llu entries ([mask_batch %d][%d][%d]) stores %llu bytes; expected %llu (a truncated or "
            "corrupt file?)", gname, vname, (unsigned long long)nent, B, H, Sk, (unsigned long long)stored, (unsigned long long)(nent * esize));
  }
  *dset = d;
  return FM_SUCCESS;
}

/* Read the checked dataset d into buf[H * Sk] (int32) and close it. */
static FMErrorCode read_vector(hid_t d, const char *gname, const char *vname, int32_t *buf)
{
  herr_t st = H5Dread(d, H5T_NATIVE_INT32, H5S_ALL, H5S_ALL, H5P_DEFAULT, buf);
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

/* Open the group gname (/masks/<name>) of an open file; a missing one lists the masks present. */
static FMErrorCode open_mask_group(hid_t file, const char *path, const char *gname, hid_t *grp)
{
  htri_t ex = H5Lexists(file, "masks", H5P_DEFAULT);
  char list[512];
  *grp = -1;
  if (ex > 0) ex = H5Lexists(file, gname, H5P_DEFAULT);
  if (ex > 0) {
    *grp = H5Oopen(file, gname, H5P_DEFAULT);
    if (*grp >= 0 && H5Iget_type(*grp) != H5I_GROUP) {
      H5Oclose(*grp);
      *grp = -1;
    }
  }
  if (*grp >= 0) return FM_SUCCESS;
  H5Eclear2(H5E_DEFAULT);
  list_masks(file, list, sizeof(list));
  H5Eclear2(H5E_DEFAULT);
  FMRaise(MPI_COMM_SELF, FM_ERR_HDF5, "Argument 3 (name): group %s not found in \"%s\"; masks in this file: %s", gname, path,
          list[0] ? list : "(none)");
}

/* Hand the vectors read from the file to the (created) mask m; its own checks report bad bounds. */
static FMErrorCode fill_mask(FMMask m, const char *path, const char *gname, int Sq, int Sk, int B, int H, int causal, int block,
                             int32_t *const vec[4])
{
  FMCall(FMMaskSetSizes(m, Sq, Sk, H));
  FMCall(FMMaskSetBatch(m, B));
  FMCall(FMMaskSetType(m, FMMASKBOUNDS));
  FMCall(FMMaskSetCausal(m, causal ? FM_TRUE : FM_FALSE));
  FMCall(FMMaskSetBlockSize(m, block));
  {
    /* the file's datasets are [mask_batch][mask_heads][seqlen_k]: one call, checked and
       copied on the context's threads; its error names the sample, head and column */
    const FMErrorCode ierr = FMMaskSetAllBounds(m, vec[0], vec[1], vec[2], vec[3]);
    if (ierr) {
      /* Restate the error with the file context (copy: the message buffer is reused). */
      char msg[1024];
      snprintf(msg, sizeof(msg), "%s", FMGetLastErrorMessage());
      FMRaise(MPI_COMM_SELF, ierr, "Mask %s in \"%s\": %s", gname, path, msg);
    }
  }
  return FM_SUCCESS;
}

/* Every rank's part of FMMaskLoad: read the file and fill the (created) mask m. */
static FMErrorCode load_local(FMMask m, const char *path, const char *name)
{
  hid_t file = -1, grp = -1;
  char gname[300];
  int Sq = 0, Sk = 0, H = 0, B = 1, causal = 0, present = 0, block = 128, version = FMH5_FORMAT_VERSION;
  int32_t *vec[4] = {NULL, NULL, NULL, NULL};
  hid_t dset[4] = {-1, -1, -1, -1};
  FMErrorCode ierr = FM_SUCCESS;
  FMH5Quiet q;

  snprintf(gname, sizeof(gname), "/masks/%s", name);
  FMCheck(access(path, R_OK) == 0, MPI_COMM_SELF, FM_ERR_FILE, "Argument 2 (path): cannot read \"%s\" (%s)", path, strerror(errno));
  FMH5QuietPush(&q);
  file = H5Fopen(path, H5F_ACC_RDONLY, H5P_DEFAULT);
  FMH5CheckGoto(file >= 0, FM_ERR_FILE, "Argument 2 (path): cannot open \"%s\" as an HDF5 file", path);
  if (H5Aexists(file, "format_version") > 0) {
    FMCallGoto(FMH5AttrReadInt(file, "/", "format_version", FM_TRUE, &version));
    FMCheckGoto(version <= FMH5_FORMAT_VERSION, MPI_COMM_SELF, FM_ERR_HDF5,
                "File \"%s\" has format_version %d; this library reads format_version <= %d", path, version, FMH5_FORMAT_VERSION);
  }
  H5Eclear2(H5E_DEFAULT);
  FMCallGoto(open_mask_group(file, path, gname, &grp));
  FMCallGoto(FMH5AttrReadInt(grp, gname, "seqlen_q", FM_TRUE, &Sq));
  FMCallGoto(FMH5AttrReadInt(grp, gname, "seqlen_k", FM_TRUE, &Sk));
  FMCallGoto(FMH5AttrReadInt(grp, gname, "mask_heads", FM_TRUE, &H));
  FMCallGoto(FMH5AttrReadInt(grp, gname, "causal", FM_TRUE, &causal));
  FMCallGoto(FMH5AttrReadInt(grp, gname, "present", FM_TRUE, &present));
  FMCallGoto(FMH5AttrReadInt(grp, gname, "block", FM_FALSE, &block));
  FMCheckGoto(Sq > 0 && Sk > 0 && H > 0, MPI_COMM_SELF, FM_ERR_HDF5, "Group %s has seqlen_q %d, seqlen_k %d, mask_heads %d; expected all > 0",
              gname, Sq, Sk, H);
  FMCheckGoto(present >= 0 && present <= 15 && (causal == 0 || causal == 1) && block >= 1, MPI_COMM_SELF, FM_ERR_HDF5,
              "Group %s has present %d, causal %d, block %d; expected present in 0..15 (FM_BOUND_* bits), causal 0 or 1, block >= 1", gname,
              present, causal, block);
  {
    char what[340];
    snprintf(what, sizeof(what), "Group %s: attribute", gname);
    /* mask_batch (absent before issue 11: 1) only once the sizes passed: looking up an absent
       attribute walks every attribute message, and HDF5 1.10 overflows a buffer on some corrupt ones */
    if (FMMaskCheckSizes_Private(Sq, Sk, H, block, what) || FMH5AttrReadInt(grp, gname, "mask_batch", FM_FALSE, &B) ||
        FMMaskCheckBatch_Private(B, H, Sk, what)) {
      char msg[1024]; /* copy: the message buffer is reused */
      snprintf(msg, sizeof(msg), "%s", FMGetLastErrorMessage());
      FMRaiseGoto(MPI_COMM_SELF, FM_ERR_HDF5, "%s (in \"%s\")", msg, path);
    }
  }
  /* Every dataset is checked against the attributes before any buffer is sized from them. */
  for (int v = 0; v < 4; v++)
    if (present & (1 << v)) FMCallGoto(open_vector(grp, gname, vec_names[v], B, H, Sk, &dset[v]));
  for (int v = 0; v < 4; v++) {
    if (dset[v] < 0) continue;
    FMCallGoto(FMMalloc((size_t)B * H * Sk, &vec[v]));
    ierr = read_vector(dset[v], gname, vec_names[v], vec[v]);
    dset[v] = -1;
    FMCallGoto(ierr);
  }
  H5Eclear2(H5E_DEFAULT);
  FMCallGoto(fill_mask(m, path, gname, Sq, Sk, B, H, causal, block, vec));
cleanup:
  for (int v = 0; v < 4; v++) {
    free(vec[v]);
    if (dset[v] >= 0) H5Dclose(dset[v]);
  }
  if (grp >= 0) H5Oclose(grp);
  if (file >= 0) H5Fclose(file);
  H5Eclear2(H5E_DEFAULT);
  FMH5QuietPop(&q);
  return ierr;
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

#if FM_HAVE_HDF5
/* FMMaskSave's local checks, agreed at its entry. */
static FMErrorCode save_checks(FMMask mask, const char *path, const char *name)
{
  FMCheck(mask->hdr.setupcalled, MPI_COMM_SELF, FM_ERR_ORDER, "Must call FMMaskSetUp() before FMMaskSave()");
  FMCall(check_name(name));
  FMCheck(path[0] != '\0', MPI_COMM_SELF, FM_ERR_ARG_WRONG, "Argument 2 (path) is empty; expected a file name");
  return FM_SUCCESS;
}
#endif

/*
 * FMMaskSave - write a set-up mask to an HDF5 file as the group /masks/<name>.
 *   Collective on the mask's communicator: rank 0 writes (serial HDF5), the other ranks wait
 *   for the outcome (FMAgreeRootOutcome): when rank 0 fails it returns its code and the other
 *   ranks FM_ERR_COLLECTIVE, their message repeating rank 0's code and message.
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
    FMErrorCode ierr = FM_SUCCESS;
    const FMAgreeField f[2] = {{"the file name (argument 2)", FM_AGREE_FIELD_HASH, (long long)FMHash_Private(FM_HASH_INIT, path, strlen(path)), 0},
                               {"the mask's name (argument 3)", FM_AGREE_FIELD_HASH, (long long)FMHash_Private(FM_HASH_INIT, name, strlen(name)), 0}};
    /* the entry agreement: the local checks, the same file and name everywhere (rank 0 writes
       what the others were told), and ranks in another call an error, not a hang */
    FMCall(FMAgreeCall_Private(mask->hdr.comm, FM_CALL_MASK_SAVE, save_checks(mask, path, name), 2, f));
    if (mask->ctx->rank == 0) ierr = save_local(mask, path, name, mask->ctx->size);
    FMCallGoto(FMAgreeRootOutcome(mask->hdr.comm, 0, ierr));
  cleanup:
    return ierr;
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
 *   is FM_ERR_HDF5 with a message naming it, the shape found and the shape expected; so are
 *   sizes beyond the FM_MASK_MAX_* limits and datasets storing fewer bytes than their shape,
 *   all checked before any buffer is allocated; bounds out of range are
 *   FM_ERR_ARG_OUTOFRANGE. Without HDF5 in the build, returns FM_ERR_SUP.
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
    FMErrorCode ierr = FM_SUCCESS;
    const FMAgreeField f[1] = {{"the mask's name (argument 3)", FM_AGREE_FIELD_HASH, (long long)FMHash_Private(FM_HASH_INIT, name, strlen(name)), 0}};
    /* as FMMaskSave's, but the paths may differ (node-local copies): FMMaskSetUp then compares
       what the ranks read */
    FMCall(FMAgreeCall_Private(ctx->comm, FM_CALL_MASK_LOAD, check_name(name), 1, f));
    FMCall(FMMaskCreate(ctx, &m));
    ierr = load_local(m, path, name);
    FMAgreeGoto(m->hdr.comm);
    FMCallGoto(FMMaskSetUp(m));
    *mask = m;
    m = NULL;
  cleanup:
    FMMaskDestroy(&m);
    return ierr;
  }
#endif
}
