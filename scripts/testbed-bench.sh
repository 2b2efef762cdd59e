#!/usr/bin/env bash
# Throughput and latency through the test bed (as root): the espgw pair on AF_XDP and on
# AF_PACKET (one worker per gateway) against plain kernel forwarding through the same
# namespaces (the test bed's ceiling). A benchmark, not a test: it prints a Markdown table.
#   scripts/testbed-bench.sh [ROUNDS] [SECONDS]
# Each round runs every DUT once, interleaved, so machine noise hits all alike.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-2}
secs=${2:-3}
B=${ESPGW_LAB:-target/release/espgw-lab}
[ -x "$B" ] || cargo build --release -q -p espgw -p espgw-lab
nsx() { local n=$1; shift; ip netns exec "espgw-$n" "$@"; }

udp() { # frame-bytes [rate-pps] -> "sent_pps recv_pps loss%"
  local frame=$1 rate=${2:-0} payload=$(( $1 - 18 - 20 - 8 ))
  nsx h2 "$B" testbed udp-recv --port 9300 --seconds $((secs + 2)) > /tmp/espgw-bench-rx.json &
  local rx=$!
  sleep 0.3
  local sent
  sent=$(nsx h1 "$B" testbed udp-send --dst 203.0.113.2:9300 --size "$payload" --seconds "$secs" --rate "$rate" \
    | /usr/bin/python3 -c 'import json,sys; print(json.load(sys.stdin)["sent"])')
  wait $rx
  /usr/bin/python3 - "$sent" "$secs" <<'PY'
import json, sys
sent, secs = int(sys.argv[1]), float(sys.argv[2])
r = json.load(open("/tmp/espgw-bench-rx.json"))
print(f"{sent / secs:.0f} {r['packets'] / secs:.0f} {100 * (sent - r['packets']) / max(sent, 1):.2f}")
PY
}

zero_loss() { # frame-bytes rates... -> the highest offered rate (pps) forwarded with <= 0.1% loss
  local frame=$1 best=0; shift
  for rate in "$@"; do
    read -r s r l < <(udp "$frame" "$rate")
    if /usr/bin/python3 -c "import sys; sys.exit(0 if float('$l') <= 0.1 else 1)"; then best=$r; else break; fi
  done
  echo "$best"
}

tcp() { # -> Mbit/s
  nsx h2 iperf3 -s -1 -p 5301 >/dev/null 2>&1 &
  local srv=$!
  sleep 0.3
  nsx h1 iperf3 -c 203.0.113.2 -p 5301 -t "$secs" -J \
    | /usr/bin/python3 -c 'import json,sys; print(round(json.load(sys.stdin)["end"]["sum_received"]["bits_per_second"]/1e6))'
  wait $srv || true
}

rtt() { # -> "avg max" in ms over 50 pings of 64 bytes
  nsx h1 ping -c 50 -i 0.02 -q 203.0.113.2 | awk -F'[/ ]' '/^rtt/ {print $8, $9}'
}

echo "| round | DUT | 64 B: max received pps (loss at full blast) | 64 B: highest rate with <= 0.1% loss | 1400 B: max received pps (loss) | 1400 B: highest rate with <= 0.1% loss | TCP Mbit/s | ping avg / max ms |"
echo "|---|---|---|---|---|---|---|---|"
for r in $(seq 1 "$rounds"); do
  for dut in kernel af-xdp af-packet; do
    if [ "$dut" = kernel ]; then "$B" testbed up --dut kernel; else "$B" testbed up --io "$dut"; fi
    # Warm up: neighbours resolved, caches hot.
    nsx h1 ping -c 3 -i 0.1 -q 203.0.113.2 >/dev/null
    read -r s64 r64 l64 < <(udp 64)
    read -r s1400 r1400 l1400 < <(udp 1400)
    z64=$(zero_loss 64 20000 40000 60000 80000 100000 120000 140000)
    z1400=$(zero_loss 1400 20000 40000 60000 80000 100000 120000)
    t=$(tcp)
    read -r avg max < <(rtt)
    echo "| $r | $dut | $r64 ($l64%) | $z64 | $r1400 ($l1400%) | $z1400 | $t | $avg / $max |"
    "$B" testbed down
  done
done
