"""sass_step.py - count the instructions of the Hopper backward's dense step in a kernel's SASS,
per opcode, to compare two builds without a GPU (doc/performance.md, thirty-first session: the
80-row step went from 571 to 540 instructions).

Make the disassembly from a -cubin build with the flags of the build to compare:
    nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --use_fast_math -Iinclude \\
        -cubin -o b.cubin src/kernels/sm90/bwd_sm90.cu
    cuobjdump -sass b.cubin > b.sass
Then:
    python3 sass_step.py --function bwd_kernelILi128ELi2ELi80ELb0 b.sass [c.sass ...]
                                  per file: the step's instruction count and its opcodes, most
                                  frequent first
    python3 sass_step.py --self-test
                                  checks the reader on a made-up listing

The step: the loop closed by the first unconditional backward branch that a stage's release
(SYNCS.ARRIVE) precedes within 8 instructions, that is the consumer's per-step loop, from the
branch's target to the branch. Left out: the instructions under the forward conditional branch
inside the loop that jumps over the most of them (the partial tile's masking path), so that the
count is the dense path's (a head's first step still counts its few extra instructions).
Opcodes are counted without modifiers (HGMMA.64x80x16.F32.BF16 is HGMMA); a U prefix is kept
(UIADD3 apart from IADD3).
"""
import argparse
import collections
import re
import sys

INSN = re.compile(r"/\*([0-9a-f]{4,})\*/\s+(.*?)\s*;")
FUNC = re.compile(r"Function\s*:\s*(\S+)")


def read_listing(text, function=None):
    """[(offset, instruction text)] of the function whose mangled name holds `function` (the only
    or first one when None)."""
    out, cur, take = [], None, function is None
    for line in text.splitlines():
        m = FUNC.search(line)
        if m:
            if out and take:
                break
            cur = m.group(1)
            take = function is None or function in cur
            continue
        if not take:
            continue
        m = INSN.search(line)
        if m:
            out.append((int(m.group(1), 16), m.group(2)))
    return out


def opcode(ins):
    """The opcode of an instruction without its predicate and modifiers."""
    t = ins.split()
    if t and t[0].startswith("@"):
        t = t[1:]
    return t[0].split(".")[0] if t else ""


def dense_step(ins):
    """(head offset, branch offset, skipped count, [instruction texts]) of the step loop, or None."""
    at = {a: i for i, (a, _) in enumerate(ins)}
    back = None
    for i, (a, t) in enumerate(ins):
        m = re.fullmatch(r"BRA 0x([0-9a-f]+)", t)
        if m and int(m.group(1), 16) < a and any("SYNCS.ARRIVE" in ins[k][1] for k in range(max(0, i - 8), i)):
            back = (i, int(m.group(1), 16))
            break
    if back is None or back[1] not in at:
        return None
    bi, hi = back[0], at[back[1]]
    best = None
    for i in range(hi, bi):
        m = re.fullmatch(r"@!?U?P[0-9T] BRA 0x([0-9a-f]+)", ins[i][1])
        if m:
            j = at.get(int(m.group(1), 16))
            if j is not None and i < j <= bi and (best is None or j - i > best[1] - best[0]):
                best = (i, j)
    skip = set(range(best[0] + 1, best[1])) if best else set()
    body = [ins[i][1] for i in range(hi, bi + 1) if i not in skip]
    return ins[hi][0], ins[bi][0], len(skip), body


def report(name, ins, top):
    st = dense_step(ins)
    if st is None:
        print(f"{name}: no step loop found ({len(ins)} instructions read)")
        return 1
    head, br, skipped, body = st
    c = collections.Counter(opcode(t) for t in body)
    print(f"{name}: step {len(body)} instructions (loop {head:#x}..{br:#x}, {skipped} of the partial path left out)")
    print("  " + " ".join(f"{k} {v}" for k, v in c.most_common(top)))
    return 0


SAMPLE = """
        Function : _Z3fooILi1EEvv
        /*0000*/                   MOV R1, c[0x0][0x28] ;
        Function : _Z3barILi80EEvv
        /*0000*/                   S2R R0, SR_TID.X ;
        /*0010*/                   HGMMA.64x80x16.F32.BF16 R24, gdesc[UR4], RZ, !UPT ;
        /*0020*/                   @P0 BRA 0x60 ;
        /*0030*/                   LOP3.LUT R2, R2, R3, RZ, 0xc0, !PT ;
        /*0040*/                   LOP3.LUT R4, R4, R3, RZ, 0xc0, !PT ;
        /*0050*/                   ISETP.NE.AND P1, PT, R2, RZ, PT ;
        /*0060*/                   UIADD3 UR4, UR4, 0x1, URZ ;
        /*0070*/                   @!P1 BRA 0x90 ;
        /*0080*/                   FMUL R5, R5, R6 ;
        /*0090*/                   @!P0 SYNCS.ARRIVE.TRANS64.A1T0 RZ, [UR10], RZ ;
        /*00a0*/                   BRA 0x10 ;
        /*00b0*/                   EXIT ;
"""


def self_test():
    ins = read_listing(SAMPLE, "barILi80")
    assert len(ins) == 12 and ins[0] == (0, "S2R R0, SR_TID.X"), ins[:2]
    assert read_listing(SAMPLE)[0][1].startswith("MOV"), "no function named: the first"
    print("ok: the named function's instructions read, the others not")
    head, br, skipped, body = dense_step(ins)
    assert (head, br) == (0x10, 0xA0), (head, br)
    assert skipped == 3 and len(body) == 7, (skipped, body)
    print("ok: the loop from the backward branch after the release, the longest forward branch skipped")
    c = collections.Counter(opcode(t) for t in body)
    assert c["HGMMA"] == 1 and c["BRA"] == 3 and c["UIADD3"] == 1 and c["FMUL"] == 1 and "LOP3" not in c, c
    print("ok: opcodes without predicates or modifiers, the U prefix kept")
    assert dense_step(read_listing(SAMPLE, "fooILi1")) is None
    print("ok: no loop, no step")
    return 0


def main(argv=None):
    ap = argparse.ArgumentParser(description="Count the backward's dense step in SASS listings (see the module docstring).")
    ap.add_argument("files", nargs="*", help="cuobjdump -sass listings")
    ap.add_argument("--function", help="a part of the kernel's mangled name (default: the first function)")
    ap.add_argument("--top", type=int, default=30, help="opcodes to print (default 30)")
    ap.add_argument("--self-test", action="store_true", help="check the reader on a made-up listing")
    a = ap.parse_args(argv)
    if a.self_test:
        return self_test()
    if not a.files:
        ap.error("no listing given")
    rc = 0
    for f in a.files:
        with open(f) as fh:
            rc |= report(f, read_listing(fh.read(), a.function), a.top)
    return rc


if __name__ == "__main__":
    sys.exit(main())
