//! The configuration model all three formats produce.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

use espgw_crypto::{Encryption, Suite};
use espgw_wire::ethernet::MacAddr;
use zeroize::Zeroizing;

use crate::ConfigError;

/// Where an item was defined, for errors found after parsing.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Location {
    pub file: String,
    pub line: usize,
}

impl Location {
    pub fn new(file: &str, line: usize) -> Self {
        Location {
            file: file.to_string(),
            line,
        }
    }
    pub fn error(&self, field: &str, msg: impl Into<String>) -> ConfigError {
        ConfigError::new(&self.file, self.line, field, msg)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Direction {
    In,
    Out,
}

impl fmt::Display for Direction {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Direction::In => "in",
            Direction::Out => "out",
        })
    }
}

/// An address prefix (IPv4 or IPv6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Prefix {
    pub addr: IpAddr,
    pub len: u8,
}

impl Prefix {
    pub fn host(addr: IpAddr) -> Self {
        Prefix {
            addr,
            len: if addr.is_ipv4() { 32 } else { 128 },
        }
    }
    pub fn any_v4() -> Self {
        Prefix {
            addr: IpAddr::V4(0.into()),
            len: 0,
        }
    }
    pub fn any_v6() -> Self {
        Prefix {
            addr: IpAddr::V6(0u128.into()),
            len: 0,
        }
    }
    pub fn is_ipv4(&self) -> bool {
        self.addr.is_ipv4()
    }
    /// The address with host bits cleared, as a 128-bit number (IPv4 in the low 32 bits).
    pub fn network_bits(&self) -> u128 {
        let (v, width) = addr_bits(self.addr);
        v & mask(width, self.len)
    }
    pub fn contains(&self, a: IpAddr) -> bool {
        if a.is_ipv4() != self.is_ipv4() {
            return false;
        }
        let (v, width) = addr_bits(a);
        v & mask(width, self.len) == self.network_bits()
    }
}

impl fmt::Display for Prefix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.len)
    }
}

/// An address as a number and its width in bits.
pub fn addr_bits(a: IpAddr) -> (u128, u8) {
    match a {
        IpAddr::V4(v) => (u128::from(u32::from(v)), 32),
        IpAddr::V6(v) => (u128::from(v), 128),
    }
}

/// The mask of a prefix of `len` bits in an address of `width` bits.
pub fn mask(width: u8, len: u8) -> u128 {
    let len = len.min(width);
    if len == 0 {
        return 0;
    }
    let all: u128 = if width >= 128 {
        u128::MAX
    } else {
        (1u128 << width) - 1
    };
    // len >= 1 here, so the shift is at most 127.
    let host = (1u128 << (width - len)) - 1;
    all & !host
}

/// An inclusive range (ports, protocols).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Range<T> {
    pub lo: T,
    pub hi: T,
}

impl<T: PartialOrd + Copy> Range<T> {
    pub fn new(lo: T, hi: T) -> Self {
        Range { lo, hi }
    }
    pub fn contains(&self, v: T) -> bool {
        self.lo <= v && v <= self.hi
    }
}

pub const ANY_PORT: Range<u16> = Range { lo: 0, hi: 65535 };
pub const ANY_PROTO: Range<u8> = Range { lo: 0, hi: 255 };

/// ESP mode of an SA. Tunnel endpoints decide the outer family; the inner family may be
/// either.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Tunnel { local: IpAddr, remote: IpAddr },
    Transport,
}

impl Mode {
    pub fn name(&self) -> &'static str {
        match self {
            Mode::Tunnel { local, .. } if local.is_ipv4() => "ipv4-tunnel",
            Mode::Tunnel { .. } => "ipv6-tunnel",
            Mode::Transport => "transport",
        }
    }
}

/// UDP encapsulation for NAT traversal (RFC 3948).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UdpEncap {
    pub src_port: u16,
    pub dst_port: u16,
}

impl Default for UdpEncap {
    fn default() -> Self {
        UdpEncap {
            src_port: 4500,
            dst_port: 4500,
        }
    }
}

/// SA lifetimes; `None` means unlimited.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lifetime {
    pub soft_packets: Option<u64>,
    pub hard_packets: Option<u64>,
    pub soft_bytes: Option<u64>,
    pub hard_bytes: Option<u64>,
}

pub const DEFAULT_REPLAY_WINDOW: u32 = 1024;
/// The largest replay window accepted (packets).
pub const MAX_REPLAY_WINDOW: u32 = 65536;
/// The lowest SPI a configuration may use: RFC 4303 §2.1 reserves 1-255 (and 0).
pub const MIN_SPI: u32 = 256;
pub const DEFAULT_TTL: u8 = 64;

/// One security association.
#[derive(Debug, Clone)]
pub struct SaConfig {
    pub spi: u32,
    pub direction: Direction,
    pub mode: Mode,
    /// ESP (encryption and/or integrity) or AH (integrity only; `suite.enc` is NULL).
    pub proto: SaProto,
    pub suite: Suite,
    /// Encryption keying material as configured: the key followed by the salt or nonce the
    /// algorithm takes (4 bytes for GCM, GMAC, CTR and ChaCha20-Poly1305, 3 for CCM).
    pub enc_key: Zeroizing<Vec<u8>>,
    /// The integrity key (empty for combined-mode algorithms).
    pub auth_key: Zeroizing<Vec<u8>>,
    pub esn: bool,
    /// The last sequence number before the SA's first packet (DPDK's `esn N`): outbound
    /// sends `initial_seq + 1` first, inbound starts its replay window there.
    pub initial_seq: u64,
    /// Replay window in packets; 0 turns anti-replay off (inbound only).
    pub replay_window: u32,
    pub udp_encap: Option<UdpEncap>,
    pub lifetime: Lifetime,
    /// TTL / hop limit of the outer header (tunnel mode).
    pub ttl: u8,
    pub name: Option<String>,
    pub loc: Location,
}

/// The IPsec protocol of an SA.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum SaProto {
    #[default]
    Esp,
    /// RFC 4302: integrity over the packet, immutable IP header fields included.
    Ah,
}

impl SaProto {
    pub fn name(self) -> &'static str {
        match self {
            SaProto::Esp => "esp",
            SaProto::Ah => "ah",
        }
    }
}

/// Algorithms that need saying yes to (from the configuration, or the command line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CryptoPolicy {
    /// 3DES-CBC and HMAC-MD5-96, deprecated by RFC 8221.
    pub allow_legacy: bool,
    /// NULL encryption without integrity: no protection at all, for measurement only.
    pub allow_null: bool,
}

impl CryptoPolicy {
    pub fn union(self, o: CryptoPolicy) -> CryptoPolicy {
        CryptoPolicy {
            allow_legacy: self.allow_legacy || o.allow_legacy,
            allow_null: self.allow_null || o.allow_null,
        }
    }
}

impl SaConfig {
    /// The algorithms as one would name them in a report.
    pub fn algorithm_name(&self) -> String {
        match self.proto {
            SaProto::Esp => self.suite.name(),
            SaProto::Ah => format!("ah/{}", self.suite.integ.name()),
        }
    }

    /// A label for messages: the name, or the direction and SPI.
    /// The identity of this SA's key material: SHA-256 over a domain tag, the protocol and
    /// the keys (never the keys themselves). It names the SA's sequence state, so that the
    /// state follows the key whatever the SPI, and tells two SAs with one key apart.
    pub fn key_id(&self) -> [u8; 32] {
        let proto: &[u8] = match self.proto {
            SaProto::Esp => b"esp",
            SaProto::Ah => b"ah",
        };
        let enc_len = (self.enc_key.len() as u32).to_be_bytes();
        let auth_len = (self.auth_key.len() as u32).to_be_bytes();
        espgw_crypto::sha256(&[
            b"espgw key id v1\0",
            proto,
            &enc_len,
            &self.enc_key,
            &auth_len,
            &self.auth_key,
        ])
    }

    pub fn label(&self) -> String {
        match &self.name {
            Some(n) => n.clone(),
            None => format!("{} 0x{:08x}", self.direction, self.spi),
        }
    }
}

/// Whether every packet `inner` selects, `outer` selects too.
fn covers(outer: &PolicyConfig, inner: &PolicyConfig) -> bool {
    let prefix =
        |o: &Prefix, i: &Prefix| o.is_ipv4() == i.is_ipv4() && o.len <= i.len && o.contains(i.addr);
    prefix(&outer.src, &inner.src)
        && prefix(&outer.dst, &inner.dst)
        && outer.proto.lo <= inner.proto.lo
        && inner.proto.hi <= outer.proto.hi
        && outer.sport.lo <= inner.sport.lo
        && inner.sport.hi <= outer.sport.hi
        && outer.dport.lo <= inner.dport.lo
        && inner.dport.hi <= outer.dport.hi
}

/// What a policy does with matching traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    /// Protect with (outbound) or require (inbound) the SA of this SPI and direction.
    Protect(u32),
    /// An SA bundle (RFC 4301 §4.5): ESP with the SA `esp`, then AH with the SA `ah` around
    /// it (setkey's `esp/transport//require ah/transport//require`). Inbound, AH is checked
    /// and removed first and both SAs are required.
    Bundle {
        esp: u32,
        ah: u32,
    },
    Bypass,
    Discard,
}

/// One SPD rule. Higher priority wins; among equal priorities the earlier rule wins.
#[derive(Debug, Clone)]
pub struct PolicyConfig {
    pub direction: Direction,
    pub priority: i64,
    pub src: Prefix,
    pub dst: Prefix,
    pub proto: Range<u8>,
    pub sport: Range<u16>,
    pub dport: Range<u16>,
    pub action: Action,
    pub loc: Location,
}

#[derive(Debug, Clone)]
pub struct RouteConfig {
    pub dst: Prefix,
    pub port: usize,
    /// Next-hop router; `None` means the destination is on the port's link.
    pub via: Option<IpAddr>,
    pub loc: Location,
}

/// The next-hop MAC address of a port (DPDK `neigh port N MAC`), optionally for one
/// address only.
#[derive(Debug, Clone)]
pub struct NeighbourConfig {
    pub port: usize,
    pub ip: Option<IpAddr>,
    pub mac: MacAddr,
    pub loc: Location,
}

/// Which side of the gateway a port faces: plaintext arriving on a protected port is
/// classified by the outbound SPD; anything arriving on an unprotected port by the inbound
/// SPD (and ESP is decrypted there).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortRole {
    Protected,
    Unprotected,
}

impl PortRole {
    pub fn name(&self) -> &'static str {
        match self {
            PortRole::Protected => "protected",
            PortRole::Unprotected => "unprotected",
        }
    }
}

/// A gateway port.
#[derive(Debug, Clone)]
pub struct PortConfig {
    pub name: String,
    pub mac: MacAddr,
    /// Linux interface to bind (used by the live gateway); the port name when absent.
    pub interface: Option<String>,
    pub addresses: Vec<Prefix>,
    /// `None`: port 0 and ports named "south" are protected, the rest unprotected
    /// (ipsec-secgw's `-u` mask and `--unprotected` override it).
    pub role: Option<PortRole>,
    /// IP MTU; the live gateway reads it from the interface. `None`: not enforced.
    pub mtu: Option<u16>,
    pub loc: Location,
}

impl PortConfig {
    /// The interface this port binds.
    pub fn interface_name(&self) -> &str {
        self.interface.as_deref().unwrap_or(&self.name)
    }
}

/// The whole configuration.
#[derive(Debug, Clone, Default)]
pub struct Config {
    pub ports: Vec<PortConfig>,
    pub sas: Vec<SaConfig>,
    pub policies: Vec<PolicyConfig>,
    pub routes: Vec<RouteConfig>,
    pub neighbours: Vec<NeighbourConfig>,
    /// Packets per burst through the pipeline.
    pub burst: usize,
    /// Worker threads of the live gateway (`None`: one, or `--workers`).
    pub workers: Option<usize>,
    /// Deprecated and unprotected algorithms this configuration accepts.
    pub policy: CryptoPolicy,
}

pub const DEFAULT_BURST: usize = 64;
pub const MAX_BURST: usize = 256;
pub const MAX_WORKERS: usize = 64;
/// IPv6's minimum link MTU; the smallest port MTU accepted.
pub const MIN_MTU: u16 = 1280;
/// The largest port MTU a packet buffer can carry.
pub const MAX_MTU: u16 = 2048;

/// The MAC address given to port `i` when the configuration names none (locally
/// administered, so it never collides with a real NIC's).
pub fn default_port_mac(i: usize) -> MacAddr {
    [0x02, 0x00, 0x00, 0x00, 0x00, (i as u8).wrapping_add(1)]
}

/// Ports that formats without a port section imply (DPDK's `port N`): named `portN`.
pub fn implied_port(i: usize) -> PortConfig {
    PortConfig {
        name: format!("port{i}"),
        mac: default_port_mac(i),
        interface: None,
        addresses: Vec::new(),
        role: None,
        mtu: None,
        loc: Location::default(),
    }
}

impl Config {
    pub fn sa(&self, dir: Direction, spi: u32) -> Option<&SaConfig> {
        self.sas.iter().find(|s| s.direction == dir && s.spi == spi)
    }

    /// The role of port `i`: as configured, else port 0 and "south" are protected.
    pub fn port_role(&self, i: usize) -> PortRole {
        match self.ports.get(i) {
            Some(PortConfig { role: Some(r), .. }) => *r,
            Some(p) if p.name == "south" => PortRole::Protected,
            Some(p) if p.name == "north" => PortRole::Unprotected,
            _ if i == 0 => PortRole::Protected,
            _ => PortRole::Unprotected,
        }
    }

    /// Adds implied ports up to `n` (for formats that name ports by number).
    pub fn ensure_ports(&mut self, n: usize) {
        while self.ports.len() < n {
            let i = self.ports.len();
            self.ports.push(implied_port(i));
        }
    }

    /// Checks an SA's algorithms against what they need: sizes, and the policy switches
    /// for deprecated (RFC 8221) and unprotected ones.
    fn check_algorithms(&self, sa: &SaConfig) -> Result<(), ConfigError> {
        let s = sa.suite;
        match sa.proto {
            SaProto::Esp => s.check().map_err(|m| sa.loc.error("algorithm", m))?,
            SaProto::Ah => {
                if s.enc != Encryption::Null || s.integ == espgw_crypto::Integrity::None {
                    return Err(sa.loc.error(
                        "algorithm",
                        "AH takes an integrity algorithm and no encryption",
                    ));
                }
                if let espgw_crypto::Integrity::AesGmac { key_len } = s.integ {
                    if !matches!(key_len, 16 | 24 | 32) {
                        return Err(sa
                            .loc
                            .error("algorithm", "AES-GMAC key must be 16, 24 or 32 bytes"));
                    }
                }
                if sa.udp_encap.is_some() {
                    // RFC 3948 encapsulates ESP only: AH covers the addresses a NAT rewrites.
                    return Err(sa.loc.error(
                        "udp_encap",
                        "AH cannot be carried in UDP (NAT traversal is for ESP only)",
                    ));
                }
            }
        }
        if s.is_legacy() && !self.policy.allow_legacy {
            return Err(sa.loc.error(
                "algorithm",
                format!(
                    "{} is deprecated (RFC 8221) and refused unless the legacy switch is on: \
                     run with --allow-legacy-crypto, or set allow_legacy_crypto = true in a native configuration",
                    sa.algorithm_name()
                ),
            ));
        }
        if s.is_null_null() && sa.proto == SaProto::Esp && !self.policy.allow_null {
            return Err(sa.loc.error(
                "algorithm",
                "NULL encryption without integrity protects nothing; it is for measurement only \
                 and refused unless asked for: run with --allow-null-null, or set allow_null_null = true",
            ));
        }
        Ok(())
    }

    /// Warnings to print when this configuration is loaded (accepted legacy algorithms).
    pub fn warnings(&self) -> Vec<String> {
        let mut w = Vec::new();
        for sa in &self.sas {
            if sa.suite.is_legacy() {
                w.push(format!(
                    "{}:{}: SA {} uses {}, deprecated by RFC 8221 (accepted under the legacy switch)",
                    sa.loc.file,
                    sa.loc.line,
                    sa.label(),
                    sa.algorithm_name()
                ));
            }
            if sa.suite.is_null_null() && sa.proto == SaProto::Esp {
                w.push(format!(
                    "{}:{}: SA {} uses NULL encryption without integrity: traffic is not protected",
                    sa.loc.file,
                    sa.loc.line,
                    sa.label()
                ));
            }
        }
        w
    }

    /// Checks what no single line can: references, duplicates, families.
    /// What a gateway's configuration file may not say, beyond [`Config::validate`]: one
    /// key on two SAs (in any direction: both would count from the same sequence number,
    /// repeating nonces), and SPIs below 256 (RFC 4303 §2.1: 0 is for local use and never
    /// sent, 1-255 are reserved to IANA). Not part of `validate` because tables built in
    /// code may do both on purpose: known-answer tests with published vectors' SPIs, and
    /// the fuzzers' and the RFC 2544 tester's loopback tables, which open what they seal.
    pub fn check_file_rules(&self) -> Result<(), ConfigError> {
        let mut keys: HashMap<[u8; 32], &SaConfig> = HashMap::new();
        for sa in &self.sas {
            if !sa.enc_key.is_empty() || !sa.auth_key.is_empty() {
                if let Some(o) = keys.insert(sa.key_id(), sa) {
                    return Err(sa.loc.error(
                        "key",
                        format!(
                            "SA {} has the same key as SA {} at line {}: both would count \
                             from the same sequence number, repeating nonces; give each SA \
                             its own key",
                            sa.label(),
                            o.label(),
                            o.loc.line
                        ),
                    ));
                }
            }
        }
        self.check_shadowed_policies()?;
        match self.sas.iter().find(|sa| sa.spi < MIN_SPI) {
            Some(sa) => Err(sa.loc.error(
                "spi",
                format!(
                    "{} (0x{:x}) is reserved (RFC 4303: SPIs 1-255 are for IANA, 0 for local \
                     use): use 256 or above",
                    sa.spi, sa.spi
                ),
            )),
            None => Ok(()),
        }
    }

    /// A protect policy that a bypass or discard policy before it covers entirely would
    /// never match: the traffic it was written to protect would pass in the clear (or be
    /// dropped) without a word. Refused, naming both lines.
    fn check_shadowed_policies(&self) -> Result<(), ConfigError> {
        let open: Vec<(usize, &PolicyConfig)> = self
            .policies
            .iter()
            .enumerate()
            .filter(|(_, p)| matches!(p.action, Action::Bypass | Action::Discard))
            .collect();
        for (i, p) in self.policies.iter().enumerate() {
            if matches!(p.action, Action::Bypass | Action::Discard) {
                continue;
            }
            let first = |j: usize, o: &PolicyConfig| {
                o.priority > p.priority || (o.priority == p.priority && j < i)
            };
            if let Some((_, o)) = open
                .iter()
                .find(|(j, o)| o.direction == p.direction && first(*j, o) && covers(o, p))
            {
                let what = if o.action == Action::Bypass {
                    "bypass"
                } else {
                    "discard"
                };
                return Err(p.loc.error(
                    "policy",
                    format!(
                        "this protect policy never matches: the {what} policy at line {} \
                         covers all its traffic and is looked at first (higher priority, or \
                         listed earlier at the same priority)",
                        o.loc.line
                    ),
                ));
            }
        }
        Ok(())
    }

    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.burst == 0 || self.burst > MAX_BURST {
            return Err(ConfigError::new(
                "",
                0,
                "burst",
                format!("must be 1..={MAX_BURST}"),
            ));
        }
        // Linear: 30,000 SAs are checked in milliseconds.
        let mut spis: HashMap<(Direction, u32), &SaConfig> = HashMap::new();
        for sa in &self.sas {
            if let Some(o) = spis.insert((sa.direction, sa.spi), sa) {
                return Err(sa.loc.error(
                    "spi",
                    format!(
                        "duplicate {} SA 0x{:x} (also SA {} at line {})",
                        sa.direction,
                        sa.spi,
                        o.label(),
                        o.loc.line
                    ),
                ));
            }
            if sa.replay_window > MAX_REPLAY_WINDOW {
                return Err(sa.loc.error(
                    "replay_window",
                    format!(
                        "{} exceeds the maximum of {MAX_REPLAY_WINDOW}",
                        sa.replay_window
                    ),
                ));
            }
            if let Mode::Tunnel { local, remote } = sa.mode {
                if local.is_ipv4() != remote.is_ipv4() {
                    return Err(sa
                        .loc
                        .error("mode", "tunnel endpoints of different families"));
                }
            }
            self.check_algorithms(sa)?;
            if !sa.esn && sa.initial_seq >= u64::from(u32::MAX) {
                return Err(sa
                    .loc
                    .error("esn", "initial sequence number exceeds 32 bits without ESN"));
            }
        }
        for p in &self.policies {
            if p.src.is_ipv4() != p.dst.is_ipv4() {
                return Err(p
                    .loc
                    .error("dst", "source and destination of different families"));
            }
            if p.sport.lo > p.sport.hi || p.dport.lo > p.dport.hi || p.proto.lo > p.proto.hi {
                return Err(p.loc.error("range", "low end above high end"));
            }
            let need: &[(u32, Option<SaProto>)] = match p.action {
                Action::Protect(spi) => &[(spi, None)],
                Action::Bundle { esp, ah } => &[(esp, Some(SaProto::Esp)), (ah, Some(SaProto::Ah))],
                Action::Bypass | Action::Discard => &[],
            };
            for &(spi, proto) in need {
                let Some(sa) = spis.get(&(p.direction, spi)) else {
                    return Err(p.loc.error(
                        "protect",
                        format!("no {} SA with SPI {spi} (0x{spi:x})", p.direction),
                    ));
                };
                if proto.is_some_and(|want| want != sa.proto) {
                    return Err(p.loc.error(
                        "protect",
                        format!(
                            "SA 0x{spi:x} (line {}) is {}, the bundle needs {}",
                            sa.loc.line,
                            sa.proto.name(),
                            proto.map_or("", |w| w.name())
                        ),
                    ));
                }
            }
        }
        for r in &self.routes {
            if r.port >= self.ports.len() {
                return Err(r
                    .loc
                    .error("port", format!("port {} does not exist", r.port)));
            }
        }
        for r in &self.routes {
            if let Some(v) = r.via {
                if v.is_ipv4() != r.dst.is_ipv4() {
                    return Err(r.loc.error("via", "next hop of a different family"));
                }
            }
        }
        if let Some(w) = self.workers {
            if !(1..=MAX_WORKERS).contains(&w) {
                return Err(ConfigError::new(
                    "",
                    0,
                    "workers",
                    format!("must be 1..={MAX_WORKERS}"),
                ));
            }
        }
        for n in &self.neighbours {
            if n.port >= self.ports.len() {
                return Err(n
                    .loc
                    .error("port", format!("port {} does not exist", n.port)));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn prefix_contains() {
        let p = Prefix {
            addr: "198.51.100.0".parse().unwrap(),
            len: 24,
        };
        assert!(p.contains("198.51.100.77".parse().unwrap()));
        assert!(!p.contains("198.51.101.1".parse().unwrap()));
        assert!(!p.contains("2001:db8::1".parse().unwrap()));
        let any = Prefix::any_v6();
        assert!(any.contains("2001:db8::1".parse().unwrap()));
        let h = Prefix::host("2001:db8::1".parse().unwrap());
        assert!(h.contains("2001:db8::1".parse().unwrap()));
        assert!(!h.contains("2001:db8::2".parse().unwrap()));
        assert_eq!(mask(32, 24), 0xffff_ff00);
        assert_eq!(mask(128, 128), u128::MAX);
        assert_eq!(mask(128, 1), 1u128 << 127);
    }
}
