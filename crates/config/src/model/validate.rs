//! What a configuration must be: `Config::validate` and the warnings it carries.

use super::*;

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
            SaProto::Esp => s
                .check()
                .map_err(|m| sa.loc.error("algorithm", m.to_string()))?,
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
            .filter(|(_, p)| {
                matches!(
                    p.action,
                    Action::Bypass | Action::Discard | Action::Acquire { .. }
                )
            })
            .collect();
        for (i, p) in self.policies.iter().enumerate() {
            if matches!(
                p.action,
                Action::Bypass | Action::Discard | Action::Acquire { .. }
            ) {
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
                Action::Bypass | Action::Discard | Action::Acquire { .. } => &[],
            };
            if p.per_worker_sas
                .first()
                .is_some_and(|&s| p.action != Action::Protect(s))
            {
                return Err(p.loc.error(
                    "per_worker_sas",
                    "a per-worker set protects with its first SA",
                ));
            }
            let set = p
                .per_worker_sas
                .iter()
                .map(|&spi| (spi, Some(SaProto::Esp)));
            for (spi, proto) in need.iter().copied().chain(set) {
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
                            "SA 0x{spi:x} (line {}) is {}, the policy needs {}",
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
