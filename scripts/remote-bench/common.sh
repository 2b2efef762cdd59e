# Sourced by the scaling scripts beside it, on the many-core measurement host, from a bundle
# (../shared/remote-bench/README.md):
#   bash ../shared/remote-bench/bundle.sh; strip -o .devbundle/bin/espgw-lab target/release/espgw-lab
#   cp scripts/remote-bench/*.sh .devbundle/; there: bash .devbundle/SCRIPT.sh (results under $OUT)
# Not on a development machine: the bundle's env.sh links its ip/ethtool/ping into /usr/sbin.
# Gives: $L the lab binary, $R a scratch folder for the reports, everything printed also
# going to $OUT/$LOG as it is written, step() to mark each step, host_facts() for the log,
# procs() for N one-worker processes at once, live_step() for one quick RFC 2544 throughput run.
cd "$(dirname "${BASH_SOURCE[0]}")/.."
source .devbundle/env.sh
L=$PWD/.devbundle/bin/espgw-lab
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
R=/tmp/espgw-r; rm -rf "$R"; mkdir -p "$R"
exec > >(tee -a "$OUT/$LOG") 2>&1
step() { echo; echo "=== $(date -u +%T) $*"; }
# Which CPUs share a core or a socket, and where interrupts land: the two things that could
# explain why pinning from CPU 1 up was slower on 2026-11-25 (docs/performance.md).
host_facts() {
  nproc; uname -r; grep -m1 'model name' /proc/cpuinfo; free -g | head -2
  lscpu -e 2>/dev/null || grep . /sys/devices/system/cpu/cpu*/topology/thread_siblings_list
  echo "interrupts per CPU:"
  awk 'NR > 1 {for (i = 2; i <= NF && $i ~ /^[0-9]+$/; i++) n[i-2] += $i}
       END {for (c in n) printf "cpu%d %d\n", c, n[c]}' /proc/interrupts | sort -V
}
# N one-worker processes at once, process i on CPU i, 64 B in direction DIR, $SECS each:
# prints the sum of their rates and each one's (the host's own ceiling for N workers).
procs() { # n, direction
  local n=$1 d=$2 i pids=()
  for i in $(seq 0 $((n - 1))); do
    taskset -c $i timeout 60 $L bench dataplane --workers 1 --sas 1 --pin --sizes 64 --algs aes-128-gcm \
      --seconds $SECS --directions $d | awk '/^aes/ {print $7}' > $R/p$i &
    pids+=($!)
  done
  # These processes only: a bare `wait` would also wait for the log's tee (above).
  wait "${pids[@]}"
  echo "$n independent processes, 64 B $d: $(cat $R/p* | awk '{s += $1} END {printf "%.2f", s}') Mpps (each: $(cat $R/p* | paste -sd' '))"
  rm -f $R/p*
}
# One quick RFC 2544 throughput search (`bench rfc2544 --quick --tests throughput --no-ceiling`
# and the arguments), within SECONDS: its whole output in $R/NAME.txt, its report in $R/NAME,
# the tables, ratios and gateways' lines in the log.
live_step() { # name, seconds allowed, then arguments
  local n=$1 s=$2; shift 2
  step "live $n: $*"
  timeout $s $L bench rfc2544 --quick --tests throughput --no-ceiling --out $R/$n "$@" > $R/$n.txt 2>&1
  echo "rc=$?"
  grep -E '^\| [0-9]|^\| frame|^espgw [0-9a-z]+ gw|[0-9]x|ratio|interrupted|rror|panic' $R/$n.txt
}
