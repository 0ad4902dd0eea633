#!/bin/sh
# Event traces: tests/test_trace on 1, 2 and 3 ranks (recorder, summary, HDF5 file written with
# parallel HDF5 and through rank 0), then fmtrace on both files: the printed summary against
# the closed forms of tests/test_trace.c, the JSON (parses, one "X" event per trace event,
# one process per rank) and the SVG (one lane per rank, well-formed).
. "$srcdir/tests/common.sh"
if [ "${FM_HAVE_HDF5:-0}" != 1 ]; then echo "SKIP: built without HDF5"; exit 77; fi
FMTRACE="${top_builddir}/fmtrace"
PY="${PYTHON3:-}"
[ -z "$PY" ] && command -v python3 >/dev/null 2>&1 && PY=python3
fail=0
bad() { echo "FAIL: $*"; fail=1; }

# value after "label:" in fmtrace's summary (first number)
field() { sed -n "s/^  $1: *\([-0-9.e+]*\).*/\1/p" "$2" | head -n 1; }
same() { awk -v a="$1" -v b="$2" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-6 * (1 + (b < 0 ? -b : b))) }'; }

for np in 1 2 3; do
  echo "== $np rank(s)"
  f=trace_np$np.h5
  rm -f "$f" "$f.serial.h5"
  fm_run $np ./tests/test_trace -o "$f" || { echo "FAIL: test_trace on $np ranks"; exit 1; }
  for file in "$f" "$f.serial.h5"; do
    out=$file.summary.txt
    "$FMTRACE" "$file" -run synthetic -json "$file.json" -svg "$file.svg" > "$out" || { bad "fmtrace $file"; continue; }
    cat "$out"
    exp_imb=$(awk -v p=$np 'BEGIN { printf "%.9f", (2 + 0.5 * (p - 1)) / (2 + 0.25 * (p - 1)) }')
    exp_emax=$(awk -v p=$np 'BEGIN { print 0.5 + 0.25 * (p - 1) }')
    exp_moved=$(awk -v p=$np 'BEGIN { printf "%d", 256 * p * (p + 1) + 100 * p }')
    exp_need=$(awk -v p=$np 'BEGIN { printf "%d", 500 * p * (p + 1) }')
    exp_ag=$(awk -v p=$np 'BEGIN { printf "%d", 2500 * p * (p + 1) }')
    exp_nev=$(awk -v p=$np 'BEGIN { printf "%d", 9 * p + p * (p - 1) / 2 }')
    v=$(field "overlap efficiency" "$out"); same "$v" 0.333333 || bad "$file: overlap efficiency $v, expected 0.333333"
    v=$(field "compute imbalance" "$out"); same "$v" "$exp_imb" || bad "$file: imbalance $v, expected $exp_imb"
    v=$(sed -n 's/^  exposed communication: max \([-0-9.e+]*\) s.*/\1/p' "$out"); same "$v" "$exp_emax" || bad "$file: exposed max $v, expected $exp_emax"
    v=$(field "bytes moved" "$out"); [ "$v" = "$exp_moved" ] || bad "$file: bytes moved $v, expected $exp_moved"
    v=$(field "bytes needed" "$out"); [ "$v" = "$exp_need" ] || bad "$file: bytes needed $v, expected $exp_need"
    v=$(field "bytes all-gather" "$out"); [ "$v" = "$exp_ag" ] || bad "$file: bytes all-gather $v, expected $exp_ag"
    v=$(sed -n 's/^  [0-9]* ranks, \([0-9]*\) events.*/\1/p' "$out"); [ "$v" = "$exp_nev" ] || bad "$file: $v events, expected $exp_nev"
    # per-rank rows: rank r computes 2 + r/2 s, waits 1/2 + r/4 s, has 9 + r events, host testhost<r/2>
    r=0
    while [ $r -lt $np ]; do
      row=$(awk -v r=$r '$1 == r && NF == 11' "$out")
      set -- $row
      same "$5" "$(awk -v r=$r 'BEGIN { print 2 + 0.5 * r }')" || bad "$file: rank $r compute '$5'"
      same "$8" "$(awk -v r=$r 'BEGIN { print 0.5 + 0.25 * r }')" || bad "$file: rank $r wait '$8'"
      [ "${11}" = $((9 + r)) ] || bad "$file: rank $r has '${11}' events"
      [ "$4" = "testhost$((r / 2))" ] || bad "$file: rank $r host '$4'"
      r=$((r + 1))
    done
    # SVG: one lane per rank
    lanes=$(grep -c 'class="lane"' "$file.svg")
    [ "$lanes" = "$np" ] || bad "$file.svg has $lanes lanes, expected $np"
    grep -q 'class="legend"' "$file.svg" || bad "$file.svg has no legend"
    grep -q 'time (s)' "$file.svg" || bad "$file.svg has no time axis"
    # JSON: one complete event per trace event, one process per rank
    nx=$(grep -o '"ph": "X"' "$file.json" | wc -l | tr -d ' ')
    [ "$nx" = "$exp_nev" ] || bad "$file.json has $nx X events, expected $exp_nev"
    if [ -n "$PY" ]; then
      "$PY" - "$file.json" "$file.svg" "$exp_nev" "$np" <<'EOF' || bad "$file.json / .svg do not parse or have the wrong contents"
import json, sys, xml.etree.ElementTree as ET
d = json.load(open(sys.argv[1]))
ev = d["traceEvents"]
x = [e for e in ev if e["ph"] == "X"]
assert len(x) == int(sys.argv[3]), (len(x), sys.argv[3])
assert sorted({e["pid"] for e in x}) == list(range(int(sys.argv[4]))), "one process per rank"
assert all(e["dur"] >= 0 and e["ts"] >= 0 for e in x)
names = [e for e in ev if e["ph"] == "M" and e["name"] == "process_name"]
assert len(names) == int(sys.argv[4])
ET.parse(sys.argv[2])
EOF
    fi
  done
  # both code paths wrote the same thing
  sed "1d;/^wrote /d" "$f.summary.txt" > "$f.a"; sed "1d;/^wrote /d" "$f.serial.h5.summary.txt" > "$f.b"
  cmp -s "$f.a" "$f.b" || bad "parallel and serial files summarise differently"
  # the second run, and the refusal to guess between two runs
  "$FMTRACE" "$f" -run sparse > "$f.sparse.txt" || bad "fmtrace -run sparse"
  same "$(field "compute imbalance" "$f.sparse.txt")" "$np" || bad "sparse run: imbalance, expected $np"
  if "$FMTRACE" "$f" > "$f.err" 2>&1; then bad "fmtrace without -run on a file with two runs must fail"; fi
  grep -q 'synthetic' "$f.err" && grep -q 'sparse' "$f.err" || bad "fmtrace does not list the runs: $(cat "$f.err")"
  if "$FMTRACE" "$f" -run nosuchrun > "$f.err" 2>&1; then bad "fmtrace -run nosuchrun must fail"; fi
  rm -f "$f.a" "$f.b" "$f.err"
done
exit $fail
