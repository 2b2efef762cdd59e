#!/bin/bash
# Issue 15 on the 16-core host (written 2026-11-29, for the next visit): burst pacing in the
# ordered spread (espgw_core::pacing). (1) In memory, one SA ordered over N = 1, 2, 4, 8 with
# pacing on and off in every round (`--burst-pacing on,off`): does pacing take the ordered
# spread towards the sum of its workers' rates on this host, whose CPUs run at uneven speeds?
# (2) The same with worker 1 handicapped by 100 ns a packet (the emulation measured on the
# 2-core VM), as a check that the mechanism does there what it did here. (3) Live, one SA,
# 16 flows, 4 workers per gateway in the ordered spread (always engaged), pacing on and off,
# alternating. About 6 minutes. Knobs: MEMROUNDS (3), ROUNDS (2 live rounds), LIVE (0: skip).
set -u
LOG=log-pacing.txt
source "$(dirname "$0")/common.sh"
MEMROUNDS=${MEMROUNDS:-3}; ROUNDS=${ROUNDS:-2}; LIVE=${LIVE:-1}
step host; host_facts
ulimit -l unlimited
mem() { timeout 150 $L bench dataplane --pin --algs aes-128-gcm --seconds 0.4 "$@" \
  | grep -E '^aes|^algorithm|^waiting|^median|^round|rror|panic'; }
step "in memory, one SA ordered, pacing on and off, 64 B, $MEMROUNDS rounds"
mem --sizes 64 --workers 1,2,4,8 --sas 1 --spread ordered --burst-pacing on,off --rounds $MEMROUNDS
step "in memory, 8 SAs by hash (the sum of the workers' rates), 64 B, $MEMROUNDS rounds"
mem --sizes 64 --workers 1,2,4,8 --sas 8 --spread hash --rounds $MEMROUNDS
step "in memory, one SA ordered, worker 1 handicapped 100 ns a packet, 64 B, 2 rounds"
mem --sizes 64 --workers 1,2,4 --sas 1 --spread ordered --burst-pacing on,off --rounds 2 --handicap 1:100
if [ "$LIVE" = 1 ]; then
  A="--sizes 64 --threads 4 --flows 16 --tester-cpus 8-15 --replay-window 8192"
  marked() { live_step "$@"; }
  for r in $(seq 1 $ROUNDS); do
    o="on off"; [ $((r % 2)) = 0 ] && o="off on"
    for p in $o; do
      marked r$r-ordered4-pacing-$p 60 --dut espgw $A --workers 4 --fanout ordered \
        --espgw-args "--ordered-join always --burst-pacing $p"
    done
  done
fi
step done
tar -czf "$OUT/results-pacing.tgz" -C $R . 2>/dev/null; ls -la "$OUT"
