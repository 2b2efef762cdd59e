//! Algorithm names of the three formats, and the key-length checks every format shares
//! (so a wrong key length reads the same whichever format it came from).

use espgw_crypto::{Encryption, Integrity};

fn aes_bits(name: &str, prefix: &str, suffix: &str) -> Option<usize> {
    let bits = name.strip_prefix(prefix)?.strip_suffix(suffix)?;
    match bits {
        "128" => Some(16),
        "192" => Some(24),
        "256" => Some(32),
        _ => None,
    }
}

/// Combined-mode algorithms by name (native `aead`, DPDK `aead_algo`): `aes-128-gcm`,
/// `aes-256-ccm`, `chacha20-poly1305`, `aes-192-gmac`, ...; the ICV is 16 bytes unless
/// set apart. Also accepts a `-8`/`-12`/`-16` ICV suffix (`aes-128-gcm-12`).
pub fn combined_by_name(name: &str) -> Option<Encryption> {
    let (base, icv_len) = match name.rsplit_once('-') {
        Some((b, "8")) => (b, 8),
        Some((b, "12")) => (b, 12),
        Some((b, "16")) => (b, 16),
        _ => (name, 16),
    };
    if base == "chacha20-poly1305" && icv_len == 16 {
        return Some(Encryption::ChaCha20Poly1305);
    }
    if let Some(key_len) = aes_bits(base, "aes-", "-gcm") {
        return Some(Encryption::AesGcm { key_len, icv_len });
    }
    if let Some(key_len) = aes_bits(base, "aes-", "-ccm") {
        return Some(Encryption::AesCcm { key_len, icv_len });
    }
    if let Some(key_len) = aes_bits(base, "aes-", "-gmac") {
        if icv_len == 16 {
            return Some(Encryption::AesGmac { key_len });
        }
    }
    None
}

/// Ciphers of encrypt-then-MAC by name (native `cipher`, DPDK `cipher_algo`).
pub fn cipher_by_name(name: &str) -> Option<Encryption> {
    if name == "null" {
        return Some(Encryption::Null);
    }
    if name == "3des-cbc" || name == "des3-cbc" {
        return Some(Encryption::TdesCbc);
    }
    if let Some(key_len) = aes_bits(name, "aes-", "-cbc") {
        return Some(Encryption::AesCbc { key_len });
    }
    aes_bits(name, "aes-", "-ctr").map(|key_len| Encryption::AesCtr { key_len })
}

/// Integrity algorithms by name: espgw's (`hmac-sha256-128`), DPDK's (`sha256-hmac`) and
/// setkey's (`hmac-sha256`).
pub fn integrity_by_name(name: &str) -> Option<Integrity> {
    Some(match name {
        "null" => Integrity::None,
        "hmac-md5-96" | "md5-hmac" | "hmac-md5" => Integrity::HmacMd5_96,
        "hmac-sha1-96" | "sha1-hmac" | "hmac-sha1" => Integrity::HmacSha1_96,
        "hmac-sha256-128" | "sha256-hmac" | "hmac-sha256" | "hmac-sha2-256" => {
            Integrity::HmacSha256_128
        }
        "hmac-sha384-192" | "sha384-hmac" | "hmac-sha384" | "hmac-sha2-384" => {
            Integrity::HmacSha384_192
        }
        "hmac-sha512-256" | "sha512-hmac" | "hmac-sha512" | "hmac-sha2-512" => {
            Integrity::HmacSha512_256
        }
        "aes-xcbc-mac-96" | "aes-xcbc-mac" | "aes-xcbc" => Integrity::AesXcbc96,
        // AH only (RFC 4543 AUTH_AES_*_GMAC); ESP names GMAC as its cipher.
        "aes-128-gmac" => Integrity::AesGmac { key_len: 16 },
        "aes-192-gmac" => Integrity::AesGmac { key_len: 24 },
        "aes-256-gmac" => Integrity::AesGmac { key_len: 32 },
        _ => return None,
    })
}

/// `enc` with an ICV of `icv_len` bytes: GCM and CCM allow 8, 12 and 16 (RFC 4106, 4309);
/// the other algorithms have a fixed 16-byte ICV.
pub(crate) fn with_icv(enc: Encryption, icv_len: usize) -> Result<Encryption, String> {
    match enc {
        Encryption::AesGcm { key_len, .. } => Ok(Encryption::AesGcm { key_len, icv_len }),
        Encryption::AesCcm { key_len, .. } => Ok(Encryption::AesCcm { key_len, icv_len }),
        e if icv_len == 16 => Ok(e),
        e => Err(format!("{} has a fixed 16-byte ICV", e.name())),
    }
}

pub const COMBINED_NAMES: &str = "aes-128-gcm, aes-192-gcm, aes-256-gcm (optionally -8/-12), aes-128-ccm, aes-192-ccm, aes-256-ccm (optionally -8/-12), chacha20-poly1305, aes-128-gmac, aes-192-gmac, aes-256-gmac";
pub const CIPHER_NAMES: &str =
    "null, aes-128-cbc, aes-192-cbc, aes-256-cbc, aes-128-ctr, aes-192-ctr, aes-256-ctr, 3des-cbc";
pub const INTEGRITY_NAMES: &str = "null, hmac-sha1-96, hmac-sha256-128, hmac-sha384-192, hmac-sha512-256, aes-xcbc-mac-96, hmac-md5-96 (or DPDK's sha1-hmac, sha256-hmac, sha384-hmac, sha512-hmac, aes-xcbc-mac, md5-hmac)";

/// Checks the length of encryption keying material; the message says what is expected.
pub(crate) fn check_enc_key(enc: Encryption, got: usize) -> Result<(), String> {
    let want = enc.key_material_len();
    if got == want {
        return Ok(());
    }
    let what = match enc {
        Encryption::Null => "no key".to_string(),
        Encryption::AesCbc { key_len } => format!("a {key_len}-byte key"),
        Encryption::TdesCbc => "a 24-byte key".to_string(),
        Encryption::AesCtr { key_len } => format!("a {key_len}-byte key and a 4-byte nonce"),
        Encryption::AesGcm { key_len, .. } | Encryption::AesGmac { key_len } => {
            format!("a {key_len}-byte key and a 4-byte salt")
        }
        Encryption::AesCcm { key_len, .. } => format!("a {key_len}-byte key and a 3-byte salt"),
        Encryption::ChaCha20Poly1305 => "a 32-byte key and a 4-byte salt".to_string(),
    };
    Err(format!(
        "{} needs {want} bytes of key material ({what}), got {got}",
        enc.name()
    ))
}

/// Checks the length of an integrity key (RFC 2404, 4868, 3566, 2403 key sizes).
pub(crate) fn check_auth_key(integ: Integrity, got: usize) -> Result<(), String> {
    let want = integ.key_len();
    if got == want {
        Ok(())
    } else {
        Err(format!(
            "{} needs a {want}-byte key, got {got}",
            integ.name()
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_through_the_suite_names() {
        for s in espgw_crypto::suite::all_esp_suites() {
            if s.enc.is_combined() {
                assert_eq!(combined_by_name(&s.enc.name()), Some(s.enc), "{s}");
            } else {
                assert_eq!(cipher_by_name(&s.enc.name()), Some(s.enc), "{s}");
                assert_eq!(integrity_by_name(&s.integ.name()), Some(s.integ), "{s}");
            }
        }
        assert_eq!(combined_by_name("aes-128-gcm-10"), None);
        assert_eq!(cipher_by_name("aes-100-cbc"), None);
        assert!(check_enc_key(Encryption::AesCtr { key_len: 16 }, 16)
            .unwrap_err()
            .contains("4-byte nonce"));
    }
}
