#!/bin/sh
# sched.sh - the Hopper forward's tile schedules through the library, on the library's own
# masks: fmbench -pass fwd with -fm_sm90_schedule auto, grid, static and dynamic in turn (two
# alternating rounds, best of each), then one table: TFLOP/s per schedule, each against the grid,
# and which one auto took (FMPlanView's estimate of the keys a query tile sees on average). It
# places -fm_sm90_auto_keys: auto should match the best of grid and static on every row.
# Ours only: not a comparison with the peers (compare.sh is). Run from the build directory on a
# GPU machine; logs in $OUT.
# usage: sh share/bench/sched.sh [-seqlen 8192,32768] [-masks all|a,b] [-head_dim 128] [-reps 5] [-warmup_s 1]
# (-warmup_s: seconds of back-to-back runs before each timing, fmbench's steady state)
OUT=${OUT:-/tmp/fmout}
mkdir -p "$OUT"
seqlens=8192,32768 masks=all d=128 reps=5 warm_s=1
while [ $# -gt 0 ]; do
  case $1 in
    -seqlen) seqlens=$2; shift 2 ;;
    -masks) masks=$2; shift 2 ;;
    -head_dim) d=$2; shift 2 ;;
    -reps) reps=$2; shift 2 ;;
    -warmup_s) warm_s=$2; shift 2 ;;
    *) echo "sched.sh: unknown argument $1"; exit 2 ;;
  esac
done
[ "$masks" = all ] && masks=full,causal,sliding_window,causal_document,document,share_question,global_sliding_window,causal_blockwise,prefix_lm_document,prefix_lm_causal,qk_sparse,random_eviction
heads=$((32 * 128 / d))
log="$OUT/sched.log"
: > "$log"
for S in $(echo "$seqlens" | tr , ' '); do
  for r in 1 2; do
    for s in auto grid static dynamic; do
      timeout 120 ${MPIEXEC:-mpiexec} -n 1 ./fmbench -pass fwd -masks "$masks" -seqlen "$S" -heads $heads -head_dim "$d" -tokens 131072 \
        -reps "$reps" -warmup 1 -warmup_s "$warm_s" -fm_sm90_schedule $s > "$OUT/sched_run.log" 2>&1 || echo "sched.sh: fmbench $S $s exited $?"
      awk -v s=$s '$4 == "fwd" && $9 == "sm90" {print s, $1, $2, $6}' "$OUT/sched_run.log" >> "$log"
    done
  done
  for m in $(echo "$masks" | tr , ' '); do # what auto chose, and why
    # to a file, then grep: Open MPI 4.1's mpiexec segfaults when a reader closes its output early (grep -m1)
    timeout 30 ${MPIEXEC:-mpiexec} -n 1 ./fmbench -pass fwd -masks "$m" -seqlen "$S" -heads $heads -head_dim "$d" -tokens 131072 -reps 1 \
      -warmup 0 -fm_plan_view > "$OUT/sched_view.log" 2>&1 || echo "sched.sh: fmbench -fm_plan_view $m $S exited $?"
    grep -m1 "forward schedule" "$OUT/sched_view.log" | sed "s/^/view $m $S /" >> "$log"
  done
done
python3 - "$log" <<'PY'
import sys, collections, re
tf = collections.defaultdict(float)
why = {}
for l in open(sys.argv[1]):
    f = l.split()
    if f[0] == "view":
        m = re.search(r"sees (\d+) keys", l)
        why[(f[1], f[2])] = ("static" if "persistent, static" in l else "dynamic" if "dynamic" in l else "grid",
                             m.group(1) if m else "?")
    elif len(f) == 4:
        tf[(f[1], f[2], f[0])] = max(tf[(f[1], f[2], f[0])], float(f[3]))
rows = sorted({(k[0], k[1]) for k in tf}, key=lambda x: (int(x[1]), x[0]))
print("%-22s %6s %7s %8s %8s %8s %8s %7s %7s %7s %-7s" % ("mask", "S", "keys", "auto", "grid", "static", "dynamic",
      "auto/g", "st/g", "dyn/g", "chose"))
for m, S in rows:
    g = tf[(m, S, "grid")] or float("nan")
    c, k = why.get((m, S), ("?", "?"))
    print("%-22s %6s %7s %8.1f %8.1f %8.1f %8.1f %7.3f %7.3f %7.3f %-7s" % (m, S, k, tf[(m, S, "auto")], g, tf[(m, S, "static")],
          tf[(m, S, "dynamic")], tf[(m, S, "auto")] / g, tf[(m, S, "static")] / g, tf[(m, S, "dynamic")] / g, c))
PY
