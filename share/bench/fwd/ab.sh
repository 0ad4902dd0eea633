#!/bin/sh
# ab.sh - the forward's A/B of kernel versions in one device call: share/bench/ab.sh on fwd_bench
# (its header has the arguments and the environment; AB_MODE=abmask for the masks with bound
# vectors, and FWD_SCHED=dynamic or static for the persistent kernel, which fwd_bench does not
# take by default).
#   sh share/bench/fwd/ab.sh BASE [rounds] [reps]
AB_HARNESS=fwd exec sh "$(dirname "$0")/../ab.sh" "$@"
