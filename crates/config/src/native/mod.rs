//! espgw's own configuration format (TOML), the one the README documents.
//!
//! Every table and key is checked; unknown keys are errors (a typo must not silently
//! change what a gateway does). Errors carry the line of the offending key.

use std::collections::HashMap;
use std::ops::Range as ByteRange;

use espgw_crypto::{Encryption, Integrity, Suite};
use espgw_wire::ethernet::parse_mac;
use serde::Deserialize;
use toml::Spanned;
use zeroize::Zeroizing;

use crate::algorithms::*;
use crate::model::*;
use crate::text::*;
use crate::ConfigError;

mod policy;
mod sa;
#[cfg(test)]
mod tests;

use policy::convert_policy;
use sa::convert_sa;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    burst: Option<Spanned<i64>>,
    workers: Option<Spanned<i64>>,
    #[serde(default)]
    allow_legacy_crypto: bool,
    #[serde(default)]
    allow_null_null: bool,
    #[serde(default)]
    port: Vec<Spanned<RawPort>>,
    #[serde(default)]
    sa: Vec<Spanned<RawSa>>,
    #[serde(default)]
    policy: Vec<Spanned<RawPolicy>>,
    #[serde(default)]
    route: Vec<Spanned<RawRoute>>,
    #[serde(default)]
    neighbour: Vec<Spanned<RawNeighbour>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPort {
    name: Spanned<String>,
    mac: Option<Spanned<String>>,
    interface: Option<String>,
    #[serde(default)]
    addresses: Vec<Spanned<String>>,
    role: Option<Spanned<String>>,
    mtu: Option<Spanned<i64>>,
}

#[derive(Deserialize, Clone)]
#[serde(untagged)]
enum StrOrInt {
    Int(i64),
    Str(String),
}

#[derive(Deserialize)]
#[serde(untagged)]
enum UdpEncapRaw {
    Flag(bool),
    Ports {
        sport: Option<u16>,
        dport: Option<u16>,
    },
}

#[derive(Deserialize, Default)]
#[serde(deny_unknown_fields)]
struct RawLifetime {
    soft_packets: Option<u64>,
    hard_packets: Option<u64>,
    soft_bytes: Option<u64>,
    hard_bytes: Option<u64>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawSa {
    name: Option<String>,
    direction: Spanned<String>,
    spi: Spanned<i64>,
    mode: Spanned<String>,
    local: Option<Spanned<String>>,
    remote: Option<Spanned<String>>,
    protocol: Option<Spanned<String>>,
    aead: Option<Spanned<String>>,
    key: Option<Spanned<String>>,
    icv: Option<Spanned<i64>>,
    cipher: Option<Spanned<String>>,
    cipher_key: Option<Spanned<String>>,
    integrity: Option<Spanned<String>>,
    integrity_key: Option<Spanned<String>>,
    #[serde(default)]
    esn: bool,
    initial_seq: Option<u64>,
    replay_window: Option<Spanned<i64>>,
    udp_encap: Option<Spanned<UdpEncapRaw>>,
    ttl: Option<Spanned<i64>>,
    lifetime: Option<RawLifetime>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawPolicy {
    direction: Spanned<String>,
    priority: Option<i64>,
    src: Option<Spanned<String>>,
    dst: Option<Spanned<String>>,
    proto: Option<Spanned<StrOrInt>>,
    sport: Option<Spanned<StrOrInt>>,
    dport: Option<Spanned<StrOrInt>>,
    action: Spanned<String>,
    sa: Option<Spanned<StrOrInt>>,
    /// A bundle: the AH SA applied around the ESP SA `sa`.
    ah_sa: Option<Spanned<StrOrInt>>,
    /// Instead of `sa`: one ESP SA per worker (see `PolicyConfig::per_worker_sas`).
    per_worker_sas: Option<Spanned<Vec<Spanned<StrOrInt>>>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRoute {
    dst: Spanned<String>,
    port: Spanned<StrOrInt>,
    via: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawNeighbour {
    port: Spanned<StrOrInt>,
    mac: Spanned<String>,
    ip: Option<Spanned<String>>,
}

/// Maps byte offsets to 1-based line numbers.
struct Lines<'a> {
    file: &'a str,
    starts: Vec<usize>,
}

impl<'a> Lines<'a> {
    fn new(text: &str, file: &'a str) -> Self {
        let mut starts = vec![0];
        starts.extend(text.match_indices('\n').map(|(i, _)| i + 1));
        Lines { file, starts }
    }
    fn line(&self, span: &ByteRange<usize>) -> usize {
        self.starts.partition_point(|&s| s <= span.start)
    }
    fn err<T>(&self, v: &Spanned<T>, field: &str, m: impl Into<String>) -> ConfigError {
        ConfigError::new(self.file, self.line(&v.span()), field, m)
    }
    fn loc<T>(&self, v: &Spanned<T>) -> Location {
        Location::new(self.file, self.line(&v.span()))
    }
}

pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
    let lines = Lines::new(text, file);
    let raw: RawConfig = toml::from_str(text).map_err(|e| toml_error(&lines, text, file, e))?;
    let mut cfg = Config {
        burst: DEFAULT_BURST,
        policy: CryptoPolicy {
            allow_legacy: raw.allow_legacy_crypto,
            allow_null: raw.allow_null_null,
        },
        ..Config::default()
    };
    if let Some(b) = &raw.burst {
        cfg.burst = usize::try_from(*b.get_ref())
            .ok()
            .filter(|&b| (1..=MAX_BURST).contains(&b))
            .ok_or_else(|| lines.err(b, "burst", format!("must be 1..={MAX_BURST}")))?;
    }
    if let Some(w) = &raw.workers {
        cfg.workers = Some(
            usize::try_from(*w.get_ref())
                .ok()
                .filter(|&w| (1..=MAX_WORKERS).contains(&w))
                .ok_or_else(|| lines.err(w, "workers", format!("must be 1..={MAX_WORKERS}")))?,
        );
    }
    for (i, p) in raw.port.iter().enumerate() {
        let port = convert_port(&lines, i, p, &cfg)?;
        cfg.ports.push(port);
    }
    let index = add_sas(&lines, &raw.sa, &mut cfg)?;
    for p in &raw.policy {
        let pol = convert_policy(&lines, p, &cfg, &index)?;
        cfg.policies.push(pol);
    }
    for r in &raw.route {
        let route = convert_route(&lines, r, &mut cfg)?;
        cfg.routes.push(route);
    }
    for n in &raw.neighbour {
        let neighbour = convert_neighbour(&lines, n, &mut cfg)?;
        cfg.neighbours.push(neighbour);
    }
    Ok(cfg)
}

/// A TOML error with its line, and the field named by the text before `=` on that line —
/// never by the value at the error's span: that value may be (part of) a key.
fn toml_error(lines: &Lines<'_>, text: &str, file: &str, e: toml::de::Error) -> ConfigError {
    // The field is named by the text before `=` on the error's line, never by the
    // value at the error's span: that value may be (part of) a key.
    let (line, field) = match e.span() {
        Some(sp) => {
            let line = lines.line(&sp);
            let start = lines.starts.get(line.wrapping_sub(1)).copied().unwrap_or(0);
            let text_of_line = text.get(start..).unwrap_or("").lines().next().unwrap_or("");
            let name = match text_of_line.split_once('=') {
                Some((name, _)) => name.trim().to_string(),
                None => shown(text_of_line.trim()).to_string(),
            };
            (line, name)
        }
        None => (0, String::new()),
    };
    let msg = e.message().to_string();
    ConfigError::new(
        file,
        line,
        if field.is_empty() { "syntax" } else { &field },
        msg,
    )
}

/// Port `i` of the file; `cfg` holds the ports before it (names must differ).
fn convert_port(
    lines: &Lines<'_>,
    i: usize,
    p: &Spanned<RawPort>,
    cfg: &Config,
) -> Result<PortConfig, ConfigError> {
    let loc = lines.loc(p);
    let p = p.get_ref();
    let mac = match &p.mac {
        Some(m) => parse_mac(m.get_ref()).ok_or_else(|| {
            lines.err(m, "mac", format!("'{}' is not a MAC address", m.get_ref()))
        })?,
        None => default_port_mac(i),
    };
    let mut addresses = Vec::new();
    for a in &p.addresses {
        addresses.push(parse_prefix(a.get_ref()).map_err(|m| lines.err(a, "addresses", m))?);
    }
    if cfg.ports.iter().any(|q| q.name == *p.name.get_ref()) {
        return Err(lines.err(
            &p.name,
            "name",
            format!("duplicate port '{}'", p.name.get_ref()),
        ));
    }
    let role = match &p.role {
        None => None,
        Some(r) => Some(match r.get_ref().as_str() {
            "protected" => PortRole::Protected,
            "unprotected" => PortRole::Unprotected,
            o => {
                return Err(lines.err(
                    r,
                    "role",
                    format!("{} is not protected or unprotected", shown(o)),
                ))
            }
        }),
    };
    let mtu = match &p.mtu {
        None => None,
        Some(m) => Some(
            u16::try_from(*m.get_ref())
                .ok()
                .filter(|&m| (MIN_MTU..=MAX_MTU).contains(&m))
                .ok_or_else(|| lines.err(m, "mtu", format!("must be {MIN_MTU}..={MAX_MTU}")))?,
        ),
    };
    Ok(PortConfig {
        name: p.name.get_ref().clone(),
        mac,
        interface: p.interface.clone(),
        addresses,
        role,
        mtu,
        loc,
    })
}

/// The SAs, into `cfg`; returns their index by name and SPI for the policies.
fn add_sas(
    lines: &Lines<'_>,
    raw: &[Spanned<RawSa>],
    cfg: &mut Config,
) -> Result<SaIndex, ConfigError> {
    // SAs by name and by SPI, per direction: policies find theirs in constant time, and a
    // name given twice is refused (a policy naming it would be ambiguous).
    let mut by_name: HashMap<(Direction, String), usize> = HashMap::new();
    let mut by_spi: HashMap<(Direction, u32), usize> = HashMap::new();
    for s in raw {
        let sa = convert_sa(lines, s)?;
        let i = cfg.sas.len();
        if let Some(name) = &sa.name {
            if let Some(o) = by_name.insert((sa.direction, name.clone()), i) {
                return Err(sa.loc.error(
                    "name",
                    format!(
                        "duplicate {} SA name {} (also at line {})",
                        sa.direction,
                        shown(name),
                        cfg.sas[o].loc.line
                    ),
                ));
            }
        }
        by_spi.entry((sa.direction, sa.spi)).or_insert(i);
        cfg.sas.push(sa);
    }
    Ok(SaIndex { by_name, by_spi })
}

fn convert_route(
    lines: &Lines<'_>,
    r: &Spanned<RawRoute>,
    cfg: &mut Config,
) -> Result<RouteConfig, ConfigError> {
    let loc = lines.loc(r);
    let r = r.get_ref();
    let dst = parse_prefix(r.dst.get_ref()).map_err(|m| lines.err(&r.dst, "dst", m))?;
    let port = port_index(lines, &r.port, cfg)?;
    let via = match &r.via {
        Some(v) => Some(parse_addr(v.get_ref()).map_err(|m| lines.err(v, "via", m))?),
        None => None,
    };
    Ok(RouteConfig {
        dst,
        port,
        via,
        loc,
    })
}

fn convert_neighbour(
    lines: &Lines<'_>,
    n: &Spanned<RawNeighbour>,
    cfg: &mut Config,
) -> Result<NeighbourConfig, ConfigError> {
    let loc = lines.loc(n);
    let n = n.get_ref();
    let port = port_index(lines, &n.port, cfg)?;
    let mac = parse_mac(n.mac.get_ref()).ok_or_else(|| {
        lines.err(
            &n.mac,
            "mac",
            format!("'{}' is not a MAC address", n.mac.get_ref()),
        )
    })?;
    let ip = match &n.ip {
        Some(i) => Some(parse_addr(i.get_ref()).map_err(|m| lines.err(i, "ip", m))?),
        None => None,
    };
    Ok(NeighbourConfig { port, ip, mac, loc })
}

/// A port by name, or by number (ports up to that number are implied when no port table
/// is given, as in ipsec-secgw).
fn port_index(
    lines: &Lines<'_>,
    v: &Spanned<StrOrInt>,
    cfg: &mut Config,
) -> Result<usize, ConfigError> {
    match v.get_ref() {
        StrOrInt::Str(name) => cfg
            .ports
            .iter()
            .position(|p| p.name == *name)
            .ok_or_else(|| lines.err(v, "port", format!("no port named {}", shown(name)))),
        StrOrInt::Int(n) => {
            let n = usize::try_from(*n)
                .ok()
                .filter(|&n| n < 64)
                .ok_or_else(|| lines.err(v, "port", "port number must be 0..63"))?;
            cfg.ensure_ports(n + 1);
            Ok(n)
        }
    }
}

fn direction(lines: &Lines<'_>, v: &Spanned<String>) -> Result<Direction, ConfigError> {
    match v.get_ref().as_str() {
        "in" | "inbound" => Ok(Direction::In),
        "out" | "outbound" => Ok(Direction::Out),
        o => Err(lines.err(v, "direction", format!("{} is not in or out", shown(o)))),
    }
}

/// Where each SA of the file is in `Config::sas`.
struct SaIndex {
    by_name: HashMap<(Direction, String), usize>,
    by_spi: HashMap<(Direction, u32), usize>,
}
