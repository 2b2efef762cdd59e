//! The typed messages of the SA contract, version 1: what charon's `kernel_ipsec_t` calls
//! become on the socket (requests, each answered by one reply with the same id), and what
//! the gateway tells the IKE daemon on its own (events).
//!
//! Numbers on the wire are ours, not strongSwan's: algorithms are IKEv2 transform IDs
//! (IANA), modes, directions and policy types small enums defined here. The plugin
//! translates.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use zeroize::Zeroizing;

use crate::frame::{be, FrameError, FrameWriter, RawFrame};

/// Message kinds (the header's `kind` byte).
pub mod kind {
    /// Request: the first message on a connection; carries the version.
    pub const HELLO: u8 = 1;
    /// Request: allocate an SPI for an inbound SA.
    pub const GET_SPI: u8 = 2;
    /// Request: install an SA.
    pub const ADD_SA: u8 = 3;
    /// Request: move an SA to new addresses or encapsulation (NAT rebinding, MOBIKE).
    pub const UPDATE_SA: u8 = 4;
    /// Request: an SA's counters and last use.
    pub const QUERY_SA: u8 = 5;
    /// Request: remove an SA.
    pub const DEL_SA: u8 = 6;
    /// Request: remove every negotiated SA.
    pub const FLUSH_SAS: u8 = 7;
    /// Request: install (or reference again) a policy.
    pub const ADD_POLICY: u8 = 8;
    /// Request: a policy's last use.
    pub const QUERY_POLICY: u8 = 9;
    /// Request: drop one reference to a policy (removed at the last).
    pub const DEL_POLICY: u8 = 10;
    /// Request: remove every negotiated policy.
    pub const FLUSH_POLICIES: u8 = 11;
    /// Event: an SA reached its soft or hard lifetime.
    pub const EXPIRE: u8 = 0x40;
    /// Event: plaintext matched a policy whose SA does not exist yet.
    pub const ACQUIRE: u8 = 0x41;
    /// Reply: done (with the fields the request asks for).
    pub const OK: u8 = 0x80;
    /// Reply: refused, with a code and a message.
    pub const ERROR: u8 = 0x81;
}

/// Field types.
pub mod field {
    /// u8: the protocol version (HELLO and its reply).
    pub const VERSION: u16 = 1;
    /// 4 or 16 bytes: the SA's (or policy's tunnel) source address.
    pub const SRC: u16 = 2;
    /// 4 or 16 bytes: the SA's (or policy's tunnel) destination address.
    pub const DST: u16 = 3;
    /// u32: the SPI.
    pub const SPI: u16 = 4;
    /// u8: 50 (ESP) or 51 (AH).
    pub const PROTO: u16 = 5;
    /// u32: the reqid tying SAs to policies.
    pub const REQID: u16 = 6;
    /// u8: 1 transport, 2 tunnel.
    pub const MODE: u16 = 7;
    /// u16: IKEv2 encryption transform ID.
    pub const ENC_ALG: u16 = 8;
    /// Bytes: the encryption key with its salt or nonce.
    pub const ENC_KEY: u16 = 9;
    /// u16: IKEv2 integrity transform ID (0: none).
    pub const INT_ALG: u16 = 10;
    /// Bytes: the integrity key.
    pub const INT_KEY: u16 = 11;
    /// u32: the replay window in packets.
    pub const REPLAY_WINDOW: u16 = 12;
    /// u16 + u16: UDP encapsulation (RFC 3948), source and destination port.
    pub const ENCAP: u16 = 13;
    /// u8: extended sequence numbers.
    pub const ESN: u16 = 14;
    /// u8: the SA is inbound.
    pub const INBOUND: u16 = 15;
    /// 6 × u64: soft/hard bytes, soft/hard packets, soft/hard seconds (0: none).
    pub const LIFETIME: u16 = 16;
    /// Traffic selector (see [`super::TrafficSelector`]); repeated for a list.
    pub const SRC_TS: u16 = 17;
    /// Traffic selector; repeated for a list.
    pub const DST_TS: u16 = 18;
    /// u8: 0 in, 1 out, 2 forward.
    pub const DIRECTION: u16 = 19;
    /// u8: 1 IPsec, 2 pass, 3 drop.
    pub const POLICY_TYPE: u16 = 20;
    /// u32: the policy's priority (lower wins, as in strongSwan).
    pub const PRIORITY: u16 = 21;
    /// u32: the ESP SA's SPI a policy applies.
    pub const ESP_SPI: u16 = 22;
    /// u32: the AH SA's SPI a policy applies.
    pub const AH_SPI: u16 = 23;
    /// 4 or 16 bytes: UPDATE_SA's new source.
    pub const NEW_SRC: u16 = 24;
    /// 4 or 16 bytes: UPDATE_SA's new destination.
    pub const NEW_DST: u16 = 25;
    /// u64: bytes processed under an SA.
    pub const BYTES: u16 = 26;
    /// u64: packets processed under an SA.
    pub const PACKETS: u16 = 27;
    /// u64: seconds since the SA or policy last carried a packet (absent: never).
    pub const IDLE: u16 = 28;
    /// u8: EXPIRE is for the hard lifetime.
    pub const HARD: u16 = 29;
    /// u16: the error's code.
    pub const ERROR_CODE: u16 = 30;
    /// UTF-8: the error's message.
    pub const MESSAGE: u16 = 31;
}

/// The most traffic selectors one message may carry per side.
pub const MAX_SELECTORS: usize = 16;
/// The longest key accepted (HMAC-SHA-512's 64 bytes is the longest any suite takes).
pub const MAX_KEY: usize = 64;

/// ESP or AH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Proto {
    /// ESP (RFC 4303).
    Esp,
    /// AH (RFC 4302).
    Ah,
}

/// What names an SA: addresses, SPI and protocol (as `kernel_ipsec_sa_id_t`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SaId {
    /// Source address of the SA's packets.
    pub src: IpAddr,
    /// Destination address of the SA's packets.
    pub dst: IpAddr,
    /// Security parameter index.
    pub spi: u32,
    /// ESP or AH.
    pub proto: Proto,
}

/// Tunnel or transport mode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaMode {
    /// Transport mode.
    Transport,
    /// Tunnel mode, between the SA's addresses.
    Tunnel,
}

/// A traffic selector (RFC 7296 §3.13.1): an address range, a protocol (0: any) and a
/// port range.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TrafficSelector {
    /// Upper-layer protocol; 0 for any.
    pub proto: u8,
    /// First address of the range.
    pub from: IpAddr,
    /// Last address of the range (same family as `from`).
    pub to: IpAddr,
    /// First port (or ICMP type/code as RFC 4301 packs them).
    pub from_port: u16,
    /// Last port.
    pub to_port: u16,
}

/// Lifetimes in bytes, packets and seconds; 0 means none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lifetimes {
    /// Soft limit in bytes.
    pub soft_bytes: u64,
    /// Hard limit in bytes.
    pub hard_bytes: u64,
    /// Soft limit in packets.
    pub soft_packets: u64,
    /// Hard limit in packets.
    pub hard_packets: u64,
    /// Soft limit in seconds after installation (charon's rekey time, jitter applied).
    pub soft_seconds: u64,
    /// Hard limit in seconds after installation.
    pub hard_seconds: u64,
}

/// ADD_SA: everything `kernel_ipsec_add_sa_t` says that espgw uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AddSa {
    /// Which SA.
    pub id: SaId,
    /// Ties the SA to its policies.
    pub reqid: u32,
    /// Tunnel or transport.
    pub mode: SaMode,
    /// IKEv2 encryption transform ID (ESP); 0 for AH.
    pub enc_alg: u16,
    /// The encryption key with its salt or nonce.
    pub enc_key: Zeroizing<Vec<u8>>,
    /// IKEv2 integrity transform ID; 0 for none.
    pub int_alg: u16,
    /// The integrity key.
    pub int_key: Zeroizing<Vec<u8>>,
    /// Replay window in packets (inbound).
    pub replay_window: u32,
    /// UDP encapsulation: the source and destination ports of the SA's packets.
    pub encap: Option<(u16, u16)>,
    /// Extended sequence numbers.
    pub esn: bool,
    /// Whether the SA is inbound (its destination is this gateway).
    pub inbound: bool,
    /// Lifetimes.
    pub lifetime: Lifetimes,
    /// The SA's source selectors.
    pub src_ts: Vec<TrafficSelector>,
    /// The SA's destination selectors.
    pub dst_ts: Vec<TrafficSelector>,
}

/// UPDATE_SA: new addresses and encapsulation for an SA (NAT rebinding, MOBIKE).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpdateSa {
    /// Which SA (its current addresses).
    pub id: SaId,
    /// New source address.
    pub new_src: IpAddr,
    /// New destination address.
    pub new_dst: IpAddr,
    /// New UDP encapsulation (ports as on the wire), or none.
    pub encap: Option<(u16, u16)>,
}

/// Direction of a policy, as charon names them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum PolicyDir {
    /// Inbound, to this host.
    In,
    /// Outbound.
    Out,
    /// Inbound, forwarded (a gateway's tunnel traffic).
    Fwd,
}

/// What a policy does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PolicyType {
    /// Protect with (or require) the SAs named.
    Ipsec,
    /// Let through in the clear.
    Pass,
    /// Drop.
    Drop,
}

/// What names a policy: direction and selectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct PolicyId {
    /// In, out or forward.
    pub dir: PolicyDir,
    /// Source selector.
    pub src_ts: TrafficSelector,
    /// Destination selector.
    pub dst_ts: TrafficSelector,
}

/// ADD_POLICY.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AddPolicy {
    /// Which policy.
    pub id: PolicyId,
    /// IPsec, pass or drop.
    pub kind: PolicyType,
    /// Lower wins (strongSwan's convention).
    pub priority: u32,
    /// The SAs' reqid.
    pub reqid: u32,
    /// The SAs' endpoints (tunnel mode).
    pub endpoints: Option<(IpAddr, IpAddr)>,
    /// The ESP SA to apply (outbound) or require (inbound); none yet for a trap policy.
    pub esp_spi: Option<u32>,
    /// The AH SA, for AH alone or a bundle.
    pub ah_spi: Option<u32>,
}

/// A request from the IKE daemon.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Request {
    /// The first message: the daemon's protocol version.
    Hello {
        /// Its version.
        version: u8,
    },
    /// Allocate an unused SPI for an inbound SA from `src` to `dst`.
    GetSpi {
        /// The peer.
        src: IpAddr,
        /// This gateway.
        dst: IpAddr,
        /// ESP or AH.
        proto: Proto,
    },
    /// Install an SA.
    AddSa(Box<AddSa>),
    /// Move an SA.
    UpdateSa(UpdateSa),
    /// An SA's counters.
    QuerySa(SaId),
    /// Remove an SA.
    DelSa(SaId),
    /// Remove every negotiated SA.
    FlushSas,
    /// Install or reference a policy.
    AddPolicy(AddPolicy),
    /// A policy's last use.
    QueryPolicy(PolicyId),
    /// Drop a reference to a policy: the one naming these SAs where given (charon says
    /// which CHILD_SA lets go of it), else the newest.
    DelPolicy {
        /// Which policy.
        id: PolicyId,
        /// The ESP SA of the reference dropped.
        esp_spi: Option<u32>,
        /// The AH SA of the reference dropped.
        ah_spi: Option<u32>,
    },
    /// Remove every negotiated policy.
    FlushPolicies,
}

/// Why a request was refused (strongSwan's `status_t` on the plugin's side).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorCode {
    /// Something went wrong (FAILED).
    Failed = 1,
    /// No such SA or policy (NOT_FOUND).
    NotFound = 2,
    /// Not something espgw does (NOT_SUPPORTED).
    NotSupported = 3,
    /// A malformed or contradictory request (INVALID_ARG).
    InvalidArg = 4,
    /// The SA or policy exists already (ALREADY_DONE).
    AlreadyDone = 5,
}

impl ErrorCode {
    fn from_u16(v: u16) -> ErrorCode {
        match v {
            2 => ErrorCode::NotFound,
            3 => ErrorCode::NotSupported,
            4 => ErrorCode::InvalidArg,
            5 => ErrorCode::AlreadyDone,
            _ => ErrorCode::Failed,
        }
    }
}

/// A reply: done, with what the request asked for, or refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// Done.
    Ok(ReplyData),
    /// Refused.
    Error {
        /// The kind of failure.
        code: ErrorCode,
        /// For logs: what failed (never key bytes).
        message: String,
    },
}

/// What a successful reply carries (each request fills what it is about).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct ReplyData {
    /// HELLO: the gateway's version.
    pub version: Option<u8>,
    /// GET_SPI: the SPI allocated.
    pub spi: Option<u32>,
    /// QUERY_SA: bytes and packets.
    pub usage: Option<(u64, u64)>,
    /// QUERY_SA / QUERY_POLICY: seconds since last use (`None`: never used).
    pub idle_seconds: Option<u64>,
}

/// An event from the gateway.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Event {
    /// An SA reached a lifetime: soft (rekey now) or hard (it is gone).
    Expire {
        /// The SA.
        id: SaId,
        /// Hard rather than soft.
        hard: bool,
    },
    /// Plaintext matched the policy of `reqid` whose SA does not exist yet.
    Acquire {
        /// The policy's reqid.
        reqid: u32,
        /// The packet's source, as a one-address selector.
        src: TrafficSelector,
        /// The packet's destination.
        dst: TrafficSelector,
    },
}

/// One message of the contract.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// A request and its id.
    Request(u32, Request),
    /// A reply to request `id`.
    Reply(u32, Reply),
    /// An event.
    Event(Event),
}

fn put_addr(w: &mut FrameWriter, ty: u16, a: IpAddr) {
    match a {
        IpAddr::V4(v) => w.field(ty, &v.octets()),
        IpAddr::V6(v) => w.field(ty, &v.octets()),
    };
}

fn addr(v: Option<&[u8]>, what: &'static str) -> Result<IpAddr, FrameError> {
    match v {
        Some(b) => addr_bytes(b).ok_or(FrameError::Invalid(what)),
        None => Err(FrameError::Missing(what)),
    }
}

fn addr_bytes(b: &[u8]) -> Option<IpAddr> {
    if let Ok(a) = <[u8; 4]>::try_from(b) {
        return Some(IpAddr::V4(Ipv4Addr::from(a)));
    }
    <[u8; 16]>::try_from(b)
        .ok()
        .map(|a| IpAddr::V6(Ipv6Addr::from(a)))
}

fn proto_byte(p: Proto) -> u8 {
    match p {
        Proto::Esp => 50,
        Proto::Ah => 51,
    }
}

fn proto(f: &RawFrame<'_>) -> Result<Proto, FrameError> {
    match be::<1>(f.field(field::PROTO), "proto")?[0] {
        50 => Ok(Proto::Esp),
        51 => Ok(Proto::Ah),
        _ => Err(FrameError::Invalid("proto")),
    }
}

fn u32_field(f: &RawFrame<'_>, ty: u16, what: &'static str) -> Result<u32, FrameError> {
    Ok(u32::from_be_bytes(be::<4>(f.field(ty), what)?))
}

fn opt_u32(f: &RawFrame<'_>, ty: u16, what: &'static str) -> Result<Option<u32>, FrameError> {
    f.field(ty)
        .map(|v| Ok(u32::from_be_bytes(be::<4>(Some(v), what)?)))
        .transpose()
}

fn flag(f: &RawFrame<'_>, ty: u16, what: &'static str) -> Result<bool, FrameError> {
    match f.field(ty) {
        None => Ok(false),
        Some([0]) => Ok(false),
        Some([1]) => Ok(true),
        Some(_) => Err(FrameError::Invalid(what)),
    }
}

fn put_sa_id(w: &mut FrameWriter, id: &SaId) {
    put_addr(w, field::SRC, id.src);
    put_addr(w, field::DST, id.dst);
    w.u32(field::SPI, id.spi)
        .u8(field::PROTO, proto_byte(id.proto));
}

fn sa_id(f: &RawFrame<'_>) -> Result<SaId, FrameError> {
    let id = SaId {
        src: addr(f.field(field::SRC), "src")?,
        dst: addr(f.field(field::DST), "dst")?,
        spi: u32_field(f, field::SPI, "spi")?,
        proto: proto(f)?,
    };
    if id.src.is_ipv4() != id.dst.is_ipv4() {
        return Err(FrameError::Invalid("src/dst family"));
    }
    Ok(id)
}

fn put_ts(w: &mut FrameWriter, ty: u16, ts: &TrafficSelector) {
    let mut b = Vec::with_capacity(38);
    b.push(ts.proto);
    b.extend_from_slice(&ts.from_port.to_be_bytes());
    b.extend_from_slice(&ts.to_port.to_be_bytes());
    for a in [ts.from, ts.to] {
        match a {
            IpAddr::V4(v) => b.extend_from_slice(&v.octets()),
            IpAddr::V6(v) => b.extend_from_slice(&v.octets()),
        }
    }
    w.field(ty, &b);
}

fn ts_bytes(b: &[u8]) -> Result<TrafficSelector, FrameError> {
    let bad = FrameError::Invalid("traffic selector");
    let (head, addrs) = (b.get(..5).ok_or(bad.clone())?, &b[5.min(b.len())..]);
    let half = match addrs.len() {
        8 => 4,
        32 => 16,
        _ => return Err(bad),
    };
    let from = addr_bytes(&addrs[..half]).ok_or(bad.clone())?;
    let to = addr_bytes(&addrs[half..]).ok_or(bad.clone())?;
    let ts = TrafficSelector {
        proto: head[0],
        from_port: u16::from_be_bytes([head[1], head[2]]),
        to_port: u16::from_be_bytes([head[3], head[4]]),
        from,
        to,
    };
    if ts.from > ts.to || ts.from_port > ts.to_port {
        return Err(bad);
    }
    Ok(ts)
}

fn ts_list(f: &RawFrame<'_>, ty: u16) -> Result<Vec<TrafficSelector>, FrameError> {
    let v: Vec<TrafficSelector> = f
        .all(ty)
        .take(MAX_SELECTORS + 1)
        .map(ts_bytes)
        .collect::<Result<_, _>>()?;
    if v.len() > MAX_SELECTORS {
        return Err(FrameError::Invalid("too many traffic selectors"));
    }
    Ok(v)
}

fn one_ts(f: &RawFrame<'_>, ty: u16, what: &'static str) -> Result<TrafficSelector, FrameError> {
    ts_bytes(f.field(ty).ok_or(FrameError::Missing(what))?)
}

fn key(f: &RawFrame<'_>, ty: u16, what: &'static str) -> Result<Zeroizing<Vec<u8>>, FrameError> {
    let k = f.field(ty).unwrap_or(&[]);
    if k.len() > MAX_KEY {
        return Err(FrameError::Invalid(what));
    }
    Ok(Zeroizing::new(k.to_vec()))
}

fn encap(f: &RawFrame<'_>) -> Result<Option<(u16, u16)>, FrameError> {
    f.field(field::ENCAP)
        .map(|v| {
            let p = be::<4>(Some(v), "encap")?;
            Ok((
                u16::from_be_bytes([p[0], p[1]]),
                u16::from_be_bytes([p[2], p[3]]),
            ))
        })
        .transpose()
}

fn put_encap(w: &mut FrameWriter, e: Option<(u16, u16)>) {
    if let Some((s, d)) = e {
        let mut b = [0u8; 4];
        b[..2].copy_from_slice(&s.to_be_bytes());
        b[2..].copy_from_slice(&d.to_be_bytes());
        w.field(field::ENCAP, &b);
    }
}

fn lifetime(f: &RawFrame<'_>) -> Result<Lifetimes, FrameError> {
    let Some(v) = f.field(field::LIFETIME) else {
        return Ok(Lifetimes::default());
    };
    let b = be::<48>(Some(v), "lifetime")?;
    let n = |i: usize| {
        let mut x = [0u8; 8];
        x.copy_from_slice(&b[i * 8..i * 8 + 8]);
        u64::from_be_bytes(x)
    };
    Ok(Lifetimes {
        soft_bytes: n(0),
        hard_bytes: n(1),
        soft_packets: n(2),
        hard_packets: n(3),
        soft_seconds: n(4),
        hard_seconds: n(5),
    })
}

fn put_lifetime(w: &mut FrameWriter, l: &Lifetimes) {
    let mut b = Vec::with_capacity(48);
    for v in [
        l.soft_bytes,
        l.hard_bytes,
        l.soft_packets,
        l.hard_packets,
        l.soft_seconds,
        l.hard_seconds,
    ] {
        b.extend_from_slice(&v.to_be_bytes());
    }
    w.field(field::LIFETIME, &b);
}

fn policy_id(f: &RawFrame<'_>) -> Result<PolicyId, FrameError> {
    let dir = match be::<1>(f.field(field::DIRECTION), "direction")?[0] {
        0 => PolicyDir::In,
        1 => PolicyDir::Out,
        2 => PolicyDir::Fwd,
        _ => return Err(FrameError::Invalid("direction")),
    };
    let id = PolicyId {
        dir,
        src_ts: one_ts(f, field::SRC_TS, "src_ts")?,
        dst_ts: one_ts(f, field::DST_TS, "dst_ts")?,
    };
    if id.src_ts.from.is_ipv4() != id.dst_ts.from.is_ipv4() {
        return Err(FrameError::Invalid("selector families differ"));
    }
    Ok(id)
}

fn put_policy_id(w: &mut FrameWriter, id: &PolicyId) {
    let d = match id.dir {
        PolicyDir::In => 0,
        PolicyDir::Out => 1,
        PolicyDir::Fwd => 2,
    };
    w.u8(field::DIRECTION, d);
    put_ts(w, field::SRC_TS, &id.src_ts);
    put_ts(w, field::DST_TS, &id.dst_ts);
}

fn add_sa(f: &RawFrame<'_>) -> Result<AddSa, FrameError> {
    let mode = match be::<1>(f.field(field::MODE), "mode")?[0] {
        1 => SaMode::Transport,
        2 => SaMode::Tunnel,
        _ => return Err(FrameError::Invalid("mode")),
    };
    let alg = |ty, what| -> Result<u16, FrameError> {
        Ok(f.field(ty)
            .map(|v| be::<2>(Some(v), what).map(u16::from_be_bytes))
            .transpose()?
            .unwrap_or(0))
    };
    Ok(AddSa {
        id: sa_id(f)?,
        reqid: opt_u32(f, field::REQID, "reqid")?.unwrap_or(0),
        mode,
        enc_alg: alg(field::ENC_ALG, "enc_alg")?,
        enc_key: key(f, field::ENC_KEY, "enc_key")?,
        int_alg: alg(field::INT_ALG, "int_alg")?,
        int_key: key(f, field::INT_KEY, "int_key")?,
        replay_window: opt_u32(f, field::REPLAY_WINDOW, "replay_window")?.unwrap_or(0),
        encap: encap(f)?,
        esn: flag(f, field::ESN, "esn")?,
        inbound: flag(f, field::INBOUND, "inbound")?,
        lifetime: lifetime(f)?,
        src_ts: ts_list(f, field::SRC_TS)?,
        dst_ts: ts_list(f, field::DST_TS)?,
    })
}

fn put_add_sa(w: &mut FrameWriter, a: &AddSa) {
    put_sa_id(w, &a.id);
    w.u32(field::REQID, a.reqid);
    w.u8(
        field::MODE,
        match a.mode {
            SaMode::Transport => 1,
            SaMode::Tunnel => 2,
        },
    );
    w.u16(field::ENC_ALG, a.enc_alg);
    w.field(field::ENC_KEY, &a.enc_key);
    w.u16(field::INT_ALG, a.int_alg);
    w.field(field::INT_KEY, &a.int_key);
    w.u32(field::REPLAY_WINDOW, a.replay_window);
    put_encap(w, a.encap);
    w.u8(field::ESN, u8::from(a.esn));
    w.u8(field::INBOUND, u8::from(a.inbound));
    put_lifetime(w, &a.lifetime);
    for ts in &a.src_ts {
        put_ts(w, field::SRC_TS, ts);
    }
    for ts in &a.dst_ts {
        put_ts(w, field::DST_TS, ts);
    }
}

fn add_policy(f: &RawFrame<'_>) -> Result<AddPolicy, FrameError> {
    let kind = match be::<1>(f.field(field::POLICY_TYPE), "policy_type")?[0] {
        1 => PolicyType::Ipsec,
        2 => PolicyType::Pass,
        3 => PolicyType::Drop,
        _ => return Err(FrameError::Invalid("policy_type")),
    };
    let endpoints = match (f.field(field::SRC), f.field(field::DST)) {
        (Some(s), Some(d)) => Some((addr(Some(s), "src")?, addr(Some(d), "dst")?)),
        (None, None) => None,
        _ => return Err(FrameError::Invalid("endpoints")),
    };
    Ok(AddPolicy {
        id: policy_id(f)?,
        kind,
        priority: opt_u32(f, field::PRIORITY, "priority")?.unwrap_or(0),
        reqid: opt_u32(f, field::REQID, "reqid")?.unwrap_or(0),
        endpoints,
        esp_spi: opt_u32(f, field::ESP_SPI, "esp_spi")?,
        ah_spi: opt_u32(f, field::AH_SPI, "ah_spi")?,
    })
}

fn put_add_policy(w: &mut FrameWriter, p: &AddPolicy) {
    put_policy_id(w, &p.id);
    w.u8(
        field::POLICY_TYPE,
        match p.kind {
            PolicyType::Ipsec => 1,
            PolicyType::Pass => 2,
            PolicyType::Drop => 3,
        },
    );
    w.u32(field::PRIORITY, p.priority);
    w.u32(field::REQID, p.reqid);
    if let Some((s, d)) = p.endpoints {
        put_addr(w, field::SRC, s);
        put_addr(w, field::DST, d);
    }
    if let Some(s) = p.esp_spi {
        w.u32(field::ESP_SPI, s);
    }
    if let Some(s) = p.ah_spi {
        w.u32(field::AH_SPI, s);
    }
}

fn request(f: &RawFrame<'_>) -> Result<Request, FrameError> {
    Ok(match f.kind {
        kind::HELLO => Request::Hello {
            version: be::<1>(f.field(field::VERSION), "version")?[0],
        },
        kind::GET_SPI => Request::GetSpi {
            src: addr(f.field(field::SRC), "src")?,
            dst: addr(f.field(field::DST), "dst")?,
            proto: proto(f)?,
        },
        kind::ADD_SA => Request::AddSa(Box::new(add_sa(f)?)),
        kind::UPDATE_SA => Request::UpdateSa(UpdateSa {
            id: sa_id(f)?,
            new_src: addr(f.field(field::NEW_SRC), "new_src")?,
            new_dst: addr(f.field(field::NEW_DST), "new_dst")?,
            encap: encap(f)?,
        }),
        kind::QUERY_SA => Request::QuerySa(sa_id(f)?),
        kind::DEL_SA => Request::DelSa(sa_id(f)?),
        kind::FLUSH_SAS => Request::FlushSas,
        kind::ADD_POLICY => Request::AddPolicy(add_policy(f)?),
        kind::QUERY_POLICY => Request::QueryPolicy(policy_id(f)?),
        kind::DEL_POLICY => Request::DelPolicy {
            id: policy_id(f)?,
            esp_spi: opt_u32(f, field::ESP_SPI, "esp_spi")?,
            ah_spi: opt_u32(f, field::AH_SPI, "ah_spi")?,
        },
        kind::FLUSH_POLICIES => Request::FlushPolicies,
        k => return Err(FrameError::UnknownKind(k)),
    })
}

fn reply(f: &RawFrame<'_>) -> Result<Reply, FrameError> {
    if f.kind == kind::ERROR {
        let code = u16::from_be_bytes(be::<2>(f.field(field::ERROR_CODE), "error_code")?);
        let message = String::from_utf8_lossy(f.field(field::MESSAGE).unwrap_or(&[])).into_owned();
        return Ok(Reply::Error {
            code: ErrorCode::from_u16(code),
            message,
        });
    }
    let u64_of = |ty, what| -> Result<Option<u64>, FrameError> {
        f.field(ty)
            .map(|v| be::<8>(Some(v), what).map(u64::from_be_bytes))
            .transpose()
    };
    let usage = match (
        u64_of(field::BYTES, "bytes")?,
        u64_of(field::PACKETS, "packets")?,
    ) {
        (Some(b), Some(p)) => Some((b, p)),
        (None, None) => None,
        _ => return Err(FrameError::Invalid("usage")),
    };
    Ok(Reply::Ok(ReplyData {
        version: f
            .field(field::VERSION)
            .map(|v| be::<1>(Some(v), "version").map(|b| b[0]))
            .transpose()?,
        spi: opt_u32(f, field::SPI, "spi")?,
        usage,
        idle_seconds: u64_of(field::IDLE, "idle")?,
    }))
}

fn event(f: &RawFrame<'_>) -> Result<Event, FrameError> {
    Ok(match f.kind {
        kind::EXPIRE => Event::Expire {
            id: sa_id(f)?,
            hard: flag(f, field::HARD, "hard")?,
        },
        _ => Event::Acquire {
            reqid: u32_field(f, field::REQID, "reqid")?,
            src: one_ts(f, field::SRC_TS, "src_ts")?,
            dst: one_ts(f, field::DST_TS, "dst_ts")?,
        },
    })
}

impl Message {
    /// Decodes one frame (from [`crate::frame::split`]).
    pub fn decode(f: &RawFrame<'_>) -> Result<Message, FrameError> {
        match f.kind {
            kind::OK | kind::ERROR => Ok(Message::Reply(f.id, reply(f)?)),
            kind::EXPIRE | kind::ACQUIRE => Ok(Message::Event(event(f)?)),
            _ => Ok(Message::Request(f.id, request(f)?)),
        }
    }

    /// Encodes the message as one frame (wiped on drop: it may hold keys).
    pub fn encode(&self) -> Result<Zeroizing<Vec<u8>>, FrameError> {
        match self {
            Message::Request(id, r) => encode_request(*id, r),
            Message::Reply(id, r) => encode_reply(*id, r),
            Message::Event(e) => encode_event(e),
        }
    }
}

fn encode_request(id: u32, r: &Request) -> Result<Zeroizing<Vec<u8>>, FrameError> {
    let k = match r {
        Request::Hello { .. } => kind::HELLO,
        Request::GetSpi { .. } => kind::GET_SPI,
        Request::AddSa(_) => kind::ADD_SA,
        Request::UpdateSa(_) => kind::UPDATE_SA,
        Request::QuerySa(_) => kind::QUERY_SA,
        Request::DelSa(_) => kind::DEL_SA,
        Request::FlushSas => kind::FLUSH_SAS,
        Request::AddPolicy(_) => kind::ADD_POLICY,
        Request::QueryPolicy(_) => kind::QUERY_POLICY,
        Request::DelPolicy { .. } => kind::DEL_POLICY,
        Request::FlushPolicies => kind::FLUSH_POLICIES,
    };
    let mut w = FrameWriter::new(k, id);
    match r {
        Request::Hello { version } => {
            w.u8(field::VERSION, *version);
        }
        Request::GetSpi { src, dst, proto } => {
            put_addr(&mut w, field::SRC, *src);
            put_addr(&mut w, field::DST, *dst);
            w.u8(field::PROTO, proto_byte(*proto));
        }
        Request::AddSa(a) => put_add_sa(&mut w, a),
        Request::UpdateSa(u) => {
            put_sa_id(&mut w, &u.id);
            put_addr(&mut w, field::NEW_SRC, u.new_src);
            put_addr(&mut w, field::NEW_DST, u.new_dst);
            put_encap(&mut w, u.encap);
        }
        Request::QuerySa(id) | Request::DelSa(id) => put_sa_id(&mut w, id),
        Request::AddPolicy(p) => put_add_policy(&mut w, p),
        Request::QueryPolicy(p) => put_policy_id(&mut w, p),
        Request::DelPolicy {
            id,
            esp_spi,
            ah_spi,
        } => {
            put_policy_id(&mut w, id);
            if let Some(s) = esp_spi {
                w.u32(field::ESP_SPI, *s);
            }
            if let Some(s) = ah_spi {
                w.u32(field::AH_SPI, *s);
            }
        }
        Request::FlushSas | Request::FlushPolicies => {}
    }
    w.finish()
}

fn encode_reply(id: u32, r: &Reply) -> Result<Zeroizing<Vec<u8>>, FrameError> {
    match r {
        Reply::Error { code, message } => {
            let mut w = FrameWriter::new(kind::ERROR, id);
            w.u16(field::ERROR_CODE, *code as u16).field(
                field::MESSAGE,
                &message.as_bytes()[..message.len().min(1024)],
            );
            w.finish()
        }
        Reply::Ok(d) => {
            let mut w = FrameWriter::new(kind::OK, id);
            if let Some(v) = d.version {
                w.u8(field::VERSION, v);
            }
            if let Some(s) = d.spi {
                w.u32(field::SPI, s);
            }
            if let Some((b, p)) = d.usage {
                w.u64(field::BYTES, b).u64(field::PACKETS, p);
            }
            if let Some(i) = d.idle_seconds {
                w.u64(field::IDLE, i);
            }
            w.finish()
        }
    }
}

fn encode_event(e: &Event) -> Result<Zeroizing<Vec<u8>>, FrameError> {
    match e {
        Event::Expire { id, hard } => {
            let mut w = FrameWriter::new(kind::EXPIRE, 0);
            put_sa_id(&mut w, id);
            w.u8(field::HARD, u8::from(*hard));
            w.finish()
        }
        Event::Acquire { reqid, src, dst } => {
            let mut w = FrameWriter::new(kind::ACQUIRE, 0);
            w.u32(field::REQID, *reqid);
            put_ts(&mut w, field::SRC_TS, src);
            put_ts(&mut w, field::DST_TS, dst);
            w.finish()
        }
    }
}

#[cfg(test)]
mod tests;
