//! Any byte sequence as a frame on the protected side.
#![no_main]
use espgw_core::packet::Packet;
use espgw_core::{Direction, Pipeline};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let mut pipe = Pipeline::new(espgw_fuzz::tables());
    let mut p = Packet::new();
    if p.load(data).is_ok() {
        let mut pkts = vec![p];
        pipe.process(Direction::Out, &mut pkts);
    }
});
