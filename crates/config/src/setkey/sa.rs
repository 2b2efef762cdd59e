//! An `add` statement: an SA with its algorithms and keys, as setkey(8) writes it.

use super::*;

pub(super) fn key_bytes(s: &str) -> Result<Zeroizing<Vec<u8>>, String> {
    if let Some(q) = s.strip_prefix('"').and_then(|q| q.strip_suffix('"')) {
        return Ok(Zeroizing::new(q.as_bytes().to_vec()));
    }
    if !(s.starts_with("0x") || s.starts_with("0X")) {
        return Err(format!(
            "{} is neither a 0x-hex nor a \"quoted\" key",
            shown(s)
        ));
    }
    parse_key(s)
}

pub(super) fn parse_add(s: &mut Stmt<'_>, loc: Location) -> Result<PendingSa, ConfigError> {
    skip_family_flags(s);
    let (src, sport) = addr_with_port(s.next("src")?).map_err(|m| s.err_prev("src", m))?;
    let (dst, dport) = addr_with_port(s.next("dst")?).map_err(|m| s.err_prev("dst", m))?;
    if src.is_ipv4() != dst.is_ipv4() {
        return Err(s.err_prev("dst", "source and destination of different families"));
    }
    let (proto, udp) = match s.next("protocol")? {
        "esp" => (SaProto::Esp, None),
        "esp-udp" => (
            SaProto::Esp,
            Some(UdpEncap {
                src_port: sport.unwrap_or(4500),
                dst_port: dport.unwrap_or(4500),
            }),
        ),
        "ah" => (SaProto::Ah, None),
        "ah-old" | "esp-old" | "ipcomp" | "tcp" => {
            return Err(s.err_prev("protocol", "only esp, esp-udp and ah are supported"))
        }
        o => return Err(s.err_prev("protocol", format!("unknown protocol {}", shown(o)))),
    };
    let spi = parse_u32(s.next("spi")?).map_err(|m| s.err_prev("spi", m))?;
    let mut replay_window = DEFAULT_REPLAY_WINDOW;
    let mut lifetime = Lifetime::default();
    let mut enc: Option<(Encryption, Zeroizing<Vec<u8>>)> = None;
    let mut integ: Option<(Integrity, Zeroizing<Vec<u8>>)> = None;
    while let Some(opt) = s.peek() {
        s.i += 1;
        match opt {
            "-m" => {
                let m = s.next("-m")?;
                if !matches!(m, "transport" | "tunnel" | "any") {
                    return Err(s.err_prev(
                        "-m",
                        format!("{} is not transport, tunnel or any", shown(m)),
                    ));
                }
            }
            "-r" => replay_window = parse_u32(s.next("-r")?).map_err(|m| s.err_prev("-r", m))?,
            "-u" | "-f" | "-lh" | "-ls" => {
                s.next(opt)?;
            }
            "-bh" => {
                lifetime.hard_bytes = Some(parse_u64(s.next(opt)?).map_err(|m| s.err_prev(opt, m))?)
            }
            "-bs" => {
                lifetime.soft_bytes = Some(parse_u64(s.next(opt)?).map_err(|m| s.err_prev(opt, m))?)
            }
            "-E" => {
                if proto == SaProto::Ah {
                    return Err(s.err_prev("-E", "AH does not encrypt: use -A"));
                }
                let name = s.next("-E")?;
                let material = key_bytes(s.next("-E key")?).map_err(|m| s.err_prev("-E key", m))?;
                let e =
                    setkey_encryption(name, material.len()).map_err(|(f, m)| s.err_prev(f, m))?;
                check_enc_key(e, material.len()).map_err(|m| s.err_prev("-E key", m))?;
                enc = Some((e, material));
            }
            "-A" => {
                let name = s.next("-A")?;
                let i = integrity_by_name(name).filter(|i| *i != Integrity::None).ok_or_else(|| {
                    s.err_prev("-A", format!("authentication algorithm {} is not supported (hmac-md5, hmac-sha1, hmac-sha256, hmac-sha384, hmac-sha512, aes-xcbc-mac)", shown(name)))
                })?;
                let key = key_bytes(s.next("-A key")?).map_err(|m| s.err_prev("-A key", m))?;
                check_auth_key(i, key.len()).map_err(|m| s.err_prev("-A key", m))?;
                integ = Some((i, key));
            }
            "-C" => return Err(s.err_prev("-C", "IPComp is not supported")),
            o => return Err(s.err_prev("add", format!("unknown option {}", shown(o)))),
        }
    }
    let (e, enc_key) = match (enc, proto) {
        (Some(e), _) => e,
        (None, SaProto::Ah) => (Encryption::Null, Zeroizing::new(Vec::new())),
        (None, SaProto::Esp) => return Err(loc.error("-E", "missing encryption algorithm")),
    };
    let (i, auth_key) = match integ {
        Some(i) => i,
        None if proto == SaProto::Ah => {
            return Err(loc.error("-A", "AH needs an authentication algorithm"))
        }
        None => (Integrity::None, Zeroizing::new(Vec::new())),
    };
    Ok(PendingSa {
        src,
        dst,
        spi,
        proto,
        suite: Suite { enc: e, integ: i },
        enc_key,
        auth_key,
        udp,
        replay_window,
        lifetime,
        loc,
        used: None,
    })
}

/// setkey's `-E` names; the key length chooses the AES size (key material includes the
/// salt or nonce where the algorithm has one).
/// Errors name the field: `-E` for the algorithm, `-E key` for its key.
pub(super) fn setkey_encryption(
    name: &str,
    material: usize,
) -> Result<Encryption, (&'static str, String)> {
    let aes = |extra: usize| -> Result<usize, (&'static str, String)> {
        let k = material.saturating_sub(extra);
        if matches!(k, 16 | 24 | 32) && material >= extra {
            Ok(k)
        } else if extra == 0 {
            Err((
                "-E key",
                format!("{name} needs a 16-, 24- or 32-byte key, got {material}"),
            ))
        } else {
            Err(("-E key", format!(
                "{name} needs {}, {} or {} bytes of key material (a 16-, 24- or 32-byte key and a {extra}-byte salt/nonce), got {material}",
                16 + extra,
                24 + extra,
                32 + extra
            )))
        }
    };
    let icv = |n: &str| -> usize {
        n.rsplit('-')
            .next()
            .and_then(|v| v.parse().ok())
            .unwrap_or(16)
    };
    Ok(match name {
        "null" => Encryption::Null,
        "3des-cbc" | "des3_ede" => Encryption::TdesCbc,
        "aes-cbc" | "rijndael-cbc" | "aes" => Encryption::AesCbc { key_len: aes(0)? },
        "aes-ctr" | "rfc3686(ctr(aes))" => Encryption::AesCtr { key_len: aes(4)? },
        "aes-gcm-16" | "aes-gcm" | "rfc4106(gcm(aes))" | "aes-gcm-12" | "aes-gcm-8" => Encryption::AesGcm {
            key_len: aes(4)?,
            icv_len: icv(name),
        },
        "aes-ccm-16" | "aes-ccm" | "rfc4309(ccm(aes))" | "aes-ccm-12" | "aes-ccm-8" => Encryption::AesCcm {
            key_len: aes(3)?,
            icv_len: icv(name),
        },
        "chacha20-poly1305" | "rfc7539esp(chacha20,poly1305)" => Encryption::ChaCha20Poly1305,
        "null_aes_gmac" | "aes-gmac" | "rfc4543(gcm(aes))" => Encryption::AesGmac { key_len: aes(4)? },
        "des-cbc" | "blowfish-cbc" | "cast128-cbc" | "twofish-cbc" | "camellia-cbc" => {
            return Err(("-E", format!("encryption algorithm {} is not supported (single DES and the rest are broken or rare): use aes-gcm-16, aes-cbc, aes-ctr, aes-ccm-16, chacha20-poly1305 or, under the legacy switch, 3des-cbc", shown(name))))
        }
        o => return Err(("-E", format!("encryption algorithm {} is not supported (null, 3des-cbc, aes-cbc, aes-ctr, aes-gcm-16/12/8, aes-ccm-16/12/8, chacha20-poly1305, null_aes_gmac)", shown(o)))),
    })
}
