//! Any byte sequence as frames on the unprotected side, through the gateway's whole
//! packet path: parsed, classified, looked up, replay-checked and (mostly) refused, never
//! a panic. Input: a control byte, then frames separated by 0xa5 ([`espgw_fuzz::frames`]:
//! bit i of the control byte makes frame i's checksums right, so that mutations reach
//! what lies behind the IPv4 header's checksum).
#![no_main]
use std::sync::Arc;
use std::time::Instant;

use espgw_core::{Node, Transmit};
use libfuzzer_sys::fuzz_target;

/// The fuzz configuration's unprotected port ("north").
const NORTH: u16 = 1;

fuzz_target!(|data: &[u8]| {
    let mut node = Node::with_buffers(
        espgw_fuzz::tables(),
        Arc::default(),
        Vec::new(),
        espgw_fuzz::NODE_BUFFERS,
    );
    let mut tx = Transmit::new(2, 32);
    // Several frames per input, so that bursts mix good and bad.
    let mut frames = Vec::new();
    for f in espgw_fuzz::frames(data, 8) {
        let mut p = node.pool().get();
        match p.load(&f) {
            Ok(()) => frames.push(p),
            Err(_) => node.pool().put(p),
        }
    }
    node.receive(NORTH, &mut frames, Instant::now(), &mut tx);
});
