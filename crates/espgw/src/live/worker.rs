//! One worker: receives bursts from its sockets of every port, runs them to completion
//! (host stage, pipeline, MTU and neighbour handling) and transmits, on its own thread.
//! Idle workers sleep in poll(2) instead of spinning, since the test bed shares two
//! cores between generator, gateways and receiver.

use std::collections::VecDeque;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use espgw_config::{Direction, PortRole};
use espgw_core::counters::DropReason;
use espgw_core::fragment::fragment_v4;
use espgw_core::host::{self, IcmpError, Triage};
use espgw_core::packet::{Packet, PacketPool, Verdict};
use espgw_core::reassembly::{Reassembled, Reassembler};
use espgw_core::{Pipeline, Tables};
use espgw_io::poll::wait_readable;
use espgw_io::Port;
use espgw_wire::ethernet::{ETHERTYPE_IPV4, HEADER_LEN};

use super::shared::{HostCounters, Shared};

/// Empty polls in a row before a worker sleeps.
const SPIN_BEFORE_SLEEP: u32 = 64;
/// How long an idle worker sleeps at most (it also wakes on traffic).
const SLEEP_MS: i32 = 20;
/// Packets held per worker while their next hop is being resolved.
const MAX_HELD: usize = 512;
/// How long a packet waits for its next hop before it is dropped.
const HOLD_TIME: Duration = Duration::from_secs(1);
const HOUSEKEEPING: Duration = Duration::from_millis(50);
/// ICMP errors a worker sends per second at most.
const MAX_ICMP_ERRORS_PER_SECOND: u32 = 1000;

struct Held {
    pkt: Packet,
    port: u16,
    v4: bool,
    next_hop: u128,
    since: Instant,
}

pub struct Worker {
    pub id: usize,
    shared: Arc<Shared>,
    ports: Vec<Option<Box<dyn Port + Send>>>,
    dirs: Vec<Direction>,
    pipeline: Pipeline,
    pool: PacketPool,
    rx: Vec<Packet>,
    batch: Vec<Packet>,
    tx: Vec<Vec<Packet>>,
    extra: Vec<Packet>,
    held: VecDeque<Held>,
    /// The other half of `held`'s double buffer (empty between calls).
    held_spare: VecDeque<Held>,
    reasm: Reassembler,
    host: HostCounters,
    neigh_version: u64,
    icmp_window: Instant,
    icmp_in_window: u32,
}

impl Worker {
    /// `ports[i]` is this worker's socket of port `i` (`None`: another worker serves it).
    pub fn new(id: usize, shared: Arc<Shared>, ports: Vec<Option<Box<dyn Port + Send>>>) -> Self {
        let t = shared.tables();
        let dirs = t
            .ports
            .iter()
            .map(|p| match p.role {
                PortRole::Protected => Direction::Out,
                PortRole::Unprotected => Direction::In,
            })
            .collect();
        let n = ports.len();
        let burst = t.burst;
        Worker {
            id,
            pipeline: Pipeline::new(t),
            shared,
            ports,
            dirs,
            pool: PacketPool::new(burst * (n + 4) + MAX_HELD),
            rx: Vec::with_capacity(burst),
            batch: Vec::with_capacity(burst),
            tx: (0..n).map(|_| Vec::with_capacity(burst * 2)).collect(),
            extra: Vec::new(),
            held: VecDeque::new(),
            held_spare: VecDeque::new(),
            reasm: Reassembler::default(),
            host: HostCounters::default(),
            neigh_version: 0,
            icmp_window: Instant::now(),
            icmp_in_window: 0,
        }
    }

    pub fn run(mut self) {
        let mut generation = self.shared.generation();
        let mut idle = 0u32;
        let mut last_house = Instant::now();
        let fds: Vec<_> = self
            .ports
            .iter()
            .filter_map(|p| p.as_ref().and_then(|p| p.poll_fd()))
            .collect();
        while !self.shared.stopping() {
            let g = self.shared.generation();
            if g != generation {
                self.pipeline.set_tables(self.shared.tables());
                generation = g;
            }
            let mut work = 0;
            for port in 0..self.ports.len() {
                work += self.poll_port(port);
                // A next hop that just resolved releases the packets held for it before
                // newer packets to it (from the next port) overtake them.
                if self.shared.neighbours.version() != self.neigh_version && !self.held.is_empty() {
                    self.release_held(Instant::now());
                }
            }
            self.flush();
            let now = Instant::now();
            if now.duration_since(last_house) >= HOUSEKEEPING
                || self.shared.neighbours.version() != self.neigh_version
            {
                self.housekeeping(now);
                self.flush();
                last_house = now;
            }
            if work == 0 {
                idle += 1;
                if idle >= SPIN_BEFORE_SLEEP {
                    wait_readable(&fds, SLEEP_MS);
                    idle = 0;
                }
            } else {
                idle = 0;
            }
        }
        self.publish();
    }

    /// One burst from `port`; returns how many packets it had.
    fn poll_port(&mut self, port: usize) -> usize {
        let burst = self.pipeline.tables().burst;
        let Some(p) = self.ports[port].as_mut() else {
            return 0;
        };
        let n = match p.rx_burst(&mut self.pool, &mut self.rx, burst) {
            Ok(n) => n,
            Err(e) => {
                crate::warn!("rx_error", "worker" => self.id, "port" => port, "error" => e);
                0
            }
        };
        if n == 0 {
            return 0;
        }
        let t = self.pipeline.tables().clone();
        let now = Instant::now();
        let mut rx = std::mem::take(&mut self.rx);
        for mut p in rx.drain(..) {
            p.in_port = port as u16;
            p.verdict = Verdict::Pending;
            match host::triage(&mut p, port as u16, &t, &self.shared.neighbours) {
                Triage::Pipeline => self.batch.push(p),
                Triage::Reply => {
                    match p.data().get(12..14) {
                        Some([0x08, 0x06]) => self.host.arp_replies += 1,
                        Some([0x86, 0xdd]) if p.data().get(54) == Some(&136) => {
                            self.host.nd_replies += 1
                        }
                        _ => self.host.echo_replies += 1,
                    }
                    self.tx[port].push(p);
                }
                Triage::Consumed => self.pool.put(p),
                Triage::Drop(r) => self.drop_packet(p, r),
                Triage::Fragment(hl) => match self.reasm.offer(&mut p, hl, now) {
                    Reassembled::Complete => {
                        self.host.reassembled += 1;
                        self.batch.push(p);
                    }
                    Reassembled::Pending => self.pool.put(p),
                    Reassembled::Dropped => self.drop_packet(p, DropReason::Reassembly),
                },
                Triage::TimeExceeded(hl) => {
                    self.icmp_error(&t, &p, hl, IcmpError::TimeExceeded);
                    self.drop_packet(p, DropReason::TtlExceeded);
                }
            }
        }
        self.rx = rx;
        let mut batch = std::mem::take(&mut self.batch);
        self.run_pipeline(&t, self.dirs[port], &mut batch, now, true);
        self.batch = batch;
        n
    }

    fn drop_packet(&mut self, p: Packet, r: DropReason) {
        self.pipeline.counters.drop(r);
        self.pool.put(p);
    }

    /// Runs `pkts` through the pipeline in `dir` and dispatches the results. Fragments
    /// made for packets too big for their SA go through once more (`first` false).
    fn run_pipeline(
        &mut self,
        t: &Arc<Tables>,
        dir: Direction,
        pkts: &mut Vec<Packet>,
        now: Instant,
        first: bool,
    ) {
        if pkts.is_empty() {
            return;
        }
        self.pipeline.process(dir, pkts);
        // Packets held for a next hop go out before newer ones to the same hop: another
        // worker may have learned the address since, and this burst already used it.
        if !self.held.is_empty() {
            self.release_held(now);
        }
        let too_big = std::mem::take(&mut self.pipeline.too_big);
        let unresolved = std::mem::take(&mut self.pipeline.unresolved);
        let mut frags = std::mem::take(&mut self.extra);
        for tb in &too_big {
            let p = &pkts[tb.index];
            let data = p.data();
            let is_v4 = data.first().map(|b| b >> 4) == Some(4);
            let df = data.get(6).is_some_and(|b| b & 0x40 != 0);
            if first && is_v4 && !df {
                let pool = &mut self.pool;
                let made = fragment_v4(data, tb.max_inner, || pool.get(), &mut frags);
                if made > 0 {
                    self.host.fragmented += 1;
                    self.host.fragments_made += made as u64;
                    continue;
                }
            }
            let mtu = tb.max_inner.min(usize::from(u16::MAX)) as u16;
            self.icmp_error(t, &pkts[tb.index], 0, IcmpError::TooBig(mtu));
            self.pipeline.counters.drop(DropReason::Mtu);
        }
        for u in &unresolved {
            let fresh = self.pool.get();
            let pkt = std::mem::replace(&mut pkts[u.index], fresh);
            self.hold(t, pkt, u.port, u.v4, u.next_hop, now);
        }
        for p in pkts.drain(..) {
            match p.verdict {
                Verdict::Forward(port) if usize::from(port) < self.tx.len() => {
                    self.tx[usize::from(port)].push(p)
                }
                _ => self.pool.put(p),
            }
        }
        if !frags.is_empty() {
            for f in frags.iter_mut() {
                if let Some(h) = f.push_front(HEADER_LEN) {
                    h[..12].fill(0);
                    h[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
                }
            }
            self.run_pipeline(t, dir, &mut frags, now, false);
        }
        self.extra = frags;
    }

    /// Sends ICMP error `err` about the IP packet at `hl` in `orig`, from the gateway's
    /// address on the port it arrived on.
    fn icmp_error(&mut self, t: &Tables, orig: &Packet, hl: usize, err: IcmpError) {
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
        // Rate limit (RFC 1812 §4.3.2.8, RFC 4443 §2.4(f)): a flood of oversized or
        // expiring packets must not turn the gateway into an amplifier.
        let now = Instant::now();
        if now.duration_since(self.icmp_window) >= Duration::from_secs(1) {
            self.icmp_window = now;
            self.icmp_in_window = 0;
        }
        if self.icmp_in_window >= MAX_ICMP_ERRORS_PER_SECOND {
            return;
        }
        self.icmp_in_window += 1;
        let mut e = self.pool.get();
        if !host::build_icmp_error(&mut e, ip, err, src) {
            self.pool.put(e);
            return;
        }
        self.host.icmp_errors_sent += 1;
        self.pipeline.route_local(&mut e);
        let unresolved = std::mem::take(&mut self.pipeline.unresolved);
        match (e.verdict, unresolved.first()) {
            (Verdict::Forward(port), _) if usize::from(port) < self.tx.len() => {
                self.tx[usize::from(port)].push(e)
            }
            (Verdict::Drop(DropReason::NoNeighbour), Some(u)) => {
                let u = *u;
                self.hold(t, e, u.port, u.v4, u.next_hop, Instant::now())
            }
            _ => self.pool.put(e),
        }
    }

    /// Keeps a routed packet until its next hop resolves, and asks for it.
    fn hold(&mut self, t: &Tables, pkt: Packet, port: u16, v4: bool, next_hop: u128, now: Instant) {
        self.solicit(t, port, v4, next_hop, now);
        if self.held.len() >= MAX_HELD {
            self.drop_packet(pkt, DropReason::NoNeighbour);
            return;
        }
        self.host.held += 1;
        self.held.push_back(Held {
            pkt,
            port,
            v4,
            next_hop,
            since: now,
        });
    }

    fn solicit(&mut self, t: &Tables, port: u16, v4: bool, next_hop: u128, now: Instant) {
        if !self
            .shared
            .neighbours
            .should_request(port, v4, next_hop, now)
        {
            return;
        }
        let Some(info) = t.ports.get(usize::from(port)) else {
            return;
        };
        let mut p = self.pool.get();
        // A port served by another worker (TUN) has no link to ask on.
        if self.ports[usize::from(port)].is_some()
            && host::build_solicitation(&mut p, info, v4, next_hop)
        {
            self.host.solicitations_sent += 1;
            self.tx[usize::from(port)].push(p);
        } else {
            self.pool.put(p);
        }
    }

    /// Releases held packets, expires reassembly, and publishes counters.
    fn housekeeping(&mut self, now: Instant) {
        self.release_held(now);
        let expired = self.reasm.expire(now) as u64 + self.reasm.take_evicted();
        self.pipeline.counters.drops[DropReason::Reassembly as usize] += expired;
        self.publish();
    }

    /// Sends held packets whose next hop resolved, drops the expired, retries requests.
    fn release_held(&mut self, now: Instant) {
        self.neigh_version = self.shared.neighbours.version();
        let t = self.pipeline.tables().clone();
        let mut pending = std::mem::replace(&mut self.held, std::mem::take(&mut self.held_spare));
        while let Some(mut h) = pending.pop_front() {
            if let Some(mac) = t.neighbours.lookup(h.port, h.v4, h.next_hop) {
                self.pipeline.send_to(&t, &mut h.pkt, h.port, mac, h.v4);
                self.host.held_released += 1;
                self.tx[usize::from(h.port)].push(h.pkt);
            } else if now.duration_since(h.since) > HOLD_TIME {
                self.drop_packet(h.pkt, DropReason::NoNeighbour);
            } else {
                self.solicit(&t, h.port, h.v4, h.next_hop, now);
                self.held.push_back(h);
            }
        }
        self.held_spare = pending;
    }

    fn flush(&mut self) {
        for port in 0..self.tx.len() {
            if self.tx[port].is_empty() {
                continue;
            }
            match self.ports[port].as_mut() {
                Some(p) => {
                    if let Err(e) = p.tx_burst(&mut self.tx[port], &mut self.pool) {
                        crate::warn!("tx_error", "worker" => self.id, "port" => port, "error" => e);
                    }
                    // Whatever the back-end could not send went back to the pool.
                    for q in self.tx[port].drain(..) {
                        self.pool.put(q);
                    }
                }
                None => {
                    let n = self.tx[port].len() as u64;
                    self.pipeline.counters.drops[DropReason::TxFull as usize] += n;
                    for q in self.tx[port].drain(..) {
                        self.pool.put(q);
                    }
                }
            }
        }
    }

    fn publish(&mut self) {
        let ports = self
            .ports
            .iter_mut()
            .map(|p| p.as_mut().map(|p| p.stats()).unwrap_or_default())
            .collect();
        let mut r = self.shared.reports[self.id]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        r.pipeline = self.pipeline.counters.clone();
        r.host = self.host.clone();
        r.ports = ports;
    }
}

fn first_address(t: &Tables, v4: bool) -> Option<IpAddr> {
    t.ports.iter().find_map(|p| p.address(v4))
}
