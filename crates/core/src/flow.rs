//! Parsing an IP packet down to what the SPD matches on.

use espgw_wire::{
    icmp::IcmpHeader, ipv4::Ipv4Packet, ipv6::Ipv6Packet, proto, tcp::TcpPorts, udp::UdpPacket,
};

use crate::counters::DropReason;

/// The selector fields of a packet (RFC 4301 §4.4.1.1). Addresses are numbers; IPv4 sits
/// in the low 32 bits. For ICMP the type stands in the source port and the code in the
/// destination port. Non-first fragments carry ports 0.
#[derive(Debug, Clone, Copy, Eq)]
pub struct FlowKey {
    /// Whether the packet is IPv4.
    pub v4: bool,
    /// Source address (IPv4 in the low 32 bits).
    pub src: u128,
    /// Destination address (IPv4 in the low 32 bits).
    pub dst: u128,
    /// Upper-layer protocol (after IPv6 extension headers).
    pub proto: u8,
    /// Source port, or ICMP type.
    pub sport: u16,
    /// Destination port, or ICMP code.
    pub dport: u16,
}

/// Field-wise equality, as derived, but without early exits: the pipeline compares every
/// packet's key with the flow cache's, and one branch on the OR of the differences
/// replaces six that each may mispredict.
impl PartialEq for FlowKey {
    #[inline(always)]
    fn eq(&self, o: &Self) -> bool {
        let halves = |x: u128, y: u128| {
            ((x as u64) ^ (y as u64)) | (((x >> 64) as u64) ^ ((y >> 64) as u64))
        };
        let small = u64::from(self.v4 ^ o.v4)
            | u64::from(self.proto ^ o.proto)
            | u64::from(self.sport ^ o.sport)
            | u64::from(self.dport ^ o.dport);
        (halves(self.src, o.src) | halves(self.dst, o.dst) | small) == 0
    }
}

/// What the pipeline needs to know about an IP packet.
#[derive(Debug, Clone, Copy)]
pub struct IpInfo {
    /// The selector fields.
    pub key: FlowKey,
    /// Total length from the IP header (bytes beyond it are link padding).
    pub total_len: usize,
    /// Offset of the upper-layer header.
    pub upper_off: usize,
    /// IPv4 DF bit (IPv6: false).
    pub dont_fragment: bool,
    /// IPv4 fragment (any).
    pub is_fragment: bool,
    /// TOS / traffic class.
    pub tos: u8,
}

#[inline]
fn ports(upper: u8, l4: &[u8]) -> (u16, u16) {
    match upper {
        proto::TCP => TcpPorts::new_checked(l4).map_or((0, 0), |t| (t.src_port(), t.dst_port())),
        proto::UDP => UdpPacket::new_checked(l4).map_or((0, 0), |u| (u.src_port(), u.dst_port())),
        proto::ICMP | proto::ICMPV6 => IcmpHeader::new_checked(l4)
            .map_or((0, 0), |i| (u16::from(i.msg_type()), u16::from(i.code()))),
        _ => (0, 0),
    }
}

/// Parses an IPv4 or IPv6 packet (by its version nibble). An IPv4 header with a wrong
/// checksum is malformed.
// Always inlined: its result is larger than what it computes, and returned through memory
// it costs a store-forwarding stall at every call site (perf, `bench dataplane`).
#[inline(always)]
pub fn parse_ip(ip: &[u8]) -> Result<IpInfo, DropReason> {
    match ip.first().map(|b| b >> 4) {
        Some(4) => {
            let p = Ipv4Packet::new_checked(ip).map_err(|_| DropReason::Malformed)?;
            if !p.verify_checksum() {
                return Err(DropReason::Malformed);
            }
            let hl = p.header_len();
            let is_fragment = p.is_fragment();
            let (sport, dport) = if p.frag_offset() == 0 {
                ports(p.protocol(), p.payload())
            } else {
                (0, 0)
            };
            Ok(IpInfo {
                key: FlowKey {
                    v4: true,
                    src: u128::from(u32::from(p.src())),
                    dst: u128::from(u32::from(p.dst())),
                    proto: p.protocol(),
                    sport,
                    dport,
                },
                total_len: p.total_len(),
                upper_off: hl,
                dont_fragment: p.dont_fragment(),
                is_fragment,
                tos: p.tos(),
            })
        }
        Some(6) => {
            let p = Ipv6Packet::new_checked(ip).map_err(|_| DropReason::Malformed)?;
            let u = p.upper_layer().map_err(|_| DropReason::Malformed)?;
            let pkt = p.packet();
            let (sport, dport) = if u.later_fragment {
                (0, 0)
            } else {
                ports(u.protocol, pkt.get(u.offset..).unwrap_or(&[]))
            };
            Ok(IpInfo {
                key: FlowKey {
                    v4: false,
                    src: u128::from(p.src()),
                    dst: u128::from(p.dst()),
                    proto: u.protocol,
                    sport,
                    dport,
                },
                total_len: p.total_len(),
                upper_off: u.offset,
                dont_fragment: false,
                is_fragment: u.later_fragment,
                tos: p.traffic_class(),
            })
        }
        _ => Err(DropReason::Malformed),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_differing_in_any_field_are_unequal() {
        let k = FlowKey {
            v4: false,
            src: 0x2001_0db8 << 96 | 1,
            dst: 0x2001_0db8 << 96 | 2,
            proto: 17,
            sport: 1000,
            dport: 2000,
        };
        assert_eq!(k, k);
        let variants = [
            FlowKey { v4: true, ..k },
            FlowKey {
                src: k.src ^ 1 << 100,
                ..k
            },
            FlowKey {
                src: k.src ^ 1,
                ..k
            },
            FlowKey {
                dst: k.dst ^ 1 << 127,
                ..k
            },
            FlowKey {
                dst: k.dst ^ 1 << 3,
                ..k
            },
            FlowKey { proto: 6, ..k },
            FlowKey { sport: 1001, ..k },
            FlowKey {
                dport: 0x8000 | 2000,
                ..k
            },
        ];
        for v in variants {
            assert_ne!(k, v, "{v:?}");
            assert_ne!(v, k, "{v:?}");
        }
    }
}
