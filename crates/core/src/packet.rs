//! Packet buffers with headroom (for outer headers) and tailroom (for the ESP trailer and
//! ICV), and a pool that recycles them so the per-packet path never allocates.

use crate::counters::DropReason;

/// Bytes of each buffer.
pub const BUF_SIZE: usize = 2304;
/// Free bytes kept in front of a received frame: outer IPv6 (40) + UDP (8) + ESP (16) +
/// Ethernet (14) fit with room to spare.
pub const HEADROOM: usize = 128;
/// The largest frame a buffer accepts on receive; the rest is tailroom for the trailer.
pub const MAX_FRAME: usize = BUF_SIZE - HEADROOM - 64;

/// What the pipeline decided for a packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Not yet decided.
    Pending,
    /// Transmit on this port.
    Forward(u16),
    /// Dropped, for this reason.
    Drop(DropReason),
}

/// One packet: `buf[start..end]` is the frame.
pub struct Packet {
    buf: Box<[u8]>,
    start: usize,
    end: usize,
    /// Port it arrived on.
    pub in_port: u16,
    /// What the pipeline decided.
    pub verdict: Verdict,
    /// Capture timestamp (pcap) or generator timestamp, carried through untouched.
    pub timestamp_ns: u64,
}

impl Default for Packet {
    fn default() -> Self {
        Self::new()
    }
}

impl Packet {
    /// An empty packet with a fresh buffer.
    pub fn new() -> Self {
        Packet {
            buf: vec![0u8; BUF_SIZE].into_boxed_slice(),
            start: HEADROOM,
            end: HEADROOM,
            in_port: 0,
            verdict: Verdict::Pending,
            timestamp_ns: 0,
        }
    }

    /// Loads a received frame at the standard headroom. Fails if the frame is too large.
    pub fn load(&mut self, frame: &[u8]) -> Result<(), DropReason> {
        if frame.len() > MAX_FRAME {
            return Err(DropReason::TooBig);
        }
        self.start = HEADROOM;
        self.end = HEADROOM + frame.len();
        self.buf[self.start..self.end].copy_from_slice(frame);
        self.verdict = Verdict::Pending;
        Ok(())
    }

    /// Loads a frame given in two pieces (a synthetic header and a captured body).
    pub fn load_parts(&mut self, head: &[u8], body: &[u8]) -> Result<(), DropReason> {
        let len = head.len() + body.len();
        if len > MAX_FRAME {
            return Err(DropReason::TooBig);
        }
        self.start = HEADROOM;
        self.end = HEADROOM + len;
        self.buf[HEADROOM..HEADROOM + head.len()].copy_from_slice(head);
        self.buf[HEADROOM + head.len()..self.end].copy_from_slice(body);
        self.verdict = Verdict::Pending;
        Ok(())
    }

    /// The frame.
    #[inline]
    pub fn data(&self) -> &[u8] {
        &self.buf[self.start..self.end]
    }
    /// The frame, writable.
    #[inline]
    pub fn data_mut(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..self.end]
    }
    /// Length of the frame.
    #[inline]
    pub fn len(&self) -> usize {
        self.end - self.start
    }
    /// Whether the frame is empty.
    pub fn is_empty(&self) -> bool {
        self.end == self.start
    }
    /// Bytes free in front of the frame (for headers to prepend).
    pub fn headroom(&self) -> usize {
        self.start
    }
    /// Bytes free after the frame (for trailers to append).
    pub fn tailroom(&self) -> usize {
        self.buf.len() - self.end
    }

    /// Grows the front by `n` bytes and returns the packet; `None` if no headroom is left.
    pub fn push_front(&mut self, n: usize) -> Option<&mut [u8]> {
        let s = self.start.checked_sub(n)?;
        self.start = s;
        Some(&mut self.buf[self.start..self.end])
    }
    /// Drops `n` bytes from the front.
    pub fn pull_front(&mut self, n: usize) -> bool {
        if n > self.len() {
            return false;
        }
        self.start += n;
        true
    }
    /// Grows the tail by `n` bytes; `None` if no tailroom is left.
    pub fn push_back(&mut self, n: usize) -> Option<&mut [u8]> {
        if n > self.tailroom() {
            return None;
        }
        self.end += n;
        Some(&mut self.buf[self.start..self.end])
    }
    /// Keeps only the first `len` bytes.
    pub fn truncate(&mut self, len: usize) {
        if len < self.len() {
            self.end = self.start + len;
        }
    }
    /// Moves the first `hdr_len` bytes `shift` bytes towards the front (growing the packet
    /// by `shift`), opening a gap of `shift` bytes right after them. Used to insert ESP
    /// after an IP header in transport mode.
    pub fn open_gap(&mut self, hdr_len: usize, shift: usize) -> bool {
        if hdr_len > self.len() || shift > self.start {
            return false;
        }
        let old = self.start;
        self.start -= shift;
        self.buf.copy_within(old..old + hdr_len, self.start);
        true
    }
    /// The reverse of [`Packet::open_gap`]: removes `shift` bytes that follow the first
    /// `hdr_len` bytes.
    pub fn close_gap(&mut self, hdr_len: usize, shift: usize) -> bool {
        if hdr_len + shift > self.len() {
            return false;
        }
        let s = self.start;
        self.buf.copy_within(s..s + hdr_len, s + shift);
        self.start += shift;
        true
    }
}

/// A free list of buffers.
pub struct PacketPool {
    free: Vec<Packet>,
}

impl PacketPool {
    /// A pool of `n` fresh buffers.
    pub fn new(n: usize) -> Self {
        PacketPool {
            free: (0..n).map(|_| Packet::new()).collect(),
        }
    }
    /// A buffer from the pool, or a new one if it is empty (the pool then grows to the
    /// high-water mark and allocation stops).
    pub fn get(&mut self) -> Packet {
        let mut p = self.free.pop().unwrap_or_default();
        // A recycled buffer must not carry its last verdict to a new packet.
        p.verdict = Verdict::Pending;
        p
    }
    /// Gives a buffer back.
    pub fn put(&mut self, p: Packet) {
        self.free.push(p);
    }
    /// Buffers in the pool now.
    pub fn available(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn push_pull_and_gaps() {
        let mut p = Packet::new();
        p.load(&[1, 2, 3, 4, 5, 6]).unwrap();
        p.push_front(2).unwrap()[..2].copy_from_slice(&[9, 9]);
        assert_eq!(p.data(), &[9, 9, 1, 2, 3, 4, 5, 6]);
        assert!(p.pull_front(2));
        assert!(p.open_gap(2, 3));
        assert_eq!(&p.data()[..2], &[1, 2]);
        assert_eq!(&p.data()[5..], &[3, 4, 5, 6]);
        assert!(p.close_gap(2, 3));
        assert_eq!(p.data(), &[1, 2, 3, 4, 5, 6]);
        assert!(p.push_back(p.tailroom() + 1).is_none());
        assert!(p.push_front(HEADROOM + 1).is_none());
        assert!(!p.pull_front(7));
        assert_eq!(p.load(&vec![0; MAX_FRAME + 1]), Err(DropReason::TooBig));
    }
}
