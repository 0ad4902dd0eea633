#!/bin/sh
# test_dist_fail - a failure at each fault site of the CPU context-parallel executors
# (src/sys/faults.c, -fm_debug_fail SITE:RANK[:COUNT]) on one rank, at 2, 3 and 4 ranks, is an
# error on every rank naming the site, never a hang; the plan then works again (COUNT 1) or
# fails again alike (COUNT 0), and is destroyed cleanly (tests/test_dist_fail.c checks each run).
# Each case runs alone under `timeout` (FM_FAULT_TIMEOUT seconds, default 60): a timeout, an
# abort or a failed check fails the test, and every failing case is named at the end.
# FM_FAIL_SITES="a b" runs only the cases of those sites. The GPU executor's sites run too in a
# CUDA build with a visible GPU (2 ranks sharing it over -fm_plan_transport mpi, bf16); without
# one they are reported as skipped. FM_FAIL_BACKEND=cuda runs the GPU cases only (=cpu: CPU only).
. "$srcdir/tests/common.sh"
FM_TEST_TIMEOUT=${FM_FAULT_TIMEOUT:-60}
failed=""
n=0
# case NP SITE RANK[:COUNT] [OPTIONS...]
case_() {
  np=$1 site=$2 who=$3
  shift 3
  if [ -n "${FM_FAIL_SITES:-}" ]; then
    case " $FM_FAIL_SITES " in *" $site "*) ;; *) return 0 ;; esac
  fi
  out=$(fm_run "$np" ./tests/test_dist_fail -fm_debug_fail "$site:$who" "$@" 2>&1)
  rc=$?
  [ $rc = 77 ] || n=$((n + 1))
  case $rc in
    0) echo "$out" | grep -v "all checks passed" | head -n 1 ;;
    77) echo "$out" | grep -m 1 SKIP; skipped=1 ;;
    124|137) echo "FAIL: $site:$who $* on $np ranks hung (killed after $FM_TEST_TIMEOUT s)"; failed="$failed $site:$who@$np" ;;
    *) echo "$out" | grep -v "^  \|^--\|^\[" | head -n 8; echo "FAIL: $site:$who $* on $np ranks exited $rc"; failed="$failed $site:$who@$np" ;;
  esac
}
backend=${FM_FAIL_BACKEND:-all}
skipped=0
[ "$backend" = cuda ] || for np in 2 3 4; do
  last=$((np - 1))
  echo "=== $np ranks"
  # the pruned gather (overlapped), its relays and the dK/dV reduction over the reverse route
  for site in cp_exec_alloc cp_forward_chunk cp_backward_chunk cp_gather_wait cp_reduce_send cp_finish_sends; do
    case_ $np $site $last
  done
  case_ $np cp_reduce_wait 0
  [ $np -ge 3 ] && case_ $np cp_relay $((np - 2))
  # the gather without overlap, and in the fixed order of -fm_deterministic
  case_ $np cp_gather_wait $last -fm_plan_overlap 0
  case_ $np cp_backward_chunk 0 -fm_plan_overlap 0
  case_ $np cp_gather_wait $last -fm_deterministic
  case_ $np cp_forward_chunk $last -fm_deterministic
  case_ $np cp_backward_chunk 0 -fm_deterministic
  # the ring schedule
  for site in cp_forward_chunk cp_backward_chunk cp_ring_wait cp_ring_reduce; do
    case_ $np $site $last -fm_plan_schedule ring
  done
  # every hit fails (count 0): the second call fails alike too
  case_ $np cp_reduce_wait 0:0
  case_ $np cp_ring_wait 0:0 -fm_plan_schedule ring
done
# The GPU executor (CUDA build, a GPU): the run start of the forward, the exchange over MPI
# (gpu_exchange_post needs NCCL and a GPU per rank: test_gpu_cp covers it), the backward's download,
# reduction and upload, on the gather and on the ring; 2 ranks share the GPU over staged MPI.
if [ "$backend" != cpu ] && [ "${FM_HAVE_CUDA:-0}" = 1 ]; then
  echo "=== 2 ranks, CUDA backend"
  g="-fail_backend cuda -fm_plan_transport mpi"
  case_ 2 gpu_run_start 1 $g
  if [ $skipped = 0 ]; then
    case_ 2 gpu_run_start 0:0 $g
    case_ 2 gpu_exchange_wait 1 $g
    case_ 2 gpu_reduce_download 1 $g
    case_ 2 gpu_reduce_send 1 $g
    case_ 2 gpu_reduce_wait 0 $g
    case_ 2 gpu_reduce_upload 0 $g
    case_ 2 gpu_reduce_send 1 $g -fm_plan_schedule ring
    case_ 2 gpu_run_start 1 $g -fm_plan_overlap 0
  fi
fi
if [ -n "$failed" ]; then echo "test_dist_fail: failed:$failed"; exit 1; fi
note=""
[ $skipped = 1 ] && note=" (the GPU cases skipped: no GPU)"
echo "test_dist_fail: $n cases, each an error on every rank naming its fault site, then a usable plan$note"
exit 0
