//! The AF_XDP port (and so its C shim over libxdp) on a real veth pair in a namespace of
//! its own, against an AF_PACKET socket on the other end: frames out through the transmit
//! and completion rings, frames in through the fill and receive rings, byte for byte.
//! Needs root; `scripts/asan-shims.sh` runs it with the shim built under AddressSanitizer.
#![cfg(espgw_af_xdp)]

use std::process::Command;
use std::time::{Duration, Instant};

use espgw_core::packet::{Packet, PacketPool};
use espgw_io::af_packet::AfPacketPort;
use espgw_io::af_xdp::{AfXdpPort, XdpMode};
use espgw_io::Port;

fn ip(args: &[&str]) -> bool {
    Command::new("ip")
        .args(args)
        .status()
        .map(|s| s.success())
        .unwrap_or(false)
}

/// A test frame: broadcast, a local experimental EtherType, its index in the payload.
fn frame(i: u32, len: usize) -> Vec<u8> {
    let mut f = vec![0xffu8; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x77, 0x88, 0xb5]);
    f.extend_from_slice(&i.to_be_bytes());
    f.extend((f.len()..len).map(|k| (k as u32 ^ i) as u8));
    f
}

/// Sends `frames` from `tx` and collects what `rx` receives of them, for at most 5 s.
fn exchange(tx: &mut dyn Port, rx: &mut dyn Port, frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut pool = PacketPool::new(256);
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    for chunk in frames.chunks(32) {
        let mut out: Vec<Packet> = chunk
            .iter()
            .map(|f| {
                let mut p = pool.get();
                p.load(f).unwrap();
                p
            })
            .collect();
        tx.tx_burst(&mut out, &mut pool).unwrap();
        let mut inb = Vec::new();
        rx.rx_burst(&mut pool, &mut inb, 64).unwrap();
        for p in inb.drain(..) {
            got.push(p.data().to_vec());
            pool.put(p);
        }
    }
    while got.len() < frames.len() && Instant::now() < deadline {
        let mut none = Vec::new();
        tx.tx_burst(&mut none, &mut pool).unwrap(); // reclaims completions, kicks
        let mut inb = Vec::new();
        if rx.rx_burst(&mut pool, &mut inb, 64).unwrap() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        for p in inb.drain(..) {
            got.push(p.data().to_vec());
            pool.put(p);
        }
    }
    // Only our frames (the kernel may send its own, e.g. IPv6 router solicitations).
    got.retain(|f| f.len() >= 14 && f[12..14] == [0x88, 0xb5]);
    got
}

#[test]
fn frames_cross_a_veth_both_ways_byte_for_byte() {
    if espgw_io::process::effective_uid() != 0 {
        eprintln!("skipped: needs root (CI runs it as root)");
        return;
    }
    let ns = format!("xsktest-{}", std::process::id());
    assert!(ip(&["netns", "add", &ns]));
    let ok = ip(&[
        "-n", &ns, "link", "add", "xa", "type", "veth", "peer", "name", "xb",
    ]) && ip(&["-n", &ns, "link", "set", "xa", "up"])
        && ip(&["-n", &ns, "link", "set", "xb", "up"]);
    let ns2 = ns.clone();
    let result = std::thread::spawn(move || {
        assert!(ok, "veth pair in {ns2}");
        espgw_io::netns::enter(&ns2).unwrap();
        let mut xdp = AfXdpPort::open("xa", 0, XdpMode::Copy, 512).unwrap();
        let mut raw = AfPacketPort::open("xb", 512, None).unwrap();
        // 3 x the transmit half of the UMEM: completions must be reclaimed to go on.
        let out: Vec<Vec<u8>> = (0..768)
            .map(|i| frame(i, 60 + (i as usize * 7) % 1400))
            .collect();
        let got = exchange(&mut xdp, &mut raw, &out);
        assert_eq!(got, out, "AF_XDP -> veth");
        let back: Vec<Vec<u8>> = (0..768)
            .map(|i| frame(i, 1514 - (i as usize % 1400)))
            .collect();
        let got = exchange(&mut raw, &mut xdp, &back);
        assert_eq!(got, back, "veth -> AF_XDP");
        let st = xdp.stats();
        assert_eq!(st.tx_dropped, 0, "{st:?}");
    })
    .join();
    ip(&["netns", "del", &ns]);
    if let Err(e) = result {
        std::panic::resume_unwind(e);
    }
}
