#!/bin/bash
# Issue 15 on the 16-core host: do some CPUs share a physical core (the VM's topology says
# none do)? One-worker processes on CPU 0 and CPU j at once, j = 1..15, 64 B outbound: a
# sibling halves both. Then 8 one-worker processes on CPUs 0-7 and on 0,2,...,14.
# Knobs (environment): SECS.
set -u
LOG=log8.txt
source "$(dirname "$0")/common.sh"
SECS=${SECS:-1}
one() { # cpu, output file
  taskset -c $1 timeout 30 $L bench dataplane --workers 1 --sas 1 --pin --sizes 64 --algs aes-128-gcm \
    --seconds $SECS --directions outbound | awk '/^aes/ {print $7}' > $2
}
step "CPU 0 alone"; one 0 $R/a; cat $R/a
step "CPU 0 and CPU j at once (Mpps on 0, on j)"
for j in $(seq 1 15); do
  one 0 $R/a & p0=$!; one $j $R/b & p1=$!; wait $p0 $p1
  echo "j=$j $(cat $R/a) $(cat $R/b)"
done
for set in "0 1 2 3 4 5 6 7" "0 2 4 6 8 10 12 14" "8 9 10 11 12 13 14 15"; do
  pids=()
  for c in $set; do one $c $R/p$c & pids+=($!); done
  wait "${pids[@]}"
  echo "CPUs $set: $(cat $R/p* | awk '{s += $1} END {printf "%.2f", s}') Mpps (each: $(cat $R/p* | paste -sd' '))"
  rm -f $R/p*
done
step done
