//! AES-192-CCM (RFC 4309) through intel-ipsec-mb, which (1.3) has CCM for 128- and 256-bit
//! keys only but AES-192 in CBC and counter mode, each over a burst in VAES lanes. CCM is
//! made of exactly those two: its tag is the last block of a CBC encryption (IV zero) of
//! B0, the AAD block and the zero-padded text, masked with counter block 0, and its text is
//! encrypted in counter mode from counter block 1. So, for a burst of one SA's packets:
//!
//! - the few single blocks a packet needs (B0 and the AAD block into the chain, a partial
//!   last block, counter block 0) go through the `aes` crate, the burst's blocks in one
//!   call each (AES-NI pipelines them);
//! - the text's whole blocks go through the library's CBC, one job per packet from the
//!   chain after the AAD block, on a copy (CBC writes ciphertext, of which CCM keeps only
//!   the last block);
//! - the text itself through the library's counter mode, one job per packet.
//!
//! Texts under [`LIBRARY_FROM`] bytes go to the portable CCM's lanes instead
//! ([`CcmLanes`]), where two library jobs would cost more than they save.
//!
//! The format (nonce, B0, AAD block, counter blocks) is [`crate::aes_ccm`]'s, shared with
//! the portable CCM; both are tested against RustCrypto's `ccm` and pyca/cryptography.
//! Opening decrypts first (CCM's MAC covers the plaintext), compares the tag in constant
//! time and zeroes the text of a packet that fails. A job the library does not complete
//! fails its packet alone: sealed, its text and ICV are wiped (no plaintext leaves);
//! opened, it is not authentic.

use std::cell::RefCell;

use aes::Block;

use crate::aes_ccm::{xor_block, CcmLanes, LaneHead, IV_LEN};
use crate::ct::ct_eq;
use crate::esp::{EspKey, EspOp, ESP_HEADER_LEN};
use crate::ipsec_mb_esp::{AesCipherOnly, CipherJobs};
use crate::suite::Suite;
use crate::CryptoError;

/// Texts shorter than this go to the portable CCM's lanes instead: for them the
/// library's two jobs per packet cost more than they save. Measured (docs/performance.md,
/// "AES-CCM without the library's CCM"): the lanes were ahead at 200-byte frames (a text
/// of about 130 bytes, 1.05-1.08x), the library from 300-byte frames (about 230 bytes,
/// 1.04-1.06x) and by 1.4x at 600.
const LIBRARY_FROM: usize = 192;

/// One SA's AES-192-CCM.
pub(crate) struct MbCcm192 {
    /// Short texts, and the format and single blocks of every packet.
    lanes: CcmLanes,
    suite: Suite,
    /// The whole blocks of the MAC, and the text.
    cbc: AesCipherOnly,
    ctr: AesCipherOnly,
}

/// Per-thread scratch, reused by every burst (no allocation once grown).
#[derive(Default)]
struct Scratch {
    heads: Vec<LaneHead>,
    /// Per head: the CBC-MAC chain, then the tag before masking.
    chains: Vec<Block>,
    /// Per head: counter block 0's encryption.
    s0: Vec<Block>,
    /// Per head: whether the library completed its jobs.
    ok: Vec<bool>,
    /// The whole blocks' copies, one region per head that has any.
    text: Vec<u8>,
    /// Single blocks on their way through `aes`, and the head each belongs to.
    blocks: Vec<Block>,
    owners: Vec<usize>,
}

thread_local! {
    static SCRATCH: RefCell<Scratch> = RefCell::new(Scratch::default());
}

impl MbCcm192 {
    /// `material` is the AES-192 key then the 3-byte salt (RFC 4309 §4).
    pub(crate) fn new(
        material: &[u8],
        icv_len: usize,
        suite: Suite,
        esn: bool,
    ) -> Result<MbCcm192, CryptoError> {
        if material.len() != 27 {
            return Err(CryptoError::BadKeyLength {
                expected: 27,
                got: material.len(),
            });
        }
        let (key, salt) = material.split_at(24);
        Ok(MbCcm192 {
            lanes: CcmLanes::new(key, [salt[0], salt[1], salt[2]], icv_len, suite, esn)?,
            suite,
            cbc: AesCipherOnly::cbc(key)?,
            ctr: AesCipherOnly::ctr(key)?,
        })
    }

    /// The heads of the ops whose texts are the library's (IVs in place).
    fn heads(&self, ops: &[EspOp<'_>], s: &mut Scratch) {
        let format = self.lanes.format();
        s.heads.clear();
        for (i, op) in ops.iter().enumerate() {
            if op.esp.len() >= format.min_len() + LIBRARY_FROM {
                s.heads.push(format.head(i, op.esp, op.seq));
            }
        }
        s.ok.clear();
        s.ok.resize(s.heads.len(), true);
    }

    /// Every head's text through counter mode from counter block 1, in place, and
    /// counter block 0's encryption into `s.s0`.
    fn ctr(&self, ops: &mut [EspOp<'_>], s: &mut Scratch) {
        s.s0.clear();
        s.s0.extend(
            s.heads
                .iter()
                .map(|h| self.lanes.format().counter(&h.nonce, 0)),
        );
        self.lanes.aes().encrypt(&mut s.s0);
        let mut jobs = CipherJobs::new();
        s.owners.clear();
        let mut heads = s.heads.iter().enumerate().peekable();
        for (i, op) in ops.iter_mut().enumerate() {
            let Some((j, h)) = heads.next_if(|(_, h)| h.op == i) else {
                continue;
            };
            if h.text_len > 0 {
                let range = self.lanes.format().text_range(op.esp.len());
                jobs.push(
                    &mut op.esp[range],
                    &self.lanes.format().counter(&h.nonce, 1).into(),
                );
                s.owners.push(j);
            }
        }
        jobs.run(&self.ctr);
        for (k, &j) in s.owners.iter().enumerate() {
            s.ok[j] &= jobs.completed(k);
        }
    }

    /// Every head's CBC-MAC over its text (as it is now: the plaintext) into `s.chains`.
    fn macs(&self, ops: &[EspOp<'_>], s: &mut Scratch) {
        // B0 and the AAD block.
        s.chains.clear();
        s.chains.extend(
            s.heads
                .iter()
                .map(|h| self.lanes.format().b0(&h.nonce, h.text_len)),
        );
        self.lanes.aes().encrypt(&mut s.chains);
        for (c, h) in s.chains.iter_mut().zip(&s.heads) {
            xor_block(c, &h.aad_block);
        }
        self.lanes.aes().encrypt(&mut s.chains);
        // The whole blocks, copied, through the library's CBC from the chain.
        s.text.clear();
        for h in &s.heads {
            let whole = h.text_len / 16 * 16;
            let start = ESP_HEADER_LEN + IV_LEN;
            s.text
                .extend_from_slice(&ops[h.op].esp[start..start + whole]);
        }
        {
            let mut jobs = CipherJobs::new();
            s.owners.clear();
            let mut rest = &mut s.text[..];
            for (j, h) in s.heads.iter().enumerate() {
                let whole = h.text_len / 16 * 16;
                let (region, after) = rest.split_at_mut(whole);
                rest = after;
                if whole > 0 {
                    jobs.push(region, &s.chains[j].into());
                    s.owners.push(j);
                }
            }
            jobs.run(&self.cbc);
            for (k, &j) in s.owners.iter().enumerate() {
                s.ok[j] &= jobs.completed(k);
            }
        }
        let mut end = 0;
        for (j, h) in s.heads.iter().enumerate() {
            end += h.text_len / 16 * 16;
            if h.text_len >= 16 {
                s.chains[j].copy_from_slice(&s.text[end - 16..end]);
            }
        }
        if s.ok.contains(&false) {
            // A job the library did not complete may have left a text as it was copied
            // (plaintext): it does not wait in the scratch for the next burst.
            s.text.fill(0);
        }
        // A partial last block, zero-padded.
        s.blocks.clear();
        s.owners.clear();
        for (j, h) in s.heads.iter().enumerate() {
            let whole = h.text_len / 16 * 16;
            if whole < h.text_len {
                let start = ESP_HEADER_LEN + IV_LEN + whole;
                let tail = &ops[h.op].esp[start..start + h.text_len - whole];
                let mut padded = [0u8; 16];
                padded[..tail.len()].copy_from_slice(tail);
                let mut b = s.chains[j];
                xor_block(&mut b, &padded);
                s.blocks.push(b);
                s.owners.push(j);
            }
        }
        self.lanes.aes().encrypt(&mut s.blocks);
        for (b, &j) in s.blocks.iter().zip(&s.owners) {
            s.chains[j] = *b;
        }
    }
}

impl EspKey for MbCcm192 {
    fn suite(&self) -> Suite {
        self.suite
    }

    fn seal_burst(&self, ops: &mut [EspOp<'_>]) {
        self.lanes.seal_below(ops, LIBRARY_FROM);
        let min = self.lanes.format().min_len() + LIBRARY_FROM;
        for op in ops.iter_mut().filter(|op| op.esp.len() >= min) {
            // RFC 4309 §3.1: the IV must never repeat under a key; the sequence number
            // does not.
            op.esp[ESP_HEADER_LEN..ESP_HEADER_LEN + IV_LEN].copy_from_slice(&op.seq.to_be_bytes());
        }
        SCRATCH.with(|cell| {
            let s = &mut *cell.borrow_mut();
            self.heads(ops, s);
            if s.heads.is_empty() {
                return;
            }
            self.macs(ops, s);
            self.ctr(ops, s);
            let icv_len = self.lanes.format().icv_len;
            for (j, h) in s.heads.iter().enumerate() {
                let esp = &mut *ops[h.op].esp;
                if !s.ok[j] {
                    // A job the library did not complete: nothing of the text leaves.
                    esp[ESP_HEADER_LEN + IV_LEN..].fill(0);
                    continue;
                }
                let icv_start = esp.len() - icv_len;
                for ((out, t), m) in esp[icv_start..]
                    .iter_mut()
                    .zip(s.chains[j].iter())
                    .zip(s.s0[j].iter())
                {
                    *out = t ^ m;
                }
            }
        });
    }

    fn seal_burst_ivs(&self, ops: &mut [EspOp<'_>], _: &[[u8; 16]]) {
        self.seal_burst(ops);
    }

    fn open_burst(&self, ops: &mut [EspOp<'_>], ok: &mut [bool]) {
        let count = ops.len().min(ok.len());
        let ops = &mut ops[..count];
        self.lanes.open_below(ops, ok, LIBRARY_FROM);
        SCRATCH.with(|cell| {
            let s = &mut *cell.borrow_mut();
            self.heads(ops, s);
            if s.heads.is_empty() {
                return;
            }
            self.ctr(ops, s);
            self.macs(ops, s);
            let icv_len = self.lanes.format().icv_len;
            for (j, h) in s.heads.iter().enumerate() {
                let esp = &mut *ops[h.op].esp;
                let icv_start = esp.len() - icv_len;
                let mut tag = [0u8; 16];
                for ((t, m), k) in tag.iter_mut().zip(s.chains[j].iter()).zip(s.s0[j].iter()) {
                    *t = m ^ k;
                }
                let good = s.ok[j] && ct_eq(&tag[..icv_len], &esp[icv_start..]);
                ok[h.op] = good;
                if !good {
                    esp[ESP_HEADER_LEN + IV_LEN..].fill(0);
                }
            }
        });
    }
}
