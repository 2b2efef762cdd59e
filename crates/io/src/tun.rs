//! TUN port: for a host that sends its own traffic into the tunnel. The kernel hands us
//! IP packets without a link layer; the port adds an Ethernet header on receive (so the
//! pipeline sees the same frames as from any port) and strips it on transmit.
#![allow(unsafe_code)]

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use espgw_core::packet::{Packet, PacketPool, MAX_FRAME};
use espgw_wire::ethernet::{MacAddr, ETHERTYPE_IPV4, ETHERTYPE_IPV6, HEADER_LEN};

use crate::port::{Port, PortStats};

const IFF_TUN: libc::c_short = 0x0001;
const IFF_NO_PI: libc::c_short = 0x1000;
const IFF_MULTI_QUEUE: libc::c_short = 0x0100;
const TUNSETIFF: libc::c_ulong = 0x4004_54ca;

#[repr(C)]
struct IfReq {
    name: [u8; 16],
    flags: libc::c_short,
    _pad: [u8; 22],
}

pub struct TunPort {
    name: String,
    file: File,
    mac: MacAddr,
    stats: PortStats,
    buf: Vec<u8>,
}

impl TunPort {
    /// Creates (or attaches to) TUN interface `ifname`; `mac` is the port's MAC as the
    /// pipeline knows it (frames from the TUN carry it as destination).
    pub fn open(ifname: &str, mac: MacAddr) -> io::Result<Self> {
        Self::open_with(ifname, mac, IFF_TUN | IFF_NO_PI)
    }

    /// `n` queues of multi-queue TUN interface `ifname` (created, or attached to if it
    /// exists as a multi-queue device), one per worker: the kernel spreads the host's
    /// flows over the queues, and each queue's owner writes its own packets to the host.
    /// An existing single-queue device refuses (`EINVAL`).
    pub fn open_queues(ifname: &str, mac: MacAddr, n: usize) -> io::Result<Vec<Self>> {
        (0..n)
            .map(|_| Self::open_with(ifname, mac, IFF_TUN | IFF_NO_PI | IFF_MULTI_QUEUE))
            .collect()
    }

    fn open_with(ifname: &str, mac: MacAddr, flags: libc::c_short) -> io::Result<Self> {
        if ifname.is_empty() || ifname.len() > 15 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("'{ifname}' is not an interface name"),
            ));
        }
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open("/dev/net/tun")
            .map_err(|e| io::Error::new(e.kind(), format!("/dev/net/tun: {e}")))?;
        let mut req = IfReq {
            name: [0; 16],
            flags,
            _pad: [0; 22],
        };
        req.name[..ifname.len()].copy_from_slice(ifname.as_bytes());
        // SAFETY: TUNSETIFF reads and writes an ifreq, which `req` is (name, flags,
        // padding to the kernel's size), alive across the call.
        let r = unsafe { libc::ioctl(file.as_raw_fd(), TUNSETIFF, &mut req as *mut IfReq) };
        if r < 0 {
            let e = io::Error::last_os_error();
            return Err(io::Error::new(e.kind(), format!("TUN {ifname}: {e}")));
        }
        Ok(TunPort {
            name: ifname.to_string(),
            file,
            mac,
            stats: PortStats::default(),
            buf: vec![0; 65536],
        })
    }
}

impl Port for TunPort {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> &'static str {
        "tun"
    }

    fn rx_burst(
        &mut self,
        pool: &mut PacketPool,
        out: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            let len = match self.file.read(&mut self.buf) {
                Ok(l) => l,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            let ip = &self.buf[..len];
            let et = match ip.first().map(|b| b >> 4) {
                Some(4) => ETHERTYPE_IPV4,
                Some(6) => ETHERTYPE_IPV6,
                _ => {
                    self.stats.rx_dropped += 1;
                    continue;
                }
            };
            if len + HEADER_LEN > MAX_FRAME {
                self.stats.rx_dropped += 1;
                continue;
            }
            let mut head = [0u8; HEADER_LEN];
            head[..6].copy_from_slice(&self.mac);
            head[6..12].copy_from_slice(&[0x02, 0, 0, 0, 0xfe, 0xfe]);
            head[12..14].copy_from_slice(&et.to_be_bytes());
            let mut p = pool.get();
            if p.load_parts(&head, ip).is_err() {
                pool.put(p);
                self.stats.rx_dropped += 1;
                continue;
            }
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += len as u64;
            out.push(p);
            n += 1;
        }
        Ok(n)
    }

    fn tx_burst(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        let mut sent = 0;
        for p in pkts.drain(..) {
            let d = p.data();
            if d.len() > HEADER_LEN {
                // One write is one packet on a TUN device: all of it or nothing.
                let ip = &d[HEADER_LEN..];
                match self.file.write(ip) {
                    Ok(n) if n == ip.len() => {
                        sent += 1;
                        self.stats.tx_packets += 1;
                        self.stats.tx_bytes += ip.len() as u64;
                    }
                    _ => self.stats.tx_dropped += 1,
                }
            }
            pool.put(p);
        }
        Ok(sent)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.file.as_raw_fd())
    }

    fn stats(&mut self) -> PortStats {
        self.stats
    }
}
