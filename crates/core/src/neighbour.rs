//! Link-layer addresses the live gateway learned by ARP (IPv4) and neighbour discovery
//! (IPv6), shared by every worker and carried over table swaps.
//!
//! Reads happen once per routed destination per burst (the pipeline caches within a
//! burst), writes only when an ARP / NA packet teaches something new, so a read-write
//! lock is uncontended in practice. The table is bounded: a flood of ARP from spoofed
//! senders cannot grow it past [`MAX_ENTRIES`], nor lock legitimate neighbours out: when
//! full, the oldest eighth goes (unresolved entries first), so the cost of making room is a
//! scan per [`MAX_ENTRIES`]/8 new entries. Only ARP and solicitations addressed to the
//! gateway create entries (host.rs); others only refresh entries that exist.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::RwLock;
use std::time::{Duration, Instant};

use rustc_hash::FxHashMap;

use espgw_wire::ethernet::MacAddr;

/// Most entries kept; a new address beyond it makes room by evicting the oldest.
pub const MAX_ENTRIES: usize = 4096;
/// How often an unanswered address is asked for again.
pub const RETRY_INTERVAL: Duration = Duration::from_millis(250);
/// How long an address that never answered is remembered (as Linux gives up after three
/// probes a second apart); then it goes, and a later packet asks again.
pub const UNRESOLVED_TIMEOUT: Duration = Duration::from_secs(3);
/// How long a learned address lives without being heard from again; then it goes, and the
/// next packet to it resolves it afresh (a neighbour that moved or left is not used forever).
pub const RESOLVED_TIMEOUT: Duration = Duration::from_secs(600);

#[derive(Debug, Clone, Copy)]
struct Entry {
    port: u16,
    mac: Option<MacAddr>,
    updated: Instant,
    last_request: Option<Instant>,
}

/// One learned neighbour, for reports.
#[derive(Debug, Clone)]
pub struct NeighbourEntry {
    /// Whether the address is IPv4.
    pub v4: bool,
    /// The neighbour's address (IPv4 in the low 32 bits).
    pub addr: u128,
    /// The port it is reached on.
    pub port: u16,
    /// `None` while resolution is pending.
    pub mac: Option<MacAddr>,
    /// Time since the entry was last confirmed.
    pub age: Duration,
}

/// Frees room for one more entry when the table is full: evicts the oldest eighth,
/// unresolved entries before resolved ones, so a flood of spoofed senders or of requests
/// for addresses that never answer cannot keep real neighbours out.
fn make_room(m: &mut FxHashMap<(bool, u128), Entry>) {
    if m.len() < MAX_ENTRIES {
        return;
    }
    let mut by_age: Vec<(bool, Instant, (bool, u128))> = m
        .iter()
        .map(|(k, e)| (e.mac.is_some(), e.updated, *k))
        .collect();
    let n = (MAX_ENTRIES / 8).max(1);
    by_age.select_nth_unstable(n - 1);
    for (_, _, k) in &by_age[..n] {
        m.remove(k);
    }
}

#[derive(Debug, Default)]
/// Link-layer addresses learned by ARP and neighbour discovery, shared by the workers (read per burst, written when a reply arrives). Bounded: see [`MAX_ENTRIES`].
pub struct NeighbourCache {
    map: RwLock<FxHashMap<(bool, u128), Entry>>,
    /// Bumped whenever an address resolves, so workers know to retry held packets.
    version: AtomicU64,
}

impl NeighbourCache {
    /// The MAC address of `addr`, if resolved.
    pub fn get(&self, v4: bool, addr: u128) -> Option<MacAddr> {
        let m = self.map.read().unwrap_or_else(|e| e.into_inner());
        m.get(&(v4, addr)).and_then(|e| e.mac)
    }

    /// Bumped whenever an address resolves: a worker holding packets retries them when it changes.
    pub fn version(&self) -> u64 {
        self.version.load(Ordering::Acquire)
    }

    /// Records that `addr` on `port` has `mac`.
    pub fn learn(&self, port: u16, v4: bool, addr: u128, mac: MacAddr) {
        self.record(port, v4, addr, mac, true);
    }

    /// Updates `addr`'s MAC only if the address is known already (ARP and solicitations
    /// that are not for the gateway: RFC 826's merge, without letting any sender on the
    /// link fill the table).
    pub fn refresh(&self, port: u16, v4: bool, addr: u128, mac: MacAddr) {
        self.record(port, v4, addr, mac, false);
    }

    fn record(&self, port: u16, v4: bool, addr: u128, mac: MacAddr, create: bool) {
        let now = Instant::now();
        let mut m = self.map.write().unwrap_or_else(|e| e.into_inner());
        if create && !m.contains_key(&(v4, addr)) {
            make_room(&mut m);
        }
        match m.get_mut(&(v4, addr)) {
            Some(e) => {
                let changed = e.mac != Some(mac);
                e.mac = Some(mac);
                e.port = port;
                e.updated = now;
                if changed {
                    self.version.fetch_add(1, Ordering::Release);
                }
            }
            None if create => {
                m.insert(
                    (v4, addr),
                    Entry {
                        port,
                        mac: Some(mac),
                        updated: now,
                        last_request: None,
                    },
                );
                self.version.fetch_add(1, Ordering::Release);
            }
            None => {}
        }
    }

    /// Whether a request for `addr` should be sent now (none sent in the last
    /// [`RETRY_INTERVAL`]); records the request if so.
    pub fn should_request(&self, port: u16, v4: bool, addr: u128, now: Instant) -> bool {
        let mut m = self.map.write().unwrap_or_else(|e| e.into_inner());
        if !m.contains_key(&(v4, addr)) {
            make_room(&mut m);
        }
        match m.get_mut(&(v4, addr)) {
            Some(e) => {
                if e.mac.is_some() && now.duration_since(e.updated) < RETRY_INTERVAL {
                    return false;
                }
                match e.last_request {
                    Some(t) if now.duration_since(t) < RETRY_INTERVAL => false,
                    _ => {
                        e.last_request = Some(now);
                        true
                    }
                }
            }
            None => {
                m.insert(
                    (v4, addr),
                    Entry {
                        port,
                        mac: None,
                        updated: now,
                        last_request: Some(now),
                    },
                );
                true
            }
        }
    }

    /// Removes unresolved entries older than [`UNRESOLVED_TIMEOUT`] and learned ones not
    /// heard from for [`RESOLVED_TIMEOUT`]; returns how many went. The live gateway's
    /// housekeeping calls it ten times a second.
    pub fn expire(&self, now: Instant) -> usize {
        let mut m = self.map.write().unwrap_or_else(|e| e.into_inner());
        let before = m.len();
        m.retain(|_, e| {
            let age = now.saturating_duration_since(e.updated);
            match e.mac {
                None => age < UNRESOLVED_TIMEOUT,
                Some(_) => age < RESOLVED_TIMEOUT,
            }
        });
        before - m.len()
    }

    /// Forgets every entry, learned or pending (a neighbour flush).
    pub fn clear(&self) {
        self.map.write().unwrap_or_else(|e| e.into_inner()).clear();
        self.version.fetch_add(1, Ordering::Release);
    }

    /// Every entry, sorted by family and address.
    pub fn entries(&self) -> Vec<NeighbourEntry> {
        let now = Instant::now();
        let m = self.map.read().unwrap_or_else(|e| e.into_inner());
        let mut v: Vec<_> = m
            .iter()
            .map(|(&(v4, addr), e)| NeighbourEntry {
                v4,
                addr,
                port: e.port,
                mac: e.mac,
                age: now.saturating_duration_since(e.updated),
            })
            .collect();
        v.sort_by_key(|e| (!e.v4, e.addr));
        v
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn learn_and_rate_limited_requests() {
        let c = NeighbourCache::default();
        let t0 = Instant::now();
        assert!(c.should_request(1, true, 5, t0));
        assert!(!c.should_request(1, true, 5, t0 + Duration::from_millis(10)));
        assert!(c.should_request(1, true, 5, t0 + RETRY_INTERVAL * 2));
        assert_eq!(c.get(true, 5), None);
        let v = c.version();
        c.learn(1, true, 5, [2, 0, 0, 0, 0, 5]);
        assert!(c.version() > v);
        assert_eq!(c.get(true, 5), Some([2, 0, 0, 0, 0, 5]));
        assert_eq!(c.get(false, 5), None);
        let v = c.version();
        c.learn(1, true, 5, [2, 0, 0, 0, 0, 5]);
        assert_eq!(c.version(), v, "relearning the same MAC is not news");
        assert_eq!(c.entries().len(), 1);
    }

    #[test]
    fn bounded_and_a_flood_cannot_lock_neighbours_out() {
        let c = NeighbourCache::default();
        let flood = MAX_ENTRIES as u128 * 3;
        for a in 0..flood {
            c.learn(0, true, a, [2, 0, 0, 0, 0, 1]);
            assert!(a % 1024 != 0 || c.entries().len() <= MAX_ENTRIES);
        }
        assert!(c.entries().len() <= MAX_ENTRIES);
        // The newest stay, the oldest went.
        assert!(c.get(true, flood - 1).is_some());
        assert!(c.get(true, 0).is_none());
        // A real next hop after the flood: asked for, and learned.
        assert!(c.should_request(0, true, u128::MAX, Instant::now()));
        c.learn(0, true, u128::MAX, [2, 0, 0, 0, 0, 9]);
        assert_eq!(c.get(true, u128::MAX), Some([2, 0, 0, 0, 0, 9]));
    }

    #[test]
    fn unresolved_entries_are_evicted_before_resolved_ones() {
        let c = NeighbourCache::default();
        let t = Instant::now();
        c.learn(0, true, 1, [2, 0, 0, 0, 0, 1]);
        for a in 10..(10 + MAX_ENTRIES as u128) {
            c.should_request(0, true, a, t);
        }
        assert!(c.entries().len() <= MAX_ENTRIES);
        assert!(
            c.get(true, 1).is_some(),
            "the resolved neighbour outlives the requests"
        );
    }

    #[test]
    fn unresolved_entries_expire_and_learned_ones_age_out() {
        let c = NeighbourCache::default();
        let t0 = Instant::now();
        c.learn(0, true, 1, [2, 0, 0, 0, 0, 1]);
        for a in 100..1100 {
            assert!(c.should_request(0, true, a, t0));
        }
        assert_eq!(c.entries().len(), 1001);
        assert_eq!(c.expire(t0 + UNRESOLVED_TIMEOUT / 2), 0);
        // A flood of requests for addresses that never answer leaves nothing behind.
        assert_eq!(
            c.expire(t0 + UNRESOLVED_TIMEOUT + Duration::from_millis(1)),
            1000
        );
        assert_eq!(c.get(true, 1), Some([2, 0, 0, 0, 0, 1]));
        // And an address that is asked for again after its expiry is asked for at once.
        assert!(c.should_request(0, true, 100, t0 + UNRESOLVED_TIMEOUT * 2));
        // The learned one ages out when not heard from.
        assert_eq!(c.expire(t0 + RESOLVED_TIMEOUT + Duration::from_secs(1)), 2);
        assert!(c.entries().is_empty());
    }

    #[test]
    fn refresh_updates_but_never_creates() {
        let c = NeighbourCache::default();
        c.refresh(0, true, 7, [2, 0, 0, 0, 0, 7]);
        assert!(c.entries().is_empty());
        c.learn(0, true, 7, [2, 0, 0, 0, 0, 7]);
        c.refresh(0, true, 7, [2, 0, 0, 0, 0, 8]);
        assert_eq!(c.get(true, 7), Some([2, 0, 0, 0, 0, 8]));
    }
}
