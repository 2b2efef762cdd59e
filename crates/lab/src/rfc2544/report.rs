//! Results: one JSON record per trial and a summary per DUT and frame size
//! (`results.json`, schema in docs/rfc2544.schema.json), a Markdown table
//! (`results.md`), plots (`*.svg`, `*.png`) and one HTML page (`index.html`). Written
//! after every block of trials, so an interrupted run leaves what it measured.

use std::io::{IsTerminal, Write};
use std::path::Path;

use hdrhistogram::Histogram;
use serde::Serialize;

use super::dut::DutKind;
use super::search::Lossy;
use super::{Outcome, Profile, Results, Rfc2544Args, Size};

pub const SCHEMA: &str = "espgw-rfc2544/1";

#[derive(Debug, Clone, Serialize)]
pub struct Meta {
    pub tool: String,
    pub version: String,
    pub started_unix: u64,
    pub started: String,
    pub machine: String,
    pub kernel: String,
    pub cpu: String,
    pub cpus: usize,
    pub duts: Vec<String>,
    pub sizes: Vec<String>,
    pub proto: super::frame::L4,
    pub ip_version: u8,
    pub bidirectional: bool,
    pub trial_seconds: f64,
    pub drain_seconds: f64,
    pub loss_tolerance_pct: f64,
    pub search_resolution: f64,
    pub latency_trials: usize,
    pub back_to_back_trials: usize,
    pub quick: bool,
    /// Flows per stream and the tester's threads per port.
    pub flows: u8,
    pub tester_threads: u8,
    /// Frames of each of the tester's socket rings.
    pub tester_ring_frames: u32,
    /// The espgw DUT's workers and how it spreads them.
    pub workers: usize,
    pub fanout: String,
    /// Whether the espgw DUT's policies named a per-worker SA set (`--per-worker-sas`).
    pub per_worker_sas: bool,
    /// The espgw DUT's replay window when `--replay-window` set it (else as configured).
    pub replay_window: Option<u32>,
    /// MTU of the test bed's transport network between the gateways; `None` when no DUT
    /// of the run is on the test bed (the ceiling, the stand-in, an external DUT).
    pub wan_mtu: Option<u16>,
    /// Where the busy threads ran (`--pin-cores`), e.g. "gateway 1 workers on 1-4,
    /// gateway 2 on 5-8, tester on 9-16".
    pub cores: String,
}

/// One espgw gateway's own account of one frame size's trials (`espgw show stats`).
#[derive(Debug, Clone, Serialize)]
pub struct GatewayStats {
    pub size: String,
    pub gateway: String,
    /// Packets each worker read, over all the trials of the size.
    pub per_worker_rx: Vec<u64>,
    /// The ordered spread's crew (join, engaged, joined, stepped_back,
    /// not_joined_short_of_cpu); null with a spread that has none.
    pub ordered_spread: serde_json::Value,
    /// Packets dropped, by reason (only reasons with drops).
    pub drops: serde_json::Map<String, serde_json::Value>,
}

impl GatewayStats {
    pub fn from_show_stats(size: &str, gateway: &str, v: &serde_json::Value) -> GatewayStats {
        let per_worker_rx = v["per_worker_rx"]
            .as_array()
            .map(|a| a.iter().filter_map(serde_json::Value::as_u64).collect())
            .unwrap_or_default();
        let drops = v["drops"]
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(_, n)| n.as_u64().is_some_and(|n| n > 0))
                    .map(|(k, n)| (k.clone(), n.clone()))
                    .collect()
            })
            .unwrap_or_default();
        GatewayStats {
            size: size.to_string(),
            gateway: gateway.to_string(),
            per_worker_rx,
            ordered_spread: v["ordered_spread"].clone(),
            drops,
        }
    }

    /// One line, e.g. "espgw 64 gw1: per-worker rx [812345, 790000]; ordered spread:
    /// engaged 2, joined 1, stepped back 0, not joined short of CPU 3, waited pipeline 12 ms,
    /// transmit 40 ms; drops none".
    pub fn describe(&self) -> String {
        let null = &serde_json::Value::Null;
        let spread = match self.ordered_spread.as_object() {
            Some(o) => format!(
                "ordered spread: engaged {}, joined {}, stepped back {}, not joined short of CPU {}, waited pipeline {} ms, transmit {} ms",
                o.get("engaged").unwrap_or(null),
                o.get("joined").unwrap_or(null),
                o.get("stepped_back").unwrap_or(null),
                o.get("not_joined_short_of_cpu").unwrap_or(null),
                o.get("waited_ms").and_then(|w| w.get("pipeline")).unwrap_or(null),
                o.get("waited_ms").and_then(|w| w.get("transmit")).unwrap_or(null),
            ),
            None => "no ordered spread".to_string(),
        };
        let drops = if self.drops.is_empty() {
            "none".to_string()
        } else {
            self.drops
                .iter()
                .map(|(k, n)| format!("{k} {n}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let bound = match self.spread_bound() {
            Some(b) => format!(
                " (the busiest worker read {:.0} %: at most {b:.2}x one worker)",
                100.0 / b
            ),
            None => String::new(),
        };
        format!(
            "espgw {} {}: per-worker rx {:?}{bound}; {spread}; drops {drops}",
            self.size, self.gateway, self.per_worker_rx
        )
    }

    /// How far a spread by hash (or round robin) could carry this gateway, in one-worker
    /// loads: all packets over the busiest worker's, since that worker saturates first.
    /// Where the workers' shares come from the port's queues (AF_XDP), it is the queues
    /// that decide: on the test bed, gateway 2's queue is the one its peer transmitted on,
    /// passed through the WAN bridge, so one SA can land on one worker
    /// (docs/performance.md, "Sixteen cores, 2026-11-27"). `None` with one worker, no
    /// packets, or the ordered spread (its workers join only as the load needs them).
    pub fn spread_bound(&self) -> Option<f64> {
        let busiest = *self.per_worker_rx.iter().max()?;
        let total: u64 = self.per_worker_rx.iter().sum();
        if self.per_worker_rx.len() < 2 || busiest == 0 || !self.ordered_spread.is_null() {
            return None;
        }
        Some(total as f64 / busiest as f64)
    }
}

fn read_trim(p: &str) -> String {
    std::fs::read_to_string(p)
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
}

/// Days since 1970-01-01 to a civil date (proleptic Gregorian), for a UTC timestamp
/// without a date library.
fn civil(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let m = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    (yoe + era * 400 + i64::from(m <= 2), m, d)
}

pub fn utc(secs: u64) -> String {
    let (y, m, d) = civil((secs / 86_400) as i64);
    let s = secs % 86_400;
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        s / 3600,
        s / 60 % 60,
        s % 60
    )
}

impl Meta {
    pub fn collect(a: &Rfc2544Args, p: &Profile, duts: &[DutKind], sizes: &[Size]) -> Meta {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap_or(0);
        let cpuinfo = read_trim("/proc/cpuinfo");
        let cpu = cpuinfo
            .lines()
            .find(|l| l.starts_with("model name"))
            .and_then(|l| l.split(':').nth(1))
            .unwrap_or("unknown")
            .trim()
            .to_string();
        Meta {
            tool: "espgw-lab bench rfc2544".into(),
            version: env!("CARGO_PKG_VERSION").into(),
            started_unix: now,
            started: utc(now),
            machine: read_trim("/proc/sys/kernel/hostname"),
            kernel: read_trim("/proc/sys/kernel/osrelease"),
            cpu,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            duts: duts.iter().map(|d| d.name().to_string()).collect(),
            sizes: sizes.iter().map(Size::label).collect(),
            proto: a.proto,
            ip_version: if a.ipv6 { 6 } else { 4 },
            bidirectional: a.bidirectional,
            trial_seconds: p.trial.as_secs_f64(),
            drain_seconds: p.drain.as_secs_f64(),
            loss_tolerance_pct: a.loss_tolerance,
            search_resolution: p.resolution,
            latency_trials: p.latency_trials,
            back_to_back_trials: p.b2b_trials,
            quick: a.quick,
            flows: a.flows,
            tester_threads: a.threads,
            tester_ring_frames: a.tester_ring_frames,
            workers: a.workers,
            fanout: format!("{:?}", a.fanout).to_lowercase(),
            per_worker_sas: a.per_worker_sas,
            replay_window: a.replay_window,
            wan_mtu: duts
                .iter()
                .any(|d| matches!(d, DutKind::Espgw | DutKind::Kernel | DutKind::Strongswan))
                .then_some(a.wan_mtu),
            cores: super::cores::CoreLayout {
                gateways: a.gateway_cpus.clone(),
                tester: a.tester_cpus.0.clone(),
            }
            .describe(),
        }
    }
}

/// The cipher each DUT runs.
pub fn algorithm(dut: &str) -> &'static str {
    match dut {
        "espgw" => "aes-128-gcm-16 (ESP tunnel)",
        "strongswan" => "aes128gcm16 (ESP in UDP 4500, kernel-libipsec)",
        "external" => "as configured",
        _ => "none",
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct LatencySummary {
    pub count: u64,
    pub min_ns: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p999_ns: u64,
    pub max_ns: u64,
    /// Logarithmic buckets (each 1.25 times the last, from 1 µs): upper bound in ns
    /// and the frames in the bucket; empty buckets left out.
    pub histogram: Vec<(u64, u64)>,
}

impl LatencySummary {
    pub fn of(h: &Histogram<u64>) -> LatencySummary {
        let histogram = if h.is_empty() {
            Vec::new()
        } else {
            h.iter_log(1000, 1.25)
                .filter(|v| v.count_since_last_iteration() > 0)
                .map(|v| (v.value_iterated_to(), v.count_since_last_iteration()))
                .collect()
        };
        LatencySummary {
            count: h.len(),
            min_ns: h.min(),
            mean_ns: h.mean(),
            p50_ns: h.value_at_quantile(0.5),
            p90_ns: h.value_at_quantile(0.9),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
            histogram,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct TrialRecord {
    pub dut: String,
    pub algorithm: String,
    pub test: String,
    pub frame_size: String,
    pub proto: super::frame::L4,
    pub bidirectional: bool,
    pub requested_pps: f64,
    pub offered_pps: f64,
    pub offered_mbps: f64,
    pub received_pps: f64,
    pub sent: u64,
    pub received: u64,
    pub lost: u64,
    pub loss_pct: f64,
    pub duplicates: u64,
    pub reordered: u64,
    pub stale: u64,
    pub fragments: u64,
    /// Frames the tester's own port refused (its ring was full); not sent, not loss.
    pub refused: u64,
    /// Frames the kernel dropped in the trial at the tester's own receive rings (the
    /// tester did not keep up): counted in `lost`, but the tester's loss, not the DUT's.
    pub tester_overrun: u64,
    /// Frames the kernel dropped in the trial for a full input backlog, host-wide (a
    /// veth's frames wait there for the peer's side). A trial with either count measured
    /// the machine as well as the DUT.
    pub backlog_drops: u64,
    /// Frames the tester's interfaces dropped on receive in the trial (their `rx_dropped`;
    /// on a veth it includes `tester_overrun`'s frames, handed to a full socket).
    pub tester_interface_drops: u64,
    /// Frames the DUT lost in the trial besides those it drops on purpose, where it counts
    /// them (the stand-in: its receive rings full, its sends refused, its interfaces'
    /// drops); null for other DUTs.
    pub dut_drops: Option<u64>,
    /// What the espgw gateways dropped in the trial, e.g. {"gw2 replay": 25,
    /// "gw1 north rx_ring_full": 3} (only what grew); null for other DUTs.
    pub gateway_drops: Option<std::collections::BTreeMap<String, u64>>,
    /// Back-to-back: the burst length tried.
    pub burst: Option<u64>,
    pub latency: LatencySummary,
}

impl TrialRecord {
    pub fn new(
        dut: &str,
        test: &str,
        size: Size,
        a: &Rfc2544Args,
        o: &Outcome,
        burst: Option<u64>,
    ) -> TrialRecord {
        let dirs = o.directions.max(1) as f64;
        let mean_bits = if o.tx.sent > 0 {
            o.tx.bytes as f64 * 8.0 / o.tx.sent as f64
        } else {
            0.0
        };
        TrialRecord {
            dut: dut.into(),
            algorithm: algorithm(dut).into(),
            test: test.into(),
            frame_size: size.label(),
            proto: a.proto,
            bidirectional: a.bidirectional,
            requested_pps: o.requested_pps,
            offered_pps: o.offered_pps(),
            offered_mbps: o.offered_pps() * dirs * mean_bits / 1e6,
            received_pps: o.received_pps(),
            sent: o.tx.sent,
            received: o.rx.received,
            lost: o.lost(),
            loss_pct: 100.0 * o.loss_ratio(),
            duplicates: o.rx.duplicates,
            reordered: o.rx.reordered,
            stale: o.rx.stale,
            fragments: o.rx.fragments,
            refused: o.tx.refused,
            tester_overrun: o.kernel_drops.tester.overrun,
            backlog_drops: o.kernel_drops.backlog,
            tester_interface_drops: o.kernel_drops.tester.interface,
            dut_drops: o.kernel_drops.dut,
            gateway_drops: o.gateway_drops.clone(),
            burst,
            latency: LatencySummary::of(&o.rx.latency),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Summary {
    pub dut: String,
    pub algorithm: String,
    pub frame_size: String,
    /// The tester's packet I/O ("af_xdp", "af_packet").
    pub io: String,
    /// Zero-loss (or within tolerance) throughput, frames per second per direction.
    pub throughput_pps: f64,
    pub throughput_mbps: f64,
    /// Within 10% of the tester's own ceiling at this size: the tester, not the DUT,
    /// may be the limit.
    pub tester_bound: bool,
    pub search_trials: usize,
    /// The first (unpaced) trial's offered rate: the most the tester sent.
    pub top_pps: f64,
    /// The rate of the latency trials (the throughput rate unless --latency-rate).
    pub latency_rate_pps: f64,
    pub latency: Option<LatencySummary>,
    pub latency_trials: Vec<LatencySummary>,
    /// (offered load in % of `loss_reference_pps`, frame loss in %).
    pub loss_curve: Vec<(f64, f64)>,
    /// 100% of the loss curve: the ceiling's top rate at this size when measured in the
    /// same run (so every DUT sees the same loads), else this DUT's own.
    pub loss_reference_pps: f64,
    /// Longest burst forwarded without loss (mean over the repeats), frames.
    pub back_to_back: Option<u64>,
    pub back_to_back_max_burst: u64,
}

impl Summary {
    pub fn new(dut: &str, size: Size, io: &str) -> Summary {
        Summary {
            dut: dut.into(),
            algorithm: algorithm(dut).into(),
            frame_size: size.label(),
            io: io.into(),
            throughput_pps: 0.0,
            throughput_mbps: 0.0,
            tester_bound: false,
            search_trials: 0,
            top_pps: 0.0,
            latency_rate_pps: 0.0,
            latency: None,
            latency_trials: Vec::new(),
            loss_curve: Vec::new(),
            loss_reference_pps: 0.0,
            back_to_back: None,
            back_to_back_max_burst: 0,
        }
    }
}

/// Marks results within 10% of the tester's ceiling at the same frame size.
pub fn mark_tester_bound(s: &mut [Summary]) {
    let ceilings: Vec<(String, f64)> = s
        .iter()
        .filter(|x| x.dut == "ceiling")
        .map(|x| (x.frame_size.clone(), x.throughput_pps))
        .collect();
    for x in s.iter_mut().filter(|x| x.dut != "ceiling") {
        if let Some((_, c)) = ceilings.iter().find(|(f, _)| *f == x.frame_size) {
            x.tester_bound = *c > 0.0 && x.throughput_pps >= 0.9 * c;
        }
    }
}

fn us(ns: u64) -> String {
    format!("{:.1}", ns as f64 / 1000.0)
}

pub fn markdown(meta: &Meta, r: &Results) -> String {
    let mut s = String::new();
    s += &format!(
        "RFC 2544, {} frames over IPv{}, {}, trials of {} s{} ({}), {}{}\n\n",
        serde_json::to_value(meta.proto)
            .ok()
            .and_then(|v| v.as_str().map(str::to_uppercase))
            .unwrap_or_default(),
        meta.ip_version,
        if meta.bidirectional {
            "bidirectional"
        } else {
            "unidirectional"
        },
        meta.trial_seconds,
        meta.wan_mtu
            .map(|m| format!(", WAN MTU {m}"))
            .unwrap_or_default(),
        meta.started,
        meta.cpu,
        if r.interrupted {
            " — INTERRUPTED, partial"
        } else {
            ""
        }
    );
    s += "| frame | DUT | throughput (pps) | Mbit/s | of ceiling | latency p50 / p90 / p99 / p99.9 / max (µs) | loss at max load | back-to-back (frames) |\n";
    s += "|---|---|---:|---:|---:|---|---:|---:|\n";
    for x in &r.summaries {
        let ceiling = r
            .summaries
            .iter()
            .find(|c| c.dut == "ceiling" && c.frame_size == x.frame_size)
            .map(|c| c.throughput_pps);
        let of = match ceiling {
            Some(c) if c > 0.0 && x.dut != "ceiling" => format!(
                "{:.0}%{}",
                100.0 * x.throughput_pps / c,
                if x.tester_bound {
                    " (tester-bound)"
                } else {
                    ""
                }
            ),
            _ => "—".into(),
        };
        let lat = x.latency.as_ref().map_or("—".into(), |l| {
            format!(
                "{} / {} / {} / {} / {}",
                us(l.p50_ns),
                us(l.p90_ns),
                us(l.p99_ns),
                us(l.p999_ns),
                us(l.max_ns)
            )
        });
        let loss = x
            .loss_curve
            .first()
            .map_or("—".into(), |(_, l)| format!("{l:.2}%"));
        let b2b = x.back_to_back.map_or("—".into(), |b| {
            format!("{b} of {}", x.back_to_back_max_burst)
        });
        s += &format!(
            "| {} | {} | {:.0} | {:.1} | {} | {} | {} | {} |\n",
            x.frame_size, x.dut, x.throughput_pps, x.throughput_mbps, of, lat, loss, b2b
        );
    }
    s += &fragmentation_notes(&r.records, meta.wan_mtu);
    s
}

/// A line for each DUT and frame size whose frames arrived fragmented: such a DUT carried
/// more than one packet per frame, which a comparison at that size must not hide (the
/// espgw pair behind a 1500-byte transport network fragments every 1518-byte frame
/// before encrypting it, where kernel forwarding carries it whole).
fn fragmentation_notes(records: &[TrialRecord], wan_mtu: Option<u16>) -> String {
    let mut totals: Vec<(&str, &str, u64, u64)> = Vec::new();
    for t in records {
        match totals
            .iter_mut()
            .find(|(d, f, ..)| *d == t.dut && *f == t.frame_size)
        {
            Some(e) => {
                e.2 += t.received;
                e.3 += t.fragments;
            }
            None => totals.push((&t.dut, &t.frame_size, t.received, t.fragments)),
        }
    }
    let mut s = String::new();
    for (dut, frame, received, fragments) in totals.into_iter().filter(|e| e.3 > 0) {
        let hint = match wan_mtu {
            Some(m) if dut == "espgw" => format!(
                " (the test bed's transport MTU is {m}; `--wan-mtu 1600` carries ESP around a \
                 1500-byte packet whole)"
            ),
            _ => String::new(),
        };
        s += &format!(
            "\n{dut} at {frame}: {fragments} further fragments for {received} frames received \
             ({:.2} per frame): the DUT split frames its path could not carry whole, so each \
             cost it more than one packet{hint}.\n",
            fragments as f64 / received.max(1) as f64
        );
    }
    s
}

/// Throughput of the first DUT over each other one, per frame size.
pub fn ratios(r: &Results, duts: &[DutKind]) -> String {
    let Some(first) = duts.first().map(|d| d.name()) else {
        return String::new();
    };
    let mut s = String::from("| frame |");
    let others: Vec<&str> = duts[1..].iter().map(|d| d.name()).collect();
    for o in &others {
        s += &format!(" {first} / {o} |");
    }
    s += "\n|---|";
    s += &"---:|".repeat(others.len());
    s += "\n";
    let mut sizes: Vec<&str> = r.summaries.iter().map(|x| x.frame_size.as_str()).collect();
    sizes.dedup();
    for f in sizes {
        let get = |d: &str| {
            r.summaries
                .iter()
                .find(|x| x.dut == d && x.frame_size == f)
                .map(|x| x.throughput_pps)
        };
        s += &format!("| {f} |");
        for o in &others {
            s += &match (get(first), get(o)) {
                (Some(a), Some(b)) if b > 0.0 => format!(" {:.2}x |", a / b),
                (Some(_), Some(_)) => " ∞ (other forwards nothing) |".into(),
                _ => " — |".into(),
            };
        }
        s += "\n";
    }
    s
}

#[derive(Serialize)]
struct Document<'a> {
    schema: &'static str,
    meta: &'a Meta,
    interrupted: bool,
    summaries: &'a [Summary],
    trials: &'a [TrialRecord],
    /// Each espgw gateway's own account of each frame size (empty for other DUTs).
    gateway_stats: &'a [GatewayStats],
}

pub fn write_all(dir: &Path, meta: &Meta, r: &Results) -> Result<(), String> {
    let w = |name: &str, data: &[u8]| {
        std::fs::write(dir.join(name), data).map_err(|e| format!("{}/{name}: {e}", dir.display()))
    };
    let doc = Document {
        schema: SCHEMA,
        meta,
        interrupted: r.interrupted,
        summaries: &r.summaries,
        trials: &r.records,
        gateway_stats: &r.gateway_stats,
    };
    let json = serde_json::to_vec_pretty(&doc).map_err(|e| e.to_string())?;
    w("results.json", &json)?;
    let md = markdown(meta, r);
    w("results.md", md.as_bytes())?;
    let plots = super::plot::all(r);
    for (name, svg) in &plots {
        w(&format!("{name}.svg"), svg.as_bytes())?;
        let png = super::plot::png(svg)?;
        w(&format!("{name}.png"), &png)?;
    }
    let names: Vec<&str> = plots.iter().map(|(n, _)| n.as_str()).collect();
    w("index.html", html(meta, r, &md, &names).as_bytes())?;
    Ok(())
}

fn esc(s: &str) -> String {
    s.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// A Markdown table (as written above) as an HTML table.
fn md_table_html(md: &str) -> String {
    let mut out = String::from("<table>\n");
    let rows: Vec<&str> = md.lines().filter(|l| l.starts_with('|')).collect();
    for (i, row) in rows.iter().enumerate() {
        if i == 1 {
            continue; // the alignment row
        }
        let tag = if i == 0 { "th" } else { "td" };
        out += "<tr>";
        for cell in row.trim_matches('|').split('|') {
            out += &format!("<{tag}>{}</{tag}>", esc(cell.trim()));
        }
        out += "</tr>\n";
    }
    out + "</table>\n"
}

fn html(meta: &Meta, r: &Results, md: &str, plots: &[&str]) -> String {
    let title = format!("espgw RFC 2544 — {}", meta.duts.join(" vs "));
    let mut figs = String::new();
    for p in plots {
        figs += &format!(
            "<figure><img class=\"plot\" src=\"{p}.svg\" alt=\"{p}\"><figcaption>{p} (<a href=\"{p}.png\">PNG</a>)</figcaption></figure>\n"
        );
    }
    format!(
        r#"<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{title}</title>
<style>
body {{ font-family: sans-serif; margin: 2em; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border: 1px solid #bbb; padding: 0.25em 0.6em; text-align: right; }}
th {{ background: #eee; }}
figure {{ display: inline-block; margin: 1em; }}
img.plot {{ width: 720px; border: 1px solid #ddd; }}
</style></head>
<body data-plots="pending">
<h1>{title}</h1>
<p>{started} · {cpu} ({cpus} CPUs) · kernel {kernel} · {trial} s trials{quick}{interrupted}</p>
{table}
{notes}{figs}
<p>Every trial: <a href="results.json">results.json</a> · <a href="results.md">results.md</a></p>
<script>
window.addEventListener("load", function () {{
  var imgs = document.querySelectorAll("img.plot"), ok = 0;
  imgs.forEach(function (i) {{ if (i.complete && i.naturalWidth > 0) ok++; }});
  document.body.setAttribute("data-plots", ok + "/" + imgs.length);
}});
</script>
</body></html>
"#,
        started = esc(&meta.started),
        cpu = esc(&meta.cpu),
        cpus = meta.cpus,
        kernel = esc(&meta.kernel),
        trial = meta.trial_seconds,
        quick = if meta.quick { " (quick profile)" } else { "" },
        interrupted = if r.interrupted {
            " · <strong>interrupted: partial results</strong>"
        } else {
            ""
        },
        table = md_table_html(md),
        notes = fragmentation_notes(&r.records, meta.wan_mtu)
            .lines()
            .filter(|l| !l.is_empty())
            .map(|l| format!("<p>{}</p>\n", esc(l)))
            .collect::<String>(),
    )
}

/// Progress on stderr: a bar redrawn in place on a terminal, a line per trial
/// otherwise (CI logs).
pub struct Progress {
    total: usize,
    done: usize,
    trials: usize,
    status: String,
    tty: bool,
}

impl Progress {
    pub fn new(total: usize) -> Progress {
        Progress {
            total: total.max(1),
            done: 0,
            trials: 0,
            status: String::new(),
            tty: std::io::stderr().is_terminal(),
        }
    }
    fn bar(&self) -> String {
        let w = 24;
        let filled = self.done * w / self.total;
        format!(
            "[{}{}] {}/{} tests",
            "#".repeat(filled),
            ".".repeat(w - filled),
            self.done,
            self.total
        )
    }
    pub fn status(&mut self, s: &str) {
        self.status = s.to_string();
        self.draw(None);
    }
    pub fn trial(&mut self, o: &Outcome) {
        self.trials += 1;
        let k = o.kernel_drops;
        let seen = k.tester.overrun + k.tester.interface + k.backlog + k.dut.unwrap_or(0);
        let kernel = if seen > 0 {
            let dut = k
                .dut
                .map(|d| format!(", the DUT's own {d}"))
                .unwrap_or_default();
            format!(
                " (kernel drops: tester's rings {}, its interfaces {}, input backlog {}{dut})",
                k.tester.overrun, k.tester.interface, k.backlog
            )
        } else {
            String::new()
        };
        let line = format!(
            "trial {}: offered {:.0} pps, loss {:.3}%{kernel}{}",
            self.trials,
            o.offered_pps(),
            100.0 * o.loss_ratio(),
            super::gateway_drops::describe(o.gateway_drops.as_ref())
        );
        self.draw(Some(&line));
    }
    pub fn done_test(&mut self) {
        self.done = (self.done + 1).min(self.total);
        self.draw(None);
    }
    fn draw(&self, detail: Option<&str>) {
        let mut e = std::io::stderr();
        let text = format!("{} {} {}", self.bar(), self.status, detail.unwrap_or(""));
        if self.tty {
            let _ = write!(e, "\r\x1b[2K{}", text.trim_end());
        } else if detail.is_some() {
            let _ = writeln!(e, "{}", text.trim_end());
        }
        let _ = e.flush();
    }
    pub fn finish(&self) {
        if self.tty {
            eprintln!();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `show stats` as a gateway of the ordered spread answers it (abridged): the crew,
    /// the per-worker counts and only the drop reasons that counted something.
    #[test]
    fn gateway_stats_keep_the_workers_the_crew_and_the_drops() {
        let v = serde_json::json!({
            "rx_packets": 5,
            "per_worker_rx": [900, 100],
            "ordered_spread": {"join": "busy", "engaged": 1, "joined": 2, "stepped_back": 2,
                               "not_joined_short_of_cpu": 7,
                               "waited_ms": {"pipeline": 12, "transmit": 40}},
            "drops": {"replay": 3, "no_sa": 0},
        });
        let s = GatewayStats::from_show_stats("64", "gw2", &v);
        assert_eq!(s.per_worker_rx, vec![900, 100]);
        assert_eq!(s.drops.len(), 1);
        assert_eq!(
            s.describe(),
            "espgw 64 gw2: per-worker rx [900, 100]; ordered spread: engaged 1, joined 2, \
             stepped back 2, not joined short of CPU 7, waited pipeline 12 ms, transmit 40 ms; \
             drops replay 3"
        );
        assert_eq!(
            s.spread_bound(),
            None,
            "the ordered spread's shares are no bound"
        );
        // Hash fanout has no crew: the busiest worker's share bounds the spread.
        let v = serde_json::json!({"per_worker_rx": [5467547, 0], "ordered_spread": null});
        let s = GatewayStats::from_show_stats("64", "gw2", &v);
        assert_eq!(s.spread_bound(), Some(1.0));
        assert_eq!(
            s.describe(),
            "espgw 64 gw2: per-worker rx [5467547, 0] (the busiest worker read 100 %: at most \
             1.00x one worker); no ordered spread; drops none"
        );
        let v = serde_json::json!({"per_worker_rx": [2373295, 1967171, 4016758, 0]});
        let b = GatewayStats::from_show_stats("64", "gw2", &v)
            .spread_bound()
            .unwrap();
        assert!((b - 2.08).abs() < 0.005, "{b}");
        let v = serde_json::json!({"per_worker_rx": [1000]});
        assert_eq!(
            GatewayStats::from_show_stats("64", "gw1", &v).spread_bound(),
            None
        );
        // A gateway that answered nothing useful gives empty fields.
        let s = GatewayStats::from_show_stats("1518", "gw1", &serde_json::json!({}));
        assert!(s.per_worker_rx.is_empty() && s.ordered_spread.is_null());
        assert_eq!(
            s.describe(),
            "espgw 1518 gw1: per-worker rx []; no ordered spread; drops none"
        );
    }

    #[test]
    fn utc_dates() {
        assert_eq!(utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(utc(951_782_400), "2000-02-29T00:00:00Z");
        assert_eq!(utc(1_795_305_600 + 3661), "2026-11-22T01:01:01Z");
    }

    fn record(dut: &str, frame: &str, received: u64, fragments: u64) -> TrialRecord {
        TrialRecord {
            dut: dut.into(),
            algorithm: algorithm(dut).into(),
            test: "throughput".into(),
            frame_size: frame.into(),
            proto: super::super::frame::L4::Udp,
            bidirectional: false,
            requested_pps: 1000.0,
            offered_pps: 1000.0,
            offered_mbps: 1.0,
            received_pps: received as f64,
            sent: received,
            received,
            lost: 0,
            loss_pct: 0.0,
            duplicates: 0,
            reordered: 0,
            stale: 0,
            fragments,
            refused: 0,
            tester_overrun: 0,
            backlog_drops: 0,
            tester_interface_drops: 0,
            dut_drops: None,
            gateway_drops: None,
            burst: None,
            latency: LatencySummary::of(&Histogram::new(3).unwrap()),
        }
    }

    #[test]
    fn fragmented_frames_are_pointed_out_per_dut_and_size() {
        let records = [
            record("espgw", "1518", 900, 900),
            record("espgw", "1518", 100, 100),
            record("espgw", "64", 1000, 0),
            record("kernel", "1518", 1000, 0),
            record("strongswan", "1518", 500, 250),
        ];
        let notes = fragmentation_notes(&records, Some(1500));
        let lines: Vec<&str> = notes.lines().filter(|l| !l.is_empty()).collect();
        assert_eq!(lines.len(), 2, "{notes}");
        assert!(lines[0].starts_with(
            "espgw at 1518: 1000 further fragments for 1000 frames received (1.00 per frame)"
        ));
        assert!(lines[0].contains("transport MTU is 1500"), "{notes}");
        assert!(lines[1].starts_with(
            "strongswan at 1518: 250 further fragments for 500 frames received (0.50 per frame)"
        ));
        assert!(!lines[1].contains("--wan-mtu"), "{notes}");
        // Nothing fragmented, or no test bed: no note, or no hint.
        assert_eq!(fragmentation_notes(&records[2..4], Some(1500)), "");
        assert!(!fragmentation_notes(&records[..1], None).contains("MTU"));
    }

    #[test]
    fn markdown_rows_become_html_rows() {
        let h = md_table_html("| a | b |\n|---|---|\n| 1 | <2> |\n");
        assert!(h.contains("<th>a</th><th>b</th>"));
        assert!(h.contains("<td>1</td><td>&lt;2&gt;</td>"));
        assert_eq!(h.matches("<tr>").count(), 2);
    }
}
