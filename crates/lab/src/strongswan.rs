//! strongSwan as a device under test: charon with its userspace data plane
//! (kernel-libipsec) in each gateway namespace of the test bed, since this kernel has
//! no ESP of its own.
//!
//! Traps this works around, found when it was first set up by hand:
//! - charon always writes `/var/run/charon.pid`: each instance runs in a mount
//!   namespace of its own with a private directory bound over /run (its config and
//!   vici socket live there too);
//! - `kernel-libipsec` must load before `kernel-netlink`, or installing SAs fails
//!   with netlink error 38;
//! - libipsec speaks ESP only inside UDP 4500 (`encap = yes`), and its TUN device
//!   (ipsec0) has an MTU of 1400: larger packets are fragmented before encryption.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::packages::ensure_packages;

const CHARON: &str = "/usr/lib/ipsec/charon";
pub const PSK: &str = "espgw-testbed-psk-not-secret";

struct Side {
    gw: &'static str,
    me: &'static str,
    peer: &'static str,
    local_ts: &'static str,
    remote_ts: &'static str,
}

const SIDES: [Side; 2] = [
    Side {
        gw: "gw1",
        me: "192.0.2.1",
        peer: "192.0.2.2",
        local_ts: "198.51.100.0/24",
        remote_ts: "203.0.113.0/24",
    },
    Side {
        gw: "gw2",
        me: "192.0.2.2",
        peer: "192.0.2.1",
        local_ts: "203.0.113.0/24",
        remote_ts: "198.51.100.0/24",
    },
];

fn strongswan_conf() -> String {
    // Paths as charon sees them: /run is the instance's private directory.
    "charon {
  load = random nonce aes sha1 sha2 hmac gcm kdf openssl pem pkcs1 x509 pubkey socket-default kernel-libipsec kernel-netlink vici
  install_virtual_ip = no
  filelog {
    stderr {
      default = 1
      time_format = %T
    }
  }
  plugins {
    vici {
      socket = unix:///run/charon.vici
    }
  }
}
"
    .to_string()
}

fn swanctl_conf(s: &Side) -> String {
    format!(
        "connections {{
  bench {{
    version = 2
    local_addrs = {me}
    remote_addrs = {peer}
    encap = yes
    proposals = aes128gcm16-prfsha256-modp2048
    local {{
      auth = psk
      id = {me}
    }}
    remote {{
      auth = psk
      id = {peer}
    }}
    children {{
      net {{
        local_ts = {lts}
        remote_ts = {rts}
        esp_proposals = aes128gcm16
        start_action = trap
      }}
    }}
  }}
}}
secrets {{
  ike-bench {{
    id-1 = 192.0.2.1
    id-2 = 192.0.2.2
    secret = \"{PSK}\"
  }}
}}
",
        me = s.me,
        peer = s.peer,
        lts = s.local_ts,
        rts = s.remote_ts
    )
}

fn swanctl(ns: &str, uri: &str, args: &[&str]) -> Result<String, String> {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "swanctl"])
        .args(args)
        .args(["--uri", uri])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("swanctl: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if !out.status.success() {
        return Err(format!(
            "swanctl {} in {ns} failed: {}{}",
            args.join(" "),
            text.trim(),
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(text)
}

/// Starts charon in namespaces `ns1` (gw1) and `ns2` (gw2), loads the connection and
/// brings the tunnel up. Pid files `gw1.pid` / `gw2.pid` and logs `gw1.log` /
/// `gw2.log` go to `state`.
pub fn start(ns1: &str, ns2: &str, state: &Path) -> Result<(), String> {
    ensure_packages(&[
        (CHARON, "strongswan-charon"),
        ("swanctl", "strongswan-swanctl"),
        (
            "/usr/lib/ipsec/plugins/libstrongswan-kernel-libipsec.so",
            "libcharon-extra-plugins",
        ),
    ])?;
    let mut uris = Vec::new();
    for (s, ns) in SIDES.iter().zip([ns1, ns2]) {
        let run: PathBuf = state.join(format!("{}-swan", s.gw));
        let _ = std::fs::remove_dir_all(&run);
        std::fs::create_dir_all(&run).map_err(|e| format!("{}: {e}", run.display()))?;
        let w = |name: &str, text: String| {
            std::fs::write(run.join(name), text).map_err(|e| format!("{name}: {e}"))
        };
        w("strongswan.conf", strongswan_conf())?;
        w("swanctl.conf", swanctl_conf(s))?;
        let log = std::fs::File::create(state.join(format!("{}.log", s.gw)))
            .map_err(|e| e.to_string())?;
        let script = format!(
            "mount --bind {} /run && STRONGSWAN_CONF=/run/strongswan.conf exec {CHARON}",
            run.display()
        );
        // `ip netns exec`, `unshare` and `sh` all exec: the child's pid is charon's.
        let child = Command::new("ip")
            .args(["netns", "exec", ns, "unshare", "-m", "sh", "-c", &script])
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
            .stderr(log)
            .spawn()
            .map_err(|e| format!("starting charon in {ns}: {e}"))?;
        std::fs::write(state.join(format!("{}.pid", s.gw)), child.id().to_string())
            .map_err(|e| e.to_string())?;
        let sock = run.join("charon.vici");
        let deadline = Instant::now() + Duration::from_secs(10);
        while !sock.exists() {
            if Instant::now() > deadline {
                let log = std::fs::read_to_string(state.join(format!("{}.log", s.gw)))
                    .unwrap_or_default();
                return Err(format!("charon in {ns} did not start:\n{log}"));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let uri = format!("unix://{}", sock.display());
        let conf = run.join("swanctl.conf");
        swanctl(ns, &uri, &["--load-all", "--file", &conf.to_string_lossy()])?;
        uris.push((ns.to_string(), uri));
    }
    let (ns, uri) = &uris[0];
    let out = swanctl(
        ns,
        uri,
        &["--initiate", "--child", "net", "--timeout", "15"],
    )?;
    if !out.contains("established") && !out.contains("completed successfully") {
        return Err(format!("strongSwan tunnel did not come up:\n{out}"));
    }
    // Both ends installed the CHILD_SA (the responder's route via ipsec0 included).
    for (ns, uri) in &uris {
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            let sas = swanctl(ns, uri, &["--list-sas"])?;
            if sas.contains("INSTALLED") {
                break;
            }
            if Instant::now() > deadline {
                return Err(format!("no installed CHILD_SA in {ns}:\n{sas}"));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    Ok(())
}
