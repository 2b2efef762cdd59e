#!/bin/bash
# Issue 15 on the 16-core host, fourth visit: the live targets with this build (AF_XDP UMEM
# frames of 2 KiB, each worker its own crypto library instance), the tester on CPUs 8-15 so
# that it does not share cores with the gateways or the kernel's forwarding:
# one worker against kernel forwarding and against strongSwan kernel-libipsec (same run, trials
# interleaved), live scaling over many flows (hash) and one SA in order, one SA in memory.
# Needs the bundle made with --strongswan. Knobs (environment): SS (0 to skip strongSwan).
set -u
LOG=log4.txt
source "$(dirname "$0")/common.sh"
SS=${SS:-1}; SECS=0.4
step host; host_facts
ulimit -l unlimited
T="--tester-cpus 8-15"
step "in memory, one SA ordered, 64 B, 5 rounds (the worker counts' order alternating)"
timeout 120 $L bench dataplane --pin --algs aes-128-gcm --seconds $SECS --workers 1,2,4,8 --sas 1 --sizes 64 \
  --rounds 5 | grep -E '^aes|^algorithm|^waiting|^median'
live_step k1 200 --compare espgw,kernel --sizes 64,512,1518 --wan-mtu 1600 $T
[ "$SS" = 1 ] && live_step s1 120 --compare espgw,strongswan --sizes 64 --wan-mtu 1600 $T
Q="--sizes 64 --threads 4 --flows 16 $T"
live_step ceiling 30 --dut ceiling $Q
live_step hash-w1 45 --dut espgw $Q --workers 1 --fanout hash
live_step hash-w2 45 --dut espgw $Q --workers 2 --fanout hash
live_step hash-w4 45 --dut espgw $Q --workers 4 --fanout hash
live_step ordered-w2 45 --dut espgw $Q --workers 2 --fanout ordered
live_step ordered-w4 45 --dut espgw $Q --workers 4 --fanout ordered
live_step k2 200 --compare kernel,espgw --sizes 64,512,1518 --wan-mtu 1600 $T
step done
tar -czf "$OUT/results4.tgz" -C $R . 2>/dev/null; ls -la "$OUT"
