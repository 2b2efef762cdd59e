//! IPv4 headers (RFC 791), options included.

use std::net::Ipv4Addr;

use crate::{be16, checksum, put16, Result, WireError};

/// The header without options.
pub const MIN_HEADER_LEN: usize = 20;

mod field {
    pub const TOS: usize = 1;
    pub const TOTAL_LEN: usize = 2;
    pub const IDENT: usize = 4;
    pub const FLAGS_FRAG: usize = 6;
    pub const TTL: usize = 8;
    pub const PROTO: usize = 9;
    pub const CHECKSUM: usize = 10;
    pub const SRC: usize = 12;
    pub const DST: usize = 16;
}

/// A checked view of an IPv4 packet. `new_checked` guarantees version 4, a header length
/// of at least 20 bytes that fits, and a total length that fits the buffer (trailing bytes,
/// such as Ethernet padding, are outside `packet()`).
#[derive(Debug, Clone, Copy)]
pub struct Ipv4Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv4Packet<T> {
    /// A view over `buf`, if it holds a version-4 header whose length fields fit the buffer.
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < MIN_HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] >> 4 != 4 {
            return Err(WireError::Malformed);
        }
        let hl = usize::from(b[0] & 0x0f) * 4;
        let total = usize::from(be16(b, field::TOTAL_LEN));
        if hl < MIN_HEADER_LEN || total < hl {
            return Err(WireError::Malformed);
        }
        if total > b.len() {
            return Err(WireError::Truncated);
        }
        Ok(Ipv4Packet { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }

    /// Header length in bytes, options included.
    pub fn header_len(&self) -> usize {
        usize::from(self.b()[0] & 0x0f) * 4
    }
    /// Type of service byte (DSCP and ECN).
    pub fn tos(&self) -> u8 {
        self.b()[field::TOS]
    }
    /// Differentiated services code point (RFC 2474).
    pub fn dscp(&self) -> u8 {
        self.tos() >> 2
    }
    /// ECN bits (RFC 3168).
    pub fn ecn(&self) -> u8 {
        self.tos() & 3
    }
    /// Total length from the header.
    pub fn total_len(&self) -> usize {
        usize::from(be16(self.b(), field::TOTAL_LEN))
    }
    /// Identification.
    pub fn ident(&self) -> u16 {
        be16(self.b(), field::IDENT)
    }
    /// The "don't fragment" flag.
    pub fn dont_fragment(&self) -> bool {
        self.b()[field::FLAGS_FRAG] & 0x40 != 0
    }
    /// The "more fragments" flag.
    pub fn more_fragments(&self) -> bool {
        self.b()[field::FLAGS_FRAG] & 0x20 != 0
    }
    /// Fragment offset in bytes.
    pub fn frag_offset(&self) -> usize {
        usize::from(be16(self.b(), field::FLAGS_FRAG) & 0x1fff) * 8
    }
    /// Whether the packet is a fragment (more fragments set or a non-zero offset).
    pub fn is_fragment(&self) -> bool {
        self.more_fragments() || self.frag_offset() != 0
    }
    /// Time to live.
    pub fn ttl(&self) -> u8 {
        self.b()[field::TTL]
    }
    /// Upper-layer protocol.
    pub fn protocol(&self) -> u8 {
        self.b()[field::PROTO]
    }
    /// The header checksum as on the wire.
    pub fn checksum_field(&self) -> u16 {
        be16(self.b(), field::CHECKSUM)
    }
    /// Source address.
    pub fn src(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[12], b[13], b[14], b[15])
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv4Addr {
        let b = self.b();
        Ipv4Addr::new(b[16], b[17], b[18], b[19])
    }
    #[inline]
    /// Whether the header checksum is correct.
    pub fn verify_checksum(&self) -> bool {
        let h = &self.b()[..self.header_len()];
        if let Ok(w) = <&[u8; MIN_HEADER_LEN]>::try_from(h) {
            return header_checksum_ok(w);
        }
        checksum::checksum(h) == 0
    }
    /// The whole packet, up to the total length.
    pub fn packet(&self) -> &[u8] {
        &self.b()[..self.total_len()]
    }
    /// What follows the header, up to the total length.
    pub fn payload(&self) -> &[u8] {
        &self.b()[self.header_len()..self.total_len()]
    }
}

/// Whether an option-free (20-byte) IPv4 header's checksum is correct: the header as five
/// 32-bit words, a third of the generic loop's instructions on the per-packet path. In
/// native byte order: the one's-complement sum of byte-swapped words is the byte-swapped
/// sum (RFC 1071 §2(B)), and the all-ones result that marks a good header reads the same
/// either way.
#[inline(always)]
pub fn header_checksum_ok(w: &[u8; MIN_HEADER_LEN]) -> bool {
    let word = |i: usize| u64::from(u32::from_ne_bytes([w[i], w[i + 1], w[i + 2], w[i + 3]]));
    let mut s = word(0) + word(4) + word(8) + word(12) + word(16);
    s = (s & 0xffff_ffff) + (s >> 32);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s = (s & 0xffff) + (s >> 16);
    s == 0xffff
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv4Packet<T> {
    fn bm(&mut self) -> &mut [u8] {
        self.buf.as_mut()
    }
    /// Sets the total length (the checksum is not updated).
    pub fn set_total_len(&mut self, len: u16) {
        put16(self.bm(), field::TOTAL_LEN, len)
    }
    /// Sets the protocol (the checksum is not updated).
    pub fn set_protocol(&mut self, p: u8) {
        self.bm()[field::PROTO] = p;
    }
    /// Sets the type of service byte (the checksum is not updated).
    pub fn set_tos(&mut self, tos: u8) {
        self.bm()[field::TOS] = tos;
    }
    /// Sets the TTL (the checksum is not updated).
    pub fn set_ttl(&mut self, ttl: u8) {
        self.bm()[field::TTL] = ttl;
    }
    /// Sets the TTL, updating the header checksum incrementally (RFC 1624): a header
    /// whose checksum was wrong stays wrong, as a router must not launder it.
    pub fn set_ttl_updating_checksum(&mut self, ttl: u8) {
        let b = self.buf.as_ref();
        let (old_ttl, protocol) = (b[field::TTL], b[field::TTL + 1]);
        let old_check = u16::from_be_bytes([b[field::CHECKSUM], b[field::CHECKSUM + 1]]);
        let old = u16::from_be_bytes([old_ttl, protocol]);
        let new = u16::from_be_bytes([ttl, protocol]);
        let c = checksum::update16(old_check, old, new);
        self.bm()[field::TTL] = ttl;
        put16(self.bm(), field::CHECKSUM, c);
    }
    /// Swaps source and destination (a reply to the sender).
    pub fn swap_addresses(&mut self) {
        let (src, dst) = (self.src().octets(), self.dst().octets());
        self.bm()[field::SRC..field::SRC + 4].copy_from_slice(&dst);
        self.bm()[field::DST..field::DST + 4].copy_from_slice(&src);
    }
    /// The payload (to the header's total length), writable.
    pub fn payload_mut(&mut self) -> &mut [u8] {
        let (hl, tl) = (self.header_len(), self.total_len());
        &mut self.bm()[hl..tl]
    }
    /// Recomputes the header checksum.
    pub fn fill_checksum(&mut self) {
        let hl = self.header_len();
        put16(self.bm(), field::CHECKSUM, 0);
        let c = checksum::checksum(&self.buf.as_ref()[..hl]);
        put16(self.bm(), field::CHECKSUM, c);
    }
}

/// Fields of a 20-byte IPv4 header (no options) to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv4Repr {
    /// Source address.
    pub src: Ipv4Addr,
    /// Destination address.
    pub dst: Ipv4Addr,
    /// Upper-layer protocol.
    pub protocol: u8,
    /// Type of service byte.
    pub tos: u8,
    /// Time to live.
    pub ttl: u8,
    /// Identification.
    pub ident: u16,
    /// The "don't fragment" flag.
    pub dont_fragment: bool,
    /// Payload length (total length minus 20).
    pub payload_len: usize,
}

impl Ipv4Repr {
    /// Writes the header, checksum included, into `out[..20]`.
    ///
    /// The checksum is summed from the field values rather than read back from `out`:
    /// reading bytes just written by narrower stores stalls store forwarding, which cost
    /// more than the rest of the header on the per-packet path.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        let total =
            u16::try_from(self.payload_len + MIN_HEADER_LEN).map_err(|_| WireError::Malformed)?;
        let h = out.get_mut(..MIN_HEADER_LEN).ok_or(WireError::Truncated)?;
        let flags: u16 = if self.dont_fragment { 0x4000 } else { 0 };
        let words = [
            0x4500 | u16::from(self.tos),
            total,
            self.ident,
            flags,
            (u16::from(self.ttl) << 8) | u16::from(self.protocol),
        ];
        let (s, d) = (u32::from(self.src), u32::from(self.dst));
        let mut sum: u32 = words.iter().map(|&w| u32::from(w)).sum();
        sum += (s >> 16) + (s & 0xffff) + (d >> 16) + (d & 0xffff);
        let c = checksum::finish(sum);
        for (i, w) in words.iter().enumerate() {
            h[i * 2..i * 2 + 2].copy_from_slice(&w.to_be_bytes());
        }
        h[field::CHECKSUM..field::CHECKSUM + 2].copy_from_slice(&c.to_be_bytes());
        h[field::SRC..field::SRC + 4].copy_from_slice(&self.src.octets());
        h[field::DST..field::DST + 4].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}

/// Sum of the IPv4 pseudo-header for TCP/UDP checksums.
pub fn pseudo_header_sum(src: Ipv4Addr, dst: Ipv4Addr, proto: u8, len: usize) -> u32 {
    let mut p = [0u8; 12];
    p[0..4].copy_from_slice(&src.octets());
    p[4..8].copy_from_slice(&dst.octets());
    p[9] = proto;
    p[10..12].copy_from_slice(&(len as u16).to_be_bytes());
    checksum::sum(&p, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    // An ICMP echo request as scapy builds it: 192.0.2.1 -> 192.0.2.2, 84 bytes total.
    const HDR: [u8; 20] = [
        0x45, 0x00, 0x00, 0x54, 0x8b, 0x2d, 0x40, 0x00, 0x40, 0x01, 0x2b, 0x78, 0xc0, 0x00, 0x02,
        0x01, 0xc0, 0x00, 0x02, 0x02,
    ];

    #[test]
    fn parse_real_header() {
        let mut pkt = HDR.to_vec();
        pkt.resize(84, 0);
        let p = Ipv4Packet::new_checked(&pkt[..]).unwrap();
        assert_eq!(p.src(), Ipv4Addr::new(192, 0, 2, 1));
        assert_eq!(p.dst(), Ipv4Addr::new(192, 0, 2, 2));
        assert_eq!(p.protocol(), 1);
        assert!(p.dont_fragment());
        assert_eq!(p.ttl(), 64);
        assert_eq!(p.total_len(), 84);
        assert!(p.verify_checksum());
        assert_eq!(p.payload().len(), 64);
    }

    #[test]
    fn emit_matches_real_header() {
        let r = Ipv4Repr {
            src: Ipv4Addr::new(192, 0, 2, 1),
            dst: Ipv4Addr::new(192, 0, 2, 2),
            protocol: 1,
            tos: 0,
            ttl: 64,
            ident: 0x8b2d,
            dont_fragment: true,
            payload_len: 64,
        };
        let mut out = [0u8; 20];
        r.emit(&mut out).unwrap();
        assert_eq!(out, HDR);
    }

    #[test]
    fn fast_checksum_path_agrees_with_the_generic_one() {
        let mut pkt = HDR.to_vec();
        pkt.resize(84, 0);
        for i in 0..20 {
            for bit in 0..8 {
                let mut p = pkt.clone();
                p[i] ^= 1 << bit;
                if let Ok(v) = Ipv4Packet::new_checked(&p[..]) {
                    assert_eq!(
                        v.verify_checksum(),
                        checksum::checksum(&p[..20]) == 0,
                        "byte {i} bit {bit}"
                    );
                }
            }
        }
        assert!(Ipv4Packet::new_checked(&pkt[..]).unwrap().verify_checksum());
    }

    #[test]
    fn rejects_bad_lengths() {
        let mut pkt = HDR.to_vec();
        assert_eq!(
            Ipv4Packet::new_checked(&pkt[..]).unwrap_err(),
            WireError::Truncated
        );
        pkt.resize(84, 0);
        pkt[0] = 0x44; // IHL 4
        assert_eq!(
            Ipv4Packet::new_checked(&pkt[..]).unwrap_err(),
            WireError::Malformed
        );
        pkt[0] = 0x65; // version 6
        assert_eq!(
            Ipv4Packet::new_checked(&pkt[..]).unwrap_err(),
            WireError::Malformed
        );
        pkt[0] = 0x4f; // IHL 60 > total? total is 84, fine; but 60 <= 84
        assert!(Ipv4Packet::new_checked(&pkt[..]).is_ok());
        pkt[3] = 10; // total 10 < header
        assert_eq!(
            Ipv4Packet::new_checked(&pkt[..]).unwrap_err(),
            WireError::Malformed
        );
    }
}
