#!/bin/bash
# Issue 15 on the 16-core host: why do 8 workers in one process (8 SAs by hash, nothing
# ordered) carry less than 8 one-worker processes on the same CPUs? Per round: this build and
# espgw-lab-B (a variant, if bundled: each SA's mutable state on its own 128-byte lines)
# alternated, 8 SAs by hash at 1 and 8 workers and one SA ordered at 8 workers, then 8
# independent one-worker processes on CPUs 0-7 at once (the host's own ceiling).
# Knobs (environment): ROUNDS, SECS.
set -u
LOG=log7.txt
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}; SECS=${SECS:-2}
B=$PWD/.devbundle/bin/espgw-lab-B
mem() { # binary, then arguments
  local b=$1; shift
  timeout 120 $b bench dataplane --pin --algs aes-128-gcm --seconds $SECS --sizes 64 "$@" | grep -E '^aes'
}
step host; host_facts
for r in $(seq 1 $ROUNDS); do
  order="$L $B"; [ $((r % 2)) = 0 ] && order="$B $L"
  for b in $order; do
    [ -x "$b" ] || continue
    step "round $r: $(basename $b): 8 SAs by hash at 1 and 8 workers, one SA ordered at 8"
    mem $b --workers 1,8 --sas 8 --spread hash
    mem $b --workers 8 --sas 1
  done
  step "round $r: the host's ceiling"
  procs 8 outbound; procs 8 inbound
done
step done
