#!/bin/sh
# Options database, errors, log; and -help lists the options a program reads.
. "$srcdir/tests/common.sh"
set -e
FM_OPTIONS="-fm_test_env 7 -fm_test_override 2" fm_run 1 ./tests/test_sys -fm_test_override 3
out=$(FM_OPTIONS="-fm_test_env 7" fm_run 1 ./tests/test_sys -fm_test_override 3 -help)
echo "$out" | grep -q -- "-fm_test_file <11>: from the options file" || { echo "FAIL: -help does not list -fm_test_file"; exit 1; }
echo "$out" | grep -q -- "-fm_log_view" || { echo "FAIL: -help does not list -fm_log_view"; exit 1; }
echo "-help lists the options: ok"
