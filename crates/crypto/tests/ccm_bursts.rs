//! espgw's AES-CCM against RustCrypto's `ccm`, an independent implementation that runs one
//! packet at a time: the portable CCM (src/aes_ccm.rs, the CBC-MAC chains of up to eight
//! packets advanced together) and, where intel-ipsec-mb is built in, AES-192-CCM from the
//! library's AES-192 CBC and counter mode (src/ipsec_mb_ccm.rs) and the library's own
//! AES-128/256-CCM. For random bursts of every key and ICV length, with and without ESN, of
//! texts from empty to many blocks (whole and partial), with ops too short to hold an ESP
//! packet among them, both seal to the same bytes, each opens what the other sealed, and a
//! tampered packet fails alone with its text zeroed.

use ccm::aead::generic_array::GenericArray;
use ccm::aead::{AeadInPlace, KeyInit};
use ccm::consts::{U11, U12, U16, U8};
use espgw_crypto::{all_providers, esp_key, Encryption, EspOp, Integrity, Suite};
use proptest::prelude::*;

/// RustCrypto's CCM for ESP (RFC 4309): nonce = salt || IV, AAD = SPI || seq (or SPI ||
/// seq high || seq low with ESN). Seals `esp` in place, writing the IV and ICV.
fn reference_seal(key: &[u8], salt: &[u8], icv_len: usize, esn: bool, esp: &mut [u8], seq: u64) {
    esp[8..16].copy_from_slice(&seq.to_be_bytes());
    let mut nonce = salt.to_vec();
    nonce.extend_from_slice(&esp[8..16]);
    let mut aad = esp[..4].to_vec();
    if esn {
        aad.extend_from_slice(&((seq >> 32) as u32).to_be_bytes());
    }
    aad.extend_from_slice(&esp[4..8]);
    let text_end = esp.len() - icv_len;
    let (body, icv) = esp.split_at_mut(text_end);
    let text = &mut body[16..];
    let n = GenericArray::from_slice(&nonce);
    macro_rules! run {
        ($aes:ty, $tag:ty) => {{
            let c = ccm::Ccm::<$aes, $tag, U11>::new_from_slice(key).unwrap();
            let t = c.encrypt_in_place_detached(n, &aad, text).unwrap();
            icv.copy_from_slice(&t);
        }};
    }
    match (key.len(), icv_len) {
        (16, 8) => run!(aes::Aes128, U8),
        (16, 12) => run!(aes::Aes128, U12),
        (16, 16) => run!(aes::Aes128, U16),
        (24, 8) => run!(aes::Aes192, U8),
        (24, 12) => run!(aes::Aes192, U12),
        (24, 16) => run!(aes::Aes192, U16),
        (32, 8) => run!(aes::Aes256, U8),
        (32, 12) => run!(aes::Aes256, U12),
        _ => run!(aes::Aes256, U16),
    }
}

/// One op of a burst: its text length (`None`: an op shorter than header, IV and ICV),
/// fill byte, and where (if anywhere) it is tampered with after sealing.
#[derive(Debug, Clone)]
struct Op {
    text: Option<usize>,
    fill: u8,
    tamper: Option<usize>,
}

fn op() -> impl Strategy<Value = Op> {
    (
        prop::option::weighted(0.95, 0usize..700),
        any::<u8>(),
        prop::option::weighted(0.25, any::<usize>()),
    )
        .prop_map(|(text, fill, tamper)| Op { text, fill, tamper })
}

fn esp_packet(op: &Op, icv_len: usize, seq: u64) -> Vec<u8> {
    match op.text {
        None => vec![op.fill; 16 + icv_len - 1 - (op.fill as usize % (16 + icv_len))],
        Some(len) => {
            let mut p = vec![0x4a, 0x2c, 0xbf, 0xe3];
            p.extend_from_slice(&(seq as u32).to_be_bytes());
            p.resize(16, 0);
            p.extend((0..len).map(|i| op.fill.wrapping_add((i as u8).wrapping_mul(31))));
            p.resize(16 + len + icv_len, 0);
            p
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn every_ccm_agrees_with_rustcrypto(
        key_len in prop::sample::select(vec![16usize, 24, 32]),
        icv_len in prop::sample::select(vec![8usize, 12, 16]),
        esn in any::<bool>(),
        key_seed in any::<u8>(),
        burst in prop::collection::vec(op(), 1..40),
        first_seq in 1u64..(1 << 40),
    ) {
        let material: Vec<u8> = (0..key_len + 3)
            .map(|i| (i as u8).wrapping_mul(29).wrapping_add(key_seed))
            .collect();
        let (key, salt) = material.split_at(key_len);
        let suite = Suite { enc: Encryption::AesCcm { key_len, icv_len }, integ: Integrity::None };
        for p in all_providers() {
        let esp = esp_key(&*p, suite, &material, &[], esn).unwrap();
        let seqs: Vec<u64> = (0..burst.len() as u64).map(|i| first_seq + i).collect();
        let plain: Vec<Vec<u8>> = burst.iter().zip(&seqs).map(|(o, &s)| esp_packet(o, icv_len, s)).collect();

        let mut by_key = plain.clone();
        {
            let mut ops: Vec<EspOp<'_>> = by_key.iter_mut().zip(&seqs).map(|(esp, &seq)| EspOp { esp, seq }).collect();
            esp.seal_burst(&mut ops);
        }
        let mut by_reference = plain.clone();
        for (i, (p, &seq)) in by_reference.iter_mut().zip(&seqs).enumerate() {
            if burst[i].text.is_some() {
                reference_seal(key, salt, icv_len, esn, p, seq);
            }
        }
        for i in 0..burst.len() {
            prop_assert!(by_key[i] == by_reference[i], "{}: op {} of {} ({:?}) sealed differently", p.name(), i, burst.len(), burst[i].text);
        }

        let mut want = vec![false; burst.len()];
        for (i, o) in burst.iter().enumerate() {
            if o.text.is_none() {
                continue;
            }
            want[i] = true;
            if let Some(at) = o.tamper {
                let at = at % by_key[i].len();
                by_key[i][at] ^= 0x01;
                want[i] = false;
            }
        }
        let mut ok = vec![true; burst.len()];
        {
            let mut ops: Vec<EspOp<'_>> = by_key.iter_mut().zip(&seqs).map(|(esp, &seq)| EspOp { esp, seq }).collect();
            esp.open_burst(&mut ops, &mut ok);
        }
        prop_assert_eq!(&ok, &want);
        for i in 0..burst.len() {
            let Some(len) = burst[i].text else {
                continue;
            };
            if want[i] {
                prop_assert_eq!(&by_key[i][16..16 + len], &plain[i][16..16 + len]);
            } else {
                prop_assert!(by_key[i][16..].iter().all(|&b| b == 0), "op {}: failed text not zeroed", i);
            }
        }
        }
    }
}
