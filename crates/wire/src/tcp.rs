//! TCP headers: only what selectors need (ports).

use crate::{be16, Result, WireError};

/// Ports are in the first four bytes; a selector needs no more than that.
pub const PORTS_LEN: usize = 4;

#[derive(Debug, Clone, Copy)]
pub struct TcpPorts<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> TcpPorts<T> {
    pub fn new_checked(buf: T) -> Result<Self> {
        if buf.as_ref().len() < PORTS_LEN {
            return Err(WireError::Truncated);
        }
        Ok(TcpPorts { buf })
    }
    pub fn src_port(&self) -> u16 {
        be16(self.buf.as_ref(), 0)
    }
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
