//! The test bed's traffic tools, run inside its namespaces: a frame counter for the
//! transport link (`watch`) and sequence-numbered UDP (`udp-send`, `udp-recv`).

use super::*;

/// Frames seen on an interface, by kind.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct WatchCounts {
    pub frames: u64,
    pub esp: u64,
    pub esp_in_udp: u64,
    pub arp: u64,
    pub ipv6_nd: u64,
    pub plaintext_ip: u64,
    pub other: u64,
}

/// Counts frames on `ifname` (in the current namespace) for `seconds`.
pub fn watch(ifname: &str, seconds: f64) -> Result<WatchCounts, String> {
    use espgw_core::packet::PacketPool;
    use espgw_io::af_packet::AfPacketPort;
    use espgw_io::Port;
    let mut port = AfPacketPort::open(ifname, 1024, None).map_err(|e| e.to_string())?;
    let mut pool = PacketPool::new(256);
    let mut v = Vec::new();
    let mut c = WatchCounts::default();
    let end = Instant::now() + Duration::from_secs_f64(seconds);
    while Instant::now() < end {
        let n = port
            .rx_burst(&mut pool, &mut v, 256)
            .map_err(|e| e.to_string())?;
        if n == 0 {
            espgw_io::poll::wait_readable(&[port.poll_fd().unwrap_or(-1)], 10);
        }
        for p in v.drain(..) {
            c.frames += 1;
            classify_frame(p.data(), &mut c);
            pool.put(p);
        }
    }
    Ok(c)
}

pub(super) fn classify_frame(d: &[u8], c: &mut WatchCounts) {
    let et = d.get(12..14).map(|b| u16::from_be_bytes([b[0], b[1]]));
    match et {
        Some(0x0806) => c.arp += 1,
        Some(0x0800) => {
            let ihl = d.get(14).map_or(20, |b| usize::from(b & 15) * 4);
            match d.get(23) {
                Some(50) => c.esp += 1,
                Some(17) => {
                    let dport = d
                        .get(14 + ihl + 2..14 + ihl + 4)
                        .map(|b| u16::from_be_bytes([b[0], b[1]]));
                    if dport == Some(4500) {
                        c.esp_in_udp += 1
                    } else {
                        c.plaintext_ip += 1
                    }
                }
                _ => c.plaintext_ip += 1,
            }
        }
        Some(0x86dd) => match (d.get(20), d.get(54)) {
            (Some(50), _) => c.esp += 1,
            (Some(58), Some(133..=137)) => c.ipv6_nd += 1,
            _ => c.plaintext_ip += 1,
        },
        _ => c.other += 1,
    }
}

/// What a UDP receive run counted.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct UdpReport {
    pub packets: u64,
    pub bytes: u64,
    pub lost: u64,
    pub duplicates: u64,
    pub reordered: u64,
    pub max_seq: u64,
    pub seconds: f64,
}

/// Sends sequence-numbered UDP datagrams of `size` payload bytes to `dst` for `seconds`
/// (`rate` packets per second, 0: as fast as possible); returns how many.
pub fn udp_send(dst: SocketAddr, size: usize, seconds: f64, rate: u64) -> Result<u64, String> {
    let bind: SocketAddr = if dst.is_ipv4() {
        "0.0.0.0:0".parse().map_err(|_| "addr")?
    } else {
        "[::]:0".parse().map_err(|_| "addr")?
    };
    let s = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
    let mut buf = vec![0u8; size.max(16)];
    buf[8..16].copy_from_slice(b"espgwseq");
    let start = Instant::now();
    let end = Duration::from_secs_f64(seconds);
    let mut seq = 0u64;
    loop {
        let el = start.elapsed();
        if el >= end {
            break;
        }
        if rate > 0 {
            let due = (el.as_secs_f64() * rate as f64) as u64;
            if seq >= due {
                std::thread::sleep(Duration::from_micros(200));
                continue;
            }
        }
        seq += 1;
        buf[..8].copy_from_slice(&seq.to_be_bytes());
        // A full socket buffer (ENOBUFS) is the sender's own limit, not a loss in the
        // network: that datagram is not counted as sent.
        if s.send_to(&buf, dst).is_err() {
            seq -= 1;
        }
    }
    Ok(seq)
}

/// Receives datagrams on `port` until `seconds` pass with `idle` seconds of quiet at the
/// end, counting loss, duplicates and reordering by sequence number.
pub fn udp_recv(port: u16, v6: bool, seconds: f64) -> Result<UdpReport, String> {
    let bind: SocketAddr = if v6 {
        SocketAddr::from((std::net::Ipv6Addr::UNSPECIFIED, port))
    } else {
        SocketAddr::from((std::net::Ipv4Addr::UNSPECIFIED, port))
    };
    let s = UdpSocket::bind(bind).map_err(|e| format!("bind {bind}: {e}"))?;
    // A deep receive buffer (up to net.core.rmem_max): the receiver must not be where
    // packets are lost when the sender's pacing bunches them.
    let s = {
        let s2 = socket2::Socket::from(s);
        let _ = s2.set_recv_buffer_size(32 << 20);
        UdpSocket::from(s2)
    };
    s.set_read_timeout(Some(Duration::from_millis(50)))
        .map_err(|e| e.to_string())?;
    let mut seen = vec![0u64; 1 << 16];
    let mut r = UdpReport::default();
    let mut buf = vec![0u8; 65536];
    let start = Instant::now();
    let mut first: Option<Instant> = None;
    let mut last = Instant::now();
    let mut max_seen = 0u64;
    while start.elapsed().as_secs_f64() < seconds {
        let n = match s.recv(&mut buf) {
            Ok(n) => n,
            Err(_) => continue,
        };
        if n < 16 || &buf[8..16] != b"espgwseq" {
            continue;
        }
        let now = Instant::now();
        first.get_or_insert(now);
        last = now;
        let seq = u64::from_be_bytes(buf[..8].try_into().unwrap_or([0; 8]));
        let idx = (seq as usize / 64) % seen.len();
        let bit = 1u64 << (seq % 64);
        if seen[idx] & bit != 0 && seq + (seen.len() as u64 * 64) > max_seen {
            r.duplicates += 1;
            continue;
        }
        seen[idx] |= bit;
        if seq < max_seen {
            r.reordered += 1;
        }
        max_seen = max_seen.max(seq);
        r.packets += 1;
        r.bytes += n as u64;
    }
    r.max_seq = max_seen;
    r.lost = max_seen.saturating_sub(r.packets);
    r.seconds = first.map_or(0.0, |f| last.duration_since(f).as_secs_f64());
    Ok(r)
}
