//! ESP (RFC 4303) header and trailer.
//!
//! ```text
//! | SPI (4) | Sequence Number (4) | IV (8 for GCM) | Payload ... | Padding | Pad Len | Next Hdr | ICV |
//! ```

use crate::{be32, Result, WireError};

/// SPI plus sequence number.
pub const HEADER_LEN: usize = 8;
/// Pad length plus next header.
pub const TRAILER_LEN: usize = 2;

/// A checked view of the fixed ESP header.
#[derive(Debug, Clone, Copy)]
pub struct EspPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> EspPacket<T> {
    /// A view over `buf`, if it holds at least the ESP header.
    pub fn new_checked(buf: T) -> Result<Self> {
        if buf.as_ref().len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        Ok(EspPacket { buf })
    }
    /// Security parameter index.
    pub fn spi(&self) -> u32 {
        be32(self.buf.as_ref(), 0)
    }
    /// Sequence number (low 32 bits).
    pub fn seq(&self) -> u32 {
        be32(self.buf.as_ref(), 4)
    }
    /// Everything after the fixed header: IV, ciphertext, ICV.
    pub fn body(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..]
    }
}

/// Writes SPI and sequence number.
pub fn emit_header(out: &mut [u8], spi: u32, seq: u32) -> Result<()> {
    let h = out.get_mut(..HEADER_LEN).ok_or(WireError::Truncated)?;
    h[0..4].copy_from_slice(&spi.to_be_bytes());
    h[4..8].copy_from_slice(&seq.to_be_bytes());
    Ok(())
}

/// Number of padding bytes so that payload + padding + 2 is a multiple of `align`
/// (4 for GCM, RFC 4303 §2.4; `align` must be a power of two).
pub fn pad_len(payload_len: usize, align: usize) -> usize {
    let mask = align - 1;
    (align - ((payload_len + TRAILER_LEN) & mask)) & mask
}

/// Writes the RFC 4303 default padding (1, 2, 3, ...), pad length and next header.
/// `out` must be exactly `pad + 2` bytes long.
pub fn emit_trailer(out: &mut [u8], next_header: u8) -> Result<()> {
    let n = out
        .len()
        .checked_sub(TRAILER_LEN)
        .ok_or(WireError::Truncated)?;
    let pad = u8::try_from(n).map_err(|_| WireError::Malformed)?;
    for (i, b) in out[..n].iter_mut().enumerate() {
        *b = (i + 1) as u8;
    }
    out[n] = pad;
    out[n + 1] = next_header;
    Ok(())
}

/// The decrypted trailer's verdict.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trailer {
    /// Length of the protected payload before the padding.
    pub payload_len: usize,
    /// The protocol of the protected payload (59: a dummy packet).
    pub next_header: u8,
}

/// Parses and checks the trailer at the end of decrypted `text` (payload, padding, pad
/// length, next header). Padding must be the default monotonic sequence.
pub fn parse_trailer(text: &[u8]) -> Result<Trailer> {
    let n = text.len();
    if n < TRAILER_LEN {
        return Err(WireError::Truncated);
    }
    let pad = usize::from(text[n - 2]);
    let next_header = text[n - 1];
    let payload_len = n
        .checked_sub(TRAILER_LEN + pad)
        .ok_or(WireError::Malformed)?;
    let padding = &text[payload_len..n - TRAILER_LEN];
    if padding
        .iter()
        .enumerate()
        .any(|(i, &b)| usize::from(b) != i + 1)
    {
        return Err(WireError::Malformed);
    }
    Ok(Trailer {
        payload_len,
        next_header,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_sizes() {
        assert_eq!(pad_len(48, 4), 2);
        assert_eq!(pad_len(50, 4), 0);
        assert_eq!(pad_len(49, 4), 1);
        assert_eq!(pad_len(47, 4), 3);
    }

    #[test]
    fn trailer_round_trip_and_rejects() {
        let mut t = vec![0xaa; 5];
        t.extend_from_slice(&[1, 2, 3, 3, 4]);
        assert_eq!(
            parse_trailer(&t).unwrap(),
            Trailer {
                payload_len: 5,
                next_header: 4
            }
        );
        let mut out = [0u8; 5];
        emit_trailer(&mut out, 4).unwrap();
        assert_eq!(out, [1, 2, 3, 3, 4]);
        t[6] = 9;
        assert_eq!(parse_trailer(&t).unwrap_err(), WireError::Malformed);
        assert_eq!(parse_trailer(&[200, 4]).unwrap_err(), WireError::Malformed);
        assert_eq!(parse_trailer(&[4]).unwrap_err(), WireError::Truncated);
    }

    #[test]
    fn header() {
        let mut h = [0u8; 8];
        emit_header(&mut h, 0x4a2cbfe3, 2).unwrap();
        let e = EspPacket::new_checked(&h[..]).unwrap();
        assert_eq!((e.spi(), e.seq()), (0x4a2cbfe3, 2));
    }
}
