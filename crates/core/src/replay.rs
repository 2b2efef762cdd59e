//! The anti-replay window (RFC 4303 §3.4.3) with extended sequence numbers (RFC 4303
//! Appendix A), kept as in RFC 6479: a ring of 64-bit blocks one block larger than the
//! window, so that advancing the window clears whole blocks and never shifts bits.
//!
//! Use: [`ReplayWindow::infer`] the full sequence number from the 32 bits on the wire,
//! [`ReplayWindow::check`] it before spending crypto on the packet, then
//! [`ReplayWindow::check_and_update`] once the ICV is verified (the second check catches
//! duplicates inside one burst).

/// The window of one inbound SA.
#[derive(Debug, Clone)]
pub struct ReplayWindow {
    /// Window size in packets; 0 disables the check.
    size: u64,
    /// Ring of blocks; its length is a power of two.
    blocks: Vec<u64>,
    /// Highest sequence number authenticated so far (0: none yet).
    top: u64,
}

impl ReplayWindow {
    /// A window of `size` packets (0 disables anti-replay).
    pub fn new(size: u32) -> Self {
        let n = (size as usize).div_ceil(64) + 1;
        ReplayWindow {
            size: u64::from(size),
            blocks: vec![0; n.next_power_of_two()],
            top: 0,
        }
    }

    /// Starts the window as if `top` had been received (for SAs that begin mid-stream).
    pub fn with_top(size: u32, top: u64) -> Self {
        let mut w = Self::new(size);
        w.top = top;
        w
    }

    /// The window of an SA restored after a restart: `top` was the highest number
    /// authenticated before, and everything at or below it counts as seen, since which of
    /// those arrived is not known (a replay of an old capture is refused; a packet of the
    /// old life still in flight is lost, which is the safe side).
    pub fn restored(size: u32, top: u64) -> Self {
        let mut w = Self::with_top(size, top);
        w.blocks.fill(u64::MAX);
        // Numbers above `top` in its own block are not seen yet (later blocks are cleared
        // as the window advances into them).
        let bit = top & (w.bits() - 1);
        let keep = bit & 63;
        let below_and_top = if keep == 63 {
            u64::MAX
        } else {
            (1u64 << (keep + 1)) - 1
        };
        w.blocks[(bit >> 6) as usize] &= below_and_top;
        w
    }

    /// The same window at another size (a reload changed `replay_window`): the top and
    /// what was seen of the last `min(old, new)` numbers are kept.
    pub fn resized(&self, size: u32) -> Self {
        let mut w = Self::with_top(size, self.top);
        let keep = self.size.min(w.size);
        if keep == 0 {
            return w;
        }
        for seq in self.top.saturating_sub(keep - 1).max(1)..=self.top {
            if !self.check(seq) {
                w.mark(seq);
            }
        }
        w
    }

    fn mark(&mut self, seq: u64) {
        let bit = seq & (self.bits() - 1);
        self.blocks[(bit >> 6) as usize] |= 1 << (bit & 63);
    }

    /// The window's size in packets.
    pub fn size(&self) -> u64 {
        self.size
    }

    /// The highest sequence number accepted so far.
    pub fn top(&self) -> u64 {
        self.top
    }

    fn bits(&self) -> u64 {
        self.blocks.len() as u64 * 64
    }

    /// The full sequence number of a packet that carries `low` (RFC 4303 A2.1). Without
    /// ESN it is `low`. `None` when the number would lie before the first epoch.
    pub fn infer(&self, low: u32, esn: bool) -> Option<u64> {
        if !esn {
            return Some(u64::from(low));
        }
        // With anti-replay off the inference still needs a window; take a generous one.
        let w = if self.size == 0 { 1 << 30 } else { self.size };
        let th = self.top >> 32;
        let tl = self.top & 0xffff_ffff;
        let seql = u64::from(low);
        let seqh = if tl >= w - 1 {
            // Case A: the window lies inside one epoch. (Seql >= Tl - W + 1, written so
            // that nothing can underflow.)
            if seql + w > tl {
                th
            } else {
                th + 1
            }
        } else {
            // Case B: the window straddles the start of this epoch.
            let bottom = (tl + (1 << 32) - w + 1) & 0xffff_ffff;
            if seql >= bottom {
                th.checked_sub(1)?
            } else {
                th
            }
        };
        Some((seqh << 32) | seql)
    }

    /// True if `seq` is new and inside the window.
    pub fn check(&self, seq: u64) -> bool {
        if seq == 0 {
            return false;
        }
        if self.size == 0 || seq > self.top {
            return true;
        }
        if self.top - seq >= self.size {
            return false;
        }
        let bit = seq & (self.bits() - 1);
        self.blocks[(bit >> 6) as usize] & (1 << (bit & 63)) == 0
    }

    /// Checks `seq` and records it. Call only for authenticated packets.
    // Inlined into the caller's loop (the common cases are a few instructions; as a call,
    // the loop spilled and reloaded its registers around it for every packet), the rest
    // out of line.
    #[inline]
    pub fn check_and_update(&mut self, seq: u64) -> bool {
        if self.size == 0 {
            // Anti-replay off: every number but 0 passes; the top is still kept, since ESN
            // infers the high half from it.
            self.top = self.top.max(seq);
            return seq != 0;
        }
        // The common case, one after the top: new by definition; it moves the top by one
        // and, as the first number of a block, clears that block of the ring's previous
        // lap (what the general path below does for any advance). Inbound this runs in the
        // ordered spread's turn, once per packet, so its length is every worker's wait.
        if seq == self.top.wrapping_add(1) && seq != 0 {
            let bit = seq & (self.bits() - 1);
            let i = (bit >> 6) as usize;
            let b = 1u64 << (bit & 63);
            if let Some(block) = self.blocks.get_mut(i) {
                *block = if bit & 63 == 0 { b } else { *block | b };
                self.top = seq;
                return true;
            }
        }
        self.check_and_update_general(seq)
    }

    /// [`ReplayWindow::check_and_update`] for any number: a late one, a jump ahead, a
    /// duplicate.
    #[inline(never)]
    fn check_and_update_general(&mut self, seq: u64) -> bool {
        if !self.check(seq) {
            return false;
        }
        let mask = self.blocks.len() as u64 - 1;
        if seq > self.top {
            let cur = self.top >> 6;
            let new = seq >> 6;
            let steps = (new - cur).min(self.blocks.len() as u64);
            for i in 1..=steps {
                self.blocks[((cur + i) & mask) as usize] = 0;
            }
            self.top = seq;
        }
        let bit = seq & (self.bits() - 1);
        self.blocks[(bit >> 6) as usize] |= 1 << (bit & 63);
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::BTreeSet;

    #[test]
    fn resizing_keeps_the_top_and_what_was_seen() {
        let mut w = ReplayWindow::new(64);
        for seq in [1000, 998, 990] {
            assert!(w.check_and_update(seq));
        }
        for size in [32, 128, 1024] {
            let r = w.resized(size);
            assert_eq!((r.top(), r.size()), (1000, u64::from(size)));
            assert!(!r.check(1000) && !r.check(998), "seen stays seen ({size})");
            assert!(
                r.check(999) && r.check(997),
                "unseen stays acceptable ({size})"
            );
            assert!(!r.check(990), "seen ({size})");
            assert_eq!(
                r.check(960),
                size > 40,
                "960 is inside a window of {size}, unseen"
            );
            assert!(r.check(1001));
        }
    }

    #[test]
    fn a_restored_window_refuses_everything_up_to_its_top_and_nothing_above() {
        for top in [1u64, 63, 64, 65, 1000, (1 << 32) + 7] {
            let mut w = ReplayWindow::restored(128, top);
            for old in top.saturating_sub(200)..=top {
                assert!(!w.check(old), "top {top}: {old} must count as seen");
            }
            assert!(w.check_and_update(top + 2), "top {top}");
            assert!(
                w.check_and_update(top + 1),
                "top {top}: reordered after restart"
            );
            assert!(!w.check(top + 1));
            assert!(w.check_and_update(top + 200));
            assert!(w.check_and_update(top + 150));
        }
    }

    /// The obvious reference: remember every accepted number.
    struct Model {
        size: u64,
        top: u64,
        seen: BTreeSet<u64>,
    }

    impl Model {
        fn accept(&mut self, seq: u64) -> bool {
            if seq == 0 {
                return false;
            }
            if seq <= self.top && (self.top - seq >= self.size || self.seen.contains(&seq)) {
                return false;
            }
            self.seen.insert(seq);
            self.top = self.top.max(seq);
            true
        }
    }

    #[test]
    fn basics() {
        let mut w = ReplayWindow::new(64);
        assert!(!w.check(0));
        assert!(w.check_and_update(1));
        assert!(!w.check_and_update(1));
        assert!(w.check_and_update(100));
        assert!(!w.check(36), "100 - 36 = 64 is outside a 64-packet window");
        assert!(w.check(37));
        assert!(w.check_and_update(37));
        assert!(!w.check(37));
    }

    /// A number skipped in a block the window entered by its next-number step, then
    /// arriving late, is new: the block was cleared of the ring's previous lap (window 32:
    /// a ring of two blocks, 128 numbers, so 257 sits where 129 did).
    #[test]
    fn a_block_entered_in_order_forgets_the_previous_lap() {
        let mut w = ReplayWindow::new(32);
        for seq in 1..=256 {
            assert!(w.check_and_update(seq), "{seq}");
        }
        assert!(w.check_and_update(260));
        assert!(w.check_and_update(257), "skipped, late, inside the window");
        assert!(!w.check_and_update(257));
        assert!(w.check_and_update(258));
    }

    /// Anti-replay off: everything but 0 passes, duplicates too, and the top still follows
    /// the numbers, so that ESN infers the next epoch after the low half wraps.
    #[test]
    fn with_anti_replay_off_the_top_still_follows_for_esn() {
        let mut w = ReplayWindow::new(0);
        let near = (1u64 << 32) - 10;
        assert!(w.check_and_update(near));
        assert!(w.check_and_update(near), "no replay check");
        assert!(!w.check_and_update(0));
        assert_eq!(w.top(), near);
        assert_eq!(w.infer(5, true), Some((1 << 32) | 5));
    }

    #[test]
    fn large_window_4096() {
        let mut w = ReplayWindow::new(4096);
        assert!(w.check_and_update(5000));
        assert!(w.check_and_update(905));
        assert!(!w.check(904));
        assert!(!w.check_and_update(905));
        assert!(w.check_and_update(9000));
        assert!(!w.check(4904));
        assert!(w.check(4905));
    }

    #[test]
    fn esn_inference_across_the_wrap() {
        let mut w = ReplayWindow::new(128);
        let near = (1u64 << 32) - 10;
        w.check_and_update(near);
        // Low half wrapped: the packet belongs to the next epoch.
        assert_eq!(w.infer(5, true), Some((1 << 32) | 5));
        // A late packet from before the top stays in this epoch.
        assert_eq!(w.infer(0xffff_fff0, true), Some(0xffff_fff0));
        w.check_and_update((1 << 32) | 5);
        // Case B: top low half is small; a number just below the epoch start is older.
        assert_eq!(w.infer(0xffff_fffe, true), Some(0xffff_fffe));
        assert_eq!(w.infer(6, true), Some((1 << 32) | 6));
        // Before anything was received, a number just below 2^32 would lie in epoch -1.
        assert_eq!(ReplayWindow::new(64).infer(0xffff_ffff, true), None);
        assert_eq!(ReplayWindow::new(64).infer(7, true), Some(7));
    }

    proptest! {
        /// Random streams: in order, reordered within and beyond the window, duplicates.
        #[test]
        fn matches_reference_model(
            size in prop_oneof![Just(0u32), Just(32), Just(64), Just(1024), Just(4096)],
            steps in proptest::collection::vec((0u8..4, 0u64..6000), 1..400),
        ) {
            let mut w = ReplayWindow::new(size);
            let mut m = Model { size: if size == 0 { u64::MAX } else { u64::from(size) }, top: 0, seen: BTreeSet::new() };
            let mut next = 1u64;
            for (kind, x) in steps {
                let seq = match kind {
                    0 => { next += 1; next }                         // in order
                    1 => { next += x % 8000; next }                   // jump ahead
                    2 => next.saturating_sub(x),                      // late, maybe beyond window
                    _ => next.saturating_sub(x % 4),                  // near-duplicate
                };
                let expect = if size == 0 { seq != 0 } else { m.accept(seq) };
                prop_assert_eq!(w.check_and_update(seq), expect, "seq {}", seq);
            }
        }

        /// Dense streams, as a busy SA sends them: mostly the next number, small gaps, and
        /// late packets near the top, over windows small enough for the ring to come round
        /// many times.
        #[test]
        fn dense_streams_match_reference_model(
            size in prop_oneof![Just(32u32), Just(64), Just(100), Just(128)],
            steps in proptest::collection::vec((0u8..4, 0u64..200), 1..1500),
        ) {
            let mut w = ReplayWindow::new(size);
            let mut m = Model { size: u64::from(size), top: 0, seen: BTreeSet::new() };
            let mut next = 0u64;
            for (kind, x) in steps {
                let seq = match kind {
                    0 | 1 => { next += 1; next }
                    2 => { next += 1 + x % 4; next }
                    _ => next.saturating_sub(x % (u64::from(size) + 8)),
                };
                prop_assert_eq!(w.check_and_update(seq), m.accept(seq), "seq {}", seq);
            }
        }

        /// The same with ESN: only the low 32 bits travel, across the 2^32 boundary.
        #[test]
        fn esn_matches_reference_model(
            steps in proptest::collection::vec((0u8..3, 0u64..300), 1..300),
        ) {
            let size = 256u32;
            let start = (1u64 << 32) - 500;
            let mut w = ReplayWindow::with_top(size, start);
            let mut m = Model { size: u64::from(size), top: start, seen: BTreeSet::new() };
            let mut next = start;
            for (kind, x) in steps {
                let seq = match kind {
                    0 => { next += 1 + x % 5; next }
                    1 => next.saturating_sub(x),
                    _ => next.saturating_sub(x % 3),
                };
                let inferred = w.infer(seq as u32, true).unwrap();
                let expect = m.accept(seq);
                // Inference is exact for anything that can still be accepted.
                if expect {
                    prop_assert_eq!(inferred, seq);
                }
                // A wrong guess of the high half fails authentication (it is in the AAD),
                // so the window only ever sees authentic numbers.
                let authentic = inferred == seq;
                let got = authentic && w.check_and_update(inferred);
                prop_assert_eq!(got, expect, "seq {:#x}", seq);
            }
            prop_assert!(w.top() > 1 << 32 || next <= 1 << 32);
        }
    }
}
