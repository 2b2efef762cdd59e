//! The gateway's whole packet path driven directly, without root, sockets or namespaces:
//! next-hop resolution with held packets released in order, path MTU (ICMP errors and
//! fragmentation before encryption), fragmented ESP reassembled and decrypted, ping and
//! TTL expiry. Two nodes play the test bed's gateways (the built-in default configuration
//! and its peer); frames are built and checked byte by byte here, with this file's own
//! checksum, against the RFCs' layouts.

use std::sync::Arc;
use std::time::{Duration, Instant};

use espgw_config::{parse, DEFAULT_CONFIG, DEFAULT_PEER_CONFIG};
use espgw_core::neighbour::NeighbourCache;
use espgw_core::packet::Packet;
use espgw_core::{DropReason, Node, Tables, Transmit};
use espgw_crypto::default_provider;

const SOUTH: u16 = 0;
const NORTH: u16 = 1;
const GW1_SOUTH_MAC: [u8; 6] = [2, 0, 0, 0, 1, 1];
const GW1_NORTH_MAC: [u8; 6] = [2, 0, 0, 0, 1, 2];
const GW2_NORTH_MAC: [u8; 6] = [2, 0, 0, 0, 2, 2];
const HOST_MAC: [u8; 6] = [2, 0, 0, 0, 0, 0x10];
const HOST: [u8; 4] = [198, 51, 100, 10];
const FAR_HOST: [u8; 4] = [203, 0, 113, 20];
const GW1_NORTH: [u8; 4] = [192, 0, 2, 1];
const GW2_NORTH: [u8; 4] = [192, 0, 2, 2];

/// Gateway 1 of the default configuration, its north port's MTU set to `mtu` when given;
/// `learning`: next hops resolved by ARP into a cache (as live), else the static defaults.
fn gw1(mtu: Option<u16>, learning: bool) -> Node {
    let text = match mtu {
        Some(m) => DEFAULT_CONFIG.replace(
            "addresses = [\"192.0.2.1/24\"",
            &format!("mtu = {m}\naddresses = [\"192.0.2.1/24\""),
        ),
        None => DEFAULT_CONFIG.to_string(),
    };
    node(&text, learning)
}

fn gw2() -> Node {
    node(DEFAULT_PEER_CONFIG, false)
}

fn node(text: &str, learning: bool) -> Node {
    node_with_buffers(text, learning, None)
}

/// [`node`], its pool starting with `buffers` buffers when given ([`Node::with_buffers`]).
fn node_with_buffers(text: &str, learning: bool, buffers: Option<usize>) -> Node {
    let cfg = parse(text, "test.toml", None).expect("config");
    let mut t = Tables::build(&cfg, default_provider().as_ref(), None).expect("tables");
    let cache = Arc::new(NeighbourCache::default());
    if learning {
        t.neighbours.dynamic = Some(cache.clone());
    }
    match buffers {
        Some(n) => Node::with_buffers(Arc::new(t), cache, Vec::new(), n),
        None => Node::new(Arc::new(t), cache, Vec::new()),
    }
}

/// RFC 1071 checksum, written here independently of the gateway's.
fn csum(data: &[u8]) -> u16 {
    let mut sum = 0u32;
    for c in data.chunks(2) {
        let w = if c.len() == 2 {
            u16::from_be_bytes([c[0], c[1]])
        } else {
            u16::from(c[0]) << 8
        };
        sum += u32::from(w);
    }
    while sum >> 16 != 0 {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    !(sum as u16)
}

fn ethernet(dst: [u8; 6], src: [u8; 6], ethertype: u16, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(14 + body.len());
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(body);
    f
}

/// An IPv4 header (no options) for `payload_len` bytes of `proto`.
fn ipv4_header(
    src: [u8; 4],
    dst: [u8; 4],
    proto: u8,
    ttl: u8,
    df: bool,
    payload_len: usize,
) -> Vec<u8> {
    let total = (20 + payload_len) as u16;
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&0x1234u16.to_be_bytes());
    h.extend_from_slice(&(if df { 0x4000u16 } else { 0 }).to_be_bytes());
    h.extend_from_slice(&[ttl, proto, 0, 0]);
    h.extend_from_slice(&src);
    h.extend_from_slice(&dst);
    let c = csum(&h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
    h
}

/// A UDP datagram from `HOST` to `FAR_HOST` as an IPv4 packet; the payload counts up
/// from `first`.
fn udp_packet(payload_len: usize, first: u8, ttl: u8, df: bool) -> Vec<u8> {
    let mut ip = ipv4_header(HOST, FAR_HOST, 17, ttl, df, 8 + payload_len);
    ip.extend_from_slice(&40000u16.to_be_bytes());
    ip.extend_from_slice(&9u16.to_be_bytes());
    ip.extend_from_slice(&((8 + payload_len) as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0]);
    ip.extend((0..payload_len).map(|i| first.wrapping_add(i as u8)));
    ip
}

/// `udp_packet` as received on gateway 1's south port.
fn from_host(payload_len: usize, first: u8, ttl: u8, df: bool) -> Vec<u8> {
    ethernet(
        GW1_SOUTH_MAC,
        HOST_MAC,
        0x0800,
        &udp_packet(payload_len, first, ttl, df),
    )
}

fn arp(op: u16, sha: [u8; 6], spa: [u8; 4], tha: [u8; 6], tpa: [u8; 4]) -> Vec<u8> {
    let mut a = vec![0, 1, 8, 0, 6, 4];
    a.extend_from_slice(&op.to_be_bytes());
    a.extend_from_slice(&sha);
    a.extend_from_slice(&spa);
    a.extend_from_slice(&tha);
    a.extend_from_slice(&tpa);
    a
}

/// Runs `frames` received on `port` through `node` at `now`; returns what it sent, per
/// port.
/// Gateway 2's ARP reply (RFC 826) to gateway 1's request for the tunnel's next hop.
fn arp_reply_from_gw2() -> Vec<u8> {
    ethernet(
        GW1_NORTH_MAC,
        GW2_NORTH_MAC,
        0x0806,
        &arp(2, GW2_NORTH_MAC, GW2_NORTH, GW1_NORTH_MAC, GW1_NORTH),
    )
}

fn feed(node: &mut Node, port: u16, frames: &[Vec<u8>], now: Instant) -> [Vec<Vec<u8>>; 2] {
    let mut rx: Vec<Packet> = frames
        .iter()
        .map(|f| {
            let mut p = node.pool().get();
            p.load(f).expect("frame fits");
            p
        })
        .collect();
    let mut tx = Transmit::new(2, 64);
    node.receive(port, &mut rx, now, &mut tx);
    drain(node, &mut tx)
}

fn drain(node: &mut Node, tx: &mut Transmit) -> [Vec<Vec<u8>>; 2] {
    let mut out = [Vec::new(), Vec::new()];
    for (port, sent) in out.iter_mut().enumerate() {
        for p in tx.queue(port).drain(..) {
            sent.push(p.data().to_vec());
            node.pool().put(p);
        }
    }
    assert!(tx.is_empty(), "frames queued on a port that does not exist");
    out
}

/// The ESP sequence number of an ESP-in-IPv4 frame.
fn esp_seq(f: &[u8]) -> u32 {
    assert_eq!(&f[12..14], &[8, 0]);
    assert_eq!(f[14 + 9], 50, "not ESP");
    u32::from_be_bytes(f[14 + 24..14 + 28].try_into().unwrap())
}

#[test]
fn packets_wait_for_arp_and_leave_in_order_once_the_next_hop_answers() {
    let mut gw1 = gw1(None, true);
    let mut gw2 = gw2();
    let t0 = Instant::now();
    let plain: Vec<_> = (0..3u8).map(|i| from_host(32, i * 10, 64, true)).collect();

    let sent = feed(&mut gw1, SOUTH, &plain, t0);
    assert!(sent[SOUTH as usize].is_empty());
    // One ARP request (RFC 826) for the tunnel's next hop, however many packets wait.
    assert_eq!(sent[NORTH as usize].len(), 1);
    let req = &sent[NORTH as usize][0];
    let expect = ethernet(
        [0xff; 6],
        GW1_NORTH_MAC,
        0x0806,
        &arp(1, GW1_NORTH_MAC, GW1_NORTH, [0; 6], GW2_NORTH),
    );
    assert_eq!(&req[..expect.len()], &expect[..]);
    assert_eq!(gw1.held(), 3);

    // The reply: the held packets go out, in the order they came, to the learned MAC.
    let sent = feed(
        &mut gw1,
        NORTH,
        &[arp_reply_from_gw2()],
        t0 + Duration::from_millis(5),
    );
    assert_eq!(gw1.held(), 0);
    let esp = &sent[NORTH as usize];
    assert_eq!(
        esp.iter().map(|f| esp_seq(f)).collect::<Vec<_>>(),
        [1, 2, 3]
    );
    assert!(esp
        .iter()
        .all(|f| f[..6] == GW2_NORTH_MAC && f[6..12] == GW1_NORTH_MAC));
    // A newer packet follows them.
    let later = feed(
        &mut gw1,
        SOUTH,
        &[from_host(32, 99, 64, true)],
        t0 + Duration::from_millis(6),
    );
    assert_eq!(esp_seq(&later[NORTH as usize][0]), 4);
    assert_eq!(gw1.host_counters().held_released, 3);
    assert_eq!(gw1.host_counters().solicitations_sent, 1);

    // Gateway 2 gets back what the host sent, its TTL decremented once by gateway 1.
    let back = feed(&mut gw2, NORTH, esp, t0);
    assert_eq!(back[SOUTH as usize].len(), 3);
    for (i, f) in back[SOUTH as usize].iter().enumerate() {
        let mut want = udp_packet(32, i as u8 * 10, 63, true);
        want[10..12].fill(0);
        let c = csum(&want[..20]);
        want[10..12].copy_from_slice(&c.to_be_bytes());
        assert_eq!(&f[14..], &want[..], "packet {i}");
    }
}

#[test]
fn a_node_whose_pool_starts_empty_sends_what_a_full_one_does() {
    // 100 packets held for the next hop (more than a burst), released by the ARP reply,
    // then a burst forwarded at once: every buffer beyond the first comes from the pool
    // growing. The frames must match byte for byte a node built with its full pool.
    let run = |buffers: Option<usize>| {
        let mut gw = node_with_buffers(DEFAULT_CONFIG, true, buffers);
        let t0 = Instant::now();
        let plain: Vec<_> = (0..100u8).map(|i| from_host(40, i, 64, true)).collect();
        let mut out = feed(&mut gw, SOUTH, &plain[..50], t0);
        let more = feed(&mut gw, SOUTH, &plain[50..], t0);
        assert_eq!(gw.held(), 100);
        let released = feed(
            &mut gw,
            NORTH,
            &[arp_reply_from_gw2()],
            t0 + Duration::from_millis(5),
        );
        let burst: Vec<_> = (0..64u8).map(|i| from_host(100, i, 64, false)).collect();
        let after = feed(&mut gw, SOUTH, &burst, t0 + Duration::from_millis(6));
        for sent in [more, released, after] {
            for (o, s) in out.iter_mut().zip(sent) {
                o.extend(s);
            }
        }
        out
    };
    let full = run(None);
    let empty = run(Some(0));
    // One ARP request, then 100 released and 64 forwarded, in sequence order.
    assert_eq!(full[NORTH as usize].len(), 1 + 100 + 64);
    let seqs: Vec<u32> = full[NORTH as usize][1..]
        .iter()
        .map(|f| esp_seq(f))
        .collect();
    assert_eq!(seqs, (1..=164).collect::<Vec<u32>>());
    assert_eq!(empty, full);
}

#[test]
fn held_packets_expire_when_the_next_hop_never_answers() {
    let mut gw1 = gw1(None, true);
    let t0 = Instant::now();
    feed(&mut gw1, SOUTH, &[from_host(32, 0, 64, true)], t0);
    assert_eq!(gw1.held(), 1);
    let mut tx = Transmit::new(2, 64);
    // Asked again while waiting, dropped after the hold time.
    gw1.housekeeping(t0 + Duration::from_millis(600), &mut tx);
    let again = drain(&mut gw1, &mut tx);
    assert_eq!(again[NORTH as usize].len(), 1, "a second ARP request");
    assert_eq!(gw1.held(), 1);
    gw1.housekeeping(t0 + Duration::from_millis(1100), &mut tx);
    assert_eq!(gw1.held(), 0);
    assert_eq!(gw1.counters().drops[DropReason::NoNeighbour as usize], 1);
}

#[test]
fn too_big_with_df_is_answered_with_fragmentation_needed() {
    let mut gw1 = gw1(Some(1400), false);
    let orig = from_host(1472, 0, 64, true); // a 1500-byte IP packet
    let sent = feed(&mut gw1, SOUTH, std::slice::from_ref(&orig), Instant::now());
    assert!(sent[NORTH as usize].is_empty());
    let [err] = &sent[SOUTH as usize][..] else {
        panic!(
            "one ICMP error expected, got {:?}",
            sent[SOUTH as usize].len()
        );
    };
    let ip = &err[14..];
    assert_eq!(ip[9], 1, "ICMP");
    assert_eq!(
        &ip[12..16],
        &[198, 51, 100, 1],
        "from the gateway's south address"
    );
    assert_eq!(&ip[16..20], &HOST);
    assert_eq!(csum(&ip[..20]), 0);
    let icmp = &ip[20..];
    assert_eq!(
        (icmp[0], icmp[1]),
        (3, 4),
        "destination unreachable, fragmentation needed"
    );
    // RFC 1191: the next-hop MTU is the largest inner packet the tunnel carries: 1400 less
    // outer IPv4 (20), ESP header (8), IV (8), ICV (16), trailer (2, padded to 4).
    assert_eq!(u16::from_be_bytes([icmp[6], icmp[7]]), 1346);
    assert_eq!(csum(icmp), 0);
    // It quotes the original header (RFC 792), which RFC 1812 §4.3.2.3 lets a router
    // leave with the TTL it already decremented (and its checksum updated to match).
    let (quoted, sent_hdr) = (&icmp[8..28], &orig[14..34]);
    assert_eq!(quoted[8], sent_hdr[8] - 1);
    assert_eq!(csum(quoted), 0);
    assert_eq!(
        (&quoted[..8], &quoted[9..10]),
        (&sent_hdr[..8], &sent_hdr[9..10])
    );
    assert_eq!(&quoted[12..], &sent_hdr[12..]);
    assert_eq!(&icmp[28..36], &orig[34..42], "and 8 bytes of its payload");
    assert_eq!(gw1.counters().drops[DropReason::Mtu as usize], 1);
}

#[test]
fn too_big_without_df_is_fragmented_then_encrypted() {
    let mut gw1 = gw1(Some(1400), false);
    let mut gw2 = gw2();
    let orig = udp_packet(1472, 7, 64, false);
    let sent = feed(
        &mut gw1,
        SOUTH,
        &[ethernet(GW1_SOUTH_MAC, HOST_MAC, 0x0800, &orig)],
        Instant::now(),
    );
    let esp = &sent[NORTH as usize];
    assert_eq!(esp.len(), 2);
    assert!(
        esp.iter().all(|f| f.len() - 14 <= 1400),
        "each fits the MTU"
    );
    assert_eq!(gw1.host_counters().fragments_made, 2);
    let frags = feed(&mut gw2, NORTH, esp, Instant::now());
    let frags = &frags[SOUTH as usize];
    assert_eq!(frags.len(), 2);
    // Put the fragments together here (RFC 791) and compare with what the host sent.
    let mut payload = vec![0u8; 1480];
    let mut covered = 0;
    for f in frags {
        let ip = &f[14..];
        let hl = usize::from(ip[0] & 15) * 4;
        let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
        let off = usize::from(u16::from_be_bytes([ip[6], ip[7]]) & 0x1fff) * 8;
        assert_eq!(csum(&ip[..hl]), 0);
        payload[off..off + total - hl].copy_from_slice(&ip[hl..total]);
        covered += total - hl;
    }
    assert_eq!(covered, 1480);
    assert_eq!(payload, orig[20..]);
}

/// Splits the IPv4 packet `ip` into two fragments at `at` payload bytes (a multiple of 8).
fn split_ipv4(ip: &[u8], at: usize) -> [Vec<u8>; 2] {
    let body = &ip[20..];
    let part = |data: &[u8], off: usize, more: bool| {
        let mut h = ip[..20].to_vec();
        h[2..4].copy_from_slice(&((20 + data.len()) as u16).to_be_bytes());
        let flags = (off / 8) as u16 | if more { 0x2000 } else { 0 };
        h[6..8].copy_from_slice(&flags.to_be_bytes());
        h[10..12].fill(0);
        let c = csum(&h);
        h[10..12].copy_from_slice(&c.to_be_bytes());
        h.extend_from_slice(data);
        ethernet(GW2_NORTH_MAC, GW1_NORTH_MAC, 0x0800, &h)
    };
    [part(&body[..at], 0, true), part(&body[at..], at, false)]
}

#[test]
fn fragmented_esp_is_reassembled_then_decrypted() {
    let mut gw1 = gw1(None, false);
    let mut gw2 = gw2();
    let sent = feed(
        &mut gw1,
        SOUTH,
        &[from_host(1000, 3, 64, false)],
        Instant::now(),
    );
    let esp = &sent[NORTH as usize][0];
    let outer = &esp[14..];
    assert_eq!(outer[6] & 0x40, 0, "outer DF clear");
    let [first, second] = split_ipv4(outer, 576);
    // Out of order, as a network may deliver them.
    let now = Instant::now();
    let none = feed(&mut gw2, NORTH, &[second], now);
    assert!(none.iter().all(Vec::is_empty));
    let back = feed(&mut gw2, NORTH, &[first], now);
    let [plain] = &back[SOUTH as usize][..] else {
        panic!("one decrypted packet expected");
    };
    let mut want = udp_packet(1000, 3, 63, false);
    want[10..12].fill(0);
    let c = csum(&want[..20]);
    want[10..12].copy_from_slice(&c.to_be_bytes());
    assert_eq!(&plain[14..], &want[..]);
    assert_eq!(gw2.host_counters().reassembled, 1);
}

#[test]
fn ping_is_answered_and_expiring_ttl_gets_time_exceeded() {
    let mut gw1 = gw1(None, false);
    // Echo request to the north address (RFC 792), from gateway 2.
    let mut icmp = vec![8, 0, 0, 0, 0, 1, 0, 1, b'h', b'i'];
    let c = csum(&icmp);
    icmp[2..4].copy_from_slice(&c.to_be_bytes());
    let mut ip = ipv4_header(GW2_NORTH, GW1_NORTH, 1, 64, false, icmp.len());
    ip.extend_from_slice(&icmp);
    let ping = ethernet(GW1_NORTH_MAC, GW2_NORTH_MAC, 0x0800, &ip);
    let sent = feed(&mut gw1, NORTH, &[ping], Instant::now());
    let [reply] = &sent[NORTH as usize][..] else {
        panic!("one echo reply expected");
    };
    assert_eq!(&reply[..12], &[GW2_NORTH_MAC, GW1_NORTH_MAC].concat()[..]);
    let rip = &reply[14..];
    assert_eq!(
        (&rip[12..16], &rip[16..20]),
        (&GW1_NORTH[..], &GW2_NORTH[..])
    );
    assert_eq!(csum(&rip[..20]), 0);
    assert_eq!(rip[20], 0, "echo reply");
    assert_eq!(csum(&rip[20..]), 0);
    assert_eq!(&rip[28..], b"hi");
    assert_eq!(gw1.host_counters().echo_replies, 1);

    // TTL 1 on a packet to forward: ICMP time exceeded (RFC 792 type 11) to the sender.
    let sent = feed(
        &mut gw1,
        SOUTH,
        &[from_host(32, 0, 1, true)],
        Instant::now(),
    );
    assert!(sent[NORTH as usize].is_empty());
    let [err] = &sent[SOUTH as usize][..] else {
        panic!("one ICMP error expected");
    };
    assert_eq!((err[14 + 20], err[14 + 21]), (11, 0));
    assert_eq!(&err[14 + 16..14 + 20], &HOST);
    assert_eq!(gw1.counters().drops[DropReason::TtlExceeded as usize], 1);
}
