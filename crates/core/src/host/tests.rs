use super::*;
use espgw_config::{Config, PortConfig, Prefix};
use espgw_crypto::default_provider;

fn tables() -> Tables {
    let mut c = Config {
        burst: 32,
        ..Config::default()
    };
    let mut port = espgw_config::implied_port(0);
    port.addresses = vec![
        Prefix {
            addr: "198.51.100.1".parse().unwrap(),
            len: 24,
        },
        Prefix {
            addr: "2001:db8:100::1".parse().unwrap(),
            len: 64,
        },
    ];
    let _: &PortConfig = &port;
    c.ports.push(port);
    Tables::build(&c, default_provider().as_ref(), None).unwrap()
}

fn arp_request(target: [u8; 4]) -> Vec<u8> {
    let mut f = vec![0xff; 6];
    f.extend_from_slice(&[2, 0, 0, 0, 0, 0x22]);
    f.extend_from_slice(&[8, 6, 0, 1, 8, 0, 6, 4, 0, 1]);
    f.extend_from_slice(&[2, 0, 0, 0, 0, 0x22, 198, 51, 100, 2]);
    f.extend_from_slice(&[0; 6]);
    f.extend_from_slice(&target);
    f
}

/// The decision taken from the pipeline's read of a frame's header (`info`) is the one
/// the fast path took on the frame itself (`fast`), and none on a port that does not
/// exist. Returns whether the read decided.
fn read_decides_as_fast(
    info: &IpInfo,
    fast: Option<(Triage, bool)>,
    t: &Tables,
    hop: HopLimit,
    f: &[u8],
) -> bool {
    let from_read = triage_parsed(info, 0, t, hop);
    assert_eq!(
        from_read.map(|due| (Triage::Pipeline, due)),
        fast.filter(|v| v.0 == Triage::Pipeline),
        "{f:02x?}"
    );
    assert_eq!(triage_parsed(info, 1, t, hop), None, "port out of range");
    from_read.is_some()
}

/// The fast path decides exactly as the general one does, byte for byte, wherever it
/// decides at all: random IPv4 frames (local or not, multicast, fragments, options,
/// short or long lengths, every TTL and protocol mix, checksum right or not) through both.
/// And the decision taken from the pipeline's read of the header ([`triage_parsed`]) is
/// the fast path's wherever that read succeeds.
#[test]
fn ipv4_fast_path_agrees_with_the_general_path() {
    use rand::{Rng, SeedableRng};
    let t = tables();
    let mut rng = rand::rngs::StdRng::seed_from_u64(13);
    let dsts = [
        [198, 51, 100, 1],
        [203, 0, 113, 9],
        [224, 0, 0, 5],
        [255; 4],
    ];
    let (mut decided, mut forwarded, mut read_decided, mut kept) = (0, 0, 0, 0);
    for _ in 0..20_000 {
        let payload = rng.gen_range(0..40);
        let mut f = vec![0u8; 14 + 20 + payload];
        rng.fill(&mut f[..]);
        f[12..14].copy_from_slice(&[8, 0]);
        if rng.gen_bool(0.8) {
            f[14] = 0x45;
        }
        if rng.gen_bool(0.7) {
            f[20] &= 0x40;
            f[21] = 0;
        }
        if rng.gen_bool(0.8) {
            let total = (20 + payload - rng.gen_range(0..=payload.min(3))) as u16;
            f[16..18].copy_from_slice(&total.to_be_bytes());
        }
        if rng.gen_bool(0.5) {
            f[23] = [proto::ESP, proto::AH, proto::UDP, proto::ICMP][rng.gen_range(0..4)];
        }
        f[22] = [0, 1, 2, 64, 255][rng.gen_range(0..5)];
        f[30..34].copy_from_slice(&dsts[rng.gen_range(0..dsts.len())]);
        if rng.gen_bool(0.7) {
            f[24..26].fill(0);
            let c = checksum::checksum(&f[14..34]);
            f[24..26].copy_from_slice(&c.to_be_bytes());
        }
        for hop in [HopLimit::Decrement, HopLimit::Keep] {
            // The decision from the pipeline's read of the header is the fast path's,
            // wherever that read succeeds (the common frame with its checksum right).
            if let Some(info) = crate::flow::parse_ipv4_no_options(&f[14..]) {
                let fast = ipv4_fast(&f, &t, hop);
                read_decided += usize::from(read_decides_as_fast(&info, fast, &t, hop, &f));
            }
            let mut fast = f.clone();
            let Some((verdict, ttl_due)) = ipv4_fast(&fast, &t, hop) else {
                continue;
            };
            if ttl_due {
                decrement_ttl_v4(&mut fast[14..]);
            }
            let mut p = Packet::new();
            p.load(&f).unwrap();
            assert_eq!(ipv4(&mut p, 14, &t, hop), verdict, "{f:02x?}");
            assert_eq!(p.data(), &fast[..], "{f:02x?}");
            decided += 1;
            forwarded += usize::from(fast[22] != f[22]);
            // A bump in the wire forwards on the fast path too, whatever the TTL.
            kept += usize::from(hop == HopLimit::Keep && f[30..34] == [203, 0, 113, 9]);
        }
    }
    // Both kinds of decision were exercised.
    assert!(decided > 2_000 && forwarded > 500, "{decided} {forwarded}");
    assert!(kept > 500, "{kept}");
    assert!(read_decided > 1_000, "{read_decided}");
}

/// The IPv6 fast path likewise: random IPv6 frames (to the gateway's address or through
/// it, multicast, every next header the general path tells apart, every hop limit,
/// payload lengths short, exact and beyond the frame) decided by [`ipv6_fast`] exactly as
/// the general path (`nd::ipv6`) decides them, byte for byte once the due hop limit is
/// decremented; and [`triage_parsed`] on the pipeline's read of the header agrees.
#[test]
fn ipv6_fast_path_agrees_with_the_general_path() {
    use rand::{Rng, SeedableRng};
    let t = tables();
    let cache = NeighbourCache::default();
    let own: u128 = 0x2001_0db8_0100_0000_0000_0000_0000_0001;
    let dsts = [
        own,
        0x2001_0db8_0113_0000_0000_0000_0000_0020,
        0xff02_0000_0000_0000_0000_0000_0000_0001,
        0xff02_0000_0000_0000_0000_0001_ff00_0001,
    ];
    let next_headers = [
        proto::ESP,
        proto::AH,
        proto::UDP,
        proto::TCP,
        proto::ICMPV6,
        proto::FRAGMENT,
        proto::HOPOPT,
        proto::ROUTING,
        proto::DSTOPTS,
        59,
    ];
    let (mut decided, mut forwarded, mut read_decided, mut kept) = (0, 0, 0, 0);
    let mut rng = rand::rngs::StdRng::seed_from_u64(17);
    for _ in 0..20_000 {
        let payload = rng.gen_range(0..40);
        let mut f = vec![0u8; 14 + 40 + payload];
        rng.fill(&mut f[..]);
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        if rng.gen_bool(0.9) {
            f[14] = 0x60 | (f[14] & 0x0f);
        }
        if rng.gen_bool(0.8) {
            let plen = (payload + 2).saturating_sub(rng.gen_range(0..=4)) as u16;
            f[18..20].copy_from_slice(&plen.to_be_bytes());
        }
        f[20] = next_headers[rng.gen_range(0..next_headers.len())];
        f[21] = [0, 1, 2, 64, 255][rng.gen_range(0..5)];
        f[38..54].copy_from_slice(&dsts[rng.gen_range(0..dsts.len())].to_be_bytes());
        for hop in [HopLimit::Decrement, HopLimit::Keep] {
            if let Some(info) = crate::flow::parse_ipv6_no_extensions(&f[14..]) {
                let fast = ipv6_fast(&f, &t, hop);
                read_decided += usize::from(read_decides_as_fast(&info, fast, &t, hop, &f));
            }
            let mut fast = f.clone();
            let Some((verdict, hop_due)) = ipv6_fast(&fast, &t, hop) else {
                continue;
            };
            if hop_due {
                decrement_hop(&mut fast[14..], false);
            }
            let mut p = Packet::new();
            p.load(&f).unwrap();
            let info = &t.ports[0];
            assert_eq!(
                ipv6(
                    &mut p,
                    14,
                    (0, info),
                    &t,
                    &cache,
                    [2, 0, 0, 0, 0, 0x22],
                    hop
                ),
                verdict,
                "{f:02x?}"
            );
            assert_eq!(p.data(), &fast[..], "{f:02x?}");
            decided += 1;
            forwarded += usize::from(fast[21] != f[21]);
            kept += usize::from(hop == HopLimit::Keep && f[38..54] == dsts[1].to_be_bytes());
        }
    }
    // Both kinds of decision were exercised.
    assert!(decided > 2_000 && forwarded > 500, "{decided} {forwarded}");
    assert!(kept > 500, "{kept}");
    assert!(read_decided > 1_000, "{read_decided}");
}

#[test]
fn answers_arp_for_own_address_and_learns_sender() {
    let t = tables();
    let cache = NeighbourCache::default();
    let mut p = Packet::new();
    p.load(&arp_request([198, 51, 100, 1])).unwrap();
    assert_eq!(triage(&mut p, 0, &t, &cache), Triage::Reply);
    let d = p.data();
    assert_eq!(&d[0..6], &[2, 0, 0, 0, 0, 0x22]);
    assert_eq!(u16::from_be_bytes([d[20], d[21]]), 2, "ARP reply");
    assert_eq!(&d[22..28], &t.ports[0].mac);
    assert_eq!(&d[28..32], &[198, 51, 100, 1]);
    assert_eq!(&d[38..42], &[198, 51, 100, 2]);
    assert_eq!(cache.get(true, 0xc633_6402), Some([2, 0, 0, 0, 0, 0x22]));
    // Not ours: learned from, not answered.
    p.load(&arp_request([198, 51, 100, 9])).unwrap();
    assert_eq!(triage(&mut p, 0, &t, &cache), Triage::Consumed);
    // Truncated.
    p.load(&arp_request([198, 51, 100, 1])[..30]).unwrap();
    assert_eq!(
        triage(&mut p, 0, &t, &cache),
        Triage::Drop(DropReason::Malformed)
    );
}

#[test]
fn solicitation_round_trip_v6() {
    // Our own NS for our own address, fed back in, is answered with a valid NA.
    let t = tables();
    let cache = NeighbourCache::default();
    let mut p = Packet::new();
    let ours = u128::from("2001:db8:100::1".parse::<std::net::Ipv6Addr>().unwrap());
    assert!(build_solicitation(&mut p, &t.ports[0], false, ours));
    assert_eq!(triage(&mut p, 0, &t, &cache), Triage::Reply);
    let d = p.data();
    let ip = &d[14..];
    assert_eq!(ip[40], ND_NA);
    let mut s = [0u8; 16];
    s.copy_from_slice(&ip[8..24]);
    let mut dd = [0u8; 16];
    dd.copy_from_slice(&ip[24..40]);
    assert_eq!(icmpv6_checksum(&s, &dd, &ip[40..]), 0);
    // The NA teaches the sender of the NS (here: ourselves) our MAC.
    assert_eq!(triage(&mut p, 0, &t, &cache), Triage::Consumed);
    assert_eq!(cache.get(false, ours), Some(t.ports[0].mac));
}

#[test]
fn ttl_and_errors() {
    let t = tables();
    let cache = NeighbourCache::default();
    let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 0x22, 8, 0];
    let mut ip = [0u8; 28];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&28u16.to_be_bytes());
    ip[8] = 1;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&[198, 51, 100, 2]);
    ip[16..20].copy_from_slice(&[203, 0, 113, 2]);
    let c = checksum::checksum(&ip[..20]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f.extend_from_slice(&ip);
    let mut p = Packet::new();
    p.load(&f).unwrap();
    assert_eq!(triage(&mut p, 0, &t, &cache), Triage::TimeExceeded(14));
    let mut e = Packet::new();
    let src: IpAddr = "198.51.100.1".parse().unwrap();
    assert!(build_icmp_error(
        &mut e,
        &p.data()[14..],
        IcmpError::TooBig(1400),
        src
    ));
    let d = e.data();
    assert_eq!(checksum::checksum(&d[..20]), 0);
    assert_eq!(checksum::checksum(&d[20..]), 0);
    assert_eq!((d[20], d[21]), (3, 4));
    assert_eq!(u16::from_be_bytes([d[26], d[27]]), 1400);
    assert_eq!(&d[16..20], &[198, 51, 100, 2]);
    // No error about an error.
    let err_copy = d.to_vec();
    assert!(!build_icmp_error(
        &mut e,
        &err_copy,
        IcmpError::TimeExceeded,
        src
    ));
    // TTL 2 is decremented, the checksum stays valid.
    p.data_mut()[14 + 8] = 2;
    let c = {
        let ipb = &mut p.data_mut()[14..34];
        ipb[10] = 0;
        ipb[11] = 0;
        checksum::checksum(ipb)
    };
    p.data_mut()[24..26].copy_from_slice(&c.to_be_bytes());
    assert_eq!(triage(&mut p, 0, &t, &cache), Triage::Pipeline);
    assert_eq!(p.data()[22], 1);
    assert_eq!(checksum::checksum(&p.data()[14..34]), 0);
}

#[test]
fn never_panics_on_garbage() {
    let t = tables();
    let cache = NeighbourCache::default();
    let mut p = Packet::new();
    let mut e = Packet::new();
    let src: IpAddr = "198.51.100.1".parse().unwrap();
    let src6: IpAddr = "2001:db8:100::1".parse().unwrap();
    let mut x: u64 = 0x1234_5678_9abc_def0;
    for len in 0..400usize {
        for et in [0x0806u16, 0x0800, 0x86dd] {
            let mut f = vec![2, 0, 0, 0, 0, 1, 2, 0, 0, 0, 0, 2];
            f.extend_from_slice(&et.to_be_bytes());
            for _ in 0..len {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                f.push(x as u8);
            }
            if f.len() > 14 {
                f[14] = if et == 0x86dd { 0x60 } else { 0x45 };
            }
            p.load(&f).unwrap();
            let _ = triage(&mut p, 0, &t, &cache);
            let _ = build_icmp_error(&mut e, &f[14..], IcmpError::TooBig(1280), src);
            let _ = build_icmp_error(&mut e, &f[14..], IcmpError::TimeExceeded, src6);
        }
    }
}

fn hex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// ICMP errors byte for byte as scapy 2.5 builds them: `IP(src, dst, ttl=64, id=0) /
/// ICMP(type=3, code=4, nexthopmtu=1346) / orig`, and for IPv6 `IPv6(src, dst, hlim=64) /
/// ICMPv6TimeExceeded() / orig` and `ICMPv6PacketTooBig(mtu=1280)`.
#[test]
fn icmp_errors_match_scapy() {
    let orig4 = hex(concat!(
        "45000030123440003f11c336c633640acb0071149c400009001c4865",
        "7878787878787878787878787878787878787878"
    ));
    let mut e = Packet::new();
    let src: IpAddr = "198.51.100.1".parse().unwrap();
    assert!(build_icmp_error(
        &mut e,
        &orig4,
        IcmpError::TooBig(1346),
        src
    ));
    let scapy4 = hex(concat!(
        "4500004c000000004001263fc6336401c633640a03045e3a00000542",
        "45000030123440003f11c336c633640acb0071149c400009001c4865",
        "7878787878787878787878787878787878787878"
    ));
    assert_eq!(e.data(), &scapy4[..]);

    let orig6 = hex(concat!(
        "600000000014110120010db801000000000000000000001020010db8",
        "0113000000000000000000209c40000900142cef797979797979797979797979"
    ));
    let src6: IpAddr = "2001:db8:100::1".parse().unwrap();
    let head6 = "6000000000443a4020010db801000000000000000000000120010db80100000000000000000000100";
    assert!(build_icmp_error(
        &mut e,
        &orig6,
        IcmpError::TimeExceeded,
        src6
    ));
    let scapy6 = hex(&format!("{head6}3002e0e00000000{}", hex_of(&orig6)));
    assert_eq!(e.data(), &scapy6[..]);
    assert!(build_icmp_error(
        &mut e,
        &orig6,
        IcmpError::TooBig(1280),
        src6
    ));
    let scapy6tb = hex(&format!("{head6}2002a0e00000500{}", hex_of(&orig6)));
    assert_eq!(e.data(), &scapy6tb[..]);
}

fn hex_of(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
