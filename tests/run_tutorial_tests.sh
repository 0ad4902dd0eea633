#!/bin/sh
# run_tutorial_tests.sh PROGRAM SOURCE.c - run the tests listed in the /*TEST ... TEST*/ block
# at the end of a tutorial's source, each through fm_run of tests/common.sh (test_tutorials.sh
# calls it once per tutorial).
#
# The block holds one or more entries; each starts with a line "test:" and has indented
# "key: value" lines:
#   suffix:     name of the run (the test is called <program>_<suffix>)
#   nsize:      number of MPI ranks (default 1)
#   args:       command-line arguments (split on blanks)
#   requires:   features the run needs, blank separated: hdf5, cuda, h5dump; a run whose
#               requirements are missing is skipped
#   returncode: the exit status expected from the program (default 0)
#   output:     a text the program's output (stdout and stderr) must contain; may repeat
#   check:      a shell command run after the program, in its directory, that must exit 0;
#               $H5DUMP is set; may repeat
# Every run happens in a fresh temporary directory, so relative file names in args stay
# there. Exit status: 0 when every run that was not skipped passed (and at least one ran),
# 77 when all were skipped, 1 otherwise.

. "$(dirname "$0")/common.sh"
prog=$1
src=$2
if [ -z "$prog" ] || [ -z "$src" ] || [ ! -r "$src" ]; then
  echo "usage: run_tutorial_tests.sh PROGRAM SOURCE.c" >&2
  exit 99
fi
case $prog in /*) ;; *) prog=$(pwd)/$prog ;; esac
name=$(basename "$prog")
work=$(mktemp -d "${TMPDIR:-/tmp}/fm_tut.XXXXXX") || exit 99
trap 'rm -rf "$work"' EXIT

# The block, without its two marker lines.
sed -n '/^\/\*TEST[[:space:]]*$/,/^TEST\*\/[[:space:]]*$/p' "$src" | sed '1d;$d' > "$work/block"
if ! grep -q '^[[:space:]]*test:[[:space:]]*$' "$work/block"; then
  echo "FAIL: $src has no /*TEST ... TEST*/ block with a test: entry"
  exit 1
fi

nrun=0 nfail=0 nskip=0
have() {
  case $1 in
    hdf5) [ "${FM_HAVE_HDF5:-0}" = 1 ] ;;
    cuda) [ "${FM_HAVE_CUDA:-0}" = 1 ] ;;
    h5dump) [ -n "${H5DUMP:-}" ] && "$H5DUMP" --version > /dev/null 2>&1 ;;
    *) echo "FAIL: $src: unknown requirement '$1'" >&2; return 2 ;;
  esac
}

# Run the entry collected in the variables below.
run_entry() {
  [ -n "$in_entry" ] || return 0
  t=${name}_${suffix:-$nentry}
  for r in $requires; do
    have "$r"
    case $? in
      0) ;;
      1) echo "== $t: SKIP (requires $r)"; nskip=$((nskip + 1)); return 0 ;;
      *) nfail=$((nfail + 1)); return 0 ;;
    esac
  done
  d="$work/$t"
  mkdir -p "$d"
  echo "== $t: $nsize rank(s): $name $args"
  # shellcheck disable=SC2086 # args are split on blanks on purpose
  (cd "$d" && fm_run "$nsize" "$prog" $args < /dev/null > "$d/out" 2>&1)
  rc=$?
  cat "$d/out"
  bad=0
  if [ "$rc" != "$returncode" ]; then
    echo "FAIL: $t exited with $rc, expected $returncode"
    bad=1
  fi
  while IFS= read -r want; do
    [ -n "$want" ] || continue
    grep -F -q -- "$want" "$d/out" || { echo "FAIL: $t: the output lacks '$want'"; bad=1; }
  done <<EOF
$outputs
EOF
  while IFS= read -r cmd; do
    [ -n "$cmd" ] || continue
    (cd "$d" && eval "$cmd") < /dev/null || { echo "FAIL: $t: check failed: $cmd"; bad=1; }
  done <<EOF
$checks
EOF
  nrun=$((nrun + 1))
  if [ $bad = 0 ]; then echo "== $t: ok"; else nfail=$((nfail + 1)); fi
}

in_entry= nentry=0
while IFS= read -r line || [ -n "$line" ]; do
  line=$(printf '%s' "$line" | sed 's/^[[:space:]]*//; s/[[:space:]]*$//')
  [ -n "$line" ] || continue
  case $line in \#*) continue ;; esac
  if [ "$line" = "test:" ]; then
    run_entry
    in_entry=1 nentry=$((nentry + 1))
    suffix= nsize=1 args= requires= returncode=0 outputs= checks=
    continue
  fi
  if [ -z "$in_entry" ]; then echo "FAIL: $src: '$line' before the first test:"; nfail=$((nfail + 1)); continue; fi
  key=${line%%:*}
  val=$(printf '%s' "${line#*:}" | sed 's/^[[:space:]]*//')
  case $key in
    suffix) suffix=$val ;;
    nsize) nsize=$val ;;
    args) args=$val ;;
    requires) requires=$val ;;
    returncode) returncode=$val ;;
    output) outputs="$outputs
$val" ;;
    check) checks="$checks
$val" ;;
    *) echo "FAIL: $src: unknown key '$key' in test $nentry"; nfail=$((nfail + 1)) ;;
  esac
done < "$work/block"
run_entry

echo "$name: $nrun run(s), $nfail failed, $nskip skipped"
[ $nfail = 0 ] || exit 1
[ $nrun -gt 0 ] || exit 77
exit 0
