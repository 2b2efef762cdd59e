//! The port trait every I/O back-end implements: receive a burst, transmit a burst, and
//! give buffers back to the pool.

use std::io;

use espgw_core::packet::{Packet, PacketPool};

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
}
