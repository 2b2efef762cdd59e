//! Multi-buffer ESP transforms: every suite intel-ipsec-mb runs besides AES-GCM (which
//! goes through [`crate::ipsec_mb`]'s AEAD interface) — AES-CBC, AES-CTR or NULL with
//! HMAC-SHA1-96, HMAC-SHA-256/384/512, HMAC-MD5-96 or AES-XCBC-MAC-96; AES-CCM with
//! 128- and 256-bit keys; ChaCha20-Poly1305; AES-GMAC.
//!
//! A burst of one SA's packets goes to the library's job API together, so that its
//! multi-buffer code hashes and ciphers several packets at once in SIMD lanes, where the
//! portable transforms of [`crate::esp`] take one packet at a time. Both produce the same
//! bytes (tests compare them packet for packet) and keep the same rules:
//!
//! - opening encrypt-then-MAC computes only the ICVs first (hash-only jobs), compares them
//!   in constant time, and decrypts only the authentic packets (cipher-only jobs);
//! - CBC IVs are fresh CSPRNG output, drawn in one call per burst;
//! - the text of a packet that fails is zeroed, and a packet that fails takes no other
//!   packet of its burst with it.
//!
//! AES-GMAC goes not through jobs but one call a packet through the library's direct GCM
//! API (an empty text), or, where the CPU runs espgw's 256-bit batch kernel, through that
//! kernel's GMAC passes (`csrc/gcm_batch_avx2.c`: ICVs over up to 128 bytes four at a
//! time, longer ones one at a time; `espgw_gmac_direct` in the shim choosing). With ESN,
//! whose AAD has the sequence number's high half in its middle, the shim gathers the AAD
//! on the stack for the same one call (`gmac_esn`; past 2,048 bytes the library's
//! incremental GMAC), never the batch kernel.
//!
//! ChaCha20-Poly1305's short texts go through espgw's kernel (`csrc/chacha_batch.c`, the
//! shim choosing), its longer ones through the library's job or, where the kernel runs in
//! AVX2 (`ChaChaLongTexts`: measured 1.1-1.3x the library on AMD Zen 1), aws-lc-rs's
//! one-packet code, which this file calls before the burst goes to the shim.
//!
//! Suites the library lacks (3DES-CBC, NULL/NULL) stay on the portable transforms.
//! AES-192-CCM, which it lacks too, is built from its AES-192 CBC and counter mode
//! ([`AesCipherOnly`], `crate::ipsec_mb_ccm`).
//!
//! AH's ICVs go through the same hash-only jobs ([`multi_buffer_ah`]): an AH MAC is the
//! MAC of ESP with NULL encryption, AH's AES-GMAC that of ESP's AES-GMAC, each over the
//! contiguous text the data plane lays out.
#![allow(unsafe_code)]

#[cfg(espgw_ipsec_mb)]
pub(crate) use imp::{multi_buffer_ah, multi_buffer_esp_key, AesCipherOnly, CipherJobs};

#[cfg(espgw_ipsec_mb)]
mod imp {
    use std::cell::RefCell;
    use std::ffi::c_int;
    use std::sync::Arc;

    use rand::RngCore;
    use zeroize::Zeroize;

    use crate::ah::{AhBurst, AhOp};
    use crate::ct::ct_eq;
    use crate::esp::{aead_aad, EspKey, EspOp, LcChaCha, ESP_HEADER_LEN};
    use crate::ipsec_mb::{with_mgr, with_mgrs, GcmBatchKey, GcmKeyData, ImbMgr};
    use crate::suite::{Encryption, Integrity, Suite};
    use crate::CryptoError;

    // The shim's enum values (csrc/ipsec_mb_shim.c).
    const C_NULL: i32 = 0;
    const C_CBC: i32 = 1;
    const C_CTR: i32 = 2;
    const C_CCM: i32 = 3;
    const C_CHACHA: i32 = 4;
    const H_NULL: i32 = 0;
    const H_SHA1: i32 = 1;
    const H_SHA256: i32 = 2;
    const H_SHA384: i32 = 3;
    const H_SHA512: i32 = 4;
    const H_MD5: i32 = 5;
    const H_XCBC: i32 = 6;
    const H_CCM: i32 = 7;
    const H_CHACHA: i32 = 8;
    const H_GMAC128: i32 = 9;

    const SEAL: c_int = 0;
    const HASH_ONLY: c_int = 1;
    const DECRYPT_ONLY: c_int = 2;
    const OPEN_AEAD: c_int = 3;
    const ENCRYPT_ONLY: c_int = 4;

    /// Mirrors `struct espgw_mb_sa`.
    #[repr(C)]
    struct RawSa {
        cipher: i32,
        hash: i32,
        key_bytes: u64,
        enc_keys: *const u8,
        dec_keys: *const u8,
        ipad: *const u8,
        opad: *const u8,
        k1: *const u8,
        k2: *const u8,
        k3: *const u8,
        gcm_key: *const u8,
        tag_len: u64,
        /// Nonzero: ChaCha20-Poly1305's short texts go through `csrc/chacha_batch.c`.
        chacha_batch: u64,
    }

    /// Mirrors `struct espgw_mb_op`.
    #[repr(C)]
    struct RawOp {
        buf: *mut u8,
        cipher_off: u64,
        cipher_len: u64,
        hash_off: u64,
        hash_len: u64,
        iv: [u8; 16],
        iv_len: u64,
        aad: [u8; 16],
        aad_len: u64,
        tag: [u8; 64],
        expect: [u8; 32],
        status: i64,
        /// Where the library writes the tag: null for `tag`, or (sealing) the packet's
        /// ICV room, which saves copying it there afterwards.
        tag_out: *mut u8,
    }

    // The shim asserts the same size for its struct.
    const _: () = assert!(std::mem::size_of::<RawOp>() == 200);

    /// One AES-GMAC op as `espgw_gmac_direct` takes it: the shim's `struct espgw_aead_op`
    /// (whose size `gcm_batch.h` asserts) with the covered bytes as its text.
    #[repr(C)]
    struct RawGmacOp {
        /// Everything the ICV covers (read, never written).
        covered: *const u8,
        covered_len: u64,
        /// Where the tag is written.
        tag: *mut u8,
        /// The nonce: salt || the packet's IV.
        iv: [u8; 12],
        /// With ESN (the call's `esn`), the sequence number's high half (big-endian) in
        /// the first four bytes, which the shim hashes after the SPI; otherwise unused.
        esn_high: [u8; 12],
        esn_high_len: u32,
        tag_len: u32,
        /// [`GMAC_PENDING`] when handed over, [`GMAC_DONE`] once the tag is written.
        status: i32,
    }

    const _: () = assert!(std::mem::size_of::<RawGmacOp>() == 64);

    /// `ESPGW_OP_PENDING` and `ESPGW_OP_DONE` of `gcm_batch.h`.
    const GMAC_PENDING: i32 = -1;
    const GMAC_DONE: i32 = 0;

    impl RawGmacOp {
        const UNUSED: RawGmacOp = RawGmacOp {
            covered: std::ptr::null(),
            covered_len: 0,
            tag: std::ptr::null_mut(),
            iv: [0; 12],
            esn_high: [0; 12],
            esn_high_len: 0,
            tag_len: 0,
            status: GMAC_PENDING,
        };
    }

    /// AES-GMAC ops per library call.
    const GMAC_CHUNK: usize = 64;

    thread_local! {
        /// Per-thread AES-GMAC records and computed tags (opening and AH compare or take
        /// them), reused by every call: nothing is allocated or zero-filled per burst. A
        /// tag is only read after the call that wrote it.
        static GMAC: RefCell<([RawGmacOp; GMAC_CHUNK], [[u8; 16]; GMAC_CHUNK])> =
            const { RefCell::new(([RawGmacOp::UNUSED; GMAC_CHUNK], [[0; 16]; GMAC_CHUNK])) };
    }

    extern "C" {
        fn espgw_gmac_direct(
            m: *mut ImbMgr,
            batch_key: *const u8,
            kd: *const u8,
            key_bytes: u32,
            esn: u32,
            ops: *mut RawGmacOp,
            n: u32,
        );
        fn espgw_mb_esp(
            m: *mut ImbMgr,
            sha: *mut ImbMgr,
            sa: *const RawSa,
            what: c_int,
            ops: *mut RawOp,
            n: u32,
        ) -> c_int;
        fn espgw_mb_aes_keyexp(
            m: *mut ImbMgr,
            key_bytes: u32,
            key: *const u8,
            enc: *mut u8,
            dec: *mut u8,
        ) -> c_int;
        fn espgw_mb_xcbc_keyexp(
            m: *mut ImbMgr,
            key: *const u8,
            k1: *mut u8,
            k2: *mut u8,
            k3: *mut u8,
        );
        fn espgw_mb_hmac_precompute(
            m: *mut ImbMgr,
            hash: i32,
            key: *const u8,
            key_len: u32,
            ipad: *mut u8,
            opad: *mut u8,
        ) -> c_int;
    }

    /// An SA's expanded keys, 64-byte aligned (the library's vector code loads them with
    /// aligned moves), zeroized on drop.
    #[repr(C, align(64))]
    struct KeyStore {
        /// The AES encryption schedule (up to 240 bytes), or ChaCha20's 32-byte key.
        enc: [u8; 256],
        dec: [u8; 256],
        /// HMAC: the hash state after key ^ ipad and key ^ opad (up to SHA-512's 64).
        ipad: [u8; 64],
        opad: [u8; 64],
        /// AES-XCBC-MAC: K1's schedule (176 bytes), K2, K3.
        k1: [u8; 256],
        k2: [u8; 16],
        k3: [u8; 16],
    }

    impl Drop for KeyStore {
        fn drop(&mut self) {
            self.enc.zeroize();
            self.dec.zeroize();
            self.ipad.zeroize();
            self.opad.zeroize();
            self.k1.zeroize();
            self.k2.zeroize();
            self.k3.zeroize();
        }
    }

    /// How the packet's nonce or IV is formed.
    #[derive(Clone, Copy)]
    enum Mode {
        /// NULL, AES-CBC or AES-CTR with a separate ICV (encrypt-then-MAC, RFC 4303 §3.3.2).
        EncryptThenMac { ctr_nonce: [u8; 4] },
        /// AES-CCM (RFC 4309): 3-byte salt || IV.
        Ccm { salt: [u8; 3] },
        /// ChaCha20-Poly1305 (RFC 7634): 4-byte salt || IV.
        ChaCha { salt: [u8; 4] },
        /// AES-GMAC (RFC 4543): nothing encrypted; the ICV is GHASH over SPI, sequence
        /// number, IV and payload, nonce = 4-byte salt || IV.
        Gmac { salt: [u8; 4] },
    }

    struct MbEsp {
        suite: Suite,
        esn: bool,
        mode: Mode,
        cipher: i32,
        hash: i32,
        key_bytes: u64,
        keys: Box<KeyStore>,
        /// AES-GMAC: the precomputed `struct gcm_key_data`.
        gcm_key: Option<GcmKeyData>,
        /// AES-GMAC through the batch kernel (`csrc/gcm_batch_avx2.c`) where this CPU runs
        /// it: the key's batch data (the powers of its hash key).
        gcm_batch: Option<GcmBatchKey>,
        /// ChaCha20-Poly1305's short texts through espgw's kernel (`csrc/chacha_batch.c`),
        /// where this CPU runs it and the provider is `MbApi::Batch`.
        chacha_batch: bool,
        /// ChaCha20-Poly1305's texts longer than the kernel takes, through aws-lc-rs where
        /// that beats the library's job ([`crate::ipsec_mb::ChaChaLongTexts`]); `None`:
        /// the shim sends them to the library.
        chacha_long: Option<ChaChaLong>,
    }

    /// The long texts' transform and where long begins.
    struct ChaChaLong {
        key: LcChaCha,
        /// The kernel's limit: texts of more bytes come here.
        text_max: usize,
    }

    /// The shim's cipher and hash for `suite`, or `None` where the library has no
    /// multi-buffer path for it.
    fn library_ids(suite: Suite) -> Option<(i32, i32)> {
        let hash = match suite.integ {
            Integrity::HmacSha1_96 => H_SHA1,
            Integrity::HmacSha256_128 => H_SHA256,
            Integrity::HmacSha384_192 => H_SHA384,
            Integrity::HmacSha512_256 => H_SHA512,
            Integrity::HmacMd5_96 => H_MD5,
            Integrity::AesXcbc96 => H_XCBC,
            Integrity::None | Integrity::AesGmac { .. } => H_NULL,
        };
        match suite.enc {
            Encryption::Null | Encryption::AesCbc { .. } | Encryption::AesCtr { .. }
                if hash == H_NULL =>
            {
                None
            }
            Encryption::Null => Some((C_NULL, hash)),
            Encryption::AesCbc { .. } => Some((C_CBC, hash)),
            Encryption::AesCtr { .. } => Some((C_CTR, hash)),
            // intel-ipsec-mb 1.3 has CCM for 128- and 256-bit keys only (AES-192-CCM is
            // built from its AES-192 CBC and counter mode: crate::ipsec_mb_ccm).
            Encryption::AesCcm { key_len, .. } if key_len != 24 => Some((C_CCM, H_CCM)),
            Encryption::ChaCha20Poly1305 => Some((C_CHACHA, H_CHACHA)),
            // With ESN GMAC's AAD has the high sequence bits inside it (SPI || high || low
            // || IV || payload): the shim gathers it (`gmac_esn`).
            Encryption::AesGmac { key_len } => {
                Some((C_NULL, H_GMAC128 + (key_len as i32 - 16) / 8))
            }
            _ => None,
        }
    }

    /// The multi-buffer transform for `suite`, or `None` where the library has none (the
    /// caller then builds the portable one). Key lengths were checked by the caller.
    /// `batch`: AES-GMAC may go through the batch kernel (`MbApi::Batch`).
    pub(crate) fn multi_buffer_esp_key(
        suite: Suite,
        enc_key: &[u8],
        auth_key: &[u8],
        esn: bool,
        batch: bool,
    ) -> Option<Result<Arc<dyn EspKey>, CryptoError>> {
        if let Encryption::AesCcm {
            key_len: 24,
            icv_len,
        } = suite.enc
        {
            return Some(
                crate::ipsec_mb_ccm::MbCcm192::new(enc_key, icv_len, suite, esn)
                    .map(|k| Arc::new(k) as Arc<dyn EspKey>),
            );
        }
        let (cipher, hash) = library_ids(suite)?;
        Some(
            build_mb(suite, cipher, hash, enc_key, auth_key, esn, batch)
                .map(|k| Arc::new(k) as Arc<dyn EspKey>),
        )
    }

    /// AES in CBC (encrypting) or counter mode alone, over a burst of buffers: the
    /// pieces the library has of a mode it lacks (AES-192-CCM, `crate::ipsec_mb_ccm`).
    pub(crate) struct AesCipherOnly {
        esp: MbEsp,
        /// The shim's `what`: encryption alone for CBC, decryption alone for counter
        /// mode (the same both ways); each through the library's synchronous cipher
        /// burst.
        what: c_int,
    }

    impl AesCipherOnly {
        /// AES-CBC encryption under `key` (16, 24 or 32 bytes).
        pub(crate) fn cbc(key: &[u8]) -> Result<AesCipherOnly, CryptoError> {
            let suite = Suite {
                enc: Encryption::AesCbc { key_len: key.len() },
                integ: Integrity::None,
            };
            Ok(AesCipherOnly {
                esp: build_mb(suite, C_CBC, H_NULL, key, &[], false, false)?,
                what: ENCRYPT_ONLY,
            })
        }

        /// AES counter mode under `key`, from a whole 16-byte counter block.
        pub(crate) fn ctr(key: &[u8]) -> Result<AesCipherOnly, CryptoError> {
            let suite = Suite {
                enc: Encryption::AesCtr { key_len: key.len() },
                integ: Integrity::None,
            };
            let mut material = key.to_vec();
            material.extend_from_slice(&[0; 4]);
            let built = build_mb(suite, C_CTR, H_NULL, &material, &[], false, false);
            material.zeroize();
            Ok(AesCipherOnly {
                esp: built?,
                what: DECRYPT_ONLY,
            })
        }
    }

    thread_local! {
        /// The records of [`CipherJobs`], kept between bursts.
        static CIPHER_RECORDS: RefCell<Vec<RawOp>> = const { RefCell::new(Vec::new()) };
    }

    /// A burst of buffers for an [`AesCipherOnly`], each with its IV (CBC) or first
    /// counter block (counter mode), transformed in place by [`CipherJobs::run`]. The
    /// buffers stay borrowed until the jobs are dropped.
    pub(crate) struct CipherJobs<'a> {
        records: Vec<RawOp>,
        /// The first `used` records are this burst's.
        used: usize,
        buffers: std::marker::PhantomData<&'a mut [u8]>,
    }

    impl<'a> CipherJobs<'a> {
        pub(crate) fn new() -> CipherJobs<'a> {
            let records = CIPHER_RECORDS.with(|c| std::mem::take(&mut *c.borrow_mut()));
            CipherJobs {
                records,
                used: 0,
                buffers: std::marker::PhantomData,
            }
        }

        /// Adds `buf` (for CBC, whole blocks) with its 16-byte IV or counter block.
        pub(crate) fn push(&mut self, buf: &'a mut [u8], iv: &[u8; 16]) {
            if self.records.len() == self.used {
                self.records.push(RawOp::empty());
            }
            // A record of an earlier burst, rewritten field by field (over 200 bytes).
            let r = &mut self.records[self.used];
            r.reset();
            r.cipher_len = buf.len() as u64;
            r.iv = *iv;
            r.iv_len = 16;
            r.buf = buf.as_mut_ptr();
            self.used += 1;
        }

        /// Runs every job; [`CipherJobs::completed`] then tells which the library did.
        pub(crate) fn run(&mut self, cipher: &AesCipherOnly) {
            cipher.esp.run(cipher.what, &mut self.records[..self.used]);
        }

        /// Whether job `k` (in the order pushed) completed.
        pub(crate) fn completed(&self, k: usize) -> bool {
            k < self.used && self.records[k].status == 0
        }
    }

    impl Drop for CipherJobs<'_> {
        fn drop(&mut self) {
            // The used records point into buffers no longer borrowed: cleared before they
            // wait for the next burst (and `push` rewrites every field the shim reads).
            for r in self.records[..self.used].iter_mut() {
                r.reset();
            }
            let records = std::mem::take(&mut self.records);
            CIPHER_RECORDS.with(|c| *c.borrow_mut() = records);
        }
    }

    /// AH's ICV through the library for `integ`: every AH algorithm has a multi-buffer
    /// path (HMACs and AES-XCBC-MAC as ESP with NULL encryption, AES-GMAC as ESP's
    /// AES-GMAC, whose key is AH's: AES key then salt). The key length was checked.
    /// `batch` as for [`multi_buffer_esp_key`].
    pub(crate) fn multi_buffer_ah(
        integ: Integrity,
        key: &[u8],
        batch: bool,
    ) -> Option<Result<Box<dyn AhBurst>, CryptoError>> {
        let (suite, enc_key, auth_key): (Suite, &[u8], &[u8]) = match integ {
            Integrity::None => return None,
            Integrity::AesGmac { key_len } => (
                Suite {
                    enc: Encryption::AesGmac { key_len },
                    integ: Integrity::None,
                },
                key,
                &[],
            ),
            _ => (
                Suite {
                    enc: Encryption::Null,
                    integ,
                },
                &[],
                key,
            ),
        };
        let (cipher, hash) = library_ids(suite)?;
        Some(
            build_mb(suite, cipher, hash, enc_key, auth_key, false, batch)
                .map(|esp| Box::new(MbAh { esp }) as Box<dyn AhBurst>),
        )
    }

    fn build_mb(
        suite: Suite,
        cipher: i32,
        hash: i32,
        enc_key: &[u8],
        auth_key: &[u8],
        esn: bool,
        batch: bool,
    ) -> Result<MbEsp, CryptoError> {
        let mut keys = Box::new(KeyStore {
            enc: [0; 256],
            dec: [0; 256],
            ipad: [0; 64],
            opad: [0; 64],
            k1: [0; 256],
            k2: [0; 16],
            k3: [0; 16],
        });
        let salt_at = |off: usize| {
            let mut s = [0u8; 4];
            let n = enc_key.len() - off;
            s[..n.min(4)].copy_from_slice(&enc_key[off..off + n.min(4)]);
            s
        };
        let (mode, aes_key): (Mode, &[u8]) = match suite.enc {
            Encryption::AesCtr { key_len } => (
                Mode::EncryptThenMac {
                    ctr_nonce: salt_at(key_len),
                },
                &enc_key[..key_len],
            ),
            Encryption::AesCbc { key_len } => (
                Mode::EncryptThenMac { ctr_nonce: [0; 4] },
                &enc_key[..key_len],
            ),
            Encryption::AesCcm { key_len, .. } => {
                let s = salt_at(key_len);
                (
                    Mode::Ccm {
                        salt: [s[0], s[1], s[2]],
                    },
                    &enc_key[..key_len],
                )
            }
            Encryption::ChaCha20Poly1305 => {
                keys.enc[..32].copy_from_slice(&enc_key[..32]);
                keys.dec[..32].copy_from_slice(&enc_key[..32]);
                (Mode::ChaCha { salt: salt_at(32) }, &[])
            }
            // The GMAC key goes through the GCM precomputation below, not the AES one.
            Encryption::AesGmac { key_len } => (
                Mode::Gmac {
                    salt: salt_at(key_len),
                },
                &[],
            ),
            _ => (Mode::EncryptThenMac { ctr_nonce: [0; 4] }, &[]),
        };
        let key_bytes = match suite.enc {
            Encryption::ChaCha20Poly1305 => 32,
            _ => aes_key.len() as u64,
        };
        let gcm_key = match suite.enc {
            Encryption::AesGmac { key_len } => Some(GcmKeyData::precompute(&enc_key[..key_len])?),
            _ => None,
        };
        let gcm_batch = match (&gcm_key, suite.enc) {
            (Some(data), Encryption::AesGmac { key_len }) if batch => {
                GcmBatchKey::new(data, key_len)
            }
            _ => None,
        };
        let ks = &mut *keys;
        let rc = with_mgr(|m| {
            let mut rc = 0;
            if !aes_key.is_empty() {
                // SAFETY: m is this thread's live manager; aes_key has key_bytes (16, 24
                // or 32) readable bytes; enc and dec have room for a 240-byte schedule.
                rc |= unsafe {
                    espgw_mb_aes_keyexp(
                        m,
                        aes_key.len() as u32,
                        aes_key.as_ptr(),
                        ks.enc.as_mut_ptr(),
                        ks.dec.as_mut_ptr(),
                    )
                };
            }
            match hash {
                H_XCBC if auth_key.len() == 16 => {
                    // SAFETY: a 16-byte key; k1 has room for 176 bytes, k2 and k3 for 16.
                    unsafe {
                        espgw_mb_xcbc_keyexp(
                            m,
                            auth_key.as_ptr(),
                            ks.k1.as_mut_ptr(),
                            ks.k2.as_mut_ptr(),
                            ks.k3.as_mut_ptr(),
                        )
                    }
                }
                H_XCBC => rc = -1,
                H_SHA1 | H_SHA256 | H_SHA384 | H_SHA512 | H_MD5 => {
                    // SAFETY: auth_key's bytes are readable; ipad and opad hold the
                    // largest state (SHA-512, 64 bytes); the shim refuses keys longer
                    // than the hash's block.
                    rc |= unsafe {
                        espgw_mb_hmac_precompute(
                            m,
                            hash,
                            auth_key.as_ptr(),
                            auth_key.len() as u32,
                            ks.ipad.as_mut_ptr(),
                            ks.opad.as_mut_ptr(),
                        )
                    }
                }
                _ => {}
            }
            rc
        })
        .ok_or_else(|| CryptoError::Backend("no intel-ipsec-mb manager".into()))?;
        if rc != 0 {
            return Err(CryptoError::Backend(format!(
                "intel-ipsec-mb key preparation failed for {suite}"
            )));
        }
        let chacha_batch =
            batch && suite.enc == Encryption::ChaCha20Poly1305 && crate::chacha_batch::supported();
        let chacha_long = if chacha_batch && crate::ipsec_mb::chacha_long_texts_to_aws_lc() {
            Some(ChaChaLong {
                key: LcChaCha::new(enc_key, suite, esn)?,
                text_max: crate::chacha_batch::text_max(),
            })
        } else {
            None
        };
        Ok(MbEsp {
            suite,
            esn,
            mode,
            cipher,
            hash,
            key_bytes,
            keys,
            gcm_key,
            gcm_batch,
            chacha_batch,
            chacha_long,
        })
    }

    /// Per-thread scratch reused by every call (no allocation per burst once grown).
    #[derive(Default)]
    struct Scratch {
        /// The burst's records: the first `used` are this call's. Records stay between
        /// calls and are rewritten in place, field by field ([`RawOp::reset`] and the
        /// layout), rather than built aside and copied in: a record is over 200 bytes.
        ops: Vec<RawOp>,
        used: usize,
        /// `ops[j]` belongs to the caller's op `index[j]`.
        index: Vec<usize>,
        /// CBC IVs of a burst, drawn in one call.
        ivs: Vec<u8>,
    }

    impl Scratch {
        fn clear(&mut self) {
            self.used = 0;
            self.index.clear();
        }

        /// The next record, reset to nothing to do; it counts once [`Scratch::keep`] is
        /// called.
        fn next(&mut self) -> &mut RawOp {
            if self.ops.len() == self.used {
                self.ops.push(RawOp::empty());
            }
            let r = &mut self.ops[self.used];
            r.reset();
            r
        }

        /// Keeps the record [`Scratch::next`] gave, for the caller's op `i`.
        fn keep(&mut self, i: usize) {
            self.used += 1;
            self.index.push(i);
        }

        /// This call's records.
        fn live(&mut self) -> &mut [RawOp] {
            &mut self.ops[..self.used]
        }
    }

    thread_local! {
        static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
    }

    impl RawOp {
        /// Zeroes every pointer, length and offset the shim reads, leaving the arrays: only
        /// their first `iv_len` / `aad_len` bytes are read, and `tag` and `expect` are
        /// written before they are read.
        fn reset(&mut self) {
            self.buf = std::ptr::null_mut();
            self.cipher_off = 0;
            self.cipher_len = 0;
            self.hash_off = 0;
            self.hash_len = 0;
            self.iv_len = 0;
            self.aad_len = 0;
            self.status = -1;
            self.tag_out = std::ptr::null_mut();
        }

        /// A record with nothing to do (no packet, no lengths), as [`RawOp::reset`] leaves
        /// one.
        fn empty() -> RawOp {
            RawOp {
                buf: std::ptr::null_mut(),
                cipher_off: 0,
                cipher_len: 0,
                hash_off: 0,
                hash_len: 0,
                iv: [0; 16],
                iv_len: 0,
                aad: [0; 16],
                aad_len: 0,
                tag: [0; 64],
                expect: [0; 32],
                status: -1,
                tag_out: std::ptr::null_mut(),
            }
        }
    }

    impl MbEsp {
        fn raw_sa(&self) -> RawSa {
            let k = &*self.keys;
            RawSa {
                cipher: self.cipher,
                hash: self.hash,
                key_bytes: self.key_bytes,
                enc_keys: k.enc.as_ptr(),
                dec_keys: k.dec.as_ptr(),
                ipad: k.ipad.as_ptr(),
                opad: k.opad.as_ptr(),
                k1: k.k1.as_ptr(),
                k2: k.k2.as_ptr(),
                k3: k.k3.as_ptr(),
                gcm_key: self
                    .gcm_key
                    .as_ref()
                    .map_or(std::ptr::null(), GcmKeyData::as_ptr),
                // The ICV: for every suite here one of the library's (truncated) lengths.
                tag_len: self.suite.icv_len() as u64,
                chacha_batch: u64::from(self.chacha_batch),
            }
        }

        fn min_len(&self) -> usize {
            ESP_HEADER_LEN + self.suite.iv_len() + self.suite.icv_len()
        }

        /// The aws-lc-rs transform for a packet of `esp_len` bytes (at least
        /// [`Self::min_len`]) whose text is longer than the ChaCha20-Poly1305 kernel takes,
        /// where this SA sends those there.
        fn long_text(&self, esp_len: usize) -> Option<&LcChaCha> {
            let long = self.chacha_long.as_ref()?;
            (esp_len - self.min_len() > long.text_max).then_some(&long.key)
        }

        /// Runs `what` over every op in `ops`; on return each op's status says whether
        /// the library completed it.
        fn run(&self, what: c_int, ops: &mut [RawOp]) {
            if ops.is_empty() {
                return;
            }
            let sa = self.raw_sa();
            let done = with_mgrs(|m, sha| {
                // SAFETY: m is this thread's live manager and sha null or its live SHA
                // extensions' manager (same instance, same thread); sa points into self.keys, alive
                // and unchanged for the call; every op's buf points at the start of a
                // distinct buffer (an ESP packet, an AH packet's covered text, or a
                // buffer of `CipherJobs`, which holds its borrow) exclusively borrowed by
                // the caller for this call, and its offsets and
                // lengths were computed from that buffer's length (cipher and hash
                // ranges, and for ESP with ESN the 4 bytes after the hashed text, inside
                // the ICV's room); iv, aad and tag are arrays inside the op; tag_out is
                // null or points at `tag_len` writable bytes no other op names: a sealed
                // ESP packet's ICV room (the last `tag_len` bytes of its buffer) or an AH
                // op's own `Icv` slot (MAX_ICV bytes, borrowed by the caller for the call).
                unsafe { espgw_mb_esp(m, sha, &sa, what, ops.as_mut_ptr(), ops.len() as u32) };
            });
            if done.is_none() {
                // No manager on this thread: nothing ran, every op stays failed.
                for op in ops.iter_mut() {
                    op.status = -1;
                }
            }
        }

        /// The cipher's IV or nonce as the library takes it, from the packet's IV.
        fn library_iv(&self, op: &mut RawOp, packet_iv: &[u8]) {
            match self.mode {
                Mode::EncryptThenMac { ctr_nonce } => match self.suite.enc {
                    // RFC 3686 §4: nonce || IV; the library appends the block counter 1.
                    Encryption::AesCtr { .. } => {
                        op.iv[..4].copy_from_slice(&ctr_nonce);
                        op.iv[4..12].copy_from_slice(packet_iv);
                        op.iv_len = 12;
                    }
                    Encryption::AesCbc { .. } => {
                        op.iv.copy_from_slice(packet_iv);
                        op.iv_len = 16;
                    }
                    _ => op.iv_len = 0,
                },
                Mode::Ccm { salt } => {
                    op.iv[..3].copy_from_slice(&salt);
                    op.iv[3..11].copy_from_slice(packet_iv);
                    op.iv_len = 11;
                }
                Mode::ChaCha { salt } | Mode::Gmac { salt } => {
                    op.iv[..4].copy_from_slice(&salt);
                    op.iv[4..12].copy_from_slice(packet_iv);
                    op.iv_len = 12;
                }
            }
        }

        /// Combined modes authenticate the text with an AAD apart; encrypt-then-MAC and
        /// GMAC hash one range of the packet from its SPI on.
        fn is_combined(&self) -> bool {
            matches!(self.mode, Mode::Ccm { .. } | Mode::ChaCha { .. })
        }

        /// Lays out one packet's op in `op` (a record just reset): cipher
        /// range after the IV, hash range (the whole packet up to the ICV for
        /// encrypt-then-MAC, plus the high sequence bits with ESN, written into the ICV's
        /// room; the text for combined modes, with the AAD apart). Returns false for a
        /// packet whose text does not fit the cipher.
        fn layout(&self, esp: &mut [u8], seq: u64, op: &mut RawOp) -> bool {
            let iv_len = self.suite.iv_len();
            let text_end = esp.len() - self.suite.icv_len();
            let cipher_off = ESP_HEADER_LEN + iv_len;
            let cipher_len = text_end - cipher_off;
            // CBC works on whole blocks: a text that is not is malformed (the sender's
            // padding is wrong), and the library would refuse it anyway.
            if matches!(self.suite.enc, Encryption::AesCbc { .. }) && !cipher_len.is_multiple_of(16)
            {
                return false;
            }
            op.cipher_off = cipher_off as u64;
            op.cipher_len = cipher_len as u64;
            self.library_iv(op, &esp[ESP_HEADER_LEN..cipher_off]);
            if self.is_combined() {
                let (aad, aad_len) = aead_aad(esp, seq, self.esn);
                op.aad[..12].copy_from_slice(&aad);
                op.aad_len = aad_len as u64;
                op.hash_off = cipher_off as u64;
                op.hash_len = cipher_len as u64;
            } else {
                op.hash_len = text_end as u64;
                if self.esn {
                    // RFC 4303 §2.2.1: the ICV also covers the high sequence bits, which
                    // are not sent; they go where the ICV will be, for the hash to run
                    // over one contiguous range.
                    esp[text_end..text_end + 4]
                        .copy_from_slice(&((seq >> 32) as u32).to_be_bytes());
                    op.hash_len += 4;
                }
            }
            // Taken last, after every write to the packet above: the pointer the library
            // uses is then the packet's latest borrow.
            op.buf = esp.as_mut_ptr();
            true
        }

        /// Writes the packet's IV: the sequence number for counter modes, the next
        /// 16 bytes of `cbc_ivs` for CBC.
        fn write_iv(&self, esp: &mut [u8], seq: u64, cbc_iv: &[u8]) {
            let iv = &mut esp[ESP_HEADER_LEN..ESP_HEADER_LEN + self.suite.iv_len()];
            match self.suite.enc {
                Encryption::AesCbc { .. } => iv.copy_from_slice(cbc_iv),
                Encryption::Null => {}
                // RFC 3686 §3, RFC 4309 §3.1, RFC 7634 §2: unique per key; the sequence
                // number is.
                _ => iv.copy_from_slice(&seq.to_be_bytes()),
            }
        }

        /// AES-GMAC over `items`, a chunk at a time: `fill(item, op, scratch_tag)` writes
        /// an item's record (what the ICV covers, the nonce, where its tag goes: its ICV
        /// bytes or `scratch_tag`) or returns false for an item too short to run; then
        /// `done(i, item, tag)` gets every item that ran, with its scratch tag. With
        /// `self.esn` (ESP's SAs only: AH's transform is built without, the data plane
        /// appending AH's high bits to the covered bytes) every record carries its high
        /// sequence bits.
        fn gmac_run<T>(
            &self,
            items: &mut [T],
            mut fill: impl FnMut(&mut T, &mut RawGmacOp, *mut u8) -> bool,
            mut done: impl FnMut(usize, &mut T, &[u8; 16]),
        ) {
            let (Some(key), Encryption::AesGmac { key_len }) =
                (self.gcm_key.as_ref(), self.suite.enc)
            else {
                return;
            };
            GMAC.with(|cell| {
                let (raw, tags) = &mut *cell.borrow_mut();
                // One pointer for all the scratch tags, taken once: the library writes
                // through offsets of it, and the tags are read back through `tags`.
                let tag_base: *mut [u8; 16] = tags.as_mut_ptr();
                for (c, chunk) in items.chunks_mut(GMAC_CHUNK).enumerate() {
                    let mut used = 0;
                    let mut index = [0u8; GMAC_CHUNK];
                    for (k, item) in chunk.iter_mut().enumerate() {
                        raw[used].status = GMAC_PENDING;
                        if fill(item, &mut raw[used], tag_base.wrapping_add(used).cast()) {
                            index[used] = k as u8;
                            used += 1;
                        }
                    }
                    if used == 0 {
                        continue;
                    }
                    let batch_key = self
                        .gcm_batch
                        .as_ref()
                        .map_or(std::ptr::null(), |b| b.as_ptr());
                    let ran = with_mgr(|m| {
                        // SAFETY: m is this thread's live manager; the key data is a
                        // live, precomputed gcm_key_data of `key_len` bytes, the batch
                        // data (or null) computed from it; each of the first `used`
                        // records was written by `fill` from an item borrowed for this
                        // call (what the ICV covers, and its ICV bytes or a slot of
                        // `tags`), lengths from those buffers, its status pending.
                        unsafe {
                            espgw_gmac_direct(
                                m,
                                batch_key,
                                key.as_ptr(),
                                key_len as u32,
                                u32::from(self.esn),
                                raw.as_mut_ptr(),
                                used as u32,
                            )
                        }
                    })
                    .is_some();
                    if !ran {
                        // No manager on this thread: nothing ran, and the scratch tags are
                        // stale; every item stays failed.
                        continue;
                    }
                    for ((tag, r), &k) in tags[..used].iter().zip(&raw[..used]).zip(&index) {
                        // Every op completes; one that did not would stay failed.
                        if r.status == GMAC_DONE {
                            let k = usize::from(k);
                            done(c * GMAC_CHUNK + k, &mut chunk[k], tag);
                        }
                    }
                }
            });
        }

        /// The nonce of RFC 4543 §3.1: salt || the packet's 8-byte IV.
        fn gmac_nonce(&self, iv: &[u8]) -> [u8; 12] {
            let mut n = [0u8; 12];
            if let Mode::Gmac { salt } = self.mode {
                n[..4].copy_from_slice(&salt);
            }
            n[4..].copy_from_slice(iv);
            n
        }

        /// An ESP packet's AES-GMAC record: the ICV covers SPI, sequence number, IV,
        /// payload and trailer (RFC 4543 §3.3), which stay in the clear, and with ESN the
        /// high half of `seq` after the SPI; the tag goes to the ICV bytes (`tag` null) or
        /// to `tag`.
        fn gmac_esp_op(&self, esp: &mut [u8], seq: u64, r: &mut RawGmacOp, tag: *mut u8) -> bool {
            let icv = self.suite.icv_len();
            if esp.len() < self.min_len() {
                return false;
            }
            let text_end = esp.len() - icv;
            r.iv = self.gmac_nonce(&esp[ESP_HEADER_LEN..ESP_HEADER_LEN + 8]);
            // Both pointers from one: the covered bytes and the ICV are disjoint.
            let base = esp.as_mut_ptr();
            r.covered = base;
            r.covered_len = text_end as u64;
            r.tag = if tag.is_null() {
                base.wrapping_add(text_end)
            } else {
                tag
            };
            r.tag_len = icv as u32;
            if self.esn {
                r.esn_high[..4].copy_from_slice(&((seq >> 32) as u32).to_be_bytes());
                r.esn_high_len = 4;
            } else {
                r.esn_high_len = 0;
            }
            true
        }

        /// Seals ESP AES-GMAC packets; the IV is the sequence number (RFC 4543 §3.1).
        fn gmac_seal(&self, ops: &mut [EspOp<'_>]) {
            let min = self.min_len();
            self.gmac_run(
                ops,
                |op, r, _| {
                    if op.esp.len() >= min {
                        op.esp[ESP_HEADER_LEN..ESP_HEADER_LEN + 8]
                            .copy_from_slice(&op.seq.to_be_bytes());
                    }
                    self.gmac_esp_op(op.esp, op.seq, r, std::ptr::null_mut())
                },
                |_, _, _| {},
            );
        }

        /// Opens ESP AES-GMAC packets: each ICV recomputed and compared in constant time
        /// (there is nothing to decrypt). What fails loses everything after its IV.
        fn gmac_open(&self, ops: &mut [EspOp<'_>], ok: &mut [bool]) {
            let icv = self.suite.icv_len();
            for o in ok.iter_mut() {
                *o = false;
            }
            let n = ops.len().min(ok.len());
            self.gmac_run(
                &mut ops[..n],
                |op, r, scratch| self.gmac_esp_op(op.esp, op.seq, r, scratch),
                |i, op, tag| ok[i] = ct_eq(&tag[..icv], &op.esp[op.esp.len() - icv..]),
            );
            for (op, ok) in ops.iter_mut().zip(ok.iter()) {
                if !*ok {
                    let start = (ESP_HEADER_LEN + 8).min(op.esp.len());
                    op.esp[start..].fill(0);
                }
            }
        }

        fn seal(&self, ops: &mut [EspOp<'_>], given_ivs: Option<&[[u8; 16]]>) {
            if let Mode::Gmac { .. } = self.mode {
                return self.gmac_seal(ops);
            }
            let min = self.min_len();
            let icv = self.suite.icv_len();
            let cbc = matches!(self.suite.enc, Encryption::AesCbc { .. });
            // The library writes each tag straight into its packet's ICV room (the tag
            // is the ICV, `tag_len` = its length), except where ESN's high bits sit there
            // while the ICV is computed over them.
            let in_place = !self.icv_room_used();
            SCRATCH.with(|cell| {
                let s = &mut *cell.borrow_mut();
                s.clear();
                if cbc {
                    // RFC 3602 §2: unpredictable IVs, from the CSPRNG (ChaCha12 reseeded
                    // from the OS), one draw for the whole burst.
                    s.ivs.resize(ops.len() * 16, 0);
                    match given_ivs {
                        Some(v) => {
                            for (dst, src) in s.ivs.chunks_mut(16).zip(v) {
                                dst.copy_from_slice(src);
                            }
                        }
                        None => rand::thread_rng().fill_bytes(&mut s.ivs),
                    }
                }
                for (i, op) in ops.iter_mut().enumerate() {
                    if op.esp.len() < min {
                        continue;
                    }
                    if let Some(long) = self.long_text(op.esp.len()) {
                        if !long.seal(op.esp, op.seq) {
                            op.esp[ESP_HEADER_LEN + self.suite.iv_len()..].fill(0);
                        }
                        continue;
                    }
                    let cbc_iv = if cbc {
                        &s.ivs[i * 16..i * 16 + 16]
                    } else {
                        &[][..]
                    };
                    self.write_iv(op.esp, op.seq, cbc_iv);
                    let raw = s.next();
                    if self.layout(op.esp, op.seq, raw) {
                        if in_place {
                            // The ICV room, from the pointer the layout took last.
                            raw.tag_out = raw.buf.wrapping_add(op.esp.len() - icv);
                        }
                        s.keep(i);
                    } else {
                        // A seal that cannot run must not leave plaintext behind a zero
                        // ICV: the text is wiped and the peer drops the packet.
                        op.esp[ESP_HEADER_LEN + self.suite.iv_len()..].fill(0);
                    }
                }
                self.run(SEAL, s.live());
                for (raw, &i) in s.ops[..s.used].iter().zip(&s.index) {
                    let esp = &mut *ops[i].esp;
                    let text_end = esp.len() - icv;
                    if raw.status == 0 {
                        if !in_place {
                            esp[text_end..].copy_from_slice(&raw.tag[..icv]);
                        }
                    } else {
                        esp[ESP_HEADER_LEN + self.suite.iv_len()..].fill(0);
                    }
                }
            });
        }

        fn open(&self, ops: &mut [EspOp<'_>], ok: &mut [bool]) {
            if let Mode::Gmac { .. } = self.mode {
                return self.gmac_open(ops, ok);
            }
            let min = self.min_len();
            let icv = self.suite.icv_len();
            // Per SA, not per packet (as sealing's `in_place`).
            let save_icv = self.icv_room_used();
            for o in ok.iter_mut() {
                *o = false;
            }
            SCRATCH.with(|cell| {
                let s = &mut *cell.borrow_mut();
                s.clear();
                for (i, op) in ops.iter_mut().enumerate().take(ok.len()) {
                    if op.esp.len() < min {
                        continue;
                    }
                    if let Some(long) = self.long_text(op.esp.len()) {
                        // Authenticated before decrypted, by aws-lc-rs; a forgery's text
                        // is wiped below with every other failure's.
                        ok[i] = long.open(op.esp, op.seq);
                        continue;
                    }
                    let text_end = op.esp.len() - icv;
                    let raw = s.next();
                    // Saved before the layout where it writes into the ICV's room.
                    if save_icv {
                        raw.expect[..icv].copy_from_slice(&op.esp[text_end..]);
                    }
                    if self.layout(op.esp, op.seq, raw) {
                        s.keep(i);
                    }
                }
                if self.is_combined() {
                    self.run(OPEN_AEAD, s.live());
                    self.settle(ops, ok, s);
                } else {
                    // Authenticate before decrypting: the ICVs alone first.
                    self.run(HASH_ONLY, s.live());
                    self.settle(ops, ok, s);
                    if self.cipher != C_NULL {
                        self.decrypt_authentic(ok, s);
                    }
                }
            });
            let text_start = ESP_HEADER_LEN + self.suite.iv_len();
            for (op, ok) in ops.iter_mut().zip(ok.iter()) {
                if !*ok {
                    let start = text_start.min(op.esp.len());
                    op.esp[start..].fill(0);
                }
            }
        }

        /// Whether opening writes into a packet's ICV room: ESN's high sequence bits go
        /// there for an ICV computed apart from the cipher (RFC 4303 §2.2.1; the combined
        /// modes take them in their AAD). Only then is the received ICV saved first and
        /// put back after: two copies a packet (calls to memcpy, one length per SA) that
        /// every other SA goes without.
        fn icv_room_used(&self) -> bool {
            self.esn && !self.is_combined()
        }

        /// Sets `ok` from each completed op's tag (constant-time compare against the ICV
        /// received), and puts the received ICV back where ESN's high bits were written.
        fn settle(&self, ops: &mut [EspOp<'_>], ok: &mut [bool], s: &mut Scratch) {
            let icv = self.suite.icv_len();
            let saved = self.icv_room_used();
            for (raw, &i) in s.ops[..s.used].iter().zip(&s.index) {
                let esp = &mut *ops[i].esp;
                let text_end = esp.len() - icv;
                let received = if saved {
                    esp[text_end..].copy_from_slice(&raw.expect[..icv]);
                    &raw.expect[..icv]
                } else {
                    &esp[text_end..]
                };
                ok[i] = raw.status == 0 && ct_eq(&raw.tag[..icv], received);
            }
        }

        /// The second pass of encrypt-then-MAC: cipher-only jobs for the packets whose
        /// ICV was good; a job the library does not complete turns its packet bad.
        fn decrypt_authentic(&self, ok: &mut [bool], s: &mut Scratch) {
            let mut kept = 0;
            for j in 0..s.used {
                if ok[s.index[j]] {
                    // Moved only past a forged one: in the common burst, all authentic,
                    // every record would be swapped with itself, and a 192-byte swap is
                    // three calls to memmove (`perf`, AES-128-CTR with AES-XCBC-MAC-96
                    // at 1024 B inbound: 5 % of the time).
                    if kept != j {
                        s.ops.swap(kept, j);
                        s.index.swap(kept, j);
                    }
                    kept += 1;
                }
            }
            s.used = kept;
            s.index.truncate(kept);
            self.run(DECRYPT_ONLY, s.live());
            for (raw, &i) in s.ops[..s.used].iter().zip(&s.index) {
                if raw.status != 0 {
                    ok[i] = false;
                }
            }
        }
    }

    /// AH's ICVs through hash-only jobs of the equivalent ESP transform.
    struct MbAh {
        esp: MbEsp,
    }

    impl AhBurst for MbAh {
        fn tag_burst(&self, ops: &mut [AhOp<'_>]) {
            let icv = self.esp.suite.icv_len();
            if let Mode::Gmac { .. } = self.esp.mode {
                for op in ops.iter_mut() {
                    op.icv.clear();
                }
                // RFC 4543 §5: the nonce is salt || the AH header's IV.
                self.esp.gmac_run(
                    ops,
                    |op, r, scratch| {
                        r.iv = self.esp.gmac_nonce(&op.iv);
                        r.covered = op.text.as_ptr();
                        r.covered_len = op.text.len() as u64;
                        r.tag = scratch;
                        r.tag_len = icv as u32;
                        true
                    },
                    |_, op, tag| op.icv.set(&tag[..icv]),
                );
                return;
            }
            SCRATCH.with(|cell| {
                let s = &mut *cell.borrow_mut();
                s.clear();
                for (i, op) in ops.iter_mut().enumerate() {
                    let raw = s.next();
                    raw.buf = op.text.as_mut_ptr();
                    raw.hash_len = op.text.len() as u64;
                    // The library writes the ICV into the op's own slot (`icv` bytes of
                    // its MAX_ICV), not into the record to be copied out after.
                    raw.tag_out = op.icv.out_ptr();
                    if let Mode::Gmac { salt } = self.esp.mode {
                        // RFC 4543 §3.1 (AH: §5): the nonce is salt || the header's IV.
                        raw.iv[..4].copy_from_slice(&salt);
                        raw.iv[4..12].copy_from_slice(&op.iv);
                        raw.iv_len = 12;
                    }
                    s.keep(i);
                }
                self.esp.run(HASH_ONLY, s.live());
                for (op, raw) in ops.iter_mut().zip(&s.ops[..s.used]) {
                    if raw.status == 0 {
                        op.icv.mark_set(icv);
                    } else {
                        op.icv.clear();
                    }
                }
            });
        }
    }

    impl EspKey for MbEsp {
        fn suite(&self) -> Suite {
            self.suite
        }

        fn seal_burst(&self, ops: &mut [EspOp<'_>]) {
            self.seal(ops, None);
        }

        fn seal_burst_ivs(&self, ops: &mut [EspOp<'_>], cbc_ivs: &[[u8; 16]]) {
            if cbc_ivs.len() < ops.len() {
                self.seal(ops, None);
            } else {
                self.seal(ops, Some(cbc_ivs));
            }
        }

        fn open_burst(&self, ops: &mut [EspOp<'_>], ok: &mut [bool]) {
            self.open(ops, ok);
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;
        use crate::ipsec_mb::{chacha_long_texts_on_this_thread, ChaChaLongTexts};

        const CHACHA: Suite = Suite {
            enc: Encryption::ChaCha20Poly1305,
            integ: Integrity::None,
        };

        fn chacha_sa(batch: bool) -> MbEsp {
            build_mb(CHACHA, C_CHACHA, H_CHACHA, &[7; 36], &[], false, batch).unwrap()
        }

        /// An SA built under each choice sends exactly the texts longer than the kernel's
        /// limit to aws-lc-rs where the choice says so, and none where it does not or where
        /// the provider does not use the kernel (`MbApi::Direct`/`Job`).
        #[test]
        fn long_texts_go_where_the_choice_says() {
            let min = ESP_HEADER_LEN + 8 + 16;
            for choice in [
                ChaChaLongTexts::Library,
                ChaChaLongTexts::AwsLc,
                ChaChaLongTexts::Auto,
            ] {
                let to_aws_lc = chacha_long_texts_on_this_thread(choice).unwrap();
                let isa = crate::chacha_batch::isa();
                let expected = match choice {
                    ChaChaLongTexts::Library => false,
                    ChaChaLongTexts::AwsLc => isa.is_some(),
                    ChaChaLongTexts::Auto => isa == Some(crate::chacha_batch::Isa::Avx2),
                };
                assert_eq!(to_aws_lc, expected, "{choice:?}");
                let sa = chacha_sa(true);
                assert_eq!(sa.chacha_long.is_some(), to_aws_lc, "{choice:?}");
                let max = crate::chacha_batch::text_max();
                assert!(sa.long_text(min).is_none());
                assert!(sa.long_text(min + max).is_none(), "{choice:?}");
                assert_eq!(
                    sa.long_text(min + max + 1).is_some(),
                    to_aws_lc,
                    "{choice:?}"
                );
                assert_eq!(sa.long_text(min + 1500).is_some(), to_aws_lc, "{choice:?}");
                assert!(
                    chacha_sa(false).long_text(min + 1500).is_none(),
                    "{choice:?}"
                );
            }
            chacha_long_texts_on_this_thread(ChaChaLongTexts::Auto);
        }
    }
}
