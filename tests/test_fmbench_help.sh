#!/bin/sh
# fmbench -help prints fmbench's own options and the library's, then exits 0, without a GPU
# (it must not stop at the device check). Skips (77) when fmbench is not built (no CUDA).
. "$srcdir/tests/common.sh"
FMBENCH="${top_builddir}/fmbench"
[ -x "$FMBENCH" ] || { echo "SKIP: fmbench not built (no CUDA in this build)"; exit 77; }
out=test_fmbench_help.out
rm -f "$out"
fm_run 1 "$FMBENCH" -help > "$out" 2>&1
rc=$?
[ $rc = 0 ] || { echo "FAIL: fmbench -help exited $rc"; cat "$out"; exit 1; }
for opt in -masks -seqlen -head_dim -heads_kv -tokens -dtype -warmup -reps -seed -csv -dryrun -mask_batch -cp -fm_log_view; do
  grep -q -- "$opt" "$out" || { echo "FAIL: fmbench -help does not list $opt"; cat "$out"; exit 1; }
done
rm -f "$out"
echo "PASS: fmbench -help lists its options and the library's and exits 0"
