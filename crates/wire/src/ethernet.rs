//! Ethernet II frames with an optional 802.1Q (or 802.1ad outer) VLAN tag.

use crate::{be16, Result, WireError};

/// EtherType of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// EtherType of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// EtherType of an 802.1Q VLAN tag.
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// EtherType of an 802.1ad (QinQ) service tag.
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// EtherType of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;

/// Length of an untagged Ethernet header.
pub const HEADER_LEN: usize = 14;

/// A 48-bit MAC address.
pub type MacAddr = [u8; 6];

/// A checked view of an Ethernet frame.
#[derive(Debug, Clone, Copy)]
pub struct EthernetFrame<T: AsRef<[u8]>> {
    buf: T,
    header_len: usize,
}

impl<T: AsRef<[u8]>> EthernetFrame<T> {
    /// Checks the header (and one VLAN tag, if present).
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        let mut header_len = HEADER_LEN;
        let t = be16(b, 12);
        if t == ETHERTYPE_VLAN || t == ETHERTYPE_QINQ {
            header_len += 4;
            if b.len() < header_len {
                return Err(WireError::Truncated);
            }
            // A second tag (QinQ) is not walked: such frames carry an unknown ethertype and
            // are handled as non-IP.
        }
        Ok(EthernetFrame { buf, header_len })
    }

    /// Destination MAC address.
    pub fn dst(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buf.as_ref()[0..6]);
        m
    }

    /// Source MAC address.
    pub fn src(&self) -> MacAddr {
        let mut m = [0; 6];
        m.copy_from_slice(&self.buf.as_ref()[6..12]);
        m
    }

    /// VLAN id of the tag, if any.
    pub fn vlan(&self) -> Option<u16> {
        (self.header_len > HEADER_LEN).then(|| be16(self.buf.as_ref(), 14) & 0x0fff)
    }

    /// The ethertype after any VLAN tag.
    pub fn ethertype(&self) -> u16 {
        be16(self.buf.as_ref(), self.header_len - 2)
    }

    /// Length of the header, VLAN tags included.
    pub fn header_len(&self) -> usize {
        self.header_len
    }

    /// What follows the header.
    pub fn payload(&self) -> &[u8] {
        &self.buf.as_ref()[self.header_len..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> EthernetFrame<T> {
    /// Sets the destination MAC address.
    pub fn set_dst(&mut self, m: MacAddr) {
        self.buf.as_mut()[0..6].copy_from_slice(&m);
    }
    /// Sets the source MAC address.
    pub fn set_src(&mut self, m: MacAddr) {
        self.buf.as_mut()[6..12].copy_from_slice(&m);
    }
    /// Addressed back to the sender, from `ours` (a reply in place).
    pub fn reflect(&mut self, ours: MacAddr) {
        let sender = self.src();
        self.set_dst(sender);
        self.set_src(ours);
    }
}

/// Writes an untagged Ethernet header into the first 14 bytes of `out`.
pub fn emit(out: &mut [u8], dst: MacAddr, src: MacAddr, ethertype: u16) -> Result<()> {
    let h = out.get_mut(..HEADER_LEN).ok_or(WireError::Truncated)?;
    h[0..6].copy_from_slice(&dst);
    h[6..12].copy_from_slice(&src);
    h[12..14].copy_from_slice(&ethertype.to_be_bytes());
    Ok(())
}

/// Parses `aa:bb:cc:dd:ee:ff`.
pub fn parse_mac(s: &str) -> Option<MacAddr> {
    let mut m = [0u8; 6];
    let mut parts = s.split(':');
    for b in &mut m {
        let p = parts.next()?;
        if p.is_empty() || p.len() > 2 {
            return None;
        }
        *b = u8::from_str_radix(p, 16).ok()?;
    }
    parts.next().is_none().then_some(m)
}

/// `aa:bb:cc:dd:ee:ff`.
pub fn format_mac(m: &MacAddr) -> String {
    format!(
        "{:02x}:{:02x}:{:02x}:{:02x}:{:02x}:{:02x}",
        m[0], m[1], m[2], m[3], m[4], m[5]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reflect_addresses_a_reply_to_the_sender() {
        let mut f = [0u8; 14];
        emit(&mut f, [1, 1, 1, 1, 1, 1], [2, 2, 2, 2, 2, 2], 0x0806).unwrap();
        let mut e = EthernetFrame::new_checked(&mut f[..]).unwrap();
        e.reflect([3, 3, 3, 3, 3, 3]);
        assert_eq!((e.dst(), e.src()), ([2; 6], [3; 6]));
        assert_eq!(e.ethertype(), 0x0806);
    }

    #[test]
    fn untagged_and_tagged() {
        let f = [
            0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x08, 0x00, 0x45, 0,
        ];
        let e = EthernetFrame::new_checked(&f[..]).unwrap();
        assert_eq!(e.ethertype(), ETHERTYPE_IPV4);
        assert_eq!(e.vlan(), None);
        assert_eq!(e.payload(), &[0x45, 0]);
        let t = [
            0x02, 0, 0, 0, 0, 1, 0x02, 0, 0, 0, 0, 2, 0x81, 0x00, 0x20, 0x0a, 0x86, 0xdd, 0x60,
        ];
        let e = EthernetFrame::new_checked(&t[..]).unwrap();
        assert_eq!(e.vlan(), Some(10));
        assert_eq!(e.ethertype(), ETHERTYPE_IPV6);
        assert_eq!(e.header_len(), 18);
        assert!(EthernetFrame::new_checked(&t[..15]).is_err());
    }

    #[test]
    fn mac_text() {
        let m = parse_mac("d0:43:1e:0a:bc:de").unwrap();
        assert_eq!(format_mac(&m), "d0:43:1e:0a:bc:de");
        assert!(parse_mac("d0:43:1e:0a:bc").is_none());
        assert!(parse_mac("d0:43:1e:0a:bc:de:00").is_none());
        assert!(parse_mac("zz:43:1e:0a:bc:de").is_none());
    }
}
