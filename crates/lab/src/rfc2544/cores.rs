//! Which cores the tester's threads and each gateway's workers run on. On a machine with
//! enough CPUs every busy thread gets one of its own, so that a trial measures the DUT and
//! not the scheduler: the first CPU stays for everything else (the tester's control loop,
//! the gateways' service threads, the kernel's own work), then gateway 1's workers,
//! gateway 2's, and the tester's sending and receiving threads. The kernel's forwarding and
//! veth work runs on the CPU of the thread that sent the frame, so it follows this layout.
//! With fewer CPUs (this project's 2-core CI machine) nothing is pinned beyond what
//! `--tester-cpus` asks. Not the default: on the 16-core measurement host this layout was
//! slower than gateways left to the scheduler, the tester's own ceiling per thread too
//! (docs/performance.md, "Sixteen cores"); it is there to pin by hand where it helps.
//!
//! The default, [`PinCores::Tester`], is the layout that measured best there: the tester's
//! threads on the upper half of the CPUs, the gateways and the kernel's work left to the
//! scheduler, which puts them beside, not on, the tester's busy threads. With the same
//! build on the same day (2026-11-25), one espgw worker carried 296,764-321,048 frames/s
//! so (4 tester threads), against 110,263-156,115 with every thread pinned from CPU 1 up (3
//! tester threads, so that all fit; "Sixteen cores, in memory and live"); in it one
//! worker later forwarded 1.10-2.41x kernel forwarding
//! ("Sixteen cores, third visit"). A machine under 8 CPUs is left alone: there the tester
//! needs the CPUs it shares.

use espgw_io::cpu_list::format_cpu_list;

/// `bench rfc2544 --pin-cores`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PinCores {
    /// The tester's threads on the upper half of the CPUs, the gateways left to the
    /// scheduler, where the machine has at least 8 CPUs and each half enough (the default)
    Tester,
    /// Pin when the machine has a CPU for every busy thread, plus one (and the run has an
    /// espgw DUT)
    Auto,
    /// Pin nothing but what --tester-cpus names
    Off,
}

/// The fewest CPUs on which [`PinCores::Tester`] pins anything.
pub const TESTER_HALF_MIN_CPUS: usize = 8;

/// Where the threads go; empty lists: unpinned.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct CoreLayout {
    /// Gateway 1's workers, gateway 2's (espgw DUT only).
    pub gateways: Option<(Vec<usize>, Vec<usize>)>,
    /// The tester's threads, in the order `--tester-cpus` takes them.
    pub tester: Vec<usize>,
}

impl CoreLayout {
    /// `allowed`: the CPUs this process may use; `workers`: each gateway's; `threads`:
    /// the tester's per port; `tester_cpus`: what the user asked for (kept as given).
    pub fn plan(
        mode: PinCores,
        allowed: &[usize],
        workers: usize,
        threads: usize,
        tester_cpus: &[usize],
    ) -> CoreLayout {
        let given = CoreLayout {
            gateways: None,
            tester: tester_cpus.to_vec(),
        };
        if mode == PinCores::Tester {
            return if tester_cpus.is_empty() {
                Self::tester_on_upper_half(allowed, workers, threads)
            } else {
                given
            };
        }
        if mode == PinCores::Off || workers == 0 {
            return given;
        }
        // The first CPU is left for the rest, and so are the CPUs the user gave the tester.
        let free: Vec<usize> = allowed
            .iter()
            .skip(1)
            .copied()
            .filter(|c| !tester_cpus.contains(c))
            .collect();
        let tester_need = if tester_cpus.is_empty() {
            2 * threads
        } else {
            0
        };
        if free.len() < 2 * workers + tester_need {
            return given;
        }
        let (gw1, rest) = free.split_at(workers);
        let (gw2, rest) = rest.split_at(workers);
        CoreLayout {
            gateways: Some((gw1.to_vec(), gw2.to_vec())),
            tester: if tester_cpus.is_empty() {
                rest[..tester_need].to_vec()
            } else {
                tester_cpus.to_vec()
            },
        }
    }

    /// The tester's 2 x `threads` threads on the first CPUs of the upper half of `allowed`,
    /// nothing else pinned; unpinned where `allowed` has fewer than
    /// [`TESTER_HALF_MIN_CPUS`], or the upper half too few for the tester, or the lower
    /// half too few for both gateways' workers (as on the 16-core host, where 4 workers a
    /// gateway on CPUs 0-7 and the tester on 8-15 carried 2.08x one worker). Whatever the DUTs
    /// (the ceiling, kernel forwarding, strongSwan): the same placement in each, so that a
    /// comparison compares the DUTs.
    fn tester_on_upper_half(allowed: &[usize], workers: usize, threads: usize) -> CoreLayout {
        let n = allowed.len();
        let (lower, upper) = allowed.split_at(n / 2);
        let need = 2 * threads;
        if n < TESTER_HALF_MIN_CPUS || upper.len() < need || lower.len() < 2 * workers {
            return CoreLayout::default();
        }
        CoreLayout {
            gateways: None,
            tester: upper[..need].to_vec(),
        }
    }

    /// One line for the log and the report, e.g. "gateway 1 workers on 1-4, gateway 2 on
    /// 5-8, tester on 9-16".
    pub fn describe(&self) -> String {
        let tester = if self.tester.is_empty() {
            "tester unpinned".to_string()
        } else {
            format!("tester on {}", format_cpu_list(&self.tester))
        };
        match &self.gateways {
            Some((a, b)) => format!(
                "gateway 1 workers on {}, gateway 2 on {}, {tester}",
                format_cpu_list(a),
                format_cpu_list(b)
            ),
            None => format!("gateways unpinned, {tester}"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpus(n: usize) -> Vec<usize> {
        (0..n).collect()
    }

    #[test]
    fn enough_cores_give_every_busy_thread_its_own() {
        let l = CoreLayout::plan(PinCores::Auto, &cpus(16), 4, 3, &[]);
        assert_eq!(l.gateways, Some((vec![1, 2, 3, 4], vec![5, 6, 7, 8])));
        assert_eq!(l.tester, vec![9, 10, 11, 12, 13, 14]);
        assert_eq!(
            l.describe(),
            "gateway 1 workers on 1-4, gateway 2 on 5-8, tester on 9-14"
        );
        // Exactly enough: 1 + 2 x 4 + 2 x 3 = 15 of 15.
        assert!(CoreLayout::plan(PinCores::Auto, &cpus(15), 4, 3, &[])
            .gateways
            .is_some());
    }

    #[test]
    fn too_few_cores_pin_nothing_new() {
        // 16 CPUs cannot hold 1 + 2 x 4 + 2 x 4.
        let l = CoreLayout::plan(PinCores::Auto, &cpus(16), 4, 4, &[]);
        assert_eq!(l, CoreLayout::default());
        // This project's 2-core machine, with the tester pinned by hand.
        let l = CoreLayout::plan(PinCores::Auto, &cpus(2), 1, 1, &[0, 1]);
        assert_eq!((l.gateways, l.tester), (None, vec![0, 1]));
        assert_eq!(
            CoreLayout::plan(PinCores::Auto, &cpus(2), 1, 1, &[]).describe(),
            "gateways unpinned, tester unpinned"
        );
    }

    #[test]
    fn the_user_s_tester_cpus_are_kept_and_avoided() {
        let l = CoreLayout::plan(PinCores::Auto, &cpus(8), 2, 1, &[6, 7]);
        assert_eq!(l.gateways, Some((vec![1, 2], vec![3, 4])));
        assert_eq!(l.tester, vec![6, 7]);
        let l = CoreLayout::plan(PinCores::Auto, &cpus(8), 2, 1, &[1, 2]);
        assert_eq!(l.gateways, Some((vec![3, 4], vec![5, 6])));
    }

    #[test]
    fn off_pins_only_what_was_asked() {
        let l = CoreLayout::plan(PinCores::Off, &cpus(64), 2, 2, &[]);
        assert_eq!(l, CoreLayout::default());
        // No espgw DUT in the run (the ceiling, kernel forwarding): no layout either.
        let l = CoreLayout::plan(PinCores::Auto, &cpus(64), 0, 2, &[]);
        assert_eq!(l.describe(), "gateways unpinned, tester unpinned");
    }

    /// The default: the tester on the upper half, as `--tester-cpus 8-15` on the 16-core
    /// host, whatever the DUTs; the gateways unpinned.
    #[test]
    fn the_default_puts_the_tester_on_the_upper_half() {
        let l = CoreLayout::plan(PinCores::Tester, &cpus(16), 1, 1, &[]);
        assert_eq!((l.gateways.clone(), l.tester.clone()), (None, vec![8, 9]));
        assert_eq!(l.describe(), "gateways unpinned, tester on 8-9");
        let l = CoreLayout::plan(PinCores::Tester, &cpus(16), 4, 4, &[]);
        assert_eq!(l.tester, (8..16).collect::<Vec<_>>());
        // No espgw DUT: the same placement.
        assert_eq!(
            CoreLayout::plan(PinCores::Tester, &cpus(16), 0, 4, &[]).tester,
            l.tester
        );
        // The user's list wins.
        let l = CoreLayout::plan(PinCores::Tester, &cpus(16), 1, 1, &[3, 4]);
        assert_eq!((l.gateways, l.tester), (None, vec![3, 4]));
        // As under `taskset -c 0,2,...,14`: the upper half of what is allowed.
        let allowed: Vec<usize> = (0..16).step_by(2).collect();
        assert_eq!(
            CoreLayout::plan(PinCores::Tester, &allowed, 1, 1, &[]).tester,
            vec![8, 10]
        );
    }

    #[test]
    fn the_default_leaves_a_small_or_crowded_machine_alone() {
        // This project's 2-core machine, and anything under 8 CPUs.
        for n in [1, 2, 4, 7] {
            assert_eq!(
                CoreLayout::plan(PinCores::Tester, &cpus(n), 1, 1, &[]),
                CoreLayout::default(),
                "{n} CPUs"
            );
        }
        // 16 CPUs: 5 tester threads a port need 10, more than the upper half.
        assert_eq!(
            CoreLayout::plan(PinCores::Tester, &cpus(16), 1, 5, &[]),
            CoreLayout::default()
        );
        // 16 CPUs: 5 workers a gateway need 10 below.
        assert_eq!(
            CoreLayout::plan(PinCores::Tester, &cpus(16), 5, 1, &[]),
            CoreLayout::default()
        );
        assert_eq!(
            CoreLayout::plan(PinCores::Tester, &cpus(16), 4, 1, &[]).tester,
            vec![8, 9]
        );
    }

    #[test]
    fn a_sparse_affinity_mask_is_followed() {
        // As under `taskset -c 0,2,4,6,8,10,12`.
        let allowed = [0, 2, 4, 6, 8, 10, 12];
        let l = CoreLayout::plan(PinCores::Auto, &allowed, 1, 2, &[]);
        assert_eq!(l.gateways, Some((vec![2], vec![4])));
        assert_eq!(l.tester, vec![6, 8, 10, 12]);
    }
}
