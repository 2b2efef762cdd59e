//! ARP (RFC 826) for IPv4 over Ethernet: the only kind the gateway speaks.
//!
//! ```text
//! | HTYPE 1 (2) | PTYPE 0x0800 (2) | HLEN 6 | PLEN 4 | OP (2) |
//! | sender MAC (6) | sender IPv4 (4) | target MAC (6) | target IPv4 (4) |
//! ```

use crate::{Result, WireError};

/// An Ethernet/IPv4 ARP packet's length.
pub const LEN: usize = 28;
/// ARP request (RFC 826).
pub const OP_REQUEST: u16 = 1;
/// ARP reply (RFC 826).
pub const OP_REPLY: u16 = 2;
/// Hardware type Ethernet, protocol type IPv4, their address lengths.
const ETHERNET_IPV4: [u8; 6] = [0, 1, 8, 0, 6, 4];

/// A checked view of an Ethernet/IPv4 ARP packet (anything else is `Malformed`).
#[derive(Debug, Clone, Copy)]
pub struct ArpPacket<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> ArpPacket<T> {
    /// A view over `buf`, if it holds an Ethernet/IPv4 ARP packet.
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < LEN {
            return Err(WireError::Truncated);
        }
        if b[0..6] != ETHERNET_IPV4 {
            return Err(WireError::Malformed);
        }
        Ok(ArpPacket { buf })
    }
    /// Operation: [`OP_REQUEST`] or [`OP_REPLY`].
    pub fn op(&self) -> u16 {
        let b = self.buf.as_ref();
        u16::from_be_bytes([b[6], b[7]])
    }
    /// Sender hardware address.
    pub fn sender_mac(&self) -> [u8; 6] {
        six(&self.buf.as_ref()[8..14])
    }
    /// Sender protocol address.
    pub fn sender_ip(&self) -> [u8; 4] {
        four(&self.buf.as_ref()[14..18])
    }
    /// Target hardware address.
    pub fn target_mac(&self) -> [u8; 6] {
        six(&self.buf.as_ref()[18..24])
    }
    /// Target protocol address.
    pub fn target_ip(&self) -> [u8; 4] {
        four(&self.buf.as_ref()[24..28])
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> ArpPacket<T> {
    /// Sets the operation.
    pub fn set_op(&mut self, op: u16) {
        self.buf.as_mut()[6..8].copy_from_slice(&op.to_be_bytes());
    }
    /// Sets the sender's hardware and protocol addresses.
    pub fn set_sender(&mut self, mac: [u8; 6], ip: [u8; 4]) {
        let b = self.buf.as_mut();
        b[8..14].copy_from_slice(&mac);
        b[14..18].copy_from_slice(&ip);
    }
    /// Sets the target's hardware and protocol addresses.
    pub fn set_target(&mut self, mac: [u8; 6], ip: [u8; 4]) {
        let b = self.buf.as_mut();
        b[18..24].copy_from_slice(&mac);
        b[24..28].copy_from_slice(&ip);
    }
}

fn six(s: &[u8]) -> [u8; 6] {
    let mut a = [0u8; 6];
    a.copy_from_slice(s);
    a
}

fn four(s: &[u8]) -> [u8; 4] {
    [s[0], s[1], s[2], s[3]]
}

/// Writes an Ethernet/IPv4 ARP packet into the first [`LEN`] bytes of `out`.
pub fn emit(
    out: &mut [u8],
    op: u16,
    sender: ([u8; 6], [u8; 4]),
    target: ([u8; 6], [u8; 4]),
) -> Result<()> {
    let b = out.get_mut(..LEN).ok_or(WireError::Truncated)?;
    b[0..6].copy_from_slice(&ETHERNET_IPV4);
    let mut p = ArpPacket { buf: b };
    p.set_op(op);
    p.set_sender(sender.0, sender.1);
    p.set_target(target.0, target.1);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// "Who has 192.0.2.1? Tell 192.0.2.2" from 02:00:00:00:00:02, as RFC 826 lays it out
    /// (the bytes scapy's `ARP(psrc="192.0.2.2", hwsrc="02:00:00:00:00:02",
    /// pdst="192.0.2.1")` gives).
    const REQUEST: [u8; 28] = [
        0, 1, 8, 0, 6, 4, 0, 1, //
        2, 0, 0, 0, 0, 2, 192, 0, 2, 2, //
        0, 0, 0, 0, 0, 0, 192, 0, 2, 1,
    ];

    #[test]
    fn reads_a_request_byte_exact() {
        let a = ArpPacket::new_checked(&REQUEST[..]).unwrap();
        assert_eq!(a.op(), OP_REQUEST);
        assert_eq!(a.sender_mac(), [2, 0, 0, 0, 0, 2]);
        assert_eq!(a.sender_ip(), [192, 0, 2, 2]);
        assert_eq!(a.target_mac(), [0; 6]);
        assert_eq!(a.target_ip(), [192, 0, 2, 1]);
    }

    #[test]
    fn emits_the_same_bytes_and_turns_a_request_into_its_reply() {
        let mut out = [0xaau8; 30];
        emit(
            &mut out,
            OP_REQUEST,
            ([2, 0, 0, 0, 0, 2], [192, 0, 2, 2]),
            ([0; 6], [192, 0, 2, 1]),
        )
        .unwrap();
        assert_eq!(out[..28], REQUEST);
        assert_eq!(out[28..], [0xaa, 0xaa], "nothing written beyond the packet");
        let mut reply = REQUEST;
        let mut a = ArpPacket::new_checked(&mut reply[..]).unwrap();
        a.set_op(OP_REPLY);
        a.set_target([2, 0, 0, 0, 0, 2], [192, 0, 2, 2]);
        a.set_sender([2, 0, 0, 0, 0, 1], [192, 0, 2, 1]);
        assert_eq!(
            reply,
            [
                0, 1, 8, 0, 6, 4, 0, 2, 2, 0, 0, 0, 0, 1, 192, 0, 2, 1, 2, 0, 0, 0, 0, 2, 192, 0,
                2, 2
            ]
        );
        assert_eq!(
            emit(&mut out[..27], OP_REPLY, ([0; 6], [0; 4]), ([0; 6], [0; 4])),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn other_hardware_or_protocol_and_short_packets_are_refused() {
        assert_eq!(
            ArpPacket::new_checked(&REQUEST[..27]).unwrap_err(),
            WireError::Truncated
        );
        for i in 0..6 {
            let mut bad = REQUEST;
            bad[i] ^= 0x10;
            assert_eq!(
                ArpPacket::new_checked(&bad[..]).unwrap_err(),
                WireError::Malformed
            );
        }
    }
}
