#!/bin/sh
# fmbench -cp without a GPU: -fm_backend cpu runs the whole benchmark on the CPU backend (host
# buffers), so its options and its CSV are checked here.
#  2 ranks: -pass fwd,fwdbwd over every configuration: the rows, the bytes (a forward + backward
#    gathers K/V twice and sends dK/dV partials back; the ring and the all-gather move the
#    all-gather's bytes, the plan no more, less on document), the speedups on the plan rows, the
#    traces (with HDF5: both calls saved, the forward's overlap in both passes' rows).
#  bad -pass / -configs names: refused by name on every rank, nonzero exit.
#  3 ranks: -configs ring -pass bwd -single 0: only those rows.
#  4 ranks: 2 virtual nodes (-fm_plan_nodes 2): the bytes per link level of the flat and the
#    hierarchical route equal fmplan-sim's prediction for 2 nodes x 2, the hierarchical route
#    sends no more across nodes than the flat one, and the real topology (one node) sends
#    nothing across.
#  share/bench/cp_multi.sh end to end on 4 ranks with tiny sizes and a stand-in torch (python3
#    for its table).
# Skips (77) when fmbench is not built (no CUDA).
. "$srcdir/tests/common.sh"
FMBENCH="${top_builddir}/fmbench"
[ -x "$FMBENCH" ] || { echo "SKIP: fmbench not built (no CUDA in this build)"; exit 77; }
t=test_fmbench_cp.dir
rm -rf "$t"; mkdir -p "$t"
fail() { echo "FAIL: $*"; exit 1; }
CPU="-fm_backend cpu -fm_num_threads 1"
SMALL="-heads 4 -heads_kv 2 -head_dim 32 -warmup 0 -reps 1"
# col FILE NAME: the index of column NAME of the CSV header
col() { head -1 "$1" | tr , '\n' | grep -n -x "$2" | cut -d: -f1; }
# field FILE MASK CONFIG PASS NAME: that row's field
field() { c=$(col "$1" "$5"); awk -F, -v m="$2" -v k="$3" -v p="$4" -v c="$c" '$1 == m && $3 == k && $4 == p { print $c }' "$1"; }

# -- 2 ranks, every configuration, forward and forward + backward
trace=none
[ "${FM_HAVE_HDF5:-0}" = 1 ] && trace="$t/tr"
fm_run 2 "$FMBENCH" -cp $CPU $SMALL -masks causal,document -seqlen 512 -pass fwd,fwdbwd -csv "$t/a.csv" -trace_dir "$trace" -label L2 \
  > "$t/a.out" 2>&1 || { cat "$t/a.out"; fail "fmbench -cp -fm_backend cpu on 2 ranks exited $?"; }
head -1 "$t/a.csv" | grep -qx "mask,seqlen,config,pass,ranks,batch,heads,heads_kv,head_dim,dtype,ms,tflops,overlap_efficiency,exposed_max_ms,exposed_mean_ms,compute_imbalance,overlap_forward,bytes_moved,bytes_intra,bytes_inter,bytes_reduce,bytes_allgather,speedup_vs_allgather,speedup_vs_ring,speedup_vs_1gpu,route,label" ||
  { head -1 "$t/a.csv"; fail "the CSV header"; }
[ "$(grep -c ',L2$' "$t/a.csv")" = 16 ] || { cat "$t/a.csv"; fail "expected 16 rows (2 masks x 3 configurations + 1 GPU x 2 passes), labelled"; }
grep -q "summary, fwdbwd" "$t/a.out" || { cat "$t/a.out"; fail "no forward + backward summary"; }
for m in causal document; do
  for k in plan allgather ring; do
    f=$(field "$t/a.csv" $m $k fwd bytes_moved) b=$(field "$t/a.csv" $m $k fwdbwd bytes_moved)
    [ -n "$f" ] && [ "$f" -gt 0 ] && [ "$b" = $((2 * f)) ] || fail "$m $k: forward + backward moved $b bytes of K/V, expected twice the forward's $f"
    [ "$(field "$t/a.csv" $m $k fwd bytes_reduce)" = 0 ] || fail "$m $k: a forward sent dK/dV partials"
    [ "$(field "$t/a.csv" $m $k fwdbwd bytes_reduce)" -gt 0 ] || fail "$m $k: forward + backward sent no dK/dV partials"
    [ "$(field "$t/a.csv" $m $k fwd ranks)" = 2 ] || fail "$m $k: ranks column"
    [ "$(field "$t/a.csv" $m $k fwd bytes_inter)" = 0 ] || fail "$m $k: bytes across nodes on one node"
  done
  ag=$(field "$t/a.csv" $m allgather fwd bytes_allgather)
  [ "$(field "$t/a.csv" $m allgather fwd bytes_moved)" = "$ag" ] || fail "$m: the unpruned all-gather does not move the all-gather's bytes ($ag)"
  [ "$(field "$t/a.csv" $m ring fwd bytes_moved)" = "$ag" ] || fail "$m: the ring on 2 ranks does not move the all-gather's bytes ($ag)"
  [ "$(field "$t/a.csv" $m plan fwd bytes_moved)" -le "$ag" ] || fail "$m: the pruned plan moves more than the all-gather"
  for p in fwd fwdbwd; do
    [ -n "$(field "$t/a.csv" $m plan $p speedup_vs_1gpu)" ] && [ -n "$(field "$t/a.csv" $m plan $p speedup_vs_ring)" ] ||
      fail "$m $p: no speedups on the plan row"
    [ -n "$(field "$t/a.csv" $m 1gpu $p ms)" ] || fail "$m $p: no one-GPU row"
  done
done
[ "$(field "$t/a.csv" document plan fwd bytes_moved)" -lt "$(field "$t/a.csv" document allgather fwd bytes_moved)" ] ||
  fail "document: the plan prunes nothing"
if [ "$trace" != none ]; then
  for k in plan allgather ring; do
    [ -f "$t/tr/causal_512_$k.h5" ] || fail "no trace causal_512_$k.h5"
    of=$(field "$t/a.csv" causal $k fwd overlap_efficiency) ob=$(field "$t/a.csv" causal $k fwdbwd overlap_efficiency)
    [ -n "$of" ] && [ -n "$ob" ] || fail "causal $k: no overlap efficiency"
    awk -v x="$of" -v y="$ob" 'BEGIN { exit !(x >= 0 && x <= 1 && y >= 0 && y <= 1) }' || fail "causal $k: overlap $of / $ob outside [0, 1]"
    [ "$(field "$t/a.csv" causal $k fwdbwd overlap_forward)" = "$of" ] || fail "causal $k: the forward + backward row's overlap_forward is not the forward's"
  done
  if [ -x "${top_builddir}/fmtrace" ]; then
    "${top_builddir}/fmtrace" "$t/tr/document_512_plan.h5" -run backward > "$t/ft.out" 2>&1 || { cat "$t/ft.out"; fail "fmtrace -run backward"; }
  fi
fi
echo "2 ranks: $(grep -c ',L2$' "$t/a.csv") rows, bytes and traces check out"

# -- bad names: refused by name
fm_run 2 "$FMBENCH" -cp $CPU $SMALL -masks causal -seqlen 256 -pass fwd,backward -trace_dir none > "$t/b.out" 2>&1 && fail "-pass fwd,backward exited 0"
grep -q 'unknown name "backward"' "$t/b.out" || { cat "$t/b.out"; fail "-pass: the bad name is not named"; }
fm_run 2 "$FMBENCH" -cp $CPU $SMALL -masks causal -seqlen 256 -configs plan,rings -trace_dir none > "$t/b.out" 2>&1 && fail "-configs plan,rings exited 0"
grep -q 'unknown name "rings"' "$t/b.out" || { cat "$t/b.out"; fail "-configs: the bad name is not named"; }

# -- 3 ranks: one configuration, the backward alone, no one-GPU run
fm_run 3 "$FMBENCH" -cp $CPU $SMALL -masks causal_document -seqlen 768 -configs ring -pass bwd -single 0 -trace_dir none -csv "$t/c.csv" \
  > "$t/c.out" 2>&1 || { cat "$t/c.out"; fail "fmbench -cp -configs ring -pass bwd on 3 ranks exited $?"; }
[ "$(tail -n +2 "$t/c.csv" | cut -d, -f1-5 | tr '\n' ' ')" = "causal_document,768,ring,bwd,3 " ] || { cat "$t/c.csv"; fail "3 ranks: expected the one ring bwd row"; }
[ "$(field "$t/c.csv" causal_document ring bwd bytes_reduce)" -gt 0 ] || fail "3 ranks: the backward sent no partials"
echo "3 ranks: -configs ring -pass bwd gives its one row"

# -- 4 ranks: virtual nodes against fmplan-sim
VN="$CPU -configs plan -single 0 -trace_dir none -masks document -seqlen 1024 -heads 32 -heads_kv 32 -head_dim 128 -warmup 0 -reps 1"
for r in flat hierarchical; do
  fm_run 4 "$FMBENCH" -cp $VN -fm_plan_nodes 2 -fm_plan_route $r -csv "$t/v_$r.csv" > "$t/v.out" 2>&1 || { cat "$t/v.out"; fail "4 ranks, 2 virtual nodes, $r route"; }
done
fm_run 4 "$FMBENCH" -cp $VN -csv "$t/v_real.csv" > "$t/v.out" 2>&1 || { cat "$t/v.out"; fail "4 ranks, real topology"; }
[ "$(field "$t/v_real.csv" document plan fwd bytes_inter)" = 0 ] || fail "the real topology (one node) sent bytes across nodes"
[ "$(field "$t/v_real.csv" document plan fwd bytes_intra)" -gt 0 ] || fail "the real topology sent nothing"
"${top_builddir}/fmplan-sim" -nodes 2 -gpus_per_node 2 -mask document -seqlen 1024 -heads_kv 32 -head_dim 128 -table 1 > "$t/sim.out" 2>&1 ||
  { cat "$t/sim.out"; fail "fmplan-sim"; }
sf=$(awk '$1 == "balanced" { print $9, $10; getline; print $2, $3 }' "$t/sim.out")
[ "$(echo "$sf" | wc -w)" = 4 ] || { cat "$t/sim.out"; fail "fmplan-sim: no balanced rows"; }
set -- $sf
for r in flat hierarchical; do
  mi=$(field "$t/v_$r.csv" document plan fwd bytes_intra) me=$(field "$t/v_$r.csv" document plan fwd bytes_inter)
  [ "$(field "$t/v_$r.csv" document plan fwd route)" = $r ] || fail "$r: the CSV's route column"
  awk -v a="$mi" -v b="$me" -v x="$1" -v y="$2" 'BEGIN { exit !(b > 0 && (a / 1e9 - x) ^ 2 < 6e-5 ^ 2 && (b / 1e9 - y) ^ 2 < 6e-5 ^ 2) }' ||
    fail "$r route on 2 virtual nodes: measured $mi / $me bytes inside / across nodes, fmplan-sim predicts $1 / $2 GB"
  echo "2 virtual nodes, $r route: $mi / $me bytes inside / across nodes; fmplan-sim: $1 / $2 GB"
  [ $r = flat ] && inter_flat=$me
  [ $r = hierarchical ] && inter_hier=$me
  shift 2
done
[ "$inter_hier" -le "$inter_flat" ] || fail "the hierarchical route sends more across nodes ($inter_hier) than the flat one ($inter_flat)"

# -- cp_multi.sh end to end, tiny, with PyTorch's runs against the stand-in torch of
#    tests/data/faketorch.py (its times mean nothing; the wiring into the table is checked)
PY=${PYTHON3:-python3}
if $PY -c "import sys; sys.exit(sys.version_info < (3, 6))" 2>/dev/null; then
  $PY "$srcdir/tests/data/faketorch.py" "$t/ft" || fail "faketorch.py"
  printf '#!/bin/sh\nn=1\nwhile :; do case $1 in --standalone) shift;; --nproc_per_node=*) n=${1#*=}; shift;; *) break;; esac; done\nWORLD_SIZE=$n exec %s "$@"\n' "$PY" > "$t/torchrun.sh"
  NP=4 TOKENS_PER_GPU=128 TOKENS_TOTAL=1024 MASKS=causal HEADS=4 HEADS_KV=2 HEAD_DIM=32 REPS=1 WARMUP=0 CP_SKIP_BUILD=1 \
    FMBENCH_EXTRA="$CPU" FMBENCH="$FMBENCH" FMPLANSIM="${top_builddir}/fmplan-sim" FMTRACE="${top_builddir}/fmtrace" PYTHON3=$PY \
    PYTHONPATH="$PWD/$t/ft" TORCHRUN="sh $PWD/$t/torchrun.sh" MPIEXEC="$MPIEXEC" WORK="$t/mw" OUT="$t/mo" \
    sh "$srcdir/share/bench/cp_multi.sh" > "$t/m.out" 2>&1 || { cat "$t/m.out"; fail "cp_multi.sh on the CPU backend exited $?"; }
  tb="$t/mo/cp_table_P4.md"
  [ "$(grep -c "^causal,[0-9]*,torch_cp_all[a-z]*,fwd" "$t/mo/torch_cp.csv")" = 8 ] || { cat "$t/m.out"; fail "cp_multi.sh: PyTorch's rows"; }
  grep -Eq "^\| causal \| 512 \| 2 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ (ok|MISS) \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ (ok|MISS) \| [0-9.]+ \|$" "$tb" ||
    { cat "$tb"; fail "cp_multi.sh: no full causal 512 row"; }
  grep -Eq "^\| causal \| 1024 \| 2 \| .*\| [0-9.]+ (ok|MISS) \| [0-9.]+ \| [0-9.]+ (ok|MISS) \| [0-9.]+ \|$" "$tb" || { cat "$tb"; fail "cp_multi.sh: the 1024 row's ratio columns"; }
  [ "$(grep -c "^| causal | 512 | 2 | .*_v2 |" "$tb")" = 2 ] || { cat "$tb"; fail "cp_multi.sh: the virtual-node rows"; }
  grep -Eq "^\| causal \| 512 \| 2 \| flat_v2 \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \| [0-9.]+ \|$" "$tb" || { cat "$tb"; fail "cp_multi.sh: the flat row without fmplan-sim's prediction"; }
  grep -q "never slower than the ring" "$tb" || fail "cp_multi.sh: no targets"
  tail -3 "$t/m.out" | grep -q "_v2" || fail "cp_multi.sh does not print the tables last"
  # the slowest plan row is the longer sequence on a quiet machine, either one on a loaded one
  if [ "${FM_HAVE_HDF5:-0}" = 1 ]; then ls "$t"/mo/cp_trace_P4_causal_*_kv2_*.svg > /dev/null 2>&1 || { cat "$t/m.out"; fail "cp_multi.sh: no SVG"; }; fi
  echo "cp_multi.sh: $(grep -c '^| causal' "$tb") table rows on 4 CPU ranks"
fi
rm -rf "$t"
echo "PASS: fmbench -cp on the CPU backend: passes, configurations, bytes, traces, virtual nodes against fmplan-sim, cp_multi.sh"
