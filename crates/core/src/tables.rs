//! One immutable snapshot of everything the data plane looks up, built from a
//! configuration. Workers read it through an `Arc`; a reload builds a new one and swaps it
//! in whole. SA state ([`SaState`]) of SAs that did not change is carried over, so
//! sequence numbers and replay windows survive the swap.

use std::sync::Arc;

use rustc_hash::FxHashMap;

use espgw_config::{addr_bits, Action, Config, ConfigError, Direction, SaConfig};
use espgw_crypto::CryptoProvider;
use espgw_wire::ethernet::MacAddr;

use crate::route::{Neighbours, RouteTable};
use crate::sa::{Sa, SaState};
use crate::spd::{Spd, SpdAction, SpdRule};

/// A port as the data plane knows it.
#[derive(Debug, Clone)]
pub struct PortInfo {
    pub name: String,
    pub mac: MacAddr,
}

pub struct Tables {
    pub sas: Vec<Sa>,
    pub spd_out: Spd,
    pub spd_in: Spd,
    /// Inbound SAs by SPI.
    pub sa_in_by_spi: FxHashMap<u32, u32>,
    pub routes: RouteTable,
    pub neighbours: Neighbours,
    pub ports: Vec<PortInfo>,
    /// UDP destination ports on which ESP-in-UDP is expected (RFC 3948).
    pub udp_encap_ports: Vec<u16>,
    pub burst: usize,
    pub provider_name: String,
}

/// The default next-hop MAC of a port that has no neighbour entry (as ipsec-secgw gives
/// each port a default destination address).
pub fn default_neighbour_mac(port: usize) -> MacAddr {
    [0x02, 0x00, 0x00, 0x00, 0xff, port as u8]
}

fn same_keys(a: &SaConfig, b: &SaConfig) -> bool {
    a.aead == b.aead
        && *a.key == *b.key
        && a.salt == b.salt
        && a.icv_len == b.icv_len
        && a.esn == b.esn
}

impl Tables {
    /// Builds tables from `cfg`, making keys with `provider`. State of SAs present in
    /// `previous` with the same direction, SPI and keys is kept.
    pub fn build(
        cfg: &Config,
        provider: &dyn CryptoProvider,
        previous: Option<&Tables>,
    ) -> Result<Tables, ConfigError> {
        cfg.validate()?;
        let mut sas = Vec::with_capacity(cfg.sas.len());
        let mut sa_in_by_spi = FxHashMap::default();
        let mut udp_encap_ports = Vec::new();
        for sc in &cfg.sas {
            let key = provider
                .aead_key(sc.aead, &sc.key, sc.icv_len)
                .map_err(|e| sc.loc.error("key", e.to_string()))?;
            let state = previous
                .and_then(|p| {
                    p.sas.iter().find(|o| {
                        o.direction == sc.direction && o.spi == sc.spi && same_keys(&o.config, sc)
                    })
                })
                .map(|o| o.state.clone())
                .unwrap_or_else(|| Arc::new(SaState::new(sc.initial_seq, sc.replay_window)));
            if sc.direction == Direction::In {
                sa_in_by_spi.insert(sc.spi, sas.len() as u32);
                if let Some(u) = sc.udp_encap {
                    if !udp_encap_ports.contains(&u.dst_port) {
                        udp_encap_ports.push(u.dst_port);
                    }
                }
            }
            sas.push(Sa {
                spi: sc.spi,
                direction: sc.direction,
                mode: sc.mode,
                key,
                salt: sc.salt,
                icv_len: sc.icv_len,
                esn: sc.esn,
                udp: sc.udp_encap,
                ttl: sc.ttl,
                lifetime: sc.lifetime,
                label: sc.label(),
                state,
                config: sc.clone(),
            });
        }
        // ESP-in-UDP on the standard port is always recognised inbound.
        if !udp_encap_ports.contains(&espgw_wire::udp::NAT_T_PORT) {
            udp_encap_ports.push(espgw_wire::udp::NAT_T_PORT);
        }
        let mut out_rules = Vec::new();
        let mut in_rules = Vec::new();
        for p in &cfg.policies {
            let action = match p.action {
                Action::Bypass => SpdAction::Bypass,
                Action::Discard => SpdAction::Discard,
                Action::Protect(spi) => {
                    let i = sas
                        .iter()
                        .position(|s| s.direction == p.direction && s.spi == spi)
                        .ok_or_else(|| {
                            p.loc
                                .error("protect", format!("no {} SA 0x{spi:x}", p.direction))
                        })?;
                    SpdAction::Protect(i as u32)
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
                Direction::Out => out_rules.push(rule),
                Direction::In => in_rules.push(rule),
            }
        }
        let mut routes = RouteTable::new();
        for r in &cfg.routes {
            routes.insert(
                r.dst.is_ipv4(),
                addr_bits(r.dst.addr).0,
                r.dst.len,
                r.port as u16,
            );
        }
        let ports: Vec<PortInfo> = cfg
            .ports
            .iter()
            .map(|p| PortInfo {
                name: p.name.clone(),
                mac: p.mac,
            })
            .collect();
        let mut neighbours = Neighbours::new((0..ports.len()).map(default_neighbour_mac).collect());
        for n in &cfg.neighbours {
            match n.ip {
                Some(ip) => neighbours.insert_ip(ip.is_ipv4(), addr_bits(ip).0, n.mac),
                None => neighbours.set_port(n.port, n.mac),
            }
        }
        Ok(Tables {
            sas,
            spd_out: Spd::new(out_rules),
            spd_in: Spd::new(in_rules),
            sa_in_by_spi,
            routes,
            neighbours,
            ports,
            udp_encap_ports,
            burst: cfg.burst,
            provider_name: provider.name(),
        })
    }
}
