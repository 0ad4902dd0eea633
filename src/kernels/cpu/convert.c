/*
 * convert.c - element conversions between the library's dtypes and fp32 (the CPU backend
 * stages everything in fp32). bf16 and fp16 are handled on their bit patterns: exact
 * widening, round-to-nearest-even narrowing, NaN and Inf preserved; no _Float16 needed.
 * Also the scan for non-finite elements behind -fm_check_finite.
 */
#include <flashmask/private/fmimpl.h>
#include "fmcpu.h"
#include <stdint.h>
#ifdef _OPENMP
#include <omp.h>
#endif

/*
 * FMToFloat - element idx of the array base, of type t, as a float. Not collective.
 *   base  the array (host memory)
 *   idx   element index (not a byte offset)
 *   t     FM_DTYPE_BF16, FM_DTYPE_FP16 or FM_DTYPE_FP32
 *   Exact for every dtype (fp32 holds every bf16 and fp16 value). An unknown t gives NaN.
 */
float FMToFloat(const void *base, size_t idx, FMDType t)
{
  switch (t) {
  case FM_DTYPE_FP32: return ((const float *)base)[idx];
  case FM_DTYPE_BF16: return fm_bf16_to_float(((const uint16_t *)base)[idx]);
  case FM_DTYPE_FP16: return fm_half_to_float(((const uint16_t *)base)[idx]);
  }
  return fm_bits_to_float(0x7fc00000u);
}

/*
 * FMFromFloat - store x as element idx of the array base, of type t. Not collective.
 *   base  the array (host memory)
 *   idx   element index (not a byte offset)
 *   t     FM_DTYPE_BF16, FM_DTYPE_FP16 or FM_DTYPE_FP32
 *   x     the value; rounded to nearest even for bf16/fp16, values beyond the format's
 *         range become +-Inf, NaN stays NaN. An unknown t stores nothing.
 */
void FMFromFloat(void *base, size_t idx, FMDType t, float x)
{
  switch (t) {
  case FM_DTYPE_FP32: ((float *)base)[idx] = x; break;
  case FM_DTYPE_BF16: ((uint16_t *)base)[idx] = fm_float_to_bf16(x); break;
  case FM_DTYPE_FP16: ((uint16_t *)base)[idx] = fm_float_to_half(x); break;
  }
}

/* Exponent bits of element i all ones (Inf or NaN). */
static inline int nonfinite_at(const void *x, size_t i, FMDType t)
{
  if (t == FM_DTYPE_FP32) return (((const uint32_t *)x)[i] & 0x7f800000u) == 0x7f800000u;
  if (t == FM_DTYPE_FP16) return (((const uint16_t *)x)[i] & 0x7c00u) == 0x7c00u;
  return (((const uint16_t *)x)[i] & 0x7f80u) == 0x7f80u;
}

/* FMCPUFindNonFinite - see fmkernels.h: chunks of 64 Ki elements in parallel, each stopping at its first hit. */
FMErrorCode FMCPUFindNonFinite(const void *x, size_t n, FMDType t, int nthreads, size_t *first)
{
  const size_t chunk = (size_t)1 << 16, nch = (n + chunk - 1) / chunk;
  size_t best = n;
  FMValidPointer(first, 5);
  *first = n;
  if (n == 0) return FM_SUCCESS;
  FMValidPointer(x, 1);
  FMCheck(t == FM_DTYPE_BF16 || t == FM_DTYPE_FP16 || t == FM_DTYPE_FP32, MPI_COMM_SELF, FM_ERR_ARG_WRONG,
          "Argument 3 (t) is %d; expected FM_DTYPE_BF16, FM_DTYPE_FP16 or FM_DTYPE_FP32", (int)t);
#ifdef _OPENMP
  if (nthreads <= 0) nthreads = omp_get_max_threads();
  if (nch < 2) nthreads = 1; /* else every thread, idle ones too: a team of another size makes GCC's OpenMP end
                                 and restart threads (FMMaskThreads_Private, fmimpl.h) */
#pragma omp parallel for num_threads(nthreads) schedule(static) reduction(min : best)
#else
  (void)nthreads;
#endif
  for (size_t c = 0; c < nch; c++) {
    size_t i = c * chunk, e = i + chunk < n ? i + chunk : n;
    if (i >= best) continue; /* a lower hit is known to this thread */
    while (i < e && !nonfinite_at(x, i, t)) i++;
    if (i < e && i < best) best = i;
  }
  *first = best;
  return FM_SUCCESS;
}
