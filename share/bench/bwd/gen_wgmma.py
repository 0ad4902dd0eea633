#!/usr/bin/env python3
"""gen_wgmma.py - writes src/kernels/sm90/bwd_wgmma.cuh, the inline-PTX wgmma wrappers of the
Hopper backward (the operand lists are long and regular). Run from the repository root."""
TY = {"bf16": "bf16", "f16": "f16"}

def ss(n, ty, ta, tb):
    nreg = n // 2
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nreg))
    regs = ", ".join(f"%{i}" for i in range(nreg))
    name = f"fmbwd_ss_m64n{n}k16_{ty}_t{ta}{tb}"
    return f'''/* d[{nreg}] = (accum ? d : 0) + A * B: m64n{n}k16, {ty}, A and B in shared memory (trans-a {ta}, trans-b {tb}). */
__device__ __forceinline__ void {name}(float *d, uint64_t da, uint64_t db, int accum)
{{
  asm volatile(
    "{{\\n.reg .pred p;\\nsetp.ne.b32 p, %{nreg+2}, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} "
    "{{{regs}}}, %{nreg}, %{nreg+1}, p, 1, 1, {ta}, {tb};\\n}}\\n"
    : {outs}
    : "l"(da), "l"(db), "r"(accum));
}}
'''

def rs(n, ty):
    nreg = n // 2
    outs = ", ".join(f'"+f"(d[{i}])' for i in range(nreg))
    regs = ", ".join(f"%{i}" for i in range(nreg))
    name = f"fmbwd_rs_m64n{n}k16_{ty}"
    return f'''/* d[{nreg}] += A * B: m64n{n}k16, {ty}, A in registers, B MN-major in shared memory (trans-b 1). */
__device__ __forceinline__ void {name}(float *d, const uint32_t *a, uint64_t db)
{{
  asm volatile(
    "{{\\n.reg .pred p;\\nsetp.ne.b32 p, 1, 0;\\n"
    "wgmma.mma_async.sync.aligned.m64n{n}k16.f32.{ty}.{ty} "
    "{{{regs}}}, {{%{nreg}, %{nreg+1}, %{nreg+2}, %{nreg+3}}}, %{nreg+4}, p, 1, 1, 1;\\n}}\\n"
    : {outs}
    : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db));
}}
'''

out = ['''/* bwd_wgmma.cuh - inline-PTX wgmma wrappers of the Hopper backward, written by
 * share/bench/bwd/gen_wgmma.py (do not edit by hand). Include from sm_90a device code only. */
#pragma once
#include <stdint.h>
''']
for ty in ("bf16", "f16"):
    out.append(ss(64, ty, 0, 0))
    out.append(ss(64, ty, 1, 1))
    out.append(rs(64, ty))
    out.append(rs(128, ty))
open("src/kernels/sm90/bwd_wgmma.cuh", "w").write("\n".join(out))
