//! The RFC 2544 procedures over one trial function, so they can be tested against a
//! simulated device: throughput (§26.1, binary search for the highest rate without
//! loss), frame loss rate (§26.3, from the maximum rate down in 10% steps until two
//! steps lose nothing) and back-to-back (§26.4, the longest burst at the maximum rate
//! without loss).

/// What the procedures need to know of a trial.
pub trait Lossy {
    /// Frames lost as a share of frames sent (0..=1).
    fn loss_ratio(&self) -> f64;
    /// The rate the tester actually offered, frames per second.
    fn offered_pps(&self) -> f64;
}

/// The result of a search: every trial made, in order, and the best passing one.
#[derive(Debug)]
pub struct Search<T> {
    pub trials: Vec<(f64, T)>,
    pub best: Option<usize>,
}

impl<T> Search<T> {
    pub fn best(&self) -> Option<&(f64, T)> {
        self.best.map(|i| &self.trials[i])
    }
}

/// Binary search for throughput. The first trial runs unpaced (rate 0: as fast as the
/// tester sends), which gives the upper bound, and what the device delivered under that
/// overload is the first probe: a device far slower than the tester is found in a few
/// trials instead of many halvings. Then the interval between the highest passing and
/// the lowest failing rate is halved until it is narrower than `resolution` of its upper
/// end, or `max_trials` were made. A trial whose loss is at most `tolerance` passes.
pub fn throughput<T: Lossy, E>(
    mut trial: impl FnMut(f64) -> Result<T, E>,
    resolution: f64,
    max_trials: usize,
    tolerance: f64,
) -> Result<Search<T>, E> {
    let mut s = Search {
        trials: Vec::new(),
        best: None,
    };
    let first = trial(0.0)?;
    let top = first.offered_pps();
    let delivered = top * (1.0 - first.loss_ratio());
    let pass = first.loss_ratio() <= tolerance;
    s.trials.push((top, first));
    if pass {
        s.best = Some(0);
        return Ok(s);
    }
    let (mut lo, mut hi) = (0.0f64, top);
    let mut probe = if delivered > 0.0 && delivered < top {
        delivered
    } else {
        top / 2.0
    };
    while s.trials.len() < max_trials.max(2) && hi - lo > resolution * hi {
        let r = trial(probe)?;
        if r.loss_ratio() <= tolerance {
            lo = probe;
            s.best = Some(s.trials.len());
        } else {
            hi = probe;
        }
        s.trials.push((probe, r));
        probe = (lo + hi) / 2.0;
    }
    Ok(s)
}

/// Frame loss rate: trials at 100%, 90%, ... 10% of `max_rate`, stopping after two
/// successive trials without loss (RFC 2544 §26.3).
pub fn loss_sweep<T: Lossy, E>(
    mut trial: impl FnMut(f64) -> Result<T, E>,
    max_rate: f64,
) -> Result<Vec<(f64, T)>, E> {
    let mut out = Vec::new();
    let mut clean = 0;
    for step in (1..=10).rev() {
        let rate = max_rate * f64::from(step) / 10.0;
        let r = trial(rate)?;
        clean = if r.loss_ratio() == 0.0 { clean + 1 } else { 0 };
        out.push((rate, r));
        if clean >= 2 {
            break;
        }
    }
    Ok(out)
}

/// Back-to-back: binary search on the burst length (frames sent unpaced) between 1 and
/// `max_burst`, to `resolution` of the bound reached. Returns the trials and the longest
/// burst that lost nothing (0 when even one frame was lost).
pub fn back_to_back<T: Lossy, E>(
    mut trial: impl FnMut(u64) -> Result<T, E>,
    max_burst: u64,
    resolution: f64,
    max_trials: usize,
) -> Result<(Vec<(u64, T)>, u64), E> {
    let mut trials = Vec::new();
    let first = trial(max_burst)?;
    let pass = first.loss_ratio() == 0.0;
    trials.push((max_burst, first));
    if pass {
        return Ok((trials, max_burst));
    }
    // The resolution is relative to the current upper bound, so that a device that
    // holds only a small share of `max_burst` is still resolved.
    let (mut lo, mut hi) = (0u64, max_burst);
    while trials.len() < max_trials.max(2) && hi - lo > ((hi as f64 * resolution) as u64).max(1) {
        let mid = lo + (hi - lo) / 2;
        let r = trial(mid)?;
        if r.loss_ratio() == 0.0 {
            lo = mid;
        } else {
            hi = mid;
        }
        trials.push((mid, r));
    }
    Ok((trials, lo))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A simulated device: forwards up to `cap` frames per second, the tester sends at
    /// most `line`.
    #[derive(Debug, Clone, Copy)]
    struct Sim {
        offered: f64,
        loss: f64,
    }
    impl Lossy for Sim {
        fn loss_ratio(&self) -> f64 {
            self.loss
        }
        fn offered_pps(&self) -> f64 {
            self.offered
        }
    }
    fn device(cap: f64, line: f64) -> impl FnMut(f64) -> Result<Sim, ()> {
        move |rate| {
            let offered = if rate == 0.0 { line } else { rate.min(line) };
            let loss = if offered > cap {
                (offered - cap) / offered
            } else {
                0.0
            };
            Ok(Sim { offered, loss })
        }
    }

    #[test]
    fn throughput_converges_on_the_capacity() {
        let s = throughput(device(61_000.0, 200_000.0), 0.01, 20, 0.0).unwrap();
        let (rate, _) = s.best().unwrap();
        assert!(*rate <= 61_000.0 && *rate > 61_000.0 * 0.99, "{rate}");
        assert!(s.trials.len() <= 12, "{}", s.trials.len());
        // The second trial probes what the device delivered under overload.
        assert!((s.trials[1].0 - 61_000.0).abs() < 1.0);
    }

    #[test]
    fn a_device_thirty_times_slower_than_the_tester_is_found() {
        let s = throughput(device(12_000.0, 370_000.0), 0.04, 9, 0.0).unwrap();
        let (rate, _) = s.best().unwrap();
        assert!(*rate > 12_000.0 * 0.95 && *rate <= 12_000.0, "{rate}");
    }

    #[test]
    fn a_device_faster_than_the_tester_passes_at_once() {
        let s = throughput(device(1e9, 150_000.0), 0.01, 20, 0.0).unwrap();
        assert_eq!(s.trials.len(), 1);
        assert_eq!(s.best().unwrap().0, 150_000.0);
    }

    #[test]
    fn acceptable_loss_raises_the_result() {
        let strict = throughput(device(50_000.0, 100_000.0), 0.005, 30, 0.0).unwrap();
        let loose = throughput(device(50_000.0, 100_000.0), 0.005, 30, 0.1).unwrap();
        assert!(loose.best().unwrap().0 > strict.best().unwrap().0 * 1.05);
    }

    #[test]
    fn a_device_that_always_loses_has_no_throughput() {
        let s = throughput(
            |_| {
                Ok::<_, ()>(Sim {
                    offered: 1000.0,
                    loss: 0.01,
                })
            },
            0.01,
            8,
            0.0,
        )
        .unwrap();
        assert!(s.best().is_none());
        assert_eq!(s.trials.len(), 8);
    }

    #[test]
    fn loss_sweep_stops_after_two_clean_steps() {
        let v = loss_sweep(device(60_000.0, 1e9), 100_000.0).unwrap();
        let rates: Vec<f64> = v.iter().map(|x| x.0).collect();
        assert_eq!(
            rates,
            vec![100_000.0, 90_000.0, 80_000.0, 70_000.0, 60_000.0, 50_000.0]
        );
        assert!((v[0].1.loss - 0.4).abs() < 1e-9);
    }

    #[test]
    fn back_to_back_finds_the_buffer() {
        // A device with a 3000-frame buffer that drains nothing during a burst.
        let (trials, best) = back_to_back(
            |n| {
                Ok::<_, ()>(Sim {
                    offered: 1.0,
                    loss: if n > 3000 { 0.5 } else { 0.0 },
                })
            },
            200_000,
            0.01,
            40,
        )
        .unwrap();
        assert!((2970..=3000).contains(&best), "{best}");
        assert!(trials.len() < 20, "{}", trials.len());
    }
}
