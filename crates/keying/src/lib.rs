//! The SA contract between espgw and an IKE daemon.
//!
//! strongSwan's charon negotiates IKEv2; its `kernel-espgw` plugin (C, in `plugins/`)
//! implements charon's `kernel_ipsec_t` and forwards every call over a local stream socket
//! to the gateway, which answers and sends events back. This crate holds what both sides
//! of that socket agree on, without any I/O, so that it can be unit tested and fuzzed:
//!
//! - [`frame`]: the framing: a length-prefixed header with version, kind and request id,
//!   then type-length-value fields; bounded, and refusing what it does not understand;
//! - [`message`]: the typed requests, replies and events, encoded and decoded;
//! - [`algorithms`]: IKEv2 transform numbers (RFC 7296 §3.3.2, IANA) to espgw's suites;
//! - [`db`]: the negotiated SAs and policies, with SPI allocation and the policy
//!   reference counts charon expects, turned into configuration entries beside the static
//!   ones.
//!
//! The protocol is documented for implementers in `docs/sa-contract.md`.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod algorithms;
pub mod db;
pub mod frame;
pub mod message;

pub use db::{KeyingDb, KeyingError};
pub use frame::{FrameError, PROTOCOL_VERSION};
pub use message::{Event, Message, Reply, Request};
