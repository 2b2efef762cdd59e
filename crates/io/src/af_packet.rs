//! AF_PACKET port with PACKET_MMAP rings (TPACKET_V2): the kernel writes received frames
//! into a receive ring shared with us, and sends what we place in a transmit ring on one
//! `send()` per burst. Works on any Linux interface; the fallback when AF_XDP does not
//! load, and an explicit choice.
//!
//! Several workers share a port through a fanout group (PACKET_FANOUT): the kernel
//! spreads frames over their sockets by flow hash, so one flow stays on one worker.
//!
//! The `unsafe` here is the I/O boundary: the socket calls and the ring memory that the
//! kernel shares with us. Each block says why it is sound.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU32, Ordering};

use espgw_core::packet::{Packet, PacketPool, MAX_FRAME};

use crate::port::{Port, PortStats};

const SOL_PACKET: libc::c_int = 263;
const PACKET_ADD_MEMBERSHIP: libc::c_int = 1;
const PACKET_RX_RING: libc::c_int = 5;
const PACKET_STATISTICS: libc::c_int = 6;
const PACKET_VERSION: libc::c_int = 10;
const PACKET_TX_RING: libc::c_int = 13;
const PACKET_FANOUT: libc::c_int = 18;
const PACKET_QDISC_BYPASS: libc::c_int = 20;
const PACKET_IGNORE_OUTGOING: libc::c_int = 23;
const TPACKET_V2: libc::c_int = 1;
const PACKET_MR_PROMISC: libc::c_ushort = 1;
/// `sll_pkttype` of a frame for another host's MAC (linux/if_packet.h).
const PACKET_OTHERHOST: u8 = 3;
/// `sll_pkttype` of a frame this host sent on the interface.
const PACKET_OUTGOING: u8 = 4;
/// A fanout group's own "do not deliver what this host sends" (Linux 6.2): the socket
/// option PACKET_IGNORE_OUTGOING covers only a socket outside a group, whose hook the
/// group's replaces.
const PACKET_FANOUT_FLAG_IGNORE_OUTGOING: u32 = 0x4000;
/// Where the kernel puts the frame's `sockaddr_ll` in a TPACKET_V2 slot: after the header
/// (32 bytes, already 16-aligned); `sll_pkttype` is its byte 10.
const SLL_PKTTYPE_OFFSET: usize = 32 + 10;
const ETH_P_ALL: u16 = 0x0003;

const TP_STATUS_KERNEL: u32 = 0;
const TP_STATUS_USER: u32 = 1;
const TP_STATUS_VLAN_VALID: u32 = 0x10;
const TP_STATUS_VLAN_TPID_VALID: u32 = 0x40;
const TP_STATUS_AVAILABLE: u32 = 0;
const TP_STATUS_SEND_REQUEST: u32 = 1;
const TP_STATUS_WRONG_FORMAT: u32 = 4;

/// Bytes per ring frame: a tpacket2 header, alignment, and the largest frame a packet
/// buffer takes.
const FRAME_SIZE: usize = 4096;
const FRAMES_PER_BLOCK: usize = 16;
/// Where frame data starts in a transmit slot (TPACKET2_HDRLEN - sizeof(sockaddr_ll)).
const TX_DATA_OFFSET: usize = 32;

/// How workers sharing a port split its traffic.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fanout {
    /// By flow hash: a flow stays on one worker.
    Hash,
    /// Round robin: one flow is spread over every worker.
    RoundRobin,
}

#[repr(C)]
struct TpacketReq {
    block_size: libc::c_uint,
    block_nr: libc::c_uint,
    frame_size: libc::c_uint,
    frame_nr: libc::c_uint,
}

#[repr(C)]
#[derive(Default)]
struct TpacketStats {
    packets: libc::c_uint,
    drops: libc::c_uint,
}

#[repr(C)]
struct PacketMreq {
    ifindex: libc::c_int,
    kind: libc::c_ushort,
    alen: libc::c_ushort,
    address: [u8; 8],
}

pub struct AfPacketPort {
    name: String,
    fd: OwnedFd,
    ring: *mut u8,
    ring_len: usize,
    frames: usize,
    rx_next: usize,
    tx_next: usize,
    stats: PortStats,
    /// Whether frames for other hosts' MACs are passed on (captures and the RFC 2544
    /// stand-in want them; a gateway does not: [`AfPacketPort::drop_other_hosts`]).
    other_hosts: bool,
    /// Whether frames tagged for a VLAN are passed on ([`AfPacketPort::drop_vlan_tagged`]).
    vlan_tagged: bool,
}

// SAFETY: the ring mapping is owned by this port alone and only touched through
// `&mut self`; moving the port to a worker thread moves that ownership.
unsafe impl Send for AfPacketPort {}

fn last_error(what: &str, ifname: &str) -> io::Error {
    let e = io::Error::last_os_error();
    io::Error::new(e.kind(), format!("AF_PACKET on {ifname}: {what}: {e}"))
}

/// The interface index in the calling thread's network namespace (an ioctl, not
/// sysfs: sysfs shows the namespace it was mounted in, which a thread that entered
/// another namespace does not share).
pub fn ifindex(ifname: &str) -> io::Result<i32> {
    crate::netns::if_index(ifname)
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, v: &T) -> libc::c_int {
    // SAFETY: `v` points to a live, initialised `T` of the size passed.
    unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            v as *const T as *const libc::c_void,
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    }
}

impl AfPacketPort {
    /// Sends through the device's queue selection instead of straight to the driver.
    ///
    /// `open` bypasses the qdisc, and with it the kernel picks the transmit queue from
    /// the CPU the sender runs on: a thread that migrates between CPUs spreads one flow
    /// over several queues, and a receiver that reads those queues concurrently sees
    /// that flow reordered. Through the qdisc the queue comes from the flow's hash, so
    /// a flow keeps one queue whichever CPU sends it (on a device without transmit
    /// packet steering by CPU, XPS; veth has none). The RFC 2544 stand-in, an unpinned
    /// relay, uses this, and so do the gateway's AF_PACKET sockets unless each is sent
    /// on by one pinned worker (`--pin`, not the ordered spread), and the RFC 2544
    /// tester's unless its threads are pinned (`--tester-cpus`).
    pub fn transmit_through_qdisc(&mut self) -> io::Result<()> {
        let zero: libc::c_int = 0;
        if setsockopt(self.fd.as_raw_fd(), SOL_PACKET, PACKET_QDISC_BYPASS, &zero) != 0 {
            return Err(last_error("PACKET_QDISC_BYPASS", &self.name));
        }
        Ok(())
    }

    /// Opens `ifname` with receive and transmit rings of `frames` frames each; joins
    /// fanout group `group` when given (every worker's socket of one port uses the
    /// same group id).
    pub fn open(ifname: &str, frames: usize, fanout: Option<(u16, Fanout)>) -> io::Result<Self> {
        let index = ifindex(ifname)?;
        let frames = frames.clamp(FRAMES_PER_BLOCK, 1 << 16) / FRAMES_PER_BLOCK * FRAMES_PER_BLOCK;
        // SAFETY: plain socket(2) call; the result is checked before use.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(ETH_P_ALL.to_be()),
            )
        };
        if raw < 0 {
            return Err(last_error("socket", ifname));
        }
        // SAFETY: `raw` is a new descriptor that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let f = fd.as_raw_fd();
        if setsockopt(f, SOL_PACKET, PACKET_VERSION, &TPACKET_V2) != 0 {
            return Err(last_error("PACKET_VERSION", ifname));
        }
        // Our own transmissions are not received back. The qdisc is bypassed (the
        // fastest way out) until `transmit_through_qdisc` says the sender moves.
        let one: libc::c_int = 1;
        let _ = setsockopt(f, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one);
        let _ = setsockopt(f, SOL_PACKET, PACKET_QDISC_BYPASS, &one);
        let req = TpacketReq {
            block_size: (FRAME_SIZE * FRAMES_PER_BLOCK) as libc::c_uint,
            block_nr: (frames / FRAMES_PER_BLOCK) as libc::c_uint,
            frame_size: FRAME_SIZE as libc::c_uint,
            frame_nr: frames as libc::c_uint,
        };
        if setsockopt(f, SOL_PACKET, PACKET_RX_RING, &req) != 0 {
            return Err(last_error("PACKET_RX_RING", ifname));
        }
        if setsockopt(f, SOL_PACKET, PACKET_TX_RING, &req) != 0 {
            return Err(last_error("PACKET_TX_RING", ifname));
        }
        let ring_len = 2 * frames * FRAME_SIZE;
        // SAFETY: maps the two rings the kernel just allocated for this socket; the
        // result is checked and unmapped in Drop.
        let ring = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                ring_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                f,
                0,
            )
        };
        if ring == libc::MAP_FAILED {
            return Err(last_error("mmap", ifname));
        }
        let port = AfPacketPort {
            name: ifname.to_string(),
            fd,
            ring: ring as *mut u8,
            ring_len,
            frames,
            rx_next: 0,
            tx_next: 0,
            stats: PortStats::default(),
            other_hosts: true,
            vlan_tagged: true,
        };
        // SAFETY: sockaddr_ll is plain data; zeroed is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETH_P_ALL.to_be();
        sll.sll_ifindex = index;
        // SAFETY: binds to a sockaddr_ll that lives across the call, with its size.
        let r = unsafe {
            libc::bind(
                f,
                &sll as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(last_error("bind", ifname));
        }
        // Promiscuous: frames for our MAC arrive even where the configured MAC is not
        // the interface's own.
        let mr = PacketMreq {
            ifindex: index,
            kind: PACKET_MR_PROMISC,
            alen: 0,
            address: [0; 8],
        };
        let _ = setsockopt(f, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr);
        if let Some((group, mode)) = fanout {
            let m: u32 = match mode {
                Fanout::Hash => 0,
                Fanout::RoundRobin => 1,
            };
            // Without the flag every frame the workers send on the port comes back into
            // one of the group's receive rings (as PACKET_OUTGOING): twice the copies, and
            // the round robin taking turns over them. Older kernels ignore the flag, and
            // `rx_burst` skips such frames.
            let arg: u32 = u32::from(group) | ((m | PACKET_FANOUT_FLAG_IGNORE_OUTGOING) << 16);
            if setsockopt(f, SOL_PACKET, PACKET_FANOUT, &arg) != 0 {
                return Err(last_error("PACKET_FANOUT", ifname));
            }
        }
        Ok(port)
    }

    /// Start of frame `i` of the receive (`tx` false) or transmit ring.
    fn slot(&self, tx: bool, i: usize) -> *mut u8 {
        let base = if tx { self.frames + i } else { i } * FRAME_SIZE;
        debug_assert!(i < self.frames && base + FRAME_SIZE <= self.ring_len);
        // SAFETY: `i < frames`, so the slot lies inside the mapping.
        unsafe { self.ring.add(base) }
    }

    /// The status word of a slot, which the kernel updates concurrently (hence atomic).
    fn status(p: *mut u8) -> &'static AtomicU32 {
        // SAFETY: `p` is the start of a slot of a mapping that lives as long as the
        // port (callers use the reference only within a method of the port, never
        // storing it). Slots are 4096 bytes apart from a page-aligned start, so the word
        // is aligned.
        unsafe { &*(p as *const AtomicU32) }
    }

    fn read_u32(p: *const u8, off: usize) -> u32 {
        // SAFETY: callers pass offsets inside the 32-byte tpacket2 header of a slot that
        // the kernel handed to us (status USER), so nothing writes it concurrently.
        unsafe { std::ptr::read_volatile(p.add(off) as *const u32) }
    }
    fn read_u16(p: *const u8, off: usize) -> u16 {
        // SAFETY: as for `read_u32`.
        unsafe { std::ptr::read_volatile(p.add(off) as *const u16) }
    }
    fn read_u8(p: *const u8, off: usize) -> u8 {
        // SAFETY: callers pass offsets inside the slot's tpacket2 header and the
        // `sockaddr_ll` after it (within the first 64 bytes of a slot the kernel handed
        // over), which nothing writes concurrently.
        unsafe { std::ptr::read_volatile(p.add(off)) }
    }

    /// Drops frames addressed to other hosts' MACs (counted as `rx_other_host`), as a
    /// gateway port must: promiscuous mode lets them in.
    pub fn drop_other_hosts(&mut self) {
        self.other_hosts = false;
    }

    /// Drops frames tagged for a VLAN (counted as `rx_vlan_tagged`), as a port on an
    /// untagged network must: a socket bound to an interface also sees the frames of the
    /// VLANs above it (the kernel hands them to the interface's taps before it gives them
    /// to a VLAN sub-interface), and on a trunk other VLANs' flooded frames arrive too.
    pub fn drop_vlan_tagged(&mut self) {
        self.vlan_tagged = false;
    }

    /// `frame` into a buffer from `pool`, with the tag the kernel took out of it put
    /// back; `None` (counted as dropped) if it does not fit.
    fn load(
        &mut self,
        pool: &mut PacketPool,
        frame: &[u8],
        taken_tag: Option<(u16, u16)>,
    ) -> Option<Packet> {
        let mut pkt = pool.get();
        let loaded = match (taken_tag, frame.get(..12)) {
            (Some((tpid, tci)), Some(macs)) => {
                let mut head = [0u8; 16];
                head[..12].copy_from_slice(macs);
                head[12..14].copy_from_slice(&tpid.to_be_bytes());
                head[14..16].copy_from_slice(&tci.to_be_bytes());
                pkt.load_parts(&head, &frame[12..])
            }
            _ => pkt.load(frame),
        };
        if loaded.is_ok() {
            Some(pkt)
        } else {
            self.stats.rx_dropped += 1;
            pool.put(pkt);
            None
        }
    }
}

/// Whether a received frame is tagged for a VLAN: by the tag the kernel took out of it
/// (`taken_tag`, TPID and TCI), or by one still in the frame (a second tag, or one the
/// kernel left in).
fn names_a_vlan(taken_tag: Option<(u16, u16)>, frame: &[u8]) -> bool {
    taken_tag.is_some_and(|(tpid, tci)| crate::port::tag_names_a_vlan(tpid, tci))
        || crate::port::frame_names_a_vlan(frame)
}

impl Drop for AfPacketPort {
    fn drop(&mut self) {
        // SAFETY: unmaps exactly the region mapped in `open`; no reference into it
        // outlives `self`.
        unsafe {
            libc::munmap(self.ring as *mut libc::c_void, self.ring_len);
        }
    }
}

impl Port for AfPacketPort {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> &'static str {
        "af_packet"
    }

    fn rx_burst(
        &mut self,
        pool: &mut PacketPool,
        out: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        let mut n = 0;
        while n < max {
            let p = self.slot(false, self.rx_next);
            let status = Self::status(p);
            let st = status.load(Ordering::Acquire);
            if st & TP_STATUS_USER == 0 {
                break;
            }
            let len = Self::read_u32(p, 4) as usize;
            let snap = Self::read_u32(p, 8) as usize;
            let mac = usize::from(Self::read_u16(p, 12));
            let tci = Self::read_u16(p, 24);
            // The tag the kernel took out of the frame, if it did (its TPID is given
            // where the kernel says so, else 802.1Q's).
            let taken_tag = (st & TP_STATUS_VLAN_VALID != 0).then(|| {
                let tpid = if st & TP_STATUS_VLAN_TPID_VALID != 0 {
                    Self::read_u16(p, 26)
                } else {
                    espgw_wire::ethernet::ETHERTYPE_VLAN
                };
                (tpid, tci)
            });
            let ok = len == snap && mac + snap <= FRAME_SIZE && (14..=MAX_FRAME).contains(&snap);
            let pkttype = Self::read_u8(p, SLL_PKTTYPE_OFFSET);
            if pkttype == PACKET_OUTGOING {
                // Our own transmission, handed back by a kernel whose fanout groups predate
                // PACKET_FANOUT_FLAG_IGNORE_OUTGOING: not received traffic.
            } else if !self.other_hosts && pkttype == PACKET_OTHERHOST {
                // The port is promiscuous: frames for other hosts on the link arrive too,
                // and are not the gateway's to encrypt or forward.
                self.stats.rx_other_host += 1;
            } else if !ok {
                self.stats.rx_dropped += 1;
            } else {
                // SAFETY: `mac + snap` is within this slot (checked above), which the
                // kernel handed over (status USER) and does not touch until we hand it
                // back below.
                let frame = unsafe { std::slice::from_raw_parts(p.add(mac), snap) };
                if !self.vlan_tagged && names_a_vlan(taken_tag, frame) {
                    self.stats.rx_vlan_tagged += 1;
                } else if let Some(pkt) = self.load(pool, frame, taken_tag) {
                    self.stats.rx_packets += 1;
                    self.stats.rx_bytes += snap as u64;
                    out.push(pkt);
                    n += 1;
                }
            }
            status.store(TP_STATUS_KERNEL, Ordering::Release);
            self.rx_next = (self.rx_next + 1) % self.frames;
        }
        Ok(n)
    }

    fn tx_burst(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        let mut queued = 0;
        for pkt in pkts.drain(..) {
            let p = self.slot(true, self.tx_next);
            let status = Self::status(p);
            let st = status.load(Ordering::Acquire);
            let len = pkt.len();
            if (st != TP_STATUS_AVAILABLE && st != TP_STATUS_WRONG_FORMAT)
                || len > FRAME_SIZE - TX_DATA_OFFSET
            {
                self.stats.tx_dropped += 1;
                pool.put(pkt);
                continue;
            }
            // SAFETY: the slot is ours (status AVAILABLE: the kernel is done with it);
            // the data fits the slot (checked above); the header fields written are
            // tp_len and tp_snaplen inside the slot's tpacket2 header.
            unsafe {
                std::ptr::copy_nonoverlapping(pkt.data().as_ptr(), p.add(TX_DATA_OFFSET), len);
                std::ptr::write_volatile(p.add(4) as *mut u32, len as u32);
                std::ptr::write_volatile(p.add(8) as *mut u32, len as u32);
            }
            status.store(TP_STATUS_SEND_REQUEST, Ordering::Release);
            self.tx_next = (self.tx_next + 1) % self.frames;
            self.stats.tx_packets += 1;
            self.stats.tx_bytes += len as u64;
            queued += 1;
            pool.put(pkt);
        }
        if queued > 0 {
            // SAFETY: send(2) with no buffer: asks the kernel to transmit the slots
            // marked SEND_REQUEST.
            let r =
                unsafe { libc::send(self.fd.as_raw_fd(), std::ptr::null(), 0, libc::MSG_DONTWAIT) };
            if r < 0 {
                let e = io::Error::last_os_error();
                if !matches!(
                    e.raw_os_error(),
                    Some(libc::EAGAIN) | Some(libc::ENOBUFS) | Some(libc::EINTR)
                ) {
                    return Err(e);
                }
            }
        }
        Ok(queued)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.fd.as_raw_fd())
    }

    fn stats(&mut self) -> PortStats {
        let mut s = TpacketStats::default();
        let mut len = std::mem::size_of::<TpacketStats>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `s`, which is that size.
        let r = unsafe {
            libc::getsockopt(
                self.fd.as_raw_fd(),
                SOL_PACKET,
                PACKET_STATISTICS,
                &mut s as *mut TpacketStats as *mut libc::c_void,
                &mut len,
            )
        };
        // The kernel resets these counters on every read: accumulate.
        if r == 0 {
            // `drops` are frames the ring had no free slot for.
            self.stats.rx_dropped += u64::from(s.drops);
            self.stats.rx_ring_full += u64::from(s.drops);
        }
        self.stats
    }
}
