#!/bin/sh
# compare.sh - time our forward (fmbench) and the peers (share/bench/peers.py: FlexAttention,
# cuDNN SDPA) on the same masks and shapes in one run, and print one table:
#   mask | seqlen | ours | Flex | cuDNN | ours/Flex | ours/cuDNN     (TFLOP/s, FlashMask convention)
# usage: compare.sh [fmbench options: -masks -seqlen -head_dim -heads -tokens -reps -warmup -dtype]
# Environment: FMBENCH (default: fmbench on PATH; with MPIEXEC set it runs "$MPIEXEC -n 1 $FMBENCH"),
#   PYTHON3 (default python3), WORK (directory for the mask file and CSVs, default ./fmbench-out).
set -e
here=$(cd "$(dirname "$0")" && pwd)
FMBENCH=${FMBENCH:-fmbench}
PYTHON3=${PYTHON3:-python3}
WORK=${WORK:-fmbench-out}
mkdir -p "$WORK"
# MASKS: the mask file (HDF5, written by fmbench -o)
masks=${MASKS:-$WORK/masks.h5}
run_fmbench() {
  if [ -n "$MPIEXEC" ]; then $MPIEXEC -n 1 $FMBENCH "$@"; else $FMBENCH "$@"; fi
}
run_fmbench "$@" -o "$masks" -csv "$WORK/ours.csv"
[ -e "$masks" ] || { echo "compare.sh: fmbench wrote no mask file $masks" >&2; exit 1; }
# peers take the shape options only
popts=""
while [ $# -gt 0 ]; do
  case $1 in -head_dim|-heads|-tokens|-reps|-warmup|-dtype) popts="$popts $1 $2"; shift 2;; *) shift;; esac
done
PYTHONUNBUFFERED=1 $PYTHON3 "$here/peers.py" "$masks" $popts -csv "$WORK/peers.csv"
$PYTHON3 - "$WORK/ours.csv" "$WORK/peers.csv" <<'PY'
import csv, sys
ours = {(r["mask"], int(r["seqlen"])): r for r in csv.DictReader(open(sys.argv[1]))}
peers = {(r["mask"], int(r["seqlen"])): r for r in csv.DictReader(open(sys.argv[2]))}
print("%-22s %6s %8s %8s %8s %10s %11s" % ("mask", "seqlen", "ours", "Flex", "cuDNN", "ours/Flex", "ours/cuDNN"))
def f(x): return "%8.1f" % x if x == x else "%8s" % "-"
for key in sorted(ours, key=lambda k: (k[1], list(ours).index(k))):
    r = ours[key]
    ms = float(r["ms"]); tf = float(r["tflops"]); flops = tf * ms
    p = peers.get(key, {})
    fl = float(p.get("flex_ms", "nan")); cd = float(p.get("cudnn_ms", "nan"))
    tfl = flops / fl if fl == fl else float("nan")
    tcd = flops / cd if cd == cd else float("nan")
    print("%-22s %6d %s %s %s %10s %11s" % (key[0], key[1], f(tf), f(tfl), f(tcd),
          "%.2f" % (tf / tfl) if tfl == tfl else "-", "%.2f" % (tf / tcd) if tcd == tcd else "-"))
PY
