//! In-memory ports for benchmarks and tests. Like a NIC's receive path, the receive side
//! writes a fresh copy of a template frame into each buffer, so the pipeline always works
//! on plaintext (or ciphertext) it has not touched before.

use std::io;

use espgw_core::packet::{Packet, PacketPool};

use crate::port::Port;

/// Receives copies of `templates`, round robin, forever; counts what it transmits.
pub struct MemoryPort {
    templates: Vec<Vec<u8>>,
    next: usize,
    pub tx_packets: u64,
    pub tx_bytes: u64,
    /// The last transmitted frames are kept when `keep` is set (for tests).
    pub keep: bool,
    pub sent: Vec<Vec<u8>>,
}

impl MemoryPort {
    pub fn new(templates: Vec<Vec<u8>>) -> Self {
        MemoryPort {
            templates,
            next: 0,
            tx_packets: 0,
            tx_bytes: 0,
            keep: false,
            sent: Vec::new(),
        }
    }

    /// Receives next from template `index` (modulo their number): several workers that
    /// share one input by ticket read the templates in ticket order.
    pub fn seek(&mut self, index: usize) {
        if !self.templates.is_empty() {
            self.next = index % self.templates.len();
        }
    }
}

impl Port for MemoryPort {
    fn kind(&self) -> &'static str {
        "memory"
    }
    fn name(&self) -> &str {
        "memory"
    }
    fn rx_burst(
        &mut self,
        pool: &mut PacketPool,
        out: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        if self.templates.is_empty() {
            return Ok(0);
        }
        for _ in 0..max {
            let mut p = pool.get();
            let t = &self.templates[self.next];
            self.next = if self.next + 1 == self.templates.len() {
                0
            } else {
                self.next + 1
            };
            p.load(t)
                .map_err(|r| io::Error::new(io::ErrorKind::InvalidInput, r.describe()))?;
            out.push(p);
        }
        Ok(max)
    }
    fn tx_burst(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        let n = pkts.len();
        for p in pkts.drain(..) {
            self.tx_packets += 1;
            self.tx_bytes += p.len() as u64;
            if self.keep {
                self.sent.push(p.data().to_vec());
            }
            pool.put(p);
        }
        Ok(n)
    }
}
