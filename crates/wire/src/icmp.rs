//! ICMP and ICMPv6 type and code, which SPD selectors match in place of ports
//! (RFC 4301 §4.4.1.1: type in the "source port", code in the "destination port").

use crate::{checksum, Result, WireError};

/// ICMPv4 echo request and reply (RFC 792).
pub const ECHO_REQUEST: u8 = 8;
pub const ECHO_REPLY: u8 = 0;

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

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpHeader<T> {
    pub fn set_msg_type(&mut self, t: u8) {
        self.buf.as_mut()[0] = t;
    }
    pub fn set_code(&mut self, c: u8) {
        self.buf.as_mut()[1] = c;
    }
    /// ICMPv4: the checksum over the whole message (the buffer), RFC 792.
    pub fn fill_checksum(&mut self) {
        let b = self.buf.as_mut();
        b[2..4].fill(0);
        let c = checksum::checksum(b);
        b[2..4].copy_from_slice(&c.to_be_bytes());
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

    #[test]
    fn an_echo_request_becomes_its_reply_byte_exact() {
        // Echo request id 0x1234 seq 1, payload "abcd": the bytes scapy 2.5 gives for
        // `ICMP(type=8, id=0x1234, seq=1) / b"abcd"` (checksum 0x2104) and, as the reply,
        // `ICMP(type=0, ...)` (0x2904): type and checksum change, nothing else.
        let mut m = [8u8, 0, 0, 0, 0x12, 0x34, 0, 1, b'a', b'b', b'c', b'd'];
        let mut h = IcmpHeader::new_checked(&mut m[..]).unwrap();
        h.fill_checksum();
        assert_eq!(m[2..4], [0x21, 0x04]);
        assert_eq!(checksum::checksum(&m), 0, "a filled checksum verifies");
        let mut h = IcmpHeader::new_checked(&mut m[..]).unwrap();
        h.set_msg_type(ECHO_REPLY);
        h.fill_checksum();
        assert_eq!(
            m,
            [0, 0, 0x29, 0x04, 0x12, 0x34, 0, 1, b'a', b'b', b'c', b'd']
        );
    }
}
