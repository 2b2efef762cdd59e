//! `espgw-lab bench`: the data-plane benchmark on in-memory ports, compared in the same run
//! with the raw AES-GCM speed of the crypto library on the same buffer sizes; and the SPD
//! classification benchmark.

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Subcommand;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use espgw_config::{
    Config, Format, Mode, Prefix, Range, RouteConfig, SaProto, ANY_PORT, ANY_PROTO,
};
use espgw_core::flow::FlowKey;
use espgw_core::packet::{PacketPool, Verdict};
use espgw_core::spd::{Spd, SpdAction, SpdRule};
use espgw_core::{Direction, Node, Pipeline, Tables, Transmit};
use espgw_crypto::{AeadAlgorithm, Integrity, ProviderChoice, Suite};
use espgw_io::memory::MemoryPort;
use espgw_io::Port;
use serde_json::json;
use zeroize_free::key_of;

use crate::gen::{self, FlowSpec, FCS_LEN, L4};

mod host_load;
mod raw;
mod rounds;
mod spd;
mod workers;

#[derive(Subcommand)]
pub enum BenchCmd {
    /// The ESP pipeline on memory ports, outbound and inbound, against raw AES-GCM.
    Dataplane {
        /// Short trials (0.3 s) for a smoke run.
        #[arg(long)]
        quick: bool,
        /// Seconds per trial.
        #[arg(long)]
        seconds: Option<f64>,
        /// Frame sizes (FCS included) and/or "imix".
        #[arg(long, value_delimiter = ',', default_value = "64,1420,imix")]
        sizes: Vec<String>,
        /// Algorithms: combined-mode names (aes-128-gcm, aes-256-ccm, chacha20-poly1305,
        /// aes-128-gmac), CIPHER+INTEGRITY (aes-128-cbc+hmac-sha256-128, null+hmac-sha1-96),
        /// null (NULL/NULL), ah/INTEGRITY (AH alone: ah/hmac-sha256-128, ah/aes-128-gmac),
        /// "table" (the README's comparison set) or "all" (every ESP suite and AH).
        #[arg(long, value_delimiter = ',', default_value = "aes-128-gcm,aes-256-gcm")]
        algs: Vec<String>,
        /// Directions to measure.
        #[arg(long, value_delimiter = ',', default_value = "outbound,inbound")]
        directions: Vec<String>,
        /// Skip the raw crypto reference runs (for profiling the pipeline alone).
        #[arg(long)]
        no_raw: bool,
        /// Also write the results as JSON to this file.
        #[arg(long)]
        json: Option<std::path::PathBuf>,
        /// Run under the live gateway's seccomp filter (kill mode), to measure its cost.
        #[arg(long)]
        seccomp: bool,
        /// Worker counts to measure (e.g. 1,2,4,8): the node on that many threads, with
        /// the scaling against one worker and an order check of what leaves.
        #[arg(long, value_delimiter = ',')]
        workers: Vec<usize>,
        /// SA counts with --workers (SA k protects the far host 203.0.113.k+1).
        #[arg(long, value_delimiter = ',', default_value = "1")]
        sas: Vec<usize>,
        /// With --workers: "ordered" (one input in arrival order, any SA count), "hash"
        /// (each SA on one worker), "per-worker" (one flow to every worker, its policy
        /// with a per-worker set of as many SAs as workers: each seals or opens its own)
        /// or "auto" (ordered when there are fewer SAs than workers).
        #[arg(long, default_value = "auto")]
        spread: String,
        /// With --workers: pin worker i to the i-th CPU.
        #[arg(long)]
        pin: bool,
        /// With --workers: every worker on the process's one instance of intel-ipsec-mb
        /// instead of each on its own (the library writes a process-wide variable on every
        /// call; see the README's "Many cores"). Also what --seccomp runs.
        #[arg(long)]
        shared_library: bool,
        /// Rounds per row, their order alternating (a machine that drifts between trials
        /// makes one round say little); then the median of the rounds and its range. One
        /// core: each round measures the raw references and the pipeline a moment apart,
        /// and the ratio is the median of the rounds' own ratios. With --workers: every
        /// worker count per round, each round's scaling against its own one-worker trial.
        #[arg(long, default_value_t = 1)]
        rounds: usize,
        /// With --workers and an ordered spread: each worker sizes its bursts by its speed,
        /// so that a slower worker does not hold up the others (see the README's "Many
        /// cores"). "on", "off" (the default, as `espgw run`'s), or "on,off" to measure
        /// both in each round.
        #[arg(long, value_delimiter = ',', default_value = "off")]
        burst_pacing: Vec<String>,
        /// With --workers: worker W spends NS more nanoseconds on every packet (a busy
        /// loop while it holds the burst), as a worker on a core shared with another
        /// tenant would; to see how a spread copes with an uneven machine. WORKER:NS.
        #[arg(long)]
        handicap: Option<String>,
        /// The protected traffic's family: ipv6 sends UDP over IPv6 between
        /// 2001:db8:100::10 and 2001:db8:113::20, frames of at least 74 bytes. One core only
        /// (not with --workers).
        #[arg(long, value_enum, default_value = "ipv4")]
        inner: Family,
        /// The tunnel's outer header: ipv6 moves the gateways' tunnel endpoints from
        /// 192.0.2.1/2 to 2001:db8:2::1/2. One core only (not with --workers).
        #[arg(long, value_enum, default_value = "ipv4")]
        outer: Family,
        /// The protected traffic's flows: "each" (the default) gives every frame of the
        /// cycle a 5-tuple of its own, as the pcaps `compare.sh` makes for ipsec-secgw
        /// (256 frames, 300 for IMIX; hosts .10-.209, ports 1024-2023 to 5000-5015), so no
        /// two frames in a row share a flow; N sends N flows in turn, and 1 the single flow
        /// 198.51.100.10:40000 -> 203.0.113.20:9 of the builds before this option. One
        /// core only (not with --workers).
        #[arg(long)]
        flows: Option<String>,
        /// Extended (64-bit) sequence numbers on every SA, from 2^32 on, so that the high
        /// half the ICV covers is never zero: what a busy SA runs with (32 bits last 7
        /// minutes at 10 Mpps). The raw reference seals with ESN too. One core only (not
        /// with --workers).
        #[arg(long)]
        esn: bool,
    },
    /// SPD classification time at 1, 100, 1,000 and 10,000 rules.
    Spd {
        #[arg(long)]
        quick: bool,
    },
    /// RFC 2544 through a device under test on the test bed (or an external one):
    /// throughput, latency, frame loss, back-to-back; JSON, Markdown, plots, HTML.
    Rfc2544(Box<crate::rfc2544::Rfc2544Args>),
    /// A relay that drops / reorders / duplicates every Nth test frame (the tester's
    /// stand-in DUT; started by `bench rfc2544 --dut standin`).
    #[command(hide = true)]
    Standin(crate::rfc2544::standin::StandinArgs),
}

/// An IP family of the benchmark's traffic (`bench dataplane --inner`, `--outer`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Family {
    Ipv4,
    Ipv6,
}

/// How the one-core benchmark's frames spread over flows (`bench dataplane --flows`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Flows {
    /// Every frame of the cycle a flow of its own ([`PCAP_FRAMES`] frames, or the IMIX's
    /// 300), as in ipsec-secgw's pcaps: the flow cache and the route cache never hit.
    Each,
    /// This many flows in turn; 1 is the classic single flow.
    Count(usize),
}

/// Frames of one size in each pcap `compare.sh` makes (`gen_pcap.py`'s `NPKT`).
const PCAP_FRAMES: usize = 256;

impl Flows {
    /// `--flows`: "each" or a count of at least 1 (absent: each).
    fn parse(arg: Option<&str>) -> Result<Flows, String> {
        match arg.map(str::trim) {
            None | Some("each") => Ok(Flows::Each),
            Some(n) => match n.parse::<usize>() {
                Ok(k) if k >= 1 => Ok(Flows::Count(k)),
                _ => Err(format!(
                    "--flows takes \"each\" or a count of at least 1, not '{n}'"
                )),
            },
        }
    }

    fn name(self) -> String {
        match self {
            Flows::Each => "each".into(),
            Flows::Count(k) => k.to_string(),
        }
    }
}

/// What the one-core benchmark sends: the inner and outer families, the flows, and
/// whether its SAs number packets with ESN.
#[derive(Debug, Clone, Copy)]
struct Traffic {
    inner: Family,
    outer: Family,
    flows: Flows,
    esn: bool,
}

mod zeroize_free {
    /// A fixed benchmark key of `n` bytes.
    pub fn key_of(n: usize) -> Vec<u8> {
        (0..n as u8)
            .map(|i| i.wrapping_mul(7).wrapping_add(3))
            .collect()
    }
}

/// `--burst-pacing`'s list: "on" and/or "off".
fn parse_pacing(modes: &[String]) -> Result<Vec<bool>, String> {
    let mut out = Vec::new();
    for m in modes {
        let on = match m.trim() {
            "on" => true,
            "off" => false,
            other => return Err(format!("--burst-pacing takes on and/or off, not '{other}'")),
        };
        if !out.contains(&on) {
            out.push(on);
        }
    }
    if out.is_empty() {
        out.push(true);
    }
    Ok(out)
}

pub fn run(cmd: BenchCmd, crypto: ProviderChoice) -> Result<(), String> {
    match cmd {
        BenchCmd::Dataplane {
            quick,
            seconds,
            sizes,
            algs,
            directions,
            no_raw,
            json,
            seccomp,
            workers,
            sas,
            spread,
            pin,
            shared_library,
            rounds,
            burst_pacing,
            handicap,
            inner,
            outer,
            flows,
            esn,
        } => {
            if seccomp {
                espgw::install_seccomp_filter(espgw::SeccompArg::Kill)
                    .map_err(|e| e.to_string())?;
                println!("under the live gateway's seccomp filter (kill mode)");
            }
            let secs = seconds.unwrap_or(if quick { 0.3 } else { 2.0 });
            if rounds == 0 {
                return Err("--rounds takes a count of at least 1".into());
            }
            if !workers.is_empty() {
                if workers.contains(&0) || sas.contains(&0) {
                    return Err("--workers and --sas take counts of at least 1".into());
                }
                if (inner, outer) != (Family::Ipv4, Family::Ipv4) {
                    return Err(
                        "--inner / --outer ipv6 are for the one-core benchmark, not --workers"
                            .into(),
                    );
                }
                if flows.is_some() {
                    return Err("--flows is for the one-core benchmark, not --workers".into());
                }
                if esn {
                    return Err("--esn is for the one-core benchmark, not --workers".into());
                }
                let args = workers::WorkersArgs {
                    workers,
                    sas,
                    spread: workers::Spread::parse(&spread)?,
                    pin,
                    // Loading an instance maps code from a new file: not under the filter.
                    own_instances: !shared_library && !seccomp,
                    rounds,
                    pacing: parse_pacing(&burst_pacing)?,
                    handicap: handicap
                        .as_deref()
                        .map(workers::Handicap::parse)
                        .transpose()?,
                };
                return workers::dataplane_workers(
                    crypto,
                    secs,
                    &sizes,
                    &algs,
                    &directions,
                    &args,
                    json.as_deref(),
                );
            }
            let with_raw = !no_raw;
            dataplane(
                crypto,
                secs,
                &sizes,
                &algs,
                &directions,
                with_raw,
                rounds,
                Traffic {
                    inner,
                    outer,
                    flows: Flows::parse(flows.as_deref())?,
                    esn,
                },
                json.as_deref(),
            )
        }
        BenchCmd::Spd { quick } => spd::spd(quick),
        BenchCmd::Rfc2544(a) => crate::rfc2544::run(*a),
        BenchCmd::Standin(a) => crate::rfc2544::standin::run(a),
    }
}

/// A protocol and suite by the names `bench dataplane --algs` takes.
fn parse_alg(s: &str) -> Result<(SaProto, Suite), String> {
    if let Some(i) = s.strip_prefix("ah/") {
        let integ = espgw_config::algorithms::integrity_by_name(i)
            .filter(|i| *i != Integrity::None)
            .ok_or_else(|| format!("unknown integrity algorithm '{i}'"))?;
        let suite = Suite {
            enc: espgw_crypto::Encryption::Null,
            integ,
        };
        return Ok((SaProto::Ah, suite));
    }
    Ok((SaProto::Esp, parse_suite(s)?))
}

/// An ESP suite by the names `bench dataplane --algs` takes.
fn parse_suite(s: &str) -> Result<Suite, String> {
    use espgw_config::algorithms::*;
    if s == "null" {
        return Ok(Suite {
            enc: espgw_crypto::Encryption::Null,
            integ: Integrity::None,
        });
    }
    if let Some(e) = combined_by_name(s) {
        return Ok(Suite {
            enc: e,
            integ: Integrity::None,
        });
    }
    let (c, i) = s.split_once('+').ok_or_else(|| {
        format!("unknown algorithm '{s}' (a combined-mode name, or CIPHER+INTEGRITY)")
    })?;
    let suite = Suite {
        enc: cipher_by_name(c).ok_or_else(|| format!("unknown cipher '{c}'"))?,
        integ: integrity_by_name(i).ok_or_else(|| format!("unknown integrity algorithm '{i}'"))?,
    };
    suite.check().map_err(|e| e.to_string())?;
    Ok(suite)
}

/// The AH integrity algorithms `--algs all` measures.
const AH_BENCH: [&str; 7] = [
    "hmac-sha1-96",
    "hmac-sha256-128",
    "hmac-sha384-192",
    "hmac-sha512-256",
    "aes-xcbc-mac-96",
    "aes-128-gmac",
    "hmac-md5-96",
];

/// The README's comparison: AES-128/192/256 in CBC+HMAC-SHA256, CTR+HMAC-SHA256, CCM and
/// GCM, then ChaCha20-Poly1305 and NULL.
fn table_suites() -> Vec<String> {
    let mut v = Vec::new();
    for bits in [128, 192, 256] {
        v.push(format!("aes-{bits}-cbc+hmac-sha256-128"));
        v.push(format!("aes-{bits}-ctr+hmac-sha256-128"));
        v.push(format!("aes-{bits}-ccm"));
        v.push(format!("aes-{bits}-gcm"));
    }
    v.push("chacha20-poly1305".into());
    v.push("null".into());
    v
}

/// The default configuration pair with `suite` keys; anti-replay off inbound (as
/// ipsec-secgw runs by default), since the memory port replays the same packets.
fn configs(proto: SaProto, suite: Suite) -> Result<(Config, Config), String> {
    let mut out = Vec::new();
    for (text, name) in [
        (espgw_config::DEFAULT_CONFIG, "default"),
        (espgw_config::DEFAULT_PEER_CONFIG, "peer"),
    ] {
        let mut c =
            espgw_config::parse(text, name, Some(Format::Native)).map_err(|e| e.to_string())?;
        // A benchmark may measure NULL and the legacy algorithms.
        c.policy.allow_null = true;
        c.policy.allow_legacy = true;
        for sa in &mut c.sas {
            sa.proto = proto;
            sa.suite = suite;
            // Both gateways derive the same keys per SPI.
            let mut k = key_of(suite.enc.key_material_len());
            if let Some(b) = k.first_mut() {
                *b ^= sa.spi as u8;
            }
            sa.enc_key = zeroize::Zeroizing::new(k);
            sa.auth_key = zeroize::Zeroizing::new(key_of(suite.integ.key_len()));
            sa.replay_window = 0;
        }
        out.push(c);
    }
    let peer = out.pop().ok_or("config")?;
    Ok((out.pop().ok_or("config")?, peer))
}

/// The first sequence number sent with `--esn`: 2^32 + 1, the high half 1.
const ESN_FIRST: u64 = (1 << 32) + 1;

/// Gives every SA of a configuration extended sequence numbers, outbound counting from
/// [`ESN_FIRST`] and inbound's window starting just below it, as a peer that has run
/// past 2^32 packets would.
fn with_esn(c: &mut Config) {
    for sa in &mut c.sas {
        sa.esn = true;
        sa.initial_seq = ESN_FIRST - 1;
    }
}

/// A family as `--inner` / `--outer` name it.
fn family_name(f: Family) -> &'static str {
    match f {
        Family::Ipv4 => "ipv4",
        Family::Ipv6 => "ipv6",
    }
}

/// Moves a default configuration's tunnels to IPv6 outer headers: endpoint 192.0.2.N
/// becomes 2001:db8:2::N (the address the default gives the same port), and the network
/// gets a route out of the port that reaches 192.0.2.0/24.
fn with_ipv6_outer(c: &mut Config) -> Result<(), String> {
    let v6 = |a: IpAddr| match a {
        IpAddr::V4(v4) if v4.octets()[..3] == [192, 0, 2] => Ok(IpAddr::V6(Ipv6Addr::new(
            0x2001,
            0xdb8,
            2,
            0,
            0,
            0,
            0,
            u16::from(v4.octets()[3]),
        ))),
        other => Err(format!("tunnel endpoint {other} is not in 192.0.2.0/24")),
    };
    for sa in &mut c.sas {
        if let Mode::Tunnel { local, remote } = sa.mode {
            sa.mode = Mode::Tunnel {
                local: v6(local)?,
                remote: v6(remote)?,
            };
        }
    }
    let transport = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 0));
    let north = c
        .routes
        .iter()
        .find(|r| r.dst.addr == transport)
        .cloned()
        .ok_or("the configuration has no route to 192.0.2.0/24")?;
    c.routes.push(RouteConfig {
        dst: Prefix {
            addr: IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 2, 0, 0, 0, 0, 0)),
            len: 64,
        },
        ..north
    });
    Ok(())
}

/// Plaintext frames from gateway 1's south side (`reverse`: from gateway 2's), of the
/// `inner` family (the default configuration's policies protect both), over `flows`.
fn templates(
    size: &str,
    reverse: bool,
    inner: Family,
    flows: Flows,
) -> Result<Vec<Vec<u8>>, String> {
    let sizes = if size == "imix" {
        gen::imix_sizes()
    } else {
        vec![size
            .parse::<usize>()
            .map_err(|_| format!("bad size '{size}'"))?]
    };
    // The generator grows a frame too small for its headers; a row must not claim a size
    // it did not send.
    let least = gen::min_frame(&flow_spec(inner, reverse, None));
    if let Some(small) = sizes.iter().find(|&&s| s < least) {
        return Err(format!(
            "frame size {small} is below the {least} bytes an {} frame of this benchmark needs",
            family_name(inner)
        ));
    }
    // At least 64 frames, so that the memory port cycles through distinct buffers.
    let (n, flow_of): (usize, Box<dyn Fn(usize) -> Option<usize>>) = match flows {
        Flows::Each => (
            if size == "imix" {
                sizes.len()
            } else {
                PCAP_FRAMES
            },
            Box::new(Some),
        ),
        Flows::Count(1) => (sizes.len().max(64), Box::new(|_| None)),
        Flows::Count(k) => (sizes.len().max(64).max(k), Box::new(move |i| Some(i % k))),
    };
    Ok((0..n)
        .map(|i| {
            let spec = flow_spec(inner, reverse, flow_of(i));
            gen::frame(&spec, sizes[i % sizes.len()], i as u64 + 1)
        })
        .collect())
}

/// The flow a frame belongs to: `None`, the single flow 198.51.100.10:40000 ->
/// 203.0.113.20:9; flow `f`, the pattern of `gen_pcap.py` (host 10 + f mod 200 of the
/// sender's network to host 10 + 7f mod 200 of the receiver's, ports 1024 + f mod 1000 to
/// 5000 + f mod 16; hosts from .10 on: .1 is a gateway's own address).
fn flow_spec(inner: Family, reverse: bool, flow: Option<usize>) -> FlowSpec {
    let (a_net, b_net) = match inner {
        Family::Ipv4 => ("198.51.100.", "203.0.113."),
        Family::Ipv6 => ("2001:db8:100::", "2001:db8:113::"),
    };
    let (src_net, dst_net) = if reverse {
        (b_net, a_net)
    } else {
        (a_net, b_net)
    };
    let parse = |text: String| -> IpAddr { text.parse().expect("a benchmark address") };
    let (src, dst, sport, dport) = match flow {
        // The single flow, its ends as they always were (host "10" and "20" in either
        // family) whichever way it goes.
        None => {
            let (s, d) = if reverse { ("20", "10") } else { ("10", "20") };
            (
                parse(format!("{src_net}{s}")),
                parse(format!("{dst_net}{d}")),
                40000,
                9,
            )
        }
        Some(f) => {
            let (s, d) = (10 + f % 200, 10 + (7 * f) % 200);
            let host = |h: usize| match inner {
                Family::Ipv4 => h.to_string(),
                Family::Ipv6 => format!("{h:x}"),
            };
            (
                parse(format!("{src_net}{}", host(s))),
                parse(format!("{dst_net}{}", host(d))),
                1024 + (f % 1000) as u16,
                5000 + (f % 16) as u16,
            )
        }
    };
    FlowSpec {
        src,
        dst,
        l4: L4::Udp,
        sport,
        dport,
        src_mac: [0x02, 0, 0, 0, 0, 0x01],
        dst_mac: [0x02, 0, 0, 0, 0x01, 0x01],
    }
}

#[derive(Clone, Copy)]
struct Trial {
    pps: f64,
    gbps: f64,
    dropped: u64,
}

/// Runs bursts from a memory port through `node` for `secs`: received on the first port of
/// `dir`'s side, everything the node transmits sent back to the memory port.
fn trial(
    node: &mut Node,
    dir: Direction,
    frames: Vec<Vec<u8>>,
    wire_bytes: &[usize],
    secs: f64,
) -> Result<Trial, String> {
    let burst = node.tables().burst;
    let port = espgw::offline::arrival_port(node.tables(), dir).map_err(|e| e.to_string())?;
    let mut memory = MemoryPort::new(frames);
    let mut pkts = Vec::with_capacity(burst);
    let mut tx = Transmit::new(node.tables().ports.len(), burst);
    let mut run = |iters: u64, node: &mut Node| {
        let mut fwd = 0u64;
        for _ in 0..iters {
            let _ = memory.rx_burst(node.pool(), &mut pkts, burst);
            // The clock is read once per burst, as the live worker does.
            node.receive(port, &mut pkts, Instant::now(), &mut tx);
            for q in 0..tx.ports() {
                let queue = tx.queue(q);
                fwd += queue.len() as u64;
                let _ = memory.tx_burst(queue, node.pool());
            }
        }
        fwd
    };
    run(200, node);
    let drops_before = node.counters().total_drops();
    let start = Instant::now();
    let mut fwd = 0;
    let mut bursts = 0u64;
    while start.elapsed() < Duration::from_secs_f64(secs) {
        fwd += run(64, node);
        bursts += 64;
    }
    let el = start.elapsed().as_secs_f64();
    let pkts_total = bursts * burst as u64;
    let avg_wire = wire_bytes.iter().sum::<usize>() as f64 / wire_bytes.len() as f64;
    Ok(Trial {
        pps: fwd as f64 / el,
        gbps: pkts_total as f64 * avg_wire * 8.0 / el / 1e9,
        dropped: node.counters().total_drops() - drops_before,
    })
}

/// The crypto-only references a one-core row is set against (`None`: not measured).
struct RawRefs<'a> {
    /// The suite's own transform ([`raw::raw_suite`]).
    suite: Option<SuiteRef<'a>>,
    /// AES-GCM through the job API ([`raw::raw_seal`]) on these text lengths.
    job: Option<(
        &'a dyn espgw_crypto::CryptoProvider,
        AeadAlgorithm,
        &'a [usize],
    )>,
}

/// A row's suite as its raw reference runs it: through `provider`, with ESN or not, on
/// inner packets of `inner_lens` bytes.
struct SuiteRef<'a> {
    provider: &'a dyn espgw_crypto::CryptoProvider,
    proto: SaProto,
    suite: Suite,
    esn: bool,
    inner_lens: &'a [usize],
}

impl RawRefs<'_> {
    /// One measurement of each reference (NaN where there is none).
    fn measure(&self, secs: f64) -> Result<(f64, f64), String> {
        let suite = match &self.suite {
            Some(r) => raw::raw_suite(r.provider, r.proto, r.suite, r.esn, r.inner_lens, 64, secs)?,
            None => f64::NAN,
        };
        let job = match self.job {
            Some((p, alg, lens)) => raw::raw_seal(p, alg, lens, 64, secs)?,
            None => f64::NAN,
        };
        Ok((suite, job))
    }
}

/// A row's rounds: per round, the raw references and a trial per direction.
struct RowMeasured {
    raw: Vec<f64>,
    raw_job: Vec<f64>,
    /// Per direction (in `measured`'s order), a trial per round.
    trials: Vec<Vec<Trial>>,
}

/// Runs `rounds` rounds of a row: the raw references and each direction's trial, the raw
/// references first in odd rounds and last in even ones (the directions reversed too), so
/// that a machine drifting during the row slows neither side more than the other, and each
/// round's ratio compares measurements taken a moment apart.
fn measure_row(
    refs: &RawRefs<'_>,
    measured: &mut [(Direction, Vec<Vec<u8>>, Node)],
    wire: &[usize],
    secs: f64,
    rounds: usize,
) -> Result<RowMeasured, String> {
    let mut row = RowMeasured {
        raw: Vec::with_capacity(rounds),
        raw_job: Vec::with_capacity(rounds),
        trials: measured
            .iter()
            .map(|_| Vec::with_capacity(rounds))
            .collect(),
    };
    for round in 1..=rounds {
        let raw_first = rounds::raw_first(round);
        let take_raw = |row: &mut RowMeasured| -> Result<(), String> {
            let (suite, job) = refs.measure(secs)?;
            row.raw.push(suite);
            row.raw_job.push(job);
            Ok(())
        };
        if raw_first {
            take_raw(&mut row)?;
        }
        let order: Vec<usize> = if raw_first {
            (0..measured.len()).collect()
        } else {
            (0..measured.len()).rev().collect()
        };
        for i in order {
            let (dir, frames, node) = &mut measured[i];
            row.trials[i].push(trial(node, *dir, frames.clone(), wire, secs)?);
        }
        if !raw_first {
            take_raw(&mut row)?;
        }
    }
    Ok(row)
}

/// What a row reports of its rounds: the medians, and the ratio to the raw suite as the
/// median of the rounds' own ratios (each round's trial over the same round's reference).
struct RowFigures {
    pps: f64,
    gbps: f64,
    raw: f64,
    raw_job: f64,
    ratio: rounds::Summary,
    ratio_job: f64,
    dropped: u64,
}

impl RowFigures {
    fn of(trials: &[Trial], raw: &[f64], raw_job: &[f64]) -> RowFigures {
        let median = |v: &[f64]| rounds::summary_of(v).map_or(f64::NAN, |s| s.median);
        let nan = rounds::Summary {
            median: f64::NAN,
            low: f64::NAN,
            high: f64::NAN,
        };
        let pps: Vec<f64> = trials.iter().map(|t| t.pps).collect();
        RowFigures {
            pps: median(&pps),
            gbps: median(&trials.iter().map(|t| t.gbps).collect::<Vec<_>>()),
            raw: median(raw),
            raw_job: median(raw_job),
            ratio: rounds::summary_of(&rounds::paired_ratios(&pps, raw)).unwrap_or(nan),
            ratio_job: median(&rounds::paired_ratios(&pps, raw_job)),
            dropped: trials.iter().map(|t| t.dropped).sum(),
        }
    }
}

#[allow(clippy::too_many_arguments)] // the command's options, passed through
fn dataplane(
    crypto: ProviderChoice,
    secs: f64,
    sizes: &[String],
    algs: &[String],
    dirs: &[String],
    with_raw: bool,
    rounds: usize,
    traffic: Traffic,
    json_out: Option<&std::path::Path>,
) -> Result<(), String> {
    let Traffic {
        inner,
        outer,
        flows,
        esn,
    } = traffic;
    let provider = espgw_crypto::provider(crypto).map_err(|e| e.to_string())?;
    // Raw references on the same packet sizes: each suite's own transform through
    // intel-ipsec-mb (the pipeline's provider where that is not built), and AES-GCM
    // through intel-ipsec-mb's job API (the figure the published comparison quotes).
    let raw_mb = espgw_crypto::provider(ProviderChoice::IpsecMb).unwrap_or(provider.clone());
    let raw_job = espgw_crypto::provider(ProviderChoice::IpsecMbJob).ok();
    println!(
        "protected traffic: UDP over {}; tunnel outer header {}",
        traffic_description(inner, flows),
        match outer {
            Family::Ipv4 => "IPv4 (192.0.2.1 <-> 192.0.2.2)",
            Family::Ipv6 => "IPv6 (2001:db8:2::1 <-> 2001:db8:2::2)",
        }
    );
    if esn {
        println!("sequence numbers: 64-bit (ESN), from 2^32 + 1");
    }
    print_dataplane_header(secs, &provider.name(), &raw_mb.name());
    let mut records = Vec::new();
    let own_cpus = host_load::own_cpus();
    let mut neighbours = Vec::new();
    let names = bench_names(algs);
    for alg_name in &names {
        let (proto, suite) = parse_alg(alg_name)?;
        // The raw reference: the suite's AES-GCM, or AES-128-GCM for every other one.
        let alg = match suite.enc {
            espgw_crypto::Encryption::AesGcm { key_len, .. } => {
                AeadAlgorithm::from_key_len(key_len).unwrap_or(AeadAlgorithm::AesGcm128)
            }
            _ => AeadAlgorithm::AesGcm128,
        };
        let (mut gw1, mut gw2) = configs(proto, suite)?;
        if outer == Family::Ipv6 {
            with_ipv6_outer(&mut gw1)?;
            with_ipv6_outer(&mut gw2)?;
        }
        if esn {
            with_esn(&mut gw1);
            with_esn(&mut gw2);
        }
        let t1 = Arc::new(Tables::build(&gw1, provider.as_ref(), None).map_err(|e| e.to_string())?);
        let t2 = Arc::new(Tables::build(&gw2, provider.as_ref(), None).map_err(|e| e.to_string())?);
        for size in sizes {
            // Each row's neighbour load runs from here (before the raw references) to the
            // end of its own trial, so the inbound row's also spans the outbound trial.
            let load_before = host_load::CpuTimes::now();
            let plain = templates(size, false, inner, flows)?;
            let plain_rev = templates(size, true, inner, flows)?;
            let wire: Vec<usize> = plain.iter().map(|f| f.len() + FCS_LEN).collect();
            // The ESP frames gateway 2 sends: gateway 1's inbound input.
            let esp = esp_frames(&t2, &plain_rev)?;
            let inner_lens: Vec<usize> = plain.iter().map(|f| f.len() - 14).collect();
            // Text (inner packet + trailer) lengths: what the AEAD processes per packet.
            let text_lens: Vec<usize> = inner_lens
                .iter()
                .map(|&inner| inner + espgw_wire::esp::pad_len(inner, 4) + 2)
                .collect();
            let mut measured: Vec<(Direction, Vec<Vec<u8>>, Node)> =
                [(Direction::Out, plain.clone()), (Direction::In, esp)]
                    .into_iter()
                    .filter(|(dir, _)| dirs.iter().any(|d| d == direction_name(*dir)))
                    .map(|(dir, frames)| {
                        (
                            dir,
                            frames,
                            Node::new(t1.clone(), Arc::default(), Vec::new()),
                        )
                    })
                    .collect();
            let refs = RawRefs {
                suite: with_raw.then(|| SuiteRef {
                    provider: raw_mb.as_ref(),
                    proto,
                    suite,
                    esn,
                    inner_lens: inner_lens.as_slice(),
                }),
                job: raw_job
                    .as_deref()
                    .filter(|_| with_raw)
                    .map(|p| (p, alg, text_lens.as_slice())),
            };
            let row = measure_row(&refs, &mut measured, &wire, secs, rounds)?;
            for ((dir, _, _), trials) in measured.iter().zip(&row.trials) {
                let dname = direction_name(*dir);
                let busiest = own_cpus.as_deref().and_then(|own| {
                    host_load::busiest_other(&load_before, &host_load::CpuTimes::now(), own)
                });
                neighbours.push(busiest);
                let r = RowFigures::of(trials, &row.raw, &row.raw_job);
                println!(
                    "{:<30} {:>6} {:<9} {:>8.2} {:>8.2} {:>9.2} {:>7.2} {:>7.0}% {:>8.2} {:>7.2}{}{}",
                    alg_name,
                    size,
                    dname,
                    r.pps / 1e6,
                    r.gbps,
                    r.raw / 1e6,
                    r.ratio.median,
                    (1.0 - r.ratio.median) * 100.0,
                    r.raw_job / 1e6,
                    r.ratio_job,
                    if rounds > 1 && !r.ratio.median.is_nan() {
                        format!("  (ratio {:.2}-{:.2} in {rounds} rounds)", r.ratio.low, r.ratio.high)
                    } else {
                        String::new()
                    },
                    if r.dropped > 0 {
                        format!("  ({} dropped!)", r.dropped)
                    } else {
                        String::new()
                    }
                );
                let null_if_nan = |x: f64| {
                    if x.is_nan() {
                        serde_json::Value::Null
                    } else {
                        json!(x)
                    }
                };
                records.push(json!({
                    "algorithm": alg_name, "raw_reference": alg.name(), "frame_size": size, "direction": dname,
                    "mpps": r.pps / 1e6, "gbps": r.gbps,
                    "raw_suite_mops": r.raw / 1e6, "raw_suite_crypto": raw_mb.name(), "pipeline_share": 1.0 - r.ratio.median,
                    "raw_job_api_mops": null_if_nan(r.raw_job / 1e6),
                    "ratio_to_raw_suite": r.ratio.median, "ratio_to_raw_job_api": null_if_nan(r.ratio_job),
                    "rounds": rounds,
                    "round_mpps": trials.iter().map(|t| t.pps / 1e6).collect::<Vec<_>>(),
                    "round_raw_suite_mops": row.raw.iter().map(|x| x / 1e6).collect::<Vec<_>>(),
                    "ratio_to_raw_suite_low": r.ratio.low, "ratio_to_raw_suite_high": r.ratio.high,
                    "dropped": r.dropped, "crypto": provider.name(), "seconds": secs,
                    "inner": family_name(inner), "outer": family_name(outer), "flows": flows.name(), "esn": esn,
                    "busiest_other_cpu": busiest.map(|(cpu, _)| cpu), "busiest_other_cpu_busy": busiest.map(|(_, s)| s),
                }));
            }
        }
    }
    for line in host_load::summary(&neighbours) {
        println!("{line}");
    }
    if let Some(p) = json_out {
        let v = json!({ "benchmark": "dataplane", "cpu": cpu_model(), "own_cpus": own_cpus, "results": records });
        std::fs::write(p, serde_json::to_string_pretty(&v).unwrap_or_default())
            .map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(())
}

/// The header line's account of the protected traffic.
fn traffic_description(inner: Family, flows: Flows) -> String {
    let (fam, one, many) = match inner {
        Family::Ipv4 => (
            "IPv4",
            "198.51.100.10 <-> 203.0.113.20",
            "198.51.100.10-209 <-> 203.0.113.10-209",
        ),
        Family::Ipv6 => (
            "IPv6",
            "2001:db8:100::10 <-> 2001:db8:113::20",
            "2001:db8:100::a-d1 <-> 2001:db8:113::a-d1",
        ),
    };
    let ports = "ports 1024-2023 -> 5000-5015";
    match flows {
        Flows::Count(1) => format!("{fam} ({one}, one flow)"),
        Flows::Count(k) => format!("{fam} ({k} flows in turn: {many}, {ports})"),
        Flows::Each => format!(
            "{fam} (every frame of the cycle a flow of its own, as in compare.sh's ipsec-secgw pcaps: {many}, {ports})"
        ),
    }
}

fn print_dataplane_header(secs: f64, provider_name: &str, raw_name: &str) {
    println!(
        "espgw-lab bench dataplane: one core, memory ports (fresh copy per frame), bursts of 64, {:.1} s per trial",
        secs
    );
    println!("pipeline crypto: {provider_name}");
    println!(
        "raw suite = the suite's transform alone ({raw_name}; ESP seal, or AH's ICV), Mops on the same packets, bursts of 64"
    );
    println!(
        "  ratio = pipeline / raw suite; pipe share = the pipeline's share of the time (1 - ratio)"
    );
    println!(
        "gcm job = AES-GCM seal through intel-ipsec-mb's job API on the same text sizes (the SA's own AES-GCM, else AES-128-GCM)"
    );
    println!(
        "{:<30} {:>6} {:<9} {:>8} {:>8} {:>9} {:>7} {:>8} {:>8} {:>7}",
        "algorithm",
        "frame",
        "direction",
        "Mpps",
        "Gbit/s",
        "raw suite",
        "ratio",
        "pipe %",
        "gcm job",
        "ratio"
    );
}

/// A direction as `--directions` names it.
fn direction_name(dir: Direction) -> &'static str {
    match dir {
        Direction::Out => "outbound",
        Direction::In => "inbound",
    }
}

/// The algorithm names `--algs` stands for ("table", "all", or a list).
fn bench_names(algs: &[String]) -> Vec<String> {
    match algs {
        [one] if one == "table" => table_suites(),
        [one] if one == "all" => espgw_crypto::suite::all_esp_suites()
            .iter()
            .map(|s| {
                if s.is_null_null() {
                    "null".into()
                } else {
                    s.name()
                }
            })
            .chain(AH_BENCH.iter().map(|i| format!("ah/{i}")))
            .collect(),
        _ => algs.to_vec(),
    }
}

/// The ESP frames gateway 2 (`t2`) makes of `plain_rev`: gateway 1's inbound input.
fn esp_frames(t2: &Arc<Tables>, plain_rev: &[Vec<u8>]) -> Result<Vec<Vec<u8>>, String> {
    esp_frames_of_worker(t2, plain_rev, 0)
}

/// [`esp_frames`] sealed as gateway 2's worker `worker` would (the SA a per-worker set
/// gives that worker).
fn esp_frames_of_worker(
    t2: &Arc<Tables>,
    plain_rev: &[Vec<u8>],
    worker: usize,
) -> Result<Vec<Vec<u8>>, String> {
    let mut enc = Pipeline::new(t2.clone());
    enc.set_worker(worker);
    let mut pool = PacketPool::new(plain_rev.len());
    let mut pk: Vec<_> = plain_rev
        .iter()
        .map(|f| {
            let mut p = pool.get();
            let _ = p.load(f);
            p
        })
        .collect();
    enc.process(Direction::Out, &mut pk);
    let esp: Vec<Vec<u8>> = pk
        .iter()
        .filter(|p| matches!(p.verdict, Verdict::Forward(_)))
        .map(|p| p.data().to_vec())
        .collect();
    if esp.len() != plain_rev.len() {
        return Err("could not build inbound test frames".into());
    }
    Ok(esp)
}

fn cpu_model() -> String {
    std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_string())
        })
        .unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One burst of `frames` through gateway 1 in `dir`; every frame sent, returned.
    fn one_burst(t: &Arc<Tables>, dir: Direction, frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
        let port = espgw::offline::arrival_port(t, dir).unwrap();
        let mut node = Node::new(t.clone(), Arc::default(), Vec::new());
        let mut pkts: Vec<_> = frames
            .iter()
            .map(|f| {
                let mut p = node.pool().get();
                p.load(f).unwrap();
                p
            })
            .collect();
        let mut tx = Transmit::new(t.ports.len(), pkts.len());
        node.receive(port, &mut pkts, Instant::now(), &mut tx);
        let mut out = Vec::new();
        for q in 0..tx.ports() {
            out.extend(tx.queue(q).drain(..).map(|p| p.data().to_vec()));
        }
        out
    }

    /// Every family pair the benchmark offers carries its frames both ways, in the families
    /// asked for, with one flow and with every frame its own: outbound, ESP (next header
    /// 50) behind the outer family's ethertype; inbound, the inner family's UDP back out,
    /// the payload as sent.
    #[test]
    fn every_family_pair_carries_its_frames_both_ways() {
        let suite = parse_alg("aes-128-gcm").unwrap().1;
        for (inner, flows) in [
            (Family::Ipv4, Flows::Count(1)),
            (Family::Ipv6, Flows::Count(1)),
            (Family::Ipv4, Flows::Each),
            (Family::Ipv6, Flows::Each),
        ] {
            for outer in [Family::Ipv4, Family::Ipv6] {
                let (mut gw1, mut gw2) = configs(SaProto::Esp, suite).unwrap();
                if outer == Family::Ipv6 {
                    with_ipv6_outer(&mut gw1).unwrap();
                    with_ipv6_outer(&mut gw2).unwrap();
                }
                let provider = espgw_crypto::default_provider();
                let t1 = Arc::new(Tables::build(&gw1, provider.as_ref(), None).unwrap());
                let t2 = Arc::new(Tables::build(&gw2, provider.as_ref(), None).unwrap());
                let plain = templates("78", false, inner, flows).unwrap();
                let plain_rev = templates("78", true, inner, flows).unwrap();
                let esp = esp_frames(&t2, &plain_rev).unwrap();
                let (outer_type, inner_type) = (
                    if outer == Family::Ipv6 {
                        [0x86, 0xdd]
                    } else {
                        [8, 0]
                    },
                    if inner == Family::Ipv6 {
                        [0x86, 0xdd]
                    } else {
                        [8, 0]
                    },
                );
                let sealed = one_burst(&t1, Direction::Out, &plain);
                assert_eq!(sealed.len(), plain.len(), "{inner:?} in {outer:?}");
                for f in &sealed {
                    assert_eq!(f[12..14], outer_type, "{inner:?} in {outer:?}");
                    let next_header = if outer == Family::Ipv6 { f[20] } else { f[23] };
                    assert_eq!(next_header, 50, "{inner:?} in {outer:?}");
                }
                let opened = one_burst(&t1, Direction::In, &esp);
                assert_eq!(opened.len(), esp.len(), "{inner:?} in {outer:?}");
                for (f, sent) in opened.iter().zip(&plain_rev) {
                    assert_eq!(f[12..14], inner_type, "{inner:?} in {outer:?}");
                    // The IP packet as gateway 2 received it, but for the TTL / hop limit
                    // (and IPv4's checksum) gateway 1 decremented on the way.
                    let ip = if inner == Family::Ipv6 { 54 } else { 34 };
                    assert_eq!(f[ip..], sent[ip..], "{inner:?} in {outer:?}");
                }
            }
        }
    }

    /// `--esn`: both gateways number with ESN from 2^32 + 1, so a frame sealed by one
    /// carries low half 1.. on the wire and opens at the other, and a gateway without ESN
    /// (whose ICV does not cover the high half, 1 here) refuses every one of them; for
    /// AES-GCM (the high half in the AAD) and AES-GMAC and HMAC (in what the ICV covers).
    #[test]
    fn esn_frames_carry_a_high_half_that_the_icv_covers() {
        for alg in ["aes-128-gcm", "aes-256-gmac", "aes-128-cbc+hmac-sha256-128"] {
            let suite = parse_alg(alg).unwrap().1;
            let (mut gw1, mut gw2) = configs(SaProto::Esp, suite).unwrap();
            let (plain_gw1, _) = configs(SaProto::Esp, suite).unwrap();
            with_esn(&mut gw1);
            with_esn(&mut gw2);
            let provider = espgw_crypto::default_provider();
            let build = |c: &Config| Arc::new(Tables::build(c, provider.as_ref(), None).unwrap());
            let (t1, t2, t1_plain) = (build(&gw1), build(&gw2), build(&plain_gw1));
            let plain = templates("64", false, Family::Ipv4, Flows::Each).unwrap();
            let plain_rev = templates("64", true, Family::Ipv4, Flows::Each).unwrap();
            let sealed = one_burst(&t1, Direction::Out, &plain);
            assert_eq!(sealed.len(), plain.len(), "{alg}");
            for (i, f) in sealed.iter().enumerate() {
                // Ethernet 14 + IPv4 20 + SPI 4: the low half of the sequence number.
                assert_eq!(f[38..42], (i as u32 + 1).to_be_bytes(), "{alg} frame {i}");
            }
            let esp = esp_frames(&t2, &plain_rev).unwrap();
            assert_eq!(
                one_burst(&t1, Direction::In, &esp).len(),
                esp.len(),
                "{alg}"
            );
            assert!(
                one_burst(&t1_plain, Direction::In, &esp).is_empty(),
                "{alg}"
            );
        }
    }

    /// `--flows each`: the cycle is the pcap's length (256 frames, 300 for IMIX), no two
    /// frames of it share a 5-tuple, each frame's ends and ports follow `gen_pcap.py`'s
    /// pattern (hosts from .10), and every flow lies inside the policies' networks; the
    /// sizes run in the IMIX order. `--flows 3`: three flows in turn over 64 frames;
    /// `--flows 1`: one, the classic flow.
    #[test]
    fn each_frame_of_the_pcap_cycle_is_a_flow_of_its_own() {
        let key = |f: &Vec<u8>| espgw_core::flow::parse_ip(&f[14..]).unwrap().key;
        for (size, n) in [("64", PCAP_FRAMES), ("imix", 300)] {
            let frames = templates(size, false, Family::Ipv4, Flows::Each).unwrap();
            assert_eq!(frames.len(), n, "{size}");
            let keys: Vec<FlowKey> = frames.iter().map(key).collect();
            for (i, k) in keys.iter().enumerate() {
                assert_eq!(
                    k.src,
                    u128::from(0xc633_6400u32 + 10 + (i % 200) as u32),
                    "{i}"
                );
                assert_eq!(
                    k.dst,
                    u128::from(0xcb00_7100u32 + 10 + (7 * i % 200) as u32),
                    "{i}"
                );
                assert_eq!(k.sport, 1024 + (i % 1000) as u16, "{i}");
                assert_eq!(k.dport, 5000 + (i % 16) as u16, "{i}");
                assert!(keys[..i].iter().all(|o| o != k), "frame {i} repeats a flow");
            }
            if size == "imix" {
                let sizes: Vec<usize> = frames.iter().map(|f| f.len() + FCS_LEN).collect();
                assert_eq!(sizes, gen::imix_sizes());
            }
        }
        let three: Vec<FlowKey> = templates("78", true, Family::Ipv6, Flows::Count(3))
            .unwrap()
            .iter()
            .map(key)
            .collect();
        assert_eq!(three.len(), 64);
        assert!(three.iter().enumerate().all(|(i, k)| *k == three[i % 3]));
        assert!(three[0] != three[1] && three[1] != three[2] && three[0] != three[2]);
        let one = templates("64", false, Family::Ipv4, Flows::Count(1)).unwrap();
        assert!(one.iter().all(|f| key(f) == key(&one[0])));
        assert_eq!(key(&one[0]).src, u128::from(0xc633_640au32));
        assert_eq!((key(&one[0]).sport, key(&one[0]).dport), (40000, 9));
    }

    /// `--flows` takes "each" or a count; 0 and words are refused.
    #[test]
    fn flows_are_each_or_a_count() {
        assert_eq!(Flows::parse(None), Ok(Flows::Each));
        assert_eq!(Flows::parse(Some("each")), Ok(Flows::Each));
        assert_eq!(Flows::parse(Some("7")), Ok(Flows::Count(7)));
        assert!(Flows::parse(Some("0")).is_err());
        assert!(Flows::parse(Some("many")).is_err());
    }

    /// A frame size below what a family's headers need is refused, not silently grown.
    #[test]
    fn a_size_too_small_for_the_family_is_refused() {
        for flows in [Flows::Each, Flows::Count(1)] {
            assert!(templates("64", false, Family::Ipv4, flows).is_ok());
            let e = templates("64", false, Family::Ipv6, flows).unwrap_err();
            assert!(e.contains("74 bytes an ipv6 frame"), "{e}");
            assert!(templates("74", false, Family::Ipv6, flows).is_ok());
        }
    }
}
