//! Ciphers of encrypt-then-MAC ESP: NULL (RFC 2410), AES-CBC (RFC 3602) and AES-CTR
//! (RFC 3686) through aws-lc-rs (AES-NI assembly), 3DES-CBC (RFC 2451, legacy) through
//! RustCrypto. Each works in place on whole packets' text; lengths were checked by the
//! caller (CBC text is a multiple of the block, enforced by ESP padding).

use aws_lc_rs::cipher::{
    DecryptingKey, DecryptionContext, EncryptingKey, EncryptionContext, UnboundCipherKey, AES_128,
    AES_192, AES_256,
};
use des::cipher::{BlockDecrypt, BlockEncrypt, KeyInit};

use crate::suite::Encryption;
use crate::CryptoError;

pub enum EspCipher {
    Null,
    AesCbc {
        enc: Box<EncryptingKey>,
        dec: Box<DecryptingKey>,
    },
    AesCtr {
        key: Box<DecryptingKey>,
        nonce: [u8; 4],
    },
    Tdes(Box<des::TdesEde3>),
}

fn lc_err(e: impl std::fmt::Display) -> CryptoError {
    CryptoError::Backend(e.to_string())
}

fn aes_alg(key_len: usize) -> &'static aws_lc_rs::cipher::Algorithm {
    match key_len {
        16 => &AES_128,
        24 => &AES_192,
        _ => &AES_256,
    }
}

impl EspCipher {
    /// A cipher from its keying material (for CTR: key || 4-byte nonce).
    pub fn new(enc: Encryption, material: &[u8]) -> Result<EspCipher, CryptoError> {
        if material.len() != enc.key_material_len() {
            return Err(CryptoError::BadKeyLength {
                expected: enc.key_material_len(),
                got: material.len(),
            });
        }
        Ok(match enc {
            Encryption::Null => EspCipher::Null,
            Encryption::AesCbc { key_len } => {
                let alg = aes_alg(key_len);
                let enc = EncryptingKey::cbc(UnboundCipherKey::new(alg, material).map_err(lc_err)?)
                    .map_err(lc_err)?;
                let dec = DecryptingKey::cbc(UnboundCipherKey::new(alg, material).map_err(lc_err)?)
                    .map_err(lc_err)?;
                EspCipher::AesCbc {
                    enc: Box::new(enc),
                    dec: Box::new(dec),
                }
            }
            Encryption::AesCtr { key_len } => {
                let mut nonce = [0u8; 4];
                nonce.copy_from_slice(&material[key_len..]);
                EspCipher::AesCtr {
                    key: Box::new(
                        DecryptingKey::ctr(
                            UnboundCipherKey::new(aes_alg(key_len), &material[..key_len])
                                .map_err(lc_err)?,
                        )
                        .map_err(lc_err)?,
                    ),
                    nonce,
                }
            }
            Encryption::TdesCbc => EspCipher::Tdes(Box::new(
                des::TdesEde3::new_from_slice(material).map_err(lc_err)?,
            )),
            other => {
                return Err(CryptoError::Backend(format!(
                    "{} is not an encrypt-then-MAC cipher",
                    other.name()
                )))
            }
        })
    }

    /// RFC 3686 §4: nonce || IV || 32-bit block counter starting at 1.
    fn ctr_block(nonce: &[u8; 4], iv: &[u8]) -> [u8; 16] {
        let mut b = [0u8; 16];
        b[..4].copy_from_slice(nonce);
        b[4..12].copy_from_slice(iv);
        b[15] = 1;
        b
    }

    /// Encrypts `text` in place under `iv`. False if the lengths do not fit the mode.
    pub fn encrypt(&self, iv: &[u8], text: &mut [u8]) -> bool {
        match self {
            EspCipher::Null => true,
            EspCipher::AesCbc { enc, .. } => {
                let Ok(iv) = <[u8; 16]>::try_from(iv) else {
                    return false;
                };
                text.len().is_multiple_of(16)
                    && enc
                        .less_safe_encrypt(text, EncryptionContext::Iv128(iv.into()))
                        .is_ok()
            }
            EspCipher::AesCtr { key, nonce } => {
                // CTR is its own inverse: the decrypting key applies the key stream.
                iv.len() == 8
                    && key
                        .decrypt(
                            text,
                            DecryptionContext::Iv128(Self::ctr_block(nonce, iv).into()),
                        )
                        .is_ok()
            }
            EspCipher::Tdes(k) => tdes_cbc(k, iv, text, true),
        }
    }

    /// Decrypts `text` in place under `iv`.
    pub fn decrypt(&self, iv: &[u8], text: &mut [u8]) -> bool {
        match self {
            EspCipher::Null => true,
            EspCipher::AesCbc { dec, .. } => {
                let Ok(iv) = <[u8; 16]>::try_from(iv) else {
                    return false;
                };
                text.len().is_multiple_of(16)
                    && dec
                        .decrypt(text, DecryptionContext::Iv128(iv.into()))
                        .is_ok()
            }
            EspCipher::AesCtr { .. } => self.encrypt(iv, text),
            EspCipher::Tdes(k) => tdes_cbc(k, iv, text, false),
        }
    }
}

/// 3DES in CBC mode, a block at a time (legacy; not worth a faster path).
fn tdes_cbc(k: &des::TdesEde3, iv: &[u8], text: &mut [u8], encrypt: bool) -> bool {
    let Ok(mut chain) = <[u8; 8]>::try_from(iv) else {
        return false;
    };
    if !text.len().is_multiple_of(8) {
        return false;
    }
    for chunk in text.chunks_exact_mut(8) {
        let block = des::cipher::generic_array::GenericArray::from_mut_slice(chunk);
        if encrypt {
            for (b, c) in block.iter_mut().zip(chain) {
                *b ^= c;
            }
            k.encrypt_block(block);
            chain.copy_from_slice(block);
        } else {
            let mut next = [0u8; 8];
            next.copy_from_slice(block);
            k.decrypt_block(block);
            for (b, c) in block.iter_mut().zip(chain) {
                *b ^= c;
            }
            chain = next;
        }
    }
    true
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_util::hex;

    /// RFC 3602 §4 cases 1-4 (the raw AES-CBC ones; the ESP packet cases are in the ESP
    /// transform's tests).
    #[test]
    fn rfc3602_aes_cbc() {
        let cases = [
            (
                "06a9214036b8a15b512e03d534120006",
                "3dafba429d9eb430b422da802c9fac41",
                b"Single block msg".to_vec(),
                "e353779c1079aeb82708942dbe77181a",
            ),
            (
                "c286696d887c9aa0611bbb3e2025a45a",
                "562e17996d093d28ddb3ba695a2e6f58",
                (0u8..32).collect(),
                "d296cd94c2cccf8a3a863028b5e1dc0a7586602d253cfff91b8266bea6d61ab1",
            ),
            (
                "6c3ea0477630ce21a2ce334aa746c2cd",
                "c782dc4c098c66cbd9cd27d825682c81",
                b"This is a 48-byte message (exactly 3 AES blocks)".to_vec(),
                "d0a02b3836451753d493665d33f0e8862dea54cdb293abc7506939276772f8d5021c19216bad525c8579695d83ba2684",
            ),
            (
                "56e47a38c5598974bc46903dba290349",
                "8ce82eefbea0da3c44699ed7db51b7d9",
                (0xa0u8..=0xdf).collect(),
                "c30e32ffedc0774e6aff6af0869f71aa0f3af07a9a31a9c684db207eb0ef8e4e35907aa632c3ffdf868bb7b29d3d46ad83ce9f9a102ee99d49a53e87f4c3da55",
            ),
        ];
        for (key, iv, plain, ct) in cases {
            let c = EspCipher::new(Encryption::AesCbc { key_len: 16 }, &hex(key)).unwrap();
            let mut buf = plain.clone();
            assert!(c.encrypt(&hex(iv), &mut buf));
            assert_eq!(buf, hex(ct));
            assert!(c.decrypt(&hex(iv), &mut buf));
            assert_eq!(buf, plain);
        }
        let c = EspCipher::new(Encryption::AesCbc { key_len: 16 }, &[0; 16]).unwrap();
        assert!(
            !c.encrypt(&[0; 16], &mut [0u8; 15]),
            "partial block refused"
        );
    }

    /// RFC 3686 §6, all nine test vectors (key material = key || nonce).
    #[test]
    fn rfc3686_aes_ctr() {
        let p32: Vec<u8> = (0u8..32).collect();
        let p36: Vec<u8> = (0u8..36).collect();
        let single = b"Single block msg".to_vec();
        let cases = [
            (
                "AE6852F8121067CC4BF7A5765577F39E 00000030",
                "0000000000000000",
                &single,
                "E4095D4FB7A7B3792D6175A3261311B8",
            ),
            (
                "7E24067817FAE0D743D6CE1F32539163 006CB6DB",
                "C0543B59DA48D90B",
                &p32,
                "5104A106168A72D9790D41EE8EDAD388EB2E1EFC46DA57C8FCE630DF9141BE28",
            ),
            (
                "7691BE035E5020A8AC6E618529F9A0DC 00E0017B",
                "27777F3F4A1786F0",
                &p36,
                "C1CF48A89F2FFDD9CF4652E9EFDB72D74540A42BDE6D7836D59A5CEAAEF3105325B2072F",
            ),
            (
                "16AF5B145FC9F579C175F93E3BFB0EED863D06CCFDB78515 00000048",
                "36733C147D6D93CB",
                &single,
                "4B55384FE259C9C84E7935A003CBE928",
            ),
            (
                "7C5CB2401B3DC33C19E7340819E0F69C678C3DB8E6F6A91A 0096B03B",
                "020C6EADC2CB500D",
                &p32,
                "453243FC609B23327EDFAAFA7131CD9F8490701C5AD4A79CFC1FE0FF42F4FB00",
            ),
            (
                "02BF391EE8ECB159B959617B0965279BF59B60A786D3E0FE 0007BDFD",
                "5CBD60278DCC0912",
                &p36,
                "96893FC55E5C722F540B7DD1DDF7E758D288BC95C69165884536C811662F2188ABEE0935",
            ),
            (
                "776BEFF2851DB06F4C8A0542C8696F6C6A81AF1EEC96B4D37FC1D689E6C1C104 00000060",
                "DB5672C97AA8F0B2",
                &single,
                "145AD01DBF824EC7560863DC71E3E0C0",
            ),
            (
                "F6D66D6BD52D59BB0796365879EFF886C66DD51A5B6A99744B50590C87A23884 00FAAC24",
                "C1585EF15A43D875",
                &p32,
                "F05E231B3894612C49EE000B804EB2A9B8306B508F839D6A5530831D9344AF1C",
            ),
            (
                "FF7A617CE69148E4F1726E2F43581DE2AA62D9F805532EDFF1EED687FB54153D 001CC5B7",
                "51A51D70A1C11148",
                &p36,
                "EB6C52821D0BBBF7CE7594462ACA4FAAB407DF866569FD07F48CC0B583D6071F1EC0E6B8",
            ),
        ];
        for (material, iv, plain, ct) in cases {
            let m = hex(material);
            let c = EspCipher::new(
                Encryption::AesCtr {
                    key_len: m.len() - 4,
                },
                &m,
            )
            .unwrap();
            let mut buf = plain.clone();
            assert!(c.encrypt(&hex(iv), &mut buf));
            assert_eq!(buf, hex(ct), "key material {material}");
            assert!(c.decrypt(&hex(iv), &mut buf));
            assert_eq!(&buf, plain);
        }
    }

    #[test]
    fn tdes_cbc_round_trip_and_block_check() {
        let c = EspCipher::new(Encryption::TdesCbc, &(0u8..24).collect::<Vec<_>>()).unwrap();
        let plain: Vec<u8> = (0u8..32).collect();
        let mut buf = plain.clone();
        assert!(c.encrypt(&[7; 8], &mut buf));
        assert_ne!(buf, plain);
        assert!(c.decrypt(&[7; 8], &mut buf));
        assert_eq!(buf, plain);
        assert!(!c.encrypt(&[7; 8], &mut [0u8; 12]));
        assert!(EspCipher::new(Encryption::TdesCbc, &[0; 16]).is_err());
    }
}
