//! The test bed: the published design's topology in network namespaces.
//!
//! ```text
//!  h1 (198.51.100.2)                                                   h2 (203.0.113.2)
//!   eth0 ── south [gw1] north ── gw1 ┐            ┌ gw2 ── north [gw2] south ── eth0
//!                 192.0.2.1          └─ br0 (wan) ┘          192.0.2.2
//! ```
//!
//! `h1` and `h2` are the traffic endpoints (the generator's two interfaces, each in its
//! own namespace so the kernel routes through the gateways rather than to itself);
//! `wan` is the transport network, a bridge on which captures see exactly what crosses
//! it. The gateways are two `espgw run` processes with the built-in default
//! configurations, or plain kernel forwarding (`--dut kernel`, the test bed's ceiling).
//! Addresses come from the documentation ranges only.

use std::net::{SocketAddr, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::packages::ensure_packages;

mod demo;
mod ike;
pub mod per_worker;
pub mod replay_window;
mod traffic;

pub use demo::demo;
pub use ike::{Auth, Keying, Peer};
pub use traffic::{udp_recv, udp_send, watch, UdpReport};

pub const PREFIX: &str = "espgw";
/// The test bed's namespaces (without the prefix); the last only with --nat.
const NAMESPACES: [&str; 6] = ["h1", "gw1", "wan", "gw2", "h2", "nat"];
pub const STATE_DIR: &str = "/run/espgw-testbed";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Dut {
    /// Two espgw gateways.
    Espgw,
    /// Plain kernel forwarding through the same namespaces (no encryption).
    Kernel,
    /// strongSwan's charon with its userspace data plane (kernel-libipsec) in each
    /// gateway namespace: IKEv2 with a pre-shared key, ESP aes128gcm16 in UDP 4500.
    /// IPv4 only.
    Strongswan,
}

#[derive(clap::Args, Clone)]
pub struct UpArgs {
    #[arg(long, value_enum, default_value = "espgw")]
    pub dut: Dut,
    /// Packet I/O of the gateways.
    #[arg(long, value_enum, default_value = "auto")]
    pub io: espgw::IoChoice,
    #[arg(long, default_value_t = 1)]
    pub workers: usize,
    /// Receive and transmit queues of every veth (at least --workers: a gateway's worker
    /// reads its share of them; more, for a tester with that many threads).
    #[arg(long, default_value_t = 1)]
    pub queues: usize,
    /// How the gateways spread a port's traffic over workers (`espgw run --fanout`): auto
    /// (the gateway's default: ordered with several workers), hash, round-robin
    /// (AF_PACKET), ordered (one SA over every worker, in arrival order).
    #[arg(long, value_enum, default_value = "auto")]
    pub fanout: espgw::FanoutArg,
    /// Gateway 1's configuration (default: the built-in one).
    #[arg(long)]
    pub gw1_config: Option<PathBuf>,
    /// Gateway 2's configuration (default: the built-in peer configuration).
    #[arg(long)]
    pub gw2_config: Option<PathBuf>,
    /// Extra arguments for both `espgw run` (e.g. "--crypto aws-lc"); they come last, so
    /// they override the test bed's own (e.g. "--io af-packet").
    #[arg(long, default_value = "", allow_hyphen_values = true)]
    pub run_args: String,
    /// The command that starts a gateway, in place of the `espgw` beside this binary (see
    /// `gateway_binary`): words split at spaces,
    /// `run ...` follows (e.g. "setpriv --reuid espgw ... /usr/bin/espgw" to run an
    /// installed binary without root). The gateways must be able to create their control
    /// sockets in /run/espgw-testbed.
    #[arg(long)]
    pub gateway_cmd: Option<String>,
    /// The user the gateways switch to once their ports are open (`espgw run --user`);
    /// their configurations and state are given to it. Default: `nobody`, or none with
    /// --gateway-cmd (which then decides).
    #[arg(long)]
    pub gateway_user: Option<String>,
    /// Where the espgw gateways' SAs come from: the built-in static ones, or IKEv2
    /// through strongSwan's charon and the kernel-espgw plugin (PSK).
    #[arg(long, value_enum, default_value = "static")]
    pub keying: Keying,
    /// With --keying ike: gateway 2 as espgw, or as stock strongSwan (kernel-libipsec).
    #[arg(long, value_enum, default_value = "espgw")]
    pub peer: Peer,
    /// With --keying ike: how the gateways authenticate.
    #[arg(long, value_enum, default_value = "psk")]
    pub auth: Auth,
    /// With --keying ike: gateway 1 behind a NAT (a namespace with an nftables
    /// masquerade: 198.18.0.0/24 seen as 192.0.2.100); IKE detects it and ESP goes in
    /// UDP 4500.
    #[arg(long)]
    pub nat: bool,
    /// MTU of the transport network between the gateways (their north interfaces, the WAN
    /// bridge's ports and, with --nat, the NAT box's). 1500: ESP around a 1500-byte packet
    /// does not fit, so the gateways fragment it before encrypting (two ESP packets per
    /// packet); 1600 or more: a backhaul sized for IPsec, every packet goes as one.
    #[arg(long, default_value_t = 1500, value_parser = clap::value_parser!(u16).range(1280..=3000))]
    pub wan_mtu: u16,
    /// CPUs for gateway 1's workers (`espgw run --cpus`, e.g. "1-4"); default: unpinned
    /// (or as --run-args says).
    #[arg(long)]
    pub gw1_cpus: Option<espgw_io::cpu_list::CpuList>,
    /// CPUs for gateway 2's workers.
    #[arg(long)]
    pub gw2_cpus: Option<espgw_io::cpu_list::CpuList>,
    /// Every protect policy of the built-in configurations names a set of --workers SAs,
    /// one per worker (`per_worker_sas`, RFC 9611's per-resource SAs): gateway 1's worker w
    /// seals with SA w, and gateway 2 keeps a replay window per SA. With --fanout hash (one
    /// SA spread by flow hash interleaves its numbers on the wire).
    #[arg(long)]
    pub per_worker_sas: bool,
    /// Every SA of the built-in configurations with this replay window (packets; default
    /// as configured, 1024); with --keying ike, charon's `replay_window`, which it gives
    /// the SAs it installs (default 1024 on the test bed; charon's own is 32). Gateway 2
    /// reads an SA on a queue per gateway-1 worker; a window deeper than a queue's ring
    /// keeps numbers that wait in one ring while the others move the window on.
    #[arg(long)]
    pub replay_window: Option<u32>,
}

impl Default for UpArgs {
    fn default() -> Self {
        UpArgs {
            dut: Dut::Espgw,
            io: espgw::IoChoice::Auto,
            workers: 1,
            queues: 1,
            fanout: espgw::FanoutArg::Auto,
            gw1_config: None,
            gw2_config: None,
            run_args: String::new(),
            gateway_cmd: None,
            gateway_user: None,
            keying: Keying::Static,
            peer: Peer::Espgw,
            auth: Auth::Psk,
            nat: false,
            wan_mtu: 1500,
            gw1_cpus: None,
            gw2_cpus: None,
            per_worker_sas: false,
            replay_window: None,
        }
    }
}

fn ns(name: &str) -> String {
    format!("{PREFIX}-{name}")
}

fn run_cmd(args: &[&str]) -> Result<String, String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if !out.status.success() {
        return Err(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Runs a command inside namespace `n`.
fn in_ns(n: &str, args: &[&str]) -> Result<String, String> {
    let nsn = ns(n);
    let mut v = vec!["ip", "netns", "exec", nsn.as_str()];
    v.extend_from_slice(args);
    run_cmd(&v)
}

fn sysctl(n: &str, kv: &str) -> Result<(), String> {
    in_ns(n, &["sysctl", "-q", "-w", kv]).map(|_| ())
}

/// Turns off segmentation and checksum offloads on a host interface: the gateways see
/// frames as they would on a wire (complete checksums, no 64 KiB super-frames).
fn plain_frames(n: &str, dev: &str) {
    let _ = in_ns(
        n,
        &[
            "ethtool", "-K", dev, "tx", "off", "rx", "off", "tso", "off", "gso", "off", "gro",
            "off",
        ],
    );
}

fn veth(
    a_ns: &str,
    a: &str,
    a_mac: &str,
    b_ns: &str,
    b: &str,
    b_mac: &str,
    q: usize,
) -> Result<(), String> {
    let (an, bn, qs) = (ns(a_ns), ns(b_ns), q.to_string());
    run_cmd(&[
        "ip",
        "link",
        "add",
        a,
        "netns",
        &an,
        "numtxqueues",
        &qs,
        "numrxqueues",
        &qs,
        "address",
        a_mac,
        "type",
        "veth",
        "peer",
        "name",
        b,
        "netns",
        &bn,
        "numtxqueues",
        &qs,
        "numrxqueues",
        &qs,
        "address",
        b_mac,
    ])?;
    Ok(())
}

/// Writes a file only its owner may read (a configuration: it holds keys).
fn write_private(path: &Path, text: &str) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)?;
    // An older file keeps its mode through `open`: set it.
    f.set_permissions(std::fs::Permissions::from_mode(0o600))?;
    f.write_all(text.as_bytes())
}

/// The state directory's file for `what`.
fn state(what: &str) -> PathBuf {
    Path::new(STATE_DIR).join(what)
}

pub fn control_path(gw: &str) -> PathBuf {
    state(&format!("{gw}.sock"))
}

/// The test bed needs iproute2, ethtool (to turn offloads off) and ping.
fn ensure_tools() -> Result<(), String> {
    ensure_packages(&[
        ("ip", "iproute2"),
        ("ethtool", "ethtool"),
        ("ping", "iputils-ping"),
    ])
}

/// Builds the test bed and starts its gateways.
pub fn up(a: &UpArgs) -> Result<(), String> {
    ensure_tools()?;
    down_quiet();
    std::fs::create_dir_all(STATE_DIR).map_err(|e| format!("{STATE_DIR}: {e}"))?;
    // The gateways' user must reach its files here (each file keeps its own mode).
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(STATE_DIR, std::fs::Permissions::from_mode(0o755))
            .map_err(|e| format!("{STATE_DIR}: {e}"))?;
    }
    if a.nat && a.keying != Keying::Ike {
        return Err("--nat needs --keying ike".into());
    }
    let own_configs = a.gw1_config.is_some() || a.gw2_config.is_some();
    if a.per_worker_sas && (a.dut != Dut::Espgw || a.keying != Keying::Static || own_configs) {
        return Err(
            "--per-worker-sas changes the built-in static configurations of the espgw DUT \
             (not with --keying ike or --gw1-config/--gw2-config)"
                .into(),
        );
    }
    if a.replay_window.is_some() && (a.dut != Dut::Espgw || own_configs) {
        return Err(
            "--replay-window changes the espgw DUT's built-in static configurations, or with \
             --keying ike charon's replay_window (not with --gw1-config/--gw2-config)"
                .into(),
        );
    }
    let names: &[&str] = if a.nat { &NAMESPACES } else { &NAMESPACES[..5] };
    for n in names {
        run_cmd(&["ip", "netns", "add", &ns(n)])?;
        in_ns(n, &["ip", "link", "set", "lo", "up"])?;
    }
    let q = a.workers.max(a.queues).max(1);
    veth(
        "h1",
        "eth0",
        "02:00:00:00:00:01",
        "gw1",
        "south",
        "02:00:00:00:01:01",
        q,
    )?;
    if a.nat {
        // gw1 -- nat box -- wan (see ike.rs).
        veth(
            "gw1",
            "north",
            "02:00:00:00:01:02",
            "nat",
            "inner",
            ike::NAT_INNER_MAC,
            q,
        )?;
        veth(
            "nat",
            "outer",
            ike::NAT_OUTER_MAC,
            "wan",
            "gw1",
            "02:00:00:00:0a:01",
            q,
        )?;
    } else {
        veth(
            "gw1",
            "north",
            "02:00:00:00:01:02",
            "wan",
            "gw1",
            "02:00:00:00:0a:01",
            q,
        )?;
    }
    veth(
        "gw2",
        "north",
        "02:00:00:00:02:02",
        "wan",
        "gw2",
        "02:00:00:00:0a:02",
        q,
    )?;
    veth(
        "gw2",
        "south",
        "02:00:00:00:02:01",
        "h2",
        "eth0",
        "02:00:00:00:00:02",
        q,
    )?;
    // The transport network: a bridge, silent itself.
    sysctl("wan", "net.ipv6.conf.all.disable_ipv6=1")?;
    sysctl("wan", "net.ipv6.conf.default.disable_ipv6=1")?;
    in_ns("wan", &["ip", "link", "add", "br0", "type", "bridge"])?;
    for p in ["gw1", "gw2"] {
        in_ns("wan", &["ip", "link", "set", p, "master", "br0", "up"])?;
    }
    in_ns("wan", &["ip", "link", "set", "br0", "up"])?;
    set_wan_mtu(a.wan_mtu, a.nat)?;
    // Hosts.
    for (h, v4, v6, gw4, gw6) in [
        (
            "h1",
            "198.51.100.2/24",
            "2001:db8:100::2/64",
            "198.51.100.1",
            "2001:db8:100::1",
        ),
        (
            "h2",
            "203.0.113.2/24",
            "2001:db8:113::2/64",
            "203.0.113.1",
            "2001:db8:113::1",
        ),
    ] {
        plain_frames(h, "eth0");
        in_ns(h, &["ip", "addr", "add", v4, "dev", "eth0"])?;
        in_ns(h, &["ip", "-6", "addr", "add", v6, "dev", "eth0", "nodad"])?;
        in_ns(h, &["ip", "link", "set", "eth0", "up"])?;
        in_ns(h, &["ip", "route", "add", "default", "via", gw4])?;
        in_ns(h, &["ip", "-6", "route", "add", "default", "via", gw6])?;
    }
    match a.dut {
        Dut::Kernel => kernel_gateways(true, &["gw1", "gw2"])?,
        Dut::Espgw if a.keying == Keying::Ike => ike::gateways(a)?,
        Dut::Espgw => {
            let builtin = [
                ("gw1", builtin_config(a, espgw_config::DEFAULT_CONFIG)?),
                ("gw2", builtin_config(a, espgw_config::DEFAULT_PEER_CONFIG)?),
            ];
            espgw_gateways(a, &builtin, &|_| Vec::new())?
        }
        Dut::Strongswan => {
            kernel_gateways(false, &["gw1", "gw2"])?;
            crate::strongswan::start(&ns("gw1"), &ns("gw2"), Path::new(STATE_DIR))?;
        }
    }
    std::fs::write(state("dut"), format!("{:?}", a.dut)).map_err(|e| e.to_string())?;
    Ok(())
}

/// A configuration text the test bed made, parsed as the gateways will (its tests' check).
#[cfg(test)]
pub(crate) fn parse_native(text: &str) -> espgw_config::Config {
    use espgw_config::{parse_with, CryptoPolicy, Format};
    parse_with(
        text,
        "gw.toml",
        Some(Format::Native),
        CryptoPolicy::default(),
    )
    .unwrap_or_else(|e| panic!("{e}\n{text}"))
}

/// A built-in static configuration as --replay-window and --per-worker-sas change it.
fn builtin_config(a: &UpArgs, text: &str) -> Result<String, String> {
    let text = match a.replay_window {
        Some(w) => replay_window::with_replay_window(text, w)?,
        None => text.to_string(),
    };
    let sets = if a.per_worker_sas { a.workers } else { 1 };
    per_worker::per_worker_config(&text, sets)
}

/// Sets the MTU of every interface of the transport network (before the gateways start:
/// espgw reads a port's MTU at start-up). The bridge follows its ports.
fn set_wan_mtu(mtu: u16, nat: bool) -> Result<(), String> {
    let mut links = vec![
        ("gw1", "north"),
        ("wan", "gw1"),
        ("wan", "gw2"),
        ("gw2", "north"),
    ];
    if nat {
        links.extend([("nat", "inner"), ("nat", "outer")]);
    }
    let m = mtu.to_string();
    for (n, dev) in links {
        in_ns(n, &["ip", "link", "set", dev, "mtu", &m])?;
    }
    Ok(())
}

/// Kernel forwarding in gateways `which`; `far_routes`: also the routes to the other
/// side's hosts (the strongSwan DUT routes those through its tunnel device instead).
fn kernel_gateways(far_routes: bool, which: &[&str]) -> Result<(), String> {
    for (g, south4, south6, north4, north6, far4, far6, via4, via6) in [
        (
            "gw1",
            "198.51.100.1/24",
            "2001:db8:100::1/64",
            "192.0.2.1/24",
            "2001:db8:2::1/64",
            "203.0.113.0/24",
            "2001:db8:113::/64",
            "192.0.2.2",
            "2001:db8:2::2",
        ),
        (
            "gw2",
            "203.0.113.1/24",
            "2001:db8:113::1/64",
            "192.0.2.2/24",
            "2001:db8:2::2/64",
            "198.51.100.0/24",
            "2001:db8:100::/64",
            "192.0.2.1",
            "2001:db8:2::1",
        ),
    ] {
        if !which.contains(&g) {
            continue;
        }
        sysctl(g, "net.ipv4.ip_forward=1")?;
        sysctl(g, "net.ipv6.conf.all.forwarding=1")?;
        for (dev, a4, a6) in [("south", south4, south6), ("north", north4, north6)] {
            plain_frames(g, dev);
            in_ns(g, &["ip", "addr", "add", a4, "dev", dev])?;
            in_ns(g, &["ip", "-6", "addr", "add", a6, "dev", dev, "nodad"])?;
            in_ns(g, &["ip", "link", "set", dev, "up"])?;
        }
        if far_routes {
            in_ns(g, &["ip", "route", "add", far4, "via", via4])?;
            in_ns(g, &["ip", "-6", "route", "add", far6, "via", via6])?;
        }
    }
    Ok(())
}

/// Starts espgw in each gateway of `gws` (name, built-in configuration text, used unless
/// --gw1-config / --gw2-config names a file) with `extra` arguments for each.
fn espgw_gateways(
    a: &UpArgs,
    gws: &[(&str, String)],
    extra: &dyn Fn(&str) -> Vec<String>,
) -> Result<(), String> {
    let gateway_cmd: Vec<String> = match &a.gateway_cmd {
        Some(cmd) => cmd.split_whitespace().map(String::from).collect(),
        None => vec![gateway_binary()?],
    };
    if gateway_cmd.is_empty() {
        return Err("--gateway-cmd is empty".into());
    }
    let user = match (&a.gateway_user, &a.gateway_cmd) {
        (Some(u), _) => Some(u.clone()),
        (None, None) => Some("nobody".to_string()),
        (None, Some(_)) => None,
    };
    let account = match &user {
        Some(u) => Some(
            espgw_io::process::lookup_user(u)
                .map_err(|e| format!("--gateway-user {u}: {e}"))?
                .ok_or_else(|| format!("--gateway-user {u}: no such user"))?,
        ),
        None => None,
    };
    for (g, builtin) in gws {
        let g = *g;
        let cfg = if g == "gw1" {
            &a.gw1_config
        } else {
            &a.gw2_config
        };
        // The kernel of a gateway namespace stays out of the way: no IPv6 of its own
        // (no router solicitations or MLD on the wire), no addresses.
        sysctl(g, "net.ipv6.conf.all.disable_ipv6=1")?;
        sysctl(g, "net.ipv6.conf.default.disable_ipv6=1")?;
        for dev in ["south", "north"] {
            in_ns(g, &["ip", "link", "set", dev, "up"])?;
        }
        let cfg_path = gateway_config(g, cfg.as_deref(), builtin, account.as_ref())?;
        let mut args: Vec<String> = vec!["netns".into(), "exec".into(), ns(g)];
        args.extend(gateway_cmd.iter().cloned());
        args.extend(run_arguments(a, g, &cfg_path)?);
        if let Some(u) = &user {
            args.extend(["--user".into(), u.clone()]);
        }
        args.extend(extra(g));
        let cpus = if g == "gw1" { &a.gw1_cpus } else { &a.gw2_cpus };
        if let Some(c) = cpus {
            args.extend(["--cpus".into(), c.to_string()]);
        }
        args.extend(a.run_args.split_whitespace().map(String::from));
        let log = std::fs::File::create(state(&format!("{g}.log"))).map_err(|e| e.to_string())?;
        let child = Command::new("ip")
            .args(&args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting {g}: {e}"))?;
        std::fs::write(state(&format!("{g}.pid")), child.id().to_string())
            .map_err(|e| e.to_string())?;
    }
    let names: Vec<&str> = gws.iter().map(|(g, _)| *g).collect();
    wait_for_gateways(&names)
}

/// Gateway `g`'s configuration file: the one given, or the built-in one written to the
/// state directory, private, and given to the gateway's user (for SIGHUP and `reload`).
fn gateway_config(
    g: &str,
    given: Option<&Path>,
    builtin: &str,
    account: Option<&espgw_io::process::Account>,
) -> Result<PathBuf, String> {
    if let Some(p) = given {
        return std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()));
    }
    let p = state(&format!("{g}.toml"));
    write_private(&p, builtin).map_err(|e| format!("{}: {e}", p.display()))?;
    if let Some(a) = account {
        espgw_io::process::give_to(&p, a).map_err(|e| format!("{}: {e}", p.display()))?;
    }
    Ok(p)
}

/// `run` and its options for gateway `g` (its control socket, metrics and state directory
/// in the test bed's state directory).
fn run_arguments(a: &UpArgs, g: &str, cfg_path: &Path) -> Result<Vec<String>, String> {
    let io = match a.io {
        espgw::IoChoice::Auto => "auto",
        espgw::IoChoice::AfXdp => "af-xdp",
        espgw::IoChoice::AfPacket => "af-packet",
    };
    let fanout = a.fanout.name();
    // Each `up` starts both gateways' sequence state afresh (the demonstration keys are
    // public, and both ends start together); a gateway restarted inside one test bed
    // resumes from it.
    let seq_state = state(&format!("{g}-state"));
    if seq_state.exists() {
        std::fs::remove_dir_all(&seq_state).map_err(|e| format!("{}: {e}", seq_state.display()))?;
    }
    Ok(vec![
        "run".into(),
        "--config".into(),
        cfg_path.to_string_lossy().into(),
        "--io".into(),
        io.into(),
        "--workers".into(),
        a.workers.to_string(),
        "--fanout".into(),
        fanout.into(),
        "--control".into(),
        control_path(g).to_string_lossy().into(),
        // Each gateway in its own namespace: the same address serves both.
        "--metrics".into(),
        "127.0.0.1:9101".into(),
        "--state-dir".into(),
        seq_state.to_string_lossy().into(),
    ])
}

/// Waits (15 s at most each) until gateways `which` answer on their control sockets.
fn wait_for_gateways(which: &[&str]) -> Result<(), String> {
    for &g in which {
        let deadline = Instant::now() + Duration::from_secs(15);
        loop {
            let ok = espgw::control_request(
                &control_path(g),
                &espgw_control::ControlRequest::Show("stats".into()),
            )
            .is_ok();
            if ok {
                break;
            }
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(state(&format!("{g}.log"))).unwrap_or_default();
                return Err(format!("{g} did not start:\n{log}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    Ok(())
}

fn down_quiet() {
    for g in ["gw1", "gw2"] {
        if espgw::control_request(&control_path(g), &espgw_control::ControlRequest::Stop).is_err() {
            // Not an espgw gateway (strongSwan's charon): ask it to stop by signal.
            if let Ok(pid) = std::fs::read_to_string(state(&format!("{g}.pid"))) {
                let _ = run_cmd(&["kill", "-TERM", pid.trim()]);
            }
        }
    }
    // Wait for the gateways to exit (they detach their XDP programs on the way out), and
    // stop charon beside an espgw gateway (--keying ike) or as the strongSwan DUT.
    for g in ["gw1", "gw2"] {
        reap(&state(&format!("{g}.pid")), false);
        reap(&state(&format!("{g}-charon.pid")), true);
    }
    for n in NAMESPACES {
        let _ = run_cmd(&["ip", "netns", "del", &ns(n)]);
    }
}

/// Waits (5 s at most) for the process named in `pid_file` to exit, after SIGTERM when
/// `term`, then kills it; removes the file.
fn reap(pid_file: &Path, term: bool) {
    let Ok(pid) = std::fs::read_to_string(pid_file) else {
        return;
    };
    if term {
        let _ = run_cmd(&["kill", "-TERM", pid.trim()]);
    }
    let proc_path = format!("/proc/{}", pid.trim());
    let deadline = Instant::now() + Duration::from_secs(5);
    while Path::new(&proc_path).exists() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    if Path::new(&proc_path).exists() {
        let _ = run_cmd(&["kill", "-9", pid.trim()]);
    }
    let _ = std::fs::remove_file(pid_file);
}

/// Stops the gateways and removes every namespace (and with them their interfaces).
pub fn down() -> Result<(), String> {
    down_quiet();
    let left: Vec<String> = run_cmd(&["ip", "netns", "list"])?
        .lines()
        .filter(|l| l.starts_with(&format!("{PREFIX}-")))
        .map(String::from)
        .collect();
    if !left.is_empty() {
        return Err(format!("namespaces left behind: {}", left.join(", ")));
    }
    Ok(())
}

/// The gateway binary the test bed runs: `ESPGW_GATEWAY` if set, else the `espgw` built or
/// installed beside this `espgw-lab`, else `espgw` on the PATH.
pub fn gateway_binary() -> Result<String, String> {
    if let Some(p) = std::env::var_os("ESPGW_GATEWAY").filter(|p| !p.is_empty()) {
        return Ok(p.to_string_lossy().to_string());
    }
    let beside = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name("espgw");
    if beside.is_file() {
        return Ok(beside.to_string_lossy().to_string());
    }
    let on_path = std::env::var_os("PATH")
        .map(|p| {
            std::env::split_paths(&p)
                .map(|d| d.join("espgw"))
                .collect::<Vec<_>>()
        })
        .unwrap_or_default()
        .into_iter()
        .find(|p| p.is_file());
    on_path
        .map(|p| p.to_string_lossy().to_string())
        .ok_or_else(|| {
            "no espgw gateway binary beside espgw-lab or on the PATH: build both \
             (cargo build --release -p espgw -p espgw-lab) or set ESPGW_GATEWAY"
                .to_string()
        })
}
