#!/usr/bin/env bash
# Installs what espgw needs on Debian 12 (as root), and says what it installs. Idempotent:
# what is already present is left alone.
#   scripts/install-deps.sh          everything the tests need (scripts/test.sh)
#   scripts/install-deps.sh --run    only what building espgw and running its test bed need
#                                    (scripts/testbed.sh)
set -euo pipefail
mode=${1:-all}
# Build: a C toolchain (the crates' C shims, and the linker), intel-ipsec-mb (crypto),
# libxdp + libbpf (AF_XDP). The test bed: iproute2, ethtool, ping.
run_pkgs=(gcc libc6-dev libipsec-mb-dev libxdp-dev libbpf-dev iproute2 ethtool iputils-ping)
# Tests: scapy, pytest, tshark; the live tests: iperf3, procps (sysctl), util-linux
# (unshare, setpriv); the RFC 2544 tester: strongSwan with kernel-libipsec (a DUT) and its
# crypto plugins (openssl, gcm: only recommended by libstrongswan),
# Chromium and a font for it (renders the report in a test), jsonschema (validates its
# JSON); IKEv2 through charon: make, bzip2 and dpkg-dev (the kernel-espgw plugin is built
# against Debian's own strongSwan source), nftables (keeps ESP away from the gateway
# namespace's kernel, which sees IKE), strongswan-pki (a test CA and certificates); the package:
# dpkg-dev (dpkg-shlibdeps for its Depends), man-db and systemd (its test); DPDK's
# ipsec-secgw as an interop peer (tests/interop/test_dpdk_secgw.py builds it from dpdk-doc's
# example with libdpdk-dev and pkgconf).
test_pkgs=(python3-scapy python3-cryptography python3-pytest tshark iperf3 procps util-linux
  strongswan-charon strongswan-swanctl libcharon-extra-plugins libstrongswan-standard-plugins
  chromium fonts-dejavu-core
  python3-jsonschema
  make bzip2 nftables strongswan-pki
  dpkg-dev man-db systemd
  dpdk-doc libdpdk-dev pkgconf)
case "$mode" in
  --run) pkgs=("${run_pkgs[@]}") ;;
  all) pkgs=("${run_pkgs[@]}" "${test_pkgs[@]}") ;;
  *) echo "usage: $0 [--run]" >&2; exit 2 ;;
esac
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" -ne 0 ]; then
    echo "install-deps: need root to install: ${missing[*]}" >&2
    exit 1
  fi
  echo "install-deps: installing ${missing[*]} (apt-get)"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
# The oldest Rust the workspace builds with is Cargo.toml's rust-version (scripts/test.sh
# checks the workspace with exactly that toolchain); say so before cargo fails deep in a build.
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' "$(dirname "$0")/../Cargo.toml")
command -v cargo >/dev/null || { echo "install-deps: cargo (Rust $msrv or newer) is required" >&2; exit 1; }
have=$(rustc --version | awk '{print $2}')
if [ "$(printf '%s\n%s\n' "$msrv" "${have%%-*}" | sort -V | head -1)" != "$msrv" ]; then
  echo "install-deps: rustc $have is older than $msrv, the oldest this workspace builds with (rustup update)" >&2
  exit 1
fi
[ "$mode" = all ] || exit 0
if ! cargo deb --version >/dev/null 2>&1; then
  echo "install-deps: installing cargo-deb (cargo install)"
  cargo install cargo-deb --locked --quiet
fi
if ! cargo deny --version >/dev/null 2>&1; then
  echo "install-deps: installing cargo-deny (cargo install)"
  cargo install cargo-deny --locked --quiet
fi
if [ "${ESPGW_FUZZ_SECONDS:-20}" != 0 ] && ! cargo fuzz --version >/dev/null 2>&1; then
  echo "install-deps: installing cargo-fuzz (cargo install)"
  cargo install cargo-fuzz --locked --quiet
fi
