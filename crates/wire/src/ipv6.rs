//! IPv6 headers (RFC 8200) and the walk over extension headers to the upper layer.

use std::net::Ipv6Addr;

use crate::{be16, checksum, proto, put16, Result, WireError};

/// The fixed header.
pub const HEADER_LEN: usize = 40;

/// Extension headers walked before giving up (a bound against crafted chains).
const MAX_EXT_HEADERS: usize = 8;

/// A checked view of an IPv6 packet: version 6, 40 bytes of header, and a payload length
/// that fits the buffer.
#[derive(Debug, Clone, Copy)]
pub struct Ipv6Packet<T: AsRef<[u8]>> {
    buf: T,
}

impl<T: AsRef<[u8]>> Ipv6Packet<T> {
    /// A view over `buf`, if it holds a version-6 header whose payload length fits the buffer.
    pub fn new_checked(buf: T) -> Result<Self> {
        let b = buf.as_ref();
        if b.len() < HEADER_LEN {
            return Err(WireError::Truncated);
        }
        if b[0] >> 4 != 6 {
            return Err(WireError::Malformed);
        }
        if HEADER_LEN + usize::from(be16(b, 4)) > b.len() {
            return Err(WireError::Truncated);
        }
        Ok(Ipv6Packet { buf })
    }

    fn b(&self) -> &[u8] {
        self.buf.as_ref()
    }
    /// Traffic class (DSCP and ECN).
    pub fn traffic_class(&self) -> u8 {
        let b = self.b();
        (b[0] << 4) | (b[1] >> 4)
    }
    /// Flow label.
    pub fn flow_label(&self) -> u32 {
        let b = self.b();
        (u32::from(b[1] & 0x0f) << 16) | (u32::from(b[2]) << 8) | u32::from(b[3])
    }
    /// Payload length from the header.
    pub fn payload_len(&self) -> usize {
        usize::from(be16(self.b(), 4))
    }
    /// Fixed header plus payload length.
    pub fn total_len(&self) -> usize {
        HEADER_LEN + self.payload_len()
    }
    /// The first next header.
    pub fn next_header(&self) -> u8 {
        self.b()[6]
    }
    /// Hop limit.
    pub fn hop_limit(&self) -> u8 {
        self.b()[7]
    }
    /// Source address.
    pub fn src(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[8..24]);
        Ipv6Addr::from(a)
    }
    /// Destination address.
    pub fn dst(&self) -> Ipv6Addr {
        let mut a = [0u8; 16];
        a.copy_from_slice(&self.b()[24..40]);
        Ipv6Addr::from(a)
    }
    /// The packet up to its payload length (link padding cut off).
    pub fn packet(&self) -> &[u8] {
        &self.b()[..self.total_len()]
    }

    /// Walks the extension headers (hop-by-hop, routing, fragment, destination options,
    /// AH) and returns where the upper layer starts.
    pub fn upper_layer(&self) -> Result<UpperLayer> {
        walk_extensions(self.packet(), self.next_header())
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> Ipv6Packet<T> {
    /// Sets the payload length.
    pub fn set_payload_len(&mut self, len: u16) {
        put16(self.buf.as_mut(), 4, len)
    }
    /// Sets the traffic class.
    pub fn set_traffic_class(&mut self, tc: u8) {
        let b = self.buf.as_mut();
        b[0] = 0x60 | (tc >> 4);
        b[1] = (b[1] & 0x0f) | (tc << 4);
    }
    /// Sets the first next header.
    pub fn set_next_header(&mut self, nh: u8) {
        self.buf.as_mut()[6] = nh;
    }
    /// Sets the hop limit.
    pub fn set_hop_limit(&mut self, hops: u8) {
        self.buf.as_mut()[7] = hops;
    }
    /// Source and destination exchanged (a reply in place).
    pub fn swap_addresses(&mut self) {
        let b = self.buf.as_mut();
        for i in 8..24 {
            b.swap(i, i + 16);
        }
    }
}

/// Where the upper-layer protocol starts inside an IPv6 packet.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UpperLayer {
    /// The upper-layer protocol (TCP, UDP, ICMPv6, ESP, ...; 59 when there is none).
    pub protocol: u8,
    /// Offset of the upper-layer header from the start of the IPv6 header.
    pub offset: usize,
    /// Offset of the byte holding `protocol` (byte 6 of the fixed header, or the first byte
    /// of the last extension header), so that the chain can be rewritten.
    pub next_header_at: usize,
    /// End of the headers that must stay in front of ESP in transport mode (hop-by-hop,
    /// routing, fragment: RFC 4303 §3.1.1) and the offset of their last next-header byte.
    pub per_hop_end: usize,
    /// Offset of the next-header byte that ends the per-hop headers (where ESP is named in transport mode).
    pub per_hop_next_header_at: usize,
    /// True if a fragment header with a non-zero offset was seen (no upper-layer ports).
    pub later_fragment: bool,
}

/// Walks extension headers starting after the fixed header.
pub fn walk_extensions(pkt: &[u8], first: u8) -> Result<UpperLayer> {
    let mut nh = first;
    let mut off = HEADER_LEN;
    let mut nh_at = 6;
    let mut per_hop_end = HEADER_LEN;
    let mut per_hop_nh_at = 6;
    let mut in_per_hop = true;
    let mut later_fragment = false;
    for _ in 0..MAX_EXT_HEADERS {
        let len = match nh {
            proto::HOPOPT | proto::ROUTING | proto::DSTOPTS => {
                let l = pkt.get(off + 1).ok_or(WireError::Truncated)?;
                (usize::from(*l) + 1) * 8
            }
            proto::FRAGMENT => {
                let fo = be16(pkt, off + 2);
                if pkt.len() < off + 8 {
                    return Err(WireError::Truncated);
                }
                if fo & 0xfff8 != 0 {
                    later_fragment = true;
                }
                8
            }
            proto::AH => {
                let l = pkt.get(off + 1).ok_or(WireError::Truncated)?;
                (usize::from(*l) + 2) * 4
            }
            _ => {
                return Ok(UpperLayer {
                    protocol: nh,
                    offset: off,
                    next_header_at: nh_at,
                    per_hop_end,
                    per_hop_next_header_at: per_hop_nh_at,
                    later_fragment,
                })
            }
        };
        if off + len > pkt.len() {
            return Err(WireError::Truncated);
        }
        let this = nh;
        nh_at = off;
        nh = pkt[off];
        off += len;
        // Destination options before a routing header belong in front as well, but a
        // plain trailing one is end-to-end and is protected.
        let stays_in_front = matches!(this, proto::HOPOPT | proto::ROUTING | proto::FRAGMENT)
            || (this == proto::DSTOPTS && nh == proto::ROUTING);
        if in_per_hop && stays_in_front {
            per_hop_end = off;
            per_hop_nh_at = nh_at;
        } else {
            in_per_hop = false;
        }
        if later_fragment {
            // Bytes after a non-first fragment header are not headers.
            return Ok(UpperLayer {
                protocol: nh,
                offset: off,
                next_header_at: nh_at,
                per_hop_end,
                per_hop_next_header_at: per_hop_nh_at,
                later_fragment,
            });
        }
    }
    Err(WireError::Malformed)
}

/// Fields of a fixed IPv6 header to emit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ipv6Repr {
    /// Source address.
    pub src: Ipv6Addr,
    /// Destination address.
    pub dst: Ipv6Addr,
    /// The first next header.
    pub next_header: u8,
    /// Traffic class.
    pub traffic_class: u8,
    /// Flow label (20 bits).
    pub flow_label: u32,
    /// Hop limit.
    pub hop_limit: u8,
    /// Payload length.
    pub payload_len: usize,
}

impl Ipv6Repr {
    /// Writes the fixed header into the first 40 bytes of `out`.
    pub fn emit(&self, out: &mut [u8]) -> Result<()> {
        let len = u16::try_from(self.payload_len).map_err(|_| WireError::Malformed)?;
        let h = out.get_mut(..HEADER_LEN).ok_or(WireError::Truncated)?;
        let fl = self.flow_label & 0x000f_ffff;
        h[0] = 0x60 | (self.traffic_class >> 4);
        h[1] = (self.traffic_class << 4) | (fl >> 16) as u8;
        h[2] = (fl >> 8) as u8;
        h[3] = fl as u8;
        h[4..6].copy_from_slice(&len.to_be_bytes());
        h[6] = self.next_header;
        h[7] = self.hop_limit;
        h[8..24].copy_from_slice(&self.src.octets());
        h[24..40].copy_from_slice(&self.dst.octets());
        Ok(())
    }
}

/// Sum of the IPv6 pseudo-header for upper-layer checksums.
pub fn pseudo_header_sum(src: Ipv6Addr, dst: Ipv6Addr, proto: u8, len: usize) -> u32 {
    let mut p = [0u8; 40];
    p[0..16].copy_from_slice(&src.octets());
    p[16..32].copy_from_slice(&dst.octets());
    p[32..36].copy_from_slice(&(len as u32).to_be_bytes());
    p[39] = proto;
    checksum::sum(&p, 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn setters_write_hop_limit_and_swap_addresses() {
        let mut b = [0u8; 40];
        Ipv6Repr {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            next_header: 17,
            traffic_class: 0,
            flow_label: 0,
            hop_limit: 9,
            payload_len: 0,
        }
        .emit(&mut b)
        .unwrap();
        let mut p = Ipv6Packet::new_checked(&mut b[..]).unwrap();
        p.set_hop_limit(8);
        p.swap_addresses();
        assert_eq!(p.hop_limit(), 8);
        assert_eq!(p.src(), "2001:db8::2".parse::<Ipv6Addr>().unwrap());
        assert_eq!(p.dst(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
    }

    fn v6(next: u8, payload: &[u8]) -> Vec<u8> {
        let mut p = vec![0u8; 40];
        Ipv6Repr {
            src: "2001:db8::1".parse().unwrap(),
            dst: "2001:db8::2".parse().unwrap(),
            next_header: next,
            traffic_class: 0xb8,
            flow_label: 0x12345,
            hop_limit: 64,
            payload_len: payload.len(),
        }
        .emit(&mut p)
        .unwrap();
        p.extend_from_slice(payload);
        p
    }

    #[test]
    fn fixed_header_round_trip() {
        let p = v6(17, &[0; 8]);
        let v = Ipv6Packet::new_checked(&p[..]).unwrap();
        assert_eq!(v.traffic_class(), 0xb8);
        assert_eq!(v.flow_label(), 0x12345);
        assert_eq!(v.hop_limit(), 64);
        assert_eq!(v.src(), "2001:db8::1".parse::<Ipv6Addr>().unwrap());
        let u = v.upper_layer().unwrap();
        assert_eq!((u.protocol, u.offset), (17, 40));
    }

    #[test]
    fn walks_hop_by_hop_routing_and_dest_options() {
        // HBH (8) -> Routing (24) -> DstOpts (8) -> UDP
        let mut ext = vec![43, 0, 1, 4, 0, 0, 0, 0];
        ext.extend_from_slice(&[60, 2, 0, 0, 0, 0, 0, 0]);
        ext.extend_from_slice(&[0; 16]);
        ext.extend_from_slice(&[17, 0, 1, 4, 0, 0, 0, 0]);
        ext.extend_from_slice(&[0x12, 0x34, 0x00, 0x35, 0, 8, 0, 0]);
        let p = v6(0, &ext);
        let u = Ipv6Packet::new_checked(&p[..])
            .unwrap()
            .upper_layer()
            .unwrap();
        assert_eq!(u.protocol, 17);
        assert_eq!(u.offset, 40 + 8 + 24 + 8);
        assert_eq!(u.per_hop_end, 40 + 8 + 24);
        assert_eq!(u.next_header_at, 40 + 8 + 24);
    }

    #[test]
    fn truncated_extension_is_an_error() {
        let p = v6(0, &[17, 4, 0, 0]);
        assert_eq!(
            Ipv6Packet::new_checked(&p[..]).unwrap().upper_layer(),
            Err(WireError::Truncated)
        );
    }

    #[test]
    fn endless_chain_is_bounded() {
        let mut ext = Vec::new();
        for _ in 0..20 {
            ext.extend_from_slice(&[60, 0, 0, 0, 0, 0, 0, 0]);
        }
        let p = v6(60, &ext);
        assert_eq!(
            Ipv6Packet::new_checked(&p[..]).unwrap().upper_layer(),
            Err(WireError::Malformed)
        );
    }
}
