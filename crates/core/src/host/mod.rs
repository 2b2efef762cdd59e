//! The gateway as a host on its links: it owns its ports' addresses, answers ARP and
//! IPv6 neighbour solicitations for them, answers ping, learns its neighbours, decrements
//! TTL / hop limit on what it forwards, and builds the ICMP errors a router sends
//! (time exceeded, fragmentation needed, packet too big).
//!
//! Sans-I/O like the pipeline: [`triage`] looks at one received frame before the
//! pipeline does and says what to do with it; replies are built in the packet's own
//! buffer. Every read is bounds-checked: a short or odd frame is dropped, never a panic.
//!
//! This file: the triage itself, with the IPv4 and IPv6 fast paths every data packet
//! takes, and the IPv4 half (TTL); `arp` answers and learns ARP; `nd` is the IPv6 half
//! (neighbour discovery, hop limit); `icmp` builds echo replies and ICMP errors.

use std::net::IpAddr;

use espgw_wire::arp as wire_arp;
use espgw_wire::ethernet;
use espgw_wire::ethernet::{
    EthernetFrame, MacAddr, ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, HEADER_LEN,
};
use espgw_wire::icmp::{self as wire_icmp, IcmpHeader};
use espgw_wire::ipv4::Ipv4Packet;
use espgw_wire::ipv6::Ipv6Packet;
use espgw_wire::ipv6::Ipv6Repr;
use espgw_wire::nd as wire_nd;
use espgw_wire::{checksum, proto};
use std::net::Ipv6Addr;

use crate::counters::DropReason;
use crate::flow::IpInfo;
use crate::neighbour::NeighbourCache;
use crate::packet::{Packet, Verdict};
use crate::tables::{PortInfo, Tables};

mod arp;
mod icmp;
mod nd;
#[cfg(test)]
mod tests;

use icmp::echo_reply_v4;
pub use icmp::{build_icmp_error, icmpv6_checksum, IcmpError};
use nd::ipv6;
pub(crate) use nd::ND_NA;

/// What to do with a received frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Triage {
    /// On to the data-plane pipeline.
    Pipeline,
    /// Answered in place: send the frame back out of the port it came in on.
    Reply,
    /// Handled (an ARP reply learned from, a router advertisement ignored).
    Consumed,
    /// Dropped, and counted for this reason.
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
    if let Some((fast, ttl_due)) = ipv4_fast(p.data(), t, hop) {
        if ttl_due {
            decrement_ttl_v4(&mut p.data_mut()[HEADER_LEN..]);
        }
        return fast;
    }
    if let Some((fast, hop_due)) = ipv6_fast(p.data(), t, hop) {
        if hop_due {
            decrement_hop_limit_v6(&mut p.data_mut()[HEADER_LEN..]);
        }
        return fast;
    }
    triage_general(p, port, info, t, cache, hop)
}

/// [`triage_with`], inlined into the caller's loop over a burst so that the common case
/// (the IPv4 and IPv6 fast paths) costs no call. The `bool`: the TTL or hop limit is still
/// to be decremented ([`decrement_hop`]).
#[inline(always)]
pub fn triage_inline(
    p: &mut Packet,
    port: u16,
    t: &Tables,
    cache: &NeighbourCache,
    hop: HopLimit,
) -> (Triage, bool) {
    if usize::from(port) < t.ports.len() {
        if let Some(fast) = ipv4_fast(p.data(), t, hop) {
            return fast;
        }
        if let Some(fast) = ipv6_fast(p.data(), t, hop) {
            return fast;
        }
    }
    (triage_with(p, port, t, cache, hop), false)
}

/// Decrements the TTL (IPv4, with its checksum) or hop limit (IPv6) of the IP header at
/// the start of `ip`, for a packet a fast path left it due on.
#[inline(always)]
pub fn decrement_hop(ip: &mut [u8], v4: bool) {
    if v4 {
        decrement_ttl_v4(ip);
    } else {
        decrement_hop_limit_v6(ip);
    }
}

/// Decrements the hop limit of the IPv6 header at the start of `ip` (the caller has
/// checked that it is above 1).
#[inline(always)]
fn decrement_hop_limit_v6(ip: &mut [u8]) {
    if let Some(h) = ip.get_mut(7) {
        *h = h.saturating_sub(1);
    }
}

/// Decrements the TTL of the IPv4 header at the start of `ip` and updates its checksum
/// incrementally (RFC 1624). For a packet the fast path forwards; the caller has checked
/// that the header is there and its TTL above 1.
#[inline(always)]
pub fn decrement_ttl_v4(ip: &mut [u8]) {
    if let Some(h) = ip.get_mut(..12) {
        let old = u16::from_be_bytes([h[8], h[9]]);
        let c = checksum::update16(u16::from_be_bytes([h[10], h[11]]), old, old - 0x100);
        h[8] -= 1;
        h[10..12].copy_from_slice(&c.to_be_bytes());
    }
}

/// Everything but the fast path.
fn triage_general(
    p: &mut Packet,
    port: u16,
    info: &PortInfo,
    t: &Tables,
    cache: &NeighbourCache,
    hop: HopLimit,
) -> Triage {
    let (hl, et, src_mac) = match EthernetFrame::new_checked(p.data()) {
        Ok(e) => (e.header_len(), e.ethertype(), e.src()),
        Err(_) => return Triage::Drop(DropReason::Malformed),
    };
    match et {
        ETHERTYPE_ARP => arp::receive(p, hl, port, info, cache),
        ETHERTYPE_IPV4 => ipv4(p, hl, t, hop),
        ETHERTYPE_IPV6 => ipv6(p, hl, (port, info), t, cache, src_mac, hop),
        _ => Triage::Drop(DropReason::NotIp),
    }
}

fn on_link(info: &PortInfo, addr: IpAddr) -> bool {
    info.addresses.iter().any(|p| p.contains(addr))
}

/// The common case, decided from one read of the first 34 bytes: an untagged IPv4 frame
/// without options or fragmentation, either ESP / AH for the gateway or unicast to forward
/// (the `bool`: its TTL is still to be decremented, by [`decrement_ttl_v4`]; never under
/// [`HopLimit::Keep`], which forwards it as it is). `None`: the general path decides, with
/// the same outcome for these frames. This is the per-packet cost the host stage adds to
/// every data packet, so it reads each byte once and writes none: the pipeline parses the
/// header next, and a TTL and checksum written here just before would be read back through
/// a store-forwarding stall (perf, `bench dataplane`); the pipeline decrements once it has
/// read the header.
#[inline(always)]
fn ipv4_fast(d: &[u8], t: &Tables, hop: HopLimit) -> Option<(Triage, bool)> {
    let len = d.len();
    let h: &[u8; HEADER_LEN + 20] = d.get(..HEADER_LEN + 20)?.try_into().ok()?;
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
    fast_decision(t, hop, dst, protocol, ttl).map(|ttl_due| (Triage::Pipeline, ttl_due))
}

/// The fast path's rule for an untagged, option-free, unfragmented IPv4 packet to `dst`:
/// `Some(ttl_due)` where it goes on to the pipeline (ESP or AH for the gateway, or unicast
/// to forward with TTL to spare), `None` where the general path decides. One rule for
/// both readers of the header, [`ipv4_fast`] and [`triage_parsed`].
#[inline(always)]
fn fast_decision(t: &Tables, hop: HopLimit, dst: u32, protocol: u8, ttl: u8) -> Option<bool> {
    if t.is_local(true, u128::from(dst)) {
        return matches!(protocol, proto::ESP | proto::AH).then_some(false);
    }
    if dst == u32::MAX || dst >> 28 == 0xe {
        return None;
    }
    // A bump in the wire forwards whatever the TTL, and leaves it as it is.
    if hop == HopLimit::Keep {
        return Some(false);
    }
    if ttl <= 1 {
        return None;
    }
    Some(true)
}

/// The IPv6 counterpart of [`ipv4_fast`], decided from one read of the first 54 bytes: an
/// untagged IPv6 frame whose payload length fits, either ESP or UDP for the gateway (the
/// next headers the general path hands the pipeline that the pipeline's one read of the
/// header also takes) or unicast to forward with hop limit to spare (the `bool`: still to
/// be decremented, by [`decrement_hop`]). `None`: the general path (`nd::ipv6`: neighbour
/// discovery, ping, multicast, fragments, expiry) decides, with the same outcome for these.
#[inline(always)]
fn ipv6_fast(d: &[u8], t: &Tables, hop: HopLimit) -> Option<(Triage, bool)> {
    let h: &[u8; HEADER_LEN + 40] = d.get(..HEADER_LEN + 40)?.try_into().ok()?;
    let payload_len = usize::from(u16::from_be_bytes([h[18], h[19]]));
    if h[12..14] != ETHERTYPE_IPV6.to_be_bytes()
        || h[14] >> 4 != 6
        || HEADER_LEN + 40 + payload_len > d.len()
    {
        return None;
    }
    let mut dst = [0u8; 16];
    dst.copy_from_slice(&h[38..54]);
    fast_decision_v6(t, hop, u128::from_be_bytes(dst), h[20], h[21])
        .map(|hop_due| (Triage::Pipeline, hop_due))
}

/// The IPv6 fast paths' rule ([`ipv6_fast`], [`triage_parsed`]), the general path's
/// (`nd::ipv6`) where it is this simple: `Some(hop_due)` where the packet goes on to the
/// pipeline, `None` where the general path decides. Out of line: inlined into the pass it
/// cost IPv4 packets registers (callgrind, 64 bytes).
#[inline(never)]
fn fast_decision_v6(
    t: &Tables,
    hop: HopLimit,
    dst: u128,
    next_header: u8,
    hop_limit: u8,
) -> Option<bool> {
    if t.is_local(false, dst) {
        return matches!(next_header, proto::ESP | proto::UDP).then_some(false);
    }
    if dst >> 120 == 0xff {
        // Multicast: neighbour discovery and the like, not forwarded.
        return None;
    }
    if hop == HopLimit::Keep {
        return Some(false);
    }
    if hop_limit <= 1 {
        return None;
    }
    Some(true)
}

/// `ipv4_fast`'s decision for a frame whose headers the pipeline has read already
/// (`info`, from [`crate::flow::parse_ipv4_no_options`] behind an untagged Ethernet header:
/// the frame `ipv4_fast` looks at, its checksum right), taken from the parsed fields, so
/// that one read of the header serves both: `Some(ttl_due)` where `ipv4_fast` would give
/// the pipeline the frame, `None` where the general path decides.
///
/// Likewise `ipv6_fast`'s for an IPv6 frame the pipeline read
/// ([`crate::flow::parse_ipv6_no_extensions`]: no extension headers, payload length fits).
#[inline(always)]
pub fn triage_parsed(info: &IpInfo, port: u16, t: &Tables, hop: HopLimit) -> Option<bool> {
    if usize::from(port) >= t.ports.len() || info.is_fragment {
        return None;
    }
    if info.key.v4 {
        // An IPv4 address sits in the key's low 32 bits.
        fast_decision(t, hop, info.key.dst as u32, info.key.proto, info.ttl)
    } else {
        fast_decision_v6(t, hop, info.key.dst, info.key.proto, info.ttl)
    }
}

/// Swaps the Ethernet source and destination (a reply to the sender's MAC).
fn reflect_ethernet(d: &mut [u8], our_mac: MacAddr) {
    if let Ok(mut e) = EthernetFrame::new_checked(d) {
        e.reflect(our_mac);
    }
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
    // (The general path: the fast one above takes the common case.)
    let Ok(mut ip) = Ipv4Packet::new_checked(&mut p.data_mut()[hl..]) else {
        return Triage::Drop(DropReason::Malformed);
    };
    ip.set_ttl_updating_checksum(ttl - 1);
    Triage::Pipeline
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
            if ethernet::emit(&mut f, [0xff; 6], info.mac, ETHERTYPE_ARP).is_err() {
                return false;
            }
            let request = wire_arp::emit(
                &mut f[HEADER_LEN..],
                wire_arp::OP_REQUEST,
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
            // To the target's solicited-node multicast address (RFC 4291 §2.7.1).
            let mut dst = [0xff, 2, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 0xff, 0, 0, 0];
            dst[13..].copy_from_slice(&t[13..]);
            let dst = Ipv6Addr::from(dst);
            let mut f = [0u8; HEADER_LEN + 40 + wire_nd::LEN_WITH_LL_OPTION];
            let eth_dst = [0x33, 0x33, 0xff, t[13], t[14], t[15]];
            let written = ethernet::emit(&mut f, eth_dst, info.mac, ETHERTYPE_IPV6).is_ok()
                && nd::nd_ipv6_header(a, dst)
                    .emit(&mut f[HEADER_LEN..])
                    .is_ok()
                && wire_nd::emit(
                    &mut f[HEADER_LEN + 40..],
                    wire_nd::NEIGHBOR_SOLICITATION,
                    0,
                    t,
                    (wire_nd::OPT_SOURCE_LL, info.mac),
                    (a, dst),
                )
                .is_ok();
            if !written {
                return false;
            }
            p.load(&f)
        }
    };
    p.verdict = Verdict::Pending;
    res.is_ok()
}
