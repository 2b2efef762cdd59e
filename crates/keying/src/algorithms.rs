//! IKEv2 transform IDs (RFC 7296 §3.3.2 and the IANA registry) and espgw's suites.
//!
//! charon hands the SA's negotiated transforms to the plugin as these numbers, the
//! encryption key with its salt or nonce appended (RFC 4106 §8.1, RFC 4309 §7.1, RFC 3686
//! §5.1, RFC 7634 §4: 4 bytes, 3 for CCM), and the integrity key. Every suite espgw
//! implements is listed; anything else is refused by name.

use espgw_crypto::{Encryption, Integrity, Suite};

/// ENCR_3DES.
pub const ENCR_3DES: u16 = 3;
/// ENCR_NULL.
pub const ENCR_NULL: u16 = 11;
/// ENCR_AES_CBC.
pub const ENCR_AES_CBC: u16 = 12;
/// ENCR_AES_CTR.
pub const ENCR_AES_CTR: u16 = 13;
/// ENCR_AES_CCM_8 / 12 / 16.
pub const ENCR_AES_CCM: [u16; 3] = [14, 15, 16];
/// ENCR_AES_GCM_8 / 12 / 16.
pub const ENCR_AES_GCM: [u16; 3] = [18, 19, 20];
/// ENCR_NULL_AUTH_AES_GMAC.
pub const ENCR_NULL_AUTH_AES_GMAC: u16 = 21;
/// ENCR_CHACHA20_POLY1305.
pub const ENCR_CHACHA20_POLY1305: u16 = 28;

/// NONE.
pub const AUTH_NONE: u16 = 0;
/// AUTH_HMAC_MD5_96.
pub const AUTH_HMAC_MD5_96: u16 = 1;
/// AUTH_HMAC_SHA1_96.
pub const AUTH_HMAC_SHA1_96: u16 = 2;
/// AUTH_AES_XCBC_96.
pub const AUTH_AES_XCBC_96: u16 = 5;
/// AUTH_AES_128_GMAC / 192 / 256 (AH).
pub const AUTH_AES_GMAC: [u16; 3] = [9, 10, 11];
/// AUTH_HMAC_SHA2_256_128.
pub const AUTH_HMAC_SHA2_256_128: u16 = 12;
/// AUTH_HMAC_SHA2_384_192.
pub const AUTH_HMAC_SHA2_384_192: u16 = 13;
/// AUTH_HMAC_SHA2_512_256.
pub const AUTH_HMAC_SHA2_512_256: u16 = 14;

/// Why an SA's transforms are not a suite espgw runs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlgorithmError {
    /// An encryption transform espgw does not implement.
    Encryption(u16),
    /// An integrity transform espgw does not implement.
    Integrity(u16),
    /// A key whose length the transform does not take.
    KeyLength {
        /// The transform's name.
        what: &'static str,
        /// Bytes given.
        got: usize,
    },
}

impl std::fmt::Display for AlgorithmError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            AlgorithmError::Encryption(n) => {
                write!(
                    f,
                    "IKEv2 encryption transform {n} is not implemented by espgw"
                )
            }
            AlgorithmError::Integrity(n) => {
                write!(
                    f,
                    "IKEv2 integrity transform {n} is not implemented by espgw"
                )
            }
            AlgorithmError::KeyLength { what, got } => {
                write!(
                    f,
                    "{what}: a key of {got} bytes (with salt) is not one it takes"
                )
            }
        }
    }
}

impl std::error::Error for AlgorithmError {}

/// AES key length from the keying material's length less the salt.
fn aes(total: usize, salt: usize, what: &'static str) -> Result<usize, AlgorithmError> {
    match total.checked_sub(salt) {
        Some(k @ (16 | 24 | 32)) => Ok(k),
        _ => Err(AlgorithmError::KeyLength { what, got: total }),
    }
}

fn icv(n: u16, table: [u16; 3]) -> usize {
    match table.iter().position(|&t| t == n) {
        Some(0) => 8,
        Some(1) => 12,
        _ => 16,
    }
}

/// ESP's encryption transform from its number and keying material length.
pub fn encryption(n: u16, key_len: usize) -> Result<Encryption, AlgorithmError> {
    Ok(match n {
        ENCR_NULL => Encryption::Null,
        ENCR_3DES => Encryption::TdesCbc,
        ENCR_AES_CBC => Encryption::AesCbc {
            key_len: aes(key_len, 0, "AES-CBC")?,
        },
        ENCR_AES_CTR => Encryption::AesCtr {
            key_len: aes(key_len, 4, "AES-CTR")?,
        },
        _ if ENCR_AES_GCM.contains(&n) => Encryption::AesGcm {
            key_len: aes(key_len, 4, "AES-GCM")?,
            icv_len: icv(n, ENCR_AES_GCM),
        },
        _ if ENCR_AES_CCM.contains(&n) => Encryption::AesCcm {
            key_len: aes(key_len, 3, "AES-CCM")?,
            icv_len: icv(n, ENCR_AES_CCM),
        },
        ENCR_NULL_AUTH_AES_GMAC => Encryption::AesGmac {
            key_len: aes(key_len, 4, "AES-GMAC")?,
        },
        ENCR_CHACHA20_POLY1305 if key_len == 36 => Encryption::ChaCha20Poly1305,
        ENCR_CHACHA20_POLY1305 => {
            return Err(AlgorithmError::KeyLength {
                what: "ChaCha20-Poly1305",
                got: key_len,
            })
        }
        other => return Err(AlgorithmError::Encryption(other)),
    })
}

/// An integrity transform from its number (AH's GMAC from its key length with salt).
pub fn integrity(n: u16, key_len: usize) -> Result<Integrity, AlgorithmError> {
    Ok(match n {
        AUTH_NONE => Integrity::None,
        AUTH_HMAC_MD5_96 => Integrity::HmacMd5_96,
        AUTH_HMAC_SHA1_96 => Integrity::HmacSha1_96,
        AUTH_AES_XCBC_96 => Integrity::AesXcbc96,
        AUTH_HMAC_SHA2_256_128 => Integrity::HmacSha256_128,
        AUTH_HMAC_SHA2_384_192 => Integrity::HmacSha384_192,
        AUTH_HMAC_SHA2_512_256 => Integrity::HmacSha512_256,
        _ if AUTH_AES_GMAC.contains(&n) => Integrity::AesGmac {
            key_len: aes(key_len, 4, "AES-GMAC")?,
        },
        other => return Err(AlgorithmError::Integrity(other)),
    })
}

/// An ESP SA's suite.
pub fn esp_suite(
    enc: u16,
    enc_key_len: usize,
    int: u16,
    int_key_len: usize,
) -> Result<Suite, AlgorithmError> {
    let integ = integrity(int, int_key_len)?;
    let enc = encryption(enc, enc_key_len)?;
    if integ.key_len() != int_key_len {
        return Err(AlgorithmError::KeyLength {
            what: "integrity",
            got: int_key_len,
        });
    }
    Ok(Suite { enc, integ })
}

/// An AH SA's suite (NULL encryption, the integrity transform).
pub fn ah_suite(int: u16, int_key_len: usize) -> Result<Suite, AlgorithmError> {
    let integ = integrity(int, int_key_len)?;
    if integ == Integrity::None || integ.key_len() != int_key_len {
        return Err(AlgorithmError::KeyLength {
            what: "AH integrity",
            got: int_key_len,
        });
    }
    Ok(Suite {
        enc: Encryption::Null,
        integ,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What strongSwan's proposal keywords negotiate (the transform IDs and keying
    /// material lengths charon passes), against the suite espgw names for them.
    #[test]
    fn strongswan_proposals_map_to_espgw_suites() {
        let cases: &[(&str, u16, usize, u16, usize, &str)] = &[
            ("aes128gcm16", 20, 20, 0, 0, "aes-128-gcm"),
            ("aes256gcm16", 20, 36, 0, 0, "aes-256-gcm"),
            ("aes128gcm8", 18, 20, 0, 0, "aes-128-gcm-8"),
            ("aes192gcm12", 19, 28, 0, 0, "aes-192-gcm-12"),
            ("aes128ccm16", 16, 19, 0, 0, "aes-128-ccm"),
            ("chacha20poly1305", 28, 36, 0, 0, "chacha20-poly1305"),
            ("aes128gmac", 21, 20, 0, 0, "aes-128-gmac"),
            (
                "aes128-sha256",
                12,
                16,
                12,
                32,
                "aes-128-cbc+hmac-sha256-128",
            ),
            (
                "aes256-sha512",
                12,
                32,
                14,
                64,
                "aes-256-cbc+hmac-sha512-256",
            ),
            ("aes128ctr-sha1", 13, 20, 2, 20, "aes-128-ctr+hmac-sha1-96"),
            (
                "aes128-aesxcbc",
                12,
                16,
                5,
                16,
                "aes-128-cbc+aes-xcbc-mac-96",
            ),
            ("null-sha256", 11, 0, 12, 32, "null+hmac-sha256-128"),
        ];
        for &(name, e, ek, i, ik, want) in cases {
            let s = esp_suite(e, ek, i, ik).unwrap_or_else(|err| panic!("{name}: {err}"));
            s.check().unwrap_or_else(|err| panic!("{name}: {err}"));
            assert_eq!(s.to_string(), want, "{name}");
        }
        assert_eq!(ah_suite(12, 32).unwrap().integ, Integrity::HmacSha256_128);
        assert_eq!(
            ah_suite(9, 20).unwrap().integ,
            Integrity::AesGmac { key_len: 16 }
        );
    }

    #[test]
    fn unknown_transforms_and_wrong_keys_are_refused() {
        assert_eq!(
            esp_suite(23, 16, 12, 32),
            Err(AlgorithmError::Encryption(23))
        );
        assert_eq!(esp_suite(12, 16, 8, 16), Err(AlgorithmError::Integrity(8)));
        assert!(matches!(
            esp_suite(20, 17, 0, 0),
            Err(AlgorithmError::KeyLength { .. })
        ));
        assert!(matches!(
            esp_suite(12, 16, 12, 20),
            Err(AlgorithmError::KeyLength { .. })
        ));
        assert!(ah_suite(0, 0).is_err());
    }
}
