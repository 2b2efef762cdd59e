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

use std::net::IpAddr;

use espgw_crypto::{Encryption, Integrity, Suite};

use crate::algorithms::*;
use espgw_wire::ethernet::parse_mac;
use zeroize::Zeroizing;

use crate::model::*;
use crate::text::*;
use crate::ConfigError;

mod sa;
#[cfg(test)]
mod tests;

use sa::parse_sa;

/// A token and the physical line it came from (its first, for one split by a `\`).
struct Tok<'a> {
    s: TokText<'a>,
    line: usize,
}

/// A token's text: a slice of the file, or, for one that a `\` split in two, the two
/// halves joined (kept in zeroized memory: a split token is often a long key).
enum TokText<'a> {
    Slice(&'a str),
    Joined(Zeroizing<String>),
}

impl TokText<'_> {
    fn as_str(&self) -> &str {
        match self {
            TokText::Slice(s) => s,
            TokText::Joined(s) => s,
        }
    }
}

/// Splits the text into logical lines (joining `\` continuations) of tokens, as
/// ipsec-secgw's parser does: a continued line's text before the `\` and the next line are
/// joined with nothing between them, so a key split as `a0:a0:\` / `a0:a0` is one token
/// (DPDK's own example `ep0.cfg` splits its keys so) while a space on either side separates;
/// a line whose first character is `#` is skipped whole, inside a continuation too.
fn logical_lines(text: &str) -> Vec<Vec<Tok<'_>>> {
    let mut out = Vec::new();
    let mut cur: Vec<Tok<'_>> = Vec::new();
    // The last line ended `...x\` with no space before the `\`.
    let mut glued = false;
    for (i, raw) in text.lines().enumerate() {
        let line = i + 1;
        if raw.starts_with('#') {
            continue;
        }
        let body = raw.split('#').next().unwrap_or("");
        let trimmed = body.trim_end();
        let (content, continues) = match trimmed.strip_suffix('\\') {
            Some(c) => (c, true),
            None => (trimmed, false),
        };
        let mut words = content.split_whitespace();
        if glued && !content.starts_with(char::is_whitespace) {
            if let (Some(first), Some(last)) = (words.next(), cur.last_mut()) {
                let mut joined =
                    Zeroizing::new(String::with_capacity(last.s.as_str().len() + first.len()));
                joined.push_str(last.s.as_str());
                joined.push_str(first);
                last.s = TokText::Joined(joined);
            }
        }
        cur.extend(words.map(|s| Tok {
            s: TokText::Slice(s),
            line,
        }));
        // An empty continued line (`\` alone) leaves the join as it was.
        glued = continues
            && if content.is_empty() {
                glued
            } else {
                !content.ends_with(char::is_whitespace)
            };
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
    fn next(&mut self) -> Option<&'b str> {
        let t = self.toks.get(self.i)?;
        self.i += 1;
        Some(t.s.as_str())
    }
    /// The value after keyword `field`.
    fn value(&mut self, field: &str) -> Result<&'b str, ConfigError> {
        match self.toks.get(self.i) {
            Some(t) => {
                self.i += 1;
                Ok(t.s.as_str())
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
    fn peek(&self) -> Option<&'b str> {
        self.toks.get(self.i).map(|t| t.s.as_str())
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
        per_worker_sas: Vec::new(),
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
