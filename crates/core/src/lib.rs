//! espgw's data plane, sans I/O.
//!
//! Plain functions over byte buffers and immutable tables: no sockets or threads; the
//! time comes in as an argument. The live workers, the pcap tool, the benchmark and the
//! fuzzers all drive one [`node::Node`]: follow a packet top to bottom there.
//!
//! - [`packet`]: buffers with headroom, and their pool;
//! - [`flow`]: parsing a frame down to the selector fields;
//! - [`spd`]: the security policy database;
//! - [`sa`]: security associations and their mutable state;
//! - [`replay`]: the anti-replay window (RFC 4303 §3.4.3, RFC 6479);
//! - [`esp_out`], [`esp_in`]: the ESP transforms;
//! - [`encap`]: what ESP and AH share: tunnel headers, transport-mode fix-ups;
//! - [`ah`]: the AH transforms (RFC 4302), alone or around ESP (bundles);
//! - [`node`]: one worker's whole packet path: host triage, reassembly, the pipeline,
//!   fragmentation and ICMP errors, neighbour holds;
//! - [`order`]: one SA over several workers: bursts in arrival order;
//! - [`pacing`]: smaller bursts for a slower worker of such a spread;
//! - [`transmit`]: what a node hands back: frames to send, queued per port;
//! - [`pipeline`]: a burst through the SPD, the SAs and the transforms;
//! - [`route`]: longest-prefix match and neighbours;
//! - [`neighbour`]: addresses learned by ARP and ND, bounded and aged;
//! - [`host`]: the gateway as a host: ARP, ND, ping, ICMP errors;
//! - [`fragment`]: IPv4 fragmentation before encryption;
//! - [`reassembly`]: fragmented ESP put back together, bounded;
//! - [`tables`]: one immutable snapshot of all of the above, built from a config;
//! - [`counters`]: drop reasons and counters.
#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod ah;
pub mod counters;
pub mod encap;
pub mod esp_in;
pub mod esp_out;
pub mod flow;
pub mod fragment;
pub mod host;
pub mod neighbour;
pub mod node;
pub mod order;
pub mod pacing;
pub mod packet;
pub mod pipeline;
pub mod reassembly;
pub mod replay;
pub mod route;
pub mod sa;
pub mod spd;
pub mod tables;
pub mod transmit;

pub use counters::DropReason;
pub use espgw_config::Direction;
pub use node::{Node, Transmit};
pub use pipeline::Pipeline;
pub use tables::Tables;
