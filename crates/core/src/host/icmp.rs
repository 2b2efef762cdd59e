//! ICMP the gateway sends: echo replies, and the errors a router sends (RFC 792, RFC 1812
//! §4.3, RFC 4443), rate-limited by the node.

use std::net::Ipv4Addr;

use espgw_wire::ipv4::Ipv4Repr;

use super::*;

pub(super) fn echo_reply_v4(
    p: &mut Packet,
    hl: usize,
    ihl: usize,
    total: usize,
    t: &Tables,
) -> Triage {
    let port = p.in_port;
    let Some(mac) = t.ports.get(usize::from(port)).map(|i| i.mac) else {
        return Triage::Drop(DropReason::Malformed);
    };
    p.truncate(hl + total);
    let d = p.data_mut();
    reflect_ethernet(d, mac);
    if d.len() < hl + ihl + 8 {
        return Triage::Drop(DropReason::Malformed);
    }
    let Ok(mut ip) = Ipv4Packet::new_checked(&mut d[hl..]) else {
        return Triage::Drop(DropReason::Malformed);
    };
    ip.swap_addresses();
    ip.set_ttl(64);
    ip.fill_checksum();
    let Ok(mut icmp) = IcmpHeader::new_checked(ip.payload_mut()) else {
        return Triage::Drop(DropReason::Malformed);
    };
    icmp.set_msg_type(wire_icmp::ECHO_REPLY);
    icmp.fill_checksum();
    Triage::Reply
}

/// The ICMPv6 checksum of `body` (RFC 4443 §2.3: over the pseudo-header too). Over a
/// body whose checksum field is filled in, a correct packet gives 0.
pub fn icmpv6_checksum(src: &[u8; 16], dst: &[u8; 16], body: &[u8]) -> u16 {
    wire_icmp::icmpv6_checksum((*src).into(), (*dst).into(), body)
}

/// The ICMP errors the gateway sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcmpError {
    /// IPv4 "TTL exceeded in transit" / IPv6 "hop limit exceeded in transit".
    TimeExceeded,
    /// IPv4 "fragmentation needed and DF set" / IPv6 "packet too big", with the MTU the
    /// sender must use.
    TooBig(u16),
}

/// Whether RFC 1122 §3.2.2 / RFC 4443 §2.4(e) allow an error about `orig` (an IP packet):
/// never about an ICMP error, a non-first fragment, or a packet from a multicast,
/// broadcast or unspecified source.
pub(super) fn may_answer(orig: &[u8]) -> bool {
    match orig.first().map(|b| b >> 4) {
        Some(4) => {
            let Ok(ip) = Ipv4Packet::new_checked(orig) else {
                return false;
            };
            let src = u32::from(ip.src());
            if ip.frag_offset() != 0 || src == 0 || src == u32::MAX || src >> 28 == 0xe {
                return false;
            }
            let pl = ip.payload();
            !(ip.protocol() == proto::ICMP && matches!(pl.first(), Some(3 | 4 | 5 | 11 | 12)))
        }
        Some(6) => {
            let Ok(ip) = Ipv6Packet::new_checked(orig) else {
                return false;
            };
            let s = ip.src().octets();
            if s[0] == 0xff || s == [0; 16] {
                return false;
            }
            let pl = &orig[40..];
            !(ip.next_header() == proto::ICMPV6 && pl.first().is_some_and(|&t| t < 128))
        }
        _ => false,
    }
}

/// Builds in `out` the IP packet (no Ethernet header) of ICMP error `err` about `orig`,
/// from `src`. False where no error may be sent or the families disagree.
pub fn build_icmp_error(out: &mut Packet, orig: &[u8], err: IcmpError, src: IpAddr) -> bool {
    if !may_answer(orig) {
        return false;
    }
    let mut f = [0u8; 1280];
    let len = match src {
        IpAddr::V4(s) if orig[0] >> 4 == 4 => icmpv4_error(&mut f, orig, err, s),
        IpAddr::V6(s) if orig[0] >> 4 == 6 => icmpv6_error(&mut f, orig, err, s),
        _ => None,
    };
    let Some(len) = len else {
        return false;
    };
    out.verdict = Verdict::Pending;
    out.load(&f[..len]).is_ok()
}

/// An ICMPv4 error about the IPv4 packet `orig` from `src`, as an IP packet in `f`;
/// returns its length.
fn icmpv4_error(f: &mut [u8], orig: &[u8], err: IcmpError, src: Ipv4Addr) -> Option<usize> {
    let ip = Ipv4Packet::new_checked(orig).ok()?;
    // RFC 1812 §4.3.2.3: as much of the original as fits in 576 bytes.
    let quote = ip.total_len().min(orig.len()).min(576 - 28);
    let (kind, rest) = match err {
        IcmpError::TimeExceeded => ((wire_icmp::TIME_EXCEEDED, 0), [0; 4]),
        IcmpError::TooBig(mtu) => {
            let [hi, lo] = mtu.to_be_bytes();
            let kind = (
                wire_icmp::DEST_UNREACHABLE,
                wire_icmp::CODE_FRAGMENTATION_NEEDED,
            );
            (kind, [0, 0, hi, lo])
        }
    };
    let n = wire_icmp::emit_error(f.get_mut(20..)?, kind, rest, &orig[..quote]).ok()?;
    IcmpHeader::new_checked(&mut f[20..20 + n])
        .ok()?
        .fill_checksum();
    Ipv4Repr {
        src,
        dst: ip.src(),
        protocol: proto::ICMP,
        tos: 0,
        ttl: 64,
        ident: 0,
        dont_fragment: false,
        payload_len: n,
    }
    .emit(f)
    .ok()?;
    Some(20 + n)
}

/// An ICMPv6 error about the IPv6 packet `orig` from `src`, as an IP packet in `f`;
/// returns its length.
fn icmpv6_error(f: &mut [u8], orig: &[u8], err: IcmpError, src: Ipv6Addr) -> Option<usize> {
    let ip = Ipv6Packet::new_checked(orig).ok()?;
    // RFC 4443 §2.4(c): as much as fits in the minimum MTU.
    let quote = ip.total_len().min(orig.len()).min(1280 - 48);
    let (kind, rest) = match err {
        IcmpError::TimeExceeded => ((wire_icmp::V6_TIME_EXCEEDED, 0), [0; 4]),
        IcmpError::TooBig(mtu) => (
            (wire_icmp::V6_PACKET_TOO_BIG, 0),
            u32::from(mtu).to_be_bytes(),
        ),
    };
    let n = wire_icmp::emit_error(f.get_mut(40..)?, kind, rest, &orig[..quote]).ok()?;
    let dst = ip.src();
    IcmpHeader::new_checked(&mut f[40..40 + n])
        .ok()?
        .fill_checksum_v6(src, dst);
    Ipv6Repr {
        src,
        dst,
        next_header: proto::ICMPV6,
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 64,
        payload_len: n,
    }
    .emit(f)
    .ok()?;
    Some(40 + n)
}
