#!/bin/bash
# Issue 15 on the 16-core host, 2026-11-27: the 16-core rows of the README's targets table
# again as medians of alternated rounds (they were single rounds), and where the live spread
# by hash stops: every live step prints each gateway's packets per worker, and gateway 2
# receives the one SA's ESP on the queues the WAN bridge hands it (on 2026-11-26, two
# workers: gateway 2's second worker got none; docs/performance.md, "Sixteen cores,
# 2026-11-27"). The tester on CPUs 8-15. Needs the bundle made with --strongswan.
# About 7 minutes. Knobs (environment): MEM (0: no in-memory rounds), MEMROUNDS, ROUNDS (live
# rounds), WS (their worker counts, in this order in odd rounds and the reverse in even ones),
# SS (0: no espgw-against-strongSwan pair). The four calls of 2026-11-27: the defaults;
# MEM=0 ROUNDS=0; WS="4 1" ROUNDS=2 SS=0; MEM=0 ROUNDS=0.
set -u
LOG=log12.txt
source "$(dirname "$0")/common.sh"
MEM=${MEM:-1}; MEMROUNDS=${MEMROUNDS:-5}; ROUNDS=${ROUNDS:-3}; WS=${WS:-"1 2 4"}; SS=${SS:-1}
step host; host_facts
ulimit -l unlimited
mem() { timeout 120 $L bench dataplane --pin --algs aes-128-gcm --seconds 0.4 --sizes 64 "$@" \
  | grep -E '^aes|^algorithm|^waiting|^median|^round'; }
if [ "$MEM" = 1 ]; then
  step "in memory, one SA ordered, 64 B, $MEMROUNDS rounds"
  mem --workers 1,2,4,8 --sas 1 --rounds $MEMROUNDS
  step "in memory, 8 SAs by hash, 64 B, $MEMROUNDS rounds"
  mem --workers 1,2,4,8 --sas 8 --spread hash --rounds $MEMROUNDS
  # Since 2026-11-28: one policy with a per-worker set (an SA per worker, RFC 9611).
  step "in memory, one policy, per-worker SAs, 64 B, $MEMROUNDS rounds"
  mem --workers 1,2,4,8 --sas 1 --spread per-worker --rounds $MEMROUNDS
fi
Q="--sizes 64 --threads 4 --flows 16 --tester-cpus 8-15"
[ "$ROUNDS" -gt 0 ] && live_step ceiling 30 --dut ceiling $Q
reversed=$(echo $WS | tr ' ' '\n' | tac | paste -sd' ')
for r in $(seq 1 $ROUNDS); do
  ws=$WS; [ $((r % 2)) = 0 ] && ws=$reversed
  for w in $ws; do live_step r$r-hash-w$w 45 --dut espgw $Q --workers $w --fanout hash; done
done
if [ "$SS" = 1 ]; then
  live_step s-a 90 --compare espgw,strongswan $Q --workers 4 --fanout hash
  live_step s-b 90 --compare strongswan,espgw $Q --workers 4 --fanout hash
fi
step done
tar -czf "$OUT/results12.tgz" -C $R . 2>/dev/null; ls -la "$OUT"
