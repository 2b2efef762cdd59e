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

use espgw_io::cpu_list::format_cpu_list;

/// `bench rfc2544 --pin-cores`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum PinCores {
    /// Pin when the machine has a CPU for every busy thread, plus one (and the run has an
    /// espgw DUT).
    Auto,
    /// Pin nothing but what --tester-cpus names (the default).
    Off,
}

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

    #[test]
    fn a_sparse_affinity_mask_is_followed() {
        // As under `taskset -c 0,2,4,6,8,10,12`.
        let allowed = [0, 2, 4, 6, 8, 10, 12];
        let l = CoreLayout::plan(PinCores::Auto, &allowed, 1, 2, &[]);
        assert_eq!(l.gateways, Some((vec![2], vec![4])));
        assert_eq!(l.tester, vec![6, 8, 10, 12]);
    }
}
