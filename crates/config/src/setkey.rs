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

#[derive(Debug)]
struct Tok {
    s: String,
    line: usize,
}

/// Tokens: words, quoted strings (kept with their quotes), and `;`.
fn tokenize(text: &str) -> Vec<Tok> {
    let mut out = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let mut chars = raw.char_indices().peekable();
        let mut cur = String::new();
        while let Some((_, ch)) = chars.next() {
            match ch {
                '#' => break,
                '"' => {
                    let mut q = String::from('"');
                    for (_, c2) in chars.by_ref() {
                        q.push(c2);
                        if c2 == '"' {
                            break;
                        }
                    }
                    out.push(Tok { s: q, line });
                }
                ';' => {
                    if !cur.is_empty() {
                        out.push(Tok {
                            s: std::mem::take(&mut cur),
                            line,
                        });
                    }
                    out.push(Tok {
                        s: ";".into(),
                        line,
                    });
                }
                c if c.is_whitespace() => {
                    if !cur.is_empty() {
                        out.push(Tok {
                            s: std::mem::take(&mut cur),
                            line,
                        });
                    }
                }
                c => cur.push(c),
            }
        }
        if !cur.is_empty() {
            out.push(Tok { s: cur, line });
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
    toks: &'a [Tok],
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
                Ok(&t.s)
            }
            None => Err(self.err(field, "value missing")),
        }
    }
    fn peek(&self) -> Option<&'a str> {
        self.toks.get(self.i).map(|t| t.s.as_str())
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
            return Err(s.err("syntax", format!("unexpected {}", shown(&stmt[s.i].s))));
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

fn key_bytes(s: &str) -> Result<Vec<u8>, String> {
    if let Some(q) = s.strip_prefix('"').and_then(|q| q.strip_suffix('"')) {
        return Ok(q.as_bytes().to_vec());
    }
    if !(s.starts_with("0x") || s.starts_with("0X")) {
        return Err(format!(
            "{} is neither a 0x-hex nor a \"quoted\" key",
            shown(s)
        ));
    }
    parse_key(s)
}

fn parse_add(s: &mut Stmt<'_>, loc: Location) -> Result<PendingSa, ConfigError> {
    skip_family_flags(s);
    let (src, sport) = addr_with_port(s.next("src")?).map_err(|m| s.err_prev("src", m))?;
    let (dst, dport) = addr_with_port(s.next("dst")?).map_err(|m| s.err_prev("dst", m))?;
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(s.err_prev("dst", "source and destination of different families"));
    }
    let (proto, udp) = match s.next("protocol")? {
        "esp" => (SaProto::Esp, None),
        "esp-udp" => (
            SaProto::Esp,
            Some(UdpEncap {
                src_port: sport.unwrap_or(4500),
                dst_port: dport.unwrap_or(4500),
            }),
        ),
        "ah" => (SaProto::Ah, None),
        "ah-old" | "esp-old" | "ipcomp" | "tcp" => {
            return Err(s.err_prev("protocol", "only esp, esp-udp and ah are supported"))
        }
        o => return Err(s.err_prev("protocol", format!("unknown protocol {}", shown(o)))),
    };
    let spi = parse_u32(s.next("spi")?).map_err(|m| s.err_prev("spi", m))?;
    let mut replay_window = DEFAULT_REPLAY_WINDOW;
    let mut lifetime = Lifetime::default();
    let mut enc: Option<(Encryption, Zeroizing<Vec<u8>>)> = None;
    let mut integ: Option<(Integrity, Zeroizing<Vec<u8>>)> = None;
    while let Some(opt) = s.peek() {
        s.i += 1;
        match opt {
            "-m" => {
                let m = s.next("-m")?;
                if !matches!(m, "transport" | "tunnel" | "any") {
                    return Err(s.err_prev(
                        "-m",
                        format!("{} is not transport, tunnel or any", shown(m)),
                    ));
                }
            }
            "-r" => replay_window = parse_u32(s.next("-r")?).map_err(|m| s.err_prev("-r", m))?,
            "-u" | "-f" | "-lh" | "-ls" => {
                s.next(opt)?;
            }
            "-bh" => {
                lifetime.hard_bytes = Some(parse_u64(s.next(opt)?).map_err(|m| s.err_prev(opt, m))?)
            }
            "-bs" => {
                lifetime.soft_bytes = Some(parse_u64(s.next(opt)?).map_err(|m| s.err_prev(opt, m))?)
            }
            "-E" => {
                if proto == SaProto::Ah {
                    return Err(s.err_prev("-E", "AH does not encrypt: use -A"));
                }
                let name = s.next("-E")?;
                let material = Zeroizing::new(
                    key_bytes(s.next("-E key")?).map_err(|m| s.err_prev("-E key", m))?,
                );
                let e =
                    setkey_encryption(name, material.len()).map_err(|(f, m)| s.err_prev(f, m))?;
                check_enc_key(e, material.len()).map_err(|m| s.err_prev("-E key", m))?;
                enc = Some((e, material));
            }
            "-A" => {
                let name = s.next("-A")?;
                let i = integrity_by_name(name).filter(|i| *i != Integrity::None).ok_or_else(|| {
                    s.err_prev("-A", format!("authentication algorithm {} is not supported (hmac-md5, hmac-sha1, hmac-sha256, hmac-sha384, hmac-sha512, aes-xcbc-mac)", shown(name)))
                })?;
                let key = Zeroizing::new(
                    key_bytes(s.next("-A key")?).map_err(|m| s.err_prev("-A key", m))?,
                );
                check_auth_key(i, key.len()).map_err(|m| s.err_prev("-A key", m))?;
                integ = Some((i, key));
            }
            "-C" => return Err(s.err_prev("-C", "IPComp is not supported")),
            o => return Err(s.err_prev("add", format!("unknown option {}", shown(o)))),
        }
    }
    let (e, enc_key) = match (enc, proto) {
        (Some(e), _) => e,
        (None, SaProto::Ah) => (Encryption::Null, Zeroizing::new(Vec::new())),
        (None, SaProto::Esp) => return Err(loc.error("-E", "missing encryption algorithm")),
    };
    let (i, auth_key) = match integ {
        Some(i) => i,
        None if proto == SaProto::Ah => {
            return Err(loc.error("-A", "AH needs an authentication algorithm"))
        }
        None => (Integrity::None, Zeroizing::new(Vec::new())),
    };
    Ok(PendingSa {
        src,
        dst,
        spi,
        proto,
        suite: Suite { enc: e, integ: i },
        enc_key,
        auth_key,
        udp,
        replay_window,
        lifetime,
        loc,
        used: None,
    })
}

/// setkey's `-E` names; the key length chooses the AES size (key material includes the
/// salt or nonce where the algorithm has one).
/// Errors name the field: `-E` for the algorithm, `-E key` for its key.
fn setkey_encryption(name: &str, material: usize) -> Result<Encryption, (&'static str, String)> {
    let aes = |extra: usize| -> Result<usize, (&'static str, String)> {
        let k = material.saturating_sub(extra);
        if matches!(k, 16 | 24 | 32) && material >= extra {
            Ok(k)
        } else if extra == 0 {
            Err((
                "-E key",
                format!("{name} needs a 16-, 24- or 32-byte key, got {material}"),
            ))
        } else {
            Err(("-E key", format!(
                "{name} needs {}, {} or {} bytes of key material (a 16-, 24- or 32-byte key and a {extra}-byte salt/nonce), got {material}",
                16 + extra,
                24 + extra,
                32 + extra
            )))
        }
    };
    let icv = |n: &str| -> usize {
        n.rsplit('-')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16)
    };
    Ok(match name {
        "null" => Encryption::Null,
        "3des-cbc" | "des3_ede" => Encryption::TdesCbc,
        "aes-cbc" | "rijndael-cbc" | "aes" => Encryption::AesCbc { key_len: aes(0)? },
        "aes-ctr" | "rfc3686(ctr(aes))" => Encryption::AesCtr { key_len: aes(4)? },
        "aes-gcm-16" | "aes-gcm" | "rfc4106(gcm(aes))" | "aes-gcm-12" | "aes-gcm-8" => Encryption::AesGcm {
            key_len: aes(4)?,
            icv_len: icv(name),
        },
        "aes-ccm-16" | "aes-ccm" | "rfc4309(ccm(aes))" | "aes-ccm-12" | "aes-ccm-8" => Encryption::AesCcm {
            key_len: aes(3)?,
            icv_len: icv(name),
        },
        "chacha20-poly1305" | "rfc7539esp(chacha20,poly1305)" => Encryption::ChaCha20Poly1305,
        "null_aes_gmac" | "aes-gmac" | "rfc4543(gcm(aes))" => Encryption::AesGmac { key_len: aes(4)? },
        "des-cbc" | "blowfish-cbc" | "cast128-cbc" | "twofish-cbc" | "camellia-cbc" => {
            return Err(("-E", format!("encryption algorithm {} is not supported (single DES and the rest are broken or rare): use aes-gcm-16, aes-cbc, aes-ctr, aes-ccm-16, chacha20-poly1305 or, under the legacy switch, 3des-cbc", shown(name))))
        }
        o => return Err(("-E", format!("encryption algorithm {} is not supported (null, 3des-cbc, aes-cbc, aes-ctr, aes-gcm-16/12/8, aes-ccm-16/12/8, chacha20-poly1305, null_aes_gmac)", shown(o)))),
    })
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

#[cfg(test)]
mod tests {
    use super::*;

    const SCRIPT: &str = r#"#!/usr/sbin/setkey -f
flush;
spdflush;
# gateway 1
add 192.0.2.1 192.0.2.2 esp 0x1000 -m tunnel -r 2048
    -E aes-gcm-16 0x00112233445566778899aabbccddeeff01020304;
add 192.0.2.2 192.0.2.1 esp 0x2000 -m tunnel
    -E aes-gcm-16 0xffeeddccbbaa99887766554433221100a1a2a3a4;
spdadd 198.51.100.0/24 203.0.113.0/24 any -P out ipsec
    esp/tunnel/192.0.2.1-192.0.2.2/require;
spdadd 203.0.113.0/24 198.51.100.0/24 any -P in ipsec
    esp/tunnel/192.0.2.2-192.0.2.1/require;
spdadd 198.51.100.7 203.0.113.9[53] udp -P out none;
"#;

    #[test]
    fn parses_classic_script() {
        let c = parse(SCRIPT, "gw.conf").unwrap();
        c.validate().unwrap();
        let out = c.sa(Direction::Out, 0x1000).unwrap();
        assert_eq!(out.replay_window, 2048);
        assert_eq!(out.enc_key[out.enc_key.len() - 4..], [1, 2, 3, 4]);
        assert_eq!(
            out.mode,
            Mode::Tunnel {
                local: "192.0.2.1".parse().unwrap(),
                remote: "192.0.2.2".parse().unwrap()
            }
        );
        let inb = c.sa(Direction::In, 0x2000).unwrap();
        assert_eq!(inb.loc.line, 7);
        assert_eq!(
            inb.mode,
            Mode::Tunnel {
                local: "192.0.2.1".parse().unwrap(),
                remote: "192.0.2.2".parse().unwrap()
            }
        );
        assert_eq!(c.policies.len(), 3);
        assert_eq!(c.policies[0].action, Action::Protect(0x1000));
        assert_eq!(c.policies[1].direction, Direction::In);
        assert_eq!(c.policies[2].action, Action::Bypass);
        assert_eq!(c.policies[2].dport, Range::new(53, 53));
        assert_eq!(c.policies[2].proto, Range::new(17, 17));
        // Routes: the tunnel's far end and the bypassed host north, the inbound
        // destination south.
        let routes: Vec<(String, usize)> = c
            .routes
            .iter()
            .map(|r| (r.dst.to_string(), r.port))
            .collect();
        assert_eq!(
            routes,
            vec![
                ("192.0.2.2/32".to_string(), 1),
                ("198.51.100.0/24".to_string(), 0),
                ("203.0.113.9/32".to_string(), 1)
            ]
        );
    }

    #[test]
    fn an_sa_added_twice_is_named_as_a_duplicate() {
        let t = "add 192.0.2.1 192.0.2.2 esp 0x1000 -E aes-gcm-16 0x000102030405060708090a0b0c0d0e0f10111213;\n\
                 add 192.0.2.1 192.0.2.2 esp 0x1000 -E aes-gcm-16 0x0f0e0d0c0b0a09080706050403020100a0b0c0d0;\n\
                 spdadd 192.0.2.1 192.0.2.2 any -P out ipsec esp/transport//require;\n";
        let e = parse(t, "t").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "spi"), "{e}");
        assert!(
            e.message.contains("duplicate SA 0x1000") && e.message.contains("line 1"),
            "{e}"
        );
        assert!(!e.message.contains("used by no policy"), "{e}");
        assert!(!e.message.contains("0f0e0d"), "no key bytes: {e}");
    }

    #[test]
    fn transport_mode_resolves_by_address() {
        let t = "add 2001:db8::1 2001:db8::2 esp 0x10 -E aes-gcm-16 0x000102030405060708090a0b0c0d0e0f10111213;\n\
                 spdadd 2001:db8::1 2001:db8::2 any -P out ipsec esp/transport//require;\n";
        let c = parse(t, "t").unwrap();
        assert_eq!(c.sas[0].mode, Mode::Transport);
        assert_eq!(c.sas[0].direction, Direction::Out);
    }

    #[test]
    fn errors() {
        let e = parse("add 192.0.2.1 192.0.2.2 esp 0x10 -E 3des-cbc 0x00;\n", "x").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "-E key"));
        assert!(e.message.contains("needs 24 bytes"), "{e}");
        let e = parse(
            "add 192.0.2.1 192.0.2.2 esp 0x10 -E des-cbc 0x0011223344556677;\n",
            "x",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "-E"));
        let e = parse("add 192.0.2.1 192.0.2.2 esp 0x10 -E aes-cbc 0x00112233445566778899aabbccddeeff\n -A hmac-sha256 0x0011;\n", "x").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "-A key"));
        assert!(e.message.contains("32-byte key"), "{e}");
        let e = parse(
            "add 192.0.2.1 192.0.2.2 esp 0x10\n  -E aes-gcm-16 0x0011;\n",
            "x",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (2, "-E key"));
        let e = parse("spdadd 10.0.0.0/8 10.1.0.0/16 any -P out ipsec\n esp/tunnel/192.0.2.1-192.0.2.2/require;\n", "x").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "policy"));
        let e = parse("add 192.0.2.1 192.0.2.2 esp 0x10 -E aes-gcm-16 0x000102030405060708090a0b0c0d0e0f10111213;\n", "x").unwrap_err();
        assert_eq!(e.field, "add");
        let e = parse("dump;", "x").unwrap_err();
        assert_eq!(e.field, "command");
    }

    #[test]
    fn ah_and_bundles() {
        let t = "add 192.0.2.1 192.0.2.2 ah 0x120 -A hmac-sha256 0x000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f;\n\
                 add 192.0.2.1 192.0.2.2 esp 0x121 -E aes-cbc 0x000102030405060708090a0b0c0d0e0f -A hmac-sha1 0x0001020304050607080900010203040506070809;\n\
                 add 192.0.2.2 192.0.2.1 ah 0x130 -A aes-xcbc-mac 0x000102030405060708090a0b0c0d0e0f;\n\
                 spdadd 192.0.2.1 192.0.2.2 any -P out ipsec esp/transport//require ah/transport//require;\n\
                 spdadd 192.0.2.2 192.0.2.1 icmp -P in ipsec ah/transport//require;\n";
        let c = parse(t, "x").unwrap();
        c.validate().unwrap();
        assert_eq!(
            c.policies[0].action,
            Action::Bundle {
                esp: 0x121,
                ah: 0x120
            }
        );
        assert_eq!(c.policies[1].action, Action::Protect(0x130));
        let ah = c.sa(Direction::Out, 0x120).unwrap();
        assert_eq!(
            (ah.proto, ah.suite.integ),
            (SaProto::Ah, Integrity::HmacSha256_128)
        );
        assert_eq!(ah.mode, Mode::Transport);
        assert_eq!(c.sa(Direction::In, 0x130).unwrap().proto, SaProto::Ah);
        // AH does not encrypt; a bundle is ESP inside AH; three templates are too many.
        let e = parse("add 192.0.2.1 192.0.2.2 ah 0x120 -E aes-cbc 0x00;\n", "x").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "-E"));
        let e = parse("add 192.0.2.1 192.0.2.2 ah 0x120;\n", "x").unwrap_err();
        assert_eq!(e.field, "-A");
        let swapped = t.replace(
            "esp/transport//require ah/transport//require",
            "ah/transport//require esp/transport//require",
        );
        let e = parse(&swapped, "x").unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (4, "ipsec rule"));
        let three = t.replace(
            "ah/transport//require;\n",
            "ah/transport//require ah/transport//require;\n",
        );
        let e = parse(&three, "x").unwrap_err();
        assert_eq!(e.field, "ipsec rule");
        // A template's protocol must find an SA of that protocol.
        let e = parse(
            &t.replace("icmp -P in ipsec ah", "icmp -P in ipsec esp"),
            "x",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (5, "policy"));
        assert!(e.message.contains("no SA for esp/transport"), "{e}");
    }
}
