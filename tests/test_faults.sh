#!/bin/sh
# test_faults - collective misuse at 2, 3 and 4 ranks ends with an error on every rank within a
# time limit, never a hang or an abort (tests/test_faults.c lists the scenarios). Each scenario
# runs alone under `timeout` (FM_FAULT_TIMEOUT seconds, default 60); a timeout, an abort or a
# rank whose call succeeded fails the test, and every failing scenario is named at the end.
# FM_FAULT_SCENARIOS="a b" runs only those.
. "$srcdir/tests/common.sh"
FM_TEST_TIMEOUT=${FM_FAULT_TIMEOUT:-60}
scenarios=${FM_FAULT_SCENARIOS:-"bad_root diff_root diff_kind diff_call fwd_vs_gather mask_changed mask_stale mask_vs_plan view_vs_fwd sfo_context sfo_mask sfo_plan errhandler"}
failed=""
for np in 2 3 4; do
  for s in $scenarios; do
    fm_run "$np" ./tests/test_faults -scenario "$s"
    rc=$?
    case $rc in
      0) ;;
      124|137) echo "FAIL: scenario $s on $np ranks hung (killed after $FM_TEST_TIMEOUT s)"; failed="$failed $s@$np" ;;
      *) echo "FAIL: scenario $s on $np ranks exited $rc"; failed="$failed $s@$np" ;;
    esac
  done
done
if [ -n "$failed" ]; then echo "test_faults: failed:$failed"; exit 1; fi
echo "test_faults: every scenario ended with an error on every rank at 2, 3 and 4 ranks"
exit 0
