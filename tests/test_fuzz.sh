#!/bin/sh
# The four fuzz targets (tests/fuzz/) under the deterministic mutation driver: a fixed number
# of mutated inputs each, seeded by tests/fuzz/seeds/ and the reproducers of tests/data/repro/.
# A crash, a broken invariant (abort) or a leak in our code fails the test. A fault inside
# HDF5 itself (HDF5 1.10 crashes on some corrupt files; doc/format.md) is listed and the run
# resumes after that input; more than 40 (times FM_FUZZ_N) of them fail the test. FM_FUZZ_N multiplies the counts.
# fuzz_bounds also runs on 2 and 3 ranks, where its attention check runs a distributed "cp" plan.
# Under -fsanitize=address run with ASAN_OPTIONS=allocator_may_return_null=1 (HDF5 asks for
# absurd sizes on corrupt files and handles the NULL) and Open MPI's leaks suppressed.
. "$srcdir/tests/common.sh"
FM_TEST_TIMEOUT=${FM_TEST_TIMEOUT:-300}
s=$srcdir/tests/fuzz/seeds
r=$srcdir/tests/data/repro
mult=${FM_FUZZ_N:-1}
dir=$(mktemp -d "${TMPDIR:-/tmp}/fm_fuzz.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT
export TMPDIR="$dir"
np=1 # ranks of the next run (fuzz_bounds also runs on 2 and 3: its plans are then distributed)
run() {
  name=$1; count=$(($2 * mult)); shift 2
  start=0; hdf5=0
  while :; do
    # several ranks on few cores: one thread each (tiny problems; more threads only contend)
    if [ $np -gt 1 ]; then OMP_NUM_THREADS=1 fm_run $np ./tests/fuzz/fuzz_$name -n $count -seed 20261201 -start $start "$@" > "$dir/$name.out" 2>&1
    else fm_run $np ./tests/fuzz/fuzz_$name -n $count -seed 20261201 -start $start "$@" > "$dir/$name.out" 2>&1; fi
    rc=$?
    [ $rc -eq 0 ] && break
    k=$(sed -n 's/^FM_FUZZ_HDF5_CRASH \([0-9][0-9]*\)$/\1/p' "$dir/$name.out" | tail -1)
    if [ -z "$k" ] && grep -q '^FM_FUZZ_INPUT [0-9]' "$dir/$name.out"; then
      # a sanitizer's report: its innermost frame outside the sanitizer and the C library
      where=$(awk '/^ *#[0-9]+ 0x/ && !/interceptor|sanitizer|libc\.so|libc_start|\/sysdeps\/|libio\/|\/string\// { print; exit }' "$dir/$name.out")
      case $where in *libhdf5*) k=$(sed -n 's/^FM_FUZZ_INPUT \([0-9][0-9]*\)$/\1/p' "$dir/$name.out" | tail -1) ;; esac
    fi
    if [ -z "$k" ]; then
      cat "$dir/$name.out"
      echo "FAIL: fuzz_$name exited $rc (replay an input with -only K -save FILE, -v numbers them)"
      exit 1
    fi
    hdf5=$((hdf5 + 1))
    echo "fuzz_$name: input $k faults inside HDF5 itself (not our code); resuming at $((k + 1))"
    [ $hdf5 -le $((40 * mult)) ] || { echo "FAIL: fuzz_$name: more than $((40 * mult)) faults inside HDF5"; exit 1; }
    start=$((k + 1))
  done
  echo "fuzz_$name ($np rank$([ $np -gt 1 ] && echo s)): the seeds and $count mutated inputs ran, $hdf5 of them skipped after a fault inside HDF5; last run: $(grep 'mutated inputs' "$dir/$name.out" | head -1)"
}
run options 20000 "$s"/options-*.txt
run bounds 50000 "$s"/bounds-*.bin
np=2; run bounds 20000 "$s"/bounds-*.bin
np=3; run bounds 10000 "$s"/bounds-*.bin
np=1
if [ "${FM_HAVE_HDF5:-0}" = 1 ]; then
  run mask 4000 "$s"/mask-*.h5 "$r"/mask*.h5
  run trace 4000 "$s"/trace-*.h5 "$r"/fmtrace-*.h5 "$r"/trace-*.h5
fi
exit 0
