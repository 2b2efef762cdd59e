#!/bin/bash
# Issue 15 on the 16-core host, 2026-11-28: (1) one policy with a per-worker SA set (RFC 9611
# style, `--spread per-worker`) against the ordered spread of one SA and against 8 SAs by hash,
# in memory at N = 1, 2, 4, 8; (2) what holds four live workers per gateway back: the same
# one-SA, many-flow search with the tester on CPUs 8-15 (4 threads, the earlier layout, which
# leaves the gateways and the kernel's veth work CPUs 0-7 for eight workers) and on CPUs 12-15
# (2 threads, leaving them 0-11; LAYOUT_B= another layout, e.g. 4 threads on 12-15), each CPU's busy time sampled every second into $OUT/stat.raw
# and each step's start and end into $OUT/steps.txt (read afterwards by
# scripts/remote-bench/busiest-second.py). About 5 minutes. Knobs: MEM (0: no in-memory steps), MEMROUNDS, ROUNDS, ORDER (live steps of a round, layout A, B, P (A with --per-worker-sas) or W (A with --replay-window 8192, since 2026-11-29) and workers; reversed in even rounds), LAYOUT_B (not B: the bundle's env.sh sets B).
set -u
LOG=log-per-worker.txt
source "$(dirname "$0")/common.sh"
MEM=${MEM:-1}; MEMROUNDS=${MEMROUNDS:-5}; ROUNDS=${ROUNDS:-2}; ORDER=${ORDER:-"A1 A4 B1 B4"}
step host; host_facts
ulimit -l unlimited
mem() { timeout 120 $L bench dataplane --pin --algs aes-128-gcm --seconds 0.4 "$@" \
  | grep -E '^aes|^algorithm|^waiting|^median|^round|rror|panic'; }
if [ "$MEM" = 1 ]; then
step "in memory, one policy, per-worker SAs, 64 B, $MEMROUNDS rounds"
mem --sizes 64 --workers 1,2,4,8 --sas 1 --spread per-worker --rounds $MEMROUNDS
step "in memory, one SA ordered, 64 B, $MEMROUNDS rounds"
mem --sizes 64 --workers 1,2,4,8 --sas 1 --spread ordered --rounds $MEMROUNDS
step "in memory, 8 SAs by hash, 64 B, $MEMROUNDS rounds"
mem --sizes 64 --workers 1,2,4,8 --sas 8 --spread hash --rounds $MEMROUNDS
step "in memory, one policy, per-worker SAs, 1420 B, 3 rounds"
mem --sizes 1420 --workers 1,2,4,8 --sas 1 --spread per-worker --rounds 3
fi

# Every CPU's /proc/stat line once a second, with the time, for the live steps.
(while :; do echo "T $(date +%s.%N)"; grep '^cpu[0-9]' /proc/stat; sleep 1; done) > "$OUT/stat.raw" &
SAMPLER=$!
marked() { # name, seconds allowed, then live_step's arguments
  echo "$1 start $(date +%s.%N)" >> "$OUT/steps.txt"
  live_step "$@"
  echo "$1 end $(date +%s.%N)" >> "$OUT/steps.txt"
}
A="--sizes 64 --threads 4 --flows 16 --tester-cpus 8-15"
B=${LAYOUT_B:-"--sizes 64 --threads 2 --flows 16 --tester-cpus 12-15"}
[[ "$ORDER" == *A* ]] && marked ceiling-A 30 --dut ceiling $A
[[ "$ORDER" == *B* ]] && marked ceiling-B 30 --dut ceiling $B
for r in $(seq 1 $ROUNDS); do
  o=$ORDER; [ $((r % 2)) = 0 ] && o=$(echo $ORDER | tr ' ' '\n' | tac | paste -sd' ')
  for s in $o; do
    layout=${s:0:1}; w=${s:1}
    case $layout in
      A) args=$A ;;
      B) args=$B ;;
      P) args="$A --per-worker-sas" ;; # A with a per-worker SA set (since 2026-11-28, after the visit)
      W) args="$A --replay-window 8192" ;; # A with every SA's window 8x deeper (since 2026-11-29)
    esac
    marked r$r-$s 45 --dut espgw $args --workers $w --fanout hash
  done
done
kill $SAMPLER
step done
tar -czf "$OUT/results-per-worker.tgz" -C $R . 2>/dev/null; ls -la "$OUT"
