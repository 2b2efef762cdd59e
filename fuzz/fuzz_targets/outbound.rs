//! Any byte sequence as a frame on the protected side, through the gateway's whole
//! packet path. The input's first byte, when odd, has the frame's checksums made right
//! first, so that mutations reach what lies behind the IPv4 header's checksum.
#![no_main]
use std::sync::Arc;
use std::time::Instant;

use espgw_core::{Node, Transmit};
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
    let mut node = Node::with_buffers(
        espgw_fuzz::tables(),
        Arc::default(),
        Vec::new(),
        espgw_fuzz::NODE_BUFFERS,
    );
    let mut tx = Transmit::new(2, 32);
    let mut p = node.pool().get();
    if p.load(&frame).is_ok() {
        let mut frames = vec![p];
        node.receive(SOUTH, &mut frames, Instant::now(), &mut tx);
    }
});
