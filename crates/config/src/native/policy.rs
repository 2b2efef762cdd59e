//! A `[[policy]]` table: selectors, protocol and ports, and the SA(s) it protects with.

use super::*;

pub(super) fn convert_policy(
    lines: &Lines<'_>,
    p: &Spanned<RawPolicy>,
    cfg: &Config,
    index: &SaIndex,
) -> Result<PolicyConfig, ConfigError> {
    let loc = lines.loc(p);
    let (src, dst) = policy_selectors(lines, p)?;
    let p = p.get_ref();
    let dir = direction(lines, &p.direction)?;
    let proto = policy_proto(lines, p)?;
    let sport = policy_ports(lines, &p.sport, "sport")?;
    let dport = policy_ports(lines, &p.dport, "dport")?;
    if let (Some(a), false) = (&p.ah_sa, p.action.get_ref() == "protect") {
        return Err(lines.err(a, "ah_sa", "ah_sa goes with action = \"protect\""));
    }
    let (action, per_worker_sas) = match &p.per_worker_sas {
        None => (policy_action(lines, p, dir, cfg, index)?, Vec::new()),
        Some(set) => per_worker_action(lines, p, set, dir, cfg, index)?,
    };
    Ok(PolicyConfig {
        direction: dir,
        priority: p.priority.unwrap_or(0),
        src,
        dst,
        proto,
        sport,
        dport,
        action,
        per_worker_sas,
        loc,
    })
}

/// A policy's `src` and `dst`; one left out is "any" of the other's family.
pub(super) fn policy_selectors(
    lines: &Lines<'_>,
    whole: &Spanned<RawPolicy>,
) -> Result<(Prefix, Prefix), ConfigError> {
    let p = whole.get_ref();
    let pfx = |v: &Option<Spanned<String>>, field: &str| -> Result<Option<Prefix>, ConfigError> {
        v.as_ref()
            .map(|s| parse_prefix(s.get_ref()).map_err(|m| lines.err(s, field, m)))
            .transpose()
    };
    let src = pfx(&p.src, "src")?;
    let dst = pfx(&p.dst, "dst")?;
    let (src, dst) = match (src, dst) {
        (Some(s), Some(d)) => (s, d),
        (Some(s), None) => (
            s,
            if s.is_ipv4() {
                Prefix::any_v4()
            } else {
                Prefix::any_v6()
            },
        ),
        (None, Some(d)) => (
            if d.is_ipv4() {
                Prefix::any_v4()
            } else {
                Prefix::any_v6()
            },
            d,
        ),
        (None, None) => {
            return Err(lines.err(
                whole,
                "dst",
                "a policy needs src or dst (use 0.0.0.0/0 or ::/0 for any)",
            ))
        }
    };
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(lines.err(whole, "dst", "src and dst of different families"));
    }
    Ok((src, dst))
}

pub(super) fn policy_proto(lines: &Lines<'_>, p: &RawPolicy) -> Result<Range<u8>, ConfigError> {
    Ok(match &p.proto {
        None => ANY_PROTO,
        Some(v) => match v.get_ref() {
            StrOrInt::Str(s) if s == "any" => ANY_PROTO,
            StrOrInt::Str(s) => {
                let n = parse_proto_name(s).ok_or_else(|| {
                    lines.err(v, "proto", format!("unknown protocol {}", shown(s)))
                })?;
                Range::new(n, n)
            }
            StrOrInt::Int(n) => {
                let n = u8::try_from(*n).map_err(|_| lines.err(v, "proto", "must be 0..=255"))?;
                Range::new(n, n)
            }
        },
    })
}

/// A port selector: "any", a number, or a range `LO-HI`.
pub(super) fn policy_ports(
    lines: &Lines<'_>,
    v: &Option<Spanned<StrOrInt>>,
    field: &str,
) -> Result<Range<u16>, ConfigError> {
    match v {
        None => Ok(ANY_PORT),
        Some(s) => match s.get_ref() {
            StrOrInt::Str(t) if t == "any" => Ok(ANY_PORT),
            StrOrInt::Str(t) => parse_range_u16(t).map_err(|m| lines.err(s, field, m)),
            StrOrInt::Int(n) => {
                let n = u16::try_from(*n).map_err(|_| lines.err(s, field, "must be 0..=65535"))?;
                Ok(Range::new(n, n))
            }
        },
    }
}

/// Finds a policy's SA by name or SPI, among the SAs of its direction.
fn find_sa<'c>(
    lines: &Lines<'_>,
    v: &Spanned<StrOrInt>,
    field: &str,
    dir: Direction,
    cfg: &'c Config,
    index: &SaIndex,
) -> Result<&'c SaConfig, ConfigError> {
    let at = match v.get_ref() {
        StrOrInt::Str(name) => index.by_name.get(&(dir, name.clone())),
        StrOrInt::Int(spi) => u32::try_from(*spi)
            .ok()
            .and_then(|spi| index.by_spi.get(&(dir, spi))),
    };
    at.map(|&i| &cfg.sas[i])
        .ok_or_else(|| lines.err(v, field, format!("no {dir} SA with that name or SPI")))
}

/// A `protect` policy with `per_worker_sas = [...]` in place of `sa`: two or more ESP SAs
/// of the policy's direction, each named once, all between the same endpoints in the same
/// mode (a worker's choice of SA must not change where or how the packet goes).
fn per_worker_action(
    lines: &Lines<'_>,
    p: &RawPolicy,
    set: &Spanned<Vec<Spanned<StrOrInt>>>,
    dir: Direction,
    cfg: &Config,
    index: &SaIndex,
) -> Result<(Action, Vec<u32>), ConfigError> {
    const FIELD: &str = "per_worker_sas";
    if p.action.get_ref() != "protect" {
        return Err(lines.err(set, FIELD, "per_worker_sas goes with action = \"protect\""));
    }
    if let Some(other) = p.sa.as_ref().or(p.ah_sa.as_ref()) {
        return Err(lines.err(
            other,
            FIELD,
            "give per_worker_sas or sa (and ah_sa), not both",
        ));
    }
    if !(2..=MAX_WORKERS).contains(&set.get_ref().len()) {
        return Err(lines.err(
            set,
            FIELD,
            format!("needs 2 to {MAX_WORKERS} SAs (one SA is `sa = ...`)"),
        ));
    }
    let mut spis: Vec<u32> = Vec::with_capacity(set.get_ref().len());
    let mut first: Option<&SaConfig> = None;
    for v in set.get_ref() {
        let sa = find_sa(lines, v, FIELD, dir, cfg, index)?;
        if sa.proto != SaProto::Esp {
            return Err(lines.err(v, FIELD, "per-worker SAs are ESP SAs"));
        }
        if spis.contains(&sa.spi) {
            return Err(lines.err(v, FIELD, format!("SA 0x{:x} is listed twice", sa.spi)));
        }
        match first {
            None => first = Some(sa),
            Some(f) if f.mode != sa.mode || f.udp_encap != sa.udp_encap => {
                return Err(lines.err(
                    v,
                    FIELD,
                    format!(
                        "SA 0x{:x} differs from 0x{:x} in mode, tunnel endpoints or UDP \
                         encapsulation",
                        sa.spi, f.spi
                    ),
                ));
            }
            Some(_) => {}
        }
        spis.push(sa.spi);
    }
    Ok((Action::Protect(spis[0]), spis))
}

/// What a policy does; `protect` finds its SA (and a bundle's AH SA) by name or SPI.
pub(super) fn policy_action(
    lines: &Lines<'_>,
    p: &RawPolicy,
    dir: Direction,
    cfg: &Config,
    index: &SaIndex,
) -> Result<Action, ConfigError> {
    Ok(match p.action.get_ref().as_str() {
        "protect" => {
            let sa =
                p.sa.as_ref()
                    .ok_or_else(|| lines.err(&p.action, "sa", "protect needs sa = NAME or SPI"))?;
            let find =
                |v: &Spanned<StrOrInt>, field: &str| find_sa(lines, v, field, dir, cfg, index);
            let found = find(sa, "sa")?;
            match &p.ah_sa {
                None => Action::Protect(found.spi),
                Some(a) => {
                    let ah = find(a, "ah_sa")?;
                    if found.proto != SaProto::Esp || ah.proto != SaProto::Ah {
                        return Err(lines.err(
                            a,
                            "ah_sa",
                            "a bundle is an ESP SA (sa) inside an AH SA (ah_sa)",
                        ));
                    }
                    Action::Bundle {
                        esp: found.spi,
                        ah: ah.spi,
                    }
                }
            }
        }
        "bypass" => Action::Bypass,
        "discard" => Action::Discard,
        o => {
            return Err(lines.err(
                &p.action,
                "action",
                format!("{} is not protect, bypass or discard", shown(o)),
            ))
        }
    })
}
