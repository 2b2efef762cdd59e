//! Any bytes as what an IKE daemon sends on the keying socket: split into frames and
//! decoded, or refused with a reason, never a panic; a message that decodes encodes to one
//! that decodes the same; requests are applied to the negotiated database and merged into a
//! configuration, which either validates or is refused (the gateway then keeps its state).
#![no_main]
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use espgw_keying::frame::split;
use espgw_keying::{KeyingDb, Message, Request};
use libfuzzer_sys::fuzz_target;

/// The built-in configuration, parsed once per process: parsing its TOML for every input
/// took most of each run's time (under AddressSanitizer).
fn default_config() -> &'static espgw_config::Config {
    static C: OnceLock<espgw_config::Config> = OnceLock::new();
    C.get_or_init(|| {
        espgw_config::parse(
            espgw_config::DEFAULT_CONFIG,
            "default",
            Some(espgw_config::Format::Native),
        )
        .expect("the default configuration parses")
    })
}

fuzz_target!(|data: &[u8]| {
    let t0 = Instant::now();
    let mut db = KeyingDb::default();
    let mut rest = data;
    let mut n = 0u32;
    while let Ok(Some((f, used))) = split(rest) {
        rest = &rest[used..];
        n += 1;
        let Ok(m) = Message::decode(&f) else { continue };
        let again = m.encode().expect("a decoded message encodes");
        let (f2, _) = split(&again).expect("frames").expect("whole");
        assert_eq!(Message::decode(&f2).expect("decodes again"), m);
        let now = t0 + Duration::from_secs(u64::from(n));
        if let Message::Request(_, r) = m {
            let _ = match r {
                Request::GetSpi { .. } => db.get_spi(now, |_| false, || n).map(|_| ()),
                Request::AddSa(a) => db.add_sa(*a, now, |_, _| false),
                Request::UpdateSa(u) => db.update_sa(&u),
                Request::DelSa(id) => db.del_sa(&id).map(|_| ()),
                Request::AddPolicy(p) => db.add_policy(p),
                Request::DelPolicy {
                    id,
                    esp_spi,
                    ah_spi,
                } => db.del_policy(&id, esp_spi, ah_spi).map(|_| ()),
                Request::FlushSas => {
                    db.flush_sas();
                    Ok(())
                }
                _ => Ok(()),
            };
            let _ = db.expire(now);
        }
    }
    let mut cfg = default_config().clone();
    db.merge_into(&mut cfg);
    let _ = cfg.validate();
});
