#!/bin/bash
# Issue 15 on the 16-core host: in-memory and live scaling, one worker against kernel forwarding.
# Every step has its own time limit; the log goes to $OUT as it is written.
# Knobs (environment): W_LIVE, T, TCPUS, ROUNDS (live), MEMW, MEMROUNDS (in memory).
set -u
LOG=log.txt
source "$(dirname "$0")/common.sh"
T=${T:-4}; TCPUS=${TCPUS:-8-15}; ROUNDS=${ROUNDS:-2}; MEMW=${MEMW:-1,2,4,8}; MEMROUNDS=${MEMROUNDS:-5}
W_LIVE=${W_LIVE:-"1 2 4"}
step host; host_facts
ip netns add espgw-probe && ip netns del espgw-probe && echo "netns: ok"
ulimit -l unlimited

# --rounds: every worker count once a round, the order alternating, each round's scaling
# against its own one-worker trial, then the median and range (crates/lab/src/bench/rounds.rs):
# one pair of trials says little on a shared host that drifts between them.
step "in memory, one SA, $MEMROUNDS rounds"
timeout 240 $L bench dataplane --workers $MEMW --sas 1 --pin --sizes 64,1420 --algs aes-128-gcm --seconds 0.4 \
  --rounds $MEMROUNDS
step "in memory, 8 SAs, $MEMROUNDS rounds"
timeout 120 $L bench dataplane --workers $MEMW --sas 8 --pin --sizes 64 --algs aes-128-gcm --seconds 0.4 \
  --rounds $MEMROUNDS

Q="bench rfc2544 --quick --tests throughput --no-ceiling --threads $T --flows 16 --tester-cpus $TCPUS"
live() { # name, then arguments
  local n=$1; shift
  step "live $n: $*"
  timeout 150 $L $Q --out $R/$n "$@" 2>&1 | grep -E '^\| [0-9]|^\| frame|^espgw [0-9a-z]+ gw|interrupted|rror|panic|\| ceiling'
}
live ceiling --dut ceiling --sizes 64
for r in $(seq 1 $ROUNDS); do
  for w in $W_LIVE; do
    live r$r-hash-w$w --dut espgw --sizes 64 --workers $w --fanout hash
    [ "$w" = 1 ] && continue
    live r$r-ordered-w$w --dut espgw --sizes 64 --workers $w --fanout ordered
    [ "$r" = 1 ] && [ "$w" = 4 ] && live r$r-always-w$w --dut espgw --sizes 64 --workers $w --fanout ordered --espgw-args=--ordered-join=always
  done
done
live kernel-vs-espgw --compare kernel,espgw --sizes 64,512,1518 --wan-mtu 1600 --workers 1
step done
tar -czf "$OUT/results.tgz" -C $R . 2>/dev/null; ls -la "$OUT"
