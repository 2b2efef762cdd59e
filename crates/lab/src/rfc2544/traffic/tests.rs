use super::*;

fn rec(seq: u32, tx_ns: u64) -> Record {
    Record {
        trial: 1,
        stream: 0,
        seq,
        tx_ns,
    }
}

/// One receiver's counting of `seqs` into a fresh counter of `flows` flows.
fn count_alone(expect: u64, flows: u8, seqs: &[u32]) -> RxReport {
    let c = StreamCounter::new(0, expect, flows);
    let mut r = RxReport::new();
    for &s in seqs {
        c.record(&rec(s, 1_000), 2_000, &mut r);
    }
    r
}

#[test]
fn counter_finds_duplicates_reordering_and_foreign_sequence_numbers() {
    let c = StreamCounter::new(0, 100, 1);
    let mut r = RxReport::new();
    for s in [0, 1, 3, 2, 4, 4, 99, 5, 100, 1000] {
        c.record(&rec(s, 1_000), 51_000, &mut r);
    }
    assert_eq!(r.received, 7, "0 1 3 2 4 99 5");
    assert_eq!(r.duplicates, 1, "4 twice");
    assert_eq!(r.reordered, 2, "2 after 3, 5 after 99");
    assert_eq!(r.stale, 2, "100 and 1000 were never sent");
    let p50 = r.latency.value_at_quantile(0.5);
    assert!((49_900..=50_100).contains(&p50), "{p50}");
}

/// With several flows, reordering is per flow (sequence number mod flows): flows passing
/// each other is not reordering, a flow's own packets swapped is.
#[test]
fn reordering_is_counted_per_flow() {
    // Flow 0: 0 2 4 6; flow 1: 1 3 5 7. Flow 1 runs ahead of flow 0: no reordering.
    let r = count_alone(100, 2, &[1, 3, 5, 0, 2, 7, 4, 6]);
    assert_eq!((r.received, r.reordered), (8, 0));
    // Flow 0 swaps 10 and 8: one reordered frame.
    let r = count_alone(100, 2, &[1, 3, 5, 0, 2, 7, 4, 6, 10, 8, 9]);
    assert_eq!((r.received, r.reordered), (11, 1));
    // The same deliveries as one flow: every frame below the highest seen counts.
    let r = count_alone(100, 1, &[1, 3, 5, 0, 2, 7, 4, 6, 10, 8, 9]);
    assert_eq!(r.reordered, 6, "0 2 4 6 8 9");
}

/// Several receiving threads share a stream's counter: `deliveries[t]` is what thread t
/// receives, in order. Returns the threads' reports added up.
fn count_on_threads(expect: u64, flows: u8, deliveries: Vec<Vec<u32>>) -> RxReport {
    let c = Arc::new(TrialCounters {
        trial: 1,
        streams: vec![StreamCounter::new(0, expect, flows)],
    });
    let start = Arc::new(std::sync::Barrier::new(deliveries.len()));
    let threads: Vec<_> = deliveries
        .into_iter()
        .map(|seqs| {
            let (c, start) = (c.clone(), start.clone());
            std::thread::spawn(move || {
                let mut counting = Counting::new(c);
                start.wait();
                for s in seqs {
                    counting.record(&rec(s, 1_000), 2_000);
                }
                counting.into_reports()
            })
        })
        .collect();
    let mut total = RxReport::new();
    for t in threads {
        for (stream, r) in t.join().expect("counting thread") {
            assert_eq!(stream, 0);
            total.absorb(&r);
        }
    }
    total
}

/// No frame is counted twice or lost between threads: four threads each receive every
/// frame once (racing on the same sequence numbers), and exactly one of the four copies
/// of each is received, the other three duplicates.
#[test]
fn threads_count_a_frame_once_whichever_receives_it() {
    const N: u32 = 200_000;
    let deliveries = (0..4u32)
        .map(|t| {
            // Nearly the same order on every thread (a few frames apart), so that they
            // race on the same bitmap words all along.
            (0..N).map(|i| (i * 7 + t) % N).collect()
        })
        .collect();
    let r = count_on_threads(u64::from(N), 1, deliveries);
    assert_eq!(r.received, u64::from(N));
    assert_eq!(r.duplicates, 3 * u64::from(N));
    assert_eq!(
        r.latency.len(),
        u64::from(N),
        "one latency sample per frame"
    );
    assert_eq!(r.stale, 0);
}

/// Threads each receiving their own flows in order (the tester's lanes behind a gateway
/// that keeps a flow on one queue): everything received once, nothing reordered; and one
/// flow's swapped pair on one thread is found, whatever the other threads do meanwhile.
#[test]
fn threads_on_their_own_flows_see_reordering_only_within_a_flow() {
    const N: u32 = 100_000;
    const FLOWS: u32 = 8;
    let per_thread = |swap: bool| -> Vec<Vec<u32>> {
        (0..4u32)
            .map(|t| {
                let mut seqs: Vec<u32> = (0..N).filter(|s| s % 4 == t).collect();
                if swap && t == 1 {
                    // Thread 1's flows are 1 and 5; swap two frames of flow 5.
                    let a = seqs.iter().position(|&s| s == 805).unwrap();
                    let b = seqs.iter().position(|&s| s == 813).unwrap();
                    seqs.swap(a, b);
                }
                seqs
            })
            .collect()
    };
    let r = count_on_threads(u64::from(N), FLOWS as u8, per_thread(false));
    assert_eq!(
        (r.received, r.duplicates, r.reordered),
        (u64::from(N), 0, 0)
    );
    let r = count_on_threads(u64::from(N), FLOWS as u8, per_thread(true));
    assert_eq!(
        (r.received, r.duplicates, r.reordered),
        (u64::from(N), 0, 1)
    );
}

/// Lane t of T sends sequence numbers t, t + T, ...: the lanes together send each of the
/// plan's numbers exactly once, each at its share of the rate.
#[test]
fn lanes_split_the_sequence_numbers_between_them() {
    let plan = |count| TxPlan {
        trial: 1,
        stream: 0,
        rate_pps: 1000.0,
        count,
        duration: Duration::from_secs(1),
        templates: Arc::new(Vec::new()),
        pattern: Arc::new(vec![0]),
        start_at: Instant::now(),
    };
    for (count, lanes) in [(10u64, 1u64), (10, 3), (2, 4), (1000, 16), (0, 2)] {
        let mut seen = Vec::new();
        for lane in 0..lanes {
            let s = Sending {
                plan: plan(count),
                lane,
                lanes,
                next: 0,
                report: TxReport::default(),
            };
            assert_eq!(s.rate_pps(), 1000.0 / lanes as f64);
            seen.extend((0..s.count()).map(|k| s.seq(k)));
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..count).collect::<Vec<_>>(), "{count} over {lanes}");
    }
}

/// A port's transmit reports add up: counts summed, the first and last transmit times
/// over the lanes that sent (a lane that sent nothing has no times).
#[test]
fn transmit_reports_of_lanes_add_up() {
    let mut total = TxReport::default();
    total.absorb(&TxReport::default());
    let lane = |sent, first_ns, last_ns| TxReport {
        sent,
        bytes: sent * 64,
        refused: 1,
        first_ns,
        last_ns,
    };
    total.absorb(&lane(10, 500, 900));
    total.absorb(&lane(0, 0, 0));
    total.absorb(&lane(5, 300, 800));
    assert_eq!(
        (
            total.sent,
            total.bytes,
            total.refused,
            total.first_ns,
            total.last_ns
        ),
        (15, 960, 3, 300, 900)
    );
}

/// /proc/net/dev as a 6.1 kernel writes it: the receive "drop" column of the named
/// interface, not of one whose name it begins with, and the transmit "drop" column apart.
#[test]
fn interface_drops_come_from_its_own_line() {
    let text = "Inter-|   Receive                                                |  Transmit\n \
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed\n    \
lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0\n  \
tg10: 9907076  215372    0 99999    0     0          0         0       84       2    0    8    0     0       0          0\n   \
tg1: 9907076  215372    0 65257    0     0          0         0       84       2    0    7    0     0       0          0\n";
    let drops = |name| super::parse_dropped(text, name);
    assert_eq!(drops("tg1"), super::InterfaceDrops { rx: 65257, tx: 7 });
    assert_eq!(drops("tg10"), super::InterfaceDrops { rx: 99999, tx: 8 });
    assert_eq!(drops("tg2"), super::InterfaceDrops::default());
}
