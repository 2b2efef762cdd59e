//! The data-plane pipeline, run to completion on bursts of packets.
//!
//! Outbound: parse -> SPD -> sequence number (from a block reserved once per SA and
//! burst) and ESP encapsulation -> (per run of packets of one SA: one burst crypto call)
//! -> route -> Ethernet header.
//!
//! Inbound: parse -> ESP? SA by SPI -> (per run of one SA: replay pre-check, one burst
//! crypto call that authenticates and decrypts, replay window update) -> trailer and
//! decapsulation -> inbound policy check -> route -> Ethernet header. Plaintext that a
//! policy says must be protected is dropped.
//!
//! AH (RFC 4302) has a burst stage of its own (`ah.rs`), per SA one crypto call for the
//! burst's ICVs: outbound after the ESP stage, for AH alone and AH around ESP (a bundle);
//! inbound before it, where AH is verified and removed, and ESP found inside goes on to
//! the ESP stage remembering its AH SA, since a bundle policy requires both.
//!
//! Every stage walks the whole burst before the next one starts, which keeps code and
//! tables hot and hands the crypto library many packets per call. Nothing here allocates
//! per packet, nor, once the scratch lists have grown to the burst, per burst.
//!
//! The per-packet helpers that return parsed headers or jobs (`ingress`, `parse_ip`,
//! `esp_in::classify`, `esp_out::encapsulate`) are `#[inline(always)]`: returned through
//! memory, their results cost store-forwarding stalls larger than their own work. Forcing
//! `parse_ip` inline alone took 64-byte inbound from 6.5 to 8.8 Mpps (`bench dataplane`).
//!
//! The passes over the burst are the opposite: each stage (`classify_burst`, `crypt_run`,
//! `open_run`, `accept_run`, `decapsulate_run`, `route_burst`) is a function of its own,
//! never inlined, called once per burst or run. Inlined into one, the passes shared one
//! register allocation, and every loop spilled and reloaded what the others kept live:
//! out of line, 12 instructions fewer per 64-byte packet outbound and 20 inbound
//! (callgrind), and a profile names the stage the time goes to.

use std::sync::Arc;

use espgw_config::{Direction, SaProto};
use espgw_crypto::EspOp;
use espgw_wire::ethernet::{self, EthernetFrame, MacAddr, ETHERTYPE_IPV4, ETHERTYPE_IPV6};

use crate::ah;
use crate::counters::{DropReason, WorkerCounters};
use crate::esp_in::{self, Classified, OpenJob};
use crate::esp_out::{self, SealJob};
use crate::flow::{parse_ip, parse_ipv4_no_options, parse_ipv6_no_extensions, FlowKey, IpInfo};
use crate::host::{self, HopLimit, Triage};
use crate::neighbour::NeighbourCache;
use crate::order::Turnstile;
use crate::packet::{Packet, Verdict};
use crate::spd::SpdAction;
use crate::tables::Tables;

mod ah_burst;
mod ingress;
mod open;
mod route;
mod seal;

use ingress::{front, ingress, Front};
pub use route::{TooBig, Unresolved};

#[derive(Clone, Copy)]
enum Slot {
    /// Verdict already set.
    Done,
    /// Ready for routing on this destination.
    Route { v4: bool, dst: u128 },
    /// Encapsulated for SA `sa`; encryption pending. `ah`: the AH SA of a bundle and its
    /// sequence number, applied after encryption.
    Sealed {
        sa: u32,
        job: SealJob,
        ah: Option<(u32, u64)>,
    },
    /// AH of SA `sa` to add once the burst's sequence numbers are reserved; `off`: the
    /// packet's offset in the SA's block; `bundled`: around ESP already sealed (and
    /// counted as encrypted).
    AddAh { sa: u32, off: u64, bundled: bool },
    /// AH of SA `job.sa` to verify and remove.
    OpenAh { job: ah::AhJob },
    /// ESP for SA `job.sa`, with its full sequence number once inferred.
    Open { job: OpenJob, seq: u64 },
}

/// One worker's pipeline over a table snapshot.
pub struct Pipeline {
    /// The snapshot, behind this pipeline's own handle: a burst clones the handle (an
    /// atomic add on a line only this worker touches) rather than the snapshot's shared
    /// count, which every worker would otherwise bounce between cores twice per burst.
    #[allow(clippy::redundant_allocation)] // the second allocation is the point (above)
    tables: Arc<Arc<Tables>>,
    /// What this worker counted (received, sent, encrypted, drops by reason).
    pub counters: WorkerCounters,
    slots: Vec<Slot>,
    oks: Vec<bool>,
    /// The allocation of a crypto run's ESP ops, kept between runs (see [`recycle`]).
    esp_ops: Vec<EspOp<'static>>,
    /// The last flow classified in this burst and its action: consecutive packets of one
    /// flow skip the SPD lookup (a family of more than [`crate::spd::SHORT_SCAN`] rules;
    /// a shorter one is scanned every time, see [`Pipeline::spd_lookup`]).
    spd_cache: Option<(Direction, FlowKey)>,
    /// The action for `spd_cache`'s key. A field of its own: in one tuple with the key,
    /// the action was copied in with loads that straddled the two stores it had just been
    /// written with, a stall on every flow-cache miss (perf, `--flows each`).
    spd_cache_action: Option<SpdAction>,
    /// The last hop routed to in this burst and the destinations it serves: ESP packets
    /// of one SA share it, and with a static next hop so does the route's whole prefix.
    route_cache: Option<route::RouteCache>,
    /// Sequence numbers reserved in this burst, per outbound SA.
    seq_blocks: Vec<SeqBlock>,
    /// The last inbound SPI and its SA index in this burst.
    spi_cache: Option<(u32, u32)>,
    /// Packets of the last burst whose next hop is unresolved (verdict
    /// `Drop(NoNeighbour)`, not yet counted): the node holds them.
    unresolved: Vec<Unresolved>,
    /// Packets of the last burst too big for their SA's path MTU (verdict `Drop(Mtu)`,
    /// not yet counted, left unencrypted): the node fragments or answers them.
    too_big: Vec<TooBig>,
    /// AH's burst stage: the fronts of the prepared packets as they were (put back after
    /// the ICVs), the packets of the SA at hand, their ICVs, and the allocation of the
    /// list of ICV ops, kept between runs as `esp_ops` is (see `ah_burst.rs`).
    ah_text: Vec<u8>,
    ah_pending: Vec<ah_burst::AhPending>,
    ah_icvs: Vec<espgw_crypto::Icv>,
    ah_ops: Vec<espgw_crypto::AhOp<'static>>,
    /// Whether this burst has packets for the AH stage.
    ah_in_burst: bool,
    /// Trap policies hit since last taken: (reqid, the first packet's selectors).
    acquires: Vec<(u32, FlowKey)>,
    /// Inbound: the runs of one SA's packets in the burst (start, end, SA).
    runs: Vec<(usize, usize, u32)>,
    /// Where bursts of one input are spread over several workers: the turnstile of the
    /// ordered section, and the next burst's ticket (see [`crate::order`]).
    order: Option<Arc<Turnstile>>,
    ticket: Option<u64>,
    /// This worker's index in its gateway: which SA of a per-worker set it seals with.
    worker: u32,
}

/// The most acquisitions a pipeline keeps until they are taken (one per reqid).
const MAX_ACQUIRES: usize = 64;

/// The node's host stage, run by the pipeline's first pass over a burst received on
/// `port` (see [`crate::node::Node::receive`]).
pub struct HostStage<'a> {
    /// The port the burst arrived on.
    pub port: u16,
    /// Learned link-layer addresses (ARP and ND replies are recorded here).
    pub neighbours: &'a NeighbourCache,
    /// Whether forwarded packets' TTL / hop limit is decremented.
    pub hop_limit: HopLimit,
    /// Frames the host stage keeps: (index in the burst, what to do with it).
    pub claims: &'a mut Vec<(usize, Triage)>,
}

/// Sequence numbers of one SA in one burst: claimed per packet during classification,
/// reserved together afterwards (once per SA and burst keeps the shared atomic counter off
/// the per-packet path, and lets bursts on several workers reserve in arrival order).
struct SeqBlock {
    sa: u32,
    /// How many packets claimed a number.
    used: u64,
    /// The first number reserved, and how many were (`granted <= used`).
    first: u64,
    granted: u64,
    /// Why packets beyond the block are refused.
    empty: DropReason,
}

impl Pipeline {
    /// A pipeline over `tables`, with empty scratch space.
    pub fn new(tables: Arc<Tables>) -> Self {
        Pipeline {
            tables: Arc::new(tables),
            counters: WorkerCounters::default(),
            slots: Vec::new(),
            oks: Vec::new(),
            esp_ops: Vec::new(),
            spd_cache: None,
            spd_cache_action: None,
            route_cache: None,
            seq_blocks: Vec::new(),
            spi_cache: None,
            unresolved: Vec::new(),
            too_big: Vec::new(),
            ah_text: Vec::new(),
            ah_pending: Vec::new(),
            ah_icvs: Vec::new(),
            ah_ops: Vec::new(),
            ah_in_burst: false,
            acquires: Vec::new(),
            runs: Vec::new(),
            order: None,
            ticket: None,
            worker: 0,
        }
    }

    /// This pipeline's worker index in its gateway (0 unless set): worker `w` seals a
    /// per-worker set's traffic with the set's `w mod n`-th SA, so that each worker has an
    /// SA, a sequence space and a key of its own for the same selectors (RFC 9611).
    pub fn set_worker(&mut self, index: usize) {
        self.worker = u32::try_from(index).unwrap_or(u32::MAX);
    }

    /// Spreads one input over several workers in order: every burst this pipeline
    /// processes then carries a ticket ([`Pipeline::set_ticket`]), and its ordered section
    /// (outbound: reserving sequence numbers; inbound: updating replay windows) goes
    /// through `turnstile` in ticket order. `None`: bursts are independent (one worker
    /// per input, or flows spread by hash).
    pub fn set_order(&mut self, turnstile: Option<Arc<Turnstile>>) {
        self.order = turnstile;
        self.ticket = None;
    }

    /// The ticket of the next burst (its place in arrival order), with an order set.
    pub fn set_ticket(&mut self, ticket: u64) {
        self.ticket = Some(ticket);
    }

    /// Lets the ticket of a burst that never reaches the pipeline (empty) through the
    /// ordered section, so that later bursts do not wait for it.
    pub fn skip_ticket(&mut self) {
        if let (Some(o), Some(t)) = (&self.order, self.ticket.take()) {
            self.counters.ordered_wait_ns += o.skip(t);
        }
    }

    /// Runs `section` in this burst's turn, if bursts are ordered.
    #[inline]
    fn in_turn(&mut self, section: impl FnOnce(&mut Self)) {
        // Taken out and put back rather than cloned: a clone is an atomic add on the
        // turnstile's shared count, a line every worker would bounce per burst.
        let order = self.order.take();
        match (&order, self.ticket.take()) {
            (Some(o), Some(t)) => {
                self.counters.ordered_wait_ns += o.wait(t);
                section(self);
                o.pass(t);
            }
            _ => section(self),
        }
        self.order = order;
    }

    /// The table snapshot in use.
    pub fn tables(&self) -> &Arc<Tables> {
        &self.tables
    }

    /// Starts using a new snapshot (from the next burst on).
    pub fn set_tables(&mut self, t: Arc<Tables>) {
        self.tables = Arc::new(t);
    }

    /// This pipeline's handle on its snapshot: cheap to clone per burst (see the field).
    #[allow(clippy::redundant_allocation)] // see the field
    pub fn tables_handle(&self) -> Arc<Arc<Tables>> {
        self.tables.clone()
    }

    /// The packets of the last burst (or [`Pipeline::route_local`] call) whose next hop
    /// is unresolved; the caller holds them or counts them as `no_neighbour` drops.
    pub fn take_unresolved(&mut self) -> Vec<Unresolved> {
        std::mem::take(&mut self.unresolved)
    }

    /// Trap policies hit since the last call, one per reqid with the first packet's
    /// selectors: the IKE daemon is to negotiate their SAs.
    pub fn take_acquires(&mut self) -> Vec<(u32, FlowKey)> {
        std::mem::take(&mut self.acquires)
    }

    /// Records that a trap policy was hit (bounded; one entry per reqid).
    fn acquire(&mut self, reqid: u32, key: FlowKey) {
        if self.acquires.len() < MAX_ACQUIRES && self.acquires.iter().all(|a| a.0 != reqid) {
            self.acquires.push((reqid, key));
        }
    }

    /// The packets of the last burst too big for their SA's path MTU; the caller
    /// fragments them or answers with ICMP and counts an `mtu` drop.
    pub fn take_too_big(&mut self) -> Vec<TooBig> {
        std::mem::take(&mut self.too_big)
    }

    fn drop_pkt(&mut self, p: &mut Packet, r: DropReason) {
        p.verdict = Verdict::Drop(r);
        self.counters.drop(r);
    }

    /// Runs a burst through the pipeline in `dir`; each packet's `verdict` says what to do
    /// with it afterwards (its buffer then holds the frame to send).
    pub fn process(&mut self, dir: Direction, pkts: &mut [Packet]) {
        self.process_with_host(dir, pkts, None);
    }

    /// [`Pipeline::process`], with the node's host stage deciding for each packet, in the
    /// same pass over the burst, whether the pipeline takes it (one read of each header
    /// instead of two). A packet the host stage claims is left to the caller, listed in
    /// `host.claims` (not counted here). One function with a run-time switch rather than a
    /// generic one: with two copies the compiler stopped inlining the classification and
    /// crypto stages into either, which cost 4 % at 64 bytes in `bench dataplane`.
    pub fn process_with_host(
        &mut self,
        dir: Direction,
        pkts: &mut [Packet],
        mut host: Option<HostStage<'_>>,
    ) {
        let t = self.tables.clone();
        self.slots.clear();
        // Caches live for one burst only: the next one may see new tables.
        self.spd_cache = None;
        self.route_cache = None;
        self.spi_cache = None;
        self.unresolved.clear();
        self.too_big.clear();
        self.seq_blocks.clear();
        self.ah_in_burst = false;
        let n = pkts.len();
        self.classify_burst(&t, dir, pkts, host.as_mut());
        // The ordered section: numbers reserved in arrival order (outbound).
        if dir == Direction::Out {
            self.in_turn(|pl| pl.reserve_seq_blocks(&t));
        }
        if dir == Direction::In && self.ah_in_burst {
            self.open_ah_burst(&t, pkts);
        }
        let mut i = 0;
        self.runs.clear();
        while i < n {
            let key = match self.slots[i] {
                Slot::Sealed { sa, .. } => (0, sa),
                Slot::Open { job, .. } => (1, job.sa),
                _ => {
                    i += 1;
                    continue;
                }
            };
            let mut j = i + 1;
            while j < n
                && match self.slots[j] {
                    Slot::Sealed { sa, .. } => key == (0, sa),
                    Slot::Open { job, .. } => key == (1, job.sa),
                    _ => false,
                }
            {
                j += 1;
            }
            if key.0 == 0 {
                self.crypt_run(&t, key.1, &mut pkts[i..j], i);
            } else {
                self.open_run(&t, key.1, &mut pkts[i..j], i);
                self.runs.push((i, j, key.1));
            }
            i = j;
        }
        if dir == Direction::Out && self.ah_in_burst {
            self.add_ah_burst(&t, pkts);
        }
        if dir == Direction::In {
            // The ordered section: replay windows updated in arrival order (inbound).
            self.in_turn(|pl| {
                for r in 0..pl.runs.len() {
                    let (i, j, sa) = pl.runs[r];
                    pl.accept_run(&t, sa, &mut pkts[i..j], i);
                }
            });
            for r in 0..self.runs.len() {
                let (i, j, sa) = self.runs[r];
                self.decapsulate_run(&t, sa, &mut pkts[i..j], i);
            }
        }
        self.route_burst(&t, pkts);
    }

    /// The last pass: every packet with a destination is routed.
    #[inline(never)]
    fn route_burst(&mut self, t: &Tables, pkts: &mut [Packet]) {
        for (k, p) in pkts.iter_mut().enumerate() {
            if let Slot::Route { v4, dst } = self.slots[k] {
                self.route(t, p, k, v4, dst);
            }
        }
    }

    /// The first pass: the host stage and the header read, then classification (and
    /// outbound, encapsulation) of each packet; one slot pushed per packet.
    #[inline(never)]
    fn classify_burst(
        &mut self,
        t: &Tables,
        dir: Direction,
        pkts: &mut [Packet],
        mut host: Option<&mut HostStage<'_>>,
    ) {
        for (i, p) in pkts.iter_mut().enumerate() {
            let (frame_len, parsed, ttl_due) = match host.as_mut() {
                Some(h) => {
                    p.in_port = h.port;
                    p.verdict = Verdict::Pending;
                    match front(p, h.port, t, h.neighbours, h.hop_limit) {
                        Front::Ip {
                            frame_len,
                            parsed,
                            ttl_due,
                        } => (frame_len, parsed, ttl_due),
                        Front::Host(claimed) => {
                            h.claims.push((i, claimed));
                            self.slots.push(Slot::Done);
                            continue;
                        }
                    }
                }
                None => (p.len(), ingress(p), false),
            };
            self.counters.rx_packets += 1;
            self.counters.rx_bytes += frame_len as u64;
            match parsed {
                Err(r) => {
                    self.drop_pkt(p, r);
                    self.slots.push(Slot::Done);
                }
                Ok(info) => {
                    // The host stage's fast path left the TTL / hop limit for after the
                    // header was read.
                    if ttl_due {
                        host::decrement_hop(p.data_mut(), info.key.v4);
                    }
                    match dir {
                        Direction::Out => self.classify_out(t, p, info),
                        Direction::In => self.classify_in(t, p, info),
                    }
                }
            }
        }
    }

    /// SPD lookup through the one-entry flow cache (inlined: the hit is a compare). The key
    /// comes by value and the table lookup gets a copy: a key whose address is taken lives
    /// on the stack, stored in pieces as it was parsed and read back whole for the
    /// compare, a store-forwarding stall per packet; by value it can stay in registers.
    /// On a miss, a small SPD's scan runs here too, on the key in registers (with a flow
    /// per frame every packet misses); a large one's search runs out of line.
    ///
    /// A family of at most [`crate::spd::SHORT_SCAN`] rules is scanned with no cache at all:
    /// with a flow per frame (traffic of many users, and ipsec-secgw's pcaps) the cache's
    /// compare and store bought nothing. `bench dataplane`, 64 bytes, against the cache
    /// (docs/performance.md, "The short SPD scan in place of the flow cache"): a flow per
    /// frame 1.07x outbound, 1.05x inbound; one flow, where the cache hit every packet,
    /// 1.00x outbound, 0.99x inbound. The scan answers with the rule's action itself, not
    /// its index into the rules: one dependent load less.
    #[inline(always)]
    fn spd_lookup(&mut self, t: &Tables, dir: Direction, key: FlowKey) -> Option<SpdAction> {
        let spd = match dir {
            Direction::Out => &t.spd_out,
            Direction::In => &t.spd_in,
        };
        if let Some(found) = spd.short_scan(&key) {
            return self.worker_action(t, dir, found);
        }
        if let Some((d, k)) = &self.spd_cache {
            if *d == dir && *k == key {
                return self.spd_cache_action;
            }
        }
        let a = match spd.scan_index(&key) {
            Some(found) => {
                let action = found.and_then(|i| spd.rules().get(i)).map(|r| r.action);
                self.worker_action(t, dir, action)
            }
            None => spd_miss(t, dir, key, self.worker),
        };
        self.spd_cache = Some((dir, key));
        self.spd_cache_action = a;
        a
    }

    /// A scanned rule's action as this worker applies it: outbound, a per-worker set is
    /// this worker's SA of the set.
    #[inline(always)]
    fn worker_action(
        &self,
        t: &Tables,
        dir: Direction,
        found: Option<SpdAction>,
    ) -> Option<SpdAction> {
        match found {
            Some(SpdAction::ProtectEach { first, count }) if dir == Direction::Out => {
                per_worker_sa(t, first, count, self.worker)
            }
            a => a,
        }
    }

    /// Classifies an outbound packet and pushes its slot. The ESP case pushes its own
    /// (see [`Pipeline::encapsulate`]).
    fn classify_out(&mut self, t: &Tables, p: &mut Packet, info: IpInfo) {
        let slot = match self.spd_lookup(t, Direction::Out, info.key) {
            None => {
                self.drop_pkt(p, DropReason::NoPolicy);
                Slot::Done
            }
            Some(SpdAction::Discard) => {
                self.drop_pkt(p, DropReason::PolicyDiscard);
                Slot::Done
            }
            Some(SpdAction::Acquire(reqid)) => {
                self.acquire(reqid, info.key);
                self.drop_pkt(p, DropReason::Acquire);
                Slot::Done
            }
            Some(SpdAction::Bypass) => self.bypass(p, &info),
            Some(SpdAction::Protect(sa)) if t.sas[sa as usize].proto == SaProto::Ah => {
                self.ah_in_burst = true;
                self.protect_ah(t, sa, p, &info)
            }
            Some(SpdAction::Protect(sa)) => return self.encapsulate(t, sa, None, p, &info),
            Some(SpdAction::ProtectEach { .. }) => {
                // Never here: `spd_miss` gives an outbound set as `Protect` of this worker's
                // SA (a second inlined `encapsulate` would cost every packet: callgrind).
                self.drop_pkt(p, DropReason::NoPolicy);
                Slot::Done
            }
            Some(SpdAction::Bundle { esp, ah }) => {
                self.ah_in_burst = true;
                return self.encapsulate(t, esp, Some(ah), p, &info);
            }
        };
        self.slots.push(slot);
    }

    /// A packet a policy lets through in the clear.
    fn bypass(&mut self, p: &mut Packet, info: &IpInfo) -> Slot {
        self.counters.bypassed += 1;
        p.truncate(info.total_len);
        Slot::Route {
            v4: info.key.v4,
            dst: info.key.dst,
        }
    }

    /// Classifies an inbound packet and pushes its slot: each kind of slot is pushed where
    /// it is made (see [`Pipeline::encapsulate`] for why).
    fn classify_in(&mut self, t: &Tables, p: &mut Packet, info: IpInfo) {
        match ah::classify(p, &info, t) {
            Ok(None) => {}
            Ok(Some(job)) => {
                p.truncate(info.total_len);
                self.ah_in_burst = true;
                return self.slots.push(Slot::OpenAh { job });
            }
            Err((r, sa)) => {
                let done = self.drop_classified(t, p, r, sa);
                return self.slots.push(done);
            }
        }
        let slot = match esp_in::classify(p, &info, t, &mut self.spi_cache) {
            Ok(Classified::Esp(job)) => return self.slots.push(Slot::Open { job, seq: 0 }),
            Ok(Classified::Plain) => match self.spd_lookup(t, Direction::In, info.key) {
                Some(SpdAction::Bypass) => self.bypass(p, &info),
                Some(
                    SpdAction::Protect(_)
                    | SpdAction::ProtectEach { .. }
                    | SpdAction::Bundle { .. }
                    | SpdAction::Acquire(_),
                ) => {
                    self.drop_pkt(p, DropReason::PlaintextProtected);
                    Slot::Done
                }
                Some(SpdAction::Discard) => {
                    self.drop_pkt(p, DropReason::PolicyDiscard);
                    Slot::Done
                }
                None => {
                    self.drop_pkt(p, DropReason::NoPolicy);
                    Slot::Done
                }
            },
            Err((r, sa)) => self.drop_classified(t, p, r, sa),
        };
        self.slots.push(slot);
    }
}

/// The SPD lookup behind the flow cache, out of line (a new flow, once per run of packets).
/// Outbound, a per-worker set comes back as `Protect` of `worker`'s SA, the `worker mod
/// n`-th of the set: the cache, which is this worker's own, then holds the SA itself.
#[inline(never)]
fn spd_miss(t: &Tables, dir: Direction, key: FlowKey, worker: u32) -> Option<SpdAction> {
    match dir {
        Direction::Out => match t.spd_out.lookup(&key) {
            Some(SpdAction::ProtectEach { first, count }) => per_worker_sa(t, first, count, worker),
            a => a,
        },
        Direction::In => t.spd_in.lookup(&key),
    }
}

/// Outbound, a per-worker set's SA for `worker`: the `worker mod count`-th.
#[inline(always)]
fn per_worker_sa(t: &Tables, first: u32, count: u32, worker: u32) -> Option<SpdAction> {
    let at = first as usize + (worker % count.max(1)) as usize;
    t.per_worker_sas.get(at).map(|&sa| SpdAction::Protect(sa))
}

// The slot is written once per packet per pass, and pushed where it is made (see
// `Pipeline::encapsulate`): kept at 80 bytes at most (perf once counted slot copies at 6.5 %
// of the 64-byte outbound pass, at 112 bytes).
const _: () = assert!(std::mem::size_of::<Slot>() <= 80);

/// An emptied list of crypto ops (ESP's or AH's) with its items' lifetime changed, keeping
/// its allocation: a run's ops borrow the burst's packets, so the list cannot be kept in
/// the pipeline as it is, but its allocation can. The standard library collects a vector's
/// `into_iter` into a vector of a type of the same layout in place (`T` and `U` are one
/// type but for a lifetime at every call); the map never runs, the list being empty. A
/// fresh list for every run was a `malloc` and a `free` of 1.5 KiB per burst: callgrind,
/// 64 bytes outbound, 175.8 -> 172.4 instructions a packet in `crypt_run` outside the
/// crypto call; `bench dataplane`, 1.022x outbound, 1.009x inbound (30 rounds).
fn recycle<T, U>(mut ops: Vec<T>) -> Vec<U> {
    ops.clear();
    ops.into_iter()
        .map(|_| unreachable!("the list was emptied"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `recycle` of `ops` (at least 64 slots, some in use) gives back an empty list of `U`
    /// in the same allocation.
    fn assert_recycled_in_place<T, U>(ops: Vec<T>) {
        assert!(!ops.is_empty() && ops.capacity() >= 64);
        let at = ops.as_ptr() as usize;
        let kept: Vec<U> = recycle(ops);
        assert!(kept.is_empty());
        assert!(kept.capacity() >= 64);
        assert_eq!(kept.as_ptr() as usize, at);
    }

    /// The per-burst allocation stays gone only while the standard library collects in
    /// place: this fails if a toolchain stops doing so.
    #[test]
    fn recycled_esp_op_lists_keep_their_allocation() {
        let mut bufs = [[0u8; 32]; 3];
        let mut ops: Vec<EspOp<'_>> = Vec::with_capacity(64);
        for b in bufs.iter_mut() {
            ops.push(EspOp { esp: b, seq: 1 });
        }
        assert_recycled_in_place::<_, EspOp<'static>>(ops);
    }

    /// The same for AH's ICV ops (`Pipeline::compute_icvs`).
    #[test]
    fn recycled_ah_op_lists_keep_their_allocation() {
        let mut texts = [[0u8; 32]; 3];
        let mut icvs = [espgw_crypto::Icv::NONE; 3];
        let mut ops: Vec<espgw_crypto::AhOp<'_>> = Vec::with_capacity(64);
        for (text, icv) in texts.iter_mut().zip(icvs.iter_mut()) {
            ops.push(espgw_crypto::AhOp {
                text,
                iv: [0; espgw_crypto::ah::GMAC_IV_LEN],
                icv,
            });
        }
        assert_recycled_in_place::<_, espgw_crypto::AhOp<'static>>(ops);
    }
}
