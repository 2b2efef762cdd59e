#!/usr/bin/env bash
# Installs what building and testing espgw needs on Debian 12 (run as root). Idempotent:
# packages already present are left alone.
set -euo pipefail
# Build: a C toolchain (the crates' C shims, and the linker), intel-ipsec-mb (crypto), libxdp + libbpf (AF_XDP). Tests: scapy, pytest, tshark;
# the live test bed: iproute2, ethtool, ping, iperf3, procps (sysctl), util-linux (unshare);
# the RFC 2544 tester: strongSwan with kernel-libipsec (a DUT), fonts for the PNG plots,
# Chromium (renders the report in a test), jsonschema (validates its JSON).
pkgs=(gcc libc6-dev libipsec-mb-dev libxdp-dev libbpf-dev python3-scapy python3-cryptography python3-pytest tshark
  iproute2 ethtool iputils-ping iperf3 procps util-linux
  strongswan-charon strongswan-swanctl libcharon-extra-plugins fonts-dejavu-core chromium
  python3-jsonschema)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
command -v cargo >/dev/null || { echo "install-deps: cargo (Rust 1.80 or newer) is required" >&2; exit 1; }
if [ "${ESPGW_FUZZ_SECONDS:-20}" != 0 ] && ! cargo fuzz --version >/dev/null 2>&1; then
  cargo install cargo-fuzz --locked --quiet
fi
