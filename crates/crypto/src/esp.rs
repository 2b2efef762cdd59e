//! ESP transforms: everything between "the packet's text is in place" and "the ICV is
//! written / checked", for every algorithm of [`Suite`].
//!
//! A transform sees each packet as `[SPI][sequence number][IV][text][ICV]` (an [`EspOp`]),
//! the whole ESP packet without outer headers, and its full 64-bit sequence number (the
//! high half goes into the ICV or AAD with ESN, RFC 4303 §2.2.1). Sealing writes the IV
//! (the sequence number for counter-based modes, CSPRNG output for CBC), encrypts and
//! writes the ICV; opening verifies the ICV first (encrypt-then-MAC: in constant time,
//! before any decryption) and decrypts only what is authentic. The data plane never names
//! an algorithm: it asks the transform's [`Suite`] for IV, padding and ICV sizes.

use std::cell::RefCell;
use std::sync::Arc;

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use rand::RngCore;

use crate::aes_ccm::CcmLanes;
use crate::cipher::EspCipher;
use crate::integrity::MacKey;
use crate::suite::{Encryption, Integrity, Suite};
use crate::{AeadAlgorithm, AeadKey, AeadOp, CryptoError, CryptoProvider};

/// The ESP header: SPI and sequence number.
pub const ESP_HEADER_LEN: usize = 8;

/// One packet: `esp` is `[SPI][seq][IV][text][ICV]`; `seq` the full sequence number.
pub struct EspOp<'a> {
    pub esp: &'a mut [u8],
    pub seq: u64,
}

/// A prepared transform for one SA (keys expanded once). Implementations zeroize their
/// key material on drop.
pub trait EspKey: Send + Sync {
    fn suite(&self) -> Suite;
    /// Writes the IV, encrypts the text and writes the ICV of every op. The text must be
    /// padded to the suite's block length. Ops too short to hold header, IV and ICV are
    /// left alone.
    fn seal_burst(&self, ops: &mut [EspOp<'_>]);
    /// Seals as [`EspKey::seal_burst`] does, but a CBC suite takes op `i`'s IV from
    /// `cbc_ivs[i]` (its first 8 bytes for 3DES) instead of the CSPRNG; other suites'
    /// IVs are the sequence number either way. For tests that compare back-ends byte
    /// for byte: the data plane never calls it. With fewer IVs than ops it draws fresh
    /// ones.
    fn seal_burst_ivs(&self, ops: &mut [EspOp<'_>], cbc_ivs: &[[u8; 16]]);
    /// Authenticates and decrypts every op; `ok[i]` tells whether op `i` was authentic.
    /// The text of an op that failed is zeroed: unauthenticated plaintext never leaves.
    fn open_burst(&self, ops: &mut [EspOp<'_>], ok: &mut [bool]);
}

/// Builds the transform for `suite` from its encryption keying material (key and salt or
/// nonce) and integrity key. `esn` puts the high sequence bits into ICV or AAD.
pub fn esp_key(
    provider: &dyn CryptoProvider,
    suite: Suite,
    enc_key: &[u8],
    auth_key: &[u8],
    esn: bool,
) -> Result<Arc<dyn EspKey>, CryptoError> {
    suite.check().map_err(CryptoError::Suite)?;
    let material = |want: usize, got: &[u8]| {
        if got.len() == want {
            Ok(())
        } else {
            Err(CryptoError::BadKeyLength {
                expected: want,
                got: got.len(),
            })
        }
    };
    material(suite.enc.key_material_len(), enc_key)?;
    material(suite.integ.key_len(), auth_key)?;
    if !matches!(suite.enc, Encryption::AesGcm { .. }) {
        if let Some(key) = provider.multi_buffer_esp_key(suite, enc_key, auth_key, esn) {
            return key;
        }
    }
    let salt4 = |key_len: usize| {
        let mut s = [0u8; 4];
        s.copy_from_slice(&enc_key[key_len..key_len + 4]);
        s
    };
    Ok(match suite.enc {
        Encryption::AesGcm { key_len, icv_len } => {
            let alg = AeadAlgorithm::from_key_len(key_len).ok_or(CryptoError::BadKeyLength {
                expected: 16,
                got: key_len,
            })?;
            Arc::new(AeadEsp {
                key: provider.aead_key(alg, &enc_key[..key_len], icv_len)?,
                salt: salt4(key_len),
                suite,
                esn,
            })
        }
        Encryption::ChaCha20Poly1305 => Arc::new(PerPacket(LcAead {
            key: lc_key(&aead::CHACHA20_POLY1305, &enc_key[..32])?,
            salt: salt4(32),
            suite,
            esn,
            gmac: false,
        })),
        Encryption::AesGmac { key_len } => Arc::new(PerPacket(LcAead {
            key: lc_key(gcm_alg(key_len), &enc_key[..key_len])?,
            salt: salt4(key_len),
            suite,
            esn,
            gmac: true,
        })),
        Encryption::AesCcm { key_len, icv_len } => {
            let mut salt = [0u8; 3];
            salt.copy_from_slice(&enc_key[key_len..]);
            Arc::new(CcmLanes::new(
                &enc_key[..key_len],
                salt,
                icv_len,
                suite,
                esn,
            )?)
        }
        Encryption::Null
        | Encryption::AesCbc { .. }
        | Encryption::AesCtr { .. }
        | Encryption::TdesCbc => Arc::new(PerPacket(EncryptThenMac {
            cipher: EspCipher::new(suite.enc, enc_key)?,
            mac: match suite.integ {
                Integrity::None => None,
                i => Some(MacKey::new(i, auth_key)?),
            },
            suite,
            esn,
        })),
    })
}

fn lc_key(alg: &'static aead::Algorithm, key: &[u8]) -> Result<LessSafeKey, CryptoError> {
    UnboundKey::new(alg, key)
        .map(LessSafeKey::new)
        .map_err(|e| CryptoError::Backend(e.to_string()))
}

fn gcm_alg(key_len: usize) -> &'static aead::Algorithm {
    match key_len {
        16 => &aead::AES_128_GCM,
        24 => &aead::AES_192_GCM,
        _ => &aead::AES_256_GCM,
    }
}

/// The AAD of RFC 4106 §5 (also RFC 4309, RFC 7634): SPI || seq, or with ESN
/// SPI || seq high || seq low. Returns the bytes and their length.
pub(crate) fn aead_aad(esp: &[u8], seq: u64, esn: bool) -> ([u8; 12], usize) {
    let mut aad = [0u8; 12];
    aad[..4].copy_from_slice(&esp[..4]);
    if esn {
        // The low half as on the wire, the high half as the receiver inferred it.
        aad[4..8].copy_from_slice(&((seq >> 32) as u32).to_be_bytes());
        aad[8..].copy_from_slice(&esp[4..8]);
        (aad, 12)
    } else {
        aad[4..8].copy_from_slice(&esp[4..8]);
        (aad, 8)
    }
}

/// A transform that handles one packet at a time; bursts are a loop.
trait PacketTransform: Send + Sync {
    fn suite(&self) -> Suite;
    /// `cbc_iv`: the IV a CBC suite uses instead of a fresh one (tests only).
    fn seal(&self, esp: &mut [u8], seq: u64, cbc_iv: Option<&[u8; 16]>) -> bool;
    fn open(&self, esp: &mut [u8], seq: u64) -> bool;
}

struct PerPacket<T>(T);

impl<T: PacketTransform> EspKey for PerPacket<T> {
    fn suite(&self) -> Suite {
        self.0.suite()
    }

    fn seal_burst(&self, ops: &mut [EspOp<'_>]) {
        self.seal_burst_ivs(ops, &[]);
    }

    fn seal_burst_ivs(&self, ops: &mut [EspOp<'_>], cbc_ivs: &[[u8; 16]]) {
        let s = self.0.suite();
        let min = ESP_HEADER_LEN + s.iv_len() + s.icv_len();
        let given = cbc_ivs.len() >= ops.len();
        for (i, op) in ops.iter_mut().enumerate() {
            let iv = if given { cbc_ivs.get(i) } else { None };
            // A seal that fails (lengths the layout never produces) must not leave
            // plaintext behind a zero ICV: the text is wiped, and the peer drops the packet.
            if op.esp.len() >= min && !self.0.seal(op.esp, op.seq, iv) {
                op.esp[ESP_HEADER_LEN + s.iv_len()..].fill(0);
            }
        }
    }

    fn open_burst(&self, ops: &mut [EspOp<'_>], ok: &mut [bool]) {
        let s = self.0.suite();
        let min = ESP_HEADER_LEN + s.iv_len() + s.icv_len();
        for (op, ok) in ops.iter_mut().zip(ok.iter_mut()) {
            *ok = op.esp.len() >= min && self.0.open(op.esp, op.seq);
            if !*ok {
                let text_start = (ESP_HEADER_LEN + s.iv_len()).min(op.esp.len());
                op.esp[text_start..].fill(0);
            }
        }
    }
}

/// AES-GCM through the provider's burst interface (intel-ipsec-mb where available).
struct AeadEsp {
    key: Arc<dyn AeadKey>,
    salt: [u8; 4],
    suite: Suite,
    esn: bool,
}

impl EspKey for AeadEsp {
    fn suite(&self) -> Suite {
        self.suite
    }

    fn seal_burst(&self, ops: &mut [EspOp<'_>]) {
        self.key.seal_esp(&self.salt, self.esn, ops);
    }

    fn seal_burst_ivs(&self, ops: &mut [EspOp<'_>], _: &[[u8; 16]]) {
        self.seal_burst(ops);
    }

    fn open_burst(&self, ops: &mut [EspOp<'_>], ok: &mut [bool]) {
        self.key.open_esp(&self.salt, self.esn, ops, ok);
    }
}

/// The smallest ESP packet an AEAD key of ICV length `icv` can seal or open: header (8),
/// IV (8) and ICV.
pub(crate) fn aead_esp_min(icv: usize) -> usize {
    ESP_HEADER_LEN + 8 + icv
}

/// The AEAD op of one ESP packet of at least [`aead_esp_min`] bytes: nonce salt || IV
/// (RFC 4106 §4), AAD per §5, and the text with its ICV.
fn aead_esp_op<'a>(salt: &[u8; 4], esn: bool, esp: &'a mut [u8], seq: u64) -> AeadOp<'a> {
    let mut nonce = [0u8; 12];
    nonce[..4].copy_from_slice(salt);
    nonce[4..].copy_from_slice(&esp[8..16]);
    let (aad, aad_len) = aead_aad(esp, seq, esn);
    AeadOp {
        nonce,
        aad,
        aad_len: aad_len as u8,
        buf: &mut esp[16..],
    }
}

/// [`AeadKey::seal_esp`] through the key's [`AeadKey::seal_burst`].
pub(crate) fn seal_esp_with_aead_ops<K: AeadKey + ?Sized>(
    key: &K,
    salt: &[u8; 4],
    esn: bool,
    ops: &mut [EspOp<'_>],
) {
    let min = aead_esp_min(key.icv_len());
    let mut aead_ops: Vec<AeadOp<'_>> = Vec::with_capacity(ops.len());
    for op in ops.iter_mut() {
        if op.esp.len() >= min {
            // RFC 4106 §3.1: the IV must be unique per key; the sequence number is.
            op.esp[8..16].copy_from_slice(&op.seq.to_be_bytes());
            aead_ops.push(aead_esp_op(salt, esn, op.esp, op.seq));
        }
    }
    key.seal_burst(&mut aead_ops);
}

/// [`AeadKey::open_esp`] through the key's [`AeadKey::open_burst`].
pub(crate) fn open_esp_with_aead_ops<K: AeadKey + ?Sized>(
    key: &K,
    salt: &[u8; 4],
    esn: bool,
    ops: &mut [EspOp<'_>],
    ok: &mut [bool],
) {
    let min = aead_esp_min(key.icv_len());
    // One AEAD op per ESP op, so `ok` maps straight through: a packet too short for
    // header, IV and ICV becomes an empty op, which the key reports as not authentic.
    let mut aead_ops: Vec<AeadOp<'_>> = ops
        .iter_mut()
        .map(|op| {
            if op.esp.len() >= min {
                aead_esp_op(salt, esn, op.esp, op.seq)
            } else {
                op.esp.fill(0);
                AeadOp {
                    nonce: [0; 12],
                    aad: [0; 12],
                    aad_len: 0,
                    buf: &mut [],
                }
            }
        })
        .collect();
    key.open_burst(&mut aead_ops, ok);
}

/// ChaCha20-Poly1305 (RFC 7634) or AES-GMAC (RFC 4543) through aws-lc-rs.
struct LcAead {
    key: LessSafeKey,
    salt: [u8; 4],
    suite: Suite,
    esn: bool,
    /// AES-GMAC: nothing is encrypted; SPI, sequence number, IV and the whole payload are
    /// the AAD (RFC 4543 §3.2, §5).
    gmac: bool,
}

thread_local! {
    /// GMAC with ESN: the AAD has the high sequence bits in its middle, so it is copied
    /// here (reused, so no call allocates once it has grown).
    static GMAC_AAD: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl LcAead {
    fn nonce(&self, esp: &[u8]) -> Nonce {
        let mut n = [0u8; 12];
        n[..4].copy_from_slice(&self.salt);
        n[4..].copy_from_slice(&esp[8..16]);
        Nonce::assume_unique_for_key(n)
    }

    /// Runs `f` with the GMAC AAD of `covered` (`[SPI][seq][IV][payload]`).
    fn with_gmac_aad<R>(&self, covered: &[u8], seq: u64, f: impl FnOnce(&[u8]) -> R) -> R {
        if !self.esn {
            return f(covered);
        }
        GMAC_AAD.with(|cell| {
            let mut v = cell.borrow_mut();
            v.clear();
            v.extend_from_slice(&covered[..4]);
            v.extend_from_slice(&((seq >> 32) as u32).to_be_bytes());
            v.extend_from_slice(&covered[4..]);
            f(&v)
        })
    }
}

impl PacketTransform for LcAead {
    fn suite(&self) -> Suite {
        self.suite
    }

    fn seal(&self, esp: &mut [u8], seq: u64, _: Option<&[u8; 16]>) -> bool {
        esp[8..16].copy_from_slice(&seq.to_be_bytes());
        let nonce = self.nonce(esp);
        let text_end = esp.len() - 16;
        if self.gmac {
            let (covered, icv) = esp.split_at_mut(text_end);
            let tag = self.with_gmac_aad(covered, seq, |aad| {
                self.key
                    .seal_in_place_separate_tag(nonce, Aad::from(aad), &mut [])
            });
            return match tag {
                Ok(t) => {
                    icv.copy_from_slice(t.as_ref());
                    true
                }
                Err(_) => false,
            };
        }
        let (aad, aad_len) = aead_aad(esp, seq, self.esn);
        let (text, icv) = esp[16..].split_at_mut(text_end - 16);
        match self
            .key
            .seal_in_place_separate_tag(nonce, Aad::from(&aad[..aad_len]), text)
        {
            Ok(t) => {
                icv.copy_from_slice(t.as_ref());
                true
            }
            Err(_) => false,
        }
    }

    fn open(&self, esp: &mut [u8], seq: u64) -> bool {
        let nonce = self.nonce(esp);
        if self.gmac {
            let text_end = esp.len() - 16;
            let (covered, icv) = esp.split_at_mut(text_end);
            let mut tag = [0u8; 16];
            tag.copy_from_slice(icv);
            return self.with_gmac_aad(covered, seq, |aad| {
                self.key
                    .open_in_place(nonce, Aad::from(aad), &mut tag)
                    .is_ok()
            });
        }
        let (aad, aad_len) = aead_aad(esp, seq, self.esn);
        self.key
            .open_in_place(nonce, Aad::from(&aad[..aad_len]), &mut esp[16..])
            .is_ok()
    }
}

/// ChaCha20-Poly1305 (RFC 7634) one packet at a time through aws-lc-rs, as the portable
/// transform runs it: the multi-buffer transform hands it the texts longer than espgw's
/// kernel takes where aws-lc-rs is the faster of it and the library
/// (`crate::ipsec_mb::ChaChaLongTexts`).
#[cfg(espgw_ipsec_mb)]
pub(crate) struct LcChaCha(LcAead);

#[cfg(espgw_ipsec_mb)]
impl LcChaCha {
    /// `enc_key`: the 32-byte key then the 4-byte salt.
    pub(crate) fn new(enc_key: &[u8], suite: Suite, esn: bool) -> Result<Self, CryptoError> {
        let mut salt = [0u8; 4];
        salt.copy_from_slice(&enc_key[32..36]);
        Ok(LcChaCha(LcAead {
            key: lc_key(&aead::CHACHA20_POLY1305, &enc_key[..32])?,
            salt,
            suite,
            esn,
            gmac: false,
        }))
    }

    /// Writes the IV (the sequence number), encrypts and writes the ICV; false where
    /// aws-lc-rs refused (the caller wipes the text).
    pub(crate) fn seal(&self, esp: &mut [u8], seq: u64) -> bool {
        self.0.seal(esp, seq, None)
    }

    /// Authenticates, then decrypts; false where the packet is not authentic.
    pub(crate) fn open(&self, esp: &mut [u8], seq: u64) -> bool {
        self.0.open(esp, seq)
    }
}

/// NULL, AES-CBC, AES-CTR or 3DES-CBC with a separate integrity algorithm
/// (encrypt-then-MAC, RFC 4303 §3.3.2): the ICV covers `[SPI][seq][IV][ciphertext]`, and
/// with ESN the high sequence bits after them (RFC 4303 §2.2.1).
struct EncryptThenMac {
    cipher: EspCipher,
    /// `None` only for NULL/NULL.
    mac: Option<MacKey>,
    suite: Suite,
    esn: bool,
}

impl EncryptThenMac {
    fn write_iv(&self, iv: &mut [u8], seq: u64, given: Option<&[u8; 16]>) {
        match self.suite.enc {
            Encryption::AesCbc { .. } | Encryption::TdesCbc if given.is_some() => {
                let n = iv.len();
                iv.copy_from_slice(&given.unwrap_or(&[0; 16])[..n]);
            }
            // RFC 3602 §2: CBC IVs must be unpredictable (a CSPRNG: rand's thread RNG is
            // ChaCha12, reseeded from the OS).
            Encryption::AesCbc { .. } | Encryption::TdesCbc => rand::thread_rng().fill_bytes(iv),
            // RFC 3686 §3: the CTR IV must be unique per key; the sequence number is.
            _ => iv.copy_from_slice(&seq.to_be_bytes()[8 - iv.len()..]),
        }
    }
}

impl PacketTransform for EncryptThenMac {
    fn suite(&self) -> Suite {
        self.suite
    }

    fn seal(&self, esp: &mut [u8], seq: u64, cbc_iv: Option<&[u8; 16]>) -> bool {
        let iv_len = self.suite.iv_len();
        let icv_len = self.suite.icv_len();
        let text_end = esp.len() - icv_len;
        let (head, rest) = esp.split_at_mut(ESP_HEADER_LEN + iv_len);
        self.write_iv(&mut head[ESP_HEADER_LEN..], seq, cbc_iv);
        let (text, _) = rest.split_at_mut(text_end - ESP_HEADER_LEN - iv_len);
        if !self.cipher.encrypt(&head[ESP_HEADER_LEN..], text) {
            return false;
        }
        if let Some(mac) = &self.mac {
            let hi = ((seq >> 32) as u32).to_be_bytes();
            let (covered, icv) = esp.split_at_mut(text_end);
            let tag = if self.esn {
                mac.tag(&[covered, &hi])
            } else {
                mac.tag(&[covered])
            };
            icv.copy_from_slice(tag.as_slice());
        }
        true
    }

    fn open(&self, esp: &mut [u8], seq: u64) -> bool {
        let iv_len = self.suite.iv_len();
        let text_end = esp.len() - self.suite.icv_len();
        if let Some(mac) = &self.mac {
            let hi = ((seq >> 32) as u32).to_be_bytes();
            let (covered, icv) = esp.split_at(text_end);
            let good = if self.esn {
                mac.verify(&[covered, &hi], icv)
            } else {
                mac.verify(&[covered], icv)
            };
            if !good {
                return false;
            }
        }
        let (head, rest) = esp.split_at_mut(ESP_HEADER_LEN + iv_len);
        let text = &mut rest[..text_end - ESP_HEADER_LEN - iv_len];
        self.cipher.decrypt(&head[ESP_HEADER_LEN..], text)
    }
}
