//! AH's burst stage: per SA, one crypto call for the ICVs of all its packets in the burst.
//!
//! Each packet is made what its ICV covers in place (headers' mutable fields and ICV
//! zeroed, ESN bits appended; what changes is saved to an arena and put back afterwards:
//! [`ah::stage_protect`], [`ah::stage_verify`], [`ah::restore`]), and the SA's key
//! computes the ICVs of the burst together: intel-ipsec-mb's multi-buffer job API hashes
//! several packets at once in SIMD lanes (one packet at a time took AH HMAC-SHA-256 to
//! 0.4x of ESP NULL with the same HMAC; see the README's performance section).
//!
//! Outbound (after the ESP stage): AH alone, and AH around a bundle's sealed ESP; each
//! packet gets its header and sequence number, then its ICV. Inbound (before the ESP
//! stage): lifetime and replay pre-check, the ICVs, a constant-time compare, the window
//! update, AH removed; ESP found inside goes on to the ESP stage remembering its AH SA.

use espgw_crypto::{AhKey, AhOp, Icv};

use super::*;

/// A packet of the SA at hand whose ICV the burst computes.
#[derive(Clone, Copy)]
pub(super) struct AhPending {
    /// Index in the burst.
    k: usize,
    /// Full sequence number (inbound: inferred and pre-checked).
    seq: u64,
    icv: ah::IcvJob,
    /// Outbound: where the packet goes and what it protected.
    out: Option<ah::Protected>,
}

impl Pipeline {
    /// Outbound: adds AH to every packet of the burst waiting for it, SA by SA.
    pub(super) fn add_ah_burst(&mut self, t: &Tables, pkts: &mut [Packet]) {
        let mut from = 0;
        while let Some((first, sa)) = self.next_ah(from, |s| match s {
            Slot::AddAh { sa, .. } => Some(sa),
            _ => None,
        }) {
            self.add_ah_sa(t, sa, first, pkts);
            from = first + 1;
        }
    }

    /// Inbound: verifies and removes AH from every AH packet of the burst, SA by SA.
    pub(super) fn open_ah_burst(&mut self, t: &Tables, pkts: &mut [Packet]) {
        let mut from = 0;
        while let Some((first, sa)) = self.next_ah(from, |s| match s {
            Slot::OpenAh { job } => Some(job.sa),
            _ => None,
        }) {
            self.open_ah_sa(t, sa, first, pkts);
            from = first + 1;
        }
    }

    /// The first slot from `from` on that `sa_of` names an SA for, and that SA.
    fn next_ah(&self, from: usize, sa_of: impl Fn(Slot) -> Option<u32>) -> Option<(usize, u32)> {
        let slots = self.slots.get(from..)?;
        slots
            .iter()
            .enumerate()
            .find_map(|(i, s)| sa_of(*s).map(|sa| (from + i, sa)))
    }

    /// Adds AH of SA `sa_idx` to the packets from `first` on that wait for it. Out of line,
    /// as the ESP runs are: inlined into the pass, AH's code moved the layout of the whole
    /// pass with every change to it (callgrind: AES-GCM's pass +13 to +29 instructions a
    /// packet from AH changes alone).
    #[inline(never)]
    fn add_ah_sa(&mut self, t: &Tables, sa_idx: u32, first: usize, pkts: &mut [Packet]) {
        let sa = &t.sas[sa_idx as usize];
        self.ah_text.clear();
        self.ah_pending.clear();
        // Packets with a number, counted against the lifetime when it was reserved.
        let mut charged = 0u64;
        for (k, p) in pkts.iter_mut().enumerate().skip(first) {
            let Slot::AddAh { sa: s, off, .. } = self.slots[k] else {
                continue;
            };
            if s != sa_idx {
                continue;
            }
            let numbered = self.resolve_seq(sa_idx, off);
            charged += u64::from(numbered.is_ok());
            let staged = numbered.and_then(|seq| {
                let key = sa.ah_key().ok_or(DropReason::SaMismatch)?;
                let (done, icv) = ah::stage_protect(p, sa, key, seq, &mut self.ah_text)?;
                Ok(AhPending {
                    k,
                    seq,
                    icv,
                    out: Some(done),
                })
            });
            match staged {
                Ok(pending) => self.ah_pending.push(pending),
                Err(r) => self.slots[k] = self.drop_classified(t, p, r, Some(sa_idx)),
            }
        }
        let Some(key) = sa.ah_key() else {
            return sa.state.counters.refund(charged);
        };
        self.compute_icvs(key, pkts);
        let icv_len = key.icv_len();
        // The SA's totals, added once for the burst: no atomic per packet.
        let (mut packets, mut bytes) = (0u64, 0u64);
        for j in 0..self.ah_pending.len() {
            let AhPending { k, icv, out, .. } = self.ah_pending[j];
            let p = &mut pkts[k];
            ah::restore(p, &icv, &self.ah_text);
            let (Some(tag), Some(done)) = (self.ah_icvs.get(j).and_then(Icv::get), out) else {
                // Never sent without its ICV.
                self.slots[k] = self.drop_classified(t, p, DropReason::CryptoFailed, Some(sa_idx));
                continue;
            };
            ah::write_icv(p, &icv, tag, icv_len);
            if let Slot::AddAh { bundled: false, .. } = self.slots[k] {
                self.counters.encrypted += 1;
            }
            packets += 1;
            bytes += u64::from(done.payload_len);
            self.slots[k] = Slot::Route {
                v4: done.route_v4,
                dst: done.route_dst,
            };
        }
        // Charged but never sent: given back.
        sa.state.counters.refund(charged - packets);
        sa.state.counters.add_bytes(bytes);
        sa.note_usage();
    }

    /// Verifies and removes AH of SA `sa_idx` from the packets from `first` on that carry
    /// it: lifetime and replay pre-check (no crypto for a packet that cannot pass), the
    /// ICVs, the window update under one lock, then what AH carried. Out of line, as
    /// [`Pipeline::add_ah_sa`] is.
    #[inline(never)]
    fn open_ah_sa(&mut self, t: &Tables, sa_idx: u32, first: usize, pkts: &mut [Packet]) {
        let sa = &t.sas[sa_idx as usize];
        self.ah_text.clear();
        self.ah_pending.clear();
        let Some(key) = sa.ah_key() else {
            for (k, p) in pkts.iter_mut().enumerate().skip(first) {
                if matches!(self.slots[k], Slot::OpenAh { job } if job.sa == sa_idx) {
                    self.slots[k] =
                        self.drop_classified(t, p, DropReason::SaMismatch, Some(sa_idx));
                }
            }
            return;
        };
        let members = self.slots[first..]
            .iter()
            .filter(|s| matches!(s, Slot::OpenAh { job } if job.sa == sa_idx))
            .count();
        let allowed = sa.lifetime_allowance(members as u64);
        let mut seen = 0u64;
        {
            let w = sa.state.replay.lock().unwrap_or_else(|e| e.into_inner());
            for (k, p) in pkts.iter_mut().enumerate().skip(first) {
                let Slot::OpenAh { job } = self.slots[k] else {
                    continue;
                };
                if job.sa != sa_idx {
                    continue;
                }
                seen += 1;
                let staged = if seen > allowed {
                    Err(DropReason::LifetimeExpired)
                } else {
                    match w.infer(job.seq_low, sa.esn) {
                        Some(seq) if w.check(seq) => {
                            ah::stage_verify(p, &job, key, seq, sa.esn, &mut self.ah_text).map(
                                |icv| AhPending {
                                    k,
                                    seq,
                                    icv,
                                    out: None,
                                },
                            )
                        }
                        _ => Err(DropReason::Replay),
                    }
                };
                match staged {
                    Ok(pending) => self.ah_pending.push(pending),
                    Err(r) => self.slots[k] = self.drop_classified(t, p, r, Some(sa_idx)),
                }
            }
        }
        self.compute_icvs(key, pkts);
        let icv_len = key.icv_len();
        // Authenticate first, then the window: a forged packet never moves it. What the
        // window accepts is counted against the lifetime under the same lock (exact with
        // workers sharing the SA; see `accept_run`).
        let mut w = sa.state.replay.lock().unwrap_or_else(|e| e.into_inner());
        let allowed = sa.lifetime_allowance(self.ah_pending.len() as u64);
        let mut accepted = 0u64;
        for j in 0..self.ah_pending.len() {
            let AhPending { k, seq, icv, .. } = self.ah_pending[j];
            ah::restore(&mut pkts[k], &icv, &self.ah_text);
            let tag = self.ah_icvs.get(j).and_then(Icv::get);
            let verdict = if !ah::is_authentic(&self.ah_text, &icv, tag, icv_len) {
                Err(DropReason::AuthFailed)
            } else if accepted == allowed {
                Err(DropReason::LifetimeExpired)
            } else if !w.check_and_update(seq) {
                Err(DropReason::Replay)
            } else {
                accepted += 1;
                Ok(())
            };
            if let Err(r) = verdict {
                self.slots[k] = self.drop_classified(t, &mut pkts[k], r, Some(sa_idx));
            }
        }
        sa.state.counters.charge(accepted, None);
        drop(w);
        let mut bytes = 0u64;
        for j in 0..self.ah_pending.len() {
            let k = self.ah_pending[j].k;
            if let Slot::OpenAh { job } = self.slots[k] {
                let (slot, removed) = self.after_ah(t, &mut pkts[k], job);
                bytes += removed.unwrap_or(0);
                self.slots[k] = slot;
            }
        }
        // The SA's totals, added once for the burst: no atomic per packet.
        if accepted > 0 {
            sa.state.counters.add_bytes(bytes);
            sa.note_usage();
        }
    }

    /// Every pending packet's ICV, in one call to the SA's key over the prepared packets
    /// (`ah_icvs[j]` for `ah_pending[j]`, written there in place by the back-end; the
    /// slots past the pending packets are left from earlier bursts and never read).
    fn compute_icvs(&mut self, key: &AhKey, pkts: &mut [Packet]) {
        let n = self.ah_pending.len();
        // The list's allocation is kept between runs (see `recycle`): a fresh one was a
        // `malloc` and a `free` for every SA of every burst.
        let mut ops: Vec<AhOp<'_>> = recycle(std::mem::take(&mut self.ah_ops));
        ops.reserve(n);
        if self.ah_icvs.len() < n {
            self.ah_icvs.resize(n, Icv::NONE);
        }
        // Each slot starts unset, so that an op a back-end skipped is never taken for
        // authentic with an earlier packet's ICV. Only the length is reset: rewriting the
        // whole slots each burst (resize) cost 33 instructions per 64-byte packet.
        let icvs = &mut self.ah_icvs[..n];
        icvs.iter_mut().for_each(Icv::clear);
        // The pending packets are in burst order.
        let mut pending = self.ah_pending.iter().zip(icvs.iter_mut()).peekable();
        for (k, p) in pkts.iter_mut().enumerate() {
            let Some((next, icv)) = pending.next_if(|(n, _)| n.k == k) else {
                continue;
            };
            ops.push(AhOp {
                text: p.data_mut(),
                iv: next.icv.iv,
                icv,
            });
        }
        key.tag_burst(&mut ops);
        self.ah_ops = recycle(ops);
    }

    /// An authentic AH packet, its window updated: AH removed, then what it carried is ESP
    /// (a bundle: on to the ESP stage) or the protected packet (checked against the
    /// inbound policy). Also returns, when AH came off, the length of what it protected
    /// (for the SA's totals).
    fn after_ah(&mut self, t: &Tables, p: &mut Packet, job: ah::AhJob) -> (Slot, Option<u64>) {
        let sa_idx = job.sa;
        let info = match ah::remove(p, &job, &t.sas[sa_idx as usize]) {
            Ok(info) => info,
            Err(r) => return (self.drop_classified(t, p, r, Some(sa_idx)), None),
        };
        let slot = self.after_ah_removed(t, p, sa_idx, &info);
        (slot, Some(info.total_len as u64))
    }

    /// Where a packet goes once AH is off: ESP inside goes on to the ESP stage, anything
    /// else must match the inbound policy of the AH SA.
    fn after_ah_removed(&mut self, t: &Tables, p: &mut Packet, sa_idx: u32, info: &IpInfo) -> Slot {
        match esp_in::classify(p, info, t, &mut self.spi_cache) {
            Ok(Classified::Esp(mut job)) => {
                job.via_ah = Some(sa_idx);
                Slot::Open { job, seq: 0 }
            }
            Ok(Classified::Plain) => match self.spd_lookup(t, Direction::In, info.key) {
                Some(SpdAction::Protect(i)) if i == sa_idx => {
                    self.counters.decrypted += 1;
                    Slot::Route {
                        v4: info.key.v4,
                        dst: info.key.dst,
                    }
                }
                _ => self.drop_classified(t, p, DropReason::PolicyMismatch, Some(sa_idx)),
            },
            Err((r, sa)) => self.drop_classified(t, p, r, sa),
        }
    }
}
