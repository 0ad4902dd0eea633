#!/bin/sh
# Hostile and corrupt files (tests/data/repro/ and files made by the test): named errors only.
. "$srcdir/tests/common.sh"
FM_TEST_TIMEOUT=${FM_TEST_TIMEOUT:-120}
if [ "${FM_HAVE_HDF5:-0}" != 1 ]; then echo "SKIP: built without HDF5"; exit 77; fi
dir=$(mktemp -d "${TMPDIR:-/tmp}/fm_hostile.XXXXXX") || exit 99
trap 'rm -rf "$dir"' EXIT
fm_run 1 ./tests/test_hostile "$srcdir/tests/data" "$dir"
