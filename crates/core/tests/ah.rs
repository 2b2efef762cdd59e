//! AH (RFC 4302) in the pipeline: packets byte-for-byte equal to scapy 2.5's (IPv4 with a
//! router-alert option, IPv6 with a hop-by-hop option marked mutable), both ways; round
//! trips through the pipeline in tunnel and transport mode with HMAC, GMAC and ESN, on every
//! crypto back-end (intel-ipsec-mb's multi-buffer ICVs and the portable MACs give the same
//! bytes); a tampered packet in a burst fails alone; an ESP + AH bundle from a setkey
//! script; and inbound drops by reason.

mod common;

use std::sync::Arc;

use common::hex;
use espgw_config::{parse_unvalidated, CryptoPolicy, Direction};
use espgw_core::packet::{Packet, Verdict};
use espgw_core::{DropReason, Pipeline, Tables};
use espgw_crypto::aws_lc::AwsLcProvider;
use espgw_crypto::{all_providers, CryptoProvider};

/// Outbound and inbound AH SAs 0x600 (HMAC-SHA1-96, IPv4) and 0x601 (HMAC-SHA-256-128,
/// IPv6), transport mode, with the keys of the scapy vectors below.
const TRANSPORT: &str = r#"
[[sa]]
direction = "out"
spi = 0x600
mode = "transport"
protocol = "ah"
integrity = "hmac-sha1-96"
integrity_key = "0x0102030405060708090a0b0c0d0e0f1011121314"
initial_seq = 6

[[sa]]
direction = "in"
spi = 0x600
mode = "transport"
protocol = "ah"
integrity = "hmac-sha1-96"
integrity_key = "0x0102030405060708090a0b0c0d0e0f1011121314"

[[sa]]
direction = "out"
spi = 0x601
mode = "transport"
protocol = "ah"
integrity = "hmac-sha256-128"
integrity_key = "0x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"
initial_seq = 8

[[sa]]
direction = "in"
spi = 0x601
mode = "transport"
protocol = "ah"
integrity = "hmac-sha256-128"
integrity_key = "0x000102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f"

[[policy]]
direction = "out"
src = "0.0.0.0/0"
dst = "0.0.0.0/0"
action = "protect"
sa = 0x600

[[policy]]
direction = "in"
src = "0.0.0.0/0"
dst = "0.0.0.0/0"
action = "protect"
sa = 0x600

[[policy]]
direction = "out"
src = "::/0"
dst = "::/0"
action = "protect"
sa = 0x601

[[policy]]
direction = "in"
src = "::/0"
dst = "::/0"
action = "protect"
sa = 0x601

[[route]]
dst = "0.0.0.0/0"
port = 1

[[route]]
dst = "::/0"
port = 1
"#;

// scapy 2.5: SecurityAssociation(AH, spi=0x600, seq_num=7, auth_algo="HMAC-SHA1-96",
// auth_key=bytes(range(1, 21))) over IP(src="203.0.113.5", dst="198.51.100.7", id=0x1234,
// options=[IPOption_Router_Alert()]) / UDP(sport=1234, dport=53) / "espgw AH known answer".
const PLAIN4: &str = "460000351234000040116d3fcb007105c63364079404000004d20035001d87a56573706777204148206b6e6f776e20616e73776572";
const AH4: &str = "4600004d1234000040336d05cb007105c6336407940400001104000000000600000000076a43d1f31ac82a8756a5a4e404d20035001d87a56573706777204148206b6e6f776e20616e73776572";
// scapy 2.5: spi=0x601, seq_num=9, "SHA2-256-128", key bytes(range(32)), over IPv6 with flow
// label 0x12345 and a hop-by-hop header holding option 0x3e (data may change en route).
const PLAIN6: &str = "60012345001d004020010db801130000000000000000000520010db801000000000000000000000711003e02010201000001000200151d22763620686f702d62792d686f70";
const AH6: &str = "60012345003d004020010db801130000000000000000000520010db801000000000000000000000733003e02010201001106000000000601000000090a0ad84aab8710ce3f0a48a7b43399b6000000000001000200151d22763620686f702d62792d686f70";

/// A configuration's two directions as two gateways' tables: the fixtures verify scapy's
/// AH with the key they also send with, and one key on an inbound and an outbound SA of
/// one gateway is refused (it would repeat nonces between the two directions).
struct Gw {
    out: Arc<Tables>,
    inb: Arc<Tables>,
}

fn tables(text: &str) -> Gw {
    tables_with(text, &AwsLcProvider)
}

/// [`tables`], with the SAs' keys made by `provider`.
fn tables_with(text: &str, provider: &dyn CryptoProvider) -> Gw {
    let policy = CryptoPolicy {
        allow_legacy: true,
        allow_null: false,
    };
    let cfg = parse_unvalidated(text, "test.conf", None, policy).expect("config");
    let half = |dir: Direction| {
        let mut c = cfg.clone();
        c.sas.retain(|s| s.direction == dir);
        c.policies.retain(|p| p.direction == dir);
        Arc::new(Tables::build(&c, provider, None).expect("tables"))
    };
    Gw {
        out: half(Direction::Out),
        inb: half(Direction::In),
    }
}

fn frame(ip: &[u8]) -> Packet {
    let mut f = vec![0u8; 12];
    f.extend_from_slice(if ip[0] >> 4 == 4 {
        &[0x08, 0x00]
    } else {
        &[0x86, 0xdd]
    });
    f.extend_from_slice(ip);
    let mut p = Packet::new();
    p.load(&f).unwrap();
    p
}

/// Runs IP packets through a fresh pipeline; returns each result's IP bytes (or its drop
/// reason) and the pipeline.
fn run(gw: &Gw, dir: Direction, ips: &[Vec<u8>]) -> (Vec<Result<Vec<u8>, DropReason>>, Pipeline) {
    let t = match dir {
        Direction::Out => &gw.out,
        Direction::In => &gw.inb,
    };
    let mut pipe = Pipeline::new(t.clone());
    let mut pkts: Vec<Packet> = ips.iter().map(|ip| frame(ip)).collect();
    pipe.process(dir, &mut pkts);
    let out = pkts
        .iter()
        .map(|p| match p.verdict {
            Verdict::Forward(_) => Ok(p.data()[14..].to_vec()),
            Verdict::Drop(r) => Err(r),
            v => panic!("unexpected verdict {v:?}"),
        })
        .collect();
    (out, pipe)
}

/// Recomputes the IPv4 header checksum after a test edited the header.
fn fix4(mut ip: Vec<u8>) -> Vec<u8> {
    let hl = usize::from(ip[0] & 0xf) * 4;
    ip[10..12].fill(0);
    let c = espgw_wire::checksum::checksum(&ip[..hl]);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    ip
}

#[test]
fn outbound_ah_equals_scapy() {
    let t = tables(TRANSPORT);
    let (out, pipe) = run(&t, Direction::Out, &[hex(PLAIN4), hex(PLAIN6)]);
    assert_eq!(
        out[0].as_deref(),
        Ok(&hex(AH4)[..]),
        "IPv4, router alert, HMAC-SHA1-96"
    );
    assert_eq!(
        out[1].as_deref(),
        Ok(&hex(AH6)[..]),
        "IPv6, hop-by-hop, HMAC-SHA-256-128"
    );
    assert_eq!(pipe.counters.encrypted, 2);
}

#[test]
fn inbound_ah_from_scapy_verifies_and_is_removed() {
    let t = tables(TRANSPORT);
    let (out, pipe) = run(&t, Direction::In, &[hex(AH4), hex(AH6)]);
    assert_eq!(out[0].as_deref(), Ok(&hex(PLAIN4)[..]));
    assert_eq!(out[1].as_deref(), Ok(&hex(PLAIN6)[..]));
    assert_eq!(pipe.counters.decrypted, 2);
    // The mutable fields may change on the way (TTL, TOS, hop limit, flow label, the
    // mutable option's data); the immutable ones may not.
    let mut moved4 = hex(AH4);
    moved4[1] = 0xb8; // TOS
    moved4[8] = 3; // TTL
    let mut moved6 = hex(AH6);
    moved6[1] = 0x0a; // traffic class and flow label
    moved6[7] = 1; // hop limit
    moved6[44] ^= 0xff; // data of option 0x3e
    let mut id4 = hex(AH4);
    id4[5] ^= 1; // identification
    let mut opt6 = hex(AH6);
    opt6[42] = 0x1e; // the option's type (immutable even where its data is not)
    let mut pay4 = hex(AH4);
    *pay4.last_mut().unwrap() ^= 1;
    // One fresh gateway per packet, so that none is a replay of another.
    let one = |ip: Vec<u8>| run(&tables(TRANSPORT), Direction::In, &[ip]).0.remove(0);
    let mut moved_plain4 = hex(PLAIN4);
    moved_plain4[1] = 0xb8;
    moved_plain4[8] = 3;
    assert_eq!(one(fix4(moved4)), Ok(fix4(moved_plain4)));
    assert!(one(moved6).is_ok());
    assert_eq!(one(fix4(id4)), Err(DropReason::AuthFailed));
    assert_eq!(one(opt6), Err(DropReason::AuthFailed));
    assert_eq!(one(pay4), Err(DropReason::AuthFailed));
}

#[test]
fn ah_without_an_ah_sa_is_no_sa_not_plaintext() {
    // IPv6's flow key names the protocol after AH (UDP here): a gateway with no AH SA must
    // still see the AH, not let it through a bypass rule for UDP.
    let t = tables(
        "[[policy]]\ndirection = \"in\"\nsrc = \"::/0\"\ndst = \"::/0\"\naction = \"bypass\"\n\n\
         [[policy]]\ndirection = \"in\"\nsrc = \"0.0.0.0/0\"\ndst = \"0.0.0.0/0\"\naction = \"bypass\"\n\n\
         [[route]]\ndst = \"::/0\"\nport = 1\n",
    );
    let (out, _) = run(&t, Direction::In, &[hex(AH6), hex(AH4), hex(PLAIN6)]);
    assert_eq!(out[0], Err(DropReason::NoSa));
    assert_eq!(out[1], Err(DropReason::NoSa));
    assert!(
        out[2].is_ok(),
        "plain IPv6 with a hop-by-hop header still bypasses"
    );
}

#[test]
fn inbound_ah_drops_by_reason() {
    let t = tables(TRANSPORT);
    let good = hex(AH4);
    let mut unknown = good.clone();
    unknown[31] = 0x99; // SPI 0x699
    let mut short = good.clone();
    short.truncate(24 + 12 + 4);
    short[2..4].copy_from_slice(&40u16.to_be_bytes());
    let short = fix4(short);
    // IPv6 with a fragment header in front of AH: not checkable before reassembly.
    let ah6 = hex(AH6);
    let mut fragmented = ah6[..40].to_vec();
    fragmented[6] = 44;
    fragmented.extend_from_slice(&[51, 0, 0, 1, 0, 0, 0, 7]);
    fragmented.extend_from_slice(&ah6[48..]);
    let (out, pipe) = run(
        &t,
        Direction::In,
        &[good.clone(), good, unknown, short, fragmented],
    );
    assert!(out[0].is_ok());
    assert_eq!(out[1], Err(DropReason::Replay));
    assert_eq!(out[2], Err(DropReason::NoSa));
    assert_eq!(out[3], Err(DropReason::Truncated));
    assert_eq!(out[4], Err(DropReason::Fragment));
    let sa = t
        .inb
        .sas
        .iter()
        .find(|s| s.direction == Direction::In && s.spi == 0x600)
        .unwrap();
    assert_eq!(sa.state.counters.dropped(DropReason::Replay), 1);
    assert_eq!(pipe.counters.dropped(DropReason::NoSa), 1);
}

/// One SA each way between 192.0.2.1 and 192.0.2.2 (or 2001:db8:2::1/2) in `mode`, with
/// `integ` and `esn`; `me` is 1 or 2.
fn tunnel_pair(me: u8, v6: bool, integ: &str, key: &str, esn: bool) -> String {
    let (a, b, any, nets) = if v6 {
        (
            "2001:db8:2::1",
            "2001:db8:2::2",
            "::/0",
            ("2001:db8:100::/64", "2001:db8:113::/64"),
        )
    } else {
        (
            "192.0.2.1",
            "192.0.2.2",
            "0.0.0.0/0",
            ("198.51.100.0/24", "203.0.113.0/24"),
        )
    };
    let (local, remote, src, dst) = if me == 1 {
        (a, b, nets.0, nets.1)
    } else {
        (b, a, nets.1, nets.0)
    };
    let mode = if v6 { "ipv6-tunnel" } else { "ipv4-tunnel" };
    format!(
        r#"
[[sa]]
direction = "out"
spi = {out}
mode = "{mode}"
local = "{local}"
remote = "{remote}"
protocol = "ah"
integrity = "{integ}"
integrity_key = "{key}"
esn = {esn}
initial_seq = {seq}

[[sa]]
direction = "in"
spi = {inn}
mode = "{mode}"
local = "{local}"
remote = "{remote}"
protocol = "ah"
integrity = "{integ}"
integrity_key = "{key}"
esn = {esn}
initial_seq = {seq}

[[policy]]
direction = "out"
src = "{src}"
dst = "{dst}"
action = "protect"
sa = {out}

[[policy]]
direction = "in"
src = "{dst}"
dst = "{src}"
action = "protect"
sa = {inn}

[[route]]
dst = "{any}"
port = 1
"#,
        out = if me == 1 { 0x700 } else { 0x701 },
        inn = if me == 1 { 0x701 } else { 0x700 },
        seq = if esn { (1u64 << 32) - 3 } else { 0 },
    )
}

fn udp_packet(v6: bool, len: usize) -> Vec<u8> {
    use espgw_wire::ipv4::Ipv4Repr;
    use espgw_wire::ipv6::Ipv6Repr;
    let payload: Vec<u8> = (0..len).map(|i| i as u8).collect();
    let mut udp = vec![0x30, 0x39, 0x00, 0x35, 0, 0, 0, 0];
    udp[4..6].copy_from_slice(&((8 + len) as u16).to_be_bytes());
    udp.extend_from_slice(&payload);
    let mut ip = vec![0u8; if v6 { 40 } else { 20 }];
    if v6 {
        Ipv6Repr {
            src: "2001:db8:100::5".parse().unwrap(),
            dst: "2001:db8:113::9".parse().unwrap(),
            next_header: 17,
            traffic_class: 0,
            flow_label: 7,
            hop_limit: 64,
            payload_len: udp.len(),
        }
        .emit(&mut ip)
        .unwrap();
    } else {
        Ipv4Repr {
            src: "198.51.100.5".parse().unwrap(),
            dst: "203.0.113.9".parse().unwrap(),
            protocol: 17,
            tos: 0,
            ttl: 64,
            ident: 1,
            dont_fragment: true,
            payload_len: udp.len(),
        }
        .emit(&mut ip)
        .unwrap();
    }
    ip.extend_from_slice(&udp);
    ip
}

#[test]
fn tunnel_round_trips_with_hmac_gmac_and_esn() {
    let cases = [
        ("hmac-sha512-256", "0x".to_string() + &"5a".repeat(64)),
        ("aes-xcbc-mac-96", "0x".to_string() + &"11".repeat(16)),
        ("aes-128-gmac", "0x".to_string() + &"22".repeat(20)),
        ("aes-256-gmac", "0x".to_string() + &"33".repeat(36)),
    ];
    for (integ, key) in &cases {
        for v6 in [false, true] {
            for esn in [false, true] {
                let a = tables(&tunnel_pair(1, v6, integ, key, esn));
                let b = tables(&tunnel_pair(2, v6, integ, key, esn));
                // Across the 2^32 boundary with ESN: the high bits are in the ICV.
                let plain: Vec<Vec<u8>> = (0..6).map(|i| udp_packet(v6, i * 37)).collect();
                let (sealed, _) = run(&a, Direction::Out, &plain);
                let sealed: Vec<Vec<u8>> = sealed.into_iter().map(|r| r.unwrap()).collect();
                let what = format!("{integ} v6={v6} esn={esn}");
                let (opened, pipe) = run(&b, Direction::In, &sealed);
                assert_eq!(pipe.counters.decrypted, 6, "{what}: {:?}", pipe.counters);
                for (o, p) in opened.iter().zip(&plain) {
                    assert_eq!(o.as_deref(), Ok(&p[..]), "{what}");
                }
                // Each SA's totals: the packets and the bytes of what AH protected (the
                // pipeline adds them once a burst).
                let inner_bytes: usize = plain.iter().map(Vec::len).sum();
                for (gw, dir) in [(&a.out, Direction::Out), (&b.inb, Direction::In)] {
                    let sa = gw.sas.iter().find(|s| s.direction == dir).unwrap();
                    let c = &sa.state.counters;
                    assert_eq!(c.packets(), 6, "{what} {dir:?}: SA packets");
                    assert_eq!(c.bytes(), inner_bytes as u64, "{what} {dir:?}: SA bytes");
                }
                // Every back-end seals the same bytes (AH has no random IV) and opens what
                // the portable one sealed.
                for provider in all_providers() {
                    let what = format!("{what} {}", provider.name());
                    let a2 = tables_with(&tunnel_pair(1, v6, integ, key, esn), &*provider);
                    let (sealed2, _) = run(&a2, Direction::Out, &plain);
                    let sealed2: Vec<Vec<u8>> = sealed2.into_iter().map(|r| r.unwrap()).collect();
                    assert_eq!(sealed2, sealed, "{what}");
                    let b2 = tables_with(&tunnel_pair(2, v6, integ, key, esn), &*provider);
                    let (opened, pipe) = run(&b2, Direction::In, &sealed);
                    assert_eq!(pipe.counters.decrypted, 6, "{what}: {:?}", pipe.counters);
                    for (o, p) in opened.iter().zip(&plain) {
                        assert_eq!(o.as_deref(), Ok(&p[..]), "{what}");
                    }
                }
                // The outer header is AH with the expected SPI, and GMAC carries its IV.
                let ip_len = if v6 { 40 } else { 20 };
                let ah_hdr = &sealed[0][ip_len..];
                assert_eq!(&ah_hdr[4..8], &0x700u32.to_be_bytes(), "{what}");
                if integ.ends_with("gmac") {
                    let seq = if esn { (1u64 << 32) - 2 } else { 1 };
                    assert_eq!(&ah_hdr[12..20], &seq.to_be_bytes(), "{what}: IV");
                }
                // Replayed: refused; a different key: auth_failed.
                let (again, _) = run(&b, Direction::In, &sealed[..1]);
                assert_eq!(again[0], Err(DropReason::Replay), "{what}");
                let other = tables(&tunnel_pair(
                    2,
                    v6,
                    integ,
                    &key.replace(&key[2..4], "00"),
                    esn,
                ));
                let (bad, _) = run(&other, Direction::In, &sealed[..1]);
                assert_eq!(bad[0], Err(DropReason::AuthFailed), "{what}");
            }
        }
    }
}

/// A burst of one SA's AH packets with three changed in transit: a payload byte and an ICV
/// byte (each dropped as auth_failed, alone) and the TTL and TOS (mutable fields, outside
/// the ICV: accepted). On every back-end, and intel-ipsec-mb's keys are its multi-buffer
/// ones.
#[test]
fn tampered_ah_packets_in_a_burst_fail_alone() {
    let cases = [
        ("hmac-sha256-128", "0x".to_string() + &"5a".repeat(32)),
        ("aes-xcbc-mac-96", "0x".to_string() + &"11".repeat(16)),
        ("aes-128-gmac", "0x".to_string() + &"22".repeat(20)),
    ];
    for (integ, key) in &cases {
        for provider in all_providers() {
            let what = format!("{integ} {}", provider.name());
            let a = tables_with(&tunnel_pair(1, false, integ, key, false), &*provider);
            let b = tables_with(&tunnel_pair(2, false, integ, key, false), &*provider);
            let multi_buffer = b
                .inb
                .sas
                .iter()
                .all(|s| s.ah_key().is_some_and(|k| k.is_multi_buffer()));
            assert_eq!(
                multi_buffer,
                provider.name().starts_with("intel-ipsec-mb"),
                "{what}"
            );
            let plain: Vec<Vec<u8>> = (0..12).map(|i| udp_packet(false, 20 + i * 90)).collect();
            let (sealed, _) = run(&a, Direction::Out, &plain);
            let mut sealed: Vec<Vec<u8>> = sealed.into_iter().map(|r| r.unwrap()).collect();
            let genuine = sealed.clone();
            let n = sealed[2].len();
            sealed[2][n - 1] ^= 1; // payload
            sealed[5][20 + 12 + if integ.ends_with("gmac") { 8 } else { 0 }] ^= 0x80; // ICV
            sealed[7][8] -= 3; // TTL
            sealed[7][1] = 0xb8; // TOS
            sealed[7] = fix4(sealed[7].clone());
            let (opened, pipe) = run(&b, Direction::In, &sealed);
            for (i, (o, p)) in opened.iter().zip(&plain).enumerate() {
                if i == 2 || i == 5 {
                    assert_eq!(*o, Err(DropReason::AuthFailed), "{what} #{i}");
                } else {
                    assert_eq!(o.as_deref(), Ok(&p[..]), "{what} #{i}");
                }
            }
            assert_eq!(pipe.counters.decrypted, 10, "{what}");
            assert_eq!(pipe.counters.dropped(DropReason::AuthFailed), 2, "{what}");
            // The forged packets did not move the window: their genuine originals still
            // open; the accepted ones are replays now.
            let (again, _) = run(
                &b,
                Direction::In,
                &[genuine[2].clone(), genuine[5].clone(), genuine[0].clone()],
            );
            assert_eq!(again[0].as_deref(), Ok(&plain[2][..]), "{what}");
            assert_eq!(again[1].as_deref(), Ok(&plain[5][..]), "{what}");
            assert_eq!(again[2], Err(DropReason::Replay), "{what}");
        }
    }
}

/// The classic script, for gateway A (198.51.100.10) or, mirrored, gateway B.
fn classic(mirror: bool) -> String {
    let text = r#"
add {A} {B} ah 15700 -A hmac-md5 "1234567890123456";
add {B} {A} ah 24500 -A hmac-md5 "1234567890123456";
add {A} {B} esp 15701 -E 3des-cbc "123456789012123456789012" -A hmac-sha1 "12345678901234567890";
add {B} {A} esp 24501 -E 3des-cbc "123456789012123456789012" -A hmac-sha1 "12345678901234567890";
spdadd {A} {B} any -P out ipsec esp/transport//require ah/transport//require;
spdadd {B} {A} any -P in ipsec esp/transport//require ah/transport//require;
"#;
    let (a, b) = if mirror {
        ("203.0.113.9", "198.51.100.5")
    } else {
        ("198.51.100.5", "203.0.113.9")
    };
    let text = text.replace("{A}", a).replace("{B}", b);
    if mirror {
        text.replace("15700", "{x}")
            .replace("24500", "15700")
            .replace("{x}", "24500")
            .replace("15701", "{y}")
            .replace("24501", "15701")
            .replace("{y}", "24501")
    } else {
        text
    }
}

#[test]
fn setkey_bundle_round_trip_esp_inside_ah() {
    let a = tables(&classic(false));
    let b = tables(&classic(true));
    let plain: Vec<Vec<u8>> = (0..4).map(|i| udp_packet(false, i * 50)).collect();
    let (sealed, pipe) = run(&a, Direction::Out, &plain);
    assert_eq!(pipe.counters.encrypted, 4);
    for (i, s) in sealed.iter().enumerate() {
        let s = s.as_ref().unwrap();
        // [IPv4][AH nh=ESP, SPI 15700, seq i+1][ESP SPI 15701, seq i+1]...
        assert_eq!((s[9], s[20]), (51, 50));
        assert_eq!(&s[24..32], &[0, 0, 0x3d, 0x54, 0, 0, 0, i as u8 + 1]);
        assert_eq!(&s[44..52], &[0, 0, 0x3d, 0x55, 0, 0, 0, i as u8 + 1]);
    }
    let sealed: Vec<Vec<u8>> = sealed.into_iter().map(|r| r.unwrap()).collect();
    let (opened, pipe) = run(&b, Direction::In, &sealed);
    assert_eq!(pipe.counters.decrypted, 4, "{:?}", pipe.counters);
    for (o, p) in opened.iter().zip(&plain) {
        assert_eq!(o.as_deref(), Ok(&p[..]));
    }
}
