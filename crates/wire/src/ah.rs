//! AH (RFC 4302 §2) header.
//!
//! ```text
//! | Next Hdr (1) | Payload Len (1) | Reserved (2) | SPI (4) | Sequence Number (4) | ICV ... |
//! ```
//!
//! Payload Len is the header's length in 32-bit words, minus 2. The ICV field (with an IV
//! in front for AES-GMAC, RFC 4543) is padded to 4 bytes over IPv4 and 8 over IPv6.

use crate::{be32, Result, WireError};

/// Next header, payload length, reserved, SPI, sequence number.
pub const FIXED_LEN: usize = 12;

/// AH header length with `iv_icv_len` bytes of IV and ICV: 12 fixed bytes and those,
/// padded to 4 bytes over IPv4 and 8 over IPv6 (RFC 4302 §2.2, §3.3.3.2.1).
pub fn header_len(iv_icv_len: usize, v4: bool) -> usize {
    let align = if v4 { 4 } else { 8 };
    (FIXED_LEN + iv_icv_len).div_ceil(align) * align
}

/// A checked view of the fixed part of an AH header (as `esp::EspPacket` is of ESP's): the
/// buffer holds at least [`FIXED_LEN`] bytes. Whether the length the header names fits,
/// and suits the SA's IV and ICV, is the caller's check ([`AhHeader::icv_field`] is `None`
/// where it does not fit).
#[derive(Debug, Clone, Copy)]
pub struct AhHeader<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> AhHeader<T> {
    /// A view over `buf`, if it holds at least the fixed AH header.
    pub fn new_checked(buf: T) -> Result<Self> {
        if buf.as_ref().len() < FIXED_LEN {
            return Err(WireError::Truncated);
        }
        Ok(AhHeader { buf })
    }
    /// The protocol after AH.
    pub fn next_header(&self) -> u8 {
        self.buf.as_ref()[0]
    }
    /// The header's length in bytes as its Payload Len names it (IV, ICV and padding
    /// included): 8 to 1028.
    pub fn header_len(&self) -> usize {
        (usize::from(self.buf.as_ref()[1]) + 2) * 4
    }
    /// Security parameter index.
    pub fn spi(&self) -> u32 {
        be32(self.buf.as_ref(), 4)
    }
    /// Sequence number (low 32 bits).
    pub fn seq(&self) -> u32 {
        be32(self.buf.as_ref(), 8)
    }
    /// IV (if any), ICV and padding, where the named length fits the buffer and covers
    /// the fixed part.
    pub fn icv_field(&self) -> Option<&[u8]> {
        self.buf.as_ref().get(FIXED_LEN..self.header_len())
    }
}

/// Writes an AH header of `len` bytes (a multiple of 4, at least 12) at the start of `out`:
/// next header, Payload Len, zero reserved bytes, SPI and sequence number; the IV/ICV field
/// is zeroed (the ICV is computed over it zeroed, RFC 4302 §3.3.3.1). Inlined: it runs
/// once per outbound AH packet.
#[inline]
pub fn emit_header(out: &mut [u8], next_header: u8, len: usize, spi: u32, seq: u32) -> Result<()> {
    if len < FIXED_LEN || !len.is_multiple_of(4) || len / 4 - 2 > usize::from(u8::MAX) {
        return Err(WireError::Malformed);
    }
    let h = out.get_mut(..len).ok_or(WireError::Truncated)?;
    h[0] = next_header;
    h[1] = (len / 4 - 2) as u8;
    h[2] = 0;
    h[3] = 0;
    h[4..8].copy_from_slice(&spi.to_be_bytes());
    h[8..12].copy_from_slice(&seq.to_be_bytes());
    h[FIXED_LEN..].fill(0);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// An AH header as RFC 4302 §2 lays it out, HMAC-SHA1-96 (12-byte ICV): next header 4
    /// (IPv4, tunnel mode), Payload Len (12 + 12) / 4 - 2 = 4, SPI 0x1000, sequence 7.
    const SHA1_96: [u8; 24] = [
        4, 4, 0, 0, 0, 0, 0x10, 0, 0, 0, 0, 7, //
        0xa1, 0xa2, 0xa3, 0xa4, 0xa5, 0xa6, 0xa7, 0xa8, 0xa9, 0xaa, 0xab, 0xac,
    ];

    #[test]
    fn reads_the_fields_byte_exact() {
        let h = AhHeader::new_checked(&SHA1_96[..]).unwrap();
        assert_eq!(h.next_header(), 4);
        assert_eq!(h.header_len(), 24);
        assert_eq!(h.spi(), 0x1000);
        assert_eq!(h.seq(), 7);
        assert_eq!(h.icv_field(), Some(&SHA1_96[12..]));
    }

    #[test]
    fn emits_what_it_reads() {
        let mut out = [0xffu8; 24];
        emit_header(&mut out, 4, 24, 0x1000, 7).unwrap();
        assert_eq!(out[..12], SHA1_96[..12]);
        assert!(out[12..].iter().all(|&b| b == 0), "ICV field zeroed");
        assert_eq!(
            emit_header(&mut out, 4, 26, 1, 1),
            Err(WireError::Malformed)
        );
        assert_eq!(emit_header(&mut out, 4, 8, 1, 1), Err(WireError::Malformed));
        assert_eq!(
            emit_header(&mut out, 4, 28, 1, 1),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn short_headers_and_lengths_that_do_not_fit() {
        assert_eq!(
            AhHeader::new_checked(&SHA1_96[..11]).unwrap_err(),
            WireError::Truncated
        );
        assert!(AhHeader::new_checked(&SHA1_96[..12]).is_ok());
        for b in 0..=255u8 {
            let mut h = SHA1_96;
            h[1] = b;
            // Never panics; the ICV field exists exactly when the named length fits.
            let v = AhHeader::new_checked(&h[..]).unwrap();
            assert_eq!(
                v.icv_field().is_some(),
                (1..=4).contains(&b),
                "payload len {b}"
            );
        }
    }

    #[test]
    fn header_lengths_are_padded_per_family() {
        // HMAC-SHA1-96: 24 both ways; HMAC-SHA-256-128: 28 over IPv4, 32 over IPv6;
        // AES-GMAC (8-byte IV + 16-byte ICV): 36 / 40.
        assert_eq!((header_len(12, true), header_len(12, false)), (24, 24));
        assert_eq!((header_len(16, true), header_len(16, false)), (28, 32));
        assert_eq!((header_len(24, true), header_len(24, false)), (36, 40));
    }
}
