//! Integrity algorithms for encrypt-then-MAC ESP and for AH: HMAC-SHA1/SHA-2 (aws-lc-rs,
//! assembly), HMAC-MD5 (legacy, RustCrypto) and AES-XCBC-MAC-96 (RFC 3566, over the `aes`
//! block cipher). A MAC runs over several slices, since ESN's high sequence bits and AH's
//! zeroed header fields are not contiguous with the rest of what is authenticated.

use ::hmac::Mac;
use aes::cipher::{BlockEncrypt, KeyInit};
use aws_lc_rs::hmac as lc_hmac;
use zeroize::Zeroize;

use crate::suite::Integrity;
use crate::CryptoError;

/// The longest MAC output (SHA-512).
pub const MAX_TAG: usize = 64;

/// A MAC output; the first `len` bytes are the (truncated) ICV.
pub struct Tag {
    bytes: [u8; MAX_TAG],
    len: usize,
}

impl Tag {
    /// A tag holding `b` (at most [`MAX_TAG`] bytes; longer input is cut).
    pub fn from_slice(b: &[u8]) -> Tag {
        let len = b.len().min(MAX_TAG);
        let mut bytes = [0; MAX_TAG];
        bytes[..len].copy_from_slice(&b[..len]);
        Tag { bytes, len }
    }

    pub fn as_slice(&self) -> &[u8] {
        &self.bytes[..self.len]
    }
}

/// A prepared integrity key.
pub enum MacKey {
    Hmac {
        key: Box<lc_hmac::Key>,
        icv_len: usize,
    },
    Md5(Box<::hmac::Hmac<md5::Md5>>),
    Xcbc(Box<XcbcKey>),
}

impl MacKey {
    pub fn new(alg: Integrity, key: &[u8]) -> Result<MacKey, CryptoError> {
        if key.len() != alg.key_len() {
            return Err(CryptoError::BadKeyLength {
                expected: alg.key_len(),
                got: key.len(),
            });
        }
        let hmac_alg = match alg {
            Integrity::HmacSha1_96 => lc_hmac::HMAC_SHA1_FOR_LEGACY_USE_ONLY,
            Integrity::HmacSha256_128 => lc_hmac::HMAC_SHA256,
            Integrity::HmacSha384_192 => lc_hmac::HMAC_SHA384,
            Integrity::HmacSha512_256 => lc_hmac::HMAC_SHA512,
            Integrity::HmacMd5_96 => {
                let m = <::hmac::Hmac<md5::Md5> as Mac>::new_from_slice(key)
                    .map_err(|e| CryptoError::Backend(e.to_string()))?;
                return Ok(MacKey::Md5(Box::new(m)));
            }
            Integrity::AesXcbc96 => return Ok(MacKey::Xcbc(Box::new(XcbcKey::new(key)?))),
            Integrity::None | Integrity::AesGmac { .. } => {
                return Err(CryptoError::Backend(format!(
                    "{} is not a MAC of this module",
                    alg.name()
                )))
            }
        };
        Ok(MacKey::Hmac {
            key: Box::new(lc_hmac::Key::new(hmac_alg, key)),
            icv_len: alg.icv_len(),
        })
    }

    pub fn icv_len(&self) -> usize {
        match self {
            MacKey::Hmac { icv_len, .. } => *icv_len,
            MacKey::Md5(_) | MacKey::Xcbc(_) => 12,
        }
    }

    /// The MAC of the concatenation of `parts`, truncated to the ICV length.
    pub fn tag(&self, parts: &[&[u8]]) -> Tag {
        let mut t = Tag {
            bytes: [0; MAX_TAG],
            len: self.icv_len(),
        };
        match self {
            MacKey::Hmac { key, icv_len } => {
                let mut ctx = lc_hmac::Context::with_key(key);
                for p in parts {
                    ctx.update(p);
                }
                let full = ctx.sign();
                t.bytes[..*icv_len].copy_from_slice(&full.as_ref()[..*icv_len]);
            }
            MacKey::Md5(m) => {
                let mut m = (**m).clone();
                for p in parts {
                    m.update(p);
                }
                let out = m.finalize().into_bytes();
                t.bytes[..12].copy_from_slice(&out[..12]);
            }
            MacKey::Xcbc(x) => {
                let full = x.mac(parts);
                t.bytes[..12].copy_from_slice(&full[..12]);
            }
        }
        t
    }

    /// Whether `icv` is the MAC of `parts`, compared in constant time.
    pub fn verify(&self, parts: &[&[u8]], icv: &[u8]) -> bool {
        crate::ct::ct_eq(self.tag(parts).as_slice(), icv)
    }
}

/// AES-XCBC-MAC (RFC 3566): CBC-MAC under K1 = E(K, 0x01..), with the last block masked by
/// K2 = E(K, 0x02..) when complete, or padded with 0x80 0x00.. and masked by
/// K3 = E(K, 0x03..).
pub struct XcbcKey {
    k1: aes::Aes128,
    k2: [u8; 16],
    k3: [u8; 16],
}

impl Drop for XcbcKey {
    fn drop(&mut self) {
        self.k2.zeroize();
        self.k3.zeroize();
    }
}

impl XcbcKey {
    pub fn new(key: &[u8]) -> Result<XcbcKey, CryptoError> {
        let k = aes::Aes128::new_from_slice(key).map_err(|_| CryptoError::BadKeyLength {
            expected: 16,
            got: key.len(),
        })?;
        let derive = |c: u8| {
            let mut b = aes::Block::from([c; 16]);
            k.encrypt_block(&mut b);
            let mut out = [0u8; 16];
            out.copy_from_slice(&b);
            b.zeroize();
            out
        };
        let mut k1 = derive(1);
        let cipher = aes::Aes128::new_from_slice(&k1)
            .map_err(|_| CryptoError::Backend("AES-XCBC subkey".into()))?;
        k1.zeroize();
        Ok(XcbcKey {
            k1: cipher,
            k2: derive(2),
            k3: derive(3),
        })
    }

    /// The full 16-byte MAC of the concatenation of `parts`.
    pub fn mac(&self, parts: &[&[u8]]) -> [u8; 16] {
        let mut state = [0u8; 16];
        // Bytes of the current, not yet processed block: a block is only processed once
        // more data follows, since the last one is treated differently.
        let mut pending = [0u8; 16];
        let mut fill = 0usize;
        for p in parts {
            for &byte in p.iter() {
                if fill == 16 {
                    self.absorb(&mut state, &pending);
                    fill = 0;
                }
                pending[fill] = byte;
                fill += 1;
            }
        }
        if fill == 16 {
            for (p, k) in pending.iter_mut().zip(self.k2) {
                *p ^= k;
            }
        } else {
            pending[fill] = 0x80;
            for b in &mut pending[fill + 1..] {
                *b = 0;
            }
            for (p, k) in pending.iter_mut().zip(self.k3) {
                *p ^= k;
            }
        }
        self.absorb(&mut state, &pending);
        pending.zeroize();
        state
    }

    fn absorb(&self, state: &mut [u8; 16], block: &[u8; 16]) {
        for (s, b) in state.iter_mut().zip(block) {
            *s ^= b;
        }
        let mut b = aes::Block::from(*state);
        self.k1.encrypt_block(&mut b);
        state.copy_from_slice(&b);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    /// RFC 4868 §2.7.2 authenticator test vectors (AUTH256/384/512-1..), truncated.
    #[test]
    fn rfc4868_hmac_sha2_authenticators() {
        let cases: [(Integrity, Vec<u8>, Vec<u8>, &str); 7] = [
            (
                Integrity::HmacSha256_128,
                vec![0x0b; 32],
                b"Hi There".to_vec(),
                "198a607eb44bfbc69903a0f1cf2bbdc5",
            ),
            (
                Integrity::HmacSha256_128,
                b"JefeJefeJefeJefeJefeJefeJefeJefe".to_vec(),
                b"what do ya want for nothing?".to_vec(),
                "167f928588c5cc2eef8e3093caa0e87c",
            ),
            (
                Integrity::HmacSha256_128,
                vec![0xaa; 32],
                vec![0xdd; 50],
                "cdcb1220d1ecccea91e53aba3092f962",
            ),
            (
                Integrity::HmacSha256_128,
                (1..=32).collect(),
                vec![0xcd; 50],
                "372efcf9b40b35c2115b1346903d2ef4",
            ),
            (
                Integrity::HmacSha384_192,
                vec![0x0b; 48],
                b"Hi There".to_vec(),
                "b6a8d5636f5c6a7224f9977dcf7ee6c7fb6d0c48cbdee973",
            ),
            (
                Integrity::HmacSha512_256,
                vec![0x0b; 64],
                b"Hi There".to_vec(),
                "637edc6e01dce7e6742a99451aae82df23da3e92439e590e43e761b33e910fb8",
            ),
            (
                Integrity::HmacSha512_256,
                vec![0xaa; 64],
                vec![0xdd; 50],
                "2ee7acd783624ca9398710f3ee05ae41b9f9b0510c87e49e586cc9bf961733d8",
            ),
        ];
        for (alg, key, data, want) in cases {
            let k = MacKey::new(alg, &key).unwrap();
            // Split the data in two to exercise multi-part input.
            let (a, b) = data.split_at(data.len() / 3);
            assert_eq!(k.tag(&[a, b]).as_slice(), hex(want).as_slice(), "{alg:?}");
            assert!(k.verify(&[&data], &hex(want)));
            let mut bad = hex(want);
            bad[0] ^= 1;
            assert!(!k.verify(&[&data], &bad));
        }
    }

    /// RFC 2202 test case 1 (HMAC-SHA1) and RFC 2104/2202 case 1 (HMAC-MD5), truncated
    /// to 96 bits as RFC 2404 and RFC 2403 use them.
    #[test]
    fn hmac_sha1_and_md5_96() {
        let sha1 = MacKey::new(Integrity::HmacSha1_96, &[0x0b; 20]).unwrap();
        assert_eq!(
            sha1.tag(&[b"Hi There"]).as_slice(),
            hex("b617318655057264e28bc0b6").as_slice()
        );
        let md5 = MacKey::new(Integrity::HmacMd5_96, &[0x0b; 16]).unwrap();
        assert_eq!(
            md5.tag(&[b"Hi", b" There"]).as_slice(),
            hex("9294727a3638bb1c13f48ef8").as_slice()
        );
    }

    /// RFC 3566 §4.6 test cases (key 000102..0f).
    #[test]
    fn rfc3566_xcbc_mac() {
        let key: Vec<u8> = (0..16).collect();
        let x = XcbcKey::new(&key).unwrap();
        let msg = |n: usize| -> Vec<u8> { (0..n).map(|i| i as u8).collect() };
        let cases = [
            (msg(0), "75f0251d528ac01c4573dfd584d79f29"),
            (msg(3), "5b376580ae2f19afe7219ceef172756f"),
            (msg(16), "d2a246fa349b68a79998a4394ff7a263"),
            (msg(20), "47f51b4564966215b8985c63055ed308"),
            (msg(32), "f54f0ec8d2b9f3d36807734bd5283fd4"),
            (msg(34), "becbb3bccdb518a30677d5481fb6b4d8"),
            (vec![0u8; 1000], "f0dafee895db30253761103b5d84528f"),
        ];
        for (m, want) in cases {
            let (a, b) = m.split_at(m.len() / 2);
            assert_eq!(x.mac(&[a, b]).to_vec(), hex(want), "{} bytes", m.len());
        }
        let k = MacKey::new(Integrity::AesXcbc96, &key).unwrap();
        assert_eq!(
            k.tag(&[&msg(3)]).as_slice(),
            &hex("5b376580ae2f19afe7219cee")[..]
        );
        assert!(MacKey::new(Integrity::AesXcbc96, &key[..15]).is_err());
    }
}
