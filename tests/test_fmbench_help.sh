#!/bin/sh
# fmbench -help prints fmbench's own options and the library's, then exits 0, without a GPU
# (it must not stop at the device check). Its -pass list is checked without a GPU too (-dryrun):
# a bad pass is refused by name, and the known ones (fwd, bwd, fwdbwd, -bwd, -fwdbwd) are
# accepted and announced. Skips (77) when fmbench is not built (no CUDA).
. "$srcdir/tests/common.sh"
FMBENCH="${top_builddir}/fmbench"
[ -x "$FMBENCH" ] || { echo "SKIP: fmbench not built (no CUDA in this build)"; exit 77; }
out=test_fmbench_help.out
h5=test_fmbench_help.h5
rm -f "$out" "$h5"
fm_run 1 "$FMBENCH" -help > "$out" 2>&1
rc=$?
[ $rc = 0 ] || { echo "FAIL: fmbench -help exited $rc"; cat "$out"; exit 1; }
for opt in -masks -seqlen -head_dim -heads_kv -tokens -dtype -warmup -warmup_s -reps -seed -csv -dryrun -mask_batch -pass -bwd -fwdbwd \
           -cp -fm_log_view; do
  grep -q -- "$opt" "$out" || { echo "FAIL: fmbench -help does not list $opt"; cat "$out"; exit 1; }
done
grep -q "backward 2.5x" "$out" || { echo "FAIL: fmbench -help does not state the backward FLOP convention"; cat "$out"; exit 1; }
# a bad pass: refused with its name, nonzero exit
fm_run 1 "$FMBENCH" -dryrun -masks causal -seqlen 256 -o "$h5" -pass fwd,backward > "$out" 2>&1
rc=$?
[ $rc != 0 ] || { echo "FAIL: fmbench -pass fwd,backward exited 0"; cat "$out"; exit 1; }
grep -q "unknown pass 'backward'" "$out" || { echo "FAIL: fmbench does not name the bad pass"; cat "$out"; exit 1; }
# -warmup_s: a negative time refused by name; a valid one announced in the header line
fm_run 1 "$FMBENCH" -dryrun -masks causal -seqlen 256 -o "$h5" -warmup_s -2 > "$out" 2>&1
rc=$?
[ $rc != 0 ] || { echo "FAIL: fmbench -warmup_s -2 exited 0"; cat "$out"; exit 1; }
grep -q -- "-warmup_s is '-2'" "$out" || { echo "FAIL: fmbench does not name the bad -warmup_s"; cat "$out"; exit 1; }
fm_run 1 "$FMBENCH" -dryrun -masks causal -seqlen 256 -o "$h5" -warmup_s 2s > "$out" 2>&1
rc=$?
[ $rc != 0 ] || { echo "FAIL: fmbench -warmup_s 2s exited 0"; cat "$out"; exit 1; }
grep -q -- "-warmup_s is '2s'" "$out" || { echo "FAIL: fmbench does not name the unparsable -warmup_s"; cat "$out"; exit 1; }
rm -f "$h5"
fm_run 1 "$FMBENCH" -dryrun -masks causal -seqlen 256 -o "$h5" -warmup_s 1.5 -warmup 2 -reps 4 > "$out" 2>&1
rc=$?
[ $rc = 0 ] || { echo "FAIL: fmbench -warmup_s 1.5 exited $rc"; cat "$out"; exit 1; }
grep -q "2 warm-up runs and the steady state (-warmup_s), median of 4" "$out" ||
  { echo "FAIL: fmbench -warmup_s 1.5 is not announced in the header line"; cat "$out"; exit 1; }
# the known passes, as -pass and as flags: accepted and listed in the header line
for args in "-pass fwd,bwd,fwdbwd|fwd bwd fwdbwd" "-bwd|bwd" "-fwdbwd -bwd|bwd fwdbwd" "-pass fwd|fwd" "|fwd"; do
  a=${args%%|*}; want=${args#*|}
  rm -f "$h5"
  fm_run 1 "$FMBENCH" -dryrun -masks causal -seqlen 256 -o "$h5" $a > "$out" 2>&1
  rc=$?
  [ $rc = 0 ] || { echo "FAIL: fmbench -dryrun $a exited $rc"; cat "$out"; exit 1; }
  grep -q "^fmbench: passes $want (" "$out" || { echo "FAIL: fmbench -dryrun $a does not announce passes '$want'"; cat "$out"; exit 1; }
done
rm -f "$out" "$h5"
echo "PASS: fmbench -help lists its options and the library's and exits 0; -pass is parsed and checked"
