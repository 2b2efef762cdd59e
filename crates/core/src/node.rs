//! One worker's whole packet path, sans I/O: a burst of received frames and the time go
//! in; frames to transmit per port come out, packets waiting for a next hop stay inside,
//! and every drop is counted by reason.
//!
//! A frame's way through [`Node::receive`], top to bottom:
//!
//! 1. host triage ([`crate::host::triage`]): ARP, neighbour discovery and ping for the
//!    gateway's own addresses are answered in place and go back out of their port; TTL /
//!    hop limit is decremented, and expiry answered with ICMP time exceeded;
//! 2. fragments addressed to the gateway (fragmented ESP) are put back together
//!    ([`crate::reassembly`]);
//! 3. the burst runs through the ESP/AH [`Pipeline`] in the direction of the port it
//!    arrived on (protected: outbound, unprotected: inbound);
//! 4. outbound packets too big for their SA are fragmented before encryption (IPv4
//!    without DF; the fragments go through step 3 once more) or answered with ICMP
//!    "fragmentation needed" / "packet too big";
//! 5. packets whose next hop has no link-layer address yet are held (bounded, in order)
//!    while ARP / neighbour solicitations go out, and released, before newer packets to
//!    the same hop, once it answers — here or on another worker sharing the cache.
//!
//! The live workers, the offline pcap gateway, `bench dataplane` and the fuzz targets all
//! drive this one node; only where frames come from and go to differs.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use espgw_config::{Direction, PortRole};
use espgw_wire::ethernet::{ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, HEADER_LEN};

use crate::counters::{DropReason, WorkerCounters};
use crate::fragment::fragment_v4;
use crate::host::{self, HopLimit, IcmpError, Triage};
use crate::neighbour::NeighbourCache;
use crate::packet::{Packet, PacketPool, Verdict};
use crate::pipeline::{HostStage, Pipeline, TooBig, Unresolved};
use crate::reassembly::{Reassembled, Reassembler};
use crate::tables::Tables;
pub use crate::transmit::Transmit;

/// Packets held per node while their next hop is being resolved.
pub const MAX_HELD: usize = 512;
/// How long a packet waits for its next hop before it is dropped.
pub const HOLD_TIME: Duration = Duration::from_secs(1);
/// ICMP errors a node sends per second at most (RFC 1812 §4.3.2.8, RFC 4443 §2.4(f)): a
/// flood of oversized or expiring packets must not turn the gateway into an amplifier.
pub const MAX_ICMP_ERRORS_PER_SECOND: u32 = 1000;

/// Work the gateway does as a host, counted per node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HostCounters {
    /// ARP requests answered.
    pub arp_replies: u64,
    /// Neighbour solicitations answered.
    pub nd_replies: u64,
    /// Echo requests (ping) answered.
    pub echo_replies: u64,
    /// ARP requests and neighbour solicitations sent for next hops.
    pub solicitations_sent: u64,
    /// ICMP errors sent (time exceeded, fragmentation needed, packet too big).
    pub icmp_errors_sent: u64,
    /// Packets fragmented to fit a path MTU.
    pub fragmented: u64,
    /// Fragments made of them.
    pub fragments_made: u64,
    /// Datagrams reassembled from fragments.
    pub reassembled: u64,
    /// Packets held while their next hop resolved.
    pub held: u64,
    /// Held packets sent once it did.
    pub held_released: u64,
}

impl HostCounters {
    /// Adds another node's counters to these.
    pub fn add(&mut self, o: &HostCounters) {
        self.arp_replies += o.arp_replies;
        self.nd_replies += o.nd_replies;
        self.echo_replies += o.echo_replies;
        self.solicitations_sent += o.solicitations_sent;
        self.icmp_errors_sent += o.icmp_errors_sent;
        self.fragmented += o.fragmented;
        self.fragments_made += o.fragments_made;
        self.reassembled += o.reassembled;
        self.held += o.held;
        self.held_released += o.held_released;
    }
}

/// A routed packet waiting for its next hop's link-layer address.
struct Held {
    pkt: Packet,
    hop: Unresolved,
    since: Instant,
}

/// Counts ICMP errors in one-second windows.
struct IcmpLimiter {
    window: Option<Instant>,
    sent: u32,
}

impl IcmpLimiter {
    fn allow(&mut self, now: Instant) -> bool {
        let fresh = self
            .window
            .is_none_or(|w| now.duration_since(w) >= Duration::from_secs(1));
        if fresh {
            self.window = Some(now);
            self.sent = 0;
        }
        if self.sent >= MAX_ICMP_ERRORS_PER_SECOND {
            return false;
        }
        self.sent += 1;
        true
    }
}

/// One worker's packet path (see the module documentation).
pub struct Node {
    pipeline: Pipeline,
    pool: PacketPool,
    /// Neighbours learned by ARP / ND (shared between the workers of a gateway).
    neighbours: Arc<NeighbourCache>,
    /// Per port: whether this node can send on it (a TUN port served by another worker
    /// cannot carry this node's solicitations).
    links: Vec<bool>,
    /// Frames of the burst at hand that the host stage keeps: (index, what to do).
    claims: Vec<(usize, Triage)>,
    /// Datagrams reassembled from the burst at hand.
    batch: Vec<Packet>,
    fragments: Vec<Packet>,
    held: VecDeque<Held>,
    /// The other half of `held`'s double buffer (empty between calls).
    held_spare: VecDeque<Held>,
    reassembler: Reassembler,
    host: HostCounters,
    /// The neighbour cache's version when the held packets were last looked at.
    neighbour_version: u64,
    icmp: IcmpLimiter,
    hop_limit: HopLimit,
}

impl Node {
    /// A node over `tables`, learning neighbours into `neighbours`, able to send on the
    /// ports whose `links` entry is true (missing entries: true).
    pub fn new(tables: Arc<Tables>, neighbours: Arc<NeighbourCache>, links: Vec<bool>) -> Self {
        // A burst for each port's turn and a few more in flight, and the most packets
        // held for a next hop.
        let buffers = tables.burst * (tables.ports.len() + 4) + MAX_HELD;
        Self::with_buffers(tables, neighbours, links, buffers)
    }

    /// [`Node::new`] with `buffers` buffers in its pool to begin with. The pool grows to
    /// its high-water mark when it runs short, so a smaller start changes when memory is
    /// allocated, not what the node does: for a node that lives briefly (a fuzzing input
    /// builds one each, and a full pool is about 2 MB of buffers).
    pub fn with_buffers(
        tables: Arc<Tables>,
        neighbours: Arc<NeighbourCache>,
        links: Vec<bool>,
        buffers: usize,
    ) -> Self {
        let burst = tables.burst;
        Node {
            pipeline: Pipeline::new(tables),
            pool: PacketPool::new(buffers),
            neighbours,
            links,
            claims: Vec::with_capacity(burst),
            batch: Vec::new(),
            fragments: Vec::new(),
            held: VecDeque::new(),
            held_spare: VecDeque::new(),
            reassembler: Reassembler::default(),
            host: HostCounters::default(),
            neighbour_version: 0,
            icmp: IcmpLimiter {
                window: None,
                sent: 0,
            },
            hop_limit: HopLimit::Decrement,
        }
    }

    /// Leaves forwarded packets' TTL / hop limit alone instead of acting as a router
    /// (the offline gateway: see [`HopLimit::Keep`]).
    pub fn with_hop_limit(mut self, hop_limit: HopLimit) -> Self {
        self.hop_limit = hop_limit;
        self
    }

    /// The table snapshot in use.
    pub fn tables(&self) -> &Arc<Tables> {
        self.pipeline.tables()
    }

    /// Starts using a new table snapshot (from the next burst on).
    pub fn set_tables(&mut self, t: Arc<Tables>) {
        self.pipeline.set_tables(t);
    }

    /// The buffers receive paths fill and transmit paths give back.
    pub fn pool(&mut self) -> &mut PacketPool {
        &mut self.pool
    }

    /// Returns frames the caller did not send to the pool, counted as `tx_full` drops.
    pub fn recycle_unsent(&mut self, unsent: &mut Vec<Packet>) {
        self.pipeline.counters.drops[DropReason::TxFull as usize] += unsent.len() as u64;
        for p in unsent.drain(..) {
            self.pool.put(p);
        }
    }

    /// Trap policies hit since the last call: (reqid, the first packet's selectors), one
    /// per reqid. The live gateway asks the IKE daemon to negotiate these SAs.
    pub fn take_acquires(&mut self) -> Vec<(u32, crate::flow::FlowKey)> {
        self.pipeline.take_acquires()
    }

    /// The data plane's counters (received, sent, encrypted, drops by reason).
    pub fn counters(&self) -> &WorkerCounters {
        &self.pipeline.counters
    }

    /// The host stage's counters (ARP, ND, ping, ICMP errors, fragments, holds).
    pub fn host_counters(&self) -> &HostCounters {
        &self.host
    }

    /// Packets waiting for a next hop.
    pub fn held(&self) -> usize {
        self.held.len()
    }

    /// The direction of traffic received on `port`.
    pub fn direction(&self, port: u16) -> Direction {
        match self.tables().ports.get(usize::from(port)).map(|p| p.role) {
            Some(PortRole::Protected) => Direction::Out,
            _ => Direction::In,
        }
    }

    /// Spreads one input over several workers in order (see [`crate::order`]): the
    /// pipeline's ordered section goes through `turnstile`, each burst with the ticket
    /// given by [`Node::set_ticket`] before [`Node::receive`]. Transmitting in ticket
    /// order is the caller's part.
    pub fn set_order(&mut self, turnstile: Option<Arc<crate::order::Turnstile>>) {
        self.pipeline.set_order(turnstile);
    }

    /// This node's worker index in its gateway (see [`Pipeline::set_worker`]).
    pub fn set_worker(&mut self, index: usize) {
        self.pipeline.set_worker(index);
    }

    /// The next burst's place in arrival order, with an order set.
    pub fn set_ticket(&mut self, ticket: u64) {
        self.pipeline.set_ticket(ticket);
    }

    /// Counts `ns` nanoseconds this worker waited for a burst's transmit turn (the caller
    /// transmits in ticket order: [`crate::order::BurstOrder::transmit`]).
    pub fn count_transmit_wait(&mut self, ns: u64) {
        self.pipeline.counters.transmit_wait_ns += ns;
    }

    /// Runs the frames received on `port` (drained from `frames`) through the whole path;
    /// what to send goes to `tx`.
    pub fn receive(
        &mut self,
        port: u16,
        frames: &mut Vec<Packet>,
        now: Instant,
        tx: &mut Transmit,
    ) {
        if frames.is_empty() {
            self.pipeline.skip_ticket();
            return;
        }
        let t = self.pipeline.tables_handle();
        let dir = self.direction(port);
        // Steps 1 and 3 in one pass over the burst: the host stage decides for each frame
        // as the pipeline reaches it, and keeps what is not the pipeline's.
        let mut claims = std::mem::take(&mut self.claims);
        claims.clear();
        let host = HostStage {
            port,
            neighbours: &self.neighbours,
            hop_limit: self.hop_limit,
            claims: &mut claims,
        };
        self.pipeline.process_with_host(dir, frames, Some(host));
        // Step 2 and the host's answers, for the frames it claimed.
        let mut reassembled = std::mem::take(&mut self.batch);
        for &(i, triage) in &claims {
            let fresh = self.pool.get();
            let p = std::mem::replace(&mut frames[i], fresh);
            self.host_frame(&t, port, p, triage, now, &mut reassembled, tx);
        }
        self.claims = claims;
        self.after_pipeline(&t, dir, frames, now, true, tx);
        // Datagrams completed by this burst's fragments go through the pipeline now.
        self.run_pipeline(&t, dir, &mut reassembled, now, true, tx);
        self.batch = reassembled;
        // A next hop that resolved on another worker releases its packets before newer
        // packets to it (from the next port) overtake them.
        if self.neighbours.version() != self.neighbour_version && !self.held.is_empty() {
            self.release_held(now, tx);
        }
    }

    /// Periodic work (every few tens of milliseconds, and when the neighbour cache
    /// changed): releases or expires held packets, expires reassembly.
    pub fn housekeeping(&mut self, now: Instant, tx: &mut Transmit) {
        self.release_held(now, tx);
        let expired = self.reassembler.expire(now) as u64 + self.reassembler.take_evicted();
        self.pipeline.counters.drops[DropReason::Reassembly as usize] += expired;
    }

    /// Whether a neighbour learned since the held packets were last looked at.
    pub fn neighbours_changed(&self) -> bool {
        self.neighbours.version() != self.neighbour_version
    }

    /// Drops everything still held or being reassembled (the end of an offline run).
    pub fn finish(&mut self) {
        while let Some(h) = self.held.pop_front() {
            self.drop_packet(h.pkt, DropReason::NoNeighbour);
        }
        let pending = self.reassembler.in_flight() as u64;
        self.reassembler = Reassembler::default();
        self.pipeline.counters.drops[DropReason::Reassembly as usize] += pending;
    }

    /// Step 2 and the host's answers for one frame the host stage claimed: answered,
    /// consumed, dropped, or (a datagram its fragment completed) on to `reassembled`.
    #[allow(clippy::too_many_arguments)]
    fn host_frame(
        &mut self,
        t: &Arc<Tables>,
        port: u16,
        mut p: Packet,
        triage: Triage,
        now: Instant,
        reassembled: &mut Vec<Packet>,
        tx: &mut Transmit,
    ) {
        match triage {
            Triage::Pipeline => reassembled.push(p),
            Triage::Reply => {
                self.count_reply(&p);
                tx.push(port, p);
            }
            Triage::Consumed => self.pool.put(p),
            Triage::Drop(r) => self.drop_packet(p, r),
            Triage::Fragment(hl) => match self.reassembler.offer(&mut p, hl, now) {
                Reassembled::Complete => {
                    self.host.reassembled += 1;
                    reassembled.push(p);
                }
                Reassembled::Pending => self.pool.put(p),
                Reassembled::Dropped => self.drop_packet(p, DropReason::Reassembly),
            },
            Triage::TimeExceeded(hl) => {
                self.icmp_error(t, &p, hl, IcmpError::TimeExceeded, now, tx);
                self.drop_packet(p, DropReason::TtlExceeded);
            }
        }
    }

    fn count_reply(&mut self, p: &Packet) {
        let d = p.data();
        let ethertype = d.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]));
        match ethertype {
            Some(ETHERTYPE_ARP) => self.host.arp_replies += 1,
            Some(ETHERTYPE_IPV6) if d.get(HEADER_LEN + 40) == Some(&host::ND_NA) => {
                self.host.nd_replies += 1
            }
            _ => self.host.echo_replies += 1,
        }
    }

    fn drop_packet(&mut self, p: Packet, r: DropReason) {
        self.pipeline.counters.drop(r);
        self.pool.put(p);
    }

    /// Steps 3 to 5 for a burst in `dir`. Fragments made for packets too big for their SA
    /// go through once more (`first` false), and are not fragmented again.
    fn run_pipeline(
        &mut self,
        t: &Arc<Tables>,
        dir: Direction,
        pkts: &mut Vec<Packet>,
        now: Instant,
        first: bool,
        tx: &mut Transmit,
    ) {
        if pkts.is_empty() {
            return;
        }
        self.pipeline.process(dir, pkts);
        self.after_pipeline(t, dir, pkts, now, first, tx);
    }

    /// Steps 4 and 5 for a burst the pipeline has processed, and the transmit queues.
    fn after_pipeline(
        &mut self,
        t: &Arc<Tables>,
        dir: Direction,
        pkts: &mut Vec<Packet>,
        now: Instant,
        first: bool,
        tx: &mut Transmit,
    ) {
        // Packets held for a next hop go out before newer ones to the same hop: another
        // worker may have learned the address since, and this burst already used it.
        if !self.held.is_empty() {
            self.release_held(now, tx);
        }
        let mut fragments = std::mem::take(&mut self.fragments);
        for tb in self.pipeline.take_too_big() {
            if let Some(p) = pkts.get(tb.index) {
                self.too_big(t, p, tb, first, now, &mut fragments, tx);
            }
        }
        for u in self.pipeline.take_unresolved() {
            let fresh = self.pool.get();
            match pkts.get_mut(u.index) {
                Some(slot) => {
                    let pkt = std::mem::replace(slot, fresh);
                    self.hold(t, pkt, u, now, tx);
                }
                None => self.pool.put(fresh),
            }
        }
        tx.push_burst(pkts, &mut self.pool);
        if !fragments.is_empty() {
            for f in fragments.iter_mut() {
                if let Some(h) = f.push_front(HEADER_LEN) {
                    h[..12].fill(0);
                    h[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
                }
            }
            self.run_pipeline(t, dir, &mut fragments, now, false, tx);
        }
        self.fragments = fragments;
    }

    /// Step 4 for one packet (left unencrypted by the pipeline).
    #[allow(clippy::too_many_arguments)]
    fn too_big(
        &mut self,
        t: &Tables,
        p: &Packet,
        tb: TooBig,
        first: bool,
        now: Instant,
        fragments: &mut Vec<Packet>,
        tx: &mut Transmit,
    ) {
        let data = p.data();
        let is_v4 = data.first().map(|b| b >> 4) == Some(4);
        let df = data.get(6).is_some_and(|b| b & 0x40 != 0);
        if first && is_v4 && !df {
            let pool = &mut self.pool;
            let made = fragment_v4(data, tb.max_inner, || pool.get(), fragments);
            if made > 0 {
                self.host.fragmented += 1;
                self.host.fragments_made += made as u64;
                return;
            }
        }
        let mtu = tb.max_inner.min(usize::from(u16::MAX)) as u16;
        self.icmp_error(t, p, 0, IcmpError::TooBig(mtu), now, tx);
        self.pipeline.counters.drop(DropReason::Mtu);
    }

    /// Sends ICMP error `err` about the IP packet at `hl` in `orig`, from the gateway's
    /// address on the port it arrived on (or its first address of that family).
    fn icmp_error(
        &mut self,
        t: &Tables,
        orig: &Packet,
        hl: usize,
        err: IcmpError,
        now: Instant,
        tx: &mut Transmit,
    ) {
        let Some(ip) = orig.data().get(hl..) else {
            return;
        };
        let v4 = ip.first().map(|b| b >> 4) == Some(4);
        let Some(src) = t
            .ports
            .get(usize::from(orig.in_port))
            .and_then(|p| p.address(v4))
            .or_else(|| first_address(t, v4))
        else {
            return;
        };
        if !self.icmp.allow(now) {
            return;
        }
        let mut e = self.pool.get();
        if !host::build_icmp_error(&mut e, ip, err, src) {
            self.pool.put(e);
            return;
        }
        self.host.icmp_errors_sent += 1;
        self.pipeline.route_local(&mut e);
        let unresolved = self.pipeline.take_unresolved().first().copied();
        match (e.verdict, unresolved) {
            (Verdict::Forward(port), _) => tx.push(port, e),
            (Verdict::Drop(DropReason::NoNeighbour), Some(u)) => self.hold(t, e, u, now, tx),
            _ => self.pool.put(e),
        }
    }

    /// Keeps a routed packet until its next hop resolves, and asks for the hop.
    fn hold(&mut self, t: &Tables, pkt: Packet, hop: Unresolved, now: Instant, tx: &mut Transmit) {
        self.solicit(t, hop, now, tx);
        if self.held.len() >= MAX_HELD {
            self.drop_packet(pkt, DropReason::NoNeighbour);
            return;
        }
        self.host.held += 1;
        self.held.push_back(Held {
            pkt,
            hop,
            since: now,
        });
    }

    /// Sends an ARP request / neighbour solicitation for `hop`, unless one went out
    /// recently (from any worker).
    fn solicit(&mut self, t: &Tables, hop: Unresolved, now: Instant, tx: &mut Transmit) {
        let port = usize::from(hop.port);
        if !self.links.get(port).copied().unwrap_or(true)
            || !self
                .neighbours
                .should_request(hop.port, hop.v4, hop.next_hop, now)
        {
            return;
        }
        let Some(info) = t.ports.get(port) else {
            return;
        };
        let mut p = self.pool.get();
        if host::build_solicitation(&mut p, info, hop.v4, hop.next_hop) {
            self.host.solicitations_sent += 1;
            tx.push(hop.port, p);
        } else {
            self.pool.put(p);
        }
    }

    /// Sends held packets whose next hop resolved, in the order they were held; drops
    /// the expired; asks again for the rest.
    fn release_held(&mut self, now: Instant, tx: &mut Transmit) {
        self.neighbour_version = self.neighbours.version();
        let t = self.pipeline.tables_handle();
        let mut pending = std::mem::replace(&mut self.held, std::mem::take(&mut self.held_spare));
        while let Some(mut h) = pending.pop_front() {
            let hop = h.hop;
            if let Some(mac) = t.neighbours.lookup(hop.port, hop.v4, hop.next_hop) {
                self.pipeline.send_to(&t, &mut h.pkt, hop.port, mac, hop.v4);
                if h.pkt.verdict == Verdict::Forward(hop.port) {
                    self.host.held_released += 1;
                    tx.push(hop.port, h.pkt);
                } else {
                    // Counted by `send_to` (no room for the Ethernet header).
                    self.pool.put(h.pkt);
                }
            } else if now.duration_since(h.since) > HOLD_TIME {
                self.drop_packet(h.pkt, DropReason::NoNeighbour);
            } else {
                self.solicit(&t, hop, now, tx);
                self.held.push_back(h);
            }
        }
        self.held_spare = pending;
    }
}

fn first_address(t: &Tables, v4: bool) -> Option<IpAddr> {
    t.ports.iter().find_map(|p| p.address(v4))
}
