//! Opening the configured ports: AF_XDP (one socket per receive queue, each worker reading
//! its share of the queues) where it loads, else AF_PACKET, and TUN; bpffs mounted for
//! AF_XDP's pinned objects. With `--fanout ordered`, one socket per port that every worker
//! shares.

use super::spread::{Crew, JoinPolicy};
use super::worker::{SharedSocket, WorkerPort};
use super::*;
use espgw_core::order::BurstOrder;
use espgw_io::queue_set::one_port;

/// Makes sure a BPF filesystem is mounted where libxdp keeps its pinned programs
/// (`ip netns exec` gives each namespace a fresh /sys without it).
pub fn ensure_bpffs() {
    let mounted = std::fs::read_to_string("/proc/self/mounts")
        .map(|m| {
            m.lines()
                .any(|l| l.split_whitespace().nth(1) == Some("/sys/fs/bpf"))
        })
        .unwrap_or(false);
    if !mounted {
        let _ = std::process::Command::new("mount")
            .args(["-t", "bpf", "bpf", "/sys/fs/bpf"])
            .status();
    }
}

pub(super) fn rx_queues(ifname: &str) -> usize {
    std::fs::read_dir(format!("/sys/class/net/{ifname}/queues"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .filter(|e| e.file_name().to_string_lossy().starts_with("rx-"))
                .count()
        })
        .unwrap_or(1)
}

pub(super) type PortSet = Vec<Vec<Option<Box<dyn Port + Send>>>>;

fn xdp_mode(mode: XdpModeArg) -> espgw_io::af_xdp::XdpMode {
    use espgw_io::af_xdp::XdpMode;
    match mode {
        XdpModeArg::Auto => XdpMode::Auto,
        XdpModeArg::Copy => XdpMode::Copy,
        XdpModeArg::Generic => XdpMode::Generic,
    }
}

/// How the gateway's AF_XDP sockets are opened.
#[derive(Clone, Copy)]
pub(super) struct XdpSettings {
    pub mode: XdpModeArg,
    pub frames: usize,
    /// Busy polling: (microseconds, budget).
    pub busy_poll: Option<(u32, u32)>,
}

/// The settings for `ifname`'s sockets: as asked, except that `auto` on a veth served by
/// one worker without busy polling means generic XDP. veth's native XDP first copies each
/// frame the peer sends into a page of its own before the program sees it, then AF_XDP
/// copies it again; generic XDP runs on the frame as it came. Side by side on the test bed
/// (zero-loss 64-byte frames/s, one worker per gateway) generic forwarded 1.4-1.7x what
/// native copy mode did, and the same at 512 and 1518 bytes. It is not for several
/// workers with sockets of their own: without native XDP veth does not record a frame's
/// queue, so every frame reaches queue 0's socket and the other workers would idle (the
/// ordered spread's workers all read queue 0's socket, and count as one here); nor for
/// busy polling, which polls the native mode's NAPI.
fn settings_for(ifname: &str, x: XdpSettings, workers: usize) -> XdpSettings {
    let veth = || espgw_io::netns::driver(ifname).is_ok_and(|d| d == "veth");
    if x.mode == XdpModeArg::Auto && workers == 1 && x.busy_poll.is_none() && veth() {
        crate::info!("af_xdp_mode", "interface" => ifname, "mode" => "generic",
            "reason" => "veth read by one worker or the ordered spread");
        return XdpSettings {
            mode: XdpModeArg::Generic,
            ..x
        };
    }
    x
}

/// Keeps VLAN tags in the frames the XDP program sees on every AF_XDP interface, for it to
/// hand frames of other VLANs to the kernel: a NIC's receive VLAN offloads (802.1Q, 802.1ad)
/// would take the tag out, and such a frame would look like the port's own. They stay off
/// after the gateway stops (it has given up the privilege to turn them back on). Where the
/// driver keeps one on the gateway says so and goes on.
fn keep_vlan_tags(facts: &[PortFacts]) {
    use espgw_io::ethtool::{keep_vlan_tags_in_frames, TurnedOff};
    const EFFECT: &str = "frames of other VLANs may reach the port with their tags taken out";
    for f in facts.iter().filter(|f| !f.tun) {
        match keep_vlan_tags_in_frames(&f.interface) {
            Ok(done) => {
                for (feature, d) in done {
                    match d {
                        TurnedOff::Now => crate::info!("af_xdp_rx_vlan_offload_off",
                            "interface" => f.interface, "feature" => feature),
                        TurnedOff::StaysOn => crate::warn!("af_xdp_rx_vlan_offload_on",
                            "interface" => f.interface, "feature" => feature,
                            "effect" => EFFECT),
                        TurnedOff::AlreadyOff | TurnedOff::Unknown => {}
                    }
                }
            }
            Err(e) => crate::warn!("af_xdp_rx_vlan_offload_on", "interface" => f.interface,
                "error" => e, "effect" => EFFECT),
        }
    }
}

/// One AF_XDP socket on queue `q` of `ifname` (whose MAC is `mac`), busy polling if asked,
/// dropping unicast frames for other MACs and frames tagged for a VLAN.
fn open_xdp_queue(
    ifname: &str,
    mac: espgw_wire::ethernet::MacAddr,
    q: usize,
    x: XdpSettings,
) -> Result<espgw_io::af_xdp::AfXdpPort, String> {
    let mut p = espgw_io::af_xdp::AfXdpPort::open(
        ifname,
        q as u32,
        xdp_mode(x.mode),
        x.frames.max(256) as u32,
    )
    .map_err(|e| e.to_string())?;
    p.drop_other_hosts(mac);
    p.drop_vlan_tagged();
    crate::info!("af_xdp_umem", "interface" => ifname, "queue" => q,
        "frames" => x.frames.max(256), "frame_bytes" => p.frame_size());
    if let Some((usecs, budget)) = x.busy_poll {
        let set = p.set_busy_poll(usecs, budget).map_err(|e| e.to_string())?;
        crate::info!("af_xdp_busy_poll", "interface" => ifname, "queue" => q,
            "busy_poll_us" => set, "budget" => budget);
    }
    Ok(p)
}

pub(super) fn open_xdp(
    facts: &[PortFacts],
    workers: usize,
    x: XdpSettings,
) -> Result<PortSet, String> {
    ensure_bpffs();
    keep_vlan_tags(facts);
    for f in facts.iter().filter(|f| !f.tun) {
        let q = rx_queues(&f.interface);
        if q < workers {
            return Err(format!(
                "interface {} has {q} receive queue(s); AF_XDP needs one per worker ({workers})",
                f.interface
            ));
        }
    }
    let mut set: PortSet = Vec::new();
    for w in 0..workers {
        let mut ports: Vec<Option<Box<dyn Port + Send>>> = Vec::new();
        for f in facts {
            if f.tun {
                ports.push(None);
                continue;
            }
            // Worker w reads queues w, w + workers, ...: a frame on any queue is read
            // (the sender picks the queue; an interface may have more than workers).
            let x = settings_for(&f.interface, x, workers);
            let mut queues = Vec::new();
            for q in (w..rx_queues(&f.interface).max(1)).step_by(workers) {
                queues.push(open_xdp_queue(&f.interface, f.mac, q, x)?);
            }
            ports.push(Some(one_port(queues).expect("w < rx queues: at least one")));
        }
        set.push(ports);
    }
    Ok(set)
}

/// Opens each worker's AF_PACKET socket of every port. `cpu_per_socket` says whether
/// each socket is sent on from one CPU only (its worker pinned, the socket its own):
/// only then may it bypass the qdisc, where the kernel picks the transmit queue from
/// the sending CPU. Otherwise (workers the scheduler moves, or the ordered spread's one
/// socket sent on by every worker in turn) it sends through the qdisc, so a flow's
/// queue comes from its hash and the flow is not spread over queues that a receiver
/// may read in parallel.
pub(super) fn open_packet(
    facts: &[PortFacts],
    workers: usize,
    fanout: FanoutArg,
    frames: usize,
    cpu_per_socket: bool,
) -> Result<PortSet, String> {
    let mode = match fanout {
        FanoutArg::Hash => Fanout::Hash,
        FanoutArg::RoundRobin => Fanout::RoundRobin,
        // One socket per port (opened for one worker): no fanout group. (`auto` is
        // resolved before the ports are opened.)
        FanoutArg::Ordered | FanoutArg::Auto => Fanout::Hash,
    };
    // Fanout group ids are per network namespace; make them unique per process.
    let base = (std::process::id() as u16).wrapping_mul(16);
    let mut set: PortSet = Vec::new();
    for _ in 0..workers {
        let mut ports: Vec<Option<Box<dyn Port + Send>>> = Vec::new();
        for (i, f) in facts.iter().enumerate() {
            if f.tun {
                ports.push(None);
                continue;
            }
            let fan = (workers > 1).then_some((base.wrapping_add(i as u16), mode));
            let mut p = AfPacketPort::open(&f.interface, frames, fan).map_err(|e| e.to_string())?;
            p.drop_other_hosts();
            p.drop_vlan_tagged();
            if !cpu_per_socket {
                p.transmit_through_qdisc().map_err(|e| e.to_string())?;
            }
            ports.push(Some(Box::new(p)));
        }
        set.push(ports);
    }
    Ok(set)
}

/// The sockets the workers use.
pub(super) enum Sockets {
    /// Each worker its own socket of each port (`[worker][port]`).
    PerWorker(PortSet),
    /// The ordered spread: for each port its sockets (AF_XDP: one per receive queue;
    /// AF_PACKET and TUN: one), every worker sharing them.
    Shared(Vec<Vec<Box<dyn Port + Send>>>),
}

/// Opens the sockets: each worker's own (a TUN port: a queue each), or with the ordered
/// spread one shared set.
pub(super) fn open_ports(
    opts: &RunOptions,
    facts: &mut [PortFacts],
    workers: usize,
) -> Result<Sockets, String> {
    let ordered = opts.fanout == FanoutArg::Ordered;
    let settings = XdpSettings {
        mode: opts.xdp_mode,
        frames: opts.ring_frames,
        busy_poll: opts.busy_poll,
    };
    let xdp = |facts: &[PortFacts]| {
        if ordered {
            open_xdp_every_queue(facts, settings)
        } else {
            open_xdp(facts, workers, settings)
        }
    };
    let packet = |facts: &[PortFacts]| {
        let workers = if ordered { 1 } else { workers };
        let cpu_per_socket = opts.pin && !ordered;
        open_packet(
            facts,
            workers,
            opts.fanout,
            opts.ring_frames,
            cpu_per_socket,
        )
    };
    let mut set = match opts.io {
        IoChoice::AfXdp => xdp(facts)?,
        IoChoice::AfPacket => packet(facts)?,
        IoChoice::Auto => match xdp(facts) {
            Ok(s) => s,
            Err(e) => {
                crate::warn!("af_xdp_unavailable", "error" => e, "fallback" => "af_packet");
                packet(facts)?
            }
        },
    };
    for (i, f) in facts.iter_mut().enumerate() {
        if f.tun {
            // Each worker its own queue of a multi-queue TUN; the ordered spread's workers
            // share one socket per port, so one queue there.
            let per_worker = if ordered { 1 } else { set.len() };
            for (w, q) in open_tun(f, per_worker)?.into_iter().enumerate() {
                set[w][i] = Some(Box::new(q));
            }
            // Bring it up so the host can route into it.
            let _ = std::process::Command::new("ip")
                .args(["link", "set", &f.interface, "up"])
                .status();
        } else if let Some(Some(p)) = set[0].get(i) {
            f.kind = p.kind();
        }
    }
    if !ordered {
        return Ok(Sockets::PerWorker(set));
    }
    // [queue][port] -> [port][queue].
    let mut per_port: Vec<Vec<Box<dyn Port + Send>>> = facts.iter().map(|_| Vec::new()).collect();
    for row in set {
        for (i, p) in row.into_iter().enumerate() {
            if let (Some(p), Some(list)) = (p, per_port.get_mut(i)) {
                list.push(p);
            }
        }
    }
    Ok(Sockets::Shared(per_port))
}

/// A TUN port's queues: one per worker (`workers` > 1: a multi-queue TUN), else one. An
/// interface that exists as a single-queue TUN cannot take more queues: worker 0 then
/// serves it alone, said in the log (the other workers' packets for it are dropped as
/// `tx_full`; README, "Limits").
fn open_tun(f: &PortFacts, workers: usize) -> Result<Vec<TunPort>, String> {
    if workers > 1 {
        match TunPort::open_queues(&f.interface, f.mac, workers) {
            Ok(queues) => {
                crate::info!("tun_queues", "interface" => f.interface, "queues" => queues.len());
                return Ok(queues);
            }
            Err(e) => crate::warn!(
                "tun_single_queue",
                "interface" => f.interface,
                "error" => e,
                "served_by" => "worker 0"
            ),
        }
    }
    Ok(vec![
        TunPort::open(&f.interface, f.mac).map_err(|e| e.to_string())?
    ])
}

/// The ordered spread over AF_XDP: a socket on every receive queue of every interface
/// (`[queue][port]`, `None` where an interface has fewer queues), so that no queue's
/// traffic goes unread whatever the sender's queue.
fn open_xdp_every_queue(facts: &[PortFacts], x: XdpSettings) -> Result<PortSet, String> {
    ensure_bpffs();
    keep_vlan_tags(facts);
    let queues = facts
        .iter()
        .filter(|f| !f.tun)
        .map(|f| rx_queues(&f.interface))
        .max()
        .unwrap_or(1)
        .max(1);
    // Sockets every worker reads in turn: a frame on queue 0 reaches them all, so generic
    // XDP on a veth (every frame on queue 0) serves them as it serves one worker.
    let x_of: Vec<XdpSettings> = facts
        .iter()
        .map(|f| {
            if f.tun {
                x
            } else {
                settings_for(&f.interface, x, 1)
            }
        })
        .collect();
    let mut set: PortSet = Vec::new();
    for q in 0..queues {
        let mut row: Vec<Option<Box<dyn Port + Send>>> = Vec::new();
        for (i, f) in facts.iter().enumerate() {
            if f.tun || (q > 0 && rx_queues(&f.interface) <= q) {
                row.push(None);
                continue;
            }
            row.push(Some(Box::new(open_xdp_queue(
                &f.interface,
                f.mac,
                q,
                x_of[i],
            )?)));
        }
        set.push(row);
    }
    Ok(set)
}

/// One worker's share: its access to each port, and the order of its bursts and the crew
/// that reads them (ordered spread only).
pub(super) type WorkerShare = (
    Vec<Option<WorkerPort>>,
    Option<(Arc<BurstOrder>, Arc<Crew>)>,
);

/// Hands the sockets to `workers` workers: each its own set, or with the ordered spread
/// every worker the same shared sockets, with the order of their bursts.
pub(super) fn per_worker(
    sockets: Sockets,
    workers: usize,
    crew: Option<Arc<Crew>>,
) -> Vec<WorkerShare> {
    let per_port = match sockets {
        Sockets::PerWorker(set) => {
            return set
                .into_iter()
                .map(|ports| {
                    (
                        ports.into_iter().map(|p| p.map(WorkerPort::Own)).collect(),
                        None,
                    )
                })
                .collect();
        }
        Sockets::Shared(per_port) => per_port,
    };
    let shared: Vec<Vec<SharedSocket>> = per_port
        .into_iter()
        .map(|list| {
            list.into_iter()
                .map(|p| Arc::new(std::sync::Mutex::new(p)))
                .collect()
        })
        .collect();
    let order = Arc::new(BurstOrder::for_workers(workers));
    let crew = crew.unwrap_or_else(|| Arc::new(Crew::new(workers, JoinPolicy::Always)));
    (0..workers)
        .map(|id| {
            let ports = shared
                .iter()
                .map(|sockets| {
                    (!sockets.is_empty()).then(|| WorkerPort::Shared {
                        sockets: sockets.clone(),
                        // Workers start on different queues.
                        next: id % sockets.len(),
                        report_stats: id == 0,
                    })
                })
                .collect();
            (ports, Some((order.clone(), crew.clone())))
        })
        .collect()
}
