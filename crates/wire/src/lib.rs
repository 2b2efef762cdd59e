//! Packet views for espgw.
//!
//! Every view is built with `new_checked`, which validates all lengths once; after that
//! every accessor is in bounds by construction. Nothing here panics on any byte sequence
//! (a property test feeds them random bytes).
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ah;
pub mod arp;
pub mod checksum;
pub mod esp;
pub mod ethernet;
pub mod icmp;
pub mod ipv4;
pub mod ipv6;
pub mod nd;
pub mod tcp;
pub mod udp;

use std::fmt;

/// Why a view refused its bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// Fewer bytes than the header (or its length fields) need.
    Truncated,
    /// A field holds a value the format forbids (version, header length, ...).
    Malformed,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            WireError::Truncated => f.write_str("truncated"),
            WireError::Malformed => f.write_str("malformed"),
        }
    }
}

impl std::error::Error for WireError {}

/// A result whose error is a [`WireError`].
pub type Result<T> = std::result::Result<T, WireError>;

/// IP protocol numbers used here.
pub mod proto {
    /// IPv6 hop-by-hop options.
    pub const HOPOPT: u8 = 0;
    /// ICMPv4.
    pub const ICMP: u8 = 1;
    /// IPv4 in IP (tunnel mode, IPv4 inner).
    pub const IPIP: u8 = 4;
    /// TCP.
    pub const TCP: u8 = 6;
    /// UDP.
    pub const UDP: u8 = 17;
    /// IPv6 in IP (tunnel mode, IPv6 inner).
    pub const IPV6: u8 = 41;
    /// IPv6 routing header.
    pub const ROUTING: u8 = 43;
    /// IPv6 fragment header.
    pub const FRAGMENT: u8 = 44;
    /// ESP (RFC 4303).
    pub const ESP: u8 = 50;
    /// AH (RFC 4302).
    pub const AH: u8 = 51;
    /// ICMPv6.
    pub const ICMPV6: u8 = 58;
    /// No next header (an ESP dummy packet).
    pub const NO_NEXT: u8 = 59;
    /// IPv6 destination options.
    pub const DSTOPTS: u8 = 60;
}

pub(crate) fn be16(b: &[u8], at: usize) -> u16 {
    match b.get(at..at + 2) {
        Some(s) => u16::from_be_bytes([s[0], s[1]]),
        None => 0,
    }
}

pub(crate) fn be32(b: &[u8], at: usize) -> u32 {
    match b.get(at..at + 4) {
        Some(s) => u32::from_be_bytes([s[0], s[1], s[2], s[3]]),
        None => 0,
    }
}

pub(crate) fn put16(b: &mut [u8], at: usize, v: u16) {
    if let Some(s) = b.get_mut(at..at + 2) {
        s.copy_from_slice(&v.to_be_bytes());
    }
}
