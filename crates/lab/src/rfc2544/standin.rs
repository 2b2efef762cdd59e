//! A device under test whose faults are known exactly: a relay between two interfaces
//! that passes every frame from A to B and back, except that, of the test frames going
//! from A to B, it drops those with sequence numbers N-1, 2N-1, ..., holds back those
//! with M-2, 2M-2, ... behind the next frame, and sends K-1, 2K-1, ... twice. The
//! tester's counts must then match the arithmetic, which is what the CI test checks.
//!
//! Frames the relay loses without meaning to (its receive ring full, a send refused, an
//! interface of its namespace dropping one) are its own count, which the tester asks for
//! at the start and the end of every trial ([`StandinLink::drops`]): a line `drops` on
//! the relay's standard input, answered by `drops N` on its standard output.

use std::io::{BufRead, Write};
use std::process::{Child, ChildStdin};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::mpsc::{channel, Receiver};
use std::sync::{Arc, Mutex};
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

/// Whether the relay stalls after the A-to-B frame with sequence number `seq`.
pub fn stalls_after(a: &super::dut::StandinOptions, seq: u64) -> bool {
    a.stall_every > 0 && seq % a.stall_every == a.stall_every - 1
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
    let frames = a.faults.standin_ring_frames;
    let mut pa = AfPacketPort::open(&a.a, frames, None).map_err(|e| e.to_string())?;
    let mut pb = AfPacketPort::open(&a.b, frames, None).map_err(|e| e.to_string())?;
    // The relay is not pinned: through the qdisc each flow keeps one transmit queue
    // (its hash's) when the relay moves between CPUs, so the tester's per-queue
    // threads never see a flow reordered that the relay sent in order (seen in CI,
    // with the bypass: 219 reordered where the relay held back 199).
    for p in [&mut pa, &mut pb] {
        p.transmit_through_qdisc().map_err(|e| e.to_string())?;
    }
    let counts = Arc::new(PortCounts::default());
    answer_drop_requests(counts.clone(), [a.a.clone(), a.b.clone()]);
    println!("ready");
    let mut pool = PacketPool::new(512);
    let mut rx: Vec<Packet> = Vec::with_capacity(64);
    let mut out: Vec<Packet> = Vec::with_capacity(130);
    let mut held: Option<(Packet, Instant)> = None;
    let end = Instant::now() + Duration::from_secs(a.max_seconds);
    let (mut dropped, mut reordered, mut duplicated, mut stalls) = (0u64, 0u64, 0u64, 0u64);
    while !stop.load(Ordering::Relaxed) && Instant::now() < end {
        counts.serve(&mut pa, &mut pb);
        let mut idle = true;
        let mut stall = false;
        if pa.rx_burst(&mut pool, &mut rx, 64).unwrap_or(0) > 0 {
            idle = false;
            for p in rx.drain(..) {
                let Seen::Record(r) = parse(p.data()) else {
                    out.push(p);
                    continue;
                };
                stall |= stalls_after(&a.faults, u64::from(r.seq));
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
        if stall {
            stalls += 1;
            std::thread::sleep(Duration::from_millis(a.faults.stall_ms));
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
    let (ring, refused) = PortCounts::of(&mut pa, &mut pb);
    eprintln!(
        "stand-in: dropped={dropped} reordered={reordered} duplicated={duplicated} \
         stalls={stalls} ring_full={ring} send_refused={refused}"
    );
    Ok(())
}

/// The relay's ports' own drop counts, handed from the relaying thread to the one that
/// answers the tester: a request is served by the relaying thread's next loop (within
/// its 5 ms poll when idle), so that an answer never predates its question.
#[derive(Default)]
struct PortCounts {
    requested: AtomicU64,
    served: AtomicU64,
    /// Frames the ports' receive rings had no room for, and those their transmit rings
    /// had no room for, as of the last request served.
    dropped: AtomicU64,
}

impl PortCounts {
    fn of(pa: &mut AfPacketPort, pb: &mut AfPacketPort) -> (u64, u64) {
        let (sa, sb) = (pa.stats(), pb.stats());
        (
            sa.rx_ring_full + sb.rx_ring_full,
            sa.tx_dropped + sb.tx_dropped,
        )
    }

    /// Publishes the ports' counts when a request is waiting.
    fn serve(&self, pa: &mut AfPacketPort, pb: &mut AfPacketPort) {
        let wanted = self.requested.load(Ordering::Acquire);
        if wanted == self.served.load(Ordering::Relaxed) {
            return;
        }
        let (ring, refused) = Self::of(pa, pb);
        self.dropped.store(ring + refused, Ordering::Relaxed);
        self.served.store(wanted, Ordering::Release);
    }

    /// The ports' counts as of now, or None when the relaying thread did not answer
    /// within a second.
    fn fetch(&self) -> Option<u64> {
        let want = self.requested.fetch_add(1, Ordering::AcqRel) + 1;
        let deadline = Instant::now() + Duration::from_secs(1);
        while self.served.load(Ordering::Acquire) < want {
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_micros(200));
        }
        Some(self.dropped.load(Ordering::Relaxed))
    }
}

/// Answers each `drops` line on standard input with `drops N`: the frames the relay lost
/// so far that its fault arithmetic did not mean to (its rings' and its interfaces'
/// drops, both directions), or `drops ?` when they cannot be read.
fn answer_drop_requests(counts: Arc<PortCounts>, interfaces: [String; 2]) {
    std::thread::spawn(move || {
        let stdin = std::io::stdin();
        for line in stdin.lock().lines() {
            let Ok(line) = line else { return };
            if line.trim() != "drops" {
                continue;
            }
            let reply = match counts.fetch() {
                Some(ports) => {
                    let ifaces: u64 = interfaces
                        .iter()
                        .map(|i| {
                            let d = super::traffic::interface_dropped(i);
                            d.rx + d.tx
                        })
                        .sum();
                    format!("drops {}", ports + ifaces)
                }
                None => "drops ?".into(),
            };
            let mut out = std::io::stdout().lock();
            if writeln!(out, "{reply}").and_then(|_| out.flush()).is_err() {
                return;
            }
        }
    });
}

/// The tester's line to a running relay: its `ready`, then its drop counts on request.
pub struct StandinLink {
    stdin: Mutex<ChildStdin>,
    lines: Mutex<Receiver<String>>,
}

impl StandinLink {
    /// Takes the relay's standard input and output and waits (10 s at most) for its
    /// `ready`.
    pub fn attach(child: &mut Child) -> Result<StandinLink, String> {
        let stdin = child.stdin.take().ok_or("stand-in has no stdin")?;
        let out = child.stdout.take().ok_or("stand-in has no stdout")?;
        let (tx, rx) = channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(out).lines() {
                let Ok(line) = line else { return };
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        match rx.recv_timeout(Duration::from_secs(10)) {
            Ok(l) if l.starts_with("ready") => Ok(StandinLink {
                stdin: Mutex::new(stdin),
                lines: Mutex::new(rx),
            }),
            Ok(l) => Err(format!("stand-in did not start: {}", l.trim())),
            Err(_) => Err("stand-in did not start within 10 s".into()),
        }
    }

    /// The frames the relay lost so far besides those its faults drop on purpose.
    pub fn drops(&self) -> Result<u64, String> {
        let lines = self.lines.lock().map_err(|_| "stand-in link poisoned")?;
        // An answer left from an earlier request that timed out is not this one's.
        while lines.try_recv().is_ok() {}
        {
            let mut stdin = self.stdin.lock().map_err(|_| "stand-in link poisoned")?;
            writeln!(stdin, "drops")
                .and_then(|_| stdin.flush())
                .map_err(|e| format!("stand-in: {e}"))?;
        }
        let line = lines
            .recv_timeout(Duration::from_secs(3))
            .map_err(|_| "stand-in did not report its drops within 3 s")?;
        parse_drops_reply(&line)
    }
}

fn parse_drops_reply(line: &str) -> Result<u64, String> {
    line.strip_prefix("drops ")
        .and_then(|n| n.trim().parse().ok())
        .ok_or_else(|| format!("stand-in: unexpected reply '{}'", line.trim()))
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
            stall_every: 300,
            ..Default::default()
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
        let stalls: Vec<u64> = (0..1000).filter(|&s| stalls_after(&a, s)).collect();
        assert_eq!(stalls, [299, 599, 899]);
        let never = crate::rfc2544::dut::StandinOptions::default();
        assert!(!(0..1000).any(|s| stalls_after(&never, s)));
    }

    #[test]
    fn drop_replies_are_read_strictly() {
        assert_eq!(parse_drops_reply("drops 1234\n"), Ok(1234));
        assert!(parse_drops_reply("drops ?").is_err());
        assert!(parse_drops_reply("ready").is_err());
        assert!(parse_drops_reply("drops -1").is_err());
    }
}
