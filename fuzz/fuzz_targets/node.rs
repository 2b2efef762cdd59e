//! Any byte sequence as frames on either port of a gateway that learns its neighbours,
//! through the whole packet path (host triage, reassembly, pipeline, fragmentation, ICMP
//! errors, neighbour holds) with the clock moving on: never a panic, held packets and
//! reassembly stay bounded, every frame sent has its Ethernet header.
//!
//! The frames go through a node on each crypto back-end
//! ([`espgw_fuzz::live_tables_each_backend`]: aws-lc-rs, and intel-ipsec-mb with espgw's
//! batch AES-GCM and ChaCha20-Poly1305 kernels where built), and the nodes must agree, frame by frame, on the
//! lengths of what each port sent, on the packets held for a neighbour, and at the end on
//! every drop counter (not on the bytes: sealing with AES-CBC draws IVs at random). This is
//! the one target whose ESP arrives in fragments and is reassembled before the crypto.
#![no_main]
use std::sync::Arc;
use std::time::{Duration, Instant};

use espgw_core::neighbour::NeighbourCache;
use espgw_core::node::MAX_HELD;
use espgw_core::{Node, Tables, Transmit};
use espgw_wire::ethernet::HEADER_LEN;
use libfuzzer_sys::fuzz_target;

/// What a node did with one frame: per port the lengths of the frames it sent, and how
/// many packets it then held for an unresolved neighbour.
type Step = (Vec<Vec<usize>>, usize);

fuzz_target!(|data: &[u8]| {
    let start = Instant::now();
    let outcomes: Vec<_> = espgw_fuzz::live_tables_each_backend()
        .into_iter()
        .map(|(tables, cache)| run(tables, cache, data, start))
        .collect();
    espgw_fuzz::assert_backends_agree(&outcomes);
});

/// The input's frames through one node from `start`: each frame's step, then the drops.
fn run(
    tables: Arc<Tables>,
    cache: Arc<NeighbourCache>,
    data: &[u8],
    start: Instant,
) -> (Vec<Step>, Vec<u64>) {
    let mut node = Node::with_buffers(tables, cache, Vec::new(), espgw_fuzz::NODE_BUFFERS);
    let mut tx = Transmit::new(2, 32);
    let mut now = start;
    let mut steps = Vec::new();
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
        let mut sent = Vec::new();
        for q in 0..tx.ports() {
            let mut lens = Vec::new();
            for p in tx.queue(q).drain(..) {
                // Every frame the node sends starts with its Ethernet header.
                assert!(p.len() >= HEADER_LEN);
                lens.push(p.len());
                node.pool().put(p);
            }
            sent.push(lens);
        }
        assert!(node.held() <= MAX_HELD);
        steps.push((sent, node.held()));
    }
    (steps, node.counters().drops.to_vec())
}
