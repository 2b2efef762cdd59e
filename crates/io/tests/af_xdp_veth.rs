//! The AF_XDP port (and so its C shim over libxdp) on a real veth pair in a namespace of
//! its own, against an AF_PACKET socket on the other end: frames out through the transmit
//! and completion rings, frames in through the fill and receive rings, byte for byte.
//! Needs root; `scripts/asan-shims.sh` runs it with the shim built under AddressSanitizer.
#![cfg(espgw_af_xdp)]

use std::process::Command;
use std::time::{Duration, Instant};

mod veth_ns;
use veth_ns::in_veth_namespace;

use espgw_core::packet::{Packet, PacketPool};
use espgw_io::af_packet::AfPacketPort;
use espgw_io::af_xdp::{AfXdpPort, XdpMode};
use espgw_io::Port;

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
    in_veth_namespace("xsktest", &[], |_| {
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
    });
}

/// The interface's MAC address, from `ip -j`.
fn mac_of(ns: &str, dev: &str) -> [u8; 6] {
    let out = Command::new("ip")
        .args(["-n", ns, "-j", "link", "show", dev])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    let at = text.find("\"address\":\"").unwrap() + 11;
    let mut mac = [0u8; 6];
    for (i, b) in text[at..at + 17].split(':').enumerate() {
        mac[i] = u8::from_str_radix(b, 16).unwrap();
    }
    mac
}

/// An Ethernet frame to `dst_mac` carrying an IPv4 (or, with `v6`, IPv6) packet from the
/// test's peer address to 192.0.2.1 (2001:db8::1) of protocol `proto` and `l4` bytes.
fn ip_frame(dst_mac: [u8; 6], v6: bool, proto: u8, l4: &[u8]) -> Vec<u8> {
    use espgw_wire::{checksum, ipv6, udp};
    let mut f = dst_mac.to_vec();
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 0x77]);
    if v6 {
        let (src, dst): (std::net::Ipv6Addr, std::net::Ipv6Addr) = (
            "2001:db8::2".parse().unwrap(),
            "2001:db8::1".parse().unwrap(),
        );
        f.extend_from_slice(&[0x86, 0xdd, 0x60, 0, 0, 0]);
        f.extend_from_slice(&(l4.len() as u16).to_be_bytes());
        f.extend_from_slice(&[proto, 64]);
        f.extend_from_slice(&src.octets());
        f.extend_from_slice(&dst.octets());
        let at = f.len();
        f.extend_from_slice(l4);
        if proto == 17 {
            f[at + 6..at + 8].copy_from_slice(&[0, 0]);
            udp::fill_checksum(
                &mut f[at..],
                ipv6::pseudo_header_sum(src, dst, 17, l4.len()),
            );
        }
    } else {
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0]);
        f.extend_from_slice(&((20 + l4.len()) as u16).to_be_bytes());
        f.extend_from_slice(&[0, 1, 0x40, 0, 64, proto, 0, 0, 192, 0, 2, 2, 192, 0, 2, 1]);
        let c = checksum::checksum(&f[14..34]);
        f[24..26].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(l4);
    }
    f
}

/// A UDP datagram (checksum left zero: IPv4 allows it; IPv6 frames get theirs filled).
fn udp(dport: u16, payload: &[u8]) -> Vec<u8> {
    let mut u = 40500u16.to_be_bytes().to_vec();
    u.extend_from_slice(&dport.to_be_bytes());
    u.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    u.extend_from_slice(&[0, 0]);
    u.extend_from_slice(payload);
    u
}

/// espgw's XDP program hands IKE to the kernel (where charon listens) and everything else
/// to the socket: UDP 500, and UDP 4500 with the non-ESP marker or a NAT keepalive, reach
/// kernel sockets; ESP, ESP in UDP 4500 and other UDP reach the AF_XDP socket.
#[test]
fn ike_goes_to_the_kernel_and_esp_to_the_socket() {
    let addresses: &[&[&str]] = &[
        &["addr", "add", "192.0.2.1/24", "dev", "xa"],
        &["addr", "add", "2001:db8::1/64", "dev", "xa", "nodad"],
    ];
    in_veth_namespace("xskike", addresses, |ns| {
        let mac = mac_of(ns, "xa");
        let sock = |addr: &str| {
            let s = std::net::UdpSocket::bind(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_millis(300)))
                .unwrap();
            s
        };
        let (ike4, natt4) = (sock("192.0.2.1:500"), sock("192.0.2.1:4500"));
        let (ike6, natt6) = (sock("[2001:db8::1]:500"), sock("[2001:db8::1]:4500"));
        let mut xdp = AfXdpPort::open("xa", 0, XdpMode::Copy, 512).unwrap();
        let mut raw = AfPacketPort::open("xb", 512, None).unwrap();
        let esp_payload = [0, 0, 0x10, 0x01, 0, 0, 0, 1, 0xaa, 0xbb, 0xcc, 0xdd];
        let mut marker = vec![0u8; 4];
        marker.extend_from_slice(b"ike-4500");
        let to_kernel = [
            (
                ip_frame(mac, false, 17, &udp(500, b"ike-500")),
                &ike4,
                b"ike-500".to_vec(),
            ),
            (
                ip_frame(mac, false, 17, &udp(4500, &marker)),
                &natt4,
                marker.clone(),
            ),
            (
                ip_frame(mac, false, 17, &udp(4500, &[0xff])),
                &natt4,
                vec![0xff],
            ),
            (
                ip_frame(mac, true, 17, &udp(500, b"ike-500")),
                &ike6,
                b"ike-500".to_vec(),
            ),
            (
                ip_frame(mac, true, 17, &udp(4500, &marker)),
                &natt6,
                marker.clone(),
            ),
        ];
        let to_socket = [
            ip_frame(mac, false, 50, &esp_payload),
            ip_frame(mac, false, 17, &udp(4500, &esp_payload)),
            ip_frame(mac, false, 17, &udp(9, b"not ike")),
            ip_frame(mac, true, 50, &esp_payload),
            ip_frame(mac, true, 17, &udp(4500, &esp_payload)),
        ];
        let mut pool = PacketPool::new(64);
        for (f, s, want) in &to_kernel {
            let mut out = vec![pool.get()];
            out[0].load(f).unwrap();
            raw.tx_burst(&mut out, &mut pool).unwrap();
            let mut buf = [0u8; 64];
            let n = s.recv(&mut buf).unwrap_or(0);
            assert_eq!(&buf[..n], &want[..], "kernel socket {:?}", s.local_addr());
        }
        let mut out: Vec<Packet> = to_socket
            .iter()
            .map(|f| {
                let mut p = pool.get();
                p.load(f).unwrap();
                p
            })
            .collect();
        raw.tx_burst(&mut out, &mut pool).unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(5);
        while got.len() < to_socket.len() && Instant::now() < deadline {
            let mut inb = Vec::new();
            if xdp.rx_burst(&mut pool, &mut inb, 64).unwrap() == 0 {
                std::thread::sleep(Duration::from_millis(1));
            }
            for p in inb.drain(..) {
                got.push(p.data().to_vec());
                pool.put(p);
            }
        }
        // Only the test's frames (the kernel sends its own, e.g. neighbour solicitations).
        got.retain(|f| f.get(6..12) == Some(&[0x02, 0, 0, 0, 0, 0x77][..]));
        assert_eq!(got, to_socket.to_vec(), "AF_XDP socket");
    });
}

/// `frame` with an 802.1Q or 802.1ad tag (`tpid`, `tci`) after the MAC addresses.
fn tagged(frame: &[u8], tpid: u16, tci: u16) -> Vec<u8> {
    let mut f = frame[..12].to_vec();
    f.extend_from_slice(&tpid.to_be_bytes());
    f.extend_from_slice(&tci.to_be_bytes());
    f.extend_from_slice(&frame[12..]);
    f
}

/// Collects, for at most 2 s or until `want` arrived, what `port` receives of the test's
/// frames (source MAC 02:00:00:00:00:77).
fn collect(port: &mut dyn Port, pool: &mut PacketPool, want: usize) -> Vec<Vec<u8>> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(2);
    while got.len() < want && Instant::now() < deadline {
        let mut inb = Vec::new();
        if port.rx_burst(pool, &mut inb, 64).unwrap() == 0 {
            std::thread::sleep(Duration::from_millis(1));
        }
        for p in inb.drain(..) {
            got.push(p.data().to_vec());
            pool.put(p);
        }
    }
    got.retain(|f| f.get(6..12) == Some(&[0x02, 0, 0, 0, 0, 0x77][..]));
    got
}

/// espgw's XDP program hands frames tagged for a VLAN to the kernel (a VLAN sub-interface
/// of the gateway's interface, a management VLAN say, keeps receiving them) and gives the
/// socket the port's own network's: untagged and priority-tagged (VLAN ID 0) frames. An
/// AF_PACKET tap on the same interface is the witness: it sees only what reached the
/// kernel, tags put back, byte for byte.
#[test]
fn frames_of_other_vlans_go_to_the_kernel() {
    in_veth_namespace("xskvlan", &[], |ns| {
        let mac = mac_of(ns, "xa");
        let mut xdp = AfXdpPort::open("xa", 0, XdpMode::Copy, 512).unwrap();
        let mut tap = AfPacketPort::open("xa", 512, None).unwrap();
        let mut raw = AfPacketPort::open("xb", 512, None).unwrap();
        let plain = ip_frame(mac, false, 17, &udp(9, b"vlan test"));
        let to_kernel = vec![
            tagged(&plain, 0x8100, 42),
            tagged(&plain, 0x8100, 0xe000 | 4094),
            tagged(&tagged(&plain, 0x8100, 42), 0x88a8, 7),
        ];
        let to_socket = vec![tagged(&plain, 0x8100, 0xa000), plain.clone()];
        let mut pool = PacketPool::new(64);
        let mut out: Vec<Packet> = to_kernel
            .iter()
            .chain(&to_socket)
            .map(|f| {
                let mut p = pool.get();
                p.load(f).unwrap();
                p
            })
            .collect();
        raw.tx_burst(&mut out, &mut pool).unwrap();
        assert_eq!(collect(&mut xdp, &mut pool, 2), to_socket, "AF_XDP socket");
        assert_eq!(
            collect(&mut tap, &mut pool, 3),
            to_kernel,
            "the kernel's tap"
        );
    });
}
