#!/bin/bash
# Issue 15 on the 16-core host: does the in-process penalty (8 workers in one process carrying
# less than 8 one-worker processes, inproc.sh) grow with the threads per process, and does
# pinning matter? 8 SAs by hash, 64 B, on CPUs 0-7, per round: one process of 8 pinned
# workers, the same unpinned (taskset 0-7), two processes of 4 pinned workers (CPUs 0-3 and
# 4-7), eight one-worker processes; the sum of what each process carried.
# Knobs (environment): ROUNDS, SECS.
set -u
LOG=log9.txt
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}; SECS=${SECS:-2}
run() { # label, then "CPUS:WORKERS:PIN" per process (PIN 1 or 0); for each direction
  local label=$1; shift
  for d in outbound inbound; do
    local i=0 pids=() spec cpus w pin
    for spec in "$@"; do
      IFS=: read cpus w pin <<< "$spec"
      taskset -c $cpus timeout 60 $L bench dataplane --workers $w --sas 8 --spread hash \
        $([ "$pin" = 1 ] && echo --pin) --sizes 64 --algs aes-128-gcm --seconds $SECS --directions $d \
        | awk '/^aes/ {print $7}' > $R/p$i &
      pids+=($!); i=$((i + 1))
    done
    wait "${pids[@]}"
    echo "$label, 64 B $d: $(cat $R/p* | awk '{s += $1} END {printf "%.2f", s}') Mpps (each process: $(cat $R/p* | paste -sd' '))"
    rm -f $R/p*
  done
}
for r in $(seq 1 $ROUNDS); do
  step "round $r"
  run "1 process x 8 workers, pinned" 0-7:8:1
  run "1 process x 8 workers, not pinned (CPUs 0-7)" 0-7:8:0
  run "2 processes x 4 workers, pinned" 0-3:4:1 4-7:4:1
  run "8 processes x 1 worker" 0:1:1 1:1:1 2:1:1 3:1:1 4:1:1 5:1:1 6:1:1 7:1:1
done
step done
