//! State the workers, the control socket and the metrics endpoint share: the current
//! table snapshot (swapped whole on reload), learned neighbours, and what each worker
//! last published of its counters.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::Instant;

use espgw_config::{Config, Format};
use espgw_core::counters::WorkerCounters;
use espgw_core::neighbour::NeighbourCache;
pub use espgw_core::node::HostCounters;
use espgw_core::Tables;
use espgw_crypto::CryptoProvider;
use espgw_io::port::PortStats;
use espgw_wire::ethernet::MacAddr;

/// What the gateway found out about an interface at start (the configuration cannot
/// change it on reload).
#[derive(Debug, Clone)]
pub struct PortFacts {
    pub interface: String,
    pub kind: &'static str,
    pub mac: MacAddr,
    pub mtu: u16,
    pub tun: bool,
}

/// One worker's published counters.
#[derive(Debug, Clone, Default)]
pub struct WorkerReport {
    pub pipeline: WorkerCounters,
    pub host: HostCounters,
    /// Per port (index as in the configuration).
    pub ports: Vec<PortStats>,
    /// In an ordered spread with burst pacing: the burst size this worker takes now.
    pub burst_limit: Option<usize>,
}

pub struct Shared {
    tables: RwLock<Arc<Tables>>,
    generation: AtomicU64,
    pub stop: AtomicBool,
    pub neighbours: Arc<NeighbourCache>,
    pub reports: Vec<Mutex<WorkerReport>>,
    /// The configuration in force (for `show policy` and reloads).
    pub config: Mutex<Config>,
    pub config_path: Mutex<PathBuf>,
    pub format: Option<Format>,
    pub facts: Vec<PortFacts>,
    pub provider: Arc<dyn CryptoProvider>,
    pub started: Instant,
    pub reloads: AtomicU64,
    pub reload_failures: AtomicU64,
    /// Serialises reloads (SIGHUP and the control socket may race).
    pub reload_lock: Mutex<()>,
    /// Where static SAs' sequence numbers are reserved and windows kept (none with
    /// `--volatile-keys`).
    pub seq_store: Option<crate::seq_store::SeqStore>,
    /// SAs that reached each [`espgw_core::sa::SaEvent`] (in its order), for metrics.
    pub sa_events: [AtomicU64; 3],
    /// The SA contract with an IKE daemon (`--keying-socket`), where enabled.
    pub keying: Option<super::keying::Keying>,
    /// With the ordered spread: which workers read the shared sockets.
    pub crew: Option<Arc<super::spread::Crew>>,
    /// The replay window advised for inbound SAs, where several workers read one SA by
    /// flow (`window_advice`); checked at reloads and for SAs an IKE daemon installs.
    pub window_depth: Option<super::window_advice::Depth>,
}

impl Shared {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        tables: Tables,
        neighbours: Arc<NeighbourCache>,
        workers: usize,
        config: Config,
        config_path: PathBuf,
        format: Option<Format>,
        facts: Vec<PortFacts>,
        provider: Arc<dyn CryptoProvider>,
        seq_store: Option<crate::seq_store::SeqStore>,
    ) -> Self {
        Shared {
            tables: RwLock::new(Arc::new(tables)),
            generation: AtomicU64::new(1),
            stop: AtomicBool::new(false),
            neighbours,
            reports: (0..workers)
                .map(|_| Mutex::new(WorkerReport::default()))
                .collect(),
            config: Mutex::new(config),
            config_path: Mutex::new(config_path),
            format,
            facts,
            provider,
            started: Instant::now(),
            reloads: AtomicU64::new(0),
            reload_failures: AtomicU64::new(0),
            reload_lock: Mutex::new(()),
            seq_store,
            sa_events: Default::default(),
            keying: None,
            crew: None,
            window_depth: None,
        }
    }

    /// How many workers report here (one report each).
    pub fn workers(&self) -> usize {
        self.reports.len()
    }

    pub fn tables(&self) -> Arc<Tables> {
        self.tables
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Changes whenever new tables are installed; workers compare it once per loop.
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    pub fn install(&self, t: Tables) {
        *self.tables.write().unwrap_or_else(|e| e.into_inner()) = Arc::new(t);
        self.generation.fetch_add(1, Ordering::AcqRel);
    }

    /// Whether the static configuration has an SA of `dir` with `spi`.
    pub fn static_sa(&self, dir: espgw_config::Direction, spi: u32) -> bool {
        self.config
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .sa(dir, spi)
            .is_some()
    }

    pub fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Every worker's report summed.
    pub fn totals(&self) -> WorkerReport {
        let mut t = WorkerReport {
            ports: vec![PortStats::default(); self.facts.len()],
            ..WorkerReport::default()
        };
        for r in &self.reports {
            let r = r.lock().unwrap_or_else(|e| e.into_inner());
            t.pipeline.add(&r.pipeline);
            t.host.add(&r.host);
            for (a, b) in t.ports.iter_mut().zip(r.ports.iter()) {
                a.add(b);
            }
        }
        t
    }
}
