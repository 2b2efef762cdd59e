use std::net::IpAddr;

use super::*;
use crate::frame::split;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn ts(from: &str, to: &str) -> TrafficSelector {
    TrafficSelector {
        proto: 0,
        from: ip(from),
        to: ip(to),
        from_port: 0,
        to_port: 65535,
    }
}

fn sa_id() -> SaId {
    SaId {
        src: ip("198.51.100.1"),
        dst: ip("198.51.100.2"),
        spi: 0xc001_d00d,
        proto: Proto::Esp,
    }
}

fn samples() -> Vec<Message> {
    let add = AddSa {
        id: sa_id(),
        reqid: 7,
        mode: SaMode::Tunnel,
        enc_alg: 20,
        enc_key: Zeroizing::new((0u8..20).collect()),
        int_alg: 0,
        int_key: Zeroizing::new(Vec::new()),
        replay_window: 1024,
        encap: Some((4500, 4501)),
        esn: true,
        inbound: true,
        lifetime: Lifetimes {
            soft_bytes: 1,
            hard_bytes: 2,
            soft_packets: 3,
            hard_packets: 4,
            soft_seconds: 5,
            hard_seconds: 6,
        },
        src_ts: vec![
            ts("192.0.2.0", "192.0.2.255"),
            ts("2001:db8::", "2001:db8::ffff"),
        ],
        dst_ts: vec![ts("203.0.113.0", "203.0.113.127")],
    };
    let pid = PolicyId {
        dir: PolicyDir::Fwd,
        src_ts: ts("192.0.2.0", "192.0.2.255"),
        dst_ts: TrafficSelector {
            proto: 17,
            from_port: 53,
            to_port: 53,
            ..ts("203.0.113.0", "203.0.113.127")
        },
    };
    vec![
        Message::Request(1, Request::Hello { version: 1 }),
        Message::Request(
            2,
            Request::GetSpi {
                src: ip("2001:db8::1"),
                dst: ip("2001:db8::2"),
                proto: Proto::Ah,
            },
        ),
        Message::Request(3, Request::AddSa(Box::new(add))),
        Message::Request(
            4,
            Request::UpdateSa(UpdateSa {
                id: sa_id(),
                new_src: ip("198.51.100.9"),
                new_dst: ip("198.51.100.2"),
                encap: None,
            }),
        ),
        Message::Request(5, Request::QuerySa(sa_id())),
        Message::Request(6, Request::DelSa(sa_id())),
        Message::Request(7, Request::FlushSas),
        Message::Request(
            8,
            Request::AddPolicy(AddPolicy {
                id: pid,
                kind: PolicyType::Ipsec,
                priority: 383_615,
                reqid: 7,
                endpoints: Some((ip("198.51.100.1"), ip("198.51.100.2"))),
                esp_spi: Some(0xc001_d00d),
                ah_spi: None,
            }),
        ),
        Message::Request(9, Request::QueryPolicy(pid)),
        Message::Request(
            10,
            Request::DelPolicy {
                id: pid,
                esp_spi: Some(0xc001_d00d),
                ah_spi: None,
            },
        ),
        Message::Request(11, Request::FlushPolicies),
        Message::Reply(
            5,
            Reply::Ok(ReplyData {
                version: None,
                spi: None,
                usage: Some((1500, 12)),
                idle_seconds: Some(3),
            }),
        ),
        Message::Reply(
            2,
            Reply::Ok(ReplyData {
                spi: Some(0xcafe_0001),
                ..ReplyData::default()
            }),
        ),
        Message::Reply(
            3,
            Reply::Error {
                code: ErrorCode::NotSupported,
                message: "ENCR_CAMELLIA_CBC is not implemented".into(),
            },
        ),
        Message::Event(Event::Expire {
            id: sa_id(),
            hard: true,
        }),
        Message::Event(Event::Acquire {
            reqid: 7,
            src: ts("192.0.2.10", "192.0.2.10"),
            dst: ts("203.0.113.5", "203.0.113.5"),
        }),
    ]
}

#[test]
fn every_message_round_trips() {
    for m in samples() {
        let bytes = m.encode().unwrap();
        let (f, used) = split(&bytes).unwrap().unwrap();
        assert_eq!(used, bytes.len());
        assert_eq!(Message::decode(&f).unwrap(), m);
    }
}

/// The layout of one frame, byte by byte, as docs/sa-contract.md gives it for the C side.
#[test]
fn a_query_sa_frame_is_laid_out_as_documented() {
    let bytes = Message::Request(5, Request::QuerySa(sa_id()))
        .encode()
        .unwrap();
    let expect: Vec<u8> = [
        &[0, 0, 0, 37][..],                    // length after this field
        &[1, kind::QUERY_SA, 0, 0],            // version, kind, flags
        &[0, 0, 0, 5],                         // request id
        &[0, 2, 0, 4, 198, 51, 100, 1],        // SRC
        &[0, 3, 0, 4, 198, 51, 100, 2],        // DST
        &[0, 4, 0, 4, 0xc0, 0x01, 0xd0, 0x0d], // SPI
        &[0, 5, 0, 1, 50],                     // PROTO = ESP
    ]
    .concat();
    assert_eq!(&bytes[..], &expect[..]);
}

#[test]
fn missing_and_malformed_fields_are_named() {
    let mut w = FrameWriter::new(kind::DEL_SA, 9);
    w.field(field::SRC, &[198, 51, 100, 1])
        .u32(field::SPI, 1)
        .u8(field::PROTO, 50);
    let b = w.finish().unwrap();
    let (f, _) = split(&b).unwrap().unwrap();
    assert_eq!(Message::decode(&f).unwrap_err(), FrameError::Missing("dst"));

    let mut w = FrameWriter::new(kind::DEL_SA, 9);
    w.field(field::SRC, &[198, 51, 100, 1])
        .field(field::DST, &[1, 2, 3])
        .u32(field::SPI, 1)
        .u8(field::PROTO, 50);
    let b = w.finish().unwrap();
    let (f, _) = split(&b).unwrap().unwrap();
    assert_eq!(Message::decode(&f).unwrap_err(), FrameError::Invalid("dst"));

    let mut w = FrameWriter::new(kind::ADD_SA, 9);
    w.field(field::SRC, &[198, 51, 100, 1])
        .field(field::DST, &[198, 51, 100, 2])
        .u32(field::SPI, 1)
        .u8(field::PROTO, 50)
        .u8(field::MODE, 2)
        .field(field::ENC_KEY, &[0u8; MAX_KEY + 1]);
    let b = w.finish().unwrap();
    let (f, _) = split(&b).unwrap().unwrap();
    assert_eq!(
        Message::decode(&f).unwrap_err(),
        FrameError::Invalid("enc_key")
    );

    let b = FrameWriter::new(0x33, 1).finish().unwrap();
    let (f, _) = split(&b).unwrap().unwrap();
    assert_eq!(
        Message::decode(&f).unwrap_err(),
        FrameError::UnknownKind(0x33)
    );
}

/// Random bytes and random corruptions of valid frames never panic; whatever decodes
/// encodes again to a frame that decodes to the same message.
#[test]
fn hostile_bytes_never_panic() {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::StdRng::seed_from_u64(16);
    let valid: Vec<Vec<u8>> = samples()
        .iter()
        .map(|m| m.encode().unwrap().to_vec())
        .collect();
    let mut decoded = 0;
    for i in 0..200_000 {
        let mut b = valid[i % valid.len()].clone();
        match i % 3 {
            0 => {
                for _ in 0..rng.gen_range(1..4) {
                    let at = rng.gen_range(0..b.len());
                    b[at] = rng.gen();
                }
            }
            1 => b.truncate(rng.gen_range(0..b.len())),
            _ => {
                let n = rng.gen_range(0..64);
                b = (0..n).map(|_| rng.gen()).collect();
            }
        }
        if let Ok(Some((f, _))) = split(&b) {
            if let Ok(m) = Message::decode(&f) {
                decoded += 1;
                let again = m.encode().unwrap();
                let (f2, _) = split(&again).unwrap().unwrap();
                assert_eq!(Message::decode(&f2).unwrap(), m);
            }
        }
    }
    assert!(decoded > 1000, "{decoded}");
}
