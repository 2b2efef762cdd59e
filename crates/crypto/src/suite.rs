//! The ESP and AH algorithms espgw speaks: what each needs (key, salt, IV, padding, ICV)
//! and what each is called. Everything the data plane needs to lay out a packet comes from
//! here, so the ESP and AH code never names an algorithm.

use std::fmt;

/// The encryption half of an ESP transform, or a combined-mode algorithm that brings its
/// own integrity (AES-GCM, AES-CCM, ChaCha20-Poly1305, AES-GMAC).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Encryption {
    /// RFC 2410: no confidentiality (integrity comes from the integrity algorithm).
    Null,
    /// RFC 3602; `key_len` 16, 24 or 32.
    AesCbc { key_len: usize },
    /// RFC 3686; keying material is the key and a 4-byte nonce.
    AesCtr { key_len: usize },
    /// RFC 2451 3DES-EDE-CBC (legacy).
    TdesCbc,
    /// RFC 4106; keying material is the key and a 4-byte salt.
    AesGcm { key_len: usize, icv_len: usize },
    /// RFC 4309; keying material is the key and a 3-byte salt.
    AesCcm { key_len: usize, icv_len: usize },
    /// RFC 7634; a 32-byte key and a 4-byte salt.
    ChaCha20Poly1305,
    /// RFC 4543 ENCR_NULL_AUTH_AES_GMAC: integrity only; key and a 4-byte salt.
    AesGmac { key_len: usize },
}

/// The integrity algorithm of an ESP transform that is not combined-mode, or of AH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Integrity {
    None,
    /// RFC 2403 (legacy).
    HmacMd5_96,
    /// RFC 2404.
    HmacSha1_96,
    /// RFC 4868.
    HmacSha256_128,
    HmacSha384_192,
    HmacSha512_256,
    /// RFC 3566.
    AesXcbc96,
    /// RFC 4543 AUTH_AES_GMAC, for AH (ESP uses [`Encryption::AesGmac`]); key and salt.
    AesGmac {
        key_len: usize,
    },
}

/// One ESP (or AH) transform: encryption and integrity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Suite {
    pub enc: Encryption,
    pub integ: Integrity,
}

fn aes_ok(key_len: usize) -> bool {
    matches!(key_len, 16 | 24 | 32)
}

impl Encryption {
    /// Combined-mode algorithms authenticate on their own.
    pub fn is_combined(self) -> bool {
        matches!(
            self,
            Encryption::AesGcm { .. }
                | Encryption::AesCcm { .. }
                | Encryption::ChaCha20Poly1305
                | Encryption::AesGmac { .. }
        )
    }

    /// Whether the cipher's nonce is built from the sequence number (the IV is the
    /// sequence number, RFC 3686/4106/4309/4543/7634): under one key a number used twice
    /// repeats a nonce, which gives away the plaintexts' XOR and, for GCM and GMAC, the
    /// authentication key.
    pub fn nonce_from_sequence(self) -> bool {
        matches!(
            self,
            Encryption::AesCtr { .. }
                | Encryption::AesGcm { .. }
                | Encryption::AesCcm { .. }
                | Encryption::ChaCha20Poly1305
                | Encryption::AesGmac { .. }
        )
    }

    /// Bytes of keying material: the key plus any salt or nonce.
    pub fn key_material_len(self) -> usize {
        match self {
            Encryption::Null => 0,
            Encryption::AesCbc { key_len } => key_len,
            Encryption::AesCtr { key_len }
            | Encryption::AesGcm { key_len, .. }
            | Encryption::AesGmac { key_len } => key_len + 4,
            Encryption::AesCcm { key_len, .. } => key_len + 3,
            Encryption::TdesCbc => 24,
            Encryption::ChaCha20Poly1305 => 36,
        }
    }

    /// The explicit IV carried in every packet.
    pub fn iv_len(self) -> usize {
        match self {
            Encryption::Null => 0,
            Encryption::AesCbc { .. } => 16,
            _ => 8,
        }
    }

    /// What the payload and trailer are padded to (at least 4, RFC 4303 §2.4).
    pub fn block_len(self) -> usize {
        match self {
            Encryption::AesCbc { .. } => 16,
            Encryption::TdesCbc => 8,
            _ => 4,
        }
    }

    pub fn name(self) -> String {
        match self {
            Encryption::Null => "null".into(),
            Encryption::AesCbc { key_len } => format!("aes-{}-cbc", key_len * 8),
            Encryption::AesCtr { key_len } => format!("aes-{}-ctr", key_len * 8),
            Encryption::TdesCbc => "3des-cbc".into(),
            Encryption::AesGcm {
                key_len,
                icv_len: 16,
            } => {
                format!("aes-{}-gcm", key_len * 8)
            }
            Encryption::AesGcm { key_len, icv_len } => {
                format!("aes-{}-gcm-{icv_len}", key_len * 8)
            }
            Encryption::AesCcm {
                key_len,
                icv_len: 16,
            } => {
                format!("aes-{}-ccm", key_len * 8)
            }
            Encryption::AesCcm { key_len, icv_len } => {
                format!("aes-{}-ccm-{icv_len}", key_len * 8)
            }
            Encryption::ChaCha20Poly1305 => "chacha20-poly1305".into(),
            Encryption::AesGmac { key_len } => format!("aes-{}-gmac", key_len * 8),
        }
    }

    fn check(self) -> Result<(), SuiteError> {
        let ok = match self {
            Encryption::AesCbc { key_len } | Encryption::AesCtr { key_len } => aes_ok(key_len),
            Encryption::AesGmac { key_len } => aes_ok(key_len),
            Encryption::AesGcm { key_len, icv_len } | Encryption::AesCcm { key_len, icv_len } => {
                aes_ok(key_len) && matches!(icv_len, 8 | 12 | 16)
            }
            Encryption::Null | Encryption::TdesCbc | Encryption::ChaCha20Poly1305 => true,
        };
        if ok {
            Ok(())
        } else {
            Err(SuiteError::BadSize(self))
        }
    }
}

impl Integrity {
    /// Bytes of key (and salt, for GMAC).
    pub fn key_len(self) -> usize {
        match self {
            Integrity::None => 0,
            Integrity::HmacMd5_96 => 16,
            Integrity::HmacSha1_96 => 20,
            Integrity::HmacSha256_128 => 32,
            Integrity::HmacSha384_192 => 48,
            Integrity::HmacSha512_256 => 64,
            Integrity::AesXcbc96 => 16,
            Integrity::AesGmac { key_len } => key_len + 4,
        }
    }

    pub fn icv_len(self) -> usize {
        match self {
            Integrity::None => 0,
            Integrity::HmacMd5_96 | Integrity::HmacSha1_96 | Integrity::AesXcbc96 => 12,
            Integrity::HmacSha256_128 | Integrity::AesGmac { .. } => 16,
            Integrity::HmacSha384_192 => 24,
            Integrity::HmacSha512_256 => 32,
        }
    }

    pub fn name(self) -> String {
        match self {
            Integrity::None => "null".into(),
            Integrity::HmacMd5_96 => "hmac-md5-96".into(),
            Integrity::HmacSha1_96 => "hmac-sha1-96".into(),
            Integrity::HmacSha256_128 => "hmac-sha256-128".into(),
            Integrity::HmacSha384_192 => "hmac-sha384-192".into(),
            Integrity::HmacSha512_256 => "hmac-sha512-256".into(),
            Integrity::AesXcbc96 => "aes-xcbc-mac-96".into(),
            Integrity::AesGmac { key_len } => format!("aes-{}-gmac", key_len * 8),
        }
    }
}

impl Suite {
    /// AES-GCM with a 16-byte ICV, the default.
    pub const fn aes_gcm(key_len: usize) -> Suite {
        Suite {
            enc: Encryption::AesGcm {
                key_len,
                icv_len: 16,
            },
            integ: Integrity::None,
        }
    }

    /// Checks that the combination is one espgw runs: combined-mode algorithms take no
    /// separate integrity; other encryption needs one (RFC 8221 §4: encryption without
    /// integrity MUST NOT be used). NULL/NULL passes here; configuration refuses it
    /// unless asked for explicitly.
    pub fn check(self) -> Result<(), SuiteError> {
        self.enc.check()?;
        if let Integrity::AesGmac { key_len } = self.integ {
            if !aes_ok(key_len) {
                return Err(SuiteError::GmacKeySize);
            }
            return Err(SuiteError::GmacInEsp);
        }
        match (self.enc.is_combined(), self.integ) {
            (true, Integrity::None) => Ok(()),
            (true, integ) => Err(SuiteError::IntegrityNotTaken {
                enc: self.enc,
                integ,
            }),
            (false, Integrity::None) if self.enc != Encryption::Null => {
                Err(SuiteError::IntegrityMissing(self.enc))
            }
            _ => Ok(()),
        }
    }

    /// Integrity check value bytes at the end of every packet.
    pub fn icv_len(self) -> usize {
        match self.enc {
            Encryption::AesGcm { icv_len, .. } | Encryption::AesCcm { icv_len, .. } => icv_len,
            Encryption::ChaCha20Poly1305 | Encryption::AesGmac { .. } => 16,
            _ => self.integ.icv_len(),
        }
    }

    pub fn iv_len(self) -> usize {
        self.enc.iv_len()
    }

    pub fn block_len(self) -> usize {
        self.enc.block_len()
    }

    /// Whether a nonce comes from the sequence number (the cipher's, or AH's AES-GMAC).
    pub fn nonce_from_sequence(self) -> bool {
        self.enc.nonce_from_sequence() || matches!(self.integ, Integrity::AesGmac { .. })
    }

    /// NULL encryption and no integrity: measurement only.
    pub fn is_null_null(self) -> bool {
        self.enc == Encryption::Null && self.integ == Integrity::None
    }

    /// Deprecated by RFC 8221 (3DES-CBC, HMAC-MD5-96): only under an explicit switch.
    pub fn is_legacy(self) -> bool {
        self.enc == Encryption::TdesCbc || self.integ == Integrity::HmacMd5_96
    }

    /// The payload stays readable (NULL encryption, GMAC).
    pub fn is_plaintext(self) -> bool {
        matches!(self.enc, Encryption::Null | Encryption::AesGmac { .. })
    }

    pub fn name(self) -> String {
        if self.enc.is_combined() || self.integ == Integrity::None {
            self.enc.name()
        } else {
            format!("{}+{}", self.enc.name(), self.integ.name())
        }
    }
}

impl fmt::Display for Suite {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.name())
    }
}

/// Every ESP transform espgw implements, for benchmarks and exhaustive tests.
pub fn all_esp_suites() -> Vec<Suite> {
    let mut v = Vec::new();
    let integs = [
        Integrity::HmacSha1_96,
        Integrity::HmacSha256_128,
        Integrity::HmacSha384_192,
        Integrity::HmacSha512_256,
        Integrity::AesXcbc96,
        Integrity::HmacMd5_96,
    ];
    for k in [16, 24, 32] {
        for icv_len in [16, 12, 8] {
            v.push(Suite {
                enc: Encryption::AesGcm {
                    key_len: k,
                    icv_len,
                },
                integ: Integrity::None,
            });
            v.push(Suite {
                enc: Encryption::AesCcm {
                    key_len: k,
                    icv_len,
                },
                integ: Integrity::None,
            });
        }
        v.push(Suite {
            enc: Encryption::AesGmac { key_len: k },
            integ: Integrity::None,
        });
        for integ in integs {
            v.push(Suite {
                enc: Encryption::AesCbc { key_len: k },
                integ,
            });
            v.push(Suite {
                enc: Encryption::AesCtr { key_len: k },
                integ,
            });
        }
    }
    v.push(Suite {
        enc: Encryption::ChaCha20Poly1305,
        integ: Integrity::None,
    });
    for integ in integs {
        v.push(Suite {
            enc: Encryption::Null,
            integ,
        });
        v.push(Suite {
            enc: Encryption::TdesCbc,
            integ,
        });
    }
    v.push(Suite {
        enc: Encryption::Null,
        integ: Integrity::None,
    });
    v
}

/// Why a combination of algorithms is not one espgw runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SuiteError {
    /// A key or ICV size the algorithm does not define.
    BadSize(Encryption),
    /// AES-GMAC with a key that is not 16, 24 or 32 bytes.
    GmacKeySize,
    /// AES-GMAC named as ESP's integrity algorithm (ESP names it as the cipher).
    GmacInEsp,
    /// A combined-mode cipher given a separate integrity algorithm.
    IntegrityNotTaken {
        /// The combined-mode cipher.
        enc: Encryption,
        /// The integrity algorithm it was given.
        integ: Integrity,
    },
    /// A cipher that does not authenticate, without an integrity algorithm (RFC 8221).
    IntegrityMissing(Encryption),
}

impl std::fmt::Display for SuiteError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SuiteError::BadSize(enc) => write!(f, "{enc:?} is not a valid key/ICV size"),
            SuiteError::GmacKeySize => write!(f, "AES-GMAC key must be 16, 24 or 32 bytes"),
            SuiteError::GmacInEsp => {
                write!(f, "AES-GMAC integrity is for AH; ESP names it as the cipher")
            }
            SuiteError::IntegrityNotTaken { enc, integ } => write!(
                f,
                "{} authenticates on its own and takes no integrity algorithm (got {})",
                enc.name(),
                integ.name()
            ),
            SuiteError::IntegrityMissing(enc) => write!(
                f,
                "{} needs an integrity algorithm (encryption without integrity is not allowed, RFC 8221)",
                enc.name()
            ),
        }
    }
}

impl std::error::Error for SuiteError {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_listed_suite_is_valid_and_sizes_are_consistent() {
        for s in all_esp_suites() {
            s.check().unwrap_or_else(|e| panic!("{s}: {e}"));
            assert_eq!(s.block_len() % 4, 0, "{s}");
            if s.enc.is_combined() {
                assert!(matches!(s.icv_len(), 8 | 12 | 16), "{s}");
            }
        }
        let cbc = Encryption::AesCbc { key_len: 16 };
        assert_eq!(
            Suite {
                enc: cbc,
                integ: Integrity::None
            }
            .check(),
            Err(SuiteError::IntegrityMissing(cbc))
        );
        let gcm = Encryption::AesGcm {
            key_len: 16,
            icv_len: 16,
        };
        assert_eq!(
            Suite {
                enc: gcm,
                integ: Integrity::HmacSha1_96
            }
            .check(),
            Err(SuiteError::IntegrityNotTaken {
                enc: gcm,
                integ: Integrity::HmacSha1_96
            })
        );
        let odd = Encryption::AesCbc { key_len: 20 };
        assert_eq!(
            Suite {
                enc: odd,
                integ: Integrity::HmacSha1_96
            }
            .check(),
            Err(SuiteError::BadSize(odd))
        );
        assert_eq!(
            Suite {
                enc: gcm,
                integ: Integrity::AesGmac { key_len: 16 }
            }
            .check(),
            Err(SuiteError::GmacInEsp)
        );
    }
}
