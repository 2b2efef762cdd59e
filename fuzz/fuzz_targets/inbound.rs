//! Any byte sequence as frames on the unprotected side, through the gateway's whole
//! packet path: parsed, classified, looked up, replay-checked and (mostly) refused, never
//! a panic.
#![no_main]
use std::sync::Arc;
use std::time::Instant;

use espgw_core::{Node, Transmit};
use libfuzzer_sys::fuzz_target;

/// The fuzz configuration's unprotected port ("north").
const NORTH: u16 = 1;

fuzz_target!(|data: &[u8]| {
    let mut node = Node::new(espgw_fuzz::tables(), Arc::default(), Vec::new());
    let mut tx = Transmit::new(2, 32);
    // Several frames per input: split on a marker so bursts mix good and bad.
    let mut frames = Vec::new();
    for f in data.split(|&b| b == 0xa5).take(8) {
        let mut p = node.pool().get();
        match p.load(f) {
            Ok(()) => frames.push(p),
            Err(_) => node.pool().put(p),
        }
    }
    node.receive(NORTH, &mut frames, Instant::now(), &mut tx);
});
