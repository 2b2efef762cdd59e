//! A device under test whose faults are known exactly: a relay between two interfaces
//! that passes every frame from A to B and back, except that, of the test frames going
//! from A to B, it drops those with sequence numbers N-1, 2N-1, ..., holds back those
//! with M-2, 2M-2, ... behind the next frame, and sends K-1, 2K-1, ... twice. The
//! tester's counts must then match the arithmetic, which is what the CI test checks.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use espgw_core::packet::{Packet, PacketPool};
use espgw_io::af_packet::AfPacketPort;
use espgw_io::Port;

use super::frame::{parse, Seen};

#[derive(clap::Args, Clone, Debug)]
pub struct StandinArgs {
    #[arg(long)]
    pub a: String,
    #[arg(long)]
    pub b: String,
    #[command(flatten)]
    pub faults: super::dut::StandinOptions,
    /// Stops by itself after this long.
    #[arg(long, default_value_t = 3600)]
    pub max_seconds: u64,
}

/// What to do with one A-to-B frame with sequence number `seq`.
#[derive(Debug, PartialEq, Eq)]
pub enum Fault {
    Pass,
    Drop,
    Hold,
    Duplicate,
}

pub fn fault(a: &super::dut::StandinOptions, seq: u64) -> Fault {
    let hit = |n: u64, k: u64| n > 0 && seq % n == (n + n - k) % n;
    if hit(a.drop_every, 1) {
        Fault::Drop
    } else if a.reorder_every >= 2 && hit(a.reorder_every, 2) {
        Fault::Hold
    } else if hit(a.duplicate_every, 1) {
        Fault::Duplicate
    } else {
        Fault::Pass
    }
}

pub fn run(a: StandinArgs) -> Result<(), String> {
    let stop = Arc::new(AtomicBool::new(false));
    for sig in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register(sig, stop.clone()).map_err(|e| e.to_string())?;
    }
    let mut pa = AfPacketPort::open(&a.a, 4096, None).map_err(|e| e.to_string())?;
    let mut pb = AfPacketPort::open(&a.b, 4096, None).map_err(|e| e.to_string())?;
    // The relay is not pinned: through the qdisc each flow keeps one transmit queue
    // (its hash's) when the relay moves between CPUs, so the tester's per-queue
    // threads never see a flow reordered that the relay sent in order (seen in CI,
    // with the bypass: 219 reordered where the relay held back 199).
    for p in [&mut pa, &mut pb] {
        p.transmit_through_qdisc().map_err(|e| e.to_string())?;
    }
    println!("ready");
    let mut pool = PacketPool::new(512);
    let mut rx: Vec<Packet> = Vec::with_capacity(64);
    let mut out: Vec<Packet> = Vec::with_capacity(130);
    let mut held: Option<(Packet, Instant)> = None;
    let end = Instant::now() + Duration::from_secs(a.max_seconds);
    let (mut dropped, mut reordered, mut duplicated) = (0u64, 0u64, 0u64);
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        let mut idle = true;
        if pa.rx_burst(&mut pool, &mut rx, 64).unwrap_or(0) > 0 {
            idle = false;
            for p in rx.drain(..) {
                let Seen::Record(r) = parse(p.data()) else {
                    out.push(p);
                    continue;
                };
                match fault(&a.faults, u64::from(r.seq)) {
                    Fault::Drop => {
                        dropped += 1;
                        pool.put(p);
                        continue;
                    }
                    Fault::Hold => {
                        if let Some((h, _)) = held.take() {
                            out.push(h);
                        }
                        held = Some((p, Instant::now()));
                        continue;
                    }
                    Fault::Duplicate => {
                        let mut d = pool.get();
                        if d.load(p.data()).is_ok() {
                            out.push(d);
                            duplicated += 1;
                        }
                        out.push(p);
                    }
                    Fault::Pass => out.push(p),
                }
                // A later frame went out: the held one follows it.
                if let Some((h, _)) = held.take() {
                    reordered += 1;
                    out.push(h);
                }
            }
        }
        if held
            .as_ref()
            .is_some_and(|(_, t)| t.elapsed() > Duration::from_millis(20))
        {
            // Nothing followed in time (the end of a trial): release it in order.
            out.push(held.take().expect("checked").0);
        }
        if !out.is_empty() {
            let _ = pb.tx_burst(&mut out, &mut pool);
            out.clear();
        }
        if pb.rx_burst(&mut pool, &mut rx, 64).unwrap_or(0) > 0 {
            idle = false;
            let _ = pa.tx_burst(&mut rx, &mut pool);
            rx.clear();
        }
        if idle {
            let fds: Vec<_> = [pa.poll_fd(), pb.poll_fd()].into_iter().flatten().collect();
            espgw_io::poll::wait_readable(&fds, 5);
        }
    }
    eprintln!("stand-in: dropped={dropped} reordered={reordered} duplicated={duplicated}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn faults_follow_the_sequence_arithmetic() {
        let a = crate::rfc2544::dut::StandinOptions {
            drop_every: 100,
            reorder_every: 50,
            duplicate_every: 70,
        };
        assert_eq!(fault(&a, 99), Fault::Drop);
        assert_eq!(fault(&a, 199), Fault::Drop);
        assert_eq!(fault(&a, 48), Fault::Hold);
        assert_eq!(fault(&a, 98), Fault::Hold);
        assert_eq!(fault(&a, 69), Fault::Duplicate);
        assert_eq!(fault(&a, 0), Fault::Pass);
        assert_eq!(fault(&a, 100), Fault::Pass);
        let n = (0..1000).filter(|&s| fault(&a, s) == Fault::Drop).count();
        assert_eq!(n, 10);
    }
}
