#!/bin/sh
# The tutorials run as documented (small sizes here; the README shows the full run): every run
# listed in the /*TEST ... TEST*/ block at the end of tutorials/ex*.c, through
# tests/run_tutorial_tests.sh, which checks exit codes and the outputs the block names; the
# Fortran tutorial ex3f (tutorials/ex3f.F90, the block inside #if 0) where it was built.
rc=0 nskip=0 nex=2
for ex in ex1 ex2 ex3f; do
  src="$srcdir/tutorials/$ex.c"
  if [ $ex = ex3f ]; then
    [ -x ./tutorials/ex3f ] || continue
    src="$srcdir/tutorials/ex3f.F90" nex=3
  fi
  sh "$srcdir/tests/run_tutorial_tests.sh" ./tutorials/$ex "$src"
  r=$?
  case $r in
    0) ;;
    77) nskip=$((nskip + 1)) ;;
    *) rc=1 ;;
  esac
done
[ $rc = 0 ] && [ $nskip = $nex ] && exit 77
exit $rc
