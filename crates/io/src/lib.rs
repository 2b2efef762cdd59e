//! Packet I/O for espgw: one small trait ([`port::Port`]) and its back-ends.
//!
//! - [`pcap`]: capture files (offline gateway, tests, replays);
//! - [`memory`]: in-memory ports that hand out fresh copies of template frames
//!   (benchmarks), and collect what is sent.
//!
//! Live back-ends (AF_XDP, AF_PACKET, TUN) implement the same trait.
#![forbid(unsafe_code)]

pub mod memory;
pub mod pcap;
pub mod port;

pub use port::Port;
