//! One worker: receive a burst from each of its sockets, run it through its
//! [`Node`] (the whole packet path, sans I/O), transmit what the node queued — on its own
//! thread. Idle workers sleep in poll(2) instead of spinning, since the test bed shares
//! two cores between generator, gateways and receiver.
//!
//! Two ways to spread a port's traffic over workers:
//!
//! - each worker has its own socket of the port (an AF_XDP queue, an AF_PACKET fanout
//!   member): the kernel decides which worker sees which packet, by flow hash or round
//!   robin, and the workers never wait for each other;
//! - `--fanout ordered`: one socket per port that every worker reads in turn
//!   ([`WorkerPort::Shared`]). A burst takes a ticket, its place in arrival order, while
//!   the worker still holds the socket; the pipeline reserves sequence numbers (outbound)
//!   and updates replay windows (inbound) in ticket order, and the burst is transmitted in
//!   ticket order; everything else (encapsulation, crypto, routing) runs in parallel. So
//!   one SA is spread over every worker and its packets leave in the order they came
//!   (`espgw_core::order`). Workers join the spread as the load needs them
//!   ([`super::spread`]): a worker that is not engaged reads nothing and sleeps.

use std::io;
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::{Duration, Instant};

use espgw_core::order::BurstOrder;
use espgw_core::pacing::PacedWorker;
use espgw_core::packet::{Packet, PacketPool};
use espgw_core::{Node, Transmit};
use espgw_io::poll::wait_readable;
use espgw_io::port::PortStats;
use espgw_io::process::thread_cpu_time;
use espgw_io::Port;

use super::shared::Shared;
use super::spread::{Advice, Crew, Load};

/// A socket every worker of an ordered spread uses, one at a time.
pub type SharedSocket = Arc<Mutex<Box<dyn Port + Send>>>;

/// A worker's access to one port.
pub enum WorkerPort {
    /// This worker's own socket (a queue or fanout member of the port).
    Own(Box<dyn Port + Send>),
    /// The port's sockets (one per receive queue), shared by every worker (ordered
    /// spread). `next`: the socket this worker tries first next time (taken in turn, so
    /// that no queue waits behind a busy one); frames are sent on the first, so that they
    /// leave in the order they are handed over. `report_stats`: whether this worker
    /// reports the sockets' counters (one worker does, or totals would count them once
    /// per worker).
    Shared {
        sockets: Vec<SharedSocket>,
        next: usize,
        report_stats: bool,
    },
}

fn lock(socket: &SharedSocket) -> MutexGuard<'_, Box<dyn Port + Send>> {
    // A worker that panicked holding the socket left it usable: the socket's state is the
    // kernel's, not half-written Rust data.
    socket.lock().unwrap_or_else(|e| e.into_inner())
}

impl WorkerPort {
    fn poll_fds(&mut self) -> Vec<std::os::fd::RawFd> {
        match self {
            WorkerPort::Own(p) => p.poll_fds(),
            WorkerPort::Shared { sockets, .. } => {
                sockets.iter().flat_map(|s| lock(s).poll_fds()).collect()
            }
        }
    }

    fn stats(&mut self) -> PortStats {
        match self {
            WorkerPort::Own(p) => p.stats(),
            WorkerPort::Shared {
                report_stats: false,
                ..
            } => PortStats::default(),
            WorkerPort::Shared { sockets, .. } => {
                let mut total = PortStats::default();
                for s in sockets.iter() {
                    total.add(&lock(s).stats());
                }
                total
            }
        }
    }

    fn tx_burst(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        match self {
            WorkerPort::Own(p) => p.tx_burst(pkts, pool),
            WorkerPort::Shared { sockets, .. } => match sockets.first() {
                Some(s) => lock(s).tx_burst(pkts, pool),
                None => Ok(0),
            },
        }
    }

    /// Receives a burst; from shared sockets also takes the burst's ticket from `order`
    /// (while the socket is still held, so tickets follow the order bursts left it).
    fn rx_burst(
        &mut self,
        pool: &mut PacketPool,
        out: &mut Vec<Packet>,
        max: usize,
        order: Option<&BurstOrder>,
    ) -> (io::Result<usize>, Option<u64>) {
        match self {
            WorkerPort::Own(p) => (p.rx_burst(pool, out, max), None),
            WorkerPort::Shared { sockets, next, .. } => {
                let n = sockets.len();
                for k in 0..n {
                    let i = (*next + k) % n;
                    // A socket another worker is reading is skipped, not waited for: that
                    // worker takes what is there, and waiting would only queue the workers
                    // up behind each other.
                    let mut socket = match sockets[i].try_lock() {
                        Ok(s) => s,
                        Err(TryLockError::Poisoned(e)) => e.into_inner(),
                        Err(TryLockError::WouldBlock) => continue,
                    };
                    match socket.rx_burst(pool, out, max) {
                        Ok(0) => continue,
                        Ok(got) => {
                            let ticket = order.map(BurstOrder::ticket);
                            drop(socket);
                            *next = (i + 1) % n;
                            return (Ok(got), ticket);
                        }
                        Err(e) => return (Err(e), None),
                    }
                }
                (Ok(0), None)
            }
        }
    }
}

/// Empty polls in a row before a worker sleeps.
const SPIN_BEFORE_SLEEP: u32 = 64;
/// How long an idle worker sleeps at most (it also wakes on traffic).
const SLEEP_MS: i32 = 20;
const HOUSEKEEPING: Duration = Duration::from_millis(50);

pub struct Worker {
    pub id: usize,
    shared: Arc<Shared>,
    ports: Vec<Option<WorkerPort>>,
    node: Node,
    rx: Vec<Packet>,
    tx: Transmit,
    /// With shared sockets: the arrival order of their bursts, and which workers read them.
    order: Option<Arc<BurstOrder>>,
    crew: Option<Arc<Crew>>,
    load: Load,
    /// In an ordered spread with `--burst-pacing on`: this worker's burst sizing.
    pacing: Option<PacedWorker>,
}

impl Worker {
    /// `ports[i]` is this worker's access to port `i` (`None`: another worker serves it);
    /// `spread`: the ordered spread's order and crew, shared by every worker (with shared
    /// sockets); `pacing`: whether, in that spread, this worker sizes its bursts by its
    /// speed.
    pub fn new(
        id: usize,
        shared: Arc<Shared>,
        ports: Vec<Option<WorkerPort>>,
        spread: Option<(Arc<BurstOrder>, Arc<Crew>)>,
        pacing: bool,
    ) -> Self {
        let (order, crew) = spread.unzip();
        let t = shared.tables();
        let burst = t.burst;
        let links = ports.iter().map(Option::is_some).collect();
        let mut node = Node::new(t, shared.neighbours.clone(), links);
        node.set_order(order.as_ref().map(|o| o.pipeline.clone()));
        node.set_worker(id);
        Worker {
            id,
            node,
            tx: Transmit::new(ports.len(), burst),
            shared,
            ports,
            rx: Vec::with_capacity(burst),
            pacing: (pacing && order.is_some()).then(|| PacedWorker::new(id)),
            order,
            crew,
            load: Load::new(Instant::now(), thread_cpu_time()),
        }
    }

    pub fn run(mut self) {
        let mut generation = self.shared.generation();
        let mut idle = 0u32;
        let mut last_house = Instant::now();
        let fds: Vec<_> = self
            .ports
            .iter_mut()
            .filter_map(|p| p.as_mut())
            .flat_map(|p| p.poll_fds())
            .collect();
        while !self.shared.stopping() {
            let g = self.shared.generation();
            if g != generation {
                self.node.set_tables(self.shared.tables());
                generation = g;
            }
            let engaged = self.crew.as_ref().is_none_or(|c| c.engaged(self.id));
            let (mut work, mut full) = (0, 0);
            if engaged {
                for port in 0..self.ports.len() {
                    let (n, was_full) = self.poll_port(port);
                    work += n;
                    full += usize::from(was_full);
                }
                self.flush();
            }
            let now = Instant::now();
            if now.duration_since(last_house) >= HOUSEKEEPING || self.node.neighbours_changed() {
                self.node.housekeeping(now, &mut self.tx);
                self.flush();
                self.publish();
                last_house = now;
            }
            if !engaged {
                // Not reading: traffic on the sockets does not wake this worker, being
                // called in does (and housekeeping is due by the timeout).
                if let Some(c) = &self.crew {
                    c.wait_engaged(self.id, HOUSEKEEPING);
                }
                self.load = Load::new(Instant::now(), thread_cpu_time());
                idle = 0;
                continue;
            }
            self.follow_load(full, now);
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

    /// In an ordered spread that engages workers as needed: calls one more in when this
    /// worker keeps finding its sockets backed up, steps back when it has not for a while.
    fn follow_load(&mut self, full: usize, now: Instant) {
        let Some(crew) = &self.crew else {
            return;
        };
        match self.load.note(crew, self.id, full, now, thread_cpu_time) {
            Advice::Stay => {}
            Advice::CallIn => {
                crew.call_in();
            }
            Advice::StepBack => {
                crew.step_back(self.id);
            }
        }
    }

    /// One burst from `port` through the node; returns how many packets it had, and
    /// whether that was as many as it asked for (the socket may hold more). From a shared
    /// socket the burst is ticketed and transmitted in ticket order, and with pacing its
    /// size is this worker's limit.
    fn poll_port(&mut self, port: usize) -> (usize, bool) {
        let burst = self.node.tables().burst;
        let timing = self.pacing.as_ref().map(|p| p.start(burst));
        let limit = timing.map_or(burst, |t| t.limit);
        let waited_before = self.node.counters().ordered_wait_ns;
        let (rx, pool) = (&mut self.rx, self.node.pool());
        let Some(p) = self.ports[port].as_mut() else {
            return (0, false);
        };
        let (got, ticket) = p.rx_burst(pool, rx, limit, self.order.as_deref());
        let n = got.unwrap_or_else(|e| {
            crate::warn!("rx_error", "worker" => self.id, "port" => port, "error" => e);
            0
        });
        if n == 0 {
            return (0, false);
        }
        if let Some(t) = ticket {
            self.node.set_ticket(t);
        }
        let now = Instant::now();
        self.node
            .receive(port as u16, &mut self.rx, now, &mut self.tx);
        if let Some(t) = ticket {
            // In arrival order: this burst's frames go out after every earlier burst's.
            // (The order is taken out and put back, not cloned: a clone per burst would
            // bounce its shared count between the workers' cores.)
            let order = self.order.take();
            if let Some(o) = &order {
                let waited = o.transmit.wait(t);
                self.node.count_transmit_wait(waited);
                self.flush();
                o.transmit.pass(t);
                if let (Some(pacing), Some(timing)) = (&mut self.pacing, timing) {
                    let counters = self.node.counters();
                    let pipeline_wait = counters.ordered_wait_ns.saturating_sub(waited_before);
                    pacing.finish(&o.pacer, timing, n, pipeline_wait + waited);
                }
            }
            self.order = order;
        }
        (n, n == limit)
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
        r.burst_limit = self
            .pacing
            .as_ref()
            .map(|p| p.limit(self.node.tables().burst));
    }
}
