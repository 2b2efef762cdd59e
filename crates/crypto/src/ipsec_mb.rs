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
pub use imp::{
    chacha_long_texts_on_this_thread, sha_extensions_on_this_thread, this_threads_code,
    this_threads_sha_code, IpsecMbProvider, MbApi, OwnInstance,
};
#[cfg(espgw_ipsec_mb)]
pub(crate) use imp::{
    chacha_long_texts_to_aws_lc, with_mgr, with_mgrs, GcmBatchKey, GcmKeyData, ImbMgr,
};

/// Stands in when espgw is built without intel-ipsec-mb: there is no library to load a
/// private instance of, so [`OwnInstance::load`] always says so. (A struct no caller can
/// make rather than an empty enum, so that callers' code after `load` stays reachable.)
#[cfg(not(espgw_ipsec_mb))]
pub struct OwnInstance {
    _none: (),
}

#[cfg(not(espgw_ipsec_mb))]
impl OwnInstance {
    pub fn load() -> Option<Self> {
        None
    }
    pub fn adopt(self) {}
    pub fn code(&self) -> (String, usize) {
        (String::new(), 0)
    }
}

/// Without intel-ipsec-mb no thread has a manager.
#[cfg(not(espgw_ipsec_mb))]
pub fn this_threads_code() -> Option<(String, usize)> {
    None
}

/// Without intel-ipsec-mb no thread has a manager.
#[cfg(not(espgw_ipsec_mb))]
pub fn this_threads_sha_code() -> Option<(String, usize)> {
    None
}

/// Without intel-ipsec-mb no thread has a manager to choose for.
#[cfg(not(espgw_ipsec_mb))]
pub fn sha_extensions_on_this_thread(_choice: ShaExtensions) -> Option<bool> {
    None
}

/// Whether HMAC-SHA-1 and HMAC-SHA-256 go through the CPU's SHA extensions (SHA-NI,
/// which intel-ipsec-mb 1.3 uses in its SSE manager only) rather than the vector
/// lanes of the manager the library chose for the CPU.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShaExtensions {
    /// Where the CPU has them and the library's manager is not the AVX-512 one, whose
    /// 16 lanes were faster on the AVX-512 host measured (the default).
    Auto,
    /// Wherever the CPU has them.
    On,
    /// Never.
    Off,
}

/// Where ChaCha20-Poly1305 texts longer than espgw's kernel takes (`csrc/chacha_batch.c`:
/// 256 bytes without AVX-512 IFMA, 1,024 with) go: intel-ipsec-mb's job, one packet each,
/// or aws-lc-rs's, one packet each too. On the Zen 1 host (AVX2 on 128-bit units) aws-lc-rs
/// was 1.2-1.3x the library from 320 to 1,420-byte frames (README, "ChaCha20-Poly1305's
/// long texts on aws-lc-rs").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChaChaLongTexts {
    /// aws-lc-rs where the kernel runs in AVX2 (a CPU without AVX-512, whose library
    /// manager is not the AVX-512 one either), the library elsewhere (the default).
    Auto,
    /// aws-lc-rs wherever the kernel runs.
    AwsLc,
    /// The library, always.
    Library,
}

/// Without intel-ipsec-mb there is no kernel and no library: ChaCha20-Poly1305 is
/// aws-lc-rs's throughout.
#[cfg(not(espgw_ipsec_mb))]
pub fn chacha_long_texts_on_this_thread(_choice: ChaChaLongTexts) -> Option<bool> {
    None
}

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
    Batch,
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
    use std::ffi::{c_char, c_int, c_void, CStr};
    use std::sync::Arc;

    use zeroize::Zeroize;

    use super::{ChaChaLongTexts, ShaExtensions};
    use crate::ct::ct_eq;
    use crate::esp::aead_aad;
    use crate::{check_key, AeadAlgorithm, AeadKey, AeadOp, CryptoError, CryptoProvider, EspOp};

    /// Opaque `IMB_MGR`.
    #[repr(C)]
    pub(crate) struct ImbMgr {
        _private: [u8; 0],
    }

    /// Mirrors `struct espgw_aead_op` in the shim. Nonce and AAD travel inside the op, so
    /// an ESP packet's op is made straight from the packet, with no record in between.
    #[repr(C)]
    struct RawAeadOp {
        text: *mut u8,
        len: u64,
        /// Where the computed tag is written.
        tag: *mut u8,
        iv: [u8; 12],
        aad: [u8; 12],
        aad_len: u32,
        tag_len: u32,
        /// Out: what became of the op ([`Outcome::from_status`]); -1 until it ran.
        status: i32,
    }

    /// What became of one op, from its status (`ESPGW_OP_*` in `gcm_batch.h`).
    #[derive(Clone, Copy, PartialEq, Eq)]
    enum Outcome {
        /// Not run (too short to make an op, or the library did not complete it).
        NotRun,
        /// Completed by the library: its tag is in the op's tag slot, for the caller to
        /// compare when opening.
        Done,
        /// Opened by the batch kernel, which compared the tag itself: authentic, decrypted.
        Authentic,
        /// Opened by the batch kernel: the tag differs, the text is as it came.
        Forged,
    }

    // The statuses of `gcm_batch.h` (ESPGW_OP_DONE, _AUTHENTIC, _FORGED; -1 is PENDING).
    const OP_DONE: i32 = 0;
    const OP_AUTHENTIC: i32 = 1;
    const OP_FORGED: i32 = 2;

    impl Outcome {
        fn from_status(status: i32) -> Outcome {
            match status {
                OP_DONE => Outcome::Done,
                OP_AUTHENTIC => Outcome::Authentic,
                OP_FORGED => Outcome::Forged,
                _ => Outcome::NotRun,
            }
        }
    }

    // The shim asserts the same size for its struct.
    const _: () = assert!(std::mem::size_of::<RawAeadOp>() == 64);

    impl RawAeadOp {
        /// A slot of the scratch array before any op is written to it.
        const UNUSED: RawAeadOp = RawAeadOp {
            text: std::ptr::null_mut(),
            len: 0,
            tag: std::ptr::null_mut(),
            iv: [0; 12],
            aad: [0; 12],
            aad_len: 0,
            tag_len: 0,
            status: -1,
        };
    }

    extern "C" {
        fn espgw_gcm_batch_supported() -> c_int;
        fn espgw_gcm_batch_key(kd: *const c_void, key_bytes: u32, out: *mut u8) -> c_int;
        #[cfg(test)]
        fn espgw_gcm_batch_runs(kernel: c_int) -> c_int;
        #[cfg(test)]
        fn espgw_gcm_batch_key_for(
            kd: *const c_void,
            key_bytes: u32,
            out: *mut u8,
            kernel: c_int,
        ) -> c_int;
        fn espgw_gcm_batch(
            batch_key: *const u8,
            kd: *const c_void,
            key_bytes: u32,
            encrypt: c_int,
            ops: *mut RawAeadOp,
            n: u32,
        ) -> u32;
        fn espgw_mb_new() -> *mut ImbMgr;
        fn espgw_mb_free(m: *mut ImbMgr);
        fn espgw_mb_new_instance(instance: *mut *mut c_void) -> *mut ImbMgr;
        fn espgw_mb_free_instance(m: *mut ImbMgr, instance: *mut c_void);
        fn espgw_mb_new_sha(
            main: *const ImbMgr,
            instance: *mut c_void,
            policy: c_int,
        ) -> *mut ImbMgr;
        fn espgw_mb_code_file(m: *const ImbMgr, base: *mut usize) -> *const c_char;
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

    impl ShaExtensions {
        /// The process's choice: `ESPGW_SHA_EXTENSIONS` (`auto`, `on` or `off`; anything
        /// else, or unset, is `auto`), read once. A tuning knob for CPUs not measured here,
        /// and how `bench dataplane` compares the two on one host with one build.
        fn from_env() -> Self {
            static CHOICE: std::sync::OnceLock<ShaExtensions> = std::sync::OnceLock::new();
            *CHOICE.get_or_init(|| match std::env::var("ESPGW_SHA_EXTENSIONS").as_deref() {
                Ok("on") => ShaExtensions::On,
                Ok("off") => ShaExtensions::Off,
                _ => ShaExtensions::Auto,
            })
        }

        fn code(self) -> c_int {
            // Mirrors ESPGW_SHA_AUTO / _ON / _OFF in csrc/ipsec_mb_shim.c.
            match self {
                ShaExtensions::Auto => 0,
                ShaExtensions::On => 1,
                ShaExtensions::Off => 2,
            }
        }
    }

    impl ChaChaLongTexts {
        /// The process's choice: `ESPGW_CHACHA_LONG_TEXTS` (`auto`, `aws-lc` or `library`;
        /// anything else, or unset, is `auto`), read once: a knob for CPUs not measured
        /// here, and how `bench dataplane` compares the two with one build.
        fn from_env() -> Self {
            static CHOICE: std::sync::OnceLock<ChaChaLongTexts> = std::sync::OnceLock::new();
            *CHOICE.get_or_init(
                || match std::env::var("ESPGW_CHACHA_LONG_TEXTS").as_deref() {
                    Ok("aws-lc") => ChaChaLongTexts::AwsLc,
                    Ok("library") => ChaChaLongTexts::Library,
                    _ => ChaChaLongTexts::Auto,
                },
            )
        }

        /// Whether, under this choice, SAs whose short texts go through the kernel send
        /// their long ones to aws-lc-rs.
        fn to_aws_lc(self) -> bool {
            let isa = crate::chacha_batch::isa();
            match self {
                ChaChaLongTexts::Library => false,
                ChaChaLongTexts::AwsLc => isa.is_some(),
                ChaChaLongTexts::Auto => isa == Some(crate::chacha_batch::Isa::Avx2),
            }
        }
    }

    thread_local! {
        /// This thread's override of [`ChaChaLongTexts::from_env`] (tests only set it).
        static CHACHA_LONG_TEXTS: std::cell::Cell<Option<ChaChaLongTexts>> =
            const { std::cell::Cell::new(None) };
    }

    /// Whether ChaCha20-Poly1305 SAs built on this thread (with the kernel) send texts
    /// longer than the kernel takes to aws-lc-rs ([`ChaChaLongTexts`]).
    pub(crate) fn chacha_long_texts_to_aws_lc() -> bool {
        CHACHA_LONG_TEXTS
            .with(std::cell::Cell::get)
            .unwrap_or_else(ChaChaLongTexts::from_env)
            .to_aws_lc()
    }

    /// Sets, for the calling thread, where the long ChaCha20-Poly1305 texts of SAs built
    /// from now on go (in place of the process's choice, [`ChaChaLongTexts`]); returns
    /// whether they go to aws-lc-rs (never where the CPU does not run the kernel). Lets the
    /// tests run both paths on one CPU.
    pub fn chacha_long_texts_on_this_thread(choice: ChaChaLongTexts) -> Option<bool> {
        CHACHA_LONG_TEXTS.with(|c| c.set(Some(choice)));
        Some(chacha_long_texts_to_aws_lc())
    }

    /// A thread's manager; freed with the thread. `instance` is the private instance of
    /// the library it came from ([`OwnInstance`]), null for the process's shared one.
    /// `sha` is null, or the same instance's manager that hashes HMAC-SHA-1 and
    /// HMAC-SHA-256 through the SHA extensions ([`ShaExtensions`]).
    struct Mgr {
        ptr: *mut ImbMgr,
        sha: *mut ImbMgr,
        instance: *mut c_void,
    }

    impl Mgr {
        fn new(ptr: *mut ImbMgr, instance: *mut c_void, sha: ShaExtensions) -> Self {
            let mut mgr = Mgr {
                ptr,
                sha: std::ptr::null_mut(),
                instance,
            };
            mgr.set_sha(sha);
            mgr
        }

        /// Replaces the SHA extensions' manager as `choice` says; returns whether there
        /// is one now.
        fn set_sha(&mut self, choice: ShaExtensions) -> bool {
            self.free_sha();
            // SAFETY: ptr is this Mgr's live manager and instance its instance handle (or
            // null), both outliving the new manager, which Drop frees before them; the
            // shim returns NULL where it makes none.
            self.sha = unsafe { espgw_mb_new_sha(self.ptr, self.instance, choice.code()) };
            !self.sha.is_null()
        }

        fn free_sha(&mut self) {
            if !self.sha.is_null() {
                // SAFETY: sha came from espgw_mb_new_sha (allocated with the C library's
                // allocator by whichever instance, as espgw_mb_free_instance relies on
                // too), is freed once and nulled; no job is in flight between calls.
                unsafe { espgw_mb_free(self.sha) };
                self.sha = std::ptr::null_mut();
            }
        }
    }

    impl Drop for Mgr {
        fn drop(&mut self) {
            self.free_sha();
            // SAFETY: the pointer came from espgw_mb_new (instance null) or from
            // espgw_mb_new_instance with this instance handle, is non-null, and is freed
            // once; nothing uses the manager or the instance's code after this.
            unsafe {
                if self.instance.is_null() {
                    espgw_mb_free(self.ptr)
                } else {
                    espgw_mb_free_instance(self.ptr, self.instance)
                }
            }
        }
    }

    /// A manager that runs a private instance of the library, for one worker thread.
    ///
    /// intel-ipsec-mb 1.3 writes a process-wide variable (its errno) on every call, job
    /// API and direct API alike, so the workers of one process sharing the library write
    /// one cache line per packet from every core: on the 16-core measurement host, 8
    /// workers in one process carried 0.62-0.72 of what 8 one-worker processes did
    /// (docs/performance.md). A private instance is the library loaded again from an
    /// in-memory copy of its file, with its own globals: 12.8 MB of memory per worker.
    ///
    /// Made ahead, where the process may still open files and map code (before
    /// `espgw run` confines itself), and adopted by the worker thread.
    pub struct OwnInstance(Mgr);

    // SAFETY: the manager is not tied to the thread that made it; an OwnInstance is only
    // moved, never shared, and after `adopt` one thread alone uses it.
    unsafe impl Send for OwnInstance {}

    impl OwnInstance {
        /// Loads a private instance and makes its manager; `None` where that fails (no
        /// memfd, the library's file unreadable), and the thread then uses the shared one.
        pub fn load() -> Option<Self> {
            let mut instance = std::ptr::null_mut();
            // SAFETY: the shim writes the handle through the pointer it is given, which
            // points at a local; it returns NULL (and leaves nothing loaded) on failure.
            let ptr = unsafe { espgw_mb_new_instance(&mut instance) };
            (!ptr.is_null())
                .then(|| OwnInstance(Mgr::new(ptr, instance, ShaExtensions::from_env())))
        }

        /// Makes this the calling thread's manager, in place of any it had.
        pub fn adopt(self) {
            MGR.with(|cell| *cell.borrow_mut() = Some(self.0));
        }

        /// The object whose code this manager runs: its file ("/proc/self/fd/N" for a
        /// private instance, the in-memory copy it was loaded from) and load address.
        pub fn code(&self) -> (String, usize) {
            code_of(self.0.ptr)
        }
    }

    /// The object whose AES-GCM code manager `m` runs: file and load address.
    fn code_of(m: *const ImbMgr) -> (String, usize) {
        let mut base = 0usize;
        // SAFETY: m is a live manager and base a local; the shim returns a C string owned
        // by the loader (valid while the object stays loaded) or a static empty one,
        // copied at once.
        let file = unsafe { CStr::from_ptr(espgw_mb_code_file(m, &mut base)) }
            .to_string_lossy()
            .into_owned();
        (file, base)
    }

    /// The object whose code this thread's manager runs (see [`OwnInstance::code`]).
    pub fn this_threads_code() -> Option<(String, usize)> {
        with_mgr(|m| code_of(m))
    }

    /// The same for this thread's SHA extensions' manager, where it has one.
    pub fn this_threads_sha_code() -> Option<(String, usize)> {
        with_mgrs(|_, sha| (!sha.is_null()).then(|| code_of(sha))).flatten()
    }

    thread_local! {
        static MGR: RefCell<Option<Mgr>> = const { RefCell::new(None) };
    }

    /// Runs `f` with this thread's manager, creating it on first use.
    pub(crate) fn with_mgr<R>(f: impl FnOnce(*mut ImbMgr) -> R) -> Option<R> {
        with_mgrs(|m, _| f(m))
    }

    /// Runs `f` with this thread's manager and its SHA extensions' manager (null where
    /// HMAC-SHA goes through the first), creating them on first use.
    pub(crate) fn with_mgrs<R>(f: impl FnOnce(*mut ImbMgr, *mut ImbMgr) -> R) -> Option<R> {
        with_thread_mgr(|m| f(m.ptr, m.sha))
    }

    fn with_thread_mgr<R>(f: impl FnOnce(&mut Mgr) -> R) -> Option<R> {
        MGR.with(|cell| {
            let mut slot = cell.borrow_mut();
            if slot.is_none() {
                // SAFETY: espgw_mb_new has no preconditions; it returns NULL on failure.
                let p = unsafe { espgw_mb_new() };
                if p.is_null() {
                    return None;
                }
                *slot = Some(Mgr::new(p, std::ptr::null_mut(), ShaExtensions::from_env()));
            }
            slot.as_mut().map(f)
        })
    }

    /// Sets, for the calling thread, whether HMAC-SHA-1 and HMAC-SHA-256 go through the
    /// SHA extensions (in place of the process's choice, [`ShaExtensions`]); returns whether
    /// they now do (never where the CPU lacks them), `None` without a manager. Lets the
    /// tests run both paths on one CPU.
    pub fn sha_extensions_on_this_thread(choice: ShaExtensions) -> Option<bool> {
        with_thread_mgr(|m| m.set_sha(choice))
    }

    /// Which of the library's two interfaces runs the operations.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    pub enum MbApi {
        /// One call per packet, no job structures (measured faster for GCM here).
        Direct,
        /// The job API, a burst at a time (what DPDK's aesni_gcm driver uses).
        Job,
        /// The direct API, with AES-GCM packets of up to 128 bytes of text sealed and
        /// opened four at a time by espgw's own kernel (`csrc/gcm_batch.c`) where the
        /// CPU has VAES and VPCLMULQDQ (with AVX-512 or AVX2); on the AVX2 kernel longer
        /// texts too (one packet at a time in 256-bit registers) and AES-GMAC ICVs of
        /// any length (the default).
        Batch,
    }

    pub struct IpsecMbProvider {
        arch: String,
        api: MbApi,
    }

    impl IpsecMbProvider {
        /// The direct API, short AES-GCM packets through the batch kernel.
        pub fn new() -> Result<Self, crate::Unavailable> {
            Self::with_api(MbApi::Batch)
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
            // Every interface computes HMAC-SHA ICVs the same way: say so in each.
            let sha = if with_mgrs(|_, sha| !sha.is_null()) == Some(true) {
                " + HMAC-SHA-1/SHA-256 on SHA-NI"
            } else {
                ""
            };
            match self.api {
                MbApi::Direct => format!("intel-ipsec-mb/{}{sha}", self.arch),
                MbApi::Job => format!("intel-ipsec-mb/{} job API{sha}", self.arch),
                MbApi::Batch => {
                    let mut name = format!("intel-ipsec-mb/{}{sha}", self.arch);
                    if let Some(kernel) = GcmBatchKey::kernel() {
                        name += &format!(" + batch AES-GCM/{kernel}");
                    }
                    if let Some(isa) = crate::chacha_batch::isa() {
                        name += &format!(" + batch ChaCha20-Poly1305/{}", isa.name());
                        if chacha_long_texts_to_aws_lc() {
                            let max = crate::chacha_batch::text_max();
                            name += &format!(" (texts over {max} B on aws-lc-rs)");
                        }
                    }
                    name
                }
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
            let batch = match self.api {
                MbApi::Batch => GcmBatchKey::new(&data, key.len()),
                MbApi::Direct | MbApi::Job => None,
            };
            Ok(Arc::new(MbGcmKey {
                alg,
                icv_len,
                data,
                batch,
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
            let batch = self.api == MbApi::Batch;
            crate::ipsec_mb_esp::multi_buffer_esp_key(suite, enc_key, auth_key, esn, batch)
        }

        fn multi_buffer_ah(
            &self,
            integ: crate::Integrity,
            key: &[u8],
        ) -> Option<Result<Box<dyn crate::AhBurst>, CryptoError>> {
            crate::ipsec_mb_esp::multi_buffer_ah(integ, key, self.api == MbApi::Batch)
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

    /// Bytes of a key's batch data: `ESPGW_GCM_BATCH_KEY_SIZE` in `csrc/gcm_batch.h`.
    const GCM_BATCH_KEY_SIZE: usize = 384;

    /// What the batch kernel keeps of a key besides the library's data (the powers of its
    /// hash key, secret as the key is); zeroized on drop.
    pub(crate) struct GcmBatchKey(Box<[u8; GCM_BATCH_KEY_SIZE]>);

    impl GcmBatchKey {
        /// The batch data of the key in `data` (`key_bytes` long), or `None` where this
        /// CPU cannot run the kernel.
        pub(crate) fn new(data: &GcmKeyData, key_bytes: usize) -> Option<Self> {
            let mut out = GcmBatchKey(Box::new([0; GCM_BATCH_KEY_SIZE]));
            // SAFETY: `data` is a live gcm_key_data the library precomputed for a key of
            // `key_bytes` (16, 24 or 32) bytes; `out` has GCM_BATCH_KEY_SIZE writable bytes.
            let ok = unsafe {
                espgw_gcm_batch_key(data.as_ptr().cast(), key_bytes as u32, out.0.as_mut_ptr())
            };
            (ok == 1).then_some(out)
        }

        /// The batch data for the kernel (`ESPGW_GCM_BATCH_KEY_SIZE` bytes).
        pub(crate) fn as_ptr(&self) -> *const u8 {
            self.0.as_ptr()
        }

        /// The batch kernel this CPU runs (`ESPGW_GCM_BATCH_*` in `csrc/gcm_batch.h`), if
        /// any: 512-bit (`csrc/gcm_batch.c`), 256-bit (`csrc/gcm_batch_avx2.c`), or
        /// 128-bit AES-NI without VAES (`csrc/gcm_batch_aesni.c`).
        fn kernel() -> Option<&'static str> {
            // SAFETY: a pure function of the CPU's feature flags.
            kernel_name(unsafe { espgw_gcm_batch_supported() })
        }

        /// The batch data of the key for `kernel` (an `ESPGW_GCM_BATCH_*` id), or `None`
        /// where this CPU cannot run that kernel: the tests run every kernel the CPU
        /// allows, not only the widest.
        #[cfg(test)]
        pub(crate) fn new_for(data: &GcmKeyData, key_bytes: usize, kernel: c_int) -> Option<Self> {
            let mut out = GcmBatchKey(Box::new([0; GCM_BATCH_KEY_SIZE]));
            // SAFETY: as in `new`; `kernel` is checked against the CPU in C.
            let ok = unsafe {
                espgw_gcm_batch_key_for(
                    data.as_ptr().cast(),
                    key_bytes as u32,
                    out.0.as_mut_ptr(),
                    kernel,
                )
            };
            (ok == 1).then_some(out)
        }

        /// Every kernel this CPU runs: its id and name.
        #[cfg(test)]
        pub(crate) fn kernels_here() -> Vec<(c_int, &'static str)> {
            (1..=3)
                // SAFETY: a pure function of the CPU's feature flags.
                .filter(|&k| unsafe { espgw_gcm_batch_runs(k) } == 1)
                .filter_map(|k| kernel_name(k).map(|n| (k, n)))
                .collect()
        }
    }

    /// The name of an `ESPGW_GCM_BATCH_*` kernel id, as the provider's name gives it.
    fn kernel_name(id: c_int) -> Option<&'static str> {
        match id {
            1 => Some("avx512"),
            2 => Some("vaes-avx2"),
            3 => Some("aesni"),
            _ => None,
        }
    }

    impl Drop for GcmBatchKey {
        fn drop(&mut self) {
            self.0.zeroize();
        }
    }

    struct MbGcmKey {
        alg: AeadAlgorithm,
        icv_len: usize,
        data: GcmKeyData,
        /// With [`MbApi::Batch`] on a CPU that runs the kernel: the key's batch data.
        batch: Option<GcmBatchKey>,
        api: MbApi,
    }

    /// Ops handed to the library per call; bursts larger than this are split.
    const CHUNK: usize = 128;

    thread_local! {
        /// Per-thread scratch for the raw ops, reused so no call allocates or zero-fills
        /// it; each op is written in its slot field by field, not built aside and copied
        /// in. Only the slots a call wrote are handed to the library.
        static RAW: RefCell<[RawAeadOp; CHUNK]> = const { RefCell::new([RawAeadOp::UNUSED; CHUNK]) };
        /// Per-thread scratch for the tags computed while opening: kept between calls so
        /// no call zero-fills 2 KiB. A slot is only read for an op the library completed,
        /// which wrote it in that same call.
        static TAGS: RefCell<[[u8; 16]; CHUNK]> = const { RefCell::new([[0u8; 16]; CHUNK]) };
    }

    /// An ESP packet's offsets in RFC 4106's layout: the IV at 8, the text at 16.
    const ESP_IV: usize = 8;
    const ESP_TEXT: usize = 16;

    impl MbGcmKey {
        /// Hands `raw` to the library, which encrypts or decrypts each op in place, writes
        /// its tag and sets its status.
        fn call(&self, encrypt: bool, raw: &mut [RawAeadOp]) {
            if raw.is_empty() {
                return;
            }
            let n = raw.len() as u32;
            if let Some(b) = &self.batch {
                // SAFETY: as for the library call below; the batch data was computed from
                // this same key data and is GCM_BATCH_KEY_SIZE bytes long.
                let ran = unsafe {
                    espgw_gcm_batch(
                        b.0.as_ptr(),
                        self.data.as_ptr().cast(),
                        self.alg.key_len() as u32,
                        c_int::from(encrypt),
                        raw.as_mut_ptr(),
                        n,
                    )
                };
                if ran == n {
                    return;
                }
            }
            with_mgr(|m| {
                // SAFETY: every raw op was made by `run_chunk`'s caller from a distinct,
                // exclusively borrowed buffer (text and ICV) or points its tag into the
                // caller's `tags` array, all alive until this call returns; lengths come
                // from those slices; the key data is a live, precomputed gcm_key_data of
                // the right size and alignment; `raw` holds raw.len() initialised ops
                // (those the batch kernel ran have a status other than -1, and the direct
                // API skips them).
                unsafe {
                    (match self.api {
                        MbApi::Direct | MbApi::Batch => espgw_gcm_direct,
                        MbApi::Job => espgw_gcm_burst,
                    })(
                        m,
                        self.data.as_ptr().cast(),
                        self.alg.key_len() as u32,
                        c_int::from(encrypt),
                        raw.as_mut_ptr(),
                        n,
                    )
                }
            });
        }

        /// Runs at most CHUNK ops through the library. `make(op, tag, raw)` writes an op's
        /// raw op, or returns false for one too short to run; `tag` is where its computed
        /// tag goes when opening (`tags[i]`, for the caller to compare) and null when
        /// sealing (the ICV bytes after the text). Sets, per op, what became of it.
        fn run_chunk<T>(
            &self,
            ops: &mut [T],
            tags: Option<&mut [[u8; 16]; CHUNK]>,
            done: &mut [Outcome; CHUNK],
            mut make: impl FnMut(&mut T, *mut u8, &mut RawAeadOp) -> bool,
        ) {
            let encrypt = tags.is_none();
            let tag_base: *mut [u8; 16] = match tags {
                Some(t) => t.as_mut_ptr(),
                None => std::ptr::null_mut(),
            };
            RAW.with(|cell| {
                let mut raw = cell.borrow_mut();
                let mut used = 0;
                let mut index = [0u8; CHUNK];
                for ((i, op), done) in ops.iter_mut().enumerate().zip(done.iter_mut()) {
                    *done = Outcome::NotRun;
                    let tag = if encrypt {
                        std::ptr::null_mut()
                    } else {
                        tag_base.wrapping_add(i).cast()
                    };
                    if make(op, tag, &mut raw[used]) {
                        index[used] = i as u8;
                        used += 1;
                    }
                }
                self.call(encrypt, &mut raw[..used]);
                for (r, &i) in raw[..used].iter().zip(index.iter()) {
                    done[usize::from(i)] = Outcome::from_status(r.status);
                }
            });
        }

        /// Writes the raw op of an [`AeadOp`]: its text and ICV, nonce and AAD.
        fn raw_aead_op(&self, op: &mut AeadOp<'_>, tag: *mut u8, r: &mut RawAeadOp) -> bool {
            let Some(text_len) = op.buf.len().checked_sub(self.icv_len) else {
                return false;
            };
            r.iv = op.nonce;
            r.aad = op.aad;
            r.aad_len = u32::from(op.aad_len.min(12));
            self.set_text(r, op.buf.as_mut_ptr(), text_len, tag);
            true
        }

        /// The record's text (`text_len` bytes at `text`, the ICV's room right after it)
        /// and where the tag goes: sealing (`tag` null) writes it into the ICV's room.
        fn set_text(&self, r: &mut RawAeadOp, text: *mut u8, text_len: usize, tag: *mut u8) {
            r.text = text;
            r.len = text_len as u64;
            r.tag = if tag.is_null() {
                text.wrapping_add(text_len)
            } else {
                tag
            };
            r.tag_len = self.icv_len as u32;
            r.status = -1;
        }

        /// Writes the raw op of an ESP packet (RFC 4106), read from the packet itself:
        /// nonce salt || IV (§4), AAD SPI || sequence number (§5, with ESN the high half
        /// as the receiver inferred it). Sealing first writes the IV: the sequence number,
        /// unique per key (§3.1).
        fn raw_esp_op(
            &self,
            salt: &[u8; 4],
            esn: bool,
            op: &mut EspOp<'_>,
            tag: *mut u8,
            r: &mut RawAeadOp,
        ) -> bool {
            let Some(text_len) = op.esp.len().checked_sub(ESP_TEXT + self.icv_len) else {
                return false;
            };
            let (head, text) = op.esp.split_at_mut(ESP_TEXT);
            r.iv[..4].copy_from_slice(salt);
            if tag.is_null() {
                head[ESP_IV..].copy_from_slice(&op.seq.to_be_bytes());
            }
            r.iv[4..].copy_from_slice(&head[ESP_IV..]);
            let (aad, aad_len) = aead_aad(head, op.seq, esn);
            r.aad = aad;
            r.aad_len = aad_len as u32;
            self.set_text(r, text.as_mut_ptr(), text_len, tag);
            true
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
            self.seal_all(ops, |op, tag, r| self.raw_aead_op(op, tag, r));
        }

        fn open_burst(&self, ops: &mut [AeadOp<'_>], ok: &mut [bool]) {
            self.open_all(
                ops,
                ok,
                |op, tag, r| self.raw_aead_op(op, tag, r),
                |op| &mut *op.buf,
            );
        }

        fn seal_esp(&self, salt: &[u8; 4], esn: bool, ops: &mut [EspOp<'_>]) {
            self.seal_all(ops, |op, tag, r| self.raw_esp_op(salt, esn, op, tag, r));
        }

        fn open_esp(&self, salt: &[u8; 4], esn: bool, ops: &mut [EspOp<'_>], ok: &mut [bool]) {
            let icv = self.icv_len;
            self.open_all(
                ops,
                ok,
                |op, tag, r| self.raw_esp_op(salt, esn, op, tag, r),
                // What fails loses text and ICV; a packet too short to hold them, all of it.
                |op| {
                    let from = if op.esp.len() >= ESP_TEXT + icv {
                        ESP_TEXT
                    } else {
                        0
                    };
                    &mut op.esp[from..]
                },
            );
        }
    }

    impl MbGcmKey {
        /// Seals every op, CHUNK at a time; `make` writes an op's record (see
        /// [`MbGcmKey::run_chunk`]).
        fn seal_all<T>(
            &self,
            ops: &mut [T],
            mut make: impl FnMut(&mut T, *mut u8, &mut RawAeadOp) -> bool,
        ) {
            let mut done = [Outcome::NotRun; CHUNK];
            for chunk in ops.chunks_mut(CHUNK) {
                self.run_chunk(chunk, None, &mut done, &mut make);
            }
        }

        /// Opens every op, CHUNK at a time: the tags computed into the per-thread scratch,
        /// then compared ([`compare`]); `text_and_icv` names what an op that fails loses.
        fn open_all<T>(
            &self,
            ops: &mut [T],
            ok: &mut [bool],
            mut make: impl FnMut(&mut T, *mut u8, &mut RawAeadOp) -> bool,
            text_and_icv: impl Fn(&mut T) -> &mut [u8],
        ) {
            let icv = self.icv_len;
            for (chunk, ok) in ops.chunks_mut(CHUNK).zip(ok.chunks_mut(CHUNK)) {
                let mut done = [Outcome::NotRun; CHUNK];
                TAGS.with(|cell| {
                    let mut tags = cell.borrow_mut();
                    self.run_chunk(chunk, Some(&mut tags), &mut done, &mut make);
                    compare(chunk, ok, &tags[..], &done, icv, &text_and_icv);
                });
            }
        }
    }

    /// Sets `ok[i]` for each op from its outcome (the library's, from its computed tag) and
    /// zeroes the text and ICV (`text_and_icv`) of every op that failed.
    fn compare<T>(
        chunk: &mut [T],
        ok: &mut [bool],
        tags: &[[u8; 16]],
        done: &[Outcome; CHUNK],
        icv: usize,
        text_and_icv: impl Fn(&mut T) -> &mut [u8],
    ) {
        for (i, (op, ok)) in chunk.iter_mut().zip(ok.iter_mut()).enumerate() {
            *ok = match done[i] {
                // The batch kernel compared the tag (in constant time) before decrypting.
                Outcome::Authentic => true,
                Outcome::Done => {
                    let buf = text_and_icv(op);
                    match buf.len().checked_sub(icv) {
                        Some(text_len) => ct_eq(&tags[i][..icv], &buf[text_len..]),
                        None => false,
                    }
                }
                // A job the library did not complete never counts as authentic, whatever
                // its tag slot holds.
                Outcome::NotRun | Outcome::Forged => false,
            };
            if !*ok {
                text_and_icv(op).fill(0);
            }
        }
    }

    #[cfg(test)]
    mod tests {
        use super::*;

        /// Ops of every text length from 0 to 700 bytes (whole dwords or not) and some
        /// longer (jumbo frames, 65,000 bytes), with AADs of 0-12 bytes and tags of 1-16,
        /// sealed by the batch kernel and by the library's one-packet API: the same
        /// ciphertext and tag, byte for byte. Past 128 bytes this is the 256-bit kernel's
        /// one-packet pass; the AVX-512 kernel leaves those ops pending, and they go to the
        /// library's call, as the binding sends them. (ESP's own lengths are checked
        /// against aws-lc-rs as well in `tests/gcm_batch.rs`.)
        #[test]
        fn the_kernel_seals_any_length_as_the_library_does() {
            let kernels = GcmBatchKey::kernels_here();
            if kernels.is_empty() {
                eprintln!("no AVX2 with AES-NI here: no batch kernel runs");
                return;
            }
            assert!(
                kernels.iter().any(|k| Some(k.1) == GcmBatchKey::kernel()),
                "the kernel the provider runs is among those tested"
            );
            for (id, kernel) in kernels {
                seals_any_length_as_the_library_does(id, kernel);
            }
        }

        /// The longest text a kernel takes; the library runs longer ones.
        fn kernel_text_max(kernel: &str) -> usize {
            match kernel {
                "avx512" => 128,
                "aesni" => 64,
                _ => usize::MAX,
            }
        }

        /// [`the_kernel_seals_any_length_as_the_library_does`] for one kernel.
        fn seals_any_length_as_the_library_does(id: c_int, kernel: &str) {
            // The longest text the kernel takes: any on the 256-bit kernel, 128 bytes on
            // the AVX-512 one, 64 on the AES-NI one.
            let kernel_max = kernel_text_max(kernel);
            for key_len in [16usize, 24, 32] {
                let key: Vec<u8> = (0..key_len as u8).map(|b| b.wrapping_mul(29)).collect();
                let data = GcmKeyData::precompute(&key).unwrap();
                let batch = GcmBatchKey::new_for(&data, key_len, id).unwrap();
                let lens: Vec<usize> = (0..=700)
                    .chain([1023, 1420, 1500, 4099, 9000, 65_000])
                    .collect();
                let fill =
                    |l: usize| -> Vec<u8> { (0..l + 16).map(|b| (b * 7 + l) as u8).collect() };
                let mut by_kernel: Vec<Vec<u8>> = lens.iter().map(|&l| fill(l)).collect();
                let mut by_library = by_kernel.clone();
                let ops_for = |bufs: &mut [Vec<u8>]| -> Vec<RawAeadOp> {
                    bufs.iter_mut()
                        .enumerate()
                        .map(|(i, b)| {
                            let len = b.len() - 16;
                            let mut op = RawAeadOp::UNUSED;
                            op.tag = b[len..].as_mut_ptr();
                            op.text = b.as_mut_ptr();
                            op.len = len as u64;
                            op.iv = [i as u8 ^ 0x5a; 12];
                            op.aad = [(i as u8).wrapping_mul(3); 12];
                            op.aad_len = [0, 8, 12, 5][i % 4];
                            op.tag_len = (i % 16 + 1) as u32;
                            op
                        })
                        .collect()
                };
                let mut kernel_ops = ops_for(&mut by_kernel);
                let mut library_ops = ops_for(&mut by_library);
                let n = lens.len() as u32;
                // The kernel gets the ops in bursts of 1-7 (cycling): every count left over
                // after the groups of four, in both the short and the wide group.
                // SAFETY: every op points into its own live buffer of len + 16 bytes (the
                // text, then room for the tag), which nothing else borrows during the
                // calls; the key data and the batch data are live and of the sizes the
                // kernel and the library expect; the manager is live on this thread.
                let (ran, direct) = unsafe {
                    let mut ran = 0;
                    let (mut rest, mut burst) = (&mut kernel_ops[..], 1usize);
                    while !rest.is_empty() {
                        let (chunk, tail) = rest.split_at_mut(burst.min(rest.len()));
                        ran += espgw_gcm_batch(
                            batch.0.as_ptr(),
                            data.as_ptr().cast(),
                            key_len as u32,
                            1,
                            chunk.as_mut_ptr(),
                            chunk.len() as u32,
                        );
                        (rest, burst) = (tail, burst % 7 + 1);
                    }
                    // What the kernel left pending, and every op of the reference, through
                    // the library's one-packet call (it skips the ops already done).
                    let direct = with_mgr(|m| {
                        espgw_gcm_direct(
                            m,
                            data.as_ptr().cast(),
                            key_len as u32,
                            1,
                            kernel_ops.as_mut_ptr(),
                            n,
                        );
                        espgw_gcm_direct(
                            m,
                            data.as_ptr().cast(),
                            key_len as u32,
                            1,
                            library_ops.as_mut_ptr(),
                            n,
                        )
                    });
                    (ran, direct)
                };
                let takes = lens.iter().filter(|&&l| l <= kernel_max).count() as u32;
                assert_eq!(
                    ran,
                    takes,
                    "AES-{}: the {kernel} kernel ran the ops it takes",
                    key_len * 8
                );
                assert!(direct.is_some(), "the library ran");
                for (i, (l, (a, b))) in lens
                    .iter()
                    .zip(by_kernel.iter().zip(&by_library))
                    .enumerate()
                {
                    let tag_len = i % 16 + 1;
                    assert_eq!(
                        a[..l + tag_len],
                        b[..l + tag_len],
                        "AES-{}, {l} bytes of text, {tag_len}-byte tag",
                        key_len * 8
                    );
                    assert_eq!(a[l + tag_len..], fill(*l)[l + tag_len..], "past the tag");
                }
            }
        }

        /// The AVX-512 kernel takes exactly the texts of 0-128 bytes (four-block groups up
        /// to 64, eight-block ones above) and leaves longer ones pending for the library;
        /// the 256-bit kernel takes every length (longer texts one at a time); the AES-NI
        /// one texts of 0-64 bytes. Every kernel the CPU runs, each in turn. What a
        /// kernel seals, it opens as authentic, a flipped tag byte is forged and its text
        /// left as it came. (Whether its bytes are right is `tests/gcm_batch.rs`, against
        /// the library and aws-lc-rs.)
        #[test]
        fn the_kernel_takes_the_texts_it_should() {
            let kernels = GcmBatchKey::kernels_here();
            if kernels.is_empty() {
                eprintln!("no AVX2 with AES-NI here: no batch kernel runs");
            }
            for (id, kernel) in kernels {
                takes_the_texts_it_should(id, kernel);
            }
        }

        /// [`the_kernel_takes_the_texts_it_should`] for one kernel.
        fn takes_the_texts_it_should(id: c_int, kernel: &str) {
            let limit = kernel_text_max(kernel).min(400);
            let data = GcmKeyData::precompute(&[0x42; 16]).unwrap();
            let batch = GcmBatchKey::new_for(&data, 16, id).unwrap();
            let lens: Vec<usize> = (0..=400).collect();
            let taken = lens.iter().filter(|&&l| l <= limit).count() as u32;
            let mut bufs: Vec<Vec<u8>> = lens.iter().map(|&l| vec![l as u8; l + 16]).collect();
            let mut ops: Vec<RawAeadOp> = bufs
                .iter_mut()
                .enumerate()
                .map(|(i, b)| {
                    let len = b.len() - 16;
                    let mut op = RawAeadOp::UNUSED;
                    op.tag = b[len..].as_mut_ptr();
                    op.text = b.as_mut_ptr();
                    op.len = len as u64;
                    op.iv[..8].copy_from_slice(&(i as u64).to_be_bytes());
                    op.aad[..8].copy_from_slice(&[1, 2, 3, 4, 0, 0, 0, i as u8]);
                    op.aad_len = 8;
                    op.tag_len = 16;
                    op
                })
                .collect();
            let run = |ops: &mut [RawAeadOp], encrypt: bool| {
                // SAFETY: every op points into its own live buffer of len + 16 bytes (the
                // text, then the tag), which nothing else borrows during the call; the key
                // data and the batch data are live and of the sizes the kernel expects.
                unsafe {
                    espgw_gcm_batch(
                        batch.0.as_ptr(),
                        data.as_ptr().cast(),
                        16,
                        c_int::from(encrypt),
                        ops.as_mut_ptr(),
                        ops.len() as u32,
                    )
                }
            };
            assert_eq!(run(&mut ops, true), taken, "{kernel}: sealed");
            for (op, &l) in ops.iter().zip(&lens) {
                let want = if l <= limit { OP_DONE } else { -1 };
                assert_eq!(op.status, want, "{kernel}: seal, {l} bytes of text");
            }
            let forged = [100, 300];
            for (op, b) in ops.iter_mut().zip(&mut bufs) {
                op.status = -1;
                if forged.contains(&(op.len as usize)) {
                    let last = b.len() - 1;
                    b[last] ^= 1;
                }
            }
            let sealed = bufs.clone();
            assert_eq!(run(&mut ops, false), taken, "{kernel}: opened");
            for (op, &l) in ops.iter().zip(&lens) {
                let want = if l > limit {
                    -1
                } else if forged.contains(&l) {
                    OP_FORGED
                } else {
                    OP_AUTHENTIC
                };
                assert_eq!(op.status, want, "{kernel}: open, {l} bytes of text");
            }
            for ((b, &l), before) in bufs.iter().zip(&lens).zip(&sealed) {
                if l > limit {
                    continue;
                }
                if forged.contains(&l) {
                    assert_eq!(b, before, "{l} bytes, forged: left as it came");
                    continue;
                }
                assert!(
                    b[..l].iter().all(|&x| x == l as u8),
                    "{l} bytes: text restored"
                );
            }
        }
    }
}
