//! Any byte sequence as frames on either port of a gateway that learns its neighbours,
//! through the whole packet path (host triage, reassembly, pipeline, fragmentation, ICMP
//! errors, neighbour holds) with the clock moving on: never a panic, held packets and
//! reassembly stay bounded, every frame sent has its Ethernet header.
#![no_main]
use std::time::{Duration, Instant};

use espgw_core::node::MAX_HELD;
use espgw_core::{Node, Transmit};
use espgw_wire::ethernet::HEADER_LEN;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let (tables, cache) = espgw_fuzz::live_tables();
    let mut node = Node::with_buffers(tables, cache, Vec::new(), espgw_fuzz::NODE_BUFFERS);
    let mut tx = Transmit::new(2, 32);
    let mut now = Instant::now();
    for f in data.split(|&b| b == 0xa5).take(16) {
        // First byte: the port (bit 0), whether the frame's checksums are made right
        // (bit 1: see `fix_checksums`), and how far the clock moves before it (x 100 ms).
        let Some((&sel, frame)) = f.split_first() else {
            continue;
        };
        let mut frame = frame.to_vec();
        if sel & 2 != 0 {
            espgw_fuzz::fix_checksums(&mut frame);
        }
        now += Duration::from_millis(u64::from(sel >> 2) * 100);
        let mut p = node.pool().get();
        if p.load(&frame).is_err() {
            node.pool().put(p);
            continue;
        }
        let mut frames = vec![p];
        node.receive(u16::from(sel & 1), &mut frames, now, &mut tx);
        node.housekeeping(now, &mut tx);
        for q in 0..tx.ports() {
            for p in tx.queue(q).drain(..) {
                // Every frame the node sends starts with its Ethernet header.
                assert!(p.len() >= HEADER_LEN);
                node.pool().put(p);
            }
        }
        assert!(node.held() <= MAX_HELD);
    }
});
