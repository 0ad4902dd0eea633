#!/bin/sh
# device_run.sh - one GPU-machine call: SASS check, test_gpu_fwd, compute-sanitizer on small
# cases, then compare.sh (ours + FlexAttention + cuDNN). Binaries from share/bench/build_sa.sh
# in $SA (default .sa). Logs go to $OUT when set. Usage: sh share/bench/device_run.sh [bench args]
SA=${SA:-.sa}
OUT=${OUT:-/tmp/fmout}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,power.draw,temperature.gpu --format=csv,noheader
echo "== SASS (fwd_sm90.o)"
cuobjdump -sass "$SA/fwd_sm90.o" > /tmp/sass.txt 2>&1
for w in HGMMA UTMALDG UBLKCP LDL STL SYNCS; do printf "%s=%s " $w "$(grep -c "$w" /tmp/sass.txt)"; done; echo
echo "== test_gpu_fwd"
timeout ${TEST_TIMEOUT:-120} "$SA/test_gpu_fwd" > "$OUT/test.log" 2>&1; trc=$?
grep -E "FAIL|failed|device" "$OUT/test.log" | cut -c1-200
echo "test rc=$trc"
if [ $trc -ne 0 ] && [ -z "$NO_SWAP_RETRY" ]; then
  echo "== retry with FM_SM90_VDESC_SWAP=1 (quick)"
  FM_SM90_VDESC_SWAP=1 timeout 90 "$SA/test_gpu_fwd" -quick 2>&1 | cut -c1-200 | tail -25
fi
if [ -n "$SANITIZE" ]; then
  echo "== compute-sanitizer"
  for tool in memcheck racecheck; do
    for c in $SANITIZE; do
      timeout 60 compute-sanitizer --tool $tool --print-limit 5 "$SA/test_gpu_fwd" -case $c > "/tmp/san_${tool}_$c.log" 2>&1
      echo "$tool case $c rc=$? $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY|Hazard|Invalid' "/tmp/san_${tool}_$c.log" | head -3 | tr '\n' ' ')"
    done
  done
fi
# AB="DIR ...": fmbench of other builds first (same shapes), results in $OUT/ours_DIR.csv
for d in $AB; do
  echo "== fmbench $d"
  timeout 150 "$d/fmbench" "$@" -o /tmp/ab_masks -csv "$OUT/ours_$(basename $d | tr -d .).csv" > /tmp/ab.log 2>&1; echo "rc=$?"
done
if [ -z "$NO_BENCH" ]; then
  echo "== compare"
  export FMBENCH="$SA/fmbench" WORK=/tmp/fmwork MASKS=/tmp/fmwork/masks
  rm -rf /tmp/fmwork
  timeout ${BENCH_TIMEOUT:-280} sh share/bench/compare.sh "$@" > "$OUT/compare.log" 2>&1; echo "compare rc=$?"
  cp /tmp/fmwork/*.csv "$OUT/" 2>/dev/null
  grep -v "^ *$" "$OUT/compare.log" | cut -c1-160 | tail -26
fi
