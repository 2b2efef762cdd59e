//! Longest-prefix-match routing to an output port, and next-hop MAC addresses.
//!
//! One hash table per prefix length present, probed from the longest: few lengths are
//! in use in a gateway's table, so a lookup is a few probes. (A DIR-24-8 table can replace
//! it behind the same API if tables grow large.)

use rustc_hash::FxHashMap;

use std::sync::Arc;

use espgw_config::mask;

use crate::neighbour::NeighbourCache;
use espgw_wire::ethernet::MacAddr;

#[derive(Default)]
struct Lpm {
    width: u8,
    /// (prefix length, mask, table), longest first.
    levels: Vec<(u8, u128, FxHashMap<u128, RouteTarget>)>,
    /// While the family has at most [`SCAN_MAX`] routes: every one of them, longest
    /// prefix first (in the configuration's order within a length), for a scan instead of
    /// a hash probe per length.
    scan: Option<Vec<ScanRoute>>,
}

/// Up to this many routes a family is scanned rather than probed. A gateway has a few
/// routes; a probe hashes the masked address and walks a table's control bytes, where a
/// route's test is one masked compare. Inbound with a flow per frame, the route cache
/// misses on every packet and the probe of the built-in configuration's one level took
/// 5 ns a packet (perf, `bench dataplane --flows each`, 64 B).
const SCAN_MAX: usize = 8;

/// One route as the scan tests it.
#[derive(Debug, Clone, Copy)]
struct ScanRoute {
    net: u128,
    mask: u128,
    len: u8,
    target: RouteTarget,
    /// The mask of the addresses that share this route: `mask` when no longer prefix lies
    /// inside the route's, else all ones (each address must be looked up).
    span: u128,
}

impl Lpm {
    fn new(width: u8) -> Self {
        Lpm {
            width,
            levels: Vec::new(),
            scan: Some(Vec::new()),
        }
    }

    fn insert(&mut self, addr: u128, len: u8, target: RouteTarget) {
        let m = mask(self.width, len);
        if let Some(scan) = &mut self.scan {
            if scan.len() < SCAN_MAX {
                // After every route of the same or a longer prefix: longest first, and
                // within a length the first route for a prefix found first, as it wins.
                let at = scan.iter().position(|r| r.len < len).unwrap_or(scan.len());
                scan.insert(
                    at,
                    ScanRoute {
                        net: addr & m,
                        mask: m,
                        len,
                        target,
                        span: m,
                    },
                );
                set_spans(scan);
            } else {
                self.scan = None;
            }
        }
        let lvl = match self.levels.iter().position(|(l, _, _)| *l == len) {
            Some(i) => i,
            None => {
                self.levels.push((len, m, FxHashMap::default()));
                self.levels.sort_by_key(|l| std::cmp::Reverse(l.0));
                self.levels
                    .iter()
                    .position(|(l, _, _)| *l == len)
                    .expect("inserted")
            }
        };
        // The first route for a prefix wins, as in the configuration's order.
        self.levels[lvl].2.entry(addr & m).or_insert(target);
    }

    fn lookup(&self, addr: u128) -> Option<RouteTarget> {
        self.lookup_span(addr).map(|(target, _)| target)
    }

    /// The route for `addr` and the mask of the addresses that get the same one (see
    /// [`RouteTable::lookup_span`]).
    #[inline(always)]
    fn lookup_span(&self, addr: u128) -> Option<(RouteTarget, u128)> {
        match &self.scan {
            Some(scan) => scan
                .iter()
                .find(|r| addr & r.mask == r.net)
                .map(|r| (r.target, r.span)),
            None => self.lookup_levels(addr).map(|target| (target, u128::MAX)),
        }
    }

    /// The lookup through the per-length tables, whatever the family's size.
    fn lookup_levels(&self, addr: u128) -> Option<RouteTarget> {
        self.levels
            .iter()
            .find_map(|(_, m, t)| t.get(&(addr & m)).copied())
    }
}

/// Sets each scanned route's span: its own mask, unless a longer prefix lies inside it
/// (an address of the route's prefix may then belong to the longer one).
fn set_spans(scan: &mut [ScanRoute]) {
    for i in 0..scan.len() {
        let r = scan[i];
        let nested = scan
            .iter()
            .any(|o| o.len > r.len && o.net & r.mask == r.net);
        scan[i].span = if nested { u128::MAX } else { r.mask };
    }
}

/// Where a route sends packets: a port, and the next-hop router if the destination is not
/// on that port's link.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RouteTarget {
    /// The port to send on.
    pub port: u16,
    /// The next-hop router, or `None` when the destination is on the port's link.
    pub via: Option<u128>,
}

impl RouteTarget {
    /// The address whose link-layer address the packet is sent to.
    pub fn next_hop(&self, dst: u128) -> u128 {
        self.via.unwrap_or(dst)
    }
}

/// Routes of both families.
pub struct RouteTable {
    v4: Lpm,
    v6: Lpm,
    len: usize,
}

impl Default for RouteTable {
    fn default() -> Self {
        Self::new()
    }
}

impl RouteTable {
    /// An empty table.
    pub fn new() -> Self {
        RouteTable {
            v4: Lpm::new(32),
            v6: Lpm::new(128),
            len: 0,
        }
    }

    /// Adds a route to `addr/len` (IPv4 in the low 32 bits when `v4`).
    pub fn insert(&mut self, v4: bool, addr: u128, len: u8, target: RouteTarget) {
        if v4 {
            self.v4.insert(addr, len, target)
        } else {
            self.v6.insert(addr, len, target)
        }
        self.len += 1;
    }

    /// The port (and next hop) for a destination.
    pub fn lookup(&self, v4: bool, addr: u128) -> Option<RouteTarget> {
        if v4 {
            self.v4.lookup(addr)
        } else {
            self.v6.lookup(addr)
        }
    }

    /// [`RouteTable::lookup`], with the mask of the destinations that get the same route:
    /// every `a` with `a & span == addr & span` does. That is the route's own prefix where
    /// no longer prefix lies inside it, else only `addr` itself (all ones); a family
    /// searched by tuple space answers all ones too. A cache keyed on it serves a whole
    /// subnet, as the data plane's per-burst route cache does.
    #[inline(always)]
    pub fn lookup_span(&self, v4: bool, addr: u128) -> Option<(RouteTarget, u128)> {
        if v4 {
            self.v4.lookup_span(addr)
        } else {
            self.v6.lookup_span(addr)
        }
    }

    /// Number of routes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there are no routes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// A static neighbour entry: (IPv4?, address) and its MAC.
pub type StaticByIp = ((bool, u128), MacAddr);

/// Next-hop MAC addresses. Static entries (per address, then per port) win; then what the
/// live gateway learned by ARP / neighbour discovery; offline, a per-port default.
pub struct Neighbours {
    by_ip: FxHashMap<(bool, u128), MacAddr>,
    by_port: Vec<Option<MacAddr>>,
    /// Offline fallback per port (ipsec-secgw's default destination addresses).
    fallback: Vec<MacAddr>,
    /// Learned entries (live gateway); when present, the fallback is not used.
    pub dynamic: Option<Arc<NeighbourCache>>,
    /// Ports without a link layer (TUN): no resolution needed.
    point_to_point: Vec<bool>,
}

impl Neighbours {
    /// Neighbours with only the offline per-port default MACs.
    pub fn new(fallback: Vec<MacAddr>) -> Self {
        Neighbours {
            by_ip: FxHashMap::default(),
            by_port: vec![None; fallback.len()],
            point_to_point: vec![false; fallback.len()],
            fallback,
            dynamic: None,
        }
    }
    /// A static MAC for one next-hop address.
    pub fn insert_ip(&mut self, v4: bool, addr: u128, mac: MacAddr) {
        self.by_ip.insert((v4, addr), mac);
    }
    /// A static MAC for every next hop on `port`.
    pub fn set_port(&mut self, port: usize, mac: MacAddr) {
        if let Some(m) = self.by_port.get_mut(port) {
            *m = Some(mac);
        }
    }
    /// Marks `port` as having no link layer (TUN): frames need no MAC.
    pub fn set_point_to_point(&mut self, port: usize) {
        if let Some(m) = self.point_to_point.get_mut(port) {
            *m = true;
        }
    }
    /// Static entries, for reports: (address, MAC) and (port, MAC).
    pub fn static_entries(&self) -> (Vec<StaticByIp>, Vec<(usize, MacAddr)>) {
        let mut ips: Vec<_> = self.by_ip.iter().map(|(k, v)| (*k, *v)).collect();
        ips.sort();
        let ports = self
            .by_port
            .iter()
            .enumerate()
            .filter_map(|(i, m)| m.map(|m| (i, m)))
            .collect();
        (ips, ports)
    }
    /// The MAC to send to next hop `addr` on `port`.
    pub fn lookup(&self, port: u16, v4: bool, addr: u128) -> Option<MacAddr> {
        self.lookup_shared(port, v4, addr).0
    }

    /// [`Neighbours::lookup`], and whether the answer is the port's for every next hop on
    /// it (`true` where no per-address entry exists, static or learned, and a per-port
    /// one, a point-to-point link or the offline default answered).
    #[inline(always)]
    pub fn lookup_shared(&self, port: u16, v4: bool, addr: u128) -> (Option<MacAddr>, bool) {
        let per_address = !self.by_ip.is_empty();
        if per_address {
            if let Some(m) = self.by_ip.get(&(v4, addr)) {
                return (Some(*m), false);
            }
        }
        let p = usize::from(port);
        if let Some(Some(m)) = self.by_port.get(p) {
            return (Some(*m), !per_address);
        }
        if self.point_to_point.get(p).copied().unwrap_or(false) {
            return (Some([0; 6]), !per_address);
        }
        match &self.dynamic {
            Some(d) => (d.get(v4, addr), false),
            None => (self.fallback.get(p).copied(), !per_address),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        let mut t = RouteTable::new();
        let to = |port| RouteTarget { port, via: None };
        t.insert(true, 0xc000_0200, 24, to(1)); // 192.0.2.0/24
        t.insert(true, 0xc000_0280, 25, to(2)); // 192.0.2.128/25
        let via = RouteTarget {
            port: 3,
            via: Some(0xc000_0201),
        };
        t.insert(true, 0, 0, via);
        let port = |r: Option<RouteTarget>| r.map(|r| r.port);
        assert_eq!(port(t.lookup(true, 0xc000_0201)), Some(1));
        assert_eq!(port(t.lookup(true, 0xc000_02ff)), Some(2));
        assert_eq!(t.lookup(true, 0x0a00_0001), Some(via));
        assert_eq!(via.next_hop(0x0a00_0001), 0xc000_0201);
        assert_eq!(to(1).next_hop(0x0a00_0001), 0x0a00_0001);
        let v6: u128 = "2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap().into();
        assert_eq!(t.lookup(false, v6), None);
        t.insert(false, v6, 32, to(0));
        assert_eq!(port(t.lookup(false, v6 + 5)), Some(0));
        assert_eq!(t.lookup(false, !v6), None);
    }

    proptest::proptest! {
        /// The scan of a small family and the per-length tables give the longest prefix
        /// that matches (the first route given for it), as a plain search of the routes
        /// does, below and above the scan's limit.
        #[test]
        fn scan_and_tables_find_the_longest_prefix(
            routes in proptest::collection::vec((proptest::prelude::any::<u32>(), 0u8..=32, 0u16..4), 0..14),
            addrs in proptest::collection::vec(proptest::prelude::any::<u32>(), 1..40),
        ) {
            // Few distinct addresses, so that prefixes nest and repeat.
            let a = |x: u32| u128::from(x & 0xc0c0_c0c3);
            let mut lpm = Lpm::new(32);
            for &(addr, len, port) in &routes {
                lpm.insert(a(addr), len, RouteTarget { port, via: None });
            }
            proptest::prop_assert_eq!(lpm.scan.is_some(), routes.len() <= SCAN_MAX);
            for x in addrs {
                let x = a(x);
                let mut want: Option<(u8, u16)> = None;
                for &(addr, len, port) in &routes {
                    let m = mask(32, len);
                    if x & m == a(addr) & m && want.is_none_or(|(l, _)| len > l) {
                        want = Some((len, port));
                    }
                }
                let want = want.map(|(_, port)| port);
                proptest::prop_assert_eq!(lpm.lookup(x).map(|r| r.port), want);
                proptest::prop_assert_eq!(lpm.lookup_levels(x).map(|r| r.port), want);
            }
        }

        /// Every address inside the span a lookup reports gets the same route from a plain
        /// search of the routes (the longest prefix, the first given for it): a cache keyed
        /// on the span answers as a lookup would. The span is the route's own prefix or a
        /// single address.
        #[test]
        fn every_address_in_a_span_gets_the_same_route(
            routes in proptest::collection::vec((proptest::prelude::any::<u32>(), 0u8..=32, 0u16..4), 1..12),
            probes in proptest::collection::vec((proptest::prelude::any::<u32>(), proptest::prelude::any::<u32>()), 1..40),
        ) {
            let a = |x: u32| u128::from(x & 0xc0c0_c0c3);
            let mut lpm = Lpm::new(32);
            for (i, &(addr, len, _)) in routes.iter().enumerate() {
                // The route's position as its port: every route tells apart.
                lpm.insert(a(addr), len, RouteTarget { port: i as u16, via: None });
            }
            let search = |x: u128| {
                let mut best: Option<(u8, u16)> = None;
                for (i, &(addr, len, _)) in routes.iter().enumerate() {
                    let m = mask(32, len);
                    if x & m == a(addr) & m && best.is_none_or(|(l, _)| len > l) {
                        best = Some((len, i as u16));
                    }
                }
                best
            };
            for (x, y) in probes {
                let x = a(x);
                let Some((target, span)) = lpm.lookup_span(x) else {
                    proptest::prop_assert_eq!(search(x), None);
                    continue;
                };
                let (len, port) = search(x).expect("a route was found");
                proptest::prop_assert_eq!(target.port, port);
                let own = mask(32, len);
                proptest::prop_assert!(span == own || span == u128::MAX, "span {:#x}", span);
                // Another address of the span: x's bits inside it, y's outside (an IPv4
                // address, in the low 32 bits).
                let other = (x & span) | (u128::from(y) & !span & 0xffff_ffff);
                proptest::prop_assert_eq!(search(other).map(|(_, p)| p), Some(port), "{:#x}", other);
            }
        }
    }

    #[test]
    fn neighbours() {
        let mut n = Neighbours::new(vec![[2, 0, 0, 0, 0, 1], [2, 0, 0, 0, 0, 2]]);
        n.insert_ip(true, 7, [2, 0, 0, 0, 0, 7]);
        assert_eq!(n.lookup(0, true, 7), Some([2, 0, 0, 0, 0, 7]));
        assert_eq!(n.lookup(0, true, 8), Some([2, 0, 0, 0, 0, 1]));
        assert_eq!(n.lookup(5, true, 8), None);
        // Live: learned entries replace the fallback; static ones still win.
        let cache = Arc::new(NeighbourCache::default());
        n.dynamic = Some(cache.clone());
        assert_eq!(n.lookup(0, true, 8), None);
        cache.learn(0, true, 8, [2, 0, 0, 0, 0, 8]);
        assert_eq!(n.lookup(0, true, 8), Some([2, 0, 0, 0, 0, 8]));
        cache.learn(0, true, 7, [2, 0, 0, 0, 0, 9]);
        assert_eq!(n.lookup(0, true, 7), Some([2, 0, 0, 0, 0, 7]));
        n.set_port(1, [2, 0, 0, 0, 1, 1]);
        assert_eq!(n.lookup(1, true, 8), Some([2, 0, 0, 0, 1, 1]));
    }

    /// A port's answer is reported shared by all its next hops only where no per-address
    /// entry can differ from it: none static, none learned.
    #[test]
    fn neighbours_shared_by_a_port() {
        let mac = |x| [2, 0, 0, 0, 0, x];
        let mut n = Neighbours::new(vec![mac(1), mac(2), mac(3)]);
        assert_eq!(n.lookup_shared(0, true, 8), (Some(mac(1)), true));
        // Past the ports: nothing to send to, for any address.
        assert_eq!(n.lookup_shared(7, true, 8), (None, true));
        n.set_port(1, mac(11));
        n.set_point_to_point(2);
        assert_eq!(n.lookup_shared(1, true, 8), (Some(mac(11)), true));
        assert_eq!(n.lookup_shared(2, false, 8), (Some([0; 6]), true));
        // One static next hop: every port's answer may now depend on the address.
        n.insert_ip(true, 7, mac(7));
        assert_eq!(n.lookup_shared(0, true, 7), (Some(mac(7)), false));
        assert_eq!(n.lookup_shared(0, true, 8), (Some(mac(1)), false));
        assert_eq!(n.lookup_shared(1, true, 8), (Some(mac(11)), false));
        // Learned entries are per address.
        let mut n = Neighbours::new(vec![mac(1)]);
        let cache = Arc::new(NeighbourCache::default());
        cache.learn(0, true, 8, mac(8));
        n.dynamic = Some(cache);
        assert_eq!(n.lookup_shared(0, true, 8), (Some(mac(8)), false));
        assert_eq!(n.lookup_shared(0, true, 9), (None, false));
    }
}
