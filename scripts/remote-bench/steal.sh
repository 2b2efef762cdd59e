#!/bin/bash
# Issue 15 on the 16-core host: do the ordered spread's waits come from its workers' CPUs
# being taken away (the hypervisor's steal time, or other tasks on the same CPU)? For one SA
# ordered and 8 SAs by hash at 8 pinned workers: each CPU's steal time (/proc/stat) over the
# trial, and each worker thread's time runnable but not running (/proc/PID/task/TID/schedstat)
# over one second in its middle.
# Knobs (environment): ROUNDS, SECS.
set -u
LOG=log6.txt
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-2}; SECS=${SECS:-4}
steal() { awk '/^cpu[0-9]/ {printf "%s ", $9} END {print ""}' /proc/stat; }
runq() { # pid: the sum and the largest of its threads' run-queue delay, ns
  cat /proc/$1/task/*/schedstat 2>/dev/null | awk '{print $2}' | paste -sd' '
}
trial() { # spread, SAs, direction
  local a b p q1 q2
  a=$(steal)
  $L bench dataplane --pin --algs aes-128-gcm --seconds $SECS --workers 8 --sas $2 --spread $1 \
    --sizes 64 --directions $3 > $R/t.txt &
  p=$!
  sleep 2; q1=$(runq $p); sleep 1; q2=$(runq $p)
  wait $p
  b=$(steal)
  grep -E '^aes.* 8 +[0-9.]+ ' $R/t.txt
  echo "steal ticks (1/100 s) per CPU over the run: $(paste -d' ' <(echo $a | tr ' ' '\n') <(echo $b | tr ' ' '\n') | awk 'NF == 2 {printf "%d ", $2 - $1}')"
  echo "run-queue delay per thread over 1 s, ms: $(paste -d' ' <(echo $q1 | tr ' ' '\n') <(echo $q2 | tr ' ' '\n') | awk 'NF == 2 {printf "%.1f ", ($2 - $1) / 1e6}')"
}
step host; host_facts
for r in $(seq 1 $ROUNDS); do
  for d in outbound inbound; do
    step "round $r: one SA ordered, 8 workers, $d"; trial ordered 1 $d
    step "round $r: 8 SAs by hash, 8 workers, $d"; trial hash 8 $d
  done
done
step done
