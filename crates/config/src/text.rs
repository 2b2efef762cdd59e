//! Small text parsers shared by the formats.

use std::fmt;
use std::net::IpAddr;

use crate::model::{Prefix, Range};

/// A token of the configuration as an error message may show it: quoted and at most 40
/// characters, unless it may be key material (a long hex string, with or without `0x` or
/// colons, or a long quoted string), which is never shown, only described by its length.
/// Every token an error echoes goes through this, so a key typed in the wrong place (a
/// stray space splitting it, a missing keyword) never reaches a log.
pub struct Shown<'a>(pub &'a str);

pub fn shown(s: &str) -> Shown<'_> {
    Shown(s)
}

impl Shown<'_> {
    fn may_be_key(&self) -> bool {
        let t = self.0.trim_matches('"');
        let t = t
            .strip_prefix("0x")
            .or_else(|| t.strip_prefix("0X"))
            .unwrap_or(t);
        let hex = t.chars().filter(|c| c.is_ascii_hexdigit()).count();
        let hexish = t.chars().all(|c| c.is_ascii_hexdigit() || c == ':');
        (hexish && hex >= 8) || (self.0.starts_with('"') && self.0.len() >= 10)
    }
}

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.may_be_key() {
            return write!(
                f,
                "a {}-character value (not shown: it may be key material)",
                self.0.chars().count()
            );
        }
        let mut chars = self.0.chars();
        let head: String = chars.by_ref().take(40).collect();
        let more = if chars.next().is_some() { "…" } else { "" };
        write!(f, "'{head}{more}'")
    }
}

/// Hex keying material: `0x00112233...`, `00112233...` or DPDK's `00:11:22:...`. The bytes
/// come in a wiping buffer sized once (a vector grown as it is filled would leave copies of
/// the key in the blocks it outgrew: `tests/keys_wiped.rs` found two per key).
pub fn parse_key(s: &str) -> Result<zeroize::Zeroizing<Vec<u8>>, String> {
    let t = s.trim();
    // The hex digits are key material: wiped when this returns.
    let hex: zeroize::Zeroizing<String> = zeroize::Zeroizing::new(if t.contains(':') {
        // Sized once: growing would leave copies of the digits in freed memory.
        let mut out = String::with_capacity(t.len());
        for part in t.split(':') {
            if part.is_empty() || part.len() > 2 {
                return Err("a colon-separated key needs one or two hex digits a byte".into());
            }
            if part.len() == 1 {
                out.push('0');
            }
            out.push_str(part);
        }
        out
    } else {
        t.strip_prefix("0x")
            .or_else(|| t.strip_prefix("0X"))
            .unwrap_or(t)
            .to_string()
    });
    if hex.is_empty() || !hex.len().is_multiple_of(2) {
        return Err("hex key needs an even, non-zero number of digits".into());
    }
    // Bytes, not string slices: a multi-byte character must be an error, not a panic on a
    // char boundary (found by the config_secgw fuzz target).
    let mut key = zeroize::Zeroizing::new(Vec::with_capacity(hex.len() / 2));
    for (i, pair) in hex.as_bytes().chunks_exact(2).enumerate() {
        match (hex_digit(pair[0]), hex_digit(pair[1])) {
            (Some(h), Some(l)) => key.push((h << 4) | l),
            // The position, never the characters: they are part of a key.
            _ => return Err(format!("byte {} of the key is not hex", i + 1)),
        }
    }
    Ok(key)
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `ADDR` or `ADDR/LEN`.
pub(crate) fn parse_prefix(s: &str) -> Result<Prefix, String> {
    let (a, l) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let addr: IpAddr = a
        .parse()
        .map_err(|_| format!("{} is not an IP address", shown(a)))?;
    let width = if addr.is_ipv4() { 32 } else { 128 };
    let len = match l {
        Some(l) => l
            .parse::<u8>()
            .ok()
            .filter(|&n| n <= width)
            .ok_or(format!("prefix length {} must be 0..={width}", shown(l)))?,
        None => width,
    };
    Ok(Prefix { addr, len })
}

pub(crate) fn parse_addr(s: &str) -> Result<IpAddr, String> {
    s.parse()
        .map_err(|_| format!("{} is not an IP address", shown(s)))
}

/// A number in decimal or `0x` hex.
pub(crate) fn parse_u64(s: &str) -> Result<u64, String> {
    let r = match s.strip_prefix("0x").or_else(|| s.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16),
        None => s.parse::<u64>(),
    };
    r.map_err(|_| format!("{} is not a number", shown(s)))
}

pub(crate) fn parse_u32(s: &str) -> Result<u32, String> {
    let v = parse_u64(s)?;
    u32::try_from(v).map_err(|_| format!("{s} does not fit in 32 bits"))
}

/// `LO:HI`, `LO-HI` or a single value; `what` names a value in errors.
fn parse_range<T: std::str::FromStr + PartialOrd + Copy>(
    s: &str,
    what: &str,
) -> Result<Range<T>, String> {
    let (lo, hi) = split_range(s);
    let p = |x: &str| {
        x.parse::<T>()
            .map_err(|_| format!("{} is not {what}", shown(x)))
    };
    let r = Range::new(p(lo)?, p(hi)?);
    if r.lo > r.hi {
        return Err(format!("range {s} has its low end above its high end"));
    }
    Ok(r)
}

pub fn parse_range_u16(s: &str) -> Result<Range<u16>, String> {
    parse_range(s, "a port (0..=65535)")
}

pub fn parse_range_u8(s: &str) -> Result<Range<u8>, String> {
    parse_range(s, "a protocol number (0..=255)")
}

fn split_range(s: &str) -> (&str, &str) {
    s.split_once(':')
        .or_else(|| s.split_once('-'))
        .unwrap_or((s, s))
}

/// Protocol names setkey and the native format accept.
pub fn parse_proto_name(s: &str) -> Option<u8> {
    Some(match s {
        "icmp" => 1,
        "tcp" => 6,
        "udp" => 17,
        "gre" => 47,
        "icmp6" | "ipv6-icmp" | "icmpv6" => 58,
        "sctp" => 132,
        _ => return s.parse().ok(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys() {
        assert_eq!(*parse_key("0x0a0B").unwrap(), vec![10, 11]);
        assert_eq!(
            *parse_key("de:ad:be:ef").unwrap(),
            vec![0xde, 0xad, 0xbe, 0xef]
        );
        assert_eq!(*parse_key("0:1:2").unwrap(), vec![0, 1, 2]);
        assert!(parse_key("0x123").is_err());
        assert!(parse_key("zz").is_err());
        assert!(parse_key("").is_err());
        // Multi-byte characters are refused, not sliced through (fuzzer find).
        assert!(parse_key("e000000\u{1ee}\u{1ee}\u{12e}0134").is_err());
        assert!(parse_key("0x\u{e9}a").is_err());
        assert!(parse_key("aa:\u{e9}:bb").is_err());
    }

    #[test]
    fn ranges_and_prefixes() {
        assert_eq!(parse_range_u16("0:65535").unwrap(), Range::new(0, 65535));
        assert_eq!(parse_range_u16("80").unwrap(), Range::new(80, 80));
        assert!(parse_range_u16("9:1").is_err());
        assert!(parse_range_u16("70000").is_err());
        assert_eq!(parse_prefix("2001:db8::/32").unwrap().len, 32);
        assert_eq!(parse_prefix("192.0.2.1").unwrap().len, 32);
        assert!(parse_prefix("192.0.2.1/33").is_err());
    }
}
