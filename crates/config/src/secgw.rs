//! DPDK ipsec-secgw configuration lines (`sp`, `sa`, `rt`, `neigh`), accepted as they are.
//!
//! ```text
//! sp ipv4 out esp protect 5 pri 1 dst 192.168.105.0/24 sport 0:65535 dport 0:65535
//! sa out 5 aead_algo aes-128-gcm aead_key de:ad:...:ca:fe mode ipv4-tunnel \
//!     src 172.16.1.5 dst 172.16.2.5
//! rt ipv4 dst 172.16.2.5/32 port 0
//! neigh port 0 d0:43:1e:12:34:56
//! ```
//!
//! A trailing `\` continues a line. Beside ipsec-secgw's own keywords, an `sa` line takes
//! espgw's `replay_window N`, `icv N`, `ttl N`, `udp_sport N`/`udp_dport N` and
//! `lifetime_{soft,hard}_{packets,bytes} N`.

use espgw_crypto::{Encryption, Integrity, Suite};

use crate::algorithms::*;
use espgw_wire::ethernet::parse_mac;
use zeroize::Zeroizing;

use crate::model::*;
use crate::text::*;
use crate::ConfigError;

/// A token and the physical line it came from.
struct Tok<'a> {
    s: &'a str,
    line: usize,
}

/// Splits the text into logical lines (joining `\` continuations) of tokens.
fn logical_lines(text: &str) -> Vec<Vec<Tok<'_>>> {
    let mut out = Vec::new();
    let mut cur: Vec<Tok<'_>> = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        let body = raw.split('#').next().unwrap_or("");
        let trimmed = body.trim_end();
        let (content, continues) = match trimmed.strip_suffix('\\') {
            Some(c) => (c, true),
            None => (trimmed, false),
        };
        cur.extend(content.split_whitespace().map(|s| Tok { s, line }));
        if !continues && !cur.is_empty() {
            out.push(std::mem::take(&mut cur));
        }
    }
    if !cur.is_empty() {
        out.push(cur);
    }
    out
}

struct Cursor<'a, 'b> {
    toks: &'b [Tok<'a>],
    i: usize,
    file: &'b str,
}

impl<'a, 'b> Cursor<'a, 'b> {
    fn line(&self) -> usize {
        self.toks
            .get(self.i.min(self.toks.len().saturating_sub(1)))
            .map_or(0, |t| t.line)
    }
    fn err(&self, field: &str, msg: impl Into<String>) -> ConfigError {
        ConfigError::new(self.file, self.line(), field, msg)
    }
    fn next(&mut self) -> Option<&'a str> {
        let t = self.toks.get(self.i)?;
        self.i += 1;
        Some(t.s)
    }
    /// The value after keyword `field`.
    fn value(&mut self, field: &str) -> Result<&'a str, ConfigError> {
        match self.toks.get(self.i) {
            Some(t) => {
                self.i += 1;
                Ok(t.s)
            }
            None => {
                self.i = self.i.saturating_sub(1);
                Err(self.err(field, "value missing"))
            }
        }
    }
    /// Parses the value after `field` with `f`, reporting errors at its line.
    fn parse<T>(
        &mut self,
        field: &str,
        f: impl FnOnce(&str) -> Result<T, String>,
    ) -> Result<T, ConfigError> {
        let v = self.value(field)?;
        f(v).map_err(|m| {
            self.i -= 1;
            let e = self.err(field, m);
            self.i += 1;
            e
        })
    }
    fn peek(&self) -> Option<&'a str> {
        self.toks.get(self.i).map(|t| t.s)
    }
}

pub fn parse(text: &str, file: &str) -> Result<Config, ConfigError> {
    let mut cfg = Config {
        burst: DEFAULT_BURST,
        ..Config::default()
    };
    let mut max_port = None::<usize>;
    for toks in logical_lines(text) {
        let mut c = Cursor {
            toks: &toks,
            i: 0,
            file,
        };
        let loc = Location::new(file, c.line());
        match c.next() {
            Some("sp") => cfg.policies.push(parse_sp(&mut c, loc)?),
            Some("sa") => cfg.sas.push(parse_sa(&mut c, loc)?),
            Some("rt") => {
                let r = parse_rt(&mut c, loc)?;
                max_port = max_port.max(Some(r.port));
                cfg.routes.push(r);
            }
            Some("neigh") => {
                let n = parse_neigh(&mut c, loc)?;
                max_port = max_port.max(Some(n.port));
                cfg.neighbours.push(n);
            }
            Some(other) => {
                c.i = 0;
                return Err(c.err(
                    "rule",
                    format!("unknown rule type {} (sp, sa, rt, neigh)", shown(other)),
                ));
            }
            None => {}
        }
    }
    if let Some(m) = max_port {
        cfg.ensure_ports(m + 1);
    }
    Ok(cfg)
}

fn parse_dir(c: &mut Cursor<'_, '_>) -> Result<Direction, ConfigError> {
    c.parse("direction", |s| match s {
        "in" => Ok(Direction::In),
        "out" => Ok(Direction::Out),
        o => Err(format!("{} is not in or out", shown(o))),
    })
}

fn parse_family(c: &mut Cursor<'_, '_>) -> Result<bool, ConfigError> {
    c.parse("ip version", |s| match s {
        "ipv4" => Ok(true),
        "ipv6" => Ok(false),
        o => Err(format!("{} is not ipv4 or ipv6", shown(o))),
    })
}

fn family_prefix(c: &mut Cursor<'_, '_>, field: &str, v4: bool) -> Result<Prefix, ConfigError> {
    c.parse(field, |s| {
        let p = parse_prefix(s)?;
        if p.is_ipv4() != v4 {
            return Err(format!(
                "{} is not an {} prefix",
                shown(s),
                if v4 { "IPv4" } else { "IPv6" }
            ));
        }
        Ok(p)
    })
}

fn parse_sp(c: &mut Cursor<'_, '_>, loc: Location) -> Result<PolicyConfig, ConfigError> {
    let v4 = parse_family(c)?;
    let direction = parse_dir(c)?;
    c.parse("protocol", |s| {
        if s == "esp" {
            Ok(())
        } else {
            Err(format!("{} is not esp", shown(s)))
        }
    })?;
    let action = match c.value("action")? {
        "protect" => Action::Protect(c.parse("protect", parse_u32)?),
        "bypass" => Action::Bypass,
        "discard" => Action::Discard,
        o => {
            c.i -= 1;
            return Err(c.err(
                "action",
                format!("{} is not protect, bypass or discard", shown(o)),
            ));
        }
    };
    let any = if v4 {
        Prefix::any_v4()
    } else {
        Prefix::any_v6()
    };
    let mut p = PolicyConfig {
        direction,
        priority: 0,
        src: any,
        dst: any,
        proto: ANY_PROTO,
        sport: ANY_PORT,
        dport: ANY_PORT,
        action,
        loc,
    };
    while let Some(k) = c.next() {
        match k {
            "pri" => {
                p.priority = c.parse("pri", |s| {
                    s.parse::<i64>()
                        .map_err(|_| format!("{} is not a number", shown(s)))
                })?
            }
            "src" => p.src = family_prefix(c, "src", v4)?,
            "dst" => p.dst = family_prefix(c, "dst", v4)?,
            "proto" => p.proto = c.parse("proto", parse_range_u8)?,
            "sport" => p.sport = c.parse("sport", parse_range_u16)?,
            "dport" => p.dport = c.parse("dport", parse_range_u16)?,
            o => {
                c.i -= 1;
                return Err(c.err("sp", format!("unknown keyword {}", shown(o))));
            }
        }
    }
    Ok(p)
}

/// A suite with its encryption keying material and integrity key.
type SuiteAndKeys = (Suite, Zeroizing<Vec<u8>>, Zeroizing<Vec<u8>>);

/// A DPDK algorithm keyword and its key, with the lines they were on.
#[derive(Default)]
struct AlgoSpec {
    name: Option<(String, usize)>,
    key: Option<(Zeroizing<Vec<u8>>, usize)>,
}

/// Builds the suite and keys from `aead_algo`/`aead_key`, or `cipher_algo`/`cipher_key`
/// with `auth_algo`/`auth_key` (`cipher_algo null` + `auth_algo aes-gmac` is AES-GMAC).
fn sa_algorithms(
    loc: &Location,
    aead: AlgoSpec,
    cipher: AlgoSpec,
    auth: AlgoSpec,
) -> Result<SuiteAndKeys, ConfigError> {
    let at = |line: usize, field: &str, m: String| ConfigError::new(&loc.file, line, field, m);
    let key = |spec: AlgoSpec,
               field: &str,
               line: usize|
     -> Result<(Zeroizing<Vec<u8>>, usize), ConfigError> {
        spec.key.ok_or_else(|| at(line, field, "missing".into()))
    };
    if let Some((name, line)) = aead.name.clone() {
        if let Some((_, l)) = cipher.name.as_ref().or(auth.name.as_ref()) {
            return Err(at(
                *l,
                "aead_algo",
                "aead_algo excludes cipher_algo and auth_algo".into(),
            ));
        }
        let enc = combined_by_name(&name)
            .filter(|e| !matches!(e, Encryption::AesGmac { .. }))
            .ok_or_else(|| at(line, "aead_algo", format!("{} is not one of: aes-128-gcm, aes-192-gcm, aes-256-gcm, aes-128-ccm, aes-192-ccm, aes-256-ccm, chacha20-poly1305", shown(&name))))?;
        let (k, kl) = key(aead, "aead_key", line)?;
        check_enc_key(enc, k.len()).map_err(|m| at(kl, "aead_key", m))?;
        return Ok((
            Suite {
                enc,
                integ: Integrity::None,
            },
            k,
            Zeroizing::new(Vec::new()),
        ));
    }
    let (cname, cline) = cipher.name.clone().ok_or_else(|| {
        loc.error(
            "cipher_algo",
            "missing (aead_algo, or cipher_algo and auth_algo)",
        )
    })?;
    let (aname, aline) = auth
        .name
        .clone()
        .ok_or_else(|| loc.error("auth_algo", "missing"))?;
    if aname == "aes-gmac" {
        if cname != "null" {
            return Err(at(
                cline,
                "cipher_algo",
                "auth_algo aes-gmac needs cipher_algo null".into(),
            ));
        }
        let (k, kl) = key(auth, "auth_key", aline)?;
        let key_len = k.len().saturating_sub(4);
        let enc = Encryption::AesGmac { key_len };
        if !matches!(key_len, 16 | 24 | 32) {
            return Err(at(kl, "auth_key", format!("aes-gmac needs 20, 28 or 36 bytes of key material (a 16-, 24- or 32-byte key and a 4-byte salt), got {}", k.len())));
        }
        return Ok((
            Suite {
                enc,
                integ: Integrity::None,
            },
            k,
            Zeroizing::new(Vec::new()),
        ));
    }
    let enc = cipher_by_name(&cname).ok_or_else(|| {
        at(
            cline,
            "cipher_algo",
            format!("{} is not one of: {CIPHER_NAMES}", shown(&cname)),
        )
    })?;
    let integ = integrity_by_name(&aname).ok_or_else(|| {
        at(
            aline,
            "auth_algo",
            format!(
                "{} is not one of: {INTEGRITY_NAMES}, aes-gmac",
                shown(&aname)
            ),
        )
    })?;
    let enc_key = if enc == Encryption::Null {
        Zeroizing::new(Vec::new())
    } else {
        let (k, kl) = key(cipher, "cipher_key", cline)?;
        check_enc_key(enc, k.len()).map_err(|m| at(kl, "cipher_key", m))?;
        k
    };
    let auth_key = if integ == Integrity::None {
        Zeroizing::new(Vec::new())
    } else {
        let (k, kl) = key(auth, "auth_key", aline)?;
        check_auth_key(integ, k.len()).map_err(|m| at(kl, "auth_key", m))?;
        k
    };
    Ok((Suite { enc, integ }, enc_key, auth_key))
}

fn parse_sa(c: &mut Cursor<'_, '_>, loc: Location) -> Result<SaConfig, ConfigError> {
    let direction = parse_dir(c)?;
    let spi = c.parse("spi", parse_u32)?;
    let (mut aead, mut cipher, mut auth) = (
        AlgoSpec::default(),
        AlgoSpec::default(),
        AlgoSpec::default(),
    );
    let mut mode_name: Option<(String, usize)> = None;
    let mut src = None;
    let mut dst = None;
    let mut sa_esn = false;
    let mut initial_seq = 0u64;
    let mut udp = None::<UdpEncap>;
    let mut replay_window = DEFAULT_REPLAY_WINDOW;
    let mut icv: Option<usize> = None;
    let mut ttl = DEFAULT_TTL;
    let mut lifetime = Lifetime::default();
    while let Some(k) = c.next() {
        match k {
            "aead_algo" | "cipher_algo" | "auth_algo" => {
                let line = c.line();
                let v = c.value(k)?.to_string();
                let spec = match k {
                    "aead_algo" => &mut aead,
                    "cipher_algo" => &mut cipher,
                    _ => &mut auth,
                };
                spec.name = Some((v, line));
            }
            "aead_key" | "cipher_key" | "auth_key" => {
                let line = c.line();
                let v = Zeroizing::new(c.parse(k, parse_key)?);
                let spec = match k {
                    "aead_key" => &mut aead,
                    "cipher_key" => &mut cipher,
                    _ => &mut auth,
                };
                spec.key = Some((v, line));
            }
            "mode" => {
                let line = c.line();
                let m = c.parse("mode", |s| match s {
                    "ipv4-tunnel" | "ipv6-tunnel" | "transport" => Ok(s.to_string()),
                    o => Err(format!(
                        "{} is not ipv4-tunnel, ipv6-tunnel or transport",
                        shown(o)
                    )),
                })?;
                mode_name = Some((m, line));
            }
            "src" => src = Some(c.parse("src", parse_addr)?),
            "dst" => dst = Some(c.parse("dst", parse_addr)?),
            "esn" => {
                sa_esn = true;
                // An optional initial sequence number: a token that starts with a digit is
                // one, and must parse (not be taken for the next keyword).
                if c.peek()
                    .is_some_and(|s| s.starts_with(|ch: char| ch.is_ascii_digit()))
                {
                    initial_seq = c.parse("esn", |s| {
                        parse_u64(s).map_err(|_| {
                            format!("{} is not a sequence number (0 to 2^64-1)", shown(s))
                        })
                    })?;
                }
            }
            "udp-encap" => udp = Some(udp.unwrap_or_default()),
            "udp_sport" => {
                udp.get_or_insert_with(UdpEncap::default).src_port = c.parse(k, |s| {
                    s.parse::<u16>()
                        .map_err(|_| format!("{} is not a port", shown(s)))
                })?
            }
            "udp_dport" => {
                udp.get_or_insert_with(UdpEncap::default).dst_port = c.parse(k, |s| {
                    s.parse::<u16>()
                        .map_err(|_| format!("{} is not a port", shown(s)))
                })?
            }
            "type" => {
                c.parse("type", |s| match s {
                    "no-offload" | "lookaside-none" => Ok(()),
                    o => Err(format!(
                        "{}: hardware offload types are not supported (no-offload)",
                        shown(o)
                    )),
                })?;
            }
            "port_id" | "fallback" | "mss" => {
                c.value(k)?;
            }
            "flow-direction" => {
                c.value(k)?;
                c.value(k)?;
            }
            "telemetry" => {}
            "replay_window" => replay_window = c.parse(k, parse_u32)?,
            "icv" => {
                icv = Some(c.parse(k, |s| match s {
                    "8" | "12" | "16" => Ok(s.parse().unwrap_or(16)),
                    o => Err(format!(
                        "{} is not an allowed ICV length (8, 12, 16)",
                        shown(o)
                    )),
                })?)
            }
            "ttl" => {
                ttl = c.parse(k, |s| {
                    s.parse::<u8>()
                        .map_err(|_| format!("{} is not a TTL", shown(s)))
                })?
            }
            "lifetime_soft_packets" => lifetime.soft_packets = Some(c.parse(k, parse_u64)?),
            "lifetime_hard_packets" => lifetime.hard_packets = Some(c.parse(k, parse_u64)?),
            "lifetime_soft_bytes" => lifetime.soft_bytes = Some(c.parse(k, parse_u64)?),
            "lifetime_hard_bytes" => lifetime.hard_bytes = Some(c.parse(k, parse_u64)?),
            o => {
                c.i -= 1;
                return Err(c.err("sa", format!("unknown keyword {}", shown(o))));
            }
        }
    }
    let (mut suite, enc_key, auth_key) = sa_algorithms(&loc, aead, cipher, auth)?;
    if let Some(n) = icv {
        // espgw's extension: a truncated GCM/CCM ICV (RFC 4106/4309 allow 8 and 12).
        suite.enc = with_icv(suite.enc, n).map_err(|m| loc.error("icv", m))?;
    }
    let (mode_name, mode_line) = mode_name
        .ok_or_else(|| loc.error("mode", "missing (ipv4-tunnel, ipv6-tunnel, transport)"))?;
    let mode = match mode_name.as_str() {
        "transport" => Mode::Transport,
        m => {
            let v4 = m == "ipv4-tunnel";
            let (s, d) = match (src, dst) {
                (Some(s), Some(d)) => (s, d),
                _ => {
                    return Err(ConfigError::new(
                        &loc.file,
                        mode_line,
                        "mode",
                        format!("{m} needs src and dst"),
                    ))
                }
            };
            if s.is_ipv4() != v4 || d.is_ipv4() != v4 {
                return Err(ConfigError::new(
                    &loc.file,
                    mode_line,
                    "mode",
                    format!("{m} needs {} src and dst", if v4 { "IPv4" } else { "IPv6" }),
                ));
            }
            // ipsec-secgw writes the outer header's src/dst on the SA itself: for an
            // inbound SA src is the peer.
            match direction {
                Direction::Out => Mode::Tunnel {
                    local: s,
                    remote: d,
                },
                Direction::In => Mode::Tunnel {
                    local: d,
                    remote: s,
                },
            }
        }
    };
    Ok(SaConfig {
        spi,
        direction,
        mode,
        proto: SaProto::Esp,
        suite,
        enc_key,
        auth_key,
        esn: sa_esn,
        initial_seq,
        replay_window,
        udp_encap: udp,
        lifetime,
        ttl,
        name: None,
        loc,
    })
}

fn parse_rt(c: &mut Cursor<'_, '_>, loc: Location) -> Result<RouteConfig, ConfigError> {
    let v4 = parse_family(c)?;
    let mut dst = None;
    let mut port = None;
    while let Some(k) = c.next() {
        match k {
            // ipsec-secgw accepts a source prefix on IPv4 routes; forwarding here is by
            // destination only, so it is read and not used.
            "src" => {
                family_prefix(c, "src", v4)?;
            }
            "dst" => dst = Some(family_prefix(c, "dst", v4)?),
            "port" => {
                port = Some(c.parse("port", |s| {
                    s.parse::<usize>()
                        .ok()
                        .filter(|&p| p < 64)
                        .ok_or(format!("{} is not a port number (0..63)", shown(s)))
                })?)
            }
            o => {
                c.i -= 1;
                return Err(c.err("rt", format!("unknown keyword {}", shown(o))));
            }
        }
    }
    Ok(RouteConfig {
        dst: dst.ok_or_else(|| loc.error("dst", "missing"))?,
        port: port.ok_or_else(|| loc.error("port", "missing"))?,
        via: None,
        loc,
    })
}

fn parse_neigh(c: &mut Cursor<'_, '_>, loc: Location) -> Result<NeighbourConfig, ConfigError> {
    c.parse("port", |s| {
        if s == "port" {
            Ok(())
        } else {
            Err(format!("expected 'port', got {}", shown(s)))
        }
    })?;
    let port = c.parse("port", |s| {
        s.parse::<usize>()
            .ok()
            .filter(|&p| p < 64)
            .ok_or(format!("{} is not a port number (0..63)", shown(s)))
    })?;
    let mac = c.parse("mac", |s| {
        parse_mac(s).ok_or(format!("{} is not a MAC address", shown(s)))
    })?;
    if let Some(extra) = c.next() {
        c.i -= 1;
        return Err(c.err("neigh", format!("unexpected {}", shown(extra))));
    }
    Ok(NeighbourConfig {
        port,
        ip: None,
        mac,
        loc,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const CFG: &str = "\
# gateway 1
sp ipv4 out esp protect 1005 pri 1 dst 192.168.105.0/24 sport 0:65535 dport 0:65535
sp ipv4 in esp protect 1105 pri 1 dst 192.168.115.0/24 sport 0:65535 dport 0:65535
sp ipv6 out esp bypass pri 1 dst 2001:db8:5555::/48 \\
sport 0:65535 dport 0:65535
sa out 1005 aead_algo aes-128-gcm aead_key de:ad:be:ef:de:ad:be:ef:de:ad:be:ef:de:ad:be:ef:ca:fe:ba:be \\
mode ipv4-tunnel src 172.16.1.5 dst 172.16.2.5 esn 7 udp-encap
sa in 1105 aead_algo aes-256-gcm \\
aead_key 00:01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:0f:00:01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:0f:01:02:03:04 \\
mode transport
rt ipv4 dst 172.16.2.5/32 port 0
rt ipv6 dst 2001:db8::/32 port 1
neigh port 1 d0:43:1e:12:34:56
";

    #[test]
    fn an_overflowing_esn_names_esn() {
        let e = parse(
            "sa out 4097 aead_algo aes-128-gcm aead_key 00:01:02:03:04:05:06:07:08:09:0a:0b:\
             0c:0d:0e:0f:01:02:03:04 mode transport esn 99999999999999999999\n",
            "ep0.cfg",
        )
        .unwrap_err();
        assert_eq!((e.line, e.field.as_str()), (1, "esn"), "{e}");
        assert!(e.message.contains("not a sequence number"), "{e}");
        // Without a number, esn only turns ESN on.
        let c = parse(
            "sa out 4097 aead_algo aes-128-gcm aead_key 00:01:02:03:04:05:06:07:08:09:0a:0b:\
             0c:0d:0e:0f:01:02:03:04 esn mode transport\n",
            "ep0.cfg",
        )
        .unwrap();
        assert!(c.sas[0].esn);
    }

    #[test]
    fn parses_secgw_syntax() {
        let c = parse(CFG, "ep0.cfg").unwrap();
        c.validate().unwrap();
        assert_eq!(c.policies.len(), 3);
        assert_eq!(c.policies[2].loc.line, 4);
        assert_eq!(c.policies[0].action, Action::Protect(1005));
        assert_eq!(c.policies[0].dst.len, 24);
        let sa = c.sa(Direction::Out, 1005).unwrap();
        assert_eq!(sa.enc_key[16..], [0xca, 0xfe, 0xba, 0xbe]);
        assert!(sa.esn);
        assert_eq!(sa.initial_seq, 7);
        assert_eq!(sa.udp_encap, Some(UdpEncap::default()));
        assert_eq!(
            sa.mode,
            Mode::Tunnel {
                local: "172.16.1.5".parse().unwrap(),
                remote: "172.16.2.5".parse().unwrap()
            }
        );
        let sa_in = c.sa(Direction::In, 1105).unwrap();
        assert_eq!(sa_in.suite, Suite::aes_gcm(32));
        assert_eq!(sa_in.mode, Mode::Transport);
        assert_eq!(c.ports.len(), 2);
        assert_eq!(c.neighbours[0].port, 1);
    }

    fn err(text: &str) -> ConfigError {
        parse(text, "t.cfg")
            .and_then(|c| c.validate().map(|_| c))
            .unwrap_err()
    }

    #[test]
    fn errors_name_line_and_field() {
        let e = err("rt ipv4 dst 10.0.0.0/8 port 0\nsa out 5 aead_algo aes-128-gcm aead_key 00:11 mode transport\n");
        assert_eq!((e.line, e.field.as_str()), (2, "aead_key"));
        assert!(e.to_string().starts_with("t.cfg:2: aead_key:"), "{e}");
        let e = err("sp ipv4 out esp protect 9 dst 10.0.0.0/8\n");
        assert_eq!((e.line, e.field.as_str()), (1, "protect"));
        let e = err("sa out 5 cipher_algo aes-128-cbc cipher_key 00 auth_algo sha1-hmac auth_key 00 mode transport\n");
        assert_eq!((e.line, e.field.as_str()), (1, "cipher_key"));
        assert!(e.message.contains("needs 16 bytes"), "{e}");
        let e = err("sa out 5 cipher_algo aes-128-cbc cipher_key 00:01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:0f \\\n auth_algo sha256-hmac auth_key 00:11 mode transport\n");
        assert_eq!((e.line, e.field.as_str()), (2, "auth_key"));
        assert!(e.message.contains("32-byte key"), "{e}");
        let e = err("sa out 5 cipher_algo aes-128-xts cipher_key 00 auth_algo sha1-hmac auth_key 00 mode transport\n");
        assert_eq!(e.field, "cipher_algo");
        let e = err("sp ipv4 out esp bypass\\\n dst 10.0.0.0/33\n");
        assert_eq!((e.line, e.field.as_str()), (2, "dst"));
        let e = err("bogus line\n");
        assert_eq!((e.line, e.field.as_str()), (1, "rule"));
        let e = err("sa out 5 aead_algo aes-128-gcm aead_key 00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33 mode ipv4-tunnel\n");
        assert_eq!(e.field, "mode");
    }
}
