#!/bin/sh
# FMMaskSave / FMMaskLoad on 1 and 2 ranks (round trips, corrupted files, collective errors),
# then the file written on 1 rank is checked independently with h5dump: groups, datasets and
# shapes, root attributes, and the values of several datasets against what the program printed.
. "$srcdir/tests/common.sh"
FM_TEST_TIMEOUT=${FM_TEST_TIMEOUT:-120}

dir=$(mktemp -d "${TMPDIR:-/tmp}/fm_hdf5.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT

fm_run 1 ./tests/test_hdf5 "$dir/one.h5" > "$dir/out1"
rc=$?
grep -v '^H5DUMP' "$dir/out1"
[ $rc -eq 0 ] || exit $rc

fm_run 2 ./tests/test_hdf5 "$dir/two.h5" > "$dir/out2"
rc=$?
grep -v '^H5DUMP' "$dir/out2"
[ $rc -eq 0 ] || exit $rc

: "${H5DUMP:=$(command -v h5dump 2>/dev/null)}"
if [ -z "$H5DUMP" ] || ! "$H5DUMP" --version > /dev/null 2>&1; then
  echo "SKIP: h5dump not found (install hdf5-tools); the file layout was not checked"
  exit 77
fi

fail=0
f="$dir/one.h5"
bad() { echo "FAIL: $*" >&2; fail=1; }

# layout: groups, datasets (only the present vectors), shapes
"$H5DUMP" -H "$f" > "$dir/header" 2>&1 || bad "h5dump -H failed"
for g in cdoc gsw perhead rect causal_rect; do
  grep -q "GROUP \"$g\"" "$dir/header" || bad "h5dump -H shows no group /masks/$g"
done
"$H5DUMP" -H -g /masks/perhead "$f" > "$dir/perhead" 2>&1 || bad "h5dump -g /masks/perhead failed"
for v in lts lte uts ute; do
  grep -q "DATASET \"$v\"" "$dir/perhead" || bad "/masks/perhead has no dataset $v"
done
grep -q '( 2, 50 ) / ( 2, 50 )' "$dir/perhead" || bad "/masks/perhead datasets are not 2 x 50"
"$H5DUMP" -H -g /masks/cdoc "$f" > "$dir/cdoc" 2>&1 || bad "h5dump -g /masks/cdoc failed"
[ "$(grep -c 'DATASET' "$dir/cdoc")" = 1 ] || bad "/masks/cdoc should hold exactly one dataset (lts)"
grep -q 'H5T_STD_I32LE' "$dir/cdoc" || bad "/masks/cdoc/lts is not int32"
"$H5DUMP" -H -g /masks/rect "$f" > "$dir/rect" 2>&1 || bad "h5dump -g /masks/rect failed"
grep -q '( 3, 90 ) / ( 3, 90 )' "$dir/rect" || bad "/masks/rect datasets are not 3 x 90"
"$H5DUMP" -H -g /masks/causal_rect "$f" > "$dir/crect" 2>&1 || bad "h5dump -g /masks/causal_rect failed"
grep -q 'DATASET' "$dir/crect" && bad "/masks/causal_rect (no vectors) should hold no dataset"

# attributes
"$H5DUMP" -a /format "$f" 2>&1 | grep -q '"flashmask"' || bad "root attribute format is not \"flashmask\""
"$H5DUMP" -a /masks/cdoc/type "$f" 2>&1 | grep -q '"causal_document"' || bad "/masks/cdoc attribute type is not causal_document"
"$H5DUMP" -a /masks/rect/seqlen_q "$f" 2>&1 | grep -q '(0): 37' || bad "/masks/rect attribute seqlen_q is not 37"

# dataset values against the program's H5DUMP lines
n=0
for d in $(grep '^H5DUMP' "$dir/out1" | cut -d' ' -f2); do
  want=$(grep "^H5DUMP $d " "$dir/out1" | cut -d' ' -f3-)
  got=$("$H5DUMP" -y -w 0 -d "$d" "$f" 2>&1 | sed -n '/DATA {/,/^ *}/p' | sed '1d;$d' | tr ',' ' ')
  # unquoted echo collapses whitespace and newlines
  if [ "$(echo $want)" != "$(echo $got)" ]; then
    bad "h5dump -d $d does not match the values the program printed"
  fi
  n=$((n + 1))
done
[ $n -ge 4 ] || bad "expected at least 4 H5DUMP lines from the program, got $n"

[ $fail -eq 0 ] && echo "test_hdf5.sh: h5dump checks passed ($n datasets compared)"
exit $fail
