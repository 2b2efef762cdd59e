use super::*;

#[test]
fn default_configs_parse() {
    for (t, name) in [
        (crate::DEFAULT_CONFIG, "default"),
        (crate::DEFAULT_PEER_CONFIG, "peer"),
    ] {
        let c = crate::parse(t, name, None).unwrap();
        assert_eq!(c.ports.len(), 2);
        assert_eq!(c.sas.len(), 2);
        assert!(c.policies.len() >= 2);
    }
}

fn err(t: &str) -> ConfigError {
    crate::parse(t, "gw.toml", Some(crate::Format::Native)).unwrap_err()
}

#[test]
fn errors_name_line_and_field() {
    let base =
        "[[sa]]\ndirection = \"out\"\nspi = 1\nmode = \"transport\"\naead = \"aes-128-gcm\"\n";
    let e = err(&format!("{base}key = \"0x0011\"\n"));
    assert_eq!((e.line, e.field.as_str()), (6, "key"), "{e}");
    let e = err(&format!(
        "{base}key = \"0x00112233445566778899aabbccddeeff00112233\"\nicv = 10\n"
    ));
    assert_eq!((e.line, e.field.as_str()), (7, "icv"), "{e}");
    let e = err(&format!(
        "{base}key = \"0x00112233445566778899aabbccddeeff00112233\"\nreplay_windw = 10\n"
    ));
    assert_eq!((e.line, e.field.as_str()), (7, "replay_windw"), "{e}");
    assert!(e.message.contains("unknown field"), "{e}");
    let e = err(
        "[[policy]]\ndirection = \"out\"\ndst = \"10.0.0.0/8\"\naction = \"protect\"\nsa = 5\n",
    );
    assert_eq!((e.line, e.field.as_str()), (5, "sa"), "{e}");
    let e = err("[[route]]\ndst = \"10.0.0.0/8\"\nport = \"north\"\n");
    assert_eq!((e.line, e.field.as_str()), (3, "port"), "{e}");
}

fn gcm_sa(direction: &str, spi: u32, key_byte: u8) -> String {
    let key: String = std::iter::repeat_n(format!("{key_byte:02x}"), 20).collect();
    format!(
        "[[sa]]\ndirection = \"{direction}\"\nspi = {spi}\nmode = \"transport\"\n\
         aead = \"aes-128-gcm\"\nkey = \"0x{key}\"\n\n"
    )
}

#[test]
fn a_number_too_large_names_its_field_not_its_value() {
    let e = err(&format!(
        "{}initial_seq = 99999999999999999999\n",
        gcm_sa("out", 0x1000, 1)
    ));
    assert_eq!((e.line, e.field.as_str()), (8, "initial_seq"), "{e}");
}

fn policy(action: &str, dst: &str, priority: i64) -> String {
    let sa = if action == "protect" {
        "sa = 0x1000\n"
    } else {
        ""
    };
    format!(
        "[[policy]]\ndirection = \"out\"\npriority = {priority}\ndst = \"{dst}\"\n\
         action = \"{action}\"\n{sa}\n"
    )
}

#[test]
fn a_protect_policy_shadowed_by_bypass_or_discard_is_refused_naming_both() {
    let sa = gcm_sa("out", 0x1000, 1);
    for action in ["bypass", "discard"] {
        // The open policy first by priority, and first by position.
        for (open_prio, open_first) in [(10, false), (0, true)] {
            let (a, b) = (
                policy(action, "203.0.113.0/24", open_prio),
                policy("protect", "203.0.113.128/25", 0),
            );
            let text = if open_first {
                format!("{sa}{a}{b}")
            } else {
                format!("{sa}{b}{a}")
            };
            let e = err(&text);
            assert_eq!(e.field, "policy", "{e}");
            assert!(
                e.message.contains(&format!("the {action} policy at line")),
                "{e}"
            );
        }
    }
    // A narrower bypass, or one that comes after, leaves the protect policy its traffic.
    for text in [
        format!(
            "{sa}{}{}",
            policy("bypass", "203.0.113.0/25", 10),
            policy("protect", "203.0.113.0/24", 0)
        ),
        format!(
            "{sa}{}{}",
            policy("protect", "203.0.113.0/24", 0),
            policy("bypass", "203.0.113.0/24", 0)
        ),
    ] {
        crate::parse(&text, "gw.toml", None).unwrap();
    }
}

#[test]
fn reserved_spis_are_refused() {
    for spi in [0, 1, 255] {
        let e = err(&gcm_sa("out", spi, 1));
        // The SA's line (where its [[sa]] starts) and the field.
        assert_eq!((e.line, e.field.as_str()), (1, "spi"), "{e}");
        assert!(e.message.contains("reserved"), "{e}");
    }
    crate::parse(&gcm_sa("out", 256, 1), "gw.toml", None).unwrap();
}

#[test]
fn an_sa_name_given_twice_is_refused_naming_both_lines() {
    let named = |spi, k| gcm_sa("out", spi, k).replacen("[[sa]]\n", "[[sa]]\nname = \"t\"\n", 1);
    let e = err(&format!("{}{}", named(0x1000, 1), named(0x2000, 2)));
    assert_eq!((e.line, e.field.as_str()), (9, "name"), "{e}");
    assert!(e.message.contains("duplicate out SA name") && e.message.contains("line 1"));
    // The same name in the other direction is another SA (a pair is often named alike).
    let other = gcm_sa("in", 0x2000, 2).replacen("[[sa]]\n", "[[sa]]\nname = \"t\"\n", 1);
    crate::parse(&format!("{}{}", named(0x1000, 1), other), "gw.toml", None).unwrap();
}

#[test]
fn one_key_on_two_sas_is_refused_naming_both() {
    for (d1, d2) in [("out", "out"), ("out", "in"), ("in", "in")] {
        let e = err(&format!(
            "{}{}",
            gcm_sa(d1, 0x1000, 7),
            gcm_sa(d2, 0x2000, 7)
        ));
        assert_eq!((e.line, e.field.as_str()), (8, "key"), "{e}");
        assert!(e.message.contains("0x00001000") && e.message.contains("0x00002000"));
        assert!(e.message.contains("line 1"), "{e}");
        assert!(
            !e.message.contains("0707"),
            "no key bytes in the message: {e}"
        );
    }
    crate::parse(
        &format!("{}{}", gcm_sa("out", 0x1000, 7), gcm_sa("in", 0x2000, 8)),
        "gw.toml",
        None,
    )
    .unwrap();
}

#[test]
fn duplicate_spis_name_the_first_sa() {
    let e = err(&format!(
        "{}{}",
        gcm_sa("out", 0x1000, 7),
        gcm_sa("out", 0x1000, 8)
    ));
    assert_eq!((e.line, e.field.as_str()), (8, "spi"), "{e}");
    assert!(e.message.contains("at line 1"), "{e}");
}

#[test]
fn ah_sas_and_bundles() {
    let t = r#"
[[sa]]
direction = "out"
spi = 0x101
mode = "transport"
cipher = "aes-128-cbc"
cipher_key = "0x000102030405060708090a0b0c0d0e0f"
integrity = "hmac-sha256"
integrity_key = "0x000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f"

[[sa]]
direction = "out"
spi = 0x102
mode = "transport"
protocol = "ah"
integrity = "aes-128-gmac"
integrity_key = "0x000102030405060708090a0b0c0d0e0f01020304"

[[policy]]
direction = "out"
src = "192.0.2.1/32"
dst = "192.0.2.2/32"
action = "protect"
sa = 0x101
ah_sa = 0x102
"#;
    let c = crate::parse(t, "x.toml", None).unwrap();
    assert_eq!(
        c.policies[0].action,
        Action::Bundle {
            esp: 0x101,
            ah: 0x102
        }
    );
    assert_eq!(
        c.sas[1].suite.integ,
        espgw_crypto::Integrity::AesGmac { key_len: 16 }
    );
    // The bundle's order is fixed: sa names ESP, ah_sa names AH.
    let e = crate::parse(
        &t.replace("sa = 0x101\nah_sa = 0x102", "sa = 0x102\nah_sa = 0x101"),
        "x.toml",
        None,
    )
    .unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (25, "ah_sa"));
    let e = crate::parse(&t.replace("ah_sa = 0x102", "ah_sa = 0x109"), "x.toml", None).unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (25, "ah_sa"));
    let e = crate::parse(&t.replace("\"protect\"", "\"bypass\""), "x.toml", None).unwrap_err();
    assert_eq!(e.field, "ah_sa");
    // GMAC is named as an ESP cipher, not as ESP integrity.
    let esp_gmac = t
        .replace(
            "integrity = \"hmac-sha256\"",
            "integrity = \"aes-128-gmac\"",
        )
        .replacen(
            "0x000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f",
            "0x000102030405060708090a0b0c0d0e0f01020304",
            1,
        );
    let e = crate::parse(&esp_gmac, "x.toml", None).unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (2, "algorithm"));
    assert!(e.message.contains("GMAC integrity is for AH"), "{e}");
}

/// Two outbound tunnel SAs and an AH SA between the same gateways, and one outbound policy
/// sealing with a per-worker set of the first two.
const PER_WORKER: &str = r#"
[[sa]]
name = "w0"
direction = "out"
spi = 0x1001
mode = "ipv4-tunnel"
local = "192.0.2.1"
remote = "192.0.2.2"
aead = "aes-128-gcm"
key = "0x000102030405060708090a0b0c0d0e0fcafe0001"

[[sa]]
name = "w1"
direction = "out"
spi = 0x1002
mode = "ipv4-tunnel"
local = "192.0.2.1"
remote = "192.0.2.2"
aead = "aes-128-gcm"
key = "0x101112131415161718191a1b1c1d1e1fcafe0002"

[[sa]]
name = "ah"
direction = "out"
spi = 0x1003
mode = "ipv4-tunnel"
local = "192.0.2.1"
remote = "192.0.2.2"
protocol = "ah"
integrity = "hmac-sha256"
integrity_key = "0x202122232425262728292a2b2c2d2e2f202122232425262728292a2b2c2d2e2f"

[[policy]]
direction = "out"
src = "198.51.100.0/24"
dst = "203.0.113.0/24"
action = "protect"
per_worker_sas = ["w0", 0x1002]
"#;

#[test]
fn a_per_worker_set_names_its_esp_sas_in_order() {
    let c = crate::parse(PER_WORKER, "x.toml", None).unwrap();
    assert_eq!(c.policies[0].per_worker_sas, vec![0x1001, 0x1002]);
    assert_eq!(c.policies[0].action, Action::Protect(0x1001));
    let c = crate::parse(
        &PER_WORKER.replace("[\"w0\", 0x1002]", "[\"w1\", \"w0\"]"),
        "x.toml",
        None,
    )
    .unwrap();
    assert_eq!(c.policies[0].per_worker_sas, vec![0x1002, 0x1001]);
    assert_eq!(c.policies[0].action, Action::Protect(0x1002));
}

#[test]
fn a_bad_per_worker_set_is_refused_naming_its_line() {
    let line = 38; // `per_worker_sas = [...]`
    let bad = |from: &str, to: &str, why: &str| {
        let t = PER_WORKER.replace(from, to);
        let e = crate::parse(&t, "gw.toml", None).unwrap_err();
        assert_eq!(e.field, "per_worker_sas", "{why}: {e}");
        assert!(e.line >= line - 1 && e.line <= line, "{why}: {e}");
        e
    };
    let e = bad("[\"w0\", 0x1002]", "[\"w0\"]", "one SA");
    assert!(e.message.contains("2 to"), "{e}");
    let e = bad("[\"w0\", 0x1002]", "[\"w0\", \"w0\"]", "listed twice");
    assert!(e.message.contains("twice"), "{e}");
    let e = bad("[\"w0\", 0x1002]", "[\"w0\", \"nope\"]", "unknown");
    assert!(e.message.contains("no out SA"), "{e}");
    let e = bad("[\"w0\", 0x1002]", "[\"w0\", \"ah\"]", "AH");
    assert!(e.message.contains("ESP"), "{e}");
    bad(
        "action = \"protect\"\nper",
        "action = \"bypass\"\nper",
        "not protect",
    );
    bad(
        "action = \"protect\"\nper",
        "action = \"protect\"\nsa = \"w0\"\nper",
        "with sa",
    );
    // Every SA of the set must take the packet the same way.
    let moved = PER_WORKER.replacen("remote = \"192.0.2.2\"", "remote = \"192.0.2.3\"", 2);
    let moved = moved.replacen("remote = \"192.0.2.3\"", "remote = \"192.0.2.2\"", 1);
    let e = crate::parse(&moved, "gw.toml", None).unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (line, "per_worker_sas"), "{e}");
    assert!(e.message.contains("tunnel endpoints"), "{e}");
    // Inbound, the set names inbound SAs.
    let e = crate::parse(
        &PER_WORKER.replace("direction = \"out\"\nsrc", "direction = \"in\"\nsrc"),
        "gw.toml",
        None,
    )
    .unwrap_err();
    assert_eq!(e.field, "per_worker_sas", "{e}");
    assert!(e.message.contains("no in SA"), "{e}");
}
