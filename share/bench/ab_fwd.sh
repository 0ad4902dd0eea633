#!/bin/sh
# ab_fwd.sh - time the forward of two builds side by side on the same masks and shapes, to tell
# a change from noise: the build in this tree (./fmbench, built already) and an older source
# tree BASE (built here into $AB_BUILD), run alternately new, base, new, base. Prints, per mask
# and length, both runs of each and the ratio of the better runs (new / base).
# usage: sh share/bench/ab_fwd.sh BASE [fmbench options, e.g. -masks all -seqlen 8192,32768]
# Environment: MPIEXEC (default mpiexec), AB_BUILD (default /tmp/ab_base), OUT (logs, CSVs).
set -e
base=$(cd "$1" && pwd); shift
OUT=${OUT:-/tmp/fmout}; AB_BUILD=${AB_BUILD:-/tmp/ab_base}; MPIEXEC=${MPIEXEC:-mpiexec}
mkdir -p "$OUT"
if [ ! -x "$AB_BUILD/fmbench" ]; then
  rm -rf "$AB_BUILD"; cp -r "$base" "$AB_BUILD"
  (cd "$AB_BUILD" && ./autogen.sh && ./configure CC=mpicc && make -j"$(nproc)" fmbench) > "$OUT/ab_build.log" 2>&1 ||
    { tail -30 "$OUT/ab_build.log"; echo "ab_fwd: the base build failed"; exit 1; }
fi
for i in 1 2; do
  $MPIEXEC -n 1 ./fmbench "$@" -o /tmp/ab_new.h5 -csv "$OUT/ab_new$i.csv" > "$OUT/ab_new$i.log" 2>&1
  $MPIEXEC -n 1 "$AB_BUILD/fmbench" "$@" -o /tmp/ab_base.h5 -csv "$OUT/ab_base$i.csv" > "$OUT/ab_base$i.log" 2>&1
done
python3 - "$OUT" <<'PY'
import csv, sys, os
d = sys.argv[1]
def load(n): return {(r["mask"], int(r["seqlen"])): float(r["tflops"]) for r in csv.DictReader(open(os.path.join(d, n)))}
n1, n2, b1, b2 = load("ab_new1.csv"), load("ab_new2.csv"), load("ab_base1.csv"), load("ab_base2.csv")
print("%-22s %6s %8s %8s %8s %8s %9s" % ("mask", "seqlen", "new 1", "new 2", "base 1", "base 2", "new/base"))
ratios = []
for k in sorted(n1, key=lambda k: (k[1], list(n1).index(k))):
    if k not in b1: continue
    r = max(n1[k], n2.get(k, 0)) / max(b1[k], b2.get(k, 0)); ratios.append(r)
    print("%-22s %6d %8.1f %8.1f %8.1f %8.1f %9.3f" % (k[0], k[1], n1[k], n2.get(k, float("nan")), b1[k], b2.get(k, float("nan")), r))
if ratios: print("new/base: min %.3f, max %.3f, mean %.3f over %d rows" % (min(ratios), max(ratios), sum(ratios) / len(ratios), len(ratios)))
PY
