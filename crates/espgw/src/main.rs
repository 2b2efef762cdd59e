//! espgw: a fast, memory-safe userspace IPsec security gateway.
#![forbid(unsafe_code)]

use espgw::{
    crypto_policy, exposed_config, live, offline, report, seq_store, set_crypto_policy, warn_about,
};

use espgw_control::ControlRequest;
use std::error::Error;
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
    ///
    /// With intel-ipsec-mb, HMAC-SHA-1 and HMAC-SHA-256 ICVs go through the CPU's SHA
    /// extensions where it has them and the library did not pick its AVX-512 code (start-up
    /// then names "HMAC-SHA-1/SHA-256 on SHA-NI"); the environment variable
    /// ESPGW_SHA_EXTENSIONS=on|off|auto overrides that choice. ChaCha20-Poly1305 texts
    /// longer than espgw's AVX2 kernel takes go through aws-lc-rs rather than the library
    /// ("texts over 256 B on aws-lc-rs"); ESPGW_CHACHA_LONG_TEXTS=aws-lc|library|auto
    /// overrides that.
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
    Pcap(PcapArgs),
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
    /// Run the gateway on Linux interfaces (as root).
    // A later option overrides an earlier one, so that a wrapper's own options (the test
    // bed's `--io`, `--workers`, ...) can be changed by the arguments it passes through.
    #[command(args_override_self = true)]
    Run(RunArgs),
    /// Show the running gateway's SAs, policies, routes, neighbours, ports, counters (`stats`)
    /// or negotiated state (`keying`).
    Show {
        /// sa, policy, routes, neighbours, ports, stats or keying.
        what: String,
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
        /// With `sa`: include each SA's keys (hex, salt included), for a packet analyser
        /// such as tshark. Only the control socket's owner (root, or the service's user)
        /// can ask; the keys are never shown otherwise.
        #[arg(long)]
        keys: bool,
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
}

#[derive(clap::Args)]
struct PcapArgs {
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
    /// AF_XDP busy polling for this many microseconds per call (0: off): the workers' own
    /// socket calls run the receive queues' NAPI polls instead of softirqs (kernel 5.11+).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u32).range(0..=10_000))]
    busy_poll: u32,
    /// Frames per busy poll (with --busy-poll).
    #[arg(long, default_value_t = 64, value_parser = clap::value_parser!(u32).range(1..=1024))]
    busy_poll_budget: u32,
    /// Worker threads (default: the configuration's `workers`, else 1).
    #[arg(long)]
    workers: Option<usize>,
    /// Pin worker N to the N-th CPU this process may run on (of its affinity mask, as
    /// `taskset` or systemd's CPUAffinity= set it).
    #[arg(long)]
    pin: bool,
    /// Pin worker N to the N-th CPU of this list ("2-5", "2,4,6,8"), e.g. to keep the
    /// workers on cores isolated for them; more workers than CPUs share them in turn.
    /// Implies --pin.
    #[arg(long)]
    cpus: Option<espgw_io::cpu_list::CpuList>,
    /// How a port's traffic is spread over workers: auto (ordered with several workers,
    /// hash with one), hash (a flow stays on one worker; AF_PACKET fanout or AF_XDP
    /// queues), round-robin (AF_PACKET: one flow over every worker, interleaved), ordered
    /// (one socket per port read by the workers in turn: one SA over every worker, in
    /// arrival order).
    #[arg(long, value_enum, default_value = "auto")]
    fanout: live::FanoutArg,
    /// With --fanout ordered, when workers join the spread: busy (worker 0 reads alone;
    /// one more joins each time the sockets back up, and steps back when they no longer
    /// do) or always (every worker from the start).
    #[arg(long, value_enum, default_value = "busy")]
    ordered_join: live::JoinPolicy,
    /// With --fanout ordered: on, each worker sizes its bursts by its own speed, so that a
    /// worker on a slower core (shared with other work) takes smaller bursts instead of
    /// holding up the others' turns; off (the default until measured live on many cores,
    /// see the README's "Many cores"): every worker takes full bursts.
    #[arg(long, value_enum, default_value = "off")]
    burst_pacing: live::BurstPacing,
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
    /// Serve the SA contract on this Unix socket: an IKE daemon (strongSwan's charon with
    /// the kernel-espgw plugin) installs negotiated SAs and policies through it, beside the
    /// static ones (docs/sa-contract.md).
    #[arg(long)]
    keying_socket: Option<PathBuf>,
    /// Besides root, the user allowed to connect to the keying socket.
    #[arg(long, requires = "keying_socket")]
    keying_user: Option<String>,
}

/// What `show sa --keys` asks the gateway for (a name no one types by accident).
const SA_WITH_KEYS: &str = "sa-with-keys";

fn load_config(
    path: &Option<PathBuf>,
    format: Option<FormatArg>,
) -> Result<Config, Box<dyn Error>> {
    let cfg = match path {
        Some(p) => espgw_config::load_with(p, format.map(Into::into), crypto_policy())?,
        None => espgw_config::parse_with(
            espgw_config::DEFAULT_CONFIG,
            "<built-in default>",
            Some(Format::Native),
            crypto_policy(),
        )?,
    };
    warn_about(&cfg);
    Ok(cfg)
}

fn provider(choice: ProviderChoice) -> Result<Arc<dyn CryptoProvider>, Box<dyn Error>> {
    let p = espgw_crypto::provider(choice)?;
    eprintln!("espgw: crypto provider {}", p.name());
    Ok(p)
}

fn run(cli: Cli) -> Result<(), Box<dyn Error>> {
    match cli.cmd {
        Cmd::Pcap(a) => pcap(a, cli.crypto),
        Cmd::Check { config, format } => check(&config, format, cli.crypto),
        Cmd::Manpage => Ok(manual_page(&mut std::io::stdout().lock())?),
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
                    busy_poll: (a.busy_poll > 0).then_some((a.busy_poll, a.busy_poll_budget)),
                    workers: a.workers,
                    pin: a.pin,
                    cpus: a.cpus.map(|c| c.0),
                    control: a.control,
                    metrics: a.metrics,
                    fanout: a.fanout,
                    ordered_join: a.ordered_join,
                    burst_pacing: a.burst_pacing,
                    ring_frames: a.ring_frames,
                    state: a.state,
                    user: a.user,
                    seccomp: a.seccomp,
                    keying_socket: a.keying_socket,
                    keying_user: a.keying_user,
                },
                p,
            )?;
            Ok(())
        }
        Cmd::Show {
            what,
            json,
            keys,
            control,
        } => {
            let what = match (keys, what.as_str()) {
                (false, _) => what,
                (true, "sa" | "sas") => SA_WITH_KEYS.to_string(),
                (true, _) => return Err("--keys goes with `show sa` only".into()),
            };
            let v = live::control::request(&control, &ControlRequest::Show(what))?;
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
        Cmd::Stop { control } => {
            live::control::request(&control, &ControlRequest::Stop)?;
            Ok(())
        }
    }
}

/// `espgw pcap`: a capture through the offline gateway, its counters printed.
fn pcap(a: PcapArgs, crypto: ProviderChoice) -> Result<(), Box<dyn Error>> {
    let cfg = load_config(&a.config, a.format)?;
    let store = seq_store::open_for(&cfg, &a.state)?;
    let p = provider(crypto)?;
    let tables = Arc::new(Tables::build(&cfg, p.as_ref(), None)?);
    if let Some(s) = &store {
        s.attach(&tables)?;
    }
    let dir = match a.direction {
        Dir::Outbound => Direction::Out,
        Dir::Inbound => Direction::In,
    };
    let port = offline::arrival_port(&tables, dir)?;
    let mut node = offline::node(tables.clone());
    let st = offline::run_pcap(&mut node, port, &a.input, &a.output, store.as_ref())?;
    let counters = node.counters();
    if a.json {
        let mut v = report::json(&tables, counters);
        v["oversized_records"] = st.oversized.into();
        println!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        println!(
            "{} -> {}: {} frames read, {} written",
            a.input.display(),
            a.output.display(),
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

/// `espgw check`: a configuration validated, its keys made, a summary printed.
fn check(
    config: &Option<PathBuf>,
    format: Option<FormatArg>,
    crypto: ProviderChoice,
) -> Result<(), Box<dyn Error>> {
    if let Some(w) = config.as_deref().and_then(exposed_config) {
        eprintln!("espgw: warning: {w} (`espgw run` refuses it)");
    }
    let cfg = load_config(config, format)?;
    let p = provider(crypto)?;
    let t = Tables::build(&cfg, p.as_ref(), None)?;
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
    set_crypto_policy(espgw_config::CryptoPolicy {
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

    #[test]
    fn a_later_run_option_overrides_an_earlier_one() {
        use clap::Parser;
        let cli = super::Cli::try_parse_from([
            "espgw",
            "run",
            "--demo",
            "--io",
            "af-xdp",
            "--workers",
            "1",
            "--io",
            "af-packet",
            "--workers",
            "2",
            "--pin",
        ])
        .unwrap();
        let super::Cmd::Run(a) = cli.cmd else {
            panic!("not run")
        };
        assert!(matches!(a.io, super::live::IoChoice::AfPacket));
        assert_eq!((a.workers, a.pin), (Some(2), true));
        // Other subcommands still refuse a repeated option.
        assert!(
            super::Cli::try_parse_from(["espgw", "check", "--config", "a", "--config", "b"])
                .is_err()
        );
    }

    /// With several workers the default spread is the ordered one, joining when busy; with
    /// one it is hash (one worker's own sockets); an explicit choice stays.
    #[test]
    fn the_default_spread_is_ordered_with_several_workers() {
        use super::live::{FanoutArg, JoinPolicy};
        use clap::Parser;
        let cli = super::Cli::try_parse_from(["espgw", "run", "--demo"]).unwrap();
        let super::Cmd::Run(a) = cli.cmd else {
            panic!("not run")
        };
        assert_eq!(
            (a.fanout, a.ordered_join, a.burst_pacing),
            (
                FanoutArg::Auto,
                JoinPolicy::Busy,
                super::live::BurstPacing::Off
            )
        );
        assert_eq!(a.fanout.resolve(2), FanoutArg::Ordered);
        assert_eq!(a.fanout.resolve(1), FanoutArg::Hash);
        assert_eq!(FanoutArg::Hash.resolve(4), FanoutArg::Hash);
        assert_eq!(FanoutArg::Ordered.resolve(1), FanoutArg::Ordered);
    }

    /// `--cpus` takes a CPU list in the kernel's form and refuses a malformed one at parse
    /// time, naming the option.
    #[test]
    fn cpus_take_a_cpu_list() {
        use clap::Parser;
        let cli =
            super::Cli::try_parse_from(["espgw", "run", "--demo", "--cpus", "2-3,0"]).unwrap();
        let super::Cmd::Run(a) = cli.cmd else {
            panic!("not run")
        };
        assert_eq!(a.cpus.map(|c| c.0), Some(vec![2, 3, 0]));
        let e = super::Cli::try_parse_from(["espgw", "run", "--demo", "--cpus", "3-2"])
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains("--cpus") && e.contains("low to high"), "{e}");
    }
}
