//! The port trait every I/O back-end implements: receive a burst, transmit a burst, and
//! give buffers back to the pool.

use std::io;
use std::os::fd::RawFd;

use espgw_core::packet::{Packet, PacketPool};
use espgw_wire::ethernet::{ETHERTYPE_QINQ, ETHERTYPE_VLAN};

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
    /// Addressed to another host's MAC (a promiscuous AF_PACKET port and an XDP program see
    /// them): not the gateway's to process.
    pub rx_other_host: u64,
    /// Tagged for a VLAN (802.1Q with a VLAN ID, or 802.1ad): the frame belongs to that
    /// VLAN's network (a VLAN sub-interface's), not to the port's untagged one.
    pub rx_vlan_tagged: u64,
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
        self.rx_vlan_tagged += o.rx_vlan_tagged;
    }
}

/// Whether a tag (`tpid`, `tci`) puts a frame on a VLAN: an 802.1ad tag always, an 802.1Q
/// tag unless its VLAN ID is 0. A VLAN ID of 0 only carries a priority (802.1p, "priority
/// tagged"): the frame is the untagged network's, as Linux takes it on the base interface.
pub(crate) fn tag_names_a_vlan(tpid: u16, tci: u16) -> bool {
    tpid == ETHERTYPE_QINQ || (tpid == ETHERTYPE_VLAN && tci & 0x0fff != 0)
}

/// Whether `frame` (Ethernet, the tag still in it) is tagged for a VLAN
/// ([`tag_names_a_vlan`]). A frame too short to say is left to the pipeline, which drops
/// it as malformed.
pub(crate) fn frame_names_a_vlan(frame: &[u8]) -> bool {
    match frame.get(12..16) {
        Some(&[t0, t1, c0, c1]) => {
            tag_names_a_vlan(u16::from_be_bytes([t0, t1]), u16::from_be_bytes([c0, c1]))
        }
        _ => false,
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

#[cfg(test)]
mod tests {
    use super::{frame_names_a_vlan, tag_names_a_vlan};

    fn frame(ethertype: [u8; 2], tci: [u8; 2]) -> Vec<u8> {
        let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        f.extend_from_slice(&ethertype);
        f.extend_from_slice(&tci);
        f.extend_from_slice(&[0x08, 0x00, 0x45]);
        f
    }

    #[test]
    fn a_vlan_id_or_a_provider_tag_puts_a_frame_on_a_vlan() {
        assert!(frame_names_a_vlan(&frame([0x81, 0x00], [0x00, 42])));
        assert!(frame_names_a_vlan(&frame([0x81, 0x00], [0xef, 0xff])));
        assert!(frame_names_a_vlan(&frame([0x88, 0xa8], [0x00, 0x00])));
        // Priority tagged (VLAN ID 0, priority 5): the untagged network's.
        assert!(!frame_names_a_vlan(&frame([0x81, 0x00], [0xa0, 0x00])));
        // Untagged IPv4 and IPv6, ARP.
        assert!(!frame_names_a_vlan(&frame([0x08, 0x00], [0x45, 0x00])));
        assert!(!frame_names_a_vlan(&frame([0x86, 0xdd], [0x60, 0x00])));
        assert!(!frame_names_a_vlan(&frame([0x08, 0x06], [0x00, 0x01])));
        // Too short to hold a tag: the pipeline's to drop.
        assert!(!frame_names_a_vlan(&frame([0x81, 0x00], [0x00, 42])[..15]));
        assert!(!frame_names_a_vlan(&[]));
        assert!(tag_names_a_vlan(0x8100, 0x0001));
        assert!(!tag_names_a_vlan(0x8100, 0xe000));
    }
}
