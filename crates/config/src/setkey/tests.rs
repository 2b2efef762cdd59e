use super::*;

const SCRIPT: &str = r#"#!/usr/sbin/setkey -f
flush;
spdflush;
# gateway 1
add 192.0.2.1 192.0.2.2 esp 0x1000 -m tunnel -r 2048
-E aes-gcm-16 0x00112233445566778899aabbccddeeff01020304;
add 192.0.2.2 192.0.2.1 esp 0x2000 -m tunnel
-E aes-gcm-16 0xffeeddccbbaa99887766554433221100a1a2a3a4;
spdadd 198.51.100.0/24 203.0.113.0/24 any -P out ipsec
esp/tunnel/192.0.2.1-192.0.2.2/require;
spdadd 203.0.113.0/24 198.51.100.0/24 any -P in ipsec
esp/tunnel/192.0.2.2-192.0.2.1/require;
spdadd 198.51.100.7 203.0.113.9[53] udp -P out none;
"#;

#[test]
fn parses_classic_script() {
    let c = parse(SCRIPT, "gw.conf").unwrap();
    c.validate().unwrap();
    let out = c.sa(Direction::Out, 0x1000).unwrap();
    assert_eq!(out.replay_window, 2048);
    assert_eq!(out.enc_key[out.enc_key.len() - 4..], [1, 2, 3, 4]);
    assert_eq!(
        out.mode,
        Mode::Tunnel {
            local: "192.0.2.1".parse().unwrap(),
            remote: "192.0.2.2".parse().unwrap()
        }
    );
    let inb = c.sa(Direction::In, 0x2000).unwrap();
    assert_eq!(inb.loc.line, 7);
    assert_eq!(
        inb.mode,
        Mode::Tunnel {
            local: "192.0.2.1".parse().unwrap(),
            remote: "192.0.2.2".parse().unwrap()
        }
    );
    assert_eq!(c.policies.len(), 3);
    assert_eq!(c.policies[0].action, Action::Protect(0x1000));
    assert_eq!(c.policies[1].direction, Direction::In);
    assert_eq!(c.policies[2].action, Action::Bypass);
    assert_eq!(c.policies[2].dport, Range::new(53, 53));
    assert_eq!(c.policies[2].proto, Range::new(17, 17));
    // Routes: the tunnel's far end and the bypassed host north, the inbound
    // destination south.
    let routes: Vec<(String, usize)> = c
        .routes
        .iter()
        .map(|r| (r.dst.to_string(), r.port))
        .collect();
    assert_eq!(
        routes,
        vec![
            ("192.0.2.2/32".to_string(), 1),
            ("198.51.100.0/24".to_string(), 0),
            ("203.0.113.9/32".to_string(), 1)
        ]
    );
}

#[test]
fn an_sa_added_twice_is_named_as_a_duplicate() {
    let t = "add 192.0.2.1 192.0.2.2 esp 0x1000 -E aes-gcm-16 0x000102030405060708090a0b0c0d0e0f10111213;\n\
             add 192.0.2.1 192.0.2.2 esp 0x1000 -E aes-gcm-16 0x0f0e0d0c0b0a09080706050403020100a0b0c0d0;\n\
             spdadd 192.0.2.1 192.0.2.2 any -P out ipsec esp/transport//require;\n";
    let e = parse(t, "t").unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (2, "spi"), "{e}");
    assert!(
        e.message.contains("duplicate SA 0x1000") && e.message.contains("line 1"),
        "{e}"
    );
    assert!(!e.message.contains("used by no policy"), "{e}");
    assert!(!e.message.contains("0f0e0d"), "no key bytes: {e}");
}

#[test]
fn transport_mode_resolves_by_address() {
    let t = "add 2001:db8::1 2001:db8::2 esp 0x10 -E aes-gcm-16 0x000102030405060708090a0b0c0d0e0f10111213;\n\
             spdadd 2001:db8::1 2001:db8::2 any -P out ipsec esp/transport//require;\n";
    let c = parse(t, "t").unwrap();
    assert_eq!(c.sas[0].mode, Mode::Transport);
    assert_eq!(c.sas[0].direction, Direction::Out);
}

#[test]
fn errors() {
    let e = parse("add 192.0.2.1 192.0.2.2 esp 0x10 -E 3des-cbc 0x00;\n", "x").unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (1, "-E key"));
    assert!(e.message.contains("needs 24 bytes"), "{e}");
    let e = parse(
        "add 192.0.2.1 192.0.2.2 esp 0x10 -E des-cbc 0x0011223344556677;\n",
        "x",
    )
    .unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (1, "-E"));
    let e = parse("add 192.0.2.1 192.0.2.2 esp 0x10 -E aes-cbc 0x00112233445566778899aabbccddeeff\n -A hmac-sha256 0x0011;\n", "x").unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (2, "-A key"));
    assert!(e.message.contains("32-byte key"), "{e}");
    let e = parse(
        "add 192.0.2.1 192.0.2.2 esp 0x10\n  -E aes-gcm-16 0x0011;\n",
        "x",
    )
    .unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (2, "-E key"));
    let e = parse("spdadd 10.0.0.0/8 10.1.0.0/16 any -P out ipsec\n esp/tunnel/192.0.2.1-192.0.2.2/require;\n", "x").unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (1, "policy"));
    let e = parse("add 192.0.2.1 192.0.2.2 esp 0x10 -E aes-gcm-16 0x000102030405060708090a0b0c0d0e0f10111213;\n", "x").unwrap_err();
    assert_eq!(e.field, "add");
    let e = parse("dump;", "x").unwrap_err();
    assert_eq!(e.field, "command");
}

#[test]
fn ah_and_bundles() {
    let t = "add 192.0.2.1 192.0.2.2 ah 0x120 -A hmac-sha256 0x000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f;\n\
             add 192.0.2.1 192.0.2.2 esp 0x121 -E aes-cbc 0x000102030405060708090a0b0c0d0e0f -A hmac-sha1 0x0001020304050607080900010203040506070809;\n\
             add 192.0.2.2 192.0.2.1 ah 0x130 -A aes-xcbc-mac 0x000102030405060708090a0b0c0d0e0f;\n\
             spdadd 192.0.2.1 192.0.2.2 any -P out ipsec esp/transport//require ah/transport//require;\n\
             spdadd 192.0.2.2 192.0.2.1 icmp -P in ipsec ah/transport//require;\n";
    let c = parse(t, "x").unwrap();
    c.validate().unwrap();
    assert_eq!(
        c.policies[0].action,
        Action::Bundle {
            esp: 0x121,
            ah: 0x120
        }
    );
    assert_eq!(c.policies[1].action, Action::Protect(0x130));
    let ah = c.sa(Direction::Out, 0x120).unwrap();
    assert_eq!(
        (ah.proto, ah.suite.integ),
        (SaProto::Ah, Integrity::HmacSha256_128)
    );
    assert_eq!(ah.mode, Mode::Transport);
    assert_eq!(c.sa(Direction::In, 0x130).unwrap().proto, SaProto::Ah);
    // AH does not encrypt; a bundle is ESP inside AH; three templates are too many.
    let e = parse("add 192.0.2.1 192.0.2.2 ah 0x120 -E aes-cbc 0x00;\n", "x").unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (1, "-E"));
    let e = parse("add 192.0.2.1 192.0.2.2 ah 0x120;\n", "x").unwrap_err();
    assert_eq!(e.field, "-A");
    let swapped = t.replace(
        "esp/transport//require ah/transport//require",
        "ah/transport//require esp/transport//require",
    );
    let e = parse(&swapped, "x").unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (4, "ipsec rule"));
    let three = t.replace(
        "ah/transport//require;\n",
        "ah/transport//require ah/transport//require;\n",
    );
    let e = parse(&three, "x").unwrap_err();
    assert_eq!(e.field, "ipsec rule");
    // A template's protocol must find an SA of that protocol.
    let e = parse(
        &t.replace("icmp -P in ipsec ah", "icmp -P in ipsec esp"),
        "x",
    )
    .unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (5, "policy"));
    assert!(e.message.contains("no SA for esp/transport"), "{e}");
}

#[test]
fn tokens_are_words_quoted_strings_and_semicolons() {
    let toks = tokenize(
        "add 192.0.2.1 192.0.2.2 esp 0x1000 -E aes-gcm-16 \"a key; # with\";# comment\n\
         spdadd\t198.51.100.0/24 any;x \"open\nlast",
    );
    let got: Vec<(&str, usize)> = toks.iter().map(|t| (t.s, t.line)).collect();
    assert_eq!(
        got,
        [
            ("add", 1),
            ("192.0.2.1", 1),
            ("192.0.2.2", 1),
            ("esp", 1),
            ("0x1000", 1),
            ("-E", 1),
            ("aes-gcm-16", 1),
            ("\"a key; # with\"", 1),
            (";", 1),
            ("spdadd", 2),
            ("198.51.100.0/24", 2),
            ("any", 2),
            (";", 2),
            ("x", 2),
            ("\"open", 2),
            ("last", 3),
        ]
    );
}
