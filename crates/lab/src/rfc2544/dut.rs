//! Devices under test, each set up and torn down by the tester.
//!
//! | DUT | what | tester ports |
//! |---|---|---|
//! | `ceiling` | nothing: a veth pair straight between the tester's ports (its own limit) | `espgw-tself`: tg0, tg1 |
//! | `espgw` | the test bed's two espgw gateways, AES-128-GCM tunnel | `espgw-h1` eth0, `espgw-h2` eth0 |
//! | `kernel` | the same namespaces with plain Linux forwarding (the baseline) | same |
//! | `strongswan` | charon + kernel-libipsec in each gateway namespace, IKEv2 PSK, `aes128gcm16`, ESP in UDP 4500 | same |
//! | `standin` | a relay that drops / reorders / duplicates every Nth frame | `espgw-tstand`: tg0, tg1 |
//! | `external` | two interfaces the user names, in front of gateways the user runs | as given |
//!
//! On the test bed the tester takes the hosts' interfaces with addresses of its own
//! (.20) that the hosts' kernels do not own, so they neither answer nor forward.

use espgw_io::cpu_list::CpuList;
use std::net::IpAddr;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::standin::StandinLink;
use super::traffic::PortPlan;
use super::Rfc2544Args;
use crate::testbed;

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum DutKind {
    /// The tester's own limit: a plain veth pair, no gateway.
    Ceiling,
    Espgw,
    Strongswan,
    Kernel,
    Standin,
    External,
}

impl DutKind {
    pub fn name(&self) -> &'static str {
        match self {
            DutKind::Ceiling => "ceiling",
            DutKind::Espgw => "espgw",
            DutKind::Strongswan => "strongswan",
            DutKind::Kernel => "kernel",
            DutKind::Standin => "standin",
            DutKind::External => "external",
        }
    }
}

#[derive(clap::Args, Clone, Debug, Default)]
pub struct StandinOptions {
    /// Stand-in DUT: drop every Nth test frame (sequence numbers N-1, 2N-1, ...).
    #[arg(long, default_value_t = 0)]
    pub drop_every: u64,
    /// Stand-in DUT: hold back every Mth test frame (sequence M-2, 2M-2, ...) behind the
    /// next one.
    #[arg(long, default_value_t = 0)]
    pub reorder_every: u64,
    /// Stand-in DUT: send every Kth test frame (sequence K-1, ...) twice.
    #[arg(long, default_value_t = 0)]
    pub duplicate_every: u64,
    /// Stand-in DUT: stop relaying for `--stall-ms` after every Lth test frame (sequence
    /// L-1, ...), so that its receive ring fills and the kernel drops what does not fit.
    #[arg(long, default_value_t = 0)]
    pub stall_every: u64,
    /// Stand-in DUT: how long each stall of `--stall-every` lasts, in milliseconds.
    #[arg(long, default_value_t = 50)]
    pub stall_ms: u64,
    /// Stand-in DUT: frames in each of its receive and transmit rings.
    #[arg(long, default_value_t = 4096)]
    pub standin_ring_frames: usize,
}

#[derive(clap::Args, Clone, Debug, Default)]
pub struct ExternalOptions {
    /// External DUT: the tester's sending interface (and receiving, bidirectional).
    #[arg(long)]
    pub port_a: Option<String>,
    /// External DUT: the tester's receiving interface.
    #[arg(long)]
    pub port_b: Option<String>,
    /// Network namespaces of the two interfaces (default: the tester's own).
    #[arg(long)]
    pub netns_a: Option<String>,
    #[arg(long)]
    pub netns_b: Option<String>,
    /// The tester's address on port A, with prefix length (e.g. 198.51.100.20/24).
    #[arg(long)]
    pub addr_a: Option<String>,
    #[arg(long)]
    pub addr_b: Option<String>,
    /// The next hop from port A (the DUT's address on that link).
    #[arg(long)]
    pub gateway_a: Option<IpAddr>,
    #[arg(long)]
    pub gateway_b: Option<IpAddr>,
}

/// A DUT that is up, and the tester's side of it.
pub struct Dut {
    pub kind: DutKind,
    pub name: String,
    pub a: PortPlan,
    pub b: PortPlan,
    /// Source and destination addresses of the A-to-B flow.
    pub v4: (IpAddr, IpAddr),
    pub v6: Option<(IpAddr, IpAddr)>,
    namespaces: Vec<String>,
    helper: Option<std::process::Child>,
    /// The stand-in relay's line, to ask for its own drops (other DUTs do not count theirs
    /// where the tester can read them).
    pub standin: Option<std::sync::Arc<super::standin::StandinLink>>,
}

fn ip(s: &str) -> IpAddr {
    s.parse().expect("literal address")
}

fn sh(args: &[&str]) -> Result<(), String> {
    let out = Command::new(args[0])
        .args(&args[1..])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", args[0]))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "`{}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

fn plan(
    ns: Option<&str>,
    ifname: &str,
    a: &Rfc2544Args,
    addrs: &[&str],
    gw4: &str,
    gw6: &str,
) -> PortPlan {
    PortPlan {
        netns: ns.map(String::from),
        ifname: ifname.into(),
        io: a.io,
        addresses: addrs.iter().map(|s| s.to_string()).collect(),
        gateway4: ip(gw4),
        gateway6: a.ipv6.then(|| ip(gw6)),
        ring_frames: a.tester_ring_frames,
    }
}

/// The tester's two ports on a plain link: each answers for the other's flow
/// addresses' "gateway".
fn direct_pair(a: &Rfc2544Args, ns: &str) -> (PortPlan, PortPlan) {
    (
        plan(
            Some(ns),
            "tg0",
            a,
            &[
                "198.51.100.20/24",
                "203.0.113.21/24",
                "2001:db8:100::20/64",
                "2001:db8:113::21/64",
            ],
            "203.0.113.20",
            "2001:db8:113::20",
        ),
        plan(
            Some(ns),
            "tg1",
            a,
            &[
                "203.0.113.20/24",
                "198.51.100.21/24",
                "2001:db8:113::20/64",
                "2001:db8:100::21/64",
            ],
            "198.51.100.20",
            "2001:db8:100::20",
        ),
    )
}

fn new_ns(name: &str) -> Result<(), String> {
    let _ = sh(&["ip", "netns", "del", name]);
    sh(&["ip", "netns", "add", name])?;
    sh(&["ip", "netns", "exec", name, "ip", "link", "set", "lo", "up"])?;
    for k in ["all", "default"] {
        sh(&[
            "ip",
            "netns",
            "exec",
            name,
            "sysctl",
            "-q",
            "-w",
            &format!("net.ipv6.conf.{k}.disable_ipv6=1"),
        ])?;
    }
    Ok(())
}

/// A veth pair with `queues` receive and transmit queues each end (one per tester thread).
fn link(a_ns: &str, a: &str, b_ns: &str, b: &str, queues: u8) -> Result<(), String> {
    let q = queues.max(1).to_string();
    sh(&[
        "ip",
        "link",
        "add",
        a,
        "netns",
        a_ns,
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
        "type",
        "veth",
        "peer",
        "name",
        b,
        "netns",
        b_ns,
        "numtxqueues",
        &q,
        "numrxqueues",
        &q,
    ])?;
    for (n, d) in [(a_ns, a), (b_ns, b)] {
        let _ = sh(&[
            "ip", "netns", "exec", n, "ethtool", "-K", d, "tx", "off", "rx", "off", "tso", "off",
            "gso", "off", "gro", "off",
        ]);
        sh(&["ip", "-n", n, "link", "set", d, "up"])?;
    }
    Ok(())
}

fn flows(v6: bool) -> ((IpAddr, IpAddr), Option<(IpAddr, IpAddr)>) {
    (
        (ip("198.51.100.20"), ip("203.0.113.20")),
        v6.then(|| (ip("2001:db8:100::20"), ip("2001:db8:113::20"))),
    )
}

/// Brings a DUT up.
pub fn up(kind: DutKind, a: &Rfc2544Args) -> Result<Dut, String> {
    let (v4, v6) = flows(a.ipv6);
    let mk = |pa: PortPlan, pb: PortPlan, namespaces: Vec<String>, helper| Dut {
        kind,
        name: kind.name().into(),
        a: pa,
        b: pb,
        v4,
        v6,
        namespaces,
        helper,
        standin: None,
    };
    match kind {
        DutKind::Ceiling => {
            let ns = "espgw-tself";
            new_ns(ns)?;
            link(ns, "tg0", ns, "tg1", a.threads)?;
            let (pa, pb) = direct_pair(a, ns);
            Ok(mk(pa, pb, vec![ns.into()], None))
        }
        DutKind::Standin => {
            let (t, s) = ("espgw-tstand", "espgw-standin");
            new_ns(t)?;
            new_ns(s)?;
            link(t, "tg0", s, "s0", a.threads)?;
            link(s, "s1", t, "tg1", a.threads)?;
            let exe = std::env::current_exe().map_err(|e| e.to_string())?;
            let o = &a.standin;
            let child = Command::new("ip")
                .args(["netns", "exec", s])
                .arg(exe)
                .args(["bench", "standin", "--a", "s0", "--b", "s1"])
                .args(["--drop-every", &o.drop_every.to_string()])
                .args(["--reorder-every", &o.reorder_every.to_string()])
                .args(["--duplicate-every", &o.duplicate_every.to_string()])
                .args(["--stall-every", &o.stall_every.to_string()])
                .args(["--stall-ms", &o.stall_ms.to_string()])
                .args(["--standin-ring-frames", &o.standin_ring_frames.to_string()])
                .stdin(Stdio::piped())
                .stdout(Stdio::piped())
                .spawn()
                .map_err(|e| format!("stand-in: {e}"))?;
            let (pa, pb) = direct_pair(a, t);
            let mut d = mk(pa, pb, vec![t.into(), s.into()], Some(child));
            // The relay says "ready" once its ports are open.
            let link = StandinLink::attach(d.helper.as_mut().expect("just set"))?;
            d.standin = Some(std::sync::Arc::new(link));
            Ok(d)
        }
        DutKind::Espgw | DutKind::Kernel | DutKind::Strongswan => {
            if a.ipv6 && kind == DutKind::Strongswan {
                return Err("the strongSwan DUT is set up for IPv4 only".into());
            }
            testbed::up(&testbed::UpArgs {
                dut: match kind {
                    DutKind::Espgw => testbed::Dut::Espgw,
                    DutKind::Kernel => testbed::Dut::Kernel,
                    _ => testbed::Dut::Strongswan,
                },
                workers: a.workers,
                queues: usize::from(a.threads),
                fanout: a.fanout,
                run_args: a.espgw_args.clone(),
                wan_mtu: a.wan_mtu,
                gw1_cpus: a.gateway_cpus.as_ref().map(|g| CpuList(g.0.clone())),
                gw2_cpus: a.gateway_cpus.as_ref().map(|g| CpuList(g.1.clone())),
                per_worker_sas: a.per_worker_sas && kind == DutKind::Espgw,
                replay_window: a.replay_window.filter(|_| kind == DutKind::Espgw),
                ..Default::default()
            })?;
            let pa = plan(
                Some("espgw-h1"),
                "eth0",
                a,
                &["198.51.100.20/24", "2001:db8:100::20/64"],
                "198.51.100.1",
                "2001:db8:100::1",
            );
            let pb = plan(
                Some("espgw-h2"),
                "eth0",
                a,
                &["203.0.113.20/24", "2001:db8:113::20/64"],
                "203.0.113.1",
                "2001:db8:113::1",
            );
            Ok(mk(pa, pb, vec![], None))
        }
        DutKind::External => {
            let e = &a.external;
            let need = |v: &Option<String>, what: &str| {
                v.clone()
                    .ok_or_else(|| format!("--dut external needs --{what}"))
            };
            let (ia, ib) = (need(&e.port_a, "port-a")?, need(&e.port_b, "port-b")?);
            let (aa, ab) = (need(&e.addr_a, "addr-a")?, need(&e.addr_b, "addr-b")?);
            let ga = e.gateway_a.ok_or("--dut external needs --gateway-a")?;
            let gb = e.gateway_b.ok_or("--dut external needs --gateway-b")?;
            let addr_of = |s: &str| -> Result<IpAddr, String> {
                s.split('/')
                    .next()
                    .and_then(|x| x.parse().ok())
                    .ok_or_else(|| format!("'{s}' is not an address/prefix"))
            };
            let (sa, sb) = (addr_of(&aa)?, addr_of(&ab)?);
            let v6 = sa.is_ipv6();
            let mkplan = |ns: &Option<String>, ifname: String, addr: String, gw: IpAddr| PortPlan {
                netns: ns.clone(),
                ifname,
                io: a.io,
                addresses: vec![addr],
                gateway4: gw,
                gateway6: v6.then_some(gw),
                ring_frames: a.tester_ring_frames,
            };
            let mut d = mk(
                mkplan(&e.netns_a, ia, aa, ga),
                mkplan(&e.netns_b, ib, ab, gb),
                vec![],
                None,
            );
            if v6 {
                d.v6 = Some((sa, sb));
            } else {
                d.v4 = (sa, sb);
            }
            Ok(d)
        }
    }
}

impl Dut {
    /// Tears the DUT down; namespaces it made are removed.
    pub fn down(mut self) -> Result<(), String> {
        if let Some(mut c) = self.helper.take() {
            let _ = sh(&["kill", "-TERM", &c.id().to_string()]);
            let deadline = Instant::now() + Duration::from_secs(3);
            while Instant::now() < deadline {
                if let Ok(Some(_)) = c.try_wait() {
                    break;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = c.kill();
            let _ = c.wait();
        }
        for n in &self.namespaces {
            let _ = sh(&["ip", "netns", "del", n]);
        }
        match self.kind {
            DutKind::Espgw | DutKind::Kernel | DutKind::Strongswan => testbed::down(),
            _ => Ok(()),
        }
    }
}
