#!/bin/bash
# Issue 15 on the 16-core host, second run: the same live scaling with every busy thread on
# a core of its own (bench rfc2544 --pin-cores auto: the default in the run recorded in
# docs/bench-16core-2026-11-25.txt, off since), and one worker against kernel forwarding
# with the issue's own set-up (one tester thread, one flow), pinned.
set -u
LOG=log2.txt
source "$(dirname "$0")/common.sh"
T=${T:-3}; FL=${FL:-12}; ROUNDS=${ROUNDS:-2}; W_LIVE=${W_LIVE:-"1 2 4"}; MEMW=${MEMW:-1,2,4,8}
step host; host_facts
ulimit -l unlimited
step "in memory, one SA, 64 B"
timeout 40 $L bench dataplane --workers $MEMW --sas 1 --pin --sizes 64 --algs aes-128-gcm --seconds 0.5
live() { # name, then arguments
  local n=$1; shift
  step "live $n: $*"
  timeout ${TL:-100} $L bench rfc2544 --quick --tests throughput --no-ceiling --pin-cores auto --out $R/$n "$@" 2>&1 \
    | grep -E '^\| [0-9]|^\| frame|^cores:|^espgw [0-9a-z]+ gw|interrupted|rror|panic'
}
live ceiling --dut ceiling --sizes 64 --threads $T --flows $FL
for r in $(seq 1 $ROUNDS); do
  for w in $W_LIVE; do
    live r$r-hash-w$w --dut espgw --sizes 64 --workers $w --fanout hash --threads $T --flows $FL
    [ "$r" = 1 ] && [ "$w" != 1 ] && live r$r-ordered-w$w --dut espgw --sizes 64 --workers $w --fanout ordered --threads $T --flows $FL
  done
done
TL=150 live kernel-vs-espgw-t1 --compare kernel,espgw --sizes 64,512,1518 --wan-mtu 1600 --workers 1
step done
tar -czf "$OUT/results2.tgz" -C $R . 2>/dev/null; ls -la "$OUT"
