//! espgw: a fast, memory-safe userspace IPsec security gateway.
#![forbid(unsafe_code)]

mod bench;
mod demo;
mod gen;
mod live;
mod offline;
mod report;
mod rfc2544;
mod seq_store;
mod strongswan;
mod testbed;

use espgw_control::ControlRequest;
use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::Arc;

use clap::{CommandFactory, FromArgMatches, Parser, Subcommand, ValueEnum};
use espgw_config::{Config, Format};
use espgw_core::{Direction, Tables};
use espgw_crypto::{CryptoProvider, ProviderChoice};

#[derive(Parser)]
#[command(
    name = "espgw",
    version,
    about = "A fast, memory-safe userspace IPsec (ESP) security gateway"
)]
struct Cli {
    /// Crypto back-end: auto (the fastest available), ipsec-mb or aws-lc.
    #[arg(long, global = true, default_value = "auto")]
    crypto: ProviderChoice,
    /// Accept 3DES-CBC and HMAC-MD5-96 (deprecated by RFC 8221) in configurations, with a
    /// warning at load.
    #[arg(long, global = true)]
    allow_legacy_crypto: bool,
    /// Accept NULL encryption without integrity (no protection; for measurement only).
    #[arg(long, global = true)]
    allow_null_null: bool,
    #[command(subcommand)]
    cmd: Cmd,
}

#[derive(Clone, Copy, ValueEnum)]
enum Dir {
    Outbound,
    Inbound,
}

#[derive(Clone, Copy, ValueEnum)]
enum FormatArg {
    Native,
    Secgw,
    Setkey,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Native => Format::Native,
            FormatArg::Secgw => Format::Secgw,
            FormatArg::Setkey => Format::Setkey,
        }
    }
}

#[derive(Subcommand)]
enum Cmd {
    /// Run every frame of a capture through the gateway and write what it would send.
    Pcap {
        /// Configuration file (native TOML, DPDK ipsec-secgw, or setkey); the built-in
        /// default when left out.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Force the configuration format instead of detecting it.
        #[arg(long, value_enum)]
        format: Option<FormatArg>,
        #[arg(long, value_enum)]
        direction: Dir,
        #[arg(long)]
        input: PathBuf,
        #[arg(long)]
        output: PathBuf,
        /// Print the counters as JSON.
        #[arg(long)]
        json: bool,
        #[command(flatten)]
        state: seq_store::StateArgs,
    },
    /// Check a configuration and print what it sets up.
    Check {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, value_enum)]
        format: Option<FormatArg>,
    },
    /// Print the built-in default configuration (gateway 1), or its peer's.
    DefaultConfig {
        #[arg(long)]
        peer: bool,
    },
    /// Write a capture of test traffic.
    Gen(gen_cmd::GenArgs),
    /// The built-in demonstration: generate traffic, encrypt it with gateway 1, decrypt it
    /// with gateway 2, and show what went in and out.
    Demo {
        /// Where to write the captures.
        #[arg(long, default_value = "out/demo")]
        out: PathBuf,
        /// Frames to generate.
        #[arg(long, default_value_t = 24)]
        count: usize,
    },
    /// Benchmarks.
    #[command(subcommand)]
    Bench(bench::BenchCmd),
    /// Run the gateway on Linux interfaces (as root).
    Run(RunArgs),
    /// Show the running gateway's SAs, policies, routes, neighbours, ports or counters.
    Show {
        /// sa, policy, routes, neighbours, ports or stats.
        what: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        #[arg(long, default_value = DEFAULT_CONTROL)]
        control: PathBuf,
    },
    /// Apply a new configuration to the running gateway without stopping traffic (the
    /// file it was started with, re-read, unless another is named).
    Reload {
        #[arg(long)]
        config: Option<PathBuf>,
        #[arg(long, default_value = DEFAULT_CONTROL)]
        control: PathBuf,
    },
    /// Stop the running gateway.
    Stop {
        #[arg(long, default_value = DEFAULT_CONTROL)]
        control: PathBuf,
    },
    /// Print the manual page (roff) generated from this command line's help; the package's
    /// `packaging/espgw.8` is this output.
    #[command(hide = true)]
    Manpage,
    /// The published design's test bed in network namespaces (as root). Without a
    /// subcommand: build it, send traffic through it, show what crossed the transport
    /// link and the measured throughput, and remove it.
    Testbed {
        #[command(subcommand)]
        cmd: Option<TestbedCmd>,
    },
}

#[derive(Subcommand)]
enum TestbedCmd {
    /// Build the test bed and start its gateways.
    Up(testbed::UpArgs),
    /// Stop the gateways and remove the namespaces.
    Down,
    /// Up, traffic, report, down (the default).
    Demo {
        #[command(flatten)]
        up: testbed::UpArgs,
        /// Seconds per UDP run.
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
    },
    /// Count frames on an interface by kind (ESP, ARP, plaintext) and print JSON.
    Watch {
        #[arg(long)]
        interface: String,
        #[arg(long, default_value_t = 5.0)]
        seconds: f64,
    },
    /// Send sequence-numbered UDP datagrams; prints JSON.
    UdpSend {
        #[arg(long)]
        dst: std::net::SocketAddr,
        /// UDP payload bytes.
        #[arg(long, default_value_t = 64)]
        size: usize,
        #[arg(long, default_value_t = 2.0)]
        seconds: f64,
        /// Packets per second (0: as fast as possible).
        #[arg(long, default_value_t = 0)]
        rate: u64,
    },
    /// Receive sequence-numbered UDP datagrams and count loss, duplicates and
    /// reordering; prints JSON.
    UdpRecv {
        #[arg(long)]
        port: u16,
        #[arg(long)]
        v6: bool,
        #[arg(long, default_value_t = 4.0)]
        seconds: f64,
    },
}

const DEFAULT_CONTROL: &str = "/run/espgw/espgw.sock";

#[derive(clap::Args)]
struct RunArgs {
    /// Configuration file (required, unless --demo).
    #[arg(long, required_unless_present = "demo")]
    config: Option<PathBuf>,
    /// Run the built-in demonstration configuration (test-bed gateway 1), whose keys are
    /// public: for labs only.
    #[arg(long, conflicts_with = "config")]
    demo: bool,
    #[arg(long, value_enum)]
    format: Option<FormatArg>,
    /// Packet I/O back-end.
    #[arg(long, value_enum, default_value = "auto")]
    io: live::IoChoice,
    /// How AF_XDP sockets bind.
    #[arg(long, value_enum, default_value = "auto")]
    xdp_mode: live::XdpModeArg,
    /// Worker threads (default: the configuration's `workers`, else 1).
    #[arg(long)]
    workers: Option<usize>,
    /// Pin worker N to core N.
    #[arg(long)]
    pin: bool,
    /// How AF_PACKET spreads a port's traffic over workers.
    #[arg(long, value_enum, default_value = "hash")]
    fanout: live::FanoutArg,
    /// Frames per ring (AF_PACKET receive and transmit rings; AF_XDP UMEM).
    #[arg(long, default_value_t = 4096)]
    ring_frames: usize,
    /// Control socket path.
    #[arg(long, default_value = DEFAULT_CONTROL)]
    control: PathBuf,
    /// Serve Prometheus metrics on this address (e.g. 127.0.0.1:9101).
    #[arg(long)]
    metrics: Option<std::net::SocketAddr>,
    #[command(flatten)]
    state: seq_store::StateArgs,
    /// Once its ports are open, run as this user with only CAP_IPC_LOCK (default: `espgw`
    /// when started as root and that user exists). The user must be able to read the
    /// configuration for reloads.
    #[arg(long)]
    user: Option<String>,
    /// What a system call outside the gateway's allow-list does once it runs.
    #[arg(long, value_enum, default_value = "kill")]
    seccomp: live::confine::SeccompArg,
}

mod gen_cmd {
    use std::path::PathBuf;

    #[derive(clap::Args)]
    pub struct GenArgs {
        #[arg(long)]
        pub output: PathBuf,
        #[arg(long, default_value_t = 10)]
        pub count: u64,
        /// Frame size in bytes, FCS included (RFC 2544), or "imix".
        #[arg(long, default_value = "128")]
        pub size: String,
        /// udp, tcp or icmp.
        #[arg(long, default_value = "udp")]
        pub proto: String,
        #[arg(long, default_value = "198.51.100.10")]
        pub src: std::net::IpAddr,
        #[arg(long, default_value = "203.0.113.20")]
        pub dst: std::net::IpAddr,
        #[arg(long, default_value_t = 1024)]
        pub sport: u16,
        #[arg(long, default_value_t = 9)]
        pub dport: u16,
        /// Write raw IP (link type 101) instead of Ethernet.
        #[arg(long)]
        pub raw: bool,
    }
}

/// The algorithm switches of the command line, for every configuration this process loads
/// (the first one and every reload).
static CRYPTO_POLICY: std::sync::OnceLock<espgw_config::CryptoPolicy> = std::sync::OnceLock::new();

pub(crate) fn crypto_policy() -> espgw_config::CryptoPolicy {
    CRYPTO_POLICY.get().copied().unwrap_or_default()
}

/// Why a configuration file may not be used by the gateway: it holds keys, so nobody but
/// its owner may read it (as wg-quick warns; the running gateway refuses). `None` if fine.
pub(crate) fn exposed_config(path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o077 != 0).then(|| {
        format!(
            "{}: readable or writable by group or others (mode {:04o}); it holds keys: \
             chmod 600 {}",
            path.display(),
            mode & 0o7777,
            path.display()
        )
    })
}

/// Prints what a loaded configuration should be warned about (legacy algorithms).
pub(crate) fn warn_about(cfg: &Config) {
    for w in cfg.warnings() {
        eprintln!("espgw: warning: {w}");
    }
}

fn load_config(path: &Option<PathBuf>, format: Option<FormatArg>) -> Result<Config, String> {
    let cfg = match path {
        Some(p) => espgw_config::load_with(p, format.map(Into::into), crypto_policy())
            .map_err(|e| e.to_string())?,
        None => espgw_config::parse_with(
            espgw_config::DEFAULT_CONFIG,
            "<built-in default>",
            Some(Format::Native),
            crypto_policy(),
        )
        .map_err(|e| e.to_string())?,
    };
    warn_about(&cfg);
    Ok(cfg)
}

fn provider(choice: ProviderChoice) -> Result<Arc<dyn CryptoProvider>, String> {
    let p = espgw_crypto::provider(choice)?;
    eprintln!("espgw: crypto provider {}", p.name());
    Ok(p)
}

fn run(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Cmd::Pcap {
            config,
            format,
            direction,
            input,
            output,
            json,
            state,
        } => {
            let cfg = load_config(&config, format)?;
            let store = seq_store::open_for(&cfg, &state)?;
            let p = provider(cli.crypto)?;
            let tables =
                Arc::new(Tables::build(&cfg, p.as_ref(), None).map_err(|e| e.to_string())?);
            if let Some(s) = &store {
                s.attach(&tables).map_err(|e| e.to_string())?;
            }
            let dir = match direction {
                Dir::Outbound => Direction::Out,
                Dir::Inbound => Direction::In,
            };
            let port = offline::arrival_port(&tables, dir)?;
            let mut node = offline::node(tables.clone());
            let st = offline::run_pcap(&mut node, port, &input, &output, store.as_ref())
                .map_err(|e| e.to_string())?;
            let counters = node.counters();
            if json {
                let mut v = report::json(&tables, counters);
                v["oversized_records"] = st.oversized.into();
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                println!(
                    "{} -> {}: {} frames read, {} written",
                    input.display(),
                    output.display(),
                    st.frames_in,
                    st.frames_out
                );
                if st.oversized > 0 {
                    println!(
                        "{} records larger than a packet buffer were skipped",
                        st.oversized
                    );
                }
                print!("{}", report::text(&tables, counters));
            }
            Ok(())
        }
        Cmd::Check { config, format } => {
            if let Some(w) = config.as_deref().and_then(exposed_config) {
                eprintln!("espgw: warning: {w} (`espgw run` refuses it)");
            }
            let cfg = load_config(&config, format)?;
            let p = provider(cli.crypto)?;
            let t = Tables::build(&cfg, p.as_ref(), None).map_err(|e| e.to_string())?;
            println!(
                "ok: {} ports, {} SAs, {} outbound and {} inbound policies, {} routes",
                t.ports.len(),
                t.sas.len(),
                t.spd_out.len(),
                t.spd_in.len(),
                t.routes.len()
            );
            for sa in &t.sas {
                println!(
                    "  sa {:<3} spi 0x{:08x} {} {} icv {} esn {} replay window {}{}",
                    sa.direction.to_string(),
                    sa.spi,
                    sa.config.algorithm_name(),
                    sa.mode.name(),
                    sa.icv_len,
                    sa.esn,
                    sa.config.replay_window,
                    if sa.udp.is_some() { " udp-encap" } else { "" }
                );
            }
            Ok(())
        }
        Cmd::Manpage => {
            manual_page(&mut std::io::stdout().lock()).map_err(|e| format!("manpage: {e}"))
        }
        Cmd::DefaultConfig { peer } => {
            print!(
                "{}",
                if peer {
                    espgw_config::DEFAULT_PEER_CONFIG
                } else {
                    espgw_config::DEFAULT_CONFIG
                }
            );
            Ok(())
        }
        Cmd::Gen(a) => demo::gen_capture(&a),
        Cmd::Demo { out, count } => {
            let p = provider(cli.crypto)?;
            demo::run(p.as_ref(), &out, count)
        }
        Cmd::Bench(b) => bench::run(b, cli.crypto),
        Cmd::Run(a) => {
            if a.demo {
                eprintln!(
                    "espgw: warning: --demo: running the built-in demonstration \
                     configuration, whose keys are public"
                );
            }
            let p = espgw_crypto::provider(cli.crypto)?;
            live::run(
                live::RunOptions {
                    config: a.config,
                    format: a.format.map(Into::into),
                    io: a.io,
                    xdp_mode: a.xdp_mode,
                    workers: a.workers,
                    pin: a.pin,
                    control: a.control,
                    metrics: a.metrics,
                    fanout: a.fanout,
                    ring_frames: a.ring_frames,
                    state: a.state,
                    user: a.user,
                    seccomp: a.seccomp,
                },
                p,
            )
        }
        Cmd::Show {
            what,
            json,
            control,
        } => {
            let v = live::control::request(&control, &ControlRequest::Show(what.clone()))?;
            if json {
                println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
            } else {
                print!("{}", live::control::render(&v));
            }
            Ok(())
        }
        Cmd::Reload { config, control } => {
            let path = config.map(|p| std::fs::canonicalize(&p).unwrap_or(p));
            let v = live::control::request(&control, &ControlRequest::Reload(path))?;
            println!("{}", v.as_str().unwrap_or_default());
            Ok(())
        }
        Cmd::Testbed { cmd } => match cmd {
            None => testbed::demo(&testbed::UpArgs::default(), 2.0),
            Some(TestbedCmd::Demo { up, seconds }) => testbed::demo(&up, seconds),
            Some(TestbedCmd::Up(a)) => testbed::up(&a),
            Some(TestbedCmd::Down) => testbed::down(),
            Some(TestbedCmd::Watch { interface, seconds }) => {
                let c = testbed::watch(&interface, seconds)?;
                println!("{}", serde_json::to_string(&c).unwrap_or_default());
                Ok(())
            }
            Some(TestbedCmd::UdpSend {
                dst,
                size,
                seconds,
                rate,
            }) => {
                let sent = testbed::udp_send(dst, size, seconds, rate)?;
                println!("{}", serde_json::json!({ "sent": sent }));
                Ok(())
            }
            Some(TestbedCmd::UdpRecv { port, v6, seconds }) => {
                let r = testbed::udp_recv(port, v6, seconds)?;
                println!("{}", serde_json::to_string(&r).unwrap_or_default());
                Ok(())
            }
        },
        Cmd::Stop { control } => {
            live::control::request(&control, &ControlRequest::Stop)?;
            Ok(())
        }
    }
}

/// The manual page, espgw(8), generated from the command line's help.
fn manual_page(out: &mut dyn std::io::Write) -> std::io::Result<()> {
    clap_mangen::Man::new(Cli::command())
        .section("8")
        .render(out)
}

/// What `espgw --version` prints after the name: the version, the commit it was built
/// from, the crypto back-ends compiled in (and the one `--crypto auto` picks on this CPU)
/// and the port back-ends this build has.
fn long_version() -> String {
    format!(
        "{}\ncommit: {}\ncrypto back-ends: {} (auto: {})\nport back-ends: {}",
        env!("CARGO_PKG_VERSION"),
        env!("ESPGW_GIT_COMMIT"),
        espgw_crypto::COMPILED_BACKENDS.join(", "),
        espgw_crypto::default_provider().name(),
        espgw_io::port_backends().join(", "),
    )
}

fn main() -> ExitCode {
    // clap keeps the text for the life of the program; leaking one string once is that.
    let long_version: &'static str = Box::leak(long_version().into_boxed_str());
    let matches = Cli::command().long_version(long_version).get_matches();
    let cli = Cli::from_arg_matches(&matches).unwrap_or_else(|e| e.exit());
    let _ = CRYPTO_POLICY.set(espgw_config::CryptoPolicy {
        allow_legacy: cli.allow_legacy_crypto,
        allow_null: cli.allow_null_null,
    });
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("espgw: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_packaged_manual_page_is_current() {
        let mut generated = Vec::new();
        super::manual_page(&mut generated).unwrap();
        let packaged = include_str!("../../../packaging/espgw.8");
        assert!(
            packaged.as_bytes() == generated.as_slice(),
            "packaging/espgw.8 is stale: regenerate it with `espgw manpage > packaging/espgw.8`"
        );
    }
}
