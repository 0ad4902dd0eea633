#!/bin/sh
# gpu_check.sh - one call on a GPU machine for the whole library, as it is built by users:
# autotools build, `make check` (the GPU tests run there instead of skipping), the quick-start
# tutorial on the GPU, and compare.sh with the installed-style fmbench (the library's own mask
# builders -> HDF5 -> share/bench/peers.py: FlexAttention (Triton and BACKEND=FLASH), cuDNN SDPA
# and FlashAttention-4 on the same masks, forward and backward, and a per-sample document case).
# Run from the source root. Optional staged packages: .devdeps (the staging script for the
# device machine's build dependencies), Python wheels in .whl (h5py), and FlashAttention-4 where
# its install has written /tmp/fa4env (sourced here; without it the FA4 column reads n/a).
# Logs go to $OUT (default /tmp/fmout). The table is last.
# usage: sh share/bench/gpu_check.sh [compare.sh/fmbench options]
#   NO_COMPARE=1: build, check and ex1 only; BENCH_ONLY=1: compare.sh only, on the fmbench
#   already built in this tree (no build, no make check, no ex1); WARMUP_S: compare.sh's -warmup_s
#   (default here 0.5 s, to fit one call)
OUT=${OUT:-/tmp/fmout}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 PYTHONUNBUFFERED=1
[ -d .devdeps ] && sh .devdeps/install.sh
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl &&
    export PYTHONPATH=/tmp/site
fi
[ -f /tmp/fa4env ] && . /tmp/fa4env
nvidia-smi -L
[ -n "$BENCH_ONLY" ] && [ ! -x ./fmbench ] && { echo "gpu_check: BENCH_ONLY=1 but ./fmbench is not built"; exit 1; }
if [ -z "$BENCH_ONLY" ]; then
t0=$(date +%s)
if ! (./autogen.sh && ./configure CC=mpicc && make -j"$(nproc)") > "$OUT/build.log" 2>&1; then
  tail -40 "$OUT/build.log"; echo "gpu_check: build failed"; exit 1
fi
echo "build: $(($(date +%s) - t0)) s"
grep -E "^  (CUDA|NCCL|HDF5|hwloc|Fortran) " "$OUT/build.log"
t0=$(date +%s)
make -j8 check > "$OUT/check.log" 2>&1
echo "make check rc=$? ($(($(date +%s) - t0)) s)"
grep -E "^(PASS|FAIL|SKIP|ERROR|XPASS):" "$OUT/check.log" | sort | uniq -c | sort -rn | head -3
grep -E "^(FAIL|ERROR|XPASS|SKIP):" "$OUT/check.log"
for t in test_gpu_fwd test_gpu_cp test_context test_tutorials test_plan; do cp "tests/$t.log" "$OUT/" 2>/dev/null; done
grep -E "NCCL|forward path" tests/test_context.log | head -4
echo "== ex1 on the GPU"
mpiexec -n 1 ./tutorials/ex1 -fm_plan_view -fm_context_view -fm_log_view > "$OUT/ex1.log" 2>&1
echo "ex1 rc=$?"
grep -E "max \||forward |backward |ex1:|path" "$OUT/ex1.log"
[ -n "$NO_COMPARE" ] && exit 0
fi
echo "== compare (ours vs FlexAttention, FlexAttention BACKEND=FLASH, cuDNN SDPA, FlashAttention-4)"
t0=$(date +%s)
rm -rf /tmp/fmwork
# 0.5 s of steady state before each timing (compare.sh's own default, 2 s, makes the 12 masks at
# two lengths with four peers overrun one call); an explicit -warmup_s in "$@" comes later and wins.
# Unbound, as the peers' Python processes are: mpiexec -n 1 alone binds fmbench to one core, where
# a new mask's set-up (the host part of a training step) runs on one thread.
FMBENCH=./fmbench WORK=/tmp/fmwork MPIEXEC="mpiexec --bind-to none" timeout "${BENCH_TIMEOUT:-420}" sh share/bench/compare.sh -warmup_s "${WARMUP_S:-0.5}" "$@" \
  > "$OUT/compare.log" 2>&1
rc=$?
echo "compare rc=$rc ($(($(date +%s) - t0)) s)"
[ $rc = 0 ] || tail -30 "$OUT/compare.log"
cp /tmp/fmwork/*.csv "$OUT/" 2>/dev/null
grep -E "failed on|MISSING|FlashAttention-4 from" "$OUT/compare.log" | cut -c1-200 | head -20
grep "^gpuclock" "$OUT/compare.log" # the clock and power each run went at
sed -n '/^== /,$p' "$OUT/compare.log" | grep -v "^ *$" | cut -c1-160
