//! Outbound: sequence numbers (reserved per SA and burst), ESP encapsulation, and one
//! burst crypto call per run of packets of one SA.

use super::*;

impl Pipeline {
    /// Claims the next sequence number of SA `sa_idx` in this burst: its offset in the
    /// block the burst reserves for the SA once classification is done
    /// ([`Pipeline::reserve_seq_blocks`]). The packet is encapsulated with the offset in
    /// place of the number, and gets the number itself just before encryption.
    #[inline]
    pub(super) fn claim_seq(&mut self, sa_idx: u32) -> u64 {
        let b = match self.seq_blocks.iter().position(|b| b.sa == sa_idx) {
            Some(b) => b,
            None => {
                self.seq_blocks.push(SeqBlock {
                    sa: sa_idx,
                    used: 0,
                    first: 0,
                    granted: 0,
                    empty: DropReason::LifetimeExpired,
                });
                self.seq_blocks.len() - 1
            }
        };
        let b = &mut self.seq_blocks[b];
        b.used += 1;
        b.used - 1
    }

    /// Reserves, for every SA of the burst, as many sequence numbers as its packets
    /// claimed (and its lifetime allows), and counts the packets against the lifetime in
    /// the same step: a few atomic operations on one SA's state per burst. With an order
    /// set, bursts do this in arrival order, so that numbers follow arrival order across
    /// workers.
    pub(super) fn reserve_seq_blocks(&mut self, t: &Tables) {
        for b in &mut self.seq_blocks {
            let sa = &t.sas[b.sa as usize];
            let allowed = sa.charge_lifetime(b.used);
            let (first, granted) = if allowed > 0 {
                sa.reserve_seq(allowed)
            } else {
                (0, 0)
            };
            // Charged, but no number for them: they are dropped, not carried.
            sa.state.counters.refund(allowed - granted);
            let exhausted = &sa.state.exhausted;
            let took_last = granted > 0 && first + (granted - 1) == sa.max_seq();
            if took_last {
                // The last number there is: the SA is finished once it is sent.
                exhausted.store(true, std::sync::atomic::Ordering::Relaxed);
            }
            let reached_max = took_last || exhausted.load(std::sync::atomic::Ordering::Relaxed);
            b.first = first;
            b.granted = granted;
            // Granted fewer than allowed: the number space is used up, or (short of its
            // end) the persisted reservation ran out.
            b.empty = if granted < allowed {
                if reached_max {
                    DropReason::SeqExhausted
                } else {
                    DropReason::SeqUnreserved
                }
            } else {
                DropReason::LifetimeExpired
            };
        }
    }

    /// The block reserved for SA `sa_idx` in this burst: (first number, how many, why
    /// packets past them are refused).
    #[inline]
    pub(super) fn seq_block(&self, sa_idx: u32) -> (u64, u64, DropReason) {
        match self.seq_blocks.iter().find(|b| b.sa == sa_idx) {
            Some(b) => (b.first, b.granted, b.empty),
            None => (0, 0, DropReason::SeqUnreserved),
        }
    }

    /// The sequence number of the packet that claimed offset `off` of SA `sa_idx`.
    pub(super) fn resolve_seq(&self, sa_idx: u32, off: u64) -> Result<u64, DropReason> {
        let (first, granted, empty) = self.seq_block(sa_idx);
        if off < granted {
            Ok(first + off)
        } else {
            Err(empty)
        }
    }

    /// Whether `p` fits SA `sa_idx`'s path MTU; if not, it is set aside for the caller
    /// (checked before a sequence number is spent; the caller answers with ICMP or
    /// fragments the packet).
    pub(super) fn fits(&mut self, t: &Tables, sa_idx: u32, p: &mut Packet, info: &IpInfo) -> bool {
        let sa = &t.sas[sa_idx as usize];
        if info.total_len <= sa.max_inner {
            return true;
        }
        self.too_big.push(TooBig {
            index: self.slots.len(),
            max_inner: sa.max_inner,
        });
        p.verdict = Verdict::Drop(DropReason::Mtu);
        false
    }

    /// Gives a packet of SA `sa_idx` its ESP encapsulation and claims its sequence number;
    /// with `then_ah` (a bundle) also claims the number of the AH SA applied after
    /// encryption. Pushes the packet's slot itself: a slot returned from several paths is
    /// merged into one value before it is stored, assembled byte by byte from each path's
    /// fields (callgrind: about 60 instructions per packet at 64 bytes), where a push at
    /// the place it is made stores the job's fields directly.
    // Always inlined into the classification pass: returned through memory, the slot is
    // stored in pieces and reloaded whole, a store-forwarding stall per packet (perf: 17 %
    // of the pass at 64 bytes once the host stage made the pass too large for the compiler
    // to inline this on its own).
    #[inline(always)]
    pub(super) fn encapsulate(
        &mut self,
        t: &Tables,
        sa_idx: u32,
        then_ah: Option<u32>,
        p: &mut Packet,
        info: &IpInfo,
    ) {
        if !self.fits(t, sa_idx, p, info) {
            return self.slots.push(Slot::Done);
        }
        let sa = &t.sas[sa_idx as usize];
        let off = self.claim_seq(sa_idx);
        let job = match esp_out::encapsulate(p, sa, off, info) {
            Ok(job) => job,
            Err(r) => {
                // The last claim, given back: a packet dropped here uses no number.
                if let Some(b) = self.seq_blocks.iter_mut().find(|b| b.sa == sa_idx) {
                    b.used -= 1;
                }
                let done = self.drop_classified(t, p, r, Some(sa_idx));
                return self.slots.push(done);
            }
        };
        let ah = then_ah.map(|a| (a, self.claim_seq(a)));
        self.slots.push(Slot::Sealed {
            sa: sa_idx,
            job,
            ah,
        });
    }

    /// AH alone (one packet): claims the SA's sequence number; header and ICV are added
    /// once the number is reserved, with the burst's other AH packets of the SA
    /// ([`Pipeline::add_ah_burst`]).
    pub(super) fn protect_ah(
        &mut self,
        t: &Tables,
        sa_idx: u32,
        p: &mut Packet,
        info: &IpInfo,
    ) -> Slot {
        if !self.fits(t, sa_idx, p, info) {
            return Slot::Done;
        }
        Slot::AddAh {
            sa: sa_idx,
            off: self.claim_seq(sa_idx),
            bundled: false,
        }
    }

    /// Encrypts a run of encapsulated packets that all use SA `sa_idx`; `base` is the
    /// run's index in the burst. Each packet first gets its sequence number from the
    /// burst's block (a packet past the block is dropped).
    #[inline(never)]
    pub(super) fn crypt_run(&mut self, t: &Tables, sa_idx: u32, pkts: &mut [Packet], base: usize) {
        let sa = &t.sas[sa_idx as usize];
        let mut bytes = 0u64;
        let icv = sa.icv_len;
        let Some(key) = sa.esp_key() else {
            return self.drop_run(t, sa_idx, pkts, base, DropReason::SaMismatch);
        };
        let (first, granted, empty) = self.seq_block(sa_idx);
        let mut ops: Vec<EspOp<'_>> = recycle(std::mem::take(&mut self.esp_ops));
        ops.reserve(pkts.len());
        for (k, p) in pkts.iter_mut().enumerate() {
            let slot = &mut self.slots[base + k];
            let Slot::Sealed { job, .. } = slot else {
                continue;
            };
            if job.seq >= granted {
                // A bundle's AH number, charged to the AH SA with the burst's block, goes
                // unused with the packet.
                if let Slot::Sealed {
                    ah: Some((ah, off)),
                    ..
                } = *slot
                {
                    if self.resolve_seq(ah, off).is_ok() {
                        t.sas[ah as usize].state.counters.refund(1);
                    }
                }
                let slot = &mut self.slots[base + k];
                *slot = Slot::Done;
                t.sas[sa_idx as usize].state.counters.drop(empty, 1);
                p.verdict = Verdict::Drop(empty);
                self.counters.drop(empty);
                continue;
            }
            let seq = first + job.seq;
            let d = p.data_mut();
            esp_out::set_seq(d, job, seq);
            bytes += u64::from(job.payload_len);
            let esp_end = usize::from(job.text_off) + usize::from(job.text_len) + icv;
            let esp = &mut d[usize::from(job.esp_off)..esp_end];
            ops.push(EspOp { esp, seq });
        }
        let sealed = ops.len() as u64;
        key.seal_burst(&mut ops);
        self.esp_ops = recycle(ops);
        for (k, p) in pkts.iter_mut().enumerate() {
            let slot = &mut self.slots[base + k];
            // Read in place, not copied out: the job is most of the slot's 80 bytes.
            let (v4, dst) = match slot {
                Slot::Sealed { job, ah, .. } => {
                    esp_out::finish(p, job);
                    // A bundle's AH goes on after the burst's ESP, with the burst's other AH.
                    if let Some((sa, off)) = *ah {
                        *slot = Slot::AddAh {
                            sa,
                            off,
                            bundled: true,
                        };
                        continue;
                    }
                    (job.route_v4, job.route_dst)
                }
                _ => continue,
            };
            // Routed here, while the packet is at hand, rather than in a later pass.
            *slot = Slot::Done;
            self.route(t, p, base + k, v4, dst);
        }
        self.counters.encrypted += sealed;
        // The packets were counted when their numbers were reserved.
        sa.state.counters.add_bytes(bytes);
        sa.note_usage();
    }
}
