//! A `[[sa]]` table: its keys and algorithms checked and converted.

use super::*;

/// The key strings the TOML parser made are wiped when the raw SA goes, as soon as its
/// keys are converted (the bytes live on only in `Zeroizing` buffers).
impl Drop for RawSa {
    fn drop(&mut self) {
        for k in [&mut self.key, &mut self.cipher_key, &mut self.integrity_key]
            .into_iter()
            .flatten()
        {
            zeroize::Zeroize::zeroize(k.get_mut());
        }
    }
}

pub(super) fn convert_sa(lines: &Lines<'_>, s: &Spanned<RawSa>) -> Result<SaConfig, ConfigError> {
    let loc = lines.loc(s);
    let s = s.get_ref();
    let dir = direction(lines, &s.direction)?;
    let spi = u32::try_from(*s.spi.get_ref())
        .map_err(|_| lines.err(&s.spi, "spi", "must fit in 32 bits"))?;
    let (proto, suite, enc_key, auth_key) = convert_algorithms(lines, s)?;
    let addr =
        |v: &Option<Spanned<String>>, field: &str| -> Result<std::net::IpAddr, ConfigError> {
            match v {
                Some(a) => parse_addr(a.get_ref()).map_err(|m| lines.err(a, field, m)),
                None => Err(lines.err(
                    &s.mode,
                    field,
                    format!("{} needs {field}", s.mode.get_ref()),
                )),
            }
        };
    let mode = match s.mode.get_ref().as_str() {
        "transport" => Mode::Transport,
        m @ ("ipv4-tunnel" | "ipv6-tunnel") => {
            let (local, remote) = (addr(&s.local, "local")?, addr(&s.remote, "remote")?);
            if local.is_ipv4() != (m == "ipv4-tunnel") || remote.is_ipv4() != local.is_ipv4() {
                return Err(lines.err(
                    &s.mode,
                    "mode",
                    format!(
                        "{m} endpoints must both be {}",
                        if m == "ipv4-tunnel" { "IPv4" } else { "IPv6" }
                    ),
                ));
            }
            Mode::Tunnel { local, remote }
        }
        o => {
            return Err(lines.err(
                &s.mode,
                "mode",
                format!("{} is not ipv4-tunnel, ipv6-tunnel or transport", shown(o)),
            ))
        }
    };
    let replay_window = match &s.replay_window {
        None => DEFAULT_REPLAY_WINDOW,
        Some(v) => u32::try_from(*v.get_ref())
            .ok()
            .filter(|&w| w <= MAX_REPLAY_WINDOW)
            .ok_or_else(|| {
                lines.err(
                    v,
                    "replay_window",
                    format!("must be 0..={MAX_REPLAY_WINDOW}"),
                )
            })?,
    };
    let udp_encap = match s.udp_encap.as_ref().map(|u| u.get_ref()) {
        None | Some(UdpEncapRaw::Flag(false)) => None,
        Some(UdpEncapRaw::Flag(true)) => Some(UdpEncap::default()),
        Some(UdpEncapRaw::Ports { sport, dport }) => Some(UdpEncap {
            src_port: sport.unwrap_or(4500),
            dst_port: dport.unwrap_or(4500),
        }),
    };
    let ttl = match &s.ttl {
        None => DEFAULT_TTL,
        Some(v) => u8::try_from(*v.get_ref())
            .ok()
            .filter(|&t| t > 0)
            .ok_or_else(|| lines.err(v, "ttl", "must be 1..=255"))?,
    };
    let l = s.lifetime.as_ref();
    let lifetime = Lifetime {
        soft_packets: l.and_then(|l| l.soft_packets),
        hard_packets: l.and_then(|l| l.hard_packets),
        soft_bytes: l.and_then(|l| l.soft_bytes),
        hard_bytes: l.and_then(|l| l.hard_bytes),
    };
    Ok(SaConfig {
        spi,
        direction: dir,
        mode,
        proto,
        suite,
        enc_key,
        auth_key,
        esn: s.esn,
        initial_seq: s.initial_seq.unwrap_or(0),
        replay_window,
        udp_encap,
        lifetime,
        ttl,
        name: s.name.clone(),
        loc,
        reqid: None,
    })
}

type Keys = (SaProto, Suite, Zeroizing<Vec<u8>>, Zeroizing<Vec<u8>>);

/// The algorithms of an SA: `aead` + `key` (+ `icv`) for combined-mode algorithms, or
/// `cipher` + `cipher_key` with `integrity` + `integrity_key`; AH takes only the latter.
pub(super) fn convert_algorithms(lines: &Lines<'_>, s: &RawSa) -> Result<Keys, ConfigError> {
    let key_of = |v: &Option<Spanned<String>>, field: &str, at: &Spanned<String>| match v {
        Some(k) => parse_key(k.get_ref()).map_err(|m| lines.err(k, field, m)),
        None => Err(lines.err(at, field, "missing")),
    };
    let proto = match s.protocol.as_ref().map(|p| (p, p.get_ref().as_str())) {
        None | Some((_, "esp")) => SaProto::Esp,
        Some((_, "ah")) => SaProto::Ah,
        Some((p, o)) => {
            return Err(lines.err(p, "protocol", format!("{} is not esp or ah", shown(o))))
        }
    };
    if let Some(a) = &s.aead {
        if proto == SaProto::Ah {
            return Err(lines.err(a, "aead", "AH takes an integrity algorithm, not an AEAD"));
        }
        for (v, f) in [(&s.cipher, "cipher"), (&s.integrity, "integrity")] {
            if let Some(v) = v {
                return Err(lines.err(v, f, "an SA has either aead or cipher/integrity, not both"));
            }
        }
        let mut enc = combined_by_name(a.get_ref()).ok_or_else(|| {
            lines.err(
                a,
                "aead",
                format!("'{}' is not one of: {COMBINED_NAMES}", a.get_ref()),
            )
        })?;
        if let Some(v) = &s.icv {
            let n = match v.get_ref() {
                n @ (8 | 12 | 16) => *n as usize,
                n => {
                    return Err(lines.err(
                        v,
                        "icv",
                        format!("{n} is not an allowed ICV length (8, 12, 16)"),
                    ))
                }
            };
            enc = with_icv(enc, n).map_err(|m| lines.err(v, "icv", m))?;
        }
        let key = key_of(&s.key, "key", a)?;
        check_enc_key(enc, key.len())
            .map_err(|m| lines.err(s.key.as_ref().unwrap_or(a), "key", m))?;
        let suite = Suite {
            enc,
            integ: Integrity::None,
        };
        return Ok((proto, suite, key, Zeroizing::new(Vec::new())));
    }
    if let Some(k) = &s.key {
        return Err(lines.err(
            k,
            "key",
            "key goes with aead; use cipher_key and integrity_key",
        ));
    }
    if let Some(v) = &s.icv {
        return Err(lines.err(v, "icv", "icv goes with aead (GCM, CCM)"));
    }
    let enc = match &s.cipher {
        None => Encryption::Null,
        Some(c) => {
            if proto == SaProto::Ah {
                return Err(lines.err(c, "cipher", "AH does not encrypt"));
            }
            cipher_by_name(c.get_ref()).ok_or_else(|| {
                lines.err(
                    c,
                    "cipher",
                    format!("'{}' is not one of: {CIPHER_NAMES}", c.get_ref()),
                )
            })?
        }
    };
    let integ = match &s.integrity {
        None => Integrity::None,
        Some(i) => integrity_by_name(i.get_ref()).ok_or_else(|| {
            lines.err(
                i,
                "integrity",
                format!("'{}' is not one of: {INTEGRITY_NAMES}", i.get_ref()),
            )
        })?,
    };
    let enc_key = match (&s.cipher, enc) {
        (Some(c), e) if e != Encryption::Null => {
            let k = key_of(&s.cipher_key, "cipher_key", c)?;
            check_enc_key(e, k.len())
                .map_err(|m| lines.err(s.cipher_key.as_ref().unwrap_or(c), "cipher_key", m))?;
            k
        }
        _ => Zeroizing::new(Vec::new()),
    };
    let auth_key = match &s.integrity {
        Some(i) if integ != Integrity::None => {
            let k = key_of(&s.integrity_key, "integrity_key", i)?;
            check_auth_key(integ, k.len()).map_err(|m| {
                lines.err(s.integrity_key.as_ref().unwrap_or(i), "integrity_key", m)
            })?;
            k
        }
        _ => Zeroizing::new(Vec::new()),
    };
    if s.cipher.is_none() && s.integrity.is_none() {
        return Err(lines.err(&s.mode, "aead", "an SA needs aead, or cipher and integrity"));
    }
    Ok((proto, Suite { enc, integ }, enc_key, auth_key))
}
