//! Which workers read an ordered spread's shared sockets.
//!
//! The ordered spread (`--fanout ordered`) lets every worker read a port's one socket in
//! turn and puts the bursts back in arrival order (`espgw_core::order`). That order has a
//! price when one worker could carry the load alone: a worker that read a burst waits at
//! the turnstiles for the bursts other workers read before it, and on a machine with more
//! threads than cores the one it waits for may be off its core. Measured on the 2-core
//! test bed, two workers in the ordered spread forwarded less than half of what one
//! worker did (docs/performance.md, "Many cores").
//!
//! So by default (`--ordered-join busy`) the spread engages workers only as the input
//! needs them: worker 0 reads alone, and one more worker joins each time an engaged worker
//! takes [`JOIN_AFTER`] full bursts in a row (the socket's ring is backing up: more
//! arrives than the engaged workers take) while it had its core to itself (at least
//! [`CPU_BOUND`] of the time since it last looked was its own CPU time). A ring also backs
//! up when the worker is off its core, the machine having more busy threads than cores;
//! another worker would then only take more of the same cores and wait at the turnstiles
//! for the one descheduled, so it is not called in. The newest worker steps back once no engaged
//! worker of its own has seen a full burst for [`LEAVE_AFTER`]. A worker that is not
//! engaged sleeps on a condition variable rather than on the sockets, so traffic does not
//! wake it. The engaged workers are always 0..active, so tickets, turnstiles and the order
//! they keep are the same whichever workers are engaged. `--ordered-join always` engages
//! every worker from the start (the spread as it was before).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

/// When workers join an ordered spread.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum JoinPolicy {
    /// Worker 0 alone until the input backs up; more workers join under load and step
    /// back when it falls.
    Busy,
    /// Every worker reads from the start.
    Always,
}

impl JoinPolicy {
    /// The option's value, as logs and `show stats` name it.
    pub fn name(self) -> &'static str {
        match self {
            JoinPolicy::Busy => "busy",
            JoinPolicy::Always => "always",
        }
    }
}

/// `--burst-pacing`: whether the workers of an ordered spread size their bursts by their
/// speed ([`espgw_core::pacing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum BurstPacing {
    /// A slower worker takes smaller bursts, so that it does not hold up the others.
    On,
    /// Every worker takes full bursts.
    Off,
}

impl BurstPacing {
    /// The option's value, as logs name it.
    pub fn name(self) -> &'static str {
        match self {
            BurstPacing::On => "on",
            BurstPacing::Off => "off",
        }
    }
}

/// Full bursts in a row, taken by one engaged worker, after which one more worker joins.
/// A burst comes back full only when at least a burst's worth was waiting in the ring; a
/// few in a row mean the engaged workers fall behind, not that a scheduler delay let one
/// burst pile up.
pub const JOIN_AFTER: u32 = 4;

/// How long the newest engaged worker goes without a full burst before it steps back.
/// Long against a burst (microseconds), short against a change of load a person sees.
pub const LEAVE_AFTER: Duration = Duration::from_millis(100);

/// The share of wall-clock time a worker must have run on its core, over the window before
/// it calls another in, for its backlog to count as its own (not the scheduler's).
pub const CPU_BOUND: f64 = 0.9;

/// The shortest window over which that share is taken.
pub const CPU_WINDOW: Duration = Duration::from_millis(5);

/// The workers of one ordered spread: how many are engaged (always workers `0..active`),
/// and where those that are not wait.
#[derive(Debug)]
pub struct Crew {
    workers: usize,
    policy: JoinPolicy,
    active: AtomicUsize,
    gate: Mutex<()>,
    wake: Condvar,
    joins: AtomicU64,
    leaves: AtomicU64,
    /// Backlogs not answered with another worker: the worker that saw it had not had its
    /// core to itself.
    contended: AtomicU64,
}

/// What a worker should do after a round of polls ([`Load::note`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Advice {
    Stay,
    /// Engage one more worker.
    CallIn,
    /// Step back (the worker is the newest engaged one, and not worker 0).
    StepBack,
}

impl Crew {
    /// A crew of `workers`; with [`JoinPolicy::Always`] all engaged, else worker 0 alone.
    pub fn new(workers: usize, policy: JoinPolicy) -> Self {
        let workers = workers.max(1);
        let active = match policy {
            JoinPolicy::Always => workers,
            JoinPolicy::Busy => 1,
        };
        Crew {
            workers,
            policy,
            active: AtomicUsize::new(active),
            gate: Mutex::new(()),
            wake: Condvar::new(),
            joins: AtomicU64::new(0),
            leaves: AtomicU64::new(0),
            contended: AtomicU64::new(0),
        }
    }

    pub fn policy(&self) -> JoinPolicy {
        self.policy
    }

    /// Workers engaged now.
    pub fn active(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// Workers the crew has.
    pub fn workers(&self) -> usize {
        self.workers
    }

    /// Times a worker joined, and stepped back, since start.
    pub fn joins(&self) -> u64 {
        self.joins.load(Ordering::Relaxed)
    }
    pub fn leaves(&self) -> u64 {
        self.leaves.load(Ordering::Relaxed)
    }
    /// Times a backlog called no worker in because the worker that saw it was short of CPU.
    pub fn contended(&self) -> u64 {
        self.contended.load(Ordering::Relaxed)
    }

    /// Whether worker `id` reads the shared sockets now.
    pub fn engaged(&self, id: usize) -> bool {
        id < self.active()
    }

    /// Engages one more worker, if any is left (busy policy only); returns whether one
    /// joined.
    pub fn call_in(&self) -> bool {
        if self.policy != JoinPolicy::Busy {
            return false;
        }
        let mut a = self.active();
        while a < self.workers {
            match self
                .active
                .compare_exchange(a, a + 1, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    self.joins.fetch_add(1, Ordering::Relaxed);
                    // Under the gate, so that a worker checking `engaged` before it waits
                    // cannot miss this.
                    let _g = self.gate.lock().unwrap_or_else(|e| e.into_inner());
                    self.wake.notify_all();
                    return true;
                }
                Err(now) => a = now,
            }
        }
        false
    }

    /// Worker `id` steps back, if it is the newest engaged worker and not worker 0 (busy
    /// policy only); returns whether it did.
    pub fn step_back(&self, id: usize) -> bool {
        if self.policy != JoinPolicy::Busy || id == 0 {
            return false;
        }
        let stepped = self
            .active
            .compare_exchange(id + 1, id, Ordering::AcqRel, Ordering::Acquire)
            .is_ok();
        if stepped {
            self.leaves.fetch_add(1, Ordering::Relaxed);
        }
        stepped
    }

    /// Sleeps until worker `id` is engaged, or at most `timeout`.
    pub fn wait_engaged(&self, id: usize, timeout: Duration) {
        let g = self.gate.lock().unwrap_or_else(|e| e.into_inner());
        if self.engaged(id) {
            return;
        }
        let _ = self.wake.wait_timeout(g, timeout);
    }
}

/// One worker's view of the load on the shared sockets.
#[derive(Debug, Clone, Copy)]
pub struct Load {
    full_in_a_row: u32,
    last_full: Instant,
    /// Where the CPU-share window started: wall clock and this thread's CPU time.
    window: (Instant, Duration),
}

impl Load {
    pub fn new(now: Instant, cpu: Duration) -> Self {
        Load {
            full_in_a_row: 0,
            last_full: now,
            window: (now, cpu),
        }
    }

    /// Notes a round of polls (one burst from each port) by worker `id` of `crew` that
    /// took `full` full bursts, and says what to do; `cpu` reads this thread's CPU time
    /// (only when a backlog is to be judged). One port backing up is enough; a round
    /// without a full burst (every ring ran dry) starts the count again.
    pub fn note(
        &mut self,
        crew: &Crew,
        id: usize,
        full: usize,
        now: Instant,
        cpu: impl FnOnce() -> Duration,
    ) -> Advice {
        if full == 0 {
            self.full_in_a_row = 0;
            let newest = id > 0 && id + 1 == crew.active();
            if newest && now.duration_since(self.last_full) >= LEAVE_AFTER {
                return Advice::StepBack;
            }
            return Advice::Stay;
        }
        self.last_full = now;
        self.full_in_a_row = self.full_in_a_row.saturating_add(1);
        if self.full_in_a_row < JOIN_AFTER || crew.active() >= crew.workers() {
            return Advice::Stay;
        }
        let wall = now.duration_since(self.window.0);
        if wall < CPU_WINDOW {
            // Too short a window to judge: the next full round looks again.
            return Advice::Stay;
        }
        let cpu = cpu();
        let share = cpu.saturating_sub(self.window.1).as_secs_f64() / wall.as_secs_f64();
        self.window = (now, cpu);
        self.full_in_a_row = 0;
        if share >= CPU_BOUND {
            Advice::CallIn
        } else {
            crew.contended.fetch_add(1, Ordering::Relaxed);
            Advice::Stay
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn busy_starts_with_worker_zero_always_with_all() {
        let busy = Crew::new(4, JoinPolicy::Busy);
        assert_eq!(busy.active(), 1);
        assert!(busy.engaged(0) && !busy.engaged(1));
        let always = Crew::new(4, JoinPolicy::Always);
        assert_eq!(always.active(), 4);
        assert!(
            !always.call_in() && !always.step_back(3),
            "always: nothing changes"
        );
        assert_eq!(always.active(), 4);
    }

    #[test]
    fn workers_join_in_order_up_to_the_crew_and_step_back_newest_first() {
        let c = Crew::new(3, JoinPolicy::Busy);
        assert!(c.call_in() && c.call_in());
        assert!(!c.call_in(), "no fourth worker");
        assert_eq!((c.active(), c.joins()), (3, 2));
        assert!(!c.step_back(1), "only the newest steps back");
        assert!(c.step_back(2) && c.step_back(1));
        assert!(!c.step_back(0), "worker 0 stays");
        assert_eq!((c.active(), c.leaves()), (1, 2));
    }

    #[test]
    fn join_after_full_bursts_in_a_row_only() {
        let c = Crew::new(2, JoinPolicy::Busy);
        let t0 = Instant::now();
        let mut l = Load::new(t0, Duration::ZERO);
        let t0 = t0 + CPU_WINDOW;
        let busy = || CPU_WINDOW;
        for _ in 0..JOIN_AFTER - 1 {
            assert_eq!(l.note(&c, 0, 1, t0, busy), Advice::Stay);
        }
        // A round without a full burst in between: the rings ran dry; the count starts
        // again.
        assert_eq!(l.note(&c, 0, 0, t0, busy), Advice::Stay);
        for _ in 0..JOIN_AFTER - 1 {
            assert_eq!(l.note(&c, 0, 2, t0, busy), Advice::Stay);
        }
        assert_eq!(l.note(&c, 0, 1, t0, busy), Advice::CallIn);
        assert!(c.call_in());
        // Everyone engaged: nobody more to call in.
        for _ in 0..2 * JOIN_AFTER {
            assert_eq!(l.note(&c, 0, 1, t0, busy), Advice::Stay);
        }
    }

    /// A backlog seen while the worker was short of CPU (the scheduler's, not the load's)
    /// calls nobody in; once the worker has its core, the next backlog does.
    #[test]
    fn a_backlog_off_the_core_calls_nobody_in() {
        let c = Crew::new(2, JoinPolicy::Busy);
        let t0 = Instant::now();
        let mut l = Load::new(t0, Duration::ZERO);
        // Too soon to judge: no CPU reading, no advice.
        for _ in 0..2 * JOIN_AFTER {
            let soon = t0 + CPU_WINDOW / 2;
            assert_eq!(
                l.note(&c, 0, 1, soon, || unreachable!("read too soon")),
                Advice::Stay
            );
        }
        // 10 ms of wall clock, 5 ms on the core: half the time off it.
        let t1 = t0 + 2 * CPU_WINDOW;
        assert_eq!(l.note(&c, 0, 1, t1, || CPU_WINDOW), Advice::Stay);
        assert_eq!(c.contended(), 1);
        // The next 5 ms wholly on the core.
        let t2 = t1 + CPU_WINDOW;
        for _ in 0..JOIN_AFTER - 1 {
            assert_eq!(l.note(&c, 0, 1, t2, || unreachable!()), Advice::Stay);
        }
        assert_eq!(l.note(&c, 0, 1, t2, || 2 * CPU_WINDOW), Advice::CallIn);
        assert_eq!(c.contended(), 1);
    }

    #[test]
    fn the_newest_steps_back_after_a_quiet_spell() {
        let busy = || unreachable!("no backlog to judge");
        let c = Crew::new(3, JoinPolicy::Busy);
        assert!(c.call_in() && c.call_in());
        let t0 = Instant::now();
        let (mut l1, mut l2) = (Load::new(t0, Duration::ZERO), Load::new(t0, Duration::ZERO));
        let later = t0 + LEAVE_AFTER;
        assert_eq!(
            l2.note(&c, 2, 0, t0, busy),
            Advice::Stay,
            "not quiet long enough"
        );
        assert_eq!(
            l1.note(&c, 1, 0, later, busy),
            Advice::Stay,
            "not the newest"
        );
        assert_eq!(
            l2.note(&c, 2, 1, later, busy),
            Advice::Stay,
            "a full burst: busy"
        );
        let quiet = later + LEAVE_AFTER;
        assert_eq!(l2.note(&c, 2, 0, quiet, busy), Advice::StepBack);
        assert!(c.step_back(2));
        assert_eq!(
            l1.note(&c, 1, 0, quiet, busy),
            Advice::StepBack,
            "now it is"
        );
        let mut l0 = Load::new(t0, Duration::ZERO);
        assert!(c.step_back(1));
        assert_eq!(
            l0.note(&c, 0, 0, quiet + LEAVE_AFTER, busy),
            Advice::Stay,
            "worker 0 stays"
        );
    }

    /// A waiting worker wakes when called in, not only at its timeout.
    #[test]
    fn a_waiting_worker_wakes_when_called_in() {
        let c = Arc::new(Crew::new(2, JoinPolicy::Busy));
        let waiter = {
            let c = c.clone();
            std::thread::spawn(move || {
                let t = Instant::now();
                while !c.engaged(1) {
                    c.wait_engaged(1, Duration::from_secs(30));
                }
                t.elapsed()
            })
        };
        std::thread::sleep(Duration::from_millis(50));
        assert!(c.call_in());
        let waited = waiter.join().unwrap();
        assert!(waited < Duration::from_secs(10), "{waited:?}");
    }

    /// Many workers calling in and stepping back at once: `active` stays within 1..=N,
    /// and joins minus leaves is what is engaged beyond worker 0.
    #[test]
    fn concurrent_calls_keep_the_count_exact() {
        let c = Arc::new(Crew::new(4, JoinPolicy::Busy));
        let threads: Vec<_> = (0..4)
            .map(|id| {
                let c = c.clone();
                std::thread::spawn(move || {
                    for i in 0..5_000 {
                        if (i + id) % 3 == 0 {
                            c.step_back(id);
                        } else {
                            c.call_in();
                        }
                        let a = c.active();
                        assert!((1..=4).contains(&a), "{a}");
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(c.joins() - c.leaves(), c.active() as u64 - 1);
    }
}
