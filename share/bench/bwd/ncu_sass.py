"""ncu_sass.py - read an Nsight Compute SASS-level source export and say where a kernel's warps
issue and wait, for comparing two kernels instruction by instruction (ours and FA4's backward
in doc/performance.md, twenty-sixth session).

Make the export from a report that has the SourceCounters section:
    ncu -k regex:bwd_kernel -s 1 -c 1 --section SourceCounters --section WarpStateStats \\
        -o ours bwd_bench prof 8192 0
    ncu --import ours.ncu-rep --page source --print-source sass --csv > ours.csv
Then:
    python3 ncu_sass.py ours.csv [fa4.csv ...]      per opcode: share of executed instructions
                                                    and of stall samples; the top (opcode,
                                                    reason) pairs
    python3 ncu_sass.py --hot 0.3 ours.csv          every instruction with at least 0.3% of the
                                                    samples, in address order, with its top
                                                    three stall reasons ("other": reasons the
                                                    export has no column for, the wgmma waits)
    python3 ncu_sass.py --range 2100 2700 fa4.csv   the instructions at those offsets (hex, from
                                                    the kernel's first instruction)
    python3 ncu_sass.py --lines k.sass ours.csv     per source line (file:line) of the kernel: its
                                                    share of the samples and of the executed
                                                    instructions, and its top stall reason
    python3 ncu_sass.py --wavefronts 3.36e6 ours.csv per opcode: shared-memory wavefronts per
                                                    unit (here per step: the run's steps) and
                                                    per executed warp instruction, against the
                                                    export's ideal count
    python3 ncu_sass.py --diff 3.36e6 fa4.csv ours.csv  two kernels that did the same work:
                                                    executed warp instructions per unit for each,
                                                    per opcode family (the name before the first
                                                    dot), the largest differences first
    python3 ncu_sass.py --self-test                 checks the reader on a made-up export
Offsets are from the kernel's first instruction, so two reports of one build line up.
--lines reads the kernel's disassembly with line information, from a -lineinfo build of the
same source and flags (same nvcc): cuobjdump -xelf all x.o; nvdisasm -g x.sm_90a.cubin > k.sass
(the whole cubin; --function picks the kernel by a part of its mangled name, for example
'bwd_kernelILi128ELi2ELi64ELb0', when it holds several).
"""
import argparse
import collections
import csv
import io
import re
import sys

SAMPLES = "Warp Stall Sampling (All Samples)"
EXECUTED = "Instructions Executed"
WAVES = "L1 Wavefronts Shared"
WAVES_IDEAL = "L1 Wavefronts Shared Ideal"


def load(f):
    """The instruction rows of one export: dicts keyed by the header row (the line after the
    kernel's name), each with 'offset' (int) added."""
    rows = list(csv.reader(f))
    hi = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
    head = rows[hi]
    out = []
    for r in rows[hi + 1:]:
        if len(r) < len(head) // 2 or not r[0].startswith("0x"):
            continue
        out.append(dict(zip(head, r)))
    if not out:
        raise ValueError("no instruction rows (was the export made with --page source --print-source sass --csv?)")
    base = int(out[0]["Address"], 16)
    for d in out:
        d["offset"] = int(d["Address"], 16) - base
    return out


def num(d, k):
    v = d.get(k, "") or "0"
    try:
        return float(v.replace(",", ""))
    except ValueError:
        return 0.0


def opcode(src):
    s = re.sub(r"^\s*@!?U?P[0-9T]\s+", "", src.strip())
    return s.split()[0].rstrip(";") if s else "?"


def reasons(d):
    return [k for k in d if k.startswith("stall_") and "Not Issued" not in k]


def summary(rows, top=25):
    """Lines: per opcode the share of executed instructions and of samples; then the (opcode,
    reason) pairs with the most samples."""
    ins, smp, pair = collections.Counter(), collections.Counter(), collections.Counter()
    for d in rows:
        o = opcode(d["Source"])
        ins[o] += num(d, EXECUTED)
        smp[o] += num(d, SAMPLES)
        for k in reasons(d):
            pair[(o, k[6:])] += num(d, k)
    ti, ts = sum(ins.values()) or 1.0, sum(smp.values()) or 1.0
    lines = ["instructions executed %.4g, stall samples %.4g" % (ti, ts)]
    for o, v in ins.most_common(top):
        lines.append("  %-32s inst %6.2f%%  samples %6.2f%%" % (o, 100 * v / ti, 100 * smp[o] / ts))
    lines.append("  top (opcode, reason), % of samples:")
    for (o, k), v in pair.most_common(top):
        lines.append("    %-32s %-20s %6.2f%%" % (o, k, 100 * v / ts))
    return lines


def hot(rows, threshold):
    ts = sum(num(d, SAMPLES) for d in rows) or 1.0
    lines = []
    for d in rows:
        s = num(d, SAMPLES)
        if 100 * s / ts < threshold:
            continue
        each = [(num(d, k), k[6:]) for k in reasons(d)]
        tops = sorted(each, reverse=True)[:3]
        rest = s - sum(v for v, _ in each)  # reasons the export has no column for (the wgmma ones)
        if rest > 0:
            tops.append((rest, "other"))
        lines.append("%05x %5.2f%% ex=%8.1fM  %-60s %s" % (d["offset"], 100 * s / ts, num(d, EXECUTED) / 1e6, d["Source"].strip()[:60],
                                                         " ".join("%s:%.2f" % (k, 100 * v / ts) for v, k in tops if v)))
    return lines


def span(rows, lo, hi):
    ts = sum(num(d, SAMPLES) for d in rows) or 1.0
    return ["%05x %5.2f%% %7.1fM %s" % (d["offset"], 100 * num(d, SAMPLES) / ts, num(d, EXECUTED) / 1e6, d["Source"].strip()[:90])
            for d in rows if lo <= d["offset"] < hi]


def wavefronts(rows, units):
    """Lines: per opcode with shared-memory wavefronts (loads, stores, and the wgmma operand
    reads ncu counts there), the wavefronts per unit of work (units: how many, for example the
    run's steps), per executed warp instruction, and the ideal per instruction; then the total."""
    wf, ideal, ins = collections.Counter(), collections.Counter(), collections.Counter()
    for d in rows:
        w = num(d, WAVES)
        if w:
            o = opcode(d["Source"])
            wf[o] += w
            ideal[o] += num(d, WAVES_IDEAL)
            ins[o] += num(d, EXECUTED)
    lines = ["%-32s %14s %10s %10s" % ("opcode", "per unit", "per inst", "ideal")]
    for o, v in wf.most_common():
        lines.append("%-32s %14.1f %10.2f %10.2f" % (o, v / units, v / (ins[o] or 1.0), ideal[o] / (ins[o] or 1.0)))
    lines.append("%-32s %14.1f" % ("total", sum(wf.values()) / units))
    return lines


def diff(rows_a, rows_b, units, least=1.0):
    """Lines: per opcode family, both kernels' executed warp instructions per unit and B - A,
    largest |B - A| first (families under `least` a unit either way left out); then the totals."""
    def count(rows):
        c = collections.Counter()
        for d in rows:
            c[opcode(d["Source"]).split(".")[0]] += num(d, EXECUTED)
        return c
    ca, cb = count(rows_a), count(rows_b)
    lines = ["%-14s %10s %10s %10s" % ("family", "A", "B", "B - A")]
    for o in sorted(set(ca) | set(cb), key=lambda o: (-abs(cb[o] - ca[o]), o)):
        a, b = ca[o] / units, cb[o] / units
        if abs(b - a) >= least:
            lines.append("%-14s %10.1f %10.1f %+10.1f" % (o, a, b, b - a))
    ta, tb = sum(ca.values()) / units, sum(cb.values()) / units
    lines.append("%-14s %10.1f %10.1f %+10.1f" % ("total", ta, tb, tb - ta))
    return lines


def line_map(f, function=None):
    """Offset -> 'file:line' from nvdisasm -g output: the '//## File "...", line N' markers
    before each instruction, in the section of the function whose name holds function (the
    first section when None)."""
    m, cur, inside, seen = {}, "?", False, False
    for ln in f:
        if ln.lstrip().startswith(".section"):  # every section ends the last; only code sections count
            if seen and inside:
                break
            text = ".text." in ln
            name = ln.split(".text.", 1)[1].split(",")[0] if text else ""
            inside = text and (function is None or function in name)
            seen = inside
            cur = "?"
            continue
        if not inside:
            continue
        g = re.search(r'//## File "([^"]+)", line (\d+)', ln)
        if g:
            cur = "%s:%s" % (g.group(1).rsplit("/", 1)[-1], g.group(2))
            continue
        o = re.match(r"\s*/\*([0-9a-f]{4,})\*/\s*(\S*)", ln)
        if o and not o.group(2).startswith("."):  # not a data directive (.byte, .word, ...)
            m[int(o.group(1), 16)] = cur
    if not m:
        raise ValueError("no instructions with offsets in the disassembly%s" % (" for '%s'" % function if function else ""))
    return m


def by_line(rows, lmap, top=30):
    """Per source line: share of samples and of executed instructions, the top stall reason."""
    ts = sum(num(d, SAMPLES) for d in rows) or 1.0
    ti = sum(num(d, EXECUTED) for d in rows) or 1.0
    smp, ins, why = collections.Counter(), collections.Counter(), collections.defaultdict(collections.Counter)
    for d in rows:
        k = lmap.get(d["offset"], "?")
        smp[k] += num(d, SAMPLES)
        ins[k] += num(d, EXECUTED)
        for r in reasons(d):
            why[k][r[6:]] += num(d, r)
    lines = ["%-28s %8s %8s  %s" % ("source line", "samples", "inst", "top reason")]
    for k, v in smp.most_common(top):
        r = why[k].most_common(1)
        lines.append("%-28s %7.2f%% %7.2f%%  %s" % (k, 100 * v / ts, 100 * ins[k] / ti, ("%s %.2f%%" % (r[0][0], 100 * r[0][1] / ts)) if r and r[0][1] else "-"))
    return lines


def self_test():
    head = ["Address", "Source", SAMPLES, "Warp Stall Sampling (Not-issued Samples)", EXECUTED, "stall_long_sb", "stall_wait",
            "stall_long_sb (Not Issued)", WAVES, WAVES_IDEAL]
    body = [["0x100", "  HGMMA.64x80x16.F32.BF16 R0, gdesc[UR4], RZ", "10", "9", "100", "2", "8", "2", "900", "900"],
            ["0x110", "  @!P0 BRA 0x100", "30", "30", "100", "30", "0", "30", "0", "0"],
            ["0x120", "  FFMA.FTZ R1, R2, UR9, -R4", "60", "50", "800", "0", "60", "0", "0", "0"]]
    text = '"Kernel Name","k"\n' + "\n".join(",".join('"%s"' % c for c in r) for r in [head] + body) + "\n"
    rows = load(io.StringIO(text))
    ok = True

    def check(cond, what):
        nonlocal ok
        print(("ok: " if cond else "FAIL: ") + what)
        ok = ok and cond

    check([d["offset"] for d in rows] == [0, 16, 32], "offsets from the first instruction")
    check([opcode(d["Source"]) for d in rows] == ["HGMMA.64x80x16.F32.BF16", "BRA", "FFMA.FTZ"], "opcodes, predicates stripped")
    s = summary(rows)
    check(any(l.split()[0] == "FFMA.FTZ" and "inst  80.00%" in l and "samples  60.00%" in l for l in s[1:]), "per-opcode shares")
    check(any("BRA" in l and "long_sb" in l and "30.00%" in l for l in s), "the (opcode, reason) pairs")
    h = hot(rows, 25)
    check(len(h) == 2 and h[0].startswith("00010") and "long_sb:30.00" in h[0], "hot instructions above the threshold")
    check(len(span(rows, 0x10, 0x20)) == 1, "an offset range")
    other = [dict(d) for d in rows]
    other[2]["Source"] = "  FFMA R1, R2, R3, R4"
    other[2][EXECUTED] = "1000"
    other[1][EXECUTED] = "0"
    df = diff(rows, other, 100)
    check([l.split() for l in df[1:]] == [["FFMA", "8.0", "10.0", "+2.0"], ["BRA", "1.0", "0.0", "-1.0"],
                                          ["total", "10.0", "11.0", "+1.0"]],
          "two kernels per opcode family and unit, largest difference first, HGMMA (no difference) left out")
    w = wavefronts(rows, 10)
    check(len(w) == 3 and w[1].split()[:4] == ["HGMMA.64x80x16.F32.BF16", "90.0", "9.00", "9.00"] and w[2].split() == ["total", "90.0"],
          "shared-memory wavefronts per unit and per instruction, only opcodes that have any")
    dis = """\t.section\t.nv.info,"",@"SHT_CUDA_INFO"
        /*0000*/ \t.byte\t0x04, 0x11
\t.section\t.text._Z5otherv,"ax",@progbits
\t//## File "/x/other.cu", line 9
        /*0100*/                   NOP ;
\t.section\t.text._Z10bwd_kernelILi128EEv,"ax",@progbits
\t//## File "/src/kernels/sm90/bwd_sm90.cu", line 267
        /*0000*/                   HGMMA.64x80x16.F32.BF16 R0, gdesc[UR4], RZ ;
\t//## File "/src/kernels/sm90/ptx.cuh", line 30
        /*0010*/              @!P0 BRA 0x0 ;
\t//## File "/src/kernels/sm90/bwd_sm90.cu", line 267
        /*0020*/                   FFMA.FTZ R1, R2, UR9, -R4 ;
\t.section\t.nv.global.init,"aw",@progbits
        /*0000*/ \t.byte\t0x01, 0x02
"""
    lm = line_map(io.StringIO(dis), "bwd_kernelILi128")
    check(lm == {0: "bwd_sm90.cu:267", 16: "ptx.cuh:30", 32: "bwd_sm90.cu:267"}, "the line map of the chosen function only")
    check(line_map(io.StringIO(dis)) == {0x100: "other.cu:9"}, "no function named: the first code section, data sections left out")
    bl = by_line(rows, lm)
    check(bl[1].split()[0] == "bwd_sm90.cu:267" and "70.00%" in bl[1] and "90.00%" in bl[1] and "wait 68.00%" in bl[1],
          "per source line: samples, instructions and the top reason summed over its instructions")
    check(bl[2].split()[0] == "ptx.cuh:30" and "long_sb 30.00%" in bl[2], "the second line")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("csv", nargs="*", help="ncu --page source --print-source sass --csv exports")
    ap.add_argument("--hot", type=float, metavar="PCT", help="list the instructions with at least PCT%% of the stall samples")
    ap.add_argument("--range", nargs=2, metavar=("LO", "HI"), help="list the instructions at offsets [LO, HI) (hex)")
    ap.add_argument("--lines", metavar="SASS", help="nvdisasm -g output of the kernel (a -lineinfo build): samples per source line")
    ap.add_argument("--function", metavar="PART", help="with --lines: the kernel whose mangled name holds PART")
    ap.add_argument("--top", type=int, default=30, help="with --lines: how many source lines (default 30)")
    ap.add_argument("--wavefronts", type=float, metavar="UNITS",
                    help="shared-memory wavefronts per opcode, per UNITS (for example the run's steps) and per instruction")
    ap.add_argument("--diff", type=float, metavar="UNITS",
                    help="two exports of kernels that did the same work: executed instructions per opcode family and UNITS, and B - A")
    ap.add_argument("--self-test", action="store_true", help="check the reader on a made-up export")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.csv:
        ap.error("give at least one export")
    if a.diff:
        if len(a.csv) != 2:
            ap.error("--diff compares exactly two exports")
        with open(a.csv[0], newline="") as fa, open(a.csv[1], newline="") as fb:
            print("A = %s, B = %s, per %g units" % (a.csv[0], a.csv[1], a.diff))
            print("\n".join(diff(load(fa), load(fb), a.diff)))
        return 0
    for p in a.csv:
        with open(p, newline="") as f:
            rows = load(f)
        print("=====", p)
        if a.lines:
            with open(a.lines) as f:
                lines = by_line(rows, line_map(f, a.function), a.top)
        elif a.range:
            lines = span(rows, int(a.range[0], 16), int(a.range[1], 16))
        elif a.wavefronts:
            lines = wavefronts(rows, a.wavefronts)
        elif a.hot is not None:
            lines = hot(rows, a.hot)
        else:
            lines = summary(rows)
        print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
