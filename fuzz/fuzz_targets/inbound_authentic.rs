//! Authentic ESP around hostile plaintext: the fuzzer chooses the decrypted text (payload,
//! padding, pad length, next header) and the outer shape; the packet is sealed with a
//! real key, so decapsulation, trailer checks and the inbound policy see arbitrary
//! contents after a good ICV.
//!
//! Sealed and opened on each crypto back-end ([`espgw_fuzz::tables_each_backend`]:
//! aws-lc-rs, and intel-ipsec-mb with espgw's batch AES-GCM and ChaCha20-Poly1305 kernels
//! where built), the packet must come out the same on both: the same verdict and the same
//! bytes (for the AES-CBC SA, whose IV is drawn at random, the bytes of a forwarded packet
//! only).
#![no_main]
use std::sync::Arc;

use espgw_core::esp_out;
use espgw_core::packet::{Packet, Verdict};
use espgw_core::{Direction, Pipeline, Tables};
use espgw_wire::ipv4::Ipv4Repr;
use espgw_wire::ipv6::Ipv6Repr;
use libfuzzer_sys::fuzz_target;

/// The inbound ESP SAs of the fuzz configuration a packet is sealed for, chosen by the
/// input's first byte.
const INBOUND_SPIS: [u32; 5] = [0x100, 0x200, 0x300, 0x800, 0x900];

fuzz_target!(|data: &[u8]| {
    let Some((&shape, text)) = data.split_first() else {
        return;
    };
    let outcomes: Vec<_> = espgw_fuzz::tables_each_backend()
        .iter()
        .map(|t| seal_and_open(t, shape, text))
        .collect();
    espgw_fuzz::assert_backends_agree(&outcomes);
});

/// The packet that `shape` and `text` make, sealed with a real key on `tables` and put
/// through its inbound pipeline: its verdict and the bytes to compare (`None` where no
/// packet is made).
fn seal_and_open(
    tables: &Arc<Tables>,
    shape: u8,
    text: &[u8],
) -> Option<(Verdict, Option<Vec<u8>>)> {
    // 0x100 (IPv4 tunnel, AES-GCM), 0x200 (IPv6 tunnel, ESN, UDP, AES-GCM), 0x300
    // (transport over IPv4, AES-CBC+HMAC), 0x800 (IPv4 tunnel, ESN, ChaCha20-Poly1305),
    // 0x900 (IPv4 tunnel, ESN, AES-256-GMAC).
    let spi = INBOUND_SPIS[usize::from(shape) % INBOUND_SPIS.len()];
    let sa = tables
        .sas
        .iter()
        .find(|s| s.direction == Direction::In && s.spi == spi)?;
    let seq = u64::from(shape) / INBOUND_SPIS.len() as u64 + 1;
    // Whole cipher blocks (AES-CBC needs them; the others take any multiple of 4).
    let text = &text[..text.len() / sa.block_len * sa.block_len];
    let hdr = 8 + sa.iv_len;
    let mut esp = vec![0u8; hdr + text.len() + sa.icv_len];
    esp[hdr..hdr + text.len()].copy_from_slice(text);
    if esp_out::seal_packet(sa, seq, &mut esp).is_err() {
        return None;
    }
    let mut frame = vec![0u8; 14];
    match spi {
        0x200 => {
            frame[12..14].copy_from_slice(&0x86ddu16.to_be_bytes());
            let mut ip = vec![0u8; 40];
            let mut udp = vec![0x11, 0x94, 0x11, 0x94, 0, 0, 0, 0];
            udp[4..6].copy_from_slice(&((8 + esp.len()) as u16).to_be_bytes());
            let _ = Ipv6Repr {
                src: "2001:db8:2::1".parse().unwrap(),
                dst: "2001:db8:2::2".parse().unwrap(),
                next_header: 17,
                traffic_class: shape,
                flow_label: 0,
                hop_limit: 64,
                payload_len: 8 + esp.len(),
            }
            .emit(&mut ip);
            frame.extend_from_slice(&ip);
            frame.extend_from_slice(&udp);
        }
        _ => {
            frame[12..14].copy_from_slice(&0x0800u16.to_be_bytes());
            let mut ip = vec![0u8; 20];
            let (src, dst) = if spi == 0x300 {
                ([203, 0, 113, 5], [198, 51, 100, 5])
            } else {
                ([192, 0, 2, 1], [192, 0, 2, 2])
            };
            let _ = Ipv4Repr {
                src: src.into(),
                dst: dst.into(),
                protocol: 50,
                tos: shape,
                ttl: 64,
                ident: 0,
                dont_fragment: true,
                payload_len: esp.len(),
            }
            .emit(&mut ip);
            frame.extend_from_slice(&ip);
        }
    }
    frame.extend_from_slice(&esp);
    let mut p = Packet::new();
    if p.load(&frame).is_err() {
        return None;
    }
    let mut pipe = Pipeline::new(tables.clone());
    let mut pkts = vec![p];
    pipe.process(Direction::In, &mut pkts);
    // The AEAD SAs' IV is the sequence number, so their packets are the same bytes on
    // both back-ends whatever happens to them; 0x300's AES-CBC IV is drawn at random, so
    // only what it forwards (decrypted) can be compared.
    let same_bytes = spi != 0x300;
    pkts.first().map(|p| {
        let compare = same_bytes || matches!(p.verdict, Verdict::Forward(_));
        (p.verdict, compare.then(|| p.data().to_vec()))
    })
}
