/*
 * fmh5.h - private HDF5 plumbing shared by every flashmask HDF5 file writer and reader
 * (src/mask/maskio.c, src/sys/trace.c, src/bin/fmtrace.c); defined in src/sys/h5util.c.
 * Not installed.
 *
 * Everything here needs HDF5: without it (FM_HAVE_HDF5 == 0) this header declares nothing,
 * so it can be included unconditionally.
 *
 * Conventions: the helpers report failures through FMError (FM_ERR_HDF5 unless stated
 * otherwise) with the innermost HDF5 message appended ("; HDF5 says: ..."). Callers switch
 * HDF5's own error printing off around their calls with FMH5QuietPush/FMH5QuietPop.
 */
#ifndef FLASHMASK_FMH5_H
#define FLASHMASK_FMH5_H

#include <flashmask/fmconf.h>
#include <flashmask/private/fmimpl.h>

#if FM_HAVE_HDF5
#include <hdf5.h>
#include <stddef.h>

/* The root attribute format_version written by FMH5WriteRootAttrs_Private (and the
   highest one the readers accept). */
#define FMH5_FORMAT_VERSION 1

/* ---------------------------------------------------------------- HDF5 error stack */
/* The automatic error handler saved by FMH5QuietPush. */
typedef struct {
  H5E_auto2_t func;
  void *data;
} FMH5Quiet;

/*
 * FMH5QuietPush - switch HDF5's automatic error printing off, saving the current handler in q.
 * FMH5QuietPop  - restore the handler saved by the matching FMH5QuietPush.
 *   Not collective.
 */
void FMH5QuietPush(FMH5Quiet *q);
void FMH5QuietPop(const FMH5Quiet *q);

/*
 * FMH5LastMessage - the innermost (most specific) message of the current HDF5 error stack,
 *   as "description (in function)", or "no HDF5 message" when the stack is empty. Clears the
 *   stack. Not collective.
 *   buf  256 characters of storage for the message; returned
 */
const char *FMH5LastMessage(char buf[256]);

/* FMH5ClassName - the name of an HDF5 type class ("integer", "float", "string", ...) for
   messages. Not collective. */
const char *FMH5ClassName(H5T_class_t c);

/* FMH5CheckCompound_Private - before a compound dataset is read: t (its file type) must be a
   compound of 1 to 64 members, at most 65536 bytes, each member an integer or float of at most
   16 bytes or a fixed-length string, lying inside the element (HDF5 itself does not check a
   corrupt member offset and reads out of bounds). FM_ERR_HDF5 naming what and path. */
FMErrorCode FMH5CheckCompound_Private(hid_t t, const char *what, const char *path);

/* FMH5Raise(code, fmt, ...): return FMError(code) with the innermost HDF5 message appended
   (at least one argument after fmt). */
#define FMH5Raise(code, fmt, ...)                                                    \
  do {                                                                               \
    char fm_h5buf_[256];                                                             \
    FMRaise(MPI_COMM_SELF, (code), fmt "; HDF5 says: %s", __VA_ARGS__, FMH5LastMessage(fm_h5buf_)); \
  } while (0)

/* FMH5Check(cond, code, fmt, ...): FMH5Raise(code, fmt, ...) unless cond holds. */
#define FMH5Check(cond, code, fmt, ...)                                              \
  do {                                                                               \
    if (!(cond)) FMH5Raise((code), fmt, __VA_ARGS__);                                \
  } while (0)

/* FMH5RaiseGoto(code, fmt, ...) / FMH5CheckGoto(cond, code, fmt, ...): the same in a function of
   the goto-to-cleanup shape (fmimpl.h): set ierr and jump to cleanup. */
#define FMH5RaiseGoto(code, fmt, ...)                                                \
  do {                                                                               \
    char fm_h5buf_[256];                                                             \
    FMRaiseGoto(MPI_COMM_SELF, (code), fmt "; HDF5 says: %s", __VA_ARGS__, FMH5LastMessage(fm_h5buf_)); \
  } while (0)
#define FMH5CheckGoto(cond, code, fmt, ...)                                          \
  do {                                                                               \
    if (!(cond)) FMH5RaiseGoto((code), fmt, __VA_ARGS__);                            \
  } while (0)

/* ---------------------------------------------------------------- attribute writers */
/*
 * FMH5AttrWrite - write attribute name on obj, replacing an existing one of any shape.
 *   Not collective with serial HDF5; collective (same arguments) on an MPI-IO file.
 *   obj    an open file, group or dataset
 *   name   the attribute name
 *   ftype  the type stored in the file
 *   mtype  the type of val in memory
 *   n      0: one scalar value; n >= 1: a one-dimensional attribute of n values
 *   val    the value(s)
 */
FMErrorCode FMH5AttrWrite(hid_t obj, const char *name, hid_t ftype, hid_t mtype, int n, const void *val);

/* FMH5AttrWriteInt - a scalar int32 attribute (see FMH5AttrWrite). */
FMErrorCode FMH5AttrWriteInt(hid_t obj, const char *name, int v);

/* FMH5AttrWriteInts - a one-dimensional int32 attribute of n values; nothing is written when
   n <= 0 or v is NULL (see FMH5AttrWrite). */
FMErrorCode FMH5AttrWriteInts(hid_t obj, const char *name, int n, const int *v);

/* FMH5AttrWriteDouble - a scalar float64 attribute (see FMH5AttrWrite). */
FMErrorCode FMH5AttrWriteDouble(hid_t obj, const char *name, double v);

/* FMH5AttrWriteStr - a scalar fixed-length, NUL-terminated string attribute holding s
   (h5dump prints it as a plain string; see FMH5AttrWrite). */
FMErrorCode FMH5AttrWriteStr(hid_t obj, const char *name, const char *s);

/* FMH5AttrWriteStrs - a one-dimensional attribute of n fixed-length, NUL-terminated strings of
   width w bytes each, stored back to back in s (n * w bytes; see FMH5AttrWrite). */
FMErrorCode FMH5AttrWriteStrs(hid_t obj, const char *name, int n, size_t w, const char *s);

/* ---------------------------------------------------------------- attribute readers */
/*
 * FMH5AttrReadInt, FMH5AttrReadDouble, FMH5AttrReadStr - read attribute name of obj.
 *   Not collective.
 *   obj       an open file, group or dataset
 *   where     how obj is named in messages, e.g. "/" or "/masks/causal"
 *   name      the attribute name
 *   required  FM_TRUE: a missing attribute is FM_ERR_HDF5; FM_FALSE: a missing attribute
 *             returns FM_SUCCESS and leaves val untouched (FMH5AttrReadStr empties buf)
 *   val       out: the value. Int: one integer element (scalar or one-element array);
 *             Double: one integer or float element, converted; Str: a fixed-length string
 *             that fits in len - 1 characters, NUL-terminated in buf
 *   An attribute of another class or element count is FM_ERR_HDF5 naming what was found.
 */
FMErrorCode FMH5AttrReadInt(hid_t obj, const char *where, const char *name, FMBool required, int *val);
FMErrorCode FMH5AttrReadDouble(hid_t obj, const char *where, const char *name, FMBool required, double *val);
FMErrorCode FMH5AttrReadStr(hid_t obj, const char *where, const char *name, FMBool required, char *buf, size_t len);

/* ---------------------------------------------------------------- flashmask files */
/* FMH5Timestamp - the current local time in ISO 8601 ("2026-01-31T12:00:00+0100", or
   "unknown") as stored in the root attribute created. Not collective.
   buf  out: 64 characters of storage */
void FMH5Timestamp(char buf[64]);

/*
 * FMH5WriteRootAttrs_Private - write the root attributes every flashmask HDF5 file carries:
 *   format = "flashmask", format_version = FMH5_FORMAT_VERSION (int32), and, where the file
 *   has no created attribute yet (a new file), library_version (FMGetVersion()), created (ISO
 *   8601 local time) and mpi_size (int32): those describe the file's creation and a later save
 *   into it keeps them (a trace run stores its own created and nranks).
 *   Not collective with serial HDF5; collective (same arguments) with an MPI-IO file.
 *   file      an open HDF5 file
 *   mpi_size  size of the communicator that wrote the file
 *   created   the timestamp to store, or NULL for now (under parallel HDF5 every rank must
 *             pass the same string, e.g. rank 0's broadcast)
 */
FMErrorCode FMH5WriteRootAttrs_Private(hid_t file, int mpi_size, const char *created);

/*
 * FMH5CheckFormat_Private - refuse to write into an HDF5 file that belongs to something else:
 *   FM_ERR_HDF5 when the root attribute "format" exists and is not the string "flashmask"
 *   (a file without it is accepted). Not collective.
 *   file  an open HDF5 file
 *   path  its name, for the message
 *   what  what the caller was about to write, for the message (e.g. "a mask", "a trace")
 */
FMErrorCode FMH5CheckFormat_Private(hid_t file, const char *path, const char *what);

/*
 * FMH5FileClose_Private - the last step of a writer's cleanup: close file (nothing when < 0)
 *   and return ierr, or FM_ERR_FILE naming path when ierr was FM_SUCCESS and the close (the
 *   final flush) failed. Collective exactly when H5Fclose is (an MPI-IO file).
 */
FMErrorCode FMH5FileClose_Private(hid_t file, const char *path, FMErrorCode ierr);

#endif /* FM_HAVE_HDF5 */
#endif /* FLASHMASK_FMH5_H */
