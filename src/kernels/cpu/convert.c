/*
 * convert.c - element conversions between the library's dtypes and fp32 (the CPU backend
 * stages everything in fp32). bf16 and fp16 are handled on their bit patterns: exact
 * widening, round-to-nearest-even narrowing, NaN and Inf preserved; no _Float16 needed.
 */
#include "fmcpu.h"

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
