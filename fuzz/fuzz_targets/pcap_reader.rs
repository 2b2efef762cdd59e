//! Any bytes as a capture file: the offline gateway's reader yields packets or an error
//! (a truncated or oversized record is one), never a panic or an allocation larger than
//! its record limit.
#![no_main]
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Ok(mut r) = espgw_io::pcap::PcapReader::new(data, "fuzz".into()) {
        let mut p = espgw_core::packet::Packet::new();
        // Bounded: the input is at most a few KiB, so are its records.
        for _ in 0..4096 {
            match r.next_packet(&mut p) {
                Ok(true) => {}
                Ok(false) | Err(_) => break,
            }
        }
    }
});
