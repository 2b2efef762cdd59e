//! Why packets are dropped, and counters for them.

use std::sync::atomic::{AtomicU64, Ordering};

macro_rules! reasons {
    ($($v:ident => $n:literal, $d:literal;)*) => {
        /// Every reason a packet can be dropped. Each is counted on its own.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        #[repr(u8)]
        pub enum DropReason { $(#[doc = $d] $v,)* }

        impl DropReason {
            /// Every reason, in counter order.
            pub const ALL: &'static [DropReason] = &[$(DropReason::$v,)*];
            /// Short snake_case name, for tables, JSON and metrics.
            pub const fn name(self) -> &'static str {
                match self { $(DropReason::$v => $n,)* }
            }
            /// One sentence for operators: what the reason means.
            pub const fn describe(self) -> &'static str {
                match self { $(DropReason::$v => $d,)* }
            }
        }
    };
}

reasons! {
    Malformed => "malformed", "frame or IP header does not parse";
    NotIp => "not_ip", "not an IPv4 or IPv6 frame";
    NoPolicy => "no_policy", "no SPD rule matches";
    PolicyDiscard => "policy_discard", "an SPD rule says discard";
    PlaintextProtected => "plaintext_protected", "plaintext arrived where a policy requires ESP";
    NoSa => "no_sa", "no SA for this SPI";
    SaMismatch => "sa_mismatch", "ESP does not fit its SA (family, encapsulation)";
    Truncated => "truncated", "ESP packet shorter than its headers and ICV";
    Replay => "replay", "sequence number replayed or too old";
    AuthFailed => "auth_failed", "ICV check failed";
    BadPadding => "bad_padding", "ESP padding or pad length invalid";
    BadNextHeader => "bad_next_header", "next header does not match the SA's mode";
    Dummy => "dummy", "dummy packet (next header 59)";
    PolicyMismatch => "policy_mismatch", "inner packet outside the selectors of its SA";
    SeqExhausted => "seq_exhausted", "sequence number would wrap: SA retired";
    SeqUnreserved => "seq_unreserved", "no sequence numbers reserved in the state directory yet (it is behind or failing)";
    LifetimeExpired => "lifetime_expired", "hard lifetime reached";
    EcnDrop => "ecn_drop", "outer CE over a not-ECT inner packet (RFC 6040)";
    Fragment => "fragment", "fragmented ESP (reassembly not enabled)";
    IkeOrKeepalive => "ike_or_keepalive", "IKE or NAT keepalive on the ESP port";
    NoRoute => "no_route", "no route to the destination";
    TooBig => "too_big", "packet does not fit the buffer";
    Mtu => "mtu", "too big for the path MTU with DF set (or IPv6): ICMP error sent";
    NoNeighbour => "no_neighbour", "next hop did not answer ARP / neighbour solicitation";
    TtlExceeded => "ttl_exceeded", "TTL / hop limit expired: ICMP time exceeded sent";
    ToGateway => "to_gateway", "addressed to the gateway but neither ESP, AH, IKE nor ping";
    AhUnsupported => "ah_unsupported", "AH behind an IPv4 source route or IPv6 routing header (not implemented)";
    Reassembly => "reassembly", "fragment not reassembled (timeout, overlap, size or memory limit)";
    TxFull => "tx_full", "transmit ring full";
    Acquire => "acquire", "no SA negotiated yet: the IKE daemon was asked for one";
    CryptoFailed => "crypto_failed", "the crypto back-end did not complete an outbound ICV: nothing sent";
}

/// How many drop reasons there are (the length of per-reason counter arrays).
pub const N_REASONS: usize = DropReason::ALL.len();

/// Plain counters owned by one worker; summed for reports.
#[derive(Debug, Clone, Default)]
pub struct WorkerCounters {
    /// Frames received.
    pub rx_packets: u64,
    /// Bytes received.
    pub rx_bytes: u64,
    /// Frames transmitted.
    pub tx_packets: u64,
    /// Bytes transmitted.
    pub tx_bytes: u64,
    /// Packets encrypted (ESP or AH applied).
    pub encrypted: u64,
    /// Packets decrypted and verified.
    pub decrypted: u64,
    /// Packets forwarded in the clear by a bypass rule.
    pub bypassed: u64,
    /// Drops, indexed by [`DropReason`] as `usize`.
    pub drops: [u64; N_REASONS],
    /// One input spread over workers in order: nanoseconds this worker waited for its
    /// bursts' turns in the pipeline's ordered section (sequence numbers, replay window).
    pub ordered_wait_ns: u64,
    /// Likewise at transmit (counted by the caller that transmits in ticket order).
    pub transmit_wait_ns: u64,
}

impl WorkerCounters {
    /// Counts one drop for `r`.
    pub fn drop(&mut self, r: DropReason) {
        self.drops[r as usize] += 1;
    }
    /// Drops counted for `r`.
    pub fn dropped(&self, r: DropReason) -> u64 {
        self.drops[r as usize]
    }
    /// Drops counted for every reason together.
    pub fn total_drops(&self) -> u64 {
        self.drops.iter().sum()
    }
    /// Adds another worker's counters to these.
    pub fn add(&mut self, o: &WorkerCounters) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.encrypted += o.encrypted;
        self.decrypted += o.decrypted;
        self.bypassed += o.bypassed;
        self.ordered_wait_ns += o.ordered_wait_ns;
        self.transmit_wait_ns += o.transmit_wait_ns;
        for (a, b) in self.drops.iter_mut().zip(o.drops.iter()) {
            *a += b;
        }
    }
}

/// Counters of one SA, shared by every worker (updated once per burst, not per packet).
///
/// `packets` is charged before the packets go (outbound when their sequence numbers are
/// reserved, inbound when the replay window accepts them), in one step with the hard
/// packet lifetime's check ([`SaCounters::charge`]): workers that share the SA then never
/// both spend its last packets. `bytes` is added once the packets are done.
#[derive(Debug, Default)]
#[repr(C)] // packets and bytes first: see `SaState`'s layout
pub struct SaCounters {
    /// Packets processed under the SA.
    pub packets: AtomicU64,
    /// Payload bytes processed under the SA.
    pub bytes: AtomicU64,
    /// Drops attributed to the SA, indexed by [`DropReason`] as `usize`.
    pub drops: [AtomicU64; N_REASONS],
}

impl SaCounters {
    /// Counts up to `want` packets, never past `limit` (the hard packet lifetime, if any):
    /// the check and the count are one compare-and-swap. Returns how many were counted.
    pub fn charge(&self, want: u64, limit: Option<u64>) -> u64 {
        if want == 0 {
            return 0;
        }
        let Some(limit) = limit else {
            self.packets.fetch_add(want, Ordering::Relaxed);
            return want;
        };
        let mut cur = self.packets.load(Ordering::Relaxed);
        loop {
            let take = want.min(limit.saturating_sub(cur));
            if take == 0 {
                return 0;
            }
            match self.packets.compare_exchange_weak(
                cur,
                cur + take,
                Ordering::Relaxed,
                Ordering::Relaxed,
            ) {
                Ok(_) => return take,
                Err(now) => cur = now,
            }
        }
    }
    /// Takes back `n` packets charged that were not processed after all.
    pub fn refund(&self, n: u64) {
        if n > 0 {
            self.packets.fetch_sub(n, Ordering::Relaxed);
        }
    }
    /// Counts `bytes` payload bytes of packets already charged.
    pub fn add_bytes(&self, bytes: u64) {
        if bytes > 0 {
            self.bytes.fetch_add(bytes, Ordering::Relaxed);
        }
    }
    /// Counts `n` drops for `r`.
    pub fn drop(&self, r: DropReason, n: u64) {
        if n > 0 {
            self.drops[r as usize].fetch_add(n, Ordering::Relaxed);
        }
    }
    /// Drops counted for `r`.
    pub fn dropped(&self, r: DropReason) -> u64 {
        self.drops[r as usize].load(Ordering::Relaxed)
    }
    /// Packets processed so far.
    pub fn packets(&self) -> u64 {
        self.packets.load(Ordering::Relaxed)
    }
    /// Payload bytes processed so far.
    pub fn bytes(&self) -> u64 {
        self.bytes.load(Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique() {
        let mut names: Vec<_> = DropReason::ALL.iter().map(|r| r.name()).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), N_REASONS);
        let mut c = WorkerCounters::default();
        c.drop(DropReason::Replay);
        assert_eq!(c.dropped(DropReason::Replay), 1);
        assert_eq!(c.total_drops(), 1);
    }

    /// Threads charging bursts of packets against one limit, with no lock and no order
    /// between them (as workers of one SA under hash fanout do), are granted exactly the
    /// limit between them, and a refund makes room again.
    #[test]
    fn concurrent_charges_never_pass_the_limit() {
        for round in 0..20u64 {
            let c = SaCounters::default();
            let limit = 5_000 + round * 37;
            let granted: u64 = std::thread::scope(|s| {
                let handles: Vec<_> = (0..4u64)
                    .map(|w| {
                        let c = &c;
                        s.spawn(move || {
                            (0..2_000u64)
                                .map(|i| c.charge(1 + (i * 7 + w * 13) % 32, Some(limit)))
                                .sum::<u64>()
                        })
                    })
                    .collect();
                handles.into_iter().map(|h| h.join().unwrap()).sum()
            });
            assert_eq!(granted, limit, "round {round}");
            assert_eq!(c.packets(), limit);
            assert_eq!(c.charge(1, Some(limit)), 0);
            c.refund(3);
            assert_eq!(c.charge(10, Some(limit)), 3);
            assert_eq!(c.charge(7, None), 7);
            assert_eq!(c.packets(), limit + 7);
        }
    }
}
