//! Crypto for espgw.
//!
//! - [`suite`]: the ESP algorithms (encryption, integrity) and their key, IV, padding and ICV
//!   sizes;
//! - [`esp`]: [`EspKey`], one prepared transform per SA that seals or opens a burst of ESP
//!   packets (IV, encryption, ICV), for every suite;
//! - [`ah`]: [`AhKey`], the ICV of AH (RFC 4302) over the pieces the data plane hands it;
//! - [`cipher`] and [`integrity`]: the encrypt-then-MAC building blocks (AES-CBC/CTR, 3DES;
//!   HMAC-SHA1/SHA-2/MD5, AES-XCBC-MAC);
//! - [`CryptoProvider`] / [`AeadKey`]: the AES-GCM fast path, a whole burst per call because
//!   per-call overhead dominates small packets, with two back-ends: [`ipsec_mb`]
//!   (intel-ipsec-mb through a C shim, what DPDK and VPP use) and [`aws_lc`] (portable).
//!
//! [`default_provider`] picks the fastest AES-GCM back-end available on this machine.
#![deny(unsafe_op_in_unsafe_fn)]

mod aes_ccm;
pub mod ah;
pub mod aws_lc;
#[cfg(espgw_ipsec_mb)]
mod chacha_batch;
pub mod cipher;
pub mod ct;
pub mod esp;
pub mod integrity;
pub mod ipsec_mb;
#[cfg(espgw_ipsec_mb)]
mod ipsec_mb_ccm;
mod ipsec_mb_esp;
pub mod suite;

pub use ah::{AhBurst, AhKey, AhOp, Icv};
pub use esp::{esp_key, EspKey, EspOp};
pub use suite::{Encryption, Integrity, Suite, SuiteError};

use std::fmt;
use std::sync::Arc;

/// AEAD algorithms of the ESP data plane (RFC 4106 AES-GCM).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AeadAlgorithm {
    AesGcm128,
    AesGcm192,
    AesGcm256,
}

impl AeadAlgorithm {
    /// AES key length in bytes (without the 4-byte salt).
    pub const fn key_len(self) -> usize {
        match self {
            AeadAlgorithm::AesGcm128 => 16,
            AeadAlgorithm::AesGcm192 => 24,
            AeadAlgorithm::AesGcm256 => 32,
        }
    }

    pub fn from_key_len(len: usize) -> Option<Self> {
        match len {
            16 => Some(AeadAlgorithm::AesGcm128),
            24 => Some(AeadAlgorithm::AesGcm192),
            32 => Some(AeadAlgorithm::AesGcm256),
            _ => None,
        }
    }

    pub const fn name(self) -> &'static str {
        match self {
            AeadAlgorithm::AesGcm128 => "aes-128-gcm",
            AeadAlgorithm::AesGcm192 => "aes-192-gcm",
            AeadAlgorithm::AesGcm256 => "aes-256-gcm",
        }
    }
}

impl fmt::Display for AeadAlgorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a key could not be made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CryptoError {
    BadKeyLength {
        expected: usize,
        got: usize,
    },
    BadIcvLength(usize),
    /// The combination of algorithms is not one espgw runs.
    Suite(SuiteError),
    Backend(String),
}

impl fmt::Display for CryptoError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CryptoError::BadKeyLength { expected, got } => {
                write!(f, "key is {got} bytes, the algorithm needs {expected}")
            }
            CryptoError::BadIcvLength(n) => write!(f, "ICV length {n} not allowed (8, 12 or 16)"),
            CryptoError::Suite(e) => e.fmt(f),
            CryptoError::Backend(s) => write!(f, "crypto back-end: {s}"),
        }
    }
}

impl std::error::Error for CryptoError {}

/// One packet's AEAD operation, in place.
///
/// `buf` holds the text followed by the ICV: `buf[..len - icv]` is encrypted/decrypted and
/// `buf[len - icv..]` receives (seal) or holds (open) the ICV.
pub struct AeadOp<'a> {
    pub nonce: [u8; 12],
    pub aad: [u8; 12],
    pub aad_len: u8,
    pub buf: &'a mut [u8],
}

impl<'a> AeadOp<'a> {
    pub fn aad(&self) -> &[u8] {
        &self.aad[..usize::from(self.aad_len).min(12)]
    }
}

/// A prepared key (expanded schedule, hash subkeys) for one SA and direction.
/// Implementations zeroize their key material on drop.
pub trait AeadKey: Send + Sync {
    fn algorithm(&self) -> AeadAlgorithm;
    fn icv_len(&self) -> usize;
    /// Encrypts every op and writes its ICV. Ops shorter than the ICV are left as they are.
    fn seal_burst(&self, ops: &mut [AeadOp<'_>]);
    /// Decrypts every op and checks its ICV in constant time; `ok[i]` tells whether op `i`
    /// was authentic. The text of an op that failed is zeroed, so unauthenticated plaintext
    /// never leaves this call.
    fn open_burst(&self, ops: &mut [AeadOp<'_>], ok: &mut [bool]);
    /// Seals ESP packets in RFC 4106's layout (SPI, sequence number, 8-byte IV, text, ICV;
    /// `salt` is the key's 4-byte nonce salt, `esn` whether the AAD carries the high
    /// sequence bits): writes each packet's IV (its sequence number, unique per key,
    /// RFC 4106 §3.1), encrypts, and writes the ICV. Ops too short for header, IV and ICV
    /// are left alone. The default goes through [`AeadKey::seal_burst`]; a back-end can
    /// read nonce and AAD straight from the packets instead.
    fn seal_esp(&self, salt: &[u8; 4], esn: bool, ops: &mut [EspOp<'_>]) {
        esp::seal_esp_with_aead_ops(self, salt, esn, ops);
    }
    /// Opens ESP packets in RFC 4106's layout: `ok[i]` tells whether op `i` was authentic
    /// (one per op; an op too short to hold header, IV and ICV is not). The text of an op
    /// that failed is zeroed. The default goes through [`AeadKey::open_burst`].
    fn open_esp(&self, salt: &[u8; 4], esn: bool, ops: &mut [EspOp<'_>], ok: &mut [bool]) {
        esp::open_esp_with_aead_ops(self, salt, esn, ops, ok);
    }
}

/// A source of keys.
pub trait CryptoProvider: Send + Sync {
    /// Short name shown at start-up and in benchmark reports.
    fn name(&self) -> String;
    fn aead_key(
        &self,
        alg: AeadAlgorithm,
        key: &[u8],
        icv_len: usize,
    ) -> Result<Arc<dyn AeadKey>, CryptoError>;
    /// A transform for an ESP suite other than AES-GCM that runs a burst together
    /// (multi-buffer), where this back-end has one; `None` leaves the suite to the
    /// portable one-packet transforms. Key lengths are checked by the caller
    /// ([`esp_key`]).
    fn multi_buffer_esp_key(
        &self,
        _suite: Suite,
        _enc_key: &[u8],
        _auth_key: &[u8],
        _esn: bool,
    ) -> Option<Result<Arc<dyn EspKey>, CryptoError>> {
        None
    }
    /// AH's ICV over bursts (multi-buffer), where this back-end has it for `integ`;
    /// `None` leaves AH to the portable one-packet MACs. The key length is checked by
    /// the caller ([`AhKey::with_provider`]).
    fn multi_buffer_ah(
        &self,
        _integ: Integrity,
        _key: &[u8],
    ) -> Option<Result<Box<dyn AhBurst>, CryptoError>> {
        None
    }
}

/// Checks the lengths every back-end requires.
pub(crate) fn check_key(alg: AeadAlgorithm, key: &[u8], icv_len: usize) -> Result<(), CryptoError> {
    if key.len() != alg.key_len() {
        return Err(CryptoError::BadKeyLength {
            expected: alg.key_len(),
            got: key.len(),
        });
    }
    if !matches!(icv_len, 8 | 12 | 16) {
        return Err(CryptoError::BadIcvLength(icv_len));
    }
    Ok(())
}

/// SHA-256 over the concatenation of `parts`: names derived from key material (a state
/// file per key) without keeping or showing the key itself.
pub fn sha256(parts: &[&[u8]]) -> [u8; 32] {
    let mut ctx = aws_lc_rs::digest::Context::new(&aws_lc_rs::digest::SHA256);
    for part in parts {
        ctx.update(part);
    }
    let mut out = [0u8; 32];
    out.copy_from_slice(ctx.finish().as_ref());
    out
}

/// The crypto back-ends compiled into this build (`espgw --version`): intel-ipsec-mb only
/// where its header was found at build time; aws-lc-rs always.
pub const COMPILED_BACKENDS: &[&str] = if cfg!(espgw_ipsec_mb) {
    &["intel-ipsec-mb", "aws-lc-rs"]
} else {
    &["aws-lc-rs"]
};

/// Which back-end to use.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProviderChoice {
    /// The fastest available (intel-ipsec-mb when built and it initialises).
    Auto,
    /// intel-ipsec-mb's direct API, with short AES-GCM packets through espgw's batch
    /// kernel where the CPU allows (`csrc/gcm_batch.c`).
    IpsecMb,
    /// intel-ipsec-mb's direct API alone, one AES-GCM packet per call (for comparison).
    IpsecMbDirect,
    /// intel-ipsec-mb through its job API (for comparison).
    IpsecMbJob,
    AwsLc,
}

impl std::str::FromStr for ProviderChoice {
    type Err = UnknownProvider;
    fn from_str(s: &str) -> Result<Self, UnknownProvider> {
        match s {
            "auto" => Ok(ProviderChoice::Auto),
            "ipsec-mb" | "ipsec_mb" => Ok(ProviderChoice::IpsecMb),
            "ipsec-mb-direct" => Ok(ProviderChoice::IpsecMbDirect),
            "ipsec-mb-job" => Ok(ProviderChoice::IpsecMbJob),
            "aws-lc" | "aws_lc" => Ok(ProviderChoice::AwsLc),
            other => Err(UnknownProvider(other.to_string())),
        }
    }
}

/// A crypto provider name that is none of `auto`, `ipsec-mb`, `ipsec-mb-direct`,
/// `ipsec-mb-job`, `aws-lc`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownProvider(pub String);

impl fmt::Display for UnknownProvider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "unknown crypto provider '{}' (auto, ipsec-mb, ipsec-mb-direct, ipsec-mb-job, aws-lc)",
            self.0
        )
    }
}

impl std::error::Error for UnknownProvider {}

/// Why a requested crypto provider cannot be used here.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailable {
    /// espgw was built without intel-ipsec-mb.
    NotBuilt,
    /// intel-ipsec-mb is built in but found no code path for this CPU.
    NoManager,
}

impl fmt::Display for Unavailable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Unavailable::NotBuilt => write!(
                f,
                "espgw was built without intel-ipsec-mb (install libipsec-mb-dev and rebuild)"
            ),
            Unavailable::NoManager => {
                write!(
                    f,
                    "intel-ipsec-mb could not initialise a manager on this CPU"
                )
            }
        }
    }
}

impl std::error::Error for Unavailable {}

/// Returns the requested provider, or an error naming why it is not available.
pub fn provider(choice: ProviderChoice) -> Result<Arc<dyn CryptoProvider>, Unavailable> {
    match choice {
        ProviderChoice::AwsLc => Ok(Arc::new(aws_lc::AwsLcProvider)),
        ProviderChoice::IpsecMb => {
            ipsec_mb::IpsecMbProvider::new().map(|p| Arc::new(p) as Arc<dyn CryptoProvider>)
        }
        ProviderChoice::IpsecMbDirect => {
            ipsec_mb::IpsecMbProvider::with_api(ipsec_mb::MbApi::Direct)
                .map(|p| Arc::new(p) as Arc<dyn CryptoProvider>)
        }
        ProviderChoice::IpsecMbJob => ipsec_mb::IpsecMbProvider::with_api(ipsec_mb::MbApi::Job)
            .map(|p| Arc::new(p) as Arc<dyn CryptoProvider>),
        ProviderChoice::Auto => Ok(default_provider()),
    }
}

/// The fastest provider available here.
pub fn default_provider() -> Arc<dyn CryptoProvider> {
    match ipsec_mb::IpsecMbProvider::new() {
        Ok(p) => Arc::new(p),
        Err(_) => Arc::new(aws_lc::AwsLcProvider),
    }
}

/// Every provider that works on this machine (for known-answer tests and benchmarks).
pub fn all_providers() -> Vec<Arc<dyn CryptoProvider>> {
    let mut v: Vec<Arc<dyn CryptoProvider>> = Vec::new();
    for api in [
        ipsec_mb::MbApi::Batch,
        ipsec_mb::MbApi::Direct,
        ipsec_mb::MbApi::Job,
    ] {
        if let Ok(p) = ipsec_mb::IpsecMbProvider::with_api(api) {
            v.push(Arc::new(p));
        }
    }
    v.push(Arc::new(aws_lc::AwsLcProvider));
    v
}

/// Helpers shared by this crate's unit tests: the integration tests' own (one file, two
/// compilation units).
#[cfg(test)]
#[path = "../tests/common/mod.rs"]
pub(crate) mod test_util;
