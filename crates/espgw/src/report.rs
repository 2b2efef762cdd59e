//! Counter reports, as tables for people and JSON for programs.

use std::fmt::Write;
use std::sync::atomic::Ordering;

use espgw_core::counters::{WorkerCounters, N_REASONS};
use espgw_core::{DropReason, Tables};
use serde_json::{json, Value};

pub fn text(t: &Tables, c: &WorkerCounters) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "frames in {:>10}   out {:>10}   encrypted {}   decrypted {}   bypassed {}",
        c.rx_packets, c.tx_packets, c.encrypted, c.decrypted, c.bypassed
    );
    let drops: Vec<_> = DropReason::ALL
        .iter()
        .filter(|r| c.dropped(**r) > 0)
        .collect();
    if drops.is_empty() {
        let _ = writeln!(s, "drops: none");
    } else {
        let _ = writeln!(s, "drops:");
        for r in drops {
            let _ = writeln!(
                s,
                "  {:<20} {:>10}   {}",
                r.name(),
                c.dropped(*r),
                r.describe()
            );
        }
    }
    let _ = writeln!(s, "security associations:");
    let _ = writeln!(
        s,
        "  {:<14} {:>3} {:>10} {:<12} {:>10} {:>12} {:>10}  drops",
        "name", "dir", "spi", "mode", "packets", "bytes", "last seq"
    );
    for sa in &t.sas {
        let st = &sa.state;
        let mut d = String::new();
        for r in DropReason::ALL {
            let n = st.counters.dropped(*r);
            if n > 0 {
                let _ = write!(d, "{}={} ", r.name(), n);
            }
        }
        let seq = match sa.direction {
            espgw_core::Direction::Out => st.last_seq(),
            espgw_core::Direction::In => st.replay.lock().map(|w| w.top()).unwrap_or(0),
        };
        let mut flags = String::new();
        if st.soft_expired.load(Ordering::Relaxed) {
            flags.push_str(" [soft lifetime reached]");
        }
        if st.hard_expired.load(Ordering::Relaxed) {
            flags.push_str(" [hard lifetime reached]");
        }
        if st.exhausted.load(Ordering::Relaxed) {
            flags.push_str(" [sequence numbers exhausted]");
        }
        let _ = writeln!(
            s,
            "  {:<14} {:>3} 0x{:08x} {:<12} {:>10} {:>12} {:>10}  {}{}",
            truncate(&sa.label, 14),
            sa.direction.to_string(),
            sa.spi,
            sa.mode.name(),
            st.counters.packets(),
            st.counters.bytes(),
            seq,
            if d.is_empty() { "-".into() } else { d },
            flags
        );
    }
    s
}

fn truncate(s: &str, n: usize) -> String {
    s.chars().take(n).collect()
}

pub fn json(t: &Tables, c: &WorkerCounters) -> Value {
    let drops: serde_json::Map<String, Value> = DropReason::ALL
        .iter()
        .map(|r| (r.name().to_string(), json!(c.dropped(*r))))
        .collect();
    let sas: Vec<Value> = t
        .sas
        .iter()
        .map(|sa| {
            let st = &sa.state;
            let d: serde_json::Map<String, Value> = DropReason::ALL
                .iter()
                .map(|r| (r.name().to_string(), json!(st.counters.dropped(*r))))
                .collect();
            json!({
                "name": sa.label,
                "spi": sa.spi,
                "direction": sa.direction.to_string(),
                "mode": sa.mode.name(),
                "algorithm": sa.config.algorithm_name(),
                "packets": st.counters.packets(),
                "bytes": st.counters.bytes(),
                "last_seq_out": st.last_seq(),
                "replay_top": st.replay.lock().map(|w| w.top()).unwrap_or(0),
                "soft_expired": st.soft_expired.load(Ordering::Relaxed),
                "hard_expired": st.hard_expired.load(Ordering::Relaxed),
                "seq_exhausted": st.exhausted.load(Ordering::Relaxed),
                "drops": d,
            })
        })
        .collect();
    debug_assert_eq!(drops.len(), N_REASONS);
    json!({
        "crypto": t.provider_name,
        "rx_packets": c.rx_packets,
        "rx_bytes": c.rx_bytes,
        "tx_packets": c.tx_packets,
        "tx_bytes": c.tx_bytes,
        "encrypted": c.encrypted,
        "decrypted": c.decrypted,
        "bypassed": c.bypassed,
        "drops": drops,
        "sas": sas,
    })
}
