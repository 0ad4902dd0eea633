#!/usr/bin/env python3
"""wgmma_gen.py - write wgmma_gen.cuh: the inline-PTX wgmma wrappers of the Hopper forward and
backward kernels, one per shape and input type (their operand lists are long and regular, so they
are generated).

  python3 wgmma_gen.py [OUT]    (default: wgmma_gen.cuh beside this script; '-' = stdout)

Wrappers, for each type in (bf16, f16):
  wgmma_ss_m64n<N>k16_<t>(d, da, db, accum)      d[N/2] = (accum ? d : 0) + A * B^T, A and B
                                                 K-major in shared memory (descriptors da, db),
                                                 N = 128 and 176 (forward), 32, 64 and 80 (backward;
                                                 80 also the forward's wide d = 256 tile)
  wgmma_ss_m64n<N>k16_<t>_t<a><b>(...)           the same with A (a = 1) and/or B (b = 1)
                                                 transposed (MN-major): N = 64 and 128 t11, N = 80
                                                 t10 and t01 (the backward's LSE and D terms:
                                                 bwd_sm90.cu, kXF; N = 64 t01 for d = 128's
                                                 64-row step), N = 128 t01
  wgmma_rs_m64n<N>k16_<t>(d, a, db)              d[N/2] += A * B, A in registers (a[4]), B MN-major
                                                 in shared memory (trans-b = 1), N = 64, 128, 256
  wgmma_rs_m64n72k16_<t>_sum(d, e, a, db)        the same at N = 72 with the accumulator's last 8
                                                 columns in e[4] (the forward's row sums by a
                                                 column of ones: mainloop.cuh, kOnesSum)
and, so that a kernel templated on its tile picks the form in one place, one template per family
over N and the type: wgmma_ss<N, F16>, wgmma_ss_t01<N, F16>, wgmma_ss_t10<N, F16>, wgmma_ss_t11<N, F16> and
wgmma_rs<N, F16>, with the wrappers' arguments.
The output is committed; `make` regenerates it when this script changes.
"""
import os
import sys

HEAD = """/* wgmma_gen.cuh - inline-PTX wgmma wrappers, one per shape and type (written by a small
 * generator script: the operand lists are long and regular). Include from sm90 kernels only. */
#pragma once
#include <stdint.h>
"""


def regs(first, n):
    return ", ".join("%%%d" % i for i in range(first, first + n))


def outs(n):
    return ", ".join('"+f"(d[%d])' % i for i in range(n))


def ss(t, n=128, ta=0, tb=0):
    nd = n // 2
    if ta and tb:
        what = "both MN-major (transposed)"
    elif ta:
        what = "A MN-major (transposed), B K-major"
    elif tb:
        what = "A K-major, B MN-major (transposed)"
    else:
        what = "A and B K-major"
    suffix = "_t%d%d" % (ta, tb) if ta or tb else ""
    return """
/* d[%d] = (accum ? d : 0) + A * B^T: m64n%dk16, %s, %s in shared memory. */
__device__ __forceinline__ void wgmma_ss_m64n%dk16_%s%s(float *d, uint64_t da, uint64_t db, int accum)
{
  asm volatile(
    "{\\n.reg .pred p;\\nsetp.ne.b32 p, %%%d, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s "
    "{%s}, %%%d, %%%d, p, 1, 1, %d, %d;\\n}\\n"
    : %s
    : "l"(da), "l"(db), "r"(accum));
}
""" % (nd, n, t, what, n, t, suffix, nd + 2, n, t, t, regs(0, nd), nd, nd + 1, ta, tb, outs(nd))


def rs(t, n):
    nd = n // 2
    return """
/* d[%d] += A * B: m64n%dk16, %s, A in registers, B MN-major in shared memory (trans-b = 1). */
__device__ __forceinline__ void wgmma_rs_m64n%dk16_%s(float *d, const uint32_t *a, uint64_t db)
{
  asm volatile(
    "{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n%dk16.f32.%s.%s "
    "{%s}, {%s}, %%%d, p, 1, 1, 1;\\n}\\n"
    : %s
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
""" % (nd, n, t, n, t, n, t, t, regs(0, nd), regs(nd, 4), nd + 4, outs(nd))


def rs_sum(t):
    return """
/* d[32], e[4] += A * B: m64n72k16, %s, A in registers (a[4]), B MN-major in shared memory
   (trans-b = 1); e: the accumulator's columns 64..71. */
__device__ __forceinline__ void wgmma_rs_m64n72k16_%s_sum(float *d, float *e, const uint32_t *a, uint64_t db)
{
  asm volatile(
    "{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n72k16.f32.%s.%s "
    "{%s}, {%s}, %%%d, p, 1, 1, 1;\\n}\\n"
    : %s, %s
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}
""" % (t, t, t, t, regs(0, 36), regs(36, 4), 40, outs(32), ", ".join('"+f"(e[%d])' % i for i in range(4)))


def dispatch(name, ns, params, args):
    """template <int N, bool F16> name(params): the wrapper of that N and type."""
    fam = "wgmma_rs" if name == "wgmma_rs" else "wgmma_ss"
    suffix = name[len(fam):]
    arms = []
    for n in ns:
        base = "%s_m64n%dk16" % (fam, n)
        arms.append("if constexpr (N == %d) {\n    if constexpr (F16) %s_f16%s(%s);\n    else %s_bf16%s(%s);\n  }" %
                    (n, base, suffix, args, base, suffix, args))
    cond = " || ".join("N == %d" % n for n in ns)
    return """
/* %s<N, F16>: the m64n<N>k16 wrapper above for fp16 (F16) or bf16; N = %s. */
template <int N, bool F16> __device__ __forceinline__ void %s(%s)
{
  static_assert(%s, "%s: no such shape");
  %s
}
""" % (name, ", ".join(str(n) for n in ns), name, params, cond, name, " else ".join(arms))


def main():
    text = HEAD + "".join(ss(t) + rs(t, 64) + rs(t, 128) for t in ("bf16", "f16"))
    text += "\n/* ---- the backward's shapes ---- */\n"
    text += "".join(ss(t, 64) + ss(t, 64, 1, 1) + ss(t, 64, 0, 1) for t in ("bf16", "f16"))
    text += "\n/* ---- the backward's 80-row step (d = 128): S^T, dP^T (t00) and dQ^T = K^T dS^T (t10) ---- */\n"
    text += "".join(ss(t, 80) + ss(t, 80, 1, 0) for t in ("bf16", "f16"))
    text += "".join(ss(t, 80, 0, 1) for t in ("bf16", "f16"))
    text += "\n/* ---- the backward at d = 256: S^T, dP^T over 32 queries (t00), dV, dK (t01) and dQ (t11) over 128 columns ---- */\n"
    text += "".join(ss(t, 32) + ss(t, 128, 0, 1) + ss(t, 128, 1, 1) for t in ("bf16", "f16"))
    text += "\n/* ---- the forward's d = 256 shape (P V with 64-key tiles) ---- */\n"
    text += "".join(rs(t, 256) for t in ("bf16", "f16"))
    text += "\n/* ---- the forward's wide tile at d = 128 (S = Q K^T over 176 keys) ---- */\n"
    text += "".join(ss(t, 176) for t in ("bf16", "f16"))
    text += "\n/* ---- the forward's P V with its row sums (d = 64: mainloop.cuh, kOnesSum) ---- */\n"
    text += "".join(rs_sum(t) for t in ("bf16", "f16"))
    text += "\n/* ---- one template per family, over the shapes above ---- */\n"
    ssp, ssa = "float *d, uint64_t da, uint64_t db, int accum", "d, da, db, accum"
    text += dispatch("wgmma_ss", (32, 64, 80, 128, 176), ssp, ssa)
    text += dispatch("wgmma_ss_t01", (64, 80, 128), ssp, ssa)
    text += dispatch("wgmma_ss_t10", (80,), ssp, ssa)
    text += dispatch("wgmma_ss_t11", (64, 128), ssp, ssa)
    text += dispatch("wgmma_rs", (64, 128, 256), "float *d, const uint32_t *a, uint64_t db", "d, a, db")
    text += """
/* wgmma_rs_sum<F16>: wgmma_rs_m64n72k16_<t>_sum for fp16 (F16) or bf16. */
template <bool F16> __device__ __forceinline__ void wgmma_rs_sum(float *d, float *e, const uint32_t *a, uint64_t db)
{
  if constexpr (F16) wgmma_rs_m64n72k16_f16_sum(d, e, a, db);
  else wgmma_rs_m64n72k16_bf16_sum(d, e, a, db);
}
"""
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "wgmma_gen.cuh")
    if out == "-":
        sys.stdout.write(text)
    else:
        with open(out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
