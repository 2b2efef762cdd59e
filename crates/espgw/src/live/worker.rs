//! One worker: receive a burst from each of its sockets, run it through its
//! [`Node`] (the whole packet path, sans I/O), transmit what the node queued — on its own
//! thread. Idle workers sleep in poll(2) instead of spinning, since the test bed shares
//! two cores between generator, gateways and receiver.

use std::sync::Arc;
use std::time::{Duration, Instant};

use espgw_core::packet::Packet;
use espgw_core::{Node, Transmit};
use espgw_io::poll::wait_readable;
use espgw_io::Port;

use super::shared::Shared;

/// Empty polls in a row before a worker sleeps.
const SPIN_BEFORE_SLEEP: u32 = 64;
/// How long an idle worker sleeps at most (it also wakes on traffic).
const SLEEP_MS: i32 = 20;
const HOUSEKEEPING: Duration = Duration::from_millis(50);

pub struct Worker {
    pub id: usize,
    shared: Arc<Shared>,
    ports: Vec<Option<Box<dyn Port + Send>>>,
    node: Node,
    rx: Vec<Packet>,
    tx: Transmit,
}

impl Worker {
    /// `ports[i]` is this worker's socket of port `i` (`None`: another worker serves it).
    pub fn new(id: usize, shared: Arc<Shared>, ports: Vec<Option<Box<dyn Port + Send>>>) -> Self {
        let t = shared.tables();
        let burst = t.burst;
        let links = ports.iter().map(Option::is_some).collect();
        Worker {
            id,
            node: Node::new(t, shared.neighbours.clone(), links),
            tx: Transmit::new(ports.len(), burst),
            shared,
            ports,
            rx: Vec::with_capacity(burst),
        }
    }

    pub fn run(mut self) {
        let mut generation = self.shared.generation();
        let mut idle = 0u32;
        let mut last_house = Instant::now();
        let fds: Vec<_> = self
            .ports
            .iter()
            .filter_map(|p| p.as_ref().and_then(|p| p.poll_fd()))
            .collect();
        while !self.shared.stopping() {
            let g = self.shared.generation();
            if g != generation {
                self.node.set_tables(self.shared.tables());
                generation = g;
            }
            let mut work = 0;
            for port in 0..self.ports.len() {
                work += self.poll_port(port);
            }
            self.flush();
            let now = Instant::now();
            if now.duration_since(last_house) >= HOUSEKEEPING || self.node.neighbours_changed() {
                self.node.housekeeping(now, &mut self.tx);
                self.flush();
                self.publish();
                last_house = now;
            }
            if work == 0 {
                idle += 1;
                if idle >= SPIN_BEFORE_SLEEP {
                    wait_readable(&fds, SLEEP_MS);
                    idle = 0;
                }
            } else {
                idle = 0;
            }
        }
        self.publish();
    }

    /// One burst from `port` through the node; returns how many packets it had.
    fn poll_port(&mut self, port: usize) -> usize {
        let burst = self.node.tables().burst;
        let Some(p) = self.ports[port].as_mut() else {
            return 0;
        };
        let n = match p.rx_burst(self.node.pool(), &mut self.rx, burst) {
            Ok(n) => n,
            Err(e) => {
                crate::warn!("rx_error", "worker" => self.id, "port" => port, "error" => e);
                0
            }
        };
        if n > 0 {
            let now = Instant::now();
            self.node
                .receive(port as u16, &mut self.rx, now, &mut self.tx);
        }
        n
    }

    fn flush(&mut self) {
        for port in 0..self.tx.ports() {
            let queue = self.tx.queue(port);
            if queue.is_empty() {
                continue;
            }
            match self.ports.get_mut(port).and_then(Option::as_mut) {
                Some(p) => {
                    if let Err(e) = p.tx_burst(queue, self.node.pool()) {
                        crate::warn!("tx_error", "worker" => self.id, "port" => port, "error" => e);
                    }
                    // Whatever the back-end could not send went back to the pool.
                    for q in queue.drain(..) {
                        self.node.pool().put(q);
                    }
                }
                // A port this worker has no socket of (TUN served by another worker).
                None => self.node.recycle_unsent(queue),
            }
        }
    }

    fn publish(&mut self) {
        let acquires = self.node.take_acquires();
        if let Some(k) = &self.shared.keying {
            k.note_acquires(acquires);
        }
        let ports = self
            .ports
            .iter_mut()
            .map(|p| p.as_mut().map(|p| p.stats()).unwrap_or_default())
            .collect();
        let mut r = self.shared.reports[self.id]
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        r.pipeline = self.node.counters().clone();
        r.host = self.node.host_counters().clone();
        r.ports = ports;
    }
}
