//! Any byte sequence as a frame for the gateway's host stage (ARP, ND, ping, TTL), the
//! ESP reassembler and the ICMP error builder: never a panic, memory stays bounded.
//! Input: a control byte, then frames separated by 0xa5 ([`espgw_fuzz::frames`]).
#![no_main]
use std::time::Instant;

use espgw_core::host::{self, IcmpError, Triage};
use espgw_core::neighbour::NeighbourCache;
use espgw_core::packet::Packet;
use espgw_core::reassembly::Reassembler;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let t = espgw_fuzz::tables();
    let cache = NeighbourCache::default();
    let mut r = Reassembler::default();
    let now = Instant::now();
    for (i, f) in espgw_fuzz::frames(data, 8).into_iter().enumerate() {
        let mut p = Packet::new();
        if p.load(&f).is_err() {
            continue;
        }
        let port = (i % 2) as u16;
        p.in_port = port;
        match host::triage(&mut p, port, &t, &cache) {
            Triage::Fragment(hl) => {
                let _ = r.offer(&mut p, hl, now);
            }
            Triage::TimeExceeded(hl) => {
                let mut e = Packet::new();
                if let Some(ip) = p.data().get(hl..) {
                    let src = "192.0.2.1".parse().unwrap();
                    let _ = host::build_icmp_error(&mut e, ip, IcmpError::TimeExceeded, src);
                    let _ = host::build_icmp_error(&mut e, ip, IcmpError::TooBig(1280), src);
                }
            }
            _ => {}
        }
        if let Some(ip) = f.get(14..) {
            let mut e = Packet::new();
            let src6 = "2001:db8::1".parse().unwrap();
            let _ = host::build_icmp_error(&mut e, ip, IcmpError::TooBig(1400), src6);
        }
    }
    assert!(r.in_flight() <= espgw_core::reassembly::MAX_DATAGRAMS);
});
