//! Test frames: UDP, TCP or ICMP over IPv4 or IPv6 in Ethernet, checksums filled.

use espgw_wire::ethernet::{self, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use espgw_wire::ipv4::{self, Ipv4Repr};
use espgw_wire::ipv6::{self, Ipv6Repr};
use espgw_wire::{checksum, proto};

/// An Ethernet frame carrying an IPv4/IPv6 packet with a UDP, TCP or ICMP payload.
pub fn frame(v4: bool, l4: u8, payload: &[u8], host: u8, tos: u8) -> Vec<u8> {
    let (proto_no, hdr) = match l4 {
        0 => (proto::UDP, 8),
        1 => (proto::TCP, 20),
        _ => (if v4 { proto::ICMP } else { proto::ICMPV6 }, 8),
    };
    let mut l4b = vec![0u8; hdr];
    l4b[0..2].copy_from_slice(&4242u16.to_be_bytes());
    l4b[2..4].copy_from_slice(&53u16.to_be_bytes());
    if proto_no == proto::UDP {
        l4b[4..6].copy_from_slice(&((hdr + payload.len()) as u16).to_be_bytes());
    }
    if proto_no == proto::TCP {
        l4b[12] = 0x50;
    }
    l4b.extend_from_slice(payload);
    let mut f = vec![0u8; 14];
    let ip_len = if v4 { 20 } else { 40 };
    f.resize(14 + ip_len, 0);
    if v4 {
        let (s, d) = (
            std::net::Ipv4Addr::new(198, 51, 100, host),
            std::net::Ipv4Addr::new(203, 0, 113, 7),
        );
        Ipv4Repr {
            src: s,
            dst: d,
            protocol: proto_no,
            tos,
            ttl: 64,
            ident: 1,
            dont_fragment: true,
            payload_len: l4b.len(),
        }
        .emit(&mut f[14..])
        .unwrap();
        let _ = ethernet::emit(
            &mut f,
            [2, 0, 0, 0, 0, 2],
            [2, 0, 0, 0, 0, 1],
            ETHERTYPE_IPV4,
        );
        let sum = if proto_no == proto::ICMP {
            0
        } else {
            ipv4::pseudo_header_sum(s, d, proto_no, l4b.len())
        };
        fix_l4(&mut l4b, proto_no, sum);
    } else {
        let s: std::net::Ipv6Addr = format!("2001:db8:100::{host:x}").parse().unwrap();
        let d: std::net::Ipv6Addr = "2001:db8:113::7".parse().unwrap();
        Ipv6Repr {
            src: s,
            dst: d,
            next_header: proto_no,
            traffic_class: tos,
            flow_label: 7,
            hop_limit: 64,
            payload_len: l4b.len(),
        }
        .emit(&mut f[14..])
        .unwrap();
        let _ = ethernet::emit(
            &mut f,
            [2, 0, 0, 0, 0, 2],
            [2, 0, 0, 0, 0, 1],
            ETHERTYPE_IPV6,
        );
        let sum = ipv6::pseudo_header_sum(s, d, proto_no, l4b.len());
        fix_l4(&mut l4b, proto_no, sum);
    }
    f.extend_from_slice(&l4b);
    f
}

/// Recomputes the IPv4 header checksum of an Ethernet frame after a test changed it.
pub fn fix_ipv4_checksum(f: &mut [u8]) {
    f[24] = 0;
    f[25] = 0;
    let c = checksum::checksum(&f[14..34]);
    f[24..26].copy_from_slice(&c.to_be_bytes());
}

pub fn fix_l4(l4: &mut [u8], p: u8, sum: u32) {
    let at = if p == proto::TCP {
        16
    } else if p == proto::UDP {
        6
    } else {
        2
    };
    // The field is summed as zero (for ICMP it held the bytes `frame` wrote as ports).
    l4[at..at + 2].fill(0);
    let c = checksum::finish(checksum::sum(l4, sum));
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
}
