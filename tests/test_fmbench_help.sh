#!/bin/sh
# fmbench -help prints fmbench's own options and the library's, then exits 0, without a GPU
# (it must not stop at the device check). Its -pass list is checked without a GPU too (-dryrun):
# a bad pass is refused by name, and the known ones (fwd, bwd, fwdbwd, -bwd, -fwdbwd) are
# accepted and announced. Every other bad value (lengths, heads, head_dim, dtype, counts, numbers
# with trailing text) is refused by name with an error exit, not a signal; -cp's argument errors
# list no unused options. -visits counts the backward's visited steps right: full and causal at
# 256 (batch 512, 32 heads), whose tiles are counted here by hand, and a GQA 4:1 run, whose work
# items are per kv head. Skips (77) when fmbench is not built (no CUDA).
. "$srcdir/tests/common.sh"
FMBENCH="${top_builddir}/fmbench"
[ -x "$FMBENCH" ] || { echo "SKIP: fmbench not built (no CUDA in this build)"; exit 77; }
out=test_fmbench_help.out
h5=test_fmbench_help.h5
rm -f "$out" "$h5"
fm_run 1 "$FMBENCH" -help > "$out" 2>&1
rc=$?
[ $rc = 0 ] || { echo "FAIL: fmbench -help exited $rc"; cat "$out"; exit 1; }
for opt in -masks -seqlen -head_dim -heads_kv -tokens -dtype -warmup -warmup_s -reps -seed -csv -dryrun -visits -mask_batch -pass -bwd \
           -fwdbwd -cp -fm_log_view; do
  grep -q -- "$opt" "$out" || { echo "FAIL: fmbench -help does not list $opt"; cat "$out"; exit 1; }
done
grep -q "backward 2.5x" "$out" || { echo "FAIL: fmbench -help does not state the backward FLOP convention"; cat "$out"; exit 1; }
# a bad pass: refused with its name, nonzero exit
fm_run 1 "$FMBENCH" -dryrun -masks causal -seqlen 256 -o "$h5" -pass fwd,backward > "$out" 2>&1
rc=$?
[ $rc != 0 ] || { echo "FAIL: fmbench -pass fwd,backward exited 0"; cat "$out"; exit 1; }
grep -q "unknown pass 'backward'" "$out" || { echo "FAIL: fmbench does not name the bad pass"; cat "$out"; exit 1; }
# -warmup_s: a negative time refused by name; a valid one announced in the header line
fm_run 1 "$FMBENCH" -dryrun -masks causal -seqlen 256 -o "$h5" -warmup_s -2 > "$out" 2>&1
rc=$?
[ $rc != 0 ] || { echo "FAIL: fmbench -warmup_s -2 exited 0"; cat "$out"; exit 1; }
grep -q -- "-warmup_s is '-2'" "$out" || { echo "FAIL: fmbench does not name the bad -warmup_s"; cat "$out"; exit 1; }
fm_run 1 "$FMBENCH" -dryrun -masks causal -seqlen 256 -o "$h5" -warmup_s 2s > "$out" 2>&1
rc=$?
[ $rc != 0 ] || { echo "FAIL: fmbench -warmup_s 2s exited 0"; cat "$out"; exit 1; }
grep -q -- "-warmup_s is '2s'" "$out" || { echo "FAIL: fmbench does not name the unparsable -warmup_s"; cat "$out"; exit 1; }
rm -f "$h5"
fm_run 1 "$FMBENCH" -dryrun -masks causal -seqlen 256 -o "$h5" -warmup_s 1.5 -warmup 2 -reps 4 > "$out" 2>&1
rc=$?
[ $rc = 0 ] || { echo "FAIL: fmbench -warmup_s 1.5 exited $rc"; cat "$out"; exit 1; }
grep -q "2 warm-up runs and the steady state (-warmup_s), median of 4" "$out" ||
  { echo "FAIL: fmbench -warmup_s 1.5 is not announced in the header line"; cat "$out"; exit 1; }
# the known passes, as -pass and as flags: accepted and listed in the header line
for args in "-pass fwd,bwd,fwdbwd|fwd bwd fwdbwd" "-bwd|bwd" "-fwdbwd -bwd|bwd fwdbwd" "-pass fwd|fwd" "|fwd"; do
  a=${args%%|*}; want=${args#*|}
  rm -f "$h5"
  fm_run 1 "$FMBENCH" -dryrun -masks causal -seqlen 256 -o "$h5" $a > "$out" 2>&1
  rc=$?
  [ $rc = 0 ] || { echo "FAIL: fmbench -dryrun $a exited $rc"; cat "$out"; exit 1; }
  grep -q "^fmbench: passes $want (" "$out" || { echo "FAIL: fmbench -dryrun $a does not announce passes '$want'"; cat "$out"; exit 1; }
done
# -visits at 256 (two key blocks, batch 131072 / 256 = 512, 32 heads: 16384 rows of tiles; items
# = 2 key blocks x 32 kv heads x 512). Full: 4 x 2 unmasked 64-row tiles a head, 2 x 2 at 128.
# Causal (bottom-right = top-left here): at 64 rows key block 0 has rows 0-63 and 64-127 partial
# and 128-255 unmasked, key block 1 skips 0-127 and has 128-191, 192-255 partial: 2 unmasked, 4
# partial; at 80 rows (0-79, 80-159, 160-239, 240-255) block 0: 2 partial, 2 unmasked, block 1:
# 3 partial; at 128: 1 unmasked and 2 partial. Both take 80-row steps at d = 128 (no bound vectors).
rm -f "$h5"
fm_run 1 "$FMBENCH" -dryrun -visits -masks full,causal -seqlen 256 -o "$h5" > "$out" 2>&1 ||
  { echo "FAIL: fmbench -dryrun -visits exited $?"; cat "$out"; exit 1; }
for want in "visits full *256 512 bwd rows 80; 64: items 32768 unmasked 131072 partial 0; 80: items 32768 unmasked 131072 partial 0; 128: items 32768 unmasked 65536 partial 0" \
            "visits causal *256 512 bwd rows 80; 64: items 32768 unmasked 32768 partial 65536; 80: items 32768 unmasked 32768 partial 81920; 128: items 32768 unmasked 16384 partial 32768"; do
  grep -q "^$want\$" "$out" || { echo "FAIL: fmbench -visits does not print '$want'"; cat "$out"; exit 1; }
done
# GQA 4:1 (8 kv heads): a quarter of the items, the same steps; -head_dim 64: 128-row steps
rm -f "$h5"
fm_run 1 "$FMBENCH" -dryrun -visits -masks causal -seqlen 256 -heads_kv 8 -head_dim 64 -o "$h5" > "$out" 2>&1 ||
  { echo "FAIL: fmbench -dryrun -visits -heads_kv 8 exited $?"; cat "$out"; exit 1; }
grep -q "^visits causal *256 512 bwd rows 128; 64: items 8192 unmasked 32768 partial 65536;" "$out" ||
  { echo "FAIL: fmbench -visits -heads_kv 8 -head_dim 64: items or rows wrong"; cat "$out"; exit 1; }
# bad values: refused before anything runs, with a message naming the option and an exit status
# of 1..127 (an error, not a signal: -seqlen 0 and -seqlen 4096,abc used to divide by zero)
refuse() { # WANT ARGS...: fmbench ARGS fails and prints WANT
  want=$1; shift
  fm_run 1 "$FMBENCH" "$@" > "$out" 2>&1
  rc=$?
  { [ $rc != 0 ] && [ $rc -lt 128 ]; } || { echo "FAIL: fmbench $* exited $rc; expected an error status 1..127"; cat "$out"; exit 1; }
  grep -q -- "$want" "$out" || { echo "FAIL: fmbench $* does not say '$want'"; cat "$out"; exit 1; }
}
D="-dryrun -masks causal -o $h5"
refuse '-seqlen: "0" is not a positive length' $D -seqlen 0
refuse 'Option -seqlen has value "abc"' -dryrun -o "$h5" -seqlen 4096,abc
refuse '-seqlen: "-256" is not a positive length' $D -seqlen 256,-256
refuse '-dtype is "xyz"; expected bf16 or fp16' $D -seqlen 256 -dtype xyz
refuse '-dtype is "fp32"; expected bf16 or fp16' $D -seqlen 256 -dtype fp32
refuse '-heads 7 -heads_kv 2; expected heads a multiple of heads_kv' $D -seqlen 256 -heads 7 -heads_kv 2
refuse '-heads_kv 0; expected >= 1' $D -seqlen 256 -heads_kv 0
refuse '-heads 0; expected >= 1' $D -seqlen 256 -heads 0
refuse '-head_dim 7; expected a multiple of 8' $D -seqlen 256 -head_dim 7
refuse '-head_dim 264; expected a multiple of 8' $D -seqlen 256 -head_dim 264
refuse '-warmup -1; expected >= 0' $D -seqlen 256 -warmup -1
refuse '-mask_batch 0; expected >= 1' $D -seqlen 256 -mask_batch 0
refuse '-reps 0; expected >= 1' $D -seqlen 256 -reps 0
refuse '-tokens 0; expected >= 1' $D -seqlen 256 -tokens 0
refuse 'Option -heads has value "12abc"' $D -seqlen 256 -heads 12abc
refuse 'Option -reps has value "3x"' $D -seqlen 256 -reps 3x
refuse '-seed is "4x"' $D -seqlen 256 -seed 4x
refuse "-masks: unknown mask 'nomask'" -dryrun -masks causal,nomask -o "$h5" -seqlen 256
# on two ranks: every rank stops with the error, none hangs
fm_run 2 "$FMBENCH" $D -seqlen 256 -heads 7 -heads_kv 2 > "$out" 2>&1
rc=$?
{ [ $rc != 0 ] && [ $rc -lt 128 ]; } || { echo "FAIL: fmbench on 2 ranks with -heads 7 -heads_kv 2 exited $rc"; cat "$out"; exit 1; }
[ "$(grep -c -- '-heads 7 -heads_kv 2; expected' "$out")" = 2 ] || { echo "FAIL: not every rank names the bad -heads"; cat "$out"; exit 1; }
# a valid shape: accepted and announced (the element type by its name, lengths with the k suffix)
rm -f "$h5"
fm_run 1 "$FMBENCH" $D -seqlen 256,1k -heads 8 -heads_kv 2 -head_dim 64 -dtype fp16 -mask_batch 2 -warmup 0 -reps 1 > "$out" 2>&1
rc=$?
[ $rc = 0 ] || { echo "FAIL: fmbench -dryrun with a valid shape exited $rc"; cat "$out"; exit 1; }
grep -q "; fp16, d = 64, H = 8 (kv 2)," "$out" && grep -q "^causal  *1024   2 " "$out" ||
  { echo "FAIL: fmbench -dryrun does not announce the shape it was given"; cat "$out"; exit 1; }
# -cp: an argument error names the option and lists no option as unused (-fm_backend cpu was read)
refuse '-heads 7 -heads_kv 2; expected heads a multiple of heads_kv' -cp -fm_backend cpu -masks causal -seqlen 256 -heads 7 -heads_kv 2 \
  -trace_dir none
if grep -q "never used" "$out"; then echo "FAIL: fmbench -cp's argument error lists unused options"; cat "$out"; exit 1; fi
# -cp reads the shared options the same way: whole numbers, the same checks
refuse 'Option -heads has value "12abc"' -cp -fm_backend cpu -masks causal -seqlen 256 -heads 12abc -trace_dir none
refuse '-reps 0; expected >= 1 timed run' -cp -fm_backend cpu -masks causal -seqlen 256 -reps 0 -trace_dir none
rm -f "$out" "$h5"
echo "PASS: fmbench -help lists its options and the library's and exits 0; -pass and every other value are parsed and checked"
