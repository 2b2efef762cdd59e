//! Test frames: what the generator sends and how the receiver recognises them.
//!
//! Every frame carries a 16-byte record: a signature (`MAGIC`), the trial it belongs to,
//! its stream, a sequence number and the transmit timestamp. The record sits where
//! even a 64-byte frame has room for it, per protocol:
//!
//! | frame | record head (magic, trial, stream, seq) | timestamp |
//! |---|---|---|
//! | UDP | payload bytes 0..8 | payload 8..16 |
//! | TCP-shaped | sequence and acknowledgement numbers | urgent pointer + payload 0..6 |
//! | ICMP echo | identifier, sequence number, payload 0..4 | payload 4..12 |
//!
//! Frame sizes are Ethernet frame sizes with the 4-byte FCS (RFC 2544), so a 64-byte
//! frame is 60 bytes on a veth, which has no FCS. Both record parts start at even
//! offsets of the L4 header, so the checksum is the template's sum plus the record's.

use std::net::IpAddr;

use espgw_wire::checksum;

pub const MAGIC: u16 = 0xE5B7;
const ETH: usize = 14;
const FCS: usize = 4;

/// The L4 shape of test frames.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum L4 {
    Udp,
    Tcp,
    Icmp,
}

impl L4 {
    fn header_len(self) -> usize {
        match self {
            L4::Udp | L4::Icmp => 8,
            L4::Tcp => 20,
        }
    }
    /// Offsets of the record head and the timestamp from the L4 header's start, and the
    /// bytes of L4 (header included) the record needs.
    fn record_at(self) -> (usize, usize, usize) {
        match self {
            L4::Udp => (8, 16, 24),
            L4::Tcp => (4, 18, 26),
            L4::Icmp => (4, 12, 20),
        }
    }
    fn proto(self, v4: bool) -> u8 {
        match (self, v4) {
            (L4::Udp, _) => 17,
            (L4::Tcp, _) => 6,
            (L4::Icmp, true) => 1,
            (L4::Icmp, false) => 58,
        }
    }
}

/// Who sends to whom.
#[derive(Debug, Clone)]
pub struct Flow {
    pub src_mac: [u8; 6],
    pub dst_mac: [u8; 6],
    pub src_ip: IpAddr,
    pub dst_ip: IpAddr,
    pub l4: L4,
    pub stream: u8,
    /// Which of the stream's flows (`--flows`): the UDP/TCP source port tells them apart,
    /// so that RSS and fanout can spread them.
    pub flow: u8,
}

/// The UDP/TCP source port of `stream`'s flow `flow`: 49152 + 256 x stream + flow, in the
/// dynamic range for any stream below 64.
pub fn source_port(stream: u8, flow: u8) -> u16 {
    49152 + (u16::from(stream) % 64) * 256 + u16::from(flow)
}

/// The smallest frame size (FCS included) that carries the record for this flow.
pub fn min_frame(v4: bool, l4: L4) -> usize {
    ETH + if v4 { 20 } else { 40 } + l4.record_at().2 + FCS
}

/// One prebuilt frame; [`Template::stamp`] writes a record into a copy of it.
#[derive(Debug, Clone)]
pub struct Template {
    pub bytes: Vec<u8>,
    v4: bool,
    head_at: usize,
    ts_at: usize,
    csum_at: Option<usize>,
    /// Checksum sum of the L4 pseudo header and segment with the record zeroed.
    base_sum: u32,
}

/// The record carried by a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Record {
    pub trial: u8,
    pub stream: u8,
    pub seq: u32,
    pub tx_ns: u64,
}

impl Template {
    /// A frame of `frame_size` bytes (FCS included) for `flow`; `frame_size` is the
    /// Ethernet frame size, or with `l3_size` the IP packet size.
    pub fn new(flow: &Flow, size: usize, l3_size: bool) -> Result<Template, String> {
        let v4 = flow.src_ip.is_ipv4();
        if v4 != flow.dst_ip.is_ipv4() {
            return Err("source and destination must be of one IP version".into());
        }
        let len = if l3_size {
            size + ETH
        } else {
            size.saturating_sub(FCS)
        };
        let min = min_frame(v4, flow.l4);
        if len + FCS < min {
            return Err(format!(
                "a {:?} frame over IPv{} needs at least {min} bytes, not {size}",
                flow.l4,
                if v4 { 4 } else { 6 }
            ));
        }
        if len > 9000 {
            return Err(format!("frame size {size} is larger than 9000 bytes"));
        }
        let mut b = vec![0u8; len];
        b[0..6].copy_from_slice(&flow.dst_mac);
        b[6..12].copy_from_slice(&flow.src_mac);
        let proto = flow.l4.proto(v4);
        let l4_off;
        let mut pseudo = 0u32;
        match (flow.src_ip, flow.dst_ip) {
            (IpAddr::V4(s), IpAddr::V4(d)) => {
                b[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
                let ip = &mut b[ETH..ETH + 20];
                ip[0] = 0x45;
                ip[2..4].copy_from_slice(&((len - ETH) as u16).to_be_bytes());
                ip[8] = 64;
                ip[9] = proto;
                ip[12..16].copy_from_slice(&s.octets());
                ip[16..20].copy_from_slice(&d.octets());
                let c = checksum::checksum(ip);
                ip[10..12].copy_from_slice(&c.to_be_bytes());
                l4_off = ETH + 20;
                if flow.l4 != L4::Icmp {
                    pseudo = checksum::sum(&ip[12..20], u32::from(proto) + (len - l4_off) as u32);
                }
            }
            (IpAddr::V6(s), IpAddr::V6(d)) => {
                b[12..14].copy_from_slice(&0x86DDu16.to_be_bytes());
                let ip = &mut b[ETH..ETH + 40];
                ip[0] = 0x60;
                ip[4..6].copy_from_slice(&((len - ETH - 40) as u16).to_be_bytes());
                ip[6] = proto;
                ip[7] = 64;
                ip[8..24].copy_from_slice(&s.octets());
                ip[24..40].copy_from_slice(&d.octets());
                l4_off = ETH + 40;
                pseudo = checksum::sum(&ip[8..40], u32::from(proto) + (len - l4_off) as u32);
            }
            _ => unreachable!("versions checked above"),
        }
        let sport = source_port(flow.stream, flow.flow);
        let l4 = &mut b[l4_off..];
        let csum_field = match flow.l4 {
            L4::Udp => {
                l4[0..2].copy_from_slice(&sport.to_be_bytes());
                l4[2..4].copy_from_slice(&9u16.to_be_bytes()); // discard
                let ul = l4.len() as u16;
                l4[4..6].copy_from_slice(&ul.to_be_bytes());
                // An IPv4 UDP checksum is optional: 0 leaves it out.
                (!v4).then_some(6)
            }
            L4::Tcp => {
                l4[0..2].copy_from_slice(&sport.to_be_bytes());
                l4[2..4].copy_from_slice(&9u16.to_be_bytes());
                l4[12] = 5 << 4;
                l4[13] = 0x18; // PSH, ACK: a data segment of an established connection
                l4[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
                Some(16)
            }
            L4::Icmp => {
                l4[0] = if v4 { 8 } else { 128 }; // echo request
                Some(2)
            }
        };
        // The rest of the payload: a recognisable fill (not zeroes, which compress).
        let start = flow.l4.record_at().2.max(flow.l4.header_len());
        for (i, x) in l4.iter_mut().enumerate().skip(start) {
            *x = (i as u8).wrapping_mul(31).wrapping_add(7);
        }
        let (h, t, _) = flow.l4.record_at();
        let base_sum = checksum::sum(l4, pseudo);
        Ok(Template {
            v4,
            head_at: l4_off + h,
            ts_at: l4_off + t,
            csum_at: csum_field.map(|c| l4_off + c),
            base_sum,
            bytes: b,
        })
    }

    /// The frame size this template stands for (FCS included).
    pub fn frame_size(&self) -> usize {
        self.bytes.len() + FCS
    }

    /// Writes `r` into `out` (a copy of the template, or the same buffer again).
    pub fn stamp(&self, out: &mut [u8], r: &Record) {
        if out.len() < self.bytes.len() {
            return;
        }
        let mut head = [0u8; 8];
        head[0..2].copy_from_slice(&MAGIC.to_be_bytes());
        head[2] = r.trial;
        head[3] = r.stream;
        head[4..8].copy_from_slice(&r.seq.to_be_bytes());
        let ts = r.tx_ns.to_be_bytes();
        out[self.head_at..self.head_at + 8].copy_from_slice(&head);
        out[self.ts_at..self.ts_at + 8].copy_from_slice(&ts);
        if let Some(c) = self.csum_at {
            let s = checksum::sum(&ts, checksum::sum(&head, self.base_sum));
            let mut v = checksum::finish(s);
            if v == 0 && !self.v4 {
                v = 0xffff; // UDP over IPv6: 0 means "no checksum", which is not allowed
            }
            out[c..c + 2].copy_from_slice(&v.to_be_bytes());
        }
        if self.v4 {
            // A datagram identifier per frame (the gateways may fragment large ones).
            let ip = &mut out[ETH..ETH + 20];
            ip[4..6].copy_from_slice(&(r.seq as u16).to_be_bytes());
            ip[10..12].copy_from_slice(&[0, 0]);
            let c = checksum::checksum(ip);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        }
    }
}

/// What the receiver makes of a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Record(Record),
    /// A non-first IP fragment (the first one carries the record).
    Fragment,
    /// Anything else: ARP, neighbour discovery, foreign traffic.
    Other,
}

/// Looks for a test record in a received frame; never panics on any input.
pub fn parse(f: &[u8]) -> Seen {
    let Some(et) = f.get(12..14) else {
        return Seen::Other;
    };
    let (proto, off) = match u16::from_be_bytes([et[0], et[1]]) {
        0x0800 => {
            let Some(ip) = f.get(ETH..ETH + 20) else {
                return Seen::Other;
            };
            if ip[0] >> 4 != 4 {
                return Seen::Other;
            }
            let ihl = usize::from(ip[0] & 0xf) * 4;
            if u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff != 0 {
                return Seen::Fragment;
            }
            (ip[9], ETH + ihl)
        }
        0x86DD => {
            let Some(ip) = f.get(ETH..ETH + 40) else {
                return Seen::Other;
            };
            if ip[6] == 44 {
                // Fragment header: only the first fragment has the L4 header.
                let Some(fh) = f.get(ETH + 40..ETH + 48) else {
                    return Seen::Other;
                };
                if u16::from_be_bytes([fh[2], fh[3]]) & 0xfff8 != 0 {
                    return Seen::Fragment;
                }
                (fh[0], ETH + 48)
            } else {
                (ip[6], ETH + 40)
            }
        }
        _ => return Seen::Other,
    };
    let l4 = match proto {
        17 => L4::Udp,
        6 => L4::Tcp,
        1 | 58 => L4::Icmp,
        _ => return Seen::Other,
    };
    let (h, t, _) = l4.record_at();
    let (Some(head), Some(ts)) = (f.get(off + h..off + h + 8), f.get(off + t..off + t + 8)) else {
        return Seen::Other;
    };
    if u16::from_be_bytes([head[0], head[1]]) != MAGIC {
        return Seen::Other;
    }
    let mut tsb = [0u8; 8];
    tsb.copy_from_slice(ts);
    Seen::Record(Record {
        trial: head[2],
        stream: head[3],
        seq: u32::from_be_bytes([head[4], head[5], head[6], head[7]]),
        tx_ns: u64::from_be_bytes(tsb),
    })
}

/// The IPsec IMIX (IP packet sizes and shares in 1/10000), after the published tests.
pub const IPSEC_IMIX: [(usize, u32); 4] = [(90, 5867), (92, 200), (594, 2366), (1418, 1567)];

/// A deterministic order of template indices with the given shares, spread evenly
/// (smooth weighted round robin), `len` long.
pub fn mix_pattern(weights: &[u32], len: usize) -> Vec<u8> {
    let total: i64 = weights.iter().map(|&w| i64::from(w)).sum();
    let mut current = vec![0i64; weights.len()];
    let mut out = Vec::with_capacity(len);
    for _ in 0..len {
        for (c, &w) in current.iter_mut().zip(weights) {
            *c += i64::from(w);
        }
        let (best, _) = current
            .iter()
            .enumerate()
            .max_by_key(|&(i, &c)| (c, std::cmp::Reverse(i)))
            .unwrap_or((0, &0));
        current[best] -= total;
        out.push(best as u8);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, Ipv6Addr};

    fn flow(v4: bool, l4: L4) -> Flow {
        let (s, d): (IpAddr, IpAddr) = if v4 {
            (
                Ipv4Addr::new(198, 51, 100, 20).into(),
                Ipv4Addr::new(203, 0, 113, 20).into(),
            )
        } else {
            (
                "2001:db8:100::20".parse::<Ipv6Addr>().unwrap().into(),
                "2001:db8:113::20".parse::<Ipv6Addr>().unwrap().into(),
            )
        };
        Flow {
            src_mac: [2, 0, 0, 0, 0, 1],
            dst_mac: [2, 0, 0, 0, 1, 1],
            src_ip: s,
            dst_ip: d,
            l4,
            stream: 3,
            flow: 0,
        }
    }

    /// Verifies the L4 checksum independently of the template's incremental sum.
    fn l4_checksum_ok(f: &[u8], v4: bool, l4: L4) -> bool {
        let (l4_off, proto) = if v4 { (34, f[23]) } else { (54, f[20]) };
        let seg = &f[l4_off..];
        if v4 && l4 == L4::Udp {
            return seg[6..8] == [0, 0];
        }
        let mut s = if v4 && l4 == L4::Icmp {
            0
        } else {
            let addrs = if v4 { &f[26..34] } else { &f[22..54] };
            checksum::sum(addrs, u32::from(proto) + seg.len() as u32)
        };
        s = checksum::sum(seg, s);
        checksum::finish(s) == 0
    }

    #[test]
    fn every_shape_carries_its_record_at_64_bytes_v4_and_84_v6() {
        for v4 in [true, false] {
            for l4 in [L4::Udp, L4::Tcp, L4::Icmp] {
                let size = if v4 { 64 } else { 84 };
                let t = Template::new(&flow(v4, l4), size, false).unwrap();
                assert_eq!(t.frame_size(), size);
                let mut buf = t.bytes.clone();
                let r = Record {
                    trial: 7,
                    stream: 3,
                    seq: 0xdead_beef,
                    tx_ns: 0x0102_0304_0506_0708,
                };
                t.stamp(&mut buf, &r);
                assert_eq!(parse(&buf), Seen::Record(r), "{l4:?} v4={v4}");
                assert!(l4_checksum_ok(&buf, v4, l4), "{l4:?} v4={v4}");
                if v4 {
                    assert_eq!(checksum::checksum(&buf[14..34]), 0, "IPv4 header checksum");
                }
            }
        }
    }

    #[test]
    fn too_small_frames_are_refused() {
        assert!(Template::new(&flow(false, L4::Udp), 64, false).is_err());
        assert!(Template::new(&flow(true, L4::Tcp), 63, false).is_err());
        assert_eq!(min_frame(true, L4::Udp), 62);
    }

    #[test]
    fn imix_sizes_are_ip_sizes() {
        let t = Template::new(&flow(true, L4::Udp), 90, true).unwrap();
        assert_eq!(t.bytes.len(), 104);
        assert_eq!(u16::from_be_bytes([t.bytes[16], t.bytes[17]]), 90);
    }

    #[test]
    fn non_first_fragments_and_foreign_frames() {
        let t = Template::new(&flow(true, L4::Udp), 128, false).unwrap();
        let mut f = t.bytes.clone();
        f[20] = 0x00;
        f[21] = 0xb9; // offset 185 * 8
        assert_eq!(parse(&f), Seen::Fragment);
        let g = t.bytes.clone(); // no record stamped: magic missing
        assert_eq!(parse(&g), Seen::Other);
        for n in 0..g.len() {
            let _ = parse(&g[..n]);
        }
    }

    proptest::proptest! {
        /// Received frames are hostile: any bytes, any length, no panic; and a stamped
        /// frame of any size reads back exactly.
        #[test]
        fn parse_never_panics(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200)) {
            let _ = parse(&bytes);
        }

        #[test]
        fn stamped_records_read_back(size in 64usize..1519, seq: u32, tx_ns: u64, tcp: bool) {
            let l4 = if tcp { L4::Tcp } else { L4::Udp };
            let t = Template::new(&flow(true, l4), size, false).unwrap();
            let mut buf = t.bytes.clone();
            let r = Record { trial: 1, stream: 0, seq, tx_ns };
            t.stamp(&mut buf, &r);
            proptest::prop_assert_eq!(parse(&buf), Seen::Record(r));
            proptest::prop_assert!(l4_checksum_ok(&buf, true, l4));
        }
    }

    #[test]
    fn imix_pattern_has_the_shares() {
        let w: Vec<u32> = IPSEC_IMIX.iter().map(|x| x.1).collect();
        let p = mix_pattern(&w, 10000);
        for (i, &(_, share)) in IPSEC_IMIX.iter().enumerate() {
            let n = p.iter().filter(|&&x| usize::from(x) == i).count();
            assert_eq!(n as u32, share);
        }
        // Spread: no more than 2 of the 1418-byte frames in any window of 10.
        assert!(p
            .windows(10)
            .all(|w| w.iter().filter(|&&x| x == 3).count() <= 2));
    }
}
