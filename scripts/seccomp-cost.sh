#!/bin/sh
# What the seccomp filter costs the live gateway: the test bed (AF_XDP) with gw1 under
# `--seccomp kill` and `--seccomp off`, alternated ROUNDS times (default 3); each round sends
# UDP from h1 to h2 as fast as the sender can for SECONDS (default 3) and reports what h2
# received and gw1's CPU time per packet (user + system, from /proc/PID/stat). Needs root.
set -eu
E=${ESPGW_LAB:-$(dirname "$0")/../target/release/espgw-lab}
ROUNDS=${1:-3}
SECONDS_PER=${2:-3}
hz=$(getconf CLK_TCK)
for r in $(seq "$ROUNDS"); do
  for mode in kill off; do
    "$E" testbed up --io af-xdp "--run-args=--seccomp $mode" >/dev/null 2>&1
    pid=$(cat /run/espgw-testbed/gw1.pid)
    grep -q "^Seccomp:.2" /proc/$pid/status && f=on || f=off
    t0=$(awk '{print $14+$15}' /proc/$pid/stat)
    ip netns exec espgw-h2 "$E" testbed udp-recv --port 9300 --seconds $((SECONDS_PER + 2)) >/tmp/seccomp-rx.json &
    sleep 0.3
    ip netns exec espgw-h1 "$E" testbed udp-send --dst 203.0.113.2:9300 --size 64 --seconds "$SECONDS_PER" >/dev/null
    wait
    t1=$(awk '{print $14+$15}' /proc/$pid/stat)
    n=$(sed 's/.*"packets":\([0-9]*\).*/\1/' /tmp/seccomp-rx.json)
    awk -v r="$r" -v m="$mode" -v f="$f" -v n="$n" -v s="$SECONDS_PER" -v t=$((t1 - t0)) -v hz="$hz" \
      'BEGIN { printf "round %d seccomp=%-4s (filter %s): %8.0f pps received, gw1 %6.0f ns CPU/packet\n", r, m, f, n / s, (n ? t / hz * 1e9 / n : 0) }'
    "$E" testbed down >/dev/null 2>&1
  done
done
