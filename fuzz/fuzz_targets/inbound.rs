//! Any byte sequence as frames on the unprotected side, through the gateway's whole
//! packet path: parsed, classified, looked up, replay-checked and (mostly) refused, never
//! a panic. Input: a control byte, then frames separated by 0xa5 ([`espgw_fuzz::frames`]:
//! bit i of the control byte makes frame i's checksums right, so that mutations reach
//! what lies behind the IPv4 header's checksum).
//!
//! The burst goes through the tables on each crypto back-end
//! ([`espgw_fuzz::tables_each_backend`]: aws-lc-rs, and intel-ipsec-mb with espgw's batch
//! AES-GCM and ChaCha20-Poly1305 kernels where built), and both must agree byte for byte: opening draws nothing
//! at random, so a difference is a back-end accepting, refusing or decrypting what the
//! other does not.
#![no_main]
use libfuzzer_sys::fuzz_target;

/// The fuzz configuration's unprotected port ("north").
const NORTH: u16 = 1;

fuzz_target!(|data: &[u8]| {
    // Several frames per input, so that bursts mix good and bad.
    let frames = espgw_fuzz::frames(data, 8);
    let outcomes: Vec<_> = espgw_fuzz::tables_each_backend()
        .into_iter()
        .map(|t| espgw_fuzz::run_node(t, NORTH, &frames))
        .collect();
    espgw_fuzz::assert_backends_agree(&outcomes);
});
