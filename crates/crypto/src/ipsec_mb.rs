//! The x86-64 fast path: intel-ipsec-mb's job API, reached through `csrc/ipsec_mb_shim.c`.
//!
//! This module and the shim are the only places of the project where Rust calls C
//! (besides the I/O back-ends): every `unsafe` block states why it is sound.
//!
//! Two of the library's interfaces are bound: the direct API (one call per packet) and
//! the job API (a burst of jobs per call, as DPDK uses it). On the CPUs measured so far
//! the direct API is faster for AES-GCM, so it is the default; `bench dataplane` reports
//! both.
//!
//! An `IMB_MGR` holds mutable per-thread state (job queues), so each thread owns one,
//! created on first use; keys (`gcm_key_data`) are read-only after precomputation and are
//! shared by all threads.
#![allow(unsafe_code)]

#[cfg(espgw_ipsec_mb)]
pub(crate) use imp::{with_mgr, GcmKeyData, ImbMgr};
#[cfg(espgw_ipsec_mb)]
pub use imp::{IpsecMbProvider, MbApi};

/// Stands in when espgw is built without intel-ipsec-mb: an uninhabited type, so no value
/// of it can exist, yet every caller that names the provider compiles unchanged (the
/// portable build) and `with_api` says why it is missing.
#[cfg(not(espgw_ipsec_mb))]
pub enum IpsecMbProvider {}

#[cfg(not(espgw_ipsec_mb))]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MbApi {
    Direct,
    Job,
}

#[cfg(not(espgw_ipsec_mb))]
impl IpsecMbProvider {
    pub fn new() -> Result<Self, crate::Unavailable> {
        Self::with_api(MbApi::Direct)
    }
    pub fn with_api(_: MbApi) -> Result<Self, crate::Unavailable> {
        Err(crate::Unavailable::NotBuilt)
    }
}

#[cfg(not(espgw_ipsec_mb))]
impl crate::CryptoProvider for IpsecMbProvider {
    fn name(&self) -> String {
        match *self {}
    }
    fn aead_key(
        &self,
        _: crate::AeadAlgorithm,
        _: &[u8],
        _: usize,
    ) -> Result<std::sync::Arc<dyn crate::AeadKey>, crate::CryptoError> {
        match *self {}
    }
}

#[cfg(espgw_ipsec_mb)]
mod imp {
    use std::cell::RefCell;
    use std::ffi::{c_char, c_int, CStr};
    use std::sync::Arc;

    use zeroize::Zeroize;

    use crate::ct::ct_eq;
    use crate::{check_key, AeadAlgorithm, AeadKey, AeadOp, CryptoError, CryptoProvider};

    /// Opaque `IMB_MGR`.
    #[repr(C)]
    pub(crate) struct ImbMgr {
        _private: [u8; 0],
    }

    /// Mirrors `struct espgw_aead_op` in the shim.
    #[repr(C)]
    struct RawAeadOp {
        text: *mut u8,
        len: u64,
        iv: *const u8,
        aad: *const u8,
        aad_len: u64,
        tag: *mut u8,
        tag_len: u64,
        status: i64,
    }

    extern "C" {
        fn espgw_mb_new() -> *mut ImbMgr;
        fn espgw_mb_free(m: *mut ImbMgr);
        fn espgw_mb_arch(m: *mut ImbMgr) -> *const c_char;
        fn espgw_gcm_key_size() -> usize;
        fn espgw_gcm_precompute(
            m: *mut ImbMgr,
            key_bytes: u32,
            key: *const u8,
            kd: *mut u8,
        ) -> c_int;
        fn espgw_gcm_direct(
            m: *mut ImbMgr,
            kd: *const u8,
            key_bytes: u32,
            encrypt: c_int,
            ops: *mut RawAeadOp,
            n: u32,
        ) -> c_int;
        fn espgw_gcm_burst(
            m: *mut ImbMgr,
            kd: *const u8,
            key_bytes: u32,
            encrypt: c_int,
            ops: *mut RawAeadOp,
            n: u32,
        ) -> c_int;
    }

    /// A thread's manager; freed with the thread.
    struct Mgr(*mut ImbMgr);

    impl Drop for Mgr {
        fn drop(&mut self) {
            // SAFETY: the pointer came from espgw_mb_new, is non-null, and is freed once.
            unsafe { espgw_mb_free(self.0) }
        }
    }

    thread_local! {
        static MGR: RefCell<Option<Mgr>> = const { RefCell::new(None) };
    }

    /// Runs `f` with this thread's manager, creating it on first use.
    pub(crate) fn with_mgr<R>(f: impl FnOnce(*mut ImbMgr) -> R) -> Option<R> {
        MGR.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                // SAFETY: espgw_mb_new has no preconditions; it returns NULL on failure.
                let p = unsafe { espgw_mb_new() };
                if p.is_null() {
                    return None;
                }
                *slot = Some(Mgr(p));
            }
            slot.as_ref().map(|m| f(m.0))
        })
    }

    /// Which of the library's two interfaces runs the operations.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum MbApi {
        /// One call per packet, no job structures (measured faster for GCM here).
        Direct,
        /// The job API, a burst at a time (what DPDK's aesni_gcm driver uses).
        Job,
    }

    pub struct IpsecMbProvider {
        arch: String,
        api: MbApi,
    }

    impl IpsecMbProvider {
        /// The direct API.
        pub fn new() -> Result<Self, crate::Unavailable> {
            Self::with_api(MbApi::Direct)
        }

        pub fn with_api(api: MbApi) -> Result<Self, crate::Unavailable> {
            with_mgr(|m| {
                // SAFETY: m is a live manager; the shim returns a static C string.
                let s = unsafe { CStr::from_ptr(espgw_mb_arch(m)) };
                IpsecMbProvider {
                    arch: s.to_string_lossy().into_owned(),
                    api,
                }
            })
            .ok_or(crate::Unavailable::NoManager)
        }
    }

    impl CryptoProvider for IpsecMbProvider {
        fn name(&self) -> String {
            match self.api {
                MbApi::Direct => format!("intel-ipsec-mb/{}", self.arch),
                MbApi::Job => format!("intel-ipsec-mb/{} job API", self.arch),
            }
        }

        fn aead_key(
            &self,
            alg: AeadAlgorithm,
            key: &[u8],
            icv_len: usize,
        ) -> Result<Arc<dyn AeadKey>, CryptoError> {
            check_key(alg, key, icv_len)?;
            let data = GcmKeyData::precompute(key)?;
            Ok(Arc::new(MbGcmKey {
                alg,
                icv_len,
                data,
                api: self.api,
            }))
        }

        fn multi_buffer_esp_key(
            &self,
            suite: crate::Suite,
            enc_key: &[u8],
            auth_key: &[u8],
            esn: bool,
        ) -> Option<Result<Arc<dyn crate::EspKey>, CryptoError>> {
            crate::ipsec_mb_esp::multi_buffer_esp_key(suite, enc_key, auth_key, esn)
        }

        fn multi_buffer_ah(
            &self,
            integ: crate::Integrity,
            key: &[u8],
        ) -> Option<Result<Box<dyn crate::AhBurst>, CryptoError>> {
            crate::ipsec_mb_esp::multi_buffer_ah(integ, key)
        }
    }

    /// 64-byte aligned storage: the library's AVX-512 code loads the key with aligned moves.
    #[derive(Clone, Copy)]
    #[repr(C, align(64))]
    struct Block64([u8; 64]);

    /// An AES key's `struct gcm_key_data` (round keys and GHASH powers), for AES-GCM and
    /// AES-GMAC; zeroized on drop.
    pub(crate) struct GcmKeyData(Vec<Block64>);

    impl GcmKeyData {
        /// Precomputes the key data of a 16-, 24- or 32-byte AES key.
        pub(crate) fn precompute(key: &[u8]) -> Result<GcmKeyData, CryptoError> {
            if !matches!(key.len(), 16 | 24 | 32) {
                return Err(CryptoError::BadKeyLength {
                    expected: 16,
                    got: key.len(),
                });
            }
            // SAFETY: a pure function returning sizeof(struct gcm_key_data).
            let size = unsafe { espgw_gcm_key_size() };
            let mut data = GcmKeyData(vec![Block64([0; 64]); size.div_ceil(64)]);
            let rc = with_mgr(|m| {
                // SAFETY: key points at key.len() readable bytes (16/24/32, checked above);
                // data is 64-byte aligned and at least sizeof(gcm_key_data) long.
                unsafe {
                    espgw_gcm_precompute(
                        m,
                        key.len() as u32,
                        key.as_ptr(),
                        data.0.as_mut_ptr().cast(),
                    )
                }
            })
            .ok_or_else(|| CryptoError::Backend("no intel-ipsec-mb manager".into()))?;
            if rc != 0 {
                return Err(CryptoError::Backend("GCM key precomputation failed".into()));
            }
            Ok(data)
        }

        /// The `struct gcm_key_data` for the library.
        pub(crate) fn as_ptr(&self) -> *const u8 {
            self.0.as_ptr().cast()
        }
    }

    impl Drop for GcmKeyData {
        fn drop(&mut self) {
            for b in &mut self.0 {
                b.0.zeroize();
            }
        }
    }

    struct MbGcmKey {
        alg: AeadAlgorithm,
        icv_len: usize,
        data: GcmKeyData,
        api: MbApi,
    }

    /// Ops handed to the library per call; bursts larger than this are split.
    const CHUNK: usize = 128;

    thread_local! {
        /// Per-thread scratch for the raw op array, reused so no call allocates or
        /// zero-fills it.
        static RAW: RefCell<Vec<RawAeadOp>> = RefCell::new(Vec::with_capacity(CHUNK));
        /// Per-thread scratch for the tags computed while opening: kept between calls so
        /// no call zero-fills 2 KiB. A slot is only read for an op the library completed,
        /// which wrote it in that same call.
        static TAGS: RefCell<[[u8; 16]; CHUNK]> = const { RefCell::new([[0u8; 16]; CHUNK]) };
    }

    impl MbGcmKey {
        /// Runs at most CHUNK ops through the library. For `encrypt` the tag goes to the
        /// op's ICV bytes; otherwise to `tags[i]`, for the caller to compare. Returns, per
        /// op, whether the library completed it.
        fn run(
            &self,
            ops: &mut [AeadOp<'_>],
            tags: Option<&mut [[u8; 16]; CHUNK]>,
            done: &mut [bool; CHUNK],
        ) {
            let icv = self.icv_len;
            let encrypt = tags.is_none();
            let tag_base: *mut [u8; 16] = match tags {
                Some(t) => t.as_mut_ptr(),
                None => std::ptr::null_mut(),
            };
            RAW.with(|cell| {
                let mut raw = cell.borrow_mut();
                raw.clear();
                let mut index = [0u8; CHUNK];
                for (i, op) in ops.iter_mut().enumerate().take(CHUNK) {
                    done[i] = false;
                    let Some(text_len) = op.buf.len().checked_sub(icv) else {
                        continue;
                    };
                    let base = op.buf.as_mut_ptr();
                    index[raw.len()] = i as u8;
                    raw.push(RawAeadOp {
                        text: base,
                        len: text_len as u64,
                        iv: op.nonce.as_ptr(),
                        aad: op.aad.as_ptr(),
                        aad_len: u64::from(op.aad_len.min(12)),
                        // Sealing writes the ICV right after the text, inside the same buffer.
                        tag: if encrypt {
                            base.wrapping_add(text_len)
                        } else {
                            tag_base.wrapping_add(i).cast()
                        },
                        tag_len: icv as u64,
                        status: -1,
                    });
                }
                if raw.is_empty() {
                    return;
                }
                with_mgr(|m| {
                    // SAFETY: every raw op points into a distinct `op.buf` (exclusively
                    // borrowed through `ops`) or into the caller's `tags` array (i < CHUNK),
                    // all alive until this call returns; lengths come from those slices; the
                    // key data is a live, precomputed gcm_key_data of the right size and
                    // alignment; `raw` holds raw.len() initialised ops.
                    unsafe {
                        (match self.api {
                            MbApi::Direct => espgw_gcm_direct,
                            MbApi::Job => espgw_gcm_burst,
                        })(
                            m,
                            self.data.as_ptr().cast(),
                            self.alg.key_len() as u32,
                            c_int::from(encrypt),
                            raw.as_mut_ptr(),
                            raw.len() as u32,
                        )
                    }
                });
                for (r, &i) in raw.iter().zip(index.iter()) {
                    done[usize::from(i)] = r.status == 0;
                }
            });
        }
    }

    impl AeadKey for MbGcmKey {
        fn algorithm(&self) -> AeadAlgorithm {
            self.alg
        }

        fn icv_len(&self) -> usize {
            self.icv_len
        }

        fn seal_burst(&self, ops: &mut [AeadOp<'_>]) {
            let mut done = [false; CHUNK];
            for chunk in ops.chunks_mut(CHUNK) {
                self.run(chunk, None, &mut done);
            }
        }

        fn open_burst(&self, ops: &mut [AeadOp<'_>], ok: &mut [bool]) {
            let icv = self.icv_len;
            for (chunk, ok) in ops.chunks_mut(CHUNK).zip(ok.chunks_mut(CHUNK)) {
                let mut done = [false; CHUNK];
                TAGS.with(|cell| {
                    let mut tags = cell.borrow_mut();
                    self.run(chunk, Some(&mut tags), &mut done);
                    compare(chunk, ok, &tags[..], &done, icv);
                });
            }
        }
    }

    /// Sets `ok[i]` for each op from its computed tag and zeroes the text of every op
    /// that failed.
    fn compare(
        chunk: &mut [AeadOp<'_>],
        ok: &mut [bool],
        tags: &[[u8; 16]],
        done: &[bool; CHUNK],
        icv: usize,
    ) {
        for (i, (op, ok)) in chunk.iter_mut().zip(ok.iter_mut()).enumerate() {
            // A job the library did not complete never counts as authentic, whatever its
            // tag slot holds.
            *ok = done[i]
                && match op.buf.len().checked_sub(icv) {
                    Some(text_len) => ct_eq(&tags[i][..icv], &op.buf[text_len..]),
                    None => false,
                };
            if !*ok {
                op.buf.fill(0);
            }
        }
    }
}
