#!/bin/sh
# The Fortran module (tests/test_fortran.F90): causal_document density against the document
# lengths, bounds through optional arguments, FP32 forward/backward against a naive Fortran
# float64 reference, error returns, options from FM_OPTIONS and the other option getters, log
# events, bf16/fp16 conversions (round to nearest even), HDF5 round trip; 1 and 2 ranks; the
# command line read by fm_initialize.
. "$srcdir/tests/common.sh"
FM_TEST_TIMEOUT=${FM_TEST_TIMEOUT:-120}

dir=$(mktemp -d "${TMPDIR:-/tmp}/fm_fortran.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT

fm_run 1 ./tests/test_fortran "$dir/one.h5" || exit $?
FM_OPTIONS="-fm_fortran_check 17" fm_run 2 ./tests/test_fortran "$dir/two.h5" || exit $?
# the command line reaches the options too, over FM_OPTIONS
FM_OPTIONS="-fm_fortran_check 17" fm_run 1 ./tests/test_fortran "$dir/three.h5" -fm_fortran_check 19 || exit $?
exit 0
