//! UDP headers (RFC 768), also the NAT-traversal wrapper of ESP (RFC 3948).

use crate::{be16, checksum, Result, WireError};

/// The UDP header.
pub const HEADER_LEN: usize = 8;
/// The IKE/ESP NAT-traversal port.
pub const NAT_T_PORT: u16 = 4500;

#[derive(Debug, Clone, Copy)]
/// A view of a UDP header and what follows it.
pub struct UdpPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> UdpPacket<T> {
    /// Checks the header and that the length field fits inside `buf`.
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let len = usize::from(be16(b, 4));
        if len < HEADER_LEN {
            return Err(WireError::Malformed);
        }
        if len > b.len() {
            return Err(WireError::Truncated);
        }
        Ok(UdpPacket { buf })
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buf.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }
    /// Length from the header.
    pub fn len(&self) -> usize {
        usize::from(be16(self.buf.as_ref(), 4))
    }
    /// Whether the length field says the datagram is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == HEADER_LEN
    }
    /// The checksum as on the wire.
    pub fn checksum_field(&self) -> u16 {
        be16(self.buf.as_ref(), 6)
    }
    /// The payload, up to the length from the header.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[HEADER_LEN..self.len()]
    }
}

/// Writes a UDP header with a zero checksum (allowed for IPv4; RFC 3948 §2.1).
pub fn emit(out: &mut [u8], src_port: u16, dst_port: u16, payload_len: usize) -> Result<()> {
    let len = u16::try_from(payload_len + HEADER_LEN).map_err(|_| WireError::Malformed)?;
    let h = out.get_mut(..HEADER_LEN).ok_or(WireError::Truncated)?;
    h[0..2].copy_from_slice(&src_port.to_be_bytes());
    h[2..4].copy_from_slice(&dst_port.to_be_bytes());
    h[4..6].copy_from_slice(&len.to_be_bytes());
    h[6..8].copy_from_slice(&[0, 0]);
    Ok(())
}

/// Fills the checksum of a whole UDP datagram given its pseudo-header sum.
pub fn fill_checksum(datagram: &mut [u8], pseudo_sum: u32) {
    if datagram.len() < HEADER_LEN {
        return;
    }
    datagram[6] = 0;
    datagram[7] = 0;
    let mut c = checksum::finish(checksum::sum(datagram, pseudo_sum));
    if c == 0 {
        c = 0xffff;
    }
    datagram[6..8].copy_from_slice(&c.to_be_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_and_lengths() {
        let d = [
            0x11, 0x94, 0x11, 0x94, 0x00, 0x0a, 0x00, 0x00, 0xab, 0xcd, 0xee,
        ];
        let u = UdpPacket::new_checked(&d[..]).unwrap();
        assert_eq!((u.src_port(), u.dst_port()), (4500, 4500));
        assert_eq!(u.payload(), &[0xab, 0xcd]);
        assert!(UdpPacket::new_checked(&d[..7]).is_err());
        let bad = [0, 1, 0, 2, 0, 4, 0, 0];
        assert_eq!(
            UdpPacket::new_checked(&bad[..]).unwrap_err(),
            WireError::Malformed
        );
    }
}
