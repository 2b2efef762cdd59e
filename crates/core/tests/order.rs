//! One SA over several workers (`espgw_core::order`): bursts of one input processed on
//! several threads leave exactly as one worker would send them — outbound with the SA's
//! sequence numbers consecutive in arrival order, inbound with the replay window deciding
//! exactly as one worker's (duplicates, reordering and old packets included) and each
//! flow's packets in arrival order.

use std::sync::{Arc, Mutex};
use std::time::Instant;

use espgw_config::{Config, Format};
use espgw_core::order::BurstOrder;
use espgw_core::packet::{Packet, PacketPool};
use espgw_core::{DropReason, Node, Tables, Transmit};
use espgw_crypto::default_provider;
use proptest::prelude::*;

/// The built-in test-bed pair (gateway 1, gateway 2), gateway 1's inbound replay window
/// set to `window`.
fn gateways(window: u32) -> (Config, Config) {
    let parse = |text, name| espgw_config::parse(text, name, Some(Format::Native)).unwrap();
    let mut gw1 = parse(espgw_config::DEFAULT_CONFIG, "default");
    for sa in &mut gw1.sas {
        sa.replay_window = window;
    }
    (gw1, parse(espgw_config::DEFAULT_PEER_CONFIG, "peer"))
}

fn tables(c: &Config) -> Arc<Tables> {
    Arc::new(Tables::build(c, default_provider().as_ref(), None).unwrap())
}

/// A plaintext UDP frame from gateway 1's south side (`reverse`: gateway 2's) stamped `n`
/// (the first 8 bytes of its payload).
fn plain(n: u64, reverse: bool) -> Vec<u8> {
    let (src, dst) = if reverse {
        ([203, 0, 113, 20], [198, 51, 100, 10])
    } else {
        ([198, 51, 100, 10], [203, 0, 113, 20])
    };
    let mut f = vec![0u8; 14 + 20 + 8 + 24];
    f[..6].copy_from_slice(&[2, 0, 0, 0, 1, 1]);
    f[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
    f[12..14].copy_from_slice(&[0x08, 0x00]);
    let ip = &mut f[14..34];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&52u16.to_be_bytes());
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&src);
    ip[16..20].copy_from_slice(&dst);
    let c = espgw_wire::checksum::checksum(ip);
    ip[10..12].copy_from_slice(&c.to_be_bytes());
    f[34..36].copy_from_slice(&40000u16.to_be_bytes());
    f[36..38].copy_from_slice(&9u16.to_be_bytes());
    f[38..40].copy_from_slice(&32u16.to_be_bytes());
    f[42..50].copy_from_slice(&n.to_be_bytes());
    f
}

fn stamp(f: &[u8]) -> u64 {
    u64::from_be_bytes(f[42..50].try_into().unwrap())
}

fn esp_seq(f: &[u8]) -> u32 {
    u32::from_be_bytes(f[38..42].try_into().unwrap())
}

/// Runs `bursts` (arriving on `port`, in this order) through one node and returns what it
/// sent, in order, and its drops by reason.
fn one_worker(t: &Arc<Tables>, port: u16, bursts: &[Vec<Vec<u8>>]) -> (Vec<Vec<u8>>, Vec<u64>) {
    let mut node = Node::new(t.clone(), Arc::default(), Vec::new());
    let mut tx = Transmit::new(t.ports.len(), 256);
    let mut out = Vec::new();
    for b in bursts {
        let mut pkts = load(node.pool(), b);
        node.receive(port, &mut pkts, Instant::now(), &mut tx);
        drain(&mut tx, &mut node, &mut out);
    }
    (out, node.counters().drops.to_vec())
}

fn load(pool: &mut PacketPool, frames: &[Vec<u8>]) -> Vec<Packet> {
    frames
        .iter()
        .map(|f| {
            let mut p = pool.get();
            p.load(f).unwrap();
            p
        })
        .collect()
}

fn drain(tx: &mut Transmit, node: &mut Node, out: &mut Vec<Vec<u8>>) {
    for q in 0..tx.ports() {
        for p in tx.queue(q).drain(..) {
            out.push(p.data().to_vec());
            node.pool().put(p);
        }
    }
}

/// Runs `bursts` through `workers` threads, each with its own node over `t`: bursts taken
/// in arrival order by ticket, the pipeline's ordered section and the transmit in ticket
/// order. Returns what left, in transmit order, and the drops summed over the workers.
fn many_workers(
    t: &Arc<Tables>,
    port: u16,
    bursts: &[Vec<Vec<u8>>],
    workers: usize,
) -> (Vec<Vec<u8>>, Vec<u64>) {
    let order = Arc::new(BurstOrder::default());
    let out = Arc::new(Mutex::new(Vec::new()));
    let drops = Arc::new(Mutex::new(vec![0u64; DropReason::ALL.len()]));
    std::thread::scope(|s| {
        for w in 0..workers {
            let (order, out, drops) = (order.clone(), out.clone(), drops.clone());
            s.spawn(move || {
                let mut node = Node::new(t.clone(), Arc::default(), Vec::new());
                node.set_order(Some(order.pipeline.clone()));
                let mut tx = Transmit::new(t.ports.len(), 256);
                loop {
                    let ticket = order.ticket();
                    let Some(b) = bursts.get(ticket as usize) else {
                        break;
                    };
                    let mut pkts = load(node.pool(), b);
                    node.set_ticket(ticket);
                    // Uneven work: the workers overtake one another.
                    if (ticket as usize + w).is_multiple_of(3) {
                        std::thread::yield_now();
                    }
                    node.receive(port, &mut pkts, Instant::now(), &mut tx);
                    order.transmit.wait(ticket);
                    drain(&mut tx, &mut node, &mut out.lock().unwrap());
                    order.transmit.pass(ticket);
                }
                for (d, n) in drops.lock().unwrap().iter_mut().zip(&node.counters().drops) {
                    *d += n;
                }
            });
        }
    });
    let out = std::mem::take(&mut *out.lock().unwrap());
    let drops = drops.lock().unwrap().clone();
    (out, drops)
}

/// Gateway 2's ESP frames of stamps `1..=n`, its sequence numbers 1..=n in order.
fn peer_esp(n: u64) -> Vec<Vec<u8>> {
    let (_, gw2) = gateways(0);
    let t2 = tables(&gw2);
    let frames: Vec<Vec<u8>> = (1..=n).map(|i| plain(i, true)).collect();
    let bursts: Vec<Vec<Vec<u8>>> = frames.chunks(64).map(|c| c.to_vec()).collect();
    let (esp, drops) = one_worker(&t2, 0, &bursts);
    assert_eq!(drops.iter().sum::<u64>(), 0);
    assert_eq!(esp.len() as u64, n);
    esp
}

#[test]
fn one_sa_over_two_workers_sends_sequence_numbers_in_arrival_order() {
    let (gw1, gw2) = gateways(1024);
    let t1 = tables(&gw1);
    let frames: Vec<Vec<u8>> = (1..=4000).map(|i| plain(i, false)).collect();
    // Bursts of uneven sizes, as a port delivers them.
    let mut bursts = Vec::new();
    let mut rest = &frames[..];
    let mut k = 0;
    while !rest.is_empty() {
        let n = [64, 1, 17, 64, 40, 3][k % 6].min(rest.len());
        bursts.push(rest[..n].to_vec());
        rest = &rest[n..];
        k += 1;
    }
    bursts.insert(5, Vec::new());
    let (esp, drops) = many_workers(&t1, 0, &bursts, 2);
    assert_eq!(drops.iter().sum::<u64>(), 0, "{drops:?}");
    let seqs: Vec<u32> = esp.iter().map(|f| esp_seq(f)).collect();
    assert_eq!(seqs, (1..=4000).collect::<Vec<u32>>());
    assert_eq!(t1.sas[0].state.last_seq(), 4000);
    // What gateway 2 decrypts is every stamp in arrival order.
    let t2 = tables(&gw2);
    let back: Vec<Vec<Vec<u8>>> = esp.chunks(64).map(|c| c.to_vec()).collect();
    let (plain_back, drops) = one_worker(&t2, 1, &back);
    assert_eq!(drops.iter().sum::<u64>(), 0, "{drops:?}");
    let stamps: Vec<u64> = plain_back.iter().map(|f| stamp(f)).collect();
    assert_eq!(stamps, (1..=4000).collect::<Vec<u64>>());
}

#[test]
fn one_sa_over_four_workers_decrypts_in_arrival_order() {
    let esp = peer_esp(3000);
    let bursts: Vec<Vec<Vec<u8>>> = esp.chunks(32).map(|c| c.to_vec()).collect();
    let (gw1, _) = gateways(64);
    let t1 = tables(&gw1);
    let (out, drops) = many_workers(&t1, 1, &bursts, 4);
    assert_eq!(drops.iter().sum::<u64>(), 0, "{drops:?}");
    let stamps: Vec<u64> = out.iter().map(|f| stamp(f)).collect();
    assert_eq!(stamps, (1..=3000).collect::<Vec<u64>>());
}

/// Delivery of frames `0..n`: mostly in order, with local reordering, duplicates of
/// recent and old packets, and losses.
fn delivery(n: usize) -> impl Strategy<Value = Vec<usize>> {
    prop::collection::vec((0u8..10, 0usize..200), n).prop_map(move |ops| {
        let mut v = Vec::new();
        for (i, (op, back)) in ops.into_iter().enumerate() {
            match op {
                0 => {}                                         // lost
                1 => v.push(i.saturating_sub(back)),            // a duplicate, maybe old
                2 if !v.is_empty() => v.insert(v.len() - 1, i), // swapped with the last
                _ => v.push(i),
            }
        }
        v
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// The replay window over 2-4 workers decides exactly as one worker's, and what is
    /// accepted leaves in arrival order.
    #[test]
    fn replay_window_over_workers_decides_as_one_worker(
        order in delivery(600),
        sizes in prop::collection::vec(1usize..48, 64),
        window in prop::sample::select(vec![32u32, 64, 128]),
        workers in 2usize..5,
    ) {
        let esp = peer_esp(600);
        let frames: Vec<Vec<u8>> = order.iter().map(|&i| esp[i].clone()).collect();
        let mut bursts = Vec::new();
        let mut rest = &frames[..];
        let mut k = 0;
        while !rest.is_empty() {
            let n = sizes[k % sizes.len()].min(rest.len());
            bursts.push(rest[..n].to_vec());
            rest = &rest[n..];
            k += 1;
        }
        let (gw1, _) = gateways(window);
        let (want, want_drops) = one_worker(&tables(&gw1), 1, &bursts);
        let (got, got_drops) = many_workers(&tables(&gw1), 1, &bursts, workers);
        let stamps = |v: &[Vec<u8>]| v.iter().map(|f| stamp(f)).collect::<Vec<u64>>();
        prop_assert_eq!(stamps(&got), stamps(&want));
        prop_assert_eq!(got_drops, want_drops.clone());
        // The case is not trivial: the window refused something.
        let replays = want_drops[DropReason::Replay as usize];
        prop_assert_eq!(replays as usize + want.len(), frames.len());
    }
}

/// Gateway 1 with every SA's hard packet lifetime at `limit`.
fn gateways_with_hard_packets(limit: u64) -> (Config, Config) {
    let (mut gw1, gw2) = gateways(1024);
    for sa in &mut gw1.sas {
        sa.lifetime.hard_packets = Some(limit);
    }
    (gw1, gw2)
}

/// Runs `bursts` over `workers` workers `rounds` times, each on fresh tables, and checks
/// each round that exactly `limit` packets left and were counted, the rest dropped as
/// `lifetime_expired`: the check and the count are one step, so workers that reserve
/// one after another never both spend the lifetime's last packets.
fn hard_lifetime_holds_over_workers(port: u16, bursts: &[Vec<Vec<u8>>], limit: u64, sa: usize) {
    let total: usize = bursts.iter().map(Vec::len).sum();
    for workers in [2, 4] {
        for round in 0..8 {
            let (gw1, _) = gateways_with_hard_packets(limit);
            let t1 = tables(&gw1);
            let (out, drops) = many_workers(&t1, port, bursts, workers);
            let what = format!("{workers} workers, round {round}");
            assert_eq!(out.len() as u64, limit, "{what}: packets sent");
            assert_eq!(
                t1.sas[sa].state.counters.packets(),
                limit,
                "{what}: counted"
            );
            assert_eq!(
                drops[DropReason::LifetimeExpired as usize] as usize,
                total - limit as usize,
                "{what}: {drops:?}"
            );
            assert!(t1.sas[sa]
                .state
                .hard_expired
                .load(std::sync::atomic::Ordering::Relaxed));
        }
    }
}

#[test]
fn hard_packet_lifetime_is_exact_with_one_outbound_sa_over_workers() {
    let frames: Vec<Vec<u8>> = (1..=1200).map(|i| plain(i, false)).collect();
    let bursts: Vec<Vec<Vec<u8>>> = frames.chunks(32).map(|c| c.to_vec()).collect();
    hard_lifetime_holds_over_workers(0, &bursts, 1000, 0);
}

#[test]
fn hard_packet_lifetime_is_exact_with_one_inbound_sa_over_workers() {
    let esp = peer_esp(1200);
    let bursts: Vec<Vec<Vec<u8>>> = esp.chunks(32).map(|c| c.to_vec()).collect();
    let (gw1, _) = gateways(1024);
    let inbound = gw1
        .sas
        .iter()
        .position(|s| s.direction == espgw_config::Direction::In)
        .unwrap();
    hard_lifetime_holds_over_workers(1, &bursts, 1000, inbound);
}
