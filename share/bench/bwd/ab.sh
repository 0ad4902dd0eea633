#!/bin/sh
# ab.sh - the backward's A/B of kernel versions in one device call: share/bench/ab.sh on bwd_bench
# (its header has the arguments and the environment).
#   sh share/bench/bwd/ab.sh BASE [rounds] [reps]
AB_HARNESS=bwd exec sh "$(dirname "$0")/../ab.sh" "$@"
