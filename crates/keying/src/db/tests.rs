use std::net::IpAddr;
use std::time::{Duration, Instant};

use espgw_config::{Action, Direction, Format, Mode};
use zeroize::Zeroizing;

use super::*;
use crate::message::{Lifetimes, PolicyType, SaMode};

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn net(from: &str, to: &str) -> TrafficSelector {
    TrafficSelector {
        proto: 0,
        from: ip(from),
        to: ip(to),
        from_port: 0,
        to_port: 65535,
    }
}

/// An AES-128-GCM tunnel SA between the two test-bed gateways, as charon hands it over.
fn gcm_sa(spi: u32, inbound: bool) -> AddSa {
    let (src, dst) = if inbound {
        ("198.51.100.2", "198.51.100.1")
    } else {
        ("198.51.100.1", "198.51.100.2")
    };
    AddSa {
        id: SaId {
            src: ip(src),
            dst: ip(dst),
            spi,
            proto: Proto::Esp,
        },
        reqid: 1,
        mode: SaMode::Tunnel,
        enc_alg: 20,
        enc_key: Zeroizing::new(vec![0x11; 20]),
        int_alg: 0,
        int_key: Zeroizing::new(Vec::new()),
        replay_window: 128,
        encap: None,
        esn: true,
        inbound,
        lifetime: Lifetimes {
            soft_seconds: 10,
            hard_seconds: 20,
            ..Lifetimes::default()
        },
        src_ts: Vec::new(),
        dst_ts: Vec::new(),
    }
}

fn policy(dir: PolicyDir, spi: Option<u32>) -> AddPolicy {
    let (s, d) = match dir {
        PolicyDir::Out => (
            net("192.0.2.0", "192.0.2.255"),
            net("203.0.113.0", "203.0.113.255"),
        ),
        _ => (
            net("203.0.113.0", "203.0.113.255"),
            net("192.0.2.0", "192.0.2.255"),
        ),
    };
    AddPolicy {
        id: PolicyId {
            dir,
            src_ts: s,
            dst_ts: d,
        },
        kind: PolicyType::Ipsec,
        priority: 383_615,
        reqid: 1,
        endpoints: Some((ip("198.51.100.1"), ip("198.51.100.2"))),
        esp_spi: spi,
        ah_spi: None,
    }
}

fn base_config() -> Config {
    espgw_config::parse(
        espgw_config::DEFAULT_CONFIG,
        "default",
        Some(Format::Native),
    )
    .unwrap()
}

#[test]
fn negotiated_sas_and_policies_merge_into_a_valid_configuration() {
    let now = Instant::now();
    let mut db = KeyingDb::default();
    let mut next = 7u32;
    let spi_in = db
        .get_spi(
            now,
            |_| false,
            || {
                next += 1;
                next
            },
        )
        .unwrap();
    assert!(spi_in >= 0xc000_0000);
    db.add_sa(gcm_sa(spi_in, true), now, |_, _| false).unwrap();
    db.add_sa(gcm_sa(0xc0ffee01, false), now, |_, _| false)
        .unwrap();
    db.add_policy(policy(PolicyDir::Out, Some(0xc0ffee01)))
        .unwrap();
    db.add_policy(policy(PolicyDir::In, Some(spi_in))).unwrap();
    db.add_policy(policy(PolicyDir::Fwd, Some(spi_in))).unwrap();

    let mut cfg = base_config();
    let (static_sas, static_rules) = (cfg.sas.len(), cfg.policies.len());
    db.merge_into(&mut cfg);
    cfg.validate().unwrap();
    assert_eq!(cfg.sas.len(), static_sas + 2);
    // fwd adds nothing beside an identical in.
    assert_eq!(cfg.policies.len(), static_rules + 2);
    let out = cfg.sa(Direction::Out, 0xc0ffee01).unwrap();
    assert!(is_negotiated(out));
    assert_eq!(
        out.mode,
        Mode::Tunnel {
            local: ip("198.51.100.1"),
            remote: ip("198.51.100.2")
        }
    );
    assert_eq!(out.suite.to_string(), "aes-128-gcm");
    assert_eq!(out.replay_window, 0);
    let inb = cfg.sa(Direction::In, spi_in).unwrap();
    assert_eq!(
        inb.mode,
        Mode::Tunnel {
            local: ip("198.51.100.1"),
            remote: ip("198.51.100.2")
        }
    );
    assert_eq!((inb.replay_window, inb.esn), (128, true));
    let rule = cfg
        .policies
        .iter()
        .rev()
        .find(|p| p.direction == Direction::Out)
        .unwrap();
    assert_eq!(rule.action, Action::Protect(0xc0ffee01));
    assert_eq!(rule.priority, -1 - 383_615);
    assert_eq!(rule.src.to_string(), "192.0.2.0/24");
}

#[test]
fn a_trap_policy_discards_until_its_sa_exists_and_references_are_counted() {
    let now = Instant::now();
    let mut db = KeyingDb::default();
    db.add_policy(policy(PolicyDir::Out, None)).unwrap();
    let mut cfg = base_config();
    db.merge_into(&mut cfg);
    assert_eq!(
        cfg.policies.last().unwrap().action,
        Action::Acquire { reqid: 1 }
    );

    // Rekey: charon re-adds the policy with the new SA, then deletes one reference.
    db.add_sa(gcm_sa(0xc0ffee02, false), now, |_, _| false)
        .unwrap();
    db.add_policy(policy(PolicyDir::Out, Some(0xc0ffee02)))
        .unwrap();
    let mut cfg = base_config();
    db.merge_into(&mut cfg);
    cfg.validate().unwrap();
    assert_eq!(
        cfg.policies.last().unwrap().action,
        Action::Protect(0xc0ffee02)
    );
    let id = policy(PolicyDir::Out, None).id;
    assert_eq!(db.del_policy(&id, None, None), Ok(false));
    assert!(db.has_policy(&id));
    assert_eq!(db.del_policy(&id, None, None), Ok(true));
    assert!(!db.has_policy(&id));
    assert!(matches!(
        db.del_policy(&id, None, None),
        Err(KeyingError::NotFound(_))
    ));
}

#[test]
fn refusals_name_the_reason() {
    let now = Instant::now();
    let mut db = KeyingDb::default();
    db.add_sa(gcm_sa(0xc0ffee03, false), now, |_, _| false)
        .unwrap();
    assert!(matches!(
        db.add_sa(gcm_sa(0xc0ffee03, false), now, |_, _| false),
        Err(KeyingError::Exists(_))
    ));
    // The same SPI outbound to another peer: espgw names SAs by direction and SPI.
    let mut other = gcm_sa(0xc0ffee03, false);
    other.id.dst = ip("198.51.100.7");
    assert!(matches!(
        db.add_sa(other, now, |_, _| false),
        Err(KeyingError::Unsupported(_))
    ));
    // A static SA's SPI.
    assert!(matches!(
        db.add_sa(gcm_sa(0xc0ffee04, true), now, |d, s| d == Direction::In
            && s == 0xc0ffee04),
        Err(KeyingError::Unsupported(_))
    ));
    let mut camellia = gcm_sa(0xc0ffee05, true);
    camellia.enc_alg = 23;
    let e = db.add_sa(camellia, now, |_, _| false).unwrap_err();
    assert_eq!(e.code(), ErrorCode::NotSupported);
    assert!(e.to_string().contains("23"), "{e}");
    let mut short = gcm_sa(0xc0ffee06, true);
    short.enc_key = Zeroizing::new(vec![1; 16]);
    assert!(db.add_sa(short, now, |_, _| false).is_err());
    let mut icmp = policy(PolicyDir::Out, None);
    icmp.id.src_ts.proto = 1;
    icmp.id.src_ts.from_port = 8 << 8;
    icmp.id.src_ts.to_port = 8 << 8;
    assert!(matches!(
        db.add_policy(icmp),
        Err(KeyingError::Unsupported(_))
    ));
    assert_eq!(db.len(), (1, 0));
}

#[test]
fn update_moves_an_sa_and_a_refused_update_changes_nothing() {
    let now = Instant::now();
    let mut db = KeyingDb::default();
    let sa = gcm_sa(0xc0ffee07, false);
    let id = sa.id;
    db.add_sa(sa, now, |_, _| false).unwrap();
    let moved = UpdateSa {
        id,
        new_src: ip("198.51.100.1"),
        new_dst: ip("203.0.113.50"),
        encap: Some((4500, 4500)),
    };
    db.update_sa(&moved).unwrap();
    assert!(db.sa(&id).is_none());
    let new_id = SaId {
        dst: ip("203.0.113.50"),
        ..id
    };
    assert_eq!(db.sa(&new_id).unwrap().add.encap, Some((4500, 4500)));
    let bad = UpdateSa {
        id: new_id,
        new_src: ip("2001:db8::1"),
        new_dst: ip("203.0.113.50"),
        encap: None,
    };
    assert!(db.update_sa(&bad).is_err());
    assert!(db.sa(&new_id).is_some());
}

#[test]
fn time_lifetimes_expire_soft_once_then_hard() {
    let t0 = Instant::now();
    let mut db = KeyingDb::default();
    db.add_sa(gcm_sa(0xc0ffee08, false), t0, |_, _| false)
        .unwrap();
    assert!(db.expire(t0 + Duration::from_secs(9)).is_empty());
    let soft = db.expire(t0 + Duration::from_secs(10));
    assert!(matches!(soft[..], [Event::Expire { hard: false, .. }]));
    assert!(db.expire(t0 + Duration::from_secs(15)).is_empty());
    let hard = db.expire(t0 + Duration::from_secs(20));
    assert!(matches!(hard[..], [Event::Expire { hard: true, .. }]));
    assert_eq!(db.len(), (0, 0));
}

#[test]
fn spis_handed_out_are_unique_and_bounded() {
    let now = Instant::now();
    let mut db = KeyingDb::default();
    // A generator that repeats itself: collisions are retried, then refused.
    let mut calls = 0u32;
    let a = db.get_spi(now, |_| false, || 5).unwrap();
    let e = db.get_spi(
        now,
        |_| false,
        || {
            calls += 1;
            5
        },
    );
    assert!(matches!(e, Err(KeyingError::Full(_))));
    assert_eq!(calls, 64);
    assert_eq!(a, 0xc000_0005);
    let mut n = 100u32;
    for _ in 1..MAX_PENDING_SPIS {
        db.get_spi(
            now,
            |_| false,
            || {
                n += 1;
                n
            },
        )
        .unwrap();
    }
    assert!(matches!(
        db.get_spi(now, |_| false, || 999_999),
        Err(KeyingError::Full(_))
    ));
    // Reservations lapse.
    assert!(db
        .get_spi(now + PENDING_SPI_LIFE, |_| false, || 999_999)
        .is_ok());
}

#[test]
fn address_ranges_become_the_fewest_prefixes() {
    let show = |a: &str, b: &str| -> Vec<String> {
        range_prefixes(ip(a), ip(b))
            .iter()
            .map(|p| p.to_string())
            .collect()
    };
    assert_eq!(show("192.0.2.0", "192.0.2.255"), ["192.0.2.0/24"]);
    assert_eq!(show("0.0.0.0", "255.255.255.255"), ["0.0.0.0/0"]);
    assert_eq!(
        show("::", "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
        ["::/0"]
    );
    assert_eq!(show("192.0.2.5", "192.0.2.5"), ["192.0.2.5/32"]);
    assert_eq!(
        show("192.0.2.1", "192.0.2.6"),
        [
            "192.0.2.1/32",
            "192.0.2.2/31",
            "192.0.2.4/31",
            "192.0.2.6/32"
        ]
    );
    assert_eq!(show("2001:db8::", "2001:db8::ffff"), ["2001:db8::/112"]);
    // Every address of a ragged range is covered exactly once.
    let ps = range_prefixes(ip("198.18.0.3"), ip("198.18.1.250"));
    let total: u64 = ps.iter().map(|p| 1u64 << (32 - p.len)).sum();
    assert_eq!(total, (256 + 250) - 3 + 1);
    assert!(range_prefixes(ip("::1"), ip("::fffe")).len() <= 254);
}

/// A rekey collision: three CHILD_SAs hold the outbound policy at once, and charon deletes
/// the redundant newest one first. The policy follows an SA that is still installed, never
/// the deleted one (which would drop the traffic as if no SA existed).
#[test]
fn a_policy_follows_a_live_sa_through_a_collision() {
    let now = Instant::now();
    let mut db = KeyingDb::default();
    for spi in [0xc0de_000a, 0xc0de_000b, 0xc0de_000c] {
        db.add_sa(gcm_sa(spi, false), now, |_, _| false).unwrap();
        db.add_policy(policy(PolicyDir::Out, Some(spi))).unwrap();
    }
    let action = |db: &KeyingDb| {
        let mut cfg = base_config();
        db.merge_into(&mut cfg);
        cfg.validate().unwrap();
        cfg.policies.last().unwrap().action
    };
    assert_eq!(action(&db), Action::Protect(0xc0de_000c));
    // The redundant SA goes, then charon drops its reference to the policy.
    let id = gcm_sa(0xc0de_000c, false).id;
    db.del_sa(&id).unwrap();
    assert_eq!(action(&db), Action::Protect(0xc0de_000b));
    let pid = policy(PolicyDir::Out, None).id;
    assert_eq!(db.del_policy(&pid, Some(0xc0de_000c), None), Ok(false));
    assert_eq!(action(&db), Action::Protect(0xc0de_000b));
    // The old SA's reference goes by name, not the newest one.
    assert_eq!(db.del_policy(&pid, Some(0xc0de_000a), None), Ok(false));
    assert_eq!(action(&db), Action::Protect(0xc0de_000b));
    assert_eq!(db.del_policy(&pid, Some(0xc0de_000b), None), Ok(true));
}
