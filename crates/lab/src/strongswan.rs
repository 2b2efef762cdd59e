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
    local_ts6: &'static str,
    remote_ts6: &'static str,
}

const SIDES: [Side; 2] = [
    Side {
        gw: "gw1",
        me: "192.0.2.1",
        peer: "192.0.2.2",
        local_ts: "198.51.100.0/24",
        remote_ts: "203.0.113.0/24",
        local_ts6: "2001:db8:100::/64",
        remote_ts6: "2001:db8:113::/64",
    },
    Side {
        gw: "gw2",
        me: "192.0.2.2",
        peer: "192.0.2.1",
        local_ts: "203.0.113.0/24",
        remote_ts: "198.51.100.0/24",
        local_ts6: "2001:db8:113::/64",
        remote_ts6: "2001:db8:100::/64",
    },
];

/// The IPsec back-end charon loads: strongSwan's own userspace one, or espgw through the
/// kernel-espgw plugin and its keying socket.
#[derive(Clone, Copy)]
pub enum Backend<'a> {
    Libipsec,
    /// `replay_window`: what charon gives the inbound SAs it installs (charon's own
    /// default is 32 packets; espgw's static SAs default to 1024).
    Espgw {
        socket: &'a Path,
        replay_window: u32,
    },
}

/// The kernel-espgw plugin as charon loads it.
pub const PLUGIN: &str = "/usr/lib/ipsec/plugins/libstrongswan-kernel-espgw.so";

/// The plugins every charon here loads before its IPsec back-end, and the Debian package
/// that ships each. Debian spreads them over several packages, and a fresh machine's
/// install (`--no-install-recommends`) brings only charon's dependencies: without
/// libstrongswan-standard-plugins charon starts, skips `gcm` and `openssl`, and then
/// refuses the MODP group and AES-GCM that the connection proposes.
const PLUGINS_BEFORE_BACKEND: &[(&str, &str)] = &[
    ("random", "libstrongswan"),
    ("nonce", "libstrongswan"),
    ("aes", "libstrongswan"),
    ("sha1", "libstrongswan"),
    ("sha2", "libstrongswan"),
    ("hmac", "libstrongswan"),
    ("gcm", "libstrongswan-standard-plugins"),
    ("kdf", "libstrongswan"),
    ("openssl", "libstrongswan-standard-plugins"),
    ("pem", "libstrongswan"),
    ("pkcs1", "libstrongswan"),
    ("x509", "libstrongswan"),
    ("pubkey", "libstrongswan"),
    ("socket-default", "strongswan-libcharon"),
];

/// The plugins loaded after the back-end: it must load before kernel-netlink.
const PLUGINS_AFTER_BACKEND: &[(&str, &str)] = &[
    ("kernel-netlink", "libstrongswan"),
    ("vici", "strongswan-swanctl"),
];

/// Where Debian's charon finds plugin `name`.
fn plugin_file(name: &str) -> String {
    format!("/usr/lib/ipsec/plugins/libstrongswan-{name}.so")
}

impl Backend<'_> {
    /// The back-end's plugin, and its Debian package where one ships it (espgw's own
    /// plugin is built from this tree: [`PLUGIN`]).
    fn plugin(&self) -> (&'static str, Option<&'static str>) {
        match self {
            Backend::Libipsec => ("kernel-libipsec", Some("libcharon-extra-plugins")),
            Backend::Espgw { .. } => ("kernel-espgw", None),
        }
    }
}

/// charon's `load` line for `backend`, in load order.
fn load_line(backend: Backend<'_>) -> String {
    let before = PLUGINS_BEFORE_BACKEND.iter().map(|(p, _)| *p);
    let after = PLUGINS_AFTER_BACKEND.iter().map(|(p, _)| *p);
    before
        .chain(std::iter::once(backend.plugin().0))
        .chain(after)
        .collect::<Vec<_>>()
        .join(" ")
}

/// Every file charon needs for `backend`, with the package that ships it.
fn required_files(backend: Backend<'_>) -> Vec<(String, &'static str)> {
    let mut need = vec![
        (CHARON.to_string(), "strongswan-charon"),
        ("swanctl".to_string(), "strongswan-swanctl"),
    ];
    let plugins = PLUGINS_BEFORE_BACKEND.iter().chain(PLUGINS_AFTER_BACKEND);
    need.extend(plugins.map(|(p, package)| (plugin_file(p), *package)));
    if let (p, Some(package)) = backend.plugin() {
        need.push((plugin_file(p), package));
    }
    need
}

fn strongswan_conf(backend: Backend<'_>) -> String {
    let socket = match backend {
        Backend::Libipsec => String::new(),
        Backend::Espgw { socket, .. } => format!(
            "    kernel-espgw {{\n      socket = {}\n    }}\n",
            socket.display()
        ),
    };
    let window = match backend {
        Backend::Espgw { replay_window, .. } => format!("  replay_window = {replay_window}\n"),
        Backend::Libipsec => String::new(),
    };
    let routes = if matches!(backend, Backend::Libipsec) {
        "yes"
    } else {
        "no"
    };
    // Paths as charon sees them: /run is the instance's private directory. The IPsec
    // back-end loads before kernel-netlink (which keeps addresses and routes).
    format!(
        "charon {{
  load = {load}
  install_virtual_ip = no
  install_routes = {routes}
{window}  filelog {{
    stderr {{
      default = 1
      time_format = %T
    }}
  }}
  plugins {{
{socket}    vici {{
      socket = unix:///run/charon.vici
    }}
  }}
}}
",
        load = load_line(backend),
    )
}

/// What one gateway's connection looks like.
pub struct Connection {
    /// UDP encapsulation forced (kernel-libipsec speaks ESP only inside UDP 4500).
    pub encap: bool,
    /// A trap policy: the first packet for the remote side starts the negotiation.
    pub trap: bool,
    /// IPv6 traffic selectors as well as IPv4 ones.
    pub v6: bool,
    /// Authentication by X.509 certificates from a test CA (strongswan-pki) instead of the
    /// pre-shared key.
    pub certs: bool,
    /// Gateway 1 behind a NAT: its own address is 198.18.0.1 (its identity stays
    /// 192.0.2.1), and gateway 2 takes it from any address.
    pub nat: bool,
}

fn swanctl_conf(s: &Side, c: &Connection) -> String {
    let (mut lts, mut rts) = (s.local_ts.to_string(), s.remote_ts.to_string());
    if c.v6 {
        lts += &format!(",{}", s.local_ts6);
        rts += &format!(",{}", s.remote_ts6);
    }
    let (local_auth, remote_auth) = if c.certs {
        (
            "auth = pubkey\n      certs = gw.pem",
            "auth = pubkey\n      cacerts = ca.pem",
        )
    } else {
        ("auth = psk", "auth = psk")
    };
    let (local_addr, remote_addr) = match (c.nat, s.gw) {
        (true, "gw1") => ("198.18.0.1", s.peer),
        (true, _) => (s.me, "%any"),
        _ => (s.me, s.peer),
    };
    format!(
        "connections {{
  bench {{
    version = 2
    local_addrs = {local_addr}
    remote_addrs = {remote_addr}
    encap = {encap}
    proposals = aes128gcm16-prfsha256-modp2048
    local {{
      {local_auth}
      id = {me}
    }}
    remote {{
      {remote_auth}
      id = {peer}
    }}
    children {{
      net {{
        local_ts = {lts}
        remote_ts = {rts}
        esp_proposals = aes128gcm16
        start_action = {start}
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
        encap = if c.encap { "yes" } else { "no" },
        start = if c.trap { "trap" } else { "none" },
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

/// charon running in one gateway namespace: where to reach it.
pub struct Charon {
    pub ns: String,
    pub uri: String,
}

/// Starts charon for gateway `gw` (index 0: gw1, 1: gw2) in namespace `ns` with `backend`
/// and loads its connection. Pid file `gwN-charon.pid` and log `gwN-charon.log` go to
/// `state`, its private /run to `gwN-swan`.
pub fn start_charon(
    ns: &str,
    gw: usize,
    backend: Backend<'_>,
    conn: &Connection,
    state: &Path,
) -> Result<Charon, String> {
    let need = required_files(backend);
    let need: Vec<(&str, &str)> = need.iter().map(|(f, p)| (f.as_str(), *p)).collect();
    ensure_packages(&need)?;
    let s = &SIDES[gw];
    let run: PathBuf = state.join(format!("{}-swan", s.gw));
    let _ = std::fs::remove_dir_all(&run);
    std::fs::create_dir_all(&run).map_err(|e| format!("{}: {e}", run.display()))?;
    let w = |name: &str, text: String| {
        std::fs::write(run.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    w("strongswan.conf", strongswan_conf(backend))?;
    w("swanctl.conf", swanctl_conf(s, conn))?;
    if conn.certs {
        certificate(&state.join("ca"), &run, s.me)?;
    }
    let log_path = state.join(format!("{}-charon.log", s.gw));
    let log = std::fs::File::create(&log_path).map_err(|e| e.to_string())?;
    // The private directory goes over /run; a keying socket under /run stays reachable at
    // its own path through a bind mount of its directory into the private one first.
    let mut script = String::new();
    if let Backend::Espgw { socket, .. } = backend {
        if let Some(rel) = socket.parent().and_then(|d| d.strip_prefix("/run").ok()) {
            let inner = run.join(rel);
            std::fs::create_dir_all(&inner).map_err(|e| format!("{}: {e}", inner.display()))?;
            script += &format!(
                "mount --bind /run/{} {} && ",
                rel.display(),
                inner.display()
            );
        }
    }
    script += &format!(
        "mount --rbind {} /run && STRONGSWAN_CONF=/run/strongswan.conf exec {CHARON}",
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
    std::fs::write(
        state.join(format!("{}-charon.pid", s.gw)),
        child.id().to_string(),
    )
    .map_err(|e| e.to_string())?;
    let sock = run.join("charon.vici");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !sock.exists() {
        if Instant::now() > deadline {
            let log = std::fs::read_to_string(&log_path).unwrap_or_default();
            return Err(format!("charon in {ns} did not start:\n{log}"));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let uri = format!("unix://{}", sock.display());
    let conf = run.join("swanctl.conf");
    swanctl(ns, &uri, &["--load-all", "--file", &conf.to_string_lossy()])?;
    Ok(Charon {
        ns: ns.to_string(),
        uri,
    })
}

/// Runs a shell pipeline of strongswan-pki commands.
fn pki(script: &str) -> Result<(), String> {
    let out = Command::new("sh")
        .args(["-c", script])
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("pki: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "pki failed ({script}): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    Ok(())
}

/// A gateway's ECDSA P-256 key and certificate (its address as identity and
/// subjectAltName) issued by the test CA in `ca` (made on first use), where swanctl loads
/// them: ecdsa/, x509/ and x509ca/ beside its swanctl.conf in `run`.
fn certificate(ca: &Path, run: &Path, me: &str) -> Result<(), String> {
    ensure_packages(&[("pki", "strongswan-pki")])?;
    let (key, pem) = (ca.join("ca.key"), ca.join("ca.pem"));
    if !pem.is_file() {
        std::fs::create_dir_all(ca).map_err(|e| format!("{}: {e}", ca.display()))?;
        pki(&format!(
            "pki --gen --type ecdsa --size 256 --outform pem > {k} && \
             pki --self --ca --lifetime 30 --in {k} --type ecdsa \
             --dn 'CN=espgw test-bed CA' --outform pem > {p}",
            k = key.display(),
            p = pem.display()
        ))?;
    }
    for sub in ["ecdsa", "x509", "x509ca"] {
        std::fs::create_dir_all(run.join(sub)).map_err(|e| e.to_string())?;
    }
    std::fs::copy(&pem, run.join("x509ca/ca.pem")).map_err(|e| e.to_string())?;
    pki(&format!(
        "pki --gen --type ecdsa --size 256 --outform pem > {r}/ecdsa/gw.key && \
         pki --pub --in {r}/ecdsa/gw.key --type ecdsa | pki --issue --lifetime 30 \
         --cacert {p} --cakey {k} --dn 'CN={me}' --san {me} --outform pem > {r}/x509/gw.pem",
        r = run.display(),
        p = pem.display(),
        k = key.display(),
    ))
}

/// Brings the tunnel up from `c` (IKE_SA and the CHILD_SA).
pub fn initiate(c: &Charon) -> Result<(), String> {
    let out = swanctl(
        &c.ns,
        &c.uri,
        &["--initiate", "--child", "net", "--timeout", "15"],
    )?;
    if !out.contains("established") && !out.contains("completed successfully") {
        return Err(format!("the IKE tunnel did not come up:\n{out}"));
    }
    Ok(())
}

/// Waits (10 s at most) until `c` lists an installed CHILD_SA; returns the listing.
pub fn wait_installed(c: &Charon) -> Result<String, String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let sas = swanctl(&c.ns, &c.uri, &["--list-sas"])?;
        if sas.contains("INSTALLED") {
            return Ok(sas);
        }
        if Instant::now() > deadline {
            return Err(format!("no installed CHILD_SA in {}:\n{sas}", c.ns));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// Starts charon with kernel-libipsec in namespaces `ns1` (gw1) and `ns2` (gw2) and brings
/// the tunnel up (strongSwan as the device under test: ESP in UDP, IPv4).
pub fn start(ns1: &str, ns2: &str, state: &Path) -> Result<(), String> {
    let conn = Connection {
        encap: true,
        trap: true,
        v6: false,
        certs: false,
        nat: false,
    };
    let c1 = start_charon(ns1, 0, Backend::Libipsec, &conn, state)?;
    let c2 = start_charon(ns2, 1, Backend::Libipsec, &conn, state)?;
    initiate(&c1)?;
    // Both ends installed the CHILD_SA (the responder's route via ipsec0 included).
    wait_installed(&c1)?;
    wait_installed(&c2)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn backends() -> [Backend<'static>; 2] {
        [
            Backend::Libipsec,
            Backend::Espgw {
                socket: Path::new("/run/espgw/keying.sock"),
                replay_window: 64,
            },
        ]
    }

    #[test]
    fn the_back_end_loads_before_kernel_netlink_and_the_proposals_have_their_plugins() {
        for backend in backends() {
            let line = load_line(backend);
            let plugins: Vec<&str> = line.split(' ').collect();
            let at = |name: &str| plugins.iter().position(|p| *p == name);
            let back_end = at(backend.plugin().0).expect("the back-end is loaded");
            assert!(back_end < at("kernel-netlink").expect("kernel-netlink is loaded"));
            // AES-GCM and the MODP group of the IKE proposal come from these two.
            assert!(at("gcm").is_some() && at("openssl").is_some(), "{line}");
            assert!(strongswan_conf(backend).contains(&format!("  load = {line}\n")));
            let files = required_files(backend);
            for p in &plugins {
                let wanted = files.iter().any(|(f, _)| *f == plugin_file(p));
                // espgw's own plugin is built from this tree, not installed from a package.
                assert_eq!(wanted, *p != "kernel-espgw", "{p}");
            }
        }
    }

    fn installed(package: &str) -> bool {
        Command::new("dpkg-query")
            .args(["-W", "-f", "${Status}", package])
            .output()
            .is_ok_and(|o| o.stdout.ends_with(b"install ok installed"))
    }

    fn owner(file: &str) -> String {
        let o = Command::new("dpkg").args(["-S", file]).output().unwrap();
        let text = String::from_utf8_lossy(&o.stdout);
        text.split(':').next().unwrap_or("").trim().to_string()
    }

    /// Checked against Debian's own package database: each file charon needs is shipped by
    /// the package the lab installs for it, so a fresh machine gets every plugin.
    #[test]
    fn each_file_charon_needs_is_shipped_by_the_package_named_for_it() {
        let packages = [
            "strongswan-charon",
            "strongswan-swanctl",
            "libcharon-extra-plugins",
            "libstrongswan-standard-plugins",
        ];
        if !packages.iter().all(|p| installed(p)) {
            // scripts/test.sh installs all four (scripts/install-deps.sh) before the tests.
            eprintln!("strongSwan's packages are not all installed: nothing to check against");
            return;
        }
        for backend in backends() {
            for (file, package) in required_files(backend) {
                let path = if file.starts_with('/') {
                    file.clone()
                } else {
                    format!("/usr/sbin/{file}")
                };
                assert!(Path::new(&path).exists(), "{path}");
                assert_eq!(owner(&path), package, "{path}");
            }
        }
    }
}
