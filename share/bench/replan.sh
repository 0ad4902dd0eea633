#!/bin/sh
# replan.sh - what re-planning every training step costs one rank (issue 13), on the CPU:
# fmplan-sim -steps N re-plans N times, each with a fresh mask of the same type (new
# documents: seed + step), and reports the median of one rank's FMPlanSetUp planning work
# (chunk weights, balanced partition, rows, needed set, route, exchange steps) and of the mask's
# set-up; -ref 1 also times the reference paths (the planner before the fast paths). Then
# the every-rank simulation (fmplan-sim's table) is timed at each size. Prints one table.
# Run from the build directory (or set FMPLAN_SIM). Not a test: the targets are printed
# beside the numbers, nothing fails.
# The plan's memory per rank (the largest rank: fmplan-sim's every-rank table, one step) is
# printed beside, with the needs' sparse transpose and, before it, with the all-gathered
# needed matrix.
# Then the comm-aware balancer against the work-only one at 16 x 8 x 1M (bytes across nodes, step),
# on the first packing and as a distribution over the steps' packings.
# usage: sh share/bench/replan.sh [steps (20)] [ref (1: also the reference; 0: not)]
SIM=${FMPLAN_SIM:-./fmplan-sim}
STEPS=${1:-20}
REF=${2:-1}
CSV=${CSV:-/tmp/replan.$$.csv}
rm -f "$CSV"
[ -x "$SIM" ] || { echo "replan.sh: no $SIM (run from the build directory or set FMPLAN_SIM)"; exit 1; }
# ranks = nodes x 8, tokens, target ms per step per rank
for cfg in "1 131072 1" "8 1048576 5" "128 1048576 20"; do
  set -- $cfg
  for mask in causal_document document; do
    "$SIM" -nodes "$1" -gpus_per_node 8 -mask "$mask" -seqlen "$2" -table 0 -steps "$STEPS" -ref "$REF" -csv "$CSV" \
      > /dev/null 2>&1 || { echo "replan.sh: fmplan-sim failed at $1 nodes, $mask"; exit 1; }
    # the same steps with the communication-aware balancer (-fm_plan_balance_comm): path "comm"
    "$SIM" -nodes "$1" -gpus_per_node 8 -mask "$mask" -seqlen "$2" -table 0 -steps "$STEPS" -balance_comm 1 -csv "$CSV" \
      > /dev/null 2>&1 || { echo "replan.sh: fmplan-sim -balance_comm 1 failed at $1 nodes, $mask"; exit 1; }
    # the plan's memory per rank: the every-rank table of one mask (a "# memory" row in $CSV.mem)
    "$SIM" -nodes "$1" -gpus_per_node 8 -mask "$mask" -seqlen "$2" -csv "$CSV.mem" > /dev/null 2>&1 ||
      { echo "replan.sh: fmplan-sim (table) failed at $1 nodes, $mask"; exit 1; }
    echo "$1,$2,$mask,$3" >> "$CSV.targets"
  done
done
printf '%-16s %-16s %6s %10s %10s %10s %10s %12s %10s %10s %10s %12s\n' "ranks x tokens" "mask" "steps" "fast ms" "ref ms" "target" "balance" "mask set-up" "speed-up" "comm ms" "plan KiB" "(all-gather)"
grep '^# memory' "$CSV.mem" > "$CSV.mem2"
awk -F, 'FILENAME == ARGV[1] { mb[$3 "," $4 "," $2] = $6 / 1024; ma[$3 "," $4 "," $2] = $5 / 1024; next }
  FILENAME == ARGV[2] { tgt[$1 * 8 "," $2 "," $3] = $4; next }
  FNR == 1 { next }
  { key = $2 "," $5 "," $1; if ($9 == "fast") { f[key] = $17; b[key] = $12; m[key] = $18; n[key] = $10; order[++k] = key } else if ($9 == "comm") c[key] = $17; else r[key] = $17 }
  END { for (i = 1; i <= k; i++) { key = order[i]; split(key, a, ",");
          printf "%-16s %-16s %6d %10.3f %10s %10s %10.3f %12.3f %10s %10s %10.1f %12.1f\n", a[1] " x " a[2] / 1024 "K", a[3], n[key], f[key],
                 (key in r) ? sprintf("%.3f", r[key]) : "-", "<= " tgt[a[1] "," a[2] "," a[3]], b[key], m[key],
                 (key in r) ? sprintf("%.0fx", r[key] / f[key]) : "-", (key in c) ? sprintf("%.3f", c[key]) : "-", mb[key], ma[key] } }' "$CSV.mem2" "$CSV.targets" "$CSV"
echo
printf '%-8s %-16s %14s %10s\n' "ranks" "mask" "every-rank s" "target"
for nodes in 1 16 128; do
  for mask in causal_document document; do
    t0=$(date +%s.%N)
    "$SIM" -nodes $nodes -gpus_per_node 8 -mask $mask -seqlen 1048576 > /dev/null 2>&1
    t1=$(date +%s.%N)
    printf '%-8d %-16s %14.2f %10s\n' $((nodes * 8)) $mask "$(echo "$t1 - $t0" | bc)" "$([ $nodes = 128 ] && echo '<= 10' || echo '-')"
  done
done
echo "(medians over the steps of rank 0's planning work on this machine; 'comm ms' the same with -fm_plan_balance_comm;"
echo " 'plan KiB' the plan's memory on its largest rank with the needs' sparse transpose, '(all-gather)' with the all-gathered"
echo " needed matrix it replaced; 'every-rank s' is the whole fmplan-sim run at 1M tokens,"
echo " the mask's set-up and the table of every partition and route for every rank included; CSV rows in $CSV)"
rm -f "$CSV.targets" "$CSV.mem" "$CSV.mem2"
echo
echo "communication-aware balancer (-fm_plan_balance_comm) at 16 nodes x 8 ranks x 1M tokens, hierarchical route:"
for mask in causal_document document; do
  echo "  $mask:"
  "$SIM" -nodes 16 -gpus_per_node 8 -mask $mask -seqlen 1048576 2>/dev/null | grep -E "comm-aware balancer|node-local candidate:" | sed 's/^ */    /'
done
echo "the same over $STEPS random packings (fmplan-sim -steps $STEPS -balance_comm 1; min / median / max):"
for mask in causal_document document; do
  echo "  $mask:"
  "$SIM" -nodes 16 -gpus_per_node 8 -mask $mask -seqlen 1048576 -steps "$STEPS" -balance_comm 1 2>/dev/null |
    grep -A2 "comm-aware balancer over" | tail -2 | sed 's/^ */    /'
done
