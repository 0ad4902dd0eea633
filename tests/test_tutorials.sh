#!/bin/sh
# The tutorials run as documented (small sizes here; the README shows the full run).
. "$srcdir/tests/common.sh"
set -e
out=$(fm_run 1 ./tutorials/ex1 -seqlen 1024 -fm_plan_heads 4 -fm_plan_kv_heads 2 -fm_plan_head_dim 64)
echo "$out"
echo "$out" | grep -q "ex1: OK"
out=$(fm_run 2 ./tutorials/ex1 -seqlen 700 -fm_plan_heads 2 -fm_plan_kv_heads 1 -fm_plan_head_dim 32 -fm_backend cpu)
echo "$out"
echo "$out" | grep -q "ex1: OK"
# -help lists the distributed plan's options, the CUDA backend's included
out=$(fm_run 2 ./tutorials/ex1 -seqlen 700 -fm_plan_heads 2 -fm_plan_kv_heads 1 -fm_plan_head_dim 32 -fm_backend cpu -help)
for o in -fm_plan_transport -fm_plan_step_chunks -fm_gpu_aware_mpi; do
  echo "$out" | grep -q -- "$o <" || { echo "FAIL: ex1 -help does not list $o"; exit 1; }
done
h5=ex2_test_$$.h5
rm -f $h5
out=$(fm_run 1 ./tutorials/ex2 -seqlen 2000 -o $h5)
echo "$out"
n=$(echo "$out" | grep -cE '^(full|causal|sliding_window|causal_document|document|share_question|global_sliding_window|causal_blockwise|prefix_lm_document|prefix_lm_causal|qk_sparse|random_eviction) ')
[ "$n" = 12 ] || { echo "FAIL: ex2 printed $n of 12 masks"; exit 1; }
if [ "${FM_HAVE_HDF5:-0}" = 1 ]; then
  [ -s $h5 ] || { echo "FAIL: ex2 wrote no $h5"; exit 1; }
  if [ -n "$H5DUMP" ]; then
    g=$($H5DUMP -n $h5 | grep -c 'group      /masks/')
    [ "$g" = 12 ] || { echo "FAIL: $h5 has $g mask groups, expected 12"; exit 1; }
  fi
fi
rm -f $h5
echo "tutorials: ok"
