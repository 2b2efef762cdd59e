//! Security associations: the immutable part (keys, mode, endpoints) that lives in the
//! table snapshot, and the mutable part ([`SaState`]: sequence numbers, replay window,
//! counters) that is shared by workers and survives table swaps.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex};

use espgw_config::{Direction, Lifetime, Mode, SaConfig, SaProto, UdpEncap};
use espgw_crypto::{AhKey, EspKey};

use crate::counters::SaCounters;
use crate::encap::OuterHeader;
use crate::replay::ReplayWindow;

/// Mutable state of one SA.
///
/// Laid out in this order (`repr(C)`), from a cache line of its own, for workers that
/// share the SA: an outbound burst's atomics (sequence numbers, lifetime flags, packet
/// and byte counts) then all fall on the first line, which moves between cores once per
/// burst rather than once per field; inbound, the replay window's lock follows on lines
/// of its own.
#[derive(Debug)]
#[repr(C, align(64))]
pub struct SaState {
    /// Outbound: the last sequence number used.
    last_seq: AtomicU64,
    /// Outbound: the last sequence number this SA may use, because a state directory
    /// recorded it as reserved before any number up to it was used ([`SaState::reserve_to`]);
    /// `u64::MAX` where sequence numbers are not persisted. The data path never goes past
    /// it: a number used after a restart is always above every number used before.
    seq_ceiling: AtomicU64,
    /// The sequence number space is used up; the SA is retired.
    pub exhausted: AtomicBool,
    /// The soft lifetime is reached (time to rekey).
    pub soft_expired: AtomicBool,
    /// The hard lifetime is reached: the SA carries no more packets.
    pub hard_expired: AtomicBool,
    /// Which of the events above the gateway has reported (bits of [`SaEvent`]), so that
    /// each is logged and counted once per SA.
    pub reported: AtomicU8,
    /// Whether a state directory has taken this state over (restored, reserved ahead).
    pub persisted: AtomicBool,
    /// Packets, bytes and drops under this SA.
    pub counters: SaCounters,
    /// Inbound: the replay window. Locked once per burst of this SA, never per packet.
    pub replay: Mutex<ReplayWindow>,
}

// The first line holds everything an outbound burst changes (see the type's comment).
const _: () = assert!(std::mem::offset_of!(SaState, counters) + 16 <= 64);

impl SaState {
    /// State for a new SA. `initial_seq` is the last sequence number before the SA's
    /// first packet: outbound sends `initial_seq + 1` first; inbound starts its window
    /// there, so that with ESN the receiver infers the same high half as the sender.
    pub fn new(initial_seq: u64, replay_window: u32) -> Self {
        SaState {
            last_seq: AtomicU64::new(initial_seq),
            seq_ceiling: AtomicU64::new(u64::MAX),
            persisted: AtomicBool::new(false),
            replay: Mutex::new(ReplayWindow::with_top(replay_window, initial_seq)),
            counters: SaCounters::default(),
            soft_expired: AtomicBool::new(false),
            hard_expired: AtomicBool::new(false),
            exhausted: AtomicBool::new(false),
            reported: AtomicU8::new(0),
        }
    }

    /// The last sequence number used (outbound) or the initial one (inbound).
    pub fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::Relaxed)
    }

    /// The last sequence number the data path may use.
    pub fn seq_ceiling(&self) -> u64 {
        self.seq_ceiling.load(Ordering::Acquire)
    }

    /// Lets the data path use sequence numbers up to `ceiling`. Call only once `ceiling`
    /// is durably recorded as reserved (written and fsync'd). Never lowers the ceiling.
    pub fn reserve_to(&self, ceiling: u64) {
        self.seq_ceiling.fetch_max(ceiling, Ordering::Release);
    }

    /// Limits the data path to the numbers reserved so far: `ceiling` (the state
    /// directory's record, before anything is sent).
    pub fn limit_to(&self, ceiling: u64) {
        self.seq_ceiling.store(ceiling, Ordering::Release);
    }

    /// Resumes after a restart: the next number sent is above `last_used`.
    pub fn resume_after(&self, last_used: u64) {
        self.last_seq.fetch_max(last_used, Ordering::AcqRel);
    }
}

/// What an operator is told about an SA once: soft lifetime reached (time to rekey), hard
/// lifetime reached (the SA stops), sequence numbers used up (the SA stops).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaEvent {
    /// The soft lifetime is reached.
    SoftExpired,
    /// The hard lifetime is reached.
    HardExpired,
    /// The sequence number space is used up.
    SeqExhausted,
}

impl SaEvent {
    /// Every event, in bit order.
    pub const ALL: [SaEvent; 3] = [
        SaEvent::SoftExpired,
        SaEvent::HardExpired,
        SaEvent::SeqExhausted,
    ];

    /// Short name, for logs and metrics.
    pub const fn name(self) -> &'static str {
        match self {
            SaEvent::SoftExpired => "soft_expired",
            SaEvent::HardExpired => "hard_expired",
            SaEvent::SeqExhausted => "seq_exhausted",
        }
    }

    const fn bit(self) -> u8 {
        match self {
            SaEvent::SoftExpired => 1,
            SaEvent::HardExpired => 2,
            SaEvent::SeqExhausted => 4,
        }
    }
}

impl SaState {
    fn happened(&self, e: SaEvent) -> bool {
        match e {
            SaEvent::SoftExpired => self.soft_expired.load(Ordering::Relaxed),
            SaEvent::HardExpired => self.hard_expired.load(Ordering::Relaxed),
            SaEvent::SeqExhausted => self.exhausted.load(Ordering::Relaxed),
        }
    }

    /// The events that happened and were not reported yet, marking them reported.
    pub fn take_new_events(&self) -> Vec<SaEvent> {
        let mut new = Vec::new();
        for e in SaEvent::ALL {
            if self.happened(e) && self.reported.fetch_or(e.bit(), Ordering::AcqRel) & e.bit() == 0
            {
                new.push(e);
            }
        }
        new
    }
}

/// The prepared keys of an SA, by protocol.
#[derive(Clone)]
pub enum SaKey {
    /// ESP: the suite's prepared cipher and integrity keys.
    Esp(Arc<dyn EspKey>),
    /// AH: the prepared integrity key.
    Ah(Arc<AhKey>),
}

/// One SA as the data plane uses it.
pub struct Sa {
    /// Security parameter index.
    pub spi: u32,
    /// Inbound or outbound.
    pub direction: Direction,
    /// Tunnel (with its outer addresses) or transport.
    pub mode: Mode,
    /// ESP or AH.
    pub proto: SaProto,
    /// The transform: IV, encryption and ICV of every packet.
    pub key: SaKey,
    /// Sizes the layout needs, from the transform's suite (read per packet). For AH: the
    /// IV (GMAC) and ICV in the AH header.
    pub iv_len: usize,
    /// ICV length in bytes.
    pub icv_len: usize,
    /// What payload and trailer are padded to.
    pub block_len: usize,
    /// Whether extended (64-bit) sequence numbers are used (RFC 4303 §2.2.1).
    pub esn: bool,
    /// UDP encapsulation (RFC 3948), if any.
    pub udp: Option<UdpEncap>,
    /// TTL / hop limit of the outer header in tunnel mode.
    pub ttl: u8,
    /// Soft and hard limits in time, bytes and packets.
    pub lifetime: Lifetime,
    /// The operator's name for the SA, for reports.
    pub label: String,
    /// Tunnel mode: the outer header's template (`None` in transport mode, or where the
    /// tunnel's two addresses are of different families: such an SA drops its packets).
    pub outer: Option<OuterHeader>,
    /// Outbound: the largest inner packet that fits the path MTU once encapsulated
    /// (`usize::MAX` where no MTU is enforced).
    pub max_inner: usize,
    /// Sequence numbers, replay window, counters and lifetime flags, shared by the workers and kept across reloads while the key is unchanged.
    pub state: Arc<SaState>,
    /// The identity of its key material (`SaConfig::key_id`): names its persisted
    /// sequence state.
    pub key_id: [u8; 32],
    /// The configuration it was built from (for reports and reload comparison).
    pub config: SaConfig,
}

impl Sa {
    /// The ESP transform (`None` for an AH SA).
    pub fn esp_key(&self) -> Option<&dyn EspKey> {
        match &self.key {
            SaKey::Esp(k) => Some(&**k),
            SaKey::Ah(_) => None,
        }
    }

    /// The AH key (`None` for an ESP SA).
    pub fn ah_key(&self) -> Option<&AhKey> {
        match &self.key {
            SaKey::Ah(k) => Some(k),
            SaKey::Esp(_) => None,
        }
    }

    /// The largest sequence number this SA may send.
    pub fn max_seq(&self) -> u64 {
        if self.esn {
            u64::MAX
        } else {
            u64::from(u32::MAX)
        }
    }

    /// Reserves up to `n` consecutive sequence numbers for one burst: returns the first
    /// and how many were granted. Numbers never wrap: once the space is used up the SA is
    /// retired (RFC 4303 §3.3.3) and every later packet is refused. Nor do they pass the
    /// persisted ceiling: there the grant is short until the state directory reserves more
    /// (the SA is not retired).
    pub fn reserve_seq(&self, n: u64) -> (u64, u64) {
        let max = self.max_seq();
        let limit = max.min(self.state.seq_ceiling());
        let mut cur = self.state.last_seq.load(Ordering::Relaxed);
        loop {
            let take = n.min(limit.saturating_sub(cur));
            if take == 0 {
                if cur >= max {
                    self.state.exhausted.store(true, Ordering::Relaxed);
                }
                return (0, 0);
            }
            match self.state.last_seq.compare_exchange_weak(
                cur,
                cur + take,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return (cur + 1, take),
                Err(now) => cur = now,
            }
        }
    }

    /// Returns the unused numbers `next..end` of a reservation, if no later reservation
    /// was made (the counter still stands at `end - 1`). Otherwise they stay unused: a gap,
    /// never a reuse.
    pub fn give_back_seq(&self, next: u64, end: u64) {
        if next < end {
            let _ = self.state.last_seq.compare_exchange(
                end - 1,
                next - 1,
                Ordering::Relaxed,
                Ordering::Relaxed,
            );
        }
    }

    /// How many of `want` packets the hard lifetime still allows, without counting them (a
    /// pre-check, so that no crypto is spent on packets that cannot pass), and marks soft
    /// expiry. Byte lifetimes are enforced at burst granularity.
    pub fn lifetime_allowance(&self, want: u64) -> u64 {
        let c = &self.state.counters;
        let (pk, by) = (c.packets(), c.bytes());
        let l = &self.lifetime;
        if l.soft_packets.is_some_and(|s| pk >= s) || l.soft_bytes.is_some_and(|s| by >= s) {
            self.state.soft_expired.store(true, Ordering::Relaxed);
        }
        if l.hard_bytes.is_some_and(|h| by >= h) {
            self.state.hard_expired.store(true, Ordering::Relaxed);
            return 0;
        }
        match l.hard_packets {
            Some(h) => {
                let left = h.saturating_sub(pk);
                // `want` is an upper bound (a burst may hold fewer packets of this SA), so
                // expiry is marked only once nothing is left; `note_usage` marks it
                // exactly from the counted totals.
                if left == 0 {
                    self.state.hard_expired.store(true, Ordering::Relaxed);
                }
                left.min(want)
            }
            None => want,
        }
    }

    /// Counts up to `want` packets against the lifetime and returns how many the SA may
    /// carry: none once the hard byte lifetime is reached, no more than the hard packet
    /// lifetime leaves. The packet check and the count are one atomic step
    /// ([`SaCounters::charge`]), so it is exact however many workers share the SA. Packets
    /// charged and then not carried are given back with [`SaCounters::refund`]; call
    /// [`Sa::note_usage`] afterwards to mark expiry.
    pub fn charge_lifetime(&self, want: u64) -> u64 {
        let c = &self.state.counters;
        if self.lifetime.hard_bytes.is_some_and(|h| c.bytes() >= h) {
            self.state.hard_expired.store(true, Ordering::Relaxed);
            return 0;
        }
        c.charge(want, self.lifetime.hard_packets)
    }

    /// Records use after a burst, marking soft and hard expiry as the totals reach them.
    pub fn note_usage(&self) {
        let c = &self.state.counters;
        let (pk, by) = (c.packets(), c.bytes());
        let l = &self.lifetime;
        if l.soft_packets.is_some_and(|s| pk >= s) || l.soft_bytes.is_some_and(|s| by >= s) {
            self.state.soft_expired.store(true, Ordering::Relaxed);
        }
        if l.hard_packets.is_some_and(|h| pk >= h) || l.hard_bytes.is_some_and(|h| by >= h) {
            self.state.hard_expired.store(true, Ordering::Relaxed);
        }
    }

    /// Tunnel endpoints as numbers, if tunnel mode: (v4, local, remote).
    pub fn tunnel(&self) -> Option<(bool, IpAddr, IpAddr)> {
        match self.mode {
            Mode::Tunnel { local, remote } => Some((local.is_ipv4(), local, remote)),
            Mode::Transport => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_event_is_reported_once() {
        let st = SaState::new(0, 64);
        assert!(st.take_new_events().is_empty());
        st.soft_expired.store(true, Ordering::Relaxed);
        assert_eq!(st.take_new_events(), vec![SaEvent::SoftExpired]);
        assert!(st.take_new_events().is_empty(), "once");
        st.exhausted.store(true, Ordering::Relaxed);
        st.hard_expired.store(true, Ordering::Relaxed);
        assert_eq!(
            st.take_new_events(),
            vec![SaEvent::HardExpired, SaEvent::SeqExhausted]
        );
        assert!(st.take_new_events().is_empty());
    }
}
