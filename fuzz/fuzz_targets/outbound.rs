//! Any byte sequence as a frame on the protected side, through the gateway's whole
//! packet path. The input's first byte, when odd, has the frame's checksums made right
//! first, so that mutations reach what lies behind the IPv4 header's checksum.
//!
//! The frame goes through the tables on each crypto back-end
//! ([`espgw_fuzz::tables_each_backend`]: aws-lc-rs, and intel-ipsec-mb with espgw's batch
//! AES-GCM and ChaCha20-Poly1305 kernels where built), and both must agree on the outcome's shape: frames of the
//! same lengths leave on the same ports, and the same packets are dropped for the same
//! reasons (the bytes differ: sealing draws IVs at random).
#![no_main]
use libfuzzer_sys::fuzz_target;

/// The fuzz configuration's protected port ("south").
const SOUTH: u16 = 0;

fuzz_target!(|data: &[u8]| {
    let Some((&fix, frame)) = data.split_first() else {
        return;
    };
    let mut frame = frame.to_vec();
    if fix & 1 != 0 {
        espgw_fuzz::fix_checksums(&mut frame);
    }
    let frames = [frame];
    let outcomes: Vec<_> = espgw_fuzz::tables_each_backend()
        .into_iter()
        .map(|t| espgw_fuzz::run_node(t, SOUTH, &frames))
        .collect();
    let shapes: Vec<_> = outcomes.iter().map(espgw_fuzz::Outcome::shape).collect();
    espgw_fuzz::assert_backends_agree(&shapes);
});
