#!/bin/sh
# ab.sh - A/B of kernel versions in one device call, on the backward's harness (bwd_bench) or the
# forward's (fwd_bench): AB_HARNESS=bwd (the default; share/bench/bwd/ab.sh) or fwd
# (share/bench/fwd/ab.sh). The harness is built from BASE's kernel files, from this tree's, and
# from this tree's with extra nvcc flags per variant, all at once; then, if asked, `HARNESS check`
# on this tree's builds and the profile mode (bwd: itemprof, fwd: tileprof) of profiling builds
# (-DFMBWD_PROF, -DFMFWD_PROF); then `HARNESS MODE REPS` of every build in turn, ROUNDS times
# (base, new, variants, base, new, ...), and the table of share/bench/ab_table.py: per case each
# build's median time and range over the rounds, and the base's median over each build's (above
# 1: faster). Run from the top of the tree:
#   sh share/bench/ab.sh BASE [rounds] [reps]          (defaults: 3 rounds, 5 timings a round)
# BASE is a directory holding another version's include/, src/kernels/ and share/bench/, made here
# before the device call with
#   mkdir ab_base && git archive BASE_COMMIT include src/kernels share/bench | tar -x -C ab_base
# (an untracked directory travels with the working tree). The base is built inside BASE, so that
# its kernel files' relative includes resolve: a kernel file copied elsewhere does not compile.
# Without the harness in BASE (share/bench/bwd or fwd) this tree's is used.
# Environment:
#   AB_HARNESS      bwd (default) or fwd
#   AB_VARIANTS="name:flags;name:flags"  more builds of this tree with those nvcc flags (for
#                   example "hang:-DFM_SM90_HANG_CHECK"); names of letters, digits and _, not
#                   base, new or table, none twice, none ending in _prof
#   AB_BASE_FLAGS   nvcc flags of the base build only (a build option against the default: BASE may
#                   then be an archive of this tree); AB_NEW_FLAGS likewise of the new build
#   AB_CHECK=1      `HARNESS check` on this tree's builds first; a failure stops the A/B (another
#                   value: `HARNESS check VALUE`, the cases whose name or mask holds it)
#   AB_NOCHECK="name name"  variants left out of that check (timing-only builds, wrong by design)
#   AB_PROF=1       profiling builds of every version and their profile mode (AB_PROF="new x":
#                   of those versions only; the base's harness may lack the mode); AB_ITEMPROF=1
#                   is the same
#   AB_MODE         the harness's table (default ab; bwd: ab64 for d = 64; fwd: abmask, ab64, ab256)
#   BWD_AB_SPARSE   default 1 here: the short-item masks beside full and causal (bwd)
#   OUT             logs and each build's bench lines, ab_LABEL.txt (default .); AB_WORK the
#                   builds (default /tmp/ab_HARNESS)
# The table has the default mode's times; with AB_MODE=det (bwd) the deterministic mode's too,
# which bwd_bench det prints as bench lines of their own ("... det"). Exit status: 0, or 1 when a
# build, a check, a round or the table failed.
base=${1:?usage: ab.sh BASE [rounds] [reps]}
rounds=${2:-3}
reps=${3:-5}
OUT=${OUT:-.}
H=${AB_HARNESS:-bwd}
case $H in
  bwd) srcs="share/bench/bwd/bwd_bench.cu src/kernels/cuda_bwd.cu src/kernels/sm90/bwd_sm90.cu"
       pflag=-DFMBWD_PROF pmode=itemprof ;;
  fwd) srcs="share/bench/fwd/fwd_bench.cu src/kernels/cuda_mask.cu src/kernels/sm90/fwd_sm90.cu src/kernels/simt/fwd_fallback.cu"
       pflag=-DFMFWD_PROF pmode=tileprof ;;
  *) echo "ab.sh: AB_HARNESS=$H (bwd or fwd)"; exit 1 ;;
esac
W=${AB_WORK:-/tmp/ab_$H}
mode=${AB_MODE:-ab}
prof=${AB_PROF:-${AB_ITEMPROF:-}}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-16} BWD_AB_SPARSE=${BWD_AB_SPARSE:-1}
here=$(cd "$(dirname "$0")" && pwd) # share/bench
[ -d "$base/src/kernels/sm90" ] || { echo "ab.sh: $base has no src/kernels/sm90"; exit 1; }
# the variants, checked before anything is made: flags_NAME holds each one's nvcc flags
labels="base new"
oldifs=$IFS
IFS=';'
for v in ${AB_VARIANTS:-}; do
  IFS=$oldifs
  case $v in *:*) ;; *) echo "ab.sh: AB_VARIANTS entry '$v' is not name:flags"; exit 1 ;; esac
  name=${v%%:*}
  case $name in
    "" | base | new | table | *_prof | *[!A-Za-z0-9_]*)
      echo "ab.sh: variant name '$name' (letters, digits, _; not base, new or table; not ending in _prof)"; exit 1 ;;
  esac
  case " $labels " in *" $name "*) echo "ab.sh: variant name '$name' given twice"; exit 1 ;; esac
  labels="$labels $name"
  eval "flags_$name=\${v#*:}"
done
IFS=$oldifs
mkdir -p "$OUT" "$W" && W=$(cd "$W" && pwd) || exit 1
[ -f "$base/share/bench/$H/${H}_bench.cu" ] || { mkdir -p "$base/share/bench" && cp -r "$here/$H" "$base/share/bench/"; }
[ -f "$base/share/bench/harness.h" ] || cp "$here/harness.h" "$base/share/bench/"
# profiled LABEL: whether LABEL gets a profiling build (AB_PROF: 1, or a list of labels)
profiled() { [ -n "$prof" ] && { [ "$prof" = 1 ] || case " $prof " in *" $1 "*) true ;; *) false ;; esac; }; }
# build DIR LABEL FLAGS: the harness of DIR's sources with FLAGS, as $W/LABEL (log: ab_build_LABEL.log)
build() {
  (cd "$1" && nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a --use_fast_math -Iinclude -Xcompiler -fopenmp $3 \
    $srcs -o "$W/$2") > "$OUT/ab_build_$2.log" 2>&1
}
builds="" # "label:pid" of every build started
for l in $labels; do
  if [ "$l" = base ]; then f=${AB_BASE_FLAGS:-}; d=$base; elif [ "$l" = new ]; then f=${AB_NEW_FLAGS:-}; d=.; else eval "f=\${flags_$l:-}"; d=.; fi
  build "$d" "$l" "$f" &
  builds="$builds $l:$!"
  if profiled "$l"; then
    build "$d" "${l}_prof" "$f $pflag" &
    builds="$builds ${l}_prof:$!"
  fi
done
bad=""
for b in $builds; do wait "${b#*:}" || bad="$bad ${b%%:*}"; done
if [ -n "$bad" ]; then
  for l in $bad; do echo "== the build of $l failed ($OUT/ab_build_$l.log):"; tail -20 "$OUT/ab_build_$l.log"; done
  echo "ab.sh: a build failed:$bad"
  exit 1
fi
echo "ab.sh: built $labels${prof:+ (and $pflag builds)}"
if [ -n "${AB_CHECK:-}" ]; then
  word=""; [ "$AB_CHECK" = 1 ] || word=$AB_CHECK
  for l in $labels; do
    [ "$l" = base ] && continue
    case " ${AB_NOCHECK:-} " in *" $l "*) echo "check $l: skipped (AB_NOCHECK)"; continue ;; esac
    "$W/$l" check $word > "$OUT/ab_check_$l.log" 2>&1 || { tail -30 "$OUT/ab_check_$l.log"; echo "ab.sh: check failed on $l"; exit 1; }
    echo "check $l: $(tail -1 "$OUT/ab_check_$l.log")"
  done
fi
for l in $labels; do
  profiled "$l" || continue
  echo "== $pmode $l"
  "$W/${l}_prof" $pmode > "$OUT/ab_${pmode}_$l.log" 2>&1 || { tail -20 "$OUT/ab_${pmode}_$l.log"; echo "ab.sh: $pmode failed on $l"; exit 1; }
  grep "^$pmode" "$OUT/ab_${pmode}_$l.log" | cut -c1-440
done
for l in $labels; do : > "$OUT/ab_$l.txt"; done
r=1
while [ $r -le "$rounds" ]; do
  for l in $labels; do
    "$W/$l" "$mode" "$reps" > "$OUT/ab_run_$l.$r.log" 2>&1 || { tail -20 "$OUT/ab_run_$l.$r.log"; echo "ab.sh: $l failed in round $r"; exit 1; }
    grep "^bench" "$OUT/ab_run_$l.$r.log" >> "$OUT/ab_$l.txt"
  done
  r=$((r + 1))
done
args=""
for l in $labels; do args="$args $l=$OUT/ab_$l.txt"; done
python3 "$here/ab_table.py" $args > "$OUT/ab_table.txt" || { cat "$OUT/ab_table.txt"; echo "ab.sh: ab_table.py failed"; exit 1; }
cat "$OUT/ab_table.txt"
