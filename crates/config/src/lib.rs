//! espgw configuration: one model ([`model::Config`]), three ways in.
//!
//! - [`secgw`]: DPDK ipsec-secgw `sp`/`sa`/`rt`/`neigh` lines, as they are;
//! - [`setkey`]: setkey(8) scripts (`add`, `spdadd`, `flush`, `spdflush`);
//! - [`native`]: espgw's own TOML format, documented in the README.
//!
//! [`load`] detects the format from the content unless told. Every error names the file,
//! the line and the field ([`ConfigError`]).
#![forbid(unsafe_code)]

pub mod algorithms;
pub mod error;
pub mod model;
pub mod native;
pub mod secgw;
pub mod setkey;
mod text;

pub use error::ConfigError;
pub use model::*;

use std::path::Path;

/// The three input formats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Native,
    Secgw,
    Setkey,
}

impl std::str::FromStr for Format {
    type Err = UnknownFormat;
    fn from_str(s: &str) -> Result<Self, UnknownFormat> {
        match s {
            "native" | "toml" => Ok(Format::Native),
            "secgw" | "dpdk" | "ipsec-secgw" => Ok(Format::Secgw),
            "setkey" => Ok(Format::Setkey),
            other => Err(UnknownFormat(other.to_string())),
        }
    }
}

/// A configuration format name that is none of `native`, `secgw`, `setkey`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownFormat(pub String);

impl std::fmt::Display for UnknownFormat {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "unknown config format '{}' (native, secgw, setkey)",
            self.0
        )
    }
}

impl std::error::Error for UnknownFormat {}

/// Guesses the format from the first meaningful line.
pub fn detect(text: &str) -> Format {
    for line in text.lines() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let first = t.split_whitespace().next().unwrap_or("");
        return match first {
            "sp" | "sa" | "rt" | "neigh" => Format::Secgw,
            "add" | "spdadd" | "flush;" | "flush" | "spdflush;" | "spdflush" | "delete"
            | "spddelete" => Format::Setkey,
            _ => Format::Native,
        };
    }
    Format::Native
}

/// Parses `text` (named `file` in errors) in the given or detected format and validates it.
pub fn parse(text: &str, file: &str, format: Option<Format>) -> Result<Config, ConfigError> {
    parse_with(text, file, format, CryptoPolicy::default())
}

/// [`parse`], with algorithm switches given outside the file (the command line) added to
/// those the file sets.
pub fn parse_with(
    text: &str,
    file: &str,
    format: Option<Format>,
    policy: CryptoPolicy,
) -> Result<Config, ConfigError> {
    let cfg = parse_unvalidated(text, file, format, policy)?;
    cfg.validate()?;
    cfg.check_file_rules()?;
    Ok(cfg)
}

/// [`parse_with`] without the checks across the whole configuration ([`Config::validate`]):
/// for tools and tests that take a configuration apart before using the parts (for
/// example one gateway's directions as two gateways). `Tables::build` validates what it
/// is given, so nothing unvalidated reaches a data plane.
pub fn parse_unvalidated(
    text: &str,
    file: &str,
    format: Option<Format>,
    policy: CryptoPolicy,
) -> Result<Config, ConfigError> {
    let mut cfg = match format.unwrap_or_else(|| detect(text)) {
        Format::Native => native::parse(text, file)?,
        Format::Secgw => secgw::parse(text, file)?,
        Format::Setkey => setkey::parse(text, file)?,
    };
    cfg.policy = cfg.policy.union(policy);
    Ok(cfg)
}

/// Reads and parses a file.
pub fn load(path: &Path, format: Option<Format>) -> Result<Config, ConfigError> {
    load_with(path, format, CryptoPolicy::default())
}

/// [`load`] with command-line algorithm switches.
pub fn load_with(
    path: &Path,
    format: Option<Format>,
    policy: CryptoPolicy,
) -> Result<Config, ConfigError> {
    let file = path.display().to_string();
    // The file's text holds the keys: wiped once parsed.
    let text = zeroize::Zeroizing::new(
        std::fs::read_to_string(path)
            .map_err(|e| ConfigError::new(&file, 0, "file", format!("cannot read: {e}")))?,
    );
    parse_with(&text, &file, format, policy)
}

/// The built-in default configuration: gateway 1 of the test bed, an AES-128-GCM tunnel
/// from 198.51.100.0/24 (south, port 0) to 203.0.113.0/24 via 192.0.2.1 -> 192.0.2.2
/// (north, port 1), and the reverse inbound SA.
pub const DEFAULT_CONFIG: &str = include_str!("default.toml");

/// The matching configuration of the peer gateway (gateway 2).
pub const DEFAULT_PEER_CONFIG: &str = include_str!("default-peer.toml");
