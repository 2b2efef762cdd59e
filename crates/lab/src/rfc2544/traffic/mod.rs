//! The generator and receiver: `--threads` threads per tester port (its lanes), each
//! sending its share of the direction's frames on schedule and counting what arrives on
//! its receive queues, and answering ARP / neighbour discovery for the tester's addresses
//! (so a gateway can resolve it) with the gateway's own host logic.
//!
//! Lane t of T sends the sequence numbers s with s mod T = t (so with a flow count that is
//! a multiple of T, each flow comes from one lane, in order) on its own transmit queue, and
//! reads receive queues t, t + T, ... (AF_XDP; AF_PACKET: a fanout group). Counting is
//! shared between a port's lanes ([`counter`]): a frame is counted once whichever lane
//! receives it. A thread enters its port's network namespace first, so one process drives
//! ports in two namespaces and every timestamp comes from one monotonic clock.

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
use espgw_io::af_packet::{AfPacketPort, Fanout};
use espgw_io::af_xdp::{AfXdpPort, XdpMode};
use espgw_io::queue_set::one_port;
use espgw_io::Port;
use hdrhistogram::Histogram;

use super::frame::{parse, Record, Seen, Template};

mod counter;
mod send_receive;
#[cfg(test)]
mod tests;

use counter::{Counting, StreamCounter, TrialCounters};
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
    /// Frames of each socket's rings (AF_XDP: the UMEM, half for receiving; AF_PACKET: each
    /// ring).
    pub ring_frames: u32,
}

#[derive(Debug, Clone)]
pub struct PortReady {
    pub mac: [u8; 6],
    pub gateway4_mac: [u8; 6],
    pub gateway6_mac: Option<[u8; 6]>,
    pub kind: &'static str,
}

/// How many threads (lanes) drive each tester port, and where they run.
#[derive(Debug, Clone)]
pub struct Lanes {
    /// Sending and receiving threads per port (1-16).
    pub per_port: usize,
    /// CPUs to pin the threads to, in turn (port A's lane 0, B's lane 0, A's lane 1,
    /// ...); empty: not pinned.
    pub cpus: Vec<usize>,
}

/// One lane of a port: its index, the port's lane count, and what it needs to open its
/// share of the port.
#[derive(Debug, Clone)]
struct Lane {
    index: usize,
    count: usize,
    /// AF_PACKET fanout group of the port's lanes (unique per port in the process).
    group: u16,
    cpu: Option<usize>,
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

impl TxReport {
    /// Adds another sender's report (another lane, or the other direction).
    pub fn absorb(&mut self, o: &TxReport) {
        if o.sent > 0 {
            self.first_ns = if self.sent == 0 {
                o.first_ns
            } else {
                self.first_ns.min(o.first_ns)
            };
            self.last_ns = self.last_ns.max(o.last_ns);
        }
        self.sent += o.sent;
        self.bytes += o.bytes;
        self.refused += o.refused;
    }
}

impl RxReport {
    /// Adds another receiver's report (another lane, or the other direction).
    pub fn absorb(&mut self, o: &RxReport) {
        self.received += o.received;
        self.duplicates += o.duplicates;
        self.reordered += o.reordered;
        self.stale += o.stale;
        self.fragments += o.fragments;
        let _ = self.latency.add(&o.latency);
    }

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

enum Cmd {
    /// Start counting a trial (into the port's shared counters); answered by `Counting`.
    Count(Arc<TrialCounters>),
    /// Send the lane's share of a trial's frames; answered by `TxDone`.
    Send(TxPlan),
    /// Stop counting and report.
    Collect,
    Quit,
}

enum Reply {
    /// Lane 0 opened the port on this I/O and now resolves the next hops.
    Opened(&'static str),
    Ready(Result<PortReady, String>),
    /// The lane counts the trial, from the kernel's drop counts it has just read.
    Counting,
    TxDone(TxReport),
    Collected(Collected),
}

/// What one lane counted in a trial.
struct Collected {
    reports: Vec<(u8, RxReport)>,
    /// What the kernel dropped at the lane over the trial.
    kernel: PortDrops,
}

/// The kernel's drop counts at a tester port's receiving end: cumulative as a lane reads
/// them, and their growth over a trial.
#[derive(Clone, Copy, Default)]
pub struct PortDrops {
    /// Frames its receive rings had no room for (the port's `rx_ring_full`).
    pub overrun: u64,
    /// Frames its interface dropped on receive (`/proc/thread-self/net/dev`, the lane's
    /// namespace), which also counts drops the sockets' own counters miss. Read by lane 0
    /// only: the interface is the port's, shared by its lanes.
    pub interface: u64,
}

impl PortDrops {
    fn read(port: &mut dyn Port, lane: &Lane, ifname: &str) -> PortDrops {
        PortDrops {
            overrun: port.stats().rx_ring_full,
            interface: if lane.index == 0 {
                interface_dropped(ifname).rx
            } else {
                0
            },
        }
    }

    fn since(self, start: PortDrops) -> PortDrops {
        PortDrops {
            overrun: self.overrun.saturating_sub(start.overrun),
            interface: self.interface.saturating_sub(start.interface),
        }
    }

    pub fn add(&mut self, o: PortDrops) {
        self.overrun += o.overrun;
        self.interface += o.interface;
    }
}

/// An interface's own drop counts (`/proc/net/dev`'s two "drop" columns).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct InterfaceDrops {
    pub rx: u64,
    pub tx: u64,
}

/// The drop counts of interface `ifname` in the calling thread's network namespace, or
/// zeros where they cannot be read.
pub fn interface_dropped(ifname: &str) -> InterfaceDrops {
    std::fs::read_to_string("/proc/thread-self/net/dev")
        .map(|t| parse_dropped(&t, ifname))
        .unwrap_or_default()
}

/// The receive and transmit "drop" columns (the 4th and 12th counts) of `ifname`'s line
/// of /proc/net/dev.
fn parse_dropped(text: &str, ifname: &str) -> InterfaceDrops {
    let counts: Vec<u64> = text
        .lines()
        .filter_map(|l| l.split_once(':'))
        .find(|(name, _)| name.trim() == ifname)
        .map(|(_, c)| {
            c.split_whitespace()
                .map(|n| n.parse().unwrap_or(0))
                .collect()
        })
        .unwrap_or_default();
    let at = |i: usize| counts.get(i).copied().unwrap_or(0);
    InterfaceDrops {
        rx: at(3),
        tx: at(11),
    }
}

/// One lane's thread and its command and reply channels.
struct LaneThread {
    cmd: Sender<Cmd>,
    reply: Receiver<Reply>,
    thread: Option<JoinHandle<()>>,
}

impl LaneThread {
    fn spawn(
        plan: PortPlan,
        lane: Lane,
        epoch: Instant,
        resolve_for: Duration,
        shared: &LaneShared,
    ) -> Result<LaneThread, String> {
        let (cmd_tx, cmd_rx) = channel();
        let (rep_tx, rep_rx) = channel();
        let shared = shared.clone();
        let thread = std::thread::Builder::new()
            .name(format!("tester-{}-{}", plan.ifname, lane.index))
            .spawn(move || lane_thread(plan, lane, epoch, resolve_for, shared, cmd_rx, rep_tx))
            .map_err(|e| e.to_string())?;
        Ok(LaneThread {
            cmd: cmd_tx,
            reply: rep_rx,
            thread: Some(thread),
        })
    }

    fn ready(&self) -> Result<PortReady, String> {
        match self.reply.recv() {
            Ok(Reply::Ready(r)) => r,
            _ => Err("tester port thread ended".into()),
        }
    }

    /// Lane 0's I/O kind once it has opened the port (or why it could not).
    fn opened(&self) -> Result<&'static str, String> {
        match self.reply.recv() {
            Ok(Reply::Opened(kind)) => Ok(kind),
            Ok(Reply::Ready(Err(e))) => Err(e),
            _ => Err("tester port thread ended".into()),
        }
    }
}

impl Drop for LaneThread {
    fn drop(&mut self) {
        let _ = self.cmd.send(Cmd::Quit);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What a port's lanes share: the neighbour cache (an answer may arrive on any lane) and
/// when a test frame last arrived.
#[derive(Clone)]
struct LaneShared {
    cache: Arc<NeighbourCache>,
    last_rx: Arc<AtomicU64>,
}

pub struct TesterPort {
    lanes: Vec<LaneThread>,
    pub ready: PortReady,
    /// When the port last received a test frame (ns since the epoch).
    pub last_rx_ns: Arc<AtomicU64>,
}

impl TesterPort {
    /// Starts both ports' threads and waits until they are ready: first each port's lane
    /// 0 (it enters the namespace, opens the port and picks the I/O), then the other
    /// lanes on the same I/O, while lane 0 resolves the next hops for up to
    /// `resolve_for`. Every lane reads its queue and answers the other port's questions
    /// during resolution, and what any lane learns goes into the port's one neighbour
    /// cache: a device under test may answer on any queue (a relay that spreads flows
    /// by hash sends an ARP reply to whichever queue the reply hashes to).
    pub fn start_pair(
        a: PortPlan,
        b: PortPlan,
        epoch: Instant,
        resolve_for: Duration,
        lanes: &Lanes,
    ) -> Result<(TesterPort, TesterPort), String> {
        let per_port = lanes.per_port.clamp(1, MAX_LANES);
        // Fanout group ids are per network namespace and both ports may share one.
        let base = (std::process::id() as u16).wrapping_mul(2);
        let lane = |port: usize, index: usize| Lane {
            index,
            count: per_port,
            group: base.wrapping_add(port as u16),
            cpu: (!lanes.cpus.is_empty())
                .then(|| lanes.cpus[(2 * index + port) % lanes.cpus.len()]),
        };
        let plans = [a, b];
        let shared: Vec<LaneShared> = (0..2)
            .map(|_| LaneShared {
                cache: Arc::new(NeighbourCache::default()),
                last_rx: Arc::new(AtomicU64::new(0)),
            })
            .collect();
        let mut firsts = Vec::new();
        for (port, plan) in plans.iter().enumerate() {
            firsts.push(LaneThread::spawn(
                plan.clone(),
                lane(port, 0),
                epoch,
                resolve_for,
                &shared[port],
            )?);
        }
        let mut others: Vec<Vec<LaneThread>> = Vec::new();
        for (port, first) in firsts.iter().enumerate() {
            let mut plan = plans[port].clone();
            plan.io = if first.opened()? == "af_xdp" {
                IoPref::AfXdp
            } else {
                IoPref::AfPacket
            };
            let mut lanes = Vec::new();
            for index in 1..per_port {
                lanes.push(LaneThread::spawn(
                    plan.clone(),
                    lane(port, index),
                    epoch,
                    resolve_for,
                    &shared[port],
                )?);
            }
            others.push(lanes);
        }
        let mut ports = Vec::new();
        for ((port, first), rest) in firsts.into_iter().enumerate().zip(others) {
            let ready = first.ready()?;
            let mut lanes = vec![first];
            for t in rest {
                t.ready()?;
                lanes.push(t);
            }
            ports.push(TesterPort {
                lanes,
                ready,
                last_rx_ns: shared[port].last_rx.clone(),
            });
        }
        let b = ports.pop().ok_or("no port")?;
        let a = ports.pop().ok_or("no port")?;
        Ok((a, b))
    }

    /// Starts counting `trial` (streams expected: (stream id, most frames), each of
    /// `flows` flows) and returns once every lane has read the kernel's drop counts it
    /// measures the trial's from: a lane that reads them late (waiting for a CPU) would
    /// leave the trial's first drops out (seen: 19-633 frames in one trial of 19 with the
    /// receiving lane's CPU stalled 30 ms in every 100). Nothing of the trial may be sent
    /// before this returns for both ports.
    pub fn begin(&self, trial: u8, expect: Vec<(u8, u64)>, flows: u8) -> Result<(), String> {
        let streams = expect
            .into_iter()
            .map(|(s, n)| StreamCounter::new(s, n, flows))
            .collect();
        let counters = Arc::new(TrialCounters { trial, streams });
        for lane in &self.lanes {
            let _ = lane.cmd.send(Cmd::Count(counters.clone()));
        }
        self.each_reply(|r| matches!(r, Reply::Counting).then_some(()))?;
        Ok(())
    }

    /// Every lane's next reply that `pick` takes (skipping the others), in lane order.
    fn each_reply<T>(&self, pick: impl Fn(Reply) -> Option<T>) -> Result<Vec<T>, String> {
        let mut picked = Vec::with_capacity(self.lanes.len());
        for lane in &self.lanes {
            loop {
                let r = lane.reply.recv().map_err(|_| "tester port thread ended")?;
                if let Some(t) = pick(r) {
                    picked.push(t);
                    break;
                }
            }
        }
        Ok(picked)
    }

    /// Sends the trial's frames: each lane its share of `tx`.
    pub fn send(&self, tx: TxPlan) {
        for lane in &self.lanes {
            let _ = lane.cmd.send(Cmd::Send(tx.clone()));
        }
    }

    /// Waits for every lane's sending to finish.
    pub fn wait_tx(&self) -> Result<TxReport, String> {
        let mut total = TxReport::default();
        for r in self.each_reply(|r| match r {
            Reply::TxDone(r) => Some(r),
            _ => None,
        })? {
            total.absorb(&r);
        }
        Ok(total)
    }

    /// Stops counting; every lane's reports, added up per stream, and what the kernel
    /// dropped at the port in the trial.
    pub fn collect(&self) -> Result<(Vec<(u8, RxReport)>, PortDrops), String> {
        for lane in &self.lanes {
            let _ = lane.cmd.send(Cmd::Collect);
        }
        let mut total: Vec<(u8, RxReport)> = Vec::new();
        let mut drops = PortDrops::default();
        for got in self.each_reply(|r| match r {
            Reply::Collected(c) => Some(c),
            _ => None,
        })? {
            drops.add(got.kernel);
            for (stream, r) in got.reports {
                match total.iter_mut().find(|(s, _)| *s == stream) {
                    Some((_, acc)) => acc.absorb(&r),
                    None => total.push((stream, r)),
                }
            }
        }
        Ok((total, drops))
    }
}

/// The most lanes per port.
pub const MAX_LANES: usize = 16;

/// Lane `lane`'s share of the tester's port and the descriptors that become readable when
/// frames arrive on it.
fn open_port(plan: &PortPlan, lane: &Lane) -> Result<(Box<dyn Port>, Vec<RawFd>), String> {
    let xdp = || -> Result<(Box<dyn Port>, Vec<RawFd>), String> {
        espgw::ensure_bpffs();
        let open =
            |q: usize| AfXdpPort::open(&plan.ifname, q as u32, XdpMode::Auto, plan.ring_frames);
        // An AF_XDP socket sees one receive queue, and the sender picks the queue (a
        // gateway with several workers gives its veths one per worker, and its frames
        // arrive on the queue its sending worker used): lane t reads queues t, t + T, ...
        // up to the first that refuses the bind (that is the count), and sends on t.
        let first = open(lane.index).map_err(|e| {
            if lane.index == 0 {
                e.to_string()
            } else {
                format!(
                    "{}: no receive queue {} for tester thread {} of {} ({e}); the interface needs as many queues as threads",
                    plan.ifname, lane.index, lane.index, lane.count
                )
            }
        })?;
        let mut queues = vec![first];
        let mut q = lane.index + lane.count;
        while q < MAX_QUEUES {
            match open(q) {
                Ok(p) => queues.push(p),
                Err(_) => break,
            }
            q += lane.count;
        }
        let port = one_port(queues).ok_or("no queue")?;
        let fds = port.poll_fds();
        Ok((port, fds))
    };
    let packet = || -> Result<(Box<dyn Port>, Vec<RawFd>), String> {
        // Several lanes: a fanout group by flow hash, each frame to one of them.
        let fanout = (lane.count > 1).then_some((lane.group, Fanout::Hash));
        let mut p = AfPacketPort::open(&plan.ifname, plan.ring_frames as usize, fanout)
            .map_err(|e| e.to_string())?;
        // An unpinned lane that the scheduler moves would, with the qdisc bypassed,
        // spread its flows over the DUT's receive queues (the queue follows the CPU),
        // and the DUT would be charged with the reordering.
        if lane.cpu.is_none() {
            p.transmit_through_qdisc().map_err(|e| e.to_string())?;
        }
        let fds = p.poll_fds();
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

/// A lane's sending in a trial: its k-th frame is sequence number k x lanes + lane.
struct Sending {
    plan: TxPlan,
    lane: u64,
    lanes: u64,
    /// This lane's frame count so far.
    next: u64,
    report: TxReport,
}

impl Sending {
    /// How many of the plan's frames are this lane's.
    fn count(&self) -> u64 {
        self.plan
            .count
            .saturating_sub(self.lane)
            .div_ceil(self.lanes)
    }

    /// This lane's share of the rate (0: unpaced).
    fn rate_pps(&self) -> f64 {
        self.plan.rate_pps / self.lanes as f64
    }

    /// The sequence number of this lane's k-th frame.
    fn seq(&self, k: u64) -> u64 {
        k * self.lanes + self.lane
    }
}

/// One tester port's I/O and host state, owned by its thread.
struct PortIo {
    port: Box<dyn Port>,
    tables: Tables,
    mac: [u8; 6],
    cache: Arc<NeighbourCache>,
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
    counting: Option<Counting>,
    sending: Option<Sending>,
    /// The kernel's counts when the trial began.
    kernel_at_start: PortDrops,
}

impl PortIo {
    /// Enters the port's namespace and opens the lane's share of it.
    fn open(
        plan: &PortPlan,
        lane: &Lane,
        epoch: Instant,
        shared: LaneShared,
    ) -> Result<Self, String> {
        if let Some(n) = &plan.netns {
            espgw_io::netns::enter(n).map_err(|e| e.to_string())?;
        }
        let mac = espgw_io::netns::mac_address(&plan.ifname)
            .map_err(|e| format!("tester port {}: {e}", plan.ifname))?;
        let (port, fds) = open_port(plan, lane)?;
        let tables = host_tables(plan, mac)?;
        Ok(PortIo {
            port,
            tables,
            mac,
            cache: shared.cache,
            pool: PacketPool::new(4 * BURST),
            rx: Vec::with_capacity(BURST),
            out: Vec::with_capacity(BURST),
            fds,
            epoch,
            last_rx: shared.last_rx,
        })
    }

    fn lookup(&self, a: IpAddr) -> Option<[u8; 6]> {
        let (v4, x) = addr_u128(a);
        self.cache.get(v4, x)
    }

    /// Receives one burst: answers ARP/ND, counts test frames into `counting`.
    fn serve(&mut self, counting: &mut Option<Counting>) -> usize {
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
        Ok(self.ready(plan))
    }

    /// The port's facts as far as known (the next hops' addresses once resolved).
    fn ready(&self, plan: &PortPlan) -> PortReady {
        PortReady {
            mac: self.mac,
            gateway4_mac: self.lookup(plan.gateway4).unwrap_or_default(),
            gateway6_mac: plan.gateway6.and_then(|a| self.lookup(a)),
            kind: self.port.kind(),
        }
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

/// Starts counting (and sending this lane's share, if asked) for a new trial.
fn start_counting(
    state: &mut TrialState,
    (counters, kernel): (Arc<TrialCounters>, PortDrops),
    replies: &Sender<Reply>,
) {
    state.counting = Some(Counting::new(counters));
    state.kernel_at_start = kernel;
    let _ = replies.send(Reply::Counting);
}

fn start_sending(state: &mut TrialState, lane: &Lane, plan: TxPlan, replies: &Sender<Reply>) {
    let sending = Sending {
        plan,
        lane: lane.index as u64,
        lanes: lane.count as u64,
        next: 0,
        report: TxReport::default(),
    };
    if sending.count() == 0 {
        let _ = replies.send(Reply::TxDone(TxReport::default()));
        state.sending = None;
    } else {
        state.sending = Some(sending);
    }
}

/// Handles the commands waiting; false once the thread should end. `port` (on interface
/// `ifname`) is read for the kernel's drops when a trial begins and when it is collected.
fn handle_commands(
    cmds: &Receiver<Cmd>,
    lane: &Lane,
    state: &mut TrialState,
    replies: &Sender<Reply>,
    (port, ifname): (&mut dyn Port, &str),
) -> bool {
    match cmds.try_recv() {
        Ok(Cmd::Count(counters)) => {
            let kernel = PortDrops::read(port, lane, ifname);
            start_counting(state, (counters, kernel), replies)
        }
        Ok(Cmd::Send(plan)) => start_sending(state, lane, plan, replies),
        Ok(Cmd::Collect) => {
            let reports = state
                .counting
                .take()
                .map(Counting::into_reports)
                .unwrap_or_default();
            let kernel = PortDrops::read(port, lane, ifname).since(state.kernel_at_start);
            let _ = replies.send(Reply::Collected(Collected { reports, kernel }));
        }
        Ok(Cmd::Quit) | Err(std::sync::mpsc::TryRecvError::Disconnected) => return false,
        Err(std::sync::mpsc::TryRecvError::Empty) => {}
    }
    true
}

/// Opens the lane's share of the port (lane 0 also resolves the next hops) and runs its
/// trials until told to quit.
fn lane_thread(
    plan: PortPlan,
    lane: Lane,
    epoch: Instant,
    resolve_for: Duration,
    shared: LaneShared,
    cmds: Receiver<Cmd>,
    replies: Sender<Reply>,
) {
    let pinned = match lane.cpu {
        Some(cpu) if !core_affinity::set_for_current(core_affinity::CoreId { id: cpu }) => {
            Err(format!("--tester-cpus: cannot run a thread on CPU {cpu}"))
        }
        _ => Ok(()),
    };
    let ready = pinned
        .and_then(|()| PortIo::open(&plan, &lane, epoch, shared))
        .and_then(|mut tp| {
            let ready = if lane.index == 0 {
                // The other lanes open on this I/O now and read their queues while
                // this one resolves.
                let _ = replies.send(Reply::Opened(tp.port.kind()));
                tp.resolve(&plan, resolve_for)?
            } else {
                tp.ready(&plan)
            };
            Ok((tp, ready))
        });
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
    while handle_commands(
        &cmds,
        &lane,
        &mut state,
        &replies,
        (&mut *tp.port, &plan.ifname),
    ) {
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
