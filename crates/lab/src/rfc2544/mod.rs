//! `espgw-lab bench rfc2544`: the RFC 2544 benchmarks (throughput, latency, frame loss rate,
//! back-to-back) through a device under test, with reports.
//!
//! - [`frame`]: test frames and their records (signature, stream, sequence, timestamp);
//! - [`traffic`]: the generator / receiver threads on the tester's two ports;
//! - [`search`]: the RFC's procedures over a trial function;
//! - [`dut`]: devices under test, set up and torn down on the test bed;
//! - [`standin`]: a relay that drops / reorders / duplicates every Nth frame (a DUT
//!   whose losses are known exactly, for testing the tester);
//! - [`report`], [`plot`]: JSON records, Markdown, SVG / PNG plots, one HTML page.
//!
//! DUTs are interleaved per frame size: for each size every DUT is brought up in turn
//! and runs that size's tests, so slow drifts of a shared machine hit all of them.

pub mod cores;
pub mod dut;
pub mod frame;
pub mod gateway_drops;
pub mod plot;
pub mod report;
pub mod search;
pub mod standin;
pub mod traffic;

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use espgw_io::cpu_list::CpuList;
use frame::{Flow, Template, L4};
use report::{LatencySummary, Summary, TrialRecord};
use search::Lossy;
use traffic::{IoPref, RxReport, TesterPort, TxPlan, TxReport};

mod run;
use run::run_tests;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum TestKind {
    Throughput,
    Latency,
    Loss,
    BackToBack,
}

#[derive(clap::Args, Clone)]
pub struct Rfc2544Args {
    /// Devices under test (the tester's own ceiling through a plain veth is measured
    /// first unless --no-ceiling).
    #[arg(long, value_enum, value_delimiter = ',', default_value = "espgw")]
    pub dut: Vec<dut::DutKind>,
    /// Several DUTs in one run, trials interleaved per frame size, with the ratios of
    /// the first to the others printed at the end (replaces --dut).
    #[arg(long, value_enum, value_delimiter = ',')]
    pub compare: Option<Vec<dut::DutKind>>,
    /// Frame sizes (FCS included) and/or "imix" (the IPsec IMIX, IP sizes 90/92/594/1418).
    #[arg(long, value_delimiter = ',')]
    pub sizes: Option<Vec<String>>,
    /// Which tests.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "throughput,latency,loss,back-to-back"
    )]
    pub tests: Vec<TestKind>,
    /// Short trials (1 s, 0.3 s drain), two frame sizes unless --sizes, fewer repeats.
    #[arg(long)]
    pub quick: bool,
    /// Seconds per trial (RFC 2544: 60; --quick: 1).
    #[arg(long)]
    pub trial_seconds: Option<f64>,
    /// Acceptable frame loss in percent for the throughput search (default 0).
    #[arg(long, default_value_t = 0.0)]
    pub loss_tolerance: f64,
    /// Frame shape.
    #[arg(long, value_enum, default_value = "udp")]
    pub proto: L4,
    /// Traffic both ways at once (each direction at the offered rate).
    #[arg(long)]
    pub bidirectional: bool,
    /// IPv6 frames (the smallest size is then 84 bytes; espgw and kernel DUTs only).
    #[arg(long)]
    pub ipv6: bool,
    /// The tester's packet I/O.
    #[arg(long, value_enum, default_value = "auto")]
    pub io: IoPref,
    /// Output directory for results.json, results.md, the plots and index.html.
    #[arg(long, default_value = "rfc2544-report")]
    pub out: PathBuf,
    /// Skip the tester's ceiling measurement.
    #[arg(long)]
    pub no_ceiling: bool,
    /// Latency trials per frame size (RFC 2544: 20; --quick: 2; default 5).
    #[arg(long)]
    pub latency_trials: Option<usize>,
    /// Back-to-back searches per frame size (RFC 2544: 50; --quick: 1; default 3).
    #[arg(long)]
    pub b2b_trials: Option<usize>,
    /// Latency trials at this rate (frames per second per direction) instead of at each
    /// DUT's throughput rate: latency of several DUTs under the same load.
    #[arg(long)]
    pub latency_rate: Option<f64>,
    /// Upper bound of the offered rate, frames per second per direction.
    #[arg(long)]
    pub max_rate: Option<f64>,
    /// Gateway workers for the espgw DUT.
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// How the espgw DUT spreads a port's traffic over its workers (`espgw run --fanout`).
    #[arg(long, value_enum, default_value = "hash")]
    pub fanout: espgw::FanoutArg,
    /// The espgw DUT's protect policies name a set of --workers SAs, one per worker
    /// (`testbed up --per-worker-sas`): gateway 2 then checks each worker's numbers in their
    /// own replay window instead of one SA's numbers interleaved by gateway 1's workers.
    #[arg(long)]
    pub per_worker_sas: bool,
    /// Every SA of the espgw DUT's built-in configurations with this replay window
    /// (`testbed up --replay-window`; default 1024): whether a trial's replay drops come
    /// from one SA read on several queues whose rings back up unevenly.
    #[arg(long)]
    pub replay_window: Option<u32>,
    /// MTU of the test bed's transport network between the gateways (espgw, kernel and
    /// strongSwan DUTs): 1500 makes the espgw gateways fragment every frame whose ESP
    /// packet would not fit (at 1518 B, two ESP packets per frame, and two fragments at the
    /// receiver); 1600 carries ESP around a 1500-byte packet whole, as a backhaul sized for
    /// IPsec does.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u16).range(1280..=3000))]
    pub wan_mtu: u16,
    /// Extra arguments for the espgw DUT's two `espgw run` (e.g. "--busy-poll 50"); they
    /// come last, so they override the test bed's own (e.g. "--io af-packet").
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub espgw_args: String,
    /// Distinct flows per stream (1-64): UDP/TCP source ports 49152 + 256 x stream + flow,
    /// taken in turn, so that RSS and fanout have something to spread. Reordering is
    /// counted per flow.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=64))]
    pub flows: u8,
    /// Sending and receiving threads per tester port (1-16), each on its own queue: thread
    /// t sends the frames whose sequence number mod T is t, and reads queues t, t + T, ...
    /// (AF_XDP; AF_PACKET: a fanout group). --flows must be a multiple of T (each flow then
    /// comes from one thread, in order). The test bed's interfaces get at least T queues.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(1..=16))]
    pub threads: u8,
    /// CPUs to pin the tester's threads to, in turn (port A's thread 0, port B's thread 0,
    /// A's thread 1, ...), a kernel-style list: "0,1", "8-15", "8-11,14": keeps the tester
    /// off the cores of the gateways (`espgw run --pin` takes cores from 0 up) on a machine
    /// with enough.
    #[arg(long, value_parser = tester_cpu_list, default_value = "")]
    pub tester_cpus: CpuList,
    /// tester (the default): the tester's 2 x --threads threads on the upper half of the
    /// CPUs, the gateways and the kernel's work left to the scheduler, on a machine with
    /// at least 8 CPUs whose halves hold them (else nothing pinned); the layout that
    /// measured best on the 16-core host. auto: give every busy thread a core of its own
    /// where the machine has enough (one CPU left for the rest, then gateway 1's workers,
    /// gateway 2's, each through `espgw run --cpus`, and the tester's 2 x --threads; with
    /// an espgw DUT in the run); it was slower there. off: pin nothing but --tester-cpus.
    /// --tester-cpus, when given, is kept in every mode. The layout is logged ("cores:")
    /// and in results.json
    #[arg(long, value_enum, default_value = "tester")]
    pub pin_cores: cores::PinCores,
    /// The gateways' workers' CPUs, from --pin-cores (set by `run`, not an option).
    #[arg(skip)]
    pub gateway_cpus: Option<(Vec<usize>, Vec<usize>)>,
    /// Frames of each of the tester's socket rings (AF_XDP: the UMEM of a queue's socket,
    /// half of it the receive ring; AF_PACKET: each ring). A receive ring that fills while
    /// the receiving thread waits for a core counts as the DUT's loss: deeper rings let a
    /// machine whose cores the tester shares measure the DUT rather than the scheduler.
    #[arg(long, default_value_t = 4096, value_parser = clap::value_parser!(u32).range(256..=65536))]
    pub tester_ring_frames: u32,
    #[command(flatten)]
    pub standin: dut::StandinOptions,
    #[command(flatten)]
    pub external: dut::ExternalOptions,
}

/// Settings derived from the arguments.
#[derive(Debug, Clone)]
pub struct Profile {
    pub trial: Duration,
    pub drain: Duration,
    pub resolution: f64,
    pub max_search_trials: usize,
    pub latency_trials: usize,
    pub b2b_trials: usize,
    pub b2b_seconds: f64,
}

impl Profile {
    fn from_args(a: &Rfc2544Args) -> Profile {
        let secs = a.trial_seconds.unwrap_or(if a.quick { 1.0 } else { 60.0 });
        Profile {
            trial: Duration::from_secs_f64(secs.clamp(0.05, 3600.0)),
            drain: Duration::from_secs_f64(if a.quick { 0.3 } else { 2.0 }),
            resolution: if a.quick { 0.04 } else { 0.01 },
            max_search_trials: if a.quick { 9 } else { 16 },
            latency_trials: a
                .latency_trials
                .unwrap_or(if a.quick { 2 } else { 5 })
                .max(1),
            b2b_trials: a.b2b_trials.unwrap_or(if a.quick { 1 } else { 3 }).max(1),
            b2b_seconds: if a.quick { 0.25 } else { 2.0 },
        }
    }
}

/// A frame size: an Ethernet frame size or the IPsec IMIX.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Size {
    Frame(usize),
    Imix,
}

impl Size {
    pub fn label(&self) -> String {
        match self {
            Size::Frame(n) => n.to_string(),
            Size::Imix => "imix".into(),
        }
    }
}

pub const RFC_SIZES: [usize; 7] = [64, 128, 256, 512, 1024, 1280, 1518];

/// `--tester-cpus`: a CPU list, or nothing (the default: the tester's threads unpinned).
fn tester_cpu_list(text: &str) -> Result<CpuList, String> {
    if text.trim().is_empty() {
        return Ok(CpuList(Vec::new()));
    }
    text.parse()
}

fn parse_sizes(a: &Rfc2544Args) -> Result<Vec<Size>, String> {
    let default: Vec<String> = if a.quick {
        vec!["64".into(), "1024".into()]
    } else {
        RFC_SIZES
            .iter()
            .map(|s| s.to_string())
            .chain(["imix".to_string()])
            .collect()
    };
    a.sizes
        .clone()
        .unwrap_or(default)
        .iter()
        .map(|s| {
            if s.eq_ignore_ascii_case("imix") {
                Ok(Size::Imix)
            } else {
                s.trim()
                    .parse()
                    .map(Size::Frame)
                    .map_err(|_| format!("--sizes: '{s}' is not a frame size or 'imix'"))
            }
        })
        .collect()
}

/// One trial's outcome, both directions summed.
#[derive(Clone)]
pub struct Outcome {
    pub requested_pps: f64,
    pub tx: TxReport,
    pub rx: RxReport,
    pub directions: usize,
    /// Frames the kernel dropped in the trial where the tester sees it drop them: at the
    /// tester's own receive rings and interfaces, and in the host's input backlogs. Loss
    /// the DUT did not cause (or not alone), which a trial's loss may include.
    pub kernel_drops: KernelDrops,
    /// What the espgw gateways dropped in the trial, by gateway, port and reason (only
    /// what grew); None for other DUTs, or when a gateway did not answer.
    pub gateway_drops: Option<std::collections::BTreeMap<String, u64>>,
}

/// The kernel's own drop counts over one trial.
#[derive(Clone, Copy, Default)]
pub struct KernelDrops {
    /// At the tester's two ports: frames their receive rings had no room for (the tester
    /// did not keep up), and frames their interfaces dropped on receive (on a veth, these
    /// include the former: frames XDP could not hand to a full AF_XDP socket).
    pub tester: traffic::PortDrops,
    /// Frames dropped because a CPU's input backlog was full (`/proc/net/softnet_stat`,
    /// second column, all CPUs; host-wide: a veth's frames wait there for the peer).
    pub backlog: u64,
    /// Frames the DUT lost besides what it means to drop, where it reports them (the
    /// stand-in: its rings full, its sends refused, its interfaces' drops); None for DUTs
    /// that do not.
    pub dut: Option<u64>,
}

/// The host's input-backlog drops so far, summed over CPUs (the second column of
/// `/proc/net/softnet_stat`, hexadecimal); 0 where the file cannot be read.
fn backlog_drops() -> u64 {
    std::fs::read_to_string("/proc/net/softnet_stat")
        .map(|t| parse_backlog_drops(&t))
        .unwrap_or(0)
}

fn parse_backlog_drops(text: &str) -> u64 {
    text.lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .filter_map(|c| u64::from_str_radix(c, 16).ok())
        .sum()
}

impl Outcome {
    pub fn lost(&self) -> u64 {
        self.tx.sent.saturating_sub(self.rx.received)
    }
    /// The offered rate scaled by the share received (0 when nothing was sent).
    pub fn received_pps(&self) -> f64 {
        if self.tx.sent == 0 {
            return 0.0;
        }
        self.rx.received as f64 * self.offered_pps() / self.tx.sent as f64
    }
}

impl Lossy for Outcome {
    fn loss_ratio(&self) -> f64 {
        if self.tx.sent == 0 {
            return 1.0;
        }
        self.lost() as f64 / self.tx.sent as f64
    }
    /// Per direction.
    fn offered_pps(&self) -> f64 {
        let el = (self.tx.last_ns.saturating_sub(self.tx.first_ns)) as f64 / 1e9;
        let per_dir = self.tx.sent as f64 / self.directions.max(1) as f64;
        if el <= 0.0 || per_dir < 2.0 {
            return 0.0;
        }
        (per_dir - 1.0) / el
    }
}

/// How long no test frame may arrive before the DUT counts as drained.
const QUIET: Duration = Duration::from_millis(250);
/// The longest wait for a DUT to drain its queues after an overload.
const SETTLE_MAX: Duration = Duration::from_secs(60);

/// A direction's frames: templates and the order they are sent in.
type Frames = (Arc<Vec<Template>>, Arc<Vec<u8>>);

/// The tester's two ports and the frames of the current frame size.
struct Bench {
    a: TesterPort,
    b: TesterPort,
    ab: Frames,
    ba: Frames,
    bidirectional: bool,
    /// Flows per stream (the receivers count reordering per flow).
    flows: u8,
    trial_no: u8,
    drain: Duration,
    epoch: Instant,
    /// The stand-in relay, asked for its own drops around each trial.
    standin: Option<Arc<standin::StandinLink>>,
    /// The espgw gateways' state directory (their control sockets), asked for their drop
    /// counters around each trial; None for other DUTs.
    gateways: Option<std::path::PathBuf>,
}

impl Bench {
    /// The DUT's own count of frames it lost, where it reports one.
    fn dut_drops(&self) -> Result<Option<u64>, String> {
        self.standin.as_ref().map(|l| l.drops()).transpose()
    }

    /// Waits until no test frame has arrived for [`QUIET`]: a DUT with deep queues
    /// (strongSwan's libipsec holds many seconds of an overload) still delivers frames
    /// of the last trial, which would steal capacity from the next one.
    fn settle(&self) {
        let start = Instant::now();
        while start.elapsed() < SETTLE_MAX {
            let now = self.epoch.elapsed().as_nanos() as u64;
            let last = self
                .a
                .last_rx_ns
                .load(Ordering::Relaxed)
                .max(self.b.last_rx_ns.load(Ordering::Relaxed));
            let quiet_ns = QUIET.as_nanos() as u64;
            if now.saturating_sub(last) >= quiet_ns {
                return;
            }
            std::thread::sleep(Duration::from_nanos(quiet_ns - now.saturating_sub(last)));
        }
    }

    /// Runs one trial: `rate` per direction (0: unpaced), for at most `count` frames or
    /// `duration`.
    fn trial(&mut self, rate: f64, count: u64, duration: Duration) -> Result<Outcome, String> {
        self.settle();
        self.trial_no = self.trial_no.wrapping_add(1);
        let t = self.trial_no;
        let backlog_at_start = backlog_drops();
        let dut_at_start = self.dut_drops()?;
        let gateways_at_start = self.gateway_counters();
        // B counts stream 0 (A to B); A counts stream 1 (B to A) when both ways. Both
        // count (from the kernel's drop counts read now) before either sends.
        self.b.begin(t, vec![(0u8, count)], self.flows)?;
        let expect_back = if self.bidirectional {
            vec![(1u8, count)]
        } else {
            vec![]
        };
        self.a.begin(t, expect_back, self.flows)?;
        let start_at = Instant::now() + Duration::from_millis(5);
        let plan = |stream: u8, (tpl, pat): &Frames| TxPlan {
            trial: t,
            stream,
            rate_pps: rate,
            count,
            duration,
            templates: tpl.clone(),
            pattern: pat.clone(),
            start_at,
        };
        if self.bidirectional {
            self.b.send(plan(1, &self.ba));
        }
        self.a.send(plan(0, &self.ab));
        let mut tx = self.a.wait_tx()?;
        if self.bidirectional {
            tx.absorb(&self.b.wait_tx()?);
        }
        std::thread::sleep(self.drain);
        let mut rx: Option<RxReport> = None;
        let (at_b, mut tester) = self.b.collect()?;
        let (at_a, drops_a) = self.a.collect()?;
        tester.add(drops_a);
        let kernel_drops = KernelDrops {
            tester,
            backlog: backlog_drops().saturating_sub(backlog_at_start),
            dut: self
                .dut_drops()?
                .zip(dut_at_start)
                .map(|(end, start)| end.saturating_sub(start)),
        };
        let gateway_drops =
            gateways_at_start.and_then(|start| Some(self.gateway_counters()?.since(&start)));
        for (_, r) in at_b.into_iter().chain(at_a) {
            match &mut rx {
                None => rx = Some(r),
                Some(acc) => acc.absorb(&r),
            }
        }
        Ok(Outcome {
            requested_pps: rate,
            tx,
            rx: rx.ok_or("no receiver report")?,
            directions: if self.bidirectional { 2 } else { 1 },
            kernel_drops,
            gateway_drops,
        })
    }

    /// Both espgw gateways' drop counters now, where the DUT is espgw's test bed.
    fn gateway_counters(&self) -> Option<gateway_drops::Counters> {
        self.gateways
            .as_deref()
            .and_then(gateway_drops::Counters::read)
    }
}

/// The frames of one stream: each size's template for each of `flows` flows, and the
/// pattern that picks one per sequence number. Flow of sequence number s: s mod `flows`
/// (the receiver counts reordering per flow with that).
fn templates(
    size: Size,
    proto: L4,
    src: &traffic::PortReady,
    ips: (std::net::IpAddr, std::net::IpAddr),
    v6: bool,
    stream: u8,
    flows: u8,
) -> Result<Frames, String> {
    if flows > 1 && proto == L4::Icmp {
        return Err("--flows needs UDP or TCP frames (their source ports tell flows apart)".into());
    }
    let dst_mac = if v6 {
        src.gateway6_mac.ok_or("no IPv6 next hop")?
    } else {
        src.gateway4_mac
    };
    let flow = |f: u8| Flow {
        src_mac: src.mac,
        dst_mac,
        src_ip: ips.0,
        dst_ip: ips.1,
        l4: proto,
        stream,
        flow: f,
    };
    let n = usize::from(flows.max(1));
    match size {
        Size::Frame(bytes) => {
            let t: Result<Vec<Template>, String> = (0..flows.max(1))
                .map(|f| Template::new(&flow(f), bytes, false))
                .collect();
            Ok((Arc::new(t?), Arc::new((0..flows.max(1)).collect())))
        }
        Size::Imix => {
            // Template k * flows + f: size k of flow f. The pattern's length is a multiple of
            // the flow count, so flow = sequence number mod flows across its wrap too.
            let mut t = Vec::new();
            for &(l3, _) in frame::IPSEC_IMIX.iter() {
                for f in 0..flows.max(1) {
                    t.push(Template::new(&flow(f), l3, true)?);
                }
            }
            let w: Vec<u32> = frame::IPSEC_IMIX.iter().map(|x| x.1).collect();
            let len = 10_000usize.div_ceil(n) * n;
            let sizes = frame::mix_pattern(&w, len);
            let pattern = sizes
                .iter()
                .enumerate()
                .map(|(i, &k)| (usize::from(k) * n + i % n) as u8)
                .collect();
            Ok((Arc::new(t), Arc::new(pattern)))
        }
    }
}

/// Everything measured so far, written out after every block of trials.
pub struct Results {
    pub records: Vec<TrialRecord>,
    pub summaries: Vec<Summary>,
    /// What each espgw gateway said of itself after each frame size's trials.
    pub gateway_stats: Vec<report::GatewayStats>,
    pub interrupted: bool,
}

pub fn run(mut a: Rfc2544Args) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| e.to_string())?;
    }
    let profile = Profile::from_args(&a);
    let sizes = parse_sizes(&a)?;
    let mut duts = a.compare.clone().unwrap_or_else(|| a.dut.clone());
    duts.dedup();
    if a.compare.as_ref().is_some_and(|c| c.len() < 2) {
        return Err("--compare needs two or more DUTs".into());
    }
    let cpus: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .iter()
        .map(|c| c.id)
        .collect();
    if let Some(c) = a.tester_cpus.0.iter().find(|c| !cpus.contains(c)) {
        return Err(format!(
            "--tester-cpus: cannot run a thread on CPU {c} (this process may use {cpus:?})"
        ));
    }
    let espgw_workers = if duts.contains(&dut::DutKind::Espgw) {
        a.workers
    } else {
        0
    };
    let layout = cores::CoreLayout::plan(
        a.pin_cores,
        &cpus,
        espgw_workers,
        usize::from(a.threads),
        &a.tester_cpus.0,
    );
    eprintln!("cores: {}", layout.describe());
    a.tester_cpus = CpuList(layout.tester.clone());
    a.gateway_cpus = layout.gateways.clone();
    if !a.flows.is_multiple_of(a.threads) {
        return Err(format!(
            "--flows {} is not a multiple of --threads {}: a flow's frames would leave from two threads, out of order",
            a.flows, a.threads
        ));
    }
    if !a.no_ceiling && !duts.contains(&dut::DutKind::External) {
        duts.insert(0, dut::DutKind::Ceiling);
    }
    std::fs::create_dir_all(&a.out).map_err(|e| format!("{}: {e}", a.out.display()))?;
    let meta = report::Meta::collect(&a, &profile, &duts, &sizes);
    let mut results = Results {
        records: Vec::new(),
        summaries: Vec::new(),
        gateway_stats: Vec::new(),
        interrupted: false,
    };
    let blocks = sizes.len() * duts.len();
    let mut progress = report::Progress::new(blocks * a.tests.len());
    'outer: for size in &sizes {
        for kind in &duts {
            if stop.load(Ordering::Relaxed) {
                results.interrupted = true;
                break 'outer;
            }
            let r = run_block(
                &a,
                &profile,
                *kind,
                *size,
                &stop,
                &mut results,
                &mut progress,
            );
            report::write_all(&a.out, &meta, &results)?;
            if let Err(e) = r {
                if stop.load(Ordering::Relaxed) {
                    results.interrupted = true;
                    break 'outer;
                }
                return Err(format!("{} at {}: {e}", kind.name(), size.label()));
            }
        }
    }
    if stop.load(Ordering::Relaxed) {
        results.interrupted = true;
    }
    progress.finish();
    report::write_all(&a.out, &meta, &results)?;
    println!("{}", report::markdown(&meta, &results));
    if let Some(c) = &a.compare {
        println!("{}", report::ratios(&results, c));
    }
    println!(
        "wrote {}/results.json, results.md, index.html and plots",
        a.out.display()
    );
    if results.interrupted {
        return Err("interrupted: partial results written".into());
    }
    Ok(())
}

/// Brings one DUT up, runs the tests at one frame size, tears it down.
fn run_block(
    a: &Rfc2544Args,
    p: &Profile,
    kind: dut::DutKind,
    size: Size,
    stop: &AtomicBool,
    results: &mut Results,
    progress: &mut report::Progress,
) -> Result<(), String> {
    progress.status(&format!("{} {}: setting up", kind.name(), size.label()));
    let d = dut::up(kind, a)?;
    let r = run_tests(a, p, &d, size, stop, results, progress);
    if kind == dut::DutKind::Espgw {
        record_gateway_stats(size, results);
    }
    let down = d.down();
    r.and(down)
}

/// Asks both espgw gateways of the test bed what they did over this frame size's trials
/// (which worker read how much, whether the ordered spread's workers joined, what was
/// dropped and why), before the test bed goes down: a throughput figure alone does not say
/// why more workers did or did not help. Printed as well, for logs read on another host.
fn record_gateway_stats(size: Size, results: &mut Results) {
    for gateway in ["gw1", "gw2"] {
        let sock = std::path::Path::new(crate::testbed::STATE_DIR).join(format!("{gateway}.sock"));
        let req = espgw_control::ControlRequest::Show("stats".into());
        match espgw::live::control::request(&sock, &req) {
            Ok(v) => {
                let s = report::GatewayStats::from_show_stats(&size.label(), gateway, &v);
                eprintln!("{}", s.describe());
                results.gateway_stats.push(s);
            }
            Err(e) => eprintln!("{gateway}: show stats: {e}"),
        }
    }
}

/// Mean frame size in bits (FCS included) over the pattern.
fn mean_frame_bits(t: &[Template], pattern: &[u8]) -> f64 {
    if pattern.is_empty() {
        return 0.0;
    }
    let total: usize = pattern
        .iter()
        .map(|&i| t.get(usize::from(i)).map_or(0, |t| t.frame_size()))
        .sum();
    total as f64 * 8.0 / pattern.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `--tester-cpus` takes the kernel's list syntax (ranges too), keeps the order, and
    /// is empty when not given; a malformed list is refused by the parser.
    #[test]
    fn tester_cpus_take_a_cpu_list() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            a: Rfc2544Args,
        }
        let cpus = |args: &[&str]| {
            Cli::try_parse_from([&["rfc2544"], args].concat()).map(|c| c.a.tester_cpus.0)
        };
        assert_eq!(cpus(&[]).unwrap(), Vec::<usize>::new());
        assert_eq!(
            cpus(&["--tester-cpus", "8-11,14"]).unwrap(),
            [8, 9, 10, 11, 14]
        );
        assert_eq!(cpus(&["--tester-cpus", "3,1"]).unwrap(), [3, 1]);
        assert!(cpus(&["--tester-cpus", "5-2"]).is_err());
        assert!(cpus(&["--tester-cpus", "1,1"]).is_err());
    }

    /// `--flows`: each sequence number's template belongs to flow seq mod flows (what the
    /// receiver assumes), the flows differ in their UDP source port only, and IMIX keeps
    /// its size shares.
    #[test]
    fn flows_take_turns_and_differ_in_source_port() {
        let ready = traffic::PortReady {
            mac: [2, 0, 0, 0, 0, 1],
            gateway4_mac: [2, 0, 0, 0, 0, 2],
            gateway6_mac: None,
            kind: "test",
        };
        let ips = (
            "198.51.100.20".parse().unwrap(),
            "203.0.113.20".parse().unwrap(),
        );
        for size in [Size::Frame(64), Size::Imix] {
            for flows in [1u8, 3, 16, 64] {
                let (t, pattern) = templates(size, L4::Udp, &ready, ips, false, 1, flows).unwrap();
                let n = usize::from(flows);
                assert_eq!(pattern.len() % n, 0);
                let port = |i: usize| u16::from_be_bytes([t[i].bytes[34], t[i].bytes[35]]);
                // Two passes over the pattern: the flow follows the sequence number across
                // the wrap.
                for seq in 0..2 * pattern.len() {
                    let tpl = usize::from(pattern[seq % pattern.len()]);
                    let flow = (seq % n) as u8;
                    assert_eq!(port(tpl), frame::source_port(1, flow), "{size:?} seq {seq}");
                }
                let mut ports: Vec<u16> = (0..t.len()).map(port).collect();
                ports.sort_unstable();
                ports.dedup();
                assert_eq!(ports.len(), n);
            }
        }
        let (t, pattern) = templates(Size::Imix, L4::Udp, &ready, ips, false, 0, 4).unwrap();
        let small = pattern
            .iter()
            .filter(|&&k| t[usize::from(k)].bytes.len() < 120)
            .count();
        let share = small as f64 / pattern.len() as f64;
        assert!((0.55..0.65).contains(&share), "90/92-byte share {share}");
        assert!(templates(Size::Frame(64), L4::Icmp, &ready, ips, false, 0, 2).is_err());
    }

    /// Two CPUs' lines as a 6.1 kernel writes them: the second column is the drops.
    #[test]
    fn backlog_drops_add_up_the_second_column_of_every_cpu() {
        let text = "0013e1e4 0000000a 00000a78 00000000 00000000 00000000 00000000 00000000 \
                    00000000 00000000 00000000 00000000 00000000 00000000 00000000\n\
                    0015265c 00000107 00000a41 00000000 00000000 00000000 00000000 00000000 \
                    00000000 00000000 00000000 00000000 00000001 00000000 00000001\n";
        assert_eq!(parse_backlog_drops(text), 10 + 263);
        assert_eq!(parse_backlog_drops(""), 0);
        assert_eq!(parse_backlog_drops("zz yy\n"), 0);
    }
}
