#!/bin/sh
# Event traces: tests/test_trace on 1, 2 and 3 ranks (recorder, summary, HDF5 file written with
# parallel HDF5 and through rank 0), then fmtrace on both files: its JSON (the summary values,
# one "X" event per trace event, one process per rank, each rank's compute, wait, event count
# and host) against the closed forms of tests/test_trace.c, the byte references of its summary,
# and the SVG (one lane per rank, well-formed). Without python3 the JSON is not checked and
# the test reports SKIP.
. "$srcdir/tests/common.sh"
if [ "${FM_HAVE_HDF5:-0}" != 1 ]; then echo "SKIP: built without HDF5"; exit 77; fi
FMTRACE="${top_builddir}/fmtrace"
PY="${PYTHON3:-}"
[ -z "$PY" ] && command -v python3 >/dev/null 2>&1 && PY=python3
fail=0
bad() { echo "FAIL: $*"; fail=1; }
# every file this test writes goes to a temporary directory, not the build tree
dir=$(mktemp -d "${TMPDIR:-/tmp}/fm_test_trace.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT

# check_json FILE.json KEY=VALUE...: fmtrace's JSON (its structured output) against the closed
# forms of tests/test_trace.c, key=value pairs: nranks, overlap, imbalance, exposed_max,
# bytes_moved, nevents (X events in all), and per rank r (when "ranks=1"): 9 + r events,
# compute 2 + r/2 s and wait 1/2 + r/4 s (unions over the rank's streams), host testhost<r/2>.
check_json() {
  "$PY" - "$@" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
want = dict(a.split("=", 1) for a in sys.argv[2:])
od, ev = d["otherData"], d["traceEvents"]
bad = []
def close(a, b):
    return abs(a - b) <= 1e-6 * (1 + abs(b))
for key, field in (("overlap", "overlap_efficiency"), ("imbalance", "imbalance"), ("exposed_max", "exposed_max_s")):
    if key in want and not close(od[field], float(want[key])):
        bad.append("%s %r, expected %s" % (field, od[field], want[key]))
for key in ("nranks", "bytes_moved"):
    if key in want and od[key] != int(want[key]):
        bad.append("%s %r, expected %s" % (key, od[key], want[key]))
x = [e for e in ev if e["ph"] == "X"]
if "nevents" in want and len(x) != int(want["nevents"]):
    bad.append("%d X events, expected %s" % (len(x), want["nevents"]))
if any(e["dur"] < 0 or e["ts"] < 0 for e in x):
    bad.append("an event with negative time or duration")
def union(iv):
    tot, end = 0.0, None
    for a, b in sorted(iv):
        if end is None or a > end:
            tot += b - a; end = b
        elif b > end:
            tot += b - end; end = b
    return tot * 1e-6
if want.get("ranks") == "1":
    P = od["nranks"]
    names = {e["pid"]: e["args"]["name"] for e in ev if e["ph"] == "M" and e["name"] == "process_name"}
    if sorted(names) != list(range(P)) or sorted({e["pid"] for e in x}) != list(range(P)):
        bad.append("not one process per rank: %s" % sorted(names))
    for r in range(P):
        mine = [e for e in x if e["pid"] == r]
        comp = union([(e["ts"], e["ts"] + e["dur"]) for e in mine if e["cat"] == "compute"])
        wait = union([(e["ts"], e["ts"] + e["dur"]) for e in mine if e["cat"] == "wait"])
        if len(mine) != 9 + r: bad.append("rank %d has %d events, expected %d" % (r, len(mine), 9 + r))
        if not close(comp, 2 + 0.5 * r): bad.append("rank %d computes %.9g s, expected %g" % (r, comp, 2 + 0.5 * r))
        if not close(wait, 0.5 + 0.25 * r): bad.append("rank %d waits %.9g s, expected %g" % (r, wait, 0.5 + 0.25 * r))
        host = names.get(r, "").split()[2:3]
        if host != ["testhost%d" % (r // 2)]: bad.append("rank %d is named %r, expected host testhost%d" % (r, names.get(r), r // 2))
for b in bad:
    print("FAIL: %s: %s" % (sys.argv[1], b))
sys.exit(1 if bad else 0)
EOF
}

for np in 1 2 3; do
  echo "== $np rank(s)"
  f=$dir/trace_np$np.h5
  rm -f "$f" "$f.serial.h5"
  fm_run $np ./tests/test_trace -o "$f" || { echo "FAIL: test_trace on $np ranks"; exit 1; }
  for file in "$f" "$f.serial.h5"; do
    out=$file.summary.txt
    "$FMTRACE" "$file" -run synthetic -json "$file.json" -svg "$file.svg" > "$out" || { bad "fmtrace $file"; continue; }
    cat "$out"
    exp_imb=$(awk -v p=$np 'BEGIN { printf "%.9f", (2 + 0.5 * (p - 1)) / (2 + 0.25 * (p - 1)) }')
    exp_emax=$(awk -v p=$np 'BEGIN { print 0.5 + 0.25 * (p - 1) }')
    exp_moved=$((256 * np * (np + 1) + 100 * np))
    exp_need=$((500 * np * (np + 1)))
    exp_ag=$((2500 * np * (np + 1)))
    exp_nev=$((9 * np + np * (np - 1) / 2))
    # the byte references are not in the JSON: the summary must show them as computed
    grep -q "^  bytes needed: *$exp_need\$" "$out" || bad "$file: the summary does not show bytes needed $exp_need"
    grep -q "^  bytes all-gather: *$exp_ag\$" "$out" || bad "$file: the summary does not show bytes all-gather $exp_ag"
    # SVG: one lane per rank
    lanes=$(grep -c 'class="lane"' "$file.svg")
    [ "$lanes" = "$np" ] || bad "$file.svg has $lanes lanes, expected $np"
    grep -q 'class="legend"' "$file.svg" || bad "$file.svg has no legend"
    grep -q 'time (s)' "$file.svg" || bad "$file.svg has no time axis"
    # JSON: the summary and every rank's figures
    if [ -n "$PY" ]; then
      check_json "$file.json" nranks=$np overlap=0.333333333 imbalance=$exp_imb exposed_max=$exp_emax \
        bytes_moved=$exp_moved nevents=$exp_nev ranks=1 || bad "$file.json does not match the closed forms"
      "$PY" -c 'import sys, xml.etree.ElementTree as ET; ET.parse(sys.argv[1])' "$file.svg" || bad "$file.svg is not well-formed"
    fi
  done
  # both code paths wrote the same thing
  sed "1d;/^wrote /d" "$f.summary.txt" > "$f.a"; sed "1d;/^wrote /d" "$f.serial.h5.summary.txt" > "$f.b"
  cmp -s "$f.a" "$f.b" || bad "parallel and serial files summarise differently"
  # the second run, and the refusal to guess between two runs
  "$FMTRACE" "$f" -run sparse -json "$f.sparse.json" > "$f.sparse.txt" || bad "fmtrace -run sparse"
  if [ -n "$PY" ]; then check_json "$f.sparse.json" nranks=$np imbalance=$np || bad "sparse run: imbalance, expected $np"; fi
  if "$FMTRACE" "$f" > "$f.err" 2>&1; then bad "fmtrace without -run on a file with two runs must fail"; fi
  grep -q 'synthetic' "$f.err" && grep -q 'sparse' "$f.err" || bad "fmtrace does not list the runs: $(cat "$f.err")"
  if "$FMTRACE" "$f" -run nosuchrun > "$f.err" 2>&1; then bad "fmtrace -run nosuchrun must fail"; fi
  rm -f "$f.a" "$f.b" "$f.err" "$f.sparse.json"
done
# A real run: ex1 on 2 ranks (causal, seqlen 1024, block 128, so 36 of the 64 tiles are
# computed) with -fm_trace and -fm_log_view. The forward's compute events add up to the
# FlashMask-convention flops 4 H S^2 d * 36/64 (not 4 H S^2 d), and the log's "GB moved" of
# FMPlanForward (the K/V bytes sent, FMDistGetStats) is the trace's bytes moved, and not 0.
# The trace is read by the README's fmtrace command, taken from README.md as written.
ex1dir=$dir/ex1
mkdir "$ex1dir" || exit 99
if (cd "$ex1dir" && fm_run 2 "$top_builddir/tutorials/ex1" -seqlen 1024 -fm_plan_heads 2 -fm_plan_kv_heads 1 -fm_plan_head_dim 32 \
      -fm_backend cpu -fm_mask_type causal -fm_trace trace.h5 -fm_log_view > ex1.out 2>&1); then
  # the README's fmtrace command line, exactly as written there (fmtrace from this build)
  readme=$(sed -n 's/^\* `\(fmtrace trace\.h5 [^`]*\)`.*/\1/p' "$srcdir/README.md")
  [ -n "$readme" ] || bad "README.md shows no 'fmtrace trace.h5 ...' command"
  echo "README: $readme"
  set -- $readme
  shift
  (cd "$ex1dir" && "$FMTRACE" "$@" > fmtrace.out 2>&1) || bad "the README's '$readme' on ex1's trace: $(cat "$ex1dir/fmtrace.out")"
  json= svg=
  while [ $# -gt 1 ]; do
    case $1 in -json) json=$2 ;; -svg) svg=$2 ;; esac
    shift
  done
  [ -n "$json" ] && [ -s "$ex1dir/$json" ] || bad "the README's fmtrace command wrote no JSON"
  [ -n "$svg" ] && [ -s "$ex1dir/$svg" ] || bad "the README's fmtrace command wrote no SVG"
  if [ -n "$PY" ] && [ -n "$json" ] && [ -f "$ex1dir/$json" ]; then
    "$PY" - "$ex1dir/$json" "$ex1dir/ex1.out" <<'EOF' || bad "ex1's trace and log (above)"
import json, sys
d = json.load(open(sys.argv[1]))
fl = sum(e["args"]["flops"] for e in d["traceEvents"] if e.get("ph") == "X" and e.get("cat") == "compute")
want = 4.0 * 2 * 1024 * 1024 * 32 * 36 / 64
bad = []
if abs(fl - want) > 1e-9 * want: bad.append("forward compute flops %.6g, expected %.6g (FlashMask convention)" % (fl, want))
moved = d["otherData"]["bytes_moved"]
log = [l.split() for l in open(sys.argv[2]) if l.startswith("FMPlanForward ")]
if not log: bad.append("no FMPlanForward line in the -fm_log_view output")
else:
    gb = float(log[0][-1])
    if moved <= 0 or abs(gb * 1e9 - moved) > 1e-3 * moved: bad.append("log moved %g GB, trace %d bytes" % (gb, moved))
for b in bad: print("FAIL: ex1: " + b)
sys.exit(1 if bad else 0)
EOF
  fi
else
  bad "ex1 with -fm_trace: $(cat "$ex1dir/ex1.out")"
fi

if [ $fail = 0 ] && [ -z "$PY" ]; then
  echo "SKIP: python3 not found: fmtrace's JSON (the summary values and every rank's figures) was not checked"
  exit 77
fi
exit $fail
