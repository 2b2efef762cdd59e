#!/bin/sh
# The C shims under AddressSanitizer: ipsec_mb_shim.c through espgw-crypto's tests (the
# known-answer and round-trip tests of every suite the shim serves), xsk_shim.c through
# espgw-io's AF_XDP-on-veth test (fill, receive, transmit and completion rings; needs root).
# Any out-of-bounds access, use after free or leak in the shims fails the run.
set -eu
cd "$(dirname "$0")/.."
export ESPGW_SANITIZE=address
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$PWD/target}/asan"
# The runtime is loaded as a dependency of the test binary, not first: say that is meant.
# Use-after-return detection on, as newer runtimes and the fuzz builds have it: the C must
# be built to keep its locals off the fake stack (see `sanitize` in build-support/probe.rs).
export ASAN_OPTIONS="detect_leaks=1:abort_on_error=1:halt_on_error=1:verify_asan_link_order=0:detect_stack_use_after_return=1"
cargo test --release -p espgw-crypto
cargo test --release -p espgw-io --test af_xdp_veth
# Proof that the sanitizer was in: the shims' objects call its checks.
for lib in libespgw_ipsec_mb_shim.a libespgw_xsk_shim.a; do
    f=$(find "$CARGO_TARGET_DIR/release/build" -name "$lib" | head -n 1)
    if [ -z "$f" ] || ! nm "$f" | grep -q __asan_report; then
        echo "asan-shims: $lib was not built with AddressSanitizer" >&2
        exit 1
    fi
done
echo "asan-shims: both C shims passed their tests under AddressSanitizer"
