//! The live gateway (`espgw run`): binds the configured ports to Linux interfaces
//! (AF_XDP, AF_PACKET or TUN), runs one worker thread per core asked for, and serves the
//! control socket and the metrics endpoint. SIGHUP or `espgw reload` applies a new
//! configuration without stopping traffic; SIGINT / SIGTERM stop it cleanly.

pub mod confine;
pub mod conn;
pub mod control;
pub mod error;
pub mod keying;
pub mod log;
pub mod metrics;
mod ports;
pub mod shared;
pub mod spread;
pub mod window_advice;
pub mod worker;

use crate::seq_store::SeqStore;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use espgw_config::{Config, Format};
use espgw_core::neighbour::NeighbourCache;
use espgw_core::Tables;
use espgw_crypto::ipsec_mb::OwnInstance;
use espgw_crypto::CryptoProvider;
use espgw_io::af_packet::{AfPacketPort, Fanout};
use espgw_io::tun::TunPort;
use espgw_io::Port;
use espgw_wire::ethernet::{format_mac, parse_mac};

use shared::{PortFacts, Shared};
use worker::Worker;

pub use error::GatewayError;
pub use spread::{BurstPacing, JoinPolicy};

pub use ports::ensure_bpffs;
use ports::open_ports;

/// Which packet I/O back-end the ports use.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum IoChoice {
    /// AF_XDP where it loads on every port, else AF_PACKET.
    Auto,
    AfXdp,
    AfPacket,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum XdpModeArg {
    /// Zero-copy where the driver offers it, else copy; on a veth read by one worker or the
    /// ordered spread (and no busy polling), generic.
    Auto,
    Copy,
    /// Generic (skb-mode) XDP.
    Generic,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum FanoutArg {
    /// Ordered with more than one worker (its workers join as the load needs them), hash
    /// with one.
    Auto,
    /// By flow hash: a flow stays on one worker.
    Hash,
    /// Round robin: one flow (and one SA) spread over every worker, interleaved on the
    /// wire (packets may leave out of order).
    RoundRobin,
    /// One socket per port that the workers read in turn: one SA spread over every
    /// worker, sequence numbers, replay windows and transmit in arrival order.
    Ordered,
}

impl FanoutArg {
    /// What `auto` means for `workers` workers; the others mean themselves.
    pub fn resolve(self, workers: usize) -> FanoutArg {
        match self {
            FanoutArg::Auto if workers > 1 => FanoutArg::Ordered,
            FanoutArg::Auto => FanoutArg::Hash,
            other => other,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            FanoutArg::Auto => "auto",
            FanoutArg::Hash => "hash",
            FanoutArg::RoundRobin => "round-robin",
            FanoutArg::Ordered => "ordered",
        }
    }
}

pub struct RunOptions {
    pub config: Option<PathBuf>,
    pub format: Option<Format>,
    pub io: IoChoice,
    pub xdp_mode: XdpModeArg,
    /// AF_XDP busy polling: (microseconds, budget); `None`: off.
    pub busy_poll: Option<(u32, u32)>,
    pub workers: Option<usize>,
    pub pin: bool,
    /// `--cpus`: worker i on the i-th CPU of the list (checked against the affinity mask).
    pub cpus: Option<Vec<usize>>,
    pub control: PathBuf,
    pub metrics: Option<std::net::SocketAddr>,
    pub fanout: FanoutArg,
    /// With the ordered spread: when workers join it.
    pub ordered_join: JoinPolicy,
    /// With the ordered spread: whether workers size their bursts by their speed.
    pub burst_pacing: BurstPacing,
    pub ring_frames: usize,
    pub state: crate::seq_store::StateArgs,
    pub user: Option<String>,
    pub seccomp: confine::SeccompArg,
    /// The SA contract's socket for an IKE daemon (none: static keys only).
    pub keying_socket: Option<PathBuf>,
    /// Besides root, the user the IKE daemon runs as.
    pub keying_user: Option<String>,
}

/// The TUN prefix of an interface name: `interface = "tun:espgw0"`.
const TUN_PREFIX: &str = "tun:";

fn sysfs(ifname: &str, what: &str) -> Result<String, String> {
    if ifname.is_empty() || ifname.contains('/') || ifname.len() > 15 {
        return Err(format!("'{ifname}' is not an interface name"));
    }
    std::fs::read_to_string(format!("/sys/class/net/{ifname}/{what}"))
        .map(|s| s.trim().to_string())
        .map_err(|e| format!("interface {ifname}: {e}"))
}

/// Reads MAC and MTU of every port's interface.
fn port_facts(cfg: &Config) -> Result<Vec<PortFacts>, GatewayError> {
    port_facts_of(cfg).map_err(GatewayError::Port)
}

fn port_facts_of(cfg: &Config) -> Result<Vec<PortFacts>, String> {
    cfg.ports
        .iter()
        .map(|p| {
            let ifname = p.interface_name();
            if let Some(tun) = ifname.strip_prefix(TUN_PREFIX) {
                return Ok(PortFacts {
                    interface: tun.to_string(),
                    kind: "tun",
                    mac: p.mac,
                    mtu: p.mtu.unwrap_or(1500),
                    tun: true,
                });
            }
            let mac = parse_mac(&sysfs(ifname, "address")?)
                .ok_or_else(|| format!("interface {ifname}: unreadable MAC address"))?;
            let mtu: u16 = sysfs(ifname, "mtu")?
                .parse()
                .map_err(|_| format!("interface {ifname}: unreadable MTU"))?;
            Ok(PortFacts {
                interface: ifname.to_string(),
                kind: "",
                mac,
                mtu,
                tun: false,
            })
        })
        .collect()
}

/// The configuration as the live gateway runs it: each port's MAC is its interface's,
/// and its MTU the smaller of the interface's and the configured one.
fn apply_facts(cfg: &mut Config, facts: &[PortFacts]) {
    for (p, f) in cfg.ports.iter_mut().zip(facts) {
        // The interface's own address is what peers see (AF_XDP and AF_PACKET send
        // whatever source MAC we write, but ARP replies must agree with it).
        p.mac = f.mac;
        p.mtu = Some(p.mtu.map_or(f.mtu, |m| m.min(f.mtu)));
    }
}

/// Builds tables for the live gateway: learned neighbours instead of default MACs, and
/// the sequence state of new SAs restored and reserved (before anything can send).
fn build_tables(
    cfg: &Config,
    provider: &dyn CryptoProvider,
    previous: Option<&Tables>,
    cache: &Arc<NeighbourCache>,
    facts: &[PortFacts],
    store: Option<&SeqStore>,
) -> Result<Tables, GatewayError> {
    let mut t = Tables::build(cfg, provider, previous)?;
    if let Some(s) = store {
        s.attach(&t)?;
    }
    t.neighbours.dynamic = Some(cache.clone());
    for (i, f) in facts.iter().enumerate() {
        if f.tun {
            t.neighbours.set_point_to_point(i);
        }
    }
    Ok(t)
}

fn load(path: &Option<PathBuf>, format: Option<Format>) -> Result<(Config, PathBuf), GatewayError> {
    let policy = crate::crypto_policy();
    if let Some(e) = path.as_deref().and_then(crate::exposed_config) {
        return Err(GatewayError::ConfigFile(e));
    }
    let (cfg, p) = match path {
        Some(p) => (espgw_config::load_with(p, format, policy)?, p.clone()),
        None => (
            espgw_config::parse_with(
                espgw_config::DEFAULT_CONFIG,
                "<built-in default>",
                Some(Format::Native),
                policy,
            )?,
            PathBuf::from("<built-in default>"),
        ),
    };
    crate::warn_about(&cfg);
    Ok((cfg, p))
}

/// A reload's file must be readable by the user the gateway became at start-up: say so
/// plainly rather than "permission denied".
fn readable_by_us(path: &Path) -> Result<(), GatewayError> {
    match std::fs::File::open(path) {
        Err(e) if e.kind() == std::io::ErrorKind::PermissionDenied => {
            let uid = espgw_io::process::effective_uid();
            let user = confine::user_name(uid);
            Err(GatewayError::ConfigFile(format!(
                "{}: not readable by the gateway's user {user} (uid {uid}), which it runs as \
                 after start-up: give the file to that user (mode 0600)",
                path.display()
            )))
        }
        _ => Ok(()),
    }
}

/// Applies the configuration at `path` (or the current file) to a running gateway. On
/// any error the running configuration stays as it was.
pub fn reload(shared: &Shared, path: Option<PathBuf>) -> Result<String, GatewayError> {
    let _g = shared.reload_lock.lock().unwrap_or_else(|e| e.into_inner());
    let res = (|| {
        let path = match path {
            Some(p) => p,
            None => shared
                .config_path
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone(),
        };
        let builtin = path == Path::new("<built-in default>");
        if !builtin {
            readable_by_us(&path)?;
        }
        let (mut cfg, path) = load(&(!builtin).then_some(path), shared.format)?;
        let same_ports = cfg.ports.len() == shared.facts.len()
            && cfg
                .ports
                .iter()
                .zip(&shared.facts)
                .all(|(p, f)| p.interface_name().trim_start_matches(TUN_PREFIX) == f.interface);
        if !same_ports {
            return Err(GatewayError::Setting(format!(
                "{}: the ports changed (a reload can change SAs, policies, routes and \
                 neighbours; new ports need a restart)",
                path.display()
            )));
        }
        apply_facts(&mut cfg, &shared.facts);
        let merged = with_negotiated(shared, &cfg)?;
        let old = shared.tables();
        let t = build_tables(
            &merged,
            shared.provider.as_ref(),
            Some(&old),
            &shared.neighbours,
            &shared.facts,
            shared.seq_store.as_ref(),
        )?;
        let kept = t
            .sas
            .iter()
            .filter(|s| old.sas.iter().any(|o| Arc::ptr_eq(&o.state, &s.state)))
            .count();
        let msg = format!(
            "reloaded {}: {} SAs ({} carried over with their sequence numbers and replay \
             windows), {} policies, {} routes",
            path.display(),
            t.sas.len(),
            kept,
            cfg.policies.len(),
            cfg.routes.len()
        );
        shared.install(t);
        // Only once the new configuration is in force: a refused reload changes nothing.
        window_advice::warn_config(&cfg, shared.window_depth.as_ref());
        *shared.config.lock().unwrap_or_else(|e| e.into_inner()) = cfg;
        *shared.config_path.lock().unwrap_or_else(|e| e.into_inner()) = path;
        Ok(msg)
    })();
    match &res {
        Ok(m) => {
            shared.reloads.fetch_add(1, Ordering::Relaxed);
            crate::info!("reload", "result" => "ok", "detail" => m);
        }
        Err(e) => {
            shared.reload_failures.fetch_add(1, Ordering::Relaxed);
            crate::error!("reload", "result" => "refused", "error" => e);
        }
    }
    res
}

/// The static configuration `cfg` with the negotiated SAs and policies added, validated.
fn with_negotiated(shared: &Shared, cfg: &Config) -> Result<Config, GatewayError> {
    let Some(k) = &shared.keying else {
        return Ok(cfg.clone());
    };
    let mut merged = cfg.clone();
    k.merge_into(&mut merged);
    merged.validate()?;
    Ok(merged)
}

/// Publishes tables built from the static configuration in force and the negotiated
/// database `db` (the caller holds `reload_lock`). Nothing changes on failure.
pub(crate) fn publish_with(
    shared: &Shared,
    db: &espgw_keying::KeyingDb,
) -> Result<(), GatewayError> {
    let mut cfg = shared
        .config
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    db.merge_into(&mut cfg);
    cfg.validate()?;
    let old = shared.tables();
    let t = build_tables(
        &cfg,
        shared.provider.as_ref(),
        Some(&old),
        &shared.neighbours,
        &shared.facts,
        shared.seq_store.as_ref(),
    )?;
    shared.install(t);
    Ok(())
}

/// The gateway's housekeeping until it stops: outbound reservations kept ahead of the
/// data path and inbound windows on disk (every 10 ms), SA events reported and the
/// neighbour cache aged (every 100 ms). A failing state directory is logged (once a second at most): the SAs then stop
/// at their ceilings and drop as `seq_unreserved` rather than reuse a number.
fn housekeeping(shared: &Shared) {
    let mut last_error: Option<Instant> = None;
    let mut round = 0u64;
    while !shared.stopping() {
        if let Some(store) = &shared.seq_store {
            if let Err(e) = store.maintain(&shared.tables()) {
                if last_error.is_none_or(|t| t.elapsed() >= Duration::from_secs(1)) {
                    crate::error!("seq_state", "error" => e);
                    last_error = Some(Instant::now());
                }
            }
        }
        if round.is_multiple_of(10) {
            report_sa_events(shared);
            if let Some(k) = &shared.keying {
                keying::tick(shared, k, &shared.tables());
            }
            shared.neighbours.expire(Instant::now());
        }
        round += 1;
        std::thread::sleep(Duration::from_millis(10));
    }
    report_sa_events(shared);
}

/// Logs one line, and counts once, for each SA that reached its soft or hard lifetime or
/// used up its sequence numbers since the last look.
fn report_sa_events(shared: &Shared) {
    let tables = shared.tables();
    for sa in &tables.sas {
        for event in sa.state.take_new_events() {
            shared.sa_events[event as usize].fetch_add(1, Ordering::Relaxed);
            if let Some(k) = &shared.keying {
                keying::sa_event(k, sa.direction, sa.spi, event);
            }
            let c = &sa.state.counters;
            crate::warn!(&format!("sa_{}", event.name()), "sa" => sa.label,
                "spi" => format!("0x{:08x}", sa.spi), "direction" => sa.direction,
                "packets" => c.packets(), "bytes" => c.bytes(),
                "last_seq" => sa.state.last_seq());
        }
    }
}

/// The SA contract's socket, where asked for, and the keying state it serves.
fn open_keying(
    opts: &RunOptions,
    shared: &mut Shared,
) -> Result<Option<keying::KeyingServer>, GatewayError> {
    let Some(path) = &opts.keying_socket else {
        return Ok(None);
    };
    let account = match &opts.keying_user {
        Some(u) => Some(
            espgw_io::process::lookup_user(u)
                .map_err(|e| GatewayError::Setting(format!("--keying-user {u}: {e}")))?
                .ok_or_else(|| GatewayError::Setting(format!("--keying-user {u}: no such user")))?,
        ),
        None => None,
    };
    let server = keying::KeyingServer::bind(path, account.as_ref())
        .map_err(|e| GatewayError::Listener(format!("keying socket {}: {e}", path.display())))?;
    shared.keying = Some(keying::Keying::new(account.map(|a| a.uid)));
    Ok(Some(server))
}

/// The CPUs the workers are pinned to, worker i to the i-th (in turn when there are
/// fewer): `--cpus` (checked at start-up by [`check_cpus`]), or with `--pin` the CPUs of
/// the affinity mask; none: unpinned.
fn worker_cores(opts: &RunOptions) -> Vec<core_affinity::CoreId> {
    if let Some(list) = &opts.cpus {
        return list
            .iter()
            .map(|&id| core_affinity::CoreId { id })
            .collect();
    }
    if !opts.pin {
        return Vec::new();
    }
    let cores = core_affinity::get_core_ids().unwrap_or_default();
    if cores.is_empty() {
        // Workers run unpinned; their AF_PACKET sockets, opened for pinned workers,
        // may then spread a flow over transmit queues.
        crate::warn!("pin_unavailable", "reason" => "no CPU list from the kernel");
    }
    cores
}

/// `--cpus` names only CPUs this process may run on: a worker pinned elsewhere would
/// silently run unpinned (the kernel refuses the affinity).
fn check_cpus(cpus: &[usize]) -> Result<(), GatewayError> {
    let allowed: Vec<usize> = core_affinity::get_core_ids()
        .unwrap_or_default()
        .iter()
        .map(|c| c.id)
        .collect();
    match cpus.iter().find(|c| !allowed.contains(c)) {
        Some(c) => Err(GatewayError::Setting(format!(
            "--cpus: CPU {c} is not one this process may run on (it may use {})",
            espgw_io::cpu_list::format_cpu_list(&allowed)
        ))),
        None => Ok(()),
    }
}

/// With several workers on intel-ipsec-mb: one private instance of the library per worker
/// (see [`OwnInstance`]: the library writes a process-wide variable on every call, a
/// cache line all the workers would otherwise share), or none where loading one fails,
/// those workers then sharing the process's instance.
fn own_crypto_instances(workers: usize, provider: &dyn CryptoProvider) -> Vec<OwnInstance> {
    if workers < 2 || !provider.name().starts_with("intel-ipsec-mb") {
        return Vec::new();
    }
    let instances: Vec<OwnInstance> = (0..workers).map_while(|_| OwnInstance::load()).collect();
    if instances.len() < workers {
        crate::warn!("crypto_instances", "loaded" => instances.len(), "workers" => workers,
            "effect" => "the other workers share the process's instance of intel-ipsec-mb");
    } else {
        crate::info!("crypto_instances", "workers" => workers,
            "library" => "intel-ipsec-mb, one instance per worker");
    }
    instances
}

/// Starts the gateway's threads (after [`confine::confine`], so each inherits its
/// credentials and filter): housekeeping, one worker per port set, control, metrics and
/// signals. Returns the handles to wait for: the workers and housekeeping.
fn spawn_threads(
    opts: &RunOptions,
    shared: &Arc<Shared>,
    set: ports::Sockets,
    mut instances: Vec<OwnInstance>,
    control: control::Server,
    metrics_listener: Option<std::net::TcpListener>,
    mut signals: signal_hook::iterator::Signals,
) -> Result<Vec<std::thread::JoinHandle<()>>, String> {
    let spawn = |name: String, f: Box<dyn FnOnce() + Send>| {
        std::thread::Builder::new()
            .name(name)
            .spawn(f)
            .map_err(|e| e.to_string())
    };
    let mut handles = Vec::new();
    let s = shared.clone();
    handles.push(spawn(
        "espgw-housekeeping".into(),
        Box::new(move || housekeeping(&s)),
    )?);
    let cores = worker_cores(opts);
    if !cores.is_empty() {
        let ids: Vec<usize> = cores.iter().map(|c| c.id).collect();
        crate::info!("pin", "workers" => shared.workers(),
            "cpus" => espgw_io::cpu_list::format_cpu_list(&ids));
    }
    for (id, (ports, spread)) in ports::per_worker(set, shared.workers(), shared.crew.clone())
        .into_iter()
        .enumerate()
    {
        let pacing = opts.burst_pacing == BurstPacing::On;
        let w = Worker::new(id, shared.clone(), ports, spread, pacing);
        let core = (!cores.is_empty()).then(|| cores[id % cores.len()]);
        let instance = instances.pop();
        handles.push(spawn(
            format!("espgw-worker-{id}"),
            Box::new(move || {
                if let Some(i) = instance {
                    i.adopt();
                }
                if let Some(c) = core {
                    core_affinity::set_for_current(c);
                }
                w.run()
            }),
        )?);
    }
    let s = shared.clone();
    spawn("espgw-control".into(), Box::new(move || control.serve(s)))?;
    if let Some(l) = metrics_listener {
        let s = shared.clone();
        spawn(
            "espgw-metrics".into(),
            Box::new(move || metrics::serve(l, s)),
        )?;
    }
    let s = shared.clone();
    spawn(
        "espgw-signals".into(),
        Box::new(move || {
            for sig in signals.forever() {
                if sig == signal_hook::consts::SIGHUP {
                    let _ = reload(&s, None);
                } else {
                    s.stop.store(true, Ordering::Relaxed);
                    break;
                }
            }
        }),
    )?;
    Ok(handles)
}

/// Runs the gateway until SIGINT, SIGTERM or `espgw stop`.
pub fn run(mut opts: RunOptions, provider: Arc<dyn CryptoProvider>) -> Result<(), GatewayError> {
    // Before any key is read: no core dump of this process will ever hold one.
    espgw_io::process::forbid_core_dumps()
        .map_err(|e| GatewayError::Confine(confine::ConfineError::CoreDumps(e)))?;
    if let Some(cpus) = &opts.cpus {
        check_cpus(cpus)?;
        opts.pin = true;
    }
    let account = confine::account(opts.user.as_deref()).map_err(GatewayError::Confine)?;
    let (mut cfg, path) = load(&opts.config, opts.format)?;
    let mut facts = port_facts(&cfg)?;
    apply_facts(&mut cfg, &facts);
    let workers = opts.workers.or(cfg.workers).unwrap_or(1);
    if !(1..=espgw_config::MAX_WORKERS).contains(&workers) {
        return Err(GatewayError::Setting(format!(
            "workers: must be 1..={}",
            espgw_config::MAX_WORKERS
        )));
    }
    opts.fanout = opts.fanout.resolve(workers);
    if workers > 1 {
        crate::info!("spread", "workers" => workers, "fanout" => opts.fanout.name(),
        "ordered_join" => if opts.fanout == FanoutArg::Ordered {
            opts.ordered_join.name()
        } else {
            "-"
        },
        "burst_pacing" => if opts.fanout == FanoutArg::Ordered {
            opts.burst_pacing.name()
        } else {
            "-"
        });
    }
    let window_depth = window_advice::depth_due(
        workers,
        opts.fanout == FanoutArg::Ordered,
        opts.ring_frames,
        opts.fanout.name(),
    );
    window_advice::warn_config(&cfg, window_depth.as_ref());
    let store = crate::seq_store::open_for(&cfg, &opts.state)?;
    let cache = Arc::new(NeighbourCache::default());
    let tables = build_tables(
        &cfg,
        provider.as_ref(),
        None,
        &cache,
        &facts,
        store.as_ref(),
    )?;
    let set = open_ports(&opts, &mut facts, workers).map_err(GatewayError::Port)?;
    for (i, f) in facts.iter().enumerate() {
        crate::info!("port", "index" => i, "name" => cfg.ports[i].name,
            "interface" => f.interface, "io" => f.kind, "role" => cfg.port_role(i).name(),
            "mac" => format_mac(&f.mac), "mtu" => f.mtu);
    }
    let n_sas = tables.sas.len();
    let mut shared = Shared::new(
        tables,
        cache,
        workers,
        cfg,
        path.clone(),
        opts.format,
        facts,
        provider.clone(),
        store,
    );
    if opts.fanout == FanoutArg::Ordered {
        shared.crew = Some(Arc::new(spread::Crew::new(workers, opts.ordered_join)));
    }
    shared.window_depth = window_depth;
    let keying_server = open_keying(&opts, &mut shared)?;
    let shared = Arc::new(shared);
    // Everything that needs privileges is opened here, before the switch.
    let control =
        control::Server::bind(&opts.control).map_err(|e| GatewayError::Listener(e.to_string()))?;
    let metrics_listener = match opts.metrics {
        Some(addr) => {
            if !addr.ip().is_loopback() {
                crate::warn!("metrics", "address" => addr,
                    "detail" => "served beyond this host: counters and SA names are visible to \
                                 anyone who can reach it (bind to 127.0.0.1 behind a proxy)");
            }
            Some(
                std::net::TcpListener::bind(addr)
                    .map_err(|e| GatewayError::Listener(format!("metrics {addr}: {e}")))?,
            )
        }
        None => None,
    };
    let signals = signal_hook::iterator::Signals::new([
        signal_hook::consts::SIGHUP,
        signal_hook::consts::SIGINT,
        signal_hook::consts::SIGTERM,
    ])
    .map_err(|e| GatewayError::Listener(format!("signals: {e}")))?;
    if let Some(a) = &account {
        if a.uid != espgw_io::process::effective_uid() {
            let state_dir = shared.seq_store.as_ref().map(|s| s.dir().to_path_buf());
            let mut give: Vec<&Path> = vec![&opts.control];
            give.extend(state_dir.as_deref());
            confine::hand_over(a, &give).map_err(GatewayError::Confine)?;
        }
    }
    // Loaded while the process may still open the library's file and map new code.
    let instances = own_crypto_instances(workers, provider.as_ref());
    confine::confine(account.as_ref(), opts.seccomp).map_err(GatewayError::Confine)?;
    if let Some(store) = &shared.seq_store {
        // The sequence state must stay writable by the user the gateway now is (a parent
        // directory it cannot enter would otherwise show only at the first renewal).
        store
            .probe()
            .map_err(|source| GatewayError::SequenceState {
                source,
                after_switch_to: Some(espgw_io::process::effective_uid()),
            })?;
    }
    let handles = spawn_threads(
        &opts,
        &shared,
        set,
        instances,
        control,
        metrics_listener,
        signals,
    )
    .map_err(GatewayError::Threads)?;
    if let Some(server) = keying_server {
        let s = shared.clone();
        std::thread::Builder::new()
            .name("espgw-keying".into())
            .spawn(move || server.serve(s))
            .map_err(|e| GatewayError::Threads(e.to_string()))?;
    }
    crate::info!("started", "config" => path.display(), "workers" => workers,
        "sas" => n_sas, "crypto" => provider.name(), "control" => opts.control.display(),
        "metrics" => opts.metrics.map(|a| a.to_string()).unwrap_or_else(|| "off".into()),
        "sequence_state" => shared.seq_store.as_ref()
            .map_or_else(|| "volatile".to_string(), |s| s.dir().display().to_string()));
    for h in handles {
        let _ = h.join();
    }
    let _ = std::fs::remove_file(&opts.control);
    if let Some(store) = &shared.seq_store {
        // Where each inbound window stands, exactly, for the next start.
        if let Err(e) = store.save_inbound(&shared.tables()) {
            crate::error!("seq_state", "error" => e);
        }
    }
    let t = shared.totals();
    crate::info!("stopped", "rx" => t.pipeline.rx_packets, "tx" => t.pipeline.tx_packets,
        "encrypted" => t.pipeline.encrypted, "decrypted" => t.pipeline.decrypted,
        "dropped" => t.pipeline.total_drops());
    // Give the log line a moment on a pipe before the process goes.
    std::thread::sleep(Duration::from_millis(10));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn file(dir: &Path, name: &str, text: &str, mode: u32) -> PathBuf {
        let p = dir.join(name);
        std::fs::write(&p, text).unwrap();
        std::fs::set_permissions(&p, std::fs::Permissions::from_mode(mode)).unwrap();
        p
    }

    /// Start-up errors keep their kind: a configuration error is the configuration's own
    /// (file, line, field, and the error chain), a file others may read is refused as such.
    #[test]
    fn load_errors_say_what_failed() {
        let dir = std::env::temp_dir().join(format!("espgw-load-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bad = file(&dir, "bad.toml", "burst = 64\nreplay_windw = 3\n", 0o600);
        match load(&Some(bad), None) {
            Err(GatewayError::Config(e)) => {
                assert_eq!((e.line, e.field.as_str()), (2, "replay_windw"));
                assert!(e.file.ends_with("bad.toml"));
            }
            other => panic!("expected a configuration error, got {other:?}"),
        }
        let err = load(&Some(file(&dir, "b2.toml", "burst = 0\n", 0o600)), None).unwrap_err();
        assert!(std::error::Error::source(&err).is_some(), "{err}");
        let open = file(&dir, "open.toml", espgw_config::DEFAULT_CONFIG, 0o644);
        match load(&Some(open), None) {
            Err(GatewayError::ConfigFile(m)) => assert!(m.contains("chmod 600"), "{m}"),
            other => panic!("expected a file permission refusal, got {other:?}"),
        }
        let (cfg, _) = load(&None, None).unwrap();
        assert_eq!(cfg.ports.len(), 2);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
