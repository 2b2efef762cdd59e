//! ICMP and ICMPv6 type and code, which SPD selectors match in place of ports
//! (RFC 4301 §4.4.1.1: type in the "source port", code in the "destination port").

use std::net::Ipv6Addr;

use crate::ipv6::pseudo_header_sum;
use crate::{checksum, proto, Result, WireError};

/// ICMPv4 echo request and reply (RFC 792).
pub const ECHO_REQUEST: u8 = 8;
/// ICMPv4 echo reply (RFC 792).
pub const ECHO_REPLY: u8 = 0;
/// ICMPv4 destination unreachable (RFC 792), and its code "fragmentation needed and DF
/// set", whose message carries the next-hop MTU (RFC 1191 §4).
pub const DEST_UNREACHABLE: u8 = 3;
/// Code of "fragmentation needed and DF set" under [`DEST_UNREACHABLE`].
pub const CODE_FRAGMENTATION_NEEDED: u8 = 4;
/// ICMPv4 time exceeded (RFC 792; code 0: TTL exceeded in transit).
pub const TIME_EXCEEDED: u8 = 11;
/// ICMPv6 packet too big and time exceeded (RFC 4443 §3.2, §3.3).
pub const V6_PACKET_TOO_BIG: u8 = 2;
/// ICMPv6 time exceeded (RFC 4443 §3.3).
pub const V6_TIME_EXCEEDED: u8 = 3;

/// Writes an ICMP or ICMPv6 error message into `out`: type, code, the four bytes after
/// the checksum (`rest`: unused, or the MTU), then `quote` (the start of the packet the
/// error is about). The checksum is left zero for the caller to fill (ICMPv4:
/// [`IcmpHeader::fill_checksum`]; ICMPv6: [`icmpv6_checksum`]). Returns the length.
pub fn emit_error(
    out: &mut [u8],
    (msg_type, code): (u8, u8),
    rest: [u8; 4],
    quote: &[u8],
) -> Result<usize> {
    let len = 8 + quote.len();
    let m = out.get_mut(..len).ok_or(WireError::Truncated)?;
    m[0] = msg_type;
    m[1] = code;
    m[2..4].fill(0);
    m[4..8].copy_from_slice(&rest);
    m[8..].copy_from_slice(quote);
    Ok(len)
}

/// The ICMPv6 checksum (RFC 4443 §2.3) of `body` (its checksum field included: 0 when it
/// is right) between `src` and `dst`.
pub fn icmpv6_checksum(src: Ipv6Addr, dst: Ipv6Addr, body: &[u8]) -> u16 {
    let pseudo = pseudo_header_sum(src, dst, proto::ICMPV6, body.len());
    checksum::finish(checksum::sum(body, pseudo))
}

#[derive(Debug, Clone, Copy)]
/// The first four bytes of an ICMP or ICMPv6 message: type, code, checksum.
pub struct IcmpHeader<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> IcmpHeader<T> {
    /// A view over `buf`, if it holds at least the four-byte header.
    pub fn new_checked(buf: T) -> Result<Self> {
        if buf.as_ref().len() < 4 {
            return Err(WireError::Truncated);
        }
        Ok(IcmpHeader { buf })
    }
    /// Message type.
    pub fn msg_type(&self) -> u8 {
        self.buf.as_ref()[0]
    }
    /// Message code.
    pub fn code(&self) -> u8 {
        self.buf.as_ref()[1]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> IcmpHeader<T> {
    /// Sets the message type.
    pub fn set_msg_type(&mut self, t: u8) {
        self.buf.as_mut()[0] = t;
    }
    /// Sets the message code.
    pub fn set_code(&mut self, c: u8) {
        self.buf.as_mut()[1] = c;
    }
    /// ICMPv6: the checksum over the IPv6 pseudo-header of `src` and `dst` and the whole
    /// message (the buffer), RFC 4443 §2.3.
    pub fn fill_checksum_v6(&mut self, src: Ipv6Addr, dst: Ipv6Addr) {
        let b = self.buf.as_mut();
        b[2..4].fill(0);
        let c = icmpv6_checksum(src, dst, b);
        b[2..4].copy_from_slice(&c.to_be_bytes());
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
