//! Shared set-up for the fuzz targets: one gateway configuration with tunnel (IPv4 and
//! IPv6), transport, ESN and UDP-encapsulated SAs in both directions; AES-GCM with 16- and
//! 12-byte ICVs, AES-CBC with HMAC-SHA-256 (transport) and ChaCha20-Poly1305 (IPv4
//! tunnel, ESN inbound: the batch kernel's two AAD lengths, 8 bytes out and 12 in); ESP
//! AES-GMAC with ESN (IPv4 tunnel, inbound: the shim's gathered AAD); AH with HMAC-SHA1-96
//! (transport, both directions, alone and around ESP in a bundle) and with AES-GMAC (IPv6
//! tunnel, inbound).
use std::sync::{Arc, OnceLock};

use espgw_core::neighbour::NeighbourCache;
use espgw_core::Tables;
use espgw_crypto::CryptoProvider;

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
direction = "in"
spi = 0x800
mode = "ipv4-tunnel"
local = "192.0.2.2"
remote = "192.0.2.1"
aead = "chacha20-poly1305"
key = "0x202122232425262728292a2b2c2d2e2f303132333435363738393a3b3c3d3e3f07000000"
esn = true

[[sa]]
direction = "in"
spi = 0x900
mode = "ipv4-tunnel"
local = "192.0.2.2"
remote = "192.0.2.1"
aead = "aes-256-gmac"
key = "0x606162636465666768696a6b6c6d6e6f707172737475767778797a7b7c7d7e7f0d000000"
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
spi = 0x800
mode = "ipv4-tunnel"
local = "192.0.2.2"
remote = "192.0.2.1"
aead = "chacha20-poly1305"
key = "0x404142434445464748494a4b4c4d4e4f505152535455565758595a5b5c5d5e5f0b000000"

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
direction = "in"
src = "198.19.0.0/16"
dst = "0.0.0.0/0"
priority = 5
action = "protect"
sa = 0x800

[[policy]]
direction = "in"
src = "198.18.128.0/17"
dst = "0.0.0.0/0"
priority = 5
action = "protect"
sa = 0x900

[[policy]]
direction = "out"
src = "198.51.100.0/24"
dst = "0.0.0.0/0"
action = "protect"
sa = 0x500

[[policy]]
direction = "out"
src = "198.51.100.0/24"
dst = "198.19.0.0/16"
priority = 5
action = "protect"
sa = 0x800

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

/// The tables, built once per process (keys with the portable back-end). Their SAs' state
/// (replay windows, counters) carries over from one input to the next.
pub fn tables() -> Arc<Tables> {
    static T: OnceLock<Arc<Tables>> = OnceLock::new();
    T.get_or_init(|| Arc::new(build_tables())).clone()
}

/// The same tables once on each crypto back-end this build and CPU have, built once per
/// process: the portable aws-lc-rs one first, then, where espgw was built with
/// intel-ipsec-mb and the CPU runs it, the gateway's default (`default_provider`: the
/// library's C shim and espgw's batch AES-GCM and ChaCha20-Poly1305 kernels), so that
/// hostile packets reach the C code the gateway runs too. Fed the same inputs in the same order, the sets' SA state
/// evolves alike.
pub fn tables_each_backend() -> Vec<Arc<Tables>> {
    static T: OnceLock<Vec<Arc<Tables>>> = OnceLock::new();
    T.get_or_init(|| {
        let mut all = vec![tables()];
        all.extend(
            backends()
                .iter()
                .skip(1)
                .map(|p| Arc::new(build_tables_on(p.as_ref()))),
        );
        all
    })
    .clone()
}

/// The crypto back-ends the fuzz tables are built on: aws-lc-rs, then the gateway's
/// default (`default_provider`) where it is another.
fn backends() -> Vec<Arc<dyn CryptoProvider>> {
    let portable: Arc<dyn CryptoProvider> = Arc::new(espgw_crypto::aws_lc::AwsLcProvider);
    let fast = espgw_crypto::default_provider();
    if fast.name() == portable.name() {
        vec![portable]
    } else {
        vec![portable, fast]
    }
}

/// Fresh tables of [`CONFIG`] on the portable back-end.
pub fn build_tables() -> Tables {
    build_tables_on(&espgw_crypto::aws_lc::AwsLcProvider)
}

/// Fresh tables of [`CONFIG`], their keys on `provider`.
pub fn build_tables_on(provider: &dyn CryptoProvider) -> Tables {
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
    Tables::build(&cfg, provider, None).expect("tables")
}

/// Tables whose neighbours are learned into a cache, as the live gateway's are (so next
/// hops can be unresolved, packets held, solicitations sent), once on each crypto back-end
/// as [`tables_each_backend`] has them, built once per process; every cache is emptied on
/// every call so learned state does not carry over between inputs.
pub fn live_tables_each_backend() -> Vec<(Arc<Tables>, Arc<NeighbourCache>)> {
    static T: OnceLock<Vec<(Arc<Tables>, Arc<NeighbourCache>)>> = OnceLock::new();
    let sets = T.get_or_init(|| {
        backends()
            .iter()
            .map(|provider| {
                let cache = Arc::new(NeighbourCache::default());
                let mut t = build_tables_on(provider.as_ref());
                t.neighbours.dynamic = Some(cache.clone());
                (Arc::new(t), cache)
            })
            .collect()
    });
    for (_, cache) in sets {
        cache.clear();
    }
    sets.clone()
}

/// Asserts that every crypto back-end's outcome of one input is the first's (the
/// portable one's, printed as `left`): a difference is a back-end accepting, refusing,
/// decrypting or sealing what the other does not.
pub fn assert_backends_agree<T: PartialEq + std::fmt::Debug>(outcomes: &[T]) {
    if let Some((first, rest)) = outcomes.split_first() {
        for (i, o) in rest.iter().enumerate() {
            assert_eq!(
                first,
                o,
                "the crypto back-ends disagree (left: aws-lc-rs, right: back-end {})",
                i + 1
            );
        }
    }
}

/// Buffers a fuzzing node starts with ([`espgw_core::Node::with_buffers`]): a full pool is
/// about 2 MB of buffers, allocated and freed for every input under AddressSanitizer (the
/// whole-path targets ran 225-620 inputs a second with it). The pool grows when a test
/// needs more.
pub const NODE_BUFFERS: usize = 16;

/// The frames of an input of the multi-frame targets (`inbound`, `host`): a control byte,
/// then up to `max` frames separated by 0xa5 (so that bursts mix good and bad frames);
/// bit i of the control byte makes frame i's checksums right ([`fix_checksums`]).
pub fn frames(data: &[u8], max: usize) -> Vec<Vec<u8>> {
    let Some((&fix, data)) = data.split_first() else {
        return Vec::new();
    };
    data.split(|&b| b == 0xa5)
        .take(max)
        .enumerate()
        .map(|(i, f)| {
            let mut f = f.to_vec();
            if i < 8 && fix & (1 << i) != 0 {
                fix_checksums(&mut f);
            }
            f
        })
        .collect()
}

/// Makes right the checksums a receiver verifies in the Ethernet frame `frame`, so that
/// mutated frames get past them to what lies behind: the IPv4 header checksum (over the
/// header length its IHL names), and the ICMPv6 checksum of an ICMPv6 message right after
/// an IPv6 header (neighbour discovery checks it). No fuzzer guesses a 16-bit sum, so
/// without this nearly every mutation of an IP frame stops at the checksum. Frames too
/// short for what they claim are left as they are.
pub fn fix_checksums(frame: &mut [u8]) {
    let Some((eth, ip)) = frame.split_at_mut_checked(14) else {
        return;
    };
    match [eth[12], eth[13]] {
        [0x08, 0x00] => fix_ipv4_header(ip),
        [0x86, 0xdd] => fix_icmpv6(ip),
        _ => {}
    }
}

fn fix_ipv4_header(ip: &mut [u8]) {
    let Some(&first) = ip.first() else {
        return;
    };
    let hl = usize::from(first & 0x0f) * 4;
    let Some(h) = ip.get_mut(..hl) else {
        return;
    };
    if hl < 20 {
        return;
    }
    h[10..12].fill(0);
    let c = espgw_wire::checksum::checksum(h);
    h[10..12].copy_from_slice(&c.to_be_bytes());
}

fn fix_icmpv6(ip: &mut [u8]) {
    const ICMPV6: u8 = 58;
    if ip.len() < 44 || ip[6] != ICMPV6 {
        return;
    }
    let payload_len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
    let (hdr, rest) = ip.split_at_mut(40);
    let Some(body) = rest.get_mut(..payload_len) else {
        return;
    };
    if body.len() < 4 {
        return;
    }
    let src: [u8; 16] = hdr[8..24].try_into().expect("16 bytes");
    let dst: [u8; 16] = hdr[24..40].try_into().expect("16 bytes");
    body[2..4].fill(0);
    let c = espgw_core::host::icmpv6_checksum(&src, &dst, body);
    body[2..4].copy_from_slice(&c.to_be_bytes());
}

/// What a node did with a burst: the frames it sent, per port, and its drops by reason.
#[derive(Debug, PartialEq, Eq)]
pub struct Outcome {
    pub sent: Vec<Vec<Vec<u8>>>,
    pub drops: Vec<u64>,
}

impl Outcome {
    /// The outcome without the sent bytes: per port the frames' lengths, and the drops.
    /// What two back-ends must agree on where sealing draws IVs at random.
    pub fn shape(&self) -> (Vec<Vec<usize>>, &[u64]) {
        let lens = self
            .sent
            .iter()
            .map(|q| q.iter().map(Vec::len).collect())
            .collect();
        (lens, &self.drops)
    }
}

/// `frames` received as one burst on `port` by a fresh node over `tables`.
pub fn run_node(tables: Arc<Tables>, port: u16, frames: &[Vec<u8>]) -> Outcome {
    let mut node = espgw_core::Node::with_buffers(tables, Arc::default(), Vec::new(), NODE_BUFFERS);
    let mut tx = espgw_core::Transmit::new(2, 32);
    let mut burst = Vec::new();
    for f in frames {
        let mut p = node.pool().get();
        match p.load(f) {
            Ok(()) => burst.push(p),
            Err(_) => node.pool().put(p),
        }
    }
    node.receive(port, &mut burst, std::time::Instant::now(), &mut tx);
    let sent = (0..tx.ports())
        .map(|q| tx.queue(q).iter().map(|p| p.data().to_vec()).collect())
        .collect();
    Outcome {
        sent,
        drops: node.counters().drops.to_vec(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Where intel-ipsec-mb is built and runs on this CPU, the whole-path targets see it:
    /// a second set of tables on the gateway's default provider.
    #[test]
    fn each_backend_includes_the_gateways_default() {
        let fast = espgw_crypto::provider(espgw_crypto::ProviderChoice::IpsecMb).is_ok();
        let sets = tables_each_backend();
        assert_eq!(sets.len(), if fast { 2 } else { 1 });
        assert!(!Arc::ptr_eq(&sets[0], sets.last().unwrap()) || !fast);
        // The `node` target's sets: as many, each with a neighbour cache of its own (one
        // node's learning must not answer the other's solicitations).
        let live = live_tables_each_backend();
        assert_eq!(live.len(), sets.len());
        assert!(live.iter().all(|(t, c)| t.neighbours.dynamic.is_some()
            && Arc::ptr_eq(t.neighbours.dynamic.as_ref().unwrap(), c)));
        assert!(live.len() == 1 || !Arc::ptr_eq(&live[0].1, &live[1].1));
    }

    /// The targets' agreement check passes on equal outcomes (one back-end or several)
    /// and stops on the first that differs.
    #[test]
    fn backends_agree_only_on_equal_outcomes() {
        assert_backends_agree::<u8>(&[]);
        assert_backends_agree(&[1]);
        assert_backends_agree(&[(vec![42], 1), (vec![42], 1)]);
        let differ = std::panic::catch_unwind(|| assert_backends_agree(&[3, 3, 4]));
        let message = differ.expect_err("3, 3, 4 must not agree");
        let text = message
            .downcast_ref::<String>()
            .expect("a formatted message");
        assert!(text.contains("back-end 2"), "{text}");
    }

    /// RFC 1071's sum over `data`, folded: 0xffff (or 0) for data holding its own checksum.
    fn folded_sum(data: &[u8]) -> u16 {
        let mut s: u32 = data
            .chunks(2)
            .map(|c| u32::from(u16::from_be_bytes([c[0], *c.get(1).unwrap_or(&0)])))
            .sum();
        while s >> 16 != 0 {
            s = (s & 0xffff) + (s >> 16);
        }
        s as u16
    }

    /// The committed seeds (written by scapy, `make-seeds.py`) are what they claim: ESP
    /// and AH that espgw authenticates and decapsulates, and plaintext it encrypts.
    #[test]
    fn the_seeds_pass_the_gateway() {
        use espgw_core::{Node, Transmit};
        use std::sync::Arc;
        use std::time::Instant;
        let seeds = concat!(env!("CARGO_MANIFEST_DIR"), "/seeds");
        let run = |port: u16, frames: Vec<Vec<u8>>| {
            let mut node = Node::new(Arc::new(build_tables()), Arc::default(), Vec::new());
            let mut tx = Transmit::new(2, 32);
            let mut pkts: Vec<_> = frames
                .iter()
                .map(|f| {
                    let mut p = node.pool().get();
                    p.load(f).expect("frame fits");
                    p
                })
                .collect();
            node.receive(port, &mut pkts, Instant::now(), &mut tx);
            // The SPI of the first ESP-in-IPv4 frame sent on the unprotected port.
            let spi = tx.queue(1).first().and_then(|p| {
                let d = p.data();
                (d.get(23) == Some(&50)).then(|| u32::from_be_bytes(d[34..38].try_into().unwrap()))
            });
            (node.counters().clone(), spi)
        };
        for name in [
            "esp-v4-tunnel-gcm",
            "esp-v6-udp-esn-gcm",
            "esp-transport-cbc-sha256",
            "esp-v4-tunnel-esn-chacha",
            "esp-v4-tunnel-esn-gmac",
        ] {
            for fixed in ["", "-fixed"] {
                let data = std::fs::read(format!("{seeds}/inbound/{name}{fixed}")).unwrap();
                let (c, _) = run(1, frames(&data, 8));
                assert_eq!(c.decrypted, 3, "{name}{fixed}");
            }
        }
        // AH alone: authenticated and passed on (no ESP to decrypt), nothing dropped for
        // its ICV or its policy.
        let data = std::fs::read(format!("{seeds}/inbound/ah-transport-sha1")).unwrap();
        let (c, _) = run(1, frames(&data, 8));
        assert_eq!(c.rx_packets, 3);
        for r in [
            espgw_core::DropReason::AuthFailed,
            espgw_core::DropReason::PolicyMismatch,
            espgw_core::DropReason::Malformed,
        ] {
            assert_eq!(c.drops[r as usize], 0, "{r:?}");
        }
        for name in [
            "udp-transport-gcm",
            "icmp-bundle",
            "v6-tunnel-udp",
            "udp-tunnel-chacha",
        ] {
            let data = std::fs::read(format!("{seeds}/outbound/{name}")).unwrap();
            let (c, _) = run(0, vec![data[1..].to_vec()]);
            assert_eq!(c.encrypted, 1, "{name}");
        }
        // 198.19.0.0/16 goes to the ChaCha20-Poly1305 tunnel, not the catch-all transport SA.
        let data = std::fs::read(format!("{seeds}/outbound/udp-tunnel-chacha")).unwrap();
        assert_eq!(run(0, vec![data[1..].to_vec()]).1, Some(0x800));
    }

    #[test]
    fn an_ipv4_header_with_options_gets_its_checksum() {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[0x08, 0x00]);
        // IHL 6: 24 bytes of header, then a payload the checksum must not cover.
        f.extend_from_slice(&[0x46, 0, 0, 28, 0, 1, 0, 0, 64, 17, 0xde, 0xad]);
        f.extend_from_slice(&[192, 0, 2, 1, 192, 0, 2, 2, 1, 1, 0, 0, 9, 9, 9, 9]);
        fix_checksums(&mut f);
        assert_eq!(folded_sum(&f[14..38]), 0xffff);
        assert_eq!(&f[38..], &[9, 9, 9, 9]);
    }

    #[test]
    fn icmpv6_gets_its_checksum_and_short_frames_are_left_alone() {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&[0x86, 0xdd]);
        let mut ip = vec![0x60, 0, 0, 0, 0, 8, 58, 255];
        ip.extend_from_slice(&[0x20, 0x01, 0x0d, 0xb8].repeat(8));
        ip.extend_from_slice(&[135, 0, 0x12, 0x34, 0, 0, 0, 0]);
        f.extend_from_slice(&ip);
        let unfixed = f.clone();
        fix_checksums(&mut f);
        let body = &f[54..62];
        // The pseudo-header (RFC 8200 §8.1) and the message sum to all ones.
        let mut pseudo = f[22..54].to_vec();
        pseudo.extend_from_slice(&[0, 0, 0, 8, 0, 0, 0, 58]);
        pseudo.extend_from_slice(body);
        assert_eq!(folded_sum(&pseudo), 0xffff);

        // Cut anywhere, the message is incomplete: left as it is, no panic.
        for len in 0..unfixed.len() {
            let mut short = unfixed[..len].to_vec();
            fix_checksums(&mut short);
            assert_eq!(short, unfixed[..len], "cut at {len}");
        }
        let mut bad_ihl = vec![0u8; 14];
        bad_ihl[12..14].copy_from_slice(&[0x08, 0x00]);
        bad_ihl.extend_from_slice(&[0x4f, 0, 0, 20]);
        let before = bad_ihl.clone();
        fix_checksums(&mut bad_ihl);
        assert_eq!(bad_ihl, before);
    }
}
