//! How busy the CPUs outside the benchmark's own were while it measured.
//!
//! On a shared machine a trial's figure depends on its neighbours as much as on the code: on
//! this project's 2-core VM a fuzzer on CPU 0 slowed `bench dataplane` under `taskset -c 1`
//! from 8-11 to 6.3 Mpps (AES-128-GCM, 64 B, 2026-11-27), while the raw crypto rate moved
//! far less, so every pipeline / raw ratio fell with it. Each row therefore records the
//! busiest other CPU's share of busy time, read from `/proc/stat`, and the run ends with a
//! warning when a neighbour was busy, so a figure taken beside other work is flagged
//! rather than silently mixed in.

use espgw_io::cpu_list::parse_cpu_list;

/// Above this share of busy time, a neighbouring CPU is reported as having disturbed the run.
pub(super) const BUSY_WARNING: f64 = 0.20;

/// Per-CPU (busy, total) jiffies at one moment.
#[derive(Clone, Debug, Default, PartialEq)]
pub(super) struct CpuTimes(Vec<(usize, u64, u64)>);

impl CpuTimes {
    /// The kernel's counters now; empty where `/proc/stat` cannot be read.
    pub(super) fn now() -> CpuTimes {
        std::fs::read_to_string("/proc/stat")
            .map(|text| CpuTimes::parse(&text))
            .unwrap_or_default()
    }

    /// Parses `/proc/stat`'s per-CPU lines: user, nice, system, idle, iowait, irq, softirq
    /// and steal. Idle and iowait are idle; steal (time the hypervisor gave elsewhere) is
    /// busy: it too is work beside the trial. The guest fields after steal are already
    /// inside user and nice, so they are not added again. Malformed lines are skipped.
    pub(super) fn parse(text: &str) -> CpuTimes {
        let mut cpus = Vec::new();
        for line in text.lines() {
            let mut fields = line.split_whitespace();
            let Some(cpu) = fields
                .next()
                .and_then(|name| name.strip_prefix("cpu"))
                .and_then(|n| n.parse::<usize>().ok())
            else {
                continue;
            };
            let values: Vec<u64> = fields.take(8).map_while(|f| f.parse().ok()).collect();
            if values.len() < 4 {
                continue;
            }
            let total: u64 = values.iter().sum();
            let idle = values[3] + values.get(4).copied().unwrap_or(0);
            cpus.push((cpu, total - idle, total));
        }
        CpuTimes(cpus)
    }
}

/// The CPUs this process may run on (`Cpus_allowed_list` in `/proc/self/status`), or None.
pub(super) fn own_cpus() -> Option<Vec<usize>> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    own_cpus_from_status(&status)
}

fn own_cpus_from_status(status: &str) -> Option<Vec<usize>> {
    let list = status
        .lines()
        .find_map(|l| l.strip_prefix("Cpus_allowed_list:"))?;
    parse_cpu_list(list.trim()).ok()
}

/// The busiest CPU outside `own` between two readings, as a share of its time, with its
/// number; None when there is no other CPU (or no readings).
pub(super) fn busiest_other(
    before: &CpuTimes,
    after: &CpuTimes,
    own: &[usize],
) -> Option<(usize, f64)> {
    let mut busiest: Option<(usize, f64)> = None;
    for &(cpu, busy, total) in &after.0 {
        if own.contains(&cpu) {
            continue;
        }
        let Some(&(_, busy0, total0)) = before.0.iter().find(|(c, _, _)| *c == cpu) else {
            continue;
        };
        let share = busy.saturating_sub(busy0) as f64 / total.saturating_sub(total0).max(1) as f64;
        if busiest.is_none_or(|(_, s)| share > s) {
            busiest = Some((cpu, share));
        }
    }
    busiest
}

/// The run's closing lines: the busiest neighbour over all rows, and a warning above
/// [`BUSY_WARNING`].
pub(super) fn summary(rows: &[Option<(usize, f64)>]) -> Vec<String> {
    let shares: Vec<(usize, f64)> = rows.iter().flatten().copied().collect();
    let Some(&(cpu, max)) = shares.iter().max_by(|a, b| a.1.total_cmp(&b.1)) else {
        return vec![
            "other CPUs during the trials: none outside this process's CPUs (pin it with taskset -c to see its neighbours)"
                .into(),
        ];
    };
    let mut lines = vec![format!(
        "busiest other CPU during the trials: CPU {cpu} at {:.0} % busy (rows over {:.0} %: {} of {})",
        max * 100.0,
        BUSY_WARNING * 100.0,
        shares.iter().filter(|(_, s)| *s > BUSY_WARNING).count(),
        rows.len()
    )];
    if max > BUSY_WARNING {
        lines.push(
            "warning: another CPU was busy while this ran; on a shared machine that slows the pipeline more than the raw crypto, so rates and ratios read low (rerun with the other CPUs idle)"
                .into(),
        );
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    const BEFORE: &str = "cpu  300 0 100 1000 0 0 0 0 0 0\n\
        cpu0 100 0 50 500 0 0 0 0 0 0\n\
        cpu1 200 0 50 500 0 0 0 0 0 0\n\
        intr 12345\n";

    #[test]
    fn per_cpu_lines_are_read_and_the_total_line_skipped() {
        let t = CpuTimes::parse(BEFORE);
        assert_eq!(t, CpuTimes(vec![(0, 150, 650), (1, 250, 750)]));
    }

    #[test]
    fn a_busy_neighbour_is_found_and_the_own_cpu_ignored() {
        let before = CpuTimes::parse(BEFORE);
        // CPU 0: 90 of 100 jiffies busy (60 user, 20 system, 10 steal); CPU 1 fully busy
        // but it is the benchmark's own.
        let after =
            CpuTimes::parse("cpu0 160 0 70 505 5 0 0 10 7 0\ncpu1 300 0 50 500 0 0 0 0 0 0\n");
        let (cpu, share) = busiest_other(&before, &after, &[1]).unwrap();
        assert_eq!(cpu, 0);
        assert!((share - 0.9).abs() < 1e-9, "{share}");
        assert_eq!(busiest_other(&before, &after, &[0, 1]), None);
    }

    #[test]
    fn malformed_lines_and_counters_that_go_back_do_not_panic() {
        let before = CpuTimes::parse("cpu0 x y\ncpuX 1 2 3 4\ncpu7 1 2\ncpu0 5 5 5 5\n");
        assert_eq!(before, CpuTimes(vec![(0, 15, 20)]));
        let after = CpuTimes::parse("cpu0 1 1 1 1\n");
        assert_eq!(busiest_other(&before, &after, &[]), Some((0, 0.0)));
    }

    #[test]
    fn the_affinity_list_is_read_from_proc_status() {
        let status = "Name:\tespgw-lab\nCpus_allowed:\t2\nCpus_allowed_list:\t1,3-4\n";
        assert_eq!(own_cpus_from_status(status), Some(vec![1, 3, 4]));
        assert_eq!(own_cpus_from_status("Name: x\n"), None);
    }

    #[test]
    fn the_summary_warns_only_above_the_line() {
        let quiet = summary(&[Some((0, 0.05)), Some((0, 0.10))]);
        assert_eq!(quiet.len(), 1, "{quiet:?}");
        assert!(quiet[0].contains("CPU 0 at 10 % busy"), "{quiet:?}");
        let busy = summary(&[Some((0, 0.05)), Some((0, 0.95))]);
        assert!(busy[0].contains("rows over 20 %: 1 of 2"), "{busy:?}");
        assert!(busy[1].starts_with("warning:"), "{busy:?}");
        assert!(summary(&[None, None])[0].contains("none outside"));
    }
}
