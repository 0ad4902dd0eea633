#!/usr/bin/env python3
"""compare_table.py WORK - the table of compare.sh: joins fmbench's CSVs (WORK/ours.csv,
WORK/ours_mb.csv) with peers.py's (WORK/peers.csv; also WORK/peers_mb.csv if there) on (mask,
seqlen, mask_batch, pass), prints one table and writes WORK/compare.csv. No numpy, no torch.

TFLOP/s of a peer = our FLOPs (fmbench: tflops x ms, FlashMask convention, the same count for the
same mask, shape and pass) over the peer's median ms: one FLOP definition for everyone. A CSV
of fmbench without the pass column (older fmbench) is the forward; one of peers.py without
mask_batch or pass is mask_batch 1, forward. Missing numbers (no such peer for the mask, FA4 not
installed, a failure) are n/a.
"""
import csv
import math
import os
import sys

PEERS = (("flex", "flex_ms", "Flex"), ("flex_flash", "flex_flash_ms", "Flex-FLASH"), ("cudnn", "cudnn_ms", "cuDNN"),
         ("fa4", "fa4_ms", "FA4"))


def num(s):
    try:
        x = float(s)
    except (TypeError, ValueError):
        return float("nan")
    return x if math.isfinite(x) and x > 0 else float("nan")


def key(r):
    mb = int(r.get("mask_batch") or 1)
    return (r["mask"], int(r["seqlen"]), max(mb, 1), r.get("pass") or "fwd")


def read(path):
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return list(csv.DictReader(f))


def main(work):
    ours = read(os.path.join(work, "ours.csv")) + read(os.path.join(work, "ours_mb.csv"))
    peers = {key(r): r for r in read(os.path.join(work, "peers.csv")) + read(os.path.join(work, "peers_mb.csv"))}
    if not ours:
        print("compare_table: no rows in %s/ours.csv" % work, file=sys.stderr)
        return 1
    fa4_missing = bool(peers) and all(math.isnan(num(p.get("fa4_ms"))) for p in peers.values())
    out = []
    for r in ours:
        k = key(r)
        ms, tf = num(r["ms"]), num(r["tflops"])
        p = peers.get(k, {})
        row = {"mask": k[0], "seqlen": k[1], "batch": int(r["batch"]), "mask_batch": k[2], "pass": k[3], "ours_ms": ms,
               "ours_tflops": tf, "block_sparsity": r.get("block_sparsity", ""), "cbm_ms": num(p.get("cbm_ms")),
               "setup_ms": num(r.get("setup_ms")), "bounds_ms": num(r.get("setup_bounds_ms"))}
        for name, col, _ in PEERS:
            pms = num(p.get(col))
            row[name + "_ms"] = pms
            row[name + "_tflops"] = tf * ms / pms  # the same FLOPs over the peer's time
            row["ours_over_" + name] = pms / ms  # = ours TFLOP/s / peer TFLOP/s
        out.append(row)
    passes = []
    for row in out:
        if row["pass"] not in passes:
            passes.append(row["pass"])
    f1 = lambda x: "%8.1f" % x if x == x else "%8s" % "n/a"
    f2 = lambda x: "%6.2f" % x if x == x else "%6s" % "n/a"
    for pas in passes:
        print("\n== %s: TFLOP/s (FlashMask convention%s), ratio = ours / peer" %
              (pas, {"fwd": "", "bwd": ", backward = 2.5 x forward", "fwdbwd": ", 3.5 x forward"}[pas]))
        print("%-26s %6s %3s %8s %8s %8s %8s %8s %6s %6s %6s %6s %8s %9s %8s" % ("mask", "S", "B", "ours", "Flex", "FLASH", "cuDNN",
              "FA4", "/Flex", "/FLASH", "/cuDNN", "/FA4", "setup ms", "bounds ms", "cbm ms"))
        for row in (x for x in out if x["pass"] == pas):
            name = row["mask"] + (" (per-sample)" if row["mask_batch"] > 1 else "")
            print("%-26s %6d %3d %s %s %s %s %s %s %s %s %s %s %s %s" % (
                name, row["seqlen"], row["batch"], f1(row["ours_tflops"]),
                *[f1(row[n + "_tflops"]) for n, _, _ in PEERS], *[f2(row["ours_over_" + n]) for n, _, _ in PEERS],
                *[("%8.2f" % row[c]) if row[c] == row[c] else "%8s" % "n/a" for c in ("setup_ms", "bounds_ms", "cbm_ms")]))
        for name, _, label in PEERS:  # the summary figures: the worst ratio, the geometric mean on the sparse masks
            rs = [x["ours_over_" + name] for x in out if x["pass"] == pas and x["ours_over_" + name] == x["ours_over_" + name]]
            sp = [x["ours_over_" + name] for x in out if x["pass"] == pas and x["mask"] not in ("full", "causal")
                  and x["ours_over_" + name] == x["ours_over_" + name]]
            if rs:
                print("  ours/%s: min %.2f over %d rows%s" % (label, min(rs), len(rs), "; geometric mean %.2f over the %d sparse"
                      % (math.exp(sum(map(math.log, sp)) / len(sp)), len(sp)) if sp else ""))
    if fa4_missing:
        print("\nFA4: n/a in every row (flash-attn-4 not importable, or it failed: see the peers' log)")
    cols = ["mask", "seqlen", "batch", "mask_batch", "pass", "block_sparsity", "ours_ms", "ours_tflops"]
    for n, _, _ in PEERS:
        cols += [n + "_ms", n + "_tflops", "ours_over_" + n]
    cols += ["setup_ms", "bounds_ms", "cbm_ms"]
    with open(os.path.join(work, "compare.csv"), "w") as f:
        f.write(",".join(cols) + "\n")
        for row in out:
            vals = []
            for c in cols:
                v = row[c]
                vals.append(("%.4f" % v if v == v else "n/a") if isinstance(v, float) else str(v))
            f.write(",".join(vals) + "\n")
    print("\ncompare_table: %d rows in %s" % (len(out), os.path.join(work, "compare.csv")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1] if len(sys.argv) > 1 else "fmbench-out"))
