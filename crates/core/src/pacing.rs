//! Burst pacing for one input spread over several workers in order: a slower worker takes
//! smaller bursts, so that every ticket takes about the same time to go through.
//!
//! Why. With the ordered spread ([`crate::order`]) a burst waits at the turnstiles for
//! every burst ticketed before it. When one worker runs slower than the others (its core
//! shared with another tenant, a hyperthread sibling at work, a lower clock), each of its
//! bursts holds up all the later tickets, and the workers go round in lockstep at the
//! slowest one's pace: N workers carry N times the slowest, not the sum of their rates.
//! If the slow worker's bursts are as much smaller as it is slower, its tickets pass as
//! quickly as the others', and it adds what it can carry instead of holding the rest back.
//!
//! How. Each worker measures its own cost per packet in one full burst of every
//! [`TIME_EVERY`]: the time from taking the burst to handing it to the port, less the time
//! it waited at the turnstiles (the waiting is somebody else's slowness, not its own).
//! Over a window of [`PUBLISH_EVERY`] timed bursts (or of at least [`MIN_WINDOW`] once
//! [`WINDOW_MS`] have passed, so that a slow worker, whose bursts take long, still
//! publishes every few milliseconds) it keeps the lowest: a worker that runs slower is
//! slow in every burst, while a thread descheduled in the middle of a few bursts (a busy
//! neighbour on its CPU, more workers than CPUs) ran at its own speed in the others, and
//! must not be taken for slow (its bursts shrinking would only add per-burst costs to its
//! stalls). It smooths those
//! window minima, publishes the result in its seat, reads the other seats, and
//! sets its burst limit to `max × fastest cost / own cost` (at least `max /`
//! [`SMALLEST_SHARE`]). A worker within [`DEAD_ZONE`] of the fastest keeps full bursts,
//! so that equal workers on a quiet machine never shrink a burst for noise. A seat not
//! published for [`STALE_AFTER_MS`], or for [`STALE_WINDOWS`] times the reader's own last
//! window if that is longer (up to [`STALE_MAX_MS`]), is left out (a worker that stepped
//! back, or stalled). The second bound is there because workers held in lockstep by a
//! slow one fill their windows only as fast as it does: on a loaded machine that took
//! 160 ms, the fast seat always looked stale to the slow worker, and pacing never began
//! (CI, 2026-11-29).
//!
//! What it does not cure: a worker whose thread is *descheduled* while it holds a ticket
//! still stops every later ticket until it runs again, whatever its burst's size. Only a
//! spread in which another worker could finish that burst would; see the README's "Many
//! cores".

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// One full burst in this many is timed: two clock reads a burst cost 1-2 % of two equal
/// workers' rate at 64 bytes (on a quiet 2-core VM, 2026-11-29), and a worker's speed does
/// not change from one burst to the next.
pub const TIME_EVERY: u32 = 4;
/// Timed bursts between two publications of a worker's cost (and recomputations of its
/// limit): often enough to follow a change of speed within a millisecond, rarely enough
/// that the seats' cache lines do not move between cores at every burst.
pub const PUBLISH_EVERY: u32 = 16;
/// The smallest burst is the full burst divided by this (a worker this much slower than
/// the fastest is better off with the fixed per-burst costs of bursts this small than
/// with even smaller ones).
pub const SMALLEST_SHARE: usize = 8;
/// A worker whose cost is within this factor of the fastest's keeps full bursts
/// (expressed in eighths: 9 / 8 = 12.5 % slower).
pub const DEAD_ZONE: (u64, u64) = (9, 8);
/// A window of timed bursts also closes once it is this old and holds [`MIN_WINDOW`]
/// bursts: a worker 20 µs a packet slower takes 40 ms or more for [`PUBLISH_EVERY`].
pub const WINDOW_MS: u64 = 10;
/// The fewest timed bursts a window closed by [`WINDOW_MS`] holds (its minimum must
/// still pass over a stall or two).
pub const MIN_WINDOW: u32 = 4;
/// A seat older than this is not counted as the fastest...
pub const STALE_AFTER_MS: u64 = 100;
/// ...unless this many of the reader's own windows took longer (its bursts, and so
/// everybody's in lockstep with it, are slow)...
pub const STALE_WINDOWS: u64 = 4;
/// ...but a seat older than this is never counted.
pub const STALE_MAX_MS: u64 = 1_000;
/// The smoothing of a worker's cost: each window's minimum moves it by 1 / 2^this of the
/// difference.
const SMOOTHING_SHIFT: u32 = 1;
/// Costs are kept in 1/16 ns per packet.
const COST_SCALE: u64 = 16;

/// The seats of one ordered input's workers: each worker's published cost per packet.
#[derive(Debug)]
pub struct BurstPacer {
    seats: Box<[Seat]>,
    /// The clock the seats' publication times count from.
    epoch: Instant,
}

impl Default for BurstPacer {
    /// One seat.
    fn default() -> Self {
        BurstPacer::new(1)
    }
}

/// One worker's published cost and when it was published, packed into one word so that a
/// reader never sees one without the other: the cost in the high 32 bits (1/16 ns per
/// packet, 0 = nothing published), the time in the low 32 (ms since the pacer's epoch,
/// wrapping).
#[derive(Debug, Default)]
#[repr(align(128))]
struct Seat(AtomicU64);

impl BurstPacer {
    /// Seats for `workers` workers.
    pub fn new(workers: usize) -> Self {
        BurstPacer {
            seats: (0..workers.max(1)).map(|_| Seat::default()).collect(),
            epoch: Instant::now(),
        }
    }

    fn now_ms(&self, now: Instant) -> u64 {
        now.saturating_duration_since(self.epoch).as_millis() as u64 & 0xffff_ffff
    }

    fn publish(&self, seat: usize, cost: u64, now: Instant) {
        let cost = cost.clamp(1, u32::MAX as u64);
        if let Some(s) = self.seats.get(seat) {
            s.0.store((cost << 32) | self.now_ms(now), Ordering::Relaxed);
        }
    }

    /// The lowest cost published in the last `max_age_ms`, if any.
    fn fastest(&self, now: Instant, max_age_ms: u64) -> Option<u64> {
        let now_ms = self.now_ms(now);
        self.seats
            .iter()
            .map(|s| s.0.load(Ordering::Relaxed))
            .filter(|&v| {
                v >> 32 != 0 && (now_ms.wrapping_sub(v & 0xffff_ffff) & 0xffff_ffff) <= max_age_ms
            })
            .map(|v| v >> 32)
            .min()
    }
}

/// One worker's side of the pacing: its smoothed cost and its current burst limit.
#[derive(Debug, Clone)]
pub struct PacedWorker {
    seat: usize,
    /// Smoothed cost per packet, 1/16 ns; 0 until the first window ends.
    cost: u64,
    /// Full bursts recorded in the current window, the lowest cost among them, and when
    /// its first was recorded.
    bursts: u32,
    window_min: u64,
    window_started: Option<Instant>,
    /// The share of a full burst this worker takes, in 1/[`LIMIT_SCALE`].
    share: u64,
    /// Full bursts finished: the next one is timed when this is a multiple of
    /// [`TIME_EVERY`].
    full_bursts: u32,
}

/// A burst being timed ([`PacedWorker::start`]): its size limit and when it began.
#[derive(Debug, Clone, Copy)]
pub struct BurstTiming {
    /// How many packets the burst may take.
    pub limit: usize,
    /// When it began, for a burst that is timed.
    started: Option<Instant>,
}

/// The burst share's fixed point: `LIMIT_SCALE` is a full burst.
const LIMIT_SCALE: u64 = 1024;

impl PacedWorker {
    /// Worker `seat`'s side (its index among the input's workers).
    pub fn new(seat: usize) -> Self {
        PacedWorker {
            seat,
            cost: 0,
            bursts: 0,
            window_min: u64::MAX,
            window_started: None,
            share: LIMIT_SCALE,
            full_bursts: 0,
        }
    }

    /// How many packets to take in the next burst, of a full burst of `max`.
    pub fn limit(&self, max: usize) -> usize {
        let smallest = (max / SMALLEST_SHARE).max(1);
        ((max as u64 * self.share / LIMIT_SCALE) as usize).clamp(smallest.min(max), max)
    }

    /// Starts a burst of at most `max` packets: how many to take, and, for one full burst
    /// in [`TIME_EVERY`], the clock for [`PacedWorker::finish`] (the count advances only on
    /// full bursts, so a partial one leaves the next burst timed).
    pub fn start(&self, max: usize) -> BurstTiming {
        BurstTiming {
            limit: self.limit(max),
            started: self
                .full_bursts
                .is_multiple_of(TIME_EVERY)
                .then(Instant::now),
        }
    }

    /// Ends the burst `timing` started, which brought `packets` and in which this worker
    /// waited `waited_ns` for other workers' turns: a full burst is recorded with its time
    /// less those waits (another worker's slowness, not this one's). A partial burst (its
    /// input held fewer packets) is not: its time is mostly the per-burst cost, and under
    /// such a load nobody holds anybody up.
    pub fn finish(
        &mut self,
        pacer: &BurstPacer,
        timing: BurstTiming,
        packets: usize,
        waited_ns: u64,
    ) {
        if packets != timing.limit {
            return;
        }
        self.full_bursts = self.full_bursts.wrapping_add(1);
        let Some(started) = timing.started else {
            return;
        };
        let now = Instant::now();
        let elapsed = now.saturating_duration_since(started).as_nanos() as u64;
        self.record(pacer, packets, elapsed.saturating_sub(waited_ns), now);
    }

    /// Records a full burst of `packets` that kept this worker busy for `busy_ns` (its
    /// time from taking the burst to handing it to the port, less its waits at the
    /// turnstiles); when the window closes ([`PUBLISH_EVERY`] bursts, or [`MIN_WINDOW`]
    /// over [`WINDOW_MS`]) folds its lowest cost into the estimate, publishes it and sets
    /// the limit against the fastest worker's.
    fn record(&mut self, pacer: &BurstPacer, packets: usize, busy_ns: u64, now: Instant) {
        if packets == 0 {
            return;
        }
        let sample = (busy_ns.saturating_mul(COST_SCALE) / packets as u64).max(1);
        self.window_min = self.window_min.min(sample);
        self.bursts += 1;
        let started = *self.window_started.get_or_insert(now);
        let window_ms = now.saturating_duration_since(started).as_millis() as u64;
        if self.bursts < PUBLISH_EVERY && (self.bursts < MIN_WINDOW || window_ms < WINDOW_MS) {
            return;
        }
        let lowest = std::mem::replace(&mut self.window_min, u64::MAX);
        self.bursts = 0;
        self.window_started = None;
        self.cost = if self.cost == 0 {
            lowest
        } else if lowest >= self.cost {
            self.cost + ((lowest - self.cost) >> SMOOTHING_SHIFT)
        } else {
            self.cost - ((self.cost - lowest) >> SMOOTHING_SHIFT)
        };
        pacer.publish(self.seat, self.cost, now);
        let max_age_ms = window_ms
            .saturating_mul(STALE_WINDOWS)
            .clamp(STALE_AFTER_MS, STALE_MAX_MS);
        self.share = match pacer.fastest(now, max_age_ms) {
            Some(fastest) => share_against(self.cost.max(1), fastest),
            None => LIMIT_SCALE,
        };
    }
}

/// The share of a full burst (in 1/[`LIMIT_SCALE`]) for a worker of cost `own` when the
/// fastest costs `fastest`.
fn share_against(own: u64, fastest: u64) -> u64 {
    if own.saturating_mul(DEAD_ZONE.1) <= fastest.saturating_mul(DEAD_ZONE.0) {
        return LIMIT_SCALE;
    }
    (fastest.saturating_mul(LIMIT_SCALE) / own)
        .clamp(LIMIT_SCALE / SMALLEST_SHARE as u64, LIMIT_SCALE)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    /// Feeds `bursts` bursts of `n` packets at `ns_per_packet` to `w`.
    fn feed(
        w: &mut PacedWorker,
        p: &BurstPacer,
        n: usize,
        ns_per_packet: u64,
        bursts: u32,
        now: Instant,
    ) {
        for _ in 0..bursts {
            w.record(p, n, ns_per_packet * n as u64, now);
        }
    }

    /// A worker twice as slow as the other takes half bursts; the fast one keeps full ones.
    #[test]
    fn the_slower_worker_takes_bursts_as_much_smaller_as_it_is_slower() {
        let p = BurstPacer::new(2);
        let now = Instant::now();
        let (mut fast, mut slow) = (PacedWorker::new(0), PacedWorker::new(1));
        for _ in 0..8 {
            feed(&mut fast, &p, 64, 100, PUBLISH_EVERY, now);
            let n = slow.limit(64);
            feed(&mut slow, &p, n, 200, PUBLISH_EVERY, now);
        }
        assert_eq!(fast.limit(64), 64);
        assert_eq!(slow.limit(64), 32);
        // Four times slower: a quarter.
        let mut slower = PacedWorker::new(1);
        feed(&mut slower, &p, 64, 400, 4 * PUBLISH_EVERY, now);
        assert_eq!(slower.limit(64), 16);
    }

    /// Within the dead zone nobody's burst shrinks; far beyond the smallest share the
    /// burst stops at it; nothing published yet means full bursts.
    #[test]
    fn the_edges_dead_zone_floor_and_start() {
        let p = BurstPacer::new(2);
        let now = Instant::now();
        let mut w = PacedWorker::new(1);
        assert_eq!(w.limit(64), 64);
        let mut fast = PacedWorker::new(0);
        feed(&mut fast, &p, 64, 100, PUBLISH_EVERY, now);
        feed(&mut w, &p, 64, 112, 4 * PUBLISH_EVERY, now);
        assert_eq!(w.limit(64), 64, "12 % slower is noise");
        feed(&mut w, &p, 64, 100_000, 8 * PUBLISH_EVERY, now);
        assert_eq!(w.limit(64), 64 / SMALLEST_SHARE);
        assert_eq!(w.limit(4), 1);
        assert_eq!(w.limit(1), 1);
        // Stalled bursts (a thread descheduled for 5 ms in each of half its bursts) do
        // not move the estimate: the window keeps its undisturbed bursts' cost.
        let mut steady = PacedWorker::new(1);
        for _ in 0..4 {
            for k in 0..PUBLISH_EVERY {
                let ns = if k % 2 == 0 { 5_000_000 } else { 100 * 64 };
                steady.record(&p, 64, ns, now);
            }
        }
        assert_eq!(steady.limit(64), 64, "stalls are not slowness");
        assert_eq!(steady.cost, 100 * COST_SCALE);
        // A partial burst (fewer packets than the limit) is not recorded.
        let t = steady.start(64);
        let before = steady.cost;
        steady.finish(&p, t, t.limit - 1, 0);
        assert_eq!(steady.cost, before);
        // An empty burst changes nothing.
        let before = w.cost;
        w.record(&p, 0, 1_000_000, now);
        assert_eq!(w.cost, before);
    }

    /// One full burst in `TIME_EVERY` is timed and recorded; a partial burst does not
    /// advance the count, so the burst after it is timed again.
    #[test]
    fn one_full_burst_in_time_every_is_timed() {
        let p = BurstPacer::new(1);
        let mut w = PacedWorker::new(0);
        let mut timed = 0;
        for _ in 0..(TIME_EVERY * PUBLISH_EVERY) {
            let t = w.start(64);
            timed += u32::from(t.started.is_some());
            w.finish(&p, t, 64, 0);
        }
        assert_eq!(timed, PUBLISH_EVERY);
        assert_eq!(
            w.bursts, 0,
            "a window of timed bursts ended and was published"
        );
        assert_ne!(w.cost, 0);
        let t = w.start(64);
        assert!(t.started.is_some());
        w.finish(&p, t, 10, 0);
        assert!(w.start(64).started.is_some(), "after a partial burst");
        w.finish(&p, w.start(64), 64, 0);
        assert!(w.start(64).started.is_none(), "after a timed full burst");
    }

    /// A fast worker that stopped publishing (stepped back) no longer sets the pace.
    #[test]
    fn a_stale_seat_is_not_the_fastest() {
        let p = BurstPacer::new(2);
        let t0 = Instant::now();
        let mut gone = PacedWorker::new(0);
        feed(&mut gone, &p, 64, 50, PUBLISH_EVERY, t0);
        let mut w = PacedWorker::new(1);
        feed(&mut w, &p, 64, 200, 4 * PUBLISH_EVERY, t0);
        assert_eq!(w.limit(64), 16, "against the fast seat while it is fresh");
        let later = t0 + Duration::from_millis(STALE_AFTER_MS + 50);
        feed(&mut w, &p, 64, 200, PUBLISH_EVERY, later);
        assert_eq!(w.limit(64), 64, "alone against itself");
    }

    /// A slow worker's window closes on time, not only on count, and a seat as old as a
    /// few of the reader's own windows still counts: workers in lockstep behind a slow
    /// one publish as rarely as it does (on a loaded 2-core machine, every 160 ms).
    #[test]
    fn slow_windows_close_on_time_and_see_seats_as_old_as_they_are() {
        let p = BurstPacer::new(2);
        let t0 = Instant::now();
        let ms = |n: u64| t0 + Duration::from_millis(n);
        let mut fast = PacedWorker::new(0);
        feed(&mut fast, &p, 64, 50, PUBLISH_EVERY, t0);
        // Slow bursts, 20 ms apart: MIN_WINDOW of them span 60 ms, and close the window.
        let mut slow = PacedWorker::new(1);
        for k in 0..MIN_WINDOW as u64 {
            assert_eq!(slow.cost, 0, "window closed after {k} bursts");
            slow.record(&p, 64, 400 * 64, ms(100 + 20 * k));
        }
        assert_eq!(
            slow.cost,
            400 * COST_SCALE,
            "closed after {MIN_WINDOW} bursts"
        );
        // The fast seat is 160 ms old, past STALE_AFTER_MS, but the slow worker's own
        // window took 60 ms: the seat counts, and the burst shrinks to an eighth.
        assert_eq!(slow.limit(64), 64 / SMALLEST_SHARE);
        // A window of bursts recorded together does not close before PUBLISH_EVERY.
        let mut quick = PacedWorker::new(1);
        feed(&mut quick, &p, 64, 400, PUBLISH_EVERY - 1, ms(200));
        assert_eq!(quick.cost, 0);
        // A seat older than STALE_MAX_MS never counts, however slow the reader.
        let mut late = PacedWorker::new(1);
        for k in 0..MIN_WINDOW as u64 {
            late.record(&p, 64, 400 * 64, ms(STALE_MAX_MS + 1 + 400 * k));
        }
        assert_ne!(late.cost, 0);
        assert_eq!(late.limit(64), 64, "alone against itself");
    }

    /// Threads publishing and reading at once: every limit stays within its bounds, and
    /// once all have published the slowest takes the share its cost gives it.
    #[test]
    fn concurrent_workers_keep_their_limits_in_bounds() {
        let p = std::sync::Arc::new(BurstPacer::new(4));
        let threads: Vec<_> = (0..4)
            .map(|i| {
                let p = p.clone();
                std::thread::spawn(move || {
                    let mut w = PacedWorker::new(i);
                    for k in 0..2_000u64 {
                        let n = w.limit(64);
                        assert!((8..=64).contains(&n), "{n}");
                        let ns = (100 + 100 * i as u64 + k % 7) * n as u64;
                        w.record(&p, n, ns, Instant::now());
                    }
                    w
                })
            })
            .collect();
        let mut workers: Vec<PacedWorker> =
            threads.into_iter().map(|t| t.join().unwrap()).collect();
        let now = Instant::now();
        for w in &mut workers {
            let cost_ns = w.cost / COST_SCALE;
            feed(w, &p, 64, cost_ns, PUBLISH_EVERY, now);
        }
        // Publish again so that each limit is set against every seat.
        for w in &mut workers {
            let cost_ns = w.cost / COST_SCALE;
            feed(w, &p, 64, cost_ns, PUBLISH_EVERY, now);
        }
        let limits: Vec<usize> = workers.iter().map(|w| w.limit(64)).collect();
        assert_eq!(limits[0], 64, "{limits:?}");
        assert!((15..=17).contains(&limits[3]), "{limits:?}");
        assert!((20..=23).contains(&limits[2]), "{limits:?}");
    }
}
