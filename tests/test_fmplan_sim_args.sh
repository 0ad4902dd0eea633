#!/bin/sh
# fmplan-sim checks its options with the rules FMPlanSetShape and FMPlanSetUp apply to a real
# plan: each bad value is refused with a message naming the option and an error exit (1..127,
# not a signal). The header names the mask the -fm_mask_* options made (-fm_mask_type document
# prints "mask document", not the -mask default), and -fm_mask_seed sets the first mask's seed
# when -seed is not given (-seed wins when both are).
. "$srcdir/tests/common.sh"
SIM="${top_builddir}/fmplan-sim"
t=$(mktemp -d) || exit 99
trap 'rm -rf "$t"' EXIT
out="$t/out"
B="-nodes 1 -gpus_per_node 2 -seqlen 4096 -table 0"
refuse() { # WANT ARGS...: fmplan-sim ARGS fails and prints WANT
  want=$1; shift
  fm_run 1 "$SIM" "$@" > "$out" 2>&1
  rc=$?
  { [ $rc != 0 ] && [ $rc -lt 128 ]; } || { echo "FAIL: fmplan-sim $* exited $rc; expected an error status 1..127"; cat "$out"; exit 1; }
  grep -q -- "$want" "$out" || { echo "FAIL: fmplan-sim $* does not say '$want'"; cat "$out"; exit 1; }
}
refuse '-seqlen 0; expected a length >= 1' $B -seqlen 0
refuse '-seqlen_k -5; expected a length >= 1' $B -seqlen_k -5
refuse '-seqlen_k 0; expected a length >= 1' $B -seqlen_k 0
refuse 'Option -seqlen has value "12abc"' $B -seqlen 12abc
refuse 'Option -dtype has value "fp64"; expected one of bf16|fp16|fp32' $B -dtype fp64
refuse 'Option -dtype has value "xyz"' $B -dtype xyz
refuse '-batch 0; expected >= 1' $B -batch 0
refuse '-heads_kv 0; expected >= 1' $B -heads_kv 0
refuse '-head_dim 0; expected a positive multiple of 8' $B -head_dim 0
refuse '-head_dim 7; expected a positive multiple of 8' $B -head_dim 7
refuse '-heads_q 12 -heads_kv 8; expected heads_q a multiple of heads_kv' $B -heads_q 12
refuse '-mask_heads 3 (or -fm_mask_heads) with -heads_kv 8' $B -mask_heads 3
refuse '-mask_heads 3 (or -fm_mask_heads) with -heads_kv 8' $B -fm_mask_heads 3
refuse '-mask_batch 0; expected >= 1' $B -mask_batch 0
refuse '-mask_batch 2 (or -fm_mask_batch) with -batch 3' $B -mask_batch 2 -batch 3
refuse '-chunk -1; expected query rows >= 1, or 0 for the default' $B -chunk -1
# the header names the mask's own type and the element type
fm_run 1 "$SIM" $B -fm_mask_type document -dtype fp32 > "$out" 2>&1 || { cat "$out"; echo "FAIL: fmplan-sim -fm_mask_type document"; exit 1; }
grep -q "; mask document, 4096 x 4096," "$out" || { cat "$out"; echo "FAIL: fmplan-sim -fm_mask_type document: the header names another mask"; exit 1; }
grep -q "head_dim 128, fp32;" "$out" || { cat "$out"; echo "FAIL: fmplan-sim -dtype fp32 is not announced"; exit 1; }
# the seed: -fm_mask_seed 7 is -seed 7; -seed wins over -fm_mask_seed
line() { fm_run 1 "$SIM" $B -mask document "$@" 2>&1 | sed -n 1p; }
s7=$(line -seed 7); f7=$(line -fm_mask_seed 7); s42=$(line); both=$(line -seed 42 -fm_mask_seed 7)
[ -n "$s7" ] && [ "$s7" = "$f7" ] || { echo "FAIL: -fm_mask_seed 7 does not give the mask of -seed 7:"; echo "$s7"; echo "$f7"; exit 1; }
[ "$s7" != "$s42" ] || { echo "FAIL: seeds 7 and 42 give the same document mask; the check proves nothing"; exit 1; }
[ "$both" = "$s42" ] || { echo "FAIL: -seed 42 -fm_mask_seed 7 is not the mask of seed 42:"; echo "$both"; echo "$s42"; exit 1; }
echo "PASS: fmplan-sim refuses bad values by name, prints the mask's own type and takes -fm_mask_seed"
