//! `espgw-lab testbed --keying ike`: the test bed's gateways take their SAs from IKEv2.
//!
//! Each espgw gateway runs with a configuration of ports, addresses and routes only, and a
//! keying socket; strongSwan's charon runs beside it in the same namespace (in a mount
//! namespace of its own for /run) with the kernel-espgw plugin, which hands every SA and
//! policy charon negotiates to espgw. `--peer strongswan` makes gateway 2 stock strongSwan
//! instead: the kernel forwards and kernel-libipsec encrypts (ESP in UDP 4500 both ways).
//!
//! IKE reaches charon through the namespace's kernel, which holds the transport address:
//! with AF_PACKET the kernel sees a copy of every frame, and two nftables rules keep ESP
//! and ESP-in-UDP from it; with AF_XDP espgw's XDP program passes it IKE only. ARP
//! replies go to espgw, so the kernel is given the peer's link-layer address.

use super::*;
use crate::strongswan::{self, Backend, Charon, Connection};

/// Which gateway 2 runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Peer {
    /// espgw with charon and kernel-espgw, like gateway 1 (raw ESP, both families).
    Espgw,
    /// Stock strongSwan: charon with kernel-libipsec (ESP in UDP 4500, IPv4).
    Strongswan,
}

/// How the IKE peers authenticate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Auth {
    /// A pre-shared key.
    Psk,
    /// X.509 certificates (ECDSA P-256) from a test CA made with strongswan-pki.
    Cert,
}

/// Where SAs come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Keying {
    /// The built-in configurations' static SAs.
    Static,
    /// IKEv2 through strongSwan's charon and the kernel-espgw plugin.
    Ike,
}

/// The NAT box's link-layer addresses (--nat): towards gateway 1, towards the transport
/// link.
pub(super) const NAT_INNER_MAC: &str = "02:00:00:00:0b:01";
pub(super) const NAT_OUTER_MAC: &str = "02:00:00:00:0b:02";

/// Gateway `n`'s (1 or 2) configuration for IKE: the built-in configuration's ports,
/// addresses and routes, and no SA or policy (charon brings them). With `nat`, gateway 1
/// sits in 198.18.0.0/24 behind the NAT box (198.18.0.254).
pub(super) fn gateway_config(n: u8, nat: bool) -> String {
    let (inside4, inside6, south4, south6) = if n == 1 {
        (
            "198.51.100.0/24",
            "2001:db8:100::/64",
            "198.51.100.1/24",
            "2001:db8:100::1/64",
        )
    } else {
        (
            "203.0.113.0/24",
            "2001:db8:113::/64",
            "203.0.113.1/24",
            "2001:db8:113::1/64",
        )
    };
    let behind_nat = nat && n == 1;
    let north4 = if behind_nat {
        "198.18.0.1/24".to_string()
    } else {
        format!("192.0.2.{n}/24")
    };
    let transport_route = if behind_nat {
        "dst = \"192.0.2.0/24\"\nport = \"north\"\nvia = \"198.18.0.254\"\n\n[[route]]\ndst = \"198.18.0.0/24\"\nport = \"north\""
    } else {
        "dst = \"192.0.2.0/24\"\nport = \"north\""
    };
    format!(
        r#"# Gateway {n} of the test bed with IKEv2: ports, addresses and routes; charon
# negotiates the SAs and policies (kernel-espgw, keying socket).
burst = 64

[[port]]
name = "south"
mac = "02:00:00:00:0{n}:01"
addresses = ["{south4}", "{south6}"]

[[port]]
name = "north"
mac = "02:00:00:00:0{n}:02"
addresses = ["{north4}", "2001:db8:2::{n}/64"]

[[route]]
{transport_route}

[[route]]
dst = "{inside4}"
port = "south"

[[route]]
dst = "{inside6}"
port = "south"
"#
    )
}

/// The keying socket of gateway `g`.
fn keying_path(g: &str) -> PathBuf {
    state(&format!("{g}-keying.sock"))
}

/// The kernel side of an espgw gateway: the transport address for charon's socket, ESP
/// kept from it, the next hop's link-layer address (the peer's, or the NAT box's).
fn host_stack(g: &str, nat: bool) -> Result<(), String> {
    let (me, hop, hop_mac) = match (g, nat) {
        ("gw1", false) => ("192.0.2.1/24", "192.0.2.2", "02:00:00:00:02:02"),
        ("gw1", true) => ("198.18.0.1/24", "198.18.0.254", NAT_INNER_MAC),
        (_, false) => ("192.0.2.2/24", "192.0.2.1", "02:00:00:00:01:02"),
        (_, true) => ("192.0.2.2/24", "192.0.2.100", NAT_OUTER_MAC),
    };
    in_ns(g, &["ip", "addr", "add", me, "dev", "north"])?;
    if g == "gw1" && nat {
        in_ns(
            g,
            &["ip", "route", "add", "192.0.2.0/24", "via", "198.18.0.254"],
        )?;
    }
    in_ns(
        g,
        &[
            "nft",
            "add table inet espgw-ike; \
             add chain inet espgw-ike input { type filter hook input priority 0; }; \
             add rule inet espgw-ike input meta l4proto esp drop; \
             add rule inet espgw-ike input udp dport 4500 @th,64,32 != 0 drop",
        ],
    )?;
    in_ns(
        g,
        &[
            "ip",
            "neigh",
            "replace",
            hop,
            "lladdr",
            hop_mac,
            "nud",
            "permanent",
            "dev",
            "north",
        ],
    )?;
    Ok(())
}

/// The NAT box between gateway 1 and the transport link: forwards, and masquerades what
/// leaves towards the transport link as 192.0.2.100.
fn nat_box() -> Result<(), String> {
    for (dev, addr) in [("inner", "198.18.0.254/24"), ("outer", "192.0.2.100/24")] {
        in_ns("nat", &["ip", "addr", "add", addr, "dev", dev])?;
        in_ns("nat", &["ip", "link", "set", dev, "up"])?;
    }
    sysctl("nat", "net.ipv4.ip_forward=1")?;
    sysctl("nat", "net.ipv6.conf.all.disable_ipv6=1")?;
    in_ns(
        "nat",
        &[
            "nft",
            "add table ip nat; \
             add chain ip nat post { type nat hook postrouting priority 100; }; \
             add rule ip nat post oifname outer masquerade",
        ],
    )?;
    Ok(())
}

/// The kernel-espgw plugin, built from this source tree when it is here (and installed
/// where charon loads plugins if it differs from what is there), else the installed one.
fn ensure_plugin() -> Result<(), String> {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../plugins/kernel-espgw/build.sh");
    if script.is_file() {
        ensure_packages(&[
            ("make", "make"),
            ("gcc", "gcc"),
            ("bzip2", "bzip2"),
            ("pkg-config", "pkg-config"),
        ])?;
        let out = state("plugin");
        println!("building the kernel-espgw plugin ({})", script.display());
        run_cmd(&["bash", &script.to_string_lossy(), &out.to_string_lossy()])?;
        let built = out.join("libstrongswan-kernel-espgw.so");
        let new = std::fs::read(&built).map_err(|e| format!("{}: {e}", built.display()))?;
        if std::fs::read(strongswan::PLUGIN).ok().as_deref() != Some(&new[..]) {
            std::fs::write(strongswan::PLUGIN, &new)
                .map_err(|e| format!("{}: {e}", strongswan::PLUGIN))?;
        }
        return Ok(());
    }
    if Path::new(strongswan::PLUGIN).is_file() {
        return Ok(());
    }
    Err(format!(
        "{} is missing: build it with plugins/kernel-espgw/build.sh from espgw's source tree \
         and copy it there",
        strongswan::PLUGIN
    ))
}

/// Starts the gateways with IKEv2 and waits until the tunnel is up and espgw holds the SAs.
pub(super) fn gateways(a: &UpArgs) -> Result<(), String> {
    ensure_packages(&[
        ("nft", "nftables"),
        ("/usr/lib/ipsec/charon", "strongswan-charon"),
        ("swanctl", "strongswan-swanctl"),
    ])?;
    ensure_plugin()?;
    let espgws: &[&str] = match a.peer {
        Peer::Espgw => &["gw1", "gw2"],
        Peer::Strongswan => &["gw1"],
    };
    if a.peer == Peer::Strongswan {
        if a.nat {
            return Err("--nat is for two espgw gateways (--peer espgw)".into());
        }
        kernel_gateways(false, &["gw2"])?;
    }
    if a.nat {
        nat_box()?;
    }
    let gws: Vec<(&str, String)> = espgws
        .iter()
        .map(|&g| (g, gateway_config(if g == "gw1" { 1 } else { 2 }, a.nat)))
        .collect();
    espgw_gateways(a, &gws, &|g| {
        vec![
            "--keying-socket".into(),
            keying_path(g).to_string_lossy().into(),
        ]
    })?;
    for g in espgws {
        host_stack(g, a.nat)?;
    }
    let state_dir = Path::new(STATE_DIR);
    // A fresh test CA for each test bed.
    let _ = std::fs::remove_dir_all(state_dir.join("ca"));
    let mut charons: Vec<Charon> = Vec::new();
    for (i, g) in ["gw1", "gw2"].into_iter().enumerate() {
        let socket = keying_path(g);
        let backend = if espgws.contains(&g) {
            Backend::Espgw {
                socket: &socket,
                replay_window: a
                    .replay_window
                    .unwrap_or(espgw_config::DEFAULT_REPLAY_WINDOW),
            }
        } else {
            Backend::Libipsec
        };
        let conn = Connection {
            encap: a.peer == Peer::Strongswan,
            // Gateway 1 traps: traffic before the SA exists starts the negotiation.
            trap: i == 0,
            v6: a.peer == Peer::Espgw,
            certs: a.auth == Auth::Cert,
            nat: a.nat,
        };
        charons.push(strongswan::start_charon(
            &ns(g),
            i,
            backend,
            &conn,
            state_dir,
        )?);
    }
    // The plugin connects to espgw once a second until it is there.
    for g in espgws {
        wait_keying(g, "sessions", 1)?;
    }
    strongswan::initiate(&charons[0])?;
    for c in &charons {
        strongswan::wait_installed(c)?;
    }
    for g in espgws {
        wait_keying(g, "negotiated_sas", 2)?;
    }
    Ok(())
}

/// Waits (10 s at most) until espgw `g`'s `show keying` counts at least `at_least` of
/// `what` (its charon connected: sessions; SAs installed: negotiated_sas).
fn wait_keying(g: &str, what: &str, at_least: u64) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let k = espgw::control_request(
            &control_path(g),
            &espgw_control::ControlRequest::Show("keying".into()),
        )
        .map_err(|e| e.to_string())?;
        if k[what].as_u64().unwrap_or(0) >= at_least {
            return Ok(());
        }
        if Instant::now() > deadline {
            return Err(format!("{g}: keying {what} below {at_least}: {k}"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// What the demonstration prints about the negotiated SAs of espgw `g`.
pub(super) fn describe(g: &str) -> Result<String, String> {
    let sas = espgw::control_request(
        &control_path(g),
        &espgw_control::ControlRequest::Show("sa".into()),
    )
    .map_err(|e| e.to_string())?;
    let mut lines = Vec::new();
    for s in sas.as_array().into_iter().flatten() {
        if s["source"] != "ike" {
            continue;
        }
        lines.push(format!(
            "{g}: negotiated {} SA spi {} reqid {} {}{} packets {} lifetime left {} s",
            s["direction"].as_str().unwrap_or("?"),
            s["spi"],
            s["reqid"],
            s["algorithm"].as_str().unwrap_or("?"),
            if s["udp_encap"] == true {
                " in UDP"
            } else {
                ""
            },
            s["packets"],
            s["lifetime_left_s"],
        ));
    }
    Ok(lines.join("\n"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The IKE gateways' configurations parse, keep the built-in ones' ports and routes,
    /// and hold no SA or policy.
    #[test]
    fn ike_configurations_hold_ports_and_routes_only() {
        for (n, builtin) in [
            (1, espgw_config::DEFAULT_CONFIG),
            (2, espgw_config::DEFAULT_PEER_CONFIG),
        ] {
            let text = gateway_config(n, false);
            let c = espgw_config::parse(&text, "ike", Some(espgw_config::Format::Native))
                .unwrap_or_else(|e| panic!("gw{n}: {e}"));
            let b = espgw_config::parse(builtin, "builtin", Some(espgw_config::Format::Native))
                .unwrap();
            assert!(c.sas.is_empty() && c.policies.is_empty());
            assert_eq!(c.ports.len(), b.ports.len());
            for (p, q) in c.ports.iter().zip(&b.ports) {
                assert_eq!((p.name.as_str(), p.mac), (q.name.as_str(), q.mac));
                assert_eq!(format!("{:?}", p.addresses), format!("{:?}", q.addresses));
            }
            assert_eq!(c.routes.len(), b.routes.len());
        }
        // Behind the NAT box: its own network and the transport link through the box.
        let c = espgw_config::parse(
            &gateway_config(1, true),
            "nat",
            Some(espgw_config::Format::Native),
        )
        .unwrap();
        assert_eq!(c.routes.len(), 4);
        assert!(c
            .routes
            .iter()
            .any(|r| r.via == Some("198.18.0.254".parse().unwrap())));
    }
}
