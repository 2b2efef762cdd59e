//! The port trait every I/O back-end implements: receive a burst, transmit a burst, and
//! give buffers back to the pool.

use std::io;
use std::os::fd::RawFd;

use espgw_core::packet::{Packet, PacketPool};

/// Counters of one port (one socket of it, for back-ends with a socket per worker).
#[derive(Debug, Clone, Copy, Default)]
pub struct PortStats {
    pub rx_packets: u64,
    pub rx_bytes: u64,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// Dropped before the gateway saw them (kernel ring full, truncated, oversized).
    pub rx_dropped: u64,
    /// Of `rx_dropped`: frames the kernel had no room for because the gateway did not take
    /// them in time (an AF_PACKET ring without a free slot; an AF_XDP receive ring, or its
    /// frames to receive into, used up). The rest of `rx_dropped` is malformed or too large.
    pub rx_ring_full: u64,
    /// Not sent: transmit ring full or frame too large.
    pub tx_dropped: u64,
    /// Addressed to another host's MAC (a promiscuous AF_PACKET port sees them): not the
    /// gateway's to process.
    pub rx_other_host: u64,
}

impl PortStats {
    pub fn add(&mut self, o: &PortStats) {
        self.rx_packets += o.rx_packets;
        self.rx_bytes += o.rx_bytes;
        self.tx_packets += o.tx_packets;
        self.tx_bytes += o.tx_bytes;
        self.rx_dropped += o.rx_dropped;
        self.rx_ring_full += o.rx_ring_full;
        self.tx_dropped += o.tx_dropped;
        self.rx_other_host += o.rx_other_host;
    }
}

pub trait Port {
    fn name(&self) -> &str;
    /// Appends up to `max` received packets (buffers from `pool`) to `out`; returns how
    /// many. 0 means nothing is waiting (or, for a file, the end).
    fn rx_burst(
        &mut self,
        pool: &mut PacketPool,
        out: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize>;
    /// Sends every packet in `pkts` and returns the buffers to `pool`.
    fn tx_burst(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize>;
    /// A descriptor that becomes readable when packets arrive, for an idle worker to
    /// sleep on.
    fn poll_fd(&self) -> Option<RawFd> {
        None
    }
    /// Every descriptor to sleep on (a port over several sockets has one each).
    fn poll_fds(&self) -> Vec<RawFd> {
        self.poll_fd().into_iter().collect()
    }
    fn stats(&mut self) -> PortStats {
        PortStats::default()
    }
    /// The back-end's name, for reports ("af_xdp", "af_packet", ...).
    fn kind(&self) -> &'static str;
}
