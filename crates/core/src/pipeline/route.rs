//! Routing: longest-prefix match, the next hop's MAC, the Ethernet header; packets whose
//! next hop is unresolved are reported for the node to hold.

use super::*;

impl Pipeline {
    /// Routes one packet to `dst`: through the burst's route cache, the Ethernet header
    /// and verdict (inlined into the pass over the burst: the hit is a compare and a copy).
    #[inline(always)]
    pub(super) fn route(&mut self, t: &Tables, p: &mut Packet, index: usize, v4: bool, dst: u128) {
        let hop = match self.route_cache {
            Some((cv4, cdst, hop)) if cv4 == v4 && cdst == dst => hop,
            _ => {
                let hop = next_hop(t, v4, dst);
                self.route_cache = Some((v4, dst, hop));
                hop
            }
        };
        match hop {
            Hop::To(port, ref eth) => self.send_with(p, port, eth),
            Hop::NoRoute => self.drop_pkt(p, DropReason::NoRoute),
            Hop::Unresolved(port, next_hop) => {
                // Not counted as a drop yet: the caller may hold the packet until the
                // next hop answers.
                p.verdict = Verdict::Drop(DropReason::NoNeighbour);
                self.unresolved.push(Unresolved {
                    index,
                    port,
                    v4,
                    next_hop,
                });
            }
        }
    }

    /// Adds the Ethernet header for `mac` on `port` to an IP packet and marks it for
    /// transmission (also used for packets that waited for their next hop).
    pub fn send_to(&mut self, t: &Tables, p: &mut Packet, port: u16, mac: MacAddr, v4: bool) {
        self.send_with(p, port, &ethernet_header(t, port, mac, v4));
    }

    /// Puts `eth` in front of an IP packet and marks it for transmission on `port`.
    #[inline]
    fn send_with(&mut self, p: &mut Packet, port: u16, eth: &[u8; ethernet::HEADER_LEN]) {
        let Some(d) = p.push_front(ethernet::HEADER_LEN) else {
            return self.drop_pkt(p, DropReason::TooBig);
        };
        if let Some(h) = d.get_mut(..ethernet::HEADER_LEN) {
            h.copy_from_slice(eth);
        }
        p.verdict = Verdict::Forward(port);
        self.counters.tx_packets += 1;
        self.counters.tx_bytes += p.len() as u64;
    }

    /// Routes a packet the gateway itself originates (ICMP errors): `p` holds an IP
    /// packet. Sets its verdict like [`Pipeline::process`] does; an unresolved next hop
    /// is reported in [`Pipeline::take_unresolved`] with index `usize::MAX`.
    pub fn route_local(&mut self, p: &mut Packet) {
        let t = self.tables.clone();
        self.route_cache = None;
        match parse_ip(p.data()) {
            Ok(info) => self.route(&t, p, usize::MAX, info.key.v4, info.key.dst),
            Err(r) => self.drop_pkt(p, r),
        }
    }
}

/// Where packets to one destination go: found once per destination and burst (the route
/// cache), so each packet only copies the Ethernet header made here.
#[derive(Clone, Copy)]
pub(super) enum Hop {
    /// Out of this port, with this Ethernet header.
    To(u16, [u8; ethernet::HEADER_LEN]),
    NoRoute,
    Unresolved(u16, u128),
}

/// The longest-prefix match for `dst` and its next hop's link-layer address.
#[inline(never)]
fn next_hop(t: &Tables, v4: bool, dst: u128) -> Hop {
    let Some(r) = t.routes.lookup(v4, dst) else {
        return Hop::NoRoute;
    };
    let nh = r.next_hop(dst);
    match t.neighbours.lookup(r.port, v4, nh) {
        Some(mac) => Hop::To(r.port, ethernet_header(t, r.port, mac, v4)),
        None => Hop::Unresolved(r.port, nh),
    }
}

/// The Ethernet header of an IP packet to `mac` out of `port` (from the port's own address).
fn ethernet_header(t: &Tables, port: u16, mac: MacAddr, v4: bool) -> [u8; ethernet::HEADER_LEN] {
    let src = t.ports.get(usize::from(port)).map_or([0; 6], |pi| pi.mac);
    let ethertype = if v4 { ETHERTYPE_IPV4 } else { ETHERTYPE_IPV6 };
    let mut h = [0u8; ethernet::HEADER_LEN];
    let _ = ethernet::emit(&mut h, mac, src, ethertype);
    h
}

/// A packet routed to a next hop whose link-layer address is not known yet.
#[derive(Debug, Clone, Copy)]
pub struct Unresolved {
    /// Index in the burst (`usize::MAX` for [`Pipeline::route_local`]).
    pub index: usize,
    /// The port the packet leaves on.
    pub port: u16,
    /// Whether the next hop is IPv4.
    pub v4: bool,
    /// The next hop to resolve (the destination itself on a link route).
    pub next_hop: u128,
}

/// An outbound packet larger than its SA's path MTU allows, left unencrypted for the
/// caller to answer with ICMP or to fragment.
#[derive(Debug, Clone, Copy)]
pub struct TooBig {
    /// Index in the burst.
    pub index: usize,
    /// The largest inner packet that fits.
    pub max_inner: usize,
}
