#!/bin/sh
# test_harness_build.sh - the kernels' standalone development harnesses (share/bench/bwd/bwd_bench.cu,
# share/bench/fwd/fwd_bench.cu) still compile against today's kernel headers and sources with the
# configured nvcc (they copy no library code, but they fill the kernels' parameter blocks
# themselves), and each one's probe mode exits 0 with a GPU, 2 without one; the backward's item
# order passes its host check (bwd_bench order), and the wide forward kernel's tiles theirs
# (fwd_bench tiles); the forward kernel also compiles with its A/B
# build variants and its diagnostic build (tileprof), the backward its A/B flags; ptxas reports no spill and no warning for any Hopper kernel. Skips without CUDA.
. "${srcdir:-.}/tests/common.sh"
fm_skip_unless_cuda
[ -n "$FM_NVCC" ] || { echo "SKIP: no nvcc recorded by configure"; exit 77; }
src=${srcdir:-.}
t=$(mktemp -d); trap 'rm -rf "$t"' EXIT
fail=0
build() { # name, sources...
  n=$1; shift
  if ! $FM_NVCC $FM_NVCCFLAGS -I"$src/include" -Xcompiler -fopenmp "$@" -o "$t/$n" > "$t/$n.log" 2>&1; then
    cat "$t/$n.log"; echo "FAIL: $n does not compile"; fail=1; return
  fi
  "$t/$n" probe; rc=$?
  if [ $rc -ne 0 ] && [ $rc -ne 2 ]; then echo "FAIL: $n probe exited $rc (expected 0 with a GPU, 2 without)"; fail=1; return; fi
  echo "ok   $n compiles; probe exits $rc"
}
build bwd_bench "$src/share/bench/bwd/bwd_bench.cu" "$src/src/kernels/cuda_bwd.cu" "$src/src/kernels/sm90/bwd_sm90.cu"
# the backward's work-item order (host only): every item once, and the deterministic mode's rule
# that a row's key blocks are taken in decreasing order (else its turns could deadlock); and each
# query block's visiting key blocks (the deterministic mode's turns) against the walks
if [ -x "$t/bwd_bench" ]; then
  if "$t/bwd_bench" order > "$t/order.log" 2>&1; then tail -2 "$t/order.log" | sed "s/^/ok   /"
  else cat "$t/order.log"; echo "FAIL: bwd_bench order"; fail=1; fi
fi
build fwd_bench "$src/share/bench/fwd/fwd_bench.cu" "$src/src/kernels/cuda_mask.cu" "$src/src/kernels/sm90/fwd_sm90.cu" "$src/src/kernels/simt/fwd_fallback.cu"
# host only: the wide forward kernel's counted tiles and its one element test against the mask
# (full and causal, 80- and 176-key tiles, S_q x S_k both ways)
if [ -x "$t/fwd_bench" ]; then
  if "$t/fwd_bench" tiles > "$t/tiles.log" 2>&1; then tail -1 "$t/tiles.log" | sed "s/^/ok   /"
  else cat "$t/tiles.log"; echo "FAIL: fwd_bench tiles"; fail=1; fi
fi
# the forward's A/B build variants (HACKING.md) compile too: the kernel alone, to a cubin
if $FM_NVCC $FM_NVCCFLAGS -I"$src/include" -DFM_SM90_RESCALE_SKIP -DFM_SM90_LANE_RELEASE -DFM_SM90_HANG_CHECK -DFM_SM90_FWD_DESC_AT=1 -cubin \
    "$src/src/kernels/sm90/fwd_sm90.cu" -o "$t/variants.cubin" > "$t/variants.log" 2>&1; then
  echo "ok   fwd_sm90.cu compiles with -DFM_SM90_RESCALE_SKIP -DFM_SM90_LANE_RELEASE -DFM_SM90_HANG_CHECK -DFM_SM90_FWD_DESC_AT=1"
else
  cat "$t/variants.log"; echo "FAIL: the forward's build variants do not compile"; fail=1
fi
if $FM_NVCC $FM_NVCCFLAGS -I"$src/include" -DFM_SM90_NC64=2 -DFM_SM90_WIDE256=0 -DFM_SM90_WIDE128=0 -DFM_SM90_ONES_SUM=0 -cubin \
    "$src/src/kernels/sm90/fwd_sm90.cu" -o "$t/variants2.cubin" > "$t/variants2.log" 2>&1; then
  echo "ok   fwd_sm90.cu compiles with -DFM_SM90_NC64=2 -DFM_SM90_WIDE256=0 -DFM_SM90_WIDE128=0 -DFM_SM90_ONES_SUM=0 (128-row tiles at d = 64, no wide kernel, row sums by FADD)"
else
  cat "$t/variants2.log"; echo "FAIL: the forward's -DFM_SM90_NC64=2 -DFM_SM90_WIDE256=0 -DFM_SM90_WIDE128=0 -DFM_SM90_ONES_SUM=0 variant does not compile"; fail=1
fi
# ptxas's report on the Hopper kernels as the library builds them: no instantiation spills (a
# local-memory round trip in the main loop costs more than the registers it frees) and ptxas
# warns about nothing (e.g. C7510: wgmma serialized, its registers touched while in flight; C7519: an arrive injected)
ptxas_clean() { # name (sm90/NAME.cu), label, extra nvcc flags...
  k=$1 label=$2; shift 2
  if $FM_NVCC $FM_NVCCFLAGS -I"$src/include" "$@" -Xptxas -v -cubin "$src/src/kernels/sm90/$k.cu" -o "$t/$label.cubin" > "$t/$label.ptxas" 2>&1; then
    nfun=$(grep -c "bytes spill stores" "$t/$label.ptxas")
    spill=$(grep "bytes spill" "$t/$label.ptxas" | grep -v " 0 bytes spill stores, 0 bytes spill loads")
    warn=$(grep -iE "warning|\(C75[0-9][0-9]\)" "$t/$label.ptxas") # C7519 and kin come as "info" lines
    if [ "$nfun" -eq 0 ] || [ -n "$spill" ] || [ -n "$warn" ]; then
      cat "$t/$label.ptxas"; echo "FAIL: $k.cu${*:+ with $*}: $nfun functions reported, spills or warnings above"; fail=1
    else echo "ok   $k.cu${*:+ with $*}: $nfun functions, no spills, no ptxas warnings"; fi
  else
    cat "$t/$label.ptxas"; echo "FAIL: $k.cu${*:+ with $*} does not compile with -Xptxas -v"; fail=1
  fi
}
ptxas_clean fwd_sm90 fwd_sm90
ptxas_clean bwd_sm90 bwd_sm90
# the A/B reference of the LSE and D fold at d = 128's 64-row step (-DFMBWD_XF=2: that step loads
# them, HACKING.md), under the same rule
ptxas_clean bwd_sm90 bxf2 -DFMBWD_XF=2
# the backward's diagnostic build (bwd_bench detprof: the waits counted) compiles too, with the
# 80-row step's LSE and D loaded from shared memory (-DFMBWD_XF=0, the A/B reference of kXF)
if $FM_NVCC $FM_NVCCFLAGS -I"$src/include" -DFM_SM90_HANG_CHECK -DFMBWD_PROF -DFMBWD_DET_NOWAIT -DFMBWD_XF=0 -cubin \
    "$src/src/kernels/sm90/bwd_sm90.cu" -o "$t/bvariants.cubin" > "$t/bvariants.log" 2>&1; then
  echo "ok   bwd_sm90.cu compiles with -DFM_SM90_HANG_CHECK -DFMBWD_PROF -DFMBWD_DET_NOWAIT -DFMBWD_XF=0"
else
  cat "$t/bvariants.log"; echo "FAIL: the backward's build variants do not compile"; fail=1
fi
# the forward's diagnostic build (fwd_bench tileprof: a tile's phases counted) compiles too: the
# kernel with the counters and without the element tests, and the harness's profile mode
if $FM_NVCC $FM_NVCCFLAGS -I"$src/include" -DFMFWD_PROF -DFMFWD_EXP_NOMASK -cubin \
    "$src/src/kernels/sm90/fwd_sm90.cu" -o "$t/fprof.cubin" > "$t/fprof.log" 2>&1 &&
  $FM_NVCC $FM_NVCCFLAGS -I"$src/include" -Xcompiler -fopenmp -DFMFWD_PROF -c "$src/share/bench/fwd/fwd_bench.cu" \
    -o "$t/fwd_bench_prof.o" >> "$t/fprof.log" 2>&1; then
  echo "ok   fwd_sm90.cu compiles with -DFMFWD_PROF -DFMFWD_EXP_NOMASK, fwd_bench.cu with -DFMFWD_PROF"
else
  cat "$t/fprof.log"; echo "FAIL: the forward's diagnostic build does not compile"; fail=1
fi
exit $fail
