//! Helpers shared by the core's integration tests.
#![allow(dead_code)]

use std::sync::Arc;

mod frames;
#[allow(unused_imports)] // not every test file builds frames
pub use frames::*;

use espgw_config::*;
use espgw_core::Tables;
use espgw_crypto::{CryptoProvider, Suite};
use zeroize::Zeroizing;

pub fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
        .collect()
}

/// An SA with the given parameters; everything else at its default.
pub fn sa(
    spi: u32,
    direction: Direction,
    mode: Mode,
    key: &[u8],
    salt: [u8; 4],
    esn: bool,
) -> SaConfig {
    SaConfig {
        spi,
        direction,
        mode,
        proto: SaProto::Esp,
        suite: Suite::aes_gcm(key.len()),
        enc_key: Zeroizing::new([key, &salt[..]].concat()),
        auth_key: Zeroizing::new(Vec::new()),
        esn,
        initial_seq: 0,
        replay_window: DEFAULT_REPLAY_WINDOW,
        udp_encap: None,
        lifetime: Lifetime::default(),
        ttl: DEFAULT_TTL,
        name: None,
        loc: Location::default(),
        reqid: None,
    }
}

pub fn tables(cfg: &Config, provider: &dyn CryptoProvider) -> Arc<Tables> {
    Arc::new(Tables::build(cfg, provider, None).expect("tables"))
}
