//! AH integrity (RFC 4302): one prepared key per SA that computes or checks the ICV over
//! what the data plane hands it — the IP headers with mutable fields zeroed, the AH header
//! with its ICV zeroed, the payload and, with ESN, the high sequence bits — as a list of
//! slices, since those pieces are not contiguous in the packet.
//!
//! HMAC-SHA1/SHA-2/MD5 and AES-XCBC-MAC-96 come from [`MacKey`]. AES-GMAC (RFC 4543 §3.3,
//! §5) is AES-GCM with an empty plaintext: the whole covered text is AAD, the nonce is the
//! 4-byte salt and the 8-byte IV that AH carries after its sequence number.
//!
//! A data plane with a burst of one SA's packets lays each packet's covered text out
//! contiguously and calls [`AhKey::tag_burst`]: made through intel-ipsec-mb's provider
//! ([`AhKey::with_provider`]), the key hands the whole burst to the library's multi-buffer
//! job API, which hashes several packets at once in SIMD lanes; the portable key computes
//! one tag after the other. Both give the same ICVs (tests compare them).

use std::cell::RefCell;

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};

use crate::integrity::{MacKey, Tag};
use crate::suite::Integrity;
use crate::{CryptoError, CryptoProvider};

/// Bytes of IV that AH carries for AES-GMAC (none for the MACs).
pub const GMAC_IV_LEN: usize = 8;

enum AhMac {
    Mac(MacKey),
    Gmac { key: LessSafeKey, salt: [u8; 4] },
}

/// The longest AH ICV: HMAC-SHA-512-256's 32 bytes (RFC 4868); AES-GMAC's is 16.
pub const MAX_ICV: usize = 32;

/// One packet's ICV as a burst computed it ([`AhOp::icv`]), truncated to the SA's ICV
/// length. The back-end writes it where the caller keeps it, in place: a tag built aside
/// and moved there (a 64-byte [`Tag`] filled with 12 bytes, then read back whole) stalled
/// on store forwarding once per packet, half the time `perf` gave the burst wrapper.
#[derive(Clone, Copy)]
pub struct Icv {
    bytes: [u8; MAX_ICV],
    /// 0: not computed.
    len: u8,
}

impl Icv {
    /// No ICV (not computed).
    pub const NONE: Icv = Icv {
        bytes: [0; MAX_ICV],
        len: 0,
    };

    /// Sets the ICV to `b`; anything empty or longer than [`MAX_ICV`] leaves it unset.
    pub fn set(&mut self, b: &[u8]) {
        match self.bytes.get_mut(..b.len()) {
            Some(dst) if !b.is_empty() => {
                dst.copy_from_slice(b);
                self.len = b.len() as u8;
            }
            _ => self.len = 0,
        }
    }

    /// Marks the ICV as not computed.
    pub fn clear(&mut self) {
        self.len = 0;
    }

    /// Where a back-end may write the ICV itself ([`MAX_ICV`] bytes), to take it with
    /// [`Icv::mark_set`] once written: no copy from a scratch tag.
    #[cfg(espgw_ipsec_mb)]
    pub(crate) fn out_ptr(&mut self) -> *mut u8 {
        self.bytes.as_mut_ptr()
    }

    /// Takes the first `len` bytes written through [`Icv::out_ptr`] as the ICV; a length
    /// that is zero or over [`MAX_ICV`] leaves it unset.
    #[cfg(espgw_ipsec_mb)]
    pub(crate) fn mark_set(&mut self, len: usize) {
        self.len = if (1..=MAX_ICV).contains(&len) {
            len as u8
        } else {
            0
        };
    }

    /// The ICV, if it was computed.
    pub fn get(&self) -> Option<&[u8]> {
        self.bytes
            .get(..usize::from(self.len))
            .filter(|b| !b.is_empty())
    }
}

/// One packet's ICV computation in a burst ([`AhKey::tag_burst`]).
pub struct AhOp<'a> {
    /// Everything the ICV covers, contiguous: the IP headers with their mutable fields
    /// zeroed, the AH header with its ICV zeroed, the payload and, with ESN, the high
    /// sequence bits. (Mutable only because the library's job takes a plain pointer; it
    /// is read, never written.)
    pub text: &'a mut [u8],
    /// AES-GMAC's IV, from the AH header (ignored by the MACs).
    pub iv: [u8; GMAC_IV_LEN],
    /// Out: the ICV as it goes on the wire ([`AhKey::icv_len`] bytes), or unset where it
    /// could not be computed (the packet is then dropped, never sent unsigned).
    pub icv: &'a mut Icv,
}

/// A back-end that computes the ICVs of a burst together (multi-buffer).
pub trait AhBurst: Send + Sync {
    /// Sets every op's `icv`.
    fn tag_burst(&self, ops: &mut [AhOp<'_>]);
}

/// A prepared AH integrity key.
pub struct AhKey {
    integ: Integrity,
    mac: AhMac,
    /// The provider's multi-buffer transform, where it has one for `integ`.
    burst: Option<Box<dyn AhBurst>>,
}

thread_local! {
    /// GMAC takes its AAD as one slice: the pieces are gathered here (reused, so no call
    /// allocates once it has grown to the largest packet).
    static GMAC_AAD: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

impl AhKey {
    /// `key` is the integrity key (for GMAC: the AES key followed by the 4-byte salt).
    pub fn new(integ: Integrity, key: &[u8]) -> Result<AhKey, CryptoError> {
        if key.len() != integ.key_len() {
            return Err(CryptoError::BadKeyLength {
                expected: integ.key_len(),
                got: key.len(),
            });
        }
        let mac = match integ {
            Integrity::AesGmac { key_len } => {
                let alg = match key_len {
                    16 => &aead::AES_128_GCM,
                    24 => &aead::AES_192_GCM,
                    32 => &aead::AES_256_GCM,
                    _ => {
                        return Err(CryptoError::Backend(
                            "AES-GMAC key must be 16, 24 or 32 bytes".into(),
                        ))
                    }
                };
                let k = UnboundKey::new(alg, &key[..key_len])
                    .map_err(|e| CryptoError::Backend(e.to_string()))?;
                let mut salt = [0u8; 4];
                salt.copy_from_slice(&key[key_len..]);
                AhMac::Gmac {
                    key: LessSafeKey::new(k),
                    salt,
                }
            }
            Integrity::None => {
                return Err(CryptoError::Backend(
                    "AH needs an integrity algorithm".into(),
                ))
            }
            other => AhMac::Mac(MacKey::new(other, key)?),
        };
        Ok(AhKey {
            integ,
            mac,
            burst: None,
        })
    }

    /// [`AhKey::new`], with `provider`'s multi-buffer transform for bursts where it has
    /// one for `integ` (intel-ipsec-mb: every AH algorithm).
    pub fn with_provider(
        provider: &dyn CryptoProvider,
        integ: Integrity,
        key: &[u8],
    ) -> Result<AhKey, CryptoError> {
        let mut k = AhKey::new(integ, key)?;
        k.burst = provider.multi_buffer_ah(integ, key).transpose()?;
        Ok(k)
    }

    /// Whether bursts go to a multi-buffer back-end.
    pub fn is_multi_buffer(&self) -> bool {
        self.burst.is_some()
    }

    /// The ICV of every op's text, a burst at a time.
    pub fn tag_burst(&self, ops: &mut [AhOp<'_>]) {
        match &self.burst {
            Some(b) => b.tag_burst(ops),
            None => {
                let icv_len = self.icv_len();
                for op in ops.iter_mut() {
                    match self.tag(&op.iv, &[op.text]) {
                        Some(t) => op.icv.set(t.as_slice().get(..icv_len).unwrap_or(&[])),
                        None => op.icv.clear(),
                    }
                }
            }
        }
    }

    pub fn integrity(&self) -> Integrity {
        self.integ
    }

    /// IV bytes in the AH header, after the sequence number.
    pub fn iv_len(&self) -> usize {
        match self.mac {
            AhMac::Gmac { .. } => GMAC_IV_LEN,
            AhMac::Mac(_) => 0,
        }
    }

    pub fn icv_len(&self) -> usize {
        self.integ.icv_len()
    }

    /// The ICV over the concatenation of `parts`; `iv` is the GMAC IV (ignored by MACs).
    pub fn tag(&self, iv: &[u8], parts: &[&[u8]]) -> Option<Tag> {
        match &self.mac {
            AhMac::Mac(m) => Some(m.tag(parts)),
            AhMac::Gmac { key, salt } => {
                let mut n = [0u8; 12];
                n[..4].copy_from_slice(salt);
                n[4..].copy_from_slice(iv.get(..GMAC_IV_LEN)?);
                let nonce = Nonce::assume_unique_for_key(n);
                GMAC_AAD.with(|cell| {
                    let mut aad = cell.borrow_mut();
                    aad.clear();
                    for p in parts {
                        aad.extend_from_slice(p);
                    }
                    key.seal_in_place_separate_tag(nonce, Aad::from(&aad[..]), &mut [])
                        .ok()
                        .map(|t| Tag::from_slice(t.as_ref()))
                })
            }
        }
    }

    /// Whether `icv` is the ICV of `parts`, compared in constant time.
    pub fn verify(&self, iv: &[u8], parts: &[&[u8]], icv: &[u8]) -> bool {
        self.tag(iv, parts)
            .is_some_and(|t| crate::ct::ct_eq(t.as_slice(), icv))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    #[test]
    fn gmac_is_gcm_with_everything_in_the_aad() {
        // GCM test case 1 (McGrew-Viega): zero AES-128 key, zero nonce, nothing at all:
        // tag 58e2fccefa7e3061367f1d57a4e7455a. A zero salt and zero IV make that nonce.
        let mut key = vec![0u8; 16];
        key.extend_from_slice(&[0; 4]);
        let k = AhKey::new(Integrity::AesGmac { key_len: 16 }, &key).unwrap();
        let empty = k.tag(&[0; 8], &[]).unwrap();
        assert_eq!(empty.as_slice(), hex("58e2fccefa7e3061367f1d57a4e7455a"));
        // The split into parts does not matter.
        let whole = k.tag(&[1; 8], &[b"abcdefgh"]).unwrap();
        let split = k.tag(&[1; 8], &[b"abc", b"", b"defgh"]).unwrap();
        assert_eq!(whole.as_slice(), split.as_slice());
        assert!(k.verify(&[1; 8], &[b"abcdefgh"], whole.as_slice()));
        assert!(!k.verify(&[2; 8], &[b"abcdefgh"], whole.as_slice()));
        assert!(k.tag(&[1; 4], &[]).is_none(), "short IV");
    }

    #[test]
    fn an_icv_holds_what_it_was_set_to_and_nothing_too_long() {
        let mut icv = Icv::NONE;
        assert_eq!(icv.get(), None);
        icv.set(&[1, 2, 3]);
        assert_eq!(icv.get(), Some(&[1, 2, 3][..]));
        icv.set(&[7; MAX_ICV]);
        assert_eq!(icv.get(), Some(&[7; MAX_ICV][..]));
        // Too long or empty: unset, never a cut or stale ICV.
        icv.set(&[9; MAX_ICV + 1]);
        assert_eq!(icv.get(), None);
        icv.set(&[5; 12]);
        icv.set(&[]);
        assert_eq!(icv.get(), None);
        icv.set(&[5; 12]);
        icv.clear();
        assert_eq!(icv.get(), None);
    }

    #[test]
    fn keys_of_the_wrong_length_are_refused() {
        assert!(AhKey::new(Integrity::HmacSha1_96, &[0; 16]).is_err());
        assert!(AhKey::new(Integrity::AesGmac { key_len: 16 }, &[0; 16]).is_err());
        assert!(AhKey::new(Integrity::None, &[]).is_err());
        let k = AhKey::new(Integrity::HmacSha256_128, &[7; 32]).unwrap();
        assert_eq!((k.iv_len(), k.icv_len()), (0, 16));
    }
}
