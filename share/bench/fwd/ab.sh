#!/bin/sh
# ab.sh - A/B of two forward kernel versions in one device call: the harness built from this
# tree's kernel files (./fwd_bench) and from those of BASE (BASE/fwd_bench), both builds at once,
# then `fwd_bench ab REPS` of each alternately, new, base, new, base; prints the table of
# share/bench/ab_table.py: per row each build's median time over the two runs and their range,
# and base / new (above 1: the new build is faster). Run from the top of the tree.
# BASE is a directory holding another version's include/, src/kernels/ (and, when its interface
# differs, its own share/bench/fwd/), for instance made here before the device call with
#   mkdir ab_base && git archive BASE_COMMIT include src/kernels share/bench/fwd share/bench/harness.h | tar -x -C ab_base
# (an untracked directory travels with the working tree). Without share/bench/fwd in BASE this
# tree's harness is used. Usage: sh share/bench/fwd/ab.sh BASE [reps]; logs in $OUT.
# AB_MODE picks the table (default ab; ab256 for d = 256), AB_NEW_FLAGS adds nvcc flags to the new
# build only and AB_BASE_FLAGS to the base build only (a build option against the default: BASE
# may then be an archive of this tree, e.g. AB_BASE_FLAGS=-DFM_SM90_WIDE256=0), and
# AB_CHECK=WORD runs `fwd_bench check WORD` on the new build first (a failure stops the A/B).
base=${1:?usage: ab.sh BASE [reps]}
reps=${2:-10}
OUT=${OUT:-.}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-16}
[ -f "$base/share/bench/fwd/fwd_bench.cu" ] || { mkdir -p "$base/share/bench" && cp -r share/bench/fwd "$base/share/bench/"; }
[ -f "$base/share/bench/harness.h" ] || cp share/bench/harness.h "$base/share/bench/"
mode=${AB_MODE:-ab}
build() {
  (cd "$1" && nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --use_fast_math -Iinclude -Xcompiler -fopenmp $3 \
    share/bench/fwd/fwd_bench.cu src/kernels/cuda_mask.cu src/kernels/sm90/fwd_sm90.cu src/kernels/simt/fwd_fallback.cu \
    -o fwd_bench) > "$2" 2>&1
}
build . "$OUT/ab_build_new.log" "${AB_NEW_FLAGS:-}" & p1=$!
build "$base" "$OUT/ab_build_base.log" "${AB_BASE_FLAGS:-}" & p2=$!
wait $p1 || { tail -20 "$OUT/ab_build_new.log"; echo "ab.sh: the new build failed"; exit 1; }
wait $p2 || { tail -20 "$OUT/ab_build_base.log"; echo "ab.sh: the base build failed"; exit 1; }
if [ -n "${AB_CHECK:-}" ]; then
  ./fwd_bench check "$AB_CHECK" > "$OUT/ab_check_new.log" 2>&1 || { tail -30 "$OUT/ab_check_new.log"; echo "ab.sh: check $AB_CHECK failed on the new build"; exit 1; }
  tail -1 "$OUT/ab_check_new.log"
fi
for i in 1 2; do
  ./fwd_bench "$mode" "$reps" > "$OUT/ab_new$i.log" 2>&1 || { cat "$OUT/ab_new$i.log"; exit 1; }
  (cd "$base" && ./fwd_bench "$mode" "$reps") > "$OUT/ab_base$i.log" 2>&1 || { cat "$OUT/ab_base$i.log"; exit 1; }
done
grep -h "^bench" "$OUT/ab_base1.log" "$OUT/ab_base2.log" > "$OUT/ab_base.txt"
grep -h "^bench" "$OUT/ab_new1.log" "$OUT/ab_new2.log" > "$OUT/ab_new.txt"
python3 "$(dirname "$0")/../ab_table.py" base="$OUT/ab_base.txt" new="$OUT/ab_new.txt" > "$OUT/ab_table.txt" ||
  { cat "$OUT/ab_table.txt"; echo "ab.sh: ab_table.py failed"; exit 1; }
cat "$OUT/ab_table.txt"
