//! setkey(8) scripts, as Linux and the BSDs write them.
//!
//! ```text
//! flush;
//! spdflush;
//! add 192.0.2.1 192.0.2.2 esp 0x1000 -m tunnel -E aes-gcm-16 0x<key||salt>;
//! add 192.0.2.2 192.0.2.1 esp 0x2000 -m tunnel -E aes-gcm-16 0x<key||salt>;
//! spdadd 198.51.100.0/24 203.0.113.0/24 any -P out ipsec esp/tunnel/192.0.2.1-192.0.2.2/require;
//! spdadd 203.0.113.0/24 198.51.100.0/24 any -P in ipsec esp/tunnel/192.0.2.2-192.0.2.1/require;
//! ```
//!
//! The kernel's SAD has no direction; a gateway needs one, so each SA takes the direction
//! (and mode) of the policy that uses it: an SA whose endpoints match an `out` policy's
//! tunnel (or, in transport mode, its selector addresses) is outbound; one matching an
//! `in` or `fwd` policy is inbound. An SA no policy uses is an error, as is a policy whose
//! SA is missing. Time lifetimes (`-lh`, `-ls`) are read and not enforced; byte lifetimes
//! (`-bh`, `-bs`) are. `-r N` sets the replay window in packets.
//!
//! A setkey script has no routes (the kernel's routing table supplies them), so espgw gives
//! it the test bed's two ports: port 0 (south, protected side) and port 1 (north, towards
//! the peer). Outbound traffic leaves north: routes to each outbound tunnel's remote end and
//! to the destinations of outbound transport and bypass policies. Inbound traffic leaves
//! south: routes to the destinations of inbound policies.

use std::collections::HashMap;
use std::net::IpAddr;

use espgw_crypto::{Encryption, Integrity, Suite};
use zeroize::Zeroizing;

use crate::algorithms::*;
use crate::model::*;
use crate::text::*;
use crate::ConfigError;

mod sa;
#[cfg(test)]
mod tests;

use sa::parse_add;

/// A token: a slice of the file's text (never a copy: a key's token would leave its copy
/// behind in freed memory; `tests/keys_wiped.rs`), and its line.
#[derive(Debug)]
struct Tok<'t> {
    s: &'t str,
    line: usize,
}

/// Tokens: words, quoted strings (kept with their quotes, to the closing quote or the end
/// of the line), and `;`; a `#` ends the line.
fn tokenize(text: &str) -> Vec<Tok<'_>> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        // Where the word being read started, and where a quoted string read ahead ended.
        let mut word: Option<usize> = None;
        let mut skip_to = 0;
        for (at, ch) in raw.char_indices() {
            if at < skip_to {
                continue;
            }
            if !(ch == '#' || ch == ';' || ch == '"' || ch.is_whitespace()) {
                word.get_or_insert(at);
                continue;
            }
            if let Some(w) = word.take() {
                out.push(Tok {
                    s: &raw[w..at],
                    line,
                });
            }
            match ch {
                '#' => break,
                ';' => out.push(Tok { s: ";", line }),
                '"' => {
                    let close = raw[at + 1..].find('"').map_or(raw.len(), |j| at + 2 + j);
                    out.push(Tok {
                        s: &raw[at..close],
                        line,
                    });
                    skip_to = close;
                }
                _ => {}
            }
        }
        if let Some(w) = word {
            out.push(Tok { s: &raw[w..], line });
        }
    }
    out
}

/// A parsed `add`, before its direction is known.
struct PendingSa {
    src: IpAddr,
    dst: IpAddr,
    spi: u32,
    proto: SaProto,
    suite: Suite,
    enc_key: Zeroizing<Vec<u8>>,
    auth_key: Zeroizing<Vec<u8>>,
    udp: Option<UdpEncap>,
    replay_window: u32,
    lifetime: Lifetime,
    loc: Location,
    used: Option<(Direction, Mode)>,
}

/// An SA is named by its destination, protocol and SPI (RFC 4301): a second `add` of the
/// same one is a mistake to name as such (left alone, the second would be the one no
/// policy uses). `added` maps each SA added so far to its line (linear in the SAs).
fn refuse_duplicate(
    added: &mut HashMap<(u32, IpAddr, SaProto), usize>,
    sa: &PendingSa,
) -> Result<(), ConfigError> {
    match added.insert((sa.spi, sa.dst, sa.proto), sa.loc.line) {
        Some(line) => Err(sa.loc.error(
            "spi",
            format!(
                "duplicate SA 0x{:x} to {} (also added at line {line})",
                sa.spi, sa.dst
            ),
        )),
        None => Ok(()),
    }
}

#[derive(Clone, Copy)]
enum Template {
    Tunnel(IpAddr, IpAddr),
    Transport,
}

/// A policy's templates, innermost first (one SA, or ESP then AH).
type Templates = Vec<(SaProto, Template)>;

struct Stmt<'a> {
    toks: &'a [Tok<'a>],
    i: usize,
    file: &'a str,
}

impl<'a> Stmt<'a> {
    fn line(&self) -> usize {
        self.toks
            .get(self.i.min(self.toks.len().saturating_sub(1)))
            .map_or(0, |t| t.line)
    }
    fn err(&self, field: &str, m: impl Into<String>) -> ConfigError {
        ConfigError::new(self.file, self.line(), field, m)
    }
    fn next(&mut self, field: &str) -> Result<&'a str, ConfigError> {
        match self.toks.get(self.i) {
            Some(t) => {
                self.i += 1;
                Ok(t.s)
            }
            None => Err(self.err(field, "value missing")),
        }
    }
    fn peek(&self) -> Option<&'a str> {
        self.toks.get(self.i).map(|t| t.s)
    }
    /// Error about the token just read.
    fn err_prev(&self, field: &str, m: impl Into<String>) -> ConfigError {
        let line = self
            .toks
            .get(self.i.saturating_sub(1))
            .map_or(0, |t| t.line);
        ConfigError::new(self.file, line, field, m)
    }
}

pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
    let toks = tokenize(text);
    let mut sas: Vec<PendingSa> = Vec::new();
    let mut added = HashMap::new();
    let mut policies: Vec<(PolicyConfig, Templates)> = Vec::new();
    for stmt in toks.split(|t| t.s == ";") {
        if stmt.is_empty() {
            continue;
        }
        let mut s = Stmt {
            toks: stmt,
            i: 0,
            file,
        };
        let loc = Location::new(file, s.line());
        match s.next("command")? {
            "flush" => sas.clear(),
            "spdflush" => policies.clear(),
            "add" => {
                let sa = parse_add(&mut s, loc)?;
                refuse_duplicate(&mut added, &sa)?;
                sas.push(sa);
            }
            "spdadd" => {
                if let Some(p) = parse_spdadd(&mut s, loc)? {
                    policies.push(p);
                }
            }
            other => {
                s.i = 0;
                return Err(s.err(
                    "command",
                    format!(
                        "{} is not supported (flush, spdflush, add, spdadd)",
                        shown(other)
                    ),
                ));
            }
        }
        if s.i < stmt.len() {
            return Err(s.err("syntax", format!("unexpected {}", shown(stmt[s.i].s))));
        }
    }
    // Give each policy its SA, and each SA its direction and mode.
    let mut cfg = Config {
        burst: DEFAULT_BURST,
        ..Config::default()
    };
    for (mut p, templates) in policies {
        let mut spis = Vec::with_capacity(templates.len());
        for (proto, t) in templates {
            spis.push(resolve_template(&mut sas, &p, proto, t)?);
        }
        match spis[..] {
            [] => {}
            [spi] => p.action = Action::Protect(spi),
            [esp, ah] => p.action = Action::Bundle { esp, ah },
            _ => {
                return Err(p
                    .loc
                    .error("policy", "at most two templates (esp, then ah)"))
            }
        }
        cfg.policies.push(p);
    }
    derive_routes(&mut cfg, &sas);
    for sa in sas {
        let Some((direction, mode)) = sa.used else {
            return Err(sa.loc.error(
                "add",
                format!(
                    "SA 0x{:x} from {} to {} is used by no policy, so its direction is unknown",
                    sa.spi, sa.src, sa.dst
                ),
            ));
        };
        cfg.sas.push(SaConfig {
            spi: sa.spi,
            direction,
            mode,
            proto: sa.proto,
            suite: sa.suite,
            enc_key: sa.enc_key,
            auth_key: sa.auth_key,
            esn: false,
            initial_seq: 0,
            replay_window: sa.replay_window,
            udp_encap: sa.udp,
            lifetime: sa.lifetime,
            ttl: DEFAULT_TTL,
            name: None,
            loc: sa.loc,
            reqid: None,
        });
    }
    Ok(cfg)
}

/// Finds the SA a policy template names (same protocol; tunnel: same endpoints;
/// transport: endpoints inside the policy's selectors), gives it the policy's direction and
/// mode, and returns its SPI.
fn resolve_template(
    sas: &mut [PendingSa],
    p: &PolicyConfig,
    proto: SaProto,
    t: Template,
) -> Result<u32, ConfigError> {
    let dir = p.direction;
    let found = sas.iter_mut().find(|sa| {
        sa.proto == proto
            && match t {
                Template::Tunnel(a, b) => sa.src == a && sa.dst == b,
                Template::Transport => p.src.contains(sa.src) && p.dst.contains(sa.dst),
            }
    });
    let name = proto.name();
    let Some(sa) = found else {
        let what = match t {
            Template::Tunnel(a, b) => format!("{name}/tunnel/{a}-{b}"),
            Template::Transport => format!("{name}/transport between {} and {}", p.src, p.dst),
        };
        return Err(p.loc.error(
            "policy",
            format!("no SA for {what}: add one with 'add SRC DST {name} SPI ...'"),
        ));
    };
    let mode = match t {
        Template::Tunnel(a, b) => match dir {
            Direction::Out => Mode::Tunnel {
                local: a,
                remote: b,
            },
            Direction::In => Mode::Tunnel {
                local: b,
                remote: a,
            },
        },
        Template::Transport => Mode::Transport,
    };
    match sa.used {
        Some((d, m)) if d != dir || m != mode => Err(p.loc.error(
            "policy",
            format!(
                "SA 0x{:x} (line {}) is already used by a policy of another direction or mode",
                sa.spi, sa.loc.line
            ),
        )),
        _ => {
            sa.used = Some((dir, mode));
            Ok(sa.spi)
        }
    }
}

/// The two-port layout described in the module documentation.
fn derive_routes(cfg: &mut Config, sas: &[PendingSa]) {
    const SOUTH: usize = 0;
    const NORTH: usize = 1;
    cfg.ensure_ports(2);
    cfg.ports[SOUTH].name = "south".into();
    cfg.ports[NORTH].name = "north".into();
    let mut add = |dst: Prefix, port: usize, loc: &Location| {
        if !cfg.routes.iter().any(|r| r.dst == dst) {
            cfg.routes.push(RouteConfig {
                dst,
                port,
                via: None,
                loc: loc.clone(),
            });
        }
    };
    for sa in sas {
        if let Some((Direction::Out, Mode::Tunnel { remote, .. })) = sa.used {
            add(Prefix::host(remote), NORTH, &sa.loc);
        }
    }
    for p in cfg.policies.clone() {
        match p.direction {
            Direction::Out => {
                // The outermost SA decides where the packet goes.
                let outer = match p.action {
                    Action::Protect(spi) | Action::Bundle { ah: spi, .. } => Some(spi),
                    _ => None,
                };
                let tunnel = outer.is_some_and(|spi| {
                    sas.iter().any(|s| {
                        s.spi == spi
                            && matches!(s.used, Some((Direction::Out, Mode::Tunnel { .. })))
                    })
                });
                if !tunnel {
                    add(p.dst, NORTH, &p.loc);
                }
            }
            Direction::In => add(p.dst, SOUTH, &p.loc),
        }
    }
}

/// `ADDR` or `ADDR[PORT]`.
fn addr_with_port(s: &str) -> Result<(IpAddr, Option<u16>), String> {
    match s.split_once('[') {
        Some((a, rest)) => {
            let p = rest
                .strip_suffix(']')
                .ok_or(format!("{}: missing ']'", shown(s)))?;
            let port = if p == "any" {
                None
            } else {
                Some(
                    p.parse::<u16>()
                        .map_err(|_| format!("{} is not a port", shown(p)))?,
                )
            };
            Ok((parse_addr(a)?, port))
        }
        None => Ok((parse_addr(s)?, None)),
    }
}

fn skip_family_flags(s: &mut Stmt<'_>) {
    while matches!(s.peek(), Some("-4") | Some("-6") | Some("-n")) {
        s.i += 1;
    }
}

/// `ADDR[/LEN][[PORT]]` to a prefix and a port range.
fn range_with_port(s: &str) -> Result<(Prefix, Range<u16>), String> {
    let (p, port) = match s.split_once('[') {
        Some((p, rest)) => {
            let port = rest
                .strip_suffix(']')
                .ok_or(format!("{}: missing ']'", shown(s)))?;
            let r = if port == "any" {
                ANY_PORT
            } else {
                parse_range_u16(port)?
            };
            (p, r)
        }
        None => (s, ANY_PORT),
    };
    Ok((parse_prefix(p)?, port))
}

fn parse_spdadd(
    s: &mut Stmt<'_>,
    loc: Location,
) -> Result<Option<(PolicyConfig, Templates)>, ConfigError> {
    skip_family_flags(s);
    let (src, sport) = range_with_port(s.next("src")?).map_err(|m| s.err_prev("src", m))?;
    let (dst, dport) = range_with_port(s.next("dst")?).map_err(|m| s.err_prev("dst", m))?;
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(s.err_prev("dst", "source and destination of different families"));
    }
    let upper = s.next("upperspec")?;
    let proto = if upper == "any" {
        ANY_PROTO
    } else {
        let n = parse_proto_name(upper)
            .ok_or_else(|| s.err_prev("upperspec", format!("unknown protocol {}", shown(upper))))?;
        Range::new(n, n)
    };
    if s.next("-P")? != "-P" {
        return Err(s.err_prev("-P", "expected -P DIRECTION POLICY"));
    }
    let direction = match s.next("direction")? {
        "out" => Direction::Out,
        "in" | "fwd" => Direction::In,
        o => return Err(s.err_prev("direction", format!("{} is not in, out or fwd", shown(o)))),
    };
    // Linux: lower priority values win. The model: higher wins.
    let mut priority: i64 = -(1i64 << 31);
    if matches!(s.peek(), Some("prio") | Some("priority")) {
        s.i += 1;
        let v: i64 = s
            .next("priority")?
            .parse()
            .map_err(|_| s.err_prev("priority", "not a number"))?;
        priority = -v;
    }
    let (action, tmpl) = match s.next("policy")? {
        "none" => (Action::Bypass, Vec::new()),
        "discard" => (Action::Discard, Vec::new()),
        "ipsec" => {
            let mut templates = vec![parse_template(s)?];
            if s.peek().is_some() {
                templates.push(parse_template(s)?);
                if templates[0].0 != SaProto::Esp || templates[1].0 != SaProto::Ah {
                    return Err(s.err_prev(
                        "ipsec rule",
                        "a bundle is esp/... followed by ah/... (ESP inside, AH around it)",
                    ));
                }
                if s.peek().is_some() {
                    return Err(s.err("ipsec rule", "at most two templates (esp, then ah)"));
                }
            }
            (Action::Protect(0), templates)
        }
        o => {
            return Err(s.err_prev(
                "policy",
                format!("{} is not none, discard or ipsec", shown(o)),
            ))
        }
    };
    Ok(Some((
        PolicyConfig {
            direction,
            priority,
            src,
            dst,
            proto,
            sport,
            dport,
            action,
            per_worker_sas: Vec::new(),
            loc,
        },
        tmpl,
    )))
}

/// One `PROTO/MODE/SRC-DST/LEVEL` rule of an ipsec policy.
fn parse_template(s: &mut Stmt<'_>) -> Result<(SaProto, Template), ConfigError> {
    let rule = s.next("ipsec rule")?;
    let parts: Vec<&str> = rule.split('/').collect();
    if parts.len() != 4 {
        return Err(s.err_prev(
            "ipsec rule",
            format!("{} is not PROTO/MODE/SRC-DST/LEVEL", shown(rule)),
        ));
    }
    let proto = match parts[0] {
        "esp" => SaProto::Esp,
        "ah" => SaProto::Ah,
        o => {
            return Err(s.err_prev(
                "ipsec rule",
                format!("{} is not supported (esp, ah)", shown(o)),
            ))
        }
    };
    let level = parts[3].split(':').next().unwrap_or("");
    if !matches!(level, "require" | "unique" | "default" | "use") {
        return Err(s.err_prev(
            "ipsec rule",
            format!(
                "level {} is not default, use, require or unique",
                shown(parts[3])
            ),
        ));
    }
    let t = match parts[1] {
        "tunnel" => {
            let (a, b) = split_endpoints(parts[2]).ok_or_else(|| {
                s.err_prev("ipsec rule", format!("{} is not SRC-DST", shown(parts[2])))
            })?;
            Template::Tunnel(a, b)
        }
        "transport" => Template::Transport,
        o => {
            return Err(s.err_prev(
                "ipsec rule",
                format!("mode {} is not tunnel or transport", shown(o)),
            ))
        }
    };
    Ok((proto, t))
}

/// `A-B` where A and B are addresses (IPv6 addresses contain ':' but never '-').
fn split_endpoints(s: &str) -> Option<(IpAddr, IpAddr)> {
    let (a, b) = s.split_once('-')?;
    Some((a.parse().ok()?, b.parse().ok()?))
}
