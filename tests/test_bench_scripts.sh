#!/bin/sh
# The benchmark scripts without a GPU or torch: share/bench/peers.py and compare_table.py compile;
# peers.py --self-test passes (argument parsing; the HDF5 reading where numpy and h5py are
# installed, then also on a mask file fmbench -dryrun writes, shared and per-sample);
# compare.sh and gpu_check.sh parse (sh -n); and compare.sh runs end to end with stand-ins for
# fmbench and for peers.py's timings: the runs it makes (the same shape options for both, the
# per-sample document case), and its table and compare.csv (peer TFLOP/s from our FLOPs, the
# ratios, n/a where a peer has no time). The context-parallel scripts: cp_multi.sh and cp_check.sh
# parse; peers_cp.py and cp_table.py compile; peers_cp.py --self-test passes, --help works and,
# without torch, a run exits 77; cp_table.py turns hand-made P = 8 rows into the expected ratio
# columns and verdicts. bwd/ncu_sass.py (the SASS-level reader of ncu exports), bwd/sass_step.py
# (the dense step's instructions counted from cuobjdump), bwd/step_fit.py
# (the three-term fit of fmbench -visits runs), ab_table.py (the A/B scripts' table) and
# gpuclock.py (a run's SM clock and board power) compile and their --self-tests pass; compare.sh
# prints a gpuclock line per run with a stand-in nvidia-smi; ab.sh (through bwd/ab.sh and
# fwd/ab.sh) runs end to end with a stand-in nvcc whose harness builds print fixed times (the
# builds it makes from which harness's sources, its checks, its profiles, its rounds and its
# table). Skips (77) without python3.
. "$srcdir/tests/common.sh"
PY=${PYTHON3:-python3}
$PY -c "import sys; sys.exit(sys.version_info < (3, 6))" 2>/dev/null || { echo "SKIP: no python3 (>= 3.6)"; exit 77; }
B="$srcdir/share/bench"
t=test_bench_scripts.dir
rm -rf "$t"; mkdir -p "$t"
fail() { echo "FAIL: $*"; exit 1; }
for f in peers.py compare_table.py peers_cp.py cp_table.py bwd/ncu_sass.py bwd/step_fit.py ab_table.py gpuclock.py; do
  $PY -c "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)" "$B/$f" "$t/$f.pyc" ||
    fail "$f does not compile"
done
for f in compare.sh gpu_check.sh cp_multi.sh cp_check.sh gpu_quick.sh sched.sh bwd/device_run.sh fwd/device_run.sh ab.sh fwd/ab.sh bwd/ab.sh ab_fwd.sh; do sh -n "$B/$f" || fail "$f: sh -n"; done
$PY "$B/peers.py" --help > "$t/help" 2>&1 || fail "peers.py --help exited $? (it must work without torch)"
grep -q -- "--pass" "$t/help" || fail "peers.py --help does not list --pass"
mfs=""
if [ -x "${top_builddir}/fmbench" ] && [ "${FM_HAVE_HDF5:-0}" = 1 ]; then
  fm_run 1 "${top_builddir}/fmbench" -dryrun -masks document,causal,random_eviction -heads 4 -seqlen 300 -o "$t/m1.h5" > "$t/fm.out" 2>&1 &&
    fm_run 1 "${top_builddir}/fmbench" -dryrun -masks document -seqlen 300 -mask_batch 3 -o "$t/m3.h5" >> "$t/fm.out" 2>&1 ||
    { cat "$t/fm.out"; fail "fmbench -dryrun"; }
  mfs="$t/m1.h5 $t/m3.h5"
fi
for mf in "" $mfs; do
  $PY "$B/peers.py" --self-test $mf > "$t/self" 2>&1 || { cat "$t/self"; fail "peers.py --self-test $mf"; }
  grep -c "^ok:" "$t/self" | grep -qv "^0$" || { cat "$t/self"; fail "peers.py --self-test checked nothing"; }
  echo "peers.py --self-test $mf: $(grep -c "^ok:" "$t/self") checks ok"
  grep "^skip:" "$t/self"
done
# the context-parallel peer and table
for f in bwd/ncu_sass.py bwd/sass_step.py bwd/step_fit.py ab_table.py gpuclock.py; do
  $PY "$B/$f" --self-test > "$t/st" 2>&1 || { cat "$t/st"; fail "$f --self-test"; }
  grep -q "^ok: " "$t/st" || { cat "$t/st"; fail "$f --self-test checked nothing"; }
done
# bwd/ab.sh with a stand-in nvcc: each "build" is a script whose bench times depend on its tree
# (the base's 12.5 ms, this tree's 10) and its -D flags (-DFAST: 8 ms; -DFAIL_BUILD fails)
mkdir -p "$t/bin" "$t/base/src/kernels/sm90" "$t/base/share/bench/bwd" "$t/base/share/bench/fwd"
: > "$t/base/share/bench/bwd/bwd_bench.cu"
: > "$t/base/share/bench/fwd/fwd_bench.cu"
: > "$t/base/share/bench/harness.h"
cat > "$t/bin/nvcc" <<'EOS'
#!/bin/sh
o="" flags="" all=" $* "
while [ $# -gt 0 ]; do case $1 in -o) o=$2; shift;; -D*) flags="$flags $1";; esac; shift; done
tree=$(basename "$(pwd)")
echo "build $tree$flags" >> "$AB_TEST_LOG"
case $all in *" share/bench/fwd/fwd_bench.cu "*" src/kernels/sm90/fwd_sm90.cu "*) echo "srcs fwd" >> "$AB_TEST_LOG";;
  *" share/bench/bwd/bwd_bench.cu "*" src/kernels/sm90/bwd_sm90.cu "*) echo "srcs bwd" >> "$AB_TEST_LOG";; *) echo "srcs ?" >> "$AB_TEST_LOG";; esac
case $flags in *FAIL_BUILD*) echo "error: made to fail"; exit 1;; esac
ms=10.0; case $flags in *-DFAST*) ms=8.0;; esac; [ "$tree" = base ] && ms=12.5
ck='echo "check: 0 of 3 cases failed"'; case $flags in *BADCHECK*) ck='echo "check: 1 of 3 cases failed"; exit 1';; esac
printf '#!/bin/sh\necho "run %s $*" >> "$AB_TEST_LOG"\ncase $1 in check) %s;;\n' "$tree$flags" "$ck" > "$o"
printf 'itemprof) echo "itemprof S=8192 full";;\ntileprof) echo "tileprof S=8192 sliding_window";;\n*) echo "bench S=8192   B=16  full   %s ms  1.0 TFLOP/s"; echo "bench S=32768  B=4   causal GQA4  %s ms";;\nesac\n' $ms $ms >> "$o"
chmod +x "$o"
EOS
chmod +x "$t/bin/nvcc"
ablog="$PWD/$t/ablog"
: > "$ablog"
PATH="$PWD/$t/bin:$PATH" AB_TEST_LOG="$ablog" OUT="$t/abo" AB_WORK="$t/abw" AB_VARIANTS="fast:-DFAST -DX;plain:-DY" AB_CHECK=1 \
  AB_ITEMPROF=1 sh "$B/bwd/ab.sh" "$t/base" 2 3 > "$t/ab" 2>&1 || { cat "$t/ab"; fail "bwd/ab.sh with a stand-in nvcc exited nonzero"; }
[ "$(grep -c "^build " "$ablog")" = 8 ] || { cat "$ablog"; fail "bwd/ab.sh: expected 8 builds (4 versions, each with -DFMBWD_PROF too)"; }
grep -q "^build base -DFMBWD_PROF$" "$ablog" && grep -q "^build .* -DFAST -DX -DFMBWD_PROF$" "$ablog" || { cat "$ablog"; fail "bwd/ab.sh: the builds' flags"; }
[ "$(grep -c "^srcs bwd$" "$ablog")" = 8 ] || { cat "$ablog"; fail "bwd/ab.sh: the backward harness's sources in every build"; }
[ "$(grep -c "^run .* check$" "$ablog")" = 3 ] && ! grep -q "^run base check" "$ablog" || { cat "$ablog"; fail "bwd/ab.sh: check on the three builds of this tree only"; }
[ "$(grep -c "^run .* ab 3$" "$ablog")" = 8 ] || { cat "$ablog"; fail "bwd/ab.sh: 2 rounds of 4 builds, ab 3"; }
[ "$(grep -c "^run .*-DFMBWD_PROF itemprof$" "$ablog")" = 4 ] || { cat "$ablog"; fail "bwd/ab.sh: itemprof of the 4 -DFMBWD_PROF builds"; }
T=$(basename "$PWD") # the stand-in names this tree's builds by the directory ab.sh ran in
[ "$(grep " ab 3$" "$ablog" | sed 's/^run //; s/ ab 3$//' | tr '\n' '|')" = "base|$T|$T -DFAST -DX|$T -DY|base|$T|$T -DFAST -DX|$T -DY|" ] ||
  { cat "$ablog"; fail "bwd/ab.sh: the builds in turn, round by round"; }
grep -Fq "| S=8192 B=16 full | 12.500 (12.500-12.500) | 10.000 (10.000-10.000) | 8.000 (8.000-8.000) | 10.000 (10.000-10.000) | 1.250 | 1.562 | 1.250 |" "$t/ab" ||
  { cat "$t/ab"; fail "bwd/ab.sh: the table's full row"; }
grep -q "^base / fast over 2 cases: geometric mean 1.562" "$t/ab" || { cat "$t/ab"; fail "bwd/ab.sh: the summary"; }
AB_VARIANTS="bad:-DFAIL_BUILD" PATH="$PWD/$t/bin:$PATH" AB_TEST_LOG="$ablog" OUT="$t/abo" AB_WORK="$t/abw" sh "$B/bwd/ab.sh" "$t/base" 1 1 > "$t/ab" 2>&1 &&
  fail "bwd/ab.sh: a failed build did not fail the A/B"
grep -q "a build failed" "$t/ab" || { cat "$t/ab"; fail "bwd/ab.sh: no message for a failed build"; }
AB_VARIANTS="nocolon" OUT="$t/abo" AB_WORK="$t/abw" sh "$B/bwd/ab.sh" "$t/base" > "$t/ab" 2>&1 && fail "bwd/ab.sh accepted a variant without flags"
grep -q "is not name:flags" "$t/ab" || { cat "$t/ab"; fail "bwd/ab.sh: no message for a malformed variant"; }
AB_VARIANTS="x:-DA;x:-DB" OUT="$t/abo" AB_WORK="$t/abw" sh "$B/bwd/ab.sh" "$t/base" > "$t/ab" 2>&1 && fail "bwd/ab.sh accepted a variant name twice"
grep -q "given twice" "$t/ab" || { cat "$t/ab"; fail "bwd/ab.sh: no message for a variant name given twice"; }
: > "$ablog"
AB_VARIANTS="bad:-DBADCHECK" AB_CHECK=1 PATH="$PWD/$t/bin:$PATH" AB_TEST_LOG="$ablog" OUT="$t/abo" AB_WORK="$t/abw" sh "$B/bwd/ab.sh" "$t/base" 1 1 > "$t/ab" 2>&1 &&
  fail "bwd/ab.sh: a failed check did not stop the A/B"
grep -q "check failed on bad" "$t/ab" && ! grep -q " ab 1$" "$ablog" || { cat "$t/ab" "$ablog"; fail "bwd/ab.sh: after a failed check, no message or rounds run"; }
: > "$ablog"
AB_VARIANTS="bad:-DBADCHECK;fast:-DFAST" AB_CHECK=1 AB_NOCHECK="bad" PATH="$PWD/$t/bin:$PATH" AB_TEST_LOG="$ablog" OUT="$t/abo" AB_WORK="$t/abw" \
  sh "$B/bwd/ab.sh" "$t/base" 1 1 > "$t/ab" 2>&1 || { cat "$t/ab"; fail "bwd/ab.sh: a variant named in AB_NOCHECK was still checked"; }
grep -q "^check bad: skipped (AB_NOCHECK)" "$t/ab" && [ "$(grep -c "^run .* check$" "$ablog")" = 2 ] && [ "$(grep -c " ab 1$" "$ablog")" = 4 ] ||
  { cat "$t/ab" "$ablog"; fail "bwd/ab.sh: AB_NOCHECK: the other two builds checked, all four timed"; }
# fwd/ab.sh: the forward's sources, AB_NEW_FLAGS on the new build, AB_PROF of one version only, check WORD
: > "$ablog"
AB_NEW_FLAGS="-DNEWF" AB_PROF=new AB_CHECK=d256 PATH="$PWD/$t/bin:$PATH" AB_TEST_LOG="$ablog" OUT="$t/abo" AB_WORK="$t/abw" \
  sh "$B/fwd/ab.sh" "$t/base" 2 1 > "$t/ab" 2>&1 || { cat "$t/ab"; fail "fwd/ab.sh with a stand-in nvcc exited nonzero"; }
[ "$(grep -c "^srcs fwd$" "$ablog")" = 3 ] && ! grep -q "^srcs [^f]" "$ablog" || { cat "$ablog"; fail "fwd/ab.sh: 3 builds of the forward harness"; }
grep -q "^build base$" "$ablog" && grep -q "^build .* -DNEWF$" "$ablog" && grep -q "^build .* -DNEWF -DFMFWD_PROF$" "$ablog" ||
  { cat "$ablog"; fail "fwd/ab.sh: the builds' flags (AB_NEW_FLAGS, -DFMFWD_PROF of new only)"; }
grep -q "^run .* check d256$" "$ablog" && [ "$(grep -c "^run .*-DFMFWD_PROF tileprof$" "$ablog")" = 1 ] && [ "$(grep -c " ab 1$" "$ablog")" = 4 ] ||
  { cat "$ablog"; fail "fwd/ab.sh: check d256, tileprof of new, 2 rounds of 2 builds"; }
grep -q "^tileprof S=8192" "$t/ab" && grep -q "^base / new over 2 cases" "$t/ab" || { cat "$t/ab"; fail "fwd/ab.sh: the profile line and the table"; }
AB_HARNESS=xyz OUT="$t/abo" AB_WORK="$t/abw" sh "$B/ab.sh" "$t/base" > "$t/ab" 2>&1 && fail "ab.sh accepted AB_HARNESS=xyz"
grep -q "AB_HARNESS=xyz" "$t/ab" || { cat "$t/ab"; fail "ab.sh: no message for an unknown harness"; }
echo "ab_table.py, bwd/ab.sh and fwd/ab.sh check out"
$PY "$B/peers_cp.py" --self-test > "$t/pcp" 2>&1 || { cat "$t/pcp"; fail "peers_cp.py --self-test"; }
grep -q "^ok: " "$t/pcp" || { cat "$t/pcp"; fail "peers_cp.py --self-test checked nothing"; }
$PY "$B/peers_cp.py" --help > "$t/pcp" 2>&1 || fail "peers_cp.py --help exited $? (it must work without torch)"
grep -q -- "--rotate" "$t/pcp" || fail "peers_cp.py --help does not list --rotate"
if ! $PY -c "import torch" 2>/dev/null; then
  $PY "$B/peers_cp.py" --seqlen 1024 > "$t/pcp" 2>&1
  rc=$?
  [ $rc = 77 ] || { cat "$t/pcp"; fail "peers_cp.py without torch exited $rc, expected 77"; }
fi
# peers_cp.py's runs against a stand-in torch (tests/data/faketorch.py): the rows, the order (the
# full KV head count first), enable_gqa, and the repeated K/V when enable_gqa is refused
$PY "$srcdir/tests/data/faketorch.py" "$t/ft" || fail "faketorch.py"
for nogqa in 0 1; do
  rm -f "$t/ft/calls.log"
  PYTHONPATH="$t/ft" WORLD_SIZE=4 FAKE_NO_GQA=$nogqa $PY "$B/peers_cp.py" --seqlen 1024,2048 --heads 8 --heads-kv 2,8 --head-dim 64 \
    --reps 3 --warmup 1 --rotate alltoall,allgather --csv "$t/tcp$nogqa.csv" > "$t/pcp" 2>&1 || { cat "$t/pcp"; fail "peers_cp.py on the stand-in (FAKE_NO_GQA=$nogqa)"; }
  [ "$(grep -c "^causal,[0-9]*,torch_cp_all[a-z]*,fwd\(bwd\)\?,4,1,8,[28],64,bf16," "$t/tcp$nogqa.csv")" = 16 ] || { cat "$t/tcp$nogqa.csv"; fail "peers_cp.py: expected 16 rows"; }
  [ "$(sed -n 2p "$t/tcp$nogqa.csv" | cut -d, -f1-8)" = "causal,1024,torch_cp_alltoall,fwd,4,1,8,8" ] || fail "peers_cp.py: the full KV head count does not come first"
  [ "$(grep -c "^rotate " "$t/ft/calls.log")" = 8 ] && [ "$(grep -c "^context_parallel P=4" "$t/ft/calls.log")" = 8 ] || fail "peers_cp.py: a context per case"
  grep -q "^backward" "$t/ft/calls.log" || fail "peers_cp.py: no backward in fwdbwd"
done
grep -q "sdpa q\[1, 8, 256, 64\] k\[1, 2, 256, 64\] gqa=1" "$t/ft/calls.log" && fail "FAKE_NO_GQA=1 still ran GQA inside a context"
[ "$(grep -c ",2,64,bf16,.*,kv_expanded$" "$t/tcp1.csv")" = 8 ] || { cat "$t/tcp1.csv"; fail "FAKE_NO_GQA=1: the H_kv = 2 rows are not marked kv_expanded"; }
grep -q ",kv_expanded$" "$t/tcp0.csv" && fail "enable_gqa accepted, yet rows marked kv_expanded"
H="mask,seqlen,config,pass,ranks,batch,heads,heads_kv,head_dim,dtype,ms,tflops,overlap_efficiency,exposed_max_ms,exposed_mean_ms,compute_imbalance,overlap_forward,bytes_moved,bytes_intra,bytes_inter,bytes_reduce,bytes_allgather,speedup_vs_allgather,speedup_vs_ring,speedup_vs_1gpu,route,label"
# cprow MASK S CONFIG PASS RANKS MS OVERLAP [INTRA INTER LABEL]
cprow() { echo "$1,$2,$3,$4,$5,1,32,8,128,bf16,$6,1.0,$7,,,,,,${8:-},${9:-},,,,,,flat,${10:-main}"; }
{ echo "$H"
  cprow document 65536 plan fwd 8 10.0 0.95; cprow document 65536 allgather fwd 8 16.0 ""; cprow document 65536 ring fwd 8 9.0 ""
  cprow document 65536 1gpu fwd 1 70.0 ""
  cprow causal 131072 plan fwd 8 20.0 0.99; cprow causal 131072 allgather fwd 8 21.0 ""; cprow causal 131072 ring fwd 8 20.5 ""
  cprow causal 131072 1gpu fwd 1 150.0 ""; } > "$t/cp8.csv"
{ echo "mask,seqlen,config,pass,ranks,batch,heads,heads_kv,head_dim,dtype,ms,tflops,note"
  echo "causal,131072,torch_cp_alltoall,fwd,8,1,32,8,128,bf16,30.0,1.0,"; echo "causal,131072,torch_cp_allgather,fwd,8,1,32,8,128,bf16,24.0,1.0,"; } > "$t/tcp.csv"
{ echo "$H"; cprow document 65536 plan fwd 8 11.0 "" 1000000 3000000 flat_v2; } > "$t/vn.csv"
{ echo "mask,seqlen,route,intra_bytes,inter_bytes"; echo "document,65536,flat,1100000,2900000"; } > "$t/sim.csv"
$PY "$B/cp_table.py" --ranks 8 --per-gpu 8192 --total 131072 --main "$t/cp8.csv" --torch "$t/tcp.csv" --vnodes "$t/vn.csv" --sim "$t/sim.csv" \
  > "$t/tab" 2>&1 || { cat "$t/tab"; fail "cp_table.py exited $?"; }
# document 64K = 8K per GPU at P = 8: 1.60x the all-gather (target 1.5: ok), 0.90x the ring (MISS), 70 / 10 / 8 = 0.875 (not the total: no mark)
grep -Fq "| document | 65536 | 8 | 10.000 | 16.000 | 9.000 | 70.000 | - | 0.950 ok | 0.88 | 1.60 ok | 0.90 MISS | - |" "$t/tab" || { cat "$t/tab"; fail "cp_table.py: the document row"; }
# causal 128K: 150 / 20 / 8 = 0.94 (ok), torch's best 24 ms: 1.20x (target 1.3: MISS); 1.05x the all-gather, no target on causal
grep -Fq "| causal | 131072 | 8 | 20.000 | 21.000 | 20.500 | 150.000 | 24.000 | 0.990 ok | 0.94 ok | 1.05 | 1.02 ok | 1.20 MISS |" "$t/tab" || { cat "$t/tab"; fail "cp_table.py: the causal row"; }
grep -q "never slower than the ring: MISSED in 1 (2 rows; worst 0.900, document 65536 kv8 fwd)" "$t/tab" || { cat "$t/tab"; fail "cp_table.py: the ring verdict"; }
grep -q "1.5x the unpruned all-gather: met (1 rows" "$t/tab" || { cat "$t/tab"; fail "cp_table.py: the all-gather verdict"; }
grep -Fq "| document | 65536 | 8 | flat_v2 | 11.000 | 1.0 | 3.0 | 1.1 | 2.9 |" "$t/tab" || { cat "$t/tab"; fail "cp_table.py: the virtual-node row"; }
# torch's best row ran with K/V repeated (kv_expanded): its ratio is starred and left out of the verdict
sed 's/24.0,1.0,$/24.0,1.0,kv_expanded/' "$t/tcp.csv" > "$t/tcpx.csv"
$PY "$B/cp_table.py" --ranks 8 --per-gpu 8192 --total 131072 --main "$t/cp8.csv" --torch "$t/tcpx.csv" > "$t/tabx" 2>&1 || { cat "$t/tabx"; fail "cp_table.py (kv_expanded) exited $?"; }
grep -Fq "| 24.000 | 0.990 ok | 0.94 ok | 1.05 | 1.02 ok | 1.20* |" "$t/tabx" || { cat "$t/tabx"; fail "cp_table.py: a kv_expanded torch ratio is not starred"; }
grep -q "1.3x PyTorch CP.*: not measured here" "$t/tabx" || { cat "$t/tabx"; fail "cp_table.py: a kv_expanded torch row counted in the verdict"; }
echo "peers_cp.py and cp_table.py check out"
# compare.sh end to end with stand-ins (fixed times; 2 masks + the per-sample case, 2 passes)
cat > "$t/fm.sh" <<'EOS'
#!/bin/sh
echo "fmbench $*" >> "$LOG"
o="" c="" mb=1 pass=fwd
while [ $# -gt 0 ]; do case $1 in -o) o=$2; shift;; -csv) c=$2; shift;; -mask_batch) mb=$2; shift;; -pass) pass=$2; shift;; esac; shift; done
: > "$o"
echo "mask,seqlen,batch,heads,head_dim,ms,tflops,block_sparsity,density,path,mask_batch,pass,setup_ms,setup_bounds_ms" > "$c"
for p in $(echo $pass | tr , ' '); do
  if [ $mb = 1 ]; then echo "full,8192,16,32,128,28.0,600.00,0.0,1.0,sm90,1,$p,0.125,0.0625" >> "$c"; echo "document,8192,16,32,128,16.0,500.00,0.54,0.42,sm90,1,$p,0.25,0.5" >> "$c"
  else echo "document,8192,$mb,32,128,15.0,520.00,0.55,0.41,sm90,$mb,$p,0.5,0.75" >> "$c"; fi
done
EOS
cat > "$t/py.sh" <<EOS
#!/bin/sh
case \$1 in
*peers.py) echo "peers \$*" >> "\$LOG"; f=\$2; g=\$3; c=""; while [ \$# -gt 0 ]; do case \$1 in -csv) c=\$2; shift;; esac; shift; done
  echo "mask,seqlen,batch,flex_ms,cudnn_ms,pass,mask_batch,flex_flash_ms,fa4_ms,cbm_ms" > "\$c"
  case \$f in *masks.h5) for p in fwd bwd; do echo "full,8192,16,40.0,28.0,\$p,1,nan,nan,3.0" >> "\$c"; echo "document,8192,16,20.0,nan,\$p,1,16.0,nan,4.0" >> "\$c"; done;; esac
  case \$g in *masks_mb.h5) for p in fwd bwd; do echo "document,8192,16,40.0,nan,\$p,16,30.0,nan,55.0" >> "\$c"; done;; esac;;
*) exec $PY "\$@";;
esac
EOS
# a stand-in nvidia-smi: a sample every 50 ms at 1500 MHz and 650 W, the power cap active
mkdir -p "$t/smi"
cat > "$t/smi/nvidia-smi" <<'EOS'
#!/bin/sh
while :; do echo "2026/12/06 19:13:00.200, 100, 1500, 1980, 650.00, 700.00, 0x0000000000000004"; sleep 0.05; done
EOS
chmod +x "$t/fm.sh" "$t/py.sh" "$t/smi/nvidia-smi"
PATH="$PWD/$t/smi:$PATH" LOG="$PWD/$t/log" FMBENCH="$PWD/$t/fm.sh" PYTHON3="$PWD/$t/py.sh" WORK="$t/w" \
  sh "$B/compare.sh" -masks full,document -seqlen 8192,32768 -heads 32 -reps 5 -seed 3 > "$t/cmp" 2>&1 ||
  { cat "$t/cmp"; fail "compare.sh with stand-ins exited nonzero"; }
grep -q "^fmbench -masks full,document -seqlen 8192,32768 -heads 32 -reps 5 -warmup_s 2 -seed 3 -pass fwd,bwd " "$t/log" || { cat "$t/log"; fail "compare.sh's fmbench run"; }
grep -q "^fmbench -masks document -seqlen 8192 -mask_batch 16 -heads 32 -reps 5 -warmup_s 2 -seed 3 -pass fwd,bwd " "$t/log" || { cat "$t/log"; fail "compare.sh's per-sample run"; }
[ "$(grep -c "^peers .*masks.h5 .*masks_mb.h5 -heads 32 -reps 5 -warmup_s 2 --pass fwd,bwd" "$t/log")" = 1 ] || { cat "$t/log"; fail "compare.sh's peers run (both files, the shape, no -seed)"; }
grep -q -- "-seed" "$t/log" && grep "^peers" "$t/log" | grep -q -- "-seed" && fail "compare.sh gives -seed to peers.py"
cat "$t/cmp"
# each of the three runs under gpuclock.py, with the stand-in's clock and power
for l in ours ours_mb peers; do
  grep -Eq "^gpuclock $l: [0-9]+ busy samples of [0-9]+ over [0-9.]+ s: SM clock median 1500 MHz \(10%-90%: 1500-1500, max 1980\), power mean 650 W of the 700 W limit, power cap active in 100% of the busy samples$" "$t/cmp" ||
    fail "compare.sh: no gpuclock line for the $l run"
  [ -s "$t/w/clock_$l.csv" ] || fail "compare.sh kept no samples of the $l run"
done
# full fwd: Flex 600 * 28 / 40 = 420.0, cuDNN 600.0, FLASH and FA4 n/a; document: FLASH 500 * 16 / 16 = 500.0, ratio 1.00
grep -Eq "^full +8192 +16 +600.0 +420.0 +n/a +600.0 +n/a +1.43 +n/a +1.00 +n/a +0.12 +0.06 +3.00" "$t/cmp" || fail "the full row (with our set-up ms, builder's and user bounds', beside create_block_mask's)"
grep -Eq "^document +8192 +16 +500.0 +400.0 +500.0 +n/a +n/a +1.25 +1.00 +n/a +n/a +0.25 +0.50 +4.00" "$t/cmp" || fail "the document row"
grep -Eq "^document \(per-sample\) +8192 +16 +520.0 +195.0 +260.0 " "$t/cmp" || fail "the per-sample row"
grep -q "FA4: n/a in every row" "$t/cmp" || fail "no note that FA4 is missing"
[ "$(grep -c "" "$t/w/compare.csv")" = 7 ] || fail "compare.csv: expected a header and 6 rows"
grep -q "^document,8192,16,16,bwd,0.55,15.0000,520.0000,40.0000,195.0000,2.6667,30.0000,260.0000,2.0000,n/a,.*,0.5000,0.7500,55.0000$" "$t/w/compare.csv" ||
  { cat "$t/w/compare.csv"; fail "compare.csv's per-sample bwd row"; }
# an explicit -warmup_s replaces the default 2 s, for fmbench and the peers alike
: > "$t/log"
LOG="$PWD/$t/log" FMBENCH="$PWD/$t/fm.sh" PYTHON3="$PWD/$t/py.sh" WORK="$t/w" MASK_BATCH=0 \
  sh "$B/compare.sh" -masks full -seqlen 8192 -warmup_s 0 > "$t/cmp" 2>&1 || { cat "$t/cmp"; fail "compare.sh -warmup_s 0 exited nonzero"; }
[ "$(grep -c -- "-warmup_s 0 " "$t/log")" = 2 ] && ! grep -q -- "-warmup_s 2" "$t/log" ||
  { cat "$t/log"; fail "compare.sh -warmup_s 0: not given to both fmbench and peers.py in place of the default"; }
rm -rf "$t"
echo "PASS: peers.py, compare_table.py, compare.sh, gpu_check.sh and the context-parallel scripts check out without a GPU"
