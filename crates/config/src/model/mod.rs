//! The configuration model all three formats produce.

use std::collections::HashMap;
use std::fmt;
use std::net::IpAddr;

use espgw_crypto::{Encryption, Suite};
use espgw_wire::ethernet::MacAddr;
use zeroize::Zeroizing;

use crate::ConfigError;

#[cfg(test)]
mod tests;
mod validate;

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
    /// The last sequence number before the SA's first packet: outbound sends
    /// `initial_seq + 1` first, inbound starts its replay window with it at the top (nothing
    /// seen). DPDK's `esn N` gives N - 1 outbound and N inbound (`secgw::sa`).
    pub initial_seq: u64,
    /// Replay window in packets; 0 turns anti-replay off (inbound only).
    pub replay_window: u32,
    pub udp_encap: Option<UdpEncap>,
    pub lifetime: Lifetime,
    /// TTL / hop limit of the outer header (tunnel mode).
    pub ttl: u8,
    pub name: Option<String>,
    pub loc: Location,
    /// The reqid an IKE daemon gave a negotiated SA (static SAs have none). Inbound, a
    /// policy naming one SA of a reqid accepts every SA of that reqid: a rekeyed SA
    /// carries traffic before the daemon points the policy at it.
    pub reqid: Option<u32>,
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
    /// An IPsec policy whose SA the IKE daemon has not negotiated yet (a trap policy):
    /// packets are dropped and the daemon is asked to negotiate the SA of this reqid.
    /// Only negotiated policies have it; no configuration format writes it.
    Acquire {
        reqid: u32,
    },
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
    /// A per-worker SA set (RFC 9611's per-resource child SAs, configured statically): the
    /// SPIs of ESP SAs between the same endpoints, worker `w` of an outbound policy sealing
    /// with the `w mod n`-th, an inbound policy accepting a packet opened by any of them.
    /// Empty for every other policy; when set, `action` is `Protect` of the first.
    pub per_worker_sas: Vec<u32>,
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
