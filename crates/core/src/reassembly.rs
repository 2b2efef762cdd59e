//! Reassembly of fragmented ESP addressed to the gateway (IPv4 and IPv6), with bounded
//! memory: at most [`MAX_DATAGRAMS`] datagrams in flight per worker, at most
//! [`MAX_PER_SOURCE`] of them from one source address, each at most [`MAX_DATAGRAM`] bytes
//! (what a packet buffer holds), dropped after [`TIMEOUT`]. A new datagram that finds the
//! table full evicts the oldest one (its source's own oldest when that source is at its
//! limit), so a flood of spoofed first fragments cannot lock honest senders out: it only
//! shortens everyone's reassembly window, and one source cannot take more than its share.
//! Overlapping fragments drop the whole datagram (RFC 5722; for IPv4 too, since no
//! honest sender overlaps and overlaps are an evasion technique).

use std::time::{Duration, Instant};

use espgw_wire::checksum;
use espgw_wire::ethernet::HEADER_LEN;

use crate::packet::{Packet, MAX_FRAME};

/// Datagrams reassembled at once, at most; a full table evicts the oldest.
pub const MAX_DATAGRAMS: usize = 64;
/// Datagrams one source may have in reassembly at once; more evict that source's oldest.
pub const MAX_PER_SOURCE: usize = 16;
/// The largest reassembled IP datagram (it must fit a packet buffer with its Ethernet
/// header).
pub const MAX_DATAGRAM: usize = MAX_FRAME - HEADER_LEN;
/// A datagram not complete this long after its first fragment is dropped.
pub const TIMEOUT: Duration = Duration::from_secs(2);
const BLOCKS: usize = MAX_DATAGRAM.div_ceil(8);

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
struct Key {
    v4: bool,
    src: u128,
    dst: u128,
    id: u32,
    proto: u8,
}

struct Datagram {
    key: Key,
    started: Instant,
    /// Ethernet header and unfragmentable IP header, from the first fragment.
    header: Vec<u8>,
    payload: Box<[u8]>,
    have: [u64; BLOCKS.div_ceil(64)],
    /// Payload length, once the last fragment arrived.
    total: Option<usize>,
}

/// Result of offering a fragment.
#[derive(Debug, PartialEq, Eq)]
pub enum Reassembled {
    /// Kept; the datagram is not complete yet.
    Pending,
    /// The fragment was dropped (malformed, overlapping, too large, no room).
    Dropped,
    /// Complete: the packet now holds the whole datagram (with its Ethernet header).
    Complete,
}

#[derive(Default)]
/// IPv4 and IPv6 reassembly (RFC 791, RFC 8200 §4.5) of fragments addressed to the gateway, bounded in datagrams, per source and in time.
pub struct Reassembler {
    slots: Vec<Datagram>,
    /// Datagrams dropped because they were not complete in [`TIMEOUT`].
    pub timeouts: u64,
    /// Datagrams evicted to make room, not yet taken by [`Reassembler::take_evicted`].
    evicted: u64,
}

struct Frag {
    key: Key,
    /// Header bytes to keep (Ethernet + IP without the fragment header).
    header_end: usize,
    /// IPv6: where the next-header byte that names the fragment header is.
    nh_at: Option<usize>,
    next_header: u8,
    offset: usize,
    more: bool,
    data: std::ops::Range<usize>,
}

fn parse(d: &[u8], hl: usize) -> Option<Frag> {
    let ip = d.get(hl..)?;
    match ip.first()? >> 4 {
        4 => {
            let ihl = usize::from(ip.first()? & 15) * 4;
            let total = usize::from(u16::from_be_bytes([*ip.get(2)?, *ip.get(3)?]));
            if ihl < 20 || total < ihl || total > ip.len() {
                return None;
            }
            let ff = u16::from_be_bytes([ip[6], ip[7]]);
            let mut src = [0u8; 4];
            src.copy_from_slice(&ip[12..16]);
            let mut dst = [0u8; 4];
            dst.copy_from_slice(&ip[16..20]);
            Some(Frag {
                key: Key {
                    v4: true,
                    src: u128::from(u32::from_be_bytes(src)),
                    dst: u128::from(u32::from_be_bytes(dst)),
                    id: u32::from(u16::from_be_bytes([ip[4], ip[5]])),
                    proto: ip[9],
                },
                header_end: hl + ihl,
                nh_at: None,
                next_header: ip[9],
                offset: usize::from(ff & 0x1fff) * 8,
                more: ff & 0x2000 != 0,
                data: hl + ihl..hl + total,
            })
        }
        6 => {
            if ip.len() < 40 {
                return None;
            }
            let end = 40 + usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            if end > ip.len() {
                return None;
            }
            // Walk the unfragmentable part (hop-by-hop, routing, destination options).
            let mut nh = ip[6];
            let mut nh_at = 6;
            let mut off = 40;
            for _ in 0..8 {
                match nh {
                    0 | 43 | 60 => {
                        let len = (usize::from(*ip.get(off + 1)?) + 1) * 8;
                        nh_at = off;
                        nh = *ip.get(off)?;
                        off += len;
                    }
                    44 => break,
                    _ => return None,
                }
            }
            if nh != 44 || off + 8 > end {
                return None;
            }
            let fh = &ip[off..off + 8];
            let fo = u16::from_be_bytes([fh[2], fh[3]]);
            let mut src = [0u8; 16];
            src.copy_from_slice(&ip[8..24]);
            let mut dst = [0u8; 16];
            dst.copy_from_slice(&ip[24..40]);
            Some(Frag {
                key: Key {
                    v4: false,
                    src: u128::from_be_bytes(src),
                    dst: u128::from_be_bytes(dst),
                    id: u32::from_be_bytes([fh[4], fh[5], fh[6], fh[7]]),
                    proto: fh[0],
                },
                header_end: hl + off,
                nh_at: Some(hl + nh_at),
                next_header: fh[0],
                offset: usize::from(fo >> 3) * 8,
                more: fo & 1 != 0,
                data: hl + off + 8..hl + end,
            })
        }
        _ => None,
    }
}

impl Reassembler {
    /// Datagrams being reassembled now.
    pub fn in_flight(&self) -> usize {
        self.slots.len()
    }

    /// Drops datagrams older than [`TIMEOUT`]; returns how many.
    pub fn expire(&mut self, now: Instant) -> usize {
        let before = self.slots.len();
        self.slots
            .retain(|d| now.saturating_duration_since(d.started) < TIMEOUT);
        let n = before - self.slots.len();
        self.timeouts += n as u64;
        n
    }

    /// Offers the fragment in `p` (Ethernet header of `hl` bytes at its start). On
    /// `Complete`, `p` holds the reassembled datagram.
    pub fn offer(&mut self, p: &mut Packet, hl: usize, now: Instant) -> Reassembled {
        self.expire(now);
        let Some(f) = parse(p.data(), hl) else {
            return Reassembled::Dropped;
        };
        let len = f.data.len();
        let end = f.offset + len;
        // Every fragment but the last carries a multiple of 8 bytes.
        if end > MAX_DATAGRAM || (f.more && len % 8 != 0) || len == 0 {
            self.remove(f.key);
            return Reassembled::Dropped;
        }
        let i = match self.slots.iter().position(|d| d.key == f.key) {
            Some(i) => i,
            None => {
                self.make_room(&f.key);
                self.slots.push(Datagram {
                    key: f.key,
                    started: now,
                    header: Vec::new(),
                    payload: vec![0u8; MAX_DATAGRAM].into_boxed_slice(),
                    have: [0; BLOCKS.div_ceil(64)],
                    total: None,
                });
                self.slots.len() - 1
            }
        };
        let d = &mut self.slots[i];
        let first = f.offset / 8;
        let last = end.div_ceil(8);
        let overlap = (first..last).any(|b| d.have[b / 64] & (1 << (b % 64)) != 0);
        let bad_end = match (f.more, d.total) {
            (false, Some(t)) => t != end,
            (false, None) => false,
            (true, Some(t)) => end > t,
            (true, None) => false,
        };
        if overlap || bad_end {
            self.slots.swap_remove(i);
            return Reassembled::Dropped;
        }
        for b in first..last {
            d.have[b / 64] |= 1 << (b % 64);
        }
        d.payload[f.offset..end].copy_from_slice(&p.data()[f.data.clone()]);
        if !f.more {
            d.total = Some(end);
        }
        if f.offset == 0 {
            let mut h = p.data()[..f.header_end].to_vec();
            if let Some(at) = f.nh_at {
                h[at] = f.next_header;
            }
            d.header = h;
        }
        let Some(total) = d.total else {
            return Reassembled::Pending;
        };
        let blocks = total.div_ceil(8);
        let complete =
            !d.header.is_empty() && (0..blocks).all(|b| d.have[b / 64] & (1 << (b % 64)) != 0);
        if !complete {
            return Reassembled::Pending;
        }
        let d = self.slots.swap_remove(i);
        if p.load_parts(&d.header, &d.payload[..total]).is_err() {
            return Reassembled::Dropped;
        }
        let ip = &mut p.data_mut()[hl..];
        let ip_hdr = d.header.len() - hl;
        if d.key.v4 {
            ip[2..4].copy_from_slice(&((ip_hdr + total) as u16).to_be_bytes());
            ip[6] = 0;
            ip[7] = 0;
            ip[10] = 0;
            ip[11] = 0;
            let c = checksum::checksum(&ip[..ip_hdr]);
            ip[10..12].copy_from_slice(&c.to_be_bytes());
        } else {
            ip[4..6].copy_from_slice(&((ip_hdr - 40 + total) as u16).to_be_bytes());
        }
        Reassembled::Complete
    }

    /// Evicts the oldest datagram of `key`'s source when that source is at its limit, else
    /// the oldest of all when the table is full.
    fn make_room(&mut self, key: &Key) {
        let same_source = |d: &Datagram| d.key.v4 == key.v4 && d.key.src == key.src;
        let from_source = self.slots.iter().filter(|d| same_source(d)).count();
        let victim = if from_source >= MAX_PER_SOURCE {
            self.oldest(|d| same_source(d))
        } else if self.slots.len() >= MAX_DATAGRAMS {
            self.oldest(|_| true)
        } else {
            None
        };
        if let Some(i) = victim {
            self.slots.swap_remove(i);
            self.evicted += 1;
        }
    }

    fn oldest(&self, which: impl Fn(&Datagram) -> bool) -> Option<usize> {
        self.slots
            .iter()
            .enumerate()
            .filter(|(_, d)| which(d))
            .min_by_key(|(_, d)| d.started)
            .map(|(i, _)| i)
    }

    /// Datagrams evicted since the last call (each is a `reassembly` drop).
    pub fn take_evicted(&mut self) -> u64 {
        std::mem::take(&mut self.evicted)
    }

    fn remove(&mut self, key: Key) {
        self.slots.retain(|d| d.key != key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fragment::fragment_v4;

    fn eth(v4: bool) -> Vec<u8> {
        let mut e = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
        e.extend_from_slice(if v4 { &[8, 0] } else { &[0x86, 0xdd] });
        e
    }

    fn v4_packet(len: usize) -> Vec<u8> {
        let mut ip = vec![0u8; len];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        ip[4] = 7;
        ip[8] = 64;
        ip[9] = 50;
        ip[12..16].copy_from_slice(&[192, 0, 2, 2]);
        ip[16..20].copy_from_slice(&[192, 0, 2, 1]);
        for (i, b) in ip[20..].iter_mut().enumerate() {
            *b = (i * 7) as u8;
        }
        let c = checksum::checksum(&ip[..20]);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        ip
    }

    fn with_eth(f: &Packet, v4: bool) -> Packet {
        let mut p = Packet::new();
        p.load_parts(&eth(v4), f.data()).unwrap();
        p
    }

    #[test]
    fn v4_in_any_order() {
        let ip = v4_packet(2000);
        let mut frags = Vec::new();
        assert_eq!(fragment_v4(&ip, 600, Packet::new, &mut frags), 4);
        let mut r = Reassembler::default();
        let now = Instant::now();
        let order = [2, 0, 3, 1];
        for (k, &i) in order.iter().enumerate() {
            let mut p = with_eth(&frags[i], true);
            let res = r.offer(&mut p, 14, now);
            if k < 3 {
                assert_eq!(res, Reassembled::Pending);
            } else {
                assert_eq!(res, Reassembled::Complete);
                assert_eq!(&p.data()[14..], &ip[..]);
            }
        }
        assert_eq!(r.in_flight(), 0);
    }

    #[test]
    fn overlap_timeout_and_bounds() {
        let ip = v4_packet(2000);
        let mut frags = Vec::new();
        fragment_v4(&ip, 600, Packet::new, &mut frags);
        let mut r = Reassembler::default();
        let now = Instant::now();
        let mut p = with_eth(&frags[0], true);
        assert_eq!(r.offer(&mut p, 14, now), Reassembled::Pending);
        let mut p = with_eth(&frags[0], true);
        assert_eq!(r.offer(&mut p, 14, now), Reassembled::Dropped, "overlap");
        assert_eq!(r.in_flight(), 0);
        let mut p = with_eth(&frags[1], true);
        assert_eq!(r.offer(&mut p, 14, now), Reassembled::Pending);
        assert_eq!(r.expire(now + TIMEOUT), 1);
        // Many datagrams from one source: it keeps at most its share.
        for id in 0..(MAX_DATAGRAMS + 10) {
            let mut p = first_of(&frags[1], id as u16, [192, 0, 2, 2]);
            assert_eq!(r.offer(&mut p, 14, now), Reassembled::Pending);
        }
        assert_eq!(r.in_flight(), MAX_PER_SOURCE);
        assert_eq!(
            r.take_evicted(),
            (MAX_DATAGRAMS + 10 - MAX_PER_SOURCE) as u64
        );
    }

    /// Fragment `f` with IP id `id` from `src` (checksum not fixed: reassembly ignores it).
    fn first_of(f: &Packet, id: u16, src: [u8; 4]) -> Packet {
        let mut d = f.data().to_vec();
        d[4..6].copy_from_slice(&id.to_be_bytes());
        d[12..16].copy_from_slice(&src);
        let mut p = Packet::new();
        p.load_parts(&eth(true), &d).unwrap();
        p
    }

    #[test]
    fn a_flood_of_spoofed_fragments_leaves_room_for_an_honest_datagram() {
        let ip = v4_packet(2000);
        let mut frags = Vec::new();
        fragment_v4(&ip, 600, Packet::new, &mut frags);
        let mut r = Reassembler::default();
        let t0 = Instant::now();
        // 10,000 never-completed datagrams from 1,000 spoofed sources, within one timeout.
        for n in 0..10_000u32 {
            let src = (0xc633_6400 + n % 1000).to_be_bytes(); // 198.51.100.0 + n % 1000
            let mut p = first_of(&frags[1], n as u16, src);
            r.offer(&mut p, 14, t0);
            assert!(r.in_flight() <= MAX_DATAGRAMS);
        }
        assert_eq!(r.in_flight(), MAX_DATAGRAMS);
        assert_eq!(r.take_evicted(), 10_000 - MAX_DATAGRAMS as u64);
        // The honest datagram, its fragments among the flood's, completes.
        let later = t0 + Duration::from_millis(10);
        for (k, f) in frags.iter().enumerate() {
            let mut p = with_eth(f, true);
            let res = r.offer(&mut p, 14, later);
            if k + 1 < frags.len() {
                assert_eq!(res, Reassembled::Pending);
                let mut spoof = first_of(&frags[1], 60_000 + k as u16, [203, 0, 113, 9]);
                r.offer(&mut spoof, 14, later);
            } else {
                assert_eq!(res, Reassembled::Complete);
                assert_eq!(&p.data()[14..], &ip[..]);
            }
        }
    }

    #[test]
    fn v6_fragments() {
        // 40-byte header, fragment header, 1200 bytes of ESP payload in two pieces.
        let payload: Vec<u8> = (0..1200).map(|i| (i * 3) as u8).collect();
        let mut r = Reassembler::default();
        let now = Instant::now();
        let mut res = Reassembled::Dropped;
        let mut p = Packet::new();
        for (off, chunk, more) in [(0usize, 800usize, true), (800, 400, false)] {
            let mut ip = vec![0u8; 48];
            ip[0] = 0x60;
            ip[4..6].copy_from_slice(&((8 + chunk) as u16).to_be_bytes());
            ip[6] = 44;
            ip[7] = 64;
            ip[8] = 0x20;
            ip[24] = 0x20;
            ip[39] = 1;
            ip[40] = 50;
            let fo = ((off / 8) as u16) << 3 | u16::from(more);
            ip[42..44].copy_from_slice(&fo.to_be_bytes());
            ip[44..48].copy_from_slice(&9u32.to_be_bytes());
            ip.extend_from_slice(&payload[off..off + chunk]);
            p = Packet::new();
            p.load_parts(&eth(false), &ip).unwrap();
            res = r.offer(&mut p, 14, now);
        }
        assert_eq!(res, Reassembled::Complete);
        let d = &p.data()[14..];
        assert_eq!(d[6], 50, "fragment header removed");
        assert_eq!(usize::from(u16::from_be_bytes([d[4], d[5]])), 1200);
        assert_eq!(&d[40..], &payload[..]);
    }

    #[test]
    fn garbage_is_dropped_not_panicking() {
        let mut r = Reassembler::default();
        let now = Instant::now();
        let mut x: u32 = 99;
        for len in 0..200usize {
            let mut f = eth(len % 2 == 0);
            for _ in 0..len {
                x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
                f.push((x >> 16) as u8);
            }
            if f.len() > 14 {
                f[14] = if len % 2 == 0 { 0x45 } else { 0x60 };
            }
            let mut p = Packet::new();
            p.load(&f).unwrap();
            let _ = r.offer(&mut p, 14, now);
        }
        assert!(r.in_flight() <= MAX_DATAGRAMS);
    }
}
