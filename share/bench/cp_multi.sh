#!/bin/sh
# cp_multi.sh - the multi-GPU context-parallel benchmark in one call per machine (P = the GPUs
# that nvidia-smi -L lists, or NP): build, then
#   1. fmbench -cp, forward and forward + backward, plan / unpruned all-gather / ring / one GPU,
#      masks causal, causal_document, document, share_question, H = 32, d = 128, bf16, at 8K
#      tokens per GPU and at 128K in total, once with H_kv = 32 and once with H_kv = 8;
#   2. PyTorch's context parallel on the same GPUs (share/bench/peers_cp.py, causal only, cuDNN
#      SDPA, head-tail load balance, the ring and the all-gather rotations);
#   3. with P >= 4: the plan over 2 virtual nodes of P/2 (-fm_plan_nodes 2), flat route against
#      hierarchical, forward, 8K per GPU, H_kv = 8, beside fmplan-sim's predicted bytes per link;
#   4. fmtrace SVGs (forward and backward) of the slowest plan row;
#   5. the short tables with the ratio columns against the targets (share/bench/cp_table.py), last.
# Run from the source root. Results go to $OUT (default /tmp/fmout): cp_table_P<P>.md, the CSVs,
# the logs' tails, the SVGs. Each phase prints its wall time; a phase that would start past the
# budget (BUDGET_S, default 520 s from the start, build included) is skipped with a message, and
# each run is cut at the time left (timeout), so the call ends in time whatever happens.
# Knobs (environment): NP, TOKENS_PER_GPU (8192), TOKENS_TOTAL (131072), MASKS, HEADS (32),
# HEADS_KV ("32 8"), HEAD_DIM (128), REPS (5), WARMUP (2), FMBENCH_EXTRA (more fmbench options,
# e.g. -fm_backend cpu), CP_SKIP_BUILD=1, CP_SKIP_TORCH=1, MPIEXEC, PYTHON3, TORCHRUN (default
# $PYTHON3 -m torch.distributed.run), and the programs FMBENCH, FMPLANSIM, FMTRACE (default
# ./fmbench ...). Keeps NCCL_NVLS_ENABLE=0.
# make check runs this on the CPU backend with tiny sizes (tests/test_fmbench_cp.sh).
OUT=${OUT:-/tmp/fmout}
W=${WORK:-/tmp/cpmulti}
mkdir -p "$OUT" "$W"
export NCCL_NVLS_ENABLE=0 OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
T0=$(date +%s)
END=$((T0 + ${BUDGET_S:-520}))
PY=${PYTHON3:-python3}
B=$(cd "$(dirname "$0")" && pwd) # this script's folder: peers_cp.py and cp_table.py beside it (any build directory)
FMBENCH=${FMBENCH:-./fmbench}
FMPLANSIM=${FMPLANSIM:-./fmplan-sim}
FMTRACE=${FMTRACE:-./fmtrace}
P=${NP:-$(nvidia-smi -L 2>/dev/null | grep -c '^GPU')}
PER=${TOKENS_PER_GPU:-8192}
TOTAL=${TOKENS_TOTAL:-131072}
MASKS=${MASKS:-causal,causal_document,document,share_question}
H=${HEADS:-32}
HKVS=${HEADS_KV:-32 8}
D=${HEAD_DIM:-128}
REPS=${REPS:-5}
WARM=${WARMUP:-2}
[ "$P" -ge 2 ] 2>/dev/null || { echo "cp_multi: $P GPU(s); context parallelism needs 2 or more (set NP)"; exit 77; }
S1=$((PER * P))
SEQS=$S1
[ "$TOTAL" != "$S1" ] && SEQS="$S1,$TOTAL"
MPI="${MPIEXEC:-mpiexec} -n $P --oversubscribe --bind-to none"
left() { echo $((END - $(date +%s))); }
stamp() { echo "[cp_multi +$(($(date +%s) - T0)) s] $*"; }
# run LIMIT LOG cmd...: the command under timeout min(LIMIT, time left); its rc is printed
run() {
  lim=$1 log=$2; shift 2
  l=$(left)
  [ "$l" -lt "$lim" ] && lim=$l
  if [ "$lim" -lt 10 ]; then stamp "skipped (budget spent): $*"; return 124; fi
  timeout "$lim" "$@" > "$log" 2>&1
  rc=$?
  stamp "rc=$rc ($lim s allowed): $(echo "$*" | cut -c1-150)"
  [ $rc -ne 0 ] && tail -15 "$log"
  return $rc
}
stamp "P = $P, lengths $SEQS, masks $MASKS, H = $H, H_kv in {$HKVS}, d = $D, $WARM + $REPS runs"
nvidia-smi -L 2>/dev/null
nvidia-smi topo -m 2>/dev/null | head -$((P + 1))
if [ -z "$CP_SKIP_BUILD" ]; then
  [ -d .devdeps ] && sh .devdeps/install.sh > "$W/deps.log" 2>&1
  if ! (./autogen.sh && ./configure CC=mpicc && make -j"$(nproc)") > "$W/build.log" 2>&1; then
    tail -40 "$W/build.log"; echo "cp_multi: build failed"; exit 1
  fi
  stamp "build done"
  grep -E "^  (CUDA|NCCL|HDF5|hwloc) " "$W/build.log"
fi

# 1. fmbench -cp per KV head count (the main rows: label main)
MAIN=""
for kv in $HKVS; do
  rm -rf "$W/tr_kv$kv"
  # shellcheck disable=SC2086
  run 200 "$W/cp_kv$kv.log" $MPI "$FMBENCH" -cp -masks "$MASKS" -seqlen "$SEQS" -heads "$H" -heads_kv "$kv" -head_dim "$D" \
    -pass fwd,fwdbwd -warmup "$WARM" -reps "$REPS" -trace_dir "$W/tr_kv$kv" -csv "$W/cp_kv$kv.csv" -label main $FMBENCH_EXTRA
  [ -s "$W/cp_kv$kv.csv" ] && MAIN="$MAIN $W/cp_kv$kv.csv" && cp "$W/cp_kv$kv.csv" "$OUT/"
  tail -c 20000 "$W/cp_kv$kv.log" > "$OUT/cp_kv$kv.log"
done

# 2. PyTorch's context parallel (causal): both rotations, both KV head counts
TORCH=""
if [ -z "$CP_SKIP_TORCH" ]; then
  if $PY -c "import torch.distributed.tensor.experimental" 2>/dev/null; then
    kvs=$(echo $HKVS | tr ' ' ,)
    run 150 "$W/torch.log" ${TORCHRUN:-$PY -m torch.distributed.run} --standalone --nproc_per_node="$P" "$B/peers_cp.py" --seqlen "$SEQS" \
      --heads "$H" --heads-kv "$kvs" --head-dim "$D" --pass fwd,fwdbwd --rotate alltoall,allgather --warmup "$WARM" --reps "$REPS" \
      --csv "$W/torch_cp.csv"
    [ -s "$W/torch_cp.csv" ] && TORCH="$W/torch_cp.csv" && cp "$W/torch_cp.csv" "$OUT/"
    tail -40 "$W/torch.log" > "$OUT/torch_cp.log"
  else
    stamp "no torch here: the torch CP column stays empty"
  fi
fi

# 3. virtual nodes: 2 of P/2, flat against hierarchical, and fmplan-sim's prediction
VN="" SIM=""
if [ "$P" -ge 4 ] && [ $((P % 2)) = 0 ]; then
  vkv=$(echo $HKVS | awk '{print $NF}')
  for route in flat hierarchical; do
    # shellcheck disable=SC2086
    run 90 "$W/vn_$route.log" $MPI "$FMBENCH" -cp -configs plan -single 0 -trace_dir none -masks "$MASKS" -seqlen "$S1" -heads "$H" \
      -heads_kv "$vkv" -head_dim "$D" -pass fwd -warmup "$WARM" -reps "$REPS" -fm_plan_nodes 2 -fm_plan_route $route \
      -label "${route}_v2" -csv "$W/vn_$route.csv" $FMBENCH_EXTRA
    [ -s "$W/vn_$route.csv" ] && VN="$VN $W/vn_$route.csv"
  done
  echo "mask,seqlen,route,intra_bytes,inter_bytes" > "$W/sim.csv"
  for m in $(echo "$MASKS" | tr , ' '); do
    run 30 "$W/sim_$m.log" "$FMPLANSIM" -nodes 2 -gpus_per_node $((P / 2)) -mask "$m" -seqlen "$S1" -heads_kv "$vkv" -heads_q "$H" \
      -head_dim "$D" -table 1 &&
      awk -v m="$m" -v s="$S1" '$1 == "balanced" { printf "%s,%s,flat,%.0f,%.0f\n", m, s, $9 * 1e9, $10 * 1e9; getline;
        printf "%s,%s,hierarchical,%.0f,%.0f\n", m, s, $2 * 1e9, $3 * 1e9 }' "$W/sim_$m.log" >> "$W/sim.csv"
  done
  SIM="$W/sim.csv"
  cat $VN "$SIM" > "$OUT/vnodes.csv" 2>/dev/null
fi

# 4. the slowest plan row's trace (forward + backward) as SVGs
if [ -n "$MAIN" ] && [ -x "$FMTRACE" ]; then
  slow=$(cat $MAIN | awk -F, '$3 == "plan" && $4 == "fwdbwd" && $11 > best { best = $11; r = $1 "_" $2 " " $8 }
    END { print r }')
  set -- $slow
  tf="$W/tr_kv$2/$1_plan.h5"
  if [ -f "$tf" ]; then
    for dir in forward backward; do
      "$FMTRACE" "$tf" -run $dir -svg "$OUT/cp_trace_P${P}_$1_kv$2_$dir.svg" > "$W/fmtrace_$dir.log" 2>&1 &&
        stamp "trace of the slowest plan row ($1, H_kv $2, $dir): $OUT/cp_trace_P${P}_$1_kv$2_$dir.svg" &&
        grep -E "overlap|exposed" "$W/fmtrace_$dir.log" | head -3
    done
    cp "$tf" "$OUT/cp_trace_P${P}_$1_kv$2.h5"
  fi
fi

# 5. the tables, last
if [ -n "$MAIN" ]; then
  # shellcheck disable=SC2086
  $PY "$B/cp_table.py" --ranks "$P" --per-gpu "$PER" --total "$TOTAL" --main $MAIN --torch $TORCH --vnodes $VN --sim $SIM \
    > "$OUT/cp_table_P$P.md" 2>&1
  stamp "done; table in $OUT/cp_table_P$P.md"
  cat "$OUT/cp_table_P$P.md"
else
  stamp "no fmbench -cp rows: nothing to tabulate"; exit 1
fi
