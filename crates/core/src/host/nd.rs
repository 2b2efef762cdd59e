//! IPv6 neighbour discovery (RFC 4861) for the gateway's own addresses, and the IPv6 half
//! of host triage: what is for the gateway, what is link-local multicast, hop limit.

use super::*;

pub(super) const ND_NS: u8 = 135;

/// ICMPv6 neighbour advertisement (RFC 4861 §4.4).
pub(crate) const ND_NA: u8 = 136;

pub(super) fn is_solicited_node_of(dst: &[u8; 16], info: &PortInfo) -> bool {
    dst[..13] == [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff]
        && info.addresses.iter().any(|a| match a.addr {
            IpAddr::V6(v) => v.octets()[13..] == dst[13..],
            IpAddr::V4(_) => false,
        })
}

pub(super) fn ipv6(
    p: &mut Packet,
    hl: usize,
    (port, info): (u16, &PortInfo),
    t: &Tables,
    cache: &NeighbourCache,
    src_mac: MacAddr,
    hop_limit: HopLimit,
) -> Triage {
    let (src, dst, nh, hop, plen) = {
        let Ok(ip) = Ipv6Packet::new_checked(&p.data()[hl..]) else {
            return Triage::Drop(DropReason::Malformed);
        };
        (
            ip.src().octets(),
            ip.dst().octets(),
            ip.next_header(),
            ip.hop_limit(),
            ip.payload_len(),
        )
    };
    let dst_bits = u128::from_be_bytes(dst);
    let local = t.is_local(false, dst_bits);
    let multicast = dst[0] == 0xff;
    if local || (multicast && (dst == ALL_NODES || is_solicited_node_of(&dst, info))) {
        return match nh {
            // Neighbour discovery only from on-link senders (RFC 4861 §7.1: hop limit
            // 255); other ICMPv6 (ping) from anywhere.
            proto::ICMPV6 => icmpv6_local(
                p,
                hl,
                port,
                info,
                cache,
                (src, dst, plen, hop == 255),
                src_mac,
            ),
            proto::FRAGMENT if local => Triage::Fragment(hl),
            proto::ESP | proto::AH | proto::UDP | 0 | 43 | 60 if local => Triage::Pipeline,
            _ => Triage::Drop(DropReason::ToGateway),
        };
    }
    if multicast {
        // MLD reports and other link-local multicast: not ours to forward.
        return Triage::Consumed;
    }
    if hop_limit == HopLimit::Keep {
        return Triage::Pipeline;
    }
    if hop <= 1 {
        return Triage::TimeExceeded(hl);
    }
    p.data_mut()[hl + 7] = hop - 1;
    Triage::Pipeline
}

pub(super) const ALL_NODES: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// The link-layer address option (`kind` 1 source, 2 target) among ND options.
pub(super) fn nd_lladdr(mut opts: &[u8], kind: u8) -> Option<MacAddr> {
    while opts.len() >= 8 {
        let len = usize::from(opts[1]) * 8;
        if len == 0 || len > opts.len() {
            return None;
        }
        if opts[0] == kind && len >= 8 {
            let mut m = [0u8; 6];
            m.copy_from_slice(&opts[2..8]);
            return Some(m);
        }
        opts = &opts[len..];
    }
    None
}

pub(super) fn icmpv6_local(
    p: &mut Packet,
    hl: usize,
    port: u16,
    info: &PortInfo,
    cache: &NeighbourCache,
    (src, dst, plen, on_link_hop): ([u8; 16], [u8; 16], usize, bool),
    src_mac: MacAddr,
) -> Triage {
    let body = {
        let d = p.data();
        match d.get(hl + 40..hl + 40 + plen) {
            Some(b) if b.len() >= 8 => b,
            _ => return Triage::Drop(DropReason::Malformed),
        }
    };
    if icmpv6_checksum(&src, &dst, body) != 0 {
        return Triage::Drop(DropReason::Malformed);
    }
    let kind = body[0];
    match kind {
        ND_NS | ND_NA if !on_link_hop => Triage::Drop(DropReason::Malformed),
        ND_NS | ND_NA if body.len() >= 24 => {
            let mut target = [0u8; 16];
            target.copy_from_slice(&body[8..24]);
            let target_bits = u128::from_be_bytes(target);
            if kind == ND_NA {
                let mac = nd_lladdr(&body[24..], 2).unwrap_or(src_mac);
                // An advertisement answers the gateway's solicitation, whose entry exists:
                // unsolicited ones only refresh what is known.
                if on_link(info, IpAddr::from(target)) || target[0..2] == [0xfe, 0x80] {
                    cache.refresh(port, false, target_bits, mac);
                }
                return Triage::Consumed;
            }
            let unspecified = src == [0; 16];
            let sll = nd_lladdr(&body[24..], 1);
            let for_us = info
                .addresses
                .iter()
                .any(|a| a.addr == IpAddr::from(target));
            if !unspecified {
                if let Some(m) = sll {
                    // As for ARP: only a solicitation for the gateway adds an entry.
                    if for_us {
                        cache.learn(port, false, u128::from_be_bytes(src), m);
                    } else {
                        cache.refresh(port, false, u128::from_be_bytes(src), m);
                    }
                }
            }
            if !info
                .addresses
                .iter()
                .any(|a| a.addr == IpAddr::from(target))
            {
                return Triage::Consumed;
            }
            // Neighbour advertisement: solicited (unless answering DAD), override.
            let (na_dst, flags) = if unspecified {
                (ALL_NODES, 0x20)
            } else {
                (src, 0x60)
            };
            let eth_dst = if unspecified {
                [0x33, 0x33, 0, 0, 0, 1]
            } else {
                sll.unwrap_or(src_mac)
            };
            let mut f = [0u8; HEADER_LEN + 40 + 32];
            f[0..6].copy_from_slice(&eth_dst);
            f[6..12].copy_from_slice(&info.mac);
            f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            let ip = &mut f[HEADER_LEN..];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&32u16.to_be_bytes());
            ip[6] = proto::ICMPV6;
            ip[7] = 255;
            ip[8..24].copy_from_slice(&target);
            ip[24..40].copy_from_slice(&na_dst);
            let icmp = &mut ip[40..];
            icmp[0] = ND_NA;
            icmp[4] = flags;
            icmp[8..24].copy_from_slice(&target);
            icmp[24] = 2;
            icmp[25] = 1;
            icmp[26..32].copy_from_slice(&info.mac);
            let c = icmpv6_checksum(&target, &na_dst, icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            let in_port = p.in_port;
            if p.load(&f).is_err() {
                return Triage::Drop(DropReason::TooBig);
            }
            p.in_port = in_port;
            Triage::Reply
        }
        128 if dst[0] != 0xff => {
            // Echo request to one of our unicast addresses.
            p.truncate(hl + 40 + plen);
            let d = p.data_mut();
            reflect_ethernet(d, info.mac);
            let ip = &mut d[hl..];
            ip[8..24].copy_from_slice(&dst);
            ip[24..40].copy_from_slice(&src);
            ip[7] = 64;
            let icmp = &mut ip[40..];
            icmp[0] = 129;
            icmp[2] = 0;
            icmp[3] = 0;
            let c = icmpv6_checksum(&dst, &src, icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            Triage::Reply
        }
        // Router solicitations/advertisements, redirects, MLD, echo replies: not ours.
        _ => Triage::Consumed,
    }
}
