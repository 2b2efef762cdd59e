//! The security policy database (RFC 4301 §4.4.1): ordered rules on addresses, protocol
//! and ports, each with an action.
//!
//! Precedence: the higher `priority` wins; among equal priorities the rule listed first.
//!
//! Lookup is a tuple-space search (as Open vSwitch classifies flows): rules are grouped by
//! their (source prefix length, destination prefix length) pair, and each group is a hash
//! table keyed by the masked addresses. A lookup probes one hash table per group, in
//! order of the best rule each group holds, and stops as soon as no remaining group can
//! beat what it found. Configurations have few distinct prefix-length pairs, so a lookup
//! costs a handful of probes whether there are 10 rules or 10,000.

use rustc_hash::FxHashMap;

use espgw_config::{mask, Range};

use crate::flow::FlowKey;

/// What a matching rule says. `Protect` holds the index of the SA in the tables; `Bundle`
/// the indices of an ESP SA and of the AH SA applied around it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SpdAction {
    /// Apply the SA at this index.
    Protect(u32),
    /// Apply one SA of a per-worker set: `Tables::per_worker_sas[first..first + count]`,
    /// worker `w` the `w mod count`-th (outbound); accept any of them (inbound).
    ProtectEach {
        /// Where the set starts in `Tables::per_worker_sas`.
        first: u32,
        /// How many SAs it has (2 or more).
        count: u32,
    },
    /// Apply the ESP SA, then the AH SA around it.
    Bundle {
        /// Index of the ESP SA.
        esp: u32,
        /// Index of the AH SA.
        ah: u32,
    },
    /// Forward in the clear.
    Bypass,
    /// Drop.
    Discard,
    /// Drop, and have the IKE daemon negotiate the SA of this reqid (outbound).
    Acquire(u32),
}

/// One rule, as the tables hold it.
#[derive(Debug, Clone)]
pub struct SpdRule {
    /// Whether the rule is for IPv4.
    pub v4: bool,
    /// Source prefix address (IPv4 in the low 32 bits).
    pub src: u128,
    /// Source prefix length.
    pub src_len: u8,
    /// Destination prefix address (IPv4 in the low 32 bits).
    pub dst: u128,
    /// Destination prefix length.
    pub dst_len: u8,
    /// Upper-layer protocols matched.
    pub proto: Range<u8>,
    /// Source ports (or ICMP types) matched.
    pub sport: Range<u16>,
    /// Destination ports (or ICMP codes) matched.
    pub dport: Range<u16>,
    /// Higher wins among the rules that match.
    pub priority: i64,
    /// What a packet that matches gets.
    pub action: SpdAction,
}

impl SpdRule {
    fn matches_rest(&self, k: &FlowKey) -> bool {
        self.proto.contains(k.proto) && self.sport.contains(k.sport) && self.dport.contains(k.dport)
    }
}

/// Larger is better: priority first, then the earlier position.
type Rank = u128;

fn rank(priority: i64, position: usize) -> Rank {
    let p = (priority as i128 - i64::MIN as i128) as u128;
    (p << 32) | u128::from(u32::MAX - position as u32)
}

struct Group {
    src_mask: u128,
    dst_mask: u128,
    best: Rank,
    /// Masked (src, dst) -> rule indices, best first.
    map: FxHashMap<(u128, u128), Vec<u32>>,
}

#[derive(Default)]
struct Family {
    /// Groups, best first.
    groups: Vec<Group>,
    /// Where the family has at most [`SCAN_MAX`] rules: all of them, best first, for a
    /// scan instead of the groups' hash probes.
    scan: Option<Vec<ScanRule>>,
}

/// Up to this many rules a family is scanned, not searched by tuple space. A gateway on a
/// backhaul link has a few policies; each probe of a group hashes both masked addresses
/// (four 64-bit multiplications) and walks the table's control bytes, where a rule's test
/// is two masked compares and three ranges. With a flow per frame, where the flow cache in
/// front of the SPD never hits, the probe of the one group the built-in configuration has
/// took 13 ns a packet (perf, `bench dataplane --flows each`, inbound at 64 B).
const SCAN_MAX: usize = 8;

/// Up to this many rules a family's scan replaces the pipeline's one-entry flow cache:
/// a rule's test (two masked compares of both addresses, three ranges) is about the
/// cache's compare of a whole key, and the cache, missed by every packet where each frame
/// is a flow of its own, also costs its store.
pub const SHORT_SCAN: usize = 2;

/// One rule as the scan tests it: masked addresses and masks side by side.
#[derive(Debug, Clone)]
struct ScanRule {
    src: u128,
    src_mask: u128,
    dst: u128,
    dst_mask: u128,
    proto: Range<u8>,
    sport: Range<u16>,
    dport: Range<u16>,
    index: u32,
    /// The rule's action, at hand: the short scan answers with it, not through the rules.
    action: SpdAction,
}

impl ScanRule {
    #[inline(always)]
    fn matches(&self, k: &FlowKey) -> bool {
        // Without early exits, as `FlowKey`'s equality: one branch per rule.
        let addrs = ((k.src & self.src_mask) ^ self.src) | ((k.dst & self.dst_mask) ^ self.dst);
        (addrs == 0)
            & self.proto.contains(k.proto)
            & self.sport.contains(k.sport)
            & self.dport.contains(k.dport)
    }
}

/// An immutable, compiled SPD of one direction.
pub struct Spd {
    rules: Vec<SpdRule>,
    ranks: Vec<Rank>,
    v4: Family,
    v6: Family,
}

impl Spd {
    /// Builds the lookup structures over `rules`.
    pub fn new(rules: Vec<SpdRule>) -> Self {
        Self::with_scan_max(rules, SCAN_MAX)
    }

    /// [`Spd::new`], scanning the families of at most `scan_max` rules (the tests build
    /// both structures over the same rules).
    fn with_scan_max(rules: Vec<SpdRule>, scan_max: usize) -> Self {
        let ranks: Vec<Rank> = rules
            .iter()
            .enumerate()
            .map(|(i, r)| rank(r.priority, i))
            .collect();
        let mut v4 = Family::default();
        let mut v6 = Family::default();
        for (i, r) in rules.iter().enumerate() {
            let fam = if r.v4 { &mut v4 } else { &mut v6 };
            let width = if r.v4 { 32 } else { 128 };
            let (sm, dm) = (mask(width, r.src_len), mask(width, r.dst_len));
            let g = match fam
                .groups
                .iter_mut()
                .position(|g| g.src_mask == sm && g.dst_mask == dm)
            {
                Some(g) => &mut fam.groups[g],
                None => {
                    fam.groups.push(Group {
                        src_mask: sm,
                        dst_mask: dm,
                        best: 0,
                        map: FxHashMap::default(),
                    });
                    fam.groups.last_mut().expect("just pushed")
                }
            };
            g.best = g.best.max(ranks[i]);
            g.map
                .entry((r.src & sm, r.dst & dm))
                .or_default()
                .push(i as u32);
        }
        for (fam, is_v4) in [(&mut v4, true), (&mut v6, false)] {
            fam.groups.sort_by_key(|g| std::cmp::Reverse(g.best));
            for g in &mut fam.groups {
                for list in g.map.values_mut() {
                    list.sort_by(|&a, &b| ranks[b as usize].cmp(&ranks[a as usize]));
                }
            }
            fam.scan = scan_rules(&rules, &ranks, is_v4, scan_max);
        }
        Spd {
            rules,
            ranks,
            v4,
            v6,
        }
    }

    /// The rules, as given.
    pub fn rules(&self) -> &[SpdRule] {
        &self.rules
    }

    /// Number of rules.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether there are no rules.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// The best matching rule's index.
    pub fn lookup_index(&self, k: &FlowKey) -> Option<usize> {
        if let Some(found) = self.scan_index(k) {
            return found;
        }
        let fam = if k.v4 { &self.v4 } else { &self.v6 };
        let mut best: Option<(Rank, usize)> = None;
        for g in &fam.groups {
            if let Some((r, _)) = best {
                if r >= g.best {
                    break;
                }
            }
            let Some(list) = g.map.get(&(k.src & g.src_mask, k.dst & g.dst_mask)) else {
                continue;
            };
            for &i in list {
                let i = i as usize;
                let r = self.ranks[i];
                if best.is_some_and(|(b, _)| b >= r) {
                    break;
                }
                if self.rules[i].matches_rest(k) {
                    best = Some((r, i));
                    break;
                }
            }
        }
        best.map(|(_, i)| i)
    }

    /// Where `k`'s family is scanned (8 rules or fewer): the best matching
    /// rule's index (`Some(None)`: none matches); `None` where it is searched by tuple
    /// space ([`Spd::lookup_index`]). Inlined into the pipeline's flow-cache miss, so that
    /// the key it just parsed is read from registers: through memory, its ports, stored a
    /// field at a time, were loaded as one word that waited for both stores (perf, the
    /// same benchmark: most of the 8 ns a packet the scan then took).
    #[inline(always)]
    pub fn scan_index(&self, k: &FlowKey) -> Option<Option<usize>> {
        let fam = if k.v4 { &self.v4 } else { &self.v6 };
        let scan = fam.scan.as_ref()?;
        // Best first: the first rule that matches is the answer.
        Some(scan.iter().find(|r| r.matches(k)).map(|r| r.index as usize))
    }

    /// Where `k`'s family has at most [`SHORT_SCAN`] rules, the action of the best
    /// matching rule (`Some(None)`: none matches), else `None`. So short a scan costs no
    /// more than the flow cache's compare of a whole key, and the pipeline runs it in place
    /// of the cache (see `Pipeline::spd_lookup`).
    #[inline(always)]
    pub fn short_scan(&self, k: &FlowKey) -> Option<Option<SpdAction>> {
        let fam = if k.v4 { &self.v4 } else { &self.v6 };
        let scan = fam.scan.as_ref().filter(|s| s.len() <= SHORT_SCAN)?;
        Some(scan.iter().find(|r| r.matches(k)).map(|r| r.action))
    }

    /// The action of the best matching rule.
    pub fn lookup(&self, k: &FlowKey) -> Option<SpdAction> {
        self.lookup_index(k).map(|i| self.rules[i].action)
    }

    /// The same answer by a linear scan: the reference the tests compare against.
    pub fn lookup_linear(&self, k: &FlowKey) -> Option<usize> {
        let mut best: Option<(Rank, usize)> = None;
        for (i, r) in self.rules.iter().enumerate() {
            let width = if r.v4 { 32 } else { 128 };
            if r.v4 == k.v4
                && k.src & mask(width, r.src_len) == r.src & mask(width, r.src_len)
                && k.dst & mask(width, r.dst_len) == r.dst & mask(width, r.dst_len)
                && r.matches_rest(k)
                && best.is_none_or(|(b, _)| self.ranks[i] > b)
            {
                best = Some((self.ranks[i], i));
            }
        }
        best.map(|(_, i)| i)
    }
}

/// A family's rules for the scan, best first, if it has at most `scan_max` of them.
fn scan_rules(
    rules: &[SpdRule],
    ranks: &[Rank],
    v4: bool,
    scan_max: usize,
) -> Option<Vec<ScanRule>> {
    let mut of_family: Vec<usize> = (0..rules.len()).filter(|&i| rules[i].v4 == v4).collect();
    if of_family.len() > scan_max {
        return None;
    }
    of_family.sort_by(|&a, &b| ranks[b].cmp(&ranks[a]));
    let width = if v4 { 32 } else { 128 };
    Some(
        of_family
            .into_iter()
            .map(|i| {
                let r = &rules[i];
                let (sm, dm) = (mask(width, r.src_len), mask(width, r.dst_len));
                ScanRule {
                    src: r.src & sm,
                    src_mask: sm,
                    dst: r.dst & dm,
                    dst_mask: dm,
                    proto: r.proto,
                    sport: r.sport,
                    dport: r.dport,
                    index: i as u32,
                    action: r.action,
                }
            })
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use espgw_config::{ANY_PORT, ANY_PROTO};
    use proptest::prelude::*;

    fn rule(src: u32, sl: u8, dst: u32, dl: u8, prio: i64, action: SpdAction) -> SpdRule {
        SpdRule {
            v4: true,
            src: src.into(),
            src_len: sl,
            dst: dst.into(),
            dst_len: dl,
            proto: ANY_PROTO,
            sport: ANY_PORT,
            dport: ANY_PORT,
            priority: prio,
            action,
        }
    }

    fn key(src: u32, dst: u32, proto: u8, dport: u16) -> FlowKey {
        FlowKey {
            v4: true,
            src: src.into(),
            dst: dst.into(),
            proto,
            sport: 1234,
            dport,
        }
    }

    #[test]
    fn priority_then_order() {
        let net = 0xc633_6400; // 198.51.100.0
        let host = 0xcb00_7107; // 203.0.113.7
        let mut udp53 = rule(0, 0, host, 32, 0, SpdAction::Bypass);
        udp53.proto = Range::new(17, 17);
        udp53.dport = Range::new(53, 53);
        let spd = Spd::new(vec![
            rule(net, 24, 0xcb00_7100, 24, 0, SpdAction::Protect(0)),
            udp53,
            rule(0, 0, 0, 0, -10, SpdAction::Discard),
            rule(net, 24, 0xcb00_7100, 24, 0, SpdAction::Protect(1)),
        ]);
        assert_eq!(
            spd.lookup(&key(net + 5, host, 17, 53)),
            Some(SpdAction::Protect(0)),
            "earlier rule wins a tie"
        );
        assert_eq!(
            spd.lookup(&key(0x0a00_0001, host, 17, 53)),
            Some(SpdAction::Bypass)
        );
        assert_eq!(
            spd.lookup(&key(0x0a00_0001, host, 6, 53)),
            Some(SpdAction::Discard)
        );
        let spd2 = Spd::new(vec![
            rule(0, 0, 0, 0, 5, SpdAction::Discard),
            rule(net, 24, 0, 0, 1, SpdAction::Bypass),
        ]);
        assert_eq!(
            spd2.lookup(&key(net + 1, 1, 6, 80)),
            Some(SpdAction::Discard),
            "higher priority wins"
        );
        assert_eq!(Spd::new(vec![]).lookup(&key(1, 2, 3, 4)), None);
    }

    proptest! {
        /// The tuple-space search and the small families' scan give exactly the linear
        /// scan's answer.
        #[test]
        fn same_as_linear_scan(
            rules in proptest::collection::vec((any::<u32>(), 0u8..=32, any::<u32>(), 0u8..=32, -3i64..3, 0u16..4, 0u8..3), 0..60),
            keys in proptest::collection::vec((any::<u32>(), any::<u32>(), 0u16..6, 0u8..3), 1..60),
        ) {
            // Few distinct addresses so that rules overlap.
            let addr = |a: u32| a & 0x0303_0303;
            let rs: Vec<SpdRule> = rules.iter().enumerate().map(|(i, &(s, sl, d, dl, p, port, proto))| {
                let mut r = rule(addr(s), sl % 9 * 4, addr(d), dl % 9 * 4, p, SpdAction::Protect(i as u32));
                if port > 0 { r.dport = Range::new(port, port + 1); }
                if proto > 0 { r.proto = Range::new(proto * 8, proto * 8); }
                r
            }).collect();
            // Each structure over the same rules: the tuple-space search alone, the scan
            // alone, and what `new` picks for this many.
            let searched = Spd::with_scan_max(rs.clone(), 0);
            let scanned = Spd::with_scan_max(rs.clone(), usize::MAX);
            // The best few alone: short enough for the scan that replaces the flow cache.
            let short = Spd::new(rs[..rs.len().min(SHORT_SCAN)].to_vec());
            let spd = Spd::new(rs);
            prop_assert!(searched.v4.scan.is_none() || spd.is_empty());
            prop_assert!(scanned.v4.scan.is_some());
            for (s, d, port, proto) in keys {
                let k = key(addr(s), addr(d), proto * 8, port);
                let want = spd.lookup_linear(&k);
                prop_assert_eq!(searched.lookup_index(&k), want);
                prop_assert_eq!(scanned.lookup_index(&k), want);
                prop_assert_eq!(spd.lookup_index(&k), want);
                // Only a family of at most `SHORT_SCAN` rules answers the short scan.
                let short_enough = spd.len() <= SHORT_SCAN;
                let want_action = want.map(|i| spd.rules()[i].action);
                prop_assert_eq!(spd.short_scan(&k), short_enough.then_some(want_action));
                let short_want = short.lookup_linear(&k).map(|i| short.rules()[i].action);
                prop_assert_eq!(short.short_scan(&k), Some(short_want));
            }
        }
    }
}
