//! Routing: longest-prefix match, the next hop's MAC, the Ethernet header; packets whose
//! next hop is unresolved are reported for the node to hold.

use super::*;

impl Pipeline {
    /// Routes one packet to `dst`: through the burst's route cache, the Ethernet header
    /// and verdict (inlined into the pass over the burst: the hit is a compare and a copy).
    /// The cache holds the last hop and the destinations it serves (see [`next_hop`]).
    #[inline(always)]
    pub(super) fn route(&mut self, t: &Tables, p: &mut Packet, index: usize, v4: bool, dst: u128) {
        match self.route_cache {
            Some(c) if c.v4 == v4 && dst & c.span == c.net => self.take_hop(p, index, v4, c.hop),
            _ => self.route_miss(t, p, index, v4, dst),
        }
    }

    /// A destination the cache does not hold: looked up, remembered, and the packet sent
    /// on its way here, the hop still in registers. Returned to `route` first, the hop
    /// went through memory and was read back, wider than it had been written, before the
    /// writes had landed: with a flow per frame, where every inbound packet misses, 44 %
    /// of the decapsulation pass waited on that copy (perf, `bench dataplane --flows each`).
    #[inline(never)]
    fn route_miss(&mut self, t: &Tables, p: &mut Packet, index: usize, v4: bool, dst: u128) {
        let (hop, span) = next_hop(t, v4, dst);
        self.route_cache = Some(RouteCache {
            v4,
            net: dst & span,
            span,
            hop,
        });
        self.take_hop(p, index, v4, hop);
    }

    /// Sends the packet to `hop`, drops it for want of a route, or reports it as waiting
    /// for its next hop's link-layer address.
    #[inline(always)]
    fn take_hop(&mut self, p: &mut Packet, index: usize, v4: bool, hop: Hop) {
        match hop {
            Hop::To(port, eth) => self.send_with(p, port, eth),
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
        self.send_with(p, port, ethernet_header(t, port, mac, v4));
    }

    /// Puts `eth` in front of an IP packet and marks it for transmission on `port`.
    #[inline]
    fn send_with(&mut self, p: &mut Packet, port: u16, eth: EthHeader) {
        let Some(d) = p.push_front(ethernet::HEADER_LEN) else {
            return self.drop_pkt(p, DropReason::TooBig);
        };
        eth.write(d);
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
    To(u16, EthHeader),
    NoRoute,
    Unresolved(u16, u128),
}

/// An Ethernet header as two little-endian words: bytes 0-7, and bytes 8-13 in the low six
/// bytes of the second. Made in registers and written whole, so that what reads it soon
/// after (the route cache's next packet, the copy into the frame) finds each word in one
/// store; a `[u8; 14]` written a field at a time was read back by wider loads that had to
/// wait for all of its stores.
#[derive(Clone, Copy)]
pub(super) struct EthHeader {
    lo: u64,
    hi: u64,
}

impl EthHeader {
    fn new(dst: MacAddr, src: MacAddr, ethertype: u16) -> Self {
        let mac = |m: MacAddr| {
            u64::from(u32::from_le_bytes([m[0], m[1], m[2], m[3]]))
                | u64::from(u16::from_le_bytes([m[4], m[5]])) << 32
        };
        let (dst, src) = (mac(dst), mac(src));
        // The ethertype goes out big-endian: its high byte first, at byte 12.
        let ethertype = u64::from(ethertype.swap_bytes());
        EthHeader {
            lo: dst | src << 48,
            hi: src >> 16 | ethertype << 32,
        }
    }

    /// Writes the header over the first 14 bytes of `d` (which has them: the caller made
    /// the room).
    #[inline(always)]
    fn write(self, d: &mut [u8]) {
        if let Some(h) = d.first_chunk_mut::<{ ethernet::HEADER_LEN }>() {
            let (lo, hi) = h.split_at_mut(8);
            lo.copy_from_slice(&self.lo.to_le_bytes());
            hi.copy_from_slice(&self.hi.to_le_bytes()[..6]);
        }
    }
}

/// The burst's route cache: the last hop found, and the destinations it serves (`dst &
/// span == net`).
#[derive(Clone, Copy)]
pub(super) struct RouteCache {
    v4: bool,
    net: u128,
    span: u128,
    hop: Hop,
}

/// The longest-prefix match for `dst` and its next hop's link-layer address, with the mask
/// of the destinations that get the same hop: the route's span where the hop does not
/// depend on the destination (a route via a router, or a link whose next hops all share
/// the port's address), else all ones. With a flow per frame every packet has a
/// destination of its own; served by its subnet's entry, the cache still hits.
#[inline(always)]
fn next_hop(t: &Tables, v4: bool, dst: u128) -> (Hop, u128) {
    let Some((r, span)) = t.routes.lookup_span(v4, dst) else {
        return (Hop::NoRoute, u128::MAX);
    };
    let nh = r.next_hop(dst);
    let (mac, shared) = t.neighbours.lookup_shared(r.port, v4, nh);
    // An unresolved next hop on a link is the destination itself: reported per packet.
    let span = if r.via.is_some() || (shared && mac.is_some()) {
        span
    } else {
        u128::MAX
    };
    let hop = match mac {
        Some(mac) => Hop::To(r.port, ethernet_header(t, r.port, mac, v4)),
        None => Hop::Unresolved(r.port, nh),
    };
    (hop, span)
}

/// The Ethernet header of an IP packet to `mac` out of `port` (from the port's own address).
#[inline(always)]
fn ethernet_header(t: &Tables, port: u16, mac: MacAddr, v4: bool) -> EthHeader {
    let src = t.ports.get(usize::from(port)).map_or([0; 6], |pi| pi.mac);
    let ethertype = if v4 { ETHERTYPE_IPV4 } else { ETHERTYPE_IPV6 };
    EthHeader::new(mac, src, ethertype)
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

#[cfg(test)]
mod tests {
    use super::*;
    use espgw_wire::ethernet;

    /// The header made as two words is byte for byte the wire crate's `emit`, for both
    /// ethertypes and addresses that use every byte, and writes nothing past 14 bytes.
    #[test]
    fn ethernet_header_words_are_the_wire_header() {
        let dst = [0x02, 0x11, 0x22, 0x33, 0x44, 0x55];
        let src = [0xfe, 0xdc, 0xba, 0x98, 0x76, 0x54];
        for ethertype in [ETHERTYPE_IPV4, ETHERTYPE_IPV6, 0xabcd] {
            let mut want = [0xeeu8; 16];
            ethernet::emit(&mut want, dst, src, ethertype).unwrap();
            let mut got = [0xeeu8; 16];
            EthHeader::new(dst, src, ethertype).write(&mut got);
            assert_eq!(got, want, "{ethertype:#x}");
        }
    }
}
