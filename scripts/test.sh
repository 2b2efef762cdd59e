#!/usr/bin/env bash
# Every test of espgw: formatting, lints, Rust unit/property/known-answer tests, the
# interop suites against scapy and tshark, the live gateway in network namespaces (root),
# the demos, a benchmark smoke run, and fuzzing.
# Installs its Debian packages first (as root). ESPGW_FUZZ_SECONDS sets the time per fuzz
# target (default 20; 0 skips fuzzing).
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -q -- -D warnings
echo "== build"
cargo build --release -q
echo "== Rust tests"
cargo test --workspace -q
echo "== interop: scapy and tshark"
ESPGW_BIN=target/release/espgw /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/interop
echo "== live gateway in network namespaces (as root)"
ESPGW_BIN=target/release/espgw /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/live
echo "== demo: offline (captures) and the live test bed (the README's main command)"
target/release/espgw demo --out target/demo | tail -1
target/release/espgw testbed
echo "== benchmark smoke run"
target/release/espgw bench dataplane --quick --sizes 64 --algs aes-128-gcm
target/release/espgw bench spd --quick
secs=${ESPGW_FUZZ_SECONDS:-20}
if [ "$secs" != 0 ]; then
  echo "== fuzz (${secs}s per target)"
  scripts/fuzz.sh "$secs"
fi
echo "all tests passed"
