//! ICMP the gateway sends: echo replies, and the errors a router sends (RFC 792, RFC 1812
//! §4.3, RFC 4443), rate-limited by the node.

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
    let mut s = checksum::sum(src, 0);
    s = checksum::sum(dst, s);
    s = checksum::sum(&(body.len() as u32).to_be_bytes(), s);
    s = checksum::sum(&[0, 0, 0, proto::ICMPV6], s);
    checksum::finish(checksum::sum(body, s))
}

/// The ICMP errors the gateway sends.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IcmpError {
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
        IpAddr::V4(s) if orig[0] >> 4 == 4 => {
            // RFC 1812 §4.3.2.3: as much of the original as fits in 576 bytes.
            let orig_total = usize::from(u16::from_be_bytes([orig[2], orig[3]])).min(orig.len());
            let quote = orig_total.min(576 - 28);
            let len = 28 + quote;
            f[0] = 0x45;
            f[2..4].copy_from_slice(&(len as u16).to_be_bytes());
            f[8] = 64;
            f[9] = proto::ICMP;
            f[12..16].copy_from_slice(&s.octets());
            f[16..20].copy_from_slice(&orig[12..16]);
            let c = checksum::checksum(&f[..20]);
            f[10..12].copy_from_slice(&c.to_be_bytes());
            let icmp = &mut f[20..len];
            match err {
                IcmpError::TimeExceeded => icmp[0] = 11,
                IcmpError::TooBig(mtu) => {
                    icmp[0] = 3;
                    icmp[1] = 4;
                    icmp[6..8].copy_from_slice(&mtu.to_be_bytes());
                }
            }
            icmp[8..].copy_from_slice(&orig[..quote]);
            let c = checksum::checksum(icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            len
        }
        IpAddr::V6(s) if orig[0] >> 4 == 6 => {
            // RFC 4443 §2.4(c): as much as fits in the minimum MTU.
            let orig_total =
                (40 + usize::from(u16::from_be_bytes([orig[4], orig[5]]))).min(orig.len());
            let quote = orig_total.min(1280 - 48);
            let len = 48 + quote;
            let mut dst = [0u8; 16];
            dst.copy_from_slice(&orig[8..24]);
            f[0] = 0x60;
            f[4..6].copy_from_slice(&((8 + quote) as u16).to_be_bytes());
            f[6] = proto::ICMPV6;
            f[7] = 64;
            f[8..24].copy_from_slice(&s.octets());
            f[24..40].copy_from_slice(&dst);
            let icmp = &mut f[40..len];
            match err {
                IcmpError::TimeExceeded => icmp[0] = 3,
                IcmpError::TooBig(mtu) => {
                    icmp[0] = 2;
                    icmp[4..8].copy_from_slice(&u32::from(mtu).to_be_bytes());
                }
            }
            icmp[8..].copy_from_slice(&orig[..quote]);
            let c = icmpv6_checksum(&s.octets(), &dst, icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            len
        }
        _ => return false,
    };
    out.verdict = Verdict::Pending;
    out.load(&f[..len]).is_ok()
}
