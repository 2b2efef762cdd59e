//! One immutable snapshot of everything the data plane looks up, built from a
//! configuration. Workers read it through an `Arc`; a reload builds a new one and swaps it
//! in whole. SA state ([`SaState`]) of SAs that did not change is carried over, so
//! sequence numbers and replay windows survive the swap.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use std::net::IpAddr;

use espgw_config::{
    addr_bits, Action, Config, ConfigError, Direction, Mode, PortRole, Prefix, SaConfig, SaProto,
};
use espgw_crypto::{AhKey, CryptoProvider};
use espgw_wire::ethernet::MacAddr;

use crate::encap::OuterHeader;
use crate::route::{Neighbours, RouteTable, RouteTarget};
use crate::sa::{Sa, SaKey, SaState};
use crate::spd::{Spd, SpdAction, SpdRule};

/// A port as the data plane knows it.
#[derive(Debug, Clone)]
pub struct PortInfo {
    /// Interface name.
    pub name: String,
    /// The port's own MAC address.
    pub mac: MacAddr,
    /// The gateway's own addresses on this port (it answers ARP, ND and ping for them).
    pub addresses: Vec<Prefix>,
    /// Protected (plaintext side) or unprotected (ESP side).
    pub role: PortRole,
    /// IP MTU, where enforced.
    pub mtu: Option<u16>,
}

impl PortInfo {
    /// The port's first address of a family: the source of ICMP errors, ARP and ND.
    pub fn address(&self, v4: bool) -> Option<IpAddr> {
        self.addresses
            .iter()
            .find(|p| p.is_ipv4() == v4)
            .map(|p| p.addr)
    }
}

/// The largest inner packet an outbound SA can carry within `mtu` bytes: ESP's header, IV,
/// trailer (padded to 4 bytes) and ICV, plus the outer IP header in tunnel mode and the
/// UDP header with NAT traversal, must fit.
pub fn max_inner_len(sa: &SaConfig, mtu: u16) -> usize {
    let outer_ip = match sa.mode {
        Mode::Tunnel { local, .. } if local.is_ipv4() => 20,
        Mode::Tunnel { .. } => 40,
        Mode::Transport => 0,
    };
    let udp = if sa.udp_encap.is_some() { 8 } else { 0 };
    if sa.proto == SaProto::Ah {
        return usize::from(mtu).saturating_sub(outer_ip + ah_header_len(sa));
    }
    let fixed = outer_ip + udp + 8 + sa.suite.iv_len() + sa.suite.icv_len();
    let block = sa.suite.block_len();
    (usize::from(mtu).saturating_sub(fixed) / block * block).saturating_sub(2)
}

/// The AH header an AH SA adds. Transport mode may be either family: IPv6's 8-byte
/// alignment is counted.
fn ah_header_len(sa: &SaConfig) -> usize {
    let v4 = matches!(sa.mode, Mode::Tunnel { local, .. } if local.is_ipv4());
    let iv = match sa.suite.integ {
        espgw_crypto::Integrity::AesGmac { .. } => espgw_crypto::ah::GMAC_IV_LEN,
        _ => 0,
    };
    espgw_wire::ah::header_len(iv + sa.suite.integ.icv_len(), v4)
}

/// Everything the data plane reads, built from one configuration and swapped whole (a snapshot: workers pick the new one up between bursts).
// Aligned to two cache lines: in its `Arc` the snapshot then starts a line after the
// reference counts, which change on every reload, so that its first fields (read every
// burst by every worker) do not share their line.
#[repr(align(128))]
pub struct Tables {
    /// Every SA, indexed by the SPD's actions.
    pub sas: Vec<Sa>,
    /// The SA indices of every per-worker set, one set after another
    /// ([`SpdAction::ProtectEach`] names a slice of it).
    pub per_worker_sas: Vec<u32>,
    /// Outbound SPD (plaintext arriving on protected ports).
    pub spd_out: Spd,
    /// Inbound SPD (decrypted and plaintext arriving on unprotected ports).
    pub spd_in: Spd,
    /// Inbound ESP SAs by SPI.
    pub sa_in_by_spi: FxHashMap<u32, u32>,
    /// Inbound AH SAs by SPI.
    pub ah_in_by_spi: FxHashMap<u32, u32>,
    /// Routes by destination.
    pub routes: RouteTable,
    /// Next-hop MAC addresses.
    pub neighbours: Neighbours,
    /// Ports, indexed as in the configuration.
    pub ports: Vec<PortInfo>,
    /// UDP destination ports on which ESP-in-UDP is expected (RFC 3948).
    pub udp_encap_ports: Vec<u16>,
    /// Packets per burst.
    pub burst: usize,
    /// Name of the crypto back-end in use, for reports.
    pub provider_name: String,
    /// Every address of the gateway's own, per family (checked for every packet the
    /// gateway receives, so kept flat).
    pub local_v4: Vec<u128>,
    /// The gateway's own IPv6 addresses (the IPv4 ones are in `local_v4`).
    pub local_v6: Vec<u128>,
}

fn local_addresses(ports: &[PortInfo], v4: bool) -> Vec<u128> {
    ports
        .iter()
        .flat_map(|p| p.addresses.iter())
        .filter(|a| a.is_ipv4() == v4)
        .map(|a| addr_bits(a.addr).0)
        .collect()
}

/// The default next-hop MAC of a port that has no neighbour entry (as ipsec-secgw gives
/// each port a default destination address).
pub fn default_neighbour_mac(port: usize) -> MacAddr {
    [0x02, 0x00, 0x00, 0x00, 0xff, port as u8]
}

fn same_keys(a: &SaConfig, b: &SaConfig) -> bool {
    a.proto == b.proto
        && a.suite == b.suite
        && *a.enc_key == *b.enc_key
        && *a.auth_key == *b.auth_key
        && a.esn == b.esn
}

impl Tables {
    /// Whether `addr` is one of the gateway's own addresses.
    #[inline]
    pub fn is_local(&self, v4: bool, addr: u128) -> bool {
        if v4 {
            self.local_v4.contains(&addr)
        } else {
            self.local_v6.contains(&addr)
        }
    }

    /// Builds tables from `cfg`, making keys with `provider`. State of SAs present in
    /// `previous` with the same direction, SPI and keys is kept.
    pub fn build(
        cfg: &Config,
        provider: &dyn CryptoProvider,
        previous: Option<&Tables>,
    ) -> Result<Tables, ConfigError> {
        cfg.validate()?;
        let mut sad = build_sas(cfg, provider, previous)?;
        let spd = build_spd(cfg, &sad.sas)?;
        let routes = build_routes(cfg);
        let ports = port_infos(cfg);
        set_path_mtus(&mut sad.sas, &routes, &ports, &spd.bundles_out);
        let neighbours = static_neighbours(cfg, ports.len());
        Ok(Tables {
            local_v4: local_addresses(&ports, true),
            local_v6: local_addresses(&ports, false),
            sas: sad.sas,
            per_worker_sas: spd.per_worker_sas,
            spd_out: Spd::new(spd.out_rules),
            spd_in: Spd::new(spd.in_rules),
            sa_in_by_spi: sad.esp_in_by_spi,
            ah_in_by_spi: sad.ah_in_by_spi,
            routes,
            neighbours,
            ports,
            udp_encap_ports: sad.udp_encap_ports,
            burst: cfg.burst,
            provider_name: provider.name(),
        })
    }
}

/// The SAD: every SA with its key and state, and the inbound lookups by SPI.
struct Sad {
    sas: Vec<Sa>,
    esp_in_by_spi: FxHashMap<u32, u32>,
    ah_in_by_spi: FxHashMap<u32, u32>,
    /// UDP destination ports on which ESP-in-UDP is expected (RFC 3948).
    udp_encap_ports: Vec<u16>,
}

fn build_sas(
    cfg: &Config,
    provider: &dyn CryptoProvider,
    previous: Option<&Tables>,
) -> Result<Sad, ConfigError> {
    let mut sad = Sad {
        sas: Vec::with_capacity(cfg.sas.len()),
        esp_in_by_spi: FxHashMap::default(),
        ah_in_by_spi: FxHashMap::default(),
        udp_encap_ports: Vec::new(),
    };
    // The running SAs by direction and SPI: a reload finds each one's state in constant time.
    let mut previous_at: FxHashMap<(Direction, u32), usize> = FxHashMap::default();
    for (i, o) in previous.map_or(&[][..], |p| &p.sas[..]).iter().enumerate() {
        previous_at.entry((o.direction, o.spi)).or_insert(i);
    }
    for sc in &cfg.sas {
        let (key, iv_len) = sa_key(sc, provider)?;
        let state = previous
            .and_then(|p| {
                let i = *previous_at.get(&(sc.direction, sc.spi))?;
                Some(&p.sas[i])
            })
            .and_then(|o| carried_state(o, sc))
            .unwrap_or_else(|| Arc::new(SaState::new(sc.initial_seq, sc.replay_window)));
        if sc.direction == Direction::In {
            let index = sad.sas.len() as u32;
            match sc.proto {
                SaProto::Esp => sad.esp_in_by_spi.insert(sc.spi, index),
                SaProto::Ah => sad.ah_in_by_spi.insert(sc.spi, index),
            };
            if let Some(u) = sc.udp_encap {
                if !sad.udp_encap_ports.contains(&u.dst_port) {
                    sad.udp_encap_ports.push(u.dst_port);
                }
            }
        }
        sad.sas.push(Sa {
            spi: sc.spi,
            direction: sc.direction,
            mode: sc.mode,
            proto: sc.proto,
            iv_len,
            icv_len: sc.suite.icv_len(),
            block_len: sc.suite.block_len(),
            key,
            esn: sc.esn,
            udp: sc.udp_encap,
            ttl: sc.ttl,
            lifetime: sc.lifetime,
            label: sc.label(),
            max_inner: usize::MAX,
            outer: outer_header(sc),
            state,
            key_id: sc.key_id(),
            config: sc.clone(),
        });
    }
    // ESP-in-UDP on the standard port is always recognised inbound.
    if !sad.udp_encap_ports.contains(&espgw_wire::udp::NAT_T_PORT) {
        sad.udp_encap_ports.push(espgw_wire::udp::NAT_T_PORT);
    }
    Ok(sad)
}

/// A tunnel-mode SA's outer header template: its protocol is AH, ESP, or UDP around ESP.
fn outer_header(sc: &SaConfig) -> Option<OuterHeader> {
    let Mode::Tunnel { local, remote } = sc.mode else {
        return None;
    };
    let protocol = match (sc.proto, sc.udp_encap) {
        (SaProto::Ah, _) => espgw_wire::proto::AH,
        (SaProto::Esp, Some(_)) => espgw_wire::proto::UDP,
        (SaProto::Esp, None) => espgw_wire::proto::ESP,
    };
    OuterHeader::new(local, remote, protocol, sc.ttl)
}

/// An SA's key (and IV length), made with `provider`; an error names the SA's `key` field.
fn sa_key(sc: &SaConfig, provider: &dyn CryptoProvider) -> Result<(SaKey, usize), ConfigError> {
    let key_error = |e: espgw_crypto::CryptoError| sc.loc.error("key", e.to_string());
    Ok(match sc.proto {
        SaProto::Esp => (
            SaKey::Esp(
                espgw_crypto::esp_key(provider, sc.suite, &sc.enc_key, &sc.auth_key, sc.esn)
                    .map_err(key_error)?,
            ),
            sc.suite.iv_len(),
        ),
        SaProto::Ah => {
            let k =
                AhKey::with_provider(provider, sc.suite.integ, &sc.auth_key).map_err(key_error)?;
            let iv = k.iv_len();
            (SaKey::Ah(Arc::new(k)), iv)
        }
    })
}

/// The running SA `o`'s state, if `sc` keeps its keys (a reload): sequence numbers and
/// replay window carry over, the window resized if `sc` changes its size.
fn carried_state(o: &Sa, sc: &SaConfig) -> Option<Arc<SaState>> {
    if !same_keys(&o.config, sc) {
        return None;
    }
    if o.config.replay_window != sc.replay_window {
        let mut w = o.state.replay.lock().unwrap_or_else(|e| e.into_inner());
        *w = w.resized(sc.replay_window);
    }
    Some(o.state.clone())
}

/// The SPD's rules by direction, and the outbound bundles (ESP SA, AH SA) for path MTUs.
struct SpdRules {
    out_rules: Vec<SpdRule>,
    in_rules: Vec<SpdRule>,
    bundles_out: Vec<(u32, u32)>,
    per_worker_sas: Vec<u32>,
}

fn build_spd(cfg: &Config, sas: &[Sa]) -> Result<SpdRules, ConfigError> {
    let mut rules = SpdRules {
        out_rules: Vec::new(),
        in_rules: Vec::new(),
        bundles_out: Vec::new(),
        per_worker_sas: Vec::new(),
    };
    // Each policy finds its SA in constant time (30,000 policies would otherwise be a
    // quadratic scan at every load and reload).
    let mut sa_at: FxHashMap<(Direction, u32), u32> = FxHashMap::default();
    for (i, s) in sas.iter().enumerate() {
        sa_at.entry((s.direction, s.spi)).or_insert(i as u32);
    }
    for p in &cfg.policies {
        let index = |spi: u32| {
            sa_at.get(&(p.direction, spi)).copied().ok_or_else(|| {
                p.loc
                    .error("protect", format!("no {} SA 0x{spi:x}", p.direction))
            })
        };
        let action = match p.action {
            Action::Bypass => SpdAction::Bypass,
            Action::Discard => SpdAction::Discard,
            Action::Acquire { reqid } => SpdAction::Acquire(reqid),
            Action::Protect(_) if !p.per_worker_sas.is_empty() => {
                let first = rules.per_worker_sas.len() as u32;
                for &spi in &p.per_worker_sas {
                    rules.per_worker_sas.push(index(spi)?);
                }
                SpdAction::ProtectEach {
                    first,
                    count: p.per_worker_sas.len() as u32,
                }
            }
            Action::Protect(spi) => SpdAction::Protect(index(spi)?),
            Action::Bundle { esp, ah } => {
                let (esp, ah) = (index(esp)?, index(ah)?);
                if p.direction == Direction::Out {
                    rules.bundles_out.push((esp, ah));
                }
                SpdAction::Bundle { esp, ah }
            }
        };
        let rule = SpdRule {
            v4: p.src.is_ipv4(),
            src: addr_bits(p.src.addr).0,
            src_len: p.src.len,
            dst: addr_bits(p.dst.addr).0,
            dst_len: p.dst.len,
            proto: p.proto,
            sport: p.sport,
            dport: p.dport,
            priority: p.priority,
            action,
        };
        match p.direction {
            Direction::Out => rules.out_rules.push(rule),
            Direction::In => rules.in_rules.push(rule),
        }
    }
    Ok(rules)
}

fn build_routes(cfg: &Config) -> RouteTable {
    let mut routes = RouteTable::new();
    for r in &cfg.routes {
        routes.insert(
            r.dst.is_ipv4(),
            addr_bits(r.dst.addr).0,
            r.dst.len,
            RouteTarget {
                port: r.port as u16,
                via: r.via.map(|v| addr_bits(v).0),
            },
        );
    }
    routes
}

fn port_infos(cfg: &Config) -> Vec<PortInfo> {
    cfg.ports
        .iter()
        .enumerate()
        .map(|(i, p)| PortInfo {
            name: p.name.clone(),
            mac: p.mac,
            addresses: p.addresses.clone(),
            role: cfg.port_role(i),
            mtu: p.mtu,
        })
        .collect()
}

/// Path MTU per outbound SA: the MTU of the port its ESP leaves by (tunnel: the route to
/// the remote end; transport: the smallest unprotected port).
fn set_path_mtus(sas: &mut [Sa], routes: &RouteTable, ports: &[PortInfo], bundles: &[(u32, u32)]) {
    for sa in sas.iter_mut().filter(|s| s.direction == Direction::Out) {
        let mtu = match sa.mode {
            Mode::Tunnel { remote, .. } => routes
                .lookup(remote.is_ipv4(), addr_bits(remote).0)
                .and_then(|r| ports.get(usize::from(r.port)))
                .and_then(|p| p.mtu),
            Mode::Transport => ports
                .iter()
                .filter(|p| p.role == PortRole::Unprotected)
                .filter_map(|p| p.mtu)
                .min(),
        };
        if let Some(mtu) = mtu {
            sa.max_inner = max_inner_len(&sa.config, mtu);
        }
    }
    // An ESP SA inside a bundle leaves room for the AH around it (the path MTU is the
    // AH SA's; conservative if the ESP SA also serves a policy on its own).
    for &(esp, ah) in bundles {
        let ah = &sas[ah as usize];
        if ah.max_inner == usize::MAX {
            continue;
        }
        let mtu = u16::try_from(ah.max_inner).unwrap_or(u16::MAX);
        let esp = &mut sas[esp as usize];
        esp.max_inner = esp.max_inner.min(max_inner_len(&esp.config, mtu));
    }
}

/// The configuration's static neighbours, over per-port defaults.
fn static_neighbours(cfg: &Config, ports: usize) -> Neighbours {
    let mut neighbours = Neighbours::new((0..ports).map(default_neighbour_mac).collect());
    for n in &cfg.neighbours {
        match n.ip {
            Some(ip) => neighbours.insert_ip(ip.is_ipv4(), addr_bits(ip).0, n.mac),
            None => neighbours.set_port(n.port, n.mac),
        }
    }
    neighbours
}

#[cfg(test)]
mod tests {
    use super::*;
    use espgw_config::{parse_with, CryptoPolicy, Format, DEFAULT_CONFIG};

    fn build(text: &str, previous: Option<&Tables>) -> Tables {
        let cfg = parse_with(
            text,
            "gw.toml",
            Some(Format::Native),
            CryptoPolicy::default(),
        )
        .expect("config");
        Tables::build(&cfg, &espgw_crypto::aws_lc::AwsLcProvider, previous).expect("tables")
    }

    #[test]
    fn a_reload_that_changes_replay_window_resizes_the_window_and_keeps_its_state() {
        let old = build(DEFAULT_CONFIG, None);
        let inbound = |t: &Tables| {
            t.sas
                .iter()
                .position(|s| s.direction == Direction::In)
                .unwrap()
        };
        let i = inbound(&old);
        assert!(old.sas[i].state.replay.lock().unwrap().check_and_update(5));
        let text = DEFAULT_CONFIG.replacen("replay_window = 1024", "replay_window = 4096", 2);
        let new = build(&text, Some(&old));
        let j = inbound(&new);
        assert!(
            Arc::ptr_eq(&old.sas[i].state, &new.sas[j].state),
            "state carried"
        );
        let w = new.sas[j].state.replay.lock().unwrap();
        assert_eq!((w.size(), w.top()), (4096, 5));
        assert!(!w.check(5), "what was seen stays seen");
    }
}
