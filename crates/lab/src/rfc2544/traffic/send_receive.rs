//! One port thread's two halves: sending what is due on the trial's clock, and receiving
//! (counting, timestamping, answering ARP / ND).

use super::*;

/// Sends the lane's frames due by now (at most a burst); true when its share is done.
pub(super) fn send_due(
    port: &mut dyn Port,
    pool: &mut PacketPool,
    out: &mut Vec<Packet>,
    s: &mut Sending,
    epoch: Instant,
) -> bool {
    let now = Instant::now();
    if now < s.plan.start_at {
        return false;
    }
    let (count, rate) = (s.count(), s.rate_pps());
    let due = if rate <= 0.0 {
        count
    } else {
        let el = now.duration_since(s.plan.start_at).as_secs_f64();
        ((el * rate) as u64 + 1).min(count)
    };
    // Unpaced sending stops at the trial's duration; paced sending at its frame count
    // (with a margin for a tester running late).
    let limit = if rate <= 0.0 {
        s.plan.duration
    } else {
        s.plan.duration + Duration::from_millis(100)
    };
    if now.duration_since(s.plan.start_at) >= limit {
        return true;
    }
    let n = due.saturating_sub(s.next).min(BURST as u64) as usize;
    if n == 0 {
        // Ahead of schedule: sleep until the next frame is due (at least a little:
        // nanosleep overshoots by some 60 µs, and the frames that fall due meanwhile
        // leave together as a small burst), never spin: the CPU belongs to the DUT.
        let next_at = s.next as f64 / rate;
        let wait = next_at - now.duration_since(s.plan.start_at).as_secs_f64();
        std::thread::sleep(Duration::from_secs_f64((wait - 60e-6).clamp(20e-6, 1e-3)));
        return false;
    }
    let tx_ns = epoch.elapsed().as_nanos() as u64;
    let mut bytes = 0u64;
    for i in 0..n as u64 {
        let seq = s.seq(s.next + i);
        let idx = s.plan.pattern[(seq % s.plan.pattern.len() as u64) as usize];
        let t = &s.plan.templates[usize::from(idx)];
        let mut p = pool.get();
        if p.load(&t.bytes).is_err() {
            pool.put(p);
            continue;
        }
        t.stamp(
            p.data_mut(),
            &Record {
                trial: s.plan.trial,
                stream: s.plan.stream,
                seq: seq as u32,
                tx_ns,
            },
        );
        bytes += t.frame_size() as u64;
        out.push(p);
    }
    let queued = out.len() as u64;
    let sent = port.tx_burst(out, pool).unwrap_or(0) as u64;
    out.clear();
    if s.report.sent == 0 && sent > 0 {
        s.report.first_ns = tx_ns;
    }
    if sent > 0 {
        s.report.last_ns = tx_ns;
    }
    s.report.sent += sent;
    s.report.bytes += (bytes * sent).checked_div(queued).unwrap_or(0);
    s.report.refused += n as u64 - sent;
    s.next += n as u64;
    s.next >= count
}

/// Receives a burst: test frames are counted, the rest goes to the host logic (ARP /
/// ND answered). Returns how many frames arrived.
#[allow(clippy::too_many_arguments)]
pub(super) fn serve_rx(
    port: &mut dyn Port,
    pool: &mut PacketPool,
    rx: &mut Vec<Packet>,
    out: &mut Vec<Packet>,
    tables: &Tables,
    cache: &NeighbourCache,
    epoch: Instant,
    counting: &mut Option<Counting>,
    last_rx: &AtomicU64,
) -> usize {
    let n = port.rx_burst(pool, rx, BURST).unwrap_or(0);
    if n == 0 {
        return 0;
    }
    let rx_ns = epoch.elapsed().as_nanos() as u64;
    for mut p in rx.drain(..) {
        match parse(p.data()) {
            Seen::Record(r) => {
                last_rx.store(rx_ns, Ordering::Relaxed);
                if let Some(c) = counting {
                    c.record(&r, rx_ns);
                }
                pool.put(p);
            }
            Seen::Fragment => {
                if let Some(c) = counting {
                    c.fragment();
                }
                pool.put(p);
            }
            Seen::Other => {
                if host::triage(&mut p, 0, tables, cache) == Triage::Reply {
                    out.push(p);
                } else {
                    pool.put(p);
                }
            }
        }
    }
    if !out.is_empty() {
        let _ = port.tx_burst(out, pool);
        out.clear();
    }
    n
}
