//! Security associations: the immutable part (keys, mode, endpoints) that lives in the
//! table snapshot, and the mutable part ([`SaState`]: sequence numbers, replay window,
//! counters) that is shared by workers and survives table swaps.

use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use espgw_config::{Direction, Lifetime, Mode, SaConfig, SaProto, UdpEncap};
use espgw_crypto::{AhKey, EspKey};

use crate::counters::SaCounters;
use crate::replay::ReplayWindow;

/// Mutable state of one SA.
#[derive(Debug)]
pub struct SaState {
    /// Outbound: the last sequence number used.
    last_seq: AtomicU64,
    /// Inbound: the replay window. Locked once per burst of this SA, never per packet.
    pub replay: Mutex<ReplayWindow>,
    pub counters: SaCounters,
    pub soft_expired: AtomicBool,
    pub hard_expired: AtomicBool,
    /// The sequence number space is used up; the SA is retired.
    pub exhausted: AtomicBool,
}

impl SaState {
    /// State for a new SA. `initial_seq` is the last sequence number before the SA's
    /// first packet: outbound sends `initial_seq + 1` first; inbound starts its window
    /// there, so that with ESN the receiver infers the same high half as the sender.
    pub fn new(initial_seq: u64, replay_window: u32) -> Self {
        SaState {
            last_seq: AtomicU64::new(initial_seq),
            replay: Mutex::new(ReplayWindow::with_top(replay_window, initial_seq)),
            counters: SaCounters::default(),
            soft_expired: AtomicBool::new(false),
            hard_expired: AtomicBool::new(false),
            exhausted: AtomicBool::new(false),
        }
    }

    pub fn last_seq(&self) -> u64 {
        self.last_seq.load(Ordering::Relaxed)
    }
}

/// The prepared keys of an SA, by protocol.
#[derive(Clone)]
pub enum SaKey {
    Esp(Arc<dyn EspKey>),
    Ah(Arc<AhKey>),
}

/// One SA as the data plane uses it.
pub struct Sa {
    pub spi: u32,
    pub direction: Direction,
    pub mode: Mode,
    pub proto: SaProto,
    /// The transform: IV, encryption and ICV of every packet.
    pub key: SaKey,
    /// Sizes the layout needs, from the transform's suite (read per packet). For AH: the
    /// IV (GMAC) and ICV in the AH header.
    pub iv_len: usize,
    pub icv_len: usize,
    /// What payload and trailer are padded to.
    pub block_len: usize,
    pub esn: bool,
    pub udp: Option<UdpEncap>,
    pub ttl: u8,
    pub lifetime: Lifetime,
    pub label: String,
    /// Outbound: the largest inner packet that fits the path MTU once encapsulated
    /// (`usize::MAX` where no MTU is enforced).
    pub max_inner: usize,
    pub state: Arc<SaState>,
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
    /// retired (RFC 4303 §3.3.3) and every later packet is refused.
    pub fn reserve_seq(&self, n: u64) -> (u64, u64) {
        let max = self.max_seq();
        let mut cur = self.state.last_seq.load(Ordering::Relaxed);
        loop {
            let take = n.min(max - cur);
            if take == 0 {
                self.state.exhausted.store(true, Ordering::Relaxed);
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

    /// How many more packets the hard lifetime allows (checks bytes too, per burst), and
    /// marks soft expiry. Byte lifetimes are enforced at burst granularity.
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
