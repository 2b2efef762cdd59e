//! The gateway as a library: its live runtime, the offline gateway, reports and the
//! sequence-number store. The `espgw` binary is its command line.
//!
//! The lab (`crates/lab`, the `espgw-lab` binary: test bed, RFC 2544 tester, benchmarks,
//! demo, traffic generator) drives the gateway through the small surface re-exported at
//! this crate's root — port and fan-out choices, the control socket's client, the
//! seccomp filter, the offline node — and through the `espgw` binary's command line.
#![forbid(unsafe_code)]

pub mod live;
pub mod offline;
pub mod report;
pub mod seq_store;

use espgw_config::Config;

pub use live::confine::{install_filter as install_seccomp_filter, SeccompArg};
pub use live::control::{render as render_show, request as control_request};
pub use live::{ensure_bpffs, FanoutArg, IoChoice};

/// The algorithm switches of the command line, for every configuration this process loads
/// (the first one and every reload).
static CRYPTO_POLICY: std::sync::OnceLock<espgw_config::CryptoPolicy> = std::sync::OnceLock::new();

/// Sets the algorithm switches once, at start-up (later calls change nothing).
pub fn set_crypto_policy(p: espgw_config::CryptoPolicy) {
    let _ = CRYPTO_POLICY.set(p);
}

pub fn crypto_policy() -> espgw_config::CryptoPolicy {
    CRYPTO_POLICY.get().copied().unwrap_or_default()
}

/// Why a configuration file may not be used by the gateway: it holds keys, so nobody but
/// its owner may read it (as wg-quick warns; the running gateway refuses). `None` if fine.
pub fn exposed_config(path: &std::path::Path) -> Option<String> {
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(path).ok()?.permissions().mode();
    (mode & 0o077 != 0).then(|| {
        format!(
            "{}: readable or writable by group or others (mode {:04o}); it holds keys: \
             chmod 600 {}",
            path.display(),
            mode & 0o7777,
            path.display()
        )
    })
}

/// Prints what a loaded configuration should be warned about (legacy algorithms).
pub fn warn_about(cfg: &Config) {
    for w in cfg.warnings() {
        eprintln!("espgw: warning: {w}");
    }
}
