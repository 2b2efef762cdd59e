//! What ESP and AH share around their own headers: the outer IP header of tunnel mode
//! (written on the way out, ECN restored on the way in, RFC 6040), and in transport mode
//! where the protocol's header goes and how the IP header is fixed up around it. Both
//! transforms (`esp_out`/`esp_in`, `ah`) call these; neither calls the other.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use espgw_wire::ipv4::{self, Ipv4Packet, Ipv4Repr};
use espgw_wire::ipv6::{self, Ipv6Packet, Ipv6Repr};
use espgw_wire::{checksum, proto, tcp, udp};

use crate::counters::DropReason;
use crate::flow::{parse_ip, IpInfo};
use crate::packet::Packet;

/// RFC 6040 §4.2: the inner ECN field after decapsulation, or `None` to drop.
pub fn ecn_decap(outer: u8, inner: u8) -> Option<u8> {
    const NOT_ECT: u8 = 0;
    const ECT1: u8 = 1;
    const ECT0: u8 = 2;
    const CE: u8 = 3;
    match (inner, outer) {
        (NOT_ECT, CE) => None,
        (NOT_ECT, _) => Some(NOT_ECT),
        (ECT0, ECT1) => Some(ECT1),
        (ECT0 | ECT1, CE) => Some(CE),
        (i, _) => Some(i),
    }
}

/// Tunnel mode: `pkt` starts at the inner packet (perhaps followed by TFC padding, RFC 4303
/// §2.7): applies RFC 6040 ECN decapsulation with the outer `outer_tos`, trims the packet
/// to the inner header's own length and returns that header as parsed (read once, for ECN,
/// length, and the caller's policy check and routing).
#[inline(always)]
pub fn restore_inner(
    pkt: &mut Packet,
    inner_v4: bool,
    outer_tos: u8,
) -> Result<IpInfo, DropReason> {
    let mut info = parse_ip(pkt.data()).map_err(|_| DropReason::Malformed)?;
    // The next header named the family; the header itself must agree.
    if info.key.v4 != inner_v4 {
        return Err(DropReason::Malformed);
    }
    let ecn = ecn_decap(outer_tos & 3, info.tos & 3).ok_or(DropReason::EcnDrop)?;
    if ecn != info.tos & 3 {
        set_ecn(pkt.data_mut(), inner_v4, ecn)?;
        info.tos = (info.tos & !3) | ecn;
    }
    pkt.truncate(info.total_len);
    Ok(info)
}

/// Rewrites the ECN field of the IP header at the start of `d` (and the IPv4 checksum).
#[cold]
fn set_ecn(d: &mut [u8], v4: bool, ecn: u8) -> Result<(), DropReason> {
    if v4 {
        let mut ip = Ipv4Packet::new_checked(&mut *d).map_err(|_| DropReason::Malformed)?;
        let tos = ip.tos();
        ip.set_tos((tos & !3) | ecn);
        ip.fill_checksum();
    } else {
        let mut ip = Ipv6Packet::new_checked(&mut *d).map_err(|_| DropReason::Malformed)?;
        let tc = ip.traffic_class();
        ip.set_traffic_class((tc & !3) | ecn);
    }
    Ok(())
}

/// Transport mode: once the ESP or AH bytes are gone, `d` is the restored packet: the
/// byte at `nh_at` names `next_header` again and the IP length (and IPv4 checksum) match.
pub fn restore_transport_header(
    d: &mut [u8],
    nh_at: usize,
    next_header: u8,
    v4: bool,
) -> Result<(), DropReason> {
    let total = d.len();
    *d.get_mut(nh_at).ok_or(DropReason::Malformed)? = next_header;
    if v4 {
        // The header still holds the longer length: fix it before the checked view looks.
        let tl = u16::try_from(total).map_err(|_| DropReason::Malformed)?;
        d[2..4].copy_from_slice(&tl.to_be_bytes());
        let mut ip = Ipv4Packet::new_checked(&mut *d).map_err(|_| DropReason::Malformed)?;
        ip.fill_checksum();
    } else {
        let plen = u16::try_from(total.saturating_sub(40)).map_err(|_| DropReason::Malformed)?;
        d.get_mut(4..6)
            .ok_or(DropReason::Malformed)?
            .copy_from_slice(&plen.to_be_bytes());
    }
    Ok(())
}

/// RFC 3948 §3.1.2: transport-mode ESP that arrived UDP-encapsulated may have crossed a
/// NAT, which rewrote the IP header's addresses but could not touch the TCP or UDP checksum
/// under the encryption, and that checksum covers the addresses (the pseudo-header). The
/// receiver is to fix it; espgw knows no original addresses (NAT-OA) to update it
/// incrementally, so it takes the RFC's second way and recomputes it over the restored
/// packet `d` (what [`restore_transport_header`] left, parsed as `info`). ICMPv6's
/// checksum covers the pseudo-header too and is recomputed alike. The ESP ICV has already
/// vouched for every byte, so nothing a checksum could catch is hidden by this.
///
/// Left as they are: fragments (the checksum covers the whole datagram), an IPv4 UDP
/// datagram without a checksum (zero), a UDP length that disagrees with the IP length,
/// and headers too short to hold their checksum.
pub fn refresh_upper_checksum(d: &mut [u8], info: &IpInfo) {
    let k = &info.key;
    if info.is_fragment || (!k.v4 && has_fragment_header(d, info.upper_off)) {
        return;
    }
    let Some(upper) = d.get_mut(info.upper_off..info.total_len) else {
        return;
    };
    let len = upper.len();
    let at = match k.proto {
        proto::TCP if len >= tcp::MIN_HEADER_LEN => 16,
        proto::UDP if len >= udp::HEADER_LEN => {
            let field = |i: usize| u16::from_be_bytes([upper[i], upper[i + 1]]);
            if usize::from(field(4)) != len || (k.v4 && field(6) == 0) {
                return;
            }
            6
        }
        proto::ICMPV6 if !k.v4 && len >= 4 => 2,
        _ => return,
    };
    let pseudo = if k.v4 {
        let a = |x: u128| Ipv4Addr::from(x as u32);
        ipv4::pseudo_header_sum(a(k.src), a(k.dst), k.proto, len)
    } else {
        ipv6::pseudo_header_sum(Ipv6Addr::from(k.src), Ipv6Addr::from(k.dst), k.proto, len)
    };
    upper[at..at + 2].fill(0);
    let mut c = checksum::finish(checksum::sum(upper, pseudo));
    if c == 0 && k.proto == proto::UDP {
        c = 0xffff; // zero means "no checksum" in UDP (RFC 768)
    }
    upper[at..at + 2].copy_from_slice(&c.to_be_bytes());
}

/// Whether the IPv6 header chain in front of `upper_off` holds a fragment header.
fn has_fragment_header(d: &[u8], upper_off: usize) -> bool {
    let mut nh = d.get(6).copied().unwrap_or(0);
    let mut off = ipv6::HEADER_LEN;
    while off < upper_off {
        let Some(&len_byte) = d.get(off + 1) else {
            return false;
        };
        let len = match nh {
            proto::FRAGMENT => return true,
            proto::AH => (usize::from(len_byte) + 2) * 4,
            _ => (usize::from(len_byte) + 1) * 8,
        };
        nh = d[off];
        off += len;
    }
    false
}

/// The outer IP header of a tunnel-mode SA (ESP or AH), built once per SA: addresses,
/// protocol and TTL never change, so a packet's header is this template copied, with DSCP
/// and ECN, length, DF and identification filled in. RFC 4301 §5.1.2.1 / RFC 6040 normal
/// mode: DSCP and ECN are copied from the inner header, and DF from an inner IPv4 header.
#[derive(Debug, Clone, Copy)]
pub struct OuterHeader {
    bytes: [u8; ipv6::HEADER_LEN],
    v4: bool,
    /// IPv4: the one's-complement sum of the words that never change (version and header
    /// length, TTL and protocol, addresses), so a packet's checksum adds only its own.
    fixed_sum: u32,
    /// The destination to route on.
    route_dst: u128,
}

impl OuterHeader {
    /// The template for a tunnel from `local` to `remote` carrying `protocol`; `None`
    /// when the two addresses are of different families.
    pub fn new(local: IpAddr, remote: IpAddr, protocol: u8, ttl: u8) -> Option<Self> {
        let mut bytes = [0u8; ipv6::HEADER_LEN];
        match (local, remote) {
            (IpAddr::V4(l), IpAddr::V4(r)) => {
                let repr = Ipv4Repr {
                    src: l,
                    dst: r,
                    protocol,
                    tos: 0,
                    ttl,
                    ident: 0,
                    dont_fragment: false,
                    payload_len: 0,
                };
                repr.emit(&mut bytes).ok()?;
                // Every variable field zero: what is left sums to the fixed words.
                bytes[2..4].fill(0);
                bytes[10..12].fill(0);
                let fixed_sum = u32::from(!checksum::finish(checksum::sum(
                    &bytes[..MIN_IPV4_HEADER],
                    0,
                )));
                Some(OuterHeader {
                    bytes,
                    v4: true,
                    fixed_sum,
                    route_dst: u128::from(u32::from(r)),
                })
            }
            (IpAddr::V6(l), IpAddr::V6(r)) => {
                let repr = Ipv6Repr {
                    src: l,
                    dst: r,
                    next_header: protocol,
                    traffic_class: 0,
                    flow_label: 0,
                    hop_limit: ttl,
                    payload_len: 0,
                };
                repr.emit(&mut bytes).ok()?;
                Some(OuterHeader {
                    bytes,
                    v4: false,
                    fixed_sum: 0,
                    route_dst: u128::from(r),
                })
            }
            _ => None,
        }
    }

    /// Whether the outer header is IPv4.
    #[inline]
    pub fn is_v4(&self) -> bool {
        self.v4
    }

    /// Its length in bytes.
    #[inline]
    pub fn header_len(&self) -> usize {
        if self.v4 {
            MIN_IPV4_HEADER
        } else {
            ipv6::HEADER_LEN
        }
    }

    /// Writes the outer header of a packet of `total` bytes (headers included) around
    /// `inner`, with identification `seq` (IPv4), at the start of `d`; returns the family
    /// and destination to route on.
    #[inline(always)]
    pub fn write(
        &self,
        d: &mut [u8],
        inner: &IpInfo,
        seq: u64,
        total: usize,
    ) -> Result<(bool, u128), DropReason> {
        let len = self.header_len();
        let h = d.get_mut(..len).ok_or(DropReason::TooBig)?;
        // Each branch copies a fixed length: a copy of `len` bytes is a call to memcpy.
        if self.v4 {
            h.copy_from_slice(&self.bytes[..MIN_IPV4_HEADER]);
            let total = u16::try_from(total).map_err(|_| DropReason::TooBig)?;
            let ident = seq as u16;
            let flags: u16 = if inner.key.v4 && inner.dont_fragment {
                0x4000
            } else {
                0
            };
            h[1] = inner.tos;
            h[2..4].copy_from_slice(&total.to_be_bytes());
            h[4..6].copy_from_slice(&ident.to_be_bytes());
            h[6..8].copy_from_slice(&flags.to_be_bytes());
            let sum = self.fixed_sum
                + u32::from(inner.tos)
                + u32::from(total)
                + u32::from(ident)
                + u32::from(flags);
            h[10..12].copy_from_slice(&checksum::finish(sum).to_be_bytes());
        } else {
            h.copy_from_slice(&self.bytes);
            let payload = total
                .checked_sub(ipv6::HEADER_LEN)
                .and_then(|p| u16::try_from(p).ok())
                .ok_or(DropReason::TooBig)?;
            h[0] = 0x60 | (inner.tos >> 4);
            h[1] = inner.tos << 4;
            h[4..6].copy_from_slice(&payload.to_be_bytes());
        }
        Ok((self.v4, self.route_dst))
    }
}

/// The length of an IPv4 header without options (the only kind espgw writes).
const MIN_IPV4_HEADER: usize = 20;

/// Transport mode: the end of the headers that stay in front of ESP or AH, and the offset
/// of the byte naming what follows them (IPv4: the protocol field; IPv6: after hop-by-hop,
/// routing and fragment headers, RFC 4303 §3.1.1, RFC 4302 §3.1.1).
#[inline]
pub fn transport_split(d: &[u8], info: &IpInfo) -> Result<(usize, usize), DropReason> {
    if info.key.v4 {
        Ok((info.upper_off, 9))
    } else {
        let v6 = Ipv6Packet::new_checked(d).map_err(|_| DropReason::Malformed)?;
        let u = v6.upper_layer().map_err(|_| DropReason::Malformed)?;
        Ok((u.per_hop_end, u.per_hop_next_header_at))
    }
}

/// Transport mode: after ESP or AH was inserted, the packet is `total` bytes: fix the IP
/// length (and the IPv4 checksum).
#[inline]
pub fn fix_ip_length(d: &mut [u8], v4: bool, total: usize) -> Result<(), DropReason> {
    if v4 {
        let mut ip = Ipv4Packet::new_checked(&mut *d).map_err(|_| DropReason::Malformed)?;
        ip.set_total_len(u16::try_from(total).map_err(|_| DropReason::TooBig)?);
        ip.fill_checksum();
    } else {
        let plen = u16::try_from(total - ipv6::HEADER_LEN).map_err(|_| DropReason::TooBig)?;
        d[4..6].copy_from_slice(&plen.to_be_bytes());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::flow::FlowKey;
    use proptest::prelude::*;

    fn inner(v4: bool, tos: u8, df: bool) -> IpInfo {
        IpInfo {
            key: FlowKey {
                v4,
                src: 0,
                dst: 0,
                proto: 0,
                sport: 0,
                dport: 0,
            },
            total_len: 0,
            upper_off: 0,
            dont_fragment: df,
            is_fragment: false,
            tos,
            ttl: 64,
        }
    }

    proptest! {
        // The template, filled in, is the header the full emitter writes (itself checked
        // against a header scapy built, in espgw-wire): checksum, DF, DSCP/ECN, length.
        #[test]
        fn ipv4_template_writes_what_the_emitter_writes(
            l in any::<u32>(), r in any::<u32>(), protocol in any::<u8>(), ttl in any::<u8>(),
            tos in any::<u8>(), df in any::<bool>(), inner_v4 in any::<bool>(),
            seq in any::<u64>(), total in 20usize..=65535,
        ) {
            let (l, r) = (std::net::Ipv4Addr::from(l), std::net::Ipv4Addr::from(r));
            let t = OuterHeader::new(l.into(), r.into(), protocol, ttl).unwrap();
            let mut got = [0xa5u8; 20];
            let route = t.write(&mut got, &inner(inner_v4, tos, df), seq, total).unwrap();
            let mut want = [0u8; 20];
            Ipv4Repr {
                src: l, dst: r, protocol, tos, ttl, ident: seq as u16,
                dont_fragment: inner_v4 && df, payload_len: total - 20,
            }.emit(&mut want).unwrap();
            prop_assert_eq!(got, want);
            prop_assert_eq!(checksum::checksum(&got), 0);
            prop_assert_eq!(route, (true, u128::from(u32::from(r))));
        }

        #[test]
        fn ipv6_template_writes_what_the_emitter_writes(
            l in any::<u128>(), r in any::<u128>(), protocol in any::<u8>(), ttl in any::<u8>(),
            tos in any::<u8>(), seq in any::<u64>(), total in 40usize..=65575,
        ) {
            let (l, r) = (std::net::Ipv6Addr::from(l), std::net::Ipv6Addr::from(r));
            let t = OuterHeader::new(l.into(), r.into(), protocol, ttl).unwrap();
            let mut got = [0xa5u8; 40];
            let route = t.write(&mut got, &inner(false, tos, true), seq, total).unwrap();
            let mut want = [0u8; 40];
            Ipv6Repr {
                src: l, dst: r, next_header: protocol, traffic_class: tos, flow_label: 0,
                hop_limit: ttl, payload_len: total - 40,
            }.emit(&mut want).unwrap();
            prop_assert_eq!(got, want);
            prop_assert_eq!(route, (false, u128::from(r)));
        }
    }

    #[test]
    fn outer_header_refuses_mixed_families_and_oversized_packets() {
        let v4: IpAddr = "192.0.2.1".parse().unwrap();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert!(OuterHeader::new(v4, v6, 50, 64).is_none());
        assert!(OuterHeader::new(v6, v4, 50, 64).is_none());
        let t = OuterHeader::new(v4, v4, 50, 64).unwrap();
        let mut d = [0u8; 20];
        let e = t.write(&mut d, &inner(true, 0, false), 1, 65536);
        assert_eq!(e, Err(DropReason::TooBig));
        let t = OuterHeader::new(v6, v6, 50, 64).unwrap();
        let mut d = [0u8; 19];
        let e = t.write(&mut d, &inner(false, 0, false), 1, 100);
        assert_eq!(e, Err(DropReason::TooBig));
    }

    /// An IPv4 packet `src` -> 203.0.113.20 carrying `upper` (protocol `protocol`), header
    /// checksum filled; `more_fragments` sets MF.
    fn v4_packet(src: [u8; 4], protocol: u8, upper: &[u8], more_fragments: bool) -> Vec<u8> {
        let mut d = vec![0u8; 20 + upper.len()];
        Ipv4Repr {
            src: src.into(),
            dst: [203, 0, 113, 20].into(),
            protocol,
            tos: 0,
            ttl: 64,
            ident: 7,
            dont_fragment: false,
            payload_len: upper.len(),
        }
        .emit(&mut d)
        .unwrap();
        if more_fragments {
            d[6] |= 0x20;
            Ipv4Packet::new_checked(&mut d[..]).unwrap().fill_checksum();
        }
        d[20..].copy_from_slice(upper);
        d
    }

    /// An IPv6 packet 2001:db8::7 -> 2001:db8:113::20 whose first next header is
    /// `next_header`, carrying `body`.
    fn v6_packet(next_header: u8, body: &[u8]) -> Vec<u8> {
        let mut d = vec![0u8; 40 + body.len()];
        Ipv6Repr {
            src: "2001:db8::7".parse().unwrap(),
            dst: "2001:db8:113::20".parse().unwrap(),
            next_header,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 64,
            payload_len: body.len(),
        }
        .emit(&mut d)
        .unwrap();
        d[40..].copy_from_slice(body);
        d
    }

    /// Whether the upper layer's checksum verifies over the pseudo-header of `d`'s addresses.
    fn upper_checksum_ok(d: &[u8]) -> bool {
        let info = parse_ip(d).unwrap();
        let k = &info.key;
        let len = info.total_len - info.upper_off;
        let pseudo = if k.v4 {
            let a = |x: u128| Ipv4Addr::from(x as u32);
            ipv4::pseudo_header_sum(a(k.src), a(k.dst), k.proto, len)
        } else {
            ipv6::pseudo_header_sum(Ipv6Addr::from(k.src), Ipv6Addr::from(k.dst), k.proto, len)
        };
        checksum::finish(checksum::sum(&d[info.upper_off..info.total_len], pseudo)) == 0
    }

    fn refreshed(mut d: Vec<u8>) -> Vec<u8> {
        let info = parse_ip(&d).unwrap();
        refresh_upper_checksum(&mut d, &info);
        d
    }

    /// A UDP datagram of `payload` with a checksum that is wrong for any address pair here.
    fn udp_datagram(payload: &[u8], check: u16) -> Vec<u8> {
        let mut u = vec![0u8; 8 + payload.len()];
        udp::emit(&mut u, 4000, 53, payload.len()).unwrap();
        u[6..8].copy_from_slice(&check.to_be_bytes());
        u[8..].copy_from_slice(payload);
        u
    }

    #[test]
    fn nat_t_transport_checksums_are_recomputed_for_the_addresses_received() {
        // TCP, an odd length, a checksum made for other addresses.
        let mut tcp = vec![0u8; 20 + 13];
        tcp[12] = 5 << 4;
        tcp[16..18].copy_from_slice(&0x1234u16.to_be_bytes());
        tcp[20..].copy_from_slice(b"hello, world!");
        let d = v4_packet([198, 51, 100, 7], proto::TCP, &tcp, false);
        assert!(!upper_checksum_ok(&d));
        let got = refreshed(d.clone());
        assert!(upper_checksum_ok(&got));
        // Only the checksum changed.
        assert_eq!(got[..36], d[..36]);
        assert_eq!(got[38..], d[38..]);

        let d = v4_packet(
            [198, 51, 100, 7],
            proto::UDP,
            &udp_datagram(b"abc", 0x4321),
            false,
        );
        assert!(upper_checksum_ok(&refreshed(d)));

        // IPv6, UDP and ICMPv6.
        for (protocol, upper) in [
            (proto::UDP, udp_datagram(b"abcd", 0x4321)),
            (proto::ICMPV6, vec![128, 0, 0x55, 0x55, 0, 1, 0, 2]),
        ] {
            let d = v6_packet(protocol, &upper);
            assert!(!upper_checksum_ok(&d));
            assert!(upper_checksum_ok(&refreshed(d)), "protocol {protocol}");
        }
    }

    #[test]
    fn nat_t_transport_checksums_left_alone_where_they_cannot_or_must_not_change() {
        // IPv4 UDP without a checksum stays without one.
        let d = v4_packet(
            [198, 51, 100, 7],
            proto::UDP,
            &udp_datagram(b"abc", 0),
            false,
        );
        assert_eq!(refreshed(d.clone()), d);
        // A UDP length that disagrees with the IP length.
        let mut u = udp_datagram(b"abc", 0x4321);
        u[5] += 1;
        let d = v4_packet([198, 51, 100, 7], proto::UDP, &u, false);
        assert_eq!(refreshed(d.clone()), d);
        // A fragment: the checksum covers the whole datagram.
        let d = v4_packet(
            [198, 51, 100, 7],
            proto::UDP,
            &udp_datagram(b"abc", 1),
            true,
        );
        assert_eq!(refreshed(d.clone()), d);
        // A TCP header too short to hold its checksum; a protocol without a pseudo-header.
        let d = v4_packet([198, 51, 100, 7], proto::TCP, &[0u8; 16], false);
        assert_eq!(refreshed(d.clone()), d);
        let d = v4_packet(
            [198, 51, 100, 7],
            proto::ICMP,
            &[8, 0, 1, 2, 0, 1, 0, 1],
            false,
        );
        assert_eq!(refreshed(d.clone()), d);
        // IPv6 behind a fragment header (first fragment: offset 0, more to come).
        let mut body = vec![proto::UDP, 0, 0, 1, 0, 0, 0, 9];
        body.extend_from_slice(&udp_datagram(b"abcd", 0x4321));
        let d = v6_packet(proto::FRAGMENT, &body);
        assert_eq!(refreshed(d.clone()), d);
    }

    proptest! {
        // Whatever parses as IP, the refresh changes at most the two checksum bytes and
        // never panics.
        #[test]
        fn checksum_refresh_touches_nothing_but_a_checksum(
            bytes in proptest::collection::vec(any::<u8>(), 0..200), v4 in any::<bool>(),
            protocol in prop_oneof![Just(proto::TCP), Just(proto::UDP), Just(proto::ICMPV6),
                Just(proto::FRAGMENT), Just(proto::HOPOPT), any::<u8>()],
        ) {
            let mut d = bytes.clone();
            if v4 && d.len() >= 20 {
                let n = d.len() - 20;
                let upper = d[20..].to_vec();
                d = v4_packet([198, 51, 100, 7], protocol, &upper, false);
                prop_assert_eq!(d.len(), 20 + n);
            } else if d.len() >= 40 {
                d[0] = 0x60;
                d[6] = protocol;
                let plen = (d.len() - 40) as u16;
                d[4..6].copy_from_slice(&plen.to_be_bytes());
            }
            let before = d.clone();
            if let Ok(info) = parse_ip(&d) {
                refresh_upper_checksum(&mut d, &info);
                let changed: Vec<usize> = (0..d.len()).filter(|&i| d[i] != before[i]).collect();
                prop_assert!(changed.len() <= 2, "{:?}", changed);
            }
        }
    }

    #[test]
    fn rfc6040_decapsulation_table() {
        // ecn_decap(outer, inner), RFC 6040 Figure 4.
        assert_eq!(ecn_decap(0, 0), Some(0));
        assert_eq!(ecn_decap(3, 0), None);
        assert_eq!(ecn_decap(1, 2), Some(1));
        assert_eq!(ecn_decap(3, 2), Some(3));
        assert_eq!(ecn_decap(3, 1), Some(3));
        assert_eq!(ecn_decap(2, 3), Some(3));
        assert_eq!(ecn_decap(0, 3), Some(3));
    }
}
