//! Advice at start-up when inbound replay windows are shallower than what several workers
//! reading one SA can reorder.
//!
//! With `--fanout hash` or `round-robin` and several workers, one SA's packets can reach
//! this gateway on several receive queues (a peer with several workers sends on several;
//! a veth delivers each frame on the queue its sender used), and the peer's own workers
//! interleave its numbers as they transmit. A queue whose ring backs up behind the others
//! still holds numbers when the rest have moved the SA's window past them: those are
//! dropped as replays, counted `replay`, and look like stray loss near capacity. Measured
//! on the test bed with two workers by hash (docs/performance.md, 2026-11-29): 1,183-1,781
//! replay drops in three searches with the 1,024-packet window, none with 8,192.
//!
//! The advice's depth is what the rings of this gateway and of a peer like it can hold
//! back: two rings of `--ring-frames`. It is advice, not a change: the window is the
//! operator's setting. The ordered spread checks one window in arrival order, and an SA
//! of a per-worker set is sent by one peer worker, so neither needs it.

use espgw_config::{Config, Direction};

/// The inbound SAs whose window is on but shallower than `wanted`.
#[derive(Debug, PartialEq, Eq)]
pub struct ShallowWindows {
    pub count: usize,
    /// The first such SA's name (or SPI) and window, for the log line.
    pub example: String,
    pub window: u32,
    pub wanted: u32,
}

/// The advice for `cfg` read by `workers` workers that spread by flow (hash or round
/// robin; `spread_in_order` false), with rings of `ring_frames`; `None` when none is due.
pub fn shallow_windows(
    cfg: &Config,
    workers: usize,
    spread_in_order: bool,
    ring_frames: usize,
) -> Option<ShallowWindows> {
    if workers <= 1 || spread_in_order {
        return None;
    }
    let wanted = u32::try_from(ring_frames.saturating_mul(2))
        .unwrap_or(u32::MAX)
        .min(espgw_config::MAX_REPLAY_WINDOW);
    let in_a_set = |spi: u32| cfg.policies.iter().any(|p| p.per_worker_sas.contains(&spi));
    let shallow: Vec<_> = cfg
        .sas
        .iter()
        .filter(|s| s.direction == Direction::In)
        .filter(|s| s.replay_window != 0 && s.replay_window < wanted)
        .filter(|s| !in_a_set(s.spi))
        .collect();
    let first = shallow.first()?;
    Some(ShallowWindows {
        count: shallow.len(),
        example: first
            .name
            .clone()
            .unwrap_or_else(|| format!("{:#x}", first.spi)),
        window: first.replay_window,
        wanted,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use espgw_config::{parse_with, CryptoPolicy, Format, DEFAULT_PEER_CONFIG};

    fn peer(window: u32) -> Config {
        let text = DEFAULT_PEER_CONFIG
            .replace("replay_window = 1024", &format!("replay_window = {window}"));
        parse_with(
            &text,
            "gw2.toml",
            Some(Format::Native),
            CryptoPolicy::default(),
        )
        .unwrap()
    }

    #[test]
    fn several_workers_by_flow_with_a_shallow_window_get_advice() {
        let cfg = peer(1024);
        let inbound = cfg
            .sas
            .iter()
            .filter(|s| s.direction == Direction::In)
            .count();
        assert!(inbound > 0);
        let a = shallow_windows(&cfg, 2, false, 4096).expect("advice");
        assert_eq!((a.count, a.window, a.wanted), (inbound, 1024, 8192));
        assert!(cfg
            .sas
            .iter()
            .any(|s| s.name.as_deref() == Some(a.example.as_str())));
        // Deeper rings want a deeper window, never beyond what a window can be.
        assert_eq!(
            shallow_windows(&cfg, 2, false, 1 << 20).unwrap().wanted,
            65536
        );
    }

    #[test]
    fn no_advice_where_it_is_not_due() {
        // One worker, the ordered spread, a window deep enough, anti-replay off.
        assert_eq!(shallow_windows(&peer(1024), 1, false, 4096), None);
        assert_eq!(shallow_windows(&peer(1024), 4, true, 4096), None);
        assert_eq!(shallow_windows(&peer(8192), 4, false, 4096), None);
        assert_eq!(shallow_windows(&peer(0), 4, false, 4096), None);
        // SAs of a per-worker set: each is one peer worker's, in order.
        let mut cfg = peer(1024);
        let spis: Vec<u32> = cfg.sas.iter().map(|s| s.spi).collect();
        cfg.policies[0].per_worker_sas = spis;
        assert_eq!(shallow_windows(&cfg, 4, false, 4096), None);
    }
}
