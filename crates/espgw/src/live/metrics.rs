//! The Prometheus endpoint: `GET /metrics` in the text exposition format. Per-SA
//! packets, bytes and drops by reason, gateway-wide drops by reason, per-port counters,
//! the gateway's own host work, and reloads.

use espgw_control::MetricsRequest;
use std::fmt::Write as _;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use espgw_core::counters::DropReason;

use super::shared::{Shared, WorkerReport};
use espgw_core::Tables;

pub fn serve(listener: TcpListener, shared: Arc<Shared>) {
    let _ = listener.set_nonblocking(true);
    let active = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    while !shared.stopping() {
        match listener.accept() {
            Ok((s, _)) => {
                let sh = shared.clone();
                // Beyond the bound the connection is dropped (closed) at once.
                super::conn::spawn_bounded(&active, "espgw-metrics-conn", move || {
                    let _ = handle(s, &sh);
                });
            }
            Err(_) => std::thread::sleep(Duration::from_millis(20)),
        }
    }
}

/// How long a scrape may take to send its request, and then to take the reply.
const DEADLINE: Duration = Duration::from_secs(2);

fn handle(s: TcpStream, shared: &Shared) -> std::io::Result<()> {
    s.set_nonblocking(false)?;
    let mut s = super::conn::Deadline::new(s, DEADLINE);
    let mut buf = [0u8; espgw_control::MAX_METRICS_HEAD];
    let mut n = 0;
    // Read the request head (bounded); only the request line matters.
    while n < buf.len() {
        let k = s.read(&mut buf[n..])?;
        if k == 0 {
            break;
        }
        n += k;
        if espgw_control::head_complete(&buf[..n]) {
            break;
        }
    }
    let (status, body, ctype) = match MetricsRequest::parse(&buf[..n]) {
        MetricsRequest::Metrics => ("200 OK", render(shared), "text/plain; version=0.0.4"),
        MetricsRequest::NotFound => ("404 Not Found", "not found\n".to_string(), "text/plain"),
    };
    s.renew(DEADLINE);
    write!(
        s,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )
}

fn esc(v: &str) -> String {
    v.replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
}

/// The metrics text.
pub fn render(shared: &Shared) -> String {
    let t = shared.tables();
    let tot = shared.totals();
    let mut o = String::new();
    render_sas(&mut o, &t);
    render_gateway(&mut o, &tot);
    render_ports(&mut o, shared, &t, &tot);
    render_host(&mut o, &tot);
    render_lifecycle(&mut o, shared);
    render_keying(&mut o, shared);
    render_spread(&mut o, shared);
    o
}

/// The ordered spread (`--fanout ordered`): workers reading the shared sockets now, and
/// how often one joined or stepped back.
fn render_spread(o: &mut String, shared: &Shared) {
    let Some(c) = &shared.crew else { return };
    family(
        o,
        "espgw_ordered_spread_workers",
        "gauge",
        "Workers reading the ordered spread's shared sockets now.",
    );
    let _ = writeln!(o, "espgw_ordered_spread_workers {}", c.active());
    family(
        o,
        "espgw_ordered_spread_changes_total",
        "counter",
        "Workers that joined the ordered spread under load, that stepped back, and backlogs that called none in (the worker that saw it was short of CPU).",
    );
    let _ = writeln!(
        o,
        "espgw_ordered_spread_changes_total{{change=\"joined\"}} {}",
        c.joins()
    );
    let _ = writeln!(
        o,
        "espgw_ordered_spread_changes_total{{change=\"stepped_back\"}} {}",
        c.leaves()
    );
    let _ = writeln!(
        o,
        "espgw_ordered_spread_changes_total{{change=\"not_joined_short_of_cpu\"}} {}",
        c.contended()
    );
    family(
        o,
        "espgw_ordered_wait_seconds_total",
        "counter",
        "Time the workers waited for their bursts' turns, in the pipeline's ordered section and at transmit (summed over workers).",
    );
    let tot = shared.totals();
    for (section, ns) in [
        ("pipeline", tot.pipeline.ordered_wait_ns),
        ("transmit", tot.pipeline.transmit_wait_ns),
    ] {
        let _ = writeln!(
            o,
            "espgw_ordered_wait_seconds_total{{section=\"{section}\"}} {:.6}",
            ns as f64 / 1e9
        );
    }
}

/// The SA contract (with `--keying-socket`): negotiated SAs installed, deleted and
/// expired (a soft expiry is a rekey), and the SAs and policies held now.
fn render_keying(o: &mut String, shared: &Shared) {
    let Some(k) = &shared.keying else { return };
    let c = &k.counters;
    family(
        o,
        "espgw_keying_sa_changes_total",
        "counter",
        "Negotiated SAs installed, deleted, and told to the IKE daemon as expired (soft: rekey; hard).",
    );
    for (what, v) in [
        ("installed", &c.sas_installed),
        ("deleted", &c.sas_deleted),
        ("expired_soft", &c.expired_soft),
        ("expired_hard", &c.expired_hard),
    ] {
        let _ = writeln!(
            o,
            "espgw_keying_sa_changes_total{{change=\"{what}\"}} {}",
            v.load(Ordering::Relaxed)
        );
    }
    let (sas, policies) = k.len();
    family(
        o,
        "espgw_keying_negotiated",
        "gauge",
        "SAs and policies the IKE daemon has installed now.",
    );
    let _ = writeln!(o, "espgw_keying_negotiated{{kind=\"sa\"}} {sas}");
    let _ = writeln!(o, "espgw_keying_negotiated{{kind=\"policy\"}} {policies}");
    family(
        o,
        "espgw_keying_sessions_total",
        "counter",
        "IKE daemon sessions started (HELLO accepted).",
    );
    let _ = writeln!(
        o,
        "espgw_keying_sessions_total {}",
        c.sessions.load(Ordering::Relaxed)
    );
}

fn sa_labels(sa: &espgw_core::sa::Sa) -> String {
    format!(
        "sa=\"{}\",spi=\"0x{:08x}\",direction=\"{}\"",
        esc(&sa.label),
        sa.spi,
        sa.direction
    )
}

/// Per SA: packets, bytes, drops by reason, sequence number.
fn render_sas(o: &mut String, t: &Tables) {
    family(
        o,
        "espgw_sa_packets_total",
        "counter",
        "Packets encrypted (out) or decrypted and accepted (in) by an SA.",
    );
    for sa in &t.sas {
        let _ = writeln!(
            o,
            "espgw_sa_packets_total{{{}}} {}",
            sa_labels(sa),
            sa.state.counters.packets()
        );
    }
    family(
        o,
        "espgw_sa_bytes_total",
        "counter",
        "Inner bytes carried by an SA.",
    );
    for sa in &t.sas {
        let _ = writeln!(
            o,
            "espgw_sa_bytes_total{{{}}} {}",
            sa_labels(sa),
            sa.state.counters.bytes()
        );
    }
    family(
        o,
        "espgw_sa_drops_total",
        "counter",
        "Packets of an SA dropped, by reason.",
    );
    for sa in &t.sas {
        for &r in DropReason::ALL {
            let _ = writeln!(
                o,
                "espgw_sa_drops_total{{{},reason=\"{}\"}} {}",
                sa_labels(sa),
                r.name(),
                sa.state.counters.dropped(r)
            );
        }
    }
    family(
        o,
        "espgw_sa_sequence_number",
        "gauge",
        "Outbound: last sequence number sent; inbound: highest accepted.",
    );
    for sa in &t.sas {
        let seq = match sa.direction {
            espgw_config::Direction::Out => sa.state.last_seq(),
            espgw_config::Direction::In => sa.state.replay.lock().map(|w| w.top()).unwrap_or(0),
        };
        let _ = writeln!(o, "espgw_sa_sequence_number{{{}}} {seq}", sa_labels(sa));
    }
}

/// The gateway's drops by reason and its encrypted / decrypted / bypassed totals.
fn render_gateway(o: &mut String, tot: &WorkerReport) {
    family(
        o,
        "espgw_drops_total",
        "counter",
        "Packets dropped by the gateway, by reason.",
    );
    for &r in DropReason::ALL {
        let _ = writeln!(
            o,
            "espgw_drops_total{{reason=\"{}\"}} {}",
            r.name(),
            tot.pipeline.dropped(r)
        );
    }
    let c = &tot.pipeline;
    for (name, help, v) in [
        (
            "espgw_encrypted_packets_total",
            "Packets encrypted.",
            c.encrypted,
        ),
        (
            "espgw_decrypted_packets_total",
            "Packets decrypted and accepted.",
            c.decrypted,
        ),
        (
            "espgw_bypassed_packets_total",
            "Packets a bypass policy let through.",
            c.bypassed,
        ),
    ] {
        family(o, name, "counter", help);
        let _ = writeln!(o, "{name} {v}");
    }
}

/// Per port: frames and bytes each way, and what was dropped before or after the gateway.
fn render_ports(o: &mut String, shared: &Shared, t: &Tables, tot: &WorkerReport) {
    type PortField = fn(&espgw_io::port::PortStats) -> u64;
    let port_fields: [(&str, &str, PortField); 9] = [
        (
            "espgw_port_rx_packets_total",
            "Frames received on a port.",
            |s| s.rx_packets,
        ),
        (
            "espgw_port_rx_bytes_total",
            "Bytes received on a port.",
            |s| s.rx_bytes,
        ),
        (
            "espgw_port_tx_packets_total",
            "Frames sent on a port.",
            |s| s.tx_packets,
        ),
        ("espgw_port_tx_bytes_total", "Bytes sent on a port.", |s| {
            s.tx_bytes
        }),
        (
            "espgw_port_rx_dropped_total",
            "Frames the kernel or the ring dropped before the gateway saw them.",
            |s| s.rx_dropped,
        ),
        (
            "espgw_port_rx_ring_full_total",
            "Of the frames dropped before the gateway saw them: not taken in time (ring full).",
            |s| s.rx_ring_full,
        ),
        (
            "espgw_port_tx_dropped_total",
            "Frames not sent (ring full).",
            |s| s.tx_dropped,
        ),
        (
            "espgw_port_rx_other_host_total",
            "Frames for other hosts' MACs that a port saw and dropped.",
            |s| s.rx_other_host,
        ),
        (
            "espgw_port_rx_vlan_tagged_total",
            "Frames tagged for a VLAN that a port saw and dropped (AF_XDP leaves them to the kernel).",
            |s| s.rx_vlan_tagged,
        ),
    ];
    for (name, help, f) in port_fields {
        family(o, name, "counter", help);
        for (i, p) in t.ports.iter().enumerate() {
            let s = tot.ports.get(i).copied().unwrap_or_default();
            let _ = writeln!(
                o,
                "{name}{{port=\"{}\",interface=\"{}\"}} {}",
                esc(&p.name),
                esc(&shared.facts[i].interface),
                f(&s)
            );
        }
    }
}

/// The gateway's work as a host on its links.
fn render_host(o: &mut String, tot: &WorkerReport) {
    let h = &tot.host;
    family(
        o,
        "espgw_host_packets_total",
        "counter",
        "Work the gateway did as a host on its links, by kind.",
    );
    for (k, v) in [
        ("arp_reply", h.arp_replies),
        ("nd_advertisement", h.nd_replies),
        ("echo_reply", h.echo_replies),
        ("solicitation_sent", h.solicitations_sent),
        ("icmp_error_sent", h.icmp_errors_sent),
        ("packet_fragmented", h.fragmented),
        ("fragment_made", h.fragments_made),
        ("datagram_reassembled", h.reassembled),
    ] {
        let _ = writeln!(o, "espgw_host_packets_total{{kind=\"{k}\"}} {v}");
    }
}

/// Reloads, SA lifetime events, uptime.
fn render_lifecycle(o: &mut String, shared: &Shared) {
    family(
        o,
        "espgw_reloads_total",
        "counter",
        "Configuration reloads, by result.",
    );
    let _ = writeln!(
        o,
        "espgw_reloads_total{{result=\"ok\"}} {}",
        shared.reloads.load(Ordering::Relaxed)
    );
    let _ = writeln!(
        o,
        "espgw_reloads_total{{result=\"refused\"}} {}",
        shared.reload_failures.load(Ordering::Relaxed)
    );
    family(
        o,
        "espgw_sa_events_total",
        "counter",
        "SAs that reached their soft lifetime, hard lifetime, or the end of their sequence numbers.",
    );
    for event in espgw_core::sa::SaEvent::ALL {
        let _ = writeln!(
            o,
            "espgw_sa_events_total{{event=\"{}\"}} {}",
            event.name(),
            shared.sa_events[event as usize].load(Ordering::Relaxed)
        );
    }
    family(
        o,
        "espgw_uptime_seconds",
        "gauge",
        "Seconds since the gateway started.",
    );
    let _ = writeln!(
        o,
        "espgw_uptime_seconds {}",
        shared.started.elapsed().as_secs()
    );
}
