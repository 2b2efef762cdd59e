//! Sequence state of static SAs on disk, so that no restart or reload ever sends a
//! sequence number twice under one key (with AES-GCM, CCM, CTR, GMAC and ChaCha20 the
//! sequence number is the nonce), and so that an inbound SA's replay window does not
//! start empty after a restart.
//!
//! One small file per SA in the state directory, named after its key material's hash
//! (`Sa::key_id`) and direction, not its SPI: a key keeps its state when its SPI changes,
//! or when its SA is removed and added again.
//!
//! - Outbound: the file records `next`, the first number not yet reserved. Before the data
//!   path may use numbers up to `c`, `next = c + 1` is written and fsync'd (file, then
//!   directory), and only then is the SA's ceiling raised to `c` (`SaState::reserve_to`).
//!   Blocks of `SeqStore::block` numbers are reserved ahead, and renewed when less than
//!   half a block is left, so the data path rarely waits; if it does reach the ceiling,
//!   packets are dropped as `seq_unreserved`, never sent with an unreserved number. A crash
//!   loses at most the rest of a block; a restart resumes at `next`.
//! - Inbound: the file records `top`, the highest number authenticated, written at most
//!   once a second and at a clean stop; a restarted SA refuses everything up to it
//!   (`ReplayWindow::restored`), so a replayed capture is dropped as `replay`.
//!
//! File I/O lives here, outside the sans-I/O core: the core only holds the ceiling.

use std::collections::HashMap;
use std::fmt;
use std::fs::{self, File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use espgw_config::Direction;
use espgw_core::replay::ReplayWindow;
use espgw_core::sa::Sa;
use espgw_core::Tables;

/// The first line of every state file: a file of another format is refused, not guessed.
const MAGIC: &str = "espgw sequence state v1";
/// How often an inbound SA's window top is written.
const INBOUND_INTERVAL: Duration = Duration::from_secs(1);

/// What went wrong with the state directory, naming the path.
#[derive(Debug)]
pub enum StoreError {
    /// The directory cannot be created, written or synced.
    Dir {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A state file cannot be read or written.
    File {
        path: PathBuf,
        source: std::io::Error,
    },
    /// A state file holds something else than this module writes: never reset silently.
    Corrupt { path: PathBuf, what: String },
    /// The store cannot be used and a static SA needs it: its nonce is its sequence
    /// number, so a restart without it would repeat nonces under its key.
    Required {
        /// Why the store cannot be used.
        cause: Box<StoreError>,
        /// The configuration file and line of the SA.
        file: String,
        /// The line of the SA in `file`.
        line: usize,
        /// The SA's name.
        sa: String,
        /// Its suite.
        suite: String,
    },
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::Dir { path, source } => {
                write!(f, "state directory {}: {source}", path.display())
            }
            StoreError::File { path, source } => {
                write!(f, "sequence state {}: {source}", path.display())
            }
            StoreError::Corrupt { path, what } => write!(
                f,
                "sequence state {}: {what} (refusing to guess; restore it, or delete it only \
                 if the SA's key is new)",
                path.display()
            ),
            StoreError::Required {
                cause,
                file,
                line,
                sa,
                suite,
            } => write!(
                f,
                "{cause}: {file}:{line}: SA {sa} uses {suite}, whose nonce is its sequence \
                 number; without a usable state directory a restart would repeat nonces under \
                 its static key, so espgw refuses to start (give --state-dir a writable \
                 directory, or --volatile-keys for a throw-away lab)"
            ),
        }
    }
}

impl std::error::Error for StoreError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            StoreError::Dir { source, .. } | StoreError::File { source, .. } => Some(source),
            StoreError::Required { cause, .. } => Some(cause.as_ref()),
            StoreError::Corrupt { .. } => None,
        }
    }
}

/// The state directory of one gateway process.
pub struct SeqStore {
    dir: PathBuf,
    /// How many sequence numbers one reservation covers.
    block: u64,
    /// Inbound tops last written, by file, and when.
    inbound: Mutex<(HashMap<PathBuf, u64>, Option<Instant>)>,
}

impl SeqStore {
    /// 2^20 numbers a reservation: at 10 Mpps on one SA, one fsync every 0.1 s; a crash
    /// skips at most that many (4096 crashes to use up a 32-bit space).
    pub const DEFAULT_BLOCK: u64 = 1 << 20;

    /// Opens (creating it, mode 0700) the state directory and proves it can be written
    /// and synced, so that a gateway that cannot persist its sequence numbers refuses to
    /// start instead of failing at its first reservation.
    pub fn open(dir: &Path, block: u64) -> Result<SeqStore, StoreError> {
        let dir_err = |source| StoreError::Dir {
            path: dir.to_path_buf(),
            source,
        };
        if !dir.is_dir() {
            fs::DirBuilder::new()
                .recursive(true)
                .mode(0o700)
                .create(dir)
                .map_err(dir_err)?;
        }
        let store = SeqStore {
            dir: dir.to_path_buf(),
            block: block.max(2),
            inbound: Mutex::new((HashMap::new(), None)),
        };
        store.probe()?;
        Ok(store)
    }

    /// Proves the directory can be written and synced now: at open, and again by the live
    /// gateway once it has switched to its unprivileged user.
    pub fn probe(&self) -> Result<(), StoreError> {
        let dir_err = |source| StoreError::Dir {
            path: self.dir.clone(),
            source,
        };
        let probe = self.dir.join(".espgw-write-probe");
        write_synced(&probe, "probe\n").map_err(dir_err)?;
        fs::remove_file(&probe).map_err(dir_err)
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path(&self, sa: &Sa) -> PathBuf {
        let id: String = sa.key_id.iter().map(|b| format!("{b:02x}")).collect();
        let dir = match sa.direction {
            Direction::Out => "out",
            Direction::In => "in",
        };
        self.dir.join(format!("{id}.{dir}"))
    }

    /// Takes over the state of every SA of `tables` that has none on disk yet (new at
    /// start-up, or added by a reload): restores where it stood and, outbound, reserves
    /// the first block. Call before the tables are published.
    pub fn attach(&self, tables: &Tables) -> Result<(), StoreError> {
        for sa in &tables.sas {
            // Negotiated SAs get fresh keys at every negotiation and are never installed
            // again after a restart (the daemon renegotiates): nothing to persist.
            if sa.state.persisted.load(Ordering::Acquire)
                || espgw_keying::db::is_negotiated(&sa.config)
            {
                continue;
            }
            let path = self.path(sa);
            let record = read_record(&path)?;
            match sa.direction {
                Direction::Out => {
                    if let Some(next) = record {
                        sa.state.resume_after(next.saturating_sub(1));
                    }
                    let last = sa.state.last_seq();
                    // Nothing may be sent until the first block is on disk.
                    sa.state.limit_to(last);
                    self.reserve(sa, &path, last)?;
                }
                Direction::In => {
                    if let Some(top) = record {
                        let mut w = sa.state.replay.lock().unwrap_or_else(|e| e.into_inner());
                        if top > w.top() {
                            *w = ReplayWindow::restored(sa.config.replay_window, top);
                        }
                    }
                }
            }
            sa.state.persisted.store(true, Ordering::Release);
        }
        Ok(())
    }

    /// Reserves the block after `from` for outbound SA `sa`: on disk first, then in memory.
    fn reserve(&self, sa: &Sa, path: &Path, from: u64) -> Result<(), StoreError> {
        let ceiling = from.saturating_add(self.block).min(sa.max_seq());
        let text = format!("{MAGIC}\nnext {}\n", ceiling.saturating_add(1));
        write_synced(path, &text).map_err(|source| StoreError::File {
            path: path.to_path_buf(),
            source,
        })?;
        sa.state.reserve_to(ceiling);
        Ok(())
    }

    /// Renews outbound reservations that are more than half used, and writes inbound tops
    /// that moved (at most once a second). Call often (the live gateway: every few
    /// milliseconds from its housekeeping thread; the offline gateway: after each burst).
    pub fn maintain(&self, tables: &Tables) -> Result<(), StoreError> {
        for sa in tables.sas.iter().filter(|s| s.direction == Direction::Out) {
            let ceiling = sa.state.seq_ceiling();
            if ceiling >= sa.max_seq() {
                continue;
            }
            if ceiling.saturating_sub(sa.state.last_seq()) < self.block / 2 {
                self.reserve(sa, &self.path(sa), ceiling)?;
            }
        }
        let due = {
            let g = self.inbound.lock().unwrap_or_else(|e| e.into_inner());
            g.1.is_none_or(|t| t.elapsed() >= INBOUND_INTERVAL)
        };
        if due {
            self.save_inbound(tables)?;
        }
        Ok(())
    }

    /// Writes the window top of every inbound SA that moved since it was last written
    /// (at a clean stop: exactly where each stands).
    pub fn save_inbound(&self, tables: &Tables) -> Result<(), StoreError> {
        let mut g = self.inbound.lock().unwrap_or_else(|e| e.into_inner());
        g.1 = Some(Instant::now());
        for sa in tables
            .sas
            .iter()
            .filter(|s| s.direction == Direction::In && s.state.persisted.load(Ordering::Acquire))
        {
            let top = sa
                .state
                .replay
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .top();
            let path = self.path(sa);
            if top == 0 || g.0.get(&path) == Some(&top) {
                continue;
            }
            write_synced(&path, &format!("{MAGIC}\ntop {top}\n")).map_err(|source| {
                StoreError::File {
                    path: path.clone(),
                    source,
                }
            })?;
            g.0.insert(path, top);
        }
        Ok(())
    }
}

/// Where sequence state goes: the command line of `run` and `pcap`.
#[derive(clap::Args, Debug, Clone)]
pub struct StateArgs {
    /// Directory for the sequence numbers of static keys (reserved ahead, fsync'd before
    /// use) and inbound replay windows, so that no restart repeats a nonce or accepts a
    /// replayed capture.
    #[arg(long, env = "ESPGW_STATE_DIR", default_value = "/var/lib/espgw")]
    pub state_dir: PathBuf,
    /// Keep no sequence state: every start sends from the configured initial sequence
    /// number again, repeating AES-GCM/CCM/CTR/GMAC/ChaCha20 nonces under a static key.
    /// For throw-away labs with keys used once; warns at every start.
    #[arg(long)]
    pub volatile_keys: bool,
}

/// The store for a configuration, or why the gateway must not start: a static SA whose
/// nonce is its sequence number is refused where the state directory cannot be used
/// (other suites only warn: their sequence numbers restart, and the peer's replay window
/// drops traffic until they pass its top).
pub fn open_for(
    cfg: &espgw_config::Config,
    args: &StateArgs,
) -> Result<Option<SeqStore>, StoreError> {
    if args.volatile_keys {
        eprintln!(
            "espgw: warning: --volatile-keys: sequence numbers are not persisted; a restart \
             repeats the nonces of every AES-GCM/CCM/CTR/GMAC/ChaCha20 SA under its static \
             key (use only for labs whose keys are thrown away)"
        );
        return Ok(None);
    }
    match SeqStore::open(&args.state_dir, SeqStore::DEFAULT_BLOCK) {
        Ok(store) => Ok(Some(store)),
        Err(e) => match cfg
            .sas
            .iter()
            .find(|sa| sa.direction == Direction::Out && sa.suite.nonce_from_sequence())
        {
            Some(sa) => Err(StoreError::Required {
                cause: Box::new(e),
                file: sa.loc.file.clone(),
                line: sa.loc.line,
                sa: sa.label(),
                suite: sa.suite.to_string(),
            }),
            None => {
                eprintln!(
                    "espgw: warning: {e}: sequence numbers are not persisted; after a restart the \
                     peer drops traffic as replay until they pass its window"
                );
                Ok(None)
            }
        },
    }
}

/// Reads a state file: `None` where there is none (a key seen for the first time).
fn read_record(path: &Path) -> Result<Option<u64>, StoreError> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StoreError::File {
                path: path.to_path_buf(),
                source,
            })
        }
    };
    let corrupt = |what: &str| StoreError::Corrupt {
        path: path.to_path_buf(),
        what: what.to_string(),
    };
    let mut lines = text.lines();
    if lines.next() != Some(MAGIC) {
        return Err(corrupt("not an espgw sequence state file"));
    }
    let line = lines.next().ok_or_else(|| corrupt("truncated"))?;
    let (key, value) = line.split_once(' ').ok_or_else(|| corrupt("malformed"))?;
    if !matches!(key, "next" | "top") {
        return Err(corrupt("malformed"));
    }
    value
        .parse::<u64>()
        .map(Some)
        .map_err(|_| corrupt("malformed number"))
}

/// Replaces `path` with `text` durably: a temporary file written and fsync'd, renamed
/// over the old one, and the directory fsync'd, so that a crash leaves the old record or
/// the new one, never a torn or missing one.
fn write_synced(path: &Path, text: &str) -> std::io::Result<()> {
    let tmp = path.with_extension("tmp");
    let mut f = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&tmp)?;
    f.write_all(text.as_bytes())?;
    f.sync_all()?;
    fs::rename(&tmp, path)?;
    let dir = path.parent().unwrap_or(Path::new("."));
    File::open(dir)?.sync_all()
}

#[cfg(test)]
mod tests {
    use super::*;
    use espgw_config::{parse_with, CryptoPolicy, Format, DEFAULT_CONFIG};
    use espgw_core::Tables;

    fn tables() -> Tables {
        let cfg = parse_with(
            DEFAULT_CONFIG,
            "test",
            Some(Format::Native),
            CryptoPolicy::default(),
        )
        .unwrap();
        let p = espgw_crypto::provider(espgw_crypto::ProviderChoice::AwsLc).unwrap();
        Tables::build(&cfg, p.as_ref(), None).unwrap()
    }

    fn out_sa(t: &Tables) -> &Sa {
        t.sas
            .iter()
            .find(|s| s.direction == Direction::Out)
            .unwrap()
    }

    /// A state directory of its own, removed when the test ends.
    struct Scratch(PathBuf);

    impl Drop for Scratch {
        fn drop(&mut self) {
            let _ = fs::remove_dir_all(&self.0);
        }
    }

    /// A fresh state directory, a store over it reserving `block` at a time, and tables
    /// of the built-in configuration attached to it.
    fn fixture(name: &str, block: u64) -> (Scratch, SeqStore, Tables) {
        let d = std::env::temp_dir().join(format!("espgw-seq-{name}-{}", std::process::id()));
        let _ = fs::remove_dir_all(&d);
        let store = SeqStore::open(&d, block).unwrap();
        let t = tables();
        store.attach(&t).unwrap();
        (Scratch(d), store, t)
    }

    #[test]
    fn a_restart_resumes_above_every_number_reserved_before() {
        let (_dir, store, t1) = fixture("restart", 100);
        let sa = out_sa(&t1);
        assert_eq!(
            sa.state.seq_ceiling(),
            100,
            "first block reserved before use"
        );
        let (first, n) = sa.reserve_seq(30);
        assert_eq!((first, n), (1, 30));
        // A second life with the same key (a restart): nothing at or below the first
        // life's ceiling is ever handed out.
        let t2 = tables();
        store.attach(&t2).unwrap();
        let (first2, _) = out_sa(&t2).reserve_seq(1);
        assert_eq!(first2, 101);
    }

    #[test]
    fn the_data_path_stops_at_the_ceiling_and_maintain_moves_it() {
        let (_dir, store, t) = fixture("ceiling", 10);
        let sa = out_sa(&t);
        assert_eq!(
            sa.reserve_seq(25),
            (1, 10),
            "no number past the reservation"
        );
        assert_eq!(sa.reserve_seq(1), (0, 0));
        assert!(!sa.state.exhausted.load(Ordering::Relaxed), "not retired");
        store.maintain(&t).unwrap();
        assert_eq!(sa.state.seq_ceiling(), 20);
        assert_eq!(sa.reserve_seq(5), (11, 5));
        let text = fs::read_to_string(store.path(sa)).unwrap();
        assert_eq!(text, format!("{MAGIC}\nnext 21\n"));
    }

    #[test]
    fn an_inbound_top_survives_a_restart() {
        let (_dir, store, t) = fixture("inbound", 10);
        let sa_in = t.sas.iter().find(|s| s.direction == Direction::In).unwrap();
        for seq in [1, 2, 3, 7] {
            assert!(sa_in.state.replay.lock().unwrap().check_and_update(seq));
        }
        store.save_inbound(&t).unwrap();
        let t2 = tables();
        store.attach(&t2).unwrap();
        let sa2 = t2
            .sas
            .iter()
            .find(|s| s.direction == Direction::In)
            .unwrap();
        let w = sa2.state.replay.lock().unwrap();
        assert!(
            !w.check(1) && !w.check(5) && !w.check(7),
            "old numbers are replays"
        );
        assert!(w.check(8));
    }

    #[test]
    fn a_damaged_state_file_is_refused_not_reset() {
        let (_dir, store, t) = fixture("corrupt", 10);
        let path = store.path(out_sa(&t));
        for bad in [
            "",
            "something else\nnext 5\n",
            &format!("{MAGIC}\nnext x\n"),
        ] {
            fs::write(&path, bad).unwrap();
            let e = store.attach(&tables()).expect_err("refused");
            assert!(matches!(e, StoreError::Corrupt { .. }), "{e}");
            assert!(e.to_string().contains(&path.display().to_string()));
        }
    }

    #[test]
    fn an_unwritable_directory_is_refused_at_open() {
        let e = SeqStore::open(Path::new("/proc/espgw-state"), 10).err();
        assert!(matches!(e, Some(StoreError::Dir { .. })));
    }
}
