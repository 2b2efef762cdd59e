//! Any byte sequence as a frame on the unprotected side: parsed, classified, looked up,
//! replay-checked and (mostly) refused, never a panic.
#![no_main]
use espgw_core::packet::Packet;
use espgw_core::{Direction, Pipeline};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut pipe = Pipeline::new(espgw_fuzz::tables());
    // Several frames per input: split on a marker so bursts mix good and bad.
    let mut pkts: Vec<Packet> = data
        .split(|&b| b == 0xa5)
        .take(8)
        .filter_map(|f| {
            let mut p = Packet::new();
            p.load(f).ok().map(|_| p)
        })
        .collect();
    pipe.process(Direction::In, &mut pkts);
    let _ = pipe.counters.total_drops();
});
