//! Inbound: per run of one SA's ESP packets the replay pre-check, one burst crypto call
//! that authenticates and decrypts, the window update and decapsulation.

use super::*;

impl Pipeline {
    /// Drops a packet at classification, counting it on its SA too if one was found.
    pub(super) fn drop_classified(
        &mut self,
        t: &Tables,
        p: &mut Packet,
        r: DropReason,
        sa: Option<u32>,
    ) -> Slot {
        if let Some(sa) = sa {
            t.sas[sa as usize].state.counters.drop(r, 1);
        }
        self.drop_pkt(p, r);
        Slot::Done
    }

    /// Authenticates and decrypts a run of ESP packets of SA `sa_idx` (lifetime and replay
    /// pre-check, then one crypto call); what fails is dropped. The window is updated
    /// afterwards for the whole burst ([`Pipeline::accept_run`]), in arrival order when
    /// bursts are spread over workers.
    #[inline(never)]
    pub(super) fn open_run(&mut self, t: &Tables, sa_idx: u32, pkts: &mut [Packet], base: usize) {
        let sa = &t.sas[sa_idx as usize];
        let Some(key) = sa.esp_key() else {
            return self.drop_run(t, sa_idx, pkts, base, DropReason::SaMismatch);
        };
        let icv = sa.icv_len;
        let mut replayed = 0u64;
        let mut expired = 0u64;
        let allowed = sa.lifetime_allowance(pkts.len() as u64);
        // 1. Lifetime and replay pre-check, in the same pass as the crypto ops are listed:
        // no crypto is spent on a packet that cannot pass.
        let mut ops: Vec<EspOp<'_>> = recycle(std::mem::take(&mut self.esp_ops));
        ops.reserve(pkts.len());
        {
            let w = sa.state.replay.lock().unwrap_or_else(|e| e.into_inner());
            for (k, p) in pkts.iter_mut().enumerate() {
                let slot = &mut self.slots[base + k];
                let Slot::Open { job, seq } = slot else {
                    continue;
                };
                let reason = if k as u64 >= allowed {
                    expired += 1;
                    DropReason::LifetimeExpired
                } else {
                    match w.infer(job.seq_low, sa.esn) {
                        Some(s) if w.check(s) => {
                            *seq = s;
                            let esp_end = job.text_off + job.text_len + icv;
                            let esp = &mut p.data_mut()[job.esp_off..esp_end];
                            ops.push(EspOp { esp, seq: s });
                            continue;
                        }
                        _ => {
                            replayed += 1;
                            DropReason::Replay
                        }
                    }
                };
                *slot = Slot::Done;
                p.verdict = Verdict::Drop(reason);
            }
        }
        self.counters.drops[DropReason::LifetimeExpired as usize] += expired;
        sa.state.counters.drop(DropReason::LifetimeExpired, expired);
        self.counters.drops[DropReason::Replay as usize] += replayed;
        sa.state.counters.drop(DropReason::Replay, replayed);
        // 2. One crypto call: authenticate and decrypt.
        self.oks.clear();
        self.oks.resize(ops.len(), false);
        key.open_burst(&mut ops, &mut self.oks);
        self.esp_ops = recycle(ops);
        let mut auth_failed = 0u64;
        let mut o = 0;
        for (k, p) in pkts.iter_mut().enumerate() {
            let slot = &mut self.slots[base + k];
            if let Slot::Open { .. } = *slot {
                if !self.oks[o] {
                    auth_failed += 1;
                    *slot = Slot::Done;
                    p.verdict = Verdict::Drop(DropReason::AuthFailed);
                }
                o += 1;
            }
        }
        self.counters.drops[DropReason::AuthFailed as usize] += auth_failed;
        sa.state.counters.drop(DropReason::AuthFailed, auth_failed);
    }

    /// Step 3: the replay-window update for the authentic packets of a run, under one
    /// lock; a number already seen (by a packet of this burst, or on another worker since
    /// the pre-check) is dropped. What the window accepts is counted against the SA's
    /// lifetime under the same lock, so that workers sharing the SA never both spend its
    /// last packets: a packet past the hard lifetime leaves the window as it was.
    #[inline(never)]
    pub(super) fn accept_run(&mut self, t: &Tables, sa_idx: u32, pkts: &mut [Packet], base: usize) {
        let sa = &t.sas[sa_idx as usize];
        let mut replayed = 0u64;
        let mut expired = 0u64;
        let mut accepted = 0u64;
        {
            let mut w = sa.state.replay.lock().unwrap_or_else(|e| e.into_inner());
            // Every packet of the SA is charged under this lock: the allowance read here
            // stays exact until the charge below.
            let allowed = sa.lifetime_allowance(pkts.len() as u64);
            for (k, p) in pkts.iter_mut().enumerate() {
                let slot = &mut self.slots[base + k];
                let Slot::Open { seq, .. } = *slot else {
                    continue;
                };
                let verdict = if accepted == allowed {
                    expired += 1;
                    DropReason::LifetimeExpired
                } else if w.check_and_update(seq) {
                    accepted += 1;
                    continue;
                } else {
                    replayed += 1;
                    DropReason::Replay
                };
                *slot = Slot::Done;
                p.verdict = Verdict::Drop(verdict);
            }
            sa.state.counters.charge(accepted, None);
        }
        // Expiry is marked from the totals once the run's bytes are counted too
        // (`decapsulate_run`).
        self.counters.drops[DropReason::Replay as usize] += replayed;
        sa.state.counters.drop(DropReason::Replay, replayed);
        self.counters.drops[DropReason::LifetimeExpired as usize] += expired;
        sa.state.counters.drop(DropReason::LifetimeExpired, expired);
    }

    /// Step 4: trailer, decapsulation, the inbound policy check and routing for a run's
    /// accepted packets.
    #[inline(never)]
    pub(super) fn decapsulate_run(
        &mut self,
        t: &Tables,
        sa_idx: u32,
        pkts: &mut [Packet],
        base: usize,
    ) {
        let sa = &t.sas[sa_idx as usize];
        let mut good = 0u64;
        let mut bytes = 0u64;
        for (k, p) in pkts.iter_mut().enumerate() {
            let Slot::Open { job, .. } = self.slots[base + k] else {
                continue;
            };
            let res =
                esp_in::decapsulate(p, &job, sa).and_then(|info| -> Result<IpInfo, DropReason> {
                    // The policy must name this SA (or, for negotiated SAs, one of its
                    // reqid), and AH around it exactly when it names a bundle.
                    match (self.spd_lookup(t, Direction::In, info.key), job.via_ah) {
                        (Some(SpdAction::Protect(i)), None)
                            if i == sa_idx || same_reqid(t, i, sa_idx) =>
                        {
                            Ok(info)
                        }
                        (Some(SpdAction::ProtectEach { first, count }), None)
                            if in_set(t, first, count, sa_idx) =>
                        {
                            Ok(info)
                        }
                        (Some(SpdAction::Acquire(reqid)), None)
                            if sa.config.reqid == Some(reqid) =>
                        {
                            Ok(info)
                        }
                        (Some(SpdAction::Bundle { esp, ah }), Some(via))
                            if (esp == sa_idx || same_reqid(t, esp, sa_idx)) && ah == via =>
                        {
                            Ok(info)
                        }
                        _ => Err(DropReason::PolicyMismatch),
                    }
                });
            match res {
                Ok(info) => {
                    good += 1;
                    bytes += info.total_len as u64;
                    // Routed here, while the packet is at hand, as outbound's `crypt_run`
                    // does, rather than in the last pass (`route_burst`, 4 % of the
                    // 64-byte inbound profile as a pass of its own).
                    self.slots[base + k] = Slot::Done;
                    self.route(t, p, base + k, info.key.v4, info.key.dst);
                }
                Err(r) => {
                    self.slots[base + k] = Slot::Done;
                    sa.state.counters.drop(r, 1);
                    self.drop_pkt(p, r);
                }
            }
        }
        self.counters.decrypted += good;
        // The packets were counted when the window accepted them (a packet the policy
        // then refuses was still opened with the SA's key).
        sa.state.counters.add_bytes(bytes);
        sa.note_usage();
    }

    /// Drops every packet of a run still waiting for SA `sa_idx`'s crypto.
    pub(super) fn drop_run(
        &mut self,
        t: &Tables,
        sa_idx: u32,
        pkts: &mut [Packet],
        base: usize,
        r: DropReason,
    ) {
        for (k, p) in pkts.iter_mut().enumerate() {
            if matches!(
                self.slots[base + k],
                Slot::Sealed { .. } | Slot::Open { .. }
            ) {
                self.slots[base + k] = self.drop_classified(t, p, r, Some(sa_idx));
            }
        }
    }
}

/// Whether SAs `a` and `b` were negotiated under one reqid: an inbound policy naming one
/// accepts the other (the rekeyed SA before charon points the policy at it, the old one
/// until it is deleted), as the kernel's policy templates match on reqid.
fn same_reqid(t: &Tables, a: u32, b: u32) -> bool {
    let reqid = |i: u32| t.sas.get(i as usize).and_then(|s| s.config.reqid);
    matches!((reqid(a), reqid(b)), (Some(x), Some(y)) if x == y)
}

/// Whether SA `sa` belongs to the per-worker set at `first..first + count`: an inbound
/// policy with such a set accepts a packet opened by any of its SAs, whichever of the
/// peer's workers sealed it. Out of line: the common policy names one SA.
#[cold]
#[inline(never)]
fn in_set(t: &Tables, first: u32, count: u32, sa: u32) -> bool {
    let (first, count) = (first as usize, count as usize);
    t.per_worker_sas
        .get(first..first.saturating_add(count))
        .is_some_and(|set| set.contains(&sa))
}
