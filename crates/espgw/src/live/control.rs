//! The control socket: a Unix stream socket that answers one JSON request per
//! connection (`{"cmd":"show","what":"sa"}`, `{"cmd":"reload","path":...}`,
//! `{"cmd":"stop"}`) with one JSON reply. `espgw show|reload|stop` are its clients; they
//! print tables for people or the JSON itself with `--json`.

use espgw_control::ControlRequest;
use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::fs::{DirBuilderExt, PermissionsExt};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use espgw_config::{Action, Config, Direction};
use espgw_core::counters::DropReason;
use espgw_core::Tables;
use espgw_wire::ethernet::format_mac;

use super::shared::Shared;

/// The largest request accepted.
const MAX_REQUEST: u64 = espgw_control::MAX_CONTROL_REQUEST as u64;

pub struct Server {
    listener: UnixListener,
    path: PathBuf,
}

impl Server {
    pub fn bind(path: &Path) -> std::io::Result<Server> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        // A socket left by a gateway that died: connectable means another one runs.
        if path.exists() {
            if UnixStream::connect(path).is_ok() {
                return Err(std::io::Error::new(
                    std::io::ErrorKind::AddrInUse,
                    format!(
                        "control socket {} is in use by a running gateway",
                        path.display()
                    ),
                ));
            }
            std::fs::remove_file(path)?;
        }
        // Bound inside a fresh 0700 directory, made 0600 there, and only then renamed into
        // place: there is no moment when another user could connect to it.
        let dir = path.parent().unwrap_or(Path::new("."));
        let private = dir.join(format!(".espgw-control-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&private);
        std::fs::DirBuilder::new().mode(0o700).create(&private)?;
        let staged = private.join("sock");
        let bound = UnixListener::bind(&staged).and_then(|l| {
            // Only the owner (root, or the service's user) may reload or stop the gateway.
            std::fs::set_permissions(&staged, std::fs::Permissions::from_mode(0o600))?;
            std::fs::rename(&staged, path)?;
            Ok(l)
        });
        let _ = std::fs::remove_dir_all(&private);
        let listener = bound?;
        listener.set_nonblocking(true)?;
        Ok(Server {
            listener,
            path: path.to_path_buf(),
        })
    }

    pub fn serve(self, shared: Arc<Shared>) {
        let active = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        while !shared.stopping() {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    let sh = shared.clone();
                    // Beyond the bound the connection is dropped (closed) at once.
                    super::conn::spawn_bounded(&active, "espgw-control-conn", move || {
                        let _ = handle(stream, &sh);
                    });
                }
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                    std::thread::sleep(Duration::from_millis(20));
                }
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

/// How long a client may take to send its request, and then to take the reply (the
/// request's own work, a reload say, is not counted).
const DEADLINE: Duration = Duration::from_secs(5);

fn handle(stream: UnixStream, shared: &Shared) -> std::io::Result<()> {
    stream.set_nonblocking(false)?;
    let mut conn = super::conn::Deadline::new(stream, DEADLINE);
    let mut line = Vec::new();
    BufReader::new((&mut conn).take(MAX_REQUEST)).read_until(b'\n', &mut line)?;
    let reply = match ControlRequest::parse(&line) {
        Ok(req) => answer(req, shared),
        Err(e) => json!({"ok": false, "error": e.to_string()}),
    };
    let mut out = serde_json::to_vec(&reply).unwrap_or_default();
    out.push(b'\n');
    conn.renew(DEADLINE);
    conn.write_all(&out)
}

fn answer(req: ControlRequest, shared: &Shared) -> Value {
    match req {
        ControlRequest::Show(what) => match show(&what, shared) {
            Ok(v) => json!({"ok": true, "data": v}),
            Err(e) => json!({"ok": false, "error": e}),
        },
        ControlRequest::Reload(path) => match super::reload(shared, path) {
            Ok(m) => json!({"ok": true, "data": m}),
            Err(e) => json!({"ok": false, "error": e.to_string()}),
        },
        ControlRequest::Stop => {
            shared.stop.store(true, Ordering::Relaxed);
            json!({"ok": true, "data": "stopping"})
        }
    }
}

fn addr_string(v4: bool, a: u128) -> String {
    if v4 {
        std::net::Ipv4Addr::from(a as u32).to_string()
    } else {
        std::net::Ipv6Addr::from(a).to_string()
    }
}

fn drops_map(get: impl Fn(DropReason) -> u64) -> Value {
    let mut m = serde_json::Map::new();
    for &r in DropReason::ALL {
        let n = get(r);
        if n > 0 {
            m.insert(r.name().into(), n.into());
        }
    }
    Value::Object(m)
}

/// What `show WHAT` returns.
pub fn show(what: &str, shared: &Shared) -> Result<Value, String> {
    let t = shared.tables();
    let mut cfg = shared
        .config
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    if let Some(k) = &shared.keying {
        k.merge_into(&mut cfg);
    }
    Ok(match what {
        "sa" | "sas" => show_sas(&t, shared, false),
        // `espgw show sa --keys`: only the socket's owner gets here (mode 0600).
        "sa-with-keys" => show_sas(&t, shared, true),
        "keying" => show_keying(shared),
        "policy" | "policies" => show_policies(&cfg),
        "route" | "routes" => show_routes(&cfg),
        "neighbour" | "neighbours" | "neighbor" | "neighbors" => show_neighbours(&t, shared),
        "port" | "ports" => show_ports(&t, shared),
        "stats" => show_stats(&t, shared),
        o => {
            return Err(format!(
                "cannot show '{o}' (sa, policy, routes, neighbours, ports, stats, keying)"
            ))
        }
    })
}

/// The SA contract: whether a daemon is connected, what it installed, what was sent.
fn show_keying(shared: &Shared) -> Value {
    let Some(k) = &shared.keying else {
        return json!({"enabled": false});
    };
    let (sas, policies) = k.len();
    let c = &k.counters;
    let n = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
    json!({
        "enabled": true,
        "negotiated_sas": sas,
        "negotiated_policies": policies,
        "sessions": n(&c.sessions),
        "refused_connections": n(&c.refused),
        "sas_installed": n(&c.sas_installed),
        "sas_deleted": n(&c.sas_deleted),
        "expire_soft_sent": n(&c.expired_soft),
        "expire_hard_sent": n(&c.expired_hard),
        "requests_refused": n(&c.errors),
        "acquires_sent": n(&c.acquires),
    })
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Every SA: keys' algorithm, endpoints, sequence state, counters; for a negotiated SA
/// its reqid and the seconds its hard lifetime leaves.
fn show_sas(t: &Tables, shared: &Shared, keys: bool) -> Value {
    let negotiated = shared
        .keying
        .as_ref()
        .map(|k| k.lifetimes(std::time::Instant::now()))
        .unwrap_or_default();
    Value::Array(
        t.sas
            .iter()
            .map(|sa| {
                let (top, window) = {
                    let w = sa.state.replay.lock().unwrap_or_else(|e| e.into_inner());
                    (w.top(), w.size())
                };
                let (local, remote) = match sa.mode {
                    espgw_config::Mode::Tunnel { local, remote } => {
                        (local.to_string(), remote.to_string())
                    }
                    espgw_config::Mode::Transport => ("-".into(), "-".into()),
                };
                let mut row = json!({
                    "name": sa.label,
                    "direction": sa.direction.to_string(),
                    "spi": format!("0x{:08x}", sa.spi),
                    "mode": sa.mode.name(),
                    "algorithm": sa.config.algorithm_name(),
                    "local": local,
                    "remote": remote,
                    "udp_encap": sa.udp.is_some(),
                    "esn": sa.esn,
                    "seq": if sa.direction == Direction::Out { sa.state.last_seq() } else { top },
                    "replay_window": if sa.direction == Direction::In { window } else { 0 },
                    "packets": sa.state.counters.packets(),
                    "bytes": sa.state.counters.bytes(),
                    "drops": drops_map(|r| sa.state.counters.dropped(r)),
                    "max_inner": if sa.max_inner == usize::MAX { Value::Null } else { sa.max_inner.into() },
                    "expired": sa.state.hard_expired.load(Ordering::Relaxed)
                        || sa.state.exhausted.load(Ordering::Relaxed),
                    "source": if espgw_keying::db::is_negotiated(&sa.config) { "ike" } else { "static" },
                    "reqid": negotiated.get(&(sa.direction, sa.spi)).map(|n| n.0),
                    "lifetime_left_s": negotiated.get(&(sa.direction, sa.spi)).and_then(|n| n.1),
                });
                if keys {
                    row["enc_key"] = hex(&sa.config.enc_key).into();
                    row["auth_key"] = hex(&sa.config.auth_key).into();
                }
                row
            })
            .collect(),
    )
}

/// The configured policies, in order, with their SAs by name.
fn show_policies(cfg: &Config) -> Value {
    Value::Array(
        cfg.policies
            .iter()
            .map(|p| {
                let name = |spi: u32| {
                    let label = cfg
                        .sa(p.direction, spi)
                        .map(|s| s.label())
                        .unwrap_or_default();
                    format!("{label} (0x{spi:08x})")
                };
                let action = match p.action {
                    Action::Protect(_) if !p.per_worker_sas.is_empty() => {
                        let set: Vec<String> = p.per_worker_sas.iter().map(|&s| name(s)).collect();
                        format!("protect per worker {}", set.join(", "))
                    }
                    Action::Protect(spi) => format!("protect {}", name(spi)),
                    Action::Bundle { esp, ah } => {
                        format!("protect esp {} then ah {}", name(esp), name(ah))
                    }
                    Action::Bypass => "bypass".into(),
                    Action::Discard => "discard".into(),
                    Action::Acquire { reqid } => format!("acquire reqid {reqid}"),
                };
                let range = |lo: u64, hi: u64, max: u64| {
                    if lo == 0 && hi == max {
                        "any".to_string()
                    } else if lo == hi {
                        lo.to_string()
                    } else {
                        format!("{lo}-{hi}")
                    }
                };
                json!({
                    "direction": p.direction.to_string(),
                    "priority": p.priority,
                    "src": p.src.to_string(),
                    "dst": p.dst.to_string(),
                    "proto": range(p.proto.lo.into(), p.proto.hi.into(), 255),
                    "sport": range(p.sport.lo.into(), p.sport.hi.into(), 65535),
                    "dport": range(p.dport.lo.into(), p.dport.hi.into(), 65535),
                    "action": action,
                })
            })
            .collect(),
    )
}

/// The configured routes.
fn show_routes(cfg: &Config) -> Value {
    Value::Array(
        cfg.routes
            .iter()
            .map(|r| {
                json!({
                    "dst": r.dst.to_string(),
                    "port": cfg.ports.get(r.port).map(|p| p.name.clone()).unwrap_or_default(),
                    "via": r.via.map(|v| v.to_string()).unwrap_or_else(|| "on-link".into()),
                })
            })
            .collect(),
    )
}

/// Static neighbours, then those learned by ARP / ND.
fn show_neighbours(t: &Tables, shared: &Shared) -> Value {
    let mut v = Vec::new();
    let (ips, ports) = t.neighbours.static_entries();
    for ((v4, a), mac) in ips {
        v.push(json!({"address": addr_string(v4, a), "port": "*", "mac": format_mac(&mac), "state": "static"}));
    }
    for (p, mac) in ports {
        let name = t.ports.get(p).map(|p| p.name.clone()).unwrap_or_default();
        v.push(json!({"address": "*", "port": name, "mac": format_mac(&mac), "state": "static"}));
    }
    for e in shared.neighbours.entries() {
        let name = t
            .ports
            .get(usize::from(e.port))
            .map(|p| p.name.clone())
            .unwrap_or_default();
        v.push(json!({
            "address": addr_string(e.v4, e.addr),
            "port": name,
            "mac": e.mac.map(|m| format_mac(&m)).unwrap_or_else(|| "-".into()),
            "state": if e.mac.is_some() { "reachable" } else { "incomplete" },
            "age_s": (e.age.as_secs_f64() * 10.0).round() / 10.0,
        }));
    }
    Value::Array(v)
}

/// Each port with its interface facts and counters.
fn show_ports(t: &Tables, shared: &Shared) -> Value {
    let totals = shared.totals();
    Value::Array(
        t.ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let f = &shared.facts[i];
                let s = totals.ports.get(i).copied().unwrap_or_default();
                json!({
                    "name": p.name,
                    "interface": f.interface,
                    "io": f.kind,
                    "role": p.role.name(),
                    "mac": format_mac(&p.mac),
                    "mtu": p.mtu,
                    "addresses": p.addresses.iter().map(|a| a.to_string()).collect::<Vec<_>>().join(" "),
                    "rx_packets": s.rx_packets,
                    "rx_bytes": s.rx_bytes,
                    "tx_packets": s.tx_packets,
                    "tx_bytes": s.tx_bytes,
                    "rx_dropped": s.rx_dropped,
                    "rx_ring_full": s.rx_ring_full,
                    "tx_dropped": s.tx_dropped,
                    "rx_other_host": s.rx_other_host,
                    "rx_vlan_tagged": s.rx_vlan_tagged,
                })
            })
            .collect(),
    )
}

/// Nanoseconds as whole milliseconds.
fn ns_to_ms(ns: u64) -> u64 {
    ns / 1_000_000
}

/// The gateway's totals.
fn show_stats(t: &Tables, shared: &Shared) -> Value {
    let tot = shared.totals();
    let c = &tot.pipeline;
    let h = &tot.host;
    json!({
        "uptime_s": shared.started.elapsed().as_secs(),
        "workers": shared.reports.len(),
        "crypto": t.provider_name,
        "rx_packets": c.rx_packets,
        "tx_packets": c.tx_packets,
        "rx_bytes": c.rx_bytes,
        "tx_bytes": c.tx_bytes,
        "encrypted": c.encrypted,
        "decrypted": c.decrypted,
        "bypassed": c.bypassed,
        "drops": drops_map(|r| c.dropped(r)),
        "host": {
            "arp_replies": h.arp_replies,
            "nd_replies": h.nd_replies,
            "echo_replies": h.echo_replies,
            "solicitations_sent": h.solicitations_sent,
            "icmp_errors_sent": h.icmp_errors_sent,
            "fragmented": h.fragmented,
            "fragments_made": h.fragments_made,
            "reassembled": h.reassembled,
            "held_for_neighbour": h.held,
            "released_after_resolution": h.held_released,
        },
        "reloads": shared.reloads.load(Ordering::Relaxed),
        "reload_failures": shared.reload_failures.load(Ordering::Relaxed),
        "per_worker_rx": shared.reports.iter().map(|r| r.lock().unwrap_or_else(|e| e.into_inner()).pipeline.rx_packets).collect::<Vec<_>>(),
        "ordered_spread": shared.crew.as_ref().map(|c| json!({
            "join": c.policy().name(),
            "engaged": c.active(),
            "joined": c.joins(),
            "stepped_back": c.leaves(),
            "not_joined_short_of_cpu": c.contended(),
            // With burst pacing, each worker's burst size now (a slower worker's smaller).
            "burst_limits": shared.reports.iter().map(|r| r.lock().unwrap_or_else(|e| e.into_inner()).burst_limit).collect::<Vec<_>>(),
            // Time the workers waited for their bursts' turns (summed over workers).
            "waited_ms": {
                "pipeline": ns_to_ms(tot.pipeline.ordered_wait_ns),
                "transmit": ns_to_ms(tot.pipeline.transmit_wait_ns),
            },
        })),
    })
}

/// Sends one request to the gateway at `path` and returns its `data`.
pub fn request(path: &Path, req: &ControlRequest) -> Result<Value, ControlError> {
    let mut s = UnixStream::connect(path).map_err(|source| ControlError::Connect {
        path: path.to_path_buf(),
        source,
    })?;
    s.set_read_timeout(Some(Duration::from_secs(30)))
        .map_err(ControlError::Io)?;
    let mut line = req.to_json().to_string().into_bytes();
    line.push(b'\n');
    s.write_all(&line).map_err(ControlError::Io)?;
    let mut reply = String::new();
    BufReader::new(s.take(16 << 20))
        .read_line(&mut reply)
        .map_err(ControlError::Io)?;
    let v: Value = serde_json::from_str(&reply).map_err(ControlError::BadReply)?;
    if v["ok"].as_bool() == Some(true) {
        Ok(v["data"].clone())
    } else {
        Err(ControlError::Refused(
            v["error"].as_str().unwrap_or("error").to_string(),
        ))
    }
}

/// Why a control request got no answer, or what the gateway answered instead of data.
#[derive(Debug)]
pub enum ControlError {
    /// No gateway listens on the socket (or it may not be opened).
    Connect {
        /// The control socket.
        path: std::path::PathBuf,
        /// What connect said.
        source: std::io::Error,
    },
    /// Sending the request or reading the reply failed (a timeout included).
    Io(std::io::Error),
    /// The reply is not JSON.
    BadReply(serde_json::Error),
    /// The gateway refused the request; its reason.
    Refused(String),
}

impl std::fmt::Display for ControlError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ControlError::Connect { path, source } => write!(
                f,
                "control socket {}: {source} (is the gateway running?)",
                path.display()
            ),
            ControlError::Io(e) => write!(f, "control socket: {e}"),
            ControlError::BadReply(e) => write!(f, "bad reply: {e}"),
            ControlError::Refused(m) => f.write_str(m),
        }
    }
}

impl std::error::Error for ControlError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match self {
            ControlError::Connect { source, .. } | ControlError::Io(source) => Some(source),
            ControlError::BadReply(e) => Some(e),
            ControlError::Refused(_) => None,
        }
    }
}

fn cell(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Null => "-".into(),
        Value::Object(m) if m.is_empty() => "-".into(),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}={}", cell(v)))
            .collect::<Vec<_>>()
            .join(","),
        o => o.to_string(),
    }
}

/// Renders an array of objects as an aligned table (columns in the objects' order), or
/// an object as `key: value` lines.
pub fn render(v: &Value) -> String {
    match v {
        Value::Array(rows) if !rows.is_empty() => {
            let cols: Vec<String> = match &rows[0] {
                Value::Object(m) => m.keys().cloned().collect(),
                _ => return rows.iter().map(cell).collect::<Vec<_>>().join("\n") + "\n",
            };
            let cells: Vec<Vec<String>> = rows
                .iter()
                .map(|r| cols.iter().map(|c| cell(&r[c])).collect())
                .collect();
            let widths: Vec<usize> = cols
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    cells
                        .iter()
                        .map(|r| r[i].len())
                        .chain([c.len()])
                        .max()
                        .unwrap_or(0)
                })
                .collect();
            let mut out = String::new();
            let line = |vals: Vec<&str>| {
                let mut l = vals
                    .iter()
                    .zip(&widths)
                    .map(|(v, w)| format!("{v:<w$}"))
                    .collect::<Vec<_>>()
                    .join("  ");
                l.truncate(l.trim_end().len());
                l + "\n"
            };
            out.push_str(&line(cols.iter().map(|s| s.as_str()).collect()));
            for r in &cells {
                out.push_str(&line(r.iter().map(|s| s.as_str()).collect()));
            }
            out
        }
        Value::Array(_) => "(none)\n".into(),
        Value::Object(m) => m
            .iter()
            .map(|(k, v)| format!("{k}: {}\n", cell(v)))
            .collect(),
        o => format!("{}\n", cell(o)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_to_no_gateway_names_the_socket() {
        let path = std::env::temp_dir().join(format!("espgw-no-gateway-{}", std::process::id()));
        let e = request(&path, &ControlRequest::Stop).unwrap_err();
        assert!(
            matches!(&e, ControlError::Connect { path: p, .. } if *p == path),
            "{e:?}"
        );
        let text = e.to_string();
        assert!(text.contains(&path.display().to_string()), "{text}");
        assert!(text.contains("is the gateway running?"), "{text}");
        assert!(std::error::Error::source(&e).is_some());
    }
}
