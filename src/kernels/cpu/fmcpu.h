/*
 * fmcpu.h - private helpers of the CPU backend (src/kernels/cpu): bf16/fp16 <-> fp32
 * element conversions done on the bit patterns (round-to-nearest-even, NaN and Inf kept,
 * no _Float16), and row conversions used to stage tensors in fp32. Not installed.
 */
#ifndef FLASHMASK_CPU_FMCPU_H
#define FLASHMASK_CPU_FMCPU_H

#include <flashmask/private/fmkernels.h>
#include <flashmask/private/fmtile.h>
#include <stdint.h>
#include <string.h>

static inline float fm_bits_to_float(uint32_t u)
{
  float f;
  memcpy(&f, &u, 4);
  return f;
}

static inline uint32_t fm_float_to_bits(float f)
{
  uint32_t u;
  memcpy(&u, &f, 4);
  return u;
}

/* bf16 -> fp32: exact (bf16 is the top half of an fp32). */
static inline float fm_bf16_to_float(uint16_t h) { return fm_bits_to_float((uint32_t)h << 16); }

/* fp32 -> bf16, round to nearest even; NaN stays a (quiet) NaN with its sign, Inf stays Inf. */
static inline uint16_t fm_float_to_bf16(float f)
{
  uint32_t u = fm_float_to_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  return (uint16_t)(u >> 16);
}

/* fp16 -> fp32: exact for normals, subnormals, zeros and Inf; NaN gives a quiet NaN keeping the payload. */
static inline float fm_half_to_float(uint16_t h)
{
  uint32_t s = (uint32_t)(h & 0x8000u) << 16, e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  if (e == 0) {
    float f = (float)m * 0x1p-24f; /* zero or subnormal: m * 2^-24, exact */
    return s ? -f : f;
  }
  if (e == 31) return fm_bits_to_float(s | 0x7f800000u | (m ? 0x400000u | (m << 13) : 0u)); /* Inf, or a quiet NaN */
  return fm_bits_to_float(s | ((e + 112u) << 23) | (m << 13));
}

/* fp32 -> fp16, round to nearest even; overflow gives Inf, NaN a quiet NaN, tiny values subnormals or zero. */
static inline uint16_t fm_float_to_half(float f)
{
  uint32_t u = fm_float_to_bits(f), s = (u >> 16) & 0x8000u, x = u & 0x7fffffffu, e, h, rem;
  if (x >= 0x7f800000u) return (uint16_t)(s | (x > 0x7f800000u ? 0x7e00u | ((x >> 13) & 0x3ffu) : 0x7c00u));
  if (x >= 0x477ff000u) return (uint16_t)(s | 0x7c00u); /* >= 65520 rounds to Inf */
  e = x >> 23;
  if (e >= 113) { /* normal fp16: rebias the exponent, round the 13 dropped bits */
    h = (x - 0x38000000u) >> 13;
    rem = x & 0x1fffu;
    h += (rem > 0x1000u) || (rem == 0x1000u && (h & 1u));
    return (uint16_t)(s | h);
  }
  if (e < 102) return (uint16_t)s; /* below 2^-25: rounds to zero */
  { /* subnormal fp16: value = m * 2^(e - 150), in units of 2^-24 that is m >> (126 - e) */
    uint32_t m = (x & 0x7fffffu) | 0x800000u, sh = 126u - e, half = 1u << (sh - 1);
    h = m >> sh;
    rem = m & ((1u << sh) - 1u);
    h += (rem > half) || (rem == half && (h & 1u));
    return (uint16_t)(s | h); /* h == 0x400 is the smallest normal, as it should be */
  }
}

/* Convert n elements starting at element off of base (type t) into dst. */
static inline void fm_row_to_float(const void *base, size_t off, FMDType t, float *restrict dst, int n)
{
  if (t == FM_DTYPE_FP32) {
    memcpy(dst, (const float *)base + off, sizeof(float) * (size_t)n);
  } else if (t == FM_DTYPE_BF16) {
    const uint16_t *restrict s = (const uint16_t *)base + off;
    for (int i = 0; i < n; i++) dst[i] = fm_bits_to_float((uint32_t)s[i] << 16);
  } else {
    const uint16_t *restrict s = (const uint16_t *)base + off;
    for (int i = 0; i < n; i++) dst[i] = fm_half_to_float(s[i]);
  }
}

/* Convert n floats into base (type t) starting at element off. */
static inline void fm_row_from_float(void *base, size_t off, FMDType t, const float *restrict src, int n)
{
  if (t == FM_DTYPE_FP32) {
    memcpy((float *)base + off, src, sizeof(float) * (size_t)n);
  } else if (t == FM_DTYPE_BF16) {
    uint16_t *restrict d = (uint16_t *)base + off;
    for (int i = 0; i < n; i++) d[i] = fm_float_to_bf16(src[i]);
  } else {
    uint16_t *restrict d = (uint16_t *)base + off;
    for (int i = 0; i < n; i++) d[i] = fm_float_to_half(src[i]);
  }
}

#endif
