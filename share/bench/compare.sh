#!/bin/sh
# compare.sh - time our forward and backward (fmbench) and the peers (share/bench/peers.py:
# FlexAttention's Triton kernel, FlexAttention BACKEND=FLASH, cuDNN SDPA, FlashAttention-4 dense)
# on the same masks and shapes, in one run, and print one table per pass:
#   mask | S | B | pass | ours | Flex | Flex-FLASH | cuDNN | FA4 (TFLOP/s) | ours/each | our new-mask set-up ms | create_block_mask ms
# TFLOP/s: fmbench's FLOP count for everyone (FlashMask convention: forward 4 B H S^2 d (1 - rho),
# rho = fraction of 128 x 128 tiles fully masked; backward 2.5x; fwdbwd 3.5x), over each one's
# median time. A peer that does not run a mask (cuDNN and FA4: full and causal only), is not
# installed (FA4) or failed (the reason is in the log) reads n/a.
# Besides the masks asked for, a per-sample document case (fmbench -mask_batch: every sample its
# own packing; the peers' BlockMask gets a batch dimension) at the first sequence length.
# usage: compare.sh [fmbench options: -masks -seqlen -head_dim -heads -tokens -reps -warmup -warmup_s -dtype -seed
#                    -pass fwd,bwd,fwdbwd (default here: fwd,bwd)]
# -warmup_s T (default here 2): before each timing, everyone runs T seconds back to back, so that
# every implementation is timed at the GPU's steady state under its power cap, as in training. A
# few runs after an idle moment can go at boost clocks (a peer that compiles at its first call is
# timed right after seconds of idle GPU): with -warmup_s 0, FA4's dense forward at 8K read 761
# TFLOP/s, after 2-5 s of load 661-666 (H200, 2026-12-01, doc/performance.md).
# Environment: FMBENCH (default: fmbench on PATH; with MPIEXEC set it runs "$MPIEXEC -n 1 $FMBENCH"),
#   PYTHON3 (default python3), WORK (directory for the mask files and CSVs, default ./fmbench-out),
#   MASK_BATCH (the per-sample case's batch; default tokens / the first seqlen; 0: no such case),
#   PEERS (peers.py --peers, default all), CBM (peers.py --cbm, default 1).
# Output: a gpuclock line per run (share/bench/gpuclock.py: the SM clock and board power it ran
# at), the table on stdout, $WORK/compare.csv (one row per mask, length, batch and pass, every
# TFLOP/s and ratio), and the raw $WORK/ours*.csv, $WORK/peers*.csv, $WORK/clock_*.csv.
set -e
here=$(cd "$(dirname "$0")" && pwd)
FMBENCH=${FMBENCH:-fmbench}
PYTHON3=${PYTHON3:-python3}
WORK=${WORK:-fmbench-out}
mkdir -p "$WORK"
# each run under gpuclock.py: its line gives the SM clock and board power it ran at (samples kept
# in $WORK/clock_LABEL.csv)
clocked() {
  label=$1
  shift
  $PYTHON3 "$here/gpuclock.py" run --label "$label" -o "$WORK/clock_$label.csv" -- "$@"
}
run_fmbench() {
  label=$1
  shift
  if [ -n "$MPIEXEC" ]; then clocked "$label" $MPIEXEC -n 1 $FMBENCH "$@"; else clocked "$label" $FMBENCH "$@"; fi
}
# the options: the passes, the shape (both fmbench runs and the peers), fmbench-only ones, the rest
pass="" shape="" fmonly="" rest="" seq1="" tokens=131072 warm_s=2
while [ $# -gt 0 ]; do
  case $1 in
    -pass) pass="$pass,$2"; shift 2;;
    -bwd) pass="$pass,bwd"; shift;;
    -fwdbwd) pass="$pass,fwdbwd"; shift;;
    -head_dim|-heads|-reps|-warmup|-dtype) shape="$shape $1 $2"; shift 2;;
    -warmup_s) warm_s=$2; shift 2;;
    -seed) fmonly="$fmonly $1 $2"; shift 2;;
    -tokens) shape="$shape $1 $2"; tokens=$2; shift 2;;
    -heads_kv) echo "compare.sh: -heads_kv is not given to the peers (they run heads_kv = heads)" >&2; rest="$rest $1 $2"; shift 2;;
    -seqlen) seq1=${2%%,*}; rest="$rest $1 $2"; shift 2;;
    -mask_batch) echo "compare.sh: -mask_batch: use MASK_BATCH= (the per-sample case is run apart)" >&2; exit 2;;
    *) rest="$rest $1"; shift;;
  esac
done
pass=${pass#,}
pass=${pass:-fwd,bwd}
shape="$shape -warmup_s $warm_s"
seq1=${seq1:-8192}
mb=${MASK_BATCH:-$((tokens / seq1))}
[ "$mb" -ge 1 ] 2>/dev/null || mb=0
rm -f "$WORK"/ours*.csv "$WORK"/peers*.csv "$WORK"/clock_*.csv "$WORK/compare.csv"
# 1. ours, on the masks asked for, then the per-sample document case
run_fmbench ours $rest $shape $fmonly -pass "$pass" -o "$WORK/masks.h5" -csv "$WORK/ours.csv"
[ -e "$WORK/masks.h5" ] || { echo "compare.sh: fmbench wrote no mask file $WORK/masks.h5" >&2; exit 1; }
if [ "$mb" -gt 1 ]; then
  run_fmbench ours_mb -masks document -seqlen "$seq1" -mask_batch "$mb" $shape $fmonly -pass "$pass" -o "$WORK/masks_mb.h5" -csv "$WORK/ours_mb.csv"
fi
# 2. the peers on the same files and shapes, in one process (the compiled kernels are reused)
files="$WORK/masks.h5"
[ "$mb" -gt 1 ] && files="$files $WORK/masks_mb.h5"
PYTHONUNBUFFERED=1 clocked peers $PYTHON3 "$here/peers.py" $files $shape --pass "$pass" --peers "${PEERS:-flex,flex_flash,cudnn,fa4}" \
  --cbm "${CBM:-1}" -csv "$WORK/peers.csv"
# 3. one table and compare.csv
$PYTHON3 "$here/compare_table.py" "$WORK"
