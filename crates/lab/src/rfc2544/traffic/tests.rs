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
    let mut c = StreamCounter::new(100);
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
