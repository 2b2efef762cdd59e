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
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
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
    })?;
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
        cfg.ports.push(PortConfig {
            name: p.name.get_ref().clone(),
            mac,
            interface: p.interface.clone(),
            addresses,
            role,
            mtu,
            loc,
        });
    }
    // SAs by name and by SPI, per direction: policies find theirs in constant time, and a
    // name given twice is refused (a policy naming it would be ambiguous).
    let mut by_name: HashMap<(Direction, String), usize> = HashMap::new();
    let mut by_spi: HashMap<(Direction, u32), usize> = HashMap::new();
    for s in &raw.sa {
        let sa = convert_sa(&lines, s)?;
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
    let index = SaIndex { by_name, by_spi };
    for p in &raw.policy {
        let pol = convert_policy(&lines, p, &cfg, &index)?;
        cfg.policies.push(pol);
    }
    for r in &raw.route {
        let loc = lines.loc(r);
        let r = r.get_ref();
        let dst = parse_prefix(r.dst.get_ref()).map_err(|m| lines.err(&r.dst, "dst", m))?;
        let port = port_index(&lines, &r.port, &mut cfg)?;
        let via = match &r.via {
            Some(v) => Some(parse_addr(v.get_ref()).map_err(|m| lines.err(v, "via", m))?),
            None => None,
        };
        cfg.routes.push(RouteConfig {
            dst,
            port,
            via,
            loc,
        });
    }
    for n in &raw.neighbour {
        let loc = lines.loc(n);
        let n = n.get_ref();
        let port = port_index(&lines, &n.port, &mut cfg)?;
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
        cfg.neighbours.push(NeighbourConfig { port, ip, mac, loc });
    }
    Ok(cfg)
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

/// The key strings the TOML parser made are wiped when the raw SA goes, as soon as its
/// keys are converted (the bytes live on only in `Zeroizing` buffers).
impl Drop for RawSa {
    fn drop(&mut self) {
        for k in [&mut self.key, &mut self.cipher_key, &mut self.integrity_key]
            .into_iter()
            .flatten()
        {
            zeroize::Zeroize::zeroize(k.get_mut());
        }
    }
}

fn convert_sa(lines: &Lines<'_>, s: &Spanned<RawSa>) -> Result<SaConfig, ConfigError> {
    let loc = lines.loc(s);
    let s = s.get_ref();
    let dir = direction(lines, &s.direction)?;
    let spi = u32::try_from(*s.spi.get_ref())
        .map_err(|_| lines.err(&s.spi, "spi", "must fit in 32 bits"))?;
    let (proto, suite, enc_key, auth_key) = convert_algorithms(lines, s)?;
    let addr =
        |v: &Option<Spanned<String>>, field: &str| -> Result<std::net::IpAddr, ConfigError> {
            match v {
                Some(a) => parse_addr(a.get_ref()).map_err(|m| lines.err(a, field, m)),
                None => Err(lines.err(
                    &s.mode,
                    field,
                    format!("{} needs {field}", s.mode.get_ref()),
                )),
            }
        };
    let mode = match s.mode.get_ref().as_str() {
        "transport" => Mode::Transport,
        m @ ("ipv4-tunnel" | "ipv6-tunnel") => {
            let (local, remote) = (addr(&s.local, "local")?, addr(&s.remote, "remote")?);
            if local.is_ipv4() != (m == "ipv4-tunnel") || remote.is_ipv4() != local.is_ipv4() {
                return Err(lines.err(
                    &s.mode,
                    "mode",
                    format!(
                        "{m} endpoints must both be {}",
                        if m == "ipv4-tunnel" { "IPv4" } else { "IPv6" }
                    ),
                ));
            }
            Mode::Tunnel { local, remote }
        }
        o => {
            return Err(lines.err(
                &s.mode,
                "mode",
                format!("{} is not ipv4-tunnel, ipv6-tunnel or transport", shown(o)),
            ))
        }
    };
    let replay_window = match &s.replay_window {
        None => DEFAULT_REPLAY_WINDOW,
        Some(v) => u32::try_from(*v.get_ref())
            .ok()
            .filter(|&w| w <= MAX_REPLAY_WINDOW)
            .ok_or_else(|| {
                lines.err(
                    v,
                    "replay_window",
                    format!("must be 0..={MAX_REPLAY_WINDOW}"),
                )
            })?,
    };
    let udp_encap = match s.udp_encap.as_ref().map(|u| u.get_ref()) {
        None | Some(UdpEncapRaw::Flag(false)) => None,
        Some(UdpEncapRaw::Flag(true)) => Some(UdpEncap::default()),
        Some(UdpEncapRaw::Ports { sport, dport }) => Some(UdpEncap {
            src_port: sport.unwrap_or(4500),
            dst_port: dport.unwrap_or(4500),
        }),
    };
    let ttl = match &s.ttl {
        None => DEFAULT_TTL,
        Some(v) => u8::try_from(*v.get_ref())
            .ok()
            .filter(|&t| t > 0)
            .ok_or_else(|| lines.err(v, "ttl", "must be 1..=255"))?,
    };
    let l = s.lifetime.as_ref();
    let lifetime = Lifetime {
        soft_packets: l.and_then(|l| l.soft_packets),
        hard_packets: l.and_then(|l| l.hard_packets),
        soft_bytes: l.and_then(|l| l.soft_bytes),
        hard_bytes: l.and_then(|l| l.hard_bytes),
    };
    Ok(SaConfig {
        spi,
        direction: dir,
        mode,
        proto,
        suite,
        enc_key,
        auth_key,
        esn: s.esn,
        initial_seq: s.initial_seq.unwrap_or(0),
        replay_window,
        udp_encap,
        lifetime,
        ttl,
        name: s.name.clone(),
        loc,
    })
}

type Keys = (SaProto, Suite, Zeroizing<Vec<u8>>, Zeroizing<Vec<u8>>);

/// The algorithms of an SA: `aead` + `key` (+ `icv`) for combined-mode algorithms, or
/// `cipher` + `cipher_key` with `integrity` + `integrity_key`; AH takes only the latter.
fn convert_algorithms(lines: &Lines<'_>, s: &RawSa) -> Result<Keys, ConfigError> {
    let key_of = |v: &Option<Spanned<String>>, field: &str, at: &Spanned<String>| match v {
        Some(k) => parse_key(k.get_ref())
            .map(Zeroizing::new)
            .map_err(|m| lines.err(k, field, m)),
        None => Err(lines.err(at, field, "missing")),
    };
    let proto = match s.protocol.as_ref().map(|p| (p, p.get_ref().as_str())) {
        None | Some((_, "esp")) => SaProto::Esp,
        Some((_, "ah")) => SaProto::Ah,
        Some((p, o)) => {
            return Err(lines.err(p, "protocol", format!("{} is not esp or ah", shown(o))))
        }
    };
    if let Some(a) = &s.aead {
        if proto == SaProto::Ah {
            return Err(lines.err(a, "aead", "AH takes an integrity algorithm, not an AEAD"));
        }
        for (v, f) in [(&s.cipher, "cipher"), (&s.integrity, "integrity")] {
            if let Some(v) = v {
                return Err(lines.err(v, f, "an SA has either aead or cipher/integrity, not both"));
            }
        }
        let mut enc = combined_by_name(a.get_ref()).ok_or_else(|| {
            lines.err(
                a,
                "aead",
                format!("'{}' is not one of: {COMBINED_NAMES}", a.get_ref()),
            )
        })?;
        if let Some(v) = &s.icv {
            let n = match v.get_ref() {
                n @ (8 | 12 | 16) => *n as usize,
                n => {
                    return Err(lines.err(
                        v,
                        "icv",
                        format!("{n} is not an allowed ICV length (8, 12, 16)"),
                    ))
                }
            };
            enc = with_icv(enc, n).map_err(|m| lines.err(v, "icv", m))?;
        }
        let key = key_of(&s.key, "key", a)?;
        check_enc_key(enc, key.len())
            .map_err(|m| lines.err(s.key.as_ref().unwrap_or(a), "key", m))?;
        let suite = Suite {
            enc,
            integ: Integrity::None,
        };
        return Ok((proto, suite, key, Zeroizing::new(Vec::new())));
    }
    if let Some(k) = &s.key {
        return Err(lines.err(
            k,
            "key",
            "key goes with aead; use cipher_key and integrity_key",
        ));
    }
    if let Some(v) = &s.icv {
        return Err(lines.err(v, "icv", "icv goes with aead (GCM, CCM)"));
    }
    let enc = match &s.cipher {
        None => Encryption::Null,
        Some(c) => {
            if proto == SaProto::Ah {
                return Err(lines.err(c, "cipher", "AH does not encrypt"));
            }
            cipher_by_name(c.get_ref()).ok_or_else(|| {
                lines.err(
                    c,
                    "cipher",
                    format!("'{}' is not one of: {CIPHER_NAMES}", c.get_ref()),
                )
            })?
        }
    };
    let integ = match &s.integrity {
        None => Integrity::None,
        Some(i) => integrity_by_name(i.get_ref()).ok_or_else(|| {
            lines.err(
                i,
                "integrity",
                format!("'{}' is not one of: {INTEGRITY_NAMES}", i.get_ref()),
            )
        })?,
    };
    let enc_key = match (&s.cipher, enc) {
        (Some(c), e) if e != Encryption::Null => {
            let k = key_of(&s.cipher_key, "cipher_key", c)?;
            check_enc_key(e, k.len())
                .map_err(|m| lines.err(s.cipher_key.as_ref().unwrap_or(c), "cipher_key", m))?;
            k
        }
        _ => Zeroizing::new(Vec::new()),
    };
    let auth_key = match &s.integrity {
        Some(i) if integ != Integrity::None => {
            let k = key_of(&s.integrity_key, "integrity_key", i)?;
            check_auth_key(integ, k.len()).map_err(|m| {
                lines.err(s.integrity_key.as_ref().unwrap_or(i), "integrity_key", m)
            })?;
            k
        }
        _ => Zeroizing::new(Vec::new()),
    };
    if s.cipher.is_none() && s.integrity.is_none() {
        return Err(lines.err(&s.mode, "aead", "an SA needs aead, or cipher and integrity"));
    }
    Ok((proto, Suite { enc, integ }, enc_key, auth_key))
}

/// Where each SA of the file is in `Config::sas`.
struct SaIndex {
    by_name: HashMap<(Direction, String), usize>,
    by_spi: HashMap<(Direction, u32), usize>,
}

fn convert_policy(
    lines: &Lines<'_>,
    p: &Spanned<RawPolicy>,
    cfg: &Config,
    index: &SaIndex,
) -> Result<PolicyConfig, ConfigError> {
    let loc = lines.loc(p);
    let whole = p;
    let p = p.get_ref();
    let dir = direction(lines, &p.direction)?;
    let pfx = |v: &Option<Spanned<String>>, field: &str| -> Result<Option<Prefix>, ConfigError> {
        v.as_ref()
            .map(|s| parse_prefix(s.get_ref()).map_err(|m| lines.err(s, field, m)))
            .transpose()
    };
    let src = pfx(&p.src, "src")?;
    let dst = pfx(&p.dst, "dst")?;
    let (src, dst) = match (src, dst) {
        (Some(s), Some(d)) => (s, d),
        (Some(s), None) => (
            s,
            if s.is_ipv4() {
                Prefix::any_v4()
            } else {
                Prefix::any_v6()
            },
        ),
        (None, Some(d)) => (
            if d.is_ipv4() {
                Prefix::any_v4()
            } else {
                Prefix::any_v6()
            },
            d,
        ),
        (None, None) => {
            return Err(lines.err(
                whole,
                "dst",
                "a policy needs src or dst (use 0.0.0.0/0 or ::/0 for any)",
            ))
        }
    };
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(lines.err(whole, "dst", "src and dst of different families"));
    }
    let proto = match &p.proto {
        None => ANY_PROTO,
        Some(v) => match v.get_ref() {
            StrOrInt::Str(s) if s == "any" => ANY_PROTO,
            StrOrInt::Str(s) => {
                let n = parse_proto_name(s).ok_or_else(|| {
                    lines.err(v, "proto", format!("unknown protocol {}", shown(s)))
                })?;
                Range::new(n, n)
            }
            StrOrInt::Int(n) => {
                let n = u8::try_from(*n).map_err(|_| lines.err(v, "proto", "must be 0..=255"))?;
                Range::new(n, n)
            }
        },
    };
    let ports = |v: &Option<Spanned<StrOrInt>>, field: &str| -> Result<Range<u16>, ConfigError> {
        match v {
            None => Ok(ANY_PORT),
            Some(s) => match s.get_ref() {
                StrOrInt::Str(t) if t == "any" => Ok(ANY_PORT),
                StrOrInt::Str(t) => parse_range_u16(t).map_err(|m| lines.err(s, field, m)),
                StrOrInt::Int(n) => {
                    let n =
                        u16::try_from(*n).map_err(|_| lines.err(s, field, "must be 0..=65535"))?;
                    Ok(Range::new(n, n))
                }
            },
        }
    };
    let sport = ports(&p.sport, "sport")?;
    let dport = ports(&p.dport, "dport")?;
    if let (Some(a), false) = (&p.ah_sa, p.action.get_ref() == "protect") {
        return Err(lines.err(a, "ah_sa", "ah_sa goes with action = \"protect\""));
    }
    let action = match p.action.get_ref().as_str() {
        "protect" => {
            let sa =
                p.sa.as_ref()
                    .ok_or_else(|| lines.err(&p.action, "sa", "protect needs sa = NAME or SPI"))?;
            let find = |v: &Spanned<StrOrInt>, field: &str| {
                let at = match v.get_ref() {
                    StrOrInt::Str(name) => index.by_name.get(&(dir, name.clone())),
                    StrOrInt::Int(spi) => u32::try_from(*spi)
                        .ok()
                        .and_then(|spi| index.by_spi.get(&(dir, spi))),
                };
                let found = at.map(|&i| &cfg.sas[i]);
                found.ok_or_else(|| {
                    lines.err(v, field, format!("no {dir} SA with that name or SPI"))
                })
            };
            let found = find(sa, "sa")?;
            match &p.ah_sa {
                None => Action::Protect(found.spi),
                Some(a) => {
                    let ah = find(a, "ah_sa")?;
                    if found.proto != SaProto::Esp || ah.proto != SaProto::Ah {
                        return Err(lines.err(
                            a,
                            "ah_sa",
                            "a bundle is an ESP SA (sa) inside an AH SA (ah_sa)",
                        ));
                    }
                    Action::Bundle {
                        esp: found.spi,
                        ah: ah.spi,
                    }
                }
            }
        }
        "bypass" => Action::Bypass,
        "discard" => Action::Discard,
        o => {
            return Err(lines.err(
                &p.action,
                "action",
                format!("{} is not protect, bypass or discard", shown(o)),
            ))
        }
    };
    Ok(PolicyConfig {
        direction: dir,
        priority: p.priority.unwrap_or(0),
        src,
        dst,
        proto,
        sport,
        dport,
        action,
        loc,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_configs_parse() {
        for (t, name) in [
            (crate::DEFAULT_CONFIG, "default"),
            (crate::DEFAULT_PEER_CONFIG, "peer"),
        ] {
            let c = crate::parse(t, name, None).unwrap();
            assert_eq!(c.ports.len(), 2);
            assert_eq!(c.sas.len(), 2);
            assert!(c.policies.len() >= 2);
        }
    }

    fn err(t: &str) -> ConfigError {
        crate::parse(t, "gw.toml", Some(crate::Format::Native)).unwrap_err()
    }

    #[test]
    fn errors_name_line_and_field() {
        let base =
            "[[sa]]\ndirection = \"out\"\nspi = 1\nmode = \"transport\"\naead = \"aes-128-gcm\"\n";
        let e = err(&format!("{base}key = \"0x0011\"\n"));
        assert_eq!((e.line, e.field.as_str()), (6, "key"), "{e}");
        let e = err(&format!(
            "{base}key = \"0x00112233445566778899aabbccddeeff00112233\"\nicv = 10\n"
        ));
        assert_eq!((e.line, e.field.as_str()), (7, "icv"), "{e}");
        let e = err(&format!(
            "{base}key = \"0x00112233445566778899aabbccddeeff00112233\"\nreplay_windw = 10\n"
        ));
        assert_eq!((e.line, e.field.as_str()), (7, "replay_windw"), "{e}");
        assert!(e.message.contains("unknown field"), "{e}");
        let e = err(
            "[[policy]]\ndirection = \"out\"\ndst = \"10.0.0.0/8\"\naction = \"protect\"\nsa = 5\n",
        );
        assert_eq!((e.line, e.field.as_str()), (5, "sa"), "{e}");
        let e = err("[[route]]\ndst = \"10.0.0.0/8\"\nport = \"north\"\n");
        assert_eq!((e.line, e.field.as_str()), (3, "port"), "{e}");
    }

    fn gcm_sa(direction: &str, spi: u32, key_byte: u8) -> String {
        let key: String = std::iter::repeat_n(format!("{key_byte:02x}"), 20).collect();
        format!(
            "[[sa]]\ndirection = \"{direction}\"\nspi = {spi}\nmode = \"transport\"\n\
             aead = \"aes-128-gcm\"\nkey = \"0x{key}\"\n\n"
        )
    }

    #[test]
    fn a_number_too_large_names_its_field_not_its_value() {
        let e = err(&format!(
            "{}initial_seq = 99999999999999999999\n",
            gcm_sa("out", 0x1000, 1)
        ));
        assert_eq!((e.line, e.field.as_str()), (8, "initial_seq"), "{e}");
    }

    fn policy(action: &str, dst: &str, priority: i64) -> String {
        let sa = if action == "protect" {
            "sa = 0x1000\n"
        } else {
            ""
        };
        format!(
            "[[policy]]\ndirection = \"out\"\npriority = {priority}\ndst = \"{dst}\"\n\
             action = \"{action}\"\n{sa}\n"
        )
    }

    #[test]
    fn a_protect_policy_shadowed_by_bypass_or_discard_is_refused_naming_both() {
        let sa = gcm_sa("out", 0x1000, 1);
        for action in ["bypass", "discard"] {
            // The open policy first by priority, and first by position.
            for (open_prio, open_first) in [(10, false), (0, true)] {
                let (a, b) = (
                    policy(action, "203.0.113.0/24", open_prio),
                    policy("protect", "203.0.113.128/25", 0),
                );
                let text = if open_first {
                    format!("{sa}{a}{b}")
                } else {
                    format!("{sa}{b}{a}")
                };
                let e = err(&text);
                assert_eq!(e.field, "policy", "{e}");
                assert!(
                    e.message.contains(&format!("the {action} policy at line")),
                    "{e}"
                );
            }
        }
        // A narrower bypass, or one that comes after, leaves the protect policy its traffic.
        for text in [
            format!(
                "{sa}{}{}",
                policy("bypass", "203.0.113.0/25", 10),
                policy("protect", "203.0.113.0/24", 0)
            ),
            format!(
                "{sa}{}{}",
                policy("protect", "203.0.113.0/24", 0),
                policy("bypass", "203.0.113.0/24", 0)
            ),
        ] {
            crate::parse(&text, "gw.toml", None).unwrap();
        }
    }

    #[test]
    fn reserved_spis_are_refused() {
        for spi in [0, 1, 255] {
            let e = err(&gcm_sa("out", spi, 1));
            // The SA's line (where its [[sa]] starts) and the field.
            assert_eq!((e.line, e.field.as_str()), (1, "spi"), "{e}");
            assert!(e.message.contains("reserved"), "{e}");
        }
        crate::parse(&gcm_sa("out", 256, 1), "gw.toml", None).unwrap();
    }

    #[test]
    fn an_sa_name_given_twice_is_refused_naming_both_lines() {
        let named =
            |spi, k| gcm_sa("out", spi, k).replacen("[[sa]]\n", "[[sa]]\nname = \"t\"\n", 1);
        let e = err(&format!("{}{}", named(0x1000, 1), named(0x2000, 2)));
        assert_eq!((e.line, e.field.as_str()), (9, "name"), "{e}");
        assert!(e.message.contains("duplicate out SA name") && e.message.contains("line 1"));
        // The same name in the other direction is another SA (a pair is often named alike).
        let other = gcm_sa("in", 0x2000, 2).replacen("[[sa]]\n", "[[sa]]\nname = \"t\"\n", 1);
        crate::parse(&format!("{}{}", named(0x1000, 1), other), "gw.toml", None).unwrap();
    }

    #[test]
    fn one_key_on_two_sas_is_refused_naming_both() {
        for (d1, d2) in [("out", "out"), ("out", "in"), ("in", "in")] {
            let e = err(&format!(
                "{}{}",
                gcm_sa(d1, 0x1000, 7),
                gcm_sa(d2, 0x2000, 7)
            ));
            assert_eq!((e.line, e.field.as_str()), (8, "key"), "{e}");
            assert!(e.message.contains("0x00001000") && e.message.contains("0x00002000"));
            assert!(e.message.contains("line 1"), "{e}");
            assert!(
                !e.message.contains("0707"),
                "no key bytes in the message: {e}"
            );
        }
        crate::parse(
            &format!("{}{}", gcm_sa("out", 0x1000, 7), gcm_sa("in", 0x2000, 8)),
            "gw.toml",
            None,
        )
        .unwrap();
    }

    #[test]
    fn duplicate_spis_name_the_first_sa() {
        let e = err(&format!(
            "{}{}",
            gcm_sa("out", 0x1000, 7),
            gcm_sa("out", 0x1000, 8)
        ));
        assert_eq!((e.line, e.field.as_str()), (8, "spi"), "{e}");
        assert!(e.message.contains("at line 1"), "{e}");
    }

    #[test]
    fn ah_sas_and_bundles() {
        let t = r#"
[[sa]]
direction = "out"
spi = 0x101
mode = "transport"
cipher = "aes-128-cbc"
cipher_key = "0x000102030405060708090a0b0c0d0e0f"
integrity = "hmac-sha256"
integrity_key = "0x000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f"

[[sa]]
direction = "out"
spi = 0x102
mode = "transport"
protocol = "ah"
integrity = "aes-128-gmac"
integrity_key = "0x000102030405060708090a0b0c0d0e0f01020304"

[[policy]]
direction = "out"
src = "192.0.2.1/32"
dst = "192.0.2.2/32"
action = "protect"
sa = 0x101
ah_sa = 0x102
"#;
        let c = crate::parse(t, "x.toml", None).unwrap();
        assert_eq!(
            c.policies[0].action,
            Action::Bundle {
                esp: 0x101,
                ah: 0x102
            }
        );
        assert_eq!(
            c.sas[1].suite.integ,
            espgw_crypto::Integrity::AesGmac { key_len: 16 }
        );
        // The bundle's order is fixed: sa names ESP, ah_sa names AH.
        let e = crate::parse(
            &t.replace("sa = 0x101\nah_sa = 0x102", "sa = 0x102\nah_sa = 0x101"),
            "x.toml",
            None,
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (25, "ah_sa"));
        let e =
            crate::parse(&t.replace("ah_sa = 0x102", "ah_sa = 0x109"), "x.toml", None).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (25, "ah_sa"));
        let e = crate::parse(&t.replace("\"protect\"", "\"bypass\""), "x.toml", None).unwrap_err();
        assert_eq!(e.field, "ah_sa");
        // GMAC is named as an ESP cipher, not as ESP integrity.
        let esp_gmac = t
            .replace(
                "integrity = \"hmac-sha256\"",
                "integrity = \"aes-128-gmac\"",
            )
            .replacen(
                "0x000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f",
                "0x000102030405060708090a0b0c0d0e0f01020304",
                1,
            );
        let e = crate::parse(&esp_gmac, "x.toml", None).unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "algorithm"));
        assert!(e.message.contains("GMAC integrity is for AH"), "{e}");
    }
}
