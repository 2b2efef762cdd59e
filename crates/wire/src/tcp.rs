//! TCP headers: only what selectors need (ports).

use crate::{be16, Result, WireError};

/// Ports are in the first four bytes; a selector needs no more than that.
pub const PORTS_LEN: usize = 4;
/// A TCP header without options (RFC 9293 §3.1); its checksum is at bytes 16-17.
pub const MIN_HEADER_LEN: usize = 20;

#[derive(Debug, Clone, Copy)]
/// The ports at the start of a TCP header (all that selectors need).
pub struct TcpPorts<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> TcpPorts<T> {
    /// A view over `buf`, if it holds at least the two ports.
    pub fn new_checked(buf: T) -> Result<Self> {
        if buf.as_ref().len() < PORTS_LEN {
            return Err(WireError::Truncated);
        }
        Ok(TcpPorts { buf })
    }
    /// Source port.
    pub fn src_port(&self) -> u16 {
        be16(self.buf.as_ref(), 0)
    }
    /// Destination port.
    pub fn dst_port(&self) -> u16 {
        be16(self.buf.as_ref(), 2)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports() {
        let t = TcpPorts::new_checked(&[0x00, 0x50, 0xc3, 0x50][..]).unwrap();
        assert_eq!((t.src_port(), t.dst_port()), (80, 50000));
        assert!(TcpPorts::new_checked(&[0u8; 3][..]).is_err());
    }
}
