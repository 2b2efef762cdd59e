//! Rounds of `bench dataplane --rounds R`: one core (raw references against the pipeline)
//! and several workers (N workers against one).
//!
//! Scaling is a ratio of two trials, N workers against one, run one after the other; on a
//! shared machine whose speed drifts between trials (this project's VMs drift 20-30 % and
//! more), one such pair says little. So each round runs every worker count once, in the
//! given order on odd rounds and the reverse on even rounds (drift then favours neither
//! side), each round's scaling is taken against that same round's one-worker trial, and
//! what is reported is the median of the rounds' ratios with their range. A one-core row's
//! ratio to the raw crypto is two trials too (the suite's transform alone, then the
//! pipeline): its rounds alternate which goes first, and each round's pipeline trial is set
//! against that round's reference.

/// The worker counts (or any other list of trials) in the order round `round` (from 1)
/// runs them.
pub fn round_order<T: Copy>(workers: &[T], round: usize) -> Vec<T> {
    if round % 2 == 1 {
        workers.to_vec()
    } else {
        workers.iter().rev().copied().collect()
    }
}

/// Whether round `round` (from 1) of a one-core row measures the raw references before its
/// pipeline trials (odd rounds) or after them (even rounds).
pub fn raw_first(round: usize) -> bool {
    round % 2 == 1
}

/// Each round's ratio of `pipeline` to `reference` (the same round's), for as many rounds
/// as both have.
pub fn paired_ratios(pipeline: &[f64], reference: &[f64]) -> Vec<f64> {
    pipeline.iter().zip(reference).map(|(p, r)| p / r).collect()
}

/// The median of the rounds' values and their range.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Summary {
    pub median: f64,
    pub low: f64,
    pub high: f64,
}

/// The median and range of `values` (`None` when there are none). An even count takes
/// the mean of the two middle values.
pub fn summary_of(values: &[f64]) -> Option<Summary> {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return None;
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len() % 2 == 1 {
        v[mid]
    } else {
        (v[mid - 1] + v[mid]) / 2.0
    };
    Some(Summary {
        median,
        low: v[0],
        high: v[v.len() - 1],
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rounds_alternate_the_order_of_the_worker_counts() {
        assert_eq!(round_order(&[1, 2, 4], 1), vec![1, 2, 4]);
        assert_eq!(round_order(&[1, 2, 4], 2), vec![4, 2, 1]);
        assert_eq!(round_order(&[1, 2, 4], 3), vec![1, 2, 4]);
        assert_eq!(round_order(&[2], 2), vec![2]);
    }

    #[test]
    fn one_core_rounds_alternate_the_raw_side_and_pair_each_round() {
        assert!(raw_first(1) && !raw_first(2) && raw_first(3));
        // Each round against its own reference, not the medians against each other: a
        // round where both sides ran slow (the first) gives the same ratio as a fast one.
        let pipeline = [3.0, 8.0, 9.0];
        let reference = [6.0, 16.0, 10.0];
        assert_eq!(paired_ratios(&pipeline, &reference), vec![0.5, 0.5, 0.9]);
        let s = summary_of(&paired_ratios(&pipeline, &reference)).unwrap();
        assert_eq!((s.median, s.low, s.high), (0.5, 0.5, 0.9));
        // The ratio of the medians pairs the second round's pipeline with the third's
        // reference: another answer.
        let of_medians =
            summary_of(&pipeline).unwrap().median / summary_of(&reference).unwrap().median;
        assert_eq!(of_medians, 0.8);
        // No reference measured (--no-raw): every ratio is NaN and there is no summary.
        assert_eq!(summary_of(&paired_ratios(&pipeline, &[f64::NAN; 3])), None);
    }

    #[test]
    fn the_spread_is_the_median_and_the_range() {
        assert_eq!(summary_of(&[]), None);
        assert_eq!(
            summary_of(&[1.8, 1.2, 1.6]),
            Some(Summary {
                median: 1.6,
                low: 1.2,
                high: 1.8
            })
        );
        let even = summary_of(&[1.0, 2.0, 4.0, 3.0]).unwrap();
        assert_eq!((even.median, even.low, even.high), (2.5, 1.0, 4.0));
        // A trial that carried nothing (NaN or infinite scaling) is left out, not sorted
        // anywhere.
        let with_nan = summary_of(&[f64::NAN, 1.5, f64::INFINITY]).unwrap();
        assert_eq!(
            (with_nan.median, with_nan.low, with_nan.high),
            (1.5, 1.5, 1.5)
        );
    }
}
