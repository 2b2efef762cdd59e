//! Packet I/O for espgw: one small trait ([`port::Port`]) and its back-ends.
//!
//! - [`pcap`]: capture files (offline gateway, tests, replays);
//! - [`memory`]: in-memory ports that hand out fresh copies of template frames
//!   (benchmarks), and collect what is sent.
//!
//! - [`af_xdp`]: AF_XDP sockets (the live default where the XDP program loads);
//! - [`af_packet`]: AF_PACKET with PACKET_MMAP rings (fallback and explicit choice);
//! - [`tun`]: a TUN interface, for a host's own traffic;
//! - [`netns`]: entering a network namespace and reading interface facts there.
//!
//! `unsafe` is denied in the crate and allowed only in the modules at the kernel
//! boundary (`af_xdp`, `af_packet`, `tun`, `poll`, `netns`, `process`), each block with its SAFETY argument.
#![deny(unsafe_code)]

pub mod af_packet;
#[cfg(espgw_af_xdp)]
pub mod af_xdp;
#[cfg(not(espgw_af_xdp))]
#[path = "af_xdp_missing.rs"]
pub mod af_xdp;
pub mod cpu_list;
pub mod ethtool;
pub mod memory;
pub mod netns;
pub mod pcap;
pub mod poll;
pub mod port;
pub mod process;
pub mod queue_set;
pub mod seccomp;
pub mod tun;

pub use port::Port;

/// Whether this build has the AF_XDP back-end (libxdp was found at build time).
pub const HAVE_AF_XDP: bool = cfg!(espgw_af_xdp);

/// The port back-ends this build has, fastest live one first (`espgw --version`).
pub fn port_backends() -> Vec<&'static str> {
    let mut v = Vec::with_capacity(5);
    if HAVE_AF_XDP {
        v.push("af_xdp");
    }
    v.extend(["af_packet", "tun", "pcap", "memory"]);
    v
}
