//! The RFC 2544 tests for one frame size, in order: throughput, latency, frame loss rate,
//! back-to-back.

use super::*;

/// One frame size's run against one DUT: the tester's ports, what the tests found so far.
struct SizeRun<'a> {
    a: &'a Rfc2544Args,
    p: &'a Profile,
    size: Size,
    stop: &'a AtomicBool,
    bench: Bench,
    dut_name: String,
    max_rate: f64,
    summary: Summary,
    /// The throughput search's result and its first (top) offered rate.
    tput_rate: f64,
    top_rate: f64,
}

pub(super) fn run_tests(
    a: &Rfc2544Args,
    p: &Profile,
    d: &dut::Dut,
    size: Size,
    stop: &AtomicBool,
    results: &mut Results,
    progress: &mut report::Progress,
) -> Result<(), String> {
    let epoch = Instant::now();
    let resolve = Duration::from_secs(10);
    let lanes = traffic::Lanes {
        per_port: usize::from(a.threads),
        cpus: a.tester_cpus.0.clone(),
    };
    let (pa, pb) = TesterPort::start_pair(d.a.clone(), d.b.clone(), epoch, resolve, &lanes)?;
    let v6 = a.ipv6;
    let (src, dst) = if v6 {
        d.v6.ok_or("this DUT has no IPv6 path")?
    } else {
        d.v4
    };
    let ab = templates(size, a.proto, &pa.ready, (src, dst), v6, 0, a.flows)?;
    let ba = templates(size, a.proto, &pb.ready, (dst, src), v6, 1, a.flows)?;
    let mut bench = Bench {
        a: pa,
        b: pb,
        ab,
        ba,
        bidirectional: a.bidirectional,
        flows: a.flows,
        trial_no: 0,
        drain: p.drain,
        epoch,
        standin: d.standin.clone(),
        gateways: (d.kind == dut::DutKind::Espgw)
            .then(|| std::path::PathBuf::from(crate::testbed::STATE_DIR)),
    };
    let dut_name = d.name.clone();
    let io = bench.a.ready.kind;
    // Learning frames (RFC 2544 §23): the DUT and its neighbours resolve addresses.
    let learn = bench.trial(500.0, 100, Duration::from_secs(1))?;
    if learn.rx.received == 0 {
        return Err(format!(
            "{dut_name} forwarded none of 100 learning frames at {}",
            size.label()
        ));
    }
    let mut run = SizeRun {
        a,
        p,
        size,
        stop,
        bench,
        summary: Summary::new(&dut_name, size, io),
        dut_name,
        max_rate: a.max_rate.unwrap_or(0.0),
        tput_rate: 0.0,
        top_rate: 0.0,
    };
    // Latency at the throughput rate and the loss sweep need the search's results.
    if a.tests.contains(&TestKind::Throughput)
        || (a.tests.contains(&TestKind::Latency) && a.latency_rate.is_none())
        || a.tests.contains(&TestKind::Loss)
    {
        run.throughput(results, progress)?;
    }
    if a.tests.contains(&TestKind::Latency) {
        run.latency(results, progress)?;
    }
    if a.tests.contains(&TestKind::Loss) {
        run.loss(results, progress)?;
    }
    if a.tests.contains(&TestKind::BackToBack) {
        run.back_to_back(results, progress)?;
    }
    results.summaries.push(run.summary);
    report::mark_tester_bound(&mut results.summaries);
    Ok(())
}

impl SizeRun<'_> {
    /// Frames for a trial of `secs` at `rate` (the tester's top speed when 0), bounded.
    fn trial_frames(rate: f64, secs: f64) -> u64 {
        let r = if rate > 0.0 { rate } else { 5_000_000.0 };
        ((r * secs).ceil() as u64).clamp(1, traffic::MAX_TRIAL_FRAMES)
    }

    /// One trial of `test`, recorded and shown; refused once the run is interrupted.
    fn trial(
        &mut self,
        test: &str,
        (rate, count, duration): (f64, u64, Duration),
        burst: Option<u64>,
        results: &mut Results,
        progress: &mut report::Progress,
    ) -> Result<Outcome, String> {
        if self.stop.load(Ordering::Relaxed) {
            return Err("interrupted".to_string());
        }
        let o = self.bench.trial(rate, count, duration)?;
        results.records.push(TrialRecord::new(
            &self.dut_name,
            test,
            self.size,
            self.a,
            &o,
            burst,
        ));
        progress.trial(&o);
        Ok(o)
    }

    fn status(&self, progress: &mut report::Progress, test: &str) {
        progress.status(&format!("{} {}: {test}", self.dut_name, self.size.label()));
    }

    fn throughput(
        &mut self,
        results: &mut Results,
        progress: &mut report::Progress,
    ) -> Result<(), String> {
        self.status(progress, "throughput");
        let p = self.p;
        let secs = p.trial.as_secs_f64();
        let tol = self.a.loss_tolerance / 100.0;
        let max_rate = self.max_rate;
        let s = search::throughput(
            |rate| {
                let rate = if rate == 0.0 { max_rate } else { rate };
                let plan = (rate, Self::trial_frames(rate, secs), p.trial);
                self.trial("throughput", plan, None, results, progress)
            },
            p.resolution,
            p.max_search_trials,
            tol,
        )?;
        self.top_rate = s.trials.first().map(|t| t.1.offered_pps()).unwrap_or(0.0);
        self.summary.top_pps = self.top_rate;
        if let Some((_, o)) = s.best() {
            self.tput_rate = o.offered_pps();
            self.summary.throughput_pps = self.tput_rate;
            let bits = mean_frame_bits(&self.bench.ab.0, &self.bench.ab.1);
            self.summary.throughput_mbps = self.tput_rate * bits / 1e6;
        }
        self.summary.search_trials = s.trials.len();
        progress.done_test();
        Ok(())
    }

    fn latency(
        &mut self,
        results: &mut Results,
        progress: &mut report::Progress,
    ) -> Result<(), String> {
        self.status(progress, "latency");
        let lat_rate = self.a.latency_rate.unwrap_or(self.tput_rate);
        self.summary.latency_rate_pps = lat_rate;
        if lat_rate > 0.0 {
            let mut merged: Option<hdrhistogram::Histogram<u64>> = None;
            let mut per_trial = Vec::new();
            for _ in 0..self.p.latency_trials {
                let secs = self.p.trial.as_secs_f64();
                let plan = (lat_rate, Self::trial_frames(lat_rate, secs), self.p.trial);
                let o = self.trial("latency", plan, None, results, progress)?;
                per_trial.push(LatencySummary::of(&o.rx.latency));
                match &mut merged {
                    None => merged = Some(o.rx.latency.clone()),
                    Some(m) => {
                        let _ = m.add(&o.rx.latency);
                    }
                }
            }
            self.summary.latency = merged.as_ref().map(LatencySummary::of);
            self.summary.latency_trials = per_trial;
        }
        progress.done_test();
        Ok(())
    }

    fn loss(
        &mut self,
        results: &mut Results,
        progress: &mut report::Progress,
    ) -> Result<(), String> {
        self.status(progress, "frame loss");
        // 100% is the tester's own top rate at this size when it was measured in this
        // run (the same offered loads for every DUT), else this DUT's first trial's.
        let label = self.size.label();
        let reference = results
            .summaries
            .iter()
            .find(|s| s.dut == "ceiling" && s.frame_size == label && s.top_pps > 0.0)
            .map_or(self.top_rate, |s| s.top_pps);
        self.summary.loss_reference_pps = reference;
        let trial = self.p.trial;
        let sweep = search::loss_sweep(
            |rate| {
                let plan = (rate, Self::trial_frames(rate, trial.as_secs_f64()), trial);
                self.trial("loss", plan, None, results, progress)
            },
            reference,
        )?;
        self.summary.loss_curve = sweep
            .iter()
            .map(|(rate, o)| (100.0 * rate / reference.max(1.0), 100.0 * o.loss_ratio()))
            .collect();
        progress.done_test();
        Ok(())
    }

    fn back_to_back(
        &mut self,
        results: &mut Results,
        progress: &mut report::Progress,
    ) -> Result<(), String> {
        self.status(progress, "back-to-back");
        let max_rate = self.max_rate;
        let top = if self.top_rate > 0.0 {
            self.top_rate
        } else {
            let frames = Self::trial_frames(0.0, 0.2);
            let o = self
                .bench
                .trial(max_rate, frames, Duration::from_millis(200))?;
            o.offered_pps()
        };
        let max_burst = ((top * self.p.b2b_seconds) as u64).max(64);
        let (resolution, max_trials) = (self.p.resolution, self.p.max_search_trials + 8);
        let mut bests = Vec::new();
        for _ in 0..self.p.b2b_trials {
            let (_, best) = search::back_to_back(
                |n| {
                    let plan = (max_rate, n, Duration::from_secs(30));
                    self.trial("back-to-back", plan, Some(n), results, progress)
                },
                max_burst,
                resolution,
                max_trials,
            )?;
            bests.push(best);
        }
        self.summary.back_to_back = Some(bests.iter().sum::<u64>() / bests.len() as u64);
        self.summary.back_to_back_max_burst = max_burst;
        progress.done_test();
        Ok(())
    }
}
