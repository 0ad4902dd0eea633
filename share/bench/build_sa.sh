#!/bin/sh
# build_sa.sh - standalone build of the CUDA backend, test_gpu_fwd and fmbench (no autotools,
# no MPI run-time), for quick runs on the GPU machine. Run from the top source dir:
#   sh share/bench/build_sa.sh OUTDIR [extra nvcc flags]
# Needs nvcc and mpicc (headers only) on the build machine; the binaries need neither.
set -e
out=${1:-.sa}; shift || true
mkdir -p "$out"
NVCC=${NVCC:-nvcc}
CC=${CC:-mpicc}
inc="-Iinclude -I$out"
[ -f include/flashmask/fmconf.h ] || { mkdir -p "$out/flashmask"; printf '#define FM_VERSION_STRING "sa"\n#define FM_HAVE_CUDA 1\n#define FM_HAVE_NCCL 0\n#define FM_HAVE_HWLOC 0\n#define FM_HAVE_HDF5 0\n#define FM_HAVE_HDF5_PARALLEL 0\n#define FM_HAVE_FORTRAN 0\n' > "$out/flashmask/fmconf.h"; }
nvflags="-ccbin $CC -std=c++17 -O3 -gencode=arch=compute_90a,code=sm_90a --use_fast_math -lineinfo -Xptxas -v,--warn-on-spills,--warn-on-local-memory-usage $*"
$NVCC $nvflags $inc -c src/kernels/sm90/fwd_sm90.cu -o "$out/fwd_sm90.o" 2> "$out/ptxas_sm90.txt" || { cat "$out/ptxas_sm90.txt"; exit 1; }
$NVCC $nvflags $inc -c src/kernels/cuda.cu -o "$out/cuda.o" 2> "$out/ptxas_cuda.txt" || { cat "$out/ptxas_cuda.txt"; exit 1; }
cflags="-std=gnu11 -O2 -Wall $inc -I/usr/local/cuda/include -DFMBENCH_STANDALONE"
for f in src/kernels/cudamem.c src/kernels/cpu/convert.c share/bench/sa_stubs.c share/bench/sa_mpisyms.c tests/test_gpu_fwd.c src/bin/fmbench.c; do
  $CC $cflags -Itests -c $f -o "$out/$(basename $f .c).o"
done
common="$out/cuda.o $out/fwd_sm90.o $out/cudamem.o $out/convert.o $out/sa_stubs.o $out/sa_mpisyms.o"
$NVCC -o "$out/test_gpu_fwd" "$out/test_gpu_fwd.o" $common -lm
$NVCC -o "$out/fmbench" "$out/fmbench.o" $common -lm
grep -E "C75|spill|Used" "$out/ptxas_sm90.txt" || true
