//! The generator and receiver: one thread per tester port, each sending its direction's
//! frames on schedule and counting what arrives, and answering ARP / neighbour
//! discovery for the tester's addresses (so a gateway can resolve it) with the
//! gateway's own host logic.
//!
//! A thread enters its port's network namespace first, so one process drives ports in
//! two namespaces and every timestamp comes from one monotonic clock.

use std::net::IpAddr;
use std::os::fd::RawFd;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use espgw_core::host::{self, Triage};
use espgw_core::neighbour::NeighbourCache;
use espgw_core::packet::{Packet, PacketPool};
use espgw_core::tables::Tables;
use espgw_io::af_packet::AfPacketPort;
use espgw_io::af_xdp::{AfXdpPort, XdpMode};
use espgw_io::Port;
use hdrhistogram::Histogram;

use super::frame::{parse, Record, Seen, Template};

mod send_receive;
#[cfg(test)]
mod tests;

use send_receive::{send_due, serve_rx};

const BURST: usize = 64;
/// Latency histogram range: 100 ns to 60 s, 3 significant digits.
const HIST_MAX_NS: u64 = 60_000_000_000;
/// The most sequence numbers one stream's bitmap tracks in a trial (512 MiB of bits
/// would be 4 G frames; 2^30 frames is 18 minutes at 1 Mpps).
pub const MAX_TRIAL_FRAMES: u64 = 1 << 30;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IoPref {
    /// AF_XDP where it opens, else AF_PACKET.
    Auto,
    AfXdp,
    AfPacket,
}

/// Where a tester port lives and what addresses it answers for.
#[derive(Debug, Clone)]
pub struct PortPlan {
    pub netns: Option<String>,
    pub ifname: String,
    pub io: IoPref,
    /// "198.51.100.20/24" style; the first of each family is the source of frames.
    pub addresses: Vec<String>,
    /// Next hop for the IPv4 flow (and the IPv6 one, when given).
    pub gateway4: IpAddr,
    pub gateway6: Option<IpAddr>,
}

#[derive(Debug, Clone)]
pub struct PortReady {
    pub mac: [u8; 6],
    pub gateway4_mac: [u8; 6],
    pub gateway6_mac: Option<[u8; 6]>,
    pub kind: &'static str,
}

/// One direction's sending in a trial.
#[derive(Clone)]
pub struct TxPlan {
    pub trial: u8,
    pub stream: u8,
    /// Frames per second; 0: as fast as the port takes them.
    pub rate_pps: f64,
    /// The most frames to send, and the longest to send for.
    pub count: u64,
    pub duration: Duration,
    pub templates: Arc<Vec<Template>>,
    /// Template index per sequence number (cycled).
    pub pattern: Arc<Vec<u8>>,
    pub start_at: Instant,
}

#[derive(Debug, Clone, Default)]
pub struct TxReport {
    pub sent: u64,
    pub bytes: u64,
    /// Frames the port refused (ring full): the tester's own limit, not loss.
    pub refused: u64,
    pub first_ns: u64,
    pub last_ns: u64,
}

/// What one port received of one stream in a trial.
#[derive(Clone)]
pub struct RxReport {
    pub received: u64,
    pub duplicates: u64,
    pub reordered: u64,
    /// Frames of earlier trials that arrived late (not counted as received).
    pub stale: u64,
    /// Non-first fragments seen (the gateways fragmented large frames).
    pub fragments: u64,
    pub latency: Histogram<u64>,
}

impl RxReport {
    fn new() -> RxReport {
        RxReport {
            received: 0,
            duplicates: 0,
            reordered: 0,
            stale: 0,
            fragments: 0,
            latency: Histogram::new_with_bounds(100, HIST_MAX_NS, 3).expect("static bounds"),
        }
    }
}

/// Counts one stream: a bit per sequence number finds duplicates; a frame with a
/// sequence number below the highest seen of its flow is reordered (RFC 4737's
/// definition, per flow: packets of different flows may pass each other, as RSS and
/// fanout let them). Flow of sequence number s: s mod the stream's flow count.
struct StreamCounter {
    bits: Vec<u64>,
    /// Sequence numbers at or above this were never sent in the trial.
    limit: u64,
    /// Per flow, the number after the highest seen.
    next_expected: Vec<u32>,
    report: RxReport,
}

impl StreamCounter {
    fn new(expect: u64, flows: u8) -> StreamCounter {
        let n = expect.min(MAX_TRIAL_FRAMES);
        StreamCounter {
            bits: vec![0; n.div_ceil(64) as usize],
            limit: n,
            next_expected: vec![0; usize::from(flows.max(1))],
            report: RxReport::new(),
        }
    }

    fn record(&mut self, r: &Record, rx_ns: u64) {
        let i = r.seq as usize;
        let w = if u64::from(r.seq) < self.limit {
            self.bits.get_mut(i / 64)
        } else {
            None
        };
        let Some(w) = w else {
            // A sequence number this trial never sent: not ours to count.
            self.report.stale += 1;
            return;
        };
        let bit = 1u64 << (i % 64);
        if *w & bit != 0 {
            self.report.duplicates += 1;
            return;
        }
        *w |= bit;
        self.report.received += 1;
        let flows = self.next_expected.len();
        let next = &mut self.next_expected[r.seq as usize % flows];
        if r.seq < *next {
            self.report.reordered += 1;
        } else {
            *next = r.seq.wrapping_add(1);
        }
        let lat = rx_ns.saturating_sub(r.tx_ns).clamp(100, HIST_MAX_NS);
        let _ = self.report.latency.record(lat);
    }
}

enum Cmd {
    /// Start counting `trial` (streams expected: (stream id, most frames)), and send
    /// `tx` if given.
    Trial {
        trial: u8,
        expect: Vec<(u8, u64)>,
        flows: u8,
        tx: Option<TxPlan>,
    },
    /// Stop counting and report.
    Collect,
    Quit,
}

enum Reply {
    Ready(Result<PortReady, String>),
    TxDone(TxReport),
    Collected(Vec<(u8, RxReport)>),
}

pub struct TesterPort {
    cmd: Sender<Cmd>,
    reply: Receiver<Reply>,
    thread: Option<JoinHandle<()>>,
    pub ready: PortReady,
    /// When the port last received a test frame (ns since the epoch).
    pub last_rx_ns: Arc<AtomicU64>,
}

impl TesterPort {
    /// Starts both ports' threads (each enters its namespace, opens its port and
    /// resolves its next hops, answering the other's questions meanwhile, for up to
    /// `resolve_for`) and waits until both are ready.
    pub fn start_pair(
        a: PortPlan,
        b: PortPlan,
        epoch: Instant,
        resolve_for: Duration,
    ) -> Result<(TesterPort, TesterPort), String> {
        let spawn = |plan: PortPlan| -> Result<_, String> {
            let (cmd_tx, cmd_rx) = channel();
            let (rep_tx, rep_rx) = channel();
            let last = Arc::new(AtomicU64::new(0));
            let l2 = last.clone();
            let thread = std::thread::Builder::new()
                .name(format!("tester-{}", plan.ifname))
                .spawn(move || port_thread(plan, epoch, resolve_for, cmd_rx, rep_tx, l2))
                .map_err(|e| e.to_string())?;
            Ok((cmd_tx, rep_rx, thread, last))
        };
        let pending = [spawn(a)?, spawn(b)?];
        let mut ports = Vec::new();
        let mut error = None;
        for (cmd, reply, thread, last_rx_ns) in pending {
            let ready = match reply.recv() {
                Ok(Reply::Ready(r)) => r,
                _ => Err("tester port thread ended".into()),
            };
            match ready {
                Ok(ready) => ports.push(TesterPort {
                    cmd,
                    reply,
                    thread: Some(thread),
                    ready,
                    last_rx_ns,
                }),
                Err(e) => {
                    let _ = cmd.send(Cmd::Quit);
                    let _ = thread.join();
                    error.get_or_insert(e);
                }
            }
        }
        if let Some(e) = error {
            return Err(e);
        }
        let b = ports.pop().ok_or("no port")?;
        let a = ports.pop().ok_or("no port")?;
        Ok((a, b))
    }

    /// Starts counting `trial` (streams expected: (stream id, most frames), each of
    /// `flows` flows) and, with `tx`, sending.
    pub fn begin(&self, trial: u8, expect: Vec<(u8, u64)>, flows: u8, tx: Option<TxPlan>) {
        let _ = self.cmd.send(Cmd::Trial {
            trial,
            expect,
            flows,
            tx,
        });
    }

    /// Waits for this port's sending to finish.
    pub fn wait_tx(&self) -> Result<TxReport, String> {
        loop {
            match self.reply.recv() {
                Ok(Reply::TxDone(r)) => return Ok(r),
                Ok(_) => continue,
                Err(_) => return Err("tester port thread ended".into()),
            }
        }
    }

    pub fn collect(&self) -> Result<Vec<(u8, RxReport)>, String> {
        let _ = self.cmd.send(Cmd::Collect);
        loop {
            match self.reply.recv() {
                Ok(Reply::Collected(r)) => return Ok(r),
                Ok(_) => continue,
                Err(_) => return Err("tester port thread ended".into()),
            }
        }
    }
}

impl Drop for TesterPort {
    fn drop(&mut self) {
        let _ = self.cmd.send(Cmd::Quit);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// The tester's port and the descriptors that become readable when frames arrive (one
/// per receive queue it reads).
fn open_port(plan: &PortPlan) -> Result<(Box<dyn Port>, Vec<RawFd>), String> {
    let xdp = || -> Result<(Box<dyn Port>, Vec<RawFd>), String> {
        espgw::ensure_bpffs();
        let open = |q: u32| AfXdpPort::open(&plan.ifname, q, XdpMode::Auto, 4096);
        let first = open(0).map_err(|e| e.to_string())?;
        // An AF_XDP socket sees one receive queue: where the interface has more (a
        // gateway with several workers gives its veths one per worker, and its frames
        // arrive on the queue its sending worker used), one socket per queue, read in
        // turn. A queue that does not exist refuses the bind: that is the count.
        let mut queues: Vec<Box<dyn Port>> = vec![Box::new(first)];
        while queues.len() < MAX_QUEUES {
            match open(queues.len() as u32) {
                Ok(p) => queues.push(Box::new(p)),
                Err(_) => break,
            }
        }
        let fds = queues.iter().filter_map(|q| q.poll_fd()).collect();
        let port: Box<dyn Port> = if queues.len() == 1 {
            queues.pop().expect("one queue")
        } else {
            Box::new(EveryQueue { queues, next: 0 })
        };
        Ok((port, fds))
    };
    let packet = || -> Result<(Box<dyn Port>, Vec<RawFd>), String> {
        let p = AfPacketPort::open(&plan.ifname, 4096, None).map_err(|e| e.to_string())?;
        let fds = p.poll_fd().into_iter().collect();
        Ok((Box::new(p), fds))
    };
    match plan.io {
        IoPref::AfXdp => xdp(),
        IoPref::AfPacket => packet(),
        IoPref::Auto => xdp().or_else(|_| packet()),
    }
}

/// The most receive queues the tester reads on one interface.
const MAX_QUEUES: usize = 64;

/// One tester port over several AF_XDP sockets (one per receive queue): receives from
/// each in turn, sends on the first (one transmit queue keeps the offered frames in order).
struct EveryQueue {
    queues: Vec<Box<dyn Port>>,
    next: usize,
}

impl Port for EveryQueue {
    fn name(&self) -> &str {
        self.queues[0].name()
    }

    fn rx_burst(
        &mut self,
        pool: &mut PacketPool,
        out: &mut Vec<Packet>,
        max: usize,
    ) -> std::io::Result<usize> {
        let n = self.queues.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let got = self.queues[i].rx_burst(pool, out, max)?;
            if got > 0 {
                self.next = (i + 1) % n;
                return Ok(got);
            }
        }
        Ok(0)
    }

    fn tx_burst(
        &mut self,
        pkts: &mut Vec<Packet>,
        pool: &mut PacketPool,
    ) -> std::io::Result<usize> {
        self.queues[0].tx_burst(pkts, pool)
    }

    fn stats(&mut self) -> espgw_io::port::PortStats {
        let mut total = espgw_io::port::PortStats::default();
        for q in &mut self.queues {
            total.add(&q.stats());
        }
        total
    }

    fn kind(&self) -> &'static str {
        self.queues[0].kind()
    }
}

/// Tables for the host logic: one port with the tester's addresses, nothing else.
fn host_tables(plan: &PortPlan, mac: [u8; 6]) -> Result<Tables, String> {
    let mac_s: Vec<String> = mac.iter().map(|b| format!("{b:02x}")).collect();
    let addrs: Vec<String> = plan.addresses.iter().map(|a| format!("\"{a}\"")).collect();
    let text = format!(
        "[[port]]\nname = \"tester\"\nmac = \"{}\"\naddresses = [{}]\n",
        mac_s.join(":"),
        addrs.join(", ")
    );
    let cfg = espgw_config::parse(&text, "tester", Some(espgw_config::Format::Native))
        .map_err(|e| format!("tester addresses: {e}"))?;
    let provider =
        espgw_crypto::provider(espgw_crypto::ProviderChoice::Auto).map_err(|e| e.to_string())?;
    Tables::build(&cfg, provider.as_ref(), None).map_err(|e| format!("tester tables: {e}"))
}

fn addr_u128(a: IpAddr) -> (bool, u128) {
    match a {
        IpAddr::V4(v) => (true, u128::from(u32::from(v))),
        IpAddr::V6(v) => (false, u128::from(v)),
    }
}

struct Sending {
    plan: TxPlan,
    next: u64,
    report: TxReport,
}

/// One tester port's I/O and host state, owned by its thread.
struct PortIo {
    port: Box<dyn Port>,
    tables: Tables,
    mac: [u8; 6],
    cache: NeighbourCache,
    pool: PacketPool,
    rx: Vec<Packet>,
    out: Vec<Packet>,
    /// Readable when frames arrive: one per receive queue read.
    fds: Vec<RawFd>,
    epoch: Instant,
    last_rx: Arc<AtomicU64>,
}

/// What the port thread counts and sends for the trial at hand.
#[derive(Default)]
struct TrialState {
    counting: Option<(u8, Vec<(u8, StreamCounter)>)>,
    sending: Option<Sending>,
}

impl PortIo {
    /// Enters the port's namespace and opens it.
    fn open(plan: &PortPlan, epoch: Instant, last_rx: Arc<AtomicU64>) -> Result<Self, String> {
        if let Some(n) = &plan.netns {
            espgw_io::netns::enter(n).map_err(|e| e.to_string())?;
        }
        let mac = espgw_io::netns::mac_address(&plan.ifname)
            .map_err(|e| format!("tester port {}: {e}", plan.ifname))?;
        let (port, fds) = open_port(plan)?;
        let tables = host_tables(plan, mac)?;
        Ok(PortIo {
            port,
            tables,
            mac,
            cache: NeighbourCache::default(),
            pool: PacketPool::new(4 * BURST),
            rx: Vec::with_capacity(BURST),
            out: Vec::with_capacity(BURST),
            fds,
            epoch,
            last_rx,
        })
    }

    fn lookup(&self, a: IpAddr) -> Option<[u8; 6]> {
        let (v4, x) = addr_u128(a);
        self.cache.get(v4, x)
    }

    /// Receives one burst: answers ARP/ND, counts test frames into `counting`.
    fn serve(&mut self, counting: &mut Option<(u8, Vec<(u8, StreamCounter)>)>) -> usize {
        serve_rx(
            &mut *self.port,
            &mut self.pool,
            &mut self.rx,
            &mut self.out,
            &self.tables,
            &self.cache,
            self.epoch,
            counting,
            &self.last_rx,
        )
    }

    /// Waits up to `ms` for a frame (or sleeps briefly on a port with no descriptor).
    fn wait(&self, ms: i32) {
        if self.fds.is_empty() {
            std::thread::sleep(Duration::from_micros(200));
        } else {
            espgw_io::poll::wait_readable(&self.fds, ms);
        }
    }

    /// Resolves the gateways' link-layer addresses, answering the other side's questions
    /// meanwhile, within `resolve_for`.
    fn resolve(&mut self, plan: &PortPlan, resolve_for: Duration) -> Result<PortReady, String> {
        let mut targets = vec![plan.gateway4];
        targets.extend(plan.gateway6);
        let deadline = Instant::now() + resolve_for;
        let mut last_ask = Instant::now() - Duration::from_secs(1);
        while targets.iter().any(|&a| self.lookup(a).is_none()) {
            if Instant::now() > deadline {
                let missing: Vec<String> = targets
                    .iter()
                    .filter(|&&a| self.lookup(a).is_none())
                    .map(|a| a.to_string())
                    .collect();
                return Err(format!(
                    "tester port {}: no answer from next hop {} (is the device under test up?)",
                    plan.ifname,
                    missing.join(", ")
                ));
            }
            if last_ask.elapsed() > Duration::from_millis(200) {
                last_ask = Instant::now();
                self.solicit(&targets);
            }
            self.serve(&mut None);
            self.wait(10);
        }
        Ok(PortReady {
            mac: self.mac,
            gateway4_mac: self.lookup(plan.gateway4).unwrap_or_default(),
            gateway6_mac: plan.gateway6.and_then(|a| self.lookup(a)),
            kind: self.port.kind(),
        })
    }

    /// Sends an ARP request or neighbour solicitation for each unresolved target.
    fn solicit(&mut self, targets: &[IpAddr]) {
        for &a in targets {
            let (v4, x) = addr_u128(a);
            let mut p = self.pool.get();
            if self.lookup(a).is_none()
                && host::build_solicitation(&mut p, &self.tables.ports[0], v4, x)
            {
                self.out.push(p);
            } else {
                self.pool.put(p);
            }
        }
        let _ = self.port.tx_burst(&mut self.out, &mut self.pool);
    }
}

/// Starts counting (and sending, if asked) for a new trial.
fn start_trial(
    state: &mut TrialState,
    trial: u8,
    expect: Vec<(u8, u64)>,
    flows: u8,
    tx: Option<TxPlan>,
    replies: &Sender<Reply>,
) {
    let streams = expect
        .into_iter()
        .map(|(s, n)| (s, StreamCounter::new(n, flows)))
        .collect();
    state.counting = Some((trial, streams));
    state.sending = tx.map(|plan| Sending {
        plan,
        next: 0,
        report: TxReport::default(),
    });
    if state.sending.as_ref().is_some_and(|s| s.plan.count == 0) {
        let _ = replies.send(Reply::TxDone(TxReport::default()));
        state.sending = None;
    }
}

/// Handles the commands waiting; false once the thread should end.
fn handle_commands(cmds: &Receiver<Cmd>, state: &mut TrialState, replies: &Sender<Reply>) -> bool {
    match cmds.try_recv() {
        Ok(Cmd::Trial {
            trial,
            expect,
            flows,
            tx,
        }) => start_trial(state, trial, expect, flows, tx, replies),
        Ok(Cmd::Collect) => {
            let got = state
                .counting
                .take()
                .map(|(_, v)| v.into_iter().map(|(s, c)| (s, c.report)).collect())
                .unwrap_or_default();
            let _ = replies.send(Reply::Collected(got));
        }
        Ok(Cmd::Quit) | Err(std::sync::mpsc::TryRecvError::Disconnected) => return false,
        Err(std::sync::mpsc::TryRecvError::Empty) => {}
    }
    true
}

fn port_thread(
    plan: PortPlan,
    epoch: Instant,
    resolve_for: Duration,
    cmds: Receiver<Cmd>,
    replies: Sender<Reply>,
    last_rx: Arc<AtomicU64>,
) {
    let ready = PortIo::open(&plan, epoch, last_rx)
        .and_then(|mut tp| tp.resolve(&plan, resolve_for).map(|r| (tp, r)));
    let mut tp = match ready {
        Ok((tp, ready)) => {
            let _ = replies.send(Reply::Ready(Ok(ready)));
            tp
        }
        Err(e) => {
            let _ = replies.send(Reply::Ready(Err(e)));
            return;
        }
    };
    let mut state = TrialState::default();
    while handle_commands(&cmds, &mut state, &replies) {
        let mut busy = false;
        if let Some(s) = &mut state.sending {
            busy = true;
            if send_due(&mut *tp.port, &mut tp.pool, &mut tp.out, s, epoch) {
                let _ = replies.send(Reply::TxDone(s.report.clone()));
                state.sending = None;
            }
        }
        let got = tp.serve(&mut state.counting);
        if !busy && got == 0 {
            tp.wait(1);
        }
    }
}
