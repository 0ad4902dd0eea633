"""step_fit.py - where a mask's backward time goes: fit fmbench's backward times to

    time = fixed + a x (unmasked steps) + c x (partial steps)

per step size, by least squares over the masks and lengths of one or more fmbench runs. The step
counts come from the same runs' "visits" lines (fmbench -visits: the backward's step rows on
sm_90 and, per step size, its work items and its visited unmasked and partial steps over the
batch). At a fixed number of tokens, heads and head dim every mask has the same number of work
items, so the fixed part holds the memory passes before and after the kernel and each item's
own costs (doc/performance.md, twenty-sixth session).

    fmbench -pass bwd -visits -masks all -seqlen 8192,32768 ... > run.txt
    python3 share/bench/bwd/step_fit.py run.txt [more runs ...]
    python3 share/bench/bwd/step_fit.py --self-test

Each file's masks are grouped by the step rows their visits line names (the plan's choice,
-fm_sm90_bwd_rows where the run forced it); a group needs at least four masks. Printed per group:
the three terms, the rms error, and per mask the measured and fitted time and the shares of the
fixed, unmasked and partial parts. Runs of different shapes (tokens, heads, head dim, GPU) must
not be mixed in one fit. No numpy needed.
"""
import argparse
import collections
import re
import sys

VISITS = re.compile(r"^visits\s+(\S+)\s+(\d+)\s+(\d+)\s+bwd rows (\d+)(.*)$")
PART = re.compile(r";\s*(\d+): items (\d+) unmasked (\d+) partial (\d+)")


def parse(lines, tag=""):
    """{(tag, mask, S): {'rows': R, 'counts': {BM: (items, unmasked, partial)}, 'ms': t}} from one
    fmbench output (its visits lines and its timed bwd lines)."""
    out = collections.OrderedDict()
    for line in lines:
        m = VISITS.match(line.strip())
        if m:
            key = (tag, m.group(1), int(m.group(2)))
            d = out.setdefault(key, {})
            d["rows"] = int(m.group(4))
            d["counts"] = {int(p[0]): (float(p[1]), float(p[2]), float(p[3])) for p in PART.findall(m.group(5))}
            continue
        w = line.split()
        if len(w) > 5 and w[3] == "bwd":
            try:
                out.setdefault((tag, w[0], int(w[1])), {})["ms"] = float(w[4])
            except ValueError:
                pass
    return out


def solve3(a, b):
    """x with a x = b for a 3 x 3 system (Gaussian elimination with partial pivoting)."""
    m = [list(a[i]) + [b[i]] for i in range(3)]
    for c in range(3):
        p = max(range(c, 3), key=lambda r: abs(m[r][c]))
        if abs(m[p][c]) < 1e-300:
            raise ValueError("singular system: the masks do not separate the three terms")
        m[c], m[p] = m[p], m[c]
        for r in range(3):
            if r != c:
                f = m[r][c] / m[c][c]
                m[r] = [x - f * y for x, y in zip(m[r], m[c])]
    return [m[i][3] / m[i][i] for i in range(3)]


def fit(rows):
    """Least squares of ms = f + a u + c p over rows [(u, p, ms)] (u, p in millions)."""
    x = [(1.0, u, p) for u, p, _ in rows]
    y = [t for _, _, t in rows]
    ata = [[sum(xi[i] * xi[j] for xi in x) for j in range(3)] for i in range(3)]
    aty = [sum(xi[i] * yi for xi, yi in zip(x, y)) for i in range(3)]
    coef = solve3(ata, aty)
    pred = [coef[0] + coef[1] * u + coef[2] * p for u, p, _ in rows]
    rms = (sum((q - t) ** 2 for q, t in zip(pred, y)) / len(y)) ** 0.5
    return coef, pred, rms


def report(data):
    groups = collections.defaultdict(list)
    for key, d in data.items():
        if "ms" in d and "rows" in d and d["rows"] in d.get("counts", {}):
            groups[d["rows"]].append(key)
    lines = []
    if not groups:
        return ["step_fit: no mask with both a visits line and a timed bwd line"]
    for r in sorted(groups):
        keys = groups[r]
        if len(keys) < 4:
            lines.append("%d-row steps: %d masks, too few to fit three terms" % (r, len(keys)))
            continue
        rows = [(data[k]["counts"][r][1] / 1e6, data[k]["counts"][r][2] / 1e6, data[k]["ms"]) for k in keys]
        try:
            (f, a, c), pred, rms = fit(rows)
        except ValueError as e:
            lines.append("%d-row steps: %s" % (r, e))
            continue
        lines.append("%d-row steps, %d masks: fixed %.3f ms, %.3f ms per million unmasked steps, %.3f ms per million partial "
                     "steps; rms error %.3f ms" % (r, len(keys), f, a, c, rms))
        for k, (u, p, t), q in zip(keys, rows, pred):
            lines.append("  %-24s %6d  measured %9.3f  fitted %9.3f  fixed %5.1f%%  unmasked %5.1f%%  partial %5.1f%%" %
                         ((k[0] + ":" if k[0] else "") + k[1], k[2], t, q, 100 * f / t, 100 * a * u / t, 100 * c * p / t))
    return lines


def self_test():
    ok = True

    def check(cond, what):
        nonlocal ok
        print(("ok: " if cond else "FAIL: ") + what)
        ok = ok and cond

    # made-up runs: fixed 4 ms, 17.5 ms per million unmasked steps, 19.5 per million partial ones
    f, a, c = 4.0, 17.5, 19.5
    masks = [("full", 4.0, 0.0), ("causal", 2.0, 0.07), ("sliding_window", 0.19, 0.13), ("share_question", 0.65, 0.21),
             ("document", 1.7, 0.18)]
    text = []
    for name, u, p in masks:
        text.append("visits %-22s %6d %3d bwd rows 64; 64: items 32768 unmasked %d partial %d; 80: items 32768 unmasked 1 partial 1"
                    % (name, 8192, 16, u * 1e6, p * 1e6))
        text.append("%-22s %6d %3d %-6s %9.3f %9.1f %7.4f %8.4f sm90 (64-row steps)" % (name, 8192, 16, "bwd", f + a * u + c * p, 500.0, 0.5, 0.5))
    text.append("fmbench: passes bwd (TFLOP/s: FlashMask convention ...)")
    d = parse(text)
    check(len(d) == 5 and all(v["rows"] == 64 and "ms" in v for v in d.values()), "visits and bwd lines read")
    check(d[("", "causal", 8192)]["counts"][80] == (32768.0, 1.0, 1.0), "counts per step size")
    (ff, aa, cc), _, rms = fit([(v["counts"][64][1] / 1e6, v["counts"][64][2] / 1e6, v["ms"]) for v in d.values()])
    check(abs(ff - f) < 1e-6 and abs(aa - a) < 1e-6 and abs(cc - c) < 1e-6 and rms < 1e-6, "the three terms recovered")
    rep = report(d)
    check(rep[0].startswith("64-row steps, 5 masks: fixed 4.000 ms, 17.500 ms") and len(rep) == 6, "the report")
    check(report(parse(text[:6]))[0].startswith("64-row steps: 3 masks, too few"), "too few masks refused")
    try:
        solve3([[1, 2, 3], [2, 4, 6], [1, 1, 1]], [1, 2, 3])
        check(False, "a singular system refused")
    except ValueError:
        check(True, "a singular system refused")
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("runs", nargs="*", help="fmbench outputs with -visits and -pass bwd")
    ap.add_argument("--self-test", action="store_true", help="check the reader and the fit on made-up runs")
    a = ap.parse_args()
    if a.self_test:
        return self_test()
    if not a.runs:
        ap.error("give at least one fmbench output")
    data = collections.OrderedDict()
    for i, p in enumerate(a.runs):
        with open(p) as f:
            data.update(parse(f, str(i + 1) if len(a.runs) > 1 else ""))
    print("\n".join(report(data)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
