//! The ethtool feature commands on a real veth pair in a namespace of its own, checked
//! against what the `ethtool` program itself reports: veth has both receive VLAN offloads
//! on, and changeable; turning them off is seen by `ethtool -k`, and a second call finds
//! them off. Needs root (CI runs it as root).

use std::process::Command;

use espgw_io::ethtool::{feature, keep_vlan_tags_in_frames, turn_off, TurnedOff};

mod veth_ns;
use veth_ns::in_veth_namespace;

/// `ethtool -k`'s line for `name` in `ns`: "on", "off", "on [fixed]", ...
fn ethtool_k(ns: &str, dev: &str, name: &str) -> String {
    let out = Command::new("ip")
        .args(["netns", "exec", ns, "ethtool", "-k", dev])
        .output()
        .expect("ethtool runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    text.lines()
        .find_map(|l| l.trim().strip_prefix(&format!("{name}: ")))
        .unwrap_or_else(|| panic!("no {name} in {text}"))
        .to_string()
}

#[test]
fn vlan_offloads_are_turned_off_as_ethtool_sees_them() {
    in_veth_namespace("ethtooltest", &[], |ns| {
        // ethtool's names for the two: rx-vlan-offload is rx-vlan-hw-parse.
        assert_eq!(ethtool_k(ns, "xa", "rx-vlan-offload"), "on");
        assert_eq!(ethtool_k(ns, "xa", "rx-vlan-stag-hw-parse"), "on");
        let before = feature("xa", "rx-vlan-hw-parse").unwrap().unwrap();
        assert!(before.active && before.changeable, "{before:?}");
        // Loopback's fixed features are reported as such.
        assert_eq!(ethtool_k(ns, "lo", "rx-checksumming"), "on [fixed]");
        let lo = feature("lo", "rx-checksum").unwrap().unwrap();
        assert!(lo.active && !lo.changeable, "{lo:?}");
        assert_eq!(
            turn_off("lo", &["rx-checksum"]).unwrap(),
            [TurnedOff::StaysOn]
        );

        let done = keep_vlan_tags_in_frames("xa").unwrap();
        assert_eq!(
            done,
            [
                ("rx-vlan-hw-parse", TurnedOff::Now),
                ("rx-vlan-stag-hw-parse", TurnedOff::Now)
            ]
        );
        assert_eq!(ethtool_k(ns, "xa", "rx-vlan-offload"), "off");
        assert_eq!(ethtool_k(ns, "xa", "rx-vlan-stag-hw-parse"), "off");
        // Nothing else changed: the peer, and ea's transmit offload.
        assert_eq!(ethtool_k(ns, "xa", "tx-vlan-offload"), "on");
        assert_eq!(ethtool_k(ns, "xb", "rx-vlan-offload"), "on");
        let again = keep_vlan_tags_in_frames("xa").unwrap();
        assert!(
            again.iter().all(|(_, d)| *d == TurnedOff::AlreadyOff),
            "{again:?}"
        );
    });
}
