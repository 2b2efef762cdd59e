//! IPv6 neighbour discovery (RFC 4861 §4.3, §4.4): neighbour solicitations and
//! advertisements, their link-layer address options, and the ICMPv6 checksum (RFC 4443
//! §2.3) they carry.
//!
//! ```text
//!  0      1      2      3      4        8                        24
//! +------+------+------+------+--------+------------------------+---------+
//! | type | code | checksum    | flags  | target address (16)    | options |
//! +------+------+------+------+--------+------------------------+---------+
//! ```

use std::net::Ipv6Addr;

use crate::ethernet::MacAddr;
pub use crate::icmp::icmpv6_checksum;
use crate::{Result, WireError};

/// Neighbour solicitation.
pub const NEIGHBOR_SOLICITATION: u8 = 135;
/// Neighbour advertisement.
pub const NEIGHBOR_ADVERTISEMENT: u8 = 136;
/// Option: the sender's link-layer address (in solicitations).
pub const OPT_SOURCE_LL: u8 = 1;
/// Option: the target's link-layer address (in advertisements).
pub const OPT_TARGET_LL: u8 = 2;
/// Advertisement flag: a response to a solicitation.
pub const FLAG_SOLICITED: u8 = 0x40;
/// Advertisement flag: override an existing cache entry.
pub const FLAG_OVERRIDE: u8 = 0x20;

/// Bytes of a solicitation or advertisement with one link-layer address option.
pub const LEN_WITH_LL_OPTION: usize = 32;
const FIXED_LEN: usize = 24;

/// A neighbour solicitation or advertisement (the ICMPv6 message, options included).
#[derive(Debug, Clone, Copy)]
pub struct NdMessage<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> NdMessage<T> {
    /// A view of `buf` if it holds at least the fixed part of a solicitation or
    /// advertisement.
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < FIXED_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] != NEIGHBOR_SOLICITATION && b[0] != NEIGHBOR_ADVERTISEMENT {
            return Err(WireError::Malformed);
        }
        Ok(NdMessage { buf })
    }

    /// ICMPv6 type: neighbour solicitation or advertisement.
    pub fn msg_type(&self) -> u8 {
        self.buf.as_ref()[0]
    }

    /// The advertisement's R, S and O flags (the first byte after the checksum).
    pub fn flags(&self) -> u8 {
        self.buf.as_ref()[4]
    }

    /// The target address.
    pub fn target(&self) -> [u8; 16] {
        let mut t = [0u8; 16];
        t.copy_from_slice(&self.buf.as_ref()[8..FIXED_LEN]);
        t
    }

    /// The link-layer address option of `kind` ([`OPT_SOURCE_LL`] or [`OPT_TARGET_LL`]),
    /// if present and well formed; a zero-length option ends the walk (RFC 4861 §4.6).
    pub fn lladdr(&self, kind: u8) -> Option<MacAddr> {
        let mut opts = &self.buf.as_ref()[FIXED_LEN..];
        while opts.len() >= 8 {
            let len = usize::from(opts[1]) * 8;
            if len == 0 || len > opts.len() {
                return None;
            }
            if opts[0] == kind {
                let mut m = [0u8; 6];
                m.copy_from_slice(&opts[2..8]);
                return Some(m);
            }
            opts = &opts[len..];
        }
        None
    }
}

/// Writes a solicitation or advertisement for `target` with one link-layer address option
/// (`option`: its kind and the address) into the first [`LEN_WITH_LL_OPTION`] bytes of
/// `out`, its checksum over the IPv6 pseudo-header of `src` and `dst` filled.
pub fn emit(
    out: &mut [u8],
    msg_type: u8,
    flags: u8,
    target: [u8; 16],
    (kind, mac): (u8, MacAddr),
    (src, dst): (Ipv6Addr, Ipv6Addr),
) -> Result<()> {
    let m = out
        .get_mut(..LEN_WITH_LL_OPTION)
        .ok_or(WireError::Truncated)?;
    m.fill(0);
    m[0] = msg_type;
    m[4] = flags;
    m[8..FIXED_LEN].copy_from_slice(&target);
    m[24] = kind;
    m[25] = 1; // in units of 8 bytes
    m[26..32].copy_from_slice(&mac);
    let c = icmpv6_checksum(src, dst, m);
    m[2..4].copy_from_slice(&c.to_be_bytes());
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ipv6::Ipv6Repr;
    use crate::proto;

    fn hex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
            .collect()
    }

    fn packet(src: &str, dst: &str, msg: [u8; LEN_WITH_LL_OPTION]) -> Vec<u8> {
        let mut ip = vec![0u8; 40];
        Ipv6Repr {
            src: src.parse().unwrap(),
            dst: dst.parse().unwrap(),
            next_header: proto::ICMPV6,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 255,
            payload_len: LEN_WITH_LL_OPTION,
        }
        .emit(&mut ip)
        .unwrap();
        ip.extend_from_slice(&msg);
        ip
    }

    const MAC: MacAddr = [2, 0, 0, 0, 1, 1];

    /// Byte for byte what scapy 2.5 builds: `IPv6(src, dst, hlim=255) /
    /// ICMPv6ND_NA(tgt, R=0, S=1, O=1) / ICMPv6NDOptDstLLAddr(lladdr)`.
    #[test]
    fn advertisement_matches_scapy() {
        let (src, dst) = ("2001:db8:100::1", "2001:db8:100::2");
        let mut m = [0u8; LEN_WITH_LL_OPTION];
        let target: Ipv6Addr = src.parse().unwrap();
        emit(
            &mut m,
            NEIGHBOR_ADVERTISEMENT,
            FLAG_SOLICITED | FLAG_OVERRIDE,
            target.octets(),
            (OPT_TARGET_LL, MAC),
            (src.parse().unwrap(), dst.parse().unwrap()),
        )
        .unwrap();
        let scapy = hex(concat!(
            "6000000000203aff20010db801000000000000000000000120010db80100000000000000",
            "00000002880086736000000020010db80100000000000000000000010201020000000101"
        ));
        assert_eq!(packet(src, dst, m), scapy);
        let v = NdMessage::new_checked(&m[..]).unwrap();
        assert_eq!(v.msg_type(), NEIGHBOR_ADVERTISEMENT);
        assert_eq!(v.flags(), 0x60);
        assert_eq!(v.target(), target.octets());
        assert_eq!(v.lladdr(OPT_TARGET_LL), Some(MAC));
        assert_eq!(v.lladdr(OPT_SOURCE_LL), None);
        assert_eq!(
            icmpv6_checksum(src.parse().unwrap(), dst.parse().unwrap(), &m),
            0
        );
    }

    /// scapy: `IPv6(src, dst=ff02::1:ff00:2, hlim=255) / ICMPv6ND_NS(tgt) /
    /// ICMPv6NDOptSrcLLAddr(lladdr)`.
    #[test]
    fn solicitation_matches_scapy() {
        let (src, dst) = ("2001:db8:100::1", "ff02::1:ff00:2");
        let target: Ipv6Addr = "2001:db8:100::2".parse().unwrap();
        let mut m = [0u8; LEN_WITH_LL_OPTION];
        emit(
            &mut m,
            NEIGHBOR_SOLICITATION,
            0,
            target.octets(),
            (OPT_SOURCE_LL, MAC),
            (src.parse().unwrap(), dst.parse().unwrap()),
        )
        .unwrap();
        let scapy = hex(concat!(
            "6000000000203aff20010db8010000000000000000000001ff0200000000000000000001",
            "ff000002870019270000000020010db80100000000000000000000020101020000000101"
        ));
        assert_eq!(packet(src, dst, m), scapy);
        assert_eq!(
            NdMessage::new_checked(&m[..])
                .unwrap()
                .lladdr(OPT_SOURCE_LL),
            Some(MAC)
        );
    }

    #[test]
    fn refuses_short_or_other_messages_and_bad_options() {
        assert!(NdMessage::new_checked(&[135u8; 23][..]).is_err());
        let mut m = [0u8; 40];
        m[0] = 128; // echo request
        assert!(NdMessage::new_checked(&m[..]).is_err());
        m[0] = NEIGHBOR_ADVERTISEMENT;
        // A zero-length option, then an option running past the end: no address.
        m[24] = OPT_TARGET_LL;
        assert_eq!(
            NdMessage::new_checked(&m[..])
                .unwrap()
                .lladdr(OPT_TARGET_LL),
            None
        );
        m[25] = 3;
        assert_eq!(
            NdMessage::new_checked(&m[..])
                .unwrap()
                .lladdr(OPT_TARGET_LL),
            None
        );
        assert!(emit(
            &mut [0u8; 31],
            136,
            0,
            [0; 16],
            (2, MAC),
            (Ipv6Addr::UNSPECIFIED, Ipv6Addr::UNSPECIFIED)
        )
        .is_err());
    }
}
