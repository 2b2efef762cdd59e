//! The portable back-end: aws-lc-rs.
//!
//! aws-lc-rs's AEAD API only speaks 16-byte tags. RFC 4106 also allows 8- and 12-byte ICVs;
//! for those, opening works without ever handing out unauthenticated plaintext:
//! AES-CTR decrypts in place, sealing that plaintext again restores the ciphertext and
//! yields the full tag over it, the truncated tags are compared, and only an authentic
//! packet is decrypted a second time. Three passes, so truncated ICVs are slower here
//! than with intel-ipsec-mb, which truncates natively.

use std::sync::Arc;

use aws_lc_rs::aead::{self, Aad, LessSafeKey, Nonce, UnboundKey};
use aws_lc_rs::cipher::{self, DecryptingKey, DecryptionContext, UnboundCipherKey};

use crate::ct::ct_eq;
use crate::{check_key, AeadAlgorithm, AeadKey, AeadOp, CryptoError, CryptoProvider};

pub struct AwsLcProvider;

impl CryptoProvider for AwsLcProvider {
    fn name(&self) -> String {
        "aws-lc-rs".to_string()
    }

    fn aead_key(
        &self,
        alg: AeadAlgorithm,
        key: &[u8],
        icv_len: usize,
    ) -> Result<Arc<dyn AeadKey>, CryptoError> {
        check_key(alg, key, icv_len)?;
        let (aead_alg, ctr_alg) = match alg {
            AeadAlgorithm::AesGcm128 => (&aead::AES_128_GCM, &cipher::AES_128),
            AeadAlgorithm::AesGcm192 => (&aead::AES_192_GCM, &cipher::AES_192),
            AeadAlgorithm::AesGcm256 => (&aead::AES_256_GCM, &cipher::AES_256),
        };
        let unbound =
            UnboundKey::new(aead_alg, key).map_err(|e| CryptoError::Backend(e.to_string()))?;
        let ctr = if icv_len == 16 {
            None
        } else {
            let k = UnboundCipherKey::new(ctr_alg, key)
                .map_err(|e| CryptoError::Backend(e.to_string()))?;
            Some(DecryptingKey::ctr(k).map_err(|e| CryptoError::Backend(e.to_string()))?)
        };
        Ok(Arc::new(AwsLcGcmKey {
            alg,
            icv_len,
            key: LessSafeKey::new(unbound),
            ctr,
        }))
    }
}

/// aws-lc keeps the schedule inside its own context and cleanses it when freed.
struct AwsLcGcmKey {
    alg: AeadAlgorithm,
    icv_len: usize,
    key: LessSafeKey,
    ctr: Option<DecryptingKey>,
}

impl AwsLcGcmKey {
    fn seal_one(&self, op: &mut AeadOp<'_>) -> bool {
        let Some(text_len) = op.buf.len().checked_sub(self.icv_len) else {
            return false;
        };
        let nonce = Nonce::assume_unique_for_key(op.nonce);
        let aad_bytes = op.aad;
        let aad = Aad::from(&aad_bytes[..usize::from(op.aad_len).min(12)]);
        let (text, icv) = op.buf.split_at_mut(text_len);
        match self.key.seal_in_place_separate_tag(nonce, aad, text) {
            Ok(tag) => {
                icv.copy_from_slice(&tag.as_ref()[..self.icv_len]);
                true
            }
            Err(_) => false,
        }
    }

    fn open_one(&self, op: &mut AeadOp<'_>) -> bool {
        if op.buf.len() < self.icv_len {
            return false;
        }
        let nonce = Nonce::assume_unique_for_key(op.nonce);
        let aad_bytes = op.aad;
        let aad_len = usize::from(op.aad_len).min(12);
        let aad = Aad::from(&aad_bytes[..aad_len]);
        match &self.ctr {
            None => self.key.open_in_place(nonce, aad, op.buf).is_ok(),
            Some(ctr) => {
                let text_len = op.buf.len() - self.icv_len;
                let (text, icv) = op.buf.split_at_mut(text_len);
                let counter = gcm_first_counter(&op.nonce);
                if ctr
                    .decrypt(text, DecryptionContext::Iv128(counter.into()))
                    .is_err()
                {
                    return false;
                }
                // Sealing the plaintext again gives back the ciphertext and its full tag.
                let Ok(tag) = self.key.seal_in_place_separate_tag(nonce, aad, text) else {
                    return false;
                };
                if !ct_eq(&tag.as_ref()[..self.icv_len], icv) {
                    return false;
                }
                ctr.decrypt(text, DecryptionContext::Iv128(counter.into()))
                    .is_ok()
            }
        }
    }
}

/// GCM's first keystream counter block for a 96-bit nonce: nonce || 0x00000002.
fn gcm_first_counter(nonce: &[u8; 12]) -> [u8; 16] {
    let mut c = [0u8; 16];
    c[..12].copy_from_slice(nonce);
    c[15] = 2;
    c
}

impl AeadKey for AwsLcGcmKey {
    fn algorithm(&self) -> AeadAlgorithm {
        self.alg
    }

    fn icv_len(&self) -> usize {
        self.icv_len
    }

    fn seal_burst(&self, ops: &mut [AeadOp<'_>]) {
        for op in ops.iter_mut() {
            self.seal_one(op);
        }
    }

    fn open_burst(&self, ops: &mut [AeadOp<'_>], ok: &mut [bool]) {
        for (op, ok) in ops.iter_mut().zip(ok.iter_mut()) {
            *ok = self.open_one(op);
            if !*ok {
                op.buf.fill(0);
            }
        }
    }
}
