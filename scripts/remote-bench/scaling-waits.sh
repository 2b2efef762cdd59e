#!/bin/bash
# Issue 15 on the 16-core host, third run: where one SA over N workers loses its time.
# In memory: the build before the waits were measured (espgw-lab-A, if bundled) and this one
# alternated, 1/2/4/8 workers, one SA ordered (this build prints the share of the workers'
# time spent waiting at each turnstile), eight SAs by hash, and N independent one-worker
# processes on the same CPUs as the host's own ceiling. Live: the ordered spread at 2 and 4
# workers, its waits from the gateways' `show stats`.
# Knobs (environment): ROUNDS, SECS, LIVE (0 to skip the live part).
set -u
LOG=log3.txt
source "$(dirname "$0")/common.sh"
ROUNDS=${ROUNDS:-3}; SECS=${SECS:-0.4}; LIVE=${LIVE:-1}
A=$PWD/.devbundle/bin/espgw-lab-A
step host; host_facts
ulimit -l unlimited
mem() { # binary, then arguments
  local b=$1; shift
  timeout 60 $b bench dataplane --pin --algs aes-128-gcm --seconds $SECS "$@" | grep -E '^aes|^algorithm|^waiting'
}
for r in $(seq 1 $ROUNDS); do
  step "round $r: in memory, one SA ordered, this build"
  mem $L --workers 1,2,4,8 --sas 1 --sizes 64
  if [ -x "$A" ]; then
    step "round $r: in memory, one SA ordered, the build before (A)"
    mem $A --workers 1,2,4,8 --sas 1 --sizes 64
  fi
  step "round $r: in memory, 8 SAs by hash, this build"
  mem $L --workers 1,2,4,8 --sas 8 --spread hash --sizes 64
  step "round $r: the host's ceiling"
  for d in outbound inbound; do procs 1 $d; procs 8 $d; done
done
step "in memory, one SA ordered, 1420 B and IMIX, this build"
mem $L --workers 1,2,4,8 --sas 1 --sizes 1420,imix
if [ "$LIVE" = 1 ]; then
  live() { # name, then arguments
    local n=$1; shift
    step "live $n: $*"
    timeout 100 $L bench rfc2544 --quick --tests throughput --no-ceiling --out $R/$n "$@" 2>&1 \
      | grep -E '^\| [0-9]|^\| frame|^espgw [0-9a-z]+ gw|interrupted|rror|panic'
  }
  Q="--sizes 64 --threads 4 --flows 16 --tester-cpus 8-15"
  live ceiling --dut ceiling $Q
  live hash-w1 --dut espgw $Q --workers 1 --fanout hash
  live ordered-w2 --dut espgw $Q --workers 2 --fanout ordered
  live ordered-w4 --dut espgw $Q --workers 4 --fanout ordered
  live always-w4 --dut espgw $Q --workers 4 --fanout ordered --espgw-args=--ordered-join=always
fi
step done
tar -czf "$OUT/results3.tgz" -C $R . 2>/dev/null; ls -la "$OUT"
