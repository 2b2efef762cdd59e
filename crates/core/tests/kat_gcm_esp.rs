//! Known-answer tests: the complete ESP packets of draft-mcgrew-gcm-test-01 §4, decrypted
//! and re-encrypted byte for byte, with every crypto provider available here. The ESN
//! cases (8-octet sequence numbers) put the high half into the AAD.

mod common;

use common::*;
use espgw_config::{Config, Direction, Mode, DEFAULT_BURST};
use espgw_core::{esp_in, esp_out};
use espgw_wire::esp;

struct Case {
    key: Vec<u8>,
    spi: u32,
    seq: u64,
    esn: bool,
    nonce: Vec<u8>,
    plaintext: Vec<u8>,
    packet: Vec<u8>,
}

fn cases() -> Vec<Case> {
    let text = include_str!("../../../tests/vectors/draft-mcgrew-gcm-test-01.txt");
    let mut out = Vec::new();
    for block in text.split("\n\n") {
        let field = |name: &str| {
            block
                .lines()
                .find_map(|l| {
                    l.strip_prefix(name)
                        .and_then(|r| r.trim_start().strip_prefix('='))
                })
                .map(|v| v.trim().to_string())
        };
        let Some(key) = field("key") else { continue };
        let seq_hex = field("seq").unwrap();
        let seq = hex(&seq_hex);
        out.push(Case {
            key: hex(&key),
            spi: u32::from_str_radix(&field("spi").unwrap(), 16).unwrap(),
            esn: seq.len() == 8,
            seq: u64::from_str_radix(&seq_hex, 16).unwrap(),
            nonce: hex(&field("nonce").unwrap()),
            plaintext: hex(&field("plaintext").unwrap()),
            packet: hex(&field("packet").unwrap()),
        });
    }
    out
}

#[test]
fn all_gcm_cases_present() {
    let c = cases();
    assert_eq!(c.len(), 16);
    assert_eq!(c.iter().filter(|c| c.esn).count(), 11);
    assert!(c.iter().any(|c| c.key.len() == 24) && c.iter().any(|c| c.key.len() == 32));
}

#[test]
fn decrypt_and_reencrypt_byte_for_byte() {
    for provider in espgw_crypto::all_providers() {
        for (i, c) in cases().iter().enumerate() {
            let mut salt = [0u8; 4];
            salt.copy_from_slice(&c.nonce[..4]);
            // The case's key opens and seals: as two gateways, since one gateway refuses
            // one key on two SAs.
            let gateway = |dir| {
                let cfg = Config {
                    burst: DEFAULT_BURST,
                    sas: vec![sa(c.spi, dir, Mode::Transport, &c.key, salt, c.esn)],
                    ..Config::default()
                };
                tables(&cfg, provider.as_ref())
            };
            let (t_in, t_out) = (gateway(Direction::In), gateway(Direction::Out));
            let (sa_in, sa_out) = (&t_in.sas[0], &t_out.sas[0]);
            let who = format!("case {} with {}", i + 1, provider.name());

            // Wire fields: SPI, the low half of the sequence number, the IV.
            let e = esp::EspPacket::new_checked(&c.packet[..]).unwrap();
            assert_eq!(e.spi(), c.spi, "{who}");
            assert_eq!(e.seq(), c.seq as u32, "{who}");
            assert_eq!(&c.packet[8..16], &c.nonce[4..], "{who}: IV");

            // Decrypt.
            let mut buf = c.packet.clone();
            let n = esp_in::open_packet(sa_in, c.seq, &mut buf)
                .unwrap_or_else(|r| panic!("{who}: {r:?}"));
            assert_eq!(&buf[16..16 + n], &c.plaintext[..], "{who}: plaintext");

            // Our trailer for this payload is the one the case carries.
            let t = esp::parse_trailer(&c.plaintext).unwrap();
            let pad = esp::pad_len(t.payload_len, 4);
            let mut trailer = vec![0u8; pad + 2];
            esp::emit_trailer(&mut trailer, t.next_header).unwrap();
            assert_eq!(
                &c.plaintext[t.payload_len..],
                &trailer[..],
                "{who}: trailer"
            );

            // Re-encrypt (the byte-for-byte seal with the case's IV is in the crypto
            // crate's esp_kat, which can choose the IV): our IV is the sequence number,
            // and the packet opens to the case's plaintext again.
            let mut out = vec![0u8; c.packet.len()];
            out[16..16 + c.plaintext.len()].copy_from_slice(&c.plaintext);
            esp_out::seal_packet(sa_out, c.seq, &mut out).unwrap();
            assert_eq!(&out[..8], &c.packet[..8], "{who}: header");
            assert_eq!(&out[8..16], &c.seq.to_be_bytes(), "{who}: IV");
            let n = esp_in::open_packet(sa_in, c.seq, &mut out).unwrap();
            assert_eq!(&out[16..16 + n], &c.plaintext[..], "{who}: round trip");

            // A wrong ESN high half (it is only in the AAD) fails authentication.
            if c.esn {
                let mut buf = c.packet.clone();
                assert!(
                    esp_in::open_packet(sa_in, c.seq ^ (1 << 32), &mut buf).is_err(),
                    "{who}"
                );
                assert!(
                    buf[16..buf.len() - 16].iter().all(|&b| b == 0),
                    "{who}: failed text is wiped"
                );
            }
        }
    }
}
