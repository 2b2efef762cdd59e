use super::*;

const CFG: &str = "\
# gateway 1
sp ipv4 out esp protect 1005 pri 1 dst 192.168.105.0/24 sport 0:65535 dport 0:65535
sp ipv4 in esp protect 1105 pri 1 dst 192.168.115.0/24 sport 0:65535 dport 0:65535
sp ipv6 out esp bypass pri 1 dst 2001:db8:5555::/48 \\
sport 0:65535 dport 0:65535
sa out 1005 aead_algo aes-128-gcm aead_key de:ad:be:ef:de:ad:be:ef:de:ad:be:ef:de:ad:be:ef:ca:fe:ba:be \\
mode ipv4-tunnel src 172.16.1.5 dst 172.16.2.5 esn 7 udp-encap
sa in 1105 aead_algo aes-256-gcm \\
aead_key 00:01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:0f:00:01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:0f:01:02:03:04 \\
mode transport
rt ipv4 dst 172.16.2.5/32 port 0
rt ipv6 dst 2001:db8::/32 port 1
neigh port 1 d0:43:1e:12:34:56
";

#[test]
fn an_overflowing_esn_names_esn() {
    let e = parse(
        "sa out 4097 aead_algo aes-128-gcm aead_key 00:01:02:03:04:05:06:07:08:09:0a:0b:\
         0c:0d:0e:0f:01:02:03:04 mode transport esn 99999999999999999999\n",
        "ep0.cfg",
    )
    .unwrap_err();
    assert_eq!((e.line, e.field.as_str()), (1, "esn"), "{e}");
    assert!(e.message.contains("not a sequence number"), "{e}");
    // Without a number, esn only turns ESN on.
    let c = parse(
        "sa out 4097 aead_algo aes-128-gcm aead_key 00:01:02:03:04:05:06:07:08:09:0a:0b:\
         0c:0d:0e:0f:01:02:03:04 esn mode transport\n",
        "ep0.cfg",
    )
    .unwrap();
    assert!(c.sas[0].esn);
}

#[test]
fn parses_secgw_syntax() {
    let c = parse(CFG, "ep0.cfg").unwrap();
    c.validate().unwrap();
    assert_eq!(c.policies.len(), 3);
    assert_eq!(c.policies[2].loc.line, 4);
    assert_eq!(c.policies[0].action, Action::Protect(1005));
    assert_eq!(c.policies[0].dst.len, 24);
    let sa = c.sa(Direction::Out, 1005).unwrap();
    assert_eq!(sa.enc_key[16..], [0xca, 0xfe, 0xba, 0xbe]);
    assert!(sa.esn);
    assert_eq!(sa.initial_seq, 7);
    assert_eq!(sa.udp_encap, Some(UdpEncap::default()));
    assert_eq!(
        sa.mode,
        Mode::Tunnel {
            local: "172.16.1.5".parse().unwrap(),
            remote: "172.16.2.5".parse().unwrap()
        }
    );
    let sa_in = c.sa(Direction::In, 1105).unwrap();
    assert_eq!(sa_in.suite, Suite::aes_gcm(32));
    assert_eq!(sa_in.mode, Mode::Transport);
    assert_eq!(c.ports.len(), 2);
    assert_eq!(c.neighbours[0].port, 1);
}

fn err(text: &str) -> ConfigError {
    parse(text, "t.cfg")
        .and_then(|c| c.validate().map(|_| c))
        .unwrap_err()
}

#[test]
fn errors_name_line_and_field() {
    let e = err("rt ipv4 dst 10.0.0.0/8 port 0\nsa out 5 aead_algo aes-128-gcm aead_key 00:11 mode transport\n");
    assert_eq!((e.line, e.field.as_str()), (2, "aead_key"));
    assert!(e.to_string().starts_with("t.cfg:2: aead_key:"), "{e}");
    let e = err("sp ipv4 out esp protect 9 dst 10.0.0.0/8\n");
    assert_eq!((e.line, e.field.as_str()), (1, "protect"));
    let e = err("sa out 5 cipher_algo aes-128-cbc cipher_key 00 auth_algo sha1-hmac auth_key 00 mode transport\n");
    assert_eq!((e.line, e.field.as_str()), (1, "cipher_key"));
    assert!(e.message.contains("needs 16 bytes"), "{e}");
    let e = err("sa out 5 cipher_algo aes-128-cbc cipher_key 00:01:02:03:04:05:06:07:08:09:0a:0b:0c:0d:0e:0f \\\n auth_algo sha256-hmac auth_key 00:11 mode transport\n");
    assert_eq!((e.line, e.field.as_str()), (2, "auth_key"));
    assert!(e.message.contains("32-byte key"), "{e}");
    let e = err("sa out 5 cipher_algo aes-128-xts cipher_key 00 auth_algo sha1-hmac auth_key 00 mode transport\n");
    assert_eq!(e.field, "cipher_algo");
    let e = err("sp ipv4 out esp bypass\\\n dst 10.0.0.0/33\n");
    assert_eq!((e.line, e.field.as_str()), (2, "dst"));
    let e = err("bogus line\n");
    assert_eq!((e.line, e.field.as_str()), (1, "rule"));
    let e = err("sa out 5 aead_algo aes-128-gcm aead_key 00:11:22:33:44:55:66:77:88:99:aa:bb:cc:dd:ee:ff:00:11:22:33 mode ipv4-tunnel\n");
    assert_eq!(e.field, "mode");
}
