//! AES-CCM for ESP (RFC 4309; the mode is RFC 3610 and NIST SP 800-38C) over a burst of
//! packets, for what intel-ipsec-mb's own CCM does not serve: every CCM suite in the
//! portable build, and AES-192-CCM's short texts (longer ones go through the library's
//! AES-192 CBC and counter mode, `crate::ipsec_mb_ccm`, which shares [`CcmFormat`]).
//!
//! CCM's CBC-MAC is a chain: each block's encryption waits for the one before. One packet
//! at a time, the AES unit idles for most of every round's latency (about 1 µs for a
//! 1024-byte packet with AES-NI, 8 Gbit/s). Here the chains of up to [`LANES`] packets
//! advance together: each step encrypts one block of every unfinished packet in one call,
//! which the `aes` crate's AES-NI back-end pipelines. The counter-mode half is parallel
//! within a packet already and runs a packet at a time.
//!
//! CCM's MAC covers the plaintext, so opening decrypts before it can verify; the tag is
//! compared in constant time and the text of a packet that fails is zeroed before the
//! burst returns, so unauthenticated plaintext never leaves.

use aes::cipher::{BlockEncrypt, KeyInit};
use aes::Block;

use crate::ct::ct_eq;
use crate::esp::{aead_aad, EspKey, EspOp, ESP_HEADER_LEN};
use crate::suite::Suite;
use crate::CryptoError;

/// How many packets' CBC-MAC chains advance together: the `aes` crate's AES-NI back-end
/// encrypts eight blocks per pass.
const LANES: usize = 8;

/// Counter blocks encrypted per call in the counter-mode half.
const CTR_CHUNK: usize = 8;

/// RFC 4309 §4: an 11-byte nonce (3-byte salt || 8-byte IV) leaves a 4-byte length and
/// counter field (L = 4).
const NONCE_LEN: usize = 11;
const L_FIELD: u8 = 4;

/// The ESP IV (RFC 4309 §3.1: 8 bytes, here the sequence number).
pub(crate) const IV_LEN: usize = 8;

/// The expanded AES key of one of the three sizes (zeroized on drop by the `aes` crate).
pub(crate) enum AesKey {
    A128(aes::Aes128),
    A192(aes::Aes192),
    A256(aes::Aes256),
}

impl AesKey {
    pub(crate) fn new(key: &[u8]) -> Result<AesKey, CryptoError> {
        let bad = || CryptoError::BadKeyLength {
            expected: 16,
            got: key.len(),
        };
        Ok(match key.len() {
            16 => AesKey::A128(aes::Aes128::new_from_slice(key).map_err(|_| bad())?),
            24 => AesKey::A192(aes::Aes192::new_from_slice(key).map_err(|_| bad())?),
            32 => AesKey::A256(aes::Aes256::new_from_slice(key).map_err(|_| bad())?),
            _ => return Err(bad()),
        })
    }

    /// Encrypts independent blocks (ECB), several in flight at once.
    pub(crate) fn encrypt(&self, blocks: &mut [Block]) {
        match self {
            AesKey::A128(k) => k.encrypt_blocks(blocks),
            AesKey::A192(k) => k.encrypt_blocks(blocks),
            AesKey::A256(k) => k.encrypt_blocks(blocks),
        }
    }
}

/// One SA's AES-CCM transform.
pub(crate) struct CcmLanes {
    aes: AesKey,
    format: CcmFormat,
    suite: Suite,
}

/// RFC 4309's use of CCM: what every CCM implementation here formats the same way.
#[derive(Clone, Copy)]
pub(crate) struct CcmFormat {
    pub(crate) salt: [u8; 3],
    pub(crate) icv_len: usize,
    pub(crate) esn: bool,
}

/// What a packet's CCM needs besides its bytes: the nonce, the encoded AAD block and the
/// index of its op in the burst.
#[derive(Clone, Copy, Default)]
pub(crate) struct LaneHead {
    pub(crate) op: usize,
    pub(crate) text_len: usize,
    pub(crate) nonce: [u8; NONCE_LEN],
    pub(crate) aad_block: [u8; 16],
}

impl CcmFormat {
    /// The format for `icv_len`, which must be one of CCM's ESP lengths.
    pub(crate) fn new(salt: [u8; 3], icv_len: usize, esn: bool) -> Result<CcmFormat, CryptoError> {
        if !matches!(icv_len, 8 | 12 | 16) {
            return Err(CryptoError::BadIcvLength(icv_len));
        }
        Ok(CcmFormat { salt, icv_len, esn })
    }

    /// The smallest ESP packet this key can seal or open: header, IV and ICV.
    pub(crate) fn min_len(&self) -> usize {
        ESP_HEADER_LEN + IV_LEN + self.icv_len
    }

    /// The ESP packet's text (between IV and ICV).
    pub(crate) fn text_range(&self, esp_len: usize) -> std::ops::Range<usize> {
        ESP_HEADER_LEN + IV_LEN..esp_len - self.icv_len
    }

    /// The head of op `op`, whose IV is in place and which is at least
    /// [`CcmFormat::min_len`] long.
    pub(crate) fn head(&self, op: usize, esp: &[u8], seq: u64) -> LaneHead {
        let mut nonce = [0u8; NONCE_LEN];
        nonce[..3].copy_from_slice(&self.salt);
        nonce[3..].copy_from_slice(&esp[ESP_HEADER_LEN..ESP_HEADER_LEN + IV_LEN]);
        // SP 800-38C A.2.2: the AAD's length in two bytes (it is 8 or 12), the AAD, and
        // zeros to the block: one block for ESP.
        let (aad, aad_len) = aead_aad(esp, seq, self.esn);
        let mut aad_block = [0u8; 16];
        aad_block[1] = aad_len as u8;
        aad_block[2..2 + aad_len].copy_from_slice(&aad[..aad_len]);
        LaneHead {
            op,
            text_len: esp.len() - self.min_len(),
            nonce,
            aad_block,
        }
    }

    /// SP 800-38C A.2.1: the first block of the CBC-MAC. Flags: AAD present, the tag
    /// length as (M - 2) / 2, the length field as L - 1.
    pub(crate) fn b0(&self, nonce: &[u8; NONCE_LEN], text_len: usize) -> Block {
        let mut b = Block::default();
        b[0] = 0x40 | ((((self.icv_len - 2) / 2) as u8) << 3) | (L_FIELD - 1);
        b[1..12].copy_from_slice(nonce);
        // A packet's text is far below 2^32 bytes.
        b[12..].copy_from_slice(&(text_len as u32).to_be_bytes());
        b
    }

    /// SP 800-38C A.3: counter block `i` (`S_0` masks the tag, `S_1` on encrypt the text).
    pub(crate) fn counter(&self, nonce: &[u8; NONCE_LEN], i: u32) -> Block {
        let mut b = Block::default();
        b[0] = L_FIELD - 1;
        b[1..12].copy_from_slice(nonce);
        b[12..].copy_from_slice(&i.to_be_bytes());
        b
    }
}

impl CcmLanes {
    /// `key` is the AES key alone; `salt` the 3 bytes that follow it in the keying
    /// material (RFC 4309 §4).
    pub(crate) fn new(
        key: &[u8],
        salt: [u8; 3],
        icv_len: usize,
        suite: Suite,
        esn: bool,
    ) -> Result<CcmLanes, CryptoError> {
        Ok(CcmLanes {
            format: CcmFormat::new(salt, icv_len, esn)?,
            aes: AesKey::new(key)?,
            suite,
        })
    }

    /// The CBC-MACs (`T` before encryption) of up to [`LANES`] texts, their chains
    /// advanced one block per step together. The lanes come longest text first, so the
    /// lanes still running at any step are a prefix and are encrypted in place.
    fn cbc_macs(&self, heads: &[LaneHead], texts: &[&[u8]], macs: &mut [Block; LANES]) {
        let n = heads.len();
        for j in 0..n {
            macs[j] = self.format.b0(&heads[j].nonce, texts[j].len());
        }
        self.aes.encrypt(&mut macs[..n]);
        for j in 0..n {
            xor_block(&mut macs[j], &heads[j].aad_block);
        }
        self.aes.encrypt(&mut macs[..n]);
        let mut running = n;
        let mut off = 0;
        loop {
            while running > 0 && texts[running - 1].len() <= off {
                running -= 1;
            }
            if running == 0 {
                break;
            }
            for (mac, text) in macs[..running].iter_mut().zip(texts) {
                match text.get(off..off + 16) {
                    Some(whole) => xor_block(mac, whole.try_into().unwrap_or(&[0; 16])),
                    // The last block, zero-padded.
                    None => {
                        let tail = &text[off..];
                        let mut padded = [0u8; 16];
                        padded[..tail.len()].copy_from_slice(tail);
                        xor_block(mac, &padded);
                    }
                }
            }
            self.aes.encrypt(&mut macs[..running]);
            off += 16;
        }
    }

    /// Counter mode over `text` from counter 1 (SP 800-38C A.3); returns `S_0`, the
    /// keystream block that masks the tag.
    fn ctr(&self, nonce: &[u8; NONCE_LEN], text: &mut [u8]) -> Block {
        let first = self.format.counter(nonce, 0);
        let mut ks = [first; CTR_CHUNK];
        let total = text.len().div_ceil(16) + 1;
        let mut s0 = Block::default();
        let mut counter = 0usize;
        let mut chunks = text.chunks_mut(16);
        while counter < total {
            let m = (total - counter).min(CTR_CHUNK);
            for (k, block) in ks[..m].iter_mut().enumerate() {
                block[..12].copy_from_slice(&first[..12]);
                block[12..].copy_from_slice(&((counter + k) as u32).to_be_bytes());
            }
            self.aes.encrypt(&mut ks[..m]);
            let mut skip = 0;
            if counter == 0 {
                s0 = ks[0];
                skip = 1;
            }
            for key_block in &ks[skip..m] {
                let Some(chunk) = chunks.next() else {
                    break;
                };
                if let Ok(c) = <&mut [u8; 16]>::try_from(&mut *chunk) {
                    let x = u128::from_ne_bytes(*c) ^ u128::from_ne_bytes((*key_block).into());
                    *c = x.to_ne_bytes();
                } else {
                    for (c, k) in chunk.iter_mut().zip(key_block.iter()) {
                        *c ^= k;
                    }
                }
            }
            counter += m;
        }
        s0
    }

    /// Seals up to [`LANES`] ops whose IVs are written (`heads` is reordered).
    fn seal_lanes(&self, ops: &mut [EspOp<'_>], heads: &mut [LaneHead]) {
        heads.sort_unstable_by_key(|h| std::cmp::Reverse(h.text_len));
        let mut macs = [Block::default(); LANES];
        {
            let mut texts: [&[u8]; LANES] = [&[]; LANES];
            for (t, h) in texts.iter_mut().zip(heads.iter()) {
                let esp = &*ops[h.op].esp;
                *t = &esp[self.format.text_range(esp.len())];
            }
            self.cbc_macs(heads, &texts[..heads.len()], &mut macs);
        }
        for (h, mac) in heads.iter().zip(&macs) {
            let esp = &mut *ops[h.op].esp;
            let range = self.format.text_range(esp.len());
            let icv_start = range.end;
            let s0 = self.ctr(&h.nonce, &mut esp[range]);
            for ((out, t), s) in esp[icv_start..].iter_mut().zip(mac.iter()).zip(s0.iter()) {
                *out = t ^ s;
            }
        }
    }

    /// Opens up to [`LANES`] ops: decrypts, computes the MACs of the plaintexts, compares
    /// in constant time and zeroes what fails (`heads` is reordered).
    fn open_lanes(&self, ops: &mut [EspOp<'_>], heads: &mut [LaneHead], ok: &mut [bool]) {
        heads.sort_unstable_by_key(|h| std::cmp::Reverse(h.text_len));
        let mut s0s = [Block::default(); LANES];
        for (h, s0) in heads.iter().zip(s0s.iter_mut()) {
            let esp = &mut *ops[h.op].esp;
            let range = self.format.text_range(esp.len());
            *s0 = self.ctr(&h.nonce, &mut esp[range]);
        }
        let mut macs = [Block::default(); LANES];
        {
            let mut texts: [&[u8]; LANES] = [&[]; LANES];
            for (t, h) in texts.iter_mut().zip(heads.iter()) {
                let esp = &*ops[h.op].esp;
                *t = &esp[self.format.text_range(esp.len())];
            }
            self.cbc_macs(heads, &texts[..heads.len()], &mut macs);
        }
        for ((h, mac), s0) in heads.iter().zip(&macs).zip(&s0s) {
            let esp = &mut *ops[h.op].esp;
            let icv_start = esp.len() - self.format.icv_len;
            let mut tag = [0u8; 16];
            for ((t, m), s) in tag.iter_mut().zip(mac.iter()).zip(s0.iter()) {
                *t = m ^ s;
            }
            let good = ct_eq(&tag[..self.format.icv_len], &esp[icv_start..]);
            ok[h.op] = good;
            if !good {
                esp[ESP_HEADER_LEN + IV_LEN..].fill(0);
            }
        }
    }
}

/// `block ^= bytes`, as one 128-bit word.
pub(crate) fn xor_block(block: &mut Block, bytes: &[u8; 16]) {
    let x = u128::from_ne_bytes((*block).into()) ^ u128::from_ne_bytes(*bytes);
    *block = x.to_ne_bytes().into();
}

impl CcmLanes {
    /// The AES key, for the single blocks of another CCM built on it.
    #[cfg(espgw_ipsec_mb)]
    pub(crate) fn aes(&self) -> &AesKey {
        &self.aes
    }

    #[cfg(espgw_ipsec_mb)]
    pub(crate) fn format(&self) -> &CcmFormat {
        &self.format
    }

    /// Seals the ops whose text is shorter than `below` bytes (ops too short for an ESP
    /// packet are left alone, as are longer texts: another implementation's).
    pub(crate) fn seal_below(&self, ops: &mut [EspOp<'_>], below: usize) {
        let min = self.format.min_len();
        let mut heads = [LaneHead::default(); LANES];
        let mut n = 0;
        for i in 0..ops.len() {
            let op = &mut ops[i];
            if op.esp.len() < min || op.esp.len() - min >= below {
                continue;
            }
            // RFC 4309 §3.1: the IV must never repeat under a key; the sequence number
            // does not.
            op.esp[ESP_HEADER_LEN..ESP_HEADER_LEN + IV_LEN].copy_from_slice(&op.seq.to_be_bytes());
            heads[n] = self.format.head(i, op.esp, op.seq);
            n += 1;
            if n == LANES {
                self.seal_lanes(ops, &mut heads);
                n = 0;
            }
        }
        self.seal_lanes(ops, &mut heads[..n]);
    }

    /// Opens the ops whose text is shorter than `below` bytes and those too short for an
    /// ESP packet (not authentic, zeroed); longer texts are left alone, `ok` included.
    pub(crate) fn open_below(&self, ops: &mut [EspOp<'_>], ok: &mut [bool], below: usize) {
        let min = self.format.min_len();
        let mut heads = [LaneHead::default(); LANES];
        let mut n = 0;
        let count = ops.len().min(ok.len());
        for i in 0..count {
            let op = &mut ops[i];
            if op.esp.len() < min {
                ok[i] = false;
                let text_start = (ESP_HEADER_LEN + IV_LEN).min(op.esp.len());
                op.esp[text_start..].fill(0);
                continue;
            }
            if op.esp.len() - min >= below {
                continue;
            }
            ok[i] = false;
            heads[n] = self.format.head(i, op.esp, op.seq);
            n += 1;
            if n == LANES {
                self.open_lanes(ops, &mut heads, ok);
                n = 0;
            }
        }
        self.open_lanes(ops, &mut heads[..n], ok);
    }
}

impl EspKey for CcmLanes {
    fn suite(&self) -> Suite {
        self.suite
    }

    fn seal_burst(&self, ops: &mut [EspOp<'_>]) {
        self.seal_below(ops, usize::MAX);
    }

    fn seal_burst_ivs(&self, ops: &mut [EspOp<'_>], _: &[[u8; 16]]) {
        self.seal_burst(ops);
    }

    fn open_burst(&self, ops: &mut [EspOp<'_>], ok: &mut [bool]) {
        self.open_below(ops, ok, usize::MAX);
    }
}
