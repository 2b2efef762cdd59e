//! Test traffic: Ethernet frames of exact sizes carrying UDP, TCP or ICMP over IPv4 or
//! IPv6, each with a sequence number in its payload.

use std::net::IpAddr;

use espgw_wire::ethernet::{self, MacAddr, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use espgw_wire::ipv4::{self, Ipv4Repr};
use espgw_wire::ipv6::{self, Ipv6Repr};
use espgw_wire::{checksum, proto};

use crate::py_random::Mt19937;

/// The Ethernet FCS, counted in RFC 2544 frame sizes but not in the bytes we handle.
pub const FCS_LEN: usize = 4;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum L4 {
    Udp,
    Tcp,
    Icmp,
}

#[derive(Debug, Clone)]
pub struct FlowSpec {
    pub src: IpAddr,
    pub dst: IpAddr,
    pub l4: L4,
    pub sport: u16,
    pub dport: u16,
    pub src_mac: MacAddr,
    pub dst_mac: MacAddr,
}

/// The smallest frame (FCS included) that holds this flow's headers and an 8-byte
/// sequence number.
pub fn min_frame(spec: &FlowSpec) -> usize {
    let ip = if spec.src.is_ipv4() { 20 } else { 40 };
    let l4 = match spec.l4 {
        L4::Udp | L4::Icmp => 8,
        L4::Tcp => 20,
    };
    (ethernet::HEADER_LEN + ip + l4 + 8 + FCS_LEN).max(64)
}

/// Builds one frame of `frame_size` bytes (FCS included, so the buffer is 4 bytes
/// shorter) carrying `seq`.
pub fn frame(spec: &FlowSpec, frame_size: usize, seq: u64) -> Vec<u8> {
    let size = frame_size.max(min_frame(spec)) - FCS_LEN;
    let mut f = vec![0u8; size];
    let v4 = spec.src.is_ipv4();
    let ip_len = if v4 { 20 } else { 40 };
    let l4_off = ethernet::HEADER_LEN + ip_len;
    let l4_len = size - l4_off;
    let (protocol, l4_hdr) = match (spec.l4, v4) {
        (L4::Udp, _) => (proto::UDP, 8),
        (L4::Tcp, _) => (proto::TCP, 20),
        (L4::Icmp, true) => (proto::ICMP, 8),
        (L4::Icmp, false) => (proto::ICMPV6, 8),
    };
    let _ = ethernet::emit(
        &mut f,
        spec.dst_mac,
        spec.src_mac,
        if v4 { ETHERTYPE_IPV4 } else { ETHERTYPE_IPV6 },
    );
    // Payload: the sequence number, then a byte pattern.
    let pay = l4_off + l4_hdr;
    f[pay..pay + 8].copy_from_slice(&seq.to_be_bytes());
    for (i, b) in f[pay + 8..].iter_mut().enumerate() {
        *b = i as u8;
    }
    {
        let l4 = &mut f[l4_off..];
        match spec.l4 {
            L4::Udp => {
                l4[0..2].copy_from_slice(&spec.sport.to_be_bytes());
                l4[2..4].copy_from_slice(&spec.dport.to_be_bytes());
                l4[4..6].copy_from_slice(&(l4_len as u16).to_be_bytes());
            }
            L4::Tcp => {
                l4[0..2].copy_from_slice(&spec.sport.to_be_bytes());
                l4[2..4].copy_from_slice(&spec.dport.to_be_bytes());
                l4[4..8].copy_from_slice(&(seq as u32).to_be_bytes());
                l4[12] = 5 << 4;
                l4[13] = 0x18; // PSH, ACK
                l4[14..16].copy_from_slice(&64240u16.to_be_bytes());
            }
            L4::Icmp => {
                l4[0] = if v4 { 8 } else { 128 }; // echo request
                l4[4..6].copy_from_slice(&spec.sport.to_be_bytes());
                l4[6..8].copy_from_slice(&(seq as u16).to_be_bytes());
            }
        }
    }
    let (src, dst) = (spec.src, spec.dst);
    match (src, dst) {
        (IpAddr::V4(s), IpAddr::V4(d)) => {
            let _ = Ipv4Repr {
                src: s,
                dst: d,
                protocol,
                tos: 0,
                ttl: 64,
                ident: seq as u16,
                dont_fragment: true,
                payload_len: l4_len,
            }
            .emit(&mut f[ethernet::HEADER_LEN..]);
            let pseudo = if protocol == proto::ICMP {
                0
            } else {
                ipv4::pseudo_header_sum(s, d, protocol, l4_len)
            };
            fill_l4_checksum(&mut f[l4_off..], protocol, pseudo);
        }
        (IpAddr::V6(s), IpAddr::V6(d)) => {
            let _ = Ipv6Repr {
                src: s,
                dst: d,
                next_header: protocol,
                traffic_class: 0,
                flow_label: 0,
                hop_limit: 64,
                payload_len: l4_len,
            }
            .emit(&mut f[ethernet::HEADER_LEN..]);
            fill_l4_checksum(
                &mut f[l4_off..],
                protocol,
                ipv6::pseudo_header_sum(s, d, protocol, l4_len),
            );
        }
        _ => {}
    }
    f
}

fn fill_l4_checksum(l4: &mut [u8], protocol: u8, pseudo: u32) {
    let at = match protocol {
        proto::UDP => 6,
        proto::TCP => 16,
        _ => 2,
    };
    l4[at] = 0;
    l4[at + 1] = 0;
    let mut c = checksum::finish(checksum::sum(l4, pseudo));
    if c == 0 && protocol == proto::UDP {
        c = 0xffff;
    }
    l4[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// The IPsec IMIX of the published tests: 58.67% 90 B, 2% 92 B, 23.66% 594 B, 15.67%
/// 1418 B, as a 300-frame cycle (176, 6, 71, 47 frames; within 0.01% of each share), in
/// the order ipsec-secgw's IMIX pcap has them (`../shared/bench/dpdk-secgw/gen_pcap.py`:
/// the list sorted by size, then Python's `random.Random(42).shuffle`), so that a
/// side-by-side comparison offers both gateways the same frames in the same order.
pub fn imix_sizes() -> Vec<usize> {
    let mut v = Vec::with_capacity(300);
    for (size, count) in [(90, 176), (92, 6), (594, 71), (1418, 47)] {
        v.extend(std::iter::repeat_n(size, count));
    }
    Mt19937::python_seed(IMIX_SEED).shuffle(&mut v);
    v
}

/// The seed `gen_pcap.py` shuffles its IMIX with.
const IMIX_SEED: u64 = 42;

#[cfg(test)]
mod tests {
    use super::*;
    use espgw_wire::ipv4::Ipv4Packet;

    fn spec(l4: L4, v4: bool) -> FlowSpec {
        FlowSpec {
            src: if v4 {
                "198.51.100.10".parse().unwrap()
            } else {
                "2001:db8:100::10".parse().unwrap()
            },
            dst: if v4 {
                "203.0.113.20".parse().unwrap()
            } else {
                "2001:db8:113::20".parse().unwrap()
            },
            l4,
            sport: 1024,
            dport: 9,
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 1, 1],
        }
    }

    #[test]
    fn sizes_and_checksums() {
        for l4 in [L4::Udp, L4::Tcp, L4::Icmp] {
            for v4 in [true, false] {
                let s = spec(l4, v4);
                for size in [64, 128, 1518] {
                    let f = frame(&s, size, 7);
                    assert_eq!(f.len(), size.max(min_frame(&s)) - FCS_LEN);
                    if v4 {
                        let ip = Ipv4Packet::new_checked(&f[14..]).unwrap();
                        assert!(ip.verify_checksum());
                        let pseudo = if l4 == L4::Icmp {
                            0
                        } else {
                            ipv4::pseudo_header_sum(
                                ip.src(),
                                ip.dst(),
                                ip.protocol(),
                                ip.payload().len(),
                            )
                        };
                        assert_eq!(checksum::finish(checksum::sum(ip.payload(), pseudo)), 0);
                    }
                }
            }
        }
    }

    #[test]
    fn imix_shares() {
        let v = imix_sizes();
        assert_eq!(v.len(), 300);
        let share = |s| v.iter().filter(|&&x| x == s).count() as f64 / 3.0;
        assert!((share(90) - 58.67).abs() < 0.01);
        assert!((share(1418) - 15.67).abs() < 0.01);
    }

    /// The order is ipsec-secgw's pcap's, as CPython makes it (a = 90, b = 92, c = 594,
    /// d = 1418 B), from /usr/bin/python3 (3.11):
    ///   lst = [s for s, n in [(90, 176), (92, 6), (594, 71), (1418, 47)] for _ in range(n)]
    ///   random.Random(42).shuffle(lst)
    #[test]
    fn imix_order_is_the_secgw_pcaps() {
        let expected = concat!(
            "acaaaccaacadaccddaaacaccaaccaadacacbcaaadcdadadacaadacaaaadcccadcccaacaaddc",
            "aaadadaacacaddabdcaaaacaaacccaaaaaaaaccadcacdaaaadaaaabcadadccaaadaaaaacaca",
            "dacaccaaaaddadacaadaaadaaaccaccaacaadaaaaadaaccdaaddaaacaccaaaddaacacacaaca",
            "aadbaaaaaaacaadaacacaacaaaabdacaacacaabcacddaaadadaaacacdaadaaaaacadaaaaaaa",
        );
        let got: String = imix_sizes()
            .iter()
            .map(|s| match s {
                90 => 'a',
                92 => 'b',
                594 => 'c',
                1418 => 'd',
                _ => '?',
            })
            .collect();
        assert_eq!(got, expected);
    }
}
