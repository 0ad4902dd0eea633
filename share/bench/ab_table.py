"""ab_table.py - the table of an A/B run of the kernel harnesses: several builds, each timed in
several alternated rounds in one device call, compared case by case.

    python3 ab_table.py base=ab_base.txt new=ab_new.txt [opt=ab_opt.txt ...]
    python3 ab_table.py base=base1.csv base=base2.csv new=new1.csv new=new2.csv
    python3 ab_table.py --self-test

Each argument is LABEL=FILE; the first label is the baseline, and a label given again adds that
file's times to the build's. A file holds rounds of one build, in either of two forms:
- the harness's "bench" lines (share/bench/bwd/bwd_bench and share/bench/fwd/fwd_bench print
  them), in any number, other lines ignored. A line's case is everything between "bench" and its
  time, the first number followed by "ms" (for example "S=8192 B=16 full", or "S=8192 B=16 H=32
  kv=32 d=128 causal");
- fmbench's -csv file (a header with mask, seqlen, pass and ms): the case is "mask S=seqlen pass".
A case met in several rounds has one time per round.

Printed, as a Markdown table in the order the baseline's file first names the cases: per build
the median time in ms over its rounds and their range, and per other build the baseline's median
over its own (above 1: faster than the baseline). Then per other build the geometric mean, the
lowest and the highest of those ratios over the cases both have. A case missing from a build
reads "-". No numpy needed.

share/bench/bwd/ab.sh, share/bench/fwd/ab.sh and share/bench/ab_fwd.sh (fmbench) print their
tables with it.
"""
import argparse
import csv
import math
import sys


def parse(lines, out=None):
    """{case: [ms, ...]} from one build's output (added to out), cases in first-seen order (dicts
    keep it): bench lines, or an fmbench CSV."""
    out = {} if out is None else out
    lines = list(lines)
    if lines and lines[0].startswith("mask,"):
        for r in csv.DictReader(lines):
            if {"mask", "seqlen", "pass", "ms"} <= set(r) and r["ms"] not in (None, ""):
                out.setdefault("%s S=%s %s" % (r["mask"], r["seqlen"], r["pass"]), []).append(float(r["ms"]))
        return out
    for line in lines:
        tok = line.split()
        if not tok or tok[0] != "bench":
            continue
        for i in range(1, len(tok) - 1):
            if tok[i + 1] != "ms":
                continue
            try:
                ms = float(tok[i])
            except ValueError:
                continue
            out.setdefault(" ".join(tok[1:i]), []).append(ms)
            break
    return out


def median(v):
    s = sorted(v)
    n = len(s)
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def fmt_cell(v):
    if not v:
        return "-"
    if len(v) == 1:
        return "%.3f" % v[0]
    return "%.3f (%.3f-%.3f)" % (median(v), min(v), max(v))


def table(builds):
    """builds: [(label, {case: [ms]})], the baseline first. Returns the lines to print."""
    base_label, base = builds[0]
    cases = list(base)
    for _, d in builds[1:]:
        cases += [c for c in d if c not in cases]
    head = ["case"] + ["%s ms" % lab for lab, _ in builds] + ["%s / %s" % (base_label, lab) for lab, _ in builds[1:]]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    ratios = [[] for _ in builds[1:]]
    for c in cases:
        row = [c] + [fmt_cell(d.get(c)) for _, d in builds]
        for k, (_, d) in enumerate(builds[1:]):
            if base.get(c) and d.get(c):
                r = median(base[c]) / median(d[c])
                ratios[k].append(r)
                row.append("%.3f" % r)
            else:
                row.append("-")
        lines.append("| " + " | ".join(row) + " |")
    for k, (lab, _) in enumerate(builds[1:]):
        r = ratios[k]
        if r:
            g = math.exp(sum(math.log(x) for x in r) / len(r))
            lines.append("%s / %s over %d cases: geometric mean %.3f, lowest %.3f, highest %.3f (above 1: %s faster)"
                         % (base_label, lab, len(r), g, min(r), max(r), lab))
        else:
            lines.append("%s / %s: no case in common" % (base_label, lab))
    return lines


def self_test():
    """Made-up lines through the reader and the table; one "ok:" or "FAIL:" line per check."""
    results = []

    def check(cond, what):
        results.append((what, bool(cond)))

    bwd = ["bench S=8192   B=16  full                75.508 ms    582.5 TFLOP/s (min 74.985 max 78.460 ms) rho 0.0000  det  inf",
           "check: whatever 1.0 ms", "bench S=8192   B=16  causal GQA4         41.000 ms    540.7 TFLOP/s (min 41.0 max 41.4 ms)",
           "bench S=8192   B=16  full                75.000 ms    585.0 TFLOP/s", "bench S=8192   B=16  full   76.000 ms"]
    d = parse(bwd)
    check(list(d) == ["S=8192 B=16 full", "S=8192 B=16 causal GQA4"], "bwd_bench lines: the cases, in order")
    check(d["S=8192 B=16 full"] == [75.508, 75.0, 76.0], "bwd_bench lines: one time per round")
    fwd = parse(["bench S=32768 B=4   H=32  kv=32  d=128 causal            15.340 ms   582.4 TFLOP/s (min 15.3 max 15.4 ms) rho 0.49 sm90"])
    check(fwd == {"S=32768 B=4 H=32 kv=32 d=128 causal": [15.34]}, "fwd_bench lines")
    check(median([3.0, 1.0, 2.0]) == 2.0 and median([4.0, 1.0, 2.0, 3.0]) == 2.5, "medians")
    base = {"a": [10.0, 10.2, 9.9], "b": [20.0, 20.0, 20.0]}
    new = {"a": [9.0, 9.1, 8.9], "c": [5.0]}
    out = table([("main", base), ("new", new)])
    check(out[0] == "| case | main ms | new ms | main / new |", "the header")
    check(out[2] == "| a | 10.000 (9.900-10.200) | 9.000 (8.900-9.100) | 1.111 |", "a row: medians, ranges, the ratio")
    check(out[3] == "| b | 20.000 (20.000-20.000) | - | - |", "a case the new build lacks")
    check(out[4] == "| c | - | 5.000 | - |", "a case only the new build has, one round")
    check(out[5].startswith("main / new over 1 cases: geometric mean 1.111, lowest 1.111, highest 1.111"), "the summary")
    rows = ["mask,seqlen,batch,heads,head_dim,ms,tflops,block_sparsity,density,path,mask_batch,pass,setup_ms,setup_bounds_ms",
            "full,8192,16,32,128,28.0,600.00,0.0,1.0,sm90,1,fwd,0.125,0.0625", "full,8192,16,32,128,80.0,500.00,0.0,1.0,sm90,1,bwd,0.1,0.1"]
    two = parse(rows[:2] + ["full,8192,16,32,128,30.0,560.00,0.0,1.0,sm90,1,fwd,0.125,0.0625"], parse(rows))
    check(two == {"full S=8192 fwd": [28.0, 28.0, 30.0], "full S=8192 bwd": [80.0]}, "fmbench CSVs, two files into one build")
    three = table([("A", {"x": [2.0], "y": [4.0]}), ("C", {"x": [1.0], "y": [4.0]}), ("L", {"x": [4.0], "y": [2.0]})])
    check(three[0] == "| case | A ms | C ms | L ms | A / C | A / L |" and three[2].endswith("| 2.000 | 0.500 |"), "three builds")
    check(abs(float(three[-1].split("geometric mean ")[1].split(",")[0]) - 1.0) < 1e-9, "a geometric mean of 0.5 and 2")
    for what, good in results:
        print(("ok: " if good else "FAIL: ") + what)
    return 0 if all(good for _, good in results) else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("builds", nargs="*", metavar="LABEL=FILE", help="each build's output, the baseline first")
    ap.add_argument("--self-test", action="store_true", help="check the reader and the table on made-up lines")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if len(a.builds) < 2:
        ap.error("give at least two builds, LABEL=FILE each (the baseline first)")
    builds = {}
    for arg in a.builds:
        lab, sep, path = arg.partition("=")
        if not sep or not lab or not path:
            ap.error("%s: expected LABEL=FILE" % arg)
        d = builds.setdefault(lab, {})
        n = sum(len(v) for v in d.values())
        try:
            with open(path, newline="") as f:
                parse(f.read().splitlines(), d)
        except OSError as e:
            ap.error("%s: %s" % (path, e.strerror))
        if sum(len(v) for v in d.values()) == n:
            print("ab_table.py: %s has no bench lines or fmbench rows" % path, file=sys.stderr)
    builds = list(builds.items())
    if len(builds) < 2:
        ap.error("give at least two builds (labels)")
    print("\n".join(table(builds)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
