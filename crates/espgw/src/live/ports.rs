//! Opening the configured ports: AF_XDP (one socket per worker and receive queue) where it
//! loads, else AF_PACKET, and TUN; bpffs mounted for AF_XDP's pinned objects.

use super::*;

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

pub(super) fn open_xdp(
    facts: &[PortFacts],
    workers: usize,
    mode: XdpModeArg,
    frames: usize,
) -> Result<PortSet, String> {
    use espgw_io::af_xdp::{AfXdpPort, XdpMode};
    ensure_bpffs();
    let mode = match mode {
        XdpModeArg::Auto => XdpMode::Auto,
        XdpModeArg::Copy => XdpMode::Copy,
        XdpModeArg::Generic => XdpMode::Generic,
    };
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
            let p = AfXdpPort::open(&f.interface, w as u32, mode, frames.max(256) as u32)
                .map_err(|e| e.to_string())?;
            ports.push(Some(Box::new(p)));
        }
        set.push(ports);
    }
    Ok(set)
}

pub(super) fn open_packet(
    facts: &[PortFacts],
    workers: usize,
    fanout: FanoutArg,
    frames: usize,
) -> Result<PortSet, String> {
    let mode = match fanout {
        FanoutArg::Hash => Fanout::Hash,
        FanoutArg::RoundRobin => Fanout::RoundRobin,
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
            ports.push(Some(Box::new(p)));
        }
        set.push(ports);
    }
    Ok(set)
}

/// Opens every worker's sockets; TUN ports are served by worker 0 alone.
pub(super) fn open_ports(
    opts: &RunOptions,
    facts: &mut [PortFacts],
    workers: usize,
) -> Result<PortSet, String> {
    let mut set = match opts.io {
        IoChoice::AfXdp => open_xdp(facts, workers, opts.xdp_mode, opts.ring_frames)?,
        IoChoice::AfPacket => open_packet(facts, workers, opts.fanout, opts.ring_frames)?,
        IoChoice::Auto => match open_xdp(facts, workers, opts.xdp_mode, opts.ring_frames) {
            Ok(s) => s,
            Err(e) => {
                crate::warn!("af_xdp_unavailable", "error" => e, "fallback" => "af_packet");
                open_packet(facts, workers, opts.fanout, opts.ring_frames)?
            }
        },
    };
    for (i, f) in facts.iter_mut().enumerate() {
        if f.tun {
            let p = TunPort::open(&f.interface, f.mac).map_err(|e| e.to_string())?;
            set[0][i] = Some(Box::new(p));
            // Bring it up so the host can route into it.
            let _ = std::process::Command::new("ip")
                .args(["link", "set", &f.interface, "up"])
                .status();
        } else if let Some(Some(p)) = set[0].get(i) {
            f.kind = p.kind();
        }
    }
    Ok(set)
}
