//! ICMP and ICMPv6 type and code, which SPD selectors match in place of ports
//! (RFC 4301 §4.4.1.1: type in the "source port", code in the "destination port").

use crate::{Result, WireError};

#[derive(Debug, Clone, Copy)]
pub struct IcmpHeader<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> IcmpHeader<T> {
    pub fn new_checked(buf: T) -> Result<Self> {
        if buf.as_ref().len() < 4 {
            return Err(WireError::Truncated);
        }
        Ok(IcmpHeader { buf })
    }
    pub fn msg_type(&self) -> u8 {
        self.buf.as_ref()[0]
    }
    pub fn code(&self) -> u8 {
        self.buf.as_ref()[1]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn type_and_code() {
        let h = IcmpHeader::new_checked(&[8u8, 0, 0xf7, 0xff][..]).unwrap();
        assert_eq!((h.msg_type(), h.code()), (8, 0));
        assert!(IcmpHeader::new_checked(&[8u8][..]).is_err());
    }
}
