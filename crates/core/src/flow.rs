//! Parsing an IP packet down to what the SPD matches on.

use espgw_wire::{
    icmp::IcmpHeader,
    ipv4::{self, Ipv4Packet},
    ipv6::{self, Ipv6Packet},
    proto,
    tcp::TcpPorts,
    udp::UdpPacket,
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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
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
    /// TTL / hop limit.
    pub ttl: u8,
}

#[inline(always)]
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
/// checksum is malformed. The option-free IPv4 header of almost every packet is read at
/// once ([`parse_ipv4_no_options`]); the rest goes through the checked views.
// Always inlined: its result is larger than what it computes, and returned through memory
// it costs a store-forwarding stall at every call site (perf, `bench dataplane`).
#[inline(always)]
pub fn parse_ip(ip: &[u8]) -> Result<IpInfo, DropReason> {
    if let Some(info) = parse_ipv4_no_options(ip) {
        return Ok(info);
    }
    match parse_ipv6_no_extensions(ip) {
        Some(info) => Ok(info),
        None => parse_ip_through_views(ip),
    }
}

/// Every case of [`parse_ip`] through the checked views: options, IPv6, and the reason a
/// packet is refused.
#[inline(always)]
fn parse_ip_through_views(ip: &[u8]) -> Result<IpInfo, DropReason> {
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
                ttl: p.ttl(),
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
                ttl: p.hop_limit(),
            })
        }
        _ => Err(DropReason::Malformed),
    }
}

/// The common case of [`parse_ip`] read at once: an IPv4 header without options, taken as
/// one 20-byte array (one bounds check, where the checked view's accessors each test the
/// slice again). `None` for anything else, including every packet `parse_ip` refuses: the
/// caller then asks `parse_ip`, which decides (and names the reason). Where both answer,
/// they answer the same (a property test holds them to it).
#[inline(always)]
pub fn parse_ipv4_no_options(ip: &[u8]) -> Option<IpInfo> {
    let (h, rest) = ip.split_first_chunk::<{ ipv4::MIN_HEADER_LEN }>()?;
    let total = usize::from(u16::from_be_bytes([h[2], h[3]]));
    if h[0] != 0x45 || total < ipv4::MIN_HEADER_LEN || !ipv4::header_checksum_ok(h) {
        return None;
    }
    let payload = rest.get(..total - ipv4::MIN_HEADER_LEN)?;
    let flags_frag = u16::from_be_bytes([h[6], h[7]]);
    let first = flags_frag & 0x1fff == 0;
    let (sport, dport) = if first { ports(h[9], payload) } else { (0, 0) };
    Some(IpInfo {
        key: FlowKey {
            v4: true,
            src: u128::from(u32::from_be_bytes([h[12], h[13], h[14], h[15]])),
            dst: u128::from(u32::from_be_bytes([h[16], h[17], h[18], h[19]])),
            proto: h[9],
            sport,
            dport,
        },
        total_len: total,
        upper_off: ipv4::MIN_HEADER_LEN,
        dont_fragment: flags_frag & 0x4000 != 0,
        is_fragment: flags_frag & 0x2000 != 0 || !first,
        tos: h[1],
        ttl: h[8],
    })
}

/// The common IPv6 packet read at once, as [`parse_ipv4_no_options`] reads IPv4: the
/// 40-byte fixed header as one array (one bounds check), followed directly by the upper
/// layer (the first next header is none of the extension headers the views walk:
/// hop-by-hop, routing, fragment, destination options, AH). `None` for anything else,
/// which `parse_ip` then hands to the views; where both answer, they answer the same (a
/// property test holds them to it). Without it an IPv6 packet cost the views' checks and
/// the extension-header walk: 15 % of the 78-byte outbound rate (`bench dataplane`).
#[inline(always)]
pub fn parse_ipv6_no_extensions(ip: &[u8]) -> Option<IpInfo> {
    let (h, rest) = ip.split_first_chunk::<{ ipv6::HEADER_LEN }>()?;
    let payload_len = usize::from(u16::from_be_bytes([h[4], h[5]]));
    let next_header = h[6];
    if h[0] >> 4 != 6
        || matches!(
            next_header,
            proto::HOPOPT | proto::ROUTING | proto::FRAGMENT | proto::DSTOPTS | proto::AH
        )
    {
        return None;
    }
    let payload = rest.get(..payload_len)?;
    let (sport, dport) = ports(next_header, payload);
    let address = |at: usize| {
        let mut a = [0u8; 16];
        a.copy_from_slice(&h[at..at + 16]);
        u128::from_be_bytes(a)
    };
    Some(IpInfo {
        key: FlowKey {
            v4: false,
            src: address(8),
            dst: address(24),
            proto: next_header,
            sport,
            dport,
        },
        total_len: ipv6::HEADER_LEN + payload_len,
        upper_off: ipv6::HEADER_LEN,
        dont_fragment: false,
        is_fragment: false,
        tos: (h[0] << 4) | (h[1] >> 4),
        ttl: h[7],
    })
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

    /// An option-free IPv4 packet with a correct header checksum.
    fn ipv4_packet(tos: u8, flags_frag: u16, proto: u8, payload: &[u8]) -> Vec<u8> {
        let total = (20 + payload.len()) as u16;
        let mut p = vec![0x45, tos];
        p.extend_from_slice(&total.to_be_bytes());
        p.extend_from_slice(&[0x12, 0x34]);
        p.extend_from_slice(&flags_frag.to_be_bytes());
        p.extend_from_slice(&[64, proto, 0, 0, 192, 0, 2, 1, 198, 51, 100, 7]);
        let c = espgw_wire::checksum::checksum(&p);
        p[10..12].copy_from_slice(&c.to_be_bytes());
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn an_option_free_header_is_read_at_once_and_read_right() {
        // UDP 1000 -> 2000 with its own length right, DF set, ECT(0).
        let udp = [0x03, 0xe8, 0x07, 0xd0, 0, 12, 0, 0, 1, 2, 3, 4];
        let p = ipv4_packet(0xb8 | 2, 0x4000, proto::UDP, &udp);
        let info = parse_ipv4_no_options(&p).expect("the common header takes the one read");
        assert_eq!(parse_ip_through_views(&p), Ok(info));
        assert_eq!(
            (info.key.sport, info.key.dport, info.key.proto, info.tos),
            (1000, 2000, proto::UDP, 0xba)
        );
        assert_eq!(info.key.src, 0xc000_0201);
        assert_eq!(info.key.dst, 0xc633_6407);
        assert!(info.dont_fragment && !info.is_fragment);
        assert_eq!((info.total_len, info.upper_off), (32, 20));
        // Link padding after the packet is outside it.
        let mut padded = p.clone();
        padded.extend_from_slice(&[0; 14]);
        assert_eq!(parse_ipv4_no_options(&padded), Some(info));
        // A later fragment has no ports; a first one (more fragments) has them.
        let later = ipv4_packet(0, 0x0001, proto::UDP, &udp);
        let later = parse_ipv4_no_options(&later).unwrap();
        assert!(later.is_fragment && later.key.sport == 0 && later.key.dport == 0);
        let first = ipv4_packet(0, 0x2000, proto::UDP, &udp);
        let first = parse_ipv4_no_options(&first).unwrap();
        assert!(first.is_fragment && first.key.sport == 1000);
        // Options, a wrong checksum, a length past the buffer: left to the views.
        let mut bad_sum = p.clone();
        bad_sum[10] ^= 1;
        let mut options = p.clone();
        options[0] = 0x46;
        for refused in [&bad_sum, &options, &p[..p.len() - 1], &p[..19]] {
            assert_eq!(parse_ipv4_no_options(refused), None);
        }
        assert_eq!(parse_ip(&bad_sum), Err(DropReason::Malformed));
    }

    proptest::proptest! {
        /// `parse_ip` (the one read, then the views) answers exactly as the views alone,
        /// for packets near the common case: any TOS, flags and fragment offset, protocol,
        /// payload and link padding, then perhaps one byte anywhere overwritten and perhaps
        /// the checksum made right again after it.
        #[test]
        fn the_one_read_answers_as_the_views_do(
            tos: u8,
            flags_frag: u16,
            proto in proptest::sample::select(vec![1u8, 6, 17, 50, 51, 58, 132, 0xff]),
            payload in proptest::collection::vec(proptest::num::u8::ANY, 0..24),
            padding in 0usize..8,
            poke: Option<(proptest::sample::Index, u8)>,
            refix: bool,
        ) {
            let mut p = ipv4_packet(tos, flags_frag, proto, &payload);
            p.resize(p.len() + padding, 0);
            if let Some((at, v)) = poke {
                let at = at.index(p.len());
                p[at] = v;
                if refix && at < 20 && at != 10 && at != 11 {
                    p[10..12].fill(0);
                    let c = espgw_wire::checksum::checksum(&p[..20]);
                    p[10..12].copy_from_slice(&c.to_be_bytes());
                }
            }
            let views = parse_ip_through_views(&p);
            proptest::prop_assert_eq!(parse_ip(&p), views);
            if let Some(info) = parse_ipv4_no_options(&p) {
                proptest::prop_assert_eq!(Ok(info), views);
            }
            if poke.is_none() {
                proptest::prop_assert!(parse_ipv4_no_options(&p).is_some());
            }
        }

        /// And for any bytes at all (the version nibble forced to 4 or 6 in most cases).
        #[test]
        fn the_one_read_answers_as_the_views_do_on_any_bytes(
            mut bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..96),
            version in proptest::sample::select(vec![None, Some(0x45u8), Some(0x60)]),
        ) {
            if let (Some(v), Some(b)) = (version, bytes.first_mut()) {
                // IPv4 without options; IPv6 with the traffic class's high nibble as drawn.
                *b = if v == 0x60 { v | (*b & 0x0f) } else { v };
            }
            proptest::prop_assert_eq!(parse_ip(&bytes), parse_ip_through_views(&bytes));
        }

        /// The IPv6 one read answers as the views do for packets near the common case:
        /// any traffic class, flow label and hop limit, a next header that is an upper
        /// layer or an extension header (the views walk those), any payload length field
        /// (short, exact, beyond the bytes), link padding, then perhaps one byte anywhere
        /// overwritten.
        #[test]
        fn the_ipv6_one_read_answers_as_the_views_do(
            traffic_class: u8,
            flow_label in 0u32..0x10_0000,
            hop_limit: u8,
            next_header in proptest::sample::select(vec![6u8, 17, 58, 50, 1, 132, 59, 0, 43, 44, 51, 60]),
            payload in proptest::collection::vec(proptest::num::u8::ANY, 0..40),
            length_skew in -3i32..3,
            padding in 0usize..8,
            poke: Option<(proptest::sample::Index, u8)>,
            src: u128,
            dst: u128,
        ) {
            let mut p = vec![0x60 | (traffic_class >> 4), (traffic_class << 4) | (flow_label >> 16) as u8];
            p.extend_from_slice(&(flow_label as u16).to_be_bytes());
            let plen = (payload.len() as i32 + length_skew).max(0) as u16;
            p.extend_from_slice(&plen.to_be_bytes());
            p.extend_from_slice(&[next_header, hop_limit]);
            p.extend_from_slice(&src.to_be_bytes());
            p.extend_from_slice(&dst.to_be_bytes());
            p.extend_from_slice(&payload);
            p.resize(p.len() + padding, 0);
            if let Some((at, v)) = poke {
                let at = at.index(p.len());
                p[at] = v;
            }
            let views = parse_ip_through_views(&p);
            proptest::prop_assert_eq!(parse_ip(&p), views);
            if let Some(info) = parse_ipv6_no_extensions(&p) {
                proptest::prop_assert_eq!(Ok(info), views);
            }
            let upper = !matches!(next_header, 0 | 43 | 44 | 51 | 60);
            if poke.is_none() && upper && usize::from(plen) <= payload.len() + padding {
                proptest::prop_assert!(parse_ipv6_no_extensions(&p).is_some());
            }
        }
    }
}
