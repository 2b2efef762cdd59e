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

pub const PREFIX: &str = "espgw";
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
    /// How AF_PACKET spreads traffic over workers.
    #[arg(long, value_enum, default_value = "hash")]
    pub fanout: espgw::FanoutArg,
    /// Gateway 1's configuration (default: the built-in one).
    #[arg(long)]
    pub gw1_config: Option<PathBuf>,
    /// Gateway 2's configuration (default: the built-in peer configuration).
    #[arg(long)]
    pub gw2_config: Option<PathBuf>,
    /// Extra arguments for both `espgw run` (e.g. "--crypto aws-lc").
    #[arg(long, default_value = "")]
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
}

impl Default for UpArgs {
    fn default() -> Self {
        UpArgs {
            dut: Dut::Espgw,
            io: espgw::IoChoice::Auto,
            workers: 1,
            fanout: espgw::FanoutArg::Hash,
            gw1_config: None,
            gw2_config: None,
            run_args: String::new(),
            gateway_cmd: None,
            gateway_user: None,
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

fn have(tool: &str) -> bool {
    if tool.starts_with('/') {
        return Path::new(tool).exists();
    }
    ["/usr/sbin", "/usr/bin", "/sbin", "/bin"]
        .iter()
        .any(|d| Path::new(d).join(tool).exists())
}

/// Installs the Debian packages of the tools (name or absolute path, package) that are
/// missing: the README's commands must work on a fresh machine.
pub fn ensure_packages(what: &[(&str, &str)]) -> Result<(), String> {
    let mut missing: Vec<&str> = what
        .iter()
        .filter(|(t, _)| !have(t))
        .map(|(_, p)| *p)
        .collect();
    missing.dedup();
    if missing.is_empty() {
        return Ok(());
    }
    if !have("apt-get") {
        return Err(format!("needs the packages: {}", missing.join(" ")));
    }
    println!("installing {} (apt-get)", missing.join(" "));
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdout(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    let mut install = vec!["install", "-y", "-q", "--no-install-recommends"];
    install.extend_from_slice(&missing);
    // A fresh machine may not have package lists yet: update once and retry.
    let ok = apt(&install) || (apt(&["update", "-qq"]) && apt(&install));
    if ok {
        Ok(())
    } else {
        Err(format!("could not install {}", missing.join(" ")))
    }
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
    for n in ["h1", "gw1", "wan", "gw2", "h2"] {
        run_cmd(&["ip", "netns", "add", &ns(n)])?;
        in_ns(n, &["ip", "link", "set", "lo", "up"])?;
    }
    let q = a.workers.max(1);
    veth(
        "h1",
        "eth0",
        "02:00:00:00:00:01",
        "gw1",
        "south",
        "02:00:00:00:01:01",
        q,
    )?;
    veth(
        "gw1",
        "north",
        "02:00:00:00:01:02",
        "wan",
        "gw1",
        "02:00:00:00:0a:01",
        q,
    )?;
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
        Dut::Kernel => kernel_gateways(true)?,
        Dut::Espgw => espgw_gateways(a)?,
        Dut::Strongswan => {
            kernel_gateways(false)?;
            crate::strongswan::start(&ns("gw1"), &ns("gw2"), Path::new(STATE_DIR))?;
        }
    }
    std::fs::write(state("dut"), format!("{:?}", a.dut)).map_err(|e| e.to_string())?;
    Ok(())
}

/// Kernel forwarding; `far_routes`: also the routes to the other side's hosts (the
/// strongSwan DUT routes those through its tunnel device instead).
fn kernel_gateways(far_routes: bool) -> Result<(), String> {
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

fn espgw_gateways(a: &UpArgs) -> Result<(), String> {
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
    for (g, cfg, builtin, metrics) in [
        (
            "gw1",
            &a.gw1_config,
            espgw_config::DEFAULT_CONFIG,
            "127.0.0.1:9101",
        ),
        (
            "gw2",
            &a.gw2_config,
            espgw_config::DEFAULT_PEER_CONFIG,
            "127.0.0.1:9101",
        ),
    ] {
        // The kernel of a gateway namespace stays out of the way: no IPv6 of its own
        // (no router solicitations or MLD on the wire), no addresses.
        sysctl(g, "net.ipv6.conf.all.disable_ipv6=1")?;
        sysctl(g, "net.ipv6.conf.default.disable_ipv6=1")?;
        for dev in ["south", "north"] {
            in_ns(g, &["ip", "link", "set", dev, "up"])?;
        }
        let cfg_path = match cfg {
            Some(p) => std::fs::canonicalize(p).map_err(|e| format!("{}: {e}", p.display()))?,
            None => {
                let p = state(&format!("{g}.toml"));
                write_private(&p, builtin).map_err(|e| format!("{}: {e}", p.display()))?;
                // Readable by the gateway after its switch, for SIGHUP and `reload`.
                if let Some(a) = &account {
                    espgw_io::process::give_to(&p, a)
                        .map_err(|e| format!("{}: {e}", p.display()))?;
                }
                p
            }
        };
        let log = std::fs::File::create(state(&format!("{g}.log"))).map_err(|e| e.to_string())?;
        let io = match a.io {
            espgw::IoChoice::Auto => "auto",
            espgw::IoChoice::AfXdp => "af-xdp",
            espgw::IoChoice::AfPacket => "af-packet",
        };
        let fanout = match a.fanout {
            espgw::FanoutArg::Hash => "hash",
            espgw::FanoutArg::RoundRobin => "round-robin",
        };
        let nsn = ns(g);
        let ctl = control_path(g);
        // Each `up` starts both gateways' sequence state afresh (the demonstration keys
        // are public, and both ends start together); a gateway restarted inside one test
        // bed resumes from it.
        let seq_state = state(&format!("{g}-state"));
        if seq_state.exists() {
            std::fs::remove_dir_all(&seq_state)
                .map_err(|e| format!("{}: {e}", seq_state.display()))?;
        }
        let mut args: Vec<String> = vec!["netns".into(), "exec".into(), nsn];
        args.extend(gateway_cmd.iter().cloned());
        args.extend([
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
            ctl.to_string_lossy().into(),
            "--metrics".into(),
            metrics.into(),
            "--state-dir".into(),
            seq_state.to_string_lossy().into(),
        ]);
        if let Some(u) = &user {
            args.extend(["--user".into(), u.clone()]);
        }
        args.extend(a.run_args.split_whitespace().map(String::from));
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
    for g in ["gw1", "gw2"] {
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
    // Wait for the gateways to exit (they detach their XDP programs on the way out).
    for g in ["gw1", "gw2"] {
        if let Ok(pid) = std::fs::read_to_string(state(&format!("{g}.pid"))) {
            let proc_path = format!("/proc/{}", pid.trim());
            let deadline = Instant::now() + Duration::from_secs(5);
            while Path::new(&proc_path).exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            if Path::new(&proc_path).exists() {
                let _ = run_cmd(&["kill", "-9", pid.trim()]);
            }
            let _ = std::fs::remove_file(state(&format!("{g}.pid")));
        }
    }
    for n in ["h1", "gw1", "wan", "gw2", "h2"] {
        let _ = run_cmd(&["ip", "netns", "del", &ns(n)]);
    }
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

/// Frames seen on an interface, by kind.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct WatchCounts {
    pub frames: u64,
    pub esp: u64,
    pub esp_in_udp: u64,
    pub arp: u64,
    pub ipv6_nd: u64,
    pub plaintext_ip: u64,
    pub other: u64,
}

/// Counts frames on `ifname` (in the current namespace) for `seconds`.
pub fn watch(ifname: &str, seconds: f64) -> Result<WatchCounts, String> {
    use espgw_core::packet::PacketPool;
    use espgw_io::af_packet::AfPacketPort;
    use espgw_io::Port;
    let mut port = AfPacketPort::open(ifname, 1024, None).map_err(|e| e.to_string())?;
    let mut pool = PacketPool::new(256);
    let mut v = Vec::new();
    let mut c = WatchCounts::default();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < end {
        let n = port
            .rx_burst(&mut pool, &mut v, 256)
            .map_err(|e| e.to_string())?;
        if n == 0 {
            espgw_io::poll::wait_readable(&[port.poll_fd().unwrap_or(-1)], 10);
        }
        for p in v.drain(..) {
            c.frames += 1;
            classify_frame(p.data(), &mut c);
            pool.put(p);
        }
    }
    Ok(c)
}

fn classify_frame(d: &[u8], c: &mut WatchCounts) {
    let et = d.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]));
    match et {
        Some(0x0806) => c.arp += 1,
        Some(0x0800) => {
            let ihl = d.get(14).map_or(20, |b| usize::from(b & 15) * 4);
            match d.get(23) {
                Some(50) => c.esp += 1,
                Some(17) => {
                    let dport = d
                        .get(14 + ihl + 2..14 + ihl + 4)
                        .map(|b| u16::from_be_bytes([b[0], b[1]]));
                    if dport == Some(4500) {
                        c.esp_in_udp += 1
                    } else {
                        c.plaintext_ip += 1
                    }
                }
                _ => c.plaintext_ip += 1,
            }
        }
        Some(0x86dd) => match (d.get(20), d.get(54)) {
            (Some(50), _) => c.esp += 1,
            (Some(58), Some(133..=137)) => c.ipv6_nd += 1,
            _ => c.plaintext_ip += 1,
        },
        _ => c.other += 1,
    }
}

/// What a UDP receive run counted.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct UdpReport {
    pub packets: u64,
    pub bytes: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub reordered: u64,
    pub max_seq: u64,
    pub seconds: f64,
}

/// Sends sequence-numbered UDP datagrams of `size` payload bytes to `dst` for `seconds`
/// (`rate` packets per second, 0: as fast as possible); returns how many.
pub fn udp_send(dst: SocketAddr, size: usize, seconds: f64, rate: u64) -> Result<u64, String> {
    let bind: SocketAddr = if dst.is_ipv4() {
        "0.0.0.0:0".parse().map_err(|_| "addr")?
    } else {
        "[::]:0".parse().map_err(|_| "addr")?
    };
    let s = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; size.max(16)];
    buf[8..16].copy_from_slice(b"espgwseq");
    let start = Instant::now();
    let end = Duration::from_secs_f64(seconds);
    let mut seq = 0u64;
    loop {
        let el = start.elapsed();
        if el >= end {
            break;
        }
        if rate > 0 {
            let due = (el.as_secs_f64() * rate as f64) as u64;
            if seq >= due {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
        }
        seq += 1;
        buf[..8].copy_from_slice(&seq.to_be_bytes());
        // A full socket buffer (ENOBUFS) is the sender's own limit, not a loss in the
        // network: that datagram is not counted as sent.
        if s.send_to(&buf, dst).is_err() {
            seq -= 1;
        }
    }
    Ok(seq)
}

/// Receives datagrams on `port` until `seconds` pass with `idle` seconds of quiet at the
/// end, counting loss, duplicates and reordering by sequence number.
pub fn udp_recv(port: u16, v6: bool, seconds: f64) -> Result<UdpReport, String> {
    let bind: SocketAddr = if v6 {
        SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port))
    } else {
        SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, port))
    };
    let s = UdpSocket::bind(bind).map_err(|e| format!("bind {bind}: {e}"))?;
    // A deep receive buffer (up to net.core.rmem_max): the receiver must not be where
    // packets are lost when the sender's pacing bunches them.
    let s = {
        let s2 = socket2::Socket::from(s);
        let _ = s2.set_recv_buffer_size(32 << 20);
        UdpSocket::from(s2)
    };
    s.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| e.to_string())?;
    let mut seen = vec![0u64; 1 << 16];
    let mut r = UdpReport::default();
    let mut buf = vec![0u8; 65536];
    let start = Instant::now();
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut max_seen = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        let n = match s.recv(&mut buf) {
            Ok(n) => n,
            Err(_) => continue,
        };
        if n < 16 || &buf[8..16] != b"espgwseq" {
            continue;
        }
        let now = Instant::now();
        first.get_or_insert(now);
        last = now;
        let seq = u64::from_be_bytes(buf[..8].try_into().unwrap_or([0; 8]));
        let idx = (seq as usize / 64) % seen.len();
        let bit = 1u64 << (seq % 64);
        if seen[idx] & bit != 0 && seq + (seen.len() as u64 * 64) > max_seen {
            r.duplicates += 1;
            continue;
        }
        seen[idx] |= bit;
        if seq < max_seen {
            r.reordered += 1;
        }
        max_seen = max_seen.max(seq);
        r.packets += 1;
        r.bytes += n as u64;
    }
    r.max_seq = max_seen;
    r.lost = max_seen.saturating_sub(r.packets);
    r.seconds = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    Ok(r)
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

fn self_exe() -> Result<String, String> {
    Ok(std::env::current_exe()
        .map_err(|e| e.to_string())?
        .to_string_lossy()
        .to_string())
}

/// Starts `espgw-lab testbed SUB ...` inside namespace `n` in the background.
fn spawn_in(n: &str, sub: &[&str]) -> Result<std::process::Child, String> {
    let exe = self_exe()?;
    let nsn = ns(n);
    let mut args = vec!["netns", "exec", nsn.as_str(), exe.as_str(), "testbed"];
    args.extend_from_slice(sub);
    Command::new("ip")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())
}

fn wait_json(child: std::process::Child) -> Result<serde_json::Value, String> {
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("bad JSON from helper: {e}"))
}

/// One measured UDP run from h1 to h2 (`v6`: over IPv6), frames of `frame` bytes
/// (Ethernet + FCS, as RFC 2544 counts them).
fn measure_udp(frame: usize, v6: bool, seconds: f64) -> Result<(u64, UdpReport), String> {
    let ip_hdr = if v6 { 40 } else { 20 };
    let payload = frame.saturating_sub(18 + ip_hdr + 8).max(16);
    let port = if v6 { "9002" } else { "9001" };
    let recv_secs = format!("{}", seconds + 2.0);
    let mut rx_args = vec!["udp-recv", "--port", port, "--seconds", recv_secs.as_str()];
    if v6 {
        rx_args.push("--v6");
    }
    let rx = spawn_in("h2", &rx_args)?;
    std::thread::sleep(Duration::from_millis(300));
    let dst = if v6 {
        format!("[2001:db8:113::2]:{port}")
    } else {
        format!("203.0.113.2:{port}")
    };
    let secs = seconds.to_string();
    let size = payload.to_string();
    let tx = spawn_in(
        "h1",
        &[
            "udp-send",
            "--dst",
            &dst,
            "--size",
            &size,
            "--seconds",
            &secs,
        ],
    )?;
    let sent = wait_json(tx)?["sent"].as_u64().unwrap_or(0);
    let r: UdpReport =
        serde_json::from_value(wait_json(rx)?).map_err(|e| format!("bad receiver report: {e}"))?;
    Ok((sent, r))
}

fn ping(from: &str, dst: &str) -> Result<String, String> {
    let out = in_ns(from, &["ping", "-c", "5", "-i", "0.2", "-W", "2", dst])?;
    Ok(out
        .lines()
        .filter(|l| l.contains("packets transmitted") || l.starts_with("rtt"))
        .collect::<Vec<_>>()
        .join("; "))
}

/// The README's main command: builds the test bed with the built-in configuration,
/// pings and sends UDP through it while watching the transport link, prints what it
/// measured, and tears everything down.
pub fn demo(a: &UpArgs, seconds: f64) -> Result<(), String> {
    println!("espgw test bed: h1 -- gw1 == ESP over wan == gw2 -- h2 (namespaces {PREFIX}-*)");
    up(a)?;
    let res = demo_traffic(a, seconds);
    let logs = ["gw1", "gw2"]
        .map(|g| std::fs::read_to_string(state(&format!("{g}.log"))).unwrap_or_default());
    let d = down();
    if res.is_err() {
        for (g, l) in ["gw1", "gw2"].iter().zip(logs.iter()) {
            eprintln!("--- {g} log\n{l}");
        }
    }
    res?;
    d?;
    println!("test bed removed");
    Ok(())
}

fn demo_traffic(a: &UpArgs, seconds: f64) -> Result<(), String> {
    let io = std::fs::read_to_string(state("gw1.log"))
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|x| x.contains("event=port"))
                .and_then(|x| x.split_whitespace().find(|w| w.starts_with("io=")))
                .map(|w| w.trim_start_matches("io=").to_string())
        })
        .unwrap_or_else(|| "-".into());
    println!(
        "dut: {:?}, ports: {io}, workers per gateway: {}",
        a.dut, a.workers
    );
    let watch_secs = format!("{}", 4.0 + 4.0 * (seconds + 2.5));
    let watcher = spawn_in(
        "wan",
        &["watch", "--interface", "br0", "--seconds", &watch_secs],
    )?;
    std::thread::sleep(Duration::from_millis(300));
    println!("ping h1 -> h2 (IPv4): {}", ping("h1", "203.0.113.2")?);
    println!("ping h1 -> h2 (IPv6): {}", ping("h1", "2001:db8:113::2")?);
    let mut rows = Vec::new();
    for (frame, v6) in [(64usize, false), (1400, false), (64, true), (1400, true)] {
        let (sent, r) = measure_udp(frame, v6, seconds)?;
        let secs = seconds.max(1e-9);
        let pps = r.packets as f64 / secs;
        let mbps = pps * frame as f64 * 8.0 / 1e6;
        let loss = if sent > 0 {
            100.0 * (sent.saturating_sub(r.packets)) as f64 / sent as f64
        } else {
            0.0
        };
        rows.push(format!(
            "  {:<5} {:>5} B   sent {:>9.0} pps   received {:>9.0} pps   {:>8.1} Mbit/s   loss {:>5.2}%",
            if v6 { "IPv6" } else { "IPv4" },
            frame,
            sent as f64 / secs,
            pps,
            mbps,
            loss
        ));
    }
    println!("UDP h1 -> h2, {seconds} s per run, as fast as the sender goes (frame sizes count Ethernet header and FCS):");
    for r in rows {
        println!("{r}");
    }
    let w = wait_json(watcher)?;
    let esp = w["esp"].as_u64().unwrap_or(0) + w["esp_in_udp"].as_u64().unwrap_or(0);
    let plain = w["plaintext_ip"].as_u64().unwrap_or(0);
    println!(
        "transport link (wan br0): {} frames: {} ESP, {} ARP, {} plaintext IP, {} other",
        w["frames"], esp, w["arp"], plain, w["other"]
    );
    if a.dut == Dut::Espgw {
        if plain > 0 || esp == 0 {
            return Err(format!(
                "the transport link carried {plain} plaintext IP frames and {esp} ESP frames"
            ));
        }
        println!("the transport link carried only ESP (and ARP)");
        for g in ["gw1", "gw2"] {
            let s = espgw::control_request(
                &control_path(g),
                &espgw_control::ControlRequest::Show("stats".into()),
            )?;
            println!(
                "{g}: encrypted {} decrypted {} dropped {}",
                s["encrypted"], s["decrypted"], s["drops"]
            );
        }
    }
    Ok(())
}
