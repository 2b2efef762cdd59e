//! Shared set-up for the fuzz targets: one gateway configuration with tunnel (IPv4 and
//! IPv6), transport, ESN and UDP-encapsulated SAs in both directions; AES-GCM with 16- and
//! 12-byte ICVs, and AES-CBC with HMAC-SHA-256 (inbound transport); AH with HMAC-SHA1-96
//! (transport, both directions, alone and around ESP in a bundle) and with AES-GMAC (IPv6
//! tunnel, inbound).
use std::sync::{Arc, OnceLock};

use espgw_core::neighbour::NeighbourCache;
use espgw_core::Tables;

pub const CONFIG: &str = r#"
[[port]]
name = "south"
addresses = ["198.51.100.1/24", "2001:db8:100::1/64"]
mtu = 1500

[[port]]
name = "north"
addresses = ["192.0.2.2/24", "2001:db8:2::2/64"]
mtu = 1500

[[sa]]
direction = "in"
spi = 0x100
mode = "ipv4-tunnel"
local = "192.0.2.2"
remote = "192.0.2.1"
aead = "aes-128-gcm"
key = "0x000102030405060708090a0b0c0d0e0f01020304"
replay_window = 64

[[sa]]
direction = "in"
spi = 0x200
mode = "ipv6-tunnel"
local = "2001:db8:2::2"
remote = "2001:db8:2::1"
aead = "aes-256-gcm"
key = "0x000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f01020304"
esn = true
udp_encap = true

[[sa]]
direction = "in"
spi = 0x300
mode = "transport"
cipher = "aes-256-cbc"
cipher_key = "0x000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f"
integrity = "hmac-sha256-128"
integrity_key = "0x0f0e0d0c0b0a09080706050403020100f0e0d0c0b0a090807060504030201000"

[[sa]]
direction = "in"
spi = 0x600
mode = "transport"
protocol = "ah"
integrity = "hmac-sha1-96"
integrity_key = "0x0102030405060708090a0b0c0d0e0f1011121314"
replay_window = 0

[[sa]]
direction = "in"
spi = 0x700
mode = "ipv6-tunnel"
local = "2001:db8:2::2"
remote = "2001:db8:2::1"
protocol = "ah"
integrity = "aes-128-gmac"
integrity_key = "0x000102030405060708090a0b0c0d0e0f01020304"
esn = true

[[sa]]
direction = "out"
spi = 0x600
mode = "transport"
protocol = "ah"
integrity = "hmac-sha1-96"
integrity_key = "0x0102030405060708090a0b0c0d0e0f1011121314"

[[sa]]
direction = "out"
spi = 0x300
mode = "transport"
cipher = "aes-256-cbc"
cipher_key = "0x000102030405060708090a0b0c0d0e0f000102030405060708090a0b0c0d0e0f"
integrity = "hmac-sha256-128"
integrity_key = "0x0f0e0d0c0b0a09080706050403020100f0e0d0c0b0a090807060504030201000"

[[sa]]
direction = "out"
spi = 0x400
mode = "ipv6-tunnel"
local = "2001:db8:2::2"
remote = "2001:db8:2::1"
aead = "aes-128-gcm"
key = "0x000102030405060708090a0b0c0d0e0f01020304"
udp_encap = true

[[sa]]
direction = "out"
spi = 0x500
mode = "transport"
aead = "aes-128-gcm"
key = "0x000102030405060708090a0b0c0d0e0f01020304"
icv = 12

[[policy]]
direction = "in"
src = "0.0.0.0/0"
dst = "0.0.0.0/0"
action = "protect"
sa = 0x100

[[policy]]
direction = "in"
src = "::/0"
dst = "::/0"
action = "protect"
sa = 0x200

[[policy]]
direction = "in"
src = "203.0.113.0/24"
dst = "198.51.100.0/24"
proto = "udp"
priority = 5
action = "protect"
sa = 0x300

[[policy]]
direction = "in"
src = "203.0.113.0/24"
dst = "198.51.100.0/24"
proto = "tcp"
priority = 5
action = "protect"
sa = 0x600

[[policy]]
direction = "in"
src = "203.0.113.0/24"
dst = "198.51.100.0/24"
proto = "icmp"
priority = 5
action = "protect"
sa = 0x300
ah_sa = 0x600

[[policy]]
direction = "out"
src = "198.51.100.0/24"
dst = "0.0.0.0/0"
action = "protect"
sa = 0x500

[[policy]]
direction = "out"
src = "198.51.100.0/24"
dst = "203.0.113.0/24"
proto = "tcp"
priority = 5
action = "protect"
sa = 0x600

[[policy]]
direction = "out"
src = "198.51.100.0/24"
dst = "203.0.113.0/24"
proto = "icmp"
priority = 5
action = "protect"
sa = 0x300
ah_sa = 0x600

[[policy]]
direction = "out"
src = "::/0"
dst = "::/0"
action = "protect"
sa = 0x400

[[policy]]
direction = "out"
src = "192.0.2.0/24"
dst = "0.0.0.0/0"
action = "bypass"

[[route]]
dst = "0.0.0.0/0"
port = 1

[[route]]
dst = "::/0"
port = 0
"#;

/// The tables, built once per process (keys with the portable back-end, so the fuzz
/// build needs no C library).
pub fn tables() -> Arc<Tables> {
    static T: OnceLock<Arc<Tables>> = OnceLock::new();
    T.get_or_init(|| {
        // Unvalidated as a file: these loopback tables open what they seal, with one key on
        // an SA of each direction, which a gateway's file may not do (Tables::build still
        // validates everything else).
        let cfg = espgw_config::parse_unvalidated(
            CONFIG,
            "fuzz.toml",
            None,
            espgw_config::CryptoPolicy::default(),
        )
        .expect("fuzz config");
        Arc::new(Tables::build(&cfg, &espgw_crypto::aws_lc::AwsLcProvider, None).expect("tables"))
    })
    .clone()
}

/// Tables whose neighbours are learned into a cache, as the live gateway's are (so next
/// hops can be unresolved, packets held, solicitations sent), built once per process; the
/// cache is emptied on every call so learned state does not carry over between inputs.
pub fn live_tables() -> (Arc<Tables>, Arc<NeighbourCache>) {
    static T: OnceLock<(Arc<Tables>, Arc<NeighbourCache>)> = OnceLock::new();
    let (t, cache) = T.get_or_init(|| {
        let cfg = espgw_config::parse_unvalidated(
            CONFIG,
            "fuzz.toml",
            None,
            espgw_config::CryptoPolicy::default(),
        )
        .expect("fuzz config");
        let cache = Arc::new(NeighbourCache::default());
        let mut t =
            Tables::build(&cfg, &espgw_crypto::aws_lc::AwsLcProvider, None).expect("tables");
        t.neighbours.dynamic = Some(cache.clone());
        (Arc::new(t), cache)
    });
    cache.clear();
    (t.clone(), cache.clone())
}
