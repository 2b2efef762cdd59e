//! The SA contract's server driven over a socket pair, as the kernel-espgw plugin drives
//! it: a session installs SAs and policies that the data plane's tables then hold.

use std::io::{Read, Write};
use std::net::IpAddr;
use std::os::unix::net::UnixStream;
use std::sync::Arc;
use std::time::Duration;

use espgw_config::{Action, Direction, Format};
use espgw_keying::frame::split;
use espgw_keying::message::{
    AddPolicy, AddSa, Lifetimes, PolicyDir, PolicyId, PolicyType, Proto, SaId, SaMode,
    TrafficSelector,
};
use zeroize::Zeroizing;

use super::*;
use crate::live::shared::PortFacts;

fn ip(s: &str) -> IpAddr {
    s.parse().unwrap()
}

fn shared() -> Arc<Shared> {
    let cfg = espgw_config::parse(
        espgw_config::DEFAULT_CONFIG,
        "default",
        Some(Format::Native),
    )
    .unwrap();
    let provider = espgw_crypto::provider(espgw_crypto::ProviderChoice::AwsLc).unwrap();
    let tables = Tables::build(&cfg, provider.as_ref(), None).unwrap();
    let facts = cfg
        .ports
        .iter()
        .map(|p| PortFacts {
            interface: p.name.clone(),
            kind: "memory",
            mac: p.mac,
            mtu: 1500,
            tun: false,
        })
        .collect();
    let mut s = Shared::new(
        tables,
        Default::default(),
        1,
        cfg,
        "default".into(),
        None,
        facts,
        provider,
        None,
    );
    s.keying = Some(Keying::new(Some(espgw_io::process::effective_uid())));
    Arc::new(s)
}

/// The plugin's end: one request, its reply.
struct Plugin {
    stream: UnixStream,
    buf: Vec<u8>,
    next_id: u32,
}

impl Plugin {
    fn read_message(&mut self) -> Message {
        loop {
            if let Some((f, used)) = split(&self.buf).unwrap() {
                let m = Message::decode(&f).unwrap();
                self.buf.drain(..used);
                return m;
            }
            let mut chunk = [0u8; 4096];
            let n = self.stream.read(&mut chunk).unwrap();
            assert!(n > 0, "the gateway closed the session");
            self.buf.extend_from_slice(&chunk[..n]);
        }
    }

    fn call(&mut self, r: Request) -> Reply {
        self.next_id += 1;
        let id = self.next_id;
        let bytes = Message::Request(id, r).encode().unwrap();
        self.stream.write_all(&bytes).unwrap();
        match self.read_message() {
            Message::Reply(rid, reply) => {
                assert_eq!(rid, id);
                reply
            }
            other => panic!("expected a reply, got {other:?}"),
        }
    }
}

fn connect(sh: &Arc<Shared>) -> Plugin {
    let (ours, theirs) = UnixStream::pair().unwrap();
    ours.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let s = sh.clone();
    std::thread::spawn(move || session(theirs, &s));
    Plugin {
        stream: ours,
        buf: Vec::new(),
        next_id: 0,
    }
}

fn net(a: &str, b: &str) -> TrafficSelector {
    TrafficSelector {
        proto: 0,
        from: ip(a),
        to: ip(b),
        from_port: 0,
        to_port: 65535,
    }
}

fn sa(spi: u32, inbound: bool, soft_seconds: u64) -> AddSa {
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
        reqid: 3,
        mode: SaMode::Tunnel,
        enc_alg: 20,
        enc_key: Zeroizing::new(vec![7; 36]),
        int_alg: 0,
        int_key: Zeroizing::new(Vec::new()),
        replay_window: 64,
        encap: None,
        esn: false,
        inbound,
        lifetime: Lifetimes {
            soft_seconds,
            hard_seconds: 3600,
            ..Lifetimes::default()
        },
        src_ts: Vec::new(),
        dst_ts: Vec::new(),
    }
}

fn out_policy(spi: Option<u32>) -> AddPolicy {
    AddPolicy {
        id: PolicyId {
            dir: PolicyDir::Out,
            src_ts: net("192.0.2.0", "192.0.2.255"),
            dst_ts: net("203.0.113.0", "203.0.113.255"),
        },
        kind: PolicyType::Ipsec,
        priority: 100,
        reqid: 3,
        endpoints: Some((ip("198.51.100.1"), ip("198.51.100.2"))),
        esp_spi: spi,
        ah_spi: None,
    }
}

fn ok_data(r: Reply) -> ReplyData {
    match r {
        Reply::Ok(d) => d,
        Reply::Error { message, .. } => panic!("refused: {message}"),
    }
}

#[test]
fn a_session_installs_queries_and_removes_negotiated_sas() {
    let sh = shared();
    let static_sas = sh.tables().sas.len();
    let mut p = connect(&sh);
    assert_eq!(
        ok_data(p.call(Request::Hello { version: 1 })).version,
        Some(1)
    );
    let spi_in = ok_data(p.call(Request::GetSpi {
        src: ip("198.51.100.2"),
        dst: ip("198.51.100.1"),
        proto: Proto::Esp,
    }))
    .spi
    .unwrap();
    assert!(spi_in >= 0xc000_0000);
    ok_data(p.call(Request::AddSa(Box::new(sa(spi_in, true, 0)))));
    ok_data(p.call(Request::AddSa(Box::new(sa(0xc0de_0001, false, 0)))));
    ok_data(p.call(Request::AddPolicy(out_policy(Some(0xc0de_0001)))));

    let t = sh.tables();
    assert_eq!(t.sas.len(), static_sas + 2);
    let out = t
        .sas
        .iter()
        .find(|s| s.direction == Direction::Out && s.spi == 0xc0de_0001)
        .unwrap();
    assert_eq!(out.config.suite.to_string(), "aes-256-gcm");
    assert!(t.spd_out.rules().iter().any(|r| r.action
        == espgw_core::spd::SpdAction::Protect(
            t.sas.iter().position(|s| s.spi == 0xc0de_0001).unwrap() as u32
        )));

    // A query reads the data plane's counters.
    let q = ok_data(p.call(Request::QuerySa(sa(spi_in, true, 0).id)));
    assert_eq!(q.usage, Some((0, 0)));
    assert_eq!(q.idle_seconds, None);

    // A refused request changes nothing.
    let mut bad = sa(0xc0de_0002, false, 0);
    bad.enc_alg = 23;
    assert!(matches!(
        p.call(Request::AddSa(Box::new(bad))),
        Reply::Error {
            code: ErrorCode::NotSupported,
            ..
        }
    ));
    assert_eq!(sh.tables().sas.len(), static_sas + 2);

    ok_data(p.call(Request::DelSa(sa(spi_in, true, 0).id)));
    assert_eq!(sh.tables().sas.len(), static_sas + 1);
    assert!(matches!(
        p.call(Request::DelSa(sa(spi_in, true, 0).id)),
        Reply::Error {
            code: ErrorCode::NotFound,
            ..
        }
    ));
    let k = sh.keying.as_ref().unwrap();
    assert_eq!(k.counters.sas_installed.load(Ordering::Relaxed), 2);
    assert_eq!(k.counters.sas_deleted.load(Ordering::Relaxed), 1);
}

#[test]
fn a_soft_time_lifetime_is_sent_as_an_expire_event() {
    let sh = shared();
    let mut p = connect(&sh);
    ok_data(p.call(Request::Hello { version: 1 }));
    ok_data(p.call(Request::AddSa(Box::new(sa(0xc0de_0100, false, 1)))));
    std::thread::sleep(Duration::from_millis(1100));
    let k = sh.keying.as_ref().unwrap();
    tick(&sh, k, &sh.tables());
    match p.read_message() {
        Message::Event(Event::Expire { id, hard }) => {
            assert_eq!(id.spi, 0xc0de_0100);
            assert!(!hard);
        }
        other => panic!("expected EXPIRE, got {other:?}"),
    }
    assert_eq!(k.counters.expired_soft.load(Ordering::Relaxed), 1);
    // Reported once.
    tick(&sh, k, &sh.tables());
    assert_eq!(k.counters.expired_soft.load(Ordering::Relaxed), 1);
}

#[test]
fn a_new_session_flushes_the_old_one_and_a_session_must_start_with_hello() {
    let sh = shared();
    let static_sas = sh.tables().sas.len();
    let mut p = connect(&sh);
    ok_data(p.call(Request::Hello { version: 1 }));
    ok_data(p.call(Request::AddSa(Box::new(sa(0xc0de_0200, false, 0)))));
    ok_data(p.call(Request::AddPolicy(out_policy(None))));
    let t = sh.tables();
    assert_eq!(t.sas.len(), static_sas + 1);
    // A trap policy without its SA drops and asks for negotiation.
    assert!(t
        .spd_out
        .rules()
        .iter()
        .any(|r| r.action == espgw_core::spd::SpdAction::Acquire(3) && r.priority < 0));

    let mut again = connect(&sh);
    ok_data(again.call(Request::Hello { version: 1 }));
    assert_eq!(sh.tables().sas.len(), static_sas);
    assert_eq!(sh.keying.as_ref().unwrap().len(), (0, 0));

    let mut rude = connect(&sh);
    assert!(matches!(
        rude.call(Request::FlushSas),
        Reply::Error {
            code: ErrorCode::InvalidArg,
            ..
        }
    ));
    let mut future = connect(&sh);
    assert!(matches!(
        future.call(Request::Hello { version: 9 }),
        Reply::Error {
            code: ErrorCode::NotSupported,
            ..
        }
    ));
}

#[test]
fn garbage_on_the_socket_closes_the_session_without_harm() {
    let sh = shared();
    let mut p = connect(&sh);
    ok_data(p.call(Request::Hello { version: 1 }));
    p.stream.write_all(&[0xff; 64]).unwrap();
    let mut b = [0u8; 16];
    // The gateway closes its end: the read sees the end of the stream.
    assert_eq!(p.stream.read(&mut b).unwrap(), 0);
    // And the gateway still answers a new daemon.
    let mut q = connect(&sh);
    ok_data(q.call(Request::Hello { version: 1 }));
}

/// Static SAs' SPIs are never handed out or taken by negotiated SAs; nor is an Action
/// naming a static SA affected by flushes.
#[test]
fn static_state_is_left_alone() {
    let sh = shared();
    let cfg = sh.config.lock().unwrap().clone();
    let static_out = cfg
        .sas
        .iter()
        .find(|s| s.direction == Direction::Out)
        .unwrap();
    let mut p = connect(&sh);
    ok_data(p.call(Request::Hello { version: 1 }));
    assert!(matches!(
        p.call(Request::AddSa(Box::new(sa(static_out.spi, false, 0)))),
        Reply::Error { .. }
    ));
    ok_data(p.call(Request::FlushSas));
    ok_data(p.call(Request::FlushPolicies));
    let t = sh.tables();
    assert_eq!(t.sas.len(), cfg.sas.len());
    assert!(cfg
        .policies
        .iter()
        .all(|p| !matches!(p.action, Action::Protect(s) if t.sas.iter().all(|x| x.spi != s))));
}
