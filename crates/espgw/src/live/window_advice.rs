//! Advice when inbound replay windows are shallower than what several workers reading one
//! SA can reorder: for the configuration at start-up and at each reload, and for each
//! inbound SA an IKE daemon installs (charon's default window is 32 packets).
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

/// Why and how deep: the gateway reads one SA with several workers by flow.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Depth {
    /// Two rings of `--ring-frames`, at most the deepest window there is.
    pub advised: u32,
    pub workers: usize,
    pub fanout: &'static str,
}

/// The depth to advise for `workers` workers spreading by flow (`spread_in_order` false:
/// hash or round robin; `fanout` its name) with rings of `ring_frames`; `None` where no
/// advice is due.
pub fn depth_due(
    workers: usize,
    spread_in_order: bool,
    ring_frames: usize,
    fanout: &'static str,
) -> Option<Depth> {
    if workers <= 1 || spread_in_order {
        return None;
    }
    let advised = u32::try_from(ring_frames.saturating_mul(2))
        .unwrap_or(u32::MAX)
        .min(espgw_config::MAX_REPLAY_WINDOW);
    Some(Depth {
        advised,
        workers,
        fanout,
    })
}

/// Whether an inbound SA's `window` is on but shallower than `depth` advises.
pub fn is_shallow(depth: &Depth, window: u32) -> bool {
    window != 0 && window < depth.advised
}

/// The configuration's inbound SAs whose window is shallow.
#[derive(Debug, PartialEq, Eq)]
pub struct ShallowWindows {
    pub count: usize,
    /// The first such SA's name (or SPI) and window, for the log line.
    pub example: String,
    pub window: u32,
}

/// The inbound SAs of `cfg` whose window is shallow, those of a per-worker set excepted
/// (each is sent by one peer worker, in order).
pub fn shallow_windows(cfg: &Config, depth: &Depth) -> Option<ShallowWindows> {
    let in_a_set = |spi: u32| cfg.policies.iter().any(|p| p.per_worker_sas.contains(&spi));
    let shallow: Vec<_> = cfg
        .sas
        .iter()
        .filter(|s| s.direction == Direction::In && is_shallow(depth, s.replay_window))
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
    })
}

const DETAIL: &str = "one SA read on several queues can arrive further apart than its window: \
                      those packets are dropped as replays; set replay_window to the advised \
                      depth (charon: replay_window in strongswan.conf), or use --fanout \
                      ordered or per_worker_sas";

/// Logs the advice for a configuration (at start-up and at each reload), if due.
pub fn warn_config(cfg: &Config, depth: Option<&Depth>) {
    let Some(d) = depth else { return };
    if let Some(a) = shallow_windows(cfg, d) {
        crate::warn!("replay_window_shallow", "inbound_sas" => a.count, "sa" => a.example,
            "replay_window" => a.window, "advised" => d.advised, "workers" => d.workers,
            "fanout" => d.fanout, "source" => "config", "detail" => DETAIL);
    }
}

/// Logs the advice for an inbound SA an IKE daemon installs, if due (charon's own default
/// window is 32 packets).
pub fn warn_negotiated(depth: Option<&Depth>, spi: u32, window: u32) {
    let Some(d) = depth.filter(|d| is_shallow(d, window)) else {
        return;
    };
    crate::warn!("replay_window_shallow", "inbound_sas" => 1, "sa" => format!("{spi:#010x}"),
        "replay_window" => window, "advised" => d.advised, "workers" => d.workers,
        "fanout" => d.fanout, "source" => "ike", "detail" => DETAIL);
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

    fn hash(workers: usize, ring_frames: usize) -> Option<Depth> {
        depth_due(workers, false, ring_frames, "hash")
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
        let d = hash(2, 4096).expect("due");
        assert_eq!((d.advised, d.workers, d.fanout), (8192, 2, "hash"));
        let a = shallow_windows(&cfg, &d).expect("advice");
        assert_eq!((a.count, a.window), (inbound, 1024));
        assert!(cfg
            .sas
            .iter()
            .any(|s| s.name.as_deref() == Some(a.example.as_str())));
        // Deeper rings want a deeper window, never beyond what a window can be.
        assert_eq!(hash(2, 1 << 20).unwrap().advised, 65536);
        // charon's default window, and the edges.
        assert!(is_shallow(&d, 32) && is_shallow(&d, 8191));
        assert!(!is_shallow(&d, 8192) && !is_shallow(&d, 0));
    }

    #[test]
    fn no_advice_where_it_is_not_due() {
        // One worker, the ordered spread: no depth to advise.
        assert_eq!(hash(1, 4096), None);
        assert_eq!(depth_due(4, true, 4096, "ordered"), None);
        // A window deep enough, anti-replay off.
        let d = hash(4, 4096).unwrap();
        assert_eq!(shallow_windows(&peer(8192), &d), None);
        assert_eq!(shallow_windows(&peer(0), &d), None);
        // SAs of a per-worker set: each is one peer worker's, in order.
        let mut cfg = peer(1024);
        let spis: Vec<u32> = cfg.sas.iter().map(|s| s.spi).collect();
        cfg.policies[0].per_worker_sas = spis;
        assert_eq!(shallow_windows(&cfg, &d), None);
    }
}
