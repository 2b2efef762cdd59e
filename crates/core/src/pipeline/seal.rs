//! Outbound: sequence numbers (reserved per SA and burst), ESP encapsulation and AH, and
//! one burst crypto call per run of packets of one SA.

use super::*;

impl Pipeline {
    /// The next sequence number of SA `sa_idx` in this burst, reserving a block for the
    /// `remaining` packets of the burst on first use.
    pub(super) fn next_seq(
        &mut self,
        t: &Tables,
        sa_idx: u32,
        remaining: u64,
    ) -> Result<u64, DropReason> {
        let b = match self.seq_blocks.iter().position(|b| b.sa == sa_idx) {
            Some(b) => b,
            None => {
                let sa = &t.sas[sa_idx as usize];
                let allowed = sa.lifetime_allowance(remaining);
                let (first, granted) = if allowed > 0 {
                    sa.reserve_seq(allowed)
                } else {
                    (0, 0)
                };
                // Short of the SA's last number: the persisted reservation ran out.
                let reached_max = sa
                    .state
                    .exhausted
                    .load(std::sync::atomic::Ordering::Relaxed)
                    || (granted > 0 && first + (granted - 1) == sa.max_seq());
                let empty = if granted < allowed {
                    if reached_max {
                        DropReason::SeqExhausted
                    } else {
                        DropReason::SeqUnreserved
                    }
                } else {
                    DropReason::LifetimeExpired
                };
                self.seq_blocks.push(SeqBlock {
                    sa: sa_idx,
                    next: first,
                    end: first + granted,
                    empty,
                });
                self.seq_blocks.len() - 1
            }
        };
        let b = &mut self.seq_blocks[b];
        if b.next < b.end {
            b.next += 1;
            Ok(b.next - 1)
        } else {
            Err(b.empty)
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

    /// The next sequence number of SA `sa_idx`, marking the SA finished when it is the
    /// last there is.
    pub(super) fn take_seq(
        &mut self,
        t: &Tables,
        sa_idx: u32,
        remaining: u64,
    ) -> Result<u64, DropReason> {
        let seq = self.next_seq(t, sa_idx, remaining)?;
        let sa = &t.sas[sa_idx as usize];
        if seq == sa.max_seq() {
            sa.state
                .exhausted
                .store(true, std::sync::atomic::Ordering::Relaxed);
        }
        Ok(seq)
    }

    /// Gives a packet of SA `sa_idx` its sequence number and ESP encapsulation; with
    /// `then_ah` (a bundle) also the sequence number of the AH SA applied after encryption.
    // Always inlined into the classification pass: returned through memory, the 112-byte
    // slot is stored in pieces and reloaded whole, a store-forwarding stall per packet
    // (perf: 17 % of the pass at 64 bytes once the host stage made the pass too large for
    // the compiler to inline this on its own).
    #[inline(always)]
    pub(super) fn encapsulate(
        &mut self,
        t: &Tables,
        sa_idx: u32,
        then_ah: Option<u32>,
        p: &mut Packet,
        info: &IpInfo,
        remaining: u64,
    ) -> Slot {
        if !self.fits(t, sa_idx, p, info) {
            return Slot::Done;
        }
        let sa = &t.sas[sa_idx as usize];
        let res = self
            .take_seq(t, sa_idx, remaining)
            .and_then(|seq| esp_out::encapsulate(p, sa, seq, info));
        let job = match res {
            Ok(job) => job,
            Err(r) => return self.drop_classified(t, p, r, Some(sa_idx)),
        };
        let ah = match then_ah {
            None => None,
            Some(a) => match self.take_seq(t, a, remaining) {
                Ok(seq) => Some((a, seq)),
                Err(r) => return self.drop_classified(t, p, r, Some(a)),
            },
        };
        Slot::Sealed {
            sa: sa_idx,
            job,
            ah,
        }
    }

    /// Adds AH alone (one packet): the SA's sequence number, header and ICV.
    pub(super) fn protect_ah(
        &mut self,
        t: &Tables,
        sa_idx: u32,
        p: &mut Packet,
        info: &IpInfo,
        remaining: u64,
    ) -> Slot {
        if !self.fits(t, sa_idx, p, info) {
            return Slot::Done;
        }
        let res = self
            .take_seq(t, sa_idx, remaining)
            .and_then(|seq| self.add_ah(t, sa_idx, p, seq));
        match res {
            Ok((v4, dst)) => {
                self.counters.encrypted += 1;
                Slot::Route { v4, dst }
            }
            Err(r) => self.drop_classified(t, p, r, Some(sa_idx)),
        }
    }

    /// Adds AH of SA `sa_idx` with `seq` to `p` and counts it on the SA; returns where the
    /// packet goes.
    pub(super) fn add_ah(
        &mut self,
        t: &Tables,
        sa_idx: u32,
        p: &mut Packet,
        seq: u64,
    ) -> Result<(bool, u128), DropReason> {
        let sa = &t.sas[sa_idx as usize];
        let key = sa.ah_key().ok_or(DropReason::SaMismatch)?;
        let done = ah::protect(p, sa, key, seq, &mut self.ah_scratch)?;
        sa.state.counters.add(1, u64::from(done.payload_len));
        sa.note_usage();
        Ok((done.route_v4, done.route_dst))
    }

    /// Encrypts a run of encapsulated packets that all use SA `sa_idx`; `base` is the
    /// run's index in the burst.
    pub(super) fn crypt_run(&mut self, t: &Tables, sa_idx: u32, pkts: &mut [Packet], base: usize) {
        let sa = &t.sas[sa_idx as usize];
        let sealed = pkts.len() as u64;
        let mut bytes = 0u64;
        let icv = sa.icv_len;
        let Some(key) = sa.esp_key() else {
            return self.drop_run(t, sa_idx, pkts, base, DropReason::SaMismatch);
        };
        let mut ops: Vec<EspOp<'_>> = Vec::with_capacity(sealed as usize);
        for (k, p) in pkts.iter_mut().enumerate() {
            if let Slot::Sealed { job, .. } = self.slots[base + k] {
                bytes += u64::from(job.payload_len);
                let d = p.data_mut();
                let esp = &mut d[job.esp_off..job.text_off + job.text_len + icv];
                ops.push(EspOp { esp, seq: job.seq });
            }
        }
        key.seal_burst(&mut ops);
        drop(ops);
        for (k, p) in pkts.iter_mut().enumerate() {
            if let Slot::Sealed { job, ah, .. } = self.slots[base + k] {
                esp_out::finish(p, &job);
                let route = match ah {
                    None => Ok((job.route_v4, job.route_dst)),
                    Some((a, seq)) => self.add_ah(t, a, p, seq).map_err(|r| (r, a)),
                };
                self.slots[base + k] = match route {
                    Ok((v4, dst)) => Slot::Route { v4, dst },
                    Err((r, a)) => self.drop_classified(t, p, r, Some(a)),
                };
            }
        }
        self.counters.encrypted += sealed;
        sa.state.counters.add(sealed, bytes);
        sa.note_usage();
    }
}
