//! The SAs and policies an IKE daemon negotiated, kept beside the static configuration.
//!
//! The gateway applies each request here, then builds one configuration from the static
//! file and [`KeyingDb::merge_into`], and swaps the data plane's tables to it between
//! bursts, as a reload does (per-SA state is carried over by key, so an SA's sequence
//! numbers and replay window survive unrelated changes). Everything is bounded: SAs,
//! policies and SPIs handed out but not yet used.
//!
//! The mapping to espgw's model:
//! - an SA becomes an `SaConfig` (direction from `inbound`; tunnel endpoints from its
//!   addresses; UDP encapsulation ports as on the wire);
//! - a policy becomes one rule per pair of address prefixes its selectors' ranges cover;
//!   `in` and `fwd` are both espgw's inbound check (a `fwd` identical to an `in` adds
//!   nothing); its action protects with the SA its SPI names, or, while that SA does
//!   not exist yet (a trap policy), discards: outbound with an ACQUIRE for its reqid;
//! - priorities: strongSwan's lower-wins number becomes espgw's higher-wins one, below
//!   every static rule (`-1 - priority`): the operator's file has the last word.
//!
//! Policies are reference counted as `kernel_ipsec.h` asks: charon adds the same policy
//! once per CHILD_SA that uses it, and it stays until the last reference is deleted. Each
//! reference keeps the SAs it names; the policy follows the newest whose SAs are installed
//! (during a rekey or a collision several CHILD_SAs hold it, and charon may delete them in
//! any order).

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::time::{Duration, Instant};

use espgw_config::{
    Action, Config, Direction, Lifetime, Location, Mode, PolicyConfig, Prefix, Range, SaConfig,
    SaProto, UdpEncap,
};

use crate::algorithms::{ah_suite, esp_suite};
use crate::message::{
    AddPolicy, AddSa, ErrorCode, Event, PolicyDir, PolicyId, PolicyType, Proto, SaId, SaMode,
    TrafficSelector, UpdateSa,
};

/// Negotiated SAs held at most.
pub const MAX_SAS: usize = 8192;
/// Negotiated policies held at most.
pub const MAX_POLICIES: usize = 8192;
/// SPIs handed out by GET_SPI and not yet installed, at most.
pub const MAX_PENDING_SPIS: usize = 1024;
/// How long an SPI handed out stays reserved without its SA (charon's larval SAs live
/// 165 s in the kernel; an exchange that takes longer has failed).
pub const PENDING_SPI_LIFE: Duration = Duration::from_secs(180);
/// The name negotiated entries carry as their "file" in errors and `show`.
pub const SOURCE: &str = "ike";

/// Why a request was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KeyingError {
    /// No such SA or policy.
    NotFound(String),
    /// The SA exists already.
    Exists(String),
    /// A request espgw cannot honour as asked.
    Unsupported(String),
    /// A contradictory or malformed request.
    Invalid(String),
    /// A bound is reached.
    Full(&'static str),
}

impl KeyingError {
    /// The code the reply carries.
    pub fn code(&self) -> ErrorCode {
        match self {
            KeyingError::NotFound(_) => ErrorCode::NotFound,
            KeyingError::Exists(_) => ErrorCode::AlreadyDone,
            KeyingError::Unsupported(_) => ErrorCode::NotSupported,
            KeyingError::Invalid(_) => ErrorCode::InvalidArg,
            KeyingError::Full(_) => ErrorCode::Failed,
        }
    }
}

impl std::fmt::Display for KeyingError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KeyingError::NotFound(m)
            | KeyingError::Exists(m)
            | KeyingError::Unsupported(m)
            | KeyingError::Invalid(m) => f.write_str(m),
            KeyingError::Full(what) => write!(f, "too many {what}"),
        }
    }
}

impl std::error::Error for KeyingError {}

/// An SA is found by protocol, SPI and destination (as charon names it).
type SaKey = (Proto, u32, IpAddr);

fn key_of(id: &SaId) -> SaKey {
    (id.proto, id.spi, id.dst)
}

/// One negotiated SA.
#[derive(Debug, Clone)]
pub struct NegotiatedSa {
    /// What charon asked for (addresses updated by UPDATE_SA).
    pub add: AddSa,
    /// When it was installed: time lifetimes count from here.
    pub installed: Instant,
    soft_reported: bool,
}

/// A policy and the references to it, oldest first: each is one ADD_POLICY, with the SAs
/// that CHILD_SA named (as kernel-netlink keeps them).
#[derive(Debug, Clone)]
struct PolicyEntry {
    users: Vec<AddPolicy>,
}

/// References one policy may hold at most (charon adds one per CHILD_SA using it: a few
/// during rekeys and collisions).
const MAX_POLICY_USERS: usize = 64;

/// The negotiated SAs and policies.
#[derive(Debug, Default, Clone)]
pub struct KeyingDb {
    sas: BTreeMap<SaKey, NegotiatedSa>,
    pending_spis: BTreeMap<u32, Instant>,
    policies: BTreeMap<PolicyId, PolicyEntry>,
}

impl KeyingDb {
    /// Hands out an SPI for an inbound SA: unused by any SA (`in_use` tells of static
    /// ones) and not handed out before, from `random` (retried on collision).
    pub fn get_spi(
        &mut self,
        now: Instant,
        in_use: impl Fn(u32) -> bool,
        mut random: impl FnMut() -> u32,
    ) -> Result<u32, KeyingError> {
        self.pending_spis
            .retain(|_, at| now.duration_since(*at) < PENDING_SPI_LIFE);
        if self.pending_spis.len() >= MAX_PENDING_SPIS {
            return Err(KeyingError::Full("SPIs handed out and not used"));
        }
        for _ in 0..64 {
            // 0xc0000000-0xcfffffff, strongSwan's KERNEL_SPI_MIN..MAX; far above the
            // reserved 1-255 (RFC 4303 §2.1).
            let spi = 0xc000_0000 | (random() & 0x0fff_ffff);
            let taken = in_use(spi)
                || self.pending_spis.contains_key(&spi)
                || self.sas.keys().any(|k| k.1 == spi);
            if !taken {
                self.pending_spis.insert(spi, now);
                return Ok(spi);
            }
        }
        Err(KeyingError::Full("SPI collisions"))
    }

    /// Installs an SA after checking its algorithms and keys, its mode and that no SA of
    /// its direction has its SPI (`static_spi` tells of the configuration's).
    pub fn add_sa(
        &mut self,
        add: AddSa,
        now: Instant,
        static_spi: impl Fn(Direction, u32) -> bool,
    ) -> Result<(), KeyingError> {
        check_sa(&add)?;
        let key = key_of(&add.id);
        if self.sas.contains_key(&key) {
            return Err(KeyingError::Exists(format!(
                "SA 0x{:08x} to {} exists",
                add.id.spi, add.id.dst
            )));
        }
        let dir = direction_of(&add);
        let clash = static_spi(dir, add.id.spi)
            || self
                .sas
                .values()
                .any(|s| direction_of(&s.add) == dir && s.add.id.spi == add.id.spi);
        if clash {
            // espgw's policies name SAs by direction and SPI: two peers that chose the
            // same SPI for their inbound SAs cannot both be served (2^-30 per pair).
            return Err(KeyingError::Unsupported(format!(
                "another {dir} SA has SPI 0x{:08x}",
                add.id.spi
            )));
        }
        if self.sas.len() >= MAX_SAS {
            return Err(KeyingError::Full("negotiated SAs"));
        }
        self.pending_spis.remove(&add.id.spi);
        self.sas.insert(
            key,
            NegotiatedSa {
                add,
                installed: now,
                soft_reported: false,
            },
        );
        Ok(())
    }

    /// Moves an SA to new addresses or encapsulation (NAT rebinding, MOBIKE).
    pub fn update_sa(&mut self, u: &UpdateSa) -> Result<(), KeyingError> {
        if u.new_src.is_ipv4() != u.new_dst.is_ipv4() {
            return Err(KeyingError::Invalid("new addresses of two families".into()));
        }
        let mut sa = self
            .sas
            .remove(&key_of(&u.id))
            .ok_or_else(|| not_found(&u.id))?;
        sa.add.id.src = u.new_src;
        sa.add.id.dst = u.new_dst;
        sa.add.encap = u.encap;
        if let Err(e) = check_sa(&sa.add) {
            // Put it back as it was: a refused update changes nothing.
            sa.add.id = u.id;
            self.sas.insert(key_of(&u.id), sa);
            return Err(e);
        }
        self.sas.insert(key_of(&sa.add.id), sa);
        Ok(())
    }

    /// The SA `id`.
    pub fn sa(&self, id: &SaId) -> Option<&NegotiatedSa> {
        self.sas.get(&key_of(id))
    }

    /// Removes the SA `id`.
    pub fn del_sa(&mut self, id: &SaId) -> Result<NegotiatedSa, KeyingError> {
        self.sas.remove(&key_of(id)).ok_or_else(|| not_found(id))
    }

    /// Removes every negotiated SA.
    pub fn flush_sas(&mut self) {
        self.sas.clear();
        self.pending_spis.clear();
    }

    /// Adds a policy, or one more reference to it.
    pub fn add_policy(&mut self, p: AddPolicy) -> Result<(), KeyingError> {
        check_policy(&p)?;
        if let Some(e) = self.policies.get_mut(&p.id) {
            if e.users.len() >= MAX_POLICY_USERS {
                return Err(KeyingError::Full("references to one policy"));
            }
            e.users.push(p);
            return Ok(());
        }
        if self.policies.len() >= MAX_POLICIES {
            return Err(KeyingError::Full("negotiated policies"));
        }
        self.policies.insert(p.id, PolicyEntry { users: vec![p] });
        Ok(())
    }

    /// Whether the policy `id` exists.
    pub fn has_policy(&self, id: &PolicyId) -> bool {
        self.policies.contains_key(id)
    }

    /// Drops one reference to a policy: the newest naming SAs `esp_spi`/`ah_spi` where
    /// one does, else the newest; true when that removed the policy.
    pub fn del_policy(
        &mut self,
        id: &PolicyId,
        esp_spi: Option<u32>,
        ah_spi: Option<u32>,
    ) -> Result<bool, KeyingError> {
        let e = self
            .policies
            .get_mut(id)
            .ok_or_else(|| KeyingError::NotFound("no such policy".into()))?;
        let named = (esp_spi.is_some() || ah_spi.is_some())
            .then(|| {
                e.users
                    .iter()
                    .rposition(|u| (u.esp_spi, u.ah_spi) == (esp_spi, ah_spi))
            })
            .flatten();
        let at = named.unwrap_or(e.users.len() - 1);
        e.users.remove(at);
        if e.users.is_empty() {
            self.policies.remove(id);
            return Ok(true);
        }
        Ok(false)
    }

    /// Removes every negotiated policy.
    pub fn flush_policies(&mut self) {
        self.policies.clear();
    }

    /// The negotiated SAs.
    pub fn sas(&self) -> impl Iterator<Item = &NegotiatedSa> {
        self.sas.values()
    }

    /// Number of negotiated SAs and policies.
    pub fn len(&self) -> (usize, usize) {
        (self.sas.len(), self.policies.len())
    }

    /// Whether nothing is negotiated.
    pub fn is_empty(&self) -> bool {
        self.sas.is_empty() && self.policies.is_empty()
    }

    /// Whether [`KeyingDb::expire`] has anything to do at `now`: (a soft lifetime to
    /// report, a hard one to remove).
    pub fn due(&self, now: Instant) -> (bool, bool) {
        let mut due = (false, false);
        for sa in self.sas.values() {
            let age = now.duration_since(sa.installed).as_secs();
            let l = sa.add.lifetime;
            due.1 |= l.hard_seconds != 0 && age >= l.hard_seconds;
            due.0 |= l.soft_seconds != 0 && age >= l.soft_seconds && !sa.soft_reported;
        }
        due
    }

    /// Time lifetimes reached by `now`: a soft one is reported once (charon rekeys); a
    /// hard one removes the SA and is reported (charon deletes or re-creates it). Byte
    /// and packet lifetimes are the data plane's, reported by the gateway.
    pub fn expire(&mut self, now: Instant) -> Vec<Event> {
        let mut events = Vec::new();
        let mut gone = Vec::new();
        for (k, sa) in self.sas.iter_mut() {
            let age = now.duration_since(sa.installed).as_secs();
            let l = sa.add.lifetime;
            if l.hard_seconds != 0 && age >= l.hard_seconds {
                events.push(Event::Expire {
                    id: sa.add.id,
                    hard: true,
                });
                gone.push(*k);
            } else if l.soft_seconds != 0 && age >= l.soft_seconds && !sa.soft_reported {
                sa.soft_reported = true;
                events.push(Event::Expire {
                    id: sa.add.id,
                    hard: false,
                });
            }
        }
        for k in gone {
            self.sas.remove(&k);
        }
        events
    }

    /// Appends the negotiated SAs and policies to `cfg` (a copy of the static
    /// configuration), which the caller validates and builds tables from.
    pub fn merge_into(&self, cfg: &mut Config) {
        cfg.sas
            .extend(self.sas.values().filter_map(|s| sa_config(&s.add)));
        let present =
            |dir: Direction, spi: u32| cfg.sas.iter().any(|s| s.direction == dir && s.spi == spi);
        let mut rules = Vec::new();
        for e in self.policies.values() {
            let dir = match e.users[0].id.dir {
                PolicyDir::Out => Direction::Out,
                PolicyDir::In | PolicyDir::Fwd => Direction::In,
            };
            let p = effective(e, dir, &present);
            if p.id.dir == PolicyDir::Fwd {
                let twin = PolicyId {
                    dir: PolicyDir::In,
                    ..p.id
                };
                if self
                    .policies
                    .get(&twin)
                    .is_some_and(|t| same_action(effective(t, dir, &present), p))
                {
                    continue;
                }
            }
            let action = action_of(p, dir, &present);
            rules.extend(policy_configs(p, dir, action));
        }
        cfg.policies.extend(rules);
    }
}

fn not_found(id: &SaId) -> KeyingError {
    KeyingError::NotFound(format!("no SA 0x{:08x} to {}", id.spi, id.dst))
}

fn direction_of(a: &AddSa) -> Direction {
    if a.inbound {
        Direction::In
    } else {
        Direction::Out
    }
}

fn check_sa(a: &AddSa) -> Result<(), KeyingError> {
    if a.id.src.is_ipv4() != a.id.dst.is_ipv4() {
        return Err(KeyingError::Invalid("SA addresses of two families".into()));
    }
    if a.id.spi < espgw_config::MIN_SPI {
        return Err(KeyingError::Invalid(format!(
            "SPI {} is reserved",
            a.id.spi
        )));
    }
    let suite = match a.id.proto {
        Proto::Esp => esp_suite(a.enc_alg, a.enc_key.len(), a.int_alg, a.int_key.len()),
        Proto::Ah => ah_suite(a.int_alg, a.int_key.len()),
    }
    .map_err(|e| KeyingError::Unsupported(e.to_string()))?;
    if a.id.proto == Proto::Esp {
        suite
            .check()
            .map_err(|e| KeyingError::Unsupported(e.to_string()))?;
    }
    if a.id.proto == Proto::Ah && a.encap.is_some() {
        return Err(KeyingError::Unsupported(
            "AH cannot be carried in UDP".into(),
        ));
    }
    if a.replay_window > espgw_config::MAX_REPLAY_WINDOW {
        return Err(KeyingError::Unsupported(format!(
            "replay window {} above {}",
            a.replay_window,
            espgw_config::MAX_REPLAY_WINDOW
        )));
    }
    Ok(())
}

fn check_policy(p: &AddPolicy) -> Result<(), KeyingError> {
    for ts in [p.id.src_ts, p.id.dst_ts] {
        let icmp = matches!(ts.proto, 1 | 58);
        if icmp && (ts.from_port, ts.to_port) != (0, u16::MAX) {
            // strongSwan packs ICMP type and code into one port number; espgw matches them
            // as two ranges. Refused rather than matched wrongly.
            return Err(KeyingError::Unsupported(
                "ICMP type/code selectors are not supported".into(),
            ));
        }
    }
    if p.kind == PolicyType::Ipsec && p.esp_spi.is_none() && p.ah_spi.is_none() && p.reqid == 0 {
        return Err(KeyingError::Invalid(
            "an IPsec policy without SA or reqid".into(),
        ));
    }
    Ok(())
}

/// The reference a policy follows: the newest whose SAs are all installed (during a rekey
/// or a collision several CHILD_SAs hold it, and the one charon deletes first need not be
/// the oldest), else the newest.
fn effective<'a>(
    e: &'a PolicyEntry,
    dir: Direction,
    present: &impl Fn(Direction, u32) -> bool,
) -> &'a AddPolicy {
    let live = |u: &&AddPolicy| {
        u.kind != PolicyType::Ipsec
            || ((u.esp_spi.is_some() || u.ah_spi.is_some())
                && u.esp_spi.is_none_or(|s| present(dir, s))
                && u.ah_spi.is_none_or(|s| present(dir, s)))
    };
    e.users
        .iter()
        .rev()
        .find(live)
        .unwrap_or(&e.users[e.users.len() - 1])
}

fn same_action(a: &AddPolicy, b: &AddPolicy) -> bool {
    (a.kind, a.esp_spi, a.ah_spi, a.priority) == (b.kind, b.esp_spi, b.ah_spi, b.priority)
}

fn action_of(p: &AddPolicy, dir: Direction, present: &impl Fn(Direction, u32) -> bool) -> Action {
    match p.kind {
        PolicyType::Pass => Action::Bypass,
        PolicyType::Drop => Action::Discard,
        PolicyType::Ipsec => {
            let esp = p.esp_spi.filter(|&s| present(dir, s));
            let ah = p.ah_spi.filter(|&s| present(dir, s));
            match (esp, ah, p.esp_spi, p.ah_spi) {
                (Some(e), Some(a), _, _) => Action::Bundle { esp: e, ah: a },
                (Some(e), None, _, None) => Action::Protect(e),
                (None, Some(a), None, _) => Action::Protect(a),
                // The SA (or one of a bundle's) is not installed yet: nothing may pass in
                // the clear meanwhile; outbound, a packet asks the daemon to negotiate it;
                // inbound, any SA of the reqid is accepted.
                _ if p.reqid != 0 => Action::Acquire { reqid: p.reqid },
                _ => Action::Discard,
            }
        }
    }
}

/// One rule per pair of prefixes the selectors' address ranges cover.
fn policy_configs(p: &AddPolicy, dir: Direction, action: Action) -> Vec<PolicyConfig> {
    let (s, d) = (p.id.src_ts, p.id.dst_ts);
    let proto = if s.proto == 0 && d.proto == 0 {
        Range { lo: 0, hi: 255 }
    } else {
        let n = s.proto.max(d.proto);
        Range { lo: n, hi: n }
    };
    let mut out = Vec::new();
    for sp in range_prefixes(s.from, s.to) {
        for dp in range_prefixes(d.from, d.to) {
            out.push(PolicyConfig {
                direction: dir,
                priority: -1 - i64::from(p.priority),
                src: sp,
                dst: dp,
                proto,
                sport: Range {
                    lo: s.from_port,
                    hi: s.to_port,
                },
                dport: Range {
                    lo: d.from_port,
                    hi: d.to_port,
                },
                action,
                per_worker_sas: Vec::new(),
                loc: Location::new(SOURCE, 0),
            });
        }
    }
    out
}

/// The fewest prefixes that cover exactly `from..=to` (one for a subnet; at most 254 for
/// the most ragged IPv6 range).
pub fn range_prefixes(from: IpAddr, to: IpAddr) -> Vec<Prefix> {
    let (v4, mut lo, hi) = match (from, to) {
        (IpAddr::V4(a), IpAddr::V4(b)) => {
            (true, u128::from(u32::from(a)), u128::from(u32::from(b)))
        }
        (IpAddr::V6(a), IpAddr::V6(b)) => (false, u128::from(a), u128::from(b)),
        _ => return Vec::new(),
    };
    let width: u32 = if v4 { 32 } else { 128 };
    // The last address of the block of 2^k addresses starting at `lo` (aligned).
    let block_end = |lo: u128, k: u32| {
        if k >= 128 {
            u128::MAX
        } else {
            lo + ((1u128 << k) - 1)
        }
    };
    let mut out = Vec::new();
    while lo <= hi && out.len() < 2 * width as usize {
        let mut k = if lo == 0 {
            width
        } else {
            lo.trailing_zeros().min(width)
        };
        while k > 0 && block_end(lo, k) > hi {
            k -= 1;
        }
        let addr = if v4 {
            IpAddr::V4((lo as u32).into())
        } else {
            IpAddr::V6(lo.into())
        };
        out.push(Prefix {
            addr,
            len: (width - k) as u8,
        });
        let end = block_end(lo, k);
        if end >= hi {
            break;
        }
        lo = end + 1;
    }
    out
}

/// The SA as configuration (`None` only for a suite [`check_sa`] would have refused).
fn sa_config(a: &AddSa) -> Option<SaConfig> {
    let dir = direction_of(a);
    let suite = match a.id.proto {
        Proto::Esp => esp_suite(a.enc_alg, a.enc_key.len(), a.int_alg, a.int_key.len()),
        Proto::Ah => ah_suite(a.int_alg, a.int_key.len()),
    }
    .ok()?;
    let mode = match a.mode {
        SaMode::Transport => Mode::Transport,
        SaMode::Tunnel if a.inbound => Mode::Tunnel {
            local: a.id.dst,
            remote: a.id.src,
        },
        SaMode::Tunnel => Mode::Tunnel {
            local: a.id.src,
            remote: a.id.dst,
        },
    };
    let some = |n: u64| (n != 0).then_some(n);
    Some(SaConfig {
        spi: a.id.spi,
        direction: dir,
        mode,
        proto: match a.id.proto {
            Proto::Esp => SaProto::Esp,
            Proto::Ah => SaProto::Ah,
        },
        suite,
        enc_key: a.enc_key.clone(),
        auth_key: a.int_key.clone(),
        esn: a.esn,
        initial_seq: 0,
        replay_window: if a.inbound { a.replay_window } else { 0 },
        udp_encap: a.encap.map(|(s, d)| UdpEncap {
            src_port: s,
            dst_port: d,
        }),
        lifetime: Lifetime {
            soft_packets: some(a.lifetime.soft_packets),
            hard_packets: some(a.lifetime.hard_packets),
            soft_bytes: some(a.lifetime.soft_bytes),
            hard_bytes: some(a.lifetime.hard_bytes),
        },
        ttl: espgw_config::DEFAULT_TTL,
        name: Some(format!("ike-{}-{:08x}", a.reqid, a.id.spi)),
        loc: Location::new(SOURCE, 0),
        reqid: Some(a.reqid),
    })
}

/// Whether a configuration's SA came from the IKE daemon.
pub fn is_negotiated(sa: &SaConfig) -> bool {
    sa.loc.file == SOURCE
}

/// The selector of one address (for ACQUIRE).
pub fn host_selector(a: IpAddr, proto: u8, port: u16) -> TrafficSelector {
    TrafficSelector {
        proto,
        from: a,
        to: a,
        from_port: port,
        to_port: port,
    }
}

#[cfg(test)]
mod tests;
