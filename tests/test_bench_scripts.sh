#!/bin/sh
# The benchmark scripts without a GPU or torch: share/bench/peers.py and compare_table.py compile;
# peers.py --self-test passes (argument parsing; the HDF5 reading where numpy and h5py are
# installed, then also on a mask file fmbench -dryrun writes, shared and per-sample);
# compare.sh and gpu_check.sh parse (sh -n); and compare.sh runs end to end with stand-ins for
# fmbench and for peers.py's timings: the runs it makes (the same shape options for both, the
# per-sample document case), and its table and compare.csv (peer TFLOP/s from our FLOPs, the
# ratios, n/a where a peer has no time). Skips (77) without python3.
. "$srcdir/tests/common.sh"
PY=${PYTHON3:-python3}
$PY -c "import sys; sys.exit(sys.version_info < (3, 6))" 2>/dev/null || { echo "SKIP: no python3 (>= 3.6)"; exit 77; }
B="$srcdir/share/bench"
t=test_bench_scripts.dir
rm -rf "$t"; mkdir -p "$t"
fail() { echo "FAIL: $*"; exit 1; }
for f in peers.py compare_table.py; do
  $PY -c "import py_compile, sys; py_compile.compile(sys.argv[1], cfile=sys.argv[2], doraise=True)" "$B/$f" "$t/$f.pyc" ||
    fail "$f does not compile"
done
for f in compare.sh gpu_check.sh; do sh -n "$B/$f" || fail "$f: sh -n"; done
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
# compare.sh end to end with stand-ins (fixed times; 2 masks + the per-sample case, 2 passes)
cat > "$t/fm.sh" <<'EOS'
#!/bin/sh
echo "fmbench $*" >> "$LOG"
o="" c="" mb=1 pass=fwd
while [ $# -gt 0 ]; do case $1 in -o) o=$2; shift;; -csv) c=$2; shift;; -mask_batch) mb=$2; shift;; -pass) pass=$2; shift;; esac; shift; done
: > "$o"
echo "mask,seqlen,batch,heads,head_dim,ms,tflops,block_sparsity,density,path,mask_batch,pass,setup_ms" > "$c"
for p in $(echo $pass | tr , ' '); do
  if [ $mb = 1 ]; then echo "full,8192,16,32,128,28.0,600.00,0.0,1.0,sm90,1,$p,0.125" >> "$c"; echo "document,8192,16,32,128,16.0,500.00,0.54,0.42,sm90,1,$p,0.25" >> "$c"
  else echo "document,8192,$mb,32,128,15.0,520.00,0.55,0.41,sm90,$mb,$p,0.5" >> "$c"; fi
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
chmod +x "$t/fm.sh" "$t/py.sh"
LOG="$PWD/$t/log" FMBENCH="$PWD/$t/fm.sh" PYTHON3="$PWD/$t/py.sh" WORK="$t/w" \
  sh "$B/compare.sh" -masks full,document -seqlen 8192,32768 -heads 32 -reps 5 -seed 3 > "$t/cmp" 2>&1 ||
  { cat "$t/cmp"; fail "compare.sh with stand-ins exited nonzero"; }
grep -q "^fmbench -masks full,document -seqlen 8192,32768 -heads 32 -reps 5 -seed 3 -pass fwd,bwd " "$t/log" || { cat "$t/log"; fail "compare.sh's fmbench run"; }
grep -q "^fmbench -masks document -seqlen 8192 -mask_batch 16 -heads 32 -reps 5 -seed 3 -pass fwd,bwd " "$t/log" || { cat "$t/log"; fail "compare.sh's per-sample run"; }
[ "$(grep -c "^peers .*masks.h5 .*masks_mb.h5 -heads 32 -reps 5 --pass fwd,bwd" "$t/log")" = 1 ] || { cat "$t/log"; fail "compare.sh's peers run (both files, the shape, no -seed)"; }
grep -q -- "-seed" "$t/log" && grep "^peers" "$t/log" | grep -q -- "-seed" && fail "compare.sh gives -seed to peers.py"
cat "$t/cmp"
# full fwd: Flex 600 * 28 / 40 = 420.0, cuDNN 600.0, FLASH and FA4 n/a; document: FLASH 500 * 16 / 16 = 500.0, ratio 1.00
grep -Eq "^full +8192 +16 +600.0 +420.0 +n/a +600.0 +n/a +1.43 +n/a +1.00 +n/a +0.12 +3.00" "$t/cmp" || fail "the full row (with our set-up ms beside create_block_mask's)"
grep -Eq "^document +8192 +16 +500.0 +400.0 +500.0 +n/a +n/a +1.25 +1.00 +n/a +n/a +0.25 +4.00" "$t/cmp" || fail "the document row"
grep -Eq "^document \(per-sample\) +8192 +16 +520.0 +195.0 +260.0 " "$t/cmp" || fail "the per-sample row"
grep -q "FA4: n/a in every row" "$t/cmp" || fail "no note that FA4 is missing"
[ "$(grep -c "" "$t/w/compare.csv")" = 7 ] || fail "compare.csv: expected a header and 6 rows"
grep -q "^document,8192,16,16,bwd,0.55,15.0000,520.0000,40.0000,195.0000,2.6667,30.0000,260.0000,2.0000,n/a,.*,0.5000,55.0000$" "$t/w/compare.csv" ||
  { cat "$t/w/compare.csv"; fail "compare.csv's per-sample bwd row"; }
rm -rf "$t"
echo "PASS: peers.py, compare_table.py, compare.sh and gpu_check.sh check out without a GPU"
