//! IPv6 neighbour discovery (RFC 4861) for the gateway's own addresses, and the IPv6 half
//! of host triage: what is for the gateway, what is link-local multicast, hop limit.

use super::*;

pub(super) const ND_NS: u8 = 135;
/// ICMPv6 echo reply (RFC 4443 §4.2).
const ECHO_REPLY_V6: u8 = 129;

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
    let Ok(mut ip) = Ipv6Packet::new_checked(&mut p.data_mut()[hl..]) else {
        return Triage::Drop(DropReason::Malformed);
    };
    ip.set_hop_limit(hop - 1);
    Triage::Pipeline
}

pub(super) const ALL_NODES: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

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
        ND_NS | ND_NA => {
            let Ok(msg) = wire_nd::NdMessage::new_checked(body) else {
                return Triage::Drop(DropReason::Malformed);
            };
            let target = msg.target();
            let target_bits = u128::from_be_bytes(target);
            if kind == ND_NA {
                let mac = msg.lladdr(wire_nd::OPT_TARGET_LL).unwrap_or(src_mac);
                // An advertisement answers the gateway's solicitation, whose entry exists:
                // unsolicited ones only refresh what is known.
                if on_link(info, IpAddr::from(target)) || target[0..2] == [0xfe, 0x80] {
                    cache.refresh(port, false, target_bits, mac);
                }
                return Triage::Consumed;
            }
            let unspecified = src == [0; 16];
            let sll = msg.lladdr(wire_nd::OPT_SOURCE_LL);
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
            if !for_us {
                return Triage::Consumed;
            }
            // Neighbour advertisement: solicited (unless answering DAD), override.
            let (to, flags) = if unspecified {
                (
                    ([0x33, 0x33, 0, 0, 0, 1], ALL_NODES),
                    wire_nd::FLAG_OVERRIDE,
                )
            } else {
                (
                    (sll.unwrap_or(src_mac), src),
                    wire_nd::FLAG_SOLICITED | wire_nd::FLAG_OVERRIDE,
                )
            };
            advertise(p, info, target, to, flags)
        }
        128 if dst[0] != 0xff => {
            // Echo request to one of our unicast addresses: the reply in place.
            p.truncate(hl + 40 + plen);
            let d = p.data_mut();
            reflect_ethernet(d, info.mac);
            let Ok(mut ip) = Ipv6Packet::new_checked(&mut d[hl..]) else {
                return Triage::Drop(DropReason::Malformed);
            };
            ip.swap_addresses();
            ip.set_hop_limit(64);
            let Ok(mut icmp) = IcmpHeader::new_checked(&mut d[hl + 40..]) else {
                return Triage::Drop(DropReason::Malformed);
            };
            icmp.set_msg_type(ECHO_REPLY_V6);
            icmp.fill_checksum_v6(Ipv6Addr::from(dst), Ipv6Addr::from(src));
            Triage::Reply
        }
        // Router solicitations/advertisements, redirects, MLD, echo replies: not ours.
        _ => Triage::Consumed,
    }
}

/// Answers a solicitation for `target` (one of the gateway's addresses) in `p`'s buffer:
/// an advertisement from `target` to `to` (MAC and IPv6 address) with `flags`.
fn advertise(
    p: &mut Packet,
    info: &PortInfo,
    target: [u8; 16],
    (eth_dst, ip_dst): (MacAddr, [u8; 16]),
    flags: u8,
) -> Triage {
    let (src, dst) = (Ipv6Addr::from(target), Ipv6Addr::from(ip_dst));
    let mut f = [0u8; HEADER_LEN + 40 + wire_nd::LEN_WITH_LL_OPTION];
    let written = ethernet::emit(&mut f, eth_dst, info.mac, ETHERTYPE_IPV6).is_ok()
        && nd_ipv6_header(src, dst).emit(&mut f[HEADER_LEN..]).is_ok()
        && wire_nd::emit(
            &mut f[HEADER_LEN + 40..],
            wire_nd::NEIGHBOR_ADVERTISEMENT,
            flags,
            target,
            (wire_nd::OPT_TARGET_LL, info.mac),
            (src, dst),
        )
        .is_ok();
    let in_port = p.in_port;
    if !written || p.load(&f).is_err() {
        return Triage::Drop(DropReason::TooBig);
    }
    p.in_port = in_port;
    Triage::Reply
}

/// The IPv6 header of a neighbour discovery message: hop limit 255, which receivers
/// check (RFC 4861 §7.1), and one link-layer address option.
pub(super) fn nd_ipv6_header(src: Ipv6Addr, dst: Ipv6Addr) -> Ipv6Repr {
    Ipv6Repr {
        src,
        dst,
        next_header: proto::ICMPV6,
        traffic_class: 0,
        flow_label: 0,
        hop_limit: 255,
        payload_len: wire_nd::LEN_WITH_LL_OPTION,
    }
}
