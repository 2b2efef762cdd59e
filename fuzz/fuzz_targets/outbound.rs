//! Any byte sequence as a frame on the protected side, through the gateway's whole
//! packet path.
#![no_main]
use std::sync::Arc;
use std::time::Instant;

use espgw_core::{Node, Transmit};
use libfuzzer_sys::fuzz_target;

/// The fuzz configuration's protected port ("south").
const SOUTH: u16 = 0;

fuzz_target!(|data: &[u8]| {
    let mut node = Node::new(espgw_fuzz::tables(), Arc::default(), Vec::new());
    let mut tx = Transmit::new(2, 32);
    let mut p = node.pool().get();
    if p.load(data).is_ok() {
        let mut frames = vec![p];
        node.receive(SOUTH, &mut frames, Instant::now(), &mut tx);
    }
});
