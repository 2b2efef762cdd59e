#!/usr/bin/env bash
# The README's main command (as root, Debian 12 with Rust): installs what building espgw
# and its test bed need, builds espgw, and runs the test bed with the built-in default
# configuration (two gateways, AES-128-GCM tunnel, traffic through, the transport link
# checked, everything removed at the end). Arguments go to `espgw-lab testbed`.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --run
echo "== building espgw and espgw-lab (cargo build --release)"
cargo build --release -q -p espgw -p espgw-lab
exec "${CARGO_TARGET_DIR:-target}/release/espgw-lab" testbed "$@"
