//! `espgw-lab bench dataplane --workers N --sas K`: the node on N threads over memory
//! ports, K SAs, aggregate Mpps against one worker, and an order check of what leaves.
//!
//! Two ways to spread the load, as a live gateway would:
//! - **ordered** (one input, fewer SAs than workers — one SA is the case that matters):
//!   every worker reads the same input; each burst takes a ticket (its place in arrival
//!   order) and reads the templates at that place; the pipeline's ordered section
//!   (sequence numbers out, replay window in) and the transmit go in ticket order
//!   ([`espgw_core::order`]);
//! - **hash** (as RSS or a hash fanout): worker `w` gets the flows of SAs `k ≡ w (mod N)`,
//!   each SA on one worker, nothing shared but the tables;
//! - **per-worker** (RFC 9611's per-resource SAs): one policy with a per-worker set of N
//!   SAs, every worker given the same flow; worker `w` seals with the set's SA `w`
//!   (outbound) or opens that SA's packets (inbound), nothing shared but the tables.
//!
//! Each SA's packets come a burst at a time (SAs in turn), whatever the spread.
//!
//! With `--burst-pacing on` an ordered input's workers pace their bursts
//! ([`espgw_core::pacing`]): a slower worker takes smaller ones, so that its tickets do not
//! hold up the others' (`on,off` measures both in each round; off is the default, as in
//! `espgw run`). `--handicap W:NS` slows worker W by NS nanoseconds a packet, to see how a
//! spread copes with an uneven machine.
//!
//! The order check reads every frame that leaves: outbound, each SA's ESP sequence
//! numbers must go up by one (a lower one is reordered, a jump is a gap); inbound, each
//! flow's payload stamps (the template number) must go forward.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex};

use espgw_config::{Action, Prefix};
use espgw_core::order::BurstOrder;
use espgw_core::pacing::PacedWorker;

use super::*;

/// How bursts are spread over the workers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Spread {
    /// One input shared in arrival order (tickets).
    Ordered,
    /// Each SA's flows on one worker.
    Hash,
    /// One flow on every worker, each with its own SA of the policy's per-worker set.
    PerWorker,
}

impl Spread {
    pub fn parse(s: &str) -> Result<Option<Spread>, String> {
        match s {
            "auto" => Ok(None),
            "ordered" => Ok(Some(Spread::Ordered)),
            "hash" => Ok(Some(Spread::Hash)),
            "per-worker" => Ok(Some(Spread::PerWorker)),
            _ => Err(format!(
                "unknown spread '{s}' (auto, ordered, hash, per-worker)"
            )),
        }
    }
    fn name(self) -> &'static str {
        match self {
            Spread::Ordered => "ordered",
            Spread::Hash => "hash",
            Spread::PerWorker => "per-worker",
        }
    }
}

/// What `--workers`/`--sas` asked for.
pub struct WorkersArgs {
    pub workers: Vec<usize>,
    pub sas: Vec<usize>,
    pub spread: Option<Spread>,
    pub pin: bool,
    /// Each of several workers runs its own instance of intel-ipsec-mb (as `espgw run`
    /// does); false: all share the process's one (for comparison, and under seccomp).
    pub own_instances: bool,
    /// Rounds of every worker count, alternating their order ([`super::rounds`]).
    pub rounds: usize,
    /// An ordered input's burst pacing, on and/or off (each a trial per round).
    pub pacing: Vec<bool>,
    /// Worker W spends NS more nanoseconds a packet (an uneven machine, emulated).
    pub handicap: Option<Handicap>,
}

/// `--handicap W:NS`: worker `worker` spins `ns_per_packet` nanoseconds for every packet
/// of each of its bursts, while it holds the burst's ticket, as a worker whose core runs
/// slower (shared with another tenant's work) would take longer over it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handicap {
    pub worker: usize,
    pub ns_per_packet: u64,
}

impl Handicap {
    pub fn parse(s: &str) -> Result<Handicap, String> {
        let bad = || format!("--handicap takes WORKER:NANOSECONDS (e.g. 1:100), not '{s}'");
        let (w, ns) = s.split_once(':').ok_or_else(bad)?;
        let worker = w.trim().parse().map_err(|_| bad())?;
        let ns_per_packet: u64 = ns.trim().parse().map_err(|_| bad())?;
        if ns_per_packet > 1_000_000 {
            return Err(format!(
                "--handicap: at most 1000000 ns a packet, not {ns_per_packet}"
            ));
        }
        Ok(Handicap {
            worker,
            ns_per_packet,
        })
    }

    /// Spins for `packets` packets' worth of the handicap.
    fn spin(&self, packets: usize) {
        let until = Instant::now() + Duration::from_nanos(self.ns_per_packet * packets as u64);
        while Instant::now() < until {
            std::hint::spin_loop();
        }
    }
}

/// How one trial runs, beyond its inputs.
#[derive(Debug, Clone, Copy)]
struct TrialSetup {
    own_instances: bool,
    secs: f64,
    pacing: bool,
    handicap: Option<Handicap>,
}

/// The last byte of the far side's address for SA `k`: SA `k` carries the flows to (and
/// from) 203.0.113.`k+1`.
fn far_host(k: usize) -> std::net::IpAddr {
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(203, 0, 113, (k + 1) as u8))
}

/// The SPI of copy `k` of an SA: the original's, with `k` in the third byte (the test
/// bed's live per-worker sets number their SAs the same way).
use crate::testbed::per_worker::sibling_spi as spi_of;

/// Turns the configuration's one IPv4 SA pair into `k` pairs, SA `k` protecting the far
/// host 203.0.113.`k+1` (policies by host address, as many SAs as hosts).
pub fn multiply_sas(c: &mut Config, k: usize) -> Result<(), String> {
    if k <= 1 {
        return Ok(());
    }
    if k > 250 {
        return Err("at most 250 SAs (one per far host in 203.0.113.0/24)".into());
    }
    let far: Prefix = Prefix {
        addr: "203.0.113.0".parse().expect("addr"),
        len: 24,
    };
    let mut sas = Vec::new();
    for sa in &c.sas {
        for i in 0..k {
            let mut s = sa.clone();
            s.spi = spi_of(sa.spi, i);
            s.name = sa.name.as_ref().map(|n| format!("{n}-{i}"));
            sas.push(s);
        }
    }
    let mut policies = Vec::new();
    for p in &c.policies {
        let (Action::Protect(spi), true) = (p.action, p.src.addr.is_ipv4()) else {
            continue;
        };
        for i in 0..k {
            let mut q = p.clone();
            q.action = Action::Protect(spi_of(spi, i));
            if q.dst == far {
                q.dst = Prefix::host(far_host(i));
            } else if q.src == far {
                q.src = Prefix::host(far_host(i));
            } else {
                return Err("the benchmark configuration's policies changed".into());
            }
            policies.push(q);
        }
    }
    c.sas = sas;
    c.policies = policies;
    Ok(())
}

/// Gives every protect policy a per-worker set of `n` SAs (`n` > 1): copy `i` of each SA
/// (SPI as [`spi_of`], a key of its own) is worker `i`'s.
pub fn per_worker_sets(c: &mut Config, n: usize) {
    if n <= 1 {
        return;
    }
    let mut sas = Vec::new();
    for sa in &c.sas {
        for i in 0..n {
            let mut s = sa.clone();
            if i > 0 {
                s.spi = spi_of(sa.spi, i);
                s.name = sa.name.as_ref().map(|n| format!("{n}-{i}"));
                let key: Vec<u8> = sa.enc_key.iter().map(|b| b ^ i as u8).collect();
                s.enc_key = zeroize::Zeroizing::new(key);
            }
            sas.push(s);
        }
    }
    for p in &mut c.policies {
        if let Action::Protect(spi) = p.action {
            p.per_worker_sas = (0..n).map(|i| spi_of(spi, i)).collect();
        }
    }
    c.sas = sas;
}

/// `m` plaintext frames from gateway 1's south side (`reverse`: from gateway 2's), flows
/// of the SAs `sas` in turn, `run` frames each, frame `i` stamped `i + 1`.
fn frames_for(
    size: &str,
    reverse: bool,
    sas: &[usize],
    m: usize,
    run: usize,
) -> Result<Vec<Vec<u8>>, String> {
    let sizes = if size == "imix" {
        gen::imix_sizes()
    } else {
        vec![size
            .parse::<usize>()
            .map_err(|_| format!("bad size '{size}'"))?]
    };
    let near: std::net::IpAddr = "198.51.100.10".parse().expect("addr");
    Ok((0..m)
        .map(|i| {
            let far = far_host(sas[(i / run) % sas.len()]);
            let (src, dst) = if reverse { (far, near) } else { (near, far) };
            let spec = FlowSpec {
                src,
                dst,
                l4: L4::Udp,
                sport: 40000,
                dport: 9,
                src_mac: [0x02, 0, 0, 0, 0, 0x01],
                dst_mac: [0x02, 0, 0, 0, 0x01, 0x01],
            };
            gen::frame(&spec, sizes[i % sizes.len()], i as u64 + 1)
        })
        .collect())
}

/// What leaves, checked for order. With an ordered input each burst is checked on its own
/// before its turn to leave, and only its first and last numbers per key are kept, with
/// its ticket ([`Worker::ends`]); once the trial is over the ends of every worker's bursts
/// are joined in ticket order, which is transmit order ([`join_in_ticket_order`]). So the
/// benchmark's own check adds nothing to the transmit turnstile, where it would hold up
/// every worker (the gateway has no such check). Every pair of consecutive frames of a key
/// is still compared once: inside a burst by its own check, across bursts when the ends are joined.
#[derive(Default)]
struct OrderCheck {
    /// Per SPI (outbound) or source address (inbound): the first and the last number seen.
    seen: Vec<(u32, u64, u64)>,
    /// Where in `seen` the previous frame's key was (consecutive frames mostly share it).
    hit: usize,
    checked: u64,
    reordered: u64,
    gaps: u64,
}

impl OrderCheck {
    /// Records `value` as the last of `key` (and as its first, for a new key); returns
    /// the one before.
    #[inline]
    fn swap(&mut self, key: u32, value: u64) -> Option<u64> {
        let i = match self.seen.get(self.hit) {
            Some(&(k, _, _)) if k == key => self.hit,
            _ => match self.seen.iter().position(|&(k, _, _)| k == key) {
                Some(i) => i,
                None => {
                    self.seen.push((key, value, value));
                    self.hit = self.seen.len() - 1;
                    return None;
                }
            },
        };
        self.hit = i;
        Some(std::mem::replace(&mut self.seen[i].2, value))
    }

    /// Forgets everything: ready for the next burst.
    fn clear(&mut self) {
        self.seen.clear();
        self.hit = 0;
        self.checked = 0;
        self.reordered = 0;
        self.gaps = 0;
    }

    /// Counts whether `value` may follow `last` of the same key, by the direction's rule.
    #[inline]
    fn follow(&mut self, dir: Direction, last: u64, value: u64, next_of: &[usize]) {
        match dir {
            // Outbound: an SA's numbers go up by one.
            Direction::Out if value <= last => self.reordered += 1,
            Direction::Out if value > last + 1 => self.gaps += value - last - 1,
            Direction::Out => {}
            // Inbound: a flow's stamp is the template that follows its previous one.
            Direction::In => {
                let expected = next_of
                    .get((last as usize).wrapping_sub(1))
                    .map(|&i| i as u64 + 1);
                if expected != Some(value) {
                    self.reordered += 1;
                }
            }
        }
    }

    /// Outbound: an IPv4-tunnel ESP frame; its SA's numbers must go up by one.
    fn esp(&mut self, f: &[u8]) {
        let (Some(spi), Some(seq)) = (f.get(34..38), f.get(38..42)) else {
            self.reordered += 1;
            return;
        };
        let spi = u32::from_be_bytes(spi.try_into().expect("4 bytes"));
        let seq = u64::from(u32::from_be_bytes(seq.try_into().expect("4 bytes")));
        self.checked += 1;
        if let Some(l) = self.swap(spi, seq) {
            self.follow(Direction::Out, l, seq, &[]);
        }
    }

    /// Inbound: a decrypted IPv4 UDP frame; its stamp must be the template that follows
    /// the flow's previous one in the input (`next_of`, by template index).
    fn plain(&mut self, f: &[u8], next_of: &[usize]) {
        let (Some(src), Some(stamp)) = (f.get(26..30), f.get(42..50)) else {
            self.reordered += 1;
            return;
        };
        let src = u32::from_be_bytes(src.try_into().expect("4 bytes"));
        let stamp = u64::from_be_bytes(stamp.try_into().expect("8 bytes"));
        self.checked += 1;
        if let Some(l) = self.swap(src, stamp) {
            self.follow(Direction::In, l, stamp, next_of);
        }
    }

    /// Checks one frame that leaves in `dir`.
    fn frame(&mut self, dir: Direction, f: &[u8], next_of: &[usize]) {
        match dir {
            Direction::Out => self.esp(f),
            Direction::In => self.plain(f, next_of),
        }
    }

    /// Takes in the first and last numbers per key of the frames that left next.
    fn append_ends(&mut self, dir: Direction, ends: &[(u32, u64, u64)], next_of: &[usize]) {
        for &(key, first, last) in ends {
            if let Some(l) = self.swap(key, last) {
                self.follow(dir, l, first, next_of);
            }
        }
    }
}

/// The first and last number per key of one ordered burst, by ticket: what joins it to
/// the bursts that left before and after it. Kept for the whole trial: 32 bytes per burst
/// and key, about 8 MB for 0.5 s of one SA at 30 Mpps in bursts of 64.
type BurstEnds = Vec<(u64, (u32, u64, u64))>;

/// Joins every worker's burst ends in ticket order (transmit order) into one check.
fn join_in_ticket_order(dir: Direction, mut ends: BurstEnds, next_of: &[usize]) -> OrderCheck {
    // Stable: a burst's keys keep their order.
    ends.sort_by_key(|&(ticket, _)| ticket);
    let mut c = OrderCheck::default();
    for (_, e) in ends {
        c.append_ends(dir, &[e], next_of);
    }
    c
}

/// For each template, the index of the next template of the same flow (source and
/// destination address), cyclically: the order a flow's packets must leave in.
fn next_of_flow(plain: &[Vec<u8>]) -> Vec<usize> {
    let key = |f: &Vec<u8>| f.get(26..34).map(<[u8]>::to_vec);
    let m = plain.len();
    (0..m)
        .map(|i| {
            (1..=m)
                .map(|d| (i + d) % m)
                .find(|&j| key(&plain[j]) == key(&plain[i]))
                .unwrap_or(i)
        })
        .collect()
}

/// One multi-worker trial's result.
pub struct MultiTrial {
    pub pps: f64,
    pub checked: u64,
    pub reordered: u64,
    pub gaps: u64,
    pub dropped: u64,
    /// Of the workers' time, the share spent waiting for turns in the pipeline's ordered
    /// section and at transmit.
    pub pipeline_wait: f64,
    pub transmit_wait: f64,
    /// Each worker's own rate, Mpps (uneven CPUs show here: in the hash spread each
    /// worker's rate is its CPU's; in the ordered spread, the bursts it took).
    pub per_worker_mpps: Vec<f64>,
}

/// A worker's input frames and their flow order (see [`next_of_flow`]).
type Templates = (Vec<Vec<u8>>, Arc<Vec<usize>>);

struct WorkerInput {
    frames: Vec<Vec<u8>>,
    /// The flow order of the frames (see [`next_of_flow`]).
    next_of: Arc<Vec<usize>>,
    cpu: Option<core_affinity::CoreId>,
}

/// Runs `inputs.len()` workers for `secs` over the same tables; `order` spreads one input
/// in arrival order.
fn multi_trial(
    tables: &Arc<Tables>,
    dir: Direction,
    inputs: Vec<WorkerInput>,
    order: Option<Arc<BurstOrder>>,
    setup: TrialSetup,
) -> Result<MultiTrial, String> {
    let TrialSetup {
        own_instances,
        secs,
        pacing,
        handicap,
    } = setup;
    let burst = tables.burst;
    // An ordered input's place in the templates: the frames the next ticket reads.
    let position = Arc::new(Mutex::new(0usize));
    let port = espgw::offline::arrival_port(tables, dir).map_err(|e| e.to_string())?;
    let n = inputs.len();
    let stop = Arc::new(AtomicBool::new(false));
    let ready = Arc::new(Barrier::new(n + 1));
    let next_of = inputs
        .first()
        .map(|i| i.next_of.clone())
        .unwrap_or_default();
    let handles: Vec<_> = inputs
        .into_iter()
        .enumerate()
        .map(|(index, input)| {
            let (t, stop, ready) = (tables.clone(), stop.clone(), ready.clone());
            let (order, position) = (order.clone(), position.clone());
            // As `espgw run` does with several workers: each its own instance of the
            // crypto library (see `OwnInstance`), loaded here, adopted by the worker.
            let instance = (own_instances && n > 1)
                .then(espgw_crypto::ipsec_mb::OwnInstance::load)
                .flatten();
            std::thread::spawn(move || {
                if let Some(i) = instance {
                    i.adopt();
                }
                if let Some(c) = input.cpu {
                    core_affinity::set_for_current(c);
                }
                let mut w = Worker {
                    node: Node::new(t.clone(), Arc::default(), Vec::new()),
                    memory: MemoryPort::new(input.frames),
                    pkts: Vec::with_capacity(burst),
                    tx: Transmit::new(t.ports.len(), burst),
                    pacing: (pacing && order.is_some()).then(|| PacedWorker::new(index)),
                    order,
                    position,
                    handicap: handicap.filter(|h| h.worker == index),
                    check: OrderCheck::default(),
                    ends: Vec::new(),
                    burst_check: OrderCheck::default(),
                    dir,
                    port,
                    burst,
                    next_of: input.next_of,
                };
                if let Some(o) = &w.order {
                    w.node.set_order(Some(o.pipeline.clone()));
                }
                w.node.set_worker(index);
                for _ in 0..200 {
                    w.burst_through();
                }
                w.check = OrderCheck::default();
                let before = w.node.counters().clone();
                ready.wait();
                let mut fwd = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    for _ in 0..16 {
                        fwd += w.burst_through();
                    }
                }
                let after = w.node.counters();
                let spent = WorkerSpent {
                    forwarded: fwd,
                    dropped: after.total_drops() - before.total_drops(),
                    pipeline_wait_ns: after.ordered_wait_ns - before.ordered_wait_ns,
                    transmit_wait_ns: after.transmit_wait_ns - before.transmit_wait_ns,
                };
                (spent, w.check, w.ends)
            })
        })
        .collect();
    ready.wait();
    // (An ordered input's check covers the warm-up too: it is one continuous stream.)
    let start = Instant::now();
    std::thread::sleep(Duration::from_secs_f64(secs));
    stop.store(true, Ordering::Relaxed);
    let mut r = MultiTrial {
        pps: 0.0,
        checked: 0,
        reordered: 0,
        gaps: 0,
        dropped: 0,
        pipeline_wait: 0.0,
        transmit_wait: 0.0,
        per_worker_mpps: Vec::new(),
    };
    let (mut fwd, mut pipeline_ns, mut transmit_ns) = (0, 0, 0);
    let mut ends = BurstEnds::new();
    let mut joined = Vec::new();
    for h in handles {
        joined.push(h.join().map_err(|_| "a worker panicked")?);
    }
    let el = start.elapsed().as_secs_f64();
    for (spent, c, e) in joined {
        fwd += spent.forwarded;
        r.per_worker_mpps.push(spent.forwarded as f64 / el / 1e6);
        r.dropped += spent.dropped;
        pipeline_ns += spent.pipeline_wait_ns;
        transmit_ns += spent.transmit_wait_ns;
        r.checked += c.checked;
        r.reordered += c.reordered;
        r.gaps += c.gaps;
        ends.extend(e);
    }
    let c = join_in_ticket_order(dir, ends, &next_of);
    r.reordered += c.reordered;
    r.gaps += c.gaps;
    r.pps = fwd as f64 / el;
    let worker_ns = el * 1e9 * n as f64;
    r.pipeline_wait = pipeline_ns as f64 / worker_ns;
    r.transmit_wait = transmit_ns as f64 / worker_ns;
    Ok(r)
}

/// What one worker did in a trial's timed part.
struct WorkerSpent {
    forwarded: u64,
    dropped: u64,
    pipeline_wait_ns: u64,
    transmit_wait_ns: u64,
}

/// One worker thread's state.
struct Worker {
    node: Node,
    memory: MemoryPort,
    pkts: Vec<espgw_core::packet::Packet>,
    tx: Transmit,
    order: Option<Arc<BurstOrder>>,
    /// An ordered input: the next ticket's place in the templates (taken with the ticket).
    position: Arc<Mutex<usize>>,
    /// An ordered input's burst pacing (`None`: full bursts always).
    pacing: Option<PacedWorker>,
    /// This worker's emulated slowness, if it is the one handicapped.
    handicap: Option<Handicap>,
    /// This worker's own check (hash spread: its SAs are its own; an ordered input: the
    /// counts inside each of its bursts).
    check: OrderCheck,
    /// An ordered input: the first and last numbers per key of each burst this worker
    /// sent, by ticket, joined with the other workers' after the trial.
    ends: BurstEnds,
    /// An ordered input: the check of the burst at hand.
    burst_check: OrderCheck,
    dir: Direction,
    port: u16,
    burst: usize,
    next_of: Arc<Vec<usize>>,
}

impl Worker {
    /// Receives one burst, runs it through the node and transmits (in ticket order with an
    /// order); returns the frames sent.
    fn burst_through(&mut self) -> u64 {
        let timing = self.pacing.as_ref().map(|p| p.start(self.burst));
        let limit = timing.map_or(self.burst, |t| t.limit);
        let waited_before = self.node.counters().ordered_wait_ns;
        let ticket = self.order.as_ref().map(|o| {
            // The ticket and the place are taken together, as a live worker takes its
            // ticket with the socket held: ticket order is the order of the frames.
            let mut at = self.position.lock().unwrap_or_else(|e| e.into_inner());
            let t = o.ticket();
            self.memory.seek(*at);
            *at = at.wrapping_add(limit);
            t
        });
        let got = self
            .memory
            .rx_burst(self.node.pool(), &mut self.pkts, limit)
            .unwrap_or(0);
        if let Some(t) = ticket {
            self.node.set_ticket(t);
        }
        self.node
            .receive(self.port, &mut self.pkts, Instant::now(), &mut self.tx);
        if let Some(h) = &self.handicap {
            h.spin(got);
        }
        // Fields borrowed apart: no per-burst clone of the shared `Arc`s (an atomic add on
        // a line every worker touches, what the pipeline itself avoids).
        let mut out = Out {
            tx: &mut self.tx,
            memory: &mut self.memory,
            node: &mut self.node,
            dir: self.dir,
            next_of: &self.next_of,
        };
        match (&self.order, ticket) {
            (Some(o), Some(t)) => {
                self.burst_check.clear();
                out.check(&mut self.burst_check);
                let waited = o.transmit.wait(t);
                let sent = out.send();
                o.transmit.pass(t);
                out.node.count_transmit_wait(waited);
                if let (Some(p), Some(timing)) = (&mut self.pacing, timing) {
                    let counters = out.node.counters();
                    let pipeline_wait = counters.ordered_wait_ns.saturating_sub(waited_before);
                    p.finish(&o.pacer, timing, got, pipeline_wait + waited);
                }
                let b = &self.burst_check;
                self.check.checked += b.checked;
                self.check.reordered += b.reordered;
                self.check.gaps += b.gaps;
                self.ends.extend(b.seen.iter().map(|&e| (t, e)));
                sent
            }
            _ => {
                out.check(&mut self.check);
                out.send()
            }
        }
    }
}

/// What transmitting a burst needs of a worker.
struct Out<'a> {
    tx: &'a mut Transmit,
    memory: &'a mut MemoryPort,
    node: &'a mut Node,
    dir: Direction,
    next_of: &'a [usize],
}

impl Out<'_> {
    /// Checks the order of what the node queued, in the order it is sent.
    fn check(&mut self, check: &mut OrderCheck) {
        for q in 0..self.tx.ports() {
            for p in self.tx.queue(q).iter() {
                check.frame(self.dir, p.data(), self.next_of);
            }
        }
    }

    /// Sends what the node queued; returns the frames sent.
    fn send(&mut self) -> u64 {
        let mut sent = 0u64;
        for q in 0..self.tx.ports() {
            let queue = self.tx.queue(q);
            sent += queue.len() as u64;
            let _ = self.memory.tx_burst(queue, self.node.pool());
        }
        sent
    }
}

/// The templates per worker and the order, for `workers` workers and `k` SAs.
fn inputs(
    t2: &Arc<Tables>,
    size: &str,
    dir: Direction,
    k: usize,
    workers: usize,
    spread: Spread,
    cpus: &[core_affinity::CoreId],
) -> Result<(Vec<WorkerInput>, Option<Arc<BurstOrder>>), String> {
    // As many templates as the one-core benchmark (a burst's worth, per SA): the same cache
    // footprint per worker, so that one worker here measures what it measures.
    const TEMPLATES: usize = 64;
    // A burst's worth of one SA's packets, then the next SA's: the same mix per burst
    // whether one worker carries every SA or each its share, so that the scaling
    // compares like with like (interleaving SAs packet by packet would cut the crypto
    // batches, more with fewer workers).
    let run = t2.burst;
    let build = |sas: &[usize]| -> Result<Templates, String> {
        let m = TEMPLATES.max(sas.len() * run);
        let plain = frames_for(size, dir == Direction::In, sas, m, run)?;
        let next_of = Arc::new(next_of_flow(&plain));
        match dir {
            Direction::Out => Ok((plain, next_of)),
            Direction::In => Ok((esp_frames(t2, &plain)?, next_of)),
        }
    };
    let all: Vec<usize> = (0..k).collect();
    let cpu = |w: usize| (!cpus.is_empty()).then(|| cpus[w % cpus.len()]);
    match spread {
        Spread::Ordered => {
            let (frames, next_of) = build(&all)?;
            let order = (workers > 1).then(|| Arc::new(BurstOrder::for_workers(workers)));
            let ins = (0..workers)
                .map(|w| WorkerInput {
                    frames: frames.clone(),
                    next_of: next_of.clone(),
                    cpu: cpu(w),
                })
                .collect();
            Ok((ins, order))
        }
        Spread::PerWorker => {
            let mut ins = Vec::new();
            for w in 0..workers {
                let m = TEMPLATES.max(run);
                let plain = frames_for(size, dir == Direction::In, &[0], m, run)?;
                let next_of = Arc::new(next_of_flow(&plain));
                let frames = match dir {
                    Direction::Out => plain,
                    Direction::In => esp_frames_of_worker(t2, &plain, w)?,
                };
                ins.push(WorkerInput {
                    frames,
                    next_of,
                    cpu: cpu(w),
                });
            }
            Ok((ins, None))
        }
        Spread::Hash => {
            let mut ins = Vec::new();
            for w in 0..workers {
                let mine: Vec<usize> = all.iter().copied().filter(|s| s % workers == w).collect();
                if mine.is_empty() {
                    return Err(format!(
                        "{workers} workers by hash need at least as many SAs"
                    ));
                }
                let (frames, next_of) = build(&mine)?;
                ins.push(WorkerInput {
                    frames,
                    next_of,
                    cpu: cpu(w),
                });
            }
            Ok((ins, None))
        }
    }
}

/// With several workers, their slowest and fastest rate, for the end of the table's line
/// (e.g. "  workers 3.10-5.42 Mpps").
fn slowest_and_fastest(per_worker: &[f64]) -> String {
    if per_worker.len() < 2 {
        return String::new();
    }
    let lo = per_worker.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = per_worker.iter().copied().fold(0.0, f64::max);
    format!("  workers {lo:.2}-{hi:.2} Mpps")
}

/// One row of the multi-worker table: what every worker count ran.
struct Row<'a> {
    alg: &'a str,
    size: &'a str,
    dir: Direction,
    sas: usize,
}

/// A row's trials of one worker count, with or without burst pacing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Paced {
    workers: usize,
    pacing: bool,
}

/// Prints one trial's line (with its round when there are several).
fn print_trial(
    row: &Row<'_>,
    n: usize,
    spread: Spread,
    r: &MultiTrial,
    scaling: Option<f64>,
    round: Option<usize>,
    unpaced: bool,
) {
    println!(
        "{:<20} {:>6} {:<9} {:>4} {:<8} {:>7} {:>8.2} {:>8} {:>10} {:>9} {:>5} {:>5.1}% {:>5.1}%{}{}{}{}",
        row.alg,
        row.size,
        direction_name(row.dir),
        row.sas,
        spread.name(),
        n,
        r.pps / 1e6,
        scaling.map_or("-".into(), |s| format!("{s:.2}x")),
        scaling.map_or("-".into(), |s| format!("{:.2}", s / n as f64)),
        r.reordered,
        r.gaps,
        r.pipeline_wait * 100.0,
        r.transmit_wait * 100.0,
        slowest_and_fastest(&r.per_worker_mpps),
        if r.dropped > 0 { format!("  ({} dropped!)", r.dropped) } else { String::new() },
        round.map_or(String::new(), |k| format!("  round {k}")),
        if unpaced { "  (pacing off)" } else { "" },
    );
}

/// After the rounds of a row: per worker count, the median of the rounds' scaling and its
/// range.
fn print_medians(row: &Row<'_>, scalings: &[(Paced, Vec<f64>)], rounds: usize) {
    for (paced, all) in scalings {
        let n = &paced.workers;
        let Some(s) = rounds::summary_of(all) else {
            continue;
        };
        println!(
            "median of {rounds} rounds: {} {} {} {} SA(s), {n} workers{}: scaling {:.2}x ({:.2}-{:.2}), per worker {:.2} ({:.2}-{:.2})",
            row.alg,
            row.size,
            direction_name(row.dir),
            row.sas,
            if paced.pacing { ", paced" } else { "" },
            s.median,
            s.low,
            s.high,
            s.median / *n as f64,
            s.low / *n as f64,
            s.high / *n as f64,
        );
    }
}

/// The multi-worker benchmark: every algorithm, size, direction and SA count, on each
/// worker count, with the scaling against the one-worker rate; with several rounds, the
/// worker counts alternate their order and each round is its own comparison.
#[allow(clippy::too_many_arguments)]
pub fn dataplane_workers(
    crypto: ProviderChoice,
    secs: f64,
    sizes: &[String],
    algs: &[String],
    dirs: &[String],
    args: &WorkersArgs,
    json_out: Option<&std::path::Path>,
) -> Result<(), String> {
    let provider = espgw_crypto::provider(crypto).map_err(|e| e.to_string())?;
    let cpus = if args.pin {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let online = std::thread::available_parallelism().map_or(1, |n| n.get());
    println!(
        "espgw-lab bench dataplane --workers: the node on N threads, memory ports, bursts of 64, {secs:.1} s per trial, {online} CPUs{}",
        if args.pin { ", workers pinned" } else { "" }
    );
    println!(
        "crypto: {}",
        if args.own_instances {
            "with several workers, each its own instance of intel-ipsec-mb (as espgw run)"
        } else {
            "every worker on the process's one instance of intel-ipsec-mb (--shared-library)"
        }
    );
    println!("spread: ordered = one input in arrival order (tickets; sequence numbers and transmit in order), hash = each SA on one worker, per-worker = one policy whose per-worker set gives each worker an SA of its own");
    println!("waiting: the share of the workers' time spent waiting for a burst's turn in the pipeline's ordered section / at transmit");
    println!(
        "{:<20} {:>6} {:<9} {:>4} {:<8} {:>7} {:>8} {:>8} {:>10} {:>9} {:>5} {:>13}",
        "algorithm",
        "frame",
        "direction",
        "SAs",
        "spread",
        "workers",
        "Mpps",
        "scaling",
        "per worker",
        "reordered",
        "gaps",
        "waiting"
    );
    let mut records = Vec::new();
    for alg_name in bench_names(algs) {
        let (proto, suite) = parse_alg(&alg_name)?;
        for &k in &args.sas {
            let (mut gw1, mut gw2) = configs(proto, suite)?;
            multiply_sas(&mut gw1, k)?;
            multiply_sas(&mut gw2, k)?;
            let t1 =
                Arc::new(Tables::build(&gw1, provider.as_ref(), None).map_err(|e| e.to_string())?);
            let t2 =
                Arc::new(Tables::build(&gw2, provider.as_ref(), None).map_err(|e| e.to_string())?);
            // A per-worker spread: each worker count its own set's size.
            let mut sets = Vec::new();
            if args.spread == Some(Spread::PerWorker) {
                if k != 1 {
                    return Err(
                        "--spread per-worker takes --sas 1 (the set has one SA per worker)".into(),
                    );
                }
                for &n in &args.workers {
                    let (mut a, mut b) = (gw1.clone(), gw2.clone());
                    per_worker_sets(&mut a, n);
                    per_worker_sets(&mut b, n);
                    let build = |c: &Config| {
                        Tables::build(c, provider.as_ref(), None)
                            .map(Arc::new)
                            .map_err(|e| e.to_string())
                    };
                    sets.push((n, build(&a)?, build(&b)?));
                }
            }
            let tables_for = |n: usize| {
                sets.iter()
                    .find(|s| s.0 == n)
                    .map_or((&t1, &t2), |s| (&s.1, &s.2))
            };
            for size in sizes {
                for dir in [Direction::Out, Direction::In] {
                    let dname = direction_name(dir);
                    if !dirs.iter().any(|d| d == dname) {
                        continue;
                    }
                    let row = Row {
                        alg: &alg_name,
                        size,
                        dir,
                        sas: k,
                    };
                    let mut scalings: Vec<(Paced, Vec<f64>)> = Vec::new();
                    for round in 1..=args.rounds {
                        let mut trials = Vec::new();
                        for n in rounds::round_order(&args.workers, round) {
                            let spread = match args.spread {
                                Some(s) => s,
                                None if k < n => Spread::Ordered,
                                None => Spread::Hash,
                            };
                            // Pacing applies to an ordered input of several workers; the
                            // modes alternate their order with the rounds.
                            let modes: Vec<bool> = if spread == Spread::Ordered && n > 1 {
                                rounds::round_order(&args.pacing, round)
                            } else {
                                vec![args.pacing.first().copied().unwrap_or(true)]
                            };
                            for pacing in modes {
                                let (t1, t2) = tables_for(n);
                                let (ins, order) = inputs(t2, size, dir, k, n, spread, &cpus)?;
                                let setup = TrialSetup {
                                    own_instances: args.own_instances,
                                    secs,
                                    pacing,
                                    handicap: args.handicap,
                                };
                                let r = multi_trial(t1, dir, ins, order, setup)?;
                                let paced = Paced {
                                    workers: n,
                                    pacing: pacing && spread == Spread::Ordered && n > 1,
                                };
                                trials.push((paced, spread, r));
                            }
                        }
                        // Reported in the order asked for, each against this round's one
                        // worker.
                        trials.sort_by_key(|t| {
                            let at = args.workers.iter().position(|&n| n == t.0.workers);
                            (at, !t.0.pacing)
                        });
                        let one = trials.iter().find(|t| t.0.workers == 1).map(|t| t.2.pps);
                        for (paced, spread, r) in &trials {
                            let n = &paced.workers;
                            let scaling = one.map(|o| r.pps / o);
                            let round = (args.rounds > 1).then_some(round);
                            let unpaced = *spread == Spread::Ordered && *n > 1 && !paced.pacing;
                            print_trial(&row, *n, *spread, r, scaling, round, unpaced);
                            if let Some(s) = scaling {
                                match scalings.iter_mut().find(|x| x.0 == *paced) {
                                    Some(all) => all.1.push(s),
                                    None => scalings.push((*paced, vec![s])),
                                }
                            }
                            records.push(json!({
                                "algorithm": alg_name, "frame_size": size, "direction": direction_name(dir),
                                "sas": k, "spread": spread.name(), "workers": n, "round": round.unwrap_or(1),
                                "pacing": paced.pacing, "handicap": args.handicap.map(|h| json!({"worker": h.worker, "ns_per_packet": h.ns_per_packet})),
                                "mpps": r.pps / 1e6, "scaling": scaling, "efficiency": scaling.map(|s| s / *n as f64),
                                "checked": r.checked, "reordered": r.reordered, "gaps": r.gaps,
                                "dropped": r.dropped, "seconds": secs, "pinned": args.pin,
                                "waiting_pipeline": r.pipeline_wait, "waiting_transmit": r.transmit_wait,
                                "per_worker_mpps": r.per_worker_mpps,
                            }));
                        }
                    }
                    if args.rounds > 1 {
                        print_medians(&row, &scalings, args.rounds);
                    }
                }
            }
        }
    }
    if let Some(p) = json_out {
        let v = json!({ "benchmark": "dataplane-workers", "cpu": cpu_model(), "cpus": online, "results": records });
        std::fs::write(p, serde_json::to_string_pretty(&v).unwrap_or_default())
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn esp_frame(spi: u32, seq: u32) -> Vec<u8> {
        let mut f = vec![0u8; 60];
        f[34..38].copy_from_slice(&spi.to_be_bytes());
        f[38..42].copy_from_slice(&seq.to_be_bytes());
        f
    }

    #[test]
    fn the_line_names_the_slowest_and_the_fastest_worker() {
        assert_eq!(slowest_and_fastest(&[4.0]), "");
        assert_eq!(
            slowest_and_fastest(&[5.421, 3.1, 4.0]),
            "  workers 3.10-5.42 Mpps"
        );
    }

    #[test]
    fn the_order_check_sees_reordering_and_gaps_per_sa() {
        let mut c = OrderCheck::default();
        for (spi, seq) in [(1, 1), (2, 1), (1, 2), (1, 4), (2, 2), (1, 3), (2, 2)] {
            c.esp(&esp_frame(spi, seq));
        }
        assert_eq!(c.checked, 7);
        assert_eq!(c.gaps, 1, "1: 2 -> 4");
        assert_eq!(c.reordered, 2, "1: 4 -> 3, 2: 2 -> 2");
    }

    #[test]
    fn the_order_check_follows_each_flow_through_the_templates() {
        let sas = [0, 1];
        let plain = frames_for("64", true, &sas, 8, 2).unwrap();
        let next_of = next_of_flow(&plain);
        // Flows: templates 0,1 and 4,5 are SA 0's; 2,3 and 6,7 SA 1's.
        assert_eq!(next_of, vec![1, 4, 3, 6, 5, 0, 7, 2]);
        let mut c = OrderCheck::default();
        // Two rounds in order (cycling), then SA 1's 2 and 3 swapped.
        for i in [0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 3, 2] {
            c.plain(&plain[i], &next_of);
        }
        assert_eq!(c.checked, 12);
        assert_eq!(c.reordered, 2, "7 -> 3 and 3 -> 2");
    }

    proptest::proptest! {
        /// An ordered input's check (each burst checked on its own, its ends kept by
        /// ticket by the worker that sent it, the ends of all workers joined in ticket
        /// order) counts exactly what one check of the whole stream counts: outbound over
        /// random sequence numbers of a few SAs, inbound over random templates of two SAs'
        /// flows, cut into random bursts, the bursts dealt to three workers in turn.
        #[test]
        fn checking_burst_by_burst_counts_what_the_whole_stream_does(
            esp in proptest::collection::vec((1u32..4, 1u32..40), 0..120),
            templates in proptest::collection::vec(0usize..8, 0..120),
            cuts in proptest::collection::vec(1usize..20, 1..40),
        ) {
            let plain = frames_for("64", true, &[0, 1], 8, 2).unwrap();
            let next_of = next_of_flow(&plain);
            let streams: [(Direction, Vec<Vec<u8>>); 2] = [
                (Direction::Out, esp.iter().map(|&(spi, seq)| esp_frame(spi, seq)).collect()),
                (Direction::In, templates.iter().map(|&i| plain[i].clone()).collect()),
            ];
            for (dir, frames) in streams {
                let mut whole = OrderCheck::default();
                for f in &frames {
                    whole.frame(dir, f, &next_of);
                }
                let mut burst = OrderCheck::default();
                let mut inside = (0, 0, 0);
                let mut workers: [BurstEnds; 3] = Default::default();
                let mut rest = &frames[..];
                let mut cut = cuts.iter().cycle();
                let mut ticket = 0u64;
                while !rest.is_empty() {
                    let n = (*cut.next().unwrap()).min(rest.len());
                    burst.clear();
                    for f in &rest[..n] {
                        burst.frame(dir, f, &next_of);
                    }
                    inside.0 += burst.checked;
                    inside.1 += burst.reordered;
                    inside.2 += burst.gaps;
                    workers[ticket as usize % 3].extend(burst.seen.iter().map(|&e| (ticket, e)));
                    rest = &rest[n..];
                    ticket += 1;
                }
                let ends: BurstEnds = workers.into_iter().flatten().collect();
                let joined = join_in_ticket_order(dir, ends, &next_of);
                proptest::prop_assert_eq!(
                    (inside.0, inside.1 + joined.reordered, inside.2 + joined.gaps),
                    (whole.checked, whole.reordered, whole.gaps),
                    "{:?}", dir
                );
            }
        }
    }

    /// A per-worker set over two workers: each worker seals with an SA of its own (one SA
    /// shared would leave each worker's numbers with gaps the other filled) and opens the
    /// packets of its own SA, nothing dropped.
    #[test]
    fn a_per_worker_set_gives_each_worker_its_own_sa() {
        let provider = espgw_crypto::default_provider();
        let suite = parse_suite("aes-128-gcm").unwrap();
        let (mut gw1, mut gw2) = configs(SaProto::Esp, suite).unwrap();
        per_worker_sets(&mut gw1, 2);
        per_worker_sets(&mut gw2, 2);
        let t1 = Arc::new(Tables::build(&gw1, provider.as_ref(), None).unwrap());
        let t2 = Arc::new(Tables::build(&gw2, provider.as_ref(), None).unwrap());
        // A set of two for each protect policy: IPv4 and IPv6, out and in.
        assert_eq!(t1.per_worker_sas.len(), 8);
        // The inbound inputs are the set's two SAs, one per worker.
        let (ins, _) = inputs(&t2, "64", Direction::In, 1, 2, Spread::PerWorker, &[]).unwrap();
        let spis: Vec<u32> = ins
            .iter()
            .map(|i| u32::from_be_bytes(i.frames[0][34..38].try_into().unwrap()))
            .collect();
        assert_eq!(spis, [0x2001, spi_of(0x2001, 1)]);
        for dir in [Direction::Out, Direction::In] {
            let (ins, order) = inputs(&t2, "64", dir, 1, 2, Spread::PerWorker, &[]).unwrap();
            assert!(order.is_none());
            let r = multi_trial(&t1, dir, ins, order, setup(true, None)).unwrap();
            assert!(r.checked > 1000, "{dir:?}: {} checked", r.checked);
            assert_eq!((r.reordered, r.gaps, r.dropped), (0, 0, 0), "{dir:?}");
            assert!(r.per_worker_mpps.iter().all(|&m| m > 0.0), "{dir:?}");
        }
    }

    /// The benchmark's AES-128-GCM gateway pair, one SA each way.
    fn gcm_pair() -> (Arc<Tables>, Arc<Tables>) {
        let provider = espgw_crypto::default_provider();
        let suite = parse_suite("aes-128-gcm").unwrap();
        let (gw1, gw2) = configs(SaProto::Esp, suite).unwrap();
        let t1 = Arc::new(Tables::build(&gw1, provider.as_ref(), None).unwrap());
        let t2 = Arc::new(Tables::build(&gw2, provider.as_ref(), None).unwrap());
        (t1, t2)
    }

    fn setup(pacing: bool, handicap: Option<Handicap>) -> TrialSetup {
        TrialSetup {
            own_instances: true,
            secs: 0.3,
            pacing,
            handicap,
        }
    }

    /// One SA over two workers, worker 1 much slower than worker 0 (5 µs a packet): with
    /// pacing the slow worker takes smaller bursts and so carries under half the fast
    /// one's packets; with and without it everything leaves, in order, both ways. (What
    /// pacing gains in throughput is the benchmark's to say, not a timed test's.) The
    /// handicap was 20 µs until CI, its 2 cores busy with other tests, made every burst
    /// take 2.5 ms: the pacing never settled within the 0.3 s trial (2026-11-29). The
    /// paced share is a rate, which a host busy elsewhere skews (CI, 2026-12-04: 0.517 of
    /// the fast worker's, with the fast one at 0.07 Mpps), so a paced trial gets up to
    /// three tries to show it; the order must hold in each.
    #[test]
    fn a_slow_worker_paced_carries_less_and_the_order_holds() {
        let (t1, t2) = gcm_pair();
        let slow = Handicap::parse("1:5000").unwrap();
        assert_eq!((slow.worker, slow.ns_per_packet), (1, 5_000));
        for dir in [Direction::Out, Direction::In] {
            for pacing in [false, true] {
                let tries = if pacing { 3 } else { 1 };
                let mut shares = Vec::new();
                for _ in 0..tries {
                    let (ins, order) = inputs(&t2, "64", dir, 1, 2, Spread::Ordered, &[]).unwrap();
                    let r = multi_trial(&t1, dir, ins, order, setup(pacing, Some(slow))).unwrap();
                    let what = format!("{dir:?}, pacing {pacing}: {:?}", r.per_worker_mpps);
                    assert!(r.checked > 500, "{what}: {} checked", r.checked);
                    assert_eq!((r.reordered, r.gaps, r.dropped), (0, 0, 0), "{what}");
                    let share = r.per_worker_mpps[1] / r.per_worker_mpps[0];
                    shares.push(share);
                    if share < 0.5 {
                        break;
                    }
                }
                if pacing {
                    let least = shares.iter().copied().fold(f64::INFINITY, f64::min);
                    assert!(least < 0.5, "{dir:?}: slow / fast paced {shares:?}");
                }
            }
        }
        assert!(Handicap::parse("1").is_err());
        assert!(Handicap::parse("x:5").is_err());
        assert!(Handicap::parse("1:2000000").is_err());
    }

    /// One SA over two workers in memory: everything leaves, in order, both ways.
    #[test]
    fn one_sa_over_two_workers_leaves_in_order() {
        let (t1, t2) = gcm_pair();
        for dir in [Direction::Out, Direction::In] {
            let (ins, order) = inputs(&t2, "imix", dir, 1, 2, Spread::Ordered, &[]).unwrap();
            assert!(order.is_some());
            let r = multi_trial(&t1, dir, ins, order, setup(true, None)).unwrap();
            assert!(r.checked > 1000, "{dir:?}: {} checked", r.checked);
            assert_eq!((r.reordered, r.gaps, r.dropped), (0, 0, 0), "{dir:?}");
        }
    }
}
