//! One SA over several workers, in order: bursts numbered in arrival order (tickets), and
//! turnstiles that let the bursts through a short section one at a time in ticket order.
//!
//! The design is the published multicore IPsec pipeline's (classify, parallel crypto,
//! in-order transmit) and Linux pcrypt's serialisation, cut down to two short ordered
//! sections per burst, everything else running in parallel on any worker:
//!
//! 1. in the pipeline (see [`crate::pipeline::Pipeline::set_order`]): outbound, the
//!    reservation of the burst's sequence numbers (one atomic add per SA and burst), so
//!    numbers follow arrival order; inbound, the replay-window update of the burst's
//!    authentic packets, so the window sees packets in arrival order and decides exactly
//!    as one worker would;
//! 2. at transmit (the caller's): the burst's frames are handed to the port in ticket
//!    order, so an SA's sequence numbers and a flow's packets leave in arrival order.
//!
//! Every ticket must pass every turnstile exactly once, including a burst that turns out
//! empty, or the later tickets wait for ever: [`Turnstile::pass`] after
//! [`Turnstile::wait`], or [`Turnstile::skip`] alone.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use crate::pacing::BurstPacer;

/// How long a waiter spins before it yields its core (a burst takes a few microseconds; a
/// waiter whose predecessor was descheduled should not burn its time slice).
const SPINS_BEFORE_YIELD: u32 = 1 << 12;

/// Lets tickets through one at a time in increasing order.
#[derive(Debug, Default)]
#[repr(align(128))]
pub struct Turnstile {
    /// The ticket whose turn it is.
    next: AtomicU64,
}

impl Turnstile {
    /// A turnstile whose first ticket is `first`.
    pub fn starting_at(first: u64) -> Self {
        Turnstile {
            next: AtomicU64::new(first),
        }
    }

    /// Waits until it is `ticket`'s turn. Its memory effects see everything the earlier
    /// tickets did before they passed. Returns how long it waited, in nanoseconds: 0 when
    /// it was the ticket's turn at the first look (the clock is read only when it was not,
    /// so a worker that never waits pays nothing for the measurement).
    pub fn wait(&self, ticket: u64) -> u64 {
        if self.next.load(Ordering::Acquire) == ticket {
            return 0;
        }
        let start = Instant::now();
        let mut spins = 0u32;
        while self.next.load(Ordering::Acquire) != ticket {
            if spins < SPINS_BEFORE_YIELD {
                spins += 1;
                std::hint::spin_loop();
            } else {
                std::thread::yield_now();
            }
        }
        // At least 1: it did wait, however briefly the clock says.
        (start.elapsed().as_nanos() as u64).max(1)
    }

    /// Ends `ticket`'s turn (after [`Turnstile::wait`]): the next ticket may go.
    pub fn pass(&self, ticket: u64) {
        self.next.store(ticket + 1, Ordering::Release);
    }

    /// Waits for `ticket`'s turn and passes at once: a burst with nothing to order.
    /// Returns how long it waited ([`Turnstile::wait`]).
    pub fn skip(&self, ticket: u64) -> u64 {
        let waited = self.wait(ticket);
        self.pass(ticket);
        waited
    }

    /// The ticket whose turn it is.
    pub fn next(&self) -> u64 {
        self.next.load(Ordering::Acquire)
    }
}

/// The ordering state of one input shared by several workers: the ticket counter that
/// numbers its bursts in arrival order, the two turnstiles, and the burst pacing that
/// keeps a slower worker's bursts from holding up the others ([`crate::pacing`]).
#[derive(Debug, Default)]
pub struct BurstOrder {
    tickets: TicketCounter,
    /// The pipeline's ordered section (sequence numbers out, replay window in): each
    /// worker's pipeline holds it ([`crate::Node::set_order`]).
    pub pipeline: Arc<Turnstile>,
    /// Transmit: frames handed to the port in arrival order.
    pub transmit: Arc<Turnstile>,
    /// Each worker's cost per packet, from which it sizes its bursts.
    pub pacer: BurstPacer,
}

#[derive(Debug, Default)]
#[repr(align(128))]
struct TicketCounter(AtomicU64);

impl BurstOrder {
    /// The order of one input read by `workers` workers (a pacing seat for each).
    pub fn for_workers(workers: usize) -> Self {
        BurstOrder {
            pacer: BurstPacer::new(workers),
            ..BurstOrder::default()
        }
    }

    /// Numbers the burst just received; call with the input held, so that the ticket
    /// order is the arrival order.
    pub fn ticket(&self) -> u64 {
        self.tickets.0.fetch_add(1, Ordering::Relaxed)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::{Arc, Mutex};

    /// Threads taking tickets in any interleaving still go through in ticket order.
    #[test]
    fn tickets_pass_in_order() {
        let order = Arc::new(BurstOrder::default());
        let seen = Arc::new(Mutex::new(Vec::new()));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let (order, seen) = (order.clone(), seen.clone());
                std::thread::spawn(move || {
                    for _ in 0..500 {
                        let t = order.ticket();
                        if t.is_multiple_of(7) {
                            order.pipeline.skip(t);
                        } else {
                            order.pipeline.wait(t);
                            order.pipeline.pass(t);
                        }
                        order.transmit.wait(t);
                        seen.lock().unwrap().push(t);
                        order.transmit.pass(t);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        let seen = seen.lock().unwrap();
        assert_eq!(seen.len(), 2000);
        assert!(seen.iter().enumerate().all(|(i, &t)| t == i as u64));
        assert_eq!(order.transmit.next(), 2000);
    }

    /// A ticket whose turn it is waits 0 ns; one whose predecessor holds the turn for a
    /// while reports at least that while.
    #[test]
    fn a_wait_reports_how_long_it_waited() {
        let t = Arc::new(Turnstile::starting_at(0));
        assert_eq!(t.wait(0), 0);
        let holder = {
            let t = t.clone();
            std::thread::spawn(move || {
                std::thread::sleep(std::time::Duration::from_millis(20));
                t.pass(0);
            })
        };
        let waited = t.wait(1);
        holder.join().unwrap();
        assert!(waited >= 15_000_000, "waited {waited} ns");
        assert!(waited < 5_000_000_000, "waited {waited} ns");
        t.pass(1);
        assert_eq!(t.skip(2), 0);
    }
}
