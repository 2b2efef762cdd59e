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
    // `esn 7` on an outbound SA: 7 is the first number sent (see `initial_seq`).
    assert_eq!(sa.initial_seq, 6);
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

/// An `sa` line with AES-CCM and `aead_key` of `n` bytes 0x10, 0x11, ...
fn ccm_line(bits: usize, n: usize) -> String {
    let key: Vec<String> = (0..n).map(|i| format!("{:02x}", 0x10 + i)).collect();
    format!(
        "sa out 4097 aead_algo aes-{bits}-ccm aead_key {} mode transport\n",
        key.join(":")
    )
}

/// ipsec-secgw writes an AES-CCM key with a 4-byte salt and DPDK's librte_ipsec uses its
/// first three bytes (tests/interop/test_dpdk_secgw.py runs the same line in both gateways):
/// the key material is the key and those three. RFC 4309's form, a 3-byte salt, is the same.
#[test]
fn an_aes_ccm_key_reads_as_ipsec_secgw_reads_it() {
    for bits in [128, 192, 256] {
        let key_len = bits / 8;
        let want: Vec<u8> = (0..key_len as u8 + 3).map(|i| 0x10 + i).collect();
        for n in [key_len + 4, key_len + 3] {
            let c = parse(&ccm_line(bits, n), "ep0.cfg").unwrap();
            let sa = c.sa(Direction::Out, 4097).unwrap();
            assert_eq!(sa.suite.enc.name(), format!("aes-{bits}-ccm"));
            assert_eq!(sa.enc_key[..], want[..], "aes-{bits}-ccm, {n} bytes");
        }
        for n in [key_len + 2, key_len + 5, key_len] {
            let e = err(&ccm_line(bits, n));
            assert_eq!((e.line, e.field.as_str()), (1, "aead_key"), "{e}");
            let both = format!("needs {} bytes", key_len + 4);
            assert!(e.message.contains(&both), "{e}");
            assert!(e.message.contains(&format!("or {}", key_len + 3)), "{e}");
            // The message names lengths, never key bytes.
            assert!(!e.to_string().contains("10:11"), "{e}");
        }
    }
}

/// ipsec-secgw's `esn N` as DPDK's librte_ipsec reads it (tests/interop/test_dpdk_secgw.py
/// holds espgw to it across 2^32): outbound, N is the first number sent (0 and no number mean
/// 1); inbound, the window starts with N at its top.
#[test]
fn esn_n_is_the_first_number_out_and_the_window_top_in() {
    let line = |dir: &str, esn: &str| {
        format!(
            "sa {dir} 4097 aead_algo aes-128-gcm aead_key 00:01:02:03:04:05:06:07:08:09:0a:0b:\
             0c:0d:0e:0f:01:02:03:04 mode transport {esn}\n"
        )
    };
    let initial = |dir: &str, esn: &str| {
        let c = parse(&line(dir, esn), "ep0.cfg").unwrap();
        (c.sas[0].esn, c.sas[0].initial_seq)
    };
    assert_eq!(initial("out", "esn 4294967276"), (true, 4294967275));
    assert_eq!(initial("in", "esn 4294967276"), (true, 4294967276));
    assert_eq!(initial("out", "esn 0"), (true, 0));
    assert_eq!(initial("out", "esn 1"), (true, 0));
    assert_eq!(initial("in", "esn 0"), (true, 0));
    assert_eq!(initial("out", "esn"), (true, 0));
    assert_eq!(initial("out", ""), (false, 0));
}

/// A `\` joins the two lines with nothing between them, as in ipsec-secgw's parser: DPDK's
/// example `ep0.cfg` splits keys mid-token (these lines are its layout, with SPIs above 255).
/// A space before the `\` or at the next line's start still separates; a line starting with
/// `#` inside a continuation is skipped.
#[test]
fn a_backslash_joins_lines_as_ipsec_secgw_joins_them() {
    let text = "\
sa out 1006 cipher_algo aes-128-cbc cipher_key a0:a0:a0:a0:a0:a0:a0:a0:a0:a0:a0:\\
a0:a0:a0:a0:a0 auth_algo sha1-hmac auth_key a0:a0:a0:a0:a0:a0:a0:a0:a0:a0:a0:\\
a0:a0:a0:a0:a0:a0:a0:a0:a0 mode ipv4-tunnel src 172.16.1.6 dst 172.16.2.6
sa out 1007 cipher_algo aes-128-cbc cipher_key b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0 \\
# a comment line inside the continuation
auth_algo sha1-hmac\\
 auth_key b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0:b0 mode transport
";
    let c = parse(text, "ep0.cfg").unwrap();
    let sa = c.sa(Direction::Out, 1006).unwrap();
    assert_eq!(sa.enc_key[..], [0xa0; 16]);
    assert_eq!(sa.auth_key[..], [0xa0; 20]);
    assert_eq!(sa.loc.line, 1);
    let sa = c.sa(Direction::Out, 1007).unwrap();
    assert_eq!(sa.enc_key[..], [0xb0; 16]);
    assert_eq!(sa.auth_key[..], [0xb0; 20]);
    assert_eq!(sa.mode, Mode::Transport);
    // A line of a `\` alone joins what is around it, as in ipsec-secgw.
    let c = parse(
        "sa out 1009 aead_algo aes-128-gcm aead_key 00:11:22:33:44:55:66:77:\\\n\\\n\
         88:99:aa:bb:cc:dd:ee:ff:00:11:22:33 mode transport\n",
        "ep0.cfg",
    )
    .unwrap();
    assert_eq!(c.sas[0].enc_key.len(), 20);
    // A split key that is still too short names the line its first half is on.
    let e = err("rt ipv4 dst 10.0.0.0/8 port 0\n\
                 sa out 1008 aead_algo aes-128-gcm aead_key 00:11:\\\n22:33 mode transport\n");
    assert_eq!((e.line, e.field.as_str()), (2, "aead_key"), "{e}");
}
