#!/bin/bash
# Issue 15 on the 16-core host, fourth visit, second run: more alternated rounds of one espgw
# worker against kernel forwarding, and against strongSwan kernel-libipsec at every size (one
# flow, one tester thread; then 16 flows on 4 tester threads with 4 espgw workers by hash).
# The tester on CPUs 8-15. Needs the bundle made with --strongswan. A strongSwan comparison at the
# three sizes takes up to 4 minutes (its 1518 B search is slow): the default steps (k3 s2 k4) take
# about 7; STEPS="s3 k5" runs the others, in a second call (the device's limit is 10 minutes a call).
set -u
LOG=log5.txt
source "$(dirname "$0")/common.sh"
step host; host_facts
ulimit -l unlimited
T="--sizes 64,512,1518 --wan-mtu 1600 --tester-cpus 8-15"
for s in ${STEPS:-k3 s2 k4}; do
  case $s in
    k3|k5) live_step $s 110 --compare espgw,kernel $T ;;
    k4) live_step $s 110 --compare kernel,espgw $T ;;
    s2) live_step $s 260 --compare strongswan,espgw $T ;;
    s3) live_step $s 260 --compare espgw,strongswan $T --threads 4 --flows 16 --workers 4 --fanout hash ;;
  esac
done
step done
tar -czf "$OUT/results5.tgz" -C $R . 2>/dev/null; ls -la "$OUT"
