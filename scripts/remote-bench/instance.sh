#!/bin/bash
# Issue 15 on the 16-core host: intel-ipsec-mb 1.3 writes a process-wide global (its errno)
# on every call, so the workers of one process write one cache line per packet. How much
# does each worker's own instance of the library (the default since 2026-11-26; the library
# loaded again from an in-memory copy, with its own globals) take back against all sharing
# the process's one (--shared-library)? Per round: 8 SAs by hash over 8 workers and one SA
# ordered over 1/4/8 workers, each way, then eight one-worker processes as the host's
# ceiling. (Its first run, docs/bench-16core-2026-11-26.txt run 9, used an experiment build
# whose switch was the environment variable ESPGW_MB_INSTANCE instead.)
# Knobs (environment): ROUNDS, SECS.
set -u
LOG=log10.txt
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}; SECS=${SECS:-1.5}
mem() { timeout 120 $L bench dataplane --pin --algs aes-128-gcm --seconds $SECS --sizes 64 "$@" | grep -E '^aes'; }
for r in $(seq 1 $ROUNDS); do
  order="shared private"; [ $((r % 2)) = 0 ] && order="private shared"
  for v in $order; do
    flag=""; [ $v = shared ] && flag=--shared-library
    step "round $r: library $v"
    mem --workers 8 --sas 8 --spread hash $flag
    mem --workers 1,4,8 --sas 1 $flag
  done
  step "round $r: the host's ceiling"
  procs 8 outbound; procs 8 inbound
done
step done
