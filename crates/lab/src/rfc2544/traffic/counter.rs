//! Counting what arrives of a stream, shared by every receiving thread of a port.
//!
//! A frame may arrive on any of a port's threads (each reads its own receive queues, and
//! the device under test picks the queue), so what must not depend on the thread is
//! shared and atomic: a bit per sequence number (a frame is counted once whichever
//! thread sees it; a second copy is a duplicate, on the same thread or another) and per
//! flow the number after the highest seen. The plain counts and the latency histogram are
//! each thread's own, added up when the trial is collected.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

use super::{RxReport, HIST_MAX_NS, MAX_TRIAL_FRAMES};
use crate::rfc2544::frame::Record;

/// One stream's shared state in a trial.
pub(super) struct StreamCounter {
    pub(super) stream: u8,
    bits: Vec<AtomicU64>,
    /// Sequence numbers at or above this were never sent in the trial.
    limit: u64,
    /// Per flow, the number after the highest seen. Flow of sequence number s: s mod the
    /// stream's flow count.
    next_expected: Vec<AtomicU32>,
}

impl StreamCounter {
    pub(super) fn new(stream: u8, expect: u64, flows: u8) -> StreamCounter {
        let n = expect.min(MAX_TRIAL_FRAMES);
        StreamCounter {
            stream,
            bits: (0..n.div_ceil(64)).map(|_| AtomicU64::new(0)).collect(),
            limit: n,
            next_expected: (0..flows.max(1)).map(|_| AtomicU32::new(0)).collect(),
        }
    }

    /// Counts one frame into `report` (the receiving thread's own): received once per
    /// sequence number over all threads, else a duplicate; reordered when its flow has
    /// seen a higher sequence number before (RFC 4737, per flow: packets of different
    /// flows may pass each other, as RSS and fanout let them).
    pub(super) fn record(&self, r: &Record, rx_ns: u64, report: &mut RxReport) {
        let seq = u64::from(r.seq);
        let word = if seq < self.limit {
            self.bits.get((seq / 64) as usize)
        } else {
            None
        };
        let Some(word) = word else {
            // A sequence number this trial never sent: not ours to count.
            report.stale += 1;
            return;
        };
        let bit = 1u64 << (seq % 64);
        // Relaxed is enough: the bit itself decides who counts the frame, and nothing
        // else is published through it.
        if word.fetch_or(bit, Ordering::Relaxed) & bit != 0 {
            report.duplicates += 1;
            return;
        }
        report.received += 1;
        let flow = (seq % self.next_expected.len() as u64) as usize;
        // seq < limit <= 2^30: seq + 1 fits.
        let before = self.next_expected[flow].fetch_max(r.seq + 1, Ordering::Relaxed);
        if r.seq < before {
            report.reordered += 1;
        }
        let lat = rx_ns.saturating_sub(r.tx_ns).clamp(100, HIST_MAX_NS);
        let _ = report.latency.record(lat);
    }
}

/// Every stream a port counts in one trial.
pub(super) struct TrialCounters {
    pub(super) trial: u8,
    pub(super) streams: Vec<StreamCounter>,
}

/// One thread's share of a trial's counting: the shared state and its own reports (one
/// per stream, in the same order).
pub(super) struct Counting {
    pub(super) shared: std::sync::Arc<TrialCounters>,
    pub(super) reports: Vec<RxReport>,
}

impl Counting {
    pub(super) fn new(shared: std::sync::Arc<TrialCounters>) -> Counting {
        let reports = shared.streams.iter().map(|_| RxReport::new()).collect();
        Counting { shared, reports }
    }

    /// Counts a test frame of `r.stream` (a frame of an earlier trial is stale).
    pub(super) fn record(&mut self, r: &Record, rx_ns: u64) {
        let shared = &self.shared;
        let Some(i) = shared.streams.iter().position(|s| s.stream == r.stream) else {
            return;
        };
        if r.trial == shared.trial {
            shared.streams[i].record(r, rx_ns, &mut self.reports[i]);
        } else {
            self.reports[i].stale += 1;
        }
    }

    /// A non-first fragment (counted against the first stream).
    pub(super) fn fragment(&mut self) {
        if let Some(r) = self.reports.first_mut() {
            r.fragments += 1;
        }
    }

    /// The reports, with their stream ids.
    pub(super) fn into_reports(self) -> Vec<(u8, RxReport)> {
        let ids = self.shared.streams.iter().map(|s| s.stream);
        ids.zip(self.reports).collect()
    }
}
