//! espgw-lab: the lab around the gateway — the published design's test bed in network
//! namespaces, the RFC 2544 tester (with strongSwan and a stand-in as other devices under
//! test), the data-plane and SPD benchmarks, the offline demonstration and the traffic
//! generator. Kept apart from the `espgw` binary so that the security gateway links no
//! plotting, histogram or package-installing code; it drives the gateway through the
//! `espgw` library's small public surface and the `espgw` binary's command line.
#![forbid(unsafe_code)]

mod bench;
mod demo;
mod gen;
mod packages;
mod py_random;
mod rfc2544;
mod strongswan;
mod testbed;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};
use espgw_crypto::ProviderChoice;

#[derive(Parser)]
#[command(
    name = "espgw-lab",
    version,
    about = "The lab around espgw: test bed, RFC 2544 tester, benchmarks, demo, traffic generator"
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

#[derive(Subcommand)]
enum Cmd {
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

fn run(cli: Cli) -> Result<(), String> {
    match cli.cmd {
        Cmd::Gen(a) => demo::gen_capture(&a),
        Cmd::Demo { out, count } => {
            let p = espgw_crypto::provider(cli.crypto).map_err(|e| e.to_string())?;
            eprintln!("espgw-lab: crypto provider {}", p.name());
            demo::run(p.as_ref(), &out, count)
        }
        Cmd::Bench(b) => bench::run(b, cli.crypto),
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
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    espgw::set_crypto_policy(espgw_config::CryptoPolicy {
        allow_legacy: cli.allow_legacy_crypto,
        allow_null: cli.allow_null_null,
    });
    match run(cli) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("espgw-lab: {e}");
            ExitCode::FAILURE
        }
    }
}
