//! `espgw-lab testbed` without a subcommand: up, ping and UDP through the bed, what crossed
//! the transport link, down.

use super::*;

pub(super) fn self_exe() -> Result<String, String> {
    Ok(std::env::current_exe()
        .map_err(|e| e.to_string())?
        .to_string_lossy()
        .to_string())
}

/// Starts `espgw-lab testbed SUB ...` inside namespace `n` in the background.
pub(super) fn spawn_in(n: &str, sub: &[&str]) -> Result<std::process::Child, String> {
    let exe = self_exe()?;
    let nsn = ns(n);
    let mut args = vec!["netns", "exec", nsn.as_str(), exe.as_str(), "testbed"];
    args.extend_from_slice(sub);
    Command::new("ip")
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| e.to_string())
}

pub(super) fn wait_json(child: std::process::Child) -> Result<serde_json::Value, String> {
    let out = child.wait_with_output().map_err(|e| e.to_string())?;
    if !out.status.success() {
        return Err(String::from_utf8_lossy(&out.stderr).into_owned());
    }
    serde_json::from_slice(&out.stdout).map_err(|e| format!("bad JSON from helper: {e}"))
}

/// One measured UDP run from h1 to h2 (`v6`: over IPv6), frames of `frame` bytes
/// (Ethernet + FCS, as RFC 2544 counts them).
pub(super) fn measure_udp(
    frame: usize,
    v6: bool,
    seconds: f64,
) -> Result<(u64, UdpReport), String> {
    let ip_hdr = if v6 { 40 } else { 20 };
    let payload = frame.saturating_sub(18 + ip_hdr + 8).max(16);
    let port = if v6 { "9002" } else { "9001" };
    let recv_secs = format!("{}", seconds + 2.0);
    let mut rx_args = vec!["udp-recv", "--port", port, "--seconds", recv_secs.as_str()];
    if v6 {
        rx_args.push("--v6");
    }
    let mut rx = spawn_in("h2", &rx_args)?;
    // Kept open until the receiver has ended: it may still report an error there.
    let rx_stderr = wait_listening(&mut rx)?;
    let dst = if v6 {
        format!("[2001:db8:113::2]:{port}")
    } else {
        format!("203.0.113.2:{port}")
    };
    let secs = seconds.to_string();
    let size = payload.to_string();
    let tx = spawn_in(
        "h1",
        &[
            "udp-send",
            "--dst",
            &dst,
            "--size",
            &size,
            "--seconds",
            &secs,
        ],
    )?;
    let sent = wait_json(tx)?["sent"].as_u64().unwrap_or(0);
    let r: UdpReport =
        serde_json::from_value(wait_json(rx)?).map_err(|e| format!("bad receiver report: {e}"))?;
    drop(rx_stderr);
    Ok((sent, r))
}

/// Waits until the `udp-recv` child has bound its socket (its first stderr line says so):
/// datagrams sent before that would be lost, and a fixed delay is only a guess. Returns its
/// stderr, which the caller keeps open while the child runs.
fn wait_listening(rx: &mut std::process::Child) -> Result<std::process::ChildStderr, String> {
    use std::io::Read;
    let mut err = rx.stderr.take().ok_or("the UDP receiver has no stderr")?;
    let mut line = Vec::new();
    let mut byte = [0u8; 1];
    // One byte at a time: nothing after the line is consumed here. Bounded, as a line is.
    while !line.ends_with(b"\n") && line.len() < 4096 {
        match err.read(&mut byte) {
            Ok(1) => line.push(byte[0]),
            _ => break,
        }
    }
    let line = String::from_utf8_lossy(&line);
    if !line.contains(super::traffic::LISTENING) {
        return Err(format!("the UDP receiver did not start: {}", line.trim()));
    }
    Ok(err)
}

pub(super) fn ping(from: &str, dst: &str) -> Result<String, String> {
    let out = in_ns(from, &["ping", "-c", "5", "-i", "0.2", "-W", "2", dst])?;
    Ok(out
        .lines()
        .filter(|l| l.contains("packets transmitted") || l.starts_with("rtt"))
        .collect::<Vec<_>>()
        .join("; "))
}

/// The README's main command: builds the test bed with the built-in configuration,
/// pings and sends UDP through it while watching the transport link, prints what it
/// measured, and tears everything down.
pub fn demo(a: &UpArgs, seconds: f64) -> Result<(), String> {
    println!("espgw test bed: h1 -- gw1 == ESP over wan == gw2 -- h2 (namespaces {PREFIX}-*)");
    up(a)?;
    let res = demo_traffic(a, seconds);
    let logs = ["gw1", "gw2"]
        .map(|g| std::fs::read_to_string(state(&format!("{g}.log"))).unwrap_or_default());
    let d = down();
    if res.is_err() {
        for (g, l) in ["gw1", "gw2"].iter().zip(logs.iter()) {
            eprintln!("--- {g} log\n{l}");
        }
    }
    res?;
    d?;
    println!("test bed removed");
    Ok(())
}

pub(super) fn demo_traffic(a: &UpArgs, seconds: f64) -> Result<(), String> {
    let io = std::fs::read_to_string(state("gw1.log"))
        .ok()
        .and_then(|l| {
            l.lines()
                .find(|x| x.contains("event=port"))
                .and_then(|x| x.split_whitespace().find(|w| w.starts_with("io=")))
                .map(|w| w.trim_start_matches("io=").to_string())
        })
        .unwrap_or_else(|| "-".into());
    println!(
        "dut: {:?}, ports: {io}, workers per gateway: {}, keying: {:?}{}",
        a.dut,
        a.workers,
        a.keying,
        if a.keying == Keying::Ike {
            format!(
                " (gateway 2: {:?}, authentication: {:?}{})",
                a.peer,
                a.auth,
                if a.nat {
                    ", gateway 1 behind a NAT"
                } else {
                    ""
                }
            )
        } else {
            String::new()
        }
    );
    if a.keying == Keying::Ike {
        for g in ["gw1", "gw2"] {
            if a.peer == Peer::Espgw || g == "gw1" {
                println!("{}", ike::describe(g)?);
            }
        }
    }
    // Stock strongSwan as gateway 2 carries IPv4 only (its CHILD_SA's selectors).
    let v6 = !(a.keying == Keying::Ike && a.peer == Peer::Strongswan);
    let watch_secs = format!("{}", 4.0 + 4.0 * (seconds + 2.5));
    let watcher = spawn_in(
        "wan",
        &["watch", "--interface", "br0", "--seconds", &watch_secs],
    )?;
    std::thread::sleep(Duration::from_millis(300));
    println!("ping h1 -> h2 (IPv4): {}", ping("h1", "203.0.113.2")?);
    if v6 {
        println!("ping h1 -> h2 (IPv6): {}", ping("h1", "2001:db8:113::2")?);
    }
    let mut rows = Vec::new();
    let runs: &[(usize, bool)] = if v6 {
        &[(64, false), (1400, false), (64, true), (1400, true)]
    } else {
        &[(64, false), (1400, false)]
    };
    for &(frame, v6) in runs {
        let (sent, r) = measure_udp(frame, v6, seconds)?;
        let secs = seconds.max(1e-9);
        let pps = r.packets as f64 / secs;
        let mbps = pps * frame as f64 * 8.0 / 1e6;
        let loss = if sent > 0 {
            100.0 * (sent.saturating_sub(r.packets)) as f64 / sent as f64
        } else {
            0.0
        };
        rows.push(format!(
            "  {:<5} {:>5} B   sent {:>9.0} pps   received {:>9.0} pps   {:>8.1} Mbit/s   loss {:>5.2}%",
            if v6 { "IPv6" } else { "IPv4" },
            frame,
            sent as f64 / secs,
            pps,
            mbps,
            loss
        ));
    }
    println!("UDP h1 -> h2, {seconds} s per run, as fast as the sender goes (frame sizes count Ethernet header and FCS):");
    for r in rows {
        println!("{r}");
    }
    let w = wait_json(watcher)?;
    let esp = w["esp"].as_u64().unwrap_or(0) + w["esp_in_udp"].as_u64().unwrap_or(0);
    let plain = w["plaintext_ip"].as_u64().unwrap_or(0);
    println!(
        "transport link (wan br0): {} frames: {} ESP, {} IKE, {} ARP, {} plaintext IP, {} other",
        w["frames"], esp, w["ike"], w["arp"], plain, w["other"]
    );
    if a.dut == Dut::Espgw {
        if plain > 0 || esp == 0 {
            return Err(format!(
                "the transport link carried {plain} plaintext IP frames and {esp} ESP frames"
            ));
        }
        println!("the transport link carried only ESP (and ARP, and IKE with --keying ike)");
        for g in ["gw1", "gw2"] {
            if g == "gw2" && !v6 {
                continue; // stock strongSwan: no espgw to ask
            }
            let s = espgw::control_request(
                &control_path(g),
                &espgw_control::ControlRequest::Show("stats".into()),
            )
            .map_err(|e| e.to_string())?;
            println!(
                "{g}: encrypted {} decrypted {} dropped {}",
                s["encrypted"], s["decrypted"], s["drops"]
            );
        }
    }
    Ok(())
}
