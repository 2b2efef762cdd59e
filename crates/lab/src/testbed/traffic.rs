//! The test bed's traffic tools, run inside its namespaces: a frame counter for the
//! transport link (`watch`) and sequence-numbered UDP (`udp-send`, `udp-recv`).

use super::*;

/// Frames seen on an interface, by kind.
#[derive(Debug, Default, Clone, serde::Serialize)]
pub struct WatchCounts {
    pub frames: u64,
    pub esp: u64,
    pub esp_in_udp: u64,
    /// IKE (UDP 500, or 4500 with the non-ESP marker): the key exchange, not data.
    pub ike: u64,
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
                    let marker = d.get(14 + ihl + 8..14 + ihl + 12) == Some(&[0u8; 4][..]);
                    match dport {
                        // IKE: port 500, or 4500 behind the non-ESP marker (RFC 3948).
                        Some(500) => c.ike += 1,
                        Some(4500) if marker => c.ike += 1,
                        Some(4500) => c.esp_in_udp += 1,
                        _ => c.plaintext_ip += 1,
                    }
                }
                _ => c.plaintext_ip += 1,
            }
        }
        Some(0x86dd) => match (d.get(20), d.get(54)) {
            (Some(50), _) => c.esp += 1,
            (Some(58), Some(133..=137)) => c.ipv6_nd += 1,
            // MLD (130-132, 143) behind a hop-by-hop header: a kernel's link-local chatter.
            (Some(0), Some(58)) => {
                let at = 54 + 8 * (usize::from(d.get(55).copied().unwrap_or(0)) + 1);
                match d.get(at) {
                    Some(130..=132 | 143) => c.ipv6_nd += 1,
                    _ => c.plaintext_ip += 1,
                }
            }
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

/// What `udp-recv` prints on stderr once its socket is bound.
pub const LISTENING: &str = "udp-recv: listening on";

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
    // Whoever starts the sender waits for this line (`LISTENING`) rather than guessing how
    // long start-up takes: datagrams sent before the bind are lost, and counted so.
    eprintln!("{LISTENING} {bind}");
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

#[cfg(test)]
mod tests {
    use super::*;

    fn v4_udp(dport: u16, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0u8; 12];
        f.extend_from_slice(&[0x08, 0x00, 0x45, 0, 0, 0, 0, 0, 0, 0, 64, 17]);
        f.resize(34, 0);
        f.extend_from_slice(&[0x9e, 0x34]);
        f.extend_from_slice(&dport.to_be_bytes());
        f.extend_from_slice(&[0, 0, 0, 0]);
        f.extend_from_slice(payload);
        f
    }

    /// What the test bed's watcher calls IKE, ESP in UDP, link-local chatter and plaintext.
    #[test]
    fn frames_are_counted_by_kind() {
        let mut c = WatchCounts::default();
        classify_frame(&v4_udp(500, b"ike sa init"), &mut c);
        classify_frame(&v4_udp(4500, &[0, 0, 0, 0, 1, 2, 3, 4]), &mut c);
        classify_frame(&v4_udp(4500, &[0, 0, 0x10, 1, 0, 0, 0, 9]), &mut c);
        classify_frame(&v4_udp(9, b"data"), &mut c);
        // MLDv2 report: IPv6, hop-by-hop (8 bytes), ICMPv6 type 143.
        let mut mld = vec![0u8; 12];
        mld.extend_from_slice(&[0x86, 0xdd, 0x60]);
        mld.resize(54, 0); // next header (byte 20): 0, hop-by-hop
        mld.extend_from_slice(&[58, 0, 5, 2, 0, 0, 1, 0, 143, 0]);
        classify_frame(&mld, &mut c);
        assert_eq!(
            (c.ike, c.esp_in_udp, c.plaintext_ip, c.ipv6_nd),
            (2, 1, 1, 1)
        );
    }
}
