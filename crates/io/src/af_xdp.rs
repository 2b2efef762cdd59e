//! AF_XDP port: an XDP program on the interface redirects frames of a queue straight to
//! our socket, past the kernel's network stack. libxdp loads its default redirect
//! program when the first socket of an interface opens. Copy mode works on any driver
//! (veth included); zero-copy where the driver supports it.
//!
//! The rings are driven by a C shim (`csrc/xsk_shim.c`) because libxdp's ring accessors
//! are inline C functions; frames are copied between the UMEM and packet buffers in
//! bursts. The `unsafe` here is the FFI boundary to that shim.
#![allow(unsafe_code)]

use std::ffi::CString;
use std::io;
use std::os::fd::RawFd;

use espgw_core::packet::{Packet, PacketPool, MAX_FRAME};

use crate::port::{Port, PortStats};

/// How the socket binds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XdpMode {
    /// Native XDP, zero-copy where the driver offers it, else copy.
    Auto,
    /// Native XDP, copy mode.
    Copy,
    /// Generic (skb) XDP: works everywhere, slowest.
    Generic,
}

#[repr(C)]
struct Xsk {
    _private: [u8; 0],
}

extern "C" {
    fn espgw_xsk_quiet();
    fn espgw_xsk_open(
        ifname: *const libc::c_char,
        queue: u32,
        mode: libc::c_int,
        nframes: u32,
        out: *mut *mut Xsk,
    ) -> libc::c_int;
    fn espgw_xsk_fd(x: *mut Xsk) -> libc::c_int;
    fn espgw_xsk_frame_size(x: *mut Xsk) -> u32;
    fn espgw_xsk_close(x: *mut Xsk);
    fn espgw_xsk_rx(
        x: *mut Xsk,
        bufs: *mut *mut u8,
        lens: *mut u32,
        max: u32,
        cap: u32,
        oversized: *mut u64,
    ) -> u32;
    fn espgw_xsk_rx_ready(x: *mut Xsk, max: u32) -> u32;
    fn espgw_xsk_tx(x: *mut Xsk, frames: *const *const u8, lens: *const u32, n: u32) -> u32;
    fn espgw_xsk_stats(x: *mut Xsk, out: *mut u64) -> libc::c_int;
    fn espgw_xsk_busy_poll(
        x: *mut Xsk,
        usecs: libc::c_int,
        budget: libc::c_int,
        usecs_set: *mut libc::c_int,
    ) -> libc::c_int;
}

const MAX_BURST: usize = 256;

/// Whether `frame` is unicast to a MAC other than `own`: the group bit (the first octet's
/// lowest) is clear and the destination differs. A frame too short to hold a destination
/// is left to the pipeline, which drops it as malformed.
fn for_other_host(frame: &[u8], own: &[u8; 6]) -> bool {
    frame
        .get(..6)
        .is_some_and(|dst| dst[0] & 1 == 0 && dst != own.as_slice())
}

pub struct AfXdpPort {
    name: String,
    xsk: *mut Xsk,
    fd: RawFd,
    stats: PortStats,
    /// The kernel's cumulative counters at the last read, to report their growth.
    kernel_drops: u64,
    kernel_ring_full: u64,
    bad_completions: u64,
    /// Per-burst scratch: packet buffers being filled, pointers and lengths.
    rx_pkts: Vec<Packet>,
    ptrs: Vec<*mut u8>,
    lens: Vec<u32>,
    tx_ptrs: Vec<*const u8>,
    /// Bytes per UMEM frame (2 KiB, or 4 KiB where the interface's MTU needs it): the
    /// largest frame the socket transmits.
    frame_size: usize,
    /// The interface's MAC once [`AfXdpPort::drop_other_hosts`] asked for the filter:
    /// unicast frames to any other MAC are dropped.
    own_mac: Option<[u8; 6]>,
    /// Whether frames tagged for a VLAN are dropped ([`AfXdpPort::drop_vlan_tagged`]).
    drop_tagged: bool,
}

// SAFETY: the socket and its UMEM belong to this port alone and are only used through
// `&mut self`; libxdp keeps no thread-affine state for them.
unsafe impl Send for AfXdpPort {}

impl AfXdpPort {
    /// Opens queue `queue` of `ifname` with a UMEM of `frames` frames (half receive,
    /// half transmit).
    pub fn open(ifname: &str, queue: u32, mode: XdpMode, frames: u32) -> io::Result<Self> {
        let c = CString::new(ifname)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad interface name"))?;
        let mut x: *mut Xsk = std::ptr::null_mut();
        let m = match mode {
            XdpMode::Auto => 0,
            XdpMode::Copy => 1,
            XdpMode::Generic => 2,
        };
        // SAFETY: `c` is a valid C string for the call; `x` receives a pointer the shim
        // allocated, owned by the returned port and freed in Drop.
        let r = unsafe {
            espgw_xsk_quiet();
            espgw_xsk_open(c.as_ptr(), queue, m, frames, &mut x)
        };
        if r != 0 || x.is_null() {
            let e = io::Error::from_raw_os_error(-r);
            return Err(io::Error::new(
                e.kind(),
                format!("AF_XDP on {ifname} queue {queue}: {e}"),
            ));
        }
        // SAFETY: `x` is a live socket from the shim.
        let (fd, frame_size) = unsafe { (espgw_xsk_fd(x), espgw_xsk_frame_size(x)) };
        Ok(AfXdpPort {
            name: ifname.to_string(),
            xsk: x,
            fd,
            stats: PortStats::default(),
            kernel_drops: 0,
            kernel_ring_full: 0,
            bad_completions: 0,
            rx_pkts: Vec::with_capacity(MAX_BURST),
            ptrs: Vec::with_capacity(MAX_BURST),
            lens: vec![0; MAX_BURST],
            tx_ptrs: Vec::with_capacity(MAX_BURST),
            frame_size: frame_size as usize,
            own_mac: None,
            drop_tagged: false,
        })
    }
}

impl AfXdpPort {
    /// Bytes per UMEM frame: 2 KiB where the interface's MTU lets a whole frame fit one
    /// after the kernel's 256-byte receive headroom (MTU up to 1774), else 4 KiB.
    pub fn frame_size(&self) -> usize {
        self.frame_size
    }

    /// Drops unicast frames addressed to any MAC but `own` (the interface's), counted as
    /// `rx_other_host`, as a gateway port must. The XDP program runs on every frame the
    /// interface receives, before the kernel's own filter by destination MAC would drop
    /// another host's: on a veth, a bridge port or a NIC in promiscuous mode they arrive
    /// here, and are not the gateway's to encrypt or forward. Broadcast and multicast
    /// frames pass (ARP, neighbour discovery).
    pub fn drop_other_hosts(&mut self, own: [u8; 6]) {
        self.own_mac = Some(own);
    }

    /// Drops frames tagged for a VLAN (counted as `rx_vlan_tagged`), as a port on an
    /// untagged network must. espgw's XDP program already hands such frames to the kernel
    /// (to a VLAN sub-interface, or a drop) rather than to the socket; this is the socket's
    /// own check behind it. Either needs the tag in the frame: where the NIC takes tags out
    /// itself (receive VLAN offload) they would look untagged, so the gateway turns that
    /// offload off when it opens the port (`ethtool::keep_vlan_tags_in_frames`).
    pub fn drop_vlan_tagged(&mut self) {
        self.drop_tagged = true;
    }

    /// Turns busy polling on (`SO_PREFER_BUSY_POLL`, `SO_BUSY_POLL` = `usecs`,
    /// `SO_BUSY_POLL_BUDGET` = `budget`): the worker's own receive and transmit calls then
    /// run the queue's NAPI poll instead of a softirq. Needs `CAP_NET_ADMIN` (set before
    /// privileges are dropped) and kernel 5.11 or later. Returns the busy-poll time the
    /// socket holds afterwards, read back from the kernel.
    pub fn set_busy_poll(&mut self, usecs: u32, budget: u32) -> io::Result<u32> {
        let clamp = |v: u32| libc::c_int::try_from(v).unwrap_or(libc::c_int::MAX);
        let mut set: libc::c_int = 0;
        // SAFETY: `self.xsk` is the live socket opened in `open`, used through `&mut self`;
        // `set` is a valid int for the shim to write.
        let r = unsafe { espgw_xsk_busy_poll(self.xsk, clamp(usecs), clamp(budget), &mut set) };
        if r != 0 {
            let e = io::Error::from_raw_os_error(-r);
            return Err(io::Error::new(
                e.kind(),
                format!("AF_XDP on {}: busy polling: {e}", self.name),
            ));
        }
        Ok(u32::try_from(set).unwrap_or(0))
    }
}

impl Drop for AfXdpPort {
    fn drop(&mut self) {
        // SAFETY: closes the socket opened in `open`, exactly once.
        unsafe { espgw_xsk_close(self.xsk) };
    }
}

impl Port for AfXdpPort {
    fn name(&self) -> &str {
        &self.name
    }
    fn kind(&self) -> &'static str {
        "af_xdp"
    }

    fn rx_burst(
        &mut self,
        pool: &mut PacketPool,
        out: &mut Vec<Packet>,
        max: usize,
    ) -> io::Result<usize> {
        // SAFETY: `xsk` is the live socket of this port.
        let ready = unsafe { espgw_xsk_rx_ready(self.xsk, max.min(MAX_BURST) as u32) } as usize;
        if ready == 0 {
            return Ok(0);
        }
        // Buffers only for what is there (an idle poll prepares none).
        let max = ready;
        self.rx_pkts.clear();
        self.ptrs.clear();
        for _ in 0..max {
            let mut p = pool.get();
            // Room for the largest frame at the standard headroom.
            let _ = p.load(&[]);
            let _ = p.push_back(MAX_FRAME);
            self.ptrs.push(p.data_mut().as_mut_ptr());
            self.rx_pkts.push(p);
        }
        let mut oversized = 0u64;
        // SAFETY: `ptrs[i]` points to MAX_FRAME writable bytes of `rx_pkts[i]`, which
        // stay in place (boxed buffers) for the call; `lens` has room for `max` entries.
        let n = unsafe {
            espgw_xsk_rx(
                self.xsk,
                self.ptrs.as_mut_ptr(),
                self.lens.as_mut_ptr(),
                max as u32,
                MAX_FRAME as u32,
                &mut oversized,
            )
        } as usize;
        self.stats.rx_dropped += oversized;
        let mut taken = 0;
        for (i, mut p) in self.rx_pkts.drain(..).enumerate() {
            if i >= n {
                pool.put(p);
                continue;
            }
            p.truncate(self.lens[i] as usize);
            if self
                .own_mac
                .is_some_and(|own| for_other_host(p.data(), &own))
            {
                self.stats.rx_other_host += 1;
                pool.put(p);
                continue;
            }
            if self.drop_tagged && crate::port::frame_names_a_vlan(p.data()) {
                self.stats.rx_vlan_tagged += 1;
                pool.put(p);
                continue;
            }
            self.stats.rx_packets += 1;
            self.stats.rx_bytes += u64::from(self.lens[i]);
            out.push(p);
            taken += 1;
        }
        Ok(taken)
    }

    fn tx_burst(&mut self, pkts: &mut Vec<Packet>, pool: &mut PacketPool) -> io::Result<usize> {
        // A frame larger than a UMEM frame cannot be sent (an MTU configured above the
        // interface's): dropped and counted, never cut short.
        let frame_size = self.frame_size;
        if pkts.iter().any(|p| p.len() > frame_size) {
            let all = std::mem::take(pkts);
            for p in all {
                if p.len() > frame_size {
                    self.stats.tx_dropped += 1;
                    pool.put(p);
                } else {
                    pkts.push(p);
                }
            }
        }
        let mut sent_total = 0;
        for chunk in pkts.chunks(MAX_BURST) {
            self.tx_ptrs.clear();
            for (i, p) in chunk.iter().enumerate() {
                self.tx_ptrs.push(p.data().as_ptr());
                self.lens[i] = p.len() as u32;
            }
            // SAFETY: every pointer refers to `lens[i]` readable bytes of a packet in
            // `pkts`, which is not modified during the call; the shim copies them out.
            let sent = unsafe {
                espgw_xsk_tx(
                    self.xsk,
                    self.tx_ptrs.as_ptr(),
                    self.lens.as_ptr(),
                    chunk.len() as u32,
                )
            } as usize;
            for (i, p) in chunk.iter().enumerate() {
                if i < sent {
                    self.stats.tx_packets += 1;
                    self.stats.tx_bytes += p.len() as u64;
                } else {
                    self.stats.tx_dropped += 1;
                }
            }
            sent_total += sent;
        }
        for p in pkts.drain(..) {
            pool.put(p);
        }
        Ok(sent_total)
    }

    fn poll_fd(&self) -> Option<RawFd> {
        Some(self.fd)
    }

    fn stats(&mut self) -> PortStats {
        let mut k = [0u64; 5];
        // SAFETY: the shim writes five u64 into `k`.
        if unsafe { espgw_xsk_stats(self.xsk, k.as_mut_ptr()) } == 0 {
            // Cumulative in the kernel: report the growth since the last read. The kernel's
            // drop count (k[0]) includes frames dropped for want of a free frame (k[2],
            // copy mode): with as many receive frames as ring slots, that is how a
            // gateway that does not keep up loses frames, more often than a full ring (k[1]).
            let total = k[0] + k[1];
            self.stats.rx_dropped += total.saturating_sub(self.kernel_drops);
            self.kernel_drops = total;
            let overrun = k[1] + k[2];
            self.stats.rx_ring_full += overrun.saturating_sub(self.kernel_ring_full);
            self.kernel_ring_full = overrun;
            // Completion-ring entries that named no transmit frame (counted by the shim).
            self.stats.tx_dropped += k[4].saturating_sub(self.bad_completions);
            self.bad_completions = k[4];
        }
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::for_other_host;

    const OWN: [u8; 6] = [0x02, 0, 0, 0, 0x01, 0x01];

    #[test]
    fn only_unicast_to_another_mac_is_another_hosts() {
        let frame = |dst: [u8; 6]| [&dst[..], &[0x02, 0, 0, 0, 0, 0x09, 0x08, 0x00][..]].concat();
        assert!(!for_other_host(&frame(OWN), &OWN));
        assert!(for_other_host(&frame([0x02, 0, 0, 0, 0x99, 0x99]), &OWN));
        // One bit away from ours is another host's.
        assert!(for_other_host(&frame([0x02, 0, 0, 0, 0x01, 0x00]), &OWN));
        // Broadcast, IPv4 and IPv6 multicast (ARP, neighbour discovery) are everyone's.
        assert!(!for_other_host(&frame([0xff; 6]), &OWN));
        assert!(!for_other_host(&frame([0x01, 0x00, 0x5e, 0, 0, 1]), &OWN));
        assert!(!for_other_host(&frame([0x33, 0x33, 0xff, 0, 0, 2]), &OWN));
        // Too short to name a destination: the pipeline's to refuse.
        assert!(!for_other_host(&[0x02, 0, 0], &OWN));
        assert!(!for_other_host(&[], &OWN));
    }
}
