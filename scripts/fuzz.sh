#!/usr/bin/env bash
# Runs every fuzz target for SECONDS each (default 20). For a long campaign:
#   scripts/fuzz.sh 3600            # an hour per target
#   RUSTC_BOOTSTRAP=1 cargo fuzz run inbound_authentic   # one target, until stopped
# cargo-fuzz needs nightly features; RUSTC_BOOTSTRAP=1 lets the stable toolchain build it.
set -euo pipefail
cd "$(dirname "$0")/../fuzz"
secs=${1:-20}
export RUSTC_BOOTSTRAP=1
targets=$(cargo fuzz list)
# The targets' shared helpers first (checksum fixing, the input format), and a check that
# the committed seeds (fuzz/make-seeds.py, from scapy) still pass the gateway.
cargo test -q --lib
cargo fuzz build -O
for t in $targets; do
  # regressions/<target> holds inputs that once crashed (committed): libFuzzer runs every
  # file of every corpus directory first, so an old bug coming back fails at once.
  # seeds/<target> (committed, where present) holds well-formed inputs to start from
  # (fuzz/make-seeds.py writes those of the whole-path targets).
  mkdir -p "corpus/$t" "regressions/$t"
  seeds=(); [ -d "seeds/$t" ] && seeds=("seeds/$t")
  echo "fuzz: $t for ${secs}s"
  cargo fuzz run -O "$t" "corpus/$t" "regressions/$t" "${seeds[@]}" -- -max_total_time="$secs" -rss_limit_mb=2048 -max_len=4096 2>&1 \
    | grep -E "^(#[0-9]+ +DONE|Done [0-9]+ runs|==[0-9]+==ERROR|SUMMARY)" || true
  if [ -n "$(ls -A artifacts/$t 2>/dev/null)" ]; then
    echo "fuzz: $t found a crash: fuzz/artifacts/$t" >&2
    exit 1
  fi
done
echo "fuzz: all targets ran ${secs}s without a crash"
