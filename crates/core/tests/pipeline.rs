//! The whole pipeline, outbound into inbound: round trips for random packets and keys in
//! every mode, and each kind of bad packet dropped under its own reason.

mod common;

use std::net::IpAddr;
use std::sync::Arc;

use common::*;
use espgw_config::*;
use espgw_core::packet::{Packet, Verdict};
use espgw_core::{esp_out, DropReason, Pipeline, Tables};
use espgw_crypto::{default_provider, CryptoProvider};
use espgw_wire::ethernet::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};
use espgw_wire::ipv4;
use espgw_wire::proto;
use proptest::prelude::*;

const SPI: u32 = 0x0000_1234;

#[derive(Debug, Clone, Copy)]
enum M {
    Tunnel4,
    Tunnel6,
    Transport,
}

fn pfx(s: &str) -> Prefix {
    let (a, l) = s.split_once('/').unwrap();
    Prefix {
        addr: a.parse().unwrap(),
        len: l.parse().unwrap(),
    }
}

fn policy(dir: Direction, src: &str, dst: &str, action: Action) -> PolicyConfig {
    PolicyConfig {
        direction: dir,
        priority: 0,
        src: pfx(src),
        dst: pfx(dst),
        proto: ANY_PROTO,
        sport: ANY_PORT,
        dport: ANY_PORT,
        action,
        per_worker_sas: Vec::new(),
        loc: Location::default(),
    }
}

/// A gateway with one SA in `dir`, policies for both families between the test bed's
/// networks, and routes everywhere out of port 1.
fn gateway(
    dir: Direction,
    mode: M,
    key: &[u8],
    esn: bool,
    udp: bool,
    icv: usize,
    tweak: impl FnOnce(&mut SaConfig),
) -> Config {
    let (a4, b4): (IpAddr, IpAddr) = ("192.0.2.1".parse().unwrap(), "192.0.2.2".parse().unwrap());
    let (a6, b6): (IpAddr, IpAddr) = (
        "2001:db8:2::1".parse().unwrap(),
        "2001:db8:2::2".parse().unwrap(),
    );
    let m = match (mode, dir) {
        (M::Tunnel4, Direction::Out) => Mode::Tunnel {
            local: a4,
            remote: b4,
        },
        (M::Tunnel4, Direction::In) => Mode::Tunnel {
            local: b4,
            remote: a4,
        },
        (M::Tunnel6, Direction::Out) => Mode::Tunnel {
            local: a6,
            remote: b6,
        },
        (M::Tunnel6, Direction::In) => Mode::Tunnel {
            local: b6,
            remote: a6,
        },
        (M::Transport, _) => Mode::Transport,
    };
    let mut s = sa(SPI, dir, m, key, [0xca, 0xfe, 0x00, 0x01], esn);
    s.suite.enc = espgw_crypto::Encryption::AesGcm {
        key_len: key.len(),
        icv_len: icv,
    };
    if udp {
        s.udp_encap = Some(UdpEncap::default());
    }
    tweak(&mut s);
    let mut c = Config {
        burst: DEFAULT_BURST,
        ..Config::default()
    };
    c.ensure_ports(2);
    c.sas.push(s);
    c.policies.push(policy(
        dir,
        "198.51.100.0/24",
        "203.0.113.0/24",
        Action::Protect(SPI),
    ));
    c.policies.push(policy(
        dir,
        "2001:db8:100::/64",
        "2001:db8:113::/64",
        Action::Protect(SPI),
    ));
    for d in ["0.0.0.0/0", "::/0"] {
        c.routes.push(RouteConfig {
            dst: pfx(d),
            port: 1,
            via: None,
            loc: Location::default(),
        });
    }
    c
}

fn run(t: &Arc<Tables>, dir: Direction, frames: &[Vec<u8>]) -> (Vec<Packet>, Pipeline) {
    run_as_worker(t, dir, frames, 0)
}

/// [`run`] on the pipeline of worker `worker` (which SA of a per-worker set it seals with).
fn run_as_worker(
    t: &Arc<Tables>,
    dir: Direction,
    frames: &[Vec<u8>],
    worker: usize,
) -> (Vec<Packet>, Pipeline) {
    let mut pipe = Pipeline::new(t.clone());
    pipe.set_worker(worker);
    let mut pkts: Vec<Packet> = frames
        .iter()
        .map(|f| {
            let mut p = Packet::new();
            p.load(f).unwrap();
            p
        })
        .collect();
    pipe.process(dir, &mut pkts);
    (pkts, pipe)
}

fn forwarded(pkts: &[Packet]) -> Vec<Vec<u8>> {
    pkts.iter()
        .filter(|p| matches!(p.verdict, Verdict::Forward(_)))
        .map(|p| p.data().to_vec())
        .collect()
}

struct Pair {
    tx: Arc<Tables>,
    rx: Arc<Tables>,
}

fn pair(
    provider: &dyn CryptoProvider,
    mode: M,
    key: &[u8],
    esn: bool,
    udp: bool,
    icv: usize,
) -> Pair {
    Pair {
        tx: tables(
            &gateway(Direction::Out, mode, key, esn, udp, icv, |_| {}),
            provider,
        ),
        rx: tables(
            &gateway(Direction::In, mode, key, esn, udp, icv, |_| {}),
            provider,
        ),
    }
}

fn mode_strategy() -> impl Strategy<Value = M> {
    prop_oneof![Just(M::Tunnel4), Just(M::Tunnel6), Just(M::Transport)]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(96))]
    /// Encapsulation and decapsulation give back the very packet, for random packets and
    /// keys, every mode, both families inside, ESN or not, UDP encapsulation or not, every
    /// key and ICV length, and with every crypto provider.
    #[test]
    fn round_trip(
        mode in mode_strategy(),
        v4 in any::<bool>(),
        l4 in 0u8..3,
        esn in any::<bool>(),
        udp in any::<bool>(),
        key_len in prop_oneof![Just(16usize), Just(24), Just(32)],
        icv in prop_oneof![Just(8usize), Just(12), Just(16)],
        key_seed in any::<u64>(),
        payloads in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..1400), 1..6),
        tos in any::<u8>(),
    ) {
        let key: Vec<u8> = (0..key_len).map(|i| (key_seed >> (i % 8 * 8)) as u8 ^ i as u8).collect();
        let frames: Vec<Vec<u8>> = payloads.iter().enumerate().map(|(i, p)| frame(v4, l4, p, 10 + i as u8, tos & !3)).collect();
        for provider in espgw_crypto::all_providers() {
            let pr = pair(provider.as_ref(), mode, &key, esn, udp, icv);
            let (enc, _) = run(&pr.tx, Direction::Out, &frames);
            let esp = forwarded(&enc);
            prop_assert_eq!(esp.len(), frames.len());
            for e in &esp {
                // Nothing of the plaintext payload shows on the wire.
                let outer_proto = match (mode, e[12]) {
                    (M::Transport, 0x08) => e[14 + 9],
                    (M::Transport, _) => e[14 + 6],
                    (M::Tunnel4, _) => e[14 + 9],
                    (M::Tunnel6, _) => e[14 + 6],
                };
                prop_assert_eq!(outer_proto, if udp { proto::UDP } else { proto::ESP });
            }
            let (dec, pipe) = run(&pr.rx, Direction::In, &esp);
            let back = forwarded(&dec);
            prop_assert_eq!(pipe.counters.total_drops(), 0, "{:?}", pipe.counters.drops);
            prop_assert_eq!(back.len(), frames.len());
            for (b, f) in back.iter().zip(&frames) {
                prop_assert_eq!(&b[14..], &f[14..], "inner packet changed ({})", provider.name());
            }
        }
    }
}

fn one_esp(pr: &Pair, n: usize) -> Vec<Vec<u8>> {
    let frames: Vec<Vec<u8>> = (0..n)
        .map(|i| frame(true, 0, &[i as u8; 40], 10, 0))
        .collect();
    forwarded(&run(&pr.tx, Direction::Out, &frames).0)
}

/// Runs `frames` inbound and checks that exactly `reason` dropped each, nothing got out,
/// and the SA counted it too when `on_sa`.
fn expect_drop(pr: &Pair, frames: &[Vec<u8>], reason: DropReason, on_sa: bool) {
    let (pkts, pipe) = run(&pr.rx, Direction::In, frames);
    assert!(
        forwarded(&pkts).is_empty(),
        "{reason:?}: something was forwarded"
    );
    assert!(
        pkts.iter().all(|p| p.verdict == Verdict::Drop(reason)),
        "{reason:?}: {:?}",
        pkts.iter().map(|p| p.verdict).collect::<Vec<_>>()
    );
    assert_eq!(pipe.counters.dropped(reason), frames.len() as u64);
    assert_eq!(pipe.counters.total_drops(), frames.len() as u64);
    if on_sa {
        assert_eq!(
            pr.rx.sas[0].state.counters.dropped(reason),
            frames.len() as u64,
            "{reason:?} on the SA"
        );
    }
}

/// The test bed's IPv4 tunnel with a fixed key, with or without ESN.
fn tunnel4(dir: Direction, esn: bool, tweak: impl FnOnce(&mut SaConfig)) -> Config {
    gateway(dir, M::Tunnel4, &[7; 16], esn, false, 16, tweak)
}

fn tunnel_pair() -> Pair {
    pair(
        default_provider().as_ref(),
        M::Tunnel4,
        &[7u8; 16],
        false,
        false,
        16,
    )
}

// Offsets in an ESP-in-IPv4 tunnel frame: Ethernet 14, IPv4 20.
const ESP_AT: usize = 34;

#[test]
fn flipped_bits_fail_authentication_and_never_leave() {
    let pr = tunnel_pair();
    let e = one_esp(&pr, 1).remove(0);
    let len = e.len();
    for (what, at) in [
        ("sequence number", ESP_AT + 7),
        ("IV", ESP_AT + 9),
        ("ciphertext", ESP_AT + 20),
        ("ICV", len - 1),
    ] {
        let mut bad = e.clone();
        bad[at] ^= 0x04;
        let pr2 = tunnel_pair();
        expect_drop(&pr2, &[bad], DropReason::AuthFailed, true);
        let _ = what;
    }
    let mut bad = e.clone();
    bad[ESP_AT] ^= 0x80;
    expect_drop(&pr, &[bad], DropReason::NoSa, false);
    // And the untouched packet still passes: the drops above changed no state.
    let (pkts, _) = run(&pr.rx, Direction::In, &[e]);
    assert_eq!(forwarded(&pkts).len(), 1);
}

#[test]
fn replayed_packets_are_dropped() {
    let pr = tunnel_pair();
    let esp = one_esp(&pr, 3);
    let (pkts, _) = run(&pr.rx, Direction::In, &esp);
    assert_eq!(forwarded(&pkts).len(), 3);
    expect_drop(&pr, &esp[1..2], DropReason::Replay, true);
    // A duplicate inside one burst: the first passes, the copy does not.
    let pr = tunnel_pair();
    let esp = one_esp(&pr, 1);
    let (pkts, pipe) = run(&pr.rx, Direction::In, &[esp[0].clone(), esp[0].clone()]);
    assert_eq!(forwarded(&pkts).len(), 1);
    assert_eq!(pipe.counters.dropped(DropReason::Replay), 1);
}

#[test]
fn truncated_packets_are_dropped() {
    let pr = tunnel_pair();
    let e = one_esp(&pr, 1).remove(0);
    let mut short = e[..ESP_AT + 8 + 8 + 10].to_vec();
    // Keep the IP length honest so the ESP layer sees the truncation.
    let tl = (short.len() - 14) as u16;
    short[16..18].copy_from_slice(&tl.to_be_bytes());
    fix_ipv4_checksum(&mut short);
    expect_drop(&pr, &[short], DropReason::Truncated, true);
    // A frame cut below its IP length is malformed.
    expect_drop(
        &pr,
        &[e[..e.len() - 5].to_vec()],
        DropReason::Malformed,
        false,
    );
}

#[test]
fn bad_padding_is_dropped_after_authentication() {
    let pr = tunnel_pair();
    let e = one_esp(&pr, 1).remove(0);
    // Build an authentic packet whose padding is wrong: same headers, text re-sealed.
    let inner = frame(true, 0, &[1; 40], 10, 0)[14..].to_vec();
    let mut text = inner.clone();
    text.extend_from_slice(&[9, 9, 2, proto::IPIP]); // padding must be 1, 2
    let mut esp = vec![0u8; 16 + text.len() + 16];
    esp[16..16 + text.len()].copy_from_slice(&text);
    esp_out::seal_packet(&pr.tx.sas[0], 5, &mut esp).unwrap();
    let mut f = e[..ESP_AT].to_vec();
    f.extend_from_slice(&esp);
    let tl = (f.len() - 14) as u16;
    f[16..18].copy_from_slice(&tl.to_be_bytes());
    fix_ipv4_checksum(&mut f);
    expect_drop(&pr, &[f], DropReason::BadPadding, true);
}

#[test]
fn inner_packet_outside_the_selectors_is_dropped() {
    // The sender protects everything; the receiver's policy only admits 198.51.100.0/24.
    let p = default_provider();
    let mut txc = tunnel4(Direction::Out, false, |_| {});
    txc.policies.insert(
        0,
        policy(
            Direction::Out,
            "0.0.0.0/0",
            "0.0.0.0/0",
            Action::Protect(SPI),
        ),
    );
    let pr = Pair {
        tx: tables(&txc, p.as_ref()),
        rx: tables(&tunnel4(Direction::In, false, |_| {}), p.as_ref()),
    };
    let mut f = frame(true, 0, &[3; 30], 10, 0);
    f[14 + 12] = 192; // source 192.51.100.10: outside the inbound selector
    fix_ipv4_checksum(&mut f);
    let esp = forwarded(&run(&pr.tx, Direction::Out, &[f]).0);
    assert_eq!(esp.len(), 1);
    expect_drop(&pr, &esp, DropReason::PolicyMismatch, true);
}

#[test]
fn plaintext_that_must_be_protected_is_dropped() {
    let pr = tunnel_pair();
    expect_drop(
        &pr,
        &[frame(true, 0, &[1; 10], 10, 0)],
        DropReason::PlaintextProtected,
        false,
    );
}

#[test]
fn unknown_spi_is_dropped() {
    let p = default_provider();
    let pr = tunnel_pair();
    let mut c = tunnel4(Direction::Out, false, |s| s.spi = 0x9999);
    c.policies
        .iter_mut()
        .for_each(|p| p.action = Action::Protect(0x9999));
    let other = Pair {
        tx: tables(&c, p.as_ref()),
        rx: pr.rx.clone(),
    };
    let esp = one_esp(&other, 2);
    expect_drop(&other, &esp, DropReason::NoSa, false);
}

#[test]
fn sequence_numbers_never_wrap() {
    let p = default_provider();
    let c = tunnel4(Direction::Out, false, |s| {
        s.initial_seq = u64::from(u32::MAX) - 2
    });
    let t = tables(&c, p.as_ref());
    let frames: Vec<Vec<u8>> = (0..5).map(|_| frame(true, 0, &[0; 20], 10, 0)).collect();
    let (pkts, pipe) = run(&t, Direction::Out, &frames);
    let out = forwarded(&pkts);
    assert_eq!(out.len(), 2, "only 2^32-2 and 2^32-1 may be sent");
    let seqs: Vec<u32> = out
        .iter()
        .map(|f| u32::from_be_bytes(f[ESP_AT + 4..ESP_AT + 8].try_into().unwrap()))
        .collect();
    assert_eq!(seqs, vec![u32::MAX - 1, u32::MAX]);
    assert_eq!(pipe.counters.dropped(DropReason::SeqExhausted), 3);
    assert!(t.sas[0]
        .state
        .exhausted
        .load(std::sync::atomic::Ordering::Relaxed));
    // With ESN the same SA carries on past 2^32 and the IV is the full 64-bit number.
    let c = tunnel4(Direction::Out, true, |s| {
        s.initial_seq = u64::from(u32::MAX) - 1
    });
    let t = tables(&c, p.as_ref());
    let out = forwarded(&run(&t, Direction::Out, &frames).0);
    assert_eq!(out.len(), 5);
    let ivs: Vec<u64> = out
        .iter()
        .map(|f| u64::from_be_bytes(f[ESP_AT + 8..ESP_AT + 16].try_into().unwrap()))
        .collect();
    assert_eq!(
        ivs,
        vec![
            (1 << 32) - 1,
            1 << 32,
            (1 << 32) + 1,
            (1 << 32) + 2,
            (1 << 32) + 3
        ]
    );
}

#[test]
fn hard_lifetime_stops_the_sa_and_soft_is_reported() {
    let p = default_provider();
    let c = tunnel4(Direction::Out, false, |s| {
        s.lifetime.soft_packets = Some(2);
        s.lifetime.hard_packets = Some(3);
    });
    let t = tables(&c, p.as_ref());
    let frames: Vec<Vec<u8>> = (0..5).map(|_| frame(true, 0, &[0; 20], 10, 0)).collect();
    let (pkts, pipe) = run(&t, Direction::Out, &frames[..2]);
    assert_eq!(forwarded(&pkts).len(), 2);
    assert_eq!(pipe.counters.total_drops(), 0);
    let (pkts, pipe) = run(&t, Direction::Out, &frames);
    assert_eq!(forwarded(&pkts).len(), 1);
    assert_eq!(pipe.counters.dropped(DropReason::LifetimeExpired), 4);
    let st = &t.sas[0].state;
    assert!(st.soft_expired.load(std::sync::atomic::Ordering::Relaxed));
    assert!(st.hard_expired.load(std::sync::atomic::Ordering::Relaxed));
}

#[test]
fn ecn_is_copied_out_and_combined_in() {
    // RFC 6040: inner ECT(0) leaves with an ECT(0) outer; an outer CE marks the inner CE.
    let pr = tunnel_pair();
    let f = frame(true, 0, &[1; 20], 10, 0x2a << 2 | 2);
    let esp = forwarded(&run(&pr.tx, Direction::Out, std::slice::from_ref(&f)).0).remove(0);
    assert_eq!(
        esp[15],
        0x2a << 2 | 2,
        "DSCP and ECN copied to the outer header"
    );
    let mut ce = esp.clone();
    ce[15] |= 3;
    fix_ipv4_checksum(&mut ce);
    let back = forwarded(&run(&pr.rx, Direction::In, &[ce]).0).remove(0);
    assert_eq!(back[15] & 3, 3);
    assert!(ipv4::Ipv4Packet::new_checked(&back[14..])
        .unwrap()
        .verify_checksum());
}

#[test]
fn every_output_frame_is_routed_with_the_configured_macs() {
    let p = default_provider();
    let mut c = tunnel4(Direction::Out, false, |_| {});
    c.neighbours.push(NeighbourConfig {
        port: 1,
        ip: None,
        mac: [2, 9, 9, 9, 9, 9],
        loc: Location::default(),
    });
    c.ports[1].mac = [2, 1, 1, 1, 1, 1];
    let t = tables(&c, p.as_ref());
    let out = forwarded(&run(&t, Direction::Out, &[frame(false, 1, &[5; 9], 3, 0)]).0);
    assert_eq!(&out[0][0..6], &[2, 9, 9, 9, 9, 9]);
    assert_eq!(&out[0][6..12], &[2, 1, 1, 1, 1, 1]);
    assert_eq!(
        &out[0][12..14],
        &ETHERTYPE_IPV4.to_be_bytes(),
        "IPv6 inside an IPv4 tunnel"
    );
    let _ = ETHERTYPE_IPV6;
}

/// One burst to many destinations, in an order that moves between routes and back: every
/// packet leaves on its own route's port with its own next hop's MAC, as routed alone,
/// whatever the burst's route cache held from the packet before. The routes nest (a /26
/// inside a /25), one goes via a router, and with a static entry for one host of a link
/// route the link's hosts no longer share the port's MAC.
#[test]
fn each_packet_of_a_burst_gets_its_own_routes_next_hop() {
    let p = default_provider();
    let (link, router, nested, host) = (
        [2, 1, 1, 1, 1, 1],
        [2, 2, 2, 2, 2, 2],
        [2, 3, 3, 3, 3, 3],
        [2, 5, 5, 5, 5, 5],
    );
    for host_entry in [false, true] {
        let mut c = tunnel4(Direction::Out, false, |_| {});
        c.ensure_ports(3);
        c.policies.insert(0, {
            let mut b = policy(
                Direction::Out,
                "198.51.100.0/24",
                "203.0.113.0/24",
                Action::Bypass,
            );
            b.priority = 10;
            b
        });
        c.routes.clear();
        let route = |dst: &str, port, via: Option<&str>| RouteConfig {
            dst: pfx(dst),
            port,
            via: via.map(|v| v.parse().unwrap()),
            loc: Location::default(),
        };
        c.routes.push(route("203.0.113.0/25", 1, None));
        c.routes
            .push(route("203.0.113.128/25", 0, Some("198.51.100.254")));
        c.routes.push(route("203.0.113.192/26", 2, None));
        let neighbour = |port, ip: Option<&str>, mac| NeighbourConfig {
            port,
            ip: ip.map(|a| a.parse().unwrap()),
            mac,
            loc: Location::default(),
        };
        c.neighbours.push(neighbour(1, None, link));
        c.neighbours.push(neighbour(0, None, router));
        c.neighbours.push(neighbour(2, None, nested));
        if host_entry {
            c.neighbours.push(neighbour(1, Some("203.0.113.5"), host));
        }
        let t = tables(&c, p.as_ref());
        // (last byte of the destination, the port and MAC it must leave with)
        let host_mac = if host_entry { host } else { link };
        let want: [(u8, u16, [u8; 6]); 12] = [
            (10, 1, link),
            (20, 1, link),
            (130, 0, router),
            (200, 2, nested),
            (140, 0, router),
            (250, 2, nested),
            (10, 1, link),
            (5, 1, host_mac),
            (6, 1, link),
            (5, 1, host_mac),
            (191, 0, router),
            (192, 2, nested),
        ];
        let frames: Vec<Vec<u8>> = want
            .iter()
            .map(|&(last, _, _)| {
                let mut f = frame(true, 0, &[1; 16], 10, 0);
                f[33] = last;
                fix_ipv4_checksum(&mut f);
                f
            })
            .collect();
        let (pkts, pipe) = run(&t, Direction::Out, &frames);
        assert_eq!(pipe.counters.bypassed, want.len() as u64);
        for (pkt, &(last, port, mac)) in pkts.iter().zip(&want) {
            assert_eq!(pkt.verdict, Verdict::Forward(port), "203.0.113.{last}");
            assert_eq!(
                &pkt.data()[0..6],
                &mac,
                "203.0.113.{last}, host entry {host_entry}"
            );
            assert_eq!(pkt.data()[33], last);
        }
    }
}

#[test]
fn sequence_numbers_stay_consecutive_across_bursts_of_mixed_traffic() {
    // Each burst reserves numbers for all its packets and returns those it did not use,
    // so on one worker the numbers on the wire have no gaps.
    let p = default_provider();
    let t = tables(&tunnel4(Direction::Out, false, |_| {}), p.as_ref());
    let protected = frame(true, 0, &[1; 20], 10, 0);
    let mut arp = protected.clone();
    arp[12..14].copy_from_slice(&0x0806u16.to_be_bytes());
    let mut seqs = Vec::new();
    for burst in [
        vec![
            protected.clone(),
            arp.clone(),
            arp.clone(),
            protected.clone(),
        ],
        vec![arp.clone(), protected.clone()],
    ] {
        let out = forwarded(&run(&t, Direction::Out, &burst).0);
        seqs.extend(
            out.iter()
                .map(|f| u32::from_be_bytes(f[ESP_AT + 4..ESP_AT + 8].try_into().unwrap())),
        );
    }
    assert_eq!(seqs, vec![1, 2, 3]);
    assert_eq!(t.sas[0].state.last_seq(), 3);
}

/// A trap policy (an IPsec policy whose SA the IKE daemon has not negotiated yet) drops
/// its traffic as `acquire` and reports its reqid once with the first packet's selectors,
/// however many packets hit it.
#[test]
fn a_trap_policy_drops_and_asks_for_its_sa_once() {
    let p = default_provider();
    let mut c = tunnel4(Direction::Out, false, |_| {});
    c.policies
        .iter_mut()
        .for_each(|p| p.action = Action::Acquire { reqid: 7 });
    let t = tables(&c, p.as_ref());
    let frames: Vec<Vec<u8>> = (0..5)
        .map(|i| frame(true, 0, &[i; 10], 10 + i, 0))
        .collect();
    let (pkts, mut pipe) = run(&t, Direction::Out, &frames);
    assert!(pkts
        .iter()
        .all(|p| p.verdict == Verdict::Drop(DropReason::Acquire)));
    assert_eq!(pipe.counters.dropped(DropReason::Acquire), 5);
    let acq = pipe.take_acquires();
    assert_eq!(acq.len(), 1, "{acq:?}");
    assert_eq!(acq[0].0, 7);
    assert!(acq[0].1.v4 && acq[0].1.proto == 17 && acq[0].1.dport == 53);
    assert_eq!(
        acq[0].1.dst >> 8,
        u128::from(u32::from_be_bytes([203, 0, 113, 0])) >> 8
    );
    assert!(pipe.take_acquires().is_empty());
    // Inbound plaintext under a trap policy is plaintext that must be protected.
    let mut c = tunnel4(Direction::In, false, |_| {});
    c.policies
        .iter_mut()
        .for_each(|p| p.action = Action::Acquire { reqid: 7 });
    let t = tables(&c, p.as_ref());
    let (pkts, _) = run(&t, Direction::In, &frames[..1]);
    assert_eq!(
        pkts[0].verdict,
        Verdict::Drop(DropReason::PlaintextProtected)
    );
}

/// Negotiated SAs of one reqid stand in for each other at the inbound policy check: after
/// a rekey the new SA carries traffic before charon points the policy at it. Static SAs
/// (no reqid) and SAs of another reqid do not.
#[test]
fn an_inbound_policy_accepts_any_sa_of_its_reqid() {
    let p = default_provider();
    let tx_cfg = tunnel4(Direction::Out, false, |_| {});
    let tx = tables(&tx_cfg, p.as_ref());
    let esp = one_esp(
        &Pair {
            tx: tx.clone(),
            rx: tx.clone(),
        },
        3,
    );
    // The receiver: the SA that decrypts (SPI) and a second SA of the same direction that
    // the policy names, both under `reqids`.
    let rx_with = |reqids: (Option<u32>, Option<u32>)| {
        let mut c = tunnel4(Direction::In, false, |s| s.reqid = reqids.0);
        let mut named = c.sas[0].clone();
        named.spi = 0x7777;
        named.reqid = reqids.1;
        c.sas.push(named);
        c.policies
            .iter_mut()
            .for_each(|p| p.action = Action::Protect(0x7777));
        tables(&c, p.as_ref())
    };
    let (pkts, _) = run(&rx_with((Some(4), Some(4))), Direction::In, &esp);
    assert!(pkts
        .iter()
        .all(|p| matches!(p.verdict, Verdict::Forward(_))));
    for reqids in [(Some(4), Some(5)), (None, None), (Some(4), None)] {
        let (pkts, _) = run(&rx_with(reqids), Direction::In, &esp);
        assert!(
            pkts.iter()
                .all(|p| p.verdict == Verdict::Drop(DropReason::PolicyMismatch)),
            "{reqids:?}"
        );
    }
}

const SPI_2: u32 = SPI + 1;

/// `tunnel4` with a second SA of another key between the same gateways, and both
/// policies sealing with (outbound) or accepting (inbound) the per-worker set of the two;
/// `set: false` leaves the inbound policies naming the first SA alone.
fn per_worker_tunnel(dir: Direction, set: bool) -> Arc<Tables> {
    let mut c = tunnel4(dir, false, |_| {});
    let mut second = c.sas[0].clone();
    second.spi = SPI_2;
    second.enc_key = zeroize::Zeroizing::new(vec![9u8; 20]);
    c.sas.push(second);
    if set {
        for p in &mut c.policies {
            p.per_worker_sas = vec![SPI, SPI_2];
        }
    }
    tables(&c, default_provider().as_ref())
}

fn seal_as_worker(t: &Arc<Tables>, worker: usize, frames: &[Vec<u8>]) -> Vec<Vec<u8>> {
    forwarded(&run_as_worker(t, Direction::Out, frames, worker).0)
}

fn spi_and_seq(esp: &[u8]) -> (u32, u32) {
    let word = |at: usize| u32::from_be_bytes(esp[at..at + 4].try_into().unwrap());
    (word(ESP_AT), word(ESP_AT + 4))
}

#[test]
fn each_worker_seals_a_per_worker_set_with_its_own_sa_and_any_of_them_opens() {
    let tx = per_worker_tunnel(Direction::Out, true);
    let frames: Vec<Vec<u8>> = (0..3u8)
        .map(|i| frame(true, 0, &[i; 40], 10 + i, 0))
        .collect();
    // Worker w takes the set's (w mod 2)-th SA, each with its own sequence numbers.
    let by_worker: Vec<Vec<Vec<u8>>> = (0..3).map(|w| seal_as_worker(&tx, w, &frames)).collect();
    for (w, esp) in by_worker.iter().enumerate() {
        let want_spi = [SPI, SPI_2][w % 2];
        let first_seq = if w == 2 { 4 } else { 1 };
        let got: Vec<(u32, u32)> = esp.iter().map(|e| spi_and_seq(e)).collect();
        let want: Vec<(u32, u32)> = (0..3).map(|i| (want_spi, first_seq + i)).collect();
        assert_eq!(got, want, "worker {w}");
    }
    // The two SAs' packets differ under their own keys.
    assert_ne!(by_worker[0][0][ESP_AT + 8..], by_worker[1][0][ESP_AT + 8..]);
    let all: Vec<Vec<u8>> = by_worker.concat();
    // Inbound with the set: every packet opens and comes out as it went in.
    let rx = per_worker_tunnel(Direction::In, true);
    let (pkts, pipe) = run(&rx, Direction::In, &all);
    assert_eq!(pipe.counters.total_drops(), 0, "{:?}", pipe.counters.drops);
    let inner: Vec<Vec<u8>> = forwarded(&pkts).iter().map(|p| p[14..].to_vec()).collect();
    let sent: Vec<Vec<u8>> = frames.iter().map(|f| f[14..].to_vec()).collect();
    assert_eq!(inner, [sent.clone(), sent.clone(), sent].concat());
    // An inbound policy naming the first SA alone refuses the second SA's packets, after
    // opening them: the SA is known, the policy does not name it.
    let rx = per_worker_tunnel(Direction::In, false);
    let (pkts, pipe) = run(&rx, Direction::In, &all);
    assert_eq!(forwarded(&pkts).len(), 6);
    assert_eq!(pipe.counters.dropped(DropReason::PolicyMismatch), 3);
    assert!(pkts[3..6]
        .iter()
        .all(|p| p.verdict == Verdict::Drop(DropReason::PolicyMismatch)));
}
