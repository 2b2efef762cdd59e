//! Classic pcap files (microsecond and nanosecond variants, either byte order).
//!
//! Link types: Ethernet (1), and raw IP (101, 12, 228 IPv4, 229 IPv6). The pipeline works
//! on Ethernet frames, so raw-IP packets get a synthetic Ethernet header on reading and
//! lose it again on writing.

use std::fs::File;
use std::io::{self, BufReader, BufWriter, Read, Write};
use std::path::Path;

use espgw_core::packet::{Packet, PacketPool};
use espgw_wire::ethernet::{self, ETHERTYPE_IPV4, ETHERTYPE_IPV6};

use crate::port::Port;

pub const LINKTYPE_ETHERNET: u32 = 1;
pub const LINKTYPE_RAW: u32 = 101;
const LINKTYPE_RAW_BSD: u32 = 12;
const LINKTYPE_IPV4: u32 = 228;
const LINKTYPE_IPV6: u32 = 229;

/// The largest record accepted; bigger records are an error, not an allocation.
const MAX_RECORD: u32 = 262_144;

fn is_raw(link: u32) -> bool {
    matches!(
        link,
        LINKTYPE_RAW | LINKTYPE_RAW_BSD | LINKTYPE_IPV4 | LINKTYPE_IPV6
    )
}

/// A pcap reader that is also a receive port.
pub struct PcapReader<R: Read> {
    r: R,
    swapped: bool,
    nanos: bool,
    link: u32,
    name: String,
    buf: Vec<u8>,
    /// Records too large for a packet buffer, skipped.
    pub oversized: u64,
}

impl PcapReader<BufReader<File>> {
    pub fn open(path: &Path) -> io::Result<Self> {
        let f = File::open(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Self::new(BufReader::new(f), path.display().to_string())
    }
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl<R: Read> PcapReader<R> {
    pub fn new(mut r: R, name: String) -> io::Result<Self> {
        let mut h = [0u8; 24];
        r.read_exact(&mut h)
            .map_err(|_| bad(format!("{name}: not a pcap file (too short)")))?;
        let magic = u32::from_le_bytes([h[0], h[1], h[2], h[3]]);
        let (swapped, nanos) = match magic {
            0xa1b2_c3d4 => (false, false),
            0xa1b2_3c4d => (false, true),
            0xd4c3_b2a1 => (true, false),
            0x4d3c_b2a1 => (true, true),
            0x0a0d_0d0a => {
                return Err(bad(format!(
                    "{name}: pcapng is not supported; convert with `editcap -F pcap`"
                )))
            }
            _ => {
                return Err(bad(format!(
                    "{name}: not a pcap file (magic {magic:#010x})"
                )))
            }
        };
        let rd = |b: &[u8]| {
            let v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
            if swapped {
                v.swap_bytes()
            } else {
                v
            }
        };
        let link = rd(&h[20..24]) & 0x0fff_ffff;
        if link != LINKTYPE_ETHERNET && !is_raw(link) {
            return Err(bad(format!(
                "{name}: link type {link} not supported (Ethernet or raw IP)"
            )));
        }
        Ok(PcapReader {
            r,
            swapped,
            nanos,
            link,
            name,
            buf: Vec::new(),
            oversized: 0,
        })
    }

    pub fn link_type(&self) -> u32 {
        self.link
    }

    fn u32(&self, b: &[u8]) -> u32 {
        let v = u32::from_le_bytes([b[0], b[1], b[2], b[3]]);
        if self.swapped {
            v.swap_bytes()
        } else {
            v
        }
    }

    /// The next record as (timestamp in ns, bytes), or `None` at the end.
    pub fn next_record(&mut self) -> io::Result<Option<(u64, &[u8])>> {
        // The end of the file is clean only between records: part of a header is a
        // truncated capture, and says so.
        let mut h = [0u8; 16];
        let mut got = 0;
        while got < h.len() {
            match self.r.read(&mut h[got..]) {
                Ok(0) => break,
                Ok(n) => got += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        match got {
            0 => return Ok(None),
            16 => {}
            n => {
                return Err(bad(format!(
                    "{}: truncated record header ({n} of 16 bytes)",
                    self.name
                )))
            }
        }
        let (sec, frac, incl) = (self.u32(&h[0..4]), self.u32(&h[4..8]), self.u32(&h[8..12]));
        if incl > MAX_RECORD {
            return Err(bad(format!("{}: record of {incl} bytes", self.name)));
        }
        self.buf.resize(incl as usize, 0);
        self.r
            .read_exact(&mut self.buf)
            .map_err(|_| bad(format!("{}: truncated record", self.name)))?;
        let ns =
            u64::from(sec) * 1_000_000_000 + u64::from(frac) * if self.nanos { 1 } else { 1000 };
        Ok(Some((ns, &self.buf)))
    }

    /// Loads the next record into `p` as an Ethernet frame.
    pub fn next_packet(&mut self, p: &mut Packet) -> io::Result<bool> {
        loop {
            let link = self.link;
            let Some((ts, rec)) = self.next_record()? else {
                return Ok(false);
            };
            p.timestamp_ns = ts;
            let loaded = if is_raw(link) {
                let et = match rec.first().map(|b| b >> 4) {
                    Some(6) => ETHERTYPE_IPV6,
                    _ => ETHERTYPE_IPV4,
                };
                let mut eth = [0u8; ethernet::HEADER_LEN];
                let _ = ethernet::emit(&mut eth, [0; 6], [0; 6], et);
                p.load_parts(&eth, rec)
            } else {
                p.load(rec)
            };
            if loaded.is_ok() {
                return Ok(true);
            }
            self.oversized += 1;
        }
    }
}

impl<R: Read> Port for PcapReader<R> {
    fn kind(&self) -> &'static str {
        "pcap"
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn rx_burst(
        &mut self,
        pool: &mut PacketPool,
        out: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            let mut p = pool.get();
            if !self.next_packet(&mut p)? {
                pool.put(p);
                break;
            }
            out.push(p);
            n += 1;
        }
        Ok(n)
    }
    fn tx_burst(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        let n = pkts.len();
        for p in pkts.drain(..) {
            pool.put(p);
        }
        Ok(n)
    }
}

/// A pcap writer that is also a transmit port.
pub struct PcapWriter<W: Write> {
    w: W,
    link: u32,
    name: String,
    pub written: u64,
}

impl PcapWriter<BufWriter<File>> {
    pub fn create(path: &Path, link: u32) -> io::Result<Self> {
        let f = File::create(path)
            .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display())))?;
        Self::new(BufWriter::new(f), link, path.display().to_string())
    }
}

impl<W: Write> PcapWriter<W> {
    /// Writes a microsecond pcap header. Raw-IP link types are written as 101.
    pub fn new(mut w: W, link: u32, name: String) -> io::Result<Self> {
        let link = if is_raw(link) {
            LINKTYPE_RAW
        } else {
            LINKTYPE_ETHERNET
        };
        let mut h = Vec::with_capacity(24);
        h.extend_from_slice(&0xa1b2_c3d4u32.to_le_bytes());
        h.extend_from_slice(&2u16.to_le_bytes());
        h.extend_from_slice(&4u16.to_le_bytes());
        h.extend_from_slice(&0i32.to_le_bytes());
        h.extend_from_slice(&0u32.to_le_bytes());
        h.extend_from_slice(&65535u32.to_le_bytes());
        h.extend_from_slice(&link.to_le_bytes());
        w.write_all(&h)?;
        Ok(PcapWriter {
            w,
            link,
            name,
            written: 0,
        })
    }

    /// Writes one Ethernet frame (stripped to IP for raw link types).
    pub fn write_frame(&mut self, ts_ns: u64, frame: &[u8]) -> io::Result<()> {
        let body = if self.link == LINKTYPE_RAW {
            frame.get(14..).unwrap_or(&[])
        } else {
            frame
        };
        let mut h = [0u8; 16];
        h[0..4].copy_from_slice(&((ts_ns / 1_000_000_000) as u32).to_le_bytes());
        h[4..8].copy_from_slice(&(((ts_ns % 1_000_000_000) / 1000) as u32).to_le_bytes());
        h[8..12].copy_from_slice(&(body.len() as u32).to_le_bytes());
        h[12..16].copy_from_slice(&(body.len() as u32).to_le_bytes());
        self.w.write_all(&h)?;
        self.w.write_all(body)?;
        self.written += 1;
        Ok(())
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.w.flush()
    }
}

impl<W: Write> Port for PcapWriter<W> {
    fn kind(&self) -> &'static str {
        "pcap"
    }
    fn name(&self) -> &str {
        &self.name
    }
    fn rx_burst(&mut self, _: &mut PacketPool, _: &mut Vec<Packet>, _: usize) -> io::Result<usize> {
        Ok(0)
    }
    fn tx_burst(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        let n = pkts.len();
        for p in pkts.drain(..) {
            self.write_frame(p.timestamp_ns, p.data())?;
            pool.put(p);
        }
        Ok(n)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_ethernet_and_raw() {
        for link in [LINKTYPE_ETHERNET, LINKTYPE_RAW] {
            let mut out = Vec::new();
            let mut w = PcapWriter::new(&mut out, link, "mem".into()).unwrap();
            let mut frame = vec![0u8; 14];
            frame[12] = 0x08;
            frame.extend_from_slice(&[
                0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
            ]);
            w.write_frame(1_500_000_000_123_000, &frame).unwrap();
            w.flush().unwrap();
            drop(w);
            let mut r = PcapReader::new(&out[..], "mem".into()).unwrap();
            let mut p = Packet::new();
            assert!(r.next_packet(&mut p).unwrap());
            assert_eq!(p.data(), &frame[..]);
            assert_eq!(p.timestamp_ns, 1_500_000_000_123_000);
            assert!(!r.next_packet(&mut p).unwrap());
        }
    }

    #[test]
    fn a_truncated_last_record_is_an_error_not_the_end() {
        let mut out = Vec::new();
        let mut w = PcapWriter::new(&mut out, LINKTYPE_RAW, "mem".into()).unwrap();
        let ip = [
            0x45, 0, 0, 20, 0, 0, 0, 0, 64, 17, 0, 0, 192, 0, 2, 1, 192, 0, 2, 2,
        ];
        w.write_frame(1, &ip).unwrap();
        w.write_frame(2, &ip).unwrap();
        w.flush().unwrap();
        drop(w);
        // The file header, then two records of the same size.
        let second = 24 + (out.len() - 24) / 2;
        // Cut inside the second record's header, then inside its data.
        for cut in [second + 1, second + 15, out.len() - 1] {
            let mut r = PcapReader::new(&out[..cut], "cut".into()).unwrap();
            assert!(
                r.next_record().unwrap().is_some(),
                "the first record is whole"
            );
            let e = r.next_record().expect_err("a truncated record is an error");
            assert!(e.to_string().contains("cut: truncated record"), "{e}");
        }
        // Cut exactly between records: a clean end.
        let mut r = PcapReader::new(&out[..second], "cut".into()).unwrap();
        assert!(r.next_record().unwrap().is_some());
        assert!(r.next_record().unwrap().is_none());
    }

    #[test]
    fn rejects_garbage() {
        assert!(PcapReader::new(&[0u8; 10][..], "x".into()).is_err());
        assert!(PcapReader::new(&[0u8; 24][..], "x".into()).is_err());
        let mut h = vec![
            0xd4, 0xc3, 0xb2, 0xa1, 2, 0, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0, 0, 1, 0, 0,
            0,
        ];
        h.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0x7f, 0, 0, 0, 0]);
        let mut r = PcapReader::new(&h[..], "x".into()).unwrap();
        assert!(
            r.next_record().is_err(),
            "a 2 GB record is refused, not allocated"
        );
    }
}
