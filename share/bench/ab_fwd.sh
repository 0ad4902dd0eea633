#!/bin/sh
# ab_fwd.sh - time the forward of two builds side by side on the same masks and shapes, to tell
# a change from noise: the build in this tree (./fmbench, built already) and an older source
# tree BASE (built here into $AB_BUILD), run alternately new, base, new, base. Prints the table of
# share/bench/ab_table.py: per mask, length and pass each build's median time over its two runs and
# their range, and base / new (above 1: the new build is faster).
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
python3 "$(dirname "$0")/ab_table.py" base="$OUT/ab_base1.csv" base="$OUT/ab_base2.csv" new="$OUT/ab_new1.csv" new="$OUT/ab_new2.csv" \
  > "$OUT/ab_table.txt"
cat "$OUT/ab_table.txt"
