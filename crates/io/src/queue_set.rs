//! One port over several receive queues of an interface.
//!
//! An AF_XDP socket is bound to one receive queue, and a sender (RSS on a NIC, the
//! sending queue on a veth) decides which queue a frame lands on. Where there are more
//! queues than readers, a reader takes several: it receives from each in turn and sends
//! on the first (one transmit queue keeps what it sends in order).

use std::io;
use std::os::fd::RawFd;

use espgw_core::packet::{Packet, PacketPool};

use crate::port::{Port, PortStats};

pub struct QueueSet<P> {
    queues: Vec<P>,
    /// The queue to read first next time: each gets its turn to be first.
    next: usize,
}

impl<P: Port> QueueSet<P> {
    /// `None` for an empty list.
    pub fn new(queues: Vec<P>) -> Option<QueueSet<P>> {
        (!queues.is_empty()).then_some(QueueSet { queues, next: 0 })
    }
}

/// The queues as one port: the queue itself when there is one, else a [`QueueSet`];
/// `None` for an empty list.
pub fn one_port<P: Port + Send + 'static>(mut queues: Vec<P>) -> Option<Box<dyn Port + Send>> {
    if queues.len() == 1 {
        return queues.pop().map(|q| Box::new(q) as Box<dyn Port + Send>);
    }
    QueueSet::new(queues).map(|s| Box::new(s) as Box<dyn Port + Send>)
}

impl<P: Port> Port for QueueSet<P> {
    fn name(&self) -> &str {
        self.queues[0].name()
    }

    fn rx_burst(
        &mut self,
        pool: &mut PacketPool,
        out: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        let n = self.queues.len();
        for k in 0..n {
            let i = (self.next + k) % n;
            let got = self.queues[i].rx_burst(pool, out, max)?;
            if got > 0 {
                self.next = (i + 1) % n;
                return Ok(got);
            }
        }
        Ok(0)
    }

    fn tx_burst(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        self.queues[0].tx_burst(pkts, pool)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        self.queues[0].poll_fd()
    }

    fn poll_fds(&self) -> Vec<RawFd> {
        self.queues.iter().filter_map(|q| q.poll_fd()).collect()
    }

    fn stats(&mut self) -> PortStats {
        let mut total = PortStats::default();
        for q in &mut self.queues {
            total.add(&q.stats());
        }
        total
    }

    fn kind(&self) -> &'static str {
        self.queues[0].kind()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::VecDeque;

    /// A queue holding a few frames, counting what it sends.
    struct Queue {
        frames: VecDeque<Vec<u8>>,
        sent: usize,
    }

    impl Port for Queue {
        fn name(&self) -> &str {
            "q"
        }
        fn rx_burst(
            &mut self,
            pool: &mut PacketPool,
            out: &mut Vec<Packet>,
            max: usize,
        ) -> io::Result<usize> {
            let mut n = 0;
            while n < max {
                let Some(f) = self.frames.pop_front() else {
                    break;
                };
                let mut p = pool.get();
                p.load(&f).expect("small frame");
                out.push(p);
                n += 1;
            }
            Ok(n)
        }
        fn tx_burst(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
            let n = pkts.len();
            self.sent += n;
            pkts.drain(..).for_each(|p| pool.put(p));
            Ok(n)
        }
        fn kind(&self) -> &'static str {
            "test"
        }
    }

    /// Frames waiting on every queue are all received, the queues taking turns (a busy
    /// queue does not starve the others), and sending goes to the first queue only.
    #[test]
    fn every_queue_is_read_in_turn_and_the_first_sends() {
        let queues: Vec<Queue> = (0..3u8)
            .map(|q| Queue {
                frames: (0..4u8).map(|i| vec![q, i, 0, 0, 0, 0, 0, 0]).collect(),
                sent: 0,
            })
            .collect();
        let mut set = QueueSet::new(queues).expect("three queues");
        let mut pool = PacketPool::new(64);
        let mut seen = Vec::new();
        let mut out = Vec::new();
        while set.rx_burst(&mut pool, &mut out, 1).unwrap() > 0 {
            for p in out.drain(..) {
                seen.push((p.data()[0], p.data()[1]));
                pool.put(p);
            }
        }
        assert_eq!(seen.len(), 12, "{seen:?}");
        let order: Vec<u8> = seen.iter().map(|&(q, _)| q).collect();
        assert_eq!(&order[..6], &[0, 1, 2, 0, 1, 2], "queues take turns");
        let mut tx = vec![pool.get(), pool.get()];
        assert_eq!(set.tx_burst(&mut tx, &mut pool).unwrap(), 2);
        let sent: Vec<usize> = set.queues.iter().map(|q| q.sent).collect();
        assert_eq!(sent, vec![2, 0, 0]);
        assert!(QueueSet::<Queue>::new(Vec::new()).is_none());
    }
}
