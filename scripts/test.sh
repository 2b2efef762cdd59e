#!/usr/bin/env bash
# Every test of espgw: formatting, lints, Rust unit/property/known-answer tests, the
# portable build (aws-lc-rs alone, no AF_XDP) and its tests, the interop suites against
# scapy and tshark, the live gateway in network namespaces (root), the Debian package
# (installed, its unit verified, the installed binary forwarding ESP without root), the
# demos, a benchmark smoke run, and fuzzing.
# Installs its Debian packages first (as root). ESPGW_FUZZ_SECONDS sets the time per fuzz
# target (default 20; 0 skips fuzzing). Honours CARGO_TARGET_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/install-deps.sh
target=${CARGO_TARGET_DIR:-target}
bin=$target/release/espgw
lab=$target/release/espgw-lab
echo "== format and lints"
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -q -- -D warnings
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps -q # no broken or private doc links
echo "== documentation: every relative Markdown link and heading anchor resolves"
/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/docs
echo "== build"
cargo build --release -q
echo "== Rust tests"
cargo test --workspace -q
echo "== the gateway binary links no lab code (plotting, histograms)"
if cargo tree -p espgw -e normal --prefix none | grep -E "^(resvg|tiny-skia|hdrhistogram|espgw-lab) "; then
  echo "espgw's dependency tree holds lab crates" >&2
  exit 1
fi
echo "== the oldest Rust the README promises (Cargo.toml's rust-version) builds every crate"
msrv=$(sed -n 's/^rust-version = "\(.*\)"$/\1/p' Cargo.toml)
[[ $msrv == *.*.* ]] || msrv=$msrv.0 # rustup names the toolchain 1.88.0, not 1.88
if command -v rustup >/dev/null; then
  rustup toolchain list | grep -q "^$msrv-" || rustup toolchain install "$msrv" --profile minimal
  CARGO_TARGET_DIR="$target/msrv" cargo "+$msrv" check --workspace --all-targets --locked -q
  echo "rustc $msrv: cargo check --workspace --all-targets passed"
else
  echo "NOT CHECKED: no rustup to fetch Rust $msrv; only $(rustc --version) was tested" >&2
fi
echo "== dependencies: licences, bans, sources (cargo deny)"
# The advisories check needs the RustSec database from GitHub, which these machines cannot
# fetch; run `cargo deny check advisories` where it can be reached.
cargo deny --log-level error check licenses bans sources
echo "== C shims under AddressSanitizer"
CARGO_TARGET_DIR=$target scripts/asan-shims.sh
echo "== portable build: aws-lc-rs alone, no AF_XDP (as on a machine without the libraries)"
portable=(env ESPGW_NO_IPSEC_MB=1 ESPGW_NO_AF_XDP=1 CARGO_TARGET_DIR="$target/portable")
"${portable[@]}" cargo clippy -q -p espgw-crypto -p espgw-io --all-targets -- -D warnings
"${portable[@]}" cargo test -q -p espgw-wire -p espgw-crypto -p espgw-core -p espgw-config
"${portable[@]}" cargo build --release -q -p espgw -p espgw-lab
# (Not `tee /dev/stderr`: where stderr is a file, tee would reopen and truncate it.)
version=$("$target/portable/release/espgw" --version)
echo "$version"
grep -qx "crypto back-ends: aws-lc-rs (auto: aws-lc-rs)" <<<"$version"
ESPGW_BIN=$target/portable/release/espgw /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/interop
echo "== interop: scapy and tshark"
ESPGW_BIN=$bin /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/interop
echo "== live gateway in network namespaces (as root)"
ESPGW_BIN=$bin /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/live
echo "== Debian package: build, install, unit, unprivileged gateway"
cargo deb -q -p espgw --strip --no-build
deb=$(ls -t "$target"/debian/espgw_*_amd64.deb | head -1)
ESPGW_DEB=$deb ESPGW_BIN=$bin /usr/bin/python3 -m pytest -q -p no:cacheprovider tests/package
echo "== demo: offline (captures) and the live test bed (the README's main command)"
"$lab" demo --out "$target/demo" | tail -1
"$lab" testbed
echo "== benchmark smoke run"
"$lab" bench dataplane --quick --sizes 64 --algs aes-128-gcm
"$lab" bench dataplane --quick --sizes 78 --algs aes-128-gcm --inner ipv6 --outer ipv6
/usr/bin/python3 scripts/check-dataplane-rounds.py "$lab"
"$lab" bench spd --quick
secs=${ESPGW_FUZZ_SECONDS:-20}
if [ "$secs" != 0 ]; then
  echo "== fuzz (${secs}s per target)"
  scripts/fuzz.sh "$secs"
fi
echo "all tests passed"
