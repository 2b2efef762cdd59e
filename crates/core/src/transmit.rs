//! What a node hands back from a burst: frames to send, queued per port.

use crate::packet::{Packet, PacketPool, Verdict};

/// Frames to transmit, one queue per port (index as in the configuration). The caller
/// sends them and hands what it could not send back with [`crate::Node::recycle_unsent`].
#[derive(Default)]
pub struct Transmit {
    queues: Vec<Vec<Packet>>,
}

impl Transmit {
    /// Empty queues for `ports` ports, each with room for two bursts.
    pub fn new(ports: usize, burst: usize) -> Self {
        Transmit {
            queues: (0..ports).map(|_| Vec::with_capacity(burst * 2)).collect(),
        }
    }
    /// The frames queued for `port` (empty for a port that does not exist).
    pub fn queue(&mut self, port: usize) -> &mut Vec<Packet> {
        if port >= self.queues.len() {
            self.queues.resize_with(port + 1, Vec::new);
        }
        &mut self.queues[port]
    }
    /// How many ports have a queue.
    pub fn ports(&self) -> usize {
        self.queues.len()
    }
    /// Frames queued on every port together.
    pub fn len(&self) -> usize {
        self.queues.iter().map(Vec::len).sum()
    }
    /// Whether no frame is queued on any port.
    pub fn is_empty(&self) -> bool {
        self.queues.iter().all(Vec::is_empty)
    }
    /// Queues every packet of `pkts` with a `Forward` verdict on its port and returns the
    /// others to `pool`, leaving `pkts` empty. A burst that all goes to one port whose queue
    /// is empty (the common case) changes places with that queue instead of moving packet
    /// by packet.
    pub(crate) fn push_burst(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) {
        if let Some(Verdict::Forward(port)) = pkts.first().map(|p| p.verdict) {
            let all_there = pkts.iter().all(|p| p.verdict == Verdict::Forward(port));
            if all_there && self.queue(usize::from(port)).is_empty() {
                std::mem::swap(self.queue(usize::from(port)), pkts);
                return;
            }
        }
        for p in pkts.drain(..) {
            match p.verdict {
                Verdict::Forward(port) => self.push(port, p),
                _ => pool.put(p),
            }
        }
    }
    #[inline]
    pub(crate) fn push(&mut self, port: u16, p: Packet) {
        match self.queues.get_mut(usize::from(port)) {
            Some(q) => q.push(p),
            None => self.queue(usize::from(port)).push(p),
        }
    }
}
