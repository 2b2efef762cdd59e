#!/bin/bash
# Runs on the many-core measurement host from a bundle (../shared/remote-bench/README.md):
#   bash ../shared/remote-bench/bundle.sh; strip -o .devbundle/bin/espgw-lab target/release/espgw-lab
#   cp scripts/remote-bench/*.sh .devbundle/; there: bash .devbundle/THIS.sh (results under $OUT)
# Not on a development machine: env.sh links the bundle's ip/ethtool/ping into /usr/sbin.
# Issue 15 on the 16-core host: in-memory and live scaling, one worker against kernel forwarding.
# Every step has its own time limit; the log goes to $OUT as it is written.
# Knobs for a dry run on a small machine: W_LIVE, T, TCPUS, ROUNDS, MEMW.
set -u
cd "$(dirname "$0")/.."
source .devbundle/env.sh
L=$PWD/.devbundle/bin/espgw-lab
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=/tmp/espgw-r; rm -rf $R; mkdir -p $R
exec > >(tee -a "$OUT/log.txt") 2>&1
T=${T:-4}; TCPUS=${TCPUS:-8,9,10,11,12,13,14,15}; ROUNDS=${ROUNDS:-2}; MEMW=${MEMW:-1,2,4,8}
W_LIVE=${W_LIVE:-"1 2 4"}
step() { echo; echo "=== $(date -u +%T) $*"; }
step host; nproc; uname -r; grep -m1 'model name' /proc/cpuinfo; free -g | head -2
ip netns add espgw-probe && ip netns del espgw-probe && echo "netns: ok"
ulimit -l unlimited

step "in memory, one SA, 3 rounds"
for r in 1 2 3; do
  timeout 90 $L bench dataplane --workers $MEMW --sas 1 --pin --sizes 64,1420 --algs aes-128-gcm --seconds 0.5
done
step "in memory, 8 SAs"
timeout 90 $L bench dataplane --workers $MEMW --sas 8 --pin --sizes 64 --algs aes-128-gcm --seconds 0.5

Q="bench rfc2544 --quick --tests throughput --no-ceiling --threads $T --flows 16 --tester-cpus $TCPUS"
live() { # name, then arguments
  local n=$1; shift
  step "live $n: $*"
  timeout 150 $L $Q --out $R/$n "$@" 2>&1 | grep -E '^\| [0-9]|^\| frame|interrupted|rror|panic|\| ceiling'
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
