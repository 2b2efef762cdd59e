//! The gateway as a host on its links: it owns its ports' addresses, answers ARP and
//! IPv6 neighbour solicitations for them, answers ping, learns its neighbours, decrements
//! TTL / hop limit on what it forwards, and builds the ICMP errors a router sends
//! (time exceeded, fragmentation needed, packet too big).
//!
//! Sans-I/O like the pipeline: [`triage`] looks at one received frame before the
//! pipeline does and says what to do with it; replies are built in the packet's own
//! buffer. Every read is bounds-checked: a short or odd frame is dropped, never a panic.

use std::net::IpAddr;

use espgw_wire::ethernet::{
    EthernetFrame, MacAddr, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, HEADER_LEN,
};
use espgw_wire::icmp::{self, IcmpHeader};
use espgw_wire::ipv4::Ipv4Packet;
use espgw_wire::ipv6::Ipv6Packet;
use espgw_wire::{arp, checksum, proto};

use crate::counters::DropReason;
use crate::neighbour::NeighbourCache;
use crate::packet::{Packet, Verdict};
use crate::tables::{PortInfo, Tables};

const ND_NS: u8 = 135;
/// ICMPv6 neighbour advertisement (RFC 4861 §4.4).
pub(crate) const ND_NA: u8 = 136;

/// What to do with a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Triage {
    /// On to the data-plane pipeline.
    Pipeline,
    /// Answered in place: send the frame back out of the port it came in on.
    Reply,
    /// Handled (an ARP reply learned from, a router advertisement ignored).
    Consumed,
    Drop(DropReason),
    /// A fragment addressed to the gateway (fragmented ESP): reassemble it first. Holds
    /// the Ethernet header length.
    Fragment(usize),
    /// TTL / hop limit ran out: answer with ICMP time exceeded. Holds the Ethernet header
    /// length (the IP packet follows it).
    TimeExceeded(usize),
}

/// What forwarding does to the TTL / hop limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum HopLimit {
    /// As a router: decrement it, and answer expiry with ICMP time exceeded (RFC 1812
    /// §5.3.1, RFC 8200 §3; RFC 4301 §5.1.2 has the encapsulating gateway do so too).
    #[default]
    Decrement,
    /// Leave it alone, as a bump in the wire (DPDK ipsec-secgw) does: the offline gateway,
    /// whose captures are compared byte for byte with other implementations'.
    Keep,
}

/// Classifies one frame received on `port` (Ethernet header at the packet's start), as a
/// router does ([`HopLimit::Decrement`]).
pub fn triage(p: &mut Packet, port: u16, t: &Tables, cache: &NeighbourCache) -> Triage {
    triage_with(p, port, t, cache, HopLimit::Decrement)
}

/// [`triage`], with the TTL / hop limit treated as `hop` says.
pub fn triage_with(
    p: &mut Packet,
    port: u16,
    t: &Tables,
    cache: &NeighbourCache,
    hop: HopLimit,
) -> Triage {
    let Some(info) = t.ports.get(usize::from(port)) else {
        return Triage::Drop(DropReason::Malformed);
    };
    if let Some(fast) = ipv4_fast(p.data_mut(), t, hop) {
        return fast;
    }
    let (hl, et, src_mac) = match EthernetFrame::new_checked(p.data()) {
        Ok(e) => (e.header_len(), e.ethertype(), e.src()),
        Err(_) => return Triage::Drop(DropReason::Malformed),
    };
    match et {
        ETHERTYPE_ARP => arp(p, hl, port, info, cache),
        ETHERTYPE_IPV4 => ipv4(p, hl, t, hop),
        ETHERTYPE_IPV6 => ipv6(p, hl, (port, info), t, cache, src_mac, hop),
        _ => Triage::Drop(DropReason::NotIp),
    }
}

fn on_link(info: &PortInfo, addr: IpAddr) -> bool {
    info.addresses.iter().any(|p| p.contains(addr))
}

fn arp(p: &mut Packet, hl: usize, port: u16, info: &PortInfo, cache: &NeighbourCache) -> Triage {
    let d = p.data_mut();
    // Ethernet / IPv4 ARP only (the view refuses anything else).
    let Some(mut a) = d
        .get_mut(hl..)
        .and_then(|b| arp::ArpPacket::new_checked(b).ok())
    else {
        return Triage::Drop(DropReason::Malformed);
    };
    let (sha, spa, tpa) = (a.sender_mac(), a.sender_ip(), a.target_ip());
    let sender = IpAddr::from(spa);
    let target = IpAddr::from(tpa);
    let for_us = info.addresses.iter().any(|p| p.addr == target);
    if spa != [0; 4] && on_link(info, sender) && sha[0] & 1 == 0 {
        // ARP for the gateway teaches a new neighbour; other ARP on the link only
        // refreshes one it knows (a spoofing sender cannot fill the table).
        let spa_bits = u128::from(u32::from_be_bytes(spa));
        if for_us {
            cache.learn(port, true, spa_bits, sha);
        } else {
            cache.refresh(port, true, spa_bits, sha);
        }
    }
    if a.op() != arp::OP_REQUEST || !for_us {
        return Triage::Consumed;
    }
    // Request for one of our addresses: turn it into the reply.
    a.set_op(arp::OP_REPLY);
    a.set_target(sha, spa);
    a.set_sender(info.mac, tpa);
    d[0..6].copy_from_slice(&sha);
    d[6..12].copy_from_slice(&info.mac);
    Triage::Reply
}

/// The common case, decided from one read of the first 34 bytes: an untagged IPv4 frame
/// without options or fragmentation, either ESP / AH for the gateway or unicast to forward
/// (TTL decremented here, with the checksum updated incrementally, RFC 1624). `None`: the
/// general path decides, with the same outcome for these frames. This is the per-packet
/// cost the host stage adds to every data packet, so it reads each byte once.
#[inline(always)]
fn ipv4_fast(d: &mut [u8], t: &Tables, hop: HopLimit) -> Option<Triage> {
    let len = d.len();
    let h: &mut [u8; HEADER_LEN + 20] = d.get_mut(..HEADER_LEN + 20)?.try_into().ok()?;
    let total = usize::from(u16::from_be_bytes([h[16], h[17]]));
    let fragmented = (h[20] & 0x3f) | h[21] != 0;
    if h[12..14] != ETHERTYPE_IPV4.to_be_bytes()
        || h[14] != 0x45
        || fragmented
        || total < 20
        || HEADER_LEN + total > len
    {
        return None;
    }
    let (ttl, protocol) = (h[22], h[23]);
    let dst = u32::from_be_bytes([h[30], h[31], h[32], h[33]]);
    if t.is_local(true, u128::from(dst)) {
        return matches!(protocol, proto::ESP | proto::AH).then_some(Triage::Pipeline);
    }
    if dst == u32::MAX || dst >> 28 == 0xe || hop == HopLimit::Keep || ttl <= 1 {
        return None;
    }
    h[22] = ttl - 1;
    let old = u16::from_be_bytes([ttl, protocol]);
    let c = checksum::update16(u16::from_be_bytes([h[24], h[25]]), old, old - 0x100);
    h[24..26].copy_from_slice(&c.to_be_bytes());
    Some(Triage::Pipeline)
}

/// Swaps the Ethernet source and destination (a reply to the sender's MAC).
fn reflect_ethernet(d: &mut [u8], our_mac: MacAddr) {
    let mut src = [0u8; 6];
    src.copy_from_slice(&d[6..12]);
    d[0..6].copy_from_slice(&src);
    d[6..12].copy_from_slice(&our_mac);
}

fn ipv4(p: &mut Packet, hl: usize, t: &Tables, hop: HopLimit) -> Triage {
    let (ihl, total, dst, proto, ttl, frag, dport, icmp_type) = {
        let Ok(ip) = Ipv4Packet::new_checked(&p.data()[hl..]) else {
            return Triage::Drop(DropReason::Malformed);
        };
        let pl = ip.payload();
        let dport = if pl.len() >= 4 {
            u16::from_be_bytes([pl[2], pl[3]])
        } else {
            0
        };
        (
            ip.header_len(),
            ip.total_len(),
            u32::from(ip.dst()),
            ip.protocol(),
            ip.ttl(),
            ip.is_fragment(),
            dport,
            pl.first().copied(),
        )
    };
    if t.is_local(true, u128::from(dst)) {
        if frag {
            return Triage::Fragment(hl);
        }
        return match proto {
            proto::ESP | proto::AH => Triage::Pipeline,
            proto::UDP if t.udp_encap_ports.contains(&dport) => Triage::Pipeline,
            proto::ICMP if icmp_type == Some(8) => echo_reply_v4(p, hl, ihl, total, t),
            _ => Triage::Drop(DropReason::ToGateway),
        };
    }
    if dst == u32::MAX || dst >> 28 == 0xe {
        // Broadcast and multicast are not forwarded.
        return Triage::Drop(DropReason::ToGateway);
    }
    if hop == HopLimit::Keep {
        return Triage::Pipeline;
    }
    if ttl <= 1 {
        return Triage::TimeExceeded(hl);
    }
    let d = &mut p.data_mut()[hl..];
    d[8] = ttl - 1;
    let old = u16::from_be_bytes([ttl, proto]);
    let new = u16::from_be_bytes([ttl - 1, proto]);
    let c = checksum::update16(u16::from_be_bytes([d[10], d[11]]), old, new);
    d[10..12].copy_from_slice(&c.to_be_bytes());
    Triage::Pipeline
}

fn echo_reply_v4(p: &mut Packet, hl: usize, ihl: usize, total: usize, t: &Tables) -> Triage {
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
    icmp.set_msg_type(icmp::ECHO_REPLY);
    icmp.fill_checksum();
    Triage::Reply
}

fn is_solicited_node_of(dst: &[u8; 16], info: &PortInfo) -> bool {
    dst[..13] == [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff]
        && info.addresses.iter().any(|a| match a.addr {
            IpAddr::V6(v) => v.octets()[13..] == dst[13..],
            IpAddr::V4(_) => false,
        })
}

fn ipv6(
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

const ALL_NODES: [u8; 16] = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1];

/// The link-layer address option (`kind` 1 source, 2 target) among ND options.
fn nd_lladdr(mut opts: &[u8], kind: u8) -> Option<MacAddr> {
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

fn icmpv6_local(
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

/// The ICMPv6 checksum of `body` (RFC 4443 §2.3: over the pseudo-header too). Over a
/// body whose checksum field is filled in, a correct packet gives 0.
pub fn icmpv6_checksum(src: &[u8; 16], dst: &[u8; 16], body: &[u8]) -> u16 {
    let mut s = checksum::sum(src, 0);
    s = checksum::sum(dst, s);
    s = checksum::sum(&(body.len() as u32).to_be_bytes(), s);
    s = checksum::sum(&[0, 0, 0, proto::ICMPV6], s);
    checksum::finish(checksum::sum(body, s))
}

/// An ARP request (IPv4) or neighbour solicitation (IPv6) for `target` from `info`'s
/// address of that family, written into `p` as a frame. False if the port has no
/// address of the family.
pub fn build_solicitation(p: &mut Packet, info: &PortInfo, v4: bool, target: u128) -> bool {
    let Some(our) = info.address(v4) else {
        return false;
    };
    let res = match our {
        IpAddr::V4(a) => {
            let mut f = [0u8; HEADER_LEN + 28];
            f[0..6].copy_from_slice(&[0xff; 6]);
            f[6..12].copy_from_slice(&info.mac);
            f[12..14].copy_from_slice(&ETHERTYPE_ARP.to_be_bytes());
            let request = arp::emit(
                &mut f[HEADER_LEN..],
                arp::OP_REQUEST,
                (info.mac, a.octets()),
                ([0; 6], (target as u32).to_be_bytes()),
            );
            if request.is_err() {
                return false;
            }
            p.load(&f)
        }
        IpAddr::V6(a) => {
            let t = target.to_be_bytes();
            let mut dst = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
            dst[13..].copy_from_slice(&t[13..]);
            let mut f = [0u8; HEADER_LEN + 40 + 32];
            f[0..6].copy_from_slice(&[0x33, 0x33, 0xff, t[13], t[14], t[15]]);
            f[6..12].copy_from_slice(&info.mac);
            f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
            let ip = &mut f[HEADER_LEN..];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&32u16.to_be_bytes());
            ip[6] = proto::ICMPV6;
            ip[7] = 255;
            ip[8..24].copy_from_slice(&a.octets());
            ip[24..40].copy_from_slice(&dst);
            let icmp = &mut ip[40..];
            icmp[0] = ND_NS;
            icmp[8..24].copy_from_slice(&t);
            icmp[24] = 1;
            icmp[25] = 1;
            icmp[26..32].copy_from_slice(&info.mac);
            let c = icmpv6_checksum(&a.octets(), &dst, icmp);
            icmp[2..4].copy_from_slice(&c.to_be_bytes());
            p.load(&f)
        }
    };
    p.verdict = Verdict::Pending;
    res.is_ok()
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
fn may_answer(orig: &[u8]) -> bool {
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

#[cfg(test)]
mod tests {
    use super::*;
    use espgw_config::{Config, PortConfig, Prefix};
    use espgw_crypto::default_provider;

    fn tables() -> Tables {
        let mut c = Config {
            burst: 32,
            ..Config::default()
        };
        let mut port = espgw_config::implied_port(0);
        port.addresses = vec![
            Prefix {
                addr: "198.51.100.1".parse().unwrap(),
                len: 24,
            },
            Prefix {
                addr: "2001:db8:100::1".parse().unwrap(),
                len: 64,
            },
        ];
        let _: &PortConfig = &port;
        c.ports.push(port);
        Tables::build(&c, default_provider().as_ref(), None).unwrap()
    }

    fn arp_request(target: [u8; 4]) -> Vec<u8> {
        let mut f = vec![0xff; 6];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 0x22]);
        f.extend_from_slice(&[8, 6, 0, 1, 8, 0, 6, 4, 0, 1]);
        f.extend_from_slice(&[2, 0, 0, 0, 0, 0x22, 198, 51, 100, 2]);
        f.extend_from_slice(&[0; 6]);
        f.extend_from_slice(&target);
        f
    }

    /// The fast path decides exactly as the general one does, byte for byte, wherever it
    /// decides at all: random IPv4 frames (local or not, multicast, fragments, options,
    /// short or long lengths, every TTL and protocol mix) through both.
    #[test]
    fn ipv4_fast_path_agrees_with_the_general_path() {
        use rand::{Rng, SeedableRng};
        let t = tables();
        let mut rng = rand::rngs::StdRng::seed_from_u64(13);
        let dsts = [
            [198, 51, 100, 1],
            [203, 0, 113, 9],
            [224, 0, 0, 5],
            [255; 4],
        ];
        let (mut decided, mut forwarded) = (0, 0);
        for _ in 0..20_000 {
            let payload = rng.gen_range(0..40);
            let mut f = vec![0u8; 14 + 20 + payload];
            rng.fill(&mut f[..]);
            f[12..14].copy_from_slice(&[8, 0]);
            if rng.gen_bool(0.8) {
                f[14] = 0x45;
            }
            if rng.gen_bool(0.7) {
                f[20] &= 0x40;
                f[21] = 0;
            }
            if rng.gen_bool(0.8) {
                let total = (20 + payload - rng.gen_range(0..=payload.min(3))) as u16;
                f[16..18].copy_from_slice(&total.to_be_bytes());
            }
            if rng.gen_bool(0.5) {
                f[23] = [proto::ESP, proto::AH, proto::UDP, proto::ICMP][rng.gen_range(0..4)];
            }
            f[22] = [0, 1, 2, 64, 255][rng.gen_range(0..5)];
            f[30..34].copy_from_slice(&dsts[rng.gen_range(0..dsts.len())]);
            for hop in [HopLimit::Decrement, HopLimit::Keep] {
                let mut fast = f.clone();
                let Some(verdict) = ipv4_fast(&mut fast, &t, hop) else {
                    continue;
                };
                let mut p = Packet::new();
                p.load(&f).unwrap();
                assert_eq!(ipv4(&mut p, 14, &t, hop), verdict, "{f:02x?}");
                assert_eq!(p.data(), &fast[..], "{f:02x?}");
                decided += 1;
                forwarded += usize::from(fast[22] != f[22]);
            }
        }
        // Both kinds of decision were exercised.
        assert!(decided > 2_000 && forwarded > 500, "{decided} {forwarded}");
    }

    #[test]
    fn answers_arp_for_own_address_and_learns_sender() {
        let t = tables();
        let cache = NeighbourCache::default();
        let mut p = Packet::new();
        p.load(&arp_request([198, 51, 100, 1])).unwrap();
        assert_eq!(triage(&mut p, 0, &t, &cache), Triage::Reply);
        let d = p.data();
        assert_eq!(&d[0..6], &[2, 0, 0, 0, 0, 0x22]);
        assert_eq!(u16::from_be_bytes([d[20], d[21]]), 2, "ARP reply");
        assert_eq!(&d[22..28], &t.ports[0].mac);
        assert_eq!(&d[28..32], &[198, 51, 100, 1]);
        assert_eq!(&d[38..42], &[198, 51, 100, 2]);
        assert_eq!(cache.get(true, 0xc633_6402), Some([2, 0, 0, 0, 0, 0x22]));
        // Not ours: learned from, not answered.
        p.load(&arp_request([198, 51, 100, 9])).unwrap();
        assert_eq!(triage(&mut p, 0, &t, &cache), Triage::Consumed);
        // Truncated.
        p.load(&arp_request([198, 51, 100, 1])[..30]).unwrap();
        assert_eq!(
            triage(&mut p, 0, &t, &cache),
            Triage::Drop(DropReason::Malformed)
        );
    }

    #[test]
    fn solicitation_round_trip_v6() {
        // Our own NS for our own address, fed back in, is answered with a valid NA.
        let t = tables();
        let cache = NeighbourCache::default();
        let mut p = Packet::new();
        let ours = u128::from("2001:db8:100::1".parse::<std::net::Ipv6Addr>().unwrap());
        assert!(build_solicitation(&mut p, &t.ports[0], false, ours));
        assert_eq!(triage(&mut p, 0, &t, &cache), Triage::Reply);
        let d = p.data();
        let ip = &d[14..];
        assert_eq!(ip[40], ND_NA);
        let mut s = [0u8; 16];
        s.copy_from_slice(&ip[8..24]);
        let mut dd = [0u8; 16];
        dd.copy_from_slice(&ip[24..40]);
        assert_eq!(icmpv6_checksum(&s, &dd, &ip[40..]), 0);
        // The NA teaches the sender of the NS (here: ourselves) our MAC.
        assert_eq!(triage(&mut p, 0, &t, &cache), Triage::Consumed);
        assert_eq!(cache.get(false, ours), Some(t.ports[0].mac));
    }

    #[test]
    fn ttl_and_errors() {
        let t = tables();
        let cache = NeighbourCache::default();
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0x22, 8, 0];
        let mut ip = [0u8; 28];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&28u16.to_be_bytes());
        ip[8] = 1;
        ip[9] = 17;
        ip[12..16].copy_from_slice(&[198, 51, 100, 2]);
        ip[16..20].copy_from_slice(&[203, 0, 113, 2]);
        let c = checksum::checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        let mut p = Packet::new();
        p.load(&f).unwrap();
        assert_eq!(triage(&mut p, 0, &t, &cache), Triage::TimeExceeded(14));
        let mut e = Packet::new();
        let src: IpAddr = "198.51.100.1".parse().unwrap();
        assert!(build_icmp_error(
            &mut e,
            &p.data()[14..],
            IcmpError::TooBig(1400),
            src
        ));
        let d = e.data();
        assert_eq!(checksum::checksum(&d[..20]), 0);
        assert_eq!(checksum::checksum(&d[20..]), 0);
        assert_eq!((d[20], d[21]), (3, 4));
        assert_eq!(u16::from_be_bytes([d[26], d[27]]), 1400);
        assert_eq!(&d[16..20], &[198, 51, 100, 2]);
        // No error about an error.
        let err_copy = d.to_vec();
        assert!(!build_icmp_error(
            &mut e,
            &err_copy,
            IcmpError::TimeExceeded,
            src
        ));
        // TTL 2 is decremented, the checksum stays valid.
        p.data_mut()[14 + 8] = 2;
        let c = {
            let ipb = &mut p.data_mut()[14..34];
            ipb[10] = 0;
            ipb[11] = 0;
            checksum::checksum(ipb)
        };
        p.data_mut()[24..26].copy_from_slice(&c.to_be_bytes());
        assert_eq!(triage(&mut p, 0, &t, &cache), Triage::Pipeline);
        assert_eq!(p.data()[22], 1);
        assert_eq!(checksum::checksum(&p.data()[14..34]), 0);
    }

    #[test]
    fn never_panics_on_garbage() {
        let t = tables();
        let cache = NeighbourCache::default();
        let mut p = Packet::new();
        let mut e = Packet::new();
        let src: IpAddr = "198.51.100.1".parse().unwrap();
        let src6: IpAddr = "2001:db8:100::1".parse().unwrap();
        let mut x: u64 = 0x1234_5678_9abc_def0;
        for len in 0..400usize {
            for et in [0x0806u16, 0x0800, 0x86dd] {
                let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
                f.extend_from_slice(&et.to_be_bytes());
                for _ in 0..len {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    f.push(x as u8);
                }
                if f.len() > 14 {
                    f[14] = if et == 0x86dd { 0x60 } else { 0x45 };
                }
                p.load(&f).unwrap();
                let _ = triage(&mut p, 0, &t, &cache);
                let _ = build_icmp_error(&mut e, &f[14..], IcmpError::TooBig(1280), src);
                let _ = build_icmp_error(&mut e, &f[14..], IcmpError::TimeExceeded, src6);
            }
        }
    }
}
