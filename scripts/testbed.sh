#!/usr/bin/env bash
# The README's main command (as root, Debian 12 with Rust): installs what building espgw
# and its test bed need, builds espgw, and runs the test bed twice: with the built-in
# default configuration (two gateways, static AES-128-GCM SAs), then with IKEv2 (charon and
# the kernel-espgw plugin beside each gateway negotiate the SAs; the packages and the
# plugin's build come on first use). Each run sends traffic through, checks the transport
# link and removes everything at the end. Arguments go to one `espgw-lab testbed` instead.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh --run
echo "== building espgw and espgw-lab (cargo build --release)"
cargo build --release -q -p espgw -p espgw-lab
lab="${CARGO_TARGET_DIR:-target}/release/espgw-lab"
if [ $# -gt 0 ]; then
  exec "$lab" testbed "$@"
fi
echo "== static keys (the built-in configuration)"
"$lab" testbed
echo "== IKEv2 through strongSwan's charon (espgw-lab testbed demo --keying ike)"
"$lab" testbed demo --keying ike
