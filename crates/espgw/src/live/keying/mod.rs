//! The SA contract's server: the socket an IKE daemon's `kernel-espgw` plugin connects to
//! (`--keying-socket`), the negotiated SAs and policies it installs, and the events the
//! gateway sends it. The protocol is `espgw_keying`'s (docs/sa-contract.md).
//!
//! One session at a time: a connection starts with HELLO, which flushes whatever an
//! earlier session negotiated (a new daemon has no memory of it); a second connection
//! that says HELLO replaces the first. Only root and the `--keying-user` may connect (the
//! kernel's SO_PEERCRED, checked at accept).
//!
//! Every change is applied to a copy of the negotiated database, merged with the static
//! configuration, validated and built into tables, and only then published (between
//! bursts, as a reload) and kept: a request the gateway cannot apply changes nothing.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use espgw_config::Direction;
use espgw_core::flow::FlowKey;
use espgw_core::sa::SaEvent;
use espgw_core::Tables;
use espgw_keying::db::host_selector;
use espgw_keying::frame::{split, MAX_FRAME};
use espgw_keying::message::{ErrorCode, Event, ReplyData, SaId, TrafficSelector};
use espgw_keying::{KeyingDb, KeyingError, Message, Reply, Request, PROTOCOL_VERSION};

use super::shared::Shared;
use zeroize::Zeroizing;

/// Counters of the SA contract, for `show keying` and metrics.
#[derive(Debug, Default)]
pub struct KeyingCounters {
    /// Sessions started (HELLO accepted).
    pub sessions: AtomicU64,
    /// Connections refused (credentials, a bad first message).
    pub refused: AtomicU64,
    /// SAs installed.
    pub sas_installed: AtomicU64,
    /// SAs deleted by the daemon.
    pub sas_deleted: AtomicU64,
    /// EXPIRE events sent: soft (a rekey) and hard.
    pub expired_soft: AtomicU64,
    /// Hard EXPIRE events sent.
    pub expired_hard: AtomicU64,
    /// Requests refused.
    pub errors: AtomicU64,
    /// ACQUIRE events sent.
    pub acquires: AtomicU64,
}

/// The keying side of the gateway's shared state.
pub struct Keying {
    db: Mutex<KeyingDb>,
    /// The session's number and stream, for events (replies go through it too, under
    /// this lock, so frames never interleave).
    session: Mutex<Option<(u64, UnixStream)>>,
    /// Per negotiated SA: packets at the last look and when they last changed.
    usage: Mutex<HashMap<(Direction, u32), (u64, Instant)>>,
    allowed_uid: Option<u32>,
    /// Trap policies the workers saw hit since the last tick, by reqid.
    acquires: Mutex<HashMap<u32, FlowKey>>,
    /// When an ACQUIRE was last sent, by reqid (one a second at most: the daemon is
    /// negotiating meanwhile).
    acquired: Mutex<HashMap<u32, Instant>>,
    /// What happened, counted.
    pub counters: KeyingCounters,
}

/// The least time between two ACQUIREs for one reqid.
const ACQUIRE_INTERVAL: Duration = Duration::from_secs(1);
/// The most reqids with a pending acquisition.
const MAX_ACQUIRES: usize = 1024;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl Keying {
    /// Keying state for a gateway that lets root and `allowed_uid` connect.
    pub fn new(allowed_uid: Option<u32>) -> Self {
        Keying {
            db: Mutex::new(KeyingDb::default()),
            session: Mutex::new(None),
            usage: Mutex::new(HashMap::new()),
            allowed_uid,
            acquires: Mutex::new(HashMap::new()),
            acquired: Mutex::new(HashMap::new()),
            counters: KeyingCounters::default(),
        }
    }

    /// Trap policies a worker saw hit: sent as ACQUIRE at the next tick.
    pub fn note_acquires(&self, hits: Vec<(u32, FlowKey)>) {
        if hits.is_empty() {
            return;
        }
        let mut a = lock(&self.acquires);
        for (reqid, key) in hits {
            if a.len() < MAX_ACQUIRES {
                a.entry(reqid).or_insert(key);
            }
        }
    }

    /// Negotiated SAs and policies, merged into `cfg` (for reloads and republishing).
    pub fn merge_into(&self, cfg: &mut espgw_config::Config) {
        lock(&self.db).merge_into(cfg);
    }

    /// Numbers of negotiated SAs and policies.
    pub fn len(&self) -> (usize, usize) {
        lock(&self.db).len()
    }

    /// Whether nothing is negotiated.
    pub fn is_empty(&self) -> bool {
        lock(&self.db).is_empty()
    }

    /// When each negotiated SA was installed and its remaining time lifetime, by
    /// direction and SPI (for `show sa`).
    pub fn lifetimes(&self, now: Instant) -> HashMap<(Direction, u32), (u32, Option<u64>)> {
        lock(&self.db)
            .sas()
            .map(|s| {
                let dir = if s.add.inbound {
                    Direction::In
                } else {
                    Direction::Out
                };
                let age = now.duration_since(s.installed).as_secs();
                let left = (s.add.lifetime.hard_seconds != 0)
                    .then(|| s.add.lifetime.hard_seconds.saturating_sub(age));
                ((dir, s.add.id.spi), (s.add.reqid, left))
            })
            .collect()
    }

    fn send(&self, m: &Message) {
        let Ok(bytes) = m.encode() else { return };
        let mut s = lock(&self.session);
        if let Some((_, stream)) = s.as_mut() {
            if stream.write_all(&bytes).is_err() {
                *s = None;
            }
        }
    }
}

/// The listening socket.
pub struct KeyingServer {
    listener: UnixListener,
    path: PathBuf,
}

impl KeyingServer {
    /// Binds `path` (mode 0600: root's; the daemon's user is let in by credentials, so the
    /// socket's group is made that user's where one is named).
    pub fn bind(
        path: &Path,
        account: Option<&espgw_io::process::Account>,
    ) -> std::io::Result<Self> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!("keying socket {} is in use", path.display()),
                ));
            }
            std::fs::remove_file(path)?;
        }
        let listener = UnixListener::bind(path)?;
        let mode = if account.is_some() { 0o660 } else { 0o600 };
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))?;
        if let Some(a) = account {
            std::os::unix::fs::chown(path, None, Some(a.gid))?;
        }
        listener.set_nonblocking(true)?;
        Ok(KeyingServer {
            listener,
            path: path.to_path_buf(),
        })
    }

    /// Accepts sessions until the gateway stops; at most [`super::conn::MAX_CONNECTIONS`]
    /// connections are served at once (more are closed at once), so even a local peer
    /// with the right credentials cannot pile up threads.
    pub fn serve(self, shared: Arc<Shared>) {
        let active = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        while !shared.stopping() {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    let sh = shared.clone();
                    super::conn::spawn_bounded(&active, "espgw-keying-conn", move || {
                        session(stream, &sh)
                    });
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn allowed(k: &Keying, stream: &UnixStream) -> bool {
    match espgw_io::process::peer_uid(stream.as_fd()) {
        Ok(0) => true,
        Ok(uid) => k.allowed_uid == Some(uid),
        Err(_) => false,
    }
}

/// One connection: frames in, one reply each, until it closes or errs.
fn session(mut stream: UnixStream, shared: &Shared) {
    let Some(k) = shared.keying.as_ref() else {
        return;
    };
    if stream.set_nonblocking(false).is_err() || !allowed(k, &stream) {
        k.counters.refused.fetch_add(1, Ordering::Relaxed);
        crate::warn!("keying", "detail" => "connection refused: not root or the keying user");
        return;
    }
    // Frames carry keys: the buffer wipes its whole capacity when dropped (what `drain`
    // moved forward leaves its old copy behind the length), and it never grows, since it
    // holds at most a frame's worth before a read (see `drain_frames`) and one read more.
    let mut chunk = [0u8; 4096];
    let mut buf: Zeroizing<Vec<u8>> = Zeroizing::new(Vec::with_capacity(MAX_FRAME + chunk.len()));
    let mut hello: Option<u64> = None;
    loop {
        let n = match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        buf.extend_from_slice(&chunk[..n]);
        chunk[..n].fill(0);
        let ok = drain_frames(&mut buf, &mut stream, &mut hello, shared, k);
        if !ok {
            break;
        }
    }
    if let Some(n) = hello {
        end_session(k, n);
    }
}

/// Handles every complete frame in `buf`; false when the connection must close.
fn drain_frames(
    buf: &mut Vec<u8>,
    stream: &mut UnixStream,
    hello: &mut Option<u64>,
    shared: &Shared,
    k: &Keying,
) -> bool {
    loop {
        let (msg, used) = match split(buf) {
            Ok(None) => return buf.len() <= MAX_FRAME,
            Ok(Some((f, used))) => (Message::decode(&f), used),
            Err(e) => {
                crate::warn!("keying", "detail" => "closing: bad framing", "error" => e);
                return false;
            }
        };
        buf[..used].fill(0);
        buf.drain(..used);
        let (id, req) = match msg {
            Ok(Message::Request(id, r)) => (id, r),
            Ok(_) => return false,
            Err(e) => {
                k.counters.errors.fetch_add(1, Ordering::Relaxed);
                reply_direct(stream, 0, error(ErrorCode::InvalidArg, e.to_string()));
                continue;
            }
        };
        if hello.is_none() {
            let Request::Hello { version } = req else {
                reply_direct(
                    stream,
                    id,
                    error(ErrorCode::InvalidArg, "HELLO first".into()),
                );
                return false;
            };
            if version != PROTOCOL_VERSION {
                let m = format!("version {version}; this gateway speaks {PROTOCOL_VERSION}");
                reply_direct(stream, id, error(ErrorCode::NotSupported, m));
                return false;
            }
            *hello = Some(start_session(shared, k, stream));
            reply(
                k,
                id,
                ok(ReplyData {
                    version: Some(PROTOCOL_VERSION),
                    ..ReplyData::default()
                }),
            );
            continue;
        }
        let r = answer(shared, k, req);
        if let Reply::Error { message, .. } = &r {
            k.counters.errors.fetch_add(1, Ordering::Relaxed);
            crate::warn!("keying", "detail" => "request refused", "error" => message);
        }
        reply(k, id, r);
    }
}

fn ok(d: ReplyData) -> Reply {
    Reply::Ok(d)
}

fn error(code: ErrorCode, message: String) -> Reply {
    Reply::Error { code, message }
}

fn reply(k: &Keying, id: u32, r: Reply) {
    k.send(&Message::Reply(id, r));
}

fn reply_direct(stream: &mut UnixStream, id: u32, r: Reply) {
    if let Ok(b) = Message::Reply(id, r).encode() {
        let _ = stream.write_all(&b);
    }
}

/// A new daemon: what an earlier session negotiated is flushed, and this connection
/// becomes the one events go to. Returns the session's number.
fn start_session(shared: &Shared, k: &Keying, stream: &UnixStream) -> u64 {
    let _ = change(shared, k, |db| {
        db.flush_sas();
        db.flush_policies();
        Ok(())
    });
    let n = k.counters.sessions.fetch_add(1, Ordering::Relaxed) + 1;
    *lock(&k.session) = stream.try_clone().ok().map(|s| (n, s));
    crate::info!("keying", "detail" => "IKE daemon connected: negotiated state flushed",
        "session" => n);
    n
}

/// The end of session `n`; only the current session's end stops events (a replaced one's
/// does not).
fn end_session(k: &Keying, n: u64) {
    let mut s = lock(&k.session);
    if s.as_ref().is_some_and(|(cur, _)| *cur == n) {
        *s = None;
        crate::info!("keying", "detail" => "IKE daemon disconnected: negotiated SAs kept \
            until their lifetimes end or a new daemon connects", "session" => n);
    }
}

/// Applies `f` to a copy of the database, publishes tables built from the result, and
/// keeps it; on any failure nothing changes.
fn change<T>(
    shared: &Shared,
    k: &Keying,
    f: impl FnOnce(&mut KeyingDb) -> Result<T, KeyingError>,
) -> Result<T, KeyingError> {
    let _g = lock(&shared.reload_lock);
    let mut db = lock(&k.db);
    let mut next = db.clone();
    let out = f(&mut next)?;
    super::publish_with(shared, &next).map_err(|e| KeyingError::Invalid(e.to_string()))?;
    *db = next;
    Ok(out)
}

fn answer(shared: &Shared, k: &Keying, req: Request) -> Reply {
    let now = Instant::now();
    let done = |r: Result<(), KeyingError>| match r {
        Ok(()) => ok(ReplyData::default()),
        Err(e) => error(e.code(), e.to_string()),
    };
    match req {
        Request::Hello { .. } => error(ErrorCode::InvalidArg, "HELLO twice".into()),
        Request::GetSpi { .. } => {
            let static_in = |spi: u32| shared.static_sa(Direction::In, spi);
            let mut rng = rand::thread_rng();
            let r = lock(&k.db).get_spi(now, static_in, || rand::Rng::gen(&mut rng));
            match r {
                Ok(spi) => ok(ReplyData {
                    spi: Some(spi),
                    ..ReplyData::default()
                }),
                Err(e) => error(e.code(), e.to_string()),
            }
        }
        Request::AddSa(a) => {
            let inbound_window = a.inbound.then_some((a.id.spi, a.replay_window));
            let r = change(shared, k, |db| {
                db.add_sa(*a, now, |d, s| shared.static_sa(d, s))
            });
            if r.is_ok() {
                k.counters.sas_installed.fetch_add(1, Ordering::Relaxed);
                if let Some((spi, window)) = inbound_window {
                    let depth = shared.window_depth.as_ref();
                    super::window_advice::warn_negotiated(depth, spi, window);
                }
            }
            done(r)
        }
        Request::UpdateSa(u) => done(change(shared, k, |db| db.update_sa(&u))),
        Request::QuerySa(id) => query_sa(shared, k, &id, now),
        Request::DelSa(id) => {
            let r = change(shared, k, |db| db.del_sa(&id).map(|_| ()));
            if r.is_ok() {
                k.counters.sas_deleted.fetch_add(1, Ordering::Relaxed);
            }
            done(r)
        }
        Request::FlushSas => done(change(shared, k, |db| {
            db.flush_sas();
            Ok(())
        })),
        Request::AddPolicy(p) => done(change(shared, k, |db| db.add_policy(p))),
        Request::QueryPolicy(id) => {
            if lock(&k.db).has_policy(&id) {
                ok(ReplyData::default())
            } else {
                error(ErrorCode::NotFound, "no such policy".into())
            }
        }
        Request::DelPolicy {
            id,
            esp_spi,
            ah_spi,
        } => done(change(shared, k, |db| {
            db.del_policy(&id, esp_spi, ah_spi).map(|_| ())
        })),
        Request::FlushPolicies => done(change(shared, k, |db| {
            db.flush_policies();
            Ok(())
        })),
    }
}

fn direction_of(k: &Keying, id: &SaId) -> Option<Direction> {
    lock(&k.db).sa(id).map(|s| {
        if s.add.inbound {
            Direction::In
        } else {
            Direction::Out
        }
    })
}

fn query_sa(shared: &Shared, k: &Keying, id: &SaId, now: Instant) -> Reply {
    let Some(dir) = direction_of(k, id) else {
        return error(ErrorCode::NotFound, format!("no SA 0x{:08x}", id.spi));
    };
    let t = shared.tables();
    let Some(sa) = t.sas.iter().find(|s| s.direction == dir && s.spi == id.spi) else {
        return error(ErrorCode::NotFound, format!("no SA 0x{:08x}", id.spi));
    };
    let c = &sa.state.counters;
    let idle = lock(&k.usage)
        .get(&(dir, id.spi))
        .filter(|(p, _)| *p > 0)
        .map(|(_, at)| now.duration_since(*at).as_secs());
    ok(ReplyData {
        usage: Some((c.bytes(), c.packets())),
        idle_seconds: idle,
        ..ReplyData::default()
    })
}

/// Housekeeping's part (every 100 ms): time lifetimes, last use, and the data plane's
/// byte and packet lifetime events for negotiated SAs.
pub fn tick(shared: &Shared, k: &Keying, tables: &Tables) {
    let now = Instant::now();
    observe_usage(k, tables, now);
    let (soft, hard) = lock(&k.db).due(now);
    let events = if hard {
        // An SA goes: the tables must lose it too.
        change(shared, k, |db| Ok(db.expire(now))).unwrap_or_default()
    } else if soft {
        lock(&k.db).expire(now)
    } else {
        Vec::new()
    };
    for e in events {
        send_expire(k, e);
    }
    send_acquires(k, now);
}

/// ACQUIRE for each trap policy hit since the last tick, once a second per reqid at most.
fn send_acquires(k: &Keying, now: Instant) {
    let hits: Vec<(u32, FlowKey)> = lock(&k.acquires).drain().collect();
    if hits.is_empty() {
        return;
    }
    let mut last = lock(&k.acquired);
    last.retain(|_, at| now.duration_since(*at) < ACQUIRE_INTERVAL * 10);
    for (reqid, key) in hits {
        if last
            .get(&reqid)
            .is_some_and(|at| now.duration_since(*at) < ACQUIRE_INTERVAL)
        {
            continue;
        }
        last.insert(reqid, now);
        k.counters.acquires.fetch_add(1, Ordering::Relaxed);
        let (src, dst) = selectors_of(&key);
        k.send(&Message::Event(Event::Acquire { reqid, src, dst }));
    }
}

/// The packet's source and destination as one-address selectors (ICMP's type and code
/// stand in the ports in espgw's keys: not passed on as ports).
fn selectors_of(k: &FlowKey) -> (TrafficSelector, TrafficSelector) {
    let addr = |a: u128| -> std::net::IpAddr {
        if k.v4 {
            std::net::Ipv4Addr::from(a as u32).into()
        } else {
            std::net::Ipv6Addr::from(a).into()
        }
    };
    let icmp = matches!(k.proto, 1 | 58);
    let port = |p: u16| if icmp { 0 } else { p };
    let mut src = host_selector(addr(k.src), k.proto, port(k.sport));
    let mut dst = host_selector(addr(k.dst), k.proto, port(k.dport));
    if icmp {
        (src.to_port, dst.to_port) = (u16::MAX, u16::MAX);
    }
    (src, dst)
}

fn observe_usage(k: &Keying, tables: &Tables, now: Instant) {
    let mut u = lock(&k.usage);
    let mut seen = HashMap::with_capacity(u.len());
    for sa in tables
        .sas
        .iter()
        .filter(|s| espgw_keying::db::is_negotiated(&s.config))
    {
        let key = (sa.direction, sa.spi);
        let packets = sa.state.counters.packets();
        let entry = match u.get(&key) {
            Some(&(p, at)) if p == packets => (p, at),
            _ => (packets, now),
        };
        seen.insert(key, entry);
    }
    *u = seen;
}

fn send_expire(k: &Keying, e: Event) {
    if let Event::Expire { hard, .. } = e {
        let c = if hard {
            &k.counters.expired_hard
        } else {
            &k.counters.expired_soft
        };
        c.fetch_add(1, Ordering::Relaxed);
    }
    k.send(&Message::Event(e));
}

/// A data-plane event on SA `spi` of `dir`: for a negotiated SA, the daemon is told (soft:
/// rekey; hard or sequence numbers used up: it is gone).
pub fn sa_event(k: &Keying, dir: Direction, spi: u32, event: SaEvent) {
    let id = lock(&k.db).sas().find_map(|s| {
        let d = if s.add.inbound {
            Direction::In
        } else {
            Direction::Out
        };
        (d == dir && s.add.id.spi == spi).then_some(s.add.id)
    });
    if let Some(id) = id {
        send_expire(
            k,
            Event::Expire {
                id,
                hard: event != SaEvent::SoftExpired,
            },
        );
    }
}

#[cfg(test)]
mod tests;
