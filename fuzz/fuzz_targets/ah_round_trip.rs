//! AH over hostile packets: the fuzzer chooses a whole IP packet (options, extension
//! headers, any payload, ESP inside or not). Whatever outbound AH (SPI 0x600, transport)
//! accepts is fed to the inbound side, which shares the key: it may drop the packet for its
//! contents (policy, malformed inner headers, ESP inside that fails its own check) but the
//! inbound AH SA never counts it as `auth_failed`, since both ends must zero the same
//! mutable fields. With one bit of the last byte flipped
//! (payload, or the ICV when there is none) nothing may come through. The inbound SA has
//! anti-replay off, so every run may reuse sequence number 1.
#![no_main]
use espgw_core::ah;
use espgw_core::packet::Packet;
use espgw_core::{Direction, DropReason, Pipeline};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Some((&flip, ip)) = data.split_first() else {
        return;
    };
    let tables = espgw_fuzz::tables();
    let Some(out_idx) = tables
        .sas
        .iter()
        .position(|s| s.direction == Direction::Out && s.spi == 0x600)
    else {
        return;
    };
    let sa = &tables.sas[out_idx];
    let Some(key) = sa.ah_key() else { return };
    let Some(in_sa) = tables
        .sas
        .iter()
        .find(|s| s.direction == Direction::In && s.spi == 0x600)
    else {
        return;
    };
    let mut p = Packet::new();
    if p.load(ip).is_err() {
        return;
    }
    let mut scratch = Vec::new();
    if ah::protect(&mut p, sa, key, 1, &mut scratch).is_err() {
        return;
    }
    let sealed = p.data().to_vec();
    let v4 = sealed.first().is_some_and(|b| b >> 4 == 4);
    let mut frame = vec![0u8; 12];
    frame.extend_from_slice(if v4 { &[0x08, 0x00] } else { &[0x86, 0xdd] });
    frame.extend_from_slice(&sealed);
    let run = |frame: &[u8]| {
        let mut p = Packet::new();
        if p.load(frame).is_err() {
            return None;
        }
        let before = in_sa.state.counters.dropped(DropReason::AuthFailed);
        let mut pipe = Pipeline::new(tables.clone());
        let mut pkts = vec![p];
        pipe.process(Direction::In, &mut pkts);
        let failed = in_sa.state.counters.dropped(DropReason::AuthFailed) - before;
        let c = &pipe.counters;
        Some((failed, c.decrypted + c.tx_packets))
    };
    if let Some((failed, _)) = run(&frame) {
        assert_eq!(failed, 0, "AH that espgw sent failed its own check");
    }
    let mut bad = frame.clone();
    if let Some(last) = bad.last_mut() {
        *last ^= 1 << (flip % 8);
    }
    if let Some((_, passed)) = run(&bad) {
        assert_eq!(passed, 0, "a tampered AH packet came through");
    }
});
