use super::*;

fn rec(seq: u32, tx_ns: u64) -> Record {
    Record {
        trial: 1,
        stream: 0,
        seq,
        tx_ns,
    }
}

#[test]
fn counter_finds_duplicates_reordering_and_foreign_sequence_numbers() {
    let mut c = StreamCounter::new(100, 1);
    for s in [0, 1, 3, 2, 4, 4, 99, 5, 100, 1000] {
        c.record(&rec(s, 1_000), 51_000);
    }
    let r = &c.report;
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
    let mut c = StreamCounter::new(100, 2);
    // Flow 0: 0 2 4 6; flow 1: 1 3 5 7. Flow 1 runs ahead of flow 0: no reordering.
    for s in [1, 3, 5, 0, 2, 7, 4, 6] {
        c.record(&rec(s, 1_000), 2_000);
    }
    assert_eq!((c.report.received, c.report.reordered), (8, 0));
    // Flow 0 swaps 10 and 8: one reordered frame.
    for s in [10, 8, 9] {
        c.record(&rec(s, 1_000), 2_000);
    }
    assert_eq!((c.report.received, c.report.reordered), (11, 1));
    // The same deliveries as one flow: every frame below the highest seen counts.
    let mut one = StreamCounter::new(100, 1);
    for s in [1, 3, 5, 0, 2, 7, 4, 6, 10, 8, 9] {
        one.record(&rec(s, 1_000), 2_000);
    }
    assert_eq!(one.report.reordered, 6, "0 2 4 6 8 9");
}
